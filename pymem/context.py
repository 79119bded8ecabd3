"""The prompt context for one turn, over ``sql/api/context.sql``, assembled from blocks
(`pymem.blocks`).

``Memory.context(query, user=...)`` = embed the query (unless its vector is given:
``embedding=``) + one call of ``pymem.context_read`` (every built-in block: facts, summary,
recall, window) + the custom blocks' ``render`` in their places + the budget + the formatting
below. Only when the user has messages that no vector of the current embedder covers yet
(written by SQL from another service) does it embed them in one batch, store them and read again.

By default (``blocks=`` not given) the messages come back in this order, as ``{"role",
"content"}`` dicts for any chat API: the system prompt, the agent's facts (the heading names the
agent), the user's facts (the heading never names the user: ids are often e-mail addresses and
must not reach the model provider), the running summary, recalled earlier messages, the window,
then the query. Recall is deduplicated in SQL against the facts and the summary, and here
against the static and custom blocks placed above it (`pymem.blocks.Upstream.contains`).
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from datetime import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from .blocks import DEFAULT_BLOCKS, BlockOutput, Limit, Part, Upstream, block_name, fit, output, unique_names
from .conversations import Message, TurnResult, _message, record_turn, catch_up
from .recall import recall_filters, time_params
from .errors import ValidationError
from .options import UNSET, MemoryOptions, resolve_user
from .runner import Callback, Embed, Operation, Query
from .types import VectorLike
from .values import text, timestamp
from . import calls

log = logging.getLogger("pymem")

AGENT_HEADING = "Facts that hold for everyone using agent {agent}:"
USER_HEADING = "Facts about the user you are talking to:"
SUMMARY_HEADING = "Summary of the earlier conversation:"
RECALL_HEADING = "Earlier messages that may be relevant:"
#: How many messages without a vector one context read lists (and then embeds): the SQL default.
MAX_UNEMBEDDED = 100


@dataclass(frozen=True)
class Context:
    """What one context read found, and the chat messages built from it. ``blocks``: each
    block's output in order (what it put into ``messages``, what the budget cut, a failing
    block's error); the other fields are what the built-in blocks put into ``messages``."""

    messages: list[dict[str, str]]
    agent_facts: list[str] = field(default_factory=list)
    user_facts: list[str] = field(default_factory=list)
    summary: str | None = None
    recalled: list[Message] = field(default_factory=list)
    window: list[Message] = field(default_factory=list)
    deduped: int = 0
    user_resolved: bool = True
    blocks: list[BlockOutput] = field(default_factory=list)
    #: the query's vector the read embedded (None when it embedded none): a turn stores it with
    #: the user's message when the embedder has one side (no ``embed_query``), instead of
    #: embedding the same text again
    query_vector: Any = field(default=None, repr=False, compare=False)

    def block(self, name: str) -> BlockOutput | None:
        """The output of the block named ``name`` (the first one of that name), or None."""
        return next((b for b in self.blocks if b.name == name), None)

    @property
    def trimmed(self) -> dict[str, list[str]]:
        """What the budget cut, by block name (empty when nothing was cut)."""
        return {b.name: b.trimmed for b in self.blocks if b.trimmed}


def _bullets(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def _when(ts: Any) -> str:
    if isinstance(ts, str):
        return ts[:10]
    if isinstance(ts, datetime):
        return ts.date().isoformat()
    return ""


def _system(content: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": content}]


def _builtin(name: str, o: MemoryOptions, data: dict[str, Any], thread: str) -> Part:
    """The part of a built-in block, from context_read's answer ``data``."""
    if name == "system":
        return Part(name, "pin", [o.system_prompt] if o.system_prompt else [], lambda items: _system(items[0]))
    if name == "agent_facts":
        heading = AGENT_HEADING.format(agent=o.agent_id)
        return Part(name, name, [f["content"] for f in data["agent_facts"]],
                    lambda items: _system(heading + "\n" + _bullets(items)))
    if name == "user_facts":
        return Part(name, name, [f["content"] for f in data["user_facts"]],
                    lambda items: _system(USER_HEADING + "\n" + _bullets(items)))
    if name == "summary":
        return Part(name, name, [data["summary"]] if data["summary"] else [],
                    lambda items: _system(SUMMARY_HEADING + "\n" + items[0]))
    if name == "recall":
        return Part(name, name, [_message(r) for r in data["recalled"]], lambda items: _system(
            RECALL_HEADING + "\n" + "\n".join(f"- ({m.role}, {_when(m.created_at)}) {m.content}" for m in items)))
    return Part(name, name, [_message(w, thread) for w in data["window"]],
                lambda items: [m.as_chat() for m in items])


def _custom(block: Any, name: str, rendered: Any) -> Part:
    """The part of a custom block that rendered ``rendered`` (a string or None)."""
    if rendered is not None and not isinstance(rendered, str):
        raise ValidationError(f"render returned a {type(rendered).__name__}, not a string or None")
    kind = "pin" if getattr(block, "pinned", False) else "custom"
    return Part(name, kind, [rendered] if rendered and rendered.strip() else [],
                lambda items: _system(items[0]))


def _not_awaited(reply: Any, what: str) -> Any:
    if inspect.isawaitable(reply):  # an async block driven by the sync runner
        getattr(reply, "close", lambda: None)()
        raise ValidationError(f"{what} is async: use pymem.AsyncMemory for async blocks")
    return reply


def read_for(o: MemoryOptions, user_id: str | None, thread: str | None, query: str, embedding: Any = None,
             filters: Any = None, owner: Any = None) -> Operation[Context]:
    """The context of ``query`` for ``user_id`` (resolved: None reads the agent's facts only);
    ``owner``: the Memory, whose ``db`` a custom block's `pymem.blocks.Upstream` gets."""
    order = o.blocks if o.blocks is not None else DEFAULT_BLOCKS
    text(query, "query")
    uid = text(user_id, "user id", allow_none=True)
    thread_id = text(thread if thread is not None else o.thread, "thread")
    r, query_text = o.recall, query if user_id is not None else None
    f, valid_at = recall_filters(filters), timestamp((filters or {}).get("valid_at"), "valid_at")
    time_from, time_to = time_params(query_text, f.as_of, r.time_weight)
    k = r.k if "recall" in order else 0  # not shown: not ranked, and the query needs no vector
    qvec, embedder = None, None
    if user_id is not None and (o.embedder is not None or embedding is not None) and k > 0:
        (qvec,) = yield Embed([query], None if embedding is None else [embedding], query=True)
        embedder = o.embedder_name

    def read() -> Query:
        return calls.context_read(
            user_id=uid, agent_id=o.agent_id, project_id=o.project_id, thread_id=thread_id, query_vector=qvec,
            embedder=embedder, max_facts=o.max_facts, window_size=o.window, k=k,
            min_content_chars=r.min_content_chars, recency_weight=r.recency_weight,
            importance_weight=r.importance_weight, half_life_seconds=r.half_life_seconds, min_score=r.min_score,
            lexical_weight=r.lexical_weight, next_turn_weight=r.next_turn_weight, time_weight=r.time_weight,
            dedupe=o.dedupe, max_unembedded=MAX_UNEMBEDDED, query_text=query_text, as_of=f.as_of, since=f.since,
            until=f.until, metadata=f.metadata, valid_at=valid_at, time_from=time_from, time_to=time_to)

    rows = yield read()
    data = rows[0]["context"]
    if data["unembedded"]:
        yield from catch_up(o, user_id, data["unembedded"])
        rows = yield read()
        data = rows[0]["context"]
    parts: list[Part] = []
    deduped = data["deduped"]
    for entry, name in zip(order, unique_names(order)):
        if isinstance(entry, str):
            part = _builtin(entry, o, data, thread_id)
            if entry == "recall" and o.dedupe:  # against the custom blocks above (the built-ins: in SQL)
                above = Upstream(query, user_id, thread_id, o.agent_id, o.project_id, None,
                                 tuple(output(p) for p in parts if p.name not in DEFAULT_BLOCKS))
                kept = [m for m in part.items if not above.contains(m.content)]
                deduped += len(part.items) - len(kept)
                part.items = kept
            parts.append(part)
            continue
        upstream = Upstream(query, user_id, thread_id, o.agent_id, o.project_id,
                            getattr(owner, "db", None), tuple(output(p) for p in parts))
        try:
            rendered = yield Callback(entry.render, (query, upstream))
            parts.append(_custom(entry, name, _not_awaited(rendered, f"block {name!r}")))
        except Exception as exc:
            log.warning("context block %r failed and is left out: %s: %s", name, type(exc).__name__, exc)
            parts.append(Part(name, "custom", [], lambda items: _system(items[0]),
                              error=f"{type(exc).__name__}: {exc}"))
    limits: list[Limit] = []
    if o.max_context_chars is not None:
        limits.append((o.max_context_chars, len, "max_context_chars"))
    if o.max_context_tokens is not None and o.token_counter is not None:  # MemoryOptions pairs them
        limits.append((o.max_context_tokens, o.token_counter, "max_context_tokens"))
    fit(parts, query, limits)
    messages = [m for p in parts for m in p.messages()] + [{"role": "user", "content": query}]
    found = {p.name: p.items for p in parts if p.name in DEFAULT_BLOCKS}
    summary = found.get("summary")
    return Context(messages, found.get("agent_facts", []), found.get("user_facts", []),
                   summary[0] if summary else None, found.get("recall", []), found.get("window", []), deduped,
                   user_id is not None, [output(p) for p in parts], qvec if embedding is None else None)


def recorded(o: MemoryOptions, user_id: str, thread: str | None, query: str, answer: str, *args: Any,
             **kw: Any) -> Operation[TurnResult]:
    """Record a turn (`pymem.conversations.record_turn`), then tell the custom blocks that have ``on_message``
    about its two messages; a block that fails is logged, the turn stays recorded."""
    result = yield from record_turn(o, user_id, thread, query, answer, *args, **kw)
    listeners = [b for b in o.blocks or () if callable(getattr(b, "on_message", None))]
    if listeners:
        where = thread if thread is not None else o.thread
        said = [Message("user", query, result.user_seq, where), Message("assistant", answer, result.assistant_seq,
                                                                        where)]
        for block in listeners:
            for message in said:
                try:
                    _not_awaited((yield Callback(block.on_message, (message, user_id))),
                                 f"on_message of block {block_name(block)!r}")
                except Exception as exc:
                    log.warning("on_message of context block %r failed: %s: %s", block_name(block),
                                type(exc).__name__, exc)
    return result


# -- the operations of Memory's context calls (pymem.memory.OPERATIONS) -----------------------------
def read(o: MemoryOptions, query: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
         embedding: VectorLike | None = None, as_of: datetime | None = None, since: datetime | None = None,
         until: datetime | None = None, metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
         owner: Any = None) -> Operation[Context]:
    """Everything one turn reads, and the chat messages built from it (see pymem.context).
    ``embedding``: the query's vector from the Memory's embedder (the embedder is not called).
    ``as_of``, ``since``, ``until``, ``metadata``: the recall filters of `recall`;
    ``as_of`` also reads the facts as they were believed then, and ``valid_at`` the facts that
    held then (a context for a point in time: docs/sql.md "Valid time")."""
    filters = {"as_of": as_of, "since": since, "until": until, "metadata": metadata, "valid_at": valid_at}
    return (yield from read_for(o, resolve_user(o, user, ctx), thread, query, embedding, filters, owner))


def context(o: MemoryOptions, query: str, *, user: str | None = UNSET, ctx: Any = None, thread: str | None = None,
            embedding: VectorLike | None = None, as_of: datetime | None = None, since: datetime | None = None,
            until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
            valid_at: datetime | None = None, owner: Any = None) -> Operation[list[dict[str, str]]]:
    """The messages to send to a chat model for ``query``."""
    return (yield from read(o, query, user=user, ctx=ctx, thread=thread, embedding=embedding, as_of=as_of,
                            since=since, until=until, metadata=metadata, valid_at=valid_at, owner=owner)).messages


def record(o: MemoryOptions, query: str, answer: str, *, user: str | None = UNSET, ctx: Any = None,
           thread: str | None = None, importance: float = 1.0, answer_importance: float = 1.0,
           metadata: Mapping[str, Any] | None = None, answer_metadata: Mapping[str, Any] | None = None,
           created_at: datetime | None = None,
           embeddings: Sequence[VectorLike] | None = None) -> Operation[TurnResult | None]:
    """Store one successful turn; None (nothing stored) when the user is unresolved.
    ``metadata`` / ``answer_metadata``: stored with the user's message / the answer;
    ``created_at``: the turn's time when importing one (timezone-aware; default now);
    ``embeddings``: the two messages' vectors from the Memory's embedder."""
    user_id = resolve_user(o, user, ctx)
    if user_id is None:
        return None
    return (yield from recorded(o, user_id, thread, query, answer, importance, answer_importance, metadata,
                                answer_metadata, created_at, embeddings))
