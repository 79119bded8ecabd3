"""What a message write costs with the lexeme trigger before and after 0045_recall_terms, in one
database and alternating rounds (an A/B of the trigger function's two bodies; the table and its
indexes are there in both, and an insert into message_lexemes checks nothing of recall_terms).

    PYMEM_DATA_DIR=/tmp/heavy-db python bench/reports/2026-12-04-heavy-lexical/write_cost.py [--rounds 9] [--calls 40]

Needs a database migrated to 0045 (superuser: it replaces pymem._message_lexemes_add and puts the
new body back at the end). The old body is read from git (--old-rev, default the commit this
branch started from). Each call is one message_add (autocommit: one transaction) of a one-line
message to thread 'write-cost' of an ordinary user (u0000003, ~1,000 messages) and of the heavy
probe user (registered, so its postings are written); per call the server's CPU
(/proc/<backend pid>/schedstat) and the wall time, median over the calls of all rounds. The
messages written are deleted at the end.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import time
from pathlib import Path

import psycopg

import pymem
from pymem.connection import resolve_conninfo

ROOT = Path(__file__).resolve().parents[3]
FILE = "sql/api/conversations_embeddings.sql"
ADD = ("SELECT pymem.message_add(user_id => %s, content => %s, thread_id => 'write-cost', project_id => 'acme')")


def _body(text: str) -> str:
    m = re.search(r"CREATE OR REPLACE FUNCTION pymem\._message_lexemes_add\(\).*?\n\$\$;\n", text, re.S)
    if not m:
        raise SystemExit("write_cost.py: no _message_lexemes_add in the file")
    return m.group(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--old-rev", default="53d3b73")
    args = ap.parse_args()
    bodies = {"before": _body(subprocess.run(["git", "show", f"{args.old_rev}:{FILE}"], cwd=ROOT, check=True,
                                             capture_output=True, text=True).stdout),
              "after": _body((ROOT / FILE).read_text())}
    dsn = resolve_conninfo(pymem.Settings())
    samples = {(v, u): ([], []) for v in bodies for u in ("ordinary", "heavy")}
    with psycopg.connect(dsn, autocommit=True) as c, psycopg.connect(dsn, autocommit=True) as admin:
        stat = Path(f"/proc/{c.execute('SELECT pg_backend_pid()').fetchone()[0]}/schedstat")
        cpu = (lambda: int(stat.read_text().split()[0])) if stat.exists() else (lambda: float("nan"))
        try:
            n = 0
            for rnd in range(args.rounds + 1):  # round 0 warms up
                for version in (("before", "after") if rnd % 2 else ("after", "before")):
                    admin.execute(bodies[version])
                    for who, user in (("ordinary", "u0000003"), ("heavy", "probe")):
                        c.execute(ADD, (user, f"warm-up after the swap {n}"))  # a new plan after the swap
                        for _ in range(args.calls):
                            n += 1
                            c0, t0 = cpu(), time.perf_counter_ns()
                            c.execute(ADD, (user, f"a short line about the weekend plans number {n}"))
                            wall, server = (time.perf_counter_ns() - t0) / 1e6, (cpu() - c0) / 1e6
                            if rnd:
                                samples[version, who][0].append(wall)
                                samples[version, who][1].append(server)
        finally:
            admin.execute(bodies["after"])
            admin.execute("DELETE FROM pymem.messages WHERE project_id = 'acme' AND thread_id = 'write-cost'")
            admin.execute("DELETE FROM pymem.threads WHERE project_id = 'acme' AND thread_id = 'write-cost'")
    print(f"message_add, {args.rounds} rounds x {args.calls} calls, median per call (ms):")
    for who in ("ordinary", "heavy"):
        b, a = samples["before", who], samples["after", who]
        mb, ma = statistics.median(b[1]), statistics.median(a[1])
        print(f"  {who}: before {statistics.median(b[0]):.3f} wall / {mb:.3f} CPU, after {statistics.median(a[0]):.3f} wall"
              f" / {ma:.3f} CPU; CPU ratio after/before {ma / mb:.3f}, wall ratio "
              f"{statistics.median(a[0]) / statistics.median(b[0]):.3f}")


if __name__ == "__main__":
    main()
