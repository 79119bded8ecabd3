"""``pymem.Memory`` (sync) and ``pymem.AsyncMemory``: one object per agent that serves every
user. Durable facts (:mod:`pymem.facts`), conversation memory (:mod:`pymem.conversations`)
and the per-turn context (:mod:`pymem.context`) are plans written once; the two classes only
drive them over a pooled connection.

Users: ``Memory(user_id="alice")`` or ``Memory(user_id=lambda ctx: ctx.user)``, resolved on
every call from the ``ctx`` passed to it (or overridden by ``user=``), so one Memory serves many
users at once, from threads or asyncio tasks. Nothing about a user is kept in the process.
A caller whose user cannot be resolved (None, "", a resolver that raises) gets the agent's
facts only and nothing it says is stored; each such call logs one warning.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Mapping
from typing import Any

from .context import Context, _Context
from .conversations import Extractor, Message, Summarizer, TurnResult, _Conversations
from .db import AsyncDatabase, Database, arun, run
from .embedders import Embedder
from .errors import ValidationError
from .facts import Fact, _Facts
from .values import text

log = logging.getLogger("pymem")

UserSpec = str | Callable[[Any], "str | None"] | None
_UNSET: Any = object()


class MemoryBase(_Facts, _Conversations, _Context):
    """Configuration shared by :class:`Memory` and :class:`AsyncMemory`."""

    def __init__(
        self,
        *,
        agent_id: str | None = None,
        user_id: UserSpec = None,
        project_id: str = "",
        thread: str = "default",
        embedder: Embedder | None = None,
        system_prompt: str | None = None,
        window: int = 20,
        max_facts: int = 50,
        recall_k: int = 5,
        min_content_chars: int = 10,
        recency_weight: float = 0.0,
        importance_weight: float = 0.0,
        half_life_seconds: float = 3600.0,
        dedupe: bool = True,
        summarizer: Summarizer | None = None,
        summarize_every: int = 10,
        keep_last: int = 10,
        max_summary_chars: int = 2000,
        summary_lease_seconds: float = 300.0,
        extractor: Extractor | None = None,
        max_learned_facts: int | None = 200,
    ) -> None:
        if agent_id is not None:
            text(agent_id, "agent_id")
            if agent_id.strip() in ("", "*"):
                raise ValidationError(
                    f"agent_id {agent_id!r} would name every agent or none: pass a real agent id, or leave it None"
                )
        text(project_id, "project_id")
        text(thread, "thread")
        if user_id is not None and not isinstance(user_id, str) and not callable(user_id):
            raise ValidationError("user_id must be a string, a callable(ctx) -> str, or None")
        for name, value in (("window", window), ("max_facts", max_facts), ("recall_k", recall_k),
                            ("min_content_chars", min_content_chars), ("summarize_every", summarize_every),
                            ("keep_last", keep_last), ("max_summary_chars", max_summary_chars)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValidationError(f"{name} must be an int, not {value!r}")
        # the SQL checks every limit on every call; these two are only sent when a summary is due,
        # so a bad value would surface after a turn was already stored: refuse it here
        if not 1 <= summarize_every <= 10000 or not 1 <= max_summary_chars <= 100000:
            raise ValidationError("summarize_every must be in 1..10000 and max_summary_chars in 1..100000")
        if max_learned_facts is not None and (
            isinstance(max_learned_facts, bool) or not isinstance(max_learned_facts, int) or max_learned_facts < 1
        ):
            raise ValidationError("max_learned_facts must be a positive int, or None for no cap")
        for name, fn in (("summarizer", summarizer), ("extractor", extractor)):
            if fn is not None and not callable(fn):
                raise ValidationError(f"{name} must be callable")
        self.agent_id = agent_id
        self.user_id = user_id
        self.project_id = project_id
        self.thread = thread
        self.embedder = embedder
        self.system_prompt = system_prompt
        self.window_size = window
        self.max_facts = max_facts
        self.recall_k = recall_k
        self.min_content_chars = min_content_chars
        self.recency_weight = recency_weight
        self.importance_weight = importance_weight
        self.half_life_seconds = half_life_seconds
        self.dedupe = dedupe
        self.summarizer = summarizer
        self.summarize_every = summarize_every
        self.keep_last = keep_last
        self.max_summary_chars = max_summary_chars
        self.summary_lease_seconds = summary_lease_seconds
        self.extractor = extractor
        self.max_learned_facts = max_learned_facts

    def resolve_user(self, user: str | None = _UNSET, ctx: Any = None) -> str | None:
        """The user a call is for: ``user`` if given, else ``user_id`` (string or resolver(ctx)).
        None when it cannot be resolved (one warning is logged)."""
        if user is _UNSET:
            spec = self.user_id
            if callable(spec):
                try:
                    user = spec(ctx)
                except Exception as exc:
                    log.warning("pymem: the user_id resolver raised %s; this call gets no user memory", type(exc).__name__)
                    return None
            else:
                user = spec
        if user is None or (isinstance(user, str) and not user.strip()):
            log.warning("pymem: no user for this call; it gets global facts only and nothing is stored")
            return None
        return text(user, "user id")

    def _need_user(self, user: str | None, ctx: Any) -> str:
        resolved = self.resolve_user(user, ctx)
        if resolved is None:
            raise ValidationError("this call needs a user: pass user=... or Memory(user_id=...)")
        return resolved


class Memory(MemoryBase):
    """Memory for one agent, sync API. See the module docstring and README "Python API".

    >>> mem = pymem.Memory(agent_id="support-bot", embedder=pymem.HashEmbedder())
    >>> with mem.turn("I moved to Oslo", user="alice") as t:
    ...     t.answer = my_llm(t.messages)
    >>> mem.context("Where do I live?", user="alice")
    [{'role': 'system', ...}, ..., {'role': 'user', 'content': 'Where do I live?'}]
    """

    def __init__(self, *, db: Database | None = None, **options: Any) -> None:
        super().__init__(**options)
        self._own_db = db is None
        self.db = db if db is not None else Database()

    def _run(self, plan: Generator[Any, Any, Any]) -> Any:
        return run(plan, self.db, self.embedder)

    # -- durable facts --------------------------------------------------------------------
    def persist(self, content: str, *, tier: str = "user", id: str | None = None, confidence: float = 1.0,
                source: str = "manual", trace_id: str | None = None,
                metadata: Mapping[str, Any] | None = None) -> int:
        """Store a fact (idempotent: the same content returns the same id). Returns its id."""
        return self._run(self._persist(content, tier, id, confidence, source, trace_id, metadata))

    def retrieve(self, query: str | None = None, *, tier: str = "user", id: str | None = None, limit: int = 50,
                 k: int = 5) -> list[Fact]:
        """Active facts newest first (``limit``), or the top ``k`` by meaning for ``query``."""
        return self._run(self._retrieve(query, tier, id, limit, k))

    def update(self, new: str, *, old: str | None = None, fact_id: int | None = None, tier: str = "user",
               id: str | None = None, confidence: float = 1.0, source: str = "manual", trace_id: str | None = None,
               metadata: Mapping[str, Any] | None = None) -> int:
        """Supersede the fact named by ``old`` content or ``fact_id`` with ``new``; returns the new id."""
        return self._run(self._update(new, old, fact_id, tier, id, confidence, source, trace_id, metadata))

    def forget(self, *, tier: str = "user", id: str | None = None, fact_id: int | None = None,
               content: str | None = None) -> int:
        """Delete a subject's facts (or one fact and its history); returns how many rows went."""
        return self._run(self._forget(tier, id, fact_id, content))

    def history(self, *, tier: str = "user", id: str | None = None, fact_id: int | None = None,
                limit: int = 1000) -> list[Fact]:
        """Every version, newest first; with ``fact_id``, that fact's chain oldest first."""
        return self._run(self._history(tier, id, fact_id, limit))

    # -- conversation ---------------------------------------------------------------------
    def read(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None) -> Context:
        """Everything one turn reads, and the chat messages built from it (see pymem.context)."""
        return self._run(self._read(self.resolve_user(user, ctx), thread, query))

    def context(self, query: str, *, user: str | None = _UNSET, ctx: Any = None,
                thread: str | None = None) -> list[dict[str, str]]:
        """The messages to send to a chat model for ``query``."""
        return self.read(query, user=user, ctx=ctx, thread=thread).messages

    def record(self, query: str, answer: str, *, user: str | None = _UNSET, ctx: Any = None,
               thread: str | None = None, importance: float = 1.0,
               answer_importance: float = 1.0) -> TurnResult | None:
        """Store one successful turn; None (nothing stored) when the user is unresolved."""
        user_id = self.resolve_user(user, ctx)
        if user_id is None:
            return None
        return self._run(self._record(user_id, thread, query, answer, importance, answer_importance))

    def turn(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None) -> Turn:
        """A context manager for one turn: ``.messages`` to send; set ``.answer``; the turn is
        recorded only when the block completes and an answer was given."""
        return Turn(self, query, self.resolve_user(user, ctx), thread)

    def add_message(self, content: str, *, role: str = "user", user: str | None = _UNSET, ctx: Any = None,
                    thread: str | None = None, importance: float = 1.0) -> int:
        """Append one message without a turn (no vector; recall embeds it later)."""
        return self._run(self._add_message(self._need_user(user, ctx), thread, role, content, importance))

    def window(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
               size: int | None = None) -> list[Message]:
        """The thread's last ``size`` (default: the Memory's window) messages, oldest first."""
        return self._run(self._window(self._need_user(user, ctx), thread, self.window_size if size is None else size))

    def summary(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None) -> str | None:
        return self._run(self._summary(self._need_user(user, ctx), thread))

    def summarize(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None) -> bool:
        """Fold a due span into the summary now; False when nothing was due or the summarizer failed."""
        return self._run(self._summarize(self._need_user(user, ctx), thread))

    def recall(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
               k: int | None = None) -> list[Message]:
        return self._run(self._recall(self._need_user(user, ctx), thread, query, self.recall_k if k is None else k))

    def forget_conversation(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str = "*") -> int:
        """Delete a user's thread (default: every thread); returns the number of messages deleted."""
        return self._run(self._forget_conversation(self._need_user(user, ctx), thread))

    def close(self) -> None:
        if self._own_db:
            self.db.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Turn:
    """One turn in progress (see :meth:`Memory.turn`)."""

    def __init__(self, memory: Memory, query: str, user_id: str | None, thread: str | None) -> None:
        self.memory = memory
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
        self.context = self.memory._run(self.memory._read(self.user_id, self.thread, self.query))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.answer is not None and self.user_id is not None:
            self.result = self.memory._run(
                self.memory._record(self.user_id, self.thread, self.query, self.answer, 1.0, 1.0)
            )


class AsyncMemory(MemoryBase):
    """The asyncio twin of :class:`Memory`: same arguments and methods, awaited."""

    def __init__(self, *, db: AsyncDatabase, **options: Any) -> None:
        super().__init__(**options)
        self.db = db

    async def _run(self, plan: Generator[Any, Any, Any]) -> Any:
        return await arun(plan, self.db, self.embedder)

    async def persist(self, content: str, *, tier: str = "user", id: str | None = None, confidence: float = 1.0,
                      source: str = "manual", trace_id: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> int:
        return await self._run(self._persist(content, tier, id, confidence, source, trace_id, metadata))

    async def retrieve(self, query: str | None = None, *, tier: str = "user", id: str | None = None,
                       limit: int = 50, k: int = 5) -> list[Fact]:
        return await self._run(self._retrieve(query, tier, id, limit, k))

    async def update(self, new: str, *, old: str | None = None, fact_id: int | None = None, tier: str = "user",
                     id: str | None = None, confidence: float = 1.0, source: str = "manual",
                     trace_id: str | None = None, metadata: Mapping[str, Any] | None = None) -> int:
        return await self._run(self._update(new, old, fact_id, tier, id, confidence, source, trace_id, metadata))

    async def forget(self, *, tier: str = "user", id: str | None = None, fact_id: int | None = None,
                     content: str | None = None) -> int:
        return await self._run(self._forget(tier, id, fact_id, content))

    async def history(self, *, tier: str = "user", id: str | None = None, fact_id: int | None = None,
                      limit: int = 1000) -> list[Fact]:
        return await self._run(self._history(tier, id, fact_id, limit))

    async def read(self, query: str, *, user: str | None = _UNSET, ctx: Any = None,
                   thread: str | None = None) -> Context:
        return await self._run(self._read(self.resolve_user(user, ctx), thread, query))

    async def context(self, query: str, *, user: str | None = _UNSET, ctx: Any = None,
                      thread: str | None = None) -> list[dict[str, str]]:
        return (await self.read(query, user=user, ctx=ctx, thread=thread)).messages

    async def record(self, query: str, answer: str, *, user: str | None = _UNSET, ctx: Any = None,
                     thread: str | None = None, importance: float = 1.0,
                     answer_importance: float = 1.0) -> TurnResult | None:
        user_id = self.resolve_user(user, ctx)
        if user_id is None:
            return None
        return await self._run(self._record(user_id, thread, query, answer, importance, answer_importance))

    def turn(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None) -> AsyncTurn:
        return AsyncTurn(self, query, self.resolve_user(user, ctx), thread)

    async def add_message(self, content: str, *, role: str = "user", user: str | None = _UNSET, ctx: Any = None,
                          thread: str | None = None, importance: float = 1.0) -> int:
        return await self._run(self._add_message(self._need_user(user, ctx), thread, role, content, importance))

    async def window(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                     size: int | None = None) -> list[Message]:
        return await self._run(
            self._window(self._need_user(user, ctx), thread, self.window_size if size is None else size)
        )

    async def summary(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None) -> str | None:
        return await self._run(self._summary(self._need_user(user, ctx), thread))

    async def summarize(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None) -> bool:
        return await self._run(self._summarize(self._need_user(user, ctx), thread))

    async def recall(self, query: str, *, user: str | None = _UNSET, ctx: Any = None, thread: str | None = None,
                     k: int | None = None) -> list[Message]:
        return await self._run(
            self._recall(self._need_user(user, ctx), thread, query, self.recall_k if k is None else k)
        )

    async def forget_conversation(self, *, user: str | None = _UNSET, ctx: Any = None, thread: str = "*") -> int:
        return await self._run(self._forget_conversation(self._need_user(user, ctx), thread))


class AsyncTurn:
    """One turn in progress (see :meth:`AsyncMemory.turn`); ``async with``."""

    def __init__(self, memory: AsyncMemory, query: str, user_id: str | None, thread: str | None) -> None:
        self.memory = memory
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
        self.context = await self.memory._run(self.memory._read(self.user_id, self.thread, self.query))
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.answer is not None and self.user_id is not None:
            self.result = await self.memory._run(
                self.memory._record(self.user_id, self.thread, self.query, self.answer, 1.0, 1.0)
            )


# -- module-level shortcuts: pymem.context(user, query) and pymem.record(...) ---------------

_default: Memory | None = None
_default_lock = threading.Lock()


def default_memory() -> Memory:
    """The Memory behind :func:`context` and :func:`record`, built once from
    :class:`pymem.Settings` (``PYMEM_AGENT_ID``, ``PYMEM_PROJECT_ID``; the built-in
    HashEmbedder for recall)."""
    global _default
    with _default_lock:
        if _default is None:
            from .embedders import HashEmbedder
            from .settings import Settings

            settings = Settings()
            _default = Memory(
                db=Database(settings),
                agent_id=settings.agent_id,
                project_id=settings.project_id,
                embedder=HashEmbedder(),
            )
        return _default


def context(user: str | None, query: str, **options: Any) -> list[dict[str, str]]:
    """The messages to send to a chat model for ``user``'s ``query`` (default Memory)."""
    return default_memory().context(query, user=user, **options)


def record(user: str | None, query: str, answer: str, **options: Any) -> TurnResult | None:
    """Store one successful turn of ``user`` (default Memory); None when ``user`` is empty."""
    return default_memory().record(query, answer, user=user, **options)
