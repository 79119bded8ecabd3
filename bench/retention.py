"""What message retention costs (issue 33, item 1), in one run on one server:

    PYMEM_DATA_DIR=/tmp/bench-retention python bench/retention.py [--users 2000] [--messages 100] [--calls 2000]

- **the write cost of its index**: ``messages_created`` (project_id, created_at), which the age
  policy reads, is one more index entry per message (so no migration builds it: only a project
  that sets an age). Two databases get the same messages (``--users`` users x ``--messages``,
  created over 100 days); one of them gets the index.
  ``turn_record`` (two messages, no vectors: the cheapest turn, where an index weighs most) runs
  on both in alternating turns of ``calls / 10``; p50 per call and the ratio;
- **purge throughput**: with ``messages_max_age`` = 50 days (about half of the messages are
  older), then ``messages_max_per_thread`` = ``messages / 4``, ``pymem.purge`` in batches of
  ``--batch`` until one is not full: rows per second, the median and the longest batch (its
  transaction: what a purge holds at a time).

Scratch databases (``pymem_retention_bench_a`` / ``_b``) on the server of PYMEM_DSN, else the
embedded one. Nothing here asserts a duration; compare ratios within one run.
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
from pymem.queries import Q  # noqa: E402

DBS = {"with_index": "pymem_retention_bench_a", "without_index": "pymem_retention_bench_b"}
TURN = "SELECT user_seq FROM pymem.turn_record(%s, 'what did I say about the trip?', 'You said Lisbon.')"
LOAD = """SELECT count(*) FROM pymem.messages_add_many(
              %(u)s, 'default', array_fill('user'::text, ARRAY[%(n)s]),
              ARRAY(SELECT %(u)s || ' said thing ' || i FROM generate_series(1, %(n)s) AS i),
              created_ats => ARRAY(SELECT now() - interval '100 days' + (i * interval '100 days') / %(n)s
                                     FROM generate_series(1, %(n)s) AS i))"""


def load(dsn: str, users: int, messages: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for u in range(users):
            c.execute(LOAD, {"u": f"user-{u}", "n": messages})
        c.execute("VACUUM ANALYZE pymem.messages, pymem.threads, pymem.message_lexemes")


def writes(dsns: dict[str, str], users: int, calls: int, warmup: int) -> dict[str, Any]:
    conns = {k: psycopg.connect(v, autocommit=True) for k, v in dsns.items()}
    try:
        for c in conns.values():
            for i in range(warmup):
                c.execute(TURN, (f"user-{i % users}",), prepare=True).fetchall()
        samples: dict[str, list[int]] = {k: [] for k in conns}
        turn = max(1, calls // 10)
        for start in range(0, calls, turn):
            for name, c in conns.items():
                for i in range(start, min(calls, start + turn)):
                    t0 = time.perf_counter_ns()
                    c.execute(TURN, (f"user-{i % users}",), prepare=True).fetchall()
                    samples[name].append(time.perf_counter_ns() - t0)
    finally:
        for c in conns.values():
            c.close()
    base = statistics.median(samples["without_index"])
    return {k: {"p50_ms": round(statistics.median(v) / 1e6, 4), "ratio": round(statistics.median(v) / base, 3)}
            for k, v in samples.items()}


def purge_all(c: psycopg.Connection, batch: int) -> dict[str, Any]:
    batches: list[float] = []
    total = 0
    t0 = time.perf_counter()
    while True:
        b0 = time.perf_counter()
        (n,) = c.execute("SELECT purged FROM pymem.purge(max_rows => %s) WHERE kind = 'messages'", (batch,)).fetchone()
        batches.append(time.perf_counter() - b0)
        total += n
        if n < batch:
            break
    wall = time.perf_counter() - t0
    return {"purged": total, "batches": len(batches), "rows_per_s": round(total / wall),
            "median_batch_ms": round(statistics.median(batches) * 1e3, 1),
            "longest_batch_ms": round(max(batches) * 1e3, 1)}


def purges(dsn: str, messages: int, batch: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as c:
        count = "SELECT count(*) FROM pymem.messages"
        out: dict[str, Any] = {}
        before = c.execute(count).fetchone()[0]
        c.execute("SELECT * FROM pymem.retention_configure(messages_max_age => '50 days')")
        out["max_age"] = {**purge_all(c, batch), "expected": before - c.execute(
            "SELECT count(*) FROM pymem.messages WHERE created_at >= now() - interval '50 days'").fetchone()[0]}
        cap = max(1, messages // 4)
        before = c.execute(count).fetchone()[0]
        c.execute("SELECT * FROM pymem.retention_configure(messages_max_per_thread => %s)", (cap,))
        expected = before - c.execute("SELECT sum(least(n, %s)) FROM (SELECT count(*) AS n FROM pymem.messages "
                                      "GROUP BY user_id, thread_id) AS t", (cap,)).fetchone()[0]
        out["max_per_thread"] = {**purge_all(c, batch), "expected": int(expected), "cap": cap}
        out["left"] = c.execute(count).fetchone()[0]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to create the scratch databases on (default: PYMEM_DSN, else the embedded one)")
    ap.add_argument("--users", type=common.positive, default=2000)
    ap.add_argument("--messages", type=common.positive, default=100, help="messages per user, created over 100 days")
    ap.add_argument("--calls", type=common.positive, default=2000, help="timed turn_record calls per database")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--batch", type=common.positive, default=1000, help="purge's max_rows")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"retention bench on {where}")
    dsns = {}
    for name, db in DBS.items():
        dsns[name] = common.scratch_database(conninfo, db)
        common.progress(f"{name}: loading {args.users} users x {args.messages} messages")
        load(dsns[name], args.users, args.messages)
    with psycopg.connect(dsns["with_index"], autocommit=True) as c:
        c.execute(Q["messages_created_index"])  # what an age policy needs (configure_retention builds it)
    result = {"writes": writes(dsns, args.users, args.calls, args.warmup),
              "purge": purges(dsns["with_index"], args.messages, args.batch), "args": vars(args)}
    for name, r in result["writes"].items():
        print(f"turn_record {name:14} p50 {r['p50_ms']:8.4f} ms  {r['ratio']:5.3f}x")
    for name in ("max_age", "max_per_thread"):
        p = result["purge"][name]
        print(f"purge {name:15} {p['purged']} of {p['expected']} in {p['batches']} batches of {args.batch}: "
              f"{p['rows_per_s']} rows/s, batch median {p['median_batch_ms']} ms, longest {p['longest_batch_ms']} ms")
    print("command: " + common.command_line("bench/retention.py", argv))
    return result


if __name__ == "__main__":
    main()
