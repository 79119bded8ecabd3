"""Heavy users' words (issue 32, item 2): pymem.recall_terms holds, for users with a recall index
only, one row per (message, lexeme), and a heavy user's hybrid recall adds the messages holding a
rare query term (read through the postings' primary key) to the index's nearest candidates. So a
message that shares a rare word with the query but lies far from it in vector space is recalled,
as the exact scan recalls it, with the same score. The heavy user here has 300 messages, more than the 200 nearest
candidates, and one of them is that message (its vector is that of an unrelated text)."""

from __future__ import annotations

import random

import psycopg
import pytest
from pgvector import Vector
from pgvector.psycopg import register_vector

import pymem
from conftest import PlanLog, plan_nodes
from pymem import HashEmbedder
from pymem.recall import recall_indexes

EMB = HashEmbedder()
WORDS = ("garden tomato berlin paris coffee bicycle piano invoice holiday dentist meeting recipe "
         "football weather train sister birthday laptop python mortgage").split()
RARE = "I finally booked the zanzibar ferry"  # 'zanzibar': one message of the user's
FAR = "qqq vvv www"  # the vector the rare message is given: nothing in common with the queries
QUERY = "zanzibar garden"
RECALL = ("SELECT r.thread_id, r.seq, r.score, r.content FROM pymem.messages_recall(user_id => %(u)s, project_id => %(p)s, "
          "query_vector => %(v)s, embedder => %(e)s, query_text => %(t)s, recall => pymem.recall(k => %(k)s, window_size => 0, "
          "min_content_chars => 0, next_turn_weight => 0, lexical_weight => 0.4)) AS r")  # these tests' weight, both sides
EXACT = ("SELECT r.thread_id, r.seq, r.score FROM pymem._recall_ranked(%(p)s, %(u)s, 'default', %(v)s, %(e)s, %(t)s, "
         "pymem.recall(k => %(k)s, min_content_chars => 0, window_size => 0, lexical_weight => 0.4, next_turn_weight => 0, "
         "time_weight => 0)) AS r")
TERMS = "SELECT count(*) FROM pymem.recall_terms WHERE project_id = %s AND user_id = %s"


def _add(c: psycopg.Connection, user: str, n: int, project: str = "", seed: int = 1, rare: bool = True) -> None:
    rng = random.Random(seed)
    texts = [f"note {i}: garden {' '.join(rng.sample(WORDS[1:], 2))}" for i in range(n)]  # all near the queries
    vectors = EMB.embed(texts)
    if rare:
        texts[n // 2] = RARE
        vectors[n // 2] = EMB.embed([FAR])[0]
    c.execute("SELECT count(*) FROM pymem.messages_add_many(user_id => %s, thread_id => 'default', roles => %s, contents => %s, "
              "project_id => %s, embeddings => %s, embedder => %s)",
              (user, ["user"] * n, texts, project, [Vector(v) for v in vectors], EMB.name))


@pytest.fixture
def db(dsn):
    with pymem.connect(dsn) as c:
        for table in ("messages", "message_embeddings", "message_lexemes", "recall_terms"):
            c.execute(f"ALTER TABLE pymem.{table} SET (autovacuum_enabled = false)")
        register_vector(c)
        _add(c, "heavy", 300)
        _add(c, "light", 40, seed=2)
        _add(c, "heavy", 300, project="other", seed=3, rare=False)  # the same user id in another project
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as d:
        yield d


def _params(q: str = QUERY, *, user: str = "heavy", project: str = "", k: int = 5) -> dict:
    return {"u": user, "p": project, "v": Vector(EMB.embed([q])[0]), "e": EMB.name, "t": q, "k": k}


def _scans(log: PlanLog, index: str) -> list[dict]:
    return [n for p in log.plans for n in plan_nodes(p["Plan"]) if n.get("Index Name", "").startswith(index)]


def _terms(dsn: str, user: str, project: str = "") -> int:
    with psycopg.connect(dsn) as c:
        return c.execute(TERMS, (project, user)).fetchone()[0]


def _distinct_lexemes(dsn: str, user: str, project: str = "") -> int:
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT coalesce(sum(cardinality(tsvector_to_array(lexemes))), 0) FROM pymem.message_lexemes "
                         "WHERE project_id = %s AND user_id = %s", (project, user)).fetchone()[0]


def test_the_plan_fills_the_heavy_users_postings_only_and_drops_them_with_the_index(db, dsn):
    assert _terms(dsn, "heavy") == 0  # nobody is heavy yet: no write added a posting
    plan = recall_indexes(db, "", 200)
    assert [(s["user_id"], s["action"]) for s in plan] == [("heavy", "create"), ("heavy", "create"), ("heavy", "fill")]
    assert plan[2]["statement"] == "SELECT pymem.recall_terms_fill(user_id => 'heavy', project_id => '')"
    assert _terms(dsn, "heavy") == _distinct_lexemes(dsn, "heavy") > 300
    assert _terms(dsn, "light") == 0 and _terms(dsn, "heavy", "other") == 0  # another project: not planned
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT terms_filled FROM pymem.recall_indexes").fetchall() == [(True,)]
    assert recall_indexes(db, "", 200) == []  # up to date: nothing filled again
    assert [s["action"] for s in recall_indexes(db, "", 301)] == ["drop", "drop"]  # below the threshold now (and its time index)
    assert _terms(dsn, "heavy") == 0


def test_a_lexical_only_match_is_recalled_through_the_postings_as_the_exact_scan_recalls_it(db, dsn):
    recall_indexes(db, "", 200)
    with pymem.connect(dsn) as c:
        register_vector(c)
        p = _params()
        exact = c.execute(EXACT, p).fetchall()
        log = PlanLog(c)
        got = c.execute(RECALL, p).fetchall()
        assert _scans(log, "message_embeddings_recall_"), "the recall did not read the user's index"
        assert not any("_recall_ranked" in x.get("Query Text", "") for x in log.plans), "the exact scan ran"
        postings = _scans(log, "recall_terms_pkey")
        assert postings and all(n["Node Type"] in ("Index Scan", "Index Only Scan") for n in postings)
        lexical = [x for x in log.plans if "pymem.recall_terms AS t" in x.get("Query Text", "")]
        vectors = [n for x in lexical for n in plan_nodes(x["Plan"]) if n.get("Relation Name") == "message_embeddings"]
        assert vectors and all(n["Node Type"] == "Index Scan" and "seq" in n.get("Index Cond", "")
                               for n in vectors), "the vectors were not read by the message's key"
        # first in both rankings, with the same score (its BM25 is the best of either set's, so
        # its normalised lexical score is 1 in both); the rows after it are the 300 near ones,
        # which the IVFFlat index (17 lists, 10 probed) finds approximately: not compared here
        # (test_recall_indexes.py compares whole rankings where the index is exact)
        assert got[0][3] == RARE, "the rare word's message was not recalled first"
        assert got[0][:2] == exact[0][:2] and round(got[0][2], 9) == round(exact[0][2], 9)
        assert len(got) == len(exact) == 5
        # without the postings (what recall did before them) the message is recalled only when the
        # index's candidates hold it: with an iterative scan they are the rows of the lists nearest
        # the query, and k-means, which samples at random, may have put the far vector in one of
        # them (in 5 to 10 of 40 builds here)
        c.execute("DELETE FROM pymem.recall_terms")
        without = any(r[3] == RARE for r in c.execute(RECALL, p).fetchall())
        assert without == (_seq(c, RARE) in _candidates(c, p)), "recalled outside the index's candidates"


def _seq(c: psycopg.Connection, content: str) -> int:
    return c.execute("SELECT seq FROM pymem.messages WHERE project_id = '' AND user_id = 'heavy' AND content = %s",
                     (content,)).fetchone()[0]


def _candidates(c: psycopg.Connection, p: dict) -> set[int]:
    """The seqs of the heavy user's candidates as _recall reads them: the 200 first rows of its
    index's scan, 10 of its 17 lists probed, the scan iterating further as it needs."""
    index, dims, lists = c.execute("SELECT index_name, dims, lists FROM pymem.recall_indexes WHERE user_id = 'heavy' "
                                   "AND project_id = ''").fetchone()
    assert lists == 17
    # the user, project and embedder as literals, as _recall writes them: the partial index's
    # predicate matches literals only (with the embedder as a parameter, the rows read differed)
    query = (f"SELECT e.seq FROM pymem.message_embeddings AS e WHERE e.project_id = '' AND e.user_id = 'heavy' "
             f"AND e.embedder = '{EMB.name}' "
             f"ORDER BY pymem._cosine_distance(e.embedding::vector({dims}), %(v)s::vector({dims})) LIMIT 200")
    with c.transaction():
        c.execute("SET LOCAL ivfflat.probes = 10")
        c.execute("SET LOCAL ivfflat.iterative_scan = relaxed_order")
        plan = c.execute("EXPLAIN (FORMAT JSON) " + query, p).fetchone()[0][0]["Plan"]
        assert any(n.get("Index Name") == index for n in plan_nodes(plan)), "the candidates were not read by the index"
        seqs = {r[0] for r in c.execute(query, p).fetchall()}
    assert len(seqs) == 200
    return seqs


def test_another_tenants_or_users_postings_never_enter_a_ranking(db, dsn):
    with pymem.connect(dsn) as c:  # 'quokka' only in project 'other', for the same user id
        c.execute("SELECT pymem.message_add(user_id => 'heavy', content => 'another quokka ferry', "
                  "project_id => 'other')")
        c.commit()
    recall_indexes(db, "", 200)
    recall_indexes(db, "other", 200)
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.recall_terms WHERE lexeme = 'quokka'").fetchone()[0] == 1
    with pymem.connect(dsn) as c:
        register_vector(c)
        for user in ("heavy", "light"):
            got = c.execute(RECALL, _params("quokka garden", user=user)).fetchall()
            assert len(got) == 5 and not any("quokka" in r[3] for r in got)


def test_writes_follow_the_registry_and_deletes_take_the_postings(db, dsn):
    recall_indexes(db, "", 200)
    mem = pymem.Memory(db=db, agent_id="a", embedder=EMB)
    before = _terms(dsn, "heavy")
    mem.add_messages(["The quokka ate my sandwich on the ferry"], user="light")
    mem.add_messages(["The quokka ate my sandwich on the ferry"], user="heavy")
    assert _terms(dsn, "light") == 0  # an ordinary user's write adds no posting
    assert _terms(dsn, "heavy") == before + 4  # quokka, ate, sandwich, ferri
    with psycopg.connect(dsn) as c:
        got = c.execute("SELECT lexeme FROM pymem.recall_terms WHERE user_id = 'heavy' AND lexeme IN ('quokka', 'sandwich')"
                        ).fetchall()
        assert sorted(got) == [("quokka",), ("sandwich",)]
    mem.forget_conversation(user="heavy")  # the messages go, and their postings with them
    assert _terms(dsn, "heavy") == 0


def test_text_search_configure_rebuilds_the_postings(db, dsn):
    recall_indexes(db, "", 200)
    with psycopg.connect(dsn) as c:
        c.execute("SELECT pymem.text_search_configure('simple')")
        c.commit()
        stale = c.execute("SELECT count(*) FROM pymem.recall_terms AS t WHERE t.user_id = 'heavy' AND t.project_id = '' "
                          "AND NOT EXISTS (SELECT 1 FROM pymem.message_lexemes AS l WHERE l.project_id = t.project_id "
                          "AND l.user_id = t.user_id AND l.thread_id = t.thread_id AND l.seq = t.seq "
                          "AND t.lexeme = ANY (tsvector_to_array(l.lexemes)))").fetchone()[0]
        assert stale == 0
        assert c.execute("SELECT count(*) FROM pymem.recall_terms WHERE lexeme = 'the'").fetchone()[0] > 0  # 'simple' keeps it
    assert _terms(dsn, "heavy") == _distinct_lexemes(dsn, "heavy")


def test_the_app_role_cannot_read_the_postings(db, dsn, as_role):
    recall_indexes(db, "", 200)
    app = as_role("recall_terms_app")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO recall_terms_app")
    with psycopg.connect(app, autocommit=True) as c:
        for stmt in ("SELECT * FROM pymem.recall_terms",
                     "INSERT INTO pymem.recall_terms VALUES ('', 'heavy', 'x', 'default', 1)",
                     "SELECT * FROM pymem._recall_terms_fill('', 'heavy')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(stmt)
    with psycopg.connect(dsn, autocommit=True) as c:  # forced RLS: the owner sees the tenant's rows only
        c.execute("SET ROLE pymem_owner")
        for project, rows in (("other", 0), ("", _distinct_lexemes(dsn, "heavy"))):
            with c.transaction():
                c.execute("SELECT pymem.set_tenant(%s)", (project,))
                assert c.execute("SELECT count(*) FROM pymem.recall_terms").fetchone()[0] == rows


def test_users_registered_before_the_postings_get_them_from_the_next_plan(db, dsn):
    recall_indexes(db, "", 200)
    with psycopg.connect(dsn) as c:  # as after migration 0045 under a role that RLS binds
        c.execute("DELETE FROM pymem.recall_terms")
        c.execute("UPDATE pymem.recall_indexes SET terms_filled = false")
        c.commit()
    assert [s["action"] for s in recall_indexes(db, "", 200, dry_run=True)] == ["fill"]
    assert _terms(dsn, "heavy") == 0  # a dry run fills nothing
    assert [s["action"] for s in recall_indexes(db, "", 200)] == ["fill"]
    assert _terms(dsn, "heavy") == _distinct_lexemes(dsn, "heavy")
    assert recall_indexes(db, "", 200) == []


def test_messages_indexed_by_the_backfill_get_their_words_from_the_next_plan(db, dsn):
    recall_indexes(db, "", 200)
    full = _terms(dsn, "heavy")
    with psycopg.connect(dsn) as c:  # as messages stored before 0015 by a role that RLS binds
        c.execute("DELETE FROM pymem.message_lexemes WHERE user_id = 'heavy' AND project_id = '' AND seq <= 50")
        c.commit()
        assert _terms(dsn, "heavy") < full  # their words went with their lexemes
        assert c.execute("SELECT pymem.message_lexemes_backfill(max_messages => 100)").fetchone()[0] == 50
        c.commit()
    assert [s["action"] for s in recall_indexes(db, "", 200)] == ["fill"]
    assert _terms(dsn, "heavy") == full


def test_a_word_held_by_up_to_400_messages_joins_the_candidates_rarest_words_first(dsn):
    """A query word held by 120 of the user's messages (more than the first cap of 100, bench/
    reports/2026-12-04-heavy-lexical "The cap") brings its messages into the candidates though
    their vectors lie far from the query, so the index path's top 5 is the exact scan's. The words
    are taken rarest first while their messages come to at most 400: 'garden' (held by the 350 near
    messages) would pass that, so only 'quasar''s postings are read."""
    emb = HashEmbedder()
    near = [f"note {i}: garden {' '.join(random.Random(i).sample(WORDS[1:], 2))}" for i in range(350)]
    far = [f"quasar sighting number {i}" for i in range(120)]
    with pymem.connect(dsn) as c:
        register_vector(c)
        vectors = emb.embed(near) + emb.embed([f"{i} zz yy xx ww vv" for i in range(120)])  # far from every query
        c.execute("SELECT count(*) FROM pymem.messages_add_many(user_id => 'mid', thread_id => 'default', roles => %s, "
                  "contents => %s, embeddings => %s, embedder => %s)",
                  (["user"] * 470, near + far, [Vector(v) for v in vectors], emb.name))
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as d:
        assert [s["action"] for s in recall_indexes(d, "", 400)] == ["create", "create", "fill"]
    p = _params("quasar garden", user="mid")
    with pymem.connect(dsn) as c:
        register_vector(c)
        exact = c.execute(EXACT, p).fetchall()
        assert all(r[0] == "default" for r in exact)
        want = [r[1] for r in exact]
        contents = dict(c.execute("SELECT seq, content FROM pymem.messages WHERE user_id = 'mid'").fetchall())
        assert all(contents[s].startswith("quasar") for s in want), "the exact top 5 is not the quasar messages"
        log = PlanLog(c)
        got = c.execute(RECALL, p).fetchall()
        assert not any("_recall_ranked" in x.get("Query Text", "") for x in log.plans), "the exact scan ran"
        assert [r[1] for r in got] == want
        # _recall_lexical read one term's range ('quasar'), not 'garden''s: one loop of its scan of
        # the postings (the counts of both words are read before, by _recall_term_counts)
        lexical = [x for x in log.plans if "cardinality(a.threads)" in x.get("Query Text", "")]
        loops = [n["Actual Loops"] for x in lexical for n in plan_nodes(x["Plan"])
                 if n.get("Index Name") == "recall_terms_pkey"]
        assert loops == [1], loops
