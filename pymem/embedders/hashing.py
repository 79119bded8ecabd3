"""HashEmbedder: feature hashing of words and character trigrams; stdlib only, deterministic."""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from functools import lru_cache

from ..errors import ValidationError
from .base import _check_dimension

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

    #: embedding costs less than a round trip (see `pymem.embedders.base.Embedder`)
    cheap = True

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
        words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
        # the same additions in the same order as word by word, feature by feature (the bits of
        # a vector never change), over only the buckets a word touches: ~4x faster
        sums: dict[int, float] = {}
        get = sums.get
        for word in words:
            for bucket, value in _features(word, self.dimension):
                sums[bucket] = get(bucket, 0.0) + value
        norm = math.sqrt(math.fsum(x * x for x in sums.values())) if words else 0.0
        if norm == 0.0 or not math.isfinite(norm):
            return list(self._empty)
        vector = [0.0] * self.dimension
        for bucket, x in sums.items():
            vector[bucket] = x / norm
        return vector


@lru_cache(maxsize=1 << 14)
def _features(word: str, dimension: int) -> tuple[tuple[int, float], ...]:
    """What ``word`` adds, in order: its own bucket (1.0, signed), then each trigram of
    `` word `` (0.35, signed)."""
    bucket, sign = _bucket(word, dimension)
    out = [(bucket, sign * _WORD_WEIGHT)]
    padded = f" {word} "
    for k in range(len(padded) - 2):
        bucket, sign = _bucket("#" + padded[k : k + 3], dimension)
        out.append((bucket, sign * _TRIGRAM_WEIGHT))
    return tuple(out)
