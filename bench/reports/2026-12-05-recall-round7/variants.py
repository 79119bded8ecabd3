"""Round 7's scratch variants of pymem._recall_ranked (issue 32), derived from the shipped function
by ../2026-12-04-recall-floor/variants.py's helpers; install them in a scratch database with psql.

    python variants.py > /tmp/r7.sql && psql "$DSN" -f /tmp/r7.sql
    python ../2026-12-04-recall-floor/parts.py <data dir> 200 7 _rr_win _rr_heap _rr_ha _rr_hb _rr_local_sum

- _rr_win: the shipped ranking exactly in one statement with window aggregates instead of CTEs:
  the user's rows, each hit's term mask (eight slots), BM25's statistics as window counts over
  all rows, each hit's BM25, the best eligible match as a window max, then the k best.
- _rr_ha: ../2026-12-04-recall-floor's _rr_heap with a constant in place of the best match's
  window max (what the window costs).
- _rr_hb: _rr_ha without its bounded sort of the k + sum(df) rows (what that sort costs).
- _rr_two: the shipped ranking from two reads: the rows sharing a term into arrays (one aggregate
  pass), the bookkeeping over those, and the vector statement's k best by the part every row has.
(_rr_heap and _rr_local_sum: `python ../2026-12-04-recall-floor/variants.py` writes them.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-12-04-recall-floor"))

import variants as v  # noqa: E402

SLOTS = range(1, 9)


def window() -> str:
    mask = " | ".join(f"CASE WHEN r.lexemes @@ v_terms[{i}] THEN {1 << (i - 1)} ELSE 0 END" for i in SLOTS)
    dfs = ",\n".join(f"pg_catalog.count(*) FILTER (WHERE y.mask & {1 << (i - 1)} <> 0) OVER () AS df{i}" for i in SLOTS)
    weight = " + ".join(f"CASE WHEN x.mask & {1 << (i - 1)} <> 0 THEN pymem._bm25_idf(x.n, x.df{i}) ELSE 0 END"
                        for i in SLOTS)
    return v.replace_statement(v.renamed("_rr_win"), f"""    IF pg_catalog.cardinality(v_terms) > 8 THEN RAISE EXCEPTION 'more than 8 terms'; END IF;
    RETURN QUERY
    SELECT z.thread_id, z.seq, z.similarity, z.score FROM (
      SELECT w.thread_id, w.seq, w.created_at, w.similarity, w.ok, w.mask,
             w.base + CASE WHEN w.bm25 IS NULL THEN 0 ELSE v_wl * coalesce(
                 w.bm25 / NULLIF(pg_catalog.max(w.bm25) FILTER (WHERE w.ok) OVER (), 0), 0) END AS score
        FROM (SELECT x.thread_id, x.seq, x.created_at, x.similarity, x.base, x.ok, x.mask,
                     CASE WHEN x.mask <> 0 THEN pymem._bm25({weight}, 1, x.tokens,
                          GREATEST(coalesce(x.tk / NULLIF(x.known, 0), 1), 1), 0.3) END AS bm25
                FROM (SELECT y.*, pg_catalog.count(*) OVER ()::float8 AS n,
                             coalesce(pg_catalog.sum(y.tokens) OVER (), 0)::float8 AS tk,
                             pg_catalog.count(y.tokens) OVER ()::float8 AS known,
                             {dfs}
                        FROM (SELECT r.thread_id, r.seq, r.created_at, r.similarity, r.tokens,
                                     CASE WHEN r.lexemes IS NULL THEN 0 ELSE {mask} END AS mask,
                                     r.chars >= v_min_chars
                                     AND (v_since IS NULL OR r.created_at >= v_since)
                                     AND (v_until IS NULL OR r.created_at < v_until)
                                     AND NOT (r.thread_id = p_thread_id AND r.seq > v_window_after)
                                     AND r.metadata_ok AS ok,
                                     v_wv * coalesce(r.similarity, 0)
                                     + CASE WHEN v_rw = 0 THEN 0 ELSE v_rw * pymem._recency(
                                           pg_catalog.date_part('epoch', coalesce(v_as_of, pg_catalog.now()) - r.created_at),
                                           v_half_life) END
                                     + v_iw * r.importance AS base
                                FROM (SELECT * FROM pymem._recall_rows(p_project_id, p_user_id, p_embedder, p_query, v_any,
                                                                       v_as_of, v_filter) OFFSET 0) AS r) AS y) AS x) AS w) AS z
     WHERE z.ok AND (z.mask <> 0 OR (p_query IS NOT NULL AND pymem._vector_match(z.similarity)))
       AND (v_min_score IS NULL OR z.score >= v_min_score)
     ORDER BY z.score DESC, z.created_at DESC, z.thread_id, z.seq DESC
     LIMIT v_k;
""")


def heap_split() -> str:
    a = v.heap("_rr_ha").replace(
        "NULLIF(pg_catalog.max(pymem._bm25(c.w, 1, c.tokens, v_avgdl, 0.3)) OVER (), 0)", "1.0")
    b = a.replace("_rr_ha", "_rr_hb").replace(
        "ORDER BY e.w IS NULL, v_wv * e.similarity + v_iw * e.importance DESC, e.created_at DESC, e.thread_id, e.seq DESC\n"
        "                 LIMIT v_k + coalesce(v_n, 0)::integer", "")
    assert a != v.heap("_rr_ha") and b != a.replace("_rr_ha", "_rr_hb")
    return a + "\n" + b


TWO_DECLS = """    v_from timestamptz := p_spec.time_from;
    v_tok float8; v_known float8;
    h_t text[]; h_s bigint[]; h_c timestamptz[]; h_sim float8[]; h_base float8[]; h_tk integer[]; h_lx tsvector[]; h_ok boolean[];
"""
TWO_STATEMENT = """    SELECT pg_catalog.count(*)::float8, coalesce(pg_catalog.sum(r.tokens), 0)::float8, pg_catalog.count(r.tokens)::float8,
           pg_catalog.array_agg(r.thread_id) FILTER (WHERE r.lexemes IS NOT NULL),
           pg_catalog.array_agg(r.seq) FILTER (WHERE r.lexemes IS NOT NULL),
           pg_catalog.array_agg(r.created_at) FILTER (WHERE r.lexemes IS NOT NULL),
           pg_catalog.array_agg(r.similarity) FILTER (WHERE r.lexemes IS NOT NULL),
           pg_catalog.array_agg(v_wv * coalesce(r.similarity, 0)
                   + CASE WHEN v_rw = 0 THEN 0 ELSE v_rw * pymem._recency(
                         pg_catalog.date_part('epoch', coalesce(v_as_of, pg_catalog.now()) - r.created_at), v_half_life) END
                   + v_iw * r.importance) FILTER (WHERE r.lexemes IS NOT NULL),
           pg_catalog.array_agg(r.tokens) FILTER (WHERE r.lexemes IS NOT NULL),
           pg_catalog.array_agg(r.lexemes) FILTER (WHERE r.lexemes IS NOT NULL),
           pg_catalog.array_agg(r.chars >= v_min_chars
                   AND (v_since IS NULL OR r.created_at >= v_since)
                   AND (v_until IS NULL OR r.created_at < v_until)
                   AND NOT (r.thread_id = p_thread_id AND r.seq > v_window_after)
                   AND r.metadata_ok) FILTER (WHERE r.lexemes IS NOT NULL)
      INTO v_docs, v_tok, v_known, h_t, h_s, h_c, h_sim, h_base, h_tk, h_lx, h_ok
      FROM pymem._recall_rows(p_project_id, p_user_id, p_embedder, p_query, v_any, v_as_of, v_filter) AS r;
    RETURN QUERY
    WITH h AS MATERIALIZED (
        SELECT u.t, u.s, u.c, u.sim, u.base, u.tk, u.ok,
               ARRAY(SELECT x.i FROM pg_catalog.generate_subscripts(v_terms, 1) AS x(i) WHERE u.lx @@ v_terms[x.i]) AS mask
          FROM ROWS FROM (pg_catalog.unnest(h_t), pg_catalog.unnest(h_s), pg_catalog.unnest(h_c), pg_catalog.unnest(h_sim), pg_catalog.unnest(h_base), pg_catalog.unnest(h_tk), pg_catalog.unnest(h_lx), pg_catalog.unnest(h_ok)) AS u(t, s, c, sim, base, tk, lx, ok)),
    d AS MATERIALIZED (
        SELECT ARRAY(SELECT pymem._bm25_idf(v_docs, (SELECT pg_catalog.count(*) FROM h WHERE x.i = ANY (h.mask))::float8)
                       FROM pg_catalog.generate_subscripts(v_terms, 1) AS x(i) ORDER BY x.i) AS idf,
               GREATEST(coalesce(v_tok / NULLIF(v_known, 0), 1), 1) AS avgdl),
    l AS MATERIALIZED (
        SELECT h.t, h.s, h.c, h.sim, h.base,
               pymem._bm25((SELECT pg_catalog.sum(d.idf[b.i]) FROM pg_catalog.unnest(h.mask) AS b(i)), 1, h.tk, d.avgdl, 0.3) AS bm25
          FROM h CROSS JOIN d WHERE h.ok),
    v AS (
        SELECT e.thread_id, e.seq, e.created_at, e.similarity, e.base FROM (
            SELECT c.thread_id, c.seq, c.created_at, c.similarity,
                   v_wv * c.similarity
                   + CASE WHEN v_rw = 0 THEN 0 ELSE v_rw * pymem._recency(
                         pg_catalog.date_part('epoch', coalesce(v_as_of, pg_catalog.now()) - c.created_at), v_half_life) END
                   + v_iw * c.importance AS base
              FROM (SELECT e.thread_id, e.seq, e.created_at, e.importance,
                           1 - pymem._cosine_distance(e.embedding, p_query) AS similarity
                      FROM pymem.message_embeddings AS e
                     WHERE p_query IS NOT NULL AND e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
                       AND (v_as_of IS NULL OR e.created_at <= v_as_of)
                       AND e.chars >= v_min_chars
                       AND (v_since IS NULL OR e.created_at >= v_since)
                       AND (v_until IS NULL OR e.created_at < v_until)
                       AND NOT (e.thread_id = p_thread_id AND e.seq > v_window_after)
                       AND (v_filter IS NULL OR EXISTS (
                               SELECT 1 FROM pymem.messages AS m
                                WHERE m.project_id = p_project_id AND m.user_id = p_user_id
                                  AND m.thread_id = e.thread_id AND m.seq = e.seq AND m.metadata @> v_filter))
                    OFFSET 0) AS c) AS e
         WHERE pymem._vector_match(e.similarity)
         ORDER BY e.base DESC, e.created_at DESC, e.thread_id, e.seq DESC
         LIMIT v_k),
    cand AS (
        SELECT l.t AS thread_id, l.s AS seq, l.c AS created_at, l.sim AS similarity,
               l.base + v_wl * coalesce(l.bm25 / NULLIF((SELECT pg_catalog.max(x.bm25) FROM l AS x), 0), 0) AS score
          FROM l
        UNION ALL
        SELECT v.thread_id, v.seq, v.created_at, v.similarity, v.base FROM v
         WHERE NOT EXISTS (SELECT 1 FROM h WHERE h.t = v.thread_id AND h.s = v.seq))
    SELECT c.thread_id, c.seq, c.similarity, c.score FROM cand AS c
     WHERE v_min_score IS NULL OR c.score >= v_min_score
     ORDER BY c.score DESC, c.created_at DESC, c.thread_id, c.seq DESC
     LIMIT v_k;
"""


def two() -> str:
    """_rr_two: the hits read into arrays by one aggregate pass, BM25's bookkeeping over those, and
    the vector statement for the k best by the part of the score every row has (a second read)."""
    f = v.renamed("_rr_two").replace("    v_from timestamptz := p_spec.time_from;\n", TWO_DECLS, 1)
    return v.replace_statement(f, TWO_STATEMENT)


if __name__ == "__main__":
    print(window())
    print(heap_split())
    print(two())
