"""bench/stores.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import stores  # noqa: E402


def test_stores_bench_small(dsn, tmp_path):
    result = stores.main(["--dsn", dsn, "--stores", "50", "--entries", "5", "--iterations", "20", "--warmup", "2",
                          "--quiet", "--results-dir", str(tmp_path)])
    assert result["generation"]["entries_total"] == 50 * 5
    for name, m in result["measurements"].items():
        assert m["iterations"] == 20 and m["p50_ms"] <= m["p95_ms"] <= m["p99_ms"], name
    assert set(result["measurements"]) >= {"floor", "write_text", "write_expected_sha", "read_text", "transcript_append"}
    assert Path(result["result_path"]).exists()
