"""Connection plumbing: which server to talk to (:func:`resolve_conninfo`), the connection
parameters that :class:`Settings` adds, pgvector's types registered on a connection, and
database errors turned into :mod:`pymem.errors` exceptions (:func:`errors`).

Imports only settings, server, errors and queries: :mod:`pymem.migrations` and
:mod:`pymem.database` build on it, never the other way round.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from pgvector.psycopg.halfvec import register_halfvec_info
from pgvector.psycopg.vector import register_vector_info
from psycopg.conninfo import conninfo_to_dict
from psycopg.types import TypeInfo

from . import server
from .errors import ConfigError, translate
from .queries import Q
from .settings import Settings


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


def type_infos(conn: psycopg.Connection) -> list[TypeInfo]:
    """pgvector's ``vector`` and ``halfvec`` types, looked up in the schema pgvector is
    installed in (none when it is not installed yet)."""
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
        register_types(conn, type_infos(conn))
    return conn
