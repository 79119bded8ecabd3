"""Conversation memory and context(): turns, windows, summaries, recall, dedupe, learn,
isolation, one round trip, restarts. All against the real server."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import tempfile
import threading
from datetime import datetime, timedelta, timezone

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pymem
from pymem import HashEmbedder, Memory
from conftest import PlanLog, plan_nodes
from pymem.context import AGENT_HEADING, RECALL_HEADING, SUMMARY_HEADING, USER_HEADING


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def make(db, **kw) -> Memory:
    kw.setdefault("agent_id", "support-bot")
    kw.setdefault("embedder", HashEmbedder())
    return Memory(db=db, **kw)


def rows(dsn, sql, *args):
    with psycopg.connect(dsn) as c:
        return c.execute(sql, args).fetchall()


def n_messages(dsn) -> int:
    return rows(dsn, "SELECT count(*) FROM pymem.messages")[0][0]


# --- 1. turns ---------------------------------------------------------------------------


def test_a_turn_stores_both_messages_atomically(db, dsn):
    mem = make(db)
    res = mem.record("My name is Alice and I live in Oslo", "Nice to meet you, Alice.", user="alice")
    assert (res.user_seq, res.assistant_seq) == (1, 2)
    assert rows(dsn, "SELECT seq, role, content FROM pymem.messages ORDER BY seq") == [
        (1, "user", "My name is Alice and I live in Oslo"),
        (2, "assistant", "Nice to meet you, Alice."),
    ]
    # both messages carry a vector from the embedder
    assert rows(dsn, "SELECT count(*) FROM pymem.message_embeddings")[0][0] == 2


def test_turn_context_manager_records_only_a_completed_answered_turn(db, dsn):
    mem = make(db)
    with pytest.raises(RuntimeError), mem.turn("first question here", user="alice") as t:
        assert t.messages[-1] == {"role": "user", "content": "first question here"}
        raise RuntimeError("the model call failed")
    with mem.turn("second question here", user="alice"):
        pass  # no answer given
    assert n_messages(dsn) == 0
    with mem.turn("third question here", user="alice") as t:
        t.answer = "third answer"
    assert t.result.user_seq == 1 and n_messages(dsn) == 2


def test_a_failed_write_leaves_nothing(db, dsn):
    mem = make(db)
    with pytest.raises(pymem.ValidationError):
        mem.record("a fine question", "", user="alice")  # empty answer
    with pytest.raises(pymem.ValidationError):
        mem.record("a fine question", "x" * 262_145, user="alice")
    assert n_messages(dsn) == 0
    assert rows(dsn, "SELECT count(*) FROM pymem.threads")[0][0] == 0


def test_several_threads_per_user(db):
    mem = make(db)
    mem.record("question in thread a", "answer a", user="alice", thread="a")
    mem.record("question in thread b", "answer b", user="alice", thread="b")
    assert [m.content for m in mem.window(user="alice", thread="a")] == ["question in thread a", "answer a"]
    assert [m.content for m in mem.window(user="alice", thread="b")] == ["question in thread b", "answer b"]
    assert mem.window(user="alice") == []  # the default thread is empty


def test_messages_written_by_sql_from_another_service(db, dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.message_add(user_id => 'alice', content => 'I bought a red bicycle yesterday')")
        c.execute("SELECT * FROM pymem.turn_record(user_id => 'alice', user_content => 'hello', assistant_content => 'hi')")
    mem = make(db, window=0)  # nothing is in the window, so everything is recallable
    assert [m.seq for m in mem.window(user="alice", size=10)] == [1, 2, 3]
    got = mem.recall("bicycle", user="alice", k=1)
    assert [m.content for m in got] == ["I bought a red bicycle yesterday"]


# --- 2. window --------------------------------------------------------------------------


def test_window_is_the_last_n_oldest_first(db):
    mem = make(db, window=4)
    for i in range(5):
        mem.record(f"question {i}", f"answer {i}", user="alice")
    assert [m.content for m in mem.window(user="alice")] == ["question 3", "answer 3", "question 4", "answer 4"]
    ctx = mem.context("next question", user="alice")
    assert ctx[-5:] == [
        {"role": "user", "content": "question 3"},
        {"role": "assistant", "content": "answer 3"},
        {"role": "user", "content": "question 4"},
        {"role": "assistant", "content": "answer 4"},
        {"role": "user", "content": "next question"},
    ]


def test_concurrent_turns_of_one_user_keep_the_window_ordered_and_complete(db, dsn):
    mem = make(db, window=100)
    n = 8
    barrier = threading.Barrier(n)

    def go(i):
        barrier.wait()
        mem.record(f"question {i}", f"answer {i}", user="alice")

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    window = mem.window(user="alice", size=100)
    assert [m.seq for m in window] == list(range(1, 2 * n + 1))
    for q, a in zip(window[::2], window[1::2]):  # each turn's two messages stay together
        assert q.role == "user" and a.role == "assistant" and q.content[-1] == a.content[-1]


# --- 3. summaries -----------------------------------------------------------------------


def joiner(previous, messages, max_chars):
    return " / ".join(filter(None, [previous] + [m["content"] for m in messages]))


def test_running_summary_folds_everything_older_than_keep_last(db, dsn):
    calls = []

    def summarizer(previous, messages, max_chars):
        calls.append([m["seq"] for m in messages])
        return joiner(previous, messages, max_chars)

    mem = make(db, summarizer=summarizer, summarize_every=4, keep_last=2)
    for i in range(5):
        mem.record(f"q{i}", f"a{i}", user="alice")
    # 10 messages: due at 6 (4 older than the last 2), then at 10 (4 more)
    assert calls == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert mem.summary(user="alice") == "q0 / a0 / q1 / a1 / q2 / a2 / q3 / a3"
    assert rows(dsn, "SELECT summary_through FROM pymem.threads")[0][0] == 8
    messages = mem.context("what now", user="alice")
    assert {"role": "system", "content": SUMMARY_HEADING + "\nq0 / a0 / q1 / a1 / q2 / a2 / q3 / a3"} in messages


def test_max_chars_is_enforced(db):
    mem = make(db, summarizer=lambda p, m, n: "x" * 5000, summarize_every=2, keep_last=0, max_summary_chars=100)
    mem.record("question one", "answer one", user="alice")
    assert mem.summary(user="alice") == "x" * 100


def test_a_failing_summarizer_keeps_the_old_summary_and_never_breaks_the_turn(db, dsn, caplog):
    state = {"fail": False}

    def flaky(previous, messages, max_chars):
        if state["fail"]:
            raise TimeoutError("the LLM timed out")
        return joiner(previous, messages, max_chars)

    mem = make(db, summarizer=flaky, summarize_every=2, keep_last=0)
    mem.record("q0", "a0", user="alice")
    assert mem.summary(user="alice") == "q0 / a0"
    state["fail"] = True
    with caplog.at_level(logging.WARNING, logger="pymem"):
        res = mem.record("q1", "a1", user="alice")
    assert res.summarized is False and res.assistant_seq == 4
    assert mem.summary(user="alice") == "q0 / a0"
    assert "summarizer failed" in caplog.text
    assert len(res.failures) == 1 and res.failures[0].startswith("the summarizer failed; the previous summary stays (")
    assert rows(dsn, "SELECT claim_token FROM pymem.threads")[0][0] is None  # released
    state["fail"] = False
    assert mem.summarize(user="alice") is True  # the span is still due, and now folds
    assert mem.summary(user="alice") == "q0 / a0 / q1 / a1"


def test_two_app_servers_never_fold_the_same_span(db, dsn):
    """Explicit interleaving: server A's turn claims the due span; server B's turn, while A's
    lease is live, gets no claim; A commits; nothing was summarized twice."""
    seen: list[list[int]] = []
    gate = threading.Event()
    entered = threading.Event()

    def slow(previous, messages, max_chars):
        seen.append([m["seq"] for m in messages])
        entered.set()
        gate.wait(30)
        return joiner(previous, messages, max_chars)

    a = make(db, summarizer=slow, summarize_every=2, keep_last=0)
    with pymem.Database(pymem.Settings(dsn=dsn)) as db_b:
        b = make(db_b, summarizer=slow, summarize_every=2, keep_last=0)
        t = threading.Thread(target=a.record, args=("q0", "a0"), kwargs={"user": "alice"})
        t.start()
        assert entered.wait(30)
        res_b = b.record("q1", "a1", user="alice")  # due again (4 unsummarized), but A holds the lease
        assert res_b.summarized is False
        gate.set()
        t.join(30)
        assert seen == [[1, 2]]
        assert b.summarize(user="alice") is True  # after A committed, B folds the next span
    assert seen == [[1, 2], [3, 4]]
    assert rows(dsn, "SELECT summary, summary_through FROM pymem.threads")[0] == ("q0 / a0 / q1 / a1", 4)


def test_summary_commit_with_a_lost_claim_writes_nothing(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        for i in range(3):
            c.execute("SELECT * FROM pymem.turn_record('alice', %s, %s)", (f"q{i}", f"a{i}"))
        token = c.execute("SELECT claim_token FROM pymem.summary_claim('alice', keep_last => 0, summarize_every => 2, lease_seconds => 0.001)").fetchone()[0]
        import time

        time.sleep(0.01)  # A's lease runs out; B claims the span
        token_b = c.execute("SELECT claim_token FROM pymem.summary_claim('alice', keep_last => 0, summarize_every => 2)").fetchone()[0]
        assert token_b != token
        assert c.execute("SELECT pymem.summary_commit('alice', %s, 'from A')", (token,)).fetchone()[0] is False
        assert c.execute("SELECT pymem.summary_commit('alice', %s, 'from B')", (token_b,)).fetchone()[0] is True
        assert c.execute("SELECT summary FROM pymem.threads").fetchone()[0] == "from B"


# --- 4. recall --------------------------------------------------------------------------


def test_recall_finds_a_long_ago_message_and_skips_short_and_window_messages(db):
    mem = make(db, window=4, recall_k=3)
    mem.record("I am allergic to peanuts and shellfish", "Noted, no peanuts.", user="alice")
    for i in range(4):
        mem.record(f"tell me about topic number {i}", "ok", user="alice")
    mem.record("peanuts?", "ok", user="alice")  # in the window: not recalled
    got = mem.recall("are peanuts dangerous for me", user="alice", k=3)
    contents = [m.content for m in got]
    assert "I am allergic to peanuts and shellfish" in contents  # ten messages ago, out of the window
    assert "ok" not in contents  # shorter than min_content_chars
    assert "peanuts?" not in contents  # in the window


def test_recall_never_returns_another_users_messages(db):
    mem = make(db)
    mem.record("my secret code word is pineapple", "stored", user="bob")
    mem.record("I like hiking in the mountains", "great", user="alice")
    got = mem.recall("secret code word pineapple", user="alice", k=5)
    assert all("pineapple" not in m.content for m in got)
    other = Memory(db=db, agent_id="support-bot", project_id="other", embedder=HashEmbedder())
    assert other.recall("secret code word pineapple", user="bob", k=5) == []


def test_recall_is_exactly_the_brute_force_top_k(db, dsn):
    """Generated data: 300 messages for alice, 300 for bob, random-ish importance and ages.
    SQL's answer equals a brute-force ranking in Python over the same vectors (lexical_weight 0:
    the vector ranking alone; tests/recall/test_recall_hybrid.py checks the fused one)."""
    emb = HashEmbedder(64)
    mem = make(db, embedder=emb, window=10, recency_weight=0.3, importance_weight=0.2, half_life_seconds=600,
               lexical_weight=0, next_turn_weight=0)  # the ranking alone (the next turn: tests/recall)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    for user in ("alice", "bob"):
        for i in range(150):
            q = f"{words[i % 10]} {words[(i * 7) % 10]} message number {i} for {user}"
            mem.record(q, f"reply {words[(i * 3) % 10]} {i} {user}", user=user,
                       importance=((i * 37) % 100) / 100)
    with psycopg.connect(dsn, autocommit=True) as c:  # spread ages over hours
        c.execute("UPDATE pymem.message_embeddings SET created_at = now() - (seq * interval '97 seconds')")
    query = "charlie delta message"
    got = mem.recall(query, user="alice", k=7)
    qv = emb.embed([query])[0]
    cands = rows(dsn, """SELECT e.thread_id, e.seq, e.embedding::text, e.importance,
                                extract(epoch FROM now() - e.created_at), e.chars, t.last_seq
                         FROM pymem.message_embeddings e JOIN pymem.threads t USING (project_id, user_id, thread_id)
                         WHERE e.user_id = 'alice'""")

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    scored = []
    for thread, seq, vec, imp, age, chars, last in cands:
        if chars < 10 or seq > last - 10:
            continue
        v = [float(x) for x in vec.strip("[]").split(",")]
        score = 0.5 * cos(v, qv) + 0.3 * 0.5 ** (float(age) / 600) + 0.2 * imp
        scored.append((score, seq))
    expected = [seq for _, seq in sorted(scored, reverse=True)[:7]]
    assert [m.seq for m in got] == expected
    assert len(got) == 7
    for m, (score, _) in zip(got, sorted(scored, reverse=True)):
        assert m.score == pytest.approx(score, abs=1e-4)  # ages are read a few ms apart


def test_recall_leaves_out_what_matches_the_query_neither_way(db, dsn):
    """Issue 29: recall returned k rows whatever they were, padding with messages of score 0 that
    then filled the context's recall block. The floor: a word in common or a cosine above 1e-5."""
    # recency alone cannot lift a row; next_turn_weight 0: the matches alone (by default the turn
    # after a match comes with it, matching or not: tests/recall/test_recall_next_turn.py)
    mem = make(db, window=2, recency_weight=0.5, importance_weight=0.2, next_turn_weight=0)
    question = "what is the cat allergic to?"
    mem.add_message("My cat Tom is allergic to fish", user="alice")
    # texts sharing no word with the question; HashEmbedder's buckets collide, so some still
    # have a positive cosine with it (a vector match, recalled) and some none (left out)
    q = mem.embedder.embed([question])[0]
    cosine = {t: sum(a * b for a, b in zip(mem.embedder.embed([t])[0], q))
              for t in (f"zzyx qqvv {i}{i}{i}" for i in range(400))}
    unrelated = [t for t, c in cosine.items() if c <= 1e-5][:5]
    colliding = [t for t, c in cosine.items() if c > 0.01][:1]
    assert len(unrelated) == 5 and colliding
    for text in unrelated:
        mem.add_message(text, user="alice")
    got = mem.recall(question, user="alice", k=5)
    assert [m.content for m in got] == ["My cat Tom is allergic to fish"]
    # the context's recall block (window 2) has that message and no padding
    ctx = mem.read("what is the cat allergic to?", user="alice")
    assert [m.content for m in ctx.recalled] == ["My cat Tom is allergic to fish"]
    # SQL alone: the same floor, by vector alone, by words alone and both
    qv = str(mem.embedder.embed([question])[0])
    for query, text in ((qv, None), (None, "cat allergic"), (qv, "cat allergic")):
        got_sql = rows(dsn, "SELECT content FROM pymem.messages_recall('alice', %s::vector, %s, query_text => %s, "
                            "recall => pymem.recall(k => 5, window_size => 0, recency_weight => 0.5, next_turn_weight => 0))",
                       query, mem.embedder.name, text)
        assert [r[0] for r in got_sql] == ["My cat Tom is allergic to fish"], (query is None, text)
    # a positive cosine is a match, however small (a model-specific threshold is min_score's job)
    mem.add_message(colliding[0], user="alice")
    assert [m.content for m in mem.recall(question, user="alice", k=5)] == ["My cat Tom is allergic to fish",
                                                                            colliding[0]]


def test_exactly_k_when_k_are_eligible_even_under_a_selective_filter(db):
    mem = make(db, window=0)
    for u in range(30):  # many other users
        mem.record(f"other user {u} talks about gardening", "sure", user=f"user{u}")
    for i in range(3):
        mem.record(f"alice says thing number {i} on gardening", "noted down: gardening", user="alice")
    assert len(mem.recall("gardening", user="alice", k=5)) == 5  # 3 questions + 2 answers
    assert len(mem.recall("gardening", user="alice", k=6)) == 6
    assert len(mem.recall("gardening", user="alice", k=7)) == 6  # only 6 eligible


def test_scoring_weights_change_the_winner(db, dsn):
    """The reference's worked example: old-but-similar vs new-and-important."""
    mem = make(db, window=0, embedder=HashEmbedder(64), lexical_weight=0)  # the vector's part alone
    mem.record("my email is alice at old example com", "noted", user="alice", importance=0.5)
    mem.record("actually my email changed to alice at new example", "noted", user="alice", importance=1.0)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE pymem.message_embeddings SET created_at = now() - interval '7 days' WHERE seq <= 2")
        c.execute("UPDATE pymem.message_embeddings SET created_at = now() - interval '1 hour' WHERE seq > 2")
    plain = mem.recall("what is my email", user="alice", k=1)
    weighted = Memory(db=db, agent_id="support-bot", embedder=HashEmbedder(64), window=0, lexical_weight=0,
                      recency_weight=0.3, importance_weight=0.2).recall("what is my email", user="alice", k=1)
    assert weighted[0].content.startswith("actually my email changed")
    assert weighted[0].score > 0.35  # 0.5*cos + 0.3*0.5 + 0.2*1.0
    assert plain[0].score == pytest.approx(plain[0].similarity)


def test_sql_written_messages_are_embedded_in_one_batch_by_context(db, dsn):
    batches = []

    class Counting(HashEmbedder):
        def embed(self, texts):
            batches.append(len(texts))
            return super().embed(texts)

    with psycopg.connect(dsn, autocommit=True) as c:
        for text in ("I keep bees on the roof", "The hive produced honey", "Bees dislike rain"):
            c.execute("SELECT pymem.message_add(user_id => 'alice', content => %s)", (text,))
    mem = Memory(db=db, agent_id="bot", embedder=Counting(), window=0)
    ctx = mem.read("tell me about bees", user="alice")
    assert batches == [1, 3]  # the query, then the three messages in one batch
    assert len(ctx.recalled) == 3
    mem.read("tell me about bees", user="alice")
    assert batches == [1, 3, 1]  # nothing left to catch up


# --- 5. dedupe, 6. learn ----------------------------------------------------------------


def test_recalled_messages_already_injected_as_facts_are_dropped_and_counted(db):
    mem = make(db, window=0)
    mem.persist("I am vegetarian", id="alice")
    mem.record("I am vegetarian", "Noted.", user="alice")
    mem.record("I am  VEGETARIAN ", "Noted again.", user="alice")
    mem.record("I enjoy vegetarian pasta dishes", "Yum.", user="alice")
    ctx = mem.read("vegetarian food ideas", user="alice")
    assert ctx.deduped == 2
    assert all(m.content.strip().lower() != "i am vegetarian" for m in ctx.recalled)
    assert "I enjoy vegetarian pasta dishes" in [m.content for m in ctx.recalled]
    off = Memory(db=db, agent_id="support-bot", embedder=HashEmbedder(), window=0, dedupe=False)
    assert off.read("vegetarian food ideas", user="alice").deduped == 0


def test_context_read_fills_k_past_deduped_candidates_in_recall_order(dsn):
    """context_read ranks messages_recall's k first and asks for more only when the dedupe dropped
    some: the k it keeps are still the best k of the ranking that are not deduped, in its order
    (here the two best are copies of a fact, so both come from the second, wider ranking)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('user', 'alice', 'I am vegetarian')")
        for text in ("I am vegetarian", "I am  VEGETARIAN", "I enjoy vegetarian pasta on Fridays",
                     "A vegetarian lasagna recipe with spinach and ricotta", "The vegetarian place downtown closed",
                     "My sister is not vegetarian at all", "Bees dislike rain"):
            c.execute("SELECT pymem.message_add(user_id => 'alice', content => %s)", (text,))
        ranked = [r[0] for r in c.execute("""SELECT content FROM pymem.messages_recall(
                      user_id => 'alice', query_text => 'vegetarian', recall => pymem.recall(k => 10, window_size => 0))""")]
        assert sorted(ranked[:2]) == ["I am  VEGETARIAN", "I am vegetarian"]
        for k in (1, 2, 3):
            ctx = c.execute("""SELECT pymem.context_read(user_id => 'alice', agent_id => NULL, query_text => 'vegetarian',
                                                         recall => pymem.recall(k => %s, window_size => 0))""", (k,)).fetchone()[0]
            assert [m["content"] for m in ctx["recalled"]] == ranked[2:2 + k], k
            assert ctx["deduped"] == 2
        ctx = c.execute("""SELECT pymem.context_read(user_id => 'alice', agent_id => NULL, query_text => 'vegetarian',
                                                     recall => pymem.recall(k => 5, window_size => 0), dedupe => false)""").fetchone()[0]
        assert [m["content"] for m in ctx["recalled"]] == ranked[:5] and ctx["deduped"] == 0


def test_context_read_runs_generic_plans_from_its_first_call(db, dsn):
    """context_read pins plan_cache_mode: every statement inside reads one user's rows through a
    btree, and re-planning them per call cost 0.15-0.2 ms at 10M rows (bench/README.md)."""
    mem = make(db, window=2)
    for i in range(4):
        mem.record(f"message number {i} about the garden", f"answer {i}", user="alice")
    vec = HashEmbedder().embed(["garden"])[0]
    with pymem.connect(dsn) as c:
        log = PlanLog(c, analyze=False)
        c.execute("SELECT pymem.context_read(user_id => 'alice', agent_id => 'support-bot', query_vector => %s, "
                  "embedder => %s)", (Vector(vec), HashEmbedder().name)).fetchall()
    plans = log.plans
    conds = [json.dumps(p["Plan"]) for p in plans if '"Relation Name": "messages"' in json.dumps(p["Plan"])]
    assert conds, "no statement read pymem.messages"
    # a generic plan keeps the PL/pgSQL variables as parameters; a custom one has the values
    for plan in conds:
        assert "'alice'" not in plan and "$" in plan, plan


def _scans(plan: dict, relations: set[str]) -> list[dict]:
    """The nodes of an EXPLAIN (FORMAT JSON) plan that scan one of ``relations``."""
    return [n for n in plan_nodes(plan) if n.get("Relation Name") in relations]


def test_a_turn_reads_its_two_messages_by_key_not_the_thread(dsn):
    """turn_record stores the turn's vectors with the lexemes just written; under a generic plan
    that lookup once read every lexeme row of the thread (a turn's cost grew with its thread:
    14 ms for a 7,300-message thread). Every scan of the thread's tables reads at most the turn."""
    vec = Vector(HashEmbedder().embed(["a garden"])[0])
    turn = ("SELECT user_seq FROM pymem.turn_record(user_id => 'alice', user_content => %s, "
            "assistant_content => 'noted', embedder => %s, user_embedding => %s, assistant_embedding => %s)")
    with pymem.connect(dsn) as c:
        for i in range(40):
            c.execute(turn, (f"message {i} about the garden", HashEmbedder().name, vec, vec))
        c.execute("SET plan_cache_mode = force_generic_plan")  # as the function's cached plan runs after 5 calls
        log = PlanLog(c)
        c.execute(turn, ("one more about the garden", HashEmbedder().name, vec, vec)).fetchall()
    plans = log.plans
    scans = [s for p in plans for s in _scans(p["Plan"], {"messages", "message_lexemes"})]
    assert any(s["Relation Name"] == "message_lexemes" for s in scans), "no statement read pymem.message_lexemes"
    for s in scans:
        assert s["Actual Rows"] <= 2, json.dumps(s)  # rows per loop; the thread holds 80 messages


def test_a_turn_stores_the_vectors_it_is_given_beside_each_messages_lexemes(dsn):
    """Both vectors, the user's alone or the answer's alone: each stored row is its message's
    (seq, length, importance, time, lexemes and tokens as the messages' trigger wrote them)."""
    a, b = (Vector(v) for v in HashEmbedder().embed(["a garden", "a tomato"]))
    turn = ("SELECT user_seq, assistant_seq FROM pymem.turn_record(user_id => 'vera', thread_id => %s, "
            "user_content => %s, assistant_content => %s, user_importance => 0.25, assistant_importance => 0.75, "
            "embedder => %s, user_embedding => %s, assistant_embedding => %s)")
    with pymem.connect(dsn) as c:
        register_vector(c)
        for thread, u, v in (("both", a, b), ("user", a, None), ("answer", None, b)):
            c.execute(turn, (thread, f"where is the garden ({thread})", "behind the house, with tomatoes",
                             HashEmbedder().name, u, v))
            rows = c.execute(
                """SELECT e.seq, e.embedding, e.chars = length(m.content), e.importance = m.importance,
                          e.created_at = m.created_at, e.lexemes = l.lexemes, e.tokens = l.tokens, m.embedded_by
                     FROM pymem.message_embeddings AS e
                     JOIN pymem.messages AS m USING (project_id, user_id, thread_id, seq)
                     JOIN pymem.message_lexemes AS l USING (project_id, user_id, thread_id, seq)
                    WHERE e.user_id = 'vera' AND e.thread_id = %s ORDER BY e.seq""", (thread,)).fetchall()
            want = [(seq, vec) for seq, vec in ((1, u), (2, v)) if vec is not None]
            assert [(r[0], r[1]) for r in rows] == want
            assert all(r[2:7] == (True,) * 5 and r[7] == HashEmbedder().name for r in rows), rows
            embedded_by = c.execute("SELECT seq, embedded_by FROM pymem.messages WHERE user_id = 'vera' "
                                    "AND thread_id = %s ORDER BY seq", (thread,)).fetchall()
            assert embedded_by == [(seq, HashEmbedder().name if vec is not None else None)
                                   for seq, vec in ((1, u), (2, v))]


def test_storing_vectors_later_reads_those_messages_by_key(dsn):
    """message_embeddings_put marks the messages it gave vectors; under a generic plan that update
    once read all of the user's messages and filtered them. Every scan of the thread's tables
    reads at most the messages named."""
    name = HashEmbedder().name
    vec = Vector(HashEmbedder().embed(["a garden"])[0])
    put = ("SELECT pymem.message_embeddings_put('alice', %s, ARRAY['default', 'default'], %s::bigint[], "
           "ARRAY[%s, %s]::vector[])")
    with pymem.connect(dsn) as c:
        c.execute("SELECT pymem.messages_add_many('alice', 'default', %s, %s)",
                  (["user"] * 80, [f"message {i} about the garden" for i in range(80)]))
        for i in range(6):  # past PL/pgSQL's five custom plans
            c.execute(put, (name, [2 * i + 1, 2 * i + 2], vec, vec))
        c.execute("SET plan_cache_mode = force_generic_plan")
        log = PlanLog(c)
        assert c.execute(put, (name, [41, 42], vec, vec)).fetchone()[0] == 2
    plans = log.plans
    scans = [s for p in plans for s in _scans(p["Plan"], {"messages", "message_lexemes"})]
    assert any(s["Relation Name"] == "messages" for s in scans), "no statement read pymem.messages"
    for s in scans:
        assert s["Actual Rows"] <= 2 and s.get("Rows Removed by Filter", 0) == 0, json.dumps(s)


# The dedupe test's whitespace: the list of pymem._norm (and fact_key), not the locale's \\s.
NORM_WS = " \t\n\r\f\v\u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text(alphabet="abcXYZ\u00e9.", min_size=0, max_size=4),
                          st.text(alphabet=NORM_WS, min_size=0, max_size=3)), max_size=12))
def test_norm_lowercases_and_folds_every_run_of_whitespace_into_one_space(conn, parts):
    text = "".join(a + b for a, b in parts)
    spaced = "".join(" " if ch in NORM_WS else ch for ch in text.lower())
    expected = " ".join(w for w in spaced.split(" ") if w)
    assert conn.execute("SELECT pymem._norm(%s)", (text,)).fetchone()[0] == expected


def test_extractor_sees_only_the_users_message_and_learns_capped_facts(db, dsn):
    seen = []

    def extractor(message):
        seen.append(message)
        return [f"said: {message}", "", None, "x\x00y"]  # junk is skipped

    mem = make(db, extractor=extractor, max_learned_facts=3)
    for i in range(5):
        res = mem.record(f"I like color {i}", f"Assistant reply {i}", user="alice")
        assert len(res.learned_fact_ids) == 1
    assert seen == [f"I like color {i}" for i in range(5)]
    facts = mem.retrieve(id="alice")
    assert [f.content for f in facts] == ["said: I like color 4", "said: I like color 3", "said: I like color 2"]
    assert all(f.source == "learned" and f.confidence == 0.6 for f in facts)


def test_a_failing_extractor_never_breaks_the_turn(db, dsn, caplog):
    def broken(message):
        raise ValueError("LLM returned garbage")

    mem = make(db, extractor=broken)
    with caplog.at_level(logging.WARNING, logger="pymem"):
        res = mem.record("I moved to Berlin", "Noted.", user="alice")
    assert res.learned_fact_ids == [] and n_messages(dsn) == 2
    assert "extractor failed" in caplog.text
    # the result tells "learning failed" from "nothing to learn" (issue 29, item 10)
    assert res.failures == ["the fact extractor failed; the turn is recorded without learned facts "
                            "(ValueError: LLM returned garbage)"]
    assert make(db, extractor=lambda m: []).record("hello there", "hi", user="alice").failures == []
    # one line that says what failed and why, no traceback at WARNING (issue 29, item 10); nor a
    # doubled "pymem: pymem:" under a format that shows the logger's name (item 16)
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.exc_info is None and warning.getMessage() == (
        "the fact extractor failed; the turn is recorded without learned facts (ValueError: LLM returned garbage)")
    with caplog.at_level(logging.DEBUG, logger="pymem"):
        caplog.clear()
        mem.record("I moved to Bonn", "Noted.", user="alice")
    assert any(r.levelno == logging.DEBUG and r.exc_info for r in caplog.records)  # the traceback, at DEBUG


def test_invalid_learned_facts_from_sql_are_skipped(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT learned_ids FROM pymem.turn_record('alice', 'hi there', 'hello', learned => ARRAY['ok fact', '   ', repeat('x', 70000)])"
        ).fetchone()
    assert len(row[0]) == 1


# --- learned facts per turn: a documented limit, one insert, one trim (issue 11.4) ----------


def _turn(c, learned, **kw):
    args = ", ".join(f"{k} => %({k})s" for k in kw)
    sql = ("SELECT learned_ids FROM pymem.turn_record('alice', 'I said many things', 'Noted.', learned => %(learned)s"
           + (", " + args if args else "") + ")")
    return c.execute(sql, {"learned": learned, **kw}).fetchone()[0]


def _written(c):
    return c.execute("SELECT (SELECT count(*) FROM pymem.messages), (SELECT count(*) FROM pymem.threads),"
                     " (SELECT count(*) FROM pymem.facts)").fetchone()


def test_a_turn_carries_at_most_100_learned_facts_and_more_writes_nothing(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="at most 100 learned facts, not 101"):
            _turn(c, [f"fact {i}" for i in range(101)])
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not 101"):  # NULLs and junk count too
            _turn(c, [f"fact {i}" for i in range(99)] + [None, "  "])
        assert _written(c) == (0, 0, 0)
        assert len(_turn(c, [f"fact {i}" for i in range(100)], max_learned=None)) == 100
        assert _written(c) == (2, 1, 100)


def test_max_learned_below_one_refuses_the_turn(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        for bad in (0, -1):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="max_learned"):
                _turn(c, ["a fact"], max_learned=bad)
        assert _written(c) == (0, 0, 0)


def test_learned_ids_follow_the_order_given_with_repeats_existing_facts_and_skips(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        warnings = []
        c.add_notice_handler(lambda d: warnings.append(d.message_primary))
        tea = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Likes tea')").fetchone()[0]
        old = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Old learned', write => pymem.fact_write(source => 'learned'))").fetchone()[0]
        ids = _turn(c, ["New a", " Likes\u00a0 tea ", "New b", "New  a", "", None, "Old learned", "x" * 70000, "New c"])
        assert sum("skipped a learned fact" in w for w in warnings) == 3
        a, b, new_c = (c.execute("SELECT id FROM pymem.facts WHERE content = %s", (t,)).fetchone()[0]
                       for t in ("New a", "New b", "New c"))
        assert ids == [a, tea, b, a, old, new_c]
        assert a < b < new_c  # inserted in the order of first mention
        # an existing fact keeps its source and confidence; new ones are learned at 0.6
        assert c.execute("SELECT content, source, confidence FROM pymem.facts ORDER BY id").fetchall() == [
            ("Likes tea", "manual", 1.0), ("Old learned", "learned", 1.0), ("New a", "learned", 0.6),
            ("New b", "learned", 0.6), ("New c", "learned", 0.6)]
        # the same facts again: the same ids, nothing new
        assert _turn(c, ["New c", "New a"]) == [new_c, a]
        assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == 5


def test_the_cap_is_applied_once_after_the_whole_turn(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('user', 'alice', 'manual stays')")
        _turn(c, ["first", "second"], max_learned=3)
        ids = _turn(c, ["one", "two", "three", "four"], max_learned=3)
        kept = c.execute("SELECT id FROM pymem.facts WHERE source = 'learned' ORDER BY id").fetchall()
        assert [k[0] for k in kept] == ids[1:]  # the newest three: the last three of the turn
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE source = 'manual'").fetchone()[0] == 1
        # no cap: everything stays
        _turn(c, [f"more {i}" for i in range(5)], max_learned=None)
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE source = 'learned'").fetchone()[0] == 8


def test_the_cap_holds_under_concurrent_turns_with_learned_facts(dsn):
    n = 10
    barrier = threading.Barrier(n)
    errors = []

    def go(i):
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                barrier.wait()
                _turn(c, ["a shared fact", f"own fact {i}", f"another own fact {i}"], max_learned=5)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert rows(dsn, "SELECT count(*) FROM pymem.facts WHERE source = 'learned' AND superseded_by IS NULL")[0][0] == 5
    assert n_messages(dsn) == 2 * n


def test_an_extractor_returning_too_many_facts_keeps_the_first_100(db, dsn, caplog):
    from pymem.conversations import MAX_LEARNED_PER_TURN

    mem = make(db, extractor=lambda m: [f"fact {i}" for i in range(150)], max_learned_facts=None)
    with caplog.at_level(logging.WARNING, logger="pymem"):
        res = mem.record("I told you a lot", "Noted.", user="alice")
    assert MAX_LEARNED_PER_TURN == 100 and len(res.learned_fact_ids) == 100
    assert "keeps the first 100" in caplog.text
    assert rows(dsn, "SELECT count(*), max(content) FILTER (WHERE content = 'fact 99'), "
                     "count(*) FILTER (WHERE content = 'fact 100') FROM pymem.facts")[0] == (100, "fact 99", 0)


# --- 7. context -------------------------------------------------------------------------


def test_context_order_headings_and_privacy(db):
    mem = make(db, system_prompt="You are a helpful assistant.", window=2, recall_k=2,
               summarizer=lambda p, m, n: "The customer discussed an earlier purchase.", summarize_every=2, keep_last=2)
    user = "alice@example.com"
    mem.persist("Return policy is 30 days", tier="global")
    mem.persist("Prefers email", id=user)
    mem.record("I bought a tent from you in June", "Thanks for your purchase.", user=user)
    mem.record("The tent has a broken zipper", "Sorry to hear that.", user=user)
    mem.record("Can I return it?", "Let me check.", user=user)
    messages = mem.context("what about the tent zipper", user=user)
    assert messages[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert messages[1] == {"role": "system",
                           "content": AGENT_HEADING.format(agent="support-bot") + "\n- Return policy is 30 days"}
    assert messages[2] == {"role": "system", "content": USER_HEADING + "\n- Prefers email"}
    assert messages[3]["content"].startswith(SUMMARY_HEADING)
    assert messages[4]["content"].startswith(RECALL_HEADING)
    assert messages[5:] == [
        {"role": "user", "content": "Can I return it?"},
        {"role": "assistant", "content": "Let me check."},
        {"role": "user", "content": "what about the tent zipper"},
    ]
    assert all(user not in m["content"] and "alice" not in m["content"] for m in messages)
    assert all(set(m) == {"role", "content"} for m in messages)


@pytest.mark.parametrize("who", [None, "", "   "])
def test_unresolved_callers_get_global_facts_only_and_store_nothing(db, dsn, caplog, who):
    mem = make(db)
    mem.persist("Return policy is 30 days", tier="global")
    mem.record("I am alice and this is private", "ok", user="alice")
    with caplog.at_level(logging.WARNING, logger="pymem"):
        messages = mem.context("hello", user=who)
        assert mem.record("I say something", "ok", user=who) is None
    assert messages == [
        {"role": "system", "content": AGENT_HEADING.format(agent="support-bot") + "\n- Return policy is 30 days"},
        {"role": "user", "content": "hello"},
    ]
    assert n_messages(dsn) == 2
    assert caplog.text.count("no user for this call") == 2


def test_a_resolver_that_raises_is_an_unresolved_caller(db, dsn, caplog):
    def resolver(ctx):
        return ctx["user"]

    mem = make(db, user_id=resolver)
    with caplog.at_level(logging.WARNING, logger="pymem"):
        assert mem.record("no context at all", "ok", ctx=None) is None
        with mem.turn("no context again", ctx={}) as t:
            t.answer = "ignored"
    assert n_messages(dsn) == 0
    assert caplog.text.count("resolver raised") == 2
    mem.record("with a context", "ok", ctx={"user": "carol"})
    assert [m.content for m in mem.window(ctx={"user": "carol"})] == ["with a context", "ok"]


# --- 8. one round trip ------------------------------------------------------------------


def round_trips(db: pymem.Database, fn) -> tuple[int, int]:
    """(round trips, statements) that fn() sends on the pool's only connection (libpq trace)."""
    with tempfile.TemporaryFile("w+") as f:
        with db.pool.connection() as conn:
            conn.pgconn.trace(f.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            fn()
        finally:
            with db.pool.connection() as conn:
                conn.pgconn.untrace()
        f.seek(0)
        lines = f.read().splitlines()
    trips = sum(1 for line in lines if line.startswith("B") and "ReadyForQuery" in line)
    statements = sum(1 for line in lines if line.startswith("F") and ("\tQuery\t" in line or "\tExecute\t" in line))
    return trips, statements


def test_context_is_one_round_trip_and_a_turn_write_is_one_call(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1)) as db:
        mem = make(db, extractor=lambda m: [f"fact from {m}"], system_prompt="sys")
        mem.persist("Return policy is 30 days", tier="global")
        mem.record("warm up the statement cache", "ok", user="alice")
        mem.context("warm up", user="alice")
        # one round trip, one statement: the connection carries the statement timeout (a startup
        # option), so nothing is sent before the call
        assert round_trips(db, lambda: mem.context("where do I live?", user="alice")) == (1, 1)
        assert round_trips(db, lambda: mem.record("I live in Oslo now", "Noted.", user="alice")) == (1, 1)

        def a_turn():
            with mem.turn("and my plan?", user="alice") as t:
                t.answer = "Pro plan."

        assert round_trips(db, a_turn) == (2, 2)  # one read, one write


# --- 9. users, threads and asyncio; 10. restarts ----------------------------------------


def test_one_memory_serves_many_users_from_threads_without_mixing(db):
    mem = make(db, user_id=lambda ctx: ctx["user"], window=50)
    errors = []

    def converse(user):
        try:
            for i in range(10):
                with mem.turn(f"{user} says {i}", ctx={"user": user}) as t:
                    assert all(user in m["content"] or m["role"] == "system" for m in t.messages[:-1]), t.messages
                    t.answer = f"reply to {user} {i}"
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=converse, args=(u,)) for u in ("ann", "ben", "cat", "dan")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    for u in ("ann", "ben", "cat", "dan"):
        window = mem.window(ctx={"user": u})
        assert len(window) == 20 and all(u in m.content for m in window)


def test_asyncio_tasks_serving_different_users_never_mix(dsn):
    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=4)) as adb:
            mem = pymem.AsyncMemory(db=adb, agent_id="bot", embedder=HashEmbedder(), window=50)

            async def converse(user):
                for i in range(6):
                    async with mem.turn(f"{user} asks question {i}", user=user) as t:
                        assert all(user in m["content"] for m in t.messages)
                        t.answer = f"answer for {user} {i}"

            await asyncio.gather(*(converse(u) for u in ("ann", "ben", "cat")))
            return {u: [m.content for m in await mem.window(user=u)] for u in ("ann", "ben", "cat")}

    windows = asyncio.run(main())
    for user, contents in windows.items():
        assert len(contents) == 12 and all(user in c for c in contents)


def test_windows_and_summaries_survive_a_new_process_and_pool(dsn):
    import subprocess
    import sys

    script = """
import sys, pymem
mem = pymem.Memory(db=pymem.Database(pymem.Settings(dsn=sys.argv[1])), agent_id="bot",
                   embedder=pymem.HashEmbedder(), summarizer=lambda p, m, n: "summary of %d" % len(m),
                   summarize_every=2, keep_last=2)
mem.record("remember the blue door", "I will.", user="alice")
mem.record("and the red window", "Noted.", user="alice")
"""
    subprocess.run([sys.executable, "-c", script, dsn], check=True, timeout=60)
    with pymem.Database(pymem.Settings(dsn=dsn)) as db:
        mem = make(db, window=10)
        assert [m.content for m in mem.window(user="alice")] == [
            "remember the blue door", "I will.", "and the red window", "Noted."]
        assert mem.summary(user="alice") == "summary of 2"


def test_module_level_context_and_record_use_the_default_memory(dsn, monkeypatch):
    import pymem.memory

    monkeypatch.setenv("PYMEM_DSN", dsn)
    monkeypatch.setenv("PYMEM_AGENT_ID", "helper")
    monkeypatch.setattr(pymem.memory, "_default", None)
    try:
        pymem.default_memory().persist("Office hours are 9 to 5", tier="global")
        # the call as the design writes it: pymem.context(user, query), positionally
        assert pymem.record("alice", "I work nights", "Noted.").assistant_seq == 2
        messages = pymem.context("alice", "when can I call?")
        assert messages[0]["content"].endswith("- Office hours are 9 to 5")
        assert {"role": "user", "content": "I work nights"} in messages
        # by name too, in any order
        assert pymem.record(answer="Sure.", query="and weekends", user="alice").user_seq == 3
        assert pymem.context(query="when can I call?", user="alice") == pymem.context("alice", "when can I call?")
        assert pymem.record("", "anonymous words", "ok") is None
        # the user's own messages, not another user's: bob reads the office hours, never alice's words
        bob = pymem.context("bob", "when can I call?")
        assert all("I work nights" not in m["content"] for m in bob)
        with pytest.raises(pymem.ValidationError, match="query must be a string"):
            pymem.context("alice", 42)
        with pytest.raises(TypeError):
            pymem.context("alice")  # the query is required
    finally:
        if pymem.memory._default is not None:
            pymem.memory._default.close()
        monkeypatch.setattr(pymem.memory, "_default", None)


def test_async_one_liners_use_a_default_async_memory_per_event_loop(dsn, monkeypatch):
    """Issue 59, item 1: pymem.acontext(user, query) / pymem.arecord(user, query, answer), awaited,
    each event loop with its own default AsyncMemory (a pool belongs to the loop it was opened in)."""
    import asyncio

    import pymem.memory

    monkeypatch.setenv("PYMEM_DSN", dsn)
    monkeypatch.setenv("PYMEM_AGENT_ID", "helper")
    seen: list[pymem.AsyncMemory] = []

    async def first() -> None:
        result = await pymem.arecord("alice", "I work nights", "Noted.")
        assert result is not None and result.assistant_seq == 2
        messages = await pymem.acontext("alice", "when can I call?")
        assert {"role": "user", "content": "I work nights"} in messages
        assert await pymem.arecord(user="", query="anonymous", answer="ok") is None
        seen.append(pymem.default_async_memory())
        assert pymem.default_async_memory() is seen[0]  # one per loop
        await seen[0].aclose()

    async def second() -> None:
        messages = await pymem.acontext(query="when can I call?", user="alice")
        assert {"role": "assistant", "content": "Noted."} in messages
        seen.append(pymem.default_async_memory())
        await seen[1].aclose()

    asyncio.run(first())
    asyncio.run(second())  # a new loop: a new default, not the closed pool of the first
    assert seen[0] is not seen[1]
    with pytest.raises(RuntimeError):
        pymem.default_async_memory()  # outside a running loop


def test_the_default_memory_learns_and_summarizes_with_a_configured_model(dsn, monkeypatch):
    """Issue 29, item 9: PYMEM_LLM_MODEL set, the one-liners learn and summarize as the demo does
    (nothing is sent to the model here: the Memory is only built)."""
    import pymem.memory
    from pymem.llm import ChatLearner

    monkeypatch.setenv("PYMEM_DSN", dsn)
    for var, learns in (("", False), ("some-model", True)):
        monkeypatch.setenv("PYMEM_LLM_MODEL", var) if var else monkeypatch.delenv("PYMEM_LLM_MODEL", raising=False)
        monkeypatch.setattr(pymem.memory, "_default", None)
        mem = pymem.default_memory()
        try:
            assert isinstance(mem.options.learner, ChatLearner) is learns
            assert (mem.options.summarizer is not None) is learns
            if learns:
                assert mem.options.learner.client.model == "some-model"
        finally:
            mem.close()
            monkeypatch.setattr(pymem.memory, "_default", None)


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "match"),
    [
        ("SELECT pymem.message_add('alice', 'hello there', role => 'wizard')", "role"),
        ("SELECT pymem.message_add('alice', '   ')", "empty"),
        ("SELECT pymem.message_add('', 'hello there')", "user id"),
        ("SELECT pymem.message_add('*', 'hello there')", "user_id"),
        ("SELECT pymem.message_add('alice', 'hello there', importance => 2)", "importance"),
        ("SELECT * FROM pymem.window_read('alice', max_messages => -1)", "max_messages"),
        ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', recall => pymem.recall(k => -1))", "k must"),
        ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', recall => pymem.recall(recency_weight => 0.7, importance_weight => 0.5))", "sum"),
        ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', recall => pymem.recall(recency_weight => -0.1))", "recency_weight"),
        ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', recall => pymem.recall(half_life_seconds => 0))", "half_life"),
        ("SELECT pymem.context_read('alice', recall => pymem.recall(window_size => -5))", "window_size"),
        ("SELECT pymem.context_read('alice', recall => NULL)", "recall spec"),
        ("SELECT pymem.context_read('alice', agent_id => '')", "every agent"),
        ("SELECT * FROM pymem.turn_record('alice', 'hello', 'hi', embedder => 'e3', user_embedding => '[1,2]', assistant_embedding => '[1,2,3]')", "dimensions"),
    ],
)
def test_bad_input_gets_22023_and_writes_nothing(dsn, sql, match):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.message_add('alice', 'seed message', role => 'user')")
        c.execute("SELECT pymem._embedding_register('', 'e3', '[1,0,0]')")  # e3 makes 3-d vectors
        before = c.execute("SELECT count(*) FROM pymem.messages").fetchone()[0]
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
            c.execute(sql)
        assert c.execute("SELECT count(*) FROM pymem.messages").fetchone()[0] == before


def test_bad_input_from_python_is_a_validation_error(db):
    mem = make(db)
    with pytest.raises(pymem.ValidationError):
        mem.record("nul \x00 inside", "ok", user="alice")
    with pytest.raises(pymem.ValidationError):
        mem.context("hello", user="alice\x00")
    with pytest.raises(pymem.ValidationError):
        Memory(db=db, agent_id="bot", window=-1).context("hello", user="alice")
    with pytest.raises(pymem.ValidationError):
        Memory(db=db, agent_id="bot", embedder=HashEmbedder(), recency_weight=0.8, importance_weight=0.8).context(
            "hello", user="alice")
    with pytest.raises(pymem.ValidationError):
        Memory(db=db, agent_id="bot", window="20")
    with pytest.raises(pymem.ValidationError):
        mem.add_message("hi there", role="wizard", user="alice")


def test_forget_conversation(db, dsn):
    mem = make(db)
    mem.record("thread a question", "a", user="alice", thread="a")
    mem.record("thread b question", "b", user="alice", thread="b")
    mem.record("bob's question", "b", user="bob")
    assert mem.forget_conversation(user="alice", thread="a") == 2
    assert mem.forget_conversation(user="alice") == 2
    assert mem.forget_conversation(user="alice") == 0
    assert n_messages(dsn) == 2
    assert rows(dsn, "SELECT count(*) FROM pymem.message_embeddings WHERE user_id = 'alice'")[0][0] == 0
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.errors.InvalidParameterValue, match="needs a user id"):
        c.execute("SELECT pymem.conversation_forget('')")  # an unset user id is refused, not "0 deleted"


def test_message_timestamps_are_recent(db):
    mem = make(db)
    mem.record("what time is it", "now", user="alice")
    (m, _) = mem.window(user="alice")
    assert datetime.now(timezone.utc) - m.created_at < timedelta(minutes=5)


# --- regressions found in review ----------------------------------------------------------


def test_no_pooled_connection_is_held_while_user_code_runs(dsn):
    """A slow extractor (an LLM call, in practice) must not starve other calls: with a pool of
    one connection, a window read goes through while a turn waits for its extractor."""
    import time as _time

    started = threading.Event()

    def slow_extractor(message):
        started.set()
        _time.sleep(1.5)
        return []

    with pymem.Database(pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1, pool_timeout=1)) as db:
        mem = make(db, extractor=slow_extractor)
        t = threading.Thread(target=mem.record, args=("a question here", "an answer"), kwargs={"user": "alice"})
        t.start()
        assert started.wait(10)
        assert mem.window(user="bob") == []  # would time out if the turn held the only connection
        t.join(30)
    assert n_messages(dsn) == 2


def test_two_embedders_on_one_user_do_not_re_embed_each_other(db):
    counts = {"a": 0, "b": 0}

    class Counting(HashEmbedder):
        def __init__(self, key, dim):
            super().__init__(dim)
            self.key = key

        def embed(self, texts):
            counts[self.key] += len(texts)
            return super().embed(texts)

    a = Memory(db=db, agent_id="bot", embedder=Counting("a", 32), window=0)
    b = Memory(db=db, agent_id="bot", embedder=Counting("b", 48), window=0)
    for i in range(10):
        a.record(f"question number {i} here", f"answer number {i}", user="alice")
    a.context("first", user="alice")
    b.context("catch up once", user="alice")  # b embeds the 20 messages once
    b_after_catch_up = counts["b"]
    for _ in range(3):
        a.context("again", user="alice")
        b.context("again", user="alice")
    assert counts["b"] == b_after_catch_up + 3  # only its queries from then on
    assert counts["a"] == 20 + 1 + 3  # the turns' messages, then queries only


def test_zero_vectors_and_missing_threads_are_refused(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="zero"):
            c.execute("SELECT * FROM pymem.turn_record('alice', 'q', 'a', embedder => 'e3',"
                      " user_embedding => '[0,0,0]', assistant_embedding => '[1,0,0]')")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="zero"):
            c.execute("SELECT * FROM pymem.messages_recall('alice', '[0,0,0]', 'e3')")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="thread_id"):
            c.execute("SELECT pymem.message_add('alice', 'hello', thread_id => NULL)")
        assert c.execute("SELECT count(*) FROM pymem.messages").fetchone()[0] == 0
        ctx = c.execute("SELECT pymem.context_read('nobody-here', agent_id => 'a')").fetchone()[0]
        assert ctx["summary_through"] == 0 and ctx["window"] == []


def test_bad_summary_settings_are_refused_before_any_turn(db):
    with pytest.raises(pymem.ValidationError):
        make(db, max_summary_chars=200_000)
    with pytest.raises(pymem.ValidationError):
        make(db, summarize_every=0)
    with pytest.raises(pymem.ValidationError):
        make(db, max_learned_facts=0)


def test_a_pool_with_every_connection_busy_is_a_timeout_not_a_dead_server(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1, pool_timeout=0.2)) as db:
        with db.connection():
            with pytest.raises(pymem.TimeoutError, match="pool"):
                with db.connection():
                    pass


def test_embeddings_put_registers_the_embedder_only_when_a_vector_is_stored(dsn):
    """Issue 11.5: message_embeddings_put (and fact_embeddings_put) for rows that do not exist
    registered the embedder's dimension for the whole project, so one mistaken first call
    (here: 2-d vectors for a user with no messages) blocked the model name for every user."""
    with psycopg.connect(dsn, autocommit=True) as c:
        def registered():
            return c.execute("SELECT name, dimension FROM pymem.embedders ORDER BY name").fetchall()

        assert c.execute("SELECT pymem.message_embeddings_put('nobody', 'model-x', ARRAY['default'], "
                         "ARRAY[1]::bigint[], ARRAY['[1,0]']::vector[])").fetchone() == (0,)
        assert c.execute("SELECT pymem.fact_embeddings_put('user', 'nobody', 'model-y', ARRAY[987654]::bigint[], "
                         "ARRAY['[1,0]']::vector[])").fetchone() == (0,)
        assert registered() == []
        # the same names then work for real rows, at their real dimension
        c.execute("SELECT pymem.message_add('alice', 'hello there')")
        fid = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Likes tea')").fetchone()[0]
        assert c.execute("SELECT pymem.message_embeddings_put('alice', 'model-x', ARRAY['default'], "
                         "ARRAY[1]::bigint[], ARRAY['[1,0,0]']::vector[])").fetchone() == (1,)
        assert c.execute("SELECT pymem.fact_embeddings_put('user', 'alice', 'model-y', ARRAY[%s]::bigint[], "
                         "ARRAY['[0,1,0]']::vector[])", (fid,)).fetchone() == (1,)
        assert registered() == [("model-x", 3), ("model-y", 3)]
        # once registered, a wrong dimension is refused even for rows that do not exist
        for call in ("SELECT pymem.message_embeddings_put('nobody', 'model-x', ARRAY['default'], "
                     "ARRAY[1]::bigint[], ARRAY['[1,0]']::vector[])",
                     "SELECT pymem.fact_embeddings_put('user', 'nobody', 'model-y', ARRAY[1]::bigint[], "
                     "ARRAY['[1,0]']::vector[])",
                     # and a batch is of one dimension even before the first registration
                     "SELECT pymem.message_embeddings_put('alice', 'model-z', ARRAY['default', 'default'], "
                     "ARRAY[1, 2]::bigint[], ARRAY['[1,0,0]', '[1,0]']::vector[])"):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="dimensions"):
                c.execute(call)
        assert registered() == [("model-x", 3), ("model-y", 3)]


def test_a_call_that_needs_a_user_raises_without_the_warning_of_one_that_goes_on(db, caplog):
    """Issue 59, item 3: "no user for this call; it gets global facts only" is logged only where
    it is true (context, record); a call that needs a user raises and says why, nothing more."""
    mem = make(db)
    fid = mem.persist("Prefers email", user="alice")
    with caplog.at_level(logging.WARNING, logger="pymem"):
        with pytest.raises(pymem.ValidationError, match="needs a user"):
            mem.forget(fact_id=fid)
        with pytest.raises(pymem.ValidationError, match="needs a user"):
            mem.window()
        with pytest.raises(pymem.ValidationError, match="resolver raised KeyError"):
            make(db, user_id=lambda ctx: ctx["user"]).window(ctx={})
    assert caplog.records == []
