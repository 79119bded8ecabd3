"""Settings, the pool (types, timeouts, prepare threshold), and error translation."""

from __future__ import annotations

import asyncio

import psycopg
import os

import pytest

import pymem
from pymem import migrations
from pymem.errors import translate


def test_settings_read_pymem_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PYMEM_DSN", "postgresql://u@h/db")
    monkeypatch.setenv("PYMEM_POOL_MAX_SIZE", "7")
    monkeypatch.setenv("PYMEM_STATEMENT_TIMEOUT_MS", "1500")
    monkeypatch.setenv("PYMEM_PREPARE_THRESHOLD", "none")
    monkeypatch.setenv("PYMEM_DATA_DIR", str(tmp_path))
    s = pymem.Settings()
    assert (s.dsn, s.pool_max_size, s.statement_timeout_ms, s.prepare_threshold, s.data_dir) == (
        "postgresql://u@h/db",
        7,
        1500,
        None,
        tmp_path,
    )


def test_settings_defaults_and_validation(monkeypatch):
    s = pymem.Settings()
    # prepared from the fifth execution on (psycopg's default); PgBouncer 1.21+ keeps them (README)
    assert s.dsn is None and s.prepare_threshold == 5 and s.pool_min_size <= s.pool_max_size
    assert pymem.Settings(dsn="   ").dsn is None  # blank means "embedded"
    with pytest.raises(ValueError, match="pool_min_size"):
        pymem.Settings(pool_min_size=5, pool_max_size=2)
    with pytest.raises(ValueError):
        pymem.Settings(pool_max_size=0)
    with pytest.raises(ValueError):
        pymem.Settings(no_such_setting=1)


def test_bad_dsn_is_a_config_error():
    with pytest.raises(pymem.ConfigError):
        pymem.Database(pymem.Settings(dsn="this is = not a dsn ="))


def test_pool_registers_vector_and_applies_settings(dsn):
    settings = pymem.Settings(dsn=dsn, prepare_threshold=3, pool_min_size=1)
    with pymem.Database(settings) as db:
        with db.connection() as c:
            vec, app = c.execute("SELECT '[1,2,3]'::vector, current_setting('application_name')").fetchone()
            assert vec.to_list() == [1.0, 2.0, 3.0]
            assert app == "pymem"
            assert c.prepare_threshold == 3
        assert db.about()["last_migration"] == migrations.load_sql_files().migrations[-1].name
    # the statement timeout is a startup option of the pool's connections only (tests/python/test_connection.py)
    assert "options" not in pymem.connection.connect_kwargs(settings, dsn)
    assert pymem.connection.timeout_kwargs(settings, dsn) == {"options": "-c statement_timeout=30000"}
    # a connection attempt gives up after the pool timeout, unless the DSN says otherwise
    assert pymem.connection.connect_kwargs(settings, dsn)["connect_timeout"] == 30
    assert "connect_timeout" not in pymem.connection.connect_kwargs(settings, f"{dsn} connect_timeout=5")


def test_pool_reads_json_as_json_loads_does(dsn):
    """pymem's connections skip parsing '{}' (most metadata): the values are json.loads's, and
    each empty object is a dict of its own (a shared one would carry one row's edits to the next)."""
    query = ("""SELECT '{}'::jsonb, '{}'::json, '{"a": [1, "\u00e9", null]}'::jsonb, '[]'::jsonb, 'null'::jsonb,"""
             """ '"x"'::json, NULL::jsonb""")
    with pymem.Database(pymem.Settings(dsn=dsn)) as db, db.connection() as c:
        for binary in (False, True):
            row = c.cursor(binary=binary).execute(query).fetchone()
            assert row == ({}, {}, {"a": [1, "\u00e9", None]}, [], None, "x", None)
            row[0]["k"] = 1
            assert row[1] == {} and c.execute("SELECT '{}'::jsonb").fetchone()[0] == {}


def test_async_twin(dsn):
    async def main():
        async with await pymem.AsyncDatabase.open(pymem.Settings(dsn=dsn)) as db:
            about = await db.about()
            async with db.connection() as c:
                cur = await c.execute("SELECT '[4,5]'::vector")
                vec = (await cur.fetchone())[0]
            return about, vec

    about, vec = asyncio.run(main())
    assert about["vector_version"].startswith("0.")
    assert vec.to_list() == [4.0, 5.0]


@pytest.mark.parametrize(
    ("statement", "cls", "sqlstate"),
    [
        ("SELECT 1/0", pymem.ValidationError, "22012"),
        ("SELECT '[1,2]'::vector(3)", pymem.ValidationError, "22000"),
        ("SELECT pymem.no_such_function()", pymem.MigrationError, "42883"),
        ("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = 'PM002'; END $$", pymem.MigrationError, "PM002"),
        ("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = 'P0002'; END $$", pymem.NotFoundError, "P0002"),
        ("CREATE TEMP TABLE t (a int UNIQUE); INSERT INTO t VALUES (1), (1)", pymem.ConflictError, "23505"),
        ("SELEC 1", pymem.QueryError, "42601"),
    ],
)
def test_database_errors_map_to_pymem_errors(conn, statement, cls, sqlstate):
    with pytest.raises(psycopg.Error) as raw:
        conn.execute(statement)
    err = translate(raw.value)
    assert type(err) is cls and err.sqlstate == sqlstate
    assert isinstance(err, pymem.Error)


def test_unique_violation_carries_constraint_name(conn):
    conn.execute("CREATE TEMP TABLE t (a int CONSTRAINT t_a_key UNIQUE)")
    conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(pymem.ConflictError) as err, pymem.connection.errors():
        conn.execute("INSERT INTO t VALUES (1)")
    assert err.value.constraint == "t_a_key"


def test_unreachable_server_is_a_connection_error(tmp_path):
    with pytest.raises(pymem.ConnectionError):
        pymem.connect(f"host={tmp_path} dbname=nothing connect_timeout=2")


def test_non_superuser_role_can_use_the_schema(dsn, as_role):
    role = as_role("pymem_app_test")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_reader TO pymem_app_test")  # the documented DBA step
    with pymem.Database(pymem.Settings(dsn=role)) as db, db.connection() as c:
        assert c.execute("SELECT current_user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)").fetchone() == (
            "pymem_app_test",
            False,
        )
        assert db.about()["migrations"] == len(migrations.load_sql_files().migrations)


def test_a_mistyped_variable_is_named_with_the_setting_it_resembles(monkeypatch, caplog):
    """Issue 29, item 5: PYMEM_DNS (for PYMEM_DSN) is not ignored in silence; issue 59, item 4:
    in one line on the pymem logger, not a Python warning with its file and source line."""
    import logging
    import warnings

    import pymem.settings as settings_module

    monkeypatch.setattr(settings_module, "_warned", set())
    monkeypatch.setenv("PYMEM_DNS", "postgresql://app@db/prod")
    monkeypatch.setenv("PYMEM_TEST_SOMETHING", "1")  # the test suite's own variables are no settings
    with caplog.at_level(logging.WARNING, logger="pymem"), warnings.catch_warnings():
        warnings.simplefilter("error")
        s = pymem.Settings()
        pymem.Settings()  # once per process, not on every Settings()
    assert s.dsn is None
    assert [r.getMessage() for r in caplog.records] == [
        "PYMEM_DNS is not a pymem setting and is ignored (did you mean PYMEM_DSN?)"]


def test_the_cli_refuses_a_mistyped_setting_in_one_line():
    """Issue 59, item 4: `PYMEM_DNS=... pymem migrate --check` must not check the embedded server
    and pass: it exits 1 with one line; a variable like no setting is only warned of."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYMEM_DSN"} | {"PYMEM_DNS": "postgresql://app@db/prod"}
    out = subprocess.run([sys.executable, "-m", "pymem.cli", "migrate", "--check"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == ["pymem: ConfigError: PYMEM_DNS is not a pymem setting (did you mean "
                                       "PYMEM_DSN?): rename or unset it"]
    assert "prod" not in out.stderr


def test_the_commands_say_which_database_they_act_on(monkeypatch):
    from pymem.connection import describe_target

    s = pymem.Settings(dsn="host=db.example.com port=6432 dbname=app user=svc password=hunter2")
    assert describe_target(s) == 'database "app" on db.example.com:6432 as "svc"'
    assert "hunter2" not in describe_target(s)
    assert describe_target(pymem.Settings(dsn="postgresql://svc:hunter2@db/prod")) == 'database "prod" on db:5432 as "svc"'
    assert describe_target(pymem.Settings(data_dir="/tmp/x")).startswith("the embedded server in /tmp/x")
