"""bench/citus_proof.py's reading of Citus plans and of two reports (no server needed; the
benchmarks themselves run on a cluster by hand, bench/README.md "On a Citus cluster")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import citus_proof  # noqa: E402

# the shape of EXPLAIN (FORMAT JSON) of a delegated call on a Citus coordinator
DELEGATED = {
    "Node Type": "Custom Scan", "Custom Plan Provider": "Citus Adaptive",
    "Distributed Query": {"Job": {"Task Count": 1, "Tasks Shown": "All", "Tasks": [
        {"Node": "host=127.0.0.1 port=5433 dbname=postgres",
         "Remote Plan": [[{"Plan": {"Node Type": "Function Scan"}}]]}]}},
}


def test_tasks_of_a_delegated_call_and_of_a_plain_plan():
    assert citus_proof._tasks(DELEGATED) == [
        {"task_count": 1, "tasks_shown": "All", "nodes": ["host=127.0.0.1 port=5433 dbname=postgres"]}]
    nested = {"Node Type": "Result", "Plans": [DELEGATED, {"Node Type": "Seq Scan"}]}
    assert [t["task_count"] for t in citus_proof._tasks(nested)] == [1]
    assert citus_proof._tasks({"Node Type": "Seq Scan"}) == []


def test_compare_puts_both_reports_side_by_side(tmp_path):
    cluster, single = tmp_path / "cluster", tmp_path / "single"
    for folder, (a, b) in ((cluster, (4.0, 5.0)), (single, (2.0, None))):
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps({
            "sizes": [10, 100], "conversations": {"100": {"floor": {"p50_ms": 0.1}}},
            "growth": {"conversations": {"context_sql": {"10": a, "100": b}}}}))
    rows = citus_proof.compare(cluster, single)
    assert rows == [
        {"benchmark": "conversations", "measurement": "context_sql", "size": 10, "cluster_p50_ms": 4.0,
         "single_p50_ms": 2.0, "ratio": 2.0},
        {"benchmark": "conversations", "measurement": "context_sql", "size": 100, "cluster_p50_ms": 5.0,
         "single_p50_ms": None, "ratio": None}]
    (cluster / "conversations-1.json").write_text(json.dumps({
        "benchmark": "conversations", "not_collected": {"context_sql_generic": "not collected on Citus: why"},
        "explain": {"context_read_nested_probe": {"error": "not collected on Citus: because"},
                    "recall_ranked_probe": {"plan": {}, "flagged": []}}}))
    md = citus_proof.markdown({"facts_newest": {"tasks": [{"task_count": 1, "workers": ["worker 1"]}],
                                                "plan_text": ["Task Count: 1"]}},
                              [{"table": "pymem.messages", "worker": "w1", "shards": 16, "rows": 3, "bytes": 2**20},
                               {"table": "pymem.messages", "worker": "w2", "shards": 16, "rows": 1, "bytes": 0}],
                              rows, citus_proof._floors(cluster, single), "single", cluster)
    assert "| facts_newest | 1 | 1 | worker 1 |" in md
    assert "| pymem.messages | w1 | 16 | 3 | 1.0 | 75.0% |" in md
    assert "| conversations | context_sql | 10 | 2.000 | 4.000 | 2.00 |" in md
    assert "| conversations | context_sql | 100 | n/a | 5.000 | n/a |" in md
    assert "- conversations / context_sql_generic: not collected on Citus: why" in md
    assert "- conversations / plan context_read_nested_probe: not collected on Citus: because" in md
    assert "recall_ranked_probe" not in md


def test_plan_flags_see_the_workers_plans():
    from bench import common

    remote = {"Node Type": "Limit", "Plans": [{"Node Type": "Seq Scan", "Relation Name": "facts_102008"}]}
    plan = {**DELEGATED, "Distributed Query": {"Job": {"Task Count": 1, "Tasks": [
        {"Node": "host=127.0.0.1 port=5433 dbname=postgres", "Remote Plan": [[{"Plan": remote}]]}]}}}
    flags = common.plan_flags(plan)
    assert flags["node_types"] == ["Custom Scan", "Limit", "Seq Scan"]
    assert flags["seq_scan"] and flags["flagged"] == [{"Node Type": "Seq Scan", "Relation Name": "facts_102008"}]
