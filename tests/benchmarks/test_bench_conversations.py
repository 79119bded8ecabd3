"""bench/conversations.py at a tiny size: it generates what it says, keeps every constraint,
measures every operation, compares the exact recall with HNSW and records the plans.
Behaviour only: no duration is ever asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import conversations as bench_conv  # noqa: E402

MESSAGES = 3000
PROBE_MESSAGES = 100
FACTS = 2000


def run_bench(dsn: str, tmp_path: Path) -> dict:
    return bench_conv.main([
        "--dsn", dsn, "--messages", str(MESSAGES), "--probe-messages", str(PROBE_MESSAGES), "--facts", str(FACTS),
        "--fresh", "--iterations", "8", "--warmup", "3", "--heavy-iterations", "4", "--chunk", "1000",
        "--fact-chunk", "1000", "--hnsw-iterations", "3", "--hnsw-queries", "8", "--hnsw-ef", "10,40",
        "--concurrency", "1,2", "--concurrency-turns", "5", "--growth-turns", "20", "--growth-block", "10",
        "--results-dir", str(tmp_path), "--quiet",
    ])


def test_conversations_benchmark_at_a_tiny_size(dsn, tmp_path, capsys):
    result = run_bench(dsn, tmp_path)  # one run (the expensive part), then each property of it
    out = capsys.readouterr().out
    assert "floor" in out and "recall@k" in out and "writers" in out  # the tables are printed
    check_measurements(result)
    check_generation(result, dsn)
    check_integrity(result, dsn)
    check_hnsw(result, dsn)
    check_concurrency(result)
    check_plans(result)
    check_result_file(result, tmp_path)


def _ordered(name: str, m: dict) -> None:
    assert 0 < m["min_ms"] <= m["p50_ms"] <= m["p95_ms"] <= m["p99_ms"] <= m["max_ms"], name
    assert m["throughput_per_s"] > 0, name


def check_measurements(result: dict) -> None:
    measured = result["measurements"]
    expected = set(bench_conv.REQUIRED) | {
        "floor_pool", "floor_end", "context_embed_query", "context_memory_hash", "context_memory_vector",
        "context_sql_generic",
        "context_sql_custom", "context_sql_heavy_user", "context_memory_heavy_user", "recall_sql_heavy_user",
        "turn_memory_precomputed", "part_user_facts", "part_agent_facts", "part_summary", "part_window",
        "part_recall_ranked", "part_unembedded", "turn_sql_heavy_user_thread",
    }
    assert expected <= set(measured)
    for name, m in measured.items():
        assert m["iterations"] == (4 if "heavy" in name else 8) and m["warmup"] == 3, name
        _ordered(name, m)
        assert "_samples_ns" not in m
    assert result["precomputed_embedder_misses"] == 0  # the cheap embedder really was a lookup
    blocks = result["turn_growth"]["blocks"]
    assert [b["thread_messages_before"] for b in blocks] == [0, 20] and all(b["iterations"] == 10 for b in blocks)
    for b in blocks:
        assert 0 < b["p50_ms"] <= b["p95_ms"] <= b["p99_ms"]


def check_generation(result: dict, dsn: str) -> None:
    gen = result["generation"]["messages"]
    assert gen["messages"] == gen["requested_messages"] == MESSAGES
    assert [c["messages"] for c in gen["chunks"]] == [1000, 1000, 1000]
    assert gen["foreign_key_checks_during_load"] is False  # a superuser: checked by integrity() instead
    assert gen["probe_as_planned"]  # every probe message at the seq, role and content planned
    assert result["generation"]["facts"]["rows"] == FACTS
    data = result["dataset"]
    assert data["messages"] == MESSAGES and 0 < data["unembedded"] < MESSAGES * 0.05
    assert data["vectors"] == MESSAGES - data["unembedded"]
    assert data["median_messages"] < data["max_messages"]  # skewed: many light users, a few heavy
    assert data["threads_with_summary"] > 0 and data["facts"] == FACTS + bench_conv.AGENT_FACTS
    probe = result["probe"]
    for counts in (probe["before"], probe["after"]):  # the measured writes were cleaned up
        assert counts["messages"] == counts["embedded"] == counts["vectors"] == PROBE_MESSAGES
        assert counts["facts_active"] == 200 and set(counts["per_thread"]) == {"default", "trips"}
    heavy = result["heavy_user"]
    assert result["light_user"]["messages"] < PROBE_MESSAGES < heavy["messages"]
    with psycopg.connect(dsn) as c:
        # roles alternate within each probe thread: the user speaks at odd seq
        assert c.execute(
            "SELECT count(*) FROM pymem.messages WHERE project_id = 'acme' AND user_id = 'probe' "
            "AND (seq % 2 = 1) <> (role = 'user')").fetchone()[0] == 0
        # nothing the measurements wrote is left behind
        assert c.execute("SELECT count(*) FROM pymem.threads WHERE thread_id LIKE 'bench-%' "
                         "OR user_id LIKE 'bench-conc-%'").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE scope = 'agent' AND scope_id = %s",
                         (bench_conv.AGENT_ID,)).fetchone()[0] == bench_conv.AGENT_FACTS
        # the turns appended to the heaviest user's thread were taken back out
        assert c.execute("SELECT count(*) FROM pymem.messages WHERE project_id = %s AND user_id = %s",
                         (heavy["project_id"], heavy["user_id"])).fetchone()[0] == heavy["messages"]


def check_integrity(result: dict, dsn: str) -> None:
    integrity = result["integrity"]
    assert integrity["ok"], integrity
    assert set(integrity["violations"]) >= {
        "messages_role_check", "threads_summary_check", "last_seq_not_max_seq", "seq_not_contiguous",
        "vector_copy_mismatch", "embedded_by_mismatch", "wrong_dimension", "nan_inf_or_zero",
        "embedded_by_without_vector", "messages_without_thread", "vectors_without_message"}
    with psycopg.connect(dsn) as c:  # and again on the whole database, after the measured writes
        assert bench_conv.integrity(c, "hash-384-v1", 384)["ok"]
        assert c.execute("SELECT count(*) FROM pymem.message_embeddings WHERE vector_dims(embedding) <> 384"
                         ).fetchone()[0] == 0


def check_hnsw(result: dict, dsn: str) -> None:
    h = result["hnsw"]
    assert h["index"]["build_seconds"] >= 0 and h["index"]["bytes"] > 0
    assert "hnsw" in h["index"]["definition"] and "vector(384)" in h["index"]["definition"]
    assert set(h["subjects"]) == {"probe", result["heavy_user"]["user_id"]}
    for subject in h["subjects"].values():
        variants = subject["variants"]
        assert {"exact", "hnsw_off_ef10", "hnsw_relaxed_ef40", "hnsw_strict_ef10"} <= set(variants)
        exact = variants["exact"]
        assert exact["recall_at_k"] == 1.0 and exact["queries_with_k_rows"] == h["queries"]
        assert exact["plan"]["uses_hnsw"] is False
        for name, v in variants.items():
            _ordered(name, v)
            assert 0 <= v["min_recall_at_k"] <= v["recall_at_k"] <= 1, name
            assert 0 <= v["queries_with_k_rows"] <= h["queries"] and v["mean_rows"] <= h["k"], name
            if name != "exact":
                assert v["plan"]["uses_hnsw"], name  # the variant really ran on the index
    with psycopg.connect(dsn) as c:  # the index is gone
        assert c.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s",
                         (bench_conv.HNSW_INDEX,)).fetchone()[0] == 0


def check_concurrency(result: dict) -> None:
    conc = result["concurrency"]
    assert set(conc) == {"1", "2"}
    for level, r in conc.items():
        assert r["iterations"] == int(level) * 5 and r["threads"] == int(level)
        _ordered(level, r)


def check_plans(result: dict) -> None:
    plans = result["explain"]
    call = plans["context_read_call"]
    assert call["node_types"] == ["Result"] and call["execution_ms"] > 0
    nested = plans["context_read_nested_probe"]["statements"]
    relations = {scan["relation"] for s in nested for scan in s["scans"]}
    assert {"facts", "threads", "messages", "message_embeddings"} <= relations
    for s in nested:
        assert {"seq_scan", "sorts", "whole_user_sort", "whole_user_scans", "duration_ms"} <= set(s)
    recall = plans["recall_ranked_probe"]
    assert "message_embeddings" in " ".join(s.get("Relation Name", "") for s in recall["scans"])
    assert isinstance(recall["sort"], bool) and recall["sorts"]


def check_result_file(result: dict, tmp_path: Path) -> None:
    path = Path(result["result_file"])
    assert path.parent == tmp_path and path.name.startswith("conversations-") and path.suffix == ".json"
    assert '"hnsw"' in path.read_text()


def test_probe_conversation_is_deterministic_and_alternates():
    a = bench_conv.probe_conversation(60, seed=1)
    assert a == bench_conv.probe_conversation(60, seed=1) and len(a) == 60
    for thread in ("default", "trips"):
        rows = [r for r in a if r["thread_id"] == thread]
        assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
        assert all((r["seq"] % 2 == 1) == (r["role"] == "user") for r in rows)


def test_recall_at_k_counts_ties_at_the_boundary():
    exact = [("t", 1, 0.1), ("t", 2, 0.2), ("t", 3, 0.3)]
    assert bench_conv._recall_at_k(exact, exact, 3) == 1.0
    assert bench_conv._recall_at_k(exact, [("t", 1, 0.1), ("t", 9, 0.3), ("t", 7, 0.5)], 3) == 2 / 3
    assert bench_conv._recall_at_k(exact, [("t", 1, 0.1)], 3) == 1 / 3
