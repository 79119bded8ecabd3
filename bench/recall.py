"""Recall benchmark on a LoCoMo-format file: how much of each question's evidence pymem recalls.

For every conversation of the file it creates one user (project ``bench-recall``), writes every
turn through the public Python API (``Memory.add_message``: text ``"<speaker>: <text>"``, the
session's date as ``created_at``, metadata ``{"speaker", "dia_id"}``), then asks every question
of categories 1-4 through ``Memory.recall`` (from a thread of its own, so no turn is hidden as
"the current window") and, beside it, plain cosine top-k over the same stored vectors (one SQL
query over ``pymem.message_embeddings``). Evidence recall@k of one question = the share of its
evidence turns (``dia_id``) among the k recalled; the figures are means per category and overall.

The development data (``../shared/eval-dev/locomo-dev.json`` from the repository root) is
CC BY-NC: it is read from where it lies (or the path given) and never copied.

    PYMEM_DATA_DIR=/tmp/bench-recall python bench/recall.py            # embedded server, scratch dir
    python bench/recall.py path/to/locomo.json --dsn postgresql://...  # any pymem database
    PYMEM_DATA_DIR=/tmp/bench-recall pymem server stop

``main(argv) -> dict`` returns the figures (tests/benchmarks/test_bench_recall.py runs it on a tiny
synthetic file). Nothing here asserts a duration.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import progress, set_quiet, summarize, write_result  # noqa: E402
from pymem.embedders.base import embed  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "eval-dev" / "locomo-dev.json"
PROJECT = "bench-recall"
THREAD = "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 10)


def parse_date(value: str) -> datetime:
    """LoCoMo's session time, e.g. ``"1:56 pm on 8 May, 2023"`` (read as UTC)."""
    return datetime.strptime(" ".join(value.split()), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def sessions(conversation: dict[str, Any]) -> list[tuple[datetime, list[dict[str, Any]]]]:
    """The sessions of one conversation in order, each with its date and turns."""
    numbers = sorted(int(m.group(1)) for k in conversation if (m := re.fullmatch(r"session_(\d+)", k)))
    return [(parse_date(conversation[f"session_{n}_date_time"]), conversation[f"session_{n}"]) for n in numbers]


def evidence_ids(qa: dict[str, Any]) -> set[str]:
    """A question's evidence turns (a few entries hold two ids, e.g. ``"D8:6; D9:17"``)."""
    return {e for item in qa.get("evidence") or [] for e in re.split(r"[;,\s]+", item) if e}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?", default=str(DEFAULT_DATA), help="a LoCoMo-format JSON file")
    p.add_argument("--dsn", help="a pymem database (migrated by this run); default: the embedded server")
    p.add_argument("--embedder", choices=("onnx", "hash", "e5"), default="onnx",
                   help="onnx: OnnxMiniLMEmbedder (the default for evaluation); e5: E5SmallEmbedder; hash: HashEmbedder")
    p.add_argument("--conversations", help="comma-separated sample_ids to run (default: all)")
    p.add_argument("--reuse", action="store_true",
                   help="keep users already loaded by an earlier run (same file, same embedder)")
    p.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a Memory recall option, e.g. recency_weight=0.1 (repeatable)")
    p.add_argument("--results-dir", help="where the JSON result goes (default bench/results)")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def _embedder(name: str):
    from pymem.embedders import E5SmallEmbedder, HashEmbedder, OnnxMiniLMEmbedder

    if name == "e5":
        return E5SmallEmbedder()
    return OnnxMiniLMEmbedder() if name == "onnx" else HashEmbedder()


def _value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def load(mem, admin, user: str, conversation: dict[str, Any], reuse: bool) -> int:
    """Writes one conversation's turns as ``user``'s messages; returns how many."""
    if reuse:
        n = admin.execute("SELECT count(*) FROM pymem.messages WHERE project_id = %s AND user_id = %s",
                          (PROJECT, user)).fetchone()[0]
        if n:
            return n
    mem.forget_conversation(user=user)
    n = 0
    for when, turns in sessions(conversation):
        for turn in turns:
            mem.add_message(f"{turn['speaker']}: {turn['text']}", user=user, thread=THREAD, created_at=when,
                            metadata={"speaker": turn["speaker"], "dia_id": turn["dia_id"]})
            n += 1
    return n


def cosine_top(admin, user: str, embedder: str, vector: list[float], k: int) -> list[str]:
    """Plain cosine top-k over the user's stored vectors: the baseline."""
    rows = admin.execute(
        "SELECT m.metadata->>'dia_id' FROM (SELECT e.project_id, e.user_id, e.thread_id, e.seq,"
        "  e.embedding <=> %s::text::vector AS d FROM pymem.message_embeddings AS e"
        "  WHERE e.project_id = %s AND e.user_id = %s AND e.embedder = %s ORDER BY d, e.seq LIMIT %s) AS c"
        " JOIN pymem.messages AS m USING (project_id, user_id, thread_id, seq) ORDER BY c.d, c.seq",
        ("[" + ",".join(repr(float(x)) for x in vector) + "]", PROJECT, user, embedder, k)).fetchall()
    return [r[0] for r in rows]


def lexical_top(admin, user: str, text: str, k: int, as_of: datetime) -> list[str]:
    """The query's words alone: messages_recall with its text and no vector (BM25 only)."""
    return [r[0] for r in admin.execute(
        "SELECT metadata ->> 'dia_id' FROM pymem.messages_recall(user_id => %s, project_id => %s, "
        "thread_id => 'questions', query_text => %s, recall => pymem.recall(k => %s, as_of => %s))",
        (user, PROJECT, text, k, as_of)).fetchall()]


def table(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    head = "| category | questions | " + " | ".join(f"{n} @{k}" for n in names for k in KS) + " |"
    lines = [head, "|" + "---|" * (2 + len(names) * len(KS))]
    first = results[names[0]]
    for cat in [*CATEGORIES.values(), "overall"]:
        cells = [f"{results[n][cat][f'@{k}']:.3f}" for n in names for k in KS]
        lines.append(f"| {cat} | {first[cat]['questions']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _score(found: dict[str, list[float]]) -> dict[str, Any]:
    return {f"@{k}": (sum(v[i] for v in found.values()) / max(1, len(found))) for i, k in enumerate(KS)} | {
        "questions": len(found)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    set_quiet(args.quiet)
    import psycopg

    import pymem

    data = json.loads(Path(args.data).read_text())
    if args.conversations:
        wanted = set(args.conversations.split(","))
        data = [c for c in data if c.get("sample_id") in wanted]
    settings = pymem.Settings(dsn=args.dsn) if args.dsn else pymem.Settings()
    db = pymem.Database(settings, migrate=True)
    embedder = _embedder(args.embedder)
    options = {k: _value(v) for k, v in (o.split("=", 1) for o in args.option)}
    mem = pymem.Memory(db=db, embedder=embedder, project_id=PROJECT, **options)
    recall_kwargs = set(inspect.signature(mem.recall).parameters)
    admin = psycopg.connect(db.conninfo, autocommit=True)
    # the steps of issue 32's round 4, each a Memory with the options given and some of the
    # defaults turned off: BM25 b 0.3 alone, then with the next turn; "pymem" has all of them
    steps = {"b0.3": {"next_turn_weight": 0, "time_weight": 0}, "+next": {"time_weight": 0}}
    step_mems = {name: pymem.Memory(db=db, embedder=embedder, project_id=PROJECT, **(over | options))
                 for name, over in steps.items() if not set(over) & set(options)}
    per_q: dict[str, dict[str, dict[str, list[float]]]] = {"pymem": {}, "cosine": {}, "lexical": {},
                                                           **{name: {} for name in step_mems}}
    categories: dict[str, int] = {}
    latency: dict[str, list[int]] = {"pymem": [], "cosine": []}
    loaded = 0
    for i, conv in enumerate(data):
        user = f"locomo-{conv.get('sample_id', i)}"
        n = load(mem, admin, user, conv["conversation"], args.reuse)
        loaded += n
        last = sessions(conv["conversation"])[-1][0]
        questions = [q for q in conv["qa"] if q.get("category") in CATEGORIES and evidence_ids(q)]
        progress(f"{user}: {n} turns, {len(questions)} questions")
        vectors = embed(embedder, [q["question"] for q in questions], query=True)  # embed_query if it has one
        kw = {"as_of": last} if "as_of" in recall_kwargs else {}
        mem.recall(questions[0]["question"], user=user, thread="questions", k=1, **kw)  # embeds the turns
        for j, (qa, vec) in enumerate(zip(questions, vectors, strict=True)):
            key = f"{user}/{j}"
            evidence = evidence_ids(qa)
            categories[key] = CATEGORIES[qa["category"]]
            t0 = time.perf_counter_ns()
            got = [m.metadata.get("dia_id") for m in
                   mem.recall(qa["question"], user=user, thread="questions", k=max(KS), **kw)]
            latency["pymem"].append(time.perf_counter_ns() - t0)
            t0 = time.perf_counter_ns()
            base = cosine_top(admin, user, embedder.name, vec, max(KS))
            latency["cosine"].append(time.perf_counter_ns() - t0)
            lexical = lexical_top(admin, user, qa["question"], max(KS), last)
            stepped = [(name, [m.metadata.get("dia_id") for m in
                               m_.recall(qa["question"], user=user, thread="questions", k=max(KS), **kw)])
                       for name, m_ in step_mems.items()]
            for name, ids in (("pymem", got), ("cosine", base), ("lexical", lexical), *stepped):
                per_q[name][key] = [len(evidence & set(ids[:k])) / len(evidence) for k in KS]
    results: dict[str, dict[str, Any]] = {}
    for name, found in per_q.items():
        results[name] = {cat: _score({q: v for q, v in found.items() if categories[q] == cat})
                         for cat in CATEGORIES.values()} | {"overall": _score(found)}
    lat = {name: summarize(s) for name, s in latency.items()}
    out = {"data": str(args.data), "embedder": embedder.name, "options": options, "turns": loaded,
           "as_of": "as_of" in recall_kwargs, "recall": results,
           "latency_ms": {n: {k: lat[n][k] for k in ("p50_ms", "p95_ms", "mean_ms")} for n in lat},
           "command": "python bench/recall.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    admin.close()
    db.close()
    print(f"evidence recall, {len(categories)} questions (categories 1-4), {loaded} turns, embedder {embedder.name}")
    print(table(results))
    for n in lat:
        print(f"{n} recall latency: p50 {lat[n]['p50_ms']:.2f} ms, p95 {lat[n]['p95_ms']:.2f} ms"
              + (" (Memory.recall: embedding the question included)" if n == "pymem" else " (SQL only)"))
    out["result_file"] = str(write_result("recall", out, args.results_dir))
    return out


if __name__ == "__main__":
    main()
