"""Deferred learning (issue 37): what a turn costs with the model off its path, and how fast
workers drain the queue, in one run on one server:

    PYMEM_DATA_DIR=/tmp/bench-learning python bench/learning_queue.py [--turns 200] [--delay 0.2] [--jobs 2000]

- **record() p50**, three Memories in alternating rounds over the same users: no learner (what
  storing a turn costs), ``deferred_learning=True`` (the turn and its job), and inline learning
  with a :class:`pymem.llm.ChatLearner` whose chat model (a server on the loopback interface)
  answers after ``--delay`` seconds per request. The deferred turn's job is drained between
  rounds, so each round starts from an empty queue;
- **worker throughput**: ``--jobs`` turns over ``--users`` users are queued, then drained by
  ``learn_pending`` with a zero-latency model: the same ChatLearner over HTTP with no delay (one
  worker, then two worker threads), and a learner in the process (no HTTP: the queue's own
  ceiling). Jobs per second, each job applied once (checked: one fact per turn).

A scratch database (``pymem_learning_bench``) on the server of PYMEM_DSN, else the embedded one.
Nothing here asserts a duration; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
import pymem  # noqa: E402
from pymem.llm import ChatClient, ChatLearner, FactChange  # noqa: E402

DB = "pymem_learning_bench"


class FakeModel:
    """A chat-completions server on the loopback interface: every answer after ``delay`` seconds;
    extract finds one fact (the message itself), reconcile adds every candidate."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requests = 0
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.requests += 1
                task = json.loads(body["messages"][1]["content"])
                if "user_message" in task:
                    reply = {"facts": [task["user_message"][:200]]}
                elif "learned" in task:
                    reply = {"decisions": [{"learned": i["number"], "op": "ADD"} for i in task["learned"]]}
                else:
                    reply = {"summary": "a summary"}
                time.sleep(model.delay)
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": json.dumps(reply)}}],
                                   "usage": {"total_tokens": 100}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def learner(self) -> ChatLearner:
        return ChatLearner(ChatClient("fake", base_url=self.url, timeout=30, api_key=""))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class InProcess:
    """A learner without HTTP: the message is the fact."""

    def extract(self, message: str) -> list[str]:
        return [message[:200]]

    def reconcile(self, candidates: list[str], stored: list[dict[str, Any]]) -> list[FactChange]:
        return [FactChange("add", c) for c in candidates]


def records(db: pymem.Database, model: FakeModel, turns: int, users: int, rounds: int) -> dict[str, Any]:
    plain = pymem.Memory(db=db, agent_id="bench", project_id="rec")
    deferred = pymem.Memory(db=db, agent_id="bench", project_id="rec", deferred_learning=True)
    inline = pymem.Memory(db=db, agent_id="bench", project_id="rec", learner=model.learner())
    drain = pymem.Memory(db=db, agent_id="bench", project_id="rec", learner=InProcess())
    ways = {"no learner": plain, "deferred": deferred, "inline (model)": inline}
    samples: dict[str, list[int]] = {k: [] for k in ways}
    per_round = max(1, turns // rounds)
    n = 0
    for r in range(rounds):
        for name, mem in ways.items():
            for i in range(per_round):
                n += 1
                t0 = time.perf_counter_ns()
                mem.record(f"I visited city number {n} on trip {r}", "Noted.", user=f"rec-{i % users}")
                samples[name].append(time.perf_counter_ns() - t0)
            drain.learn_pending()  # an empty queue for the next round
    base = statistics.median(samples["no learner"])
    return {k: {"p50_ms": round(statistics.median(v) / 1e6, 3), "p95_ms": round(sorted(v)[int(len(v) * 0.95) - 1] / 1e6, 3),
                "x_no_learner": round(statistics.median(v) / base, 3), "turns": len(v)} for k, v in samples.items()}


def enqueue(db: pymem.Database, project: str, jobs: int, users: int) -> None:
    app = pymem.Memory(db=db, agent_id="bench", project_id=project, deferred_learning=True)
    for j in range(jobs):
        app.record(f"Fact {j} about user {j % users}", "ok", user=f"u{j % users}")


def drain(db: pymem.Database, dsn: str, project: str, learner: Any, workers: int, jobs: int) -> dict[str, Any]:
    reports: list[pymem.LearningReport] = []

    def work() -> None:
        mem = pymem.Memory(db=db, agent_id="bench", project_id=project, learner=learner)
        reports.append(mem.learn_pending(batch=10))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = sum(r.done for r in reports)
    with psycopg.connect(dsn, autocommit=True) as c:
        facts = c.execute("SELECT count(*) FROM pymem.facts WHERE project_id = %s", (project,)).fetchone()[0]
        left = c.execute("SELECT count(*) FROM pymem.learning_jobs WHERE project_id = %s", (project,)).fetchone()[0]
    return {"workers": workers, "jobs": jobs, "done": done, "facts": facts, "left": left,
            "jobs_per_s": round(done / wall, 1), "seconds": round(wall, 2),
            "lost": sum(r.lost for r in reports), "retried": sum(r.retried for r in reports)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: PYMEM_DSN, else the embedded one)")
    ap.add_argument("--turns", type=common.positive, default=200, help="timed record() calls per way")
    ap.add_argument("--rounds", type=common.positive, default=10, help="alternating rounds the turns are split into")
    ap.add_argument("--delay", type=float, default=0.2, help="the fake model's answer time for record(), seconds")
    ap.add_argument("--jobs", type=common.positive, default=2000, help="jobs queued per throughput run")
    ap.add_argument("--users", type=common.positive, default=50)
    args = ap.parse_args(argv)
    if not 0 <= args.delay <= 10:
        ap.error("--delay must be between 0 and 10 seconds")
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"learning queue bench on {where}")
    dsn = common.scratch_database(conninfo, DB)
    result: dict[str, Any] = {"args": vars(args)}
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=6)) as db:
        slow = FakeModel(args.delay)
        try:
            common.progress(f"record(): {args.turns} turns per way, model delay {args.delay} s")
            result["record"] = records(db, slow, args.turns, args.users, args.rounds)
        finally:
            slow.close()
        fast = FakeModel(0.0)
        try:
            result["throughput"] = {}
            for name, learner, workers in (("chat model over HTTP, 1 worker", fast.learner(), 1),
                                           ("chat model over HTTP, 2 workers", fast.learner(), 2),
                                           ("in-process learner, 1 worker", InProcess(), 1)):
                project = f"tp{len(result['throughput'])}"
                common.progress(f"throughput: {name}: queueing {args.jobs} jobs")
                enqueue(db, project, args.jobs, args.users)
                result["throughput"][name] = drain(db, dsn, project, learner, workers, args.jobs)
        finally:
            fast.close()
    for name, r in result["record"].items():
        print(f"record() {name:16} p50 {r['p50_ms']:9.3f} ms  p95 {r['p95_ms']:9.3f} ms  {r['x_no_learner']:7.3f}x no learner")
    for name, r in result["throughput"].items():
        print(f"drain {name:34} {r['done']}/{r['jobs']} jobs in {r['seconds']} s: {r['jobs_per_s']} jobs/s "
              f"(facts {r['facts']}, left {r['left']}, lost {r['lost']})")
    print("command: " + common.command_line("bench/learning_queue.py", argv))
    return result


if __name__ == "__main__":
    main()
