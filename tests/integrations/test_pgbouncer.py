"""pymem behind PgBouncer in transaction mode (issue 13, point 6; issue 28), with the default
Settings: only the DSN changes. The tests start PgBouncer themselves on a loopback port, in
front of the test server, with one server connection per database (``default_pool_size = 1``),
so every client connection shares it: a server-side prepared statement meets another client's,
and any session state left on it reaches the next client. Two PgBouncers:

* Debian 12's package ``pgbouncer`` (1.18): it refuses the ``options`` startup parameter itself
  ("unsupported startup parameter: options") and cannot keep prepared statements in transaction
  mode. pymem's first connection notices: the timeout goes with each call and, the prepare
  threshold left at its default, nothing is prepared.
* PgBouncer 1.25.2, built from the team's vendored source by ``.ci/pgbouncer build`` (cached
  outside the repository): it keeps prepared statements in transaction mode
  (``max_prepared_statements = 200`` by default), so pymem prepares behind it when it sends no
  timeout with each call (the timeout set on the server instead). With its
  defaults it refuses pymem's option ("unsupported startup parameter in options:
  statement_timeout"); with ``track_extra_parameters = IntervalStyle, statement_timeout`` it
  accepts the option but never sets it on the server connection (PgBouncer restores only
  parameters whose server-side value PostgreSQL reports, and statement_timeout is not one).
  pymem notices either way (its first connection asks where the session's timeout came from)
  and sends the timeout with each call, in one simple-protocol message (never a pipeline: see
  pymem.connection.execute).

Skipped when pgbouncer is not installed, or when 1.25.2 cannot be built here (no vendored
archive, no build tools: the skip reason names what is missing), except under CI (environment
variable CI set), where they fail: CI installs both and must never skip these tests silently.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pymem
from pymem import MUST_NOT_EXIST, HashEmbedder, Memory, MemoryStore

PGBOUNCER = shutil.which("pgbouncer") or next(
    (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
)
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "pgbouncer"
TRACK_TIMEOUT = "track_extra_parameters = IntervalStyle, statement_timeout\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unavailable(reason: str) -> None:
    """Skip, except under CI: there it fails (CI must never skip these tests silently)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run tests/integrations/test_pgbouncer.py")
    pytest.skip(reason)


@contextlib.contextmanager
def _running_bouncer(binary: str, pg_server, dsn: str, tmp_path: Path, extra: str = "") -> Iterator[str]:
    """A PgBouncer ``binary`` in transaction mode in front of ``dsn``'s database, one server
    connection (every client shares it), its log in tmp_path/pgbouncer.log, PgBouncer's
    defaults otherwise plus the ``extra`` lines of its [pgbouncer] section; yields its DSN."""
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
        f"{extra}"
    )
    args = [binary]
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
                    pytest.fail(f"{binary} did not start:\n{_bouncer_log(tmp_path)}")
                time.sleep(0.05)
        yield conninfo
    finally:
        # SIGINT: a quick safe shutdown on both versions (from 1.23 SIGTERM waits for every
        # client to disconnect); a PgBouncer that does not stop in time is killed.
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture
def bouncer(pg_server, dsn, tmp_path):
    """The DSN of Debian's PgBouncer (1.18; transaction mode, default settings otherwise) in front of ``dsn``."""
    if PGBOUNCER is None:
        _unavailable("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    with _running_bouncer(PGBOUNCER, pg_server, dsn, tmp_path) as conninfo:
        yield conninfo


@pytest.fixture(scope="session")
def pgbouncer_125() -> str:
    """The path of PgBouncer 1.25.2, built once from the vendored source (.ci/pgbouncer build,
    cached outside the repository: ~15 s the first time, nothing later)."""
    if not BUILD_SCRIPT.is_file():
        _unavailable(f"{BUILD_SCRIPT} is missing (a source distribution without .ci/)")
    out = subprocess.run([str(BUILD_SCRIPT), "build"], capture_output=True, text=True, timeout=1200)
    if out.returncode == 3:  # a prerequisite is missing: the script names it
        _unavailable(f"PgBouncer 1.25.2 cannot be built here: {out.stderr.strip()}")
    if out.returncode != 0:
        pytest.fail(f".ci/pgbouncer build failed (exit status {out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture
def bouncer_125(pgbouncer_125, pg_server, dsn, tmp_path):
    """PgBouncer 1.25.2 with its own defaults (it refuses pymem's startup option) in front of ``dsn``."""
    with _running_bouncer(pgbouncer_125, pg_server, dsn, tmp_path) as conninfo:
        yield conninfo


@pytest.fixture
def bouncer_125_tracking(pgbouncer_125, pg_server, dsn, tmp_path):
    """PgBouncer 1.25.2 with ``track_extra_parameters = IntervalStyle, statement_timeout`` in front of ``dsn``."""
    with _running_bouncer(pgbouncer_125, pg_server, dsn, tmp_path, TRACK_TIMEOUT) as conninfo:
        yield conninfo


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


def contract_from_threads(db: pymem.Database, tmp_path, clients: int = 3, rounds: int = 3) -> None:
    """The contract from several client connections at once, all on PgBouncer's one server
    connection: a statement prepared by one client (the 5th execution of a call) meets the others'."""
    errors: list[BaseException] = []

    def client(name: str) -> None:
        try:
            for round in range(rounds):
                contract(db, f"{name}-{round}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(f"user{i}",)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), _bouncer_log(tmp_path)
    assert errors == [], f"{errors!r}\nPgBouncer log:\n{_bouncer_log(tmp_path)}"
    assert db.pool.get_stats()["pool_size"] > 1  # the pool did open several client connections


def prepare_thresholds(db: pymem.Database) -> set[int | None]:
    """The prepare threshold of every connection the pool has open (all checked out at once)."""
    with contextlib.ExitStack() as stack:
        conns = [stack.enter_context(db.connection()) for _ in range(max(1, db.pool.get_stats()["pool_size"]))]
        return {c.prepare_threshold for c in conns}


def server_prepared(other: psycopg.Connection) -> list[str]:
    """The statements prepared on PgBouncer's server connection, as another of its clients sees
    them (that client shares the one server connection)."""
    return [r[0] for r in other.execute("SELECT name FROM pg_prepared_statements ORDER BY name").fetchall()]


def assert_blocked_call_times_out(mem: Memory, dsn: str, tmp_path) -> None:
    """A call that waits on a lock another session holds (directly on the server) is cancelled by
    pymem's statement timeout (a few hundred ms in these tests): pymem.TimeoutError, SQLSTATE
    57014. Without a timeout the call waits until the lock goes (5 s), then succeeds: an
    AssertionError here."""
    holder = psycopg.connect(dsn)  # directly on the server: holds a lock facts calls need
    holder.execute("LOCK TABLE pymem.facts IN ACCESS EXCLUSIVE MODE")
    release = threading.Timer(5, holder.rollback)  # without the timeout the call waits this long, then succeeds
    release.start()
    err: pymem.TimeoutError | None = None
    started = time.monotonic()
    try:
        mem.retrieve(id="alice")
    except pymem.TimeoutError as exc:
        err = exc
    finally:
        release.cancel()
        holder.close()
    assert err is not None, (f"the call waited {time.monotonic() - started:.1f} s for the lock and succeeded: "
                             f"no statement timeout reached the server\n{_bouncer_log(tmp_path)}")
    assert err.sqlstate == "57014", _bouncer_log(tmp_path)


# PgBouncer 1.18 (Debian): refuses the startup option, keeps no prepared statements.


def test_default_settings_work_behind_pgbouncer_in_transaction_mode(bouncer, tmp_path):
    settings = pymem.Settings(dsn=bouncer)
    assert settings.model_dump(exclude={"dsn"}) == pymem.Settings().model_dump(exclude={"dsn"})
    with psycopg.connect(bouncer, autocommit=True) as other:  # another client of PgBouncer
        default = other.execute("SHOW statement_timeout").fetchone()[0]
        with pymem.Database(settings) as db:
            contract(db, "alice")
            # Each call repeated past psycopg's prepare threshold (5) would have collided on the
            # shared server connection, had pymem not turned prepared statements off.
            contract_from_threads(db, tmp_path)
            # pymem noticed the refusal: nothing prepared, the timeout with each call only
            assert prepare_thresholds(db) == {None}
            assert other.execute("SHOW statement_timeout").fetchone()[0] == default
            assert server_prepared(other) == []
    assert "unsupported startup parameter: options" in _bouncer_log(tmp_path)  # 1.18 refuses `options` itself


def test_no_session_state_reaches_the_next_client_and_the_timeout_still_applies(bouncer, dsn, tmp_path):
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

            assert_blocked_call_times_out(mem, dsn, tmp_path)
            assert other.execute("SHOW statement_timeout").fetchone()[0] == default


# PgBouncer 1.25.2 (vendored source): keeps prepared statements in transaction mode.


def test_pgbouncer_125_tracking_statement_timeout_accepts_the_option_and_pymem_sends_it_with_each_call(
        bouncer_125_tracking, tmp_path):
    bouncer = bouncer_125_tracking
    with psycopg.connect(bouncer, autocommit=True) as other:  # another client of PgBouncer
        default = other.execute("SHOW statement_timeout").fetchone()[0]
        server_pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        with pymem.Database(pymem.Settings(dsn=bouncer)) as db:
            contract(db, "alice")
            contract_from_threads(db, tmp_path)
            # the startup option was accepted (and not passed on): the timeout goes with each
            # call, in one simple-protocol message, so nothing is prepared on the server connection
            assert db._per_call
            assert "unsupported startup parameter" not in _bouncer_log(tmp_path)
            assert other.execute("SELECT pg_backend_pid()").fetchone()[0] == server_pid
            assert server_prepared(other) == []
            assert other.execute("SHOW statement_timeout").fetchone()[0] == default
        with pymem.Database(pymem.Settings(dsn=bouncer, statement_timeout_ms=300)) as db:
            with db.connection() as c:
                shown = c.execute("SHOW statement_timeout").fetchone()[0]
            # PgBouncer keeps the client's statement_timeout=300 in its cache but never sets it on
            # the server connection: it restores a tracked parameter only when it knows the server
            # connection's value, which it learns from ParameterStatus messages, and PostgreSQL
            # reports no statement_timeout (not GUC_REPORT). So pymem's pooled connection runs
            # under the server's default, and pymem sends the timeout with each call (next test).
            assert shown == default, "PgBouncer now sets the tracked statement_timeout on the server connection"
            assert other.execute("SHOW statement_timeout").fetchone()[0] == default


def test_pgbouncer_125_tracking_statement_timeout_times_out_a_blocked_call(bouncer_125_tracking, dsn, tmp_path):
    with pymem.Database(pymem.Settings(dsn=bouncer_125_tracking, statement_timeout_ms=300)) as db:
        mem = Memory(agent_id="bot", db=db)
        mem.persist("Lives in Oslo", id="alice")
        assert_blocked_call_times_out(mem, dsn, tmp_path)


def test_pgbouncer_125_defaults_refuse_the_option_and_pymem_falls_back(bouncer_125, dsn, tmp_path):
    with psycopg.connect(bouncer_125, autocommit=True) as other:  # another client of PgBouncer
        default = other.execute("SHOW statement_timeout").fetchone()[0]
        with pymem.Database(pymem.Settings(dsn=bouncer_125, statement_timeout_ms=300)) as db:
            contract(db, "alice")
            contract_from_threads(db, tmp_path)
            # refused with "in options" (a PgBouncer that knows the parameter, 1.20+): the
            # timeout goes with each call, one simple-protocol message, nothing prepared
            assert db._per_call
            assert server_prepared(other) == []
            assert other.execute("SHOW statement_timeout").fetchone()[0] == default
            mem = Memory(agent_id="bot", db=db)
            mem.persist("Lives in Oslo", id="alice")
            assert_blocked_call_times_out(mem, dsn, tmp_path)
    assert "unsupported startup parameter in options: statement_timeout" in _bouncer_log(tmp_path)


def _end_server_connections(admin: psycopg.Connection, bouncer: str, dbname: str, timeout: float = 20.0) -> None:
    """End the server connections PgBouncer holds to ``dbname`` and wait until it has let go of
    them. pg_terminate_backend only signals: a client arriving before PgBouncer has read the
    dying backend's FATAL would be handed that connection (AdminShutdown, seen under load), so
    the backends are waited for, then a probe client takes each dead one until a call succeeds."""
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                  (dbname,))
    deadline = time.monotonic() + timeout
    while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                        (dbname,)).fetchone()[0]:
        assert time.monotonic() < deadline, "the terminated backends did not exit"
        time.sleep(0.05)
    while True:
        try:
            with psycopg.connect(bouncer, autocommit=True) as probe:
                probe.execute("SELECT 1")
            return
        except psycopg.OperationalError:  # AdminShutdown and "server closed the connection" alike
            assert time.monotonic() < deadline, "PgBouncer kept handing out a terminated server connection"
            time.sleep(0.05)


def test_pgbouncer_125_with_the_timeout_on_the_server_keeps_prepared_statements(bouncer_125, dsn, admin, tmp_path):
    """docs/cli-and-configuration.md "Behind PgBouncer", the fast way: the timeout set on the server (here on the
    database; on the application role in production) and PYMEM_STATEMENT_TIMEOUT_MS=0, so pymem
    sends it with no call: each call is one extended-protocol statement, prepared from its fifth
    execution on, under PgBouncer's names, and a blocked call still times out."""
    dbname = conninfo_to_dict(dsn)["dbname"]
    admin.execute(f'ALTER DATABASE "{dbname}" SET statement_timeout = 300')  # new server connections take it
    # PgBouncer's server connection opened before the setting: ended, so that the next one takes it
    _end_server_connections(admin, bouncer_125, dbname)
    with psycopg.connect(bouncer_125, autocommit=True) as other:  # another client of PgBouncer
        assert other.execute("SHOW statement_timeout").fetchone()[0] == "300ms"
        with pymem.Database(pymem.Settings(dsn=bouncer_125, statement_timeout_ms=0)) as db:
            contract(db, "alice")
            contract_from_threads(db, tmp_path)
            assert not db._per_call and prepare_thresholds(db) == {5}
            names = server_prepared(other)
            assert names and all(n.startswith("PGBOUNCER_") for n in names), names
            mem = Memory(agent_id="bot", db=db)
            mem.persist("Lives in Oslo", id="alice")
            assert_blocked_call_times_out(mem, dsn, tmp_path)
    assert "unsupported startup parameter" not in _bouncer_log(tmp_path)  # no option sent at all


def test_pgbouncer_125_with_the_documented_setting_for_poolers_that_keep_no_statements(bouncer_125, dsn, tmp_path):
    """PYMEM_PREPARE_THRESHOLD=none, README's one setting for a pooler that cannot keep prepared
    statements: set explicitly, it wins over what pymem would choose (here: prepare), and the
    timeout still goes with each call."""
    with psycopg.connect(bouncer_125, autocommit=True) as other:  # another client of PgBouncer
        default = other.execute("SHOW statement_timeout").fetchone()[0]
        settings = pymem.Settings(dsn=bouncer_125, prepare_threshold=None, statement_timeout_ms=300)
        with pymem.Database(settings) as db:
            contract(db, "alice")
            contract_from_threads(db, tmp_path)
            assert prepare_thresholds(db) == {None}  # set explicitly: kept
            assert server_prepared(other) == []
            mem = Memory(agent_id="bot", db=db)
            mem.persist("Lives in Oslo", id="alice")
            assert_blocked_call_times_out(mem, dsn, tmp_path)
            assert other.execute("SHOW statement_timeout").fetchone()[0] == default
