"""Recall over ``sql/api/recall*.sql``: the query of one recall of past messages
(``messages_recall``: `recall_query`, with its filters and the time a question names), which
``Memory.recall`` (`pymem.conversations`), ``context_read`` (`pymem.context`) and the memory page
(`pymem.browse`) send, and the per-user recall indexes of heavy users (`recall_indexes`,
``pymem recall-indexes``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import ValidationError
from .options import RecallOptions
from .runner import Operation, Query, run
from .timeref import named_time
from .values import json_object as _metadata, text
from . import calls

if TYPE_CHECKING:
    from .conversations import Where
    from .database import Database


#: The most messages one recall embeds before it ranks (the SQL limits' maximum): recall is exact.
RECALL_CATCH_UP = 10000


def _time(value: Any, what: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{what} must be a timezone-aware datetime, e.g. datetime(..., tzinfo=timezone.utc)")
    return value


class Filters(NamedTuple):
    """The SQL parameters of one recall's ``as_of``, ``since``, ``until`` and ``metadata``
    (messages_recall and context_read), checked."""

    as_of: datetime | None
    since: datetime | None
    until: datetime | None
    metadata: Any


def recall_filters(filters: Mapping[str, Any] | None) -> Filters:
    """The `Filters` of a call's ``filters=`` (None: none)."""
    f = dict(filters or {})
    metadata = f.get("metadata")
    return Filters(_time(f.get("as_of"), "as_of"), _time(f.get("since"), "since"), _time(f.get("until"), "until"),
                   None if metadata is None else _metadata(metadata, "metadata filter"))


def time_params(query: Any, as_of: datetime | None, weight: float) -> tuple[datetime | None, datetime | None]:
    """The SQL parameters ``time_from`` / ``time_to`` of one recall: the time a text query names
    (pymem.timeref.named_time, read from ``as_of``, else now), none for a vector query or a weight of 0."""
    span = named_time(query, as_of) if isinstance(query, str) and weight else None
    return (span[0], span[1]) if span else (None, None)


def recall_query(where: Where, r: RecallOptions, f: Filters, span: tuple[datetime | None, datetime | None], *,
                 k: int, window_size: int, query_vector: Any, embedder: str | None, query_text: str | None) -> Query:
    """``messages_recall`` for ``where``'s thread, ranked as ``r`` says but for ``k``."""
    return calls.messages_recall(
        user_id=where.user_id, thread_id=where.thread_id, project_id=where.project_id, k=k,
        min_content_chars=r.min_content_chars, window_size=window_size, recency_weight=r.recency_weight,
        importance_weight=r.importance_weight, half_life_seconds=r.half_life_seconds, min_score=r.min_score,
        lexical_weight=r.lexical_weight, next_turn_weight=r.next_turn_weight, time_weight=r.time_weight,
        query_vector=query_vector, embedder=embedder, query_text=query_text, as_of=f.as_of, since=f.since,
        until=f.until, metadata=f.metadata, time_from=span[0], time_to=span[1])


def _index_plan(project: str, min_messages: int, lock_timeout: float) -> Operation[list[dict[str, Any]]]:
    """recall_index_plan, after the transaction's lock timeout (its plan lock: an advisory lock)."""
    yield calls.lock_timeout_local(timeout=f"{max(1, round(lock_timeout * 1000))}ms")
    return (yield calls.recall_index_plan(project_id=project, min_messages=min_messages))


def recall_indexes(db: Database, project_id: str = "", min_messages: int = 50000, *, dry_run: bool = False,
                   report: Callable[[Mapping[str, Any]], None] | None = None,
                   lock_timeout: float = 10.0) -> list[dict[str, Any]]:
    """Bring a project's per-user recall indexes up to date (docs/recall-indexes.md): the steps of
    ``pymem.recall_index_plan`` (one row per CREATE or DROP INDEX CONCURRENTLY, or per heavy user's
    words to fill: SELECT pymem.recall_terms_fill(...)), each reported to
    ``report`` and then run, one at a time, outside any transaction, under the search path
    ``migrate`` pins (``pg_catalog, pymem, pg_temp``; the connection's own is put back after).
    ``dry_run`` plans and reports in a transaction that is rolled back: nothing is recorded or
    built. The plan waits at most ``lock_timeout`` seconds for the project's plan lock (an
    advisory lock any role could hold), then raises `pymem.TimeoutError` (55P03) naming
    who holds it. Needs the owner of pymem's tables (the role ``pymem migrate`` runs as)."""
    if not lock_timeout > 0:
        raise ValidationError(f"lock_timeout must be a positive number of seconds, not {lock_timeout!r}")
    project = text(project_id, "project id")
    with db.connection() as conn, conn.transaction(force_rollback=dry_run):  # the lock timeout, then the plan
        plan = run(_index_plan(project, min_messages, lock_timeout), db, conn=conn)
    if not plan or dry_run:
        for step in plan:
            if report is not None:
                report(step)
        return plan
    # a build takes as long as it takes, and its names are resolved as a migrate resolves them
    with db.unbounded() as conn:
        for step in plan:
            if report is not None:
                report(step)
            conn.execute(step["statement"])  # CONCURRENTLY: autocommit, one statement at a time
    return plan
