"""Throughput under concurrency (issue 60, item 3): 1, 8 and 32 clients on one server doing agent
turns (``Memory.context`` then ``Memory.record``) and fact writes (``Memory.persist`` of a new
fact), beside plain SQL doing the same writes at the same concurrency, in one run.

    PYMEM_DATA_DIR=/tmp/bench-conc python bench/concurrency.py [--clients 1,8,32] [--ops 40]
        [--mode threads,processes] [--feed]

A scratch database (``pymem_concurrency_bench``), every client with a user of its own (so that
nothing but the server, the pool and the machine is shared: the subject lock, the thread's
sequence and the change feed's project counter are what clients of one user or project would
contend on). Each client runs ``--warmup`` untimed operations, waits for the others at a
barrier, then ``--ops`` timed ones, a turn and a fact write in turn. Per side, mode and number of
clients: turns/s and fact writes/s over the timed wall time of the slowest client, and p50/p99
per turn and per write.

- **pymem, threads**: one ``Database`` (a pool of as many connections as clients), one ``Memory``
  (HashEmbedder), one thread per client;
- **pymem, processes**: one process per client, each with its own ``Database`` (a pool of one);
- **plain SQL** (threads or processes the same way): one autocommit connection per client,
  prepared statements, as a superuser: a turn is a read of the thread's last 10 messages and the
  user's newest 50 facts, then one ``INSERT`` of its two messages (sequence numbers from the
  client); a fact write one ``INSERT .. ON CONFLICT DO NOTHING`` into ``pymem.facts``. No tenant,
  no checks, no vectors, no lexemes: the least the same durable writes cost.

``--feed`` turns the change feed on for the run (every write of every client then takes the
project's position lock at its commit; its triggers fire for plain SQL's inserts too). On a
machine with fewer cores than clients this measures contention for the cores as much as
anything: compare pymem with plain SQL at the same number of clients. Nothing here asserts a
duration.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from bench import common  # noqa: E402

DB = "pymem_concurrency_bench"
PLAIN_READ = """SELECT (SELECT pg_catalog.count(*) FROM (SELECT m.content FROM pymem.messages AS m
                         WHERE m.project_id = '' AND m.user_id = %(u)s AND m.thread_id = 'default'
                         ORDER BY m.seq DESC LIMIT 10) AS x),
                       (SELECT pg_catalog.count(*) FROM (SELECT f.content FROM pymem.facts AS f
                         WHERE f.project_id = '' AND f.scope = 'user' AND f.scope_id = %(u)s AND f.superseded_by IS NULL
                         ORDER BY f.created_at DESC, f.id DESC LIMIT 50) AS y)"""
PLAIN_TURN = """INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content)
VALUES ('', %(u)s, 'default', %(s)s, 'user', %(q)s), ('', %(u)s, 'default', %(s)s + 1, 'assistant', %(a)s)"""
PLAIN_FACT = """INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key)
VALUES ('', 'user', %(u)s, %(c)s, pymem.fact_key(%(c)s))
ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING"""


def user(side: str, client: int) -> str:
    return f"{side}-client-{client:03d}"


class PymemClient:
    def __init__(self, mem: pymem.Memory, client: int) -> None:
        self.mem, self.user = mem, user("pymem", client)

    def turn(self, i: int) -> None:
        q = f"turn {i}: what did I say about the trip to Lisbon?"
        self.mem.context(q, user=self.user)
        self.mem.record(q, f"answer {i}: you said Lisbon in May.", user=self.user)

    def fact(self, i: int) -> None:
        self.mem.persist(f"fact {i} of {self.user}: prefers seat {i % 40} on trains", user=self.user)


class PlainClient:
    def __init__(self, dsn: str, client: int) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.user = user("plain", client)
        self.conn.execute("INSERT INTO pymem.threads (project_id, user_id, thread_id) VALUES ('', %s, 'default') "
                          "ON CONFLICT DO NOTHING", (self.user,))
        last = self.conn.execute("SELECT coalesce(max(seq), 0) FROM pymem.messages WHERE project_id = '' "
                                 "AND user_id = %s AND thread_id = 'default'", (self.user,)).fetchone()[0]
        self.seq = int(last) + 1

    def turn(self, i: int) -> None:
        self.conn.execute(PLAIN_READ, {"u": self.user}, prepare=True).fetchall()
        self.conn.execute(PLAIN_TURN, {"u": self.user, "s": self.seq, "q": f"turn {i}: what did I say about the trip?",
                                       "a": f"answer {i}: you said Lisbon."}, prepare=True)
        self.seq += 2

    def fact(self, i: int) -> None:
        self.conn.execute(PLAIN_FACT, {"u": self.user, "c": f"fact {i} of {self.user}: prefers seat {i % 40}"},
                          prepare=True)

    def close(self) -> None:
        self.conn.close()


def run_client(client: Any, ops: int, warmup: int, offset: int, barrier: Any) -> dict[str, Any]:
    """``warmup`` untimed operations, the barrier, then ``ops`` timed ones (a turn, then a fact
    write, in turn): the latencies of each kind and the timed span."""
    for i in range(warmup):
        (client.turn if i % 2 == 0 else client.fact)(offset + i)
    barrier.wait()
    lat: dict[str, list[int]] = {"turn": [], "fact": []}
    t0 = time.perf_counter_ns()
    for i in range(warmup, warmup + ops):
        kind = "turn" if i % 2 == 0 else "fact"
        s = time.perf_counter_ns()
        getattr(client, kind)(offset + i)
        lat[kind].append(time.perf_counter_ns() - s)
    return {"lat": lat, "span_ns": time.perf_counter_ns() - t0}


def _process_client(side: str, dsn: str, client: int, ops: int, warmup: int, offset: int, barrier: Any,
                    out: Any) -> None:
    if side == "pymem":
        with pymem.Database(pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1)) as db:
            mem = pymem.Memory(agent_id="bench", db=db, embedder=pymem.HashEmbedder())
            out.put(run_client(PymemClient(mem, client), ops, warmup, offset, barrier))
    else:
        c = PlainClient(dsn, client)
        try:
            out.put(run_client(c, ops, warmup, offset, barrier))
        finally:
            c.close()


def one(side: str, mode: str, dsn: str, clients: int, ops: int, warmup: int, offset: int) -> dict[str, Any]:
    """One side in one mode with ``clients`` clients: the clients' results summed up."""
    results: list[dict[str, Any]] = []
    if mode == "threads":
        barrier = threading.Barrier(clients)
        db = None
        if side == "pymem":
            db = pymem.Database(pymem.Settings(dsn=dsn, pool_min_size=clients, pool_max_size=clients))
            mem = pymem.Memory(agent_id="bench", db=db, embedder=pymem.HashEmbedder())
            made: list[Any] = [PymemClient(mem, k) for k in range(clients)]
        else:
            made = [PlainClient(dsn, k) for k in range(clients)]
        lock = threading.Lock()

        def work(c: Any) -> None:
            r = run_client(c, ops, warmup, offset, barrier)
            with lock:
                results.append(r)

        threads = [threading.Thread(target=work, args=(c,)) for c in made]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in made:
            if isinstance(c, PlainClient):
                c.close()
        if db is not None:
            db.close()
    else:
        ctx = multiprocessing.get_context("fork")
        barrier, out = ctx.Barrier(clients), ctx.Queue()
        procs = [ctx.Process(target=_process_client, args=(side, dsn, k, ops, warmup, offset, barrier, out))
                 for k in range(clients)]
        for p in procs:
            p.start()
        results = [out.get(timeout=1800) for _ in procs]
        for p in procs:
            p.join()
            if p.exitcode:
                raise SystemExit(f"a {side} client process failed ({p.exitcode})")
    span = max(r["span_ns"] for r in results) / 1e9
    out_: dict[str, Any] = {"clients": clients, "span_s": round(span, 3)}
    for kind in ("turn", "fact"):
        ns = sorted(x for r in results for x in r["lat"][kind])
        out_[f"{kind}s_per_s"] = round(len(ns) / span, 1)
        out_[f"{kind}_p50_ms"] = round(statistics.median(ns) / 1e6, 3)
        out_[f"{kind}_p99_ms"] = round(common.percentile(ns, 0.99) / 1e6, 3)
    return out_


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: PYMEM_DSN, else the "
                                  "embedded one)")
    ap.add_argument("--clients", default="1,8,32", help="numbers of concurrent clients (default 1,8,32)")
    ap.add_argument("--ops", type=common.positive, default=40, help="timed operations per client (default 40)")
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--mode", default="threads,processes", help="threads, processes or both (default)")
    ap.add_argument("--feed", action="store_true", help="the change feed on")
    ap.add_argument("--results-dir", help="where the JSON result goes (default bench/results)")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.clients.split(",")]
    modes = [m for m in args.mode.split(",") if m]
    if any(n < 1 for n in counts) or not set(modes) <= {"threads", "processes"} or not modes:
        ap.error("--clients: numbers >= 1; --mode: threads and/or processes")
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"concurrency on {where}; scratch database {DB}")
    dsn = common.scratch_database(conninfo, DB)
    if args.feed:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT pymem.change_feed_configure(enabled => true)")
    rows: list[dict[str, Any]] = []
    offset = 0
    for mode in modes:
        for n in counts:
            for side in ("pymem", "plain SQL"):  # the same clients, the same minutes
                common.progress(f"{side}, {mode}, {n} clients")
                r = one("pymem" if side == "pymem" else "plain", mode, dsn, n, args.ops, args.warmup, offset)
                offset += args.ops + args.warmup
                rows.append({"side": side, "mode": mode, **r})
    print(f"\n{'side':10} {'mode':10} {'clients':>7} {'turns/s':>9} {'turn p50':>9} {'turn p99':>9} "
          f"{'facts/s':>9} {'fact p50':>9} {'fact p99':>9} {'turns/s vs plain':>17}")
    for r in rows:
        plain = next(p for p in rows if p["side"] == "plain SQL" and p["mode"] == r["mode"]
                     and p["clients"] == r["clients"])
        print(f"{r['side']:10} {r['mode']:10} {r['clients']:7d} {r['turns_per_s']:9.1f} {r['turn_p50_ms']:9.2f} "
              f"{r['turn_p99_ms']:9.2f} {r['facts_per_s']:9.1f} {r['fact_p50_ms']:9.2f} {r['fact_p99_ms']:9.2f} "
              f"{r['turns_per_s'] / plain['turns_per_s']:16.2f}x")
    print("(ms; per side, mode and number of clients: the operations of all clients over the slowest one's span)")
    print("command: " + common.command_line("bench/concurrency.py", argv))
    result = {"rows": rows, "args": vars(args), "git": common.git_revision()}
    return common.finish("concurrency", result, write=True, results_dir=args.results_dir, where=where)


if __name__ == "__main__":
    main()
