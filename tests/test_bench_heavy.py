"""bench/heavy.py on a small user this test writes: it times the user's context reads and builds,
measures and drops a partial HNSW index over the user's vectors. Checks the figures' shape, that
the index was used and is gone afterwards; no duration is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

import pymem
from pymem import HashEmbedder, Memory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import heavy  # noqa: E402

TOPICS = ["kayak", "violin", "tomato", "glacier", "pottery", "lantern", "falcon", "meadow", "cactus", "harbor"]


def test_heavy_user_benchmark_on_a_small_user(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn)) as db:
        mem = Memory(db=db, embedder=HashEmbedder(), project_id="acme")
        mem.add_messages([f"message {i} about the {TOPICS[i % 10]} and the {TOPICS[(i * 7) % 10]} trip" for i in range(300)],
                         user="probe")
    out = heavy.main(["--dsn", dsn, "--queries", "3", "--calls", "2", "--top", "5,50", "--quiet"])
    assert set(out["context_read"]) == {"vector", "hybrid"}
    assert all(v["p50_ms"] > 0 for v in out["context_read"].values())
    h = out["hnsw_per_user"]
    assert h["vectors"] == 300 and h["bytes"] > 0
    assert set(h["top"]) == {5, 50}
    for figures in h["top"].values():
        assert figures["uses_index"] is True
        assert 0.0 <= figures["min_recall"] <= figures["recall"] <= 1.0
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT to_regclass('pymem.bench_heavy_user_hnsw')").fetchone()[0] is None
