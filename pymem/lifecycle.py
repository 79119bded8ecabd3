"""What ends memory on its own (sql/api/lifecycle.sql): `purge` deletes, in bounded batches,
what has expired (facts and keyed-store entries, items too) and the messages the project's
retention policy no longer keeps (`configure_retention`, `retention_policy`). Expiry
needs no purge to be correct (an expired fact or entry is invisible to every read at once); a
purge gives the space back. ``pymem purge`` runs it from the command line and ``pymem retention``
sets the policy; run the purge from cron, or pg_cron where installed (docs/sql.md "Expire and
purge", "Message retention")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from . import calls
from .database import Database
from .errors import ValidationError
from .runner import Operation, run
from .values import duration, text

#: the longest age a retention policy takes: 100 years (36,524 days, the shortest 100 calendar years)
MAX_AGE = timedelta(days=36524)


@dataclass(frozen=True)
class RetentionPolicy:
    """A project's retention policy for messages: ``messages_max_age`` (older messages are
    purged), ``messages_max_per_thread`` (a thread keeps its newest that many); None: no such
    limit; both None: every message is kept. ``updated_at``: when it was set."""

    messages_max_age: timedelta | None
    messages_max_per_thread: int | None
    updated_at: datetime | None


def _policy(row: dict[str, Any]) -> RetentionPolicy:
    return RetentionPolicy(row["messages_max_age"], row["messages_max_per_thread"], row["updated_at"])


def configure_retention(db: Database, project_id: str = "", *, messages_max_age: float | timedelta | None = None,
                        messages_max_per_thread: int | None = None) -> RetentionPolicy:
    """Set the project's retention policy for messages (``messages_max_age`` in seconds or a
    timedelta; both None removes it: every message is kept); `purge` applies it. An age
    first builds the index the age policy reads, ``pymem.messages_created``, with CREATE INDEX
    CONCURRENTLY when it is not there (writes go on meanwhile; on a large table it takes a
    while). Needs the owner role (``pymem.retention_configure`` is an administrators' function).
    Returns the policy in force."""
    if messages_max_per_thread is not None and (isinstance(messages_max_per_thread, bool)
                                                or not isinstance(messages_max_per_thread, int)):
        raise ValidationError(f"messages_max_per_thread must be an int, not {type(messages_max_per_thread).__name__}")
    project, age = text(project_id, "project_id"), duration(messages_max_age, "messages_max_age")
    if age is not None and not timedelta(0) < age <= MAX_AGE:
        # refused before the database-wide index is built for it (the SQL checks again, exactly)
        raise ValidationError(f"messages_max_age must be a positive interval of at most 100 years, not {age}")
    if age is not None:
        # the index an age policy reads, built once for the database (not by the migration: every
        # message write pays for it); CONCURRENTLY: autocommit, and as long as it takes
        db.maintain(calls.messages_created_index())
    return run(_configure(project, age, messages_max_per_thread), db)


def _configure(project: str, age: timedelta | None, per_thread: int | None) -> Operation[RetentionPolicy]:
    rows = yield calls.retention_configure(project_id=project, messages_max_age=age, messages_max_per_thread=per_thread)
    return _policy(rows[0])


def _policy_read(project: str) -> Operation[RetentionPolicy]:
    rows = yield calls.retention_policy(project_id=project)
    return _policy(rows[0])


def retention_policy(db: Database, project_id: str = "", *, conn: psycopg.Connection | None = None) -> RetentionPolicy:
    """The project's retention policy for messages (every field None: every message is kept)."""
    return run(_policy_read(text(project_id, "project_id")), db, conn=conn)


def _purge(project: str, max_rows: int, until_done: bool) -> Operation[dict[str, int]]:
    total: dict[str, int] = {}
    while True:
        rows = yield calls.purge(project_id=project, max_rows=max_rows)
        for r in rows:
            total[r["kind"]] = total.get(r["kind"], 0) + r["purged"]
        if not until_done or all(r["purged"] < max_rows for r in rows) or max_rows == 0:
            return total


def purge(db: Database, project_id: str = "", *, max_rows: int = 1000, until_done: bool = False,
          conn: psycopg.Connection | None = None) -> dict[str, int]:
    """Delete up to ``max_rows`` expired rows of the project per call of ``pymem.purge`` (each its
    own short transaction; ``max_rows`` bounds each kind), once, or with ``until_done`` until a
    call deletes fewer than ``max_rows`` of every kind. Returns how many rows of each kind were
    deleted: ``{"facts": n, "store_entries": m, "messages": k, "changes": c, "learning_usage": u}``
    (messages: those out of the project's retention policy; changes: the change feed's rows older
    than its age; learning_usage: learning's daily usage of days that ended before it).
    ``conn=`` (or ``with pymem.bound(db, conn):``): on your own psycopg connection, inside its
    transaction (each call of ``pymem.purge`` then in that one transaction)."""
    return run(_purge(text(project_id, "project_id"), max_rows, until_done), db, conn=conn)
