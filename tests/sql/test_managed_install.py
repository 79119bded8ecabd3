"""Installing where the deploy user is not a superuser (a managed PostgreSQL): a role with
CREATEROLE that owns (or may CREATE in) the database, pgvector created by an administrator.
Both the Python migrate and psql's migrate.sql, then the installed schema used as the app role;
clear errors (PM010) for a role that lacks what a migrate needs; and `migrate --check` that
verifies the API refresh, ownership and grants, so a half-installed schema is never "current".

Roles are cluster-wide: each test here creates its own deploy user and pymem roles under
names of its own (the configured-names path) and removes them."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pymem
from pymem import server
from pymem.queries import sql_root

from conftest import blocks
PYMEM = Path(sys.executable).parent / "pymem"
_n = itertools.count()


@dataclass
class Managed:
    db: str
    deployer: str
    dsn: str  # the deploy user's
    admin_dsn: str  # a superuser's, in the same database
    roles: dict[str, str]  # owner_role / app_role / reader_role -> name

    def pgoptions(self) -> str:
        return " ".join(f"-c pymem.{k}={v}" for k, v in self.roles.items())


def _psql(dsn: str, *args: str, env: dict | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(server.bin_dir() / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", dsn, *args],
                          capture_output=True, text=True, timeout=180, input=input, env={**os.environ, **(env or {})})


def _drop(admin: psycopg.Connection, db: str, roles: list[str]) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    for role in roles:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def managed(pg_server, admin):
    """A managed service's setup: `CREATE ROLE deployer LOGIN CREATEROLE; CREATE DATABASE appdb
    OWNER deployer;` and `CREATE EXTENSION vector` by the administrator. make(owns_db=False)
    grants CREATE on the database instead of ownership; make(createrole=False) has the
    administrator create the pymem roles, and the deploy user may not grant them."""
    made: list[tuple[str, list[str]]] = []

    def make(*, owns_db: bool = True, createrole: bool = True) -> Managed:
        i = next(_n)
        db, deployer = f"pymem_managed{i}", f"pymem_deployer{i}"
        roles = {"owner_role": f"mi{i}_owner", "app_role": f"mi{i}_app", "reader_role": f"mi{i}_reader"}
        made.append((db, [f"mi{i}_app_login", *roles.values(), deployer]))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN {}").format(
            sql.Identifier(deployer), sql.SQL("CREATEROLE" if createrole else "")))
        if owns_db:
            admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(db), sql.Identifier(deployer)))
        else:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
            admin.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(db), sql.Identifier(deployer)))
        if not createrole:
            for role in roles.values():
                admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        admin_dsn = make_conninfo(pg_server.uri, dbname=db)
        with psycopg.connect(admin_dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")
        return Managed(db, deployer, make_conninfo(admin_dsn, user=deployer), admin_dsn, roles)

    yield make
    for db, roles in made:
        _drop(admin, db, roles)


def _readme_removal_block() -> str:
    """docs/cli-and-configuration.md "Requirements and compatibility": the removal statements."""
    (block,) = [b for b in blocks("sql", "Requirements and compatibility") if "DROP ROLE" in b]
    return block


def _grant(role: str, member: str, dsn: str) -> str:
    """The statement a PM010 hint names to make ``member`` a migrator of ``role``'s schema."""
    with psycopg.connect(dsn) as c:
        pg16 = c.info.server_version >= 160000
    return f"GRANT {role} TO {member}" + (" WITH SET TRUE, INHERIT TRUE;" if pg16 else ";")


def _owners(dsn: str) -> set[str]:
    """Every role owning something of schema pymem (schema, tables, types, functions)."""
    with psycopg.connect(dsn) as c:
        return {r[0] for r in c.execute("SELECT DISTINCT owner::regrole::text FROM pymem._grants_catalog()")}


@pytest.mark.parametrize("path,owns_db", [("python", True), ("psql", True), ("python", False)],
                         ids=["python-db-owner", "psql-db-owner", "python-create-on-db"])
def test_a_createrole_deploy_user_installs_and_the_app_role_uses_it(managed, path, owns_db, dsn, catalog):
    m = managed(owns_db=owns_db)
    with psycopg.connect(m.dsn) as c:  # the deploy user is exactly that kind of role
        assert c.execute("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone() == (
            False, True)
    if path == "python":
        result = pymem.migrate(m.dsn, roles=m.roles)
        assert "0001_foundation" in result.applied and result.api_files
    else:
        out = _psql(m.dsn, "-f", str(sql_root() / "migrate.sql"), env={"PGOPTIONS": m.pgoptions()})
        assert out.returncode == 0, out.stderr
    assert pymem.check_migrations(m.dsn) == []
    # the owner hand-over happened: the owner role owns everything, the deploy user nothing
    assert _owners(m.admin_dsn) == {m.roles["owner_role"]}
    with psycopg.connect(m.admin_dsn) as c:
        # the deploy user may become the owner role and has its privileges (it granted them to itself)
        can = "SET" if c.info.server_version >= 160000 else "MEMBER"
        grant = c.execute(f"SELECT pg_has_role(%s, %s, '{can}'), pg_has_role(%s, %s, 'USAGE')",
                          (m.deployer, m.roles["owner_role"]) * 2).fetchone()
        owned = c.execute("SELECT count(*) FROM pg_shdepend WHERE refobjid = to_regrole(%s) AND deptype = 'o' "
                          "AND classid <> 'pg_database'::regclass", (m.deployer,)).fetchone()[0]
    assert grant == (True, True) and owned == 0
    # the same schema, privileges included, as a superuser's install (the template), names aside
    names = {v: f"pymem_{k.split('_')[0]}" for k, v in m.roles.items()}
    ours = re.sub("|".join(names), lambda x: names[x.group(0)], repr(catalog(m.dsn)))
    assert ours == repr(catalog(dsn))
    # a second migrate as the deploy user (it replaces the owner's functions: owner's privileges)
    assert pymem.migrate(m.dsn, roles=m.roles).applied == []
    assert pymem.check_migrations(m.dsn) == []

    # the app: a login role the deploy user creates and grants the app role to
    login = m.roles["app_role"] + "_login"
    with psycopg.connect(m.dsn, autocommit=True) as c:
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(login)))
        c.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(m.roles["app_role"]), sql.Identifier(login)))
    with psycopg.connect(make_conninfo(m.dsn, user=login), autocommit=True) as c:
        fact_id, created = c.execute(
            "SELECT id, created FROM pymem.fact_add(scope => 'user', scope_id => 'alice', content => 'Prefers tea')"
        ).fetchone()
        assert created
        rows = c.execute("SELECT id, content FROM pymem.facts_newest(scope => 'user', scope_id => 'alice')").fetchall()
        assert rows == [(fact_id, "Prefers tea")]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT count(*) FROM pymem.facts")  # the app role has no table privileges
    with pymem.Database(pymem.Settings(dsn=make_conninfo(m.dsn, user=login))) as db:  # and through Python
        assert db.about()["vector_schema"] == "public"

    # the documented removal statements, as the deploy user, leave no pymem role behind
    removal = _readme_removal_block()
    for key, name in m.roles.items():
        removal = removal.replace(f"pymem_{key.split('_')[0]}", name)
    out = _psql(m.dsn, "-c", f"DROP ROLE {login}", "-f", "-", input=removal)
    assert out.returncode == 0, out.stderr
    with psycopg.connect(m.admin_dsn) as c:
        left = c.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY (%s)", (list(m.roles.values()),)).fetchall()
        assert left == [] and c.execute("SELECT to_regnamespace('pymem')").fetchone()[0] is None


def test_a_role_without_create_on_the_database_is_told_the_grant(managed):
    m = managed()
    stranger = m.roles["app_role"] + "_login"  # cleaned up with the fixture's roles
    with psycopg.connect(m.admin_dsn, autocommit=True) as c:
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(stranger)))
    role_dsn = make_conninfo(m.dsn, user=stranger)
    with pytest.raises(pymem.MigrationError) as err:
        pymem.migrate(role_dsn)
    assert err.value.sqlstate == "PM010"
    assert f"GRANT CREATE ON DATABASE {m.db} TO {stranger};" in str(err.value)
    out = _psql(role_dsn, "-f", str(sql_root() / "migrate.sql"))
    assert out.returncode != 0 and f"GRANT CREATE ON DATABASE {m.db} TO {stranger};" in out.stderr
    with psycopg.connect(m.admin_dsn) as c:
        assert c.execute("SELECT to_regnamespace('pymem')").fetchone()[0] is None  # nothing half-made

    # installed by the deploy user, the schema is not the stranger's to migrate either: told the GRANT
    pymem.migrate(m.dsn, roles=m.roles)
    with pytest.raises(pymem.MigrationError) as err:
        pymem.migrate(role_dsn)
    assert err.value.sqlstate == "PM010"
    grant = _grant(m.roles["owner_role"], stranger, m.dsn)
    assert grant in str(err.value)
    with psycopg.connect(m.admin_dsn, autocommit=True) as c:  # that statement is the one needed
        c.execute(grant)
    assert pymem.migrate(role_dsn).applied == []


def test_a_failed_grants_step_is_not_current_until_fixed(managed, tmp_path):
    """The administrator created the roles, and the deploy user (no CREATEROLE) may not grant
    the owner role to itself: the migrations apply, the API refresh (functions, ownership,
    grants) fails with PM010 naming the GRANT, and `--check` says the schema is not current
    (exit 3) until the administrator runs it and the deploy user migrates again."""
    m = managed(createrole=False)
    with pytest.raises(pymem.MigrationError) as err:
        pymem.migrate(m.dsn, roles=m.roles)
    grant = _grant(m.roles["owner_role"], m.deployer, m.dsn)
    assert err.value.sqlstate == "PM010" and grant in str(err.value)
    env = {**os.environ, "PYMEM_DSN": m.admin_dsn}
    check = subprocess.run([str(PYMEM), "migrate", "--check"], capture_output=True, text=True, cwd=tmp_path,
                           env=env, timeout=120)
    assert check.returncode == 3, check.stdout + check.stderr
    assert "api: no migrate has completed the API refresh" in check.stderr
    assert pymem.check_migrations(m.admin_dsn)[0].startswith("api: no migrate has completed")

    with psycopg.connect(m.admin_dsn, autocommit=True) as c:
        c.execute(grant)
    pymem.migrate(m.dsn, roles=m.roles)
    check = subprocess.run([str(PYMEM), "migrate", "--check"], capture_output=True, text=True, cwd=tmp_path,
                           env=env, timeout=120)
    assert check.returncode == 0 and "current" in check.stdout, check.stderr


def test_check_reports_ownership_and_grants_changed_by_hand(dsn, admin):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET search_path = pg_catalog")  # as --check names it: pgvector's type with its schema
        fact_add = c.execute("SELECT 'pymem.fact_add'::regproc::regprocedure::text").fetchone()[0]
        c.execute("CREATE ROLE pymem_by_hand NOLOGIN")
        try:
            c.execute("ALTER TABLE pymem.facts OWNER TO pymem_by_hand")
            c.execute(f"REVOKE EXECUTE ON FUNCTION {fact_add} FROM pymem_app")
            c.execute("GRANT SELECT ON pymem.facts TO pymem_reader")
            c.execute(f"GRANT EXECUTE ON FUNCTION {fact_add} TO pymem_reader")
            assert sorted(pymem.check_migrations(dsn)) == sorted([
                "owner: table pymem.facts owned by pymem_by_hand, not by the owner role pymem_owner "
                "(run: pymem migrate as a role that may hand them over)",
                f"grants: pymem_app lacks EXECUTE on function {fact_add} (run: pymem migrate)",
                f"grants: pymem_reader holds EXECUTE, which pymem does not grant, on function {fact_add} "
                "(run: pymem migrate)",
                "grants: pymem_reader holds SELECT, which pymem does not grant, on table pymem.facts "
                "(run: pymem migrate)",
            ])
            pymem.migrate(dsn)  # puts back exactly what --check reported
            assert pymem.check_migrations(dsn) == []
            c.execute("UPDATE pymem.config SET value = repeat('0', 64) WHERE key = 'api_sha256'")  # another version's
            (problem,) = pymem.check_migrations(dsn)
            assert problem.startswith("api: the API functions and grants were last applied from other files")
        finally:
            c.execute("REASSIGN OWNED BY pymem_by_hand TO pymem_owner")
            c.execute("DROP ROLE pymem_by_hand")
