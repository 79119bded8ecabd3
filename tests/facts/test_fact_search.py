"""Fact search (sql/api/facts_search.sql facts_search, Memory.retrieve): the fused lexical + vector ranking
checked against a brute-force ranking computed here (ties and filters included), the lexical
index kept by the facts_lexemes trigger, lexical-only and vector-only searches, the metadata
filter, created_at on fact writes, and the plans of a user's lexical search on a big table."""

from __future__ import annotations

import asyncio
import json
import math
import random
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory

WORDS = ["alice", "lives", "in", "paris", "likes", "tea", "coffee", "works", "at", "acme", "hiking", "dog",
         "cat", "berlin", "the", "blue", "car", "sister", "plays", "piano"]


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def vec(values) -> str:
    return "[" + ",".join(str(float(v)) for v in values) + "]"


def search(c, *, subject="u1", query=None, text=None, k=5, metadata=None, weight=0.5, scope_id=None):
    return c.execute(
        "SELECT id, similarity, score FROM pymem.facts_search('user', %s, %s::text::vector, %s, k => %s,"
        " query_text => %s, metadata => %s::jsonb, lexical_weight => %s)",
        (scope_id or subject, None if query is None else vec(query), None if query is None else "e3", k, text,
         metadata if metadata is None or isinstance(metadata, str) else json.dumps(metadata), weight)).fetchall()


def brute(c, *, subject="u1", query=None, text=None, metadata=None, weight=0.5):
    """Every eligible fact's score, computed here from the stored lexemes and vectors."""
    rows = c.execute(
        "SELECT f.id, f.metadata, e.embedding::text, l.tokens FROM pymem.facts AS f"
        " JOIN pymem.fact_lexemes AS l ON (l.project_id, l.scope, l.scope_id, l.fact_id) = (f.project_id, f.scope, f.scope_id, f.id)"
        " LEFT JOIN pymem.fact_embeddings AS e ON (e.project_id, e.scope, e.scope_id, e.fact_id) = (f.project_id, f.scope, f.scope_id, f.id)"
        " WHERE f.scope = 'user' AND f.scope_id = %s AND f.superseded_by IS NULL", (subject,)).fetchall()
    tf = {}
    for fid, lexeme, n in c.execute(
            "SELECT l.fact_id, u.lexeme, cardinality(u.positions) FROM pymem.fact_lexemes AS l, unnest(l.lexemes) AS u"
            " WHERE l.scope = 'user' AND l.scope_id = %s", (subject,)).fetchall():
        tf[(fid, lexeme)] = n
    terms = set(c.execute("SELECT tsvector_to_array(pymem._lexemes(NULL, %s))", (text,)).fetchone()[0] or []) \
        if text is not None else set()
    docs = len(rows)
    avgdl = sum(r[3] for r in rows) / docs if docs else 0
    df = {t: sum(1 for r in rows if (r[0], t) in tf) for t in terms}
    bm25 = {}
    for fid, _, _, dl in rows:
        s = 0.0
        for t in terms:
            if (fid, t) in tf:
                f = tf[(fid, t)]
                s += math.log(1 + (docs - df[t] + 0.5) / (df[t] + 0.5)) * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * dl / avgdl))
        if s > 0:
            bm25[fid] = s
    rows = [r for r in rows if metadata is None or all(r[1].get(k) == v for k, v in metadata.items())]
    top = max((bm25[r[0]] for r in rows if r[0] in bm25), default=None)
    scores = {}
    for fid, _, emb, _ in rows:
        lex = bm25[fid] / top if fid in bm25 else None
        if query is None:
            if lex is not None:
                scores[fid] = lex
        elif emb is not None:
            e = [float(x) for x in emb.strip("[]").split(",")]
            cos = sum(a * b for a, b in zip(e, query)) / math.sqrt(sum(a * a for a in e) * sum(b * b for b in query))
            scores[fid] = (1 - weight) * cos + weight * (lex or 0.0)
    return scores


def check(got, scores, k):
    """Exactly min(k, eligible) rows, each with its brute-force score, best first (ties: higher id
    first), and nothing left out that scores higher than the last row returned."""
    assert len(got) == min(k, len(scores)), (len(got), k, len(scores))
    for fid, _, score in got:
        assert score == pytest.approx(scores[fid], abs=1e-9), fid
    assert [(-round(s, 9), -i) for i, _, s in got] == sorted((-round(s, 9), -i) for i, _, s in got)
    if got:
        last = got[-1][2]
        returned = {i for i, _, _ in got}
        assert all(s <= last + 1e-9 for i, s in scores.items() if i not in returned)


@pytest.fixture
def facts(conn):
    """Two users' facts over a small vocabulary (many shared words), vectors from a small set (many
    exact ties), metadata tags; a few superseded and one without a vector."""
    rng = random.Random(14)
    conn.execute("SELECT pymem.fact_add('user', 'seed', 'seed', embedding => '[1,0,0]', embedder => 'e3')")
    for user in ("u1", "u2"):
        for i in range(60):
            content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7))) + f" #{i % 23}"
            v = rng.choice([[1, 0, 0], [0, 1, 0], [1, 1, 0], [1, 2, 3], [0, 0, 1]])
            conn.execute("SELECT pymem.fact_add('user', %s, %s, embedding => %s::text::vector, embedder => 'e3',"
                         " write => pymem.fact_write(metadata => %s::jsonb))",
                         (user, content, vec(v), '{"tag": "%s", "n": %d}' % (rng.choice("ab"), i % 3)))
    ids = [r[0] for r in conn.execute("SELECT id FROM pymem.facts WHERE scope_id = 'u1' ORDER BY id LIMIT 5")]
    for fid in ids[:3]:
        conn.execute("SELECT pymem.fact_supersede('user', 'u1', 'replaced ' || %s || ' tea', id => %s,"
                     " embedding => '[1,1,0]', embedder => 'e3')", (fid, fid))
    conn.execute("SELECT pymem.fact_add('user', 'u1', 'alice likes tea without a vector')")
    return conn


QUERIES = [([1, 0, 0], "alice likes tea"), ([1, 1, 0], "who plays the piano in berlin?"), ([1, 2, 3], "dog"),
           ([0, 0, 1], "nothing matches zzz"), ([1, 0, 0], None)]


@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("k", [1, 5, 17, 200])
def test_hybrid_ranking_is_the_brute_force_one(facts, weight, k):
    for query, text in QUERIES:
        for metadata in (None, {"tag": "a"}, {"tag": "b", "n": 1}):
            got = [r for r in search(facts, query=query, text=text, k=k, metadata=metadata, weight=weight)
                   if r[1] is not None]
            check(got, brute(facts, query=query, text=text, metadata=metadata, weight=weight), k)


def test_unembedded_facts_come_first_and_are_not_ranked(facts):
    rows = search(facts, query=[1, 0, 0], text="tea", k=3)
    assert rows[0][1] is None and rows[0][2] is None
    content = facts.execute("SELECT content FROM pymem.facts WHERE id = %s", (rows[0][0],)).fetchone()[0]
    assert content == "alice likes tea without a vector"
    assert len(rows) == 4


@pytest.mark.parametrize("k", [1, 3, 10, 100])
def test_lexical_only_search_without_a_vector(facts, k):
    for _, text in QUERIES[:4]:
        got = search(facts, text=text, k=k)
        assert all(similarity is None for _, similarity, _ in got)
        scores = brute(facts, text=text)
        check(got, scores, k)
    assert search(facts, text="zzz qqq") == []  # no fact shares a term: nothing is eligible
    assert search(facts, text="the in at") == []  # stop words only: no term at all


def test_vector_only_search_is_plain_cosine(facts):
    got = search(facts, query=[1, 2, 3], k=200, weight=0.7)
    cos = [r for r in got if r[1] is not None]
    assert all(score == pytest.approx(0.3 * sim) for _, sim, score in cos)  # no text: lexical 0 for all
    assert [(-round(s, 9), -i) for i, s, _ in cos] == sorted((-round(s, 9), -i) for i, s, _ in cos)


def test_weight_zero_orders_by_cosine_alone(facts):
    got = search(facts, query=[1, 1, 0], text="alice tea", k=200, weight=0)
    cos = [r for r in got if r[1] is not None]
    assert [r[0] for r in cos] == [r[0] for r in sorted(cos, key=lambda r: (-round(r[1], 12), -r[0]))]
    assert got == search(facts, query=[1, 1, 0], k=200, weight=0)  # the text is not read: the vector's result


def test_bad_arguments(facts):
    for kwargs, message in [({}, "needs a query"), ({"text": "tea", "weight": 1.5}, "lexical_weight"),
                            ({"text": "tea", "weight": float("nan")}, "lexical_weight"),
                            ({"text": "tea", "metadata": "[1]"}, "JSON object")]:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            search(facts, **kwargs)
        facts.rollback()
    assert search(facts, subject="", text="tea", scope_id="") == []  # '' matches no user


def test_the_scope_wildcard_ranks_every_subject(facts):
    got = search(facts, text="alice tea", k=200, scope_id="*")
    subjects = {facts.execute("SELECT scope_id FROM pymem.facts WHERE id = %s", (i,)).fetchone()[0] for i, _, _ in got}
    assert subjects == {"u1", "u2"}


def test_every_write_path_indexes_the_fact_and_older_facts_are_ranked_too(facts):
    missing = facts.execute("SELECT count(*) FROM pymem.facts AS f WHERE NOT EXISTS (SELECT 1 FROM pymem.fact_lexemes AS l"
                            " WHERE l.fact_id = f.id)").fetchone()[0]
    assert missing == 0
    facts.execute("INSERT INTO pymem.facts (scope, scope_id, content, content_key) VALUES"
                  " ('user', 'u3', 'Plain insert about zebras', pymem.fact_key('x')),"
                  " ('user', 'u3', 'Second zebra fact', pymem.fact_key('y'))")
    assert facts.execute("SELECT count(*) FROM pymem.fact_lexemes WHERE scope_id = 'u3'").fetchone()[0] == 2
    # a fact stored before 0016 has no row: its lexemes are computed when it is ranked
    before = search(facts, subject="u3", text="zebras", k=5)
    facts.execute("DELETE FROM pymem.fact_lexemes WHERE scope_id = 'u3'")
    assert search(facts, subject="u3", text="zebras", k=5) == before and len(before) == 2
    assert facts.execute("SELECT lexemes::text, tokens FROM pymem.fact_lexemes WHERE scope_id = 'u1' LIMIT 0").fetchall() == []


# --- created_at --------------------------------------------------------------------------


def test_created_at_on_fact_writes(conn):
    then = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    fid = conn.execute("SELECT id FROM pymem.fact_add('user', 'ann', 'Lives in Paris', write => pymem.fact_write(created_at => %s))",
                       (then,)).fetchone()[0]
    assert conn.execute("SELECT created_at FROM pymem.facts WHERE id = %s", (fid,)).fetchone()[0] == then
    later = then + timedelta(days=30)
    new = conn.execute("SELECT id FROM pymem.fact_supersede('user', 'ann', 'Lives in Berlin', id => %s,"
                       " write => pymem.fact_write(created_at => %s))", (fid, later)).fetchone()[0]
    assert conn.execute("SELECT created_at FROM pymem.facts WHERE id = %s", (new,)).fetchone()[0] == later
    assert conn.execute("SELECT superseded_at FROM pymem.facts WHERE id = %s", (fid,)).fetchone()[0] == later
    soon = datetime.now(UTC) + timedelta(minutes=2)  # clock skew is tolerated ...
    conn.execute("SELECT pymem.fact_add('user', 'ann', 'Skewed', write => pymem.fact_write(created_at => %s))", (soon,))
    for bad in ("infinity", "-infinity", datetime.now(UTC) + timedelta(hours=1)):  # ... the future is not
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="in the future"):
            conn.execute("SELECT pymem.fact_add('user', 'ann', 'Future', write => pymem.fact_write(created_at => %s::timestamptz))", (bad,))
        conn.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="earlier than fact"):
        conn.execute("SELECT pymem.fact_supersede('user', 'ann', 'Lives in Rome', id => %s, write => pymem.fact_write(created_at => %s))",
                     (new, then))
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'ann'").fetchone()[0] == 3


def test_a_learned_fact_imported_older_than_the_cap_is_trimmed_at_once(conn):
    for i in range(3):
        conn.execute("SELECT pymem.fact_add('user', 'cap', %s, write => pymem.fact_write(source => 'learned'), max_learned => 3)", (f"new {i}",))
    fid, created = conn.execute("SELECT id, created FROM pymem.fact_add('user', 'cap', 'old', write => pymem.fact_write(source => 'learned', created_at => '2020-01-01 00:00+00'),"
                                " max_learned => 3)").fetchone()
    assert created and conn.execute("SELECT count(*) FROM pymem.facts WHERE id = %s", (fid,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'cap'").fetchone()[0] == 3


# --- Python ------------------------------------------------------------------------------


def test_retrieve_ranks_by_words_and_meaning(db):
    mem = Memory(db=db, embedder=HashEmbedder())
    then = datetime(2024, 1, 2, tzinfo=UTC)
    ids = {c: mem.persist(c, user="bo", created_at=then, metadata={"speaker": s}) for c, s in [
        ("Bo: my sister plays the piano", "Bo"), ("Cy: I adopted a dog last week", "Cy"),
        ("Bo: we went hiking near Berlin", "Bo"), ("Cy: the piano recital was great", "Cy")]}
    got = mem.retrieve("who plays piano?", user="bo", k=2)
    assert [f.id for f in got][0] in (ids["Bo: my sister plays the piano"], ids["Cy: the piano recital was great"])
    assert all(f.score is not None and f.similarity is not None for f in got) and len(got) == 2
    assert all(f.created_at == then for f in got)
    only_cy = mem.retrieve("piano", user="bo", k=5, metadata={"speaker": "Cy"})
    assert {f.content for f in only_cy} == {"Cy: I adopted a dog last week", "Cy: the piano recital was great"}
    assert only_cy[0].content == "Cy: the piano recital was great"
    # no embedder: ranked by the words alone, only facts that share one
    words = Memory(db=db).retrieve("piano recital", user="bo", k=5)
    assert [f.content for f in words] == ["Cy: the piano recital was great", "Bo: my sister plays the piano"]
    assert words[0].score == 1.0 and words[0].similarity is None
    # a vector query: meaning alone
    (v,) = HashEmbedder().embed(["who plays piano?"])
    assert len(mem.retrieve(v, user="bo", k=3)) == 3
    with pytest.raises(pymem.ValidationError, match="timezone-aware"):
        mem.persist("naive", user="bo", created_at=datetime(2024, 1, 1))
    with pytest.raises(pymem.ValidationError, match="pass a query"):
        mem.retrieve(user="bo", metadata={"speaker": "Bo"})
    with pytest.raises(pymem.ValidationError, match="fact_lexical_weight"):
        Memory(db=db, fact_lexical_weight=2)
    new = mem.update("Bo: my sister plays the violin", old="Bo: my sister plays the piano", user="bo",
                     created_at=then + timedelta(days=1))
    assert mem.history(user="bo", fact_id=new)[-1].created_at == then + timedelta(days=1)


def test_async_retrieve_takes_the_same_arguments(dsn):
    async def go():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:
            mem = pymem.AsyncMemory(db=adb, embedder=HashEmbedder())
            await mem.persist("Ann: I live in Lisbon", user="ann", metadata={"speaker": "Ann"},
                              created_at=datetime(2023, 1, 1, tzinfo=UTC))
            await mem.update("Ann: I live in Porto", old="Ann: I live in Lisbon", user="ann", metadata={"speaker": "Ann"},
                             created_at=datetime(2023, 2, 1, tzinfo=UTC))
            await mem.persist("Bo: I live in Porto too", user="ann", metadata={"speaker": "Bo"})
            return await mem.retrieve("where does Ann live", user="ann", k=3, metadata={"speaker": "Ann"})
    got = asyncio.run(go())
    assert [f.content for f in got] == ["Ann: I live in Porto"]


# --- the facts of a context read ----------------------------------------------------------


def test_a_context_read_gets_the_facts_that_rank_best_when_a_subject_has_too_many(db, conn):
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    mem = Memory(db=db, embedder=HashEmbedder(), agent_id="bot", max_facts=3)
    mem.persist("Allergic to peanuts", user="al", created_at=t0)
    for i, content in enumerate(["Drives a red car", "Works at Acme", "Plays the piano", "Lives in Oslo"], 1):
        mem.persist(content, user="al", created_at=t0 + timedelta(days=i))
    mem.persist("Refunds take 30 days", tier="global", created_at=t0)
    for i in range(1, 4):
        mem.persist(f"Office note {i}", tier="global", created_at=t0 + timedelta(days=i))
    ctx = mem.read("Which food am I allergic to? peanuts", user="al")
    assert "Allergic to peanuts" in ctx.user_facts and len(ctx.user_facts) == 3  # not among the 3 newest
    newest_first = [f.content for f in mem.retrieve(user="al", limit=10)]
    assert ctx.user_facts == [c for c in newest_first if c in ctx.user_facts]  # still newest first
    assert Memory(db=db, agent_id="bot", max_facts=3).read("how long do refunds take?", user="al").agent_facts[-1] \
        == "Refunds take 30 days"  # no embedder: the words alone choose
    # no more facts than max_facts: all of them, newest first, as before
    assert Memory(db=db, embedder=HashEmbedder(), max_facts=5).read("peanuts?", user="al").user_facts == newest_first
    # SQL: without a query the newest, with one the best ranked
    read = ("SELECT pymem.context_read(user_id => 'al', max_facts => 2, query_text => %s, recall => pymem.recall(k => 0))"
            " -> 'user_facts'")
    assert [f["content"] for f in conn.execute(read, (None,)).fetchone()[0]] == newest_first[:2]
    assert "Allergic to peanuts" in [f["content"] for f in conn.execute(read, ("peanuts",)).fetchone()[0]]


@pytest.mark.parametrize("max_facts", [1, 7, 40, 61, 100])
def test_a_context_reads_the_brute_force_best_facts_newest_first(facts, max_facts):
    """context_read's user facts for a subject with more than max_facts: the max_facts best by the
    brute-force score (every active fact ranked, a missing score counting 0; ties: higher id
    first), shown newest first; with max_facts or fewer, or no query, the newest."""
    rows = facts.execute("SELECT id, created_at FROM pymem.facts WHERE scope = 'user' AND scope_id = 'u1'"
                         " AND superseded_by IS NULL").fetchall()
    created = dict(rows)
    newest = [i for i, _ in sorted(rows, key=lambda r: (r[1], r[0]), reverse=True)]
    read = ("SELECT pymem.context_read(user_id => 'u1', query_vector => %s::text::vector, embedder => 'e3',"
            " query_text => %s, recall => pymem.recall(lexical_weight => %s, k => 0), max_facts => %s) -> 'user_facts'")
    cases = [(q, t, w) for q, t in QUERIES for w in (0.0, 0.5, 1.0)] + [(None, t, 0.5) for _, t in QUERIES[:4]]
    for query, text, weight in cases:
        got = [f["id"] for f in facts.execute(read, (None if query is None else vec(query), text, weight,
                                                     max_facts)).fetchone()[0]]
        if len(rows) <= max_facts:
            assert got == newest[:max_facts]
            continue
        scores = brute(facts, query=query, text=text, weight=weight)
        if query is not None:  # a fact with no vector: its cosine counts 0
            lexical = brute(facts, text=text) if text is not None else {}
            scores = {i: scores[i] if i in scores else weight * lexical.get(i, 0.0) for i in created}
        ranked = sorted(created, key=lambda i: (-round(scores.get(i, 0.0), 9), -i))[:max_facts]
        assert got == sorted(ranked, key=lambda i: (created[i], i), reverse=True), (query, text, weight)
    got = [f["id"] for f in facts.execute(read, (None, None, 0.5, max_facts)).fetchone()[0]]
    assert got == newest[:max_facts]  # no query: the newest


# --- plans ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big(pg_server, template_db):
    from conftest import _janitor, dsn_for

    janitor = _janitor(pg_server, "pymem_big_fact_search", template_dbname=template_db)
    janitor.drop()
    janitor.init()
    dsn = dsn_for(pg_server, "pymem_big_fact_search")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            """INSERT INTO pymem.facts (project_id, scope, scope_id, content, content_key)
               SELECT 'p' || (g % 3), 'user', 'u' || (g % 2000), 'fact ' || g || ' about topic' || (g % 97),
                      pymem.fact_key('fact ' || g)
               FROM generate_series(1, 100000) AS g""")
        c.execute("ANALYZE")
        assert c.execute("SELECT count(*) FROM pymem.fact_lexemes").fetchone()[0] == 100000
    yield dsn
    janitor.drop()


def test_a_users_lexical_matches_are_read_through_an_index(big):
    from conftest import plan_nodes as nodes
    from test_facts_plans import plans_of

    calls = ["SELECT * FROM pymem.facts_search('user', 'u7', project_id => 'p1', query_text => 'topic7 about', k => 5)"]
    plans = plans_of(big, calls)
    scans = [[n for n in nodes(p["Plan"]) if n.get("Relation Name") in ("facts", "fact_lexemes")] for p in plans]
    scans = [s for s in scans if s]
    assert scans
    for s in scans:
        assert all(n["Node Type"] != "Seq Scan" for n in s), [n["Node Type"] for n in s]
    # an index scan, or a bitmap heap scan over a bitmap index scan (which names no relation)
    used = {n.get("Index Name") for p in plans for n in nodes(p["Plan"]) if "Index" in n["Node Type"]}
    assert used & {"facts_subject_active_newest", "facts_pkey", "fact_lexemes_pkey"}, used
    for s in scans:
        # nothing read beyond the user's own facts (50 of 100,000)
        assert all(n.get("Actual Rows", 0) <= 60 for n in s)
