"""Hybrid recall (issue 14): messages_recall / context_read fuse a BM25 score of the query's words
with the cosine of its vector (and recency, importance), take as_of, a time range and a metadata
filter, and return exactly the brute-force top k (ties and filters included). The brute force
here recomputes every score in Python from the stored lexemes and vectors."""

from __future__ import annotations

import asyncio
import itertools
import math
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pymem
from pymem import AsyncMemory, Memory
from pymem.embedders import HashEmbedder
from pymem.errors import ValidationError
from pymem.options import RecallOptions

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
LW = RecallOptions().lexical_weight  # the default lexical weight (SQL: the same default)


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def make(db, **kw):
    kw.setdefault("embedder", HashEmbedder(64))
    return Memory(db=db, agent_id="bot", **kw)


def load(mem):
    """alice: 120 messages in two threads over 120 hours, some of them twice (same text, same
    time: exact ties); bob: the same words, never recalled for alice."""
    for user in ("alice", "bob"):
        for i in range(120):
            text = f"{WORDS[i % 10]} {WORDS[(i * 7) % 10]} {WORDS[(i * 3) % 10]} note {i % 40} from {user}"
            when = T0 + timedelta(hours=i)
            mem.add_message(text, user=user, thread="main", created_at=when, importance=((i * 37) % 100) / 100,
                            metadata={"speaker": "Ann" if i % 3 else "Bo", "n": i})
            if i % 10 == 0:  # a tie: the same message at the same time in another thread
                mem.add_message(text, user=user, thread="copy", created_at=when,
                                importance=((i * 37) % 100) / 100, metadata={"speaker": "Ann" if i % 3 else "Bo"})


def brute(dsn, embedder, *, text, vector, k, lw, rw=0.0, iw=0.0, half_life=3600.0, as_of=None, since=None,
          until=None, metadata=None, thread="other", window=0, min_chars=10, floor=True, next_weight=0.8,
          time_from=None, time_to=None, time_weight=0.2):
    """The ranking recomputed in Python. ``floor``: a message with no term in common and no
    positive cosine is not eligible (issue 29); False counts them, to show the floor cut some.
    ``next_weight`` (next_turn_weight, default 0.8): the two messages after each of the top k by
    own score, in its thread, when they pass the filters, score at least next_weight times that one.
    ``time_from`` / ``time_to``: a named time; a message created in it scores time_weight more (its own score)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        terms = c.execute("SELECT coalesce(tsvector_to_array(to_tsvector('english', %s)), '{}')", (text,)).fetchone()[0] \
            if text is not None else []
        docs = c.execute("""
            SELECT l.thread_id, l.seq, l.chars, l.importance, l.created_at, l.tokens,
                   (SELECT jsonb_object_agg(u.lexeme, cardinality(u.positions)) FROM unnest(l.lexemes) u),
                   e.embedding::text, m.metadata, coalesce(t.last_seq, 0)
              FROM pymem.message_lexemes l JOIN pymem.messages m USING (project_id, user_id, thread_id, seq)
              LEFT JOIN pymem.message_embeddings e
                ON e.project_id = l.project_id AND e.user_id = l.user_id AND e.thread_id = l.thread_id
               AND e.seq = l.seq AND e.embedder = %s
              LEFT JOIN pymem.threads t ON t.project_id = l.project_id AND t.user_id = l.user_id AND t.thread_id = %s
             WHERE l.project_id = '' AND l.user_id = 'alice'""", (embedder, thread)).fetchall()
        now = c.execute("SELECT now()").fetchone()[0]
    corpus = [d for d in docs if as_of is None or d[4] <= as_of]
    n = len(corpus)
    avgdl = max(sum(d[5] for d in corpus) / n, 1) if n else 1
    df = {t: sum(1 for d in corpus if t in d[6]) for t in terms}

    def bm25(d):
        s = 0.0
        for t in terms:
            if t in d[6]:  # a term counts once per message (tf 1)
                # BM25 k1 1.2, b 0.3 (pymem._bm25 as recall calls it)
                s += math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * 2.2 / (1 + 1.2 * (0.7 + 0.3 * d[5] / avgdl))
        return s

    def cos(v):
        v = [float(x) for x in v.strip("[]").split(",")]
        return sum(a * b for a, b in zip(v, vector)) / math.sqrt(sum(a * a for a in v) * sum(b * b for b in vector))

    eligible = []
    passing = {}  # (thread, seq) -> created_at of every message the filters let through (a next turn's check)
    for d in docs:
        if not (d[2] < min_chars or (d[0] == thread and d[1] > d[9] - window)
                or (as_of is not None and d[4] > as_of) or (since is not None and d[4] < since)
                or (until is not None and d[4] >= until)
                or (metadata is not None and any(d[8].get(key) != value for key, value in metadata.items()))):
            passing[(d[0], d[1])] = d[4]
        lex = bm25(d) if d in corpus else 0.0
        if vector is None and lex == 0:
            continue
        if vector is not None and d[7] is None:
            continue
        if d[2] < min_chars or (d[0] == thread and d[1] > d[9] - window):
            continue
        if (as_of is not None and d[4] > as_of) or (since is not None and d[4] < since) \
                or (until is not None and d[4] >= until):
            continue
        if metadata is not None and any(d[8].get(key) != value for key, value in metadata.items()):
            continue
        if floor and vector is not None and lex == 0 and cos(d[7]) <= 1e-5:  # pymem._vector_match
            continue
        eligible.append((d, lex, None if vector is None else cos(d[7])))
    best = max((lex for _, lex, _ in eligible), default=0)
    scored = []
    for d, lex, sim in eligible:
        lexn = lex / best if best > 0 else 0.0
        rel = lexn if sim is None else (sim if not terms else (1 - lw) * sim + lw * lexn)
        age = max(((as_of or now) - d[4]).total_seconds(), 0)
        score = (1 - rw - iw) * rel + (rw * 0.5 ** min(age / half_life, 1000) if rw else 0) + iw * d[3]
        if time_from is not None and time_from <= d[4] < time_to:
            score += time_weight
        scored.append((score, d[4], d[0], d[1]))
    def order(s):  # six significant digits (the vectors are float4): scores of 1e-7 (recency alone) still order;
        # in a tie a message by its own score (hop 0) first, then the turn right after one (1), then two after (2)
        return (-float(f"{s[0]:.6g}"), s[4], -s[1].timestamp(), s[2], -s[3])

    scored = sorted(((*row, 0) for row in scored), key=order)
    if next_weight:
        best = {(t, s): (score, when, 0) for score, when, t, s, _ in scored[:k]}
        for score, _, t, s, _ in scored[:k]:
            for hop in (1, 2):
                after = (t, s + hop)
                old = best.get(after, (-math.inf, None, 0))
                if after in passing and (next_weight * score > old[0] or (next_weight * score == old[0] and hop < old[2])):
                    best[after] = (next_weight * score, passing[after], hop)
        scored = sorted(((score, when, t, s, hop) for (t, s), (score, when, hop) in best.items()), key=order)
    return [(t, s, score) for score, _, t, s, _ in scored[:k]]


def check(got, expected):
    assert [(m.thread, m.seq) for m in got] == [(t, s) for t, s, _ in expected]
    for m, (_, _, score) in zip(got, expected):
        assert m.score == pytest.approx(score, abs=1e-6)  # the vectors are float4


@pytest.mark.parametrize("options", [
    {},  # the defaults: lexical_weight LW, no recency, no importance
    {"lexical_weight": 0.7, "recency_weight": 0.2, "importance_weight": 0.1, "half_life_seconds": 36000},
    {"lexical_weight": 1.0},
])
def test_hybrid_recall_is_the_brute_force_top_k(db, dsn, options):
    mem = make(db, **options)
    load(mem)
    emb = mem.embedder
    query = "charlie delta note"
    as_of = T0 + timedelta(hours=90)
    kw = {"lw": options.get("lexical_weight", LW), "rw": options.get("recency_weight", 0.0),
          "iw": options.get("importance_weight", 0.0), "half_life": options.get("half_life_seconds", 3600.0)}
    vec = emb.embed([query])[0]
    for k in (1, 7, 40):
        got = mem.recall(query, user="alice", thread="other", k=k, as_of=as_of)
        check(got, brute(dsn, emb.name, text=query, vector=vec, k=k, as_of=as_of, **kw))
        assert len(got) == k
    # ties: the copies in thread "copy" score exactly like their originals, and come first (thread order)
    got = mem.recall(query, user="alice", thread="other", k=300)
    assert len(got) == 2 * 132 - 132  # every one of alice's 132 messages, none of bob's
    keys = [(m.score, m.created_at) for m in got]
    tied = [i for i in range(1, len(keys)) if keys[i] == keys[i - 1]]
    assert tied and all(got[i - 1].thread == "copy" and got[i].thread == "main" for i in tied)
    check(got, brute(dsn, emb.name, text=query, vector=vec, k=300, **kw))


def test_lexical_weight_zero_ranks_by_the_vector_alone(db, dsn):
    """lexical_weight 0 with a vector: the text is not read (the call costs what the vector's
    does), so the result is the vector's, and a message sharing a word with the text but with no
    positive cosine, past the floor with a lexical weight, is not recalled."""
    hybrid = make(db, next_turn_weight=0)  # no next turns: they may bring any message
    load(hybrid)
    plain = make(db, lexical_weight=0, next_turn_weight=0)
    query = "charlie delta note"
    vec = plain.embedder.embed([query])[0]
    got = plain.recall(query, user="alice", thread="other", k=300)
    check(got, brute(dsn, plain.embedder.name, text=None, vector=vec, k=300, lw=0, next_weight=0))
    words_only = {(m.thread, m.seq) for m in hybrid.recall(query, user="alice", thread="other", k=300)
                  if m.similarity is not None and m.similarity <= 1e-5}
    assert words_only - {(m.thread, m.seq) for m in got}  # reached through their words only: not now
    with psycopg.connect(dsn, autocommit=True) as c:
        sql = ("SELECT thread_id, seq, score FROM pymem.messages_recall(user_id => 'alice', query_vector => %s::text::vector,"
               " embedder => %s, thread_id => 'other', query_text => %s, recall => pymem.recall(k => 300, lexical_weight => 0,"
               " next_turn_weight => 0.8))")
        args = (str(list(vec)), plain.embedder.name)
        assert c.execute(sql, (*args, query)).fetchall() == c.execute(sql, (*args, None)).fetchall()


def test_filters_time_range_metadata_and_the_window(db, dsn):
    mem = make(db, window=5)
    load(mem)
    emb = mem.embedder
    query = "india echo"
    vec = emb.embed([query])[0]
    since, until = T0 + timedelta(hours=30), T0 + timedelta(hours=70)
    for k in (3, 20):
        got = mem.recall(query, user="alice", thread="main", k=k, since=since, until=until, metadata={"speaker": "Bo"},
                         skip_window=True)
        expected = brute(dsn, emb.name, text=query, vector=vec, k=k, lw=LW, since=since, until=until,
                         metadata={"speaker": "Bo"}, thread="main", window=5)
        check(got, expected)
        assert all(since <= m.created_at < until and m.metadata["speaker"] == "Bo" for m in got)
    # every eligible one, and no more
    eligible = brute(dsn, emb.name, text=query, vector=vec, k=1000, lw=LW, since=since, until=until,
                     metadata={"speaker": "Bo"}, thread="main", window=5)
    got = mem.recall(query, user="alice", thread="main", k=1000, since=since, until=until, metadata={"speaker": "Bo"},
                     skip_window=True)
    assert len(got) == len(eligible) == 14 + 2  # hours 30..69 said by Bo, and the copies of 30 and 60
    # with skip_window (as the context's recall block), the window of the current thread is not recalled ...
    newest = mem.recall(query, user="alice", thread="main", k=1000, skip_window=True)
    assert max(m.seq for m in newest if m.thread == "main") == 120 - 5
    # ... and a direct recall searches every message (issue 29, item 6)
    everything = mem.recall(query, user="alice", thread="main", k=1000)
    assert max(m.seq for m in everything if m.thread == "main") == 120
    with pytest.raises(pymem.ValidationError, match="skip_window"):
        mem.recall(query, user="alice", skip_window="yes")
    # as_of: nothing newer comes back, even when it is the best match
    as_of = T0 + timedelta(hours=10)
    got = mem.recall(query, user="alice", thread="other", k=50, as_of=as_of)
    assert len(got) == 11 + 2 and all(m.created_at <= as_of for m in got)


def test_sql_callers_without_a_vector_get_lexical_recall_and_without_text_vector_recall(db, dsn):
    mem = make(db)
    load(mem)
    mem.recall("warm up", user="alice", k=1)  # embeds alice's messages
    emb = mem.embedder
    with psycopg.connect(dsn, autocommit=True) as c:
        lexical = c.execute("""SELECT thread_id, seq, score, similarity FROM pymem.messages_recall(
                                   user_id => 'alice', query_text => 'golf hotel', thread_id => 'other', recall => pymem.recall(k => 500))""").fetchall()
        vec = emb.embed(["golf hotel"])[0]
        vector_only = c.execute("""SELECT thread_id, seq, score, similarity FROM pymem.messages_recall(
                                       user_id => 'alice', query_vector => %s::text::vector, embedder => %s,
                                       thread_id => 'other', recall => pymem.recall(k => 10))""",
                                ("[" + ",".join(map(str, vec)) + "]", emb.name)).fetchall()
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="needs a query"):
            c.execute("SELECT * FROM pymem.messages_recall(user_id => 'alice')")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="lexical_weight"):
            c.execute("SELECT * FROM pymem.messages_recall(user_id => 'alice', query_text => 'x', "
                      "recall => pymem.recall(lexical_weight => 2))")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="JSON object"):
            c.execute("SELECT * FROM pymem.messages_recall(user_id => 'alice', query_text => 'x', "
                      "recall => pymem.recall(metadata => '[1]'))")
        stop_words_only = c.execute("""SELECT count(*) FROM pymem.messages_recall(
                                           user_id => 'alice', query_text => 'the and of', recall => pymem.recall(k => 5))""").fetchone()[0]
    expected = brute(dsn, emb.name, text="golf hotel", vector=None, k=500, lw=LW)
    # only the messages sharing a word with the text, each scored by its words alone
    assert [(t, s) for t, s, _, _ in lexical] == [(t, s) for t, s, _ in expected]
    assert all(sim is None for *_, sim in lexical) and lexical[0][2] == pytest.approx(1.0)
    assert 0 < len(lexical) < 132
    # a vector without text: the cosine alone (score = similarity)
    assert len(vector_only) == 10 and all(score == pytest.approx(sim) for *_, score, sim in vector_only)
    assert stop_words_only == 0
    # Python: a Memory without an embedder recalls by words
    words = Memory(db=db, agent_id="bot").recall("golf hotel", user="alice", thread="other", k=500)
    assert [(m.thread, m.seq) for m in words] == [(t, s) for t, s, _ in expected]


def test_context_and_async_recall_take_the_same_query_text_and_filters(db, dsn):
    mem = make(db, recall_k=4)
    load(mem)
    as_of = T0 + timedelta(hours=60)
    # recall first: it embeds all 132 messages (a context read embeds at most 100 per call)
    direct = mem.recall("juliet alpha", user="alice", thread="other", k=4, as_of=as_of, metadata={"speaker": "Ann"})
    ctx = mem.read("juliet alpha", user="alice", thread="other", as_of=as_of, metadata={"speaker": "Ann"})
    assert [(m.thread, m.seq) for m in ctx.recalled] == [(m.thread, m.seq) for m in direct]
    assert len(direct) == 4 and all(m.metadata["speaker"] == "Ann" and m.created_at <= as_of for m in direct)
    with pytest.raises(ValidationError, match="timezone-aware"):
        mem.recall("juliet", user="alice", as_of=datetime(2024, 1, 1))

    async def run():
        amem = AsyncMemory(db=await _async_db(dsn), agent_id="bot", embedder=HashEmbedder(64), recall_k=4)
        got = await amem.recall("juliet alpha", user="alice", thread="other", as_of=as_of, metadata={"speaker": "Ann"})
        ctx = await amem.read("juliet alpha", user="alice", thread="other", as_of=as_of, metadata={"speaker": "Ann"})
        await amem.db.close()
        return got, ctx

    got, actx = asyncio.run(run())
    assert [(m.thread, m.seq) for m in got] == [(m.thread, m.seq) for m in direct]
    assert [(m.thread, m.seq) for m in actx.recalled] == [(m.thread, m.seq) for m in direct]


async def _async_db(dsn):
    return await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn))



def test_vectors_carry_their_messages_lexemes_and_old_rows_rank_the_same(db, dsn):
    """0017: every writer of message vectors stores the message's lexemes and length beside the
    vector (one read of the user's rows ranks both scores). A vector stored before 0017 has NULL
    there, and recall takes them from message_lexemes: the ranking is the same either way."""
    mem = make(db)
    load(mem)
    mem.record("hotel juliet booking for the trip", "noted: hotel juliet", user="alice", thread="main")  # turn_record
    query = "hotel juliet note"
    before = [(m.thread, m.seq, m.score) for m in mem.recall(query, user="alice", thread="other", k=25)]
    ctx_before = mem.read(query, user="alice", thread="other").recalled
    with psycopg.connect(dsn, autocommit=True) as c:
        stored = c.execute("""
            SELECT count(*), count(*) FILTER (WHERE e.lexemes = l.lexemes AND e.tokens = l.tokens)
              FROM pymem.message_embeddings e JOIN pymem.message_lexemes l USING (project_id, user_id, thread_id, seq)
             WHERE e.user_id = 'alice'""").fetchone()
    # the turn's two vectors (turn_record), the rest embedded by recall's catch-up (message_embeddings_put)
    assert stored[0] == 132 + 2 and stored[1] == stored[0]
    with psycopg.connect(dsn, autocommit=True) as c:  # as a vector stored before 0017 looks
        c.execute("UPDATE pymem.message_embeddings SET lexemes = NULL, tokens = NULL WHERE user_id = 'alice'")
    after = [(m.thread, m.seq, m.score) for m in mem.recall(query, user="alice", thread="other", k=25)]
    assert [a[:2] for a in after] == [b[:2] for b in before]
    assert [a[2] for a in after] == pytest.approx([b[2] for b in before], abs=1e-9)
    assert mem.read(query, user="alice", thread="other").recalled == ctx_before
    assert len(before) == 25 and any(b[2] != before[0][2] for b in before)
    with psycopg.connect(dsn, autocommit=True) as c:  # the backfill copies them beside the vectors, in batches
        assert [c.execute("SELECT pymem.message_lexemes_backfill(max_messages => 100)").fetchone()[0]
                for _ in range(3)] == [100, 34, 0]
        assert c.execute("SELECT count(*) FROM pymem.message_embeddings e JOIN pymem.message_lexemes l "
                         "USING (project_id, user_id, thread_id, seq) "
                         "WHERE e.lexemes = l.lexemes AND e.tokens = l.tokens").fetchone()[0] == 134
    assert [(m.thread, m.seq, m.score) for m in mem.recall(query, user="alice", thread="other", k=25)] == before


def test_a_project_chooses_its_text_search_configuration(db, dsn):
    """0022: english by default; text_search_configure('simple') re-indexes the project's stored
    messages, vectors' lexemes and facts (no stemming, no stop words), and queries use it too;
    other projects keep theirs; an unknown configuration is refused and changes nothing."""
    mem = make(db)
    other = Memory(db=db, agent_id="bot", embedder=HashEmbedder(64), project_id="other")
    for m in (mem, other):
        m.add_message("The meetings were about being there", user="alice", thread="main")
        m.add_message("Unrelated words entirely here", user="alice", thread="main")
        m.persist("Alice is attending the meetings", user="alice")
    for m in (mem, other):
        m.recall("meetings", user="alice", thread="x", k=1)  # embeds the messages (their vectors carry lexemes)

    def lexemes(project):
        with psycopg.connect(dsn, autocommit=True) as c:
            return (c.execute("SELECT string_agg(lexemes::text, ' ' ORDER BY seq) FROM pymem.message_lexemes WHERE project_id = %s",
                              (project,)).fetchone()[0],
                    c.execute("SELECT string_agg(lexemes::text, ' ' ORDER BY seq) FROM pymem.message_embeddings WHERE project_id = %s",
                              (project,)).fetchone()[0],
                    c.execute("SELECT string_agg(lexemes::text, ' ') FROM pymem.fact_lexemes WHERE project_id = %s",
                              (project,)).fetchone()[0])

    before = lexemes("")
    assert "'meet'" in before[0] and "'were'" not in before[0] and before[1] == before[0]
    with psycopg.connect(dsn, autocommit=True) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("SELECT pymem.text_search_configure('no_such_config')")
        assert lexemes("") == before
        assert c.execute("SELECT pymem.text_search_configure('simple')").fetchone()[0] == 2 + 2 + 1
        assert c.execute("SELECT pymem.text_search_configure('simple')").fetchone()[0] == 0  # already that one
    after = lexemes("")
    assert "'meetings'" in after[0] and "'were'" in after[0] and after[1] == after[0] and "'meetings'" in after[2]
    assert lexemes("other") == before  # another project keeps english
    with psycopg.connect(dsn, autocommit=True) as c:  # queries use the project's configuration too
        got = c.execute("SELECT content FROM pymem.messages_recall(user_id => 'alice', query_text => 'were', "
                        "thread_id => 'x', recall => pymem.recall(k => 5, next_turn_weight => 0))").fetchall()  # the match alone
        assert got == [("The meetings were about being there",)]
        assert c.execute("SELECT count(*) FROM pymem.messages_recall(user_id => 'alice', query_text => 'were', "
                         "project_id => 'other', thread_id => 'x', recall => pymem.recall(k => 5))").fetchone()[0] == 0
        mem.add_message("They were late again", user="alice", thread="main")  # new writes use it
        assert "'were'" in c.execute("SELECT lexemes::text FROM pymem.message_lexemes WHERE project_id = '' "
                                     "ORDER BY seq DESC LIMIT 1").fetchone()[0]


def _load_sparse(mem):
    """Messages that mostly share no word with the query (rare terms): the ranking's shortcut (the
    k best rows by the score every row has, plus the rows sharing a term) decides the result."""
    import random
    rnd = random.Random(7)
    for user in ("alice", "bob"):
        for i in range(150):
            words = [f"w{rnd.randrange(400)}" for _ in range(rnd.randrange(3, 12))]
            if i % 13 == 0:
                words.append("charlie")
            if i % 29 == 0:
                words.append("zulu")
            mem.add_message(" ".join(words), user=user, thread="main", created_at=T0 + timedelta(hours=i),
                            importance=((i * 37) % 100) / 100)


@pytest.mark.parametrize("options", [
    {},
    {"lexical_weight": 0.7, "recency_weight": 0.2, "importance_weight": 0.1, "half_life_seconds": 36000},
    {"lexical_weight": 0.9, "recency_weight": 0.05, "importance_weight": 0.05, "half_life_seconds": 360000},
    {"lexical_weight": 1.0, "recency_weight": 0.3},
])
@pytest.mark.parametrize("stale", [False, True])
def test_rare_terms_hybrid_is_the_brute_force_top_k(db, dsn, options, stale):
    """(Found by a second reader: in the test above every message shares "note" with the query.)
    Half the vectors without their lexemes beside them (stale: stored before 0017) rank the same."""
    mem = make(db, **options)
    _load_sparse(mem)
    emb = mem.embedder
    query = "charlie zulu"
    vec = emb.embed([query])[0]
    mem.recall(query, user="alice", thread="other", k=1)  # embeds the messages
    if stale:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("UPDATE pymem.message_embeddings SET lexemes = NULL, tokens = NULL WHERE seq % 2 = 0")
    kw = {"lw": options.get("lexical_weight", LW), "rw": options.get("recency_weight", 0.0),
          "iw": options.get("importance_weight", 0.0), "half_life": options.get("half_life_seconds", 3600.0)}
    as_of = T0 + timedelta(hours=140)
    for k in (1, 3, 7, 20, 60):
        got = mem.recall(query, user="alice", thread="other", k=k, as_of=as_of)
        check(got, brute(dsn, emb.name, text=query, vector=vec, k=k, as_of=as_of, **kw))
        assert len(got) == min(k, len(brute(dsn, emb.name, text=query, vector=vec, k=1000, as_of=as_of, **kw)))
    # the floor cut rows here: without it the ranking would have had more to give
    everything = brute(dsn, emb.name, text=query, vector=vec, k=1000, as_of=as_of, floor=False, **kw)
    assert len(mem.recall(query, user="alice", thread="other", k=1000, as_of=as_of)) < len(everything)


@pytest.mark.parametrize("next_weight", [0.8, 0])
def test_a_named_time_adds_time_weight_to_the_same_score(db, dsn, next_weight):
    """A named time (time_from / time_to): the exact top k of the ranking's own score plus
    time_weight for the messages created in it, for hybrid, vector and text recall alike; the
    lexical part is normalised by the best eligible match of all, inside the named time or not."""
    import numpy as np
    from pgvector.psycopg import register_vector

    mem = make(db)
    load(mem)
    emb = mem.embedder
    query = "charlie delta note"
    vec = emb.embed([query])[0]
    mem.recall(query, user="alice", thread="other", k=1)  # embeds the messages
    # hours 7-9: two messages sharing only "note" with the query (its best matches lie outside)
    with psycopg.connect(dsn, autocommit=True) as c:
        register_vector(c)
        for (h0, h1), text, vector in itertools.product(((30, 60), (7, 9)), (query, None), (vec, None)):
            if text is None and vector is None:
                continue
            time_from, time_to = T0 + timedelta(hours=h0), T0 + timedelta(hours=h1)
            for k in (1, 5, 12, 40):
                got = c.execute(
                    "SELECT thread_id, seq, score FROM pymem.messages_recall(user_id => 'alice', query_vector => %s, "
                    "embedder => %s, query_text => %s, thread_id => 'other', recall => pymem.recall(k => %s, time_from => %s, "
                    "time_to => %s, next_turn_weight => %s))",
                    (None if vector is None else np.asarray(vector, dtype=np.float32), emb.name, text, k,
                     time_from, time_to, next_weight)).fetchall()
                expected = brute(dsn, emb.name, text=text or "", vector=vector, k=k, lw=LW, next_weight=next_weight,
                                 time_from=time_from, time_to=time_to)
                assert [(t, s) for t, s, _ in got] == [(t, s) for t, s, _ in expected], (h0, text is not None, vector is not None, k)
                assert [x for *_, x in got] == pytest.approx([x for *_, x in expected], abs=1e-6)
