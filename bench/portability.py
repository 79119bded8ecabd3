"""Portability and learned-facts benchmark: export and import of one large user, a long
supersede chain, and turn_record with many learned facts (issue 11, point 4).

    PYMEM_DATA_DIR=/tmp/bench-port python bench/portability.py --facts 100000 --messages 100000 --chain 10000

What it does, in project ``bench-port`` (everything there is deleted first):

1. generates, set-based, user ``port-src`` with ``--facts`` facts (every tenth superseded by
   the next one, a fifth of them learned) and ``--messages`` messages over ``--threads``
   threads with summaries, and user ``port-chain`` with one supersede chain of ``--chain``
   versions (contents alternate, so that only the active version's content is unique);
2. times ``pymem.portability.export_user`` and ``import_user`` (the Python API, the document
   travelling to the client and back, as ``pymem export`` / ``pymem import`` do) for each user:
   the export, the import under a new user, and the import again over that copy with
   ``replace=True``; the copy is checked to hold exactly what was exported;
3. times ``Memory.record`` (one ``turn_record`` call) with 1, 10, 100 and the most learned
   facts a turn may carry (``--learned``), ``--turns`` turns each, new facts every turn,
   under a cap of ``--max-learned``; and records whether one more than the most is refused.

Results: JSON under bench/results/ and a small report on stdout. Nothing here asserts a
duration (tests/benchmarks/test_bench_portability.py checks the behaviour at a tiny size).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

import pymem
import pymem.conversations
from bench import common
from pymem.portability import export_user, import_user

PROJECT = "bench-port"
#: The most learned facts one turn may carry; code older than the limit has none (then 100).
MAX_LEARNED = getattr(pymem.conversations, "MAX_LEARNED_PER_TURN", 100)


def _sizes(value: str) -> list[int]:
    out: list[int] = []
    for part in value.split(","):
        part = part.strip()
        n = MAX_LEARNED if part == "max" else int(part)
        if n < 1:
            raise ValueError(part)
        if n not in out:
            out.append(n)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn", help="connection string (default: PYMEM_DSN, else the embedded server)")
    p.add_argument("--facts", type=int, default=100_000, help="facts of the exported user (history included)")
    p.add_argument("--messages", type=int, default=100_000, help="messages of the exported user")
    p.add_argument("--threads", type=int, default=4, help="threads the messages are spread over")
    p.add_argument("--chain", type=int, default=10_000, help="versions of the long supersede chain")
    p.add_argument("--learned", default="1,10,100,max",
                   help="learned facts per turn, comma-separated ('max': the most a turn may carry)")
    p.add_argument("--turns", type=int, default=20, help="timed turns per learned-facts size")
    p.add_argument("--warmup", type=int, default=2, help="untimed turns per size first")
    p.add_argument("--max-learned", type=int, default=200, help="the cap on a user's learned facts")
    p.add_argument("--no-replace", action="store_true", help="skip the imports with replace=True")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--results-dir", help="where to write the JSON result (default bench/results)")
    args = p.parse_args(argv)
    for name in ("facts", "messages", "threads", "chain", "turns", "max_learned"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.threads > args.messages:
        p.error("--threads must not exceed --messages")
    if args.warmup < 0:
        p.error("--warmup must not be negative")
    try:
        args.learned_sizes = _sizes(args.learned)
    except ValueError:
        p.error("--learned must be positive integers or 'max', comma-separated")
    return args


# Set-based generation, in one transaction under the bench project's tenant. Ids are given
# explicitly (OVERRIDING SYSTEM VALUE, after moving the identity sequence past them) so that a
# version can name its successor.
RESERVE = """SELECT setval(pg_get_serial_sequence('pymem.facts', 'id'),
                           greatest((SELECT coalesce(max(id), 0) FROM pymem.facts),
                                    coalesce(pg_sequence_last_value(pg_get_serial_sequence('pymem.facts', 'id')::regclass),
                                             0)) + %(n)s::bigint) - %(n)s::bigint"""
FACTS = """INSERT INTO pymem.facts (id, project_id, scope, scope_id, content, content_key, confidence, source,
                                    metadata, created_at, superseded_by, superseded_at)
           OVERRIDING SYSTEM VALUE
           SELECT %(base)s::bigint + g, %(project)s, 'user', 'port-src', c, pymem.fact_key(c),
                  CASE WHEN g %% 5 = 0 THEN 0.6 ELSE 1.0 END, CASE WHEN g %% 5 = 0 THEN 'learned' ELSE 'manual' END,
                  CASE WHEN g %% 3 = 0 THEN jsonb_build_object('topic', 'topic ' || g %% 17) ELSE '{}' END,
                  %(t0)s::timestamptz + g * interval '1 second',
                  CASE WHEN g %% 10 = 1 AND g < %(n)s THEN %(base)s::bigint + g + 1 END,
                  CASE WHEN g %% 10 = 1 AND g < %(n)s THEN %(t0)s::timestamptz + (g + 1) * interval '1 second' END
             FROM generate_series(1, %(n)s::int) AS g,
                  LATERAL (SELECT 'Fact number ' || g || ' about the user:' || repeat(' detail', 1 + g %% 7) AS c) AS x"""
CHAIN = """INSERT INTO pymem.facts (id, project_id, scope, scope_id, content, content_key, source, created_at,
                                    superseded_by, superseded_at)
           OVERRIDING SYSTEM VALUE
           SELECT %(base)s::bigint + g, %(project)s, 'user', 'port-chain', c, pymem.fact_key(c), 'manual',
                  %(t0)s::timestamptz + g * interval '1 second',
                  CASE WHEN g < %(n)s THEN %(base)s::bigint + g + 1 END,
                  CASE WHEN g < %(n)s THEN %(t0)s::timestamptz + (g + 1) * interval '1 second' END
             FROM generate_series(1, %(n)s::int) AS g,
                  LATERAL (SELECT CASE WHEN g = %(n)s THEN 'Prefers the newest option'
                                       WHEN g %% 2 = 0 THEN 'Prefers email' ELSE 'Prefers Slack' END AS c) AS x"""
THREADS = """INSERT INTO pymem.threads (project_id, user_id, thread_id, last_seq, summary, summary_through, summary_at)
             SELECT %(project)s, 'port-src', 'thread-' || t, n, 'Summary of thread ' || t, n / 2, %(t0)s::timestamptz
               FROM generate_series(1, %(threads)s::int) AS t,
                    LATERAL (SELECT (%(messages)s::int - t) / %(threads)s::int + 1 AS n) AS x"""
MESSAGES = """INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata,
                                         created_at)
              SELECT %(project)s, 'port-src', 'thread-' || (1 + (g - 1) %% %(threads)s::int),
                     (g - 1) / %(threads)s::int + 1, CASE WHEN g %% 2 = 1 THEN 'user' ELSE 'assistant' END,
                     'Message ' || g || ':' || repeat(' words of the conversation', 1 + g %% 5),
                     CASE WHEN g %% 7 = 0 THEN 0.5 ELSE 1.0 END,
                     CASE WHEN g %% 11 = 0 THEN '{"tool": "search"}'::jsonb ELSE '{}' END,
                     %(t0)s::timestamptz + g * interval '1 second'
                FROM generate_series(1, %(messages)s::int) AS g"""


def generate(conn: psycopg.Connection, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    params = {"project": PROJECT, "t0": "2026-01-01T00:00:00Z", "threads": args.threads, "messages": args.messages}
    with conn.transaction():
        conn.execute("SELECT pymem.set_tenant(%s)", (PROJECT,))
        conn.execute("DELETE FROM pymem.facts WHERE project_id = %s", (PROJECT,))
        conn.execute("DELETE FROM pymem.threads WHERE project_id = %s", (PROJECT,))
        for sql, n in ((FACTS, args.facts), (CHAIN, args.chain)):
            base = conn.execute(RESERVE, {"n": n}).fetchone()[0]
            conn.execute(sql, {**params, "base": base, "n": n})
        conn.execute(THREADS, params)
        conn.execute(MESSAGES, params)
    conn.execute("ANALYZE pymem.facts, pymem.threads, pymem.messages")
    return {"seconds": round(time.perf_counter() - t0, 2)}


def canonical(doc: dict[str, Any]) -> dict[str, Any]:
    """The document without what an import legitimately changes: fact ids (a fact names its
    successor by content and time instead) and the owner."""
    by_id = {f["id"]: f for f in doc["facts"]}
    facts = sorted(
        (f["content"], f["confidence"], f["source"], json.dumps(f["metadata"], sort_keys=True), str(f["created_at"]),
         str(f["superseded_at"]),
         (by_id[f["superseded_by"]]["content"], str(by_id[f["superseded_by"]]["created_at"]))
         if f["superseded_by"] is not None else ())
        for f in doc["facts"]
    )
    return {"facts": facts, "threads": json.loads(json.dumps(doc["threads"], default=str, sort_keys=True))}


def round_trip(db: pymem.Database, source: str, copy: str, replace: bool) -> dict[str, Any]:
    """Export ``source``, import it as ``copy`` (and again with replace), check the copy."""
    out: dict[str, Any] = {}
    t = time.perf_counter()
    doc = export_user(db, source, PROJECT)
    out["export_s"] = time.perf_counter() - t
    rows = len(doc["facts"]) + sum(len(th["messages"]) for th in doc["threads"])
    out["facts"], out["rows"] = len(doc["facts"]), rows
    out["document_mb"] = round(len(json.dumps(doc, default=str)) / 2**20, 1)
    common.progress(f"exported {source}: {len(doc['facts']):,} facts, {rows:,} rows in {out['export_s']:.2f}s")
    t = time.perf_counter()
    done = import_user(db, doc, project_id=PROJECT, user_id=copy)
    out["import_s"] = time.perf_counter() - t
    common.progress(f"imported {copy}: {done} in {out['import_s']:.2f}s")
    if replace:
        t = time.perf_counter()
        import_user(db, doc, project_id=PROJECT, user_id=copy, replace=True)
        out["import_replace_s"] = time.perf_counter() - t
        common.progress(f"imported {copy} again with replace in {out['import_replace_s']:.2f}s")
    out["round_trip_exact"] = canonical(export_user(db, copy, PROJECT)) == canonical(doc)
    out["imported"] = done
    for key in ("export_s", "import_s", "import_replace_s"):
        if key in out:
            out[key] = round(out[key], 3)
            out[key.replace("_s", "_rows_per_s")] = round(rows / out[key]) if out[key] > 0 else None
    return out


def turns(db: pymem.Database, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in args.learned_sizes:
        state = {"turn": 0}

        def extractor(message: str, size: int = size) -> list[str]:
            state["turn"] += 1
            return [f"turn {state['turn']} of size {size}: learned fact {j}" for j in range(size)]

        mem = pymem.Memory(db=db, agent_id="bench", project_id=PROJECT, extractor=extractor,
                           max_learned_facts=args.max_learned)
        user = f"port-turns-{size}"
        learned: list[int] = []

        def once(i: int) -> None:
            learned.append(len(mem.record(f"I said something worth {size} facts ({i})", "Noted.", user=user)
                               .learned_fact_ids))

        m = common.measure(once, args.turns, args.warmup)
        m = {k: v for k, v in m.items() if k != "_samples_ns"}
        m["learned_per_turn"] = sorted(set(learned))
        m["facts_per_s"] = round(size / (m["p50_ms"] / 1e3)) if m["p50_ms"] > 0 else None
        with db.connection() as conn:
            m["learned_kept"] = conn.execute(
                "SELECT count(*) FROM pymem.facts_newest('user', %s, %s, 10000) WHERE source = 'learned'",
                (user, PROJECT)).fetchone()[0]
        out[str(size)] = m
        common.progress(f"turn_record with {size} learned facts: p50 {m['p50_ms']:.2f} ms")
    return out


def over_the_limit(db: pymem.Database) -> str:
    """What turn_record does with one learned fact more than the most a turn may carry."""
    facts = [f"one too many {j}" for j in range(MAX_LEARNED + 1)]
    with db.connection() as conn:
        try:
            conn.execute("SELECT * FROM pymem.turn_record('port-over', 'too many facts', 'ok', project_id => %s, "
                         "learned => %s)", (PROJECT, facts))
        except psycopg.Error as exc:
            return f"refused ({exc.sqlstate})"
        return "accepted"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.set_quiet(args.quiet)
    dsn, where = common.connection_info(args.dsn)
    pymem.migrate(dsn)
    config = {k: v for k, v in vars(args).items() if k != "dsn"}
    result: dict[str, Any] = {"benchmark": "portability",
                              "command": common.command_line("bench/portability.py", argv),
                              "revision": common.git_revision(), "started_at": datetime.now(UTC).isoformat(),
                              "connection": where, "config": config}
    with pymem.connect(dsn) as conn:
        conn.autocommit = True
        result["environment"] = common.environment(conn)
        conn.execute("SET statement_timeout = 0")
        common.progress(f"generating {args.facts:,} facts, {args.messages:,} messages and a chain of {args.chain:,}")
        result["generation"] = generate(conn, args)
    # no statement timeout: the import being measured may be slow (that is the point)
    settings = pymem.Settings(dsn=dsn, pool_min_size=1, pool_max_size=1, statement_timeout_ms=0)
    with pymem.Database(settings, migrate=False) as db:
        result["user"] = round_trip(db, "port-src", "port-copy", not args.no_replace)
        result["chain"] = round_trip(db, "port-chain", "port-chain-copy", not args.no_replace)
        result["turns"] = turns(db, args)
        result["max_learned_per_turn"] = MAX_LEARNED
        result["one_more_than_max"] = over_the_limit(db)
    result["finished_at"] = datetime.now(UTC).isoformat()
    result = common.finish("portability", result, write=True, results_dir=args.results_dir, where=where)
    if not args.quiet:
        print(report(result))
    return result


def report(result: dict[str, Any]) -> str:
    lines = [f"{'measurement':<44} {'rows':>9} {'seconds':>9} {'rows/s':>9}", "-" * 74]
    for key, label in (("user", "user"), ("chain", "chain")):
        r = result[key]
        what = f"{r['facts']:,} facts, {r['rows'] - r['facts']:,} messages" if key == "user" else \
            f"a chain of {r['facts']:,} versions"
        for step in ("export", "import", "import_replace"):
            if f"{step}_s" in r:
                lines.append(f"{step.replace('_', ' ') + ' ' + what:<44} {r['rows']:>9,} {r[f'{step}_s']:>9.2f} "
                             f"{r[f'{step}_rows_per_s'] or 0:>9,}")
        lines.append(f"{'  round trip exact':<44} {str(r['round_trip_exact']):>9}")
    lines += ["", f"{'turn_record, learned facts per turn':<36} {'p50 ms':>9} {'p99 ms':>9} {'facts/s':>9} {'kept':>6}",
              "-" * 73]
    for size, m in result["turns"].items():
        lines.append(f"{size:<36} {m['p50_ms']:9.2f} {m['p99_ms']:9.2f} {m['facts_per_s'] or 0:>9,} "
                     f"{m['learned_kept']:>6}")
    lines.append(f"{'one more than the most (' + str(result['max_learned_per_turn'] + 1) + ')':<36} "
                 f"{result['one_more_than_max']:>9}")
    if result.get("result_file"):
        lines.append(f"\nresult: {result['result_file']}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
