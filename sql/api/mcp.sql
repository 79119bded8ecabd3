-- mcp.sql: the bearer tokens of the MCP server over HTTP (`pymem mcp --http`; the table:
-- migrations/0007_v0_2_0_operations.sql). A token is made by the client (pymem/mcp.py: `pymem
-- mcp-token create`), which sends only its sha256: the token never reaches the database, its
-- logs or its backups. A token serves one user of one project (and one agent, or none); the
-- server looks up the hash of each request's token here before any tool runs, and serves the
-- request as that user through the same API functions as every other door, so the server's
-- login role's tenant bindings apply (a token of a project the role may not serve is not found).
-- Re-applied on every migrate. No locks beyond the rows written.
--
-- Errors: 22023 invalid argument; 42501 a project the caller may not serve.

-- mcp_token_create: record a new MCP bearer token for one user of a project (and optionally
-- one agent), given the token's sha256 (32 bytes; the token itself is never sent). Returns its
-- id and creation time. 22023: a hash that is not 32 bytes, a user id that is empty, '*' or
-- longer than 256 characters, an agent id '' or '*'; 23505 a hash already recorded.
--   SELECT * FROM pymem.mcp_token_create(project_id => 'acme', user_id => 'alice', token_hash => pg_catalog.sha256('secret'));
CREATE OR REPLACE FUNCTION pymem.mcp_token_create(project_id text DEFAULT '', user_id text DEFAULT NULL,
                                                  agent_id text DEFAULT NULL, token_hash bytea DEFAULT NULL)
RETURNS TABLE (id bigint, created_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(mcp_token_create.project_id);
    PERFORM pymem._project_check(mcp_token_create.project_id);
    IF mcp_token_create.user_id IS NULL OR mcp_token_create.user_id IN ('', '*')
       OR pg_catalog.length(mcp_token_create.user_id) > 256 THEN
        RAISE EXCEPTION 'pymem: a token serves one user: user_id must be a string of 1 to 256 characters other than ''*'''
            USING ERRCODE = '22023';
    END IF;
    IF mcp_token_create.agent_id IN ('', '*') OR pg_catalog.length(mcp_token_create.agent_id) > 256 THEN
        RAISE EXCEPTION 'pymem: agent_id must be NULL or a string of 1 to 256 characters other than ''*'''
            USING ERRCODE = '22023';
    END IF;
    IF mcp_token_create.token_hash IS NULL OR pg_catalog.length(mcp_token_create.token_hash) <> 32 THEN
        RAISE EXCEPTION 'pymem: token_hash must be the token''s sha256 (32 bytes)'
            USING ERRCODE = '22023', HINT = 'pymem mcp-token create makes a token and sends only its hash.';
    END IF;
    RETURN QUERY
    INSERT INTO pymem.mcp_tokens AS t (project_id, user_id, agent_id, token_hash)
    VALUES (mcp_token_create.project_id, mcp_token_create.user_id, mcp_token_create.agent_id,
            mcp_token_create.token_hash)
    RETURNING t.id, t.created_at;
END;
$$;

-- mcp_token_lookup: who a bearer token serves: its id, project, user and agent, given the
-- token's sha256; no row when no token has that hash, when it is revoked, or when the
-- session's role may not serve its project (tenant bindings). Nothing about any other token is
-- read. The MCP server calls it for every HTTP request, before any tool runs.
--   SELECT * FROM pymem.mcp_token_lookup(token_hash => pg_catalog.sha256('secret'));
CREATE OR REPLACE FUNCTION pymem.mcp_token_lookup(token_hash bytea)
RETURNS TABLE (id bigint, project_id text, user_id text, agent_id text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_set text;
BEGIN
    IF mcp_token_lookup.token_hash IS NULL OR pg_catalog.length(mcp_token_lookup.token_hash) <> 32 THEN
        RETURN;
    END IF;
    -- the token_lookup policy (0007_v0_2_0_operations) shows the row of this hash only; cleared before returning
    v_set := pg_catalog.set_config('pymem.mcp_token', pg_catalog.encode(mcp_token_lookup.token_hash, 'hex'), true);
    RETURN QUERY
    SELECT t.id, t.project_id, t.user_id, t.agent_id
      FROM pymem.mcp_tokens AS t
     WHERE t.token_hash = mcp_token_lookup.token_hash AND t.revoked_at IS NULL
       AND pymem.tenant_allowed(t.project_id);
    v_set := pg_catalog.set_config('pymem.mcp_token', '', true);
END;
$$;

-- mcp_token_list: the MCP bearer tokens of a project, newest first (id, user, agent, created,
-- revoked: never a hash), at most max_rows (0..10000).
--   SELECT * FROM pymem.mcp_token_list(project_id => 'acme');
CREATE OR REPLACE FUNCTION pymem.mcp_token_list(project_id text DEFAULT '', max_rows integer DEFAULT 1000)
RETURNS TABLE (id bigint, user_id text, agent_id text, created_at timestamptz, revoked_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(mcp_token_list.project_id);
    PERFORM pymem._project_check(mcp_token_list.project_id);
    PERFORM pymem._check_limit('max_rows', mcp_token_list.max_rows);
    RETURN QUERY
    SELECT t.id, t.user_id, t.agent_id, t.created_at, t.revoked_at
      FROM pymem.mcp_tokens AS t
     WHERE t.project_id = mcp_token_list.project_id
     ORDER BY t.id DESC
     LIMIT mcp_token_list.max_rows;
END;
$$;

-- mcp_token_revoke: revoke a project's MCP bearer token by its id; the server refuses it from
-- the next request on. Returns the revocation time, or no row when the project has no such
-- token or it was already revoked.
--   SELECT * FROM pymem.mcp_token_revoke(project_id => 'acme', id => 1);
CREATE OR REPLACE FUNCTION pymem.mcp_token_revoke(project_id text DEFAULT '', id bigint DEFAULT NULL)
RETURNS TABLE (revoked_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(mcp_token_revoke.project_id);
    PERFORM pymem._project_check(mcp_token_revoke.project_id);
    RETURN QUERY
    UPDATE pymem.mcp_tokens AS t SET revoked_at = pg_catalog.clock_timestamp()
     WHERE t.project_id = mcp_token_revoke.project_id AND t.id = mcp_token_revoke.id AND t.revoked_at IS NULL
    RETURNING t.revoked_at;
END;
$$;
