"""Concurrent turn writes: N client threads, each on its own connection and writing
``turn_record`` calls (precomputed vectors) for a user of its own; throughput and latency per N.
The users are forgotten afterwards."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from pgvector import Vector

import pymem
from bench import common
from pymem.embedders import HashEmbedder
from pymem.queries import Q

from .config import TURNS_PER_THREAD
from .turns import turn_record_params, turn_vectors


@dataclass(frozen=True)
class _Load:
    """What every client thread writes: ``warmup`` untimed turns, then ``turns`` timed ones."""

    project: str
    turns: int
    warmup: int
    embedder: str
    vectors: list[tuple[Vector, Vector]]


def concurrency(dsn: str, project: str, token: str, levels: list[int], turns: int, warmup: int) -> dict[str, Any]:
    """``turns`` turn_record calls (precomputed vectors) by each of N client threads, each on its
    own connection, writing to a user of its own (a new thread every TURNS_PER_THREAD turns);
    throughput = all turns / wall time."""
    real = HashEmbedder()
    load = _Load(project, turns, warmup, real.name, turn_vectors(real))
    out: dict[str, Any] = {}
    for level in levels:
        users = [f"bench-conc-{token}-{level}-{t}" for t in range(level)]
        conns = [pymem.connect(dsn) for _ in range(level)]
        merged, wall, errors = _run_threads(conns, users, load)
        try:
            if errors:
                raise errors[0]
            r = common.summarize(merged, wall, warmup=warmup)
            r["threads"] = level
            r["turns_per_thread"] = turns
            r["messages_per_s"] = round(2 * r["throughput_per_s"], 1)
            out[str(level)] = r
            common.progress(f"  {level} writer(s): {r['throughput_per_s']:,.0f} turns/s, p50 {r['p50_ms']:.3f} ms, "
                            f"p99 {r['p99_ms']:.3f} ms")
        finally:
            for c, u in zip(conns, users, strict=True):
                c.execute(Q["conversation_forget"], {"user_id": u, "thread_id": "*", "project_id": project})
                c.close()
    return out


def _run_threads(conns: list[psycopg.Connection], users: list[str],
                 load: _Load) -> tuple[list[int], int, list[BaseException]]:
    """One client thread per connection, timed together (a barrier after their warm-up): every
    sample (ns), the wall time (ns) and the threads' errors."""
    level = len(conns)
    samples: list[list[int]] = [[] for _ in range(level)]
    errors: list[BaseException] = []
    start = threading.Barrier(level + 1)
    threads = [threading.Thread(target=_writer, args=(conns[t], users[t], load, start, samples[t], errors),
                                daemon=True) for t in range(level)]
    for th in threads:
        th.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass
    wall0 = time.perf_counter_ns()
    for th in threads:
        th.join()
    wall = time.perf_counter_ns() - wall0
    return [s for per in samples for s in per], wall, errors


def _writer(conn: psycopg.Connection, user: str, load: _Load, start: threading.Barrier, mine: list[int],
            errors: list[BaseException]) -> None:
    """One client thread: its warm-up, the barrier, then ``load.turns`` timed turns into ``mine``."""
    try:
        cur = conn.cursor()

        def params(i: int) -> dict[str, Any]:
            where = {"user_id": user, "thread_id": f"t{(i + load.warmup) // TURNS_PER_THREAD}",
                     "project_id": load.project}
            return turn_record_params(where, i, load.vectors, load.embedder)

        for i in range(load.warmup):
            cur.execute(Q["turn_record"], params(i)).fetchall()
        start.wait()
        clock = time.perf_counter_ns
        for i in range(load.turns):
            p = params(i)
            t0 = clock()
            cur.execute(Q["turn_record"], p).fetchall()
            mine.append(clock() - t0)
    except BaseException as exc:  # reported after the join
        errors.append(exc)
        start.abort()
