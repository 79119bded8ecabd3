"""Keyed memory stores over ``sql/api/stores*.sql``: ``pymem.MemoryStore`` (sync) and
``pymem.AsyncMemoryStore``.

A store is a transcript (chat messages, append-only) plus path-addressed text/JSON entries
with sha256/actor/time metadata, an audit log (on by default) and optional version history.
The database is the store: an entry write is committed when the call returns, checked against
``expected_sha`` inside the database (so it holds across processes and machines), and a store
loaded by another process sees it. ``read_entry`` returns an entry's content with the sha of
that content (one statement); ``update_json``/``update_text`` are the race-free
read-modify-write: read with sha, apply a function, write with ``expected_sha``, retry on
ConcurrencyError. The transcript is appended explicitly, as in the reference:
``append``/``extend`` collect messages and ``save()`` writes them in one call (one transaction).

Protections (audit, keep_versions, read_only_prefixes) are set when ``get_or_create`` creates a
store; opening an existing store never changes them (options that differ raise ConflictError,
PM404). ``protect()`` tightens them; ``configure()`` changes them either way and needs the owner
role (PermissionError for the app role). Both are logged to the store's audit log.

Expiry: a write may give its entry ``ttl=`` (seconds, or a timedelta) or ``expires_at=``
(timezone-aware); a write without either makes it non-expiring (a write replaces the entry,
expiry included; ``update_json``/``update_text`` take them too). An expired entry is gone for
every read at once (``read_*``, ``get_meta``, ``list_paths``) and its path is free again
(``MUST_NOT_EXIST`` succeeds); ``pymem.purge`` deletes it later. ``expires_at`` of
`EntryMeta` and `StoreEntry` says when (None: never).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb

from . import tracing
from .database import AsyncDatabase, Database
from .errors import ConcurrencyError, NotFoundError, ValidationError
from .runner import Binding, Callback, Operation, Query, arun, binding, run
from .values import expiry, text
from . import calls

T = TypeVar("T")

#: ``expected_sha=MUST_NOT_EXIST``: write only if the path does not exist yet.
MUST_NOT_EXIST = ""
_MISSING: Any = object()


@dataclass(frozen=True)
class EntryMeta:
    path: str
    kind: str
    sha: str
    size: int
    version: int
    actor: str | None
    reason: str | None
    created_at: datetime | None
    updated_at: datetime | None
    expires_at: datetime | None = None  # None: never


@dataclass(frozen=True)
class StoreEntry:
    """An entry as one statement read it: its content and the sha of exactly that content
    (pass ``sha`` as ``expected_sha`` to write back only if nobody changed it since)."""

    path: str
    kind: str
    content: str
    sha: str
    size: int
    version: int
    actor: str | None
    reason: str | None
    created_at: datetime | None
    updated_at: datetime | None
    expires_at: datetime | None = None  # None: never


@dataclass(frozen=True)
class AuditRecord:
    id: int
    path: str
    op: str
    old_sha: str | None
    new_sha: str | None
    actor: str | None
    reason: str | None
    at: datetime


@dataclass(frozen=True)
class Version:
    version: int
    kind: str
    sha: str
    size: int
    actor: str | None
    reason: str | None
    at: datetime


def _message(m: Any) -> dict[str, Any]:
    if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
        raise ValidationError("a transcript message is a mapping with a 'role' string, e.g. {'role': 'user', 'content': '...'}")
    return dict(m)


class _Store:
    """The operations MemoryStore and AsyncMemoryStore share (see `pymem.runner`)."""

    key: str
    project_id: str
    actor: str | None

    def _init(self, key: str, project_id: str, actor: str | None) -> None:
        self.key = text(key, "store key")
        self.project_id = text(project_id, "project_id")
        self.actor = text(actor, "actor", allow_none=True)
        self.messages: list[dict[str, Any]] = []
        self._saved = 0
        self.audit = True
        self.keep_versions = False
        self.read_only_prefixes: list[str] = []

    def _open(self, create: bool, audit, keep_versions, read_only_prefixes) -> Operation[Any]:
        if read_only_prefixes is not None:
            read_only_prefixes = [text(p, "read-only prefix") for p in read_only_prefixes]
        rows = yield calls.store_open(store_key=self.key, project_id=self.project_id, audit=audit,
                                      keep_versions=keep_versions, read_only_prefixes=read_only_prefixes, create=create)
        row = rows[0]
        self.audit, self.keep_versions, self.read_only_prefixes = row["audit_on"], row["versions_on"], row["read_only"]
        yield from self._load()
        return self

    def _protections(self, query: Callable[..., Query], audit, keep_versions, read_only_prefixes, actor,
                     reason) -> Operation[bool]:
        """``query``: calls.store_protect or calls.store_configure (the same parameters)."""
        if read_only_prefixes is not None:
            read_only_prefixes = [text(p, "read-only prefix") for p in read_only_prefixes]
        rows = yield query(store_key=self.key, project_id=self.project_id, audit=audit, keep_versions=keep_versions,
                           read_only_prefixes=read_only_prefixes,
                           actor=text(actor if actor is not None else self.actor, "actor", allow_none=True),
                           reason=text(reason, "reason", allow_none=True))
        row = rows[0]
        self.audit, self.keep_versions, self.read_only_prefixes = row["audit_on"], row["versions_on"], row["read_only"]
        return bool(row["changed"])

    def _load(self) -> Operation[None]:
        rows = yield calls.store_messages_read(store_key=self.key, project_id=self.project_id)
        self.messages = [r["message"] for r in rows]
        self._saved = len(self.messages)

    def _write(self, path, content, kind, expected_sha, actor, reason, ttl=None, expires_at=None) -> Operation[str]:
        path, content = text(path, "path"), text(content, "content")
        actor = text(actor if actor is not None else self.actor, "actor", allow_none=True)
        reason = text(reason, "reason", allow_none=True)
        expected_sha, ex = text(expected_sha, "expected_sha", allow_none=True), expiry(ttl, expires_at)
        rows = yield calls.store_write(store_key=self.key, project_id=self.project_id, path=path, content=content,
                                       kind=kind, actor=actor, reason=reason, expected_sha=expected_sha, ttl=ex.ttl,
                                       expires_at=ex.expires_at)
        return rows[0]["sha"]

    def _read(self, path) -> Operation[dict[str, Any] | None]:
        rows = yield calls.store_read(store_key=self.key, project_id=self.project_id, path=text(path, "path"))
        return rows[0] if rows else None

    def _read_entry(self, path) -> Operation[StoreEntry | None]:
        row = yield from self._read(path)
        return None if row is None else StoreEntry(path=path, **row)

    def _update(self, path, fn, default, kind, retries, actor, reason, ttl=None, expires_at=None) -> Operation[Any]:
        """Read ``path`` with its sha (one statement), call ``fn`` on a fresh copy of its value
        (``default`` when it does not exist), write the result with that sha as ``expected_sha``
        (MUST_NOT_EXIST for a new path); on ConcurrencyError wait a little (jittered, doubling)
        and start again, at most ``retries`` times. ``fn`` never sees a value older than the
        read its result is checked against."""
        path = text(path, "path")
        expiry(ttl, expires_at)  # checked once, before the first read
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValidationError(f"retries must be a non-negative integer, not {retries!r}")
        if kind == "json":
            encode, decode = _encode_json, lambda content: _decode_json(path, content)
        else:
            encode, decode = (lambda value: text(value, "the new content")), (lambda content: content)
        if default is not _MISSING:
            default = encode(default)  # checked once; each attempt decodes its own copy
        conflict: Exception | None = None
        for attempt in range(retries + 1):
            if attempt:
                yield Callback(time.sleep, (random.uniform(0, min(0.005 * 2 ** attempt, 0.5)),))
            row = yield from self._read(path)
            if row is None and default is _MISSING:
                raise NotFoundError(f"{path!r} does not exist: pass default= to create it", sqlstate="P0002")
            current, expected = (default, MUST_NOT_EXIST) if row is None else (row["content"], row["sha"])
            new = yield Callback(fn, (decode(current),))
            try:
                yield from self._write(path, encode(new), kind, expected, actor, reason, ttl, expires_at)
            except ConcurrencyError as exc:
                conflict = exc
                continue
            return new
        raise ConcurrencyError(
            f"{path!r} changed under each of {retries + 1} attempts to update it (last: {conflict}); "
            f"retry later or pass a larger retries=", sqlstate="PM401") from conflict

    def _meta(self, path) -> Operation[EntryMeta | None]:
        rows = yield calls.store_meta(store_key=self.key, project_id=self.project_id, path=text(path, "path"))
        return EntryMeta(path=path, **rows[0]) if rows else None

    def _list(self, prefix) -> Operation[list[str]]:
        rows = yield calls.store_list(store_key=self.key, project_id=self.project_id, prefix=text(prefix, "prefix"))
        return [r["path"] for r in rows]

    def _delete(self, path, expected_sha, actor, reason) -> Operation[bool]:
        rows = yield calls.store_delete(store_key=self.key, project_id=self.project_id, path=text(path, "path"),
                                        actor=text(actor if actor is not None else self.actor, "actor",
                                                   allow_none=True),
                                        reason=text(reason, "reason", allow_none=True),
                                        expected_sha=text(expected_sha, "expected_sha", allow_none=True))
        return bool(rows[0]["deleted"])

    def _audit_tail(self, n) -> Operation[list[AuditRecord]]:
        rows = yield calls.store_audit_tail(store_key=self.key, project_id=self.project_id, n=n)
        return [AuditRecord(**r) for r in rows]

    def _versions(self, path) -> Operation[list[Version]]:
        rows = yield calls.store_versions(store_key=self.key, project_id=self.project_id, path=text(path, "path"))
        return [Version(**r) for r in rows]

    def _read_version(self, path, version) -> Operation[str]:
        rows = yield calls.store_version_read(store_key=self.key, project_id=self.project_id, path=text(path, "path"),
                                              version=version)
        if not rows:
            raise NotFoundError(f"no version {version} of {path!r}", sqlstate="P0002")
        return rows[0]["content"]

    def _restore(self, path, version, expected_sha, actor, reason) -> Operation[str]:
        rows = yield calls.store_restore(store_key=self.key, project_id=self.project_id, path=text(path, "path"),
                                         version=version,
                                         actor=text(actor if actor is not None else self.actor, "actor",
                                                    allow_none=True),
                                         reason=text(reason, "reason", allow_none=True),
                                         expected_sha=text(expected_sha, "expected_sha", allow_none=True))
        return rows[0]["sha"]

    def _save(self) -> Operation[int]:
        pending = self.messages[self._saved:]
        if not pending:
            return self._saved
        rows = yield calls.store_messages_append(store_key=self.key, project_id=self.project_id,
                                                 messages=Jsonb(pending))
        self._saved = len(self.messages)
        return rows[0]["length"]

    # -- local transcript edits (no I/O) ---------------------------------------------------
    def append(self, message: Mapping[str, Any]) -> None:
        """Add one chat message to the transcript; ``save()`` writes it."""
        self.messages.append(_message(message))

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Add chat messages to the transcript; ``save()`` writes them."""
        self.messages.extend(_message(m) for m in messages)

    @property
    def unsaved(self) -> int:
        """How many transcript messages ``save()`` would write."""
        return len(self.messages) - self._saved


def _decode_json(path: str, content: str) -> Any:
    try:
        return json.loads(content)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{path!r} does not hold JSON: {exc}") from exc


def _encode_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"value is not JSON-serialisable: {exc}") from exc


class MemoryStore(_Store):
    """A keyed store (sync). Get one with `get_or_create` (or `get`)."""

    def __init__(self, key: str, *, project_id: str = "", db: Database | None = None, actor: str | None = None):
        self._init(key, project_id, actor)
        self._own_db = db is None
        self.db = db if db is not None else Database()

    def _run(self, operation: Operation[T], conn: psycopg.Connection | None = None) -> T:
        return run(operation, self.db, conn=conn, owner=self)

    def bound(self, conn: psycopg.Connection) -> Binding:
        """``with store.bound(conn):`` every call of this store in the block, in this thread, runs
        on ``conn`` (your own ``psycopg.Connection``), inside its transaction: a rollback takes back
        the store's writes with yours, a commit keeps both (pymem never commits, rolls back or
        closes ``conn``). Each call also takes ``conn=`` for itself alone. A rollback does not
        rewind this object's transcript (``messages``): `reload` reads it again."""
        return binding(self, conn)

    @classmethod
    def get_or_create(cls, key: str, *, project_id: str = "", db: Database | None = None, actor: str | None = None,
                      audit: bool | None = None, keep_versions: bool | None = None,
                      read_only_prefixes: Iterable[str] | None = None,
                      conn: psycopg.Connection | None = None) -> MemoryStore:
        """Load the store ``key`` (creating it if needed) with its transcript. Options given
        here are a new store's protections (None: audit on, no versions, no read-only prefixes).
        An existing store keeps its own: an option given that differs from it raises
        ConflictError (PM404); change them with `protect` or `configure`."""
        store = cls(key, project_id=project_id, db=db, actor=actor)
        return store._run(store._open(True, audit, keep_versions,
                                      None if read_only_prefixes is None else list(read_only_prefixes)), conn)

    @classmethod
    def get(cls, key: str, *, project_id: str = "", db: Database | None = None, actor: str | None = None,
            conn: psycopg.Connection | None = None) -> MemoryStore:
        """Load an existing store; NotFoundError when there is none."""
        store = cls(key, project_id=project_id, db=db, actor=actor)
        return store._run(store._open(False, None, None, None), conn)

    @staticmethod
    def drop(key: str, *, project_id: str = "", db: Database, conn: psycopg.Connection | None = None) -> int:
        """Delete a store with its transcript, entries, audit and versions; '' deletes nothing,
        '*' deletes every store of the project. Returns the number of stores deleted."""
        return run(_drop(key, project_id), db, conn=conn)

    def read_text(self, path: str, default: Any = None, *, conn: psycopg.Connection | None = None) -> Any:
        row = self._run(self._read(path), conn)
        return default if row is None else row["content"]

    def write_text(self, path: str, content: str, *, expected_sha: str | None = None, actor: str | None = None,
                   reason: str | None = None, ttl: float | timedelta | None = None,
                   expires_at: datetime | None = None, conn: psycopg.Connection | None = None) -> str:
        """Write text at ``path``; returns its sha256. ConcurrencyError when ``expected_sha``
        (the sha you read, or MUST_NOT_EXIST) is no longer current. ``ttl`` (seconds, or a
        timedelta) or ``expires_at`` (timezone-aware): when the entry expires (ValidationError
        for both, a ttl not positive or beyond 100 years, an expires_at not in the future);
        neither: never."""
        return self._run(self._write(path, content, "text", expected_sha, actor, reason, ttl, expires_at), conn)

    def read_json(self, path: str, default: Any = None, *, conn: psycopg.Connection | None = None) -> Any:
        row = self._run(self._read(path), conn)
        return default if row is None else _decode_json(path, row["content"])

    def write_json(self, path: str, value: Any, *, expected_sha: str | None = None, actor: str | None = None,
                   reason: str | None = None, ttl: float | timedelta | None = None,
                   expires_at: datetime | None = None, conn: psycopg.Connection | None = None) -> str:
        """Write ``value`` as JSON at ``path``; returns its sha256 (``ttl``, ``expires_at``: as
        `write_text`)."""
        return self._run(self._write(path, _encode_json(value), "json", expected_sha, actor, reason, ttl,
                                     expires_at), conn)

    def read_entry(self, path: str, *, conn: psycopg.Connection | None = None) -> StoreEntry | None:
        """The entry at ``path`` (None when it does not exist): content, sha, kind, version,
        actor, reason and times, read in one statement, so ``sha`` is the sha of ``content``.
        Write it back with ``expected_sha=entry.sha`` (or use `update_json` /
        `update_text`, which do that and retry)."""
        return self._run(self._read_entry(path), conn)

    def update_json(self, path: str, fn: Callable[[Any], Any], *, default: Any = _MISSING, actor: str | None = None,
                    reason: str | None = None, retries: int = 10, ttl: float | timedelta | None = None,
                    expires_at: datetime | None = None, conn: psycopg.Connection | None = None) -> Any:
        """Read-modify-write the JSON at ``path`` without losing a concurrent update: read the
        value and its sha in one statement, call ``fn(value)``, write what it returns with that
        sha as ``expected_sha``; if another writer got there first (ConcurrencyError), wait a
        moment and do it again with the new value, at most ``retries`` times. Returns the value
        written. ``fn`` gets a fresh copy each time (mutating it is fine) and may be called more
        than once: it must compute its result from its argument only, with no side effects.
        A missing path starts from ``default`` (written only if the path still does not
        exist); without ``default`` it raises NotFoundError. ConcurrencyError naming the path
        when every attempt lost; an exception from ``fn`` propagates and writes nothing.
        ``ttl`` / ``expires_at``: the written entry's expiry, as in `write_text` (neither:
        it never expires, whatever expiry the entry had)."""
        return self._run(self._update(path, fn, default, "json", retries, actor, reason, ttl, expires_at), conn)

    def update_text(self, path: str, fn: Callable[[str], str], *, default: Any = _MISSING, actor: str | None = None,
                    reason: str | None = None, retries: int = 10, ttl: float | timedelta | None = None,
                    expires_at: datetime | None = None, conn: psycopg.Connection | None = None) -> str:
        """`update_json` for text: ``fn`` gets the current text (or ``default``) and
        returns the new text."""
        return self._run(self._update(path, fn, default, "text", retries, actor, reason, ttl, expires_at), conn)

    def list_paths(self, prefix: str = "", *, conn: psycopg.Connection | None = None) -> list[str]:
        return self._run(self._list(prefix), conn)

    def get_meta(self, path: str, *, conn: psycopg.Connection | None = None) -> EntryMeta | None:
        return self._run(self._meta(path), conn)

    def current_sha(self, path: str, *, conn: psycopg.Connection | None = None) -> str | None:
        meta = self.get_meta(path, conn=conn)
        return None if meta is None else meta.sha

    def delete(self, path: str, *, expected_sha: str | None = None, actor: str | None = None,
               reason: str | None = None, conn: psycopg.Connection | None = None) -> bool:
        return self._run(self._delete(path, expected_sha, actor, reason), conn)

    def audit_tail(self, n: int = 20, *, conn: psycopg.Connection | None = None) -> list[AuditRecord]:
        return self._run(self._audit_tail(n), conn)

    def versions(self, path: str, *, conn: psycopg.Connection | None = None) -> list[Version]:
        return self._run(self._versions(path), conn)

    def read_version(self, path: str, version: int, *, conn: psycopg.Connection | None = None) -> str:
        return self._run(self._read_version(path, version), conn)

    def restore(self, path: str, version: int, *, expected_sha: str | None = None, actor: str | None = None,
                reason: str | None = None, conn: psycopg.Connection | None = None) -> str:
        return self._run(self._restore(path, version, expected_sha, actor, reason), conn)

    def protect(self, *, audit: bool | None = None, keep_versions: bool | None = None,
                read_only_prefixes: Iterable[str] | None = None, actor: str | None = None,
                reason: str | None = None, conn: psycopg.Connection | None = None) -> bool:
        """Tighten the store's protections: turn audit or keep_versions on, or set read-only
        prefixes that cover every current one (None keeps a setting). PermissionError (42501)
        if it would weaken anything. Logged to the audit log; returns whether anything changed."""
        return self._run(self._protections(calls.store_protect, audit, keep_versions,
                                           None if read_only_prefixes is None else list(read_only_prefixes),
                                           actor, reason), conn)

    def configure(self, *, audit: bool | None = None, keep_versions: bool | None = None,
                  read_only_prefixes: Iterable[str] | None = None, actor: str | None = None,
                  reason: str | None = None, conn: psycopg.Connection | None = None) -> bool:
        """Set the store's protections either way (``read_only_prefixes=[]`` removes them all).
        Needs the owner role (administrators): PermissionError for the app role. Logged to
        the audit log before it applies, even when it turns audit off; returns whether anything
        changed."""
        return self._run(self._protections(calls.store_configure, audit, keep_versions,
                                           None if read_only_prefixes is None else list(read_only_prefixes),
                                           actor, reason), conn)

    def save(self, *, conn: psycopg.Connection | None = None) -> int:
        """Write the transcript messages added since loading, in one call; returns its length."""
        return self._run(self._save(), conn)

    def append_run(self, messages: Iterable[Mapping[str, Any]], *, conn: psycopg.Connection | None = None) -> int:
        """Append a run's new messages and save them, in one call."""
        self.extend(messages)
        return self.save(conn=conn)

    def reload(self, *, conn: psycopg.Connection | None = None) -> MemoryStore:
        """Re-read the transcript and options (unsaved messages are dropped)."""
        return self._run(self._open(False, None, None, None), conn)

    def close(self) -> None:
        if self._own_db:
            self.db.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop(key: str, project_id: str) -> Operation[int]:
    rows = yield calls.store_drop(store_key=text(key, "store key"), project_id=text(project_id, "project_id"))
    return rows[0]["dropped"]


class AsyncMemoryStore(_Store):
    """The asyncio twin of `MemoryStore`."""

    def __init__(self, key: str, *, db: AsyncDatabase, project_id: str = "", actor: str | None = None):
        self._init(key, project_id, actor)
        self.db = db

    async def _run(self, operation: Operation[T], conn: psycopg.AsyncConnection | None = None) -> T:
        return await arun(operation, self.db, conn=conn, owner=self)

    def bound(self, conn: psycopg.AsyncConnection) -> Binding:
        """``async with store.bound(aconn):`` (or ``with``): `MemoryStore.bound` for your own
        ``psycopg.AsyncConnection``, in this asyncio task."""
        return binding(self, conn, asynchronous=True)

    @classmethod
    async def get_or_create(cls, key: str, *, db: AsyncDatabase, project_id: str = "", actor: str | None = None,
                            audit: bool | None = None, keep_versions: bool | None = None,
                            read_only_prefixes: Iterable[str] | None = None,
                            conn: psycopg.AsyncConnection | None = None) -> AsyncMemoryStore:
        store = cls(key, db=db, project_id=project_id, actor=actor)
        return await store._run(store._open(True, audit, keep_versions,
                                            None if read_only_prefixes is None else list(read_only_prefixes)), conn)

    @classmethod
    async def get(cls, key: str, *, db: AsyncDatabase, project_id: str = "", actor: str | None = None,
                  conn: psycopg.AsyncConnection | None = None) -> AsyncMemoryStore:
        store = cls(key, db=db, project_id=project_id, actor=actor)
        return await store._run(store._open(False, None, None, None), conn)

    @staticmethod
    async def drop(key: str, *, db: AsyncDatabase, project_id: str = "",
                   conn: psycopg.AsyncConnection | None = None) -> int:
        return await arun(_drop(key, project_id), db, conn=conn)

    async def read_text(self, path: str, default: Any = None, *, conn: psycopg.AsyncConnection | None = None) -> Any:
        row = await self._run(self._read(path), conn)
        return default if row is None else row["content"]

    async def write_text(self, path: str, content: str, *, expected_sha: str | None = None, actor: str | None = None,
                         reason: str | None = None, ttl: float | timedelta | None = None,
                         expires_at: datetime | None = None, conn: psycopg.AsyncConnection | None = None) -> str:
        return await self._run(self._write(path, content, "text", expected_sha, actor, reason, ttl, expires_at), conn)

    async def read_json(self, path: str, default: Any = None, *, conn: psycopg.AsyncConnection | None = None) -> Any:
        row = await self._run(self._read(path), conn)
        return default if row is None else _decode_json(path, row["content"])

    async def write_json(self, path: str, value: Any, *, expected_sha: str | None = None, actor: str | None = None,
                         reason: str | None = None, ttl: float | timedelta | None = None,
                         expires_at: datetime | None = None, conn: psycopg.AsyncConnection | None = None) -> str:
        return await self._run(self._write(path, _encode_json(value), "json", expected_sha, actor, reason, ttl,
                                           expires_at), conn)

    async def read_entry(self, path: str, *, conn: psycopg.AsyncConnection | None = None) -> StoreEntry | None:
        return await self._run(self._read_entry(path), conn)

    async def update_json(self, path: str, fn: Callable[[Any], Any], *, default: Any = _MISSING,
                          actor: str | None = None, reason: str | None = None, retries: int = 10,
                          ttl: float | timedelta | None = None, expires_at: datetime | None = None,
                          conn: psycopg.AsyncConnection | None = None) -> Any:
        """See `MemoryStore.update_json`; ``fn`` may be a coroutine function (a plain
        function runs in a worker thread)."""
        return await self._run(self._update(path, fn, default, "json", retries, actor, reason, ttl, expires_at), conn)

    async def update_text(self, path: str, fn: Callable[[str], str], *, default: Any = _MISSING,
                          actor: str | None = None, reason: str | None = None, retries: int = 10,
                          ttl: float | timedelta | None = None, expires_at: datetime | None = None,
                          conn: psycopg.AsyncConnection | None = None) -> str:
        return await self._run(self._update(path, fn, default, "text", retries, actor, reason, ttl, expires_at), conn)

    async def list_paths(self, prefix: str = "", *, conn: psycopg.AsyncConnection | None = None) -> list[str]:
        return await self._run(self._list(prefix), conn)

    async def get_meta(self, path: str, *, conn: psycopg.AsyncConnection | None = None) -> EntryMeta | None:
        return await self._run(self._meta(path), conn)

    async def current_sha(self, path: str, *, conn: psycopg.AsyncConnection | None = None) -> str | None:
        meta = await self.get_meta(path, conn=conn)
        return None if meta is None else meta.sha

    async def delete(self, path: str, *, expected_sha: str | None = None, actor: str | None = None,
                     reason: str | None = None, conn: psycopg.AsyncConnection | None = None) -> bool:
        return await self._run(self._delete(path, expected_sha, actor, reason), conn)

    async def audit_tail(self, n: int = 20, *, conn: psycopg.AsyncConnection | None = None) -> list[AuditRecord]:
        return await self._run(self._audit_tail(n), conn)

    async def versions(self, path: str, *, conn: psycopg.AsyncConnection | None = None) -> list[Version]:
        return await self._run(self._versions(path), conn)

    async def read_version(self, path: str, version: int, *, conn: psycopg.AsyncConnection | None = None) -> str:
        return await self._run(self._read_version(path, version), conn)

    async def restore(self, path: str, version: int, *, expected_sha: str | None = None, actor: str | None = None,
                      reason: str | None = None, conn: psycopg.AsyncConnection | None = None) -> str:
        return await self._run(self._restore(path, version, expected_sha, actor, reason), conn)

    async def protect(self, *, audit: bool | None = None, keep_versions: bool | None = None,
                      read_only_prefixes: Iterable[str] | None = None, actor: str | None = None,
                      reason: str | None = None, conn: psycopg.AsyncConnection | None = None) -> bool:
        return await self._run(self._protections(calls.store_protect, audit, keep_versions,
                                                 None if read_only_prefixes is None else list(read_only_prefixes),
                                                 actor, reason), conn)

    async def configure(self, *, audit: bool | None = None, keep_versions: bool | None = None,
                        read_only_prefixes: Iterable[str] | None = None, actor: str | None = None,
                        reason: str | None = None, conn: psycopg.AsyncConnection | None = None) -> bool:
        return await self._run(self._protections(calls.store_configure, audit, keep_versions,
                                                 None if read_only_prefixes is None else list(read_only_prefixes),
                                                 actor, reason), conn)

    async def save(self, *, conn: psycopg.AsyncConnection | None = None) -> int:
        return await self._run(self._save(), conn)

    async def append_run(self, messages: Iterable[Mapping[str, Any]], *,
                         conn: psycopg.AsyncConnection | None = None) -> int:
        self.extend(messages)
        return await self.save(conn=conn)

    async def reload(self, *, conn: psycopg.AsyncConnection | None = None) -> AsyncMemoryStore:
        return await self._run(self._open(False, None, None, None), conn)


# OpenTelemetry spans on every public call (pymem.tracing; nothing without opentelemetry-api)
tracing.instrument_store(MemoryStore)
tracing.instrument_store(AsyncMemoryStore)
