"""Private memory of the worker backends serving one coordinator connection, before and after
2,000 turn_record and 2,000 context_read calls of the user 'probe' (project p1).

    python plan_cache_memory.py <coordinator port>

As postgres on 127.0.0.1, on the same machine as the cluster (reads ps)."""
import psycopg, sys, subprocess
coord = f"postgresql://postgres@127.0.0.1:{sys.argv[1]}/postgres"
def rss():
    out = subprocess.run(["ps", "-eo", "pid,rss,args"], capture_output=True, text=True).stdout
    rows = [l.split(None, 2) for l in out.splitlines()[1:]]
    return sorted((int(r[1]) // 1024, r[2][:50]) for r in rows if "postgres: postgres postgres 127.0.0.1" in r[2])[-2:]
with psycopg.connect(coord, autocommit=True) as c:
    print("before", rss())
    for n in (1000, 2000):
        for i in range(n):
            c.execute("SELECT * FROM pymem.turn_record(%s, %s, 'ok', project_id => %s)", ("probe", f"hello number {i}", "p1")).fetchall()
        print(f"+{n} turn_record: top worker backends (MB rss)", rss())
    for n in (1000, 2000):
        for i in range(n):
            c.execute("SELECT pymem.context_read(%s, %s, %s, query_text => %s)", ("probe", "bot", "p1", "hello number")).fetchall()
        print(f"+{n} context_read: top worker backends (MB rss)", rss())
