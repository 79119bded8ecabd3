"""Keyed-store benchmark: write and read latency of path-addressed entries on a table of many
stores and entries, beside a prepared ``SELECT 1`` floor.

    PYMEM_DATA_DIR=/tmp/bench-data python bench/stores.py --stores 10000 --entries 20

Generation is set-based (INSERT ... SELECT per chunk of stores, with its audit rows). Measurements go through
``pymem.MemoryStore`` on one pooled connection: write_text (audit on), write_text with
expected_sha, write_json with versions kept, read_text, get_meta, list_paths, and saving a
two-message transcript append. Results: JSON under bench/results/ and a table on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem
from bench import common


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn", help="connection string (default: PYMEM_DSN, else the embedded server)")
    p.add_argument("--stores", type=int, default=10_000, help="stores to generate")
    p.add_argument("--entries", type=int, default=20, help="entries per generated store")
    p.add_argument("--chunk-entries", type=int, default=500_000, help="entries per generation statement")
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--fresh", action="store_true", help="drop every bench store first")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--results-dir", help="where to write the JSON result (default bench/results)")
    args = p.parse_args(argv)
    for name in ("stores", "entries", "chunk_entries", "iterations"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    return args


# One chunk of stores lo..hi: the stores, their entries, and an audit row per entry written.
GENERATE = [
    """INSERT INTO pymem.stores (project_id, store_key, keep_versions)
       SELECT 'bench', 'store-' || g, g %% 10 = 0 FROM generate_series(%(lo)s::int, %(hi)s) AS g
       ON CONFLICT DO NOTHING""",
    """WITH written AS (
           INSERT INTO pymem.store_entries (project_id, store_key, path, kind, content, sha, size, version, actor)
           SELECT 'bench', 'store-' || s, 'notes/entry-' || e || '.md', 'text', c, pymem._store_sha(c),
                  octet_length(c), 1, 'generator'
             FROM generate_series(%(lo)s::int, %(hi)s) AS s, generate_series(1, %(entries)s) AS e,
                  LATERAL (SELECT repeat('note ' || s || '/' || e || ' ', 20) AS c) AS x
           ON CONFLICT DO NOTHING
           RETURNING project_id, store_key, path, sha, actor)
       INSERT INTO pymem.store_audit (project_id, store_key, path, op, new_sha, actor)
       SELECT project_id, store_key, path, 'write', sha, actor FROM written""",
]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.set_quiet(args.quiet)
    dsn, where = common.connection_info(args.dsn)
    pymem.migrate(dsn)
    result: dict[str, Any] = {"benchmark": "stores", "command": common.command_line("bench/stores.py", argv),
                              "started_at": datetime.now(UTC).isoformat(), "connection": where,
                              "config": {k: v for k, v in vars(args).items() if k != "dsn"}}
    with pymem.connect(dsn) as conn:
        result["environment"] = common.environment(conn)
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET statement_timeout = 0")  # bulk work; measurements run with the defaults
        if args.fresh:
            common.progress("dropping the bench stores")
            conn.execute("SELECT pymem.store_drop('*', 'bench')")
        t0 = time.perf_counter()
        chunk = max(1, args.chunk_entries // args.entries)
        for lo in range(1, args.stores + 1, chunk):
            hi = min(args.stores, lo + chunk - 1)
            for sql in GENERATE:
                conn.execute(sql, {"lo": lo, "hi": hi, "entries": args.entries})
            common.progress(f"generated {hi:,}/{args.stores:,} stores ({hi * args.entries:,} entries, "
                            f"{time.perf_counter() - t0:.1f}s)")
        conn.execute("VACUUM ANALYZE pymem.stores, pymem.store_entries, pymem.store_audit")
        conn.execute("RESET synchronous_commit")
        conn.execute("RESET statement_timeout")
        seconds = time.perf_counter() - t0
        entries = conn.execute("SELECT count(*) FROM pymem.store_entries").fetchone()[0]
        result["generation"] = {"stores": args.stores, "entries_total": entries, "seconds": round(seconds, 2)}
        common.progress(f"{entries:,} entries in the table ({seconds:.1f}s to generate)")
        it, wu = args.iterations, args.warmup
        meas: dict[str, Any] = {"floor": common.floor(conn, it, wu)}
        settings = pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1)
        with pymem.Database(settings, migrate=False) as db:
            store = pymem.MemoryStore.get_or_create("bench-probe", project_id="bench", db=db, actor="bench")
            versioned = pymem.MemoryStore.get_or_create("bench-versioned", project_id="bench", db=db,
                                                        keep_versions=True)
            store.write_text("notes/probe.md", "start")
            meas["write_text"] = common.measure(lambda i: store.write_text("notes/probe.md", f"content {i}"), it, wu)
            shas = {"sha": store.current_sha("notes/probe.md")}

            def guarded(i: int) -> None:
                shas["sha"] = store.write_text("notes/probe.md", f"guarded {i}", expected_sha=shas["sha"])

            meas["write_expected_sha"] = common.measure(guarded, it, wu)
            meas["write_json_versions"] = common.measure(
                lambda i: versioned.write_json("state.json", {"i": i, "items": list(range(20))}), it, wu)
            meas["read_text"] = common.measure(lambda i: store.read_text("notes/probe.md"), it, wu)
            meas["get_meta"] = common.measure(lambda i: store.get_meta("notes/probe.md"), it, wu)
            other = pymem.MemoryStore.get_or_create("store-1", project_id="bench", db=db)
            meas["list_paths"] = common.measure(lambda i: other.list_paths("notes/"), it, wu)

            def turn(i: int) -> None:
                store.append_run([{"role": "user", "content": f"question {i}"},
                                  {"role": "assistant", "content": f"answer {i}"}])

            meas["transcript_append"] = common.measure(turn, it, wu)
        meas["floor_end"] = common.floor(conn, it, wu)
    result["measurements"] = common.strip_samples(meas)
    result["finished_at"] = datetime.now(UTC).isoformat()
    path = common.write_result("stores", result, args.results_dir)
    if not args.quiet:
        print(common.format_table(result["measurements"]))
        print(f"\nresult: {path}")
    result["result_path"] = str(path)
    return result


if __name__ == "__main__":
    main()
