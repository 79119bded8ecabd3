"""LangGraph's own store tests, run against PymemStore (issue 56, item 3).

The test files come from the source archives on the registry at test time (pinned:
langgraph-checkpoint 4.3.2 ``tests/test_store.py``; langgraph-checkpoint-postgres 3.2.0
``tests/test_store.py`` and ``tests/test_async_store.py``, with their ``conftest.py`` and
``embed_test_utils.py``); nothing upstream is kept in this repository. langgraph-checkpoint-postgres
(whose tests import it) and pytest-mock / pytest-asyncio (their plugins) are installed beside them
in the cache, never into the environment. Only the store is replaced, by a plugin loaded before
the tests: ``InMemoryStore`` (langgraph-checkpoint's tests build theirs inline) becomes a
PymemStore over a ``pymem.Database`` (one new project per store, so each starts empty, as an
``InMemoryStore`` does), and ``PostgresStore`` / ``AsyncPostgresStore`` become PymemStores over a
``pymem.Database`` / ``pymem.AsyncDatabase`` on the test's DSN, one project per database name
the fixture creates (their ``from_conn_string``, ``setup``, ``MIGRATIONS`` and ``_cursor``; the
statements of every test are upstream's). ``DEFAULT_URI`` is the test server. The tests that
cannot apply are skipped with the reasons docs/integrations.md ("The frameworks' own tests")
gives, and the counts are asserted. Requires the registry (as CI has it); the archives are cached
in $PYMEM_UPSTREAM_CACHE (default /var/tmp/pymem-upstream).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import urllib.parse
from pathlib import Path

import pytest
from _upstream import CACHE, LANGGRAPH_DEPS, packages, sdist  # tests/integrations/_upstream.py (pytest puts this folder on the path)

CHECKPOINT = ("langgraph-checkpoint", "4.3.2", "langgraph_checkpoint-4.3.2")
POSTGRES = ("langgraph-checkpoint-postgres", "3.2.0", "langgraph_checkpoint_postgres-3.2.0")
DEPS = CACHE / "langgraph-deps"
ROOT = Path(__file__).resolve().parents[2]

# upstream test ids (a prefix of each) that cannot apply to PymemStore, and why
# (docs/integrations.md, "The frameworks' own tests"): marked skipped with that reason
OWN_TABLE = ("reads or writes PostgresStore's own table `store` (backdates its expires_at column) through "
             "store._cursor(); PymemStore keeps items in pymem's keyed stores")
SKIPS = {
    "tests/test_store.py::test_nonnull_migrations": "checks PostgresStore's migration list, not a store",
    "tests/test_async_store.py::test_abatch_uses_single_pool_checkout": "counts AsyncPostgresStore's pool "
    "checkouts (langgraph.checkpoint.postgres._ainternal.get_connection), which PymemStore does not use",
    **{f"tests/{f}::test_omit_expired_": OWN_TABLE for f in ("test_store.py", "test_async_store.py")},
}

# the closing counts of each file (191 passed, 108 skipped in all)
EXPECTED_POSTGRES = {"test_store.py": {"passed": 133, "skipped": 60}, "test_async_store.py": {"passed": 58, "skipped": 48}}

# the one replacement, loaded as a plugin before the tests are collected
PLUGIN = r'''
import asyncio, contextlib, json, os, uuid

import pytest

import pymem
from pymem.integrations.langgraph import PymemStore

import langgraph.store.memory
import langgraph.store.postgres
import langgraph.store.postgres.aio
import langgraph.store.postgres.base

DSN = os.environ["PYMEM_DSN"]
_db = None


def _sync_db():
    global _db
    if _db is None:
        _db = pymem.Database(pymem.Settings(dsn=DSN, pool_min_size=0, pool_max_size=10))
    return _db


def _index(index):
    """PostgresStore's index config as PymemStore's: ann_index_config (PostgresStore's column
    type and ANN index) dropped; a distance other than cosine cannot apply: skipped."""
    if index is None:
        return None
    index = dict(index)
    if index.get("distance_type", "cosine") != "cosine":
        pytest.skip(f"distance_type={index['distance_type']!r}: PymemStore ranks by cosine similarity only")
    index.pop("ann_index_config", None)
    return index


def _project(conn_string):
    return "lg-" + conn_string.split("?")[0].rstrip("/").rsplit("/", 1)[-1]


class InMemoryStoreOnPymem(PymemStore):
    """InMemoryStore(index=...): a new project per store (empty, as an InMemoryStore starts)."""

    def __init__(self, *, index=None, ttl=None):
        super().__init__(db=_sync_db(), project_id="lgm-" + uuid.uuid4().hex, index=index, ttl=ttl)


class PostgresStoreOnPymem(PymemStore):
    MIGRATIONS = []

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, conn_string, *, pipeline=False, pool_config=None, index=None, ttl=None):
        size = (pool_config or {}).get("max_size", 2)
        with pymem.Database(pymem.Settings(dsn=DSN, pool_min_size=0, pool_max_size=size)) as db:
            yield cls(db=db, project_id=_project(conn_string), index=_index(index), ttl=ttl)

    def setup(self):
        pass

    @contextlib.contextmanager
    def _cursor(self):
        with self.db.connection() as conn, conn.cursor() as cur:
            yield cur


class AsyncPostgresStoreOnPymem(PymemStore):
    MIGRATIONS = []

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, conn_string, *, pipeline=False, pool_config=None, index=None, ttl=None):
        size = (pool_config or {}).get("max_size", 2)
        db = await pymem.AsyncDatabase.open(pymem.Settings(dsn=DSN, pool_min_size=0, pool_max_size=size))
        try:
            yield cls(db=db, project_id=_project(conn_string), index=_index(index), ttl=ttl)
        finally:
            await db.close()

    async def setup(self):
        pass

    @contextlib.asynccontextmanager
    async def _cursor(self):
        async with self.db.connection() as conn, conn.cursor() as cur:
            yield cur


def pytest_collection_modifyitems(config, items):
    skips = json.loads(os.environ.get("PYMEM_UPSTREAM_SKIPS", "{}"))
    for item in items:
        for prefix, reason in skips.items():
            if item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=reason))


langgraph.store.memory.InMemoryStore = InMemoryStoreOnPymem
langgraph.store.postgres.PostgresStore = PostgresStoreOnPymem
langgraph.store.postgres.AsyncPostgresStore = AsyncPostgresStoreOnPymem
langgraph.store.postgres.aio.AsyncPostgresStore = AsyncPostgresStoreOnPymem
'''

INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


def _admin_uri(dsn: str) -> str:
    """The test server as a URL whose last '/' precedes the database name (upstream splits
    DEFAULT_URI on '/'): the socket directory percent-encoded."""
    from psycopg.conninfo import conninfo_to_dict

    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if k in ("host", "port")}
    return f"postgresql://postgres@/postgres?{urllib.parse.urlencode(params, quote_via=urllib.parse.quote, safe='')}"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    """A fresh copy of each archive's tests/ (in its own directory, as the package root), the
    plugin and the ini beside them."""
    packages(DEPS.name, LANGGRAPH_DEPS)
    where = tmp_path_factory.mktemp("langgraph")
    for name, version, stem in (CHECKPOINT, POSTGRES):
        with tarfile.open(sdist(f"{name}=={version}", stem)) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"{stem}/tests/")]
            tar.extractall(where, members=members, filter="data")
        (where / stem / "pymem_langgraph_plugin.py").write_text(PLUGIN)
        (where / stem / "pytest.ini").write_text(INI)
    return where


def _run(root: Path, dsn: str, files: list[str]) -> dict[str, int]:
    """Run upstream's files on PymemStore: the counts of the closing line (the run must pass)."""
    env = {**os.environ, "PYMEM_DSN": dsn, "PYMEM_UPSTREAM_SKIPS": json.dumps(SKIPS),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(DEPS), str(root)])}
    conftest = root / "tests" / "conftest.py"
    if conftest.exists():  # DEFAULT_URI: the test server
        text = conftest.read_text()
        text = re.sub(r'^DEFAULT_URI = .*$', f"DEFAULT_URI = {_admin_uri(dsn)!r}", text, flags=re.M)
        conftest.write_text(text)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "pymem_langgraph_plugin", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "-p", "no:hypothesispytest", "-q", "--tb=short", "-rs",
                          "-W", "ignore::DeprecationWarning", *files, *os.environ.get("PYMEM_UPSTREAM_ARGS", "").split()],
                         cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    lines = out.stdout.splitlines()
    tail = "\n".join(lines[-40:])
    assert out.returncode == 0, tail + out.stderr[-2000:]
    closing = next(line for line in reversed(lines) if " passed" in line)
    print(closing)
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", closing)}


def test_langgraph_checkpoint_store_tests(upstream, dsn):
    """langgraph-checkpoint's tests/test_store.py: InMemoryStore's and AsyncBatchedBaseStore's
    tests, every store they build a PymemStore. All pass."""
    counts = _run(upstream / CHECKPOINT[2], dsn, ["tests/test_store.py"])
    assert counts == {"passed": 117}, counts


@pytest.mark.parametrize("file", sorted(EXPECTED_POSTGRES))
def test_langgraph_checkpoint_postgres_store_tests(upstream, dsn, file):
    """langgraph-checkpoint-postgres's tests/test_store.py (PymemStore over a Database) and
    tests/test_async_store.py (over an AsyncDatabase); the skips are SKIPS and the vector stores
    of distance_type 'l2' and 'inner_product' (PymemStore ranks by cosine similarity only)."""
    counts = _run(upstream / POSTGRES[2], dsn, [f"tests/{file}"])
    assert counts == EXPECTED_POSTGRES[file], counts
