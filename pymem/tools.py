"""Memory the agent manages itself (docs/python.md "Tools: memory the agent edits"): OpenAI-style
function-calling definitions for ``remember``, ``update_memory``, ``forget_memory`` and
``search_memory``, and a dispatcher that runs a model's tool call against a
`pymem.Memory` for one user.

The user is fixed when the dispatcher is made (``MemoryTools(mem, user=...)`` or ``ctx=``,
resolved as every Memory call resolves it) and never taken from the model: the tools' schemas
have no user, tier, project or agent argument, and a call carrying any argument its schema does
not list is refused. So a tool call can only read and change that user's own facts: a fact id
of another user (or of the agent's global facts) is not found in this user's subject by the SQL
that runs it. Facts the agent writes are ``source="learned"``, so the Memory's
``max_learned_facts`` cap bounds them; ``forget_memory`` deletes one fact (and its history),
never a whole subject.

A call the model got wrong (unknown tool, arguments that are not a JSON object or do not fit
the schema, a fact id not among the user's facts, a fact already superseded) comes back as a
result ``{"ok": false, "error": ...}`` for the model to read; errors that are not the model's
(the database unreachable, a statement timeout) propagate to the application.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic import ValidationError as SchemaError

from .errors import ConflictError, NotFoundError, ValidationError
from .memory import AsyncMemory, Memory

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000, pattern=r"^[^\x00]*$")]
_Id = Annotated[int, Field(ge=1, le=2**63 - 1)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Remember(_Args):
    fact: _Text


class _Update(_Args):
    fact_id: _Id
    fact: _Text


class _Forget(_Args):
    fact_id: _Id


class _Search(_Args):
    query: _Text
    k: Annotated[int, Field(ge=1, le=20)] = 5


_TOOLS: dict[str, tuple[type[_Args], str]] = {
    "remember": (_Remember, "Store a durable fact about the user you are talking to (one short sentence, e.g. "
                            "'Prefers answers in French'), for later conversations. Returns its fact_id."),
    "update_memory": (_Update, "Replace one of the user's stored facts (by the fact_id search_memory returned) with "
                               "corrected or newer text; the old version stays in its history."),
    "forget_memory": (_Forget, "Delete one of the user's stored facts (by its fact_id), e.g. when the user asks "
                               "you to forget it."),
    "search_memory": (_Search, "Find the stored facts about the user most relevant to a query; returns each "
                               "fact with its fact_id."),
}


def _schema(model: type[_Args]) -> dict[str, Any]:
    schema = model.model_json_schema()
    props = {name: {k: v for k, v in p.items() if k != "title"} for name, p in schema["properties"].items()}
    for p in props.values():
        p.pop("pattern", None)  # the NUL check stays ours; models need not see it
    return {"type": "object", "properties": props, "required": schema.get("required", []),
            "additionalProperties": False}


#: The tools in OpenAI's function-calling format: pass as ``tools=`` of a chat completion.
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": name, "description": description, "parameters": _schema(model)}}
    for name, (model, description) in _TOOLS.items()
]
NAMES = frozenset(_TOOLS)


def _parse(name: Any, arguments: Any, tools: Mapping[str, tuple[type[_Args], str]] = _TOOLS) -> _Args:
    """The call's arguments checked against its tool's schema (of ``tools``: these tools, or
    the MCP server's, which adds its own); ValidationError naming what is wrong."""
    if not isinstance(name, str) or name not in tools:
        raise ValidationError(f"no memory tool {str(name)[:80]!r}; the tools are {', '.join(sorted(tools))}")
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError as exc:
            raise ValidationError(f"{name}: the arguments are not JSON ({exc})") from None
    if not isinstance(arguments, Mapping):
        raise ValidationError(f"{name}: the arguments must be a JSON object, not {type(arguments).__name__}")
    try:
        return tools[name][0].model_validate(dict(arguments))
    except SchemaError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
        raise ValidationError(f"{name}: {problems[:500]}") from None


def _call_parts(tool_call: Any) -> tuple[Any, Any, Any]:
    """(id, name, arguments) of an OpenAI tool call: a dict or the openai package's object."""
    if isinstance(tool_call, Mapping):
        function = tool_call.get("function") or {}
        return tool_call.get("id"), function.get("name"), function.get("arguments")
    function = getattr(tool_call, "function", None)
    return getattr(tool_call, "id", None), getattr(function, "name", None), getattr(function, "arguments", None)


class _Dispatch:
    """What MemoryTools and AsyncMemoryTools share: the user, and each call as (method, kwargs, result)."""

    tools = TOOLS

    def __init__(self, memory: Memory | AsyncMemory, *, user: str | None = None, ctx: Any = None) -> None:
        resolved = memory.resolve_user(ctx=ctx) if user is None else memory.resolve_user(user)
        if resolved is None:
            raise ValidationError("memory tools need a user: MemoryTools(mem, user=...) or ctx= for Memory(user_id=...)")
        self.memory = memory
        self.user = resolved

    def _plan(self, name: Any, arguments: Any) -> tuple[str, dict[str, Any], Any]:
        args = _parse(name, arguments)
        mine = {"user": self.user, "tier": "user"}
        if isinstance(args, _Remember):
            return "persist", {"content": args.fact, **mine, "source": "learned", "metadata": {"via": "tool"}}, (
                lambda fid: {"ok": True, "fact_id": int(fid), "created": fid.created})
        if isinstance(args, _Update):
            return "update", {"new": args.fact, "fact_id": args.fact_id, **mine, "source": "learned",
                              "metadata": {"via": "tool"}}, (
                lambda fid: {"ok": True, "fact_id": int(fid), "replaced": args.fact_id})
        if isinstance(args, _Forget):
            def forgot(n: int) -> dict[str, Any]:
                if n == 0:
                    return {"ok": False, "error": f"no fact {args.fact_id} among this user's facts"}
                return {"ok": True, "deleted": n}
            return "forget", {"fact_id": args.fact_id, **mine}, forgot
        assert isinstance(args, _Search)
        return "retrieve", {"query": args.query, "k": args.k, **mine}, (
            lambda found: {"ok": True, "facts": [{"fact_id": f.id, "fact": f.content} for f in found]})

    @staticmethod
    def _failed(exc: Exception) -> dict[str, Any]:
        return {"ok": False, "error": str(exc)[:500]}

    @staticmethod
    def _message(call_id: Any, result: dict[str, Any]) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result, ensure_ascii=False)}


#: errors that are the model's doing: returned to it as a result
_MODEL_ERRORS = (ValidationError, NotFoundError, ConflictError)


class MemoryTools(_Dispatch):
    """The memory tools of one user of a `pymem.Memory`.

    >>> tools = MemoryTools(mem, user="alice")
    >>> reply = client.chat.completions.create(model=..., messages=..., tools=tools.tools)
    >>> messages += [tools.dispatch(call) for call in reply.choices[0].message.tool_calls or []]
    """

    def __init__(self, memory: Memory, *, user: str | None = None, ctx: Any = None) -> None:
        super().__init__(memory, user=user, ctx=ctx)

    def call(self, name: str, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """Run tool ``name`` with ``arguments`` (the JSON text the model sent, or a mapping);
        returns the result, ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``."""
        try:
            method, kwargs, result = self._plan(name, arguments)
            return result(getattr(self.memory, method)(**kwargs))
        except _MODEL_ERRORS as exc:
            return self._failed(exc)

    def dispatch(self, tool_call: Any) -> dict[str, Any]:
        """Run an OpenAI tool call (``{"id", "function": {"name", "arguments"}}`` or the openai
        package's object) and return the ``{"role": "tool", ...}`` message answering it."""
        call_id, name, arguments = _call_parts(tool_call)
        return self._message(call_id, self.call(name, arguments))


class AsyncMemoryTools(_Dispatch):
    """The asyncio twin of `MemoryTools`, over a `pymem.AsyncMemory`."""

    def __init__(self, memory: AsyncMemory, *, user: str | None = None, ctx: Any = None) -> None:
        super().__init__(memory, user=user, ctx=ctx)

    async def call(self, name: str, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
        try:
            method, kwargs, result = self._plan(name, arguments)
            return result(await getattr(self.memory, method)(**kwargs))
        except _MODEL_ERRORS as exc:
            return self._failed(exc)

    async def dispatch(self, tool_call: Any) -> dict[str, Any]:
        call_id, name, arguments = _call_parts(tool_call)
        return self._message(call_id, await self.call(name, arguments))
