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


if __name__ == "__main__":
    print(window())
    print(heap_split())
