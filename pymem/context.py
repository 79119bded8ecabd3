"""The prompt context for one turn, over ``sql/api/context.sql``.

``Memory.context(query, user=...)`` = embed the query (unless its vector is given:
``embedding=``) + one call of ``pymem.context_read``
(facts, summary, recall, window) + the formatting below. Only when the user has messages that
no vector of the current embedder covers yet (written by SQL from another service) does it
embed them in one batch, store them and read again.

The messages come back in this order, as ``{"role", "content"}`` dicts for any chat API:
the system prompt, the agent's facts (the heading names the agent), the user's facts (the
heading never names the user: ids are often e-mail addresses and must not reach the model
provider), the running summary, recalled earlier messages, the window, then the query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .conversations import Message, _message, recall_filters
from .options import MemoryOptions
from .runner import Embed, Operation, Query
from .values import text

AGENT_HEADING = "Facts that hold for everyone using agent {agent}:"
USER_HEADING = "Facts about the user you are talking to:"
SUMMARY_HEADING = "Summary of the earlier conversation:"
RECALL_HEADING = "Earlier messages that may be relevant:"
#: How many messages without a vector one context read lists (and then embeds): the SQL default.
MAX_UNEMBEDDED = 100


@dataclass(frozen=True)
class Context:
    """What one context read found, and the chat messages built from it."""

    messages: list[dict[str, str]]
    agent_facts: list[str] = field(default_factory=list)
    user_facts: list[str] = field(default_factory=list)
    summary: str | None = None
    recalled: list[Message] = field(default_factory=list)
    window: list[Message] = field(default_factory=list)
    deduped: int = 0
    user_resolved: bool = True


def _bullets(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def _when(ts: Any) -> str:
    if isinstance(ts, str):
        return ts[:10]
    if isinstance(ts, datetime):
        return ts.date().isoformat()
    return ""


def build_messages(
    *,
    system_prompt: str | None,
    agent_id: str | None,
    agent_facts: list[str],
    user_facts: list[str],
    summary: str | None,
    recalled: list[Message],
    window: list[Message],
    query: str,
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    if agent_facts:
        out.append({"role": "system", "content": AGENT_HEADING.format(agent=agent_id) + "\n" + _bullets(agent_facts)})
    if user_facts:
        out.append({"role": "system", "content": USER_HEADING + "\n" + _bullets(user_facts)})
    if summary:
        out.append({"role": "system", "content": SUMMARY_HEADING + "\n" + summary})
    if recalled:
        lines = [f"- ({m.role}, {_when(m.created_at)}) {m.content}" for m in recalled]
        out.append({"role": "system", "content": RECALL_HEADING + "\n" + "\n".join(lines)})
    out.extend(m.as_chat() for m in window)
    out.append({"role": "user", "content": query})
    return out


class _Context:
    options: MemoryOptions  # set by pymem.memory.MemoryBase

    def _read(self, user_id: str | None, thread: str | None, query: str, embedding: Any = None,
              filters: Any = None) -> Operation[Context]:
        o = self.options
        text(query, "query")
        params: dict[str, Any] = {
            "user_id": text(user_id, "user id", allow_none=True),
            "agent_id": o.agent_id,
            "project_id": o.project_id,
            "thread_id": text(thread if thread is not None else o.thread, "thread"),
            "query": None,
            "embedder": None,
            "max_facts": o.max_facts,
            "window_size": o.window,
            **o.recall.params(),
            "dedupe": o.dedupe,
            "max_unembedded": MAX_UNEMBEDDED,
            "query_text": query if user_id is not None else None,
            **recall_filters(filters),
        }
        if user_id is not None and (o.embedder is not None or embedding is not None) and o.recall.k > 0:
            (qvec,) = yield Embed([query], None if embedding is None else [embedding])
            params |= {"query": qvec, "embedder": o.embedder.name}
        rows = yield Query("context_read", params)
        data = rows[0]["context"]
        if data["unembedded"]:
            yield from self._catch_up(user_id, data["unembedded"])  # type: ignore[attr-defined]
            rows = yield Query("context_read", params)
            data = rows[0]["context"]
        agent_facts = [f["content"] for f in data["agent_facts"]]
        user_facts = [f["content"] for f in data["user_facts"]]
        recalled = [_message(r) for r in data["recalled"]]
        window = [_message(w, params["thread_id"]) for w in data["window"]]
        messages = build_messages(
            system_prompt=o.system_prompt,
            agent_id=o.agent_id,
            agent_facts=agent_facts,
            user_facts=user_facts,
            summary=data["summary"],
            recalled=recalled,
            window=window,
            query=query,
        )
        return Context(messages, agent_facts, user_facts, data["summary"], recalled, window, data["deduped"],
                       user_id is not None)
