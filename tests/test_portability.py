"""Export a user's whole memory as JSON and import it elsewhere (SQL, Python and CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory
from pymem.portability import export_user, import_user

PYMEM = Path(sys.executable).parent / "pymem"


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn)) as d:
        yield d


def seed(db) -> Memory:
    mem = Memory(db=db, agent_id="bot", embedder=HashEmbedder(), summarizer=lambda p, m, n: f"{len(m)} messages",
                 summarize_every=2, keep_last=2, extractor=lambda m: [f"learned: {m}"])
    mem.persist("Prefers email", id="alice")
    mem.update("Prefers Slack", old="Prefers email", id="alice")
    mem.update("Prefers Teams", old="Prefers Slack", id="alice")
    mem.persist("Prefers email", id="alice")  # the same text again, now active: two rows share it
    mem.persist("Lives in Oslo", id="alice", metadata={"from": "signup"}, confidence=0.9)
    mem.record("first question here", "first answer", user="alice")
    mem.record("second question here", "second answer", user="alice")
    mem.record("in another thread", "yes", user="alice", thread="travel")
    mem.persist("Bob's fact", id="bob")
    return mem


def strip(doc: dict) -> dict:
    """The document without what legitimately changes on import (ids, owner)."""
    by_id = {f["id"]: f for f in doc["facts"]}
    facts = sorted(
        (f["content"], f["confidence"], f["source"], f["metadata"], f["created_at"],
         by_id[f["superseded_by"]]["content"] if f["superseded_by"] else None)
        for f in doc["facts"]
    )
    return {"facts": facts, "threads": doc["threads"]}


def test_export_import_round_trip_under_another_user_and_project(db):
    mem = seed(db)
    doc = export_user(db, "alice")
    assert doc["format"] == "pymem.user/1"
    assert len(doc["facts"]) == 5 + 3  # 5 rows persisted (history included) + 1 learned per turn
    assert {t["thread_id"] for t in doc["threads"]} == {"default", "travel"}
    assert all("Bob" not in f["content"] for f in doc["facts"])
    done = import_user(db, json.loads(json.dumps(doc, default=str)), project_id="acme", user_id="alice2")
    assert done == {"project_id": "acme", "user_id": "alice2", "facts": 8, "threads": 2, "messages": 6}
    copy = export_user(db, "alice2", "acme")
    assert strip(json.loads(json.dumps(copy, default=str))) == strip(json.loads(json.dumps(doc, default=str)))
    # the copy is live memory: history chains, windows, summaries, and recall (after catch-up)
    other = Memory(db=db, agent_id="bot", project_id="acme", embedder=HashEmbedder(), window=0)
    chain = other.history(id="alice2", fact_id=max(f.id for f in other.retrieve(id="alice2") if f.content == "Prefers Teams"))
    assert [f.content for f in chain] == ["Prefers email", "Prefers Slack", "Prefers Teams"]
    assert other.summary(user="alice2") == mem.summary(user="alice")
    assert [m.content for m in other.recall("second question", user="alice2", k=1)] == ["second question here"]


def test_import_refuses_to_overwrite_unless_replace_and_bad_documents_write_nothing(db, dsn):
    seed(db)
    doc = json.loads(json.dumps(export_user(db, "alice"), default=str))
    with pytest.raises(pymem.ValidationError, match="already has memory"):
        import_user(db, doc)
    assert import_user(db, doc, replace=True)["facts"] == 8
    before = psycopg.connect(dsn).execute("SELECT (SELECT count(*) FROM pymem.facts), (SELECT count(*) FROM pymem.messages)").fetchone()
    broken = json.loads(json.dumps(doc))
    broken["facts"][0]["superseded_by"] = 999999  # points at nothing
    with pytest.raises(pymem.ValidationError):
        import_user(db, broken, user_id="carol")
    with pytest.raises(pymem.ValidationError, match="not a pymem user document"):
        import_user(db, {"facts": []}, user_id="carol")
    bad_msg = json.loads(json.dumps(doc))
    bad_msg["threads"][0]["messages"][0]["role"] = "wizard"
    with pytest.raises(pymem.ValidationError, match="role"):
        import_user(db, bad_msg, user_id="carol")
    after = psycopg.connect(dsn).execute("SELECT (SELECT count(*) FROM pymem.facts), (SELECT count(*) FROM pymem.messages)").fetchone()
    assert before == after


def test_cli_export_and_import(db, dsn, tmp_path):
    seed(db)
    env = {**os.environ, "PYMEM_DSN": dsn}
    out = tmp_path / "alice.json"
    exp = subprocess.run([str(PYMEM), "export", "--user", "alice", "-o", str(out)], env=env, capture_output=True,
                         text=True, timeout=60)
    assert exp.returncode == 0, exp.stderr
    assert json.loads(out.read_text())["user_id"] == "alice"
    imp = subprocess.run([str(PYMEM), "import", str(out), "--user", "alice-copy"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert imp.returncode == 0, imp.stderr
    assert json.loads(imp.stdout)["facts"] == 8
    again = subprocess.run([str(PYMEM), "import", str(out), "--user", "alice-copy"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 1 and "already has memory" in again.stderr
    missing = subprocess.run([str(PYMEM), "import", str(tmp_path / "nope.json")], env=env, capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 1 and "cannot read" in missing.stderr


def test_an_imported_user_can_be_exported_and_imported_again(db):
    seed(db)
    first = json.loads(json.dumps(export_user(db, "alice"), default=str))
    import_user(db, first, user_id="alice2")
    second = json.loads(json.dumps(export_user(db, "alice2"), default=str))
    assert import_user(db, second, user_id="alice3")["facts"] == 8
    third = json.loads(json.dumps(export_user(db, "alice3"), default=str))
    assert strip(third) == strip(first)
