"""``pymem.Memory`` (sync) and ``pymem.AsyncMemory``: one object per agent that serves every
user. Durable facts (`pymem.facts`), conversation memory (`pymem.conversations`), the per-turn
context (`pymem.context`), deferred learning (`pymem.learning`) and erasure
(`pymem.erasure`) are operations, functions of their modules written once over the
Memory's options (`pymem.runner`); `OPERATIONS` names the ones that are methods, and both twins
and their turns are generated from it (`pymem.twins`: ``python -m pymem.twins``), their spans
too (`SPANS`, `pymem.tracing`). The two classes only drive the operations: `MemoryDriver` over
a `Database`, `AsyncMemoryDriver` over an `AsyncDatabase`. Their options are one frozen
`pymem.MemoryOptions` (`pymem.options`).

Users: ``Memory(user_id="alice")`` or ``Memory(user_id=lambda ctx: ctx.user)``, resolved on
every call from the ``ctx`` passed to it (or overridden by ``user=``), so one Memory serves many
users at once, from threads or asyncio tasks. Nothing about a user is kept in the process. Every
call about a user resolves it the same way (`pymem.options.resolve_user`): the conversation
calls, and the fact calls at ``tier="user"`` (where ``id=``, the subject id of any tier, still
names the user as before). A caller whose user cannot be resolved (None, "", a resolver that
raises) gets the agent's facts only from ``context``/``read`` and nothing it says is stored by
``record``/``turn``; the other calls about a user raise ValidationError. Each such call logs one
warning.

Ownership: ``Memory()`` opens its own `Database` and ``close()`` closes it; a
``Memory(db=...)`` leaves that database open (its owner closes it). The same holds for
``AsyncMemory`` with ``aclose()`` / ``async with``.

The caller's transaction: a call given ``conn=`` (the caller's own psycopg connection), or made
inside ``with mem.bound(conn):`` in the same thread or task, runs on that connection instead of the
pool, inside its transaction: `pymem.runner` owns that binding (`pymem.runner.Binding`,
`pymem.runner.caller`), and `pymem.runner.refusal` keeps models from running while it
is open.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg

from . import conversations as _conversations, facts as _facts, learning as _learning, erasure as _erasure
from . import tracing
import pymem.context as _context  # the module (pymem.context, the package's attribute, is this module's function)
from .context import Context
from .conversations import Message, TurnResult
from .database import AsyncDatabase, Database
from .embedders import HashEmbedder
from .errors import ValidationError
from .facts import Fact, FactId
from .llm import ChatClient, ChatLearner
from .options import UNSET, MemoryOptions, UserSpec, resolve_user  # noqa: F401  (UserSpec: importable here as before)
from .runner import Binding, Operation, arun, binding, caller, run
from .settings import Settings
from .twins import Op
from .types import Erasure, LearningReport, LearningStatus, Merge, Query, UserInfo, VectorLike

T = TypeVar("T")
_M = TypeVar("_M", bound="MemoryDriver")
_A = TypeVar("_A", bound="AsyncMemoryDriver")

#: The methods of Memory and AsyncMemory that run an operation, and their spans (pymem.twins).
OPERATIONS: tuple[Op, ...] = (
    Op("persist", _facts.persist, tracing.fact_id),
    Op("persist_many", _facts.persist_many, tracing.persisted_many),
    Op("retrieve", _facts.retrieve, tracing.facts),
    Op("update", _facts.update, tracing.fact_id),
    Op("forget", _facts.forget, tracing.count("pymem.deleted")),
    Op("consolidate", _facts.consolidate, tracing.consolidated),
    Op("facts", _facts.facts, tracing.length("pymem.facts")),
    Op("get_fact", _facts.get_fact, tracing.got_fact),
    Op("history", _facts.history, tracing.length("pymem.facts")),
    Op("read", _context.read, tracing.read),
    Op("context", _context.context, tracing.with_text("query"), via=("read", "messages")),
    Op("record", _context.record, tracing.record),
    Op("add_message", _conversations.add_message, tracing.with_text("content", "pymem.content")),
    Op("add_messages", _conversations.add_messages, tracing.length("pymem.messages")),
    Op("window", _conversations.window, tracing.length("pymem.messages")),
    Op("summary", _conversations.summary, tracing.summary_found),
    Op("summarize", _conversations.summarize, tracing.count("pymem.summarized")),
    Op("recall", _conversations.recall, tracing.recall),
    Op("delete_message", _conversations.delete_message, tracing.count("pymem.deleted")),
    Op("users", _conversations.users, tracing.length("pymem.users")),
    Op("forget_conversation", _conversations.forget_conversation, tracing.count("pymem.deleted")),
    Op("forget_user", _erasure.erase, tracing.erased),
    Op("learn_pending", _learning.learn_pending, tracing.learned, conn=False),
    Op("learning_status", _learning.learning_status, tracing.queue, conn=False),
)
#: Memory / AsyncMemory: method -> (span name, what it adds from its arguments and result).
SPANS = {op.name: (f"memory.{op.name}", op.describe) for op in OPERATIONS}
#: Public methods that run no operation of their own (a test checks that every other one is traced).
UNTRACED = frozenset({"resolve_user", "turn", "bound", "close", "aclose"})


class MemoryBase:
    """What `Memory` and `AsyncMemory` share: their `MemoryOptions`
    (``self.options``; each option also reads as ``mem.<keyword>``, e.g. ``mem.embedder``,
    ``mem.recall_k``) and the user resolution."""

    options: MemoryOptions

    def __init__(self, options: MemoryOptions | None = None, /, **keywords: Any) -> None:
        if options is not None and not isinstance(options, MemoryOptions):
            raise ValidationError(f"options must be a pymem.MemoryOptions, not {type(options).__name__}")
        object.__setattr__(self, "options", MemoryOptions.from_keywords(options, **keywords))

    def __getattr__(self, name: str) -> Any:
        # only reached for names the instance and its class lack: the options' keywords
        if name != "options" and name in MemoryOptions.keywords():
            return self.options.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "options" or name in MemoryOptions.keywords():
            raise AttributeError(f"a Memory's options are fixed when it is built (pymem.MemoryOptions): {name}")
        object.__setattr__(self, name, value)

    def resolve_user(self, user: str | None = UNSET, ctx: Any = None) -> str | None:
        """The user a call is for: ``user`` if given, else ``user_id`` (string or resolver(ctx)).
        None when it cannot be resolved (one warning is logged)."""
        return resolve_user(self.options, user, ctx)


class MemoryDriver(MemoryBase):
    """Memory for one agent, sync API: one object serves every user (docs/python.md).

    >>> mem = pymem.Memory(agent_id="support-bot", embedder=pymem.HashEmbedder())
    >>> with mem.turn("I moved to Oslo", user="alice") as t:
    ...     t.answer = my_llm(t.messages)
    >>> mem.context("Where do I live?", user="alice")
    [{'role': 'system', ...}, ..., {'role': 'user', 'content': 'Where do I live?'}]
    """

    def __init__(self, *, db: Database | None = None, options: MemoryOptions | None = None, **keywords: Any) -> None:
        """``keywords``: the options (`MemoryOptions.from_keywords`), over ``options`` if given."""
        super().__init__(options, **keywords)
        self._own_db = db is None
        self.db = db if db is not None else Database()

    def _run(self, operation: Operation[T], conn: psycopg.Connection | None = None) -> T:
        return run(operation, self.db, self.options.embedder, conn=conn, owner=self)

    def bound(self, conn: psycopg.Connection, *, allow_model_calls: bool = False) -> Binding:
        """``with mem.bound(conn):`` every call of this Memory in the block, in this thread, runs
        on ``conn`` (your own ``psycopg.Connection``), inside its transaction: a rollback takes
        back pymem's writes with yours, a commit keeps both. pymem never commits, rolls back,
        closes or reconfigures ``conn``; a database error leaves its transaction aborted, for you
        to roll back. Each call also takes ``conn=`` for itself alone.

        While the transaction is open, pymem refuses (`pymem.errors.InTransactionError`)
        to call a model: the embedder (unless it is ``cheap``, as ``HashEmbedder`` is: pass the
        vectors with ``embedding=`` / ``embeddings=``), the learner or the extractor; a due
        summary waits for a turn outside the transaction. ``allow_model_calls=True`` lets them
        run, holding the transaction open while the model answers. docs/python.md, "Writes in
        your own transaction"."""
        return binding(self, conn, allow_model_calls=allow_model_calls)

    def close(self) -> None:
        """Close the Database this Memory opened; a ``db=`` it was given stays open (its owner
        closes it)."""
        if self._own_db:
            self.db.close()

    def __enter__(self: _M) -> _M:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Opening:
    """An AsyncMemory's own pool as `pymem.runner.arun` queries it: opened at the operation's
    first query, so that a call refused by its checks (or a turn of no user) opens none."""

    __slots__ = ("memory",)

    def __init__(self, memory: AsyncMemoryDriver) -> None:
        self.memory = memory

    async def query(self, query: Query) -> list[Any]:
        return await (await self.memory._database()).query(query)


class AsyncMemoryDriver(MemoryBase):
    """The asyncio twin of `Memory`: same arguments and methods, awaited.

    ``AsyncMemory()`` opens its own `AsyncDatabase` on first use (or on ``async with``)
    and ``aclose()`` closes it; an ``AsyncMemory(db=...)`` leaves that database open."""

    def __init__(self, *, db: AsyncDatabase | None = None, options: MemoryOptions | None = None,
                 **keywords: Any) -> None:
        super().__init__(options, **keywords)
        self._own_db = db is None
        self.db = db
        self._opening = asyncio.Lock()

    async def _database(self) -> AsyncDatabase:
        if self.db is None:
            async with self._opening:  # one pool, however many tasks make the first call together
                if self.db is None:
                    self.db = await AsyncDatabase.open()
        return self.db

    async def _run(self, operation: Operation[T], conn: psycopg.AsyncConnection | None = None) -> T:
        on = caller(self, conn, asynchronous=True)
        if on is not None:  # no pool is opened for it
            return await arun(operation, on, self.options.embedder)  # type: ignore[arg-type]
        pool: Any = self.db if self.db is not None else _Opening(self)  # arun only queries it
        return await arun(operation, pool, self.options.embedder, owner=self)

    def bound(self, conn: psycopg.AsyncConnection, *, allow_model_calls: bool = False) -> Binding:
        """``async with amem.bound(aconn):`` (or ``with``): `Memory.bound` for your own
        ``psycopg.AsyncConnection``, in this asyncio task (and the tasks it creates inside the
        block, which inherit it)."""
        return binding(self, conn, allow_model_calls=allow_model_calls, asynchronous=True)

    async def aclose(self) -> None:
        """Close the AsyncDatabase this AsyncMemory opened; a ``db=`` it was given stays open."""
        if self._own_db and self.db is not None:
            await self.db.close()

    async def __aenter__(self: _A) -> _A:
        await self._database()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


# --- generated by `python -m pymem.twins` from OPERATIONS and pymem.twins.TURN: do not edit ---


class Memory(MemoryDriver):
    """Memory for one agent, sync API: one object serves every user (docs/python.md).

    >>> mem = pymem.Memory(agent_id="support-bot", embedder=pymem.HashEmbedder())
    >>> with mem.turn("I moved to Oslo", user="alice") as t:
    ...     t.answer = my_llm(t.messages)
    >>> mem.context("Where do I live?", user="alice")
    [{'role': 'system', ...}, ..., {'role': 'user', 'content': 'Where do I live?'}]
    """

    def persist(self, content: str, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None,
                id: str | None = None, confidence: float = 1.0, source: str = "manual", trace_id: str | None = None,
                metadata: Mapping[str, Any] | None = None, embedding: VectorLike | None = None,
                created_at: datetime | None = None, ttl: float | timedelta | None = None,
                expires_at: datetime | None = None, valid_from: datetime | None = None,
                valid_to: datetime | None = None, conn: psycopg.Connection | None = None) -> FactId:
        """Store a fact (idempotent: the same content returns the same id). Returns its id, a
        `FactId` whose ``created`` is False when the fact was already there.
        ``embedding``: the content's vector, computed by the caller with the Memory's embedder
        (it is checked, and the embedder is not called). ``created_at``: when the fact was
        learned, to import facts with their real times (timezone-aware, not in the future;
        default now). ``ttl`` (seconds, or a timedelta) or ``expires_at`` (timezone-aware): the
        fact expires then, and is invisible to every read from that moment (docs/sql.md "Expire
        and purge"); the same fact persisted again with a ttl gets the new expiry, without one
        it keeps its own. ``valid_from`` / ``valid_to`` (timezone-aware; None: open on that side):
        when the fact holds in the world; reads show it only while it holds (``retrieve(valid_at=)``
        reads another time). The same fact persisted again with another valid time is restated: a
        new version, the old one kept in its history (docs/sql.md "Valid time")."""
        return self._run(_facts.persist(self.options, content, tier=tier, user=user, ctx=ctx, id=id,
                                        confidence=confidence, source=source, trace_id=trace_id, metadata=metadata,
                                        embedding=embedding, created_at=created_at, ttl=ttl, expires_at=expires_at,
                                        valid_from=valid_from, valid_to=valid_to), conn)

    def persist_many(self, contents: Sequence[str], *, tier: str = "user", user: str | None = UNSET, ctx: Any = None,
                     id: str | None = None, confidence: float = 1.0, source: str = "manual",
                     metadata: Mapping[str, Any] | None = None, embeddings: Sequence[VectorLike] | None = None,
                     created_at: datetime | None = None, ttl: float | timedelta | None = None,
                     expires_at: datetime | None = None, valid_from: datetime | None = None,
                     valid_to: datetime | None = None, conn: psycopg.Connection | None = None) -> list[FactId]:
        """Store many facts of one subject in one call (bulk ingest: one round trip, one batch of
        embeddings). Each is stored as persist() would store it, all or nothing: an invalid one
        refuses the whole call and nothing is written. Returns their ids in order (a repeat, or a
        fact already there, has ``created`` False). Learned facts go through persist().
        ``ttl`` / ``expires_at``: the expiry of every one of them, as in persist();
        ``valid_from`` / ``valid_to``: the valid time of every one of them, as in persist()."""
        return self._run(_facts.persist_many(self.options, contents, tier=tier, user=user, ctx=ctx, id=id,
                                             confidence=confidence, source=source, metadata=metadata,
                                             embeddings=embeddings, created_at=created_at, ttl=ttl,
                                             expires_at=expires_at, valid_from=valid_from, valid_to=valid_to), conn)

    def retrieve(self, query: str | VectorLike | None = None, *, tier: str = "user", user: str | None = UNSET,
                 ctx: Any = None, id: str | None = None, limit: int = 50, k: int = 5,
                 metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
                 as_of: datetime | None = None, conn: psycopg.Connection | None = None) -> list[Fact]:
        """Active facts newest first (``limit``), or the top ``k`` for ``query``: a text (ranked by
        its words and, with an embedder, by meaning: docs/sql.md "Facts"), or its vector from the
        Memory's embedder (by meaning alone). ``metadata``: only facts whose metadata contains
        this mapping. Only facts that hold now are shown; ``valid_at`` (what held then, as
        believed now), ``as_of`` (what was believed then) or both read the newest ``limit`` facts
        of another time instead (pymem.facts_at; no query then)."""
        return self._run(_facts.retrieve(self.options, query, tier=tier, user=user, ctx=ctx, id=id, limit=limit, k=k,
                                         metadata=metadata, valid_at=valid_at, as_of=as_of), conn)

    def update(self, new: str, *, old: str | None = None, fact_id: int | None = None, tier: str = "user",
               user: str | None = UNSET, ctx: Any = None, id: str | None = None, confidence: float = 1.0,
               source: str = "manual", trace_id: str | None = None, metadata: Mapping[str, Any] | None = None,
               embedding: VectorLike | None = None, created_at: datetime | None = None,
               ttl: float | timedelta | None = None, expires_at: datetime | None = None,
               valid_from: datetime | None = None, valid_to: datetime | None = None,
               conn: psycopg.Connection | None = None) -> FactId:
        """Retire the active fact named by ``old`` content or ``fact_id`` in favour of ``new``.

        Returns the id of the fact now active (a `FactId`, an ``int``): a new fact, or,
        when ``new`` already was an active fact of the subject, that fact (``created`` False:
        the old fact is merged into it, which stays as it was). Raises ConflictError (PM201)
        when the old fact was already superseded, ValidationError when ``new`` equals it.
        ``embedding``: ``new``'s vector from the Memory's embedder (the embedder is not called).
        ``created_at``: when ``new`` was learned (not before the old fact; default now).
        ``ttl`` / ``expires_at``: the new version's expiry (default: the old version's);
        ``metadata``: the new version's (default: the old version's).
        ``valid_from`` / ``valid_to``: when ``new`` holds in the world; a ``valid_from`` says the
        world changed then (the old fact still held before it: ``retrieve(valid_at=)``), without
        one the update is a correction. ``new`` equal to the old content with another valid time
        restates the fact."""
        return self._run(_facts.update(self.options, new, old=old, fact_id=fact_id, tier=tier, user=user, ctx=ctx,
                                       id=id, confidence=confidence, source=source, trace_id=trace_id,
                                       metadata=metadata, embedding=embedding, created_at=created_at, ttl=ttl,
                                       expires_at=expires_at, valid_from=valid_from, valid_to=valid_to), conn)

    def forget(self, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
               fact_id: int | None = None, content: str | None = None, conn: psycopg.Connection | None = None) -> int:
        """Delete a subject's facts (or one fact and its history); returns how many rows went."""
        return self._run(_facts.forget(self.options, tier=tier, user=user, ctx=ctx, id=id, fact_id=fact_id,
                                       content=content), conn)

    def consolidate(self, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
                    dry_run: bool = False, min_similarity: float | None = 0.9, min_overlap: float | None = 0.8,
                    decide: Any = None, max_pairs: int = 100, conn: psycopg.Connection | None = None) -> list[Merge]:
        """Merge the subject's near-duplicate facts ("Likes tea" into "Prefers tea over coffee"):
        pairs whose vectors' cosine is at least ``min_similarity`` (with an embedder) or that share
        at least ``min_overlap`` of the shorter one's words, never one that negates and one that
        does not; each merged into the more specific wording through a supersede, its history kept.
        ``dry_run``: list the pairs, change nothing (no vector is stored: a fact without one of
        the embedder's is compared by its words; the reader role may dry-run). ``decide``: a learner (e.g.
        ``pymem.llm.ChatLearner()``) asked about each pair first, which may keep them apart or
        reword them. Returns one `pymem.Merge` per pair (docs/python.md "Consolidation")."""
        return self._run(_facts.consolidate(self.options, tier=tier, user=user, ctx=ctx, id=id, dry_run=dry_run,
                                            min_similarity=min_similarity, min_overlap=min_overlap, decide=decide,
                                            max_pairs=max_pairs), conn)

    def facts(self, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
              metadata: Mapping[str, Any] | None = None, limit: int = 50, after: int | None = None,
              conn: psycopg.Connection | None = None) -> list[Fact]:
        """List the subject's active facts, newest first, with no query (SQL ``pymem.facts_list``):
        at most ``limit``; ``metadata``: only facts whose metadata contains this mapping;
        ``after``: the id of the last fact of the previous page (keyset paging: a page never
        repeats or skips a fact when others are added meanwhile). An empty page is the end."""
        return self._run(_facts.facts(self.options, tier=tier, user=user, ctx=ctx, id=id, metadata=metadata,
                                      limit=limit, after=after), conn)

    def get_fact(self, fact_id: int, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None,
                 id: str | None = None, conn: psycopg.Connection | None = None) -> Fact | None:
        """The subject's fact ``fact_id``, active or superseded (``superseded_by`` says which); None
        when the subject has no such fact (another user's fact is None too: SQL ``pymem.fact_read``)."""
        return self._run(_facts.get_fact(self.options, fact_id, tier=tier, user=user, ctx=ctx, id=id), conn)

    def history(self, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
                fact_id: int | None = None, limit: int = 1000, conn: psycopg.Connection | None = None) -> list[Fact]:
        """Every version, newest first; with ``fact_id``, that fact's history: every version merged
        into the same newest one, each before its successor (``Fact.depth``: steps to the newest)."""
        return self._run(_facts.history(self.options, tier=tier, user=user, ctx=ctx, id=id, fact_id=fact_id,
                                        limit=limit), conn)

    def read(self, query: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
             embedding: VectorLike | None = None, as_of: datetime | None = None, since: datetime | None = None,
             until: datetime | None = None, metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
             conn: psycopg.Connection | None = None) -> Context:
        """Everything one turn reads, and the chat messages built from it (see pymem.context).
        ``embedding``: the query's vector from the Memory's embedder (the embedder is not called).
        ``as_of``, ``since``, ``until``, ``metadata``: the recall filters of `recall`;
        ``as_of`` also reads the facts as they were believed then, and ``valid_at`` the facts that
        held then (a context for a point in time: docs/sql.md "Valid time")."""
        return self._run(_context.read(self.options, query, user=user, ctx=ctx, thread=thread, embedding=embedding,
                                       as_of=as_of, since=since, until=until, metadata=metadata, valid_at=valid_at,
                                       owner=self), conn)

    def context(self, query: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                embedding: VectorLike | None = None, as_of: datetime | None = None, since: datetime | None = None,
                until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
                valid_at: datetime | None = None, conn: psycopg.Connection | None = None) -> list[dict[str, str]]:
        """The messages to send to a chat model for ``query``."""
        return self.read(query, user=user, ctx=ctx, thread=thread, embedding=embedding, as_of=as_of, since=since,
                         until=until, metadata=metadata, valid_at=valid_at, conn=conn).messages

    def record(self, query: str, answer: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
               importance: float = 1.0, answer_importance: float = 1.0, metadata: Mapping[str, Any] | None = None,
               answer_metadata: Mapping[str, Any] | None = None, created_at: datetime | None = None,
               embeddings: Sequence[VectorLike] | None = None,
               conn: psycopg.Connection | None = None) -> TurnResult | None:
        """Store one successful turn; None (nothing stored) when the user is unresolved.
        ``metadata`` / ``answer_metadata``: stored with the user's message / the answer;
        ``created_at``: the turn's time when importing one (timezone-aware; default now);
        ``embeddings``: the two messages' vectors from the Memory's embedder."""
        return self._run(_context.record(self.options, query, answer, user=user, ctx=ctx, thread=thread,
                                         importance=importance, answer_importance=answer_importance, metadata=metadata,
                                         answer_metadata=answer_metadata, created_at=created_at,
                                         embeddings=embeddings), conn)

    def add_message(self, content: str, *, role: str = "user", user: str | None = UNSET, ctx: Any = None,
                    thread: str | None = None, importance: float = 1.0, metadata: Mapping[str, Any] | None = None,
                    created_at: datetime | None = None, conn: psycopg.Connection | None = None) -> int:
        """Append one message without a turn (no vector; recall embeds it later); returns its seq.
        ``created_at`` imports it with its real time (timezone-aware, not in the future, not
        before the thread's newest message: import oldest first)."""
        return self._run(_conversations.add_message(self.options, content, role=role, user=user, ctx=ctx, thread=thread,
                                                    importance=importance, metadata=metadata,
                                                    created_at=created_at), conn)

    def add_messages(self, messages: Sequence[str | Mapping[str, Any]], *, user: str | None = UNSET, ctx: Any = None,
                     thread: str | None = None, conn: psycopg.Connection | None = None) -> list[int]:
        """Append many messages to one thread in one call (bulk import of a history, oldest first):
        each a string (a user message) or a mapping with ``content`` and optionally ``role``,
        ``importance``, ``metadata``, ``created_at``. With an embedder their vectors are computed in
        one batch and stored with them. All or nothing; returns their seqs in order."""
        return self._run(_conversations.add_messages(self.options, messages, user=user, ctx=ctx, thread=thread), conn)

    def window(self, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None, size: int | None = None,
               conn: psycopg.Connection | None = None) -> list[Message]:
        """The thread's last ``size`` (default: the Memory's window) messages, oldest first."""
        return self._run(_conversations.window(self.options, user=user, ctx=ctx, thread=thread, size=size), conn)

    def summary(self, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                conn: psycopg.Connection | None = None) -> str | None:
        """The thread's running summary (None: none yet)."""
        return self._run(_conversations.summary(self.options, user=user, ctx=ctx, thread=thread), conn)

    def summarize(self, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                  conn: psycopg.Connection | None = None) -> bool:
        """Fold a due span into the summary now; False when nothing was due or the summarizer failed."""
        return self._run(_conversations.summarize(self.options, user=user, ctx=ctx, thread=thread), conn)

    def recall(self, query: str | VectorLike, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
               k: int | None = None, as_of: datetime | None = None, since: datetime | None = None,
               until: datetime | None = None, metadata: Mapping[str, Any] | None = None, skip_window: bool = False,
               conn: psycopg.Connection | None = None) -> list[Message]:
        """The user's past messages most relevant to ``query`` (a text, ranked by its words and
        meaning; or its vector from the Memory's embedder), best first: at most ``k`` (default
        ``recall_k``), none scoring below ``min_score`` and none that matches the query neither
        way (no word in common, no positive cosine: fewer than ``k`` then). ``as_of``: recall as of that time (nothing
        newer; recency measured from it); ``since`` / ``until``: only messages created in
        [since, until); ``metadata``: only messages whose metadata contains this mapping. Times
        are timezone-aware datetimes. Every message of the user is searched; ``skip_window``
        leaves out the thread's newest ``window`` messages, as the context's recall block does
        (they are in its window)."""
        return self._run(_conversations.recall(self.options, query, user=user, ctx=ctx, thread=thread, k=k, as_of=as_of,
                                               since=since, until=until, metadata=metadata,
                                               skip_window=skip_window), conn)

    def delete_message(self, seq: int, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                       conn: psycopg.Connection | None = None) -> bool:
        """Delete one message of the user's thread by its ``seq`` (``Message.seq``, or what
        ``add_message`` / ``TurnResult`` returned), with its vector; False when there is none. The
        thread's running summary is kept (``forget_conversation`` removes a thread with it)."""
        return self._run(_conversations.delete_message(self.options, seq, user=user, ctx=ctx, thread=thread), conn)

    def users(self, *, limit: int = 100, after: str | None = None,
              conn: psycopg.Connection | None = None) -> list[UserInfo]:
        """The project's users (those with facts at ``tier="user"`` or conversation threads), by
        id, at most ``limit``; ``after``: the last ``user_id`` of the previous page. Each a
        `pymem.UserInfo` (its id, active facts, threads)."""
        return self._run(_conversations.users(self.options, limit=limit, after=after), conn)

    def forget_conversation(self, *, user: str | None = UNSET, ctx: Any = None, thread: str = "*",
                            conn: psycopg.Connection | None = None) -> int:
        """Delete a user's thread (default: every thread); returns the number of messages deleted."""
        return self._run(_conversations.forget_conversation(self.options, user=user, ctx=ctx, thread=thread), conn)

    def forget_user(self, *, user: str | None = UNSET, ctx: Any = None, stores: Sequence[str] = (),
                    conn: psycopg.Connection | None = None) -> Erasure:
        """Erase the user from this Memory's project, in one transaction: facts with their
        history, every conversation with its summaries, the stores named in ``stores`` (the
        user's own: a store has no owner), and the user's name as the actor of other stores'
        rows. Returns the receipt (`pymem.Erasure`: counts per kind and a digest, no
        content), which the database keeps after the erasure (``pymem.erasures``)."""
        return self._run(_erasure.erase(self.options, user=user, ctx=ctx, stores=stores), conn)

    def learn_pending(self, limit: int | None = None, *, batch: int = 10, lease_seconds: float = 300.0,
                      max_attempts: int = 5, backoff_seconds: float = 10.0) -> LearningReport:
        """Learn from the project's queued turns (``Memory(deferred_learning=True)`` queues them)
        with this Memory's learner (or extractor) and summarizer: at most ``limit`` jobs (None:
        until none is claimable now), claimed ``batch`` at a time, each leased for
        ``lease_seconds`` (longer than its model calls take). A failed job is tried again after
        ``backoff_seconds`` (doubled per attempt) and is dead after ``max_attempts``. Each job's
        changes apply once, in each user's order (docs/learning.md "Deferred learning");
        ``pymem worker`` runs this in a loop. Returns what was done (`pymem.LearningReport`)."""
        return self._run(_learning.learn_pending(self.options, limit, batch=batch, lease_seconds=lease_seconds,
                                                 max_attempts=max_attempts, backoff_seconds=backoff_seconds))

    def learning_status(self) -> LearningStatus:
        """The project's learning queue: jobs per state, the oldest pending job's age, failures by
        kind, today's model calls and tokens (`pymem.LearningStatus`; no content)."""
        return self._run(_learning.learning_status(self.options))

    def turn(self, query: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
             conn: psycopg.Connection | None = None) -> Turn:
        """A context manager for one turn: ``.messages`` to send; set ``.answer``; the turn is
        recorded only when the block completes and an answer was given."""
        return Turn(self, query, self.resolve_user(user, ctx), thread, conn)


class Turn:
    """One turn in progress (see `Memory.turn`)."""

    def __init__(self, memory: Memory, query: str, user_id: str | None, thread: str | None,
                 conn: psycopg.Connection | None = None) -> None:
        self.memory = memory
        self.conn = conn
        self.query = query
        self.user_id = user_id
        self.thread = thread
        self.answer: str | None = None
        self.result: TurnResult | None = None
        self.context: Context | None = None

    @property
    def messages(self) -> list[dict[str, str]]:
        assert self.context is not None, "use the turn as a context manager"
        return self.context.messages

    def __enter__(self) -> Turn:
        self.context = self.memory._run(_context.read_for(self.memory.options, self.user_id, self.thread,
                                                             self.query, owner=self.memory), self.conn)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.answer is not None and self.user_id is not None:
            vector = self.context.query_vector if self.context else None
            self.result = self.memory._run(_context.recorded(
                self.memory.options, self.user_id, self.thread, self.query, self.answer, 1.0, 1.0,
                query_vector=vector), self.conn)


class AsyncMemory(AsyncMemoryDriver):
    """The asyncio twin of `Memory`: same arguments and methods, awaited.

    ``AsyncMemory()`` opens its own `AsyncDatabase` on first use (or on ``async with``)
    and ``aclose()`` closes it; an ``AsyncMemory(db=...)`` leaves that database open."""

    async def persist(self, content: str, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None,
                      id: str | None = None, confidence: float = 1.0, source: str = "manual",
                      trace_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                      embedding: VectorLike | None = None, created_at: datetime | None = None,
                      ttl: float | timedelta | None = None, expires_at: datetime | None = None,
                      valid_from: datetime | None = None, valid_to: datetime | None = None,
                      conn: psycopg.AsyncConnection | None = None) -> FactId:
        """Store a fact (idempotent: the same content returns the same id). Returns its id, a
        `FactId` whose ``created`` is False when the fact was already there.
        ``embedding``: the content's vector, computed by the caller with the Memory's embedder
        (it is checked, and the embedder is not called). ``created_at``: when the fact was
        learned, to import facts with their real times (timezone-aware, not in the future;
        default now). ``ttl`` (seconds, or a timedelta) or ``expires_at`` (timezone-aware): the
        fact expires then, and is invisible to every read from that moment (docs/sql.md "Expire
        and purge"); the same fact persisted again with a ttl gets the new expiry, without one
        it keeps its own. ``valid_from`` / ``valid_to`` (timezone-aware; None: open on that side):
        when the fact holds in the world; reads show it only while it holds (``retrieve(valid_at=)``
        reads another time). The same fact persisted again with another valid time is restated: a
        new version, the old one kept in its history (docs/sql.md "Valid time")."""
        return await self._run(_facts.persist(self.options, content, tier=tier, user=user, ctx=ctx, id=id,
                                              confidence=confidence, source=source, trace_id=trace_id,
                                              metadata=metadata, embedding=embedding, created_at=created_at, ttl=ttl,
                                              expires_at=expires_at, valid_from=valid_from, valid_to=valid_to), conn)

    async def persist_many(self, contents: Sequence[str], *, tier: str = "user", user: str | None = UNSET,
                           ctx: Any = None, id: str | None = None, confidence: float = 1.0, source: str = "manual",
                           metadata: Mapping[str, Any] | None = None, embeddings: Sequence[VectorLike] | None = None,
                           created_at: datetime | None = None, ttl: float | timedelta | None = None,
                           expires_at: datetime | None = None, valid_from: datetime | None = None,
                           valid_to: datetime | None = None,
                           conn: psycopg.AsyncConnection | None = None) -> list[FactId]:
        """Store many facts of one subject in one call (bulk ingest: one round trip, one batch of
        embeddings). Each is stored as persist() would store it, all or nothing: an invalid one
        refuses the whole call and nothing is written. Returns their ids in order (a repeat, or a
        fact already there, has ``created`` False). Learned facts go through persist().
        ``ttl`` / ``expires_at``: the expiry of every one of them, as in persist();
        ``valid_from`` / ``valid_to``: the valid time of every one of them, as in persist()."""
        return await self._run(_facts.persist_many(self.options, contents, tier=tier, user=user, ctx=ctx, id=id,
                                                   confidence=confidence, source=source, metadata=metadata,
                                                   embeddings=embeddings, created_at=created_at, ttl=ttl,
                                                   expires_at=expires_at, valid_from=valid_from,
                                                   valid_to=valid_to), conn)

    async def retrieve(self, query: str | VectorLike | None = None, *, tier: str = "user", user: str | None = UNSET,
                       ctx: Any = None, id: str | None = None, limit: int = 50, k: int = 5,
                       metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
                       as_of: datetime | None = None, conn: psycopg.AsyncConnection | None = None) -> list[Fact]:
        """Active facts newest first (``limit``), or the top ``k`` for ``query``: a text (ranked by
        its words and, with an embedder, by meaning: docs/sql.md "Facts"), or its vector from the
        Memory's embedder (by meaning alone). ``metadata``: only facts whose metadata contains
        this mapping. Only facts that hold now are shown; ``valid_at`` (what held then, as
        believed now), ``as_of`` (what was believed then) or both read the newest ``limit`` facts
        of another time instead (pymem.facts_at; no query then)."""
        return await self._run(_facts.retrieve(self.options, query, tier=tier, user=user, ctx=ctx, id=id, limit=limit,
                                               k=k, metadata=metadata, valid_at=valid_at, as_of=as_of), conn)

    async def update(self, new: str, *, old: str | None = None, fact_id: int | None = None, tier: str = "user",
                     user: str | None = UNSET, ctx: Any = None, id: str | None = None, confidence: float = 1.0,
                     source: str = "manual", trace_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                     embedding: VectorLike | None = None, created_at: datetime | None = None,
                     ttl: float | timedelta | None = None, expires_at: datetime | None = None,
                     valid_from: datetime | None = None, valid_to: datetime | None = None,
                     conn: psycopg.AsyncConnection | None = None) -> FactId:
        """Retire the active fact named by ``old`` content or ``fact_id`` in favour of ``new``.

        Returns the id of the fact now active (a `FactId`, an ``int``): a new fact, or,
        when ``new`` already was an active fact of the subject, that fact (``created`` False:
        the old fact is merged into it, which stays as it was). Raises ConflictError (PM201)
        when the old fact was already superseded, ValidationError when ``new`` equals it.
        ``embedding``: ``new``'s vector from the Memory's embedder (the embedder is not called).
        ``created_at``: when ``new`` was learned (not before the old fact; default now).
        ``ttl`` / ``expires_at``: the new version's expiry (default: the old version's);
        ``metadata``: the new version's (default: the old version's).
        ``valid_from`` / ``valid_to``: when ``new`` holds in the world; a ``valid_from`` says the
        world changed then (the old fact still held before it: ``retrieve(valid_at=)``), without
        one the update is a correction. ``new`` equal to the old content with another valid time
        restates the fact."""
        return await self._run(_facts.update(self.options, new, old=old, fact_id=fact_id, tier=tier, user=user, ctx=ctx,
                                             id=id, confidence=confidence, source=source, trace_id=trace_id,
                                             metadata=metadata, embedding=embedding, created_at=created_at, ttl=ttl,
                                             expires_at=expires_at, valid_from=valid_from, valid_to=valid_to), conn)

    async def forget(self, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
                     fact_id: int | None = None, content: str | None = None,
                     conn: psycopg.AsyncConnection | None = None) -> int:
        """Delete a subject's facts (or one fact and its history); returns how many rows went."""
        return await self._run(_facts.forget(self.options, tier=tier, user=user, ctx=ctx, id=id, fact_id=fact_id,
                                             content=content), conn)

    async def consolidate(self, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
                          dry_run: bool = False, min_similarity: float | None = 0.9, min_overlap: float | None = 0.8,
                          decide: Any = None, max_pairs: int = 100,
                          conn: psycopg.AsyncConnection | None = None) -> list[Merge]:
        """Merge the subject's near-duplicate facts ("Likes tea" into "Prefers tea over coffee"):
        pairs whose vectors' cosine is at least ``min_similarity`` (with an embedder) or that share
        at least ``min_overlap`` of the shorter one's words, never one that negates and one that
        does not; each merged into the more specific wording through a supersede, its history kept.
        ``dry_run``: list the pairs, change nothing (no vector is stored: a fact without one of
        the embedder's is compared by its words; the reader role may dry-run). ``decide``: a learner (e.g.
        ``pymem.llm.ChatLearner()``) asked about each pair first, which may keep them apart or
        reword them. Returns one `pymem.Merge` per pair (docs/python.md "Consolidation")."""
        return await self._run(_facts.consolidate(self.options, tier=tier, user=user, ctx=ctx, id=id, dry_run=dry_run,
                                                  min_similarity=min_similarity, min_overlap=min_overlap, decide=decide,
                                                  max_pairs=max_pairs), conn)

    async def facts(self, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
                    metadata: Mapping[str, Any] | None = None, limit: int = 50, after: int | None = None,
                    conn: psycopg.AsyncConnection | None = None) -> list[Fact]:
        """List the subject's active facts, newest first, with no query (SQL ``pymem.facts_list``):
        at most ``limit``; ``metadata``: only facts whose metadata contains this mapping;
        ``after``: the id of the last fact of the previous page (keyset paging: a page never
        repeats or skips a fact when others are added meanwhile). An empty page is the end."""
        return await self._run(_facts.facts(self.options, tier=tier, user=user, ctx=ctx, id=id, metadata=metadata,
                                            limit=limit, after=after), conn)

    async def get_fact(self, fact_id: int, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None,
                       id: str | None = None, conn: psycopg.AsyncConnection | None = None) -> Fact | None:
        """The subject's fact ``fact_id``, active or superseded (``superseded_by`` says which); None
        when the subject has no such fact (another user's fact is None too: SQL ``pymem.fact_read``)."""
        return await self._run(_facts.get_fact(self.options, fact_id, tier=tier, user=user, ctx=ctx, id=id), conn)

    async def history(self, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
                      fact_id: int | None = None, limit: int = 1000,
                      conn: psycopg.AsyncConnection | None = None) -> list[Fact]:
        """Every version, newest first; with ``fact_id``, that fact's history: every version merged
        into the same newest one, each before its successor (``Fact.depth``: steps to the newest)."""
        return await self._run(_facts.history(self.options, tier=tier, user=user, ctx=ctx, id=id, fact_id=fact_id,
                                              limit=limit), conn)

    async def read(self, query: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                   embedding: VectorLike | None = None, as_of: datetime | None = None, since: datetime | None = None,
                   until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
                   valid_at: datetime | None = None, conn: psycopg.AsyncConnection | None = None) -> Context:
        """Everything one turn reads, and the chat messages built from it (see pymem.context).
        ``embedding``: the query's vector from the Memory's embedder (the embedder is not called).
        ``as_of``, ``since``, ``until``, ``metadata``: the recall filters of `recall`;
        ``as_of`` also reads the facts as they were believed then, and ``valid_at`` the facts that
        held then (a context for a point in time: docs/sql.md "Valid time")."""
        return await self._run(_context.read(self.options, query, user=user, ctx=ctx, thread=thread,
                                             embedding=embedding, as_of=as_of, since=since, until=until,
                                             metadata=metadata, valid_at=valid_at, owner=self), conn)

    async def context(self, query: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                      embedding: VectorLike | None = None, as_of: datetime | None = None, since: datetime | None = None,
                      until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
                      valid_at: datetime | None = None,
                      conn: psycopg.AsyncConnection | None = None) -> list[dict[str, str]]:
        """The messages to send to a chat model for ``query``."""
        return (await self.read(query, user=user, ctx=ctx, thread=thread, embedding=embedding, as_of=as_of, since=since,
                                until=until, metadata=metadata, valid_at=valid_at, conn=conn)).messages

    async def record(self, query: str, answer: str, *, user: str | None = UNSET, ctx: Any = None,
                     thread: str | None = None, importance: float = 1.0, answer_importance: float = 1.0,
                     metadata: Mapping[str, Any] | None = None, answer_metadata: Mapping[str, Any] | None = None,
                     created_at: datetime | None = None, embeddings: Sequence[VectorLike] | None = None,
                     conn: psycopg.AsyncConnection | None = None) -> TurnResult | None:
        """Store one successful turn; None (nothing stored) when the user is unresolved.
        ``metadata`` / ``answer_metadata``: stored with the user's message / the answer;
        ``created_at``: the turn's time when importing one (timezone-aware; default now);
        ``embeddings``: the two messages' vectors from the Memory's embedder."""
        return await self._run(_context.record(self.options, query, answer, user=user, ctx=ctx, thread=thread,
                                               importance=importance, answer_importance=answer_importance,
                                               metadata=metadata, answer_metadata=answer_metadata,
                                               created_at=created_at, embeddings=embeddings), conn)

    async def add_message(self, content: str, *, role: str = "user", user: str | None = UNSET, ctx: Any = None,
                          thread: str | None = None, importance: float = 1.0, metadata: Mapping[str, Any] | None = None,
                          created_at: datetime | None = None, conn: psycopg.AsyncConnection | None = None) -> int:
        """Append one message without a turn (no vector; recall embeds it later); returns its seq.
        ``created_at`` imports it with its real time (timezone-aware, not in the future, not
        before the thread's newest message: import oldest first)."""
        return await self._run(_conversations.add_message(self.options, content, role=role, user=user, ctx=ctx,
                                                          thread=thread, importance=importance, metadata=metadata,
                                                          created_at=created_at), conn)

    async def add_messages(self, messages: Sequence[str | Mapping[str, Any]], *, user: str | None = UNSET,
                           ctx: Any = None, thread: str | None = None,
                           conn: psycopg.AsyncConnection | None = None) -> list[int]:
        """Append many messages to one thread in one call (bulk import of a history, oldest first):
        each a string (a user message) or a mapping with ``content`` and optionally ``role``,
        ``importance``, ``metadata``, ``created_at``. With an embedder their vectors are computed in
        one batch and stored with them. All or nothing; returns their seqs in order."""
        return await self._run(_conversations.add_messages(self.options, messages, user=user, ctx=ctx,
                                                           thread=thread), conn)

    async def window(self, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                     size: int | None = None, conn: psycopg.AsyncConnection | None = None) -> list[Message]:
        """The thread's last ``size`` (default: the Memory's window) messages, oldest first."""
        return await self._run(_conversations.window(self.options, user=user, ctx=ctx, thread=thread, size=size), conn)

    async def summary(self, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                      conn: psycopg.AsyncConnection | None = None) -> str | None:
        """The thread's running summary (None: none yet)."""
        return await self._run(_conversations.summary(self.options, user=user, ctx=ctx, thread=thread), conn)

    async def summarize(self, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                        conn: psycopg.AsyncConnection | None = None) -> bool:
        """Fold a due span into the summary now; False when nothing was due or the summarizer failed."""
        return await self._run(_conversations.summarize(self.options, user=user, ctx=ctx, thread=thread), conn)

    async def recall(self, query: str | VectorLike, *, user: str | None = UNSET, ctx: Any = None,
                     thread: str | None = None, k: int | None = None, as_of: datetime | None = None,
                     since: datetime | None = None, until: datetime | None = None,
                     metadata: Mapping[str, Any] | None = None, skip_window: bool = False,
                     conn: psycopg.AsyncConnection | None = None) -> list[Message]:
        """The user's past messages most relevant to ``query`` (a text, ranked by its words and
        meaning; or its vector from the Memory's embedder), best first: at most ``k`` (default
        ``recall_k``), none scoring below ``min_score`` and none that matches the query neither
        way (no word in common, no positive cosine: fewer than ``k`` then). ``as_of``: recall as of that time (nothing
        newer; recency measured from it); ``since`` / ``until``: only messages created in
        [since, until); ``metadata``: only messages whose metadata contains this mapping. Times
        are timezone-aware datetimes. Every message of the user is searched; ``skip_window``
        leaves out the thread's newest ``window`` messages, as the context's recall block does
        (they are in its window)."""
        return await self._run(_conversations.recall(self.options, query, user=user, ctx=ctx, thread=thread, k=k,
                                                     as_of=as_of, since=since, until=until, metadata=metadata,
                                                     skip_window=skip_window), conn)

    async def delete_message(self, seq: int, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
                             conn: psycopg.AsyncConnection | None = None) -> bool:
        """Delete one message of the user's thread by its ``seq`` (``Message.seq``, or what
        ``add_message`` / ``TurnResult`` returned), with its vector; False when there is none. The
        thread's running summary is kept (``forget_conversation`` removes a thread with it)."""
        return await self._run(_conversations.delete_message(self.options, seq, user=user, ctx=ctx,
                                                             thread=thread), conn)

    async def users(self, *, limit: int = 100, after: str | None = None,
                    conn: psycopg.AsyncConnection | None = None) -> list[UserInfo]:
        """The project's users (those with facts at ``tier="user"`` or conversation threads), by
        id, at most ``limit``; ``after``: the last ``user_id`` of the previous page. Each a
        `pymem.UserInfo` (its id, active facts, threads)."""
        return await self._run(_conversations.users(self.options, limit=limit, after=after), conn)

    async def forget_conversation(self, *, user: str | None = UNSET, ctx: Any = None, thread: str = "*",
                                  conn: psycopg.AsyncConnection | None = None) -> int:
        """Delete a user's thread (default: every thread); returns the number of messages deleted."""
        return await self._run(_conversations.forget_conversation(self.options, user=user, ctx=ctx,
                                                                  thread=thread), conn)

    async def forget_user(self, *, user: str | None = UNSET, ctx: Any = None, stores: Sequence[str] = (),
                          conn: psycopg.AsyncConnection | None = None) -> Erasure:
        """Erase the user from this Memory's project, in one transaction: facts with their
        history, every conversation with its summaries, the stores named in ``stores`` (the
        user's own: a store has no owner), and the user's name as the actor of other stores'
        rows. Returns the receipt (`pymem.Erasure`: counts per kind and a digest, no
        content), which the database keeps after the erasure (``pymem.erasures``)."""
        return await self._run(_erasure.erase(self.options, user=user, ctx=ctx, stores=stores), conn)

    async def learn_pending(self, limit: int | None = None, *, batch: int = 10, lease_seconds: float = 300.0,
                            max_attempts: int = 5, backoff_seconds: float = 10.0) -> LearningReport:
        """Learn from the project's queued turns (``Memory(deferred_learning=True)`` queues them)
        with this Memory's learner (or extractor) and summarizer: at most ``limit`` jobs (None:
        until none is claimable now), claimed ``batch`` at a time, each leased for
        ``lease_seconds`` (longer than its model calls take). A failed job is tried again after
        ``backoff_seconds`` (doubled per attempt) and is dead after ``max_attempts``. Each job's
        changes apply once, in each user's order (docs/learning.md "Deferred learning");
        ``pymem worker`` runs this in a loop. Returns what was done (`pymem.LearningReport`)."""
        return await self._run(_learning.learn_pending(self.options, limit, batch=batch, lease_seconds=lease_seconds,
                                                       max_attempts=max_attempts, backoff_seconds=backoff_seconds))

    async def learning_status(self) -> LearningStatus:
        """The project's learning queue: jobs per state, the oldest pending job's age, failures by
        kind, today's model calls and tokens (`pymem.LearningStatus`; no content)."""
        return await self._run(_learning.learning_status(self.options))

    def turn(self, query: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
             conn: psycopg.AsyncConnection | None = None) -> AsyncTurn:
        """A context manager for one turn: ``.messages`` to send; set ``.answer``; the turn is
        recorded only when the block completes and an answer was given."""
        return AsyncTurn(self, query, self.resolve_user(user, ctx), thread, conn)


class AsyncTurn:
    """One turn in progress (see `AsyncMemory.turn`); ``async with``."""

    def __init__(self, memory: AsyncMemory, query: str, user_id: str | None, thread: str | None,
                 conn: psycopg.AsyncConnection | None = None) -> None:
        self.memory = memory
        self.conn = conn
        self.query = query
        self.user_id = user_id
        self.thread = thread
        self.answer: str | None = None
        self.result: TurnResult | None = None
        self.context: Context | None = None

    @property
    def messages(self) -> list[dict[str, str]]:
        assert self.context is not None, "use the turn as an async context manager"
        return self.context.messages

    async def __aenter__(self) -> AsyncTurn:
        self.context = await self.memory._run(_context.read_for(self.memory.options, self.user_id, self.thread,
                                                             self.query, owner=self.memory), self.conn)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.answer is not None and self.user_id is not None:
            vector = self.context.query_vector if self.context else None
            self.result = await self.memory._run(_context.recorded(
                self.memory.options, self.user_id, self.thread, self.query, self.answer, 1.0, 1.0,
                query_vector=vector), self.conn)


# --- end of the generated twins ---


# OpenTelemetry spans on every public call (pymem.tracing; nothing without opentelemetry-api)
tracing.instrument_memory(Memory, Turn, SPANS)
tracing.instrument_memory(AsyncMemory, AsyncTurn, SPANS)


# -- module-level shortcuts: pymem.context(user, query), pymem.record(user, query, answer) ------

_default: Memory | None = None
_default_lock = threading.Lock()
#: the AsyncMemory behind acontext/arecord, one per event loop (a pool belongs to its loop)
_async_defaults: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncMemory] = weakref.WeakKeyDictionary()


def _default_options() -> tuple[Settings, dict[str, Any]]:
    """The settings of the one-liners' Memory and its keywords: the agent and project from the
    settings, the built-in HashEmbedder for recall, and a configured chat model's learner."""
    settings = Settings()
    keywords: dict[str, Any] = {"agent_id": settings.agent_id, "project_id": settings.project_id,
                                "embedder": HashEmbedder()}
    if settings.llm_model:
        learner = ChatLearner(ChatClient(settings=settings))
        keywords.update(learner=learner, summarizer=learner.summarize)
    return settings, keywords


def default_memory() -> Memory:
    """The Memory behind `context` and `record`, built once from
    `pymem.Settings` (``PYMEM_AGENT_ID``, ``PYMEM_PROJECT_ID``; the built-in
    HashEmbedder for recall). With a chat model configured (``PYMEM_LLM_MODEL``), it learns and
    summarizes through it, as ``pymem demo`` does (`pymem.llm.ChatLearner`)."""
    global _default
    with _default_lock:
        if _default is None:
            settings, keywords = _default_options()
            _default = Memory(db=Database(settings), **keywords)
        return _default


def default_async_memory() -> AsyncMemory:
    """The AsyncMemory behind `acontext` and `arecord`: built like
    `default_memory`, once per running event loop (its pool belongs to that loop)."""
    loop = asyncio.get_running_loop()
    with _default_lock:
        memory = _async_defaults.get(loop)
        if memory is None:
            memory = _async_defaults[loop] = AsyncMemory(**_default_options()[1])  # opens AsyncDatabase(Settings())
        return memory


def context(user: str | None, query: str, **options: Any) -> list[dict[str, str]]:
    """The messages to send to a chat model for ``user``'s ``query``, from the default Memory
    (`default_memory`): ``pymem.context("alice", "Where do I live?")``. The user comes
    first (``Memory.context`` takes the query first and the user as ``user=``); keywords work
    too. ``options``: those of `Memory.context` (``thread=``, ``as_of=``, ...)."""
    return default_memory().context(query, user=user, **options)


def record(user: str | None, query: str, answer: str, **options: Any) -> TurnResult | None:
    """Store one successful turn of ``user`` in the default Memory; None when ``user`` is empty:
    ``pymem.record("alice", "I moved to Oslo", "Noted.")``. ``options``: those of
    `Memory.record`."""
    return default_memory().record(query, answer, user=user, **options)


async def acontext(user: str | None, query: str, **options: Any) -> list[dict[str, str]]:
    """`context`, awaited, on the default AsyncMemory of the running event loop:
    ``await pymem.acontext("alice", "Where do I live?")``."""
    return await default_async_memory().context(query, user=user, **options)


async def arecord(user: str | None, query: str, answer: str, **options: Any) -> TurnResult | None:
    """`record`, awaited, on the default AsyncMemory of the running event loop:
    ``await pymem.arecord("alice", "I moved to Oslo", "Noted.")``."""
    return await default_async_memory().record(query, answer, user=user, **options)
