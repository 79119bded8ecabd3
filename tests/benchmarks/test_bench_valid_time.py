"""bench/valid_time.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import valid_time  # noqa: E402


def test_valid_time_bench_small(dsn):
    result = valid_time.main(["--dsn", dsn, "--users", "3", "--facts", "4", "--calls", "10", "--warmup", "2"])
    reads = result["reads"]
    # before and after 0043, plain SQL and the API show the same rows for every kind of user: the
    # facts that hold now (a half-ended user's ended half is skipped by the shipped reads only)
    for name in ("facts_newest", "plain_sql", "context_read"):
        assert {kind: r["rows"] for kind, r in reads[name].items()} == \
            {"plain": [4], "dated": [4], "half_ended": [4]}, (name, reads[name])
    for name in ("facts_newest_before", "context_read_before"):
        assert {kind: r["rows"] for kind, r in reads[name].items()} == \
            {"plain": [4], "dated": [4], "half_ended": [8]}, (name, reads[name])
    # a year ago the dated users' facts (from 2020) held, and the half-ended ones' all of them
    assert {kind: r["rows"] for kind, r in reads["facts_at_year_ago"].items()} == \
        {"plain": [4], "dated": [4], "half_ended": [8]}
    assert set(reads["ratios"]) == {"facts_newest/facts_newest_before", "context_read/context_read_before",
                                    "facts_newest_before/plain_sql", "facts_newest/plain_sql"}
