"""The bearer tokens of the MCP server over HTTP (sql/api/mcp.sql; ``pymem mcp-token``;
docs/integrations.md "MCP", docs/security.md "The MCP server").

A token serves one user of one project (and one agent, or none). It is made here
(`new_token`: 256 random bits), printed once, and only its sha256 goes to the database:
the token never reaches the server, its logs or its backups. The MCP server
(`pymem.integrations.mcp_server`) looks up the hash of each request's token
(`alookup_token`) before any tool runs. This module does not import the ``mcp`` SDK.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from . import calls
from .database import AsyncDatabase, Database
from .errors import NotFoundError, ValidationError
from .runner import afetch, fetch
from .values import text

#: every token starts with this, so a leaked one is recognisable (secret scanners, logs)
TOKEN_PREFIX = "pymem_mcp_"
#: a bearer value longer than this is no token of ours (refused before hashing)
MAX_TOKEN_LENGTH = 200


@dataclass(frozen=True)
class McpToken:
    """A token as ``pymem mcp-token list`` shows it: never the token, never its hash."""

    id: int
    project_id: str
    user_id: str
    agent_id: str | None
    created_at: datetime | None
    revoked_at: datetime | None = None


@dataclass(frozen=True)
class TokenIdentity:
    """Whom a token serves: the project, user and agent every tool call of its requests runs as."""

    id: int
    project_id: str
    user_id: str
    agent_id: str | None


def new_token() -> str:
    """A new random token (``pymem_mcp_`` and 43 URL-safe characters: 256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> bytes:
    """The sha256 of a token, the only form of it the database holds."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def _plausible(token: object) -> bool:
    return isinstance(token, str) and 0 < len(token) <= MAX_TOKEN_LENGTH and token.isascii()


def create_token(db: Database, *, user: str, project_id: str = "",
                 agent_id: str | None = None) -> tuple[str, McpToken]:
    """Make a token for ``user`` of ``project_id`` (and ``agent_id``); returns the token (shown
    once: it cannot be read back) and its record."""
    user_id = text(user, "user")
    if not user_id.strip() or user_id == "*":
        raise ValidationError("a token serves one user: pass a real user id")
    project = text(project_id, "project_id")
    agent = None if agent_id is None else text(agent_id, "agent_id")
    token = new_token()
    row = fetch(calls.mcp_token_create(project_id=project, user_id=user_id, agent_id=agent,
                                          token_hash=token_hash(token)), db)[0]
    return token, McpToken(row["id"], project, user_id, agent, row["created_at"])


def list_tokens(db: Database, project_id: str = "", *, limit: int = 1000) -> list[McpToken]:
    """The project's tokens, newest first (revoked ones too, with ``revoked_at``)."""
    project = text(project_id, "project_id")
    return [McpToken(r["id"], project, r["user_id"], r["agent_id"], r["created_at"], r["revoked_at"])
            for r in fetch(calls.mcp_token_list(project_id=project, max_rows=limit), db)]


def lookup_token(db: Database, token: str) -> TokenIdentity | None:
    """Whom ``token`` serves; None for an unknown or revoked one (or one of a project the
    database login may not serve)."""
    if not _plausible(token):
        return None
    rows = fetch(calls.mcp_token_lookup(token_hash=token_hash(token)), db)
    return TokenIdentity(**rows[0]) if rows else None


async def alookup_token(db: AsyncDatabase, token: str) -> TokenIdentity | None:
    """The asyncio twin of `lookup_token` (the HTTP server's check of every request)."""
    if not _plausible(token):
        return None
    rows = await afetch(calls.mcp_token_lookup(token_hash=token_hash(token)), db)
    return TokenIdentity(**rows[0]) if rows else None


def revoke_token(db: Database, token_or_id: str | int, project_id: str = "") -> TokenIdentity | int:
    """Revoke a token, named by the token itself (its project is found from it) or by its id in
    ``project_id``. Returns what was revoked (the identity, or the id); NotFoundError when there
    is no such active token."""
    if isinstance(token_or_id, int) or (isinstance(token_or_id, str) and token_or_id.isdigit()):
        token_id = int(token_or_id)
        project = text(project_id, "project_id")
        if not fetch(calls.mcp_token_revoke(project_id=project, id=token_id), db):
            raise NotFoundError(f"no active MCP token {token_id} in project {project!r}")
        return token_id
    found = lookup_token(db, token_or_id)
    if found is None or not fetch(calls.mcp_token_revoke(project_id=found.project_id, id=found.id), db):
        raise NotFoundError("no active MCP token matches the token given")
    return found
