"""Shared helpers for pymem's benchmarks (bench/facts.py, and the benchmarks that follow it).

- :func:`connection_info` resolves where to run: ``--dsn``, else ``PYMEM_DSN``, else the
  embedded server of ``PYMEM_DATA_DIR`` (started if needed, as ``pymem.Database()`` does).
- :func:`measure` runs a callable ``warmup`` times untimed, then ``iterations`` times timed
  with :func:`time.perf_counter_ns` (an optional ``setup`` runs before each call, untimed), and
  returns :func:`summarize`'s figures: p50/p95/p99/mean/min/max in ms and throughput in ops/s.
- :func:`floor` is the reference every figure sits beside: a prepared ``SELECT 1`` round trip
  on the same connection (what any statement costs at least).
- :func:`explain` runs ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` and flags Seq Scan and
  Sort nodes.
- :func:`write_result` writes ``bench/results/<name>-<timestamp>.json``; :func:`progress`
  prints a timestamped line to stderr; :func:`format_table` renders the figures as text.

Nothing here asserts a duration: benchmarks report, tests check behaviour only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

RESULTS_DIR = Path(__file__).resolve().parent / "results"

_QUIET = False
_T0 = time.perf_counter()


# --- progress --------------------------------------------------------------------------------


def set_quiet(quiet: bool) -> None:
    global _QUIET
    _QUIET = quiet


def progress(message: str) -> None:
    """One line on stderr, prefixed with the seconds since the process started."""
    if not _QUIET:
        print(f"[{time.perf_counter() - _T0:8.1f}s] {message}", file=sys.stderr, flush=True)


# --- connection ------------------------------------------------------------------------------


def connection_info(dsn: str | None) -> tuple[str, str]:
    """(conninfo, where): ``dsn``, else ``PYMEM_DSN``, else the embedded server's URI.

    ``where`` is ``"dsn"``, ``"PYMEM_DSN"`` or ``"embedded:<data dir>"``. The embedded server is
    started (or reused) exactly as ``pymem.Database()`` does: in ``PYMEM_DATA_DIR``, which
    defaults to the user's data directory, so set it to a scratch folder for benchmarks.
    """
    if dsn:
        return dsn, "dsn"
    from pymem import Settings
    from pymem.connection import resolve_conninfo

    settings = Settings()
    if settings.dsn:
        return resolve_conninfo(settings), "PYMEM_DSN"
    return resolve_conninfo(settings), f"embedded:{settings.data_dir}"


def environment(conn: psycopg.Connection) -> dict[str, Any]:
    """The machine and server a result was measured on."""
    row = conn.execute(
        "SELECT current_setting('server_version'), "
        "(SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
        "current_setting('shared_buffers'), current_setting('work_mem'), "
        "current_setting('max_parallel_workers_per_gather'), current_setting('jit'), "
        "current_setting('synchronous_commit'), current_setting('fsync')"
    ).fetchone()
    keys = ("server_version", "pgvector_version", "shared_buffers", "work_mem",
            "max_parallel_workers_per_gather", "jit", "synchronous_commit", "fsync")
    mem_bytes = None
    try:
        mem_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "cpu_count": os.cpu_count(),
        "memory_gb": round(mem_bytes / 2**30, 1) if mem_bytes else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        **dict(zip(keys, row, strict=True)),
    }


def is_citus(conn: psycopg.Connection) -> bool:
    """Whether the database is a Citus coordinator (the citus extension is installed): the
    benchmarks then load with statements Citus can distribute and skip the plans it cannot give."""
    return conn.execute("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')").fetchone()[0]


# On a Citus coordinator the per-user API calls are delegated to the worker holding the user:
# auto_explain on the coordinator's session makes that call fail ("failure on connection marked
# as essential"), and the statements it would show run on the worker anyway.
NESTED_NOT_ON_CITUS = ("not collected on Citus: the call is delegated to the worker that holds the key, where "
                       "its statements run; auto_explain in the coordinator's session breaks the delegated call")


def explain_or_reason(conn: psycopg.Connection, citus: bool, query: str, params: Any = None, **kw: Any) -> dict[str, Any]:
    """:func:`explain`; on Citus a statement it cannot plan gives ``{"error": "not collected on
    Citus: ..."}`` instead of failing the run (on plain PostgreSQL errors still propagate)."""
    if not citus:
        return explain(conn, query, params, **kw)
    try:
        return explain(conn, query, params, **kw)
    except psycopg.Error as exc:
        if not conn.autocommit:
            conn.rollback()
        return {"query": shorten(" ".join(query.split()))[:300],
                "error": f"not collected on Citus: {str(exc).strip().splitlines()[0]}"}


# --- timing ----------------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); monotone in ``q``."""
    if not sorted_values:
        return math.nan
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_ns: Iterable[int], wall_ns: int | None = None, *, warmup: int = 0) -> dict[str, Any]:
    """Figures of one measurement. ``throughput_per_s`` is iterations over the wall time of the
    timed loop (setup included when there is one), else over the sum of the samples."""
    ms = sorted(s / 1e6 for s in samples_ns)
    n = len(ms)
    total_ms = sum(ms)
    wall_ms = wall_ns / 1e6 if wall_ns is not None else total_ms
    return {
        "iterations": n,
        "warmup": warmup,
        "p50_ms": round(percentile(ms, 0.50), 4),
        "p95_ms": round(percentile(ms, 0.95), 4),
        "p99_ms": round(percentile(ms, 0.99), 4),
        "mean_ms": round(total_ms / n, 4) if n else math.nan,
        "min_ms": round(ms[0], 4) if n else math.nan,
        "max_ms": round(ms[-1], 4) if n else math.nan,
        "throughput_per_s": round(n / (wall_ms / 1e3), 1) if n and wall_ms > 0 else math.nan,
    }


def measure(
    fn: Callable[[int], Any],
    iterations: int,
    warmup: int,
    *,
    setup: Callable[[int], Any] | None = None,
) -> dict[str, Any]:
    """Run ``fn(i)`` ``warmup`` times (i < 0) then ``iterations`` times (i >= 0), timing each
    call. With ``setup``, ``fn(i, setup(i))`` is called and only ``fn`` is timed."""
    clock = time.perf_counter_ns
    for i in range(-warmup, 0):
        fn(i, setup(i)) if setup else fn(i)
    samples: list[int] = []
    wall0 = clock()
    for i in range(iterations):
        if setup:
            arg = setup(i)
            t0 = clock()
            fn(i, arg)
        else:
            t0 = clock()
            fn(i)
        samples.append(clock() - t0)
    wall = clock() - wall0
    return summarize(samples, wall, warmup=warmup) | {"_samples_ns": samples}


def floor(conn: psycopg.Connection, iterations: int, warmup: int) -> dict[str, Any]:
    """A prepared ``SELECT 1`` round trip on ``conn``: the least any statement costs."""

    def once(_: int) -> None:
        conn.execute("SELECT 1", prepare=True).fetchone()

    return measure(once, iterations, warmup)


def commit_floor(conn: psycopg.Connection, iterations: int, warmup: int) -> dict[str, Any] | None:
    """The least a durable write costs: a prepared statement that writes one WAL record in its
    own transaction (``pg_logical_emit_message(true, ...)``; ``conn`` in autocommit), so its
    commit waits for the WAL flush as the server's synchronous_commit says. None when the role
    may not call it (by default only superusers may)."""

    def once(_: int) -> None:
        conn.execute("SELECT pg_catalog.pg_logical_emit_message(true, 'pymem-bench', '')", prepare=True).fetchone()

    try:
        once(0)
    except psycopg.Error:
        if not conn.autocommit:
            conn.rollback()
        return None
    return measure(once, iterations, warmup)


def strip_samples(results: dict[str, Any]) -> dict[str, Any]:
    """The measurements without their raw samples (``keep`` them with ``--samples``)."""
    return {k: {kk: vv for kk, vv in v.items() if kk != "_samples_ns"} for k, v in results.items()}


# --- plans -----------------------------------------------------------------------------------


def _nodes(plan: dict[str, Any]) -> Iterable[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)
    # on a Citus coordinator: the plans the workers ran (EXPLAIN shows them under each task)
    for task in (plan.get("Distributed Query") or {}).get("Job", {}).get("Tasks", ()):
        for remote in task.get("Remote Plan") or ():
            for doc in remote if isinstance(remote, list) else [remote]:
                if isinstance(doc, dict) and "Plan" in doc:
                    yield from _nodes(doc["Plan"])


_LONG_ARRAY = re.compile(r"\[[^\[\]]{80,}\]")


def shorten(text: Any) -> Any:
    """Long array literals (vectors) in a query or sort key, elided for reading."""
    if isinstance(text, str):
        return _LONG_ARRAY.sub("[...]", text)
    if isinstance(text, list):
        return [shorten(t) for t in text]
    return text


_SHOWN = ("Node Type", "Relation Name", "Index Name", "Filter", "Sort Key", "Sort Method", "Actual Rows")


def plan_flags(plan: dict[str, Any]) -> dict[str, Any]:
    """Node types of a JSON plan (the ``Plan`` object), and which are Seq Scan or Sort nodes."""
    nodes = list(_nodes(plan))
    types = [n["Node Type"] for n in nodes]
    flagged = [
        {k: shorten(n.get(k)) for k in _SHOWN if n.get(k) is not None}
        for n in nodes
        if n["Node Type"] in ("Seq Scan", "Sort", "Incremental Sort", "Parallel Seq Scan")
    ]
    return {
        "node_types": types,
        "indexes": sorted({n["Index Name"] for n in nodes if n.get("Index Name")}),
        "seq_scan": any(t in ("Seq Scan", "Parallel Seq Scan") for t in types),
        "sort": any(t in ("Sort", "Incremental Sort") for t in types),
        "flagged": flagged,
        "scans": [
            {k: shorten(n.get(k)) for k in ("Node Type", "Relation Name", "Index Name", "Index Cond", "Filter")
             if n.get(k) is not None}
            for n in nodes if "Relation Name" in n or "Index Name" in n
        ],
    }


def explain(conn: psycopg.Connection, query: str, params: Any = None, *, analyze: bool = True) -> dict[str, Any]:
    """``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` of ``query`` (or, with ``analyze=False``,
    ``EXPLAIN (GENERIC_PLAN, FORMAT JSON)``: the plan a prepared statement may settle on)."""
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "GENERIC_PLAN, FORMAT JSON"
    row = conn.execute(f"EXPLAIN ({options}) {query}", params, prepare=False).fetchone()
    doc = row[0][0] if isinstance(row[0], list) else json.loads(row[0])[0]
    top = doc["Plan"]
    out = {"query": shorten(" ".join(query.split())), **plan_flags(top)}
    if analyze:
        out["execution_ms"] = doc.get("Execution Time")
        out["planning_ms"] = doc.get("Planning Time")
        out["shared_hit_blocks"] = top.get("Shared Hit Blocks")
        out["shared_read_blocks"] = top.get("Shared Read Blocks")
    out["plan"] = doc
    return out


def function_plans(conn: psycopg.Connection, call: Callable[[], Any], *, calls: int = 8,
                   match: str = "") -> dict[str, Any] | None:
    """The plans of the statements a SQL function runs inside (auto_explain with
    log_nested_statements, its LOG messages sent to this client), after ``calls`` calls so
    that a PL/pgSQL statement has had the chance to switch to its cached generic plan. Returns
    the last logged plan whose query text contains ``match``, or None when auto_explain cannot
    be loaded (it needs a superuser, or the library in $libdir/plugins). Changes only this
    session's settings (use a connection of its own)."""
    messages: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary:
            messages.append(diag.message_primary)

    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error:
        return None
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                    "auto_explain.log_format = json", "client_min_messages = log"):
        conn.execute(f"SET {setting}")
    conn.add_notice_handler(keep)
    try:
        for _ in range(calls):
            call()
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("RESET client_min_messages")
        conn.execute("RESET auto_explain.log_min_duration")
    found = None
    for text in messages:
        head, sep, body = text.partition("plan:")
        if not sep:
            continue
        try:
            doc = json.loads(body)
        except ValueError:
            continue
        if match in doc.get("Query Text", ""):
            found = doc
    if found is None:
        return None
    return {"query": shorten(" ".join(found.get("Query Text", "").split())), **plan_flags(found["Plan"]),
            "plan": found}


# --- results ---------------------------------------------------------------------------------


def write_result(name: str, data: dict[str, Any], results_dir: Path | str | None = None) -> Path:
    """Write ``data`` as ``<results_dir>/<name>-<UTC timestamp>.json`` and return the path."""
    folder = Path(results_dir) if results_dir is not None else RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = folder / f"{name}-{stamp}.json"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{name}-{stamp}-{n}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def finish(name: str, result: dict[str, Any], *, write: bool, results_dir: Path | str | None,
           where: str) -> dict[str, Any]:
    """The end of a benchmark run: write the JSON result (unless told not to) and remind that an
    embedded server it started keeps running."""
    if write:
        path = write_result(name, result, results_dir)
        result["result_file"] = str(path)
        progress(f"wrote {path}")
    if where.startswith("embedded:"):
        progress("the embedded server keeps running: stop it with `pymem server stop` (same PYMEM_DATA_DIR)")
    return result


def format_table(results: dict[str, dict[str, Any]], floor_key: str = "floor") -> str:
    """A fixed-width table of the measurements (``x floor`` = p50 over the floor's p50)."""
    base = results.get(floor_key, {}).get("p50_ms")
    head = f"{'measurement':<26} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'mean ms':>9} {'ops/s':>9} {'x floor':>8}"
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        ratio = f"{r['p50_ms'] / base:8.1f}" if base else f"{'':>8}"
        lines.append(
            f"{name:<26} {r['p50_ms']:9.3f} {r['p95_ms']:9.3f} {r['p99_ms']:9.3f} {r['mean_ms']:9.3f} "
            f"{r['throughput_per_s']:9.0f} {ratio}"
        )
    return "\n".join(lines)


def command_line(script: str, argv: list[str] | None) -> str:
    """The command that produced a result, for the record (``--dsn`` is not repeated)."""
    args = list(sys.argv[1:] if argv is None else argv)
    shown: list[str] = []
    skip = False
    for a in args:
        if skip:
            shown.append("<dsn>")
            skip = False
        elif a == "--dsn":
            shown.append(a)
            skip = True
        elif a.startswith("--dsn="):
            shown.append("--dsn=<dsn>")
        else:
            shown.append(a)
    return " ".join(["python", script, *shown])


# --- plans of every statement a function runs (added for bench/conversations.py) ---------------

_DURATION = re.compile(r"duration: ([0-9.]+) ms")


def nested_plans(conn: psycopg.Connection, call: Callable[[], Any], *, calls: int = 8,
                 analyze: bool = True) -> list[dict[str, Any]] | None:
    """Every statement the last of ``calls`` calls ran, nested ones included, in the order they
    finished (the top-level statement last): auto_explain with ``log_nested_statements`` and,
    with ``analyze``, ``log_analyze``/``log_buffers``, its LOG messages sent to this client.
    Each entry: the query text, ``duration_ms`` (auto_explain's, which includes the statement's
    nested ones), :func:`plan_flags` and the JSON plan. The first ``calls - 1`` calls let
    PL/pgSQL settle on its cached (custom or generic) plans. None when auto_explain cannot be
    loaded. Changes only this session's settings (use a connection of its own)."""
    messages: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary:
            messages.append(diag.message_primary)

    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error:
        return None
    settings = ["auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                "auto_explain.log_format = json"]
    if analyze:
        settings += ["auto_explain.log_analyze = on", "auto_explain.log_buffers = on", "auto_explain.log_timing = on"]
    for setting in settings:
        conn.execute(f"SET {setting}")
    conn.execute("SET client_min_messages = log")
    conn.add_notice_handler(keep)
    try:
        for _ in range(calls - 1):
            call()
        messages.clear()
        call()
    finally:
        conn.remove_notice_handler(keep)
        conn.execute("RESET client_min_messages")
        for setting in settings:
            conn.execute(f"RESET {setting.split(' = ')[0]}")
    out: list[dict[str, Any]] = []
    for text in messages:
        head, sep, body = text.partition("plan:")
        if not sep:
            continue
        try:
            doc = json.loads(body)
        except ValueError:
            continue
        m = _DURATION.search(head)
        out.append({"query": shorten(" ".join(doc.get("Query Text", "").split())),
                    "duration_ms": float(m.group(1)) if m else None, **plan_flags(doc["Plan"]), "plan": doc})
    return out


def git_revision() -> str | None:
    """The commit the benchmark ran from, with ``-dirty`` when the work tree had changes (None
    outside a git checkout)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def positive(value: str) -> int:
    """An argparse type: a whole number of at least 1."""
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def scratch_database(conninfo: str, name: str) -> str:
    """A new empty database ``name`` beside the one ``conninfo`` names (dropped first if there),
    migrated by pymem: its DSN."""
    from psycopg.conninfo import make_conninfo

    import pymem

    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    dsn = make_conninfo(conninfo, dbname=name)
    pymem.migrate(dsn)
    return dsn
