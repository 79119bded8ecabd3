"""fastaiagent's own FactStore conformance tests, run against PymemFactStore (issue 56, item 3).

The test file comes from fastaiagent's source archive on the registry at test time (pinned:
fastaiagent 1.94.0, ``tests/integration/test_faststore_conformance.py`` with the ``conftest.py``
files it runs under; nothing upstream is kept in this repository). Its ``store`` fixture runs each
test on SQLite, Postgres and Redis; only its Postgres parameter is used, with the one replacement:
``fastaiagent.learn.PostgresFactStore(dsn)`` is a PymemFactStore over a ``pymem.Database`` on
the test's DSN (a new pymem project per store: each starts empty, as upstream's uuid-named scopes
make theirs). Its SQLite and Redis parameters test fastaiagent's own stores and are deselected.
Requires the registry (as CI has it); the archive is cached in $PYMEM_UPSTREAM_CACHE (default
/var/tmp/pymem-upstream).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from _upstream import CACHE, LANGGRAPH_DEPS, packages, sdist  # tests/integrations/_upstream.py (pytest puts this folder on the path)

STEM = "fastaiagent-1.94.0"
DEPS = CACHE / "langgraph-deps"  # pytest-asyncio (its ini's asyncio_mode), shared with the LangGraph suites
ROOT = Path(__file__).resolve().parents[2]
EXPECTED = 14  # the file's tests, each on the Postgres parameter

PLUGIN = r'''
import os, uuid

import fastaiagent.learn

import pymem
from pymem.integrations.fastaiagent import PymemFactStore

_db = None


def PostgresFactStoreOnPymem(dsn, *args, **kwargs):
    global _db
    if _db is None:
        _db = pymem.Database(pymem.Settings(dsn=dsn, pool_min_size=0, pool_max_size=10))
    return PymemFactStore(db=_db, project_id="fa-" + uuid.uuid4().hex[:12])


fastaiagent.learn.PostgresFactStore = PostgresFactStoreOnPymem
'''

INI = """[pytest]
asyncio_mode = auto
"""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    archive = sdist("fastaiagent==1.94.0", STEM)
    packages(DEPS.name, LANGGRAPH_DEPS)
    where = tmp_path_factory.mktemp("fastaiagent")
    wanted = {f"{STEM}/tests/__init__.py", f"{STEM}/tests/conftest.py", f"{STEM}/tests/integration/__init__.py",
              f"{STEM}/tests/integration/conftest.py", f"{STEM}/tests/integration/test_faststore_conformance.py"}
    with tarfile.open(archive) as tar:
        tar.extractall(where, members=[m for m in tar.getmembers() if m.name in wanted], filter="data")
    root = where / STEM
    (root / "pymem_fastaiagent_plugin.py").write_text(PLUGIN)
    (root / "pytest.ini").write_text(INI)
    return root


def test_fastaiagents_fact_store_conformance_passes_on_pymem(upstream, dsn):
    env = {**os.environ, "PG_TEST_DSN": dsn, "PYTHONPATH": os.pathsep.join([str(ROOT), str(DEPS), str(upstream)])}
    env.pop("REDIS_TEST_URL", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "pymem_fastaiagent_plugin", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "-p", "no:hypothesispytest", "-q", "--tb=short", "-k", "postgres",
                          "tests/integration/test_faststore_conformance.py"],
                         cwd=upstream, env=env, capture_output=True, text=True, timeout=600)
    tail = "\n".join(out.stdout.splitlines()[-30:])
    assert out.returncode == 0, tail + out.stderr[-2000:]
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail.splitlines()[-1]))
    assert counts.get("passed") == EXPECTED and not counts.get("failed") and not counts.get("skipped"), tail
    print(tail.splitlines()[-1])
