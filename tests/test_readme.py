"""The README's examples run: every ```sql block of the "SQL API" section through plain psql
(in order, stopping at the first error), and every ```python block of the "SQL API" and
"Python API" sections with PYMEM_DSN set."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from pymem import server

README = Path(__file__).resolve().parent.parent / "README.md"


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def blocks(lang: str, title: str = "SQL API") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section(title), re.DOTALL)


def test_sql_api_examples_run_in_psql(dsn):
    sql = "\n".join(blocks("sql"))
    assert "pymem.fact_add" in sql and "pymem.about" in sql
    psql = server.bin_dir() / "psql"
    out = subprocess.run(
        [str(psql), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", "-"],
        input=sql,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # what the comments in the examples promise
    first = lines.index("1|t")
    assert lines[first + 1] == "1|f"  # "same id, created = false"
    assert "Prefers Slack" in out.stdout  # the supersede, history and chain reads


@pytest.mark.parametrize("title", ["SQL API", "Python API"])
def test_python_examples_run(dsn, monkeypatch, title):
    monkeypatch.setenv("PYMEM_DSN", dsn)
    code = blocks("python", title)
    assert code
    for block in code:
        namespace: dict = {}
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own docs
        mem = namespace.get("mem")
        if mem is not None:
            mem.close()
