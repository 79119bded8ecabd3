"""bench/per_call.py (the statement timeout's three ways to the server) runs end to end at a tiny
size: behaviour only, never timings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import per_call  # noqa: E402


def test_per_call_bench_small(dsn):
    result = per_call.main(["--dsn", dsn, "--users", "4", "--facts", "2", "--calls", "20", "--warmup", "2"])
    assert result["same_rows"] == {"newest 50": True, "re-add": True}  # the three ways answer alike
    for op, sides in result["table"].items():
        assert set(sides) == {"session", "pipeline", "simple"}, op
        assert sides["session"]["ratio"] == 1.0 and all(s["p50_us"] > 0 for s in sides.values()), op


@pytest.mark.parametrize("bad", [["--users", "0"], ["--calls", "5"], ["--warmup", "-1"]])
def test_per_call_bench_refuses_bad_sizes(bad):
    with pytest.raises(SystemExit) as e:
        per_call.main(bad)
    assert e.value.code == 2
