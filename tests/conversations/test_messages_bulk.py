"""Bulk ingest of messages (issue 15.6): pymem.messages_add_many and Memory.add_messages append
many messages to a thread in one call exactly as message_add would (plus their vectors), all or
nothing, on a real server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pymem
from pymem import AsyncMemory, HashEmbedder, Memory
from pymem.errors import ValidationError

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def rows(dsn, sql, args=()):
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute(sql, args).fetchall()


def test_a_history_in_one_call_with_its_vectors(db, dsn):
    mem = Memory(agent_id="bot", db=db, embedder=HashEmbedder())
    assert mem.add_message("hello", user="alice", thread="t", created_at=T0) == 1
    history = [{"content": "I moved to Oslo", "created_at": T0 + timedelta(minutes=1), "metadata": {"speaker": "Al"}},
               {"role": "assistant", "content": "Noted: Oslo", "created_at": T0 + timedelta(minutes=2), "importance": 0.5},
               "and I have a cat named Miso"]  # no time: now
    assert mem.add_messages(history, user="alice", thread="t") == [2, 3, 4]
    got = rows(dsn, """SELECT m.seq, m.role, m.content, m.importance, m.metadata, m.embedded_by, e.seq IS NOT NULL,
                              e.lexemes = l.lexemes, t.last_seq
                         FROM pymem.messages m JOIN pymem.threads t USING (project_id, user_id, thread_id)
                         JOIN pymem.message_lexemes l USING (project_id, user_id, thread_id, seq)
                         LEFT JOIN pymem.message_embeddings e USING (project_id, user_id, thread_id, seq)
                        WHERE m.user_id = 'alice' ORDER BY m.seq""")
    assert [r[:5] for r in got[1:]] == [(2, "user", "I moved to Oslo", 1.0, {"speaker": "Al"}),
                                        (3, "assistant", "Noted: Oslo", 0.5, {}),
                                        (4, "user", "and I have a cat named Miso", 1.0, {})]
    assert all(r[5] == HashEmbedder().name and r[6] and r[7] and r[8] == 4 for r in got[1:])
    assert got[0][6] is False  # the first message has no vector yet (add_message)
    # recall finds them by words and meaning, with nothing left to catch up for them
    assert [m.seq for m in mem.recall("cat named Miso", user="alice", thread="other", k=1)] == [4]
    assert mem.add_messages([], user="alice", thread="t") == []


def test_one_invalid_message_refuses_the_batch_and_writes_nothing(db, dsn):
    mem = Memory(agent_id="bot", db=db)
    mem.add_message("first", user="bob", thread="t", created_at=T0)
    before = rows(dsn, "SELECT count(*), max(last_seq) FROM pymem.messages JOIN pymem.threads USING (project_id, user_id, thread_id)")
    cases = [
        (["ok", "  "], r"element 2 \(of 2\).*must not be empty"),
        ([{"content": "a", "role": "robot"}], r"element 1 \(of 1\).*role must be"),
        ([{"content": "a", "importance": 2}], r"element 1 \(of 1\).*importance"),
        ([{"content": "a", "created_at": T0 + timedelta(hours=1)}, {"content": "b", "created_at": T0 + timedelta(minutes=1)}],
         r"element 2 \(of 2\).*earlier than the message before it"),
        ([{"content": "a", "created_at": T0 - timedelta(days=1)}], "earlier than the newest message of thread"),
        ([{"content": "a", "created_at": datetime.now(UTC) + timedelta(days=1)}], "in the future"),
    ]
    for batch, match in cases:
        with pytest.raises(ValidationError, match=match):
            mem.add_messages(batch, user="bob", thread="t")
    with pytest.raises(ValidationError, match="unknown keys"):
        mem.add_messages([{"content": "a", "speaker": "x"}], user="bob", thread="t")
    with pytest.raises(ValidationError, match="add_message\\(\\) takes one"):
        mem.add_messages("one string", user="bob", thread="t")
    assert rows(dsn, "SELECT count(*), max(last_seq) FROM pymem.messages JOIN pymem.threads USING (project_id, user_id, thread_id)") == before


def test_sql_checks_the_arrays_and_the_vectors(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        def refused(sql, match):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
                c.execute(sql)

        refused("SELECT * FROM pymem.messages_add_many('carol', 't', ARRAY['user'], ARRAY['a', 'b'])", "of one length")
        refused("SELECT * FROM pymem.messages_add_many('carol', 't', ARRAY['user', 'user'], ARRAY['a', 'b'], "
                "embeddings => ARRAY['[1,0,0]', '[1,0]']::vector[], embedder => 'e3')", r"element 2 \(of 2\): embedder e3 makes 3")
        refused("SELECT * FROM pymem.messages_add_many('', 't', ARRAY['user'], ARRAY['a'])", "user")
        assert c.execute("SELECT count(*) FROM pymem.messages").fetchone()[0] == 0
        got = c.execute("SELECT * FROM pymem.messages_add_many('carol', 't', ARRAY['user', 'assistant'], "
                        "ARRAY['one', 'two'], project_id => 'acme')").fetchall()
        assert got == [(1, 1), (2, 2)]


def test_async_add_messages(dsn):
    async def go():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:
            mem = AsyncMemory(agent_id="bot", db=adb, embedder=HashEmbedder())
            assert await mem.add_messages(["one", {"role": "assistant", "content": "two"}], user="dan") == [1, 2]
            assert [m.content for m in await mem.window(user="dan")] == ["one", "two"]
    asyncio.run(go())


def test_vector_puts_take_at_most_10000_per_call(dsn):
    """Issue 36, item 3: message_embeddings_put and fact_embeddings_put refuse more than 10,000
    vectors in one call (22023, before any work: what a client can make the server hold and do),
    as many as messages_unembedded and facts_unembedded list at most; 10,000 are stored, each
    message marked (pymem.Memory's catch-up never sends more)."""
    n = 10000
    vectors = "ARRAY(SELECT '[1,2,3]'::vector FROM pg_catalog.generate_series(1, %s))"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT count(*) FROM pymem.messages_add_many('ann', 't', pg_catalog.array_fill('user'::text, ARRAY[%s]),"
                  " ARRAY(SELECT 'message ' || g FROM pg_catalog.generate_series(1, %s) AS g))", (n, n))
        ids = [r[0] for r in c.execute("SELECT id FROM pymem.facts_add_many('user', pg_catalog.array_fill('ann'::text, ARRAY[%s]),"
                                       " ARRAY(SELECT 'fact ' || g FROM pg_catalog.generate_series(1, %s) AS g))", (n, n))]
        seqs = list(range(1, n + 1))
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match="message_embeddings_put takes at most 10000 vectors per call, not 10001"):
            c.execute(f"SELECT pymem.message_embeddings_put('ann', 'e', pg_catalog.array_fill('t'::text, ARRAY[%s]), %s, {vectors})",
                      (n + 1, [*seqs, 1], n + 1))
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match="fact_embeddings_put takes at most 10000 vectors per call, not 10001"):
            c.execute(f"SELECT pymem.fact_embeddings_put('user', 'ann', 'e', %s, {vectors})", ([*ids, ids[0]], n + 1))
        assert rows(dsn, "SELECT count(*) FROM pymem.message_embeddings") == [(0,)]
        assert c.execute(f"SELECT pymem.message_embeddings_put('ann', 'e', pg_catalog.array_fill('t'::text, ARRAY[%s]), %s, {vectors})",
                         (n, seqs, n)).fetchone() == (n,)
        assert c.execute(f"SELECT pymem.fact_embeddings_put('user', 'ann', 'e', %s, {vectors})", (ids, n)).fetchone() == (n,)
    assert rows(dsn, "SELECT count(*), count(*) FILTER (WHERE embedded_by = 'e') FROM pymem.messages") == [(n, n)]
    assert rows(dsn, "SELECT count(*) FROM pymem.fact_embeddings") == [(n,)]
