"""Turn writes: ``turn_record`` (SQL and through Memory) into threads of the probe, appended to the
heaviest user's longest thread, and into one growing thread (``turn_growth``); every row they
write is deleted afterwards. Also the parameters of one measured turn, shared with
concurrency.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from pgvector import Vector

from bench import common
from pymem.embedders import HashEmbedder
from pymem.queries import Q

from .config import TURNS_PER_THREAD, User
from .runner import Runner
from .texts import TURNS


def turn_vectors(embedder: HashEmbedder) -> list[tuple[Vector, Vector]]:
    """The vectors of each of TURNS' (question, answer) pairs."""
    return [(Vector(u), Vector(a)) for u, a in (embedder.embed(list(p)) for p in TURNS)]


def turn_record_params(where: dict[str, str], i: int, vectors: list[tuple[Vector, Vector]],
                       embedder: str) -> dict[str, Any]:
    """turn_record's parameters for the ``i``-th measured turn into thread ``where``: the pair
    TURNS[i] with its precomputed vectors, nothing learned, no summary due."""
    (q, a), (qv, av) = TURNS[i % len(TURNS)], vectors[i % len(TURNS)]
    return where | {
        "user_content": q, "assistant_content": a, "user_importance": 1.0, "assistant_importance": 1.0,
        "embedder": embedder, "user_embedding": qv, "assistant_embedding": av, "learned": None,
        "max_learned": 200, "keep_last": 10, "summarize_every": None, "lease_seconds": 300.0,
        "user_metadata": None, "assistant_metadata": None, "created_at": None, "fact_changes": None,
        "defer_learning": False}


def turn_writes(r: Runner, probe: User, heavy: User | None, args: argparse.Namespace, token: str) -> None:
    """To threads of the probe named bench-<token>-..., a new one every TURNS_PER_THREAD turns
    (a turn's cost grows with its thread's length, see turn_growth); deleted afterwards."""
    pair_vecs = turn_vectors(r.real)

    def thread_of(tag: str, i: int) -> str:
        return f"bench-{token}-{tag}-{(i + r.w) // TURNS_PER_THREAD}"

    def params(user: User, thread: str, i: int) -> dict[str, Any]:
        return turn_record_params(user.where(thread), i, pair_vecs, r.real.name)

    try:
        r.run("turn_embed", lambda i: r.real.embed(list(TURNS[i % len(TURNS)])))
        r.run("turn_sql", lambda i: r.cur.execute(Q["turn_record"], params(probe, thread_of("sql", i), i)).fetchall())
        r.run("turn_memory", lambda i: r.mem_hash.record(*TURNS[i % len(TURNS)], user=probe.user_id,
                                                         thread=thread_of("memory", i)))
        r.run("turn_memory_precomputed", lambda i: r.mem_cheap.record(*TURNS[i % len(TURNS)], user=probe.user_id,
                                                                      thread=thread_of("precomputed", i)))
        if heavy is not None:
            _heavy_thread(r, heavy, params)
        _growth(r, probe, args, f"bench-{token}-growth", params)
    finally:
        deleted = r.conn.execute("DELETE FROM pymem.threads WHERE project_id = %s AND user_id = %s "
                                 "AND thread_id LIKE %s RETURNING last_seq",
                                 (probe.project_id, probe.user_id, f"bench-{token}-%")).fetchall()
        common.progress(f"deleted the {len(deleted)} threads ({sum(row[0] for row in deleted):,} messages) the "
                        "measured turns wrote")


def _heavy_thread(r: Runner, heavy: User, params: Callable[[User, str, int], dict[str, Any]]) -> None:
    """Turns appended to the heaviest user's longest thread, then taken back out."""
    thread, last_seq, updated_at = r.conn.execute(
        "SELECT thread_id, last_seq, updated_at FROM pymem.threads WHERE project_id = %s AND user_id = %s "
        "ORDER BY last_seq DESC, thread_id LIMIT 1", (heavy.project_id, heavy.user_id)).fetchone()
    try:
        r.run("turn_sql_heavy_user_thread",
              lambda i: r.cur.execute(Q["turn_record"], params(heavy, thread, i)).fetchall(), r.heavy_n, r.hw)
        r.out["turn_sql_heavy_user_thread"]["thread_messages"] = last_seq
    finally:
        r.conn.execute("DELETE FROM pymem.messages WHERE project_id = %s AND user_id = %s AND thread_id = %s "
                       "AND seq > %s", (heavy.project_id, heavy.user_id, thread, last_seq))
        r.conn.execute("UPDATE pymem.threads SET last_seq = %s, updated_at = %s WHERE project_id = %s "
                       "AND user_id = %s AND thread_id = %s",
                       (last_seq, updated_at, heavy.project_id, heavy.user_id, thread))


def _growth(r: Runner, probe: User, args: argparse.Namespace, thread: str,
            params: Callable[[User, str, int], dict[str, Any]]) -> None:
    """One thread that grows: the cost of a turn against the length of its thread, per block of
    ``--growth-block`` turns (in ``out["_turn_growth"]``)."""
    common.progress(f"measuring turn_growth ({args.growth_turns} turns into one thread)")
    samples = common.measure(lambda i: r.cur.execute(Q["turn_record"], params(probe, thread, i)).fetchall(),
                             args.growth_turns, 0)["_samples_ns"]
    block = max(1, args.growth_block)
    r.out["_turn_growth"] = {"blocks": [
        {"thread_messages_before": 2 * lo, **{k: v for k, v in common.summarize(samples[lo:lo + block]).items()
                                              if k in ("iterations", "p50_ms", "p95_ms", "p99_ms", "mean_ms")}}
        for lo in range(0, len(samples), block)]}
    for b in r.out["_turn_growth"]["blocks"]:
        common.progress(f"  thread of {b['thread_messages_before']:>6,} messages: p50 {b['p50_ms']:.3f} ms, "
                        f"p99 {b['p99_ms']:.3f} ms")
