"""Bulk ingest of facts: rows per second on one connection, batch API against single adds.

    PYMEM_DATA_DIR=/tmp/bench-ingest python bench/ingest.py --facts 100000 [--batch 1000] [--single 3000]

Writes through the public API only, into fresh subjects of a scratch project (``bench-ingest``,
emptied first), with 384-d HashEmbedder vectors where a case says so (sent in binary, as
sql/queries.sql sends them):

- ``facts_add_many``: the SQL batch function, ``--batch`` facts per call, no vectors;
- ``facts_add_many + vectors``: the same with one vector per fact;
- ``Memory.persist_many``: Python, one subject per call, vectors from HashEmbedder (embedding time
  included);
- ``fact_add`` (single): one call per fact, ``--single`` facts, no vectors;
- ``facts_add_many`` again over the facts already stored (idempotent re-add: nothing written);
- ``messages_add_many`` (one thread per batch), with and without vectors, and ``message_add``
  (one call per message).

Every case runs on the same connection in the same run (a shared 2-core machine drifts between
runs: compare the rows within one report). Prints a table and writes bench/results/ingest-*.json.
Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from bench import common  # noqa: E402
from pymem.embedders import HashEmbedder  # noqa: E402

PROJECT = "bench-ingest"


def _batches(n: int, size: int):
    for lo in range(0, n, size):
        yield lo, min(n, lo + size)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn")
    ap.add_argument("--facts", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--single", type=int, default=3000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"database: {where}")
    from pymem.migrations import migrate
    migrate(conninfo)
    conn = psycopg.connect(conninfo, autocommit=True)
    register_vector(conn)
    conn.execute("SELECT pymem.set_tenant(%s, false)", (PROJECT,))
    conn.execute("SELECT pymem.facts_forget('user', '*', project_id => %s)", (PROJECT,))
    emb = HashEmbedder()
    n, size = args.facts, args.batch
    contents = [f"bench fact {i}: the user mentioned item {i * 7919 % 100003} on day {i % 365}" for i in range(n)]
    subjects = [f"u{i % 5000:05d}" for i in range(n)]
    results: dict[str, Any] = {}

    def run(name: str, fn, rows: int) -> None:
        t0 = time.perf_counter_ns()
        fn()
        dt = (time.perf_counter_ns() - t0) / 1e9
        results[name] = {"rows": rows, "seconds": round(dt, 3), "rows_per_s": round(rows / dt)}
        common.progress(f"{name:32s} {rows:>9,} rows in {dt:7.2f} s: {rows / dt:>10,.0f} rows/s")

    add_many = ("SELECT count(*) FROM pymem.facts_add_many('user', %s::text[], %s::text[], project_id => %s"
                "{extra})")

    def many(prefix: str, vectors: bool) -> None:
        q = add_many.format(extra=", embeddings => %b, embedder => %s" if vectors else "")
        for lo, hi in _batches(n, size):
            p: list[Any] = [subjects[lo:hi], [prefix + c for c in contents[lo:hi]], PROJECT]
            if vectors:
                p += [[np.asarray(v, dtype=np.float32) for v in emb.embed([prefix + c for c in contents[lo:hi]])],
                      emb.name]
            conn.execute(q, p, prepare=True).fetchone()

    run("facts_add_many", lambda: many("", False), n)
    run("facts_add_many (re-add, idempotent)", lambda: many("", False), n)
    run("facts_add_many + vectors", lambda: many("v: ", True), n)

    with pymem.Database(pymem.Settings(dsn=conninfo)) as db:
        mem = pymem.Memory(db=db, agent_id="bench", project_id=PROJECT, embedder=emb)

        def persist_many() -> None:
            for lo, hi in _batches(n, size):
                mem.persist_many(["m: " + c for c in contents[lo:hi]], tier="user", id=f"pm{lo // size:05d}")

        run("Memory.persist_many + vectors", persist_many, n)

    single = min(args.single, n)

    def singles() -> None:
        for i in range(single):
            conn.execute("SELECT id FROM pymem.fact_add('user', %s, %s, project_id => %s)",
                         (subjects[i], "s: " + contents[i], PROJECT), prepare=True).fetchone()

    run("fact_add (one per call)", singles, single)

    # messages: a history per user, in one thread, with and without vectors
    texts = [f"message {i}: we talked about item {i * 7919 % 100003} and day {i % 365}" for i in range(n)]

    def messages(vectors: bool) -> None:
        q = ("SELECT count(*) FROM pymem.messages_add_many(%s, %s, %s::text[], %s::text[], project_id => %s{extra})"
             .format(extra=", embeddings => %b, embedder => %s" if vectors else ""))
        for lo, hi in _batches(n, size):
            p: list[Any] = [f"mu{lo // size:05d}", "v" if vectors else "plain", ["user", "assistant"] * ((hi - lo + 1) // 2),
                            texts[lo:hi], PROJECT]
            p[2] = p[2][: hi - lo]
            if vectors:
                p += [[np.asarray(v, dtype=np.float32) for v in emb.embed(texts[lo:hi])], emb.name]
            conn.execute(q, p, prepare=True).fetchone()

    run("messages_add_many", lambda: messages(False), n)
    run("messages_add_many + vectors", lambda: messages(True), n)

    def message_singles() -> None:
        for i in range(single):
            conn.execute("SELECT pymem.message_add(%s, %s, project_id => %s)", ("ms", texts[i], PROJECT),
                         prepare=True).fetchone()

    run("message_add (one per call)", message_singles, single)
    conn.execute("SELECT pymem.conversation_forget(u.user_id, '*', %s) FROM (SELECT DISTINCT user_id FROM "
                 "pymem.threads WHERE project_id = %s) AS u", (PROJECT, PROJECT))
    results["command"] = common.command_line("bench/ingest.py", argv)
    results["environment"] = common.environment(conn)
    print(f"\n{'case':36s} {'rows':>9s} {'rows/s':>10s}")
    for k, v in results.items():
        if isinstance(v, dict) and "rows_per_s" in v:
            print(f"{k:36s} {v['rows']:>9,} {v['rows_per_s']:>10,}")
    conn.execute("SELECT pymem.facts_forget('user', '*', project_id => %s)", (PROJECT,))
    conn.close()
    if not args.no_write:
        common.progress(f"wrote {common.write_result('ingest', results)}")
    return results


if __name__ == "__main__":
    main()
