"""What a turn costs with a real embedder, now that ``Memory.turn`` stores the vector its context
read computed for the user's message (an embedder with one side) instead of embedding the same
text again: ``with mem.turn(q) as t`` against the same read and record done apart
(``mem.read(q)`` then ``mem.record(q, answer)``, which embeds both messages: what a turn did
before), in alternating rounds on one database, one user with a history.

    PYMEM_DATA_DIR=/tmp/bench-turn python bench/turn_embeddings.py [--embedder onnx|e5|hash] [--rounds 7] [--turns 20]

Reports per turn the wall time (median and minimum over rounds), the texts the embedder was
given, and the ratio. Needs the ``[embed]`` extra for onnx (the default), ``[e5]`` for e5.
Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem  # noqa: E402
from pymem.embedders import E5SmallEmbedder, HashEmbedder, OnnxMiniLMEmbedder  # noqa: E402

QUESTIONS = ["What should I cook tonight", "Where did we park the car last weekend", "Remind me of my sister's birthday",
             "Which hotel did I book in Kyoto", "What did the dentist say about my tooth"]
ANSWER = "Here is what I remember about that, and a suggestion for what to do next."


class Counting:
    """Counts the texts an embedder is given (both sides), passing everything through."""

    def __init__(self, inner: object) -> None:
        self.inner, self.texts = inner, 0
        self.name, self.dimension = inner.name, inner.dimension  # type: ignore[attr-defined]
        if hasattr(inner, "embed_query"):
            self.embed_query = self._query

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return self.inner.embed(texts)  # type: ignore[attr-defined]

    def _query(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return self.inner.embed_query(texts)  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedder", choices=("onnx", "e5", "hash"), default="onnx")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--history", type=int, default=200, help="messages of the user's history before the runs")
    ap.add_argument("--dsn", help="a pymem database (migrated); default: the embedded server of PYMEM_DATA_DIR")
    args = ap.parse_args(argv)
    inner = {"onnx": OnnxMiniLMEmbedder, "e5": E5SmallEmbedder, "hash": HashEmbedder}[args.embedder]()
    emb = Counting(inner)
    db = pymem.Database(pymem.Settings(dsn=args.dsn)) if args.dsn else None
    mem = pymem.Memory(**({"db": db} if db is not None else {}), embedder=emb, project_id="bench-turn")
    mem.forget_conversation(user="u")
    mem.add_messages([f"note {i}: {QUESTIONS[i % len(QUESTIONS)]}, and what came of it" for i in range(args.history)],
                     user="u", thread="past")

    def together(q: str) -> None:
        with mem.turn(q, user="u") as t:
            t.answer = ANSWER

    def apart(q: str) -> None:
        mem.read(q, user="u")
        mem.record(q, ANSWER, user="u")

    together(QUESTIONS[0])
    apart(QUESTIONS[0])  # warm-up: the model loaded, plans cached
    times: dict[str, list[float]] = {"turn (vector reused)": [], "read + record (embeds the message twice)": []}
    texts: dict[str, int] = dict.fromkeys(times, 0)
    for r in range(args.rounds):
        order = list(zip(times, (together, apart), strict=True))
        for name, fn in order if r % 2 == 0 else order[::-1]:
            before = emb.texts
            t0 = time.perf_counter()
            for i in range(args.turns):
                fn(QUESTIONS[i % len(QUESTIONS)])
            times[name].append((time.perf_counter() - t0) / args.turns * 1000)
            texts[name] = (emb.texts - before) // args.turns
    base = statistics.median(times["read + record (embeds the message twice)"])
    print(f"embedder {emb.name}, {args.rounds} rounds of {args.turns} turns, user history {args.history} messages")
    print("| path | ms per turn, median (min) | texts embedded per turn | / read + record |")
    print("|---|--:|--:|--:|")
    for name, v in times.items():
        print(f"| {name} | {statistics.median(v):.2f} ({min(v):.2f}) | {texts[name]} | {statistics.median(v) / base:.2f}x |")
    mem.forget_conversation(user="u")
    mem.close()
    if db is not None:
        db.close()
    return {name: {"ms": statistics.median(v), "texts": texts[name]} for name, v in times.items()}


if __name__ == "__main__":
    main()
