"""Cron expressions: parsing, and the fire times a schedule has after a moment.

Five fields, ``minute hour day-of-month month day-of-week``, each ``*``, a value, a range
``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n``, or a comma list of those; months and days of
the week also by their English three-letter names (``jan``, ``mon``), Sunday as 0 or 7;
and the macros ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily``
(``@midnight``) and ``@hourly``. As in Vixie cron, when both day fields are restricted a
day matching either one fires.

Times are matched on the wall clock of the schedule's IANA time zone. Each matching wall
time fires once: a time that a daylight-saving change repeats fires at its first
occurrence, and one that it skips fires at the instant it would have named (an hour
later by the new clock).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from awa_fast.errors import ValidationError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name: int = 0  # the value of names[0]


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day of week", 0, 7, _DAYS, 0),
)

# A schedule whose fields can only meet on a date that never comes (30 February) has no
# next fire; the search gives up after this many days rather than loop for ever.
_SEARCH_DAYS = 366 * 8


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression: the values each field matches."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month is *
    any_weekday: bool  # day of week is *

    def _day_matches(self, moment: datetime) -> bool:
        in_month = moment.day in self.days
        in_week = (moment.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def next_wall_time(self, after: datetime) -> datetime | None:
        """The first matching wall-clock minute after the naive ``after``, or None when
        the fields never meet."""
        moment = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = moment + timedelta(days=_SEARCH_DAYS)
        while moment < limit:
            if moment.month not in self.months:
                year, month = divmod(moment.month, 12)
                moment = datetime(moment.year + year, month + 1, 1)
            elif not self._day_matches(moment):
                moment = datetime(moment.year, moment.month, moment.day) + timedelta(days=1)
            elif moment.hour not in self.hours:
                moment = moment.replace(minute=0) + timedelta(hours=1)
            elif moment.minute not in self.minutes:
                moment += timedelta(minutes=1)
            else:
                return moment
        return None

    def next_fire(self, after: datetime, zone: ZoneInfo) -> datetime | None:
        """The first fire strictly after the aware instant ``after``, as a UTC instant."""
        wall: datetime | None = after.astimezone(zone).replace(tzinfo=None)
        while wall is not None:
            wall = self.next_wall_time(wall)
            if wall is not None and (fire := wall.replace(tzinfo=zone).astimezone(UTC)) > after:
                return fire
        return None

    def fires(
        self, after: datetime, until: datetime, zone: ZoneInfo, *, limit: int | None = None
    ) -> list[datetime]:
        """The fires in (``after``, ``until``], oldest first; the first ``limit`` only."""
        found: list[datetime] = []
        fire = self.next_fire(after, zone)
        while fire is not None and fire <= until and len(found) != limit:
            found.append(fire)
            fire = self.next_fire(fire, zone)
        return found


@functools.lru_cache(maxsize=256)
def parse(expression: str) -> Cron:
    """Parse ``expression``; raises :class:`ValidationError` naming ``cron_expr`` and the
    field at fault."""
    if not isinstance(expression, str):
        raise ValidationError("cron_expr", f"must be a string, got {type(expression).__name__}")
    text = MACROS.get(expression.strip().lower(), expression)
    parts = text.split()
    if len(parts) != len(_FIELDS):
        raise ValidationError(
            "cron_expr",
            f"{expression!r} has {len(parts)} fields; a cron expression has 5: minute hour "
            "day-of-month month day-of-week (or a macro such as @daily)",
        )
    values = [_values(field, part, expression) for field, part in zip(_FIELDS, parts, strict=True)]
    return Cron(
        expression=expression,
        minutes=values[0],
        hours=values[1],
        days=values[2],
        months=values[3],
        weekdays=frozenset(v % 7 for v in values[4]),
        any_day=parts[2] == "*",
        any_weekday=parts[4] == "*",
    )


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; raises :class:`ValidationError` naming ``timezone``."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValidationError("timezone", f"unknown IANA time zone {name!r}") from exc


def _values(field: _Field, part: str, expression: str) -> frozenset[int]:
    found: set[int] = set()
    for item in part.lower().split(","):
        found.update(_item(field, item, expression))
    return frozenset(found)


def _item(field: _Field, item: str, expression: str) -> range:
    def bad(why: str) -> ValidationError:
        return ValidationError("cron_expr", f"{expression!r}: {field.name} {item!r}: {why}")

    span, _, step_text = item.partition("/")
    step = 1
    if step_text:
        if not step_text.isdigit() or int(step_text) < 1:
            raise bad("a step must be a whole number >= 1")
        step = int(step_text)
    if span == "*":
        low, high = field.low, field.high
    else:
        first, dash, last = span.partition("-")
        low = _value(field, first, bad)
        high = _value(field, last, bad) if dash else (field.high if step_text else low)
        if low > high:
            raise bad("a range must run from low to high")
    return range(low, high + 1, step)


def _value(field: _Field, text: str, bad: Callable[[str], ValidationError]) -> int:
    if text in field.names:
        return field.names.index(text) + field.first_name
    if not text.isdigit():
        raise bad(f"expected a number from {field.low} to {field.high}")
    value = int(text)
    if not field.low <= value <= field.high:
        raise bad(f"out of range {field.low}-{field.high}")
    return value
