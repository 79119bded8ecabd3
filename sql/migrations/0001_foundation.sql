-- 0001_foundation: makes sure pgvector (>= 0.8) is available to the pymem schema.
-- Applied once, in its own transaction, under the migration lock (see bootstrap.sql).
-- When the extension is missing it is created (in schema public when that exists, else in
-- pymem); when this role may not create it, the error says who must (SQLSTATE PM001).
DO $$
DECLARE
    v_version text;
    v_schema  text;
BEGIN
    SELECT e.extversion INTO v_version FROM pg_catalog.pg_extension AS e WHERE e.extname = 'vector';
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions WHERE name = 'vector') THEN
            RAISE EXCEPTION 'pymem needs the pgvector extension, which is not installed on this server'
                USING ERRCODE = 'PM001',
                      HINT = 'Install pgvector >= 0.8 on the server (or use a managed service that offers it).';
        END IF;
        v_schema := coalesce(
            (SELECT nspname::text FROM pg_catalog.pg_namespace WHERE nspname = 'public'), 'pymem');
        BEGIN
            EXECUTE pg_catalog.format('CREATE EXTENSION vector SCHEMA %I', v_schema);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'pymem needs the pgvector extension in database %, and role % may not create it',
                    pg_catalog.current_database(), current_user
                USING ERRCODE = 'PM001',
                      HINT = pg_catalog.format(
                          'Ask an administrator to run: CREATE EXTENSION vector; in database %I', pg_catalog.current_database());
        END;
        SELECT e.extversion INTO v_version FROM pg_catalog.pg_extension AS e WHERE e.extname = 'vector';
    END IF;
    IF pg_catalog.string_to_array(pg_catalog.split_part(v_version, '-', 1), '.')::int[] < ARRAY[0, 8] THEN
        RAISE EXCEPTION 'pymem needs pgvector >= 0.8; this database has %', v_version
            USING ERRCODE = 'PM001', HINT = 'Run: ALTER EXTENSION vector UPDATE;';
    END IF;
END;
$$;
