"""No caller-planted operator, function or cast ever runs inside pymem (docs/security.md "Function safety").

The attack: PostgreSQL picks an operator or function whose argument types match exactly anywhere
on the search_path before it considers a pg_catalog one that needs an implicit cast. So a role
that may CREATE in a schema on pymem's path (pgvector's schema, often ``public``) can plant, for
an expression such as ``confidence >= 0`` (float8 vs integer), an exact-match ``>=`` that then
runs as pymem's owner (or as the superuser running ``pymem migrate``).

The test plants, as such a role and before the first migrate, an exact-match look-alike for
every operator name and every unqualified function name that pymem's SQL uses (taken from the
SQL files by PostgreSQL's own scanner, bodies included) over every type pymem's catalog uses
(taken from the catalog of a migrated database). Each plant counts its calls in a sequence
(which no rollback undoes) and then raises. Then it migrates (Python, then psql), runs every
README SQL example and every API function the app and reader roles may execute, and checks that
no plant ever ran and that every such function was really called.
"""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pglast.parser
import psycopg
import pytest
from psycopg import sql

import pymem
from pymem import server
from pymem.queries import sql_root

from conftest import blocks

ATTACKER = "pymem_planter"

# scanner tokens that are operators, and keywords that compare through an operator
CHAR_OPS = {"ASCII_60": "<", "ASCII_62": ">", "ASCII_61": "=", "ASCII_43": "+", "ASCII_45": "-",
            "ASCII_42": "*", "ASCII_47": "/", "ASCII_37": "%", "ASCII_94": "^",
            "NOT_EQUALS": "<>", "LESS_EQUALS": "<=", "GREATER_EQUALS": ">="}
KEYWORD_OPS = {"IN_P": ["="], "BETWEEN": [">=", "<="], "LIKE": ["~~"], "ILIKE": ["~~*"], "DISTINCT": ["="],
               "ANY": ["="], "ALL": ["<>"]}
# literal and catalog types an expression may carry besides the column and parameter types
EXTRA_TYPES = ["integer", "bigint", "smallint", "numeric", "double precision", "real", "text", "boolean",
               "oid", "regrole", "regclass", "regnamespace", "regprocedure", "name", "integer[]", "bigint[]",
               "text[]", "jsonb", "bytea", "timestamp with time zone", "interval", "uuid"]
# grammar words the scanner sees before a parenthesis that are not function calls
NOT_CALLS = {"coalesce", "least", "greatest", "nullif", "exists", "values", "key", "conflict", "if", "operator"}
FUNCTION_WORDS = {"UNRESERVED_KEYWORD", "COL_NAME_KEYWORD", "TYPE_FUNC_NAME_KEYWORD"}


def _tokens(text: str) -> list[tuple[str, str, str]]:
    """(token name, keyword kind, token text) of a SQL text, descending into dollar-quoted bodies."""
    out: list[tuple[str, str, str]] = []
    for tok in pglast.parser.scan(text):
        s = text[tok.start : tok.end + 1]
        if tok.name == "SCONST" and s.startswith("$"):
            tag = s[: s.index("$", 1) + 1]
            out += _tokens(s[len(tag) : -len(tag)])
        else:
            out.append((tok.name, tok.kind, s))
    return out


def used_names() -> tuple[set[str], set[tuple[str, int]]]:
    """Operator names, and (name, arity) of every function called without a schema, in every
    SQL file pymem ships (migrate.sql is psql glue around queries.sql and is skipped)."""
    ops: set[str] = set()
    funcs: set[tuple[str, int]] = set()
    root = Path(str(sql_root()))
    for path in sorted(root.rglob("*.sql")):
        if path.name == "migrate.sql":
            continue
        toks = _tokens(path.read_text(encoding="utf-8"))
        for i, (name, kind, text) in enumerate(toks):
            if name == "Op":
                ops.add(text)
            elif name in CHAR_OPS:
                ops.add(CHAR_OPS[name])
            elif name in KEYWORD_OPS:
                ops.update(KEYWORD_OPS[name])
            elif ((name == "IDENT" or kind in FUNCTION_WORDS) and i + 1 < len(toks) and toks[i + 1][0] == "ASCII_40"
                  and (i == 0 or toks[i - 1][0] != "ASCII_46")):
                depth, arity, j = 0, 0, i + 1
                while j < len(toks):
                    if toks[j][0] in ("ASCII_40", "ASCII_91"):
                        depth += 1
                    elif toks[j][0] in ("ASCII_41", "ASCII_93"):
                        depth -= 1
                        if depth == 0:
                            break
                    elif toks[j][0] == "ASCII_44" and depth == 1:
                        arity += 1
                    elif arity == 0 and depth == 1:
                        arity = 1 if toks[j][0] != "ASCII_42" else 0
                    j += 1
                if arity and arity <= 4 and text.lower() not in NOT_CALLS:
                    funcs.add((text.lower(), arity))
    return ops, funcs


def catalog_types(dsn: str) -> list[str]:
    """Every type a column, parameter or result of pymem uses, with their array types."""
    with psycopg.connect(dsn) as c:
        rows = c.execute(
            """WITH used AS (
                   SELECT a.atttypid AS t FROM pg_attribute a JOIN pg_class r ON r.oid = a.attrelid
                    WHERE r.relnamespace = 'pymem'::regnamespace AND r.relkind = 'r' AND a.attnum > 0
                   UNION SELECT unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) FROM pg_proc p
                    WHERE p.pronamespace = 'pymem'::regnamespace
                   UNION SELECT p.prorettype FROM pg_proc p WHERE p.pronamespace = 'pymem'::regnamespace)
               SELECT DISTINCT format_type(t.oid, NULL) FROM used u JOIN pg_type t ON t.oid = u.t
                WHERE t.typtype IN ('b', 'd') AND t.typrelid = 0
               UNION SELECT format_type(t.typarray, NULL) FROM used u JOIN pg_type t ON t.oid = u.t
                WHERE t.typtype = 'b' AND t.typarray <> 0 AND t.typelem = 0"""
        ).fetchall()
    return sorted({r[0] for r in rows} | set(EXTRA_TYPES))


def plant(dsn: str, types: list[str], ops: set[str], funcs: set[tuple[str, int]]) -> int:
    """As the attacker, create every look-alike that does not exist yet; returns how many."""
    ident = sql.Identifier
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET search_path = public")
        have = {(n, l, r) for n, l, r in c.execute(
            "SELECT oprname, format_type(oprleft, NULL), format_type(oprright, NULL) FROM pg_operator")}
        have_fn = {(n, a) for n, a in c.execute(
            "SELECT proname, oidvectortypes(proargtypes) FROM pg_proc "
            "WHERE pronamespace IN ('pg_catalog'::regnamespace, 'public'::regnamespace)")}
        statements: list[sql.Composable] = []
        count = 0

        def plant_fn(name: str, args: tuple[str, ...], returns: str) -> None:
            nonlocal count
            statements.append(sql.SQL(
                "CREATE FUNCTION public.{}({}) RETURNS {} LANGUAGE plpgsql AS "
                "$p$BEGIN PERFORM nextval('public.plant_hits'); RAISE EXCEPTION 'planted % called', {}; END$p$"
            ).format(ident(name), sql.SQL(", ").join(sql.SQL(t) for t in args), sql.SQL(returns),
                     sql.Literal(f"{name}({', '.join(args)})")))
            count += 1

        for i, (left, right) in enumerate(itertools.product(types, repeat=2)):
            fn = f"plant_op_{i}"
            names = [o for o in ops if (o, left, right) not in have]
            if not names:
                continue
            plant_fn(fn, (left, right), "boolean")
            for o in names:
                statements.append(sql.SQL("CREATE OPERATOR public.{} (LEFTARG = {}, RIGHTARG = {}, FUNCTION = public.{})")
                                  .format(sql.SQL(o), sql.SQL(left), sql.SQL(right), ident(fn)))
                count += 1
        for i, right in enumerate(types):  # prefix operators (unary minus, ...)
            for o in ops & {"-", "+", "~", "@", "!"}:
                if (o, "-", right) not in have:
                    plant_fn(f"plant_prefix_{i}_{ord(o)}", (right,), right)
                    statements.append(sql.SQL("CREATE OPERATOR public.{} (RIGHTARG = {}, FUNCTION = public.{})")
                                      .format(sql.SQL(o), sql.SQL(right), ident(f"plant_prefix_{i}_{ord(o)}")))
        for name, arity in sorted(funcs):
            combos = (itertools.product(types, repeat=arity) if arity <= 2
                      else [(t,) * arity for t in types])
            for args in combos:
                if (name, ", ".join(args)) not in have_fn:
                    plant_fn(name, args, "text")
        for stmt in statements:
            try:
                c.execute(stmt)
            except psycopg.errors.DuplicateFunction:
                pass  # the same name over type aliases (e.g. name vs a domain of it)
    return count


def _ensure_attacker(admin) -> None:
    if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ATTACKER,)).fetchone():
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(ATTACKER)))


def _called(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        return {r[0] for r in c.execute(
            "SELECT funcname FROM pg_stat_user_functions WHERE schemaname = 'pymem' AND calls > 0")}


def _api_calls(c: psycopg.Connection) -> None:
    """Every function the app role may execute, with arguments that make it do real work."""
    v3 = "[1,0.5,0]"
    c.execute("SELECT pymem.set_tenant('')")
    c.execute("SELECT pymem.fact_key('x'), pymem.about()")
    fid = c.execute("SELECT id FROM pymem.fact_add('user', 'ann', 'Likes tea', embedding => %s, embedder => 'e3')",
                    (v3,)).fetchone()[0]
    c.execute("SELECT * FROM pymem.fact_add('user', 'ann', 'Learned one', write => pymem.fact_write(source => 'learned'), max_learned => 1)")
    c.execute("SELECT * FROM pymem.fact_add('user', 'ann', 'Learned two', write => pymem.fact_write(source => 'learned'), max_learned => 1)")
    new = c.execute("SELECT id FROM pymem.fact_supersede('user', 'ann', 'Likes green tea', id => %s)",
                    (fid,)).fetchone()[0]
    c.execute("SELECT * FROM pymem.facts_newest('user', 'ann')")
    c.execute("SELECT * FROM pymem.facts_newest('user', '*')")
    c.execute("SELECT * FROM pymem.fact_history('user', 'ann')")
    c.execute("SELECT * FROM pymem.fact_chain('user', 'ann', %s)", (new,))
    c.execute("SELECT * FROM pymem.fact_get(%s)", (new,))
    c.execute("SELECT * FROM pymem.facts_unembedded('user', 'ann', 'e3')")
    c.execute("SELECT pymem.fact_embeddings_put('user', 'ann', 'e3', ARRAY[%s]::bigint[], ARRAY[%s]::text[]::vector[])",
              (new, v3))
    c.execute("SELECT * FROM pymem.facts_search('user', 'ann', %s, 'e3')", (v3,))
    c.execute("SELECT * FROM pymem.facts_add_many('user', ARRAY['ann', 'ann'], ARRAY['Likes tea', 'Reads a lot'], "
              "embeddings => ARRAY[%s, %s]::text[]::vector[], embedder => 'e3')", (v3, v3))
    c.execute("SELECT pymem.message_add('ann', 'a message from another service')")
    c.execute("SELECT * FROM pymem.messages_add_many('ann', 'import', ARRAY['user', 'assistant'], ARRAY['an old one', 'a reply'], "
              "embeddings => ARRAY[%s, %s]::text[]::vector[], embedder => 'e3')", (v3, v3))
    c.execute("SELECT * FROM pymem.turn_record('ann', 'I moved to Lisbon last week', 'Noted', embedder => 'e3', "
              "user_embedding => %s, assistant_embedding => '[0,1,0]', learned => ARRAY['Lives in Lisbon'])", (v3,))
    for _ in range(6):
        c.execute("SELECT * FROM pymem.turn_record('ann', 'another turn of talk', 'ok')")
    c.execute("SELECT * FROM pymem.window_read('ann')")
    c.execute("SELECT * FROM pymem.messages_unembedded('ann', 'e3')")
    c.execute("SELECT pymem.message_embeddings_put('ann', 'e3', ARRAY['default'], ARRAY[1]::bigint[], "
              "ARRAY[%s]::text[]::vector[])", (v3,))
    c.execute("SELECT * FROM pymem.messages_recall('ann', %s, 'e3', query_text => 'talk of Lisbon',"
              " recall => pymem.recall(recency_weight => 0.1, importance_weight => 0.1))", (v3,))
    c.execute("SELECT pymem.message_lexemes_backfill()")
    claim = c.execute("SELECT claim_token FROM pymem.summary_claim('ann', keep_last => 2, summarize_every => 2)").fetchone()
    assert claim and claim[0]
    c.execute("SELECT pymem.summary_commit('ann', %s, 'Ann moved to Lisbon')", (claim[0],))
    claim = c.execute("SELECT claim_token FROM pymem.summary_claim('ann', keep_last => 0, summarize_every => 1)").fetchone()
    if claim and claim[0]:
        c.execute("SELECT pymem.summary_release('ann', %s)", (claim[0],))
    c.execute("SELECT * FROM pymem.summary_read('ann')")
    c.execute("SELECT pymem.context_read('ann', 'bot', query_vector => %s, embedder => 'e3', "
              "recall => pymem.recall(recency_weight => 0.1))", (v3,))
    export = c.execute("SELECT pymem.user_export('ann')").fetchone()[0]
    c.execute("SELECT pymem.user_import(%s, user_id => 'bob')", (psycopg.types.json.Jsonb(export),))
    c.execute("SELECT pymem.fact_add('user', 'ann', 'Is away this week', write => pymem.fact_write(ttl => '7 days'))")
    c.execute("SELECT * FROM pymem.purge()")  # nothing has expired yet: it reads, deletes nothing
    c.execute("SELECT pymem.fact_forget('user', 'ann', content => 'Likes green tea')")
    c.execute("SELECT pymem.facts_forget('user', 'bob')")
    c.execute("SELECT pymem.conversation_forget('bob')")
    c.execute("SELECT * FROM pymem.store_open('notes', keep_versions => true, read_only_prefixes => ARRAY['memory'])")
    c.execute("SELECT * FROM pymem.store_protect('notes', audit => true, "
              "read_only_prefixes => ARRAY['memory', 'policies'])")
    sha = c.execute("SELECT pymem.store_write('notes', 'a.txt', 'one')").fetchone()[0]
    c.execute("SELECT pymem.store_write('notes', 'a.txt', 'two', expected_sha => %s)", (sha,))
    c.execute("SELECT * FROM pymem.store_read('notes', 'a.txt')")
    c.execute("SELECT * FROM pymem.store_meta('notes', 'a.txt')")
    c.execute("SELECT * FROM pymem.store_list('notes')")
    c.execute("SELECT * FROM pymem.store_audit_tail('notes')")
    version = c.execute("SELECT max(version) FROM pymem.store_versions('notes', 'a.txt')").fetchone()[0]
    c.execute("SELECT * FROM pymem.store_version_read('notes', 'a.txt', %s)", (version,))
    c.execute("SELECT pymem.store_restore('notes', 'a.txt', %s)", (version,))
    c.execute("SELECT pymem.store_messages_append('notes', '[{\"role\": \"user\", \"content\": \"hi\"}]')")
    c.execute("SELECT * FROM pymem.store_messages_read('notes')")
    c.execute("SELECT * FROM pymem.browse_subjects()")
    c.execute("SELECT * FROM pymem.browse_users()")
    c.execute("SELECT * FROM pymem.browse_threads('ann')")
    c.execute("SELECT * FROM pymem.browse_messages('ann', from_seq => 1, max_rows => 2)")
    c.execute("SELECT * FROM pymem.browse_stores()")
    c.execute("SELECT * FROM pymem.browse_embedders()")
    assert c.execute("SELECT pymem.change_channel()").fetchone()[0].startswith("pymem_changes_")
    token = c.execute("SELECT id FROM pymem.mcp_token_create(user_id => 'ann', token_hash => pg_catalog.sha256('t'))").fetchone()[0]
    assert c.execute("SELECT user_id FROM pymem.mcp_token_lookup(pg_catalog.sha256('t'))").fetchone() == ("ann",)
    c.execute("SELECT * FROM pymem.mcp_token_list()")
    assert c.execute("SELECT * FROM pymem.mcp_token_revoke(id => %s)", (token,)).fetchone()
    c.execute("SELECT pymem.store_item_put('notes', '{users,ann}', 'prefs', '{\"theme\": \"dark\", \"n\": 1}', "
              "embedder => 'e3', fields => '{$}', embeddings => ARRAY['[1,2,3]']::text[]::vector[])")
    c.execute("SELECT * FROM pymem.store_item_get('notes', '{users,ann}', 'prefs')")
    c.execute("SELECT * FROM pymem.store_items_search('notes', '{users}', '{\"n\": {\"$gte\": 1}, \"theme\": [1]}')")
    c.execute("SELECT * FROM pymem.store_items_search('notes', query_vector => '[1,2,3]'::text::vector, embedder => 'e3')")
    c.execute("SELECT * FROM pymem.store_namespaces('notes', prefix => '{users}', suffix => '{*}', max_depth => 1)")
    c.execute("SELECT pymem.store_item_delete('notes', '{users,ann}', 'prefs')")
    c.execute("SELECT pymem.store_delete('notes', 'a.txt')")
    c.execute("SELECT pymem.store_drop('notes')")


@pytest.mark.slow
def test_planted_look_alikes_never_run(empty_dsn, admin, as_role, template_db):
    dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    _ensure_attacker(admin)
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        # the common setup: pgvector already in public, and a role that may create there
        c.execute("CREATE EXTENSION vector SCHEMA public")
        c.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(ATTACKER)))
        c.execute("CREATE SEQUENCE public.plant_hits")
        c.execute("GRANT USAGE, SELECT ON SEQUENCE public.plant_hits TO PUBLIC")
        c.execute(sql.SQL("ALTER DATABASE {} SET track_functions = 'all'").format(sql.Identifier(dbname)))

    # the names come from a migrated copy: the plants must exist before the first migrate
    types = catalog_types(psycopg.conninfo.make_conninfo(empty_dsn, dbname=template_db))
    ops, funcs = used_names()
    assert {"<>", "=", "<=", ">=", "||", "->>"} <= ops
    assert "vector" in types and "double precision" in types
    attacker = as_role(ATTACKER, on=empty_dsn)
    assert plant(attacker, types, ops, funcs) > 1000
    with psycopg.connect(attacker, autocommit=True) as c:
        # casts cannot be planted: CREATE CAST needs ownership of the source or target type
        for source, target in (("text", "public.vector"), ("double precision", "integer"), ("oid", "regrole")):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(f"CREATE CAST ({source} AS {target}) WITH INOUT")

    def hits() -> int:
        with psycopg.connect(empty_dsn, autocommit=True) as c:
            return c.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.plant_hits").fetchone()[0]

    psql = server.bin_dir() / "psql"
    migrate_sql = str(Path(str(sql_root())) / "migrate.sql")

    def psql_migrate() -> subprocess.CompletedProcess:
        return subprocess.run([str(psql), "-X", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn, "-f", migrate_sql],
                              capture_output=True, text=True, timeout=300)

    # 1. Planted before the first migrate: the released migrations 0002/0003 name pgvector's type
    # unqualified, so they are created with its schema on the path, and some of their CHECKs
    # would bind a look-alike. The migrate refuses to commit that (PM011, naming them); nothing
    # planted ran, in Python or in psql.
    with pytest.raises(pymem.MigrationError) as refused:
        pymem.migrate(empty_dsn)
    assert refused.value.sqlstate == "PM011"
    assert "operator public.>=(double precision,integer) (used by constraint facts_confidence_check" in str(refused.value)
    out = psql_migrate()
    assert out.returncode != 0 and "would call code outside pg_catalog" in out.stderr
    assert hits() == 0

    # 2. The administrator drops them (the hint), migrates, and the attacker plants them all
    # again: no later migrate, README example or API call ever runs one.
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        planted = c.execute("SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner "
                            "WHERE r.rolname = %s", (ATTACKER,)).fetchall()
        for (fn,) in planted:  # one at a time: DROP OWNED would need a lock per object at once
            c.execute(f"DROP FUNCTION {fn} CASCADE")
    pymem.migrate(empty_dsn)
    assert plant(attacker, types, ops, funcs) > 1000
    pymem.migrate(empty_dsn)
    out = psql_migrate()
    assert out.returncode == 0, out.stderr
    assert hits() == 0

    # every README SQL example, as the superuser (its helpers run as the caller)
    out = subprocess.run([str(psql), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", empty_dsn, "-f", "-"],
                         input="\n".join(blocks("sql")), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # every API function, as a login role granted the app role, whose search_path puts the
    # planted schema first
    with psycopg.connect(empty_dsn, autocommit=True) as c:
        c.execute("DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pymem_plant_app') THEN "
                  "CREATE ROLE pymem_plant_app LOGIN; END IF; END$$")
        c.execute("GRANT pymem_app TO pymem_plant_app")
    app = psycopg.conninfo.make_conninfo(empty_dsn, user="pymem_plant_app", options="-c search_path=public,pymem")
    with psycopg.connect(app, autocommit=True) as c:
        _api_calls(c)
    assert hits() == 0

    # this test's own catalog reads would call plants too (public is on its default path)
    safe = psycopg.conninfo.make_conninfo(empty_dsn, options="-c search_path=pg_catalog")
    with psycopg.connect(safe, autocommit=True) as c:
        granted = {r[0] for r in c.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'pymem'::regnamespace "
            "AND (has_function_privilege('pymem_app', p.oid, 'EXECUTE') "
            "OR has_function_privilege('pymem_reader', p.oid, 'EXECUTE')) AND p.proname NOT LIKE 'tenant\\_%'")}
    granted -= {"current_tenant"}  # inlined into every RLS policy: it never shows as a call
    missing = granted - _called(safe)
    assert not missing, f"not exercised: {sorted(missing)}"
