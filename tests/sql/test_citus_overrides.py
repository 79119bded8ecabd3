"""The Citus layer checked without a cluster (issue 31, item 4): every function sql/citus.sql
replaces keeps the signature of the plain body it replaces in sql/api (arguments, result,
volatility, security mode, pinned settings), and the copies of agent and project facts
(shared_*) keep their tables' columns, so that a change to one of the twins that the other does
not follow fails here, on any PostgreSQL, and not only in the optional cluster pass.

How: in a migrated database, inside a transaction that is rolled back, each CREATE OR REPLACE
FUNCTION of citus.sql is run on its own (function bodies are not checked: the Citus bodies call
Citus's functions), then the catalog entries of those names are compared with what the API
files made. CREATE OR REPLACE refuses another result type; other arguments would add a second
function of that name; another volatility, security mode or SET clause would show in the row."""

from __future__ import annotations

import re
from pathlib import Path

import pglast
import psycopg

import pymem

CITUS = Path(__file__).resolve().parents[2] / "sql" / "citus.sql"
SIGNATURES = """SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid),
                       p.provolatile, p.prosecdef, p.proconfig, l.lanname
                  FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
                  JOIN pg_language AS l ON l.oid = p.prolang
                 WHERE n.nspname = 'pymem' AND p.proname = ANY(%s) ORDER BY 1, 2"""


def overrides() -> dict[str, str]:
    """citus.sql's CREATE OR REPLACE FUNCTION statements, by function name."""
    out = {}
    for raw in pglast.split(CITUS.read_text(encoding="utf-8")):
        m = re.match(r"\s*(?:--[^\n]*\n\s*)*CREATE OR REPLACE FUNCTION pymem\.(\w+)\s*\(", raw)
        if m:
            out[m.group(1)] = raw
    return out


def test_every_citus_override_keeps_its_twins_signature(dsn):
    found = overrides()
    assert len(found) >= 8, f"citus.sql's functions not found: {sorted(found)}"
    with psycopg.connect(dsn) as c:
        names = list(found)
        plain = c.execute(SIGNATURES, (names,)).fetchall()
        twins = {row[0] for row in plain}
        new = sorted(set(names) - twins)
        # every override has a plain twin (one that is a no-op off Citus, like _shared_facts_sync,
        # too): a function only citus.sql created would be missing on one server
        assert new == [], f"citus.sql creates functions the API files do not: {new}"
        c.execute("SET LOCAL check_function_bodies = off")
        for name, statement in found.items():
            if name in twins:
                try:
                    c.execute(statement)
                except psycopg.Error as exc:
                    raise AssertionError(f"citus.sql's {name} cannot replace the API's: {exc}") from None
        replaced = c.execute(SIGNATURES, (sorted(twins),)).fetchall()
        c.rollback()
    diff = [(a, b) for a, b in zip(map(comparable, plain), map(comparable, replaced))
            if a != b and not pins_where_the_twin_inlines(a, b)]
    assert len(plain) == len(replaced) and not diff, \
        f"a Citus override differs from its twin in sql/api (plain, Citus): {diff or (plain, replaced)}"


def comparable(row: tuple) -> tuple:
    """A signature row without what a Citus body may add on purpose: its own citus.* settings
    (e.g. citus.allow_nested_distributed_execution) and its language (a PL/pgSQL body where the
    plain one is SQL that inlines, citus.sql's header, point 2)."""
    name, args, result, volatility, definer, config, _language = row
    return name, args, result, volatility, definer, sorted(x for x in config or [] if not x.startswith("citus."))


def test_the_check_catches_a_drifted_override(dsn):
    """The comparison above is not vacuous: an override with another result type is refused, one
    with another argument list shows as a second function."""
    statement = overrides()["_window"]
    with psycopg.connect(dsn) as c:
        c.execute("SET LOCAL check_function_bodies = off")
        before = c.execute(SIGNATURES, (["_window"],)).fetchall()
        c.execute(statement.replace("p_max integer)", "p_max bigint)", 1))
        assert c.execute(SIGNATURES, (["_window"],)).fetchall() != before
        c.rollback()


def pins_where_the_twin_inlines(plain: tuple, citus: tuple) -> bool:
    """The one other difference allowed: a plain twin without SET clauses (current_tenant, which
    must inline into the RLS policies) whose Citus body, PL/pgSQL that never inlines, pins the
    search path the way every other function does: stricter, not another signature."""
    return plain[:5] == citus[:5] and plain[5] == [] and all(x.startswith("search_path=") for x in citus[5])


SHARED = ("facts", "fact_embeddings", "fact_lexemes")


def _columns(c: psycopg.Connection, table: str) -> list[tuple]:
    return c.execute(
        "SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull FROM pg_attribute a "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (f"pymem.{table}",)).fetchall()


def test_the_shared_copies_exist_everywhere_with_their_tables_columns_and_security(dsn):
    """Issue 31, item 4: the reference tables a Citus cluster fills with agent and project facts
    come from a migration on every database (empty here), column for column their table's, with
    row-level security forced and the tenant policy: a migration that changes a table without
    its twin fails this test and `pymem migrate --check`."""
    with psycopg.connect(dsn) as c:
        for table in SHARED:
            assert _columns(c, f"shared_{table}") == _columns(c, table), table
            forced = c.execute("SELECT relrowsecurity AND relforcerowsecurity FROM pg_class WHERE oid = %s::regclass",
                               (f"pymem.shared_{table}",)).fetchone()[0]
            assert forced, table
            policy = c.execute("SELECT qual FROM pg_policies WHERE schemaname = 'pymem' AND tablename = %s "
                               "AND policyname = 'tenant'", (f"shared_{table}",)).fetchone()
            assert policy and "current_tenant()" in policy[0], table
            assert c.execute(f"SELECT count(*) FROM pymem.shared_{table}").fetchone()[0] == 0  # nothing writes them here
    assert pymem.check_migrations(dsn) == []


def test_migrate_check_reports_a_shared_copy_left_behind(dsn):
    """A column added to pymem.facts and not to pymem.shared_facts (what a careless migration
    would do) is a problem `pymem migrate --check` names; adding it to the twin too clears it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER TABLE pymem.facts ADD COLUMN archived_at timestamptz")
        problems = pymem.check_migrations(dsn)
        assert len(problems) == 1 and problems[0].startswith("shared: pymem.shared_facts differs from pymem.facts"), problems
        assert "facts has archived_at timestamp with time zone at" in problems[0], problems
        c.execute("ALTER TABLE pymem.shared_facts ADD COLUMN archived_at timestamptz")
        assert pymem.check_migrations(dsn) == []
        c.execute("ALTER TABLE pymem.shared_fact_lexemes ALTER COLUMN lexemes DROP NOT NULL")
        problems = pymem.check_migrations(dsn)
        assert len(problems) == 1 and "shared_fact_lexemes" in problems[0], problems
