"""A user's whole memory as JSON, and back, over ``sql/api/portability.sql`` (``pymem export
--user ID`` / ``pymem import FILE``). The erasure of a user is `pymem.erasure`; its
``forget_user`` and ``erasures`` stay importable from here."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .database import Database
from .erasure import erasures, forget_user
from .runner import Operation, run
from .values import text
from . import calls

__all__ = ["export_user", "import_user", "forget_user", "erasures"]


def _export(user_id: str, project_id: str) -> Operation[dict[str, Any]]:
    rows = yield calls.user_export(user_id=text(user_id, "user id"), project_id=text(project_id, "project_id"))
    return rows[0]["document"]


def _import(document: dict[str, Any], project_id: str | None, user_id: str | None,
            replace: bool) -> Operation[dict[str, Any]]:
    rows = yield calls.user_import(document=Jsonb(document), project_id=text(project_id, "project_id", allow_none=True),
                                   user_id=text(user_id, "user id", allow_none=True), replace=bool(replace))
    return rows[0]["imported"]


def export_user(db: Database, user_id: str, project_id: str = "", *,
                conn: psycopg.Connection | None = None) -> dict[str, Any]:
    """The user's facts (with history), threads, messages and summaries as one JSON object."""
    return run(_export(user_id, project_id), db, conn=conn)


def import_user(db: Database, document: dict[str, Any], *, project_id: str | None = None,
                user_id: str | None = None, replace: bool = False,
                conn: psycopg.Connection | None = None) -> dict[str, Any]:
    """Load an exported document (in one transaction: ``conn=``, yours); returns what was imported."""
    return run(_import(document, project_id, user_id, replace), db, conn=conn)
