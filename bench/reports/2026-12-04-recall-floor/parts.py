"""Server CPU per call of pymem._recall_ranked and of variants (variants.py) for the benchmark's
1,000-message probe, in PL/pgSQL loops on one connection, alternating rounds; CPU from
/proc/<backend pid>/schedstat; median (and min) per call and the ratio to the first case.

    python parts.py <PYMEM_DATA_DIR of a bench/conversations.py database> [calls] [rounds] [function ...]

Cases: "vector" (the shipped function with no query text), "hybrid" (the shipped function with the
probe's text), then each named function with the text. Nothing here asserts a duration.
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
SPEC = "pymem._recall_spec(5, 10, 20, 0, 0, 0.4, 30, NULL, NULL, NULL, NULL, NULL)"


def call(fn: str, text: str) -> str:
    return f"SELECT * FROM pymem.{fn}('acme', 'probe', 'default', v, 'hash-384-v1', {text}, {SPEC})"


def measure(dsn: str, cases: dict[str, tuple[str, str]], n: int, rounds: int) -> dict[str, list[float]]:
    """Server CPU ms per call of each case (variant, SQL using the vector v), in alternating rounds:
    pymem.variant set to the case's variant (read by variants.py's dispatch), 3 warm-up calls, then
    n calls in one PL/pgSQL loop."""
    out: dict[str, list[float]] = {k: [] for k in cases}
    loop = "DO $$ DECLARE v vector; BEGIN v := {}; FOR i IN 1..{} LOOP PERFORM count(s.*) FROM ({}) s; END LOOP; END $$"
    with psycopg.connect(dsn, autocommit=True) as c:
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]

        def cpu() -> float:
            with open(f"/proc/{pid}/schedstat") as f:
                return int(f.read().split()[0]) / 1e6

        for _ in range(rounds):
            for name, (variant, expr) in cases.items():
                c.execute("SELECT pg_catalog.set_config('pymem.variant', %s, false)", (variant,))
                c.execute(loop.format(VECTOR, 3, expr))
                t0 = cpu()
                c.execute(loop.format(VECTOR, n, expr))
                out[name].append((cpu() - t0) / n)
    return out


def report(out: dict[str, list[float]], width: int) -> None:
    """Median (and min) per case, and its ratio to the first case's median."""
    first = None
    for name, v in out.items():
        m = statistics.median(v)
        first = first or m
        print(f"{name:{width}s} {m:8.3f} ms  min {min(v):8.3f}  {m / first:5.2f}x")


def main(argv: list[str]) -> None:
    dsn = resolve_conninfo(pymem.Settings(data_dir=argv[0]))
    n = int(argv[1]) if len(argv) > 1 else 200
    rounds = int(argv[2]) if len(argv) > 2 else 5
    cases = {"vector": ("", call("_recall_ranked", "NULL")), "hybrid": ("", call("_recall_ranked", repr(TEXT))),
             **{fn: ("", call(fn, repr(TEXT))) for fn in argv[3:]}}
    report(measure(dsn, cases, n, rounds), 12)


if __name__ == "__main__":
    main(sys.argv[1:])
