"""What the change feed costs a write (issue 34, item 2), in one run on one server:

    PYMEM_DATA_DIR=/tmp/bench-changes python bench/changes.py [--calls 2000]

Two scratch databases with the same schema; on one, the feed is turned on
(``change_feed_configure``); the other has it off, as every database has by default. ``turn_record`` (two messages, no vectors) and ``fact_add`` run on
both in alternating rounds of ``calls / 10``: p50 per call and the ratio. Then ``changes_since``
reads the feed of the first database in pages of 1,000: changes per second (publishing included).
Nothing here asserts a duration; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

DBS = {"with_feed": "pymem_changes_bench_a", "without_feed": "pymem_changes_bench_b"}
CALLS = {
    "turn_record": "SELECT user_seq FROM pymem.turn_record(%s, 'what did I say about the trip?', 'You said Lisbon.')",
    "fact_add": "SELECT id FROM pymem.fact_add('user', %s, 'fact number ' || %s)",
}


def writes(dsns: dict[str, str], calls: int, warmup: int) -> dict[str, Any]:
    conns = {k: psycopg.connect(v, autocommit=True) for k, v in dsns.items()}
    out: dict[str, Any] = {}
    try:
        for call, statement in CALLS.items():
            samples: dict[str, list[int]] = {k: [] for k in conns}
            for c in conns.values():
                for i in range(warmup):
                    c.execute(statement, (f"warm-{i % 50}", f"w{i}") if call == "fact_add" else (f"warm-{i % 50}",),
                              prepare=True).fetchall()
            turn = max(1, calls // 10)
            for start in range(0, calls, turn):
                for name, c in conns.items():
                    for i in range(start, min(calls, start + turn)):
                        params = (f"user-{i % 100}", f"{name}-{i}") if call == "fact_add" else (f"user-{i % 100}",)
                        t0 = time.perf_counter_ns()
                        c.execute(statement, params, prepare=True).fetchall()
                        samples[name].append(time.perf_counter_ns() - t0)
            base = statistics.median(samples["without_feed"])
            out[call] = {k: {"p50_ms": round(statistics.median(v) / 1e6, 4), "ratio": round(statistics.median(v) / base, 3)}
                         for k, v in samples.items()}
    finally:
        for c in conns.values():
            c.close()
    return out


def read_feed(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as c:
        after, n = 0, 0
        t0 = time.perf_counter()
        while True:
            rows = c.execute("SELECT position FROM pymem.changes_since(after => %s, max_changes => 1000)",
                             (after,)).fetchall()
            n += len(rows)
            if len(rows) < 1000:
                break
            after = rows[-1][0]
        wall = time.perf_counter() - t0
    return {"changes": n, "changes_per_s": round(n / wall) if wall else None}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to create the scratch databases on (default: PYMEM_DSN, else the embedded one)")
    ap.add_argument("--calls", type=common.positive, default=2000, help="timed calls per database and statement")
    ap.add_argument("--warmup", type=int, default=200)
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"change feed bench on {where}")
    dsns = {name: common.scratch_database(conninfo, db) for name, db in DBS.items()}
    with psycopg.connect(dsns["with_feed"], autocommit=True) as c:  # off by default: turned on here
        c.execute("SELECT pymem.change_feed_configure(enabled => true)")
    result = {"writes": writes(dsns, args.calls, args.warmup), "read": read_feed(dsns["with_feed"]), "args": vars(args)}
    for call, r in result["writes"].items():
        for name, v in r.items():
            print(f"{call:12} {name:13} p50 {v['p50_ms']:8.4f} ms  {v['ratio']:5.3f}x")
    print(f"changes_since: {result['read']['changes']} changes at {result['read']['changes_per_s']}/s")
    print("command: " + common.command_line("bench/changes.py", argv))
    return result


if __name__ == "__main__":
    main()
