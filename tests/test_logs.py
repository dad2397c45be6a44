"""The JSON log format: one object a line, a log call's extra fields as fields of their own."""

from __future__ import annotations

import logging
import sys

import orjson

from awa_fast.logs import JsonFormatter


def _record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.getLogger("awa_fast.test").makeRecord(
        "awa_fast.test", logging.WARNING, __file__, 1, message, args, None, extra=extra
    )
    record.created = 1_700_000_000.25
    return record


def test_a_record_becomes_one_line_of_json_with_its_extra_fields() -> None:
    record = _record("job %s: %s", 7, "cut short", job_id=7, run_lease=2, job_ids=[1, 2])
    text = JsonFormatter().format(record)
    assert "\n" not in text
    assert orjson.loads(text) == {
        "time": "2023-11-14T22:13:20.250+00:00",
        "level": "WARNING",
        "logger": "awa_fast.test",
        "pid": record.process,
        "message": "job 7: cut short",
        "job_id": 7,
        "run_lease": 2,
        "job_ids": [1, 2],
    }


def test_an_exception_is_one_field_and_an_unencodable_value_its_repr() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = _record("failed", hosts={"h1"})
        record.exc_info = sys.exc_info()
    line = orjson.loads(JsonFormatter().format(record))
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert line["exception"].endswith("ValueError: bad\nthing")
    assert line["hosts"] == "{'h1'}"
