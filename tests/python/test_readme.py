"""The examples of README.md and docs/ run: every ```sql block of the "SQL API" section through
plain psql (in order, stopping at the first error), and every ```python block of the sections
listed below with PYMEM_DSN set, each in project 'readme', leaving nothing behind."""

from __future__ import annotations

import re
import subprocess

import psycopg
import pytest

from pymem import server

from conftest import blocks, section  # shared with security/test_function_safety.py


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
    # they wrote to project 'readme' only, and the section's last block removed it all (issue 29)
    with psycopg.connect(dsn) as c:
        assert [(w, n) for w, n in c.execute(LEFT_BEHIND).fetchall() if n] == []


def test_the_readmes_sql_loop_runs_in_psql_and_cleans_up(dsn):
    """README "The same in SQL": the agent loop's calls through plain psql; the context it reads
    has the agent's fact, the user's and the turn, and nothing is left behind."""
    (sql,) = blocks("sql", "The same in SQL")
    psql = server.bin_dir() / "psql"
    out = subprocess.run([str(psql), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", "-"],
                         input=sql, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    context = next(line for line in out.stdout.splitlines() if line.startswith("{"))
    for shown in ("Breakfast is served from 7 to 10.", "Prefers a quiet room", "When is breakfast?"):
        assert shown in context, (shown, context)
    with psycopg.connect(dsn) as c:
        assert [(w, n) for w, n in c.execute(LEFT_BEHIND).fetchall() if n] == []


@pytest.mark.parametrize("title", ["Recall indexes", "Backups and restores"])
def test_the_operations_pages_sql_runs_in_psql(dsn, title):
    """The ```sql blocks of docs/recall-indexes.md and docs/backups.md, through plain psql as the
    database's superuser (the role those pages' statements need), leaving nothing behind."""
    sql = "\n".join(blocks("sql", title))
    assert sql
    psql = server.bin_dir() / "psql"
    out = subprocess.run([str(psql), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", "-"],
                         input=sql, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with psycopg.connect(dsn) as c:
        assert [(w, n) for w, n in c.execute(LEFT_BEHIND).fetchall() if n] == []


# what an example may leave behind: nothing (issue 29: a user's first agent found the README's
# facts about "alice" in its context, since the examples wrote to project '' and kept them)
LEFT_BEHIND = """SELECT 'facts', count(*) FROM pymem.facts UNION ALL SELECT 'threads', count(*) FROM pymem.threads
                 UNION ALL SELECT 'messages', count(*) FROM pymem.messages
                 UNION ALL SELECT 'stores', count(*) FROM pymem.stores"""


# the sections whose ```python blocks run here: the README's, and the docs pages' (docs/python.md, docs/learning.md,
# docs/tracing.md, docs/recall-indexes.md, docs/backups.md, docs/cli-and-configuration.md; docs/sql.md's
# "SQL API" holds Python blocks too)
PYTHON_SECTIONS = ["An agent loop in Python", "SQL API", "Python API", "Learning", "Tracing", "Recall indexes",
                   "Backups and restores", "Configuration"]
# the sections whose ```sql blocks run here (test_sql_api_examples_run_in_psql and the two below it)
SQL_SECTIONS = ["SQL API", "The same in SQL", "Recall indexes", "Backups and restores"]
# the sections whose blocks other tests run, where they need what those tests set up
ELSEWHERE = {("python", "Integrations"): "tests/integrations/test_integrations_langgraph.py and "
                                         "test_integrations_openai_agents.py (the frameworks)",
             ("sql", "Requirements and compatibility"): "tests/sql/test_managed_install.py (roles to drop)",
             ("sql", "Scaling out: pymem on a Citus cluster"): "tests/sql/test_citus.py (the cluster)"}


def test_every_example_of_the_readme_and_the_docs_runs_somewhere():
    """Each ```python and ```sql block of README.md and docs/*.md belongs to a section some test
    runs: an example added to any other section fails here until a test runs it."""
    from conftest import doc_pages

    run = {("python", b) for t in PYTHON_SECTIONS for b in blocks("python", t)}
    run |= {("sql", b) for t in SQL_SECTIONS for b in blocks("sql", t)}
    run |= {(lang, b) for (lang, t) in ELSEWHERE for b in blocks(lang, t)}
    found = 0
    for page in doc_pages():
        for lang in ("python", "sql"):
            for b in re.findall(rf"```{lang}\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL):
                found += 1
                assert (lang, b) in run, f"{page.name}: a ```{lang} block no test runs:\n{b}"
    assert found > 40, found


@pytest.mark.parametrize("title", PYTHON_SECTIONS)
def test_python_examples_run_in_their_own_project_and_clean_up(dsn, monkeypatch, title):
    monkeypatch.setenv("PYMEM_DSN", dsn)
    code = blocks("python", title)
    assert code
    for block in code:
        namespace: dict = {}
        exec(compile(block, title, "exec"), namespace)  # noqa: S102 - our own docs
        mem = namespace.get("mem")
        if mem is not None:
            mem.close()
        if re.search(r"Memory\(|MemoryStore|pymem\.(context|record)\(", block):  # writes memory
            assert 'project_id="readme"' in block, f"an example that does not use project 'readme':\n{block}"
        # a user is user= in every example; id= names a subject of any tier ('*': all of them)
        assert not re.search(r'tier="user", id=|\bid="(?!\*)', block), f"a user named with id=:\n{block}"
        with psycopg.connect(dsn) as c:
            left = [(what, n) for what, n in c.execute(LEFT_BEHIND).fetchall() if n]
        assert not left, f"this example leaves {left} behind:\n{block}"
