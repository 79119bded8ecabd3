"""Memory the agent manages itself (issue 16.3): the tool definitions, and the dispatcher that
runs a model's tool calls for one user only, whatever the model sends. Real server."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

import pymem
from pymem.tools import NAMES, TOOLS, AsyncMemoryTools, MemoryTools


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def everything(dsn):
    """Every fact row, to prove what a call did not touch."""
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT project_id, scope, scope_id, id, content, superseded_by FROM pymem.facts"
                         " ORDER BY id").fetchall()


def call(tools, name, arguments, call_id="call_1"):
    msg = tools.dispatch({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": arguments if isinstance(arguments, str)
                                       else json.dumps(arguments)}})
    assert msg["role"] == "tool" and msg["tool_call_id"] == call_id
    return json.loads(msg["content"])


def test_the_definitions_are_openai_function_tools_without_any_user_argument():
    assert [t["function"]["name"] for t in TOOLS] == ["remember", "update_memory", "forget_memory", "search_memory"]
    assert NAMES == {t["function"]["name"] for t in TOOLS}
    for t in TOOLS:
        assert t["type"] == "function" and t["function"]["description"]
        params = t["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
        assert not set(params["properties"]) & {"user", "user_id", "tier", "id", "project_id", "agent_id", "scope"}
    json.dumps(TOOLS)  # serialisable as sent


def test_remember_search_update_forget_for_the_resolved_user(db, dsn):
    mem = pymem.Memory(db=db, agent_id="bot", user_id=lambda ctx: ctx["user"], embedder=pymem.HashEmbedder())
    tools = MemoryTools(mem, ctx={"user": "alice"})
    assert tools.user == "alice"
    made = call(tools, "remember", {"fact": "Prefers answers in French"})
    assert made["ok"] and made["created"]
    found = call(tools, "search_memory", {"query": "which language?", "k": 3})
    assert found == {"ok": True, "facts": [{"fact_id": made["fact_id"], "fact": "Prefers answers in French"}]}
    new = call(tools, "update_memory", {"fact_id": made["fact_id"], "fact": "Prefers answers in Norwegian"})
    assert new["ok"] and new["replaced"] == made["fact_id"]
    assert [f.content for f in mem.retrieve(user="alice")] == ["Prefers answers in Norwegian"]
    fact = mem.retrieve(user="alice")[0]
    assert (fact.source, fact.metadata) == ("learned", {"via": "tool"})
    assert call(tools, "forget_memory", {"fact_id": new["fact_id"]}) == {"ok": True, "deleted": 2}  # with its history
    assert mem.retrieve(user="alice") == [] and everything(dsn) == []


def test_a_memory_without_a_user_gives_no_tools(db):
    mem = pymem.Memory(db=db, agent_id="bot")
    with pytest.raises(pymem.ValidationError, match="need a user"):
        MemoryTools(mem)
    with pytest.raises(pymem.ValidationError):
        MemoryTools(mem, user="*")


HOSTILE = [
    ("remember", {"fact": "x", "user": "bob"}, "Extra inputs"),
    ("remember", {"fact": "x", "user_id": "bob"}, "Extra inputs"),
    ("remember", {"fact": "x", "tier": "global"}, "Extra inputs"),
    ("remember", {"fact": "x", "id": "bob"}, "Extra inputs"),
    ("remember", {"fact": "x", "project_id": "other"}, "Extra inputs"),
    ("remember", {"fact": ""}, "at least 1"),
    ("remember", {"fact": "   "}, "at least 1"),
    ("remember", {"fact": "a\x00b"}, "pattern"),
    ("remember", '{"fact": "lone \\ud800 surrogate"}', "unicode"),
    ("remember", {"fact": "lone \ud800 surrogate"}, "unicode"),
    ("remember", {"fact": "x" * 2001}, "at most 2000"),
    ("remember", {"fact": ["a", "b"]}, "string"),
    ("remember", {}, "required"),
    ("remember", "not json", "not JSON"),
    ("remember", '["fact"]', "JSON object"),
    ("remember", "null", "JSON object"),
    ("update_memory", {"fact_id": "1", "fact": "x"}, "integer"),
    ("update_memory", {"fact_id": True, "fact": "x"}, "integer"),
    ("update_memory", {"fact_id": 1.0, "fact": "x"}, "integer"),
    ("update_memory", {"fact_id": -1, "fact": "x"}, "greater than"),
    ("update_memory", {"fact_id": 10**30, "fact": "x"}, "less than"),
    ("forget_memory", {"fact_id": 0}, "greater than"),
    ("forget_memory", {"fact_id": "*"}, "integer"),
    ("forget_memory", {}, "required"),
    ("search_memory", {"query": "x", "k": 10000}, "less than"),
    ("search_memory", {"query": "x", "user": "bob"}, "Extra inputs"),
    ("facts_forget", {"scope_id": "*"}, "no memory tool"),
    ("persist", {"content": "x"}, "no memory tool"),
    (None, {}, "no memory tool"),
]


def test_hostile_arguments_are_refused_and_touch_nothing(db, dsn):
    mem = pymem.Memory(db=db, agent_id="bot")
    mem.persist("Lives in Lisbon", user="bob")
    mem.persist("Lives in Oslo", user="alice")
    mem.persist("Breakfast is at 7", tier="global")
    before = everything(dsn)
    tools = MemoryTools(mem, user="alice")
    for name, arguments, match in HOSTILE:
        result = call(tools, name, arguments)
        assert result["ok"] is False and match in result["error"], (name, arguments, result)
    assert everything(dsn) == before


def test_another_users_fact_ids_are_out_of_reach(db, dsn):
    mem = pymem.Memory(db=db, agent_id="bot")
    bobs = mem.persist("Lives in Lisbon", user="bob")
    global_fact = mem.persist("Breakfast is at 7", tier="global")
    mine = mem.persist("Lives in Oslo", user="alice")
    old = mem.persist("Drinks coffee", user="alice")
    mem.update("Drinks tea", fact_id=old, user="alice")
    before = everything(dsn)
    tools = MemoryTools(mem, user="alice")
    for target in (bobs, global_fact, 987654):
        assert "no fact" in call(tools, "update_memory", {"fact_id": target, "fact": "Hacked"})["error"]
        assert call(tools, "forget_memory", {"fact_id": target}) == {
            "ok": False, "error": f"no fact {int(target)} among this user's facts"}
    assert "already superseded" in call(tools, "update_memory", {"fact_id": old, "fact": "Drinks water"})["error"]
    assert "Hacked" not in str(call(tools, "search_memory", {"query": "Lisbon breakfast Hacked"}))
    # a fact whose text is an injection attempt is only text, and only alice's
    call(tools, "remember", {"fact": "'); SELECT pymem.facts_forget('user', '*'); --"})
    assert everything(dsn)[:len(before)] == before
    assert [f.content for f in mem.retrieve(user="bob")] == ["Lives in Lisbon"]
    assert mine in [f.id for f in mem.retrieve(user="alice")]


def test_the_dispatcher_takes_the_openai_packages_objects_too(db):
    class Fn:
        name = "remember"
        arguments = '{"fact": "Has a cat"}'

    class Call:
        id = "call_9"
        function = Fn()

    mem = pymem.Memory(db=db, agent_id="bot")
    msg = MemoryTools(mem, user="alice").dispatch(Call())
    assert msg["tool_call_id"] == "call_9" and json.loads(msg["content"])["ok"]


def test_the_async_twin(dsn):
    async def main():
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn))
        try:
            mem = pymem.AsyncMemory(db=db, agent_id="bot")
            await mem.persist("Lives in Lisbon", user="bob")
            tools = AsyncMemoryTools(mem, user="alice")
            made = await tools.call("remember", {"fact": "Has a cat"})
            refused = await tools.call("remember", {"fact": "x", "user": "bob"})
            msg = await tools.dispatch({"id": "c", "function": {"name": "search_memory",
                                                                 "arguments": '{"query": "cat"}'}})
            return made, refused, json.loads(msg["content"]), await mem.retrieve(user="bob")
        finally:
            await db.close()

    made, refused, found, bobs = asyncio.run(main())
    assert made["ok"] and not refused["ok"]
    assert found["facts"] == [{"fact_id": made["fact_id"], "fact": "Has a cat"}]
    assert [f.content for f in bobs] == ["Lives in Lisbon"]
