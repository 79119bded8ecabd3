"""Test harness: one embedded PostgreSQL server per test process (each xdist worker has its
own, in a temporary directory, never the user's data directory), a template database migrated
once, and a database cloned from it for each test (pytest-postgresql's DatabaseJanitor). No
mocks anywhere.

Another server: PYMEM_TEST_PG_BINDIR=/usr/lib/postgresql/15/bin (a PostgreSQL install's bin
directory, pgvector installed into it) makes pg_server initdb and run that PostgreSQL instead,
in a temporary directory of its own (Unix socket only, a free port number; as root, as the OS
user ``postgres``). CI runs the suite this way on PostgreSQL 15 (.ci/pg15).

Fixtures:
  pg_server   the session's server (ServerInfo: uri, socket_dir, port, pgdata)
  admin       a superuser autocommit connection to the maintenance database
  dsn         a fresh migrated database for this test (conninfo string)
  conn        an autocommit pymem connection to ``dsn``
  empty_dsn   a fresh database with nothing installed (for migration tests)
  as_role     as_role(name, dsn=None, superuser=False) -> conninfo of a login role
  catalog     catalog(dsn) -> a snapshot of schema pymem built from pg_catalog
  lock_wait   lock_wait(dsn, blocked_by=pid) -> the pid of a backend that waits on a lock held
              by ``blocked_by`` (pg_blocking_pids), or fails the test after 20 s
  citus_cluster  a Citus coordinator + two workers for the session (.ci/citus; CitusCluster:
              dsn of the coordinator's database ``postgres``, dir), for tests marked ``citus``;
              citus_third_worker starts one more worker server (its port) for the rebalancing test.
              Those tests run only with PYMEM_TEST_CITUS=1 and the script's prerequisites
              (citus_unavailable() names what is missing); otherwise they are skipped, with the
              reason in pytest's summary.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

# Before pymem reads any setting: tests never touch a user's data directory or DSN.
_SCRATCH = Path(tempfile.mkdtemp(prefix="pymem-tests-"))
# each process has its own (an xdist worker its servers; the controller none): gone at its exit
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
os.environ["PYMEM_DATA_DIR"] = str(_SCRATCH / "default-data")
os.environ.pop("PYMEM_DSN", None)
PG_BINDIR = os.environ.get("PYMEM_TEST_PG_BINDIR") or None  # None: the embedded server

import psycopg  # noqa: E402
import pytest  # noqa: E402
from psycopg import sql  # noqa: E402
from psycopg.conninfo import make_conninfo  # noqa: E402
from pytest_postgresql.janitor import DatabaseJanitor  # noqa: E402

import pymem  # noqa: E402
from pymem import server  # noqa: E402

TEMPLATE = "pymem_template"
_counter = itertools.count()


def _as_server_user() -> dict:
    """subprocess.run arguments that run a PostgreSQL program as a non-root OS user: initdb and
    postgres refuse root. Not root: as ourselves."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("PYMEM_TEST_PG_BINDIR as root needs an OS user `postgres` to run the server as "
                           "(initdb refuses root): install the PostgreSQL package or `useradd --system postgres`")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def _start_external(bindir: Path, root: Path) -> server.ServerInfo:
    """initdb + pg_ctl start from ``bindir`` in ``root`` (pgdata/, socket/, log): the same
    initdb options as the embedded server, listening on a Unix socket in ``root`` only."""
    for program in ("initdb", "pg_ctl"):
        if not (bindir / program).is_file():
            raise RuntimeError(f"PYMEM_TEST_PG_BINDIR={bindir} has no {program}: point it at a PostgreSQL bin directory")
    as_user = _as_server_user()
    pgdata, socket_dir, log = root / "pgdata", root / "socket", root / "log"
    root.mkdir(mode=0o755)
    socket_dir.mkdir(mode=0o755)  # other OS users (a pooler) may connect through the socket
    if as_user:
        _SCRATCH.chmod(0o755)  # the server's user must reach its directories
        for path in (root, socket_dir):
            os.chown(path, as_user["user"], as_user["group"])

    def run(*args: str) -> None:
        out = subprocess.run([str(a) for a in args], cwd=root, capture_output=True, text=True, timeout=120, **as_user)
        if out.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(map(str, args))} failed:\n{out.stdout}{out.stderr}{tail}")

    with socket.socket() as s:  # a free port number names the socket file
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run(bindir / "initdb", "-D", pgdata, "-U", "postgres", "--auth=trust", "--encoding=utf8", "--no-sync")
    run(bindir / "pg_ctl", "-D", pgdata, "-l", log, "-w", "-o", f"-h '' -k {socket_dir} -p {port}", "start")
    pid = int((pgdata / "postmaster.pid").read_text().split()[0])
    uri = f"postgresql://postgres@/postgres?host={urllib.parse.quote(str(socket_dir), safe='/')}&port={port}"
    return server.ServerInfo(pgdata, pid, uri, socket_dir, port)


@pytest.fixture(scope="session")
def pg_server():
    data_dir = _SCRATCH / "server"
    if PG_BINDIR:
        info = _start_external(Path(PG_BINDIR), data_dir)
    else:
        info = server.start(data_dir)
    try:
        with psycopg.connect(info.uri, autocommit=True) as c:
            if PG_BINDIR and not c.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
                raise RuntimeError(f"pgvector is not installed into the PostgreSQL of {PG_BINDIR}: build it "
                                   "with that pg_config (.ci/pg15 does it for Debian's PostgreSQL 15)")
            # Test-only durability trade: nothing here must survive a crash of the test machine.
            for setting in ("fsync = off", "synchronous_commit = off", "full_page_writes = off"):
                c.execute(f"ALTER SYSTEM SET {setting}")
            c.execute("SELECT pg_reload_conf()")
        yield info
    finally:
        if PG_BINDIR:
            subprocess.run([str(Path(PG_BINDIR) / "pg_ctl"), "-D", str(info.pgdata), "-m", "fast", "-w", "stop"],
                           cwd=data_dir, capture_output=True, **_as_server_user())
        else:
            server.stop(data_dir)
        server.stop(_SCRATCH / "default-data")  # if a CLI test started the default one
        shutil.rmtree(_SCRATCH, ignore_errors=True)


def _janitor(info: server.ServerInfo, dbname: str, **kw) -> DatabaseJanitor:
    return DatabaseJanitor(
        user="postgres", host=str(info.socket_dir), port=info.port or 5432, dbname=dbname, password=None, **kw
    )


def dsn_for(info: server.ServerInfo, dbname: str, **params) -> str:
    return make_conninfo(info.uri, dbname=dbname, **params)


@pytest.fixture(scope="session")
def template_db(pg_server):
    janitor = _janitor(pg_server, TEMPLATE, as_template=True)
    janitor.drop()
    janitor.init()
    pymem.migrate(dsn_for(pg_server, TEMPLATE))
    yield TEMPLATE
    janitor.drop()


@pytest.fixture
def admin(pg_server):
    with psycopg.connect(pg_server.uri, autocommit=True) as c:
        yield c


@pytest.fixture
def dsn(pg_server, template_db):
    name = f"pymem_t{next(_counter)}"
    janitor = _janitor(pg_server, name, template_dbname=template_db)
    janitor.init()
    yield dsn_for(pg_server, name)
    janitor.drop()


@pytest.fixture
def empty_dsn(pg_server):
    name = f"pymem_e{next(_counter)}"
    janitor = _janitor(pg_server, name)
    janitor.init()
    yield dsn_for(pg_server, name)
    janitor.drop()


@pytest.fixture
def conn(dsn):
    with pymem.connect(dsn) as c:
        yield c


@pytest.fixture
def as_role(pg_server, dsn):
    """as_role(name) -> conninfo for ``dsn`` as login role ``name`` (created if missing)."""

    def make(name: str, *, on: str | None = None, superuser: bool = False, createdb: bool = False) -> str:
        with psycopg.connect(pg_server.uri, autocommit=True) as c:
            exists = c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
            if not exists:
                c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
            c.execute(
                sql.SQL("ALTER ROLE {} {} {}").format(
                    sql.Identifier(name),
                    sql.SQL("SUPERUSER" if superuser else "NOSUPERUSER"),
                    sql.SQL("CREATEDB" if createdb else "NOCREATEDB"),
                )
            )
        return make_conninfo(on or dsn, user=name)

    return make


CATALOG_QUERIES = {
    "schemas": """
        SELECT n.nspname, pg_temp.acl(n.nspacl), obj_description(n.oid, 'pg_namespace')
        FROM pg_namespace n WHERE n.nspname = 'pymem'""",
    "relations": """
        SELECT c.relname, c.relkind, pg_temp.acl(c.relacl), c.reloptions::text, c.relrowsecurity,
               obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pymem'""",
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, pg_temp.acl(a.attacl)
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'pymem' AND a.attnum > 0 AND NOT a.attisdropped""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(k.oid)
        FROM pg_constraint k JOIN pg_namespace n ON n.oid = k.connamespace WHERE n.nspname = 'pymem'""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'pymem'""",
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), pg_temp.acl(p.proacl),
               obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'pymem'""",
    "triggers": """
        SELECT t.tgrelid::regclass::text, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pymem' AND NOT t.tgisinternal""",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check
        FROM pg_policies WHERE schemaname = 'pymem'""",
    "types": """
        SELECT t.typname, t.typtype FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'pymem' AND t.typtype <> 'c' AND t.typelem = 0""",
    "extensions": """
        SELECT e.extname, n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace""",
}


def catalog_snapshot(dsn: str) -> dict[str, list[tuple]]:
    """Schema pymem as pg_catalog sees it, free of OIDs, sorted: equal snapshots = equal schemas.
    Access lists compare as sets of grants (their order records only the order of GRANTs)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE FUNCTION pg_temp.acl(aclitem[]) RETURNS text LANGUAGE sql IMMUTABLE AS "
                  "$$SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest($1) AS a$$")
        return {k: sorted(c.execute(q).fetchall(), key=repr) for k, q in CATALOG_QUERIES.items()}


@pytest.fixture
def catalog():
    return catalog_snapshot


class PlanLog:
    """auto_explain on one connection: the plan of every statement it runs from now on, nested
    statements inside functions (and foreign-key checks) included, as PostgreSQL really ran them;
    sent to the client as notices and collected here. ``plans`` parses them (EXPLAIN JSON)."""

    def __init__(self, conn: psycopg.Connection, analyze: bool = True):
        self._notes: list[str] = []
        conn.execute("LOAD 'auto_explain'")
        for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_format = json",
                        f"log_analyze = {'on' if analyze else 'off'}", "log_level = notice"):
            conn.execute(f"SET auto_explain.{setting}")
        conn.add_notice_handler(lambda d: self._notes.append(d.message_primary or ""))

    @property
    def plans(self) -> list[dict]:
        return [json.loads(n.split("plan:", 1)[1]) for n in self._notes if "plan:" in n]


def plan_nodes(plan: dict):
    """A plan's node (EXPLAIN JSON's "Plan") and every node below it."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def wait_for_lock(dsn: str, *, blocked_by: int, timeout: float = 20.0) -> int:
    """The pid of a backend of ``dsn``'s database that waits on a lock ``blocked_by`` holds, as
    the server reports it (pg_blocking_pids): an interleaving is proven by the lock wait itself,
    never by a thread that merely has not finished yet. Fails the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as c:
        while True:
            row = c.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND %s = ANY (pg_blocking_pids(pid))", (blocked_by,)).fetchone()
            if row:
                return row[0]
            if time.monotonic() > deadline:
                pytest.fail(f"no backend waited on a lock of pid {blocked_by} within {timeout:g} s")
            time.sleep(0.02)


@pytest.fixture
def lock_wait():
    return wait_for_lock


CITUS_SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "citus"
CITUS_ARCHIVE = "citus-14.0.1.tar.gz"
CITUS_PATCH = "citus-14.0.1-local-plan-cache.patch"  # .ci/citus applies it (the local plan cache fix)


def citus_unavailable() -> str | None:
    """Why the ``citus`` tests cannot run here, or None. They need PYMEM_TEST_CITUS=1 (building
    Citus costs minutes the first time) and what .ci/citus needs: the Citus source archive and
    its local-plan-cache patch in the shared vendor folder, gcc, make and patch (and, as root, a non-root OS user, which the script
    itself checks)."""
    if os.environ.get("PYMEM_TEST_CITUS") != "1":
        return "Citus cluster tests run only with PYMEM_TEST_CITUS=1 (.ci/citus builds Citus once, outside the repository)"
    if not CITUS_SCRIPT.is_file():
        return f"{CITUS_SCRIPT} is missing (a source distribution without .ci/)"
    vendor = [os.environ.get("PYMEM_VENDOR_DIR"), str(CITUS_SCRIPT.parent.parent.parent / "shared" / "vendor"),
              "/work/shared/vendor"]
    for name in (CITUS_ARCHIVE, CITUS_PATCH):
        if not any(d and (Path(d) / name).is_file() for d in vendor):
            return f"{name} not found in $PYMEM_VENDOR_DIR, ../shared/vendor or /work/shared/vendor"
    missing = [tool for tool in ("gcc", "make", "patch") if shutil.which(tool) is None]
    if missing:
        return f"building Citus needs {' and '.join(missing)}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if item.get_closest_marker("citus") is not None:
            reason = reason or citus_unavailable() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@dataclass(frozen=True)
class CitusCluster:
    dsn: str  # the coordinator's database postgres, as the superuser postgres (TCP, loopback)
    dir: Path
    port: int  # the coordinator's
    worker_ports: tuple[int, ...]

    @property
    def worker_dsns(self) -> list[str]:
        return [make_conninfo(self.dsn, port=str(p)) for p in self.worker_ports]


@pytest.fixture(scope="session")
def citus_cluster():
    """A coordinator and two workers for the session (.ci/citus start; stopped and removed at
    the end). The first run builds Citus into the cache (minutes); later runs take seconds."""
    cluster_dir = _SCRATCH / "citus"
    env = {**os.environ, "PYTHON": sys.executable}
    if os.geteuid() == 0:
        _SCRATCH.chmod(0o755)  # the servers' OS user must reach their directory
    try:
        out = subprocess.run([str(CITUS_SCRIPT), "start", str(cluster_dir)], capture_output=True, text=True,
                             env=env, timeout=3600)
        if out.returncode != 0:
            raise RuntimeError(f".ci/citus start failed:\n{out.stdout}{out.stderr}")
        env_file = dict(line.split("=", 1) for line in (cluster_dir / "cluster.env").read_text().splitlines())
        yield CitusCluster(out.stdout.strip().splitlines()[-1], cluster_dir, int(env_file["COORDINATOR_PORT"]),
                           tuple(int(p) for p in env_file["WORKER_PORTS"].strip('"').split()))
    finally:
        subprocess.run([str(CITUS_SCRIPT), "stop", str(cluster_dir)], capture_output=True, env=env, timeout=120)



@pytest.fixture(scope="session")
def citus_third_worker(citus_cluster) -> int:
    """One more worker server in the session's cluster (.ci/citus add-worker), registered
    nowhere: a test creates its database there and adds it with citus_add_node (the rebalancing
    test). Stopped with the cluster. Its port."""
    env = {**os.environ, "PYTHON": sys.executable}
    out = subprocess.run([str(CITUS_SCRIPT), "add-worker", str(citus_cluster.dir)], capture_output=True,
                         text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f".ci/citus add-worker failed:\n{out.stdout}{out.stderr}")
    return int(out.stdout.strip().splitlines()[-1])

# --- the documentation's code blocks (python/test_readme.py runs them, security/test_function_safety.py
# calls them as a caller would) ------------------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"
DOCS = README.parent / "docs"


def doc_pages() -> list[Path]:
    """README.md and every page of docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def section(title: str) -> str:
    """The section ``## title`` of README.md or of the docs/ page that has it, up to the next ``## ``."""
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        start = text.find(f"\n## {title}\n")
        if start != -1:
            end = text.find("\n## ", start + 1)
            return text[start : end if end != -1 else None]
    raise KeyError(f"no section ## {title} in README.md or docs/")


def blocks(lang: str, title: str = "SQL API") -> list[str]:
    """The ```lang code blocks of the section ``title``, in order."""
    return re.findall(rf"```{lang}\n(.*?)```", section(title), re.DOTALL)
