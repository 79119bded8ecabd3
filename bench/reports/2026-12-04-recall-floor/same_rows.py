"""Checks that variants.py's _rr_heap returns the shipped _recall_ranked's rows and scores (to 6
decimals): 3 query vectors x 6 texts (with stop words only and an unknown word) x 3 specs.

    python same_rows.py <PYMEM_DATA_DIR of a bench/conversations.py database with variants.py applied>
"""

from __future__ import annotations

import itertools
import sys

import psycopg

import pymem
from pymem.connection import resolve_conninfo

TEXTS = ["which hotel did I book in Kyoto", "kyoto", "what did I say about the trip", "train tickets hotel booking",
         "zzzz unknownword", "the"]
SPECS = ["pymem._recall_spec(5, 10, 20, 0, 0, 0.4, 30, NULL, NULL, NULL, NULL, NULL)",
         "pymem._recall_spec(10, 10, 20, 0, 0.1, 0.4, 30, NULL, NULL, NULL, NULL, NULL)",
         "pymem._recall_spec(3, 10, 0, 0, 0, 0.6, 30, NULL, NULL, NULL, NULL, NULL)"]


def main(data_dir: str) -> None:
    differ = cases = 0
    with psycopg.connect(resolve_conninfo(pymem.Settings(data_dir=data_dir))) as c:
        for offset, text, spec in itertools.product((3, 17, 400), TEXTS, SPECS):
            q = ("SELECT thread_id, seq, round(score::numeric, 6) FROM pymem.{}('acme', 'probe', 'default',"
                 " (SELECT embedding FROM pymem.message_embeddings WHERE user_id = 'probe' AND project_id = 'acme'"
                 f" AND embedder = 'hash-384-v1' ORDER BY seq LIMIT 1 OFFSET {offset}), 'hash-384-v1', %s, {spec})")
            shipped = c.execute(q.format("_recall_ranked"), (text,)).fetchall()
            variant = c.execute(q.format("_rr_heap"), (text,)).fetchall()
            cases += 1
            if shipped != variant:
                differ += 1
                print(text, spec, shipped[:3], variant[:3])
    print(f"{cases} cases, {differ} differ")


if __name__ == "__main__":
    main(sys.argv[1])
