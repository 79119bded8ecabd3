"""Exact scan vs HNSW: the same top-k query on one user's vectors, exact (no HNSW index), then
with an HNSW index under several ``hnsw.iterative_scan`` / ``hnsw.ef_search`` settings: latency,
recall@k against the exact answer, and each variant's plan. The index exists only during the
comparison."""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import psycopg
from pgvector import Vector
from psycopg import sql

import pymem
from bench import common
from pymem.embedders import HashEmbedder

from .config import User
from .texts import CITIES, INGREDIENTS, PROBE_QUERIES, TABLES

HNSW_INDEX = "bench_message_embeddings_hnsw"

TOPK_TEMPLATE = """SELECT e.thread_id, e.seq, (e.embedding::vector(@dim) <=> {q}::vector(@dim))::float8 AS distance
  FROM pymem.message_embeddings AS e
 WHERE e.project_id = {project_id} AND e.user_id = {user_id} AND e.embedder = {embedder}
 ORDER BY e.embedding::vector(@dim) <=> {q}::vector(@dim)
 LIMIT {k}"""


def topk_sql(dim: int) -> str:
    """The top-k query with psycopg parameters."""
    return TOPK_TEMPLATE.replace("@dim", str(dim)).format(
        q="%(q)s", project_id="%(project_id)s", user_id="%(user_id)s", embedder="%(embedder)s", k="%(k)s")


def topk_literal(conn: psycopg.Connection, dim: int, user: User, embedder: str, q: Vector, k: int) -> str:
    """The top-k query with literals (for EXPLAIN)."""
    return sql.SQL(TOPK_TEMPLATE.replace("@dim", str(dim))).format(
        q=sql.Literal(q.to_text()), project_id=sql.Literal(user.project_id), user_id=sql.Literal(user.user_id),
        embedder=sql.Literal(embedder), k=sql.Literal(k)).as_string(conn)


def _recall_at_k(exact: list[tuple], got: list[tuple], k: int) -> float:
    """How many of the exact top-k ``got`` returned, over k. A returned row whose distance ties
    the exact k-th (within 1e-9) counts too: a tie at the boundary may pick either row."""
    want = {(r[0], r[1]) for r in exact}
    kth = exact[-1][2] if exact else 0.0
    hits = sum(1 for r in got if (r[0], r[1]) in want or r[2] <= kth + 1e-9)
    return min(hits, len(exact)) / k if k else 1.0


class _Comparison:
    """The top-k query of one comparison on one connection: its parameters, a timed run of every
    query vector (with the answers) and its plan."""

    def __init__(self, conn: psycopg.Connection, embedder: HashEmbedder, qvecs: list[Vector],
                 args: argparse.Namespace) -> None:
        self.conn, self.embedder, self.qvecs, self.k = conn, embedder, qvecs, args.hnsw_k
        self.iters, self.warm = args.hnsw_iterations, min(args.warmup, 10)
        self.topk = topk_sql(embedder.dimension)

    def params(self, user: User, i: int) -> dict[str, Any]:
        return {"q": self.qvecs[i % len(self.qvecs)], "project_id": user.project_id, "user_id": user.user_id,
                "embedder": self.embedder.name, "k": self.k}

    def run(self, user: User) -> tuple[dict[str, Any], list[list[tuple]]]:
        conn, topk = self.conn, self.topk
        answers = [conn.execute(topk, self.params(user, i), prepare=False).fetchall() for i in range(len(self.qvecs))]
        timing = common.measure(lambda i: conn.execute(topk, self.params(user, i), prepare=False).fetchall(),
                                self.iters, self.warm)
        timing.pop("_samples_ns")
        return timing, answers

    def plan_of(self, user: User) -> dict[str, Any]:
        e = common.explain(self.conn, topk_literal(self.conn, self.embedder.dimension, user, self.embedder.name,
                                                   self.qvecs[0], self.k))
        return {"node_types": e["node_types"], "indexes": e["indexes"], "execution_ms": e["execution_ms"],
                "planning_ms": e["planning_ms"], "shared_hit_blocks": e["shared_hit_blocks"],
                "shared_read_blocks": e["shared_read_blocks"],
                "rows": e["plan"]["Plan"].get("Actual Rows"), "uses_hnsw": HNSW_INDEX in e["indexes"]}

    def figures(self, user: User, settings: dict[str, Any], answers: list[list[tuple]],
                exact: list[list[tuple]], timing: dict[str, Any]) -> dict[str, Any]:
        """One variant's entry: its settings, timing, recall@k against ``exact`` and plan."""
        recalls = [_recall_at_k(e, g, self.k) for e, g in zip(exact, answers, strict=True)]
        return {"settings": settings, **timing,
                "recall_at_k": round(sum(recalls) / len(recalls), 4), "min_recall_at_k": min(recalls),
                "queries_with_k_rows": sum(1 for a in answers if len(a) == self.k),
                "mean_rows": sum(map(len, answers)) / len(answers), "plan": self.plan_of(user)}


def hnsw_compare(dsn: str, subjects: list[User], embedder: HashEmbedder, args: argparse.Namespace) -> dict[str, Any]:
    """The same top-k query on one user's vectors: an exact scan (the message_embeddings primary
    key + top-N sort, no HNSW index), then with an HNSW index on (embedding::vector(384)) under
    iterative_scan off / relaxed_order / strict_order and several ef_search: latency and recall@k
    against the exact answer. The index exists only during this comparison."""
    qvecs = _query_vectors(embedder, args)
    result: dict[str, Any] = {"k": args.hnsw_k, "queries": len(qvecs), "iterations": args.hnsw_iterations,
                              "index": None, "subjects": {}}
    with pymem.connect(dsn) as conn:
        conn.execute("SET statement_timeout = 0")
        conn.execute(f"DROP INDEX IF EXISTS pymem.{HNSW_INDEX}")
        cmp = _Comparison(conn, embedder, qvecs, args)
        exact = _exact(cmp, subjects, result)
        result["index"] = _build_index(conn, embedder, args)
        try:
            conn.execute("ANALYZE pymem.message_embeddings")
            for user in subjects:
                # what the planner does with the index present and default settings
                conn.execute("RESET ALL")
                conn.execute("SET statement_timeout = 0")
                result["subjects"][user.user_id]["planner_default"] = cmp.plan_of(user)
            for name, settings in _variants(args):
                _use(conn, settings)
                for user in subjects:
                    common.progress(f"HNSW comparison, {user.user_id}: {name} ({cmp.warm} warm-up + {cmp.iters} timed)")
                    timing, answers = cmp.run(user)
                    v = cmp.figures(user, settings, answers, exact[user.user_id], timing)
                    result["subjects"][user.user_id]["variants"][name] = v
                    common.progress(f"  p50 {v['p50_ms']:.3f} ms, recall@{cmp.k} {v['recall_at_k']:.3f}, "
                                    f"{v['queries_with_k_rows']}/{len(qvecs)} queries with {cmp.k} rows")
        finally:
            conn.execute("RESET ALL")
            conn.execute(f"DROP INDEX IF EXISTS pymem.{HNSW_INDEX}")
            common.progress("HNSW index dropped")
    return result


def _query_vectors(embedder: HashEmbedder, args: argparse.Namespace) -> list[Vector]:
    """``--hnsw-queries`` distinct queries: the probe's questions, reworded with a topic word when
    repeated."""
    qtexts = (PROBE_QUERIES * (args.hnsw_queries // len(PROBE_QUERIES) + 1))[: args.hnsw_queries]
    rng = random.Random(args.seed)
    qtexts = [t if i < len(PROBE_QUERIES) else f"{t} {rng.choice(CITIES + INGREDIENTS + TABLES)}"
              for i, t in enumerate(qtexts)]
    return [Vector(v) for v in embedder.embed(qtexts)]


def _exact(cmp: _Comparison, subjects: list[User], result: dict[str, Any]) -> dict[str, list[list[tuple]]]:
    """The exact scan of each subject (before the index exists): its entry in ``result`` and its
    answers, the reference of every variant's recall."""
    exact: dict[str, list[list[tuple]]] = {}
    for user in subjects:
        common.progress(f"HNSW comparison, {user.user_id}: exact scan ({cmp.warm} warm-up + {cmp.iters} timed)")
        timing, answers = cmp.run(user)
        exact[user.user_id] = answers
        full = sum(1 for a in answers if len(a) == cmp.k)
        result["subjects"][user.user_id] = {
            "project_id": user.project_id, "vectors": user.messages,
            "variants": {"exact": {"settings": {"index": "primary key, no HNSW index"}, **timing,
                                   "recall_at_k": 1.0, "min_recall_at_k": 1.0,
                                   "queries_with_k_rows": full, "mean_rows": sum(map(len, answers)) / len(answers),
                                   "plan": cmp.plan_of(user)}}}
    return exact


def _build_index(conn: psycopg.Connection, embedder: HashEmbedder, args: argparse.Namespace) -> dict[str, Any]:
    """CREATE INDEX ... USING hnsw over every vector of pymem.message_embeddings: its definition,
    build time, size and the server's notices."""
    common.progress("building the HNSW index (every vector of pymem.message_embeddings)")
    conn.execute(f"SET maintenance_work_mem = {sql.Literal(args.hnsw_maintenance_work_mem).as_string(conn)}")
    conn.execute(f"SET max_parallel_maintenance_workers = {int(args.hnsw_workers)}")
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    t0 = time.perf_counter_ns()
    conn.execute(
        f"CREATE INDEX {HNSW_INDEX} ON pymem.message_embeddings USING hnsw "
        f"((embedding::vector({embedder.dimension})) vector_cosine_ops) "
        f"WITH (m = {int(args.hnsw_m)}, ef_construction = {int(args.hnsw_ef_construction)})")
    build_s = (time.perf_counter_ns() - t0) / 1e9
    size = conn.execute("SELECT pg_relation_size(%s::regclass)", (f"pymem.{HNSW_INDEX}",)).fetchone()[0]
    conn.execute("RESET maintenance_work_mem")
    conn.execute("RESET max_parallel_maintenance_workers")
    index = {
        "definition": conn.execute("SELECT pg_get_indexdef(%s::regclass)", (f"pymem.{HNSW_INDEX}",)).fetchone()[0],
        "build_seconds": round(build_s, 2), "bytes": size, "maintenance_work_mem": args.hnsw_maintenance_work_mem,
        "parallel_workers": args.hnsw_workers, "notices": notices}
    common.progress(f"HNSW index built in {build_s:.1f}s ({size / 2**20:,.0f} MiB)")
    return index


def _variants(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """The HNSW settings compared, by name: iterative scan off / relaxed / strict at each
    ``--hnsw-ef``, and relaxed at the first with max_scan_tuples raised to 200,000."""
    variants: list[tuple[str, dict[str, Any]]] = []
    for ef in args.hnsw_ef:
        variants.append((f"hnsw_off_ef{ef}", {"hnsw.iterative_scan": "off", "hnsw.ef_search": ef}))
    for mode in ("relaxed_order", "strict_order"):
        for ef in args.hnsw_ef:
            variants.append((f"hnsw_{mode.split('_')[0]}_ef{ef}",
                             {"hnsw.iterative_scan": mode, "hnsw.ef_search": ef}))
    variants.append((f"hnsw_relaxed_ef{args.hnsw_ef[0]}_max_scan_200k",
                     {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": args.hnsw_ef[0],
                      "hnsw.max_scan_tuples": 200_000}))
    return variants


def _use(conn: psycopg.Connection, settings: dict[str, Any]) -> None:
    """A variant's settings on a reset session, with Sorts off so that the HNSW scan wins."""
    conn.execute("RESET ALL")
    conn.execute("SET statement_timeout = 0")
    conn.execute("SET enable_sort = off")  # the exact plan needs a Sort: this makes the HNSW scan win
    for key, value in settings.items():
        shown = sql.Literal(value).as_string(conn) if isinstance(value, str) else int(value)
        conn.execute(f"SET {key} = {shown}")
