"""Connection plumbing: which server to talk to (:func:`resolve_conninfo`), the connection
parameters that :class:`Settings` adds, pgvector's types registered on a connection, and
database errors turned into :mod:`pymem.errors` exceptions (:func:`errors`).

Imports only settings, server, errors and queries: :mod:`pymem.migrations` and
:mod:`pymem.database` build on it, never the other way round.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from pgvector.psycopg.halfvec import register_halfvec_info
from pgvector.psycopg.vector import register_vector_info
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types import TypeInfo
from psycopg.types.json import set_json_loads

from . import server
from .errors import ConfigError, translate
from .queries import Q
from .settings import Settings

#: pgvector's types pymem sends and reads
VECTOR_TYPES = ("vector", "halfvec")


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
    """Connection parameters from settings, merged over what the DSN itself says. Nothing here
    is a startup option a transaction pooler could refuse (PgBouncer accepts application_name);
    the statement timeout travels with each statement instead (:func:`execute`)."""
    params = conninfo_to_dict(conninfo)
    kwargs: dict[str, Any] = {"prepare_threshold": settings.prepare_threshold}
    if "application_name" not in params:
        kwargs["application_name"] = settings.application_name
    if "connect_timeout" not in params and "PGCONNECT_TIMEOUT" not in os.environ:
        # a server that does not answer fails as fast as a busy pool would (libpq's minimum is 2 s)
        kwargs["connect_timeout"] = max(2, math.ceil(settings.pool_timeout))
    return kwargs


@contextlib.contextmanager
def errors() -> Iterator[None]:
    """Re-raise psycopg errors as pymem errors (the original stays as ``__cause__``)."""
    try:
        yield
    except psycopg.Error as exc:
        raise translate(exc) from exc


def execute(
    conn: psycopg.Connection, name: str, params: Mapping[str, Any], settings: Settings, *, citus: bool = False
) -> list[dict[str, Any]]:
    """Send the named query ``name`` on an autocommit connection; its rows as dicts.

    With a statement timeout, the query goes in one pipeline behind a transaction-local
    ``set_config('statement_timeout', ...)``: one round trip, one implicit transaction (no Sync
    between them), so the timeout applies to this statement only and nothing stays on the
    server connection for whoever uses it next (a transaction pooler hands it on).
    ``citus``: a Citus coordinator, whose connections have the timeout for their whole
    session already (:func:`set_session_timeout`): the query goes alone, so that Citus delegates
    it to the worker of its user. A call that names no single user (``browse_*``, ``'*'``, a
    fact by id) runs on the coordinator, whose reads of the workers carry the tenant only inside
    a transaction: refused outside one (0A000, "without its tenant", nothing done), it is sent
    again in a transaction (README "Scaling out")."""
    cur = conn.cursor(row_factory=dict_row)
    if citus:
        try:
            return cur.execute(Q[name], params).fetchall()
        except psycopg.errors.FeatureNotSupported as exc:
            if "without its tenant" not in str(exc):
                raise
        with conn.transaction():
            return cur.execute(Q[name], params).fetchall()
    if not settings.statement_timeout_ms:
        return cur.execute(Q[name], params).fetchall()
    with conn.pipeline():
        conn.execute(Q["statement_timeout"], {"ms": str(settings.statement_timeout_ms)})
        cur.execute(Q[name], params)
    return cur.fetchall()


async def aexecute(
    conn: psycopg.AsyncConnection, name: str, params: Mapping[str, Any], settings: Settings, *,
    citus: bool = False
) -> list[dict[str, Any]]:
    """The asyncio twin of :func:`execute`."""
    cur = conn.cursor(row_factory=dict_row)
    if citus:
        try:
            await cur.execute(Q[name], params)
            return await cur.fetchall()
        except psycopg.errors.FeatureNotSupported as exc:
            if "without its tenant" not in str(exc):
                raise
        async with conn.transaction():
            await cur.execute(Q[name], params)
            return await cur.fetchall()
    if not settings.statement_timeout_ms:
        await cur.execute(Q[name], params)
        return await cur.fetchall()
    async with conn.pipeline():
        await conn.execute(Q["statement_timeout"], {"ms": str(settings.statement_timeout_ms)})
        await cur.execute(Q[name], params)
    return await cur.fetchall()


def is_citus(conn: psycopg.Connection) -> bool:
    """Whether ``conn`` reaches a database with the citus extension (a Citus coordinator)."""
    return bool(conn.execute(Q["citus"], prepare=False).fetchone()[0])


async def ais_citus(conn: psycopg.AsyncConnection) -> bool:
    """The asyncio twin of :func:`is_citus`."""
    return bool((await (await conn.execute(Q["citus"], prepare=False)).fetchone())[0])


def set_session_timeout(conn: psycopg.Connection, settings: Settings) -> None:
    """PYMEM_STATEMENT_TIMEOUT_MS for the whole session of ``conn``. Used on a Citus coordinator
    instead of the per-statement pipeline of :func:`execute`: Citus runs a pipeline as a
    transaction and delegates no function call inside one, so every call would run on the
    coordinator with a round trip per inner statement (README "Scaling out")."""
    conn.execute(Q["session_timeout"], {"ms": str(settings.statement_timeout_ms)}, prepare=False)


async def aset_session_timeout(conn: psycopg.AsyncConnection, settings: Settings) -> None:
    """The asyncio twin of :func:`set_session_timeout`."""
    await conn.execute(Q["session_timeout"], {"ms": str(settings.statement_timeout_ms)}, prepare=False)


def type_infos(conn: psycopg.Connection) -> list[TypeInfo]:
    """pgvector's ``vector`` and ``halfvec`` types, looked up in the schema pgvector is
    installed in (none when it is not installed yet)."""
    row = conn.execute(Q["vector_schema"], prepare=False).fetchone()
    if row is None:
        return []
    schema = psycopg.sql.Identifier(row[0]).as_string(conn)
    return [info for name in VECTOR_TYPES if (info := TypeInfo.fetch(conn, f"{schema}.{name}")) is not None]


async def atype_infos(conn: psycopg.AsyncConnection) -> list[TypeInfo]:
    """The asyncio twin of :func:`type_infos`."""
    row = await (await conn.execute(Q["vector_schema"], prepare=False)).fetchone()
    if row is None:
        return []
    schema = psycopg.sql.Identifier(row[0]).as_string(conn)
    infos = [await TypeInfo.fetch(conn, f"{schema}.{name}") for name in VECTOR_TYPES]
    return [info for info in infos if info is not None]


def _json_loads(data: bytes) -> Any:
    """json.loads for the json and jsonb psycopg reads: ``{}`` (the metadata of most facts and
    messages) without a parse, other text decoded first (json.loads of bytes first guesses their
    encoding): 3.3 -> 0.1 us for ``{}``, ~50 of every row of a 50-fact read."""
    return {} if data == b"{}" else json.loads(data.decode())


def register_types(conn: psycopg.Connection | psycopg.AsyncConnection, infos: list[TypeInfo]) -> None:
    set_json_loads(_json_loads, conn)
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
        register_types(conn, type_infos(conn))
    return conn
