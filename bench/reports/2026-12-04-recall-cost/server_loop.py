"""Server CPU per call of recall and context_read against plain SQL returning the same rows (the
probe's top 5 by cosine outside its window), in a PL/pgSQL loop on one connection, alternating
rounds; CPU from /proc/<backend pid>/schedstat.

    python server_loop.py <PYMEM_DATA_DIR of a bench/conversations.py database> [calls] [rounds]
"""
"""Server-side loops: ms per call of SQL expressions, alternating rounds (notices)."""
import sys, statistics, psycopg, pymem
from pymem.connection import resolve_conninfo
dsn = resolve_conninfo(pymem.Settings(data_dir=sys.argv[1]))
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
Q = "which hotel did I book in Kyoto"
PRE = """(SELECT embedding FROM pymem.message_embeddings WHERE user_id='probe' AND project_id='acme' ORDER BY seq LIMIT 1 OFFSET 17)"""
spec = "pymem._recall_spec(5, 10, 20, 0, 0, 0.4, 30, NULL, NULL, NULL, NULL, NULL)"
CASES = {}
CASES = {
 "plain SQL top-5 cosine": "SELECT e.thread_id, e.seq FROM pymem.message_embeddings e WHERE e.project_id = 'acme' AND e.user_id = 'probe' AND e.embedder = 'hash-384-v1' AND e.chars >= 10 AND NOT (e.thread_id = 'default' AND e.seq > (SELECT t.last_seq - 20 FROM pymem.threads t WHERE t.project_id = 'acme' AND t.user_id = 'probe' AND t.thread_id = 'default')) ORDER BY e.embedding <=> v LIMIT 5",
 "messages_recall vector": "SELECT * FROM pymem.messages_recall(user_id => 'probe', query_vector => v, embedder => 'hash-384-v1', project_id => 'acme', k => 5, window_size => 20, next_turn_weight => 0)",
 "messages_recall vector+next": "SELECT * FROM pymem.messages_recall(user_id => 'probe', query_vector => v, embedder => 'hash-384-v1', project_id => 'acme', k => 5, window_size => 20)",
 "context_read vector": "SELECT pymem.context_read(user_id => 'probe', agent_id => 'bench-agent', project_id => 'acme', thread_id => 'default', query_vector => v, embedder => 'hash-384-v1', max_facts => 50, window_size => 20, k => 5)",
 "context_read hybrid": "SELECT pymem.context_read(user_id => 'probe', agent_id => 'bench-agent', project_id => 'acme', thread_id => 'default', query_vector => v, embedder => 'hash-384-v1', query_text => '" + Q + "', max_facts => 50, window_size => 20, k => 5)",
}
out = {k: [] for k in CASES}
with psycopg.connect(dsn, autocommit=True) as c:
    notes = []
    c.add_notice_handler(lambda d: notes.append(d.message_primary))
    pid = c.execute("select pg_backend_pid()").fetchone()[0]
    cpu = lambda: int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e6
    for r in range(ROUNDS):
        for name, expr in CASES.items():
            notes.clear()
            c.execute(f"""DO $$ DECLARE v vector; BEGIN v := {PRE}; FOR i IN 1..3 LOOP PERFORM count(s.*) FROM ({expr}) s; END LOOP; END $$""")
            t0 = cpu()
            c.execute(f"""DO $$ DECLARE v vector; t0 timestamptz; x int; BEGIN
              v := {PRE};
              t0 := clock_timestamp();
              FOR i IN 1..{N} LOOP PERFORM count(s.*) FROM ({expr}) s; END LOOP;
              RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - t0) * 1000 / {N};
            END $$""")
            out[name].append((cpu() - t0) / N)
base = None
for name, v in out.items():
    m = statistics.median(v)
    base = base or m
    print(f"{name:40s} {m:8.3f} ms  min {min(v):8.3f}  {m/base:5.2f}x")
