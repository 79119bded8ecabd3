"""OpenTelemetry spans (pymem.tracing): names, nesting and attributes, recorded by the SDK's
in-memory exporter over a real database; no user id or content on any span unless
pymem.tracing.trace_content() turned it on; without opentelemetry-api, nothing is wrapped."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pymem
from pymem import tracing

USER = "alice.secret@example.com"
SAID = "my cat Biscuit is allergic to pollen"
FACT = "lives in Trondheim near the fjord"

_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider():
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        current = trace.get_tracer_provider()
    current.add_span_processor(SimpleSpanProcessor(_exporter))
    yield


@pytest.fixture
def spans():
    _exporter.clear()
    tracing.trace_content(False)
    yield _exporter
    tracing.trace_content(False)


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as d:
        yield d


def memory(db, **kw):
    return pymem.Memory(db=db, agent_id="support-bot", project_id="acme", embedder=pymem.HashEmbedder(), **kw)


def by_name(finished, name):
    return [s for s in finished if s.name == name]


def children(finished, parent):
    return [s for s in finished if s.parent is not None and s.parent.span_id == parent.context.span_id]


def everything_said(finished) -> str:
    """Every attribute value and event of every span, as one text."""
    parts = []
    for s in finished:
        parts.append(s.name)
        parts += [f"{k}={v!r}" for k, v in (s.attributes or {}).items()]
        for e in s.events:
            parts.append(e.name)
            parts += [f"{k}={v!r}" for k, v in (e.attributes or {}).items()]
        parts.append(f"status={s.status.description!r}")
    return "\n".join(parts)


def test_a_turn_traced_without_user_or_content(db, spans):
    mem = memory(db, window=2)
    mem.persist(FACT, user=USER)
    mem.persist(FACT, user=USER)  # the same fact again: deduplicated
    mem.record(SAID, "Noted: Biscuit and pollen.", user=USER)
    mem.record("thanks", "you are welcome", user=USER)  # the window: SAID is recalled from before it
    mem.context("what is my cat allergic to?", user=USER)
    mem.recall("cat allergy", user=USER, k=3)
    mem.retrieve("Trondheim", user=USER)
    mem.forget(user=USER, content=FACT)
    done = spans.get_finished_spans()

    persists = by_name(done, "memory.persist")
    assert [p.attributes["pymem.fact.created"] for p in persists] == [True, False]
    assert [p.attributes["pymem.deduped"] for p in persists] == [0, 1]
    for p in persists:
        assert p.attributes["pymem.project"] == "acme" and p.attributes["pymem.agent"] == "support-bot"
        sql = [c for c in children(done, p) if c.name.startswith("pymem.sql ")]
        assert sql, "each SQL statement is a child span"
        assert p.attributes["pymem.sql.queries"] == len(sql)
        assert p.attributes["pymem.sql.ms"] >= 0

    record = by_name(done, "memory.record")[0]
    assert record.attributes["pymem.recorded"] is True
    assert "pymem.sql turn_record" in {c.name for c in children(done, record)}
    assert record.attributes["pymem.embed.texts"] == 2  # the two messages' vectors
    assert len([c for c in children(done, record) if c.name == "pymem.embed"]) == 1

    # context() is read() plus its messages: memory.read nests under memory.context, SQL under it
    (ctx,) = by_name(done, "memory.context")
    (read,) = children(done, ctx)
    assert read.name == "memory.read"
    assert "pymem.sql context_read" in {c.name for c in children(done, read)}
    for span in (ctx, read):
        assert span.attributes["pymem.context.user_facts"] == 1
        assert span.attributes["pymem.context.window"] == 2
        assert span.attributes["pymem.context.agent_facts"] == 0
        assert span.attributes["pymem.context.summary"] == 0
        assert span.attributes["pymem.context.deduped"] >= 0
    recalled = read.attributes["pymem.context.recalled"]
    assert recalled >= 1
    assert len(read.attributes.get("pymem.recall.scores", ())) == recalled
    assert ctx.attributes["pymem.sql.queries"] == read.attributes["pymem.sql.queries"] >= 1
    assert ctx.attributes["pymem.embed.texts"] == read.attributes["pymem.embed.texts"] == 1

    (recall,) = by_name(done, "memory.recall")
    scores = list(recall.attributes["pymem.recall.scores"])
    assert recall.attributes["pymem.recalled"] == len(scores) >= 1
    assert scores == sorted(scores, reverse=True)
    (retrieve,) = by_name(done, "memory.retrieve")
    assert retrieve.attributes["pymem.facts"] == 1 and len(retrieve.attributes["pymem.retrieve.scores"]) == 1
    (forget,) = by_name(done, "memory.forget")
    assert forget.attributes["pymem.deleted"] == 1

    said = everything_said(done)
    for secret in (USER, "alice", SAID, "Biscuit", FACT, "Trondheim", "allergic", "cat allergy"):
        assert secret not in said, secret


def test_content_only_when_asked(db, spans):
    tracing.trace_content(True)
    mem = memory(db, window=2)
    mem.record(SAID, "ok", user=USER)
    mem.record("thanks", "welcome", user=USER)
    mem.recall("Biscuit", user=USER)
    done = spans.get_finished_spans()
    record = by_name(done, "memory.record")[0]
    assert record.attributes["pymem.user"] == USER and record.attributes["pymem.query"] == SAID
    (recall,) = by_name(done, "memory.recall")
    assert SAID in recall.attributes["pymem.recall.contents"]


def test_turns_nest_under_the_callers_span(db, spans):
    mem = memory(db, user_id=lambda ctx: ctx["user"])
    tracer = trace.get_tracer("the-agent")
    with tracer.start_as_current_span("agent.run") as run:
        with mem.turn("hello there", ctx={"user": USER}) as t:
            t.answer = "hi"
    done = spans.get_finished_spans()
    names = [s.name for s in children(done, run)]
    assert names == ["memory.context", "memory.record"]
    (rec,) = by_name(done, "memory.record")
    assert rec.attributes["pymem.recorded"] is True
    assert USER not in everything_said(done)


def test_async_memory_and_stores(dsn, spans):
    async def go():
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=2))
        try:
            mem = pymem.AsyncMemory(db=db, agent_id="bot", embedder=pymem.HashEmbedder())
            await mem.persist(FACT, user=USER)
            await mem.context("where do I live?", user=USER)
            store = await pymem.AsyncMemoryStore.get_or_create(f"notes-{USER}", db=db)
            await store.write_text("people/alice.md", SAID)
            assert await store.read_text("people/alice.md") == SAID
        finally:
            await db.close()

    asyncio.run(go())
    done = spans.get_finished_spans()
    (ctx,) = by_name(done, "memory.context")
    assert [c.name for c in children(done, ctx)] == ["memory.read"]
    for name in ("store.get_or_create", "store.write_text", "store.read_text"):
        (span,) = by_name(done, name)
        assert span.attributes["pymem.project"] == ""
        assert any(c.name.startswith("pymem.sql store_") for c in children(done, span)), name
    said = everything_said(done)
    for secret in (USER, SAID, FACT, "people/alice.md"):
        assert secret not in said, secret


def test_every_public_call_is_traced():
    """A public method added later must get a span (or be listed as running no operation)."""
    for cls, spans_, untraced in ((pymem.Memory, pymem.memory.SPANS, pymem.memory.UNTRACED),
                                  (pymem.AsyncMemory, pymem.memory.SPANS, pymem.memory.UNTRACED),
                                  (pymem.MemoryStore, tracing.STORE_SPANS, tracing.STORE_UNTRACED),
                                  (pymem.AsyncMemoryStore, tracing.STORE_SPANS, tracing.STORE_UNTRACED)):
        public = {n for n, v in inspect.getmembers(cls) if not n.startswith("_") and callable(v)}
        assert public - set(spans_) - untraced == set(), cls
        for name in public & set(spans_):
            assert hasattr(inspect.unwrap(getattr(cls, name)), "__code__")
            assert getattr(cls, name) is not inspect.unwrap(getattr(cls, name)), (cls, name)


def test_without_opentelemetry_nothing_is_wrapped():
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "import pymem, pymem.tracing as t\n"
            "assert not t.AVAILABLE\n"
            "assert not hasattr(pymem.Memory.persist, '__wrapped__')\n"
            "assert not hasattr(pymem.MemoryStore.read_text, '__wrapped__')\n"
            "assert t.step(object()) is t._NULL\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


class _Broken:
    name = "broken"

    def render(self, query, upstream):
        raise RuntimeError(f"no tickets for {upstream.user}")


def test_each_context_block_is_on_the_read_span(db, spans):
    """Issue 19: which block put what into the prompt; a block's text and a failure's message
    (which may quote content) only with trace_content on."""
    mem = memory(db, blocks=[pymem.StaticBlock("Be kind."), _Broken(), "window"], max_context_chars=34)
    mem.record("first question here", "first answer here", user=USER)
    for content in (False, True):
        tracing.trace_content(content)
        spans.clear()
        mem.read("and now?", user=USER)
        done = spans.get_finished_spans()
        (read,) = by_name(done, "memory.read")
        a = read.attributes
        assert list(a["pymem.context.blocks"]) == ["static", "broken", "window"]
        assert a["pymem.context.block.static.items"] == 1 and a["pymem.context.block.static.chars"] == 8
        assert a["pymem.context.block.window.items"] == 1 and a["pymem.context.block.window.trimmed"] == 1
        assert a["pymem.context.block.broken.error"] == (f"RuntimeError: no tickets for {USER}" if content
                                                         else "RuntimeError")
        assert ("pymem.context.block.window.text" in a) is content
        assert len([c for c in children(done, read) if c.name == "pymem.callback"]) == 2  # the two renders
        if not content:
            assert USER not in everything_said([read]) and "first answer here" not in everything_said([read])


class _LeakyEmbedder(pymem.HashEmbedder):
    """An embedder whose failure message quotes what it was given (as real ones often do)."""

    def embed(self, texts):
        raise RuntimeError(f"cannot embed {texts[0]!r} for user alice@example.com")


def test_a_failure_is_on_its_span_by_type_not_by_message(db, spans):
    """An exception's message often quotes content or a user id: by default a failed call's span
    and its step's span say only that it failed and the error's type (no message, no exception
    event); with trace_content, the message and the exception event too."""
    mem = pymem.Memory(db=db, agent_id="support-bot", project_id="acme", embedder=_LeakyEmbedder())
    with pytest.raises(Exception):
        mem.persist("The secret recipe is in the blue box", user="alice@example.com")
    finished = spans.get_finished_spans()
    said = everything_said(finished)
    assert "secret recipe" not in said and "alice@example.com" not in said, said
    failed = [sp for sp in finished if sp.status.status_code.name == "ERROR"]
    assert {sp.name for sp in failed} >= {"memory.persist", "pymem.embed"}
    assert all(sp.attributes.get("error.type") for sp in failed) and not any(sp.events for sp in failed)
    spans.clear()
    tracing.trace_content(True)
    with pytest.raises(Exception):
        mem.persist("The secret recipe is in the blue box", user="alice@example.com")
    assert "secret recipe" in everything_said(spans.get_finished_spans())
