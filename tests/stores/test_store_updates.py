"""Race-free read-modify-write in keyed stores (issue 13, point 2): ``read_entry`` returns the
content and the sha of that content from one statement; ``update_json`` / ``update_text`` read,
apply a function, write with ``expected_sha`` and retry on ConcurrencyError. Real server only."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys

import psycopg
import pytest

import pymem
from pymem import MemoryStore


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def audit_count(dsn, path) -> int:
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT count(*) FROM pymem.store_audit WHERE path = %s", (path,)).fetchone()[0]


def test_read_entry_returns_content_and_its_sha_together(db):
    s = MemoryStore.get_or_create("k", db=db, actor="agent")
    assert s.read_entry("nope.json") is None
    s.write_json("a.json", {"n": 1}, reason="first")
    entry = s.read_entry("a.json")
    assert (entry.path, entry.kind, json.loads(entry.content), entry.version, entry.actor, entry.reason) == \
        ("a.json", "json", {"n": 1}, 1, "agent", "first")
    assert entry.sha == hashlib.sha256(entry.content.encode()).hexdigest() == s.current_sha("a.json")
    assert entry.size == len(entry.content.encode())
    s.write_json("a.json", {"n": 2}, expected_sha=entry.sha)
    with pytest.raises(pymem.ConcurrencyError):  # the sha read with the content guards the write
        s.write_json("a.json", {"n": 3}, expected_sha=entry.sha)


def test_update_json_and_update_text(db):
    s = MemoryStore.get_or_create("k", db=db, keep_versions=True)
    s.write_json("notes.json", ["a"])
    assert s.update_json("notes.json", lambda notes: notes + ["b"], reason="add b") == ["a", "b"]
    assert s.read_json("notes.json") == ["a", "b"]
    assert [v.version for v in s.versions("notes.json")] == [1, 2]
    assert s.read_entry("notes.json").reason == "add b"
    s.write_text("log.md", "- one")
    assert s.update_text("log.md", lambda t: t + "\n- two") == "- one\n- two"
    entry = s.read_entry("log.md")
    assert (entry.kind, entry.content, entry.version) == ("text", "- one\n- two", 2)


def test_a_missing_path_starts_from_default_and_needs_one(db, dsn):
    s = MemoryStore.get_or_create("k", db=db)
    default: list = []

    def add(notes):  # mutates its argument: update_json hands it a copy, never the default itself
        notes.append("first")
        return notes

    assert s.update_json("new.json", add, default=default) == ["first"]
    assert default == []
    entry = s.read_entry("new.json")
    assert (entry.kind, json.loads(entry.content), entry.version) == ("json", ["first"], 1)
    assert s.update_text("new.txt", lambda t: t + "x", default="") == "x"
    for update in (s.update_json, s.update_text):
        with pytest.raises(pymem.NotFoundError, match=r"'missing' does not exist: pass default="):
            update("missing", lambda v: v)
    assert s.read_entry("missing") is None and audit_count(dsn, "missing") == 0


def test_a_new_path_is_created_only_if_it_still_does_not_exist(db):
    """default= is written with expected_sha MUST_NOT_EXIST: a writer that created the path
    meanwhile wins, and fn runs again on what it wrote."""
    s = MemoryStore.get_or_create("k", db=db)
    other = MemoryStore.get("k", db=db)
    seen = []

    def add(notes):
        seen.append(list(notes))
        if len(seen) == 1:
            other.write_json("race.json", ["theirs"])  # lands between our read and our write
        return notes + ["ours"]

    assert s.update_json("race.json", add, default=[]) == ["theirs", "ours"]
    assert seen == [[], ["theirs"]]  # called again with the fresh value, never with the stale one
    assert s.read_json("race.json") == ["theirs", "ours"]


def test_retries_exhausted_raise_concurrency_error_naming_the_path(db, dsn):
    s = MemoryStore.get_or_create("k", db=db)
    other = MemoryStore.get("k", db=db)
    s.write_json("hot.json", 0)
    calls = []

    def bump(n):  # another writer changes the path every time, between our read and our write
        calls.append(n)
        other.write_json("hot.json", 100 + len(calls))
        return n + 1

    with pytest.raises(pymem.ConcurrencyError, match=r"'hot.json' changed under each of 3 attempts") as exc:
        s.update_json("hot.json", bump, retries=2)
    assert exc.value.sqlstate == "PM401"
    assert calls == [0, 101, 102]  # each attempt read the other writer's latest value
    assert s.read_json("hot.json") == 103  # only the other writer's writes landed
    with pytest.raises(pymem.ConcurrencyError):
        s.update_json("hot.json", bump, retries=0)
    assert len(calls) == 4 and audit_count(dsn, "hot.json") == 1 + 4
    for bad in (-1, 1.5, True, None):
        with pytest.raises(pymem.ValidationError, match="retries"):
            s.update_json("hot.json", bump, retries=bad)
    assert len(calls) == 4


def test_fn_raising_or_returning_garbage_leaves_the_entry_unchanged(db, dsn):
    s = MemoryStore.get_or_create("k", db=db)
    s.write_json("a.json", {"n": 1})
    before = s.read_entry("a.json")

    def boom(value):
        raise RuntimeError("model call failed")

    with pytest.raises(RuntimeError, match="model call failed"):
        s.update_json("a.json", boom)
    with pytest.raises(pymem.ValidationError, match="not JSON-serialisable"):
        s.update_json("a.json", lambda v: {"when": object()})
    with pytest.raises(pymem.ValidationError, match="must be a string"):
        s.update_text("a.json", lambda t: 42)
    with pytest.raises(RuntimeError):
        s.update_json("fresh.json", boom, default=[])
    assert s.read_entry("a.json") == before
    assert s.read_entry("fresh.json") is None
    assert audit_count(dsn, "a.json") == 1 and audit_count(dsn, "fresh.json") == 0
    s.write_text("plain.txt", "not json")
    with pytest.raises(pymem.ValidationError, match="does not hold JSON"):
        s.update_json("plain.txt", lambda v: v)


def test_read_only_and_reserved_paths_are_still_refused(db, dsn):
    s = MemoryStore.get_or_create("k", db=db, read_only_prefixes=["memory/"])
    with pytest.raises(pymem.PermissionError):
        s.update_json("memory/core.json", lambda v: v + [1], default=[])
    with pytest.raises(pymem.ValidationError):  # PM403: reserved
        s.update_text("meta/x.txt", lambda t: t + "x", default="")
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.store_entries").fetchone()[0] == 0
    # an entry written before the prefix was protected can be read, not updated
    s2 = MemoryStore.get_or_create("k2", db=db)
    s2.write_json("policies/p.json", ["v1"])
    s2.protect(read_only_prefixes=["policies/"])
    with pytest.raises(pymem.PermissionError):
        s2.update_json("policies/p.json", lambda v: v + ["v2"])
    assert s2.read_json("policies/p.json") == ["v1"]


def test_async_twin(dsn):
    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=4)) as adb:
            s = await pymem.AsyncMemoryStore.get_or_create("async", db=adb)
            missing = await s.read_entry("list.json")

            async def add_async(items, i):
                await asyncio.sleep(0)
                return items + [i]

            # 20 concurrent updates of one path over a shared pool: every one lands
            await asyncio.gather(*(s.update_json("list.json", lambda items, i=i: add_async(items, i), default=[])
                                   for i in range(10)),
                                 *(s.update_json("list.json", lambda items, i=i: items + [i], default=[])
                                   for i in range(10, 20)))
            text = await s.update_text("t.txt", lambda t: t + "b", default="a")
            entry = await s.read_entry("list.json")
            other = await pymem.AsyncMemoryStore.get("async", db=adb)

            async def interfere(n):
                await other.write_json("n.json", n + 100)
                return n + 1

            await s.write_json("n.json", 0)
            with pytest.raises(pymem.ConcurrencyError, match="'n.json'"):
                await s.update_json("n.json", interfere, retries=1)
            return missing, entry, text, await s.read_json("n.json")

    missing, entry, text, n = asyncio.run(main())
    assert missing is None and text == "ab" and n == 200  # only the other writer's writes landed
    assert sorted(json.loads(entry.content)) == list(range(20)) and entry.version == 20


WORKER = """
import sys, pymem
dsn, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = 0

def append(items, item):
    global calls
    calls += 1  # counted for the report only; the result depends on the argument alone
    return items + [item]

with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=1)) as db:
    store = pymem.MemoryStore.get_or_create("shared", db=db, actor=name)
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    for i in range(n):
        store.update_json("items.json", lambda items: append(items, f"{name}-{i}"), default=[])
print(calls - n)
"""


def test_update_json_from_several_processes_loses_no_update(dsn):
    procs, n = 4, 25
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, dsn, f"w{i}", str(n)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(procs)]
    for w in workers:
        assert w.stdout.readline() == "ready\n", w.stderr.read()[-2000:]
    for w in workers:
        w.stdin.write("go\n")
        w.stdin.flush()
    outs = [w.communicate(timeout=300) for w in workers]
    assert all(w.returncode == 0 for w in workers), [o[1][-2000:] for o in outs]
    with psycopg.connect(dsn) as c:
        content, version = c.execute(
            "SELECT content, version FROM pymem.store_read('shared', 'items.json')").fetchone()
    items = json.loads(content)
    assert len(items) == procs * n and len(set(items)) == procs * n, "an update was lost"
    assert set(items) == {f"w{p}-{i}" for p in range(procs) for i in range(n)}
    assert version == procs * n  # one write per item, none lost, none doubled
    for p in range(procs):  # each process's items in its own order
        mine = [x for x in items if x.startswith(f"w{p}-")]
        assert mine == [f"w{p}-{i}" for i in range(n)]
    retries = [int(o[0].strip()) for o in outs]
    print("conflicts retried per process:", retries)
