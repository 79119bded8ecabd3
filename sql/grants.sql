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
    -- the read functions (reader and app) and the write functions (app only)
    v_read text[] := ARRAY['about', 'fact_key', 'set_tenant', 'facts_newest', 'fact_history', 'fact_chain',
        'facts_search', 'facts_unembedded', 'window_read', 'summary_read', 'messages_recall',
        'messages_unembedded', 'context_read', 'user_export', 'store_read', 'store_meta', 'store_list',
        'store_audit_tail', 'store_versions', 'store_version_read', 'store_messages_read'];
    v_write text[] := ARRAY['fact_add', 'fact_supersede', 'fact_forget', 'facts_forget', 'fact_embeddings_put',
        'message_add', 'turn_record', 'summary_claim', 'summary_commit', 'summary_release',
        'message_embeddings_put', 'conversation_forget', 'user_import', 'store_open', 'store_protect', 'store_write',
        'store_delete', 'store_restore', 'store_messages_append', 'store_drop'];
    -- granted to neither: store_configure (weakens a store's protections: administrators only)
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
    -- by name, every overload (a rolling deploy keeps the old signature for a release)
    FOR r IN
        SELECT p.oid::regprocedure AS fn, p.proname = ANY (v_read) AS readable
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = 'pymem'::regnamespace AND p.proname = ANY (v_read || v_write)
    LOOP
        IF r.readable THEN
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I, %I', r.fn,
                                      v_roles ->> 'reader_role', v_roles ->> 'app_role');
        ELSE
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I', r.fn, v_roles ->> 'app_role');
        END IF;
    END LOOP;
END;
$$;
