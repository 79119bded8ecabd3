"""Connections: one psycopg_pool pool per :class:`Database`, pgvector types registered on
every new connection, statement timeout and prepare threshold from :class:`Settings`, and
database errors turned into :mod:`pymem.errors` exceptions.

``Database`` and ``AsyncDatabase`` are twins over the same settings and the same named
queries (:data:`pymem.queries.Q`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from pgvector.psycopg.halfvec import register_halfvec_info
from pgvector.psycopg.vector import register_vector_info
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types import TypeInfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from . import server
from .errors import ConfigError, ConnectionError, translate
from .queries import Q
from .settings import Settings

T = TypeVar("T")


def resolve_conninfo(settings: Settings) -> str:
    """The DSN to use: the configured one, or the embedded server's (started if needed)."""
    if settings.dsn:
        try:
            conninfo_to_dict(settings.dsn)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"PYMEM_DSN is not a valid connection string: {exc}") from exc
        return settings.dsn
    return server.start(settings.data_dir).uri


def connect_kwargs(settings: Settings, conninfo: str) -> dict[str, Any]:
    """Connection parameters from settings, merged over what the DSN itself says."""
    params = conninfo_to_dict(conninfo)
    kwargs: dict[str, Any] = {"prepare_threshold": settings.prepare_threshold}
    if "application_name" not in params:
        kwargs["application_name"] = settings.application_name
    if settings.statement_timeout_ms:
        options = params.get("options") or ""
        kwargs["options"] = f"{options} -c statement_timeout={settings.statement_timeout_ms}".strip()
    return kwargs


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Re-raise psycopg errors as pymem errors (the original stays as ``__cause__``)."""
    try:
        yield
    except psycopg.Error as exc:
        raise translate(exc) from exc


def _type_infos(conn: psycopg.Connection) -> list[TypeInfo]:
    row = conn.execute(Q["vector_schema"], prepare=False).fetchone()
    if row is None:
        return []
    schema = psycopg.sql.Identifier(row[0]).as_string(conn)
    infos = []
    for name in ("vector", "halfvec"):
        info = TypeInfo.fetch(conn, f"{schema}.{name}")
        if info is not None:
            infos.append(info)
    return infos


def register_types(conn: psycopg.Connection | psycopg.AsyncConnection, infos: list[TypeInfo]) -> None:
    for info in infos:
        if info.name == "vector":
            register_vector_info(conn, info)
        elif info.name == "halfvec":
            register_halfvec_info(conn, info)


def connect(conninfo: str, settings: Settings | None = None, **extra: Any) -> psycopg.Connection:
    """One autocommit connection with pymem's settings and pgvector types (not pooled)."""
    settings = settings or Settings()
    with errors():
        conn = psycopg.connect(conninfo, autocommit=True, **(connect_kwargs(settings, conninfo) | extra))
        register_types(conn, _type_infos(conn))
    return conn


class Database:
    """A connection pool to one pymem database.

    ``Database()`` reads :class:`Settings` from the environment; with no DSN it starts (or
    reuses) the embedded server and migrates it. With a DSN it never migrates unless asked
    (``migrate=True``): production schemas move with ``pymem migrate`` or ``sql/migrate.sql``.
    """

    def __init__(self, settings: Settings | None = None, *, migrate: bool | None = None) -> None:
        self.settings = settings or Settings()
        self.conninfo = resolve_conninfo(self.settings)
        if migrate if migrate is not None else not self.settings.dsn:
            from .migrations import migrate as run_migrate

            run_migrate(self.conninfo, roles=self.settings.roles())
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
            self._infos = _type_infos(conn)
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
    """The asyncio twin of :class:`Database`; create it with ``await AsyncDatabase.open()``."""

    def __init__(self, settings: Settings, conninfo: str, pool: AsyncConnectionPool) -> None:
        self.settings = settings
        self.conninfo = conninfo
        self.pool = pool

    @classmethod
    async def open(cls, settings: Settings | None = None, *, migrate: bool | None = None) -> AsyncDatabase:
        settings = settings or Settings()
        conninfo = resolve_conninfo(settings)
        if migrate if migrate is not None else not settings.dsn:
            from .migrations import migrate as run_migrate

            run_migrate(conninfo, roles=settings.roles())
        infos: list[TypeInfo] = []
        with connect(conninfo, settings) as conn, errors():
            infos = _type_infos(conn)

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




# --- running operations -------------------------------------------------------------------
# Each public operation is written once, as a generator ("plan") that yields what it needs:
# Call(query name, params) -> the rows as dicts, or Embed(texts) -> validated vectors.
# run() and arun() drive the same plan over a sync or an async connection.


@dataclass(frozen=True)
class Call:
    query: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Embed:
    texts: list[str]


@dataclass(frozen=True)
class Invoke:
    """Call user code (a summarizer, an extractor). An exception it raises is thrown back
    into the plan, which decides what a failure means."""

    fn: Any
    args: tuple


def run(plan: Generator[Any, Any, T], db: Database, embedder: Any = None) -> T:
    """Drive a plan: each Call on a connection checked out for that statement only (a plan
    never holds a pooled connection while user code, an embedder or an LLM runs). An error of
    a Call or an Invoke is thrown into the plan, which may handle it or let it propagate."""
    from .embedders import validate_vectors

    try:
        step = next(plan)
        while True:
            try:
                if isinstance(step, Call):
                    with db.connection() as conn:
                        reply = conn.cursor(row_factory=dict_row).execute(Q[step.query], step.params).fetchall()
                elif isinstance(step, Embed):
                    reply = validate_vectors(embedder, step.texts, embedder.embed(list(step.texts)))
                else:
                    reply = step.fn(*step.args)
            except Exception as exc:
                if isinstance(step, Embed):
                    raise  # an embedder failure is the caller's to see
                step = plan.throw(exc)
                continue
            step = plan.send(reply)
    except StopIteration as done:
        return done.value


async def arun(plan: Generator[Any, Any, T], db: AsyncDatabase, embedder: Any = None) -> T:
    """The asyncio twin of :func:`run`."""
    import asyncio
    import inspect

    from .embedders import aembed, validate_vectors

    try:
        step = next(plan)
        while True:
            try:
                if isinstance(step, Call):
                    async with db.connection() as conn:
                        cur = await conn.cursor(row_factory=dict_row).execute(Q[step.query], step.params)
                        reply = await cur.fetchall()
                elif isinstance(step, Embed):
                    reply = validate_vectors(embedder, step.texts, await aembed(embedder, list(step.texts)))
                elif inspect.iscoroutinefunction(step.fn):
                    reply = await step.fn(*step.args)
                else:
                    reply = await asyncio.to_thread(step.fn, *step.args)
                    if inspect.isawaitable(reply):  # e.g. an object whose __call__ is async
                        reply = await reply
            except Exception as exc:
                if isinstance(step, Embed):
                    raise
                step = plan.throw(exc)
                continue
            step = plan.send(reply)
    except StopIteration as done:
        return done.value
