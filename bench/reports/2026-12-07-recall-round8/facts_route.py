"""Issue 61 item 3 offline: facts as a route to evidence. Each turn's facts as pymem's rule learner
(pymem.demo.RuleLearner.extract) takes them from the turn's text, embedded by MiniLM; a turn's
cosine becomes max(its own, w x its best fact's) (the learned fact carries its turn,
metadata.turn), the lexical side as shipped; w chosen leave-one-conversation-out.

    python facts_route.py /tmp/rc4-dump.pkl ../shared/eval-dev/locomo-dev.json
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import levers
from levers import replica


def main(dump_path: str, data_path: str) -> None:
    sys.path.insert(0, str(replica.ROOT))
    from pymem.demo import RuleLearner
    from pymem.embedders import OnnxMiniLMEmbedder

    data = replica.prepare(pickle.loads(Path(dump_path).read_bytes()))
    raw = json.loads(Path(data_path).read_text())
    learner, emb = RuleLearner(), OnnxMiniLMEmbedder()
    n_facts = 0
    for c in raw:
        d = data[f"locomo-{c['sample_id']}"]
        turns = {t["dia_id"]: t for k, v in c["conversation"].items()
                 if k.startswith("session_") and isinstance(v, list) for t in v}
        for named in (False, True):
            facts, owner = [], []
            for i, dia in enumerate(d["dia"]):
                for f in learner.extract(turns[dia]["text"]):
                    facts.append(f"{turns[dia]['speaker']}: {f}" if named else f)
                    owner.append(i)
            vec = np.array(emb.embed(facts), dtype=np.float32) if facts else np.zeros((0, 384), np.float32)
            d[f"fvn{int(named)}"] = vec / np.linalg.norm(vec, axis=1, keepdims=True)
            d["fown"] = np.array(owner)
        n_facts += len(d["fown"])
    print(f"{n_facts} facts from {sum(len(d['dia']) for d in data.values())} turns")

    def rel_facts(d, qi, w=0.0, named=0, lw=0.33):
        rel, ok = replica.relevance(d, qi, lw=lw)
        if not w or not len(d["fown"]):
            return rel, ok
        qv = d["qvec"][qi] / np.linalg.norm(d["qvec"][qi])
        cos = d["vn"] @ qv
        fc = d[f"fvn{named}"] @ qv
        best = np.full(len(cos), -1.0)
        np.maximum.at(best, d["fown"], fc)
        lw_eff = lw if d["q"][qi]["terms"] else 0.0
        new = np.maximum(cos, w * best)
        return rel + (1 - lw_eff) * (new - cos), ok | (new > 1e-5) & d["elig"]

    levers.REL["facts"] = rel_facts
    grid = [("base", {}, {})] + [(f"facts w{w} named{n}", {"w": w, "named": n}, {})
                                 for n in (0, 1) for w in (0.8, 0.9, 1.0, 1.1)]
    levers.run_grid(data, grid, rel_facts, "facts route")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
