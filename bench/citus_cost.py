"""Per-call cost on a Citus cluster beside a single server, in one run on one machine
(issue 35): the calls a turn makes, for one probe user, alternating between the two targets
round by round so that drift of a shared machine hits both columns alike.

    python bench/citus_cost.py --cluster <coordinator dsn> --single <plain server dsn> \\
        --messages 1000 --facts 200 --rounds 10 --per-round 50 --out bench/reports/<folder>

Each target gets the same data (loaded through pymem's API, delegated on the cluster): an agent
with ``--agent-facts`` facts, the probe user with ``--facts`` facts and ``--messages`` messages
(turns of bench/conv/texts.py's probe conversation, with 384-d HashEmbedder vectors; the
facts are sentences of its pool), and ``--other-users`` small users (2 turns, 2 facts
each) spread over the workers; with ``--fill-messages N``, N more messages (with vectors) over
N / 1,000 fill users, so that the tables are large. Then, per round and per target, ``--per-round`` calls of each
measurement, sent as pymem's named queries (sql/queries.sql), each alone in autocommit (what
Citus delegates):

- context_read: the probe's context with a query vector and its text (hybrid recall), as
  bench/conversations.py's context_sql;
- turn_record: one turn with two vectors into a thread of its own (deleted afterwards);
- newest50: facts_newest of the probe, 50 facts;
- fact_add: a new fact of the probe (no vector);
- supersede: fact_supersede of the probe's newest fact by id;
- floor: a prepared ``SELECT 1``;
- hop (cluster only): newest50 sent straight to the worker that holds the probe
  (``--worker`` overrides the worker's DSN; by default the coordinator's with the worker's port).

Writes ``cost.json`` and ``cost.md`` (p50 / p95 per target, cluster / single) into ``--out``.
Wall time per call: on a 2-core machine shared with other work, compare only within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pymem
from bench.conv.texts import PROBE_QUERIES, pool_sentences, probe_conversation
from pymem.embedders import HashEmbedder
from pymem.facts import FactWrite
from pymem.options import RecallOptions
from pymem.queries import Q

PROJECT = "cost"
AGENT = "cost-agent"
PROBE = "cost-probe"
MEASUREMENTS = ["floor", "context_read", "turn_record", "newest50", "fact_add", "supersede"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/citus_cost.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", required=True, help="the Citus coordinator")
    p.add_argument("--single", required=True, help="a single PostgreSQL server (pymem migrated or not)")
    p.add_argument("--worker", help="DSN of the worker that holds the probe (default: found from citus_shards)")
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--facts", type=int, default=200)
    p.add_argument("--agent-facts", type=int, default=20)
    p.add_argument("--other-users", type=int, default=20)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--per-round", type=int, default=50)
    p.add_argument("--fill-messages", type=int, default=0,
                   help="background messages (with vectors) for fill users, 1,000 each, so that the tables are "
                        "large (issue 35 measures at 1M rows); loaded after the probe, also with --no-load")
    p.add_argument("--no-load", action="store_true", help="the data is there already (an earlier run)")
    p.add_argument("--no-migrate", action="store_true",
                   help="load without migrating first (the databases were migrated by the pymem version to measure)")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def load(dsn: str, args: argparse.Namespace, embedder: HashEmbedder) -> None:
    if not args.no_migrate:
        pymem.migrate(dsn)
    with pymem.Database(pymem.Settings(dsn=dsn)) as db:
        probe = pymem.Memory(db=db, agent_id=AGENT, user_id=PROBE, embedder=embedder, project_id=PROJECT)
        for i in range(args.agent_facts):
            probe.persist(f"The agent answers in style number {i}", tier="agent")
        for i, sentence in enumerate(pool_sentences(args.facts, 11)):
            probe.persist(f"{sentence} ({i})")
        conv = probe_conversation(args.messages, 7)
        for q, a in zip(conv[0::2], conv[1::2]):
            probe.record(q["content"], a["content"])
        for u in range(args.other_users):
            other = pymem.Memory(db=db, agent_id=AGENT, user_id=f"cost-user{u}", embedder=embedder, project_id=PROJECT)
            other.persist(f"user {u} lives in town {u}")
            other.persist(f"user {u} likes tea")
            other.record("hello", "hi")
            other.record("how are you", "fine")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("VACUUM ANALYZE")


def fill(dsn: str, messages: int, embedder: HashEmbedder) -> None:
    """``messages`` more messages over fill users (1,000 each, user and assistant turns with
    vectors, one messages_add_many call per user: one delegated call on the cluster), skipping
    the fill users a run before already wrote."""
    words = [w for s in pool_sentences(200, 3) for w in s.lower().split()]
    with psycopg.connect(dsn, autocommit=True) as c:
        register_vector(c)
        have = {u for (u,) in c.execute("SELECT DISTINCT user_id FROM pymem.threads WHERE project_id = %s "
                                         "AND user_id LIKE 'fill-%%'", (PROJECT,))}
        for u in range(messages // 1000):
            user = f"fill-{u:05d}"
            if user in have:
                continue
            texts = [" ".join(words[(u * 7919 + i * 31 + j * 17) % len(words)] for j in range(8)) for i in range(1000)]
            c.execute("SELECT count(*) FROM pymem.messages_add_many(%s, 'default', %s, %s, %s, embeddings => %s, "
                      "embedder => %s)", (user, ["user", "assistant"] * 500, texts, PROJECT,
                                          [Vector(v) for v in embedder.embed(texts)], embedder.name))
        c.execute("VACUUM ANALYZE")


def calls(conn: psycopg.Connection, embedder: HashEmbedder, token: str) -> dict[str, Callable[[int], Any]]:
    qv = Vector(embedder.embed([PROBE_QUERIES[0]])[0])
    tv = [Vector(v) for v in embedder.embed(["a question of the benchmark", "an answer of the benchmark"])]
    ctx = {"user_id": PROBE, "agent_id": AGENT, "project_id": PROJECT, "thread_id": "default",
           "query_vector": qv, "embedder": embedder.name, "max_facts": 50, "window_size": 20, "k": 5,
           "min_content_chars": 10, "recency_weight": 0.0, "importance_weight": 0.0, "half_life_seconds": 3600.0,
           "dedupe": True, "max_unembedded": 100, "min_score": None,
           "query_text": PROBE_QUERIES[0], "lexical_weight": RecallOptions().lexical_weight,
           "as_of": None, "since": None, "until": None, "metadata": None, "valid_at": None,
           "next_turn_weight": 0.8, "time_from": None, "time_to": None, "time_weight": 0.2}
    fact = {"scope": "user", "scope_id": PROBE, "project_id": PROJECT, "write": FactWrite().checked(),
            "max_learned": 200, "embedding": None, "embedder": None}
    newest = {"scope": "user", "scope_id": PROBE, "project_id": PROJECT, "max_facts": 50}
    state = {"target": None}

    def turn(i: int) -> Any:
        return conn.execute(Q["turn_record"], {
            "user_id": PROBE, "thread_id": f"bench-{token}-{i // 50}", "project_id": PROJECT,
            "user_content": f"benchmark question {i}", "assistant_content": f"benchmark answer {i}",
            "user_importance": 1.0, "assistant_importance": 1.0, "embedder": embedder.name,
            "user_embedding": tv[0], "assistant_embedding": tv[1], "learned": None, "max_learned": 200,
            "keep_last": 10, "summarize_every": None, "lease_seconds": 300.0, "user_metadata": None,
            "assistant_metadata": None, "created_at": None, "fact_changes": None, "defer_learning": False,
        }).fetchall()

    def add(i: int) -> Any:
        return conn.execute(Q["fact_add"], fact | {"content": f"benchmark fact {token} {i}"}).fetchall()

    def supersede(i: int) -> Any:
        if state["target"] is None:
            state["target"] = conn.execute(Q["fact_add"], fact | {"content": f"superseded {token} start"}).fetchone()[0]
        (new_id, _), = conn.execute(Q["fact_supersede"], fact | {
            "new_content": f"superseded {token} {i}", "id": state["target"], "old_content": None}).fetchall()
        state["target"] = new_id

    return {
        "floor": lambda i: conn.execute("SELECT 1", prepare=True).fetchall(),
        "context_read": lambda i: conn.execute(Q["context_read"], ctx).fetchall(),
        "turn_record": turn,
        "newest50": lambda i: conn.execute(Q["facts_newest"], newest).fetchall(),
        "fact_add": add,
        "supersede": supersede,
    }


def cleanup(dsn: str, token: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        for (t,) in c.execute("SELECT DISTINCT thread_id FROM pymem.threads WHERE user_id = %s AND thread_id LIKE %s",
                              (PROBE, f"bench-{token}-%")).fetchall():
            c.execute("SELECT pymem.conversation_forget(%s, %s, %s)", (PROBE, t, PROJECT))
        c.execute("DELETE FROM pymem.facts WHERE scope = 'user' AND scope_id = %s AND content LIKE %s",
                  (PROBE, f"%{token}%"))


def probe_worker(cluster: str) -> str:
    with psycopg.connect(cluster, autocommit=True) as c:
        port = c.execute("""SELECT nodeport FROM citus_shards
                            WHERE shardid = get_shard_id_for_distribution_column('pymem.facts', %s::text)""",
                         (PROBE,)).fetchone()[0]
    return make_conninfo(cluster, port=str(port))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    embedder = HashEmbedder(384)
    if not args.no_load:
        for dsn in (args.single, args.cluster):
            t = time.monotonic()
            load(dsn, args, embedder)
            print(f"loaded {conninfo_to_dict(dsn).get('port')} in {time.monotonic() - t:.1f} s", file=sys.stderr)
    if args.fill_messages:
        for dsn in (args.single, args.cluster):
            t = time.monotonic()
            fill(dsn, args.fill_messages, embedder)
            print(f"filled {conninfo_to_dict(dsn).get('port')} in {time.monotonic() - t:.1f} s", file=sys.stderr)
    token = f"{int(time.time())}"
    worker = args.worker or probe_worker(args.cluster)
    targets = {"single": args.single, "cluster": args.cluster, "hop": worker}
    conns = {k: psycopg.connect(v, autocommit=True) for k, v in targets.items()}
    for c in conns.values():
        register_vector(c)
        c.execute("SET application_name = 'pymem-bench'")  # never citus_internal: the worker's own session
    fns = {k: calls(c, embedder, token) for k, c in conns.items()}
    times: dict[str, dict[str, list[float]]] = {k: {m: [] for m in MEASUREMENTS} for k in targets}
    only_hop = {"floor", "newest50"}
    try:
        for r in range(args.rounds + 1):  # round 0: warm-up, not counted
            for m in MEASUREMENTS:
                for k in targets:
                    if k == "hop" and m not in only_hop:
                        continue
                    f = fns[k][m]
                    for i in range(args.per_round):
                        t = time.perf_counter()
                        f(r * args.per_round + i)
                        if r:
                            times[k][m].append((time.perf_counter() - t) * 1000)
    finally:
        for c in conns.values():
            c.close()
        for dsn in (args.single, args.cluster):
            cleanup(dsn, token)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {k: {m: {"p50_ms": statistics.median(v), "p95_ms": pct(v, 0.95), "n": len(v)}
                   for m, v in ms.items() if v} for k, ms in times.items()}
    hop = summary["cluster"]["newest50"]["p50_ms"] - summary["hop"]["newest50"]["p50_ms"]
    result = {"args": {k: v for k, v in vars(args).items() if k not in ("cluster", "single", "worker")},
              "summary": summary, "hop_ms": hop}
    (out / "cost.json").write_text(json.dumps(result, indent=2))
    lines = ["| call | single p50 ms | cluster p50 ms | cluster / single | single p95 | cluster p95 | "
             "target: 2 x single + hop | met |", "|---|--:|--:|--:|--:|--:|--:|---|"]
    for m in MEASUREMENTS:
        s, c = summary["single"][m], summary["cluster"][m]
        target = 2 * s["p50_ms"] + hop
        lines.append(f"| {m} | {s['p50_ms']:.3f} | {c['p50_ms']:.3f} | {c['p50_ms'] / s['p50_ms']:.2f} | "
                     f"{s['p95_ms']:.3f} | {c['p95_ms']:.3f} | {target:.3f} | "
                     f"{'yes' if m == 'floor' or c['p50_ms'] <= target else 'no'} |")
    lines.append("")
    lines.append(f"Hop: newest50 through the coordinator {summary['cluster']['newest50']['p50_ms']:.3f} ms, "
                 f"straight to the probe's worker {summary['hop']['newest50']['p50_ms']:.3f} ms: {hop:.3f} ms "
                 f"(floor on the worker {summary['hop']['floor']['p50_ms']:.3f} ms).")
    (out / "cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
