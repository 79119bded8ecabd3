"""The lexical weight swept on the development data, one conversation at a time, and the weight
chosen with each conversation held out in turn (issue 32, round 7). Runs bench/recall.py once per
(weight, conversation) on a database it loaded before (--reuse), then prints the table.

    PYMEM_DATA_DIR=/tmp/bench-recall python bench/recall.py          # loads the data once (MiniLM)
    PYMEM_DATA_DIR=/tmp/bench-recall python weight_sweep.py run /tmp/lw-sweep
    python weight_sweep.py report /tmp/lw-sweep

Held out: for each conversation, the weight that maximises @5 + @10 over the other two (pooled by
question), scored on the held-out one, against the weight before this round (0.4).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
WEIGHTS = [0.25, 0.3, 0.32, 0.33, 0.34, 0.35, 0.36, 0.37, 0.38, 0.4, 0.45, 0.5]
CONVERSATIONS = ["conv-26", "conv-30", "conv-41"]
BEFORE = 0.4


def run(out: str) -> None:
    for lw in WEIGHTS:
        for c in CONVERSATIONS:
            subprocess.run([sys.executable, str(ROOT / "bench" / "recall.py"), "--reuse", "--quiet", "--conversations", c,
                            "--option", f"lexical_weight={lw}", "--results-dir", f"{out}/{lw}-{c}"],
                           check=True, stdout=subprocess.DEVNULL)


def report(out: str) -> None:
    res: dict[float, dict[str, tuple[float, float, int]]] = {}
    for d in Path(out).iterdir():
        lw, c = d.name.split("-", 1)
        r = json.loads(next(d.glob("*.json")).read_text())["recall"]["pymem"]["overall"]
        res.setdefault(float(lw), {})[c] = (r["@5"], r["@10"], r["questions"])

    def pooled(lw: float, cs: list[str]) -> tuple[float, float]:
        n = sum(res[lw][c][2] for c in cs)
        return (sum(res[lw][c][0] * res[lw][c][2] for c in cs) / n, sum(res[lw][c][1] * res[lw][c][2] for c in cs) / n)

    print("| lexical weight | " + " | ".join(f"{c} @5 / @10" for c in CONVERSATIONS) + " | all @5 / @10 |")
    print("|--:|" + "--:|" * (len(CONVERSATIONS) + 1))
    for lw in sorted(res):
        cells = [f"{res[lw][c][0]:.3f} / {res[lw][c][1]:.3f}" for c in CONVERSATIONS]
        print(f"| {lw} | " + " | ".join(cells) + " | %.4f / %.4f |" % pooled(lw, CONVERSATIONS))
    print("\n| held out | chosen on the other two | held out @5 / @10 | at %s |\n|---|--:|--:|--:|" % BEFORE)
    tot, n = [0.0] * 4, 0
    for held in CONVERSATIONS:
        rest = [c for c in CONVERSATIONS if c != held]
        best = max(sorted(res), key=lambda lw: sum(pooled(lw, rest)))
        a, b = res[best][held], res[BEFORE][held]
        print(f"| {held} ({a[2]}) | {best} | {a[0]:.3f} / {a[1]:.3f} | {b[0]:.3f} / {b[1]:.3f} |")
        tot = [tot[0] + a[0] * a[2], tot[1] + a[1] * a[2], tot[2] + b[0] * a[2], tot[3] + b[1] * a[2]]
        n += a[2]
    print("| question-weighted | | %.4f / %.4f | %.4f / %.4f |" % tuple(x / n for x in tot))


if __name__ == "__main__":
    {"run": run, "report": report}[sys.argv[1]](sys.argv[2])
