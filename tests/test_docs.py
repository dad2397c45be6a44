"""The docs are tested: every Python example in README.md and docs/*.md runs, in order,
against a real database; every relative link points to a file of the repository; the
docs speak of the project alone; and every cross-reference in the package's docstrings
(:meth:, :func:, :class:) names something that exists."""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
import re
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.telemetry.spans import reset_tracer_provider

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
# [text](target) (an image's too) and [text]: target
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.MULTILINE)


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def blocks(page: Path) -> list[str]:
    """The page's Python examples, each padded with the lines before it, so that a
    traceback names the page's own line numbers."""
    text = page.read_text()
    return ["\n" * text.count("\n", 0, m.start(1)) + m.group(1) for m in BLOCK.finditer(text)]


def count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return int(row[0])


# What each page's examples leave behind, beyond the asserts in the examples themselves.
Check = Callable[[types.ModuleType, str], None]


def check_readme(page: types.ModuleType, dsn: str) -> None:
    assert page.sent == ["ada@example.com"]


def check_handlers(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE kind = 'import'") == 6
    resized = "SELECT count(*) FROM awa_fast.jobs WHERE kind = 'resize' AND state = 'completed'"
    assert count(dsn, resized) == 1
    assert page.report.progress is None
    charged = "SELECT count(*) FROM awa_fast.jobs WHERE kind = 'charge' AND state = 'completed'"
    assert count(dsn, charged) == 2


def check_callbacks(page: types.ModuleType, dsn: str) -> None:
    assert page.approved.callback_result == {"approved_by": "kim"}
    # approved, paid and charged: each completed through its callback
    done = (
        "SELECT count(*) FROM awa_fast.jobs"
        " WHERE state = 'completed' AND callback_result IS NOT NULL"
    )
    assert count(dsn, done) == 3


def check_producing(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE kind = 'send_email'") == 1005
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs_hot WHERE queue = 'receipts'") == 1
    assert count(dsn, "SELECT count(*) FROM awa_fast.job_packs") >= 1  # insert_many's 1,000
    assert count(dsn, "SELECT count(*) FROM orders") == 1
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE queue = 'digests'") == 4
    archived = "SELECT count(*) FROM awa_fast.jobs WHERE queue = 'archive' AND state = 'completed'"
    assert count(dsn, archived) == page.paced.inserted == 2000


def check_followups(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE kind = 'receipt'") == 1
    assert [t for t, _ in page.events] == ["Started", "Completed"]


def check_periodic(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.cron_jobs") == 0  # deleted again


def check_pool(page: types.ModuleType, dsn: str) -> None:
    pids = {job.metadata["pid"] for job in page.done}
    assert len(page.done) == 20 and 1 <= len(pids) <= 2  # two workers took them all
    assert count(dsn, "SELECT count(*) FROM awa_fast.hosts") == 0  # gone when it stopped


def check_pgbouncer(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE kind = 'send_receipt'") == 10


def check_observability(page: types.ModuleType, dsn: str) -> None:
    assert "awa_fast_worker_processes 1" in page.metrics
    completed = "SELECT count(*) FROM awa_fast.jobs WHERE state = 'completed'"
    assert count(dsn, completed) == 3  # the scraped job, the telemetry one, the traced one
    assert page.processed.kind.name == "CONSUMER"


def check_maintenance(page: types.ModuleType, dsn: str) -> None:
    unclaimed = "SELECT count(*) FROM awa_fast.jobs WHERE queue = 'reports' AND run_lease = 0"
    assert page.promoted.state == "available" and count(dsn, unclaimed) == 1
    assert page.stopped.attempt == page.cut_short.attempt == 1
    assert page.stopped.errors == []  # RetryAfter records no error
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs_deferred") == 2


def check_admin(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.dlq") == 0  # retried out of it
    assert count(dsn, "SELECT count(*) FROM awa_fast.batch_operations") == 1
    assert count(dsn, "SELECT count(*) FROM awa_fast.descriptors") == 2


def check_high_availability(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE kind = 'resize'") == 1
    assert page.stats == {"default": 1}


def check_partitioned(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE queue = 'emails__p2'") == 1


def check_testing(page: types.ModuleType, dsn: str) -> None:
    failed = "SELECT count(*) FROM awa_fast.jobs WHERE queue = 'tests' AND state = 'failed'"
    assert count(dsn, failed) == 1


def check_porting(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE state = 'completed'") == 1


def check_cli(page: types.ModuleType, dsn: str) -> None:
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE state = 'cancelled'") == 1
    assert count(dsn, "SELECT count(*) FROM awa_fast.queue_meta WHERE paused") == 1


def check_ui(page: types.ModuleType, dsn: str) -> None:
    assert page.overview.status_code == 200
    assert count(dsn, "SELECT count(*) FROM awa_fast.jobs WHERE queue = 'email'") == 1


def check_architecture(page: types.ModuleType, dsn: str) -> None:
    """The outcome table names every record the ring carries (the dead one in its note)."""
    from awa_fast.lifecycle.transitions import Target

    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("## The outcome table") : text.index("## The path of one job")]
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| ")]
    records = {cells[2].strip() for cells in rows[1:]}
    assert records | {"dead"} == {target.name.lower() for target in Target}


CHECKS: dict[str, Check] = {
    "README.md": check_readme,
    "docs/handlers.md": check_handlers,
    "docs/callbacks.md": check_callbacks,
    "docs/producing.md": check_producing,
    "docs/followups-and-events.md": check_followups,
    "docs/periodic.md": check_periodic,
    "docs/pool.md": check_pool,
    "docs/pgbouncer.md": check_pgbouncer,
    "docs/observability.md": check_observability,
    "docs/maintenance.md": check_maintenance,
    "docs/admin.md": check_admin,
    "docs/partitioned-queues.md": check_partitioned,
    "docs/high-availability.md": check_high_availability,
    "docs/testing.md": check_testing,
    "docs/porting.md": check_porting,
    "docs/cli.md": check_cli,
    "docs/ui.md": check_ui,
    "docs/architecture.md": check_architecture,
}


@pytest.fixture
def page_module(request: pytest.FixtureRequest) -> Iterator[types.ModuleType]:
    """A real module to run a page's examples in (dataclasses look their module up)."""
    module = types.ModuleType(f"docs_example_{request.node.callspec.id.replace('/', '_')}")
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]
    # A page may set OpenTelemetry's tracer provider (Traces): the tests after it run
    # without one, as a process that never set one does.
    reset_tracer_provider()


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_page_examples_run(page: Path, dsn: str, page_module: types.ModuleType) -> None:
    page_module.DATABASE_URL = dsn  # type: ignore[attr-defined]
    for block in blocks(page):
        exec(compile(block, str(page), "exec"), page_module.__dict__)
    check = CHECKS.get(name(page))
    if check is not None:
        check(page_module, dsn)


def test_every_page_with_examples_has_a_check() -> None:
    """A page's examples assert what they show; the check here holds what they leave in the
    database, so that an example cut down to nothing fails."""
    with_examples = {name(page) for page in PAGES if blocks(page)}
    assert with_examples <= set(CHECKS)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


def resolves(page: Path, target: str) -> bool:
    """Whether a relative link of ``page`` names a file of the repository (and, for a
    markdown file, one of its headings when it names an anchor)."""
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.exists() or ROOT not in file.parents:
        return False
    return not anchor or file.suffix != ".md" or anchor in anchors(file)


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_relative_links_resolve(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)
    targets = [inline or reference for inline, reference in LINK.findall(text)]
    relative = [t for t in targets if not re.match(r"[a-z]+:", t)]  # not https:, mailto:
    assert [t for t in relative if not resolves(page, t)] == []


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_pages_speak_of_the_project_alone(page: Path) -> None:
    """No development diary (session numbers) and no design notes kept elsewhere."""
    text = page.read_text()
    assert not re.findall(r"\b[Ss]ession \d+|DESIGN\.md", text)


def test_readme_starts_with_the_two_commands() -> None:
    """CI runs the second line; a reader runs the first."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[2] == "```bash"
    assert lines[3].startswith("pip install -e '.[embedded]' && awa-fast bench drain")
    assert lines[4].startswith("pip install -e '.[test]' && python -m pytest -q")


def test_the_pgbouncer_entry_sets_what_the_hot_connections_set() -> None:
    """Behind a pooler the runtime applies no session setting; the database entry the page
    gives must apply each one the hot connections apply directly."""
    from awa_fast.db.connections import PLANNER_SETTINGS

    text = (ROOT / "docs" / "pgbouncer.md").read_text()
    [entry] = [line for line in text.splitlines() if "connect_query=" in line]
    assert dict(re.findall(r"SET (\w+) = (\w+)", entry)) == PLANNER_SETTINGS


# A Sphinx cross-reference in a docstring or comment: :meth:`Claimer.reserve`, say.
ROLE = re.compile(r":(?:meth|func|class|mod|attr|exc|data):`~?([^`]+)`")
MODULES = sorted(  # the Python ones: the Rust extension's stub is checked by stubtest
    info.name
    for info in pkgutil.walk_packages([str(ROOT / "awa_fast")], "awa_fast.")
    if not info.name.endswith(("__main__", "._core"))
)


def _member(owner: object, path: list[str]) -> bool:
    """``owner`` has the attribute path: as a class attribute, a field, or an instance
    attribute its class's code assigns (``self.name``)."""
    for part in path:
        if isinstance(owner, type) and part not in dir(owner):
            return part in getattr(owner, "__annotations__", {}) or _assigns(owner, part)
        try:
            owner = getattr(owner, part)
        except AttributeError:
            return False
    return True


def _assigns(cls: type, name: str) -> bool:
    """The class's own code sets ``self.name``."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # defined in C, or made by a factory
        return False
    return re.search(rf"self\.{name}\b", source) is not None


def _absolute(target: str) -> bool:
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        return _member(module, parts[i:])
    return False


def _resolves(module: types.ModuleType, target: str) -> bool:
    """As Sphinx would look it up from ``module``: a dotted path from the package, a name
    of the module (its own or imported) or of builtins, or a member of one of its classes."""
    target = target.removesuffix("()")
    if target.startswith("."):  # relative to the module's package
        target = f"{module.__package__}{target}"
    if target.startswith("awa_fast."):
        return _absolute(target)
    first, *rest = target.split(".")
    namespace = {**vars(builtins), **vars(module)}
    if first in namespace and _member(namespace[first], rest):
        return True
    classes = [value for value in vars(module).values() if isinstance(value, type)]
    return any(_member(cls, target.split(".")) for cls in classes) or _absolute(target)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_references_resolve(module_name: str) -> None:
    """A reference to a method that was renamed or moved fails here, not in a reader's
    search."""
    module = importlib.import_module(module_name)
    source = inspect.getsource(module)
    stale = [
        f"line {source.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for m in ROLE.finditer(source)
        if not _resolves(module, m.group(1))
    ]
    assert stale == []
