"""Round 6's row-local score (BM25 divided by the sum of the query's idfs: each row scored alone,
what a one-pass hybrid needs) against the shipped one (divided by the best eligible match), each
at the lexical weight chosen with one conversation held out in turn, on the offline replica
(../2026-12-04-recall-floor/replica.py: "+next", no named time). Statistics: every message's, or
only the newest 200 / 400 messages' (a sample read before the pass, with no count kept on write).

    python row_local.py /tmp/recall-dump.pkl     # the dump of replica.py
"""

from __future__ import annotations

import collections
import math
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-12-04-recall-floor"))

import replica  # noqa: E402

GRID = [0.3, 0.33, 0.36, 0.4, 0.5, 0.6, 0.7, 0.8]


def row_local(d: dict, qi: int, lw: float, sample: int | None) -> tuple[np.ndarray, np.ndarray]:
    q = d["q"][qi]
    cos = d["vn"] @ (d["qvec"][qi] / np.linalg.norm(d["qvec"][qi]))
    if not q["terms"]:
        return cos, d["elig"] & (cos > 1e-5)
    docs = d["lexset"][-sample:] if sample else d["lexset"]
    df = {t: sum(1 for s in docs if t in s) for t in q["terms"]}
    idf = {t: math.log(1 + (len(docs) - df[t] + 0.5) / (df[t] + 0.5)) for t in q["terms"]}
    avgdl = max(float(np.mean(d["tokens"][-sample:] if sample else d["tokens"])), 1)
    bm = np.array([sum(idf[t] for t in q["terms"] if t in s) * 2.2 / (1 + 1.2 * (0.7 + 0.3 * d["tokens"][i] / avgdl))
                   for i, s in enumerate(d["lexset"])])
    norm = sum(idf.values())
    lex = np.minimum(bm / norm, 1) if norm > 0 else bm
    return (1 - lw) * cos + lw * lex, d["elig"] & ((bm > 0) | (cos > 1e-5))


def scores(data: dict, kind: str, lw: float, sample: int | None) -> dict[str, tuple[float, float, int]]:
    per = collections.defaultdict(list)
    for u, d in data.items():
        for qi, q in enumerate(d["q"]):
            rel, ok = replica.relevance(d, qi, lw=lw) if kind == "shipped" else row_local(d, qi, lw, sample)
            got, ev = replica.rank(d, rel, ok), set(q["ev"])
            r = [len(ev & set(got[:k])) / len(ev) for k in (5, 10)]
            per[u].append(r)
            per["all"].append(r)
    return {u: (float(np.mean([x[0] for x in v])), float(np.mean([x[1] for x in v])), len(v)) for u, v in per.items()}


def main(path: str) -> None:
    data = replica.prepare(pickle.loads(Path(path).read_bytes()))
    convs = list(data)
    print("| ranking | " + " | ".join(f"lw {lw}" for lw in GRID) + " | held out (chosen lw) |")
    print("|---|" + "--:|" * (len(GRID) + 1))
    for name, kind, sample in (("shipped: / best match", "shipped", None), ("row-local, every message", "local", None),
                               ("row-local, newest 200", "local", 200), ("row-local, newest 400", "local", 400)):
        res = {lw: scores(data, kind, lw, sample) for lw in GRID}
        tot, n, chosen = np.zeros(2), 0, []
        for held in convs:
            rest = [c for c in convs if c != held]
            best = max(GRID, key=lambda lw: sum((res[lw][c][0] + res[lw][c][1]) * res[lw][c][2] for c in rest))
            chosen.append(best)
            tot += np.array(res[best][held][:2]) * res[best][held][2]
            n += res[best][held][2]
        cells = [f"{res[lw]['all'][0]:.3f} / {res[lw]['all'][1]:.3f}" for lw in GRID]
        print(f"| {name} | " + " | ".join(cells) + f" | {tot[0] / n:.3f} / {tot[1] / n:.3f} ({', '.join(map(str, chosen))}) |")


if __name__ == "__main__":
    main(sys.argv[1])
