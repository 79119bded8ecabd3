"""pymem type-checks with mypy (the configuration in pyproject.toml), so a query placeholder
renamed in sql/queries.sql (and thus in the generated pymem/calls.py) fails before run time at
every call that still passes the old name (issue 31, item 3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mypy(tmp_path: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
         *targets],
        cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_package_type_checks(tmp_path):
    out = mypy(tmp_path, "pymem")
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_call_with_a_stale_placeholder_name_is_a_type_error(tmp_path):
    caller = tmp_path / "caller.py"
    caller.write_text(
        "from pymem import calls\n"
        "calls.facts_newest(scope='user', scope_id='alice', project_id='', max_facts=50)\n"  # the query's names
        "calls.facts_newest(scope='user', user_id='alice', project_id='', max_facts=50)\n",  # a name it does not have
        encoding="utf-8")
    out = mypy(tmp_path, str(caller))
    assert out.returncode == 1, out.stdout + out.stderr
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert len(errors) >= 1 and all(":3:" in line for line in errors), out.stdout
    assert 'Unexpected keyword argument "user_id"' in out.stdout
