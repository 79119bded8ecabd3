"""Server CPU per turn_record of the benchmark's probe (two messages of the probe's own texts,
~15 words each, with vectors), with the prototype trigger of `variants.py counts` disabled and
enabled in alternating rounds; CPU from /proc/<backend pid>/schedstat. The turns written go to
threads of their own, forgotten at the end (the prototype's counts are not taken back).

    python variants.py counts | psql "$PGURL" -f -
    python writes.py <PYMEM_DATA_DIR of a bench/conversations.py database> [turns] [rounds]

Nothing here asserts a duration.
"""

from __future__ import annotations

import statistics
import sys

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

import pymem
from pymem.connection import resolve_conninfo
from pymem.embedders import HashEmbedder

TURN = ("SELECT * FROM pymem.turn_record(user_id => 'probe', user_content => %s, assistant_content => %s,"
        " thread_id => %s, project_id => 'acme', embedder => %s, user_embedding => %s, assistant_embedding => %s)")


def main(argv: list[str]) -> None:
    dsn = resolve_conninfo(pymem.Settings(data_dir=argv[0]))
    n = int(argv[1]) if len(argv) > 1 else 60
    rounds = int(argv[2]) if len(argv) > 2 else 7
    emb = HashEmbedder()
    c = psycopg.connect(dsn, autocommit=True)
    register_vector(c)
    admin = psycopg.connect(dsn, autocommit=True)
    texts = [r[0] for r in c.execute("SELECT content FROM pymem.messages WHERE project_id = 'acme' AND user_id = 'probe'"
                                     " ORDER BY seq LIMIT 400")]
    vecs = [Vector(v) for v in emb.embed(texts)]
    pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]

    def cpu() -> float:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e6

    out: dict[str, list[float]] = {"trigger off": [], "trigger on": []}
    k = 0
    try:
        for r in range(rounds):
            for mode in out:
                on = mode.endswith("on")
                admin.execute(f"ALTER TABLE pymem.message_lexemes {'ENABLE' if on else 'DISABLE'} TRIGGER message_lexemes_stats")
                for i in range(3 + n):
                    if i == 3:
                        t0 = cpu()
                    k += 1
                    j = k % (len(texts) // 2)
                    c.execute(TURN, (texts[2 * j], texts[2 * j + 1], f"writes-{r}-{int(on)}", emb.name,
                                     vecs[2 * j], vecs[2 * j + 1])).fetchall()
                out[mode].append((cpu() - t0) / n)
    finally:
        for (t,) in admin.execute("SELECT DISTINCT thread_id FROM pymem.threads WHERE project_id = 'acme'"
                                  " AND user_id = 'probe' AND thread_id LIKE 'writes-%'").fetchall():
            admin.execute("SELECT pymem.conversation_forget('probe', %s, 'acme')", (t,))
        admin.execute("ALTER TABLE pymem.message_lexemes ENABLE TRIGGER message_lexemes_stats")
    first = None
    for name, v in out.items():
        m = statistics.median(v)
        first = first or m
        print(f"turn_record, {name:12s} {m:8.3f} ms  min {min(v):8.3f}  {m / first:5.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
