"""The change feed over ``sql/api/changes.sql``: what every write changed, for services that cache
or mirror memory.

Every write to facts, messages, a thread's summary, store entries and erasure receipts appends a
row to ``pymem.changes`` in the writing transaction (one per statement and subject, by key, never
content). `changes_since` reads them in order after a position; `watch` (and
`awatch`) catch up from a position, then wait for more: a notification on the project's
channel wakes them (a random name that `channel` hands out to the project's own roles,
payload ``{"kind": ...}``), and they poll every ``poll_seconds`` in any case. A change gets its
position when its transaction commits, in the order the project's writers commit, so a reader
that restarts from the last position it saw misses nothing and sees nothing twice, and no open
transaction elsewhere holds the feed back (docs/sql.md "Change feed"). ``pymem watch`` prints
the feed as JSON lines. The feed is off until an administrator turns it on (`configure`):
every write pays for it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from . import calls
from .connection import connect_kwargs, errors
from .database import AsyncDatabase, Database
from .errors import ConfigError, ValidationError
from .runner import Operation, arun, run
from .values import text


@dataclass(frozen=True)
class Change:
    """One row of the change feed: ``position`` (increasing, per project), ``kind`` ('fact',
    'message', 'summary', 'store_entry', 'erasure'), ``op`` ('add', 'update', 'delete'),
    ``subject`` (a user id, 'scope:scope_id' for facts, a store key, '' for an erasure), ``keys``
    (what changed, by key: ``{"ids"}``, ``{"thread_id", "from_seq", "to_seq"}``, ``{"thread_id",
    "through_seq"}``, ``{"paths"}``), ``rows`` (how many rows the write changed) and
    ``created_at``."""

    position: int
    kind: str
    op: str
    subject: str
    keys: dict[str, Any]
    rows: int
    created_at: datetime


def channel(db: Database, project_id: str = "", *, conn: psycopg.Connection | None = None) -> str:
    """The channel a project's writes notify (``pymem.change_channel``): a random name, made the
    first time one of the project's roles asks and handed out only to them, so no other login can
    listen to the project's writes (the payload, ``{"kind": ...}``, names no project)."""
    return run(_channel(text(project_id, "project_id")), db, conn=conn)


def _checked(after: Any, batch: Any, poll_seconds: Any) -> None:
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise ValidationError(f"after must be a position (an int >= 0; None: from now), not {after!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10000:
        raise ValidationError(f"batch must be an int between 1 and 10000, not {batch!r}")
    if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)) or not 0.01 <= poll_seconds <= 3600:
        raise ValidationError(f"poll_seconds must be between 0.01 and 3600, not {poll_seconds!r}")


def _enabled() -> Operation[bool]:
    rows = yield calls.change_feed_enabled()
    return bool(rows[0]["enabled"])


def _configure(enabled: bool) -> Operation[bool]:
    rows = yield calls.change_feed_configure(enabled=enabled)
    return bool(rows[0]["enabled"])


def _since(project_id: str, after: int, max_changes: int) -> Operation[list[Change]]:
    rows = yield calls.changes_since(project_id=project_id, after=after, max_changes=max_changes)
    return [Change(**r) for r in rows]


def _channel(project_id: str) -> Operation[str]:
    rows = yield calls.change_channel(project_id=project_id)
    return str(rows[0]["channel"])


def _position(project_id: str) -> Operation[int]:
    rows = yield calls.change_position(project_id=project_id)
    return int(rows[0]["position"])


def enabled(db: Database, *, conn: psycopg.Connection | None = None) -> bool:
    """Whether writes append to the change feed (off until `configure` turns it on)."""
    return run(_enabled(), db, conn=conn)


def configure(db: Database, *, enabled: bool, conn: psycopg.Connection | None = None) -> bool:
    """Turn the change feed on or off for the whole database: every write of every project pays
    for it while it is on (docs/sql.md "Change feed"). Needs the owner role
    (``pymem.change_feed_configure`` is an administrators' function). Returns whether it is on.
    ``conn=`` (or ``with pymem.bound(db, conn):``): inside your own transaction (this function
    and the others of this module but `watch` / `awatch`)."""
    if not isinstance(enabled, bool):
        raise ValidationError("enabled must be True or False")
    return run(_configure(enabled), db, conn=conn)


_OFF = ("the change feed is off: writes append nothing to watch. An administrator turns it on with "
        "pymem.changes.configure(db, enabled=True) or SELECT pymem.change_feed_configure(enabled => true)")


def changes_since(db: Database, project_id: str = "", after: int = 0, max_changes: int = 1000, *,
                  conn: psycopg.Connection | None = None) -> list[Change]:
    """The project's changes after position ``after`` (0: from the start), in order, at most
    ``max_changes`` (``pymem.changes_since``)."""
    return run(_since(text(project_id, "project_id"), after, max_changes), db, conn=conn)


def position(db: Database, project_id: str = "", *, conn: psycopg.Connection | None = None) -> int:
    """The last position published in the project's feed (0: none yet)."""
    return run(_position(text(project_id, "project_id")), db, conn=conn)


def watch(db: Database, project_id: str = "", *, after: int | None = None, poll_seconds: float = 1.0,
          batch: int = 1000, stop: threading.Event | None = None) -> Iterator[Change]:
    """Every change of the project after ``after`` (None: from now), in order, then each new one
    as it is published, until ``stop`` is set (checked between waits) or the caller stops
    iterating. One connection of its own listens on the project's channel; the feed is read
    through ``db``'s pool."""
    _checked(after, batch, poll_seconds)
    if not enabled(db):
        raise ConfigError(_OFF)
    current = position(db, project_id) if after is None else after
    with errors(db.conninfo), psycopg.connect(db.conninfo, autocommit=True,
                                              **connect_kwargs(db.settings, db.conninfo)) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel(db, project_id))))
        while stop is None or not stop.is_set():
            found = changes_since(db, project_id, current, batch)
            for change in found:
                current = change.position
                yield change
            if len(found) < batch:  # caught up: wait for a notification, or the next poll
                for _ in listener.notifies(timeout=poll_seconds, stop_after=1):
                    pass


async def awatch(db: AsyncDatabase, project_id: str = "", *, after: int | None = None, poll_seconds: float = 1.0,
                 batch: int = 1000, stop: asyncio.Event | None = None) -> AsyncIterator[Change]:
    """The asyncio twin of `watch`."""
    _checked(after, batch, poll_seconds)
    if not await arun(_enabled(), db):
        raise ConfigError(_OFF)
    current = await arun(_position(text(project_id, "project_id")), db) if after is None else after
    name = await arun(_channel(text(project_id, "project_id")), db)
    with errors(db.conninfo):
        listener = await psycopg.AsyncConnection.connect(db.conninfo, autocommit=True,
                                                         **connect_kwargs(db.settings, db.conninfo))
    async with listener:
        await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
        while stop is None or not stop.is_set():
            found = await arun(_since(project_id, current, batch), db)
            for change in found:
                current = change.position
                yield change
            if len(found) < batch:
                async for _ in listener.notifies(timeout=poll_seconds, stop_after=1):
                    pass
