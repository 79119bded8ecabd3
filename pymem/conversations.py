"""Conversation memory over ``sql/api/conversations*.sql``: the operations behind
``Memory.record``, ``turn``, ``window``, ``summary``, ``recall`` and ``forget_conversation``
(see `pymem.memory`).

A turn is written in one call (``pymem.turn_record``): both messages, their vectors, the facts
the extractor learned from the user's message, and, when the thread's summary is due, a claim
on the span to fold. The summarizer then runs outside the database and its result is committed
against that claim, so two app servers never fold the same span twice and a failing summarizer
leaves the old summary in place. The extractor sees the user's message only, never the reply;
a failing extractor or summarizer is logged and never breaks the turn. A turn carries at most
`MAX_LEARNED_PER_TURN` (100) learned facts (the SQL refuses more with 22023): an
extractor that returns more has its first 100 kept and one warning logged.

A reconciling learner (``Memory(learner=...)``, `pymem.llm`) goes further: its candidates
are reconciled against the user's most similar stored facts, and the resulting adds, updates and
retirements travel in the same ``turn_record`` call (``fact_changes``), so a turn's messages and
every change to the user's facts commit together. A failing learner costs the turn its learning,
never the turn.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, cast

from psycopg.types.json import Jsonb

from .errors import InTransactionError, ValidationError
from .llm import FactChange
from .options import UNSET, MemoryOptions, need_user
from .runner import Callback, Embed, Operation, Query
from .types import Extractor, Message, Summarizer, TurnResult, UserInfo, VectorLike  # noqa: F401  (Extractor, Summarizer: re-exported)
from .recall import (RECALL_CATCH_UP, Filters, recall_filters, recall_indexes, recall_query,  # noqa: F401
                     time_params)  # (Filters, recall_indexes: re-exported)
from .values import integer, json_object as _metadata, number, text
from . import calls, facts

log = logging.getLogger("pymem")


def _warn_failed(what: str, failures: list[str] | None = None) -> None:
    """One warning line for user code (an extractor, a learner, a summarizer) or a step that
    failed while a turn goes on: what failed and the error's type and message; the traceback at
    DEBUG (a failing model would otherwise print dozens of lines per turn). The same line goes
    to ``failures`` (a turn's `TurnResult.failures`) when given."""
    exc = sys.exc_info()[1]
    line = f"{what} ({type(exc).__name__}: {exc})"
    log.warning("%s", line)
    log.debug("%s: the traceback", what, exc_info=True)
    if failures is not None:
        failures.append(line)

#: The most learned facts one turn may carry (pymem.turn_record refuses more with 22023), and
#: the most fact changes (its fact_changes).
MAX_LEARNED_PER_TURN = 100
#: A learner's candidate is reconciled against this many of the user's most similar active
#: facts (facts_search's ranking, as Memory.retrieve(candidate, k=...)).
SIMILAR_FACTS = 5


def _storable(fact: Any) -> bool:
    """Whether an extracted fact can be sent at all (a string PostgreSQL can store, not blank):
    the SQL checks the rest and skips what it refuses."""
    try:
        return bool(text(fact, "fact").strip())
    except ValidationError:
        return False


def _created_at(value: Any) -> datetime | None:
    """A message's time as given (None: now). A naive datetime is refused: its zone would be the
    database session's, not the caller's. The SQL checks the rest (not in the future, not before
    the thread's newest message)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError(f"created_at must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError("created_at must be timezone-aware, e.g. datetime(..., tzinfo=timezone.utc)")
    return value


def _message(r: Mapping[str, Any], thread: str | None = None) -> Message:
    """A Message from a row (or a context_read entry) of window_read or messages_recall."""
    return Message(r["role"], r["content"], r["seq"], r.get("thread_id", thread), r["created_at"],
                   r.get("importance", 1.0), r.get("similarity"), r.get("score"), r.get("metadata") or {})


class Where(NamedTuple):
    """Whose thread a conversation call is about: the keywords every thread's query takes."""

    user_id: str
    thread_id: str
    project_id: str

    def claim(self, o: MemoryOptions) -> Query:
        """The query claiming the thread's due summary span (``summary_claim``)."""
        return calls.summary_claim(user_id=self.user_id, thread_id=self.thread_id, project_id=self.project_id,
                                   keep_last=o.keep_last, summarize_every=o.summarize_every,
                                   lease_seconds=o.summary_lease_seconds)

    def release(self, token: Any) -> Query:
        """The query giving a summary claim back (``summary_release``)."""
        return calls.summary_release(user_id=self.user_id, thread_id=self.thread_id, project_id=self.project_id,
                                     claim_token=token)


def _learned_ids(learned: Any, reports: list[dict[str, Any]]) -> list[int]:
    """``TurnResult.learned_fact_ids``: the extractor's learned facts (turn_record's
    learned_ids), then the fact each applied change of a learner left active (an add's fact, an
    update's or a delete's new version), each once, in order: empty only when nothing was learned."""
    ids = list(learned or [])
    ids += [r["id"] for r in reports if r.get("applied") and r.get("id") is not None]
    return list(dict.fromkeys(ids))


def where_of(o: MemoryOptions, user_id: str, thread: str | None) -> Where:
    """The `Where` of ``user_id``'s ``thread`` (None: the Memory's default thread)."""
    return Where(text(user_id, "user id"), text(thread if thread is not None else o.thread, "thread"),
                 o.project_id)


# -- operations -----------------------------------------------------------------------
def record_turn(o: MemoryOptions, user_id, thread, query, answer, user_importance, assistant_importance, metadata=None,
            answer_metadata=None, created_at=None, embeddings=None, query_vector=None) -> Operation[TurnResult]:
    where = where_of(o, user_id, thread)
    text(query, "the user's message")
    text(answer, "the answer")
    user_metadata, assistant_metadata = _metadata(metadata), _metadata(answer_metadata, "answer_metadata")
    when = _created_at(created_at)
    if embeddings is not None and (isinstance(embeddings, (str, bytes)) or len(embeddings) != 2):
        raise ValidationError("embeddings must be a pair: the vectors of the user's message and of the answer")
    learned: list[str] | None = None
    changes: list[FactChange] | None = None
    failures: list[str] = []
    deferred = o.deferred_learning  # the turn leaves a learning job instead (pymem.learning)
    if deferred:
        pass
    elif o.learner is not None:
        try:
            changes = yield from reconciled(o, where.user_id, query)
        except Exception:  # the turn happened; a failing or malformed learner must not lose it
            _warn_failed("the learner failed; the turn is recorded without learning", failures)
    elif o.extractor is not None:
        try:
            learned = yield from extracted(o, query)
        except Exception:  # the turn happened; a broken extractor must not lose it
            _warn_failed("the fact extractor failed; the turn is recorded without learned facts", failures)
    embedder, u, a = None, None, None
    if embeddings is None and query_vector is not None and getattr(o.embedder, "embed_query", None) is None:
        # the turn's context read embedded the user's message already, on the only side there is
        (a,) = yield Embed([answer])
        embedder, u = o.embedder_name, query_vector
    elif o.embedder is not None or embeddings is not None:
        u, a = yield Embed([query, answer], None if embeddings is None else list(embeddings))
        embedder = o.embedder_name
    rows = yield calls.turn_record(
        user_id=where.user_id, thread_id=where.thread_id, project_id=where.project_id, user_content=query,
        assistant_content=answer, user_importance=number(user_importance, "importance"),
        assistant_importance=number(assistant_importance, "importance"), embedder=embedder, user_embedding=u,
        assistant_embedding=a, learned=learned, max_learned=o.max_learned_facts, keep_last=o.keep_last,
        summarize_every=o.summarize_every if o.summarizer is not None and not deferred else None,
        lease_seconds=o.summary_lease_seconds,
        fact_changes=None if not changes else Jsonb([c.as_json() for c in changes]), defer_learning=deferred,
        user_metadata=user_metadata, assistant_metadata=assistant_metadata, created_at=when)
    row = rows[0]
    summarized = False
    if row["claim_token"] is not None:
        summarized = yield from fold(o, where, row, failures)
    reports = list(row["changes"] or [])
    return TurnResult(row["user_seq"], row["assistant_seq"], _learned_ids(row["learned_ids"], reports),
                      summarized, reports, failures, row["learning_job"])


def extracted(o: MemoryOptions, query: str) -> Operation[list[str]]:
    """The extractor's facts of the user's message, at most MAX_LEARNED_PER_TURN (one warning
    when it found more); raises what the extractor raises."""
    found = yield Callback(cast(Callable[..., Any], o.extractor), (query,), "the extractor")
    learned = [f for f in (found or []) if _storable(f)]
    if len(learned) > MAX_LEARNED_PER_TURN:
        log.warning("the fact extractor returned %d facts; a turn keeps the first %d",
                    len(learned), MAX_LEARNED_PER_TURN)
        learned = learned[:MAX_LEARNED_PER_TURN]
    return learned


def reconciled(o: MemoryOptions, user_id: str, query: str) -> Operation[list[FactChange] | None]:
    """The reconciling learner's changes for a turn: candidates extracted from the user's
    message, each reconciled against the user's SIMILAR_FACTS most similar active facts
    (ranked as ``retrieve(candidate)`` ranks). No fact is written here: the changes go with
    the turn (the ranking may store vectors of facts that had none, as ``retrieve`` does), or
    with its learning job (pymem.learning). None: nothing to learn. Raises what the learner
    raises, and ValidationError when it returns what is not a list of FactChange (or an update
    or delete of a fact it was not shown): the caller decides what a failure costs."""
    learner = o.learner
    found = yield Callback(learner.extract, (query,), "the learner")
    if not isinstance(found, list):
        raise ValidationError(f"the learner's extract returned {type(found).__name__}, not a list")
    candidates = list(dict.fromkeys(c.strip() for c in found if _storable(c)))
    candidates = candidates[:MAX_LEARNED_PER_TURN]
    if not candidates:
        return None
    shown: dict[int, str] = {}
    for candidate in candidates:
        for f in (yield from facts.retrieve(o, candidate, id=user_id, limit=SIMILAR_FACTS, k=SIMILAR_FACTS)):
            shown.setdefault(f.id, f.content)
    if not shown:  # nothing stored to reconcile with: every candidate is new
        return [FactChange("add", c) for c in candidates]
    decided = yield Callback(learner.reconcile, (candidates, [{"id": i, "content": c} for i, c in shown.items()]),
                             "the learner")
    if not isinstance(decided, list) or not all(isinstance(c, FactChange) for c in decided):
        raise ValidationError("the learner's reconcile must return a list of pymem.llm.FactChange")
    for c in decided:
        text(c.content, "a learner's fact")  # a NUL or a lone surrogate would fail the whole turn
        if c.op not in ("add", "update", "delete") or (c.op != "add" and (
                isinstance(c.fact_id, bool) or c.fact_id not in shown)):
            raise ValidationError(f"the learner's {c.op} names fact {c.fact_id}, which it was not shown")
    return decided[:MAX_LEARNED_PER_TURN]


def fold(o: MemoryOptions, where: Where, claim: Mapping[str, Any],
          failures: list[str] | None = None, asked: bool = False) -> Operation[bool]:
    """Run the summarizer on a claimed span and commit (or release) the claim. Inside the
    transaction of a caller's connection the summarizer is not called (pymem.runner.refusal):
    the claim is released, the span stays due for a later turn, and ``summarize()`` (``asked``)
    raises the refusal."""
    token = claim["claim_token"]
    max_chars = o.max_summary_chars
    try:
        # a claim is taken only with a summarizer (MemoryOptions.summarizer is not None)
        summary = yield Callback(cast(Callable[..., Any], o.summarizer),
                                 (claim["previous_summary"], claim["messages"], max_chars), "the summarizer")
        text(summary, "the summary")
        if not summary.strip():
            raise ValidationError("the summarizer returned an empty summary")
    except InTransactionError:
        log.info("a summary is due; it waits for a turn outside the caller's transaction (or summarize())")
        yield where.release(token)
        if asked:
            raise
        return False
    except Exception:
        _warn_failed("the summarizer failed; the previous summary stays", failures)
        try:
            yield where.release(token)
        except Exception:
            _warn_failed("releasing the summary claim failed; its lease will expire")
        return False
    try:
        rows = yield calls.summary_commit(user_id=where.user_id, thread_id=where.thread_id,
                                          project_id=where.project_id, claim_token=token, summary=summary,
                                          max_chars=max_chars)
    except Exception:  # the turn is stored: report, give the span back, never raise
        _warn_failed("storing the new summary failed; the previous summary stays", failures)
        try:
            yield where.release(token)
        except Exception:
            _warn_failed("releasing the summary claim failed; its lease will expire")
        return False
    return bool(rows[0]["committed"])


def _summarize(o: MemoryOptions, user_id, thread) -> Operation[bool]:
    """Fold a due span now (e.g. after messages were written by SQL)."""
    if o.summarizer is None:
        raise ValidationError("summarize() needs Memory(summarizer=...)")
    where = where_of(o, user_id, thread)
    rows = yield where.claim(o)
    if not rows:
        return False
    return (yield from fold(o, where, rows[0], asked=True))


def _add_message(o: MemoryOptions, user_id, thread, role, content, importance, metadata=None,
                 created_at=None) -> Operation[int]:
    where = where_of(o, user_id, thread)
    rows = yield calls.message_add(user_id=where.user_id, thread_id=where.thread_id, project_id=where.project_id,
                                   role=text(role, "role"), content=text(content, "content"),
                                   importance=number(importance, "importance"), metadata=_metadata(metadata),
                                   created_at=_created_at(created_at))
    return rows[0]["seq"]


def _add_messages(o: MemoryOptions, user_id, thread, messages) -> Operation[list[int]]:
    """Many messages in one call: each a string (a user message) or a mapping with content and
    optionally role, importance, metadata, created_at."""
    if isinstance(messages, (str, Mapping)) or not isinstance(messages, (list, tuple)):
        raise ValidationError("messages must be a list (of strings or mappings with content=...); "
                              "add_message() takes one")
    roles, contents, importances, metadata, times = [], [], [], [], []
    for i, m in enumerate(messages):
        if isinstance(m, str):
            m = {"content": m}
        elif not isinstance(m, Mapping):
            raise ValidationError(f"messages[{i}] must be a string or a mapping, not {type(m).__name__}")
        unknown = set(m) - {"content", "role", "importance", "metadata", "created_at"}
        if unknown:
            raise ValidationError(f"messages[{i}] has unknown keys {sorted(unknown)}")
        roles.append(text(m.get("role", "user"), f"messages[{i}].role"))
        contents.append(text(m.get("content"), f"messages[{i}].content"))
        importances.append(number(m.get("importance", 1.0), f"messages[{i}].importance"))
        metadata.append(_metadata(m.get("metadata"), f"messages[{i}].metadata"))
        times.append(_created_at(m.get("created_at")))
    if not contents:
        return []
    where = where_of(o, user_id, thread)
    embedder, vectors = None, None
    if o.embedder is not None:
        vectors = yield Embed(contents)
        embedder = o.embedder.name
    rows = yield calls.messages_add_many(user_id=where.user_id, thread_id=where.thread_id,
                                         project_id=where.project_id, roles=roles, contents=contents,
                                         importances=importances, metadata=metadata, created_ats=times,
                                         embeddings=vectors, embedder=embedder)
    return [r["seq"] for r in rows]


def _window(o: MemoryOptions, user_id, thread, size) -> Operation[list[Message]]:
    where = where_of(o, user_id, thread)
    rows = yield calls.window_read(user_id=where.user_id, thread_id=where.thread_id, project_id=where.project_id,
                                   max_messages=size)
    return [_message(r, where.thread_id) for r in rows]


def _summary(o: MemoryOptions, user_id, thread) -> Operation[str | None]:
    where = where_of(o, user_id, thread)
    rows = yield calls.summary_read(user_id=where.user_id, thread_id=where.thread_id, project_id=where.project_id)
    return rows[0]["summary"] if rows else None


def catch_up(o: MemoryOptions, user_id, missing) -> Operation[None]:
    """Embed, in one batch, messages that have no vector from this embedder yet."""
    embedder = o.embedder
    if embedder is None:  # nothing to catch up with
        return
    vectors = yield Embed([m["content"] for m in missing])
    yield calls.message_embeddings_put(user_id=user_id, project_id=o.project_id, embedder=embedder.name,
                                       thread_ids=[m["thread_id"] for m in missing],
                                       seqs=[m["seq"] for m in missing], embeddings=vectors)


def _recall(o: MemoryOptions, user_id, thread, query, k, filters=None, skip_window=False) -> Operation[list[Message]]:
    if not isinstance(skip_window, bool):
        raise ValidationError("skip_window must be True or False")
    window = o.window if skip_window else 0  # a direct recall searches every message
    where = where_of(o, user_id, thread)
    # a query is its text (ranked by its words and, with an embedder, its vector), or its vector
    # (computed by the caller with the Memory's embedder)
    given = None if isinstance(query, str) else [query]
    if given is None:
        text(query, "query")
    f = recall_filters(filters)
    span, k = time_params(query, f.as_of, o.recall.time_weight), o.recall.k if k is None else k
    if o.embedder is None:
        if given is not None:
            raise ValidationError("recall by a vector needs Memory(embedder=...)")
        rows = yield recall_query(where, o.recall, f, span, k=k, window_size=window, query_vector=None,
                                  embedder=None, query_text=query)
        return [_message(r) for r in rows]
    missing = yield calls.messages_unembedded(user_id=where.user_id, project_id=o.project_id,
                                              embedder=o.embedder.name, min_chars=o.recall.min_content_chars,
                                              max_messages=RECALL_CATCH_UP)
    if missing:
        yield from catch_up(o, where.user_id, missing)
    (qvec,) = yield Embed([query if given is None else "the query vector"], given, query=True)
    rows = yield recall_query(where, o.recall, f, span, k=k, window_size=window, query_vector=qvec,
                              embedder=o.embedder.name, query_text=query if given is None else None)
    return [_message(r) for r in rows]


def pop_message(o: MemoryOptions, user_id, thread) -> Operation[Message | None]:
    """Delete the thread's newest message and return it (None: the thread has none)."""
    where = where_of(o, user_id, thread)
    rows = yield calls.message_pop(user_id=where.user_id, thread_id=where.thread_id, project_id=where.project_id)
    return _message(rows[0], where.thread_id) if rows else None


def _delete_message(o: MemoryOptions, user_id, thread, seq) -> Operation[bool]:
    where = where_of(o, user_id, thread)
    rows = yield calls.message_delete(user_id=where.user_id, thread_id=where.thread_id, project_id=where.project_id,
                                      seq=integer(seq, "seq"))
    return bool(rows[0]["deleted"])


def _users(o: MemoryOptions, limit, after) -> Operation[list[UserInfo]]:
    rows = yield calls.users_list(project_id=o.project_id, max_rows=integer(limit, "limit"),
                                  after=text(after, "after", allow_none=True))
    return [UserInfo(r["user_id"], r["facts"], r["threads"]) for r in rows]


def _forget_conversation(o: MemoryOptions, user_id, thread) -> Operation[int]:
    rows = yield calls.conversation_forget(user_id=text(user_id, "user id"), thread_id=text(thread, "thread"),
                                           project_id=o.project_id)
    return int(rows[0]["deleted"])


# -- the operations of Memory's conversation calls (pymem.memory.OPERATIONS) -------------------------
def add_message(o: MemoryOptions, content: str, *, role: str = "user", user: str | None = UNSET, ctx: Any = None,
                thread: str | None = None, importance: float = 1.0, metadata: Mapping[str, Any] | None = None,
                created_at: datetime | None = None) -> Operation[int]:
    """Append one message without a turn (no vector; recall embeds it later); returns its seq.
    ``created_at`` imports it with its real time (timezone-aware, not in the future, not
    before the thread's newest message: import oldest first)."""
    return (yield from _add_message(o, need_user(o, user, ctx), thread, role, content, importance, metadata,
                                    created_at))


def add_messages(o: MemoryOptions, messages: Sequence[str | Mapping[str, Any]], *, user: str | None = UNSET,
                 ctx: Any = None, thread: str | None = None) -> Operation[list[int]]:
    """Append many messages to one thread in one call (bulk import of a history, oldest first):
    each a string (a user message) or a mapping with ``content`` and optionally ``role``,
    ``importance``, ``metadata``, ``created_at``. With an embedder their vectors are computed in
    one batch and stored with them. All or nothing; returns their seqs in order."""
    return (yield from _add_messages(o, need_user(o, user, ctx), thread, messages))


def window(o: MemoryOptions, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
           size: int | None = None) -> Operation[list[Message]]:
    """The thread's last ``size`` (default: the Memory's window) messages, oldest first."""
    size = o.window if size is None else size
    return (yield from _window(o, need_user(o, user, ctx), thread, size))


def summary(o: MemoryOptions, *, user: str | None = UNSET, ctx: Any = None,
            thread: str | None = None) -> Operation[str | None]:
    """The thread's running summary (None: none yet)."""
    return (yield from _summary(o, need_user(o, user, ctx), thread))


def summarize(o: MemoryOptions, *, user: str | None = UNSET, ctx: Any = None,
              thread: str | None = None) -> Operation[bool]:
    """Fold a due span into the summary now; False when nothing was due or the summarizer failed."""
    return (yield from _summarize(o, need_user(o, user, ctx), thread))


def recall(o: MemoryOptions, query: str | VectorLike, *, user: str | None = UNSET, ctx: Any = None,
           thread: str | None = None, k: int | None = None, as_of: datetime | None = None,
           since: datetime | None = None, until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
           skip_window: bool = False) -> Operation[list[Message]]:
    """The user's past messages most relevant to ``query`` (a text, ranked by its words and
    meaning; or its vector from the Memory's embedder), best first: at most ``k`` (default
    ``recall_k``), none scoring below ``min_score`` and none that matches the query neither
    way (no word in common, no positive cosine: fewer than ``k`` then). ``as_of``: recall as of that time (nothing
    newer; recency measured from it); ``since`` / ``until``: only messages created in
    [since, until); ``metadata``: only messages whose metadata contains this mapping. Times
    are timezone-aware datetimes. Every message of the user is searched; ``skip_window``
    leaves out the thread's newest ``window`` messages, as the context's recall block does
    (they are in its window)."""
    filters = {"as_of": as_of, "since": since, "until": until, "metadata": metadata}
    return (yield from _recall(o, need_user(o, user, ctx), thread, query, k, filters, skip_window))


def delete_message(o: MemoryOptions, seq: int, *, user: str | None = UNSET, ctx: Any = None,
                   thread: str | None = None) -> Operation[bool]:
    """Delete one message of the user's thread by its ``seq`` (``Message.seq``, or what
    ``add_message`` / ``TurnResult`` returned), with its vector; False when there is none. The
    thread's running summary is kept (``forget_conversation`` removes a thread with it)."""
    return (yield from _delete_message(o, need_user(o, user, ctx), thread, seq))


def users(o: MemoryOptions, *, limit: int = 100, after: str | None = None) -> Operation[list[UserInfo]]:
    """The project's users (those with facts at ``tier="user"`` or conversation threads), by
    id, at most ``limit``; ``after``: the last ``user_id`` of the previous page. Each a
    `pymem.UserInfo` (its id, active facts, threads)."""
    return (yield from _users(o, limit, after))


def forget_conversation(o: MemoryOptions, *, user: str | None = UNSET, ctx: Any = None,
                        thread: str = "*") -> Operation[int]:
    """Delete a user's thread (default: every thread); returns the number of messages deleted."""
    return (yield from _forget_conversation(o, need_user(o, user, ctx), thread))


