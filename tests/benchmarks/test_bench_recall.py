"""bench/recall.py on a tiny LoCoMo-format file this test writes (never the CC BY-NC dev data):
every turn is stored through the public API with its session's time and metadata, every question
of categories 1-4 is asked, and the figures are shares of the evidence found. No duration is
asserted."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import recall as bench_recall  # noqa: E402

WORDS = ["kayak", "violin", "tomato", "glacier", "pottery", "lantern", "falcon", "meadow", "cactus", "harbor",
         "saffron", "quartz", "walnut", "origami", "tundra", "marimba", "pelican", "basalt", "juniper", "lagoon",
         "tapestry", "zephyr", "obsidian", "mango", "sextant", "bonsai", "cobalt", "fjord", "gazebo", "hemlock"]


def conversation(sample: str, sessions: list[list[str]], dates: list[str], questions: list[tuple]) -> dict:
    conv: dict = {"speaker_a": "Ann", "speaker_b": "Bo"}
    for n, (turns, date) in enumerate(zip(sessions, dates, strict=True), 1):
        conv[f"session_{n}_date_time"] = date
        conv[f"session_{n}"] = [{"speaker": "Ann" if i % 2 == 0 else "Bo", "dia_id": f"D{n}:{i + 1}",
                                 "text": f"I keep thinking about the {w} we talked about"} for i, w in enumerate(turns)]
    qa = [{"question": q, "answer": "x", "evidence": ev, "category": cat} for q, ev, cat in questions]
    return {"sample_id": sample, "conversation": conv, "qa": qa}


def test_recall_benchmark_on_a_synthetic_file(dsn, tmp_path, capsys):
    small = conversation("small", [WORDS[:4], WORDS[4:8]], ["1:56 pm on 8 May, 2023", "10:05 am on 9 June, 2023"],
                         [("What about the kayak?", ["D1:1"], 3), ("The meadow and the falcon?", ["D2:4; D2:3"], 3),
                          ("Something never said", [], 5), ("An adversarial one", ["D1:2"], 5)])
    big = conversation("big", [WORDS[:15], WORDS[15:]], ["4:04 pm on 20 January, 2023", "12:48 am on 1 February, 2023"],
                       [("Where was the violin?", ["D1:2"], 4), ("And the mango, the bonsai?", ["D2:9", "D2:11"], 1),
                        ("When did the quartz come up?", ["D1:12"], 2)])
    path = tmp_path / "locomo-synthetic.json"
    path.write_text(json.dumps([small, big]))
    result = bench_recall.main([str(path), "--dsn", dsn, "--embedder", "hash", "--results-dir", str(tmp_path),
                                "--quiet"])
    out = capsys.readouterr().out
    assert "| overall | 5 |" in out and "p50" in out
    assert result["turns"] == 8 + 30
    for name in ("pymem", "cosine"):
        figures = result["recall"][name]
        # categories 1-4 with evidence only: the two category-5 questions are skipped
        assert figures["overall"]["questions"] == 5 and figures["open-domain"]["questions"] == 2
        assert figures["multi-hop"]["questions"] == figures["temporal"]["questions"] == 1
        # 8 turns: every one of them is among the 10 recalled (none hidden as the window)
        assert figures["open-domain"]["@10"] == 1.0
        for cat in figures.values():
            assert 0 <= cat["@5"] <= cat["@10"] <= 1
    assert set(result["latency_ms"]) == {"pymem", "cosine"} and Path(result["result_file"]).exists()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT content, created_at, metadata FROM pymem.messages WHERE project_id = 'bench-recall'"
            " AND user_id = 'locomo-small' ORDER BY seq").fetchall()
    assert len(rows) == 8
    assert rows[0] == ("Ann: I keep thinking about the kayak we talked about", datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
                       {"speaker": "Ann", "dia_id": "D1:1"})
    assert rows[7][1] == datetime(2023, 6, 9, 10, 5, tzinfo=UTC) and rows[7][2]["dia_id"] == "D2:4"
    # a second run replaces the users' turns instead of adding to them
    again = bench_recall.main([str(path), "--dsn", dsn, "--embedder", "hash", "--results-dir", str(tmp_path),
                               "--quiet", "--conversations", "small"])
    assert again["turns"] == 8 and again["recall"]["pymem"]["overall"]["questions"] == 2


def test_locomo_dates_and_evidence():
    assert bench_recall.parse_date("12:48 am on 1 February, 2023") == datetime(2023, 2, 1, 0, 48, tzinfo=UTC)
    assert bench_recall.evidence_ids({"evidence": ["D8:6; D9:17", "D1:2"]}) == {"D8:6", "D9:17", "D1:2"}
