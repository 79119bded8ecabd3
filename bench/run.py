"""One command for the whole benchmark: presets, growth curves and a Markdown report.

    PYMEM_DATA_DIR=/tmp/bench-data python bench/run.py --preset 1m
    python bench/run.py --preset small --dsn postgresql://me@db/bench      # seconds; used by the tests

For every size of the preset it runs the facts benchmark (that many facts) and the conversation
benchmark (that many messages, and as many facts), each on freshly generated data, then the
keyed-store benchmark once at the largest size. It writes every JSON result, ``report.json``
(the figures the report is made of) and ``report.md`` into one folder (default
``bench/results/report-<preset>-<time>/``), with PNG plots (latency vs rows, turn writes vs
concurrency) when matplotlib is installed (``pip install '.[bench]'``).

The growth table shows, for each measurement, p50 at every size and the ratio of the largest to
the smallest: near 1 when a call costs what it returns, growing when it costs what is stored.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common
from bench import conversations as bench_conversations
from bench import facts as bench_facts
from bench import stores as bench_stores

PRESETS: dict[str, dict[str, Any]] = {
    # sizes: facts and messages per run; a small preset keeps the bench code from rotting (tests)
    "small": {"sizes": [2_000, 6_000], "iterations": 8, "warmup": 3, "probe_messages": 100, "stores": 50,
              "entries": 5, "concurrency": "1,2", "turns": 5, "heavy_iterations": 4},
    "1m": {"sizes": [10_000, 100_000, 1_000_000], "iterations": 1000, "warmup": 50, "probe_messages": 1000,
           "stores": 50_000, "entries": 20, "concurrency": "1,2,4,8", "turns": 300, "heavy_iterations": 200},
    "10m": {"sizes": [10_000, 100_000, 1_000_000, 10_000_000], "iterations": 1000, "warmup": 50,
            "probe_messages": 1000, "stores": 500_000, "entries": 20, "concurrency": "1,2,4,8", "turns": 300,
            # the heaviest user holds ~3% of the messages: one context() call scans ~300k vectors at 10M
            "heavy_iterations": 20},
}

# the measurements the growth table and the plot follow
GROWTH = {
    "facts": ["newest50_sql", "add_sql", "add_idempotent_sql", "supersede_sql", "search_memory"],
    "conversations": ["context_sql", "context_memory", "context_sql_light_user", "turn_sql", "recall_sql"],
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--dsn", help="connection string (default: PYMEM_DSN, else the embedded server)")
    p.add_argument("--sizes", help="override the preset's sizes, comma-separated (e.g. 10000,100000)")
    p.add_argument("--out", help="folder for the results and the report")
    p.add_argument("--hnsw", action="store_true", help="also run the exact-vs-HNSW comparison at the largest size")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots even if matplotlib is there")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def _base(args: argparse.Namespace, out: Path) -> list[str]:
    base = ["--results-dir", str(out)]
    if args.dsn:
        base += ["--dsn", args.dsn]
    if args.quiet:
        base.append("--quiet")
    return base


def run(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    common.set_quiet(args.quiet)
    preset = dict(PRESETS[args.preset])
    sizes = [int(float(s)) for s in args.sizes.split(",")] if args.sizes else preset["sizes"]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) if args.out else common.RESULTS_DIR / f"report-{args.preset}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    base = _base(args, out)
    it = ["--iterations", str(preset["iterations"]), "--warmup", str(preset["warmup"])]
    runs: dict[str, Any] = {"preset": args.preset, "sizes": sizes, "facts": {}, "conversations": {}}
    for n in sizes:
        common.progress(f"facts benchmark at {n:,} facts")
        chunk = ["--chunk", str(min(100_000, max(1_000, n // 4)))]
        runs["facts"][n] = bench_facts.main(["--rows", str(n), "--fresh", *chunk, *it, *base])
        common.progress(f"conversation benchmark at {n:,} messages")
        largest = n == sizes[-1]
        conv = ["--messages", str(n), "--facts", str(n), "--fresh",
                "--probe-messages", str(min(preset["probe_messages"], max(10, n // 10))),
                "--chunk", str(min(50_000, max(1_000, n // 4))), "--fact-chunk", str(min(100_000, max(1_000, n // 4))),
                "--concurrency", preset["concurrency"] if largest else "1",
                "--concurrency-turns", str(preset["turns"]),
                "--growth-turns", str(preset["turns"]), "--growth-block", str(max(1, preset["turns"] // 5))]
        if not (args.hnsw and largest):
            conv.append("--no-hnsw")
        conv += ["--heavy-iterations", str(preset["heavy_iterations"])]
        runs["conversations"][n] = bench_conversations.main([*conv, *it, *base])
    common.progress(f"keyed-store benchmark at {preset['stores'] * preset['entries']:,} entries")
    runs["stores"] = bench_stores.main(["--stores", str(preset["stores"]), "--entries", str(preset["entries"]),
                                        "--fresh", *it, *base])
    report = summarize(runs)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    plots = [] if args.no_plots else make_plots(report, out)
    (out / "report.md").write_text(markdown(report, plots, common.command_line("bench/run.py", argv)))
    report["folder"] = str(out)
    report["plots"] = [str(p) for p in plots]
    common.progress(f"report: {out / 'report.md'}")
    return report


def summarize(runs: dict[str, Any]) -> dict[str, Any]:
    """The figures of a report: per benchmark and size, p50/p95/p99 beside the floor."""
    def pick(result: dict[str, Any]) -> dict[str, Any]:
        return {k: {q: v[q] for q in ("p50_ms", "p95_ms", "p99_ms", "throughput_per_s")}
                for k, v in result["measurements"].items() if isinstance(v, dict) and "p50_ms" in v}

    largest = runs["sizes"][-1]
    conv = runs["conversations"][largest]
    facts = runs["facts"][largest]
    return {
        "preset": runs["preset"],
        "sizes": runs["sizes"],
        "environment": facts.get("environment"),
        "facts": {n: pick(r) for n, r in runs["facts"].items()},
        "conversations": {n: pick(r) for n, r in runs["conversations"].items()},
        "stores": pick(runs["stores"]),
        "concurrency": conv.get("concurrency", {}),
        "hnsw": conv.get("hnsw"),
        "plans": {"facts": _flags(facts.get("explain", {})), "conversations": _flags(conv.get("explain", {}))},
        "growth": {
            bench: {m: {n: runs[bench][n]["measurements"].get(m, {}).get("p50_ms") for n in runs["sizes"]}
                    for m in names}
            for bench, names in GROWTH.items()
        },
        "ingest": {n: _ingest(runs["facts"][n], runs["conversations"][n]) for n in runs["sizes"]},
        "stores_ingest": runs["stores"].get("generation"),
        # measurements a Citus cluster cannot give, with the reason (empty on plain PostgreSQL)
        "not_collected": {k: v for r in [conv, runs["stores"]] for k, v in (r.get("not_collected") or {}).items()},
    }


def _ingest(facts: dict[str, Any], conv: dict[str, Any]) -> dict[str, Any]:
    """Bulk ingest of one size: the facts benchmark's load, and the conversation benchmark's
    (facts, then messages with their vectors), each with its rows per second."""
    f, g = facts.get("generation") or {}, conv.get("generation") or {}
    gm, gf = g.get("messages") or {}, g.get("facts") or {}
    return {"facts_rows": f.get("rows"), "facts_seconds": f.get("seconds"), "facts_rows_per_s": f.get("rows_per_s"),
            "conv_facts_seconds": gf.get("seconds"), "messages": gm.get("messages"),
            "message_vectors": gm.get("embeddings"), "messages_seconds": gm.get("seconds"),
            "messages_per_s": gm.get("insert_messages_per_s"), "conv_total_seconds": g.get("total_seconds")}


# the issue's targets for context() (probe: 1,000 messages, 200 facts; query embedding excluded)
TARGET_P50_MS, TARGET_P99_MS, TARGET_GROWTH = 1.5, 8.0, 1.2


def targets(report: dict[str, Any]) -> list[str]:
    """Each context() target against this run's figures: met, or missed by how much."""
    sizes = report["sizes"]
    largest = sizes[-1]
    ctx = report["conversations"][largest].get("context_sql")
    if not ctx:
        return []

    def verdict(value: float, limit: float) -> str:
        return "met" if value <= limit else f"missed by {value - limit:.2f} ({value / limit - 1:.0%})"

    lines = ["| target | this run | verdict |", "|---|--:|---|",
             f"| context() p50 at {largest:,} rows <= {TARGET_P50_MS} ms | {ctx['p50_ms']:.3f} ms | "
             f"{verdict(ctx['p50_ms'], TARGET_P50_MS)} |",
             f"| context() p99 at {largest:,} rows <= {TARGET_P99_MS} ms | {ctx['p99_ms']:.3f} ms | "
             f"{verdict(ctx['p99_ms'], TARGET_P99_MS)} |"]
    base = 100_000 if 100_000 in sizes and largest != 100_000 else sizes[0]
    small = (report["conversations"][base].get("context_sql") or {}).get("p50_ms")
    if small and largest != base:
        ratio = ctx["p50_ms"] / small
        lines.append(f"| context() p50 at {largest:,} / at {base:,} <= {TARGET_GROWTH} | {ratio:.2f} | "
                     f"{verdict(ratio, TARGET_GROWTH)} |")
    return lines


def _flags(explain: Any) -> dict[str, Any]:
    """What each recorded plan flagged (Seq Scan on a pymem table, a whole-subject sort)."""
    out: dict[str, Any] = {}
    if not isinstance(explain, dict):
        return out
    for name, plan in explain.items():
        if isinstance(plan, dict) and "error" in plan and "plan" not in plan:
            out[name] = [plan["error"]]
        elif isinstance(plan, dict):
            flagged = plan.get("flagged") or plan.get("seq_scans") or []
            out[name] = [f.get("Node Type", f) if isinstance(f, dict) else f for f in flagged]
    return out


def make_plots(report: dict[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for bench, series in report["growth"].items():
        for name, points in series.items():
            xs = [int(n) for n, v in points.items() if v is not None]
            ys = [v for v in points.values() if v is not None]
            if xs:
                ax.plot(xs, ys, marker="o", label=f"{bench}: {name}")
    ax.set_xscale("log")
    ax.set_xlabel("rows (facts, and messages)")
    ax.set_ylabel("p50 latency (ms)")
    ax.set_title("latency vs rows")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    paths.append(out / "latency_vs_rows.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    conc = report.get("concurrency") or {}
    if conc:
        fig, ax = plt.subplots(figsize=(6, 4))
        writers = sorted(int(k) for k in conc)
        ax.plot(writers, [conc[str(w)]["p50_ms"] for w in writers], marker="o", label="p50")
        ax.plot(writers, [conc[str(w)]["p99_ms"] for w in writers], marker="o", label="p99")
        ax.set_xlabel("concurrent writers (turn_record)")
        ax.set_ylabel("latency (ms)")
        ax.set_title("turn writes vs concurrency")
        ax.legend()
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        paths.append(out / "latency_vs_concurrency.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def _table(rows: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| measurement | p50 ms | p95 ms | p99 ms | ops/s |", "|---|--:|--:|--:|--:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['p50_ms']:.3f} | {r['p95_ms']:.3f} | {r['p99_ms']:.3f} | {r['throughput_per_s']:.0f} |")
    return lines


def markdown(report: dict[str, Any], plots: list[Path], command: str) -> str:
    env = report.get("environment") or {}
    sizes = report["sizes"]
    largest = sizes[-1]
    lines = [
        f"# pymem benchmark report ({report['preset']})",
        "",
        f"`{command}`",
        "",
        f"Machine: {env.get('cpu_count')} cores, {env.get('memory_gb')} GiB, {env.get('platform')}; "
        f"PostgreSQL {env.get('server_version')}, pgvector {env.get('pgvector_version')}, "
        f"shared_buffers {env.get('shared_buffers')}.",
        "",
        "Every figure sits beside the floor of its run: `floor` is a prepared `SELECT 1` on the same connection.",
        "",
        "## Growth (p50 ms)",
        "",
        "| benchmark | measurement | " + " | ".join(f"{n:,}" for n in sizes) + " | largest / smallest |",
        "|---|---|" + "--:|" * len(sizes) + "--:|",
    ]
    for bench, series in report["growth"].items():
        for name, points in series.items():
            vals = [points.get(n) for n in sizes]
            ratio = f"{vals[-1] / vals[0]:.2f}" if vals[0] and vals[-1] else "n/a"
            cells = " | ".join("n/a" if v is None else f"{v:.3f}" for v in vals)
            lines.append(f"| {bench} | {name} | {cells} | {ratio} |")
    if target_lines := targets(report):
        lines += ["", "## context() targets", "",
                  "For the probe user (1,000 messages and 200 facts from 1,000,000 rows up; query embedding excluded).",
                  "", *target_lines]
    lines += ["", "## Bulk ingest", "",
              "Set-based generation; each size is loaded twice: by the facts benchmark, and by the conversation "
              "benchmark (its facts, then messages with their vectors). Seconds include VACUUM ANALYZE.", "",
              "| size | facts: rows/s (s) | conversations: facts s | messages + vectors: rows/s (s) | conversations total s |",
              "|--:|--:|--:|--:|--:|"]
    def num(v: Any, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    for n in sizes:
        g = report["ingest"][n]
        lines.append(f"| {n:,} | {num(g['facts_rows_per_s'], ',.0f')} ({num(g['facts_seconds'], '.1f')}) | "
                     f"{num(g['conv_facts_seconds'], '.1f')} | {num(g['messages_per_s'], ',.0f')} "
                     f"({num(g['messages_seconds'], '.1f')}) | {num(g['conv_total_seconds'], '.1f')} |")
    st = report.get("stores_ingest") or {}
    if st:
        lines += ["", f"Keyed stores: {st.get('entries_total', 0):,} entries in {st.get('stores', 0):,} stores "
                      f"in {st.get('seconds', 0):.1f} s."]
    lines += ["", f"## Facts at {largest:,} rows", "", *_table(report["facts"][largest]),
              "", f"## Conversations and context() at {largest:,} messages", "",
              *_table(report["conversations"][largest]), "", "## Keyed stores", "", *_table(report["stores"])]
    conc = report.get("concurrency") or {}
    if conc:
        lines += ["", "## Turn writes vs concurrency", "", "| writers | turns/s | p50 ms | p99 ms |", "|--:|--:|--:|--:|"]
        for w in sorted(conc, key=int):
            c = conc[w]
            lines.append(f"| {w} | {c['throughput_per_s']:.0f} | {c['p50_ms']:.3f} | {c['p99_ms']:.3f} |")
    if report.get("not_collected"):
        lines += ["", "## Not collected", ""] + [f"- {k}: {v}" for k, v in report["not_collected"].items()]
    lines += ["", "## Plans at the largest size (Seq Scan / Sort flags)", ""]
    for bench, plans in report["plans"].items():
        for name, flags in plans.items():
            lines.append(f"- {bench} / {name}: {', '.join(map(str, flags)) if flags else 'none'}")
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run(argv)


if __name__ == "__main__":
    main()
