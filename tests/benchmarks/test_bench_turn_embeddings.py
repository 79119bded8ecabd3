"""bench/turn_embeddings.py end to end at a tiny size with HashEmbedder: it runs both paths and
counts what they embed (a turn: the message once and the answer; read + record apart: three
texts). It never checks a duration."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import turn_embeddings  # noqa: E402


def test_turn_embeddings_counts_the_texts_each_path_embeds(dsn, capsys):
    got = turn_embeddings.main(["--embedder", "hash", "--dsn", dsn, "--rounds", "2", "--turns", "3", "--history", "10"])
    assert got["turn (vector reused)"]["texts"] == 2
    assert got["read + record (embeds the message twice)"]["texts"] == 3
    assert all(v["ms"] > 0 for v in got.values())
    assert "| turn (vector reused) |" in capsys.readouterr().out
