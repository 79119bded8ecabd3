"""Generation: ``--facts`` facts as bench/facts.py makes them plus the agent's, and ``--messages``
messages set-based in chunks (bench/conversations_generate.sql): skewed users, 384-d vectors,
and the probe's realistic conversation with real HashEmbedder vectors."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from pgvector import Vector

from bench import common
from bench import facts as bench_facts
from pymem.embedders import HashEmbedder
from pymem.facts import FactWrite
from pymem.queries import Q

from .config import AGENT_FACTS, AGENT_ID, POOL_SENTENCES, PROBE_ID, PROBE_PROJECT, PROJECTS, TIME_SPAN
from .texts import SHORT, pool_sentences, probe_conversation

GENERATE_SQL = Path(__file__).resolve().parent.parent / "conversations_generate.sql"

PROBE_SUMMARIES = {
    "default": "The user is preparing a PostgreSQL migration of the orders database at work, "
               "training for a marathon, learning Spanish and looking after the dog Biscuit.",
    "trips": "The user is planning trips to Kyoto and Lisbon: hotels near the old town, "
             "flights in the morning, no visa needed.",
}


def load_sections() -> dict[str, str]:
    return bench_facts.load_sections(GENERATE_SQL)


def table_rows(conn: psycopg.Connection) -> dict[str, bool]:
    return {t: conn.execute(f"SELECT EXISTS (SELECT 1 FROM pymem.{t})").fetchone()[0]
            for t in ("threads", "messages", "message_embeddings", "facts")}


def generate_facts(conn: psycopg.Connection, args: argparse.Namespace, embedder: HashEmbedder) -> dict[str, Any]:
    """``--facts`` facts as bench/facts.py makes them (the probe: 200 active + 50 superseded),
    and AGENT_FACTS facts of the agent the context reads."""
    probe = bench_facts.Subject(PROBE_PROJECT, "user", PROBE_ID)
    common.progress(f"generating {args.facts:,} facts (bench/facts_generate.sql)")
    out = bench_facts.generate(conn, args.facts, probe, seed=args.seed, chunk=args.fact_chunk)
    out.pop("params", None)
    for i in range(AGENT_FACTS):
        conn.execute(Q["fact_add"], {
            "scope": "agent", "scope_id": AGENT_ID, "project_id": PROBE_PROJECT,
            "content": f"Agent rule {i + 1}: " + ["answer in the user's language", "never share another user's data",
                                                    "prices are in euros", "support hours are 9 to 5 CET",
                                                    "refunds take up to 10 working days",
                                                    "escalate legal questions to a human"][i % 6],
            "write": FactWrite().checked(), "max_learned": 200, "embedding": None, "embedder": None}).fetchall()
    out["agent_facts"] = AGENT_FACTS
    return out


def generate_messages(conn: psycopg.Connection, args: argparse.Namespace, embedder: HashEmbedder) -> dict[str, Any]:
    """Threads, messages and vectors, one INSERT ... SELECT generate_series per chunk."""
    q = load_sections()
    conn.execute(bench_facts.load_sections()["uniform"])
    t_start = time.perf_counter_ns()
    sentences, probe_rows = _temp_tables(conn, q, args, embedder)
    prep_s = (time.perf_counter_ns() - t_start) / 1e9
    n = args.messages
    params = {
        "n": n, "t0": datetime.now(UTC), "step": TIME_SPAN / n, "seed": args.seed, "projects": PROJECTS,
        "users": args.users, "stride": n // args.probe_messages, "probe_n": args.probe_messages,
        "probe_project": PROBE_PROJECT, "probe_id": PROBE_ID, "embedder": embedder.name,
        "pool_n": len(sentences), "short_n": len(SHORT), "unembedded": args.unembedded,
    }
    chunks, totals, fk_checks, insert_s = _insert_chunks(conn, q, params, args.chunk)
    summary_s, vacuum_s, checkpoint_s = _after_load(conn, q, params)
    # the probe's messages are exactly what was planned, seq for seq
    got = conn.execute(
        "SELECT thread_id, seq, role, content FROM pymem.messages WHERE project_id = %s AND user_id = %s "
        "ORDER BY created_at, thread_id, seq", (PROBE_PROJECT, PROBE_ID)).fetchall()
    planned = [(r["thread_id"], r["seq"], r["role"], r["content"]) for r in probe_rows]
    return {
        "messages": totals["messages"],
        "embeddings": totals["embeddings"],
        "requested_messages": n,
        "prepare_seconds": round(prep_s, 2),
        "insert_seconds": round(insert_s, 2),
        "insert_messages_per_s": round(totals["messages"] / insert_s, 0),
        "summaries_seconds": round(summary_s, 2),
        "vacuum_analyze_seconds": round(vacuum_s, 2),
        "checkpoint_seconds": round(checkpoint_s, 2),
        "seconds": round(prep_s + insert_s + summary_s + vacuum_s, 2),
        "chunk_messages": args.chunk,
        "foreign_key_checks_during_load": fk_checks,
        "chunks": chunks,
        "pool_sentences": len(sentences),
        "probe_as_planned": got == planned,
        "params": {k: (str(v) if isinstance(v, (datetime, timedelta)) else v) for k, v in params.items()},
    }


def _temp_tables(conn: psycopg.Connection, q: dict[str, str], args: argparse.Namespace,
                 embedder: HashEmbedder) -> tuple[list[str], list[dict[str, Any]]]:
    """The pool (other users' sentences + short messages) and the probe's conversation, embedded
    here, in temporary tables; the embedder registered. Returns the sentences and the probe's rows."""
    conn.execute(q["pool_table"], prepare=False)
    conn.execute(q["probe_table"], prepare=False)
    sentences = pool_sentences(POOL_SENTENCES, args.seed)
    pool = sentences + SHORT
    vectors = embedder.embed(pool)
    with conn.cursor() as cur:
        cur.executemany(q["pool_insert"], [{"i": i, "content": c, "embedding": Vector(v)}
                                           for i, (c, v) in enumerate(zip(pool, vectors, strict=True))])
    probe_rows = probe_conversation(args.probe_messages, args.seed)
    probe_vectors = embedder.embed([r["content"] for r in probe_rows])
    with conn.cursor() as cur:
        cur.executemany(q["probe_insert"], [r | {"embedding": Vector(v)}
                                            for r, v in zip(probe_rows, probe_vectors, strict=True)])
    conn.execute("ANALYZE pg_temp.bench_pool")
    conn.execute("ANALYZE pg_temp.bench_probe")
    conn.execute(q["register_embedder"], {"embedder": embedder.name, "dim": embedder.dimension,
                                          "projects": sorted(set(PROJECTS) | {PROBE_PROJECT})})
    return sentences, probe_rows


def _insert_chunks(conn: psycopg.Connection, q: dict[str, str], params: dict[str, Any],
                   chunk: int) -> tuple[list[dict[str, Any]], dict[str, int], bool, float]:
    """The messages, ``chunk`` per INSERT. Returns the chunks, the totals, whether foreign keys
    were checked during the load, and the seconds it took."""
    n = params["n"]
    chunks = []
    # Foreign-key checks off for this session while loading (session_replication_role = replica,
    # superusers only), as pg_restore does: one check per inserted vector is work a bulk load
    # need not do (before 0006_v0_2_0_memory it could also read all of the user's messages
    # per vector; see bench/README.md). integrity() then checks every reference over every row.
    try:
        conn.execute("SET session_replication_role = replica")
        fk_checks = False
    except psycopg.Error:
        fk_checks = True
    t_start = time.perf_counter_ns()
    totals = {"messages": 0, "embeddings": 0}
    try:
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            t0 = time.perf_counter_ns()
            row = conn.execute(q["chunk"], params | {"lo": lo, "hi": hi}, prepare=False).fetchone()
            dt = (time.perf_counter_ns() - t0) / 1e9
            chunks.append({"lo": lo, "hi": hi, "messages": row[0], "embeddings": row[1], "threads": row[2],
                           "seconds": round(dt, 3)})
            totals["messages"] += row[0]
            totals["embeddings"] += row[1]
            done = (time.perf_counter_ns() - t_start) / 1e9
            common.progress(f"generated {hi:>10,}/{n:,} messages  (chunk {hi - lo:,} in {dt:.1f}s, "
                            f"{(hi - lo) / dt:,.0f} msg/s; total {hi / done:,.0f} msg/s)")
    finally:
        conn.execute("RESET session_replication_role")
    return chunks, totals, fk_checks, (time.perf_counter_ns() - t_start) / 1e9


def _after_load(conn: psycopg.Connection, q: dict[str, str], params: dict[str, Any]) -> tuple[float, float, float]:
    """Summaries (the probe's two threads get real ones), VACUUM ANALYZE and a CHECKPOINT.
    Returns the seconds of each."""
    t0 = time.perf_counter_ns()
    if common.is_citus(conn):
        for project in sorted(set(params["projects"]) | {params["probe_project"]}):
            config = conn.execute("SELECT pymem._text_search_config(%s)::text", (project,)).fetchone()[0]
            conn.execute(q["lexemes_citus"], {"project_id": project, "config": config})
    else:
        conn.execute(q["lexemes"])
    common.progress(f"lexical index of the loaded messages in {(time.perf_counter_ns() - t0) / 1e9:.1f}s")
    t0 = time.perf_counter_ns()
    conn.execute(q["summaries"], params)
    for thread, text in PROBE_SUMMARIES.items():
        conn.execute(q["probe_summary"], params | {"thread_id": thread, "summary": text})
    summary_s = (time.perf_counter_ns() - t0) / 1e9
    t0 = time.perf_counter_ns()
    for table in ("threads", "messages", "message_embeddings", "message_lexemes"):
        conn.execute(f"VACUUM ANALYZE pymem.{table}")
    vacuum_s = (time.perf_counter_ns() - t0) / 1e9
    common.progress(f"summaries in {summary_s:.1f}s, VACUUM ANALYZE in {vacuum_s:.1f}s")
    t0 = time.perf_counter_ns()
    try:  # write the load out now rather than during the measurements (superuser or pg_checkpoint)
        conn.execute("CHECKPOINT")
    except psycopg.Error:
        pass
    checkpoint_s = (time.perf_counter_ns() - t0) / 1e9
    return summary_s, vacuum_s, checkpoint_s
