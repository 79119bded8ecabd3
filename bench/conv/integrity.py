"""Integrity of the generated data: every CHECK, every reference, last_seq, the copied columns
and the vectors, over every row."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row


def check_constraints(conn: psycopg.Connection, table: str) -> dict[str, int]:
    """Every CHECK constraint of ``table`` re-evaluated over every row (one pass): violations."""
    checks = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c' "
        "ORDER BY conname", (table,)).fetchall()
    if not checks:
        return {}
    exprs = []
    for name, definition in checks:
        m = re.fullmatch(r"CHECK \((.*)\)(?: NOT VALID)?", definition, flags=re.DOTALL)
        exprs.append(sql.SQL("count(*) FILTER (WHERE ({}) IS FALSE) AS {}").format(
            sql.SQL(m.group(1)), sql.Identifier(name)))
    schema, _, name = table.partition(".")
    row = conn.cursor(row_factory=dict_row).execute(
        sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(exprs), sql.Identifier(schema, name))).fetchone()
    return dict(row)


def integrity(conn: psycopg.Connection, embedder: str, dim: int) -> dict[str, Any]:
    """Every CHECK of threads and messages over every row; every message has its thread and
    every vector its message (the foreign keys); last_seq = max(seq) = the thread's message
    count; vectors copy chars/importance/created_at from their message, are ``dim``-d,
    finite and not zero; embedded_by names the embedder exactly when a vector exists; every
    constraint validated. All counts are 0 on a healthy load."""
    c = conn.cursor(row_factory=dict_row)
    checks = {**check_constraints(conn, "pymem.threads"), **check_constraints(conn, "pymem.messages")}
    seqs = c.execute(
        """SELECT count(*) FILTER (WHERE m.n IS NULL AND t.last_seq > 0) AS threads_missing_messages,
                  count(*) FILTER (WHERE t.last_seq IS NULL) AS messages_without_thread,
                  count(*) FILTER (WHERE m.max_seq <> t.last_seq) AS last_seq_not_max_seq,
                  count(*) FILTER (WHERE m.n <> t.last_seq OR m.min_seq <> 1) AS seq_not_contiguous
           FROM pymem.threads AS t
           FULL JOIN (SELECT project_id, user_id, thread_id, count(*) AS n, max(seq) AS max_seq, min(seq) AS min_seq
                        FROM pymem.messages GROUP BY project_id, user_id, thread_id) AS m
             ON m.project_id = t.project_id AND m.user_id = t.user_id AND m.thread_id = t.thread_id""").fetchone()
    vectors = c.execute(
        """SELECT count(*) FILTER (WHERE m.seq IS NULL) AS vectors_without_message,
                  count(*) FILTER (WHERE e.chars <> length(m.content) OR e.importance <> m.importance
                                      OR e.created_at <> m.created_at) AS vector_copy_mismatch,
                  count(*) FILTER (WHERE m.embedded_by IS DISTINCT FROM e.embedder) AS embedded_by_mismatch,
                  count(*) FILTER (WHERE e.embedder = %(embedder)s AND vector_dims(e.embedding) <> %(dim)s)
                      AS wrong_dimension,
                  count(*) FILTER (WHERE vector_norm(e.embedding) = 'NaN'::float8
                                      OR vector_norm(e.embedding) = 'Infinity'::float8
                                      OR vector_norm(e.embedding) = 0) AS nan_inf_or_zero
           FROM pymem.message_embeddings AS e
           LEFT JOIN pymem.messages AS m
             ON m.project_id = e.project_id AND m.user_id = e.user_id AND m.thread_id = e.thread_id
            AND m.seq = e.seq""", {"embedder": embedder, "dim": dim}).fetchone()
    embedded_by = c.execute(
        """SELECT count(*) AS embedded_by_without_vector FROM pymem.messages AS m
            WHERE m.embedded_by IS NOT NULL AND NOT EXISTS (
                  SELECT 1 FROM pymem.message_embeddings AS e
                   WHERE e.project_id = m.project_id AND e.user_id = m.user_id AND e.embedder = m.embedded_by
                     AND e.thread_id = m.thread_id AND e.seq = m.seq)""").fetchone()
    not_valid = [r[0] for r in conn.execute(
        """SELECT conname FROM pg_constraint
            WHERE conrelid IN ('pymem.threads'::regclass, 'pymem.messages'::regclass,
                               'pymem.message_embeddings'::regclass) AND NOT convalidated
              -- 0048's bounds on stored JSON are NOT VALID by design (a database upgraded with an
              -- older, deeper document still migrates); every row written since is checked
              AND conname NOT LIKE '%%\\_bounded'""").fetchall()]
    counts = {**checks, **seqs, **vectors, **embedded_by}
    return {"ok": not not_valid and not any(counts.values()), "violations": counts, "not_validated": not_valid}
