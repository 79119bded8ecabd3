-- bootstrap.sql: the migration bookkeeping that every migrate run needs before anything else.
-- Run by migrate.sql (psql) and by `pymem migrate` (Python), always after the migration lock
-- (pg_advisory_lock) is held, outside any migration's transaction. Idempotent: a second run
-- changes nothing. Its table is frozen like a migration; change it only through a migration.

CREATE SCHEMA IF NOT EXISTS pymem;

COMMENT ON SCHEMA pymem IS 'pymem: memory for AI agents (see README, "SQL API")';

-- One row per applied migration. The checksum is the sha256 of the migration file as applied.
CREATE TABLE IF NOT EXISTS pymem.schema_migrations (
    name          text        PRIMARY KEY,
    checksum      text        NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),
    pymem_version text        NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- migration_pending(name, checksum): true when the migration still has to run; raises PM002
-- when it was applied from a file whose checksum differs (applied migrations never change).
CREATE OR REPLACE FUNCTION pymem.migration_pending(p_name text, p_checksum text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_applied text;
BEGIN
    SELECT m.checksum INTO v_applied FROM pymem.schema_migrations AS m WHERE m.name = p_name;
    IF NOT FOUND THEN
        RETURN true;
    END IF;
    IF v_applied <> p_checksum THEN
        RAISE EXCEPTION 'pymem: migration % was changed after it was applied', p_name
            USING ERRCODE = 'PM002',
                  DETAIL = format('applied checksum %s, file checksum %s', v_applied, p_checksum),
                  HINT = 'Applied migrations are frozen: restore the file and put the change in a new migration.';
    END IF;
    RETURN false;
END;
$$;

-- migration_applied(name, checksum, version): records a migration inside its own transaction.
CREATE OR REPLACE FUNCTION pymem.migration_applied(p_name text, p_checksum text, p_version text)
RETURNS void
LANGUAGE sql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO pymem.schema_migrations (name, checksum, pymem_version)
    VALUES (p_name, p_checksum, p_version);
$$;

-- migration_search_path(): sets, for the current transaction, the search_path under which
-- migrations and API files are created: pg_catalog first (so no look-alike can shadow a
-- built-in), pymem, the schema pgvector lives in (found, not assumed), pg_temp last. API functions capture it with SET search_path FROM CURRENT.
-- It has no SET clause of its own on purpose: a function's SET would undo its set_config at
-- exit. Every name in it is qualified instead.
CREATE OR REPLACE FUNCTION pymem.migration_search_path()
RETURNS text
LANGUAGE sql VOLATILE SECURITY INVOKER
AS $$
    SELECT pg_catalog.set_config(
        'search_path',
        pg_catalog.concat_ws(', ', 'pg_catalog', 'pymem',
            (SELECT pg_catalog.quote_ident(n.nspname::text)
               FROM pg_catalog.pg_extension AS e
               JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
              WHERE e.extname = 'vector' AND n.nspname NOT IN ('pymem', 'pg_catalog')),
            'pg_temp'),
        true);
$$;
