"""Running operations: each public operation of pymem is written once, as a generator (an
*operation*) that yields the steps it needs and returns its result. `run` and
`arun` drive the same operation over a sync or an async `pymem.database` pool.

Steps:

* `Query` (a named query of ``sql/queries.sql`` and its parameters) -> its rows as dicts;
* `Embed` (texts, or texts and the vectors the caller computed for them) -> one pgvector
  ``Vector`` per text, ready to be a query parameter;
* `Callback` (user code: a summarizer, an extractor) -> what it returned.

The caller's transaction: every run takes the caller's own psycopg connection, given per call
(``conn=``) or for a block (``with owner.bound(conn):``, a `Binding` held by a contextvar,
so other threads and tasks are not affected); `caller` finds it, and the operation runs on
it (`pymem.database.CallerConnection`) instead of the pool, inside its transaction. The
owner of a binding is the object whose calls it captures: a Memory, a MemoryStore, or the
Database that module functions (``pymem.purge``, ``pymem.changes``, ``pymem.forget_user``, ...)
are given (``pymem.bound(db, conn)``).

On a caller's connection whose transaction is open, a step that would call a model (an Embed the embedder
must answer, unless it says it is ``cheap``; a Callback of the learner, the extractor or the
summarizer) is refused with `pymem.errors.InTransactionError` before the model is called
(`refusal`), unless the caller allowed it: a transaction must not hold its locks and its
snapshot while a model answers. The refusal reaches the caller, except a summary's, which is
put off (the operation releases its claim; the span stays due for a later turn).

Vectors are checked in exactly one place, here, where a model's answer becomes query
parameters (`vectors` / `avectors`, with `pymem.embedders.validate_vectors`):
embedders and `pymem.embedders.aembed` return what the model gave. Vectors a caller passes
(``embedding=``) pass the same checks, against the Memory's embedder (`given_vectors`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import math
import struct
import sys
from array import array
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import psycopg
from pgvector import Vector

from . import tracing
from .database import AsyncCallerConnection, AsyncDatabase, CallerConnection, Database
from .embedders import Embedder, aembed, validate_vectors
from .embedders.base import MAX_DIMENSION, _check_name, embed
from .errors import InTransactionError, ValidationError
from .types import Query  # noqa: F401  (re-exported: operations yield it)

T = TypeVar("T")

#: the largest finite float4
_FLOAT4_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class Embed:
    """Embed ``texts`` with the operation's embedder; the operation receives one checked
    pgvector ``Vector`` per text. With ``given`` (vectors the caller computed for ``texts``) the
    embedder is not called: ``given`` is checked as its answer would be."""

    texts: list[str]
    given: Sequence[Any] | None = None
    #: texts to search with (a recall's or a search's query): the embedder's ``embed_query``
    #: when it has one (`pymem.embedders.base.embed`)
    query: bool = False


@dataclass(frozen=True)
class Callback:
    """Call user code (a summarizer, an extractor). An exception it raises is thrown back
    into the operation, which decides what a failure means."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    #: what calls a model here ("the learner", "the extractor", "the summarizer"), None for other
    #: user code (a context block's render or on_message): see `refusal`
    model: str | None = None


Step: TypeAlias = Query | Embed | Callback
#: An operation yielding steps, receiving their replies, and returning a ``T``.
Operation: TypeAlias = Generator[Step, Any, T]


class PackedVector(Vector):
    """A checked vector as pgvector's binary wire format (``>HH`` dimension and a zero, then
    big-endian float4s), packed once by `_checked`: pgvector's binary dumper sends
    `to_binary` as it is. A ``pgvector.Vector`` otherwise (its values are unpacked when
    asked for). Checking and packing a list of 384 floats costs ~11 us; ``validate_vectors``, a
    float4 array and that array's byte swap cost ~55 (timeit, one process, 2-core VM)."""

    __slots__ = ("_wire",)

    def __init__(self, wire: bytes) -> None:  # no super().__init__: _value is derived from the bytes
        self._wire = wire

    @property
    def _value(self) -> array:  # type: ignore[override]
        values = array("f")
        values.frombytes(self._wire[4:])
        if sys.byteorder == "little":
            values.byteswap()
        return values

    def to_binary(self) -> bytes:
        return self._wire


@functools.lru_cache(maxsize=64)
def _wire_format(dimension: int) -> struct.Struct:
    return struct.Struct(f">HH{dimension}f")


def _pack(embedder: Embedder, texts: Sequence[str], answer: Any) -> list[PackedVector] | None:
    """The common case in one pass: a list of lists or tuples of floats, each of the embedder's
    dimension, finite, not all zero (pgvector's float4: a value past its range does not pack).
    None whenever anything is off: `validate_vectors` then says exactly what."""
    dimension = getattr(embedder, "dimension", None)
    if type(answer) is not list or len(answer) != len(texts) or type(dimension) is not int or not 1 <= dimension <= MAX_DIMENSION:
        return None
    wire = _wire_format(dimension)
    out = []
    for vector in answer:
        if type(vector) not in (list, tuple) or len(vector) != dimension:
            return None
        try:
            packed = wire.pack(dimension, 0, *vector)
        except (struct.error, TypeError, OverflowError):
            return None
        # a sum of finite values is finite (float4 values cannot overflow a double's sum)
        if not math.isfinite(sum(vector)) or not any(vector):
            return None
        out.append(PackedVector(packed))
    return out


def _checked(embedder: Embedder, texts: Sequence[str], answer: Any) -> list[Vector]:
    _check_name(getattr(embedder, "name", None))  # validate_vectors' first check, for both paths
    packed = _pack(embedder, texts, answer)
    if packed is not None:
        return packed  # type: ignore[return-value]
    out: list[Vector] = []
    for i, values in enumerate(validate_vectors(embedder, texts, answer)):
        try:
            out.append(PackedVector(_wire_format(len(values)).pack(len(values), 0, *values)))
        except (struct.error, OverflowError):
            j = next(j for j, x in enumerate(values) if not abs(x) <= _FLOAT4_MAX)
            raise ValidationError(
                f"embedder {embedder.name!r} returned {values[j]} in the vector of text {i}, component {j}: "
                f"past the range of pgvector's 4-byte floats (about 3.4e38)"
            ) from None
    return out


def vectors(embedder: Embedder, texts: Sequence[str], *, query: bool = False) -> list[Vector]:
    """``embedder``'s vectors for ``texts`` (texts to search with when ``query``), checked
    (`validate_vectors`) and converted to pgvector ``Vector`` query parameters: the one
    place a vector is validated."""
    texts = list(texts)
    return _checked(embedder, texts, embed(embedder, texts, query=query))


def given_vectors(embedder: Embedder | None, texts: Sequence[str], given: Sequence[Any]) -> list[Vector]:
    """Vectors a caller computed for ``texts`` (``embedding=``), checked as ``embedder``'s
    answer: they are stored and compared under its name, so they must come from that model."""
    if embedder is None:
        raise ValidationError(
            "a precomputed vector needs Memory(embedder=...): the embedder's name is stored with the vector "
            "and its dimension checks it"
        )
    given = [v.to_list() if isinstance(v, Vector) else v for v in given]  # a PackedVector too: checked again
    try:
        return _checked(embedder, list(texts), given)
    except ValidationError as exc:
        raise ValidationError(f"a precomputed vector (embedding=) does not fit the Memory's embedder: {exc}") from None


async def avectors(embedder: Embedder, texts: Sequence[str], *, query: bool = False) -> list[Vector]:
    """The asyncio twin of `vectors` (the embedder runs through `aembed`)."""
    texts = list(texts)
    return _checked(embedder, texts, await aembed(embedder, texts, query=query))


class Binding:
    """What ``bound(conn)`` returns (`pymem.Memory.bound`, `pymem.MemoryStore.bound`,
    `bound`): while it is entered (``with``, or ``async with``), every call of its owner
    made in this thread or asyncio task runs on ``connection``, inside its transaction. A
    contextvar holds it, so other threads and tasks using the same owner are not affected (a task
    created inside the block inherits it: asyncio copies the context). Blocks nest; the innermost
    binding of an owner wins."""

    __slots__ = ("owner", "connection", "allow_model_calls", "_token")

    def __init__(self, owner: Any, connection: Any, allow_model_calls: bool) -> None:
        self.owner, self.connection, self.allow_model_calls = owner, connection, allow_model_calls
        self._token: contextvars.Token[tuple[Binding, ...]] | None = None

    @property
    def memory(self) -> Any:  # the name of the owner when only a Memory could be bound
        return self.owner

    def __enter__(self) -> Any:
        if self._token is not None:
            raise ValidationError("this bound(...) block is already entered: call bound(conn) again for another")
        self._token = _bindings.set((*_bindings.get(), self))
        return self.owner

    def __exit__(self, *exc: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            _bindings.reset(token)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()


#: the bindings entered in this context (thread, asyncio task), innermost last
_bindings: contextvars.ContextVar[tuple[Binding, ...]] = contextvars.ContextVar("pymem_bindings", default=())


def checked_connection(conn: Any, asynchronous: bool, who: str) -> Any:
    """``conn`` if it is a psycopg connection of the kind ``who`` runs on (an AsyncConnection
    for the asyncio twins); ValidationError otherwise."""
    want = psycopg.AsyncConnection if asynchronous else psycopg.Connection
    if not isinstance(conn, want):
        raise ValidationError(f"{who} runs on a psycopg.{want.__name__} of yours (bound(conn), conn=), "
                              f"not on a {type(conn).__module__}.{type(conn).__name__}")
    return conn


def binding(owner: Any, conn: Any, *, allow_model_calls: bool = False, asynchronous: bool = False) -> Binding:
    """A `Binding` of ``owner``'s calls to ``conn`` (checked: a psycopg connection, an
    AsyncConnection when ``asynchronous``): what each ``bound(conn)`` returns."""
    return Binding(owner, checked_connection(conn, asynchronous, type(owner).__name__), bool(allow_model_calls))


def bound(db: Database | AsyncDatabase, conn: psycopg.Connection | psycopg.AsyncConnection, *,
          allow_model_calls: bool = False) -> Binding:
    """``with pymem.bound(db, conn):`` every call of a module function given ``db`` (``pymem.purge``,
    ``pymem.forget_user``, ``pymem.changes.changes_since``, ...), in this thread or asyncio task, runs
    on ``conn`` (your own psycopg connection, an AsyncConnection for an AsyncDatabase) inside its
    transaction, as `pymem.Memory.bound` does for a Memory's calls. Each of those functions
    also takes ``conn=`` for itself alone."""
    return binding(db, conn, allow_model_calls=allow_model_calls, asynchronous=isinstance(db, AsyncDatabase))


def caller(owner: Any, conn: Any = None, *, asynchronous: bool = False
           ) -> CallerConnection | AsyncCallerConnection | None:
    """The caller's connection a call of ``owner`` runs on: ``conn=`` (model calls allowed when an
    entered ``bound(conn, allow_model_calls=True)`` of this owner names the same connection), else
    the innermost entered ``bound()`` of ``owner`` in this context; None: the owner's pool."""
    bindings = _bindings.get()
    if conn is None and not bindings:  # the common case: the pool
        return None
    found = [b for b in bindings if b.owner is owner]
    if conn is None:
        if not found:
            return None
        conn, allow = found[-1].connection, found[-1].allow_model_calls
    else:
        checked_connection(conn, asynchronous, type(owner).__name__)
        allow = any(b.connection is conn and b.allow_model_calls for b in found)
    return AsyncCallerConnection(conn, allow) if asynchronous else CallerConnection(conn, allow)


def _advance(operation: Operation[Any], step: Step, reply: Any = None, error: Exception | None = None) -> Step:
    """The operation's next step once ``step`` answered ``reply`` or failed with ``error``: a
    Query's or a Callback's error is thrown into the operation, which may handle it or let it
    propagate; an embedder's error (or a bad vector) is the caller's to see. StopIteration when
    the operation returned."""
    if error is None:
        return operation.send(reply)
    if isinstance(step, Embed):
        raise error
    return operation.throw(error)


#: what the advice of a refusal says, after what was refused
_ADVICE = ("make the call outside the transaction, or allow model calls inside it: "
           "with mem.bound(conn, allow_model_calls=True): ...")


def refusal(db: Any, step: Step, embedder: Embedder | None) -> InTransactionError | None:
    """The error refusing ``step`` when it would call a model while the transaction of a caller's
    connection (``db``) is open and the caller did not allow it; None when the step may run."""
    if not isinstance(db, (CallerConnection, AsyncCallerConnection)) or db.allow_model_calls:
        return None
    if isinstance(step, Embed):
        if step.given is not None or embedder is None or getattr(embedder, "cheap", False):
            return None
        what = f"embedder {getattr(embedder, 'name', None)!r} (to embed {len(step.texts)} text(s))"
        advice = f"pass the vectors you computed before the transaction (embedding=, embeddings=), or {_ADVICE}"
    elif isinstance(step, Callback) and step.model is not None:
        what, advice = f"{step.model}'s model", _ADVICE
    else:
        return None
    if not db.in_transaction:
        return None
    return InTransactionError(f"pymem did not call the {what}: the transaction of the connection you gave "
                              f"(Memory.bound / conn=) is open, and would wait for the model", hint=advice)


def _refused(operation: Operation[Any], step: Step, error: InTransactionError) -> Step:
    """The next step after a refused ``step``: a summary is put off (the operation releases its
    claim); any other refusal ends the operation and reaches the caller."""
    if isinstance(step, Callback) and step.model == "the summarizer":
        return operation.throw(error)
    operation.close()
    raise error


def run(operation: Operation[T], db: Database | CallerConnection, embedder: Embedder | None = None, *,
        conn: psycopg.Connection | None = None, owner: Any = None) -> T:
    """Drive an operation: each Query on a connection checked out for that statement only (an
    operation never holds a pooled connection while user code, an embedder or an LLM runs), or
    on the caller's connection (``conn=``, or a ``bound()`` of ``owner``, default ``db``:
    `caller`, `refusal`); errors as `_advance` says."""
    if not isinstance(db, CallerConnection):
        db = caller(db if owner is None else owner, conn) or db  # type: ignore[assignment]
    try:
        step = next(operation)
        while True:
            if not isinstance(step, Query) and (refused := refusal(db, step, embedder)) is not None:
                step = _refused(operation, step, refused)
                continue
            try:
                with tracing.step(step):  # a child span when the call is traced (pymem.tracing)
                    if isinstance(step, Query):
                        reply: Any = db.query(step)
                    elif isinstance(step, Embed) and step.given is not None:
                        reply = given_vectors(embedder, step.texts, step.given)
                    elif isinstance(step, Embed):
                        reply = vectors(embedder, step.texts, query=step.query)  # type: ignore[arg-type]
                    else:
                        reply = step.fn(*step.args)
            except Exception as exc:
                step = _advance(operation, step, error=exc)
            else:
                step = _advance(operation, step, reply)
    except StopIteration as done:
        return done.value


def _one(query: Query) -> Operation[list[Any]]:
    return (yield query)


def fetch(query: Query, db: Database | CallerConnection, *, conn: psycopg.Connection | None = None,
         owner: Any = None) -> list[Any]:
    """The rows of one named query (a generated call of `pymem.calls`), run as an operation
    of that one step: `run` with its caller's connection and its span."""
    return run(_one(query), db, conn=conn, owner=owner)


async def afetch(query: Query, db: AsyncDatabase | AsyncCallerConnection, *,
                conn: psycopg.AsyncConnection | None = None, owner: Any = None) -> list[Any]:
    """The asyncio twin of `fetch`."""
    return await arun(_one(query), db, conn=conn, owner=owner)


async def arun(operation: Operation[T], db: AsyncDatabase | AsyncCallerConnection,
               embedder: Embedder | None = None, *, conn: psycopg.AsyncConnection | None = None,
               owner: Any = None) -> T:
    """The asyncio twin of `run`; a sync Callback runs in a worker thread."""
    if not isinstance(db, AsyncCallerConnection):
        db = caller(db if owner is None else owner, conn, asynchronous=True) or db  # type: ignore[assignment]
    try:
        step = next(operation)
        while True:
            if not isinstance(step, Query) and (refused := refusal(db, step, embedder)) is not None:
                step = _refused(operation, step, refused)
                continue
            try:
                with tracing.step(step):
                    if isinstance(step, Query):
                        reply: Any = await db.query(step)
                    elif isinstance(step, Embed) and step.given is not None:
                        reply = given_vectors(embedder, step.texts, step.given)
                    elif isinstance(step, Embed):
                        reply = await avectors(embedder, step.texts, query=step.query)  # type: ignore[arg-type]
                    elif inspect.iscoroutinefunction(step.fn):
                        reply = await step.fn(*step.args)
                    else:
                        reply = await asyncio.to_thread(step.fn, *step.args)
                        if inspect.isawaitable(reply):  # e.g. an object whose __call__ is async
                            reply = await reply
            except Exception as exc:
                step = _advance(operation, step, error=exc)
            else:
                step = _advance(operation, step, reply)
    except StopIteration as done:
        return done.value
