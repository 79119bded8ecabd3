"""What the tests that run a peer's own test files share (test_*_upstream.py): the cache of the
pinned source archives and test-only packages, fetched from the registry at test time
($PYMEM_UPSTREAM_CACHE, default /var/tmp/pymem-upstream), never installed into the environment
and never kept in the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("PYMEM_UPSTREAM_CACHE", "/var/tmp/pymem-upstream"))
#: pytest-asyncio and pytest-mock beside langgraph-checkpoint-postgres: what the LangGraph and
#: fastaiagent files need (their ini's asyncio_mode, their fixtures)
LANGGRAPH_DEPS = ["langgraph-checkpoint-postgres==3.2.0", "pytest-mock==3.17.0", "pytest-asyncio==1.5.0"]


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, capture_output=True, timeout=600)


def sdist(requirement: str, stem: str) -> Path:
    """The source archive ``stem``.tar.gz of ``requirement`` (pinned), downloaded once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / f"{stem}.tar.gz"
    if not archive.exists():
        pip("download", "--no-deps", "--no-binary", ":all:", requirement, "-d", str(CACHE))
    return archive


def packages(name: str, requirements: list[str]) -> Path:
    """``requirements`` installed into CACHE/``name`` once: into a directory of this process's own,
    then renamed into place (another test module or worker may be doing the same)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / name
    if target.exists():
        return target
    tmp = target.with_name(f"{name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    pip("install", "--no-deps", "--target", str(tmp), *requirements)
    try:
        tmp.rename(target)
    except OSError:  # the other one was first
        shutil.rmtree(tmp, ignore_errors=True)
    return target
