"""Deferred learning over ``sql/api/learning.sql``: learning off the hot path.

``Memory(deferred_learning=True)`` makes ``record()`` (and a ``turn``) store the turn and one
learning job in the same transaction (``pymem.turn_record(defer_learning => true)``) and return
at once: no model is called, and ``TurnResult.learning_pending`` is True. A worker learns from
the queued turns later, with the Memory's learner (or extractor) and summarizer:

* `pymem.Memory.learn_pending` takes jobs (``learning_claim``: leased, at most one per
  user at a time, the oldest first, so a user's turn 5 never applies before turn 4), runs the
  learner on each turn's user message outside any transaction, and ends each job with
  ``learning_complete``, which applies the learned facts and fact changes and deletes the job
  in one transaction: a job's changes apply once, even when two workers race for it (a worker
  whose lease expired and was taken over gets ``completed = false`` and applies nothing);
* a failure (the model timed out, answered junk, the write was refused) is recorded with
  ``learning_fail``: the job is tried again after a backoff (``backoff_seconds`` doubled per
  attempt), and after ``max_attempts`` it is dead, with its last error kept for
  ``learning_jobs`` / ``learning_requeue``; the turn itself is never touched;
* a worker that dies mid-job leaves its lease to expire; the job is then claimed again;
* `work` is the loop behind ``pymem worker`` (``--drain``; a stop event ends it after the
  job in hand, and the jobs claimed but not started are given back with ``learning_release``).

Cost caps (`configure_limits`, SQL ``learning_limits_configure``) bound the model calls
and tokens learning spends per UTC day, per user and per project: a job whose user or project is
past a cap is skipped when it would be claimed (its turn stays, not learned from), and
`status` / ``pymem.learning_status`` count it. A model call is a request of pymem's
`pymem.llm.ChatClient` (tokens: what its answers report); for a learner of your own, each
call of its ``extract`` / ``reconcile`` or of the summarizer counts as one.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from . import calls, llm
from .database import Database
from .errors import ValidationError
from .options import MemoryOptions
from .conversations import Where, extracted, fold, reconciled
from .runner import Callback, Operation, fetch
from .types import LearningJob, LearningReport, LearningStatus
from .values import text, timestamp

log = logging.getLogger("pymem")

#: a job's error as kept in pymem.learning_jobs (the SQL keeps at most 500 characters): its kind,
#: SQLSTATE and HTTP status, never its text (_error_summary)
MAX_ERROR_CHARS = 500


def _counting(operation: Operation[Any], counter: list[int]) -> Generator[Any, Any, Any]:
    """Run ``operation`` step by step (as ``yield from``), counting its model calls: the
    Callbacks that name a model (the learner, the extractor, the summarizer)."""
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = operation.send(reply) if error is None else operation.throw(error)
        except StopIteration as done:
            return done.value
        if isinstance(step, Callback) and step.model is not None:
            counter[0] += 1
        try:
            reply, error = (yield step), None
        except BaseException as exc:  # thrown in by the runner: the operation decides
            reply, error = None, exc


def _check(name: str, value: Any, low: float, high: float, kind: type = int) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int) or not low <= value <= high:
        raise ValidationError(f"{name} must be {'a number' if kind is float else 'an int'} between {low:g} and {high:g}, "
                              f"not {value!r}")
    return value


def _learn_pending(o: MemoryOptions, limit: int | None, batch: int, lease_seconds: float, max_attempts: int,
                   backoff_seconds: float, stop: Callable[[], bool] | None = None) -> Operation[LearningReport]:
    if o.learner is None and o.extractor is None and o.summarizer is None:
        raise ValidationError("learn_pending needs something to learn with: Memory(learner=...), extractor= "
                              "or summarizer=")
    if limit is not None:
        _check("limit", limit, 1, 10**9)
    _check("batch", batch, 1, 1000)
    _check("lease_seconds", lease_seconds, 1, 86400, float)
    _check("max_attempts", max_attempts, 1, 100)
    _check("backoff_seconds", backoff_seconds, 0, 3600, float)
    report = LearningReport()
    started = time.monotonic()
    while limit is None or report.claimed < limit:
        if stop is not None and stop():
            break
        want = batch if limit is None else min(batch, limit - report.claimed)
        jobs = yield calls.learning_claim(project_id=o.project_id, max_jobs=want, lease_seconds=lease_seconds,
                                          max_attempts=max_attempts)
        if not jobs:
            break
        for job in jobs:
            if job["state"] == "skipped":
                report.skipped += 1
            elif job["state"] == "dead":
                report.dead += 1
                report.failures.append(f"job {job['job_id']}: {job['reason']}")
            elif stop is not None and stop():  # shutting down: give it back untouched
                released = yield calls.learning_release(user_id=job["user_id"], job_id=job["job_id"],
                                                        lease_token=job["lease_token"], project_id=o.project_id)
                report.released += bool(released[0]["released"])
            else:
                report.claimed += 1
                yield from _learn_job(o, job, report, max_attempts, backoff_seconds)
    report.seconds = time.monotonic() - started
    return report


def _learn_job(o: MemoryOptions, job: dict[str, Any], report: LearningReport, max_attempts: int,
               backoff_seconds: float) -> Operation[None]:
    """Learn from one claimed job's turn and end the job: complete (applied once), or fail
    (retried later, or dead). A summary of the job's thread that is due is folded before the
    job completes, so its model calls count with the job's."""
    user_id, thread_id = job["user_id"], job["thread_id"]
    counted = [0]
    failures: list[str] = []
    meter = llm.Usage()
    token = llm._usage.set(meter)
    try:
        learned: list[str] | None = None
        changes: list[Any] | None = None
        try:
            if job["content"] is not None:  # None: the message was deleted meanwhile, nothing to learn
                if o.learner is not None:
                    changes = yield from _counting(reconciled(o, user_id, job["content"]), counted)
                elif o.extractor is not None:
                    learned = yield from _counting(extracted(o, job["content"]), counted)
            if o.summarizer is not None:
                where = Where(user_id, thread_id, o.project_id)
                claim = yield where.claim(o)
                if claim:
                    yield from _counting(fold(o, where, claim[0], failures), counted)
            spent = {"calls": meter.calls or counted[0], "tokens": meter.tokens}
            rows = yield calls.learning_complete(
                user_id=user_id, job_id=job["job_id"], lease_token=job["lease_token"], project_id=o.project_id,
                learned=learned, max_learned=o.max_learned_facts,
                fact_changes=None if not changes else Jsonb([c.as_json() for c in changes]),
                calls=spent["calls"], tokens=spent["tokens"])
        except Exception as exc:
            kind = type(exc).__name__
            line = _error_summary(exc)
            spent = {"calls": meter.calls or counted[0], "tokens": meter.tokens}
            state = (yield calls.learning_fail(
                user_id=user_id, job_id=job["job_id"], lease_token=job["lease_token"], project_id=o.project_id,
                error_kind=kind, error=line, max_attempts=max_attempts, backoff_seconds=backoff_seconds,
                calls=spent["calls"], tokens=spent["tokens"]))[0]["state"]
            report.calls += spent["calls"]
            report.tokens += spent["tokens"]
            if state == "lost":
                report.lost += 1
                return
            report.dead += state == "dead"
            report.retried += state == "pending"
            report.failures.append(f"job {job['job_id']} (attempt {job['attempts']}, {state}): {line}")
            log.warning("learning job %s failed (attempt %s; now %s): %s", job["job_id"], job["attempts"], state, line)
            return
    finally:
        llm._usage.reset(token)
    report.calls += spent["calls"]
    report.tokens += spent["tokens"]
    report.failures.extend(f"job {job['job_id']}: {f}" for f in failures)
    if rows[0]["completed"]:
        report.done += 1
    else:
        report.lost += 1
        log.warning("learning job %s: its lease expired and another worker took it; nothing was applied",
                    job["job_id"])


def learn_pending(o: MemoryOptions, limit: int | None = None, *, batch: int = 10, lease_seconds: float = 300.0,
                  max_attempts: int = 5, backoff_seconds: float = 10.0) -> Operation[LearningReport]:
    """Learn from the project's queued turns (``Memory(deferred_learning=True)`` queues them)
    with this Memory's learner (or extractor) and summarizer: at most ``limit`` jobs (None:
    until none is claimable now), claimed ``batch`` at a time, each leased for
    ``lease_seconds`` (longer than its model calls take). A failed job is tried again after
    ``backoff_seconds`` (doubled per attempt) and is dead after ``max_attempts``. Each job's
    changes apply once, in each user's order (docs/learning.md "Deferred learning");
    ``pymem worker`` runs this in a loop. Returns what was done (`pymem.LearningReport`)."""
    return (yield from _learn_pending(o, limit, batch, lease_seconds, max_attempts, backoff_seconds))


def learning_status(o: MemoryOptions) -> Operation[LearningStatus]:
    """The project's learning queue: jobs per state, the oldest pending job's age, failures by
    kind, today's model calls and tokens (`pymem.LearningStatus`; no content)."""
    rows = yield calls.learning_status(project_id=o.project_id)
    return _status(rows[0])


def _error_summary(exc: BaseException) -> str:
    """What a failed job keeps (``learning_jobs.error``) and the worker logs: the error's kind, its
    SQLSTATE and the HTTP status it came with, never its text. A model endpoint's error may quote
    its input (the user's message), and a reply that is not JSON is quoted in pymem's own errors:
    kept on the job, that content would outlive the retention purge and the user's erasure."""
    parts = [type(exc).__name__]
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and re.fullmatch(r"[0-9A-Z]{5}", sqlstate):
        parts.append(f"SQLSTATE {sqlstate}")
    status = re.search(r"\banswered HTTP ([0-9]{3})\b", str(exc))
    if status:
        parts.append(f"HTTP {status.group(1)}")
    return ", ".join(parts)[:MAX_ERROR_CHARS]


def _status(row: dict[str, Any]) -> LearningStatus:
    return LearningStatus(**{k: row[k] for k in LearningStatus.__dataclass_fields__})


# -- administration (module functions over a Database, like pymem.lifecycle) ---------------------


@dataclass(frozen=True)
class LearningLimits:
    """A project's cost caps on learning per UTC day (None: no such cap): model calls and tokens
    of one user, and of the whole project. ``updated_at``: when they were set (None: never)."""

    user_calls_per_day: int | None
    project_calls_per_day: int | None
    user_tokens_per_day: int | None
    project_tokens_per_day: int | None
    updated_at: datetime | None


def _limits(row: dict[str, Any]) -> LearningLimits:
    return LearningLimits(**{k: row[k] for k in LearningLimits.__dataclass_fields__})


def configure_limits(db: Database, project_id: str = "", *, user_calls_per_day: int | None = None,
                     project_calls_per_day: int | None = None, user_tokens_per_day: int | None = None,
                     project_tokens_per_day: int | None = None) -> LearningLimits:
    """Set the project's cost caps on learning (every one None removes them). Needs the owner
    role (``pymem.learning_limits_configure`` is an administrators' function). Returns the caps
    in force."""
    caps = {"user_calls_per_day": user_calls_per_day, "project_calls_per_day": project_calls_per_day,
            "user_tokens_per_day": user_tokens_per_day, "project_tokens_per_day": project_tokens_per_day}
    for name, value in caps.items():
        if value is not None:
            _check(name, value, 0, 2**31 - 1 if "calls" in name else 2**62)
    query = calls.learning_limits_configure(
        project_id=text(project_id, "project_id"), user_calls_per_day=user_calls_per_day,
        project_calls_per_day=project_calls_per_day, user_tokens_per_day=user_tokens_per_day,
        project_tokens_per_day=project_tokens_per_day)
    return _limits(fetch(query, db)[0])


def limits(db: Database, project_id: str = "") -> LearningLimits:
    """The project's cost caps on learning (every field None: no cap)."""
    return _limits(fetch(calls.learning_limits(project_id=text(project_id, "project_id")), db)[0])


def status(db: Database, project_id: str = "") -> LearningStatus:
    """The project's learning queue at a glance (no content, no user ids)."""
    return _status(fetch(calls.learning_status(project_id=text(project_id, "project_id")), db)[0])


def jobs(db: Database, project_id: str = "", *, state: str | None = None, max_jobs: int = 100) -> list[LearningJob]:
    """The project's learning jobs in ``state`` ('pending', 'running', 'dead', 'skipped'; None:
    every one), oldest first, with their last error: each a `pymem.types.LearningJob`
    (as `status` returns a `pymem.LearningStatus`)."""
    rows = fetch(calls.learning_jobs(project_id=text(project_id, "project_id"), job_state=state, max_jobs=max_jobs), db)
    return [LearningJob(**r) for r in rows]


def backfill(db: Database, project_id: str = "", *, user_id: str | None = None, since: datetime | None = None,
             until: datetime | None = None, batch: int = 1000) -> int:
    """Queue the turns already stored in the project (of ``user_id``; created in ``[since,
    until)``: timezone-aware, None open) for the workers to learn from, ``batch`` jobs per
    transaction until every thread was looked at; returns how many were queued. Each turn is
    queued by a backfill once (threads remember how far one looked) and each user's in the order
    said; a turn that already has a job is left to it. Turns learned live leave no mark: bound a
    backfill with ``until`` (when the learner started) to leave them out (SQL
    ``pymem.learning_backfill``; docs/learning.md "Learning from history already stored")."""
    query = calls.learning_backfill(project_id=text(project_id, "project_id"),
                                    user_id=text(user_id, "user id", allow_none=True), since=timestamp(since, "since"),
                                    until=timestamp(until, "until"), max_jobs=batch)
    total = 0
    while True:
        row = fetch(query, db)[0]
        total += int(row["queued"])
        if row["done"]:
            return total


def requeue(db: Database, project_id: str = "", *, state: str = "dead") -> int:
    """Make the project's dead (or skipped) jobs pending again, from their first attempt, in
    their place in each user's order; returns how many."""
    return int(fetch(calls.learning_requeue(project_id=text(project_id, "project_id"), state=state), db)[0]["requeued"])


def work(run: Callable[[Operation[LearningReport]], LearningReport], options: MemoryOptions, *,
         drain: bool = False, poll_seconds: float = 1.0, batch: int = 10, lease_seconds: float = 300.0,
         max_attempts: int = 5, backoff_seconds: float = 10.0, stop: threading.Event | None = None,
         report: Callable[[LearningReport], None] | None = None) -> LearningReport:
    """The worker loop behind ``pymem worker``: learn from queued jobs with ``options``' learner (or
    extractor) and summarizer, each batch an operation given to ``run`` (e.g. ``lambda op:
    pymem.runner.run(op, db, options.embedder)``), in batches of ``batch`` (each batch reported
    to ``report``), waiting ``poll_seconds`` when none is claimable, until
    ``stop`` is set (the job in hand is finished; jobs claimed but not started are released), or,
    with ``drain``, until no job is claimable now (jobs waiting out a retry's backoff stay
    pending). Returns the totals."""
    _check("poll_seconds", poll_seconds, 0.01, 3600, float)
    stop = stop if stop is not None else threading.Event()
    total = LearningReport()
    while not stop.is_set():
        done = run(_learn_pending(options, batch, batch, lease_seconds, max_attempts, backoff_seconds, stop.is_set))
        for name in ("claimed", "done", "retried", "dead", "lost", "released", "skipped", "calls", "tokens", "seconds"):
            setattr(total, name, getattr(total, name) + getattr(done, name))
        total.failures.extend(done.failures)
        busy = done.claimed or done.skipped or done.dead or done.released
        if busy and report is not None:
            report(done)
        if not busy:
            if drain:
                break
            stop.wait(poll_seconds)
    return total
