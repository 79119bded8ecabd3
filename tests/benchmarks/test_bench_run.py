"""bench/run.py: the small preset end to end (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import run as bench_run  # noqa: E402


def test_small_preset_writes_a_report_with_growth_curves(dsn, tmp_path):
    report = bench_run.main(["--preset", "small", "--dsn", dsn, "--out", str(tmp_path), "--quiet"])
    assert report["sizes"] == [2_000, 6_000]
    md = (tmp_path / "report.md").read_text()
    assert "## Growth (p50 ms)" in md and "context_sql" in md and "newest50_sql" in md
    assert (tmp_path / "report.json").exists()
    for bench, series in report["growth"].items():
        for name, points in series.items():
            assert all(points[n] is not None and points[n] > 0 for n in report["sizes"]), (bench, name)
    for size in report["sizes"]:
        for rows in (report["facts"][size], report["conversations"][size]):
            for name, r in rows.items():
                assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"], name
    assert set(report["concurrency"]) == {"1", "2"}
    for size in report["sizes"]:  # every size's bulk ingest, with a rate
        g = report["ingest"][size]
        assert g["facts_rows"] == size and g["messages"] == size and g["message_vectors"] > 0
        assert g["facts_rows_per_s"] > 0 and g["messages_per_s"] > 0
    assert "## Bulk ingest" in md and "## context() targets" in md
    verdicts = [line for line in md.splitlines() if line.startswith("| context() ")]
    assert len(verdicts) == 3 and all(line.endswith(("| met |", "%) |")) for line in verdicts), verdicts
    assert len(list(tmp_path.glob("*.json"))) >= 2 * len(report["sizes"]) + 2  # every run's JSON + the report
