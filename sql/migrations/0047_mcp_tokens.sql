-- 0047_mcp_tokens: the bearer tokens of `pymem mcp --http` (pymem/mcp.py, api/mcp.sql). A
-- token serves one user of one project (and optionally one agent); only its sha256 is stored
-- (the token itself is printed once by `pymem mcp-token create` and never reaches the
-- database: the client hashes it). Revoking sets revoked_at; a revoked token is refused at once.
--
-- Row-level security like every tenant table (policy tenant), plus one read-only policy,
-- token_lookup: a row is visible to the statement whose transaction set pymem.mcp_token to its
-- hash (hex). pymem.mcp_token_lookup sets and clears it around its one SELECT: that is how a
-- server finds a token's project before it knows the tenant, without seeing any other row. Only
-- the owner role may read the table at all (the API functions run as it), so nobody else can
-- use that setting. Applied once under the migration lock.
CREATE TABLE pymem.mcp_tokens (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    project_id  text        NOT NULL,
    user_id     text        NOT NULL,
    agent_id    text,
    token_hash  bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    revoked_at  timestamptz,
    CONSTRAINT mcp_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT mcp_tokens_hash_key UNIQUE (token_hash),
    CONSTRAINT mcp_tokens_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT mcp_tokens_user_id_check CHECK (user_id <> '*' AND user_id <> '' AND pg_catalog.length(user_id) <= 256),
    CONSTRAINT mcp_tokens_agent_id_check CHECK (agent_id <> '*' AND agent_id <> '' AND pg_catalog.length(agent_id) <= 256),
    CONSTRAINT mcp_tokens_hash_check CHECK (pg_catalog.length(token_hash) = 32)
);

COMMENT ON TABLE pymem.mcp_tokens IS 'Bearer tokens of the MCP server (pymem mcp --http): sha256 only, per project and user';

CREATE INDEX mcp_tokens_project ON pymem.mcp_tokens (project_id, id);

ALTER TABLE pymem.mcp_tokens ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.mcp_tokens FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.mcp_tokens
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
CREATE POLICY token_lookup ON pymem.mcp_tokens FOR SELECT
    USING (token_hash = pg_catalog.decode(pg_catalog.current_setting('pymem.mcp_token', true), 'hex'));
