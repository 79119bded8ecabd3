"""A project's retention policy for messages (issue 33, item 1): retention_configure /
retention_policy, applied by pymem.purge in bounded batches (messages older than
messages_max_age; a thread's messages beyond its newest messages_max_per_thread), from SQL,
Python and the command line. Real server; interleavings proven by lock waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest

import pymem
from conftest import wait_for_lock
from pymem.lifecycle import configure_retention, purge, retention_policy

PYMEM = Path(sys.executable).parent / "pymem"
NOW = datetime.now(timezone.utc)


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn)) as d:
        yield d


def add(c, user: str, n: int, *, thread: str = "default", days_ago: float = 0, project: str = "") -> None:
    """n messages of ``user`` created ``days_ago`` days ago (one second apart), with lexemes."""
    times = [NOW - timedelta(days=days_ago) + timedelta(seconds=i) for i in range(n)]
    c.execute("SELECT count(*) FROM pymem.messages_add_many(%s, %s, %s, %s, project_id => %s, created_ats => %s)",
              (user, thread, ["user"] * n, [f"{user} message {i}" for i in range(n)], project, times))


def seqs(c, user: str, thread: str = "default", project: str = "") -> list[int]:
    return [r[0] for r in c.execute("SELECT seq FROM pymem.messages WHERE project_id = %s AND user_id = %s "
                                    "AND thread_id = %s ORDER BY seq", (project, user, thread))]


def test_without_a_policy_purge_keeps_every_message(db, conn):
    add(conn, "alice", 5, days_ago=400)
    assert purge(db) == {"facts": 0, "store_entries": 0, "messages": 0, "changes": 0, "learning_usage": 0}
    assert seqs(conn, "alice") == [1, 2, 3, 4, 5]
    assert retention_policy(db) == pymem.lifecycle.RetentionPolicy(None, None, None)


def test_messages_older_than_the_max_age_go_with_their_vectors_and_lexemes(db, conn):
    add(conn, "alice", 4, days_ago=40)
    add(conn, "alice", 3, days_ago=1)
    add(conn, "bob", 2, days_ago=39, thread="other")  # younger than alice's oldest
    add(conn, "alice", 4, days_ago=40, project="acme")  # another project, no policy
    conn.execute("SELECT pymem.message_embeddings_put('alice', 'e', %s, %s, %s::vector[])",
                 (["default"] * 7, list(range(1, 8)), ["[1,0]"] * 7))
    policy = configure_retention(db, messages_max_age=timedelta(days=30))
    assert policy.messages_max_age == timedelta(days=30) and policy.messages_max_per_thread is None
    assert retention_policy(db) == policy
    assert purge(db, max_rows=4) == {"facts": 0, "store_entries": 0, "messages": 4, "changes": 0, "learning_usage": 0}  # the oldest first: alice's
    assert seqs(conn, "alice") == [5, 6, 7] and seqs(conn, "bob", "other") == [1, 2]
    assert purge(db, until_done=True)["messages"] == 2
    assert seqs(conn, "bob", "other") == [] and seqs(conn, "alice", project="acme") == [1, 2, 3, 4]
    for table in ("message_embeddings", "message_lexemes"):
        assert conn.execute(f"SELECT array_agg(seq ORDER BY seq) FROM pymem.{table} "
                            "WHERE project_id = '' AND user_id = 'alice'").fetchone()[0] == [5, 6, 7]
    # the thread and its numbering go on
    conn.execute("SELECT * FROM pymem.turn_record('alice', 'next', 'ok')")
    assert seqs(conn, "alice") == [5, 6, 7, 8, 9]


def test_a_thread_keeps_its_newest_messages_in_bounded_batches(db, conn):
    add(conn, "alice", 10)
    add(conn, "alice", 3, thread="short")
    add(conn, "bob", 7)
    configure_retention(db, messages_max_per_thread=4)
    assert purge(db, max_rows=5)["messages"] == 5  # alice's default thread is first
    assert seqs(conn, "alice") == [6, 7, 8, 9, 10]
    assert purge(db, max_rows=5)["messages"] == 4  # alice's 6th and bob's 3
    assert seqs(conn, "alice") == [7, 8, 9, 10] and seqs(conn, "bob") == [4, 5, 6, 7]
    assert seqs(conn, "alice", "short") == [1, 2, 3]
    assert conn.execute("SELECT retained_from, last_seq FROM pymem.threads WHERE user_id = 'alice' "
                        "AND thread_id = 'default'").fetchone() == (7, 10)
    assert purge(db)["messages"] == 0  # nothing over the cap: no thread is read again
    conn.execute("SELECT * FROM pymem.turn_record('alice', 'more', 'ok')")
    assert purge(db)["messages"] == 2 and seqs(conn, "alice") == [9, 10, 11, 12]
    # both limits at once, then none: nothing more goes
    configure_retention(db, messages_max_age=86400 * 365, messages_max_per_thread=2)
    assert purge(db, until_done=True)["messages"] == 2 + 1 + 2
    configure_retention(db)
    assert retention_policy(db).messages_max_per_thread is None
    conn.execute("SELECT * FROM pymem.turn_record('alice', 'again', 'ok')")
    assert purge(db)["messages"] == 0 and seqs(conn, "alice") == [11, 12, 13, 14]


def test_a_purge_waits_for_a_turn_in_flight_and_keeps_the_newest(db, dsn, conn):
    add(conn, "alice", 6)
    configure_retention(db, messages_max_per_thread=3)
    with psycopg.connect(dsn) as turn:
        pid = turn.info.backend_pid
        turn.execute("SELECT * FROM pymem.turn_record('alice', 'late question', 'late answer')")
        done = {}
        t = threading.Thread(target=lambda: done.update(r=purge(db)))
        t.start()
        wait_for_lock(dsn, blocked_by=pid)  # the purge waits for the thread row the turn holds
        turn.commit()
    t.join(30)
    assert done["r"]["messages"] == 5  # of 8 messages, the newest 3 stay: the turn's 2 among them
    assert seqs(conn, "alice") == [6, 7, 8]


INVALID = psycopg.errors.InvalidParameterValue  # 22023


@pytest.mark.parametrize("call, refused", [
    ("SELECT * FROM pymem.retention_configure(messages_max_age => '0 seconds')", INVALID),
    ("SELECT * FROM pymem.retention_configure(messages_max_age => '-1 day')", INVALID),
    ("SELECT * FROM pymem.retention_configure(messages_max_age => '101 years')", INVALID),
    # PostgreSQL 17+ has an infinite interval (refused by the check); before, the cast refuses it (22007)
    ("SELECT * FROM pymem.retention_configure(messages_max_age => 'infinity')", psycopg.errors.DataError),
    ("SELECT * FROM pymem.retention_configure(messages_max_per_thread => 0)", INVALID),
    ("SELECT * FROM pymem.retention_configure(project_id => '*', messages_max_per_thread => 5)", INVALID),
])
def test_absurd_policies_are_refused_and_change_nothing(conn, call, refused):
    conn.execute("SELECT * FROM pymem.retention_configure(messages_max_per_thread => 7)")
    with pytest.raises(refused):
        conn.execute(call)
    assert conn.execute("SELECT messages_max_age, messages_max_per_thread FROM pymem.retention_policy()").fetchone() \
        == (None, 7)


def test_python_refuses_bad_values_before_the_database(db):
    with pytest.raises(pymem.ValidationError):
        configure_retention(db, messages_max_age="30 days")
    with pytest.raises(pymem.ValidationError):
        configure_retention(db, messages_max_per_thread=2.5)
    with pytest.raises(pymem.ValidationError):
        configure_retention(db, messages_max_age=float("inf"))


def test_only_administrators_set_the_policy_and_each_project_has_its_own(db, dsn, as_role, conn):
    app = as_role("retention_app")
    conn.execute("GRANT pymem_app TO retention_app")
    configure_retention(db, "acme", messages_max_per_thread=1)
    with pymem.Database(pymem.Settings(dsn=app)) as app_db:
        with pytest.raises(pymem.PermissionError):
            configure_retention(app_db, messages_max_per_thread=1)
        assert retention_policy(app_db, "acme").messages_max_per_thread == 1  # the app reads it
        assert retention_policy(app_db).messages_max_per_thread is None
        add(conn, "alice", 3, project="acme")
        add(conn, "alice", 3)
        assert purge(app_db, "acme")["messages"] == 2 and purge(app_db)["messages"] == 0  # the app purges
    bound = as_role("retention_bound")
    conn.execute("GRANT pymem_app TO retention_bound")
    conn.execute("SELECT pymem.tenant_bind('retention_bound', 'other')")
    with psycopg.connect(bound, autocommit=True) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM pymem.retention_policy(project_id => 'acme')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM pymem.purge(project_id => 'acme')")


def test_the_command_line_shows_sets_and_removes_the_policy(dsn, conn):
    env = {**os.environ, "PYMEM_DSN": dsn}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(PYMEM), "retention", *args], capture_output=True, text=True, env=env, timeout=120)

    out = run("--project", "acme")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["messages_max_age_seconds"] is None
    out = run("--project", "acme", "--max-age", "90d", "--max-per-thread", "500")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["messages_max_age_seconds"] == 90 * 86400 and shown["messages_max_per_thread"] == 500
    assert conn.execute("SELECT messages_max_age FROM pymem.retention_policy('acme')").fetchone()[0] == timedelta(days=90)
    assert run("--project", "acme", "--keep-all").returncode == 0
    assert conn.execute("SELECT count(*) FROM pymem.retention").fetchone()[0] == 0
    out = run("--max-age", "soon")
    assert out.returncode == 2 and "90d" in out.stderr
    out = run("--keep-all", "--max-per-thread", "3")
    assert out.returncode == 1 and "--keep-all" in out.stderr


def test_the_cap_counts_from_the_oldest_message_left_after_the_age_policy(db, conn):
    """The age policy deletes a thread's oldest messages without moving retained_from; a cap purge
    afterwards starts from the thread's oldest message left, so a call that returns fewer than
    max_rows has nothing more to do."""
    add(conn, "alice", 6, days_ago=60)
    add(conn, "alice", 6)
    configure_retention(db, messages_max_age=timedelta(days=30))
    assert purge(db)["messages"] == 6
    configure_retention(db, messages_max_per_thread=2)
    assert [purge(db, max_rows=3)["messages"] for _ in range(3)] == [3, 1, 0]
    assert seqs(conn, "alice") == [11, 12]
    assert conn.execute("SELECT retained_from FROM pymem.threads WHERE user_id = 'alice'").fetchone()[0] == 11


def test_an_age_needs_its_index_which_only_an_age_builds(db, conn):
    """messages_created is not built by the migration (every message write would pay for it):
    the SQL refuses an age without it (55000, naming the statement), Python builds it first."""
    index = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('pymem.messages_created')"
    assert conn.execute(index).fetchone() is None
    configure_retention(db, messages_max_per_thread=5)  # a cap alone needs no index
    assert conn.execute(index).fetchone() is None
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as refused:
        conn.execute("SELECT * FROM pymem.retention_configure(messages_max_age => '30 days')")
    assert "CREATE INDEX CONCURRENTLY messages_created" in refused.value.diag.message_hint
    assert retention_policy(db).messages_max_per_thread == 5  # unchanged
    assert configure_retention(db, messages_max_age=3600).messages_max_age == timedelta(hours=1)
    assert conn.execute(index).fetchone() == (True,)
    configure_retention(db, messages_max_age=7200)  # there already: nothing more to build


@pytest.mark.parametrize("age", [-1, 0, timedelta(days=-3), timedelta(days=365 * 101)])
def test_a_refused_age_builds_no_index(db, conn, age):
    """Issue 58, finding 7: configure_retention(messages_max_age=-1) (or 0, or over 100 years)
    built the database-wide messages_created index before the SQL refused the age."""
    index = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('pymem.messages_created')"
    assert conn.execute(index).fetchone() is None
    with pytest.raises(pymem.ValidationError, match="messages_max_age"):
        configure_retention(db, messages_max_age=age)
    assert conn.execute(index).fetchone() is None
    assert retention_policy(db).messages_max_age is None

