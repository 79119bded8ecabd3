"""Measures prototype.sql's proto.facts_newest (the local shard through a prepared statement)
beside pymem.facts_newest on the cluster and on the single server, alternating in rounds:

    python bench/reports/2026-12-04-citus-cost/prototype.py <cluster dsn> <single dsn>

Also checks that both give the same rows. Prints p50 per variant (ms)."""

from __future__ import annotations

import statistics
import sys
import time

import psycopg

cluster, single = sys.argv[1], sys.argv[2]
Q = "SELECT id FROM {}.facts_newest(scope => 'user', scope_id => 'cost-probe', project_id => 'cost', max_facts => 50)"
targets = {"single pymem": (single, "pymem"), "cluster pymem": (cluster, "pymem"), "cluster proto": (cluster, "proto")}
conns = {k: psycopg.connect(dsn, autocommit=True) for k, (dsn, _) in targets.items()}
rows = {k: conns[k].execute(Q.format(schema)).fetchall() for k, (_, schema) in targets.items()}
assert rows["cluster proto"] == rows["cluster pymem"] and len(rows["cluster pymem"]) == 50
times: dict[str, list[float]] = {k: [] for k in targets}
for r in range(11):
    for k, (_, schema) in targets.items():
        q = Q.format(schema)
        for _ in range(50):
            t = time.perf_counter()
            conns[k].execute(q).fetchall()
            if r:
                times[k].append((time.perf_counter() - t) * 1000)
for k, v in times.items():
    print(f"{k}: p50 {statistics.median(v):.3f} ms (n={len(v)})")
