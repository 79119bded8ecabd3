"""What a run prints: the measurements, turn writes into a growing thread, concurrent turn
writes, exact scan vs HNSW, and the statements inside context_read with their flags."""

from __future__ import annotations

from typing import Any

from bench import common

from .plans import collapse_statements


def format_hnsw(h: dict[str, Any]) -> str:
    lines = []
    for uid, s in h["subjects"].items():
        lines.append(f"{uid} ({s['vectors']:,} messages), k={h['k']}, {h['queries']} queries:")
        head = f"  {'variant':<34} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9} {'recall@k':>9} {'k rows':>7} {'hnsw':>5}"
        lines += [head, "  " + "-" * (len(head) - 2)]
        for name, v in s["variants"].items():
            lines.append(f"  {name:<34} {v['p50_ms']:9.3f} {v['p95_ms']:9.3f} {v['p99_ms']:9.3f} "
                         f"{v['recall_at_k']:9.3f} {v['queries_with_k_rows']:>3}/{h['queries']:<3} "
                         f"{'yes' if v['plan']['uses_hnsw'] else 'no':>5}")
    return "\n".join(lines)


def format_concurrency(c: dict[str, Any]) -> str:
    head = f"{'writers':>7} {'turns/s':>9} {'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9}"
    lines = [head, "-" * len(head)]
    for level, r in c.items():
        lines.append(f"{level:>7} {r['throughput_per_s']:9.0f} {r['p50_ms']:9.3f} {r['p95_ms']:9.3f} "
                     f"{r['p99_ms']:9.3f}")
    return "\n".join(lines)


def print_report(result: dict[str, Any]) -> None:
    env = result["environment"]
    print(f"{result['command']}  ({result['connection']}, {env['cpu_count']} cores, "
          f"PostgreSQL {env['server_version']}, pgvector {env['pgvector_version']})")
    print(common.format_table(result["measurements"]))
    print("turn_record into one growing thread (precomputed vectors):")
    for b in result["turn_growth"]["blocks"]:
        print(f"  thread of {b['thread_messages_before']:>7,} messages: p50 {b['p50_ms']:8.3f} ms  "
              f"p95 {b['p95_ms']:8.3f} ms  p99 {b['p99_ms']:8.3f} ms")
    print("concurrent turn writes (turn_record, precomputed vectors, one connection per thread):")
    print(format_concurrency(result["concurrency"]))
    if "hnsw" in result:
        print(f"exact scan vs HNSW (index built in {result['hnsw']['index']['build_seconds']:.1f}s):")
        print(format_hnsw(result["hnsw"]))
    for who in ("probe", "heavy_user"):
        _print_nested(who, result["explain"].get(f"context_read_nested_{who}", {}))


def _print_nested(who: str, nested: dict[str, Any]) -> None:
    """The statements inside context_read, consecutive repeats as one line, with their flags."""
    if not nested.get("statements"):
        return
    print(f"statements inside context_read ({who}; auto_explain ANALYZE, durations include nested statements):")
    for s in collapse_statements(nested["statements"]):
        flags = [f"Seq Scan on {', '.join(s['seq_scans'])}"] if s["seq_scan"] else []
        flags += [f"Sort of {x['input_rows']:.0f} rows" for x in s["sorts"] if x["input_rows"]]
        flags += s["whole_user_scans"]
        times = f"x{s['count']}" if s["count"] > 1 else ""
        print(f"  {s['duration_ms'] or 0:8.3f} ms {s['shared_hit_blocks'] or 0:>6} hit "
              f"{s['shared_read_blocks'] or 0:>5} read {times:>4} {s['query'][:60]:<60} {'; '.join(flags)}")
