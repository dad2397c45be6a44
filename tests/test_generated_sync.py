"""The synchronous client, transaction and insert functions are generated from their asyncio
source by tools/async_to_sync.py, each module's into its ``_sync`` twin: the committed code
is what the tool writes, and the tool notices and repairs an edit to it."""

from __future__ import annotations

import runpy
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "async_to_sync.py"


def generator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], cwd=ROOT, capture_output=True, text=True
    )


def test_the_committed_sync_code_is_what_the_generator_writes() -> None:
    done = generator("--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_edit_to_generated_code_is_found_and_undone(tmp_path: Path) -> None:
    """On a copy of the tree: the edited twin is named, then written anew."""
    shutil.copytree(ROOT / "awa_fast", tmp_path / "awa_fast", ignore=shutil.ignore_patterns("*.so"))
    module = tmp_path / "awa_fast" / "producer_sync.py"
    committed = module.read_text()
    source, _, generated = committed.rpartition("copy.write(chunk)")
    module.write_text(f"{source}copy.write(chunk.strip()){generated}")

    stale = generator("--check", "--root", str(tmp_path))
    assert stale.returncode == 1
    assert stale.stdout.split()[-1] == "awa_fast/producer_sync.py"
    assert generator("--root", str(tmp_path)).returncode == 0
    assert module.read_text() == committed


def test_async_code_becomes_sync_with_names_and_docstrings_swapped() -> None:
    to_sync: Callable[[str], str] = runpy.run_path(str(TOOL))["to_sync"]
    source = '''
async def insert_many_async(conn: AsyncConnection[Any], run: Awaitable[list[int]]) -> None:
    """Like ``await insert_async(conn, args)`` (the AsyncClient's ``async with`` block)."""
    async with conn.transaction():  # one transaction
        await asyncio.to_thread(migrate, dsn, 2)
        return await run
'''
    expected = '''
def insert_many(conn: Connection[Any], run: list[int]) -> None:
    """Like ``insert(conn, args)`` (the Client's ``with`` block)."""
    with conn.transaction():  # one transaction
        migrate(dsn, 2)
        return run
'''
    assert to_sync(source) == expected
