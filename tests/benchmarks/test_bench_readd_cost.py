"""bench/readd_cost.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import readd_cost  # noqa: E402


def test_readd_cost_bench_small(dsn, tmp_path):
    result = readd_cost.main(["--dsn", dsn, "--users", "5", "--rounds", "1", "--calls", "4",
                              "--results-dir", str(tmp_path)])
    table = result["table"]
    assert set(table) == {"plain lookup", "fact_lookup", "fact_add, no vector", "fact_add, vector",
                          "persist, asks first", "persist, embeds", "embed", "fact_add, vector, direct",
                          "fact_add, vector, db.query", "fact_add, vector, old db.query"}
    for name, m in table.items():
        assert m["client_cpu_us"] > 0 and m["wall_p50_us"] > 0, name
        assert abs(m["cpu_us"] - (m["client_cpu_us"] + m["server_cpu_us"])) <= 0.11, name
    assert table["embed"]["server_cpu_us"] == 0 and table["fact_lookup"]["server_cpu_us"] > 0
    assert table["fact_add, vector, direct"]["server_cpu_us"] > 0  # its own backend is counted
    assert Path(result["result_file"]).exists()
