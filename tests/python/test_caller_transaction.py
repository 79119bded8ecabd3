"""Writes inside the caller's own transaction (issue 33, item 3): a Memory call runs on the
application's psycopg connection, given per call (``conn=``) or for a block
(``mem.bound(conn)``), inside its transaction: a rollback takes back pymem's writes with the
application's, a commit keeps both, and pymem never commits, rolls back or reconfigures that
connection. A model call (a non-cheap embedder, a learner, an extractor) is refused while the
transaction is open unless the caller allowed it; a due summary waits. Against the real server,
as a non-superuser login role of pymem_app."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import pymem
import pymem.erasure
from pymem import AsyncMemory, HashEmbedder, Memory
from pymem.llm import FactChange

IDLE, INTRANS, INERROR = TransactionStatus.IDLE, TransactionStatus.INTRANS, TransactionStatus.INERROR


@pytest.fixture
def app(dsn, as_role):
    """The conninfo of an application role (a member of pymem_app) and its own table, orders."""
    role = as_role("pymem_caller_tx_app")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_caller_tx_app")
        c.execute("CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL)")
        c.execute("GRANT SELECT, INSERT ON orders TO pymem_caller_tx_app")
    return role


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


class Model(HashEmbedder):
    """A deterministic embedder that says it is not cheap (as a model's API is not), and keeps
    the texts it was asked to embed."""

    cheap = False

    def __init__(self) -> None:
        super().__init__(64)
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += texts
        return super().embed(texts)


class Learner:
    """A reconciling learner without a model: each sentence starting "I " is a new fact."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def extract(self, message: str) -> list[str]:
        self.calls.append(message)
        return [s for s in message.split(". ") if s.startswith("I ")]

    def reconcile(self, candidates: list[str], facts: list[dict]) -> list[FactChange]:
        return [FactChange("add", c) for c in candidates]


def summarizer(calls: list):
    def summarize(previous, messages, max_chars):
        calls.append(len(messages))
        return " ".join(m["content"] for m in messages)[:max_chars]
    return summarize


def counts(dsn, user="alice"):
    """What the database holds, seen from another connection (committed rows only)."""
    with psycopg.connect(dsn) as c:
        return {
            "orders": c.execute("SELECT count(*) FROM orders").fetchone()[0],
            "facts": c.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = %s", (user,)).fetchone()[0],
            "messages": c.execute("SELECT count(*) FROM pymem.messages WHERE user_id = %s", (user,)).fetchone()[0],
            "threads": c.execute("SELECT count(*) FROM pymem.threads WHERE user_id = %s", (user,)).fetchone()[0],
        }


NOTHING = {"orders": 0, "facts": 0, "messages": 0, "threads": 0}


def place_order(mem, conn, order_id=7):
    """The application's transaction: its own row, the fact it teaches, and a turn."""
    conn.execute("INSERT INTO orders VALUES (%s, 'a blue kettle')", (order_id,))
    fid = mem.persist(f"Ordered a blue kettle (order {order_id})", user="alice", conn=conn)
    assert conn.info.transaction_status == INTRANS  # pymem committed nothing
    result = mem.record("Send it to Bergen", "Done: order 7 goes to Bergen.", user="alice", conn=conn)
    assert conn.info.transaction_status == INTRANS
    # inside the transaction pymem's reads see its own writes
    assert [f.content for f in mem.retrieve(user="alice", conn=conn)] == [f"Ordered a blue kettle (order {order_id})"]
    assert [m.content for m in mem.window(user="alice", conn=conn)] == ["Send it to Bergen",
                                                                          "Done: order 7 goes to Bergen."]
    return fid, result


def test_conn_per_call_rollback_leaves_nothing_and_commit_keeps_both(app, db, dsn):
    mem = Memory(db=db, agent_id="shop-bot", embedder=HashEmbedder(64))
    with psycopg.connect(app) as conn:  # not autocommit: psycopg opens a transaction at its first statement
        place_order(mem, conn)
        assert counts(dsn) == NOTHING  # nothing is visible outside the transaction
        conn.rollback()
        assert counts(dsn) == NOTHING
        assert mem.retrieve(user="alice") == [] and mem.window(user="alice") == []

        fid, result = place_order(mem, conn)
        conn.commit()
        assert counts(dsn) == {"orders": 1, "facts": 1, "messages": 2, "threads": 1}
        # the pool reads what the caller committed, vectors included (pgvector's types on the cursor)
        assert [f.id for f in mem.retrieve("kettle", user="alice")] == [fid]
        recalled = {m.seq for m in mem.recall("Bergen", user="alice")}
        assert recalled and recalled <= {result.user_seq, result.assistant_seq}
        with psycopg.connect(dsn) as c:
            assert c.execute("SELECT count(*) FROM pymem.fact_embeddings WHERE fact_id = %s", (fid,)).fetchone() == (1,)
        # the caller's connection is as it was: autocommit off, tuples, no pgvector loader of pymem's
        assert conn.autocommit is False and conn.info.transaction_status == IDLE
        assert conn.execute("SELECT 1 AS one").fetchone() == (1,)
        assert isinstance(conn.execute("SELECT '[1,2]'::vector").fetchone()[0], str)


def test_bound_block_with_an_autocommit_connection_in_a_transaction(app, db, dsn):
    mem = Memory(db=db, agent_id="shop-bot", embedder=HashEmbedder(64))
    with psycopg.connect(app, autocommit=True) as conn:
        with pytest.raises(ZeroDivisionError):
            with conn.transaction(), mem.bound(conn):
                conn.execute("INSERT INTO orders VALUES (1, 'a kettle')")
                mem.persist("Ordered a kettle", user="alice")
                with mem.turn("Where is my kettle?", user="alice") as turn:
                    assert turn.messages[-1] == {"role": "user", "content": "Where is my kettle?"}
                    turn.answer = "On its way."
                assert turn.result is not None and conn.info.transaction_status == INTRANS
                1 / 0  # the application fails: psycopg rolls the transaction back
        assert counts(dsn) == NOTHING
        assert conn.info.transaction_status == IDLE and conn.autocommit is True

        with conn.transaction(), mem.bound(conn):
            conn.execute("INSERT INTO orders VALUES (1, 'a kettle')")
            mem.persist("Ordered a kettle", user="alice")
            mem.record("Where is my kettle?", "On its way.", user="alice")
        assert counts(dsn) == {"orders": 1, "facts": 1, "messages": 2, "threads": 1}

        # outside a transaction, an autocommit connection runs each call as its own statement
        with mem.bound(conn):
            mem.persist("Likes tea", user="alice")
        assert conn.info.transaction_status == IDLE
        assert counts(dsn)["facts"] == 2
    # after the block, calls use the pool again
    assert len(mem.retrieve(user="alice")) == 2


def test_async_twin(app, dsn):
    async def main():
        amem = AsyncMemory(agent_id="shop-bot", embedder=HashEmbedder(64))
        async with await psycopg.AsyncConnection.connect(app) as aconn:
            async with amem.bound(aconn):
                await aconn.execute("INSERT INTO orders VALUES (1, 'a kettle')")
                await amem.persist("Ordered a kettle", user="alice")
                async with amem.turn("Where is my kettle?", user="alice") as turn:
                    turn.answer = "On its way."
                assert [f.content for f in await amem.retrieve("kettle", user="alice")] == ["Ordered a kettle"]
                assert aconn.info.transaction_status == INTRANS
            assert counts(dsn) == NOTHING
            await aconn.rollback()
            assert counts(dsn) == NOTHING

            await aconn.execute("INSERT INTO orders VALUES (2, 'a mug')")
            await amem.persist("Ordered a mug", user="alice", conn=aconn)
            await amem.record("And a mug", "Added.", user="alice", conn=aconn)
            assert aconn.info.transaction_status == INTRANS
            await aconn.commit()
        assert amem.db is None  # every call ran on the caller's connection: no pool was opened
        assert counts(dsn) == {"orders": 1, "facts": 1, "messages": 2, "threads": 1}
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:  # a pool sees the commit
            pooled = AsyncMemory(db=adb, agent_id="shop-bot", embedder=HashEmbedder(64))
            assert [f.content for f in await pooled.retrieve("mug", user="alice")] == ["Ordered a mug"]

    asyncio.run(main())


def test_async_model_calls_are_refused_in_the_transaction_unless_allowed(app, dsn):
    async def main():
        model = Model()
        amem = AsyncMemory(agent_id="shop-bot", embedder=model)
        async with await psycopg.AsyncConnection.connect(app) as aconn:
            async with aconn.transaction():
                async with amem.bound(aconn):
                    with pytest.raises(pymem.InTransactionError):
                        await amem.persist("Ordered a kettle", user="alice")
                    assert model.texts == [] and aconn.info.transaction_status == INTRANS
                async with amem.bound(aconn, allow_model_calls=True):
                    await amem.persist("Ordered a kettle", user="alice")
                assert model.texts == ["Ordered a kettle"]
        assert counts(dsn)["facts"] == 1

    asyncio.run(main())


def test_a_model_call_inside_the_transaction_is_refused_unless_allowed(app, db, dsn):
    model = Model()
    mem = Memory(db=db, agent_id="shop-bot", embedder=model)
    vector = HashEmbedder(64).embed(["Ordered a kettle"])[0]  # computed before the transaction
    with psycopg.connect(app) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 'a kettle')")
        with pytest.raises(pymem.InTransactionError) as refused:
            mem.persist("Ordered a kettle", user="alice", conn=conn)
        assert isinstance(refused.value, pymem.ValidationError) and refused.value.sqlstate is None
        assert "embedding=" in str(refused.value) and "allow_model_calls=True" in str(refused.value)
        assert model.texts == []  # the model was not called
        assert conn.info.transaction_status == INTRANS  # and the transaction is not aborted
        # a precomputed vector needs no model
        mem.persist("Ordered a kettle", user="alice", conn=conn, embedding=vector)
        with pytest.raises(pymem.InTransactionError):
            mem.record("Where is it?", "On its way.", user="alice", conn=conn)
        with pytest.raises(pymem.InTransactionError):
            mem.context("Where is it?", user="alice", conn=conn)
        mem.context("Where is it?", user="alice", conn=conn, embedding=vector)
        assert model.texts == []
        # allowed: the model runs while the transaction waits
        with mem.bound(conn, allow_model_calls=True):
            mem.record("Where is it?", "On its way.", user="alice")
            mem.persist("Likes tea", user="alice", conn=conn)  # conn= of the same connection: allowed too
        assert model.texts == ["Where is it?", "On its way.", "Likes tea"]
        conn.commit()
        assert counts(dsn) == {"orders": 1, "facts": 2, "messages": 2, "threads": 1}
    # an autocommit connection outside a transaction waits for nothing: the model may run
    with psycopg.connect(app, autocommit=True) as conn:
        mem.persist("Lives in Bergen", user="alice", conn=conn)
        assert model.texts[-1] == "Lives in Bergen"


def test_learning_is_refused_and_a_due_summary_waits(app, db, dsn):
    learner, summaries = Learner(), []
    learning = Memory(db=db, agent_id="shop-bot", embedder=HashEmbedder(64), learner=learner)
    with psycopg.connect(app) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 'a kettle')")  # the transaction is open from here
        with pytest.raises(pymem.InTransactionError, match="the learner's model"):
            learning.record("I live in Bergen", "Noted.", user="alice", conn=conn)
        assert learner.calls == []
        assert learning.window(user="alice", conn=conn) == []  # refused before anything was written
        conn.rollback()
    with psycopg.connect(app) as conn, learning.bound(conn, allow_model_calls=True):
        conn.execute("INSERT INTO orders VALUES (1, 'a kettle')")
        assert learning.record("I live in Bergen", "Noted.", user="alice").fact_changes
        conn.rollback()
    assert learner.calls == ["I live in Bergen"] and counts(dsn) == NOTHING

    summarizing = Memory(db=db, agent_id="shop-bot", summarizer=summarizer(summaries), summarize_every=2,
                         keep_last=1)
    with psycopg.connect(app) as conn, summarizing.bound(conn):
        for i in range(3):
            result = summarizing.record(f"question {i}", f"answer {i}", user="alice")
            assert result.summarized is False and result.failures == []  # put off, not failed
        with pytest.raises(pymem.InTransactionError, match="the summarizer's model"):
            summarizing.summarize(user="alice")
        assert conn.info.transaction_status == INTRANS
        conn.commit()
    assert summaries == [] and summarizing.summary(user="alice") is None
    # the span stayed due: the next turn outside the transaction folds it
    assert summarizing.record("question 3", "answer 3", user="alice").summarized is True
    assert summaries and summarizing.summary(user="alice")


def test_a_database_error_is_pymems_and_the_rollback_is_the_callers(app, db, dsn):
    mem = Memory(db=db, agent_id="shop-bot")
    with psycopg.connect(app) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 'a kettle')")
        with pytest.raises(pymem.ValidationError) as bad:
            mem.persist("Ordered a kettle", user="alice", confidence=5, conn=conn)
        assert bad.value.sqlstate == "22023" and isinstance(bad.value.__cause__, psycopg.Error)
        assert conn.info.transaction_status == INERROR and not conn.closed  # aborted, not rolled back
        with pytest.raises(pymem.QueryError) as aborted:
            mem.persist("Ordered a kettle", user="alice", conn=conn)
        assert aborted.value.sqlstate == "25P02"  # in failed SQL transaction: the caller's to end
        conn.rollback()
        mem.persist("Ordered a kettle", user="alice", conn=conn)
        conn.commit()
    assert counts(dsn) == {"orders": 0, "facts": 1, "messages": 0, "threads": 0}


def test_a_binding_in_another_thread_does_not_capture_this_threads_calls(app, db, dsn):
    mem = Memory(db=db, agent_id="shop-bot")
    bound, release, done = threading.Event(), threading.Event(), []

    def other():
        with psycopg.connect(app) as conn, mem.bound(conn):
            mem.persist("Written in the other thread", user="alice")
            bound.set()
            release.wait(30)
            done.append(conn.info.transaction_status)
            conn.rollback()

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert bound.wait(30)
        mem.persist("Written in this thread", user="alice")  # the pool: committed at once
        with psycopg.connect(dsn) as c:
            assert [r[0] for r in c.execute("SELECT content FROM pymem.facts WHERE scope_id = 'alice'")] == [
                "Written in this thread"]
    finally:
        release.set()
        thread.join(30)
    assert done == [INTRANS]
    assert [f.content for f in mem.retrieve(user="alice")] == ["Written in this thread"]


def test_the_connection_must_be_psycopgs_and_of_the_right_kind(app, db, dsn, empty_dsn):
    mem = Memory(db=db, agent_id="shop-bot")

    async def main():
        async with await psycopg.AsyncConnection.connect(app) as aconn:
            with pytest.raises(pymem.ValidationError, match="psycopg.Connection"):
                mem.bound(aconn)
            with pytest.raises(pymem.ValidationError, match="psycopg.Connection"):
                mem.persist("x", user="alice", conn=aconn)
        with psycopg.connect(app) as conn:
            with pytest.raises(pymem.ValidationError, match="psycopg.AsyncConnection"):
                await AsyncMemory(agent_id="shop-bot").persist("x", user="alice", conn=conn)

    asyncio.run(main())
    with pytest.raises(pymem.ValidationError, match="psycopg.Connection"):
        mem.bound(dsn)
    # a database pymem was never migrated in: pymem's usual error, with its hint
    with psycopg.connect(empty_dsn) as conn:
        with pytest.raises(pymem.MigrationError) as missing:
            mem.persist("x", user="alice", conn=conn)
        assert missing.value.hint == pymem.errors.MIGRATE_HINT
        assert conn.info.transaction_status == INERROR


# -- the other write paths take the caller's transaction too (issue 55, item 2): the runner owns
# the binding, so a MemoryStore, pymem.lifecycle.purge, the change feed and erasure join it


def entries(dsn, key="notes"):
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT path FROM pymem.store_entries WHERE store_key = %s ORDER BY 1", (key,)).fetchall()


def test_a_store_write_with_conn_is_rolled_back_with_the_callers_transaction_and_kept_by_its_commit(app, db, dsn):
    store = pymem.MemoryStore.get_or_create("notes", db=db)
    with psycopg.connect(app) as conn:
        conn.execute("INSERT INTO orders VALUES (1, 'a kettle')")
        sha = store.write_text("orders/1.md", "a kettle", conn=conn)
        assert conn.info.transaction_status == INTRANS  # pymem committed nothing
        assert store.read_entry("orders/1.md", conn=conn).sha == sha  # its own write, inside
        assert store.read_text("orders/1.md") is None and entries(dsn) == []  # nothing outside
        conn.rollback()
        assert store.read_text("orders/1.md") is None and entries(dsn) == []
        assert counts(dsn)["orders"] == 0

        conn.execute("INSERT INTO orders VALUES (1, 'a kettle')")
        store.write_json("orders/1.json", {"item": "a kettle"}, conn=conn)
        store.append({"role": "user", "content": "a kettle, please"})
        assert store.save(conn=conn) == 1
        conn.commit()
    assert entries(dsn) == [("orders/1.json",)] and counts(dsn)["orders"] == 1
    assert pymem.MemoryStore.get("notes", db=db).messages == [{"role": "user", "content": "a kettle, please"}]


def test_a_store_bound_to_the_callers_connection(app, db, dsn):
    store = pymem.MemoryStore.get_or_create("notes", db=db)
    other = pymem.MemoryStore.get_or_create("other", db=db)
    with psycopg.connect(app, autocommit=True) as conn:
        with pytest.raises(ZeroDivisionError):
            with conn.transaction(), store.bound(conn) as bound:
                assert bound is store
                store.write_text("a.md", "one")
                store.update_json("b.json", lambda v: v + 1, default=0)
                other.write_text("c.md", "outside the block's store: the pool")
                assert store.list_paths() == ["a.md", "b.json"]
                1 / 0
        assert entries(dsn) == [] and entries(dsn, "other") == [("c.md",)]
        with conn.transaction(), store.bound(conn):
            store.write_text("a.md", "one")
        assert entries(dsn) == [("a.md",)]
    with pytest.raises(pymem.ValidationError, match="psycopg.Connection"):
        store.write_text("x.md", "x", conn=object())


def test_an_async_store_joins_the_callers_transaction(app, dsn):
    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=2)) as adb:
            store = await pymem.AsyncMemoryStore.get_or_create("notes", db=adb)
            async with await psycopg.AsyncConnection.connect(app) as aconn:
                await store.write_text("a.md", "one", conn=aconn)
                async with store.bound(aconn):
                    await store.write_text("b.md", "two")
                    assert await store.list_paths() == ["a.md", "b.md"]
                assert await store.list_paths() == []
                await aconn.rollback()
                async with store.bound(aconn):
                    await store.write_text("c.md", "three")
                await aconn.commit()
            assert await store.list_paths() == ["c.md"]
    asyncio.run(main())


def test_purge_in_the_callers_transaction(app, db, dsn):
    from pymem import lifecycle

    mem = Memory(db=db, agent_id="shop-bot")
    mem.persist("A short-lived fact", user="alice", ttl=3600)
    with psycopg.connect(dsn) as c:
        c.execute("UPDATE pymem.facts SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL")
    with psycopg.connect(dsn) as conn:
        assert lifecycle.purge(db, conn=conn)["facts"] == 1
        assert counts(dsn)["facts"] == 1  # not yet committed
        conn.rollback()
        assert counts(dsn)["facts"] == 1
        with pymem.bound(db, conn):
            assert lifecycle.purge(db)["facts"] == 1
        conn.commit()
    assert counts(dsn)["facts"] == 0


def test_the_change_feed_in_the_callers_transaction(db, dsn):
    from pymem import changes

    with psycopg.connect(dsn) as conn:
        assert changes.configure(db, enabled=True, conn=conn) is True
        assert changes.enabled(db, conn=conn) and not changes.enabled(db)
        conn.rollback()
        assert not changes.enabled(db)
        with pymem.bound(db, conn):
            changes.configure(db, enabled=True)
            Memory(db=db, agent_id="shop-bot").persist("Likes tea", user="alice", conn=conn)
            assert changes.position(db) == 0
        conn.commit()
        assert changes.enabled(db)
        # a read of the feed runs in a transaction that has not written yet: the caller's may be one
        assert [c.kind for c in changes.changes_since(db, conn=conn)] == ["fact"]
        conn.rollback()


def test_forget_user_in_the_callers_transaction(app, db, dsn):
    mem = Memory(db=db, agent_id="shop-bot")
    mem.persist("Likes tea", user="alice")
    with psycopg.connect(dsn) as conn:
        receipt = pymem.erasure.forget_user(db, "alice", conn=conn)
        assert receipt.counts["facts"] == 1 and counts(dsn)["facts"] == 1
        conn.rollback()
        assert counts(dsn)["facts"] == 1
        with pymem.bound(db, conn):
            pymem.erasure.forget_user(db, "alice")
            assert counts(dsn)["facts"] == 1
            mem.persist("Likes coffee", user="carol")  # a Memory's calls are bound by mem.bound only: the pool
            assert counts(dsn, "carol")["facts"] == 1
        conn.commit()
    assert counts(dsn)["facts"] == 0
    with psycopg.connect(app) as conn:  # Memory.forget_user takes conn= too
        mem.persist("Likes coffee", user="alice")
        mem.forget_user(user="alice", conn=conn)
        conn.rollback()
    assert counts(dsn)["facts"] == 1
