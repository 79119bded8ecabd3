"""The change feed (issue 34, item 2): every write appends to pymem.changes in its transaction (by
key, no content); changes_since publishes positions in an order no later commit can undercut and
reads after a position, so catch-up loses nothing and repeats nothing; notifications wake
listeners; a bound role reads only its tenant. Against the real server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory
from pymem.changes import awatch, changes_since, channel, position, watch
from pymem.lifecycle import purge


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=10)) as d:
        yield d


@pytest.fixture(autouse=True)
def feed_on(dsn):
    """The feed is off until an administrator turns it on (this test's own database only)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT pymem.change_feed_enabled()").fetchone()[0] is False
        assert c.execute("SELECT pymem.change_feed_configure(enabled => true)").fetchone()[0] is True


def test_off_by_default_writes_append_nothing_and_watch_says_so(db, dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT pymem.change_feed_configure(enabled => false)").fetchone()[0] is False
    Memory(db=db, agent_id="bot", project_id="off").persist("a fact", user="al")
    assert changes_since(db, "off") == [] and position(db, "off") == 0
    with pytest.raises(pymem.ConfigError, match="the change feed is off"):
        next(watch(db, "off"))
    assert pymem.changes.configure(db, enabled=True) is True and pymem.changes.enabled(db)
    Memory(db=db, agent_id="bot", project_id="off").persist("another fact", user="al")
    assert [c.keys["ids"] for c in changes_since(db, "off")] == [[2]]


def test_every_kind_of_write_appears_in_order_by_key_without_content(db, dsn):
    mem = Memory(db=db, agent_id="bot", project_id="cf", embedder=HashEmbedder(), summarizer=lambda p, m, n: "sum",
                 summarize_every=2, keep_last=0)
    fid = mem.persist("Secret: likes tea", user="ann")
    mem.update("Secret: likes coffee", fact_id=fid, user="ann")
    mem.record("Secret question", "Secret answer", user="ann")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('notes', 'cf')")
        c.execute("SELECT pymem.store_write('notes', 'a.md', 'Secret text', project_id => 'cf')")
    mem.forget_conversation(user="ann")
    seen = changes_since(db, "cf")
    assert [c.position for c in seen] == list(range(1, len(seen) + 1))
    got = [(c.kind, c.op, c.subject) for c in seen]
    assert got[:3] == [("fact", "add", "user:ann"), ("fact", "add", "user:ann"), ("fact", "update", "user:ann")]
    assert ("message", "add", "ann") in got and ("summary", "update", "ann") in got
    assert ("store_entry", "add", "notes") in got and ("message", "delete", "ann") in got
    deleted = next(c for c in seen if c.kind == "message" and c.op == "delete")
    assert deleted.keys == {"thread_id": "default", "from_seq": 1, "to_seq": 2} and deleted.rows == 2
    assert "Secret" not in json.dumps([c.keys for c in seen])  # keys, never content
    assert changes_since(db, "cf", after=seen[-1].position) == []
    assert position(db, "cf") == seen[-1].position
    assert changes_since(db, "cf", after=2, max_changes=1)[0].position == 3


def test_a_change_gets_its_position_at_commit_in_commit_order_and_no_late_commit_goes_below_a_read(db, dsn):
    """A starts writing first and commits last. B's change is readable as soon as B commits (A
    holds nothing back); A's change, committed after a reader went past B's, comes after it: a
    reader that follows from the last position it saw gets it, once."""
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        a.execute("SELECT pymem.fact_add('user', 'a', 'from A', 'cf2')")  # A's xid is the older
        b.execute("SELECT pymem.fact_add('user', 'b', 'from B', 'cf2')")
        b.commit()
        first = changes_since(db, "cf2")
        assert [(c.position, c.subject) for c in first] == [(1, "user:b")]  # A (older, open) holds nothing back
        a.commit()
    assert [(c.position, c.subject) for c in changes_since(db, "cf2", after=1)] == [(2, "user:a")]
    assert [c.position for c in changes_since(db, "cf2")] == [1, 2]
    with psycopg.connect(dsn) as c:  # publishing inside a transaction that has written would misorder
        c.execute("SELECT pymem.fact_add('user', 'c', 'x', 'cf2')")
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM pymem.changes_since('cf2')")
        assert e.value.sqlstate == "25001"
    with psycopg.connect(dsn, autocommit=True) as c:
        for bad in ("SELECT * FROM pymem.changes_since('cf2', after => -1)",
                    "SELECT * FROM pymem.changes_since('cf2', max_changes => 20000)",
                    "SELECT * FROM pymem.changes_since('*')"):
            with pytest.raises(psycopg.Error) as e:
                c.execute(bad)
            assert e.value.sqlstate == "22023", bad


def test_8_writers_and_2_readers_one_killed_and_restarted_see_every_change_once_in_order(db, dsn, tmp_path):
    env = {**os.environ, "PYMEM_DSN": dsn, "PYMEM_PROJECT_ID": "cf3"}
    stop = threading.Event()
    collected: list[int] = []

    def reader() -> None:  # reader 1: in this process, through watch()
        for c in watch(db, "cf3", after=0, poll_seconds=0.2, stop=stop):
            collected.append(c.position)

    def writer(w: int) -> None:
        mem = Memory(db=db, agent_id="bot", project_id="cf3")
        for i in range(15):
            if i % 3 == 0:
                mem.persist(f"fact {i} of writer {w}", user=f"w{w}")
            else:
                mem.record(f"turn {i}", "ok", user=f"w{w}")

    # reader 2: `pymem watch` in a process of its own, killed mid-stream, then restarted after the
    # last position it printed
    first = subprocess.Popen([sys.executable, "-m", "pymem.cli", "watch", "--since", "0", "--poll", "0.2"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    t_reader = threading.Thread(target=reader)
    t_reader.start()
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in writers:
        t.start()
    printed: list[int] = []
    while len(printed) < 20:
        printed.append(json.loads(first.stdout.readline())["position"])
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    for t in writers:
        t.join(120)
    total = len(changes_since(db, "cf3", after=0, max_changes=10000))
    assert total == 8 * (5 + 10)  # a row per statement: 5 facts, and each of 10 turns writes its two messages in one
    second = subprocess.run([sys.executable, "-m", "pymem.cli", "watch", "--since", str(printed[-1]), "--once"],
                            env=env, capture_output=True, text=True, timeout=60)
    printed += [json.loads(line)["position"] for line in second.stdout.splitlines()]
    deadline = time.monotonic() + 30
    while len(collected) < total and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    t_reader.join(10)
    assert printed == list(range(1, total + 1))  # killed and restarted: every change once, in order
    assert collected == list(range(1, total + 1))


def test_a_notification_wakes_a_listener_and_names_no_tenant(db, dsn):
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{channel(db, "cf4")}"')
        Memory(db=db, agent_id="bot", project_id="cf4").persist("a fact", user="bo")
        notes = list(listener.notifies(timeout=5, stop_after=1))
    assert [json.loads(n.payload) for n in notes] == [{"kind": "fact"}]


def test_a_bound_role_reads_only_its_tenants_feed(dsn, as_role):
    role = as_role("pymem_feed_acme")
    reader = as_role("pymem_feed_reader")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_feed_acme")
        c.execute("GRANT pymem_reader TO pymem_feed_reader")
        c.execute("SELECT pymem.tenant_bind('pymem_feed_acme', 'acme')")
        for project in ("acme", "globex"):
            c.execute("SELECT pymem.fact_add('user', %s, 'x', %s)", (f"user-of-{project}", project))
    with pymem.Database(pymem.Settings(dsn=role)) as bound:
        assert [c.subject for c in changes_since(bound, "acme")] == ["user:user-of-acme"]
        with pytest.raises(pymem.PermissionError):
            changes_since(bound, "globex")
        with psycopg.connect(role, autocommit=True) as c:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("SELECT * FROM pymem.changes")
    with psycopg.connect(reader, autocommit=True) as c:
        assert c.execute("SELECT pymem.change_position('acme')").fetchone()[0] == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # it publishes: a write
            c.execute("SELECT * FROM pymem.changes_since('acme')")


def test_an_erasure_leaves_its_receipt_in_the_feed_and_never_the_users_id(db, dsn):
    mem = Memory(db=db, agent_id="bot", project_id="cf5")
    mem.persist("x", user="zed")
    mem.record("hello there", "hi", user="zed")
    receipt = mem.forget_user(user="zed")
    assert receipt.counts["changes"] >= 3
    seen = changes_since(db, "cf5")
    assert [(c.kind, c.subject, c.keys) for c in seen] == [("erasure", "", {"ids": [receipt.id]})]
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pymem.changes WHERE project_id = 'cf5' AND changes::text LIKE '%zed%'"
                         ).fetchone()[0] == 0


def test_awatch_catches_up_then_follows(dsn):
    async def main() -> list[int]:
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:
            mem = pymem.AsyncMemory(db=adb, agent_id="bot", project_id="cf6")
            await mem.persist("one", user="al")
            stop = asyncio.Event()
            got: list[int] = []

            async def follow() -> None:
                async for c in awatch(adb, "cf6", after=0, poll_seconds=0.2, stop=stop):
                    got.append(c.position)
                    if len(got) == 2:
                        stop.set()

            task = asyncio.create_task(follow())
            await asyncio.sleep(0.3)
            await mem.persist("two", user="al")
            await asyncio.wait_for(task, 20)
            return got

    assert asyncio.run(main()) == [1, 2]


def test_the_feed_follows_the_projects_retention_policy(db, dsn):
    mem = Memory(db=db, agent_id="bot", project_id="cf7")
    for i in range(5):
        mem.persist(f"fact {i}", user="ro")
    seen = changes_since(db, "cf7")
    assert len(seen) == 5
    with psycopg.connect(dsn, autocommit=True) as c:  # three of them are 40 days old
        c.execute("UPDATE pymem.changes SET created_at = now() - interval '40 days' "
                  "WHERE project_id = 'cf7' AND position <= 3")
        c.execute("CREATE INDEX IF NOT EXISTS messages_created ON pymem.messages (project_id, created_at)")
        c.execute("SELECT * FROM pymem.retention_configure(project_id => 'cf7', messages_max_age => '30 days')")
    assert purge(db, "cf7", max_rows=2, until_done=True)["changes"] == 3
    assert [c.position for c in changes_since(db, "cf7")] == [4, 5]
    assert [c.position for c in changes_since(db, "cf7", after=3)] == [4, 5]  # a reader past them loses nothing


def test_an_open_transaction_of_another_role_or_project_stalls_no_feed(db, dsn, as_role):
    """Issue 58, finding 1: any login holding a transaction id open (``BEGIN; SELECT
    pg_current_xact_id();``), with no pymem privilege, stalled every project's feed (changes were
    published only below the server's oldest running transaction). So did a writer of another
    project. Now neither holds back a change; a late writer of the same project is not skipped."""
    stranger = as_role("pymem_feed_stranger")  # no pymem role at all
    mem = Memory(db=db, agent_id="bot", project_id="cf8")
    with psycopg.connect(stranger) as s, psycopg.connect(dsn) as other, psycopg.connect(dsn) as late:
        s.execute("SELECT pg_current_xact_id()")  # idle in transaction, with an xid
        other.execute("SELECT pymem.fact_add('user', 'o', 'other project', 'cf8-other')")  # open
        late.execute("SELECT pymem.fact_add('user', 'late', 'same project, commits late', 'cf8')")  # open
        mem.persist("one", user="al")
        mem.record("hello", "hi", user="al")
        seen = changes_since(db, "cf8")
        assert [(c.position, c.kind) for c in seen] == [(1, "fact"), (2, "message")]
        late.commit()
        other.commit()
        mem.persist("two", user="al")
        after = changes_since(db, "cf8", after=2)
        assert [(c.position, c.subject) for c in after] == [(3, "user:late"), (4, "user:al")]
        assert [c.position for c in changes_since(db, "cf8-other")] == [1]
        s.rollback()


def test_only_the_projects_own_roles_learn_its_channel_and_nobody_else_hears_its_writes(db, dsn, as_role):
    """Issue 58, finding 2: the channel was 'pymem_changes_' + md5(project id), and LISTEN checks
    no privilege: a role bound to another project, or with no pymem role, listened and learned
    when, how often and what kind of writes the project made. Now it is a random name, handed out
    by pymem.change_channel to the project's own roles only."""
    import hashlib

    acme = as_role("pymem_feed_acme2")
    other = as_role("pymem_feed_globex2")
    stranger = as_role("pymem_feed_stranger2")
    reader = as_role("pymem_feed_reader2")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_feed_acme2, pymem_feed_globex2")
        c.execute("GRANT pymem_reader TO pymem_feed_reader2")
        c.execute("SELECT pymem.tenant_bind('pymem_feed_acme2', 'acme2')")
        c.execute("SELECT pymem.tenant_bind('pymem_feed_globex2', 'globex2')")
    with pymem.Database(pymem.Settings(dsn=acme)) as bound:
        name = channel(bound, "acme2")
        assert name == channel(bound, "acme2") == channel(db, "acme2")  # kept: one name per project
    assert name.startswith("pymem_changes_") and len(name) == len("pymem_changes_") + 32
    assert name != "pymem_changes_" + hashlib.md5(b"acme2").hexdigest()  # nothing anyone can compute
    assert channel(db, "globex2") != name
    for login in (other, stranger, reader):
        with psycopg.connect(login, autocommit=True) as c:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("SELECT pymem.change_channel('acme2')")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("SELECT * FROM pymem.change_channels")
    with psycopg.connect(stranger, autocommit=True) as eavesdropper, \
            psycopg.connect(acme, autocommit=True) as listener:
        eavesdropper.execute('LISTEN "pymem_changes_%s"' % hashlib.md5(b"acme2").hexdigest())  # the old name
        listener.execute(f'LISTEN "{name}"')
        Memory(db=db, agent_id="bot", project_id="acme2").persist("a fact", user="bo")
        assert [json.loads(n.payload) for n in listener.notifies(timeout=5, stop_after=1)] == [{"kind": "fact"}]
        assert list(eavesdropper.notifies(timeout=0.5, stop_after=1)) == []



def test_an_erasure_racing_the_publication_of_rows_from_before_0048_leaves_the_feed_working(db, dsn):
    """Found by bench/soak.py: changes_since publishes the rows written before 0048 (no position
    yet) by numbering them from one snapshot; a user_forget that deletes one of them while the
    publisher waits on its lock made the UPDATE skip it, and a counter advanced by the rows updated
    fell behind the highest position given: every later changes_since of the project raised
    23505 for good (and since 0048 the two deadlocked, the erasure taking the project's position
    row at its commit). The counter follows the highest position given, and user_forget takes the
    position row before the feed's rows, as a publisher does."""
    mem = Memory(db=db, agent_id="bot", project_id="cf9")
    mem.record("hello", "hi", user="x")
    mem.record("hello", "hi", user="y")
    with psycopg.connect(dsn, autocommit=True) as c:  # as a database from before 0048 left them
        c.execute("SELECT set_config('pymem.tenant', 'p:cf9', false)")
        c.execute("UPDATE pymem.changes SET position = NULL WHERE project_id = 'cf9'")
        c.execute("UPDATE pymem.change_positions SET position = 0 WHERE project_id = 'cf9'")
    eraser = psycopg.connect(dsn)
    try:
        eraser.execute("SELECT * FROM pymem.user_forget(user_id => 'x', project_id => 'cf9')")  # holds x's rows
        out: dict[str, object] = {}
        publisher = threading.Thread(target=lambda: out.update(first=changes_since(db, "cf9")))
        publisher.start()
        deadline = time.monotonic() + 30
        with psycopg.connect(dsn, autocommit=True) as c:  # the publisher waits on x's row
            while not c.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                "AND query LIKE '%changes_since%'").fetchone()[0]:
                assert time.monotonic() < deadline, "the publisher never waited on the erased rows"
                time.sleep(0.05)
        eraser.commit()
    finally:
        eraser.close()
    publisher.join(30)
    first = out["first"]
    # the erasure's receipt (its position given at its commit) and y's turn; x's rows went with x
    assert [c.subject for c in first] == ["", "y"]
    mem.record("again", "ok", user="y")
    later = changes_since(db, "cf9", after=first[-1].position)  # raised 23505 before the fix
    assert [c.subject for c in later] == ["y"] and later[0].position > first[-1].position
    assert position(db, "cf9") == later[-1].position
