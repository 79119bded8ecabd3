"""The time a question names, for time-aware recall (issue 32, item 3): ``named_time(text,
reference)`` reads an English date, month or year in a query ("on 13 October, 2023", "October 13,
2023", "in July 2023", "in August", "in 2022", "yesterday", "last week", "last month", "last
year") and returns the half-open span ``[start, end)`` it covers, in UTC, or ``None``. Relative
ones ("in August" without a year, "last week") are read from ``reference`` (the recall's
``as_of``, else now). Memory sends the span as ``time_from`` / ``time_to`` with the option
``time_weight``: recall ranks the messages created in it higher (docs/sql.md "Recall")."""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_NAMES = "|".join(_MONTHS)
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_NAMES}),? (\d{{4}})\b")
_MONTH_DAY_YEAR = re.compile(rf"\b({_NAMES}) (\d{{1,2}})(?:st|nd|rd|th)?,? (\d{{4}})\b")
_MONTH_YEAR = re.compile(rf"\b({_NAMES}),? (\d{{4}})\b")
_IN_MONTH = re.compile(rf"\bin ({_NAMES})\b")
_IN_YEAR = re.compile(r"\bin (\d{4})\b")
_LAST = re.compile(r"\b(yesterday|last week|last month|last year)\b")


def _month(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    return start, datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)


def named_time(text: str, reference: datetime | None = None) -> tuple[datetime, datetime] | None:
    """The span ``[start, end)`` (UTC) of the first date, month or year ``text`` names, or None."""
    ref = (reference or datetime.now(UTC)).astimezone(UTC)
    t = " ".join(text.lower().split())
    try:
        if m := _DAY_MONTH_YEAR.search(t):
            day = datetime(int(m.group(3)), _MONTHS[m.group(2)], int(m.group(1)), tzinfo=UTC)
            return day, day + timedelta(days=1)
        if m := _MONTH_DAY_YEAR.search(t):
            day = datetime(int(m.group(3)), _MONTHS[m.group(1)], int(m.group(2)), tzinfo=UTC)
            return day, day + timedelta(days=1)
    except ValueError:  # "31 February": no such day
        return None
    if m := _MONTH_YEAR.search(t):
        return _month(int(m.group(2)), _MONTHS[m.group(1)])
    if m := _IN_MONTH.search(t):  # the latest such month not after the reference
        month = _MONTHS[m.group(1)]
        return _month(ref.year if month <= ref.month else ref.year - 1, month)
    if m := _IN_YEAR.search(t):
        year = int(m.group(1))
        if 1 <= year < 9999:
            return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    if m := _LAST.search(t):
        today = datetime(ref.year, ref.month, ref.day, tzinfo=UTC)
        if m.group(1) == "yesterday":
            return today - timedelta(days=1), today
        if m.group(1) == "last week":
            monday = today - timedelta(days=today.weekday())
            return monday - timedelta(days=7), monday
        if m.group(1) == "last month":
            return _month(ref.year - (ref.month == 1), (ref.month - 2) % 12 + 1)
        return datetime(ref.year - 1, 1, 1, tzinfo=UTC), datetime(ref.year, 1, 1, tzinfo=UTC)
    return None
