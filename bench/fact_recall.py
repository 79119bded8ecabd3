"""Fact recall on a LoCoMo-format file: how much of each question's evidence ``Memory.retrieve`` finds.

Every conversation of the file becomes one user's facts (project ``bench-fact-recall``): each turn
is written through ``Memory.persist`` as the fact ``"<speaker>: <text>"``, with its session's date
as ``created_at`` and metadata ``{"speaker", "dia_id"}`` (a turn whose text equals an earlier
turn's is the same fact: persist is idempotent). Every question of categories 1-4 is then asked
through ``Memory.retrieve`` at each ``--weights`` value of ``fact_lexical_weight`` (0: cosine
alone, 1: BM25 alone, between: the fused score of ``pymem.facts_search``), beside plain cosine
top-k over the same stored vectors (one SQL query over ``pymem.fact_embeddings``) and a
reciprocal-rank fusion (c = 60) of the cosine and the lexical-only rankings, computed here from
the two lists for comparison. Evidence recall@k of one question = the share of its evidence turns
(``dia_id``) among the k facts retrieved; the figures are means per category and overall.

The development data (``../shared/eval-dev/locomo-dev.json`` from the repository root) is
CC BY-NC: it is read from where it lies (or the path given) and never copied.

    PYMEM_DATA_DIR=/tmp/bench-facts python bench/fact_recall.py             # embedded server
    python bench/fact_recall.py path/to/locomo.json --dsn postgresql://... --weights 0,0.5,1

``main(argv) -> dict`` returns the figures (tests/benchmarks/test_bench_fact_recall.py runs it on a tiny
synthetic file). Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import progress, set_quiet, summarize, write_result  # noqa: E402
from bench.recall import evidence_ids, sessions  # noqa: E402  (LoCoMo's format, read one way)

DEFAULT_DATA = ROOT.parent / "shared" / "eval-dev" / "locomo-dev.json"
PROJECT = "bench-fact-recall"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10)
RRF_C = 60
RRF_DEPTH = 100  # how deep each list is read for the rank fusion


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", default=str(DEFAULT_DATA), help="a LoCoMo-format JSON file")
    p.add_argument("--dsn", help="a pymem database (migrated by this run); default: the embedded server")
    p.add_argument("--embedder", choices=("onnx", "hash"), default="onnx",
                   help="onnx: OnnxMiniLMEmbedder (the default for evaluation); hash: HashEmbedder")
    p.add_argument("--weights", default="0,0.3,0.5,0.7,1",
                   help="fact_lexical_weight values to measure, comma-separated (default: %(default)s)")
    p.add_argument("--conversations", help="comma-separated sample_ids to run (default: all)")
    p.add_argument("--results-dir", help="where the JSON result goes (default bench/results)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    try:
        args.weights = [float(w) for w in args.weights.split(",")]
    except ValueError:
        p.error(f"--weights: numbers between 0 and 1, not {args.weights!r}")
    if not args.weights or any(not 0 <= w <= 1 for w in args.weights):
        p.error("--weights: numbers between 0 and 1")
    return args


class CachedEmbedder:
    """The evaluation embedder, each distinct text embedded once (the questions are asked at
    every weight); same name and vectors, so the stored vectors are the embedder's own."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.dimension = inner, inner.name, inner.dimension
        self.cache: dict[str, Any] = {}

    def embed(self, texts: list[str]) -> list[Any]:
        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if todo:
            self.cache.update(zip(todo, self.inner.embed(todo), strict=True))
        return [self.cache[t] for t in texts]


def load(mem: Any, embedder: CachedEmbedder, user: str, conversation: dict[str, Any]) -> dict[int, str]:
    """Writes one conversation's turns as ``user``'s facts; returns fact id -> dia_id."""
    mem.forget(user=user)
    turns = [(when, t) for when, ts in sessions(conversation) for t in ts]
    contents = [f"{t['speaker']}: {t['text']}" for _, t in turns]
    vectors = embedder.embed(contents)
    ids: dict[int, str] = {}
    for (when, t), content, vec in zip(turns, contents, vectors, strict=True):
        fid = mem.persist(content, user=user, created_at=when, embedding=vec,
                          metadata={"speaker": t["speaker"], "dia_id": t["dia_id"]})
        ids.setdefault(int(fid), t["dia_id"])
    return ids


def cosine_top(admin: Any, user: str, embedder: str, vector: Any, k: int) -> list[int]:
    """Plain cosine top-k over the user's stored fact vectors: the baseline."""
    rows = admin.execute(
        "SELECT e.fact_id FROM pymem.fact_embeddings AS e JOIN pymem.facts AS f"
        "  ON f.project_id = e.project_id AND f.scope = e.scope AND f.scope_id = e.scope_id AND f.id = e.fact_id"
        " WHERE e.project_id = %s AND e.scope = 'user' AND e.scope_id = %s AND e.embedder = %s"
        "   AND f.superseded_by IS NULL"
        " ORDER BY e.embedding <=> %s::text::vector, e.fact_id DESC LIMIT %s",
        (PROJECT, user, embedder, "[" + ",".join(repr(float(x)) for x in vector) + "]", k)).fetchall()
    return [r[0] for r in rows]


def rrf(*rankings: list[int]) -> list[int]:
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, fid in enumerate(ranking, 1):
            score[fid] = score.get(fid, 0.0) + 1.0 / (RRF_C + rank)
    return sorted(score, key=lambda f: (-score[f], -f))


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = ["| ranking | questions | recall@5 | recall@10 |", "|---|--:|--:|--:|"]
    for name, r in results.items():
        o = r["overall"]
        lines.append(f"| {name} | {o['questions']} | {o['@5']:.3f} | {o['@10']:.3f} |")
    return "\n".join(lines)


def _score(found: dict[str, list[float]]) -> dict[str, Any]:
    return {f"@{k}": (sum(v[i] for v in found.values()) / max(1, len(found))) for i, k in enumerate(KS)} | {
        "questions": len(found)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    set_quiet(args.quiet)
    import psycopg

    import pymem
    from pymem.embedders import HashEmbedder, OnnxMiniLMEmbedder

    data = json.loads(Path(args.data).read_text())
    if args.conversations:
        wanted = set(args.conversations.split(","))
        data = [c for c in data if c.get("sample_id") in wanted]
    settings = pymem.Settings(dsn=args.dsn) if args.dsn else pymem.Settings()
    db = pymem.Database(settings, migrate=True)
    embedder = CachedEmbedder(OnnxMiniLMEmbedder() if args.embedder == "onnx" else HashEmbedder())
    names = {w: f"retrieve, fact_lexical_weight {w:g}" for w in args.weights}
    mems = {w: pymem.Memory(db=db, embedder=embedder, project_id=PROJECT, fact_lexical_weight=w)
            for w in args.weights}
    lexical = pymem.Memory(db=db, project_id=PROJECT)  # no embedder: retrieve ranks by the words alone
    admin = psycopg.connect(db.conninfo, autocommit=True)
    per_q: dict[str, dict[str, list[float]]] = {"plain cosine (SQL)": {}, f"RRF c={RRF_C} (cosine, BM25)": {}}
    per_q |= {n: {} for n in names.values()}
    categories: dict[str, str] = {}
    latency: list[int] = []
    loaded = facts = 0
    for i, conv in enumerate(data):
        user = f"locomo-{conv.get('sample_id', i)}"
        dia = load(mems[args.weights[0]], embedder, user, conv["conversation"])
        loaded += sum(len(t) for _, t in sessions(conv["conversation"]))
        facts += len(dia)
        questions = [q for q in conv["qa"] if q.get("category") in CATEGORIES and evidence_ids(q)]
        progress(f"{user}: {len(dia)} facts, {len(questions)} questions")
        vectors = embedder.embed([q["question"] for q in questions])
        for j, (qa, vec) in enumerate(zip(questions, vectors, strict=True)):
            key = f"{user}/{j}"
            evidence = evidence_ids(qa)
            categories[key] = CATEGORIES[qa["category"]]
            got: dict[str, list[str]] = {}
            for w, mem in mems.items():
                t0 = time.perf_counter_ns()
                found = mem.retrieve(qa["question"], user=user, k=max(KS))
                latency.append(time.perf_counter_ns() - t0)
                got[names[w]] = [f.metadata.get("dia_id") for f in found]
            base = cosine_top(admin, user, embedder.name, vec, RRF_DEPTH)
            lex = [f.id for f in lexical.retrieve(qa["question"], user=user, k=RRF_DEPTH)]
            got["plain cosine (SQL)"] = [dia.get(f) for f in base]
            got[f"RRF c={RRF_C} (cosine, BM25)"] = [dia.get(f) for f in rrf(base, lex)]
            for name, ids in got.items():
                per_q[name][key] = [len(evidence & set(ids[:k])) / len(evidence) for k in KS]
    results = {name: {cat: _score({q: v for q, v in found.items() if categories[q] == cat})
                      for cat in CATEGORIES.values()} | {"overall": _score(found)}
               for name, found in per_q.items()}
    size = admin.execute(
        "SELECT pg_total_relation_size('pymem.fact_lexemes')::float8 / greatest(1, (SELECT count(*) FROM pymem.fact_lexemes))"
    ).fetchone()[0]
    lat = summarize(latency)
    out = {"data": str(args.data), "embedder": embedder.name, "turns": loaded, "facts": facts,
           "weights": args.weights, "recall": results, "lexical_index_bytes_per_fact": size,
           "retrieve_latency_ms": {k: lat[k] for k in ("p50_ms", "p95_ms", "mean_ms")},
           "command": "python bench/fact_recall.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    admin.close()
    db.close()
    print(f"fact evidence recall, {len(categories)} questions (categories 1-4), {loaded} turns as {facts} facts, "
          f"embedder {embedder.name}")
    print(table(results))
    print(f"Memory.retrieve latency: p50 {lat['p50_ms']:.2f} ms, p95 {lat['p95_ms']:.2f} ms (query vector cached); "
          f"lexical index {size:.0f} bytes per fact (pymem.fact_lexemes with its indexes)")
    out["result_file"] = str(write_result("fact_recall", out, args.results_dir))
    return out


if __name__ == "__main__":
    main()
