"""Write awa-fast's synchronous code from its asyncio code, so each is written once.

Each module of MODULES ends with its asyncio source, after the marker line; its
synchronous twin, the module of the same name with ``_sync`` added, is generated from it:
``async`` and ``await`` dropped, ``Awaitable[T]`` read as ``T``, ``asyncio.to_thread(f,
...)`` as ``f(...)``, ``asyncio.sleep`` as ``time.sleep`` (the module imports ``time``), and
the names of NAMES swapped in code and in strings. The twin
imports what the module defines above the marker (what both sides share, and what differs
for real: the clients' mixins), and the twins of the other modules' names. ruff then drops
the imports it does not use and formats it.

    python tools/async_to_sync.py            rewrite the generated modules
    python tools/async_to_sync.py --check    exit 1 if any of them is not current
    (--root DIR: of another copy of the tree)
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from itertools import accumulate
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "pyproject.toml")  # ruff's settings, wherever the module is
MODULES = (
    "awa_fast/producer.py",
    "awa_fast/transaction.py",
    "awa_fast/client_pool.py",
    "awa_fast/client.py",
    "awa_fast/paced.py",
)
SOURCE = "# ---- asyncio source: its synchronous twin is generated from it ----\n"
NAMES = {
    "AbstractAsyncContextManager": "AbstractContextManager",
    "AsyncClient": "Client",
    "AsyncClientPool": "ClientPool",
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncExitStack": "ExitStack",
    "AsyncIterator": "Iterator",
    "AsyncRawCursor": "RawCursor",
    "Transaction": "SyncTransaction",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "_AsyncOnly": "_SyncOnly",
    "_execute_async": "_execute",
    "_insert_many_async": "_insert_many",
    "_reached_async": "_reached",
    "asynccontextmanager": "contextmanager",
    "check_primary_async": "check_primary",
    "drive_async": "drive",
    "enter_async_context": "enter_context",
    "insert_async": "insert",
    "insert_many_async": "insert_many",
    "insert_paced_async": "insert_paced",
    "insert_prepared_async": "insert_prepared",
    "_admit_async": "_admit",
    "_until_room_async": "_until_room",
}
# In strings (docstrings): the names above and "asyncio" as an adjective are swapped, and
# an example's "async with" and "await" made synchronous.
WORDS = {**NAMES, "asyncio": "synchronous"}


def to_sync(source: str) -> str:
    """``source`` made synchronous, comments and layout kept (ruff formats it after)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    line_starts = list(accumulate((len(line) for line in source.splitlines(True)), initial=0))

    def at(position: tuple[int, int]) -> int:
        return line_starts[position[0] - 1] + position[1]

    edits: list[tuple[int, int, str]] = []
    i = 0
    while i < len(tokens):
        tok, words = tokens[i], [t.string for t in tokens[i : i + 6]]
        if tok.string == "await" or words[:2] in (["async", "def"], ["async", "with"]):
            edits.append((at(tok.start), at(tokens[i + 1].start), ""))
        elif words[:2] == ["Awaitable", "["]:
            edits.append((at(tok.start), at(tokens[i + 1].end), ""))
            close = _closing(tokens, i + 1)
            edits.append((at(tokens[close].start), at(tokens[close].end), ""))
        elif words[:3] == ["asyncio", ".", "sleep"]:
            edits.append((at(tok.start), at(tok.end), "time"))
        elif words[:4] == ["asyncio", ".", "to_thread", "("] and words[5] == ",":
            edits.append((at(tok.start), at(tokens[i + 6].start), f"{words[4]}("))
            i += 5  # on past the function's name and the comma
        elif tok.type == tokenize.NAME and tok.string in NAMES:
            edits.append((at(tok.start), at(tok.end), NAMES[tok.string]))
        elif tok.type == tokenize.STRING:
            edits.append((at(tok.start), at(tok.end), _prose(tok.string)))
        i += 1
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def _closing(tokens: list[tokenize.TokenInfo], opening: int) -> int:
    """The index of the bracket closing the one at ``opening``."""
    depth = 0
    for index in range(opening, len(tokens)):
        depth += {"[": 1, "]": -1}.get(tokens[index].string, 0)
        if depth == 0:
            return index
    raise ValueError("unbalanced brackets")


def _prose(text: str) -> str:
    text = re.sub(r"\b(?:async (?=with\b)|await )", "", text)
    return re.sub(r"\w+", lambda word: WORDS.get(word[0], word[0]), text)


def twin_of(module: str) -> str:
    """The generated module's path: ``awa_fast/client.py`` -> ``awa_fast/client_sync.py``."""
    return module.removesuffix(".py") + "_sync.py"


def dotted(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def parts(module: str, text: str) -> tuple[str, str]:
    """The module's hand-written head and its asyncio source."""
    head, mark, source = text.partition(SOURCE)
    if not mark:
        raise SystemExit(f"{module}: the marker line of {__file__} is missing")
    return head, source


def defined(code: str) -> list[str]:
    """The names ``code`` defines at its top level (imports aside)."""
    names = []
    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def imports(code: str) -> str:
    """The import statements at ``code``'s top level (``__future__``'s aside), their asyncio
    names made synchronous but in imports from MODULES, whose twins import themselves."""
    lines = code.splitlines(keepends=True)
    ours = {dotted(module) for module in MODULES}
    made = []
    for node in ast.parse(code).body:
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        text = "".join(lines[node.lineno - 1 : node.end_lineno])
        source = getattr(node, "module", None)
        if source != "__future__":
            made.append(text if source in ours else to_sync(text))
    return "".join(made)


def generate(module: str, text: str, twins: dict[str, list[str]]) -> str:
    """The twin of ``module`` (whose text is ``text``), made anew from its asyncio source.
    ``twins`` names, by module, the names each generated module defines."""
    head, source = parts(module, text)
    name = dotted(module)
    shared = ", ".join(defined(head))
    twin_imports = [
        f"from {dotted(twin_of(other))} import {', '.join(names)}\n"
        + f"from awa_fast import {dotted(twin_of(other)).rpartition('.')[2]}\n"
        for other, names in twins.items()
        if other != module
    ]
    code = to_sync(source)
    for other, names in twins.items():  # ``producer.insert`` is the twin's now
        alias = dotted(other).rpartition(".")[2]
        twin_alias = dotted(twin_of(other)).rpartition(".")[2]
        code = re.sub(rf"\b{alias}\.({'|'.join(names)})\b", rf"{twin_alias}.\1", code)
    new = (
        f'"""The synchronous twin of :mod:`{name}`, generated from its asyncio code by\n'
        f'tools/async_to_sync.py: do not edit."""\n\n'
        "from __future__ import annotations\n\n"
        + imports(head)
        + "".join(twin_imports)
        + (f"from {name} import {shared}\n" if shared else "")
        + f"\n\n{code}"
    )
    return _ruff(twin_of(module), new)


def _ruff(module: str, text: str) -> str:
    """``text`` with the imports it does not use dropped, sorted, and formatted."""
    base = [sys.executable, "-m", "ruff"]
    steps = (
        ["check", "--fix", "--select", "F401,I001", "--quiet", "--config", CONFIG],
        ["format", "--config", CONFIG],
    )
    for step in steps:
        done = subprocess.run(
            [*base, *step, "--stdin-filename", module, "-"],
            input=text,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise SystemExit(f"{module}: ruff {step[0]} failed:\n{done.stderr}{done.stdout}")
        text = done.stdout
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description="Generate the synchronous code.")
    parser.add_argument("--check", action="store_true", help="change nothing, exit 1 if stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree to read and write")
    args = parser.parse_args()
    stale, twins = [], {}
    for module in MODULES:  # each after the modules whose twins it uses
        text = (args.root / module).read_text()
        new = generate(module, text, twins)
        twins[module] = [n for n in defined(new) if n not in defined(parts(module, text)[0])]
        path = args.root / twin_of(module)
        if not path.exists() or path.read_text() != new:
            stale.append(twin_of(module))
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print("stale generated code, run python tools/async_to_sync.py:", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
