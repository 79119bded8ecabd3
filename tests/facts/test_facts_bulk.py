"""Bulk ingest of facts (issue 15.6): pymem.facts_add_many and Memory.persist_many store many
facts in one call exactly as fact_add / persist would, all or nothing, on a real server."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import pymem
from pymem import AsyncMemory, HashEmbedder, Memory
from pymem.errors import ValidationError


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def rows(dsn, sql, args=()):
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute(sql, args).fetchall()


def test_persist_many_is_persist_in_one_call(db, dsn):
    mem = Memory(agent_id="bot", db=db, embedder=HashEmbedder())
    there = mem.persist("Prefers email", user="alice")
    ids = mem.persist_many(["Likes tea", "Prefers email", "  Likes  tea ", "Lives in Oslo"], user="alice",
                           confidence=0.9, metadata={"origin": "import"})
    assert [i.created for i in ids] == [True, False, False, True]
    assert ids[1] == there and ids[2] == ids[0]  # the fact already there; a repeat in the batch
    # one row per fact, as persist would have stored them: trimmed, keyed, with vector and lexemes
    got = rows(dsn, """SELECT f.id, f.content, f.confidence, f.metadata, e.fact_id IS NOT NULL, l.fact_id IS NOT NULL
                         FROM pymem.facts f
                         LEFT JOIN pymem.fact_embeddings e ON e.project_id = f.project_id AND e.scope = f.scope
                              AND e.scope_id = f.scope_id AND e.fact_id = f.id
                         LEFT JOIN pymem.fact_lexemes l ON l.project_id = f.project_id AND l.scope = f.scope
                              AND l.scope_id = f.scope_id AND l.fact_id = f.id
                        WHERE f.scope_id = 'alice' ORDER BY f.id""")
    assert [(r[0], r[1]) for r in got] == [(there, "Prefers email"), (ids[0], "Likes tea"), (ids[3], "Lives in Oslo")]
    assert got[1][2:] == (0.9, {"origin": "import"}, True, True) and got[2][4:] == (True, True)
    assert mem.persist("Likes tea", user="alice") == ids[0]  # and persist finds them
    assert [f.content for f in mem.retrieve("tea", user="alice", k=1)] == ["Likes tea"]
    assert mem.persist_many([], user="alice") == []


def test_one_invalid_fact_refuses_the_batch_and_writes_nothing(db, dsn):
    mem = Memory(agent_id="bot", db=db, embedder=HashEmbedder())
    before = rows(dsn, "SELECT count(*) FROM pymem.facts")[0][0]
    with pytest.raises(ValidationError, match=r"element 3 \(of 4\).*must not be empty"):
        mem.persist_many(["a", "b", "   ", "d"], user="alice")
    with pytest.raises(ValidationError, match=r"element 2 \(of 2\).*65536"):
        mem.persist_many(["a", "x" * 70000], user="alice")
    with pytest.raises(ValidationError, match="contents must be a list"):
        mem.persist_many("one string", user="alice")
    with pytest.raises(ValidationError, match="2 vectors for 3 contents"):
        mem.persist_many(["a", "b", "c"], user="alice", embeddings=[[1.0] * 384, [1.0] * 384])
    assert rows(dsn, "SELECT count(*) FROM pymem.facts")[0][0] == before == 0
    assert rows(dsn, "SELECT count(*) FROM pymem.embedders")[0][0] == 0


def test_sql_takes_many_subjects_and_checks_every_element(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        got = c.execute("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice', 'bob', 'alice'], "
                        "ARRAY['Likes tea', 'Likes tea', 'Likes tea'], project_id => 'acme')").fetchall()
        assert [r[0] for r in got] == [1, 2, 3] and got[0][1] != got[1][1] and got[2][1] == got[0][1]
        assert [r[2] for r in got] == [True, True, False]

        def refused(sql, match):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
                c.execute(sql)

        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice'], ARRAY['a', 'b'])", "of one length")
        # the write is every element's: checked once, before the elements
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice', 'alice'], ARRAY['a', 'b'], "
                "write => pymem.fact_write(confidence => 2))", "confidence must be between 0 and 1")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice'], ARRAY['a'], "
                "write => pymem.fact_write(source => 'learned'))", "learned facts are added one at a time")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice'], ARRAY['a'], "
                "write => pymem.fact_write(metadata => '[1]'))", "metadata must be a JSON object")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice'], ARRAY['a'], "
                "write => pymem.fact_write(created_at => now() + interval '1 day'))", "in the future")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice'], ARRAY['a'], write => NULL)",
                "write must be a fact write")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice', ''], ARRAY['a', 'b'])",
                r"element 2 \(of 2\): a user fact needs a user id")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice', 'bob', NULL], ARRAY['a', 'b', 'c'])",
                r"element 3 \(of 3\): scope_id")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice', 'alice'], ARRAY['a', 'b'], "
                "embeddings => ARRAY['[1,0,0]', '[1,0]']::vector[], embedder => 'e3')", r"element 2 \(of 2\): embedder e3 makes 3")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice'], ARRAY['a'], "
                "embeddings => ARRAY['[0,0,0]']::vector[], embedder => 'e3b')", "zero vector")
        assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == 2


def test_async_persist_many(dsn):
    async def go():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:
            mem = AsyncMemory(agent_id="bot", db=adb, embedder=HashEmbedder())
            ids = await mem.persist_many(["one", "two", "one"], user="carol")
            assert [i.created for i in ids] == [True, True, False] and ids[2] == ids[0]
            assert await mem.persist("two", user="carol") == ids[1]
    asyncio.run(go())


def test_batches_holding_the_same_facts_in_opposite_orders_do_not_deadlock(dsn, lock_wait):
    """(Found by a second reader.) Two transactions add the same facts of one subject in opposite
    orders: the second waits for the first (subject lock) instead of a deadlock, and both get the
    same ids."""
    import threading
    contents = [f"fact number {i}" for i in range(300)]
    a = psycopg.connect(dsn, autocommit=False)
    b = psycopg.connect(dsn, autocommit=True)
    try:
        first = a.execute("SELECT id FROM pymem.facts_add_many('user', %s::text[], %s::text[]) ORDER BY ord",
                          (["bob"] * 300, contents)).fetchall()
        out = {}

        def other():
            out["rows"] = b.execute("SELECT id FROM pymem.facts_add_many('user', %s::text[], %s::text[]) ORDER BY ord",
                                    (["bob"] * 300, contents[::-1])).fetchall()
        t = threading.Thread(target=other)
        t.start()
        waiter = lock_wait(dsn, blocked_by=a.info.backend_pid)  # b waits on a's subject lock ...
        assert waiter == b.info.backend_pid
        a.commit()  # ... and goes on once a commits (a deadlock would have failed one of them)
        t.join(30)
        assert [r[0] for r in out["rows"]] == [r[0] for r in first][::-1]
    finally:
        a.close()
        b.close()


def test_a_bad_subject_is_named_before_a_bad_value_and_a_bad_scope_at_element_1(dsn):
    """The checks run in one pass over the elements, in fact_add's order: an invalid subject
    (wherever it is) refuses the call before an invalid content earlier in the batch; an invalid
    scope or project is element 1's fault."""
    with psycopg.connect(dsn, autocommit=True) as c:
        def refused(sql, match):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
                c.execute(sql)
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice', 'bob', '*'], ARRAY['  ', 'b', 'c'])",
                r"element 3 \(of 3\): '\*' selects every user")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice', 'bob', 'carol'], ARRAY['a', '  ', 'c'])",
                r"element 2 \(of 3\): fact content must not be empty")
        refused("SELECT * FROM pymem.facts_add_many('users', ARRAY['alice', 'bob'], ARRAY['a', 'b'])",
                r"element 1 \(of 2\): scope must be")
        refused("SELECT * FROM pymem.facts_add_many('user', ARRAY['alice', 'bob'], ARRAY['a', 'b'], project_id => '*')",
                r"element 1 \(of 2\): project_id")
        # '' is a real agent id (a fact no agent reads), as for fact_add
        assert c.execute("SELECT count(*) FROM pymem.facts_add_many('agent', ARRAY[''], ARRAY['a'])").fetchone()[0] == 1
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE scope = 'user'").fetchone()[0] == 0


def test_a_batch_locks_subjects_whose_lock_rows_exist_already(dsn, lock_wait):
    """A subject's row of subject_locks made by an earlier learned add is locked by a batch naming
    that subject (not only the rows the batch creates): a learned add of the subject waits for
    the batch's transaction, as it would for another learned add."""
    import threading
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT * FROM pymem.fact_add('user', 'dan', 'Learned early', write => pymem.fact_write(source => 'learned'))")
        assert c.execute("SELECT count(*) FROM pymem.subject_locks WHERE scope_id = 'dan'").fetchone()[0] == 1
    a = psycopg.connect(dsn, autocommit=False)
    b = psycopg.connect(dsn, autocommit=True)
    try:
        a.execute("SELECT * FROM pymem.facts_add_many('user', ARRAY['erin', 'dan'], ARRAY['Likes tea', 'Likes coffee'])")
        out = {}

        def learned():
            out["row"] = b.execute("SELECT * FROM pymem.fact_add('user', 'dan', 'Learned later', write => pymem.fact_write(source => 'learned'))").fetchone()
        t = threading.Thread(target=learned)
        t.start()
        assert lock_wait(dsn, blocked_by=a.info.backend_pid) == b.info.backend_pid
        a.commit()
        t.join(30)
        assert out["row"][1] is True
    finally:
        a.close()
        b.close()


def test_a_fact_committed_by_another_writer_during_the_batch_is_returned_not_doubled(dsn, lock_wait):
    """A single add of the same fact, uncommitted when the batch looked its facts up: the batch's
    insert waits for it, then returns the committed fact (created false) instead of a second row."""
    import threading
    a = psycopg.connect(dsn, autocommit=False)
    b = psycopg.connect(dsn, autocommit=True)
    try:
        (fid, created), = a.execute("SELECT * FROM pymem.fact_add('user', 'zed', 'Plays chess')").fetchall()
        assert created
        out = {}

        def batch():
            out["rows"] = b.execute("SELECT ord, id, created FROM pymem.facts_add_many('user', ARRAY['zed', 'zed', 'zed'], "
                                    "ARRAY['Likes jazz', 'Plays  chess', 'Plays chess']) ORDER BY ord").fetchall()
        t = threading.Thread(target=batch)
        t.start()
        assert lock_wait(dsn, blocked_by=a.info.backend_pid) == b.info.backend_pid
        a.commit()
        t.join(30)
        rows = out["rows"]
        assert [r[1] for r in rows[1:]] == [fid, fid] and [r[2] for r in rows] == [True, False, False]
        assert b.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'zed'").fetchone()[0] == 2
    finally:
        a.close()
        b.close()
