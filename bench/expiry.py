"""What expiry costs (issue 33, item 1), in one run on one server:

    PYMEM_DATA_DIR=/tmp/bench-expiry python bench/expiry.py [--users 2000] [--facts 50] [--calls 1000]

- **reads with and without expiring rows**: ``facts_newest`` (50 facts) and ``context_read`` (the
  user's facts, no query) of users whose facts never expire against users whose facts all carry
  an expiry that has not come (the same rows come back; only the expiry test differs), and of
  users whose facts are half expired already (each read skips them), in alternating turns of
  ``calls / 10``; ratios of p50 to the users without expiry (issue 33's target: <= 1.05x); the
  same for keyed stores, ``store_list`` (a prefix of ``--facts`` entries) and ``store_read`` (one
  entry), a store per user of each kind;
- **purge throughput**: the facts of ``--purge-users`` users expire at once; ``pymem.purge``
  deletes every expired fact (theirs and the half-expired users') and store entry (the
  half-expired stores') in batches of ``--batch`` rows of each kind: rows per second, and the
  longest batch (its transaction: what a purge holds at a time).

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
CONTEXT = "SELECT pymem.context_read(%s, NULL, max_facts => 50, recall => pymem.recall(k => 0))"
STORE_LIST = "SELECT path FROM pymem.store_list(%s, 'notes/')"
STORE_READ = "SELECT sha FROM pymem.store_read(%s, 'notes/2.md')"
#: what each read returns, counted: the facts of newest, the user's facts of the context, the
#: paths of the list, the one entry of the point read
READS = {"facts_newest": (NEWEST, len), "context_read": (CONTEXT, lambda got: len(got[0][0]["user_facts"])),
         "store_list": (STORE_LIST, len), "store_read": (STORE_READ, len)}


def load(dsn: str, users: int, facts: int, purge_users: int) -> None:
    """``users`` users of each kind, ``facts`` facts each; ``purge_users`` users more whose facts
    expire for the purge. A half-expired user has 2 x facts facts, every other one expired."""
    with psycopg.connect(dsn, autocommit=True) as c:
        for kind in KINDS:
            n = facts * (2 if kind == "half_expired" else 1)
            ttl = "NULL" if kind == "never" else "'30 days'"
            for u in range(users):
                c.execute(f"SELECT pymem.facts_add_many('user', array_fill(%s::text, ARRAY[{n}]), "
                          f"ARRAY(SELECT 'fact ' || i || ' of ' || %s FROM generate_series(1, {n}) AS i), write => pymem.fact_write(ttl => {ttl}))",
                          (f"{kind}-{u}", f"{kind}-{u}"))
        c.execute("UPDATE pymem.facts SET expires_at = now() - interval '1 hour' "
                  "WHERE scope_id LIKE 'half_expired-%' AND id % 2 = 0")
        for u in range(purge_users):
            c.execute("SELECT pymem.facts_add_many('user', array_fill(%s::text, ARRAY[%s]), "
                      "ARRAY(SELECT 'purged fact ' || i FROM generate_series(1, %s) AS i), write => pymem.fact_write(ttl => '1 day'))",
                      (f"purged-{u}", facts, facts))
        # keyed stores alike: a store per user of each kind, ``facts`` entries under notes/ (a
        # half-expired store has as many more under old/, expired)
        for kind in KINDS:
            ttl = "NULL" if kind == "never" else "'30 days'"
            for u in range(users):
                store = f"{kind}-{u}"
                c.execute("SELECT pymem.store_open(%s)", (store,))
                prefixes = ("notes", "old") if kind == "half_expired" else ("notes",)
                for prefix in prefixes:
                    for i in range(1, facts + 1):
                        c.execute(f"SELECT pymem.store_write(%s, %s, %s, ttl => {ttl})",
                                  (store, f"{prefix}/{i}.md", f"entry {i} of {store}"))
        c.execute("UPDATE pymem.store_entries SET expires_at = now() - interval '1 hour' WHERE path LIKE 'old/%'")
        c.execute("VACUUM ANALYZE pymem.facts, pymem.store_entries")


def reads(dsn: str, users: int, calls: int, warmup: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        for name, (query, count) in READS.items():
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
                        rows[kind].add(count(got))
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
        entries = c.execute("SELECT count(*) FROM pymem.store_entries WHERE expires_at <= now()").fetchone()[0]
        batches: list[float] = []
        totals: dict[str, int] = {}
        t0 = time.perf_counter()
        while True:  # each call deletes up to batch rows of each kind (the half-expired stores' too)
            b0 = time.perf_counter()
            rows = dict(c.execute("SELECT kind, purged FROM pymem.purge(max_rows => %s)", (batch,)).fetchall())
            batches.append(time.perf_counter() - b0)
            for kind, n in rows.items():
                totals[kind] = totals.get(kind, 0) + n
            if all(n < batch for n in rows.values()):
                break
        wall = time.perf_counter() - t0
        left = c.execute("SELECT count(*) FROM pymem.facts WHERE expires_at <= now()").fetchone()[0]
    total = sum(totals.values())
    return {"expired": expired, "purged": totals["facts"], "left": left, "batches": len(batches),
            "expired_entries": entries, "purged_entries": totals["store_entries"],
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
    print(f"purge: {p['purged']} of {p['expired']} expired facts and {p['purged_entries']} of {p['expired_entries']} "
          f"expired store entries in {p['batches']} batches of {args.batch}: "
          f"{p['rows_per_s']} rows/s, batch median {p['median_batch_ms']} ms, longest {p['longest_batch_ms']} ms, "
          f"{p['left']} left")
    print("command: " + common.command_line("bench/expiry.py", argv))
    return result


if __name__ == "__main__":
    main()
