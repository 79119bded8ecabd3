"""The Python API is as wide as the SQL API (issue 13, point 4): one user resolution for every
call; precomputed vectors wherever the SQL takes one; persist says whether it created the fact;
messages carry metadata and their real times; AsyncMemory closes what it opened; recall's
min_score. All against the real server."""

from __future__ import annotations

import asyncio
import inspect
import logging
from datetime import datetime, timedelta, timezone

import numpy as np
import psycopg
import pytest
from pgvector import Vector

import pymem
from pymem import AsyncMemory, HashEmbedder, Memory


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


class Counting(HashEmbedder):
    """A HashEmbedder that counts the texts it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(64)
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += texts
        return super().embed(texts)


def rows(dsn, sql, *args):
    with pymem.connect(dsn) as c:  # with pgvector's types registered
        return c.execute(sql, args).fetchall()


def make(db, **kw) -> Memory:
    kw.setdefault("agent_id", "support-bot")
    kw.setdefault("embedder", Counting())
    return Memory(db=db, **kw)


# --- 1. one user resolution for every call --------------------------------------------------------


def test_user_id_applies_to_fact_calls(db, dsn):
    mem = make(db, user_id="alice")
    fid = mem.persist("Prefers email")  # no id=: the Memory's user
    assert rows(dsn, "SELECT scope, scope_id FROM pymem.facts WHERE id = %s", fid) == [("user", "alice")]
    assert [f.content for f in mem.retrieve()] == ["Prefers email"]
    assert [f.content for f in mem.retrieve("how to reach them?")] == ["Prefers email"]
    new = mem.update("Prefers Slack", old="Prefers email")
    assert [f.id for f in mem.history(fact_id=new)] == [fid, new]
    assert len(mem.history()) == 2
    assert mem.retrieve(user="bob") == []  # user= overrides, as for the conversation calls
    assert mem.forget() == 2
    assert rows(dsn, "SELECT count(*) FROM pymem.facts")[0][0] == 0


def test_a_resolver_is_called_with_the_ctx_of_each_fact_call(db, dsn):
    mem = make(db, user_id=lambda ctx: ctx["user"])
    mem.persist("Likes tea", ctx={"user": "alice"})
    mem.persist("Likes coffee", ctx={"user": "bob"})
    assert [f.content for f in mem.retrieve(ctx={"user": "bob"})] == ["Likes coffee"]
    assert [f.content for f in mem.retrieve(user="alice")] == ["Likes tea"]
    assert sorted(rows(dsn, "SELECT scope_id, content FROM pymem.facts")) == [("alice", "Likes tea"),
                                                                             ("bob", "Likes coffee")]


def test_user_and_id_name_the_same_subject(db):
    mem = make(db)
    a = mem.persist("Likes tea", user="alice")
    assert mem.persist("Likes tea", id="alice") == a  # id= still names the user, as before
    assert mem.persist("Likes tea", user="alice", id="alice") == a
    with pytest.raises(pymem.ValidationError, match="two different users"):
        mem.persist("Likes tea", user="alice", id="bob")
    with pytest.raises(pymem.ValidationError, match="tier=\"user\""):
        mem.persist("Return policy is 30 days", tier="global", user="alice")
    with pytest.raises(pymem.ValidationError, match="tier=\"user\""):
        mem.retrieve(tier="global", user="alice")


def test_a_fact_call_without_a_user_fails_and_says_how(db, caplog):
    """Before, retrieve() silently returned [] and persist() failed in SQL without a hint."""
    mem = make(db)
    for call in (lambda: mem.persist("x"), lambda: mem.retrieve(), lambda: mem.history(), lambda: mem.forget(),
                 lambda: mem.update("y", old="x")):
        with caplog.at_level(logging.WARNING, "pymem"), pytest.raises(pymem.ValidationError) as err:
            call()
        assert "user=" in str(err.value) and "Memory(user_id=" in str(err.value) and 'tier="global"' in str(err.value)
    # the agent's facts need no user
    mem.persist("Return policy is 30 days", tier="global")
    assert [f.content for f in mem.retrieve(tier="global")] == ["Return policy is 30 days"]


def test_the_wildcard_is_never_a_resolved_user(db):
    """'*' means every user to the SQL: a resolver returning it (e.g. a user name taken from a
    request) must not read everyone's facts. The wildcard stays available as id='*'."""
    mem = make(db, user_id=lambda ctx: ctx)
    mem.persist("alice's secret", user="alice")
    mem.persist("bob's secret", user="bob")
    for call in (lambda: mem.retrieve(ctx="*"), lambda: mem.forget(ctx="*"), lambda: mem.retrieve(user="*"),
                 lambda: mem.window(ctx="*"), lambda: mem.read("q", ctx="*")):
        with pytest.raises(pymem.ValidationError, match="'\\*' is not a user id"):
            call()
    assert len(mem.retrieve(id="*")) == 2  # explicit, documented


@pytest.mark.parametrize("cls", [Memory, AsyncMemory])
def test_every_method_about_a_user_takes_user_and_ctx(cls):
    public = [n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))]
    without = {n for n in public if not {"user", "ctx"} <= inspect.signature(getattr(cls, n)).parameters.keys()}
    # bound(conn): every user's calls; the learning queue and the listing of users: the project's
    assert without == {"close", "aclose", "bound", "learn_pending", "learning_status", "users"} & set(public)
    for name in public:
        params = inspect.signature(getattr(cls, name)).parameters
        assert "user_id" not in params, f"{name}: the call-level name is user="
    # the module-level shortcuts: pymem.context(user, query), the user first, by position or name (issue 59)
    for helper in (pymem.context, pymem.record, pymem.acontext, pymem.arecord):
        params = list(inspect.signature(helper).parameters.values())
        assert [p.name for p in params[:2]] == ["user", "query"]
        assert params[0].kind is params[1].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


# --- 2. precomputed vectors -----------------------------------------------------------------


def test_persist_with_an_embedding_stores_it_and_skips_the_embedder(db, dsn):
    emb = Counting()
    mem = make(db, embedder=emb)
    vec = HashEmbedder(64).embed(["something else entirely"])[0]
    fid = mem.persist("Prefers email", user="alice", embedding=vec)
    assert emb.texts == []
    stored = rows(dsn, "SELECT embedder, embedding FROM pymem.fact_embeddings WHERE fact_id = %s", fid)
    assert stored[0][0] == emb.name and np.allclose(stored[0][1].to_numpy(), vec)
    other = HashEmbedder(64).embed(["yet another text"])[0]
    new = mem.update("Prefers Slack", old="Prefers email", user="alice", embedding=np.array(other))
    assert emb.texts == []
    stored = rows(dsn, "SELECT embedding FROM pymem.fact_embeddings WHERE fact_id = %s", new)
    assert np.allclose(stored[0][0].to_numpy(), other)


@pytest.mark.parametrize("kind", [list, tuple, np.array, Vector])
def test_retrieve_and_recall_take_a_query_vector(db, kind):
    emb = Counting()
    mem = make(db, embedder=emb, window=0, lexical_weight=0, fact_lexical_weight=0)  # a vector has no words to match
    for fact in ("Allergic to peanuts", "Lives in Oslo", "Drives a red car"):
        mem.persist(fact, user="alice")
    mem.add_message("I am allergic to peanuts and shellfish", user="alice")
    mem.add_message("The weather in Oslo is grey today", user="alice")
    query = "what food must we avoid?"
    qvec = kind(HashEmbedder(64).embed([query])[0])
    by_text = [(f.id, round(f.similarity, 9)) for f in mem.retrieve(query, user="alice", k=2)]
    recalled_text = [(m.seq, round(m.score, 9)) for m in mem.recall(query, user="alice", k=2)]
    emb.texts.clear()
    assert [(f.id, round(f.similarity, 9)) for f in mem.retrieve(qvec, user="alice", k=2)] == by_text
    assert [(m.seq, round(m.score, 9)) for m in mem.recall(qvec, user="alice", k=2)] == recalled_text
    assert emb.texts == []  # everything had a vector already: the embedder was not called


def test_the_context_read_and_a_recorded_turn_take_vectors(db, dsn):
    emb = Counting()
    mem = make(db, embedder=emb, window=0)
    u, a = HashEmbedder(64).embed(["My bike is a red Brompton", "Nice bike."])
    res = mem.record("My bike is a red Brompton", "Nice bike.", user="alice", embeddings=(u, Vector(a)))
    assert emb.texts == []
    stored = dict(rows(dsn, "SELECT seq, embedding FROM pymem.message_embeddings"))
    assert np.allclose(stored[res.user_seq].to_numpy(), u) and np.allclose(stored[res.assistant_seq].to_numpy(), a)
    qvec = HashEmbedder(64).embed(["which bike do I ride?"])[0]
    ctx = mem.read("which bike do I ride?", user="alice", embedding=qvec)
    assert emb.texts == [] and {m.seq for m in ctx.recalled} == {res.user_seq, res.assistant_seq}
    assert mem.context("which bike do I ride?", user="alice", embedding=qvec) == ctx.messages
    assert mem.read("which bike do I ride?", user="alice") == ctx  # the same as embedding the text
    assert emb.texts == ["which bike do I ride?"]


@pytest.mark.parametrize(
    ("vector", "match"),
    [
        ([0.1] * 3, "dimension 3"),
        ([0.0] * 64, "all-zero"),
        ([float("nan")] + [0.1] * 63, "non-finite"),
        (b"bytes", "string"),
    ],
)
def test_a_precomputed_vector_is_checked_like_an_embedders(db, dsn, vector, match):
    mem = make(db)
    for call in (lambda: mem.persist("Prefers email", user="alice", embedding=vector),
                 lambda: mem.update("Prefers Slack", old="Prefers email", user="alice", embedding=vector),
                 lambda: mem.retrieve(vector, user="alice"),  # a str query is a text; bytes are not
                 lambda: mem.recall(vector, user="alice"),
                 lambda: mem.read("q", user="alice", embedding=vector),
                 lambda: mem.record("q", "a", user="alice", embeddings=(vector, vector))):
        with pytest.raises(pymem.ValidationError, match=match) as err:
            call()
        assert "embedding=" in str(err.value)
    assert rows(dsn, "SELECT (SELECT count(*) FROM pymem.facts) + (SELECT count(*) FROM pymem.messages)")[0][0] == 0


def test_a_precomputed_vector_needs_the_memorys_embedder(db):
    mem = make(db, embedder=None)
    with pytest.raises(pymem.ValidationError, match="Memory\\(embedder="):
        mem.persist("Prefers email", user="alice", embedding=[1.0, 0.0])
    with pytest.raises(pymem.ValidationError, match="a pair"):
        make(db).record("q", "a", user="alice", embeddings=[[1.0] * 64])


# --- 3. persist says whether it created the fact --------------------------------------------


def test_persist_reports_whether_it_created_the_fact(db):
    mem = make(db)
    first = mem.persist("Prefers email", user="alice")
    again = mem.persist("  Prefers   email ", user="alice")
    assert (first.created, again.created) == (True, False)
    assert first == again and isinstance(first, int) and int(again) == int(first)
    assert repr(first) == f"FactId({int(first)}, created=True)"
    assert mem.history(user="alice", fact_id=again)[0].id == first  # usable as an id


class Model(Counting):
    """A counting embedder that does not say it is cheap: a model, as far as persist knows."""

    cheap = False


def test_a_re_add_calls_no_model_and_a_new_fact_gets_its_vector(db, dsn):
    model = Model()
    mem = make(db, embedder=model)
    first = mem.persist("Prefers email", user="alice")
    assert first.created and model.texts == ["Prefers email"]
    again = mem.persist("  Prefers   email ", user="alice", confidence=0.5)
    assert (again, again.created) == (first, False) and model.texts == ["Prefers email"]  # no model call
    # the re-add is checked as fact_add checks it, though it writes nothing
    with pytest.raises(pymem.ValidationError, match="confidence"):
        mem.persist("Prefers email", user="alice", confidence=1.5)
    with pytest.raises(pymem.ValidationError, match="source"):
        mem.persist("Prefers email", user="alice", source="rumour")
    # a fact there without a vector from this embedder (written by SQL) gets one
    with psycopg.connect(dsn, autocommit=True) as c:
        bare = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Lives in Oslo')").fetchone()[0]
    found = mem.persist("Lives in Oslo", user="alice")
    assert (found, found.created) == (bare, False) and model.texts[-1] == "Lives in Oslo"
    assert rows(dsn, "SELECT count(*) FROM pymem.fact_embeddings WHERE fact_id = %s AND embedder = %s",
                bare, model.name) == [(1,)]
    # a cheap embedder (HashEmbedder) embeds and adds in one call, re-add or not
    cheap = Counting()
    mem2 = make(db, embedder=cheap)
    assert mem2.persist("Prefers email", user="alice") == first and cheap.texts == ["Prefers email"]



def test_a_cheap_embedder_stops_embedding_re_adds_once_they_dominate(db, dsn):
    """issue 60: persist with a cheap embedder embeds and adds in one statement while its recent
    persists were new facts, and asks first (embedding nothing) while most were re-adds; both
    paths give the same ids and vectors."""
    cheap = Counting()
    mem = make(db, embedder=cheap)
    ids = [mem.persist(f"Likes city {i}", user="carol") for i in range(3)]
    assert cheap.texts == [f"Likes city {i}" for i in range(3)]  # new facts: embedded, one call each
    for _ in range(12):
        assert [mem.persist(f"Likes city {i}", user="carol") for i in range(3)] == ids
    embedded = len(cheap.texts)
    assert 3 < embedded < 3 + 36  # the first re-adds embedded, the later ones asked first
    again = [mem.persist(f"Likes city {i}", user="carol") for i in range(3)]
    assert again == ids and not any(f.created for f in again) and len(cheap.texts) == embedded  # no embedding
    # a new fact while it asks first: looked up, embedded, added with its vector
    new = mem.persist("Likes city 99", user="carol")
    assert new.created and cheap.texts[-1] == "Likes city 99"
    assert rows(dsn, "SELECT count(*) FROM pymem.fact_embeddings WHERE fact_id = %s AND embedder = %s",
                new, cheap.name) == [(1,)]
    # new facts bring it back to one statement each (it embeds before it knows)
    for i in range(20):
        mem.persist(f"Visited town {i}", user="carol")
    before = len(cheap.texts)
    mem.persist("Prefers tea", user="carol")
    assert len(cheap.texts) == before + 1 and not pymem.facts._readds(mem)

def test_a_re_add_is_one_lookup_through_the_async_twin(dsn):
    model = Model()

    async def main():
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_min_size=1))
        async with db:
            mem = AsyncMemory(agent_id="bot", db=db, embedder=model)
            a = await mem.persist("Prefers tea", user="bob")
            b = await mem.persist("Prefers tea", user="bob")
            return a, b

    a, b = asyncio.run(main())
    assert (a, b.created) == (b, False) and model.texts == ["Prefers tea"]


# --- 4. metadata and real times of messages ---------------------------------------------------


def test_messages_carry_metadata_to_window_recall_and_context(db):
    mem = make(db, window=1)
    mem.add_message("I am allergic to peanuts, please note", user="alice", metadata={"channel": "sms", "n": 1})
    mem.record("Any dessert without nuts?", "The sorbet.", user="alice", metadata={"channel": "web"},
               answer_metadata={"model": "m1"})
    window = mem.window(user="alice", size=3)
    assert [m.metadata for m in window] == [{"channel": "sms", "n": 1}, {"channel": "web"}, {"model": "m1"}]
    recalled = mem.recall("peanut allergy", user="alice", k=1)
    assert recalled[0].metadata == {"channel": "sms", "n": 1}
    ctx = mem.read("peanut allergy", user="alice")
    assert ctx.recalled[0].metadata == {"channel": "sms", "n": 1}
    assert [m.metadata for m in ctx.window] == [{"model": "m1"}]
    with pytest.raises(pymem.ValidationError, match="mapping"):
        mem.add_message("x", user="alice", metadata=["not", "an", "object"])


def test_sql_refuses_metadata_that_is_not_an_object(dsn):
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.errors.InvalidParameterValue, match="JSON object"):
        c.execute("SELECT * FROM pymem.turn_record('alice', 'q', 'a', assistant_metadata => '[1]')")


def test_a_history_imported_with_its_times_keeps_its_order(db, dsn):
    mem = make(db, window=0, recency_weight=0.5, half_life_seconds=86400.0)
    t0 = datetime.now(timezone.utc) - timedelta(days=30)
    said = "I adopted a cat named Tom last spring"
    for i, text in enumerate([said, "We talked about cat food brands", "Tom likes tuna the most"]):
        mem.add_message(text, user="alice", thread="import", created_at=t0 + timedelta(minutes=i),
                        role="user" if i != 1 else "assistant")
    res = mem.record(said, "Noted.", user="alice", thread="import",
                     created_at=t0 + timedelta(minutes=5))
    assert rows(dsn, "SELECT seq, created_at FROM pymem.messages WHERE thread_id = 'import' ORDER BY seq") == [
        (1, t0), (2, t0 + timedelta(minutes=1)), (3, t0 + timedelta(minutes=2)),
        (res.user_seq, t0 + timedelta(minutes=5)), (res.assistant_seq, t0 + timedelta(minutes=5))]
    window = mem.window(user="alice", thread="import", size=10)
    assert [m.seq for m in window] == [1, 2, 3, 4, 5] and window[0].created_at == t0
    mem.add_message(said, user="alice", thread="live")  # now
    best = mem.recall(said, user="alice", k=3)
    # equal similarity: the live message outranks the month-old copies (recency), the older copy last
    assert [(m.thread, m.created_at == t0) for m in best][:1] == [("live", False)]
    assert [m.seq for m in best if m.thread == "import" and m.content == said] == [4, 1]


@pytest.mark.parametrize(
    ("created_at", "match"),
    [
        (datetime.now(timezone.utc) + timedelta(hours=1), "in the future"),
        (datetime(2020, 1, 1), "timezone-aware"),
        ("2020-01-01", "datetime"),
    ],
)
def test_a_bad_message_time_is_refused(db, created_at, match):
    mem = make(db)
    with pytest.raises(pymem.ValidationError, match=match):
        mem.add_message("x", user="alice", created_at=created_at)


def test_an_import_out_of_order_is_refused_and_writes_nothing(db, dsn):
    mem = make(db)
    now = datetime.now(timezone.utc)
    mem.add_message("first", user="alice", created_at=now - timedelta(days=1))
    mem.add_message("skew", user="alice", created_at=now + timedelta(minutes=1))  # within the skew allowed
    before = rows(dsn, "SELECT last_seq FROM pymem.threads")
    with pytest.raises(pymem.ValidationError, match="earlier than the newest message") as err:
        mem.add_message("older", user="alice", created_at=now - timedelta(days=2))
    assert "oldest first" in (err.value.hint or "")
    with pytest.raises(pymem.ValidationError, match="earlier than the newest message"):
        mem.record("older", "turn", user="alice", created_at=now - timedelta(days=2))
    assert rows(dsn, "SELECT last_seq FROM pymem.threads") == before
    assert rows(dsn, "SELECT count(*) FROM pymem.messages")[0][0] == 2
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.errors.InvalidParameterValue, match="future"):
        c.execute("SELECT pymem.message_add('alice', 'x', created_at => 'infinity')")


# --- 5. AsyncMemory closes what it opened -------------------------------------------------------


def test_memory_and_async_memory_leave_a_given_db_open(db, dsn, monkeypatch):
    with make(db) as mem:
        mem.persist("x", user="alice")
    assert len(make(db).retrieve(user="alice")) == 1  # db still open
    monkeypatch.setenv("PYMEM_DSN", dsn)
    own = Memory(agent_id="bot")
    own.close()
    assert own.db.pool.closed

    async def main() -> None:
        adb = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn))
        async with AsyncMemory(db=adb, embedder=HashEmbedder(64)) as mem:
            await mem.persist("y", user="alice")
        assert not adb.pool.closed
        assert len(await AsyncMemory(db=adb).retrieve(user="alice")) == 2
        await adb.close()

        async with AsyncMemory(agent_id="bot") as mine:  # opens its own from the settings (PYMEM_DSN)
            assert [f.content for f in await mine.retrieve(user="alice")] == ["y", "x"]
            pool = mine.db.pool
        assert pool.closed
        lazy = AsyncMemory(agent_id="bot")  # without `async with`: opened by the first call
        await asyncio.gather(*(lazy.retrieve(user="alice") for _ in range(3)))
        first = lazy.db
        await lazy.aclose()
        assert first.pool.closed

    asyncio.run(main())


# --- 6. min_score ---------------------------------------------------------------------------


def test_min_score_leaves_slots_empty_instead_of_filling_them(db, dsn):
    messages = ["I am allergic to peanuts", "Peanuts make me ill, really", "Peanut butter on toast, every day",
                "The train to Bergen was late again"]
    query = "peanut allergy"
    base = make(db, window=0, next_turn_weight=0)  # the matches alone (no next turn)
    for text in messages:
        base.add_message(text, user="alice")
    everything = base.recall(query, user="alice", k=4)
    # every message that matches at all: the three about peanuts; the train shares no word and
    # (HashEmbedder: no n-gram) no direction with the query, so the floor keeps it out ...
    assert sorted(m.content for m in everything) == sorted(messages[:3])
    # ... unless it comes as the turn after a recalled one (next_turn_weight, default 0.8)
    assert make(db, window=0).recall(query, user="alice", k=4)[-1].content == messages[3]
    cut = (everything[1].score + everything[2].score) / 2
    strict = make(db, window=0, min_score=cut, next_turn_weight=0)
    assert [m.seq for m in strict.recall(query, user="alice", k=3)] == [m.seq for m in everything[:2]]
    assert [m.seq for m in strict.read(query, user="alice").recalled] == [m.seq for m in everything[:2]]
    # the filter is SQL's (a service calling SQL alone gets the same)
    qvec = Vector(HashEmbedder(64).embed([query])[0])
    sql_rows = rows(dsn, "SELECT seq FROM pymem.messages_recall('alice', %s, %s, query_text => %s, recall => pymem.recall("
                         "window_size => 0, min_score => %s, next_turn_weight => 0))", qvec, base.embedder.name, query, cut)
    assert [r[0] for r in sql_rows] == [m.seq for m in everything[:2]]
    assert make(db, min_score=1.0).recall(query, user="alice") == []


@pytest.mark.parametrize("value", [1.5, -2.0, float("nan")])
def test_min_score_out_of_range_is_refused(db, value):
    with pytest.raises(pymem.ValidationError, match="min_score"):
        make(db, min_score=value).recall("q", user="alice")
    with pytest.raises(pymem.ValidationError, match="min_score"):
        make(db, min_score=value).read("q", user="alice")


def test_min_score_must_be_a_number():
    with pytest.raises(pymem.ValidationError, match="min_score"):
        pymem.MemoryOptions.from_keywords(min_score="0.5")


def test_help_shows_no_sentinel_address_and_the_namespace_is_pymems_own():
    """Issue 29, item 16: help(Memory.context) says what user= defaults to, and importlib's
    exception is not part of pymem's public names."""
    for method in (Memory.context, Memory.persist, AsyncMemory.recall):
        shown = str(inspect.signature(method))
        assert "object at 0x" not in shown and "user: 'str | None' = <the Memory's user_id>" in shown
    assert not hasattr(pymem, "PackageNotFoundError")


def test_facts_made_by_the_row_factory_equal_facts_made_from_dicts(db):
    """retrieve() and history() build their Facts with pymem.facts.fact_rows (no dict per row):
    each is the Fact that _fact makes from the same row as a dict, field by field, metadata a
    new dict per Fact; the async Memory gets the same."""
    from pymem import calls
    from pymem.facts import _fact

    mem = make(db, user_id="alice")
    first = mem.persist("Prefers email", metadata={"k": [1, 2]}, trace_id="t-1")
    mem.persist("Lives in Oslo")
    newest = mem.update("Prefers Slack", old="Prefers email")
    subject = {"scope": "user", "scope_id": "alice", "project_id": ""}
    for query, got in (
        (calls.facts_newest(**subject, max_facts=50), mem.retrieve()),
        (calls.fact_history(**subject, max_facts=50), mem.history()),
        (calls.fact_chain(**subject, id=newest), mem.history(fact_id=newest)),
    ):
        expected = [_fact(r) for r in db.query(query)]
        assert got == expected and [vars(f) for f in got] == [vars(f) for f in expected], query.name
        assert all(type(f) is pymem.Fact for f in got)
    assert [f.depth for f in mem.history(fact_id=newest)] == [1, 0]
    facts = mem.retrieve()
    assert len({id(f.metadata) for f in facts}) == len(facts)  # never one dict shared between Facts
    assert next(f for f in mem.history() if f.id == first).metadata == {"k": [1, 2]}

    async def read() -> list[pymem.Fact]:
        adb = await pymem.AsyncDatabase.open(db.settings)
        try:
            return await AsyncMemory(agent_id="test", user_id="alice", db=adb).retrieve()
        finally:
            await adb.close()

    assert asyncio.run(read()) == facts
