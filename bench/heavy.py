"""One heavy user's recall: the shipped per-user recall index against the exact scan (issue 15,
"heavy users"), and the decision data behind it (a partial HNSW index, an IVFFlat lists/probes sweep).

    # a user with 160,000 messages among 1M (the probe of bench/conversations.py)
    PYMEM_DATA_DIR=/tmp/bench-heavy python bench/conversations.py --messages 1000000 \\
        --probe-messages 160000 --fresh --no-hnsw --iterations 3 --warmup 1 --heavy-iterations 2
    PYMEM_DATA_DIR=/tmp/bench-heavy python bench/heavy.py [--user probe] [--project acme] [--queries 16]
    PYMEM_DATA_DIR=/tmp/bench-heavy python bench/heavy.py --hnsw --sweep 400:1,4,10,20,40   # the decision data

It measures, for that user:
1. the shipped path: ``pymem.recall.recall_indexes`` builds the user's index and fills its
   words (as ``pymem recall-indexes --min-messages <the user's vectors>`` would: the time of both,
   the index's size), then ``context_read``
   and ``messages_recall`` (k = 5), with the query's vector alone and hybrid (vector and text,
   Memory's default), in alternating rounds: the exact scan (the call inside a transaction that
   deletes the user's row of pymem.recall_indexes, rolled back) and the index. Each call's wall
   time and the server's CPU time (/proc/<backend pid>/schedstat); p50 of each;
2. recall@k (k = 5, 10, 25) of ``messages_recall`` through the index against the exact ranking
   (the same call with the registry row deleted), vector and hybrid; a returned row scoring at
   least the exact k-th score counts (many messages share a text, so ties are common), and every
   call must return k rows. The index is dropped at the end unless --keep-index;
3. with --hnsw: a partial HNSW index over the user's vectors (built, measured, dropped): build time,
   size, and for top-N (--top, ``hnsw.ef_search`` = max(N, 40)) p50 latency and recall against the
   exact top-N by cosine (``enable_sort = off``, so the index is used even for a small user);
4. with --sweep LISTS:PROBES,...: a partial IVFFlat index with LISTS lists (built, measured,
   dropped), and for each number of probes, with ``ivfflat.iterative_scan`` off and relaxed_order,
   the top-25 by cosine: p50 latency, server CPU, recall@5/10/25 against the exact top 25.

Needs the embedded server of PYMEM_DATA_DIR or --dsn, and a superuser or the table owner (it
creates indexes). Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import json
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
SWEEP_INDEX = "bench_heavy_user_ivfflat"
CONTEXT = ("SELECT pymem.context_read(user_id => %(u)s, agent_id => %(a)s, project_id => %(p)s, "
           "thread_id => 'default', query_vector => %(v)s, embedder => %(e)s, max_facts => 50, "
           "recall => pymem.recall(window_size => 20, k => 5){x})")
RECALL = ("SELECT r.thread_id, r.seq, r.score FROM pymem.messages_recall(user_id => %(u)s, project_id => %(p)s, "
          "query_vector => %(v)s, embedder => %(e)s, recall => pymem.recall(k => %(k)s){x}) AS r")
HYBRID = ", query_text => %(t)s"
UNREGISTER = "DELETE FROM pymem.recall_indexes WHERE project_id = %(p)s AND user_id = %(u)s AND embedder = %(e)s"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/heavy.py", description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="libpq connection string (default: PYMEM_DSN, else the embedded server)")
    ap.add_argument("--user", default="probe")
    ap.add_argument("--project", default="acme")
    ap.add_argument("--queries", type=int, default=16, help="query texts (default 16)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds of exact and index calls (default 5)")
    ap.add_argument("--keep-index", action="store_true", help="keep the user's recall index (default: dropped at the end)")
    ap.add_argument("--hnsw", action="store_true", help="also measure a partial HNSW index (the rejected option)")
    ap.add_argument("--top", default="25,200,1000", help="N of the HNSW top-N, comma-separated (default 25,200,1000)")
    ap.add_argument("--sweep", help="LISTS:PROBES,... : also an IVFFlat index with LISTS lists, top 25 at each PROBES")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    args.top = [int(x) for x in args.top.split(",")]
    if args.queries < 1 or args.rounds < 1 or any(n < 1 or n > 1000 for n in args.top):
        ap.error("--queries and --rounds must be >= 1, and every --top between 1 and 1000 (hnsw.ef_search's maximum)")
    if args.sweep:
        try:
            lists, probes = args.sweep.split(":")
            args.sweep = (int(lists), [int(x) for x in probes.split(",")])
        except ValueError:
            ap.error("--sweep takes LISTS:PROBES,PROBES,... (e.g. 400:1,4,10)")
    return args


def _queries(n: int) -> list[str]:
    rng = random.Random(1)
    texts = PROBE_QUERIES + [f"{t} {rng.choice(CITIES + INGREDIENTS + TABLES)}" for t in PROBE_QUERIES * 8]
    return texts[:n]


class _Cpu:
    """The backend's CPU time so far (ns), from /proc/<pid>/schedstat (NaN where there is none)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.stat = Path(f"/proc/{conn.execute('SELECT pg_backend_pid()').fetchone()[0]}/schedstat")

    def __call__(self) -> float:
        return int(self.stat.read_text().split()[0]) if self.stat.exists() else float("nan")


def _call(conn: psycopg.Connection, stmt: str, p: dict[str, Any], exact: bool, cpu: _Cpu) -> tuple[list, float, float]:
    """One call: its rows, wall ms and server CPU ms. exact: inside a transaction that deletes the
    user's registry row (rolled back), so the call takes the exact scan."""
    with conn.transaction(force_rollback=True):
        if exact:
            conn.execute("SELECT pymem.set_tenant(%(p)s)", p)  # for an owner that is not a superuser (RLS)
            conn.execute(UNREGISTER, p)
        c0, t0 = cpu(), time.perf_counter_ns()
        rows = conn.execute(stmt, p).fetchall()
        return rows, (time.perf_counter_ns() - t0) / 1e6, (cpu() - c0) / 1e6


def build_index(conn: psycopg.Connection, db: Any, args: argparse.Namespace, emb: HashEmbedder) -> dict[str, Any]:
    """The user's recall index, as `pymem recall-indexes --min-messages <the user's vectors>` builds it."""
    from pymem.recall import recall_indexes

    vectors = conn.execute("SELECT count(*) FROM pymem.message_embeddings WHERE project_id = %s AND user_id = %s "
                           "AND embedder = %s", (args.project, args.user, emb.name)).fetchone()[0]
    common.progress(f"planning and building the recall index of {vectors:,} vectors")
    t0 = time.perf_counter()
    plan = recall_indexes(db, args.project, max(vectors, 1))
    row = conn.execute("SELECT index_name, lists FROM pymem.recall_indexes WHERE project_id = %s AND user_id = %s "
                       "AND embedder = %s", (args.project, args.user, emb.name)).fetchone()
    if row is None:
        raise SystemExit(f"bench/heavy.py: {args.user!r} of {args.project!r} got no recall index")
    out = {"vectors": vectors, "statements": [s["statement"] for s in plan], "index": row[0], "lists": row[1],
           "build_seconds": round(time.perf_counter() - t0, 1),
           "bytes": conn.execute("SELECT pg_relation_size(%s::regclass)", (f"pymem.{row[0]}",)).fetchone()[0]}
    common.progress(f"built in {out['build_seconds']} s ({len(plan)} statement(s)), lists {out['lists']}, "
                    f"{out['bytes'] / 2**20:,.0f} MiB")
    return out


def drop_index(conn: psycopg.Connection, args: argparse.Namespace, emb: HashEmbedder, index: str) -> None:
    conn.execute(UNREGISTER, {"p": args.project, "u": args.user, "e": emb.name})
    if not conn.execute("SELECT 1 FROM pymem.recall_indexes WHERE project_id = %s AND user_id = %s",
                        (args.project, args.user)).fetchone():  # the user's words (0045), as the plan deletes them
        conn.execute("DELETE FROM pymem.recall_terms WHERE project_id = %s AND user_id = %s", (args.project, args.user))
    time_index = conn.execute("SELECT pymem._recall_time_index(%s)", (index,)).fetchone()[0]
    for name in (index, time_index):  # the recall index and the time index beside it
        conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS pymem.{}").format(sql.Identifier(name)))


def shipped_costs(conn: psycopg.Connection, args: argparse.Namespace, emb: HashEmbedder) -> dict[str, Any]:
    """context_read and messages_recall (k = 5), vector and hybrid: exact scan and index in
    alternating rounds; p50 wall and server CPU per call (ms) of each."""
    cpu = _Cpu(conn)
    texts = _queries(args.queries)
    calls = {"context_read vector": CONTEXT.format(x=""), "context_read hybrid": CONTEXT.format(x=HYBRID),
             "messages_recall vector": RECALL.format(x=""), "messages_recall hybrid": RECALL.format(x=HYBRID)}
    samples: dict[tuple[str, str], tuple[list[float], list[float]]] = {
        (c, m): ([], []) for c in calls for m in ("exact", "index")}
    for rnd in range(args.rounds + 1):  # round 0 warms up
        for name, stmt in calls.items():
            for mode in ("exact", "index") if rnd % 2 else ("index", "exact"):
                text = texts[rnd % len(texts)]
                p = {"u": args.user, "a": AGENT_ID, "p": args.project, "v": Vector(emb.embed([text])[0]),
                     "e": emb.name, "t": text, "k": 5}
                _, wall, server = _call(conn, stmt, p, mode == "exact", cpu)
                if rnd:
                    samples[name, mode][0].append(wall)
                    samples[name, mode][1].append(server)
        common.progress(f"round {rnd} of {args.rounds} done")
    out: dict[str, Any] = {}
    for (name, mode), (walls, cpus) in samples.items():
        out.setdefault(name, {})[mode] = {"p50_ms": round(statistics.median(walls), 2),
                                          "server_cpu_p50_ms": round(statistics.median(cpus), 2)}
    for name, v in out.items():
        common.progress(f"{name}: exact {v['exact']['p50_ms']:.1f} ms ({v['exact']['server_cpu_p50_ms']:.1f} CPU), "
                        f"index {v['index']['p50_ms']:.1f} ms ({v['index']['server_cpu_p50_ms']:.1f} CPU)")
    return out


def _recall_by_score(exact: list[tuple], got: list[tuple], k: int) -> float:
    """The share of the exact top k that ``got`` returned; a row scoring at least the exact k-th counts."""
    want = {(r[0], r[1]) for r in exact}
    kth = exact[-1][2] if exact else 0.0
    return min(sum(1 for r in got if (r[0], r[1]) in want or r[2] >= kth - 1e-9), len(exact)) / k if k else 1.0


def shipped_recall(conn: psycopg.Connection, args: argparse.Namespace, emb: HashEmbedder) -> dict[str, Any]:
    """recall@k of messages_recall through the index against the exact scan (k = 5, 10, 25)."""
    cpu = _Cpu(conn)
    out: dict[str, Any] = {}
    for mode, x in (("vector", ""), ("hybrid", HYBRID)):
        for k in (5, 10, 25):
            rec = []
            for text in _queries(args.queries):
                p = {"u": args.user, "p": args.project, "v": Vector(emb.embed([text])[0]), "e": emb.name, "t": text, "k": k}
                got, _, _ = _call(conn, RECALL.format(x=x), p, False, cpu)
                exact, _, _ = _call(conn, RECALL.format(x=x), p, True, cpu)
                if len(got) != len(exact):
                    raise SystemExit(f"bench/heavy.py: {len(got)} rows through the index, {len(exact)} exact ({mode}, k={k})")
                rec.append(_recall_by_score(exact, got, k) if exact else 1.0)
            out[f"{mode} k={k}"] = {"recall": round(statistics.mean(rec), 3), "min_recall": round(min(rec), 3)}
            common.progress(f"recall@{k}, {mode}: {statistics.mean(rec):.3f} (min {min(rec):.2f})")
    return out


def ivfflat_sweep(conn: psycopg.Connection, args: argparse.Namespace, emb: HashEmbedder) -> dict[str, Any]:
    """An IVFFlat index with --sweep's lists over the user's vectors: top 25 at each number of probes."""
    lists, probes_list = args.sweep
    dim = emb.dimension
    where = sql.SQL("project_id = {} AND user_id = {} AND embedder = {}").format(
        sql.Literal(args.project), sql.Literal(args.user), sql.Literal(emb.name))
    conn.execute(sql.SQL("DROP INDEX IF EXISTS pymem.{}").format(sql.Identifier(SWEEP_INDEX)))
    t0 = time.perf_counter()
    conn.execute(sql.SQL("CREATE INDEX {} ON pymem.message_embeddings USING ivfflat "
                         "((embedding::vector({})) vector_cosine_ops) WITH (lists = {}) WHERE {}").format(
        sql.Identifier(SWEEP_INDEX), sql.Literal(dim), sql.Literal(lists), where))
    out: dict[str, Any] = {"lists": lists, "build_seconds": round(time.perf_counter() - t0, 1), "probes": {}}
    cpu = _Cpu(conn)
    try:
        conn.execute("ANALYZE pymem.message_embeddings")
        exact_q = sql.SQL("SELECT thread_id, seq, (embedding <=> %s)::float8 FROM pymem.message_embeddings "
                          "WHERE {} ORDER BY embedding <=> %s LIMIT 25").format(where)
        top = sql.SQL("SELECT thread_id, seq, (embedding::vector({d}) <=> %s::vector({d}))::float8 "
                      "FROM pymem.message_embeddings WHERE {w} ORDER BY embedding::vector({d}) <=> %s::vector({d}) "
                      "LIMIT 25").format(d=sql.Literal(dim), w=where)
        vecs = [Vector(emb.embed([t])[0]) for t in _queries(args.queries)]
        exact = [conn.execute(exact_q, (v, v)).fetchall() for v in vecs]
        for probes in probes_list:
            for iterative in ("off", "relaxed_order"):
                lat, cp, rec = [], [], {5: [], 10: [], 25: []}
                for v, ex in zip(vecs, exact):
                    with conn.transaction():
                        conn.execute(sql.SQL("SET LOCAL ivfflat.probes = {}").format(sql.Literal(probes)))
                        conn.execute(sql.SQL("SET LOCAL ivfflat.iterative_scan = {}").format(sql.Literal(iterative)))
                        c0, t0n = cpu(), time.perf_counter_ns()
                        got = conn.execute(top, (v, v)).fetchall()
                        lat.append((time.perf_counter_ns() - t0n) / 1e6)
                        cp.append((cpu() - c0) / 1e6)
                    for k in rec:
                        rec[k].append(_recall_at_k(ex[:k], got[:k], k) if ex else 1.0)
                fig = {"p50_ms": round(statistics.median(lat), 2), "server_cpu_p50_ms": round(statistics.median(cp), 2)}
                fig |= {f"recall@{k}": round(statistics.mean(r), 3) for k, r in rec.items()}
                fig["min_recall@25"] = round(min(rec[25]), 3)
                out["probes"][f"{probes} {iterative}"] = fig
                common.progress(f"lists {lists}, probes {probes}, iterative {iterative}: {fig}")
    finally:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS pymem.{}").format(sql.Identifier(SWEEP_INDEX)))
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
    import pymem

    args = _args(argv)
    common.set_quiet(args.quiet)
    conninfo, where = common.connection_info(args.dsn)
    emb = HashEmbedder()
    result: dict[str, Any] = {"database": where, "user": args.user, "project": args.project}
    with psycopg.connect(conninfo, autocommit=True) as conn, pymem.Database(pymem.Settings(dsn=conninfo)) as db:
        register_vector(conn)
        conn.execute("SET statement_timeout = 0")
        index = build_index(conn, db, args, emb)
        try:
            result["recall_index"] = index
            result["costs"] = shipped_costs(conn, args, emb)
            result["recall"] = shipped_recall(conn, args, emb)
        finally:
            if not args.keep_index:
                drop_index(conn, args, emb, index["index"])
        if args.hnsw:
            result["hnsw_per_user"] = hnsw_per_user(conn, args, emb)
        if args.sweep:
            result["ivfflat_sweep"] = ivfflat_sweep(conn, args, emb)
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
