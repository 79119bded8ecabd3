"""The documentation site (issue 30): the generated reference pages are current and complete (a
public SQL function or a name of ``pymem.__all__`` without an entry fails), and
``mkdocs build --strict`` builds the site with no broken link or missing reference."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg

import pymem
from pymem.migrations import generated_files

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def test_the_generated_pages_are_current():
    pages = [(path, text) for path, text in generated_files(ROOT / "sql") if path.parent == REFERENCE]
    assert sorted(p.name for p, _ in pages) == ["python.md", "sql-functions.md"]
    for path, text in pages:
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run python -m pymem.migrations"


def test_every_public_sql_function_has_an_entry(dsn):
    page = (REFERENCE / "sql-functions.md").read_text(encoding="utf-8")
    entries = set(re.findall(r"^### pymem\.([a-z0-9_]+)$", page, re.M))
    with psycopg.connect(dsn) as c:
        public = {name for (name,) in c.execute(
            """SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'pymem'::regnamespace
                 AND p.proname !~ '^(_|migration_)'
                 AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                                  AND d.objid = p.oid AND d.deptype = 'e')""")}
    assert len(public) > 40
    assert public - entries == set(), "public SQL functions without an entry (a comment above them in sql/api)"
    assert entries - public == set(), "entries for functions that do not exist"


def test_every_public_python_name_has_an_entry():
    page = (REFERENCE / "python.md").read_text(encoding="utf-8")
    entries = set(re.findall(r"^::: pymem\.(\w+)$", page, re.M))
    assert entries == {n for n in pymem.__all__ if not n.startswith("__")}


def test_the_site_builds_strictly(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    html = (tmp_path / "site" / "reference" / "python" / "index.html").read_text(encoding="utf-8")
    assert 'id="pymem.Memory.persist"' in html  # the docstrings were rendered, members included
    sql = (tmp_path / "site" / "reference" / "sql-functions" / "index.html").read_text(encoding="utf-8")
    assert "pymem.fact_add" in sql
