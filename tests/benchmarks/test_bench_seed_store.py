"""bench/seed_store.py (pymem beside fastaiagent's PostgresFactStore) runs end to end at a tiny
size: behaviour only, never timings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import seed_store  # noqa: E402


def test_seed_store_bench_small(dsn, tmp_path):
    result = seed_store.main(["--dsn", dsn, "--users", "30", "--facts", "3", "--calls", "20", "--warmup", "2",
                              "--results-dir", str(tmp_path)])
    # the three sides of newest-50 answered the same facts in the same order
    assert result["same_rows"] == {"plain SQL": True, "fastaiagent": True}
    ops = {"newest 50", "re-add", "supersede", "single-fact load"}
    assert set(result["table"]) == ops
    for op, sides in result["table"].items():
        extra = {seed_store.ASKS} if op in ("re-add", "single-fact load") else set()
        assert set(sides) == {"pymem", "fastaiagent", "plain SQL"} | extra, op
        for side, m in sides.items():
            assert 0 < m["p50_us"] <= m["p99_us"] and m["per_s"] > 0, (op, side)
    assert set(result["stale"]["before"]) == {"pymem", "fastaiagent", "plain SQL"}
    assert any("stubbed" in k for k in result["overhead"])
    assert Path(result["result_file"]).exists()
    # each target beside its floor, computed from the table's own figures
    targets = result["targets"]
    assert set(targets) == ops
    t, table = targets["re-add"], result["table"]["re-add"]
    assert t["floor"] == pytest.approx((table["plain SQL"]["p50_us"] + seed_store.PYTHON_BUDGET_US)
                                       / table["fastaiagent"]["p50_us"])
    for op, t in targets.items():
        sense, value = seed_store.TARGETS[op]
        met = t["ratio"] >= value if sense == ">=" else t["ratio"] <= value
        reachable = t["floor"] >= value if sense == ">=" else t["floor"] <= value
        assert t["verdict"] == ("met" if met else "not met" if reachable else "beyond the floor"), op
    # issue 60: each write against the floor of the same run
    vs = result["vs_floor"]
    assert set(vs) == set(seed_store.FLOOR_TARGETS)
    t, table = vs["re-add"], result["table"]["re-add"]
    assert t["ratio"] == pytest.approx(table["pymem"]["p50_us"] / (table["plain SQL"]["p50_us"] + seed_store.PYTHON_BUDGET_US))
    assert vs["single-fact load"]["ratios"]["pymem"] > 0 and t["verdict"] in ("met", "not met")


@pytest.mark.parametrize("bad", [["--users", "2"], ["--calls", "0"], ["--facts", "0"], ["--warmup", "-1"]])
def test_seed_store_bench_refuses_bad_sizes(bad):
    with pytest.raises(SystemExit) as e:
        seed_store.main(bad)
    assert e.value.code == 2

