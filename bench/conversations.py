"""Conversations benchmark: large threads/messages/message_embeddings tables (and facts), then
time context(), recall and turn writes on them, compare the exact recall scan with an HNSW
index, and measure concurrent turn writes.

    PYMEM_DATA_DIR=/tmp/bench-conv python bench/conversations.py --messages 1000000 --fresh

Steps: connect (``--dsn``, else ``PYMEM_DSN``, else the embedded server of ``PYMEM_DATA_DIR``),
migrate, with ``--fresh`` truncate the conversation and fact tables; generate ``--facts`` facts
(bench/facts_generate.sql, as bench/facts.py does: the probe user gets 200 active facts) plus a
few agent facts, and ``--messages`` messages set-based in chunks (bench/conversations_generate.sql):
skewed users, 384-d vectors, and the probe user (project ``acme``, user ``probe``) with exactly
``--probe-messages`` realistic messages in two threads with real HashEmbedder vectors; VACUUM
ANALYZE; check every constraint; record the plans of the statements inside
``pymem.context_read``; measure each operation ``--iterations`` times after ``--warmup``
untimed runs beside the ``SELECT 1`` floor; run the exact-vs-HNSW comparison (the HNSW index is
created for the comparison and dropped afterwards) and the concurrent turn writes; write
bench/results/conversations-<timestamp>.json. ``main(argv)`` returns the same dict.

Turn writes of the measurements go to a thread of their own (``bench-<token>``) of the probe,
and the concurrent ones to users of their own; both are deleted afterwards, so the probe keeps
exactly its messages and a second run (``--skip-generate``) measures the same data.

The code is the package bench/conv/ (its docstring lists the modules); this script is its
command line, and ``from bench import conversations`` gives the names callers and tests use.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` and the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.conv.args import parse_args
from bench.conv.concurrency import concurrency
from bench.conv.config import AGENT_FACTS, AGENT_ID, PROBE_ID, PROBE_PROJECT, REQUIRED, User
from bench.conv.dataset import dataset, user_counts
from bench.conv.generate import generate_facts, generate_messages
from bench.conv.hnsw import HNSW_INDEX, _recall_at_k, hnsw_compare
from bench.conv.integrity import integrity
from bench.conv.main import main
from bench.conv.measure import measurements
from bench.conv.plans import plans
from bench.conv.texts import pool_sentences, probe_conversation

__all__ = [
    "AGENT_FACTS",
    "AGENT_ID",
    "HNSW_INDEX",
    "PROBE_ID",
    "PROBE_PROJECT",
    "REQUIRED",
    "User",
    "_recall_at_k",
    "concurrency",
    "dataset",
    "generate_facts",
    "generate_messages",
    "hnsw_compare",
    "integrity",
    "main",
    "measurements",
    "parse_args",
    "plans",
    "pool_sentences",
    "probe_conversation",
    "user_counts",
]

if __name__ == "__main__":
    main()
