"""bench/citus_cost.py (a Citus cluster beside a single server, per call) runs end to end at a
tiny size, here with two plain databases for both targets and the hop: behaviour only, never
timings (the figures come from a cluster, bench/README.md "On a Citus cluster")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import citus_cost  # noqa: E402


def test_citus_cost_bench_small(dsn, empty_dsn, tmp_path):
    out = tmp_path / "cost"
    result = citus_cost.main(["--cluster", empty_dsn, "--single", dsn, "--worker", empty_dsn,
                              "--messages", "10", "--facts", "4", "--agent-facts", "2", "--other-users", "2",
                              "--rounds", "1", "--per-round", "3", "--out", str(out)])
    for target in ("single", "cluster"):
        assert set(result["summary"][target]) == set(citus_cost.MEASUREMENTS), target
        assert all(m["n"] == 3 and m["p50_ms"] > 0 for m in result["summary"][target].values()), target
    assert set(result["summary"]["hop"]) == {"floor", "newest50"}
    assert json.loads((out / "cost.json").read_text())["summary"] == result["summary"]
    assert "| turn_record |" in (out / "cost.md").read_text()
    for target in (dsn, empty_dsn):  # the measured writes are gone, the loaded data stays
        with psycopg.connect(target) as c:
            assert c.execute("SELECT count(*) FROM pymem.threads WHERE thread_id LIKE 'bench-%'").fetchone()[0] == 0
            assert c.execute("SELECT count(*) FROM pymem.messages WHERE user_id = %s",
                             (citus_cost.PROBE,)).fetchone()[0] == 10
