"""The Citus layer checked without a cluster (issues 31, item 4, and 55, item 3): sql/citus.sql
writes no function signature (its second bodies and derived bodies take theirs from the catalog,
what the API files made), its bodies compile and its derivations still match the plain bodies
they edit, its table of overrides matches its statements both ways, and the copies of agent and
project facts (shared_*) keep their tables' columns, so that a change to one of the twins that
the other does not follow fails here, on any PostgreSQL, and not only in the optional cluster
pass. Each is run in a migrated database, in a transaction rolled back (or a cloned database).
"""

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


def _statement(marker: str) -> str:
    """The one statement of citus.sql that holds marker."""
    found = [s for s in pglast.split(CITUS.read_text(encoding="utf-8")) if marker in s]
    assert len(found) == 1, (marker, len(found))
    return found[0]


BODIES = "'pymem._local_shard'::pg_catalog.regproc"  # in the statement of the second bodies only


def test_every_citus_body_compiles_and_keeps_its_twins_signature(dsn):
    """citus.sql's second bodies take their function's signature from the catalog (what the API
    files made), so that they cannot drift from their plain twins; here, on one server, they are
    put in place (in a transaction rolled back): each compiles (PL/pgSQL's syntax, SQL bodies in
    full), and the catalog rows differ from the plain ones in nothing but the language."""
    bodies = _statement(BODIES)
    names = re.findall(r"\('pymem\.(\w+)'::pg_catalog\.regproc, '(?:sql|plpgsql)', \$b\$", bodies)
    assert len(names) >= 8, names
    with psycopg.connect(dsn) as c:
        plain = c.execute(SIGNATURES, (names,)).fetchall()
        assert sorted({row[0] for row in plain}) == sorted(names)
        c.execute(bodies)
        replaced = c.execute(SIGNATURES, (names,)).fetchall()
        src = dict(c.execute("SELECT proname, prosrc FROM pg_proc WHERE pronamespace = 'pymem'::regnamespace "
                             "AND proname = ANY(%s)", (names,)).fetchall())
        c.rollback()
    assert [r[:6] for r in plain] == [r[:6] for r in replaced]
    assert "pymem._local_shard('pymem.fact_lexemes'" in src["_fact_lexemes_add"]  # the Citus body, in place


def test_a_broken_citus_body_fails_on_one_server(dsn):
    """The check above is not vacuous: a body with a syntax error is refused here already."""
    bodies = _statement(BODIES)
    broken = bodies.replace("    SELECT pg_catalog.array_agg", "    SELEC pg_catalog.array_agg", 1)
    assert broken != bodies
    with psycopg.connect(dsn) as c:
        try:
            c.execute(broken)
        except psycopg.errors.SyntaxError:
            pass
        else:
            raise AssertionError("a broken Citus body was accepted")


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


# The table of overrides at the head of citus.sql (issue 55, item 3): one row per function whose
# Citus form differs from its plain one, with how (body, derived, set, copy) and its reasons.
ROW = re.compile(r"^-- \| (\w+(?:, \w+)*) \| ([a-z, ]+) \| (.*?) \| (.*?) \|$", re.M)


def table_and_statements(text: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """What the header table says citus.sql does, and what its statements do, as (function, kind)
    pairs: kind ALTER (a setting), regproc (a second body, a derived body or a copy: the plain
    function named as 'pymem.f'::pg_catalog.regproc in the statement that replaces or copies it) or
    CREATE (own: a function only Citus has, the one kind that writes its signature here). A row
    may name several functions that share how and why."""
    kinds = {"body": "regproc", "set": "ALTER", "derived": "regproc", "copy": "regproc", "own": "CREATE"}
    said = set()
    for names, how, needs, why in ROW.findall(text):
        if names == "function":
            continue
        assert needs.strip() and why.strip(), f"citus.sql's table: {names} gives no reason"
        said |= {(name, kinds[h.strip()]) for name in names.split(", ") for h in how.split(",")}
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    done = ({(n, "ALTER") for n in re.findall(r"^ALTER FUNCTION pymem\.(\w+)", code, re.M)}
            | {(n, "CREATE") for n in re.findall(r"CREATE (?:OR REPLACE )?FUNCTION pymem\.(\w+)", code)}
            | {(n, "regproc") for n in re.findall(r"'pymem\.(\w+)'::pg_catalog\.regproc", code)})
    return said, done


def test_the_table_of_overrides_matches_the_statements_both_ways():
    said, done = table_and_statements(CITUS.read_text(encoding="utf-8"))
    assert len(said) >= 20
    assert said - done == set(), f"in citus.sql's table, not done by a statement: {sorted(said - done)}"
    assert done - said == set(), f"done by citus.sql, not in its table: {sorted(done - said)}"


def test_the_table_check_is_not_vacuous():
    text = CITUS.read_text(encoding="utf-8")
    said, done = table_and_statements(re.sub(r"^-- \| _window \|.*\n", "", text, flags=re.M))
    assert done - said == {("_window", "regproc")}
    said, done = table_and_statements(text + "\nALTER FUNCTION pymem.fact_add SET work_mem = '1MB';\n")
    assert done - said == {("fact_add", "ALTER")}
    said, done = table_and_statements(text + "\nCREATE FUNCTION pymem.fact_add() RETURNS int LANGUAGE sql AS 'SELECT 1';\n")
    assert done - said == {("fact_add", "CREATE")}  # a signature written here needs its own row
    said, done = table_and_statements(re.sub(r"(?m)^(-- \| fact_add), facts_add_many,", r"\1,", text))
    assert done - said == {("facts_add_many", "regproc")}  # a row of several functions is read name by name


def test_what_only_citus_has_is_not_on_one_server(dsn):
    """The functions citus.sql owns (how = own) exist only on a Citus coordinator: a plain migrate
    leaves none of them (nothing plain calls them), and every other function it touches is there."""
    said, _ = table_and_statements(CITUS.read_text(encoding="utf-8"))
    own = sorted(n for n, k in said if k == "CREATE")
    others = sorted({n for n, k in said if k != "CREATE"} - set(own))
    assert own == ["_shared_facts_sync"], own
    with psycopg.connect(dsn) as c:
        there = {r[0] for r in c.execute("SELECT proname FROM pg_proc WHERE pronamespace = 'pymem'::regnamespace").fetchall()}
        plain = "\n".join(r[0] for r in c.execute("SELECT prosrc FROM pg_proc WHERE pronamespace = 'pymem'::regnamespace").fetchall())
    assert not set(own) & there and "_shared_facts_sync" not in plain
    assert set(others) - there == set(), set(others) - there



def test_the_derived_bodies_apply_to_the_plain_ones_and_answer_alike(dsn):
    """The edits of citus.sql's derived bodies still match the plain bodies in sql/api (an edit
    that no longer matches raises), and the bodies they make answer as the plain ones do, here on
    one server: facts_newest reading the table with active_facts' predicates, _window with its
    values written in, _tenant_enter by SET LOCAL, the readers of a reference table's copy (here a
    table standing in for the node's shard) and, where there is none, of the table."""
    derive = _statement("'pymem._tenant_enter'::pg_catalog.regproc")
    copies = _statement("'pymem._embedder_dimension'::pg_catalog.regproc")
    shard = "pg_catalog.shard_name(s.logicalrelid, s.shardid)"
    join = "JOIN pg_catalog.pg_dist_shard AS s ON s.logicalrelid = ('pymem.' || d.t)::pg_catalog.regclass"
    assert shard in copies and join in copies
    copies = copies.replace(shard, "'pymem.' || d.t || '_1'").replace(join, "JOIN (SELECT 1) AS s ON true")
    reads = ["SELECT content FROM pymem.facts_newest('user', 'u1', 'p1', 10)",
             "SELECT seq, content FROM pymem.window_read('u1', project_id => 'p1', max_messages => 2)",
             "SELECT pymem.current_tenant(), pymem.tenant_allowed('p1'), pymem._text_search_config('p1')::text, "
             "pymem._embedder_dimension('p1', 'e')"]
    with psycopg.connect(dsn) as c:
        c.execute("SELECT pymem.fact_add('user', 'u1', 'likes tea', 'p1'), pymem.fact_add('user', 'u1', 'lives in Oslo', 'p1')")
        for i in range(3):
            c.execute("SELECT pymem.message_add('u1', %s, project_id => 'p1')", (f"message {i}",))
        c.execute("INSERT INTO pymem.embedders (project_id, name, dimension) VALUES ('p1', 'e', 3)")
        plain = [c.execute(q).fetchall() for q in reads]
        c.execute(derive)
        for table in ("tenant_roles", "text_search", "embedders"):
            c.execute(f"CREATE TABLE pymem.{table}_1 AS TABLE pymem.{table}; GRANT SELECT ON pymem.{table}_1 TO PUBLIC")
        c.execute(copies)
        src = dict(c.execute("SELECT proname, prosrc FROM pg_proc WHERE pronamespace = 'pymem'::regnamespace "
                             "AND proname IN ('facts_newest', '_window', '_tenant_enter', 'tenant_allowed', "
                             "'_tenant_allowed_bound', '_text_search_config', '_embedder_dimension')").fetchall())
        assert "FROM pymem.facts AS f WHERE pymem._fact_live(" in src["facts_newest"]
        assert "RETURN QUERY EXECUTE" in src["_window"] and "SET LOCAL pymem.tenant" in src["_tenant_enter"]
        for name, table in [("tenant_allowed", "tenant_roles"), ("_tenant_allowed_bound", "tenant_roles"),
                            ("_text_search_config", "text_search"), ("_embedder_dimension", "embedders")]:
            assert f"pymem.{table}_1 AS" in src[name] and f"pymem.{table} AS" in src[name], (name, src[name])
        c.commit()  # a new transaction: _tenant_enter names the tenant again
        assert [c.execute(q).fetchall() for q in reads] == plain
        for table in ("tenant_roles", "text_search", "embedders"):
            c.execute(f"DROP TABLE pymem.{table}_1")  # no copy on this node: the table, through Citus
        assert [c.execute(q).fetchall() for q in reads] == plain
        assert plain[0] == [("lives in Oslo",), ("likes tea",)] and [r[1] for r in plain[1]] == ["message 1", "message 2"]
