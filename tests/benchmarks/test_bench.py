"""bench/facts.py at a tiny size: it generates what it says, keeps every constraint, measures
every operation and records the plans. Behaviour only: no duration is ever asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import common  # noqa: E402
from bench import facts as bench_facts  # noqa: E402

ROWS = 3000


def run_bench(dsn: str, tmp_path: Path) -> dict:
    return bench_facts.main([
        "--dsn", dsn, "--rows", str(ROWS), "--fresh", "--iterations", "8", "--warmup", "6",
        "--chunk", "1000", "--results-dir", str(tmp_path), "--quiet",
    ])


def test_facts_benchmark_at_a_tiny_size(dsn, tmp_path, capsys):
    # one run (the expensive part), then each property of it
    result = run_bench(dsn, tmp_path)
    assert "floor" in capsys.readouterr().out  # the table is printed
    check_measurements(result)
    check_generation(result, dsn)
    check_integrity(result, dsn)
    check_plans(result)
    check_result_file(result, tmp_path)


def check_measurements(result: dict) -> None:
    measured = result["measurements"]
    expected = set(bench_facts.REQUIRED) | {
        "floor_commit", "floor_pool", "floor_end", "add_idempotent_sql", "supersede_sql",
        "search_sql", "search_unembedded_sql", "search_embed_query", "newest50_sql_heavy_user",
    }
    assert expected <= set(measured)
    for name, m in measured.items():
        assert m["iterations"] == 8 and m["warmup"] == 6, name
        assert 0 < m["min_ms"] <= m["p50_ms"] <= m["p95_ms"] <= m["p99_ms"] <= m["max_ms"], name
        assert m["throughput_per_s"] > 0, name
        assert "_samples_ns" not in m


def check_generation(result: dict, dsn: str) -> None:
    gen = result["generation"]
    assert gen["rows"] == gen["requested_rows"] == ROWS
    assert [c["inserted"] for c in gen["chunks"]] == [1000, 1000, 1000]
    data = result["dataset"]
    assert data["rows"] == ROWS  # counted before any measured write
    assert data["superseded"] > 0 and data["learned"] > 0 and data["trace"] > 0
    assert data["projects"] > 1 and data["agent_rows"] > 0 and data["project_rows"] > 0
    assert data["median_facts"] < data["max_facts"]  # skewed: many light subjects, a few heavy
    probe = result["probe"]
    assert probe["before"] == probe["after"] == {"active": 200, "superseded": 50}
    with psycopg.connect(dsn) as c:
        # the measured writes went to a writer subject, never to the probe
        assert c.execute(
            "SELECT count(*) FROM pymem.facts WHERE project_id = %s AND scope = 'user' AND scope_id = %s "
            "AND superseded_by IS NULL", (probe["project_id"], probe["scope_id"]),
        ).fetchone()[0] == 200
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE scope_id LIKE 'bench-writer-%'").fetchone()[0] > 0
        # ids stay unique: the identity sequence was moved past the generated ids
        assert c.execute("SELECT count(DISTINCT id) = count(*) FROM pymem.facts").fetchone()[0]
    assert result["embeddings"]["stored"] == 200


def check_integrity(result: dict, dsn: str) -> None:
    integrity = result["integrity"]
    assert integrity["ok"], integrity
    assert set(integrity["violations"]) >= {"facts_scope_check", "facts_superseded_pair", "content_key_mismatch",
                                            "dangling_successor", "successor_not_newer", "two_predecessors"}
    # and again after the measured writes, on the whole table
    with psycopg.connect(dsn) as c:
        assert bench_facts.integrity(c)["ok"]


def check_plans(result: dict) -> None:
    plans = result["explain"]
    newest = plans["newest50"]
    assert newest["plan"]["Plan"]["Node Type"] == "Limit"
    assert "facts_subject_active_newest" in newest["indexes"]
    assert newest["seq_scan"] is False  # a Seq Scan would be flagged here
    assert isinstance(newest["sort"], bool)
    in_function = plans["newest50_in_function"]
    assert in_function["query"].startswith("SELECT f.* FROM pymem.active_facts")  # the view, inlined:
    assert "facts_subject_active_newest" in in_function["indexes"]  # the same index serves it
    for plan in plans.values():
        assert "error" in plan or {"seq_scan", "sort", "flagged", "node_types"} <= set(plan)


def check_result_file(result: dict, tmp_path: Path) -> None:
    path = Path(result["result_file"])
    assert path.parent == tmp_path and path.name.startswith("facts-") and path.suffix == ".json"
    assert '"measurements"' in path.read_text()


def test_summaries_are_ordered_for_any_samples():
    s = common.summarize([5_000_000, 1_000_000, 3_000_000, 2_000_000, 4_000_000])
    assert (s["min_ms"], s["p50_ms"], s["max_ms"], s["mean_ms"]) == (1.0, 3.0, 5.0, 3.0)
    assert s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"]
    one = common.summarize([7])
    assert one["p50_ms"] == one["p99_ms"] == one["min_ms"]
