"""Configuration: `Settings`, read from ``PYMEM_*`` environment variables.

With no DSN, pymem starts (or reuses) the embedded PostgreSQL server whose data lives in
``data_dir``. Each pooled connection carries the statement timeout as a startup option, and
statements are prepared on the server from their fifth execution on (psycopg's default). Behind
a pooler that does not pass the option on, the timeout goes with each call; behind one that
cannot keep prepared statements set ``prepare_threshold`` to None (docs/cli-and-configuration.md "Behind PgBouncer").
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs
import pydantic
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError, redact


#: PYMEM_* variables that are not settings: the test suite's and the CI scripts' own
_NOT_SETTINGS = ("PYMEM_TEST_", "PYMEM_VENDOR_DIR", "PYMEM_CITUS_", "PYMEM_PGBOUNCER_CACHE")
_warned: set[str] = set()
log = logging.getLogger("pymem")


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """The ``PYMEM_*`` variables of the environment that name no setting, each with the setting
    it resembles (difflib's close match: PYMEM_DNS -> PYMEM_DSN), or None; the test suite's and
    the CI scripts' own variables left out. ``pymem`` refuses to run with one that resembles a
    setting (a deploy check aimed at production must not pass on the embedded server)."""
    known = sorted(f"PYMEM_{name.upper()}" for name in Settings.model_fields)
    out = []
    for var in sorted(os.environ if environ is None else environ):
        if var.startswith("PYMEM_") and var not in known and not var.startswith(_NOT_SETTINGS):
            close = difflib.get_close_matches(var, known, n=1, cutoff=0.6)
            out.append((var, close[0] if close else None))
    return out


def _warn_unknown(cls: type[BaseSettings]) -> None:
    """One warning per process for each PYMEM_* variable that names no setting (a typo such as
    PYMEM_DNS would otherwise leave PYMEM_DSN unset, and the embedded server in use), with the
    closest setting's name: one line on the ``pymem`` logger (a Python warning would print its
    file and source line too)."""
    for var, close in unknown_variables():
        if var in _warned:
            continue
        _warned.add(var)
        log.warning("%s is not a pymem setting and is ignored%s", var, f" (did you mean {close}?)" if close else
                    " (docs/cli-and-configuration.md \"Configuration\" lists them)")


def default_data_dir() -> Path:
    """The user's data directory for pymem (e.g. ``~/.local/share/pymem`` on Linux)."""
    return Path(platformdirs.user_data_dir("pymem", appauthor=False))


class Settings(BaseSettings):
    """pymem's settings. Every field can be set as ``PYMEM_<FIELD>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="PYMEM_", env_parse_none_str="none", extra="forbid")

    dsn: str | None = Field(
        default=None, repr=False,  # it may hold the password
        description="libpq connection string or URI; empty means the embedded server.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Where the embedded server keeps its data (only used when dsn is empty).",
    )
    pool_min_size: int = Field(default=1, ge=0, description="Connections the pool keeps open.")
    pool_max_size: int = Field(default=10, ge=1, description="Most connections the pool opens.")
    pool_timeout: float = Field(
        default=30.0, gt=0,
        description="Seconds to wait for a free connection (and to connect, unless the DSN sets connect_timeout).",
    )
    statement_timeout_ms: int = Field(
        default=30_000,
        ge=0,
        description="Server-side timeout of each pymem statement: a startup option of each pooled "
        "connection (behind a pooler that refuses it: set with each call, transaction-locally); 0 = none.",
    )
    prepare_threshold: int | None = Field(
        default=5,
        ge=0,
        description="Executions before psycopg prepares a statement server-side (5, psycopg's default); "
        "none: never, for a transaction pooler older than PgBouncer 1.21 "
        "(docs/cli-and-configuration.md \"Behind PgBouncer\").",
    )
    application_name: str = Field(default="pymem", description="Shown in pg_stat_activity.")
    agent_id: str | None = Field(
        default=None, description="The agent of pymem.context()/pymem.record() (its global facts)."
    )
    project_id: str = Field(default="", description="The project (tenant) of pymem.context()/pymem.record().")
    owner_role: str | None = Field(default=None, description="Owner role name for migrate (docs/security.md).")
    app_role: str | None = Field(default=None, description="Application role name for migrate.")
    reader_role: str | None = Field(default=None, description="Read-only role name for migrate.")
    reader_dsn: str | None = Field(
        default=None,
        description="The memory page's read connections (pymem serve): a login role that is only a member of "
        "the reader role; unset: the login role's connections SET ROLE to it, which a session can undo.",
    )
    # the chat model of pymem.llm.ChatClient (learning and summaries; docs/learning.md)
    llm_base_url: str = Field(default="https://api.openai.com/v1",
                              description="Base URL of an OpenAI-compatible API (POST <url>/chat/completions).")
    llm_model: str | None = Field(default=None, description="The chat model's name; unset: no chat model.")
    llm_api_key_env: str = Field(default="OPENAI_API_KEY",
                                 description="The environment variable holding the API key (unset or empty: no key sent).")
    llm_timeout: float = Field(default=20.0, gt=0, description="Seconds a chat request may take in all.")
    llm_json_mode: bool = Field(default=True, description="Ask the chat model for a JSON object "
                                "(response_format); off for a server that refuses the field (the reply is still parsed as JSON).")

    def __init__(self, **values: Any) -> None:
        """As pydantic-settings reads them; a setting it refuses raises `pymem.ConfigError`
        naming the setting and why, never the values (pydantic's own message quotes the first
        characters of every input, PYMEM_DSN's password among them)."""
        try:
            super().__init__(**values)
        except pydantic.ValidationError as exc:
            dsn = values.get("dsn") if isinstance(values.get("dsn"), str) else os.environ.get("PYMEM_DSN")
            why = "; ".join(("PYMEM_" + "_".join(map(str, e["loc"])).upper() + ": " if e["loc"] else "")
                            + e["msg"].removeprefix("Value error, ")
                            for e in exc.errors(include_url=False, include_input=False, include_context=False))
            raise ConfigError(redact(f"invalid PYMEM_* setting: {why}", dsn)) from None

    def roles(self) -> dict[str, str | None]:
        """The role names to give pymem migrate (None: keep the recorded ones)."""
        return {"owner_role": self.owner_role, "app_role": self.app_role, "reader_role": self.reader_role}

    @model_validator(mode="after")
    def _check(self) -> Settings:
        _warn_unknown(type(self))
        if self.dsn is not None and not self.dsn.strip():
            self.dsn = None
        if self.pool_min_size > self.pool_max_size:
            raise ValueError(
                f"pool_min_size ({self.pool_min_size}) is larger than pool_max_size ({self.pool_max_size})"
            )
        return self
