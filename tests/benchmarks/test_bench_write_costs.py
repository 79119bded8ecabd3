"""bench/write_costs.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import write_costs  # noqa: E402


def test_write_costs_bench_small(dsn, tmp_path):
    result = write_costs.main(["--dsn", dsn, "--rounds", "1", "--calls", "3", "--results-dir", str(tmp_path)])
    assert set(result["writes"]) == set(write_costs.CALLS)
    for call, sides in result["writes"].items():
        assert set(sides) == set(write_costs.DBS), call
        assert sides["base"]["cpu_ratio"] == 1.0 and sides["base"]["wall_ratio"] == 1.0
        for name, m in sides.items():
            assert m["cpu_us"] > 0 and m["wall_us"] > 0, (call, name)
    # what each database differs in: the bounds dropped on one, the feed on for the other only
    for name, db in write_costs.DBS.items():
        with psycopg.connect(make_conninfo(dsn, dbname=db), autocommit=True) as c:
            bounds = c.execute("SELECT count(*) FROM pg_constraint WHERE conname LIKE '%%\\_bounded'").fetchone()[0]
            feed = c.execute("SELECT count(*) FROM pymem.changes").fetchone()[0]
        assert bounds == (0 if name == "no_bounds" else len(write_costs.BOUNDS)), name
        assert (feed > 0) == (name == "feed"), name
    assert Path(result["result_file"]).exists()
