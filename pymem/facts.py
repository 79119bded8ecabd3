"""Durable facts over ``sql/api/facts*.sql``: the operations behind ``Memory.persist``,
``retrieve``, ``update``, ``forget`` and ``history`` (see `pymem.memory`).

Tiers map to the SQL scopes: ``global`` -> scope ``agent`` under the Memory's ``agent_id``;
``user`` -> scope ``user`` under a user id; ``project`` -> scope ``project`` under the Memory's
``project_id`` (or ``id=``). ``project_id``
(the tenant partition) is fixed per Memory. All rules (idempotence, scoping guards, supersede
chains, caps) live in SQL; this module maps arguments, embeds text and builds `Fact`
objects. Each call is one operation (a generator over the Memory's options, see `pymem.runner`):
the public ones at the end take a Memory method's arguments, and `pymem.memory` makes them
the methods of both twins.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from psycopg.types.json import Jsonb

from .errors import ConflictError, NotFoundError, ValidationError
from .llm import FactChange
from .options import UNSET, MemoryOptions, need_user
from .runner import Callback, Embed, Operation, Query
from .types import Fact, FactId, Merge, VectorLike
from .values import expiry, integer, number, text, timestamp, valid_time
from . import calls

TIERS = {"global": "agent", "agent": "agent", "user": "user", "project": "project"}


@dataclass(frozen=True)
class FactWrite:
    """What a fact write carries beside its content and subject, as one value (issue 55): how sure
    (``confidence``), from where (``source``, ``trace_id``), ``metadata``, when it was learned
    (``created_at``), when it expires (``expires_at`` or ``ttl``) and when it holds in the world
    (``valid_from``, ``valid_to``). It mirrors SQL's ``pymem.fact_write`` field by field, named,
    ordered and defaulted as its builder ``pymem.fact_write(...)`` is (a test compares them).
    ``Memory.persist``, ``persist_many`` and ``update`` build one from their keywords; `checked`
    checks it and gives the value the SQL writers take as ``write``."""

    confidence: float = 1.0
    source: str = "manual"
    trace_id: str | None = None
    metadata: Mapping[str, Any] | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    ttl: float | timedelta | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None

    def checked(self, *, keep_metadata: bool = False) -> Values:
        """The checked values, as SQL's ``pymem.fact_write`` (ValidationError: a value Python can
        tell is wrong; the SQL checks the rest). ``keep_metadata``: an update given no metadata
        keeps the old version's (SQL ``metadata`` NULL)."""
        if self.metadata is not None and not isinstance(self.metadata, Mapping):
            raise ValidationError("metadata must be a mapping (a JSON object)")
        ex, vt = expiry(self.ttl, self.expires_at), valid_time(self.valid_from, self.valid_to)
        metadata = None if self.metadata is None and keep_metadata else Jsonb(dict(self.metadata or {}))
        return Values(number(self.confidence, "confidence"), text(self.source, "source"),
                      text(self.trace_id, "trace_id", allow_none=True), metadata, timestamp(self.created_at),
                      ex.expires_at, ex.ttl, vt.valid_from, vt.valid_to)


class Values(NamedTuple):
    """A `FactWrite` checked: SQL's ``pymem.fact_write``, field for field (``metadata`` None: the
    old version's, on an update). A tuple, which psycopg sends as a row literal: the named queries
    pass it as ``write => %(write)s::pymem.fact_write``."""

    confidence: float
    source: str
    trace_id: str | None
    metadata: Jsonb | None
    created_at: datetime | None
    expires_at: datetime | None
    ttl: timedelta | None
    valid_from: datetime | None
    valid_to: datetime | None


#: what a consolidation's merge writes (a supersede, learned)
_MERGED = FactWrite(confidence=0.6, source="learned", metadata={"consolidated": True})
#: a consolidation compares the newest this many active facts of a subject (pymem.fact_duplicates)
MAX_COMPARED = 500


def _decision(changes: Any, keep_id: int, keep_content: str) -> tuple[str, str]:
    """What a learner's reconcile of the merged fact against the kept one says of the pair: no
    change: "same" (merge into the kept wording); an update of the kept fact: "reworded" (both
    become its content); an add or a delete: "different"."""
    if not isinstance(changes, list) or not all(isinstance(c, FactChange) for c in changes):
        raise ValidationError("the learner's reconcile must return a list of pymem.llm.FactChange")
    if not changes:
        return "same", keep_content
    change = changes[0]
    if change.op == "update" and change.fact_id == keep_id:
        content = text(change.content, "a learner's fact").strip()
        return ("reworded" if content and content != keep_content else "same"), (content or keep_content)
    return "different", keep_content


_FIELDS = tuple(Fact.__dataclass_fields__)


#: what a Fact holds when its row has no such column (metadata: a new {} per Fact)
_ABSENT = {"scope": "", "scope_id": "", "project_id": "", "trace_id": None, "metadata": None, "created_at": None,
           "superseded_by": None, "superseded_at": None, "similarity": None, "score": None, "depth": None}


def _filled(fact: Fact, absent: Mapping[str, Any], fields: Any, values: Any) -> Fact:
    """``fact`` (made by ``object.__new__``) with ``absent``'s defaults, then ``fields`` set to
    ``values``: filled in directly rather than through the frozen dataclass's ``__init__``
    (one ``object.__setattr__`` per field: ~4 us a Fact); the result is the same object."""
    d = fact.__dict__
    d.update(absent)
    d.update(zip(fields, values))
    if d["metadata"] is None:
        d["metadata"] = {}
    return fact


def _fact(row: Mapping[str, Any], scope: str | None = None) -> Fact:
    """A Fact from a dict row (a ranked search's, whose rows are looked at before they become
    Facts); ``scope`` when the row has none."""
    fields = [f for f in _FIELDS if f in row]
    absent = _ABSENT if not scope else {**_ABSENT, "scope": scope}
    return _filled(object.__new__(Fact), absent, fields, [row[f] for f in fields])


def fact_rows(cursor: Any) -> Any:
    """A psycopg row factory: each row a `Fact`, as `_fact` makes it from a dict,
    without the dict (``dict(zip(...))`` alone costs ~1.8 us a row on the 2-core VM; 50 facts
    came 76 us sooner in one run). Columns are matched to fields by name once per result."""
    res = cursor.pgresult  # the names from the result itself: cursor.description makes a Column each
    names = [res.fname(i).decode() for i in range(res.nfields)] if res is not None else []
    present = [(f, names.index(f)) for f in _FIELDS if f in names]
    fields = tuple(f for f, _ in present)
    idx = [i for _, i in present]
    pick = operator.itemgetter(*idx) if len(idx) > 1 else (lambda values: tuple(values[i] for i in idx))
    absent = {f: v for f, v in _ABSENT.items() if f not in fields}
    new = object.__new__

    def make(values: Sequence[Any]) -> Fact:
        return _filled(new(Fact), absent, fields, pick(values))

    return make


class Subject(NamedTuple):
    """Whose facts a call is about: the keywords every fact query takes."""

    scope: str
    scope_id: str
    project_id: str


# -- mapping --------------------------------------------------------------------------
def _subject(o: MemoryOptions, tier: str, id: str | None, *, writing: bool) -> Subject:
    scope = TIERS.get(tier) if isinstance(tier, str) else None
    if scope is None:
        raise ValidationError(f"tier must be one of {', '.join(repr(t) for t in TIERS)}, not {tier!r}")
    if scope == "agent":
        scope_id = id if id is not None else o.agent_id
        if scope_id is None:
            if writing:
                warnings.warn(
                    "a global fact written by a Memory with no agent_id is filed under the empty agent id: "
                    "no agent will ever see it. Pass Memory(agent_id=...) or id=.",
                    UserWarning,
                    stacklevel=4,
                )
            scope_id = ""
    elif scope == "project":  # the Memory's own project, unless id= names another
        scope_id = o.project_id if id is None else id
    else:
        scope_id = "" if id is None else id
    return Subject(scope, text(scope_id, "id"), o.project_id)


def _vector(o: MemoryOptions, content: str, given: Any = None) -> Operation[tuple[Any, str | None]]:
    """The fact's vector and its embedder's name: ``given`` (a caller's precomputed vector,
    checked against the Memory's embedder), else the embedder's, else none."""
    embedder = o.embedder
    if embedder is None and given is None:
        return None, None
    (vec,) = yield Embed([content.strip()], None if given is None else [given])
    return vec, o.embedder_name


def _embed_missing(o: MemoryOptions, subject: Subject, missing: list[dict[str, Any]]) -> Operation[None]:
    """Store the vectors of facts that have none from the Memory's embedder yet (written by SQL,
    learned, by another process, before a restart), embedded in one batch: ``missing`` are
    rows with ``id``, ``content`` and, for a '*' subject, ``scope_id``. The store is the
    source of truth, so a read that finds them fills them in."""
    if not missing:
        return
    embedder = o.embedder
    assert embedder is not None  # the callers embed only with one
    vectors = yield Embed([r["content"] for r in missing])
    for owner in sorted({r.get("scope_id", subject.scope_id) for r in missing}):
        mine = [(r, v) for r, v in zip(missing, vectors) if r.get("scope_id", subject.scope_id) == owner]
        yield calls.fact_embeddings_put(scope=subject.scope, scope_id=owner, project_id=subject.project_id,
                                        embedder=embedder.name, ids=[r["id"] for r, _ in mine],
                                        embeddings=[v for _, v in mine])


# -- operations -----------------------------------------------------------------------
def _persist(o: MemoryOptions, content: str, tier: str, id: str | None, write: FactWrite,
             embedding: Any = None) -> Operation[FactId]:
    s, content = _subject(o, tier, id, writing=True), text(content, "content")
    v = write.checked()
    embedder = o.embedder

    def add(vector: Any, embedder_name: str | None) -> Query:
        return calls.fact_add(scope=s.scope, scope_id=s.scope_id, project_id=s.project_id, content=content, write=v,
                              max_learned=o.max_learned_facts, embedding=vector, embedder=embedder_name)

    if embedding is None and embedder is not None and not getattr(embedder, "cheap", False):
        # a fact that is there with its vector already is one read, and no call of the embedder
        # (a model's call costs more than the read; a cheap embedder's does not); with an
        # expiry or a valid time to give it, fact_add still runs (without a vector)
        rows = yield calls.fact_lookup(scope=s.scope, scope_id=s.scope_id, project_id=s.project_id, content=content,
                                       write=v, max_learned=o.max_learned_facts, embedder=embedder.name)
        if rows and rows[0]["embedded"]:
            if all(x is None for x in (v.ttl, v.expires_at, v.valid_from, v.valid_to)):
                return FactId(rows[0]["id"], False)
            rows = yield add(None, None)
            return FactId(rows[0]["id"], rows[0]["created"])
    rows = yield add(*(yield from _vector(o, content, embedding)))
    return FactId(rows[0]["id"], rows[0]["created"])


def _persist_many(o: MemoryOptions, contents: Any, tier: str, id: str | None, write: FactWrite,
                  embeddings: Any = None) -> Operation[list[FactId]]:
    if isinstance(contents, str) or not isinstance(contents, (list, tuple)):
        raise ValidationError("contents must be a list of strings (persist() takes one)")
    items = [text(c, "contents[%d]" % i) for i, c in enumerate(contents)]
    if embeddings is not None and len(embeddings) != len(items):
        raise ValidationError(f"embeddings has {len(embeddings)} vectors for {len(items)} contents")
    subject = _subject(o, tier, id, writing=True)
    v, n = write.checked(), len(items)
    vectors, embedder = None, None
    if o.embedder is None:
        if embeddings is not None:
            raise ValidationError("embeddings= needs the Memory's embedder (Memory(embedder=...)): it checks them")
    elif n:
        vectors = yield Embed([c.strip() for c in items], None if embeddings is None else list(embeddings))
        embedder = o.embedder.name
    if not n:
        return []
    rows = yield calls.facts_add_many(
        scope=subject.scope, project_id=subject.project_id, scope_ids=[subject.scope_id] * n, contents=items,
        write=v, embeddings=vectors, embedder=embedder)
    return [FactId(r["id"], r["created"]) for r in rows]


def _retrieve(o: MemoryOptions, query, tier, id, limit, k, metadata=None, valid_at=None, as_of=None) -> Operation[list[Fact]]:
    subject = _subject(o, tier, id, writing=False)
    limit, k = integer(limit, "limit"), integer(k, "k")  # k="3" is refused, as Memory(recall_k="5") is
    if valid_at is not None or as_of is not None:  # a point in time (docs/sql.md "Valid time")
        if query is not None or metadata is not None:
            raise ValidationError("retrieve(valid_at=/as_of=) reads the newest facts at that time: "
                                  "pass no query or metadata with it")
        return (yield calls.facts_at(scope=subject.scope, scope_id=subject.scope_id, project_id=subject.project_id,
                                     valid_at=timestamp(valid_at, "valid_at"), as_of=timestamp(as_of, "as_of"),
                                     max_facts=limit).rows_as(fact_rows))
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ValidationError("metadata must be a mapping (a JSON object): the facts returned contain it")
    if query is None:
        if metadata is not None:
            raise ValidationError("retrieve(metadata=...) filters a ranked retrieval: pass a query too")
        return (yield calls.facts_newest(scope=subject.scope, scope_id=subject.scope_id,
                                         project_id=subject.project_id, max_facts=limit).rows_as(fact_rows))
    # a query is its text (ranked by its words and, with an embedder, by meaning too), or its
    # vector (computed by the caller with the Memory's embedder: ranked by meaning alone)
    given = None if isinstance(query, str) else [query]
    if given is None:
        text(query, "query")
    embedder = o.embedder

    def search(vector: Any, embedder_name: str | None) -> Query:
        return calls.facts_search(scope=subject.scope, scope_id=subject.scope_id, project_id=subject.project_id,
                                  k=k, query_vector=vector, embedder=embedder_name,
                                  query_text=query if given is None else None,
                                  metadata=None if metadata is None else Jsonb(dict(metadata)),
                                  lexical_weight=o.fact_lexical_weight)

    if embedder is None and given is not None:
        raise ValidationError("retrieve(query vector) needs Memory(embedder=...): the embedder the vector is from")
    if embedder is None:  # no embedder: ranked by the words alone
        rows = yield search(None, None)
        return [_fact(r, subject.scope) for r in rows]
    (vector,) = yield Embed([query if given is None else "the query vector"], given, query=True)
    rows = yield search(vector, embedder.name)
    missing = [r for r in rows if r["similarity"] is None]
    if missing:
        yield from _embed_missing(o, subject, missing)
        rows = yield search(vector, embedder.name)
    return [_fact(r, subject.scope) for r in rows if r["similarity"] is not None]


def _list(o: MemoryOptions, tier, id, metadata, limit, after) -> Operation[list[Fact]]:
    """A subject's active facts newest first, no query: ``pymem.facts_list`` (metadata
    containment, keyset paging after a fact id)."""
    subject = _subject(o, tier, id, writing=False)
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ValidationError("metadata must be a mapping (a JSON object): the facts listed contain it")
    return (yield calls.facts_list(scope=subject.scope, scope_id=subject.scope_id, project_id=subject.project_id,
                                   metadata=None if metadata is None else Jsonb(dict(metadata)),
                                   max_facts=integer(limit, "limit"),
                                   after=integer(after, "after", allow_none=True)).rows_as(fact_rows))


def _get(o: MemoryOptions, tier, id, fact_id) -> Operation[Fact | None]:
    """One fact of the subject by id (active or superseded), None when it has no such fact."""
    subject = _subject(o, tier, id, writing=False)
    rows = yield calls.fact_read(scope=subject.scope, scope_id=subject.scope_id, project_id=subject.project_id,
                                  id=integer(fact_id, "fact_id")).rows_as(fact_rows)
    return rows[0] if rows else None


def _update(o: MemoryOptions, new: str, old: str | None, fact_id: int | None, tier: str, id: str | None, write: FactWrite,
            embedding: Any = None) -> Operation[FactId]:
    s, new = _subject(o, tier, id, writing=True), text(new, "new content")
    old = text(old, "old content", allow_none=True)
    v = write.checked(keep_metadata=True)  # no metadata given: the old version's, as its expiry
    vector, embedder = yield from _vector(o, new, embedding)
    rows = yield calls.fact_supersede(
        scope=s.scope, scope_id=s.scope_id, project_id=s.project_id, new_content=new, id=fact_id, old_content=old,
        write=v, embedding=vector, embedder=embedder)
    return FactId(rows[0]["id"], rows[0]["created"])


def _consolidate(o: MemoryOptions, tier, id, dry_run, min_similarity, min_overlap, decide, max_pairs) -> Operation[list[Merge]]:
    """Merge the subject's near-duplicate facts (``pymem.fact_duplicates``), each pair through
    a supersede of the merged fact by the kept one's content (a merge: history kept, one active
    fact). ``decide`` (a learner: ``reconcile``) is asked about each pair first: the merged
    fact reconciled against the kept one, where no change means "the same", an update of
    the kept fact a better wording for both ("reworded"), an add or a delete "different"
    (kept apart). A fact merged in this pass is not paired again until the next."""
    if not isinstance(dry_run, bool):
        raise ValidationError("dry_run must be True or False")
    if decide is not None and not callable(getattr(decide, "reconcile", None)):
        raise ValidationError("decide must be a learner with reconcile(candidates, stored), e.g. "
                              "pymem.llm.ChatLearner()")
    subject = _subject(o, tier, id, writing=not dry_run)
    embedder = o.embedder
    if embedder is not None and not dry_run:  # the facts written without a vector (learned, by SQL) get one first
        # (not in a dry run, which writes nothing, the embedder's registration included, and
        # runs for the reader role: there a fact without a stored vector is compared by its words)
        missing = yield calls.facts_unembedded(scope=subject.scope, scope_id=subject.scope_id,
                                               project_id=subject.project_id, embedder=embedder.name,
                                               max_facts=MAX_COMPARED)
        yield from _embed_missing(o, subject, missing)
    pairs = yield calls.fact_duplicates(scope=subject.scope, scope_id=subject.scope_id,
                                        project_id=subject.project_id,
                                        embedder=None if embedder is None else embedder.name,
                                        min_similarity=min_similarity, min_overlap=min_overlap,
                                        max_facts=MAX_COMPARED, max_pairs=max_pairs)
    out: list[Merge] = []
    gone: set[int] = set()
    for p in pairs:
        if p["keep_id"] in gone or p["merge_id"] in gone:
            continue  # one of them was merged by an earlier pair: the next pass compares again
        pair = (p["keep_id"], p["keep_content"], p["merge_id"], p["merge_content"], p["similarity"], p["overlap"])
        decision, content = "threshold", p["keep_content"]
        if decide is not None:
            changes = yield Callback(decide.reconcile, ([p["merge_content"]],
                                                        [{"id": p["keep_id"], "content": p["keep_content"]}]),
                                     "the learner")
            decision, content = _decision(changes, p["keep_id"], p["keep_content"])
        if dry_run or decision == "different":
            out.append(Merge(*pair, decision=decision))
            continue
        try:
            if content != p["keep_content"]:  # reworded: the kept fact first, then the merged one into it
                yield from _update(o, content, None, p["keep_id"], tier, id, _MERGED)
                gone.add(p["keep_id"])
            yield from _update(o, content, None, p["merge_id"], tier, id, _MERGED)
            gone.add(p["merge_id"])
            out.append(Merge(*pair, decision=decision, applied=True))
        except (ConflictError, NotFoundError):  # a concurrent writer changed one of them first
            out.append(Merge(*pair, decision=decision))
    return out


def _forget(o: MemoryOptions, tier, id, fact_id, content) -> Operation[int]:
    subject = _subject(o, tier, id, writing=False)
    if fact_id is None and content is None:
        rows = yield calls.facts_forget(scope=subject.scope, scope_id=subject.scope_id,
                                        project_id=subject.project_id)
    else:
        rows = yield calls.fact_forget(scope=subject.scope, scope_id=subject.scope_id,
                                       project_id=subject.project_id,
                                       id=fact_id, content=text(content, "content", allow_none=True))
    return rows[0]["deleted"]


def _history(o: MemoryOptions, tier, id, fact_id, limit) -> Operation[list[Fact]]:
    subject = _subject(o, tier, id, writing=False)
    if fact_id is None:
        return (yield calls.fact_history(scope=subject.scope, scope_id=subject.scope_id,
                                         project_id=subject.project_id, max_facts=limit).rows_as(fact_rows))
    return (yield calls.fact_chain(scope=subject.scope, scope_id=subject.scope_id, project_id=subject.project_id,
                                   id=fact_id).rows_as(fact_rows))


# -- the operations of Memory's fact calls (pymem.memory.OPERATIONS): a caller's arguments ------
def subject_id(o: MemoryOptions, tier: str, id: str | None, user: Any, ctx: Any) -> str | None:
    """The ``id=`` a fact call sends. At ``tier="user"`` it is the call's user: ``user=``, or
    ``id=`` (kept from before ``user=`` existed), or ``Memory(user_id=...)`` for ``ctx``. Other
    tiers are named by ``id=`` (or the Memory's agent_id / project_id) and take no user."""
    if not isinstance(tier, str) or tier not in TIERS:  # before user=, which a mistyped tier would blame
        raise ValidationError(f"tier must be one of {', '.join(repr(t) for t in TIERS)}, not {tier!r}")
    if tier != "user":
        if user is not UNSET:
            raise ValidationError(f"user= names the user of tier=\"user\" facts; a tier={tier!r} fact has none")
        return id
    if id is not None:
        if user is not UNSET and user != id:
            raise ValidationError(f"user={user!r} and id={id!r} name two different users: pass one of them")
        return id
    return need_user(o, user, ctx, "; a fact for everyone using the agent is tier=\"global\"")


def persist(o: MemoryOptions, content: str, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None,
            id: str | None = None, confidence: float = 1.0, source: str = "manual", trace_id: str | None = None,
            metadata: Mapping[str, Any] | None = None, embedding: VectorLike | None = None,
            created_at: datetime | None = None, ttl: float | timedelta | None = None,
            expires_at: datetime | None = None, valid_from: datetime | None = None,
            valid_to: datetime | None = None) -> Operation[FactId]:
    """Store a fact (idempotent: the same content returns the same id). Returns its id, a
    `FactId` whose ``created`` is False when the fact was already there.
    ``embedding``: the content's vector, computed by the caller with the Memory's embedder
    (it is checked, and the embedder is not called). ``created_at``: when the fact was
    learned, to import facts with their real times (timezone-aware, not in the future;
    default now). ``ttl`` (seconds, or a timedelta) or ``expires_at`` (timezone-aware): the
    fact expires then, and is invisible to every read from that moment (docs/sql.md "Expire
    and purge"); the same fact persisted again with a ttl gets the new expiry, without one
    it keeps its own. ``valid_from`` / ``valid_to`` (timezone-aware; None: open on that side):
    when the fact holds in the world; reads show it only while it holds (``retrieve(valid_at=)``
    reads another time). The same fact persisted again with another valid time is restated: a
    new version, the old one kept in its history (docs/sql.md "Valid time")."""
    write = FactWrite(confidence=confidence, source=source, trace_id=trace_id, metadata=metadata,
                      created_at=created_at, ttl=ttl, expires_at=expires_at, valid_from=valid_from, valid_to=valid_to)
    return (yield from _persist(o, content, tier, subject_id(o, tier, id, user, ctx), write, embedding))


def persist_many(o: MemoryOptions, contents: Sequence[str], *, tier: str = "user", user: str | None = UNSET,
                 ctx: Any = None, id: str | None = None, confidence: float = 1.0, source: str = "manual",
                 metadata: Mapping[str, Any] | None = None, embeddings: Sequence[VectorLike] | None = None,
                 created_at: datetime | None = None, ttl: float | timedelta | None = None,
                 expires_at: datetime | None = None, valid_from: datetime | None = None,
                 valid_to: datetime | None = None) -> Operation[list[FactId]]:
    """Store many facts of one subject in one call (bulk ingest: one round trip, one batch of
    embeddings). Each is stored as persist() would store it, all or nothing: an invalid one
    refuses the whole call and nothing is written. Returns their ids in order (a repeat, or a
    fact already there, has ``created`` False). Learned facts go through persist().
    ``ttl`` / ``expires_at``: the expiry of every one of them, as in persist();
    ``valid_from`` / ``valid_to``: the valid time of every one of them, as in persist()."""
    write = FactWrite(confidence=confidence, source=source, metadata=metadata, created_at=created_at, ttl=ttl,
                      expires_at=expires_at, valid_from=valid_from, valid_to=valid_to)
    return (yield from _persist_many(o, contents, tier, subject_id(o, tier, id, user, ctx), write, embeddings))


def retrieve(o: MemoryOptions, query: str | VectorLike | None = None, *, tier: str = "user",
             user: str | None = UNSET, ctx: Any = None, id: str | None = None, limit: int = 50, k: int = 5,
             metadata: Mapping[str, Any] | None = None, valid_at: datetime | None = None,
             as_of: datetime | None = None) -> Operation[list[Fact]]:
    """Active facts newest first (``limit``), or the top ``k`` for ``query``: a text (ranked by
    its words and, with an embedder, by meaning: docs/sql.md "Facts"), or its vector from the
    Memory's embedder (by meaning alone). ``metadata``: only facts whose metadata contains
    this mapping. Only facts that hold now are shown; ``valid_at`` (what held then, as
    believed now), ``as_of`` (what was believed then) or both read the newest ``limit`` facts
    of another time instead (pymem.facts_at; no query then)."""
    return (yield from _retrieve(o, query, tier, subject_id(o, tier, id, user, ctx), limit, k, metadata, valid_at,
                                 as_of))


def update(o: MemoryOptions, new: str, *, old: str | None = None, fact_id: int | None = None, tier: str = "user",
           user: str | None = UNSET, ctx: Any = None, id: str | None = None, confidence: float = 1.0,
           source: str = "manual", trace_id: str | None = None, metadata: Mapping[str, Any] | None = None,
           embedding: VectorLike | None = None, created_at: datetime | None = None,
           ttl: float | timedelta | None = None, expires_at: datetime | None = None,
           valid_from: datetime | None = None, valid_to: datetime | None = None) -> Operation[FactId]:
    """Retire the active fact named by ``old`` content or ``fact_id`` in favour of ``new``.

    Returns the id of the fact now active (a `FactId`, an ``int``): a new fact, or,
    when ``new`` already was an active fact of the subject, that fact (``created`` False:
    the old fact is merged into it, which stays as it was). Raises ConflictError (PM201)
    when the old fact was already superseded, ValidationError when ``new`` equals it.
    ``embedding``: ``new``'s vector from the Memory's embedder (the embedder is not called).
    ``created_at``: when ``new`` was learned (not before the old fact; default now).
    ``ttl`` / ``expires_at``: the new version's expiry (default: the old version's);
    ``metadata``: the new version's (default: the old version's).
    ``valid_from`` / ``valid_to``: when ``new`` holds in the world; a ``valid_from`` says the
    world changed then (the old fact still held before it: ``retrieve(valid_at=)``), without
    one the update is a correction. ``new`` equal to the old content with another valid time
    restates the fact."""
    write = FactWrite(confidence=confidence, source=source, trace_id=trace_id, metadata=metadata,
                      created_at=created_at, ttl=ttl, expires_at=expires_at, valid_from=valid_from, valid_to=valid_to)
    return (yield from _update(o, new, old, fact_id, tier, subject_id(o, tier, id, user, ctx), write, embedding))


def forget(o: MemoryOptions, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
           fact_id: int | None = None, content: str | None = None) -> Operation[int]:
    """Delete a subject's facts (or one fact and its history); returns how many rows went."""
    return (yield from _forget(o, tier, subject_id(o, tier, id, user, ctx), fact_id, content))


def consolidate(o: MemoryOptions, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None,
                id: str | None = None, dry_run: bool = False, min_similarity: float | None = 0.9,
                min_overlap: float | None = 0.8, decide: Any = None, max_pairs: int = 100) -> Operation[list[Merge]]:
    """Merge the subject's near-duplicate facts ("Likes tea" into "Prefers tea over coffee"):
    pairs whose vectors' cosine is at least ``min_similarity`` (with an embedder) or that share
    at least ``min_overlap`` of the shorter one's words, never one that negates and one that
    does not; each merged into the more specific wording through a supersede, its history kept.
    ``dry_run``: list the pairs, change nothing (no vector is stored: a fact without one of
    the embedder's is compared by its words; the reader role may dry-run). ``decide``: a learner (e.g.
    ``pymem.llm.ChatLearner()``) asked about each pair first, which may keep them apart or
    reword them. Returns one `pymem.Merge` per pair (docs/python.md "Consolidation")."""
    return (yield from _consolidate(o, tier, subject_id(o, tier, id, user, ctx), dry_run, min_similarity,
                                    min_overlap, decide, max_pairs))


def facts(o: MemoryOptions, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
          metadata: Mapping[str, Any] | None = None, limit: int = 50,
          after: int | None = None) -> Operation[list[Fact]]:
    """List the subject's active facts, newest first, with no query (SQL ``pymem.facts_list``):
    at most ``limit``; ``metadata``: only facts whose metadata contains this mapping;
    ``after``: the id of the last fact of the previous page (keyset paging: a page never
    repeats or skips a fact when others are added meanwhile). An empty page is the end."""
    return (yield from _list(o, tier, subject_id(o, tier, id, user, ctx), metadata, limit, after))


def get_fact(o: MemoryOptions, fact_id: int, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None,
             id: str | None = None) -> Operation[Fact | None]:
    """The subject's fact ``fact_id``, active or superseded (``superseded_by`` says which); None
    when the subject has no such fact (another user's fact is None too: SQL ``pymem.fact_read``)."""
    return (yield from _get(o, tier, subject_id(o, tier, id, user, ctx), fact_id))


def history(o: MemoryOptions, *, tier: str = "user", user: str | None = UNSET, ctx: Any = None, id: str | None = None,
            fact_id: int | None = None, limit: int = 1000) -> Operation[list[Fact]]:
    """Every version, newest first; with ``fact_id``, that fact's history: every version merged
    into the same newest one, each before its successor (``Fact.depth``: steps to the newest)."""
    return (yield from _history(o, tier, subject_id(o, tier, id, user, ctx), fact_id, limit))
