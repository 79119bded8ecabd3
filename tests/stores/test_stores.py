"""Keyed memory stores (sql/api/stores*.sql, pymem/stores.py) against the real server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import threading
import time

import psycopg
import pytest

import pymem
from conftest import wait_for_lock
from pymem import MUST_NOT_EXIST, MemoryStore


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def count(dsn, table) -> int:
    with psycopg.connect(dsn) as c:
        return c.execute(f"SELECT count(*) FROM pymem.{table}").fetchone()[0]


# --- 1. keyed stores --------------------------------------------------------------------


def test_get_or_create_loads_or_creates_and_keys_are_namespaced_by_project(db):
    a = MemoryStore.get_or_create("assistant", db=db)
    a.write_text("notes/a.txt", "in the default project")
    again = MemoryStore.get_or_create("assistant", db=db)
    assert again.read_text("notes/a.txt") == "in the default project"
    other = MemoryStore.get_or_create("assistant", db=db, project_id="acme")
    assert other.read_text("notes/a.txt") is None and other.list_paths() == []
    with pytest.raises(pymem.NotFoundError):
        MemoryStore.get("never-created", db=db)
    for bad in ("", "*", "k" * 513):
        with pytest.raises(pymem.ValidationError):
            MemoryStore.get_or_create(bad, db=db)


# --- 2, 3. entries and metadata ---------------------------------------------------------


def test_entries_text_and_json_with_defaults_listing_and_metadata(db):
    s = MemoryStore.get_or_create("k", db=db, actor="agent-1")
    assert s.read_text("missing.txt", default="dflt") == "dflt"
    assert s.read_json("missing.json", default=[]) == []
    before = time.time()
    sha = s.write_text("notes/today.md", "- read the paper ✓", reason="first note")
    assert sha == hashlib.sha256("- read the paper ✓".encode()).hexdigest()
    s.write_json("state/counter.json", {"n": 1, "tags": ["a", "b"]}, actor="agent-2")
    assert s.read_json("state/counter.json") == {"n": 1, "tags": ["a", "b"]}
    assert s.read_text("notes/today.md") == "- read the paper ✓"
    meta = s.get_meta("notes/today.md")
    assert (meta.sha, meta.actor, meta.reason, meta.kind, meta.version) == (sha, "agent-1", "first note", "text", 1)
    assert meta.size == len("- read the paper ✓".encode())
    assert abs(meta.updated_at.timestamp() - before) < 60
    assert s.get_meta("state/counter.json").actor == "agent-2"
    assert s.current_sha("nope.txt") is None
    s.write_text("notes/zz.md", "z")
    assert s.list_paths() == ["notes/today.md", "notes/zz.md", "state/counter.json"]
    assert s.list_paths("notes/") == ["notes/today.md", "notes/zz.md"]
    assert s.list_paths("st") == ["state/counter.json"]
    assert s.delete("notes/zz.md") is True and s.delete("notes/zz.md") is False
    assert s.list_paths("notes/") == ["notes/today.md"]
    with pytest.raises(pymem.ValidationError, match="JSON"):
        s.read_json("notes/today.md")
    with pytest.raises(pymem.ValidationError):
        s.write_json("x.json", {"bad": float("nan")})


# --- 4, 5. audit and versions -----------------------------------------------------------


def test_audit_and_versions_after_a_mixed_sequence(db):
    s = MemoryStore.get_or_create("k", db=db, keep_versions=True, actor="bot")
    v1 = s.write_text("plan.md", "v1", reason="start")
    v2 = s.write_text("plan.md", "v2")
    s.write_json("x.json", [1])
    assert s.delete("x.json", reason="cleanup") is True
    v3 = s.restore("plan.md", 1, actor="admin")
    assert v3 == v1 and s.read_text("plan.md") == "v1"
    log = [(a.op, a.path, a.old_sha, a.new_sha, a.actor, a.reason) for a in s.audit_tail(10)]
    xsha = hashlib.sha256(b"[1]").hexdigest()
    assert log == [
        ("write", "plan.md", None, v1, "bot", "start"),
        ("write", "plan.md", v1, v2, "bot", None),
        ("write", "x.json", None, xsha, "bot", None),
        ("delete", "x.json", xsha, None, "bot", "cleanup"),
        ("restore", "plan.md", v2, v1, "admin", "restore version 1"),
    ]
    assert [a.op for a in s.audit_tail(2)] == ["delete", "restore"]
    assert [(v.version, v.sha) for v in s.versions("plan.md")] == [(1, v1), (2, v2), (3, v1)]
    assert s.read_version("plan.md", 2) == "v2"
    assert [v.version for v in s.versions("x.json")] == [1]  # history outlives a delete
    s.restore("x.json", 1)
    assert s.read_json("x.json") == [1] and s.get_meta("x.json").version == 2
    with pytest.raises(pymem.NotFoundError):
        s.restore("plan.md", 99)
    with pytest.raises(pymem.NotFoundError):
        s.read_version("plan.md", 99)


def test_audit_off_and_versions_off(db, dsn):
    s = MemoryStore.get_or_create("quiet", db=db, audit=False)
    s.write_text("a.txt", "1")
    s.write_text("a.txt", "2")
    assert s.audit_tail() == [] and s.versions("a.txt") == []
    assert count(dsn, "store_audit") == 0 and count(dsn, "store_versions") == 0
    # options persist; opening never changes them (PM404 when asked to), protect() does
    assert MemoryStore.get_or_create("quiet", db=db).audit is False
    assert MemoryStore.get_or_create("quiet", db=db, audit=False).audit is False
    with pytest.raises(pymem.ConflictError) as conflict:
        MemoryStore.get_or_create("quiet", db=db, audit=True)
    assert conflict.value.sqlstate == "PM404" and "audit off -> on" in str(conflict.value)
    assert s.protect(audit=True, reason="compliance") is True and s.audit is True
    assert MemoryStore.get_or_create("quiet", db=db).audit is True


# --- 6. optimistic concurrency ----------------------------------------------------------


def test_expected_sha_and_must_not_exist(db):
    s = MemoryStore.get_or_create("k", db=db)
    sha = s.write_json("n.json", [], expected_sha=MUST_NOT_EXIST)
    with pytest.raises(pymem.ConcurrencyError) as exists:
        s.write_json("n.json", [1], expected_sha=MUST_NOT_EXIST)
    assert exists.value.sqlstate == "PM401"
    sha2 = s.write_json("n.json", [1], expected_sha=sha)
    with pytest.raises(pymem.ConcurrencyError):
        s.write_json("n.json", [2], expected_sha=sha)  # stale
    with pytest.raises(pymem.ConcurrencyError):
        s.delete("n.json", expected_sha=sha)
    with pytest.raises(pymem.ConcurrencyError):
        s.write_text("other.txt", "x", expected_sha=sha)  # does not exist
    with pytest.raises(pymem.ValidationError):
        s.write_text("other.txt", "x", expected_sha="not-a-sha")
    assert s.read_json("n.json") == [1]
    assert s.delete("n.json", expected_sha=sha2) is True


def test_two_sessions_holding_the_same_sha_exactly_one_wins(dsn):
    """Explicit interleaving: A writes with sha S inside an open transaction; B writes with S
    too and must wait on A's row lock; A commits; B gets PM401 and writes nothing."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT * FROM pymem.store_open('k')")
        sha = c.execute("SELECT pymem.store_write('k', 'n.txt', '0')").fetchone()[0]
    a = psycopg.connect(dsn)
    a.execute("SELECT pymem.store_write('k', 'n.txt', 'from A', expected_sha => %s)", (sha,))
    out: dict = {}

    def b():
        with psycopg.connect(dsn, autocommit=True) as c:
            try:
                c.execute("SELECT pymem.store_write('k', 'n.txt', 'from B', expected_sha => %s)", (sha,))
                out["won"] = True
            except psycopg.Error as exc:
                out["sqlstate"] = exc.sqlstate

    t = threading.Thread(target=b)
    t.start()
    wait_for_lock(dsn, blocked_by=a.info.backend_pid)  # B waits for A's row lock
    assert out == {}
    a.commit()
    t.join(30)
    a.close()
    assert out == {"sqlstate": "PM401"}
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT content FROM pymem.store_read('k', 'n.txt')").fetchone()[0] == "from A"


WORKER = """
import sys, pymem
dsn, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=1)) as db:
    store = pymem.MemoryStore.get_or_create("shared", db=db, actor=name)
    retries = 0
    for _ in range(n):
        while True:
            sha = store.current_sha("counter.json")
            value = store.read_json("counter.json", default={"n": 0, "by": []})
            value["n"] += 1
            value["by"].append(name)
            try:
                store.write_json("counter.json", value,
                                 expected_sha=sha if sha is not None else pymem.MUST_NOT_EXIST)
                break
            except pymem.ConcurrencyError:
                retries += 1
    print(retries)
"""


def test_concurrent_read_modify_write_from_several_processes_loses_no_update(dsn):
    procs, n = 4, 25
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, dsn, f"w{i}", str(n)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for i in range(procs)
    ]
    outs = [w.communicate(timeout=180) for w in workers]
    assert all(w.returncode == 0 for w in workers), [o[1][-2000:] for o in outs]
    with psycopg.connect(dsn) as c:
        content = c.execute("SELECT content FROM pymem.store_read('shared', 'counter.json')").fetchone()[0]
        writes = c.execute("SELECT count(*) FROM pymem.store_audit WHERE path = 'counter.json'").fetchone()[0]
    value = json.loads(content)
    assert value["n"] == procs * n, "an update was lost"
    assert sorted(value["by"]) == sorted(f"w{i}" for i in range(procs) for _ in range(n))
    assert writes == procs * n  # every successful write, and only those, is in the audit log


# --- 7. prefixes, 8. paths --------------------------------------------------------------


def test_read_only_and_reserved_prefixes(db, dsn):
    s = MemoryStore.get_or_create("k", db=db, read_only_prefixes=["memory", "policies/"])
    assert s.read_only_prefixes == ["memory/", "policies/"]
    for path in ("memory/facts.md", "memory", "policies/a/b.txt"):
        with pytest.raises(pymem.PermissionError) as err:
            s.write_text(path, "x")
        assert err.value.sqlstate == "PM402"
    s.write_text("memoryless.txt", "fine")  # only whole segments match
    s.write_text("staging/memory/proposal.md", "fine")
    for path in ("messages.json", "audit/log.jsonl", "meta/x.json", "versions/a/1.txt"):
        with pytest.raises(pymem.ValidationError) as err:
            s.write_text(path, "x")
        assert err.value.sqlstate == "PM403"
    assert s.list_paths() == ["memoryless.txt", "staging/memory/proposal.md"]
    with psycopg.connect(dsn, autocommit=True) as c:  # the SQL API refuses it the same way
        with pytest.raises(psycopg.Error) as raw:
            c.execute("SELECT pymem.store_write('k', 'memory/x.md', 'x')")
        assert raw.value.sqlstate == "PM402"


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "../escape", "a/../../b", "a//b", "a/", "./a", "a/./b", "a\\b", "a\x01b", "x" * 1025,
     "a/" + "s" * 256],
)
def test_bad_paths_are_refused_and_write_nothing(db, dsn, path):
    s = MemoryStore.get_or_create("k", db=db)
    with pytest.raises(pymem.ValidationError):
        s.write_text(path, "x")
    with pytest.raises(pymem.ValidationError):
        s.read_text(path)
    assert count(dsn, "store_entries") == 0 and count(dsn, "store_audit") == 0


def test_nul_and_size_limits(db, dsn):
    s = MemoryStore.get_or_create("k", db=db)
    with pytest.raises(pymem.ValidationError, match="NUL"):
        s.write_text("a\x00b", "x")
    with pytest.raises(pymem.ValidationError, match="NUL"):
        s.write_text("a.txt", "x\x00")
    with pytest.raises(pymem.ValidationError, match="8 MiB"):
        s.write_text("big.txt", "é" * (4 * 1024 * 1024 + 1))  # 8 MiB + 2 bytes of UTF-8
    s.write_text("ok.txt", "x" * (8 * 1024 * 1024))  # exactly the limit
    assert s.get_meta("ok.txt").size == 8 * 1024 * 1024
    assert count(dsn, "store_entries") == 1


# --- 9. transcript ----------------------------------------------------------------------


def test_transcript_append_save_and_another_process_sees_it(db, dsn):
    s = MemoryStore.get_or_create("assistant", db=db)
    s.append({"role": "user", "content": "What is pgvector?"})
    s.extend([{"role": "assistant", "content": "A vector extension."}, {"role": "tool", "content": "{}", "name": "x"}])
    assert s.unsaved == 3 and count(dsn, "store_messages") == 0  # nothing is written before save()
    assert s.save() == 3 and s.unsaved == 0
    assert s.save() == 3  # nothing pending: no write
    other = subprocess.run(
        [sys.executable, "-c",
         "import sys, json, pymem\n"
         "s = pymem.MemoryStore.get('assistant', db=pymem.Database(pymem.Settings(dsn=sys.argv[1])))\n"
         "print(json.dumps(s.messages))\n"
         "s.append_run([{'role': 'user', 'content': 'and HNSW?'}])", dsn],
        capture_output=True, text=True, timeout=60, check=True)
    assert [m["content"] for m in json.loads(other.stdout)] == [
        "What is pgvector?", "A vector extension.", "{}"]
    assert [m["content"] for m in s.reload().messages][-1] == "and HNSW?"
    with pytest.raises(pymem.ValidationError):
        s.append({"content": "no role"})
    with psycopg.connect(dsn, autocommit=True) as c, pytest.raises(psycopg.errors.InvalidParameterValue):
        c.execute("""SELECT pymem.store_messages_append('assistant', '[{"role": "user"}, 42]')""")
    assert count(dsn, "store_messages") == 4


def test_drop_is_guarded_like_forget(db, dsn):
    for key in ("a", "b"):
        s = MemoryStore.get_or_create(key, db=db, keep_versions=True)
        s.write_text("x.txt", key)
        s.append_run([{"role": "user", "content": key}])
    MemoryStore.get_or_create("c", db=db, project_id="acme").write_text("x.txt", "c")
    with pytest.raises(pymem.ValidationError, match="store key"):  # an unset key is refused, not "0 dropped"
        MemoryStore.drop("", db=db)
    assert MemoryStore.drop("a", db=db) == 1
    assert count(dsn, "store_entries") == 2 and count(dsn, "store_versions") == 1
    assert MemoryStore.drop("*", db=db) == 1  # every store of the default project, not acme's
    assert count(dsn, "stores") == 1
    for table in ("store_messages", "store_audit", "store_versions"):
        assert count(dsn, table) == (1 if table == "store_audit" else 0)


def test_async_store(dsn):
    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:
            s = await pymem.AsyncMemoryStore.get_or_create("async", db=adb, keep_versions=True)
            sha = await s.write_json("a.json", {"x": 1}, expected_sha=MUST_NOT_EXIST)
            try:
                await s.write_json("a.json", {"x": 2}, expected_sha=MUST_NOT_EXIST)
            except pymem.ConcurrencyError:
                conflict = True
            await s.write_json("a.json", {"x": 2}, expected_sha=sha)
            await s.append_run([{"role": "user", "content": "hi"}])
            again = await pymem.AsyncMemoryStore.get("async", db=adb)
            return conflict, await again.read_json("a.json"), again.messages, [v.version for v in await s.versions("a.json")]

    conflict, value, messages, versions = asyncio.run(main())
    assert conflict and value == {"x": 2} and messages == [{"role": "user", "content": "hi"}] and versions == [1, 2]


def test_read_only_prefixes_guard_deletes_and_restores_too(db):
    s = MemoryStore.get_or_create("ro", db=db, keep_versions=True)
    s.write_text("memory/policy.md", "v1")
    s.protect(read_only_prefixes=["memory/"])
    with pytest.raises(pymem.PermissionError):
        s.delete("memory/policy.md")
    with pytest.raises(pymem.PermissionError):
        s.restore("memory/policy.md", 1)
    assert s.read_text("memory/policy.md") == "v1"


# --- protections: chosen at creation, changed only explicitly and audited ------------------


@pytest.fixture
def app_login(dsn, as_role):
    """A login role that is a member of pymem_app (the documented DBA step)."""
    role = as_role("pymem_app_login")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO pymem_app_login")
    return role


@pytest.fixture
def admin_login(dsn, as_role):
    """A non-superuser login role that is a member of the owner role (an administrator)."""
    role = as_role("pymem_store_admin")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_owner TO pymem_store_admin")
    yield role
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("REVOKE pymem_owner FROM pymem_store_admin")


def store_row(dsn, key="guarded"):
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT audit, keep_versions, read_only_prefixes FROM pymem.stores WHERE store_key = %s",
                         (key,)).fetchone()


def audit_rows(dsn, key="guarded"):
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT op, path, actor, reason FROM pymem.store_audit WHERE store_key = %s ORDER BY id",
                         (key,)).fetchall()


def sqlstate(c, statement, *args) -> str | None:
    try:
        c.execute(statement, args or None)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def test_the_app_role_cannot_open_away_a_stores_protections(dsn, app_login):
    """Issue 11.5: store_open(read_only_prefixes => '{}', audit => false) on an existing store
    turned its protections off for any app-role caller, who could then write unaudited into
    the protected prefix."""
    with psycopg.connect(app_login, autocommit=True) as c:
        c.execute("SELECT * FROM pymem.store_open('guarded', keep_versions => true, "
                  "read_only_prefixes => ARRAY['memory'])")
        for weaken in ("read_only_prefixes => '{}', audit => false", "read_only_prefixes => '{}'",
                       "audit => false", "keep_versions => false", "\"create\" => false, audit => false"):
            assert sqlstate(c, f"SELECT * FROM pymem.store_open('guarded', {weaken})") == "PM404", weaken
        # options equal to the stored ones (or none) open it fine
        assert c.execute("SELECT audit_on, versions_on, read_only, created FROM pymem.store_open('guarded', "
                         "audit => true, read_only_prefixes => ARRAY['memory/'])").fetchone() == (
            True, True, ["memory/"], False)
        assert sqlstate(c, "SELECT pymem.store_write('guarded', 'memory/facts.md', 'forged')") == "PM402"
        c.execute("SELECT pymem.store_write('guarded', 'notes/a.md', 'fine', actor => 'app')")
    assert store_row(dsn) == (True, True, ["memory/"])
    assert audit_rows(dsn) == [("write", "notes/a.md", "app", None)]


def test_store_protect_only_tightens_and_store_configure_is_for_administrators(dsn, app_login, admin_login):
    with psycopg.connect(app_login, autocommit=True) as c:
        c.execute("SELECT * FROM pymem.store_open('guarded', read_only_prefixes => ARRAY['memory/core'])")
        for weaken in ("audit => false", "keep_versions => false, audit => false", "read_only_prefixes => '{}'",
                       "read_only_prefixes => ARRAY['memory/core/deep']", "read_only_prefixes => ARRAY['other']"):
            assert sqlstate(c, f"SELECT * FROM pymem.store_protect('guarded', {weaken})") == "42501", weaken
        assert audit_rows(dsn) == [] and store_row(dsn) == (True, False, ["memory/core/"])
        # tightening: a wider prefix covering the old one, one more prefix, versions on
        row = c.execute("SELECT * FROM pymem.store_protect('guarded', keep_versions => true, "
                        "read_only_prefixes => ARRAY['memory', 'policies/'], actor => 'ops', "
                        "reason => 'lock policies')").fetchone()
        assert row == (True, True, ["memory/", "policies/"], True)
        assert c.execute("SELECT changed FROM pymem.store_protect('guarded', keep_versions => true)").fetchone() == (
            False,)  # nothing to change: no audit row
        assert sqlstate(c, "SELECT pymem.store_write('guarded', 'policies/a.md', 'x')") == "PM402"
        # the app role may not call store_configure at all
        assert sqlstate(c, "SELECT * FROM pymem.store_configure('guarded', audit => false)") == "42501"
    assert audit_rows(dsn) == [
        ("protect", "", "ops", "lock policies: keep_versions off -> on; "
                               "read_only_prefixes {memory/core/} -> {memory/,policies/}")]
    # an administrator (member of the owner role, not a superuser) weakens them, audited first
    with psycopg.connect(admin_login, autocommit=True) as c:
        row = c.execute("SELECT * FROM pymem.store_configure('guarded', audit => false, read_only_prefixes => '{}', "
                        "actor => 'dba', reason => 'importer rewrites memory/')").fetchone()
        assert row == (False, True, [], True)
    with psycopg.connect(app_login, autocommit=True) as c:
        c.execute("SELECT pymem.store_write('guarded', 'memory/facts.md', 'now allowed')")
    assert audit_rows(dsn)[1:] == [  # the change is logged although it turned the log off; the write is not
        ("unprotect", "", "dba", "importer rewrites memory/: audit on -> off; "
                                 "read_only_prefixes {memory/,policies/} -> {}")]


def test_python_protect_and_configure(dsn, app_login, admin_login):
    with pymem.Database(pymem.Settings(dsn=app_login, pool_max_size=2)) as app_db:
        s = MemoryStore.get_or_create("guarded", db=app_db, actor="bot", read_only_prefixes=["memory/"])
        with pytest.raises(pymem.ConflictError) as conflict:
            MemoryStore.get_or_create("guarded", db=app_db, read_only_prefixes=[])
        assert conflict.value.sqlstate == "PM404"
        with pytest.raises(pymem.PermissionError) as weaken:
            s.protect(read_only_prefixes=[])
        assert weaken.value.sqlstate == "42501" and "store.configure()" in str(weaken.value)
        with pytest.raises(pymem.PermissionError):
            s.configure(read_only_prefixes=[])
        assert s.protect(keep_versions=True) is True and s.keep_versions is True
        assert s.protect(keep_versions=True) is False
        assert s.read_only_prefixes == ["memory/"]
    with pymem.Database(pymem.Settings(dsn=admin_login, pool_max_size=2)) as admin_db:
        admin = MemoryStore.get("guarded", db=admin_db, actor="dba")
        assert admin.configure(read_only_prefixes=[], reason="unlock") is True
        assert admin.read_only_prefixes == [] and admin.keep_versions is True
        assert [(a.op, a.path, a.actor) for a in admin.audit_tail()] == [("protect", "", "bot"),
                                                                         ("unprotect", "", "dba")]

    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=app_login)) as adb:
            a = await pymem.AsyncMemoryStore.get("guarded", db=adb)
            changed = await a.protect(read_only_prefixes=["memory"])
            try:
                await a.configure(audit=False)
            except pymem.PermissionError:
                refused = True
            return changed, a.read_only_prefixes, refused

    assert asyncio.run(main()) == (True, ["memory/"], True)


# --- paths are Unicode-normalised (NFC) ----------------------------------------------------

NFC, NFD = "caf\u00e9", "cafe\u0301"  # one name, two spellings


def test_nfc_and_nfd_spellings_of_a_path_are_one_entry(db, dsn):
    s = MemoryStore.get_or_create("unicode", db=db, keep_versions=True, read_only_prefixes=[f"{NFD}-locked"])
    assert s.read_only_prefixes == [f"{NFC}-locked/"]
    v1 = s.write_text(f"{NFD}/menu.md", "v1")  # written in NFD ...
    assert s.read_text(f"{NFC}/menu.md") == "v1"  # ... read in NFC
    assert s.current_sha(f"{NFC}/menu.md") == v1
    with pytest.raises(pymem.ConcurrencyError):
        s.write_text(f"{NFC}/menu.md", "x", expected_sha=MUST_NOT_EXIST)  # it exists, whatever the spelling
    s.write_text(f"{NFC}/menu.md", "v2", expected_sha=v1)
    assert s.list_paths() == [f"{NFC}/menu.md"]
    assert s.list_paths(f"{NFD}/") == [f"{NFC}/menu.md"] == s.list_paths(NFC)
    assert [v.version for v in s.versions(f"{NFD}/menu.md")] == [1, 2]
    assert s.read_version(f"{NFD}/menu.md", 1) == "v1"
    s.restore(f"{NFD}/menu.md", 1)
    assert s.read_text(f"{NFD}/menu.md") == "v1" and s.get_meta(f"{NFD}/menu.md").version == 3
    with pytest.raises(pymem.PermissionError):
        s.write_text(f"{NFC}-locked/a.md", "x")
    assert s.delete(f"{NFC}/menu.md") is True and s.read_text(f"{NFD}/menu.md") is None
    with psycopg.connect(dsn) as c:
        paths = {r[0] for r in c.execute("SELECT path FROM pymem.store_audit UNION ALL "
                                         "SELECT path FROM pymem.store_versions").fetchall()}
    assert paths == {f"{NFC}/menu.md"}


def test_the_upgrade_from_0_1_rewrites_stored_paths_to_nfc(empty_dsn, as_role, tmp_path):
    """Paths a 0.1.0 database stored in NFD become NFC (entries, versions, audit, read-only
    prefixes) when 0006_v0_2_0_memory upgrades it; a name stored under two spellings is left
    alone. The upgrade runs as an administrator who is not a superuser: forced row-level security
    must not hide the rows. The 0.1.0 database is installed by that release's own psql script."""
    from pathlib import Path  # noqa: PLC0415

    from pymem import migrations, server  # noqa: PLC0415

    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        pytest.skip("needs the repository's git history (0.1.0's SQL)")
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar",
                              "324b35bf8efb47bcd3fc4c98b63c89762b8a140b", "sql"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    out = subprocess.run([str(server.bin_dir() / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn,
                          "-f", str(tmp_path / "sql" / "migrate.sql")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    admin_login = as_role("pymem_store_admin", on=empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as c:  # superuser: bypasses RLS, writes what 0.1 could have
        c.execute("GRANT pymem_owner TO pymem_store_admin")
        c.execute("INSERT INTO pymem.stores (project_id, store_key, keep_versions, read_only_prefixes) "
                  "VALUES ('acme', 'old', true, ARRAY[%s])", (f"{NFD}-locked/",))
        for path, sha in ((f"{NFD}/menu.md", "a" * 64), ("both-" + NFD, "b" * 64), ("both-" + NFC, "c" * 64)):
            c.execute("INSERT INTO pymem.store_entries (project_id, store_key, path, kind, content, sha, size, version)"
                      " VALUES ('acme', 'old', %s, 'text', 'x', %s, 1, 1)", (path, sha))
            c.execute("INSERT INTO pymem.store_versions (project_id, store_key, path, version, kind, content, sha)"
                      " VALUES ('acme', 'old', %s, 1, 'text', 'x', %s)", (path, sha))
            c.execute("INSERT INTO pymem.store_audit (project_id, store_key, path, op, new_sha)"
                      " VALUES ('acme', 'old', %s, 'write', %s)", (path, sha))
        c.execute(c.execute("SELECT format('GRANT CREATE ON DATABASE %I TO pymem_store_admin', "
                            "current_database())").fetchone()[0])
    try:
        assert pymem.migrate(admin_login).applied == [m.name for m in migrations.load_sql_files().migrations
                                                      if m.name[:4] > "0005"]  # 0.2.0's two, and those after
        with psycopg.connect(empty_dsn) as c:
            for table in ("store_entries", "store_versions", "store_audit"):
                assert sorted(r[0] for r in c.execute(f"SELECT path FROM pymem.{table}")) == sorted(
                    [f"{NFC}/menu.md", "both-" + NFD, "both-" + NFC]), table
            assert c.execute("SELECT read_only_prefixes FROM pymem.stores").fetchone() == ([f"{NFC}-locked/"],)
            forced = c.execute("SELECT bool_and(relforcerowsecurity) FROM pg_class WHERE relnamespace = "
                               "'pymem'::regnamespace AND relkind = 'r' AND relname LIKE 'store%'").fetchone()[0]
            assert forced  # FORCE is back on every store table
        s = MemoryStore.get("old", project_id="acme", db=pymem.Database(pymem.Settings(dsn=empty_dsn)))
        assert s.read_text(f"{NFD}/menu.md") == "x" and s.versions(f"{NFC}/menu.md")[0].sha == "a" * 64
    finally:
        with psycopg.connect(empty_dsn, autocommit=True) as c:
            c.execute("REVOKE pymem_owner FROM pymem_store_admin")
