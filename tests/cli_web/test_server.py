"""The embedded server: start, reuse from another process, simultaneous starts, status, stop."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psycopg

from pymem import server

START = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pymem import server
    Path(sys.argv[2]).touch()
    while not Path(sys.argv[3]).exists():  # all processes leave the gate together
        time.sleep(0.005)
    info = server.start(Path(sys.argv[1]))
    print(info.pid, info.uri)
    """
)


def test_simultaneous_starts_share_one_server_and_second_start_reuses_it(tmp_path):
    # the server's data not under tmp_path: another xdist worker's first tmp_path closes
    # /tmp/pytest-of-root to other users again, and as root the server's OS user could no longer
    # reach it (test_security's immediate shutdown saw pg_ctl's "Permission denied" in CI)
    data_dir = Path(tempfile.mkdtemp(prefix="pymem-server-")) / "data"
    gate = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", START, str(data_dir), str(tmp_path / f"ready{i}"), str(gate)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    try:
        import time

        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{i}").exists() for i in range(3)) and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.touch()
        outs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
        pids = {o[0].split()[0] for o in outs}
        assert len(pids) == 1, f"three processes started {len(pids)} servers"
        info = server.status(data_dir)
        assert info is not None and str(info.pid) in pids
        # initdb ran once: one PG_VERSION, one cluster
        assert (info.pgdata / "PG_VERSION").read_text().strip() == "18"
        # a later process reuses the running server
        again = subprocess.run(
            [sys.executable, "-c", START, str(data_dir), str(tmp_path / "r9"), str(gate)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.stdout.split()[0] == str(info.pid)
        with psycopg.connect(info.uri) as c:
            assert c.execute("SELECT current_setting('server_version_num')::int").fetchone()[0] >= 180000
            assert c.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'").fetchone()[0] == 1
    finally:
        server.stop(data_dir)
    assert server.status(data_dir) is None
    assert server.stop(data_dir) is False
    shutil.rmtree(data_dir.parent, ignore_errors=True)


def test_status_of_a_directory_without_a_server_is_none(tmp_path):
    assert server.status(tmp_path) is None


def test_server_does_not_run_as_root(pg_server):
    with psycopg.connect(pg_server.uri) as c:
        c.execute("SELECT 1")
    owner = os.stat(pg_server.pgdata).st_uid
    if os.geteuid() == 0:
        assert owner != 0
