"""The demo (issue 16.1): what the user says updates and retires facts through the learner
(the rule-based stand-in when no chat model is configured), and the stale fact is gone from
every later context's facts. Runs the demo's conversation on the test database."""

from __future__ import annotations

import re

import pymem
from pymem import demo


def test_the_demo_updates_a_fact_from_what_the_user_says_and_the_stale_one_leaves_the_context(dsn, capsys):
    with pymem.Database(pymem.Settings(dsn=dsn)) as db:
        demo.conversation(db, pymem.Settings(dsn=dsn, llm_model=None))
    out = capsys.readouterr().out
    assert "learner: RuleLearner, fixed rules standing in for a chat model" in out
    assert "updated: 'I live in Oslo' -> 'I live in Bergen now'" in out
    assert "retired (no longer true; kept in history): 'I work night shifts' -> 'I no longer work night shifts'" in out
    turns = re.split(r"\n=== turn (\d+): context for (\w+)", out)[1:]
    facts_block = {}
    for number, who, body in zip(turns[::3], turns[1::3], turns[2::3]):
        (line,) = [ln for ln in body.splitlines() if "Facts about the user" in ln] or [""]
        facts_block[int(number), who] = line
    assert "I live in Oslo" in facts_block[6, "alice"]  # before the move
    for n in (7, 8, 9, 10):
        assert "I live in Bergen now" in facts_block[n, "alice"] and "I live in Oslo" not in facts_block[n, "alice"]
    assert "- I work night shifts" not in facts_block[9, "alice"]
    assert ("alice's facts now: ['I no longer work night shifts', 'I live in Bergen now', 'I am allergic to peanuts',"
            " 'My name is Alice']") in out
    assert "bob's context mentions Alice or Bergen: False" in out


def test_the_rule_learner_is_a_learner():
    rules = demo.RuleLearner()
    assert isinstance(rules, pymem.llm.Learner)
    assert rules.extract("Hi! My name is Alice and I am allergic to peanuts. Where is Bergen?") == [
        "My name is Alice", "I am allergic to peanuts"]
    stored = [{"id": 1, "content": "I live in Oslo"}, {"id": 2, "content": "I work night shifts"}]
    assert rules.reconcile(["I live in Bergen now", "I no longer work night shifts", "I live in Oslo", "I have a cat"],
                           stored) == [
        pymem.llm.FactChange("update", "I live in Bergen now", 1),
        pymem.llm.FactChange("delete", "I no longer work night shifts", 2),
        pymem.llm.FactChange("add", "I have a cat")]
