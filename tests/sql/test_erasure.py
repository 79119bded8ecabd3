"""Erasing a user (issue 33, item 2): pymem.user_forget / Memory.forget_user / `pymem
forget-user` delete every row of the user in every table in one transaction and leave a receipt
in pymem.erasures (counts, a digest, no content, no user id) that survives it; the owner role
reads the receipts (pymem.erasures, `pymem export --erasures`), the app role may erase but not
read them. Real server, real roles; interleavings are proven by lock waits."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

import pymem
from conftest import wait_for_lock
from pymem import HashEmbedder, Memory
from pymem.erasure import erasures, forget_user

PYMEM = Path(sys.executable).parent / "pymem"
EMB = HashEmbedder()


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn)) as d:
        yield d


def seed_user(db, user: str, project: str = "") -> Memory:
    """Everything pymem can hold about a user: facts with history, vectors and lexemes, learned
    facts, two threads with a summary, a store of the user's own (entries, versions, audit,
    transcript, an item with a vector), and the user as the actor in a shared store."""
    mem = Memory(db=db, agent_id="bot", project_id=project, embedder=EMB, extractor=lambda m: [f"learned: {m}"],
                 summarizer=lambda p, m, n: f"{user} said {len(m)} things", summarize_every=2, keep_last=2)
    mem.persist(f"{user} prefers email", user=user)
    mem.update(f"{user} prefers Slack", old=f"{user} prefers email", user=user)
    for i in range(3):
        mem.record(f"{user} asks question {i}", f"answer {i} for {user}", user=user)
    mem.record(f"{user} plans a trip", "noted", user=user, thread="travel")
    with psycopg.connect(db.settings.dsn, autocommit=True) as c:
        register_vector(c)
        # a turn whose learning waits in the queue (issue 37), and the user's learning usage today
        c.execute("SELECT * FROM pymem.turn_record(%s, %s, 'later', 'travel', %s, defer_learning => true)",
                  (user, f"{user} books a hotel", project))
        c.execute("INSERT INTO pymem.learning_usage (project_id, day, user_id, calls) VALUES (%s, current_date, %s, 2) "
                  "ON CONFLICT DO NOTHING", (project, user))
        # an MCP bearer token that serves the user (0047): it names the user, and must go with them
        c.execute("SELECT pymem.mcp_token_create(project_id => %s, user_id => %s, agent_id => NULL, "
                  "token_hash => sha256(convert_to(%s, 'UTF8')))", (project, user, f"{project}/{user}"))
        c.execute("SELECT pymem.store_open(%s, project_id => %s, keep_versions => true)", (f"{user}-notes", project))
        for text in (f"{user} note v1", f"{user} note v2"):
            c.execute("SELECT pymem.store_write(%s, 'note.txt', %s, actor => %s, project_id => %s)",
                      (f"{user}-notes", text, user, project))
        c.execute("SELECT pymem.store_messages_append(%s, %s::jsonb, project_id => %s)",
                  (f"{user}-notes", json.dumps([{"role": "user", "content": f"{user} in the transcript"}]), project))
        c.execute("SELECT pymem.store_item_put(%s, ARRAY['memories'], 'k1', %s::jsonb, embedder => %s, "
                  "fields => ARRAY['$'], embeddings => ARRAY[%s::vector], project_id => %s)",
                  (f"{user}-notes", json.dumps({"text": f"{user} item"}), EMB.name, EMB.embed(["x"])[0], project))
        c.execute("SELECT pymem.store_open('shared', project_id => %s)", (project,))
        c.execute("SELECT pymem.store_write('shared', %s, 'team note', actor => %s, project_id => %s)",
                  (shared_path(user), user, project))
    return mem


def shared_path(user: str) -> str:
    """The user's entry in the shared store, at a path that does not spell the user's id."""
    return hashlib.sha256(user.encode()).hexdigest()[:12] + ".txt"


def rows_naming(dsn: str, needle: str, project: str = "") -> dict[str, int]:
    """Rows of every table of schema pymem in ``project`` whose whole text holds ``needle``
    (superuser: no RLS), by table; tables without project_id are left out (config, migrations)."""
    found = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        tables = [r[0] for r in c.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'project_id' "
            "WHERE c.relnamespace = 'pymem'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY 1")]
        assert {"facts", "messages", "threads", "store_entries", "erasures", "recall_indexes"} <= set(tables)
        for t in tables:
            n = c.execute(sql.SQL("SELECT count(*) FROM pymem.{} AS t WHERE t.project_id = %s AND t::text LIKE %s")
                          .format(sql.Identifier(t)), (project, f"%{needle}%")).fetchone()[0]
            if n:
                found[t] = n
    return found


def counts_of(dsn: str, user: str, project: str = "") -> dict[str, int]:
    """What an erasure of ``user`` must delete, counted by plain SQL (superuser)."""
    q = {
        "facts": "SELECT count(*) FROM pymem.facts WHERE project_id = %(p)s AND scope = 'user' AND scope_id = %(u)s",
        "fact_embeddings": "SELECT count(*) FROM pymem.fact_embeddings WHERE project_id = %(p)s AND scope = 'user' AND scope_id = %(u)s",
        "fact_lexemes": "SELECT count(*) FROM pymem.fact_lexemes WHERE project_id = %(p)s AND scope = 'user' AND scope_id = %(u)s",
        "threads": "SELECT count(*) FROM pymem.threads WHERE project_id = %(p)s AND user_id = %(u)s",
        "summaries": "SELECT count(*) FROM pymem.threads WHERE project_id = %(p)s AND user_id = %(u)s AND summary IS NOT NULL",
        "messages": "SELECT count(*) FROM pymem.messages WHERE project_id = %(p)s AND user_id = %(u)s",
        "message_embeddings": "SELECT count(*) FROM pymem.message_embeddings WHERE project_id = %(p)s AND user_id = %(u)s",
        "message_lexemes": "SELECT count(*) FROM pymem.message_lexemes WHERE project_id = %(p)s AND user_id = %(u)s",
        "recall_indexes": "SELECT count(*) FROM pymem.recall_indexes WHERE project_id = %(p)s AND user_id = %(u)s",
        "learning_jobs": "SELECT count(*) FROM pymem.learning_jobs WHERE project_id = %(p)s AND user_id = %(u)s",
        "learning_usage": "SELECT count(*) FROM pymem.learning_usage WHERE project_id = %(p)s AND user_id = %(u)s",
        "mcp_tokens": "SELECT count(*) FROM pymem.mcp_tokens WHERE project_id = %(p)s AND user_id = %(u)s",
        "stores": "SELECT count(*) FROM pymem.stores WHERE project_id = %(p)s AND store_key = %(s)s",
        "store_entries": "SELECT count(*) FROM pymem.store_entries WHERE project_id = %(p)s AND store_key = %(s)s",
        "store_messages": "SELECT count(*) FROM pymem.store_messages WHERE project_id = %(p)s AND store_key = %(s)s",
        "store_audit": "SELECT count(*) FROM pymem.store_audit WHERE project_id = %(p)s AND store_key = %(s)s",
        "store_versions": "SELECT count(*) FROM pymem.store_versions WHERE project_id = %(p)s AND store_key = %(s)s",
        "store_vectors": "SELECT count(*) FROM pymem.store_vectors WHERE project_id = %(p)s AND store_key = %(s)s",
        "store_actors": "SELECT (SELECT count(*) FROM pymem.store_entries WHERE project_id = %(p)s AND store_key <> %(s)s AND actor = %(u)s)"
                        " + (SELECT count(*) FROM pymem.store_audit WHERE project_id = %(p)s AND store_key <> %(s)s AND actor = %(u)s)"
                        " + (SELECT count(*) FROM pymem.store_versions WHERE project_id = %(p)s AND store_key <> %(s)s AND actor = %(u)s)",
    }
    with psycopg.connect(dsn, autocommit=True) as c:
        return {k: c.execute(v, {"p": project, "u": user, "s": f"{user}-notes"}).fetchone()[0] for k, v in q.items()}


def test_an_erasure_leaves_no_row_naming_the_user_in_any_table_and_counts_what_went(db, dsn):
    seed_user(db, "alice")
    seed_user(db, "bob")
    seed_user(db, "alice", project="acme")  # the same id in another project is another user
    before = counts_of(dsn, "alice")
    assert all(before[k] > 0 for k in before if k != "recall_indexes"), before
    bob, alice_acme = rows_naming(dsn, "bob"), rows_naming(dsn, "alice", "acme")
    with psycopg.connect(dsn, autocommit=True) as c:
        digest = c.execute("SELECT pymem._erasure_digest('', 'alice', ARRAY['alice-notes'])").fetchone()[0]

    receipt = forget_user(db, "alice", stores=["alice-notes", "no-such-store"])

    assert {k: v for k, v in receipt.counts.items() if k != "changes"} == before  # changes: the feed's rows, those the erasure wrote too
    assert receipt.digest == digest and receipt.erased_by == "postgres" and receipt.project_id == ""
    assert rows_naming(dsn, "alice") == {}  # the receipt included: it holds neither content nor the id
    assert rows_naming(dsn, "bob") == bob and rows_naming(dsn, "alice", "acme") == alice_acme
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pymem.stores WHERE store_key = 'alice-notes' AND project_id = ''").fetchone()[0] == 0
        # the shared store keeps its rows, without the name
        assert c.execute("SELECT actor FROM pymem.store_entries WHERE store_key = 'shared' AND path = %s "
                         "AND project_id = ''", (shared_path("alice"),)).fetchone() == (None,)
    # nothing left: a second erasure finds nothing, and still leaves a receipt
    again = forget_user(db, "alice", stores=["alice-notes"])
    assert set(again.counts.values()) == {0} and set(again.counts) == set(receipt.counts)
    assert again.digest == hashlib.sha256(b"").hexdigest()
    assert [e.id for e in erasures(db, user_id="alice")] == [again.id, receipt.id]


def test_receipts_name_no_user_yet_each_is_found_by_its_users_id(db, dsn):
    seed_user(db, "alice")
    seed_user(db, "bob")
    a1 = forget_user(db, "alice")
    b = forget_user(db, "bob")
    a2 = forget_user(db, "alice")
    assert [e.id for e in erasures(db, user_id="alice")] == [a2.id, a1.id]
    assert [e.id for e in erasures(db, user_id="bob")] == [b.id]
    assert erasures(db, user_id="carol") == []
    assert [e.id for e in erasures(db)] == [a2.id, b.id, a1.id]
    assert erasures(db, "acme") == []  # receipts belong to their project
    with psycopg.connect(dsn, autocommit=True) as c:
        subjects = [r[0] for r in c.execute("SELECT subject FROM pymem.erasures ORDER BY id")]
    assert len(set(subjects)) == 3  # salted: two erasures of one user do not share a subject
    plain = hashlib.sha256(json.dumps(["", "alice"]).encode()).hexdigest()
    assert plain not in subjects


def test_the_app_role_erases_but_only_the_owner_reads_receipts(db, dsn, as_role):
    seed_user(db, "alice")
    app = as_role("erasure_app")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO erasure_app")
        c.execute("CREATE ROLE erasure_owner LOGIN IN ROLE pymem_owner")
    with pymem.Database(pymem.Settings(dsn=app)) as app_db:
        receipt = Memory(db=app_db, agent_id="bot").forget_user(user="alice", stores=["alice-notes"])
        assert receipt.erased_by == "erasure_app" and receipt.counts["messages"] == 10
        with pytest.raises(pymem.PermissionError):
            erasures(app_db)
    with psycopg.connect(app) as c, pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("SELECT * FROM pymem.erasures")
    with pymem.Database(pymem.Settings(dsn=psycopg.conninfo.make_conninfo(dsn, user="erasure_owner"))) as owner_db:
        assert [e.id for e in erasures(owner_db, user_id="alice")] == [receipt.id]


def test_a_role_bound_to_another_project_erases_nothing(db, dsn, as_role):
    seed_user(db, "alice")
    bound = as_role("erasure_bound")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO erasure_bound")
        c.execute("SELECT pymem.tenant_bind('erasure_bound', 'acme')")
    before = counts_of(dsn, "alice")
    with psycopg.connect(bound, autocommit=True) as c, pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("SELECT pymem.user_forget('alice', project_id => '', store_keys => ARRAY['alice-notes'])")
    assert counts_of(dsn, "alice") == before
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pymem.erasures").fetchone()[0] == 0


@pytest.mark.parametrize("call, message", [
    ("SELECT pymem.user_forget('', store_keys => ARRAY['alice-notes'])", "user"),
    ("SELECT pymem.user_forget('*')", "'*'"),
    ("SELECT pymem.user_forget(NULL)", "scope_id"),
    ("SELECT pymem.user_forget('alice', project_id => '*')", "project"),
    ("SELECT pymem.user_forget('alice', store_keys => ARRAY['alice-notes', '*'])", "store key"),
    ("SELECT pymem.user_forget('alice', store_keys => ARRAY['alice-notes', NULL])", "store_keys"),
    ("SELECT pymem.user_forget('alice', store_keys => NULL)", "store_keys"),
])
def test_a_refused_erasure_deletes_nothing_and_leaves_no_receipt(db, dsn, call, message):
    seed_user(db, "alice")
    before = counts_of(dsn, "alice")
    with psycopg.connect(dsn, autocommit=True) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            c.execute(call)
        assert c.execute("SELECT count(*) FROM pymem.erasures").fetchone()[0] == 0
    assert counts_of(dsn, "alice") == before


def test_python_refuses_bad_arguments_before_the_database(db):
    mem = Memory(db=db, agent_id="bot")
    with pytest.raises(pymem.ValidationError, match="list of store keys"):
        mem.forget_user(user="alice", stores="alice-notes")
    with pytest.raises(pymem.ValidationError):
        mem.forget_user(user=None)
    with pytest.raises(pymem.ValidationError):
        mem.forget_user(user="alice", stores=[3])


def test_an_erasure_waits_for_a_turn_in_flight_and_erases_it_too(db, dsn):
    seed_user(db, "alice")
    with psycopg.connect(dsn) as turn:
        pid = turn.info.backend_pid
        turn.execute("SELECT * FROM pymem.turn_record('alice', 'late question', 'late answer')")
        result = {}
        t = threading.Thread(target=lambda: result.update(r=forget_user(db, "alice", stores=["alice-notes"])))
        t.start()
        wait_for_lock(dsn, blocked_by=pid)  # the erasure waits for the turn's thread
        turn.commit()
    t.join(30)
    assert result["r"].counts["messages"] == 12  # the 10 before and the turn's 2
    assert rows_naming(dsn, "alice") == {}


def test_a_turn_that_starts_during_an_erasure_is_new_memory_and_whole(db, dsn):
    seed_user(db, "alice")
    before = counts_of(dsn, "alice")
    with psycopg.connect(dsn) as eraser:
        pid = eraser.info.backend_pid
        receipt = eraser.execute("SELECT pymem.user_forget('alice', store_keys => ARRAY['alice-notes'])").fetchone()[0]
        done = {}

        def turn():
            with psycopg.connect(dsn, autocommit=True) as c:
                done["seq"] = c.execute("SELECT user_seq FROM pymem.turn_record('alice', 'after', 'ok')").fetchone()[0]

        t = threading.Thread(target=turn)
        t.start()
        wait_for_lock(dsn, blocked_by=pid)  # the turn waits for the erasure's deleted thread
        eraser.commit()
    t.join(30)
    assert receipt["counts"]["messages"] == before["messages"]
    assert done["seq"] == 1  # a new thread, numbered from 1
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("SELECT role, content FROM pymem.messages WHERE user_id = 'alice' AND project_id = '' "
                         "ORDER BY seq").fetchall()
        assert rows == [("user", "after"), ("assistant", "ok")]
        assert c.execute("SELECT last_seq FROM pymem.threads WHERE user_id = 'alice' AND project_id = ''").fetchall() == [(2,)]


def test_a_heavy_users_recall_index_is_dropped_by_the_next_plan(db, dsn):
    from pymem.recall import recall_indexes

    mem = Memory(db=db, agent_id="bot", embedder=EMB)
    other = Memory(db=db, agent_id="bot", project_id="acme", embedder=EMB)
    for i in range(6):
        mem.record(f"heavy question {i}", f"answer {i}", user="alice")
        other.record(f"heavy question {i}", f"answer {i}", user="alice")  # the same id, another project
    assert [s["action"] for s in recall_indexes(db, "", 4)] == ["create", "create", "fill"]
    assert [s["action"] for s in recall_indexes(db, "acme", 4)] == ["create", "create", "fill"]
    with psycopg.connect(dsn, autocommit=True) as c:
        index = c.execute("SELECT index_name FROM pymem.recall_indexes WHERE user_id = 'alice'").fetchone()[0]
        assert "alice" in c.execute("SELECT pg_get_indexdef(%s::regclass)", (f"pymem.{index}",)).fetchone()[0]
    receipt = mem.forget_user(user="alice")
    assert receipt.counts["recall_indexes"] == 1
    assert rows_naming(dsn, "alice") == {}
    assert recall_indexes(db, "acme", 4) == []  # another project's index is not this one's orphan
    steps = recall_indexes(db, "", 4)
    assert [(s["action"], s["user_id"], s["statement"]) for s in steps] == [
        ("drop", None, f"DROP INDEX CONCURRENTLY IF EXISTS pymem.{index}"),
        ("drop", None, f"DROP INDEX CONCURRENTLY IF EXISTS pymem.{index}_time")]  # and its time index
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT to_regclass(%s)", (f"pymem.{index}",)).fetchone()[0] is None
        assert c.execute("SELECT to_regclass(%s)", (f"pymem.{index}_time",)).fetchone()[0] is None
        assert c.execute("SELECT project_id FROM pymem.recall_indexes").fetchall() == [("acme",)]
    assert recall_indexes(db, "", 4) == [] and recall_indexes(db, "acme", 4) == []


def test_async_memory_erases_too(dsn):
    async def go():
        adb = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn))
        try:
            mem = pymem.AsyncMemory(db=adb, agent_id="bot")
            await mem.persist("a fact", user="alice")
            return await mem.forget_user(user="alice")
        finally:
            await adb.close()

    receipt = asyncio.run(go())
    assert receipt.counts["facts"] == 1 and isinstance(receipt, pymem.Erasure)


def test_the_cli_erases_and_exports_the_receipts(db, dsn, tmp_path):
    seed_user(db, "alice")
    env = {**os.environ, "PYMEM_DSN": dsn}
    out = subprocess.run([str(PYMEM), "forget-user", "--user", "alice", "--store", "alice-notes"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    receipt = json.loads(out.stdout)
    assert receipt["counts"]["stores"] == 1 and rows_naming(dsn, "alice") == {}
    path = tmp_path / "receipts.json"
    out = subprocess.run([str(PYMEM), "export", "--erasures", "--user", "alice", "-o", str(path)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(path.read_text())
    assert doc["format"] == "pymem.erasures/1" and [e["id"] for e in doc["erasures"]] == [receipt["id"]]
    assert doc["erasures"][0]["digest"] == receipt["digest"]
    assert path.stat().st_mode & 0o777 == 0o600
    out = subprocess.run([str(PYMEM), "export"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 1 and "--user ID" in out.stderr


def test_an_erasure_in_the_callers_transaction_rolls_back_with_it(db, dsn):
    """forget_user(conn=): the erasure and the receipt are the caller's transaction's (issue 33,
    item 3): a rollback leaves the user and no receipt; a commit erases."""
    seed_user(db, "alice")
    before = counts_of(dsn, "alice")
    mem = Memory(db=db, agent_id="bot")
    with psycopg.connect(dsn) as conn:
        receipt = mem.forget_user(user="alice", stores=["alice-notes"], conn=conn)
        assert {k: v for k, v in receipt.counts.items() if k != "changes"} == before  # changes: the feed's rows, those the erasure wrote too
        conn.rollback()
        assert counts_of(dsn, "alice") == before and erasures(db) == []
        with mem.bound(conn):
            receipt = mem.forget_user(user="alice", stores=["alice-notes"])
        conn.commit()
    assert rows_naming(dsn, "alice") == {} and [e.id for e in erasures(db)] == [receipt.id]


def test_an_erasure_of_nothing_says_so_without_the_id(db, dsn, caplog):
    """A mistyped id must not read as a done erasure (issue 59, item 3): the receipt says
    nothing_stored, a warning is logged (no id in it), and the CLI exits 1."""
    seed_user(db, "alice")
    mem = pymem.Memory(db=db, agent_id="bot")
    with caplog.at_level("WARNING", logger="pymem"):
        receipt = mem.forget_user(user="alcie")
    assert receipt.nothing_stored and not any(receipt.counts.values())
    warned = [r.getMessage() for r in caplog.records if "nothing was stored" in r.getMessage()]
    assert len(warned) == 1 and "alcie" not in warned[0]
    assert not mem.forget_user(user="alice").nothing_stored
    env = {**os.environ, "PYMEM_DSN": dsn}
    out = subprocess.run([str(PYMEM), "forget-user", "--user", "alcie"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["nothing_stored"] is True and "alcie" not in out.stdout
    assert "nothing was stored for that user" in out.stderr and out.stderr.count("pymem:") <= 2
