"""Three writes of issue 35 (fact_add, fact_supersede, turn_record) context_read and facts_newest on two databases (two
schema versions: old and new) through one server or one Citus coordinator, in alternating
rounds: wall time per call, median of the rounds, and new / old.

    python write_ab.py "<old dsn>" "<new dsn>" [calls per round] [rounds]

Each round of a database: N fact_add of user 'ab' in project 'ab' (a new fact each), then N
fact_supersede of those facts, then N turn_record (two messages, two 384-d HashEmbedder vectors,
50 turns per thread), then N context_read of the user (hybrid recall over the turns so far: the
same writes on both databases), then N facts_newest of the user (50 facts). Autocommit, one statement per call (what Citus delegates). Nothing here
asserts a duration.
"""
import statistics
import sys
import time
from pathlib import Path

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from pymem.embedders import HashEmbedder  # noqa: E402

old, new = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 50
R = int(sys.argv[4]) if len(sys.argv) > 4 else 7
emb = HashEmbedder()
tv = [Vector(v) for v in emb.embed(["benchmark question", "benchmark answer"])]
conns = {}
for name, dsn in (("old", old), ("new", new)):
    c = psycopg.connect(dsn, autocommit=True)
    register_vector(c)
    conns[name] = c

ADD = "SELECT id FROM pymem.fact_add(scope => 'user', scope_id => 'ab', content => %s, project_id => 'ab')"
SUPERSEDE = ("SELECT * FROM pymem.fact_supersede(id => %s, new_content => %s, scope => 'user', scope_id => 'ab', "
             "project_id => 'ab')")
TURN = ("SELECT * FROM pymem.turn_record(user_id => 'ab', thread_id => %s, project_id => 'ab', user_content => %s, "
        "assistant_content => %s, embedder => %s, user_embedding => %s, assistant_embedding => %s)")
CONTEXT = ("SELECT pymem.context_read(user_id => 'ab', agent_id => 'ab-agent', project_id => 'ab', query_vector => %s, "
           "embedder => %s, query_text => %s)")
qv = Vector(emb.embed(["what about the garden"])[0])
NEWEST = "SELECT * FROM pymem.facts_newest('user', 'ab', 'ab', max_facts => 50)"
CALLS = ("fact_add", "supersede", "turn_record", "context_read", "newest50")
wall = {(n, k): [] for n in conns for k in CALLS}
stamp = int(time.time())
for r in range(R + 1):  # round 0 warms up
    for name in (list(conns) if r % 2 else list(conns)[::-1]):
        c = conns[name]
        ids, t = [], {}
        w0 = time.perf_counter()
        for i in range(N):
            ids.append(c.execute(ADD, (f"fact {stamp} {r} {i} about the garden",)).fetchone()[0])
        t["fact_add"] = time.perf_counter() - w0
        w0 = time.perf_counter()
        for i, fid in enumerate(ids):
            c.execute(SUPERSEDE, (fid, f"fact {stamp} {r} {i} about the garden, corrected")).fetchall()
        t["supersede"] = time.perf_counter() - w0
        w0 = time.perf_counter()
        for i in range(N):
            c.execute(TURN, (f"t{stamp}-{r}-{i // 50}", f"question {r} {i} about the garden", f"answer {i} about tomatoes",
                             emb.name, tv[0], tv[1])).fetchall()
        t["turn_record"] = time.perf_counter() - w0
        w0 = time.perf_counter()
        for i in range(N):
            c.execute(CONTEXT, (qv, emb.name, "what about the garden")).fetchall()
        t["context_read"] = time.perf_counter() - w0
        w0 = time.perf_counter()
        for i in range(N):
            c.execute(NEWEST).fetchall()
        t["newest50"] = time.perf_counter() - w0
        if r:
            for k in CALLS:
                wall[(name, k)].append(t[k] / N * 1000)
print("| call | old ms | new ms | new / old |")
print("|---|--:|--:|--:|")
for k in CALLS:
    o, n = statistics.median(wall[("old", k)]), statistics.median(wall[("new", k)])
    print(f"| {k} | {o:.3f} | {n:.3f} | {n / o:.2f}x |")
