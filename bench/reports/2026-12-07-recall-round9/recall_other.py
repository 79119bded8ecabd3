"""bench/recall.py with another embedder: all-mpnet-base-v2 (other_embedder.Mpnet, PyTorch) behind
pymem's SentenceTransformerEmbedder, through the real API and SQL (Memory.add_message, Memory.recall),
so that the replica's figures for it (candidates.py, family "embedder") are checked where pymem ranks.

    PYTHONPATH=/tmp/rc5/tlib:$PYTHONPATH PYMEM_DATA_DIR=/tmp/rc5-mpnet python recall_other.py \\
        /tmp/rc5/mpnet/all-mpnet-base-v2 /work/shared/eval-dev/locomo-dev.json [--option lexical_weight=0.25]

Every argument after the model folder goes to bench/recall.py (whose --embedder is replaced).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2]))

import other_embedder  # noqa: E402

import bench.recall as br  # noqa: E402


class _Model:
    """The two methods SentenceTransformerEmbedder calls, on other_embedder.Mpnet."""

    def __init__(self, folder: str) -> None:
        self.m = other_embedder.Mpnet(folder)

    def encode(self, texts, **kwargs):
        return self.m.embed(list(texts))

    def get_sentence_embedding_dimension(self) -> int:
        return 768


if __name__ == "__main__":
    from pymem.embedders import SentenceTransformerEmbedder

    model = SentenceTransformerEmbedder(_Model(sys.argv[1]), name="st:all-mpnet-base-v2")
    br._embedder = lambda name: model
    br.main(sys.argv[2:])
