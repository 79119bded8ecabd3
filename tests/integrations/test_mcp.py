"""`pymem mcp` driven by the MCP SDK's own client: stdio (the CLI launched as a subprocess) and
streamable HTTP (bearer tokens of `pymem mcp-token`), hostile arguments, two users at once, a
revoked token, a wrong Origin; the tokens' SQL (hash only, tenant-bound lookup); the client
configuration of docs/integrations.md launched as written."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import psycopg
import pytest

import pymem
from pymem import mcp as tokens
from pymem.tools import NAMES

mcp = pytest.importorskip("mcp")
import httpx2  # noqa: E402  (the SDK's HTTP client)
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "mcp-test"


def _env(dsn: str, **extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**{k: v for k, v in os.environ.items() if k.startswith(("PYMEM_", "PATH", "HOME", "LANG"))},
            "PYTHONPATH": path, "PYMEM_DSN": dsn, **extra}


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pymem.cli", *args], capture_output=True, text=True,
                          env=_env(dsn), timeout=120, cwd=ROOT)


def _result(r) -> dict:
    """A tool result: its text is JSON, and the same object is the structured content."""
    assert len(r.content) == 1 and r.content[0].type == "text"
    body = json.loads(r.content[0].text)
    assert r.structured_content == body
    assert bool(r.is_error) == (not body["ok"])
    return body


@asynccontextmanager
async def _stdio(dsn: str, *args: str):
    params = StdioServerParameters(command=sys.executable, args=["-m", "pymem.cli", "mcp", *args],
                                   env=_env(dsn), cwd=str(ROOT))
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def _http(url: str, token: str | None, **headers: str):
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers={**auth, **headers}, timeout=30) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def test_stdio_tools_identity_and_hostile_arguments(dsn):
    async def main():
        async with _stdio(dsn, "--user", "alice", "--project", PROJECT) as s:
            listed = (await s.list_tools()).tools
            names = {t.name for t in listed}
            assert names == set(NAMES) | {"list_memories", "get_context"}
            for t in listed:
                schema = t.input_schema
                assert schema["additionalProperties"] is False, t.name
                assert not {"user", "user_id", "project_id", "agent_id"} & set(schema["properties"]), t.name
                assert len(t.description) > 40
            # the same definitions as pymem.tools
            from pymem.tools import TOOLS
            ours = {d["function"]["name"]: d["function"] for d in TOOLS}
            for t in listed:
                if t.name in ours:
                    assert t.description == ours[t.name]["description"]
                    assert t.input_schema == ours[t.name]["parameters"]

            made = _result(await s.call_tool("remember", {"fact": "Alice lives in Bergen"}))
            assert made["ok"] and made["fact_id"] > 0
            other = _result(await s.call_tool("remember", {"fact": "Alice keeps bees"}))
            found = _result(await s.call_tool("search_memory", {"query": "where does Alice live?", "k": 1}))
            assert [f["fact_id"] for f in found["facts"]] == [made["fact_id"]]
            page = _result(await s.call_tool("list_memories", {"limit": 1}))
            assert [f["fact"] for f in page["facts"]] == ["Alice keeps bees"] and page["next_offset"] == 1
            page2 = _result(await s.call_tool("list_memories", {"limit": 1, "offset": 1}))
            assert [f["fact"] for f in page2["facts"]] == ["Alice lives in Bergen"] and page2["next_offset"] is None
            far = _result(await s.call_tool("list_memories", {"limit": 100, "offset": 9_999}))
            assert far == {"ok": True, "facts": [], "next_offset": None}
            ctx = _result(await s.call_tool("get_context", {"query": "Where do I live?"}))
            assert "Alice lives in Bergen" in ctx["context"]
            upd = _result(await s.call_tool("update_memory", {"fact_id": made["fact_id"], "fact": "Alice lives in Oslo"}))
            assert upd["ok"]
            gone = _result(await s.call_tool("forget_memory", {"fact_id": other["fact_id"]}))
            assert gone["ok"]

            hostile = [
                ("remember", {"fact": "x", "user": "bob"}, "identity"),
                ("search_memory", {"query": "x", "project_id": "other"}, "identity"),
                ("list_memories", {"agent_id": "a"}, "identity"),
                ("remember", {"fact": "x", "extra": 1}, "extra"),
                ("remember", {"fact": "x" * 100_000}, "at most"),
                ("remember", {"fact": ""}, "at least"),
                ("search_memory", {"query": "x", "k": 10_000}, "less than"),
                ("list_memories", {"offset": -1}, "greater than"),
                ("forget_memory", {"fact_id": "1; DROP TABLE pymem.facts"}, "integer"),
                ("forget_memory", {"fact_id": 999_999_999}, "no fact"),
                ("drop_everything", {}, "no memory tool"),
            ]
            for name, args, said in hostile:
                r = _result(await s.call_tool(name, args))
                assert not r["ok"] and said in r["error"], (name, args, r)
        # what the calls left: alice's one fact, in project mcp-test, nothing for bob
        async with _stdio(dsn, "--user", "bob", "--project", PROJECT) as s:
            assert _result(await s.call_tool("list_memories", {}))["facts"] == []
            r = _result(await s.call_tool("forget_memory", {"fact_id": made["fact_id"]}))
            assert not r["ok"]  # alice's fact is not among bob's
        return made

    asyncio.run(main())
    with pymem.Memory(db=pymem.Database(pymem.Settings(dsn=dsn)), project_id=PROJECT) as mem:
        assert [f.content for f in mem.retrieve(user="alice")] == ["Alice lives in Oslo"]
        assert mem.retrieve(user="bob") == []


def test_stdio_needs_a_user(dsn):
    p = _cli(dsn, "mcp")
    assert p.returncode == 2 and "--user" in p.stderr


def test_tokens_stored_as_hashes_and_bound_to_tenants(dsn, as_role):
    db = pymem.Database(pymem.Settings(dsn=dsn))
    try:
        token, record = tokens.create_token(db, user="alice", project_id="A", agent_id="bot")
        assert token.startswith("pymem_mcp_") and len(token) > 50
        found = tokens.lookup_token(db, token)
        assert (found.project_id, found.user_id, found.agent_id) == ("A", "alice", "bot")
        assert tokens.lookup_token(db, token + "x") is None and tokens.lookup_token(db, "") is None
        assert [t.id for t in tokens.list_tokens(db, "A")] == [record.id] and tokens.list_tokens(db, "B") == []
    finally:
        db.close()
    with psycopg.connect(dsn) as c:
        stored = c.execute("SELECT token_hash FROM pymem.mcp_tokens").fetchall()
        assert stored == [(tokens.token_hash(token),)]
        dump = c.execute("SELECT t::text FROM pymem.mcp_tokens AS t").fetchone()[0]
        assert token not in dump
    # a login role bound to project B cannot find A's token, nor list A's, nor read the table
    bound, free = as_role("mcp_bound_b"), as_role("mcp_free")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO mcp_bound_b, mcp_free")
        c.execute("SELECT pymem.tenant_bind('mcp_bound_b', 'B')")
    sought = tokens.token_hash(token)
    with psycopg.connect(bound, autocommit=True) as b:
        assert b.execute("SELECT * FROM pymem.mcp_token_lookup(%s)", (sought,)).fetchall() == []
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            b.execute("SELECT * FROM pymem.mcp_token_list(project_id => 'A')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            b.execute("SELECT * FROM pymem.mcp_tokens")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            b.execute("SELECT * FROM pymem.mcp_token_revoke(project_id => 'A', id => %s)", (record.id,))
    with psycopg.connect(free, autocommit=True) as f:  # an unbound app role finds it, and nothing else
        assert f.execute("SELECT project_id, user_id FROM pymem.mcp_token_lookup(%s)", (sought,)).fetchall() \
            == [("A", "alice")]
        with f.transaction():
            f.execute("SELECT * FROM pymem.mcp_token_lookup(%s)", (sought,)).fetchall()
            assert f.execute("SELECT current_setting('pymem.mcp_token', true)").fetchone()[0] in ("", None)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            f.execute("SELECT * FROM pymem.mcp_tokens")


@contextmanager
def _serve_http(dsn: str):
    proc = subprocess.Popen([sys.executable, "-m", "pymem.cli", "mcp", "--http", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(dsn), cwd=ROOT)
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://\S+/mcp)", line)
        assert match, (line, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        yield match.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def http_server(dsn):
    with _serve_http(dsn) as url:
        yield url


def test_http_server_as_a_bound_role_serves_its_projects_only(dsn, as_role):
    """The server's login may be a role bound to its projects: a token of another project gets 401."""
    login = as_role("mcp_server_bound")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO mcp_server_bound")
        c.execute("SELECT pymem.tenant_bind('mcp_server_bound', %s)", (PROJECT,))
    mine = _cli(dsn, "mcp-token", "create", "--user", "alice", "--project", PROJECT).stdout.strip()
    theirs = _cli(dsn, "mcp-token", "create", "--user", "alice", "--project", "other").stdout.strip()

    async def main(url: str):
        async with _http(url, mine) as s:
            assert _result(await s.call_tool("remember", {"fact": "Served by a bound role"}))["ok"]
        async with httpx2.AsyncClient(timeout=30) as c:
            r = await c.post(url, headers={"Authorization": f"Bearer {theirs}",
                                           "Accept": "application/json, text/event-stream"},
                             json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert r.status_code == 401

    with _serve_http(login) as url:
        asyncio.run(main(url))


def test_http_tokens_two_users_at_once_and_revocation(dsn, http_server):
    alice = _cli(dsn, "mcp-token", "create", "--user", "alice", "--project", PROJECT)
    bob = _cli(dsn, "mcp-token", "create", "--user", "bob", "--project", PROJECT)
    other = _cli(dsn, "mcp-token", "create", "--user", "alice", "--project", "elsewhere")
    assert alice.returncode == 0, alice.stderr
    t_alice, t_bob, t_other = alice.stdout.strip(), bob.stdout.strip(), other.stdout.strip()
    assert "shown once" in alice.stderr
    listed = [json.loads(x) for x in _cli(dsn, "mcp-token", "list", "--project", PROJECT).stdout.splitlines()]
    assert sorted(t["user_id"] for t in listed) == ["alice", "bob"]
    assert all(t_alice not in json.dumps(t) for t in listed)

    async def main():
        async with _http(http_server, t_alice) as a, _http(http_server, t_bob) as b, _http(http_server, t_other) as o:
            await asyncio.gather(*(a.call_tool("remember", {"fact": f"Alice fact {i}"}) for i in range(5)),
                                 *(b.call_tool("remember", {"fact": f"Bob fact {i}"}) for i in range(5)),
                                 o.call_tool("remember", {"fact": "Alice elsewhere"}))
            la, lb, lo = await asyncio.gather(a.call_tool("list_memories", {"limit": 100}),
                                              b.call_tool("list_memories", {"limit": 100}),
                                              o.call_tool("list_memories", {"limit": 100}))
            assert sorted(f["fact"] for f in _result(la)["facts"]) == [f"Alice fact {i}" for i in range(5)]
            assert sorted(f["fact"] for f in _result(lb)["facts"]) == [f"Bob fact {i}" for i in range(5)]
            assert [f["fact"] for f in _result(lo)["facts"]] == ["Alice elsewhere"]
            bob_fact = _result(lb)["facts"][0]["fact_id"]
            r = _result(await a.call_tool("forget_memory", {"fact_id": bob_fact}))
            assert not r["ok"]
            r = _result(await a.call_tool("search_memory", {"query": "Bob fact", "user": "bob"}))
            assert not r["ok"] and "identity" in r["error"]

    asyncio.run(main())

    async def status(token: str | None, fact: str | None = None, **headers: str) -> int:
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        call = {"name": "remember", "arguments": {"fact": fact}} if fact else {"name": "list_memories", "arguments": {}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
        async with httpx2.AsyncClient(timeout=30) as c:
            r = await c.post(http_server, json=body, headers={**auth, "Accept": "application/json, text/event-stream",
                                                                "MCP-Protocol-Version": "2025-06-18", **headers})
            return r.status_code

    assert asyncio.run(status(None)) == 401
    assert asyncio.run(status(None, "x" * 1_000_000)) == 401  # before anything reads the body
    assert asyncio.run(status(t_other, "x" * 1_000_000)) == 413
    assert asyncio.run(status("pymem_mcp_wrong")) == 401
    assert asyncio.run(status("x" * 10_000)) == 401
    revoke = _cli(dsn, "mcp-token", "revoke", t_bob)
    assert revoke.returncode == 0, revoke.stderr
    assert asyncio.run(status(t_bob)) == 401
    again = _cli(dsn, "mcp-token", "revoke", t_bob)
    assert again.returncode == 1 and "no active MCP token" in again.stderr
    by_id = _cli(dsn, "mcp-token", "revoke", str(next(t["id"] for t in listed if t["user_id"] == "alice")),
                 "--project", PROJECT)
    assert by_id.returncode == 0, by_id.stderr
    assert asyncio.run(status(t_alice)) == 401
    # DNS rebinding: a foreign Origin or Host is refused even with a good token
    assert asyncio.run(status(t_other, Origin="http://evil.example")) in (400, 403, 421)
    assert asyncio.run(status(t_other, Host="evil.example:80")) in (400, 403, 421)
    assert asyncio.run(status(t_other, Origin="http://localhost:1234")) == 200


def test_http_refuses_identity_options_and_warns_off_loopback(dsn):
    p = _cli(dsn, "mcp", "--http", "--user", "alice")
    assert p.returncode == 2 and "token" in p.stderr
    from pymem.integrations.mcp_server import warning_for
    assert warning_for("127.0.0.1") is None and warning_for("::1") is None
    assert "WARNING" in warning_for("0.0.0.0")
    from pymem.integrations.mcp_server import transport_security
    wide = transport_security("0.0.0.0", ["memory.internal"])
    assert "memory.internal:*" in wide.allowed_hosts and "https://memory.internal" in wide.allowed_origins
    assert not any("0.0.0.0" in h for h in wide.allowed_hosts)


def test_missing_extra_says_which_to_install(dsn, tmp_path):
    # a directory on the path whose `mcp` cannot be imported stands for the missing extra
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError('no', name='mcp')\n")
    env = _env(dsn)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    p = subprocess.run([sys.executable, "-m", "pymem.cli", "mcp", "--user", "a"], capture_output=True, text=True,
                       env=env, timeout=60, cwd=ROOT)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == ["pymem mcp needs the mcp extra: pip install 'pymem-pg[mcp]'"]


def test_client_configuration_of_the_docs_launches(dsn):
    """docs/integrations.md's JSON snippet for Claude Desktop / Cursor, parsed and launched as written
    (its command and arguments; the DSN and path are this test's)."""
    page = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    snippet = re.search(r"```json\n(.*?)```", page, re.S)
    assert snippet, "docs/integrations.md has the client configuration as a ```json block"
    config = json.loads(snippet.group(1))
    server = config["mcpServers"]["pymem"]
    assert server["command"] == "pymem" and server["args"][0] == "mcp"
    script = Path(sys.executable).with_name("pymem")
    command = str(script) if script.exists() else sys.executable
    args = server["args"] if script.exists() else ["-m", "pymem.cli", *server["args"]]
    env = {**_env(dsn), **{k: v for k, v in server.get("env", {}).items() if k != "PYMEM_DSN"}}

    async def main():
        params = StdioServerParameters(command=command, args=args, env=env, cwd=str(ROOT))
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    r = _result(await session.call_tool("remember", {"fact": "Configured from the docs"}))
                    assert r["ok"]
                    return {t.name for t in (await session.list_tools()).tools}

    assert "get_context" in asyncio.run(main())
