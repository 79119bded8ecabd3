"""bench/embedders_eval.py on a tiny synthetic LoCoMo-format file with the hash embedder: the
recall figures equal a brute-force computation in plain Python, so the script cannot rot
unnoticed. No database, no model package, no duration checked."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("numpy")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import embedders_eval  # noqa: E402
from pymem.embedders import HashEmbedder  # noqa: E402

WORDS = "apple river guitar planet copper violet harbor meadow tiger lantern pepper castle".split()


def _conversation(rng: random.Random, name: str) -> dict[str, Any]:
    """16 turns of 3 words each (turns 1-4 of session 2 repeat session 1's: exact ties), 40
    questions: a third hold their first evidence turn's words, the rest random words (their
    evidence lands anywhere in the ranking), a quarter with two evidence ids in one entry."""
    conv: dict[str, Any] = {"speaker_a": "Ann", "speaker_b": "Bo"}
    turns: list[tuple[str, str]] = []
    for s in (1, 2):
        session = []
        for i in range(1, 9):
            speaker = "Ann" if i % 2 else "Bo"
            text = session_1[i - 1]["text"] if s == 2 and i <= 4 else " ".join(rng.sample(WORDS, 3))
            session.append({"speaker": speaker, "dia_id": f"D{s}:{i}", "text": text})
            turns.append((f"D{s}:{i}", f"{speaker}: {text}"))
        if s == 1:
            session_1 = session
        conv[f"session_{s}"] = session
        conv[f"session_{s}_date_time"] = f"1:56 pm on {s} May, 2023"
    qa = []
    for n in range(40):
        first, second = rng.sample(turns, 2)
        words = first[1].split(": ", 1)[1] if n % 3 == 0 else " ".join(rng.sample(WORDS, 2))
        qa.append({
            "question": words + " " + rng.choice(WORDS),
            "answer": "x",
            "evidence": [f"{first[0]}; {second[0]}"] if n % 4 == 1 else [first[0]],
            "category": 1 + n % 4,
        })
    qa.append({"question": "never said", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5})
    qa.append({"question": "no evidence", "answer": "x", "evidence": [], "category": 3})
    return {"sample_id": name, "conversation": conv, "qa": qa}


def _brute_force(data: list[dict[str, Any]]) -> dict[int, list[tuple[float, float]]]:
    """Recall@5/@10 per category, computed without numpy: cosine of HashEmbedder vectors
    (rounded to 1e-9 as the script does), ties broken by turn order."""
    emb = HashEmbedder(384)
    out: dict[int, list[tuple[float, float]]] = {c: [] for c in (1, 2, 3, 4)}
    for conv in data:
        c = conv["conversation"]
        turns = [t for s in (1, 2) for t in c[f"session_{s}"]]
        vectors = emb.embed([f"{t['speaker']}: {t['text']}" for t in turns])
        for q in conv["qa"]:
            evidence = {e.strip() for item in q["evidence"] for e in item.split(";") if e.strip()}
            if q["category"] not in out or not evidence:
                continue
            qv = emb.embed([q["question"]])[0]
            scores = [round(sum(a * b for a, b in zip(qv, v, strict=True)) / math.sqrt(sum(b * b for b in v)), 9)
                      for v in vectors]
            ranked = sorted(range(len(turns)), key=lambda i: (-scores[i], i))
            ids = [turns[i]["dia_id"] for i in ranked]
            out[q["category"]].append(tuple(len(evidence & set(ids[:k])) / len(evidence) for k in (5, 10)))  # type: ignore[misc]
    return out


def test_recall_matches_a_brute_force_computation(tmp_path: Path) -> None:
    rng = random.Random(7)
    data = [_conversation(rng, "c1"), _conversation(rng, "c2")]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "figures.json"
    got = embedders_eval.main([str(path), "hash", "pymem:HashEmbedder", "--speed-texts", "8", "--batch", "3",
                               "--rounds", "2", "--json", str(out)])
    assert json.loads(out.read_text()) == got

    expected = _brute_force(data)
    names = embedders_eval.CATEGORIES
    for key in ("hash", "pymem:HashEmbedder"):
        r = got["candidates"][key]
        assert r["dimension"] == 384
        for cat, rows in expected.items():
            cell = r["categories"][names[cat]]
            assert cell["n"] == len(rows) == 20  # category 5 and the question without evidence are left out
            assert cell["@5"] == pytest.approx(sum(a for a, _ in rows) / len(rows))
            assert cell["@10"] == pytest.approx(sum(b for _, b in rows) / len(rows))
        every = [row for rows in expected.values() for row in rows]
        assert r["overall"]["n"] == 80
        assert r["overall"]["@10"] == pytest.approx(sum(b for _, b in every) / len(every))
        assert len(r["speed_samples"]) == 2 and r["texts_per_s"] > 0
    # not a degenerate case: recall grows from @5 to @10 and stays below 1
    assert 0 < got["candidates"]["hash"]["overall"]["@5"] < got["candidates"]["hash"]["overall"]["@10"] < 1
    assert got["candidates"]["hash"]["speed_ratio"] == 1.0
    assert got["candidates"]["hash"]["overall"] == got["candidates"]["pymem:HashEmbedder"]["overall"]


def test_unknown_candidate_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([_conversation(random.Random(1), "c")]))
    with pytest.raises(SystemExit, match="unknown candidate 'nope'"):
        embedders_eval.main([str(path), "nope"])
    with pytest.raises(SystemExit, match="no class 'Nope'"):
        embedders_eval.main([str(path), "pymem:Nope"])
