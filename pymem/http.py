"""The one HTTP client of pymem: a JSON POST to a model's endpoint that may carry an API key
(`pymem.llm.ChatClient`'s chat completions, `pymem.embedders.OpenAIEmbedder`'s
embeddings without the ``openai`` package), through the standard library.

`post_json` sends ``payload`` as JSON (``Authorization: Bearer <key>`` only when a key is
given) and returns the answer parsed as JSON. What it guarantees:

* **No redirect is followed.** ``urllib`` would follow a 3xx to any host, or from https to
  http, with the ``Authorization`` header, and return the other host's answer. Here a 3xx is a
  `pymem.ConfigError` naming the status and the origin (scheme, host, port) of its
  ``Location``, never the key, nor the Location's path or query: point the base URL at the
  endpoint itself. Proxies (``HTTPS_PROXY`` ...) work as with ``urllib``.
* **The reply is bounded.** It is read in pieces and refused (`pymem.ValidationError`)
  once it passes ``max_bytes``, or at once when its ``Content-Length`` says it would; of an error
  answer only the first `ERROR_BODY_BYTES` are read.
* **The time is bounded.** ``timeout`` bounds connecting and each wait on the socket, and the
  whole reply: past the deadline between two pieces it is a `pymem.TimeoutError`.
* **Errors map to pymem's.** Past the time: `pymem.TimeoutError`; unreachable, HTTP 408,
  429 or 5xx: `pymem.ConnectionError`; a status in ``invalid`` (the input refused, e.g.
  413): `pymem.ValidationError`; any other 4xx (key, URL, model): `pymem.ConfigError`;
  an answer that is not JSON: `pymem.ValidationError`. ``what`` (e.g. ``"chat endpoint
  <url>"``) starts every message.
"""

from __future__ import annotations

import builtins
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection
from typing import Any

from .errors import ConfigError, ConnectionError, Error, TimeoutError, ValidationError

#: How much of an error answer's body is read, for its message.
ERROR_BODY_BYTES = 65536
_PIECE = 65536


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Refuses every redirect: urllib then raises the 3xx as an HTTPError."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


# build_opener keeps its default handlers (proxies, https) and puts this one in place of the redirect handler
_OPENER = urllib.request.build_opener(_NoRedirects)


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: where it goes, without user, path or query."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "an unparsable URL"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def status_error(what: str, status: int, detail: str, invalid: Collection[int] = ()) -> Error:
    """The pymem error for an HTTP error status (the mapping above)."""
    message = f"{what} answered HTTP {status}" + (f": {detail}" if detail else "")
    if status in invalid:
        return ValidationError(message)
    if 400 <= status < 500 and status not in (408, 429):
        return ConfigError(message)  # 401, 403, 404: key, URL or model
    return ConnectionError(message)  # 408, 429, 5xx


def error_detail(body: bytes) -> str:
    """The message of an error body (OpenAI's ``{"error": {"message": ...}}``), or its start."""
    text = body.decode("utf-8", "replace").strip()
    try:
        error = json.loads(text)["error"]
        return str(error["message"] if isinstance(error, dict) else error)[:300]
    except (ValueError, KeyError, TypeError):
        return text[:300]


def _read(response: Any, what: str, max_bytes: int, deadline: float | None) -> bytes:
    """The body in pieces: at most ``max_bytes`` (ValidationError past it), and past
    ``deadline`` between two pieces a timeout."""
    declared = response.headers.get("Content-Length") if response.headers is not None else None
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise ValidationError(f"{what} answered {int(declared)} bytes; a reply may have at most {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise builtins.TimeoutError("the reply took too long")
        chunk = response.read1(_PIECE) if hasattr(response, "read1") else response.read(_PIECE)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise ValidationError(f"{what} answered more than {max_bytes} bytes, the most a reply may have")
        chunks.append(chunk)


def post_json(url: str, payload: Any, *, what: str, timeout: float, max_bytes: int, api_key: str | None = None,
              invalid: Collection[int] = (), expecting: str = "JSON") -> Any:
    """POST ``payload`` as JSON to ``url`` and return the answer parsed as JSON (the module's
    docstring says what is guaranteed and raised). ``expecting`` names the answer in the error
    for one that is not JSON."""
    headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "pymem"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=json.dumps(payload).encode("utf-8"), headers=headers, method="POST")
    deadline = time.monotonic() + timeout
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            raw = _read(response, what, max_bytes, deadline)
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            location = exc.headers.get("Location") if exc.headers is not None else None
            where = origin(urllib.parse.urljoin(url, location)) if location else "nowhere (no Location)"
            raise ConfigError(
                f"{what} answered HTTP {exc.code}, a redirect to {where}: pymem follows no redirect, "
                "since its requests may carry an API key; give the endpoint's own URL as the base URL"
            ) from None
        try:
            body = exc.read(ERROR_BODY_BYTES)  # its start is the message's detail
        except OSError:  # a broken or slow error body: the status says enough
            body = b""
        raise status_error(what, exc.code, error_detail(body), invalid) from exc
    except builtins.TimeoutError as exc:  # socket.timeout is an alias of it
        raise TimeoutError(f"{what} took longer than {timeout} s") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, builtins.TimeoutError):
            raise TimeoutError(f"{what} took longer than {timeout} s") from exc
        raise ConnectionError(f"{what} is unreachable: {exc.reason}") from exc
    except OSError as exc:
        raise ConnectionError(f"{what} failed: {exc}") from exc
    try:
        return json.loads(raw)
    except ValueError as exc:  # json's errors (and bad UTF-8) are ValueErrors
        raise ValidationError(f"{what} answered without {expecting} (not JSON): {raw[:200]!r}") from exc
