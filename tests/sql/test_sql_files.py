"""Every SQL file parses without a database (PostgreSQL's own parser via pglast, PL/pgSQL
bodies included), and every named query the Python layer sends is qualified by sqlglot
against the migrated schema, so a renamed table, column or function fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pglast
import pglast.parser
import psycopg
import pytest
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

import pymem.calls
from pymem.migrations import api_calls, api_order, load_sql_files
from pymem.queries import Q, parse_queries, placeholders, sql_root
from pymem.types import Query

ROOT = sql_root()


def _sql_files():
    files = [ROOT / "bootstrap.sql", ROOT / "queries.sql"]
    for folder in ("migrations", "api"):
        files += sorted((f for f in (ROOT / folder).iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return files


def _without_psql(text: str) -> str:
    """Drop psql meta-command lines (\\ir, \\if ...) so the rest is plain SQL; \\gset ends a
    statement as a semicolon would."""
    lines = []
    for line in text.splitlines():
        if line.lstrip().startswith("\\gset"):
            lines.append(";")
        elif not line.lstrip().startswith("\\"):
            lines.append(line)
    return "\n".join(lines)


@pytest.mark.parametrize("f", _sql_files() + [ROOT / "migrate.sql"], ids=lambda f: f.name)
def test_sql_file_parses(f):
    text = f.read_text(encoding="utf-8")
    if f.name == "queries.sql":
        text = re.sub(r"%\((\w+)\)[sb]", "NULL", text)  # psycopg placeholders -> a parseable stand-in
    stmts = pglast.parse_sql(_without_psql(text))
    assert stmts, f"{f.name} holds no statement"
    for raw in pglast.split(_without_psql(text)):
        if re.search(r"LANGUAGE\s+plpgsql", raw, re.IGNORECASE) and re.match(r"\s*CREATE", raw, re.IGNORECASE):
            # pglast's PL/pgSQL parser has no catalog: it knows no pymem row types and no
            # pgvector types, so those become built-in stand-ins; the body is parsed as written.
            stand_in = re.sub(r"(SETOF|RETURNS) pymem\.\w+", r"\1 record", raw)
            stand_in = re.sub(r"\bpymem\.\w+(?=\s*(:=|;|,|\)|DEFAULT\b))", "record", stand_in)
            stand_in = re.sub(r"\bvector\b", "real", stand_in)
            pglast.parse_plpgsql(stand_in)  # raises on a syntax error inside the body
        if re.match(r"\s*DO\b", raw, re.IGNORECASE):
            body = re.search(r"\$\$(.*)\$\$", raw, re.DOTALL).group(1)
            pglast.parse_plpgsql(f"CREATE FUNCTION pg_temp.f() RETURNS void LANGUAGE plpgsql AS $x${body}$x$")


def test_plpgsql_syntax_errors_are_caught():
    bad = "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1 END; $$"
    with pytest.raises(pglast.parser.ParseError):
        pglast.parse_plpgsql(bad)


def test_every_sql_file_puts_its_objects_in_schema_pymem():
    create = re.compile(
        r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(FUNCTION|TABLE|VIEW|TYPE|SEQUENCE|PROCEDURE)\s+"
        r"(?:IF\s+NOT\s+EXISTS\s+)?([\w.\"]+)",
        re.IGNORECASE,
    )
    for f in _sql_files():
        for kind, name in create.findall(f.read_text(encoding="utf-8")):
            if name.startswith("pg_temp."):
                continue
            assert name.startswith("pymem."), f"{f.name}: {kind} {name} is not in schema pymem"


# Functions that may not pin search_path: the migration_*_path functions set it for their caller
# (a SET clause would undo that); current_tenant, the pgvector wrappers, recall's floor and the
# ranking's formulas, the states of a fact and of a store entry (_fact_head, _unexpired, _fact_kept, _fact_live, _entry_live) and
# "holds at" (_fact_valid) must inline (into RLS policies, into the rankings' ORDER BY and filters, before the planner
# matches a partial index's predicate) and a SET clause stops that.
UNPINNED = {"pymem.migration_search_path()", "pymem.migration_types_path()", "pymem.current_tenant()",
            "pymem._cosine_distance(vector,vector)", "pymem._vector_dims(vector)", "pymem._vector_norm(vector)",
            "pymem._vector_match(double precision)", "pymem._term_quoted(text)",
            "pymem._bm25_idf(double precision,double precision)",
            "pymem._bm25(double precision,double precision,double precision,double precision,double precision)",
            "pymem._recency(double precision,double precision)", "pymem._fact_head(bigint)",
            "pymem._unexpired(timestamp with time zone,timestamp with time zone)",
            "pymem._fact_kept(anyelement,timestamp with time zone)", "pymem._fact_live(anyelement,timestamp with time zone)",
            "pymem._entry_live(timestamp with time zone,timestamp with time zone)", "pymem._message_role(text)",
            "pymem._fact_valid(timestamp with time zone,timestamp with time zone,timestamp with time zone)",
            "pymem._recall_rows(text,text,text,vector,tsquery,timestamp with time zone,jsonb)",
            # recall's builder inlines into the statement that calls it (a ROW constructor)
            "pymem.recall(integer,integer,integer,double precision,double precision,double precision,double precision,"
            "double precision,timestamp with time zone,timestamp with time zone,timestamp with time zone,jsonb,"
            "double precision,timestamp with time zone,timestamp with time zone,double precision)",
            # and the fact write's builder, the same way
            "pymem.fact_write(double precision,text,text,jsonb,timestamp with time zone,timestamp with time zone,"
            "interval,timestamp with time zone,timestamp with time zone)"}
SQL_WORDS = {"select", "case", "when", "then", "else", "end", "from", "where", "as", "and", "or", "not", "in", "least", "greatest",
             "operator", "all", "array", "exists", "row"}
# The only schemas a pinned pymem function may resolve names in: none of them can be written by
# anyone but pymem's owner (pg_temp is the caller's own, searched for tables only, and last).
TRUSTED_PATH = {"pg_catalog", "pymem", "pg_temp"}


def test_every_api_function_pins_search_path_and_declares_security(dsn):
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            """SELECT p.oid::regprocedure::text, p.proconfig, p.provolatile, p.prosecdef,
                      pg_get_functiondef(p.oid)
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = 'pymem'"""
        ).fetchall()
    assert rows
    for name, config, _volatile, _secdef, definition in rows:
        if name in UNPINNED:
            # documented exceptions: every function they call must be schema-qualified
            body = definition.split("$function$")[1]
            bare = {f.lower() for f in re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*\(", body)} - SQL_WORDS
            assert not bare, f"{name} calls unqualified {bare}"
            continue
        pinned = [c for c in (config or []) if c.startswith("search_path=")]
        assert pinned, f"{name} does not pin search_path"
        assert pinned[0].rstrip().endswith("pg_temp"), f"{name}: pg_temp must come last in {pinned[0]}"
        path = [p.strip().strip('"') for p in pinned[0].split("=", 1)[1].split(",")]
        assert set(path) <= TRUSTED_PATH, f"{name} resolves names in {set(path) - TRUSTED_PATH}"



# API functions that run as their caller, on purpose: fact_key (immutable, inlinable), set_tenant
# (sets the caller's own setting), recall and fact_write (build a value, inlinable); tenant_allowed is
# SECURITY DEFINER and granted to PUBLIC.
INVOKER_API = {"fact_key", "set_tenant", "current_tenant", "recall", "fact_write"}


#: internal trigger functions that run as pymem's owner (each returns trigger: no one can call it)
DEFINER_TRIGGERS = {"_changes_position"}


def test_security_modes_in_the_catalog(dsn):
    """Every function the app or reader role may execute runs as pymem's owner (SECURITY DEFINER)
    unless it is one of the documented invokers; no internal helper (leading underscore) or
    migration function is SECURITY DEFINER, so nothing but the API ever runs with the owner's
    rights; and nothing is executable by PUBLIC but the two functions the RLS policies call."""
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            """SELECT p.proname, p.prosecdef,
                      has_function_privilege('pymem_app', p.oid, 'EXECUTE')
                      OR has_function_privilege('pymem_reader', p.oid, 'EXECUTE') AS api,
                      coalesce(aclcontains(p.proacl, makeaclitem(0, p.proowner, 'EXECUTE', false)), false) AS public
               FROM pg_proc p WHERE p.pronamespace = 'pymem'::regnamespace"""
        ).fetchall()
    api = {name for name, _, granted, _ in rows if granted}
    assert len(api) > 30
    for name, definer, granted, public in rows:
        if granted and name not in INVOKER_API:
            assert definer, f"API function {name} is not SECURITY DEFINER"
        if name.startswith(("_", "migration_")):
            # but the change feed's deferred trigger (0048): it fires at commit as the session's
            # role, outside the API function that wrote, and a trigger function cannot be called
            # but as a trigger
            assert not definer or name in DEFINER_TRIGGERS, f"internal function {name} is SECURITY DEFINER"
            assert not granted, f"internal function {name} is granted to the app or reader role"
        assert not public or name in {"current_tenant", "tenant_allowed"}, f"{name} is executable by PUBLIC"


def test_grants_follow_the_catalog(dsn):
    """grants.sql derives the app role's functions from the catalog: every function without a
    leading underscore but the migration and admin functions, and nothing else; the reader's
    are a subset of them that cannot write (none is VOLATILE but set_tenant, which only sets
    the caller's own setting)."""
    admin = {"tenant_bind", "tenant_unbind", "store_configure", "text_search_configure", "recall_index_plan",
             "recall_terms_fill", "erasures", "retention_configure", "learning_limits_configure", "change_feed_configure", "current_tenant",
             "tenant_allowed"}
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            """SELECT p.proname, p.provolatile,
                      has_function_privilege('pymem_app', p.oid, 'EXECUTE'),
                      has_function_privilege('pymem_reader', p.oid, 'EXECUTE')
               FROM pg_proc p WHERE p.pronamespace = 'pymem'::regnamespace"""
        ).fetchall()
    for name, volatility, app, reader in rows:
        public_api = not name.startswith(("_", "migration_")) and name not in admin
        if name not in {"current_tenant", "tenant_allowed"}:  # granted to PUBLIC for the policies
            assert app == public_api, f"{name}: app role {'lacks' if public_api else 'has'} EXECUTE"
            assert not reader or app, f"{name}: the reader may execute what the app may not"
        assert not reader or volatility != "v" or name == "set_tenant", f"{name}: the reader may call a VOLATILE function"


# STABLE functions that may spell the condition out, and why: fact_lookup answers what fact_add
# would find, the row that holds the unique key (facts_subject_content_key); browse_subjects
# counts every version of a subject's facts, active and superseded; fact_chain walks a history
# to its head
ACTIVE_SPELLED_OUT = {"fact_lookup", "browse_subjects", "fact_chain"}


def test_every_read_of_active_facts_reads_the_view(dsn):
    """Issue 31, item 1: "an active fact" has one definition, the view pymem.active_facts
    (migrations/0006_v0_2_0_memory.sql), a security_invoker view granted to no one. No read
    (STABLE function) spells the condition out, or names "head" or "live" (pymem._fact_head,
    pymem._fact_live), but the documented few; the reads of active
    facts (facts_newest, facts_search's candidates, context_read's, facts_unembedded,
    user_export) name the view, and their Citus copies its twin over the shared facts."""
    with psycopg.connect(dsn) as c:
        spelled = {name for (name,) in c.execute(
            """SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'pymem'::regnamespace AND p.provolatile = 's'
                 AND p.prosrc ~* 'superseded_by\\s+IS\\s+NULL|pymem\\._fact_(head|live)\\('""")}
        readers = {name for (name,) in c.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'pymem'::regnamespace AND p.prosrc ~ 'pymem\\.active_facts\\M'")}
        views = dict(c.execute(
            """SELECT c.relname, pg_get_viewdef(c.oid) || ' ' || array_to_string(c.reloptions, ',') FROM pg_class c
                WHERE c.relnamespace = 'pymem'::regnamespace AND c.relkind = 'v'""").fetchall())
        granted = c.execute(
            """SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'pymem'::regnamespace AND c.relkind = 'v'
                 AND (has_table_privilege('pymem_app', c.oid, 'SELECT') OR has_table_privilege('pymem_reader', c.oid, 'SELECT'))"""
        ).fetchone()[0]
    assert spelled <= ACTIVE_SPELLED_OUT, f"read the view pymem.active_facts instead: {sorted(spelled - ACTIVE_SPELLED_OUT)}"
    assert {"facts_newest", "_facts_newest", "_scope_facts_newest", "_fact_candidates", "_scope_fact_candidates",
            "_facts_for_context", "facts_unembedded", "user_export"} <= readers, readers
    assert set(views) == {"active_facts", "shared_active_facts"}
    for name, definition in views.items():
        assert "superseded_by IS NULL" in definition and "security_invoker=true" in definition, (name, definition)
    assert "FROM pymem.facts f" in views["active_facts"] and "FROM pymem.shared_facts f" in views["shared_active_facts"]
    assert granted == 0
    citus = (Path(__file__).resolve().parents[2] / "sql" / "citus.sql").read_text(encoding="utf-8")
    assert "fact_lexemes|active_facts)\\M" in citus  # the copies read shared_active_facts


def test_every_function_declares_volatility_and_security_in_its_file():
    header = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(pymem\.\w+)(.*?)\bAS\s+(?:\$|')", re.S | re.I)
    found = 0
    for f in _sql_files():
        for name, head in header.findall(f.read_text(encoding="utf-8")):
            found += 1
            assert re.search(r"\b(IMMUTABLE|STABLE|VOLATILE)\b", head), f"{f.name}: {name} declares no volatility"
            assert re.search(r"\bSECURITY\s+(INVOKER|DEFINER)\b", head), f"{f.name}: {name} declares no security mode"
    assert found > 40


def _schema(dsn) -> dict:
    """Tables ({'pymem': {table: {column: type}}}) and functions ({name: {args, out}}) of the
    migrated database, for sqlglot and for checking calls to pymem functions."""
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            """SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns
               WHERE table_schema IN ('pymem', 'pg_catalog')"""
        ).fetchall()
        procs = c.execute(
            """SELECT p.proname, coalesce(p.proargnames, '{}'), coalesce(p.proargmodes::text[], '{}'),
                      coalesce((SELECT array_agg(a.attname::text) FROM pg_attribute a
                                 WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped), '{}')
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               JOIN pg_type t ON t.oid = p.prorettype
               WHERE n.nspname = 'pymem'"""
        ).fetchall()
    schema: dict = {}
    for s, t, col, typ in rows:
        schema.setdefault(s, {}).setdefault(t, {})[col] = "TEXT" if typ == "USER-DEFINED" else typ.upper()
    functions: dict = {}
    for name, argnames, modes, row_fields in procs:
        modes = modes or ["i"] * len(argnames)
        args = {a for a, m in zip(argnames, modes) if m in ("i", "b", "v")}
        out = {a for a, m in zip(argnames, modes) if m in ("o", "b", "t")}
        out |= set(row_fields)  # SETOF a table's or a composite type's rows
        f = functions.setdefault(name, {"args": set(), "out": set()})
        f["args"] |= args
        f["out"] |= out or {name}
    return {"schema": schema, "functions": functions}


def _check_call(query_name: str, call: exp.Expression, functions: dict) -> dict:
    fname = call.name
    assert fname in functions, f"{query_name}: no function pymem.{fname}"
    kwargs = {k.this.name for k in call.find_all(exp.Kwarg) if k.parent is call}  # a nested call's are its own
    unknown = kwargs - functions[fname]["args"]
    assert not unknown, f"{query_name}: pymem.{fname} has no parameter(s) {sorted(unknown)}"
    return functions[fname]


@pytest.mark.parametrize("name", sorted(Q))
def test_named_query_qualifies_against_the_schema(name, dsn):
    info = _schema(dsn)
    # binary placeholders (vectors: %(x)b) read as sqlglot's %(x)s
    tree = sqlglot.parse_one(re.sub(r"(%\(\w+\))b", r"\1s", Q[name]), read="postgres")
    # pymem functions used as tables: the function, its named arguments and the columns read
    # through its alias must all exist.
    for table in list(tree.find_all(exp.Table)):
        if isinstance(table.this, exp.Func):
            assert table.db == "pymem", f"{name}: unqualified table function {table.this.name}"
            f = _check_call(name, table.this, info["functions"])
            for col in tree.find_all(exp.Column):
                if col.table == table.alias_or_name:
                    assert col.name in f["out"], f"{name}: pymem.{table.this.name} returns no column {col.name}"
    for dot in tree.find_all(exp.Dot):
        if isinstance(dot.this, exp.Identifier) and dot.this.name == "pymem" and isinstance(dot.expression, exp.Func):
            _check_call(name, dot.expression, info["functions"])
    if not any(isinstance(t.this, exp.Func) for t in tree.find_all(exp.Table)):
        qualify(tree, schema=info["schema"], dialect="postgres", validate_qualify_columns=True, identify=False)
        for table in tree.find_all(exp.Table):
            if table.db:
                assert table.name in info["schema"].get(table.db, {}), f"{name}: no table {table.db}.{table.name}"


def test_a_renamed_function_parameter_or_output_column_fails(dsn):
    info = _schema(dsn)
    bad_arg = sqlglot.parse_one(Q["facts_forget"].replace("scope_id =>", "subject_id =>"), read="postgres")
    call = next(d.expression for d in bad_arg.find_all(exp.Dot) if isinstance(d.expression, exp.Func))
    with pytest.raises(AssertionError, match="no parameter"):
        _check_call("x", call, info["functions"])
    assert "created" in info["functions"]["fact_add"]["out"] and "nope" not in info["functions"]["fact_add"]["out"]


def test_a_renamed_column_fails_qualification(dsn):
    info = _schema(dsn)
    broken = Q["applied_migrations"].replace("m.checksum", "m.sha")
    with pytest.raises(sqlglot.errors.OptimizeError):
        qualify(sqlglot.parse_one(broken, read="postgres"), schema=info["schema"], dialect="postgres")


def test_calls_module_is_generated_from_the_current_queries():
    """pymem/calls.py is sql/queries.sql as Python (issue 31, item 3): regenerate it with
    ``python -m pymem.migrations`` after changing a query."""
    from pymem.migrations import calls_text

    committed = (Path(pymem.calls.__file__)).read_text(encoding="utf-8")
    assert committed == calls_text(Path(str(sql_root()))), "pymem/calls.py is stale: run python -m pymem.migrations"


def test_each_call_takes_exactly_its_querys_placeholders():
    for name, statement in Q.items():
        params = placeholders(statement)
        fn = getattr(pymem.calls, name)
        assert fn(**{p: p for p in params}) == Query(name, {p: p for p in params}), name
        if params:  # a stale or misspelt name fails at the call, not inside psycopg
            with pytest.raises(TypeError):
                fn(**{p: p for p in params[1:]})
            with pytest.raises(TypeError):
                fn(**{p: p for p in params}, no_such_placeholder=1)
    assert placeholders("SELECT %(a)s, %(b)b, %(a)s -- %(c)s") == ["a", "b", "c"]  # psycopg reads comments too


def test_queries_file_rejects_duplicates_and_empty_bodies():
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- name: a\n\n-- name: b\nSELECT 2;\n")


@pytest.mark.parametrize("f", sorted((ROOT / "api").iterdir(), key=lambda f: f.name), ids=lambda f: f.name)
def test_api_files_only_create_functions(f):
    """The API files are created with pgvector's schema on the path (their signatures name its
    type): so they may only CREATE FUNCTION and COMMENT, never run a query or a DO block, which
    would resolve operators there (docs/security.md "Function safety")."""
    for stmt in pglast.parse_sql(f.read_text(encoding="utf-8")):
        kind = type(stmt.stmt).__name__
        assert kind in {"CreateFunctionStmt", "CommentStmt"}, f"{f.name}: a {kind} statement"


@pytest.mark.parametrize("name", sorted(__import__("pymem.migrations").migrations.TYPES_PATH_MIGRATIONS))
def test_migrations_run_with_pgvectors_schema_run_nothing(name):
    """The frozen migrations created with pgvector's schema on the path define objects only
    (no DO block, no query), and every function they call is schema-qualified."""
    text = (ROOT / "migrations" / f"{name}.sql").read_text(encoding="utf-8")
    for stmt in pglast.parse_sql(text):
        kind = type(stmt.stmt).__name__
        assert kind in {"CreateStmt", "IndexStmt", "CommentStmt"}, f"{name}: a {kind} statement"
    toks = pglast.parser.scan(text)
    bare = {text[t.start : t.end + 1] for i, t in enumerate(toks[:-1])
            if t.name == "IDENT" and toks[i + 1].name == "ASCII_40" and (i == 0 or toks[i - 1].name != "ASCII_46")}
    assert not bare, f"{name} calls unqualified functions {bare}"


# Which capability may call which other capability's functions (by design: context_read composes
# facts, conversations and recall; turn_record writes learned facts; recall reads the thread's
# window; facts_search ranks with recall's formulas; portability exports and imports facts and
# conversations; an erasure erases all three kinds). A capability is one file or a few beside each
# other (facts.sql, facts_time.sql, ...: the name before "_" or ".sql"). Everything else a file
# calls is its own capability's or in 00_common.sql, which calls nothing else.
CROSS_FILE = {
    "context": {"facts", "conversations", "recall"},
    "conversations": {"facts"},
    "recall": {"conversations"},
    "facts": {"recall"},
    "portability": {"facts", "conversations"},
    "erasure": {"facts", "conversations", "stores"},
    "learning": {"conversations"},
}


def capability(file: str) -> str:
    """The capability of an API file: ``facts_versions.sql`` -> ``facts``."""
    return file.removesuffix(".sql").split("_")[0]


def _api_graph() -> tuple[list[tuple[str, str]], dict[tuple[str, str], set[tuple[str, str]]]]:
    api = load_sql_files().api
    return api, api_calls(api)


def _cycle(edges) -> list[str] | None:
    """One cycle of the file graph (a list of files, the first repeated at the end), or None."""
    out: dict[str, set[str]] = {}
    for a, b in edges:
        out.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(f: str) -> list[str] | None:
        state[f] = 1
        path.append(f)
        for g in sorted(out.get(f, ())):
            if state.get(g) == 1:
                return path[path.index(g):] + [g]
            if g not in state and (found := visit(g)):
                return found
        state[f] = 2
        path.pop()
        return None

    for f in sorted(out):
        if f not in state and (found := visit(f)):
            return found
    return None


def _two_way(edges) -> list[str]:
    """Each pair of files that call each other, with the functions on both edges."""
    return [f"{a} <-> {b}: {sorted(edges[(a, b)])} / {sorted(edges[(b, a)])}"
            for (a, b) in sorted(edges) if a < b and (b, a) in edges]


def test_the_api_file_graph_is_one_way():
    """No two files of sql/api call each other (issue 55, item 4), nor do files call each other
    round a longer cycle: each file is read, and applied by a migrate (api_order), after the files
    it calls. The failure names the functions on both edges; move one side's function (verbatim)
    into the file it belongs with."""
    api, edges = _api_graph()
    defined = [n for _, text in api for n in re.findall(r"CREATE OR REPLACE FUNCTION pymem\.(\w+)\(", text)]
    assert len(defined) > 150 and len(edges) > 50 and sum(map(len, edges.values())) > 200, (len(defined), len(edges))
    # the reader sees calls in bodies and in DEFAULTs, and not table names or comments
    assert ("context_read", "_fact_check_subject") in edges[("context.sql", "facts.sql")]
    assert ("messages_recall", "recall") in edges[("recall.sql", "recall_spec.sql")]
    assert not any(("store_versions" == c) for e in edges.values() for _, c in e if _ == "_store_put")
    pairs = _two_way(edges)
    assert not pairs, "API files that call each other both ways:\n" + "\n".join(pairs)
    cycle = _cycle(edges)
    assert cycle is None, "API files that call each other round a cycle: " + " -> ".join(cycle or [])
    order = [n for n, _ in api]
    for a, b in edges:
        assert order.index(b) < order.index(a), f"migrate applies {a} before {b}, which it calls"


def test_the_graph_check_fails_on_a_two_way_pair_and_on_a_cycle():
    """The checks above on three made-up files: a <-> b both ways, and b -> c -> a round."""
    def fn(name, *calls):
        body = " ".join(f"PERFORM pymem.{c}(1);" for c in calls)
        return f"CREATE OR REPLACE FUNCTION pymem.{name}() RETURNS void LANGUAGE plpgsql AS $$ BEGIN {body} END $$;\n"
    api = [("a.sql", fn("fa", "fb") + "-- pymem.fc() in a comment\n"),
           ("b.sql", fn("fb", "fa") + fn("fb2", "fc")),
           ("c.sql", fn("fc", "fa2") + "COMMENT ON FUNCTION pymem.fc() IS 'pymem.fb()';\n"),
           ("d.sql", fn("fa2"))]
    edges = api_calls(api)
    assert edges == {("a.sql", "b.sql"): {("fa", "fb")}, ("b.sql", "a.sql"): {("fb", "fa")},
                     ("b.sql", "c.sql"): {("fb2", "fc")}, ("c.sql", "d.sql"): {("fc", "fa2")}}
    assert _two_way(edges) == ["a.sql <-> b.sql: [('fa', 'fb')] / [('fb', 'fa')]"]
    assert _cycle(edges) == ["a.sql", "b.sql", "a.sql"]
    assert _cycle({k: v for k, v in edges.items() if k != ("b.sql", "a.sql")}) is None
    assert [n for n, _ in api_order(api)][:2] == ["d.sql", "c.sql"]  # callees first


def test_capability_files_depend_only_on_the_common_file():
    _, edges = _api_graph()
    for (file, home), functions in sorted(edges.items()):
        if home.startswith("0") or capability(home) == capability(file):
            continue  # the shared layer (00_common.sql) or its own capability's
        assert not file.startswith("0"), f"{file} calls {sorted(functions)} of {home}"
        assert capability(home) in CROSS_FILE.get(capability(file), set()), f"{file} calls {sorted(functions)} of {home}"


# The capabilities of sql/api that have no Python module of their name: the shared layer
# (00_common.sql); tenant.sql, for SQL clients that name their tenant once (set_tenant,
# tenant_bind: pymem passes project_id on every call instead); meta.sql, which Database.about reads.
NO_MODULE = {"00", "tenant", "meta"}


def test_each_capability_is_sql_files_and_a_python_module_of_its_name():
    """README "Where it sits": every capability is a family of SQL files under sql/api/
    (<capability>.sql, <capability>_<part>.sql) and one Python module of the same name."""
    families = {capability(n) for n, _ in load_sql_files().api}
    assert len(families) > 10
    package = Path(pymem.calls.__file__).parent
    missing = {f for f in families - NO_MODULE if not (package / f"{f}.py").is_file()}
    assert not missing, f"capabilities of sql/api with no pymem/<name>.py: {sorted(missing)}"
    assert all((ROOT / "api" / f"{f}.sql").is_file() for f in families - {"00"}), "a family without its main file"


def test_every_subject_of_a_scope_is_a_function_of_its_own():
    """scope_id '*' (every subject of a scope) is served by the _scope_* functions: a public
    function's '*' branch calls one of them (or refuses '*'), and never writes the one-subject
    statement a second time beside its own (the twins issue 31 removed)."""
    branch = re.compile(r"IF\s+[\w.]*scope_id\s*=\s*'\*'\s+THEN(.*?)(?:ELSE|ELSIF|END IF)", re.S | re.I)
    seen = 0
    for f in _sql_files():
        for body in branch.findall(f.read_text(encoding="utf-8")):
            seen += 1
            assert "pymem._scope_" in body or "RAISE EXCEPTION" in body, f"{f.name}: a '*' branch repeats the query:\n{body}"
            tables = re.findall(r"\b(?:FROM|UPDATE|INTO)\s+(pymem\.[a-z_]+)\b(?!\()", body, re.I)
            assert not tables, f"{f.name}: a '*' branch reads or writes {tables} itself:\n{body}"
    assert seen >= 5


def test_no_api_file_outgrows_one_sub_capability():
    """No file of sql/api over 600 lines (issue 31): a file that grows past it is split by
    sub-capability (recall.sql and recall_indexes.sql, stores.sql and stores_protections.sql), so
    a newcomer reads one concern per file."""
    sizes = {f.name: len(f.read_text(encoding="utf-8").splitlines()) for f in _sql_files() if f.parent.name == "api"}
    assert len(sizes) > 15
    assert max(sizes.values()) <= 600, {n: s for n, s in sizes.items() if s > 600}
