-- grants.sql: roles, ownership and privileges. Run by every migrate (psql and Python) after
-- the API files, in the same transaction; idempotent, and it only ALTERs what differs.
--
-- Three roles (NOLOGIN; a DBA grants them to login roles):
--   owner  (default pymem_owner): owns schema pymem, its tables and functions. The API
--          functions are SECURITY DEFINER and run as this role; it is not a superuser, so the
--          forced row-level security of 0005_security.sql binds them too.
--   app    (default pymem_app): USAGE on the schema and EXECUTE on the API functions (all but
--          store_configure, which only the owner role and its members run); no table
--          privileges at all.
--   reader (default pymem_reader): EXECUTE on the read functions only.
-- Names: the settings pymem.owner_role / pymem.app_role / pymem.reader_role when given (e.g.
-- PGOPTIONS='-c pymem.app_role=my_app' psql ... or PYMEM_APP_ROLE), else what the first migrate
-- recorded in pymem.config, else the defaults. Creating a missing role needs CREATEROLE; else
-- the migrate fails with PM010 and names the statement an administrator must run.
DO $$
DECLARE
    v_key text;
    v_name text;
    v_old text;
    v_roles jsonb := '{}';
    v_owner text;
    r record;
    -- The reader role's functions, by name: they only read. The app role may execute every
    -- function of schema pymem whose name has no leading underscore, except the migration
    -- functions (migration_*), the two RLS lookups (PUBLIC has them) and v_admin: a new API
    -- function is granted without touching this file, and an internal helper never is.
    v_read text[] := ARRAY['about', 'fact_key', 'set_tenant', 'facts_newest', 'fact_history', 'fact_chain',
        'facts_search', 'facts_unembedded', 'window_read', 'summary_read', 'messages_recall',
        'messages_unembedded', 'context_read', 'user_export', 'store_read', 'store_meta', 'store_list',
        'store_audit_tail', 'store_versions', 'store_version_read', 'store_messages_read'];
    -- administrators only: binding roles to projects, weakening a store's protections
    v_admin text[] := ARRAY['tenant_bind', 'tenant_unbind', 'store_configure'];
BEGIN
    FOREACH v_key IN ARRAY ARRAY['owner_role', 'app_role', 'reader_role'] LOOP
        v_name := coalesce(
            NULLIF(pg_catalog.current_setting('pymem.' || v_key, true), ''),
            (SELECT c.value FROM pymem.config AS c WHERE c.key = v_key),
            'pymem_' || pg_catalog.split_part(v_key, '_', 1));
        -- a renamed app or reader role loses what the old name was granted
        SELECT c.value INTO v_old FROM pymem.config AS c WHERE c.key = v_key;
        IF v_old IS NOT NULL AND v_old <> v_name AND v_key <> 'owner_role'
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_old) THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pymem FROM %I', v_old);
            EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA pymem FROM %I', v_old);
        END IF;
        INSERT INTO pymem.config AS c (key, value) VALUES (v_key, v_name)
        ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value WHERE c.value <> EXCLUDED.value;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = v_name) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_name);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN
                    NULL;  -- created at the same moment by a migrate of another database
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'pymem: role % does not exist and % may not create it', v_name, current_user
                        USING ERRCODE = 'PM010',
                              HINT = pg_catalog.format('Ask an administrator to run: CREATE ROLE %I NOLOGIN;', v_name);
            END;
        END IF;
        v_roles := v_roles || pg_catalog.jsonb_build_object(v_key, v_name);
    END LOOP;
    v_owner := v_roles ->> 'owner_role';

    -- ownership (pgvector's own objects are never touched, even where it lives in schema pymem)
    IF NOT pg_catalog.pg_has_role(current_user, v_owner, 'MEMBER') AND (
           EXISTS (SELECT 1 FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pymem' AND n.nspowner <> v_owner::regrole)
        OR EXISTS (SELECT 1 FROM pymem._grants_objects() AS o WHERE o.owner <> v_owner::regrole)) THEN
        RAISE EXCEPTION 'pymem: % may not hand schema pymem to its owner role %', current_user, v_owner
            USING ERRCODE = 'PM010',
                  HINT = pg_catalog.format('Migrate as a superuser, as %I, or as a member of it (GRANT %I TO %I;).',
                                           v_owner, v_owner, current_user);
    END IF;
    IF (SELECT n.nspowner FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pymem') <> v_owner::regrole THEN
        EXECUTE pg_catalog.format('ALTER SCHEMA pymem OWNER TO %I', v_owner);
    END IF;
    FOR r IN SELECT o.kind, o.name FROM pymem._grants_objects() AS o WHERE o.owner <> v_owner::regrole LOOP
        EXECUTE pg_catalog.format('ALTER %s %s OWNER TO %I', r.kind, r.name, v_owner);
    END LOOP;

    -- privileges: nothing for PUBLIC but the tenant lookups that every RLS policy calls
    REVOKE ALL ON SCHEMA pymem FROM PUBLIC;
    FOR r IN SELECT o.kind, o.name FROM pymem._grants_objects() AS o LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM PUBLIC', r.kind, r.name);
    END LOOP;
    GRANT EXECUTE ON FUNCTION pymem.current_tenant(), pymem.tenant_allowed(text) TO PUBLIC;
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA pymem TO %I, %I', v_roles ->> 'app_role', v_roles ->> 'reader_role');
    -- every function: granted to the roles that may execute it, revoked from those that may not
    -- (so a function moved to v_admin loses an earlier grant)
    FOR r IN
        SELECT p.oid::regprocedure AS fn, p.proname = ANY (v_read) AS readable,
               p.proname !~ '^(_|migration_)' AND p.proname <> ALL (v_admin || ARRAY['current_tenant', 'tenant_allowed'])
                   AS app
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = 'pymem'::regnamespace
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                            WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
    LOOP
        EXECUTE pg_catalog.format(CASE WHEN r.app THEN 'GRANT EXECUTE ON FUNCTION %s TO %I'
                                       ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM %I' END,
                                  r.fn, v_roles ->> 'app_role');
        EXECUTE pg_catalog.format(CASE WHEN r.readable AND r.app THEN 'GRANT EXECUTE ON FUNCTION %s TO %I'
                                       ELSE 'REVOKE EXECUTE ON FUNCTION %s FROM %I' END,
                                  r.fn, v_roles ->> 'reader_role');
    END LOOP;
END;
$$;
