"""What ends memory on its own (sql/api/lifecycle.sql): :func:`purge` deletes what has expired, in
bounded batches: facts and keyed-store entries (items too). Expiry needs no purge to be correct
(an expired fact or entry is invisible to every read at once); a purge gives the space back. ``pymem purge`` runs it from the command line; run it
from cron, or pg_cron where installed (docs/sql.md "Expire and purge")."""

from __future__ import annotations

from . import calls
from .database import Database
from .values import text


def purge(db: Database, project_id: str = "", *, max_rows: int = 1000, until_done: bool = False) -> dict[str, int]:
    """Delete up to ``max_rows`` expired rows of the project per call of ``pymem.purge`` (each its
    own short transaction; ``max_rows`` bounds each kind), once, or with ``until_done`` until a
    call deletes fewer than ``max_rows`` of every kind. Returns how many rows of each kind were
    deleted: ``{"facts": n, "store_entries": m}``."""
    project = text(project_id, "project_id")
    total: dict[str, int] = {}
    while True:
        rows = db.query(calls.purge(project_id=project, max_rows=max_rows))
        for r in rows:
            total[r["kind"]] = total.get(r["kind"], 0) + r["purged"]
        if not until_done or all(r["purged"] < max_rows for r in rows) or max_rows == 0:
            return total
