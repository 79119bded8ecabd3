"""Listing what one project holds, over ``sql/api/browse.sql`` (and the stores' read functions):
what the memory page of ``pymem serve`` (`pymem.web`) shows besides the Memory API's own
reads (and a thread's messages from a seq on: the turn that taught a learned fact). Each listing is one named query; rows come back as dicts. There is no listing of
projects: row-level security confines every call to the project it names (docs/security.md).

`search_facts` and `recall_messages` rank as ``Memory.retrieve`` and ``Memory.recall``
do (``facts_search`` and ``messages_recall`` with the query's vector and its text) but never
write: Memory first embeds and stores the vectors that rows lack (its catch-up), these leave such
rows as they are and match them by their words alone, returned apart.
"""

from __future__ import annotations

from typing import Any

from .database import Database
from .conversations import Where
from .recall import Filters, recall_query
from .embedders import Embedder
from .options import RecallOptions
from .runner import Embed, Operation, Query, fetch, run
from .values import text
from . import calls

Rows = list[dict[str, Any]]

#: The most rows without a vector a search looks for, and the word matches it reads to find them.
UNEMBEDDED_MAX = 1000


def subjects(db: Database, project_id: str = "", max_rows: int = 1000) -> Rows:
    """The project's fact subjects (scope, scope_id) with active/superseded counts, newest first."""
    return fetch(calls.browse_subjects(project_id=text(project_id, "project_id"), max_rows=max_rows), db)


def users(db: Database, project_id: str = "", max_rows: int = 1000) -> Rows:
    """The project's users with conversation threads, most recently active first."""
    return fetch(calls.browse_users(project_id=text(project_id, "project_id"), max_rows=max_rows), db)


def threads(db: Database, user_id: str, project_id: str = "") -> Rows:
    """A user's threads with their message counts, most recently active first."""
    return fetch(calls.browse_threads(user_id=text(user_id, "user id"),
                                      project_id=text(project_id, "project_id")), db)


def messages(db: Database, user_id: str, thread_id: str, from_seq: int, project_id: str = "",
             max_rows: int = 20) -> Rows:
    """A thread's messages (seq, role, content, created_at, metadata) from ``from_seq`` on, oldest
    first: ``max_rows=2`` from a learned fact's turn (``metadata["turn"]``) is that turn."""
    return fetch(calls.browse_messages(user_id=text(user_id, "user id"), thread_id=text(thread_id, "thread"),
                                      from_seq=from_seq, project_id=text(project_id, "project_id"),
                                      max_rows=max_rows), db)


def stores(db: Database, project_id: str = "", max_rows: int = 1000) -> Rows:
    """The project's keyed stores with entry counts and protections, by key."""
    return fetch(calls.browse_stores(project_id=text(project_id, "project_id"), max_rows=max_rows), db)


def store_paths(db: Database, key: str, project_id: str = "") -> Rows:
    """A store's entries (path, kind, sha, size, version, actor, updated_at), by path."""
    return fetch(calls.store_list(store_key=key, prefix="", project_id=project_id), db)


def store_audit(db: Database, key: str, project_id: str = "", n: int = 20) -> Rows:
    """A store's last ``n`` audit records, oldest first."""
    return fetch(calls.store_audit_tail(store_key=key, n=n, project_id=project_id), db)


def store_entry(db: Database, key: str, path: str, project_id: str = "") -> dict[str, Any] | None:
    """One entry with its content; None when the path does not exist."""
    found = fetch(calls.store_read(store_key=key, path=path, project_id=project_id), db)
    return found[0] if found else None


def store_versions(db: Database, key: str, path: str, project_id: str = "") -> Rows:
    """The kept versions of an entry, oldest first."""
    return fetch(calls.store_versions(store_key=key, path=path, project_id=project_id), db)


def embedders(db: Database, project_id: str = "") -> Rows:
    """The embedders (name, dimension) the project has stored vectors from, most recently
    registered first."""
    return fetch(calls.browse_embedders(project_id=text(project_id, "project_id")), db)


def _search_facts(scope: str, scope_id: str, query: str, project: str, embedder: Embedder | None, k: int,
                  lexical_weight: float) -> Operation[tuple[Rows, Rows]]:
    def search(k: int, vector: Any = None, embedder_name: str | None = None) -> Query:
        return calls.facts_search(scope=scope, scope_id=scope_id, project_id=project, k=k, query_vector=vector,
                                  embedder=embedder_name, query_text=query, metadata=None,
                                  lexical_weight=lexical_weight)

    if embedder is None:
        return (yield search(k)), []
    (vector,) = yield Embed([query], query=True)
    rows = yield search(k, vector, embedder.name)
    missing = {r["id"] for r in rows if r["similarity"] is None}  # facts_search lists them first, unranked
    ranked = [r for r in rows if r["similarity"] is not None]
    if not missing:
        return ranked, []
    words = yield search(UNEMBEDDED_MAX)
    return ranked, [r for r in words if r["id"] in missing][:k]


def search_facts(db: Database, scope: str, scope_id: str, query: str, project_id: str = "",
                 embedder: Embedder | None = None, k: int = 20, lexical_weight: float = 0.4) -> tuple[Rows, Rows]:
    """A subject's active facts ranked for the text ``query``: ``(ranked, words_only)``. With
    ``embedder``, ranked by the query's vector and its words (``facts_search`` with both, as
    ``Memory.retrieve``); the facts with no vector from it are not ranked there, so the best ``k``
    of them by words alone come back as ``words_only``. Without, ranked by words alone."""
    return run(_search_facts(scope, scope_id, text(query, "query"), text(project_id, "project_id"), embedder, k,
                             lexical_weight), db, embedder)


def recall_messages(db: Database, user_id: str, query: str, project_id: str = "", thread_id: str = "default",
                    embedder: Embedder | None = None, k: int = 10,
                    options: RecallOptions = RecallOptions()) -> tuple[Rows, Rows]:
    """A user's messages ranked for the text ``query`` (every message: no window is skipped):
    ``(ranked, words_only)``. With ``embedder``, ranked by the query's vector and its words
    (``messages_recall`` with both, as ``Memory.recall``), which ranks only the messages that have
    a vector from it; the best ``k`` of the others (``messages_unembedded``) by words alone come
    back as ``words_only``. Without, ranked by words alone."""
    where = Where(text(user_id, "user id"), text(thread_id, "thread"), text(project_id, "project_id"))
    return run(_recall_messages(where, text(query, "query"), embedder, k, options), db, embedder)


def _recall_messages(where: Where, query: str, embedder: Embedder | None, k: int,
                     options: RecallOptions) -> Operation[tuple[Rows, Rows]]:
    def recall(k: int, vector: Any = None, embedder_name: str | None = None) -> Query:  # every message: no window
        return recall_query(where, options, NO_FILTERS, (None, None), k=k, window_size=0, query_vector=vector,
                            embedder=embedder_name, query_text=query)

    if embedder is None:
        return (yield recall(k)), []
    (vector,) = yield Embed([query], query=True)
    ranked = yield recall(k, vector, embedder.name)
    unembedded = yield calls.messages_unembedded(user_id=where.user_id, project_id=where.project_id,
                                                 embedder=embedder.name, min_chars=options.min_content_chars,
                                                 max_messages=UNEMBEDDED_MAX)
    missing = {(m["thread_id"], m["seq"]) for m in unembedded}
    if not missing:
        return ranked, []
    words = yield recall(UNEMBEDDED_MAX)
    return ranked, [m for m in words if (m["thread_id"], m["seq"]) in missing][:k]


NO_FILTERS = Filters(None, None, None, None)
