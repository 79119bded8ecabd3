"""turn_record on two databases (two schema versions: old and new) through one server or one
Citus coordinator, in alternating rounds: the backend's CPU per call (/proc/<pid>/schedstat; on a
cluster that is the coordinator's share only) and the wall time per call, median of the rounds.

    python turn_ab.py "<old dsn>" "<new dsn>" [calls per round] [rounds]

Each call writes one turn (two messages, two 384-d HashEmbedder vectors) of user 'ab' in project
'ab', 50 turns per thread. Nothing here asserts a duration.
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
N = int(sys.argv[3]) if len(sys.argv) > 3 else 100
R = int(sys.argv[4]) if len(sys.argv) > 4 else 7
emb = HashEmbedder()
tv = [Vector(v) for v in emb.embed(["benchmark question", "benchmark answer"])]
conns = {}
for name, dsn in (("old", old), ("new", new)):
    c = psycopg.connect(dsn, autocommit=True)
    register_vector(c)
    conns[name] = (c, c.execute("SELECT pg_backend_pid()").fetchone()[0])


def cpu(pid: int) -> float:
    try:
        return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e6
    except OSError:  # a server on another machine
        return float("nan")


Q = ("SELECT * FROM pymem.turn_record(user_id => 'ab', thread_id => %s, project_id => 'ab', user_content => %s, "
     "assistant_content => %s, embedder => %s, user_embedding => %s, assistant_embedding => %s)")
res = {n: [] for n in conns}
wall = {n: [] for n in conns}
stamp = int(time.time())
for r in range(R + 1):  # round 0 warms up
    for name in (list(conns) if r % 2 else list(conns)[::-1]):
        c, pid = conns[name]
        t0, w0 = cpu(pid), time.perf_counter()
        for i in range(N):
            c.execute(Q, (f"t{stamp}-{r}-{i // 50}", f"question {r} {i} about the garden", f"answer {i} about tomatoes",
                          emb.name, tv[0], tv[1])).fetchall()
        if r:
            res[name].append((cpu(pid) - t0) / N)
            wall[name].append((time.perf_counter() - w0) / N * 1000)
for n in conns:
    print(f"{n}: backend CPU {statistics.median(res[n]):.3f} ms, wall {statistics.median(wall[n]):.3f} ms "
          f"(min {min(wall[n]):.3f}) per call")
print(f"new / old: backend CPU {statistics.median(res['new']) / statistics.median(res['old']):.2f}x, "
      f"wall {statistics.median(wall['new']) / statistics.median(wall['old']):.2f}x")
