"""bench/expiry.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import expiry  # noqa: E402


def test_expiry_bench_small(dsn):
    result = expiry.main(["--dsn", dsn, "--users", "3", "--facts", "4", "--calls", "10", "--warmup", "2",
                          "--purge-users", "5", "--batch", "3"])
    for read in ("facts_newest", "context_read", "store_list"):
        # every kind of user shows the same rows: its facts that have not expired
        assert {kind: r["rows"] for kind, r in result["reads"][read].items()} == \
            {"never": [4], "expiring": [4], "half_expired": [4]}, result["reads"][read]
        assert result["reads"][read]["never"]["ratio"] == 1.0
    assert {kind: r["rows"] for kind, r in result["reads"]["store_read"].items()} == \
        {"never": [1], "expiring": [1], "half_expired": [1]}
    purge = result["purge"]
    # the purge users' 5 x 4 facts and half of the half-expired users' 3 x 8
    assert purge["expired"] == purge["purged"] == 5 * 4 + 3 * 4 and purge["left"] == 0
    assert purge["batches"] == 32 // 3 + 1
    assert purge["expired_entries"] == purge["purged_entries"] == 3 * 4  # the half-expired stores' old/ entries


@pytest.mark.parametrize("bad", [["--users", "0"], ["--batch", "0"]])
def test_expiry_bench_refuses_bad_sizes(bad):
    with pytest.raises(SystemExit) as e:
        expiry.main(bad)
    assert e.value.code == 2
