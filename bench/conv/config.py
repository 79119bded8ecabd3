"""The conversations benchmark's fixed settings: the probe user, the agent, Memory's defaults
(what ``Memory.context()`` asks ``context_read`` for), the measurements every run must have,
and the parameters of the calls it times."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pgvector import Vector

from bench import facts as bench_facts
from pymem import MemoryOptions
from pymem.context import MAX_UNEMBEDDED

PROJECTS = bench_facts.PROJECTS
PROBE_PROJECT = "acme"
PROBE_ID = "probe"
PROBE_FACTS = bench_facts.PROBE_ACTIVE
AGENT_ID = "bench-agent"
AGENT_FACTS = 12
DIM = 384
TIME_SPAN = timedelta(days=365)
POOL_SENTENCES = 4000
TURNS_PER_THREAD = 10  # measured turn writes start a new thread this often

# Memory's defaults: what Memory.context() asks context_read for
DEFAULTS = MemoryOptions()
WINDOW = DEFAULTS.window
MAX_FACTS = DEFAULTS.max_facts
RECALL_K = DEFAULTS.recall.k
HEAVY_WARMUP = 5  # warm-ups of the heaviest user's measurements (each reads its whole history)
MIN_CHARS = DEFAULTS.recall.min_content_chars
WEIGHTED = {"recency_weight": 0.2, "importance_weight": 0.1, "half_life_seconds": 7 * 86400.0}

REQUIRED = (
    "floor",
    "context_sql",
    "context_memory",
    "context_sql_light_user",
    "context_memory_light_user",
    "turn_sql",
    "turn_memory",
    "turn_embed",
    "recall_sql",
    "recall_sql_weighted",
)


@dataclass(frozen=True)
class User:
    project_id: str
    user_id: str
    messages: int = 0

    def where(self, thread: str = "default") -> dict[str, str]:
        return {"project_id": self.project_id, "user_id": self.user_id, "thread_id": thread}


# recall's per-call filters, unset (what Memory sends when the call names none)
NO_FILTERS = {"as_of": None, "since": None, "until": None, "metadata": None, "time_from": None, "time_to": None,
              "valid_at": None}


def context_params(user: User, query_vec: Vector | None, embedder: str, query_text: str | None = None,
                   **over: Any) -> dict[str, Any]:
    """The parameters a default Memory's context read sends (pymem.context, MemoryOptions()):
    the query's vector and its text (hybrid recall)."""
    return {
        "user_id": user.user_id, "agent_id": AGENT_ID, "project_id": user.project_id, "thread_id": "default",
        "query_vector": query_vec, "embedder": embedder if query_vec is not None else None, "max_facts": MAX_FACTS,
        "window_size": WINDOW, **DEFAULTS.recall.params(), "dedupe": DEFAULTS.dedupe,
        "max_unembedded": MAX_UNEMBEDDED, "query_text": query_text, **NO_FILTERS,
    } | over


def recall_params(user: User, query_vec: Vector, embedder: str, query_text: str | None = None,
                  **over: Any) -> dict[str, Any]:
    return {
        **user.where(), "query_vector": query_vec, "embedder": embedder, **DEFAULTS.recall.params(), "window_size": WINDOW,
        "query_text": query_text, **NO_FILTERS,
    } | over

