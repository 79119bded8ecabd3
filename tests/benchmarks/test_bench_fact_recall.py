"""bench/fact_recall.py on a tiny LoCoMo-format file this test writes (never the CC BY-NC dev data):
every turn becomes a fact through the public API with its session's time and metadata, every
question of categories 1-4 is asked at each weight, and the figures are shares of the evidence
found. No duration is asserted."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import fact_recall  # noqa: E402

WORDS = ["kayak", "violin", "tomato", "glacier", "pottery", "lantern", "falcon", "meadow", "cactus", "harbor",
         "saffron", "quartz", "walnut", "origami", "tundra", "marimba", "pelican", "basalt", "juniper", "lagoon"]


def test_fact_recall_benchmark_on_a_synthetic_file(dsn, tmp_path, capsys):
    conv: dict = {"speaker_a": "Ann", "speaker_b": "Bo"}
    for n, (words, date) in enumerate([(WORDS[:10], "1:56 pm on 8 May, 2023"), (WORDS[10:], "10:05 am on 9 June, 2023")], 1):
        conv[f"session_{n}_date_time"] = date
        conv[f"session_{n}"] = [{"speaker": "Ann" if i % 2 == 0 else "Bo", "dia_id": f"D{n}:{i + 1}",
                                 "text": f"I keep thinking about the {w} we talked about"} for i, w in enumerate(words)]
    qa = [{"question": "What about the kayak?", "answer": "x", "evidence": ["D1:1"], "category": 4},
          {"question": "The quartz and the walnut?", "answer": "x", "evidence": ["D2:2; D2:3"], "category": 1},
          {"question": "Never said", "answer": "x", "evidence": [], "category": 5}]
    path = tmp_path / "locomo-synthetic.json"
    path.write_text(json.dumps([{"sample_id": "s1", "conversation": conv, "qa": qa}]))
    result = fact_recall.main([str(path), "--dsn", dsn, "--embedder", "hash", "--weights", "0,0.5,1",
                               "--results-dir", str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert "fact_lexical_weight 0.5" in out and "bytes per fact" in out
    assert result["turns"] == result["facts"] == 20
    recall = result["recall"]
    assert len(recall) == 2 + 3
    for figures in recall.values():
        assert figures["overall"]["questions"] == 2  # the category-5 question is skipped
        assert 0 <= figures["overall"]["@5"] <= figures["overall"]["@10"] <= 1
    # the words of each question name its evidence: BM25 alone finds all of it in the top 5
    assert recall["retrieve, fact_lexical_weight 1"]["overall"]["@5"] == 1.0
    # weight 0 is cosine alone: the same figures as the SQL baseline
    assert recall["retrieve, fact_lexical_weight 0"]["overall"] == recall["plain cosine (SQL)"]["overall"]
    assert result["lexical_index_bytes_per_fact"] > 0 and Path(result["result_file"]).exists()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT created_at, metadata FROM pymem.facts WHERE project_id = 'bench-fact-recall'"
                            " AND content = 'Ann: I keep thinking about the kayak we talked about'").fetchall()
    assert rows == [(datetime(2023, 5, 8, 13, 56, tzinfo=UTC), {"speaker": "Ann", "dia_id": "D1:1"})]
