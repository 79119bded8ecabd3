"""A heavy user's messages that match a query by a rare word alone: found or not, through the
recall index against the exact scan (issue 32, item 2). Runs on either schema (before and after
0045_recall_terms), on the data of bench/conversations.py (the 160,000-message probe user).

    PYMEM_DATA_DIR=/tmp/heavy-db python bench/reports/2026-12-04-heavy-lexical/rare_words.py [--messages 20]

Adds (once) --messages messages to the probe user, in thread 'rare', each holding one made-up
word no other message holds ("the <word> parcel arrived"), each stored with the vector of an
unrelated text (far from every query), then for each of them asks a hybrid messages_recall (k = 5,
the defaults otherwise) whose text is "what about the <word>" (with --with-probe: the word
followed by one of the benchmark's probe queries, whose many near messages outrank it even in the
exact ranking), with the vector of that text. Reports how many of the rare messages come back through the index
and through the exact scan (the call inside a transaction that deletes the user's registry row,
rolled back), recall@5 of the index against the exact ranking (by identity), and p50 wall and server CPU of both. Builds the user's
recall index first if it has none (kept). Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import time
from pathlib import Path

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

import pymem
from pymem.connection import resolve_conninfo
from pymem.conversations import recall_indexes
from pymem.embedders import HashEmbedder

PROBE_QUERIES = ["which hotel did I book in Kyoto", "what did we decide about the indexes on the orders table",
                 "how fast did I run my last long run", "how do I say good morning in Spanish",
                 "vegetarian dinner ideas with lentils", "is Biscuit sick, should I call the vet",
                 "am I over budget on groceries this month", "which laptop should I buy for programming"]
RECALL = ("SELECT r.thread_id, r.seq, r.score, r.content FROM pymem.messages_recall(user_id => 'probe', project_id => 'acme', "
          "query_vector => %(v)s, embedder => %(e)s, query_text => %(t)s, k => 5) AS r")
UNREGISTER = "DELETE FROM pymem.recall_indexes WHERE project_id = 'acme' AND user_id = 'probe' AND embedder = %(e)s"


def _words(n: int) -> list[str]:
    rng = random.Random(7)
    return ["".join(rng.choice(string.ascii_lowercase) for _ in range(9)) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20)
    ap.add_argument("--with-probe", action="store_true",
                    help="the word followed by a probe query (default: 'what about the <word>')")
    args = ap.parse_args()
    emb = HashEmbedder()
    words = _words(args.messages)
    dsn = resolve_conninfo(pymem.Settings())
    with psycopg.connect(dsn, autocommit=True) as c:
        register_vector(c)
        have = c.execute("SELECT count(*) FROM pymem.messages WHERE project_id = 'acme' AND user_id = 'probe' "
                         "AND thread_id = 'rare'").fetchone()[0]
        if have < len(words):
            texts = [f"the {w} parcel arrived" for w in words]
            far = emb.embed([f"{i} zz yy xx ww vv" for i in range(len(words))])
            c.execute("SELECT count(*) FROM pymem.messages_add_many(user_id => 'probe', thread_id => 'rare', roles => %s, "
                      "contents => %s, project_id => 'acme', embeddings => %s, embedder => %s)",
                      (["user"] * len(texts), texts, [Vector(v) for v in far], emb.name))
        vectors = c.execute("SELECT count(*) FROM pymem.message_embeddings WHERE project_id = 'acme' AND user_id = 'probe' "
                            "AND embedder = %s", (emb.name,)).fetchone()[0]
        if not c.execute("SELECT 1 FROM pymem.recall_indexes WHERE project_id = 'acme' AND user_id = 'probe'").fetchone():
            with pymem.Database(pymem.Settings(dsn=dsn)) as db:
                t0 = time.perf_counter()
                recall_indexes(db, "acme", vectors)
                print(f"index built (plan and statements) in {time.perf_counter() - t0:.1f} s")
        terms = c.execute("SELECT to_regclass('pymem.recall_terms') IS NOT NULL").fetchone()[0]
        if terms:
            print("postings of the probe user:",
                  c.execute("SELECT count(*) FROM pymem.recall_terms WHERE project_id = 'acme' AND user_id = 'probe'").fetchone()[0])
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        stat = Path(f"/proc/{pid}/schedstat")
        cpu = (lambda: int(stat.read_text().split()[0])) if stat.exists() else (lambda: float("nan"))
        found = {"index": 0, "exact": 0}
        walls = {"index": [], "exact": []}
        cpus = {"index": [], "exact": []}
        recall = []
        for i, w in enumerate(words):
            text = f"{w} {PROBE_QUERIES[i % len(PROBE_QUERIES)]}" if args.with_probe else f"what about the {w}"
            p = {"v": Vector(emb.embed([text])[0]), "e": emb.name, "t": text}
            rows = {}
            for mode in ("index", "exact") if i % 2 else ("exact", "index"):
                c.execute("BEGIN")
                if mode == "exact":
                    c.execute(UNREGISTER, p)
                c0, t0 = cpu(), time.perf_counter_ns()
                rows[mode] = c.execute(RECALL, p).fetchall()
                walls[mode].append((time.perf_counter_ns() - t0) / 1e6)
                cpus[mode].append((cpu() - c0) / 1e6)
                c.execute("ROLLBACK")
                found[mode] += any(w in r[3] for r in rows[mode])
            # by identity: the index path's hybrid scores are normalised over its candidates, so
            # a score is no measure against the exact k-th (bench/heavy.py's tie rule would count
            # a missed row as found)
            want = {(r[0], r[1]) for r in rows["exact"]}
            recall.append(sum(1 for r in rows["index"] if (r[0], r[1]) in want) / max(len(want), 1))
        print(f"schema with recall_terms: {terms}; {len(words)} queries, each naming one rare word")
        for mode in ("index", "exact"):
            print(f"  {mode}: rare message recalled {found[mode]}/{len(words)}, p50 {statistics.median(walls[mode]):.1f} ms "
                  f"wall, {statistics.median(cpus[mode]):.1f} ms server CPU")
        print(f"  recall@5 of the index against the exact ranking: {statistics.mean(recall):.3f} (min {min(recall):.2f})")


if __name__ == "__main__":
    main()
