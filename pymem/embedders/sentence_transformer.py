"""SentenceTransformerEmbedder: a sentence-transformers model as an `.base.Embedder`.
sentence_transformers is not a dependency: it is imported only to load a model by name."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, ValidationError
from .base import _check_dimension, _check_name


class SentenceTransformerEmbedder:
    """A sentence-transformers model (an object, or a name to load) as an `Embedder`.

    ``sentence_transformers`` is imported only to load a model by name. The dimension comes
    from ``get_sentence_embedding_dimension()``. ``name`` defaults to ``st:<model name>``;
    for a model object pass ``name`` unless it knows its own (``model_card_data.base_model``).
    ``encode_kwargs`` go to every ``encode`` call (e.g. ``{"normalize_embeddings": True}``):
    options that change the vectors need a name of their own. ``query_kwargs`` go on top of them
    when pymem embeds a search (`embed_query`): for a model trained with a prompt for
    searches, e.g. ``{"prompt_name": "query"}`` (a prompt of the model's configuration) or
    ``{"prompt": "query: "}`` (e5), with ``encode_kwargs={"prompt": "passage: "}`` for what is
    stored; without them a search is encoded as a stored text.
    """

    def __init__(
        self,
        model_or_name: Any,
        name: str | None = None,
        *,
        encode_kwargs: dict[str, Any] | None = None,
        query_kwargs: dict[str, Any] | None = None,
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
        self.query_kwargs: dict[str, Any] = dict(query_kwargs or {})

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(name={self.name!r}, dimension={self.dimension})"

    def embed(self, texts: list[str]) -> list[list[float]]:
        """``model.encode(texts, **encode_kwargs)`` as lists (pymem checks the vectors where they
        become query parameters: `pymem.runner`)."""
        return self._encode(texts, self.encode_kwargs)

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        """The texts of a search: ``model.encode(texts, **(encode_kwargs | query_kwargs))``."""
        return self._encode(texts, self.encode_kwargs | self.query_kwargs)

    def _encode(self, texts: list[str], kwargs: dict[str, Any]) -> list[list[float]]:
        texts = list(texts)
        if not texts:
            return []
        vectors = self.model.encode(texts, **kwargs)
        return vectors.tolist() if hasattr(vectors, "tolist") else vectors
