"""A burst of pool timeouts opens one probe connection, not one each (issue 56, item 3: 2,000
concurrent reads on a pool of 2 opened hundreds of probes and got "too many clients already",
locking every other client out). The burst runs as a role whose CONNECTION LIMIT leaves room
for the pool, one probe and one other client: a second probe at once would be refused."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pymem
from pymem import database

ROLE = "pymem_storm_test"
POOL = 2
LIMIT = POOL + 2  # the pool, one probe, one other client


@pytest.fixture
def limited(admin, dsn):
    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(ROLE)))
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT {} IN ROLE pymem_app").format(
        sql.Identifier(ROLE), sql.Literal(LIMIT)))
    try:
        yield make_conninfo(dsn, user=ROLE)
    finally:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(ROLE)))


def _settings(conninfo: str) -> pymem.Settings:
    return pymem.Settings(dsn=conninfo, pool_min_size=POOL, pool_max_size=POOL, pool_timeout=0.5)


def _counted(monkeypatch, name: str) -> list[int]:
    """Counts the probes pymem opens (and checks the other client can connect during each)."""
    calls: list[int] = []
    real = getattr(database, name)
    if asyncio.iscoroutinefunction(real):
        async def probe(*a, **k):
            calls.append(1)
            return await real(*a, **k)
    else:
        def probe(*a, **k):
            calls.append(1)
            return real(*a, **k)
    monkeypatch.setattr(database, name, probe)
    return calls


def _other_client(conninfo: str) -> int:
    with psycopg.connect(conninfo, connect_timeout=5) as c:
        return c.execute("SELECT 1").fetchone()[0]


def test_a_burst_of_async_pool_timeouts_opens_one_probe(limited, monkeypatch):
    probes = _counted(monkeypatch, "_aprobe")

    async def burst():
        async with await pymem.AsyncDatabase.open(_settings(limited)) as db:
            probes.clear()  # the one opening made
            held = asyncio.Event()
            busy = 0

            async def hold():
                nonlocal busy
                async with db.connection() as conn:
                    busy += 1
                    if busy == POOL:
                        held.set()
                    await conn.execute("SELECT pg_sleep(1.5)")

            holders = [asyncio.create_task(hold()) for _ in range(POOL)]
            await held.wait()
            calls = [asyncio.ensure_future(db.about()) for _ in range(300)]
            await asyncio.sleep(0.7)  # they have all timed out by now: the probe runs or just ran
            other = await asyncio.to_thread(_other_client, limited)
            results = await asyncio.gather(*calls, return_exceptions=True)
            await asyncio.gather(*holders)
            return other, results, (await db.about())["migrations"]

    other, results, after = asyncio.run(burst())
    assert other == 1  # another client of the same role got in during the burst
    kinds = {type(r).__name__ for r in results}
    assert kinds == {"TimeoutError"}, [str(r) for r in results if not isinstance(r, pymem.TimeoutError)][:3]
    assert all("no free connection" in str(r) for r in results)
    assert 1 <= len(probes) <= 2  # one at a time, its outcome reused for PROBE_FRESH
    assert after > 0  # the pool serves again


def test_a_burst_of_sync_pool_timeouts_opens_one_probe(limited, monkeypatch):
    probes = _counted(monkeypatch, "_probe")
    with pymem.Database(_settings(limited)) as db:
        probes.clear()
        held = threading.Barrier(POOL + 1)
        release = threading.Event()

        def hold():
            with db.connection():
                held.wait()
                release.wait(5)

        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            holders = [pool.submit(hold) for _ in range(POOL)]
            held.wait()
            calls = [pool.submit(db.about) for _ in range(60)]
            errors = [c.exception() for c in calls[:40]]  # the first wave, all timed out
            assert _other_client(limited) == 1
            release.set()
            errors += [c.exception() for c in calls[40:]]
            for h in holders:
                h.result()
    timeouts = [e for e in errors if e is not None]
    assert timeouts and all(isinstance(e, pymem.TimeoutError) for e in timeouts), [str(e) for e in timeouts][:3]
    assert 1 <= len(probes) <= 3


def test_an_unreachable_server_is_every_waiters_reason(limited, admin, dsn):
    """The shared probe's failure reaches each caller that waited for it, as its own exception."""
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]

    async def burst():
        async with await pymem.AsyncDatabase.open(_settings(limited)) as db:
            async with db.connection(), db.connection():
                admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(dbname)))
                try:
                    return await asyncio.gather(*(db.about() for _ in range(50)), return_exceptions=True)
                finally:
                    admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(dbname)))

    results = asyncio.run(burst())
    assert all(isinstance(r, pymem.ConnectionError) and "not currently accepting" in str(r) for r in results)
    assert len({id(r) for r in results}) == len(results)  # one instance each
