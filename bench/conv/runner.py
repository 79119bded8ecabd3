"""What every timed measurement shares (:class:`Runner`), and the embedder that takes the
embedding out of Memory's cost (:class:`PrecomputedEmbedder`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import psycopg
from pgvector import Vector
from psycopg.rows import dict_row

import pymem
from bench import common
from pymem.embedders import HashEmbedder
from pymem.queries import Q

from .config import AGENT_ID, HEAVY_WARMUP, User, context_params, recall_params
from .texts import PROBE_QUERIES, TURNS


class PrecomputedEmbedder:
    """HashEmbedder's name and dimension, vectors looked up in a table filled beforehand: what
    Memory costs with the embedding taken out. A text not in the table is embedded for real
    (counted in ``misses``)."""

    def __init__(self, real: HashEmbedder, texts: list[str]) -> None:
        self.name = real.name
        self.dimension = real.dimension
        self._real = real
        self._table = dict(zip(texts, real.embed(texts), strict=True))
        self.misses = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for t in texts:
            v = self._table.get(t)
            if v is None:
                self.misses += 1
                v = self._real.embed([t])[0]
            out.append(v)
        return out


class Runner:
    """What the measurements share: the connection and its cursor, the iteration counts, the
    embedders and Memory objects, the query vectors, and ``out`` (the results by name)."""

    def __init__(self, conn: psycopg.Connection, db: pymem.Database, probe: User, args: argparse.Namespace) -> None:
        self.conn, self.db = conn, db
        self.citus = common.is_citus(conn)
        self.skipped: dict[str, str] = {}  # measurements not taken on Citus, with the reason
        self.n, self.w = args.iterations, args.warmup
        self.hw = min(self.w, HEAVY_WARMUP)  # the heaviest user's measurements
        self.heavy_n = min(self.n, args.heavy_iterations)
        self.real = HashEmbedder()
        self.queries = PROBE_QUERIES
        self.qvecs = [Vector(v) for v in self.real.embed(self.queries)]
        turn_texts = [t for pair in TURNS for t in pair]
        self.cheap = PrecomputedEmbedder(self.real, self.queries + turn_texts)
        self.mem_cheap = pymem.Memory(agent_id=AGENT_ID, project_id=probe.project_id, embedder=self.cheap, db=db)
        self.mem_hash = pymem.Memory(agent_id=AGENT_ID, project_id=probe.project_id, embedder=self.real, db=db)
        # hybrid recall off (lexical weight 0: the text is not read): what hybrid costs over the vector
        self.mem_vector = pymem.Memory(agent_id=AGENT_ID, project_id=probe.project_id, embedder=self.cheap, db=db,
                                       lexical_weight=0, fact_lexical_weight=0)
        self.out: dict[str, dict[str, Any]] = {}
        self.cur = conn.cursor(row_factory=dict_row)

    def run(self, name: str, fn: Callable[[int], Any], iterations: int | None = None,
            warmup: int | None = None) -> None:
        n = self.n if iterations is None else iterations
        wu = self.w if warmup is None else warmup
        common.progress(f"measuring {name} ({wu} warm-up + {n} timed)")
        self.out[name] = common.measure(fn, n, wu)
        r = self.out[name]
        common.progress(f"  {name}: p50 {r['p50_ms']:.3f} ms, p95 {r['p95_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms")

    def query(self, i: int) -> str:
        return self.queries[i % len(self.queries)]

    def ctx_sql(self, user: User) -> Callable[[int], Any]:
        def once(i: int) -> Any:
            params = context_params(user, self.qvecs[i % len(self.qvecs)], self.real.name, self.query(i))
            return self.cur.execute(Q["context_read"], params).fetchall()
        return once

    def recall(self, user: User, **over: Any) -> Callable[[int], Any]:
        def once(i: int) -> Any:
            params = recall_params(user, self.qvecs[i % len(self.qvecs)], self.real.name, self.query(i), **over)
            return self.cur.execute(Q["messages_recall"], params).fetchall()
        return once
