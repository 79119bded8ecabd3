"""One heavy user's recall: what the exact scan costs, and what a per-user HNSW index would give
(issue 15, "heavy users": the decision data, not a shipped path).

    # a user with 160,000 messages among 1M (the probe of bench/conversations.py)
    PYMEM_DATA_DIR=/tmp/bench-heavy python bench/conversations.py --messages 1000000 \\
        --probe-messages 160000 --fresh --no-hnsw --iterations 3 --warmup 1 --heavy-iterations 2
    PYMEM_DATA_DIR=/tmp/bench-heavy python bench/heavy.py [--user probe] [--project acme] [--queries 16]

It measures, for that user:
1. ``context_read`` with the query's vector, and with its vector and text (hybrid, Memory's
   default): wall time and the server's CPU time (/proc/<backend pid>/schedstat) per call;
2. a partial HNSW index over that user's vectors only (``WHERE project_id = ... AND user_id = ...
   AND embedder = ...``, on ``embedding::vector(dim)``; built here and dropped at the end): its
   build time and size, and for top-N (N = --top, each with ``hnsw.ef_search`` = max(N, 40)) the
   p50 latency and recall against the exact top-N by cosine, where a returned row whose
   distance ties the exact N-th counts (many messages share a text, so ties are common). The
   HNSW queries run with ``enable_sort = off``, so the index is used even for a user small enough
   that the planner would sort instead (each figure says whether the plan used it).

Needs the embedded server of PYMEM_DATA_DIR or --dsn, and a superuser or the table owner (it
creates an index). Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.conv.config import AGENT_ID  # noqa: E402
from bench.conv.hnsw import _recall_at_k  # noqa: E402
from bench.conv.texts import CITIES, INGREDIENTS, PROBE_QUERIES, TABLES  # noqa: E402
from pymem.embedders import HashEmbedder  # noqa: E402

INDEX = "bench_heavy_user_hnsw"
CONTEXT = ("SELECT pymem.context_read(user_id => %(u)s, agent_id => %(a)s, project_id => %(p)s, "
           "thread_id => 'default', query => %(v)s, embedder => %(e)s, max_facts => 50, window_size => 20, k => 5{x})")


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/heavy.py", description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="libpq connection string (default: PYMEM_DSN, else the embedded server)")
    ap.add_argument("--user", default="probe")
    ap.add_argument("--project", default="acme")
    ap.add_argument("--queries", type=int, default=16, help="query texts (default 16)")
    ap.add_argument("--calls", type=int, default=5, help="timed context_read calls per kind (default 5)")
    ap.add_argument("--top", default="25,200,1000", help="N of the HNSW top-N, comma-separated (default 25,200,1000)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    args.top = [int(x) for x in args.top.split(",")]
    if args.queries < 1 or args.calls < 1 or any(n < 1 or n > 1000 for n in args.top):
        ap.error("--queries and --calls must be >= 1, and every --top between 1 and 1000 (hnsw.ef_search's maximum)")
    return args


def _queries(n: int) -> list[str]:
    rng = random.Random(1)
    texts = PROBE_QUERIES + [f"{t} {rng.choice(CITIES + INGREDIENTS + TABLES)}" for t in PROBE_QUERIES * 4]
    return texts[:n]


def context_costs(conn: psycopg.Connection, args: argparse.Namespace, emb: HashEmbedder) -> dict[str, Any]:
    """context_read of the user, vector alone and hybrid: p50 wall and server CPU per call (ms)."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    stat = Path(f"/proc/{pid}/schedstat")
    out: dict[str, Any] = {}
    texts = _queries(args.calls + 1)
    for name, stmt in (("vector", CONTEXT.format(x="")), ("hybrid", CONTEXT.format(x=", query_text => %(t)s"))):
        walls, cpus = [], []
        for i, text in enumerate(texts):
            p = {"u": args.user, "a": AGENT_ID, "p": args.project, "v": Vector(emb.embed([text])[0]), "e": emb.name,
                 "t": text}
            c0 = int(stat.read_text().split()[0]) if stat.exists() else 0
            t0 = time.perf_counter_ns()
            conn.execute(stmt, p).fetchall()
            if i:  # the first call warms up
                walls.append((time.perf_counter_ns() - t0) / 1e6)
                cpus.append((int(stat.read_text().split()[0]) - c0) / 1e6 if stat.exists() else float("nan"))
        out[name] = {"p50_ms": round(statistics.median(walls), 2), "server_cpu_p50_ms": round(statistics.median(cpus), 2)}
        common.progress(f"context_read, {name}: p50 {out[name]['p50_ms']:.1f} ms wall, "
                        f"{out[name]['server_cpu_p50_ms']:.1f} ms server CPU")
    return out


def hnsw_per_user(conn: psycopg.Connection, args: argparse.Namespace, emb: HashEmbedder) -> dict[str, Any]:
    """A partial HNSW index over the user's vectors: build, size, and top-N latency and recall."""
    dim = emb.dimension
    where = sql.SQL("project_id = {} AND user_id = {} AND embedder = {}").format(
        sql.Literal(args.project), sql.Literal(args.user), sql.Literal(emb.name))
    conn.execute(sql.SQL("DROP INDEX IF EXISTS pymem.{}").format(sql.Identifier(INDEX)))
    vectors = conn.execute(sql.SQL("SELECT count(*) FROM pymem.message_embeddings WHERE {}").format(where)).fetchone()[0]
    common.progress(f"building a partial HNSW index over {vectors:,} vectors")
    t0 = time.perf_counter()
    conn.execute(sql.SQL("CREATE INDEX {} ON pymem.message_embeddings USING hnsw "
                         "((embedding::vector({})) vector_cosine_ops) WHERE {}").format(
        sql.Identifier(INDEX), sql.Literal(dim), where))
    out: dict[str, Any] = {"vectors": vectors, "build_seconds": round(time.perf_counter() - t0, 1),
                           "bytes": conn.execute("SELECT pg_relation_size(%s::regclass)", (f"pymem.{INDEX}",)).fetchone()[0],
                           "top": {}}
    common.progress(f"built in {out['build_seconds']} s, {out['bytes'] / 2**20:,.0f} MiB")
    try:
        conn.execute("ANALYZE pymem.message_embeddings")
        topn = sql.SQL("SELECT e.thread_id, e.seq, (e.embedding::vector({d}) <=> %s::vector({d}))::float8 "
                       "FROM pymem.message_embeddings AS e WHERE {w} "
                       "ORDER BY e.embedding::vector({d}) <=> %s::vector({d}) LIMIT {n}")
        for n in args.top:
            stmt = topn.format(d=sql.Literal(dim), w=where, n=sql.Literal(n))
            lat, rec, used = [], [], None
            for text in _queries(args.queries):
                v = Vector(emb.embed([text])[0])
                with conn.transaction():
                    conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(max(n, 40))))
                    conn.execute("SET LOCAL enable_sort = off")  # the index, even where the planner would sort
                    t0 = time.perf_counter_ns()
                    got = conn.execute(stmt, (v, v)).fetchall()
                    lat.append((time.perf_counter_ns() - t0) / 1e6)
                    if used is None:
                        plan = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) {}").format(stmt), (v, v)).fetchone()[0]
                        used = INDEX in str(plan)
                with conn.transaction():  # the exact top-N: the user's rows through the btree, sorted
                    conn.execute("SET LOCAL enable_indexscan = off")
                    exact = conn.execute(stmt, (v, v)).fetchall()
                rec.append(_recall_at_k(exact, got, len(exact)) if exact else 1.0)
            out["top"][n] = {"p50_ms": round(statistics.median(lat), 2), "recall": round(statistics.mean(rec), 3),
                             "min_recall": round(min(rec), 3), "uses_index": bool(used)}
            common.progress(f"top-{n}: p50 {out['top'][n]['p50_ms']:.1f} ms, recall {out['top'][n]['recall']:.3f} "
                            f"(min {out['top'][n]['min_recall']:.2f}), index used: {used}")
    finally:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS pymem.{}").format(sql.Identifier(INDEX)))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _args(argv)
    common.set_quiet(args.quiet)
    conninfo, where = common.connection_info(args.dsn)
    emb = HashEmbedder()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET statement_timeout = 0")
        result = {"database": where, "user": args.user, "project": args.project,
                  "context_read": context_costs(conn, args, emb), "hnsw_per_user": hnsw_per_user(conn, args, emb)}
    return result


if __name__ == "__main__":
    main()
