"""What the statement timeout costs a call, by how it reaches the server (issue 28 and the
PgBouncer fix of 2026-12-02): the three ways pymem has sent it, side by side in turns, on one
connection, for ``facts_newest`` (50 rows) and an idempotent ``fact_add`` with its vector.

    PYMEM_DATA_DIR=/tmp/bench-per-call python bench/per_call.py [--users 500] [--facts 10] [--calls 1000]

- **session**: the connection carries the timeout from its startup option; a call is one
  extended-protocol statement, prepared from its fifth execution on (the default, on a direct
  connection and behind a pooler that passes the option on);
- **pipeline**: ``set_config('statement_timeout', ..., true)`` and the call in one psycopg
  pipeline (pymem before 2026-12-02, where a pooler refused the option): its trailing Flush could
  leave PgBouncer's server connection tied to an idle client;
- **simple**: both in one simple-protocol Query message, parameters bound by the client (pymem
  since, where a pooler refused the option): nothing prepared, vectors sent as text.

Before timing, the three answer the same rows. Prints p50 per side and its ratio to "session";
nothing here asserts a duration (compare ratios within one report).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from pgvector import Vector
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from bench import common  # noqa: E402
from pymem.connection import execute  # noqa: E402
from pymem.facts import FactWrite  # noqa: E402
from pymem.queries import Q  # noqa: E402

PROJECT = "bench-per-call"


def pipelined(conn: psycopg.Connection, name: str, params: dict[str, Any], settings: pymem.Settings) -> list[dict[str, Any]]:
    """The call as pymem sent it before: set_config and the query in one psycopg pipeline."""
    cur = conn.cursor(row_factory=dict_row)
    with conn.pipeline():
        conn.execute(Q["statement_timeout"], {"ms": str(settings.statement_timeout_ms)})
        cur.execute(Q[name], params)
    return cur.fetchall()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="PostgreSQL DSN (default: PYMEM_DSN, else the embedded server)")
    ap.add_argument("--users", type=int, default=500)
    ap.add_argument("--facts", type=int, default=10, help="facts per user")
    ap.add_argument("--calls", type=int, default=1000, help="timed calls per operation and side")
    ap.add_argument("--warmup", type=int, default=50)
    args = ap.parse_args(argv)
    if args.users < 1 or args.facts < 1 or args.calls < 10 or args.warmup < 0:
        ap.error("--users and --facts must be >= 1, --calls >= 10, --warmup >= 0")
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"database: {where}")
    pymem.migrate(conninfo)
    settings = pymem.Settings(dsn=conninfo, statement_timeout_ms=30000, pool_min_size=1, pool_max_size=1)
    embedder = pymem.HashEmbedder()
    with pymem.Database(settings) as db:
        mem = pymem.Memory(agent_id="bench", db=db, embedder=embedder, project_id=PROJECT)
        common.progress(f"loading {args.users:,} users x {args.facts} facts")
        for u in range(args.users):
            for i in range(args.facts):
                mem.persist(f"fact {i} of user {u}", id=f"u{u}")
        probe = f"u{args.users // 2}"
        newest = {"scope": "user", "scope_id": probe, "project_id": PROJECT, "max_facts": 50}
        content = f"fact 0 of user {args.users // 2}"
        add = {"scope": "user", "scope_id": probe, "content": content, "project_id": PROJECT,
               "write": FactWrite().checked(), "max_learned": None,
               "embedding": Vector(embedder.embed([content])[0]), "embedder": embedder.name}
        sides = {
            "session": lambda c, n, p: execute(c, n, p, settings),
            "pipeline": lambda c, n, p: pipelined(c, n, p, settings),
            "simple": lambda c, n, p: execute(c, n, p, settings, timeout_per_call=True),
        }
        table: dict[str, dict[str, dict[str, float]]] = {}
        same: dict[str, bool] = {}
        with db.connection() as c:
            for op, name, params in (("newest 50", "facts_newest", newest), ("re-add", "fact_add", add)):
                answers = {side: f(c, name, params) for side, f in sides.items()}
                same[op] = all(a == answers["session"] for a in answers.values())
                samples: dict[str, list[float]] = {side: [] for side in sides}
                turn = max(1, args.calls // 10)
                for side, f in sides.items():
                    for _ in range(args.warmup):
                        f(c, name, params)
                for _ in range(10):
                    for side, f in sides.items():
                        for _ in range(turn):
                            t = time.perf_counter_ns()
                            f(c, name, params)
                            samples[side].append((time.perf_counter_ns() - t) / 1000)
                base = statistics.median(samples["session"])
                table[op] = {side: {"p50_us": round(statistics.median(v), 1),
                                    "ratio": round(statistics.median(v) / base, 2)} for side, v in samples.items()}
    print(f"\n{'operation':12s} " + " ".join(f"{s:>18s}" for s in sides))
    for op, row in table.items():
        print(f"{op:12s} " + " ".join(f"{row[s]['p50_us']:9.0f} us {row[s]['ratio']:5.2f}x" for s in sides))
    print(f"same rows: {same}")
    print(f"\ncommand: {common.command_line('bench/per_call.py', argv)}")
    return {"table": table, "same_rows": same}


if __name__ == "__main__":
    main()
