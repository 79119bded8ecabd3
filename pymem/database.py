"""Connection pools: :class:`Database` (one psycopg_pool pool) and its asyncio twin
:class:`AsyncDatabase`, over the same settings and the same named queries
(:data:`pymem.queries.Q`). pgvector types are registered on every new connection,
statement timeout and prepare threshold come from :class:`Settings`, and database errors come
out as :mod:`pymem.errors` exceptions.

The one policy here: the embedded server (no DSN) is migrated when a pool opens on it; a DSN
is never migrated implicitly (production schemas move with ``pymem migrate`` or
``sql/migrate.sql``). Imports run one way: connection <- migrations <- database.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg.types import TypeInfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from . import migrations
from .connection import connect, connect_kwargs, errors, register_types, resolve_conninfo, type_infos
from .errors import ConnectionError
from .queries import Q
from .settings import Settings


def _open_conninfo(settings: Settings, migrate: bool | None) -> str:
    """The conninfo a pool opens on, migrated first when ``migrate`` says so; by default
    only the embedded server (no DSN) is."""
    conninfo = resolve_conninfo(settings)
    if migrate if migrate is not None else not settings.dsn:
        migrations.migrate(conninfo, roles=settings.roles())
    return conninfo


class Database:
    """A connection pool to one pymem database.

    ``Database()`` reads :class:`Settings` from the environment; with no DSN it starts (or
    reuses) the embedded server and migrates it. With a DSN it never migrates unless asked
    (``migrate=True``): production schemas move with ``pymem migrate`` or ``sql/migrate.sql``.
    """

    def __init__(self, settings: Settings | None = None, *, migrate: bool | None = None) -> None:
        self.settings = settings or Settings()
        self.conninfo = _open_conninfo(self.settings, migrate)
        self._infos: list[TypeInfo] | None = None
        self.pool = ConnectionPool(
            self.conninfo,
            min_size=self.settings.pool_min_size,
            max_size=self.settings.pool_max_size,
            timeout=self.settings.pool_timeout,
            kwargs={"autocommit": True, **connect_kwargs(self.settings, self.conninfo)},
            configure=self._configure,
            name="pymem",
            open=False,
        )
        with errors():
            self.pool.open(wait=self.settings.pool_min_size > 0, timeout=self.settings.pool_timeout)

    def _configure(self, conn: psycopg.Connection) -> None:
        if self._infos is None:
            self._infos = type_infos(conn)
        register_types(conn, self._infos)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled autocommit connection; errors inside come out as pymem errors.

        Connections are not pinged on checkout (that would cost a round trip per call). When
        one turns out broken (the server restarted or killed it), the call raises
        pymem.ConnectionError and every idle connection is checked at once, so the next call
        gets a live one: the application recovers without restarting."""
        try:
            with errors(), self.pool.connection() as conn:
                yield conn
        except ConnectionError:
            self.pool.check()
            raise

    def about(self) -> dict[str, Any]:
        with self.connection() as conn:
            return conn.execute(Q["about"]).fetchone()[0]

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncDatabase:
    """The asyncio twin of :class:`Database`; create it with ``await AsyncDatabase.open()``
    (the constructor takes an opened pool)."""

    def __init__(self, settings: Settings, conninfo: str, pool: AsyncConnectionPool) -> None:
        self.settings = settings
        self.conninfo = conninfo
        self.pool = pool

    @classmethod
    async def open(cls, settings: Settings | None = None, *, migrate: bool | None = None) -> AsyncDatabase:
        """See :class:`Database`: the same settings and the same migrate policy."""
        settings = settings or Settings()
        conninfo = _open_conninfo(settings, migrate)
        with connect(conninfo, settings) as conn, errors():
            infos = type_infos(conn)

        async def configure(conn: psycopg.AsyncConnection) -> None:
            register_types(conn, infos)

        pool = AsyncConnectionPool(
            conninfo,
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            timeout=settings.pool_timeout,
            kwargs={"autocommit": True, **connect_kwargs(settings, conninfo)},
            configure=configure,
            name="pymem-async",
            open=False,
        )
        with errors():
            await pool.open(wait=settings.pool_min_size > 0, timeout=settings.pool_timeout)
        return cls(settings, conninfo, pool)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """See :meth:`Database.connection`."""
        try:
            with errors():
                async with self.pool.connection() as conn:
                    yield conn
        except ConnectionError:
            await self.pool.check()
            raise

    async def about(self) -> dict[str, Any]:
        async with self.connection() as conn:
            cur = await conn.execute(Q["about"])
            return (await cur.fetchone())[0]

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> AsyncDatabase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
