"""bench/consolidation.py runs end to end (behaviour only, never timings): words and hash vectors."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import consolidation  # noqa: E402


def test_consolidation_bench_scores_every_run(dsn):
    result = consolidation.main(["--dsn", dsn, "--embedders", "hash"])
    assert result["pairs"] == 30 and result["duplicates"] == 15
    runs = result["runs"]
    assert len(runs) == 3 + 4 + 1
    # the defaults pair what words alone pair, at least
    assert runs["hash: the defaults (either test)"]["found"] >= runs["words, min_overlap 0.8"]["found"] > 0
    assert all(0 <= r["recall"] <= 1 for r in runs.values())
