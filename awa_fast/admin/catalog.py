"""What hosts declare when they start, periodic schedules and queue and kind descriptors,
as admins read it: rows the hosts own, listed, or (a schedule) deleted or run now."""

from __future__ import annotations

from typing import Any

from awa_fast import validation
from awa_fast.admin.ops import Op, Rows, any_rows
from awa_fast.db.queries import Q


def list_cron_jobs() -> Op[list[dict[str, Any]]]:
    """Every periodic job's row, by name."""
    return Op(Q.cron_list, {}, lambda rows: [dict(row) for row in rows])


def delete_cron_job(name: str) -> Op[bool]:
    """Remove a schedule (a host that still registers it writes it back when it starts)."""
    return Op(Q.cron_delete, {"name": name}, any_rows)


def run_cron_job_now(name: str, *, actor: str) -> Op[int | None]:
    """Insert a periodic job's job now, off schedule, its metadata naming ``actor`` as who
    asked; its id, None if no such schedule. The schedule's next fire stays."""
    params = {"name": validation.name("name", name), "actor": actor}
    return Op(Q.cron_run_now, params, lambda rows: rows[0]["id"] if rows else None)


def list_queue_descriptors() -> Op[list[dict[str, Any]]]:
    """Every queue descriptor's row, by queue (awa_fast.descriptors)."""
    return _descriptors("queue")


def list_job_kind_descriptors() -> Op[list[dict[str, Any]]]:
    """Every job-kind descriptor's row, by kind (awa_fast.descriptors)."""
    return _descriptors("kind")


def _descriptors(scope: str) -> Op[list[dict[str, Any]]]:
    """The rows of one scope, each named by its scope ("queue": ..., or "kind": ...)."""

    def shape(rows: Rows) -> list[dict[str, Any]]:
        return [
            {scope: row["name"], **{k: v for k, v in row.items() if k != "name"}} for row in rows
        ]

    return Op(Q.descriptor_list, {"scope": scope}, shape)
