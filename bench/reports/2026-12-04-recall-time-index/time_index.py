"""A heavy user's recall over a narrow time, with and without the user's time index (issue 32).

    python time_index.py DSN [USER] [ROUNDS]

DSN: a database with a registered heavy user (bench/heavy.py, or bench/conversations.py and
`pymem recall-indexes`) whose recall index and time index are built. Alternating rounds: the time
index dropped, then built again (CREATE INDEX, the statement recall_index_plan gives). Each round
times, per span ending at the user's newest message: messages_recall with a named time (vector,
and hybrid), messages_recall with since, plain SQL returning the span's 10 nearest, and one
message written (messages_add_many of one message with its vector; rolled back). Prints the
median client time per call (ms) over the rounds, per case, with and without the index."""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict

import psycopg

from pymem import HashEmbedder

dsn = sys.argv[1]
user = sys.argv[2] if len(sys.argv) > 2 else "probe"
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
CALLS = 5
QUERY = "what did we decide about the quarterly budget review"

conn = psycopg.connect(dsn, autocommit=True)
project, embedder, index = conn.execute(
    "SELECT project_id, embedder, pymem._recall_time_index(index_name) FROM pymem.recall_indexes WHERE user_id = %s",
    (user,)).fetchone()
create = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (f"pymem.{index}",)).fetchone()[0]
dims = conn.execute("SELECT dimension FROM pymem.embedders WHERE project_id = %s AND name = %s",
                    (project, embedder)).fetchone()[0]
vec = str(list(HashEmbedder(dims).embed([QUERY])[0]))
end = conn.execute("SELECT max(created_at) FROM pymem.message_embeddings WHERE project_id = %s AND user_id = %s "
                   "AND embedder = %s", (project, user, embedder)).fetchone()[0]
spans = ["1 day", "15 days", "20 days", "30 days"]
sizes = {s: conn.execute("SELECT count(*) FROM pymem.message_embeddings WHERE project_id = %s AND user_id = %s "
                         "AND embedder = %s AND created_at >= %s::timestamptz - %s::interval",
                         (project, user, embedder, end, s)).fetchone()[0] for s in spans}
RECALL = ("SELECT * FROM pymem.messages_recall(user_id => %(u)s, project_id => %(p)s, query_vector => %(v)s::vector, "
          "embedder => %(e)s, query_text => %(t)s, k => 10, {time})")
NAMED = "time_from => %(end)s::timestamptz - %(span)s::interval, time_to => %(end)s::timestamptz + interval '1 s'"
SINCE = "since => %(end)s::timestamptz - %(span)s::interval"
PLAIN = ("SELECT thread_id, seq FROM pymem.message_embeddings WHERE project_id = %(p)s AND user_id = %(u)s "
         "AND embedder = %(e)s AND created_at >= %(end)s::timestamptz - %(span)s::interval "
         "ORDER BY embedding <=> %(v)s::vector LIMIT 10")
WRITE = ("SELECT count(*) FROM pymem.messages_add_many(user_id => %(u)s, project_id => %(p)s, thread_id => 'bench-write', "
         "roles => ARRAY['user'], contents => ARRAY['the budget review moved to Friday'], "
         "embeddings => ARRAY[%(v)s::vector], embedder => %(e)s)")


def timed(sql: str, params: dict, write: bool = False) -> float:
    ts = []
    for _ in range(CALLS):
        t = time.perf_counter()
        if write:
            with conn.transaction(force_rollback=True):
                conn.execute(sql, params).fetchall()
        else:
            conn.execute(sql, params).fetchall()
        ts.append((time.perf_counter() - t) * 1000)
    return statistics.median(ts)


results: dict[tuple[str, bool], list[float]] = defaultdict(list)
for r in range(rounds):
    for with_index in (False, True):
        conn.execute(f"DROP INDEX IF EXISTS pymem.{index}")
        if with_index:
            conn.execute(create)
        conn.execute("ANALYZE pymem.message_embeddings") if r == 0 else None
        base = {"u": user, "p": project, "v": vec, "e": embedder, "end": end}
        for span in spans:
            p = {**base, "span": span}
            for label, sql, text in ((f"named time {span}, vector", RECALL.format(time=NAMED), None),
                                     (f"named time {span}, hybrid", RECALL.format(time=NAMED), QUERY),
                                     (f"since {span}, vector", RECALL.format(time=SINCE), None),
                                     (f"plain SQL, 10 nearest in {span}", PLAIN, None)):
                results[label, with_index].append(timed(sql, {**p, "t": text}))
        results["one message written", with_index].append(timed(WRITE, base, write=True))
conn.execute(f"DROP INDEX IF EXISTS pymem.{index}")
conn.execute(create)

print(f"user {user}: spans {', '.join(f'{s} = {n} messages' for s, n in sizes.items())}; {rounds} rounds of {CALLS} calls")
print(f"| call | without the time index | with it | with / without |\n|---|--:|--:|--:|")
for label in dict.fromkeys(k for k, _ in results):
    a, b = statistics.median(results[label, False]), statistics.median(results[label, True])
    print(f"| {label} | {a:.2f} | {b:.2f} | {b / a:.2f}x |")
