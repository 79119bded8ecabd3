"""Context blocks: the parts of one turn's context, in a declared order, and the size budget.

A Memory's ``blocks=`` lists the parts of every context it builds, top to bottom (the query
always comes last). An entry is either the name of a built-in block or a block object:

* built-ins (`BUILTIN`): ``"system"`` (the system prompt), ``"agent_facts"``,
  ``"user_facts"``, ``"summary"``, ``"recall"``, ``"window"``. All the built-ins a context
  lists are read by one call of ``pymem.context_read``, whatever their order; the default,
  `DEFAULT_BLOCKS`, is the order pymem always had.
* `StaticBlock` (``StaticBlock("Today is 2026-11-30.")``): a pinned line, the same on
  every turn.
* any object following the `Block` protocol (sync or async ``render``).

A custom block's ``render(query, upstream)`` runs after the SQL call, in its place in the order,
and sees in ``upstream`` (`Upstream`) what the blocks above it produced;
``upstream.contains(text)`` tells whether a text already appears there, normalised as
``pymem._norm`` does for recall's dedupe (case and whitespace folded). ``on_message(message,
user)``, when a block has it, runs for the user's message and for the answer after a turn was
recorded. A block that raises (or returns something other than a string or None) is logged and
left out: it never breaks the turn.

Budget (``Memory(max_context_chars=..., max_context_tokens=..., token_counter=...)``): the sum
of the messages' sizes (characters, or ``token_counter(content)`` per message) is kept within
the limit by cutting, one item at a time, in `TRIM_ORDER`: recalled messages (lowest
score first), window messages (oldest first), custom blocks that are not pinned (whole, the
last one in the order first), the summary, the user's facts, then the agent's facts (each from
the end of its list: the oldest, or the least relevant when ranked). Pinned blocks (the system
prompt, `StaticBlock`, a custom block with ``pinned = True``) and the query are never cut;
when they alone exceed the budget the read raises `pymem.ValidationError`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .errors import ValidationError

#: The built-in blocks, by name; all of them come from one ``pymem.context_read`` call.
BUILTIN = ("system", "agent_facts", "user_facts", "summary", "recall", "window")
#: The order of a Memory's context when ``blocks=`` is not given.
DEFAULT_BLOCKS: tuple[str, ...] = BUILTIN
#: What the budget cuts first ("custom": a custom block that is not pinned). Never cut:
#: "system", StaticBlock and pinned custom blocks, and the query.
TRIM_ORDER = ("recall", "window", "custom", "summary", "user_facts", "agent_facts")

# pymem._norm's whitespace class (sql/api/context.sql)
_SPACE = re.compile("[\t\n\r\f\v\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]")


def norm(content: str) -> str:
    """``content`` normalised as ``pymem._norm`` does it for recall's dedupe: the whitespace
    characters it knows become spaces, runs of spaces become one, letters are lower-cased and
    the ends trimmed. (Letters outside ASCII are lower-cased by Python's rules; the database's
    by its locale.)"""
    return re.sub("  +", " ", _SPACE.sub(" ", content)).lower().strip(" ")


@dataclass(frozen=True)
class BlockOutput:
    """What one block put into a context: its chat ``messages``, the ``items`` they show (facts,
    message contents, a custom block's text), what the budget cut from it (``trimmed``), and
    ``error`` when the block failed and was left out."""

    name: str
    messages: list[dict[str, str]] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    trimmed: list[str] = field(default_factory=list)
    pinned: bool = False
    error: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


@dataclass(frozen=True)
class Upstream:
    """What a custom block's ``render`` sees: the turn (``query``, ``user`` (None for an
    unresolved caller), ``thread``, ``agent_id``, ``project_id``), the Memory's database
    (``db``: a `pymem.Database` under Memory, a `pymem.AsyncDatabase` under
    AsyncMemory: ``with upstream.db.connection() as conn`` reads any table of the same database),
    and the ``blocks`` above it, as they rendered (before the budget)."""

    query: str
    user: str | None
    thread: str
    agent_id: str | None
    project_id: str
    db: Any
    blocks: tuple[BlockOutput, ...] = ()

    @property
    def text(self) -> str:
        """Everything the blocks above put into the context, one message a line."""
        return "\n".join(b.text for b in self.blocks if b.messages)

    def contains(self, text: str) -> bool:
        """Whether ``text`` already appears above, normalised as recall's dedupe does (the test
        a custom block uses to skip what an earlier block says)."""
        return norm(text) in norm(self.text)

    def block(self, name: str) -> BlockOutput | None:
        return next((b for b in self.blocks if b.name == name), None)


@runtime_checkable
class Block(Protocol):
    """A custom context block. Only ``render`` is required; either method may be ``async def``
    (under a sync Memory an async block fails and is left out; under AsyncMemory a sync one runs
    in a worker thread).

    * ``name``: how `pymem.Context` (``ctx.block(name)``) shows its output (default: the
      class name; a second block of the same name shows as ``name#2``);
    * ``pinned``: True keeps it out of the budget's cuts (default False);
    * ``render(query, upstream) -> str | None``: its text, one system message (None or "" adds
      nothing);
    * ``on_message(message, user) -> None``: called after a recorded turn, once with the user's
      message and once with the answer (`pymem.conversations.Message`, with its thread and
      seq)."""

    def render(self, query: str, upstream: Upstream) -> str | None | Awaitable[str | None]: ...


class StaticBlock:
    """A pinned text, the same on every turn (``StaticBlock("Today is 2026-11-30.")``): one
    system message, never cut by the budget."""

    pinned = True

    def __init__(self, text: str, *, name: str = "static") -> None:
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("StaticBlock needs a non-empty text")
        self.text = text
        self.name = name

    def render(self, query: str, upstream: Upstream) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"StaticBlock({self.text!r})"


def block_name(block: Any) -> str:
    return block if isinstance(block, str) else (getattr(block, "name", None) or type(block).__name__)


def unique_names(blocks: Sequence[Any]) -> list[str]:
    """Each block's name in a context: its ``name`` (or class name), with ``#2``, ``#3``... for
    the second and later blocks of the same name (two ``StaticBlock``s: "static", "static#2")."""
    seen: dict[str, int] = {}
    out = []
    for block in blocks:
        name = block_name(block)
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def check_blocks(blocks: Sequence[Any]) -> tuple[Any, ...]:
    """``blocks=`` as the tuple a MemoryOptions keeps: built-in names (each at most once) and
    block objects (with a callable ``render``, not named like a built-in)."""
    if isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence):
        raise ValidationError("blocks must be a list of built-in block names and block objects")
    seen: set[str] = set()
    for entry in blocks:
        if isinstance(entry, str):
            if entry not in BUILTIN:
                raise ValidationError(f"unknown built-in block {entry!r}: the built-ins are {', '.join(BUILTIN)}")
            if entry in seen:
                raise ValidationError(f"the built-in block {entry!r} is listed twice")
            seen.add(entry)
        elif not callable(getattr(entry, "render", None)):
            raise ValidationError(f"a block must be a built-in name or have render(query, upstream): {entry!r}")
        elif block_name(entry) in BUILTIN:
            raise ValidationError(f"a custom block may not be named like the built-in {block_name(entry)!r}")
    return tuple(blocks)


# -- the budget ------------------------------------------------------------------------------

@dataclass
class Part:
    """One block while a context is assembled: its ``kind`` (a built-in name, "custom" or
    "pin"), its ``items`` (strings, or messages for recall and window) and how they render."""

    name: str
    kind: str
    items: list[Any]
    render: Callable[[list[Any]], list[dict[str, str]]]
    trimmed: list[Any] = field(default_factory=list)
    error: str | None = None

    def messages(self) -> list[dict[str, str]]:
        return self.render(self.items) if self.items else []


def _content(item: Any) -> str:
    return item if isinstance(item, str) else item.content


def output(part: Part) -> BlockOutput:
    return BlockOutput(part.name, part.messages(), [_content(i) for i in part.items],
                       [_content(i) for i in part.trimmed], part.kind == "pin", part.error)


def _score(message: Any) -> float:
    s = message.score if message.score is not None else message.similarity
    return s if s is not None else 0.0


def _cut(parts: list[Part]) -> Part | None:
    """Cut the next item in TRIM_ORDER; the part it came from (None: nothing left to cut)."""
    for kind in TRIM_ORDER:
        found = [p for p in parts if p.kind == kind and p.items]
        if not found:
            continue
        if kind == "recall":  # lowest score first; of equal scores the one listed last
            part = found[0]
            i = min(range(len(part.items)), key=lambda j: (_score(part.items[j]), -j))
        elif kind == "window":  # oldest first
            part, i = found[0], 0
        elif kind == "custom":  # whole blocks, the last in the order first
            part, i = found[-1], 0
        else:  # summary, facts: from the end of the list
            part = found[0]
            i = len(part.items) - 1
        part.trimmed.append(part.items.pop(i))
        return part
    return None


Limit = tuple[int, Callable[[str], int], str]  # (the budget, size of one message's content, its keyword)


def fit(parts: list[Part], query: str, limits: Sequence[Limit]) -> None:
    """Cut items of ``parts`` (in place, in TRIM_ORDER) until the context (every part's
    messages and the query) is within every limit. Raises ValidationError when the parts that
    are never cut and the query alone exceed one."""
    for budget, size, keyword in limits:
        sizes = {id(p): sum(size(m["content"]) for m in p.messages()) for p in parts}
        total = size(query) + sum(sizes.values())
        while total > budget:
            part = _cut(parts)
            if part is None:
                raise ValidationError(
                    f"the context's pinned blocks (system prompt, StaticBlock, pinned blocks) and the query take "
                    f"{total}, more than {keyword}={budget}: raise {keyword} or shorten them"
                )
            new = sum(size(m["content"]) for m in part.messages())
            total += new - sizes[id(part)]
            sizes[id(part)] = new
