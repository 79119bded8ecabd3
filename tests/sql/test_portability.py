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
    threads = len(json.loads(out.read_text())["threads"])
    assert f"and {threads} thread{'' if threads == 1 else 's'} to" in exp.stderr  # "1 thread", not "1 threads"
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


# --- large documents: linear, set-based, exact (issue 11.4) ---------------------------------


def canonical(doc: dict) -> dict:
    """``strip`` for large documents: each fact with its successor's (content, created_at) instead
    of ids, which an import renumbers."""
    by_id = {f["id"]: f for f in doc["facts"]}
    facts = sorted(
        (f["content"], f["confidence"], f["source"], json.dumps(f["metadata"], sort_keys=True), str(f["created_at"]),
         str(f["superseded_at"]),
         (by_id[f["superseded_by"]]["content"], str(by_id[f["superseded_by"]]["created_at"]))
         if f["superseded_by"] is not None else ())
        for f in doc["facts"]
    )
    return {"facts": facts, "threads": json.loads(json.dumps(doc["threads"], default=str))}


def test_thousands_of_facts_a_long_chain_and_messages_round_trip_exactly(db, dsn):
    with psycopg.connect(dsn, autocommit=True) as c, c.transaction():
        c.execute("SELECT pymem.set_tenant('')")
        base = c.execute("SELECT coalesce(max(id), 0) + 1000 FROM pymem.facts").fetchone()[0]
        c.execute("SELECT setval(pg_get_serial_sequence('pymem.facts', 'id'), %s + 10000)", (base,))
        # 3,000 facts, every tenth superseded by the next; then one chain of 2,000 versions whose
        # contents alternate (only the active one is unique); ids are not in chain order
        c.execute("""INSERT INTO pymem.facts (id, project_id, scope, scope_id, content, content_key, source, metadata,
                                              created_at, superseded_by, superseded_at)
                     OVERRIDING SYSTEM VALUE
                     SELECT %(b)s + g, '', 'user', 'big', 'fact ' || g, pymem.fact_key('fact ' || g),
                            CASE WHEN g %% 4 = 0 THEN 'learned' ELSE 'manual' END, jsonb_build_object('g', g),
                            timestamptz '2026-01-01' + g * interval '1 minute',
                            CASE WHEN g %% 10 = 1 THEN %(b)s + g + 1 END,
                            CASE WHEN g %% 10 = 1 THEN timestamptz '2026-01-01' + (g + 1) * interval '1 minute' END
                       FROM generate_series(1, 3000) AS g""", {"b": base})
        c.execute("""INSERT INTO pymem.facts (id, project_id, scope, scope_id, content, content_key, created_at,
                                              superseded_by, superseded_at)
                     OVERRIDING SYSTEM VALUE
                     SELECT %(b)s + 3000 + (2001 - g), '', 'user', 'big', x.c, pymem.fact_key(x.c),
                            timestamptz '2026-02-01' + g * interval '1 second',
                            CASE WHEN g < 2000 THEN %(b)s + 3000 + (2000 - g) END,
                            CASE WHEN g < 2000 THEN timestamptz '2026-02-01' + (g + 1) * interval '1 second' END
                       FROM generate_series(1, 2000) AS g,
                            LATERAL (SELECT CASE WHEN g = 2000 THEN 'Prefers phone'
                                                 WHEN g %% 2 = 0 THEN 'Prefers email' ELSE 'Prefers Slack' END AS c) AS x""",
                  {"b": base})
        c.execute("INSERT INTO pymem.threads (project_id, user_id, thread_id, last_seq, summary, summary_through) "
                  "VALUES ('', 'big', 'default', 3000, 'a long talk', 2990)")
        c.execute("""INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance,
                                                 created_at)
                     SELECT '', 'big', 'default', g, CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
                            'message ' || g, 0.5, timestamptz '2026-03-01' + g * interval '1 second'
                       FROM generate_series(1, 3000) AS g""")
    doc = json.loads(json.dumps(export_user(db, "big"), default=str))
    assert len(doc["facts"]) == 5000 and len(doc["threads"][0]["messages"]) == 3000
    assert import_user(db, doc, project_id="acme", user_id="big2") == {
        "project_id": "acme", "user_id": "big2", "facts": 5000, "threads": 1, "messages": 3000}
    copy = json.loads(json.dumps(export_user(db, "big2", "acme"), default=str))
    assert canonical(copy) == canonical(doc)
    # new ids keep the order of the old ones (so do ties of created_at)
    assert [(f["content"], f["created_at"]) for f in copy["facts"]] == [(f["content"], f["created_at"]) for f in doc["facts"]]
    other = Memory(db=db, agent_id="bot", project_id="acme")
    head = [f for f in other.retrieve(id="big2", limit=10000) if f.content == "Prefers phone"][0]
    chain = other.history(id="big2", fact_id=head.id)
    assert len(chain) == 2000 and chain[-1].content == "Prefers phone" and chain[0].content == "Prefers Slack"
    # replace over the copy: the same again
    assert import_user(db, doc, project_id="acme", user_id="big2", replace=True)["facts"] == 5000
    assert canonical(json.loads(json.dumps(export_user(db, "big2", "acme"), default=str))) == canonical(doc)


def _fact(i, next_=None, content=None):
    return {"id": i, "content": content or f"fact {i}", "superseded_by": next_,
            "superseded_at": "2026-01-02T00:00:00+00:00" if next_ is not None else None}


BROKEN = {
    "an id given twice": ([_fact(1), _fact(1, content="again")], "appears more than once"),
    "a dangling pointer": ([_fact(1, 7)], "do(es)? not hold"),
    "a branch into a cycle": ([_fact(1, 2), _fact(2, 3), _fact(3, 2), _fact(4)], "3 fact.*cycle"),  # two merged into 2 is fine
    "a cycle of two": ([_fact(1, 2), _fact(2, 1), _fact(3)], "cycle"),
    "a cycle of one": ([_fact(1, 1)], "cycle"),
    "a cycle beside a chain": ([_fact(1, 2), _fact(2), _fact(3, 4), _fact(4, 5), _fact(5, 3)], "3 fact.*cycle"),
    "a fact without an id": ([{"content": "no id"}], "numeric \"id\""),
    "a fact that is not an object": ([1], "numeric \"id\""),
    "a string id": ([{"id": "1", "content": "x"}], "numeric \"id\""),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_malformed_supersede_graphs_are_refused_with_22023_and_write_nothing(db, dsn, case):
    seed(db)
    facts, message = BROKEN[case]
    doc = {"format": "pymem.user/1", "user_id": "carol", "facts": facts,
           "threads": [{"thread_id": "t", "messages": [{"seq": 1, "role": "user", "content": "hi"}]}]}
    count = "SELECT (SELECT count(*) FROM pymem.facts), (SELECT count(*) FROM pymem.messages), " \
            "(SELECT count(*) FROM pymem.threads)"
    with psycopg.connect(dsn, autocommit=True) as c:
        before = c.execute(count).fetchone()
        for replace_user in ("carol", "alice"):  # a new user, and a replace of one with memory
            with pytest.raises(psycopg.Error, match=message) as err:
                c.execute("SELECT pymem.user_import(%s, user_id => %s, replace => true)",
                          (json.dumps(doc), replace_user))
            assert err.value.sqlstate == "22023", (case, err.value)
        assert c.execute(count).fetchone() == before


@pytest.mark.parametrize(("change", "message"), [
    ({"threads": [{"thread_id": "t"}, {"thread_id": "t"}]}, "thread 't' appears more than once"),
    ({"threads": [{"messages": []}]}, "needs a \"thread_id\""),
    ({"threads": [{"thread_id": "t", "messages": [{"seq": 0, "role": "user", "content": "x"}]}]}, "positive"),
    ({"threads": [{"thread_id": "t", "messages": [{"seq": 1, "role": "user", "content": "  "}]}]}, "must not be empty"),
    ({"facts": {"id": 1}}, "must be arrays"),
    ({"threads": "none"}, "must be arrays"),
])
def test_malformed_threads_are_refused_with_22023_and_write_nothing(dsn, change, message):
    doc = {"format": "pymem.user/1", "user_id": "carol", "facts": [_fact(1, 2), _fact(2)], "threads": [], **change}
    with psycopg.connect(dsn, autocommit=True) as c:
        with pytest.raises(psycopg.Error, match=message) as err:
            c.execute("SELECT pymem.user_import(%s)", (json.dumps(doc),))
        assert err.value.sqlstate == "22023"
        assert c.execute("SELECT (SELECT count(*) FROM pymem.facts), (SELECT count(*) FROM pymem.threads)").fetchone() \
            == (0, 0)


def test_cli_export_writes_a_file_only_its_owner_can_read(db, dsn, tmp_path):
    """Issue 36, item 6: an export is a user's whole memory; under the usual umask (022) the file
    was 0644. It is 0600, new or overwritten (an existing 0644 file is made 0600)."""
    seed(db)
    env = {**os.environ, "PYMEM_DSN": dsn, "PYTHONPATH": str(Path(pymem.__file__).parent.parent)}
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    old.write_text("stale")
    old.chmod(0o644)
    before = os.umask(0o022)
    try:
        for out in (new, old):
            exp = subprocess.run([str(PYMEM), "export", "--user", "alice", "-o", str(out)], env=env,
                                 capture_output=True, text=True, timeout=60)
            assert exp.returncode == 0, exp.stderr
            assert oct(out.stat().st_mode & 0o777) == oct(0o600), out
            assert json.loads(out.read_text())["user_id"] == "alice"
    finally:
        os.umask(before)
    nowhere = subprocess.run([str(PYMEM), "export", "--user", "alice", "-o", str(tmp_path / "no" / "such.json")],
                             env=env, capture_output=True, text=True, timeout=60)
    assert nowhere.returncode == 1 and "cannot write" in nowhere.stderr and "Traceback" not in nowhere.stderr


def test_a_round_trip_keeps_every_column_of_a_fact_and_checks_valid_time(db, dsn):
    """The export carries every column of pymem.facts but the owner and the derived key, so a
    round trip loses nothing: valid time and expiry included (valid time was once left out).
    An imported fact's valid time is checked like a write's: an empty range is 22023, and
    the document writes nothing."""
    from datetime import datetime, timedelta, timezone

    mem = Memory(db=db, agent_id="bot", embedder=HashEmbedder())
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    mem.persist("Works at Acme", id="vera", valid_from=start, valid_to=start + timedelta(days=300), ttl=3600)
    mem.persist("Lives in Lyon", id="vera", valid_from=start)
    doc = json.loads(json.dumps(export_user(db, "vera"), default=str))
    with psycopg.connect(dsn) as c:
        columns = {name for (name,) in c.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'pymem.facts'::regclass AND attnum > 0 AND NOT attisdropped")}
    assert {key for f in doc["facts"] for key in f} == columns - {"project_id", "scope", "scope_id", "content_key"}
    import_user(db, doc, user_id="vera2")
    keep = ("content", "valid_from", "valid_to", "expires_at", "created_at", "confidence", "source", "metadata")
    copy = json.loads(json.dumps(export_user(db, "vera2"), default=str))
    assert sorted(tuple(f[k] for k in keep) for f in copy["facts"]) == sorted(tuple(f[k] for k in keep) for f in doc["facts"])
    assert any(f["valid_to"] for f in copy["facts"])
    before = psycopg.connect(dsn).execute("SELECT count(*) FROM pymem.facts").fetchone()
    bad = json.loads(json.dumps(doc))
    bad["facts"][0]["valid_to"] = bad["facts"][0]["valid_from"]
    with pytest.raises(pymem.ValidationError, match="valid_from"):
        import_user(db, bad, user_id="vera3")
    assert psycopg.connect(dsn).execute("SELECT count(*) FROM pymem.facts").fetchone() == before
