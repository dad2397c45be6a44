"""The command line against a real database: enqueue, admin commands, errors."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

import awa_fast
from awa_fast.cli import READ_URL_ENV, load_app, parser, read_url, serve_config
from awa_fast.db.dsn import with_database
from awa_fast.errors import ConfigError
from awa_fast.maintenance import periodic
from awa_fast.runtime.config import RunnerConfig
from awa_fast.testing import AwaTestClient
from tests.factories import finish_jobs
from tests.helpers import job, run, run_until, states


@dataclass
class Nightly:
    report: str


async def _register(client: awa_fast.Client) -> None:
    """Write the client's schedules, as starting its handlers does."""
    async with await psycopg.AsyncConnection.connect(client.dsn, autocommit=True) as conn:
        await periodic.register(conn, list(client.handlers.schedules.values()))


def _awa(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "awa_fast.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return _awa(*args, "--database-url", dsn)


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_enqueue_status_cancel_retry_pause(dsn: str) -> None:
    created = _json(_cli(dsn, "enqueue", "send_email", "--args", '{"to": "a"}', "--queue", "q"))
    assert created["state"] == "available"
    [stat] = _json(_cli(dsn, "status"))
    assert (stat["queue"], stat["available"]) == ("q", 1)
    assert _json(_cli(dsn, "cancel", str(created["id"])))["state"] == "cancelled"
    missing = _cli(dsn, "cancel", str(created["id"]))
    assert missing.returncode == 1 and "not in a state" in missing.stderr
    absent = _cli(dsn, "job", str(created["id"] + 1))
    assert absent.returncode == 1 and f"job not found: {created['id'] + 1}" in absent.stderr
    assert _json(_cli(dsn, "retry", str(created["id"])))["state"] == "available"
    assert [j["id"] for j in _json(_cli(dsn, "jobs", "--queue", "q"))] == [created["id"]]
    assert _cli(dsn, "pause", "q").returncode == 0
    assert _json(_cli(dsn, "status"))[0]["paused"] is True
    assert job(dsn, created["id"])["args"] == {"to": "a"}


def test_bad_enqueue_input_is_refused_with_the_field_named(dsn: str) -> None:
    bad_json = _cli(dsn, "enqueue", "k", "--args", "{nope")
    assert bad_json.returncode == 2 and "--args is not valid JSON" in bad_json.stderr
    bad_priority = _cli(dsn, "enqueue", "k", "--priority", "9")
    assert bad_priority.returncode == 2 and "priority" in bad_priority.stderr
    assert _json(_cli(dsn, "status")) == []


def test_periodic_jobs_are_listed_and_deleted(dsn: str) -> None:
    with awa_fast.Client(dsn) as client:
        client.periodic("nightly", "0 3 * * *", Nightly, Nightly("sales"))
        run(_register(client))
    [listed] = _json(_cli(dsn, "cron"))
    assert (listed["name"], listed["cron_expr"], listed["args"]) == (
        "nightly",
        "0 3 * * *",
        {"report": "sales"},
    )
    assert _json(_cli(dsn, "cron-delete", "nightly")) is True
    missing = _cli(dsn, "cron-delete", "nightly")
    assert missing.returncode == 1 and "no periodic job named 'nightly'" in missing.stderr
    assert _json(_cli(dsn, "cron")) == []


def test_serve_rate_limits_are_parsed_and_bad_ones_refused(capsys: Any) -> None:
    opts = parser().parse_args(
        ["serve", "app:client", "--rate-limit", "email=10:5", "--rate-limit", "sms=0.5"]
    )
    assert dict(opts.rate_limit) == {"email": (10.0, 5), "sms": (0.5, 1)}
    for bad in ("email", "email=fast", "email=10:0", "=10"):
        with pytest.raises(SystemExit):
            parser().parse_args(["serve", "app:client", "--rate-limit", bad])
        assert "expected NAME=RATE[:BURST]" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ui", "--port", "99999"], "--port: expected an integer from 1 to 65535, got '99999'"),
        (["bench", "cpu", "--jobs", "-5"], "--jobs: expected an integer >= 1, got '-5'"),
        (["bench", "--runs", "0"], "--runs: expected an integer >= 1, got '0'"),
        (["bench", "--processes", "-1"], "--processes: expected an integer >= 0, got '-1'"),
        (["bench", "--duration", "nan"], "--duration: expected a number of seconds > 0"),
    ],
)
def test_out_of_range_numbers_are_refused_by_name(
    argv: list[str], message: str, capsys: Any
) -> None:
    """Before, a negative job count reached the bench as a ZeroDivisionError, and port
    99999 reached the web server."""
    with pytest.raises(SystemExit):
        parser().parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-jobs-per-worker", "0", "max_jobs_per_worker must be an integer >= 1, got 0"),
        ("--max-worker-memory-mb", "-5", "max_worker_memory_mb must be None or a number"),
    ],
)
def test_serve_refuses_a_worker_limit_rather_than_dropping_it(
    option: str, value: str, message: str
) -> None:
    """A limit the command line was given reaches the config whole: a zero is an error,
    not a limit silently left out."""
    config = serve_config(parser().parse_args(["serve", "app:client", option, value]))
    with pytest.raises(ConfigError, match=message):
        RunnerConfig(**config)


def test_serve_names_a_missing_app_module_and_shows_a_failing_import_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module that is not there is one line; a module that is there but fails to import
    something of its own keeps its traceback, which says where."""
    (tmp_path / "needs_more.py").write_text("import awa_fast_no_such_dependency\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit, match="awa-fast serve: no module named 'no_such_app'"):
        load_app("no_such_app:client")
    with pytest.raises(SystemExit, match="no module named 'no_such_pkg'"):
        load_app("no_such_pkg.tasks:client")
    with pytest.raises(ModuleNotFoundError, match="awa_fast_no_such_dependency"):
        load_app("needs_more:client")


def test_serve_no_standby_turns_standby_claims_off() -> None:
    default = serve_config(parser().parse_args(["serve", "app:client"]))
    assert "standby" not in default and RunnerConfig(**default).standby
    off = serve_config(parser().parse_args(["serve", "app:client", "--no-standby"]))
    assert RunnerConfig(**off).standby is False


@dataclass
class Doomed:
    n: int


async def _fail_one(dsn: str) -> int:
    """A job that failed for good, as a worker would leave it."""

    async def handler(job: awa_fast.Job[Doomed]) -> None:
        raise awa_fast.TerminalError("no way")

    async with awa_fast.AsyncClient(dsn) as client:
        tester = AwaTestClient(client)
        job = await tester.insert(Doomed(1), queue="dq")
        assert (await tester.work_one(Doomed, handler, queue="dq")).is_failed()
        return job.id


def test_drain_dump_and_the_dead_letter_queue(dsn: str) -> None:
    waiting = [_json(_cli(dsn, "enqueue", "k", "--queue", "q"))["id"] for _ in range(2)]
    assert _json(_cli(dsn, "drain", "q")) == 2
    dumped = _json(_cli(dsn, "dump", str(waiting[0])))
    assert dumped["job"]["state"] == "cancelled"
    never_ran = _cli(dsn, "dump-run", str(waiting[0]), "--attempt", "1")
    assert (
        never_ran.returncode == 2
        and "not present in the recorded error history" in never_ran.stderr
    )

    failed = run(_fail_one(dsn))
    moved = _json(_cli(dsn, "dlq-move", str(failed), "bad address"))
    assert (moved["job"]["id"], moved["reason"]) == (failed, "bad address")
    assert _json(_cli(dsn, "dlq-depth")) == 1
    refused = _cli(dsn, "dlq-purge")
    assert refused.returncode == 2 and "allow_all=True" in refused.stderr
    assert _json(_cli(dsn, "dlq-depth", "--queue", "dq")) == 1
    assert _json(_cli(dsn, "dlq-purge", "--all")) == 1
    assert _json(_cli(dsn, "dlq-depth")) == 0
    again = _cli(dsn, "dlq-move", str(failed), "twice")
    assert again.returncode == 1 and f"job {failed} not found" in again.stderr


def test_retry_failed_says_how_many_it_retried_of_how_many_it_found(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    unique = awa_fast.UniqueOpts(by_args=True)
    with awa_fast.Client(dsn) as client:
        held = client.insert(Doomed(1), queue="dq", unique=unique).id
        free = client.insert(Doomed(2), queue="dq").id
        finish_jobs(conn, "failed", [held, free])
        client.insert(Doomed(1), queue="dq", unique=unique)  # a live job takes held's key
    retried = _json(_cli(dsn, "retry-failed", "--queue", "dq"))
    assert retried == {"retried": 1, "matched": 2, "pruned_failed_count": 0, "ids": [free]}
    by_kind = _json(_cli(dsn, "retry-failed", "--kind", "doomed"))
    assert by_kind == {"retried": 0, "matched": 1, "pruned_failed_count": None, "ids": []}


def test_batch_operations_are_listed_and_cancelled(dsn: str) -> None:
    with awa_fast.Client(dsn) as client:
        client.insert(Doomed(1), queue="slow")
        op = client.set_priority(4, filter={"queue": "slow"})
    [listed] = _json(_cli(dsn, "batch", "--state", "pending"))
    assert (listed["id"], listed["op_kind"]) == (op["id"], "set_priority")
    assert _json(_cli(dsn, "batch-cancel", op["id"]))["state"] == "cancelling"
    assert _json(_cli(dsn, "batch", "--state", "pending")) == []


def test_migrate_prints_the_sql_a_tool_of_ones_own_applies(server_url: str) -> None:
    """The SDK's ``migrate`` options: --sql prints every migration, --version one, --from /
    --to a range, --pending what the database lacks; the printed SQL, applied as printed,
    leaves ``migrate`` nothing to do."""
    latest = awa_fast.current_migration_version()
    name = "awa_fast_cli_migrate_sql"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = with_database(server_url, name)
    headers = [f"-- Migration V{m.version}: {m.name}" for m in awa_fast.migrations()]

    def printed(*args: str) -> list[str]:
        done = _cli(url, "migrate", *args)
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if line.startswith("-- Migration V")]

    assert printed("--sql") == headers
    assert printed("--version", "2") == headers[1:2]
    assert printed("--from", "3", "--to", "5") == headers[3:5]
    old = subprocess.run(  # a database an older release migrated: versions 1-5
        [sys.executable, "-m", "awa_fast.cli", "migrate", "--to", "5"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(old.encode())
    assert printed("--pending") == headers[5:]
    pending = _cli(url, "migrate", "--pending").stdout
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(pending.encode())
    assert printed("--pending") == []
    up_to_date = _cli(url, "migrate")
    assert up_to_date.stdout.strip() == "Migrations applied successfully."
    assert up_to_date.stderr.strip() == "awa-fast: schema is up to date"
    wrong = _cli(url, "migrate", "--version", str(latest + 1))
    assert wrong.returncode == 1 and f"valid versions 1..{latest}" in wrong.stderr
    mixed = _cli(url, "migrate", "--version", "2", "--from", "1")
    assert mixed.returncode == 1 and "--version takes no --from" in mixed.stderr
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _sdk(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A command as the Awa SDK's scripts spell it, with ``awa`` changed to ``awa_fast``:
    ``python -m awa_fast --database-url URL GROUP COMMAND ...``."""
    return subprocess.run(
        [sys.executable, "-m", "awa_fast", "--database-url", dsn, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    return [line.rstrip() for line in done.stdout.splitlines()]


def test_the_sdks_job_and_queue_commands_act_and_say_what_they_did(dsn: str) -> None:
    with awa_fast.Client(dsn) as client:
        [first, second] = [client.insert(Doomed(n), queue="q").id for n in (1, 2)]
    listed = _lines(_sdk(dsn, "job", "list", "--queue", "q"))
    assert listed[0].split() == ["ID", "KIND", "QUEUE", "STATE", "ATT", "MAX"]
    assert [line.split() for line in listed[1:3]] == [
        [str(second), "doomed", "q", "available", "0", "25"],
        [str(first), "doomed", "q", "available", "0", "25"],
    ]
    assert listed[-1] == "2 jobs listed."
    assert _lines(_sdk(dsn, "job", "cancel", str(first))) == [f"Cancelled job {first}"]
    assert job(dsn, first)["state"] == "cancelled"
    assert _lines(_sdk(dsn, "job", "retry", str(first))) == [f"Retried job {first}"]
    assert job(dsn, first)["state"] == "available"
    assert json.loads(_sdk(dsn, "job", "dump", str(first)).stdout)["job"]["id"] == first

    storage = json.loads(_sdk(dsn, "storage", "status").stdout)
    assert (storage["current_engine"], storage["canonical_live_backlog"]) == ("canonical", 2)
    assert _lines(_sdk(dsn, "queue", "pause", "q")) == ["Paused queue 'q'"]
    [stats_header, stats] = _lines(_sdk(dsn, "queue-stats"))
    assert (stats_header.split(), stats.split()) == (
        ["QUEUE", "AVAIL", "RUNNING", "FAILED"],
        ["q", "2", "0", "0"],
    )
    assert _lines(_sdk(dsn, "queue", "resume", "q")) == ["Resumed queue 'q'"]
    assert _lines(_sdk(dsn, "queue", "drain", "q")) == ["Drained 2 jobs from queue 'q'"]
    assert job(dsn, second)["state"] == "cancelled"
    assert _lines(_sdk(dsn, "job", "discard", "--kind", "doomed")) == [
        "Discarded 0 failed jobs of kind 'doomed'"
    ]
    missing = _sdk(dsn, "job", "cancel", str(first))
    assert missing.returncode == 1 and "not in a state that allows it" in missing.stderr


def test_the_sdks_dlq_and_cron_commands_act_and_say_what_they_did(dsn: str) -> None:
    failed = run(_fail_one(dsn))
    with awa_fast.Client(dsn) as client:
        client.move_failed_to_dlq(failed, "bad address")
        client.periodic("nightly", "0 3 * * *", Nightly, Nightly("sales"))
        run(_register(client))
    assert _lines(_sdk(dsn, "dlq", "depth")) == ["Total: 1", "  dq: 1"]
    assert _lines(_sdk(dsn, "dlq", "depth", "--queue", "dq")) == ["dq: 1"]
    listed = _lines(_sdk(dsn, "dlq", "list"))
    assert listed[1].split()[:4] == [str(failed), "doomed", "dq", "bad"]
    assert listed[-1].startswith(f"Next page: --before-id {failed} --before-dlq-at ")
    refused = _sdk(dsn, "dlq", "purge")
    assert refused.returncode == 1 and "or --all to confirm" in refused.stderr
    assert _lines(_sdk(dsn, "dlq", "retry", str(failed))) == [
        f"Retried DLQ job {failed} → job state available"
    ]
    assert _lines(_sdk(dsn, "dlq", "retry", str(failed))) == [f"No DLQ row with id {failed}"]
    assert _lines(_sdk(dsn, "dlq", "purge", "--all")) == ["Purged 0 DLQ rows."]
    assert _lines(_sdk(dsn, "dlq", "list")) == ["DLQ is empty (no matching rows)."]

    [_, schedule, _, count] = _lines(_sdk(dsn, "cron", "list"))
    assert schedule.split() == [
        "nightly",
        "0",
        "3",
        "*",
        "*",
        "*",
        "UTC",
        "coalesce",
        "nightly",
        "default",
    ]
    assert count == "1 schedules listed."
    assert _lines(_sdk(dsn, "cron", "remove", "nightly")) == ["Removed cron schedule 'nightly'"]
    assert _lines(_sdk(dsn, "cron", "remove", "nightly")) == [
        "No cron schedule found with name 'nightly'"
    ]


def test_the_sdks_refusals_and_awa_fasts_own_commands_beside_its_tree(dsn: str) -> None:
    """What the SDK refuses before it connects is refused the same; the SDK's leading
    --database-url reaches awa-fast's own commands, and awa-fast's ``job ID`` still shows
    one job."""
    unfiltered = _sdk(dsn, "job", "retry-failed")
    assert unfiltered.returncode == 1
    assert unfiltered.stderr.strip() == "Specify exactly one of --kind or --queue"
    assert _lines(_sdk(dsn, "migrate")) == ["Migrations applied successfully."]  # the SDK's
    created = _json(_sdk(dsn, "enqueue", "k", "--queue", "own"))
    assert _json(_sdk(dsn, "job", str(created["id"])))["queue"] == "own"
    missing = _sdk(dsn, "job", "dump", str(created["id"] + 1))
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"awa-fast job dump: job not found: {created['id'] + 1}"


def test_the_url_comes_from_a_file_or_the_environment_out_of_sight_of_ps(
    dsn: str, tmp_path: Path
) -> None:
    url_file = tmp_path / "url"
    url_file.write_text(dsn + "\n")
    created = _json(_awa("enqueue", "k", "--database-url-file", str(url_file)))
    listed = _json(_awa("jobs", env={**os.environ, "AWA_FAST_DATABASE_URL": dsn}))
    assert [j["id"] for j in listed] == [created["id"]]
    [stat] = _json(_awa("--database-url-file", str(url_file), "status"))  # the SDK's place
    assert stat["available"] == 1
    with_password = conninfo.make_conninfo(dsn, password="unchecked")  # the test server trusts
    shown = _cli(with_password, "status")
    assert shown.returncode == 0 and "other users of this machine can read in ps" in shown.stderr
    url_file.write_text(with_password)
    hidden = _awa("status", "--database-url-file", str(url_file))
    assert hidden.returncode == 0 and "warning" not in hidden.stderr
    both = _awa("status", "--database-url", dsn, "--database-url-file", str(url_file))
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    usage = " ".join(_awa("serve", "--help").stdout.split())
    assert "can read a command line in ps" in usage and "AWA_FAST_DATABASE_URL" in usage


def test_a_role_given_the_printed_grants_runs_jobs_end_to_end(
    dsn: str, outsider_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The role inserts with the CLI (which only reads the schema's version) and with a
    client, and runs both jobs, leader and all, with no error logged."""
    role = conninfo.conninfo_to_dict(outsider_dsn)["user"]
    with pytest.raises(psycopg.errors.InsufficientPrivilege), awa_fast.Client(outsider_dsn) as c:
        c.insert({"n": 0}, kind="greet")
    printed = _awa("grants", "--role", str(role))
    assert printed.returncode == 0, printed.stderr
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(printed.stdout.encode())
    url_file = tmp_path / "url"
    url_file.write_text(outsider_dsn)
    _json(_awa("enqueue", "greet", "--args", '{"n": 1}', "--database-url-file", str(url_file)))
    client = awa_fast.AsyncClient(outsider_dsn)

    @client.task(kind="greet")
    async def greet(job: awa_fast.Job[dict[str, int]]) -> None:
        pass

    async def main() -> None:
        async with client:
            await client.insert({"n": 2}, kind="greet")
            await run_until(client, {"default": 2}, lambda: states(dsn) == {"completed": 2})

    with caplog.at_level(logging.WARNING):
        run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_ui_and_status_take_a_read_url_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A standby's URL for the reads that may lag; the other commands take none."""
    for command in (["ui"], ["status"]):
        given = parser().parse_args([*command, "--read-database-url", "postgresql://s/app"])
        assert read_url(given) == "postgresql://s/app"
    monkeypatch.setenv(READ_URL_ENV, "postgresql://env/app")
    assert read_url(parser().parse_args(["status"])) == "postgresql://env/app"
    assert read_url(parser().parse_args(["jobs"])) is None
    with pytest.raises(SystemExit):
        parser().parse_args(["jobs", "--read-database-url", "postgresql://s/app"])


def test_a_url_naming_several_hosts_that_cannot_reach_a_primary_is_refused_by_name() -> None:
    done = _awa("status", "--database-url", "postgresql://a,b/app?target_session_attrs=standby")
    assert done.returncode == 2
    assert "target_session_attrs=standby lets a connection land on a standby" in done.stderr
