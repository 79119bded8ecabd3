"""OpenAIEmbedder: any OpenAI-compatible ``/embeddings`` endpoint, through the ``openai``
package when it is installed (imported when an embedder is created, never at import time) or
pymem's own JSON POST (`pymem.http`: no redirect followed, the reply's size bounded)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigError, ConnectionError, ValidationError
from ..http import post_json, status_error
from .base import _check_dimension, _check_name, _positive_int

#: Native dimensions of OpenAI's own embedding models (any other model needs ``dimension=``).
OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


#: Statuses that refuse the input (too long, too many): ValidationError, not ConfigError.
_INVALID_INPUT = (400, 413, 422)
#: The reply's size limit: this many bytes per number asked for (``len(batch) * dimension``; a
#: float in pretty-printed JSON takes ~30), plus `REPLY_BYTES_BASE`.
REPLY_BYTES_PER_NUMBER = 64
REPLY_BYTES_BASE = 1 << 20


def _http_error(name: str, status: int, detail: str) -> Exception:
    return status_error(f"embedding endpoint of {name!r}", status, detail, _INVALID_INPUT)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint as an `Embedder`.

    Uses ``client`` (an ``openai.OpenAI``) when given, else the ``openai`` package when it is
    importable and there is a key (``use_openai=False`` never, ``True`` always), else pymem's own
    POST of ``{"model", "input"}`` (`pymem.http.post_json`) with ``Authorization: Bearer
    <api_key>`` (no header without a key): no redirect followed (a 3xx is a ConfigError), at
    most ``timeout`` seconds, and a reply of at most 1 MiB + 64 bytes per number asked for
    (``len(batch) * dimension``), else a ValidationError.
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
        # Without a key (a local endpoint) pymem's POST sends no header; the openai client refuses
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
        """One request per ``batch_size`` texts; the vectors in input order, as the endpoint sent
        them (pymem checks them where they become query parameters: `pymem.runner`)."""
        texts = list(texts)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            items = self._via_client(batch) if self._client is not None else self._via_http(batch)
            vectors.extend(self._ordered(items, len(batch)))
        return vectors

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

    def _via_http(self, batch: list[str]) -> list[tuple[Any, Any]]:
        url = f"{self.base_url}/embeddings"
        what = f"embedding endpoint {url} of {self.name!r}"
        reply = post_json(url, self._payload(batch), what=what, timeout=self.timeout, api_key=self._api_key,
                          max_bytes=REPLY_BYTES_BASE + len(batch) * self.dimension * REPLY_BYTES_PER_NUMBER,
                          invalid=_INVALID_INPUT, expecting="a data list")
        try:
            return [(item.get("index"), item.get("embedding")) for item in reply["data"]]
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValidationError(f"{what} answered without a data list: {str(reply)[:200]!r}") from exc

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
