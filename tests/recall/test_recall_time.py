"""Time-aware recall (issue 32, item 3): a time the question names (pymem.timeref.named_time:
"on 13 October, 2023", "in May 2024", "last week", read from as_of or now) goes to SQL as
time_from / time_to, and the messages created in [time_from, time_to) score time_weight (default
0.2) more; the top k is the exact top k of that score (checked against every message's own score
here), then the next turns follow as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pymem
from pymem import Memory
from pymem.timeref import named_time

MAY = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)
JUNE = datetime(2024, 6, 12, 12, 0, tzinfo=UTC)


def d(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(("text", "span"), [
    ("What painting did Melanie show on October 13, 2023?", (d(2023, 10, 13), d(2023, 10, 14))),
    ("What did Gina find for her store on 1 February, 2023?", (d(2023, 2, 1), d(2023, 2, 2))),
    ("What did John do on the 3rd of June 2023?", (d(2023, 6, 3), d(2023, 6, 4))),
    ("What did they do in December 2023?", (d(2023, 12, 1), d(2024, 1, 1))),
    ("When did Melanie go camping in June?", (d(2024, 6, 1), d(2024, 7, 1))),  # the latest June up to the reference
    ("Any trip in September?", (d(2023, 9, 1), d(2023, 10, 1))),
    ("How often to the beach in 2023?", (d(2023, 1, 1), d(2024, 1, 1))),
    ("What happened yesterday?", (d(2024, 7, 9), d(2024, 7, 10))),
    ("Where did we go last week?", (d(2024, 7, 1), d(2024, 7, 8))),  # 10 July 2024 is a Wednesday
    ("What did I read last month?", (d(2024, 6, 1), d(2024, 7, 1))),
    ("Where did John travel last year?", (d(2023, 1, 1), d(2024, 1, 1))),
    ("What is my favourite colour?", None),
    ("Was it on 31 February, 2023?", None),
])
def test_named_time_reads_dates_months_years_and_recent_spans(text, span):
    assert named_time(text, d(2024, 7, 10)) == span


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as db:
        yield db


def _load(mem: Memory) -> None:
    """Two sessions that say the same about the garden (same texts), one in May and one in June 2024."""
    for when, tag in ((MAY, "may"), (JUNE, "june")):
        for i, text in enumerate(["We planted tomatoes in the garden", "The garden needs water every day",
                                  "Our garden party was a success", "Bought new seeds for the garden"]):
            mem.add_message(text, user="alice", thread=tag, created_at=when + timedelta(minutes=i))


def _rows(dsn, **kw):
    args = {"user_id": "alice", "query_text": "garden", "thread_id": "elsewhere", "k": 8, "next_turn_weight": 0} | kw
    with psycopg.connect(dsn, autocommit=True) as c:
        return c.execute("SELECT thread_id, seq, score FROM pymem.messages_recall("
                         + _named(args) + ")", args).fetchall()


def _named(args: dict) -> str:
    """messages_recall's named arguments, those of its recall spec inside pymem.recall(...)."""
    spec = [n for n in args if n not in CALL]
    return ", ".join([f"{n} => %({n})s" for n in args if n in CALL]
                     + ([f"recall => pymem.recall({', '.join(f'{n} => %({n})s' for n in spec)})"] if spec else []))


CALL = {"user_id", "query_vector", "embedder", "project_id", "thread_id", "query_text"}


def test_messages_of_the_named_time_score_time_weight_more(db, dsn):
    _load(Memory(db=db))
    plain = {(t, s): score for t, s, score in _rows(dsn, time_weight=0)}
    assert len(plain) == 8
    span = {"time_from": d(2024, 5, 1), "time_to": d(2024, 6, 1)}
    for k in (1, 3, 5, 8):
        got = _rows(dsn, k=k, **span)
        # the exact top k of own score + 0.2 inside May (ties: newer first, then thread, seq)
        with psycopg.connect(dsn, autocommit=True) as c:
            when = dict(((t, s), w) for t, s, w in c.execute(
                "SELECT thread_id, seq, created_at FROM pymem.messages WHERE user_id = 'alice'").fetchall())
        expected = sorted(((score + (0.2 if t == "may" else 0), when[(t, s)], t, s) for (t, s), score in plain.items()),
                          key=lambda x: (-round(x[0], 9), -x[1].timestamp(), x[2], -x[3]))[:k]
        assert [(t, s) for t, s, _ in got] == [(t, s) for _, _, t, s in expected]
        assert [score for *_, score in got] == pytest.approx([x[0] for x in expected])
    assert {t for t, _, _ in _rows(dsn, k=4, **span)} == {"may"}
    assert {t for t, _, _ in _rows(dsn, k=4, time_from=d(2024, 6, 1), time_to=d(2024, 7, 1))} == {"june"}
    # with the caller's own since / until: the named time within them only
    assert {t for t, _, _ in _rows(dsn, k=8, since=d(2024, 6, 1), **span)} == {"june"}
    # the next turns follow the boosted ranking
    assert [(t, s) for t, s, _ in _rows(dsn, k=2, next_turn_weight=0.8, **span)][0][0] == "may"
    with psycopg.connect(dsn, autocommit=True) as c:
        for bad in ({"time_from": d(2024, 5, 1)}, {"time_to": d(2024, 5, 1)},
                    {"time_from": d(2024, 6, 1), "time_to": d(2024, 5, 1)}, {"time_weight": 1.5}):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="time_"):
                c.execute("SELECT * FROM pymem.messages_recall(user_id => 'alice', query_text => 'garden', "
                          + _named(bad) + ")", bad)


def test_memory_reads_the_time_in_the_question(db):
    mem = Memory(db=db, recall_k=4, next_turn_weight=0)
    _load(mem)
    may = mem.recall("What did we do in the garden in May 2024?", user="alice", thread="x")
    assert {m.thread for m in may} == {"may"}
    june = mem.recall("What did we do in the garden in June?", user="alice", thread="x", as_of=d(2024, 7, 1))
    assert {m.thread for m in june} == {"june"}
    ctx = mem.read("What did we do in the garden in May 2024?", user="alice", thread="x")
    assert {m.thread for m in ctx.recalled} == {"may"}
    # time_weight 0: the question's time is not read, each text's copies tie and the newer comes first
    off = Memory(db=db, recall_k=4, next_turn_weight=0, time_weight=0).recall(
        "What did we do in the garden in May 2024?", user="alice", thread="x")
    assert off[0].thread == "june" and {m.thread for m in off} == {"may", "june"}
