"""pymem.integrations.langgraph.PymemStore, a LangGraph BaseStore, on the real server.

Three parts:

1. LangGraph's own store tests, ported: the assertions of langgraph-checkpoint 4.3.2's
   tests/test_store.py (its sdist), run against PymemStore instead of InMemoryStore:
   test_list_namespaces_basic, _with_wildcards, _pagination, _max_depth, _no_conditions,
   _empty_store, test_search_pages_match_full_listing, test_vector_search_scores_every_item,
   test_cannot_put_empty_namespace, test_rejects_invalid_namespace_labels (without its spy on
   batch), test_search_and_listing_keep_empty_prefixes_and_wildcards,
   test_vector_insert_with_auto_embedding, test_vector_update_with_embedding,
   test_vector_search_with_filters, test_vector_search_pagination (each sync and async),
   test_embed_with_path and test_non_ascii, with its CharacterEmbeddings. The tests of
   LangGraph's own machinery (AsyncBatchedBaseStore, get_text_at_path, op dedupe) are not
   about a store and are left out.
2. pymem's own: construction (no arguments: PYMEM_DSN), projects, AsyncDatabase, keys and
   labels that are not path-safe, vectors of an entry rewritten elsewhere unused.
3. A differential test: generated operation sequences (hypothesis) on PymemStore and on
   LangGraph's InMemoryStore give the same results, except vector scores and the order of
   results of equal score (search without a query: every score is equal).
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import runpy
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

import pymem
from pymem.integrations.langgraph import PymemStore

from conftest import blocks as doc_blocks

ROOT = Path(__file__).resolve().parents[2]


class CharacterEmbeddings(Embeddings):
    """LangGraph's test embeddings (tests/embed_test_utils.py): character frequencies through
    random projections."""

    def __init__(self, dims: int = 50, seed: int = 42):
        self._rng = random.Random(seed)
        self.dims = dims
        self._char_projections: defaultdict[str, list[float]] = defaultdict(
            lambda: [self._rng.gauss(0, 1 / math.sqrt(self.dims)) for _ in range(self.dims)])

    def _embed_one(self, text: str) -> list[float]:
        counts = Counter(text)
        total = sum(counts.values())
        if total == 0:
            return [0.0] * self.dims
        embedding = [0.0] * self.dims
        for char, count in counts.items():
            for i, proj in enumerate(self._char_projections[char]):
                embedding[i] += count / total * proj
        norm = math.sqrt(sum(x * x for x in embedding))
        return [x / norm for x in embedding] if norm > 0 else embedding

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed_one(text)


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as d:
        yield d


@pytest.fixture
def make(db):
    """make(index=None, **kw): a PymemStore on a store of its own in the test's database."""
    def make(index: dict[str, Any] | None = None, **kw: Any) -> PymemStore:
        return PymemStore(db, store_key=f"lg-{uuid.uuid4().hex[:8]}", index=index, **kw)
    return make


@pytest.fixture
def fake_embeddings() -> CharacterEmbeddings:
    return CharacterEmbeddings(dims=50)


def _vector_store(make, fake_embeddings):
    return make({"dims": fake_embeddings.dims, "embed": fake_embeddings})


# -- 1. LangGraph's tests ---------------------------------------------------------------------

def test_list_namespaces_basic(make):
    store = make()
    namespaces = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
                  ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789")]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(prefix=("a", "b"))) == [
        ("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert sorted(store.list_namespaces(prefix=("a",), suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "b"), max_depth=3)) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "*", "f"))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(suffix=("*", "f"))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]


def test_list_namespaces_with_wildcards(make):
    store = make()
    namespaces = [("users", "123"), ("users", "456"), ("users", "789", "settings"), ("admin", "users", "789"),
                  ("guests", "123"), ("guests", "456", "preferences")]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(prefix=("users", "*"))) == [
        ("users", "123"), ("users", "456"), ("users", "789", "settings")]
    assert store.list_namespaces(suffix=("*", "preferences")) == [("guests", "456", "preferences")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    store.put(namespace=("admin", "users", "settings", "789"), key="foo", value={"data": "some_val"})
    assert store.list_namespaces(prefix=("*", "users"), suffix=("settings", "*")) == [
        ("admin", "users", "settings", "789")]


def test_list_namespaces_pagination(make):
    store = make()
    for i in range(20):
        store.put(namespace=("namespace", f"sub_{i:02d}"), key=f"id_{i:02d}", value={"data": f"value_{i:02d}"})
    for offset in (0, 5, 15):
        assert store.list_namespaces(prefix=("namespace",), limit=5, offset=offset) == [
            ("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)]


def test_list_namespaces_max_depth_no_conditions_and_empty(make):
    store = make()
    assert store.list_namespaces() == []
    for i, ns in enumerate([("a", "b", "c", "d"), ("a", "b", "c", "e"), ("a", "b", "f"), ("a", "g"),
                            ("h", "i", "j", "k")]):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces(max_depth=2)) == [("a", "b"), ("a", "g"), ("h", "i")]
    store = make()
    namespaces = [("a", "b"), ("c", "d"), ("e", "f", "g")]
    for i, ns in enumerate(namespaces):
        store.put(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})
    assert sorted(store.list_namespaces()) == namespaces


def test_search_pages_match_full_listing(make):
    store = make()
    for ns in [("a",), ("a", "b"), ("ab",), ("a", "c", "d")]:
        for i in range(7):
            store.put(ns, f"k{i}", {"i": i, "even": i % 2 == 0})

    def keys(items):
        return [(item.namespace, item.key) for item in items]

    full = keys(store.search(("a",), limit=100))
    assert {ns for ns, _ in full} == {("a",), ("a", "b"), ("a", "c", "d")}
    assert len(full) == 21
    assert [k for offset in range(0, len(full), 4) for k in keys(store.search(("a",), limit=4, offset=offset))] == full
    even = keys(store.search(("a",), filter={"even": True}, limit=100))
    assert keys(store.search(("a",), filter={"even": True}, limit=3, offset=2)) == even[2:5]


def test_vector_search_scores_every_item(make, fake_embeddings):
    store = _vector_store(make, fake_embeddings)
    for i in range(4):
        store.put(("test",), f"other{i}", {"text": f"zzz qqq {i}"})
    store.put(("test",), "match", {"text": "apple pie"})
    assert [r.key for r in store.search(("test",), query="apple pie", limit=1)] == ["match"]


def test_cannot_put_empty_namespace(make):
    store = make()
    doc = {"foo": "bar"}

    async def main():
        for ns in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
            with pytest.raises(InvalidNamespaceError):
                store.put(ns, "foo", doc)
            with pytest.raises(InvalidNamespaceError):
                await store.aput(ns, "foo", doc)
        await store.aput(("foo", "langgraph", "foo"), "bar", doc)
        assert (await store.aget(("foo", "langgraph", "foo"), "bar")).value == doc
        assert (await store.asearch(("foo", "langgraph", "foo"), query="bar"))[0].value == doc
        await store.adelete(("foo", "langgraph", "foo"), "bar")
        assert (await store.aget(("foo", "langgraph", "foo"), "bar")) is None
        store.put(("foo", "langgraph", "foo"), "bar", doc)
        assert store.get(("foo", "langgraph", "foo"), "bar").value == doc
        assert store.search(("foo", "langgraph", "foo"), query="bar")[0].value == doc
        store.delete(("foo", "langgraph", "foo"), "bar")
        assert store.get(("foo", "langgraph", "foo"), "bar") is None
        # past the public put: batch takes the reserved root label
        await store.abatch([PutOp(("langgraph", "foo"), "bar", doc)])
        assert (await store.aget(("langgraph", "foo"), "bar")).value == doc
        assert (await store.asearch(("langgraph", "foo")))[0].value == doc
        await store.adelete(("langgraph", "foo"), "bar")
        assert (await store.aget(("langgraph", "foo"), "bar")) is None
        store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
        assert store.get(("langgraph", "foo"), "bar").value == doc
        assert store.search(("langgraph", "foo"))[0].value == doc
        store.delete(("langgraph", "foo"), "bar")
        assert store.get(("langgraph", "foo"), "bar") is None

    asyncio.run(main())


@pytest.mark.parametrize("namespace", [("foo.bar",), ("foo\x00",), ("foo", ""), (123,)])
def test_rejects_invalid_namespace_labels(make, namespace):
    store = make()
    for call in (lambda: store.get(namespace, "key"), lambda: store.delete(namespace, "key"),
                 lambda: store.search(namespace), lambda: store.list_namespaces(prefix=namespace),
                 lambda: store.list_namespaces(suffix=namespace),
                 lambda: store.batch([GetOp(namespace, "key")]), lambda: store.batch([PutOp(namespace, "k", {})])):
        with pytest.raises(InvalidNamespaceError):
            call()


def test_search_and_listing_keep_empty_prefixes_and_wildcards(make):
    store = make()
    store.put(("tenant", "a_%"), "key", {"v": 1})
    store.put(("tenant", "b", "child"), "key", {"v": 1})
    assert len(store.search(())) == 2
    assert [item.namespace for item in store.search(("tenant", "a_%"))] == [("tenant", "a_%")]
    assert sorted(store.list_namespaces(prefix=("tenant", "*"), suffix=("*",))) == [
        ("tenant", "a_%"), ("tenant", "b", "child")]


@pytest.mark.parametrize("use_async", [False, True])
def test_vector_insert_update_filters_and_pages(make, fake_embeddings, use_async):
    """test_vector_insert_with_auto_embedding, test_vector_update_with_embedding,
    test_vector_search_with_filters and test_vector_search_pagination, and their async twins."""

    async def main(put, search):
        docs = [("doc1", {"text": "short text"}), ("doc2", {"text": "longer text document"}),
                ("doc3", {"text": "longest text document here"}), ("doc4", {"description": "text in description field"}),
                ("doc5", {"content": "text in content field"}), ("doc6", {"body": "text in body field"})]
        store = _vector_store(make, fake_embeddings)
        for key, value in docs:
            await put(store, ("test",), key, value)
        doc_order = [r.key for r in await search(store, ("test",), query="long text")]
        assert "doc2" in doc_order and "doc3" in doc_order

        store = _vector_store(make, fake_embeddings)
        await put(store, ("test",), "doc1", {"text": "zany zebra Xerxes"})
        await put(store, ("test",), "doc2", {"text": "something about dogs"})
        await put(store, ("test",), "doc3", {"text": "text about birds"})
        initial = await search(store, ("test",), query="Zany Xerxes")
        assert initial[0].key == "doc1"
        initial_score = initial[0].score
        await put(store, ("test",), "doc1", {"text": "new text about dogs"})
        after_score = next(r.score for r in await search(store, ("test",), query="Zany Xerxes") if r.key == "doc1")
        assert after_score < initial_score
        for r in await search(store, ("test",), query="new text about dogs"):
            if r.key == "doc1":
                assert r.score > after_score
        await put(store, ("test",), "doc4", {"text": "new text about dogs"}, index=False)
        assert not any(r.key == "doc4" for r in await search(store, ("test",), query="new text about dogs", limit=3))

        store = _vector_store(make, fake_embeddings)
        for key, value in [("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
                           ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
                           ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
                           ("doc4", {"text": "blue car", "color": "blue", "score": 3.5})]:
            await put(store, ("test",), key, value)
        results = await search(store, ("test",), query="apple", filter={"color": "red"})
        assert len(results) == 2 and results[0].key == "doc1"
        results = await search(store, ("test",), query="car", filter={"color": "red"})
        assert len(results) == 2 and results[0].key == "doc2"
        results = await search(store, ("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}})
        assert len(results) == 3 and results[0].key == "doc4"
        results = await search(store, ("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
        assert [r.key for r in results] == ["doc3"]

        store = _vector_store(make, fake_embeddings)
        for i in range(5):
            await put(store, ("test",), f"doc{i}", {"text": f"test document number {i}"})
        page1 = await search(store, ("test",), query="test", limit=2)
        page2 = await search(store, ("test",), query="test", limit=2, offset=2)
        assert len(page1) == 2 and len(page2) == 2 and page1[0].key != page2[0].key
        assert len(await search(store, ("test",), query="test", limit=10)) == 5

    if use_async:
        async def put(store, *a, **kw):
            await store.aput(*a, **kw)

        async def search(store, *a, **kw):
            return await store.asearch(*a, **kw)
    else:
        async def put(store, *a, **kw):
            store.put(*a, **kw)

        async def search(store, *a, **kw):
            return store.search(*a, **kw)
    asyncio.run(main(put, search))


def test_embed_with_path(make, fake_embeddings):
    async def main():
        store = make({"dims": fake_embeddings.dims, "embed": fake_embeddings, "fields": ["key0", "key1", "key3"]})
        await store.aput(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
        await store.aput(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
        results = await store.asearch(("test",), query="xxx")
        assert len(results) == 2 and results[0].key != results[1].key
        ascore = results[0].score
        assert ascore == pytest.approx(results[1].score, abs=1e-5)
        results = await store.asearch(("test",), query="uuu")
        assert results[0].key == "doc2" and results[0].score > results[1].score
        assert ascore == pytest.approx(results[0].score, abs=1e-5)
        results = await store.asearch(("test",), query="www")
        assert len(results) == 2 and all(r.score < ascore for r in results)

        store = make({"dims": fake_embeddings.dims, "embed": fake_embeddings, "fields": ["key17"]})
        await store.aput(("test",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"},
                         index=["key0", "key1"])
        await store.aput(("test",), "doc4", {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"},
                         index=["key1", "key3"])
        results = await store.asearch(("test",), query="aaa")
        assert results[0].key == "doc3" and results[0].score > results[1].score
        results = await store.asearch(("test",), query="ggg")
        assert results[0].key == "doc4" and results[0].score > results[1].score
        results = await store.asearch(("test",), query="bbb")
        assert results[0].key != results[1].key and results[0].score == pytest.approx(results[1].score, abs=1e-6)
        results = await store.asearch(("test",), query="ccc")
        assert len(results) == 2 and all(r.score < ascore for r in results)
        await store.aput(("test",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
        results = await store.asearch(("test",), query="hhh")
        assert len(results) == 3
        assert next(r for r in results if r.key == "doc5").score is None

    asyncio.run(main())


def test_non_ascii(make, fake_embeddings):
    store = _vector_store(make, fake_embeddings)
    texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
    for i, text in enumerate(texts, 1):
        store.put(("user_123", "memories"), str(i), {"text": text})
    for i, text in enumerate(texts, 1):
        assert store.search(("user_123", "memories"), query=text)[0].key == str(i)


# -- 2. pymem's own -------------------------------------------------------------------------

def test_no_arguments_reads_the_settings(dsn, monkeypatch):
    monkeypatch.setenv("PYMEM_DSN", dsn)
    monkeypatch.setenv("PYMEM_PROJECT_ID", "acme")
    with PymemStore() as store:
        store.put(("users", "alice"), "prefs", {"theme": "dark"})
        assert store.project_id == "acme"
    with pymem.Database(pymem.Settings(dsn=dsn)) as db:
        # another project sees nothing; the item is a JSON entry of the keyed store "langgraph"
        assert PymemStore(db=db, project_id="other").get(("users", "alice"), "prefs") is None
        entry = pymem.MemoryStore.get("langgraph", project_id="acme", db=db)
        assert entry.list_paths() == ["users/alice/=prefs"]
        assert entry.read_json("users/alice/=prefs") == {"theme": "dark"}


def test_keys_and_labels_of_any_spelling(make):
    store = make()
    labels = ["audit", "a/b", "%41", "é", "e\u0301", "=x", "*", "meta"]
    keys = ["", ".", "..", "a/b", "%", "é", "e\u0301", "messages.json", "k" * 50]
    for label in labels:
        for key in keys:
            store.put((label, "n"), key, {"label": label, "key": key})
    for label in labels:
        for key in keys:
            item = store.get((label, "n"), key)
            assert item.value == {"label": label, "key": key} and item.namespace == (label, "n") and item.key == key
        found = store.search((label,), limit=100)
        assert sorted(i.key for i in found) == sorted(keys) and {i.namespace for i in found} == {(label, "n")}
    assert store.list_namespaces(limit=100) == sorted((label, "n") for label in labels)
    store.delete(("é", "n"), "")
    assert store.get(("é", "n"), "") is None and store.get(("e\u0301", "n"), "") is not None


def test_put_keeps_created_at(make):
    store = make()
    store.put(("a",), "k", {"v": 1})
    first = store.get(("a",), "k")
    store.put(("a",), "k", {"v": 2})
    second = store.get(("a",), "k")
    assert second.value == {"v": 2} and second.created_at == first.created_at < second.updated_at
    # TTL: tests/stores/test_store_expiry.py


def test_batch_reads_see_the_store_before_its_writes(make):
    store = make()
    store.put(("a",), "k", {"v": 1})
    results = store.batch([PutOp(("a",), "k", {"v": 2}), GetOp(("a",), "k"), PutOp(("a",), "k", {"v": 3}),
                           SearchOp(("a",)), ListNamespacesOp((MatchCondition("prefix", ("*",)),)),
                           PutOp(("b",), "k", {"v": 1})])
    assert results[0] is None and results[1].value == {"v": 1} and [i.value for i in results[3]] == [{"v": 1}]
    assert results[4] == [("a",)]
    assert store.get(("a",), "k").value == {"v": 3} and store.list_namespaces() == [("a",), ("b",)]


def test_a_pymem_embedder_and_an_async_database(dsn):
    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as adb:
            store = PymemStore(adb, embedder=pymem.HashEmbedder())
            await store.aput(("docs",), "pg", {"text": "PostgreSQL keeps the agent's memory"})
            await store.aput(("docs",), "cat", {"text": "the cat sat on the mat"})
            found = await store.asearch(("docs",), query="memory kept in PostgreSQL")
            assert [i.key for i in found] == ["pg", "cat"] and found[0].score > found[1].score
            with pytest.raises(pymem.ValidationError):
                store.get(("docs",), "pg")  # a sync call on an AsyncDatabase
            return [ns async for ns in _aiter(await store.alist_namespaces())]

    async def _aiter(xs):
        for x in xs:
            yield x

    assert asyncio.run(main()) == [("docs",)]


def test_vectors_of_an_entry_rewritten_elsewhere_are_not_used(db, make):
    store = make(embedder=pymem.HashEmbedder())
    store.put(("docs",), "a", {"text": "apples and pears"})
    store.put(("docs",), "b", {"text": "trains and buses"})
    assert store.search(("docs",), query="apples")[0].key == "a"
    # a plain store write changes the entry: its old vector no longer describes it
    pymem.MemoryStore.get(store.store_key, db=db).write_json("docs/=a", {"text": "something else"})
    found = {i.key: i.score for i in store.search(("docs",), query="apples")}
    assert found["a"] is None and found["b"] is not None


# -- 3. the differential test ---------------------------------------------------------------

LABELS = ["a", "b", "audit", "x y", "é"]
KEYS = ["k", "", "a/b", ".", "é"]
WORDS = ["red", "apple", "car", "blue", "green"]

namespaces = st.lists(st.sampled_from(LABELS), min_size=1, max_size=3).map(tuple)
values = st.fixed_dictionaries(
    {"n": st.sampled_from([-1, 0, 1, 1.0, True, 2, 2.5, 3])},
    optional={"s": st.sampled_from(["x", "y", ""]), "b": st.booleans(), "l": st.lists(st.integers(0, 2), max_size=2),
              "o": st.fixed_dictionaries({}, optional={"p": st.integers(0, 1), "q": st.just("z")}),
              "text": st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)})
filters = st.dictionaries(
    st.sampled_from(["n", "s", "b", "l", "o", "missing"]),
    st.one_of(st.sampled_from([0, 1, 2.5, "x", "", True, None, [1], [0, 1], {"p": 1}, {}]),
              st.dictionaries(st.sampled_from(["$eq", "$ne"]), st.sampled_from([1, "x", True, None]), min_size=1)),
    max_size=2) | st.fixed_dictionaries(
    {"n": st.dictionaries(st.sampled_from(["$gt", "$gte", "$lt", "$lte", "$ne"]), st.sampled_from([0, 1, 2.5]),
                          min_size=1)})
put_ops = st.builds(PutOp, namespaces, st.sampled_from(KEYS), values,
                    index=st.sampled_from([None, None, False, ["text"]]), ttl=st.none())
ops = st.one_of(
    put_ops,
    st.builds(PutOp, namespaces, st.sampled_from(KEYS), st.none(), ttl=st.none()),
    st.builds(GetOp, namespaces, st.sampled_from(KEYS), refresh_ttl=st.none()),
    st.builds(SearchOp, st.lists(st.sampled_from(LABELS), max_size=2).map(tuple), filters,
              st.sampled_from([100, 100, 2]), st.sampled_from([0, 0, 1]),
              st.sampled_from([None, None, "red apple", "blue"]), refresh_ttl=st.none()),
    st.builds(lambda p, s, d, limit, offset: ListNamespacesOp(
        tuple(c for c in (MatchCondition("prefix", p) if p else None, MatchCondition("suffix", s) if s else None) if c),
        d, limit, offset),
        st.lists(st.sampled_from(LABELS + ["*"]), max_size=2).map(tuple),
        st.lists(st.sampled_from(LABELS + ["*"]), max_size=2).map(tuple),
        st.sampled_from([None, None, 1, 2]), st.sampled_from([100, 2]), st.sampled_from([0, 1])))
steps = st.lists(st.one_of(ops, st.lists(ops, min_size=2, max_size=4)), max_size=12)


def _same(op, mine, theirs, full_mine, full_theirs):
    if isinstance(op, GetOp):
        assert (mine and (mine.namespace, mine.key, mine.value)) == (theirs and (theirs.namespace, theirs.key, theirs.value))
    elif isinstance(op, ListNamespacesOp):
        assert mine == theirs
    elif isinstance(op, SearchOp):
        def rows(items):
            return sorted(((i.namespace, i.key, sorted(i.value.items(), key=repr)) for i in items), key=repr)
        if not (op.query and op.offset):
            # (InMemoryStore fills a page of a query from its items without vectors ignoring
            # the offset: PymemStore pages one list, scored items first)
            assert len(mine) == len(theirs)
        if op.offset == 0 and op.limit >= 100:
            assert rows(mine) == rows(theirs)
            # the same items have a vector (a score) in both
            assert {(i.namespace, i.key) for i in mine if i.score is None} == \
                   {(i.namespace, i.key) for i in theirs if i.score is None}
        else:  # a page of a differently ordered list of equal scores: part of the same full list
            assert set(map(repr, rows(mine))) <= set(map(repr, rows(full_mine)))
            assert rows(full_mine) == rows(full_theirs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(steps=steps)
def test_behaves_like_in_memory_store(db, steps):
    embedder = pymem.HashEmbedder()
    index = {"dims": embedder.dimension, "embed": embedder.embed, "fields": ["text"]}
    mine = PymemStore(db, store_key=f"diff-{uuid.uuid4().hex[:8]}", index={**index, "embed": embedder})
    theirs = InMemoryStore(index=index)
    for step in steps:
        batch = step if isinstance(step, list) else [step]
        # the namespaces a batch lists are those holding items before its writes; InMemoryStore
        # computes them after its earlier gets, and a get of a missing namespace creates it empty
        listed = {i: theirs._handle_list_namespaces(op) for i, op in enumerate(batch) if isinstance(op, ListNamespacesOp)}
        got, want = mine.batch(batch), theirs.batch(batch)
        want = [listed.get(i, w) for i, w in enumerate(want)]
        # InMemoryStore keeps a namespace once touched (by a get, or emptied by deletes); a
        # database lists the namespaces that hold items, as LangGraph's PostgresStore does
        for ns in [ns for ns, items in theirs._data.items() if not items]:
            del theirs._data[ns]
        # and it keeps an item's old vectors when a put gives it none (index=False, no "text"):
        # a database replaces them, so the oracle's vectors are rebuilt from each put
        last = {(op.namespace, op.key): op for op in batch if isinstance(op, PutOp)}
        for (ns, key), op in last.items():
            theirs._vectors[ns].pop(key, None)
            to_embed = theirs._extract_texts({(ns, key): op})
            if to_embed:
                theirs._insertinmem_store(to_embed, theirs.embeddings.embed_documents(list(to_embed)))
        for op, g, w in zip(batch, got, want, strict=True):
            if isinstance(op, SearchOp) and not (op.offset == 0 and op.limit >= 100):
                full = SearchOp(op.namespace_prefix, op.filter, 100, 0, op.query)
                # the reads of a batch see the store before its writes: so must the full listing
                if any(isinstance(o, PutOp) for o in batch):
                    continue
                _same(op, g, w, mine.batch([full])[0], theirs.batch([full])[0])
            else:
                _same(op, g, w, None, None)


# -- the example and the docs --------------------------------------------------------------

def test_example_agent_runs(dsn, monkeypatch):
    """examples/langgraph_agent.py: a graph whose nodes write and search the store, no model."""
    monkeypatch.setenv("PYMEM_DSN", dsn)
    example = runpy.run_path(str(ROOT / "examples" / "langgraph_agent.py"))
    replies = example["main"]()
    assert replies[3:] == ["You told me: I live in Bergen", "You told me: I keep bees on the roof",
                           "You told me: I play the cello"]
    assert example["main"]() == replies  # it starts clean: the same run again


def test_readme_integrations_examples_run(dsn, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)  # fastaiagent keeps its traces in ./.fastaiagent
    monkeypatch.setenv("PYMEM_DSN", dsn)
    # docs/integrations.md; the Agents SDK's block runs in test_integrations_openai_agents.py
    blocks = [b for b in doc_blocks("python", "Integrations") if "openai_agents" not in b]
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "docs/integrations.md", "exec"), {})  # noqa: S102 - our own docs
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Alice lives in Bergen" and lines[1].startswith("home ")
    assert sorted(eval(lines[2])) == ["bees", "cello"]  # noqa: S307 - a list the block printed
    assert lines[3] == "[('memories', 'alice'), ('memories', 'bob')]"
    assert lines[4] == "['I live in Bergen now']"


def test_filters_like_in_memory_store(make):
    """Every filter of a list of tricky ones selects the same items from the same values in
    both stores: numbers and booleans compared by value, missing fields as None, nested
    objects (the item may have more fields), arrays element by element, the operators."""
    values = [{"n": 1}, {"n": 1.0}, {"n": True}, {"n": False}, {"n": 0}, {"n": 2.5}, {"n": None}, {}, {"n": "1"},
              {"n": [1, 2]}, {"n": [1]}, {"n": {"p": 1, "q": "z"}}, {"n": {"p": True}}, {"n": {}}, {"m": 1}]
    filters = [{"n": 1}, {"n": True}, {"n": 0}, {"n": None}, {"n": "1"}, {"n": [1, 2]}, {"n": [True]}, {"n": []},
               {"n": {"p": 1}}, {"n": {}}, {"n": {"$eq": 1}}, {"n": {"$ne": 1}}, {"n": {"$eq": [1]}},
               {"n": {"$eq": {"p": 1}}}, {"n": {"$ne": None}}, {"missing": None}, {"m": 1, "n": None},
               {"n": {"$eq": {"p": 1, "q": "z"}}}]
    numeric = [{"n": {"$gt": 0}}, {"n": {"$gte": 1}}, {"n": {"$lt": 2.5}}, {"n": {"$lte": True}},
               {"n": {"$gt": 0, "$lt": 2}}]
    mine, theirs = make(), InMemoryStore()
    for i, value in enumerate(values):
        for store in (mine, theirs):
            store.put(("f",), f"v{i:02d}", value)
    for f in filters:
        assert sorted(i.key for i in mine.search(("f",), filter=f, limit=100)) == \
               sorted(i.key for i in theirs.search(("f",), filter=f, limit=100)), f
    # InMemoryStore raises on a value that is not a number (or converts a string): its oracle
    # holds the numbers only, and PymemStore's other values must not match
    numbers = InMemoryStore()
    for i, value in enumerate(values):
        if type(value.get("n")) in (int, float, bool):
            numbers.put(("f",), f"v{i:02d}", value)
    for f in numeric:
        assert sorted(i.key for i in mine.search(("f",), filter=f, limit=100)) == \
               sorted(i.key for i in numbers.search(("f",), filter=f, limit=100)), f
    with pytest.raises(pymem.ValidationError):
        mine.search(("f",), filter={"n": {"$in": [1]}})


def test_reads_decode_each_namespace_once_and_only_their_page(conn):
    """store_namespaces decodes each distinct namespace once, and store_items_search only the
    rows of its page: 400 items in 4 namespaces cost 4 and 10 decodings (counted by PostgreSQL's
    function statistics for this transaction), not 400 (conditions pushed into the DISTINCT
    scan decoded every path: 1.7 s for 10,000 items)."""
    conn.execute("SET track_functions = 'all'")
    conn.execute("SELECT * FROM pymem.store_open(store_key => 'plan')")
    conn.execute("SELECT pymem.store_item_put(store_key => 'plan', namespace => ARRAY['users', 'u' || (i % 4)::text], "
                 "key => 'k' || i, value => jsonb_build_object('n', i)) FROM generate_series(1, 400) AS i")
    with conn.transaction():
        def calls():
            return conn.execute("SELECT coalesce(pg_stat_get_xact_function_calls("
                                "'pymem._store_item_namespace(text)'::regprocedure), 0)").fetchone()[0]
        rows = conn.execute("SELECT namespace FROM pymem.store_namespaces(store_key => 'plan', prefix => '{users,*}', "
                            "suffix => '{*}')").fetchall()
        assert len(rows) == 4 and calls() == 4
        rows = conn.execute("SELECT key FROM pymem.store_items_search(store_key => 'plan', namespace_prefix => '{users}', "
                            "filter => '{\"n\": {\"$gt\": 10}}', max_items => 10)").fetchall()
        assert len(rows) == 10 and calls() == 4 + 10


def test_the_reader_role_reads_items_and_writes_none(dsn, as_role):
    """The reader role executes the item reads (and fact_get), not the writes."""
    reader = as_role("pymem_items_reader")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_reader TO pymem_items_reader")
        c.execute("SELECT * FROM pymem.store_open(store_key => 'r')")
        c.execute("SELECT pymem.store_item_put(store_key => 'r', namespace => '{a}', key => 'k', value => '{\"v\": 1}')")
    with psycopg.connect(reader, autocommit=True) as c:
        assert c.execute("SELECT value FROM pymem.store_item_get('r', '{a}', 'k')").fetchone()[0] == {"v": 1}
        assert c.execute("SELECT count(*) FROM pymem.store_items_search('r')").fetchone()[0] == 1
        assert c.execute("SELECT namespace FROM pymem.store_namespaces('r')").fetchall() == [(["a"],)]
        assert c.execute("SELECT count(*) FROM pymem.fact_get(1)").fetchone()[0] == 0
        for write in ("SELECT pymem.store_item_put('r', '{a}', 'k', '{}')", "SELECT pymem.store_item_delete('r', '{a}', 'k')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(write)


# --- what a user moving from LangGraph's PostgresStore meets (issue 56, item 3) ------------------


def test_index_options_pymem_does_not_honour_are_refused_in_one_line(make, fake_embeddings):
    base = {"dims": fake_embeddings.dims, "embed": fake_embeddings}
    for extra, said in [({"distance_type": "l2"}, "distance_type='l2' is not supported"),
                        ({"distance_type": "inner_product"}, "ranks by cosine similarity"),
                        ({"ann_index_config": {"kind": "hnsw", "m": 16}}, "ann_index_config is not supported"),
                        ({"ann_index_config": {"kind": "flat"}}, "chooses the indexes"),
                        ({"field": ["text"]}, "unknown keys ['field']")]:
        with pytest.raises(pymem.ValidationError, match=re.escape(said)) as caught:
            make({**base, **extra})
        assert "\n" not in str(caught.value)
    with pytest.raises(pymem.ValidationError, match="a dict"):
        make(["dims", 3])
    # what it does honour: cosine, said or not, and None for the optional keys
    for ok in ({"distance_type": "cosine"}, {"distance_type": None, "ann_index_config": None}, {}):
        store = make({**base, **ok})
        store.put(("a",), "k", {"text": "hello"})
        assert store.search(("a",), query="hello")[0].key == "k"


def test_ttl_sweeper_calls_are_no_ops_called_or_awaited(make):
    store = make(ttl={"default_ttl": 1, "sweep_interval_minutes": 5})
    future = store.start_ttl_sweeper()
    assert future.done() and future.result() is None and future.result(timeout=0) is None
    assert store.start_ttl_sweeper(sweep_interval_minutes=1).done()
    assert store.stop_ttl_sweeper() and store.stop_ttl_sweeper(timeout=1) == True  # noqa: E712

    async def twin():  # as AsyncPostgresStore's are used
        assert await store.start_ttl_sweeper() is None
        return await store.stop_ttl_sweeper()

    assert asyncio.run(twin()) is True
    # and an expired item is hidden at once, with no sweeper
    store.put(("t",), "gone", {"v": 1}, ttl=0.0001)  # ~6 ms
    time.sleep(0.05)
    assert store.get(("t",), "gone") is None


# --- concurrent async calls run as one batch (issue 56, item 3: "batches are not batched") -------


def _counting(db) -> list[str]:
    sent: list[str] = []
    query = db.query

    async def counted(q):
        sent.append(q.name)
        return await query(q)

    db.query = counted
    return sent


def test_concurrent_async_calls_run_as_one_batch_with_each_read_once(dsn):
    async def go():
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=4))
        store = PymemStore(db, store_key=f"co-{uuid.uuid4().hex[:8]}")
        await store.aput(("a", "b"), "k0", {"v": 0})
        await store.aput(("a", "c"), "k1", {"v": 1})
        sent = _counting(db)
        calls = []
        for i in range(300):
            calls += [store.aget(("a", "b"), "k0"), store.aget(("a", "c"), "k1"), store.asearch(("a",)),
                      store.alist_namespaces(prefix=("a",), max_depth=2)]
        results = await asyncio.gather(*calls)
        reads = list(sent)
        sent.clear()
        # writes of one key: the last one of the batch stays; with reads of it, which see the store before
        writes = await asyncio.gather(*(store.aput(("w",), "k", {"n": n}) for n in range(200)),
                                      store.aget(("w",), "k"))
        after = await store.aget(("w",), "k")
        await db.close()
        return results, reads, writes, list(sent), after

    results, reads, writes, sent, after = asyncio.run(go())
    assert [r.value for r in results[0::4]] == [{"v": 0}] * 300 and [r.value for r in results[1::4]] == [{"v": 1}] * 300
    assert all(sorted(i.key for i in r) == ["k0", "k1"] for r in results[2::4])
    assert all(r == [("a", "b"), ("a", "c")] for r in results[3::4])
    # 1,200 calls: four distinct reads in three statements, the two gets in one (was 1,200 statements)
    assert len(reads) == 3 and reads.count("store_items_get") == 1
    assert writes[-1] is None and after.value == {"n": 199}
    assert sent.count("store_item_put") == 1


def test_an_error_in_a_coalesced_batch_reaches_only_its_caller(dsn):
    async def go():
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=2))
        store = PymemStore(db, store_key=f"er-{uuid.uuid4().hex[:8]}")
        await store.aput(("a",), "k", {"v": 1})
        out = await asyncio.gather(store.aget(("a",), "k"), store.aput(("a",), "x" * 5000, {"v": 2}),
                                   store.aget(("a",), "k"), store.aput(("a",), "k2", {"v": 3}),
                                   return_exceptions=True)
        got = await store.aget(("a",), "k2")
        await db.close()
        return out, got

    (first, bad, second, fine), got = asyncio.run(go())
    assert first.value == second.value == {"v": 1} and fine is None
    assert isinstance(bad, pymem.ValidationError)
    assert got.value == {"v": 3}


def test_large_batches_async_in_the_shape_of_upstreams(dsn):
    """langgraph-checkpoint-postgres's test_large_batches_async at a tenth of its size (N=100):
    it finishes, every call gets its result, in far fewer statements than calls."""
    async def go():
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=4))
        store = PymemStore(db, store_key=f"lb-{uuid.uuid4().hex[:8]}")
        sent = _counting(db)
        coros = []
        for m in range(10):
            for i in range(100):
                ns = ("test", "foo", "bar", "baz", str(m % 2))
                coros += [store.aput(ns, f"key{i}", value={"foo": "bar" + str(i)}), store.aget(ns, f"key{i}"),
                          store.alist_namespaces(prefix=None, max_depth=m + 1), store.asearch(("test",)),
                          store.aput(ns, f"key{i}", value={"foo": "bar" + str(i)}), store.adelete(ns, f"key{i}")]
        started = time.monotonic()
        results = await asyncio.gather(*coros)
        took = time.monotonic() - started
        await db.close()
        return results, len(sent), took

    results, statements, took = asyncio.run(go())
    print(f"\n6,000 concurrent calls: {statements} statements, {took:.2f} s")
    assert len(results) == 6000
    assert statements < 1000, statements
