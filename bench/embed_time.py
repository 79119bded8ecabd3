"""Embedding time per message of the recall benchmark's embedders (bench/recall.py --embedder):
the first 256 turns of the development data's first conversation, "<speaker>: <text>", in
batches of 32, after a warm-up batch. Reads the data from where it lies (never copied).

    python bench/embed_time.py [--embedders onnx,e5]

Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.recall import DEFAULT_DATA, _embedder, sessions  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedders", default="onnx,e5")
    args = ap.parse_args(argv)
    data = json.loads(Path(DEFAULT_DATA).read_text())
    texts = [f"{t['speaker']}: {t['text']}" for _, turns in sessions(data[0]["conversation"]) for t in turns][:256]
    for name in args.embedders.split(","):
        emb = _embedder(name)
        emb.embed(texts[:8])
        t0 = time.perf_counter()
        for i in range(0, len(texts), 32):
            emb.embed(texts[i:i + 32])
        per = (time.perf_counter() - t0) / len(texts) * 1000
        print(f"{emb.name}: {per:.2f} ms per message (batches of 32, {len(texts)} turns)")


if __name__ == "__main__":
    main()
