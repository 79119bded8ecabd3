"""Keyed-store entries and items that expire (issue 33, item 1; migrations/0007_v0_2_0_operations.sql,
sql/api/stores.sql, stores_items.sql, lifecycle.sql; pymem/stores.py; the LangGraph adapter's
TTL): an expiry on store_write and store_item_put, invisible at once to every read, the path
freed for the next write, LangGraph's refresh of a ttl on read, and a purge in bounded batches.
"Time passes" two ways, as in tests/facts/test_fact_expiry.py: a real one-second ttl, and the
owner moving a row's expires_at into the past (the state an expiry reaches when its time comes)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from langgraph.store.base import GetOp, PutOp, SearchOp

import pymem
from conftest import wait_for_lock
from pymem import MUST_NOT_EXIST, MemoryStore
from pymem.integrations.langgraph import PymemStore
from pymem.lifecycle import purge

VEC = "[" + ",".join(["0.5"] * 8) + "]"


def expire(c: psycopg.Connection, where: str) -> int:
    """Time passes for the entries ``where`` selects: their expiry is now in the past."""
    return c.execute(f"UPDATE pymem.store_entries SET expires_at = now() - interval '1 second' WHERE {where}").rowcount


def reads(c: psycopg.Connection) -> dict[str, list]:
    """What every read of store 's' shows (project '')."""
    return {
        "read": c.execute("SELECT content FROM pymem.store_read('s', 'notes/gone.md')").fetchall(),
        "meta": c.execute("SELECT sha FROM pymem.store_meta('s', 'notes/gone.md')").fetchall(),
        "list": c.execute("SELECT path FROM pymem.store_list('s')").fetchall(),
        "item": c.execute("SELECT value FROM pymem.store_item_get('s', '{users,alice}', 'trip')").fetchall(),
        "search": c.execute("SELECT key FROM pymem.store_items_search('s')").fetchall(),
        "filtered": c.execute("SELECT key FROM pymem.store_items_search('s', filter => '{\"city\": \"Lisbon\"}')").fetchall(),
        "vector": c.execute("SELECT key FROM pymem.store_items_search('s', query_vector => %s::vector, embedder => 'e8')",
                            (VEC,)).fetchall(),
        "namespaces": c.execute("SELECT namespace FROM pymem.store_namespaces('s')").fetchall(),
        "browse": c.execute("SELECT entries FROM pymem.browse_stores('')").fetchall(),
    }


def setup_store(c: psycopg.Connection) -> None:
    c.execute("SELECT pymem.store_open('s')")
    c.execute("SELECT pymem.store_write('s', 'notes/keep.md', 'kept')")
    c.execute("SELECT pymem.store_write('s', 'notes/gone.md', 'Lisbon this week', ttl => '7 days')")
    c.execute("SELECT pymem.store_item_put('s', '{users,alice}', 'tea', '{\"likes\": \"tea\"}')")
    c.execute("SELECT pymem.store_item_put('s', '{users,alice}', 'trip', '{\"city\": \"Lisbon\"}', 'e8', "
              "'{$}', ARRAY[%s::vector], ttl => '7 days')", (VEC,))
    c.execute("SELECT pymem.store_item_put('s', '{trips}', 'lisbon', '{\"city\": \"Lisbon\"}', "
              "expires_at => now() + interval '7 days')")


def test_an_expired_entry_or_item_is_invisible_to_every_read_at_once(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        setup_store(c)
        before = reads(c)
        assert before["read"] == [("Lisbon this week",)] and before["meta"] and before["item"]
        assert ("trip",) in before["search"] and ("trip",) in before["filtered"] and ("trip",) in before["vector"]
        assert sorted(before["namespaces"]) == [(["trips"],), (["users", "alice"],)]
        assert before["browse"] == [(5,)]
        assert expire(c, "path IN ('notes/gone.md', 'users/alice/=trip', 'trips/=lisbon')") == 3
        after = reads(c)
        assert after == {"read": [], "meta": [], "list": [("notes/keep.md",), ("users/alice/=tea",)], "item": [],
                         "search": [("tea",)], "filtered": [], "vector": [("tea",)],
                         "namespaces": [(["users", "alice"],)], "browse": [(2,)]}
        # the rows are still stored (no purge needed for correctness), until a purge
        assert c.execute("SELECT count(*) FROM pymem.store_entries WHERE expires_at < now()").fetchone()[0] == 3


def test_a_real_ttl_runs_out(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('s')")
        c.execute("SELECT pymem.store_write('s', 'call.md', 'on a call', ttl => '1 second')")
        assert c.execute("SELECT count(*) FROM pymem.store_read('s', 'call.md')").fetchone()[0] == 1
        time.sleep(1.2)
        assert c.execute("SELECT count(*) FROM pymem.store_read('s', 'call.md')").fetchone()[0] == 0


def test_meta_says_when_and_a_write_without_an_expiry_makes_the_entry_non_expiring(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('s')")
        c.execute("SELECT pymem.store_write('s', 'a.md', 'one', ttl => '1 hour')")
        (at, now) = c.execute("SELECT expires_at, now() FROM pymem.store_meta('s', 'a.md')").fetchone()
        assert timedelta(minutes=59) < at - now <= timedelta(hours=1)
        assert c.execute("SELECT expires_at FROM pymem.store_read('s', 'a.md')").fetchone()[0] == at
        assert c.execute("SELECT expires_at FROM pymem.store_list('s')").fetchone()[0] == at
        c.execute("SELECT pymem.store_write('s', 'a.md', 'two')")  # a write replaces the entry, expiry included
        assert c.execute("SELECT expires_at FROM pymem.store_meta('s', 'a.md')").fetchone()[0] is None
        assert c.execute("SELECT expires_at, ttl FROM pymem.store_entries WHERE path = 'a.md'").fetchone() == (None, None)


def test_an_expired_path_is_free_for_the_next_write(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('s', keep_versions => true)")
        (old,) = c.execute("SELECT pymem.store_write('s', 'a.md', 'old', ttl => '1 hour')").fetchone()
        c.execute("SELECT pymem.store_item_put('s', '{n}', 'k', '{\"v\": 1}', 'e8', '{$}', ARRAY[%s::vector], "
                  "ttl => '1 hour')", (VEC,))
        expire(c, "true")
        # a sha of the expired entry is no longer current: the path does not exist
        with pytest.raises(psycopg.Error, match="does not exist") as err:
            c.execute("SELECT pymem.store_write('s', 'a.md', 'new', expected_sha => %s)", (old,))
        assert err.value.sqlstate == "PM401"
        (before,) = c.execute("SELECT clock_timestamp()").fetchone()
        (new,) = c.execute("SELECT pymem.store_write('s', 'a.md', 'new', expected_sha => '')").fetchone()
        row = c.execute("SELECT content, sha, version, expires_at, created_at >= %s "
                        "FROM pymem.store_read('s', 'a.md')", (before,)).fetchone()
        # a new entry: created now (its two time columns are two clock readings: compared with the
        # time before the write, not with each other); versions go on
        assert row == ("new", new, 2, None, True)
        assert c.execute("SELECT op, old_sha, new_sha FROM pymem.store_audit_tail('s', 1)").fetchall() == \
            [("write", None, new)]  # as after a delete
        assert [v[0] for v in c.execute("SELECT version FROM pymem.store_versions('s', 'a.md')")] == [1, 2]
        # an expired item: rewritten as a new one, without the old vectors
        c.execute("SELECT pymem.store_item_put('s', '{n}', 'k', '{\"v\": 2}')")
        assert c.execute("SELECT count(*) FROM pymem.store_vectors").fetchone()[0] == 0
        assert c.execute("SELECT value FROM pymem.store_item_get('s', '{n}', 'k')").fetchone()[0] == {"v": 2}
        # a delete finds nothing at an expired path (and takes the row, unlogged)
        c.execute("SELECT pymem.store_write('s', 'b.md', 'b', ttl => '1 hour')")
        expire(c, "path = 'b.md'")
        audits = c.execute("SELECT count(*) FROM pymem.store_audit").fetchone()[0]
        assert c.execute("SELECT pymem.store_delete('s', 'b.md')").fetchone()[0] is False
        assert c.execute("SELECT count(*) FROM pymem.store_entries WHERE path = 'b.md'").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.store_audit").fetchone()[0] == audits


@pytest.mark.parametrize("arguments, match", [
    ("ttl => '-1 second'", "ttl must be a positive interval"),
    ("ttl => '0'", "ttl must be a positive interval"),
    ("ttl => '200 years'", "at most 100 years"),
    ("expires_at => now() - interval '1 second'", "not in the future"),
    ("expires_at => 'infinity'", "finite time within 100 years"),
    ("expires_at => now() + interval '1 day', ttl => '1 day'", "not both"),
])
def test_absurd_expiries_are_refused_and_write_nothing(dsn, arguments, match):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('s')")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
            c.execute(f"SELECT pymem.store_write('s', 'a.md', 'x', {arguments})")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
            c.execute(f"SELECT pymem.store_item_put('s', '{{n}}', 'k', '{{}}', 'e8', '{{$}}', ARRAY['{VEC}'::vector], "
                      f"{arguments})")
        for table in ("store_entries", "store_vectors", "store_audit"):
            assert c.execute(f"SELECT count(*) FROM pymem.{table}").fetchone()[0] == 0, table


def test_purge_deletes_expired_entries_in_bounded_batches(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        for store in ("s1", "s2", "s3"):
            c.execute("SELECT pymem.store_open(%s, keep_versions => true)", (store,))
        c.execute("SELECT pymem.store_write('s' || (i % 3 + 1), 'n/' || i, 'x', ttl => '1 day') "
                  "FROM generate_series(1, 25) AS i")
        c.execute("SELECT pymem.store_item_put('s1', '{n}', 'k', '{}', 'e8', '{$}', ARRAY[%s::vector], ttl => '1 day')",
                  (VEC,))
        c.execute("SELECT pymem.store_write('s1', 'forever.md', 'x')")
        c.execute("SELECT pymem.store_open('s1', 'p2')")
        c.execute("SELECT pymem.store_write('s1', 'other.md', 'x', project_id => 'p2', ttl => '1 day')")
        assert c.execute("SELECT * FROM pymem.purge(max_rows => 10)").fetchall() == \
            [("facts", 0), ("store_entries", 0), ("messages", 0), ("changes", 0), ("learning_usage", 0)]  # nothing expired yet
        expire(c, "path <> 'forever.md'")
        audits = c.execute("SELECT count(*) FROM pymem.store_audit").fetchone()[0]
        versions = c.execute("SELECT count(*) FROM pymem.store_versions").fetchone()[0]
        assert [c.execute("SELECT purged FROM pymem.purge(max_rows => 10) WHERE kind = 'store_entries'").fetchone()[0]
                for _ in range(4)] == [10, 10, 6, 0]
        assert c.execute("SELECT project_id, path FROM pymem.store_entries ORDER BY 1").fetchall() == \
            [("", "forever.md"), ("p2", "other.md")]  # each project purges its own
        assert c.execute("SELECT count(*) FROM pymem.store_vectors").fetchone()[0] == 0  # with the entry
        # no audit row (the audit records callers' acts); kept versions stay, as after a delete
        assert c.execute("SELECT count(*) FROM pymem.store_audit").fetchone()[0] == audits
        assert c.execute("SELECT count(*) FROM pymem.store_versions").fetchone()[0] == versions
        assert c.execute("SELECT * FROM pymem.purge('p2')").fetchall() == [("facts", 0), ("store_entries", 1), ("messages", 0), ("changes", 0), ("learning_usage", 0)]


def test_a_purge_racing_a_write_keeps_the_entry_the_write_renewed(dsn):
    """A purge and a write over an expired path, interleaved: the writer holds the row when the
    purge comes to delete it; the purge waits, then finds the old row gone and the new one not
    expired, and keeps it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('s')")
        c.execute("SELECT pymem.store_write('s', 'a.md', 'old', ttl => '1 hour')")
        expire(c, "true")
    writer = psycopg.connect(dsn)
    try:
        writer.execute("SELECT pymem.store_write('s', 'a.md', 'new', ttl => '1 hour')")
        result: list = []
        purger = psycopg.connect(dsn, autocommit=True)
        t = threading.Thread(target=lambda: result.append(
            purger.execute("SELECT purged FROM pymem.purge() WHERE kind = 'store_entries'").fetchone()[0]))
        t.start()
        wait_for_lock(dsn, blocked_by=writer.info.backend_pid)
        writer.commit()
        t.join(10)
        purger.close()
        assert result == [0], result
    finally:
        writer.close()
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT content FROM pymem.store_read('s', 'a.md')").fetchall() == [("new",)]


def test_store_items_refresh_moves_a_ttl_on_and_nothing_else(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('s', keep_versions => true)")
        c.execute("SELECT pymem.store_item_put('s', '{n}', 'ttl', '{}', ttl => '1 hour')")
        c.execute("SELECT pymem.store_item_put('s', '{n}', 'at', '{}', expires_at => now() + interval '1 hour')")
        c.execute("SELECT pymem.store_item_put('s', '{n}', 'never', '{}')")
        c.execute("SELECT pymem.store_item_put('s', '{n}', 'gone', '{}', ttl => '1 hour')")
        c.execute("UPDATE pymem.store_entries SET expires_at = expires_at - interval '30 minutes' WHERE path <> 'n/=gone'")
        expire(c, "path = 'n/=gone'")
        rows = "SELECT path, sha, updated_at, version, expires_at FROM pymem.store_entries"
        before = {r[0]: r[1:] for r in c.execute(rows)}
        audits = c.execute("SELECT count(*) FROM pymem.store_audit").fetchone()[0]
        items = '[{"namespace": ["n"], "key": "ttl"}, {"namespace": ["n"], "key": "at"}, ' \
                '{"namespace": ["n"], "key": "never"}, {"namespace": ["n"], "key": "gone"}, {"namespace": ["x"], "key": "y"}]'
        assert c.execute("SELECT pymem.store_items_refresh('s', %s)", (items,)).fetchone()[0] == 1
        after = {r[0]: r[1:] for r in c.execute(rows)}
        now = c.execute("SELECT now()").fetchone()[0]
        refreshed, old = after.pop("n/=ttl"), before.pop("n/=ttl")
        assert refreshed[:3] == old[:3] and timedelta(minutes=59) < refreshed[3] - now <= timedelta(hours=1)
        assert old[3] - now < timedelta(minutes=31)
        assert after == before  # the others as they were
        assert c.execute("SELECT count(*) FROM pymem.store_audit").fetchone()[0] == audits
        for bad in ('{"namespace": ["n"], "key": "ttl"}', '[{"namespace": "n", "key": "ttl"}]', '[{"namespace": ["n"]}]',
                    '[{"namespace": [], "key": "k"}]', '[1]'):
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                c.execute("SELECT pymem.store_items_refresh('s', %s)", (bad,))


def test_the_app_role_writes_with_a_ttl_and_refreshes(dsn, as_role):
    role = as_role("pymem_app_expiry")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_app_expiry")
    with psycopg.connect(role, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('s')")
        c.execute("SELECT pymem.store_write('s', 'a.md', 'x', ttl => '1 hour')")
        c.execute("SELECT pymem.store_item_put('s', '{n}', 'k', '{}', ttl => '1 hour')")
        assert c.execute("SELECT expires_at > now() FROM pymem.store_meta('s', 'a.md')").fetchone()[0] is True
        assert c.execute("SELECT pymem.store_items_refresh('s', '[{\"namespace\": [\"n\"], \"key\": \"k\"}]')"
                         ).fetchone()[0] == 1
        assert c.execute("SELECT * FROM pymem.purge()").fetchall() == [("facts", 0), ("store_entries", 0), ("messages", 0), ("changes", 0), ("learning_usage", 0)]


# --- Python -------------------------------------------------------------------------------


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as d:
        yield d


def test_memory_store_writes_with_expiries(db, dsn):
    store = MemoryStore.get_or_create("s", db=db)
    store.write_text("a.md", "soon", ttl=60)
    meta = store.get_meta("a.md")
    assert meta.expires_at is not None and timedelta(seconds=50) < meta.expires_at - datetime.now(timezone.utc) \
        <= timedelta(seconds=60)
    later = datetime.now(timezone.utc) + timedelta(days=30)
    store.write_json("b.json", {"v": 1}, expires_at=later)
    assert store.read_entry("b.json").expires_at == later
    assert store.update_json("b.json", lambda v: {"v": v["v"] + 1}, ttl=timedelta(hours=1)) == {"v": 2}
    assert store.get_meta("b.json").expires_at < later
    store.update_text("a.md", lambda t: t + "!")  # neither: never
    assert store.get_meta("a.md").expires_at is None
    with psycopg.connect(dsn, autocommit=True) as c:
        expire(c, "path = 'b.json'")
    assert store.read_json("b.json", default="gone") == "gone" and store.get_meta("b.json") is None
    assert store.list_paths() == ["a.md"] and store.current_sha("b.json") is None
    store.write_json("b.json", {"v": 3}, expected_sha=MUST_NOT_EXIST)  # the expired path is free
    assert store.read_json("b.json") == {"v": 3}
    store.write_text("c.md", "x", ttl=60)
    with psycopg.connect(dsn, autocommit=True) as c:
        expire(c, "path = 'c.md'")
    assert purge(db, until_done=True, max_rows=1) == {"facts": 0, "store_entries": 1, "messages": 0, "changes": 0, "learning_usage": 0}


@pytest.mark.parametrize("kwargs, match", [
    ({"ttl": -5}, r"ttl must be a positive number of seconds \(got -5\)"),  # said in seconds (issue 59)
    ({"ttl": 0}, r"ttl must be a positive number of seconds \(got 0\)"),
    ({"ttl": float("inf")}, "finite number of seconds"),
    ({"ttl": True}, "number of seconds or a timedelta"),
    ({"ttl": 1e30}, "at most 100 years"),
    ({"ttl": 10, "expires_at": datetime.now(timezone.utc)}, "not both"),
    ({"expires_at": datetime(2030, 1, 1)}, "timezone-aware"),
    ({"expires_at": datetime(2000, 1, 1, tzinfo=timezone.utc)}, "not in the future"),
])
def test_memory_store_refuses_absurd_expiries_and_writes_nothing(db, dsn, kwargs, match):
    store = MemoryStore.get_or_create("s", db=db)
    with pytest.raises(pymem.ValidationError, match=match):
        store.write_text("a.md", "x", **kwargs)
    with pytest.raises(pymem.ValidationError, match=match):
        store.update_json("b.json", lambda v: v, default={}, **kwargs)
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.store_entries").fetchone()[0] == 0


# --- LangGraph: PutOp.ttl (minutes), refresh_ttl, TTLConfig ------------------------------


def entry_expiry(dsn: str, path: str) -> tuple[datetime | None, datetime]:
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT (SELECT expires_at FROM pymem.store_entries WHERE path = %s), now()",
                         (path,)).fetchone()


def test_langgraph_put_with_a_ttl_expires(db, dsn):
    store = PymemStore(db, store_key="lg")
    assert store.supports_ttl is True
    store.put(("a",), "short", {"v": 1}, ttl=1.2 / 60)  # 1.2 s, in minutes
    store.put(("a",), "long", {"v": 2}, ttl=10)
    store.put(("b",), "other", {"v": 3}, ttl=10)
    at, now = entry_expiry(dsn, "a/=long")
    assert timedelta(minutes=9) < at - now <= timedelta(minutes=10)
    assert store.get(("a",), "short").value == {"v": 1}
    time.sleep(1.5)
    assert store.get(("a",), "short") is None
    assert [i.key for i in store.search(("a",))] == ["long"]
    with psycopg.connect(dsn, autocommit=True) as c:
        expire(c, "path = 'b/=other'")
    assert store.get(("b",), "other") is None and store.search(("b",)) == []
    assert store.list_namespaces() == [("a",)]
    store.put(("a",), "long", {"v": 4})  # a put without a ttl (and no default_ttl): never expires
    assert entry_expiry(dsn, "a/=long")[0] is None
    store.put(("a",), "k", {"v": 1}, ttl=10)
    store.put(("a",), "k", {"v": 1}, ttl=None)
    assert entry_expiry(dsn, "a/=k")[0] is None
    with pytest.raises(pymem.ValidationError, match="number of minutes"):
        store.put(("a",), "bad", {"v": 1}, ttl="10")
    with pytest.raises(pymem.ValidationError, match="positive"):
        store.put(("a",), "bad", {"v": 1}, ttl=-1)
    assert store.get(("a",), "bad") is None


def shorten(dsn: str, path: str) -> None:
    """Leave the entry one minute to live (as if its ttl had mostly run)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE pymem.store_entries SET expires_at = now() + interval '1 minute' WHERE path = %s", (path,))


def left(dsn: str, path: str) -> timedelta:
    at, now = entry_expiry(dsn, path)
    return at - now


def test_langgraph_reads_refresh_the_ttl_by_default(db, dsn):
    store = PymemStore(db, store_key="lg")
    store.put(("a",), "k", {"v": 1}, ttl=10)
    shorten(dsn, "a/=k")
    store.get(("a",), "k", refresh_ttl=False)
    assert left(dsn, "a/=k") <= timedelta(minutes=1)
    store.get(("a",), "k")  # refresh_ttl defaults to True, as in LangGraph
    assert left(dsn, "a/=k") > timedelta(minutes=9)
    shorten(dsn, "a/=k")
    store.search(("a",), refresh_ttl=False)
    assert left(dsn, "a/=k") <= timedelta(minutes=1)
    assert [i.key for i in store.search(("a",))] == ["k"]
    assert left(dsn, "a/=k") > timedelta(minutes=9)
    # an item put without a ttl has nothing to refresh
    store.put(("a",), "never", {"v": 1})
    store.get(("a",), "never")
    assert entry_expiry(dsn, "a/=never")[0] is None


def test_langgraph_ttl_config(db, dsn):
    store = PymemStore(db, store_key="lg", ttl={"default_ttl": 5, "refresh_on_read": False,
                                                "sweep_interval_minutes": 60})
    store.put(("a",), "k", {"v": 1})  # default_ttl
    assert timedelta(minutes=4) < left(dsn, "a/=k") <= timedelta(minutes=5)
    store.put(("a",), "never", {"v": 1}, ttl=None)  # an explicit None: no expiry
    assert entry_expiry(dsn, "a/=never")[0] is None
    shorten(dsn, "a/=k")
    store.get(("a",), "k")
    store.search(("a",))
    assert left(dsn, "a/=k") <= timedelta(minutes=1)  # refresh_on_read False
    store.get(("a",), "k", refresh_ttl=True)  # the op's own setting wins
    assert left(dsn, "a/=k") > timedelta(minutes=4)
    # ops that reach batch() directly carry their own settings
    shorten(dsn, "a/=k")
    store.batch([GetOp(("a",), "k", refresh_ttl=True), SearchOp(("a",), refresh_ttl=False),
                 PutOp(("b",), "k", {"v": 1}, ttl=2)])
    assert left(dsn, "a/=k") > timedelta(minutes=4)
    assert timedelta(minutes=1) < left(dsn, "b/=k") <= timedelta(minutes=2)
    with pytest.raises(pymem.ValidationError):
        PymemStore(db, ttl={"default_ttl": "5"})


def test_langgraph_async_put_with_a_ttl(dsn):
    import asyncio

    async def main() -> None:
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=2)) as adb:
            store = PymemStore(adb, store_key="lg")
            await store.aput(("a",), "k", {"v": 1}, ttl=10)
            shorten(dsn, "a/=k")
            assert (await store.aget(("a",), "k")).value == {"v": 1}
            assert left(dsn, "a/=k") > timedelta(minutes=9)
            with psycopg.connect(dsn, autocommit=True) as c:
                expire(c, "true")
            assert await store.aget(("a",), "k") is None

    asyncio.run(main())
