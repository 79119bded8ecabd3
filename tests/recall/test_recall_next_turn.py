"""The turns after a recalled turn (issue 32, item 4: next_turn_weight, default 0.8): the two
messages after each of the top k in its thread score at least next_turn_weight times that one's
score, before the cut at k (tied, the nearer first); it must pass recall's filters but need not match the query. Never another
user's or another project's message, whatever their sequence numbers. (The brute-force oracle of
tests/recall/test_recall_hybrid.py checks the ranking itself, default weight included.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pymem
from pymem import Memory
from pymem.embedders import HashEmbedder

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
QUESTION = "Which concert did you go to for the birthday?"
ANSWER = "It was Matt Patterson, he is so talented!"


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as d:
        yield d


def _talk(mem: Memory, user: str, project_note: str = "") -> None:
    """A question, its answer (no word in common with the question), and unrelated turns."""
    turns = [("user", "Good morning, how was the weekend?"), ("user", QUESTION), ("assistant", ANSWER),
             ("user", "Tomorrow the garden needs watering again."), ("assistant", "Rain is due on Friday anyway.")]
    for i, (role, content) in enumerate(turns):
        mem.add_message(content + project_note, user=user, thread="t", role=role, created_at=T0 + timedelta(hours=i),
                        metadata={"part": "a" if i < 2 else "b"})


def _recall(dsn, **kw):
    args = {"user_id": "alice", "query_text": "concert birthday", "thread_id": "elsewhere", "k": 2} | kw
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT seq, content, similarity, score FROM pymem.messages_recall("
                         + _named(args) + ")", args).fetchall()


def _named(args: dict) -> str:
    """messages_recall's named arguments, those of its recall spec inside pymem.recall(...)."""
    spec = [n for n in args if n not in CALL]
    return ", ".join([f"{n} => %({n})s" for n in args if n in CALL]
                     + ([f"recall => pymem.recall({', '.join(f'{n} => %({n})s' for n in spec)})"] if spec else []))


CALL = {"user_id", "query_vector", "embedder", "project_id", "thread_id", "query_text"}


def test_the_answer_after_a_recalled_question_comes_with_it(db, dsn):
    _talk(Memory(db=db), "alice")
    got = _recall(dsn, k=3)
    # the match, then the two turns after it at 0.8 times its score (tied: the nearer first)
    assert [(s, c) for s, c, *_ in got] == [(2, QUESTION), (3, ANSWER),
                                            (4, "Tomorrow the garden needs watering again.")]
    (_, _, sim, score), (_, _, sim3, score3), (_, _, sim4, score4) = got
    assert sim is None and sim3 is None and sim4 is None  # recall by words alone: no cosine
    assert score3 == pytest.approx(0.8 * score) and score4 == score3
    # off: the match alone (the answer shares no word with the query)
    assert [s for s, *_ in _recall(dsn, next_turn_weight=0)] == [2]
    assert [s for s, *_ in _recall(dsn, k=3, next_turn_weight=0.5)] == [2, 3, 4]
    assert _recall(dsn, k=3, next_turn_weight=0.5)[1][3] == pytest.approx(0.5 * score)
    # the budget counts them: k 1 keeps the match, k 2 the match and the turn right after; never a third turn after
    assert [s for s, *_ in _recall(dsn, k=1)] == [2]
    assert [s for s, *_ in _recall(dsn, k=2)] == [2, 3]
    assert [s for s, *_ in _recall(dsn, k=5)] == [2, 3, 4]
    # Memory's option, and the context's recall block, give the same
    assert [m.seq for m in Memory(db=db, recall_k=3).recall("concert birthday", user="alice", thread="x")] == [2, 3, 4]
    assert [m.seq for m in Memory(db=db, recall_k=3, next_turn_weight=0).recall(
        "concert birthday", user="alice", thread="x")] == [2]
    ctx = Memory(db=db, recall_k=3).read("concert birthday", user="alice", thread="x")
    assert sorted(m.seq for m in ctx.recalled) == [2, 3, 4]


def test_a_next_turn_passes_the_filters(db, dsn):
    _talk(Memory(db=db), "alice")
    assert [s for s, *_ in _recall(dsn, metadata='{"part": "a"}')] == [2]  # the answer is part b
    assert [s for s, *_ in _recall(dsn, until=T0 + timedelta(hours=2))] == [2]  # the answer is at hour 2
    assert [s for s, *_ in _recall(dsn, since=T0 + timedelta(hours=1), until=T0 + timedelta(hours=3))] == [2, 3]
    assert [s for s, *_ in _recall(dsn, as_of=T0 + timedelta(hours=1))] == [2]
    assert [s for s, *_ in _recall(dsn, min_content_chars=len(ANSWER) + 1)] == [2]
    assert [s for s, *_ in _recall(dsn, min_score=0.9)] == [2]  # the match scores 1, its next turn 0.8
    # the current thread's window is not recalled, next turns included
    assert [s for s, *_ in _recall(dsn, thread_id="t", window_size=3)] == [2]
    with psycopg.connect(dsn, autocommit=True) as c:
        for bad in (-0.1, 1.5, None):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="next_turn_weight"):
                c.execute("SELECT * FROM pymem.messages_recall(user_id => 'alice', query_text => 'x', "
                          "recall => pymem.recall(next_turn_weight => %s::float8))", (bad,))


def test_a_next_turn_is_never_another_users_or_projects(db, dsn, as_role):
    """alice's match is the last message of her thread; bob and another project have a message with
    the next sequence number in a thread of the same name: none of them comes back."""
    Memory(db=db).add_message(QUESTION, user="alice", thread="t", created_at=T0)
    _talk(Memory(db=db), "bob")
    _talk(Memory(db=db, project_id="other"), "alice", " (other)")
    assert [(s, c) for s, c, *_ in _recall(dsn)] == [(1, QUESTION)]
    # a tenant bound to the project of "other" reads its own alice only, next turn included
    app = as_role("next_turn_app")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO next_turn_app")
        c.execute("SELECT pymem.tenant_bind('next_turn_app', 'other')")
    with psycopg.connect(app, autocommit=True) as c:
        got = c.execute("SELECT seq, content FROM pymem.messages_recall(user_id => 'alice', project_id => 'other', "
                        "query_text => 'concert birthday', thread_id => 'x', recall => pymem.recall(k => 3))").fetchall()
        assert got == [(2, QUESTION + " (other)"), (3, ANSWER + " (other)"),
                       (4, "Tomorrow the garden needs watering again. (other)")]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT * FROM pymem.messages_recall(user_id => 'alice', query_text => 'concert', "
                      "recall => pymem.recall(k => 2))")


def test_hybrid_recall_brings_the_next_turn_with_its_own_cosine_when_ranked(db, dsn):
    mem = Memory(db=db, embedder=HashEmbedder(64), recall_k=3)
    _talk(mem, "alice")
    got = mem.recall(QUESTION, user="alice", thread="x")
    seqs = [m.seq for m in got]
    assert seqs[:2] == [2, 3]
    answer = got[1]
    assert answer.score == pytest.approx(max(0.8 * got[0].score, answer.score))
    # its similarity: its own cosine when it was among the top k by its own score, else none
    own = {m.seq: m for m in Memory(db=db, embedder=HashEmbedder(64), recall_k=3, next_turn_weight=0).recall(
        QUESTION, user="alice", thread="x")}
    if 3 in own:
        assert answer.similarity == pytest.approx(own[3].similarity)
    else:
        assert answer.similarity is None
