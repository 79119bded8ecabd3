"""Supersede onto content that is already an active fact (issue 13, point 1): the old fact is
retired into that fact, and history becomes a tree merging into its newest version
(sql/api/facts_versions.sql fact_supersede / fact_chain, pymem Memory.update / history). On a real
server; interleavings are proven by lock waits (pg_blocking_pids), never by sleeps."""

from __future__ import annotations

import asyncio
import json
import threading

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import pymem
from pymem import HashEmbedder, Memory
from pymem.portability import export_user, import_user
from test_facts_plans import facts_scans, plans_of


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


@pytest.fixture
def mem(db):
    return Memory(agent_id="bot", db=db, embedder=HashEmbedder())


def rows(dsn, sql="SELECT id, content, superseded_by FROM pymem.facts ORDER BY id", params=()):
    with psycopg.connect(dsn) as c:
        return c.execute(sql, params).fetchall()


def add(c, content, user="alice"):
    return c.execute("SELECT id FROM pymem.fact_add('user', %s, %s)", (user, content)).fetchone()[0]


# Every fact reaches an active fact through its successors: walking back from the active
# facts through predecessors reaches every row exactly once (a row on, or leading into, a
# cycle would never be reached; a fact with two successors cannot be stored).
HISTORY_IS_A_FOREST = """
WITH RECURSIVE back AS (
    SELECT f.project_id, f.scope, f.scope_id, f.id FROM pymem.facts AS f WHERE f.superseded_by IS NULL
    UNION ALL
    SELECT p.project_id, p.scope, p.scope_id, p.id FROM back AS b JOIN pymem.facts AS p
      ON (p.project_id, p.scope, p.scope_id, p.superseded_by) = (b.project_id, b.scope, b.scope_id, b.id)
)
SELECT (SELECT count(*) FROM back), (SELECT count(DISTINCT (project_id, scope, scope_id, id)) FROM back),
       (SELECT count(*) FROM pymem.facts)"""


def assert_forest(dsn):
    reached, distinct, total = rows(dsn, HISTORY_IS_A_FOREST)[0]
    assert reached == distinct == total, (reached, distinct, total)


# --- Python: the SDK's conformance case ---------------------------------------------------


def test_update_onto_an_active_fact_retires_the_old_one_into_it(mem, dsn):
    """v1 and v2 both active; update(v2's content, old=v1) -> v2 active, v1 hidden, no new row."""
    v1 = mem.persist("Prefers email", id="alice", metadata={"from": "signup"})
    v2 = mem.persist("Prefers Slack", id="alice", confidence=0.7, metadata={"from": "chat"})
    before = rows(dsn, "SELECT * FROM pymem.facts WHERE id = %s", (v2,))
    got = mem.update(" Prefers  Slack ", old="Prefers email", id="alice", confidence=0.1, metadata={"x": 1})
    assert got == v2 and isinstance(got, int) and got.created is False
    assert [f.id for f in mem.retrieve(id="alice")] == [v2]
    assert [f.id for f in mem.retrieve("how should we contact her?", id="alice", k=5)] == [v2]
    assert rows(dsn, "SELECT * FROM pymem.facts WHERE id = %s", (v2,)) == before  # unchanged
    assert rows(dsn) == [(v1, "Prefers email", v2), (v2, "Prefers Slack", None)]
    chain = mem.history(id="alice", fact_id=v2)
    assert [(f.id, f.superseded_by, f.depth) for f in chain] == [(v1, v2, 1), (v2, None, 0)]
    assert mem.history(id="alice", fact_id=v1) == chain
    assert chain[0].superseded_at is not None
    # by id as well, and a new version still reports created
    v3 = mem.persist("Prefers Teams", id="alice")
    assert mem.update("Prefers Teams", fact_id=v2, id="alice") == v3
    v4 = mem.update("Prefers phone", fact_id=v3, id="alice")
    assert v4.created is True and v4 not in (v1, v2, v3)
    assert [f.id for f in mem.retrieve(id="alice")] == [v4]
    assert_forest(dsn)


def test_async_update_merges_too(dsn):
    async def go():
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn))
        try:
            mem = pymem.AsyncMemory(agent_id="bot", db=db)
            v1 = await mem.persist("Lives in Oslo", id="bob")
            v2 = await mem.persist("Lives in Bergen", id="bob")
            got = await mem.update("Lives in Bergen", old="Lives in Oslo", id="bob")
            assert (got, got.created) == (v2, False)
            assert [f.id for f in await mem.retrieve(id="bob")] == [v2]
            assert [f.id for f in await mem.history(id="bob", fact_id=v2)] == [v1, v2]
        finally:
            await db.close()

    asyncio.run(go())


def test_fact_id_is_an_int_that_pickles_and_binds(mem):
    import pickle

    v1 = mem.persist("a", id="alice")
    v2 = mem.persist("b", id="alice")
    got = mem.update("b", fact_id=v1, id="alice")
    back = pickle.loads(pickle.dumps(got))
    assert (back, back.created, type(back)) == (v2, False, pymem.FactId)
    assert repr(got) == f"FactId({int(v2)}, created=False)"
    assert mem.history(id="alice", fact_id=got)[-1].id == v2  # binds as a bigint


# --- SQL ----------------------------------------------------------------------------------


def test_sql_reports_the_active_fact_and_whether_it_was_created(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        a = add(c, "Prefers email")
        b = add(c, "Prefers Slack")
        merged = c.execute("SELECT * FROM pymem.fact_supersede('user', 'alice', 'Prefers Slack', id => %s)",
                           (a,)).fetchone()
        assert merged == (b, False)
        new = c.execute("SELECT id, created FROM pymem.fact_supersede('user', 'alice', 'Prefers Teams', "
                        "old_content => 'Prefers Slack')").fetchone()
        assert new[1] is True and new[0] > b
        chain = c.execute("SELECT id, superseded_by, depth FROM pymem.fact_chain('user', 'alice', %s)", (a,)).fetchall()
        assert chain == [(a, b, 2), (b, new[0], 1), (new[0], None, 0)]


def test_a_merge_stores_a_missing_vector_and_keeps_an_existing_one(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        a = add(c, "one")
        b = add(c, "two")
        c.execute("SELECT pymem.fact_supersede('user', 'alice', 'two', id => %s, embedding => '[1,0,0]', "
                  "embedder => 'e3')", (a,))
        d = add(c, "three")
        c.execute("SELECT pymem.fact_supersede('user', 'alice', 'two', id => %s, embedding => '[0,1,0]', "
                  "embedder => 'e3')", (d,))
        got = c.execute("SELECT fact_id, embedding::text FROM pymem.fact_embeddings").fetchall()
    assert got == [(b, "[1,0,0]")]


def test_history_is_a_tree_merging_into_the_newest_version(mem, dsn):
    """a1 -> a2 (a new version); b1 merged into a2; c1 -> c2 (new), then c2 merged into a2."""
    a1 = mem.persist("a1", id="alice")
    b1 = mem.persist("b1", id="alice")
    c1 = mem.persist("c1", id="alice")
    other = mem.persist("unrelated", id="alice")
    a2 = mem.update("a2", fact_id=a1, id="alice")
    assert mem.update("a2", fact_id=b1, id="alice") == a2
    c2 = mem.update("c2", fact_id=c1, id="alice")
    assert mem.update("a2", fact_id=c2, id="alice") == a2
    tree = mem.history(id="alice", fact_id=a2)
    assert {(f.id, f.superseded_by, f.depth) for f in tree} == {
        (c1, c2, 2), (a1, a2, 1), (b1, a2, 1), (c2, a2, 1), (a2, None, 0)}
    position = {f.id: i for i, f in enumerate(tree)}
    assert all(position[f.id] < position[f.superseded_by] for f in tree if f.superseded_by)  # predecessors first
    assert [f.depth for f in tree] == sorted((f.depth for f in tree), reverse=True)
    for member in (a1, b1, c1, c2):  # any version names the same history
        assert mem.history(id="alice", fact_id=member) == tree
    assert [f.id for f in mem.history(id="alice", fact_id=other)] == [other]
    # the subject's history: every row, the merged branches sharing a superseded_by
    hist = mem.history(id="alice")
    assert len(hist) == 6 and sum(f.superseded_by == a2 for f in hist) == 3
    assert {f.id for f in mem.retrieve(id="alice")} == {a2, other}
    assert_forest(dsn)
    # forgetting a branch takes that branch only; forgetting the newest version takes them all
    assert mem.forget(id="alice", fact_id=c2) == 2
    assert {f.id for f in mem.history(id="alice", fact_id=a2)} == {a1, b1, a2}
    assert mem.forget(id="alice", content="a2") == 3
    assert [f.id for f in mem.history(id="alice")] == [other]


def test_the_same_content_equals_the_old_is_still_refused(mem, dsn):
    """Retiring a fact into itself would change nothing while the call says the old content is
    no longer true: 22023, nothing written."""
    a = mem.persist("Prefers email", id="alice")
    with pytest.raises(pymem.ValidationError, match="supersede itself"):
        mem.update("Prefers\u00a0email ", fact_id=a, id="alice")
    assert rows(dsn) == [(a, "Prefers email", None)]


# --- concurrency --------------------------------------------------------------------------


def _in_thread(dsn, sql, params, out):
    def go():
        with psycopg.connect(dsn, autocommit=True) as c:
            try:
                out["row"] = c.execute(sql, params).fetchone()
            except psycopg.Error as exc:
                out["sqlstate"] = exc.sqlstate

    t = threading.Thread(target=go)
    t.start()
    return t


SUPERSEDE = "SELECT id, created FROM pymem.fact_supersede('user', 'alice', %s, id => %s)"


def test_two_supersedes_racing_onto_the_same_new_content_merge(dsn, lock_wait):
    """A supersedes x1 by "N" (creating it) in an open transaction; B supersedes x2 by "N" and
    waits for A; A commits; B merges x2 into A's new fact. (Before merges B got PM202.)"""
    with psycopg.connect(dsn, autocommit=True) as c:
        x1, x2 = add(c, "x1"), add(c, "x2")
    a = psycopg.connect(dsn)
    n, created = a.execute(SUPERSEDE, ("N", x1)).fetchone()
    assert created is True
    out: dict = {}
    t = _in_thread(dsn, SUPERSEDE, ("N", x2), out)
    lock_wait(dsn, blocked_by=a.info.backend_pid)
    assert out == {}
    a.commit()
    t.join(30)
    a.close()
    assert out == {"row": (n, False)}
    assert rows(dsn) == [(x1, "x1", n), (x2, "x2", n), (n, "N", None)]
    assert_forest(dsn)


def test_two_supersedes_racing_onto_the_same_existing_fact_merge(dsn, lock_wait):
    with psycopg.connect(dsn, autocommit=True) as c:
        x1, x2, target = add(c, "x1"), add(c, "x2"), add(c, "T")
    a = psycopg.connect(dsn)
    assert a.execute(SUPERSEDE, ("T", x1)).fetchone() == (target, False)
    out: dict = {}
    t = _in_thread(dsn, SUPERSEDE, ("T", x2), out)
    lock_wait(dsn, blocked_by=a.info.backend_pid)
    assert out == {}
    a.commit()
    t.join(30)
    a.close()
    assert out == {"row": (target, False)}
    assert rows(dsn) == [(x1, "x1", target), (x2, "x2", target), (target, "T", None)]
    with psycopg.connect(dsn) as c:
        tree = c.execute("SELECT id, depth FROM pymem.fact_chain('user', 'alice', %s)", (target,)).fetchall()
    assert sorted(tree) == [(x1, 1), (x2, 1), (target, 0)]


def test_two_supersedes_of_one_fact_onto_different_targets_have_one_winner(dsn, lock_wait):
    with psycopg.connect(dsn, autocommit=True) as c:
        x, t1, t2 = add(c, "x"), add(c, "T1"), add(c, "T2")
    a = psycopg.connect(dsn)
    assert a.execute(SUPERSEDE, ("T1", x)).fetchone() == (t1, False)
    out: dict = {}
    t = _in_thread(dsn, SUPERSEDE, ("T2", x), out)
    lock_wait(dsn, blocked_by=a.info.backend_pid)
    a.commit()
    t.join(30)
    a.close()
    assert out == {"sqlstate": "PM201"}
    assert rows(dsn) == [(x, "x", t1), (t1, "T1", None), (t2, "T2", None)]
    assert_forest(dsn)


def test_opposite_merges_racing_form_no_cycle_and_no_deadlock(dsn, lock_wait):
    """A retires p into q while B retires q into p's content: B waits for A (the subject lock,
    so no deadlock), then finds p retired and creates p's content anew: p -> q -> p'."""
    with psycopg.connect(dsn, autocommit=True) as c:
        p, q = add(c, "p"), add(c, "q")
    a = psycopg.connect(dsn)
    assert a.execute(SUPERSEDE, ("q", p)).fetchone() == (q, False)
    out: dict = {}
    t = _in_thread(dsn, SUPERSEDE, ("p", q), out)
    lock_wait(dsn, blocked_by=a.info.backend_pid)
    a.commit()
    t.join(30)
    a.close()
    p2, created = out["row"]
    assert created is True and p2 not in (p, q)
    assert rows(dsn) == [(p, "p", q), (q, "q", p2), (p2, "p", None)]
    assert_forest(dsn)


def test_a_merge_target_forgotten_concurrently_is_created_anew(dsn, lock_wait):
    """B forgets T in an open transaction; A supersedes x by T's content and waits for B's
    delete; B commits; A finds no active T any more and inserts it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        x, target = add(c, "x"), add(c, "T")
    b = psycopg.connect(dsn)
    assert b.execute("SELECT pymem.fact_forget('user', 'alice', id => %s)", (target,)).fetchone() == (1,)
    out: dict = {}
    t = _in_thread(dsn, SUPERSEDE, ("T", x), out)
    lock_wait(dsn, blocked_by=b.info.backend_pid)
    b.commit()
    t.join(30)
    b.close()
    new, created = out["row"]
    assert created is True and new != target
    assert rows(dsn) == [(x, "x", new), (new, "T", None)]


def test_a_forget_waits_for_a_merge_into_its_fact(dsn, lock_wait):
    """A merges x into T in an open transaction; B forgets T and waits; A commits; B deletes T
    with x, the branch just merged into it: no pointer is left dangling."""
    with psycopg.connect(dsn, autocommit=True) as c:
        x, target, keep = add(c, "x"), add(c, "T"), add(c, "keep")
    a = psycopg.connect(dsn)
    assert a.execute(SUPERSEDE, ("T", x)).fetchone() == (target, False)
    out: dict = {}
    t = _in_thread(dsn, "SELECT pymem.fact_forget('user', 'alice', id => %s)", (target,), out)
    lock_wait(dsn, blocked_by=a.info.backend_pid)
    a.commit()
    t.join(30)
    a.close()
    assert out == {"row": (2,)}
    assert rows(dsn) == [(keep, "keep", None)]


@pytest.mark.parametrize("lock_row", [True, False], ids=["lock-row-there", "first-locked-write"])
def test_a_supersede_waiting_for_its_old_row_holds_the_subject_lock(dsn, lock_wait, lock_row):
    """The subject lock comes first, then the old row, whether the subject's lock row is there
    or created by this call: while a supersede waits for the old row (here held by B), it
    already holds the subject's lock, which is what keeps opposite merges from deadlocking."""
    with psycopg.connect(dsn, autocommit=True) as c:
        x, y = add(c, "x"), add(c, "y")
        if lock_row:
            c.execute(SUPERSEDE, ("y2", y))  # a locked write: the subject's lock row is there from now on
        else:
            c.execute("DELETE FROM pymem.subject_locks")
    b = psycopg.connect(dsn)
    b.execute("SELECT 1 FROM pymem.facts WHERE id = %s FOR UPDATE", (x,))
    out: dict = {}
    t = _in_thread(dsn, SUPERSEDE, ("x2", x), out)
    lock_wait(dsn, blocked_by=b.info.backend_pid)
    with psycopg.connect(dsn, autocommit=True) as c:  # the lock row, committed or just inserted, is taken
        c.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            c.execute("INSERT INTO pymem.subject_locks (project_id, scope, scope_id) VALUES ('', 'user', 'alice') "
                      "ON CONFLICT ON CONSTRAINT subject_locks_pkey DO UPDATE SET scope_id = excluded.scope_id")
    b.rollback()
    t.join(30)
    b.close()
    new, created = out["row"]
    assert created is True
    assert rows(dsn, "SELECT id, content, superseded_by FROM pymem.facts WHERE id IN (%s, %s) ORDER BY id", (x, new)) == [
        (x, "x", new), (new, "x2", None)]


def test_a_successor_is_created_at_the_instant_its_predecessor_is_superseded(dsn):
    """The successor's created_at is the old fact's superseded_at: one instant, not two reads
    of the clock (given or not)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        x = add(c, "x")
        new = c.execute(SUPERSEDE, ("x2", x)).fetchone()[0]
        newer = c.execute("SELECT id FROM pymem.fact_supersede('user', 'alice', 'x3', id => %s, "
                          "write => pymem.fact_write(created_at => now() + interval '1 minute'))", (new,)).fetchone()[0]
        got = c.execute("SELECT o.superseded_at = n.created_at FROM pymem.facts AS o JOIN pymem.facts AS n "
                        "ON n.id = o.superseded_by WHERE o.id IN (%s, %s) ORDER BY o.id", (x, new)).fetchall()
    assert got == [(True,), (True,)]
    assert newer


def test_many_concurrent_supersedes_onto_one_content(dsn):
    """Sixteen sessions each retire their own fact into the same new content at once: one
    creates it, fifteen merge into it; one active fact, sixteen predecessors."""
    n = 16
    with psycopg.connect(dsn, autocommit=True) as c:
        olds = [add(c, f"old {i}") for i in range(n)]
    barrier = threading.Barrier(n)
    results: list = []

    def go(fid):
        with psycopg.connect(dsn, autocommit=True) as c:
            barrier.wait()
            results.append(c.execute(SUPERSEDE, ("the truth", fid)).fetchone())

    threads = [threading.Thread(target=go, args=(f,)) for f in olds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == n and len({r[0] for r in results}) == 1
    assert sorted(r[1] for r in results) == [False] * (n - 1) + [True]
    assert rows(dsn, "SELECT count(*) FROM pymem.facts WHERE superseded_by IS NULL")[0][0] == 1
    assert rows(dsn, "SELECT count(*) FROM pymem.facts WHERE superseded_by = %s", (results[0][0],))[0][0] == n
    assert_forest(dsn)


# --- invariants over random sequences -----------------------------------------------------

CONTENTS = ["tea", "coffee", "water", "juice", " tea ", "milk"]


def norm(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
def test_random_supersedes_forgets_and_adds_keep_history_a_forest(dsn):
    """Adds, supersedes (merges included), forgets of any version and reads over two users,
    against a model: the active facts match it, every update returns the active fact of its
    new content, and every superseded fact's successors end at an active fact."""
    db = pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2))
    mem = Memory(agent_id="bot", db=db)
    users = ["alice", "bob"]

    class Merges(RuleBasedStateMachine):
        @initialize()
        def reset(self):
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("TRUNCATE pymem.facts CASCADE")
            self.active: dict[str, dict[str, int]] = {u: {} for u in users}  # content -> id
            self.merges = 0

        @rule(u=st.sampled_from(users), content=st.sampled_from(CONTENTS))
        def add(self, u, content):
            self.active[u][norm(content)] = mem.persist(content, id=u)

        @rule(u=st.sampled_from(users), pick=st.integers(0, 9), content=st.sampled_from(CONTENTS))
        def supersede(self, u, pick, content):
            facts = self.active[u]
            if not facts:
                return
            old = sorted(facts)[pick % len(facts)]
            new = norm(content)
            if new == old:
                with pytest.raises(pymem.ValidationError):
                    mem.update(content, fact_id=facts[old], id=u)
                return
            got = mem.update(content, old=old, id=u)
            if new in facts:
                assert (got, got.created) == (facts[new], False)
                self.merges += 1
            else:
                assert got.created is True
            del facts[old]
            facts[new] = got

        @rule(u=st.sampled_from(users), pick=st.integers(0, 50))
        def forget_any_version(self, u, pick):
            hist = mem.history(id=u)
            if not hist:
                return
            victim = hist[pick % len(hist)]
            tree = mem.history(id=u, fact_id=victim.id)
            below = {victim.id}  # the victim and its predecessors, every branch
            for f in sorted(tree, key=lambda f: f.depth):
                if f.superseded_by in below:
                    below.add(f.id)
            assert mem.forget(id=u, fact_id=victim.id) == len(below)
            if victim.active:
                del self.active[u][norm(victim.content)]

        @rule(u=st.sampled_from(users), pick=st.integers(0, 50))
        def retired_versions_name_the_active_one(self, u, pick):
            hist = mem.history(id=u)
            if not hist:
                return
            tree = mem.history(id=u, fact_id=hist[pick % len(hist)].id)
            assert [f.depth for f in tree].count(0) == 1 and tree[-1].active and tree[-1].depth == 0
            assert sum(f.active for f in tree) == 1

        @invariant()
        def model_and_forest(self):
            if not hasattr(self, "active"):
                return
            for u in users:
                assert {norm(f.content): f.id for f in mem.retrieve(id=u, limit=1000)} == self.active[u]
            assert_forest(dsn)

    try:
        run_state_machine_as_test(
            Merges,
            settings=settings(max_examples=25, stateful_step_count=30, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]),
        )
    finally:
        db.close()


# --- portability --------------------------------------------------------------------------


def _shape(doc: dict) -> list:
    """The document's facts with ids replaced by contents and creation times."""
    by_id = {f["id"]: f for f in doc["facts"]}
    key = {i: (f["content"], str(f["created_at"])) for i, f in by_id.items()}
    return sorted((key[f["id"]], str(f["superseded_at"]), key.get(f["superseded_by"])) for f in doc["facts"])


def test_merged_histories_round_trip_through_export_and_import(db, mem, dsn):
    v1 = mem.persist("Prefers email", id="alice")
    v2 = mem.persist("Prefers Slack", id="alice")
    mem.update("Prefers Slack", fact_id=v1, id="alice")
    w1 = mem.persist("Prefers fax", id="alice")
    w2 = mem.update("Prefers pager", fact_id=w1, id="alice")
    mem.update("Prefers Slack", fact_id=w2, id="alice")
    mem.persist("Prefers email", id="alice")  # the retired text again, active
    doc = json.loads(json.dumps(export_user(db, "alice"), default=str))
    assert sum(f["superseded_by"] == v2 for f in doc["facts"]) == 2
    import_user(db, doc, project_id="acme", user_id="alice2")
    again = json.loads(json.dumps(export_user(db, "alice2", "acme"), default=str))
    assert _shape(again) == _shape(doc)
    copy = Memory(agent_id="bot", project_id="acme", db=db)
    head = next(f for f in copy.retrieve(id="alice2") if f.content == "Prefers Slack")
    assert sorted((f.content, f.depth) for f in copy.history(id="alice2", fact_id=head.id)) == [
        ("Prefers Slack", 0), ("Prefers email", 1), ("Prefers fax", 2), ("Prefers pager", 1)]
    assert_forest(dsn)


@pytest.mark.parametrize(("facts", "message"), [
    ([{"id": 1, "superseded_by": 2}, {"id": 2, "superseded_by": 3}, {"id": 3, "superseded_by": 2}, {"id": 4}],
     "3 fact.*cycle"),  # 1 leads into the cycle 2 <-> 3
    ([{"id": 5, "superseded_by": 9}, {"id": 7, "superseded_by": 9}, {"id": 9, "superseded_by": 7}], "3 fact.*cycle"),
])
def test_import_refuses_a_branch_that_leads_into_a_cycle(db, dsn, facts, message):
    doc = {"format": "pymem.user/1", "user_id": "carol",
           "facts": [{"content": f"fact {f['id']}", "superseded_at": "2026-01-02T00:00:00+00:00"
                      if f.get("superseded_by") else None, **f} for f in facts], "threads": []}
    with psycopg.connect(dsn, autocommit=True) as c, pytest.raises(psycopg.Error, match=message) as err:
        c.execute("SELECT pymem.user_import(%s)", (json.dumps(doc),))
    assert err.value.sqlstate == "22023"
    assert rows(dsn) == []


def test_import_accepts_a_merge(db, dsn):
    doc = {"format": "pymem.user/1", "user_id": "carol", "threads": [], "facts": [
        {"id": 1, "content": "a", "superseded_by": 3, "superseded_at": "2026-01-02T00:00:00+00:00"},
        {"id": 2, "content": "b", "superseded_by": 3, "superseded_at": "2026-01-03T00:00:00+00:00"},
        {"id": 3, "content": "c"}]}
    assert import_user(db, doc)["facts"] == 3
    got = rows(dsn)
    head = next(i for i, content, _ in got if content == "c")
    assert sorted((content, nxt) for _, content, nxt in got) == [("a", head), ("b", head), ("c", None)]


# --- plans --------------------------------------------------------------------------------


def test_chain_walks_use_the_predecessor_index_and_the_primary_key(dsn):
    """fact_chain over a 300-version history (100 merged branches) among 60k facts: index
    scans only, and the reads are the tree's rows, not the subject's or the table's."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("""INSERT INTO pymem.facts (scope, scope_id, content, content_key)
                     SELECT 'user', 'u' || (g % 3000), 'fact ' || g, pymem.fact_key('fact ' || g)
                       FROM generate_series(1, 60000) AS g""")
        c.execute("""DO $$ BEGIN
                       FOR i IN 1..100 LOOP
                         PERFORM pymem.fact_add('user', 'heavy', 'branch ' || i);
                         PERFORM pymem.fact_supersede('user', 'heavy', 'branch ' || i || ' v2', old_content => 'branch ' || i);
                         PERFORM pymem.fact_supersede('user', 'heavy', 'the newest', old_content => 'branch ' || i || ' v2');
                       END LOOP;
                     END $$""")
        c.execute("ANALYZE pymem.facts")
        head = c.execute("SELECT id FROM pymem.facts WHERE scope_id = 'heavy' AND superseded_by IS NULL").fetchone()[0]
        first = c.execute("SELECT min(id) FROM pymem.facts WHERE scope_id = 'heavy'").fetchone()[0]
        assert len(c.execute("SELECT * FROM pymem.fact_chain('user', 'heavy', %s)", (first,)).fetchall()) == 201
    scans = facts_scans(plans_of(dsn, [f"SELECT * FROM pymem.fact_chain('user', 'heavy', {first})",
                                       f"SELECT * FROM pymem.fact_chain('user', 'heavy', {head})"], repeat=6))
    assert scans
    for ns in scans:
        types = [n["Node Type"] for n in ns]
        assert "Seq Scan" not in types and "Bitmap Heap Scan" not in types, types
        used = {n.get("Index Name") for n in ns if n["Node Type"] in ("Index Scan", "Index Only Scan")}
        # facts_project_id_id (0021): a fact by id within its project, bounded like the primary key
        assert used <= {"facts_pkey", "facts_predecessor", "facts_project_id_id"}, used
        assert all(n["Actual Rows"] <= 201 for n in ns if n.get("Relation Name") == "facts")
