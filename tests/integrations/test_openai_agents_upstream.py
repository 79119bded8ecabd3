"""The OpenAI Agents SDK's own session tests, run against PymemSession (issue 56, item 2).

The test files come from the SDK's source archive on the registry at test time (pinned:
openai-agents 0.24.0; nothing upstream is kept in this repository), with pytest-asyncio (the
SDK's test runner plugin) installed beside them, never into the environment. Only the session is
replaced: ``agents.SQLiteSession`` becomes a PymemSession of the same arguments (one pymem project
per database path, so each test's sessions start empty, as its temporary SQLite file does). The
tests of SQLite itself (its connections, worker threads, file locks, corrupt rows, rollbacks)
are not about a session and are left out, as are the tests that stub SQLite's internals.
None is skipped. Requires the registry (as CI has it); the archive is cached in
$PYMEM_UPSTREAM_CACHE (default /var/tmp/pymem-upstream).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from _upstream import CACHE, packages, sdist  # tests/integrations/_upstream.py (pytest puts this folder on the path)

SDK = "openai-agents==0.24.0"
ASYNCIO = "pytest-asyncio==1.5.0"
ROOT = Path(__file__).resolve().parents[2]

# tests/memory/test_session.py and test_session_limit.py: the tests of a session's behaviour
TESTS = [
    "test_session.py::test_session_memory_basic_functionality_parametrized",
    "test_session.py::test_session_memory_with_explicit_instance_parametrized",
    "test_session.py::test_session_memory_disabled_parametrized",
    "test_session.py::test_session_memory_different_sessions_parametrized",
    "test_session.py::test_sqlite_session_memory_direct",
    "test_session.py::test_sqlite_session_memory_pop_item",
    "test_session.py::test_session_memory_pop_different_sessions",
    "test_session.py::test_sqlite_session_get_items_with_limit",
    "test_session.py::test_session_memory_appends_list_input_by_default",
    "test_session.py::test_session_callback_prepared_input",
    "test_session.py::test_session_callback_repeating_history_does_not_grow_session",
    "test_session.py::test_sqlite_session_unicode_content",
    "test_session.py::test_sqlite_session_special_characters_and_sql_injection",
    "test_session.py::test_sqlite_session_concurrent_access",
    "test_session.py::test_session_add_items_exception_propagates_in_streamed",
    "test_session.py::test_session_settings_default",
    "test_session.py::test_session_settings_constructor",
    "test_session.py::test_get_items_uses_session_settings_limit",
    "test_session.py::test_get_items_explicit_limit_overrides_session_settings",
    "test_session.py::test_runner_with_session_settings_override",
    "test_session_limit.py",
]

# the one replacement: SQLiteSession(session_id, db_path, ..., session_settings) as a PymemSession
PLUGIN = '''
import asyncio, uuid, weakref

import agents
from agents.memory.session_settings import SessionSettings, coerce_session_settings

import pymem
from pymem.integrations.openai_agents import PymemSession


class SQLiteSessionOnPymem(PymemSession):
    """SQLiteSession's arguments; one pymem project per database path (a new one for
    ':memory:'); an AsyncMemory per event loop (the SDK's tests run Runner.run_sync in threads
    of their own loops); close() is sync, as SQLiteSession's."""

    def __init__(self, session_id, db_path=":memory:", sessions_table="agent_sessions",
                 messages_table="agent_messages", session_settings=None):
        path = str(db_path)
        self._project = "sdk-" + (uuid.uuid4().hex if path == ":memory:" else uuid.uuid5(uuid.NAMESPACE_URL, path).hex)
        self._memories = weakref.WeakKeyDictionary()
        super().__init__(session_id, user="sdk-tests", memory=pymem.AsyncMemory(project_id=self._project),
                         session_settings=coerce_session_settings(session_settings)
                         if session_settings is not None else SessionSettings())

    @property
    def memory(self):
        loop = asyncio.get_running_loop()
        if loop not in self._memories:
            self._memories[loop] = pymem.AsyncMemory(project_id=self._project)
        return self._memories[loop]

    @memory.setter
    def memory(self, value):
        pass

    def close(self):
        pass


agents.SQLiteSession = SQLiteSessionOnPymem
'''

INI = """[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = session
"""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    """The SDK's tests/ (from its sdist) and pytest-asyncio, in the cache; a fresh copy of the
    tests in a temporary directory with the plugin and the ini."""
    archive = sdist(SDK, "openai_agents-0.24.0")
    packages("pytest-asyncio-1.5.0", [ASYNCIO])
    where = tmp_path_factory.mktemp("agents-sdk")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("openai_agents-0.24.0/tests/")
                   and "/tests/sandbox/" not in m.name and "/tests/extensions/" not in m.name]
        tar.extractall(where, members=members, filter="data")
    root = where / "openai_agents-0.24.0"
    (root / "pymem_sdk_plugin.py").write_text(PLUGIN)
    (root / "pytest.ini").write_text(INI)
    return root


def test_the_sdks_session_tests_pass_on_pymem_session(upstream, dsn):
    env = {**os.environ, "PYMEM_DSN": dsn, "PYMEM_POOL_MIN_SIZE": "0", "PYMEM_POOL_MAX_SIZE": "1",
           "OPENAI_AGENTS_DISABLE_TRACING": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(CACHE / "pytest-asyncio-1.5.0"), str(upstream)])}
    targets = [f"tests/memory/{t}" for t in TESTS]
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "pymem_sdk_plugin", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "-p", "no:hypothesispytest", "-q", "--tb=native",
                          "-W", "ignore::pytest.PytestUnraisableExceptionWarning", "-W", "ignore::DeprecationWarning", *targets],
                         cwd=upstream, env=env, capture_output=True, text=True, timeout=900)
    tail = "\n".join(out.stdout.splitlines()[-40:])
    assert out.returncode == 0, tail + out.stderr[-2000:]
    assert " failed" not in tail and " passed" in tail, tail
    print(tail.splitlines()[-1])
