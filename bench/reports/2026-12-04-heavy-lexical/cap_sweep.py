"""The cap of a heavy user's lexical candidates (issue 32, item 2), swept: `_recall_lexical` adds
the messages holding a query term that at most N of the user's messages hold (100 at first, 400
now; `_recall` also takes the rarest terms first within 400 postings in all). Which cap finds
what the exact ranking finds, at what cost? Runs on the data of bench/conversations.py (the
160,000-message probe user, its recall index and postings filled: see report.md, "Set-up").

    PYMEM_DATA_DIR=/tmp/heavy-db python bench/reports/2026-12-04-heavy-lexical/cap_sweep.py [--per-band 8] [--caps 50,100,200,400]

Query words: the probe's own lexemes, chosen at random (seeded) per band of how many of its
messages hold them (11-50, 51-100, 101-200, 201-400, 401-1000, 1001-3000), each asked as "what about the <word>" with
the vector of that text (k 5, the defaults otherwise). The exact ranking is the same call with the
user's registry row deleted (rolled back). Each cap is tried by replacing `_recall_lexical`'s two
numbers (the per-term cap; `_recall`'s total of 400 still applies) inside a transaction that is rolled back: nothing in the database changes. Reports per
cap and band the recall@5 of the index path against the exact ranking (by identity), how many
of the exact top 5 hold the band's word, and p50 wall and server CPU per call. Nothing here
asserts a duration.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time
from pathlib import Path

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

import pymem
from pymem.connection import resolve_conninfo
from pymem.embedders import HashEmbedder

ROOT = Path(__file__).resolve().parents[3]
RECALL = ("SELECT r.thread_id, r.seq, r.content FROM pymem.messages_recall(user_id => 'probe', project_id => 'acme', "
          "query_vector => %(v)s, embedder => %(e)s, query_text => %(t)s, k => 5) AS r")
UNREGISTER = "DELETE FROM pymem.recall_indexes WHERE project_id = 'acme' AND user_id = 'probe' AND embedder = %(e)s"
BANDS = [(11, 50), (51, 100), (101, 200), (201, 400), (401, 1000), (1001, 3000)]


def _lexical_body(cap: int) -> str:
    """sql/api/recall_indexes.sql's CREATE OR REPLACE of _recall_lexical, with the cap."""
    text = (ROOT / "sql" / "api" / "recall_indexes.sql").read_text(encoding="utf-8")
    start = text.index("CREATE OR REPLACE FUNCTION pymem._recall_lexical(")
    end = text.index("$$;", text.index("AS $$", start)) + 3
    body = text[start:end]
    body, n = re.subn(r"LIMIT \d+\) AS t\) AS a", f"LIMIT {cap + 1}) AS t) AS a", body)
    body, m = re.subn(r"cardinality\(a\.threads\) <= \d+", f"cardinality(a.threads) <= {cap}", body)
    assert n == m == 1, "the cap is no longer where this script looks"
    return body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-band", type=int, default=8)
    ap.add_argument("--caps", default="50,100,200,400")
    args = ap.parse_args()
    caps = [int(x) for x in args.caps.split(",")]
    emb = HashEmbedder()
    dsn = resolve_conninfo(pymem.Settings())
    rng = random.Random(11)
    with psycopg.connect(dsn, autocommit=True) as c:
        register_vector(c)
        counts = c.execute("SELECT lexeme, count(*) FROM pymem.recall_terms WHERE project_id = 'acme' AND user_id = 'probe' "
                           "GROUP BY lexeme ORDER BY lexeme").fetchall()
        words: list[tuple[tuple[int, int], str]] = []
        for lo, hi in BANDS:
            pool = [w for w, n in counts if lo <= n <= hi and re.fullmatch(r"[a-z0-9]{2,}", w)]
            # a word whose text yields itself again as a lexeme (a stem may stem further)
            pool = [w for w in pool if c.execute("SELECT %s = ANY (tsvector_to_array(to_tsvector('english', %s)))",
                                                 (w, w)).fetchone()[0]]
            words += [((lo, hi), w) for w in rng.sample(pool, min(args.per_band, len(pool)))]
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        stat = Path(f"/proc/{pid}/schedstat")
        cpu = (lambda: int(stat.read_text().split()[0])) if stat.exists() else (lambda: 0)
        exact = {}
        for band, w in words:
            p = {"v": Vector(emb.embed([f"what about the {w}"])[0]), "e": emb.name, "t": f"what about the {w}"}
            c.execute("BEGIN")
            c.execute(UNREGISTER, p)
            exact[w] = c.execute(RECALL, p).fetchall()
            c.execute("ROLLBACK")
        print("| cap | band (messages holding the word) | words | recall@5 vs exact | exact top 5 holding the word | "
              "index path: of those found | p50 wall ms | p50 CPU ms |")
        print("|--:|---|--:|--:|--:|--:|--:|--:|")
        for cap in caps:
            c.execute("BEGIN")
            c.execute(_lexical_body(cap))
            per: dict[tuple[int, int], dict[str, list[float]]] = {}
            for band, w in words:
                p = {"v": Vector(emb.embed([f"what about the {w}"])[0]), "e": emb.name, "t": f"what about the {w}"}
                c0, t0 = cpu(), time.perf_counter_ns()
                got = c.execute(RECALL, p).fetchall()
                wall, used = (time.perf_counter_ns() - t0) / 1e6, (cpu() - c0) / 1e6
                want = {(r[0], r[1]) for r in exact[w]}
                holding = {(r[0], r[1]) for r in exact[w] if re.search(rf"\b{w}", r[2].lower())}
                d = per.setdefault(band, {"recall": [], "holding": [], "found": [], "wall": [], "cpu": []})
                d["recall"].append(sum(1 for r in got if (r[0], r[1]) in want) / max(len(want), 1))
                d["holding"].append(len(holding))
                d["found"].append(sum(1 for r in got if (r[0], r[1]) in holding))
                d["wall"].append(wall)
                d["cpu"].append(used)
            c.execute("ROLLBACK")
            for band, d in per.items():
                print(f"| {cap} | {band[0]}-{band[1]} | {len(d['recall'])} | {statistics.mean(d['recall']):.3f} | "
                      f"{int(sum(d['holding']))} | {int(sum(d['found']))} | {statistics.median(d['wall']):.1f} | "
                      f"{statistics.median(d['cpu']):.1f} |")


if __name__ == "__main__":
    main()
