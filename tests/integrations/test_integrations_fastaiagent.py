"""pymem.integrations.fastaiagent.PymemFactStore: the fastaiagent SDK's FactStore on pymem.

The conformance tests of fastaiagent 1.94.0 (its sdist's
tests/integration/test_faststore_conformance.py, which runs them against SQLite, Postgres and
Redis) are ported here, assertion for assertion, against PymemFactStore: they are not in the
installed package, and a test may not download the sdist. Ported: test_conforms_to_protocol,
test_add_is_idempotent, test_get_roundtrip, test_safe_default_empty_scope_id,
test_star_matches_all_within_scope, test_agent_scope_permissive,
test_supersede_hides_old_keeps_new, test_delete_guard_and_full_delete,
test_project_partition_isolates, test_limit_returns_the_newest_first,
test_limit_skips_superseded_facts, test_wildcard_limit_is_newest_first_across_subjects,
test_concurrent_adds_of_one_fact_keep_one_row, test_source_round_trips. They run twice: with
the store's own project '' and with project_id='acme' (where Fact.project_id '' is 'acme').
Then pymem's own: fastaiagent's Memory on the store, get across projects, the mapping.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from fastaiagent import Memory
from fastaiagent.learn import Fact, FactStore

import pymem
from pymem.integrations.fastaiagent import PymemFactStore


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=10)) as d:
        yield d


@pytest.fixture(params=["", "acme"])
def store(request, db) -> PymemFactStore:
    return PymemFactStore(db=db, project_id=request.param)


@pytest.fixture
def uid() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


def test_conforms_to_protocol(store):
    assert isinstance(store, FactStore)


def test_add_is_idempotent(store, uid):
    a = store.add(Fact(scope="user", scope_id=uid, fact="likes email"))
    b = store.add(Fact(scope="user", scope_id=uid, fact="likes email"))
    assert a == b
    assert [f.fact for f in store.list_active(scope="user", scope_id=uid)] == ["likes email"]


def test_get_roundtrip(store, uid):
    fid = store.add(Fact(scope="user", scope_id=uid, fact="hi", confidence=0.6))
    got = store.get(fid)
    assert got is not None and got.fact == "hi" and got.confidence == 0.6


def test_safe_default_empty_scope_id(store, uid):
    store.add(Fact(scope="user", scope_id=uid, fact="secret"))
    assert store.list_active(scope="user", scope_id="") == []  # never leak
    assert [f.fact for f in store.list_active(scope="user", scope_id=uid)] == ["secret"]


def test_star_matches_all_within_scope(store):
    a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    store.add(Fact(scope="user", scope_id=a, fact="fact-a"))
    store.add(Fact(scope="user", scope_id=b, fact="fact-b"))
    assert {"fact-a", "fact-b"} <= {f.fact for f in store.list_active(scope="user", scope_id="*")}


def test_agent_scope_permissive(store):
    sid = f"ag-{uuid.uuid4().hex[:6]}"
    store.add(Fact(scope="agent", scope_id=sid, fact="global-x"))
    assert [f.fact for f in store.list_active(scope="agent", scope_id=sid)] == ["global-x"]
    assert "global-x" in {f.fact for f in store.list_active(scope="agent", scope_id="")}


def test_supersede_hides_old_keeps_new(store, uid):
    old = store.add(Fact(scope="user", scope_id=uid, fact="v1"))
    new = store.add(Fact(scope="user", scope_id=uid, fact="v2"))
    store.supersede(old, new)
    active = [f.fact for f in store.list_active(scope="user", scope_id=uid)]
    assert "v2" in active and "v1" not in active
    assert store.get(old).superseded_by == new and store.get(new).superseded_by is None  # pymem's own


def test_delete_guard_and_full_delete(store, uid):
    old = store.add(Fact(scope="user", scope_id=uid, fact="v1"))
    new = store.add(Fact(scope="user", scope_id=uid, fact="v2"))
    store.supersede(old, new)
    with pytest.raises(ValueError):
        store.delete(scope="user", scope_id="")  # refuse mass-delete
    store.delete(scope="user", scope_id=uid)
    assert store.list_active(scope="user", scope_id=uid) == []
    assert uid not in {f.scope_id for f in store.list_active(scope="user", scope_id="*")}
    assert store.get(old) is None  # the history went too (pymem's own)


def test_project_partition_isolates(store, uid):
    store.add(Fact(scope="user", scope_id=uid, fact="in-A", project_id="A"))
    store.add(Fact(scope="user", scope_id=uid, fact="in-B", project_id="B"))
    assert [f.fact for f in store.list_active(scope="user", scope_id=uid, project_id="A")] == ["in-A"]
    assert [f.fact for f in store.list_active(scope="user", scope_id=uid, project_id="B")] == ["in-B"]


def test_limit_returns_the_newest_first(store, uid):
    for i in range(12):
        store.add(Fact(scope="user", scope_id=uid, fact=f"fact-{i:02d}", created_at=1000.0 + i))
    got = [f.fact for f in store.list_active(scope="user", scope_id=uid, limit=3)]
    assert got == ["fact-11", "fact-10", "fact-09"]


def test_limit_skips_superseded_facts(store, uid):
    ids = [store.add(Fact(scope="user", scope_id=uid, fact=f"v{i}", created_at=2000.0 + i)) for i in range(4)]
    store.supersede(ids[3], ids[2])  # the newest row is superseded
    assert [f.fact for f in store.list_active(scope="user", scope_id=uid, limit=2)] == ["v2", "v1"]


def test_wildcard_limit_is_newest_first_across_subjects(store):
    project = f"p-{uuid.uuid4().hex[:8]}"
    for i, sid in enumerate(["ag-a", "ag-b", "ag-c"] * 2):
        store.add(Fact(scope="agent", scope_id=sid, fact=f"g{i}", created_at=3000.0 + i, project_id=project))
    for sid in ("*", ""):  # "" at agent scope is the permissive (all-agents) read
        got = store.list_active(scope="agent", scope_id=sid, project_id=project, limit=2)
        assert [f.fact for f in got] == ["g5", "g4"]


def test_concurrent_adds_of_one_fact_keep_one_row(store, uid):
    writers, rounds = 8, 5
    for r in range(rounds):
        fact = Fact(scope="user", scope_id=uid, fact=f"prefers email #{r}")
        gate = threading.Barrier(writers)
        ids: list[int] = []
        errors: list[BaseException] = []

        def write(fact: Fact = fact, gate: threading.Barrier = gate) -> None:
            gate.wait()
            try:
                ids.append(store.add(fact))
            except BaseException as err:  # noqa: BLE001 - recorded, asserted below
                errors.append(err)

        threads = [threading.Thread(target=write) for _ in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"round {r}: {errors[:2]}"
        assert len(set(ids)) == 1, f"round {r}: {sorted(set(ids))}"
    facts = [f.fact for f in store.list_active(scope="user", scope_id=uid)]
    assert sorted(facts) == sorted(f"prefers email #{r}" for r in range(rounds))


def test_source_round_trips(store, uid):
    store.add(Fact(scope="user", scope_id=uid, fact="learned one", source="learned"))
    store.add(Fact(scope="user", scope_id=uid, fact="yours"))
    store.add(Fact(scope="user", scope_id=uid, fact="imported", source="crm-sync"))  # pymem's own
    by_fact = {f.fact: f.source for f in store.list_active(scope="user", scope_id=uid)}
    assert by_fact == {"learned one": "learned", "yours": "", "imported": "crm-sync"}


# -- pymem's own ----------------------------------------------------------------------------

def test_fastaiagent_memory_on_pymem(dsn, monkeypatch, tmp_path):
    """fastaiagent's own Memory with the store passed as its location: persist, retrieve,
    update (add + supersede), forget; built with no arguments (PYMEM_DSN, PYMEM_PROJECT_ID)."""
    monkeypatch.chdir(tmp_path)  # fastaiagent keeps its traces in ./.fastaiagent
    monkeypatch.setenv("PYMEM_DSN", dsn)
    monkeypatch.setenv("PYMEM_PROJECT_ID", "shop")
    store = PymemFactStore()
    try:
        memory = Memory(location=store, user_id="alice", agent_id="concierge")
        memory.persist("I live in Oslo", tier="user", id="alice")
        memory.persist("Support hours are 9 to 5", tier="global")
        new_id = memory.update("I live in Bergen now", old="I live in Oslo", tier="user", id="alice")
        assert [f.fact for f in memory.retrieve(tier="user", id="alice")] == ["I live in Bergen now"]
        assert [f.fact for f in memory.retrieve(tier="global")] == ["Support hours are 9 to 5"]
        # what pymem holds: the facts of project "shop", with the supersede chain
        with pymem.Database(pymem.Settings(dsn=dsn)) as db:
            mem = pymem.Memory(db=db, agent_id="concierge", project_id="shop")
            history = mem.history(user="alice")
            assert {(f.content, f.superseded_by) for f in history} == {
                ("I live in Oslo", new_id), ("I live in Bergen now", None)}
            assert [f.content for f in mem.retrieve(tier="global")] == ["Support hours are 9 to 5"]
        assert memory.forget(tier="user", id="alice") == 2
        assert memory.retrieve(tier="user", id="alice") == []
    finally:
        store.close()


def test_get_and_supersede_across_projects(db, uid):
    writer = PymemFactStore(db=db)
    fid = writer.add(Fact(scope="user", scope_id=uid, fact="in acme", project_id="acme"))
    assert writer.get(fid).project_id == "acme"
    # another store object knows only its own project: the fact is not there
    assert PymemFactStore(db=db).get(fid) is None
    assert PymemFactStore(db=db, project_id="acme").get(fid).project_id == ""
    other = writer.add(Fact(scope="user", scope_id=uid, fact="in beta", project_id="beta"))
    with pytest.raises(ValueError):
        writer.supersede(fid, other)  # two projects: not one subject
    with pytest.raises(ValueError):
        writer.supersede(fid, 10**12)  # no such fact
    mine = writer.add(Fact(scope="user", scope_id=uid, fact="now in acme", project_id="acme"))
    writer.supersede(fid, mine)
    with pytest.raises(pymem.ConflictError):
        writer.supersede(fid, mine)  # already superseded


def test_delete_one_fact_in_every_subject(store):
    for sid in ("a", "b"):
        store.add(Fact(scope="user", scope_id=sid, fact="shared"))
        store.add(Fact(scope="user", scope_id=sid, fact="own " + sid))
    assert store.delete(scope="user", scope_id="*", fact="shared") == 2
    assert sorted(f.fact for f in store.list_active(scope="user", scope_id="*")) == ["own a", "own b"]
    assert store.delete(scope="user", scope_id="a", fact="own a") == 1
    assert store.delete(scope="user", scope_id="b") == 1
