"""Logs a machine can read: one JSON object a line, with the fields a log line names.

awa-fast logs through the standard library (loggers ``awa_fast.*``). Its lines about a
job, a worker process or a batch pass what they are about as ``extra`` fields
(``job_id``, ``run_lease``, ``worker_pid``, ``cause``, ``jobs``, ...): the text format
shows only the message, :class:`JsonFormatter` writes each as a field of its own, so a
log pipeline can filter on ``job_id`` without parsing prose. ``awa-fast serve
--log-format json`` installs it; a program that runs a client itself can install it on
its own handlers.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"

# The attributes every LogRecord has; any other attribute came in as ``extra``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, RFC 3339), ``level``, ``logger``,
    ``pid``, ``message``, each ``extra`` field, and ``exception`` (the formatted traceback)
    when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        line.update((k, v) for k, v in record.__dict__.items() if k not in _STANDARD)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return orjson.dumps(line, default=repr).decode()


def configure(*, fmt: LogFormat = "text", level: str = "INFO") -> None:
    """Send every log record at ``level`` or above to stderr in ``fmt``, replacing the root
    logger's handlers (the CLI's setup; worker processes inherit it when forked)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


class Throttled:
    """Warnings that a party outside the application can provoke at will (a NOTIFY
    anyone may send): the first is logged at once, and later ones at most once per
    ``every`` seconds, with the count of those not logged between."""

    def __init__(self, logger: logging.Logger, *, every: float = 60.0) -> None:
        self._logger = logger
        self._every = every
        self._next = 0.0
        self._unlogged = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._unlogged += 1
            return
        if self._unlogged:
            message += f" ({self._unlogged} more like it since, not logged)"
        self._next, self._unlogged = now + self._every, 0
        self._logger.warning(message, *args)
