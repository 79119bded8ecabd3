"""The statements one delegated call runs on the workers of a Citus cluster, from
pg_stat_statements: bench/citus_cost.py's calls of its probe (load the data with it first).
The workers must preload pg_stat_statements (shared_preload_libraries = 'citus,
pg_stat_statements', pg_stat_statements.track = all, track_planning = on) and have the
extension in a database without Citus, here one named `stats`.

    python statements.py "<coordinator dsn>" "<worker dsn>,<worker dsn>" context_read|turn_record|newest50|fact_add|supersede

Runs 5 calls, resets the statistics, runs 20 calls, then prints per worker the nested statements
per call and each statement's calls per call, plans, total plan and execution time (ms over the
20 calls). Nothing here asserts a duration.
"""
import sys
import time
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector
from psycopg.conninfo import conninfo_to_dict, make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.citus_cost import calls  # noqa: E402
from pymem.embedders import HashEmbedder  # noqa: E402

coordinator, workers, which = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
database = conninfo_to_dict(coordinator)["dbname"]
co = psycopg.connect(coordinator, autocommit=True)
register_vector(co)
call = calls(co, HashEmbedder(), f"st{int(time.time())}")[which]
N = 20

for i in range(5):
    call(i)
for w in workers:
    with psycopg.connect(make_conninfo(w, dbname="stats"), autocommit=True) as c:
        c.execute("SELECT pg_stat_statements_reset()")
for i in range(5, 5 + N):
    call(i)
for w in workers:
    with psycopg.connect(make_conninfo(w, dbname="stats"), autocommit=True) as c:
        rows = c.execute(
            """SELECT calls, plans, round(total_plan_time::numeric, 2), round(total_exec_time::numeric, 2), toplevel,
                      left(regexp_replace(query, '\\s+', ' ', 'g'), 150)
                 FROM pg_stat_statements
                WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s) AND query NOT LIKE '%%pg_stat_statements%%'
                ORDER BY calls DESC, total_exec_time DESC""", (database,)).fetchall()
    if not rows:
        continue
    nested = sum(r[0] for r in rows if not r[4])
    print(f"worker {w}: nested statements per call {nested / N:.1f}")
    for calls_, plans, plan_ms, exec_ms, top, text in rows:
        print(f"  {calls_ / N:5.2f}/call plans {plans:4d} plan {plan_ms:7.2f} exec {exec_ms:8.2f} top={top} {text}")
