"""Facts benchmark: generate a large pymem.facts table, then time the hot operations on it.

    PYMEM_DATA_DIR=/tmp/bench-data python bench/facts.py --rows 1000000 --fresh

Steps: connect (``--dsn``, else ``PYMEM_DSN``, else the embedded server of ``PYMEM_DATA_DIR``),
migrate, with ``--fresh`` truncate pymem.facts and pymem.fact_embeddings, generate ``--rows``
facts set-based in chunks (bench/facts_generate.sql), VACUUM ANALYZE, embed the probe user's
active facts (HashEmbedder, 384-d), then measure each operation ``--iterations`` times after
``--warmup`` untimed runs, beside the ``SELECT 1`` floor, record EXPLAIN plans, and write
bench/results/facts-<timestamp>.json. ``main(argv)`` returns the same dict.

The probe user (project ``acme``, scope ``user``, id ``probe``) has exactly 200 active facts and
50 superseded ones, interleaved with everyone else's. Reads and searches use it; writes go to a
fresh subject of the same project (``bench-writer-<token>``), so the probe stays at 200.
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

import pymem
from bench import common
from pymem.embedders import HashEmbedder
from pymem.queries import Q

GENERATE_SQL = Path(__file__).resolve().parent / "facts_generate.sql"

PROJECTS = ["acme", "globex", "", "initech", "umbrella", "hooli", "stark", "wayne"]
PROBE_PROJECT = "acme"
PROBE_ACTIVE = 200
PROBE_HISTORY = 50
PROBE_ROWS = PROBE_ACTIVE + PROBE_HISTORY
MIN_ROWS = 4 * PROBE_ACTIVE + 200
TIME_SPAN = timedelta(days=365)

REQUIRED = (
    "floor",
    "newest50_sql",
    "newest50_memory",
    "add_memory",
    "add_sql",
    "add_idempotent_memory",
    "supersede_memory",
    "search_memory",
)

# facts_search by vector alone: what SEARCH_SQL (the plain-SQL baseline) computes; Memory.retrieve
# sends its text too (hybrid ranking, issue 14)
SEARCH_VECTOR_ONLY = {"query_text": None, "metadata": None, "lexical_weight": 0.0}
SEARCH_QUERIES = [
    "how does the user want to be contacted",
    "programming languages the user knows",
    "travel plans",
    "food preferences",
    "meeting schedule preferences",
    "what is the user working on",
    "database experience PostgreSQL",
    "does the user like dark mode",
    "invoices and refunds",
    "music and hobbies",
    "privacy concerns",
    "answer style short or detailed",
    "Kubernetes deployment",
    "weekly report updates",
    "mobile app issues",
    "machine learning projects",
]


@dataclass(frozen=True)
class Subject:
    project_id: str
    scope: str
    scope_id: str

    def params(self) -> dict[str, str]:
        return {"project_id": self.project_id, "scope": self.scope, "scope_id": self.scope_id}


def load_sections(path: Path = GENERATE_SQL) -> dict[str, str]:
    """The ``-- name: NAME`` sections of a SQL file, like pymem/queries.py reads queries.sql."""
    sections: dict[str, str] = {}
    parts = re.split(r"^-- name: (\w+)\s*$", path.read_text(), flags=re.MULTILINE)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        sections[name] = body.strip().rstrip(";")
    return sections


# --- arguments -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/facts.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="facts to generate (default 1000000)")
    p.add_argument("--dsn", help="libpq connection string (default: PYMEM_DSN, else the embedded server)")
    p.add_argument("--fresh", action="store_true", help="truncate pymem.facts and pymem.fact_embeddings first")
    p.add_argument("--skip-generate", action="store_true",
                   help="measure the data already there (the probe user must exist)")
    p.add_argument("--probe-id", help="the probe user's id (default: 'probe', or the first free 'probe-N')")
    p.add_argument("--iterations", type=int, default=1000, help="timed runs per measurement (default 1000)")
    p.add_argument("--warmup", type=int, default=50, help="untimed runs before each measurement (default 50)")
    p.add_argument("--seed", type=int, default=1, help="generation seed (default 1)")
    p.add_argument("--chunk", type=int, default=100_000, help="rows per INSERT (rounded to a multiple of 4)")
    p.add_argument("--no-embeddings", action="store_true", help="skip the probe's vectors and semantic search")
    p.add_argument("--other-embeddings", type=int, default=0, metavar="N",
                   help="also store random vectors for the N newest active facts of other subjects, so "
                        "fact_embeddings has a realistic size for the search plans (default 0)")
    p.add_argument("--no-verify", action="store_true", help="skip the integrity checks after generation")
    p.add_argument("--results-dir", default=None, help="where to write the JSON (default bench/results)")
    p.add_argument("--no-write", action="store_true", help="do not write a result file")
    p.add_argument("--samples", action="store_true", help="keep every sample (ns) in the JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    if not args.skip_generate and args.rows < MIN_ROWS:
        p.error(f"--rows must be at least {MIN_ROWS} (the probe user alone takes {PROBE_ROWS} rows)")
    if args.iterations < 1 or args.warmup < 0:
        p.error("--iterations must be >= 1 and --warmup >= 0")
    args.chunk = max(4, args.chunk - args.chunk % 4)
    return args


# --- generation ------------------------------------------------------------------------------


def session(conn: psycopg.Connection) -> None:
    """Bulk-load settings for this session only: no commit flush wait, no statement timeout."""
    conn.execute("SET synchronous_commit = off")
    conn.execute("SET statement_timeout = 0")


def choose_probe(conn: psycopg.Connection, wanted: str | None, *, existing: bool) -> Subject:
    """The probe subject: ``wanted``, else 'probe', else (appending to a table that already has
    one) the first 'probe-N' that holds no facts yet. ``existing``: it must already hold facts."""
    def used(scope_id: str) -> bool:
        return conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pymem.facts WHERE project_id = %s AND scope = 'user' AND scope_id = %s)",
            (PROBE_PROJECT, scope_id),
        ).fetchone()[0]

    if wanted:
        if not existing and used(wanted):
            raise SystemExit(f"the probe user {wanted!r} already has facts: pass --fresh or another --probe-id")
        return Subject(PROBE_PROJECT, "user", wanted)
    if existing:
        return Subject(PROBE_PROJECT, "user", "probe")
    name, n = "probe", 1
    while used(name):
        n += 1
        name = f"probe-{n}"
    return Subject(PROBE_PROJECT, "user", name)


def generate(conn: psycopg.Connection, rows: int, probe: Subject, *, seed: int, chunk: int) -> dict[str, Any]:
    """Insert ``rows`` facts in chunks (one INSERT ... SELECT generate_series each)."""
    q = load_sections()
    conn.execute(q["uniform"])
    base = conn.execute(q["id_base"]).fetchone()[0]
    conn.execute(q["reserve_ids"], {"last": base + rows})
    groups = rows // 4
    params = {
        "base": base,
        "n": rows,
        "t0": datetime.now(UTC),
        "step": TIME_SPAN / rows,
        "seed": seed,
        "projects": PROJECTS,
        "users": max(100, rows // 25),
        "agents": max(5, rows // 20_000),
        "teams": max(5, rows // 10_000),
        "stride": groups // PROBE_ACTIVE,
        "probe_active": PROBE_ACTIVE,
        "probe_history": PROBE_HISTORY,
        "probe_project": probe.project_id,
        "probe_id": probe.scope_id,
    }
    chunks = []
    t_start = time.perf_counter_ns()
    for lo in range(0, rows, chunk):
        hi = min(rows, lo + chunk)
        t0 = time.perf_counter_ns()
        cur = conn.execute(q["chunk"], params | {"lo": lo, "hi": hi}, prepare=False)
        dt = (time.perf_counter_ns() - t0) / 1e9
        chunks.append({"lo": lo, "hi": hi, "inserted": cur.rowcount, "seconds": round(dt, 3)})
        done = (time.perf_counter_ns() - t_start) / 1e9
        common.progress(f"generated {hi:>10,}/{rows:,} rows  (chunk {hi - lo:,} in {dt:.1f}s, "
                        f"{(hi - lo) / dt:,.0f} rows/s; total {hi / done:,.0f} rows/s)")
    insert_s = (time.perf_counter_ns() - t_start) / 1e9
    t0 = time.perf_counter_ns()
    conn.execute("VACUUM ANALYZE pymem.facts")
    conn.execute("VACUUM ANALYZE pymem.fact_embeddings")
    vacuum_s = (time.perf_counter_ns() - t0) / 1e9
    common.progress(f"VACUUM ANALYZE in {vacuum_s:.1f}s")
    t0 = time.perf_counter_ns()
    try:  # write the load out now rather than during the measurements (superuser or pg_checkpoint)
        conn.execute("CHECKPOINT")
    except psycopg.Error:
        pass
    checkpoint_s = (time.perf_counter_ns() - t0) / 1e9
    inserted = sum(c["inserted"] for c in chunks)
    return {
        "rows": inserted,
        "requested_rows": rows,
        "insert_seconds": round(insert_s, 2),
        "insert_rows_per_s": round(inserted / insert_s, 0),
        "vacuum_analyze_seconds": round(vacuum_s, 2),
        "checkpoint_seconds": round(checkpoint_s, 2),
        "seconds": round(insert_s + vacuum_s, 2),
        "rows_per_s": round(inserted / (insert_s + vacuum_s), 0),
        "chunk_rows": chunk,
        "chunks": chunks,
        "id_base": base,
        "params": {k: (str(v) if isinstance(v, (datetime, timedelta)) else v) for k, v in params.items()},
    }


def other_embeddings(conn: psycopg.Connection, probe: Subject, embedder: HashEmbedder, count: int,
                     chunk: int) -> dict[str, Any]:
    """Random vectors for ``count`` facts of other subjects (bench/facts_generate.sql)."""
    q = load_sections()
    stored = 0
    t_start = time.perf_counter_ns()
    for lo in range(0, count, chunk):
        hi = min(count, lo + chunk)
        cur = conn.execute(q["other_embeddings"], {
            "embedder": embedder.name, "dim": embedder.dimension, "probe_project": probe.project_id,
            "probe_id": probe.scope_id, "lo": lo, "hi": hi}, prepare=False)
        stored += cur.rowcount
        common.progress(f"random vectors for other subjects: {hi:,}/{count:,}")
    conn.execute("VACUUM ANALYZE pymem.fact_embeddings")
    seconds = (time.perf_counter_ns() - t_start) / 1e9
    return {"requested": count, "stored": stored, "seconds": round(seconds, 2)}


def embed_subject(conn: psycopg.Connection, subject: Subject, embedder: HashEmbedder) -> dict[str, Any]:
    """Vectors for the subject's active facts that have none from ``embedder`` yet."""
    t0 = time.perf_counter_ns()
    rows = conn.cursor(row_factory=dict_row).execute(
        Q["facts_unembedded"], subject.params() | {"embedder": embedder.name, "max_facts": 10000}
    ).fetchall()
    t1 = time.perf_counter_ns()
    from pgvector import Vector

    vectors = [Vector(v) for v in embedder.embed([r["content"] for r in rows])]
    t2 = time.perf_counter_ns()
    stored = 0
    if rows:
        stored = conn.execute(
            Q["fact_embeddings_put"],
            subject.params() | {"embedder": embedder.name, "ids": [r["id"] for r in rows], "embeddings": vectors},
        ).fetchone()[0]
    t3 = time.perf_counter_ns()
    return {
        "embedder": embedder.name,
        "facts": len(rows),
        "stored": stored,
        "embed_seconds": round((t2 - t1) / 1e9, 3),
        "store_seconds": round((t3 - t2 + t1 - t0) / 1e9, 3),
    }


# --- what the table holds ----------------------------------------------------------------------


def subject_counts(conn: psycopg.Connection, subject: Subject) -> dict[str, int]:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE superseded_by IS NULL), count(*) FILTER (WHERE superseded_by IS NOT NULL) "
        "FROM pymem.facts WHERE project_id = %s AND scope = %s AND scope_id = %s",
        (subject.project_id, subject.scope, subject.scope_id),
    ).fetchone()
    return {"active": row[0], "superseded": row[1]}


def dataset(conn: psycopg.Connection) -> dict[str, Any]:
    """Counts, skew and sizes of pymem.facts (one pass for counts, one GROUP BY for subjects)."""
    c = conn.cursor(row_factory=dict_row)
    totals = c.execute(
        """SELECT count(*) AS rows,
                  count(*) FILTER (WHERE superseded_by IS NULL) AS active,
                  count(*) FILTER (WHERE superseded_by IS NOT NULL) AS superseded,
                  count(*) FILTER (WHERE source = 'learned') AS learned,
                  count(*) FILTER (WHERE source = 'trace') AS trace,
                  count(*) FILTER (WHERE scope = 'user') AS user_rows,
                  count(*) FILTER (WHERE scope = 'agent') AS agent_rows,
                  count(*) FILTER (WHERE scope = 'project') AS project_rows,
                  count(DISTINCT project_id) AS projects,
                  round(avg(length(content))) AS avg_content_chars,
                  max(length(content)) AS max_content_chars
           FROM pymem.facts"""
    ).fetchone()
    subjects = c.execute(
        """SELECT count(*) AS subjects,
                  max(n) AS max_facts,
                  percentile_disc(0.5) WITHIN GROUP (ORDER BY n) AS median_facts,
                  percentile_disc(0.9) WITHIN GROUP (ORDER BY n) AS p90_facts,
                  percentile_disc(0.99) WITHIN GROUP (ORDER BY n) AS p99_facts,
                  count(*) FILTER (WHERE n <= 10) AS subjects_le_10_facts,
                  count(*) FILTER (WHERE n >= 1000) AS subjects_ge_1000_facts
           FROM (SELECT count(*) AS n FROM pymem.facts GROUP BY project_id, scope, scope_id) AS s"""
    ).fetchone()
    heaviest = c.execute(
        """SELECT project_id, scope, scope_id, count(*) AS facts,
                  count(*) FILTER (WHERE superseded_by IS NULL) AS active
           FROM pymem.facts WHERE scope = 'user'
           GROUP BY project_id, scope, scope_id ORDER BY count(*) DESC LIMIT 1"""
    ).fetchone()
    sizes = c.execute(
        """SELECT pg_relation_size('pymem.facts') AS heap_bytes,
                  pg_indexes_size('pymem.facts') AS index_bytes,
                  pg_total_relation_size('pymem.facts') AS total_bytes,
                  pg_total_relation_size('pymem.fact_embeddings') AS embeddings_total_bytes"""
    ).fetchone()
    index_sizes = {
        r["name"]: r["bytes"]
        for r in c.execute(
            """SELECT i.indexrelid::regclass::text AS name, pg_relation_size(i.indexrelid) AS bytes
               FROM pg_index AS i WHERE i.indrelid = 'pymem.facts'::regclass ORDER BY 1"""
        ).fetchall()
    }
    return {**totals, **subjects, "heaviest_user": heaviest, **sizes, "index_bytes_each": index_sizes}


def integrity(conn: psycopg.Connection) -> dict[str, Any]:
    """Every CHECK constraint of pymem.facts re-evaluated over every row (in one pass), the
    supersede chains (successor exists, same subject, newer), the uniqueness the partial
    indexes promise, content_key = fact_key(content), and each constraint's convalidated flag.
    All counts are 0 on a healthy table."""
    checks = conn.execute(
        """SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
           WHERE conrelid = 'pymem.facts'::regclass AND contype = 'c' ORDER BY conname"""
    ).fetchall()
    exprs = []
    for name, definition in checks:
        m = re.fullmatch(r"CHECK \((.*)\)(?: NOT VALID)?", definition, flags=re.DOTALL)
        exprs.append(sql.SQL("count(*) FILTER (WHERE ({}) IS FALSE) AS {}").format(
            sql.SQL(m.group(1)), sql.Identifier(name)))
    exprs.append(sql.SQL("count(*) FILTER (WHERE content_key <> pymem.fact_key(content)) AS content_key_mismatch"))
    violations = conn.cursor(row_factory=dict_row).execute(
        sql.SQL("SELECT {} FROM pymem.facts").format(sql.SQL(", ").join(exprs))
    ).fetchone()
    chains = conn.cursor(row_factory=dict_row).execute(
        """SELECT count(*) FILTER (WHERE n.id IS NULL) AS dangling_successor,
                  count(*) FILTER (WHERE n.created_at < o.created_at OR o.superseded_at < o.created_at)
                      AS successor_not_newer
           FROM pymem.facts AS o
           LEFT JOIN pymem.facts AS n
             ON n.project_id = o.project_id AND n.scope = o.scope AND n.scope_id = o.scope_id
            AND n.id = o.superseded_by
           WHERE o.superseded_by IS NOT NULL"""
    ).fetchone()
    dupes = conn.cursor(row_factory=dict_row).execute(
        """SELECT
             (SELECT count(*) FROM (SELECT 1 FROM pymem.facts WHERE superseded_by IS NULL
                GROUP BY project_id, scope, scope_id, content_key HAVING count(*) > 1) AS d)
                AS duplicate_active_content,
             (SELECT count(*) FROM (SELECT 1 FROM pymem.facts WHERE superseded_by IS NOT NULL
                GROUP BY project_id, scope, scope_id, superseded_by HAVING count(*) > 1) AS d) AS two_predecessors"""
    ).fetchone()
    not_valid = [r[0] for r in conn.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'pymem.facts'::regclass AND NOT convalidated"
        # 0048's bound on stored JSON is NOT VALID by design (see bench/conv/integrity.py)
        " AND conname NOT LIKE '%\\_bounded'"
    ).fetchall()]
    counts = {**violations, **chains, **dupes}
    return {"ok": not not_valid and not any(counts.values()), "violations": counts, "not_validated": not_valid}


# --- plans -----------------------------------------------------------------------------------

NEWEST_SQL = """SELECT f.* FROM pymem.facts AS f
 WHERE f.project_id = {project_id} AND f.scope = {scope}
   AND f.scope_id = {scope_id} AND f.superseded_by IS NULL
 ORDER BY f.created_at DESC, f.id DESC
 LIMIT {limit}"""

# For EXPLAIN with literals; the "*_in_function" plans are the live ones. NEWEST_SQL and
# UNEMBEDDED_SQL are facts_newest's subject branch and facts_unembedded (sql/api/facts.sql,
# facts_bulk.sql; keep them in step) written on the table, with the condition of the view
# pymem.active_facts, which those functions read, spelled out. SEARCH_SQL is not a
# copy of anything pymem runs now: it is the plain-SQL baseline of vector search (the subject's
# active facts by cosine distance, unembedded ones first), what facts_search by vector alone
# (SEARCH_VECTOR_ONLY) must match; facts_search itself ranks words and vectors together.
UNEMBEDDED_SQL = """SELECT f.id, f.content FROM pymem.facts AS f
 WHERE f.project_id = {project_id} AND f.scope = {scope}
   AND f.scope_id = {scope_id}
   AND f.superseded_by IS NULL
   AND NOT EXISTS (
       SELECT 1 FROM pymem.fact_embeddings AS e
        WHERE e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id
          AND e.fact_id = f.id AND e.embedder = {embedder})
 ORDER BY f.created_at DESC, f.id DESC
 LIMIT {limit}"""

SEARCH_SQL = """WITH s AS MATERIALIZED (
    SELECT f.id, f.scope_id, f.content, f.confidence, f.source, f.metadata, f.created_at,
           e.embedding <=> {query} AS dist
      FROM pymem.facts AS f
      LEFT JOIN pymem.fact_embeddings AS e
        ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id
       AND e.fact_id = f.id AND e.embedder = {embedder}
     WHERE f.project_id = {project_id} AND f.scope = {scope}
       AND f.scope_id = {scope_id} AND f.superseded_by IS NULL)
(SELECT s.id, s.scope_id, s.content, s.confidence, s.source, s.metadata, s.created_at, NULL::float8
   FROM s WHERE s.dist IS NULL LIMIT 1000)
UNION ALL
(SELECT s.id, s.scope_id, s.content, s.confidence, s.source, s.metadata, s.created_at, 1 - s.dist
   FROM s WHERE s.dist IS NOT NULL ORDER BY s.dist, s.id DESC LIMIT {limit})"""


def _literal(conn: psycopg.Connection, template: str, **values: Any) -> str:
    return sql.SQL(template).format(**{k: sql.Literal(v) for k, v in values.items()}).as_string(conn)


def plans(conn: psycopg.Connection, dsn: str, probe: Subject, heavy: Subject | None,
          embedder: HashEmbedder | None) -> dict[str, Any]:
    """EXPLAIN of the SELECTs inside the SQL functions, with the probe's values as literals
    (ANALYZE, BUFFERS), and the generic plan the function's cached statement may switch to."""
    out: dict[str, Any] = {}
    citus = common.is_citus(conn)

    def explain(query: str, **kw: Any) -> dict[str, Any]:
        return common.explain_or_reason(conn, citus, query, **kw)

    subj = {"project_id": probe.project_id, "scope": probe.scope, "scope_id": probe.scope_id}
    out["newest50"] = explain(_literal(conn, NEWEST_SQL, **subj, limit=50))
    if heavy is not None:
        out["newest50_heavy_user"] = explain(
            _literal(conn, NEWEST_SQL, project_id=heavy.project_id, scope=heavy.scope,
                     scope_id=heavy.scope_id, limit=50))
    # the same query with bitmap scans off: the plain index scan the planner turned down, if it did
    if citus:  # the setting would stay on the coordinator, not reach the worker that plans the scan
        out["newest50_bitmapscan_off"] = {"error": "not collected on Citus: enable_bitmapscan set on the "
                                                   "coordinator does not reach the worker's plan"}
    else:
        with conn.transaction():
            conn.execute("SET LOCAL enable_bitmapscan = off")
            out["newest50_bitmapscan_off"] = common.explain(conn, _literal(conn, NEWEST_SQL, **subj, limit=50))
    generic = {"newest50_generic": NEWEST_SQL.format(project_id="$1::text", scope="$2::text",
                                                      scope_id="$3::text", limit="$4::integer")}
    if embedder is not None:
        generic["unembedded_generic"] = UNEMBEDDED_SQL.format(
            project_id="$1::text", scope="$2::text", scope_id="$3::text", embedder="$4::text", limit="$5::integer")
        generic["search_generic"] = SEARCH_SQL.format(
            project_id="$1::text", scope="$2::text", scope_id="$3::text", embedder="$4::text", query="$5::vector",
            limit="$6::integer")
    for name, query in generic.items():
        try:
            out[name] = explain(query, analyze=False)
        except psycopg.Error as exc:  # GENERIC_PLAN needs PostgreSQL 16
            out[name] = {"error": str(exc).strip()}
    # what the functions really run (PL/pgSQL caches its statements' plans, possibly generic)
    if citus:
        for name in ("newest50_in_function", *(("search_in_function", "unembedded_in_function")
                                               if embedder is not None else ())):
            out[name] = {"error": common.NESTED_NOT_ON_CITUS}
    else:
        with pymem.connect(dsn) as side:
            cur = side.cursor()
            newest = probe.params() | {"max_facts": 50}
            out["newest50_in_function"] = common.function_plans(
                side, lambda: cur.execute(Q["facts_newest"], newest).fetchall(), match="ORDER BY f.created_at DESC"
            ) or {"error": "auto_explain is not available to this role"}
            if embedder is not None:
                from pgvector import Vector

                search = probe.params() | {"embedder": embedder.name, "k": 5, **SEARCH_VECTOR_ONLY,
                                           "query_vector": Vector(embedder.embed([SEARCH_QUERIES[1]])[0])}
                out["search_in_function"] = common.function_plans(
                    side, lambda: cur.execute(Q["facts_search"], search).fetchall(), match="<=>"
                ) or {"error": "auto_explain is not available to this role"}
                unembedded = probe.params() | {"embedder": embedder.name, "max_facts": 10000}
                out["unembedded_in_function"] = common.function_plans(
                    side, lambda: cur.execute(Q["facts_unembedded"], unembedded).fetchall(), match="NOT EXISTS"
                ) or {"error": "auto_explain is not available to this role"}
    if embedder is not None:
        from pgvector import Vector

        qvec = Vector(embedder.embed([SEARCH_QUERIES[0]])[0])
        out["unembedded"] = explain(_literal(conn, UNEMBEDDED_SQL, **subj, embedder=embedder.name, limit=10000))
        search = sql.SQL(SEARCH_SQL).format(
            project_id=sql.Literal(probe.project_id), scope=sql.Literal(probe.scope),
            scope_id=sql.Literal(probe.scope_id), embedder=sql.Literal(embedder.name), limit=sql.Literal(5),
            query=sql.SQL("{}::vector").format(sql.Literal(qvec.to_text())),
        )
        out["search"] = explain(search.as_string(conn))
    return out


# --- measurements ----------------------------------------------------------------------------


def measurements(conn: psycopg.Connection, db: pymem.Database, probe: Subject, heavy: Subject | None,
                 args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    n, w = args.iterations, args.warmup
    token = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + "-" + secrets.token_hex(3)
    writer = Subject(probe.project_id, "user", f"bench-writer-{token}")
    mem = pymem.Memory(project_id=probe.project_id, db=db)
    out: dict[str, dict[str, Any]] = {}
    dict_cur = conn.cursor(row_factory=dict_row)

    def run(name: str, fn, **kw) -> None:
        common.progress(f"measuring {name} ({w} warm-up + {n} timed)")
        out[name] = common.measure(fn, n, w, **kw)
        r = out[name]
        common.progress(f"  {name}: p50 {r['p50_ms']:.3f} ms, p95 {r['p95_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms")

    # the references: a round trip, a round trip through the pool, a committed write
    common.progress(f"measuring floor ({w} warm-up + {n} timed)")
    out["floor"] = common.floor(conn, n, w)
    common.progress(f"measuring floor_commit ({w} warm-up + {n} timed)")
    commit = common.commit_floor(conn, n, w)
    if commit is not None:
        out["floor_commit"] = commit

    def pool_select1(i: int) -> None:
        with db.connection() as c:
            c.execute("SELECT 1", prepare=True).fetchone()

    run("floor_pool", pool_select1)

    # newest 50 of the probe user
    newest = probe.params() | {"max_facts": 50}
    assert len(dict_cur.execute(Q["facts_newest"], newest).fetchall()) == 50
    run("newest50_sql", lambda i: dict_cur.execute(Q["facts_newest"], newest).fetchall())
    got = mem.retrieve(tier="user", id=probe.scope_id, limit=50)
    assert len(got) == 50 and all(f.active for f in got)
    run("newest50_memory", lambda i: mem.retrieve(tier="user", id=probe.scope_id, limit=50))
    if heavy is not None:
        heavy_params = heavy.params() | {"max_facts": 50}
        run("newest50_sql_heavy_user", lambda i: dict_cur.execute(Q["facts_newest"], heavy_params).fetchall())

    # semantic search of the probe user
    if not args.no_embeddings:
        from pgvector import Vector

        embedder = HashEmbedder()
        mem_e = pymem.Memory(project_id=probe.project_id, db=db, embedder=embedder)
        queries = SEARCH_QUERIES
        vectors = [Vector(v) for v in embedder.embed(queries)]
        run("search_embed_query", lambda i: embedder.embed([queries[i % len(queries)]]))
        unembedded = probe.params() | {"embedder": embedder.name, "max_facts": 10000}
        assert dict_cur.execute(Q["facts_unembedded"], unembedded).fetchall() == []
        run("search_unembedded_sql", lambda i: dict_cur.execute(Q["facts_unembedded"], unembedded).fetchall())
        search = probe.params() | {"embedder": embedder.name, "k": 5, **SEARCH_VECTOR_ONLY}
        run("search_sql", lambda i: dict_cur.execute(
            Q["facts_search"], search | {"query_vector": vectors[i % len(vectors)]}).fetchall())
        hits = mem_e.retrieve(queries[0], tier="user", id=probe.scope_id, k=5)
        assert len(hits) == 5 and all(h.similarity is not None for h in hits)
        run("search_memory", lambda i: mem_e.retrieve(queries[i % len(queries)], tier="user",
                                                      id=probe.scope_id, k=5))

    # writes, to the writer subject
    def add_params(content: str) -> dict[str, Any]:
        from pymem.facts import FactWrite

        return writer.params() | {"content": content, "write": FactWrite().checked(), "max_learned": 200,
                                  "embedding": None, "embedder": None}

    run("add_memory", lambda i: mem.persist(f"{token} added through Memory, run {i}", id=writer.scope_id))
    run("add_sql", lambda i: conn.execute(Q["fact_add"], add_params(f"{token} added through SQL, run {i}")).fetchall())
    same = f"{token} the same fact every time"
    first = mem.persist(same, id=writer.scope_id)
    run("add_idempotent_memory", lambda i: mem.persist(same, id=writer.scope_id))
    assert mem.persist(same, id=writer.scope_id) == first
    same_params = add_params(same)
    run("add_idempotent_sql", lambda i: conn.execute(Q["fact_add"], same_params).fetchall())

    run("supersede_memory",
        lambda i, fid: mem.update(f"{token} new version {i}", fact_id=fid, id=writer.scope_id),
        setup=lambda i: mem.persist(f"{token} to be superseded through Memory {i}", id=writer.scope_id))

    def supersede_sql(i: int, fid: int) -> None:
        from pymem.facts import FactWrite

        conn.execute(Q["fact_supersede"], writer.params() | {
            "new_content": f"{token} new SQL version {i}", "id": fid, "old_content": None,
            "write": FactWrite().checked(), "embedding": None, "embedder": None,
        }).fetchall()

    run("supersede_sql", supersede_sql,
        setup=lambda i: mem.persist(f"{token} to be superseded through SQL {i}", id=writer.scope_id))

    # the floor again: how much the machine drifted while measuring
    common.progress(f"measuring floor_end ({w} warm-up + {n} timed)")
    out["floor_end"] = common.floor(conn, n, w)
    return out


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.set_quiet(args.quiet)
    started = datetime.now(UTC)
    dsn, where = common.connection_info(args.dsn)
    common.progress(f"database: {where}")
    pymem.migrate(dsn)
    result: dict[str, Any] = {
        "benchmark": "facts",
        "command": common.command_line("bench/facts.py", argv),
        "started_at": started.isoformat(),
        "connection": where,
        "config": {k: v for k, v in vars(args).items() if k not in ("dsn",)},
    }
    with pymem.connect(dsn) as conn:
        result["environment"] = common.environment(conn)
        session(conn)
        if args.fresh:
            common.progress("truncating pymem.facts and pymem.fact_embeddings")
            conn.execute("TRUNCATE pymem.fact_lexemes, pymem.fact_embeddings, pymem.facts RESTART IDENTITY")
        probe = choose_probe(conn, args.probe_id, existing=args.skip_generate)
        if args.skip_generate:
            result["generation"] = {"skipped": True}
        else:
            common.progress(f"generating {args.rows:,} facts in chunks of {args.chunk:,} (probe {probe.scope_id!r})")
            result["generation"] = generate(conn, args.rows, probe, seed=args.seed, chunk=args.chunk)
            g = result["generation"]
            common.progress(f"generated {g['rows']:,} rows in {g['seconds']:.1f}s ({g['rows_per_s']:,.0f} rows/s, "
                            f"VACUUM ANALYZE included)")
        embedder = None if args.no_embeddings else HashEmbedder()
        if embedder is not None:
            result["embeddings"] = embed_subject(conn, probe, embedder)
            if args.other_embeddings:
                result["embeddings"]["others"] = other_embeddings(
                    conn, probe, embedder, args.other_embeddings, args.chunk)
            conn.execute("ANALYZE pymem.fact_embeddings")
        common.progress("collecting dataset statistics")
        result["dataset"] = dataset(conn)
        if not args.no_verify and not args.skip_generate:
            common.progress("checking integrity (every CHECK over every row, chains, uniqueness)")
            result["integrity"] = integrity(conn)
        # measure with the server's own settings, not the bulk-load ones (the full-table
        # statistics and checks above run without a statement timeout)
        conn.execute("RESET synchronous_commit")
        conn.execute("RESET statement_timeout")
        before = subject_counts(conn, probe)
        if before["active"] != PROBE_ACTIVE:
            raise SystemExit(f"the probe user {probe.scope_id!r} has {before['active']} active facts, "
                             f"not {PROBE_ACTIVE}")
        h = result["dataset"]["heaviest_user"]
        heavy = Subject(h["project_id"], h["scope"], h["scope_id"]) if h else None
        common.progress("EXPLAIN of the statements inside the SQL functions")
        result["explain"] = plans(conn, dsn, probe, heavy, embedder)
        settings = pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1)
        with pymem.Database(settings, migrate=False) as db:
            meas = measurements(conn, db, probe, heavy, args)
        after = subject_counts(conn, probe)
    result["probe"] = {**asdict(probe), "before": before, "after": after}
    result["measurements"] = meas if args.samples else common.strip_samples(meas)
    result["finished_at"] = datetime.now(UTC).isoformat()
    env = result["environment"]
    print(f"{result['command']}  ({where}, {env['cpu_count']} cores, PostgreSQL {env['server_version']}, "
          f"pgvector {env['pgvector_version']})")
    print(common.format_table(result["measurements"]))
    print("EXPLAIN (Seq Scan / Sort nodes):")
    for name, plan in result["explain"].items():
        if "error" in plan:
            print(f"  {name:<26} {plan['error']}")
        else:
            flagged = ", ".join(f"{f['Node Type']}" + (f" on {f['Relation Name']}" if "Relation Name" in f else "")
                                for f in plan["flagged"]) or "none"
            print(f"  {name:<26} {' -> '.join(plan['node_types'])}  [flagged: {flagged}]")
    return common.finish("facts", result, write=not args.no_write, results_dir=args.results_dir, where=where)


if __name__ == "__main__":
    main()
