"""Deferred learning (issue 37): record() stores the turn and a learning job in one transaction and
returns at once; workers (Memory.learn_pending, `pymem worker`) claim jobs with FOR UPDATE SKIP
LOCKED under a lease, apply each job's changes once and in each user's order, retry failures
with a backoff, dead-letter them after max_attempts, and skip jobs past a project's cost caps.
Against the real server; the model is a learner of the test's own or tests/chat_server.py."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory
from pymem.learning import configure_limits, jobs, limits, requeue, status
from pymem.llm import ChatLearner, FactChange
from pymem.web import MemoryPage

from chat_server import ChatServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=6)) as d:
        yield d


class Learner:
    """A reconciling learner without a model: the user's message is the fact. It keeps, in
    order, every message it was asked about (thread-safe), and may wait a little."""

    def __init__(self, delay: float = 0.0) -> None:
        self.seen: list[str] = []
        self.delay = delay
        self.lock = threading.Lock()

    def extract(self, message: str) -> list[str]:
        with self.lock:
            self.seen.append(message)
        if self.delay:
            time.sleep(random.uniform(0, self.delay))
        return [message]

    def reconcile(self, candidates: list[str], stored: list[dict]) -> list[FactChange]:
        return [FactChange("add", c) for c in candidates]


def test_a_deferred_turn_is_stored_with_its_job_and_a_worker_learns_from_it_once(db):
    app = Memory(db=db, agent_id="bot", project_id="q", deferred_learning=True)  # no learner: the app calls no model
    result = app.record("I live in Oslo", "Noted.", user="alice")
    assert result.learning_pending and isinstance(result.learning_job, int)
    assert result.learned_fact_ids == [] and result.failures == []
    assert [m.content for m in app.window(user="alice")] == ["I live in Oslo", "Noted."]
    assert app.retrieve(user="alice") == []
    st = app.learning_status()
    assert (st.pending, st.ready, st.running, st.dead) == (1, 1, 0, 0) and st.oldest_pending_seconds >= 0

    with pytest.raises(pymem.ValidationError, match="needs something to learn with"):
        app.learn_pending()

    learner = Learner()
    worker = Memory(db=db, agent_id="bot", project_id="q", embedder=HashEmbedder(), learner=learner)
    report = worker.learn_pending()
    assert (report.claimed, report.done, report.retried, report.dead, report.lost) == (1, 1, 0, 0, 0)
    assert report.calls == 1  # extract only: nothing stored to reconcile with
    facts = app.retrieve(user="alice")
    assert [f.content for f in facts] == ["I live in Oslo"]
    assert facts[0].source == "learned" and facts[0].metadata["turn"] == {"thread_id": "default", "seq": result.user_seq}
    assert worker.learn_pending().claimed == 0  # nothing left: applied once
    assert learner.seen == ["I live in Oslo"]
    st = worker.learning_status()
    assert (st.pending, st.running, st.oldest_pending_seconds, st.calls_today) == (0, 0, None, 1)


def test_two_workers_apply_200_turns_of_20_users_once_each_and_in_each_users_order(db):
    app = Memory(db=db, agent_id="bot", project_id="q2", deferred_learning=True)
    users = [f"u{i:02d}" for i in range(20)]
    for n in range(10):
        for u in users:
            app.record(f"{u} turn {n:02d}", "ok", user=u)
    assert app.learning_status().pending == 200
    learner = Learner(delay=0.004)
    reports: list[pymem.LearningReport] = []

    def worker() -> None:
        mem = Memory(db=db, agent_id="bot", project_id="q2", embedder=HashEmbedder(), learner=learner)
        reports.append(mem.learn_pending(batch=5))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(r.done for r in reports) == 200 and sum(r.claimed for r in reports) == 200
    assert all(r.retried == r.dead == r.lost == 0 for r in reports)
    assert all(r.claimed > 0 for r in reports), "both workers took jobs"
    # each turn was learned from exactly once ...
    assert sorted(learner.seen) == sorted(f"{u} turn {n:02d}" for u in users for n in range(10))
    # ... and each user's turns in order: a job is claimable only after the user's previous one ended
    for u in users:
        mine = [m for m in learner.seen if m.startswith(u + " ")]
        assert mine == sorted(mine), mine
        facts = sorted(app.retrieve(user=u), key=lambda f: f.id)
        assert [f.content for f in facts] == [f"{u} turn {n:02d}" for n in range(10)]
    assert app.learning_status().pending == 0


def test_a_lost_lease_applies_nothing_and_the_worker_that_took_the_job_over_applies_it(db, dsn):
    app = Memory(db=db, agent_id="bot", project_id="q3", deferred_learning=True)
    app.record("I like tea", "ok", user="bob")
    with psycopg.connect(dsn, autocommit=True) as c:
        job = c.execute("SELECT job_id, lease_token, attempts FROM pymem.learning_claim(project_id => 'q3', "
                        "lease_seconds => 1)").fetchone()
        assert job[2] == 1
        # a second claim while the lease holds gets nothing
        assert c.execute("SELECT count(*) FROM pymem.learning_claim(project_id => 'q3')").fetchone()[0] == 0
        time.sleep(1.2)
        worker = Memory(db=db, agent_id="bot", project_id="q3", embedder=HashEmbedder(), learner=Learner())
        report = worker.learn_pending()
        assert (report.claimed, report.done) == (1, 1)
        # the first worker comes back late: its lease was taken over, nothing of it is applied
        row = c.execute("SELECT completed, learned_ids FROM pymem.learning_complete(user_id => 'bob', job_id => %s, "
                        "lease_token => %s, project_id => 'q3', learned => ARRAY['planted late'])",
                        (job[0], job[1])).fetchone()
        assert row == (False, None)
        assert c.execute("SELECT pymem.learning_fail(user_id => 'bob', job_id => %s, lease_token => %s, "
                         "error_kind => 'X', error => 'late', project_id => 'q3')", (job[0], job[1])).fetchone()[0] == "lost"
    assert [f.content for f in app.retrieve(user="bob")] == ["I like tea"]


def test_a_failing_model_retries_then_dead_letters_without_losing_the_turn(db, dsn):
    server = ChatServer()
    learner = ChatLearner(server.client(timeout=0.5))
    app = Memory(db=db, agent_id="bot", project_id="q4", deferred_learning=True)
    app.record("I work at Acme", "ok", user="carol")
    worker = Memory(db=db, agent_id="bot", project_id="q4", embedder=HashEmbedder(), learner=learner)
    # HTTP 500, then junk, then a reply slower than the timeout: three failed attempts
    server.script = [{"status": 500}, "this is not JSON", {"sleep": 1.5, "content": '{"facts": []}'}]
    report = worker.learn_pending(max_attempts=3, backoff_seconds=0)  # no backoff: each retry at once
    assert (report.claimed, report.done, report.retried, report.dead) == (3, 0, 2, 1)
    assert [f.split(": ")[1] for f in report.failures] == ["ConnectionError, HTTP 500", "ValidationError", "TimeoutError"]
    assert "(attempt 3, dead)" in report.failures[-1]
    st = worker.learning_status()
    assert (st.pending, st.dead) == (0, 1) and st.failures == {"TimeoutError": 1} and st.calls_today == 3
    dead = jobs(db, "q4", state="dead")
    assert len(dead) == 1 and dead[0]["attempts"] == 3 and dead[0]["error_kind"] == "TimeoutError"
    assert "I work at Acme" not in dead[0]["error"]  # the error says what failed, not what the user said
    # the turn is whole, and nothing was learned
    assert [m.content for m in app.window(user="carol")] == ["I work at Acme", "ok"]
    assert app.retrieve(user="carol") == []
    # the model is fixed: requeued, the job is learned from
    server.script = ['{"facts": ["Works at Acme"]}']
    assert requeue(db, "q4") == 1
    report = worker.learn_pending()
    assert report.done == 1
    assert [f.content for f in app.retrieve(user="carol")] == ["Works at Acme"]
    server.httpd.shutdown()


def test_a_retry_waits_out_its_backoff_and_holds_the_users_later_turns_back(db):
    app = Memory(db=db, agent_id="bot", project_id="q5", deferred_learning=True)
    app.record("first", "ok", user="dan")
    app.record("second", "ok", user="dan")
    app.record("other", "ok", user="erin")

    class Once(Learner):
        def extract(self, message: str) -> list[str]:
            if message == "first" and "first" not in self.seen:
                self.seen.append(message)
                raise RuntimeError("the model is down")
            return super().extract(message)

    learner = Once()
    worker = Memory(db=db, agent_id="bot", project_id="q5", embedder=HashEmbedder(), learner=learner)
    report = worker.learn_pending(backoff_seconds=60)
    # dan's first turn failed and waits a minute; his second waits behind it; erin's is learned
    assert (report.claimed, report.done, report.retried) == (2, 1, 1)
    assert [f.content for f in worker.retrieve(user="erin")] == ["other"] and worker.retrieve(user="dan") == []
    st = worker.learning_status()
    assert (st.pending, st.ready, st.failures) == (2, 1, {"RuntimeError": 1})
    assert worker.learn_pending().claimed == 0  # the ready one is dan's second: held back by his first


def test_cost_caps_skip_learning_past_them_and_keep_the_turns(db, dsn):
    app = Memory(db=db, agent_id="bot", project_id="q6", deferred_learning=True)
    for n in range(3):
        app.record(f"fact {n} of fay", "ok", user="fay")
    app.record("fact of gil", "ok", user="gil")
    caps = configure_limits(db, "q6", user_calls_per_day=2, project_tokens_per_day=10**9)
    assert caps.user_calls_per_day == 2 and caps.project_calls_per_day is None and caps.updated_at is not None
    assert limits(db, "q6") == caps
    learner = Learner()
    worker = Memory(db=db, agent_id="bot", project_id="q6", embedder=HashEmbedder(), learner=learner)
    report = worker.learn_pending()
    # fay: one call for her first turn (nothing stored yet), two for the second (extract, reconcile):
    # her third is past her 2 calls of today, skipped; gil has his own budget
    assert (report.done, report.skipped) == (3, 1), report
    assert sorted(f.content for f in worker.retrieve(user="fay")) == ["fact 0 of fay", "fact 1 of fay"]
    assert [m.content for m in app.window(user="fay")][-2:] == ["fact 2 of fay", "ok"]
    st = worker.learning_status()
    assert (st.skipped, st.skipped_today, st.calls_today) == (1, 1, 4)
    skipped = jobs(db, "q6", state="skipped")
    assert skipped[0]["error_kind"] == "cost_cap" and "user_calls_per_day (2)" in skipped[0]["error"]
    page = MemoryPage(db).project({"p": "q6"})  # the memory page shows the queue (as the reader role may)
    assert re.search(r"<h2>Learning queue</h2>.*<td>0 \(0\)</td><td>0</td><td>0</td><td>1</td>.*<td>4</td>", page, re.S)
    # the cap is raised (every cap None removes them); the skipped job is requeued and learned from
    assert configure_limits(db, "q6").user_calls_per_day is None and limits(db, "q6").updated_at is None
    assert requeue(db, "q6", state="skipped") == 1
    assert worker.learn_pending().done == 1
    assert len(worker.retrieve(user="fay")) == 3


def test_invalid_calls_are_refused_with_22023_and_change_nothing(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT * FROM pymem.turn_record(user_id => 'hal', user_content => 'hi there', "
                  "assistant_content => 'hello', project_id => 'q7', defer_learning => true)")
        bad = [
            "SELECT * FROM pymem.learning_claim(project_id => 'q7', max_jobs => 0)",
            "SELECT * FROM pymem.learning_claim(project_id => 'q7', lease_seconds => 0)",
            "SELECT * FROM pymem.learning_claim(project_id => 'q7', max_attempts => 0)",
            "SELECT * FROM pymem.learning_claim(project_id => '*')",
            "SELECT * FROM pymem.learning_jobs(project_id => 'q7', job_state => 'done')",
            "SELECT pymem.learning_requeue(project_id => 'q7', state => 'pending')",
            "SELECT * FROM pymem.learning_limits_configure(project_id => 'q7', user_calls_per_day => -1)",
            "SELECT * FROM pymem.learning_complete(user_id => 'hal', job_id => NULL, lease_token => NULL, project_id => 'q7')",
            "SELECT pymem.learning_fail(user_id => 'hal', job_id => 1, lease_token => gen_random_uuid(), "
            "error_kind => '', error => 'x', project_id => 'q7')",
            "SELECT * FROM pymem.learning_complete(user_id => 'hal', job_id => 1, lease_token => gen_random_uuid(), "
            "project_id => 'q7', calls => -1)",
            "SELECT * FROM pymem.turn_record(user_id => 'hal', user_content => 'x', assistant_content => 'y', "
            "project_id => 'q7', defer_learning => NULL)",
        ]
        for statement in bad:
            with pytest.raises(psycopg.Error) as caught:
                c.execute(statement)
            assert caught.value.sqlstate == "22023", statement
        assert c.execute("SELECT state, attempts FROM pymem.learning_jobs(project_id => 'q7')").fetchall() == [("pending", 0)]
        assert c.execute("SELECT count(*) FROM pymem.messages WHERE project_id = 'q7'").fetchone()[0] == 2
    with pytest.raises(pymem.ValidationError, match="deferred_learning"):
        Memory(deferred_learning="yes")


def test_a_bound_tenants_worker_never_sees_another_tenants_jobs(dsn, as_role):
    role = as_role("pymem_learning_acme")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_learning_acme")
        c.execute("SELECT pymem.tenant_bind('pymem_learning_acme', 'acme')")
        for project in ("acme", "globex"):
            c.execute("SELECT * FROM pymem.turn_record(user_id => 'ivy', user_content => %s, assistant_content => 'ok', "
                      "project_id => %s, defer_learning => true)", (f"secret of {project}", project))
    with pymem.Database(pymem.Settings(dsn=role)) as bound:
        learner = Learner()
        acme = Memory(db=bound, agent_id="bot", project_id="acme", embedder=HashEmbedder(), learner=learner)
        assert acme.learn_pending().done == 1
        assert learner.seen == ["secret of acme"]
        other = Memory(db=bound, agent_id="bot", project_id="globex", embedder=HashEmbedder(), learner=learner)
        for call in (other.learn_pending, other.learning_status):
            with pytest.raises(pymem.PermissionError, match="may not serve"):
                call()
        with psycopg.connect(role, autocommit=True) as c:
            for table in ("learning_jobs", "learning_usage", "learning_limits"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    c.execute(f"SELECT * FROM pymem.{table}")
    reader = as_role("pymem_learning_reader")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_reader TO pymem_learning_reader")
    with psycopg.connect(reader, autocommit=True) as c:
        assert c.execute("SELECT pending FROM pymem.learning_status(project_id => 'globex')").fetchone() == (1,)
        for call in ("SELECT * FROM pymem.learning_jobs(project_id => 'globex')",
                     "SELECT * FROM pymem.learning_claim(project_id => 'globex')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(call)
    assert learner.seen == ["secret of acme"]


def test_forgetting_a_thread_or_a_user_takes_their_jobs_and_usage(db):
    app = Memory(db=db, agent_id="bot", project_id="q8", deferred_learning=True)
    app.record("in thread a", "ok", user="jo", thread="a")
    app.record("in thread b", "ok", user="jo", thread="b")
    worker = Memory(db=db, agent_id="bot", project_id="q8", embedder=HashEmbedder(), learner=Learner())
    app.forget_conversation(user="jo", thread="a")
    assert app.learning_status().pending == 1
    assert worker.learn_pending(limit=1).done == 1  # thread b's
    app.record("later", "ok", user="jo", thread="b")
    receipt = app.forget_user(user="jo")
    assert receipt.counts["learning_jobs"] == 1 and receipt.counts["learning_usage"] == 1
    assert app.learning_status().pending == 0


LEARNER_MODULE = '''
import time
from pymem.llm import FactChange

class Stuck:
    """Answers after an hour: the worker is killed before."""
    def extract(self, message):
        print("extracting", flush=True)
        time.sleep(3600)
        return [message]
    def reconcile(self, candidates, stored):
        return [FactChange("add", c) for c in candidates]

stuck = Stuck()
'''


def test_a_worker_killed_mid_job_leaves_it_to_be_taken_again_and_applied_once(db, dsn, tmp_path):
    (tmp_path / "stuck_learner.py").write_text(LEARNER_MODULE)
    app = Memory(db=db, agent_id="bot", project_id="q9", deferred_learning=True)
    app.record("I play chess", "ok", user="kim")
    env = {**os.environ, "PYMEM_DSN": dsn, "PYMEM_PROJECT_ID": "q9"}
    proc = subprocess.Popen([sys.executable, "-m", "pymem.cli", "worker", "--learner", "stuck_learner:stuck",
                             "--lease", "2", "--poll", "0.2"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "extracting"  # the job is in hand
        running = jobs(db, "q9", state="running")
        assert len(running) == 1 and running[0]["attempts"] == 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(2.2)  # the dead worker's lease runs out
    worker = Memory(db=db, agent_id="bot", project_id="q9", embedder=HashEmbedder(), learner=Learner())
    report = worker.learn_pending()
    assert (report.claimed, report.done) == (1, 1)
    assert [f.content for f in app.retrieve(user="kim")] == ["I play chess"]
    assert status(db, "q9").pending == 0


def test_pymem_worker_drains_the_queue_and_says_what_it_did(db, dsn, tmp_path):
    (tmp_path / "rules.py").write_text("from pymem.llm import FactChange\n"
                                       "class Rules:\n"
                                       "    def extract(self, m): return [m]\n"
                                       "    def reconcile(self, c, s): return [FactChange('add', x) for x in c]\n")
    app = Memory(db=db, agent_id="bot", project_id="q10", deferred_learning=True)
    for n in range(3):
        app.record(f"note {n}", "ok", user=f"u{n}")
    env = {**os.environ, "PYMEM_DSN": dsn, "PYMEM_PROJECT_ID": "q10"}
    out = subprocess.run([sys.executable, "-m", "pymem.cli", "worker", "--learner", "rules:Rules", "--drain"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "claimed 3, done 3" in out.stdout and "queue: 0 pending" in out.stdout
    assert all(app.retrieve(user=f"u{n}") for n in range(3))
    bad = subprocess.run([sys.executable, "-m", "pymem.cli", "worker", "--learner", "rules:Nothing", "--drain"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "--learner rules:Nothing" in bad.stderr


SLOW_MODULE = '''
import time
from pymem.llm import FactChange

class Slow:
    def extract(self, message):
        print("extracting " + message, flush=True)
        time.sleep(1.0)
        return [message]
    def reconcile(self, candidates, stored):
        return [FactChange("add", c) for c in candidates]
'''


def test_sigterm_finishes_the_job_in_hand_and_gives_the_others_back(db, dsn, tmp_path):
    (tmp_path / "slow_learner.py").write_text(SLOW_MODULE)
    app = Memory(db=db, agent_id="bot", project_id="q11", deferred_learning=True)
    for n in range(4):
        app.record(f"hobby {n}", "ok", user=f"v{n}")
    env = {**os.environ, "PYMEM_DSN": dsn, "PYMEM_PROJECT_ID": "q11"}
    proc = subprocess.Popen([sys.executable, "-m", "pymem.cli", "worker", "--learner", "slow_learner:Slow",
                             "--batch", "4"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().startswith("extracting hobby 0")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopping after the job in hand" in err
    assert "claimed 1, done 1, released 3" in out and "queue: 3 pending (3 ready)" in out
    assert [f.content for f in app.retrieve(user="v0")] == ["hobby 0"]
    pending = jobs(db, "q11", state="pending")
    assert len(pending) == 3 and all(j["attempts"] == 0 for j in pending)  # released: no attempt counted


def test_a_deferred_turn_s_summary_is_folded_by_the_worker(db):
    folded: list[int] = []

    def summarize(previous, messages, max_chars):
        folded.append(len(messages))
        return f"{len(messages)} messages so far"

    app = Memory(db=db, agent_id="bot", project_id="q12", deferred_learning=True, summarizer=summarize,
                 summarize_every=2, keep_last=2)
    for n in range(3):
        app.record(f"message {n}", "ok", user="wu")
    assert folded == [] and app.summary(user="wu") is None  # the app called no model
    worker = Memory(db=db, agent_id="bot", project_id="q12", summarizer=summarize, summarize_every=2, keep_last=2)
    report = worker.learn_pending()
    assert report.done == 3 and report.calls == 1 and folded == [4]
    assert app.summary(user="wu") == "4 messages so far"


def test_async_memory_defers_and_learns_the_same(dsn):
    async def main() -> None:
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:
            app = pymem.AsyncMemory(db=adb, agent_id="bot", project_id="q13", deferred_learning=True)
            result = await app.record("I speak Norwegian", "ok", user="xia")
            assert result.learning_pending
            worker = pymem.AsyncMemory(db=adb, agent_id="bot", project_id="q13", learner=Learner())
            report = await worker.learn_pending()
            assert (report.done, report.calls) == (1, 1)
            assert [f.content for f in await app.retrieve(user="xia")] == ["I speak Norwegian"]
            assert (await worker.learning_status()).pending == 0

    asyncio.run(main())


def test_a_claim_reads_only_open_jobs_through_the_partial_indexes(dsn):
    """Plans, not timers: with 20,000 dead and skipped jobs kept for operators and a few open ones,
    the claim's reads (custom and generic plans alike, as PL/pgSQL runs them) go through the
    partial indexes of open jobs, never a scan of the whole table."""
    from conftest import PlanLog, plan_nodes

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT count(*) FROM pymem.messages_add_many('yan', 'default', ARRAY['user'], ARRAY['hello'], 'q14')")
        c.execute("""INSERT INTO pymem.learning_jobs (project_id, user_id, thread_id, seq, state, error_kind)
                     SELECT 'q14', 'yan', 'default', 1, CASE WHEN g % 2 = 0 THEN 'dead' ELSE 'skipped' END, 'X'
                       FROM generate_series(1, 20000) AS g""")
        c.execute("""INSERT INTO pymem.learning_jobs (project_id, user_id, thread_id, seq)
                     SELECT 'q14', 'yan', 'default', 1 FROM generate_series(1, 3)""")
        c.execute("ANALYZE pymem.learning_jobs")
        log = PlanLog(c)
        for _ in range(8):  # plpgsql switches to a generic plan after five runs
            claimed = c.execute("SELECT job_id, lease_token FROM pymem.learning_claim(project_id => 'q14')").fetchall()
            for job_id, token in claimed:
                c.execute("SELECT pymem.learning_release(user_id => 'yan', job_id => %s, lease_token => %s, "
                          "project_id => 'q14')", (job_id, token))
        reads = [list(plan_nodes(p["Plan"])) for p in log.plans
                 if any(n.get("Relation Name") == "learning_jobs" for n in plan_nodes(p["Plan"]))]
        assert len(reads) >= 16
        for nodes in reads:
            scans = [n for n in nodes if n.get("Relation Name") == "learning_jobs" and "Scan" in n["Node Type"]]
            assert all(n["Node Type"] != "Seq Scan" for n in scans), [n["Node Type"] for n in scans]
            assert all(n.get("Index Name") in ("learning_jobs_open", "learning_jobs_user_open", "learning_jobs_pkey")
                       for n in scans), [n.get("Index Name") for n in scans]


def test_an_in_flight_worker_cannot_bring_an_erased_user_back_and_retention_purges_usage(db, dsn):
    """Issue 58, finding 3: a worker that held a user's job while user_forget ran added a
    learning_usage row with the erased id when it came back (usage was counted before the lease
    was checked), and usage rows were never purged."""
    app = Memory(db=db, agent_id="bot", project_id="q20", deferred_learning=True)
    app.record("I live in Oslo", "ok", user="eve")
    app.record("I like tea", "ok", user="max")
    with psycopg.connect(dsn, autocommit=True) as c:
        jobs_ = c.execute("SELECT user_id, job_id, lease_token FROM pymem.learning_claim(project_id => 'q20')").fetchall()
        held = {u: (j, t) for u, j, t in jobs_}
        receipt = app.forget_user(user="eve")  # while eve's job is in a worker's hands
        assert receipt.counts["learning_jobs"] == 1
        j, t = held["eve"]
        row = c.execute("SELECT completed, learned_ids FROM pymem.learning_complete(user_id => 'eve', job_id => %s, "
                        "lease_token => %s, project_id => 'q20', learned => ARRAY['Lives in Oslo'], calls => 2, "
                        "tokens => 300)", (j, t)).fetchone()
        assert row == (False, None)
        assert c.execute("SELECT pymem.learning_fail(user_id => 'eve', job_id => %s, lease_token => %s, "
                         "error_kind => 'X', error => 'late', project_id => 'q20', calls => 1)", (j, t)).fetchone()[0] == "lost"
        assert c.execute("SELECT count(*) FROM pymem.learning_usage WHERE user_id = 'eve'").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'eve'").fetchone()[0] == 0
        # input checks still come first (22023), and a worker that holds its lease counts its usage
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT * FROM pymem.learning_complete(user_id => 'eve', job_id => 1, lease_token => gen_random_uuid(), "
                      "project_id => 'q20', calls => -1)")
        assert e.value.sqlstate == "22023"
        j, t = held["max"]
        assert c.execute("SELECT completed FROM pymem.learning_complete(user_id => 'max', job_id => %s, lease_token => %s, "
                         "project_id => 'q20', calls => 1, tokens => 10)", (j, t)).fetchone()[0] is True
        # retention purges usage of the days past the policy's age, with the project's other rows
        c.execute("UPDATE pymem.learning_usage SET day = day - 40 WHERE project_id = 'q20'")
        c.execute("INSERT INTO pymem.learning_usage (project_id, day, user_id, calls) "
                  "VALUES ('q20', (now() AT TIME ZONE 'UTC')::date, 'max', 1)")
        c.execute("CREATE INDEX IF NOT EXISTS messages_created ON pymem.messages (project_id, created_at)")
        c.execute("SELECT * FROM pymem.retention_configure(project_id => 'q20', messages_max_age => '30 days')")
        got = dict(c.execute("SELECT kind, purged FROM pymem.purge('q20')").fetchall())
        assert got["learning_usage"] == 1
        assert c.execute("SELECT count(*) FROM pymem.learning_usage WHERE project_id = 'q20'").fetchone()[0] == 1  # today's


def test_a_failed_job_keeps_no_message_content_even_when_the_model_quotes_it(db, caplog):
    """Issue 58, finding 4: the worker stored the exception's text in learning_jobs.error (and
    logged it); a model endpoint's error that quotes its input is the user's message."""
    secret = "My passport number is X1234567"
    server = ChatServer()
    app = Memory(db=db, agent_id="bot", project_id="q21", deferred_learning=True)
    app.record(secret, "ok", user="ina")
    worker = Memory(db=db, agent_id="bot", project_id="q21", embedder=HashEmbedder(),
                    learner=ChatLearner(server.client(timeout=5)))
    quoting = json.dumps({"error": {"message": f"invalid input: {secret}"}}).encode()
    server.script = [{"status": 400, "raw": quoting}, {"status": 500, "raw": quoting},
                     {"raw": f"not JSON: {secret}".encode()}]
    with caplog.at_level("WARNING", logger="pymem"):
        report = worker.learn_pending(max_attempts=3, backoff_seconds=0)
    server.httpd.shutdown()
    assert report.dead == 1
    everything = json.dumps(jobs(db, "q21", state="dead"), default=str) + " ".join(report.failures) + caplog.text
    assert "passport" not in everything and "X1234567" not in everything
    dead = jobs(db, "q21", state="dead")[0]
    assert dead["error_kind"] == "ValidationError" and dead["error"] == "ValidationError"
    assert [f.split(": ")[1] for f in report.failures] == ["ConfigError, HTTP 400", "ConnectionError, HTTP 500",
                                                          "ValidationError"]


def test_one_claim_never_leases_more_jobs_than_the_projects_calls_left(db, dsn):
    """Issue 58, finding 5: with project_calls_per_day = 1, one learn_pending(batch=10) leased four
    jobs and made four model calls (the cap was compared with the usage before the claim only)."""
    app = Memory(db=db, agent_id="bot", project_id="q22", deferred_learning=True)
    for u in ("ann", "ben", "cid", "dot"):
        app.record(f"a fact of {u}", "ok", user=u)
    configure_limits(db, "q22", project_calls_per_day=1)
    learner = Learner()
    worker = Memory(db=db, agent_id="bot", project_id="q22", embedder=HashEmbedder(), learner=learner)
    report = worker.learn_pending(batch=10)
    assert len(learner.seen) == 1 and report.calls == 1  # one model call: the cap
    assert (report.done, report.skipped) == (1, 3), report
    assert worker.learning_status().calls_today == 1
    with psycopg.connect(dsn, autocommit=True) as c:  # another worker's job in hand counts as a call
        configure_limits(db, "q22", project_calls_per_day=3)
        assert requeue(db, "q22", state="skipped") == 3
        first = c.execute("SELECT state FROM pymem.learning_claim(project_id => 'q22', max_jobs => 10)").fetchall()
        assert first == [("running",), ("running",)]  # 1 spent: 2 calls left, 2 jobs leased
        # another worker's claim counts those two in hand: nothing left to lease
        assert c.execute("SELECT count(*) FROM pymem.learning_claim(project_id => 'q22', max_jobs => 10)").fetchone()[0] == 0


def test_two_workers_claiming_at_once_lease_no_more_than_the_projects_calls_left(db, dsn):
    """Finding 5 under concurrency: two claims at the same moment each read the same usage; the
    project's claims take turns on its row of learning_limits, so the second counts the job the
    first leased (shown by the lock wait itself)."""
    from conftest import wait_for_lock

    app = Memory(db=db, agent_id="bot", project_id="q23", deferred_learning=True)
    for u in ("ann", "ben"):
        app.record(f"a fact of {u}", "ok", user=u)
    configure_limits(db, "q23", project_calls_per_day=1)
    claim = "SELECT state FROM pymem.learning_claim(project_id => 'q23', max_jobs => 10)"
    got: dict[str, list] = {}
    with psycopg.connect(dsn) as first, psycopg.connect(dsn, autocommit=True) as second:
        assert first.execute(claim).fetchall() == [("running",)]  # not committed yet
        t = threading.Thread(target=lambda: got.update(second=second.execute(claim).fetchall()))
        t.start()
        wait_for_lock(dsn, blocked_by=first.info.backend_pid)
        first.commit()
        t.join(20)
    assert got["second"] == []  # the first's job in hand is the one call left

def test_a_deferred_memory_with_its_own_summary_cadence_warns_that_the_worker_decides(caplog):
    """Issue 59, item 3: the app's summarize_every / keep_last are not carried by the job."""
    import logging

    with caplog.at_level(logging.WARNING, logger="pymem"):
        pymem.MemoryOptions(deferred_learning=True)
        pymem.MemoryOptions(summarize_every=5)
        assert caplog.records == []
        pymem.MemoryOptions(deferred_learning=True, summarize_every=5, keep_last=2)
    [record] = caplog.records
    assert "summarize_every=5 / keep_last=2 are not used" in record.getMessage()
    assert "--summarize-every" in record.getMessage()


def test_pymem_worker_takes_the_summary_cadence(db, dsn, tmp_path):
    (tmp_path / "summing.py").write_text("from pymem.llm import FactChange\n"
                                         "class Rules:\n"
                                         "    def extract(self, m): return []\n"
                                         "    def reconcile(self, c, s): return []\n"
                                         "    def summarize(self, previous, messages, max_chars): return 'summed'\n")
    app = Memory(db=db, agent_id="bot", project_id="q12", deferred_learning=True)
    for n in range(3):
        app.record(f"note {n}", "ok", user="sam")
    env = {**os.environ, "PYMEM_DSN": dsn, "PYMEM_PROJECT_ID": "q12"}
    out = subprocess.run([sys.executable, "-m", "pymem.cli", "worker", "--learner", "summing:Rules", "--drain",
                          "--summarize-every", "2", "--keep-last", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert app.summary(user="sam") == "summed"  # 6 messages: under the default cadence (10), none


def test_jobs_are_dataclasses_as_the_status_is(db):
    """Issue 59, item 7: pymem.learning.jobs() returns LearningJob objects (their fields by name
    too, as the dicts it returned)."""
    from pymem.types import LearningJob

    app = Memory(db=db, agent_id="bot", project_id="q13", deferred_learning=True)
    app.record("note", "ok", user="ann")
    [job] = jobs(db, "q13")
    assert isinstance(job, LearningJob) and job.user_id == "ann" and job.seq == 1 and job.state == "pending"
    assert job["attempts"] == job.attempts == 0
    with pytest.raises(KeyError):
        job["content"]


def test_a_backfill_queues_stored_turns_once_in_order_and_a_worker_learns_them(db, dsn, tmp_path):
    """Issue 59, item 6: turns stored before a learner existed (recorded without one, imported)
    are queued by pymem.learning_backfill / `pymem learn --backfill`, each user's in the order
    said, each once (a second backfill queues nothing), and the worker learns them."""
    from datetime import datetime, timedelta, timezone

    from pymem.learning import backfill

    plain = Memory(db=db, agent_id="bot", project_id="q14")  # no learner: nothing learned
    t0 = datetime.now(timezone.utc) - timedelta(days=3)
    plain.add_messages([{"content": "I live in Oslo", "created_at": t0},
                        {"content": "ok", "role": "assistant", "created_at": t0},
                        {"content": "I moved to Bergen", "created_at": t0 + timedelta(days=1)}], user="ann")
    plain.record("I have a cat", "Nice.", user="ann", thread="pets")
    plain.record("I like tea", "ok", user="bob")
    assert backfill(db, "q14", user_id="ann", batch=1) == 3  # one job per transaction: marks carry on
    assert [(j.thread_id, j.seq) for j in jobs(db, "q14")] == [("default", 1), ("default", 3), ("pets", 1)]
    assert backfill(db, "q14", user_id="ann") == 0  # once
    plain.record("I play chess", "ok", user="ann")  # said after the backfill: the next one queues it
    env = {**os.environ, "PYMEM_DSN": dsn, "PYMEM_PROJECT_ID": "q14"}
    out = subprocess.run([sys.executable, "-m", "pymem.cli", "learn", "--backfill"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "queued 2 stored turn(s)" in out.stdout  # ann's chess, bob's tea
    learner = Learner()
    worker = Memory(db=db, agent_id="bot", project_id="q14", embedder=HashEmbedder(), learner=learner)
    report = worker.learn_pending()
    assert report.done == 5 and status(db, "q14").pending == 0
    ann = [m for m in learner.seen if m != "I like tea"]
    assert ann == ["I live in Oslo", "I moved to Bergen", "I have a cat", "I play chess"]  # in the order said
    assert {f.content for f in worker.retrieve(user="bob")} == {"I like tea"}
    assert backfill(db, "q14") == 0
    with pytest.raises(pymem.ValidationError, match="since"):
        backfill(db, "q14", since=t0, until=t0)
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.errors.InvalidParameterValue):
        c.execute("SELECT * FROM pymem.learning_backfill(project_id => 'q14', user_id => '*')")
