"""Server CPU per row of the ingest calls on two databases (an A/B of two schema versions), in
alternating rounds on one machine, beside the floor: a plain INSERT ... SELECT FROM unnest of the
same rows (trim and key computed, triggers firing) as pymem's owner role.

    # two databases on one server: one migrated at the old commit, one at the new
    python bench/ab_ingest.py 'host=/tmp/x dbname=ab_old' 'host=/tmp/x dbname=ab_new' [--rounds 7] [--rows 1000]

Both databases get the same 50,000 facts (project bench-ab, 3,000 subjects) once, so that every
lookup runs against a realistic index. Every measured call runs in a transaction that is rolled
back, so both databases stay the same size. Cases, per call of --rows rows: facts_add_many into
--rows fresh subjects, into 10 subjects, the idempotent re-add of facts already stored, the same
with 384-d vectors; messages_add_many into a fresh thread, with vectors; and fact_add /
message_add one row per call (CPU per row). CPU is the backend's own (/proc/<pid>/schedstat),
median and minimum over rounds; rows/s is 1 / (CPU per row): what one connection could reach
with the client and network taking no time. Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pymem.embedders import HashEmbedder  # noqa: E402

PROJECT = "bench-ab"
ADD_MANY = "SELECT count(*) FROM pymem.facts_add_many('user', %(s)s::text[], %(c)s::text[], project_id => %(p)s{x})"
MSG_MANY = ("SELECT count(*) FROM pymem.messages_add_many(%(u)s, 'import', %(r)s::text[], %(c)s::text[], "
            "project_id => %(p)s{x})")
VEC = ", embeddings => %(v)b, embedder => %(e)s"  # binary, as pymem sends them (sql/queries.sql)
FLOOR = """INSERT INTO pymem.facts (project_id, scope, scope_id, content, content_key)
           SELECT %(p)s, 'user', u.s, pymem._fact_trim(u.c), pymem.fact_key(pymem._fact_trim(u.c))
             FROM unnest(%(s)s::text[], %(c)s::text[]) AS u(s, c)"""
MSG_FLOOR = """INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content)
               SELECT %(p)s, %(u)s, 'import', u.i, u.r, u.c
                 FROM unnest(%(r)s::text[], %(c)s::text[]) WITH ORDINALITY AS u(r, c, i)"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old_dsn")
    ap.add_argument("new_dsn")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--single", type=int, default=200)
    ap.add_argument("--only", help="run only the cases whose name contains this")
    args = ap.parse_args(argv)
    n = args.rows
    emb = HashEmbedder()
    conns, pids = {}, {}
    for name, dsn in (("old", args.old_dsn), ("new", args.new_dsn)):
        c = psycopg.connect(dsn, autocommit=True)
        register_vector(c)
        conns[name], pids[name] = c, c.execute("SELECT pg_backend_pid()").fetchone()[0]
        if not c.execute("SELECT count(*) FROM pymem.facts WHERE project_id = %s", (PROJECT,)).fetchone()[0]:
            for b in range(50):
                ids = range(b * 1000, b * 1000 + 1000)
                c.execute(ADD_MANY.format(x=""), {"s": [f"pre{i % 3000:05d}" for i in ids], "p": PROJECT,
                                                   "c": [f"preload fact {i} about item {i * 31 % 9973}" for i in ids]})
            c.execute("ANALYZE pymem.facts")
    stored = ([f"pre{i % 3000:05d}" for i in range(n)], [f"preload fact {i} about item {i * 31 % 9973}" for i in range(n)])

    def cpu_ns(db: str) -> int:
        return int(Path(f"/proc/{pids[db]}/schedstat").read_text().split()[0])

    def fresh(k: int, subjects: int) -> dict:
        c = [f"r{k} fact {i}: the user mentioned item {i * 7919 % 100003} on day {i % 365}" for i in range(n)]
        return {"s": [f"r{k}s{i % subjects:05d}" for i in range(n)], "c": c, "p": PROJECT}

    def with_vectors(p: dict) -> dict:
        return p | {"v": [np.asarray(v, dtype=np.float32) for v in emb.embed(p["c"])], "e": emb.name}

    def messages(k: int) -> dict:
        c = [f"r{k} message {i}: we talked about item {i * 7919 % 100003} and day {i % 365}" for i in range(n)]
        return {"u": f"r{k}", "r": ["user", "assistant"] * (n // 2) + ["user"] * (n % 2), "c": c, "p": PROJECT}

    def singles(sql: str):
        def run(conn: psycopg.Connection, p: dict) -> None:
            for s, c in list(zip(p["s"], p["c"]))[: args.single]:
                conn.execute(sql, {"s": s, "c": c, "p": PROJECT, "u": s}, prepare=True).fetchone()
        return run

    def one(sql: str):
        return lambda conn, p: conn.execute(sql, p, prepare=True).fetchone()

    def floor(conn: psycopg.Connection, p: dict) -> None:
        conn.execute("SET LOCAL ROLE pymem_owner")  # forced row security applies to the owner, as in the functions
        conn.execute("SELECT pg_catalog.set_config('pymem.tenant', 'p:' || %s, true)", (PROJECT,))
        conn.execute(FLOOR, p)

    def message_floor(conn: psycopg.Connection, p: dict) -> None:
        conn.execute("SET LOCAL ROLE pymem_owner")
        conn.execute("SELECT pg_catalog.set_config('pymem.tenant', 'p:' || %s, true)", (PROJECT,))
        conn.execute("INSERT INTO pymem.threads (project_id, user_id, thread_id, last_seq) VALUES (%(p)s, %(u)s, 'import', %(n)s)",
                     p | {"n": len(p["c"])})
        conn.execute(MSG_FLOOR, p)

    # (name, databases, make parameters from a round number, call, rows per call)
    cases = [
        ("facts_add_many, fresh subjects", ("old", "new"), lambda k: fresh(k, n), one(ADD_MANY.format(x="")), n),
        ("facts_add_many, 10 subjects", ("old", "new"), lambda k: fresh(k, 10), one(ADD_MANY.format(x="")), n),
        ("facts_add_many, re-add", ("old", "new"), lambda k: {"s": stored[0], "c": stored[1], "p": PROJECT},
         one(ADD_MANY.format(x="")), n),
        ("facts_add_many + vectors", ("old", "new"), lambda k: with_vectors(fresh(k, n)), one(ADD_MANY.format(x=VEC)), n),
        ("floor: INSERT ... unnest", ("new",), lambda k: fresh(k, n), floor, n),
        ("messages_add_many", ("old", "new"), messages, one(MSG_MANY.format(x="")), n),
        ("floor: messages INSERT ... unnest", ("new",), messages, message_floor, n),
        ("messages_add_many + vectors", ("old", "new"), lambda k: with_vectors(messages(k)), one(MSG_MANY.format(x=VEC)), n),
        ("fact_add, one per call", ("old", "new"), lambda k: fresh(k, n),
         singles("SELECT id FROM pymem.fact_add('user', %(s)s, %(c)s, project_id => %(p)s)"), min(n, args.single)),
        ("message_add, one per call", ("old", "new"), lambda k: fresh(k, n),
         singles("SELECT pymem.message_add(%(u)s, %(c)s, project_id => %(p)s)"), min(n, args.single)),
    ]
    if args.only:
        cases = [c for c in cases if args.only in c[0]]
    cpu: dict[tuple[str, str], list[float]] = {}
    k = 0
    for r in range(args.rounds + 1):
        for name, dbs, params, call, rows in cases:
            for db in dbs:
                k += 1
                p = params(k)
                conn = conns[db]
                conn.execute("BEGIN")
                c0 = cpu_ns(db)
                call(conn, p)
                used = (cpu_ns(db) - c0) / rows / 1e3
                conn.execute("ROLLBACK")
                if r:  # the first round warms up
                    cpu.setdefault((name, db), []).append(used)
    print(f"{'case':34s} {'db':4s} {'CPU us/row (median, min)':>25s} {'rows/s':>8s} {'new/old':>8s}")
    for name, dbs, *_ in cases:
        for db in dbs:
            c = sorted(cpu[(name, db)])
            med = c[len(c) // 2]
            ratio = ""
            if db == "new" and (name, "old") in cpu:
                o = sorted(cpu[(name, "old")])
                ratio = f"{med / o[len(o) // 2]:7.2f}x"
            print(f"{name:34s} {db:4s} {med:12.1f} {c[0]:12.1f} {1e6 / med:8,.0f} {ratio:>8s}")
    print(f"\ncommand: python bench/ab_ingest.py OLD NEW --rounds {args.rounds} --rows {n} --single {args.single}"
          + (f" --only '{args.only}'" if args.only else ""))


if __name__ == "__main__":
    main()
