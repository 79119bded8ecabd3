"""The count cap of a heavy user's document frequencies (issue 32, item 2), swept:
`_recall_term_counts` counts each query word's holders in the user's postings up to 10,000; a
commoner word gets the idf of 10,000 holders, a little too high. Does the cap change what the
index path recalls against the exact ranking, and what does counting cost? Runs on the data of
bench/conversations.py (the 160,000-message probe user, its recall index and postings filled: see
report.md, "Set-up").

    PYMEM_DATA_DIR=/tmp/heavy-db python bench/reports/2026-12-04-heavy-lexical/df_cap_sweep.py [--per-band 8] [--caps 1000,3000,10000,30000]

A cap matters only when a query has two or more words (one word's idf scales every lexical score
alike, and the lexical part is divided by the best). Queries: "what about the <common> <mid>": a
word of the probe's own held by a band of messages (1,001-3,000, 3,001-10,000, 10,001-20,000; the
commonest holds 19,843) and one held by 101-400, drawn at random (seeded), with the vector of that
text (k 10, the defaults otherwise). The exact ranking is the same call with the user's registry
row deleted (rolled back). Each cap replaces the count's LIMIT inside a transaction that is rolled
back. Reports per cap and band recall@5 and @10 of the index path against the exact ranking (by
identity), and p50 server CPU of the call and of the counts alone. Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
from pathlib import Path

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

import pymem
from pymem.connection import resolve_conninfo
from pymem.embedders import HashEmbedder

ROOT = Path(__file__).resolve().parents[3]
RECALL = ("SELECT r.thread_id, r.seq FROM pymem.messages_recall(user_id => 'probe', project_id => 'acme', "
          "query_vector => %(v)s, embedder => %(e)s, query_text => %(t)s, k => 10) AS r")
COUNTS = "SELECT pymem._recall_term_counts('acme', 'probe', %(w)s)"
UNREGISTER = "DELETE FROM pymem.recall_indexes WHERE project_id = 'acme' AND user_id = 'probe' AND embedder = %(e)s"
BANDS = [(1001, 3000), (3001, 10000), (10001, 20000)]


def _counts_body(cap: int) -> str:
    """sql/api/recall_indexes.sql's CREATE OR REPLACE of _recall_term_counts, with the cap."""
    text = (ROOT / "sql" / "api" / "recall_indexes.sql").read_text(encoding="utf-8")
    start = text.index("CREATE OR REPLACE FUNCTION pymem._recall_term_counts(")
    end = text.index("$$;", text.index("AS $$", start)) + 3
    body, n = re.subn(r"LIMIT \d+\) AS x", f"LIMIT {cap}) AS x", text[start:end])
    assert n == 1, "the cap is no longer where this script looks"
    return body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-band", type=int, default=8)
    ap.add_argument("--caps", default="1000,3000,10000,30000")
    ap.add_argument("--repeat", type=int, default=3, help="calls per query and cap (the CPU's median)")
    args = ap.parse_args()
    caps = [int(x) for x in args.caps.split(",")]
    emb = HashEmbedder()
    rng = random.Random(13)
    with psycopg.connect(resolve_conninfo(pymem.Settings()), autocommit=True) as c:
        register_vector(c)
        counts = c.execute("SELECT lexeme, count(*) FROM pymem.recall_terms WHERE project_id = 'acme' AND user_id = 'probe' "
                           "GROUP BY lexeme ORDER BY lexeme").fetchall()

        def pool(lo: int, hi: int) -> list[str]:  # words whose text yields itself again as a lexeme
            return [w for w, n in counts if lo <= n <= hi and re.fullmatch(r"[a-z]{2,}", w)
                    and c.execute("SELECT %s = ANY (tsvector_to_array(to_tsvector('english', %s)))", (w, w)).fetchone()[0]]

        mids = pool(101, 400)
        queries = [(band, f"what about the {w} {rng.choice(mids)}")
                   for band in BANDS for w in rng.sample(pool(*band), min(args.per_band, len(pool(*band))))]
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        stat = Path(f"/proc/{pid}/schedstat")

        def cpu() -> int:
            return int(stat.read_text().split()[0])

        params = {t: {"v": Vector(emb.embed([t])[0]), "e": emb.name, "t": t,
                      "w": c.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", (t,)).fetchone()[0]}
                  for _, t in queries}
        exact = {}
        for _, t in queries:
            c.execute("BEGIN")
            c.execute(UNREGISTER, params[t])
            exact[t] = c.execute(RECALL, params[t]).fetchall()
            c.execute("ROLLBACK")
        print("| cap | band (messages holding the common word) | queries | recall@5 vs exact | recall@10 vs exact | "
              "p50 CPU ms, the call | p50 CPU ms, the counts |")
        print("|--:|---|--:|--:|--:|--:|--:|")
        for cap in caps:
            c.execute("BEGIN")
            c.execute(_counts_body(cap))
            per: dict[tuple[int, int], dict[str, list[float]]] = {}
            for band, t in queries:
                d = per.setdefault(band, {"r5": [], "r10": [], "cpu": [], "count": []})
                for _ in range(args.repeat):
                    c0 = cpu()
                    got = c.execute(RECALL, params[t]).fetchall()
                    c1 = cpu()
                    c.execute(COUNTS, params[t]).fetchall()
                    d["cpu"].append((c1 - c0) / 1e6)
                    d["count"].append((cpu() - c1) / 1e6)
                want = exact[t]
                d["r5"].append(len(set(got[:5]) & set(want[:5])) / max(len(want[:5]), 1))
                d["r10"].append(len(set(got) & set(want)) / max(len(want), 1))
            c.execute("ROLLBACK")
            for band, d in per.items():
                print(f"| {cap} | {band[0]}-{band[1]} | {len(d['r5'])} | {statistics.mean(d['r5']):.3f} | "
                      f"{statistics.mean(d['r10']):.3f} | {statistics.median(d['cpu']):.1f} | {statistics.median(d['count']):.2f} |")


if __name__ == "__main__":
    main()
