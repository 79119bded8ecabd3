"""Plans: EXPLAIN (ANALYZE, BUFFERS) of ``context_read`` and of every statement it runs inside
(auto_explain), and of the SELECTs of ``_recall_ranked`` / ``_messages_unembedded`` with the
probe's values as literals; each statement flagged for Seq Scans, Sorts and whole-user scans."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from pgvector import Vector
from psycopg import sql

import pymem
from bench import common
from pymem.embedders import HashEmbedder
from pymem.queries import Q

from .config import AGENT_ID, DEFAULTS, MAX_FACTS, MIN_CHARS, RECALL_K, WINDOW, User, context_params
from .texts import PROBE_QUERIES


def _function_body(conn: psycopg.Connection, name: str) -> str:
    return conn.execute("SELECT prosrc FROM pg_proc WHERE oid = %s::regproc", (name,)).fetchone()[0]


class _Raw(str):
    """SQL written into a statement as it is (an expression, not a literal)."""


def _with_literals(conn: psycopg.Connection, body: str, values: dict[str, Any]) -> str:
    """A SQL function's body (or a PL/pgSQL function's statement) with its p_* parameters (and v_*
    variables) replaced by literals."""
    def sub(m: re.Match[str]) -> str:
        v = values[m.group(0)]
        if isinstance(v, _Raw):
            return str(v)
        if isinstance(v, Vector):
            return sql.SQL("{}::vector").format(sql.Literal(v.to_text())).as_string(conn)
        if isinstance(v, str):  # typed: f('...') of a name that is also a type's (an array type _t) is a cast
            return sql.SQL("{}::text").format(sql.Literal(v)).as_string(conn)
        return sql.Literal(v).as_string(conn)

    return re.sub(r"\b[pv]_[a-z_]+\b", sub, body).strip().rstrip(";")



def _sort_inputs(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Each Sort node of an analyzed plan with the rows it sorted (its input)."""
    out = []

    def walk(node: dict[str, Any]) -> None:
        if node["Node Type"] in ("Sort", "Incremental Sort"):
            child = (node.get("Plans") or [{}])[0]
            out.append({"sort_key": common.shorten(node.get("Sort Key")), "method": node.get("Sort Method"),
                        "input_rows": (child.get("Actual Rows") or 0) * (child.get("Actual Loops") or 1),
                        "input_node": child.get("Node Type"),
                        "input_relation": child.get("Relation Name") or child.get("Index Name")})
        for sub in node.get("Plans", ()):
            walk(sub)

    walk(plan)
    return out


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Each scan node of an analyzed plan with the rows it read (returned + removed by its filter)."""
    out = []

    def walk(node: dict[str, Any]) -> None:
        if "Scan" in node["Node Type"] and node["Node Type"] not in ("Function Scan", "Subquery Scan", "CTE Scan",
                                                                       "Values Scan", "WorkTable Scan"):
            loops = node.get("Actual Loops") or 1
            read = ((node.get("Actual Rows") or 0) + (node.get("Rows Removed by Filter") or 0)
                    + (node.get("Rows Removed by Index Recheck") or 0)) * loops
            out.append({"node": node["Node Type"], "relation": node.get("Relation Name"),
                        "index": node.get("Index Name"), "rows_read": read,
                        "rows_returned": (node.get("Actual Rows") or 0) * loops,
                        "filter": common.shorten(node.get("Filter"))})
        for sub in node.get("Plans", ()):
            walk(sub)

    walk(plan)
    return out


def summarize_nested(plans: list[dict[str, Any]] | None, user_messages: int) -> list[dict[str, Any]]:
    """One line per statement run inside the function: time, buffers, scans, Seq Scan and the
    Sorts, and whether a Sort or a scan took the whole user (at least half the user's messages)."""
    if not plans:
        return []
    whole = max(2, user_messages // 2)
    out = []
    for p in plans:
        top = p["plan"]["Plan"]
        sorts = _sort_inputs(top)
        scans = _scans(top)
        out.append({
            "query": p["query"][:200],
            "duration_ms": p.get("duration_ms"),
            "shared_hit_blocks": top.get("Shared Hit Blocks"),
            "shared_read_blocks": top.get("Shared Read Blocks"),
            "rows": top.get("Actual Rows"),
            "indexes": p["indexes"],
            "seq_scan": p["seq_scan"],
            "seq_scans": [s["relation"] for s in scans if s["node"] in ("Seq Scan", "Parallel Seq Scan")],
            "sorts": sorts,
            "scans": scans,
            "whole_user_sort": any(s["input_rows"] >= whole for s in sorts),
            "whole_user_scans": [f"{s['node']} on {s['relation']}" + (f" using {s['index']}" if s["index"] else "")
                                 + f" ({s['rows_read']:.0f} rows read, {s['rows_returned']:.0f} kept)"
                                 for s in scans if s["rows_read"] >= whole],
        })
    return out


def collapse_statements(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive runs of the same statement (e.g. pymem._norm once per recalled row) as one line."""
    out: list[dict[str, Any]] = []
    for s in statements:
        if out and out[-1]["query"][:80] == s["query"][:80]:
            last = out[-1]
            last["count"] += 1
            last["duration_ms"] = (last["duration_ms"] or 0) + (s["duration_ms"] or 0)
            last["shared_hit_blocks"] = (last["shared_hit_blocks"] or 0) + (s["shared_hit_blocks"] or 0)
            last["shared_read_blocks"] = (last["shared_read_blocks"] or 0) + (s["shared_read_blocks"] or 0)
        else:
            out.append({**s, "count": 1})
    return out


def plans(conn: psycopg.Connection, dsn: str, probe: User, heavy: User | None, embedder: HashEmbedder,
          qvec: Vector) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of context_read's call and of every statement it runs inside
    (auto_explain, on its 8th call), and of _recall_ranked / _messages_unembedded with the
    probe's values as literals."""
    out: dict[str, Any] = {}
    call = sql.SQL("SELECT pymem.context_read(user_id => {u}, agent_id => {a}, project_id => {p}, "
                   "thread_id => 'default', query_vector => {q}::vector, embedder => {e}, max_facts => {mf}, "
                   "query_text => {t}, recall => pymem.recall(window_size => {w}, k => {k}, min_content_chars => {mc}))").format(
        u=sql.Literal(probe.user_id), a=sql.Literal(AGENT_ID), p=sql.Literal(probe.project_id),
        q=sql.Literal(qvec.to_text()), e=sql.Literal(embedder.name), mf=sql.Literal(MAX_FACTS),
        w=sql.Literal(WINDOW), k=sql.Literal(RECALL_K), mc=sql.Literal(MIN_CHARS),
        t=sql.Literal(PROBE_QUERIES[0])).as_string(conn)
    citus = common.is_citus(conn)
    out["context_read_call"] = common.explain_or_reason(conn, citus, call)
    with pymem.connect(dsn) as side:
        cur = side.cursor()
        for name, user in (("probe", probe), ("heavy_user", heavy)):
            if user is None:
                continue
            if citus:
                out[f"context_read_nested_{name}"] = {"error": common.NESTED_NOT_ON_CITUS}
                continue
            p = context_params(user, qvec, embedder.name, PROBE_QUERIES[0])
            nested = common.nested_plans(side, lambda p=p: cur.execute(Q["context_read"], p).fetchall())
            if nested is None:
                out[f"context_read_nested_{name}"] = {"error": "auto_explain is not available to this role"}
            else:
                out[f"context_read_nested_{name}"] = {"statements": summarize_nested(nested, user.messages),
                                                      "plans": nested}
    # _recall_ranked is PL/pgSQL: its hybrid statement (a vector and terms) follows the last RETURN QUERY
    recall_body = _function_body(conn, "pymem._recall_ranked").rsplit("RETURN QUERY", 1)[1].rsplit("END;", 1)[0]
    unembedded_body = _function_body(conn, "pymem._messages_unembedded")
    for name, user in (("probe", probe), ("heavy_user", heavy)):
        if user is None:
            continue
        # the spec's fields and what the function computes before the statement, which the body
        # reads as the variables v_* (recall_ranking.sql)
        lw = DEFAULTS.recall.lexical_weight
        # the query's terms computed first and written in as literals, as the function's variables
        # hold them: an argument with a sub-select would keep _recall_rows from being inlined
        terms_sql = sql.SQL("(ARRAY(SELECT pymem._term_quoted(x.x)::tsquery FROM pg_catalog.unnest(pg_catalog.tsvector_to_array("
                            "pymem._lexemes(pymem._text_search_config({}), {}))) AS x(x)))").format(
                                sql.Literal(user.project_id), sql.Literal(PROBE_QUERIES[0]))
        terms_text, any_text = conn.execute(sql.SQL("SELECT {t}::text, pg_catalog.array_to_string({t}, ' | ')").format(
            t=terms_sql)).fetchone()
        terms = _Raw(sql.SQL("({}::tsquery[])").format(sql.Literal(terms_text)).as_string(conn))
        last = conn.execute("SELECT last_seq FROM pymem.threads WHERE project_id = %s AND user_id = %s AND thread_id = 'default'",
                            (user.project_id, user.user_id)).fetchone()
        values = {"p_project_id": user.project_id, "p_user_id": user.user_id, "p_thread_id": "default",
                  "p_query": qvec, "p_embedder": embedder.name, "p_text": PROBE_QUERIES[0],
                  "v_k": RECALL_K + 20, "v_min_chars": MIN_CHARS, "v_window": WINDOW, "v_rw": 0.0, "v_iw": 0.0,
                  "v_half_life": 3600.0, "v_min_score": None, "v_lw": lw,
                  "v_as_of": None, "v_since": None, "v_until": None, "v_filter": None,
                  "v_terms": terms, "v_any": _Raw(sql.SQL("{}::tsquery").format(sql.Literal(any_text)).as_string(conn)),
                  "v_window_after": (last[0] if last else 0) - WINDOW, "v_wv": 1.0 - lw, "v_wl": lw,
                  "v_span": False, "v_from": None, "v_to": None}  # no named time
        e = common.explain_or_reason(conn, citus, _with_literals(conn, recall_body, values))
        if "plan" in e:
            e["sorts"] = _sort_inputs(e["plan"]["Plan"])
        out[f"recall_ranked_{name}"] = e
        values = {"p_project_id": user.project_id, "p_user_id": user.user_id, "p_embedder": embedder.name,
                  "p_min_chars": MIN_CHARS, "p_limit": 1000}
        # its first read (the messages without a vector, through messages_unembedded): the body is
        # PL/pgSQL, one single-table read per index range, then the vectors and contents of those found
        first = unembedded_body.split("BEGIN", 1)[1].split(";", 1)[0]
        first = re.sub(r"\s+INTO\s+v_thread, v_seq, v_at\b", "", first)
        out[f"messages_unembedded_{name}"] = common.explain_or_reason(
            conn, citus, _with_literals(conn, first, values))
    return out
