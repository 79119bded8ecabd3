"""What valid time costs the default read (issue 34, item 1), in one run on one server:

    PYMEM_DATA_DIR=/tmp/bench-valid-time python bench/valid_time.py [--users 2000] [--facts 50] [--calls 1000]

The default read ("what we believe now about now") is ``pymem.active_facts``, which since
0006_v0_2_0_memory also tests each row's valid time. Measured, in alternating turns of ``calls / 10``:

- ``facts_newest`` (50 facts) and ``context_read`` (the user's facts, no query) as shipped, against
  the same functions reading the view as it was before 0043 (copies in the schema
  ``bench_before``, made from the shipped bodies with the view renamed: everything else equal);
  the issue's target is <= 1.1x for the default read;
- plain SQL returning the same rows (the view's query written out, prepared), for the API's cost
  over it;
- ``facts_at`` (a point in time: what held a year ago), for what the bi-temporal read costs;

for users whose facts have no valid time (every fact before this change), users whose facts all
have one that holds now (the same rows come back), and users with twice the facts, every other
one ended (each read skips them, as it skips expired facts).

A scratch database (``pymem_valid_time_bench``) on the server of PYMEM_DSN, else the embedded one.
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

DB = "pymem_valid_time_bench"
KINDS = ("plain", "dated", "half_ended")
PLAIN_SQL = ("SELECT f.id FROM pymem.facts AS f WHERE f.project_id = '' AND f.scope = 'user' AND f.scope_id = %s "
             "AND f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at > now()) "
             "AND (f.valid_from IS NULL OR f.valid_from <= now()) AND (f.valid_to IS NULL OR f.valid_to > now()) "
             "ORDER BY f.created_at DESC, f.id DESC LIMIT 50")
#: name -> (query, what a result counts)
READS = {
    "facts_newest": ("SELECT id FROM pymem.facts_newest('user', %s, max_facts => 50)", len),
    "facts_newest_before": ("SELECT id FROM bench_before.facts_newest('user', %s, max_facts => 50)", len),
    "plain_sql": (PLAIN_SQL, len),
    "context_read": ("SELECT pymem.context_read(%s, NULL, max_facts => 50, recall => pymem.recall(k => 0))",
                     lambda got: len(got[0][0]["user_facts"])),
    "context_read_before": ("SELECT bench_before.context_read(%s, NULL, max_facts => 50, "
                            "recall => pymem.recall(k => 0))",
                            lambda got: len(got[0][0]["user_facts"])),
    "facts_at_year_ago": ("SELECT id FROM pymem.facts_at('user', %s, valid_at => now() - interval '1 year', "
                          "max_facts => 50)", len),
}
#: the view as 0037 defined it, and the functions that read it, copied into bench_before
BEFORE_VIEW = """CREATE VIEW bench_before.active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.facts AS f
     WHERE f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())"""
COPIED = ("facts_newest", "context_read", "_facts_for_context", "_facts_newest")


def load(dsn: str, users: int, facts: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for kind in KINDS:
            n = facts * (2 if kind == "half_ended" else 1)
            start = "NULL" if kind == "plain" else "'2020-01-01'"
            for u in range(users):
                c.execute(f"SELECT pymem.facts_add_many('user', array_fill(%s::text, ARRAY[{n}]), "
                          f"ARRAY(SELECT 'fact ' || i || ' of ' || %s FROM generate_series(1, {n}) AS i), "
                          f"write => pymem.fact_write(valid_from => {start}))", (f"{kind}-{u}", f"{kind}-{u}"))
        # every other fact of a half-ended user stopped holding last month (the owner writes the
        # state that a restatement would leave, without the history rows)
        c.execute("UPDATE pymem.facts SET valid_to = now() - interval '30 days' "
                  "WHERE scope_id LIKE 'half_ended-%' AND id % 2 = 0")
        # the copies belong to the owner of the shipped functions, as the view does, so that the
        # tables' forced row-level security binds them the same way
        (owner,) = c.execute("SELECT pg_get_userbyid(proowner) FROM pg_proc "
                             "WHERE oid = 'pymem.facts_newest'::regproc").fetchone()
        c.execute("DROP SCHEMA IF EXISTS bench_before CASCADE")
        c.execute(f'CREATE SCHEMA bench_before AUTHORIZATION "{owner}"')
        c.execute(f'SET ROLE "{owner}"')
        c.execute(BEFORE_VIEW)
        for name in COPIED:
            src = c.execute("SELECT pg_get_functiondef(p.oid) FROM pg_proc AS p "
                            "WHERE p.pronamespace = 'pymem'::regnamespace AND p.proname = %s", (name,)).fetchone()[0]
            src = src.replace("pymem.active_facts", "bench_before.active_facts")
            for fn in COPIED:
                src = src.replace(f"pymem.{fn}(", f"bench_before.{fn}(")
            c.execute(src)
        c.execute("RESET ROLE")
        c.execute("VACUUM ANALYZE pymem.facts")


def reads(dsn: str, users: int, calls: int, warmup: int) -> dict[str, dict[str, Any]]:
    samples: dict[tuple[str, str], list[int]] = {(r, k): [] for r in READS for k in KINDS}
    rows: dict[tuple[str, str], set[int]] = {(r, k): set() for r in READS for k in KINDS}
    with psycopg.connect(dsn, autocommit=True) as c:
        for name, (query, _) in READS.items():  # warm-up: plans cached, pages in memory
            for kind in KINDS:
                for i in range(warmup):
                    c.execute(query, (f"{kind}-{i % users}",), prepare=True).fetchall()
        turn = max(1, calls // 10)
        for start in range(0, calls, turn):  # every read and kind in turn, so drift hits all alike
            for name, (query, count) in READS.items():
                for kind in KINDS:
                    for i in range(start, min(calls, start + turn)):
                        t0 = time.perf_counter_ns()
                        got = c.execute(query, (f"{kind}-{i % users}",), prepare=True).fetchall()
                        samples[name, kind].append(time.perf_counter_ns() - t0)
                        rows[name, kind].add(count(got))
    out: dict[str, dict[str, Any]] = {}
    for name in READS:
        out[name] = {}
        for kind in KINDS:
            p50 = statistics.median(samples[name, kind])
            out[name][kind] = {"p50_ms": round(p50 / 1e6, 4), "rows": sorted(rows[name, kind])}
    for name, base in (("facts_newest", "facts_newest_before"), ("context_read", "context_read_before"),
                       ("facts_newest_before", "plain_sql"), ("facts_newest", "plain_sql")):
        for kind in KINDS:
            key = f"{name}/{base}"
            out.setdefault("ratios", {}).setdefault(key, {})[kind] = round(
                out[name][kind]["p50_ms"] / out[base][kind]["p50_ms"], 3)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: PYMEM_DSN, else the embedded one)")
    ap.add_argument("--users", type=common.positive, default=2000, help="users of each kind")
    ap.add_argument("--facts", type=common.positive, default=50, help="facts per user")
    ap.add_argument("--calls", type=common.positive, default=1000, help="timed calls per read and kind")
    ap.add_argument("--warmup", type=int, default=100)
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"valid time bench on {where}")
    dsn = common.scratch_database(conninfo, DB)
    common.progress(f"loading {args.users} users x {args.facts} facts of each kind")
    load(dsn, args.users, args.facts)
    result = {"reads": reads(dsn, args.users, args.calls, args.warmup), "args": vars(args)}
    for name, kinds in result["reads"].items():
        if name == "ratios":
            continue
        for kind, r in kinds.items():
            print(f"{name:20} {kind:11} p50 {r['p50_ms']:8.4f} ms  rows {r['rows']}")
    for key, kinds in result["reads"]["ratios"].items():
        print(f"{key:40} " + "  ".join(f"{kind} {v:5.3f}x" for kind, v in kinds.items()))
    print("command: " + common.command_line("bench/valid_time.py", argv))
    return result


if __name__ == "__main__":
    main()
