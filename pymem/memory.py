"""``pymem.Memory`` (sync) and ``pymem.AsyncMemory``: one object per agent that serves every
user. Durable facts (`pymem.facts`), conversation memory (`pymem.conversations`)
and the per-turn context (`pymem.context`) are operations written once (`pymem.runner`);
the two classes only drive them over a pooled connection. Their options are one frozen
`pymem.MemoryOptions` (`pymem.options`).

Users: ``Memory(user_id="alice")`` or ``Memory(user_id=lambda ctx: ctx.user)``, resolved on
every call from the ``ctx`` passed to it (or overridden by ``user=``), so one Memory serves many
users at once, from threads or asyncio tasks. Nothing about a user is kept in the process. Every
call about a user resolves it the same way: the conversation calls, and the fact calls at
``tier="user"`` (where ``id=``, the subject id of any tier, still names the user as before).
A caller whose user cannot be resolved (None, "", a resolver that raises) gets the agent's
facts only from ``context``/``read`` and nothing it says is stored by ``record``/``turn``; the
other calls about a user raise ValidationError. Each such call logs one warning.

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
import logging
import threading
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeAlias, TypeVar

import psycopg

from . import tracing
from .context import Context, _Context
from .conversations import Message, TurnResult, _Conversations
from .database import AsyncDatabase, Database
from .embedders import HashEmbedder
from .errors import ValidationError
from .facts import TIERS, Fact, FactId, FactWrite, _Facts
from .learning import _Learning
from .llm import ChatClient, ChatLearner
from .options import MemoryOptions, UserSpec  # noqa: F401  (UserSpec: importable here as before)
from .erasure import _forget_user
from .types import Erasure, LearningReport, LearningStatus, Merge, UserInfo
from .runner import Binding, Operation, arun, binding, caller, run
from .settings import Settings
from .values import text

log = logging.getLogger("pymem")
T = TypeVar("T")
#: A vector passed from Python (``embedding=``, a vector ``query``): a list or tuple of floats, a
#: numpy array or a ``pgvector.Vector``, made by the Memory's embedder (checked like its output).
VectorLike: TypeAlias = "Sequence[float] | Any"

class _Unset:
    """The default of ``user=``: the Memory's own ``user_id`` (a sentinel, since None is a value
    a caller may pass); shown as such by help()."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the Memory's user_id>"


_UNSET: Any = _Unset()




class MemoryBase(_Facts, _Conversations, _Context, _Learning):
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

    def resolve_user(self, user: str | None = _UNSET, ctx: Any = None) -> str | None:
        """The user a call is for: ``user`` if given, else ``user_id`` (string or resolver(ctx)).
        None when it cannot be resolved (one warning is logged)."""
        return self._resolve_user(user, ctx, quiet=False)

    def _resolve_user(self, user: Any, ctx: Any, *, quiet: bool) -> str | None:
        """`resolve_user`; ``quiet``: no warning, for a caller that raises instead (the
        warning says what happens to a call that goes on without a user)."""
        if user is _UNSET:
            spec = self.options.user_id
            if callable(spec):
                try:
                    user = spec(ctx)
                except Exception as exc:
                    if quiet:
                        raise ValidationError(f"this call needs a user, and the user_id resolver raised "
                                              f"{type(exc).__name__}") from exc
                    log.warning("the user_id resolver raised %s; this call gets no user memory", type(exc).__name__)
                    return None
            else:
                user = spec
        if user is None or (isinstance(user, str) and not user.strip()):
            if not quiet:
                log.warning("no user for this call; it gets global facts only and nothing is stored")
            return None
        if user == "*":  # the SQL wildcard ("every user"): never a caller's identity
            raise ValidationError("'*' is not a user id (it would name every user)")
        return text(user, "user id")

    def _need_user(self, user: str | None, ctx: Any, hint: str = "") -> str:
        resolved = self._resolve_user(user, ctx, quiet=True)
        if resolved is None:
            raise ValidationError(f"this call needs a user: pass user=... or Memory(user_id=...){hint}")
        return resolved

    def _subject_id(self, tier: str, id: str | None, user: str | None, ctx: Any) -> str | None:
        """The ``id=`` a fact call sends. At ``tier="user"`` it is the call's user: ``user=``, or
        ``id=`` (kept from before ``user=`` existed), or ``Memory(user_id=...)`` for ``ctx``. Other
        tiers are named by ``id=`` (or the Memory's agent_id / project_id) and take no user."""
        if not isinstance(tier, str) or tier not in TIERS:  # before user=, which a mistyped tier would blame
            raise ValidationError(f"tier must be one of {', '.join(repr(t) for t in TIERS)}, not {tier!r}")
        if tier != "user":
            if user is not _UNSET:
                raise ValidationError(f"user= names the user of tier=\"user\" facts; a tier={tier!r} fact has none")
            return id
        if id is not None:
            if user is not _UNSET and user != id:
                raise ValidationError(f"user={user!r} and id={id!r} name two different users: pass one of them")
            return id
        return self._need_user(user, ctx, "; a fact for everyone using the agent is tier=\"global\"")


class Memory(MemoryBase):
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

    # -- durable facts --------------------------------------------------------------------
    def persist(self, content: str, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None,
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
        write = FactWrite(confidence=confidence, source=source, trace_id=trace_id, metadata=metadata,
                          created_at=created_at, ttl=ttl, expires_at=expires_at, valid_from=valid_from,
                          valid_to=valid_to)
        return self._run(self._persist(content, tier, self._subject_id(tier, id, user, ctx), write, embedding), conn)

    def persist_many(self, contents: Sequence[str], *, tier: str = "user", user: str | None = _UNSET,
                     ctx: Any = None, id: str | None = None, confidence: float = 1.0, source: str = "manual",
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
        write = FactWrite(confidence=confidence, source=source, metadata=metadata, created_at=created_at, ttl=ttl,
                          expires_at=expires_at, valid_from=valid_from, valid_to=valid_to)
        return self._run(self._persist_many(contents, tier, self._subject_id(tier, id, user, ctx), write, embeddings),
                         conn)

    def retrieve(self, query: str | VectorLike | None = None, *, tier: str = "user", user: str | None = _UNSET,
                 ctx: Any = None, id: str | None = None, limit: int = 50, k: int = 5,
                 metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
                 as_of: datetime | None = None, conn: psycopg.Connection | None = None) -> list[Fact]:
        """Active facts newest first (``limit``), or the top ``k`` for ``query``: a text (ranked by
        its words and, with an embedder, by meaning: docs/sql.md "Facts"), or its vector from the
        Memory's embedder (by meaning alone). ``metadata``: only facts whose metadata contains
        this mapping. Only facts that hold now are shown; ``valid_at`` (what held then, as
        believed now), ``as_of`` (what was believed then) or both read the newest ``limit`` facts
        of another time instead (pymem.facts_at; no query then)."""
        return self._run(self._retrieve(query, tier, self._subject_id(tier, id, user, ctx), limit, k, metadata,
                                        valid_at, as_of), conn)

    def update(self, new: str, *, old: str | None = None, fact_id: int | None = None, tier: str = "user",
               user: str | None = _UNSET, ctx: Any = None, id: str | None = None, confidence: float = 1.0,
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
        write = FactWrite(confidence=confidence, source=source, trace_id=trace_id, metadata=metadata,
                          created_at=created_at, ttl=ttl, expires_at=expires_at, valid_from=valid_from,
                          valid_to=valid_to)
        return self._run(self._update(new, old, fact_id, tier, self._subject_id(tier, id, user, ctx), write, embedding),
                         conn)

    def forget(self, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None, id: str | None = None,
               fact_id: int | None = None, content: str | None = None, conn: psycopg.Connection | None = None) -> int:
        """Delete a subject's facts (or one fact and its history); returns how many rows went."""
        return self._run(self._forget(tier, self._subject_id(tier, id, user, ctx), fact_id, content), conn)

    def consolidate(self, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None, id: str | None = None,
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
        return self._run(self._consolidate(tier, self._subject_id(tier, id, user, ctx), dry_run, min_similarity,
                                           min_overlap, decide, max_pairs), conn)

    def facts(self, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None, id: str | None = None,
              metadata: Mapping[str, Any] | None = None, limit: int = 50, after: int | None = None,
              conn: psycopg.Connection | None = None) -> list[Fact]:
        """List the subject's active facts, newest first, with no query (SQL ``pymem.facts_list``):
        at most ``limit``; ``metadata``: only facts whose metadata contains this mapping;
        ``after``: the id of the last fact of the previous page (keyset paging: a page never
        repeats or skips a fact when others are added meanwhile). An empty page is the end."""
        return self._run(self._list(tier, self._subject_id(tier, id, user, ctx), metadata, limit, after), conn)

    def get_fact(self, fact_id: int, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None,
                 id: str | None = None, conn: psycopg.Connection | None = None) -> Fact | None:
        """The subject's fact ``fact_id``, active or superseded (``superseded_by`` says which); None
        when the subject has no such fact (another user's fact is None too: SQL ``pymem.fact_read``)."""
        return self._run(self._get(tier, self._subject_id(tier, id, user, ctx), fact_id), conn)

    def history(self, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None, id: str | None = None,
                fact_id: int | None = None, limit: int = 1000, conn: psycopg.Connection | None = None) -> list[Fact]:
        """Every version, newest first; with ``fact_id``, that fact's history: every version merged
        into the same newest one, each before its successor (``Fact.depth``: steps to the newest)."""
        return self._run(self._history(tier, self._subject_id(tier, id, user, ctx), fact_id, limit), conn)

    # -- conversation ---------------------------------------------------------------------
    def read(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
             embedding: VectorLike | None = None, as_of: datetime | None = None, since: datetime | None = None,
             until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
             valid_at: datetime | None = None, conn: psycopg.Connection | None = None) -> Context:
        """Everything one turn reads, and the chat messages built from it (see pymem.context).
        ``embedding``: the query's vector from the Memory's embedder (the embedder is not called).
        ``as_of``, ``since``, ``until``, ``metadata``: the recall filters of `recall`;
        ``as_of`` also reads the facts as they were believed then, and ``valid_at`` the facts that
        held then (a context for a point in time: docs/sql.md "Valid time")."""
        filters = {"as_of": as_of, "since": since, "until": until, "metadata": metadata, "valid_at": valid_at}
        return self._run(self._read(self.resolve_user(user, ctx), thread, query, embedding, filters), conn)

    def context(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                embedding: VectorLike | None = None, as_of: datetime | None = None, since: datetime | None = None,
                until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
                valid_at: datetime | None = None, conn: psycopg.Connection | None = None) -> list[dict[str, str]]:
        """The messages to send to a chat model for ``query``."""
        return self.read(query, user=user, ctx=ctx, thread=thread, embedding=embedding, as_of=as_of, since=since,
                         until=until, metadata=metadata, valid_at=valid_at, conn=conn).messages

    def record(self, query: str, answer: str, *, user: str | None = _UNSET, ctx: Any = None,
               thread: str | None = None, importance: float = 1.0, answer_importance: float = 1.0,
               metadata: Mapping[str, Any] | None = None, answer_metadata: Mapping[str, Any] | None = None,
               created_at: datetime | None = None,
               embeddings: Sequence[VectorLike] | None = None,
               conn: psycopg.Connection | None = None) -> TurnResult | None:
        """Store one successful turn; None (nothing stored) when the user is unresolved.
        ``metadata`` / ``answer_metadata``: stored with the user's message / the answer;
        ``created_at``: the turn's time when importing one (timezone-aware; default now);
        ``embeddings``: the two messages' vectors from the Memory's embedder."""
        user_id = self.resolve_user(user, ctx)
        if user_id is None:
            return None
        return self._run(self._recorded(user_id, thread, query, answer, importance, answer_importance, metadata,
                                      answer_metadata, created_at, embeddings), conn)

    def turn(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
             conn: psycopg.Connection | None = None) -> Turn:
        """A context manager for one turn: ``.messages`` to send; set ``.answer``; the turn is
        recorded only when the block completes and an answer was given."""
        return Turn(self, query, self.resolve_user(user, ctx), thread, conn)

    def add_message(self, content: str, *, role: str = "user", user: str | None = _UNSET, ctx: Any = None,
                    thread: str | None = None, importance: float = 1.0, metadata: Mapping[str, Any] | None = None,
                    created_at: datetime | None = None, conn: psycopg.Connection | None = None) -> int:
        """Append one message without a turn (no vector; recall embeds it later); returns its seq.
        ``created_at`` imports it with its real time (timezone-aware, not in the future, not
        before the thread's newest message: import oldest first)."""
        return self._run(self._add_message(self._need_user(user, ctx), thread, role, content, importance, metadata,
                                           created_at), conn)

    def add_messages(self, messages: Sequence[str | Mapping[str, Any]], *, user: str | None = _UNSET, ctx: Any = None,
                     thread: str | None = None, conn: psycopg.Connection | None = None) -> list[int]:
        """Append many messages to one thread in one call (bulk import of a history, oldest first):
        each a string (a user message) or a mapping with ``content`` and optionally ``role``,
        ``importance``, ``metadata``, ``created_at``. With an embedder their vectors are computed in
        one batch and stored with them. All or nothing; returns their seqs in order."""
        return self._run(self._add_messages(self._need_user(user, ctx), thread, messages), conn)

    def window(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
               size: int | None = None, conn: psycopg.Connection | None = None) -> list[Message]:
        """The thread's last ``size`` (default: the Memory's window) messages, oldest first."""
        size = self.options.window if size is None else size
        return self._run(self._window(self._need_user(user, ctx), thread, size), conn)

    def summary(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                conn: psycopg.Connection | None = None) -> str | None:
        return self._run(self._summary(self._need_user(user, ctx), thread), conn)

    def summarize(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                  conn: psycopg.Connection | None = None) -> bool:
        """Fold a due span into the summary now; False when nothing was due or the summarizer failed."""
        return self._run(self._summarize(self._need_user(user, ctx), thread), conn)

    def recall(self, query: str | VectorLike, *, user: str | None = _UNSET, ctx: Any = None,
               thread: str | None = None, k: int | None = None, as_of: datetime | None = None,
               since: datetime | None = None, until: datetime | None = None,
               metadata: Mapping[str, Any] | None = None, skip_window: bool = False,
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
        filters = {"as_of": as_of, "since": since, "until": until, "metadata": metadata}
        return self._run(self._recall(self._need_user(user, ctx), thread, query, k, filters, skip_window), conn)

    def delete_message(self, seq: int, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                       conn: psycopg.Connection | None = None) -> bool:
        """Delete one message of the user's thread by its ``seq`` (``Message.seq``, or what
        ``add_message`` / ``TurnResult`` returned), with its vector; False when there is none. The
        thread's running summary is kept (``forget_conversation`` removes a thread with it)."""
        return self._run(self._delete_message(self._need_user(user, ctx), thread, seq), conn)

    def users(self, *, limit: int = 100, after: str | None = None,
              conn: psycopg.Connection | None = None) -> list[UserInfo]:
        """The project's users (those with facts at ``tier="user"`` or conversation threads), by
        id, at most ``limit``; ``after``: the last ``user_id`` of the previous page. Each a
        `pymem.UserInfo` (its id, active facts, threads)."""
        return self._run(self._users(limit, after), conn)

    def forget_conversation(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str = "*",
                            conn: psycopg.Connection | None = None) -> int:
        """Delete a user's thread (default: every thread); returns the number of messages deleted."""
        return self._run(self._forget_conversation(self._need_user(user, ctx), thread), conn)

    def forget_user(self, *, user: str | None = _UNSET, ctx: Any = None, stores: Sequence[str] = (),
                    conn: psycopg.Connection | None = None) -> Erasure:
        """Erase the user from this Memory's project, in one transaction: facts with their
        history, every conversation with its summaries, the stores named in ``stores`` (the
        user's own: a store has no owner), and the user's name as the actor of other stores'
        rows. Returns the receipt (`pymem.Erasure`: counts per kind and a digest, no
        content), which the database keeps after the erasure (``pymem.erasures``)."""
        return self._run(_forget_user(self._need_user(user, ctx), self.options.project_id, stores), conn)

    def learn_pending(self, limit: int | None = None, *, batch: int = 10, lease_seconds: float = 300.0,
                      max_attempts: int = 5, backoff_seconds: float = 10.0) -> LearningReport:
        """Learn from the project's queued turns (``Memory(deferred_learning=True)`` queues them)
        with this Memory's learner (or extractor) and summarizer: at most ``limit`` jobs (None:
        until none is claimable now), claimed ``batch`` at a time, each leased for
        ``lease_seconds`` (longer than its model calls take). A failed job is tried again after
        ``backoff_seconds`` (doubled per attempt) and is dead after ``max_attempts``. Each job's
        changes apply once, in each user's order (docs/learning.md "Deferred learning");
        ``pymem worker`` runs this in a loop. Returns what was done (`pymem.LearningReport`)."""
        return self._run(self._learn_pending(limit, batch, lease_seconds, max_attempts, backoff_seconds))

    def learning_status(self) -> LearningStatus:
        """The project's learning queue: jobs per state, the oldest pending job's age, failures by
        kind, today's model calls and tokens (`pymem.LearningStatus`; no content)."""
        return self._run(self._learning_status())

    def close(self) -> None:
        """Close the Database this Memory opened; a ``db=`` it was given stays open (its owner
        closes it)."""
        if self._own_db:
            self.db.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        self.context = self.memory._run(self.memory._read(self.user_id, self.thread, self.query), self.conn)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.answer is not None and self.user_id is not None:
            self.result = self.memory._run(
                self.memory._recorded(self.user_id, self.thread, self.query, self.answer, 1.0, 1.0,
                                      query_vector=self.context.query_vector if self.context else None), self.conn
            )


class AsyncMemory(MemoryBase):
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
        return await arun(operation, await self._database(), self.options.embedder, owner=self)

    def bound(self, conn: psycopg.AsyncConnection, *, allow_model_calls: bool = False) -> Binding:
        """``async with amem.bound(aconn):`` (or ``with``): `Memory.bound` for your own
        ``psycopg.AsyncConnection``, in this asyncio task (and the tasks it creates inside the
        block, which inherit it)."""
        return binding(self, conn, allow_model_calls=allow_model_calls, asynchronous=True)

    async def persist(self, content: str, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None,
                      id: str | None = None, confidence: float = 1.0, source: str = "manual",
                      trace_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                      embedding: VectorLike | None = None, created_at: datetime | None = None,
                      ttl: float | timedelta | None = None, expires_at: datetime | None = None,
                      valid_from: datetime | None = None, valid_to: datetime | None = None,
                      conn: psycopg.AsyncConnection | None = None) -> FactId:
        write = FactWrite(confidence=confidence, source=source, trace_id=trace_id, metadata=metadata,
                          created_at=created_at, ttl=ttl, expires_at=expires_at, valid_from=valid_from,
                          valid_to=valid_to)
        return await self._run(self._persist(content, tier, self._subject_id(tier, id, user, ctx), write, embedding),
                               conn)

    async def persist_many(self, contents: Sequence[str], *, tier: str = "user", user: str | None = _UNSET,
                           ctx: Any = None, id: str | None = None, confidence: float = 1.0, source: str = "manual",
                           metadata: Mapping[str, Any] | None = None, embeddings: Sequence[VectorLike] | None = None,
                           created_at: datetime | None = None, ttl: float | timedelta | None = None,
                           expires_at: datetime | None = None, valid_from: datetime | None = None,
                           valid_to: datetime | None = None,
                           conn: psycopg.AsyncConnection | None = None) -> list[FactId]:
        write = FactWrite(confidence=confidence, source=source, metadata=metadata, created_at=created_at, ttl=ttl,
                          expires_at=expires_at, valid_from=valid_from, valid_to=valid_to)
        return await self._run(self._persist_many(contents, tier, self._subject_id(tier, id, user, ctx), write,
                                                  embeddings), conn)

    async def retrieve(self, query: str | VectorLike | None = None, *, tier: str = "user", user: str | None = _UNSET,
                       ctx: Any = None, id: str | None = None, limit: int = 50, k: int = 5,
                       metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
                       as_of: datetime | None = None, conn: psycopg.AsyncConnection | None = None) -> list[Fact]:
        return await self._run(self._retrieve(query, tier, self._subject_id(tier, id, user, ctx), limit, k,
                                              metadata, valid_at, as_of), conn)

    async def update(self, new: str, *, old: str | None = None, fact_id: int | None = None, tier: str = "user",
                     user: str | None = _UNSET, ctx: Any = None, id: str | None = None, confidence: float = 1.0,
                     source: str = "manual", trace_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                     embedding: VectorLike | None = None, created_at: datetime | None = None,
                     ttl: float | timedelta | None = None, expires_at: datetime | None = None,
                     valid_from: datetime | None = None, valid_to: datetime | None = None,
                     conn: psycopg.AsyncConnection | None = None) -> FactId:
        write = FactWrite(confidence=confidence, source=source, trace_id=trace_id, metadata=metadata,
                          created_at=created_at, ttl=ttl, expires_at=expires_at, valid_from=valid_from,
                          valid_to=valid_to)
        return await self._run(self._update(new, old, fact_id, tier, self._subject_id(tier, id, user, ctx), write,
                                            embedding), conn)

    async def forget(self, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None, id: str | None = None,
                     fact_id: int | None = None, content: str | None = None,
                     conn: psycopg.AsyncConnection | None = None) -> int:
        return await self._run(self._forget(tier, self._subject_id(tier, id, user, ctx), fact_id, content), conn)

    async def consolidate(self, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None,
                          id: str | None = None, dry_run: bool = False, min_similarity: float | None = 0.9,
                          min_overlap: float | None = 0.8, decide: Any = None, max_pairs: int = 100,
                          conn: psycopg.AsyncConnection | None = None) -> list[Merge]:
        return await self._run(self._consolidate(tier, self._subject_id(tier, id, user, ctx), dry_run, min_similarity,
                                                 min_overlap, decide, max_pairs), conn)

    async def facts(self, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None,
                    id: str | None = None, metadata: Mapping[str, Any] | None = None, limit: int = 50,
                    after: int | None = None, conn: psycopg.AsyncConnection | None = None) -> list[Fact]:
        return await self._run(self._list(tier, self._subject_id(tier, id, user, ctx), metadata, limit, after), conn)

    async def get_fact(self, fact_id: int, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None,
                       id: str | None = None, conn: psycopg.AsyncConnection | None = None) -> Fact | None:
        return await self._run(self._get(tier, self._subject_id(tier, id, user, ctx), fact_id), conn)

    async def history(self, *, tier: str = "user", user: str | None = _UNSET, ctx: Any = None,
                      id: str | None = None, fact_id: int | None = None, limit: int = 1000,
                      conn: psycopg.AsyncConnection | None = None) -> list[Fact]:
        return await self._run(self._history(tier, self._subject_id(tier, id, user, ctx), fact_id, limit), conn)

    async def read(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                   embedding: VectorLike | None = None, as_of: datetime | None = None,
                   since: datetime | None = None, until: datetime | None = None,
                   metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
                   conn: psycopg.AsyncConnection | None = None) -> Context:
        filters = {"as_of": as_of, "since": since, "until": until, "metadata": metadata, "valid_at": valid_at}
        return await self._run(self._read(self.resolve_user(user, ctx), thread, query, embedding, filters), conn)

    async def context(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                      embedding: VectorLike | None = None, as_of: datetime | None = None,
                      since: datetime | None = None, until: datetime | None = None,
                      metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
                      conn: psycopg.AsyncConnection | None = None) -> list[dict[str, str]]:
        return (await self.read(query, user=user, ctx=ctx, thread=thread, embedding=embedding, as_of=as_of,
                                since=since, until=until, metadata=metadata, valid_at=valid_at, conn=conn)).messages

    async def record(self, query: str, answer: str, *, user: str | None = _UNSET, ctx: Any = None,
                     thread: str | None = None, importance: float = 1.0, answer_importance: float = 1.0,
                     metadata: Mapping[str, Any] | None = None, answer_metadata: Mapping[str, Any] | None = None,
                     created_at: datetime | None = None,
                     embeddings: Sequence[VectorLike] | None = None,
                     conn: psycopg.AsyncConnection | None = None) -> TurnResult | None:
        user_id = self.resolve_user(user, ctx)
        if user_id is None:
            return None
        return await self._run(self._recorded(user_id, thread, query, answer, importance, answer_importance, metadata,
                                            answer_metadata, created_at, embeddings), conn)

    def turn(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
             conn: psycopg.AsyncConnection | None = None) -> AsyncTurn:
        return AsyncTurn(self, query, self.resolve_user(user, ctx), thread, conn)

    async def add_messages(self, messages: Sequence[str | Mapping[str, Any]], *, user: str | None = _UNSET,
                           ctx: Any = None, thread: str | None = None,
                           conn: psycopg.AsyncConnection | None = None) -> list[int]:
        return await self._run(self._add_messages(self._need_user(user, ctx), thread, messages), conn)

    async def add_message(self, content: str, *, role: str = "user", user: str | None = _UNSET, ctx: Any = None,
                          thread: str | None = None, importance: float = 1.0,
                          metadata: Mapping[str, Any] | None = None, created_at: datetime | None = None,
                          conn: psycopg.AsyncConnection | None = None) -> int:
        return await self._run(self._add_message(self._need_user(user, ctx), thread, role, content, importance,
                                                 metadata, created_at), conn)

    async def window(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                     size: int | None = None, conn: psycopg.AsyncConnection | None = None) -> list[Message]:
        size = self.options.window if size is None else size
        return await self._run(self._window(self._need_user(user, ctx), thread, size), conn)

    async def summary(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                      conn: psycopg.AsyncConnection | None = None) -> str | None:
        return await self._run(self._summary(self._need_user(user, ctx), thread), conn)

    async def summarize(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                        conn: psycopg.AsyncConnection | None = None) -> bool:
        return await self._run(self._summarize(self._need_user(user, ctx), thread), conn)

    async def recall(self, query: str | VectorLike, *, user: str | None = _UNSET, ctx: Any = None,
                     thread: str | None = None, k: int | None = None, as_of: datetime | None = None,
                     since: datetime | None = None, until: datetime | None = None,
                     metadata: Mapping[str, Any] | None = None, skip_window: bool = False,
                     conn: psycopg.AsyncConnection | None = None) -> list[Message]:
        filters = {"as_of": as_of, "since": since, "until": until, "metadata": metadata}
        return await self._run(self._recall(self._need_user(user, ctx), thread, query, k, filters, skip_window), conn)

    async def delete_message(self, seq: int, *, user: str | None = _UNSET, ctx: Any = None,
                             thread: str | None = None, conn: psycopg.AsyncConnection | None = None) -> bool:
        return await self._run(self._delete_message(self._need_user(user, ctx), thread, seq), conn)

    async def users(self, *, limit: int = 100, after: str | None = None,
                    conn: psycopg.AsyncConnection | None = None) -> list[UserInfo]:
        return await self._run(self._users(limit, after), conn)

    async def forget_conversation(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str = "*",
                                  conn: psycopg.AsyncConnection | None = None) -> int:
        return await self._run(self._forget_conversation(self._need_user(user, ctx), thread), conn)

    async def forget_user(self, *, user: str | None = _UNSET, ctx: Any = None, stores: Sequence[str] = (),
                          conn: psycopg.AsyncConnection | None = None) -> Erasure:
        return await self._run(_forget_user(self._need_user(user, ctx), self.options.project_id, stores), conn)

    async def learn_pending(self, limit: int | None = None, *, batch: int = 10, lease_seconds: float = 300.0,
                            max_attempts: int = 5, backoff_seconds: float = 10.0) -> LearningReport:
        return await self._run(self._learn_pending(limit, batch, lease_seconds, max_attempts, backoff_seconds))

    async def learning_status(self) -> LearningStatus:
        return await self._run(self._learning_status())

    async def aclose(self) -> None:
        """Close the AsyncDatabase this AsyncMemory opened; a ``db=`` it was given stays open."""
        if self._own_db and self.db is not None:
            await self.db.close()

    async def __aenter__(self) -> AsyncMemory:
        await self._database()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


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
        self.context = await self.memory._run(self.memory._read(self.user_id, self.thread, self.query), self.conn)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.answer is not None and self.user_id is not None:
            self.result = await self.memory._run(
                self.memory._recorded(self.user_id, self.thread, self.query, self.answer, 1.0, 1.0,
                                      query_vector=self.context.query_vector if self.context else None), self.conn
            )


# OpenTelemetry spans on every public call (pymem.tracing; nothing without opentelemetry-api)
tracing.instrument_memory(Memory, Turn)
tracing.instrument_memory(AsyncMemory, AsyncTurn)


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
