"""The options of a `pymem.Memory`, in one place: `MemoryOptions` (frozen,
checked when built) and its part `RecallOptions` (how recall ranks, used by
``Memory.recall`` and by the context read alike).

``Memory(**keywords)`` and ``AsyncMemory(db=..., **keywords)`` take the keywords of
`MemoryOptions.from_keywords`: every field of `MemoryOptions` but ``recall``, whose
fields go flat (``recall_k`` for ``k``, ``min_content_chars``, ``recency_weight``,
``importance_weight``, ``half_life_seconds``, ``min_score``); or a whole ``options=MemoryOptions(...)``, which
the keywords then change. Adding an option means one field here; a test checks every default against the SQL ``DEFAULT`` it stands for
(tests/python/test_options.py): `RecallOptions` against SQL's recall spec builder ``pymem.recall(...)``,
field by field. The SQL checks every value on every call; the checks here are the ones
that must fail when the Memory is built rather than later (types, and the values only sent
after a turn was stored).
"""

from __future__ import annotations

import logging

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .blocks import check_blocks
from .embedders import Embedder
from .errors import ValidationError
from .types import Extractor, Summarizer
from .values import number, text

UserSpec = str | Callable[[Any], "str | None"] | None
log = logging.getLogger("pymem")


class _Unset:
    """The default of ``user=``: the Memory's own ``user_id`` (a sentinel, since None is a value
    a caller may pass); shown as such by help()."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the Memory's user_id>"


UNSET: Any = _Unset()


def _ints(owner: object, names: tuple[str, ...], keyword: dict[str, str] | None = None) -> None:
    """Each option an int between 0 and 10000, the range the SQL's row limits take
    (``pymem._check_limit``): refused when the Memory is built, not at its first call."""
    for name in names:
        value = getattr(owner, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{(keyword or {}).get(name, name)} must be an int, not {value!r}")
        if not 0 <= value <= 10000:
            raise ValidationError(f"{(keyword or {}).get(name, name)} must be between 0 and 10000, not {value}")


@dataclass(frozen=True)
class RecallOptions:
    """How recall ranks a user's past messages: the top ``k`` by ``(1 - rw - iw) * relevance +
    rw * 0.5 ^ (age / half_life_seconds) + iw * importance``, where relevance is
    ``(1 - lexical_weight) * cosine + lexical_weight * lexical`` (lexical: the message's BM25 for
    the query's words over the best one's; a vector query alone ranks by cosine, and without an
    embedder a text query ranks by its words alone; ``lexical_weight`` 0 with an embedder: by cosine,
    the words not read, at the vector's cost), skipping messages shorter than
    ``min_content_chars`` and, when ``min_score`` is set (-1..1), those scoring below it: fewer
    than ``k`` come back when fewer are relevant enough (docs/sql.md "Recall"). With
    ``next_turn_weight`` (0..1, 0: off) the two messages after each of the top ``k`` in its thread
    score at least ``next_turn_weight`` times that one's score (the answer to a recalled question
    often sits there), before the cut at ``k``. When a text query names a time ("in May 2023",
    "last week": `pymem.timeref.named_time`), the messages created then score
    ``time_weight`` (0..1, 0: off) more. The SQL checks the ranges on every call.

    These are the fields of SQL's recall spec (``pymem.recall_spec``) that a Memory configures, named
    and defaulted as its builder ``pymem.recall(...)`` is (a test compares them); the spec's others
    come from ``window=`` (``window_size``) and from each call (``as_of``, ``since``, ``until``,
    ``metadata``, the named time)."""

    k: int = 5
    min_content_chars: int = 10
    recency_weight: float = 0.0
    importance_weight: float = 0.0
    half_life_seconds: float = 3600.0
    min_score: float | None = None
    lexical_weight: float = 0.33
    next_turn_weight: float = 0.8
    time_weight: float = 0.2

    def __post_init__(self) -> None:
        _ints(self, ("k", "min_content_chars"), {"k": "recall_k"})
        if self.min_score is not None:
            number(self.min_score, "min_score")

    def params(self) -> dict[str, Any]:
        """The parameters of ``pymem.recall(...)`` (the spec ``messages_recall`` and ``context_read`` take)
        these options set."""
        return dataclasses.asdict(self)


#: Memory's keyword for each recall option: recall_k -> k, the others by their own name.
RECALL_KEYWORDS = {("recall_k" if f.name == "k" else f.name): f.name for f in dataclasses.fields(RecallOptions)}


@dataclass(frozen=True)
class MemoryOptions:
    """Everything a Memory is configured with (docs/python.md); frozen, checked when built."""

    agent_id: str | None = None
    user_id: UserSpec = None
    project_id: str = ""
    thread: str = "default"
    embedder: Embedder | None = None
    system_prompt: str | None = None
    window: int = 20
    max_facts: int = 50
    recall: RecallOptions = field(default_factory=RecallOptions)
    dedupe: bool = True
    summarizer: Summarizer | None = None
    summarize_every: int = 10
    keep_last: int = 10
    max_summary_chars: int = 2000
    summary_lease_seconds: float = 300.0
    extractor: Extractor | None = None
    #: a reconciling learner (pymem.llm.Learner, e.g. pymem.llm.ChatLearner()): instead of extractor
    learner: Any = None
    #: record() leaves a learning job for a worker (Memory.learn_pending, `pymem worker`) instead of
    #: calling the learner, the extractor and the summarizer inline (pymem.learning)
    deferred_learning: bool = False
    max_learned_facts: int | None = 200
    fact_lexical_weight: float = 0.4
    #: the context's blocks in order (pymem.blocks); None: pymem.blocks.DEFAULT_BLOCKS
    blocks: tuple[Any, ...] | None = None
    max_context_chars: int | None = None
    max_context_tokens: int | None = None
    token_counter: Callable[[str], int] | None = None

    @property
    def embedder_name(self) -> str | None:
        """The name stored with the embedder's vectors (None without one: the runner's Embed step
        then refuses a caller's vector, so a call that has a vector has a name)."""
        return None if self.embedder is None else self.embedder.name

    def __post_init__(self) -> None:
        if self.agent_id is not None:
            text(self.agent_id, "agent_id")
            if self.agent_id.strip() in ("", "*"):
                raise ValidationError(
                    f"agent_id {self.agent_id!r} would name every agent or none: pass a real agent id, or leave it None"
                )
        text(self.project_id, "project_id")
        text(self.thread, "thread")
        if self.user_id is not None and not isinstance(self.user_id, str) and not callable(self.user_id):
            raise ValidationError("user_id must be a string, a callable(ctx) -> str, or None")
        if self.embedder is not None and not isinstance(self.embedder, Embedder):
            raise ValidationError(
                f"embedder must be an embedder (a name, a dimension and embed(texts)), e.g. pymem.HashEmbedder(), "
                f"not {self.embedder!r}")
        if not isinstance(self.recall, RecallOptions):
            raise ValidationError(f"recall must be a RecallOptions, not {type(self.recall).__name__}")
        _ints(self, ("window", "max_facts", "summarize_every", "keep_last", "max_summary_chars"))
        # the SQL checks every limit on every call; these two are only sent when a summary is due,
        # so a bad value would surface after a turn was already stored: refuse it here
        if not 1 <= self.summarize_every <= 10000 or not 1 <= self.max_summary_chars <= 100000:
            raise ValidationError("summarize_every must be in 1..10000 and max_summary_chars in 1..100000")
        m = self.max_learned_facts
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValidationError("max_learned_facts must be a positive int, or None for no cap")
        if not 0 <= number(self.fact_lexical_weight, "fact_lexical_weight") <= 1:
            raise ValidationError("fact_lexical_weight must be between 0 and 1")
        if not isinstance(self.deferred_learning, bool):
            raise ValidationError(f"deferred_learning must be True or False, not {self.deferred_learning!r}")
        if self.deferred_learning and (self.summarize_every, self.keep_last) != (10, 10):
            # the job carries the turn, not this Memory's options: the worker's decide
            logging.getLogger("pymem").warning(
                "deferred_learning=True: this Memory's summarize_every=%d / keep_last=%d are not used; the "
                "worker's Memory folds the summaries with its own (pymem worker --summarize-every N --keep-last N)",
                self.summarize_every, self.keep_last)
        if self.learner is not None:
            if not all(callable(getattr(self.learner, m, None)) for m in ("extract", "reconcile")):
                raise ValidationError("learner must have extract(message) and reconcile(candidates, stored): "
                                      "a pymem.llm.Learner such as pymem.llm.ChatLearner()")
            if self.extractor is not None:
                raise ValidationError("pass extractor= or learner=, not both: the learner extracts too")
        for name in ("summarizer", "extractor", "token_counter"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ValidationError(f"{name} must be callable")
        if self.blocks is not None:
            object.__setattr__(self, "blocks", check_blocks(self.blocks))
        for name in ("max_context_chars", "max_context_tokens"):
            m = getattr(self, name)
            if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
                raise ValidationError(f"{name} must be a positive int, or None for no budget")
        if self.max_context_tokens is not None and self.token_counter is None:
            raise ValidationError("max_context_tokens needs token_counter=(a callable(text) -> number of tokens)")

    @classmethod
    def keywords(cls) -> frozenset[str]:
        """The keyword arguments `from_keywords` (and so ``Memory(...)``) accepts."""
        return frozenset(f.name for f in dataclasses.fields(cls) if f.name != "recall") | RECALL_KEYWORDS.keys()

    @classmethod
    def from_keywords(cls, base: MemoryOptions | None = None, /, **keywords: Any) -> MemoryOptions:
        """``base`` (default: all defaults) with ``keywords`` changed, the recall options given
        flat (``recall_k=3, recency_weight=0.2``). An unknown keyword is a TypeError, as for any
        function."""
        unknown = sorted(keywords.keys() - cls.keywords())
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) for Memory options: {', '.join(unknown)}")
        recall = {RECALL_KEYWORDS[k]: keywords.pop(k) for k in list(keywords) if k in RECALL_KEYWORDS}
        if base is None:
            return cls(**keywords, recall=RecallOptions(**recall))
        if recall:
            keywords["recall"] = dataclasses.replace(base.recall, **recall)
        return dataclasses.replace(base, **keywords) if keywords else base

    def get(self, keyword: str) -> Any:
        """The value of a `keywords` name (``recall_k`` is ``recall.k``)."""
        if keyword in RECALL_KEYWORDS:
            return getattr(self.recall, RECALL_KEYWORDS[keyword])
        if keyword in self.keywords():
            return getattr(self, keyword)
        raise AttributeError(f"no Memory option {keyword!r}")


def resolve_user(o: MemoryOptions, user: Any, ctx: Any, *, quiet: bool = False) -> str | None:
    """The user a call is for: ``user`` if given (not `UNSET`), else ``o.user_id`` (a string, or
    a resolver called with ``ctx``). None when it cannot be resolved: one warning is logged, unless
    ``quiet`` (a caller that raises instead: the warning says what happens to a call that goes on
    without a user; a resolver that raises is then a ValidationError)."""
    if user is UNSET:
        spec = o.user_id
        if callable(spec):
            try:
                user = spec(ctx)
            except Exception as exc:
                if quiet:
                    raise ValidationError(f"this call needs a user, and the user_id resolver raised "
                                          f"{type(exc).__name__}") from exc
                log.warning("the user_id resolver raised %s; this call gets no user memory", type(exc).__name__)
                return None
        else:
            user = spec
    if user is None or (isinstance(user, str) and not user.strip()):
        if not quiet:
            log.warning("no user for this call; it gets global facts only and nothing is stored")
        return None
    if user == "*":  # the SQL wildcard ("every user"): never a caller's identity
        raise ValidationError("'*' is not a user id (it would name every user)")
    return text(user, "user id")


def need_user(o: MemoryOptions, user: Any, ctx: Any, hint: str = "") -> str:
    """`resolve_user` for a call that cannot go on without a user: ValidationError instead of None."""
    resolved = resolve_user(o, user, ctx, quiet=True)
    if resolved is None:
        raise ValidationError(f"this call needs a user: pass user=... or Memory(user_id=...){hint}")
    return resolved
