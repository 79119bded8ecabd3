"""Running operations: each public operation of pymem is written once, as a generator (an
*operation*) that yields the steps it needs and returns its result. :func:`run` and
:func:`arun` drive the same operation over a sync or an async :mod:`pymem.database` pool.

Steps:

* :class:`Query` (a named query of ``sql/queries.sql`` and its parameters) -> its rows as dicts;
* :class:`Embed` (texts, or texts and the vectors the caller computed for them) -> one pgvector
  ``Vector`` per text, ready to be a query parameter;
* :class:`Callback` (user code: a summarizer, an extractor) -> what it returned.

Vectors are checked in exactly one place, here, where a model's answer becomes query
parameters (:func:`vectors` / :func:`avectors`, with :func:`pymem.embedders.validate_vectors`):
embedders and :func:`pymem.embedders.aembed` return what the model gave. Vectors a caller passes
(``embedding=``) pass the same checks, against the Memory's embedder (:func:`given_vectors`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from pgvector import Vector

from . import tracing
from .database import AsyncDatabase, Database
from .embedders import Embedder, aembed, validate_vectors
from .errors import ValidationError
from .types import Query  # noqa: F401  (re-exported: operations yield it)

T = TypeVar("T")


@dataclass(frozen=True)
class Embed:
    """Embed ``texts`` with the operation's embedder; the operation receives one checked
    pgvector ``Vector`` per text. With ``given`` (vectors the caller computed for ``texts``) the
    embedder is not called: ``given`` is checked as its answer would be."""

    texts: list[str]
    given: Sequence[Any] | None = None


@dataclass(frozen=True)
class Callback:
    """Call user code (a summarizer, an extractor). An exception it raises is thrown back
    into the operation, which decides what a failure means."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]


Step: TypeAlias = Query | Embed | Callback
#: An operation yielding steps, receiving their replies, and returning a ``T``.
Operation: TypeAlias = Generator[Step, Any, T]


def _checked(embedder: Embedder, texts: Sequence[str], answer: Any) -> list[Vector]:
    return [Vector(v) for v in validate_vectors(embedder, texts, answer)]


def vectors(embedder: Embedder, texts: Sequence[str]) -> list[Vector]:
    """``embedder``'s vectors for ``texts``, checked (:func:`validate_vectors`) and converted
    to pgvector ``Vector`` query parameters: the one place a vector is validated."""
    texts = list(texts)
    return _checked(embedder, texts, embedder.embed(texts))


def given_vectors(embedder: Embedder | None, texts: Sequence[str], given: Sequence[Any]) -> list[Vector]:
    """Vectors a caller computed for ``texts`` (``embedding=``), checked as ``embedder``'s
    answer: they are stored and compared under its name, so they must come from that model."""
    if embedder is None:
        raise ValidationError(
            "a precomputed vector needs Memory(embedder=...): the embedder's name is stored with the vector "
            "and its dimension checks it"
        )
    given = [v.to_list() if isinstance(v, Vector) else v for v in given]
    try:
        return _checked(embedder, list(texts), given)
    except ValidationError as exc:
        raise ValidationError(f"a precomputed vector (embedding=) does not fit the Memory's embedder: {exc}") from None


async def avectors(embedder: Embedder, texts: Sequence[str]) -> list[Vector]:
    """The asyncio twin of :func:`vectors` (the embedder runs through :func:`aembed`)."""
    texts = list(texts)
    return _checked(embedder, texts, await aembed(embedder, texts))


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


def run(operation: Operation[T], db: Database, embedder: Embedder | None = None) -> T:
    """Drive an operation: each Query on a connection checked out for that statement only (an
    operation never holds a pooled connection while user code, an embedder or an LLM runs);
    errors as :func:`_advance` says."""
    try:
        step = next(operation)
        while True:
            try:
                with tracing.step(step):  # a child span when the call is traced (pymem.tracing)
                    if isinstance(step, Query):
                        reply: Any = db.query(step)
                    elif isinstance(step, Embed) and step.given is not None:
                        reply = given_vectors(embedder, step.texts, step.given)
                    elif isinstance(step, Embed):
                        reply = vectors(embedder, step.texts)  # type: ignore[arg-type]
                    else:
                        reply = step.fn(*step.args)
            except Exception as exc:
                step = _advance(operation, step, error=exc)
            else:
                step = _advance(operation, step, reply)
    except StopIteration as done:
        return done.value


async def arun(operation: Operation[T], db: AsyncDatabase, embedder: Embedder | None = None) -> T:
    """The asyncio twin of :func:`run`; a sync Callback runs in a worker thread."""
    try:
        step = next(operation)
        while True:
            try:
                with tracing.step(step):
                    if isinstance(step, Query):
                        reply: Any = await db.query(step)
                    elif isinstance(step, Embed) and step.given is not None:
                        reply = given_vectors(embedder, step.texts, step.given)
                    elif isinstance(step, Embed):
                        reply = await avectors(embedder, step.texts)  # type: ignore[arg-type]
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
