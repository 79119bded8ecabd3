"""The values pymem's calls return and the callables they take: `Fact` and
`FactId` (durable facts), `Message` and `TurnResult` (conversation memory),
`Erasure` (the receipt of a user's erasure), the ``Summarizer`` and ``Extractor``
signatures, and `Query` (a named query and its
parameters, what pymem.calls makes and an operation yields). A leaf: it imports no other pymem module, so
every module may name these types at run time (``pymem.facts`` and ``pymem.conversations``
re-export theirs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias

#: summarizer(previous_summary, messages, max_chars) -> new summary. ``messages`` are dicts
#: with seq, role, content, created_at, oldest first: the span to fold into the summary.
Summarizer = Callable[[str | None, list[dict[str, Any]], int], str]
#: extractor(user_message) -> facts worth keeping about the user (short strings); the first
#: MAX_LEARNED_PER_TURN of them are kept.
Extractor = Callable[[str], list[str]]
#: A vector passed from Python (``embedding=``, a vector ``query``): a list or tuple of floats, a
#: numpy array or a ``pgvector.Vector``, made by the Memory's embedder (checked like its output).
VectorLike: TypeAlias = "Sequence[float] | Any"


@dataclass(frozen=True)
class Fact:
    """One row of ``pymem.facts`` (``expires_at``: when it stops being visible, None: never;
    ``valid_from`` / ``valid_to``: when it holds in the world, None: open on that side;
    ``similarity`` and ``score`` are set by ranked retrieval: cosine similarity, and the fused
    lexical + vector score it was ranked by; ``depth``, the supersede steps from this version to
    the newest one of its history, by ``history(fact_id=)``)."""

    id: int
    content: str
    scope: str
    scope_id: str
    project_id: str = ""
    confidence: float = 1.0
    source: str = "manual"
    trace_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    superseded_by: int | None = None
    superseded_at: datetime | None = None
    expires_at: datetime | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    similarity: float | None = None
    score: float | None = None
    depth: int | None = None

    @property
    def active(self) -> bool:
        return self.superseded_by is None


class FactId(int):
    """What ``persist`` and ``update`` return: the id of the fact now active (an ``int``, usable
    wherever an id is), and whether the call created it. ``created`` is False when the content
    already was an active fact of the subject: ``persist`` added nothing (``pymem.fact_add``'s
    ``created``); ``update`` retired the old fact into it (a merge: no row was added)."""

    created: bool

    def __new__(cls, id: int, created: bool = True) -> FactId:
        self = super().__new__(cls, id)
        self.created = created
        return self

    def __getnewargs__(self) -> tuple[int, bool]:  # type: ignore[override]  # pickles keep created
        return int(self), self.created

    def __repr__(self) -> str:
        return f"FactId({int(self)}, created={self.created})"


@dataclass(frozen=True)
class Message:
    """One stored message (``similarity`` and ``score`` are set by recall; ``metadata`` is what
    it was written with)."""

    role: str
    content: str
    seq: int | None = None
    thread: str | None = None
    created_at: datetime | None = None
    importance: float = 1.0
    similarity: float | None = None
    score: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def as_chat(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class TurnResult:
    """What recording a turn did."""

    user_seq: int
    assistant_seq: int
    #: the facts the turn taught, each once: an extractor's learned facts, and the fact each
    #: applied change of a ``learner=`` left active (an add's fact, an update's or a delete's new
    #: version; ``fact_changes`` says which change made it)
    learned_fact_ids: list[int] = field(default_factory=list)
    summarized: bool = False
    #: what each change of a learner did, in order (pymem.turn_record's ``changes``): dicts with
    #: op, fact_id (updates, deletes), id (the fact now active), applied, reason (when skipped)
    fact_changes: list[dict[str, Any]] = field(default_factory=list)
    #: what failed while the turn was recorded anyway, one line each (the extractor or learner, the
    #: summarizer, storing the summary): empty when learning and summarizing worked, or had
    #: nothing to do. ``learned_fact_ids == []`` with no failure means there was nothing to learn.
    failures: list[str] = field(default_factory=list)
    #: the turn's learning job (``Memory(deferred_learning=True)``): its id in
    #: ``pymem.learning_jobs``, for a worker to learn from later; None when the turn learned inline
    learning_job: int | None = None

    @property
    def learning_pending(self) -> bool:
        """True when the turn's learning waits in the queue for a worker (deferred learning)."""
        return self.learning_job is not None


@dataclass
class LearningReport:
    """What one `pymem.Memory.learn_pending` (or one batch of ``pymem worker``) did with
    the queued learning jobs: ``claimed`` (taken to learn from), of which ``done`` (their facts
    applied, once), ``retried`` (failed; pending again after a backoff), ``dead`` (failed for the
    last time, or a lease that expired too often), ``lost`` (another worker took the job after
    this one's lease expired: nothing applied) and ``released`` (given back untouched, on
    shutdown); ``skipped``: jobs skipped because a cost cap was reached (their turns stay, not
    learned from). ``calls`` and ``tokens``: what the model calls cost. ``failures``: one line per
    failed attempt (the job, the error's type and message)."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    dead: int = 0
    lost: int = 0
    released: int = 0
    skipped: int = 0
    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line for a log: the counts that are not zero and the time."""
        parts = [f"{name} {getattr(self, name)}" for name in ("claimed", "done", "retried", "dead", "lost",
                                                                "released", "skipped", "calls", "tokens")
                 if getattr(self, name) or name in ("claimed", "done")]
        return ", ".join(parts) + f" in {self.seconds:.2f} s"


@dataclass(frozen=True)
class LearningStatus:
    """A project's learning queue (``pymem.learning_status``): jobs ``pending`` (of which
    ``ready`` may be claimed now; the rest wait out a retry's backoff), ``running``, ``dead``
    and ``skipped``; how long the oldest pending job has waited (seconds, None when none is
    pending); ``failures``: jobs that failed, by kind of error; today's (UTC) model ``calls``,
    ``tokens`` and jobs ``skipped_today`` by a cost cap. No content, no user ids."""

    pending: int
    ready: int
    running: int
    dead: int
    skipped: int
    oldest_pending_seconds: float | None
    failures: dict[str, int]
    calls_today: int
    tokens_today: int
    skipped_today: int


@dataclass(frozen=True)
class LearningJob:
    """One job of the learning queue as `pymem.learning.jobs` lists it (SQL
    ``pymem.learning_jobs``): the turn it learns from (``user_id``, ``thread_id``, ``seq`` of the
    user's message), its ``state`` ('pending', 'running', 'dead', 'skipped'), ``attempts`` so far,
    when it may be claimed (``available_at``) or until when it is leased (``leased_until``), and
    its last error (``error_kind``: the exception's class; ``error``: its message)."""

    id: int
    user_id: str
    thread_id: str
    seq: int
    state: str
    attempts: int
    available_at: datetime | None
    leased_until: datetime | None
    error_kind: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime

    def __getitem__(self, name: str) -> Any:
        """``job["state"]``: the fields by name too, for code written when jobs() returned dicts."""
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)


@dataclass(frozen=True)
class Query:
    """Send the named query ``name`` with ``params``; the operation receives the rows as dicts,
    or as ``rows`` makes them: a psycopg row factory (e.g. `pymem.facts.fact_rows`, which
    builds a `Fact` per row without a dict in between). ``query.rows_as(factory)``: the
    same query with that factory."""

    name: str
    params: dict[str, Any]
    rows: Callable[[Any], Any] | None = field(default=None, compare=False)

    def rows_as(self, factory: Callable[[Any], Any]) -> Query:
        return Query(self.name, self.params, factory)


@dataclass(frozen=True)
class Merge:
    """One pair of near-duplicate facts a consolidation found (``Memory.consolidate``, SQL
    ``pymem.fact_duplicates``): ``merged`` (``merged_id``) goes into ``kept`` (``kept_id``),
    the more specific wording, through a supersede (its history kept). ``similarity``: the
    cosine of their vectors (None without an embedder); ``overlap``: the share of the shorter
    one's words the other has. ``decision``: what decided it (``"threshold"``, or the model's
    ``"same"`` / ``"reworded"`` / ``"different"``); ``applied``: merged now (False in a dry run,
    for a pair the model called different, or one a concurrent writer changed first)."""

    kept_id: int
    kept: str
    merged_id: int
    merged: str
    similarity: float | None
    overlap: float
    decision: str = "threshold"
    applied: bool = False


@dataclass(frozen=True)
class UserInfo:
    """One user of a project as ``Memory.users()`` lists it (SQL ``pymem.users_list``): its id,
    how many active facts it has at ``tier="user"`` and how many conversation threads."""

    user_id: str
    facts: int
    threads: int


@dataclass(frozen=True)
class Erasure:
    """The receipt of a user's erasure (``Memory.forget_user``, SQL ``pymem.user_forget``), as
    kept in ``pymem.erasures``, which survives the erasure: ``id`` (per project), when, by which
    login role, how many rows of each kind went (``counts``, e.g. ``{"facts": 3, "messages": 40,
    ...}``), and ``digest``, a sha256 over one line per deleted row (its key and the sha256 of its
    content: docs/sql.md "Erase a user"). Neither holds content or the user's id."""

    id: int
    project_id: str
    erased_at: datetime
    erased_by: str
    counts: dict[str, int]
    digest: str

    @property
    def nothing_stored(self) -> bool:
        """True when nothing was stored for the user (every count 0): an erasure of nothing,
        often a mistyped id. The receipt is kept all the same (``Memory.forget_user`` also
        logs a warning; ``pymem forget-user`` exits 1)."""
        return not any(self.counts.values())
