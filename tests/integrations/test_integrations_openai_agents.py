"""pymem.integrations.openai_agents.PymemSession, the OpenAI Agents SDK's Session, on the real
server: items round-trip exactly (messages and the other items), limit, pop, clear, per-user
isolation, the thread is pymem's own conversation (recall, forget_user), and an Agent run
through Runner.run(..., session=...) with the SDK's own scripted model (no network)."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call

import pymem
from pymem import AsyncMemory, HashEmbedder
from pymem.integrations.openai_agents import ITEM_KEY, PymemSession

from conftest import blocks as doc_blocks

PROJECT = "agents-sdk"
set_tracing_disabled(True)  # no trace export (it would try the network)

ITEMS = [
    {"role": "user", "content": "I live in Oslo and I like skiing."},
    {"role": "developer", "content": "Answer briefly."},
    {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "https://example.invalid/a.png", "detail": "auto"}]},
    {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather",
     "arguments": "{\"city\":\"Oslo\"}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21°C"},
    {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": None},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "It is sunny in Oslo.", "annotations": [], "logprobs": []}]},
    {"role": "assistant", "content": "nul \x00 and emoji 🎿 and a big number", "extra": 12345678901234567890,
     "nested": {"b": 1.5, "a": [True, None]}},
]


def run(coro):
    return asyncio.run(coro)


async def _memory(dsn: str) -> AsyncMemory:
    db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn))
    return AsyncMemory(db=db, project_id=PROJECT, embedder=HashEmbedder())


def test_items_round_trip_exactly_in_order(dsn):
    async def go():
        mem = await _memory(dsn)
        session = PymemSession("s1", user="alice", memory=mem)
        assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
        assert await session.get_items() == []
        await session.add_items(ITEMS[:3])
        await session.add_items(ITEMS[3:])
        await session.add_items([])
        items = await session.get_items()
        # and the stored messages: roles and recallable text
        window = await mem.window(user="alice", thread="s1", size=100)
        await mem.db.close()
        return items, window

    items, window = run(go())
    assert items == ITEMS
    assert [json.dumps(i) for i in items] == [json.dumps(i) for i in ITEMS]  # key order too
    assert [m.role for m in window] == ["user", "system", "user", "assistant", "tool", "assistant", "assistant",
                                        "assistant"]
    assert [m.content for m in window][:5] == [
        "I live in Oslo and I like skiing.", "Answer briefly.", "What is this?\n[input_image]",
        "get_weather({\"city\":\"Oslo\"})", "Sunny, 21°C"]
    assert window[5].content == "[reasoning]"
    assert window[6].content == "It is sunny in Oslo."
    assert "\x00" not in window[7].content and all(ITEM_KEY in m.metadata for m in window)


def test_limit_pop_and_clear(dsn):
    async def go():
        mem = await _memory(dsn)
        session = PymemSession("s2", user="alice", memory=mem)
        await session.add_items([{"role": "user", "content": f"m{i}"} for i in range(5)])
        got = {
            "2": await session.get_items(limit=2),
            "0": await session.get_items(limit=0),
            "99": await session.get_items(limit=99),
            "-1": await session.get_items(limit=-1),
            "20000": await session.get_items(limit=20000),
        }
        limited = PymemSession("s2", user="alice", memory=mem, session_settings=SessionSettings(limit=3))
        got["settings"] = await limited.get_items()
        got["explicit"] = await limited.get_items(limit=1)
        popped = [await session.pop_item(), await session.pop_item()]
        after_pop = await session.get_items()
        await session.add_items([{"role": "assistant", "content": "again"}])  # takes the popped number
        seqs = [m.seq for m in await mem.window(user="alice", thread="s2", size=10)]
        await session.clear_session()
        cleared = await session.get_items(), await session.pop_item()
        await session.add_items([{"role": "user", "content": "fresh"}])
        fresh = await session.get_items()
        await mem.db.close()
        return got, popped, after_pop, seqs, cleared, fresh

    got, popped, after_pop, seqs, cleared, fresh = run(go())
    contents = lambda items: [i["content"] for i in items]  # noqa: E731
    assert contents(got["2"]) == ["m3", "m4"]
    assert got["0"] == []
    assert contents(got["99"]) == contents(got["-1"]) == contents(got["20000"]) == [f"m{i}" for i in range(5)]
    assert contents(got["settings"]) == ["m2", "m3", "m4"] and contents(got["explicit"]) == ["m4"]
    assert contents(popped) == ["m4", "m3"]
    assert contents(after_pop) == ["m0", "m1", "m2"]
    assert seqs == [1, 2, 3, 4]
    assert cleared == ([], None)
    assert fresh == [{"role": "user", "content": "fresh"}]


def test_sessions_are_per_user_and_per_session(dsn):
    async def go():
        mem = await _memory(dsn)
        alice, bob = PymemSession("shared", user="alice", memory=mem), PymemSession("shared", user="bob", memory=mem)
        other = PymemSession("other", user="alice", memory=mem)
        await alice.add_items([{"role": "user", "content": "alice's secret"}])
        await bob.add_items([{"role": "user", "content": "bob's note"}])
        seen = await alice.get_items(), await bob.get_items(), await other.get_items()
        assert await other.pop_item() is None
        await bob.clear_session()
        after = await alice.get_items(), await bob.get_items()
        await mem.db.close()
        return seen, after

    (a, b, o), (a2, b2) = run(go())
    assert a == [{"role": "user", "content": "alice's secret"}] and b == [{"role": "user", "content": "bob's note"}]
    assert o == [] and a2 == a and b2 == []
    with pytest.raises(pymem.ValidationError):
        PymemSession("*", user="alice")
    with pytest.raises(pymem.ValidationError):
        PymemSession("s", user="")


def test_the_session_is_pymems_own_conversation(dsn):
    """Recall finds its text, a conversation pymem recorded reads back as messages, and
    erasing the user erases the session."""

    async def go():
        mem = await _memory(dsn)
        session = PymemSession("trip", user="carol", memory=mem)
        await mem.record("Where should I go?", "Try Tromsø in winter.", user="carol", thread="trip")
        await session.add_items([{"role": "user", "content": "I booked a cabin near Tromsø for skiing"}])
        recalled = await mem.recall("cabin near Tromsø", user="carol", thread="elsewhere", k=3)
        items = await session.get_items()
        await mem.forget_user(user="carol")
        gone = await session.get_items()
        await mem.db.close()
        return recalled, items, gone

    recalled, items, gone = run(go())
    assert recalled and recalled[0].content == "I booked a cabin near Tromsø for skiing" and recalled[0].thread == "trip"
    assert items == [{"role": "user", "content": "Where should I go?"},
                     {"role": "assistant", "content": "Try Tromsø in winter."},
                     {"role": "user", "content": "I booked a cabin near Tromsø for skiing"}]
    assert gone == []


def test_pop_steps_the_summary_back(dsn):
    """A summary that reached the popped message now ends before it (the thread's check holds)."""
    async def go():
        mem = await _memory(dsn)
        session = PymemSession("sum", user="dave", memory=mem)
        await session.add_items([{"role": "user", "content": f"m{i}"} for i in range(3)])
        await mem.db.close()

    run(go())
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE pymem.threads SET summary = 's', summary_through = 3 WHERE project_id = %s AND user_id = 'dave'",
                  (PROJECT,))
        row = c.execute("SELECT seq, content FROM pymem.message_pop('dave', 'sum', %s)", (PROJECT,)).fetchone()
        assert row == (3, "m2")
        assert c.execute("SELECT last_seq, summary_through FROM pymem.threads WHERE project_id = %s AND user_id = 'dave'",
                         (PROJECT,)).fetchone() == (2, 2)
        assert c.execute("SELECT count(*) FROM pymem.message_embeddings WHERE project_id = %s AND user_id = 'dave' AND seq = 3",
                         (PROJECT,)).fetchone() == (0,)
        assert c.execute("SELECT * FROM pymem.message_pop('nobody', 'none', %s)", (PROJECT,)).fetchall() == []


def test_an_agent_runs_with_the_session(dsn):
    """Runner.run(agent, ..., session=PymemSession(...)) twice: the second run's model sees the
    first run's items (the user's message, the function call, its output, the answer) from pymem."""

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    model = ScriptedModel([
        [function_call("get_weather", {"city": "Oslo"}, call_id="call_w")],
        [assistant_message("It is sunny in Oslo.")],
        [assistant_message("You asked about Oslo.")],
    ])
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[get_weather])

    async def go():
        mem = await _memory(dsn)
        session = PymemSession("run", user="erin", memory=mem)
        first = await Runner.run(agent, "What is the weather in Oslo?", session=session)
        second = await Runner.run(agent, "What did I ask about?", session=session)
        items = await session.get_items()
        window = await mem.window(user="erin", thread="run", size=20)
        await mem.db.close()
        return first, second, items, window

    first, second, items, window = run(go())
    assert first.final_output == "It is sunny in Oslo." and second.final_output == "You asked about Oslo."
    kinds = [i.get("type", "message") for i in items]
    assert kinds == ["message", "function_call", "function_call_output", "message", "message", "message"]
    assert items[2]["output"] == "Sunny in Oslo" and items[2]["call_id"] == "call_w"
    # the third model call got the whole history, read back from pymem
    sent = model.last_call.input
    assert [i.get("type", "message") for i in sent] == kinds[:5]
    assert [m.role for m in window] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert window[3].content == "It is sunny in Oslo."


def test_the_docs_example_runs(dsn, monkeypatch, capsys):
    """docs/integrations.md "OpenAI Agents SDK": the block runs as written (PYMEM_DSN) and prints
    what its comments say."""
    monkeypatch.setenv("PYMEM_DSN", dsn)
    [block] = [b for b in doc_blocks("python", "Integrations") if "openai_agents" in b]
    exec(compile(block, "docs/integrations.md", "exec"), {"__name__": "docs"})  # noqa: S102 - our own docs
    assert capsys.readouterr().out.splitlines() == [
        "In Oslo.", "['user', 'assistant', 'user', 'assistant']", "chat-1 user I live in Oslo."]
    with psycopg.connect(dsn) as c:  # nothing left behind
        assert c.execute("SELECT count(*) FROM pymem.threads WHERE project_id = 'readme-agents'").fetchone() == (0,)


def test_concurrent_appends_to_one_session_all_land(dsn):
    """Found by the SDK's own test_sqlite_session_concurrent_access: appends racing for one
    thread each take the time at which they hold its row, so none is refused as out of order."""

    async def go():
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=8))
        session = PymemSession("race", user="fay", memory=AsyncMemory(db=db, project_id=PROJECT))
        results = await asyncio.gather(*(session.add_items([{"role": "user", "content": f"m{i}"}]) for i in range(40)),
                                       return_exceptions=True)
        items = await session.get_items()
        await db.close()
        return results, items

    results, items = run(go())
    assert [r for r in results if r is not None] == []
    assert sorted(i["content"] for i in items) == sorted(f"m{i}" for i in range(40))
