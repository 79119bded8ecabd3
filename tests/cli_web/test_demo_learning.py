"""The demo (issue 16.1): what the user says updates and retires facts through the learner
(the rule-based stand-in when no chat model is configured), and the stale fact is gone from
every later context's facts. Runs the demo's conversation on the test database."""

from __future__ import annotations

import json
import re
import urllib.parse

from chat_server import ChatServer

import pymem
from pymem import demo, web
from pymem.llm import load_prompt


def test_the_demo_updates_a_fact_from_what_the_user_says_and_the_stale_one_leaves_the_context(dsn, capsys):
    with pymem.Database(pymem.Settings(dsn=dsn)) as db:
        demo.conversation(db, pymem.Settings(dsn=dsn, llm_model=None))
        # the memory page the demo points to (`pymem serve --project pymem-demo`) tells the two apart
        page = web_get(web.MemoryPage(db, None, [demo.PROJECT]), "/facts", p=demo.PROJECT, scope="user",
                       id="alice@example.com", superseded="1")
    assert re.search(r"Lives in Oslo <span class=\"marker\">updated → ", page)
    assert re.search(r"Works night shifts <span class=\"marker\">retired → ", page)
    assert re.search(r"No longer works night shifts.*?taught by turn default #\d+</a>", page)
    out = capsys.readouterr().out
    assert "learner: RuleLearner, fixed rules standing in for a chat model" in out
    assert "updated: 'Lives in Oslo' -> 'Lives in Bergen now'" in out
    assert "retired (no longer true; kept in history): 'Works night shifts' -> 'No longer works night shifts'" in out
    turns = re.split(r"\n=== turn (\d+): context for (\w+)", out)[1:]
    facts_block = {}
    for number, who, body in zip(turns[::3], turns[1::3], turns[2::3]):
        (line,) = [ln for ln in body.splitlines() if "Facts about the user" in ln] or [""]
        facts_block[int(number), who] = line
    assert "Lives in Oslo" in facts_block[6, "alice"]  # before the move
    for n in (7, 8, 9, 10):
        assert "Lives in Bergen now" in facts_block[n, "alice"] and "Lives in Oslo" not in facts_block[n, "alice"]
    assert "- Works night shifts" not in facts_block[9, "alice"]
    assert ("alice's facts now: ['No longer works night shifts', 'Lives in Bergen now', 'Is allergic to peanuts',"
            " 'Name is Alice']") in out
    # facts about the user, in the third person: none reads as if the assistant said it (issue 29)
    assert not re.search(r"Facts about the user[^\n]*- (I|My) ", out)
    assert "bob's context mentions Alice or Bergen: False" in out


def web_get(app, route: str, /, **params) -> str:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": route, "QUERY_STRING": urllib.parse.urlencode(params),
               "HTTP_HOST": "127.0.0.1"}
    return b"".join(app(environ, lambda status, headers: None)).decode()


def test_the_rule_learner_is_a_learner():
    rules = demo.RuleLearner()
    assert isinstance(rules, pymem.llm.Learner)
    assert rules.extract("Hi! My name is Alice and I am allergic to peanuts. Where is Bergen?") == [
        "Name is Alice", "Is allergic to peanuts"]
    assert rules.extract("I do not work night shifts anymore. I watch movies and I go hiking.") == [
        "No longer works night shifts", "Watches movies", "Goes hiking"]
    stored = [{"id": 1, "content": "Lives in Oslo"}, {"id": 2, "content": "Works night shifts"}]
    assert rules.reconcile(["Lives in Bergen now", "No longer works night shifts", "Lives in Oslo", "Has a cat"],
                           stored) == [
        pymem.llm.FactChange("update", "Lives in Bergen now", 1),
        pymem.llm.FactChange("delete", "No longer works night shifts", 2),
        pymem.llm.FactChange("add", "Has a cat")]


def _rules_as_a_model(request):
    """A stand-in chat model for the demo: it answers each of ChatLearner's three prompts in their
    protocol, with RuleLearner's rules."""
    rules = demo.RuleLearner()
    system, user = request["messages"][0]["content"], json.loads(request["messages"][1]["content"])
    if system == load_prompt("extract"):
        return json.dumps({"facts": rules.extract(user["user_message"])})
    if system == load_prompt("reconcile"):
        stored = [{"id": s["number"], "content": s["fact"]} for s in user["stored"]]
        learned = [c["fact"] for c in user["learned"]]
        decisions = []
        for change in rules.reconcile(learned, stored):
            number = next(i for i, c in enumerate(learned) if c == change.content)
            decisions.append({"learned": number, "op": change.op.upper(), "stored": change.fact_id,
                              "content": change.content})
        return json.dumps({"decisions": decisions})
    assert system == load_prompt("summarize")
    said = [m["content"] for m in user["messages"] if m["role"] == "user"]
    return json.dumps({"summary": " / ".join(filter(None, [user["summary_so_far"], *said]))})


def test_the_demo_with_a_configured_chat_model_learns_through_it(dsn, capsys):
    server = ChatServer(responder=_rules_as_a_model)
    try:
        settings = pymem.Settings(dsn=dsn, llm_model="scripted", llm_base_url=server.url)
        with pymem.Database(settings) as db:
            demo.conversation(db, settings)
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
    out = capsys.readouterr().out
    assert f"learner: chat model 'scripted' at {server.url}" in out
    assert "updated: 'Lives in Oslo' -> 'Lives in Bergen now'" in out
    assert "retired (no longer true; kept in history): 'Works night shifts' -> 'No longer works night shifts'" in out
    tasks = [r["messages"][0]["content"] for r in server.requests]
    assert tasks.count(load_prompt("summarize")) >= 1 and tasks.count(load_prompt("reconcile")) >= 2
    # the model never saw an answer of the assistant when extracting
    for r in server.requests:
        if r["messages"][0]["content"] == load_prompt("extract"):
            assert "Updated: Bergen." not in r["messages"][1]["content"]
