"""Writes the probe variants of this report as one SQL file (scratch functions in schema pymem of a
bench database; drop them after): each is derived from the shipped pymem._recall_ranked in
sql/api/recall_ranking.sql (conversations_recall.sql when this was measured), so that only the part under test differs.

    python variants.py > /tmp/variants.sql && psql "$PGURL" -f /tmp/variants.sql
    python variants.py dispatch > /tmp/dispatch.sql && psql "$PGURL" -f /tmp/dispatch.sql  # for context.py
    python variants.py counts > /tmp/counts.sql && psql "$PGURL" -f /tmp/counts.sql       # for writes.py

- _rr_read:  the preamble (terms, window) and the read of the user's rows via _recall_rows, no column used;
- _rr_keep:  the same rows kept whole in a MATERIALIZED CTE (every column computed), then counted;
- _rr_lists: the shipped statement, each row's matching term numbers computed in `base` (no `matches` CTE);
- _rr_slots: the shipped statement, eight static term slots (count FILTER / CASE) instead of the joins;
- _rr_local: a row-local score in one pass (like the vector-only statement) from statistics read out of
             two tables (_rr_stats_users, _rr_stats_terms, built below from message_embeddings: what
             statistics kept on write would hold), BM25 normalised by the sum of the query terms' idfs;
             each hit's weight from eight static term slots (a query of up to eight terms);
- _rr_local_sum: the same, each hit's weight by a sub-select over the terms (any number of them);
- _rr_heap:  the shipped ranking exactly (BM25 / the best match), statistics from those tables:
             one pass and one bounded sort (the rows sharing a term, then the k best others).

`dispatch`: renames the shipped function _rr_ship and puts in its place one that calls _rr_local or
_rr_local_sum instead when the setting pymem.variant says so (context.py), so that context_read
runs unchanged around either. `counts`: per-user statistics kept on write, as a prototype: two
tables filled from message_lexemes and a statement trigger on its inserts (writes.py).
"""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "sql" / "api" / "recall_ranking.sql"


def shipped() -> str:
    src = SRC.read_text()
    start = src.index("CREATE OR REPLACE FUNCTION pymem._recall_ranked(")
    end = src.index("$$;\n", src.index("RETURN QUERY\n        WITH base", start)) + 4
    return src[start:end]


BASE = """        WITH base AS MATERIALIZED (
            SELECT r.thread_id, r.seq, r.created_at, r.similarity, r.tokens, {lex},
                   r.chars >= v_min_chars
                   AND (v_since IS NULL OR r.created_at >= v_since)
                   AND (v_until IS NULL OR r.created_at < v_until)
                   AND NOT (r.thread_id = p_thread_id AND r.seq > v_window_after)
                   AND r.metadata_ok AS ok,
                   v_wv * coalesce(r.similarity, 0)
                   + CASE WHEN v_rw = 0 THEN 0 ELSE v_rw * pymem._recency(
                         pg_catalog.date_part('epoch', coalesce(v_as_of, pg_catalog.now()) - r.created_at), v_half_life) END
                   + v_iw * r.importance AS base
              FROM pymem._recall_rows(p_project_id, p_user_id, p_embedder, p_query, v_any, v_as_of, v_filter) AS r),
"""
DECLS = "    v_from timestamptz := p_spec.time_from;\n"
MORE = DECLS + "    v_docs float8; v_avgdl float8; v_idf float8[]; v_norm float8; v_n float8;\n"
SLOTS = range(1, 9)


def renamed(name: str) -> str:
    return shipped().replace("pymem._recall_ranked(", f"pymem.{name}(").replace(DECLS, MORE)


def replace_statement(f: str, statement: str) -> str:
    a = f.index("    RETURN QUERY\n        WITH base")
    return f[:a] + statement + f[f.index("END;\n$$;", a):]


def replace_bookkeeping(f: str, middle: str, other_cond: str) -> str:
    a, b = f.index("        WITH base AS MATERIALIZED"), f.index("        other AS NOT MATERIALIZED")
    return (f[:a] + middle + f[b:]).replace("AND b.lexemes IS NULL)", other_cond)


def read_only() -> str:
    return replace_statement(renamed("_rr_read"), """    SELECT pg_catalog.count(*)::float8 INTO v_n FROM (SELECT r.*
      FROM pymem._recall_rows(p_project_id, p_user_id, p_embedder, p_query, v_any, v_as_of, v_filter) AS r OFFSET 0) AS x;
    RETURN;
""")


def keep() -> str:
    return replace_statement(renamed("_rr_keep"), """    WITH b AS MATERIALIZED (SELECT r.*
      FROM pymem._recall_rows(p_project_id, p_user_id, p_embedder, p_query, v_any, v_as_of, v_filter) AS r)
    SELECT pg_catalog.count(*)::float8 INTO v_n FROM b;
    RETURN;
""")


def lists() -> str:
    middle = BASE.format(lex="""CASE WHEN r.lexemes IS NOT NULL THEN ARRAY(SELECT t.i FROM pg_catalog.generate_subscripts(v_terms, 1) AS t(i)
                                                     WHERE r.lexemes @@ v_terms[t.i]) END AS tm""") + """        st AS MATERIALIZED (
            SELECT GREATEST(coalesce(n.tokens / NULLIF(n.known, 0), 1), 1) AS avgdl,
                   ARRAY(SELECT pymem._bm25_idf(n.docs, coalesce(d.df, 0))
                           FROM pg_catalog.generate_subscripts(v_terms, 1) AS t(i)
                           LEFT JOIN (SELECT x.i, pg_catalog.count(*)::float8 AS df
                                        FROM base AS b CROSS JOIN pg_catalog.unnest(b.tm) AS x(i)
                                       WHERE b.tm IS NOT NULL GROUP BY x.i) AS d ON d.i = t.i
                          ORDER BY t.i) AS idf
              FROM (SELECT pg_catalog.count(*)::float8 AS docs, coalesce(pg_catalog.sum(b.tokens), 0)::float8 AS tokens,
                           pg_catalog.count(b.tokens)::float8 AS known FROM base AS b) AS n),
        lex AS MATERIALIZED (
            SELECT h.thread_id, h.seq, h.created_at, h.similarity, h.base,
                   pymem._bm25((SELECT pg_catalog.sum(s.idf[x.i]) FROM pg_catalog.unnest(h.tm) AS x(i)), 1, h.tokens, s.avgdl, 0.3) AS bm25
              FROM base AS h CROSS JOIN st AS s
             WHERE h.tm IS NOT NULL AND h.ok),
"""
    return replace_bookkeeping(renamed("_rr_lists"), middle, "AND b.tm IS NULL)")


def slots() -> str:
    hit = "(h.lexemes @@ v_terms[{}])".format
    middle = BASE.format(lex="r.lexemes") + """        st AS MATERIALIZED (
            SELECT GREATEST(coalesce(n.tokens / NULLIF(n.known, 0), 1), 1) AS avgdl,
""" + ",\n".join(f"                   pymem._bm25_idf(n.docs, n.d{i}) AS i{i}" for i in SLOTS) + """
              FROM (SELECT pg_catalog.count(*)::float8 AS docs, coalesce(pg_catalog.sum(h.tokens), 0)::float8 AS tokens,
                           pg_catalog.count(h.tokens)::float8 AS known,
""" + ",\n".join(f"                           pg_catalog.count(*) FILTER (WHERE {hit(i)})::float8 AS d{i}" for i in SLOTS) + """
                      FROM base AS h) AS n),
        lex AS MATERIALIZED (
            SELECT h.thread_id, h.seq, h.created_at, h.similarity, h.base,
                   pymem._bm25(""" + " + ".join(f"CASE WHEN {hit(i)} THEN s.i{i} ELSE 0 END" for i in SLOTS) + """, 1, h.tokens, s.avgdl, 0.3) AS bm25
              FROM base AS h CROSS JOIN st AS s
             WHERE h.lexemes IS NOT NULL AND h.ok),
"""
    return replace_bookkeeping(renamed("_rr_slots"), middle, "AND b.lexemes IS NULL)")


def stats(extra: str = "", into: str = "") -> str:
    """The statistics' read of the row-local variants: the user's document count and average length,
    each query term's idf (in v_docs, v_avgdl, v_idf), and optional extra columns into `into`."""
    return ("""    SELECT u.docs, GREATEST(coalesce(u.tokens / NULLIF(u.docs, 0), 1), 1),
           ARRAY(SELECT pymem._bm25_idf(u.docs, coalesce(c.n, 0))
                   FROM pg_catalog.unnest(v_terms) WITH ORDINALITY AS t(q, i)
                   LEFT JOIN pymem._rr_stats_terms AS c
                     ON c.project_id = p_project_id AND c.user_id = p_user_id AND c.embedder = p_embedder
                    AND c.lexeme = pg_catalog.btrim(pg_catalog.querytree(t.q)::text, '''''') COLLATE "C"
                  ORDER BY t.i)""" + extra + """
      FROM pymem._rr_stats_users AS u
     WHERE u.project_id = p_project_id AND u.user_id = p_user_id AND u.embedder = p_embedder
      INTO v_docs, v_avgdl, v_idf""" + (", " + into if into else "") + """;
""")


SLOT_WEIGHT = " + ".join(f"CASE WHEN (e.lexemes @@ v_terms[{i}]) THEN v_idf[{i}] ELSE 0 END" for i in SLOTS)
SUM_WEIGHT = "(SELECT pg_catalog.sum(v_idf[t.i]) FROM pg_catalog.generate_subscripts(v_terms, 1) AS t(i) WHERE e.lexemes @@ v_terms[t.i])"


def local(name: str = "_rr_local", weight: str = SLOT_WEIGHT, tables: bool = True) -> str:
    return ("""DROP TABLE IF EXISTS pymem._rr_stats_terms, pymem._rr_stats_users;
CREATE TABLE pymem._rr_stats_users AS
    SELECT project_id, user_id, embedder, count(*)::float8 AS docs, sum(tokens)::float8 AS tokens
      FROM pymem.message_embeddings GROUP BY 1, 2, 3;
ALTER TABLE pymem._rr_stats_users ADD PRIMARY KEY (project_id, user_id, embedder);
CREATE TABLE pymem._rr_stats_terms AS
    SELECT e.project_id, e.user_id, e.embedder, x.lexeme COLLATE "C" AS lexeme, count(*)::float8 AS n
      FROM pymem.message_embeddings AS e, unnest(e.lexemes) AS x WHERE e.lexemes IS NOT NULL GROUP BY 1, 2, 3, 4;
ALTER TABLE pymem._rr_stats_terms ADD PRIMARY KEY (project_id, user_id, embedder, lexeme);
ANALYZE pymem._rr_stats_users, pymem._rr_stats_terms;
GRANT SELECT ON pymem._rr_stats_users, pymem._rr_stats_terms TO PUBLIC;
""" if tables else "") + replace_statement(renamed(name), stats() + """    v_norm := (SELECT pg_catalog.sum(x) FROM pg_catalog.unnest(v_idf) AS x);
    RETURN QUERY
    SELECT s.thread_id, s.seq, s.similarity, s.score
      FROM (SELECT c.thread_id, c.seq, c.created_at, c.similarity, c.w IS NOT NULL AS hit,
                   v_wv * c.similarity + v_iw * c.importance
                   + CASE WHEN c.w IS NOT NULL THEN v_wl * LEAST(pymem._bm25(c.w, 1, c.tokens, v_avgdl, 0.3) / v_norm, 1) ELSE 0 END AS score
              FROM (SELECT e.thread_id, e.seq, e.created_at, e.importance, e.tokens,
                           1 - pymem._cosine_distance(e.embedding, p_query) AS similarity,
                           CASE WHEN e.lexemes @@ v_any THEN """ + weight + """ END AS w
                      FROM pymem.message_embeddings AS e
                     WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
                       AND (v_as_of IS NULL OR e.created_at <= v_as_of)
                       AND e.chars >= v_min_chars
                       AND NOT (e.thread_id = p_thread_id AND e.seq > v_window_after)
                    OFFSET 0) AS c) AS s
     WHERE s.hit OR pymem._vector_match(s.similarity)
     ORDER BY s.score DESC, s.created_at DESC, s.thread_id, s.seq DESC
     LIMIT v_k;
""")


def heap(name: str = "_rr_heap") -> str:
    """The shipped ranking exactly (BM25 / the best eligible match), statistics from the tables of
    local(): one pass, every eligible row sharing a term plus the k best others by base in one
    bounded sort (at most k + the sum of the terms' document frequencies rows), then the best
    match among those and the final order."""
    return replace_statement(renamed(name), stats(""",
           (SELECT pg_catalog.sum(c.n) FROM pymem._rr_stats_terms AS c
             WHERE c.project_id = p_project_id AND c.user_id = p_user_id AND c.embedder = p_embedder
               AND c.lexeme = ANY (ARRAY(SELECT pg_catalog.btrim(pg_catalog.querytree(q)::text, '''''') COLLATE "C" FROM pg_catalog.unnest(v_terms) AS q)))""", "v_n") + """    RETURN QUERY
    SELECT x.thread_id, x.seq, x.similarity, x.score FROM (
        SELECT c.thread_id, c.seq, c.created_at, c.similarity,
               c.base + CASE WHEN c.w IS NULL THEN 0 ELSE v_wl * coalesce(pymem._bm25(c.w, 1, c.tokens, v_avgdl, 0.3)
                          / NULLIF(pg_catalog.max(pymem._bm25(c.w, 1, c.tokens, v_avgdl, 0.3)) OVER (), 0), 0) END AS score
          FROM (SELECT e.thread_id, e.seq, e.created_at, e.tokens, e.similarity, e.w,
                       v_wv * e.similarity + v_iw * e.importance AS base
                  FROM (SELECT e.thread_id, e.seq, e.created_at, e.importance, e.tokens,
                               1 - pymem._cosine_distance(e.embedding, p_query) AS similarity,
                               CASE WHEN e.lexemes @@ v_any THEN """ + SUM_WEIGHT + """ END AS w
                          FROM pymem.message_embeddings AS e
                         WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
                           AND (v_as_of IS NULL OR e.created_at <= v_as_of)
                           AND e.chars >= v_min_chars
                           AND NOT (e.thread_id = p_thread_id AND e.seq > v_window_after)
                        OFFSET 0) AS e
                 WHERE e.w IS NOT NULL OR pymem._vector_match(e.similarity)
                 ORDER BY e.w IS NULL, v_wv * e.similarity + v_iw * e.importance DESC, e.created_at DESC, e.thread_id, e.seq DESC
                 LIMIT v_k + coalesce(v_n, 0)::integer) AS c) AS x
     ORDER BY x.score DESC, x.created_at DESC, x.thread_id, x.seq DESC
     LIMIT v_k;
""")


def dispatch() -> str:
    return shipped().replace("pymem._recall_ranked(", "pymem._rr_ship(") + """
CREATE OR REPLACE FUNCTION pymem._recall_ranked(
    p_project_id text, p_user_id text, p_thread_id text, p_query vector, p_embedder text, p_text text,
    p_spec pymem.recall_spec)
RETURNS TABLE (thread_id text, seq bigint, similarity double precision, score double precision)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF p_text IS NOT NULL AND current_setting('pymem.variant', true) = 'local' THEN
        RETURN QUERY SELECT * FROM pymem._rr_local(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, p_text, p_spec);
    ELSIF p_text IS NOT NULL AND current_setting('pymem.variant', true) = 'heap' THEN
        RETURN QUERY SELECT * FROM pymem._rr_heap(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, p_text, p_spec);
    ELSIF p_text IS NOT NULL AND current_setting('pymem.variant', true) = 'localsum' THEN
        RETURN QUERY SELECT * FROM pymem._rr_local_sum(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, p_text, p_spec);
    ELSE
        RETURN QUERY SELECT * FROM pymem._rr_ship(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, p_text, p_spec);
    END IF;
END;
$$;
"""


COUNTS = """DROP TABLE IF EXISTS pymem._ws_users, pymem._ws_terms;
CREATE TABLE pymem._ws_users (project_id text, user_id text, docs bigint, tokens bigint, PRIMARY KEY (project_id, user_id));
CREATE TABLE pymem._ws_terms (project_id text, user_id text, lexeme text COLLATE "C", n bigint,
                              PRIMARY KEY (project_id, user_id, lexeme));
INSERT INTO pymem._ws_users SELECT project_id, user_id, count(*), sum(tokens) FROM pymem.message_lexemes GROUP BY 1, 2;
INSERT INTO pymem._ws_terms SELECT l.project_id, l.user_id, x.lexeme, count(*)
  FROM pymem.message_lexemes AS l, unnest(tsvector_to_array(l.lexemes)) AS x(lexeme) GROUP BY 1, 2, 3;
GRANT ALL ON pymem._ws_users, pymem._ws_terms TO PUBLIC;
VACUUM ANALYZE pymem._ws_users, pymem._ws_terms;
CREATE OR REPLACE FUNCTION pymem._ws_add() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pymem, pg_temp AS $$
BEGIN  -- the user's row first, then the terms in key order: one lock order for every writer
  INSERT INTO pymem._ws_users AS u SELECT n.project_id, n.user_id, count(*), sum(n.tokens) FROM new_rows AS n
   GROUP BY 1, 2 ORDER BY 1, 2
  ON CONFLICT (project_id, user_id) DO UPDATE SET docs = u.docs + excluded.docs, tokens = u.tokens + excluded.tokens;
  INSERT INTO pymem._ws_terms AS t SELECT n.project_id, n.user_id, x.lexeme, count(*)
    FROM new_rows AS n, unnest(tsvector_to_array(n.lexemes)) AS x(lexeme) GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  ON CONFLICT (project_id, user_id, lexeme) DO UPDATE SET n = t.n + excluded.n;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS message_lexemes_stats ON pymem.message_lexemes;
CREATE TRIGGER message_lexemes_stats AFTER INSERT ON pymem.message_lexemes REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION pymem._ws_add();
"""


if __name__ == "__main__":
    import sys

    what = sys.argv[1] if len(sys.argv) > 1 else "variants"
    if what == "dispatch":
        print(dispatch())
    elif what == "counts":
        print(COUNTS)
    else:
        print("\n".join([read_only(), keep(), lists(), slots(), local(), local("_rr_local_sum", SUM_WEIGHT, False), heap()]))
