"""Durable facts: :class:`Memory` (sync) and :class:`AsyncMemory` over ``sql/api/facts.sql``.

Tiers map to the SQL scopes: ``global`` -> scope ``agent`` under the Memory's ``agent_id``;
``user`` -> scope ``user`` under a user id; ``project`` -> scope ``project``. ``project_id``
(the tenant partition) is fixed per Memory. All rules (idempotence, scoping guards, supersede
chains, caps) live in SQL; this module maps arguments, embeds text and builds :class:`Fact`
objects. Each operation is one plan (see :mod:`pymem.db`) that both twins run.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from .db import AsyncDatabase, Call, Database, Embed, arun, run
from .embedders import Embedder
from .errors import ValidationError

TIERS = {"global": "agent", "agent": "agent", "user": "user", "project": "project"}
SOURCES = ("manual", "learned", "trace")


@dataclass(frozen=True)
class Fact:
    """One row of ``pymem.facts`` (``similarity`` is set by semantic retrieval)."""

    id: int
    content: str
    scope: str
    scope_id: str
    project_id: str = ""
    confidence: float = 1.0
    source: str = "manual"
    trace_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    superseded_by: int | None = None
    superseded_at: datetime | None = None
    similarity: float | None = None

    @property
    def active(self) -> bool:
        return self.superseded_by is None


def _text(value: Any, what: str, *, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{what} is not valid Unicode text (lone surrogate?)") from exc
    return value


def _fact(row: Mapping[str, Any], scope: str | None = None) -> Fact:
    return Fact(
        id=row["id"],
        content=row["content"],
        scope=row.get("scope", scope or ""),
        scope_id=row.get("scope_id", row.get("subject_id", "")),
        project_id=row.get("project_id", ""),
        confidence=row["confidence"],
        source=row["source"],
        trace_id=row.get("trace_id"),
        metadata=row.get("metadata") or {},
        created_at=row.get("created_at"),
        superseded_by=row.get("superseded_by"),
        superseded_at=row.get("superseded_at"),
        similarity=row.get("similarity"),
    )


class _Facts:
    """What Memory and AsyncMemory share: argument mapping and the plans."""

    def __init__(
        self,
        *,
        agent_id: str | None,
        project_id: str,
        embedder: Embedder | None,
        max_learned_facts: int | None,
    ) -> None:
        if agent_id is not None:
            _text(agent_id, "agent_id")
            if agent_id.strip() in ("", "*"):
                raise ValidationError(
                    f"agent_id {agent_id!r} would name every agent or none: pass a real agent id, or leave it None"
                )
        _text(project_id, "project_id")
        if max_learned_facts is not None and (not isinstance(max_learned_facts, int) or max_learned_facts < 0):
            raise ValidationError("max_learned_facts must be a non-negative int, or None for no cap")
        self.agent_id = agent_id
        self.project_id = project_id
        self.embedder = embedder
        self.max_learned_facts = max_learned_facts

    # -- mapping --------------------------------------------------------------------------
    def _subject(self, tier: str, id: str | None, *, writing: bool) -> dict[str, Any]:
        scope = TIERS.get(tier) if isinstance(tier, str) else None
        if scope is None:
            raise ValidationError(f"tier must be one of {sorted(TIERS)}, not {tier!r}")
        if scope == "agent":
            scope_id = id if id is not None else self.agent_id
            if scope_id is None:
                if writing:
                    warnings.warn(
                        "a global fact written by a Memory with no agent_id is filed under the empty agent id: "
                        "no agent will ever see it. Pass Memory(agent_id=...) or id=.",
                        UserWarning,
                        stacklevel=4,
                    )
                scope_id = ""
        else:
            scope_id = "" if id is None else id
        return {"scope": scope, "scope_id": _text(scope_id, "id"), "project_id": self.project_id}

    def _values(self, confidence: float, source: str, trace_id: str | None, metadata: Any) -> dict[str, Any]:
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
            raise ValidationError(f"confidence must be a number between 0 and 1, not {confidence!r}")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise ValidationError("metadata must be a mapping (a JSON object)")
        return {
            "confidence": float(confidence),
            "source": _text(source, "source"),
            "trace_id": _text(trace_id, "trace_id", allow_none=True),
            "metadata": Jsonb(dict(metadata or {})),
        }

    def _vector(self, content: str) -> Generator[Any, Any, dict[str, Any]]:
        if self.embedder is None:
            return {"embedding": None, "embedder": None}
        (vector,) = yield Embed([content.strip()])
        return {"embedding": _as_vector(vector), "embedder": self.embedder.name}

    # -- plans ----------------------------------------------------------------------------
    def _persist(self, content, tier, id, confidence, source, trace_id, metadata):
        params = {**self._subject(tier, id, writing=True), "content": _text(content, "content")}
        params |= self._values(confidence, source, trace_id, metadata)
        params["max_learned"] = self.max_learned_facts
        params |= yield from self._vector(content)
        rows = yield Call("fact_add", params)
        return rows[0]["id"]

    def _retrieve(self, query, tier, id, limit, k):
        subject = self._subject(tier, id, writing=False)
        if query is None:
            rows = yield Call("facts_newest", {**subject, "max_facts": limit})
            return [_fact(r) for r in rows]
        _text(query, "query")
        if self.embedder is None:
            raise ValidationError("retrieve(query) needs Memory(embedder=...): facts are ranked by meaning")
        if subject["scope_id"] == "" and subject["scope"] != "agent":
            return []  # an empty user/project id reads nothing (SQL says the same)
        # The store is the source of truth: embed, in one batch, the subject's facts that have
        # no vector from this embedder yet (written by SQL, by another process, before a restart).
        missing = yield Call("facts_unembedded", {**subject, "embedder": self.embedder.name, "max_facts": 10000})
        if missing:
            vectors = yield Embed([r["content"] for r in missing])
            yield Call(
                "fact_embeddings_put",
                {
                    **subject,
                    "embedder": self.embedder.name,
                    "ids": [r["id"] for r in missing],
                    "embeddings": [_as_vector(v) for v in vectors],
                },
            )
        (qvec,) = yield Embed([query])
        rows = yield Call(
            "facts_search", {**subject, "query": _as_vector(qvec), "embedder": self.embedder.name, "k": k}
        )
        return [_fact(r, subject["scope"]) for r in rows]

    def _update(self, new, old, fact_id, tier, id, confidence, source, trace_id, metadata):
        params = {**self._subject(tier, id, writing=True), "new_content": _text(new, "new content")}
        params |= {"id": fact_id, "old_content": _text(old, "old content", allow_none=True)}
        params |= self._values(confidence, source, trace_id, metadata)
        params |= yield from self._vector(new)
        rows = yield Call("fact_supersede", params)
        return rows[0]["id"]

    def _forget(self, tier, id, fact_id, content):
        subject = self._subject(tier, id, writing=False)
        if fact_id is None and content is None:
            rows = yield Call("facts_forget", subject)
        else:
            params = {**subject, "id": fact_id, "content": _text(content, "content", allow_none=True)}
            rows = yield Call("fact_forget", params)
        return rows[0]["deleted"]

    def _history(self, tier, id, fact_id, limit):
        subject = self._subject(tier, id, writing=False)
        if fact_id is None:
            rows = yield Call("fact_history", {**subject, "max_facts": limit})
        else:
            rows = yield Call("fact_chain", {**subject, "id": fact_id})
        return [_fact(r) for r in rows]


def _as_vector(values: list[float]) -> Any:
    from pgvector import Vector

    return Vector(values)


class Memory(_Facts):
    """Durable facts for one agent (and one project), sync API.

    >>> mem = pymem.Memory(agent_id="support-bot")
    >>> mem.persist("Return policy is 30 days", tier="global")
    >>> mem.persist("Prefers email", tier="user", id="alice")
    >>> mem.update("Prefers Slack", old="Prefers email", tier="user", id="alice")
    >>> [f.content for f in mem.retrieve(tier="user", id="alice")]
    ['Prefers Slack']
    """

    def __init__(
        self,
        *,
        agent_id: str | None = None,
        project_id: str = "",
        db: Database | None = None,
        embedder: Embedder | None = None,
        max_learned_facts: int | None = 200,
    ) -> None:
        super().__init__(
            agent_id=agent_id, project_id=project_id, embedder=embedder, max_learned_facts=max_learned_facts
        )
        self._own_db = db is None
        self.db = db if db is not None else Database()

    def _run(self, plan: Generator[Any, Any, Any]) -> Any:
        with self.db.connection() as conn:
            return run(plan, conn, self.embedder)

    def persist(
        self,
        content: str,
        *,
        tier: str = "user",
        id: str | None = None,
        confidence: float = 1.0,
        source: str = "manual",
        trace_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        """Store a fact (idempotent: the same content returns the same id). Returns its id."""
        return self._run(self._persist(content, tier, id, confidence, source, trace_id, metadata))

    def retrieve(
        self, query: str | None = None, *, tier: str = "user", id: str | None = None, limit: int = 50, k: int = 5
    ) -> list[Fact]:
        """Active facts newest first (``limit``), or the top ``k`` by meaning for ``query``."""
        return self._run(self._retrieve(query, tier, id, limit, k))

    def update(
        self,
        new: str,
        *,
        old: str | None = None,
        fact_id: int | None = None,
        tier: str = "user",
        id: str | None = None,
        confidence: float = 1.0,
        source: str = "manual",
        trace_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        """Supersede the fact named by ``old`` content or ``fact_id`` with ``new``; returns the new id."""
        return self._run(self._update(new, old, fact_id, tier, id, confidence, source, trace_id, metadata))

    def forget(
        self, *, tier: str = "user", id: str | None = None, fact_id: int | None = None, content: str | None = None
    ) -> int:
        """Delete a subject's facts (or one fact and its history); returns how many rows went."""
        return self._run(self._forget(tier, id, fact_id, content))

    def history(
        self, *, tier: str = "user", id: str | None = None, fact_id: int | None = None, limit: int = 1000
    ) -> list[Fact]:
        """Every version, newest first; with ``fact_id``, that fact's chain oldest first."""
        return self._run(self._history(tier, id, fact_id, limit))

    def close(self) -> None:
        if self._own_db:
            self.db.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMemory(_Facts):
    """The asyncio twin of :class:`Memory`: same arguments, ``await`` every call."""

    def __init__(
        self,
        *,
        db: AsyncDatabase,
        agent_id: str | None = None,
        project_id: str = "",
        embedder: Embedder | None = None,
        max_learned_facts: int | None = 200,
    ) -> None:
        super().__init__(
            agent_id=agent_id, project_id=project_id, embedder=embedder, max_learned_facts=max_learned_facts
        )
        self.db = db

    async def _run(self, plan: Generator[Any, Any, Any]) -> Any:
        async with self.db.connection() as conn:
            return await arun(plan, conn, self.embedder)

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
