"""bench/changes.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import changes  # noqa: E402


def test_changes_bench_small(dsn):
    result = changes.main(["--dsn", dsn, "--calls", "10", "--warmup", "2"])
    for call in ("turn_record", "fact_add"):
        assert result["writes"][call]["without_feed"]["ratio"] == 1.0 and result["writes"][call]["with_feed"]["p50_ms"] > 0
    # the feed of the database with the triggers: every write's rows, read once (a turn's two
    # messages are one insert: one row; a fact: one row)
    assert result["read"]["changes"] == (10 + 2) + (10 + 2)
