"""langgraph-checkpoint-postgres's ``test_large_batches`` and ``test_large_batches_async`` on
PymemStore and on AsyncPostgresStore, on the same server in the same run (issue 56, item 3).

Upstream's two test functions, taken from the langgraph-checkpoint-postgres 3.2.0 sdist (the
archive and the package come from the registry into $PYMEM_UPSTREAM_CACHE, default
/var/tmp/pymem-upstream, as tests/integrations/test_langgraph_upstream.py gets them), are called
as they are, each on a fresh store: ``AsyncPostgresStore.from_conn_string(dsn)`` after its
``setup()`` in a scratch database, and ``PymemStore(db=await pymem.AsyncDatabase.open(...))``
(a pool of ``--pool`` connections; upstream's default store has one connection) in another,
migrated by pymem; ``test_large_batches`` also on a PymemStore over a sync ``pymem.Database``
(each thread's call its own batch). ``test_large_batches`` calls the sync methods from 10 threads (6,000 calls);
``test_large_batches_async`` makes 60,000 concurrent async calls. Reports the seconds of each
and the ratio PymemStore / AsyncPostgresStore (target: within 2x).

    python bench/langgraph_batches.py [--dsn DSN] [--repeat 1] [--pool 2]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import connection_info, progress, scratch_database  # noqa: E402

CACHE = Path(__import__("os").environ.get("PYMEM_UPSTREAM_CACHE", "/var/tmp/pymem-upstream"))
STEM = "langgraph_checkpoint_postgres-3.2.0"
DEPS = CACHE / "langgraph-deps"


def _upstream() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / f"{STEM}.tar.gz"
    pip = [sys.executable, "-m", "pip"]
    if not archive.exists():
        subprocess.run([*pip, "download", "--no-deps", "--no-binary", ":all:", "langgraph-checkpoint-postgres==3.2.0",
                        "-d", str(CACHE)], check=True, capture_output=True)
    if not DEPS.exists():
        subprocess.run([*pip, "install", "--no-deps", "--target", str(DEPS), "langgraph-checkpoint-postgres==3.2.0",
                        "pytest-mock==3.17.0", "pytest-asyncio==1.5.0"], check=True, capture_output=True)
    where = Path(tempfile.mkdtemp(prefix="lg-bench-"))
    with tarfile.open(archive) as tar:
        tar.extractall(where, members=[m for m in tar.getmembers() if m.name.startswith(f"{STEM}/tests/")],
                       filter="data")
    return where / STEM


async def _timed(test, store, *args) -> float:
    t0 = time.perf_counter()
    await test(*args, store) if args else await test(store)
    return time.perf_counter() - t0


async def _postgres(dsn: str, tests) -> dict[str, float]:
    from langgraph.store.postgres import AsyncPostgresStore

    out = {}
    for name, test, args in tests:
        async with AsyncPostgresStore.from_conn_string(dsn) as store:
            await store.setup()
            async with store._cursor() as cur:
                await cur.execute("TRUNCATE store")
            out[name] = await _timed(test, store, *args)
    return out


async def _pymem(dsn: str, tests, pool: int) -> dict[str, float]:
    import uuid

    import pymem
    from pymem.integrations.langgraph import PymemStore

    out = {}
    for name, test, args in tests:
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn, pool_max_size=pool)) as db:
            store = PymemStore(db=db, project_id=f"bench-{uuid.uuid4().hex[:8]}")
            out[name] = await _timed(test, store, *args)
    return out


async def _pymem_sync(dsn: str, test, pool: int) -> float:
    """test_large_batches on PymemStore over a sync Database (each thread's call its own batch)."""
    import uuid

    import pymem
    from pymem.integrations.langgraph import PymemStore

    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=pool)) as db:
        store = PymemStore(db=db, project_id=f"bench-{uuid.uuid4().hex[:8]}")
        return await _timed(test, store, None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--pool", type=int, default=2, help="PymemStore's pool size (default 2)")
    args = parser.parse_args(argv)
    root = _upstream()
    sys.path[:0] = [str(DEPS), str(root)]
    module = importlib.import_module("tests.test_async_store")
    tests = [("test_large_batches", module.test_large_batches, (None,)),
             ("test_large_batches_async", module.test_large_batches_async, ())]
    conninfo, where = connection_info(args.dsn)
    progress(f"server: {where}")
    pg_dsn = scratch_database(conninfo, "bench_lg_postgres")  # pymem-migrated too: the same server's state
    pm_dsn = scratch_database(conninfo, "bench_lg_pymem")
    rows = []
    for r in range(args.repeat):
        pg = asyncio.run(_postgres(pg_dsn, tests))
        progress(f"AsyncPostgresStore: {pg}")
        pm = asyncio.run(_pymem(pm_dsn, tests, args.pool))
        progress(f"PymemStore: {pm}")
        sync = asyncio.run(_pymem_sync(pm_dsn, module.test_large_batches, args.pool))
        progress(f"PymemStore over a Database, test_large_batches: {sync:.2f}")
        for name, _, _ in tests:
            rows.append({"test": name, "round": r, "AsyncPostgresStore_s": round(pg[name], 2),
                         "PymemStore_s": round(pm[name], 2), "ratio": round(pm[name] / pg[name], 2)})
        rows.append({"test": "test_large_batches (PymemStore over a sync Database)", "round": r,
                     "AsyncPostgresStore_s": round(pg["test_large_batches"], 2), "PymemStore_s": round(sync, 2),
                     "ratio": round(sync / pg["test_large_batches"], 2)})
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
