"""pymem behind PgBouncer in transaction mode (issue 13, point 6), with the default Settings:
only the DSN changes. The test starts PgBouncer itself (Debian package ``pgbouncer``) on a
loopback port, in front of the test server, with one server connection per database, so
every pymem client connection shares it: a startup option is refused, a server-side prepared
statement meets another client's, and any session state leaks to the next client.

Skipped when pgbouncer is not installed, except under CI (environment variable CI set), where
it fails: CI installs pgbouncer and must never skip these tests silently.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import threading
import time

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pymem
from pymem import MUST_NOT_EXIST, HashEmbedder, Memory, MemoryStore

PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def bouncer(pg_server, dsn, tmp_path):
    """The DSN of a PgBouncer (transaction mode, default settings otherwise) in front of ``dsn``."""
    if PGBOUNCER is None:
        if os.environ.get("CI"):
            pytest.fail("pgbouncer is not installed: CI must run tests/test_pgbouncer.py (apt-get install pgbouncer)")
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    port = _free_port()
    (tmp_path / "users.txt").write_text('"postgres" ""\n')
    ini = tmp_path / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"pymem = host={pg_server.socket_dir} port={pg_server.port or 5432} dbname={conninfo_to_dict(dsn)['dbname']}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp_path / 'users.txt'}\n"
        "pool_mode = transaction\n"
        "default_pool_size = 1\n"  # one server connection: every client shares it
        "logfile =\npidfile =\n"
    )
    args = [PGBOUNCER]
    if os.geteuid() == 0:  # pgbouncer refuses root: run as the user that may reach the server's socket
        args += ["-u", pwd.getpwuid(os.stat(pg_server.socket_dir).st_uid).pw_name]
    log = (tmp_path / "pgbouncer.log").open("w")
    proc = subprocess.Popen([*args, str(ini)], stdout=log, stderr=subprocess.STDOUT)
    conninfo = make_conninfo("", host="127.0.0.1", port=port, dbname="pymem", user="postgres", connect_timeout=5)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(conninfo) as c:
                    c.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"pgbouncer did not start:\n{(tmp_path / 'pgbouncer.log').read_text()[-2000:]}")
                time.sleep(0.05)
        yield conninfo
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def contract(db: pymem.Database, user: str) -> None:
    """The basic facts, conversation and store contracts, for one user."""
    mem = Memory(agent_id="bot", db=db, embedder=HashEmbedder(), window=10)
    # facts: idempotent add, supersede, newest first, by meaning, history, forget
    v1 = mem.persist("Prefers email", id=user)
    assert mem.persist("  Prefers email ", id=user) == v1
    v2 = mem.update("Prefers Slack", old="Prefers email", id=user)
    mem.persist("Lives in Bergen", id=user)
    assert [f.content for f in mem.retrieve(id=user)] == ["Lives in Bergen", "Prefers Slack"]
    assert mem.retrieve("Which city? Bergen", id=user, k=1)[0].content == "Lives in Bergen"
    assert [(f.id, f.superseded_by) for f in mem.history(id=user, fact_id=v2)] == [(v1, v2), (v2, None)]
    assert mem.forget(id=user, fact_id=v2) == 2
    assert [f.content for f in mem.retrieve(id=user)] == ["Lives in Bergen"]
    # conversations: a turn, the window, context, recall, forget
    mem.record("I moved to Oslo last week", "Noted.", user=user)
    mem.record("What is the weather like?", "Sunny.", user=user)
    assert [m.content for m in mem.window(user=user)] == [
        "I moved to Oslo last week", "Noted.", "What is the weather like?", "Sunny."]
    context = mem.context("Where do I live?", user=user)
    assert context[-1] == {"role": "user", "content": "Where do I live?"}
    assert any("Lives in Bergen" in m["content"] for m in context)
    assert mem.forget_conversation(user=user) == 4
    assert mem.window(user=user) == []
    # keyed stores: optimistic writes, reads, listing, the transcript, delete
    store = MemoryStore.get_or_create(f"notes-{user}", db=db, actor="test")
    sha = store.write_text("notes/a.md", "one", expected_sha=MUST_NOT_EXIST)
    store.write_text("notes/a.md", "two", expected_sha=sha)
    with pytest.raises(pymem.ConcurrencyError):
        store.write_text("notes/a.md", "stale", expected_sha=sha)
    assert store.read_text("notes/a.md") == "two" and store.list_paths("notes/") == ["notes/a.md"]
    store.append({"role": "user", "content": "hi"})
    assert store.save() == 1
    assert MemoryStore.get(f"notes-{user}", db=db).messages[-1]["content"] == "hi"
    store.delete("notes/a.md")
    assert store.read_text("notes/a.md") is None


def _bouncer_log(tmp_path) -> str:
    """The end of PgBouncer's log, for a failure's message (it names the timeout that closed a client)."""
    return (tmp_path / "pgbouncer.log").read_text(errors="replace")[-3000:]


def test_default_settings_work_behind_pgbouncer_in_transaction_mode(bouncer, tmp_path):
    settings = pymem.Settings(dsn=bouncer)
    assert settings.model_dump(exclude={"dsn"}) == pymem.Settings().model_dump(exclude={"dsn"})
    with pymem.Database(settings) as db:
        contract(db, "alice")
        # Several client connections at once, all on PgBouncer's one server connection: each
        # call repeated past psycopg's old prepare threshold (5) would have collided there.
        errors: list[BaseException] = []

        def client(name: str) -> None:
            try:
                for round in range(3):
                    contract(db, f"{name}-{round}")
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(f"user{i}",)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads), _bouncer_log(tmp_path)
        assert errors == [], f"{errors!r}\nPgBouncer log:\n{_bouncer_log(tmp_path)}"
        assert db.pool.get_stats()["pool_size"] > 1  # the pool did open several client connections


def test_no_session_state_reaches_the_next_client_and_the_timeout_still_applies(bouncer, dsn):
    with psycopg.connect(bouncer, autocommit=True) as other:  # another client of PgBouncer
        default = other.execute("SHOW statement_timeout").fetchone()[0]
        server_pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        with pymem.Database(pymem.Settings(dsn=bouncer, statement_timeout_ms=300)) as db:
            mem = Memory(agent_id="bot", db=db)
            mem.persist("Lives in Oslo", id="alice")
            assert [f.content for f in mem.retrieve(id="alice")] == ["Lives in Oslo"]
            # the same server connection pymem used, as the other client sees it
            assert other.execute("SELECT pg_backend_pid()").fetchone()[0] == server_pid
            assert other.execute("SHOW statement_timeout").fetchone()[0] == default
            assert other.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] == 0

            holder = psycopg.connect(dsn)  # directly on the server: holds a lock facts calls need
            holder.execute("LOCK TABLE pymem.facts IN ACCESS EXCLUSIVE MODE")
            release = threading.Timer(30, holder.rollback)  # without the timeout the call waits this long, then succeeds
            release.start()
            try:
                with pytest.raises(pymem.TimeoutError) as err:
                    mem.retrieve(id="alice")
            finally:
                release.cancel()
                holder.close()
            assert err.value.sqlstate == "57014"
            assert other.execute("SHOW statement_timeout").fetchone()[0] == default
