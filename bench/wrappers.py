"""What pymem's function wrappers cost over the plain SQL they wrap, and what a call costs from
Python through ``Memory``, side by side in alternating rounds (issue 15, targets 2, 3 and 6).

    PYMEM_DATA_DIR=/tmp/bench-wrappers python bench/wrappers.py [--facts 50000] [--rounds 9] [--calls 200]

Data: a scratch project (``bench-wrappers``, emptied first) with ``--facts`` facts over 2,000
users, the probe user (200 active facts) among them; 384-d random vectors for the adds.

1. Server CPU per call (the backend's own time, from /proc/<backend pid>/schedstat, first field;
   less disturbed by other load than wall time), on one superuser connection, every statement
   prepared: ``facts_newest`` (50 rows) against the same index scan as plain SQL, ``fact_add`` of a
   new fact with its vector against a plain ``INSERT ... ON CONFLICT`` of the same row and its
   vector (one statement into pymem.facts and pymem.fact_embeddings; the superuser bypasses
   row-level security, the table's lexeme trigger fires for both), an idempotent re-add (without
   a vector, and with the vector the fact has, as Memory.persist sends it with a cheap embedder)
   against a plain read of the row by key, and ``fact_supersede`` of the newest version of a
   chain (issue 15, target 3) against its floor, the same two writes as one plain statement (the
   successor's INSERT and the old row's UPDATE), and against a durable one-row INSERT into a
   two-column table. Each call commits. Medians over ``--rounds`` rounds of ``--calls`` calls, and
   the WAL bytes per call (the insert position around each round's calls).
2. Wall time p50 from Python, one connection (a ``Database`` pool of one, the default settings:
   since issue 28 the statement timeout is the connection's startup option and statements are
   prepared from their fifth execution on; before, the timeout went with each statement and
   nothing was prepared): ``Memory.retrieve(limit=50)`` against the floor (a prepared
   ``SELECT 1`` on a direct connection), ``Memory.update`` (a versioned supersede) against a
   durable one-row INSERT (its own transaction, commit flushed as the server says).
3. Single adds per second on one connection: ``fact_add`` per call (SQL, prepared, no vector, as
   bench/ingest.py) and ``Memory.persist``.

With ``--old-api DIR`` (an older sql/api folder), part 1 alternates the old and this tree's
functions of the files that differ, round by round on the same data, and prints new / old per
case: a before/after of a change that two separate runs on a shared machine could not show.

Prints the ratios; nothing here asserts a duration. The machine's drift is shared by both
sides of each ratio (alternating rounds), not by two runs: compare ratios within one report.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from bench import common  # noqa: E402

PROJECT = "bench-wrappers"
PROBE = "probe"
DIM = 384
EMBEDDER = "bench-random-384"

NEWEST_FN = ("SELECT f.* FROM pymem.facts_newest(scope => 'user', scope_id => %(s)s, project_id => %(p)s, "
             "max_facts => 50) AS f")
# the limit is a parameter, as in the function: a generic plan for a literal LIMIT 50 (above the
# 25 facts an average subject has) reads the subject by its primary key and sorts
NEWEST_PLAIN = ("SELECT f.* FROM pymem.facts AS f WHERE f.project_id = %(p)s AND f.scope = %(scope)s "
                "AND f.scope_id = %(s)s AND f.superseded_by IS NULL ORDER BY f.created_at DESC, f.id DESC "
                "LIMIT %(n)s::integer")
ADD_FN = ("SELECT a.id, a.created FROM pymem.fact_add(scope => 'user', scope_id => %(s)s, content => %(c)s, "
          "project_id => %(p)s, embedding => %(v)s, embedder => %(e)s) AS a")
ADD_PLAIN = """WITH f AS (
    INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, metadata, created_at)
    VALUES (%(p)s, 'user', %(s)s, %(c)s, pymem.fact_key(%(c)s), 1.0, 'manual', '{}', pg_catalog.clock_timestamp())
    ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING
    RETURNING f.id)
INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
SELECT %(p)s, 'user', %(s)s, f.id, %(e)s, %(v)s FROM f
ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING
RETURNING e.fact_id"""
READD_FN = ("SELECT a.id, a.created FROM pymem.fact_add(scope => 'user', scope_id => %(s)s, content => %(c)s, "
            "project_id => %(p)s) AS a")
# the re-add Memory.persist sends with a cheap embedder: the fact is there with its vector
READD_VEC_FN = ("SELECT a.id, a.created FROM pymem.fact_add(scope => 'user', scope_id => %(s)s, content => %(c)s, "
                "project_id => %(p)s, embedding => %(v)s, embedder => %(e)s) AS a")
READD_PLAIN = ("SELECT f.id FROM pymem.facts AS f WHERE f.project_id = %(p)s AND f.scope = 'user' AND f.scope_id = %(s)s "
               "AND f.content_key = pymem.fact_key(%(c)s) AND f.superseded_by IS NULL")
SINGLE_ADD = "SELECT id FROM pymem.fact_add('user', %s, %s, project_id => %s)"
SUPERSEDE_FN = ("SELECT s.id FROM pymem.fact_supersede(scope => 'user', scope_id => %(s)s, new_content => %(c)s, "
                "id => %(i)s::bigint, project_id => %(p)s) AS s")
# the writes of a supersede and nothing else: the successor, and the old row pointing at it
SUPERSEDE_PLAIN = """WITH n AS (
    INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, metadata, created_at)
    VALUES (%(p)s, 'user', %(s)s, %(c)s, pymem.fact_key(%(c)s), 1.0, 'manual', '{}', pg_catalog.clock_timestamp())
    RETURNING f.id, f.created_at)
UPDATE pymem.facts AS f SET superseded_by = n.id, superseded_at = n.created_at FROM n
 WHERE f.project_id = %(p)s AND f.scope = 'user' AND f.scope_id = %(s)s AND f.id = %(i)s::bigint
RETURNING n.id"""
DURABLE = "INSERT INTO bench_wrappers.durable (v) VALUES (%s)"


def setup(conn: psycopg.Connection, facts: int) -> None:
    conn.execute("SELECT pymem.facts_forget('user', '*', project_id => %s)", (PROJECT,))
    conn.execute("SET synchronous_commit = off")
    users = [f"u{i:04d}" for i in range(2000)]
    n = max(0, facts - 200)
    for lo in range(0, n, 5000):
        hi = min(n, lo + 5000)
        conn.execute("SELECT count(*) FROM pymem.facts_add_many('user', %s::text[], %s::text[], project_id => %s)",
                     ([users[i % len(users)] for i in range(lo, hi)],
                      [f"background fact {i}: item {i * 7919 % 100003}" for i in range(lo, hi)], PROJECT))
        # the probe's facts interleaved with everyone else's
        k = (hi - lo) * 200 // max(n, 1) + (1 if hi == n else 0)
        conn.execute("SELECT count(*) FROM pymem.facts_add_many('user', %s::text[], %s::text[], project_id => %s)",
                     ([PROBE] * k, [f"probe fact {lo}-{j}: likes item {j}" for j in range(k)], PROJECT))
    have = conn.execute("SELECT count(*) FROM pymem.facts WHERE project_id = %s AND scope = 'user' AND scope_id = %s "
                        "AND superseded_by IS NULL", (PROJECT, PROBE)).fetchone()[0]
    if have < 200:
        conn.execute("SELECT count(*) FROM pymem.facts_add_many('user', %s::text[], %s::text[], project_id => %s)",
                     ([PROBE] * (200 - have), [f"probe fact extra {j}" for j in range(200 - have)], PROJECT))
    conn.execute("RESET synchronous_commit")
    conn.execute("VACUUM ANALYZE pymem.facts")
    conn.execute("CREATE SCHEMA IF NOT EXISTS bench_wrappers")
    conn.execute("CREATE TABLE IF NOT EXISTS bench_wrappers.durable (id bigserial PRIMARY KEY, v text NOT NULL)")
    conn.execute("TRUNCATE bench_wrappers.durable")


API_DIR = Path(__file__).resolve().parent.parent / "sql" / "api"


def api_versions(conninfo: str, old_dir: str) -> list[tuple[str, Any]]:
    """(label, apply) for the API files of ``old_dir`` that differ from sql/api, and for this
    tree's: each apply re-creates those files' functions as pymem migrate does (pgvector's schema
    on the path for their signatures). Functions only one version has stay in place."""
    changed = [f.name for f in sorted(API_DIR.glob("*.sql"))
               if (Path(old_dir) / f.name).exists() and (Path(old_dir) / f.name).read_text() != f.read_text()]
    if not changed:
        raise SystemExit(f"--old-api {old_dir}: no file differs from {API_DIR}")
    admin = psycopg.connect(conninfo, autocommit=True)

    def applier(folder: Path):
        texts = [(folder / name).read_text() for name in changed]

        def apply() -> None:
            with admin.transaction():
                admin.execute("SELECT pymem.migration_types_path()")
                for text in texts:
                    admin.execute(text, prepare=False)
        return apply

    common.progress(f"alternating two versions of {', '.join(changed)}")
    return [("old", applier(Path(old_dir))), ("new", applier(API_DIR))]


def server_cpu(conn: psycopg.Connection, rounds: int, calls: int, token: str,
               versions: list[tuple[str, Any]] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """Per API version (one, "current", unless ``versions`` alternates two per round), per case."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    stat = Path(f"/proc/{pid}/schedstat")
    rng = np.random.default_rng(1)
    vecs = [rng.standard_normal(DIM).astype(np.float32) for _ in range(64)]
    counter = {"fn": 0, "plain": 0}
    same = f"{token} the same fact every time"
    conn.execute(READD_FN, {"s": "w-readd", "c": same, "p": PROJECT}, prepare=True).fetchall()
    conn.execute(READD_VEC_FN, {"s": "w-readd", "c": same, "p": PROJECT, "v": vecs[0], "e": EMBEDDER}).fetchall()

    def add(kind: str, sql: str):
        def call() -> None:
            i = counter[kind]
            counter[kind] += 1
            conn.execute(sql, {"s": f"w-{kind}", "c": f"{token} {kind} fact {i}", "p": PROJECT,
                               "v": vecs[i % len(vecs)], "e": EMBEDDER}, prepare=True).fetchall()
        return call

    heads = {}
    for kind in ("fn", "plain"):
        heads[kind] = conn.execute("SELECT id FROM pymem.fact_add('user', %s, %s, project_id => %s)",
                                   (f"w-sup-{kind}", f"{token} {kind} version 0", PROJECT)).fetchone()[0]

    def supersede(kind: str, sql: str):
        def call() -> None:
            counter[kind] += 1
            heads[kind] = conn.execute(sql, {"s": f"w-sup-{kind}", "c": f"{token} {kind} version {counter[kind]}",
                                             "i": heads[kind], "p": PROJECT}, prepare=True).fetchone()[0]
        return call

    probe = {"s": PROBE, "p": PROJECT, "scope": "user", "n": 50}
    readd = {"s": "w-readd", "c": same, "p": PROJECT}
    readd_vec = {**readd, "v": vecs[0], "e": EMBEDDER}
    cases = {
        "floor (SELECT 1)": lambda: conn.execute("SELECT 1", prepare=True).fetchall(),
        "facts_newest, 50 rows": lambda: conn.execute(NEWEST_FN, probe, prepare=True).fetchall(),
        "plain SQL, same scan": lambda: conn.execute(NEWEST_PLAIN, probe, prepare=True).fetchall(),
        "fact_add + vector": add("fn", ADD_FN),
        "plain INSERT ON CONFLICT + vector": add("plain", ADD_PLAIN),
        "fact_add, re-add (idempotent)": lambda: conn.execute(READD_FN, readd, prepare=True).fetchall(),
        "fact_add, re-add with its vector": lambda: conn.execute(READD_VEC_FN, readd_vec, prepare=True).fetchall(),
        "plain SELECT by key": lambda: conn.execute(READD_PLAIN, readd, prepare=True).fetchall(),
        "fact_supersede (by id)": supersede("fn", SUPERSEDE_FN),
        "plain INSERT + UPDATE (its writes)": supersede("plain", SUPERSEDE_PLAIN),
        "durable one-row INSERT": lambda: conn.execute(DURABLE, ("x",), prepare=True),
    }
    assert len(conn.execute(NEWEST_FN, probe).fetchall()) == 50
    versions = versions or [("current", None)]
    cpu = {v: {k: [] for k in cases} for v, _ in versions}
    wall = {v: {k: [] for k in cases} for v, _ in versions}
    wal = {v: {k: [] for k in cases} for v, _ in versions}
    lsn = "SELECT pg_current_wal_insert_lsn()::text"
    for r in range(rounds + 1):
        for version, apply in versions:
            if apply is not None:
                apply()
            for name, fn in cases.items():
                for _ in range(3 if apply is not None else 0):  # the new definitions' plans
                    fn()
                w0 = conn.execute(lsn).fetchone()[0]
                c0, t0 = int(stat.read_text().split()[0]), time.perf_counter_ns()
                for _ in range(calls):
                    fn()
                c1, t1 = int(stat.read_text().split()[0]), time.perf_counter_ns()
                if r:  # the first round warms up
                    cpu[version][name].append((c1 - c0) / calls / 1e3)
                    wall[version][name].append((t1 - t0) / calls / 1e3)
                    # WAL bytes per call (any other writer's, e.g. a checkpoint, lands here too)
                    wal[version][name].append(int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), "
                                                               "%s::pg_lsn)", (w0,)).fetchone()[0]) / calls)
        common.progress(f"server CPU round {r}/{rounds}")
    return {v: {k: {"cpu_us": statistics.median(cpu[v][k]), "cpu_min_us": min(cpu[v][k]),
                    "wall_us": statistics.median(wall[v][k]), "wal_bytes": statistics.median(wal[v][k])}
                for k in cases} for v, _ in versions}


def python_wall(conninfo: str, conn: psycopg.Connection, rounds: int, calls: int, token: str) -> dict[str, dict[str, float]]:
    settings = pymem.Settings(dsn=conninfo, pool_min_size=1, pool_max_size=1)
    # the same with server-side prepared statements (PYMEM_PREPARE_THRESHOLD=0: a direct connection,
    # docs/cli-and-configuration.md "Behind PgBouncer"); the default prepares nothing
    prepared = settings.model_copy(update={"prepare_threshold": 0})
    with pymem.Database(settings, migrate=False) as db, pymem.Database(prepared, migrate=False) as dbp:
        mem = pymem.Memory(db=db, project_id=PROJECT)
        memp = pymem.Memory(db=dbp, project_id=PROJECT)
        assert len(mem.retrieve(id=PROBE, limit=50)) == 50
        chain = [mem.persist(f"{token} version 0", id="w-supersede")]
        n = [0]

        def supersede(m: pymem.Memory) -> None:
            n[0] += 1
            chain[0] = m.update(f"{token} version {n[0]}", fact_id=chain[0], id="w-supersede")

        cases = {
            "floor (prepared SELECT 1, direct)": lambda: conn.execute("SELECT 1", prepare=True).fetchall(),
            "Memory.retrieve(limit=50)": lambda: mem.retrieve(id=PROBE, limit=50),
            "Memory.retrieve(limit=50), prepared": lambda: memp.retrieve(id=PROBE, limit=50),
            "durable one-row INSERT": lambda: conn.execute(
                "INSERT INTO bench_wrappers.durable (v) VALUES (%s)", ("x",), prepare=True),
            "Memory.update (supersede)": lambda: supersede(mem),
            "Memory.update (supersede), prepared": lambda: supersede(memp),
        }
        samples: dict[str, list[int]] = {k: [] for k in cases}
        clock = time.perf_counter_ns
        for r in range(rounds + 1):
            for name, fn in cases.items():
                for _ in range(calls):
                    t0 = clock()
                    fn()
                    if r:
                        samples[name].append(clock() - t0)
            common.progress(f"Python round {r}/{rounds}")
        out = {k: {"p50_us": statistics.median(v) / 1e3,
                   "p99_us": sorted(v)[int(len(v) * 0.99)] / 1e3} for k, v in samples.items()}

        # single adds per second, one connection (the second half of each run only is counted)
        def persist_rate(i0: int, m: int) -> float:
            t0 = clock()
            for i in range(i0, i0 + m):
                mem.persist(f"{token} single add through Memory {i}", id=f"w-single-{i % 50}")
            return m / ((clock() - t0) / 1e9)

        def sql_rate(i0: int, m: int) -> float:
            t0 = clock()
            for i in range(i0, i0 + m):
                conn.execute(SINGLE_ADD, (f"w-single-{i % 50}", f"{token} single add through SQL {i}", PROJECT),
                             prepare=True).fetchone()
            return m / ((clock() - t0) / 1e9)

        rates: dict[str, list[float]] = {"fact_add (SQL, one per call)": [], "Memory.persist (one per call)": []}
        for r in range(rounds + 1):
            a, b = sql_rate(r * calls, calls), persist_rate(r * calls, calls)
            if r:
                rates["fact_add (SQL, one per call)"].append(a)
                rates["Memory.persist (one per call)"].append(b)
        for k, v in rates.items():
            out[k] = {"facts_per_s": statistics.median(v)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn")
    ap.add_argument("--facts", type=int, default=50_000, help="facts in the scratch project (default 50000)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=200, help="calls per case and round (default 200)")
    ap.add_argument("--no-setup", action="store_true", help="reuse the data of an earlier run")
    ap.add_argument("--old-api", metavar="DIR",
                    help="an older sql/api folder (e.g. git archive REV sql/api | tar -x -C /tmp/old): the server "
                         "CPU cases alternate between its functions and this tree's, round by round (then this tree's "
                         "stay), and print new / old per case")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"database: {where}")
    pymem.migrate(conninfo)
    conn = psycopg.connect(conninfo, autocommit=True)
    register_vector(conn)
    token = f"run-{time.time_ns()}"
    if not args.no_setup:
        common.progress(f"loading {args.facts:,} facts")
        setup(conn, args.facts)
    versions = api_versions(conninfo, args.old_api) if args.old_api else None
    by_version = server_cpu(conn, args.rounds, args.calls, token, versions)
    srv = by_version["new" if versions else "current"]
    py = python_wall(conninfo, conn, args.rounds, args.calls, token)
    conn.execute("SELECT pymem.facts_forget('user', s, project_id => %s) FROM unnest(%s::text[]) AS s",
                 (PROJECT, ["w-fn", "w-plain", "w-readd", "w-supersede", "w-sup-fn", "w-sup-plain"] + [f"w-single-{i}" for i in range(50)]))
    conn.close()

    for version, srv_v in by_version.items():
        print(f"\nserver CPU per call, us, {version} API (median of {args.rounds} rounds x {args.calls} calls; wall beside it)")
        for k, v in srv_v.items():
            print(f"  {k:40s} {v['cpu_us']:8.1f}  (min {v['cpu_min_us']:7.1f})  wall {v['wall_us']:8.1f}"
                  f"  WAL {v['wal_bytes']:6.0f} B")
        ratio = lambda a, b: srv_v[a]["cpu_us"] / srv_v[b]["cpu_us"]  # noqa: E731
        print(f"  facts_newest / plain scan:   {ratio('facts_newest, 50 rows', 'plain SQL, same scan'):.2f}x  (goal <= 1.5x)")
        print(f"  fact_add / plain INSERT:     {ratio('fact_add + vector', 'plain INSERT ON CONFLICT + vector'):.2f}x  (goal <= 1.5x)")
        print(f"  re-add / plain SELECT:       {ratio('fact_add, re-add (idempotent)', 'plain SELECT by key'):.2f}x"
              f"  (with its vector: {ratio('fact_add, re-add with its vector', 'plain SELECT by key'):.2f}x)")
        print(f"  supersede / its writes:      {ratio('fact_supersede (by id)', 'plain INSERT + UPDATE (its writes)'):.2f}x")
        print(f"  supersede / durable INSERT:  {ratio('fact_supersede (by id)', 'durable one-row INSERT'):.2f}x  "
              f"(its writes: {ratio('plain INSERT + UPDATE (its writes)', 'durable one-row INSERT'):.2f}x)")
    if versions:
        print("\nnew / old API, server CPU per call (medians; the plain SQL rows show the noise)")
        for k in srv:
            print(f"  {k:40s} {by_version['new'][k]['cpu_us'] / by_version['old'][k]['cpu_us']:6.2f}x")
    print(f"\nfrom Python, one connection, wall us (p50, p99 over {args.rounds} rounds x {args.calls} calls)")
    for k, v in py.items():
        if "p50_us" in v:
            print(f"  {k:40s} {v['p50_us']:8.1f}  p99 {v['p99_us']:8.1f}")
    pr = lambda a, b: py[a]["p50_us"] / py[b]["p50_us"]  # noqa: E731
    print(f"  retrieve(limit=50) / floor:  {pr('Memory.retrieve(limit=50)', 'floor (prepared SELECT 1, direct)'):.2f}x  (goal <= 2x)")
    print(f"  (prepared: {pr('Memory.retrieve(limit=50), prepared', 'floor (prepared SELECT 1, direct)'):.2f}x)")
    print(f"  update / durable INSERT:     {pr('Memory.update (supersede)', 'durable one-row INSERT'):.2f}x  (goal <= 1.3x)")
    print(f"  (prepared: {pr('Memory.update (supersede), prepared', 'durable one-row INSERT'):.2f}x)")
    for k, v in py.items():
        if "facts_per_s" in v:
            print(f"  {k:40s} {v['facts_per_s']:8,.0f} facts/s  (goal >= 2,500)")
    print(f"\ncommand: {common.command_line('bench/wrappers.py', argv)}")
    return {"server_cpu": by_version, "python": py}


if __name__ == "__main__":
    main()
