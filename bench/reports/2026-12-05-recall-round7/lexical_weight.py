"""Server CPU per pymem._recall_ranked call for the benchmark's 1,000-message probe: the vector alone,
vector + text at lexical weight 0.4 (hybrid), and vector + text at lexical weight 0 (hybrid off: the
text is not read), in alternating rounds (../2026-12-04-recall-floor/parts.py's loop).

    python lexical_weight.py <PYMEM_DATA_DIR of a bench/conversations.py database> [calls] [rounds]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "2026-12-04-recall-floor"))

import pymem  # noqa: E402
from parts import TEXT, measure, report  # noqa: E402
from pymem.connection import resolve_conninfo  # noqa: E402


def call(text: str, lw: float) -> str:
    return ("SELECT * FROM pymem._recall_ranked('acme', 'probe', 'default', v, 'hash-384-v1', "
            f"{text}, pymem._recall_spec(5, 10, 20, 0, 0, {lw}, 30, NULL, NULL, NULL, NULL, NULL))")


def main(argv: list[str]) -> None:
    dsn = resolve_conninfo(pymem.Settings(data_dir=argv[0]))
    cases = {"vector": ("", call("NULL", 0.4)), "hybrid, lw 0.4": ("", call(repr(TEXT), 0.4)),
             "text, lw 0": ("", call(repr(TEXT), 0))}
    report(measure(dsn, cases, int(argv[1]) if len(argv) > 1 else 200, int(argv[2]) if len(argv) > 2 else 5), 16)


if __name__ == "__main__":
    main(sys.argv[1:])
