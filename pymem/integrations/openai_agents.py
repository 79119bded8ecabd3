"""The OpenAI Agents SDK's session on pymem: ``PymemSession``, its ``Session`` protocol.

    from agents import Agent, Runner
    from pymem.integrations.openai_agents import PymemSession
    session = PymemSession("chat-42", user="alice", memory=pymem.AsyncMemory(agent_id="bot"))
    result = await Runner.run(agent, "Where do I live?", session=session)

Mapping: a session is one of pymem's own conversations, the thread ``session_id`` of the user
``user`` (in the memory's project), so what pymem does with a conversation covers it: recall
(``AsyncMemory.recall``, ``context``), running summaries, retention, the change feed, erasure
(``forget_user``) and the memory page. Each item of the session is one message:

* its role: a message's own (``user``, ``assistant``, ``system``; ``developer`` is stored as
  ``system``); a tool's output (``function_call_output`` and the other ``*_output`` items) is
  ``tool``; any other item (a function call, reasoning, a web search, ...) is ``assistant``;
* its content: the item's text, which recall searches (a message's text parts; a function
  call's ``name(arguments)``; a tool's output; an item without text: its type in brackets), the
  memory's embedder embedding it as it is added;
* the item itself, as the JSON text the SDK would store (``openai_agents_item`` in the message's
  metadata), so ``get_items`` returns every item exactly as it was added, whatever its type.

A message of the thread written another way (``AsyncMemory.record``, ``add_message``, SQL) is
read back as ``{"role": ..., "content": ...}`` (``tool`` as ``assistant``), so a conversation
pymem recorded can be continued by an agent of the SDK.

``pop_item`` deletes the newest message (``pymem.message_pop``); the next item takes its number.
``clear_session`` forgets the thread (``conversation_forget``: its messages, vectors and summary).
``get_items()`` without a limit reads the whole thread, 10,000 messages a call.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from ..errors import ValidationError
from ..memory import AsyncMemory
from ..runner import Operation
from ..types import Message
from .. import calls
from ..conversations import pop_message, where_of

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

__all__ = ["PymemSession"]

#: the metadata key holding an item's JSON text
ITEM_KEY = "openai_agents_item"
_PAGE = 10_000  # the largest page pymem returns (_check_limit)
_MAX_CHARS = 262_144  # a message's content at most (messages_content_check)
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _parts(content: Any) -> str:
    """The text of a message's content: a string, or its parts' text (an image or a file: its type)."""
    if isinstance(content, str):
        return content
    texts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict):
            text = part.get("text", part.get("refusal"))
            texts.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
    return "\n".join(texts)


def _message_of(item: Any) -> dict[str, Any]:
    """The pymem message that stores one item (module docstring)."""
    if not isinstance(item, dict):
        item = dict(item)  # a TypedDict is a dict; a Mapping is taken as one
    raw = json.dumps(item, ensure_ascii=False)  # what SQLiteSession stores: TypeError if not JSON
    kind = item.get("type")
    if kind in (None, "message") and item.get("role") in _ROLES:
        role, text = _ROLES[item["role"]], _parts(item.get("content"))
    elif kind == "function_call":
        role, text = "assistant", f"{item.get('name', '')}({item.get('arguments', '')})"
    elif isinstance(kind, str) and kind.endswith("_output"):
        output = item.get("output")
        role, text = "tool", output if isinstance(output, str) else _parts(output)
    else:
        role, text = "assistant", _parts(item.get("content") or item.get("summary"))
    text = text.replace("\x00", "").strip() or f"[{kind or 'item'}]"
    return {"role": role, "content": text[:_MAX_CHARS], "metadata": {ITEM_KEY: raw}}


def _item_of(message: Message) -> TResponseInputItem:
    """The item a stored message holds; a message written another way as an easy input message."""
    raw = message.metadata.get(ITEM_KEY)
    if isinstance(raw, str):
        return cast("TResponseInputItem", json.loads(raw))
    role = message.role if message.role in ("user", "assistant", "system") else "assistant"
    item: dict[str, Any] = {"role": role, "content": message.content}
    return cast("TResponseInputItem", item)


class PymemSession:
    """The Agents SDK's ``Session`` kept in pymem (module docstring): the thread ``session_id``
    of ``user``. ``memory``: a ``pymem.AsyncMemory`` (its project, embedder and database; left
    open for its owner); none: one of the settings (``PYMEM_DSN``, or the embedded server), closed
    by ``close()``. ``session_settings``: the SDK's ``SessionSettings`` (its ``limit`` is the
    default of ``get_items``)."""

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, *, user: str, memory: AsyncMemory | None = None,
                 session_settings: SessionSettings | None = None) -> None:
        if not isinstance(session_id, str) or session_id.strip() in ("", "*"):
            raise ValidationError(f"session_id must be a non-empty string other than '*', not {session_id!r}")
        if not isinstance(user, str) or user.strip() in ("", "*"):
            raise ValidationError(f"user must be a user's id, not {user!r}")
        self.session_id = session_id
        self.user = user
        self._own_memory = memory is None
        self.memory = memory if memory is not None else AsyncMemory()
        self.session_settings = session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: the newest ``limit`` (default: the session
        settings' limit; none: every item)."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and 0 <= limit <= _PAGE:
            if limit == 0:
                return []
            messages = await self.memory.window(user=self.user, thread=self.session_id, size=limit)
        else:
            messages = await self.memory._run(self._all())
            if limit is not None and limit > 0:
                messages = messages[-limit:]
        return [_item_of(m) for m in messages]

    def _all(self) -> Operation[list[Message]]:
        """Every message of the thread, oldest first, a page at a time."""
        where = where_of(self.memory.options, self.user, self.session_id)
        found: list[Message] = []
        after = 0
        while True:
            rows = yield calls.browse_messages(user_id=where.user_id, thread_id=where.thread_id,
                                                project_id=where.project_id, from_seq=after + 1, max_rows=_PAGE)
            found += [Message(r["role"], r["content"], r["seq"], self.session_id, r["created_at"],
                              metadata=r["metadata"] or {}) for r in rows]
            if len(rows) < _PAGE:
                return found
            after = rows[-1]["seq"]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the session, in one call (all or nothing)."""
        messages = [_message_of(item) for item in items]
        if messages:
            await self.memory.add_messages(messages, user=self.user, thread=self.session_id)

    async def pop_item(self) -> TResponseInputItem | None:
        """Delete the newest item and return it (None: the session is empty)."""
        message = await self.memory._run(pop_message(self.memory.options, self.user, self.session_id))
        return None if message is None else _item_of(message)

    async def clear_session(self) -> None:
        """Delete every item of the session (the thread, its vectors and its summary)."""
        await self.memory.forget_conversation(user=self.user, thread=self.session_id)

    async def close(self) -> None:
        """Close the memory this session opened (one it was given stays open)."""
        if self._own_memory:
            await self.memory.aclose()
