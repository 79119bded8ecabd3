"""What the security guarantees of docs/security.md cost the fact calls (issue 60): forced
row-level security and the tenant check at each call's entry, in one run on one server.

    PYMEM_DATA_DIR=/tmp/bench-guarantees python bench/guarantees.py [--users 2000] [--rounds 9] [--calls 200] [--pin]

Three scratch databases with the same data (``--users`` users x 10 facts with 384-d HashEmbedder
vectors, loaded once and copied): ``base`` as every database is; ``no_force_rls``, the same with
``NO FORCE ROW LEVEL SECURITY`` on every pymem table (the functions' owner then bypasses the
policies: what forced RLS costs); ``no_tenant_check``, whose ``_tenant_enter`` names the tenant
without asking ``tenant_allowed`` (what the check at entry costs; the policies still check).
Neither copy is a supported configuration: they exist to size the guarantees.

On each, the calls ``Memory.persist`` sends, prepared, with their parameters built beforehand, on
one autocommit connection per database: an idempotent re-add with its vector and without,
``fact_lookup`` (what persist asks first with a model's embedder), a new fact with its vector,
and a versioned supersede by id with the successor's vector (a chain per user of 200). The
databases take turns round by round (the order reversed every other round). Per call: the
server backend's CPU (``/proc/<pid>/schedstat``), this thread's CPU, and the wall time, medians
over rounds, and each database's ratio to ``base``. ``--pin``: this process and the three
backends on one CPU (on a 2-core VM shared with other work, a call's wall time otherwise depends
on whether the client and the server wake on the same core: a prepared ``SELECT 1`` took 16 or
87 us by that alone). The server must be on this machine. Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from bench import common  # noqa: E402
from pymem import runner  # noqa: E402
from pymem.facts import FactWrite  # noqa: E402
from pymem.queries import Q  # noqa: E402

DB = "pymem_guarantees"
VARIANTS = ("base", "no_force_rls", "no_tenant_check")
NO_FORCE = """DO $$DECLARE r record; BEGIN
  FOR r IN SELECT c.oid::regclass AS t FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'pymem' AND c.relforcerowsecurity LOOP
    EXECUTE format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', r.t);
  END LOOP; END$$"""
NO_CHECK = """CREATE OR REPLACE FUNCTION pymem._tenant_enter(project_id text) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pymem, pg_temp
AS $$ BEGIN PERFORM pg_catalog.set_config('pymem.tenant', 'p:' || project_id, true); END $$"""


def user(i: int) -> str:
    return f"user-{i:05d}"


def content(u: int, j: int) -> str:
    return f"fact {j} about {user(u)}: prefers item {(u * 31 + j) % 997} in colour {j % 7}"


def databases(conninfo: str, users: int) -> dict[str, str]:
    """``base`` loaded, then copied (CREATE DATABASE ... TEMPLATE) into the two variants."""
    base = common.scratch_database(conninfo, DB)
    db = pymem.Database(pymem.Settings(dsn=base, pool_min_size=1, pool_max_size=1))
    try:
        mem = pymem.Memory(agent_id="bench", db=db, embedder=pymem.HashEmbedder())
        for u in range(users + 200):
            mem.persist_many([content(u, j) for j in range(10)], user=user(u))
    finally:
        db.close()
    with psycopg.connect(base, autocommit=True) as c:
        c.execute("ANALYZE")
    dsns = {"base": base}
    with psycopg.connect(conninfo, autocommit=True) as admin:
        for v in VARIANTS[1:]:
            name = f"{DB}_{v}"
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {name} TEMPLATE {DB}")
            dsns[v] = make_conninfo(conninfo, dbname=name)
    with psycopg.connect(dsns["no_force_rls"], autocommit=True) as c:
        c.execute(NO_FORCE)
    with psycopg.connect(dsns["no_tenant_check"], autocommit=True) as c:
        c.execute(NO_CHECK)
    return dsns


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a local server to create the scratch databases on (default: PYMEM_DSN, else the "
                                  "embedded one)")
    ap.add_argument("--users", type=common.positive, default=2000)
    ap.add_argument("--rounds", type=common.positive, default=9)
    ap.add_argument("--calls", type=common.positive, default=200, help="calls per case, database and round")
    ap.add_argument("--pin", action="store_true", help="this process and the backends on one CPU")
    ap.add_argument("--results-dir", help="where the JSON result goes (default bench/results)")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"guarantees on {where}")
    dsns = databases(conninfo, args.users)
    embedder = pymem.HashEmbedder()
    n, stamp = args.users, int(time.time())
    vectors: dict[str, Any] = {}

    def vec(text: str) -> Any:
        if text not in vectors:
            vectors[text] = runner.vectors(embedder, [text])[0]
        return vectors[text]

    def add(text: str, u: str, vector: bool = True) -> dict[str, Any]:
        return {"scope": "user", "scope_id": u, "content": text, "project_id": "", "write": FactWrite().checked(),
                "max_learned": 200, "embedding": vec(text) if vector else None,
                "embedder": embedder.name if vector else None}

    def lookup(text: str, u: str) -> dict[str, Any]:
        return {k: v for k, v in add(text, u).items() if k != "embedding"}

    def supersede(text: str, u: str, old: int) -> dict[str, Any]:
        return {"scope": "user", "scope_id": u, "new_content": text, "id": old, "old_content": None,
                "project_id": "", "write": FactWrite().checked(keep_metadata=True),
                "embedding": vec(text), "embedder": embedder.name}

    def text(i: int) -> str:
        return content(i % n, i % 10)

    conns: dict[str, psycopg.Connection] = {}
    pids: dict[str, int] = {}
    cases: dict[str, dict[str, Any]] = {}
    for v, dsn in dsns.items():
        c = conns[v] = psycopg.connect(dsn, autocommit=True)
        register_vector(c)
        pids[v] = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        heads = {u: c.execute(Q["fact_add"], add(f"g{stamp} chain {u} v0", user(u))).fetchone()[0]
                 for u in range(n, n + 200)}

        def sup(i: int, c: psycopg.Connection = c, heads: dict[int, int] = heads) -> None:
            u = n + i % 200
            heads[u] = c.execute(Q["fact_supersede"], supersede(f"g{stamp} chain {u} v{i + 1}", user(u), heads[u]),
                                 prepare=True).fetchone()[0]

        cases[v] = {
            "re-add, vector": lambda i, c=c: c.execute(Q["fact_add"], add(text(i), user(i % n)), prepare=True).fetchall(),
            "re-add, no vector": lambda i, c=c: c.execute(Q["fact_add"], add(text(i), user(i % n), False),
                                                          prepare=True).fetchall(),
            "fact_lookup": lambda i, c=c: c.execute(Q["fact_lookup"], lookup(text(i), user(i % n)),
                                                    prepare=True).fetchall(),
            "new fact, vector": lambda i, c=c: c.execute(Q["fact_add"], add(f"g{stamp} new {i}", user(i % n)),
                                                         prepare=True).fetchall(),
            "supersede, vector": sup,
        }
    if args.pin:
        cpu = min(os.sched_getaffinity(0))
        for pid in (0, *pids.values()):
            os.sched_setaffinity(pid, {cpu})
    for i in range(n * 10):
        vec(text(i))

    def server_ns(v: str) -> int:
        return int(Path(f"/proc/{pids[v]}/schedstat").read_text().split()[0])

    names = list(cases["base"])
    server: dict[tuple[str, str], list[float]] = {(v, k): [] for v in dsns for k in names}
    client: dict[tuple[str, str], list[float]] = {(v, k): [] for v in dsns for k in names}
    wall: dict[tuple[str, str], list[int]] = {(v, k): [] for v in dsns for k in names}
    offset = 0
    for r in range(args.rounds + 1):  # round 0 warms up (and prepares the statements)
        for k in names:
            for j in range(offset, offset + args.calls):  # the new texts' vectors, outside the timing
                vec(f"g{stamp} new {j}")
                vec(f"g{stamp} chain {n + j % 200} v{j + 1}")
            for v in (VARIANTS if r % 2 else VARIANTS[::-1]):
                fn = cases[v][k]
                s0, c0 = server_ns(v), time.thread_time_ns()
                for j in range(offset, offset + args.calls):
                    t0 = time.perf_counter_ns()
                    fn(j)
                    if r:
                        wall[v, k].append(time.perf_counter_ns() - t0)
                if r:
                    server[v, k].append((server_ns(v) - s0) / args.calls / 1000)
                    client[v, k].append((time.thread_time_ns() - c0) / args.calls / 1000)
            offset += args.calls
    for c in conns.values():
        c.close()
    table: dict[str, dict[str, dict[str, float]]] = {}
    for k in names:
        table[k] = {}
        for v in dsns:
            table[k][v] = {"server_cpu_us": round(statistics.median(server[v, k]), 1),
                           "client_cpu_us": round(statistics.median(client[v, k]), 1),
                           "wall_p50_us": round(statistics.median(wall[v, k]) / 1000, 1)}
    print(f"{'call':20} {'database':16} {'server CPU us':>14} {'client CPU us':>14} {'wall p50 us':>12} "
          f"{'server / base':>14} {'wall / base':>12}")
    for k, row in table.items():
        b = row["base"]
        for v, x in row.items():
            print(f"{k:20} {v:16} {x['server_cpu_us']:14.1f} {x['client_cpu_us']:14.1f} {x['wall_p50_us']:12.1f} "
                  f"{x['server_cpu_us'] / b['server_cpu_us']:13.2f}x {x['wall_p50_us'] / b['wall_p50_us']:11.2f}x")
    print("command: " + common.command_line("bench/guarantees.py", argv))
    result = {"table": table, "args": vars(args), "git": common.git_revision()}
    return common.finish("guarantees", result, write=True, results_dir=args.results_dir, where=where)


if __name__ == "__main__":
    main()
