"""The statements one delegated call runs on the workers of a Citus cluster, from
pg_stat_statements (which the workers must preload: shared_preload_libraries = 'citus,
pg_stat_statements', pg_stat_statements.track = all, track_planning = on, and the extension
created in a database without Citus on each worker, here one named `stats`).

    python statements.py "<coordinator dsn of the pymem database>" "<worker dsn>,<worker dsn>" turn_record|fact_add|newest50

Runs 5 calls, resets the statistics, runs 20 calls of bench/citus_cost.py's probe (project
'cost', user 'cost-probe'), then prints per worker the nested statements per call and each
statement's calls per call, plans, total plan and execution time (ms over the 20 calls).
"""
import sys
import time
from pathlib import Path

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from pymem.embedders import HashEmbedder  # noqa: E402

coordinator, workers, which = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
database = psycopg.conninfo.conninfo_to_dict(coordinator)["dbname"]
co = psycopg.connect(coordinator, autocommit=True)
register_vector(co)
emb = HashEmbedder()
tv = [Vector(v) for v in emb.embed(["benchmark question", "benchmark answer"])]
N = 20


def call(i: int) -> None:
    if which == "fact_add":
        co.execute("SELECT * FROM pymem.fact_add(scope => 'user', scope_id => 'cost-probe', content => %s, "
                   "project_id => 'cost')", (f"probe fact {time.time()} {i}",)).fetchall()
    elif which == "turn_record":
        co.execute("SELECT * FROM pymem.turn_record(user_id => 'cost-probe', thread_id => %s, project_id => 'cost', "
                   "user_content => %s, assistant_content => %s, embedder => %s, user_embedding => %s, "
                   "assistant_embedding => %s)",
                   (f"st-{int(time.time())}", f"question {i}", f"answer {i}", emb.name, tv[0], tv[1])).fetchall()
    else:
        co.execute("SELECT * FROM pymem.facts_newest('user', 'cost-probe', 'cost', max_facts => 50)").fetchall()


for i in range(5):
    call(i)
for w in workers:
    with psycopg.connect(make_conninfo(w, dbname="stats"), autocommit=True) as c:
        c.execute("SELECT pg_stat_statements_reset()")
for i in range(N):
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
    print(f"worker {w}: nested statements per call {sum(r[0] for r in rows if not r[4]) / N:.1f}")
    for r in rows:
        print(f"{r[0] / N:6.2f}/call plans {r[1]:4d} plan {r[2]:7} exec {r[3]:8} top={r[4]} {r[5]}")
