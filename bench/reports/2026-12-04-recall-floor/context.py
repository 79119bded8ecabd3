"""Server CPU per context_read of the benchmark's probe: the query's vector alone, hybrid as
shipped, and hybrid with the row-local variants of variants.py in its place (`dispatch`), in
PL/pgSQL loops on one connection, alternating rounds; CPU from /proc/<backend pid>/schedstat.

    python variants.py | psql "$PGURL" -f - && python variants.py dispatch | psql "$PGURL" -f -
    python context.py <PYMEM_DATA_DIR of a bench/conversations.py database> [calls] [rounds]

Nothing here asserts a duration.
"""

from __future__ import annotations

import statistics
import sys

import psycopg

import pymem
from pymem.connection import resolve_conninfo

TEXT = "which hotel did I book in Kyoto"
VECTOR = ("(SELECT embedding FROM pymem.message_embeddings WHERE user_id = 'probe' AND project_id = 'acme'"
          " ORDER BY seq LIMIT 1 OFFSET 17)")
CONTEXT = ("SELECT pymem.context_read(user_id => 'probe', agent_id => 'bench-agent', project_id => 'acme',"
           " thread_id => 'default', query_vector => v, embedder => 'hash-384-v1', max_facts => 50, window_size => 20,"
           " k => 5{x})")
HYBRID = CONTEXT.format(x=f", query_text => '{TEXT}'")
CASES = {"context_read, vector": ("", CONTEXT.format(x="")), "hybrid, shipped": ("", HYBRID),
         "hybrid, row-local (slots)": ("local", HYBRID), "hybrid, row-local (sum)": ("localsum", HYBRID),
         "hybrid, exact, counts read": ("heap", HYBRID)}


def main(argv: list[str]) -> None:
    dsn = resolve_conninfo(pymem.Settings(data_dir=argv[0]))
    n = int(argv[1]) if len(argv) > 1 else 100
    rounds = int(argv[2]) if len(argv) > 2 else 7
    out: dict[str, list[float]] = {k: [] for k in CASES}
    with psycopg.connect(dsn, autocommit=True) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]

        def cpu() -> float:
            with open(f"/proc/{pid}/schedstat") as f:
                return int(f.read().split()[0]) / 1e6

        loop = "DO $$ DECLARE v vector; BEGIN v := {}; FOR i IN 1..{} LOOP PERFORM count(s.*) FROM ({}) s; END LOOP; END $$"
        for _ in range(rounds):
            for name, (variant, expr) in CASES.items():
                c.execute(f"SET pymem.variant = '{variant}'")
                c.execute(loop.format(VECTOR, 3, expr))
                t0 = cpu()
                c.execute(loop.format(VECTOR, n, expr))
                out[name].append((cpu() - t0) / n)
    first = None
    for name, v in out.items():
        m = statistics.median(v)
        first = first or m
        print(f"{name:28s} {m:8.3f} ms  min {min(v):8.3f}  {m / first:5.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
