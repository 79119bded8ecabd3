-- 0012_api_checksum: pymem.config also records the sha256 of the SQL that the last completed
-- API refresh applied (bootstrap.sql, api/*.sql, grants.sql; written by
-- pymem.migration_api_applied in the refresh's own transaction), so that `pymem migrate --check`
-- can tell a refresh that never completed (e.g. grants.sql failed: the functions, roles and
-- grants were rolled back while the migrations stayed applied), or another pymem's, from a
-- current one. Applied once under the migration lock.
ALTER TABLE pymem.config
    DROP CONSTRAINT config_key_check,
    DROP CONSTRAINT config_value_check,
    ADD CONSTRAINT config_key_check CHECK (key IN ('owner_role', 'app_role', 'reader_role', 'api_sha256')),
    ADD CONSTRAINT config_value_check CHECK (CASE WHEN key = 'api_sha256' THEN value ~ '^[0-9a-f]{64}$'
                                                  ELSE value <> '' AND pg_catalog.length(value) <= 63 END);

COMMENT ON TABLE pymem.config IS 'pymem installation settings (role names) and the checksum of the last API refresh';
