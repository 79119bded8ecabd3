"""What a benchmark run on a Citus cluster shows beside a single server: that each per-user call
is one routed hop, how the data split over the workers, and the growth p50 of both reports.

    python bench/citus_proof.py --dsn <coordinator> --report bench/reports/2026-12-01-1m-citus \\
        --baseline bench/reports/2026-11-30-1m

Run it after ``bench/run.py --dsn <coordinator>`` on the data that run left (the conversation
benchmark's users and facts, and the stores). It writes ``citus.md`` and ``citus.json`` into
``--report``:

- the plan of ``context_read``, ``facts_newest`` and ``turn_record`` sent as pymem's named
  queries (sql/queries.sql) for the probe user: Citus's ``Task Count`` and the worker of each;
  plain EXPLAIN, nothing is written (``turn_record`` is planned, not run);
- rows and bytes per worker of every distributed table (``citus_shards``, and a count per shard
  through ``run_command_on_shards``);
- the growth table of ``--report``'s report.json beside ``--baseline``'s, with the ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

from bench import common
from bench.conv.config import PROBE_ID, PROBE_PROJECT, User, context_params
from bench.conv.texts import PROBE_QUERIES
from bench.conv.turns import TURNS, turn_record_params
from pymem.embedders import HashEmbedder
from pymem.queries import Q


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/citus_proof.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", required=True, help="the Citus coordinator")
    p.add_argument("--report", required=True, help="the folder of the cluster's bench/run.py report")
    p.add_argument("--baseline", help="the folder of a single server's report to compare with")
    p.add_argument("--rounds", type=int, default=10, help="alternating rounds of the hop measurement (0: skip)")
    p.add_argument("--per-round", type=int, default=100, help="calls per round (default 100)")
    return p.parse_args(argv)


def _tasks(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Citus ``Distributed Query`` below a JSON plan node: its task count and nodes."""
    out = []

    def walk(node: dict[str, Any]) -> None:
        dq = node.get("Distributed Query")
        if dq:
            job = dq.get("Job", {})
            nodes = [t.get("Node") for t in job.get("Tasks", [])]
            out.append({"task_count": job.get("Task Count"), "tasks_shown": job.get("Tasks Shown"), "nodes": nodes})
        for sub in node.get("Plans", ()):
            walk(sub)

    walk(plan)
    return out


def routed_calls(conn: psycopg.Connection) -> dict[str, Any]:
    """EXPLAIN (FORMAT JSON) of three per-user calls, as Python sends them, with the values
    inlined (a client-side cursor: the statement the coordinator plans is the call itself)."""
    embedder = HashEmbedder()
    probe = User(PROBE_PROJECT, PROBE_ID)
    qvec = Vector(embedder.embed([PROBE_QUERIES[0]])[0])
    qa = TURNS[0]
    vecs = [tuple(Vector(v) for v in embedder.embed(list(qa)))]
    calls = {
        "context_read": (Q["context_read"], context_params(probe, qvec, embedder.name, PROBE_QUERIES[0])),
        "facts_newest": (Q["facts_newest"], {"scope": "user", "scope_id": PROBE_ID, "project_id": PROBE_PROJECT,
                                             "max_facts": 50}),
        "turn_record": (Q["turn_record"], turn_record_params(probe.where("citus-proof"), 0, vecs, embedder.name)),
    }
    workers = {f"host={h} port={p}": f"worker {i + 1} ({h}:{p})" for i, (h, p) in enumerate(conn.execute(
        "SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' AND shouldhaveshards "
        "AND groupid <> 0 ORDER BY nodeport").fetchall())}
    out = {}
    cur = psycopg.ClientCursor(conn)
    for name, (query, params) in calls.items():
        text = cur.mogrify(query, params)
        doc = cur.execute("EXPLAIN (FORMAT JSON) " + text).fetchone()[0]
        doc = doc[0] if isinstance(doc, list) else json.loads(doc)[0]
        lines = [r[0] for r in cur.execute("EXPLAIN " + text).fetchall()]
        tasks = _tasks(doc["Plan"])
        out[name] = {"query": text, "tasks": [{**t, "workers": [next((label for key, label in workers.items()
                                                        if (n or "").startswith(key + " ")), n) for n in t["nodes"]]}
                               for t in tasks],
                     "plan_text": [common.shorten(line) for line in lines]}
    return out


def _node_pids(conns: dict[str, psycopg.Connection]) -> dict[str, list[int]]:
    """The client backends of each node (our own connections, and the coordinator's to the workers)."""
    return {name: [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
                                           "AND pid <> pg_backend_pid()").fetchall()] + [c.info.backend_pid]
            for name, c in conns.items()}


def _cpu_ns(pids: list[int]) -> dict[int, int]:
    out = {}
    for pid in pids:
        try:
            out[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def hop_cost(dsn: str, calls: dict[str, Any], rounds: int, per_round: int) -> dict[str, Any]:
    """Each call sent to the coordinator (delegated to the user's worker) and, alternating round by
    round, straight to that worker: wall time per call (p50 over the rounds' calls) and server CPU
    per call by node, from /proc/<pid>/schedstat of every client backend (the servers must run on
    this machine, as the test cluster does). The difference is what the coordinator's hop costs."""
    out: dict[str, Any] = {}
    for name, c in calls.items():
        node = (c["tasks"][0]["nodes"] or [None])[0] if c["tasks"] else None
        if name == "turn_record" or not node:
            continue  # a write: it would grow the probe's thread
        kv = dict(part.split("=", 1) for part in node.split())
        worker = psycopg.conninfo.make_conninfo(dsn, host=kv["host"], port=kv["port"])
        with psycopg.connect(dsn, autocommit=True) as co, psycopg.connect(worker, autocommit=True) as wk, \
                psycopg.connect(dsn, autocommit=True) as watch_co, psycopg.connect(worker, autocommit=True) as watch_wk:
            samples: dict[str, list[float]] = {"via coordinator": [], "on the worker": []}
            cpu: dict[str, dict[str, int]] = {k: {"coordinator": 0, "worker": 0} for k in samples}
            for r in range(rounds):
                for label, conn in (("via coordinator", co), ("on the worker", wk))[:: 1 if r % 2 == 0 else -1]:
                    pids = _node_pids({"coordinator": watch_co, "worker": watch_wk})
                    before = {n: _cpu_ns(p) for n, p in pids.items()}
                    for _ in range(per_round):
                        t0 = time.perf_counter_ns()
                        conn.execute(c["query"], prepare=True).fetchall()
                        samples[label].append((time.perf_counter_ns() - t0) / 1e6)
                    for n, p in pids.items():
                        after = _cpu_ns(p)
                        cpu[label][n] += sum(after[x] - before[n][x] for x in after if x in before[n])
                    # the watchers' own statements are counted too: two cheap reads per round
            n_calls = rounds * per_round
            out[name] = {label: {"p50_ms": round(sorted(v)[len(v) // 2], 3),
                                 "cpu_ms_per_call": {k: round(ns / n_calls / 1e6, 3) for k, ns in cpu[label].items()}}
                         for label, v in samples.items()}
            out[name]["worker"] = f"{kv['host']}:{kv['port']}"
    return out


def data_split(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Per distributed table and worker: shards, rows and bytes."""
    rows = conn.execute(
        """WITH counts AS (
               SELECT r.shardid, r.result::bigint AS n
                 FROM pg_dist_partition AS p,
                      LATERAL run_command_on_shards(p.logicalrelid, 'SELECT count(*) FROM %s') AS r
                WHERE p.partmethod = 'h' AND p.logicalrelid::regclass::text LIKE 'pymem.%%' AND r.success)
           SELECT s.table_name::text AS table_name, s.nodename || ':' || s.nodeport AS worker,
                  count(*) AS shards, sum(c.n) AS rows, sum(s.shard_size) AS bytes
             FROM citus_shards AS s
             JOIN counts AS c ON c.shardid = s.shardid
            WHERE s.citus_table_type = 'distributed'
            GROUP BY 1, 2 ORDER BY 1, 2""").fetchall()
    return [{"table": t, "worker": w, "shards": sh, "rows": int(n), "bytes": int(b)} for t, w, sh, n, b in rows]


def compare(report: Path, baseline: Path) -> list[dict[str, Any]]:
    """The growth p50 of both reports, measurement by measurement and size by size."""
    mine = json.loads((report / "report.json").read_text())["growth"]
    base = json.loads((baseline / "report.json").read_text())["growth"]
    out = []
    for bench, series in mine.items():
        for name, points in series.items():
            for n, v in points.items():
                b = base.get(bench, {}).get(name, {}).get(str(n))
                out.append({"benchmark": bench, "measurement": name, "size": int(n), "cluster_p50_ms": v,
                            "single_p50_ms": b, "ratio": round(v / b, 2) if v and b else None})
    return out


def markdown(calls: dict[str, Any], split: list[dict[str, Any]], rows: list[dict[str, Any]],
             floors: dict[str, Any], baseline: str | None, report: Path, hops: dict[str, Any] | None = None,
             hop_args: str = "") -> str:
    lines = ["# The 1m preset on a Citus cluster: routing, data split, and a single server beside it", "",
             "## One routed hop per call", "",
             "`EXPLAIN` on the coordinator of the statements pymem's Python API sends (sql/queries.sql), for the "
             "probe user. Citus delegates the whole function call to the worker that holds the user's shard: "
             "one task, one worker.", "",
             "| call | distributed steps | task count | worker |", "|---|--:|--:|---|"]
    for name, c in calls.items():
        for t in c["tasks"] or [{"task_count": "none", "workers": []}]:
            lines.append(f"| {name} | {len(c['tasks'])} | {t['task_count']} | {', '.join(t['workers'])} |")
    for name, c in calls.items():
        lines += ["", f"`{name}`:", "", "```", *c["plan_text"], "```"]
    if hops:
        lines += ["", "## What the hop costs", "",
                  f"The same read sent to the coordinator (delegated) and straight to the worker that holds the user, "
                  f"in alternating rounds ({hop_args}); wall time per call, and server CPU per call by node from "
                  "/proc/<pid>/schedstat of every client backend of the node (run it on a quiet cluster: every "
                  "backend counts; two catalog reads per round are included).",
                  "", "| call | sent to | p50 ms | coordinator CPU ms/call | worker CPU ms/call |",
                  "|---|---|--:|--:|--:|"]
        for name, h in hops.items():
            for label in ("via coordinator", "on the worker"):
                x = h[label]
                lines.append(f"| {name} | {label} | {x['p50_ms']:.3f} | {x['cpu_ms_per_call']['coordinator']:.3f} | "
                             f"{x['cpu_ms_per_call']['worker']:.3f} |")
    lines += ["", "## How the data split over the workers", "",
              "Every distributed table, per worker (rows counted per shard with `run_command_on_shards`, bytes "
              "from `citus_shards`). The reference tables (small, a copy on every node) are not listed.", "",
              "| table | worker | shards | rows | MB | share of rows |", "|---|---|--:|--:|--:|--:|"]
    totals: dict[str, int] = {}
    for s in split:
        totals[s["table"]] = totals.get(s["table"], 0) + s["rows"]
    for s in split:
        share = f"{s['rows'] / totals[s['table']]:.1%}" if totals[s["table"]] else "n/a"
        lines.append(f"| {s['table']} | {s['worker']} | {s['shards']} | {s['rows']:,} | {s['bytes'] / 2**20:.1f} | {share} |")
    if rows:
        lines += ["", f"## Growth p50: the cluster beside a single server ({baseline})", "",
                  "| benchmark | measurement | size | single server ms | cluster ms | cluster / single |",
                  "|---|---|--:|--:|--:|--:|"]
        for r in rows:
            single = "n/a" if r["single_p50_ms"] is None else f"{r['single_p50_ms']:.3f}"
            cluster = "n/a" if r["cluster_p50_ms"] is None else f"{r['cluster_p50_ms']:.3f}"
            ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
            lines.append(f"| {r['benchmark']} | {r['measurement']} | {r['size']:,} | {single} | {cluster} | {ratio} |")
    skipped = _not_collected(report)
    if skipped:
        lines += ["", "## Not collected on the cluster", "",
                  "Measurements and plans the run recorded as not collected (the run's JSON files), with the reason:",
                  ""] + [f"- {k}: {v}" for k, v in skipped.items()]
    if floors:
        lines += ["", "Floors at the largest size (prepared `SELECT 1` on the coordinator, and a committed write):", ""]
        lines += [f"- {k}: {v}" for k, v in floors.items()]
    return "\n".join(lines) + "\n"


def _not_collected(report: Path) -> dict[str, str]:
    """What the run's benchmarks recorded as not collected (measurements, and plans with an error)."""
    out: dict[str, str] = {}
    for path in sorted(report.glob("*.json")):
        if path.name in ("report.json", "citus.json"):
            continue
        r = json.loads(path.read_text())
        for k, v in (r.get("not_collected") or {}).items():
            out[f"{r.get('benchmark')} / {k}"] = v
        for k, v in (r.get("explain") or {}).items():
            if isinstance(v, dict) and "error" in v and "plan" not in v:
                out[f"{r.get('benchmark')} / plan {k}"] = v["error"]
    return out


def _floors(report: Path, baseline: Path | None) -> dict[str, str]:
    """The conversation benchmark's floors at the largest size, in both reports."""
    out = {}
    for label, folder in (("cluster", report), ("single server", baseline)):
        if folder is None:
            continue
        r = json.loads((folder / "report.json").read_text())
        largest = str(r["sizes"][-1])
        conv = r["conversations"].get(largest) or {}
        out[label] = ", ".join(f"{k} p50 {conv[k]['p50_ms']:.3f} ms" for k in ("floor", "floor_commit", "floor_pool")
                               if k in conv)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    report = Path(args.report)
    baseline = Path(args.baseline) if args.baseline else None
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        if not common.is_citus(conn):
            raise SystemExit("not a Citus coordinator (no citus extension): nothing to show")
        register_vector(conn)
        calls = routed_calls(conn)
        split = data_split(conn)
    hops = hop_cost(args.dsn, calls, args.rounds, args.per_round) if args.rounds > 0 else {}
    rows = compare(report, baseline) if baseline and (report / "report.json").exists() else []
    floors = _floors(report, baseline) if (report / "report.json").exists() else {}
    result = {"routed_calls": calls, "hop_cost": hops, "data_split": split, "growth": rows, "floors": floors}
    (report / "citus.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (report / "citus.md").write_text(markdown(calls, split, rows, floors, args.baseline, report, hops,
                                                  f"--rounds {args.rounds} --per-round {args.per_round}"))
    common.progress(f"wrote {report / 'citus.md'}")
    return result


if __name__ == "__main__":
    main()
