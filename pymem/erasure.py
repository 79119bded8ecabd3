"""The erasure of a user with its receipt, over ``sql/api/erasure.sql`` (``pymem forget-user
--user ID`` / ``pymem export --erasures``, ``Memory.forget_user``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg

from .database import Database
from .errors import ValidationError
from .options import UNSET, MemoryOptions, need_user
from .runner import Operation, run
from .types import Erasure
from .values import text
from . import calls

log = logging.getLogger("pymem")


def _erasure(row: Mapping[str, Any], project_id: str) -> Erasure:
    at = row["erased_at"]
    return Erasure(id=int(row["id"]), project_id=project_id,
                   erased_at=at if isinstance(at, datetime) else datetime.fromisoformat(at),
                   erased_by=row["erased_by"], counts={k: int(v) for k, v in row["counts"].items()},
                   digest=row["digest"])


def _store_keys(stores: Iterable[str]) -> list[str]:
    if isinstance(stores, str):
        raise ValidationError("stores must be a list of store keys, not one string")
    return [text(s, "store key") for s in stores]


def _forget_user(user_id: str, project_id: str, stores: Iterable[str]) -> Operation[Erasure]:
    project = text(project_id, "project_id")
    rows = yield calls.user_forget(user_id=text(user_id, "user id"), project_id=project, store_keys=_store_keys(stores))
    receipt = _erasure(rows[0]["receipt"], project)
    if receipt.nothing_stored:  # the id is not logged: the log may outlive the erasure
        log.warning("forget_user: nothing was stored for that user in project %r (a mistyped id?); "
                    "erasure receipt %d records that nothing was erased", project, receipt.id)
    return receipt


def erase(o: MemoryOptions, *, user: str | None = UNSET, ctx: Any = None,
          stores: Sequence[str] = ()) -> Operation[Erasure]:
    """Erase the user from this Memory's project, in one transaction: facts with their
    history, every conversation with its summaries, the stores named in ``stores`` (the
    user's own: a store has no owner), and the user's name as the actor of other stores'
    rows. Returns the receipt (`pymem.Erasure`: counts per kind and a digest, no
    content), which the database keeps after the erasure (``pymem.erasures``)."""
    return (yield from _forget_user(need_user(o, user, ctx), o.project_id, stores))


def forget_user(db: Database, user_id: str, project_id: str = "", *, stores: Iterable[str] = (),
                conn: psycopg.Connection | None = None) -> Erasure:
    """Erase a user of a project in one transaction: the user's facts with their history, every
    conversation (messages, vectors, summaries), the stores named in ``stores`` whole, and the
    user's name as the actor of other stores' rows. Returns the receipt, which
    ``pymem.erasures`` keeps (see `erasures`). ``conn=`` (or ``with pymem.bound(db,
    conn):``): inside your own transaction, so a rollback takes the erasure and its receipt back."""
    return run(_forget_user(user_id, project_id, stores), db, conn=conn)


def _erasures(project: str, user_id: str | None) -> Operation[list[Erasure]]:
    rows = yield calls.erasures(project_id=project, user_id=user_id)
    return [_erasure(r, project) for r in rows]


def erasures(db: Database, project_id: str = "", *, user_id: str | None = None,
             conn: psycopg.Connection | None = None) -> list[Erasure]:
    """The receipts of a project's erasures, newest first; with ``user_id``, that user's. Needs
    the owner role (``pymem.erasures`` is not granted to the app or reader role)."""
    return run(_erasures(text(project_id, "project_id"), text(user_id, "user id", allow_none=True)), db, conn=conn)
