"""The reconciling learner (issue 16.1) against a real HTTP server on the loopback interface
that speaks the chat-completions protocol and answers from a script: extraction from the
user's message only, reconciliation (ADD / UPDATE / DELETE / NONE) written with the turn,
summaries, and every way a model can fail (malformed JSON, a schema it does not fit, numbers it
was never shown, HTTP errors, time-outs): the turn is stored, nothing of a bad reply is. No
network, no real model, the real PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timezone
import logging
from typing import Any

import psycopg
import pytest
from chat_server import ChatServer

import pymem
from pymem.llm import ChatClient, ChatLearner, FactChange, load_prompt, parse_reply


@pytest.fixture
def chat():
    s = ChatServer()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def facts(dsn, user="alice"):
    with psycopg.connect(dsn) as c:
        return [r[0] for r in c.execute("SELECT content FROM pymem.facts WHERE scope_id = %s AND superseded_by IS NULL"
                                        " ORDER BY id", (user,))]


def n_messages(dsn):
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT count(*) FROM pymem.messages").fetchone()[0]


def extracted(*found: str) -> str:
    return json.dumps({"facts": list(found)})


def decided(*decisions: dict[str, Any]) -> str:
    return json.dumps({"decisions": list(decisions)})


def memory(db, chat, timeout=5.0, **kw):
    return pymem.Memory(db=db, agent_id="bot", embedder=pymem.HashEmbedder(),
                        learner=ChatLearner(chat.client(timeout)), **kw)


# -- the client --------------------------------------------------------------------------------
def test_the_client_posts_a_chat_completion_and_returns_the_text(chat):
    chat.script = ['{"facts": []}']
    client = ChatClient("m1", base_url=chat.url + "/", api_key="k-123", timeout=5)
    assert client.complete([{"role": "user", "content": "hi"}]) == '{"facts": []}'
    (req,) = chat.requests
    assert req["path"] == "/v1/chat/completions" and req["model"] == "m1" and req["auth"] == "Bearer k-123"
    assert req["messages"] == [{"role": "user", "content": "hi"}]
    assert req["response_format"] == {"type": "json_object"} and req["temperature"] == 0.0
    # a server that refuses response_format: JSON mode off (issue 29, item 16), by argument or setting
    chat.script = ['{"facts": []}', '{"facts": []}']
    ChatClient("m1", base_url=chat.url, json_mode=False).complete([{"role": "user", "content": "hi"}])
    ChatClient(settings=pymem.Settings(llm_model="m1", llm_base_url=chat.url, llm_json_mode=False)).complete(
        [{"role": "user", "content": "hi"}])
    assert all("response_format" not in r for r in chat.requests[1:])


def test_the_client_reads_its_settings_and_the_key_from_the_named_variable(chat, monkeypatch):
    monkeypatch.setenv("PYMEM_LLM_BASE_URL", chat.url)
    monkeypatch.setenv("PYMEM_LLM_MODEL", "from-env")
    monkeypatch.setenv("PYMEM_LLM_API_KEY_ENV", "MY_CHAT_KEY")
    monkeypatch.setenv("MY_CHAT_KEY", "secret")
    monkeypatch.setenv("PYMEM_LLM_TIMEOUT", "7.5")
    client = ChatClient()
    assert (client.model, client.base_url, client.timeout) == ("from-env", chat.url, 7.5)
    chat.script = ["ok"]
    client.complete([{"role": "user", "content": "x"}], json_reply=False)
    assert chat.requests[0]["auth"] == "Bearer secret" and "response_format" not in chat.requests[0]
    monkeypatch.delenv("MY_CHAT_KEY")
    chat.script = ["ok"]
    ChatClient().complete([{"role": "user", "content": "x"}])
    assert chat.requests[1]["auth"] is None  # no key, no header (a local server)


def test_a_client_without_a_model_or_with_a_bad_url_is_a_config_error(monkeypatch):
    monkeypatch.delenv("PYMEM_LLM_MODEL", raising=False)
    with pytest.raises(pymem.ConfigError, match="PYMEM_LLM_MODEL"):
        ChatClient()
    with pytest.raises(pymem.ConfigError, match="http"):
        ChatClient("m", base_url="file:///etc/passwd")


@pytest.mark.parametrize("reply, error, match", [
    ({"status": 500}, pymem.ConnectionError, "HTTP 500: scripted 500"),
    ({"status": 429}, pymem.ConnectionError, "HTTP 429"),
    ({"status": 401}, pymem.ConfigError, "HTTP 401"),
    ({"status": 404}, pymem.ConfigError, "HTTP 404"),
    ({"raw": b"<html>proxy error</html>"}, pymem.ValidationError, "without a chat completion"),
    ({"raw": b'{"choices": []}'}, pymem.ValidationError, "without a chat completion"),
    ({"raw": b'{"choices": [{"message": {"content": null}}]}'}, pymem.ValidationError, "without text"),
    ({"sleep": 1.5}, pymem.TimeoutError, "longer than 0.3 s"),
    ({"drip": 0.1}, pymem.TimeoutError, "longer than 0.3 s"),  # each piece in time, the whole reply not
])
def test_the_client_maps_every_failure_to_a_pymem_error(chat, reply, error, match):
    chat.script = [reply]
    with pytest.raises(error, match=match):
        chat.client(timeout=0.3).complete([{"role": "user", "content": "x"}])


def test_an_unreachable_endpoint_is_a_connection_error():
    s = ChatServer()
    url = s.url
    s.httpd.shutdown()
    s.httpd.server_close()
    with pytest.raises(pymem.ConnectionError, match="unreachable"):
        ChatClient("m", base_url=url, timeout=2).complete([{"role": "user", "content": "x"}])


# -- the replies' schemas ----------------------------------------------------------------------
def test_prompts_are_versioned_files_of_the_package():
    for task in ("extract", "reconcile", "summarize"):
        assert "JSON" in load_prompt(task, "v1")
    with pytest.raises(pymem.ValidationError):
        load_prompt("extract", "v999")
    with pytest.raises(pymem.ValidationError):
        load_prompt("../settings", "v1")


@pytest.mark.parametrize("reply", [
    "Sure! Here are the facts: lives in Bergen",          # not JSON
    '{"facts": "Lives in Bergen"}',                        # not a list
    '{"facts": ["ok", 3]}',                                # not a string
    '{"facts": ["ok", ""]}',                               # empty
    '{"fact": ["Lives in Bergen"]}',                       # wrong key
    '["Lives in Bergen"]',                                 # not an object
    json.dumps({"facts": ["x" * 1001]}),                   # too long
    '{"facts": ["ok"]',                                    # truncated
])
def test_a_reply_that_does_not_fit_its_schema_is_refused(reply):
    from pymem.llm import _Extracted
    with pytest.raises(pymem.ValidationError, match="does not fit"):
        parse_reply(reply, _Extracted)


def test_a_fenced_json_reply_is_read():
    from pymem.llm import _Extracted
    assert parse_reply('```json\n{"facts": [" Lives in Bergen "]}\n```', _Extracted).facts == ["Lives in Bergen"]


def test_reconcile_maps_positions_to_fact_ids_and_refuses_numbers_it_never_showed(chat):
    learner = ChatLearner(chat.client())
    stored = [{"id": 41, "content": "Lives in Oslo"}, {"id": 97, "content": "Works night shifts"}]
    chat.script = [decided({"learned": 0, "op": "update", "stored": 0, "content": "Lives in Bergen"},
                           {"learned": 1, "op": "DELETE", "stored": 1, "content": "ignored"},
                           {"learned": 2, "op": "NONE"}, {"learned": 3, "op": "ADD"})]
    cands = ["Lives in Bergen now", "No longer works night shifts", "Works", "Has a cat"]
    assert learner.reconcile(cands, stored) == [
        FactChange("update", "Lives in Bergen", 41), FactChange("delete", "No longer works night shifts", 97),
        FactChange("add", "Has a cat")]
    shown = json.loads(chat.requests[0]["messages"][1]["content"])
    assert "41" not in json.dumps(shown) and shown["stored"][0] == {"number": 0, "fact": "Lives in Oslo"}
    for bad in ({"learned": 0, "op": "UPDATE", "stored": 2}, {"learned": 0, "op": "DELETE"},
                {"learned": 4, "op": "ADD"}, {"learned": 0, "op": "MERGE", "stored": 0},
                {"learned": 0, "op": "UPDATE", "stored": 41}, {"learned": -1, "op": "ADD"},
                {"learned": "0", "op": "ADD"}):
        chat.script = [decided(bad)]
        with pytest.raises(pymem.ValidationError):
            learner.reconcile(cands, stored)


def test_a_learner_says_when_a_fact_holds_and_the_turn_keeps_it(db, dsn, chat):
    """Issue 34, item 1: a model that hears "since May" answers valid_from; the change carries it
    to turn_record, and the old fact still held before then (facts_at). A date the model gets
    wrong drops the date, not the fact."""
    mem = memory(db, chat)
    oslo = mem.persist("Lives in Oslo", user="alice", created_at=datetime(2020, 1, 1, tzinfo=timezone.utc))
    chat.script = [extracted("Lives in Berlin", "Works at a bakery"),
                   decided({"learned": 0, "op": "UPDATE", "stored": 0, "content": "Lives in Berlin", "valid_from": "2024-05"},
                           {"learned": 1, "op": "ADD", "valid_from": "last spring", "valid_to": None})]
    r = mem.record("I moved to Berlin in May 2024 and work at a bakery.", "Noted.", user="alice")
    assert [(c["op"], c["applied"]) for c in r.fact_changes] == [("update", True), ("add", True)]
    # issue 59, item 3: what a learner taught is in learned_fact_ids too, not only in fact_changes
    assert r.learned_fact_ids == [c["id"] for c in r.fact_changes]
    now = {f.content: f.valid_from for f in mem.retrieve(user="alice")}
    assert now == {"Lives in Berlin": datetime(2024, 5, 1, tzinfo=timezone.utc), "Works at a bakery": None}
    then = mem.retrieve(user="alice", valid_at=datetime(2023, 1, 1, tzinfo=timezone.utc))
    assert {f.id: f.content for f in then} == {oslo: "Lives in Oslo", r.fact_changes[1]["id"]: "Works at a bakery"}


# -- the learner in a turn ---------------------------------------------------------------------
def test_a_turn_updates_a_fact_and_the_stale_one_leaves_the_context(db, dsn, chat):
    mem = memory(db, chat)
    chat.script = [extracted("Lives in Oslo", "Works night shifts")]  # nothing stored yet: no reconcile call
    r = mem.record("I live in Oslo and work night shifts.", "Noted.", user="alice")
    assert [c["op"] for c in r.fact_changes] == ["add", "add"] and len(chat.requests) == 1
    assert facts(dsn) == ["Lives in Oslo", "Works night shifts"]
    oslo = mem.retrieve(user="alice")[1]
    chat.script = [extracted("Lives in Bergen"),
                   decided({"learned": 0, "op": "UPDATE", "stored": 0, "content": "Lives in Bergen"})]
    r = mem.record("Actually I moved, I live in Bergen now.", "Updated.", user="alice")
    assert r.fact_changes[0]["op"] == "update" and r.fact_changes[0]["fact_id"] == oslo.id
    assert facts(dsn) == ["Works night shifts", "Lives in Bergen"]
    # the extractor saw the user's message only; the reconciler saw the similar stored facts
    extract_req, reconcile_req = chat.requests[1:]
    assert json.loads(extract_req["messages"][1]["content"]) == {"user_message": "Actually I moved, I live in Bergen now."}
    assert "Updated." not in json.dumps(extract_req) and "Updated." not in json.dumps(reconcile_req)
    assert {"number": 0, "fact": "Lives in Oslo"} in json.loads(reconcile_req["messages"][1]["content"])["stored"]
    context = " ".join(m["content"] for m in mem.context("Where do I live?", user="alice"))
    assert "Lives in Bergen" in context and "Lives in Oslo" not in context
    assert [f.content for f in mem.history(user="alice", fact_id=r.fact_changes[0]["id"])] == [
        "Lives in Oslo", "Lives in Bergen"]
    chat.script = [extracted("No longer works night shifts"),
                   decided({"learned": 0, "op": "DELETE", "stored": 0})]
    r = mem.record("I don't work night shifts anymore.", "Good for you.", user="alice")
    assert r.fact_changes[0]["op"] == "delete" and r.fact_changes[0]["applied"]
    assert facts(dsn) == ["Lives in Bergen", "No longer works night shifts"]
    assert facts(dsn, "bob") == []


@pytest.mark.parametrize("script", [
    [{"status": 500}],
    [{"status": 401}],
    [{"sleep": 1.5}],
    ["I think the user lives in Bergen."],
    [extracted("Lives in Bergen"), "not json at all"],
    [extracted("Lives in Bergen"), decided({"learned": 0, "op": "UPDATE", "stored": 7})],
    [extracted("Lives in Bergen"), {"sleep": 1.5}],
    [extracted("Lives in Bergen"), {"status": 503}],
])
def test_a_failing_or_malformed_model_never_breaks_the_turn_and_writes_nothing_of_it(db, dsn, chat, caplog, script):
    mem = memory(db, chat, timeout=0.3)
    mem.persist("Lives in Oslo", user="alice")
    chat.script = list(script)
    with caplog.at_level(logging.WARNING, logger="pymem"):
        r = mem.record("I live in Bergen now.", "Noted.", user="alice")
    assert r.user_seq == 1 and r.fact_changes == [] and n_messages(dsn) == 2
    assert facts(dsn) == ["Lives in Oslo"]
    assert "the learner failed; the turn is recorded without learning" in caplog.text
    (failure,) = r.failures  # the result says learning failed, and why, in one line
    assert failure.startswith("the learner failed; the turn is recorded without learning (")


def test_a_change_the_database_refuses_is_skipped_and_reported(db, dsn, chat):
    """The fact a model named was superseded between the read and the turn (another app server
    reconciled it first): PM201, skipped, the turn and the other changes stored."""
    mem = memory(db, chat)
    oslo = mem.persist("Lives in Oslo", user="alice")

    def meanwhile(_request):
        mem.update("Lives in Trondheim", fact_id=oslo, user="alice")
        return decided({"learned": 0, "op": "UPDATE", "stored": 0}, {"learned": 1, "op": "ADD"})

    chat.script = [extracted("Lives in Bergen", "Has a cat"), meanwhile]
    r = mem.record("I live in Bergen and have a cat.", "Noted.", user="alice")
    assert [(c["op"], c["applied"]) for c in r.fact_changes] == [("update", False), ("add", True)]
    assert "already superseded" in r.fact_changes[0]["reason"]
    assert r.learned_fact_ids == [r.fact_changes[1]["id"]]  # the skipped update taught nothing
    assert facts(dsn) == ["Lives in Trondheim", "Has a cat"]


def test_the_learner_uses_the_async_twin_too(dsn, chat):
    import asyncio

    async def main():
        async with pymem.AsyncMemory(db=await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)), agent_id="bot",
                                     learner=ChatLearner(chat.client())) as mem:
            chat.script = [extracted("Lives in Oslo")]
            await mem.record("I live in Oslo.", "Noted.", user="alice")
            chat.script = [extracted("Lives in Bergen"), decided({"learned": 0, "op": "UPDATE", "stored": 0})]
            r = await mem.record("I live in Bergen now.", "Noted.", user="alice")
            await mem.db.close()
            return r

    r = asyncio.run(main())
    assert r.fact_changes[0]["op"] == "update" and facts(dsn) == ["Lives in Bergen"]


def test_the_summarizer_folds_the_span_through_the_model(db, dsn, chat):
    learner = ChatLearner(chat.client())
    mem = pymem.Memory(db=db, agent_id="bot", summarizer=learner.summarize, summarize_every=2, keep_last=0)
    chat.script = [json.dumps({"summary": "Alice lives in Bergen."})]
    assert mem.record("I live in Bergen.", "Noted.", user="alice").summarized
    assert mem.summary(user="alice") == "Alice lives in Bergen."
    sent = json.loads(chat.requests[0]["messages"][1]["content"])
    assert sent["messages"] == [{"role": "user", "content": "I live in Bergen."},
                                {"role": "assistant", "content": "Noted."}]
    chat.script = ['{"summary": ""}']  # malformed: the old summary stays
    assert not mem.record("I have a cat.", "Nice.", user="alice").summarized
    assert mem.summary(user="alice") == "Alice lives in Bergen."


def test_learner_and_extractor_are_exclusive_and_a_learner_is_checked(chat):
    with pytest.raises(pymem.ValidationError, match="not both"):
        pymem.MemoryOptions(learner=ChatLearner(chat.client()), extractor=lambda m: [])
    with pytest.raises(pymem.ValidationError, match="extract"):
        pymem.MemoryOptions(learner=lambda m: [])


def test_text_postgresql_cannot_store_never_costs_the_turn(db, dsn, chat):
    """A NUL or a lone surrogate in what a model or learner returns would fail the whole
    turn_record call: such candidates are dropped, and a change carrying one voids the learning."""
    mem = memory(db, chat)
    chat.script = [json.dumps({"facts": ["Has a cat", "bad \ud800 text"]})]  # pydantic refuses the reply
    assert mem.record("I have a cat.", "Nice.", user="alice").fact_changes == [] and facts(dsn) == []
    chat.script = [json.dumps({"facts": ["Has a cat", "nul \u0000 here"]})]  # that candidate is dropped
    r = mem.record("I have a cat.", "Nice.", user="alice")
    assert [c["op"] for c in r.fact_changes] == ["add"] and facts(dsn) == ["Has a cat"]

    class Bad:
        def extract(self, message):
            return ["Has a dog", "x\x00"]

        def reconcile(self, candidates, stored):
            return [FactChange("add", "Has a dog \ud800")]

    mem = pymem.Memory(db=db, agent_id="bot", learner=Bad(), embedder=pymem.HashEmbedder())  # shows "Has a cat"
    r = mem.record("I have a dog.", "Nice.", user="alice")
    assert r.user_seq == 5 and r.fact_changes == [] and facts(dsn) == ["Has a cat"]
    mem = pymem.Memory(db=db, agent_id="bot", extractor=lambda m: ["Has a fish \ud800", "Has a fish"])
    assert len(mem.record("I have a fish.", "Nice.", user="alice").learned_fact_ids) == 1
