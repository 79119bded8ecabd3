"""An offline replica of recall's ranking (time off: bench/recall.py's "+next" step) on the
development data, to try ranking ideas in seconds; it reproduces the SQL's figures exactly.

    PYMEM_DATA_DIR=/tmp/bench-recall python bench/recall.py          # loads the data (MiniLM)
    PYMEM_DATA_DIR=/tmp/bench-recall python replica.py dump /tmp/recall-dump.pkl
    python replica.py run /tmp/recall-dump.pkl

The dump (stored vectors, lexemes, lengths, the questions' vectors and terms) is written outside the
repository: the data is CC BY-NC and is never copied into it.
"""

from __future__ import annotations

import collections
import json
import math
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]


def dump(path: str) -> None:
    sys.path.insert(0, str(ROOT))
    import psycopg

    import bench.recall as br
    import pymem
    from pymem.embedders.base import embed

    data = json.loads(br.DEFAULT_DATA.read_text())
    db = pymem.Database(pymem.Settings(), migrate=False)
    emb = br._embedder("onnx")
    c = psycopg.connect(db.conninfo, autocommit=True)
    out = {}
    for conv in data:
        user = f"locomo-{conv['sample_id']}"
        rows = c.execute(
            "SELECT m.seq, m.metadata->>'dia_id', e.embedding::text, tsvector_to_array(e.lexemes), e.tokens, e.chars,"
            " (SELECT array_agg(cardinality(x.positions)) FROM unnest(e.lexemes) AS x)"
            " FROM pymem.messages AS m JOIN pymem.message_embeddings AS e USING (project_id, user_id, thread_id, seq)"
            " WHERE m.project_id = %s AND m.user_id = %s AND e.embedder = %s ORDER BY m.seq",
            (br.PROJECT, user, emb.name)).fetchall()
        qs = [q for q in conv["qa"] if q.get("category") in br.CATEGORIES and br.evidence_ids(q)]
        terms = [c.execute("SELECT tsvector_to_array(pymem._lexemes(NULL, %s))", (q["question"],)).fetchone()[0]
                 for q in qs]
        out[user] = {
            "seq": [r[0] for r in rows], "dia": [r[1] for r in rows],
            "vec": np.array([json.loads(r[2]) for r in rows], dtype=np.float32),
            "lex": [r[3] for r in rows], "tokens": [r[4] for r in rows], "chars": [r[5] for r in rows],
            "tf": [r[6] for r in rows],
            "q": [{"cat": br.CATEGORIES[q["category"]], "ev": sorted(br.evidence_ids(q)), "terms": t}
                  for q, t in zip(qs, terms, strict=True)],
            "qvec": np.array(embed(emb, [q["question"] for q in qs], query=True), dtype=np.float32)}
    Path(path).write_bytes(pickle.dumps(out))


def prepare(data: dict) -> dict:
    for d in data.values():
        d["vn"] = d["vec"] / np.linalg.norm(d["vec"], axis=1, keepdims=True)
        d["lexset"] = [set(x) for x in d["lex"]]
        d["tfmap"] = [dict(zip(x, t, strict=True)) for x, t in zip(d["lex"], d["tf"], strict=True)]
        d["elig"] = np.array([c >= 10 for c in d["chars"]])  # min_content_chars
    return data


def idfs(d: dict, terms: list[str], docs: list[set] | None = None) -> dict[str, float]:
    docs = docs or d["lexset"]
    n = len(docs)
    df = {t: sum(1 for s in docs if t in s) for t in terms}
    return {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}


def bm25(d: dict, terms: list[str], b: float = 0.3, k1: float = 1.2, use_tf: bool = False,
         docs: list[set] | None = None) -> np.ndarray:
    """pymem._bm25 of each row (a term counted once per message unless use_tf)."""
    docs = docs or d["lexset"]
    idf, avgdl = idfs(d, terms, docs), max(float(np.mean(d["tokens"])), 1)
    out = np.zeros(len(docs))
    for i, s in enumerate(docs):
        norm = k1 * (1 - b + b * d["tokens"][i] / avgdl)
        if use_tf:
            out[i] = sum(idf[t] * d["tfmap"][i][t] * (k1 + 1) / (d["tfmap"][i][t] + norm) for t in terms if t in s)
        else:
            out[i] = sum(idf[t] for t in terms if t in s) * (k1 + 1) / (1 + norm)
    return out


def relevance(d: dict, qi: int, lw: float = 0.4, norm: str = "max", use_tf: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(relevance, eligible): (1 - lw) cosine + lw BM25 normalised by the best eligible match ("max", shipped)
    or by the sum of the query terms' idfs ("idf-sum", a row-local score)."""
    q = d["q"][qi]
    cos = d["vn"] @ (d["qvec"][qi] / np.linalg.norm(d["qvec"][qi]))
    if not q["terms"]:
        return cos, d["elig"] & (cos > 1e-5)
    bm = bm25(d, q["terms"], use_tf=use_tf)
    hit = bm > 0
    if norm == "max":
        top = bm[d["elig"] & hit].max() if (d["elig"] & hit).any() else 0
    else:
        top = sum(idfs(d, q["terms"]).values())
    lex = np.minimum(bm / top, 1) if top > 0 else bm
    return (1 - lw) * cos + lw * lex, d["elig"] & (hit | (cos > 1e-5))


def rank(d: dict, rel: np.ndarray, ok: np.ndarray, k: int = 10, next_w: float = 0.8, turns: int = 2) -> list[str]:
    """The k best, each of them bringing its next `turns` turns at next_w x its score (_recall_turns)."""
    top = sorted(np.flatnonzero(ok), key=lambda i: (-rel[i], -d["seq"][i]))[:k]
    score = {i: (rel[i], 0, -d["seq"][i]) for i in top}
    for i in top if next_w else ():
        for h in range(1, turns + 1):
            j = i + h  # one thread: row order is seq order
            if j < len(rel) and d["elig"][j] and (j not in score or round(next_w * rel[i], 9) > round(score[j][0], 9)):
                score[j] = (next_w * rel[i], h, -d["seq"][j])
    return [d["dia"][i] for i in sorted(score, key=lambda i: (-round(score[i][0], 9), score[i][1], score[i][2]))[:k]]


def evaluate(data: dict, adjust=None, next_w: float = 0.8, **kw) -> dict[str, tuple[float, float]]:
    per = collections.defaultdict(list)
    for d in data.values():
        for qi, q in enumerate(d["q"]):
            rel, ok = relevance(d, qi, **kw)
            if adjust:
                rel = adjust(d, qi, rel)
            got, ev = rank(d, rel, ok, next_w=next_w), set(q["ev"])
            r = [len(ev & set(got[:k])) / len(ev) for k in (5, 10)]
            per[q["cat"]].append(r)
            per["overall"].append(r)
    return {c: (round(float(np.mean([x[0] for x in v])), 3), round(float(np.mean([x[1] for x in v])), 3))
            for c, v in per.items()}


def previous_turn_lexical(a: float):
    """BM25 of each turn's own lexemes plus a x that of the turn before (document expansion)."""
    def f(d, qi, rel):
        terms = d["q"][qi]["terms"]
        if not terms:
            return rel
        bm = bm25(d, terms) + a * bm25(d, terms, docs=[set(), *d["lexset"][:-1]])
        top = bm[d["elig"]].max()
        cos = d["vn"] @ (d["qvec"][qi] / np.linalg.norm(d["qvec"][qi]))
        return 0.6 * cos + 0.4 * (bm / top if top > 0 else bm)
    return f


def previous_turn_cosine(beta: float):
    """A bonus of beta x 0.6 x the cosine of the turn before."""
    def f(d, qi, rel):
        cos = d["vn"] @ (d["qvec"][qi] / np.linalg.norm(d["qvec"][qi]))
        return rel + beta * 0.6 * np.maximum(np.concatenate([[0], cos[:-1]]), 0)
    return f


def run(path: str) -> None:
    data = prepare(pickle.loads(Path(path).read_bytes()))
    rows = [("shipped (+next)", {}), ("no next turns", {"next_w": 0}), ("BM25 with term frequency", {"use_tf": True})]
    rows += [(f"lexical + {a} x the turn before's", {"adjust": previous_turn_lexical(a)}) for a in (0.2, 0.35, 0.5)]
    rows += [(f"+ {b} x 0.6 x the turn before's cosine", {"adjust": previous_turn_cosine(b)}) for b in (0.1, 0.2, 0.3)]
    rows += [(f"row-local: BM25 / sum of idfs, lw {lw}", {"norm": "idf-sum", "lw": lw}) for lw in (0.4, 0.5, 0.6, 0.7)]
    print("| variant | @5 | @10 | multi-hop @10 | single-hop @10 |\n|---|--:|--:|--:|--:|")
    for name, kw in rows:
        r = evaluate(data, **kw)
        print(f"| {name} | {r['overall'][0]:.3f} | {r['overall'][1]:.3f} | {r['multi-hop'][1]:.3f} | {r['single-hop'][1]:.3f} |")


if __name__ == "__main__":
    {"dump": dump, "run": run}[sys.argv[1]](sys.argv[2])
