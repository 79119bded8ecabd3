"""Server CPU per call of recall and context_read with and without a named time, on two databases
holding the same data (two schema versions), in alternating rounds: each call runs N times in a
PL/pgSQL loop on one connection per database, CPU from /proc/<backend pid>/schedstat.

    python ab_loop.py <PYMEM_DATA_DIR old> <PYMEM_DATA_DIR new> [calls] [rounds]

The data dirs hold bench/conversations.py's data (the 1,000-message probe of project acme, whose
messages span the year before the run); the named time is May 2026, about a twelfth of them.
Nothing here asserts a duration.
"""
import statistics
import sys

import psycopg

import pymem
from pymem.connection import resolve_conninfo

N = int(sys.argv[3]) if len(sys.argv) > 3 else 100
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 5
Q = "which hotel did I book in Kyoto"
PRE = ("(SELECT embedding FROM pymem.message_embeddings WHERE user_id = 'probe' AND project_id = 'acme' "
       "ORDER BY seq LIMIT 1 OFFSET 17)")
CTX = ("SELECT pymem.context_read(user_id => 'probe', agent_id => 'bench-agent', project_id => 'acme', "
       "thread_id => 'default', query_vector => v, embedder => 'hash-384-v1', max_facts => 50, window_size => 20, k => 5{x})")
REC = ("SELECT * FROM pymem.messages_recall(user_id => 'probe', query_vector => v, embedder => 'hash-384-v1', "
       "project_id => 'acme', k => 5, window_size => 20{x})")
TEXT = f", query_text => '{Q}'"
TIME = ", time_from => '2026-05-01', time_to => '2026-06-01'"
CASES = {
    "context_read vector": CTX.format(x=""),
    "context_read hybrid": CTX.format(x=TEXT),
    "context_read hybrid + named time": CTX.format(x=TEXT + TIME),
    "messages_recall hybrid": REC.format(x=TEXT),
    "messages_recall hybrid + named time": REC.format(x=TEXT + TIME),
}


def body(n: int, expr: str) -> str:
    return f"DO $$ DECLARE v vector; BEGIN v := {PRE}; FOR i IN 1..{n} LOOP PERFORM count(*) FROM ({expr}) s WHERE s IS NOT NULL; END LOOP; END $$"


conns = {}
for name, d in (("old", sys.argv[1]), ("new", sys.argv[2])):
    c = psycopg.connect(resolve_conninfo(pymem.Settings(data_dir=d)), autocommit=True)
    conns[name] = (c, c.execute("SELECT pg_backend_pid()").fetchone()[0])
out = {(db, k): [] for db in conns for k in CASES}
for r in range(ROUNDS):
    for db, (c, pid) in conns.items():
        for name, expr in CASES.items():
            c.execute(body(3, expr))
            t0 = int(open(f"/proc/{pid}/schedstat").read().split()[0])
            c.execute(body(N, expr))
            out[db, name].append((int(open(f"/proc/{pid}/schedstat").read().split()[0]) - t0) / N / 1e6)
print(f"{'call':38s} {'old ms':>8s} {'new ms':>8s} {'new/old':>8s}   median of {ROUNDS} rounds of {N}")
for name in CASES:
    o, n = statistics.median(out["old", name]), statistics.median(out["new", name])
    print(f"{name:38s} {o:8.3f} {n:8.3f} {n / o:7.2f}x")
for db in conns:
    v, h, t = (statistics.median(out[db, k]) for k in list(CASES)[:3])
    print(f"{db}: hybrid / vector {h / v:.2f}x, hybrid + named time / hybrid {t / h:.2f}x, / vector {t / v:.2f}x")
