"""HashEmbedder: feature hashing of words and character trigrams; stdlib only, deterministic."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import lru_cache

from ..errors import ValidationError
from .base import _check_dimension, _normalise

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
