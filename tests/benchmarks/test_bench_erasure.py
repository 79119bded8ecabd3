"""bench/erasure.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import erasure  # noqa: E402


def test_erasure_bench_small(dsn):
    result = erasure.main(["--dsn", dsn, "--messages", "30", "--facts", "3", "--entries", "2", "--others", "2",
                           "--other-messages", "5", "--repeat", "2"])
    # every way deleted the same rows: 30 messages with their vectors and lexemes, one thread,
    # 3 facts with theirs, the store with its 2 entries and 2 audit rows
    assert {way: r["rows_deleted"] for way, r in result["ways"].items()} == \
        {way: [30 * 3 + 1 + 3 * 3 + 2 + 2 + 1] for way in erasure.WAYS}
    assert result["ways"]["plain_sql"]["ratio"] == 1.0 and result["others_kept"]
    assert [r["messages"] for r in result["receipts"]] == [30, 30]  # user_forget's two users


@pytest.mark.parametrize("bad", [["--messages", "0"], ["--repeat", "0"]])
def test_erasure_bench_refuses_bad_sizes(bad):
    with pytest.raises(SystemExit) as e:
        erasure.main(bad)
    assert e.value.code == 2
