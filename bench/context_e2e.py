"""What ``Memory.context()`` costs end to end with hybrid recall against vector-only recall, the
question's embedding included (issue 61's cost goal: hybrid <= 1.3x vector-only, same run), on a
database of ``bench/conversations.py``, in alternating rounds on one connection pool.

    PYMEM_DATA_DIR=/tmp/cost python bench/conversations.py --messages 1000000 --fresh --no-hnsw
    PYMEM_DATA_DIR=/tmp/cost python bench/context_e2e.py [--rounds 9] [--calls 40]

Each round times ``--calls`` calls of each variant for the benchmark's probe (1,000 messages, 200
facts), the variants in turns (ABAB... within the round, the first variant alternating by round):

- ``hybrid``: ``Memory.context(question)`` with the defaults (vector and text);
- ``vector``: the same with ``lexical_weight=0, fact_lexical_weight=0`` (hybrid off: the text is
  not read, the call costs what the vector call costs).

The question is embedded in the call by all-MiniLM-L6-v2 int8 (``OnnxMiniLMEmbedder``, the
``[embed]`` extra; ``--embedder hash`` for HashEmbedder): the benchmark's stored vectors are
HashEmbedder's, so the embedder used here pays MiniLM's embedding of the question for real and
hands recall the question's HashEmbedder vector (same name and dimension as what is stored), so
that both variants rank the rows the database holds. The SQL cost is that of a 384-d query, as
with MiniLM. Reports wall time per call, median of the rounds' medians, and the ratio
hybrid / vector per round (its median, min and max). Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymem
from bench.conv.config import AGENT_ID, PROBE_ID, PROBE_PROJECT
from bench.conv.texts import PROBE_QUERIES
from pymem.embedders import HashEmbedder


class PaysFor:
    """An embedder that embeds each text with ``cost`` (the time a real model takes) and returns
    ``stored``'s vector of it (what the database's rows were embedded with)."""

    def __init__(self, cost, stored: HashEmbedder) -> None:
        self.cost, self.stored = cost, stored
        self.name, self.dimension = stored.name, stored.dimension
        self.paid = 0  # texts embedded by `cost`

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.cost.embed(texts)
        self.paid += len(texts)
        return self.stored.embed(texts)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--embedder", choices=("onnx", "hash"), default="onnx")
    ap.add_argument("--dsn", help="the benchmark's database (default: PYMEM_DSN, else the embedded server)")
    args = ap.parse_args(argv)
    db = pymem.Database(pymem.Settings(dsn=args.dsn) if args.dsn else pymem.Settings(), migrate=False)
    stored = HashEmbedder()
    if args.embedder == "onnx":
        from pymem.embedders import OnnxMiniLMEmbedder
        cost = OnnxMiniLMEmbedder()
        cost.embed(["warm up"])
    else:
        cost = HashEmbedder()
    emb = PaysFor(cost, stored)
    mems = {"hybrid": pymem.Memory(agent_id=AGENT_ID, project_id=PROBE_PROJECT, embedder=emb, db=db),
            "vector": pymem.Memory(agent_id=AGENT_ID, project_id=PROBE_PROJECT, embedder=emb, db=db,
                                   lexical_weight=0, fact_lexical_weight=0),
            "embed": None}
    for name in ("hybrid", "vector"):
        if not mems[name].read(PROBE_QUERIES[0], user=PROBE_ID).recalled:
            raise SystemExit("the probe recalls nothing: run bench/conversations.py on this database first")
    paid = emb.paid
    per: dict[str, list[float]] = {n: [] for n in mems}
    ratios = []
    for rnd in range(args.rounds):
        samples: dict[str, list[int]] = {n: [] for n in mems}
        order = list(mems) if rnd % 2 == 0 else list(reversed(mems))
        for i in range(args.calls):
            q = PROBE_QUERIES[(rnd * args.calls + i) % len(PROBE_QUERIES)]
            for name in order:
                t0 = time.perf_counter_ns()
                if mems[name] is None:
                    cost.embed([q])  # the question's embedding alone
                else:
                    mems[name].context(q, user=PROBE_ID)
                samples[name].append(time.perf_counter_ns() - t0)
        med = {n: statistics.median(s) / 1e6 for n, s in samples.items()}
        for n in mems:
            per[n].append(med[n])
        ratios.append(med["hybrid"] / med["vector"])
        print(f"round {rnd + 1}: hybrid {med['hybrid']:.3f} ms, vector {med['vector']:.3f} ms, "
              f"embedding alone {med['embed']:.3f} ms, hybrid / vector {ratios[-1]:.3f}", flush=True)
    out = {n: statistics.median(v) for n, v in per.items()} | {
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "embedder": cost.name, "rounds": args.rounds, "calls": args.calls,
        "embedded_per_context": (emb.paid - paid) / (2 * args.rounds * args.calls)}
    print(f"Memory.context() end to end ({cost.name} embedding the question), medians of {args.rounds} rounds of "
          f"{args.calls} calls: hybrid {out['hybrid']:.3f} ms, vector-only {out['vector']:.3f} ms, the embedding "
          f"alone {out['embed']:.3f} ms; hybrid / vector {out['ratio_median']:.3f} "
          f"(rounds {out['ratio_min']:.3f}-{out['ratio_max']:.3f})")
    db.close()
    return out


if __name__ == "__main__":
    main()
