"""Cron expressions: what they match, on which wall clock, and how bad ones are refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from awa_fast import cron
from awa_fast.errors import ValidationError


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def test_ranges_steps_and_names_on_the_schedules_wall_clock() -> None:
    """Every quarter hour from 9 to 17 on weekdays, London time (GMT in November): Friday
    afternoon, then Monday morning."""
    fires = cron.parse("*/15 9-17 * * mon-fri").fires(
        at(2026, 11, 27, 16, 50), at(2026, 11, 30, 9, 20), cron.zone("Europe/London")
    )
    assert fires == [
        at(2026, 11, 27, 17, 0),
        at(2026, 11, 27, 17, 15),
        at(2026, 11, 27, 17, 30),
        at(2026, 11, 27, 17, 45),
        at(2026, 11, 30, 9, 0),
        at(2026, 11, 30, 9, 15),
    ]


def test_a_wall_time_fires_once_across_daylight_saving_changes() -> None:
    new_york = cron.zone("America/New_York")
    # 2026-03-08 02:00 EST jumps to 03:00 EDT: 02:30 that day fires at the instant it names.
    skipped = cron.parse("30 2 * * *").fires(at(2026, 3, 7), at(2026, 3, 10), new_york)
    assert skipped == [at(2026, 3, 7, 7, 30), at(2026, 3, 8, 7, 30), at(2026, 3, 9, 6, 30)]
    # 2026-11-01 02:00 EDT falls back to 01:00 EST: 01:30 that day fires once, the first time.
    repeated = cron.parse("30 1 * * *").fires(at(2026, 10, 31), at(2026, 11, 2, 12), new_york)
    assert repeated == [at(2026, 10, 31, 5, 30), at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6, 30)]


def test_both_day_fields_restricted_match_either() -> None:
    """The 1st and 15th, and every Monday (June 2026: Monday the 1st, 8th, 15th)."""
    fires = cron.parse("0 0 1,15 * 1").fires(at(2026, 5, 31), at(2026, 6, 20), cron.zone("UTC"))
    assert fires == [at(2026, 6, 1), at(2026, 6, 8), at(2026, 6, 15)]
    sundays = cron.parse("0 12 * * 7").fires(at(2026, 6, 1), at(2026, 6, 15), cron.zone("UTC"))
    assert sundays == [at(2026, 6, 7, 12), at(2026, 6, 14, 12)]


@pytest.mark.parametrize(
    ("macro", "expression"),
    [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@WEEKLY", "0 0 * * 0")],
)
def test_macros_stand_for_their_expressions(macro: str, expression: str) -> None:
    utc = cron.zone("UTC")
    span = (at(2026, 1, 1), at(2026, 2, 1))
    assert cron.parse(macro).fires(*span, utc) == cron.parse(expression).fires(*span, utc)


def test_a_date_that_never_comes_has_no_fire_and_a_rare_one_is_found() -> None:
    utc = cron.zone("UTC")
    assert cron.parse("0 0 30 2 *").next_fire(at(2026, 1, 1), utc) is None
    assert cron.parse("0 0 29 2 *").next_fire(at(2026, 1, 1), utc) == at(2028, 2, 29)


def test_fires_stop_at_the_limit() -> None:
    fires = cron.parse("* * * * *").fires(at(2026, 1, 1), at(2026, 1, 2), cron.zone("UTC"), limit=3)
    assert fires == [at(2026, 1, 1, 0, 1), at(2026, 1, 1, 0, 2), at(2026, 1, 1, 0, 3)]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("* * * *", "has 4 fields; a cron expression has 5"),
        ("* * * * * *", "has 6 fields"),
        ("61 * * * *", "minute '61': out of range 0-59"),
        ("* 24 * * *", "hour '24': out of range 0-23"),
        ("* * 0 * *", "day of month '0': out of range 1-31"),
        ("* * * foo *", "month 'foo': expected a number from 1 to 12"),
        ("* * * * 8", "day of week '8': out of range 0-7"),
        ("5-1 * * * *", "minute '5-1': a range must run from low to high"),
        ("*/0 * * * *", r"minute '\*/0': a step must be a whole number >= 1"),
        ("1,,2 * * * *", "minute '': expected a number"),
    ],
)
def test_bad_expressions_are_refused_naming_the_field(expression: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as raised:
        cron.parse(expression)
    assert raised.value.field == "cron_expr"


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ValidationError, match="timezone: unknown IANA time zone 'Mars/Olympus'"):
        cron.zone("Mars/Olympus")
