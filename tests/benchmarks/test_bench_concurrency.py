"""bench/concurrency.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import concurrency  # noqa: E402


def test_concurrency_bench_small(dsn, tmp_path):
    result = concurrency.main(["--dsn", dsn, "--clients", "1,2", "--ops", "4", "--warmup", "2",
                               "--mode", "threads,processes", "--feed", "--results-dir", str(tmp_path)])
    rows = result["rows"]
    assert [(r["side"], r["mode"], r["clients"]) for r in rows] == [
        (side, mode, n) for mode in ("threads", "processes") for n in (1, 2) for side in ("pymem", "plain SQL")]
    for r in rows:
        assert r["turns_per_s"] > 0 and r["facts_per_s"] > 0, r
        assert 0 < r["turn_p50_ms"] <= r["turn_p99_ms"] and 0 < r["fact_p50_ms"] <= r["fact_p99_ms"], r
    # every operation was done: per client and run, (2 + 4) / 2 turns of two messages and as many facts
    with psycopg.connect(make_conninfo(dsn, dbname=concurrency.DB), autocommit=True) as c:
        for side in ("pymem", "plain"):
            msgs = c.execute("SELECT count(*) FROM pymem.messages WHERE user_id LIKE %s", (f"{side}-client-%",)).fetchone()[0]
            facts = c.execute("SELECT count(*) FROM pymem.facts WHERE scope_id LIKE %s", (f"{side}-client-%",)).fetchone()[0]
            runs = 2 * (1 + 2)  # two modes, 1 + 2 clients
            assert (msgs, facts) == (runs * 3 * 2, runs * 3), side
        # the feed was on: every write of both sides is in it (its triggers fire for plain INSERTs
        # too), each with a position
        assert c.execute("SELECT count(*), count(position) FROM pymem.changes").fetchone() == (2 * runs * 6, 2 * runs * 6)
    assert Path(result["result_file"]).exists()
