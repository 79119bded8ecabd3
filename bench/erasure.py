"""What erasing a user costs (issue 33, item 2), in one run on one server:

    PYMEM_DATA_DIR=/tmp/bench-erasure python bench/erasure.py [--messages 100000] [--facts 200] [--repeat 1]

Users loaded alike (``--messages`` messages with vectors and lexemes over 4 threads, ``--facts``
facts with vectors, a store of their own with ``--entries`` entries), among ``--others`` users
with ``--other-messages`` messages each, are erased three ways, in turns (``--repeat`` users per
way, the ways interleaved):

- ``user_forget``: ``pymem.user_forget`` (the receipt: digest, counts, the erasures row);
- ``plain_sql``: the same rows deleted by plain ``DELETE`` statements in one transaction (no
  digest, no receipt, no checks): the floor;
- ``forget_calls``: the calls that existed before, ``conversation_forget`` + ``facts_forget`` +
  ``store_drop``, in one transaction.

Each way's time is the wall time of its transaction, from this client; the ratios are to
``plain_sql``. The rows each way deleted are counted, and must be the same. A scratch database
(``pymem_erasure_bench``) on the server of PYMEM_DSN, else the embedded one. Nothing here asserts
a duration; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from bench import common  # noqa: E402

DB = "pymem_erasure_bench"
WAYS = ("user_forget", "plain_sql", "forget_calls")
EMB = pymem.HashEmbedder()
BATCH = 1000
# the rows of a user, as the tests count them (tests/sql/test_erasure.py)
COUNT = """SELECT (SELECT count(*) FROM pymem.messages WHERE project_id = '' AND user_id = %(u)s)
                + (SELECT count(*) FROM pymem.message_embeddings WHERE project_id = '' AND user_id = %(u)s)
                + (SELECT count(*) FROM pymem.message_lexemes WHERE project_id = '' AND user_id = %(u)s)
                + (SELECT count(*) FROM pymem.threads WHERE project_id = '' AND user_id = %(u)s)
                + (SELECT count(*) FROM pymem.facts WHERE project_id = '' AND scope = 'user' AND scope_id = %(u)s)
                + (SELECT count(*) FROM pymem.fact_embeddings WHERE project_id = '' AND scope = 'user' AND scope_id = %(u)s)
                + (SELECT count(*) FROM pymem.fact_lexemes WHERE project_id = '' AND scope = 'user' AND scope_id = %(u)s)
                + (SELECT count(*) FROM pymem.store_entries WHERE project_id = '' AND store_key = %(s)s)
                + (SELECT count(*) FROM pymem.store_audit WHERE project_id = '' AND store_key = %(s)s)
                + (SELECT count(*) FROM pymem.stores WHERE project_id = '' AND store_key = %(s)s)"""
PLAIN = [
    "DELETE FROM pymem.message_embeddings WHERE project_id = '' AND user_id = %(u)s",
    "DELETE FROM pymem.message_lexemes WHERE project_id = '' AND user_id = %(u)s",
    "DELETE FROM pymem.messages WHERE project_id = '' AND user_id = %(u)s",
    "DELETE FROM pymem.threads WHERE project_id = '' AND user_id = %(u)s",
    "DELETE FROM pymem.fact_embeddings WHERE project_id = '' AND scope = 'user' AND scope_id = %(u)s",
    "DELETE FROM pymem.fact_lexemes WHERE project_id = '' AND scope = 'user' AND scope_id = %(u)s",
    "DELETE FROM pymem.facts WHERE project_id = '' AND scope = 'user' AND scope_id = %(u)s",
    "DELETE FROM pymem.stores WHERE project_id = '' AND store_key = %(s)s",
]
CALLS = [
    "SELECT pymem.conversation_forget(%(u)s)",
    "SELECT pymem.facts_forget('user', %(u)s)",
    "SELECT pymem.store_drop(%(s)s)",
]


def _messages(c: psycopg.Connection, user: str, n: int, *, embed: bool) -> None:
    for start in range(0, n, BATCH):
        size = min(BATCH, n - start)
        contents = [f"{user} message {start + i}: about trips, meals and the weather on day {(start + i) % 97}"
                    for i in range(size)]
        roles = ["user" if (start + i) % 2 == 0 else "assistant" for i in range(size)]
        vectors = [Vector(v) for v in EMB.embed(contents)] if embed else None
        c.execute("SELECT count(*) FROM pymem.messages_add_many(%s, %s, %s, %s, embeddings => %s::vector[], "
                  "embedder => %s)",
                  (user, f"thread-{start // BATCH % 4}", roles, contents, vectors, EMB.name if embed else None))


def load_user(c: psycopg.Connection, user: str, messages: int, facts: int, entries: int) -> None:
    _messages(c, user, messages, embed=True)
    contents = [f"{user} fact {i}: likes item {i}" for i in range(facts)]
    c.execute("SELECT count(*) FROM pymem.facts_add_many('user', array_fill(%s::text, ARRAY[%s]), %s)",
              (user, facts, contents))
    ids = [r[0] for r in c.execute("SELECT id FROM pymem.facts WHERE scope = 'user' AND scope_id = %s ORDER BY id",
                                   (user,))]
    c.execute("SELECT pymem.fact_embeddings_put('user', %s, %s, %s, %s::vector[])",
              (user, EMB.name, ids, [Vector(v) for v in EMB.embed(contents)]))
    c.execute("SELECT pymem.store_open(%s)", (f"{user}-store",))
    for i in range(entries):
        c.execute("SELECT pymem.store_write(%s, %s, %s, actor => %s)", (f"{user}-store", f"notes/{i}.txt", f"note {i}", user))


def erase(c: psycopg.Connection, way: str, user: str) -> float:
    params = {"u": user, "s": f"{user}-store"}
    t0 = time.perf_counter()
    with c.transaction():
        if way == "user_forget":
            c.execute("SELECT pymem.user_forget(%(u)s, store_keys => ARRAY[%(s)s])", params).fetchone()
        else:
            for statement in PLAIN if way == "plain_sql" else CALLS:
                c.execute(statement, params)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: PYMEM_DSN, else the embedded one)")
    ap.add_argument("--messages", type=common.positive, default=100_000, help="messages of each erased user")
    ap.add_argument("--facts", type=common.positive, default=200, help="facts of each erased user")
    ap.add_argument("--entries", type=common.positive, default=50, help="store entries of each erased user")
    ap.add_argument("--others", type=int, default=100, help="users who stay")
    ap.add_argument("--other-messages", type=int, default=1000, help="messages of each user who stays")
    ap.add_argument("--repeat", type=common.positive, default=1, help="users erased each way")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"erasure bench on {where}")
    dsn = common.scratch_database(conninfo, DB)
    erased = [(way, f"{way}-{r}") for r in range(args.repeat) for way in WAYS]
    with psycopg.connect(dsn, autocommit=True) as c:
        register_vector(c)
        common.progress(f"loading {args.others} users x {args.other_messages} messages who stay")
        for u in range(args.others):
            _messages(c, f"other-{u}", args.other_messages, embed=True)
        for way, user in erased:
            common.progress(f"loading {user}: {args.messages} messages, {args.facts} facts, {args.entries} entries")
            load_user(c, user, args.messages, args.facts, args.entries)
        c.execute("VACUUM ANALYZE")
        rows = {user: c.execute(COUNT, {"u": user, "s": f"{user}-store"}).fetchone()[0] for _, user in erased}
        others = c.execute("SELECT count(*) FROM pymem.messages WHERE user_id LIKE 'other-%'").fetchone()[0]
        seconds: dict[str, list[float]] = {way: [] for way in WAYS}
        for way, user in erased:
            seconds[way].append(erase(c, way, user))
            left = c.execute(COUNT, {"u": user, "s": f"{user}-store"}).fetchone()[0]
            assert left == 0, (way, user, left)
        kept = c.execute("SELECT count(*) FROM pymem.messages WHERE user_id LIKE 'other-%'").fetchone()[0]
        receipts = c.execute("SELECT counts FROM pymem.erasures ORDER BY id").fetchall()
    base = statistics.median(seconds["plain_sql"])
    result = {"ways": {way: {"seconds": [round(s, 3) for s in v], "median_s": round(statistics.median(v), 3),
                             "ratio": round(statistics.median(v) / base, 3),
                             "rows_deleted": sorted({rows[u] for w, u in erased if w == way})}
                       for way, v in seconds.items()},
              "others_kept": kept == others, "receipts": [r[0] for r in receipts], "args": vars(args)}
    for way, r in result["ways"].items():
        print(f"{way:13} median {r['median_s']:8.3f} s  {r['ratio']:5.2f}x plain SQL  rows deleted {r['rows_deleted']}")
    print(f"users who stay kept their {others} messages: {result['others_kept']}")
    print("command: " + common.command_line("bench/erasure.py", argv))
    return result


if __name__ == "__main__":
    main()
