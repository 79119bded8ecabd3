"""Connection plumbing: which server to talk to (`resolve_conninfo`), the connection
parameters that `Settings` adds, pgvector's types registered on a connection, and
database errors turned into `pymem.errors` exceptions (`errors`).

Imports only settings, server, errors and queries: `pymem.migrations` and
`pymem.database` build on it, never the other way round.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

import psycopg
from pgvector.psycopg.halfvec import register_halfvec_info
from pgvector.psycopg.vector import register_vector_info
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.abc import AdaptContext
from psycopg.types import TypeInfo
from psycopg.types.json import set_json_loads

from . import server
from .errors import ConfigError, QueryError, redact, redacted, translate
from .queries import Q
from .settings import Settings

#: pgvector's types pymem sends and reads
VECTOR_TYPES = ("vector", "halfvec")


def resolve_conninfo(settings: Settings) -> str:
    """The DSN to use: the configured one, or the embedded server's (started if needed)."""
    if settings.dsn:
        return parsed(settings.dsn, "PYMEM_DSN")
    return server.start(settings.data_dir).uri


def parsed(conninfo: str, what: str = "the connection string") -> str:
    """``conninfo`` when libpq can parse it, else `pymem.ConfigError` saying why, without
    the password (libpq's message quotes what it refused, often the password itself)."""
    try:
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        why = redact(str(exc).strip(), conninfo)
        hint = "in a URI, write a % in the password as %25 (and @ as %40, / as %2F)" if "://" in conninfo else None
        raise ConfigError(f"{what} is not a valid connection string: {why}", hint=hint) from None
    return conninfo


def one_value(row: tuple[Any, ...] | None) -> Any:
    """The first column of the one row a query always answers (``SELECT f()``, no FROM)."""
    if row is None:
        raise QueryError("the server answered no row where one is always returned")
    return row[0]


def describe_target(settings: Settings) -> str:
    """Which database ``settings`` reach, in words, never with a password: ``database "app" on
    db.example.com:5432 as "svc"``, or ``the embedded server in <data dir>`` (no DSN)."""
    if not settings.dsn:
        return f"the embedded server in {server.pgdata_of(settings.data_dir)}"
    params = conninfo_to_dict(settings.dsn)

    def word(value: object) -> str:  # a password with an unencoded @ or / leaves a piece in host or port
        return redact(f'"{value}"', settings.dsn)[1:-1]

    host = word(params.get("host") or os.environ.get("PGHOST") or "localhost")
    port = word(params.get("port") or os.environ.get("PGPORT") or "5432")
    user = params.get("user") or os.environ.get("PGUSER")
    dbname = word(params.get("dbname") or os.environ.get("PGDATABASE") or user or "(default)")
    return f'database "{dbname}" on {host}:{port}' + (f' as "{word(user)}"' if user else "")


def connect_kwargs(settings: Settings, conninfo: str) -> dict[str, Any]:
    """Connection parameters from settings, merged over what the DSN itself says. Nothing here
    is a startup option a transaction pooler could refuse (PgBouncer accepts application_name);
    a pool adds the statement timeout (`timeout_kwargs`)."""
    params = conninfo_to_dict(conninfo)
    kwargs: dict[str, Any] = {"prepare_threshold": settings.prepare_threshold}
    if "application_name" not in params:
        kwargs["application_name"] = settings.application_name
    if "connect_timeout" not in params and "PGCONNECT_TIMEOUT" not in os.environ:
        # a server that does not answer fails as fast as a busy pool would (libpq's minimum is 2 s)
        kwargs["connect_timeout"] = max(2, math.ceil(settings.pool_timeout))
    return kwargs


def timeout_kwargs(settings: Settings, conninfo: str) -> dict[str, Any]:
    """PYMEM_STATEMENT_TIMEOUT_MS as a startup option of each pooled connection
    (``options=-c statement_timeout=N``): the server applies it to every statement of the session,
    so a call costs no statement for it. Before the DSN's own ``options``, so that a
    ``statement_timeout`` there wins. Empty when the timeout is 0. A pooler that cannot carry it
    to the server refuses the option when the connection opens (`refused_option`), or
    takes it and sets nothing (`timeout_arrived`)."""
    if not settings.statement_timeout_ms:
        return {}
    own = f"-c statement_timeout={settings.statement_timeout_ms}"
    given = conninfo_to_dict(conninfo).get("options") or os.environ.get("PGOPTIONS")
    return {"options": f"{own} {given}" if given else own}


def refused_option(exc: BaseException) -> bool:
    """Whether opening a connection failed because a pooler refused its startup option (PgBouncer
    1.20+: "unsupported startup parameter in options: statement_timeout"; before: "unsupported
    startup parameter: options"). The server itself accepts any ``-c`` option."""
    return isinstance(exc, psycopg.OperationalError) and "unsupported startup parameter" in str(exc)


def timeout_arrived(conn: psycopg.Connection) -> bool:
    """Whether the session's statement timeout came from the connection's startup option. A
    pooler may take the option and not pass it on: PgBouncer with ``track_extra_parameters``
    naming ``statement_timeout`` keeps it for the client but sets only the parameters the server
    reports, which this one is not."""
    return bool(one_value(conn.execute(Q["statement_timeout_source"], prepare=False).fetchone()))


async def atimeout_arrived(conn: psycopg.AsyncConnection) -> bool:
    """The asyncio twin of `timeout_arrived`."""
    return bool(one_value(await (await conn.execute(Q["statement_timeout_source"], prepare=False)).fetchone()))


@contextlib.contextmanager
def errors(conninfo: str | None = None) -> Iterator[None]:
    """Re-raise psycopg errors as pymem errors (the original stays as ``__cause__``). With
    ``conninfo``, the connection string the error may have come from, an error about connecting
    (no SQLSTATE: libpq's own, or class 08 or 28) loses its password (`pymem.errors.redact`),
    and when it was there the original is dropped. An error the server raised about SQL quotes
    no connection string, and a word of it that looks like a piece of the password stays."""
    try:
        yield
    except psycopg.Error as exc:
        raise_translated(exc, conninfo)


def raise_translated(exc: psycopg.Error, conninfo: str | None = None) -> NoReturn:
    """Raise ``exc`` as `errors` does (a pymem error, without the password); for a caller that
    catches psycopg errors itself (`pymem.database.Database.query`, whose per-call path does
    without the context managers)."""
    err = translate(exc)
    if conninfo is None or (err.sqlstate or "08")[:2] not in ("08", "28"):
        raise err from exc
    said = str(err)
    if str(redacted(err, conninfo)) == said and redact(str(exc), conninfo) == str(exc):
        raise err from exc
    raise err from None


def per_call_query(name: str, settings: Settings) -> str:
    """The named query ``name`` behind a transaction-local ``set_config('statement_timeout', ...)``,
    as one string of two statements for the simple query protocol (`execute`), its
    parameters bound by the client (``%(x)b`` becomes ``%(x)s``: that protocol has no binary)."""
    key = (name, settings.statement_timeout_ms)
    if (found := _per_call.get(key)) is None:
        timeout = Q["statement_timeout"].replace("%(ms)s", f"'{int(settings.statement_timeout_ms)}'")
        found = _per_call[key] = timeout + "\n" + _BINARY.sub(r"%(\1)s", Q[name])
    return found


_per_call: dict[tuple[str, int], str] = {}
_BINARY = re.compile(r"%\((\w+)\)b")


def execute(
    conn: psycopg.Connection, name: str, params: Mapping[str, Any], settings: Settings | None, *,
    citus: bool = False, timeout_per_call: bool = False, row_factory: Any = dict_row,
    types: list[TypeInfo] | None = None
) -> list[dict[str, Any]]:
    """Send the named query ``name`` on an autocommit connection; its rows as dicts.

    One statement, one round trip: the connection carries the statement timeout for its session
    (`timeout_kwargs`). ``timeout_per_call``: it does not (a pooler refused the startup
    option, or did not pass it on), so the query goes behind a transaction-local
    ``set_config('statement_timeout', ...)`` in one simple-protocol message
    (`per_call_query`, parameters bound by the client): still one round trip, one implicit
    transaction, the timeout for this statement only and nothing left on the server connection
    for whoever uses it next. Not a pipeline: psycopg ends one with a Sync and, when the results
    are not back yet, a Flush, and a Flush that reaches PgBouncer (1.25) after the Sync's
    ReadyForQuery ties its server connection to this idle client, so every other client waits
    (``query_wait_timeout``).
    ``citus``: a Citus coordinator, which delegates a call sent alone to the worker of its user
    (never behind another statement: Citus delegates no function call inside a transaction). A call
    that names no single user (``browse_*``, ``'*'``, a fact by id) runs on the coordinator, whose
    reads of the workers carry the tenant only inside a transaction: refused outside one (0A000,
    "without its tenant", nothing done), it is sent again in a transaction (docs/scaling-out.md).
    ``types``: pgvector's types to register on the query's cursor, not on ``conn`` (a connection
    the caller owns, whose adapters stay as they are: `pymem.database.CallerConnection`);
    ``settings`` is needed with ``timeout_per_call`` only."""
    if timeout_per_call and not citus:
        assert settings is not None
        client = psycopg.ClientCursor(conn, row_factory=row_factory)
        client.execute(per_call_query(name, settings), params)
        client.nextset()
        return client.fetchall()
    cur = conn.cursor(row_factory=row_factory)
    if types is not None:
        register_types(cur, types)
    if citus:
        try:
            return cur.execute(Q[name], params).fetchall()
        except psycopg.errors.FeatureNotSupported as exc:
            if "without its tenant" not in str(exc):
                raise
        with conn.transaction():
            return cur.execute(Q[name], params).fetchall()
    return cur.execute(Q[name], params).fetchall()


async def aexecute(
    conn: psycopg.AsyncConnection, name: str, params: Mapping[str, Any], settings: Settings | None, *,
    citus: bool = False, timeout_per_call: bool = False, row_factory: Any = dict_row,
    types: list[TypeInfo] | None = None
) -> list[dict[str, Any]]:
    """The asyncio twin of `execute`."""
    if timeout_per_call and not citus:
        assert settings is not None
        acur = psycopg.AsyncClientCursor(conn, row_factory=row_factory)
        await acur.execute(per_call_query(name, settings), params)
        acur.nextset()
        return await acur.fetchall()
    cur = conn.cursor(row_factory=row_factory)
    if types is not None:
        register_types(cur, types)
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
    await cur.execute(Q[name], params)
    return await cur.fetchall()


def is_citus(conn: psycopg.Connection) -> bool:
    """Whether ``conn`` reaches a database with the citus extension (a Citus coordinator)."""
    return bool(one_value(conn.execute(Q["citus"], prepare=False).fetchone()))


async def ais_citus(conn: psycopg.AsyncConnection) -> bool:
    """The asyncio twin of `is_citus`."""
    return bool(one_value(await (await conn.execute(Q["citus"], prepare=False)).fetchone()))


def type_infos(conn: psycopg.Connection) -> list[TypeInfo]:
    """pgvector's ``vector`` and ``halfvec`` types, looked up in the schema pgvector is
    installed in (none when it is not installed yet)."""
    row = conn.execute(Q["vector_schema"], prepare=False).fetchone()
    if row is None:
        return []
    schema = psycopg.sql.Identifier(row[0]).as_string(conn)
    return [info for name in VECTOR_TYPES if (info := TypeInfo.fetch(conn, f"{schema}.{name}")) is not None]


async def atype_infos(conn: psycopg.AsyncConnection) -> list[TypeInfo]:
    """The asyncio twin of `type_infos`."""
    row = await (await conn.execute(Q["vector_schema"], prepare=False)).fetchone()
    if row is None:
        return []
    schema = psycopg.sql.Identifier(row[0]).as_string(conn)
    infos = [await TypeInfo.fetch(conn, f"{schema}.{name}") for name in VECTOR_TYPES]
    return [info for info in infos if info is not None]


def _json_loads(data: str | bytes) -> Any:
    """json.loads for the json and jsonb psycopg reads: ``{}`` (the metadata of most facts and
    messages) without a parse, other text decoded first (json.loads of bytes first guesses their
    encoding): 3.3 -> 0.1 us for ``{}``, ~50 of every row of a 50-fact read."""
    return {} if data == b"{}" else json.loads(data.decode() if isinstance(data, bytes) else data)


def register_types(conn: AdaptContext, infos: list[TypeInfo]) -> None:
    """pgvector's ``infos`` and pymem's JSON loader on ``conn``: a connection (a pool's) or a
    cursor (a caller's connection, whose own adapters pymem leaves alone)."""
    set_json_loads(_json_loads, conn)
    context: Any = conn  # pgvector's functions read only .adapters, which a cursor has too
    for info in infos:
        if info.name == "vector":
            register_vector_info(context, info)
        elif info.name == "halfvec":
            register_halfvec_info(context, info)


def connect(conninfo: str, settings: Settings | None = None, **extra: Any) -> psycopg.Connection:
    """One autocommit connection with pymem's settings and pgvector types (not pooled)."""
    settings = settings or Settings()
    parsed(conninfo)
    with errors(conninfo):
        conn = psycopg.connect(conninfo, autocommit=True, **(connect_kwargs(settings, conninfo) | extra))
        register_types(conn, type_infos(conn))
    return conn
