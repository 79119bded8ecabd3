"""Issue 61 (recall round 8): ranking levers tried offline on the replica of recall's ranking
(../2026-12-04-recall-floor/replica.py, time off: bench/recall.py's "+next" step), each with its
knob chosen on two development conversations and measured on the third (leave-one-conversation-out).

    PYMEM_DATA_DIR=/tmp/rc4-recall python bench/recall.py ../shared/eval-dev/locomo-dev.json   # loads (MiniLM)
    PYMEM_DATA_DIR=/tmp/rc4-recall python levers.py dump ../shared/eval-dev/locomo-dev.json /tmp/rc4-dump.pkl
    python levers.py run /tmp/rc4-dump.pkl

The dump lives outside the repository (the data is CC BY-NC).
"""

from __future__ import annotations

import collections
import json
import pickle
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-12-04-recall-floor"))
import replica


def dump(data_path: str, path: str) -> None:
    """replica.dump for any file, with each turn's time (a session: turns of one time)."""
    sys.path.insert(0, str(replica.ROOT))
    import psycopg

    import bench.recall as br
    import pymem
    from pymem.embedders.base import embed

    data = json.loads(Path(data_path).read_text())
    db = pymem.Database(pymem.Settings(), migrate=False)
    emb = br._embedder("onnx")
    c = psycopg.connect(db.conninfo, autocommit=True)
    out = {}
    for conv in data:
        user = f"locomo-{conv['sample_id']}"
        rows = c.execute(
            "SELECT m.seq, m.metadata->>'dia_id', e.embedding::text, tsvector_to_array(e.lexemes), e.tokens, e.chars,"
            " (SELECT array_agg(cardinality(x.positions)) FROM unnest(e.lexemes) AS x), extract(epoch FROM m.created_at)"
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
            "tf": [r[6] for r in rows], "at": [float(r[7]) for r in rows],
            "q": [{"cat": br.CATEGORIES[q["category"]], "ev": sorted(br.evidence_ids(q)), "terms": t}
                  for q, t in zip(qs, terms, strict=True)],
            "qvec": np.array(embed(emb, [q["question"] for q in qs], query=True), dtype=np.float32)}
    Path(path).write_bytes(pickle.dumps(out))


# --- levers ---------------------------------------------------------------------------------

def rel_prf(d, qi, lw=0.33, m=0, n_terms=0, beta=0.0):
    """relevance with RM3-style feedback on the lexical side: the m best rows' rarest terms not in the
    question (n_terms of them by idf), each weighed beta x its idf, added to the query's BM25."""
    q = d["q"][qi]
    cos = d["vn"] @ (d["qvec"][qi] / np.linalg.norm(d["qvec"][qi]))
    if not q["terms"]:
        return cos, d["elig"] & (cos > 1e-5)
    rel, ok = replica.relevance(d, qi, lw=lw)
    if not (m and n_terms and beta):
        return rel, ok
    top = sorted(np.flatnonzero(ok), key=lambda i: -rel[i])[:m]
    cand = collections.Counter(t for i in top for t in d["lexset"][i] if t not in q["terms"])
    cidf = replica.idfs(d, list(cand))
    exp = sorted(cand, key=lambda t: (-cidf[t] * cand[t], t))[:n_terms]
    terms = q["terms"] + exp
    idf = replica.idfs(d, terms)
    w = {t: idf[t] * (beta if t in exp else 1) for t in terms}
    avgdl = max(float(np.mean(d["tokens"])), 1)
    bm = np.array([sum(w[t] for t in terms if t in s) * 2.2 / (1 + 1.2 * (0.7 + 0.3 * d["tokens"][i] / avgdl))
                   for i, s in enumerate(d["lexset"])])
    hit = bm > 0
    best = bm[d["elig"] & hit].max() if (d["elig"] & hit).any() else 0
    lex = bm / best if best > 0 else bm
    return (1 - lw) * cos + lw * lex, d["elig"] & (hit | (cos > 1e-5))


def session_of(d, i, by="dia"):
    return d["dia"][i].split(":")[0] if by == "dia" else d["at"][i]


def rank_div(d, rel, ok, k=10, next_w=0.8, cap=0, mmr=0.0, pool=50, by="time", after=False):
    """The k best by own score, at most `cap` of them from one session (0: no cap) or picked by MMR
    (mmr = the weight of the similarity to those already picked, on the rows' vectors), from the pool
    best; then the two turns after each, as _recall_turns. after: the cap counts the turns after too."""
    order = sorted(np.flatnonzero(ok), key=lambda i: (-rel[i], -d["seq"][i]))[:pool]
    if mmr:
        picked = []
        left = list(order)
        while left and len(picked) < k:
            if picked:
                sim = d["vn"][left] @ d["vn"][picked].T
                val = rel[left] - mmr * sim.max(axis=1)
            else:
                val = rel[left]
            j = int(np.argmax(val))
            picked.append(left.pop(j))
        top = picked
    elif cap:
        per = collections.Counter()
        top = []
        for i in order:
            s = session_of(d, i, by)
            if per[s] < cap:
                top.append(i)
                per[s] += 1
            if len(top) == k:
                break
    else:
        top = order[:k]
    score = {i: (rel[i], 0, -d["seq"][i]) for i in top}
    for i in top if next_w else ():
        for h in (1, 2):
            j = i + h
            if j < len(rel) and d["elig"][j] and (j not in score or round(next_w * rel[i], 9) > round(score[j][0], 9)):
                score[j] = (next_w * rel[i], h, -d["seq"][j])
    ranked = sorted(score, key=lambda i: (-round(score[i][0], 9), score[i][1], score[i][2]))
    if after and cap:
        per, out = collections.Counter(), []
        for i in ranked:
            s = session_of(d, i, by)
            if per[s] < cap:
                out.append(i)
                per[s] += 1
        ranked = out + [i for i in ranked if i not in out]
    return [d["dia"][i] for i in ranked[:k]]


def per_question(data, users, rel_kw, rank_kw):
    out = collections.defaultdict(list)
    for u in users:
        d = data[u]
        for qi, q in enumerate(d["q"]):
            rel, ok = rel_prf(d, qi, **rel_kw)
            ev = set(q["ev"])
            got = rank_div(d, rel, ok, **rank_kw)
            r = [len(ev & set(got[:k])) / len(ev) for k in (5, 10)]
            out[q["cat"]].append(r)
            out["overall"].append(r)
    return out


def summary(per):
    return {c: (float(np.mean([x[0] for x in v])), float(np.mean([x[1] for x in v]))) for c, v in per.items()}


CATS = ["multi-hop", "temporal", "open-domain", "single-hop", "overall"]


def loo(data, grid):
    """Leave one conversation out: for each held-out conversation, the grid point best on the other two
    (overall @10, then @5), scored on the held-out one; the held-out questions pooled."""
    users = list(data)
    pooled, chosen = collections.defaultdict(list), []
    cache = {}
    for name, rel_kw, rank_kw in grid:
        for u in users:
            cache[(name, u)] = per_question(data, [u], rel_kw, rank_kw)
    for held in users:
        def train(name, held=held):
            ov = [x for u in users if u != held for x in cache[(name, u)]["overall"]]
            return (np.mean([x[1] for x in ov]), np.mean([x[0] for x in ov]))
        best = max((g[0] for g in grid), key=train)
        chosen.append(best)
        for c, v in cache[(best, held)].items():
            pooled[c].extend(v)
    return summary(pooled), chosen, {name: summary({c: [x for u in users for x in cache[(name, u)][c]] for c in CATS})
                                     for name, _, _ in grid}


def fmt(s):
    return " | ".join(f"{s[c][0]:.3f} / {s[c][1]:.3f}" for c in CATS)


def run(path, which="all"):
    data = replica.prepare(pickle.loads(Path(path).read_bytes()))
    base = ("base", {}, {})
    families = {
        "cap (a session = one time)": [base] + [(f"cap {c} pool {p}", {}, {"cap": c, "pool": p}) for c in (1, 2, 3, 4) for p in (30, 100)],
        "cap counted after next turns": [base] + [(f"cap-after {c}", {}, {"cap": c, "after": True, "pool": 100}) for c in (2, 3, 4, 5)],
        "mmr": [base] + [(f"mmr {lam}", {}, {"mmr": lam, "pool": 50}) for lam in (0.05, 0.1, 0.2, 0.3, 0.5)],
        "prf": [base] + [(f"prf m{m} n{n} b{b}", {"m": m, "n_terms": n, "beta": b}, {})
                         for m in (3, 5, 10) for n in (5, 10, 20) for b in (0.1, 0.3, 0.5)],
    }
    for fam, grid in families.items():
        if which != "all" and which not in fam:
            continue
        held, chosen, full = loo(data, grid)
        print(f"\n## {fam}\n\n| variant | " + " | ".join(f"{c} @5 / @10" for c in CATS) + " |\n|---|" + "--:|" * len(CATS))
        for name, s in full.items():
            print(f"| {name} (all 3) | {fmt(s)} |")
        print(f"| **held out (chosen: {', '.join(chosen)})** | {fmt(held)} |")


def rel_rocchio(d, qi, lw=0.33, m=0, a=0.0, lex_too=True):
    """Vector feedback (Rocchio): the question's vector plus a x the mean of the m best rows' vectors,
    the cosine recomputed with it; the lexical side as shipped."""
    rel, ok = replica.relevance(d, qi, lw=lw)
    if not (m and a):
        return rel, ok
    q = d["q"][qi]
    qv = d["qvec"][qi] / np.linalg.norm(d["qvec"][qi])
    top = sorted(np.flatnonzero(ok), key=lambda i: -rel[i])[:m]
    q2 = qv + a * d["vn"][top].mean(axis=0)
    q2 /= np.linalg.norm(q2)
    cos0, cos2 = d["vn"] @ qv, d["vn"] @ q2
    lw_eff = lw if q["terms"] else 0.0
    lex = (rel - (1 - lw_eff) * cos0) / lw_eff if lw_eff else 0
    return (1 - lw_eff) * cos2 + lw_eff * lex if lw_eff else cos2, ok


def rel_speaker(d, qi, lw=0.33, bonus=0.0):
    """A bonus for rows whose speaker (the label of "<speaker>: <text>", as its lexeme: d["spk"], set by
    run2 from the file) is a query term."""
    rel, ok = replica.relevance(d, qi, lw=lw)
    if not bonus:
        return rel, ok
    terms = set(d["q"][qi]["terms"])
    return rel + bonus * np.array([d["spk"][dia] in terms for dia in d["dia"]]), ok


def rel_neighbours(d, qi, lw=0.33, m=0, w=0.0):
    """A second stage from the first hits: each row scores at least w x (a hit's score x the row's cosine to
    that hit's vector), over the m best hits (turns that say what the hits say, wherever they lie)."""
    rel, ok = replica.relevance(d, qi, lw=lw)
    if not (m and w):
        return rel, ok
    top = sorted(np.flatnonzero(ok), key=lambda i: -rel[i])[:m]
    spread = (d["vn"] @ d["vn"][top].T * rel[top]).max(axis=1) * w
    return np.where(d["elig"], np.maximum(rel, spread), rel), ok


REL = {"neighbours": rel_neighbours, "prf": rel_prf, "rocchio": rel_rocchio, "speaker": rel_speaker}


def run2(path, fam):
    data = replica.prepare(pickle.loads(Path(path).read_bytes()))
    if fam == "speaker":
        raw = json.loads(Path("/work/shared/eval-dev/locomo-dev.json").read_text())
        for c in raw:
            d = data[f"locomo-{c['sample_id']}"]
            names = {c["conversation"]["speaker_a"], c["conversation"]["speaker_b"]}
            stem = {n: max((t for t in set().union(*d["lexset"]) if n.lower().startswith(t)), key=len)
                    for n in names}
            d["spk"] = {t["dia_id"]: stem[t["speaker"]] for k, v in c["conversation"].items()
                        if k.startswith("session_") and isinstance(v, list) for t in v}
        grid = [("base", {}, {})] + [(f"speaker {b}", {"bonus": b}, {}) for b in (0.02, 0.05, 0.1, 0.2)]
    elif fam == "neighbours":
        grid = [("base", {}, {})] + [(f"neighbours m{m} w{w}", {"m": m, "w": w}, {})
                                     for m in (1, 3, 5) for w in (0.7, 0.8, 0.9)]
    else:
        grid = [("base", {}, {})] + [(f"rocchio m{m} a{a}", {"m": m, "a": a}, {}) for m in (3, 5, 10) for a in (0.2, 0.5, 1.0)]
    run_grid(data, grid, REL[fam], fam)

def run_grid(data, grid, fn, fam):
    """Each grid point on every conversation, fn giving (relevance, eligible); leave-one-out as loo() does."""
    users = list(data)
    cache = {}
    for name, rel_kw, rank_kw in grid:
        for u in users:
            per = collections.defaultdict(list)
            d = data[u]
            for qi, q in enumerate(d["q"]):
                rel, ok = fn(d, qi, **rel_kw)
                got = rank_div(d, rel, ok, **rank_kw)
                ev = set(q["ev"])
                r = [len(ev & set(got[:k])) / len(ev) for k in (5, 10)]
                per[q["cat"]].append(r)
                per["overall"].append(r)
            cache[(name, u)] = per
    pooled, chosen = collections.defaultdict(list), []
    for held in users:
        def train(name, held=held):
            ov = [x for u in users if u != held for x in cache[(name, u)]["overall"]]
            return (np.mean([x[1] for x in ov]), np.mean([x[0] for x in ov]))
        best = max((g[0] for g in grid), key=train)
        chosen.append(best)
        for c, v in cache[(best, held)].items():
            pooled[c].extend(v)
    print(f"\n## {fam}\n\n| variant | " + " | ".join(f"{c} @5 / @10" for c in CATS) + " |\n|---|" + "--:|" * len(CATS))
    for name, _, _ in grid:
        print(f"| {name} (all 3) | {fmt(summary({c: [x for u in users for x in cache[(name, u)][c]] for c in CATS}))} |")
    print(f"| **held out (chosen: {', '.join(chosen)})** | {fmt(summary(pooled))} |")

def run_next(path):
    """The turns after a recalled one (next_turn_weight) and the lexical weight, leave-one-out."""
    data = replica.prepare(pickle.loads(Path(path).read_bytes()))
    grid = [("base", {}, {})] + [(f"next_w {w}", {}, {"next_w": w}) for w in (0, 0.5, 0.6, 0.7, 0.9, 0.95)]
    run_grid(data, grid, lambda d, qi, **kw: rel_prf(d, qi, **kw), "next turn weight")
    grid = [("base", {}, {})] + [(f"lw {lw}", {"lw": lw}, {}) for lw in (0.25, 0.3, 0.36, 0.4, 0.45)]
    run_grid(data, grid, lambda d, qi, **kw: rel_prf(d, qi, **kw), "lexical weight")


if __name__ == "__main__":
    if sys.argv[1] == "next":
        run_next(sys.argv[2])
    elif sys.argv[1] == "run2":
        run2(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "dump":
        dump(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[2], *(sys.argv[3:4] or ["all"]))
