"""Connection failures say what is wrong, at once (issue 13, point 3), and the statement
timeout that travels with each call (no startup option, nothing left on the connection)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pymem
from pymem import AsyncMemory, HashEmbedder, Memory, server

# A pool timeout short enough that the old behaviour (wait for the pool, then "no free
# connection") fails these tests quickly instead of passing them slowly.
QUICK = {"pool_timeout": 3.0}


# --- wrong host, password, database: the server's reason, not a pool timeout ---------------


@pytest.fixture
def password_role(pg_server, admin, dsn):
    """A login role that must give its password (scram) even on the trusted Unix socket: one
    pg_hba.conf line for this role only, put first and removed afterwards."""
    role = "pymem_pw_test"
    hba = pg_server.pgdata / "pg_hba.conf"
    original = hba.read_text()
    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'right-password' IN ROLE pymem_app").format(sql.Identifier(role)))
    hba.write_text(f"local all {role} scram-sha-256\nhost all {role} 127.0.0.1/32 scram-sha-256\n" + original)
    admin.execute("SELECT pg_reload_conf()")
    try:
        yield role
    finally:
        hba.write_text(original)
        admin.execute("SELECT pg_reload_conf()")
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_wrong_password_is_a_connection_error_naming_it(dsn, password_role):
    with pymem.Database(pymem.Settings(dsn=make_conninfo(dsn, user=password_role, password="right-password"))) as db:
        assert db.about()["migrations"] > 0  # the role and its password work
    wrong = pymem.Settings(dsn=make_conninfo(dsn, user=password_role, password="wrong"), **QUICK)
    with pytest.raises(pymem.ConnectionError, match="password authentication failed"):
        pymem.Database(wrong)
    with pytest.raises(pymem.ConnectionError, match="password authentication failed"):
        asyncio.run(pymem.AsyncDatabase.open(wrong))
    # a pool that opens no connection up front fails just the same, when it opens
    with pytest.raises(pymem.ConnectionError, match="password authentication failed"):
        pymem.Database(pymem.Settings(dsn=wrong.dsn, pool_min_size=0, **QUICK))


def test_missing_database_and_closed_port_are_connection_errors(dsn):
    with pytest.raises(pymem.ConnectionError, match="does not exist"):
        pymem.Database(pymem.Settings(dsn=make_conninfo(dsn, dbname="pymem_no_such_db"), **QUICK))
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    closed = pymem.Settings(dsn=f"host=127.0.0.1 port={port} dbname=pymem", **QUICK)
    with pytest.raises(pymem.ConnectionError, match="refused"):
        pymem.Database(closed)
    with pytest.raises(pymem.ConnectionError, match="refused"):
        asyncio.run(pymem.AsyncDatabase.open(closed))


def test_a_pool_timeout_names_why_no_new_connection_can_be_made(dsn, admin):
    settings = pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1, pool_timeout=2.0)
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with pymem.Database(settings) as db:
        with db.connection():  # the only pooled connection is busy, the server is fine
            with pytest.raises(pymem.TimeoutError, match="no free connection"):
                db.about()
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname)))
        try:
            with db.connection():  # busy again, and no new connection can be made
                with pytest.raises(pymem.ConnectionError, match="not currently accepting connections"):
                    db.about()
        finally:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(dbname)))
        assert db.about()["migrations"] > 0


# --- the embedded server stopped under a running process ----------------------------------


def test_a_process_restarts_its_embedded_server_after_pymem_server_stop(caplog):
    # Not under pytest's tmp_path: another pytest run makes /tmp/pytest-of-<user> private again,
    # and the server's own OS user (as root) must reach its data directory.
    caplog.set_level(logging.DEBUG)
    data_dir = Path(tempfile.mkdtemp(prefix="pymem-restart-"))
    settings = pymem.Settings(data_dir=data_dir, **QUICK)  # no DSN: this process's embedded server
    try:
        with pymem.Database(settings) as db:
            mem = Memory(agent_id="bot", db=db, embedder=HashEmbedder())
            mem.persist("Lives in Oslo", id="alice")
            assert server.stop(data_dir)  # what `pymem server stop` does
            with pytest.raises(pymem.ConnectionError, match="started it again"):
                mem.retrieve(id="alice")  # this call's connection died with the server
            assert server.status(data_dir) is not None
            for _ in range(3):  # every later call works: no pool timeout, no restart of the process
                assert [f.content for f in mem.retrieve("Oslo", id="alice")] == ["Lives in Oslo"]

        async def twin():
            async with await pymem.AsyncDatabase.open(settings) as adb:
                amem = pymem.AsyncMemory(agent_id="bot", db=adb, embedder=HashEmbedder())
                assert [f.content for f in await amem.retrieve(id="alice")] == ["Lives in Oslo"]
                assert server.stop(data_dir)
                with pytest.raises(pymem.ConnectionError, match="started it again"):
                    await amem.retrieve(id="alice")
                return [f.content for f in await amem.retrieve(id="alice")]

        assert asyncio.run(twin()) == ["Lives in Oslo"]
        # the pool's own warnings about the dead connections stay out of the way (issue 29): the
        # call's ConnectionError said it all; they are in pymem's log at DEBUG
        assert [r.getMessage() for r in caplog.records
                if r.name.startswith("psycopg.pool") and r.levelno >= logging.WARNING] == []
        assert any(r.name == "pymem" and r.levelno == logging.DEBUG and "connection pool:" in r.getMessage()
                   for r in caplog.records)
    finally:
        server.stop(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


# --- an unmigrated database -----------------------------------------------------------------


def test_unmigrated_database_says_run_pymem_migrate_and_works_once_migrated(empty_dsn):
    with pymem.Database(pymem.Settings(dsn=empty_dsn, **QUICK), migrate=False) as db:
        with_vectors = Memory(agent_id="bot", db=db, embedder=HashEmbedder())
        without = Memory(agent_id="bot", db=db)
        # pgvector is not even installed: the error names the schema, not the vector (issue 29)
        with pytest.raises(pymem.MigrationError, match="schema pymem is not installed.*pymem migrate") as raised:
            with_vectors.persist("Lives in Oslo", id="alice")
        # issue 59, item 7: the hint once, and none of psycopg's adapter words
        assert str(raised.value).count("pymem migrate") == 1 and "adapt" not in str(raised.value)
        with pytest.raises(pymem.MigrationError, match="pymem migrate") as raised:
            without.persist("Lives in Oslo", id="alice")  # schema pymem does not exist
        assert str(raised.value).count("pymem migrate") == 1
        with pytest.raises(pymem.MigrationError, match="pymem migrate"):
            db.about()

        pymem.migrate(empty_dsn)  # from elsewhere: this pool opened before pgvector existed

        fact = with_vectors.persist("Lives in Oslo", id="alice")
        assert [f.id for f in with_vectors.retrieve("Where does she live? Oslo", id="alice")] == [fact]
        assert db.about()["migrations"] > 0


def test_unmigrated_database_async(empty_dsn):
    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=empty_dsn, **QUICK), migrate=False) as db:
            mem = pymem.AsyncMemory(agent_id="bot", db=db, embedder=HashEmbedder())
            with pytest.raises(pymem.MigrationError, match="pymem migrate"):
                await mem.persist("Lives in Oslo", id="alice")
            await asyncio.to_thread(pymem.migrate, empty_dsn)
            fact = await mem.persist("Lives in Oslo", id="alice")
            return fact, [f.id for f in await mem.retrieve("Oslo", id="alice")]

    fact, found = asyncio.run(main())
    assert found == [fact]


# --- the statement timeout: a startup option of each pooled connection -----------------------


def traced_messages(conn: psycopg.Connection, call) -> list[str]:
    """The protocol messages the client sent while ``call()`` ran on ``conn`` (libpq's trace)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as f:
        conn.pgconn.trace(f.fileno())
        try:
            call()
        finally:
            conn.pgconn.untrace()
        f.seek(0)
        # each line: [timestamp] F|B length message ...
        fields = [line.rstrip("\n").split("\t") for line in f]
        return [fs[fs.index("F") + 2].split(" ")[0] for fs in fields if "F" in fs[:2]]


def assert_a_blocked_read_times_out(mem: Memory, dsn: str) -> None:
    """A read of alice's facts that waits on a lock another session holds is cancelled by the
    statement timeout (pymem.TimeoutError, 57014). Without the timeout it would wait for the lock
    to go (30 s) and then succeed."""
    holder = psycopg.connect(dsn)  # holds a lock every facts call needs
    holder.execute("LOCK TABLE pymem.facts IN ACCESS EXCLUSIVE MODE")
    release = threading.Timer(30, holder.rollback)
    release.start()
    try:
        with pytest.raises(pymem.TimeoutError) as err:
            mem.retrieve(id="alice")
    finally:
        release.cancel()
        holder.close()
    assert err.value.sqlstate == "57014" and "statement timeout" in str(err.value)


def test_statement_timeout_cancels_a_blocked_call_and_costs_no_statement(dsn, admin):
    settings = pymem.Settings(dsn=dsn, statement_timeout_ms=300, pool_min_size=1, pool_max_size=1)
    default = admin.execute("SHOW statement_timeout").fetchone()[0]
    with pymem.Database(settings) as db:
        mem = Memory(agent_id="bot", db=db)
        mem.persist("Lives in Oslo", id="alice")
        with db.connection() as c:
            pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
            assert c.execute("SHOW statement_timeout").fetchone()[0] == "300ms"  # the startup option
            assert c.prepare_threshold == 5  # the default: prepared from the fifth execution on
            # one call is one statement: no set_config, no pipeline around it
            for _ in range(7):  # prepared on the sixth
                sent = traced_messages(c, lambda: pymem.connection.execute(
                    c, "facts_newest", {"scope": "user", "scope_id": "alice", "project_id": "", "max_facts": 50},
                    settings))
            assert sent == ["Bind", "Describe", "Execute", "Sync"], sent  # prepared: no Parse any more
        assert admin.execute("SHOW statement_timeout").fetchone()[0] == default  # the server's own is untouched

        assert_a_blocked_read_times_out(mem, dsn)

        assert [f.content for f in mem.retrieve(id="alice")] == ["Lives in Oslo"]
        with db.connection() as c:  # the same server connection
            assert c.execute("SELECT pg_backend_pid()").fetchone()[0] == pid


def test_the_timeout_per_call_is_one_simple_query_with_no_flush_and_ends_with_the_call(dsn):
    """Where a pooler refused the startup option, each call carries its timeout: one Query message
    (set_config and the call, one implicit transaction), never a pipeline, whose Flush after the
    Sync left PgBouncer 1.25's one server connection tied to an idle client under load."""
    no_session = make_conninfo(dsn, options="-c statement_timeout=0")  # the DSN's wins: no session timeout
    with pymem.Database(pymem.Settings(dsn=no_session, statement_timeout_ms=300, pool_max_size=1)) as db:
        db._per_call = True  # as when a pooler refused the startup option
        mem = Memory(agent_id="bot", db=db, embedder=pymem.HashEmbedder())
        fact = mem.persist("Lives in Oslo", id="alice")
        assert mem.persist("Lives in Oslo", id="alice") == fact  # its vector went as a literal
        newest = {"scope": "user", "scope_id": "alice", "project_id": "", "max_facts": 50}
        with db.connection() as c:
            for _ in range(7):  # past psycopg's prepare threshold: still one message, nothing prepared
                sent = traced_messages(c, lambda: pymem.connection.execute(
                    c, "facts_newest", newest, db.settings, timeout_per_call=True))
            assert sent == ["Query"], sent
            assert c.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] == 0
            assert c.execute("SHOW statement_timeout").fetchone()[0] == "0"  # ended with the call
        assert [f.content for f in mem.retrieve(id="alice")] == ["Lives in Oslo"]

        assert_a_blocked_read_times_out(mem, dsn)
        with db.connection() as c:
            assert c.execute("SHOW statement_timeout").fetchone()[0] == "0"

    async def asynchronously():  # the asyncio twin sends the same one message
        adb = await pymem.AsyncDatabase.open(pymem.Settings(dsn=no_session, statement_timeout_ms=300))
        adb._per_call = True
        async with AsyncMemory(agent_id="bot", db=adb, embedder=pymem.HashEmbedder()) as amem:
            again = await amem.persist("Lives in Oslo", id="alice")
            contents = [f.content for f in await amem.retrieve(id="alice")]
            async with adb.connection() as c:
                shown = (await (await c.execute("SHOW statement_timeout")).fetchone())[0]
        await adb.close()
        return again, contents, shown

    assert asyncio.run(asynchronously()) == (fact, ["Lives in Oslo"], "0")


def test_the_timeout_per_call_binds_hostile_values_as_data(dsn):
    """The per-call path binds parameters on the client (one simple-protocol message): quotes,
    backslashes, placeholders, comments, statement separators and dollar quotes in a value stay
    data, and come back as they went in."""
    hostile = ["O'Brien said ''hi''", "back\\slash \\' end", "%(scope)s and %s and %%", "-- a comment",
               "x'); DROP TABLE pymem.facts; --", "$$ dollar $$ $q$ quoted $q$", "E'\\x41' \\n", "naïve café 東京 🙂"]
    with pymem.Database(pymem.Settings(dsn=dsn, statement_timeout_ms=3000, pool_max_size=1)) as db:
        db._per_call = True  # as when a pooler refused the startup option
        mem = Memory(agent_id="bot", db=db, embedder=pymem.HashEmbedder())
        ids = [mem.persist(text, id="o'neil; --") for text in hostile]
        assert [mem.persist(text, id="o'neil; --") for text in hostile] == ids  # the same facts again
        assert sorted(f.content for f in mem.retrieve(id="o'neil; --", limit=50)) == sorted(hostile)
        assert mem.retrieve(hostile[4], id="o'neil; --", k=1)[0].content == hostile[4]
        with db.connection() as c:
            assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == len(hostile)


def test_the_dsn_options_come_after_the_timeout_and_win(dsn):
    from psycopg.conninfo import make_conninfo

    with_options = make_conninfo(dsn, options="-c statement_timeout=1234 -c work_mem=8MB")
    with pymem.Database(pymem.Settings(dsn=with_options, statement_timeout_ms=300, pool_min_size=1)) as db:
        with db.connection() as c:
            assert c.execute("SHOW statement_timeout").fetchone()[0] == "1234ms"
            assert c.execute("SHOW work_mem").fetchone()[0] == "8MB"
    with pymem.Database(pymem.Settings(dsn=dsn, statement_timeout_ms=0, pool_min_size=1)) as db:
        with db.connection() as c:  # no timeout: no option at all
            assert c.execute("SHOW statement_timeout").fetchone()[0] == "0"


def test_the_embedded_default_migrates_only_what_is_not_current(dsn, empty_dsn, monkeypatch):
    """Issue 29, item 13: opening the embedded server (no DSN) checks first, and migrates (under
    the migration lock, refreshing every API file) only when something is not current."""
    from pymem import database, migrations

    calls: list[str] = []
    real = migrations.migrate
    monkeypatch.setattr(migrations, "migrate", lambda conninfo, **kw: calls.append(conninfo) or real(conninfo, **kw))
    for target in (dsn, empty_dsn, empty_dsn):  # current; empty (migrated now); current since
        monkeypatch.setattr(database, "resolve_conninfo", lambda settings, t=target: t)
        database._open_conninfo(pymem.Settings(), None)
    assert calls == [empty_dsn]
    assert migrations.check(empty_dsn) == []
    database._open_conninfo(pymem.Settings(), True)  # asked for: always
    assert calls == [empty_dsn, empty_dsn]
