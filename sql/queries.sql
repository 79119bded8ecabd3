-- queries.sql: every statement the Python package sends, each under a `-- name: NAME` header
-- with a one-line description. pymem/queries.py loads this file once; tests parse each query
-- with sqlglot and qualify it against the migrated schema, so a renamed column or function
-- fails a test instead of a user's call. Parameters use psycopg's %(name)s style.

-- name: migration_lock
-- Serialises migrate runs (psql or Python) across sessions; held until migration_unlock.
SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended('pymem.migrate', 0));

-- name: migration_unlock
-- Releases the migration lock taken by migration_lock.
SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended('pymem.migrate', 0));

-- name: migration_pending
-- True when the named migration still has to run; raises PM002 if its file changed.
SELECT pymem.migration_pending(%(name)s, %(checksum)s) AS pending;

-- name: migration_applied
-- Records a migration as applied, inside the migration's own transaction.
SELECT pymem.migration_applied(%(name)s, %(checksum)s, %(version)s);

-- name: migration_search_path
-- Sets the transaction's search_path for creating migrations and API functions.
SELECT pymem.migration_search_path();

-- name: applied_migrations
-- Every applied migration, oldest first (NULL-safe when the schema does not exist yet).
SELECT m.name, m.checksum, m.pymem_version, m.applied_at
FROM pymem.schema_migrations AS m
ORDER BY m.name;

-- name: schema_exists
-- Whether the migrations table exists yet (a database never migrated has none).
SELECT pg_catalog.to_regclass('pymem.schema_migrations') IS NOT NULL AS present;

-- name: vector_schema
-- The schema pgvector is installed in, or NULL when it is not installed.
SELECT n.nspname AS schema
FROM pg_catalog.pg_extension AS e
JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
WHERE e.extname = 'vector';

-- name: about
-- Schema version, pgvector location and server version as one jsonb object.
SELECT pymem.about() AS about;
