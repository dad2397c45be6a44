"""The synchronous twin of :mod:`awa_fast.producer`, generated from its asyncio code by
tools/async_to_sync.py: do not edit."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Unpack

import psycopg
from psycopg.rows import dict_row

from awa_fast import backpressure
from awa_fast.db.queries import Q
from awa_fast.errors import UniqueConflict
from awa_fast.producer import (
    _NOW_AND_IDS,
    InsertSteps,
    PreparedJob,
    Rows,
    _copy_chunks,
    _copy_lines,
    _one_copy,
    _place,
    _transaction,
    _uniform_ids,
    _uniform_params,
    _uniform_statement,
    insert_steps,
    prepare,
    prepare_many,
    request_of,
)
from awa_fast.tracing import active
from awa_fast.types import (
    InsertOptions,
    JobRow,
)


def insert(
    conn: psycopg.Connection[Any],
    args: object,
    *,
    traces: bool = True,
    **options: Unpack[InsertOptions],
) -> JobRow:
    """Insert one job on ``conn``, inside the caller's transaction if one is open: the job
    is visible when that transaction commits and gone if it rolls back. With OpenTelemetry
    set up, and ``traces``, in a producer span whose context the job carries."""
    job = prepare(request_of(args, options))
    tracing = active(traces)  # None without OpenTelemetry: nothing more to do
    if tracing is None:
        return insert_prepared(conn, job)
    with tracing.sending([job]) as sent:
        return sent(insert_prepared(conn, job))


def insert_prepared(
    conn: psycopg.Connection[Any], job: PreparedJob, *, parent_id: int | None = None
) -> JobRow:
    """Insert ``job``, validated already (:func:`prepare`), as :func:`insert` does;
    ``parent_id`` as for :func:`insert_steps`."""
    with (
        _transaction(conn, one_statement=job.unique_key is None),
        conn.cursor(row_factory=dict_row) as cur,
    ):

        def execute(sql: str, params: dict[str, Any]) -> Rows:
            cur.execute(sql, params)
            return cur.fetchall()

        return drive(insert_steps(job, parent_id=parent_id), execute)


def drive(steps: InsertSteps, execute: Callable[[str, dict[str, Any]], Rows]) -> JobRow:
    """Run ``steps`` with ``execute`` (a statement and its parameters -> its rows)."""
    step = next(steps)
    while True:
        try:
            step = steps.send(execute(*step))
        except StopIteration as done:
            row: JobRow = done.value
            return row


def insert_many(
    conn: psycopg.Connection[Any],
    items: Iterable[object],
    *,
    traces: bool = True,
    **options: Unpack[InsertOptions],
) -> list[int]:
    """Insert many jobs in one transaction; returns their ids in order.

    A uniform batch (see :func:`_uniform_params`) is one INSERT; any other goes over COPY.
    Ids come back in item order. Unique jobs go through the claim path one by one; a unique
    job whose key is held by a live job is skipped (its id is absent from the result).
    ``traces`` as for :func:`insert`: one producer span for the batch.
    Backpressure (``max_queue_depth``) is all or nothing: every queue asked of is checked
    with all the jobs the call adds there before anything is written, and one that would
    pass its limit refuses the whole call (:class:`~awa_fast.errors.QueueFull`).
    """
    items = list(items)
    uniform = _uniform_params(items, options)
    jobs = prepare_many(items, options) if uniform is None else []
    tracing = active(traces)
    if tracing is None:
        return _insert_many(conn, items, uniform, jobs)
    with tracing.sending(jobs, uniform) as sent:
        return sent(_insert_many(conn, items, uniform, jobs))


def _insert_many(
    conn: psycopg.Connection[Any],
    items: list[object],
    uniform: dict[str, Any] | None,
    jobs: list[PreparedJob],
) -> list[int]:
    """:func:`insert_many`'s statements, for ``items`` validated: ``uniform``'s
    parameters, or else ``jobs``."""
    if uniform is not None:
        limit = uniform.pop("max_queue_depth")
        if limit is not None:
            _admit(conn, [(uniform["queue"], uniform["count"], limit)])
        with _transaction(conn, one_statement=True):
            cur = conn.execute(_uniform_statement(items), uniform)
            return _uniform_ids(cur.fetchall())
    if any(job.options.max_queue_depth is not None for job in jobs):
        _admit(conn, [(j.options.queue, 1, j.options.max_queue_depth) for j in jobs])
    plain = [j for j in jobs if j.unique_key is None]
    placed: list[int | None] = [None] * len(jobs)
    # Ids come from a sequence, outside any transaction's reach: with one COPY to send,
    # that COPY alone decides whether the batch is written.
    with _transaction(conn, one_statement=_one_copy(jobs)):
        if plain:
            cur = conn.execute(_NOW_AND_IDS, (len(plain),))
            row = cur.fetchone()
            assert row is not None
            now, ids = row
            with conn.cursor() as copy_cur:
                for sql, lines in _copy_lines(plain, ids, now).items():
                    with copy_cur.copy(sql) as copy:
                        for chunk in _copy_chunks(lines):
                            copy.write(chunk)
            _place(placed, jobs, ids)
        for index, job in enumerate(jobs):
            if job.unique_key is not None:
                with contextlib.suppress(UniqueConflict):
                    inserted = insert_prepared(conn, job)
                    placed[index] = inserted.id
    return [job_id for job_id in placed if job_id is not None]


def _admit(conn: psycopg.Connection[Any], groups: Iterable[tuple[str, int, int | None]]) -> None:
    """Refuse (:class:`~awa_fast.errors.QueueFull`) the jobs, in groups of (queue, how
    many, limit asked), that would take a queue past its limit; one read of the depths."""
    asked = backpressure.wanted(groups)
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(Q.queue_backlog, backpressure.params(asked))
        backpressure.admit(asked, cur.fetchall())
