"""What the stored-JSON bounds (migration 0048's ``*_bounded`` CHECK constraints) and the change
feed (its statement triggers and the deferred ``changes_position`` trigger) cost a write, in one
run on one server (issue 60):

    PYMEM_DATA_DIR=/tmp/bench-writes python bench/write_costs.py [--rounds 9] [--calls 200]

Three scratch databases with the same schema: ``base`` as every database is by default (bounds
on, feed off); ``no_bounds``, the same with the three ``*_bounded`` constraints dropped (what the
bounds cost); ``feed``, with ``change_feed_configure(enabled => true)`` (what the feed costs).
``fact_add`` of a new fact (no vector, ``{}`` metadata, and with a 1 kB metadata document),
and ``turn_record`` (two messages, no vectors, ``{}`` metadata) run on each, one prepared
statement per call on one autocommit connection per database, the databases taking turns round by
round. Per call: the server's CPU (``/proc/<backend pid>/schedstat``: what the backend itself
ran, the least disturbed by other work on a shared machine) and the wall time, medians over
rounds, and each database's ratio to ``base``. The server must be on this machine (the embedded
one, or ``--dsn`` to a local one). Nothing here asserts a duration; compare ratios within a run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

DBS = {"base": "pymem_writes_base", "no_bounds": "pymem_writes_nobounds", "feed": "pymem_writes_feed"}
BOUNDS = (("pymem.facts", "facts_metadata_bounded"), ("pymem.messages", "messages_metadata_bounded"),
          ("pymem.store_messages", "store_messages_message_bounded"))
META = {"topic": "travel", "origin": "bench", "notes": ["x" * 40] * 20, "nested": {"a": {"b": {"c": [1, 2, 3]}}}}
CALLS = {
    "fact_add": ("SELECT id FROM pymem.fact_add('user', %(u)s, %(c)s)", False),
    "fact_add, 1 kB metadata": ("SELECT id FROM pymem.fact_add('user', %(u)s, %(c)s, write => pymem.fact_write(metadata => %(m)s))", True),
    "turn_record": ("SELECT user_seq FROM pymem.turn_record(%(u)s, %(c)s, 'You said Lisbon.')", False),
}


def databases(conninfo: str) -> dict[str, str]:
    dsns = {name: common.scratch_database(conninfo, db) for name, db in DBS.items()}
    with psycopg.connect(dsns["no_bounds"], autocommit=True) as c:
        for table, constraint in BOUNDS:
            c.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
    with psycopg.connect(dsns["feed"], autocommit=True) as c:  # off by default: turned on here
        c.execute("SELECT pymem.change_feed_configure(enabled => true)")
    return dsns


def measure(dsns: dict[str, str], rounds: int, calls: int) -> dict[str, Any]:
    conns = {k: psycopg.connect(v, autocommit=True) for k, v in dsns.items()}
    pids = {k: c.execute("SELECT pg_backend_pid()").fetchone()[0] for k, c in conns.items()}

    def cpu_ns(name: str) -> int:
        return int(Path(f"/proc/{pids[name]}/schedstat").read_text().split()[0])

    out: dict[str, Any] = {}
    try:
        for call, (sql, meta) in CALLS.items():
            cpu: dict[str, list[float]] = {k: [] for k in conns}
            wall: dict[str, list[float]] = {k: [] for k in conns}
            for r in range(rounds + 1):  # round 0 warms up
                for name, c in conns.items():
                    c0, t0 = cpu_ns(name), time.perf_counter_ns()
                    for i in range(calls):
                        p = {"u": f"user-{i % 50}", "c": f"{call} {r} {i}: prefers the window seat on trains",
                             "m": Jsonb(META) if meta else None}
                        c.execute(sql, p, prepare=True).fetchall()
                    if r:
                        cpu[name].append((cpu_ns(name) - c0) / calls / 1000)
                        wall[name].append((time.perf_counter_ns() - t0) / calls / 1000)
            base_cpu, base_wall = statistics.median(cpu["base"]), statistics.median(wall["base"])
            out[call] = {k: {"cpu_us": round(statistics.median(cpu[k]), 1), "cpu_min_us": round(min(cpu[k]), 1),
                             "wall_us": round(statistics.median(wall[k]), 1),
                             "cpu_ratio": round(statistics.median(cpu[k]) / base_cpu, 3),
                             "wall_ratio": round(statistics.median(wall[k]) / base_wall, 3)} for k in conns}
    finally:
        for c in conns.values():
            c.close()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a local server to create the scratch databases on (default: PYMEM_DSN, else the "
                                  "embedded one)")
    ap.add_argument("--rounds", type=common.positive, default=9)
    ap.add_argument("--calls", type=common.positive, default=200, help="calls per database and round")
    ap.add_argument("--results-dir", help="where the JSON result goes (default bench/results)")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"write costs on {where}")
    dsns = databases(conninfo)
    result = {"writes": measure(dsns, args.rounds, args.calls), "args": vars(args), "git": common.git_revision()}
    print(f"{'call':26} {'database':10} {'server CPU us':>14} {'(min)':>7} {'wall us':>8} {'CPU / base':>11} "
          f"{'wall / base':>12}")
    for call, r in result["writes"].items():
        for name, v in r.items():
            print(f"{call:26} {name:10} {v['cpu_us']:14.1f} {v['cpu_min_us']:7.1f} {v['wall_us']:8.1f} "
                  f"{v['cpu_ratio']:10.3f}x {v['wall_ratio']:11.3f}x")
    print("command: " + common.command_line("bench/write_costs.py", argv))
    return common.finish("write_costs", result, write=True, results_dir=args.results_dir, where=where)


if __name__ == "__main__":
    main()
