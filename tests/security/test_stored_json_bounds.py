"""Issue 58, finding 8: every JSON document pymem stores (fact, message and transcript metadata,
a store's json documents, imports) nests at most 64 levels and has a bounded size, checked at
write with 22023 and nothing half-written, so one client's write never breaks another's reads
(a document 2,000 deep made every Python reader of that user raise RecursionError)."""

from __future__ import annotations

import json

import psycopg
import pytest

import pymem
from pymem import Memory


def deep(n: int) -> dict:
    """An object whose nesting depth (objects and arrays) is n."""
    doc: dict = {"leaf": 1}
    for _ in range(n - 1):
        doc = {"d": doc}
    return doc


def deep_text(n: int) -> str:
    """deep(n) as JSON text, for depths Python's own json cannot write."""
    return '{"d": ' * (n - 1) + '{"leaf": 1}' + "}" * (n - 1)


def refused(c: psycopg.Connection, sql: str, *args) -> str:
    with pytest.raises(psycopg.Error) as e:
        c.execute(sql, args)
    assert e.value.sqlstate == "22023", (sql, e.value)
    return str(e.value)


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn)) as d:
        yield d


def test_deep_fact_metadata_is_refused_and_the_deepest_allowed_reads_back(db, dsn):
    mem = Memory(db=db, agent_id="bot", project_id="deep")
    with psycopg.connect(dsn, autocommit=True) as c:
        msg = refused(c, "SELECT pymem.fact_add('user', 'al', 'x', 'deep', write => pymem.fact_write(metadata => %s::jsonb))", deep_text(2000))
        assert "64" in msg and "metadata" in msg
        refused(c, "SELECT pymem.fact_add('user', 'al', 'x', 'deep', write => pymem.fact_write(metadata => %s::jsonb))", json.dumps(deep(65)))
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE project_id = 'deep'").fetchone()[0] == 0
        refused(c, "SELECT pymem.fact_add('user', 'al', 'x', 'deep', write => pymem.fact_write(metadata => %s::jsonb))",
                json.dumps({"big": "x" * 1048576}))  # and size: 1 MiB as text at most
    with pytest.raises(pymem.ValidationError):
        mem.persist("too deep", user="al", metadata=deep(65))
    mem.persist("as deep as allowed", user="al", metadata=deep(64))
    mem.persist_many(["a", "b"], user="al", metadata={"k": [1, {"x": [2]}]})
    with pytest.raises(pymem.ValidationError):
        mem.persist_many(["c", "d"], user="al", metadata=deep(80))
    facts = mem.retrieve(user="al")  # every reader reads back what was stored
    assert sorted(f.content for f in facts) == ["a", "as deep as allowed", "b"]
    assert next(f for f in facts if f.content == "as deep as allowed").metadata == deep(64)


def test_deep_message_metadata_transcripts_store_documents_and_imports_are_refused(db, dsn):
    mem = Memory(db=db, agent_id="bot", project_id="deep2")
    with pytest.raises(pymem.ValidationError):
        mem.record("q", "a", user="bo", metadata=deep(100))
    with pytest.raises(pymem.ValidationError):
        mem.record("q", "a", user="bo", answer_metadata=deep(100))
    with psycopg.connect(dsn, autocommit=True) as c:
        refused(c, "SELECT pymem.message_add('bo', 'hi', project_id => 'deep2', metadata => %s::jsonb)",
                deep_text(500))
        refused(c, "SELECT pymem.messages_add_many('bo', 'default', ARRAY['user', 'assistant'], ARRAY['q', 'a'],"
                   " project_id => 'deep2', metadata => ARRAY['{}', %s]::jsonb[])", json.dumps(deep(65)))
        assert c.execute("SELECT count(*) FROM pymem.messages WHERE project_id = 'deep2'").fetchone()[0] == 0
        c.execute("SELECT pymem.store_open('notes', 'deep2')")
        refused(c, "SELECT pymem.store_write('notes', 'a.json', %s, kind => 'json', project_id => 'deep2')",
                json.dumps(deep(65)))
        c.execute("SELECT pymem.store_write('notes', 'b.json', %s, kind => 'json', project_id => 'deep2')",
                  (json.dumps(deep(64)),))
        refused(c, "SELECT pymem.store_messages_append('notes', %s::jsonb, 'deep2')",
                json.dumps([{"role": "user", "content": "ok"}, {"role": "user", "x": deep(65)}]))
        assert c.execute("SELECT count(*) FROM pymem.store_messages WHERE project_id = 'deep2'").fetchone()[0] == 0
        # an import carrying a deep document writes nothing
        mem.persist("a fact", user="bo", metadata={"ok": True})
        mem.record("q", "a", user="bo")
        doc = c.execute("SELECT pymem.user_export('bo', 'deep2')").fetchone()[0]
        doc["threads"][0]["messages"][0]["metadata"] = deep(65)
        refused(c, "SELECT pymem.user_import(%s::jsonb, 'deep2', 'cy')", json.dumps(doc))
        doc = c.execute("SELECT pymem.user_export('bo', 'deep2')").fetchone()[0]
        doc["facts"][0]["metadata"] = deep(65)
        refused(c, "SELECT pymem.user_import(%s::jsonb, 'deep2', 'cy')", json.dumps(doc))
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE project_id = 'deep2' AND scope_id = 'cy'").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.threads WHERE project_id = 'deep2' AND user_id = 'cy'").fetchone()[0] == 0
