"""Memory's options (pymem.MemoryOptions, pymem.RecallOptions): one frozen, checked home; their
defaults equal the SQL DEFAULTs they stand for (read from the migrated catalog); what a default
Memory sends is those defaults; and the sync and async classes have the same signatures."""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from typing import Any

import psycopg
import pytest
from pgvector import Vector
from psycopg import sql

import pymem
from pymem import HashEmbedder, MemoryOptions, RecallOptions
from pymem.context import MAX_UNEMBEDDED  # (pymem.context is the module-level function)
from pymem.recall import RECALL_CATCH_UP
from pymem.runner import Callback, Embed, Query

# Memory's keyword arguments before MemoryOptions existed: Memory(**keywords) takes exactly these.
KEYWORDS = {
    "agent_id", "user_id", "project_id", "thread", "embedder", "system_prompt", "window", "max_facts", "recall_k",
    "min_content_chars", "recency_weight", "importance_weight", "half_life_seconds", "dedupe", "summarizer",
    "summarize_every", "keep_last", "max_summary_chars", "summary_lease_seconds", "extractor", "max_learned_facts",
    "min_score",  # added since (issue 13)
    "fact_lexical_weight",  # issue 14
    "lexical_weight",  # issue 14 (recall)
    "next_turn_weight",  # issue 32, item 4 (recall)
    "time_weight",  # issue 32, item 3 (recall)
    "blocks", "max_context_chars", "max_context_tokens", "token_counter",  # issue 19
    "learner",  # issue 16
    "deferred_learning",  # issue 37
}

# ------------------------------------------------------------------- Python default -> SQL DEFAULT
# Every Python default that stands for a SQL DEFAULT, and where: an option of MemoryOptions
# ("recall.k" is RecallOptions.k), a constant the Python layer sends, or a Memory method's default.
OPTIONS: dict[str, list[tuple[str, str]]] = {
    "agent_id": [("context_read", "agent_id")],
    "project_id": [(f, "project_id") for f in (
        "context_read", "messages_recall", "messages_unembedded", "window_read", "facts_newest", "fact_history",
        "facts_search", "fact_add", "fact_supersede", "turn_record", "message_add", "summary_claim", "summary_commit")],
    "thread": [(f, "thread_id") for f in (
        "context_read", "messages_recall", "window_read", "turn_record", "message_add", "summary_claim",
        "summary_commit")],
    # recall's defaults are pymem.recall(...)'s (the builder of the spec context_read and messages_recall take)
    "window": [("recall", "window_size"), ("window_read", "max_messages")],
    "max_facts": [("context_read", "max_facts")],
    "recall.k": [("recall", "k")],
    "recall.min_content_chars": [("recall", "min_content_chars"), ("messages_unembedded", "min_chars")],
    "recall.recency_weight": [("recall", "recency_weight")],
    "recall.importance_weight": [("recall", "importance_weight")],
    "recall.half_life_seconds": [("recall", "half_life_seconds")],
    "recall.min_score": [("recall", "min_score")],
    "recall.lexical_weight": [("recall", "lexical_weight")],
    "recall.next_turn_weight": [("recall", "next_turn_weight")],
    "recall.time_weight": [("recall", "time_weight")],
    "dedupe": [("context_read", "dedupe")],
    "summarize_every": [("summary_claim", "summarize_every")],
    "keep_last": [("turn_record", "keep_last"), ("summary_claim", "keep_last")],
    "max_summary_chars": [("summary_commit", "max_chars")],
    "summary_lease_seconds": [("turn_record", "lease_seconds"), ("summary_claim", "lease_seconds")],
    "max_learned_facts": [("fact_add", "max_learned"), ("turn_record", "max_learned")],
    "fact_lexical_weight": [("facts_search", "lexical_weight")],
    "deferred_learning": [("turn_record", "defer_learning")],
}
# Options with no SQL counterpart (Python-side objects), named so that a new option must be placed.
NOT_SQL = {"user_id", "embedder", "system_prompt", "summarizer", "extractor", "learner", "recall", "blocks", "max_context_chars",
           "max_context_tokens", "token_counter"}
CONSTANTS: dict[str, tuple[Any, list[tuple[str, str]]]] = {
    "pymem.context.MAX_UNEMBEDDED": (MAX_UNEMBEDDED, [("context_read", "max_unembedded")]),
}
METHODS: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("retrieve", "limit"): [("facts_newest", "max_facts")],
    ("retrieve", "k"): [("facts_search", "k")],
    ("history", "limit"): [("fact_history", "max_facts")],
    # a fact write's defaults are pymem.fact_write(...)'s (the builder of the write the writers take)
    ("persist", "confidence"): [("fact_write", "confidence")],
    ("persist", "source"): [("fact_write", "source")],
    ("update", "confidence"): [("fact_write", "confidence")],
    ("update", "source"): [("fact_write", "source")],
    ("record", "importance"): [("turn_record", "user_importance")],
    ("record", "answer_importance"): [("turn_record", "assistant_importance")],
    ("add_message", "role"): [("message_add", "role")],
    ("add_message", "importance"): [("message_add", "importance")],
}
FUNCTIONS = sorted({f for places in [*OPTIONS.values(), *METHODS.values(), *(c[1] for c in CONSTANTS.values())]
                    for f, _ in places})

ARG_DEFAULTS = """
SELECT p.proname, p.oid::regprocedure::text, a.name, format_type(a.type, NULL),
       pg_get_function_arg_default(p.oid, a.n::integer)
FROM pg_proc AS p
JOIN pg_namespace AS ns ON ns.oid = p.pronamespace
CROSS JOIN LATERAL unnest(p.proargnames, coalesce(p.proallargtypes, p.proargtypes::oid[]))
     WITH ORDINALITY AS a(name, type, n)
WHERE ns.nspname = 'pymem' AND p.proname = ANY(%s)"""

_MISSING = object()


def sql_defaults(dsn: str) -> dict[tuple[str, str], Any]:
    """(function, parameter) -> its DEFAULT evaluated as the parameter's type (or _MISSING)."""
    out: dict[tuple[str, str], Any] = {}
    signatures: dict[str, set[str]] = {}
    with psycopg.connect(dsn, autocommit=True) as c:
        for fn, signature, name, type_, default in c.execute(ARG_DEFAULTS, (FUNCTIONS,)).fetchall():
            signatures.setdefault(fn, set()).add(signature)
            if default is None:
                out[(fn, name)] = _MISSING
            elif type_ == "vector":
                out[(fn, name)] = default  # not an option; never evaluated
            else:
                out[(fn, name)] = c.execute(sql.SQL("SELECT ({})::{}").format(sql.SQL(default), sql.SQL(type_))
                                            ).fetchone()[0]
    assert sorted(signatures) == FUNCTIONS, "a function the Python layer calls is missing"
    assert all(len(s) == 1 for s in signatures.values()), signatures
    return out


def option_default(name: str) -> Any:
    owner, _, field = name.rpartition(".")
    cls = RecallOptions if owner == "recall" else MemoryOptions
    return getattr(cls(), field)


def test_every_option_is_placed():
    fields = {f.name for f in dataclasses.fields(MemoryOptions)}
    fields |= {f"recall.{f.name}" for f in dataclasses.fields(RecallOptions)}
    assert fields == OPTIONS.keys() | NOT_SQL


def test_python_defaults_equal_the_sql_defaults(dsn):
    defaults = sql_defaults(dsn)
    expected = [(option, option_default(option), places) for option, places in OPTIONS.items()]
    expected += [(name, value, places) for name, (value, places) in CONSTANTS.items()]
    for (method, param), places in METHODS.items():
        value = inspect.signature(getattr(pymem.Memory, method)).parameters[param].default
        assert inspect.signature(getattr(pymem.AsyncMemory, method)).parameters[param].default == value
        expected.append((f"Memory.{method}({param}=)", value, places))
    drift = [
        f"{name} = {value!r} but pymem.{fn}({param} DEFAULT {defaults.get((fn, param), _MISSING)!r})"
        for name, value, places in expected for fn, param in places
        if defaults.get((fn, param), _MISSING) is _MISSING or defaults[(fn, param)] != value
    ]
    assert not drift, "\n".join(drift)


# ------------------------------------------------------------------ what a default Memory sends

REPLIES: dict[str, list[dict[str, Any]]] = {
    "fact_add": [{"id": 1, "created": True}],
    "fact_supersede": [{"id": 2, "created": True}],
    "message_add": [{"seq": 1}],
    "turn_record": [{"user_seq": 1, "assistant_seq": 2, "learned_ids": [], "claim_token": uuid.uuid4(),
                     "previous_summary": None, "messages": [], "changes": [], "learning_job": None}],
    "summary_commit": [{"committed": True}],
    "context_read": [{"context": {"agent_facts": [], "user_facts": [], "summary": None, "recalled": [],
                                  "window": [], "deduped": 0, "unembedded": []}}],
}


class Sent(pymem.Memory):
    """A Memory whose calls return the queries they would send (the operations are driven
    with canned replies, no database)."""

    def __init__(self, **keywords: Any) -> None:
        super().__init__(db=object(), **keywords)  # type: ignore[arg-type]

    def _run(self, operation: Any, conn: Any = None) -> Any:
        sent: list[Query] = []
        reply: Any = None
        try:
            while True:
                step = operation.send(reply)
                if isinstance(step, Query):
                    sent.append(step)
                    reply = REPLIES.get(step.name, [])
                elif isinstance(step, Embed):
                    reply = [Vector([1.0, 0.0, 0.0])] * len(step.texts)
                else:
                    assert isinstance(step, Callback)
                    reply = step.fn(*step.args)
        except StopIteration:
            return {q.name: q.params for q in sent}


def sent_by(mem: Sent) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for call in (lambda: mem.read("q", user="alice"), lambda: mem.recall("q", user="alice"),
                 lambda: mem.window(user="alice"), lambda: mem.retrieve(id="alice"),
                 lambda: mem.retrieve("q", id="alice"), lambda: mem.history(id="alice"),
                 lambda: mem.persist("x", id="alice"), lambda: mem.update("y", old="x", id="alice"),
                 lambda: mem.record("q", "a", user="alice"), lambda: mem.summarize(user="alice"),
                 lambda: mem.add_message("x", user="alice")):
        out |= call()
    return out


# parameters that are the call's own data, not defaults (and one deliberate difference)
PER_CALL = {"user_id", "scope", "scope_id", "content", "new_content", "old_content", "query_vector", "embedder", "embedding",
            "user_content", "assistant_content", "user_embedding", "assistant_embedding", "id", "learned",
            "claim_token", "summary", "summarize_every", "trace_id", "metadata", "user_metadata", "assistant_metadata",
            "created_at", "query_text",
            "write"}  # a fact write: test_fact_write_mirrors_the_fact_write_builder
DELIBERATE = {("messages_unembedded", "max_messages"): RECALL_CATCH_UP,
              # a direct Memory.recall searches every message (issue 29); SQL's messages_recall keeps
              # its documented default of leaving the window out, as the context does
              ("messages_recall", "window_size"): 0}


# The recall spec's fields Memory sets from elsewhere than RecallOptions: the window (MemoryOptions.window)
# and the arguments of one call (Memory.recall / Memory.read: as_of, since, until, metadata, and the time
# a question names).
RECALL_ELSEWHERE = {"window_size", "as_of", "since", "until", "metadata", "time_from", "time_to"}
RECALL_SPEC = """
SELECT a.attname::text FROM pg_catalog.pg_attribute AS a
 WHERE a.attrelid = 'pymem.recall_spec'::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"""


def test_recall_options_mirror_the_recall_builder(dsn):
    """pymem.recall(...) holds recall's SQL defaults, once: its parameters are recall_spec's fields,
    in order; RecallOptions has a field for each one Memory configures, of the same name and default
    (test_python_defaults_equal_the_sql_defaults), and the others are named in RECALL_ELSEWHERE; the
    queries send every field through pymem.recall(...)."""
    defaults = sql_defaults(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        spec = [r[0] for r in c.execute(RECALL_SPEC).fetchall()]
        builder = c.execute("SELECT proargnames::text[] FROM pg_catalog.pg_proc WHERE oid = 'pymem.recall'::regproc"
                            ).fetchone()[0]
    assert builder == spec
    assert all(defaults[("recall", name)] is not _MISSING for name in spec), "every field has its default"
    fields = [f.name for f in dataclasses.fields(RecallOptions)]
    assert set(fields) | RECALL_ELSEWHERE == set(spec) and not set(fields) & RECALL_ELSEWHERE
    for name in fields:
        assert getattr(RecallOptions(), name) == defaults[("recall", name)], name
    sent = sent_by(Sent(embedder=HashEmbedder(3), summarizer=lambda previous, messages, n: "s"))
    for fn in ("context_read", "messages_recall"):
        assert set(spec) <= set(sent[fn]), fn
        assert not {name for fn_, name in defaults if fn_ == fn} & set(spec), f"{fn} takes a recall knob flat"


FACT_WRITE = """
SELECT a.attname::text FROM pg_catalog.pg_attribute AS a
 WHERE a.attrelid = 'pymem.fact_write'::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"""
# Python's None stands for the SQL default here: a new fact's metadata is {} (an update's None keeps
# the old version's, SQL NULL)
FACT_WRITE_PYTHON = {"metadata": None}


def test_fact_write_mirrors_the_fact_write_builder(dsn):
    """pymem.fact_write(...) holds a fact write's SQL defaults, once: its parameters are the type's
    fields, in order; pymem.facts.FactWrite and its checked form (Values, what the queries send as
    one value) have the same fields in the same order, with the same defaults; the writers take the
    write as one parameter (no write attribute flat) whose DEFAULT is the builder's, and Memory sends
    its defaults through it."""
    from pymem.facts import FactWrite, Values

    defaults = sql_defaults(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        fields = [r[0] for r in c.execute(FACT_WRITE).fetchall()]
        builder = c.execute("SELECT proargnames::text[] FROM pg_catalog.pg_proc WHERE oid = 'pymem.fact_write'::regproc"
                            ).fetchone()[0]
        writers = dict(c.execute(
            "SELECT proname::text, proargnames::text[] FROM pg_catalog.pg_proc WHERE pronamespace = 'pymem'::regnamespace "
            "AND proname IN ('fact_add', 'fact_supersede', 'facts_add_many', 'fact_lookup')").fetchall())
        write_defaults = {fn: c.execute("SELECT pg_get_function_arg_default(%s::regproc, %s)",
                                        (f"pymem.{fn}", names.index("write") + 1)).fetchone()[0]
                          for fn, names in writers.items()}
    assert builder == fields == [f.name for f in dataclasses.fields(FactWrite)] == list(Values._fields)
    assert all(defaults[("fact_write", name)] is not _MISSING for name in fields), "every field has its default"
    for f in dataclasses.fields(FactWrite):
        assert FACT_WRITE_PYTHON.get(f.name, f.default) == f.default, f.name
        if f.name not in FACT_WRITE_PYTHON:
            assert f.default == defaults[("fact_write", f.name)], f.name
    assert defaults[("fact_write", "metadata")] == {}
    assert sorted(writers) == ["fact_add", "fact_lookup", "fact_supersede", "facts_add_many"]
    for fn, names in writers.items():
        assert not set(names) & set(fields), f"{fn} takes a write attribute flat"
        assert write_defaults[fn] == "pymem.fact_write()", fn
    sent = sent_by(Sent(embedder=HashEmbedder(3), summarizer=lambda previous, messages, n: "s"))
    for fn in ("fact_add", "fact_supersede"):
        write = sent[fn]["write"]
        assert isinstance(write, Values) and not set(sent[fn]) & set(fields), fn
        expected = {n: defaults[("fact_write", n)] for n in fields}
        if fn == "fact_supersede":
            expected["metadata"] = None  # an update without metadata keeps the old version's
        got = write._asdict()
        got["metadata"] = None if got["metadata"] is None else got["metadata"].obj
        assert got == expected, fn


def test_a_default_memory_sends_the_sql_defaults(dsn):
    """What a Memory built with no options sends for every parameter the SQL gives a DEFAULT,
    through its public methods with their own defaults (turn_record's summarize_every is NULL
    without a summarizer and is sent only then; summary_claim's is checked by the mapping)."""
    defaults = sql_defaults(dsn)
    sent = sent_by(Sent(embedder=HashEmbedder(3), summarizer=lambda previous, messages, n: "s"))
    assert set(sent) == set(FUNCTIONS) - {"recall", "fact_write"}
    # context_read's and messages_recall's recall knobs go through pymem.recall(...): its DEFAULTs
    defaults |= {(fn, param): value for (builder, param), value in list(defaults.items()) if builder == "recall"
                 for fn in ("context_read", "messages_recall")}
    drift = [
        f"pymem.{fn}: sends {param}={value!r}, DEFAULT {defaults[(fn, param)]!r}"
        for fn, params in sent.items() for param, value in params.items()
        if param not in PER_CALL and defaults.get((fn, param), _MISSING) is not _MISSING
        and value != DELIBERATE.get((fn, param), defaults[(fn, param)])
    ]
    assert not drift, "\n".join(drift)


def test_recall_and_the_context_read_send_the_same_recall_options():
    mem = Sent(embedder=HashEmbedder(3), recall_k=3, min_content_chars=4, recency_weight=0.25,
               importance_weight=0.5, half_life_seconds=60.0, window=7)
    assert mem.options.recall == RecallOptions(3, 4, 0.25, 0.5, 60.0)
    mem = Sent(embedder=HashEmbedder(3), recall_k=3, min_content_chars=4, recency_weight=0.25,
               importance_weight=0.5, half_life_seconds=60.0, window=7, min_score=0.3)
    assert mem.options.recall == RecallOptions(3, 4, 0.25, 0.5, 60.0, 0.3)
    context, recall = mem.read("q", user="alice")["context_read"], mem.recall("q", user="alice")["messages_recall"]
    skipping = mem.recall("q", user="alice", skip_window=True)["messages_recall"]
    for params in (context, recall, skipping):
        assert {k: params[k] for k in mem.options.recall.params()} == dataclasses.asdict(mem.options.recall)
    assert (context["window_size"], skipping["window_size"], recall["window_size"]) == (7, 7, 0)
    assert mem.recall("q", user="alice", k=1)["messages_recall"]["k"] == 1


# ------------------------------------------------------------------------------ the options object


def test_memory_takes_exactly_todays_keywords():
    assert MemoryOptions.keywords() == KEYWORDS
    with pytest.raises(TypeError, match="no_such_option"):
        Sent(no_such_option=1)
    with pytest.raises(TypeError):
        Sent(recall=RecallOptions())  # the recall options are flat keywords, or options=
    params = inspect.signature(pymem.Memory).parameters
    assert [p for p in params if params[p].kind is not inspect.Parameter.VAR_KEYWORD] == ["db", "options"]


def test_options_are_frozen_and_shared():
    base = MemoryOptions(agent_id="bot", window=5, recall=RecallOptions(k=2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.window = 3  # type: ignore[misc]
    mem = Sent(options=base, recall_k=4, project_id="acme")
    assert mem.options == dataclasses.replace(base, project_id="acme", recall=RecallOptions(k=4))
    assert base.recall.k == 2 and Sent(options=base).options is base
    assert (mem.agent_id, mem.recall_k, mem.project_id, mem.embedder) == ("bot", 4, "acme", None)
    with pytest.raises(AttributeError, match="fixed"):
        mem.recall_k = 9
    with pytest.raises(AttributeError):
        mem.no_such_attribute  # noqa: B018
    with pytest.raises(pymem.ValidationError, match="MemoryOptions"):
        Sent(options={"window": 3})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("keywords", "match"),
    [
        ({"agent_id": ""}, "agent_id"),
        ({"agent_id": " * "}, "agent_id"),
        ({"agent_id": 7}, "agent_id"),
        ({"project_id": "a\x00"}, "project_id"),
        ({"thread": None}, "thread"),
        ({"user_id": 42}, "user_id"),
        ({"window": "20"}, "window"),
        ({"max_facts": True}, "max_facts"),
        ({"recall_k": 2.0}, "recall_k"),
        ({"min_content_chars": None}, "min_content_chars"),
        ({"summarize_every": 0}, "summarize_every"),
        ({"max_summary_chars": 100001}, "max_summary_chars"),
        ({"keep_last": "10"}, "keep_last"),
        ({"max_learned_facts": 0}, "max_learned_facts"),
        ({"max_learned_facts": True}, "max_learned_facts"),
        ({"summarizer": "not callable"}, "summarizer"),
        ({"extractor": 3}, "extractor"),
        ({"min_score": "0.5"}, "min_score"),
        # the ranges the SQL checks on every call, refused when the Memory is built (issue 29)
        ({"window": -1}, "window must be between 0 and 10000"),
        ({"max_facts": 10001}, "max_facts must be between 0 and 10000"),
        ({"recall_k": -5}, "recall_k must be between 0 and 10000"),
        ({"keep_last": 20000}, "keep_last"),
        ({"embedder": "hash"}, "embedder must be an embedder"),
        ({"embedder": object()}, "embedder must be an embedder"),
    ],
)
def test_options_are_checked_when_built(keywords, match):
    with pytest.raises(pymem.ValidationError, match=match):
        MemoryOptions.from_keywords(**keywords)
    with pytest.raises(pymem.ValidationError, match=match):
        Sent(**keywords)


# --------------------------------------------------------------- sync and async: one signature

_ASYNC_NAMES = ("AsyncIterator", "AsyncConnection", "AsyncMemoryStore", "AsyncDatabase", "AsyncTurn", "AsyncMemory")


def _normal(annotation: Any) -> Any:
    if isinstance(annotation, str):
        for name in _ASYNC_NAMES:
            annotation = annotation.replace(name, name.removeprefix("Async"))
    return annotation


def _signature(fn: Any, drop: tuple[str, ...] = ()) -> inspect.Signature:
    sig = inspect.signature(fn)
    params = [p.replace(annotation=_normal(p.annotation)) for p in sig.parameters.values() if p.name not in drop]
    return sig.replace(parameters=params, return_annotation=_normal(sig.return_annotation))


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


# The documented differences (docs/python.md, "Configuration", "Keyed stores"):
# - Memory and AsyncMemory both open their own database when not given db= (AsyncMemory on first
#   use); Memory closes it with close() / `with`, AsyncMemory with aclose() / `async with`;
# - AsyncMemoryStore needs db= (an AsyncDatabase: opening one is awaited); MemoryStore opens its own
#   Database when not given one, so only it has close() and `with`;
# - AsyncDatabase is opened by `await AsyncDatabase.open(...)` (Database's arguments); its
#   constructor takes the opened pool; it is an `async with` context manager;
# - Database's maintenance connection (unbounded(), maintain()) serves the sync administration
#   functions (recall_indexes, configure_retention) only.
TWINS = [
    (pymem.Memory, pymem.AsyncMemory, {"close"}, {"aclose"}, {}),
    (pymem.MemoryStore, pymem.AsyncMemoryStore, {"close"}, set(),
     {"__init__": ("db",), "get": ("db",), "get_or_create": ("db",)}),
    (pymem.Database, pymem.AsyncDatabase, {"unbounded", "maintain"}, {"open"}, {}),
]


# Public methods that return an (async) context manager rather than a result.
CONTEXT_MANAGERS = {"turn", "connection", "bound"}


@pytest.mark.parametrize(("sync", "asynchronous", "sync_only", "async_only", "db_differs"), TWINS,
                         ids=[t[0].__name__ for t in TWINS])
def test_sync_and_async_twins_have_the_same_signatures(sync, asynchronous, sync_only, async_only, db_differs):
    assert _public(sync) - sync_only == _public(asynchronous) - async_only
    checked = 0
    for name in sorted(_public(sync) - sync_only) + ["__init__"]:
        s, a = getattr(sync, name), getattr(asynchronous, name)
        if s is a or isinstance(inspect.getattr_static(sync, name), property):
            continue  # one implementation (e.g. MemoryStore.append, Memory.resolve_user)
        drop = db_differs.get(name, ())
        if name == "__init__" and sync is pymem.Database:  # AsyncDatabase.open(...) is Database(...)
            assert _signature(s, ("self",)).replace(return_annotation=None) == \
                _signature(asynchronous.open).replace(return_annotation=None)
        else:
            assert _signature(s, drop) == _signature(a, drop), name
        for fn, cls in ((s, sync), (a, asynchronous)):
            if drop:  # db: optional and a Database on the sync side, required and an AsyncDatabase on the other
                db = inspect.signature(fn).parameters["db"]
                assert (db.default is None) is (cls is sync) and db.kind is inspect.Parameter.KEYWORD_ONLY
        if name != "__init__" and name not in CONTEXT_MANAGERS:
            assert inspect.iscoroutinefunction(a) and not inspect.iscoroutinefunction(s), name
        checked += 1
    assert checked >= 3
    enter, exit_ = ("__aenter__", "__aexit__") if sync is pymem.Database else ("__enter__", "__exit__")
    assert all(hasattr(asynchronous if sync is pymem.Database else sync, n) for n in (enter, exit_))
    if sync is pymem.Memory:
        assert all(inspect.iscoroutinefunction(getattr(asynchronous, n)) for n in ("__aenter__", "__aexit__", "aclose"))


def test_turn_and_async_turn_have_the_same_signatures():
    from pymem.memory import AsyncTurn, Turn

    assert _signature(Turn.__init__) == _signature(AsyncTurn.__init__)
    assert _public(Turn) == _public(AsyncTurn) == {"messages"}


def test_a_fact_write_is_what_persist_and_update_take_beside_the_content():
    """pymem.facts.FactWrite (issue 55): the keywords of a fact write beside its content, subject and
    vector, one frozen value; Memory's persist / update (persist_many: no trace_id) take each with
    FactWrite's default, in both twins; checked() checks it, and gives the SQL parameters by name."""
    from datetime import datetime, timezone

    from pymem.facts import FactWrite

    fields = {f.name: f.default for f in dataclasses.fields(FactWrite)}
    for cls in (pymem.Memory, pymem.AsyncMemory):
        for method, skip in (("persist", set()), ("update", set()), ("persist_many", {"trace_id"})):
            params = inspect.signature(getattr(cls, method)).parameters
            assert {n: params[n].default for n in fields if n not in skip} == {
                n: d for n, d in fields.items() if n not in skip}, (cls.__name__, method)
    with pytest.raises(dataclasses.FrozenInstanceError):
        FactWrite().confidence = 0.5  # type: ignore[misc]
    sent = FactWrite(ttl=60, metadata={"a": 1}).checked()
    assert sent.ttl.total_seconds() == 60 and sent.metadata.obj == {"a": 1} and sent.source == "manual"
    # no metadata given: none on a new fact, the old version's on an update (SQL metadata => NULL)
    assert FactWrite().checked().metadata.obj == {} and FactWrite().checked(keep_metadata=True).metadata is None
    for bad, match in ((FactWrite(metadata=[1]), "metadata"), (FactWrite(ttl=1, expires_at=datetime.now(timezone.utc)),
                                                               "not both"),
                       (FactWrite(created_at=datetime(2020, 1, 1)), "timezone-aware"),
                       (FactWrite(confidence="high"), "confidence")):  # type: ignore[arg-type]
        with pytest.raises(pymem.ValidationError, match=match):
            bad.checked()
