"""pymem as the fact store of the ``fastaiagent`` SDK: ``PymemFactStore`` implements its
``FactStore`` protocol (``add``, ``get``, ``list_active``, ``supersede``, ``delete`` over its
``Fact`` dataclass), so its users keep their agent and pass pymem as the store:

    from fastaiagent import Memory
    from pymem.integrations.fastaiagent import PymemFactStore
    memory = Memory(location=PymemFactStore(), user_id="alice")

The two models are the same one (subjects ``(project, scope, scope_id)``, idempotent adds,
supersede chains, ``'*'`` and the safe empty id), so each call is one pymem SQL function:
``fact_add``, ``fact_get``, ``facts_newest``, ``fact_supersede``, ``facts_forget`` /
``fact_forget``. Mapping (docs/integrations.md):

* ``Fact.project_id`` is the pymem project; ``''`` means the store's own project (``project_id=``,
  default the settings' ``PYMEM_PROJECT_ID``, itself ``''`` by default), and facts read from it
  report ``''`` back.
* ``Fact.source``: ``'learned'`` is pymem's source ``learned`` (never capped here: fastaiagent
  caps learned facts itself), ``''`` is ``manual``; any other value is kept in the fact's
  metadata (``fastaiagent_source``). ``source_trace_id`` is pymem's ``trace_id``;
  ``created_at`` (epoch seconds) its ``created_at``.
* At agent scope an empty ``scope_id`` means every agent (the protocol's permissive global
  tier): pymem's ``'*'``. At user and project scope it reads nothing and ``delete`` refuses it
  (``ValueError``), as the protocol says.
* ``get(id)`` knows no project: it looks in the store's project, then in every project this
  store object has used (ids are unique across projects).
* ``supersede(old, new)`` retires ``old`` into ``new`` (pymem's merge: ``new`` stays as it is);
  both must be facts of one subject (``ValueError`` otherwise, or when either is missing). A
  fact already superseded cannot be superseded again (``pymem.ConflictError``), where the
  protocol's SQL stores silently re-point it.
* ``list_active`` without ``limit`` returns at most 10,000 facts (pymem's largest page).
* ``delete(..., fact=text)`` removes the active fact with that text and the versions it
  superseded, in each matching subject; without ``fact``, every fact of the subject(s),
  history included.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

from fastaiagent.learn import Fact

from ..database import Database
from ..facts import FactWrite
from ..runner import fetch
from .. import calls

__all__ = ["PymemFactStore"]

_ALL = 10_000  # the largest page pymem returns (_check_limit)


class PymemFactStore:
    """fastaiagent's ``FactStore`` on pymem (module docstring). ``db``: a ``pymem.Database``,
    left open for its owner; none: one opened from the settings (``PYMEM_DSN``, or the embedded
    server), closed by ``close()``. ``project_id``: the project of ``Fact.project_id == ''``."""

    def __init__(self, db: Database | None = None, *, project_id: str | None = None) -> None:
        self._own_db = db is None
        self.db = db if db is not None else Database()
        self.project_id = project_id if project_id is not None else self.db.settings.project_id
        self._projects: dict[str, None] = {self.project_id: None}  # in use, in order, for get()
        self._lock = threading.Lock()

    def _project(self, project_id: str) -> str:
        project = project_id or self.project_id
        if project not in self._projects:
            with self._lock:
                self._projects[project] = None
        return project

    def _fact(self, row: dict[str, Any], project_id: str) -> Fact:
        metadata = row.get("metadata") or {}
        source = metadata.get("fastaiagent_source") or ("learned" if row["source"] == "learned" else "")
        return Fact(scope=row["scope"], scope_id=row["scope_id"], fact=row["content"],
                    source_trace_id=row["trace_id"], confidence=row["confidence"],
                    created_at=row["created_at"].timestamp(), superseded_by=row["superseded_by"],
                    project_id="" if project_id == self.project_id else project_id, id=row["id"], source=source)

    @staticmethod
    def _scope_id(scope: str, scope_id: str) -> str:
        return "*" if scope == "agent" and scope_id == "" else scope_id

    # -- the protocol ---------------------------------------------------------------------
    def add(self, fact: Fact) -> int:
        """Store a fact, or return the id of the subject's active fact with the same text."""
        source = fact.source or ""
        created = (datetime.fromtimestamp(fact.created_at, timezone.utc)
                   if fact.created_at is not None else None)
        write = FactWrite(confidence=fact.confidence, source="learned" if source == "learned" else "manual",
                          trace_id=fact.source_trace_id,
                          metadata={} if source in ("", "learned") else {"fastaiagent_source": source},
                          created_at=created)
        row = fetch(calls.fact_add(scope=fact.scope, scope_id=fact.scope_id, content=fact.fact,
                                   project_id=self._project(fact.project_id), write=write.checked(), max_learned=None,
                                   embedding=None, embedder=None), self.db)[0]
        return int(row["id"])

    def _get(self, fact_id: int) -> tuple[dict[str, Any], str] | None:
        with self._lock:
            projects = list(self._projects)
        for project in projects:
            rows = fetch(calls.fact_get(id=fact_id, project_id=project), self.db)
            if rows:
                return rows[0], project
        return None

    def get(self, fact_id: int) -> Fact | None:
        found = self._get(fact_id)
        return self._fact(*found) if found else None

    def list_active(self, scope: str, scope_id: str = "", project_id: str = "",
                    limit: int | None = None) -> list[Fact]:
        """The subject's active facts, newest first (``'*'``: every subject of the scope)."""
        project = self._project(project_id)
        rows = fetch(calls.facts_newest(scope=scope, scope_id=self._scope_id(scope, scope_id),
                                        project_id=project,
                                        max_facts=_ALL if limit is None else limit), self.db)
        return [self._fact(r, project) for r in rows]

    def supersede(self, old_id: int, new_id: int) -> None:
        """Retire fact ``old_id`` in favour of fact ``new_id`` (of the same subject)."""
        old, new = self._get(old_id), self._get(new_id)
        if old is None or new is None:
            raise ValueError(f"supersede: missing row(s) old_id={old_id} new_id={new_id}")
        (o, project), (n, new_project) = old, new
        if (project, o["scope"], o["scope_id"]) != (new_project, n["scope"], n["scope_id"]):
            raise ValueError(f"supersede: facts {old_id} and {new_id} belong to different subjects")
        write = FactWrite(confidence=n["confidence"], source=n["source"], trace_id=n["trace_id"], metadata=n["metadata"])
        fetch(calls.fact_supersede(scope=o["scope"], scope_id=o["scope_id"], new_content=n["content"], id=old_id,
                                   old_content=None, project_id=project, write=write.checked(), embedding=None,
                                   embedder=None), self.db)

    def delete(self, scope: str, scope_id: str = "", project_id: str = "", fact: str | None = None) -> int:
        """Hard-delete the subject's facts (with their history), or only the fact ``fact``."""
        if scope in ("user", "project") and scope_id == "":
            raise ValueError('delete at user/project scope needs an explicit scope_id (or "*")')
        project = self._project(project_id)
        scope_id = self._scope_id(scope, scope_id)
        if fact is None:
            return int(fetch(calls.facts_forget(scope=scope, scope_id=scope_id,
                                                project_id=project), self.db)[0]["deleted"])
        subjects = [scope_id]
        if scope_id == "*":  # fact_forget names one subject: the subjects holding that text
            subjects = sorted({r["scope_id"] for r in fetch(
                calls.facts_newest(scope=scope, scope_id="*", project_id=project, max_facts=_ALL), self.db)
                if r["content"] == fact})
        return sum(int(fetch(calls.fact_forget(scope=scope, scope_id=s, id=None, content=fact,
                                               project_id=project), self.db)[0]["deleted"]) for s in subjects)

    def close(self) -> None:
        """Close the Database this store opened itself (one passed as ``db=`` stays open)."""
        if self._own_db:
            self.db.close()

