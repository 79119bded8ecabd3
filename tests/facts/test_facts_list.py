"""Listing and paging what is stored, with no query: Memory.facts / SQL pymem.facts_list (newest
first, metadata containment, keyset paging after a fact id), Memory.get_fact / pymem.fact_read
(one fact of a subject), Memory.users / pymem.users_list, Memory.delete_message /
pymem.message_delete."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


@pytest.fixture
def mem(db):
    return Memory(agent_id="bot", db=db, embedder=HashEmbedder())


def test_facts_lists_newest_first_and_pages_by_keyset(mem):
    t0 = datetime.now(timezone.utc) - timedelta(hours=1)
    ids = [mem.persist(f"fact {i}", user="alice", created_at=t0 + timedelta(seconds=i)) for i in range(7)]
    mem.persist("bob's fact", user="bob")
    first = mem.facts(user="alice", limit=3)
    assert [f.content for f in first] == ["fact 6", "fact 5", "fact 4"]
    # a fact added between two pages is newer than the first page: the next pages go on after it
    mem.persist("newest", user="alice")
    second = mem.facts(user="alice", limit=3, after=first[-1].id)
    third = mem.facts(user="alice", limit=3, after=second[-1].id)
    assert [f.content for f in second] == ["fact 3", "fact 2", "fact 1"]
    assert [f.content for f in third] == ["fact 0"]
    assert mem.facts(user="alice", limit=3, after=third[-1].id) == []
    assert {f.id for f in first + second + third} == set(ids)
    # the fact paged after may be superseded meanwhile: the page goes on from where it was
    mem.update("fact 3 v2", fact_id=second[0].id, user="alice")
    assert [f.content for f in mem.facts(user="alice", limit=2, after=second[0].id)] == ["fact 2", "fact 1"]


def test_facts_filters_by_metadata_and_reads_no_other_subject(mem):
    mem.persist("Likes tea", user="alice", metadata={"topic": "food", "lang": "en"})
    mem.persist("Lives in Oslo", user="alice", metadata={"topic": "home"})
    mem.persist("Likes coffee", user="bob", metadata={"topic": "food"})
    assert [f.content for f in mem.facts(user="alice", metadata={"topic": "food"})] == ["Likes tea"]
    assert mem.facts(user="alice", metadata={"topic": "sport"}) == []
    assert {f.content for f in mem.facts(id="*", metadata={"topic": "food"})} == {"Likes tea", "Likes coffee"}
    mem.persist("Speaks English", tier="global")
    assert [f.content for f in mem.facts(tier="global")] == ["Speaks English"]
    with pytest.raises(pymem.ValidationError, match="metadata must be a mapping"):
        mem.facts(user="alice", metadata=["topic"])
    with pytest.raises(pymem.ValidationError, match="limit must be an integer"):
        mem.facts(user="alice", limit="3")
    # after= must be a fact of this subject: another user's id is refused, never a page of theirs
    bobs = mem.facts(user="bob")[0].id
    with pytest.raises(pymem.ValidationError, match="not a fact of this user"):
        mem.facts(user="alice", after=bobs)


def test_get_fact_reads_the_subjects_own_fact_only(mem):
    fid = mem.persist("Prefers email", user="alice", metadata={"k": 1})
    got = mem.get_fact(fid, user="alice")
    assert got is not None and got.content == "Prefers email" and got.metadata == {"k": 1}
    assert mem.get_fact(fid, user="bob") is None  # another user's fact is not readable by id
    new = mem.update("Prefers phone", fact_id=fid, user="alice")
    old = mem.get_fact(fid, user="alice")
    assert old is not None and old.superseded_by == new
    assert mem.get_fact(999999, user="alice") is None


def test_users_lists_every_user_with_facts_or_threads_paged(mem, db):
    mem.persist("a fact", user="carol")
    mem.record("hi", "hello", user="alice")
    mem.record("hi", "hello", user="bob", thread="t2")
    mem.persist("b fact", user="bob")
    other = Memory(db=db, project_id="other", embedder=HashEmbedder())
    other.persist("elsewhere", user="dave")
    users = mem.users()
    assert [u.user_id for u in users] == ["alice", "bob", "carol"]
    assert users[1] == pymem.UserInfo("bob", 1, 1)
    assert users[2] == pymem.UserInfo("carol", 1, 0)
    page = mem.users(limit=2)
    assert [u.user_id for u in page] == ["alice", "bob"]
    assert [u.user_id for u in mem.users(limit=2, after=page[-1].user_id)] == ["carol"]
    assert [u.user_id for u in other.users()] == ["dave"]


def test_delete_message_deletes_one_of_the_users_own(mem, dsn):
    mem.record("I live in Oslo", "Noted.", user="alice")
    mem.record("I like tea", "Noted.", user="alice")
    mem.record("I live in Rome", "Noted.", user="bob")
    assert mem.delete_message(3, user="alice") is True
    assert [m.content for m in mem.window(user="alice")] == ["I live in Oslo", "Noted.", "Noted."]
    assert mem.delete_message(3, user="alice") is False
    assert [m.content for m in mem.window(user="bob")] == ["I live in Rome", "Noted."]  # bob's seq 1 stays
    assert "I like tea" not in [m.content for m in mem.recall("tea", user="alice")]  # its vector went too
    nxt = mem.record("again", "ok", user="alice")
    assert nxt.user_seq == 5  # numbering is kept
    with pytest.raises(pymem.ValidationError, match="seq must be"):
        mem.delete_message(0, user="alice")
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT pymem.message_delete('alice', 'default', 1)").fetchone()[0] == 1
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("SELECT pymem.message_delete('', 'default', 1)")


def test_async_twins(dsn):
    async def go():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as db:
            amem = pymem.AsyncMemory(db=db, embedder=HashEmbedder())
            fid = await amem.persist("x", user="alice", metadata={"a": 1})
            assert [f.id for f in await amem.facts(user="alice", metadata={"a": 1})] == [fid]
            assert (await amem.get_fact(fid, user="alice")).content == "x"
            await amem.record("q", "a", user="alice")
            assert await amem.delete_message(1, user="alice") is True
            assert [u.user_id for u in await amem.users()] == ["alice"]

    asyncio.run(go())


def test_update_keeps_the_old_versions_metadata_unless_given(mem):
    """Issue 59, item 3: update(fact_id=...) kept no metadata; now it keeps the old version's, as
    it keeps its expiry; metadata= (even {}) replaces it."""
    fid = mem.persist("Likes tea", user="alice", metadata={"topic": "food"})
    v2 = mem.update("Likes green tea", fact_id=fid, user="alice")
    assert mem.get_fact(v2, user="alice").metadata == {"topic": "food"}
    v3 = mem.update("Likes black tea", old="Likes green tea", user="alice", metadata={"topic": "drinks"})
    assert mem.get_fact(v3, user="alice").metadata == {"topic": "drinks"}
    v4 = mem.update("Likes no tea", fact_id=v3, user="alice", metadata={})
    assert mem.get_fact(v4, user="alice").metadata == {}


def test_rough_edges_of_the_fact_calls_are_refused_in_python(mem):
    """Issue 59, item 7: retrieve(k="3") is refused as Memory(recall_k="5") is; a mistyped tier
    is named with the tiers (before user=, which it would otherwise blame); ttl=-1 says seconds."""
    with pytest.raises(pymem.ValidationError, match="k must be an integer"):
        mem.retrieve("tea", user="alice", k="3")
    with pytest.raises(pymem.ValidationError, match="limit must be an integer"):
        mem.retrieve(user="alice", limit=2.5)
    with pytest.raises(pymem.ValidationError, match="tier must be one of 'global', 'agent', 'user', 'project', not 'users'"):
        mem.retrieve(tier="users", user="alice")
    with pytest.raises(pymem.ValidationError, match=r"ttl must be a positive number of seconds \(got -1\)"):
        mem.persist("x", user="alice", ttl=-1)
