"""Listing what one project holds, over ``sql/api/browse.sql`` (and the stores' read functions):
what the memory page of ``pymem serve`` (:mod:`pymem.web`) shows besides the Memory API's own
reads. Each function is one named query; rows come back as dicts. There is no listing of
projects: row-level security confines every call to the project it names (README, Security).
"""

from __future__ import annotations

from typing import Any

from .database import Database
from .values import text

Rows = list[dict[str, Any]]


def subjects(db: Database, project_id: str = "", max_rows: int = 1000) -> Rows:
    """The project's fact subjects (scope, scope_id) with active/superseded counts, newest first."""
    return db.query("browse_subjects", {"project_id": text(project_id, "project_id"), "max_rows": max_rows})


def users(db: Database, project_id: str = "", max_rows: int = 1000) -> Rows:
    """The project's users with conversation threads, most recently active first."""
    return db.query("browse_users", {"project_id": text(project_id, "project_id"), "max_rows": max_rows})


def threads(db: Database, user_id: str, project_id: str = "") -> Rows:
    """A user's threads with their message counts, most recently active first."""
    return db.query("browse_threads", {"user_id": text(user_id, "user id"),
                                       "project_id": text(project_id, "project_id")})


def stores(db: Database, project_id: str = "", max_rows: int = 1000) -> Rows:
    """The project's keyed stores with entry counts and protections, by key."""
    return db.query("browse_stores", {"project_id": text(project_id, "project_id"), "max_rows": max_rows})


def store_paths(db: Database, key: str, project_id: str = "") -> Rows:
    """A store's entries (path, kind, sha, size, version, actor, updated_at), by path."""
    return db.query("store_list", {"store_key": key, "prefix": "", "project_id": project_id})


def store_audit(db: Database, key: str, project_id: str = "", n: int = 20) -> Rows:
    """A store's last ``n`` audit records, oldest first."""
    return db.query("store_audit_tail", {"store_key": key, "n": n, "project_id": project_id})


def store_entry(db: Database, key: str, path: str, project_id: str = "") -> dict[str, Any] | None:
    """One entry with its content; None when the path does not exist."""
    rows = db.query("store_read", {"store_key": key, "path": path, "project_id": project_id})
    return rows[0] if rows else None


def store_versions(db: Database, key: str, path: str, project_id: str = "") -> Rows:
    """The kept versions of an entry, oldest first."""
    return db.query("store_versions", {"store_key": key, "path": path, "project_id": project_id})
