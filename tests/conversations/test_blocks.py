"""Composable context (issue 19): the built-in parts as named blocks in a declared order (one
SQL call for all of them), StaticBlock pins, custom blocks (sync and async) that see what the
blocks above produced and hear about recorded turns, a failing block left out, and the context
budget with its documented trimming order. Against the real server, except the budget's
property test, which exercises pymem.blocks.fit (pure Python) directly."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pymem
from pymem import AsyncMemory, HashEmbedder, Memory, StaticBlock, ValidationError
from pymem.blocks import BUILTIN, TRIM_ORDER, Part, _cut, fit, norm
from pymem.context import RECALL_HEADING, USER_HEADING
from pymem.conversations import Message


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=4)) as d:
        yield d


def make(db, **kw) -> Memory:
    kw.setdefault("agent_id", "support-bot")
    kw.setdefault("embedder", HashEmbedder(64))
    return Memory(db=db, **kw)


def fill(mem: Memory, user: str = "alice", turns: int = 3) -> None:
    mem.persist("Support hours are 9 to 5 CET", tier="global")
    mem.persist("Lives in Bergen", user=user)
    for i in range(turns):
        mem.record(f"question number {i} about the weather", f"answer number {i} about the weather", user=user)


class CountingDatabase(pymem.Database):
    """The real Database, noting the name of each query it sends."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[str] = []

    def query(self, query):
        self.sent.append(query.name)
        return super().query(query)


# --- order --------------------------------------------------------------------------------------


def test_the_default_order_is_the_fixed_shape_of_before(db):
    mem = make(db, system_prompt="Be brief.", window=2)
    fill(mem)
    ctx = mem.read("what about the weather", user="alice")
    assert [b.name for b in ctx.blocks] == list(BUILTIN)
    assert ctx.messages[0] == {"role": "system", "content": "Be brief."}
    assert ctx.messages[2] == {"role": "system", "content": USER_HEADING + "\n- Lives in Bergen"}
    assert ctx.messages[-1] == {"role": "user", "content": "what about the weather"}
    # each block's output is visible, and together they are the messages (then the query)
    assert [m for b in ctx.blocks for m in b.messages] + [ctx.messages[-1]] == ctx.messages
    assert ctx.block("window").items == ["question number 2 about the weather", "answer number 2 about the weather"]
    assert ctx.block("recall").items == [m.content for m in ctx.recalled] and ctx.recalled
    assert ctx.trimmed == {}


def test_blocks_come_in_the_declared_order_and_unlisted_ones_are_left_out(db):
    mem = make(db, system_prompt="Be brief.", window=2, blocks=["window", "user_facts", "system"])
    fill(mem)
    ctx = mem.read("what about the weather", user="alice")
    assert [b.name for b in ctx.blocks] == ["window", "user_facts", "system"]
    assert [m["content"] for m in ctx.messages] == [
        "question number 2 about the weather", "answer number 2 about the weather",
        USER_HEADING + "\n- Lives in Bergen", "Be brief.", "what about the weather"]
    assert ctx.agent_facts == [] and ctx.recalled == [] and ctx.summary is None


@pytest.mark.parametrize("blocks", [["recall", "nope"], ["window", "window"], [object()],
                                    [type("Fake", (), {"name": "summary", "render": lambda s, q, u: ""})()], "window"])
def test_bad_blocks_are_refused_when_the_memory_is_built(db, blocks):
    with pytest.raises(ValidationError):
        make(db, blocks=blocks)


# --- pins ----------------------------------------------------------------------------------------


def test_a_static_block_is_pinned_in_its_place(db):
    today = StaticBlock("Today's date is 2026-11-30.", name="date")
    mem = make(db, blocks=["system", today, "user_facts", "window"], window=2)
    fill(mem)
    ctx = mem.read("hello", user="alice")
    assert ctx.messages[0] == {"role": "system", "content": "Today's date is 2026-11-30."}
    assert ctx.block("date").pinned and ctx.block("date").items == ["Today's date is 2026-11-30."]
    # an unresolved caller gets the pin too (and the agent's facts only)
    assert mem.read("hello", user=None).messages[0]["content"] == "Today's date is 2026-11-30."
    with pytest.raises(ValidationError):
        StaticBlock("  ")


# --- custom blocks ------------------------------------------------------------------------------


class Tickets:
    """The user's open support tickets, read from the application's own table in the same
    database, through the Memory's pool."""

    name = "tickets"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def render(self, query, upstream):
        with upstream.db.connection() as conn:
            rows = conn.execute("SELECT title FROM app_tickets WHERE user_id = %s AND open ORDER BY id",
                                (upstream.user,)).fetchall()
        lines = [title for (title,) in rows if not upstream.contains(title)]
        return "Open tickets:\n" + "\n".join(f"- {t}" for t in lines) if lines else None

    def on_message(self, message, user):
        self.seen.append((user, message.role, message.content, message.seq, message.thread))


def make_tickets(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE app_tickets (id serial PRIMARY KEY, user_id text, title text, open boolean)")
        c.execute("INSERT INTO app_tickets (user_id, title, open) VALUES ('alice', 'Refund for order 7', true), "
                  "('alice', 'Old closed ticket', false), ('bob', 'Bob''s ticket', true), "
                  "('alice', 'Lives in Bergen', true)")


def test_a_custom_block_reads_another_table_and_sees_the_blocks_above(db, dsn):
    make_tickets(dsn)
    tickets = Tickets()
    mem = make(db, blocks=["user_facts", tickets, "window"], window=2)
    fill(mem)
    ctx = mem.read("my refund?", user="alice")
    # the user's open tickets only, minus what the facts above already say ("Lives in Bergen")
    assert ctx.block("tickets").items == ["Open tickets:\n- Refund for order 7"]
    assert ctx.messages[1] == {"role": "system", "content": "Open tickets:\n- Refund for order 7"}
    assert mem.read("my refund?", user="bob").block("tickets").items == ["Open tickets:\n- Bob's ticket"]


def test_render_sees_exactly_the_blocks_above_it(db):
    seen = {}

    class Spy:
        def __init__(self, name):
            self.name = name

        def render(self, query, upstream):
            seen[self.name] = (query, upstream.user, upstream.thread, [b.name for b in upstream.blocks],
                               upstream.text)
            return f"{self.name} was here"

    mem = make(db, system_prompt="Be brief.", blocks=["system", Spy("a"), "user_facts", Spy("b")], window=2)
    fill(mem)
    mem.read("hi", user="alice", thread="default")
    assert seen["a"] == ("hi", "alice", "default", ["system"], "Be brief.")
    assert seen["b"][3] == ["system", "a", "user_facts"]
    assert seen["b"][4] == "Be brief.\na was here\n" + USER_HEADING + "\n- Lives in Bergen"


def test_upstream_contains_normalises_as_the_sql_dedupe_does(conn):
    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text(alphabet=st.sampled_from("aBz Q\t\n\r\f\v\u00a0\u2003\u3000\ufeff.-0"), max_size=30))
    def same(s):
        assert norm(s) == conn.execute("SELECT pymem._norm(%s)", (s,)).fetchone()[0]

    same()


def test_recall_skips_what_a_static_block_above_it_says(db):
    said = "my favourite colour is a deep ocean blue"
    for dedupe, expect in ((True, 1), (False, 0)):
        mem = make(db, blocks=[StaticBlock("Note: " + said.upper()), "recall"], window=0, dedupe=dedupe)
        if dedupe:
            mem.record(said, "noted, a deep ocean blue", user="alice")
        ctx = mem.read("favourite colour", user="alice")
        assert (said in [m.content for m in ctx.recalled]) is not dedupe
        assert ctx.deduped == expect


def test_all_built_in_blocks_are_read_by_one_sql_call(dsn):
    make_tickets(dsn)
    with CountingDatabase(pymem.Settings(dsn=dsn, pool_max_size=2)) as counting:
        mem = make(counting, blocks=["window", Tickets(), "recall", StaticBlock("pin"), "summary", "user_facts",
                                     "agent_facts", "system"], window=2)
        fill(mem)
        counting.sent.clear()
        ctx = mem.read("weather", user="alice")
    assert counting.sent == ["context_read"]
    assert ctx.recalled and ctx.window and ctx.user_facts and ctx.agent_facts


# --- failures -----------------------------------------------------------------------------------


class Broken:
    name = "broken"

    def render(self, query, upstream):
        raise RuntimeError("the ticket service is down")

    def on_message(self, message, user):
        raise RuntimeError("cannot write")


def test_a_failing_block_is_logged_and_left_out(db, caplog):
    tickets = Tickets()
    bad_type = type("BadType", (), {"render": lambda self, q, u: 42})()
    mem = make(db, blocks=["user_facts", Broken(), bad_type, tickets], window=2)
    mem.persist("Lives in Bergen", user="alice")
    with caplog.at_level(logging.WARNING, logger="pymem"):
        with mem.turn("hello there, anyone?", user="alice") as turn:
            turn.answer = "hi!"
    assert "broken" in caplog.text and "the ticket service is down" in caplog.text and "cannot write" in caplog.text
    ctx = turn.context
    assert ctx.block("broken").error == "RuntimeError: the ticket service is down" and ctx.block("broken").messages == []
    assert "not a string" in ctx.block("BadType").error
    assert ctx.messages == [{"role": "system", "content": USER_HEADING + "\n- Lives in Bergen"},
                            {"role": "user", "content": "hello there, anyone?"}]
    # the turn was recorded and the next block still heard about it (Tickets has no table: its
    # render failed too, but on_message is independent)
    assert turn.result is not None and [m.content for m in mem.window(user="alice")] == ["hello there, anyone?", "hi!"]
    assert tickets.seen == [("alice", "user", "hello there, anyone?", 1, "default"),
                            ("alice", "assistant", "hi!", 2, "default")]


def test_on_message_runs_only_after_a_recorded_turn(db):
    tickets = Tickets()
    mem = make(db, blocks=[tickets])
    with pytest.raises(KeyError):
        with mem.turn("q", user="alice") as turn:
            raise KeyError("the model call failed")
    with mem.turn("q", user="alice"):
        pass  # no answer: nothing recorded
    mem.record("q", "a", user=None)  # unresolved caller: nothing stored
    assert tickets.seen == []
    mem.record("q2", "a2", user="alice", thread="t2")
    assert [s[1:] for s in tickets.seen] == [("user", "q2", 1, "t2"), ("assistant", "a2", 2, "t2")]


def test_an_async_block_under_the_sync_memory_is_left_out(db, caplog):
    class Async:
        name = "async"

        async def render(self, query, upstream):
            return "never"

    with caplog.at_level(logging.WARNING, logger="pymem"):
        ctx = make(db, blocks=[Async(), "window"]).read("q", user="alice")
    assert "AsyncMemory" in ctx.block("async").error and ctx.messages == [{"role": "user", "content": "q"}]


# --- async --------------------------------------------------------------------------------------


def test_async_memory_runs_async_and_sync_blocks(dsn):
    make_tickets(dsn)
    heard = []

    class AsyncTickets:
        name = "async_tickets"

        async def render(self, query, upstream):
            async with upstream.db.connection() as conn:
                cur = await conn.execute("SELECT count(*) FROM app_tickets WHERE user_id = %s AND open",
                                         (upstream.user,))
                (n,) = await cur.fetchone()
            return f"{n} open tickets; above: {[b.name for b in upstream.blocks]}"

        async def on_message(self, message, user):
            await asyncio.sleep(0)
            heard.append((user, message.role, message.content))

    async def main():
        adb = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn))
        async with AsyncMemory(db=adb, embedder=HashEmbedder(64),
                               blocks=[StaticBlock("pin"), AsyncTickets(), Broken(), "window"]) as mem:
            async with mem.turn("first question", user="alice") as turn:
                turn.answer = "first answer"
            ctx = await mem.read("second", user="alice")
        await adb.close()
        return turn, ctx

    turn, ctx = asyncio.run(main())
    assert turn.context.block("async_tickets").items == ["2 open tickets; above: ['static']"]
    assert ctx.block("broken").error and [m["content"] for m in ctx.messages] == [
        "pin", "2 open tickets; above: ['static']", "first question", "first answer", "second"]
    assert heard == [("alice", "user", "first question"), ("alice", "assistant", "first answer")]


# --- the budget ----------------------------------------------------------------------------------


def size(ctx) -> int:
    return sum(len(m["content"]) for m in ctx.messages)


def test_the_budget_cuts_recall_then_the_oldest_window_messages_and_never_a_pin(db):
    pin = StaticBlock("Always answer in Norwegian.")
    mem = make(db, blocks=[pin, "user_facts", "recall", "window"], window=4, recall_k=3)
    fill(mem, turns=6)
    full = mem.read("the weather", user="alice")
    assert len(full.recalled) == 3 and len(full.window) == 4
    budget = size(full) - 1
    ctx = make(db, blocks=[pin, "user_facts", "recall", "window"], window=4, recall_k=3,
               max_context_chars=budget).read("the weather", user="alice")
    assert size(ctx) <= budget
    lowest = min(full.recalled, key=lambda m: m.score)
    assert ctx.trimmed == {"recall": [lowest.content]}
    # a smaller budget: all of recall goes, then the window from its oldest message
    small = size(full) - len(full.block("recall").text) - len(full.window[0].content)
    ctx = make(db, blocks=[pin, "user_facts", "recall", "window"], window=4, recall_k=3,
               max_context_chars=small).read("the weather", user="alice")
    assert size(ctx) <= small and ctx.recalled == []
    assert ctx.trimmed == {"recall": ctx.trimmed["recall"], "window": [full.window[0].content]}
    assert sorted(ctx.trimmed["recall"]) == sorted(m.content for m in full.recalled)
    assert ctx.messages[0]["content"] == "Always answer in Norwegian." and ctx.user_facts == ["Lives in Bergen"]
    # nothing but the pin and the query fits: still within budget
    tight = len("Always answer in Norwegian.") + len("the weather")
    ctx = make(db, blocks=[pin, "user_facts", "recall", "window"], max_context_chars=tight).read("the weather",
                                                                                                 user="alice")
    assert [m["content"] for m in ctx.messages] == ["Always answer in Norwegian.", "the weather"]
    with pytest.raises(ValidationError, match="max_context_chars"):
        make(db, blocks=[pin], max_context_chars=tight - 1).read("the weather", user="alice")


def test_a_token_budget_counts_with_the_callers_counter(db):
    def words(content: str) -> int:
        return len(content.split())

    mem = make(db, window=6, recall_k=0, max_context_tokens=20, token_counter=words)
    fill(mem, turns=3)
    ctx = mem.read("the weather", user="alice")
    assert sum(words(m["content"]) for m in ctx.messages) <= 20
    assert ctx.trimmed["window"][0] == "question number 0 about the weather"
    with pytest.raises(ValidationError, match="token_counter"):
        make(db, max_context_tokens=10)


# property: never over budget, pins always kept, trimming order as documented


def _message(content: str, score: float, seq: int) -> Message:
    return Message("user", content, seq=seq, created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), score=score)


def _parts(draw) -> list[Part]:
    words = st.text(alphabet="abc ", min_size=1, max_size=12)
    kinds = draw(st.lists(st.sampled_from(["pin", "agent_facts", "user_facts", "summary", "recall", "window",
                                           "custom"]), max_size=8))
    parts = []
    for n, kind in enumerate(kinds):
        name = f"{kind}{n}"
        if kind in ("recall", "window"):
            items = [_message(draw(words), draw(st.integers(0, 20)) / 20, i)
                     for i in range(draw(st.integers(0, 5)))]
            render = (lambda items: [{"role": "system", "content": "H:\n" + "\n".join(m.content for m in items)}]
                      ) if kind == "recall" else (lambda items: [m.as_chat() for m in items])
        else:
            count = 1 if kind in ("pin", "summary", "custom") else draw(st.integers(0, 5))
            items = [draw(words) for _ in range(count)]
            render = lambda items: [{"role": "system", "content": "F:\n" + "\n".join(items)}]  # noqa: E731
        parts.append(Part(name, kind, items, render))
    return parts


def total(parts, query) -> int:
    return len(query) + sum(len(m["content"]) for p in parts for m in p.messages())


@st.composite
def contexts(draw):
    """Parts, a query and a budget near the sizes where cuts happen: between a little under
    what the pins take and a little over the whole context."""
    parts = _parts(draw)
    query = draw(st.text(alphabet="xy", min_size=1, max_size=10))
    pinned = total([p for p in parts if p.kind == "pin"], query)
    return parts, query, draw(st.integers(max(1, pinned - 3), total(parts, query) + 3))


#: docs/python.md "Context blocks and the budget", written out: the test does not read it from the code
DOCUMENTED = ("recall", "window", "custom", "summary", "user_facts", "agent_facts")


@settings(max_examples=500, deadline=None)
@given(contexts())
def test_the_budget_property(case):
    parts, query, budget = case
    before = {p.name: list(p.items) for p in parts}
    pinned = total([p for p in parts if p.kind == "pin"], query)
    if pinned > budget:
        with pytest.raises(ValidationError):
            fit(parts, query, [(budget, len, "max_context_chars")])
        return
    fit(parts, query, [(budget, len, "max_context_chars")])
    assert total(parts, query) <= budget  # never over budget
    for p in parts:
        assert sorted(map(repr, p.items + p.trimmed)) == sorted(map(repr, before[p.name]))  # cut, never changed
        if p.kind == "pin":
            assert p.trimmed == []  # pins always kept
    # trimming order: a kind is cut only once every kind before it in the documented order is empty
    assert TRIM_ORDER == DOCUMENTED
    cut = [DOCUMENTED.index(p.kind) for p in parts if p.trimmed]
    if cut:
        last = max(cut)
        assert all(not p.items for p in parts if p.kind in DOCUMENTED[:last])
    for p in parts:
        if not p.trimmed or not p.items:
            continue
        if p.kind == "recall":  # lowest score first
            assert max(m.score for m in p.trimmed) <= min(m.score for m in p.items)
        elif p.kind == "window":  # oldest first
            assert max(m.seq for m in p.trimmed) < min(m.seq for m in p.items)
        else:  # facts: from the end of the list
            assert before[p.name][:len(p.items)] == p.items
    customs = [p for p in parts if p.kind == "custom"]
    cut_customs = [i for i, p in enumerate(customs) if p.trimmed]
    assert all(not p.items for p in customs[min(cut_customs):]) if cut_customs else True  # last ones first
    # and nothing was cut that did not need to be: one cut fewer was over budget
    cuts = sum(len(p.trimmed) for p in parts)
    if cuts:
        again = [Part(p.name, p.kind, list(before[p.name]), p.render) for p in parts]
        for _ in range(cuts - 1):
            _cut(again)
        assert total(again, query) > budget


def test_a_context_without_the_recall_block_embeds_nothing(db):
    class Counting(HashEmbedder):
        def __init__(self) -> None:
            super().__init__(64)
            self.texts: list[str] = []

        def embed(self, texts):
            self.texts += texts
            return super().embed(texts)

    embedder = Counting()
    mem = make(db, embedder=embedder, blocks=["user_facts", "window"])
    mem.add_message("an old message about the weather in Oslo", user="alice")  # no vector yet
    embedder.texts.clear()
    ctx = mem.read("the weather", user="alice")
    assert embedder.texts == [] and ctx.recalled == [] and ctx.window


def test_a_hidden_built_in_still_decides_what_recall_skips(db):
    said = "my favourite colour is a deep ocean blue"
    mem = make(db, blocks=["recall"], window=0)
    mem.persist(said, user="alice")
    mem.record(said, "noted", user="alice")
    ctx = mem.read("favourite colour", user="alice")
    assert ctx.deduped == 1 and said not in [m.content for m in ctx.recalled] and ctx.user_facts == []
    ctx = make(db, blocks=["recall"], window=0, dedupe=False).read("favourite colour", user="alice")
    assert said in [m.content for m in ctx.recalled]


def test_blocks_of_the_same_name_are_told_apart(db):
    mem = make(db, blocks=[StaticBlock("Today is Monday."), StaticBlock("Be brief."), "window"])
    ctx = mem.read("hi", user="alice")
    assert [b.name for b in ctx.blocks] == ["static", "static#2", "window"]
    assert ctx.block("static#2").items == ["Be brief."]
