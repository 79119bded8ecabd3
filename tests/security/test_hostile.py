"""Hostile input, table-driven, through raw SQL (as the least-privilege app role) and through
Python. Every refused case must raise its documented error (docs/errors.md) and leave every
pymem table exactly as it was: same rows, same contents."""

from __future__ import annotations

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory, MemoryStore

TABLES = ("facts", "fact_embeddings", "embedders", "threads", "messages", "message_embeddings", "stores",
          "store_messages", "store_entries", "store_audit", "store_versions", "config", "schema_migrations")

BIG = "x" * (10 * 1024 * 1024)  # 10 MB
INJECTIONS = [
    "'; DROP TABLE pymem.facts; --",
    "\" OR 1=1 --",
    "x') OR ('1'='1",
    "$$; DROP SCHEMA pymem CASCADE; $$",
    "%(user_id)s %s {0}",
    "Robert'); DELETE FROM pymem.messages; --",
]


@pytest.fixture(scope="module")
def hostile(pg_server, template_db):
    """A seeded database shared by the cases (each case proves it changed nothing)."""
    from conftest import _janitor, dsn_for

    janitor = _janitor(pg_server, "pymem_hostile", template_dbname=template_db)
    janitor.drop()
    janitor.init()
    dsn = dsn_for(pg_server, "pymem_hostile")
    with psycopg.connect(dsn, autocommit=True) as c:
        for role in ("pymem_hostile_app",):
            if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                c.execute(f"CREATE ROLE {role} LOGIN")
        c.execute("GRANT pymem_app TO pymem_hostile_app")
        c.execute("SELECT pymem.fact_add('user', 'alice', 'Prefers email')")
        c.execute("SELECT pymem.fact_supersede('user', 'alice', 'Prefers Slack', old_content => 'Prefers email')")
        c.execute("SELECT pymem.fact_add('user', 'alice', 'acme fact', 'acme')")
        c.execute("SELECT pymem.fact_add('agent', 'bot', 'Return policy is 30 days')")
        c.execute("SELECT pymem.fact_add('user', 'alice', 'vector fact', embedding => '[1,0,0]', embedder => 'e3')")
        # the embedder registry (name -> dimension) is shared by all tenants and never shrinks:
        # register the Python cases' embedder up front so that it is part of the baseline
        c.execute("SELECT pymem._embedding_register('', 'hash-3-v1', '[1,0,0]')")
        c.execute("SELECT * FROM pymem.turn_record('alice', 'hello there friend', 'hi', embedder => 'e3',"
                  " user_embedding => '[0,1,0]', assistant_embedding => '[0,0,1]')")
        c.execute("SELECT * FROM pymem.store_open('notes', read_only_prefixes => ARRAY['memory'])")
        c.execute("SELECT pymem.store_write('notes', 'a.txt', 'note')")
    yield dsn
    janitor.drop()


def snapshot(dsn: str) -> dict:
    with psycopg.connect(dsn) as c:
        return {
            t: c.execute(f"SELECT count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) "
                         f"FROM pymem.{t} AS x").fetchone()
            for t in TABLES
        }


def app(dsn: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user="pymem_hostile_app")


SHA = "a" * 64
SQL_CASES = [
    # facts: scope, ids, content, values, limits
    ("SELECT pymem.fact_add('session', 'alice', 'x')", "22023"),
    ("SELECT pymem.fact_add(NULL, 'alice', 'x')", "22023"),
    ("SELECT pymem.fact_add('user', '', 'x')", "22023"),
    ("SELECT pymem.fact_add('user', '*', 'x')", "22023"),
    ("SELECT pymem.fact_add('user', repeat('a', 257), 'x')", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', project_id => '*')", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', NULL)", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', '')", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', E' \\t\\n ')", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', repeat('x', 10 * 1024 * 1024))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', write => pymem.fact_write(confidence => 'NaN'))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', write => pymem.fact_write(confidence => 'Infinity'))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', write => pymem.fact_write(confidence => -0.5))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', write => pymem.fact_write(confidence => 1.5))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', write => pymem.fact_write(source => 'gossip'))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', write => pymem.fact_write(metadata => '[1, 2]'))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', max_learned => -1, write => pymem.fact_write(source => 'learned'))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', max_learned => 0, write => pymem.fact_write(source => 'learned'))", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', embedding => '[0,0,0]', embedder => 'e3')", "22023"),
    ("SELECT pymem.message_add('alice', 'hello', thread_id => NULL)", "22023"),
    ("SELECT pymem.store_delete('notes', 'memory/x.md')", "PM402"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', embedding => '[1,0]', embedder => 'e3')", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', embedding => '[1,0,0]', embedder => '')", "22023"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', embedding => '[NaN,0,0]', embedder => 'e3')", "22000"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', embedding => '[Infinity,0,0]', embedder => 'e3')", "22000"),
    ("SELECT pymem.fact_add('user', 'alice', 'x', embedding => '[]', embedder => 'e3')", "22000"),
    ("SELECT * FROM pymem.facts_newest('agent', '')", "22023"),
    ("SELECT * FROM pymem.browse_subjects('*')", "22023"),
    ("SELECT * FROM pymem.browse_subjects(NULL)", "22023"),
    ("SELECT * FROM pymem.browse_users(max_rows => -1)", "22023"),
    ("SELECT * FROM pymem.browse_stores(repeat('p', 257))", "22023"),
    ("SELECT * FROM pymem.browse_threads('')", "22023"),
    ("SELECT * FROM pymem.browse_threads('*')", "22023"),
    ("SELECT * FROM pymem.browse_threads(NULL)", "22023"),
    ("SELECT * FROM pymem.browse_embedders('*')", "22023"),
    ("SELECT * FROM pymem.browse_messages('')", "22023"),
    ("SELECT * FROM pymem.browse_messages('alice', '*')", "22023"),
    ("SELECT * FROM pymem.browse_messages('alice', NULL)", "22023"),
    ("SELECT * FROM pymem.browse_messages('alice', from_seq => NULL)", "22023"),
    ("SELECT * FROM pymem.browse_messages('alice', max_rows => -1)", "22023"),
    ("SELECT * FROM pymem.browse_messages('alice', project_id => '*')", "22023"),
    ("SELECT * FROM pymem.facts_newest('user', 'alice', max_facts => -1)", "22023"),
    ("SELECT * FROM pymem.facts_newest('user', 'alice', max_facts => 10001)", "22023"),
    # a bigint where an integer is expected matches no function (PostgreSQL's 42883)
    ("SELECT * FROM pymem.facts_newest('user', 'alice', max_facts => 2147483648)", "42883"),
    ("SELECT pymem.facts_forget('agent', '')", "22023"),
    # deletes given an unset id refuse it (issue 29), as writes do
    ("SELECT pymem.facts_forget('user', '')", "22023"),
    ("SELECT pymem.fact_forget('project', '', content => 'x')", "22023"),
    ("SELECT pymem.conversation_forget('')", "22023"),
    ("SELECT pymem.store_drop('')", "22023"),
    ("SELECT pymem.fact_forget('user', '*', id => 1)", "22023"),
    ("SELECT pymem.fact_supersede('user', 'alice', 'new', id => 987654321)", "P0002"),
    ("SELECT pymem.fact_supersede('user', 'alice', 'new', old_content => 'Prefers email')", "PM201"),
    ("SELECT pymem.fact_supersede('user', 'alice', 'Prefers Slack', old_content => 'Prefers Slack')", "22023"),
    ("SELECT pymem.fact_supersede('user', 'bob', 'new', old_content => 'Prefers Slack')", "P0002"),
    ("SELECT * FROM pymem.facts_search('user', 'alice', '[1,0]', 'e3')", "22023"),
    ("SELECT * FROM pymem.facts_search('user', 'alice', '[1,0,0]', 'e3', k => -1)", "22023"),
    ("SELECT * FROM pymem.fact_chain('user', 'alice', 987654321)", "P0002"),
    # conversations
    ("SELECT pymem.message_add('alice', 'hello', role => 'wizard')", "22023"),
    ("SELECT pymem.message_add('alice', '')", "22023"),
    ("SELECT pymem.message_add('alice', repeat('x', 10 * 1024 * 1024))", "22023"),
    ("SELECT pymem.message_add('', 'hello')", "22023"),
    ("SELECT pymem.message_add('*', 'hello')", "22023"),
    ("SELECT pymem.message_add('alice', 'hello', thread_id => '')", "22023"),
    ("SELECT pymem.message_add('alice', 'hello', thread_id => '*')", "22023"),
    ("SELECT pymem.message_add('alice', 'hello', importance => 'NaN')", "22023"),
    ("SELECT pymem.message_add('alice', 'hello', importance => 3)", "22023"),
    ("SELECT * FROM pymem.turn_record('alice', 'q', '')", "22023"),
    ("SELECT * FROM pymem.turn_record('alice', 'q', 'a', embedder => 'e3', user_embedding => '[1,2]')", "22023"),
    ("SELECT * FROM pymem.window_read('alice', max_messages => -1)", "22023"),
    ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', recall => pymem.recall(k => -1))", "22023"),
    ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', recall => pymem.recall(recency_weight => 1.5))", "22023"),
    ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', "
     "recall => pymem.recall(recency_weight => 0.6, importance_weight => 0.6))", "22023"),
    ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', recall => pymem.recall(importance_weight => -0.1))", "22023"),
    ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', recall => pymem.recall(half_life_seconds => 0))", "22023"),
    ("SELECT * FROM pymem.messages_recall('alice', '[1,0,0]', 'e3', "
     "recall => pymem.recall(half_life_seconds => 'Infinity'))", "22023"),
    ("SELECT * FROM pymem.messages_recall('alice', '[1,0]', 'e3')", "22023"),
    ("SELECT pymem.context_read('alice', agent_id => '')", "22023"),
    ("SELECT pymem.context_read('alice', recall => pymem.recall(window_size => -5))", "22023"),
    ("SELECT pymem.context_read('alice', recall => NULL)", "22023"),
    ("SELECT pymem.summary_commit('alice', gen_random_uuid(), 'x', max_chars => 0)", "22023"),
    ("SELECT * FROM pymem.summary_claim('alice', summarize_every => 0)", "22023"),
    # stores: keys, paths, prefixes, content, sha
    ("SELECT * FROM pymem.store_open('')", "22023"),
    ("SELECT * FROM pymem.store_open('*')", "22023"),
    ("SELECT * FROM pymem.store_open(repeat('k', 513))", "22023"),
    ("SELECT pymem.store_write('notes', '../escape.txt', 'x')", "22023"),
    ("SELECT pymem.store_write('notes', 'a/../../etc/passwd', 'x')", "22023"),
    ("SELECT pymem.store_write('notes', '/etc/passwd', 'x')", "22023"),
    ("SELECT pymem.store_write('notes', 'a//b', 'x')", "22023"),
    ("SELECT pymem.store_write('notes', 'a/', 'x')", "22023"),
    ("SELECT pymem.store_write('notes', '..', 'x')", "22023"),
    ("SELECT pymem.store_write('notes', E'a\\\\b', 'x')", "22023"),
    ("SELECT pymem.store_write('notes', E'a\\nb', 'x')", "22023"),
    ("SELECT pymem.store_write('notes', repeat('p', 1025), 'x')", "22023"),
    ("SELECT pymem.store_write('notes', 'messages.json', 'x')", "PM403"),
    ("SELECT pymem.store_write('notes', 'audit/log.jsonl', 'x')", "PM403"),
    ("SELECT pymem.store_write('notes', 'versions/a.txt', 'x')", "PM403"),
    ("SELECT pymem.store_write('notes', 'memory/facts.md', 'x')", "PM402"),
    ("SELECT pymem.store_write('notes', 'big.txt', repeat('x', 8388609))", "22023"),
    ("SELECT pymem.store_write('notes', 'a.txt', 'x', expected_sha => 'DROP TABLE')", "22023"),
    ("SELECT pymem.store_write('notes', 'a.txt', 'x', expected_sha => '" + SHA + "')", "PM401"),
    ("SELECT pymem.store_write('notes', 'a.txt', 'x', expected_sha => '')", "PM401"),
    ("SELECT pymem.store_write('notes', 'b.txt', 'x', kind => 'binary')", "22023"),
    ("SELECT pymem.store_write('notes', 'b.json', '{not json', kind => 'json')", "22023"),
    ("SELECT pymem.store_write('no-such-store', 'a.txt', 'x')", "P0002"),
    ("SELECT pymem.store_messages_append('notes', '{\"role\": \"user\"}')", "22023"),
    ("SELECT pymem.store_messages_append('notes', '[{\"content\": \"no role\"}]')", "22023"),
    ("SELECT pymem.store_restore('notes', 'a.txt', 99)", "P0002"),
    ("SELECT pymem.store_drop('*', '*')", "22023"),
    # store protections: never changed by opening, weakened only by administrators
    ("SELECT * FROM pymem.store_open('notes', read_only_prefixes => '{}', audit => false)", "PM404"),
    ("SELECT * FROM pymem.store_protect('notes', read_only_prefixes => '{}')", "42501"),
    ("SELECT * FROM pymem.store_protect('notes', audit => false)", "42501"),
    ("SELECT * FROM pymem.store_configure('notes', audit => false)", "42501"),
    ("SELECT pymem.text_search_configure('simple')", "42501"),  # administrators only: a full re-index
    # portability
    ("SELECT pymem.user_import('{\"format\": \"something else\"}', user_id => 'eve')", "22023"),
    ("SELECT pymem.user_import('{\"format\": \"pymem.user/1\", \"user_id\": \"eve\", \"facts\": "
     "[{\"id\": 1, \"content\": \"x\", \"superseded_by\": 2}]}')", "22023"),
    ("SELECT pymem.user_import(pymem.user_export('alice'))", "22023"),  # alice already has memory
    ("SELECT pymem.user_import('{\"format\": \"pymem.user/1\", \"user_id\": \"eve\", \"facts\": "
     "[{\"id\": 1, \"content\": \"x\", \"superseded_by\": 2}, {\"id\": 2, \"content\": \"y\", \"superseded_by\": 1}]}')",
     "22023"),  # a supersede cycle
    ("SELECT pymem.user_import(pymem.user_export('alice') || '{\"facts\": [{\"id\": 1, \"content\": \"x\"}, "
     "{\"id\": 1, \"content\": \"y\"}]}', user_id => 'alice', replace => true)", "22023"),  # replace, then refused
    # learned facts per turn: at most 100
    ("SELECT * FROM pymem.turn_record('alice', 'q', 'a', learned => array_fill('fact'::text, ARRAY[101]))", "22023"),
    ("SELECT * FROM pymem.turn_record('alice', 'q', 'a', learned => ARRAY['fact'], max_learned => 0)", "22023"),
]


@pytest.mark.parametrize(("statement", "sqlstate"), SQL_CASES, ids=[f"sql{i:02d}" for i in range(len(SQL_CASES))])
def test_hostile_sql(hostile, statement, sqlstate):
    before = snapshot(hostile)
    with psycopg.connect(app(hostile), autocommit=True) as c:
        with pytest.raises(psycopg.Error) as err:
            c.execute(statement)
    assert err.value.sqlstate == sqlstate, (statement, err.value.sqlstate, str(err.value))
    assert snapshot(hostile) == before


def _mem(db, **kw):
    return Memory(db=db, agent_id="bot", embedder=HashEmbedder(3), **kw)


PY_CASES = [
    (lambda db: _mem(db).persist("a\x00b", id="alice"), pymem.ValidationError),
    (lambda db: _mem(db).persist("\ud800", id="alice"), pymem.ValidationError),
    (lambda db: _mem(db).persist(BIG, id="alice"), pymem.ValidationError),
    (lambda db: _mem(db).persist("x", id="alice\x00"), pymem.ValidationError),
    (lambda db: _mem(db).persist("x", id=42), pymem.ValidationError),
    (lambda db: _mem(db).persist("x", tier="session", id="alice"), pymem.ValidationError),
    (lambda db: _mem(db).persist("x", id="alice", confidence=float("nan")), pymem.ValidationError),
    (lambda db: _mem(db).persist("x", id="alice", confidence=True), pymem.ValidationError),
    (lambda db: _mem(db).persist("x", id="alice", metadata=[1]), pymem.ValidationError),
    (lambda db: _mem(db).retrieve(id="alice", limit=-1), pymem.ValidationError),
    (lambda db: _mem(db).retrieve(id="alice", limit=2**40), pymem.ValidationError),
    (lambda db: _mem(db).retrieve("x", id="alice", k=-3), pymem.ValidationError),
    (lambda db: Memory(db=db).retrieve(tier="global"), pymem.ValidationError),
    (lambda db: Memory(db=db, agent_id=""), pymem.ValidationError),
    (lambda db: Memory(db=db, agent_id="\u200b"), None),  # a zero-width id is a (strange) real id: allowed
    (lambda db: Memory(db=db, project_id="*").retrieve(id="alice"), pymem.ValidationError),
    (lambda db: _mem(db).update("x", fact_id=987654321, id="alice"), pymem.NotFoundError),
    (lambda db: _mem(db).record("q", "a\x00", user="alice"), pymem.ValidationError),
    (lambda db: _mem(db).record("q", "a", user="alice", importance=float("inf")), pymem.ValidationError),
    (lambda db: _mem(db, window=-1).context("q", user="alice"), pymem.ValidationError),
    (lambda db: _mem(db, recall_k=-1).context("q", user="alice"), pymem.ValidationError),
    (lambda db: _mem(db, recency_weight=0.9, importance_weight=0.9).context("q", user="alice"), pymem.ValidationError),
    (lambda db: _mem(db).add_message("hello", role="wizard", user="alice"), pymem.ValidationError),
    (lambda db: _mem(db).window(user="*"), pymem.ValidationError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).write_text("../x", "x"), pymem.ValidationError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).write_text("a\x00", "x"), pymem.ValidationError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).write_text("memory/x", "x"), pymem.PermissionError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).write_text("meta/x", "x"), pymem.ValidationError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).write_text("a.txt", "y", expected_sha=SHA),
     pymem.ConcurrencyError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).write_json("b.json", {"x": float("nan")}),
     pymem.ValidationError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).write_text("big.txt", BIG), pymem.ValidationError),
    (lambda db: MemoryStore.get_or_create("", db=db), pymem.ValidationError),
    (lambda db: MemoryStore.get_or_create("notes", db=db, read_only_prefixes=[]), pymem.ConflictError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).protect(audit=False), pymem.PermissionError),
    (lambda db: MemoryStore.get_or_create("notes", db=db).configure(audit=False), pymem.PermissionError),
]


@pytest.mark.parametrize(("case", "error"), PY_CASES, ids=[f"py{i:02d}" for i in range(len(PY_CASES))])
def test_hostile_python(hostile, case, error):
    before = snapshot(hostile)
    with pymem.Database(pymem.Settings(dsn=app(hostile), pool_min_size=0, pool_max_size=1)) as db:
        if error is None:
            case(db)
        else:
            with pytest.raises(error):
                case(db)
    assert snapshot(hostile) == before


@pytest.mark.parametrize("evil", INJECTIONS)
def test_injection_strings_are_just_data(hostile, evil):
    """In every id/content/path/key slot an injection string is data: reads find nothing under
    it, writes store it verbatim, and nothing else changes."""
    before = snapshot(hostile)
    with pymem.Database(pymem.Settings(dsn=app(hostile), pool_min_size=0, pool_max_size=1)) as db:
        mem = Memory(db=db, agent_id=evil, project_id=evil, embedder=HashEmbedder(3))
        assert mem.retrieve(id=evil) == [] and mem.retrieve(tier="global") == []
        assert mem.context(evil, user=evil)[-1] == {"role": "user", "content": evil}
        assert mem.window(user=evil, thread=evil) == []
        with pytest.raises(pymem.NotFoundError):
            MemoryStore.get(evil, project_id=evil, db=db)
        assert snapshot(hostile) == before
        fid = mem.persist(evil, id=evil)
        assert [(f.id, f.content, f.scope_id, f.project_id) for f in mem.retrieve(id=evil)] == [(fid, evil, evil, evil)]
        mem.record(evil, evil, user=evil, thread=evil)
        assert [m.content for m in mem.window(user=evil, thread=evil)] == [evil, evil]
        store = MemoryStore.get_or_create(evil, project_id=evil, db=db)
        path = "notes/" + evil.replace("/", "_").replace("\\", "_")
        store.write_text(path, evil)
        assert store.read_text(path) == evil and store.list_paths() == [path]
        assert mem.forget(id=evil) == 1 and mem.forget_conversation(user=evil) == 2
        assert MemoryStore.drop(evil, project_id=evil, db=db) == 1
    after = snapshot(hostile)
    # everything it wrote is gone again and nothing else moved, except that the project named
    # by the string now has the embedder's dimension on record (per-project registry)
    assert {t: v for t, v in after.items() if t != "embedders"} == {t: v for t, v in before.items() if t != "embedders"}
    with psycopg.connect(hostile) as c:
        assert c.execute("SELECT project_id, name FROM pymem.embedders WHERE project_id = %s", (evil,)).fetchall() == [
            (evil, "hash-3-v1")]


def test_unicode_look_alike_ids_are_other_subjects(hostile):
    with pymem.Database(pymem.Settings(dsn=app(hostile), pool_min_size=0, pool_max_size=1)) as db:
        mem = Memory(db=db, agent_id="bot")
        for look_alike in ("\u0430lice", "alice\u200b", "ALICE", "alice ", "a\u0301lice"):  # Cyrillic a, ZWSP, ...
            assert mem.retrieve(id=look_alike) == [], look_alike
        assert [f.content for f in mem.retrieve(id="alice")]


def test_the_suite_is_large_enough():
    assert len(SQL_CASES) + len(PY_CASES) + len(INJECTIONS) >= 60
