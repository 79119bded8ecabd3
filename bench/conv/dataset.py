"""What the tables hold: counts, skew and sizes, one user's counts, and the light and heaviest
users the measurements read."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench import facts as bench_facts

from .config import PROBE_ID, PROBE_PROJECT, User


def user_counts(conn: psycopg.Connection, user: User, embedder: str) -> dict[str, Any]:
    """A user's messages (per thread), vectors of ``embedder`` and facts."""
    per_thread = dict(conn.execute(
        "SELECT thread_id, count(*) FROM pymem.messages WHERE project_id = %s AND user_id = %s "
        "GROUP BY thread_id ORDER BY thread_id", (user.project_id, user.user_id)).fetchall())
    embedded = conn.execute(
        "SELECT count(*) FROM pymem.messages WHERE project_id = %s AND user_id = %s AND embedded_by = %s",
        (user.project_id, user.user_id, embedder)).fetchone()[0]
    vectors = conn.execute(
        "SELECT count(*) FROM pymem.message_embeddings WHERE project_id = %s AND user_id = %s AND embedder = %s",
        (user.project_id, user.user_id, embedder)).fetchone()[0]
    facts = bench_facts.subject_counts(conn, bench_facts.Subject(user.project_id, "user", user.user_id))
    return {"messages": sum(per_thread.values()), "embedded": embedded, "vectors": vectors,
            "threads": len(per_thread), "per_thread": per_thread, "facts_active": facts["active"],
            "facts_superseded": facts["superseded"]}


def choose_light(conn: psycopg.Connection) -> User | None:
    """The lightest user of the probe's project (at least 5 messages, all embedded, a 'default'
    thread): the other end of the skew."""
    row = conn.execute(
        """SELECT user_id, count(*) FROM pymem.messages
            WHERE project_id = %s AND user_id <> %s
            GROUP BY user_id
           HAVING count(*) FILTER (WHERE embedded_by IS NULL) = 0
              AND count(*) FILTER (WHERE thread_id = 'default') > 0 AND count(*) >= 5
            ORDER BY count(*), user_id LIMIT 1""", (PROBE_PROJECT, PROBE_ID)).fetchone()
    return User(PROBE_PROJECT, row[0], row[1]) if row else None


def choose_heavy(conn: psycopg.Connection) -> User | None:
    """The user with the most messages (who has a 'default' thread)."""
    row = conn.execute(
        """SELECT project_id, user_id, count(*) FROM pymem.messages
            GROUP BY project_id, user_id
           HAVING count(*) FILTER (WHERE thread_id = 'default') > 0
            ORDER BY count(*) DESC, project_id, user_id LIMIT 1""").fetchone()
    return User(row[0], row[1], row[2]) if row else None


def dataset(conn: psycopg.Connection) -> dict[str, Any]:
    """Counts, skew and sizes of the conversation tables (and of pymem.facts)."""
    c = conn.cursor(row_factory=dict_row)
    messages = c.execute(
        """SELECT count(*) AS messages,
                  count(*) FILTER (WHERE embedded_by IS NULL) AS unembedded,
                  count(*) FILTER (WHERE role = 'user') AS user_role,
                  count(*) FILTER (WHERE role = 'assistant') AS assistant_role,
                  count(*) FILTER (WHERE length(content) < 10) AS shorter_than_10_chars,
                  round(avg(length(content))) AS avg_content_chars,
                  max(length(content)) AS max_content_chars,
                  count(DISTINCT project_id) AS projects
           FROM pymem.messages""").fetchone()
    threads = c.execute(
        """SELECT count(*) AS threads, count(*) FILTER (WHERE summary IS NOT NULL) AS threads_with_summary,
                  max(last_seq) AS longest_thread
           FROM pymem.threads""").fetchone()
    vectors = c.execute("SELECT count(*) AS vectors FROM pymem.message_embeddings").fetchone()
    users = c.execute(
        """SELECT count(*) AS users, max(n) AS max_messages,
                  percentile_disc(0.5) WITHIN GROUP (ORDER BY n) AS median_messages,
                  percentile_disc(0.9) WITHIN GROUP (ORDER BY n) AS p90_messages,
                  percentile_disc(0.99) WITHIN GROUP (ORDER BY n) AS p99_messages,
                  count(*) FILTER (WHERE n <= 20) AS users_le_20_messages,
                  count(*) FILTER (WHERE n >= 1000) AS users_ge_1000_messages
           FROM (SELECT count(*) AS n FROM pymem.messages GROUP BY project_id, user_id) AS s""").fetchone()
    facts = c.execute(
        """SELECT count(*) AS facts, count(*) FILTER (WHERE superseded_by IS NULL) AS active_facts,
                  count(*) FILTER (WHERE scope = 'user') AS user_facts,
                  count(*) FILTER (WHERE scope = 'agent') AS agent_facts
           FROM pymem.facts""").fetchone()
    sizes = {}
    for table in ("threads", "messages", "message_embeddings", "facts"):
        row = c.execute(
            "SELECT pg_relation_size(%(t)s) AS heap, pg_indexes_size(%(t)s) AS indexes, "
            "pg_total_relation_size(%(t)s) AS total", {"t": f"pymem.{table}"}).fetchone()
        sizes[table] = row
    index_sizes = {
        r["name"]: r["bytes"] for r in c.execute(
            """SELECT i.indexrelid::regclass::text AS name, pg_relation_size(i.indexrelid) AS bytes
               FROM pg_index AS i
               WHERE i.indrelid IN ('pymem.threads'::regclass, 'pymem.messages'::regclass,
                                    'pymem.message_embeddings'::regclass)
               ORDER BY 1""").fetchall()}
    return {**messages, **threads, **vectors, **users, **facts, "bytes": sizes, "index_bytes": index_sizes}
