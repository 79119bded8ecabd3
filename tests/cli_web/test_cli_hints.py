"""Failures that say what is wrong in the caller's own words (issue 13, points 3 and 4):
hints reworded for Python and the command line, the fact tiers' hints, ``tier="project"``
under the Memory's project, exporting a user who does not exist, the demo naming its project,
and Ctrl-C ending any command with one line and exit code 130."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

import pymem
from pymem import server
from pymem.cli import CLI_HINTS
from pymem.errors import PYTHON_HINTS
from pymem.portability import export_user, import_user
from pymem.queries import Q, sql_root

PYMEM = Path(sys.executable).parent / "pymem"

# Hints in sql/api/ that name SQL but that a Python or CLI caller cannot meet through pymem's
# own calls (each is one statement, in its own transaction), or that only point at the README.
SQL_ONLY_HINTS = {
    "See pymem.tenant_roles (docs/security.md).",
    "One transaction serves one project: commit, or call pymem.set_tenant() for the right one.",
}
# what marks a hint as written in SQL's words: a named argument, a call, a pymem.function
SQL_WORDS = re.compile(r"=>|\w\(|\bpymem\.\w")


def sql_hints() -> set[str]:
    """Every HINT of sql/api/*.sql, as the server sends it (adjacent literals joined)."""
    found = set()
    literal = r"'(?:[^']|'')*'"
    for path in Path(str(sql_root() / "api")).glob("*.sql"):
        for m in re.finditer(rf"HINT\s*=\s*((?:{literal}\s*)+)", path.read_text(encoding="utf-8")):
            parts = re.findall(literal, m.group(1))
            found.add("".join(p[1:-1].replace("''", "'") for p in parts))
    return found


def run(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(PYMEM), *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **env}, timeout=180)


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn)) as d:
        yield d


# -- hints in the caller's language ---------------------------------------------------------

def test_every_sql_hint_written_in_sql_words_has_python_words():
    hints = sql_hints()
    assert "Import under another user_id, or pass replace => true." in hints  # the parser sees them
    in_sql_words = {h for h in hints if SQL_WORDS.search(h)}
    assert in_sql_words - SQL_ONLY_HINTS <= set(PYTHON_HINTS), "reword these for Python in pymem.errors.PYTHON_HINTS"
    assert set(PYTHON_HINTS) <= hints and set(CLI_HINTS) <= hints, "a reworded hint the SQL no longer sends"
    for words in [*PYTHON_HINTS.values(), *CLI_HINTS.values()]:
        assert "=>" not in words and "pymem.store_" not in words and "scope_id" not in words


def test_import_refusal_names_replace_as_python_and_the_cli_spell_it(db, dsn, tmp_path):
    pymem.Memory(db=db, agent_id="bot").persist("Prefers email", id="alice")
    doc = json.loads(json.dumps(export_user(db, "alice"), default=str))
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.Error) as sql_err:  # SQL keeps SQL's words
        c.execute("SELECT pymem.user_import(%s)", (json.dumps(doc),))
    assert "replace => true" in sql_err.value.diag.message_hint
    with pytest.raises(pymem.ValidationError, match="already has memory") as err:
        import_user(db, doc)
    assert err.value.hint == "Import under another user_id=..., or pass replace=True."
    assert "replace=True" in str(err.value) and "=>" not in str(err.value)
    path = tmp_path / "alice.json"
    path.write_text(json.dumps(doc))
    cli = run("import", str(path), env={"PYMEM_DSN": dsn}, cwd=tmp_path)
    assert cli.returncode == 1 and "already has memory" in cli.stderr
    assert "--replace" in cli.stderr and "--user" in cli.stderr and "=>" not in cli.stderr
    assert run("import", str(path), "--replace", env={"PYMEM_DSN": dsn}, cwd=tmp_path).returncode == 0


def test_a_missing_store_hints_get_or_create(db):
    with pytest.raises(pymem.NotFoundError) as err:
        pymem.MemoryStore.get("nowhere", db=db)
    assert "get_or_create" in err.value.hint and "=>" not in str(err.value)
    assert err.value.server_hint == "Create it with store_open(..., create => true)."


def test_a_user_fact_without_a_user_hints_tier_global(db, dsn):
    mem = pymem.Memory(db=db, agent_id="support-bot")
    with pytest.raises(pymem.ValidationError, match="user") as err:
        mem.persist("Return policy is 30 days")  # meant tier="global"
    assert 'tier="global"' in str(err.value)
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.Error) as sql_err:
        c.execute("SELECT pymem.fact_add(scope => 'user', scope_id => '', content => 'Return policy is 30 days')")
    assert sql_err.value.sqlstate == "22023" and "scope => 'agent'" in sql_err.value.diag.message_hint
    assert mem.persist("Return policy is 30 days", tier="global") > 0


# -- tier="project" -------------------------------------------------------------------------

def test_tier_project_means_the_memorys_own_project(db):
    acme = pymem.Memory(db=db, agent_id="bot", project_id="acme")
    fid = acme.persist("Office closes at 6", tier="project")
    (fact,) = acme.retrieve(tier="project")
    assert (fact.id, fact.scope, fact.scope_id, fact.project_id) == (fid, "project", "acme", "acme")
    assert [f.id for f in acme.retrieve(tier="project", id="acme")] == [fid]  # the same subject, named
    assert acme.retrieve(tier="project", id="hq") == []  # id= still names another project subject
    assert acme.forget(tier="project") == 1
    # a Memory with no project (the default '') has no project to file it under
    with pytest.raises(pymem.ValidationError, match="project fact needs a project id") as err:
        pymem.Memory(db=db, agent_id="bot").persist("Office closes at 6", tier="project")
    assert "project_id" in err.value.hint and "id=" in err.value.hint
    assert pymem.Memory(db=db, agent_id="bot").retrieve(tier="project") == []  # reads match nothing


# -- exporting a user who does not exist ----------------------------------------------------

def test_exporting_a_user_with_no_memory_is_not_found(db, dsn, tmp_path):
    mem = pymem.Memory(db=db, agent_id="bot", project_id="acme")
    mem.record("hello", "hi", user="carol")  # a conversation and no facts still exports
    assert export_user(db, "carol", "acme")["threads"][0]["messages"][0]["content"] == "hello"
    with pytest.raises(pymem.NotFoundError, match=r"no user 'carol' in project ''") as err:
        export_user(db, "carol")  # right user, wrong project
    assert err.value.sqlstate == "P0002"
    with psycopg.connect(dsn) as c, pytest.raises(psycopg.errors.NoDataFound):
        c.execute("SELECT pymem.user_export(user_id => 'nobody', project_id => 'acme')")
    cli = run("export", "--user", "carol", env={"PYMEM_DSN": dsn}, cwd=tmp_path)
    assert cli.returncode == 1 and cli.stdout == ""
    # one line saying where (issue 29: which database a command acts on), one line for the error
    where, error = cli.stderr.splitlines()
    assert where.startswith("pymem: exporting from database ") and "no user 'carol' in project ''" in error
    assert "--project" in cli.stderr and "P0002" in cli.stderr
    ok = run("export", "--user", "carol", "--project", "acme", env={"PYMEM_DSN": dsn}, cwd=tmp_path)
    assert ok.returncode == 0 and json.loads(ok.stdout)["user_id"] == "carol"


# -- the demo names its project; Ctrl-C -----------------------------------------------------

def interrupt_while_blocked(args: list[str], env: dict, lock_dsn: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``pymem *args`` while this test holds pymem's migration lock on ``lock_dsn``; once
    the command's migrate waits on that lock (seen by the server), press Ctrl-C: SIGINT to the
    command's whole process group, as a terminal does.

    Robust under load (issue 59, item 8): the command is given ``--lock-timeout 3600``, so it
    cannot give up on the lock (its default is 60 s) before a starved test process has seen it
    wait and pressed Ctrl-C; the wait for it ends as soon as it waits, or with its own output
    when it exits first, never on a fixed sleep; and the machine's load only makes it slower."""
    with psycopg.connect(lock_dsn, autocommit=True) as holder:
        holder.execute(Q["migration_lock"])
        proc = subprocess.Popen([str(PYMEM), *args, "--lock-timeout", "3600"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=cwd, env={**os.environ, **env},
                                start_new_session=True)
        try:
            wait_until_blocked(proc, lock_dsn, holder.info.backend_pid, timeout=600)
            os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:  # never let it migrate once the lock is released
                proc.kill()
                proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_until_blocked(proc: subprocess.Popen, dsn: str, holder: int, timeout: float) -> None:
    """Until a backend of ``dsn``'s database waits on a lock of ``holder`` (pg_blocking_pids), or
    fail with the command's output if it exits first (a command that failed to start must not
    read as a lock that never came)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as c:
        while not c.execute("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                            "AND %s = ANY (pg_blocking_pids(pid)))", (holder,)).fetchone()[0]:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"pymem exited ({proc.returncode}) before it waited on the lock:\n{out}\n{err}")
            if time.monotonic() > deadline:
                pytest.fail(f"pymem did not wait on the migration lock within {timeout:g} s")
            time.sleep(0.05)


def test_ctrl_c_in_a_command_exits_130_with_one_line(empty_dsn, tmp_path):
    done = interrupt_while_blocked(["migrate"], {"PYMEM_DSN": empty_dsn}, empty_dsn, tmp_path)
    assert done.returncode == 130
    where, stopped = done.stderr.splitlines()  # where it migrates (issue 29), then one line
    assert where.startswith("pymem: migrating database ") and stopped == "pymem: interrupted"
    with psycopg.connect(empty_dsn) as c:  # the interrupted migrate left nothing behind
        assert c.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'pymem'").fetchone()[0] == 0


def test_demo_names_its_project_and_ctrl_c_in_it_exits_130(tmp_path, pg_server):
    # not under tmp_path: a pytest session starting meanwhile (as root) closes /tmp/pytest-of-root
    # to other users again, and the embedded server's OS user could no longer reach its data
    data = Path(tempfile.mkdtemp(prefix="pymem-demo-"))
    env = {"PYMEM_DATA_DIR": str(data)}
    try:
        demo = run("demo", env=env, cwd=tmp_path)
        assert demo.returncode == 0, demo.stderr
        assert "project 'pymem-demo'" in demo.stdout
        assert demo.stdout.splitlines()[-1] == "  pymem serve --project pymem-demo"  # the last line: the page
        # the command the demo prints finds what it stored
        (export_line,) = [line.strip() for line in demo.stdout.splitlines() if line.strip().startswith("pymem export")]
        assert export_line == "pymem export --project pymem-demo --user alice@example.com"
        exported = run(*export_line.split()[1:], env=env, cwd=tmp_path)
        assert exported.returncode == 0, exported.stderr
        assert any("allergic to peanuts" in f["content"] for f in json.loads(exported.stdout)["facts"])
        # so does the psql query it prints (run here through psycopg)
        (sql,) = re.findall(r'-c "(SELECT pymem\.user_export\(.*\))"', demo.stdout)
        uri = server.status(data).uri
        with psycopg.connect(uri) as c:
            assert c.execute(sql).fetchone()[0]["user_id"] == "alice@example.com"
        # Ctrl-C while the demo waits (here: on the migration lock): one line, exit 130
        stopped = interrupt_while_blocked(["demo"], env, uri, tmp_path)
        assert stopped.returncode == 130, stopped.stderr
        assert stopped.stderr == "pymem: interrupted\n" and "Traceback" not in stopped.stderr
        assert server.status(data) is not None  # the embedded server is unharmed
    finally:
        server.stop(data)
        shutil.rmtree(data, ignore_errors=True)
