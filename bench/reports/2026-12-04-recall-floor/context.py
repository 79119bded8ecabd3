"""Server CPU per context_read of the benchmark's probe: the query's vector alone, hybrid as
shipped, and hybrid with the row-local variants of variants.py in its place (`dispatch`), in
PL/pgSQL loops on one connection, alternating rounds; CPU from /proc/<backend pid>/schedstat.

    python variants.py | psql "$PGURL" -f - && python variants.py dispatch | psql "$PGURL" -f -
    python context.py <PYMEM_DATA_DIR of a bench/conversations.py database> [calls] [rounds]

Nothing here asserts a duration.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pymem
from pymem.connection import resolve_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parts import TEXT, measure, report  # noqa: E402

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
    report(measure(dsn, CASES, n, rounds), 28)


if __name__ == "__main__":
    main(sys.argv[1:])
