"""No password in any error, log line or CLI line (issue 36, item 1): every message built from a
connection string, or from libpq's errors about one, goes through pymem.errors.redact."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import traceback
import urllib.parse
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pymem
from pymem import database
from pymem.connection import describe_target
from pymem.errors import redact

PYMEM = Path(sys.executable).parent / "pymem"
WORKTREE = Path(pymem.__file__).parent.parent


def _everything(exc: BaseException) -> str:
    """What a user would see of ``exc``: its traceback with every chained cause."""
    return "".join(traceback.format_exception(exc))


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(WORKTREE), **env}
    return subprocess.run([str(PYMEM), *args], capture_output=True, text=True, cwd=cwd, env=full, timeout=180)


# --- the one function ------------------------------------------------------------------------


@pytest.mark.parametrize(("conninfo", "secret"), [
    ("postgresql://svc:Tr0ub4dor%zz@db.example.com/app", "Tr0ub4dor%zz"),
    ("postgresql://svc:Tr0ub4dor%253@db.example.com/app", "Tr0ub4dor%3"),
    ("postgres://db.example.com/app?sslmode=require&password=Tr0ub4dor", "Tr0ub4dor"),
    ("password=Tr0ub4dor host=db.example.com", "Tr0ub4dor"),
    ("host=db.example.com password = 'Tr0ub 4dor\\'s' dbname=app", "Tr0ub 4dor's"),
    ("host=db.example.com password=Tr0ub 4dor", "Tr0ub 4dor"),  # libpq reads password=Tr0ub, then refuses 4dor
])
def test_redact_removes_the_password_in_every_spelling(conninfo, secret):
    texts = [
        f"the password is {secret}.",
        f'invalid percent-encoded token: "{secret}"',
        f"quoted {urllib.parse.quote(secret, safe='')} and {secret!r}",
        f"libpq: {conninfo}",
    ]
    for piece in secret.split():  # a password with a space: libpq quotes each word on its own
        texts.append(f'missing "=" after "{piece}" in connection info string')
    for text in texts:
        out = redact(text, conninfo)
        assert "Tr0ub" not in out and "4dor" not in out, (text, out)
        assert "***" in out
    assert redact("nothing to hide here", conninfo) == "nothing to hide here"


def test_redact_finds_the_pieces_of_a_password_with_an_unencoded_at_sign():
    conninfo = "postgresql://svc:hun@ter2:xyz9@localhost/app"  # libpq: password 'hun', host 'ter2', port 'xyz9@localhost'
    assert conninfo_to_dict(conninfo)["host"] == "ter2"
    said = redact("failed to resolve host 'ter2': bad port \"xyz9@localhost\"", conninfo)
    assert "ter2" not in said and "xyz9" not in said
    assert redact('database "app" as "svc"', conninfo) == 'database "app" as "svc"'


# --- every path that carries a DSN -----------------------------------------------------------

UNPARSABLE = "postgresql://svc:s3cr%zzet@localhost/app"  # a % not followed by two hex digits


def test_a_password_libpq_cannot_parse_is_in_no_error_nor_its_traceback(tmp_path):
    for attempt in (lambda: pymem.Database(pymem.Settings(dsn=UNPARSABLE)),
                    lambda: asyncio.run(pymem.AsyncDatabase.open(pymem.Settings(dsn=UNPARSABLE))),
                    lambda: pymem.migrate(UNPARSABLE),
                    lambda: pymem.connect(UNPARSABLE)):
        with pytest.raises(pymem.ConfigError, match="not a valid connection string") as caught:
            attempt()
        assert "s3cr" not in _everything(caught.value) and "zzet" not in _everything(caught.value)
        assert "%25" in str(caught.value)  # the hint says how to write a % in a URI


def test_no_pymem_command_prints_the_password(tmp_path, dsn):
    env = {"PYMEM_DSN": UNPARSABLE}
    (tmp_path / "doc.json").write_text("{}")
    for args in (["migrate", "--check"], ["migrate"], ["export", "--user", "u"], ["import", "doc.json"],
                 ["recall-indexes"], ["serve", "--port", "0"]):
        out = _cli(*args, env=env, cwd=tmp_path)
        assert out.returncode == 1, (args, out.stderr)
        assert "not a valid connection string" in out.stderr, (args, out.stderr)
        assert "s3cr" not in out.stdout + out.stderr and "zzet" not in out.stdout + out.stderr, (args, out.stderr)
    # a password with an unencoded @ parses, but leaves its pieces in the host and the port
    pieces = _cli("migrate", "--check", env={"PYMEM_DSN": "postgresql://svc:hun@ter2:xyz9@localhost/app"}, cwd=tmp_path)
    assert pieces.returncode == 1 and "ConnectionError" in pieces.stderr, pieces.stderr
    assert "ter2" not in pieces.stderr and "xyz9" not in pieces.stderr, pieces.stderr
    assert 'checking database "app" on ***:*** as "svc"' in pieces.stderr


def test_the_describe_line_and_a_connection_error_leave_out_the_pieces_of_a_password(dsn):
    broken = "postgresql://svc:hun@ter2:xyz9@localhost/app"
    assert describe_target(pymem.Settings(dsn=broken)) == 'database "app" on ***:*** as "svc"'
    with pytest.raises(pymem.ConnectionError) as caught:
        pymem.Database(pymem.Settings(dsn=broken, pool_timeout=2))
    assert "ter2" not in _everything(caught.value) and "xyz9" not in _everything(caught.value)
    # a password that works (the test server trusts its socket and ignores it) is in no describe line
    working = make_conninfo(dsn, password="Tr0ub4dor")
    assert "Tr0ub4dor" not in describe_target(pymem.Settings(dsn=working))
    with pymem.Database(pymem.Settings(dsn=working)) as db:
        assert db.about()["migrations"] > 0
        assert "Tr0ub4dor" not in repr(db.settings)


def test_a_bad_setting_names_the_setting_never_the_dsn(tmp_path):
    kv = "password=hunter2secret host=db.example.com"
    for bad in ({"pool_min_size": 20}, {"pool_max_size": "many"}, {"pool_timeout": -1}):
        with pytest.raises(pymem.ConfigError, match="invalid PYMEM_\\* setting") as caught:
            pymem.Settings(dsn=kv, **bad)
        assert "hunter" not in _everything(caught.value), _everything(caught.value)
        assert isinstance(caught.value, ValueError)  # as pydantic's error was
    out = _cli("migrate", env={"PYMEM_DSN": kv, "PYMEM_POOL_MIN_SIZE": "20"}, cwd=tmp_path)
    assert out.returncode == 1 and "pool_min_size (20) is larger than pool_max_size (10)" in out.stderr, out.stderr
    assert "hunter" not in out.stderr and "password" not in out.stderr
    out = _cli("migrate", env={"PYMEM_DSN": kv, "PYMEM_POOL_MAX_SIZE": "many"}, cwd=tmp_path)
    assert out.returncode == 1 and "PYMEM_POOL_MAX_SIZE: Input should be a valid integer" in out.stderr, out.stderr
    assert "hunter" not in out.stderr and "many" not in out.stderr


def test_the_pools_log_lines_leave_out_the_password(caplog):
    """psycopg_pool logs why a reconnect failed (libpq's message); pymem moves those lines of its
    pools to its own log at DEBUG, without the password of any pool's connection string."""
    broken = "postgresql://postgres:hun@ter2@/app"
    database._conninfos.add(broken)
    try:
        caplog.set_level(logging.DEBUG)
        logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "pymem",
                                                  "failed to resolve host 'ter2@/tmp': no such host")
        lines = [r.getMessage() for r in caplog.records if r.name == "pymem"]
        assert lines and "error connecting" in lines[-1] and "ter2" not in caplog.text, caplog.text
    finally:
        database._conninfos.discard(broken)
