"""Facts that expire (issue 33, item 1; migrations/0006_v0_2_0_memory.sql, sql/api/lifecycle.sql,
pymem/lifecycle.py): an expiry on every write path of facts, invisible at once to every read,
the content key freed, a history that expires with its newest version, and a purge in bounded
batches. "Time passes" two ways: a real one-second ttl, and (for the many cases that need an
expired row now) the owner moving a row's expires_at into the past, which is exactly the state
an expiry reaches when its time comes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory
from pymem.lifecycle import purge

VEC = "[" + ",".join(["0.5"] * 8) + "]"


def expire(c: psycopg.Connection, where: str) -> int:
    """Time passes for the rows ``where`` selects: their expiry is now in the past."""
    return c.execute(f"UPDATE pymem.facts SET expires_at = now() - interval '1 second' WHERE {where}").rowcount


def reads(c: psycopg.Connection, subject: str = "alice") -> dict[str, list]:
    """What every read of facts shows of ``subject`` (user scope, project '')."""
    return {
        "newest": c.execute("SELECT content FROM pymem.facts_newest('user', %s)", (subject,)).fetchall(),
        "scope": c.execute("SELECT content FROM pymem.facts_newest('user', '*')").fetchall(),
        "history": c.execute("SELECT content FROM pymem.fact_history('user', %s)", (subject,)).fetchall(),
        "search": c.execute("SELECT content FROM pymem.facts_search('user', %s, query_text => 'lisbon week tea')",
                            (subject,)).fetchall(),
        "vector": c.execute("SELECT content FROM pymem.facts_search('user', %s, %s::vector, 'e8')",
                            (subject, VEC)).fetchall(),
        "context": [f["content"] for f in c.execute(
            "SELECT pymem.context_read(%s, NULL, query_text => 'lisbon week')", (subject,)).fetchone()[0]["user_facts"]],
        "unembedded": c.execute("SELECT content FROM pymem.facts_unembedded('user', %s, 'e8')", (subject,)).fetchall(),
        "subjects": c.execute("SELECT scope_id, active, superseded FROM pymem.browse_subjects('')").fetchall(),
        "export": [f["content"] for f in c.execute("SELECT pymem.user_export(%s)", (subject,)).fetchone()[0]["facts"]]
        if c.execute("SELECT EXISTS (SELECT 1 FROM pymem.facts WHERE scope_id = %s)", (subject,)).fetchone()[0] else [],
    }


def test_an_expired_fact_is_invisible_to_every_read_at_once(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        (kept,) = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Likes tea')").fetchone()
        (gone,) = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Is in Lisbon this week', "
                            "write => pymem.fact_write(ttl => '7 days'))").fetchone()
        c.execute("SELECT pymem.fact_embeddings_put('user', 'alice', 'e8', ARRAY[%s, %s]::bigint[], ARRAY[%s, %s]::vector[])",
                  (kept, gone, VEC, VEC))
        before = reads(c)
        assert all(any("Lisbon" in str(r) for r in rows) for name, rows in before.items()
                   if name not in ("subjects", "unembedded")), before
        assert before["subjects"] == [("alice", 2, 0)]
        assert expire(c, f"id = {gone}") == 1
        after = reads(c)
        for name, rows in after.items():
            assert not any("Lisbon" in str(r) for r in rows), (name, rows)
        assert after["subjects"] == [("alice", 1, 0)]
        assert after["newest"] == [("Likes tea",)]
        assert c.execute("SELECT count(*) FROM pymem.fact_get(%s)", (gone,)).fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.fact_lookup('user', 'alice', 'Is in Lisbon this week')").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.NoDataFound):
            c.execute("SELECT * FROM pymem.fact_chain('user', 'alice', %s)", (gone,))
        # the row is still stored (no purge needed for correctness), until a purge
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE id = %s", (gone,)).fetchone()[0] == 1


def test_a_real_ttl_runs_out(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('user', 'alice', 'Is on a call', write => pymem.fact_write(ttl => '1 second'))")
        assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', 'alice')").fetchone()[0] == 1
        time.sleep(1.2)
        assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', 'alice')").fetchone()[0] == 0


def test_an_expired_fact_frees_its_content_for_a_new_add(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        (old, created) = c.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Is in Lisbon', "
                                   "write => pymem.fact_write(ttl => '1 day'), embedding => %s::vector, embedder => 'e8')", (VEC,)).fetchone()
        assert created
        expire(c, f"id = {old}")
        (new, created) = c.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Is in Lisbon', "
                                   "embedding => %s::vector, embedder => 'e8')", (VEC,)).fetchone()
        assert created and new != old
        # the expired row went with its vector; the new one never expires (no ttl given)
        assert c.execute("SELECT count(*) FROM pymem.fact_embeddings WHERE fact_id = %s", (old,)).fetchone()[0] == 0
        assert c.execute("SELECT id, expires_at FROM pymem.facts WHERE scope_id = 'alice'").fetchall() == [(new, None)]


def test_a_re_add_with_a_ttl_slides_the_expiry_and_one_without_keeps_it(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        (fid,) = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Likes tea', write => pymem.fact_write(ttl => '1 hour'))").fetchone()
        first = c.execute("SELECT expires_at FROM pymem.facts WHERE id = %s", (fid,)).fetchone()[0]
        assert c.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Likes tea')").fetchone() == (fid, False)
        assert c.execute("SELECT expires_at FROM pymem.facts WHERE id = %s", (fid,)).fetchone()[0] == first
        assert c.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Likes tea', write => pymem.fact_write(ttl => '2 days'))"
                         ).fetchone() == (fid, False)
        later = c.execute("SELECT expires_at FROM pymem.facts WHERE id = %s", (fid,)).fetchone()[0]
        assert later - first > timedelta(days=1)


def test_a_history_expires_with_its_newest_version(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        (v1,) = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Lives in Oslo')").fetchone()
        v2 = c.execute("SELECT id FROM pymem.fact_supersede('user', 'alice', 'Lives in Bergen', old_content => 'Lives in Oslo', "
                       "write => pymem.fact_write(ttl => '30 days'))").fetchone()[0]
        v3 = c.execute("SELECT id FROM pymem.fact_supersede('user', 'alice', 'Lives in Lisbon', id => %s)", (v2,)).fetchone()[0]
        rows = dict(c.execute("SELECT id, expires_at FROM pymem.facts WHERE scope_id = 'alice'").fetchall())
        # the new version inherits the expiry; the history takes it (no version outlives its successor)
        assert rows[v3] is not None and rows[v2] == rows[v3] and rows[v1] == rows[v3]
        assert [r[0] for r in c.execute("SELECT content FROM pymem.fact_history('user', 'alice')")] == \
            ["Lives in Lisbon", "Lives in Bergen", "Lives in Oslo"]
        expire(c, "scope_id = 'alice'")
        assert c.execute("SELECT count(*) FROM pymem.fact_history('user', 'alice')").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.NoDataFound, match="no fact"):
            c.execute("SELECT * FROM pymem.fact_supersede('user', 'alice', 'Lives in Porto', id => %s)", (v3,))
        with pytest.raises(psycopg.errors.NoDataFound, match="expired"):
            c.execute("SELECT * FROM pymem.fact_supersede('user', 'alice', 'Lives in Porto', old_content => 'Lives in Lisbon')")
        # a purge takes the whole history: no row left, so no pointer to a row that is gone
        assert c.execute("SELECT kind, purged FROM pymem.purge()").fetchall() == [("facts", 3), ("store_entries", 0), ("messages", 0), ("changes", 0), ("learning_usage", 0)]
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'alice'").fetchone()[0] == 0


def test_a_longer_expiry_for_the_new_version_leaves_the_history_its_own(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        (v1,) = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Lives in Oslo', write => pymem.fact_write(ttl => '1 day'))").fetchone()
        v2 = c.execute("SELECT id FROM pymem.fact_supersede('user', 'alice', 'Lives in Bergen', id => %s, "
                       "write => pymem.fact_write(expires_at => now() + interval '10 days'))", (v1,)).fetchone()[0]
        rows = dict(c.execute("SELECT id, expires_at FROM pymem.facts WHERE scope_id = 'alice'").fetchall())
        assert rows[v1] < rows[v2]
        expire(c, f"id = {v1}")  # the old version's day is over; the fact goes on
        assert [r[0] for r in c.execute("SELECT content FROM pymem.fact_history('user', 'alice')")] == ["Lives in Bergen"]
        assert c.execute("SELECT kind, purged FROM pymem.purge()").fetchall() == [("facts", 1), ("store_entries", 0), ("messages", 0), ("changes", 0), ("learning_usage", 0)]
        assert c.execute("SELECT id, superseded_by FROM pymem.facts WHERE scope_id = 'alice'").fetchall() == [(v2, None)]


def test_bulk_and_learned_adds_take_and_free_expiries(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("SELECT ord, id, created FROM pymem.facts_add_many('user', ARRAY['alice', 'bob'], "
                         "ARRAY['Likes tea', 'Likes tea'], write => pymem.fact_write(ttl => '1 hour'))").fetchall()
        assert [r[2] for r in rows] == [True, True]
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE expires_at > now() + interval '59 minutes'"
                         ).fetchone()[0] == 2
        expire(c, "scope_id = 'alice'")
        again = c.execute("SELECT ord, id, created FROM pymem.facts_add_many('user', ARRAY['alice', 'bob'], "
                          "ARRAY['Likes tea', 'Likes tea'])").fetchall()
        assert [r[2] for r in again] == [True, False] and again[1][1] == rows[1][1]
        # a turn re-learns a fact whose expired twin still holds its key
        c.execute("SELECT pymem.fact_add('user', 'carol', 'Plays chess', write => pymem.fact_write(source => 'learned'))")
        expire(c, "scope_id = 'carol'")
        (learned,) = c.execute("SELECT learned_ids FROM pymem.turn_record('carol', 'I play chess', 'Nice', "
                               "learned => ARRAY['Plays chess'])").fetchone()
        assert c.execute("SELECT id, content FROM pymem.facts_newest('user', 'carol')").fetchall() == \
            [(learned[0], "Plays chess")]
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'carol'").fetchone()[0] == 1


@pytest.mark.parametrize("arguments, match", [
    ("ttl => '-1 day'", "ttl must be a positive interval"),
    ("ttl => '0'", "ttl must be a positive interval"),
    ("ttl => '101 years'", "at most 100 years"),
    ("expires_at => now() - interval '1 minute'", "not in the future"),
    ("expires_at => 'infinity'", "finite time within 100 years"),
    ("expires_at => now() + interval '1 day', ttl => '1 day'", "not both"),
])
def test_absurd_expiries_are_refused_and_write_nothing(dsn, arguments, match):
    with psycopg.connect(dsn, autocommit=True) as c:
        for call in (f"SELECT * FROM pymem.fact_add('user', 'alice', 'x', write => pymem.fact_write({arguments}))",
                     f"SELECT * FROM pymem.facts_add_many('user', ARRAY['alice'], ARRAY['x'], write => pymem.fact_write({arguments}))"):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
                c.execute(call)
        c.execute("SELECT pymem.fact_add('user', 'alice', 'y')")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
            c.execute(f"SELECT * FROM pymem.fact_supersede('user', 'alice', 'z', old_content => 'y', write => pymem.fact_write({arguments}))")
        assert c.execute("SELECT content FROM pymem.facts").fetchall() == [("y",)]


def test_purge_works_in_bounded_batches_and_only_on_what_expired(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.facts_add_many('user', array_fill('alice'::text, ARRAY[25]), "
                  "ARRAY(SELECT 'fact ' || i FROM generate_series(1, 25) AS i), write => pymem.fact_write(ttl => '1 day'))")
        c.execute("SELECT pymem.fact_add('user', 'alice', 'forever')")
        c.execute("SELECT pymem.fact_add('user', 'alice', 'in another project', 'p2', write => pymem.fact_write(ttl => '1 day'))")
        assert c.execute("SELECT * FROM pymem.purge(max_rows => 10)").fetchall() == \
            [("facts", 0), ("store_entries", 0), ("messages", 0), ("changes", 0), ("learning_usage", 0)]  # nothing expired yet
        expire(c, "content LIKE 'fact %' OR project_id = 'p2'")
        assert [c.execute("SELECT purged FROM pymem.purge(max_rows => 10)").fetchone()[0] for _ in range(4)] == [10, 10, 5, 0]
        assert c.execute("SELECT project_id, content FROM pymem.facts ORDER BY 1").fetchall() == \
            [("", "forever"), ("p2", "in another project")]  # each project purges its own
        assert c.execute("SELECT * FROM pymem.purge('p2')").fetchall() == [("facts", 1), ("store_entries", 0), ("messages", 0), ("changes", 0), ("learning_usage", 0)]
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("SELECT * FROM pymem.purge(max_rows => -1)")


def test_a_purge_racing_a_re_add_keeps_the_fact_the_re_add_renewed(dsn):
    """A purge and a re-add with a ttl, interleaved: the re-add holds the row when the purge
    comes to delete it; the purge waits, sees the new expiry and keeps the fact."""
    with psycopg.connect(dsn, autocommit=True) as c:
        (fid,) = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Likes tea', write => pymem.fact_write(ttl => '1 hour'))").fetchone()
        expire(c, f"id = {fid}")
    writer = psycopg.connect(dsn)
    try:
        # the row is expired: the re-add frees it and inserts a new one; before it commits,
        # the purge (which waits for the writer's delete) must not remove the new row
        got = writer.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Likes tea', write => pymem.fact_write(ttl => '1 hour'))").fetchone()
        result: list = []
        t = threading.Thread(target=lambda: result.append(
            psycopg.connect(dsn, autocommit=True).execute("SELECT purged FROM pymem.purge()").fetchone()[0]))
        t.start()
        time.sleep(0.5)
        writer.commit()
        t.join(10)
        assert result == [0], result
    finally:
        writer.close()
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT id FROM pymem.facts_newest('user', 'alice')").fetchall() == [(got[0],)]
        assert got[1] is True and got[0] != fid


# --- Python -------------------------------------------------------------------------------


@pytest.fixture
def mem(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as db:
        yield Memory(db=db, user_id="alice", embedder=HashEmbedder())


def test_memory_persist_update_and_purge_with_expiries(mem, dsn):
    soon = mem.persist("Is in Lisbon this week", ttl=timedelta(days=7))
    assert mem.persist("Is in Lisbon this week") == soon  # the embedded fast path: no expiry change
    fact = next(f for f in mem.retrieve() if f.id == soon)
    assert fact.expires_at is not None and fact.expires_at - datetime.now(timezone.utc) > timedelta(days=6)
    later = datetime.now(timezone.utc) + timedelta(days=30)
    assert mem.persist("Is in Lisbon this week", expires_at=later) == soon  # with an expiry: fact_add runs
    assert next(f for f in mem.retrieve() if f.id == soon).expires_at == later
    ids = mem.persist_many(["Likes tea", "Likes jazz"], ttl=3600)
    newer = mem.update("Is in Porto this week", old="Is in Lisbon this week")
    assert next(f for f in mem.retrieve() if f.id == newer).expires_at == later  # inherited
    assert [f.expires_at for f in mem.history(fact_id=newer)] == [later, later]  # the history carries it
    with psycopg.connect(dsn, autocommit=True) as c:
        expire(c, f"id IN ({int(ids[0])}, {int(ids[1])})")
    assert {f.content for f in mem.retrieve()} == {"Is in Porto this week"}
    assert purge(mem.db, until_done=True, max_rows=1) == {"facts": 2, "store_entries": 0, "messages": 0, "changes": 0, "learning_usage": 0}
    assert purge(mem.db) == {"facts": 0, "store_entries": 0, "messages": 0, "changes": 0, "learning_usage": 0}


@pytest.mark.parametrize("kwargs, match", [
    ({"ttl": -5}, r"ttl must be a positive number of seconds \(got -5\)"),  # in seconds, as given (issue 59)
    ({"ttl": 0}, r"ttl must be a positive number of seconds \(got 0\)"),
    ({"ttl": timedelta(seconds=-1)}, "ttl must be a positive interval"),  # the SQL's check, as a ValidationError
    ({"ttl": float("nan")}, "finite number of seconds"),
    ({"ttl": True}, "number of seconds or a timedelta"),
    ({"ttl": "1 day"}, "number of seconds or a timedelta"),
    ({"ttl": 1e30}, "at most 100 years"),
    ({"ttl": 10, "expires_at": datetime.now(timezone.utc)}, "not both"),
    ({"expires_at": datetime(2030, 1, 1)}, "timezone-aware"),
    ({"ttl": 200 * 365 * 86400}, "at most 100 years"),
    ({"expires_at": datetime(2000, 1, 1, tzinfo=timezone.utc)}, "not in the future"),
])
def test_memory_refuses_absurd_expiries_and_writes_nothing(mem, dsn, kwargs, match):
    with pytest.raises(pymem.ValidationError, match=match):
        mem.persist("x", **kwargs)
    with pytest.raises(pymem.ValidationError, match=match):
        mem.persist_many(["x"], **kwargs)
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == 0


def test_pymem_purge_on_the_command_line(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.facts_add_many('user', ARRAY['a', 'b', 'c'], ARRAY['x', 'y', 'z'], project_id => 'acme', "
                  "write => pymem.fact_write(ttl => '1 day'))")
        expire(c, "true")
    env = {"PYMEM_DSN": dsn, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "pymem.cli", "purge", "--project", "acme", "--max-rows", "2"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"facts": 3, "store_entries": 0, "messages": 0, "changes": 0, "learning_usage": 0}  # batches of 2 until one is not full
    bad = subprocess.run([sys.executable, "-m", "pymem.cli", "purge", "--max-rows", "20000"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1 and "max_rows" in bad.stderr


def test_the_view_and_the_reads_of_history_say_not_expired_the_same_way(dsn):
    """pymem.active_facts spells "not expired" out (a role with SELECT reads it with its own
    rights, and may execute no internal function); every other read calls pymem._fact_live or
    pymem._fact_kept (head and pymem._unexpired of the row's expiry). Both must say the same."""
    with psycopg.connect(dsn) as c:
        live = c.execute("SELECT prosrc FROM pg_proc WHERE oid = 'pymem._unexpired'::regproc").fetchone()[0]
        kept = c.execute("SELECT prosrc FROM pg_proc WHERE oid = 'pymem._fact_kept'::regproc").fetchone()[0]
        assert "pymem._unexpired(f.expires_at, at)" in kept
        head = c.execute("SELECT prosrc FROM pg_proc WHERE oid = 'pymem._fact_head'::regproc").fetchone()[0]
        view = c.execute("SELECT pg_get_viewdef('pymem.active_facts'::regclass)").fetchone()[0]
    assert "expires_at IS NULL OR expires_at OPERATOR(pg_catalog.>) at" in live  # called with now() by every read
    assert "((expires_at IS NULL) OR (expires_at > now()))" in view.replace("f.", ""), view  # PostgreSQL 15 writes f.
    assert "superseded_by IS NULL" in head and "superseded_by IS NULL" in view, view


def test_the_states_of_a_fact_take_its_row_and_inline(dsn):
    """pymem._fact_live(f, at) and pymem._fact_kept(f, at) take the fact's row (so a new condition
    is written in 00_common.sql only) and still inline: the plan reads the columns, as if the
    condition were written out, with no call left (a call would keep the planner from matching
    the partial indexes' "head" predicate). The same for a row of pymem.shared_facts."""
    with psycopg.connect(dsn) as c:
        for table in ("facts", "shared_facts"):
            plan = "\n".join(r[0] for r in c.execute(
                f"""EXPLAIN (VERBOSE, COSTS OFF) SELECT f.id FROM pymem.{table} AS f
                     WHERE f.project_id = '' AND f.scope = 'user' AND f.scope_id = 'u1'
                       AND pymem._fact_live(f, now()) AND NOT pymem._fact_kept(f, now() + interval '1 day')"""))
            assert "_fact_live" not in plan and "_fact_kept" not in plan and "_unexpired" not in plan, plan
            heads = [name for (name,) in c.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = 'pymem' AND tablename = %s"
                " AND indexdef ~ 'WHERE \\(+superseded_by IS NULL\\)+$'", (table,))]
            assert heads, table
            # "head" matched a partial index's predicate (so it is no filter), or is a filter
            assert "superseded_by IS NULL" in plan or any(f"using {h} " in plan for h in heads), plan
            assert "expires_at IS NULL" in plan and "expires_at <= (now()" in plan, plan
