"""Learning with a chat model (docs/learning.md): any OpenAI-compatible
``POST {base_url}/chat/completions`` endpoint (a hosted model, vLLM, llama.cpp's server,
Ollama) through the standard library, no dependency.

* `ChatClient`: one request, one reply; configured by `pymem.Settings`
  (``PYMEM_LLM_BASE_URL``, ``PYMEM_LLM_MODEL``, ``PYMEM_LLM_API_KEY_ENV``, ``PYMEM_LLM_TIMEOUT``)
  or its arguments. ``timeout`` bounds the whole request (connect, wait, and the reply's
  reading, checked between reads); a reply may have at most `MAX_REPLY_BYTES`; no redirect
  is followed (`pymem.http`, the HTTP helper it shares with the embedders).
* `ChatLearner`: a `Learner` for ``Memory(learner=...)``: ``extract`` (facts about
  the user, from the user's message only), ``reconcile`` (ADD / UPDATE / DELETE / NONE for each
  of them against the user's most similar stored facts) and ``summarize`` (a ``summarizer=``).
* Prompts are files of the package (``pymem/prompts/<task>_<version>.txt``), versioned: a
  changed prompt is a new file, so what a learner sent is known by its ``version``.

Every reply is JSON checked against a pydantic model; a reply that does not fit (not JSON,
missing or extra-typed fields, a number naming no fact it was shown) raises
`pymem.ValidationError`, and the caller (``Memory.record``) logs it and stores the turn
without learning: nothing of a malformed reply is ever written.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic import ValidationError as SchemaError

from .errors import ConfigError, ValidationError
from .http import post_json
from .settings import Settings
from .values import timestamp

#: The prompts' version a `ChatLearner` uses unless told otherwise.
PROMPT_VERSION = "v1"
#: The most facts one extraction keeps (the prompt asks for at most 20).
MAX_FACTS = 20
#: The longest fact a model may propose, in characters.
MAX_FACT_CHARS = 1000
#: The largest reply a `ChatClient` reads, in bytes (4 MiB: a chat completion of the
#: learner's JSON is a few KiB); a larger one is a ValidationError, read no further.
MAX_REPLY_BYTES = 4 << 20

_Fact = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_FACT_CHARS)]


def load_prompt(task: str, version: str = PROMPT_VERSION) -> str:
    """The text of ``pymem/prompts/<task>_<version>.txt``."""
    if not re.fullmatch(r"[a-z]+", task) or not re.fullmatch(r"v[0-9]+", version):
        raise ValidationError(f"no prompt {task!r} version {version!r}")
    path = resources.files("pymem") / "prompts" / f"{task}_{version}.txt"
    if not path.is_file():
        raise ValidationError(f"no prompt {task!r} version {version!r} in pymem/prompts")
    return path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class FactChange:
    """One change a learner decided for the user's facts: ``add`` a fact; ``update`` fact
    ``fact_id`` to ``content``; ``delete`` (retire) fact ``fact_id``, which ``content`` says is no
    longer true. Sent with the turn (``pymem.turn_record``'s ``fact_changes``). ``valid_from`` /
    ``valid_to`` (timezone-aware, optional): when the fact holds in the world ("since May"; an
    update's ``valid_from`` says when the old fact stopped holding: docs/sql.md "Valid time")."""

    op: Literal["add", "update", "delete"]
    content: str
    fact_id: int | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        change: dict[str, Any] = {"op": self.op, "content": self.content}
        if self.fact_id is not None:
            change["fact_id"] = self.fact_id
        for key, value in (("valid_from", self.valid_from), ("valid_to", self.valid_to)):
            moment = timestamp(value, key)
            if moment is not None:
                change[key] = moment.isoformat()
        return change


@runtime_checkable
class Learner(Protocol):
    """What ``Memory(learner=...)`` needs. ``extract(user_message)`` returns candidate facts
    about the user; ``reconcile(candidates, stored)`` gets them with the user's most similar
    stored facts (``{"id", "content"}`` dicts) and returns the `FactChange` list to
    apply (an update or delete may only name a fact of ``stored``)."""

    def extract(self, message: str) -> list[str]: ...

    def reconcile(self, candidates: list[str], stored: list[dict[str, Any]]) -> list[FactChange]: ...


# -- the replies' schemas --------------------------------------------------------------------
class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class _Extracted(_Reply):
    facts: list[_Fact] = Field(max_length=100)


class _Decision(_Reply):
    learned: int = Field(ge=0)
    op: Literal["ADD", "UPDATE", "DELETE", "NONE"]
    stored: int | None = Field(default=None, ge=0)
    content: _Fact | None = None
    #: when the fact holds, if the message says ("since May"): an ISO date or time (UTC if no zone)
    valid_from: str | None = None
    valid_to: str | None = None

    @field_validator("op", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


def _when(value: str | None) -> datetime | None:
    """A model's ISO date or time ("2025-05-01", "2025-05", "2025-05-01T08:00:00+02:00") as a
    timezone-aware datetime (UTC when it names no zone); None for anything else: a date the model
    got wrong leaves the fact without a valid time, it does not lose the fact."""
    if value is None:
        return None
    text = value.strip()
    if re.fullmatch(r"\d{4}-\d{2}", text):
        text += "-01"
    elif re.fullmatch(r"\d{4}", text):
        text += "-01-01"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


class _Decisions(_Reply):
    decisions: list[_Decision] = Field(max_length=200)


class _Summary(_Reply):
    summary: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


def parse_reply(text: str, schema: type[BaseModel]) -> Any:
    """The model's reply parsed as JSON (a ```json fence around it is allowed) and checked
    against ``schema``; ValidationError when it does not fit."""
    body = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1)
    try:
        return schema.model_validate(json.loads(body))
    except (ValueError, SchemaError) as exc:  # json's errors are ValueErrors
        raise ValidationError(f"the chat model's reply does not fit {schema.__name__.strip('_')}: "
                              f"{str(exc).splitlines()[0][:300]}") from exc


# -- the client --------------------------------------------------------------------------------
class ChatClient:
    """An OpenAI-compatible chat-completions endpoint. Arguments left None come from
    ``settings`` (default `pymem.Settings`, i.e. the ``PYMEM_LLM_*`` variables): ``model``
    (required: ConfigError without one), ``base_url``, the key (read from the environment
    variable ``PYMEM_LLM_API_KEY_ENV`` names, default ``OPENAI_API_KEY``; no key, no
    ``Authorization`` header: a local server), ``timeout`` (seconds for the whole request) and
    ``json_mode`` (``PYMEM_LLM_JSON_MODE``, default on: ask for a JSON object with
    ``response_format``; off for a server that refuses that field).

    What it sends: ``POST <base_url>/chat/completions`` with ``{"model", "messages",
    "temperature", "response_format": {"type": "json_object"}}`` (the last only in JSON mode);
    what it reads: ``choices[0].message.content``."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 timeout: float | None = None, settings: Settings | None = None, temperature: float = 0.0,
                 json_mode: bool | None = None) -> None:
        s = settings if settings is not None else Settings()
        self.model = model if model is not None else s.llm_model
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError("no chat model: pass ChatClient(model=...) or set PYMEM_LLM_MODEL")
        self.base_url = (base_url if base_url is not None else s.llm_base_url).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"the chat endpoint's base URL must start with http:// or https://: {self.base_url!r}")
        self._api_key = api_key if api_key is not None else os.environ.get(s.llm_api_key_env) or None
        self.timeout = float(timeout if timeout is not None else s.llm_timeout)
        if not self.timeout > 0:
            raise ConfigError("the chat timeout must be a positive number of seconds")
        self.temperature = temperature
        self.json_mode = bool(s.llm_json_mode if json_mode is None else json_mode)

    def __repr__(self) -> str:
        return f"ChatClient(model={self.model!r}, base_url={self.base_url!r}, timeout={self.timeout})"

    def complete(self, messages: list[dict[str, str]], *, json_reply: bool = True) -> str:
        """The text of the first choice's message. ``json_reply`` asks for a JSON object
        (``response_format``). Raises pymem.TimeoutError (past ``timeout``), ConnectionError
        (unreachable, HTTP 408, 429 or 5xx), ConfigError (other 4xx: key, URL, model; or a redirect,
        which is never followed) or ValidationError (a reply that is not a chat completion, or
        larger than `MAX_REPLY_BYTES`)."""
        payload: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if json_reply and self.json_mode:
            payload["response_format"] = {"type": "json_object"}
        url = f"{self.base_url}/chat/completions"
        what = f"chat endpoint {url}"
        meter = _usage.get()
        if meter is not None:
            meter.calls += 1  # a request sent costs a call, answered or not
        reply = post_json(url, payload, what=what, timeout=self.timeout, max_bytes=MAX_REPLY_BYTES,
                          api_key=self._api_key, expecting="a chat completion")
        if meter is not None:
            usage = reply.get("usage") if isinstance(reply, dict) else None
            tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
            if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0:
                meter.tokens += tokens
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ValidationError(f"{what} answered without a chat completion: {str(reply)[:200]!r}") from exc
        if not isinstance(content, str):
            raise ValidationError(f"{what} answered a message without text content")
        return content


@dataclass
class Usage:
    """What the model calls made under `metered` cost: ``calls`` (requests sent by a
    `ChatClient`, answered or not) and ``tokens`` (``usage.total_tokens`` of the answers
    that report it)."""

    calls: int = 0
    tokens: int = 0


#: the meter of the job in hand (pymem.learning: a deferred learning job's cost)
_usage: ContextVar[Usage | None] = ContextVar("pymem_llm_usage", default=None)


@contextmanager
def metered() -> Iterator[Usage]:
    """Count the requests every `ChatClient` sends in this thread or task (and in the
    threads it starts with the context copied, as asyncio.to_thread does) while the block runs."""
    meter = Usage()
    token = _usage.set(meter)
    try:
        yield meter
    finally:
        _usage.reset(token)


# -- the learner -------------------------------------------------------------------------------
class ChatLearner:
    """A `Learner` (and a summarizer) over a `ChatClient` (default: one from the
    settings). ``version``: the prompts used (``pymem/prompts/*_<version>.txt``)."""

    def __init__(self, client: ChatClient | None = None, *, version: str = PROMPT_VERSION) -> None:
        self.client = client if client is not None else ChatClient()
        self.version = version
        self.prompts = {task: load_prompt(task, version) for task in ("extract", "reconcile", "summarize")}

    def __repr__(self) -> str:
        return f"ChatLearner({self.client!r}, version={self.version!r})"

    def _ask(self, task: str, content: Any, schema: type[BaseModel]) -> Any:
        reply = self.client.complete([{"role": "system", "content": self.prompts[task]},
                                      {"role": "user", "content": json.dumps(content, ensure_ascii=False)}])
        return parse_reply(reply, schema)

    def extract(self, message: str) -> list[str]:
        """Facts about the user in ``message`` (the user's message, never the assistant's)."""
        return list(dict.fromkeys(self._ask("extract", {"user_message": message}, _Extracted).facts))[:MAX_FACTS]

    def reconcile(self, candidates: list[str], stored: list[dict[str, Any]]) -> list[FactChange]:
        """One decision per candidate against ``stored`` (shown to the model by position, never
        by database id); NONE is dropped. A decision naming a candidate or stored fact that was
        not shown, or an UPDATE/DELETE without a stored fact, makes the whole reply invalid."""
        reply = self._ask("reconcile", {
            "stored": [{"number": i, "fact": f["content"]} for i, f in enumerate(stored)],
            "learned": [{"number": i, "fact": c} for i, c in enumerate(candidates)],
        }, _Decisions)
        changes = []
        for d in reply.decisions:
            if d.learned >= len(candidates):
                raise ValidationError(f"the chat model decided on learned fact {d.learned}; it was shown {len(candidates)}")
            if d.op == "NONE":
                continue
            content = d.content or candidates[d.learned]
            start, end = _when(d.valid_from), _when(d.valid_to)
            if start is not None and end is not None and start >= end:
                start = end = None  # an empty range: no valid time
            if d.op == "ADD":
                changes.append(FactChange("add", content, valid_from=start, valid_to=end))
                continue
            if d.stored is None or d.stored >= len(stored):
                raise ValidationError(f"the chat model's {d.op} names stored fact {d.stored}; it was shown {len(stored)}")
            # a DELETE retires the fact into the learned statement that says it is no longer true
            changes.append(FactChange(d.op.lower(), content if d.op == "UPDATE" else candidates[d.learned],
                                      int(stored[d.stored]["id"]), valid_from=start, valid_to=end))
        return changes

    def summarize(self, previous: str | None, messages: list[dict[str, Any]], max_chars: int) -> str:
        """A ``summarizer=``: ``previous`` with ``messages`` folded in, at most ``max_chars``."""
        reply = self._ask("summarize", {
            "summary_so_far": previous or "", "max_chars": max_chars,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        }, _Summary)
        return reply.summary[:max_chars]
