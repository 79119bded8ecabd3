"""Where an idempotent re-add's time goes (issue 60, item 1), in CPU time: the client's (this
thread's ``time.thread_time_ns``) and the server's (``/proc/<backend pid>/schedstat``), per call,
so that other work on a shared machine disturbs the figures less than it does wall times.

    PYMEM_DATA_DIR=/tmp/bench-readd python bench/readd_cost.py [--users 2000] [--rounds 9] [--calls 200]

A scratch database (``pymem_readd_bench``) with ``--users`` users x 10 facts (384-d HashEmbedder
vectors), then, in alternating rounds of ``--calls`` calls on one connection each:

- **plain lookup**: the prepared ``SELECT id FROM pymem.facts WHERE <subject> AND content_key =
  pymem.fact_key(%s) AND superseded_by IS NULL`` (seed_store.py's re-add floor);
- **fact_lookup** / **fact_add, no vector** / **fact_add, vector**: the named queries pymem sends,
  with their parameters built beforehand (the SQL functions' cost: tenant, checks, row-level
  security);
- **persist, asks first** / **persist, embeds**: ``Memory.persist`` of a fact that is there,
  through the same HashEmbedder's vectors declared costly (a model's path: a ``fact_lookup`` and
  no embedding) and as it is, cheap (the vector embedded and sent with ``fact_add``, one
  statement for a new fact and a re-add alike);
- **embed**: ``runner.vectors`` of the text alone (the embedding a re-add would not store);
- **fact_add, vector, direct**: the same statement on a direct connection (no pool, tuple rows:
  what psycopg alone costs the call); **fact_add, vector, db.query**: through ``Database.query``
  (the pool checkout written out, dict rows: what every pymem call goes through); **fact_add,
  vector, old db.query**: through ``Database.connection()``'s three context managers, as
  ``Database.query`` sent it before issue 60.

``--pin``: this process and the two server backends on one CPU. On a 2-core VM shared with
other work, a call's wall time otherwise depends on whether the client and the server wake on
the same core (a prepared ``SELECT 1`` took 16 or 87 us by that alone, minutes apart); with
one CPU the wall times are steadier and add up to the CPU times.

Prints client, server and total CPU per call (medians over rounds) and wall p50, each total
beside the plain lookup's. Nothing here asserts a duration.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from bench import common  # noqa: E402
from pymem import runner  # noqa: E402
from pymem.connection import execute, register_types, type_infos  # noqa: E402
from pymem.facts import FactWrite  # noqa: E402
from pymem.queries import Q  # noqa: E402
from pymem.types import Query  # noqa: E402

DB = "pymem_readd_bench"
PLAIN = ("SELECT f.id FROM pymem.facts AS f WHERE f.project_id = '' AND f.scope = 'user' AND f.scope_id = %s "
         "AND f.content_key = pymem.fact_key(%s) AND f.superseded_by IS NULL")



class _Costly(pymem.HashEmbedder):
    """The HashEmbedder's vectors under its name, declared costly as a model's: persist asks first."""

    cheap = False

def user(i: int) -> str:
    return f"user-{i:05d}"


def content(u: int, j: int) -> str:
    return f"fact {j} about {user(u)}: prefers item {(u * 31 + j) % 997} in colour {j % 7}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a local server to create the scratch database on (default: PYMEM_DSN, else the "
                                  "embedded one)")
    ap.add_argument("--users", type=common.positive, default=2000)
    ap.add_argument("--rounds", type=common.positive, default=9)
    ap.add_argument("--calls", type=common.positive, default=200, help="calls per case and round")
    ap.add_argument("--pin", action="store_true", help="this process and the server backends on one CPU")
    ap.add_argument("--results-dir", help="where the JSON result goes (default bench/results)")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"re-add cost on {where}")
    dsn = common.scratch_database(conninfo, DB)
    embedder = pymem.HashEmbedder()
    n = args.users
    db = pymem.Database(pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1))
    try:
        mem = pymem.Memory(agent_id="bench", db=db, embedder=embedder)
        asks = pymem.Memory(agent_id="bench", db=db, embedder=_Costly())
        for u in range(n):
            mem.persist_many([content(u, j) for j in range(10)], user=user(u))
        with db.connection() as c:
            c.execute("ANALYZE pymem.facts")
            c.execute("ANALYZE pymem.fact_embeddings")
            pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]  # the pool's one connection
        direct = psycopg.connect(dsn, autocommit=True)
        register_types(direct, type_infos(direct))
        direct_pid = direct.execute("SELECT pg_backend_pid()").fetchone()[0]
        if args.pin:
            cpu = min(os.sched_getaffinity(0))
            for p in (0, pid, direct_pid):
                os.sched_setaffinity(p, {cpu})

        def text(i: int) -> str:
            return content(i % n, i % 10)

        def params(i: int, vector: bool) -> dict[str, Any]:
            return {"scope": "user", "scope_id": user(i % n), "content": text(i), "project_id": "",
                    "write": FactWrite().checked(), "max_learned": 200,
                    "embedding": vectors[i % n] if vector else None, "embedder": embedder.name if vector else None}

        vectors = {i: runner.vectors(embedder, [text(i)])[0] for i in range(n)}
        lookup = {i: {k: v for k, v in params(i, True).items()
                      if k != "embedding"} for i in range(n)}
        adds = {i: params(i, True) for i in range(n)}
        adds_novec = {i: params(i, False) for i in range(n)}

        def sql(statement: str, args_of: Any) -> Any:
            def call(i: int) -> None:
                with db.connection() as c:
                    c.execute(statement, args_of(i), prepare=True).fetchall()
            return call

        def through_connection(i: int) -> None:  # Database.query before issue 60
            with db.connection() as c:
                execute(c, "fact_add", adds[i % n], db.settings)

        def persist(m: Any) -> Any:
            def call(i: int) -> None:
                m.persist(text(i), user=user(i % n))
            return call

        cases = {
            "plain lookup": sql(PLAIN, lambda i: (user(i % n), text(i))),
            "fact_lookup": sql(Q["fact_lookup"], lambda i: lookup[i % n]),
            "fact_add, no vector": sql(Q["fact_add"], lambda i: adds_novec[i % n]),
            "fact_add, vector": sql(Q["fact_add"], lambda i: adds[i % n]),
            "persist, asks first": persist(asks),
            "persist, embeds": persist(mem),
            "embed": lambda i: runner.vectors(embedder, [text(i)]),
            "fact_add, vector, direct": lambda i: direct.execute(Q["fact_add"], adds[i % n], prepare=True).fetchall(),
            "fact_add, vector, db.query": lambda i: db.query(Query("fact_add", adds[i % n])),
            "fact_add, vector, old db.query": through_connection,
        }

        def server_ns() -> int:  # both backends: each case uses one of them
            return sum(int(Path(f"/proc/{p}/schedstat").read_text().split()[0]) for p in (pid, direct_pid))

        client: dict[str, list[float]] = {k: [] for k in cases}
        server: dict[str, list[float]] = {k: [] for k in cases}
        wall: dict[str, list[int]] = {k: [] for k in cases}
        for r in range(args.rounds + 1):  # round 0 warms up (and prepares the statements)
            for name, fn in cases.items():
                s0, c0 = server_ns(), time.thread_time_ns()
                for j in range(args.calls):
                    t0 = time.perf_counter_ns()
                    fn(r * args.calls + j)
                    if r:
                        wall[name].append(time.perf_counter_ns() - t0)
                if r:
                    client[name].append((time.thread_time_ns() - c0) / args.calls / 1000)
                    server[name].append((server_ns() - s0) / args.calls / 1000)
        direct.close()
    finally:
        db.close()
    table = {}
    for name in cases:
        cl, sv = statistics.median(client[name]), statistics.median(server[name])
        if name == "embed":
            sv = 0.0
        table[name] = {"client_cpu_us": round(cl, 1), "server_cpu_us": round(sv, 1), "cpu_us": round(cl + sv, 1),
                       "wall_p50_us": round(statistics.median(wall[name]) / 1000, 1)}
    floor = table["plain lookup"]["cpu_us"]
    print(f"{'call':22} {'client CPU us':>14} {'server CPU us':>14} {'total':>8} {'/ plain':>8} {'wall p50 us':>12}")
    for name, v in table.items():
        print(f"{name:22} {v['client_cpu_us']:14.1f} {v['server_cpu_us']:14.1f} {v['cpu_us']:8.1f} "
              f"{v['cpu_us'] / floor:7.2f}x {v['wall_p50_us']:12.1f}")
    print("command: " + common.command_line("bench/readd_cost.py", argv))
    result = {"table": table, "args": vars(args), "git": common.git_revision()}
    return common.finish("readd_cost", result, write=True, results_dir=args.results_dir, where=where)


if __name__ == "__main__":
    main()
