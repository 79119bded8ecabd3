-- tenant.sql: naming the tenant (project) of a transaction or session; see
-- migrations/0005_security.sql for the model. Re-applied on every migrate.

-- set_tenant(project_id, is_local): names the tenant for the current transaction (is_local,
-- the default) or the session. Roles that read the tables directly see only its rows.
--   SELECT pymem.set_tenant('acme');
CREATE OR REPLACE FUNCTION pymem.set_tenant(project_id text, is_local boolean DEFAULT true)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    -- the check is written out here: set_tenant runs as its caller, who may execute nothing else
    IF project_id IS NULL OR project_id = '*' OR pg_catalog.length(project_id) > 256 THEN
        RAISE EXCEPTION 'pymem: project_id must be a string of at most 256 characters other than ''*'''
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_catalog.set_config('pymem.tenant', 'p:' || project_id, is_local);
    RETURN project_id;
END;
$$;

-- tenant_bind(role_name, project_id): from now on, role_name (and its members) may serve
-- project_id, and only the projects it is bound to. For administrators (not granted to the
-- app or reader roles).
--   SELECT pymem.tenant_bind('acme_service', 'acme');
CREATE OR REPLACE FUNCTION pymem.tenant_bind(role_name text, project_id text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM pymem._project_check(project_id);
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = role_name) THEN
        RAISE EXCEPTION 'pymem: no role %', pg_catalog.quote_ident(role_name) USING ERRCODE = '22023';
    END IF;
    INSERT INTO pymem.tenant_roles AS t (role_name, project_id) VALUES (role_name, project_id)
    ON CONFLICT ON CONSTRAINT tenant_roles_pkey DO NOTHING;
    RETURN FOUND;
END;
$$;

-- tenant_unbind(role_name, project_id): removes one binding ('*': all of the role's).
CREATE OR REPLACE FUNCTION pymem.tenant_unbind(role_name text, project_id text DEFAULT '*')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    DELETE FROM pymem.tenant_roles AS t
     WHERE t.role_name = tenant_unbind.role_name
       AND (tenant_unbind.project_id = '*' OR t.project_id = tenant_unbind.project_id);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;
