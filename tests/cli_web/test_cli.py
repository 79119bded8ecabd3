"""The `pymem` console script, run as a user would: from an unrelated directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pymem
from pymem import server
from pymem.queries import sql_root

PYMEM = Path(sys.executable).parent / "pymem"


def run(*args: str, env: dict | None = None, cwd: Path) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(PYMEM), *args], capture_output=True, text=True, cwd=cwd, env=full_env, timeout=180)


def test_console_script_is_installed():
    assert PYMEM.exists(), "pip install did not create the pymem console script"


def test_version(tmp_path):
    out = run("version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"pymem {pymem.__version__}"


def test_migrate_and_check_against_a_dsn(empty_dsn, tmp_path):
    env = {"PYMEM_DSN": empty_dsn}
    pending = run("migrate", "--check", env=env, cwd=tmp_path)
    assert pending.returncode == 3 and "not installed" in pending.stderr
    first = run("migrate", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "applied 0001_foundation" in first.stdout
    second = run("migrate", env=env, cwd=tmp_path)
    assert second.returncode == 0 and "no pending migrations" in second.stdout
    ok = run("migrate", "--check", env=env, cwd=tmp_path)
    assert ok.returncode == 0 and "current" in ok.stdout


def test_bad_settings_and_unreachable_database_are_clear_errors(tmp_path):
    bad = run("migrate", env={"PYMEM_POOL_MAX_SIZE": "many"}, cwd=tmp_path)
    assert bad.returncode != 0 and "PYMEM_" in bad.stderr
    gone = run("migrate", env={"PYMEM_DSN": f"host={tmp_path} dbname=x connect_timeout=2"}, cwd=tmp_path)
    assert gone.returncode == 1 and "ConnectionError" in gone.stderr


def test_demo_on_the_embedded_default_then_status_psql_and_stop(tmp_path, pg_server):
    # not under tmp_path: a pytest session starting meanwhile (as root) closes /tmp/pytest-of-root
    # to other users again, and the embedded server's OS user could no longer reach its data
    data = Path(tempfile.mkdtemp(prefix="pymem-demo-"))
    env = {"PYMEM_DATA_DIR": str(data)}
    try:
        assert run("server", "status", env=env, cwd=tmp_path).returncode == 1
        demo = run("demo", env=env, cwd=tmp_path)
        assert demo.returncode == 0, demo.stderr
        assert "embedded PostgreSQL" in demo.stdout and "0001_foundation" in demo.stdout
        status = run("server", "status", env=env, cwd=tmp_path)
        assert status.returncode == 0
        uri = status.stdout.strip()
        assert uri.startswith("postgresql://")
        # plain psql against the URI status printed, twice, then --check is clean
        psql = server.bin_dir() / "psql"
        script = Path(str(sql_root())) / "migrate.sql"
        for _ in range(2):
            p = subprocess.run(
                [str(psql), "-X", "-v", "ON_ERROR_STOP=1", "-d", uri, "-f", str(script)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert p.returncode == 0, p.stderr
        assert run("migrate", "--check", env=env, cwd=tmp_path).returncode == 0
        # another database of the same server, for psql (issue 59, item 5)
        p = subprocess.run([str(psql), "-X", "-d", uri, "-c", "CREATE DATABASE scratch"], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        other = run("server", "status", "--db", "scratch", env=env, cwd=tmp_path).stdout.strip()
        assert other != uri and other.startswith("postgresql://")
        p = subprocess.run([str(psql), "-X", "-At", "-d", other, "-c", "SELECT current_database()"],
                           capture_output=True, text=True, timeout=60)
        assert p.stdout.strip() == "scratch", p.stderr
        # a second demo reuses the server and its data
        again = run("demo", env=env, cwd=tmp_path)
        assert again.returncode == 0 and "none pending" in again.stdout
    finally:
        stop = run("server", "stop", env=env, cwd=tmp_path)
    assert stop.returncode == 0 and stop.stdout.strip() == "stopped"
    assert run("server", "status", env=env, cwd=tmp_path).returncode == 1
    shutil.rmtree(data, ignore_errors=True)


def test_consolidate_takes_dry_run_and_errors_say_pymem_once(dsn, tmp_path):
    """Issue 59, item 7: `consolidate --dry-run` (the default, as recall-indexes spells it) is
    accepted, not with --apply; a SQL error, whose message starts with "pymem:", is printed
    with the prefix once."""
    env = {"PYMEM_DSN": dsn}
    dry = run("consolidate", "--id", "alice", "--dry-run", env=env, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "a dry run" in dry.stderr
    both = run("consolidate", "--id", "alice", "--dry-run", "--apply", env=env, cwd=tmp_path)
    assert both.returncode == 2 and "not allowed with" in both.stderr
    bad = run("retention", "--max-per-thread", "0", env=env, cwd=tmp_path)
    assert bad.returncode == 1
    [line] = [x for x in bad.stderr.splitlines() if "Error" in x]
    assert line.count("pymem:") == 1, line
