"""``resolve_callback`` and the CEL expressions of ``register_callback``, end to end: a
worker parks jobs on callbacks registered with expressions, and a client resolves them.

The spec is the Awa SDK's (awa-pg 0.6.9), as running it showed (a worker parking jobs with
these expressions, resolved from a second client): ``SPEC`` below is what it did with each
payload and default action."""

from __future__ import annotations

import threading
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import awa_fast
from awa_fast import WaitForCallback, admin
from awa_fast.db.queries import Q
from tests.factories import insert_job
from tests.helpers import await_until, lock_waiters, run, run_until, wait_until
from tests.helpers import job as row_of

BY_DEFAULT = "no expressions configured, default is ignore"
BY_FILTER = "filter expression returned false"
ON_FAIL = "callback failed: on_fail expression matched"
DEFAULT_FAIL = {"error": "callback failed: default action"}


@dataclass
class Asks:
    """A job whose handler registers a callback with these expressions and parks on it."""

    filter: str | None = None
    on_complete: str | None = None
    on_fail: str | None = None
    transform: str | None = None


@dataclass(frozen=True)
class Case:
    rules: dict[str, str]
    payload: Any
    default_action: str
    outcome: str
    result: Any = None  # ResolveResult.payload, and the completed job's callback_result
    reason: str | None = None
    error: dict[str, str] | None = None  # the failed job's last error, but attempt and at


SPEC: dict[str, Case] = {
    "no expressions, ignore": Case({}, {"a": 1}, "ignore", "ignored", reason=BY_DEFAULT),
    "no expressions, complete": Case({}, {"a": 1}, "complete", "completed", {"a": 1}),
    "no expressions, no payload": Case({}, None, "complete", "completed", None),
    "no expressions, fail": Case({}, {"a": 1}, "fail", "failed", error=DEFAULT_FAIL),
    "on_complete matched": Case(
        {"on_complete": "payload.status == 'ok'"},
        {"status": "ok"},
        "ignore",
        "completed",
        {"status": "ok"},
    ),
    "on_complete unmatched: the default, ignore": Case(
        {"on_complete": "payload.status == 'ok'"},
        {"status": "bad"},
        "ignore",
        "ignored",
        reason=BY_DEFAULT,
    ),
    "on_complete unmatched: the default, complete": Case(
        {"on_complete": "payload.status == 'ok'"},
        {"status": "bad"},
        "complete",
        "completed",
        {"status": "bad"},
    ),
    "on_complete unmatched: the default, fail": Case(
        {"on_complete": "payload.status == 'ok'"},
        {"status": "bad"},
        "fail",
        "failed",
        error=DEFAULT_FAIL,
    ),
    "on_fail is checked first": Case(
        {"on_fail": "payload.status == 'err'", "on_complete": "true"},
        {"status": "err"},
        "complete",
        "failed",
        error={"error": ON_FAIL, "expression": "payload.status == 'err'"},
    ),
    "neither matched": Case(
        {"on_fail": "payload.s == 'bad'", "on_complete": "payload.s == 'ok'"},
        {"s": "meh"},
        "ignore",
        "ignored",
        reason=BY_DEFAULT,
    ),
    "filter false ignores, whatever the default": Case(
        {"filter": "payload.kind == 'x'", "on_complete": "true"},
        {"kind": "y"},
        "complete",
        "ignored",
        reason=BY_FILTER,
    ),
    "filter true, then on_complete": Case(
        {"filter": "payload.kind == 'x'", "on_complete": "true"},
        {"kind": "x"},
        "ignore",
        "completed",
        {"kind": "x"},
    ),
    "filter true, no condition: the default": Case(
        {"filter": "payload.kind == 'x'"}, {"kind": "x"}, "ignore", "ignored", reason=BY_DEFAULT
    ),
    "transform on on_complete": Case(
        {"on_complete": "true", "transform": "{'v': payload.status}"},
        {"status": "ok"},
        "ignore",
        "completed",
        {"v": "ok"},
    ),
    "transform of no payload": Case(
        {"on_complete": "true", "transform": "{'k': 1}"}, None, "ignore", "completed", {"k": 1}
    ),
    "no transform on the default complete": Case(
        {"transform": "{'v': payload.status}"},
        {"status": "ok"},
        "complete",
        "completed",
        {"status": "ok"},
    ),
    "a failing transform keeps the payload": Case(
        {"on_complete": "true", "transform": "payload.nope"},
        {"status": "ok"},
        "ignore",
        "completed",
        {"status": "ok"},
    ),
    "a JSON integer is a uint": Case(
        {"on_complete": "payload.a == 3"}, {"a": 3}, "ignore", "ignored", reason=BY_DEFAULT
    ),
    "so 3u matches it": Case(
        {"on_complete": "payload.a == 3u"}, {"a": 3}, "fail", "completed", {"a": 3}
    ),
    "a negative one is an int": Case(
        {"on_complete": "payload.n == -1 && payload.f == 1.5"},
        {"n": -1, "f": 1.5},
        "ignore",
        "completed",
        {"n": -1, "f": 1.5},
    ),
    "a non-bool condition does not match": Case(
        {"on_complete": "payload.a"}, {"a": 3}, "ignore", "ignored", reason=BY_DEFAULT
    ),
    "nor does one that fails": Case(
        {"on_fail": "payload.missing", "on_complete": "true"},
        {"a": 3},
        "fail",
        "completed",
        {"a": 3},
    ),
    "a filter that fails lets the payload through": Case(
        {"filter": "payload.missing", "on_complete": "true"},
        {"a": 3},
        "ignore",
        "completed",
        {"a": 3},
    ),
    "so does a non-bool one": Case(
        {"filter": "'x'", "on_complete": "true"}, {"a": 3}, "ignore", "completed", {"a": 3}
    ),
    "no payload is null": Case(
        {"on_complete": "payload == null"}, None, "ignore", "completed", None
    ),
    "a field of no payload fails": Case(
        {"on_complete": "payload.a == 3u"}, None, "ignore", "ignored", reason=BY_DEFAULT
    ),
    "a list payload": Case(
        {"on_complete": "payload[0] == 1u"}, [1, 2], "ignore", "completed", [1, 2]
    ),
    "string functions and regex": Case(
        {"on_complete": "payload.s.startsWith('o') && payload.s.matches('^ok$')"},
        {"s": "ok"},
        "ignore",
        "completed",
        {"s": "ok"},
    ),
}


def _park(dsn: str, asks: list[Asks]) -> list[tuple[int, str]]:
    """Jobs parked on callbacks their handlers registered with ``asks``' expressions:
    (job id, callback id) each."""
    client = awa_fast.AsyncClient(dsn)

    @client.task(Asks)
    async def ask(job: awa_fast.Job[Asks]) -> Any:
        return WaitForCallback(await job.register_callback(600, **asdict(job.args)))

    async def main() -> list[int]:
        async with client:
            ids = [(await client.insert(a)).id for a in asks]
            await run_until(
                client,
                {"default": 4},
                lambda: all(row_of(dsn, i)["state"] == "waiting_external" for i in ids),
            )
            return ids

    return [(i, str(row_of(dsn, i)["callback_id"])) for i in run(main())]


def _rules_of(dsn: str, job_id: int) -> Any:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT callback_rules FROM awa_fast.jobs_hot WHERE id = %s", (job_id,)
        ).fetchone()
    return None if row is None else row[0]


def test_resolve_callback_decides_as_the_sdk_does(dsn: str) -> None:
    """Every case of ``SPEC``, each on its own parked job, resolved by the async client."""
    names = sorted(SPEC)
    parked = dict(zip(names, _park(dsn, [Asks(**SPEC[n].rules) for n in names]), strict=True))
    assert _rules_of(dsn, parked["on_complete matched"][0]) == {
        "on_complete": "payload.status == 'ok'"
    }
    assert _rules_of(dsn, parked["no expressions, ignore"][0]) is None

    async def resolve_all() -> dict[str, awa_fast.ResolveResult]:
        async with awa_fast.AsyncClient(dsn) as client:
            return {
                n: await client.resolve_callback(
                    parked[n][1], SPEC[n].payload, default_action=SPEC[n].default_action
                )
                for n in names
            }

    results = run(resolve_all())
    seen = {n: _observed(dsn, parked[n], results[n]) for n in names}
    assert seen == {n: _expected(SPEC[n]) for n in names}


def _observed(dsn: str, parked: tuple[int, str], result: awa_fast.ResolveResult) -> tuple[Any, ...]:
    """What a resolve did: its result's fields and what became of the job."""
    job_id, callback_id = parked
    row = row_of(dsn, job_id)
    assert result.is_completed() == (result.outcome == "completed")
    assert result.is_failed() == (result.outcome == "failed")
    assert result.is_ignored() == (result.outcome == "ignored")
    if result.outcome == "ignored":  # the job waits on, its callback still live
        assert result.job is None
        assert (row["state"], str(row["callback_id"])) == ("waiting_external", callback_id)
        return ("ignored", None, result.reason, None)
    assert result.job is not None and result.job.id == job_id
    assert result.job.state == row["state"] == result.outcome
    assert row["callback_id"] is None
    if result.outcome == "completed":
        assert row["callback_result"] == result.payload
        return ("completed", result.payload, result.reason, None)
    error = {k: v for k, v in row["errors"][-1].items() if k not in ("attempt", "at")}
    assert row["errors"][-1]["attempt"] == 1
    return ("failed", result.payload, result.reason, error)


def _expected(case: Case) -> tuple[Any, ...]:
    return (case.outcome, case.result, case.reason, case.error)


def test_a_spent_callback_is_not_found_and_an_ignored_one_stays(client: awa_fast.Client) -> None:
    """Resolved, a callback is spent (CallbackNotFound, as the SDK's "callback not found");
    ignored, it still decides its job later."""
    (done, done_cb), (kept, kept_cb) = _park(client.dsn, [Asks(on_complete="true"), Asks()])
    assert client.resolve_callback(done_cb, {"a": 1}).is_completed()
    with pytest.raises(awa_fast.CallbackNotFound) as spent:
        client.resolve_callback(done_cb, {"a": 1}, default_action="complete")
    assert spent.value.callback_id == done_cb
    assert client.resolve_callback(kept_cb, {"a": 1}).reason == BY_DEFAULT
    assert client.resolve_callback(kept_cb, {"a": 1}, default_action="fail").is_failed()
    assert [row_of(client.dsn, i)["state"] for i in (done, kept)] == ["completed", "failed"]


def test_bad_arguments_are_refused(client: awa_fast.Client) -> None:
    """An unknown default action is refused first (a ValueError, as the SDK's), then a
    malformed id; an unknown one is not found."""
    with pytest.raises(ValueError, match="unknown default_action: retry") as bad:
        client.resolve_callback("not-a-uuid", {"a": 1}, default_action="retry")
    assert isinstance(bad.value, awa_fast.ValidationError)
    assert bad.value.field == "default_action"
    with pytest.raises(awa_fast.ValidationError) as malformed:
        client.resolve_callback("not-a-uuid")
    assert malformed.value.field == "callback_id"
    with pytest.raises(awa_fast.CallbackNotFound):
        client.resolve_callback(str(uuid.uuid4()), default_action="complete")
    with pytest.raises(awa_fast.ValidationError) as payload:
        client.resolve_callback(str(uuid.uuid4()), {"not json": object()})
    assert payload.value.field == "payload"


def test_register_refuses_bad_expressions_naming_the_argument(dsn: str) -> None:
    """An expression that does not parse, or uses a variable but ``payload`` (a macro's
    loop variable included, as in the SDK), is refused before any callback is written."""
    refused: list[tuple[str, str]] = []
    bad = {
        "filter": "(((",
        "on_complete": "payload.items.all(x, x > 0u)",
        "on_fail": "",
        "transform": "{'v': other}",
    }
    client = awa_fast.AsyncClient(dsn)

    @client.task(Asks)
    async def ask(job: awa_fast.Job[Asks]) -> None:
        for name, expression in bad.items():
            with pytest.raises(awa_fast.ValidationError) as err:
                await job.register_callback(**{name: expression})
            refused.append((err.value.field, err.value.message))

    async def main() -> int:
        async with client:
            row = await client.insert(Asks())
            await client.start({"default": 1})
            try:
                await await_until(lambda: row_of(dsn, row.id)["state"] == "completed")
            finally:
                await client.shutdown()
            return row.id

    assert row_of(dsn, run(main()))["callback_id"] is None
    assert [field for field, _ in refused] == list(bad)
    messages = dict(refused)
    assert messages["filter"].startswith("invalid CEL expression for filter: ERROR: <input>")
    assert "Syntax error" in messages["on_fail"]
    assert messages["on_complete"] == (
        "CEL expression for on_complete references undeclared variable(s): x; "
        "only 'payload' is available"
    )
    assert "undeclared variable(s): other;" in messages["transform"]


def test_a_waiting_handler_is_decided_too(dsn: str) -> None:
    """A handler waiting in wait_for_callback is decided as a parked one is: completed by
    on_complete, its wait ends (LeaseLost) and its own outcome is dropped."""
    ended: list[BaseException] = []
    client = awa_fast.AsyncClient(dsn)

    @client.task(Asks)
    async def ask(job: awa_fast.Job[Asks]) -> None:
        token = await job.register_callback(600, on_complete="payload.ok")
        try:
            await job.wait_for_callback(token)
        except awa_fast.LeaseLost as exc:
            ended.append(exc)
            raise

    async def main() -> tuple[int, awa_fast.ResolveResult]:
        async with client:
            row = await client.insert(Asks())
            await client.start({"default": 1})
            try:
                await await_until(lambda: row_of(dsn, row.id)["state"] == "waiting_external")
                callback_id = str(row_of(dsn, row.id)["callback_id"])
                result = await client.resolve_callback(callback_id, {"ok": True})
                await await_until(lambda: len(ended) == 1, what="the wait to end")
            finally:
                await client.shutdown()
            return row.id, result

    job_id, result = run(main())
    assert result.is_completed() and result.payload == {"ok": True}
    assert row_of(dsn, job_id)["state"] == "completed"


def test_expressions_go_with_their_callback(dsn: str, client: awa_fast.Client) -> None:
    """Whatever clears a callback id clears its expressions (the next attempt's claim, a
    resume), and a callback registered without expressions has none of an earlier one's."""
    ids = [str(uuid.uuid4()) for _ in range(4)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        stale = insert_job(conn, state="available")
        running = insert_job(conn, state="running", run_lease=1)

        def register(callback_id: str, rules: str | None) -> None:
            params = {"id": running, "lease": 1, "timeout_s": 60, "rules": rules}
            row = conn.execute(Q.job_register_callback, {**params, "callback_id": callback_id})
            assert row.fetchone() is not None

        # An earlier attempt's callback, still on a job that went back to available.
        conn.execute(
            "UPDATE awa_fast.jobs_hot SET callback_id = %s, callback_rules = %s WHERE id = %s",
            (ids[0], '{"on_complete": "true"}', stale),
        )
        conn.execute(
            Q.job_claim_batch, {"queue": "default", "limit": 10, "deadline_s": 60.0, "host_id": 1}
        )
        register(ids[1], '{"on_complete": "true"}')
        assert _rules_of(dsn, running) == {"on_complete": "true"}
        client.resume_external(ids[1], {"x": 1})
        assert [_rules_of(dsn, i) for i in (stale, running)] == [None, None]
        register(ids[2], '{"on_fail": "true"}')
        register(ids[3], None)
    assert _rules_of(dsn, running) is None
    assert client.resolve_callback(ids[3], {"x": 1}).reason == BY_DEFAULT


def _hold_resolve(conn: psycopg.Connection[Any], op: admin.Locked[awa_fast.ResolveResult]) -> Any:
    """Run a resolve's two statements on ``conn``, its transaction left open."""
    cur = conn.cursor(row_factory=dict_row)
    cur.execute(op.lock.sql, op.lock.params)
    decided = op.lock.shape(cur.fetchall())
    assert isinstance(decided, admin.Op)
    cur.execute(decided.sql, decided.params)
    return decided.shape(cur.fetchall())


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
@pytest.mark.parametrize("payload", [{"ok": True}, {}], ids=["completes", "is-ignored"])
def test_two_resolves_of_one_callback_cannot_both_act(
    dsn: str, commit: bool, payload: dict[str, bool]
) -> None:
    """One resolve holds its transaction open, having failed the job; a second, whose
    payload would complete the job or be ignored, waits on the row's lock (even to ignore
    it). Committed, the first decided and the second finds the callback spent, never
    "ignored"; rolled back, the second decides as if it were alone."""
    [(job_id, callback_id)] = _park(dsn, [Asks(on_fail="payload.bad", on_complete="payload.ok")])
    outcome: list[Any] = []

    def second() -> None:
        with awa_fast.Client(dsn) as racer:
            try:
                outcome.append(racer.resolve_callback(callback_id, payload))
            except awa_fast.CallbackNotFound as exc:
                outcome.append(exc)

    with psycopg.connect(dsn) as holder:
        held = _hold_resolve(holder, admin.resolve_callback(callback_id, {"bad": True}))
        assert held.is_failed()
        racer = threading.Thread(target=second)
        racer.start()
        wait_until(lambda: lock_waiters(dsn) > 0, timeout=10, what="the second resolve to block")
        holder.commit() if commit else holder.rollback()
    racer.join(timeout=10)
    assert not racer.is_alive() and len(outcome) == 1
    if commit:
        assert isinstance(outcome[0], awa_fast.CallbackNotFound)
        assert row_of(dsn, job_id)["state"] == "failed"
    elif payload:
        assert outcome[0].is_completed() and outcome[0].payload == payload
        assert row_of(dsn, job_id)["state"] == "completed"
    else:
        assert outcome[0].reason == BY_DEFAULT
        assert row_of(dsn, job_id)["state"] == "waiting_external"
