-- meta.sql: what this database holds: pymem's schema version and where pgvector lives.
-- Re-applied (CREATE OR REPLACE) on every migrate. Read-only; no locks beyond catalog reads.
-- Called by `pymem version`, `pymem server status` and the demo; any SQL client may call it.

-- pymem.about(): one jsonb object describing the installed schema, e.g.
--   SELECT pymem.about();
--   {"migrations": 1, "last_migration": "0001_foundation",
--    "vector_schema": "public", "vector_version": "0.8.6", "server_version": "18.6"}
CREATE OR REPLACE FUNCTION pymem.about()
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'migrations', (SELECT pg_catalog.count(*) FROM pymem.schema_migrations),
        'last_migration', (SELECT pg_catalog.max(m.name) FROM pymem.schema_migrations AS m),
        'vector_schema', (SELECT n.nspname FROM pg_catalog.pg_extension AS e
                            JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
                           WHERE e.extname = 'vector'),
        'vector_version', (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'vector'),
        'server_version', pg_catalog.current_setting('server_version'));
$$;
