"""Cost of one call on two databases holding the same data, side by side (an A/B of two schema
versions: e.g. before and after a change to recall), in alternating rounds on one machine.

    # the same data in both (same seed), each on the schema under test
    PYMEM_DATA_DIR=/tmp/cost-old python bench/conversations.py --messages 100000 --fresh --no-hnsw  # at the old commit
    PYMEM_DATA_DIR=/tmp/cost-new python bench/conversations.py --messages 100000 --fresh --no-hnsw  # at the new one
    python bench/ab_cost.py /tmp/cost-old /tmp/cost-new [--rounds 9] [--calls 30] [--writes]

For each database it calls context_read for the benchmark's 1,000-message probe with the query's
vector (what both schemas accept), and on the newer one also with the query's text (hybrid, the
default of Memory) and with its text at lexical weight 0 (hybrid off: the text is not read). It reports per call the server's CPU time (from /proc/<backend pid>/schedstat:
what the backend itself ran, less disturbed by other load on a shared machine than wall time) and
the wall time, median and minimum over rounds, and the ratios. With --writes, also on both:
turn_record (the probe's texts with their vectors, into a thread of a user of its own, a new
thread each round), fact_add (a new fact with its vector, for a subject of its own), its idempotent
re-add (the same fact and vector again: the warm-up round adds them), fact_add with a
ttl (the write's attributes flat before 0051_fact_write, one fact write since) and fact_supersede
(a new version of the newest version, without a vector). Needs both servers on this machine
(embedded, started on demand). Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from bench.conv.config import AGENT_ID  # noqa: E402
from bench.conv.texts import PROBE_QUERIES  # noqa: E402
from pymem.connection import resolve_conninfo  # noqa: E402
from pymem.embedders import HashEmbedder  # noqa: E402

TURN = ("SELECT * FROM pymem.turn_record(user_id => 'ab-writer', user_content => %(t)s, assistant_content => %(t)s, "
        "thread_id => %(th)s, project_id => 'acme', embedder => %(e)s, user_embedding => %(v)s, assistant_embedding => %(v)s)")
FACT = ("SELECT pymem.fact_add(scope => 'user', scope_id => 'ab-facts', content => %(c)s, project_id => 'acme', "
        "embedding => %(v)s, embedder => %(e)s)")
# an idempotent re-add of a fact there already, with its vector (the first round, a warm-up, adds it)
READD = ("SELECT pymem.fact_add(scope => 'user', scope_id => 'ab-readd', content => %(k)s, project_id => 'acme', "
         "embedding => %(v)s, embedder => %(e)s)")
# a new version of the subject's newest fact (a chain: each call supersedes the previous call's)
SUPERSEDE = ("SELECT pymem.fact_supersede(scope => 'user', scope_id => 'ab-versions', new_content => %(c)s, "
             "old_content => %(prev)s, project_id => 'acme')")
# a fact with an expiry: flat before 0051_fact_write, in one fact write since
FACT_TTL = ("SELECT pymem.fact_add(scope => 'user', scope_id => 'ab-expiring', content => %(c)s, project_id => 'acme', "
            "{ttl})")
CONTEXT = ("SELECT pymem.context_read(user_id => 'probe', agent_id => %(a)s, project_id => 'acme', "
           "thread_id => 'default', query_vector => %(v)s, embedder => %(e)s, max_facts => 50{x})")
# the recall knobs: flat before 0006_v0_2_0_memory, one recall spec since
KNOBS = "window_size => 20, k => 5"
TEXT = ", query_text => %(t)s"


def context_sql(spec: bool, text: bool = False, knobs: str = "") -> str:
    """context_read with the query's vector (and its text), recall's knobs in the form the schema takes."""
    knobs = KNOBS + knobs
    return CONTEXT.format(x=(TEXT if text else "") + (f", recall => pymem.recall({knobs})" if spec else f", {knobs}"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old_data_dir")
    ap.add_argument("new_data_dir")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--old-hybrid", action="store_true", help="also the old schema's hybrid call (vector + text)")
    ap.add_argument("--named-time", action="store_true", help="also the new schema's hybrid call naming a time")
    ap.add_argument("--writes", action="store_true",
                    help="also turn_record, fact_add, its re-add, fact_add with a ttl and fact_supersede on both")
    args = ap.parse_args(argv)
    conns, pids = {}, {}
    for name, d in (("old", args.old_data_dir), ("new", args.new_data_dir)):
        c = psycopg.connect(resolve_conninfo(pymem.Settings(data_dir=d)), autocommit=True)
        register_vector(c)
        c.execute("SET plan_cache_mode = force_generic_plan")
        conns[name], pids[name] = c, c.execute("SELECT pg_backend_pid()").fetchone()[0]
    spec = {name: c.execute("SELECT 'recall' = ANY (proargnames) FROM pg_catalog.pg_proc "
                            "WHERE oid = 'pymem.context_read'::regproc").fetchone()[0] for name, c in conns.items()}
    write = {name: c.execute("SELECT 'write' = ANY (proargnames) FROM pg_catalog.pg_proc "
                             "WHERE oid = 'pymem.fact_add'::regproc").fetchone()[0] for name, c in conns.items()}
    emb = HashEmbedder()
    vecs = [np.asarray(emb.embed([q])[0], dtype=np.float32) for q in PROBE_QUERIES]
    cases = [("old: context_read, vector", "old", context_sql(spec["old"])),
             ("new: context_read, vector", "new", context_sql(spec["new"])),
             ("new: context_read, vector + text", "new", context_sql(spec["new"], text=True)),
             # hybrid turned off (the text not read: the vector's cost)
             ("new: context_read, text, lw 0", "new", context_sql(spec["new"], text=True, knobs=", lexical_weight => 0"))]
    if args.old_hybrid:  # the old schema takes query_text too (since 0006_v0_2_0_memory)
        cases.insert(1, ("old: context_read, vector + text", "old", context_sql(spec["old"], text=True)))
    if args.named_time:  # a question naming a time (0006_v0_2_0_memory): the last 7 days
        cases.append(("new: context_read, vector + text + time", "new", context_sql(
            spec["new"], text=True, knobs=", time_from => now() - interval '7 days', time_to => now()")))

    if args.writes:
        cases += [(f"{db}: {name}", db, sql) for name, sql in (("turn_record", TURN), ("fact_add", FACT),
                                                               ("fact_add, re-add", READD)) for db in ("old", "new")]
        ttl = {db: "write => pymem.fact_write(ttl => '1 day')" if write[db] else "ttl => '1 day'" for db in ("old", "new")}
        cases += [(f"{db}: fact_add, ttl", db, FACT_TTL.format(ttl=ttl[db])) for db in ("old", "new")]
        cases += [(f"{db}: fact_supersede", db, SUPERSEDE) for db in ("old", "new")]
        for c in conns.values():  # the first version of each chain
            c.execute("SELECT pymem.fact_add('user', 'ab-versions', %s, 'acme')", (f"ab version {time.time_ns()} start",))

    def cpu_ns(db: str) -> int:
        return int(Path(f"/proc/{pids[db]}/schedstat").read_text().split()[0])

    token = time.time_ns()  # the writes' threads and facts are new in every run
    prev = {db: c.execute("SELECT content FROM pymem.facts WHERE project_id = 'acme' AND scope_id = 'ab-versions' "
                          "AND superseded_by IS NULL ORDER BY id DESC LIMIT 1").fetchone() for db, c in conns.items()}
    cpu: dict[str, list[float]] = {n: [] for n, _, _ in cases}
    wall: dict[str, list[float]] = {n: [] for n, _, _ in cases}
    for r in range(args.rounds + 1):
        for name, db, sql in cases:
            c0, t0 = cpu_ns(db), time.perf_counter_ns()
            for i in range(args.calls):
                p = {"a": AGENT_ID, "v": vecs[i % len(vecs)], "e": emb.name, "t": PROBE_QUERIES[i % len(PROBE_QUERIES)],
                     "th": f"ab-{token}-{r}", "c": f"ab fact {token} {r}-{i}", "prev": prev[db] and prev[db][0],
                     "k": f"ab re-add {token} {i}"}
                conns[db].execute(sql, p, prepare=True).fetchall()
                if sql is SUPERSEDE:
                    prev[db] = (p["c"],)
            if r:  # the first round warms up
                cpu[name].append((cpu_ns(db) - c0) / args.calls / 1e6)
                wall[name].append((time.perf_counter_ns() - t0) / args.calls / 1e6)
    def median(name: str) -> float:
        return sorted(cpu[name])[len(cpu[name]) // 2]

    # the ratio to the old schema's same call where there is one, else to the first case
    print(f"{'call':36s} {'server CPU ms (median, min)':>28s} {'wall ms':>9s} {'CPU ratio':>10s}")
    for name, _, _ in cases:
        c, w = sorted(cpu[name]), sorted(wall[name])
        old = "old:" + name.split(":", 1)[1]
        base = median(old if old in cpu else cases[0][0])
        print(f"{name:36s} {c[len(c) // 2]:14.3f} {c[0]:12.3f} {w[len(w) // 2]:9.3f} {c[len(c) // 2] / base:9.2f}x")
    print(f"\ncommand: python bench/ab_cost.py {args.old_data_dir} {args.new_data_dir} --rounds {args.rounds} --calls {args.calls}"
          + (" --old-hybrid" if args.old_hybrid else "") + (" --named-time" if args.named_time else "") + (" --writes" if args.writes else ""))


if __name__ == "__main__":
    main()
