"""The timed measurements, in order: the floors, ``context()`` (SQL, Memory, its parts) for the
probe, a light and the heaviest user, recall alone, then the turn writes (turns.py); and
Memory's catch-up that embeds the heaviest user's messages first."""

from __future__ import annotations

import argparse
from typing import Any

import psycopg
from pgvector import Vector
from psycopg.rows import dict_row

import pymem
from bench import common
from pymem.embedders import HashEmbedder
from pymem.queries import Q

from .config import (
    AGENT_FACTS,
    AGENT_ID,
    DEFAULTS,
    DIM,
    MAX_FACTS,
    MIN_CHARS,
    PROBE_FACTS,
    RECALL_K,
    WEIGHTED,
    WINDOW,
    User,
    context_params,
)
from .runner import Runner
from .texts import PROBE_QUERIES
from .turns import turn_writes


def measurements(conn: psycopg.Connection, db: pymem.Database, probe: User, light: User | None,
                 heavy: User | None, args: argparse.Namespace, token: str) -> dict[str, dict[str, Any]]:
    r = Runner(conn, db, probe, args)
    _floors(r)
    _context_probe(r, probe)
    _context_parts(r, probe)
    _context_others(r, light, heavy)
    _recall(r, probe, heavy)
    turn_writes(r, probe, heavy, args, token)
    r.out["_cheap_embedder_misses"] = {"misses": r.cheap.misses}
    r.out["_not_collected"] = r.skipped
    return r.out


def _floors(r: Runner) -> None:
    common.progress(f"measuring floor ({r.w} warm-up + {r.n} timed)")
    r.out["floor"] = common.floor(r.conn, r.n, r.w)
    commit = common.commit_floor(r.conn, r.n, r.w)
    if commit is not None:
        r.out["floor_commit"] = commit

    def pool_select1(i: int) -> None:
        with r.db.connection() as c:
            c.execute("SELECT 1", prepare=True).fetchone()

    r.run("floor_pool", pool_select1)


def _context_probe(r: Runner, probe: User) -> None:
    """context() for the probe: SQL, Memory (precomputed and real query vectors), and SQL under
    generic and custom plans."""
    first = r.ctx_sql(probe)(0)[0]["context"]
    assert len(first["user_facts"]) == min(MAX_FACTS, PROBE_FACTS), len(first["user_facts"])
    assert len(first["agent_facts"]) == AGENT_FACTS and len(first["window"]) == WINDOW
    assert first["unembedded"] == [] and len(first["recalled"]) + first["deduped"] >= RECALL_K - first["deduped"]
    r.run("context_embed_query", lambda i: r.real.embed([r.query(i)]))
    r.run("context_sql", r.ctx_sql(probe))
    got = r.mem_cheap.read(r.queries[0], user=probe.user_id)
    assert got.recalled and len(got.user_facts) == min(MAX_FACTS, PROBE_FACTS) and len(got.window) == WINDOW
    r.run("context_memory", lambda i: r.mem_cheap.context(r.query(i), user=probe.user_id))
    r.run("context_memory_hash", lambda i: r.mem_hash.context(r.query(i), user=probe.user_id))
    r.run("context_memory_vector", lambda i: r.mem_vector.context(r.query(i), user=probe.user_id))
    for mode in ("force_generic_plan", "force_custom_plan"):
        if r.citus:  # Citus delegates a call it can plan for one key; a generic plan of it is not delegated
            r.skipped[f"context_sql_{mode.removeprefix('force_').removesuffix('_plan')}"] = (
                f"not collected on Citus: under plan_cache_mode = {mode} the coordinator does not delegate the "
                "call to the user's worker, and pymem refuses it (a query reached a Citus worker without "
                "its tenant)")
            continue
        r.conn.execute(f"SET plan_cache_mode = {mode}")
        try:
            r.run(f"context_sql_{mode.removeprefix('force_').removesuffix('_plan')}", r.ctx_sql(probe))
        finally:
            r.conn.execute("RESET plan_cache_mode")


def _context_parts(r: Runner, probe: User) -> None:
    """What context_read is made of, each part as its own statement (one round trip each)."""
    cur = r.cur
    newest = {"scope": "user", "scope_id": probe.user_id, "project_id": probe.project_id, "max_facts": MAX_FACTS}
    r.run("part_user_facts", lambda i: cur.execute(Q["facts_newest"], newest).fetchall())
    agent = newest | {"scope": "agent", "scope_id": AGENT_ID}
    r.run("part_agent_facts", lambda i: cur.execute(Q["facts_newest"], agent).fetchall())
    r.run("part_summary", lambda i: cur.execute(Q["summary_read"], probe.where()).fetchall())
    window = probe.where() | {"max_messages": WINDOW}
    r.run("part_window", lambda i: cur.execute(Q["window_read"], window).fetchall())
    ranked = ("SELECT * FROM pymem._recall_ranked(%(project_id)s, %(user_id)s, %(thread_id)s, %(query)s, "
              "%(embedder)s, %(text)s, pymem.recall(k => %(limit)s, min_content_chars => %(min_chars)s, "
              "window_size => %(window)s, lexical_weight => %(lw)s))")
    r.run("part_recall_ranked", lambda i: cur.execute(ranked, probe.where() | {
        "query": r.qvecs[i % len(r.qvecs)], "embedder": r.real.name, "text": r.query(i), "limit": RECALL_K + 20,
        "min_chars": MIN_CHARS, "window": WINDOW, "lw": DEFAULTS.recall.lexical_weight}).fetchall())
    unemb = ("SELECT * FROM pymem._messages_unembedded(%(project_id)s, %(user_id)s, %(embedder)s, %(min_chars)s, "
             "%(limit)s)")
    r.run("part_unembedded", lambda i: cur.execute(unemb, {
        "project_id": probe.project_id, "user_id": probe.user_id, "embedder": r.real.name, "min_chars": MIN_CHARS,
        "limit": 1000}).fetchall())


def _context_others(r: Runner, light: User | None, heavy: User | None) -> None:
    """context() for a light user and for the heaviest one."""
    if light is not None:
        first = r.ctx_sql(light)(0)[0]["context"]
        assert first["unembedded"] == [], "the light user must have every message embedded"
        r.run("context_sql_light_user", r.ctx_sql(light))
        r.run("context_memory_light_user", lambda i: r.mem_cheap.context(r.query(i), user=light.user_id))
    if heavy is not None:
        assert not r.ctx_sql(heavy)(0)[0]["context"]["unembedded"], "catch_up() first"
        mem_heavy = pymem.Memory(agent_id=AGENT_ID, project_id=heavy.project_id, embedder=r.cheap, db=r.db)
        r.run("context_sql_heavy_user", r.ctx_sql(heavy), r.heavy_n, r.hw)
        r.run("context_memory_heavy_user", lambda i: mem_heavy.read(r.query(i), user=heavy.user_id),
              r.heavy_n, r.hw)


def _recall(r: Runner, probe: User, heavy: User | None) -> None:
    """messages_recall alone: plain, weighted, and for the heaviest user."""
    assert len(r.recall(probe)(0)) == RECALL_K
    r.run("recall_sql", r.recall(probe))
    assert len(r.recall(probe, **WEIGHTED)(0)) == RECALL_K
    r.run("recall_sql_weighted", r.recall(probe, **WEIGHTED))
    if heavy is not None:
        r.run("recall_sql_heavy_user", r.recall(heavy), r.heavy_n, r.hw)


def catch_up(db: pymem.Database, user: User) -> int:
    """Memory's catch-up for a user with messages that have no vector (``--unembedded``):
    HashEmbedder vectors for them (up to 1000 per read), so that every measured read of that
    user is complete. Returns the number of reads that embedded something."""
    embedder = HashEmbedder(DIM)
    mem = pymem.Memory(agent_id=AGENT_ID, project_id=user.project_id, embedder=embedder, db=db)
    probe_vec = Vector(embedder.embed([PROBE_QUERIES[0]])[0])
    reads = 0
    for _ in range(50):
        with db.connection() as c:
            rows = c.cursor(row_factory=dict_row).execute(
                Q["context_read"], context_params(user, probe_vec, embedder.name, k=1)).fetchall()
        if not rows[0]["context"]["unembedded"]:
            break
        mem.read(PROBE_QUERIES[0], user=user.user_id)
        reads += 1
    return reads
