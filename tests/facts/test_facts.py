"""Conformance suite for durable facts (sql/api/facts*.sql, pymem/facts.py), on a real server."""

from __future__ import annotations

import asyncio
import threading
import warnings

import psycopg
import pytest
from pgvector import Vector

import pymem
from pymem import HashEmbedder, Memory


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


@pytest.fixture
def mem(db):
    return Memory(agent_id="support-bot", db=db, embedder=HashEmbedder())


def count(dsn, where="true") -> int:
    with psycopg.connect(dsn) as c:
        return c.execute(f"SELECT count(*) FROM pymem.facts WHERE {where}").fetchone()[0]


# --- 1. idempotent add ------------------------------------------------------------------


def test_add_is_idempotent_and_whitespace_does_not_make_a_new_fact(mem, dsn):
    first = mem.persist("Prefers email", id="alice")
    assert mem.persist("Prefers email", id="alice") == first
    assert mem.persist("  Prefers \n\t email  ", id="alice") == first
    assert mem.persist("Prefers\u00a0email", id="alice") == first  # NBSP is whitespace too
    assert mem.persist("prefers email", id="alice") != first  # case matters
    assert count(dsn) == 2
    [stored] = [f for f in mem.retrieve(id="alice") if f.id == first]
    assert stored.content == "Prefers email"


def test_an_idempotent_re_add_writes_nothing(dsn):
    """Re-adding a fact that is there (with its vector, from a known embedder) is a read: the
    transaction never gets a transaction id (no row written, no insert attempted that could
    write), and the WAL insert position does not move across the call (retried: autovacuum or
    a checkpoint of this test server may write WAL meanwhile, never on every try)."""
    vec = "[" + ",".join(["0.5"] * 8) + "]"
    add = ("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Prefers email', "
           "embedding => %s::vector, embedder => 'e8')")
    with psycopg.connect(dsn, autocommit=True) as c:
        first = c.execute(add, (vec,)).fetchone()
        assert first[1] is True
        with c.transaction():
            assert c.execute(add, (vec,)).fetchone() == (first[0], False)
            assert c.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()[0] is None
        moved = []
        for _ in range(5):
            before = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
            assert c.execute(add, (vec,)).fetchone() == (first[0], False)
            moved.append(c.execute("SELECT pg_current_wal_insert_lsn() <> %s::pg_lsn", (before,)).fetchone()[0])
            if not moved[-1]:
                break
        assert moved[-1] is False, moved
        # the first add of a new fact does write (the check above can fail)
        with c.transaction():
            c.execute(add.replace("Prefers email", "Prefers phone"), (vec,))
            assert c.execute("SELECT pg_current_xact_id_if_assigned()").fetchone()[0] is not None


def test_a_re_add_that_writes_nothing_still_checks_its_vector(dsn):
    """The re-add of a fact that has its vector reads no registry and attempts no insert, yet
    refuses what a first add refuses (22023, nothing written): a vector of another dimension than
    the embedder's, a zero vector, no embedder name; another embedder's vector is stored beside."""
    add = "SELECT id, created FROM pymem.fact_add('user', 'alice', 'Prefers email', embedding => %s, embedder => %s)"
    with pymem.connect(dsn) as c:
        first, created = c.execute(add, (Vector([0.5] * 8), "e8")).fetchone()
        assert created is True
        for vec, embedder in ((Vector([0.5] * 9), "e8"), (Vector([0.0] * 8), "e8"), (Vector([0.5] * 8), ""),
                              (Vector([0.5] * 8), None)):
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                c.execute(add, (vec, embedder))
        assert c.execute(add, (Vector([0.5] * 8), "e8")).fetchone() == (first, False)
        assert c.execute(add, (Vector([0.5] * 4), "e4")).fetchone() == (first, False)
        rows = c.execute("SELECT embedder, vector_dims(embedding) FROM pymem.fact_embeddings ORDER BY 1").fetchall()
        assert rows == [("e4", 4), ("e8", 8)]
        assert c.execute("SELECT name, dimension FROM pymem.embedders ORDER BY 1").fetchall() == [("e4", 4), ("e8", 8)]


def test_unicode_normalisation_forms_are_one_fact(mem):
    composed, decomposed = "Lives in Z\u00fcrich", "Lives in Zu\u0308rich"
    assert mem.persist(composed, id="u") == mem.persist(decomposed, id="u")


def test_long_content_is_idempotent(mem, dsn):
    long = "x" * 60_000 + " the end"
    a = mem.persist(long, id="alice")
    assert mem.persist(long + "   ", id="alice") == a
    assert count(dsn) == 1


def test_same_content_under_another_subject_is_another_fact(mem):
    assert mem.persist("Likes tea", id="alice") != mem.persist("Likes tea", id="bob")


def test_adding_superseded_text_creates_a_new_active_fact(mem):
    old = mem.persist("Prefers email", id="alice")
    mem.update("Prefers Slack", old="Prefers email", id="alice")
    again = mem.persist("Prefers email", id="alice")
    assert again != old
    assert {f.content for f in mem.retrieve(id="alice")} == {"Prefers email", "Prefers Slack"}


def test_concurrent_identical_adds_get_one_row_and_one_id(dsn):
    n = 24
    barrier = threading.Barrier(n)
    ids: list[int] = []
    errors: list[BaseException] = []
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(n)]

    def add(c):
        try:
            barrier.wait()
            ids.append(c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Allergic to peanuts')").fetchone()[0])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in conns:
        c.close()
    assert errors == []
    assert len(ids) == n and len(set(ids)) == 1
    assert count(dsn) == 1


def test_concurrent_add_waits_for_an_uncommitted_twin(dsn, lock_wait):
    """Explicit interleaving: A inserts inside an open transaction; B adds the same fact and
    must wait; A commits; B returns A's id and created = false."""
    a = psycopg.connect(dsn)
    a_id = a.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Vegetarian')").fetchone()[0]
    out = {}
    b = threading.Thread(
        target=lambda: out.update(
            row=psycopg.connect(dsn, autocommit=True)
            .execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Vegetarian')")
            .fetchone()
        )
    )
    b.start()
    lock_wait(dsn, blocked_by=a.info.backend_pid)  # B waits for A's uncommitted row
    assert "row" not in out
    a.commit()
    b.join(30)
    assert out["row"] == (a_id, False)
    a.close()


# --- 2. newest-first reads --------------------------------------------------------------


def test_newest_first_with_limit_not_used_up_by_superseded_rows(mem):
    ids = [mem.persist(f"fact {i}", id="alice") for i in range(6)]
    for i in range(3):
        mem.update(f"fact {i} v2", fact_id=ids[i], id="alice")
    got = mem.retrieve(id="alice", limit=5)
    assert len(got) == 5 and all(f.active for f in got)
    assert [f.content for f in got] == ["fact 2 v2", "fact 1 v2", "fact 0 v2", "fact 5", "fact 4"]


def test_ties_on_created_at_break_by_id_descending(mem, dsn):
    ids = [mem.persist(f"tie {i}", id="alice") for i in range(4)]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE pymem.facts SET created_at = '2026-01-01'")
    assert [f.id for f in mem.retrieve(id="alice")] == sorted(ids, reverse=True)


# --- 3. safe scoping --------------------------------------------------------------------


def test_empty_user_id_reads_nothing_and_cannot_delete_or_write(mem, dsn):
    mem.persist("a", id="alice")
    assert mem.retrieve(id="") == []
    with pytest.raises(pymem.ValidationError, match="needs a user"):  # no user at all: not a silent []
        mem.retrieve(tier="user")
    # a delete given an unset id says so (issue 29): it does not report that it deleted nothing
    with pytest.raises(pymem.ValidationError, match="empty id names no one"):
        mem.forget(id="")
    with pytest.raises(pymem.ValidationError, match="empty id names no one"):
        mem.forget(tier="project", id="")
    with pytest.raises(pymem.ValidationError, match="empty id names no one"):
        mem.forget(id="", content="a")
    with psycopg.connect(dsn, autocommit=True) as c:
        for sql in ("SELECT pymem.facts_forget('user', '')", "SELECT pymem.fact_forget('user', '', content => 'a')",
                    "SELECT pymem.facts_forget('project', '')"):
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                c.execute(sql)
    assert count(dsn) == 1
    with pytest.raises(pymem.ValidationError):
        mem.persist("b", id="")
    with pytest.raises(pymem.ValidationError):
        mem.persist("b", id="*")


def test_wildcard_reads_and_forgets_every_subject_of_a_scope_on_purpose(mem, dsn):
    mem.persist("a", id="alice")
    mem.persist("b", id="bob")
    mem.persist("g", tier="global")
    assert {f.scope_id for f in mem.retrieve(id="*")} == {"alice", "bob"}
    assert mem.forget(id="*") == 2
    assert count(dsn) == 1  # the agent fact is another scope


def test_empty_agent_id_is_refused_where_it_would_mean_every_agent(db, dsn):
    with pytest.raises(pymem.ValidationError):
        Memory(agent_id="", db=db)
    with pytest.raises(pymem.ValidationError):
        Memory(agent_id="*", db=db)
    anon = Memory(db=db)
    with pytest.raises(pymem.ValidationError, match="every agent"):
        anon.retrieve(tier="global")
    with pytest.raises(pymem.ValidationError, match="every agent"):
        anon.forget(tier="global")
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.errors.InvalidParameterValue):
        c.execute("SELECT pymem.facts_forget('agent', '')")


def test_global_fact_without_agent_id_warns_and_no_agent_sees_it(db):
    anon = Memory(db=db)
    with pytest.warns(UserWarning, match="no agent will ever see it"):
        anon.persist("orphan", tier="global")
    bot = Memory(agent_id="bot", db=db)
    assert bot.retrieve(tier="global") == []
    assert [f.content for f in bot.retrieve(tier="global", id="*")] == ["orphan"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bot.persist("shared truth", tier="global")  # no warning with an agent id
    assert [f.content for f in bot.retrieve(tier="global")] == ["shared truth"]


def test_projects_are_isolated_partitions(db):
    a = Memory(agent_id="bot", project_id="acme", db=db, embedder=HashEmbedder())
    b = Memory(agent_id="bot", project_id="globex", db=db, embedder=HashEmbedder())
    fid = a.persist("Prefers email", id="alice")
    a.persist("policy", tier="global")
    assert b.retrieve(id="alice") == [] and b.retrieve(id="*") == [] and b.retrieve(tier="global") == []
    assert b.retrieve("email", id="alice") == []
    assert b.history(id="alice") == []
    assert b.forget(id="alice") == 0 and b.forget(id="*") == 0
    with pytest.raises(pymem.NotFoundError):
        b.update("x", fact_id=fid, id="alice")
    with pytest.raises(pymem.NotFoundError):
        b.history(id="alice", fact_id=fid)
    assert b.persist("Prefers email", id="alice") != fid
    assert [f.id for f in a.retrieve(id="alice")] == [fid]


# --- 4. supersede chains ----------------------------------------------------------------


def test_supersede_by_content_and_by_id_keeps_a_readable_history(mem):
    v1 = mem.persist("Prefers email", id="alice")
    v2 = mem.update("Prefers Slack", old="Prefers email", id="alice")
    v3 = mem.update("Prefers Teams", fact_id=v2, id="alice")
    assert [f.content for f in mem.retrieve(id="alice")] == ["Prefers Teams"]
    chain = mem.history(id="alice", fact_id=v2)
    assert [(f.id, f.superseded_by) for f in chain] == [(v1, v2), (v2, v3), (v3, None)]
    assert all(f.superseded_at is not None for f in chain[:2])
    assert [f.id for f in mem.history(id="alice")] == [v3, v2, v1]


def test_supersede_rules(mem, dsn):
    a = mem.persist("Prefers email", id="alice")
    b = mem.persist("Likes tea", id="alice")
    bob = mem.persist("Bob fact", id="bob")
    with pytest.raises(pymem.ValidationError, match="supersede itself"):
        mem.update(" Prefers email ", fact_id=a, id="alice")
    with pytest.raises(pymem.NotFoundError):
        mem.update("x", fact_id=bob, id="alice")  # no supersede across subjects
    with pytest.raises(pymem.NotFoundError):
        mem.update("x", old="never said", id="alice")
    with pytest.raises(pymem.ValidationError, match="exactly one"):
        mem.update("x", id="alice")
    with pytest.raises(pymem.ValidationError, match="exactly one"):
        mem.update("x", old="Prefers email", fact_id=a, id="alice")
    mem.update("Prefers Slack", fact_id=a, id="alice")
    with pytest.raises(pymem.ConflictError) as again:
        mem.update("Prefers Teams", fact_id=a, id="alice")
    assert again.value.sqlstate == "PM201"
    with pytest.raises(pymem.ConflictError) as by_content:
        mem.update("Prefers Teams", old="Prefers email", id="alice")
    assert by_content.value.sqlstate == "PM201"
    assert b in {f.id for f in mem.retrieve(id="alice")}


def test_failed_supersede_writes_nothing(mem, dsn):
    a = mem.persist("Prefers email", id="alice")
    mem.persist("Likes tea", id="alice")
    before = count(dsn)
    with pytest.raises(pymem.ValidationError):
        mem.update(" Prefers  email", fact_id=a, id="alice")
    with pytest.raises(pymem.ValidationError):
        mem.update("", fact_id=a, id="alice")
    with pytest.raises(pymem.NotFoundError):
        mem.update("Likes tea", old="Likes coffee", id="alice")
    assert count(dsn) == before and count(dsn, "superseded_by IS NOT NULL") == 0


def test_chain_constraints_hold_against_direct_sql(mem, dsn):
    a = mem.persist("one", id="alice")
    bob = mem.persist("two", id="bob")
    with psycopg.connect(dsn, autocommit=True) as c:
        with pytest.raises(psycopg.errors.CheckViolation):
            c.execute("UPDATE pymem.facts SET superseded_by = id, superseded_at = now() WHERE id = %s", (a,))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):  # across subjects
            c.execute("UPDATE pymem.facts SET superseded_by = %s, superseded_at = now() WHERE id = %s", (bob, a))
        with pytest.raises(psycopg.errors.ForeignKeyViolation):  # dangling
            c.execute("UPDATE pymem.facts SET superseded_by = 999999, superseded_at = now() WHERE id = %s", (a,))


def test_two_concurrent_supersedes_have_exactly_one_winner(dsn, lock_wait):
    """Explicit interleaving: A supersedes inside an open transaction; B supersedes the same
    fact and must wait on A's row lock; A commits; B gets PM201 and writes nothing."""
    with psycopg.connect(dsn, autocommit=True) as c:
        fid = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Prefers email')").fetchone()[0]
    a = psycopg.connect(dsn)
    a.execute("SELECT pymem.fact_supersede('user', 'alice', 'Prefers Slack', id => %s)", (fid,))
    out: dict = {}

    def b():
        with psycopg.connect(dsn, autocommit=True) as c:
            try:
                c.execute("SELECT pymem.fact_supersede('user', 'alice', 'Prefers Teams', id => %s)", (fid,))
                out["won"] = True
            except psycopg.Error as exc:
                out["sqlstate"] = exc.sqlstate

    t = threading.Thread(target=b)
    t.start()
    lock_wait(dsn, blocked_by=a.info.backend_pid)  # B waits for A's lock on the old row
    assert out == {}
    a.commit()
    t.join(30)
    a.close()
    assert out == {"sqlstate": "PM201"}
    assert count(dsn, "superseded_by IS NULL") == 1
    assert count(dsn, "content = 'Prefers Teams'") == 0


def test_many_concurrent_supersedes_of_one_fact(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        fid = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'v0')").fetchone()[0]
    n = 16
    barrier = threading.Barrier(n)
    results: list = []

    def go(i):
        with psycopg.connect(dsn, autocommit=True) as c:
            barrier.wait()
            try:
                c.execute("SELECT pymem.fact_supersede('user', 'alice', %s, id => %s)", (f"v{i + 1}", fid))
                results.append("won")
            except psycopg.Error as exc:
                results.append(exc.sqlstate)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results.count("won") == 1 and results.count("PM201") == n - 1
    assert count(dsn) == 2


# --- 5. forget --------------------------------------------------------------------------


def test_forget_subject_removes_history_and_counts_it(mem, dsn):
    mem.persist("Prefers email", id="alice")
    mem.update("Prefers Slack", old="Prefers email", id="alice")
    mem.persist("Likes tea", id="alice")
    mem.persist("Bob's", id="bob")
    assert mem.forget(id="alice") == 3
    assert mem.history(id="alice") == []
    assert count(dsn) == 1
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.fact_embeddings WHERE scope_id = 'alice'").fetchone()[0] == 0


def test_forget_one_fact_by_id_or_content_takes_its_history(mem, dsn):
    v1 = mem.persist("Prefers email", id="alice")
    v2 = mem.update("Prefers Slack", fact_id=v1, id="alice")
    keep = mem.persist("Likes tea", id="alice")
    assert mem.forget(id="alice", content="  Prefers Slack ") == 2
    assert [f.id for f in mem.history(id="alice")] == [keep]
    assert mem.forget(id="alice", content="not there") == 0
    assert mem.forget(id="alice", fact_id=keep) == 1
    assert mem.forget(id="alice", fact_id=v2) == 0
    with pytest.raises(pymem.ValidationError):
        mem.forget(id="*", fact_id=keep)


def test_forgetting_a_middle_version_leaves_no_dangling_pointer(mem, dsn):
    v1 = mem.persist("a1", id="alice")
    v2 = mem.update("a2", fact_id=v1, id="alice")
    v3 = mem.update("a3", fact_id=v2, id="alice")
    assert mem.forget(id="alice", fact_id=v2) == 2  # v2 and v1, which it superseded
    chain = mem.history(id="alice", fact_id=v3)
    assert [(f.id, f.superseded_by) for f in chain] == [(v3, None)]
    with psycopg.connect(dsn) as c:
        dangling = c.execute(
            """SELECT count(*) FROM pymem.facts f WHERE superseded_by IS NOT NULL AND NOT EXISTS
               (SELECT 1 FROM pymem.facts g WHERE g.id = f.superseded_by)"""
        ).fetchone()[0]
    assert dangling == 0


# --- 6. caps on learned facts -----------------------------------------------------------


def test_learned_facts_are_capped_per_subject_and_manual_ones_never(db, dsn):
    mem = Memory(agent_id="bot", db=db, max_learned_facts=3)
    manual = [mem.persist(f"manual {i}", id="alice") for i in range(5)]
    learned = [mem.persist(f"learned {i}", id="alice", source="learned", confidence=0.6) for i in range(6)]
    mem.persist("bob learned", id="bob", source="learned")
    got = mem.retrieve(id="alice", limit=100)
    assert {f.id for f in got if f.source == "manual"} == set(manual)
    assert [f.id for f in got if f.source == "learned"] == learned[::-1][:3]
    assert count(dsn, "scope_id = 'bob'") == 1
    uncapped = Memory(agent_id="bot", db=db, max_learned_facts=None)
    for i in range(5):
        uncapped.persist(f"more {i}", id="alice", source="learned")
    assert count(dsn, "scope_id = 'alice' AND source = 'learned'") == 8


def test_cap_holds_under_concurrent_learned_writers(dsn):
    n = 12
    barrier = threading.Barrier(n)

    def go(i):
        with psycopg.connect(dsn, autocommit=True) as c:
            barrier.wait()
            c.execute(
                "SELECT pymem.fact_add('user', 'alice', %s, write => pymem.fact_write(source => 'learned'), max_learned => 5)", (f"learned {i}",)
            )

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert count(dsn, "source = 'learned'") == 5


# --- 7. semantic retrieval --------------------------------------------------------------


def test_retrieve_by_meaning_ranks_the_relevant_fact_first(mem):
    mem.persist("The user is allergic to peanuts", id="alice")
    mem.persist("Prefers email over phone calls", id="alice")
    mem.persist("Works in the Berlin office", id="alice")
    mem.persist("Bob is allergic to peanuts too", id="bob")
    got = mem.retrieve("which foods with peanuts should we avoid", id="alice", k=2)
    assert got[0].content == "The user is allergic to peanuts"
    assert len(got) == 2 and all(f.scope_id == "alice" for f in got)
    assert got[0].similarity >= got[1].similarity


def test_semantic_retrieval_skips_superseded_and_honours_scoping(mem):
    mem.persist("Prefers email", id="alice")
    mem.update("Prefers Slack messages", old="Prefers email", id="alice")
    got = mem.retrieve("Prefers email", id="alice", k=5)
    assert [f.content for f in got] == ["Prefers Slack messages"]
    assert mem.retrieve("email", id="", k=5) == []
    with pytest.raises(pymem.ValidationError):
        Memory(db=mem.db, embedder=HashEmbedder()).retrieve("x", tier="global")


def test_facts_written_by_sql_are_embedded_in_one_batch_before_search(db, dsn):
    calls: list[int] = []

    class Counting(HashEmbedder):
        def embed(self, texts):
            calls.append(len(texts))
            return super().embed(texts)

    with psycopg.connect(dsn, autocommit=True) as c:
        for text in ("The user is allergic to peanuts", "Prefers email", "Works nights"):
            c.execute("SELECT pymem.fact_add('user', 'alice', %s)", (text,))
    mem = Memory(db=db, embedder=Counting())
    got = mem.retrieve("peanuts allergy", id="alice", k=1)
    assert [f.content for f in got] == ["The user is allergic to peanuts"]
    assert calls == [1, 3]  # the query, then one batch for the three facts
    mem.retrieve("peanuts allergy", id="alice", k=1)
    assert calls == [1, 3, 1]  # nothing left to catch up: one statement


def test_embedders_never_mix_and_wrong_dimensions_are_refused(db, dsn):
    small, large = HashEmbedder(64), HashEmbedder(384)
    m_small = Memory(db=db, embedder=small)
    m_large = Memory(db=db, embedder=large)
    m_small.persist("The user is allergic to peanuts", id="alice")
    assert m_large.retrieve("peanuts", id="alice", k=1)[0].content == "The user is allergic to peanuts"
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            "SELECT embedder, vector_dims(embedding) FROM pymem.fact_embeddings ORDER BY embedder"
        ).fetchall()
    assert rows == sorted([(small.name, 64), (large.name, 384)])

    # a 64-d vector under the 384-d embedder's name
    with pymem.connect(dsn) as c, pytest.raises(psycopg.errors.InvalidParameterValue):
        c.execute(
            "SELECT pymem.fact_add('user', 'alice', 'x', embedding => %s, embedder => %s)",
            (Vector([0.1] * 64), large.name),
        )
    assert count(dsn, "content = 'x'") == 0


# --- errors and bad input ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"content": ""}, "empty"),
        ({"content": "   "}, "empty"),
        ({"content": "x" * 65537}, "65536"),
        ({"content": "a\x00b"}, "NUL"),
        ({"content": "\ud800"}, "Unicode"),
        ({"content": 42}, "string"),
        ({"confidence": 1.5}, "confidence"),
        ({"confidence": -0.1}, "confidence"),
        ({"confidence": float("nan")}, "confidence"),
        ({"source": "gossip"}, "source"),
        ({"tier": "session"}, "tier"),
        ({"metadata": ["not", "an", "object"]}, "metadata"),
        ({"id": "a" * 257}, "256"),
    ],
)
def test_bad_input_is_a_validation_error_and_writes_nothing(mem, dsn, kwargs, match):
    args = {"content": "ok", "id": "alice"} | kwargs
    content = args.pop("content")
    with pytest.raises(pymem.ValidationError, match=match):
        mem.persist(content, **args)
    assert count(dsn) == 0


@pytest.mark.parametrize("limit", [-1, 10_001, 2**40])
def test_bad_limits_are_refused(mem, limit):
    with pytest.raises(pymem.ValidationError):
        mem.retrieve(id="alice", limit=limit)


def test_unknown_fact_id_is_not_found(mem):
    with pytest.raises(pymem.NotFoundError) as err:
        mem.history(id="alice", fact_id=123456)
    assert err.value.sqlstate == "P0002"


# --- async twin -------------------------------------------------------------------------


def test_async_memory_matches_sync(dsn):
    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:
            mem = pymem.AsyncMemory(db=adb, agent_id="bot", embedder=HashEmbedder())
            a = await mem.persist("Prefers email", id="alice")
            assert await mem.persist(" Prefers email", id="alice") == a
            b = await mem.update("Prefers Slack", old="Prefers email", id="alice")
            chain = await mem.history(id="alice", fact_id=b)
            best = await mem.retrieve("slack", id="alice", k=1)
            gone = await mem.forget(id="alice")
            return a, b, [f.id for f in chain], best[0].content, gone

    a, b, chain, best, gone = asyncio.run(main())
    assert chain == [a, b] and best == "Prefers Slack" and gone == 2


def test_embedder_names_are_per_project(db, dsn):
    """One tenant registering a name with another dimension must not lock another tenant out."""
    evil = Memory(db=db, project_id="evil", embedder=HashEmbedder(2))
    evil.persist("claims the name", id="x")
    assert evil.embedder.name == "hash-2-v1"

    class SameName(HashEmbedder):
        name = "hash-2-v1"  # the same name, 3 dimensions, in another project

    acme = Memory(db=db, project_id="acme", embedder=SameName(3))
    acme.persist("works", id="alice")
    assert [f.content for f in acme.retrieve("works", id="alice", k=1)] == ["works"]
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT project_id, dimension FROM pymem.embedders ORDER BY 1").fetchall() == [
            ("acme", 3), ("evil", 2)]


# --- 8. the '*' branches -----------------------------------------------------------------
# Every wildcard-capable function (facts_newest, fact_history, facts_search, facts_forget) has
# two paired branches (one subject, or every subject of the
# scope with '*'), each planned on its own index. These check that the '*' branch returns what
# the per-subject branch returns for every subject, merged: the two can never drift apart.

WILDCARD_SUBJECTS = ("ann", "bob", "cy")


@pytest.fixture
def wild(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        for s in WILDCARD_SUBJECTS:
            for i in range(4):
                c.execute("SELECT pymem.fact_add('user', %s, %s, embedding => %s, embedder => 'e3')",
                          (s, f"{s} fact {i}", f"[1,{i + 1},{len(s)}]"))
            c.execute("SELECT pymem.fact_supersede('user', %s, %s, old_content => %s)", (s, f"{s} fact 0 v2", f"{s} fact 0"))
            c.execute("SELECT pymem.fact_add('user', %s, %s)", (s, f"{s} unembedded"))
            c.execute("SELECT pymem.fact_add('user', %s, 'shared fact')", (s,))
    return dsn


def _rows(c, query, subject, *args):
    return c.execute(query, (subject, *args)).fetchall()


@pytest.mark.parametrize("query, order", [
    ("SELECT id, content FROM pymem.facts_newest('user', %s, max_facts => 7)", "newest"),
    ("SELECT id, content FROM pymem.fact_history('user', %s, max_facts => 9)", "newest"),
    ("SELECT id, content, round(similarity::numeric, 9) FROM pymem.facts_search('user', %s, '[1,2,3]', 'e3', k => 5) "
     "WHERE similarity IS NOT NULL", "similarity"),
])
def test_wildcard_reads_equal_the_per_subject_reads_merged(wild, query, order):
    with psycopg.connect(wild) as c:
        every = _rows(c, query, "*")
        per = [r for s in WILDCARD_SUBJECTS for r in _rows(c, query, s)]
        assert every and per
        if order == "newest":  # ties on created_at break by id descending: ids grow with time here
            merged = sorted(per, key=lambda r: r[0], reverse=True)
        else:
            merged = sorted(per, key=lambda r: (-r[2], -r[0]))
        assert every == merged[: len(every)]
        assert len(every) == min(len(merged), {"newest": 7 if "newest" in query else 9, "similarity": 5}[order])


@pytest.mark.parametrize("call", ["SELECT pymem.facts_forget('user', %s)"])
def test_wildcard_forgets_equal_the_per_subject_forgets(wild, dsn, call, pg_server):
    from conftest import _janitor, dsn_for  # a twin of the same data, to run the per-subject way

    twin = f"pymem_wild_twin_{abs(hash(call)) % 10000}"
    janitor = _janitor(pg_server, twin, template_dbname=psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    janitor.drop()
    janitor.init()
    try:
        other = dsn_for(pg_server, twin)
        with psycopg.connect(wild, autocommit=True) as c:
            all_at_once = c.execute(call, ("*",)).fetchone()[0]
            left = c.execute("SELECT scope_id, content FROM pymem.facts ORDER BY 1, 2").fetchall()
        with psycopg.connect(other, autocommit=True) as c:
            one_by_one = sum(c.execute(call, (s,)).fetchone()[0] for s in WILDCARD_SUBJECTS)
            assert c.execute("SELECT scope_id, content FROM pymem.facts ORDER BY 1, 2").fetchall() == left
        assert all_at_once == one_by_one > 0
    finally:
        janitor.drop()
