-- grants.sql: roles, ownership and privileges. Run by every migrate (psql and Python) after
-- the API files, in the same transaction; idempotent, and it only ALTERs what differs.
--
-- Three roles (NOLOGIN; a DBA grants them to login roles):
--   owner  (default pymem_owner): owns schema pymem, its tables and functions. The API
--          functions are SECURITY DEFINER and run as this role; it is not a superuser, so the
--          forced row-level security of 0005_security.sql binds them too.
--   app    (default pymem_app): USAGE on the schema and EXECUTE on the API functions (all but
--          store_configure and text_search_configure, which only the owner role and its members
--          run); no table privileges at all.
--   reader (default pymem_reader): EXECUTE on the read functions only.
-- Names: the settings pymem.owner_role / pymem.app_role / pymem.reader_role when given (e.g.
-- PGOPTIONS='-c pymem.app_role=my_app' psql ... or PYMEM_APP_ROLE), else what the first migrate
-- recorded in pymem.config, else the defaults. Creating a missing role needs CREATEROLE; else
-- the migrate fails with PM010 and names the statement an administrator must run.
-- Handing objects to the owner role needs the right to become it (SET ROLE). A role that
-- lacks it (e.g. on PostgreSQL 16+, a CREATEROLE deploy user that just created the owner role:
-- createrole_self_grant is empty by default) grants the owner role to itself, with SET and
-- INHERIT (later migrates replace the owner's functions: they need its privileges), where it
-- may (ADMIN OPTION on the role; on PostgreSQL 15, CREATEROLE); else PM010 names the GRANT.
-- What the app and reader roles (and PUBLIC) may execute is defined by pymem._grants_diff() in
-- bootstrap.sql, which `pymem migrate --check` compares with the catalog too.
DO $$
DECLARE
    v_key text;
    v_name text;
    v_old text;
    v_roles jsonb := '{}';
    v_owner text;
    v_pg16 boolean := pg_catalog.current_setting('server_version_num')::integer >= 160000;
    v_grant text;
    r record;
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

    -- ownership (pgvector's own objects are never touched, even where it lives in schema pymem):
    -- the migrating role must be able to become the owner role (PostgreSQL 16+: SET; 15: MEMBER)
    IF EXISTS (SELECT 1 FROM pymem._grants_catalog() AS o WHERE o.owner <> v_owner::regrole)
       AND NOT (pg_catalog.pg_has_role(current_user, v_owner, CASE WHEN v_pg16 THEN 'SET' ELSE 'MEMBER' END)
                AND pg_catalog.pg_has_role(current_user, v_owner, 'USAGE')) THEN
        v_grant := pg_catalog.format('GRANT %I TO %I', v_owner, current_user)
            || CASE WHEN v_pg16 THEN ' WITH SET TRUE, INHERIT TRUE' ELSE '' END;
        BEGIN
            EXECUTE v_grant;
        EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN
            NULL;  -- no ADMIN OPTION on the owner role: an administrator must grant it (below)
        END;
        IF NOT pg_catalog.pg_has_role(current_user, v_owner, CASE WHEN v_pg16 THEN 'SET' ELSE 'MEMBER' END) THEN
            RAISE EXCEPTION 'pymem: % may not hand schema pymem to its owner role %', current_user, v_owner
                USING ERRCODE = 'PM010',
                      HINT = pg_catalog.format('Migrate as a superuser or as %I, or ask an administrator to run: %s;',
                                               v_owner, v_grant);
        END IF;
    END IF;
    FOR r IN SELECT o.kind, o.name FROM pymem._grants_catalog() AS o WHERE o.owner <> v_owner::regrole LOOP
        EXECUTE pg_catalog.format('ALTER %s %s OWNER TO %I', r.kind, r.name, v_owner);
    END LOOP;

    -- privileges. REVOKE ALL FROM PUBLIC first, on everything: it also writes out the default
    -- access lists (as every earlier pymem did, so upgraded and fresh catalogs stay equal).
    FOR r IN SELECT o.kind, o.name FROM pymem._grants_catalog() AS o LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM PUBLIC', r.kind, r.name);
    END LOOP;
    -- then grant what is due and revoke what is not (so a function moved to the administrators'
    -- list loses an earlier grant)
    FOR r IN SELECT * FROM pymem._grants_diff(v_roles ->> 'app_role', v_roles ->> 'reader_role') LOOP
        EXECUTE pg_catalog.format(CASE WHEN r.missing THEN 'GRANT %s ON %s %s TO %s' ELSE 'REVOKE %s ON %s %s FROM %s' END,
                                  r.privilege, r.kind, r.name, r.grantee);
    END LOOP;
END;
$$;
