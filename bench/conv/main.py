"""The run, step by step (the docstring of bench/conversations.py lists the steps): connect and
migrate, generate, check, choose the users, record the plans, measure, compare with HNSW, print
and write the JSON. ``main(argv)`` returns the same dict."""

from __future__ import annotations

import argparse
import secrets
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import psycopg
from pgvector import Vector
from psycopg import sql

import pymem
from bench import common
from pymem.embedders import HashEmbedder

from .args import parse_args
from .concurrency import concurrency
from .config import DIM, PROBE_ID, PROBE_PROJECT, User
from .dataset import choose_heavy, choose_light, dataset, user_counts
from .generate import generate_facts, generate_messages, table_rows
from .hnsw import HNSW_INDEX, hnsw_compare
from .integrity import integrity
from .measure import catch_up, measurements
from .plans import plans
from .report import print_report
from .texts import PROBE_QUERIES


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.set_quiet(args.quiet)
    started = datetime.now(UTC)
    dsn, where = common.connection_info(args.dsn)
    common.progress(f"database: {where}")
    pymem.migrate(dsn)
    embedder = HashEmbedder(DIM)
    token = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + "-" + secrets.token_hex(3)
    result: dict[str, Any] = {
        "benchmark": "conversations",
        "command": common.command_line("bench/conversations.py", argv),
        "started_at": started.isoformat(),
        "connection": where,
        "git_revision": common.git_revision(),
        "config": {k: v for k, v in vars(args).items() if k not in ("dsn",)},
    }
    with pymem.connect(dsn) as conn:
        result["environment"] = common.environment(conn)
        _generate(conn, args, embedder, result)
        probe, light, heavy, before = _users(conn, args, embedder, result)
        meas = _measure(conn, dsn, (probe, light, heavy), embedder, args, token, result)
        after = user_counts(conn, probe, embedder.name)
    misses = meas.pop("_cheap_embedder_misses")
    if skipped := meas.pop("_not_collected"):
        result["not_collected"] = skipped
    result["probe"] = {**asdict(probe), "before": before, "after": after}
    result["precomputed_embedder_misses"] = misses["misses"]
    result["measurements"] = meas if args.samples else common.strip_samples(meas)
    result["finished_at"] = datetime.now(UTC).isoformat()
    print_report(result)
    return common.finish("conversations", result, write=not args.no_write, results_dir=args.results_dir, where=where)


def _generate(conn: psycopg.Connection, args: argparse.Namespace, embedder: HashEmbedder,
              result: dict[str, Any]) -> None:
    """The generating session's settings; ``--fresh``; the facts and messages unless
    ``--skip-generate``; then what the tables hold and (unless ``--no-verify``) their integrity."""
    conn.execute("SET synchronous_commit = off")
    conn.execute("SET statement_timeout = 0")
    conn.execute(f"SET work_mem = {sql.Literal(args.work_mem).as_string(conn)}")
    conn.execute(f"DROP INDEX IF EXISTS pymem.{HNSW_INDEX}")  # left over by an interrupted run
    if args.fresh and not args.skip_generate:
        common.progress("truncating the conversation and fact tables")
        # CASCADE: and the tables that reference these (the lexical indexes, ...)
        conn.execute("TRUNCATE pymem.message_embeddings, pymem.message_lexemes, pymem.messages, pymem.threads, "
                     "pymem.fact_embeddings, pymem.facts RESTART IDENTITY CASCADE")
    if not args.skip_generate:
        present = [t for t, has in table_rows(conn).items() if has]
        if present:
            raise SystemExit(f"pymem.{', pymem.'.join(present)} already hold rows: pass --fresh (which deletes "
                             "them) or --skip-generate")
        t0 = time.perf_counter_ns()
        gen_facts = generate_facts(conn, args, embedder)
        common.progress(f"generating {args.messages:,} messages for {args.users:,} user ids")
        gen_messages = generate_messages(conn, args, embedder)
        total = (time.perf_counter_ns() - t0) / 1e9
        result["generation"] = {"facts": gen_facts, "messages": gen_messages, "total_seconds": round(total, 2)}
        common.progress(f"generation: {gen_messages['messages']:,} messages in {gen_messages['seconds']:.1f}s, "
                        f"{gen_facts['rows']:,} facts in {gen_facts['seconds']:.1f}s; {total:.1f}s in all")
    common.progress("collecting dataset statistics")
    result["dataset"] = dataset(conn)
    if not args.no_verify:
        common.progress("checking integrity (every CHECK, last_seq, copied columns, vectors, embedded_by)")
        result["integrity"] = integrity(conn, embedder.name, embedder.dimension)
        common.progress(f"integrity ok: {result['integrity']['ok']}")


def _users(conn: psycopg.Connection, args: argparse.Namespace, embedder: HashEmbedder,
           result: dict[str, Any]) -> tuple[User, User | None, User | None, dict[str, Any]]:
    """The probe (checked: it has the messages generated for it), the light and the heaviest
    user, and the probe's counts before the measurements; the session's settings reset."""
    probe = User(PROBE_PROJECT, PROBE_ID)
    before = user_counts(conn, probe, embedder.name)
    if before["messages"] == 0:
        raise SystemExit("the probe user has no messages: generate them first (drop --skip-generate)")
    if not args.skip_generate and before["messages"] != args.probe_messages:
        raise SystemExit(f"the probe user has {before['messages']} messages, not {args.probe_messages}")
    probe = User(PROBE_PROJECT, PROBE_ID, before["messages"])
    light = choose_light(conn)  # both GROUP BY every message: still without a statement timeout
    heavy = choose_heavy(conn)
    conn.execute("RESET work_mem")
    conn.execute("RESET synchronous_commit")
    conn.execute("RESET statement_timeout")
    result["light_user"] = {**asdict(light), **user_counts(conn, light, embedder.name)} if light else None
    result["heavy_user"] = {**asdict(heavy), **user_counts(conn, heavy, embedder.name)} if heavy else None
    common.progress(f"probe {before['messages']:,} messages; light user {light and light.user_id} "
                    f"({light and light.messages} messages); heaviest {heavy and heavy.user_id} "
                    f"({heavy and heavy.messages:,} messages)")
    return probe, light, heavy, before


def _measure(conn: psycopg.Connection, dsn: str, users: tuple[User, User | None, User | None],
             embedder: HashEmbedder, args: argparse.Namespace, token: str,
             result: dict[str, Any]) -> dict[str, Any]:
    """The heaviest user's catch-up, the plans, the measurements, the concurrent turn writes, the
    HNSW comparison and the floor at the end. Returns the measurements."""
    probe, light, heavy = users
    settings = pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1)
    with pymem.Database(settings, migrate=False) as db:
        if heavy is not None:
            reads = catch_up(db, heavy)
            result["heavy_user"]["catch_up_reads"] = reads
            if reads:
                result["heavy_user"]["after_catch_up"] = user_counts(conn, heavy, embedder.name)
                common.progress(f"heaviest user: {reads} catch-up read(s) embedded its messages without a vector")
        common.progress("EXPLAIN of context_read and of the statements inside it")
        qvec = Vector(embedder.embed([PROBE_QUERIES[0]])[0])
        result["explain"] = plans(conn, dsn, probe, heavy, embedder, qvec)
        meas = measurements(conn, db, probe, light, heavy, args, token)
    result["turn_growth"] = meas.pop("_turn_growth")
    common.progress(f"concurrent turn writes: {args.concurrency} client threads x {args.concurrency_turns} turns")
    result["concurrency"] = concurrency(dsn, PROBE_PROJECT, token, args.concurrency, args.concurrency_turns,
                                        min(args.warmup, 20))
    if not args.no_hnsw:
        subjects = [probe] + ([heavy] if heavy is not None else [])
        result["hnsw"] = hnsw_compare(dsn, subjects, embedder, args)
    common.progress(f"measuring floor_end ({args.warmup} warm-up + {args.iterations} timed)")
    meas["floor_end"] = common.floor(conn, args.iterations, args.warmup)
    return meas
