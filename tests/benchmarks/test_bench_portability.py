"""bench/portability.py runs end to end at a tiny size (behaviour only, never timings)."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import portability  # noqa: E402


def test_portability_bench_small(dsn, tmp_path):
    result = portability.main(["--dsn", dsn, "--facts", "300", "--messages", "200", "--threads", "3", "--chain", "150",
                               "--learned", "1,10,max", "--turns", "4", "--warmup", "1", "--max-learned", "25",
                               "--quiet", "--results-dir", str(tmp_path)])
    user, chain = result["user"], result["chain"]
    assert (user["facts"], user["rows"], chain["facts"], chain["rows"]) == (300, 500, 150, 150)
    assert user["imported"] == {"project_id": "bench-port", "user_id": "port-copy", "facts": 300, "threads": 3,
                                "messages": 200}
    assert user["round_trip_exact"] and chain["round_trip_exact"]
    for r in (user, chain):
        assert r["export_s"] > 0 and r["import_s"] > 0 and r["import_replace_s"] > 0
    assert list(result["turns"]) == ["1", "10", "100"] and result["max_learned_per_turn"] == 100
    for size, m in result["turns"].items():
        assert m["iterations"] == 4 and m["p50_ms"] <= m["p99_ms"], size
        assert m["learned_per_turn"] == [int(size)]  # every turn learned that many facts
        assert m["learned_kept"] == min(25, 5 * int(size))  # warm-up + timed turns, under the cap
    assert result["one_more_than_max"] == "refused (22023)"
    with psycopg.connect(dsn) as c:  # the generated chain is one straight line of 150 versions
        assert c.execute("""SELECT count(*), count(superseded_by) FROM pymem.facts
                            WHERE project_id = 'bench-port' AND scope_id = 'port-chain'""").fetchone() == (150, 149)
    assert Path(result["result_file"]).exists()
    assert "round trip exact" in portability.report(result)


@pytest.mark.parametrize("bad", [["--facts", "0"], ["--messages", "0"], ["--chain", "0"], ["--turns", "0"],
                                 ["--warmup", "-1"], ["--learned", "0"], ["--learned", "ten"], ["--max-learned", "0"],
                                 ["--threads", "5", "--messages", "4"]])
def test_portability_bench_refuses_bad_arguments(bad):
    with pytest.raises(SystemExit) as e:
        portability.parse_args(bad)
    assert e.value.code == 2
