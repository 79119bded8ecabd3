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

-- _tenant_enter(project_id): called first by every API function. Names the tenant for this
-- transaction when none is set; refuses (42501) a project_id other than the tenant already
-- named, so one transaction never touches two tenants.
CREATE OR REPLACE FUNCTION pymem._tenant_enter(project_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_current text := pg_catalog.current_setting('pymem.tenant', true);
BEGIN
    IF project_id IS NULL THEN
        RETURN;  -- the caller's own checks refuse NULL with a precise message
    END IF;
    IF NOT pymem.tenant_allowed(project_id) THEN
        RAISE EXCEPTION 'pymem: role % may not serve project %', session_user, pg_catalog.quote_literal(project_id)
            USING ERRCODE = '42501', HINT = 'See pymem.tenant_roles (README, Security).';
    END IF;
    IF v_current IS NULL OR v_current = '' THEN
        PERFORM pg_catalog.set_config('pymem.tenant', 'p:' || project_id, true);
    ELSIF v_current <> 'p:' || project_id THEN
        RAISE EXCEPTION 'pymem: this transaction belongs to another tenant than project %', pg_catalog.quote_literal(project_id)
            USING ERRCODE = '42501',
                  HINT = 'One transaction serves one project: commit, or call pymem.set_tenant() for the right one.';
    END IF;
END;
$$;

-- tenant_allowed(project_id): may the session's login role serve this project? (Created by
-- migrations/0005_security.sql; redefined here.) Superusers may; roles with no binding may
-- serve any project; a bound role (or a member of one) only its projects. Bindings whose role
-- no longer exists are ignored (a DROP ROLE never turns into an error for everyone else): the
-- join to pg_roles drops them before pg_has_role sees a name. Bindings are by name: a role
-- created later under a dropped role's name inherits its bindings (tenant_unbind removes them).
CREATE OR REPLACE FUNCTION pymem.tenant_allowed(project_id text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user)
        OR NOT EXISTS (SELECT 1 FROM pymem.tenant_roles AS t
                         JOIN pg_catalog.pg_roles AS r ON r.rolname = t.role_name
                        WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'))
        OR EXISTS (SELECT 1 FROM pymem.tenant_roles AS t
                     JOIN pg_catalog.pg_roles AS r ON r.rolname = t.role_name
                    WHERE t.project_id = tenant_allowed.project_id
                      AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'));
$$;

-- current_tenant(): the project named by pymem.tenant, or NULL when none is set or the
-- session's role may not serve it. (Created by migrations/0005_security.sql, whose RLS policies
-- call it; redefined here like every function.) Every policy compares project_id with
-- (SELECT pymem.current_tenant()): a sub-select, evaluated once per statement (an InitPlan),
-- so it stays an index condition. LANGUAGE sql without a SET clause so that it inlines; every
-- name in it is qualified.
CREATE OR REPLACE FUNCTION pymem.current_tenant()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT CASE WHEN pg_catalog.left(pg_catalog.current_setting('pymem.tenant', true), 2) = 'p:'
                 AND pymem.tenant_allowed(pg_catalog.substr(pg_catalog.current_setting('pymem.tenant', true), 3))
                THEN pg_catalog.substr(pg_catalog.current_setting('pymem.tenant', true), 3) END;
$$;

-- _project_check(project_id): a project id is a string of at most 256 characters, not '*'.
CREATE OR REPLACE FUNCTION pymem._project_check(project_id text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF project_id IS NULL OR project_id = '*' OR pg_catalog.length(project_id) > 256 THEN
        RAISE EXCEPTION 'pymem: project_id must be a string of at most 256 characters other than ''*'''
            USING ERRCODE = '22023';
    END IF;
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
