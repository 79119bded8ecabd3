"""Connection pools: `Database` (one psycopg_pool pool) and its asyncio twin
`AsyncDatabase`, over the same settings and the same named queries
(`pymem.queries.Q`). pgvector types are registered on every connection, the prepare
threshold comes from `Settings`, the statement timeout is a startup option of every
connection (`pymem.connection.timeout_kwargs`), so a call is one statement, and database
errors come out as `pymem.errors` exceptions.

The policies here:

* the embedded server (no DSN) is migrated when a pool opens on it; a DSN is never migrated
  implicitly (production schemas move with ``pymem migrate`` or ``sql/migrate.sql``);
* opening makes one direct connection first, so a wrong host, password or database name fails
  at once with the server's own message (pymem.ConnectionError), not after the pool timeout;
* a call that gets no working connection says why: the embedded server this process uses is
  started again when it stopped, and a pool timeout is checked with one direct connection, one
  at a time per pool: callers that time out together share it, and its outcome answers the
  timeouts of the next second too (`_SingleProbe`; issue 56: a burst of timeouts opened
  a probe each and used up the server's ``max_connections``);
* pgvector's types are looked up again while they are missing, so a pool opened before
  ``pymem migrate`` sends vectors after it.
* a pooler that refuses the timeout's startup option, or takes it without setting it on the
  server (PgBouncer does one or the other), is found by that first connection: the timeout then
  goes with each call (`pymem.connection.execute`). One that refuses the ``options``
  parameter itself (PgBouncer before 1.20) cannot keep prepared statements either: unless
  ``prepare_threshold`` was set, nothing is prepared behind it.

Imports run one way: connection <- migrations <- database.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types import TypeInfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from . import calls, migrations, server
from .connection import (
    aexecute,
    ais_citus,
    atimeout_arrived,
    atype_infos,
    connect_kwargs,
    errors,
    execute,
    is_citus,
    one_value,
    raise_translated,
    refused_option,
    register_types,
    resolve_conninfo,
    timeout_arrived,
    timeout_kwargs,
    type_infos,
)
from .errors import MIGRATE_HINT, ConnectionError, Error, redact
from .queries import Q
from .settings import Settings
from .types import Query

log = logging.getLogger("pymem")

#: the connections of pymem's pools (added by each pool's configure callback)
_pooled: weakref.WeakSet[Any] = weakref.WeakSet()
_POOL_NAMES = ("pymem", "pymem-async")
#: the connection strings of pymem's pools, whose passwords the pool's log lines must not carry
_conninfos: set[str] = set()
#: psycopg_pool's warnings about a server gone away (another warning, e.g. a connection returned
#: inside a transaction, stays a warning)
_SERVER_GONE = ("discarding closed connection", "discarding broken connection", "error connecting in",
                "reconnection attempt in pool")


class _PoolNoise(logging.Filter):
    """psycopg_pool's warnings about pymem's own pools (a connection that died with its server,
    a reconnect that failed while the server was down) go to pymem's log at DEBUG: the call
    that met the problem raises a `pymem.ConnectionError` that says what happened and
    what pymem did about it (issue 29: after ``pymem server stop`` the pool printed two
    warnings beside that error). Other pools' warnings pass untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        ours = record.levelno == logging.WARNING and str(record.msg).startswith(_SERVER_GONE) and any(
            a in _POOL_NAMES if isinstance(a, str) else _is_pooled(a) for a in args)
        if ours:
            said = record.getMessage()
            for conninfo in set(_conninfos):  # libpq's reason for a failed connect, without a password
                said = redact(said, conninfo)
            log.debug("connection pool: %s", said)
        return not ours


def _is_pooled(obj: Any) -> bool:
    try:
        return obj in _pooled
    except TypeError:  # not hashable, so not a connection
        return False


logging.getLogger("psycopg.pool").addFilter(_PoolNoise())


def _open_conninfo(settings: Settings, migrate: bool | None) -> str:
    """The conninfo a pool opens on, migrated first when ``migrate`` says so; by default
    only the embedded server (no DSN) is, and only when ``pymem migrate --check`` would find
    something to do: a current schema is not refreshed (and its migration lock not waited for)
    every time a process opens it."""
    conninfo = resolve_conninfo(settings)
    if migrate:
        migrations.migrate(conninfo, roles=settings.roles())
    elif migrate is None and not settings.dsn:
        if any(settings.roles().values()) or migrations.check(conninfo):
            migrations.migrate(conninfo, roles=settings.roles())
    return conninfo


class _Probe:
    """What the first, direct connection found: pgvector's types, whether the database is a Citus
    coordinator, whether the statement timeout reached the server as a startup option (else it
    goes with each call: ``per_call``), and whether a pooler in between is one that cannot keep
    prepared statements (``no_prepare``: it refused the ``options`` parameter itself, as
    PgBouncer before 1.20 does)."""

    __slots__ = ("infos", "citus", "per_call", "no_prepare")

    def __init__(self, infos: list[TypeInfo], citus: bool, per_call: bool = False, no_prepare: bool = False) -> None:
        self.infos, self.citus, self.per_call, self.no_prepare = infos, citus, per_call, no_prepare


def _pooler(settings: Settings, why: str, *, refused: bool) -> _Probe:
    """A pooler between pymem and the server: it refused the timeout's startup option (``why``
    its message) or took it without passing it on (PgBouncer with ``track_extra_parameters``
    naming ``statement_timeout``, a parameter the server does not report)."""
    no_prepare = refused and "in options" not in why and "prepare_threshold" not in settings.model_fields_set
    log.info("the statement timeout did not reach the server as a startup option (%s): a connection pooler. "
             "It now goes with each call%s (docs/cli-and-configuration.md \"Behind PgBouncer\")", why,
             ", and nothing is prepared on the server (set PYMEM_PREPARE_THRESHOLD to override)" if no_prepare else "")
    return _Probe([], False, per_call=True, no_prepare=no_prepare)


def _kwargs(settings: Settings, conninfo: str, probe: _Probe | None) -> dict[str, Any]:
    """What every connection of a pool opens with: the settings, and the statement timeout as a
    startup option unless it does not reach the server (``probe``; None: try it)."""
    kwargs = {"autocommit": True, **connect_kwargs(settings, conninfo)}
    if probe is None or not probe.per_call:
        return kwargs | timeout_kwargs(settings, conninfo)
    if probe.no_prepare:
        kwargs["prepare_threshold"] = None  # the pooler would hand one client's statement to another
    return kwargs


def _pool_kwargs(settings: Settings, conninfo: str, probe: _Probe) -> dict[str, Any]:
    return {
        "min_size": settings.pool_min_size,
        "max_size": settings.pool_max_size,
        "timeout": settings.pool_timeout,
        "kwargs": _kwargs(settings, conninfo, probe),
        "open": False,
    }


def _probe(settings: Settings, conninfo: str) -> _Probe:
    """One direct connection (not pooled), opened as the pool's will be: it fails with the
    server's own reason (wrong host, password, database) within the connect timeout."""
    option = bool(timeout_kwargs(settings, conninfo))
    found = _Probe([], False)
    with errors(conninfo):
        try:
            conn = psycopg.connect(conninfo, **_kwargs(settings, conninfo, None))
        except psycopg.OperationalError as exc:
            if not (option and refused_option(exc)):
                raise
            found = _pooler(settings, redact(str(exc).strip(), conninfo), refused=True)
            conn = psycopg.connect(conninfo, **_kwargs(settings, conninfo, found))
        with conn:
            if option and not found.per_call and not timeout_arrived(conn):
                found = _pooler(settings, "accepted but not set on the server", refused=False)
            found.infos, found.citus = type_infos(conn), is_citus(conn)
    return found


async def _aprobe(settings: Settings, conninfo: str) -> _Probe:
    option = bool(timeout_kwargs(settings, conninfo))
    found = _Probe([], False)
    with errors(conninfo):
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, **_kwargs(settings, conninfo, None))
        except psycopg.OperationalError as exc:
            if not (option and refused_option(exc)):
                raise
            found = _pooler(settings, redact(str(exc).strip(), conninfo), refused=True)
            conn = await psycopg.AsyncConnection.connect(conninfo, **_kwargs(settings, conninfo, found))
        async with conn:
            if option and not found.per_call and not await atimeout_arrived(conn):
                found = _pooler(settings, "accepted but not set on the server", refused=False)
            found.infos, found.citus = await atype_infos(conn), await ais_citus(conn)
    return found


#: seconds a probe's outcome (after a pool timeout) answers later timeouts without a new probe
PROBE_FRESH = 1.0


class _SingleProbe:
    """The direct connection that checks the server after a pool timeout, one at a time (issue
    56). Every caller whose pool wait timed out used to open its own: a burst of timeouts
    (thousands of tasks waiting on a small pool) opened hundreds at once, past the server's
    ``max_connections``, locking every other client out. Now the first caller probes; those
    that time out while it runs wait for its outcome, and those of the next
    `PROBE_FRESH` seconds take it as it was. Each caller gets the outcome as its own
    exception (a copy): the server's reason when it is unreachable, else nothing (the caller's
    own TimeoutError goes on). The sync and async pools each hold one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flight: concurrent.futures.Future[None] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._last: tuple[float, BaseException | None] | None = None

    def _fresh(self) -> tuple[bool, BaseException | None]:
        if self._last is not None and time.monotonic() - self._last[0] < PROBE_FRESH:
            return True, self._last[1]
        return False, None

    def _done(self, outcome: BaseException | None) -> None:
        self._last = (time.monotonic(), outcome)

    @staticmethod
    def _raise(outcome: BaseException | None) -> None:
        if outcome is not None:
            raise copy.copy(outcome)  # one instance per caller: tracebacks and causes stay apart

    def run(self, probe: Callable[[], object]) -> None:
        """Probe with ``probe`` unless another thread is (then wait for its outcome) or just did."""
        with self._lock:
            fresh, outcome = self._fresh()
            flight, mine = self._flight, False
            if not fresh and flight is None:
                flight = self._flight = concurrent.futures.Future()
                mine = True
        if fresh:
            return self._raise(outcome)
        assert flight is not None
        if mine:
            try:
                probe()
            except Exception as exc:  # noqa: BLE001 - handed to every waiter
                found: BaseException | None = exc
            else:
                found = None
            with self._lock:
                self._done(found)
                self._flight = None
            if found is None:
                flight.set_result(None)
            else:
                flight.set_exception(found)
        self._raise(flight.exception())

    async def arun(self, probe: Callable[[], Awaitable[object]]) -> None:
        """See `run`; the probe is a task of its own, so a caller cancelled while it runs
        leaves it to the others."""
        fresh, outcome = self._fresh()
        if fresh:
            return self._raise(outcome)
        if self._task is None:
            async def flight() -> object:
                try:
                    result = await probe()
                except Exception as exc:
                    self._done(exc)
                    raise
                finally:
                    self._task = None
                self._done(None)
                return result

            self._task = asyncio.ensure_future(flight())
        task = self._task
        await asyncio.wait([task])
        self._raise(task.exception())


def _no_connection(exc: Error) -> bool:
    """Whether a call failed for want of a working connection (rather than by its SQL)."""
    return isinstance(exc, ConnectionError) or isinstance(exc.__cause__, PoolTimeout)


def _explain(exc: Error) -> None:
    """A pymem call that finds a pymem schema, function or table missing: the database is not
    migrated (or by an older pymem). The hint replaces the server's ("add explicit type casts")."""
    if exc.sqlstate in ("3F000", "42883", "42P01") and "pymem" in (exc.args[0] if exc.args else ""):
        exc.hint = MIGRATE_HINT


def _restarted(settings: Settings, exc: Error) -> ConnectionError:
    return ConnectionError(
        f"the embedded server in {server.pgdata_of(settings.data_dir)} was not running (pymem server stop?); "
        f"pymem started it again, so the next call reaches it ({exc})"
    )


class Database:
    """A connection pool to one pymem database.

    ``Database()`` reads `Settings` from the environment; with no DSN it starts (or
    reuses) the embedded server and migrates it. With a DSN it never migrates unless asked
    (``migrate=True``): production schemas move with ``pymem migrate`` or ``sql/migrate.sql``.
    ``conninfo`` is the connection string it opens: ``PYMEM_DSN``, or the embedded server's URI
    (``psycopg.connect(db.conninfo)`` for a connection of your own to the same database).
    """

    def __init__(self, settings: Settings | None = None, *, migrate: bool | None = None) -> None:
        self.settings = settings or Settings()
        self.conninfo = _open_conninfo(self.settings, migrate)
        self._probe = _probe(self.settings, self.conninfo)
        self._infos, self._citus = self._probe.infos, self._probe.citus
        self._per_call = self._probe.per_call and not self._citus
        self._typed: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()
        self._recovering = threading.Lock()
        self._single_probe = _SingleProbe()
        self.pool = self._new_pool()

    def _new_pool(self) -> ConnectionPool:
        _conninfos.add(self.conninfo)
        pool = ConnectionPool(self.conninfo, configure=self._register, name="pymem",
                              **_pool_kwargs(self.settings, self.conninfo, self._probe))
        with errors(self.conninfo):
            pool.open(wait=self.settings.pool_min_size > 0, timeout=self.settings.pool_timeout)
        return pool

    def _register(self, conn: psycopg.Connection) -> None:
        """pgvector's types on ``conn``; looked up again while pgvector is missing (a database
        migrated after this pool opened)."""
        _pooled.add(conn)
        if not self._infos:
            self._infos = type_infos(conn)
        if self._infos:
            register_types(conn, self._infos)
            self._typed.add(conn)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled autocommit connection; errors inside come out as pymem errors.

        Connections are not pinged on checkout (that would cost a round trip per call). When
        one turns out broken (the server restarted or killed it), the call raises
        pymem.ConnectionError and every idle connection is checked at once, so the next call
        gets a live one: the application recovers without restarting. When the embedded server
        this process uses (no DSN) has stopped, it is started again. A call that waited the
        pool timeout for a connection gets the reason a new connection fails, if one does."""
        try:
            with errors(self.conninfo), self.pool.connection() as conn:
                if conn not in self._typed:
                    self._register(conn)
                yield conn
        except Error as exc:
            if _no_connection(exc):
                self._recover(exc)
            _explain(exc)
            raise

    @contextlib.contextmanager
    def unbounded(self) -> Iterator[psycopg.Connection]:
        """A pooled autocommit connection (`connection`) for maintenance that takes as long as
        it takes (CREATE INDEX CONCURRENTLY, one statement at a time): without the pool's statement
        timeout, and with the search path ``migrate`` pins (``pg_catalog, pymem, pg_temp``), so its
        names are never resolved through the caller's path; both put back before it returns to
        the pool."""
        with self.connection() as conn:
            conn.execute(Q["statement_timeout_off"])
            previous = one_value(conn.execute(Q["search_path_pin"]).fetchone())
            try:
                yield conn
            finally:
                if not conn.closed:
                    conn.execute(Q["search_path_restore"], {"path": previous})
                    conn.execute(Q["statement_timeout_reset"])

    def maintain(self, query: Query) -> None:
        """Run a named statement that returns no rows and takes as long as it takes (a CREATE
        INDEX CONCURRENTLY of `pymem.calls`) on an `unbounded` connection."""
        with self.unbounded() as conn:
            conn.execute(Q[query.name], query.params)

    def _recover(self, exc: Error) -> None:
        if self.settings.dsn is None:
            with self._recovering:
                if server.status(self.settings.data_dir) is None:
                    server.start(self.settings.data_dir)  # pymem.ServerError when it cannot
                    old, self.pool = self.pool, self._new_pool()  # every connection of the old one is dead
                    old.close()
                    raise _restarted(self.settings, exc) from exc
        if isinstance(exc, ConnectionError):
            self.pool.check()
        else:  # the pool timed out: is the server reachable at all? (one probe at a time)
            self._single_probe.run(lambda: _probe(self.settings, self.conninfo))

    def query(self, query: Query) -> list[dict[str, Any]]:
        """Send a named query of sql/queries.sql (made by `pymem.calls`, e.g.
        ``db.query(calls.facts_newest(...))``); its rows as dicts, or as ``query.rows`` makes them.
        What `connection` does, written out: every call of pymem goes through here, and the
        three context managers (``connection``, `errors`, the pool's) cost a call more than
        the work they do (a pooled connection is autocommit and idle between calls: the pool's
        ``with conn`` commits nothing; docs/performance.md)."""
        pool = self.pool
        try:
            try:
                conn = pool.getconn()
                try:
                    if conn not in self._typed:
                        self._register(conn)
                    return execute(conn, query.name, query.params, self.settings, citus=self._citus,
                                   timeout_per_call=self._per_call, row_factory=query.rows or dict_row)
                finally:
                    pool.putconn(conn)  # a connection left in a transaction is rolled back, a broken one replaced
            except psycopg.Error as exc:
                raise_translated(exc, self.conninfo)
        except Error as exc:
            if _no_connection(exc):
                self._recover(exc)
            _explain(exc)
            raise

    def about(self) -> dict[str, Any]:
        return self.query(calls.about())[0]["about"]

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncDatabase:
    """The asyncio twin of `Database`; create it with ``await AsyncDatabase.open()``."""

    def __init__(self, settings: Settings, conninfo: str, probe: _Probe) -> None:
        self.settings = settings
        self.conninfo = conninfo
        self._probe = probe
        self._infos, self._citus = probe.infos, probe.citus
        self._per_call = probe.per_call and not self._citus
        self._typed: weakref.WeakSet[psycopg.AsyncConnection] = weakref.WeakSet()
        self._recovering = asyncio.Lock()
        self._single_probe = _SingleProbe()
        self.pool: AsyncConnectionPool

    @classmethod
    async def open(cls, settings: Settings | None = None, *, migrate: bool | None = None) -> AsyncDatabase:
        """See `Database`: the same settings and the same policies."""
        settings = settings or Settings()
        conninfo = _open_conninfo(settings, migrate)
        db = cls(settings, conninfo, await _aprobe(settings, conninfo))
        db.pool = await db._new_pool()
        return db

    async def _new_pool(self) -> AsyncConnectionPool:
        _conninfos.add(self.conninfo)
        pool = AsyncConnectionPool(self.conninfo, configure=self._register, name="pymem-async",
                                   **_pool_kwargs(self.settings, self.conninfo, self._probe))
        with errors(self.conninfo):
            await pool.open(wait=self.settings.pool_min_size > 0, timeout=self.settings.pool_timeout)
        return pool

    async def _register(self, conn: psycopg.AsyncConnection) -> None:
        _pooled.add(conn)
        if not self._infos:
            self._infos = await atype_infos(conn)
        if self._infos:
            register_types(conn, self._infos)
            self._typed.add(conn)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """See `Database.connection`."""
        try:
            with errors(self.conninfo):
                async with self.pool.connection() as conn:
                    if conn not in self._typed:
                        await self._register(conn)
                    yield conn
        except Error as exc:
            if _no_connection(exc):
                await self._recover(exc)
            _explain(exc)
            raise

    async def _recover(self, exc: Error) -> None:
        if self.settings.dsn is None:
            async with self._recovering:
                if await asyncio.to_thread(server.status, self.settings.data_dir) is None:
                    await asyncio.to_thread(server.start, self.settings.data_dir)
                    old, self.pool = self.pool, await self._new_pool()
                    await old.close()
                    raise _restarted(self.settings, exc) from exc
        if isinstance(exc, ConnectionError):
            await self.pool.check()
        else:
            await self._single_probe.arun(lambda: _aprobe(self.settings, self.conninfo))

    async def query(self, query: Query) -> list[dict[str, Any]]:
        """See `Database.query` (`connection` written out the same way)."""
        pool = self.pool
        try:
            try:
                conn = await pool.getconn()
                try:
                    if conn not in self._typed:
                        await self._register(conn)
                    return await aexecute(conn, query.name, query.params, self.settings, citus=self._citus,
                                          timeout_per_call=self._per_call, row_factory=query.rows or dict_row)
                finally:
                    await pool.putconn(conn)
            except psycopg.Error as exc:
                raise_translated(exc, self.conninfo)
        except Error as exc:
            if _no_connection(exc):
                await self._recover(exc)
            _explain(exc)
            raise

    async def about(self) -> dict[str, Any]:
        return (await self.query(calls.about()))[0]["about"]

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> AsyncDatabase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


#: pgvector's types in the database of each caller's connection (`CallerConnection`),
#: looked up on its first call; not kept while pgvector is missing (looked up again next time)
_caller_infos: weakref.WeakKeyDictionary[Any, list[TypeInfo]] = weakref.WeakKeyDictionary()


class CallerConnection:
    """A connection the application owns, which pymem's calls run on (``Memory.bound(conn)``,
    ``conn=``): inside whatever transaction it has open, so a rollback takes back pymem's writes
    with the application's own. pymem never commits, rolls back or closes it, and changes nothing
    of it: not its autocommit mode, its row factory, its adapters nor its settings (the pool's
    statement timeout does not apply; the connection's own does). Each named query runs on a
    cursor of its own, with ``dict_row`` and pgvector's types and pymem's JSON loader registered
    on that cursor only; the types are looked up on the connection's first call (a catalog read,
    inside the caller's transaction when one is open). Errors come out as pymem errors; after a
    database error the caller's transaction is aborted (PostgreSQL's rule), and rolling it back
    is the caller's.

    ``allow_model_calls``: whether an embedding or a chat-model call may run while the
    connection's transaction is open (`pymem.runner` refuses it otherwise)."""

    __slots__ = ("conn", "allow_model_calls")

    def __init__(self, conn: psycopg.Connection, allow_model_calls: bool = False) -> None:
        self.conn, self.allow_model_calls = conn, allow_model_calls

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection (the caller's, or the one psycopg
        opened at the first statement of a connection that is not autocommit)."""
        return self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def query(self, query: Query) -> list[dict[str, Any]]:
        """See `Database.query`: the same named query, on the caller's connection."""
        conn = self.conn
        try:
            with errors():
                infos = _caller_infos.get(conn)
                if infos is None:
                    infos = type_infos(conn)
                    if infos:
                        _caller_infos[conn] = infos
                # an autocommit connection outside a transaction sends a call alone, as a pool's
                # does (on Citus: sent again in a transaction when refused without one)
                return execute(conn, query.name, query.params, None, citus=conn.autocommit and not
                               self.in_transaction, row_factory=query.rows or dict_row, types=infos)
        except Error as exc:
            _explain(exc)
            raise


class AsyncCallerConnection:
    """The asyncio twin of `CallerConnection`, over a ``psycopg.AsyncConnection``."""

    __slots__ = ("conn", "allow_model_calls")

    def __init__(self, conn: psycopg.AsyncConnection, allow_model_calls: bool = False) -> None:
        self.conn, self.allow_model_calls = conn, allow_model_calls

    @property
    def in_transaction(self) -> bool:
        """See `CallerConnection.in_transaction`."""
        return self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    async def query(self, query: Query) -> list[dict[str, Any]]:
        """See `CallerConnection.query`."""
        conn = self.conn
        try:
            with errors():
                infos = _caller_infos.get(conn)
                if infos is None:
                    infos = await atype_infos(conn)
                    if infos:
                        _caller_infos[conn] = infos
                return await aexecute(conn, query.name, query.params, None, citus=conn.autocommit and not
                                      self.in_transaction, row_factory=query.rows or dict_row, types=infos)
        except Error as exc:
            _explain(exc)
            raise
