"""The command line of ``bench/conversations.py``: every flag, its default and its checks."""

from __future__ import annotations

import argparse

from bench import facts as bench_facts

from .config import RECALL_K

#: ``--help``'s description: the first paragraph of bench/conversations.py's docstring.
DESCRIPTION = (
    "Conversations benchmark: large threads/messages/message_embeddings tables (and facts), then\n"
    "time context(), recall and turn writes on them, compare the exact recall scan with an HNSW\n"
    "index, and measure concurrent turn writes."
)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return values


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/conversations.py", description=DESCRIPTION)
    p.add_argument("--messages", type=int, default=1_000_000, help="messages to generate (default 1000000)")
    p.add_argument("--probe-messages", type=int, default=1000, help="the probe user's messages (default 1000)")
    p.add_argument("--facts", type=int, default=None,
                   help="facts to generate (default: as many as messages, at least 1000)")
    p.add_argument("--users", type=int, default=None,
                   help="user ids the messages are spread over (default messages/40)")
    p.add_argument("--dsn", help="libpq connection string (default: PYMEM_DSN, else the embedded server)")
    p.add_argument("--fresh", action="store_true",
                   help="truncate threads, messages, message_embeddings, facts and fact_embeddings first")
    p.add_argument("--skip-generate", action="store_true", help="measure the data already there")
    p.add_argument("--iterations", type=int, default=1000, help="timed runs per measurement (default 1000)")
    p.add_argument("--warmup", type=int, default=50, help="untimed runs before each measurement (default 50)")
    p.add_argument("--heavy-iterations", type=int, default=200,
                   help="timed runs of the heaviest user's measurements (default 200)")
    p.add_argument("--seed", type=int, default=1, help="generation seed (default 1)")
    p.add_argument("--chunk", type=int, default=50_000, help="messages per INSERT (default 50000)")
    p.add_argument("--fact-chunk", type=int, default=100_000, help="facts per INSERT (default 100000)")
    p.add_argument("--unembedded", type=float, default=0.01,
                   help="share of other users' messages without a vector (default 0.01)")
    p.add_argument("--work-mem", default="512MB", help="work_mem of the generating session (default 512MB)")
    p.add_argument("--no-hnsw", action="store_true", help="skip the exact-vs-HNSW comparison")
    p.add_argument("--hnsw-iterations", type=int, default=100, help="timed runs per HNSW variant (default 100)")
    p.add_argument("--hnsw-queries", type=int, default=32, help="query vectors for recall@k (default 32)")
    p.add_argument("--hnsw-k", type=int, default=RECALL_K, help="k of the comparison (default 5)")
    p.add_argument("--hnsw-ef", type=_int_list, default=[40, 100, 400],
                   help="hnsw.ef_search values, comma-separated (default 40,100,400)")
    p.add_argument("--hnsw-m", type=int, default=16, help="HNSW m (default 16)")
    p.add_argument("--hnsw-ef-construction", type=int, default=64, help="HNSW ef_construction (default 64)")
    p.add_argument("--hnsw-maintenance-work-mem", default="4GB",
                   help="maintenance_work_mem for the index build (default 4GB)")
    p.add_argument("--hnsw-workers", type=int, default=1,
                   help="max_parallel_maintenance_workers for the index build (default 1)")
    p.add_argument("--concurrency", type=_int_list, default=[1, 2, 4, 8],
                   help="client threads of the concurrent turn writes (default 1,2,4,8)")
    p.add_argument("--concurrency-turns", type=int, default=300,
                   help="turns each client thread writes (default 300)")
    p.add_argument("--growth-turns", type=int, default=5000,
                   help="turns written into one growing thread for turn_growth (default 5000)")
    p.add_argument("--growth-block", type=int, default=500, help="turns per turn_growth figure (default 500)")
    p.add_argument("--no-verify", action="store_true", help="skip the integrity checks after generation")
    p.add_argument("--results-dir", default=None, help="where to write the JSON (default bench/results)")
    p.add_argument("--no-write", action="store_true", help="do not write a result file")
    p.add_argument("--samples", action="store_true", help="keep every sample (ns) in the JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked, with the defaults that depend on other flags filled in."""
    p = _parser()
    args = p.parse_args(argv)
    if args.probe_messages < 2:
        p.error("--probe-messages must be at least 2")
    if not args.skip_generate and args.messages < 2 * args.probe_messages + 100:
        p.error(f"--messages must be at least {2 * args.probe_messages + 100} (twice the probe's, plus 100)")
    if args.iterations < 1 or args.warmup < 0 or args.heavy_iterations < 1 or args.hnsw_iterations < 1:
        p.error("iterations must be >= 1 and --warmup >= 0")
    if not 0 <= args.unembedded < 1:
        p.error("--unembedded must be in [0, 1)")
    if args.facts is None:
        args.facts = max(args.messages, bench_facts.MIN_ROWS)
    if args.facts < bench_facts.MIN_ROWS:
        p.error(f"--facts must be at least {bench_facts.MIN_ROWS} (the probe's 250 facts are spread over them)")
    if args.users is None:
        args.users = max(50, args.messages // 40)
    args.chunk = max(1, args.chunk)
    args.fact_chunk = max(4, args.fact_chunk - args.fact_chunk % 4)
    return args
