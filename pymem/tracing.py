"""OpenTelemetry spans for pymem (the optional extra ``otel``: ``pip install '.[otel]'`` from a clone).

Every public call of `pymem.Memory` / `pymem.AsyncMemory` (``memory.context``,
``memory.read``, ``memory.record``, ``memory.recall``, ``memory.persist``, ...), of a turn (its
read is a ``memory.context`` span, its write a ``memory.record`` span) and of the keyed stores
(``store.read_text``, ``store.write_json``, ...) is one span, under whatever span is current
(an agent's run, a web request). Inside it, one child span per step the call ran:
``pymem.sql <query name>`` for each SQL statement, ``pymem.embed`` for each embedder call,
``pymem.callback`` for user code (a summarizer). Attributes (docs/tracing.md): ``pymem.project``,
``pymem.agent``, the per-part counts of a context read, the recall scores, how many duplicates
were dropped, and the time spent in SQL and in the embedder (``pymem.sql.ms``,
``pymem.embed.ms``, with the counts ``pymem.sql.queries`` / ``pymem.embed.texts``).

Privacy: user ids (often e-mail addresses) and content (queries, messages, facts, store keys
and paths) are never put on a span unless `trace_content` turned that on for the
process. Without opentelemetry-api installed, `instrument` leaves the classes untouched
and `step` is one context-variable read: no spans, no cost. With it installed but no
SDK configured (nothing records), the same holds for the steps.
"""

from __future__ import annotations

import contextlib
import logging
import functools
import inspect
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

try:
    from opentelemetry import trace as _otel
except ImportError:  # the optional extra is not installed: every function below is a no-op
    _otel = None  # type: ignore[assignment]

#: True when opentelemetry-api is importable (spans may be recorded).
AVAILABLE = _otel is not None
_content = False
_log = logging.getLogger("pymem")
_NULL = contextlib.nullcontext()
_tracer = _otel.get_tracer("pymem") if _otel is not None else None


def trace_content(enabled: bool = True) -> None:
    """Put user ids and content on spans from now on (process-wide; off by default): the user
    of a call, its query or fact text, recalled and retrieved texts, store keys and paths."""
    global _content
    _content = bool(enabled)


class _Call:
    """The traced public call in progress: its span and what its steps cost so far."""

    __slots__ = ("span", "name", "parent", "sql_ms", "sql_n", "embed_ms", "embed_n")

    def __init__(self, span: Any, name: str, parent: _Call | None) -> None:
        self.span, self.name, self.parent = span, name, parent
        self.sql_ms = self.embed_ms = 0.0
        self.sql_n = self.embed_n = 0

    def add(self, kind: str, ms: float, n: int) -> None:
        call: _Call | None = self
        while call is not None:  # an outer call (context -> read) counts its inner call's steps too
            if kind == "sql":
                call.sql_ms += ms
                call.sql_n += 1
            elif kind == "embed":
                call.embed_ms += ms
                call.embed_n += n
            call = call.parent

    def totals(self) -> dict[str, Any]:
        return {"pymem.sql.ms": self.sql_ms, "pymem.sql.queries": self.sql_n,
                "pymem.embed.ms": self.embed_ms, "pymem.embed.texts": self.embed_n}


_call: ContextVar[_Call | None] = ContextVar("pymem_traced_call", default=None)


class _Step:
    __slots__ = ("call", "kind", "n", "cm", "t0", "span")

    def __init__(self, call: _Call, kind: str, name: str, n: int, attributes: dict[str, Any]) -> None:
        self.call, self.kind, self.n = call, kind, n
        self.cm = _tracer.start_as_current_span(  # type: ignore[union-attr]
            name, attributes=attributes, record_exception=False, set_status_on_exception=False)

    def __enter__(self) -> None:
        self.span = self.cm.__enter__()
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        self.call.add(self.kind, (time.perf_counter() - self.t0) * 1000.0, self.n)
        _failed(self.span, exc[1])
        self.cm.__exit__(*exc)


def _failed(span: Any, error: BaseException | None) -> None:
    """A failure on a span: its type always, its message only with trace_content (an error's
    message often quotes what failed: a user id, a fact, the text of a reply)."""
    if error is None or not span.is_recording():
        return
    span.set_attribute("error.type", type(error).__qualname__)
    span.set_status(_otel.Status(_otel.StatusCode.ERROR, str(error) if _content else type(error).__qualname__))
    if _content:
        span.record_exception(error)


def step(item: Any) -> Any:
    """A context manager around one step of an operation (`pymem.runner`): a child span of
    the traced call, timed into its totals. Outside a recording traced call: a shared no-op."""
    call = _call.get()
    if call is None:
        return _NULL
    kind = type(item).__name__
    if kind == "Query":
        return _Step(call, "sql", f"pymem.sql {item.name}", 0,
                     {"db.system.name": "postgresql", "db.operation.name": item.name})
    if kind == "Embed":
        if item.given is not None:  # the caller's vectors are only checked
            return _NULL
        return _Step(call, "embed", "pymem.embed", len(item.texts), {"pymem.embed.texts": len(item.texts)})
    return _Step(call, "callback", "pymem.callback", 0, {"code.function.name": getattr(item.fn, "__qualname__", "?")})


# -- what each public call puts on its span ----------------------------------------------------

Describe = Callable[[Any, tuple, dict, Any], Mapping[str, Any]]


def _text_arg(args: tuple, kwargs: dict, name: str) -> str | None:
    value = args[0] if args else kwargs.get(name)
    return value if isinstance(value, str) else None


def _subject(memory: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Attributes of any Memory call: project and agent; the tier; with content on, the user."""
    o = memory.options
    out: dict[str, Any] = {"pymem.project": o.project_id}
    if o.agent_id is not None:
        out["pymem.agent"] = o.agent_id
    if "tier" in kwargs:
        out["pymem.tier"] = kwargs["tier"]
    if _content:
        user = kwargs.get("user", kwargs.get("id"))
        if user is None and isinstance(o.user_id, str):
            user = o.user_id
        if isinstance(user, str):
            out["pymem.user"] = user
    return out


def with_text(name: str, attribute: str = "pymem.query") -> Describe:
    def describe(memory, args, kwargs, result):
        value = _text_arg(args, kwargs, name)
        return {attribute: value} if _content and value is not None else {}
    return describe


def fact_id(memory, args, kwargs, result) -> dict[str, Any]:
    out = {"pymem.fact.id": int(result), "pymem.fact.created": result.created,
           "pymem.deduped": 0 if result.created else 1}
    if _content and args:
        out["pymem.content"] = args[0]
    return out


def facts(memory, args, kwargs, result) -> dict[str, Any]:
    out: dict[str, Any] = {"pymem.facts": len(result)}
    scores = [f.score for f in result if f.score is not None]
    if scores:
        out["pymem.retrieve.scores"] = scores
    query = args[0] if args else kwargs.get("query")
    if query is not None:
        out["pymem.retrieve.by"] = "text" if isinstance(query, str) else "vector"
    if _content:
        out["pymem.facts.contents"] = [f.content for f in result]
        if isinstance(query, str):
            out["pymem.query"] = query
    return out


def _context_parts(result) -> dict[str, Any]:
    out = {"pymem.context.agent_facts": len(result.agent_facts), "pymem.context.user_facts": len(result.user_facts),
           "pymem.context.summary": 0 if result.summary is None else 1, "pymem.context.recalled": len(result.recalled),
           "pymem.context.window": len(result.window), "pymem.context.messages": len(result.messages),
           "pymem.context.deduped": result.deduped, "pymem.deduped": result.deduped,
           "pymem.user_resolved": result.user_resolved}
    scores = [m.score for m in result.recalled if m.score is not None]
    if scores:
        out["pymem.recall.scores"] = scores
    if _content:
        out["pymem.recall.contents"] = [m.content for m in result.recalled]
    out["pymem.context.blocks"] = [b.name for b in result.blocks]
    for b in result.blocks:  # each block's share of the prompt (issue 19); its text only with content on
        key = f"pymem.context.block.{b.name}"
        out[f"{key}.items"] = len(b.items)
        out[f"{key}.chars"] = sum(len(m["content"]) for m in b.messages)
        if b.trimmed:
            out[f"{key}.trimmed"] = len(b.trimmed)
        if b.error:
            out[f"{key}.error"] = b.error if _content else b.error.partition(":")[0]
        if _content:
            out[f"{key}.text"] = b.text
    return out


def read(memory, args, kwargs, result) -> dict[str, Any]:
    out = _context_parts(result)
    call = _call.get()
    if call is not None and call.parent is not None and call.parent.name == "memory.context":
        call.parent.span.set_attributes(out)  # context() is read() plus its messages: same counts
    return {**out, **with_text("query")(memory, args, kwargs, result)}


def _turn_result(result) -> dict[str, Any]:
    if result is None:
        return {"pymem.recorded": False}
    return {"pymem.recorded": True, "pymem.learned_facts": len(result.learned_fact_ids),
            "pymem.summarized": result.summarized, "pymem.learning_pending": result.learning_pending}


def record(memory, args, kwargs, result) -> dict[str, Any]:
    out = _turn_result(result)
    if _content and len(args) >= 2:
        out |= {"pymem.query": args[0], "pymem.answer": args[1]}
    return out


def recall(memory, args, kwargs, result) -> dict[str, Any]:
    out: dict[str, Any] = {"pymem.recalled": len(result), "pymem.recall.scores": [m.score or 0.0 for m in result]}
    query = args[0] if args else kwargs.get("query")
    out["pymem.recall.by"] = "text" if isinstance(query, str) else "vector"
    if _content:
        out["pymem.recall.contents"] = [m.content for m in result]
        if isinstance(query, str):
            out["pymem.query"] = query
    return out


def count(attribute: str) -> Describe:
    return lambda memory, args, kwargs, result: {attribute: result}


def length(attribute: str) -> Describe:
    return lambda memory, args, kwargs, result: {attribute: len(result)}


def persisted_many(memory, args, kwargs, result) -> dict[str, Any]:
    return {"pymem.facts": len(result), "pymem.created": sum(1 for f in result if f.created)}


def got_fact(memory, args, kwargs, result) -> dict[str, Any]:
    return {"pymem.facts": 0 if result is None else 1}


def consolidated(memory, args, kwargs, result) -> dict[str, Any]:
    return {"pymem.pairs": len(result), "pymem.merged": sum(1 for x in result if x.applied),
            "pymem.dry_run": bool(kwargs.get("dry_run"))}


def summary_found(memory, args, kwargs, result) -> dict[str, Any]:
    return {"pymem.summary": 0 if result is None else 1}


def learned(memory, args, kwargs, result) -> dict[str, Any]:
    return {f"pymem.jobs.{name}": getattr(result, name) for name in ("claimed", "done", "retried", "dead", "lost",
                                                                      "released", "skipped", "calls", "tokens")}


def queue(memory, args, kwargs, result) -> dict[str, Any]:
    return {"pymem.jobs.pending": result.pending, "pymem.jobs.running": result.running, "pymem.jobs.dead": result.dead,
            "pymem.jobs.oldest_pending_seconds": result.oldest_pending_seconds or 0.0}


def erased(memory, args, kwargs, result) -> dict[str, Any]:
    return {"pymem.erasure": result.id, "pymem.deleted": sum(result.counts.values())}


#: A Memory's spans are named in pymem.memory.OPERATIONS (``memory.<method>``), each with one of the
#: functions above: what it adds to the span from the call's arguments and result.


def _turn_subject(turn, args, kwargs) -> dict[str, Any]:
    out = _subject(turn.memory, (), {})
    if _content and turn.user_id is not None:
        out["pymem.user"] = turn.user_id
    return out


#: Turn / AsyncTurn: the read when the block starts, the write when it ends.
TURN_SPANS: dict[str, tuple[str, Describe | None]] = {
    "__enter__": ("memory.context", lambda t, a, k, r: _context_parts(t.context)),
    "__aenter__": ("memory.context", lambda t, a, k, r: _context_parts(t.context)),
    "__exit__": ("memory.record", lambda t, a, k, r: _turn_result(t.result)),
    "__aexit__": ("memory.record", lambda t, a, k, r: _turn_result(t.result)),
}


def _store_subject(store, args, kwargs) -> dict[str, Any]:
    if isinstance(store, type) or store is None:  # get_or_create / get / drop: not built yet
        out: dict[str, Any] = {"pymem.project": kwargs.get("project_id", "")}
        key = _text_arg(args, kwargs, "key")
    else:
        out = {"pymem.project": store.project_id}
        key = store.key
    if _content:
        if key is not None:
            out["pymem.store.key"] = key
        if store is not None and not isinstance(store, type):
            path = _text_arg(args, kwargs, "path")
            if path is not None:
                out["pymem.store.path"] = path
    return out


def _found(store, args, kwargs, result) -> dict[str, Any]:
    return {"pymem.store.found": result is not None}


_STORE_READS = ("read_text", "read_json", "read_entry", "get_meta", "current_sha", "list_paths", "audit_tail",
                "versions", "read_version", "get", "reload")
_STORE_WRITES = ("get_or_create", "write_text", "write_json", "update_json", "update_text", "delete", "restore",
                 "protect", "configure", "save", "append_run", "drop")
#: MemoryStore / AsyncMemoryStore: method -> (span name, what it adds).
STORE_SPANS: dict[str, tuple[str, Describe | None]] = {
    **{name: (f"store.{name}", None) for name in _STORE_READS + _STORE_WRITES},
    **{name: (f"store.{name}", _found) for name in ("read_entry", "get_meta", "current_sha")},
    "list_paths": ("store.list_paths", length("pymem.store.paths")),
    "audit_tail": ("store.audit_tail", length("pymem.store.records")),
    "versions": ("store.versions", length("pymem.store.versions")),
    "drop": ("store.drop", count("pymem.store.dropped")),
}
STORE_UNTRACED = frozenset({"append", "extend", "unsaved", "bound", "close"})


# -- applying the spans --------------------------------------------------------------------------


def _recording() -> bool:
    """Whether spans may be recorded: an SDK's tracer provider is set. Until one is (the API's
    proxy provider, or its no-op one), a span would be a non-recording copy of the current one:
    the call runs without it (its attributes are not even computed), ~15 us less a call."""
    return not isinstance(_otel.get_tracer_provider(), (_otel.ProxyTracerProvider, _otel.NoOpTracerProvider))


@contextlib.contextmanager
def _traced(name: str, attributes: dict[str, Any]):
    with _tracer.start_as_current_span(  # type: ignore[union-attr]
            name, attributes=attributes, record_exception=False, set_status_on_exception=False) as span:
        if not span.is_recording():
            yield None
            return
        call = _Call(span, name, _call.get())
        token = _call.set(call)
        try:
            yield call
        except BaseException as error:
            _failed(span, error)
            raise
        finally:
            _call.reset(token)
            span.set_attributes(call.totals())


def _finish(call: _Call | None, describe: Describe | None, owner: Any, args: tuple, kwargs: dict, result: Any) -> None:
    if call is not None and describe is not None:
        try:
            attributes = describe(owner, args, kwargs, result)
        except Exception:  # describing a call never fails it (e.g. a subclass returning its own types)
            _log.debug("pymem.tracing: could not describe %s", call.span.name if hasattr(call.span, "name") else "call",
                       exc_info=True)
            return
        call.span.set_attributes({k: v for k, v in attributes.items() if v is not None})


def _wrap(fn: Callable[..., Any], name: str, describe: Describe | None,
          subject: Callable[[Any, tuple, dict], dict[str, Any]], bound: bool) -> Callable[..., Any]:
    """``fn`` in a span ``name``. ``bound``: its first argument is the instance (or class)."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            if not _recording():
                return await fn(*args, **kwargs)
            owner, rest = (args[0], args[1:]) if bound else (None, args)
            with _traced(name, subject(owner, rest, kwargs)) as call:
                result = await fn(*args, **kwargs)
                _finish(call, describe, owner, rest, kwargs, result)
                return result
        return traced_async

    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        if not _recording():
            return fn(*args, **kwargs)
        owner, rest = (args[0], args[1:]) if bound else (None, args)
        with _traced(name, subject(owner, rest, kwargs)) as call:
            result = fn(*args, **kwargs)
            _finish(call, describe, owner, rest, kwargs, result)
            return result
    return traced


def instrument(cls: type, spans: Mapping[str, tuple[str, Describe | None]],
               subject: Callable[[Any, tuple, dict], dict[str, Any]]) -> None:
    """Wrap the methods of ``cls`` named in ``spans`` (those it defines itself) in spans.
    Without opentelemetry-api: nothing (the methods stay exactly as written)."""
    if _otel is None:
        return
    for method, (name, describe) in spans.items():
        raw = cls.__dict__.get(method)
        if raw is None:
            continue
        if isinstance(raw, classmethod):
            setattr(cls, method, classmethod(_wrap(raw.__func__, name, describe, subject, True)))
        elif isinstance(raw, staticmethod):
            setattr(cls, method, staticmethod(_wrap(raw.__func__, name, describe, subject, False)))
        else:
            setattr(cls, method, _wrap(raw, name, describe, subject, True))


def instrument_memory(memory_cls: type, turn_cls: type, spans: Mapping[str, tuple[str, Describe | None]]) -> None:
    """Spans on a Memory class (``spans``: pymem.memory's, from its OPERATIONS) and its Turn class
    (pymem.memory calls this for both twins)."""
    instrument(memory_cls, spans, _subject)
    instrument(turn_cls, TURN_SPANS, _turn_subject)


def instrument_store(store_cls: type) -> None:
    """Spans on a keyed store class (pymem.stores calls this for both twins)."""
    instrument(store_cls, STORE_SPANS, _store_subject)
