"""The package's layers, read from its imports: each module imports only its own group and
the tiers below it (docs/architecture.md, "Layers"), and no source file grows past what a
reader takes in at once. A new module lands in a group by the longest prefix it matches."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import awa_fast

PACKAGE = Path(awa_fast.__file__).parent
REPOSITORY = PACKAGE.parent
MAX_LINES = 600

# Tiers, lowest first; each tier's groups sit side by side and do not import each other.
TIERS: list[dict[str, tuple[str, ...]]] = [
    {
        "base": (
            "awa_fast._core",
            "awa_fast.errors",
            "awa_fast.types",
            "awa_fast.logs",
            "awa_fast.cron",
            "awa_fast.validation",
            "awa_fast.codec",
            "awa_fast.callback_rules",
            "awa_fast.callback_contract",
            "awa_fast.outcomes",
            "awa_fast.tracing",
        )
    },
    {"db": ("awa_fast.db",)},
    {
        "jobs": (
            "awa_fast.producer",
            "awa_fast.producer_sync",
            "awa_fast.unique",
            "awa_fast.backpressure",
            "awa_fast.transaction",
            "awa_fast.transaction_sync",
            "awa_fast.admin",
            "awa_fast.batch_ops",
            "awa_fast.descriptors",
            "awa_fast.worker",
            "awa_fast.partitioned",
            "awa_fast.bridge",
            "awa_fast.localpg",
        )
    },
    {"lifecycle": ("awa_fast.lifecycle",)},
    {"maintenance": ("awa_fast.maintenance",)},
    {
        "runtime shared": (
            "awa_fast.runtime.config",
            "awa_fast.runtime.options",
            "awa_fast.runtime.loops",
            "awa_fast.runtime.claimed",
            "awa_fast.runtime.capacity",
            "awa_fast.runtime.prefetch",
            "awa_fast.runtime.committer",
        )
    },
    {"host": ("awa_fast.runtime.host",)},
    {"claim": ("awa_fast.runtime.claim",), "work": ("awa_fast.runtime.work",)},
    {"runtime": ("awa_fast.runtime",)},
    {"applications": ("awa_fast",)},
]


def group_of(module: str) -> tuple[int, str]:
    """(tier, group) of ``module``, by the longest prefix that names it or its package."""
    best: tuple[int, int, str] | None = None
    for tier, groups in enumerate(TIERS):
        for group, prefixes in groups.items():
            for prefix in prefixes:
                named = module == prefix or module.startswith(prefix + ".")
                if named and (best is None or len(prefix) > best[0]):
                    best = (len(prefix), tier, group)
    assert best is not None, module
    return best[1], best[2]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPOSITORY).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[str]:
    """Every awa_fast module ``path`` imports, at any depth (type-only and deferred too)."""
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else None
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("awa_fast"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("awa_fast"):
                for alias in node.names:  # `from awa_fast.x import y`: y may be a module
                    candidate = f"{node.module}.{alias.name}"
                    yield candidate if _is_module(candidate) else node.module
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import from {package}")


def _is_module(name: str) -> bool:
    path = REPOSITORY.joinpath(*name.split("."))  # the native module has its stub
    return path.is_dir() or any(path.with_suffix(s).exists() for s in (".py", ".pyi"))


def test_every_import_goes_to_its_own_group_or_a_lower_tier() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        tier, group = group_of(source)
        for target in imports(path):
            target_tier, target_group = group_of(target)
            if target_tier > tier or (target_tier == tier and target_group != group):
                upward.append(f"{source} ({group}) imports {target} ({target_group})")
    assert upward == []


def test_the_tiers_sort_known_modules() -> None:
    """The checker itself: a worker-side module is below the composition, and the two
    sides of the runtime are apart."""
    assert group_of("awa_fast.runtime.work.executor") == (7, "work")
    assert group_of("awa_fast.runtime.claim.claimer") == (7, "claim")
    assert group_of("awa_fast.runtime.runner") == (8, "runtime")
    assert group_of("awa_fast.lifecycle.transitions") == (3, "lifecycle")
    assert group_of("awa_fast.client") == (9, "applications")


def test_no_source_file_is_longer_than_a_reader_takes_in() -> None:
    sources = [*PACKAGE.rglob("*.py"), *(REPOSITORY / "rust").rglob("*.rs")]
    long = {
        str(path.relative_to(REPOSITORY)): n
        for path in sources
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
