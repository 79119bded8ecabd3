-- bootstrap.sql: the migration bookkeeping that every migrate run needs before anything else.
-- Run by migrate.sql (psql) and by `pymem migrate` (Python), always after the migration lock
-- (pg_advisory_lock) is held, outside any migration's transaction. Idempotent: a second run
-- changes nothing. Its table is frozen like a migration; change it only through a migration.

-- Schema pymem: the first migrate creates it, which needs CREATE on the database (its owner has
-- it); later migrates need the privileges of the schema's owner instead
-- (docs/cli-and-configuration.md "Requirements and compatibility"). A role lacking them gets
-- PM010 naming the statement an administrator must run, not a bare "permission denied" (CREATE
-- SCHEMA IF NOT EXISTS would check CREATE on the database even when the schema exists).
DO $$
DECLARE
    v_owner text;
    v_grant text;
BEGIN
    SELECT r.rolname INTO v_owner
      FROM pg_catalog.pg_namespace AS n JOIN pg_catalog.pg_roles AS r ON r.oid = n.nspowner
     WHERE n.nspname = 'pymem';
    IF NOT FOUND THEN
        IF NOT pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE') THEN
            RAISE EXCEPTION 'pymem: role % may not create schema pymem in database %',
                    current_user, pg_catalog.current_database()
                USING ERRCODE = 'PM010',
                      HINT = pg_catalog.format('Ask an administrator to run: GRANT CREATE ON DATABASE %I TO %I; '
                                               '(or migrate as the database''s owner)',
                                               pg_catalog.current_database(), current_user);
        END IF;
        CREATE SCHEMA IF NOT EXISTS pymem;
    ELSIF NOT pg_catalog.pg_has_role(current_user, v_owner, 'USAGE') THEN
        v_grant := pg_catalog.format('GRANT %I TO %I', v_owner, current_user)
            || CASE WHEN pg_catalog.current_setting('server_version_num')::integer >= 160000
                    THEN ' WITH SET TRUE, INHERIT TRUE' ELSE '' END;
        RAISE EXCEPTION 'pymem: role % may not migrate schema pymem: it lacks the privileges of the schema''s owner %',
                current_user, v_owner
            USING ERRCODE = 'PM010',
                  HINT = pg_catalog.format('Migrate as %I or a superuser, or ask an administrator to run: %s;',
                                           v_owner, v_grant);
    END IF;
END;
$$;

COMMENT ON SCHEMA pymem IS 'pymem: memory for AI agents (see docs/sql.md)';

-- One row per applied migration. The checksum is the sha256 of the migration file as applied.
CREATE TABLE IF NOT EXISTS pymem.schema_migrations (
    name          text        PRIMARY KEY,
    checksum      text        NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),
    pymem_version text        NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- The migrations of 0.2.0's development builds, 0006_subject_locks to 0049_learning_backfill,
-- were squashed before the release into 0006_v0_2_0_memory and 0007_v0_2_0_operations, which make
-- the same schema (the same catalog and pg_dump, tests/sql/test_migrations.py). A database that
-- applied all 34 as shipped (a development build's) has that schema: their rows are replaced by
-- the two, as applied when the last of the 34 was. One that applied only some of them, or one
-- whose file changed after it was applied, has none of the schemas 0.2.0 knows: PM013, and the
-- hint says what to do (CHANGELOG.md, 0.2.0).
DO $$
DECLARE
    v_applied text[];
    v_missing text[];
    v_changed text[];
    v_version text;
    v_at timestamptz;
BEGIN
    SELECT pg_catalog.array_agg(r.name ORDER BY r.name) FILTER (WHERE m.name IS NOT NULL),
           pg_catalog.array_agg(r.name ORDER BY r.name) FILTER (WHERE m.name IS NULL),
           pg_catalog.array_agg(r.name ORDER BY r.name) FILTER (WHERE m.checksum OPERATOR(pg_catalog.<>) r.checksum)
      INTO v_applied, v_missing, v_changed
      FROM (VALUES
                  ('0006_subject_locks', '5c302246a1538cd121730a83c98d3255a8b8ffb03b9573b3c2ab8103d9db76cd'),
                  ('0008_store_protections', '99962663a4ab41747e4f88a91c1e2dce2a855b040549fc73fa4fb5df6416e3b4'),
                  ('0009_result_types', 'ac72a3c22a09b0d0c34f86dff1a6c2c06f06cb976fc8d2b3c0d4e9b593aa95f9'),
                  ('0010_fact_merges', '8c8a766a9e379ec9fb41f8a705e73ebc82c2693410f1ef0816b979a53f2d9fdd'),
                  ('0012_api_checksum', 'ff90f2d64cd66251b49c8d6273bb789f3f626cd0a5139b2ca9dbb157bf322127'),
                  ('0013_message_times', 'b2a87eec5806b041b7ccfade19044aa0e59e8b0fc7376285246d5c41722dc645'),
                  ('0015_message_lexical', '4b2af3c2c0a383467a2bf96bf8b91a91ecefe8d531220dbe6c58d61f0eebbb63'),
                  ('0016_fact_lexical', 'f5f36aadb3a53dba079e05f58887efb4363f245855e0b189e7089d6aaa970d41'),
                  ('0017_lexemes_beside_vectors', 'dc7d5b1392bc50af1b5f7b28453a093f4c582062825194c75b34d2aa97dce7db'),
                  ('0018_learned_changes', '0c3ac6fc958c2fb4f7f335cfb20395dd0155da4c2fd41716320f48fa2426e2b3'),
                  ('0021_integrations', '00c11864a705dcf8e53497097fb874900e5eaeec5c6e9d156280e366ad559af6'),
                  ('0022_text_search', 'bae3dd7af53ed1676ba933edc3fc583401665a5f90349dc71594b3e499ca2787'),
                  ('0026_fact_key_lookup', '05b598dd9b1f9def4f2694b81d5cc74966c90aa9e2f4f0826801c3eac1267167'),
                  ('0028_embedded_by_partial', '073b8e9dd0d0916bd0de93d96382327ce6f691b603f418c9949b7502e824ed70'),
                  ('0029_recall_indexes', '418666d8458a66caa362beafe6f84c1071e70f0d7b2427aa1fe1ff2b5af11f5b'),
                  ('0031_shared_facts_by_id', '949c2ceebc1f0f4cd5dcd9b806542ead3c76a9469cb7c6768aea1b37bb6fe700'),
                  ('0032_scope_index_apart', '1949964e75c97b061605f2dc1613034b310a455eb047b0bfdaddcd5ec15a71f0'),
                  ('0033_query_vector', 'ca71e47d7770d8cf29ae4e6f1afe0eee89b5b06cc890708e8088ea7a6439d333'),
                  ('0034_shared_facts', 'cd2d6485578be3e3671aad75782b75252c5fed52035e51df0795b2179b497c4f'),
                  ('0035_active_facts', '1ff3e7b0209e1a3bc67290c3fc8c544daa3b4b6b9958446c214c78cdeef180f0'),
                  ('0036_recall_spec', 'ec6f16bdaa82722d3340aceb6bf5b8887ccda8ea747a08a81a57242f7cc94326'),
                  ('0037_fact_expiry', 'c8b073b862c7f80e23c6cae280cdd30ca78e9e7e0be51e9c17395777d80726f7'),
                  ('0038_erasures', '054105c99bb746f672ee1db7f313837cbf17d3698345a9a0af39fd6baa02d168'),
                  ('0039_store_expiry', 'bcb901bbb19d1834374c335b6aad4c62d58308dcb9e961e5b9c778df57b8de0d'),
                  ('0040_message_retention', '7760fbf9d729968b74bb13aeddf8300325419bc93d939f09b2393b6503a31909'),
                  ('0041_learning_queue', '0c1d55b78d03ecd048c45e1a6e865931ec6400135f02d8598457e92b043a1626'),
                  ('0042_change_feed', '99da5241e9cabab7d361e2260b94592fe026981ea74fb10387814f77b0f853a2'),
                  ('0043_valid_time', '28cc1b2eec6448ab286bcb42fbb29ac697f41d48436fb845ec6e690d5795e3c1'),
                  ('0044_recall_turns_times', 'adc13cf134f6431e3fc70f0280a2d4bbd0094d157398e708061923b43689a3ef'),
                  ('0045_recall_terms', '401c6292551823b6599c0148f94578b6a3b87a36936fc06b2f92607d1b810d0b'),
                  ('0046_recall_builder', '09e043ec19cee268a1ebd166fd3b64064683398ecf121c189256c3a853e5fbb1'),
                  ('0047_mcp_tokens', 'e05493f32fa4f1cb0824c8e573dd76618b4087d5289335ee34965ea98dc3452a'),
                  ('0048_feed_and_bounds', 'b16125446b79079c47126e0ddfac73f6b757ce818113a613af74631a51206e4e'),
                  ('0049_learning_backfill', '8a0efdc48e5262e0ee8c590d82e11c1a21eae186f8a92a423f7611ca2abbe9ff')) AS r(name, checksum)
      LEFT JOIN pymem.schema_migrations AS m ON m.name OPERATOR(pg_catalog.=) r.name;
    IF v_applied IS NULL THEN
        RETURN;
    END IF;
    IF v_missing IS NOT NULL OR v_changed IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: this database applied % of the 34 migrations of a 0.2.0 development build (0006_subject_locks to 0049_learning_backfill), which 0.2.0 ships squashed as 0006_v0_2_0_memory and 0007_v0_2_0_operations',
                pg_catalog.cardinality(v_applied)
            USING ERRCODE = 'PM013',
                  DETAIL = pg_catalog.format('not applied: %s; changed after they were applied: %s',
                                             coalesce(pg_catalog.array_to_string(v_missing, ', '), 'none'),
                                             coalesce(pg_catalog.array_to_string(v_changed, ', '), 'none')),
                  HINT = 'Migrate it first with the last development build that ships all 34 (git commit 199f012), then with this version; or export it with that build (pymem export), and import it into a new database migrated by this version.';
    END IF;
    SELECT m.pymem_version, m.applied_at INTO v_version, v_at
      FROM pymem.schema_migrations AS m WHERE m.name OPERATOR(pg_catalog.=) ANY (v_applied)
     ORDER BY m.applied_at DESC, m.name DESC LIMIT 1;
    DELETE FROM pymem.schema_migrations AS m WHERE m.name OPERATOR(pg_catalog.=) ANY (v_applied);
    INSERT INTO pymem.schema_migrations (name, checksum, pymem_version, applied_at)
    VALUES ('0006_v0_2_0_memory', 'af6e7a6f458b0abd1fbe26171d666b7d612065e2d4181f6d73d6649f275db821', v_version, v_at),
           ('0007_v0_2_0_operations', '206591f449ca93e0d2b6a2324dd306a711dfe3b6d23e2cff7a5c1048924ff31f', v_version, v_at);
    RAISE NOTICE 'pymem: the 34 migrations of a 0.2.0 development build are recorded as 0006_v0_2_0_memory and 0007_v0_2_0_operations (the same schema)';
END;
$$;

-- migration_pending(name, checksum): true when the migration still has to run; raises PM002
-- when it was applied from a file whose checksum differs (applied migrations never change).
CREATE OR REPLACE FUNCTION pymem.migration_pending(p_name text, p_checksum text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_applied text;
BEGIN
    SELECT m.checksum INTO v_applied FROM pymem.schema_migrations AS m WHERE m.name = p_name;
    IF NOT FOUND THEN
        RETURN true;
    END IF;
    IF v_applied <> p_checksum THEN
        RAISE EXCEPTION 'pymem: migration % was changed after it was applied', p_name
            USING ERRCODE = 'PM002',
                  DETAIL = pg_catalog.format('applied checksum %s, file checksum %s', v_applied, p_checksum),
                  HINT = 'Applied migrations are frozen: restore the file and put the change in a new migration.';
    END IF;
    RETURN false;
END;
$$;

-- migration_applied(name, checksum, version): records a migration inside its own transaction.
CREATE OR REPLACE FUNCTION pymem.migration_applied(p_name text, p_checksum text, p_version text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO pymem.schema_migrations (name, checksum, pymem_version)
    VALUES (p_name, p_checksum, p_version);
$$;

-- migration_search_path(): sets, for the current transaction, the pinned search_path under
-- which migrations, grants and every pymem function run: pg_catalog first (so no look-alike can
-- shadow a built-in), pymem, pg_temp last. Nothing a non-owner may write is on it: PostgreSQL
-- prefers an operator or function of exactly matching types anywhere on the path over a
-- pg_catalog one that needs an implicit cast, so pgvector's schema (often the world-writable
-- public) is never on it. pymem reaches pgvector through the wrappers that
-- migration_vector_functions() renders with pgvector's schema written out.
-- No SET clause of its own on purpose (a function's SET would undo its set_config at exit);
-- every name in it is qualified instead.
-- It also turns check_function_bodies back on (migration_types_path turns it off).
CREATE OR REPLACE FUNCTION pymem.migration_search_path()
RETURNS text
LANGUAGE sql VOLATILE SECURITY INVOKER
AS $$
    SELECT pg_catalog.set_config('search_path', 'pg_catalog, pymem, pg_temp', true)
      FROM (SELECT pg_catalog.set_config('check_function_bodies', 'on', true)) AS bodies;
$$;

-- migration_types_path(): the pinned path plus pgvector's schema (found, not assumed), for the
-- statements whose text names pgvector's type unqualified: the API files' CREATE FUNCTION
-- signatures and the released migrations 0002/0003 (frozen, so their text cannot change).
-- Only names resolved while creating objects see it (types, and the default and CHECK
-- expressions stored with them, which migration_check_dependencies() then verifies); nothing
-- executes under it: no DO block, no query (a test checks the files run under it).
-- It turns check_function_bodies off: function bodies are neither parsed nor resolved while
-- the API files are created (an old signature of a function may still exist then, which would
-- make a call in a body ambiguous); migration_validate_functions() checks every body later,
-- under the pinned path, once stale signatures are gone.
CREATE OR REPLACE FUNCTION pymem.migration_types_path()
RETURNS text
LANGUAGE sql VOLATILE SECURITY INVOKER
AS $$
    SELECT pg_catalog.set_config(
        'search_path',
        pg_catalog.concat_ws(', ', 'pg_catalog', 'pymem',
            (SELECT pg_catalog.quote_ident(n.nspname::text)
               FROM pg_catalog.pg_extension AS e
               JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
              WHERE e.extname = 'vector' AND n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pymem', 'pg_catalog']::pg_catalog.name[])),
            'pg_temp'),
        true)
      FROM (SELECT pg_catalog.set_config('check_function_bodies', 'off', true)) AS bodies;
$$;

-- migration_vector_functions(): (re)creates the few pgvector calls pymem's functions make as
-- inlinable SQL functions in schema pymem, with pgvector's schema written into their bodies
-- (no search_path involved). Run by every migrate before the API files; after
-- ALTER EXTENSION vector SET SCHEMA, run pymem migrate again.
--   pymem._cosine_distance(a, b)  a OPERATOR(<schema>.<=>) b (an HNSW index still matches it)
--   pymem._vector_dims(v), pymem._vector_norm(v)
CREATE OR REPLACE FUNCTION pymem.migration_vector_functions()
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_schema text;
BEGIN
    SELECT pg_catalog.quote_ident(n.nspname::text) INTO v_schema
      FROM pg_catalog.pg_extension AS e
      JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    IF v_schema IS NULL THEN
        RETURN;  -- only before 0001_foundation (which creates the extension) has run
    END IF;
    EXECUTE pg_catalog.format($f$
        CREATE OR REPLACE FUNCTION pymem._cosine_distance(a %1$s.vector, b %1$s.vector)
        RETURNS double precision
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
        AS 'SELECT a OPERATOR(%1$s.<=>) b'$f$, v_schema);
    EXECUTE pg_catalog.format($f$
        CREATE OR REPLACE FUNCTION pymem._vector_dims(v %1$s.vector)
        RETURNS integer
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
        AS 'SELECT %1$s.vector_dims(v)'$f$, v_schema);
    EXECUTE pg_catalog.format($f$
        CREATE OR REPLACE FUNCTION pymem._vector_norm(v %1$s.vector)
        RETURNS double precision
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
        AS 'SELECT %1$s.vector_norm(v)'$f$, v_schema);
END;
$$;

-- _owned_by_pymem(classid, objid): whether a catalog object (table, index, constraint, column
-- default, policy, trigger, rule, function, type) lives in schema pymem and is not an extension's.
CREATE OR REPLACE FUNCTION pymem._owned_by_pymem(p_classid oid, p_objid oid)
RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(CASE p_classid
        WHEN 'pg_catalog.pg_class'::pg_catalog.regclass THEN
            (SELECT c.relnamespace FROM pg_catalog.pg_class AS c WHERE c.oid = p_objid)
        WHEN 'pg_catalog.pg_constraint'::pg_catalog.regclass THEN
            (SELECT k.connamespace FROM pg_catalog.pg_constraint AS k WHERE k.oid = p_objid)
        WHEN 'pg_catalog.pg_attrdef'::pg_catalog.regclass THEN
            (SELECT c.relnamespace FROM pg_catalog.pg_attrdef AS a JOIN pg_catalog.pg_class AS c ON c.oid = a.adrelid
              WHERE a.oid = p_objid)
        WHEN 'pg_catalog.pg_policy'::pg_catalog.regclass THEN
            (SELECT c.relnamespace FROM pg_catalog.pg_policy AS y JOIN pg_catalog.pg_class AS c ON c.oid = y.polrelid
              WHERE y.oid = p_objid)
        WHEN 'pg_catalog.pg_trigger'::pg_catalog.regclass THEN
            (SELECT c.relnamespace FROM pg_catalog.pg_trigger AS t JOIN pg_catalog.pg_class AS c ON c.oid = t.tgrelid
              WHERE t.oid = p_objid)
        WHEN 'pg_catalog.pg_rewrite'::pg_catalog.regclass THEN
            (SELECT c.relnamespace FROM pg_catalog.pg_rewrite AS w JOIN pg_catalog.pg_class AS c ON c.oid = w.ev_class
              WHERE w.oid = p_objid)
        WHEN 'pg_catalog.pg_proc'::pg_catalog.regclass THEN
            (SELECT p.pronamespace FROM pg_catalog.pg_proc AS p WHERE p.oid = p_objid)
        WHEN 'pg_catalog.pg_type'::pg_catalog.regclass THEN
            (SELECT t.typnamespace FROM pg_catalog.pg_type AS t WHERE t.oid = p_objid)
        END OPERATOR(pg_catalog.=) (SELECT n.oid FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pymem'), false)
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS x
                        WHERE x.classid = p_classid AND x.objid = p_objid AND x.deptype = 'e');
$$;

-- migration_check_dependencies(): refuses (PM011) to commit a migration or API refresh when
-- anything stored in schema pymem (a CHECK, a default, an index expression, a policy, a
-- function's parameter default or signature) depends on an operator, function or type outside
-- pg_catalog and pymem that no extension owns: e.g. an exact-type look-alike that someone
-- planted in a writable schema before the first migrate.
CREATE OR REPLACE FUNCTION pymem.migration_check_dependencies()
RETURNS void
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_found text;
BEGIN
    SELECT pg_catalog.string_agg(DISTINCT pg_catalog.format('%s (used by %s)',
               pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0),
               pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid)), '; ')
      INTO v_found
      FROM (SELECT * FROM pg_catalog.pg_depend AS x
             -- built-in objects (OIDs below FirstNormalObjectId, 16384) are pg_catalog's: skipping
             -- them first leaves a handful of rows for pg_identify_object in any database
             WHERE x.refobjid OPERATOR(pg_catalog.>=) 16384::pg_catalog.oid
               AND x.refclassid = ANY (ARRAY['pg_catalog.pg_proc', 'pg_catalog.pg_operator', 'pg_catalog.pg_type',
                                             'pg_catalog.pg_opclass', 'pg_catalog.pg_collation']::pg_catalog.regclass[])
            OFFSET 0) AS d
      CROSS JOIN LATERAL pg_catalog.pg_identify_object(d.refclassid, d.refobjid, 0) AS ref
     WHERE ref.schema IS NOT NULL AND ref.schema <> ALL (ARRAY['pg_catalog', 'pymem'])
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS x
                        WHERE x.classid = d.refclassid AND x.deptype = 'e'
                          AND x.objid IN (d.refobjid,
                                          -- an extension type's array type: before PostgreSQL 17
                                          -- only its element type is recorded as the extension's
                                          (SELECT e.oid FROM pg_catalog.pg_type AS e
                                            WHERE d.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass
                                              AND e.typarray = d.refobjid)))
       AND pymem._owned_by_pymem(d.classid, d.objid);
    IF v_found IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: objects in schema pymem would call code outside pg_catalog, pymem and extensions'
            USING ERRCODE = 'PM011', DETAIL = v_found,
                  HINT = 'Someone created these look-alikes in a schema other roles may write. Drop them, then run pymem migrate again.';
    END IF;
END;
$$;

-- migration_drop_stale_functions(): the end of an API refresh. Every function of schema pymem
-- that this transaction did not (re)create, i.e. a signature that the current bootstrap.sql,
-- api/*.sql and grants.sql no longer define, is dropped, so that a changed parameter list never
-- leaves two versions of a function behind (with DEFAULT parameters, every named call would
-- then fail as ambiguous). A stale function that something stored depends on (a policy, an
-- index expression, a default: what a migration created) is kept, never dropped with CASCADE;
-- if a name then still has two signatures the migrate fails (PM012: the migration that changed
-- it must drop the old one). Extension members (pgvector installed in schema pymem) are never
-- touched. Returns the dropped signatures.
-- "Created by this transaction": its pg_proc row's xmin is this transaction's id (the API
-- refresh creates no function inside a subtransaction).
CREATE OR REPLACE FUNCTION pymem.migration_drop_stale_functions()
RETURNS text[]
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_dropped text[] := '{}';
    v_twice text;
    r record;
BEGIN
    FOR r IN
        SELECT p.oid::pg_catalog.regprocedure::text AS fn
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace
           AND p.xmin OPERATOR(pg_catalog.<>) pg_catalog.xid(pg_catalog.pg_current_xact_id())
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                            WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
                              AND d.deptype = 'e')
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                            WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.refobjid = p.oid
                              AND d.deptype = 'n')
         ORDER BY 1
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', r.fn);
        v_dropped := v_dropped || r.fn;
    END LOOP;
    SELECT pg_catalog.string_agg(p.oid::pg_catalog.regprocedure::text, ', ' ORDER BY p.oid::pg_catalog.regprocedure::text)
      INTO v_twice
      FROM pg_catalog.pg_proc AS p
     WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_proc AS q
                    WHERE q.pronamespace = p.pronamespace AND q.proname = p.proname AND q.oid <> p.oid);
    IF v_twice IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: functions with two signatures would remain: %', v_twice
            USING ERRCODE = 'PM012',
                  HINT = 'Something stored depends on the old signature: the migration that changes it must drop it (DROP FUNCTION pymem.f(<old types>)) or move what depends on it.';
    END IF;
    RETURN v_dropped;
END;
$$;

-- migration_validate_functions(): runs the language validator of every SQL and PL/pgSQL
-- function of schema pymem (check_function_bodies on, pinned path): the body checks that
-- creating them with check_function_bodies off skipped.
CREATE OR REPLACE FUNCTION pymem.migration_validate_functions()
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
SET check_function_bodies = on
AS $$
DECLARE
    v_count integer := 0;
    r record;
BEGIN
    FOR r IN
        SELECT p.oid, l.lanvalidator::pg_catalog.regproc::text AS validator
          FROM pg_catalog.pg_proc AS p
          JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
         WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace AND l.lanname = ANY (ARRAY['sql', 'plpgsql'])
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                            WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
                              AND d.deptype = 'e')
    LOOP
        EXECUTE pg_catalog.format('SELECT %s(%s)', r.validator, r.oid);
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END;
$$;

-- _grants_catalog(): schema pymem and its own tables, types and functions (never an extension's, e.g.
-- pgvector installed in schema pymem), with their owners and access lists (the default one
-- written out where the catalog holds NULL), schema first: what grants.sql hands to the owner
-- role and grants, and what migration_check_grants() compares.
CREATE OR REPLACE FUNCTION pymem._grants_catalog()
RETURNS TABLE (kind text, name text, proname name, owner oid, acl aclitem[])
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT o.* FROM (
    SELECT 'SCHEMA' AS kind, 'pymem' AS name, NULL::name AS proname, n.nspowner, coalesce(n.nspacl, acldefault('n', n.nspowner))
      FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pymem'
    UNION ALL
    SELECT 'TABLE', c.oid::regclass::text, NULL, c.relowner, coalesce(c.relacl, acldefault('r', c.relowner))
      FROM pg_catalog.pg_class AS c
     WHERE c.relnamespace = 'pymem'::regnamespace AND c.relkind IN ('r', 'p', 'v')  -- views: ALTER/GRANT ... TABLE
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                        WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
    UNION ALL  -- composite result types, domains, enums, ranges (never a table's row type or an array)
    SELECT 'TYPE', t.oid::regtype::text, NULL, t.typowner, coalesce(t.typacl, acldefault('T', t.typowner))
      FROM pg_catalog.pg_type AS t
     WHERE t.typnamespace = 'pymem'::regnamespace
       AND (t.typtype IN ('d', 'e', 'r')
            OR t.typtype = 'c' AND (SELECT c.relkind FROM pg_catalog.pg_class AS c WHERE c.oid = t.typrelid) = 'c')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                        WHERE d.classid = 'pg_catalog.pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e')
    UNION ALL
    SELECT 'FUNCTION', p.oid::regprocedure::text, p.proname, p.proowner, coalesce(p.proacl, acldefault('f', p.proowner))
      FROM pg_catalog.pg_proc AS p
     WHERE p.pronamespace = 'pymem'::regnamespace
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                        WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
    ) AS o
    ORDER BY o.kind <> 'SCHEMA', o.kind DESC, o.name;  -- the schema changes hands first
$$;

-- _grants_diff(app, reader): how the privileges of the app role, the reader role and PUBLIC on
-- _grants_catalog()'s objects differ from those pymem grants; one row per privilege to GRANT
-- (missing) or to REVOKE (not missing). grantee is written as SQL: a quoted role name, or PUBLIC.
-- What pymem grants:
--   app role:    USAGE on the schema; EXECUTE on every function whose name has no leading
--                underscore, except the migration functions (migration_*), the administrators'
--                ones (admin below) and the two RLS lookups: a new API function is granted
--                without touching this list, and an internal helper never is;
--   reader role: USAGE on the schema; EXECUTE on those of the app's functions listed in read
--                below (they only read);
--   PUBLIC:      EXECUTE on the tenant lookups that every RLS policy calls; nothing else.
-- No table privileges for any of them. grants.sql applies this diff; `pymem migrate --check`
-- reports it (migration_check_grants).
CREATE OR REPLACE FUNCTION pymem._grants_diff(p_app text, p_reader text)
RETURNS TABLE (kind text, name text, grantee text, privilege text, missing boolean)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH lists AS (
        SELECT ARRAY['about', 'fact_key', 'set_tenant', 'facts_newest', 'fact_history', 'fact_chain',
                     'facts_search', 'facts_unembedded', 'window_read', 'summary_read', 'messages_recall',
                     'messages_unembedded', 'context_read', 'recall', 'user_export', 'store_read', 'store_meta', 'store_list',
                     'store_audit_tail', 'store_versions', 'store_version_read', 'store_messages_read',
                     'browse_subjects', 'browse_users', 'browse_threads', 'browse_messages', 'browse_stores',
                     'browse_embedders', 'facts_list', 'fact_read', 'users_list',
                     'fact_get', 'store_item_get', 'store_items_search', 'store_namespaces',
                     'retention_policy', 'learning_status', 'learning_limits', 'fact_duplicates',
                     'change_position', 'change_feed_enabled']::name[] AS read,
               ARRAY['tenant_bind', 'tenant_unbind', 'store_configure', 'text_search_configure',
                     'recall_index_plan', 'recall_terms_fill', 'erasures', 'retention_configure',
                     'learning_limits_configure', 'change_feed_configure']::name[] AS admin,
               ARRAY['current_tenant', 'tenant_allowed']::name[] AS public
    ),
    grantees AS (
        SELECT r.oid AS role, pg_catalog.quote_ident(r.rolname::text) AS grantee,
               r.rolname = p_app AS app, r.rolname = p_reader AS reader
          FROM pg_catalog.pg_roles AS r WHERE r.rolname IN (p_app, p_reader)
        UNION ALL
        SELECT 0::oid, 'PUBLIC', false, false
    ),
    objects AS (SELECT * FROM pymem._grants_catalog()),
    due AS (
        SELECT o.kind, o.name, g.grantee, CASE o.kind WHEN 'SCHEMA' THEN 'USAGE' ELSE 'EXECUTE' END AS privilege
          FROM objects AS o CROSS JOIN grantees AS g CROSS JOIN lists AS l
         WHERE CASE o.kind
               WHEN 'SCHEMA' THEN g.app OR g.reader
               WHEN 'FUNCTION' THEN
                    (g.role = 0 AND o.proname = ANY (l.public))
                 OR ((g.app OR (g.reader AND o.proname = ANY (l.read)))
                     AND o.proname !~ '^(_|migration_)' AND o.proname <> ALL (l.admin || l.public))
               ELSE false END
    ),
    held AS (
        SELECT o.kind, o.name, g.grantee, a.privilege_type AS privilege
          FROM objects AS o
         CROSS JOIN LATERAL pg_catalog.aclexplode(o.acl) AS a
          JOIN grantees AS g ON g.role = a.grantee AND a.grantee <> o.owner
    )
    SELECT *, true FROM (SELECT * FROM due EXCEPT SELECT * FROM held) AS missing
    UNION ALL
    SELECT *, false FROM (SELECT * FROM held EXCEPT SELECT * FROM due) AS extra;
$$;

-- migration_check_grants(): what `pymem migrate --check` reports about roles, ownership and
-- privileges (one line each, naming what differs); no rows when grants.sql would change
-- nothing. The role names are the ones pymem.config recorded.
CREATE OR REPLACE FUNCTION pymem.migration_check_grants()
RETURNS SETOF text
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text;
    v_name text;
    v_roles jsonb := '{}';
    v_owner text;
    v_missing boolean := false;
BEGIN
    FOREACH v_key IN ARRAY ARRAY['owner_role', 'app_role', 'reader_role'] LOOP
        SELECT c.value INTO v_name FROM pymem.config AS c WHERE c.key = v_key;
        IF v_name IS NULL THEN
            RETURN NEXT pg_catalog.format('roles: pymem.config records no %s (run: pymem migrate)', v_key);
            v_missing := true;
        ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = v_name) THEN
            RETURN NEXT pg_catalog.format('roles: the %s %s does not exist (run: pymem migrate)',
                                          pg_catalog.replace(v_key, '_', ' '), v_name);
            v_missing := true;
        END IF;
        v_roles := v_roles || pg_catalog.jsonb_build_object(v_key, v_name);
    END LOOP;
    IF v_missing THEN
        RETURN;
    END IF;
    v_owner := v_roles ->> 'owner_role';
    RETURN QUERY
        SELECT pg_catalog.format('owner: %s owned by %s, not by the owner role %s (run: pymem migrate as a role that may hand them over)',
                   pg_catalog.array_to_string((pg_catalog.array_agg(pg_catalog.lower(o.kind) || ' ' || o.name ORDER BY o.kind DESC, o.name))[1:3], ', ')
                   || CASE WHEN pg_catalog.count(*) > 3 THEN pg_catalog.format(' and %s more', pg_catalog.count(*) - 3) ELSE '' END,
                   o.owner::regrole, v_owner)
          FROM pymem._grants_catalog() AS o
         WHERE o.owner <> v_owner::regrole
         GROUP BY o.owner;
    RETURN QUERY
        SELECT pg_catalog.format(CASE WHEN d.missing THEN 'grants: %s lacks %s on %s (run: pymem migrate)'
                                      ELSE 'grants: %s holds %s, which pymem does not grant, on %s (run: pymem migrate)' END,
                   d.grantee, d.privilege,
                   pg_catalog.array_to_string((pg_catalog.array_agg(pg_catalog.lower(d.kind) || ' ' || d.name ORDER BY d.name))[1:3], ', ')
                   || CASE WHEN pg_catalog.count(*) > 3 THEN pg_catalog.format(' and %s more', pg_catalog.count(*) - 3) ELSE '' END)
          FROM pymem._grants_diff(v_roles ->> 'app_role', v_roles ->> 'reader_role') AS d
         GROUP BY d.grantee, d.privilege, d.missing
         ORDER BY d.grantee, d.privilege, d.missing;
END;
$$;

-- migration_api_applied(checksum): the last step of an API refresh, in its transaction: records
-- the sha256 of the SQL it applied (bootstrap.sql, api/*.sql, grants.sql), so that `pymem migrate
-- --check` knows whether the last refresh completed with this pymem's files.
-- PL/pgSQL: pymem.config does not exist before 0005_security, when bootstrap.sql first runs.
CREATE OR REPLACE FUNCTION pymem.migration_api_applied(p_checksum text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO pymem.config AS c (key, value) VALUES ('api_sha256', p_checksum)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value WHERE c.value <> EXCLUDED.value;
END;
$$;

-- Citus (docs/scaling-out.md): citus.sql places the tables and delegates the functions
-- these name; on plain PostgreSQL they are never used.
-- _citus_tables(): pymem's placement of each table: 'reference' or the distribution column.
CREATE OR REPLACE FUNCTION pymem._citus_tables()
RETURNS TABLE (t text, method text, key text)
LANGUAGE sql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT * FROM (VALUES
        ('pymem.config', 'reference', NULL),
        ('pymem.tenant_roles', 'reference', NULL),
        ('pymem.embedders', 'reference', NULL),
        ('pymem.text_search', 'reference', NULL),
        ('pymem.threads', 'hash', 'user_id'),  -- first: the colocation group's anchor
        ('pymem.messages', 'hash', 'user_id'),
        ('pymem.message_embeddings', 'hash', 'user_id'),
        ('pymem.message_lexemes', 'hash', 'user_id'),
        ('pymem.recall_indexes', 'hash', 'user_id'),
        ('pymem.recall_terms', 'hash', 'user_id'),
        ('pymem.facts', 'hash', 'scope_id'),
        ('pymem.fact_embeddings', 'hash', 'scope_id'),
        ('pymem.fact_lexemes', 'hash', 'scope_id'),
        ('pymem.subject_locks', 'hash', 'scope_id'),
        ('pymem.shared_facts', 'reference', NULL),  -- agent and project facts, copied (citus.sql)
        ('pymem.shared_fact_embeddings', 'reference', NULL),
        ('pymem.shared_fact_lexemes', 'reference', NULL),
        ('pymem.stores', 'hash', 'store_key'),
        ('pymem.store_messages', 'hash', 'store_key'),
        ('pymem.store_entries', 'hash', 'store_key'),
        ('pymem.store_audit', 'hash', 'store_key'),
        ('pymem.store_versions', 'hash', 'store_key'),
        ('pymem.store_vectors', 'hash', 'store_key'),
        ('pymem.erasures', 'reference', NULL),
        ('pymem.retention', 'reference', NULL),
        ('pymem.learning_jobs', 'hash', 'user_id'),
        ('pymem.learning_usage', 'hash', 'user_id'),
        ('pymem.learning_limits', 'reference', NULL),
        ('pymem.mcp_tokens', 'reference', NULL),
        ('pymem.change_outbox', 'hash', 'shard_key'),  -- the change feed's rows written on workers
        ('pymem.change_channels', 'reference', NULL)) AS v(t, method, key)
     WHERE pg_catalog.to_regclass(v.t) IS NOT NULL;
$$;

-- _citus_functions(): the API functions (SECURITY DEFINER) delegated to the worker of their
-- key: the first of user_id, scope_id, store_key among their input arguments (0-based index).
-- Not user_forget: it writes rows of other keys too (the stores it is given, other stores'
-- actors, the receipt in a reference table), so it runs on the coordinator, in a transaction.
-- Nor mcp_token_create: its user_id is a token's, written to a reference table.
CREATE OR REPLACE FUNCTION pymem._citus_functions()
RETURNS TABLE (fn pg_catalog.regprocedure, arg text, idx integer)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT DISTINCT ON (p.oid) p.oid::pg_catalog.regprocedure, a.name, (a.n - 1)::integer
      FROM pg_catalog.pg_proc AS p
     CROSS JOIN LATERAL pg_catalog.unnest(p.proargnames[1:p.pronargs]) WITH ORDINALITY AS a(name, n)
     WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace AND p.prosecdef
       AND (p.proargmodes IS NULL OR p.proargmodes[1:p.pronargs] <@ ARRAY['i']::"char"[])
       AND a.name IN ('user_id', 'scope_id', 'store_key')
       AND p.proname NOT LIKE 'browse%' AND p.proname <> 'user_forget' AND p.proname <> 'mcp_token_create'
     ORDER BY p.oid, a.n;
$$;

-- migration_citus_problems(): on a database with the citus extension, what differs from the
-- distribution citus.sql makes (docs/scaling-out.md), one line each; nothing elsewhere.
-- `pymem migrate --check` reports them.
CREATE OR REPLACE FUNCTION pymem.migration_citus_problems()
RETURNS SETOF text
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT pg_catalog.format('citus: table %s is not placed as pymem places it (run: pymem migrate)', d.t)
      FROM pymem._citus_tables() AS d(t, method, key)
      LEFT JOIN pg_catalog.pg_dist_partition AS p ON p.logicalrelid = d.t::pg_catalog.regclass
     WHERE p.logicalrelid IS NULL
        OR (d.method = 'reference') <> (p.partmethod = 'n')
    UNION ALL
    SELECT pg_catalog.format('citus: function %s is not delegated by its %s (run: pymem migrate)', f.fn, f.arg)
      FROM pymem._citus_functions() AS f(fn, arg, idx)
      LEFT JOIN pg_catalog.pg_dist_object AS o ON o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND o.objid = f.fn
     WHERE o.distribution_argument_index IS DISTINCT FROM f.idx
    UNION ALL
    SELECT pg_catalog.format('citus: policy %s on %s still has a sub-select (run: pymem migrate)', p.policyname, p.tablename)
      FROM pg_catalog.pg_policies AS p
     WHERE p.schemaname = 'pymem' AND p.qual LIKE '%SELECT%';
END;
$$;


-- Citus's local plan cache (citus.sql step 7, docs/scaling-out.md "Which Citus"). Before 13.5 /
-- 14.3 (citusdata/citus#8783, fixed by #8824) it misses on every execution of a generic plan
-- whose shard is on the node and appends another plan: a backend grows without bound unless
-- pymem's PL/pgSQL functions plan every call. A build that carries the fix (a patched 14.0.1
-- still reports 14.0.1) is recognised by its behaviour, not its version.
--
-- migration_citus_probe_node(key, calls): run on one node (a worker), with a key whose shard
-- is on it: a static single-shard read of pymem.threads, planned generically, `calls` times in
-- this backend; the bytes by which the backend's CachedPlan memory contexts grew between the
-- 5th and the last execution. 0 on a fixed Citus (the local plan is cached once); on a leaking
-- one every execution adds a plan (a few kB each).
CREATE OR REPLACE FUNCTION pymem.migration_citus_probe_node(p_key text, p_calls integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n bigint;
    v_size bigint;
    v_before bigint;
BEGIN
    IF p_calls IS NULL OR p_calls < 10 OR p_calls > 10000 THEN
        RAISE EXCEPTION 'pymem: calls must be between 10 and 10000, not %', p_calls USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. p_calls LOOP
        SELECT pg_catalog.count(*) INTO v_n FROM pymem.threads AS t WHERE t.user_id = p_key;
        -- the same statements measure both times (and once before, so that their own plans
        -- are in both measures)
        IF i = 3 OR i = 5 OR i = p_calls THEN
            v_size := (SELECT pg_catalog.sum(c.total_bytes)::bigint FROM pg_catalog.pg_backend_memory_contexts AS c
                        WHERE c.name = 'CachedPlan');
            v_before := CASE WHEN i <= 5 THEN v_size ELSE v_before END;
        END IF;
    END LOOP;
    RETURN v_size - v_before;
END;
$$;

-- migration_citus_probe(): on a Citus coordinator, whether the cluster's local plan cache
-- leaks: migration_citus_probe_node on every node that holds a shard of pymem.threads (in
-- parallel, each with a key whose shard is on it, 40 executions, its own connection). Returns,
-- and keeps for the session as pymem.citus_plan_cache_probe:
--   'fixed: ...'    no node grew (the cache keeps one plan per shard)
--   'leaks: ...'    a node grew (> 16 kB over 35 executions; a leak adds ~100 kB): the nodes
--   'unknown: ...'  nothing to probe (pymem not distributed yet, no node holds a shard, the
--                   function not yet on the workers) or the probe failed: why
-- `pymem migrate` runs it before the API refresh, and once more after it when it said unknown
-- (a fresh cluster: the tables were distributed by that refresh).
CREATE OR REPLACE FUNCTION pymem.migration_citus_probe()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_calls constant integer := 40;
    v_limit constant bigint := 16384;
    v_result text;
    v_names text[] := '{}';
    v_ports integer[] := '{}';
    v_commands text[] := '{}';
    v_key text;
    v_leaks text[] := '{}';
    v_failed text[] := '{}';
    v_fixed text[] := '{}';
    r record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension AS e WHERE e.extname = 'citus') THEN
        v_result := 'unknown: not a Citus database';
    ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                       WHERE n.nspname = 'pymem' AND c.relname = 'threads')
          OR NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS p
                          WHERE p.logicalrelid = 'pymem.threads'::pg_catalog.regclass) THEN
        v_result := 'unknown: pymem is not distributed yet';
    ELSE
        FOR r IN SELECT DISTINCT n.nodename, n.nodeport, n.groupid
                   FROM pg_catalog.pg_dist_shard AS s
                   JOIN pg_catalog.pg_dist_placement AS p ON p.shardid = s.shardid
                   JOIN pg_catalog.pg_dist_node AS n ON n.groupid = p.groupid
                  WHERE s.logicalrelid = 'pymem.threads'::pg_catalog.regclass
                    AND n.noderole = 'primary' AND n.isactive
                  ORDER BY n.nodename, n.nodeport LOOP
            SELECT k.key INTO v_key
              FROM pg_catalog.generate_series(0, 99999) AS i(n)
             CROSS JOIN LATERAL (SELECT 'pymem-plan-cache-probe-' || i.n AS key) AS k
              JOIN pg_catalog.pg_dist_placement AS p
                ON p.shardid = pg_catalog.get_shard_id_for_distribution_column('pymem.threads', k.key)
               AND p.groupid = r.groupid
             LIMIT 1;
            CONTINUE WHEN v_key IS NULL;
            v_names := v_names || r.nodename::text;
            v_ports := v_ports || r.nodeport;
            v_commands := v_commands || pg_catalog.format('SELECT pymem.migration_citus_probe_node(%L, %s)', v_key, v_calls);
        END LOOP;
        IF pg_catalog.cardinality(v_names) = 0 THEN
            v_result := 'unknown: no node holds a shard of pymem.threads';
        ELSE
            BEGIN
                FOR r IN SELECT w.node_name, w.node_port, w.success, w.result
                           FROM pg_catalog.master_run_on_worker(v_names, v_ports, v_commands, true) AS w LOOP
                    IF NOT r.success OR r.result !~ '^-?[0-9]+$' THEN
                        v_failed := v_failed || pg_catalog.format('%s:%s (%s)', r.node_name, r.node_port, r.result);
                    ELSIF r.result::bigint > v_limit THEN
                        v_leaks := v_leaks || pg_catalog.format('%s:%s grew %s bytes over %s generic executions',
                                                                r.node_name, r.node_port, r.result, v_calls - 5);
                    ELSE
                        v_fixed := v_fixed || pg_catalog.format('%s:%s', r.node_name, r.node_port);
                    END IF;
                END LOOP;
            EXCEPTION WHEN OTHERS THEN
                v_failed := v_failed || SQLERRM;
            END;
            IF pg_catalog.cardinality(v_leaks) > 0 THEN
                v_result := 'leaks: ' || pg_catalog.array_to_string(v_leaks, '; ');
            ELSIF pg_catalog.cardinality(v_failed) > 0 THEN
                v_result := 'unknown: the probe failed on ' || pg_catalog.array_to_string(v_failed, '; ');
            ELSE
                v_result := pg_catalog.format('fixed: no growth over %s generic executions on %s', v_calls - 5,
                                              pg_catalog.array_to_string(v_fixed, ', '));
            END IF;
        END IF;
    END IF;
    PERFORM pg_catalog.set_config('pymem.citus_plan_cache_probe', v_result, false);
    RETURN v_result;
END;
$$;

-- migration_citus_plan_every_call(): whether pymem's PL/pgSQL functions must plan every call
-- on this Citus (citus.sql step 7), and why. In order:
--   1. the operator's setting pymem.citus_plan_every_call: on / off (auto or unset: go on);
--   2. a Citus that reports 14.3+ or 13.5+ (any later major too): off;
--   3. this session's probe (migration_citus_probe): fixed: off, leaks: on;
--   4. no probe answer: on (safe: a leak is unbounded, the protection costs ~1x-1.2x a call).
CREATE OR REPLACE FUNCTION pymem.migration_citus_plan_every_call(OUT plan_every_call boolean, OUT reason text)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_setting text := pg_catalog.lower(pg_catalog.btrim(coalesce(
        pg_catalog.current_setting('pymem.citus_plan_every_call', true), '')));
    v_version text := (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'citus');
    v_major integer;
    v_minor integer;
    v_probe text := NULLIF(pg_catalog.current_setting('pymem.citus_plan_cache_probe', true), '');
BEGIN
    IF v_setting IN ('on', 'true', 'yes', '1') THEN
        plan_every_call := true;
        reason := 'pymem.citus_plan_every_call = on (the operator''s setting)';
        RETURN;
    ELSIF v_setting IN ('off', 'false', 'no', '0') THEN
        plan_every_call := false;
        reason := 'pymem.citus_plan_every_call = off (the operator''s setting)';
        RETURN;
    ELSIF v_setting NOT IN ('', 'auto') THEN
        RAISE EXCEPTION 'pymem: pymem.citus_plan_every_call must be on, off or auto, not %', pg_catalog.quote_literal(v_setting)
            USING ERRCODE = '22023', HINT = 'docs/scaling-out.md "Which Citus".';
    END IF;
    IF v_version IS NULL THEN
        plan_every_call := false;
        reason := 'not a Citus database';
        RETURN;
    END IF;
    v_major := pg_catalog.split_part(v_version, '.', 1)::integer;
    v_minor := pg_catalog.split_part(pg_catalog.split_part(v_version, '.', 2), '-', 1)::integer;
    IF v_major > 14 OR (v_major = 14 AND v_minor >= 3) OR (v_major = 13 AND v_minor >= 5) THEN
        plan_every_call := false;
        reason := pg_catalog.format('Citus %s has the fix of its local plan cache (14.3+, 13.5+)', v_version);
    ELSIF v_probe LIKE 'fixed:%' THEN
        plan_every_call := false;
        reason := pg_catalog.format('Citus %s, probed: %s', v_version, v_probe);
    ELSIF v_probe LIKE 'leaks:%' THEN
        plan_every_call := true;
        reason := pg_catalog.format('Citus %s, probed: %s', v_version, v_probe);
    ELSE
        plan_every_call := true;
        reason := pg_catalog.format('Citus %s, not probed (%s): planning every call to be safe; run pymem migrate again '
                                    'once pymem is distributed, or set pymem.citus_plan_every_call',
                                    v_version, coalesce(v_probe, 'no probe in this session'));
    END IF;
END;
$$;

-- migration_citus_plan_cache_apply(): citus.sql step 7 as decided by
-- migration_citus_plan_every_call(): on, every PL/pgSQL function of pymem plans its
-- statements for each call (force_custom_plan: no generic plan, so nothing enters Citus's local
-- plan cache), but for the few that read only the node's own copy of a reference table and the
-- two lexeme triggers (auto: see below); off, those settings are reset (the functions as the API
-- files declare them). Idempotent; returns the reason. ALTER FUNCTION reaches every node.
CREATE OR REPLACE FUNCTION pymem.migration_citus_plan_cache_apply()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_on boolean;
    v_reason text;
    v_function regprocedure;
    v_mode text;
    v_current text;
BEGIN
    SELECT d.plan_every_call, d.reason INTO v_on, v_reason FROM pymem.migration_citus_plan_every_call() AS d;
    FOR v_function, v_mode, v_current IN
        SELECT p.oid::pg_catalog.regprocedure,
               -- auto for the readers of the node's own copy of a reference table (citus.sql): a
               -- shard read by its name is a plain table to the planner, so nothing enters
               -- Citus's local plan cache, and PL/pgSQL keeps their plans (the policies call
               -- tenant_allowed ~20 times a turn: its read planned each time, docs/performance.md,
               -- "Measured in the SQL"). Set, not left out: a function runs with its
               -- caller's plan_cache_mode unless it sets its own. A node without the copy reads
               -- through Citus remotely, which caches no local plan either.
               -- The lexeme triggers' Citus bodies too: their own statements read the
               -- transition table and run dynamic SQL (never cached), so auto only keeps the
               -- plans of what runs under them, the foreign-key checks of their inserts into
               -- the shards among them (planned on every call otherwise: docs/performance.md).
               CASE WHEN p.oid IN ('pymem.tenant_allowed(text)'::pg_catalog.regprocedure,
                                   'pymem._tenant_allowed_bound(text)'::pg_catalog.regprocedure,
                                   'pymem._text_search_config(text)'::pg_catalog.regprocedure,
                                   'pymem._embedder_dimension(text, text)'::pg_catalog.regprocedure)
                         AND p.prosrc LIKE '%pg_catalog.to_regclass(%'  -- the body that reads the copy
                    THEN 'auto'
                    WHEN p.oid IN ('pymem._fact_lexemes_add()'::pg_catalog.regprocedure,
                                   'pymem._message_lexemes_add()'::pg_catalog.regprocedure)
                         AND p.prosrc LIKE '%pymem._local_shard(%'  -- the Citus body
                    THEN 'auto'
                    ELSE 'force_custom_plan' END,
               (SELECT pg_catalog.substr(x, 17) FROM pg_catalog.unnest(p.proconfig) AS x WHERE x LIKE 'plan_cache_mode=%')
          FROM pg_catalog.pg_proc AS p
          JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
         WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace AND l.lanname = 'plpgsql'
           AND p.prokind = 'f'
           AND p.oid <> 'pymem.migration_citus_probe_node(text, integer)'::pg_catalog.regprocedure  -- the probe
         ORDER BY p.oid
    LOOP
        IF v_on AND v_current IS DISTINCT FROM v_mode THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s SET plan_cache_mode = %s', v_function, v_mode);
        ELSIF NOT v_on AND v_current IN ('force_custom_plan', 'auto') THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET plan_cache_mode', v_function);
        END IF;
    END LOOP;
    RETURN v_reason;
END;
$$;

-- migration_citus_plan_cache_after(): the end of a migrate on a Citus database, after the API
-- refresh committed. When this session's probe could not answer before the refresh (a fresh
-- cluster: the refresh distributed the tables), it probes again and applies the decision.
-- Returns the probe's answer (NULL: nothing to do).
CREATE OR REPLACE FUNCTION pymem.migration_citus_plan_cache_after()
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF coalesce(pg_catalog.current_setting('pymem.citus_plan_cache_probe', true), '') LIKE 'unknown:%'
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_extension AS e WHERE e.extname = 'citus') THEN
        RETURN pymem.migration_citus_probe() || ' => ' || pymem.migration_citus_plan_cache_apply();
    END IF;
    RETURN NULL;
END;
$$;

-- migration_shared_problems(): each of the copies of agent and project facts (shared_facts,
-- shared_fact_embeddings, shared_fact_lexemes: migrations/0006_v0_2_0_memory.sql, sql/citus.sql)
-- whose columns differ from its table's (name, position, type, NOT NULL), one line each; none
-- when they agree. On every database: a migration that changes pymem.facts must change
-- pymem.shared_facts the same way, or every agent-fact write on a Citus cluster breaks.
-- `pymem migrate --check` reports them.
CREATE OR REPLACE FUNCTION pymem.migration_shared_problems()
RETURNS SETOF text
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH cols AS (
        SELECT c.relname::text AS t, a.attnum AS n, a.attname::text AS col,
               pg_catalog.format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS notnull
          FROM pg_catalog.pg_attribute AS a
          JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid
         WHERE c.relnamespace = 'pymem'::pg_catalog.regnamespace AND a.attnum > 0 AND NOT a.attisdropped
           AND c.relname IN ('facts', 'fact_embeddings', 'fact_lexemes',
                             'shared_facts', 'shared_fact_embeddings', 'shared_fact_lexemes')
    ), pairs AS (
        SELECT v.t, 'shared_' || v.t AS twin FROM (VALUES ('facts'), ('fact_embeddings'), ('fact_lexemes')) AS v(t)
         WHERE pg_catalog.to_regclass('pymem.' || v.t) IS NOT NULL
    )
    SELECT pg_catalog.format('shared: table pymem.%s is missing (run: pymem migrate)', p.twin)
      FROM pairs AS p
     WHERE pg_catalog.to_regclass('pymem.' || p.twin) IS NULL
    UNION ALL
    SELECT pg_catalog.format('shared: pymem.%s differs from pymem.%s: %s (a migration that changes one must change the other)',
                             p.twin, p.t, d.diff)
      FROM pairs AS p
     CROSS JOIN LATERAL (
           SELECT pg_catalog.string_agg(pg_catalog.format('%s has %s %s%s at %s', x.side, x.col, x.type,
                                                          CASE WHEN x.notnull THEN ' NOT NULL' ELSE '' END, x.n),
                                        '; ' ORDER BY x.n, x.side) AS diff
             FROM ((SELECT p.t AS side, y.n, y.col, y.type, y.notnull FROM cols AS y WHERE y.t = p.t
                    EXCEPT SELECT p.t, z.n, z.col, z.type, z.notnull FROM cols AS z WHERE z.t = p.twin)
                   UNION ALL
                   (SELECT p.twin, z.n, z.col, z.type, z.notnull FROM cols AS z WHERE z.t = p.twin
                    EXCEPT SELECT p.twin, y.n, y.col, y.type, y.notnull FROM cols AS y WHERE y.t = p.t)) AS x) AS d
     WHERE pg_catalog.to_regclass('pymem.' || p.twin) IS NOT NULL AND d.diff IS NOT NULL;
$$;

-- migration_owner_login(): what `pymem migrate --check` (and `pymem migrate`) warn about the role
-- that owns schema pymem, one line each; none when it cannot log in (NOLOGIN, how grants.sql
-- creates it). The owner owns every table and may turn their row-level security off, so a login
-- without a password makes anyone who can connect the owner of every tenant's data. On Citus it
-- must log in (citus.sql: the cluster's connections to the workers run as it). What the caller
-- may see decides what is checked: whether it has a password is in pg_authid, and which
-- pg_hba.conf lines trust it in pg_hba_file_rules, both readable by superusers only (and by the
-- roles they were granted to); otherwise the line says what could not be seen. Warnings, not
-- problems: the schema is current either way. SECURITY INVOKER on purpose (it reads as the caller).
CREATE OR REPLACE FUNCTION pymem.migration_owner_login()
RETURNS SETOF text
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner name;
    v_login boolean;
    v_password boolean;  -- NULL: pg_authid is not readable
    v_trust text;
    v_harden constant text := 'give it a password (ALTER ROLE %I PASSWORD ...) and let pg_hba.conf trust no '
        'address for it, or make it NOLOGIN where it need not log in (docs/security.md)';
BEGIN
    SELECT r.rolname, r.rolcanlogin INTO v_owner, v_login
      FROM pg_catalog.pg_namespace AS n JOIN pg_catalog.pg_roles AS r ON r.oid = n.nspowner
     WHERE n.nspname = 'pymem';
    IF NOT coalesce(v_login, false) THEN
        RETURN;
    END IF;
    IF pg_catalog.has_table_privilege('pg_catalog.pg_authid', 'SELECT') THEN
        EXECUTE 'SELECT a.rolpassword IS NOT NULL FROM pg_catalog.pg_authid AS a WHERE a.rolname = $1'
           INTO v_password USING v_owner;
    END IF;
    IF v_password IS NULL THEN
        RETURN NEXT pg_catalog.format('security: the owner role %I can log in (LOGIN); whether it has a password '
            'only a superuser can see (pg_authid): without one, anyone who can connect as it owns every pymem '
            'table; ' || v_harden, v_owner, v_owner);
    ELSIF NOT v_password THEN
        RETURN NEXT pg_catalog.format('security: the owner role %I can log in (LOGIN) without a password: '
            'wherever pg_hba.conf trusts a connection, anyone who can connect becomes the owner of every pymem '
            'table and can turn row-level security off; ' || v_harden, v_owner, v_owner);
    END IF;
    IF pg_catalog.has_table_privilege('pg_catalog.pg_hba_file_rules', 'SELECT') THEN
        EXECUTE $q$
            SELECT pg_catalog.string_agg(pg_catalog.format('%s (%s %s)', h.line_number, h.type,
                                         pg_catalog.array_to_string(h.database, ',')), ', ' ORDER BY h.line_number)
              FROM pg_catalog.pg_hba_file_rules AS h
             WHERE h.error IS NULL AND h.auth_method = 'trust'
               AND EXISTS (SELECT 1 FROM pg_catalog.unnest(h.user_name) AS u
                            WHERE u IN ('all', $1)
                               OR (u LIKE '+%' AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS g
                                                            WHERE g.rolname = pg_catalog.substr(u, 2)
                                                              AND pg_catalog.pg_has_role($1, g.oid, 'MEMBER')))
                               OR (u LIKE '/%' AND $1 ~ pg_catalog.substr(u, 2)))
        $q$ INTO v_trust USING v_owner;
        IF v_trust IS NOT NULL THEN
            RETURN NEXT pg_catalog.format('security: pg_hba.conf trusts the owner role %I (no password asked) '
                'on line %s: anyone who can connect that way becomes the owner of every pymem table; '
                'use scram-sha-256 or cert there, or lines that exclude it', v_owner, v_trust);
        END IF;
    END IF;
END;
$$;
