-- 0005_security: tenant isolation in the database. Applied once under the migration lock.
-- Roles, ownership and grants are (re)applied on every migrate by grants.sql.
--
-- The tenant is the project. A transaction or session names it in the setting pymem.tenant
-- (value 'p:' || project_id, so that the default project '' differs from "not set"): set it
-- with pymem.set_tenant(project_id). The API functions set it themselves, transaction-local,
-- from their project_id argument, and refuse (42501) an argument naming another tenant than
-- the one already set. Row-level security (forced, so it binds the tables' owner and
-- therefore the SECURITY DEFINER API too) shows and accepts only the tenant's rows; with no
-- tenant set, a role subject to RLS sees no row at all. Superusers and BYPASSRLS roles are not
-- subject to RLS (PostgreSQL's rule): keep them for administration.

-- Role names chosen at the first migrate (grants.sql); later migrates reuse them.
CREATE TABLE pymem.config (
    key   text PRIMARY KEY CHECK (key IN ('owner_role', 'app_role', 'reader_role')),
    value text NOT NULL CHECK (value <> '' AND pg_catalog.length(value) <= 63)
);

COMMENT ON TABLE pymem.config IS 'pymem installation settings (role names)';

-- Binding roles to projects. A login role that is (or is a member of) a role listed here may
-- serve only the projects listed for it: the API refuses other project_ids (42501) and RLS
-- shows it no rows of them, whatever it sets pymem.tenant to. Roles with no binding may serve
-- any project; superusers are never bound. Manage with pymem.tenant_bind / tenant_unbind.
CREATE TABLE pymem.tenant_roles (
    role_name  text NOT NULL,
    project_id text NOT NULL CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT tenant_roles_pkey PRIMARY KEY (role_name, project_id)
);

COMMENT ON TABLE pymem.tenant_roles IS 'Roles bound to the projects they may serve';

-- tenant_allowed(project_id): may the session's login role serve this project?
CREATE FUNCTION pymem.tenant_allowed(project_id text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user)
        OR NOT EXISTS (SELECT 1 FROM pymem.tenant_roles AS t
                        WHERE pg_catalog.pg_has_role(session_user, t.role_name, 'MEMBER'))
        OR EXISTS (SELECT 1 FROM pymem.tenant_roles AS t
                    WHERE t.project_id = tenant_allowed.project_id
                      AND pg_catalog.pg_has_role(session_user, t.role_name, 'MEMBER'));
$$;

-- current_tenant(): the project named by pymem.tenant, or NULL when none is set or the
-- session's role may not serve it. Every RLS policy compares project_id with
-- (SELECT pymem.current_tenant()): a sub-select, so it is evaluated once per statement (an
-- InitPlan) and stays an index condition, instead of once per row or per inner-loop rescan.
-- LANGUAGE sql without a SET clause so that it can inline; every name in it is qualified.
CREATE FUNCTION pymem.current_tenant()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT CASE WHEN pg_catalog.left(pg_catalog.current_setting('pymem.tenant', true), 2) = 'p:'
                 AND pymem.tenant_allowed(pg_catalog.substr(pg_catalog.current_setting('pymem.tenant', true), 3))
                THEN pg_catalog.substr(pg_catalog.current_setting('pymem.tenant', true), 3) END;
$$;

ALTER TABLE pymem.facts ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.facts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.facts
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.fact_embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.fact_embeddings FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.fact_embeddings
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.embedders ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.embedders FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.embedders
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.threads ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.threads FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.threads
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.messages FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.messages
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.message_embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.message_embeddings FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.message_embeddings
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.stores ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.stores FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.stores
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.store_messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_messages FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.store_messages
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.store_entries ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_entries FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.store_entries
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.store_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_audit FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.store_audit
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.store_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_versions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.store_versions
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
