"""``pymem mcp``: pymem's memory tools as an MCP server, on the official ``mcp`` SDK (the
``[mcp]`` extra; docs/integrations.md "MCP", docs/security.md "The MCP server").

Tools: the agent tools of `pymem.tools` (``remember``, ``update_memory``,
``forget_memory``, ``search_memory``: their names, descriptions, schemas and handler, one
source), plus ``list_memories`` (the user's active facts, newest first, a page at a time) and
``get_context`` (the composed context for a query, as text). Every input schema refuses
unknown arguments (``additionalProperties: false``) and so does the server. A result is JSON
text plus the same object as structured content; a call the model got wrong is a result with
``isError`` (``{"ok": false, "error": ...}``), never a protocol error.

Identity is never the model's: no tool takes a user, project or agent, and a call naming one is
refused. Over stdio the server is bound at start to one project, agent and user
(``pymem mcp --user U``). Over streamable HTTP (``pymem mcp --http``) each request is served as
the user of its bearer token (``pymem mcp-token create``; `pymem.mcp`): no token, a wrong
one or a revoked one gets 401 before any tool runs, and the token is checked again on every
request. The calls go through the same API functions as every other door, with the server's
database login (its role's tenant bindings apply).
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import mcp_types as types
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl, Field

from .. import __version__
from ..database import AsyncDatabase
from ..embedders import HashEmbedder
from ..errors import ConflictError, NotFoundError, ValidationError
from ..mcp import TokenIdentity, alookup_token
from ..memory import AsyncMemory
from ..tools import _TOOLS, AsyncMemoryTools, _Args, _parse, _schema, _Text
from ..web import is_loopback

#: argument names that would choose whose memory a call reads: refused with their own message
IDENTITY_ARGUMENTS = frozenset({"user", "user_id", "userId", "project", "project_id", "projectId", "agent",
                                "agent_id", "agentId", "tier", "scope", "scope_id", "tenant"})
#: the largest HTTP request body served (413 past it): a tool call's texts are at most 2,000 characters
MAX_REQUEST_BODY = 256 * 1024
#: the most facts list_memories reaches (offset + limit): a page of a long list is cheap, a huge offset not
MAX_LISTED = 10_000


class _List(_Args):
    limit: Annotated[int, Field(ge=1, le=100)] = 20
    offset: Annotated[int, Field(ge=0, le=MAX_LISTED - 1)] = 0


class _GetContext(_Args):
    query: _Text


_EXTRA: dict[str, tuple[type[_Args], str]] = {
    "list_memories": (_List, "List the facts stored about the user you are talking to, newest first, each with its "
                             "fact_id: `limit` facts (1-100, default 20) after skipping `offset`; when more remain, "
                             "the result's next_offset is the offset of the next page."),
    "get_context": (_GetContext, "Get what memory knows that is relevant to a query, composed as one text: the "
                                 "agent's and the user's facts, the conversation's summary and recalled messages. "
                                 "Call it before answering a question that may depend on earlier conversations."),
}

_READ_ONLY = {"search_memory", "list_memories", "get_context"}


def tool_list() -> list[types.Tool]:
    """The server's tools: pymem.tools' four (their own schemas and descriptions) and the two reads."""
    tools = []
    for name, (model, description) in {**_TOOLS, **_EXTRA}.items():
        annotations = types.ToolAnnotations(read_only_hint=name in _READ_ONLY,
                                            destructive_hint=name == "forget_memory" or None,
                                            idempotent_hint=name in _READ_ONLY or None, open_world_hint=False)
        tools.append(types.Tool(name=name, description=description, input_schema=_schema(model),
                                annotations=annotations))
    return tools


@dataclass(frozen=True)
class Identity:
    """Whom a call serves: fixed at start (stdio) or by the request's token (HTTP)."""

    project_id: str
    user_id: str
    agent_id: str | None = None


class MemoryServer:
    """The MCP server over one `pymem.AsyncDatabase`: ``identity`` for stdio, None for
    HTTP (each request's token names it)."""

    def __init__(self, db: AsyncDatabase, *, identity: Identity | None = None, embedder: Any = None) -> None:
        self.db = db
        self.identity = identity
        self.embedder = embedder if embedder is not None else HashEmbedder()
        self._memories: dict[tuple[str, str | None], AsyncMemory] = {}
        self.server: Server[Any] = Server(
            "pymem", version=__version__,
            instructions="Long-term memory of the user you are talking to. Search or list it before answering "
                         "questions about the user; remember durable facts the user tells you; update or forget "
                         "a fact by its fact_id when the user corrects it or asks you to forget it.",
            on_list_tools=self._list_tools, on_call_tool=self._call_tool)

    def memory(self, identity: Identity) -> AsyncMemory:
        key = (identity.project_id, identity.agent_id)
        if key not in self._memories:
            self._memories[key] = AsyncMemory(db=self.db, project_id=identity.project_id,
                                              agent_id=identity.agent_id, embedder=self.embedder)
        return self._memories[key]

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list())

    def _caller(self, ctx: Any) -> Identity:
        if self.identity is not None:
            return self.identity
        user = getattr(getattr(ctx, "request", None), "scope", {}).get("user")
        access = getattr(user, "access_token", None)
        claims = getattr(access, "claims", None) or {}
        if "pymem_user_id" not in claims:  # the bearer middleware ran before: never reached without a token
            raise PermissionError("no authenticated MCP token for this request")
        return Identity(claims["pymem_project_id"], claims["pymem_user_id"], claims.get("pymem_agent_id"))

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        identity = self._caller(ctx)
        result = await self.call(identity, params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False, default=str))],
            structured_content=result, is_error=not result.get("ok", False))

    async def call(self, identity: Identity, name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Run tool ``name`` for ``identity``; ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``."""
        arguments = dict(arguments or {})
        named = sorted(IDENTITY_ARGUMENTS & set(arguments))
        if named:
            return {"ok": False, "error": f"{name}: {', '.join(named)}: identity is fixed by the server "
                                          "(its token or its start), never chosen in a call"}
        memory = self.memory(identity)
        if name in _TOOLS:
            return await AsyncMemoryTools(memory, user=identity.user_id).call(name, arguments)
        try:
            args = _parse(name, arguments, {**_TOOLS, **_EXTRA})
            if isinstance(args, _List):
                end = args.offset + args.limit
                found = await memory.retrieve(None, user=identity.user_id, limit=min(end + 1, MAX_LISTED))
                page = found[args.offset:end]
                more = len(found) > end
                return {"ok": True, "facts": [{"fact_id": f.id, "fact": f.content,
                                               "created_at": f.created_at.isoformat() if f.created_at else None}
                                              for f in page],
                        "next_offset": args.offset + args.limit if more else None}
            assert isinstance(args, _GetContext)
            context = await memory.read(args.query, user=identity.user_id)
            parts = [m for m in context.messages if m.get("role") != "user" or m.get("content") != args.query]
            text = "\n\n".join(m["content"] for m in parts if m.get("content")) or "(nothing stored yet)"
            return {"ok": True, "context": text, "user_facts": list(context.user_facts),
                    "agent_facts": list(context.agent_facts), "summary": context.summary}
        except (ValidationError, NotFoundError, ConflictError) as exc:
            return {"ok": False, "error": str(exc)[:500]}


class TokenVerifier:
    """The SDK's bearer check: a request's token looked up by its sha256 (pymem.mcp_token_lookup)
    on every request, so a revoked token is refused from the next request on."""

    def __init__(self, db: AsyncDatabase) -> None:
        self.db = db

    async def verify_token(self, token: str) -> AccessToken | None:
        found: TokenIdentity | None = await alookup_token(self.db, token)
        if found is None:
            return None
        return AccessToken(token=token, client_id=f"pymem-mcp-token-{found.id}", scopes=[], subject=found.user_id,
                           claims={"pymem_project_id": found.project_id, "pymem_user_id": found.user_id,
                                   "pymem_agent_id": found.agent_id})


def transport_security(host: str, allowed_hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """Host and Origin checks against DNS rebinding (the MCP specification's): loopback names,
    the bound address (unless a wildcard) and ``allowed_hosts`` (the names clients reach it by,
    e.g. behind a proxy: ``--allowed-host``); a request naming another is refused."""
    names = ["127.0.0.1", "localhost", "[::1]"]
    for name in [host, *allowed_hosts]:
        if not is_loopback(name.strip("[]")) and name not in ("0.0.0.0", "::", "[::]"):
            names.append(f"[{name.strip('[]')}]" if ":" in name else name)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=[f"{n}:*" for n in names] + names,
                                     allowed_origins=[f"{scheme}://{n}:*" for n in names for scheme in ("http", "https")]
                                     + [f"{scheme}://{n}" for n in names for scheme in ("http", "https")])


def http_app(memory_server: MemoryServer, host: str, allowed_hosts: Sequence[str] = ()) -> Any:
    """The Starlette app of the streamable HTTP transport at ``/mcp``: bearer tokens required
    (401 before any tool runs), Host and Origin checked, bodies bounded (``MAX_REQUEST_BODY``),
    stateless (each request stands alone, as the user of its own token)."""
    auth = AuthSettings(issuer_url=AnyHttpUrl("http://127.0.0.1"), resource_server_url=None, required_scopes=[])
    return memory_server.server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=host,
        max_request_body_size=MAX_REQUEST_BODY,
        transport_security=transport_security(host, allowed_hosts), auth=auth, token_verifier=TokenVerifier(memory_server.db))


def warning_for(host: str) -> str | None:
    """The warning printed when the server is reachable from other machines (None on loopback)."""
    if is_loopback(host.strip("[]")):
        return None
    return (f"pymem mcp: WARNING: listening on {host}: anyone who can reach this address can try tokens, and "
            "tokens travel in clear over plain http. Bind to 127.0.0.1 unless a TLS-terminating proxy is in front.")


async def serve_stdio(db: AsyncDatabase, identity: Identity) -> None:
    """Serve one client over stdin/stdout as ``identity``."""
    memory_server = MemoryServer(db, identity=identity)
    async with stdio_server() as (read, write):
        await memory_server.server.run(read, write, memory_server.server.create_initialization_options())


async def serve_http(db: AsyncDatabase, host: str, port: int, allowed_hosts: Sequence[str] = ()) -> None:
    """Serve streamable HTTP on ``host:port`` (0: a free port); prints the URL on stdout once
    listening."""
    memory_server = MemoryServer(db)
    app = http_app(memory_server, host, allowed_hosts)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(2048)  # listening before the URL is printed: a client may connect at once (queued until served)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    print(f"pymem mcp: http://{shown}:{bound}/mcp (streamable HTTP; a bearer token from `pymem mcp-token create` "
          "per request)", flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()


def main(settings: Any, *, http: bool, host: str, port: int, user: str | None, project: str | None,
         agent: str | None, allowed_hosts: Sequence[str] = ()) -> int:
    """``pymem mcp``: the exit code."""
    import asyncio

    if not http:
        if not user:
            print("pymem mcp: a stdio server serves one user: pass --user ID", file=sys.stderr)
            return 2
        identity = Identity(settings.project_id if project is None else project, user,
                            settings.agent_id if agent is None else agent)
        if identity.user_id == "*" or (identity.agent_id is not None and identity.agent_id.strip() in ("", "*")):
            raise ValidationError("pymem mcp: --user and --agent must be real ids, not '*' or empty")
    elif user or project or agent:
        print("pymem mcp: over --http each request's token names the user; --user, --project and --agent are for "
              "stdio (pymem mcp-token create --user ...)", file=sys.stderr)
        return 2
    warning = warning_for(host) if http else None
    if warning:
        print(warning, file=sys.stderr)

    async def run() -> None:
        db = await AsyncDatabase.open(settings)
        try:
            if http:
                await serve_http(db, host, port, allowed_hosts)
            else:
                await serve_stdio(db, identity)
        finally:
            await db.close()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    return 0
