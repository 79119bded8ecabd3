"""bench/heavy.py on a small user this test writes: it builds the user's recall index, times the
user's recall through it and through the exact scan and measures its recall, then (--hnsw, --sweep)
builds, measures and drops a partial HNSW and an IVFFlat index over the user's vectors. Checks the
figures' shape, that the indexes were used and are gone afterwards; no duration is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

import pymem
from pymem import HashEmbedder, Memory

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import heavy  # noqa: E402

TOPICS = ["kayak", "violin", "tomato", "glacier", "pottery", "lantern", "falcon", "meadow", "cactus", "harbor"]


def test_heavy_user_benchmark_on_a_small_user(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn)) as db:
        mem = Memory(db=db, embedder=HashEmbedder(), project_id="acme")
        mem.add_messages([f"message {i} about the {TOPICS[i % 10]} and the {TOPICS[(i * 7) % 10]} trip" for i in range(300)],
                         user="probe")
    out = heavy.main(["--dsn", dsn, "--queries", "3", "--rounds", "2", "--top", "5,50", "--hnsw", "--sweep", "4:1,4",
                      "--quiet"])
    r = out["recall_index"]
    assert r["vectors"] == 300 and r["lists"] == 17 and r["bytes"] > 0
    assert [s.split(" ", 3)[:3] for s in r["statements"]] == [["CREATE", "INDEX", "CONCURRENTLY"],  # IVFFlat, time
                                                              ["CREATE", "INDEX", "CONCURRENTLY"],
                                                              ["SELECT", "pymem.recall_terms_fill(user_id", "=>"]]
    assert set(out["costs"]) == {"context_read vector", "context_read hybrid", "messages_recall vector",
                                 "messages_recall hybrid"}
    for figures in out["costs"].values():
        assert set(figures) == {"exact", "index"} and all(f["p50_ms"] > 0 for f in figures.values())
    assert set(out["recall"]) == {f"{m} k={k}" for m in ("vector", "hybrid") for k in (5, 10, 25)}
    for figures in out["recall"].values():
        assert 0.0 <= figures["min_recall"] <= figures["recall"] <= 1.0
    h = out["hnsw_per_user"]
    assert h["vectors"] == 300 and h["bytes"] > 0
    assert set(h["top"]) == {5, 50}
    for figures in h["top"].values():
        assert figures["uses_index"] is True
        assert 0.0 <= figures["min_recall"] <= figures["recall"] <= 1.0
    sweep = out["ivfflat_sweep"]
    assert sweep["lists"] == 4 and set(sweep["probes"]) == {"1 off", "1 relaxed_order", "4 off", "4 relaxed_order"}
    assert sweep["probes"]["4 off"]["recall@25"] == 1.0  # every list probed: exact
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.recall_indexes").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.recall_terms").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'pymem' AND (indexname LIKE 'bench%' "
                         "OR indexname LIKE 'message_embeddings_recall%')").fetchone()[0] == 0
