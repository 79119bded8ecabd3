"""bench/learning_queue.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import learning_queue  # noqa: E402


def test_learning_queue_bench_small(dsn):
    result = learning_queue.main(["--dsn", dsn, "--turns", "6", "--rounds", "2", "--delay", "0", "--jobs", "12",
                                  "--users", "3"])
    assert set(result["record"]) == {"no learner", "deferred", "inline (model)"}
    assert all(r["turns"] == 6 and r["p50_ms"] > 0 for r in result["record"].values())
    for run in result["throughput"].values():
        # every queued turn learned from once: one fact each, nothing left, nothing lost
        assert run["done"] == run["facts"] == 12 and run["left"] == 0 and run["lost"] == 0


def test_learning_queue_bench_refuses_bad_sizes():
    with pytest.raises(SystemExit) as e:
        learning_queue.main(["--jobs", "0"])
    assert e.value.code == 2
