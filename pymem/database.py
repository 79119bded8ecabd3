"""Connection pools: :class:`Database` (one psycopg_pool pool) and its asyncio twin
:class:`AsyncDatabase`, over the same settings and the same named queries
(:data:`pymem.queries.Q`). pgvector types are registered on every connection, the prepare
threshold comes from :class:`Settings`, the statement timeout travels with each query
(:func:`pymem.connection.execute`), and database errors come out as :mod:`pymem.errors`
exceptions.

The policies here:

* the embedded server (no DSN) is migrated when a pool opens on it; a DSN is never migrated
  implicitly (production schemas move with ``pymem migrate`` or ``sql/migrate.sql``);
* opening makes one direct connection first, so a wrong host, password or database name fails
  at once with the server's own message (pymem.ConnectionError), not after the pool timeout;
* a call that gets no working connection says why: the embedded server this process uses is
  started again when it stopped, and a pool timeout is checked with one direct connection;
* pgvector's types are looked up again while they are missing, so a pool opened before
  ``pymem migrate`` sends vectors after it.

Imports run one way: connection <- migrations <- database.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import psycopg
from psycopg.types import TypeInfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from . import migrations, server
from .connection import (
    aexecute,
    atype_infos,
    connect_kwargs,
    errors,
    ais_citus,
    aset_session_timeout,
    execute,
    is_citus,
    register_types,
    set_session_timeout,
    resolve_conninfo,
    type_infos,
)
from .errors import MIGRATE_HINT, ConnectionError, Error
from .settings import Settings


def _open_conninfo(settings: Settings, migrate: bool | None) -> str:
    """The conninfo a pool opens on, migrated first when ``migrate`` says so; by default
    only the embedded server (no DSN) is."""
    conninfo = resolve_conninfo(settings)
    if migrate if migrate is not None else not settings.dsn:
        migrations.migrate(conninfo, roles=settings.roles())
    return conninfo


def _pool_kwargs(settings: Settings, conninfo: str) -> dict[str, Any]:
    return {
        "min_size": settings.pool_min_size,
        "max_size": settings.pool_max_size,
        "timeout": settings.pool_timeout,
        "kwargs": {"autocommit": True, **connect_kwargs(settings, conninfo)},
        "open": False,
    }


def _probe(settings: Settings, conninfo: str) -> tuple[list[TypeInfo], bool]:
    """One direct connection (not pooled): it fails with the server's own reason (wrong host,
    password, database) within the connect timeout. Returns pgvector's types and whether the
    database is a Citus coordinator (then each pooled connection gets the statement timeout
    for its session, and calls go without the per-statement pipeline: :func:`execute`)."""
    with errors(), psycopg.connect(conninfo, autocommit=True, **connect_kwargs(settings, conninfo)) as conn:
        return type_infos(conn), is_citus(conn)


async def _aprobe(settings: Settings, conninfo: str) -> tuple[list[TypeInfo], bool]:
    with errors():
        conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **connect_kwargs(settings, conninfo))
        async with conn:
            return await atype_infos(conn), await ais_citus(conn)


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

    ``Database()`` reads :class:`Settings` from the environment; with no DSN it starts (or
    reuses) the embedded server and migrates it. With a DSN it never migrates unless asked
    (``migrate=True``): production schemas move with ``pymem migrate`` or ``sql/migrate.sql``.
    """

    def __init__(self, settings: Settings | None = None, *, migrate: bool | None = None) -> None:
        self.settings = settings or Settings()
        self.conninfo = _open_conninfo(self.settings, migrate)
        self._infos, citus = _probe(self.settings, self.conninfo)
        self._citus = citus
        self._typed: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()
        self._timed: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()
        self._recovering = threading.Lock()
        self.pool = self._new_pool()

    def _new_pool(self) -> ConnectionPool:
        pool = ConnectionPool(self.conninfo, configure=self._register, name="pymem",
                              **_pool_kwargs(self.settings, self.conninfo))
        with errors():
            pool.open(wait=self.settings.pool_min_size > 0, timeout=self.settings.pool_timeout)
        return pool

    def _register(self, conn: psycopg.Connection) -> None:
        """pgvector's types on ``conn``; looked up again while pgvector is missing (a database
        migrated after this pool opened). On Citus, the session's statement timeout."""
        if self._citus and self.settings.statement_timeout_ms and conn not in self._timed:
            set_session_timeout(conn, self.settings)
            self._timed.add(conn)
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
            with errors(), self.pool.connection() as conn:
                if conn not in self._typed:
                    self._register(conn)
                yield conn
        except Error as exc:
            if _no_connection(exc):
                self._recover(exc)
            _explain(exc)
            raise

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
        else:  # the pool timed out: is the server reachable at all?
            _probe(self.settings, self.conninfo)

    def query(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Send the named query ``name`` of sql/queries.sql; its rows as dicts."""
        with self.connection() as conn:
            return execute(conn, name, params, self.settings, citus=self._citus)

    def about(self) -> dict[str, Any]:
        return self.query("about", {})[0]["about"]

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncDatabase:
    """The asyncio twin of :class:`Database`; create it with ``await AsyncDatabase.open()``."""

    def __init__(self, settings: Settings, conninfo: str, infos: list[TypeInfo], citus: bool = False) -> None:
        self.settings = settings
        self.conninfo = conninfo
        self._infos = infos
        self._citus = citus
        self._typed: weakref.WeakSet[psycopg.AsyncConnection] = weakref.WeakSet()
        self._timed: weakref.WeakSet[psycopg.AsyncConnection] = weakref.WeakSet()
        self._recovering = asyncio.Lock()
        self.pool: AsyncConnectionPool

    @classmethod
    async def open(cls, settings: Settings | None = None, *, migrate: bool | None = None) -> AsyncDatabase:
        """See :class:`Database`: the same settings and the same policies."""
        settings = settings or Settings()
        conninfo = _open_conninfo(settings, migrate)
        db = cls(settings, conninfo, *await _aprobe(settings, conninfo))
        db.pool = await db._new_pool()
        return db

    async def _new_pool(self) -> AsyncConnectionPool:
        pool = AsyncConnectionPool(self.conninfo, configure=self._register, name="pymem-async",
                                   **_pool_kwargs(self.settings, self.conninfo))
        with errors():
            await pool.open(wait=self.settings.pool_min_size > 0, timeout=self.settings.pool_timeout)
        return pool

    async def _register(self, conn: psycopg.AsyncConnection) -> None:
        if self._citus and self.settings.statement_timeout_ms and conn not in self._timed:
            await aset_session_timeout(conn, self.settings)
            self._timed.add(conn)
        if not self._infos:
            self._infos = await atype_infos(conn)
        if self._infos:
            register_types(conn, self._infos)
            self._typed.add(conn)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """See :meth:`Database.connection`."""
        try:
            with errors():
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
            await _aprobe(self.settings, self.conninfo)

    async def query(self, name: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """See :meth:`Database.query`."""
        async with self.connection() as conn:
            return await aexecute(conn, name, params, self.settings, citus=self._citus)

    async def about(self) -> dict[str, Any]:
        return (await self.query("about", {}))[0]["about"]

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> AsyncDatabase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
