"""The embedder protocol and the checks every vector passes (see the package docstring).

`Embedder` is what pymem needs from a model; `validate_vectors` checks what an
embedder returned (pymem calls it once per batch, in `pymem.runner`, where the vectors
become query parameters); `aembed` runs an embedder from asyncio.
The embedders of this package share the argument checks (``_check_name``, ``_check_dimension``,
``_positive_int``) and ``_normalise`` (unit length). Stdlib only.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import ValidationError

#: pgvector's largest ``vector`` dimension (the table ``pymem.embedders`` CHECKs it too).
MAX_DIMENSION = 16000
#: The longest embedder name the database accepts.
MAX_NAME_LENGTH = 200


@runtime_checkable
class Embedder(Protocol):
    """What pymem needs from an embedding model (see the docstring of `pymem.embedders`)."""

    # Optional, not part of the protocol (isinstance does not ask for it): ``cheap = True`` says
    # that embedding a text costs less than a round trip to the database (HashEmbedder: ~15 us).
    # ``Memory.persist`` then embeds and adds in one call; otherwise it asks the database first
    # (``pymem.fact_lookup``) and embeds only a fact that is not there yet.
    # Optional too: ``embed_query(texts)`` (and its coroutine ``aembed_query``), for a model
    # trained to embed a search differently from what it searches (e5's "query: " and
    # "passage: "). pymem calls it for the texts it searches with (recall, retrieve, context,
    # the memory page's search) and ``embed`` for every text it stores; without it, ``embed``
    # for both. Both must return vectors of the same space (same ``name`` and ``dimension``).

    name: str
    dimension: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector of ``dimension`` floats per text, in order."""
        ...


def embed(embedder: Embedder, texts: Sequence[str], *, query: bool = False) -> Any:
    """``embedder.embed(texts)``, or with ``query=True`` (texts to search with) its
    ``embed_query`` when it has one. Returns what the embedder returned, unchecked."""
    texts = list(texts)
    own = getattr(embedder, "embed_query", None) if query else None
    return own(texts) if own is not None else embedder.embed(texts)


async def aembed(embedder: Embedder, texts: Sequence[str], *, query: bool = False) -> list[list[float]]:
    """Embed from asyncio: the embedder's own ``aembed`` coroutine if it has one (``aembed_query``
    with ``query=True``, texts to search with), else `embed` in a worker thread. Returns
    what the embedder returned: pymem checks it with `validate_vectors` where it becomes
    query parameters (`pymem.runner.avectors`)."""
    texts = list(texts)
    own = getattr(embedder, "aembed_query" if query and hasattr(embedder, "embed_query") else "aembed", None)
    if own is not None and inspect.iscoroutinefunction(own):
        return await own(texts)
    return await asyncio.to_thread(embed, embedder, texts, query=query)


def _check_dimension(dimension: object, what: str = "dimension") -> int:
    if isinstance(dimension, bool) or not isinstance(dimension, int):
        raise ValidationError(f"{what} must be an int, not {type(dimension).__name__}")
    if not 1 <= dimension <= MAX_DIMENSION:
        raise ValidationError(f"{what} must be between 1 and {MAX_DIMENSION}, not {dimension}")
    return dimension


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"{what} must be a positive int, not {value!r}")
    return value


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(f"an embedder's name must be a non-empty string, not {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationError(f"embedder name is longer than {MAX_NAME_LENGTH} characters: {name[:40]!r}...")
    return name


def validate_vectors(embedder: Embedder, texts: Sequence[str], vectors: Any) -> list[list[float]]:
    """Check ``vectors`` (what ``embedder`` returned for ``texts``) and return them as lists of
    Python floats: one per text, each ``embedder.dimension`` long, finite, not all zero
    (a zero vector has no direction: cosine distance to it is NaN).

    Accepts any sequence of float sequences (lists, tuples, numpy arrays). Raises
    `pymem.errors.ValidationError` naming the embedder and the first bad text.
    """
    name = _check_name(getattr(embedder, "name", None))
    dimension = _check_dimension(getattr(embedder, "dimension", None), f"embedder {name!r}'s dimension")
    if vectors is None or isinstance(vectors, (str, bytes)):
        raise ValidationError(f"embedder {name!r} returned {type(vectors).__name__}, not a list of vectors")
    try:
        count = len(vectors)
    except TypeError:
        raise ValidationError(
            f"embedder {name!r} returned {type(vectors).__name__}, not a list of vectors"
        ) from None
    if count != len(texts):
        raise ValidationError(f"embedder {name!r} returned {count} vectors for {len(texts)} texts")
    out: list[list[float]] = []
    for i, vector in enumerate(vectors):
        if isinstance(vector, (str, bytes)):
            raise ValidationError(f"embedder {name!r} returned a string as the vector of text {i}")
        try:
            values = list(map(float, vector))
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"embedder {name!r} returned a vector of non-numbers for text {i}: {exc}"
            ) from None
        if len(values) != dimension:
            raise ValidationError(
                f"embedder {name!r} returned a vector of dimension {len(values)} for text {i}; "
                f"expected {dimension}"
            )
        # a sum of finite values is finite unless it overflows: one check for the common case
        if not math.isfinite(sum(values)) and not all(map(math.isfinite, values)):
            j = next(j for j, x in enumerate(values) if not math.isfinite(x))
            raise ValidationError(
                f"embedder {name!r} returned a non-finite value ({values[j]}) in the vector of "
                f"text {i}, component {j}"
            )
        if not any(values):
            raise ValidationError(f"embedder {name!r} returned an all-zero vector for text {i}")
        out.append(values)
    return out


def _normalise(vector: list[float]) -> list[float] | None:
    """``vector`` scaled to unit length, or None when it is zero."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0 or not math.isfinite(norm):
        return None
    return [x / norm for x in vector]
