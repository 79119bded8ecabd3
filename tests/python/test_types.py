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


def test_a_call_with_a_value_of_the_wrong_type_is_a_type_error(tmp_path):
    """Each parameter is typed from its cast in sql/queries.sql or from the SQL type of the pymem
    function's parameter it is passed to: max_facts (integer) refuses a str, scope (text) an int;
    None (NULL) fits every one; jsonb and vectors stay Any."""
    caller = tmp_path / "caller.py"
    caller.write_text(
        "from pymem import calls\n"
        "calls.facts_newest(scope='user', scope_id='alice', project_id='', max_facts=None)\n"
        "calls.facts_newest(scope='user', scope_id='alice', project_id='', max_facts='50')\n"
        "calls.facts_newest(scope=1, scope_id='alice', project_id='', max_facts=50)\n",
        encoding="utf-8")
    out = mypy(tmp_path, str(caller))
    assert out.returncode == 1, out.stdout + out.stderr
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["3", "4"], out.stdout
    assert 'Argument "max_facts" to "facts_newest" has incompatible type "str"; expected "int | None"' in out.stdout


def test_the_generated_types_follow_the_sql_signatures():
    from pymem import calls
    import inspect

    hints = {n: p.annotation for n, p in inspect.signature(calls.context_read).parameters.items()}
    assert hints["k"] == "int | None" and hints["recency_weight"] == "float | None"  # casts in the query
    assert hints["user_id"] == "str | None" and hints["dedupe"] == "bool | None"  # context_read's parameters
    assert hints["as_of"] == "datetime | None"
    assert hints["query_vector"] == "Any" and hints["metadata"] == "Any"  # vector, jsonb
    store = {n: p.annotation for n, p in inspect.signature(calls.store_item_put).parameters.items()}
    assert store["namespace"] == "Sequence[str] | None"  # %(namespace)s::text[]
    typed = sum(p.annotation != "Any" for f in vars(calls).values() if inspect.isfunction(f) and f.__module__ == calls.__name__
                for p in inspect.signature(f).parameters.values())
    assert typed > 150, typed
