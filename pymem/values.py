"""Checks and conversions of values the Python API passes to SQL, done before a query is sent
(PostgreSQL cannot carry NUL characters or lone surrogates, so they are refused here with a
clear error instead of a driver error). Every rule about what is valid lives in SQL."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple, overload

from psycopg.types.json import Jsonb

from .errors import ValidationError


@overload
def text(value: Any, what: str, *, allow_none: Literal[False] = False) -> str: ...
@overload
def text(value: Any, what: str, *, allow_none: bool) -> str | None: ...
def text(value: Any, what: str, *, allow_none: bool = False) -> str | None:
    """``value`` if it is a string PostgreSQL can store, else `ValidationError`."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{what} is not valid Unicode text (lone surrogate?)") from exc
    return value


def number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{what} must be a number, not {value!r}")
    return float(value)


@overload
def integer(value: Any, what: str, *, allow_none: Literal[False] = False) -> int: ...
@overload
def integer(value: Any, what: str, *, allow_none: bool) -> int | None: ...
def integer(value: Any, what: str, *, allow_none: bool = False) -> int | None:
    """``value`` if it is an int (not a bool, not a numeric string: ``k="3"`` is refused as
    ``Memory(recall_k="5")`` is), else `ValidationError`. The SQL checks its range."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{what} must be an integer, not {value!r}")
    return value


def timestamp(value: Any, what: str = "created_at") -> datetime | None:
    """A time as given (None: now). A naive datetime is refused: its zone would be the database
    session's, not the caller's. The SQL checks the rest (e.g. not in the future)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError(f"{what} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{what} must be timezone-aware, e.g. datetime(..., tzinfo=timezone.utc)")
    return value


def duration(value: Any, what: str) -> timedelta | None:
    """``value`` in seconds (a finite number) or a timedelta, as a timedelta; None stays None. The
    SQL checks the rest (positive, within 100 years)."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{what} must be a number of seconds or a timedelta, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValidationError(f"{what} must be a finite number of seconds (got {value!r})")
    if value <= 0:  # said here in seconds: the SQL would show the interval ("-1 days +23:59:59")
        raise ValidationError(f"{what} must be a positive number of seconds (got {value!r})")
    try:
        return timedelta(seconds=value)
    except OverflowError as exc:
        raise ValidationError(f"{what} must be at most 100 years") from exc


class ValidTime(NamedTuple):
    valid_from: datetime | None
    valid_to: datetime | None


class Expiry(NamedTuple):
    ttl: timedelta | None
    expires_at: datetime | None


def valid_time(valid_from: Any, valid_to: Any) -> ValidTime:
    """When a fact holds in the world, as the SQL takes it: ``valid_from`` and ``valid_to``
    (timezone-aware; None: open on that side). The SQL checks the rest (pymem._valid_time: finite
    times, valid_from before valid_to)."""
    return ValidTime(timestamp(valid_from, "valid_from"), timestamp(valid_to, "valid_to"))


def expiry(ttl: Any, expires_at: Any) -> Expiry:
    """The expiry a write asks for, as the SQL takes it (``ttl`` an interval, ``expires_at`` a
    time): ``ttl`` in seconds (a finite number) or a timedelta, or ``expires_at`` (timezone-aware),
    not both; neither: no expiry. The SQL checks the rest (pymem._expiry: positive, within 100
    years, in the future)."""
    if ttl is not None and expires_at is not None:
        raise ValidationError("pass ttl or expires_at, not both")
    return Expiry(duration(ttl, "ttl"), timestamp(expires_at, "expires_at"))


def json_object(value: Any, what: str = "metadata") -> Jsonb:
    """A mapping (None: an empty one) as a JSON object parameter; anything else is refused."""
    if value is not None and not isinstance(value, Mapping):
        raise ValidationError(f"{what} must be a mapping (a JSON object)")
    return Jsonb(dict(value or {}))
