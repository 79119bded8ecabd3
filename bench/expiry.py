"""What expiry costs (issue 33, item 1), in one run on one server:

    PYMEM_DATA_DIR=/tmp/bench-expiry python bench/expiry.py [--users 2000] [--facts 50] [--calls 1000]

- **reads with and without expiring rows**: ``facts_newest`` (50 facts) and ``context_read`` (the
  user's facts, no query) of users whose facts never expire against users whose facts all carry
  an expiry that has not come (the same rows come back; only the expiry test differs), and of
  users whose facts are half expired already (each read skips them), in alternating turns of
  ``calls / 10``; ratios of p50 to the users without expiry (issue 33's target: <= 1.05x);
- **purge throughput**: the facts of ``--purge-users`` users expire at once; ``pymem.purge``
  deletes every expired fact (theirs and the half-expired users') in batches of ``--batch``: rows
  per second, and the longest batch (its transaction: what a purge holds at a time).

A scratch database (``pymem_expiry_bench``) on the server of PYMEM_DSN, else the embedded one.
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

DB = "pymem_expiry_bench"
KINDS = ("never", "expiring", "half_expired")
NEWEST = "SELECT id FROM pymem.facts_newest('user', %s, max_facts => 50)"
CONTEXT = "SELECT pymem.context_read(%s, NULL, max_facts => 50, k => 0)"


def load(dsn: str, users: int, facts: int, purge_users: int) -> None:
    """``users`` users of each kind, ``facts`` facts each; ``purge_users`` users more whose facts
    expire for the purge. A half-expired user has 2 x facts facts, every other one expired."""
    with psycopg.connect(dsn, autocommit=True) as c:
        for kind in KINDS:
            n = facts * (2 if kind == "half_expired" else 1)
            ttl = "NULL" if kind == "never" else "'30 days'"
            for u in range(users):
                c.execute(f"SELECT pymem.facts_add_many('user', array_fill(%s::text, ARRAY[{n}]), "
                          f"ARRAY(SELECT 'fact ' || i || ' of ' || %s FROM generate_series(1, {n}) AS i), ttl => {ttl})",
                          (f"{kind}-{u}", f"{kind}-{u}"))
        c.execute("UPDATE pymem.facts SET expires_at = now() - interval '1 hour' "
                  "WHERE scope_id LIKE 'half_expired-%' AND id % 2 = 0")
        for u in range(purge_users):
            c.execute("SELECT pymem.facts_add_many('user', array_fill(%s::text, ARRAY[%s]), "
                      "ARRAY(SELECT 'purged fact ' || i FROM generate_series(1, %s) AS i), ttl => '1 day')",
                      (f"purged-{u}", facts, facts))
        c.execute("VACUUM ANALYZE pymem.facts")


def reads(dsn: str, users: int, calls: int, warmup: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        for name, query in (("facts_newest", NEWEST), ("context_read", CONTEXT)):
            samples: dict[str, list[int]] = {k: [] for k in KINDS}
            rows: dict[str, set[int]] = {k: set() for k in KINDS}
            for kind in KINDS:  # warm-up: plans cached, pages in memory
                for i in range(warmup):
                    c.execute(query, (f"{kind}-{i % users}",), prepare=True).fetchall()
            turn = max(1, calls // 10)
            for start in range(0, calls, turn):
                for kind in KINDS:
                    for i in range(start, min(calls, start + turn)):
                        subject = f"{kind}-{i % users}"
                        t0 = time.perf_counter_ns()
                        got = c.execute(query, (subject,), prepare=True).fetchall()
                        samples[kind].append(time.perf_counter_ns() - t0)
                        if name == "facts_newest":
                            rows[kind].add(len(got))
                        else:
                            rows[kind].add(len(got[0][0]["user_facts"]))
            base = statistics.median(samples["never"])
            out[name] = {k: {"p50_ms": round(statistics.median(v) / 1e6, 4),
                             "ratio": round(statistics.median(v) / base, 3), "rows": sorted(rows[k])}
                         for k, v in samples.items()}
    return out


def purge(dsn: str, batch: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE pymem.facts SET expires_at = now() - interval '1 second' WHERE scope_id LIKE 'purged-%'")
        # every expired fact of the project: the purge users' and the half-expired users' ones
        expired = c.execute("SELECT count(*) FROM pymem.facts WHERE expires_at <= now()").fetchone()[0]
        batches: list[float] = []
        total = 0
        t0 = time.perf_counter()
        while True:
            b0 = time.perf_counter()
            (n,) = c.execute("SELECT purged FROM pymem.purge(max_rows => %s)", (batch,)).fetchone()
            batches.append(time.perf_counter() - b0)
            total += n
            if n < batch:
                break
        wall = time.perf_counter() - t0
        left = c.execute("SELECT count(*) FROM pymem.facts WHERE expires_at <= now()").fetchone()[0]
    return {"expired": expired, "purged": total, "left": left, "batches": len(batches),
            "rows_per_s": round(total / wall), "longest_batch_ms": round(max(batches) * 1e3, 1),
            "median_batch_ms": round(statistics.median(batches) * 1e3, 1)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: PYMEM_DSN, else the embedded one)")
    ap.add_argument("--users", type=common.positive, default=2000, help="users of each kind")
    ap.add_argument("--facts", type=common.positive, default=50, help="facts per user")
    ap.add_argument("--calls", type=common.positive, default=1000, help="timed calls per read and kind")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--purge-users", type=common.positive, default=2000, help="users whose facts expire for the purge")
    ap.add_argument("--batch", type=common.positive, default=1000, help="purge's max_rows")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"expiry bench on {where}")
    dsn = common.scratch_database(conninfo, DB)
    common.progress(f"loading {args.users} users x {args.facts} facts of each kind, {args.purge_users} to purge")
    load(dsn, args.users, args.facts, args.purge_users)
    result = {"reads": reads(dsn, args.users, args.calls, args.warmup), "purge": purge(dsn, args.batch),
              "args": vars(args)}
    for name, kinds in result["reads"].items():
        for kind, r in kinds.items():
            print(f"{name:13} {kind:13} p50 {r['p50_ms']:8.4f} ms  {r['ratio']:5.3f}x  rows {r['rows']}")
    p = result["purge"]
    print(f"purge: {p['purged']} of {p['expired']} expired facts in {p['batches']} batches of {args.batch}: "
          f"{p['rows_per_s']} rows/s, batch median {p['median_batch_ms']} ms, longest {p['longest_batch_ms']} ms, "
          f"{p['left']} left")
    print("command: " + common.command_line("bench/expiry.py", argv))
    return result


if __name__ == "__main__":
    main()
