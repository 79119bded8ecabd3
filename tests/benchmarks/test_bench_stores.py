"""bench/stores.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import stores  # noqa: E402


def test_stores_bench_small(dsn, tmp_path):
    # chunks of 7 entries: one store per statement, 50 chunks
    result = stores.main(["--dsn", dsn, "--stores", "50", "--entries", "5", "--iterations", "20", "--warmup", "2",
                          "--chunk-entries", "7", "--quiet", "--results-dir", str(tmp_path)])
    assert result["generation"]["entries_total"] == 50 * 5
    with psycopg.connect(dsn) as c:  # one audit row per generated entry, each with its entry's sha
        assert c.execute("""SELECT count(*), count(*) FILTER (WHERE a.new_sha = e.sha) FROM pymem.store_audit AS a
                            JOIN pymem.store_entries AS e USING (project_id, store_key, path)
                            WHERE a.actor = 'generator'""").fetchone() == (250, 250)
    for name, m in result["measurements"].items():
        assert m["iterations"] == 20 and m["p50_ms"] <= m["p95_ms"] <= m["p99_ms"], name
    assert set(result["measurements"]) >= {"floor", "write_text", "write_expected_sha", "read_text", "transcript_append"}
    assert Path(result["result_path"]).exists()


@pytest.mark.parametrize("bad", [["--entries", "0"], ["--stores", "0"], ["--chunk-entries", "0"], ["--warmup", "-1"]])
def test_stores_bench_refuses_bad_sizes(bad):
    with pytest.raises(SystemExit) as e:
        stores.parse_args(bad)
    assert e.value.code == 2
