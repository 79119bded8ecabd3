"""Least privilege, tenant isolation (RLS), function safety, faults and concurrency."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import pymem
from conftest import wait_for_lock
from pymem import HashEmbedder, Memory, server


@pytest.fixture
def app_dsn(dsn, as_role):
    """A login role that is a member of pymem_app (the documented DBA step)."""
    role = as_role("pymem_app_login")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_app_login")
    return role


@pytest.fixture
def reader_dsn(dsn, as_role):
    role = as_role("pymem_reader_login")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_reader TO pymem_reader_login")
    return role


def seed(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        for project in ("acme", "globex"):
            c.execute("SELECT pymem.fact_add('user', 'alice', %s, project_id => %s)", (f"{project} secret", project))
            c.execute("SELECT * FROM pymem.turn_record('alice', %s, 'ok', project_id => %s)", (f"{project} says hi", project))
            c.execute("SELECT * FROM pymem.store_open('notes', project_id => %s)", (project,))
            c.execute("SELECT pymem.store_write('notes', 'a.txt', %s, project_id => %s)", (f"{project} note", project))


# --- 1. roles ---------------------------------------------------------------------------


def test_the_app_role_executes_the_api_and_touches_no_table(dsn, app_dsn):
    seed(dsn)
    with pymem.Database(pymem.Settings(dsn=app_dsn)) as db:
        mem = Memory(db=db, agent_id="bot", project_id="acme", embedder=HashEmbedder())
        mem.persist("app fact", id="bob")
        mem.record("hello from the app role", "hi", user="bob")
        assert [f.content for f in mem.retrieve(id="alice")] == ["acme secret"]
        assert mem.context("hi", user="bob")[-3]["content"] == "hello from the app role"
        store = pymem.MemoryStore.get_or_create("notes", project_id="acme", db=db)
        assert store.read_text("a.txt") == "acme note"
    with psycopg.connect(app_dsn, autocommit=True) as c:
        for table in ("facts", "active_facts", "messages", "threads", "store_entries", "schema_migrations", "config"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(f"SELECT count(*) FROM pymem.{table}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("INSERT INTO pymem.facts (scope, scope_id, content, content_key) VALUES ('user', 'x', 'y', '')")
        for internal in ("SELECT pymem._tenant_enter('acme')", "SELECT pymem.migration_pending('x', 'y')",
                         "SELECT pymem._store_sha('x')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(internal)


def test_the_reader_role_only_reads(dsn, reader_dsn):
    seed(dsn)
    with psycopg.connect(reader_dsn, autocommit=True) as c:
        rows = c.execute("SELECT content FROM pymem.facts_newest('user', 'alice', 'acme')").fetchall()
        assert rows == [("acme secret",)]
        assert c.execute("SELECT content FROM pymem.store_read('notes', 'a.txt', 'globex')").fetchone() == ("globex note",)
        assert c.execute("SELECT pymem.context_read('alice', project_id => 'acme')").fetchone()[0]["user_facts"]
        for write in ("SELECT pymem.fact_add('user', 'alice', 'x', 'acme')",
                      "SELECT * FROM pymem.turn_record('alice', 'q', 'a', project_id => 'acme')",
                      "SELECT pymem.store_write('notes', 'b.txt', 'x', project_id => 'acme')",
                      "SELECT pymem.facts_forget('user', '*', 'acme')",
                      "SELECT pymem.store_drop('*', 'acme')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(write)


def test_roles_are_recorded_and_nothing_is_granted_to_public(dsn):
    with psycopg.connect(dsn) as c:
        assert dict(c.execute("SELECT key, value FROM pymem.config WHERE key LIKE '%\\_role'").fetchall()) == {
            "owner_role": "pymem_owner", "app_role": "pymem_app", "reader_role": "pymem_reader"}
        public_fns = c.execute(
            """SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = 'pymem' AND has_function_privilege('public', p.oid, 'EXECUTE')"""
        ).fetchall()
        assert sorted(public_fns) == [("current_tenant",), ("tenant_allowed",)]
        owners = c.execute(
            """SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class
               WHERE relnamespace = 'pymem'::regnamespace AND relkind = 'r'
               UNION SELECT DISTINCT pg_get_userbyid(proowner) FROM pg_proc WHERE pronamespace = 'pymem'::regnamespace"""
        ).fetchall()
        assert owners == [("pymem_owner",)]
        assert not c.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = 'pymem_owner'").fetchone()[0]
        definers = c.execute(
            """SELECT count(*) FILTER (WHERE prosecdef), count(*) FILTER (WHERE NOT prosecdef AND proname NOT LIKE '\\_%%'
                      AND proname NOT LIKE 'migration\\_%%'
                      AND proname NOT IN ('fact_key', 'set_tenant', 'current_tenant', 'tenant_bind', 'tenant_unbind',
                                          'recall', 'fact_write'))
               FROM pg_proc WHERE pronamespace = 'pymem'::regnamespace"""
        ).fetchone()
        assert definers[0] > 30 and definers[1] == 0  # every API function runs as the owner (recall, fact_write: a value's builder)


def test_custom_role_names(empty_dsn, catalog):
    pymem.migrate(empty_dsn, roles={"app_role": "acme_memory_app"})
    with psycopg.connect(empty_dsn) as c:
        assert c.execute("SELECT value FROM pymem.config WHERE key = 'app_role'").fetchone() == ("acme_memory_app",)
        assert c.execute("SELECT has_function_privilege('acme_memory_app', 'pymem.fact_add(text,text,text,text,"
                         "pymem.fact_write,integer,vector,text)', "
                         "'EXECUTE')").fetchone()[0]
    before = catalog(empty_dsn)
    pymem.migrate(empty_dsn)  # a later migrate without names keeps the recorded ones
    assert catalog(empty_dsn) == before


# --- 2. row-level security --------------------------------------------------------------


def test_rls_hides_other_tenants_even_from_a_role_with_select(dsn, as_role):
    seed(dsn)
    analyst = as_role("pymem_analyst")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT USAGE ON SCHEMA pymem TO pymem_analyst")
        c.execute("GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA pymem TO pymem_analyst")
        c.execute("GRANT EXECUTE ON FUNCTION pymem.set_tenant TO pymem_analyst")
    try:
        with psycopg.connect(analyst, autocommit=True) as c:
            tables = ("facts", "active_facts", "threads", "messages", "message_embeddings", "stores", "store_entries",
                      "store_audit")
            for table in tables:  # no tenant: nothing at all
                assert c.execute(f"SELECT count(*) FROM pymem.{table}").fetchone()[0] == 0, table
            with c.transaction():
                c.execute("SELECT pymem.set_tenant('acme')")
                assert c.execute("SELECT DISTINCT project_id FROM pymem.facts").fetchall() == [("acme",)]
                assert c.execute("SELECT DISTINCT project_id FROM pymem.active_facts").fetchall() == [("acme",)]
                assert c.execute("SELECT content FROM pymem.messages ORDER BY seq").fetchall() == [("acme says hi",), ("ok",)]
                assert c.execute("SELECT content FROM pymem.store_entries").fetchall() == [("acme note",)]
                with pytest.raises(psycopg.errors.InsufficientPrivilege):  # WITH CHECK: not into another tenant
                    c.execute("INSERT INTO pymem.facts (project_id, scope, scope_id, content, content_key)"
                              " VALUES ('globex', 'user', 'eve', 'planted', pymem.fact_key('planted'))")
            assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == 0  # transaction-local
            c.execute("SELECT pymem.set_tenant('', false)")  # the default project, for the session
            assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == 0  # seed wrote none there
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("REVOKE ALL ON ALL TABLES IN SCHEMA pymem FROM pymem_analyst")
            c.execute("REVOKE ALL ON SCHEMA pymem FROM pymem_analyst")
            c.execute("REVOKE ALL ON FUNCTION pymem.set_tenant FROM pymem_analyst")


def test_one_transaction_serves_one_tenant(dsn, app_dsn):
    with psycopg.connect(app_dsn) as c:  # an explicit transaction
        c.execute("SELECT pymem.fact_add('user', 'alice', 'in acme', 'acme')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="another tenant"):
            c.execute("SELECT * FROM pymem.facts_newest('user', 'alice', 'globex')")
        c.rollback()
        c.execute("SELECT pymem.set_tenant('globex')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT pymem.fact_add('user', 'alice', 'sneaky', 'acme')")
        c.rollback()
    with psycopg.connect(app_dsn, autocommit=True) as c:  # autocommit: each call is its own transaction
        c.execute("SELECT pymem.fact_add('user', 'alice', 'in acme', 'acme')")
        assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', 'alice', 'globex')").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', 'alice', 'acme')").fetchone()[0] == 1


def test_a_role_bound_to_a_project_serves_only_that_project(dsn, as_role):
    """Binding makes the tenant a property of the login role, not of what the caller names."""
    seed(dsn)
    bound = as_role("pymem_acme_service")
    analyst = as_role("pymem_acme_analyst")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_acme_service")
        c.execute("GRANT USAGE ON SCHEMA pymem TO pymem_acme_analyst")
        c.execute("GRANT SELECT ON pymem.facts TO pymem_acme_analyst")
        c.execute("GRANT EXECUTE ON FUNCTION pymem.set_tenant TO pymem_acme_analyst")
        assert c.execute("SELECT pymem.tenant_bind('pymem_acme_service', 'acme')").fetchone()[0] is True
        c.execute("SELECT pymem.tenant_bind('pymem_acme_analyst', 'acme')")
    try:
        with pymem.Database(pymem.Settings(dsn=bound)) as db:
            acme = Memory(db=db, agent_id="bot", project_id="acme")
            assert [f.content for f in acme.retrieve(id="alice")] == ["acme secret"]
            acme.persist("still allowed", id="bob")
            for project in ("globex", ""):
                other = Memory(db=db, agent_id="bot", project_id=project)
                with pytest.raises(pymem.PermissionError, match="may not serve"):
                    other.retrieve(id="alice")
                with pytest.raises(pymem.PermissionError):
                    other.persist("planted", id="alice")
        with psycopg.connect(analyst, autocommit=True) as c:
            c.execute("SET pymem.tenant = 'p:globex'")  # naming another tenant by hand shows nothing
            assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == 0
            c.execute("SELECT pymem.set_tenant('acme', false)")
            assert {r[0] for r in c.execute("SELECT project_id FROM pymem.facts")} == {"acme"}
        with psycopg.connect(app_dsn := dsn, autocommit=True) as c:  # unbound roles are unaffected
            assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', 'alice', 'globex')").fetchone()[0] == 1
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            assert c.execute("SELECT pymem.tenant_unbind('pymem_acme_service')").fetchone()[0] == 1
            c.execute("SELECT pymem.tenant_unbind('pymem_acme_analyst')")
            c.execute("REVOKE ALL ON pymem.facts FROM pymem_acme_analyst")
            c.execute("REVOKE ALL ON SCHEMA pymem FROM pymem_acme_analyst")
            c.execute("REVOKE ALL ON FUNCTION pymem.set_tenant FROM pymem_acme_analyst")


def test_user_import_checks_the_tenant_before_the_document(dsn, as_role):
    """Issue 36, item 8: a role bound to acme importing into globex got 22023 for a bad document
    (or an existing user) before the tenant check: 42501 comes first, whatever the document."""
    seed(dsn)
    bound = as_role("pymem_acme_importer")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_acme_importer")
        c.execute("SELECT pymem.tenant_bind('pymem_acme_importer', 'acme')")
        document = c.execute("SELECT pymem.user_export('alice', 'acme')").fetchone()[0]
    try:
        with psycopg.connect(bound, autocommit=True) as c:
            for doc, project in (('{"format": "not pymem"}', "globex"), ("[1, 2]", "globex"), ("null", "globex"),
                                 (psycopg.types.json.Jsonb(document), "globex"),  # alice has memory there: 22023 before
                                 (psycopg.types.json.Jsonb({**document, "project_id": "globex"}), None)):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not serve"):
                    c.execute("SELECT pymem.user_import(%s::jsonb, project_id => %s)", (doc, project))
            with pytest.raises(psycopg.errors.InvalidParameterValue):  # its own project: the document's checks
                c.execute("SELECT pymem.user_import('{\"format\": \"not pymem\"}', project_id => 'acme')")
            counts = c.execute("SELECT pymem.user_import(%s, project_id => 'acme', user_id => 'alice2')",
                               (psycopg.types.json.Jsonb(document),)).fetchone()[0]
            assert counts["facts"] == 1
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT pymem.tenant_unbind('pymem_acme_importer')")


def test_dropping_a_bound_role_never_breaks_other_roles(dsn, app_dsn, as_role):
    """A binding whose role is gone is ignored: DROP ROLE is no outage for anyone else."""
    seed(dsn)
    as_role("pymem_doomed")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.tenant_bind('pymem_doomed', 'acme')")
        c.execute("DROP ROLE pymem_doomed")
        assert c.execute("SELECT count(*) FROM pymem.tenant_roles WHERE role_name = 'pymem_doomed'").fetchone()[0] == 1
    try:
        with psycopg.connect(app_dsn, autocommit=True) as c:
            assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', 'alice', 'globex')").fetchone()[0] == 1
            assert c.execute("SELECT id FROM pymem.fact_add('user', 'bob', 'still works', 'acme')").fetchone()[0] > 0
        # a role created again under that name inherits the binding (bindings are by name)
        reborn = as_role("pymem_doomed")
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("GRANT pymem_app TO pymem_doomed")
        with psycopg.connect(reborn, autocommit=True) as c:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not serve"):
                c.execute("SELECT * FROM pymem.facts_newest('user', 'alice', 'globex')")
            assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', 'alice', 'acme')").fetchone()[0] == 1
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT pymem.tenant_unbind('pymem_doomed')")


def test_a_confined_role_cannot_stall_another_tenants_learned_writes(dsn, as_role):
    """Neither the old advisory key nor the subject's lock row is within a bound role's reach."""
    seed(dsn)
    acme = as_role("pymem_acme_writer")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_acme_writer")
        c.execute("SELECT pymem.tenant_bind('pymem_acme_writer', 'acme')")
        c.execute("SELECT pymem.fact_add('user', 'alice', 'globex learned 0', 'globex', write => pymem.fact_write(source => 'learned'))")
    try:
        with psycopg.connect(acme) as holder:
            # everything a confined role can try, held in one open transaction
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(concat_ws(chr(31), 'pymem.facts.cap', "
                           "'globex', 'user', 'alice'), 0))")
            holder.execute("SELECT pymem.fact_add('user', 'alice', 'acme learned', 'acme', write => pymem.fact_write(source => 'learned'))")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                with holder.transaction():
                    holder.execute("SELECT 1 FROM pymem.subject_locks FOR UPDATE")
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SET lock_timeout = '3s'")
                got = other.execute("SELECT created FROM pymem.fact_add('user', 'alice', 'globex learned 1', 'globex', "
                                    "write => pymem.fact_write(source => 'learned'))").fetchone()
                assert got == (True,)
            holder.rollback()
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT pymem.tenant_unbind('pymem_acme_writer')")


def test_learned_writers_of_one_subject_wait_for_each_other_and_no_one_else(dsn):
    """An interleaving: A holds alice's lock row; B (alice) waits on it; C (bob) does not."""
    with psycopg.connect(dsn) as a:
        a.execute("SELECT pymem.fact_add('user', 'alice', 'learned a', write => pymem.fact_write(source => 'learned'), max_learned => 1)")
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SET lock_timeout = '3s'")
            c.execute("SELECT pymem.fact_add('user', 'bob', 'learned c', write => pymem.fact_write(source => 'learned'), max_learned => 1)")
        done = threading.Event()

        def b():
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT pymem.fact_add('user', 'alice', 'learned b', write => pymem.fact_write(source => 'learned'), max_learned => 1)")
            done.set()

        t = threading.Thread(target=b)
        t.start()
        wait_for_lock(dsn, blocked_by=a.info.backend_pid)
        assert not done.is_set()
        a.commit()
        t.join(30)
        assert done.is_set()
    with psycopg.connect(dsn) as c:
        rows = c.execute("SELECT content FROM pymem.facts_newest('user', 'alice')").fetchall()
        assert rows == [("learned b",)]  # the cap (1) held across the interleaving
        c.execute("SELECT pymem.facts_forget('user', 'alice')")
        assert c.execute("SELECT count(*) FROM pymem.subject_locks WHERE scope_id = 'alice'").fetchone()[0] == 0


# --- 3. function safety -----------------------------------------------------------------


def test_look_alike_functions_and_operators_earlier_on_the_search_path_are_never_called(dsn):
    seed(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE SCHEMA evil")
        for fn in ("length(text)", "lower(text)", "btrim(text)", "sha256(bytea)", "normalize(text,text)",
                   "regexp_replace(text,text,text,text)", "current_setting(text,boolean)", "now()",
                   "clock_timestamp()", "left(text,integer)", "substr(text,integer)", "encode(bytea,text)"):
            name, args = fn.split("(", 1)
            c.execute(f"CREATE FUNCTION evil.{name}({args} RETURNS text LANGUAGE plpgsql AS "
                      f"$$BEGIN RAISE EXCEPTION 'evil {name} called'; END$$")
        c.execute("CREATE FUNCTION evil.eq(text, text) RETURNS boolean LANGUAGE plpgsql AS "
                  "$$BEGIN RAISE EXCEPTION 'evil = called'; END$$")
        c.execute("CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.eq)")
        c.execute("CREATE FUNCTION pg_temp.length(text) RETURNS integer LANGUAGE sql AS 'SELECT 0'")
        # public is on the pinned path (pgvector lives there): look-alikes planted there lose to
        # pg_catalog (first) and pymem (second)
        for fn in ("length(text)", "lower(text)", "_fact_trim(text)", "fact_key(text)"):
            name, args = fn.split("(", 1)
            c.execute(f"CREATE FUNCTION public.{name}({args} RETURNS text LANGUAGE plpgsql AS "
                      f"$$BEGIN RAISE EXCEPTION 'public {name} called'; END$$")
        c.execute("SET search_path = evil, pg_temp, pymem, public")
        assert c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'still fine', 'acme')").fetchone()[0] > 0
        assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', 'alice', 'acme')").fetchone()[0] == 2
        assert c.execute("SELECT user_seq FROM pymem.turn_record('alice', 'q', 'a', project_id => 'acme')").fetchone()
        assert c.execute("SELECT pymem.context_read('alice', project_id => 'acme')").fetchone()[0]["window"]
        assert c.execute("SELECT pymem.store_write('notes', 'b.txt', 'x', project_id => 'acme')").fetchone()[0]
        c.execute("RESET search_path")
        c.execute("DROP SCHEMA evil CASCADE")
        for fn in ("length(text)", "lower(text)", "_fact_trim(text)", "fact_key(text)"):
            c.execute(f"DROP FUNCTION public.{fn}")


# --- 6. faults --------------------------------------------------------------------------


def test_a_backend_killed_in_the_middle_of_a_turn_leaves_no_half_turn(dsn):
    """The turn's messages are written, then it waits for alice's learned-facts lock (held by
    another session's open transaction); the backend is terminated right there."""
    holder = psycopg.connect(dsn)
    holder.execute("SELECT pymem.fact_add('user', 'alice', 'held', write => pymem.fact_write(source => 'learned'))")
    out: dict = {}

    def turn():
        with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=1)) as db:
            mem = Memory(db=db, agent_id="bot", embedder=HashEmbedder(), extractor=lambda m: [f"fact: {m}"])
            try:
                mem.record("I have a cat named Tom", "Nice.", user="alice")
            except pymem.Error as exc:
                out["error"] = exc

    t = threading.Thread(target=turn)
    t.start()
    pid = wait_for_lock(dsn, blocked_by=holder.info.backend_pid)  # the turn reached the cap lock
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s)", (pid,))
    t.join(30)
    holder.rollback()
    holder.close()
    assert isinstance(out.get("error"), pymem.ConnectionError)
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.messages").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.message_embeddings").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.threads").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == 0


def test_a_backend_killed_in_the_middle_of_a_supersede_leaves_no_dangling_pointer(dsn):
    """The supersede has locked the old row and is inserting the new version, which waits for a
    concurrent uncommitted add of the same content; the backend is terminated right there."""
    with psycopg.connect(dsn, autocommit=True) as c:
        old = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Prefers email')").fetchone()[0]
    other = psycopg.connect(dsn)
    other.execute("SELECT pymem.fact_add('user', 'alice', 'Prefers Slack')")  # not committed
    out: dict = {}

    def supersede():
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("SELECT pymem.fact_supersede('user', 'alice', 'Prefers Slack', id => %s)", (old,))
        except psycopg.Error as exc:
            out["error"] = exc

    t = threading.Thread(target=supersede)
    t.start()
    pid = wait_for_lock(dsn, blocked_by=other.info.backend_pid)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s)", (pid,))
    t.join(30)
    other.rollback()
    other.close()
    assert isinstance(out.get("error"), psycopg.OperationalError)
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT id, superseded_by, superseded_at FROM pymem.facts").fetchall() == [(old, None, None)]


@pytest.mark.slow
def test_immediate_shutdown_under_write_load_loses_no_acknowledged_write():
    """A durable server of its own (the session server runs with fsync off), a concurrent write
    load, `pg_ctl stop -m immediate` in the middle, a restart: every write that was
    acknowledged is there, and a pool opened before the crash recovers by itself."""
    # not under tmp_path: another xdist worker's first tmp_path closes /tmp/pytest-of-root to
    # other users again (pytest keeps it 0700), and the server's OS user (as root: embedded_postgres)
    # could no longer reach its data to stop it (seen in CI: pg_ctl "Permission denied")
    data = Path(tempfile.mkdtemp(prefix="pymem-durable-"))
    info = server.start(data)
    try:
        pymem.migrate(info.uri)
        db = pymem.Database(pymem.Settings(dsn=info.uri, pool_min_size=2, pool_max_size=4, pool_timeout=5))
        mem = Memory(db=db, agent_id="bot", embedder=HashEmbedder())
        acked_facts: list[tuple[str, int]] = []
        acked_turns: list[tuple[str, int]] = []
        stop = threading.Event()

        def load(n: int) -> None:
            i = 0
            while not stop.is_set() and i < 5000:
                i += 1
                try:
                    fid = mem.persist(f"fact {n}-{i}", id=f"user{n}")
                    acked_facts.append((f"fact {n}-{i}", fid))
                    res = mem.record(f"question {n}-{i}", f"answer {n}-{i}", user=f"user{n}")
                    acked_turns.append((f"user{n}", res.assistant_seq))
                except pymem.Error:
                    time.sleep(0.01)

        threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        before_crash = len(acked_facts)
        server.stop(data, mode="immediate")
        server.start(data)  # crash recovery, while the load goes on
        time.sleep(1.5)
        stop.set()
        for t in threads:
            t.join(60)
        assert before_crash and len(acked_facts) > before_crash, "the load did not resume after the restart"
        # the pool opened before the crash is still the one serving: nothing was restarted
        assert [f.content for f in mem.retrieve(id="user0", limit=1)]
        with psycopg.connect(info.uri) as c:
            c.execute("SELECT set_config('pymem.tenant', 'p:', false)")
            facts = dict(c.execute("SELECT content, id FROM pymem.facts").fetchall())
            turns = dict(c.execute("SELECT user_id, last_seq FROM pymem.threads").fetchall())
        for content, fid in acked_facts:
            assert facts.get(content) == fid, f"acknowledged fact {content!r} is missing"
        for user, seq in acked_turns:
            assert turns[user] >= seq, f"acknowledged turn {user}#{seq} is missing"
        db.close()
    finally:
        server.stop(data)
        shutil.rmtree(data, ignore_errors=True)


# --- 7. concurrency ---------------------------------------------------------------------


def test_32_concurrent_identical_adds_through_the_app_role_give_one_row(dsn, app_dsn):
    n = 32
    barrier = threading.Barrier(n)
    ids: list[int] = []
    conns = [psycopg.connect(app_dsn, autocommit=True) for _ in range(n)]

    def add(c):
        barrier.wait()
        ids.append(c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Allergic to peanuts', 'acme')").fetchone()[0])

    threads = [threading.Thread(target=add, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in conns:
        c.close()
    assert len(ids) == n and len(set(ids)) == 1
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] == 1


def test_identifiers_in_dynamic_sql_are_quoted(dsn, as_role):
    """Role names are composed into DDL with %I: a hostile name is just a name."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("SELECT set_config('pymem.reader_role', %s, false)"), ('r"; DROP TABLE pymem.facts; --',))
        c.execute(open(str(pymem.queries.sql_root() / "grants.sql")).read())
        assert c.execute("SELECT to_regclass('pymem.facts')").fetchone()[0] == "pymem.facts"
        assert c.execute("SELECT value FROM pymem.config WHERE key = 'reader_role'").fetchone()[0].startswith('r"')
        c.execute("SELECT set_config('pymem.reader_role', 'pymem_reader', false)")
        c.execute(open(str(pymem.queries.sql_root() / "grants.sql")).read())
        c.execute('DROP ROLE IF EXISTS "r""; DROP TABLE pymem.facts; --"')
