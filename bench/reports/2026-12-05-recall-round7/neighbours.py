"""Two @10 ideas on ../2026-12-04-recall-floor/replica.py's offline replica (issue 32, round 7):
vectors of each turn embedded with its neighbour (the turn before, or after: "contextual"
embeddings), and other rules for the next turns. The development data stays outside the
repository (CC BY-NC): the dump and the vectors are written under /tmp.

    PYMEM_DATA_DIR=/tmp/bench-recall python bench/recall.py                      # loads the data (MiniLM)
    PYMEM_DATA_DIR=/tmp/bench-recall python ../2026-12-04-recall-floor/replica.py dump /tmp/recall-dump.pkl
    PYMEM_DATA_DIR=/tmp/bench-recall python neighbours.py embed /tmp/recall-dump.pkl /tmp/recall-dump-ctx.pkl
    python neighbours.py run /tmp/recall-dump-ctx.pkl
"""

from __future__ import annotations

import collections
import pickle
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent / "2026-12-04-recall-floor"))

import replica  # noqa: E402


def embed(src: str, dst: str) -> None:
    """Each turn's text, and MiniLM vectors of "turn before + turn" and "turn + turn after"."""
    sys.path.insert(0, str(ROOT))
    import psycopg

    import bench.recall as br
    import pymem
    from pymem.embedders.base import embed as run

    data = pickle.loads(Path(src).read_bytes())
    db = pymem.Database(pymem.Settings(), migrate=False)
    emb = br._embedder("onnx")
    with psycopg.connect(db.conninfo, autocommit=True) as c:
        for user, d in data.items():
            rows = dict(c.execute("SELECT seq, content FROM pymem.messages WHERE project_id = %s AND user_id = %s",
                                  (br.PROJECT, user)).fetchall())
            texts = [rows[s] for s in d["seq"]]
            d["text"] = texts
            d["cvec"] = np.array(run(emb, [(texts[i - 1] + "\n" if i else "") + t for i, t in enumerate(texts)]),
                                 dtype=np.float32)
            d["nvec"] = np.array(run(emb, [t + ("\n" + texts[i + 1] if i + 1 < len(texts) else "")
                                           for i, t in enumerate(texts)]), dtype=np.float32)
    Path(dst).write_bytes(pickle.dumps(data))


def mixed(f, lw: float = 0.4):
    """The shipped relevance with the cosine replaced by f(own, with the turn before, with the turn after)."""
    def adjust(d, qi, rel):
        q = d["qvec"][qi] / np.linalg.norm(d["qvec"][qi])
        own, before, after = d["vn"] @ q, d["cn"] @ q, d["nn"] @ q
        lexical = rel - (1 - lw) * own if d["q"][qi]["terms"] else 0 * own
        return (1 - lw) * f(own, before, after) + lexical
    return adjust


def rank(d, rel, ok, k=10, next_w=0.8, turns=2, top_m=None, decay=1.0, other_speaker=False, cap=None):
    """replica.rank with other next-turn rules: only from the top_m best, the second turn at decay x,
    only a turn by the other speaker, at most cap next turns among the k."""
    by_score = sorted(np.flatnonzero(ok), key=lambda i: (-rel[i], -d["seq"][i]))
    score = {i: (rel[i], 0, -d["seq"][i]) for i in by_score[:k]}
    for i in (by_score[:k][:top_m] if top_m else by_score[:k]) if next_w else ():
        for h in range(1, turns + 1):
            j = i + h
            if j >= len(rel) or not d["elig"][j]:
                continue
            if other_speaker and d["text"][j].split(":", 1)[0] == d["text"][i].split(":", 1)[0]:
                continue
            w = next_w * decay ** (h - 1)
            if j not in score or round(w * rel[i], 9) > round(score[j][0], 9):
                score[j] = (w * rel[i], h, -d["seq"][j])
    order = sorted(score, key=lambda i: (-round(score[i][0], 9), score[i][1], score[i][2]))
    if cap is not None:
        out, n = [], 0
        for i in order:
            if score[i][1] and n >= cap:
                continue
            n += bool(score[i][1])
            out.append(i)
        out += [i for i in by_score[k:k + 20] if i not in out]
        order = out
    return [d["dia"][i] for i in order[:k]]


def evaluate(data, adjust=None, **kw):
    per = collections.defaultdict(list)
    for d in data.values():
        for qi, q in enumerate(d["q"]):
            rel, ok = replica.relevance(d, qi)
            if adjust:
                rel = adjust(d, qi, rel)
            got, ev = rank(d, rel, ok, **kw), set(q["ev"])
            r = [len(ev & set(got[:k])) / len(ev) for k in (5, 10)]
            per[q["cat"]].append(r)
            per["overall"].append(r)
    return {c: tuple(float(np.mean([x[i] for x in v])) for i in (0, 1)) for c, v in per.items()}


def run(path: str) -> None:
    data = replica.prepare(pickle.loads(Path(path).read_bytes()))
    for d in data.values():
        d["cn"] = d["cvec"] / np.linalg.norm(d["cvec"], axis=1, keepdims=True)
        d["nn"] = d["nvec"] / np.linalg.norm(d["nvec"], axis=1, keepdims=True)
    rows = [("shipped (+next)", {}),
            ("cosine of turn before + turn", {"adjust": mixed(lambda o, b, a: b)}),
            ("max(own, turn before + turn)", {"adjust": mixed(lambda o, b, a: np.maximum(o, b))}),
            ("max(own, turn + turn after)", {"adjust": mixed(lambda o, b, a: np.maximum(o, a))}),
            ("max of the three", {"adjust": mixed(lambda o, b, a: np.maximum(np.maximum(o, b), a))}),
            ("mean of the three", {"adjust": mixed(lambda o, b, a: (o + b + a) / 3)}),
            ("0.7 own + 0.3 turn before + turn", {"adjust": mixed(lambda o, b, a: 0.7 * o + 0.3 * b)}),
            ("next turns: the turn after only", {"turns": 1}),
            ("next turns: the second at 0.8 x", {"decay": 0.8}),
            ("next turns: the other speaker's only", {"other_speaker": True}),
            ("next turns: from the best 3 only", {"top_m": 3}),
            ("next turns: at most 3 / 4 of the 10", {"cap": 3}), ("", {"cap": 4}),
            ("next turn weight 0.7 / 0.9", {"next_w": 0.7}), ("", {"next_w": 0.9})]
    print("| variant | @5 | @10 | multi-hop @10 | single-hop @10 | temporal @10 |\n|---|--:|--:|--:|--:|--:|")
    for name, kw in rows:
        r = evaluate(data, **kw)
        print(f"| {name or '(same)'} | {r['overall'][0]:.3f} | {r['overall'][1]:.3f} | {r['multi-hop'][1]:.3f} | "
              f"{r['single-hop'][1]:.3f} | {r['temporal'][1]:.3f} |")


if __name__ == "__main__":
    {"embed": lambda: embed(sys.argv[2], sys.argv[3]), "run": lambda: run(sys.argv[2])}[sys.argv[1]]()
