"""bench/retention.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import retention  # noqa: E402


def test_retention_bench_small(dsn):
    result = retention.main(["--dsn", dsn, "--users", "4", "--messages", "8", "--calls", "10", "--warmup", "2",
                             "--batch", "3"])
    assert result["writes"]["without_index"]["ratio"] == 1.0 and result["writes"]["with_index"]["p50_ms"] > 0
    purge = result["purge"]
    # every policy deleted what it should: half of each user's messages by age, then all but the cap
    assert purge["max_age"]["purged"] == purge["max_age"]["expected"] > 0
    assert purge["max_per_thread"]["purged"] == purge["max_per_thread"]["expected"] > 0
    assert purge["left"] == 4 * purge["max_per_thread"]["cap"]


@pytest.mark.parametrize("bad", [["--users", "0"], ["--batch", "0"]])
def test_retention_bench_refuses_bad_sizes(bad):
    with pytest.raises(SystemExit) as e:
        retention.main(bad)
    assert e.value.code == 2
