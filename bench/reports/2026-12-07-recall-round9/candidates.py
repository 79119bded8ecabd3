"""Issue 61 (recall round 9): levers that change the candidates, not their order, measured on the
offline replica of recall's ranking (../2026-12-04-recall-floor/replica.py, time off: bench/recall.py's
"+next" step), each knob chosen on two development conversations and scored on the third
(leave-one-conversation-out, as ../2026-12-07-recall-round8/levers.py does).

1. turn context in the embedded text: each turn's vector made from the turn with its neighbour
   turn(s) of the same session, with its session's date, or without its speaker label (the stored text and the lexical side
   stay as they are; only what is embedded changes), used instead of the turn's own vector, beside
   it (the better of the two cosines) or mixed with it; and the cheap form without a second
   embedding: the turn's vector plus a share of its neighbours' stored vectors;
2. multi-query: a question split into sub-queries (one per named entity when it names several, the
   question without its names, its clauses), each ranked as recall ranks a question, fused with the
   whole question's ranking (best score or reciprocal ranks).

    PYMEM_DATA_DIR=/tmp/rc5-recall python bench/recall.py /work/shared/eval-dev/locomo-dev.json   # loads (MiniLM)
    PYMEM_DATA_DIR=/tmp/rc5-recall python candidates.py dump /work/shared/eval-dev/locomo-dev.json /tmp/rc5/dump.pkl
    python candidates.py run /tmp/rc5/dump.pkl [context|smooth|multiquery]
    python candidates.py run /tmp/rc5/dump.pkl embedder /tmp/rc5/mpnet.pkl      # other_embedder.py's vectors

The dump (vectors, lexemes, the questions' vectors and terms, the turns' context texts' vectors) lives
outside the repository: the data is CC BY-NC and is never copied into it.
"""

from __future__ import annotations

import collections
import json
import pickle
import re
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-12-07-recall-round8"))
sys.path.insert(0, str(HERE.parent / "2026-12-04-recall-floor"))
import levers  # noqa: E402
import replica  # noqa: E402

# --- the texts embedded for each turn -------------------------------------------------------------

def turn_texts(conv: dict) -> dict[str, dict[str, str]]:
    """dia_id -> {variant: text}: what bench/recall.py stores ("<speaker>: <text>") and its context forms.
    Neighbours are taken within the turn's session only (a session is one sitting)."""
    import bench.recall as br

    out = {}
    for when, turns in br.sessions(conv["conversation"]):
        own = [f"{t['speaker']}: {t['text']}" for t in turns]
        date = when.strftime("%-d %B %Y")
        for i, t in enumerate(turns):
            prev = own[i - 1] if i else ""
            nxt = own[i + 1] if i + 1 < len(turns) else ""
            out[t["dia_id"]] = {
                "own": own[i],
                "prev": "\n".join(x for x in (prev, own[i]) if x),
                "next": "\n".join(x for x in (own[i], nxt) if x),
                "window": "\n".join(x for x in (prev, own[i], nxt) if x),
                "date": f"{date}. {own[i]}",
                "bare": t["text"],
            }
    return out


CONTEXTS = ("prev", "next", "window", "date", "bare")

# --- sub-queries (no question-level choice: one rule for every question) ---------------------------

_WH = {"What", "When", "Where", "Who", "Why", "How", "Which", "Did", "Do", "Does", "Is", "Are", "Has", "Have",
       "In", "Would", "Was", "Were", "Can", "Could", "I", "The", "A", "An"}


def names(question: str) -> list[str]:
    """Capitalised words that are not the question's first word nor a function word (possessive cut)."""
    words = re.findall(r"[A-Za-z][A-Za-z'\-]*", question)
    out = []
    for i, w in enumerate(words):
        base = re.sub(r"'s?$", "", w)
        if i and base[:1].isupper() and base not in _WH and base not in out:
            out.append(base)
    return out


def _strip(question: str, drop: list[str]) -> str:
    q = question
    for n in drop:
        e = re.escape(n)
        q = re.sub(rf"\b{e}(?:'s?)?\s+(?:and|or)\s+", " ", q)
        q = re.sub(rf"\s+(?:and|or)\s+{e}(?:'s?)?\b", " ", q)
        q = re.sub(rf"\b{e}(?:'s?)?\b", " ", q)
    return " ".join(q.split())


def subqueries(question: str) -> dict[str, list[str]]:
    """{rule: sub-queries}: "entities": one per name when the question names two or more (the others
    cut); "content": the question without its names; "clauses": the parts around and/or/after/before/
    while/because/since (each of two words or more)."""
    ns = names(question)
    out = {"entities": [], "content": [], "clauses": []}
    if len(ns) >= 2:
        out["entities"] = [_strip(question, [m for m in ns if m != n]) for n in ns]
    if ns:
        c = _strip(question, ns)
        if len(c.split()) >= 3:
            out["content"] = [c]
    parts = [p.strip(" ,?") for p in re.split(r",|\b(?:and|or|after|before|while|because|since)\b", question)]
    parts = [p for p in parts if len(p.split()) >= 2]
    if len(parts) >= 2:
        out["clauses"] = parts
    return out


# --- the dump -------------------------------------------------------------------------------------

def dump(data_path: str, path: str) -> None:
    """levers.dump (vectors, lexemes, times, questions), then each turn's context texts embedded by
    MiniLM (one thread, batches of 32) and each question's sub-queries (vector and lexemes)."""
    sys.path.insert(0, str(replica.ROOT))
    import psycopg

    import bench.recall as br
    import pymem
    from pymem.embedders import OnnxMiniLMEmbedder
    from pymem.embedders.base import embed

    if not Path(path).exists():
        levers.dump(data_path, path)
    out = pickle.loads(Path(path).read_bytes())
    data = json.loads(Path(data_path).read_text())
    emb = OnnxMiniLMEmbedder(threads=1, batch_size=32)
    db = pymem.Database(pymem.Settings(), migrate=False)
    c = psycopg.connect(db.conninfo, autocommit=True)
    t0 = time.perf_counter()
    for conv in data:
        d = out[f"locomo-{conv['sample_id']}"]
        texts = turn_texts(conv)
        d.setdefault("ctx", {})
        for v in CONTEXTS:
            if v in d["ctx"]:
                continue
            d["ctx"][v] = np.array(emb.embed([texts[x][v] for x in d["dia"]]), dtype=np.float32)
        d["own_check"] = np.array(emb.embed([texts[x]["own"] for x in d["dia"][:20]]), dtype=np.float32)
        qs = [q for q in conv["qa"] if q.get("category") in br.CATEGORIES and br.evidence_ids(q)]
        for qd, q in zip(d["q"], qs, strict=True):
            if "sub" in qd:
                continue
            qd["sub"] = {}
            for rule, subs in subqueries(q["question"]).items():
                if not subs:
                    continue
                vecs = np.array(embed(emb, subs, query=True), dtype=np.float32)
                terms = [c.execute("SELECT tsvector_to_array(pymem._lexemes(NULL, %s))", (s,)).fetchone()[0]
                         for s in subs]
                qd["sub"][rule] = list(zip(vecs, terms, strict=True))
    print(f"context texts and sub-queries embedded in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    Path(path).write_bytes(pickle.dumps(out))


# --- relevance with other turn vectors ------------------------------------------------------------

def _unit(m):
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def rel_context(d, qi, ctx=None, mode="replace", a=0.5, lw=0.33):
    """Relevance as replica.relevance with the cosine taken from the context vectors: "replace" (them
    alone), "max" (the better of the turn's own and the context cosine), "mix" ((1-a) own + a context)."""
    if ctx is None:
        return replica.relevance(d, qi, lw=lw)
    q = d["q"][qi]
    qv = d["qvec"][qi] / np.linalg.norm(d["qvec"][qi])
    own = d["vn"] @ qv
    cx = d["ctxn"][ctx] @ qv
    cos = {"replace": cx, "max": np.maximum(own, cx), "mix": (1 - a) * own + a * cx}[mode]
    return _combine(d, q["terms"], cos, lw)


def _combine(d, terms, cos, lw=0.33):
    """replica.relevance's fusion for a given cosine: (1 - lw) cos + lw BM25 / best eligible BM25."""
    if not terms:
        return cos, d["elig"] & (cos > 1e-5)
    bm = replica.bm25(d, terms)
    hit = bm > 0
    top = bm[d["elig"] & hit].max() if (d["elig"] & hit).any() else 0
    lex = np.minimum(bm / top, 1) if top > 0 else bm
    return (1 - lw) * cos + lw * lex, d["elig"] & (hit | (cos > 1e-5))


def rel_smooth(d, qi, a=0.0, side="both", lw=0.33):
    """The turn's stored vector plus a x its neighbours' stored vectors (same session), renormalised:
    context without a second embedding."""
    if not a:
        return replica.relevance(d, qi, lw=lw)
    key = (a, side)
    if key not in d["smooth"]:
        v = d["vn"].copy()
        n = len(v)
        for i in range(n):
            for j in ((i - 1,) if side == "prev" else (i + 1,) if side == "next" else (i - 1, i + 1)):
                if 0 <= j < n and d["at"][j] == d["at"][i]:
                    v[i] = v[i] + a * d["vn"][j]
        d["smooth"][key] = _unit(v)
    q = d["q"][qi]
    cos = d["smooth"][key] @ (d["qvec"][qi] / np.linalg.norm(d["qvec"][qi]))
    return _combine(d, q["terms"], cos, lw)


def rel_multiquery(d, qi, rules=(), fuse="max", w=1.0, lw=0.33, rrf_k=60):
    """The whole question's relevance fused with its sub-queries' (rules: which splits): "max" = the
    best of the question's score and w x each sub-query's; "rrf" = sum of 1 / (rrf_k + rank) over the
    rankings (the sub-queries weighed w), scaled so that the question's own best is its score."""
    rel, ok = replica.relevance(d, qi, lw=lw)
    subs = [s for r in rules for s in d["q"][qi].get("sub", {}).get(r, [])]
    if not subs:
        return rel, ok
    rels = []
    for vec, terms in subs:
        cos = d["vn"] @ (vec / np.linalg.norm(vec))
        r2, ok2 = _combine(d, terms, cos, lw)
        rels.append((r2, ok2))
        ok = ok | ok2
    if fuse == "max":
        out = rel.copy()
        for r2, ok2 in rels:
            out = np.where(ok2, np.maximum(out, w * r2), out)
        return out, ok
    def ranks(r, o):
        rk = np.full(len(r), np.inf)
        order = sorted(np.flatnonzero(o), key=lambda i: -r[i])
        rk[order] = np.arange(1, len(order) + 1)
        return rk
    score = 1 / (rrf_k + ranks(rel, ok))
    for r2, ok2 in rels:
        score = score + w / (rrf_k + ranks(r2, ok2))
    # keep the scale of a relevance (the next turns get 0.8 x it): the question's best row keeps its score
    best = np.nanmax(np.where(ok, rel, -np.inf))
    return score / score.max() * best, ok


def rel_embedder(d, qi, text=None, mode="replace", a=0.5, lw=0.33):
    """Relevance with another embedder's cosine (other_embedder.py's vectors: the turn's own text, or
    "window": with its neighbours; the question embedded by the same model): "replace" (it alone),
    "mix" ((1-a) MiniLM + a other), "max" (the better of the two)."""
    if text is None:
        return replica.relevance(d, qi, lw=lw)
    o = d["other"]
    cx = o[text] @ o["qvec"][qi]
    own = d["vn"] @ (d["qvec"][qi] / np.linalg.norm(d["qvec"][qi]))
    cos = {"replace": cx, "max": np.maximum(own, cx), "mix": (1 - a) * own + a * cx}[mode]
    return _combine(d, d["q"][qi]["terms"], cos, lw)


REL = {"context": rel_context, "smooth": rel_smooth, "multiquery": rel_multiquery, "embedder": rel_embedder}


def grids():
    base = ("base", {}, {})
    return {
        "context": [base] + [(f"{c} replace", {"ctx": c, "mode": "replace"}, {}) for c in CONTEXTS]
                   + [(f"{c} max", {"ctx": c, "mode": "max"}, {}) for c in CONTEXTS]
                   + [(f"{c} mix {a}", {"ctx": c, "mode": "mix", "a": a}, {}) for c in CONTEXTS for a in (0.3, 0.5)],
        "smooth": [base] + [(f"smooth {s} {a}", {"a": a, "side": s}, {}) for s in ("prev", "next", "both")
                            for a in (0.15, 0.3, 0.5)],
        "embedder": [base, ("MiniLM plain cosine", {"lw": 0}, {"next_w": 0}),
                     ("mpnet plain cosine", {"text": "vec", "lw": 0}, {"next_w": 0})] + [(f"mpnet {t} replace lw{lw}", {"text": t, "lw": lw}, {}) for t in ("vec", "window")
                              for lw in (0.25, 0.33, 0.4)]
                    + [(f"mpnet {t} {m}", {"text": t, "mode": m, "a": 0.5}, {}) for t in ("vec", "window")
                       for m in ("mix", "max")],
        "multiquery": [base] + [(f"{'+'.join(r)} {f} w{w}", {"rules": r, "fuse": f, "w": w}, {})
                                for r in (("entities",), ("content",), ("clauses",), ("entities", "content", "clauses"))
                                for f, ws in (("max", (0.8, 0.9, 1.0)), ("rrf", (0.5, 1.0))) for w in ws],
    }


def prepare(data):
    data = replica.prepare(data)
    for d in data.values():
        d["ctxn"] = {k: _unit(v) for k, v in d.get("ctx", {}).items()}
        d["smooth"] = {}
        # the stored vectors (SQL) against the same texts embedded here: the same embedder, same pipeline
        if "own_check" in d:
            cs = np.sum(_unit(d["own_check"]) * d["vn"][:len(d["own_check"])], axis=1)
            print(f"stored vs re-embedded own text, cosine min {cs.min():.5f}", file=sys.stderr)
    return data


def run(path, which="all", other=None):
    data = prepare(pickle.loads(Path(path).read_bytes()))
    if other:  # other_embedder.py's vectors, unit length, in the dump's turn order
        for u, o in pickle.loads(Path(other).read_bytes()).items():
            data[u]["other"] = {k: _unit(v) for k, v in o.items()}
    elif which == "all":
        which = "no-embedder"
    for fam, grid in grids().items():
        if which in ("all", fam) or (which == "no-embedder" and fam != "embedder"):
            run_grid(data, grid, REL[fam], fam)


def run_grid(data, grid, fn, fam):
    """levers.run_grid, plus each held-out conversation's own figures against the base."""
    users = list(data)
    cache = {}
    for name, rel_kw, rank_kw in grid:
        for u in users:
            per = collections.defaultdict(list)
            d = data[u]
            for qi, q in enumerate(d["q"]):
                rel, ok = fn(d, qi, **rel_kw)
                got = levers.rank_div(d, rel, ok, **rank_kw)
                ev = set(q["ev"])
                r = [len(ev & set(got[:k])) / len(ev) for k in (5, 10)]
                per[q["cat"]].append(r)
                per["overall"].append(r)
            cache[(name, u)] = per
    pooled, chosen, deltas = collections.defaultdict(list), [], []
    for held in users:
        def train(name, held=held):
            ov = [x for u in users if u != held for x in cache[(name, u)]["overall"]]
            return (np.mean([x[1] for x in ov]), np.mean([x[0] for x in ov]))
        best = max((g[0] for g in grid), key=train)
        chosen.append(best)
        for c, v in cache[(best, held)].items():
            pooled[c].extend(v)
        b, h = levers.summary(cache[("base", held)]), levers.summary(cache[(best, held)])
        deltas.append(f"{held.removeprefix('locomo-')} {h['overall'][0] - b['overall'][0]:+.3f} / "
                      f"{h['overall'][1] - b['overall'][1]:+.3f}")
    print(f"\n### {fam}\n\n| variant | " + " | ".join(f"{c} @5 / @10" for c in levers.CATS)
          + " |\n|---|" + "--:|" * len(levers.CATS))
    for name, _, _ in grid:
        s = levers.summary({c: [x for u in users for x in cache[(name, u)][c]] for c in levers.CATS})
        print(f"| {name} (all 3) | {levers.fmt(s)} |")
    print(f"| **held out (chosen: {', '.join(chosen)})** | {levers.fmt(levers.summary(pooled))} |")
    print(f"\nheld-out conversation, overall @5 / @10 against the base: {'; '.join(deltas)}")


def depth(path, other=None):
    """Where each evidence turn missing from the top 10 ranks by relevance (MiniLM as shipped, and the
    other embedder's vectors in place of MiniLM's when given), per category: how deep the misses lie."""
    data = prepare(pickle.loads(Path(path).read_bytes()))
    if other:
        for u, o in pickle.loads(Path(other).read_bytes()).items():
            data[u]["other"] = {k: _unit(v) for k, v in o.items()}
    variants = [("MiniLM", {})] + ([("mpnet lw0.25", {"text": "vec", "lw": 0.25})] if other else [])
    bins = ((0, 20), (20, 50), (50, 100), (100, 10**9))
    print("| ranking | category | missed | rank < 20 | 20-49 | 50-99 | >= 100 |\n|---|---|--:|--:|--:|--:|--:|")
    for name, kw in variants:
        count = collections.defaultdict(lambda: [0] * 5)
        for d in data.values():
            for qi, q in enumerate(d["q"]):
                rel, ok = rel_embedder(d, qi, **kw)
                got = set(levers.rank_div(d, rel, ok))
                order = sorted(np.flatnonzero(ok), key=lambda i: (-rel[i], -d["seq"][i]))
                pos = {d["dia"][i]: r for r, i in enumerate(order)}
                for ev in q["ev"]:
                    if ev in got or ev not in d["dia"]:
                        continue
                    r = pos.get(ev, 10**8)
                    c = count[q["cat"]]
                    c[0] += 1
                    for b, (lo, hi) in enumerate(bins):
                        c[b + 1] += lo <= r < hi
        for cat in levers.CATS[:-1]:
            print(f"| {name} | {cat} | " + " | ".join(str(x) for x in count[cat]) + " |")


if __name__ == "__main__":
    if sys.argv[1] == "depth":
        depth(*sys.argv[2:4])
        sys.exit()
    if sys.argv[1] == "dump":
        dump(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[2], *(sys.argv[3:5] or ["all"]))
