"""bench/context_e2e.py on the conversation benchmark's tiny data: both variants recall, every
timed context() embeds its question once through the paying embedder, and the ratios are the
rounds' own. Behaviour only: no duration is ever asserted."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import context_e2e
from bench import conversations as bench_conv
from pymem.embedders import HashEmbedder


def test_context_end_to_end_on_a_tiny_load(dsn, tmp_path, capsys):
    bench_conv.main([
        "--dsn", dsn, "--messages", "2000", "--probe-messages", "100", "--facts", "1000", "--fresh",
        "--iterations", "2", "--warmup", "1", "--heavy-iterations", "1", "--chunk", "1000", "--fact-chunk", "1000",
        "--no-hnsw", "--concurrency", "1", "--concurrency-turns", "2", "--growth-turns", "2", "--growth-block", "1",
        "--no-verify", "--no-write", "--quiet"])
    capsys.readouterr()
    out = context_e2e.main(["--dsn", dsn, "--embedder", "hash", "--rounds", "3", "--calls", "4"])
    printed = capsys.readouterr().out
    assert printed.count("round ") == 3 and "hybrid / vector" in printed
    assert out["embedded_per_context"] == 1  # the question, embedded in each timed call
    assert out["ratio_min"] <= out["ratio_median"] <= out["ratio_max"]
    assert min(out["hybrid"], out["vector"]) > out["embed"] > 0


def test_pays_for_returns_the_stored_vectors():
    seen: list[str] = []

    class Counting(HashEmbedder):
        def embed(self, texts):
            seen.extend(texts)
            return super().embed(["something else"] * len(texts))

    cost, stored = Counting(), HashEmbedder()
    emb = context_e2e.PaysFor(cost, stored)
    assert emb.embed(["a question", "another"]) == stored.embed(["a question", "another"])
    assert seen == ["a question", "another"] and emb.paid == 2
    assert (emb.name, emb.dimension) == (stored.name, stored.dimension)
