-- 0039_store_expiry: a keyed store's entry (and so an item) can expire. store_entries.expires_at
-- (NULL: never) is set by the writes that take an expiry (store_write, store_item_put:
-- `expires_at`, or a `ttl` from which it is computed); a write without one makes the entry
-- non-expiring (a write replaces the entry, expiry included). store_entries.ttl keeps the ttl an
-- entry was written with, so that a read may move its expiry on by as much (store_items_refresh:
-- LangGraph's refresh of an item's ttl on get and search); NULL for an entry written with
-- expires_at or with no expiry, which nothing refreshes.
-- An expired entry is invisible at once to every read of entries and items (store_read,
-- store_meta, store_list, store_item_get, store_items_search, store_namespaces, browse_stores:
-- pymem._fact_live, api/00_common.sql, the one definition of "not expired"), and a write treats
-- its path as free (expected_sha '' succeeds). pymem.purge deletes expired entries (with their
-- vectors) in bounded batches, through store_entries_expiring (below).
--
-- ADD COLUMN without a default changes only the catalog (no rewrite of the table, no scan). No
-- CHECK on either column: validating one would scan the table under the migration's exclusive
-- lock, and the writes that set them check them (pymem._expiry: finite, in the future, within
-- 100 years). Applied once under the migration lock.
ALTER TABLE pymem.store_entries ADD COLUMN expires_at timestamptz;
COMMENT ON COLUMN pymem.store_entries.expires_at IS
    'When the entry stops being visible; NULL: never. pymem.purge deletes it after';
ALTER TABLE pymem.store_entries ADD COLUMN ttl interval;
COMMENT ON COLUMN pymem.store_entries.ttl IS
    'The ttl the entry was written with (NULL: none), by which store_items_refresh moves expires_at on';

-- what a purge reads: the expiring entries of a project, soonest first (partial: empty while no
-- entry has an expiry). On Citus the table is distributed by store_key: each shard keeps its
-- part of the index, and a purge's ORDER BY ... LIMIT is pushed down to each.
CREATE INDEX store_entries_expiring ON pymem.store_entries (project_id, expires_at) WHERE expires_at IS NOT NULL;

-- The functions whose result gains expires_at cannot be replaced in place (CREATE OR REPLACE
-- cannot change a result type): dropped here, created again by the API refresh that follows.
-- store_write and store_item_put gain two optional parameters (expires_at, ttl): their old
-- signatures are dropped too, so that no named call is ambiguous between two versions.
-- (by name: the vector type is pgvector's, whose schema a migration does not assume)
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.oid::pg_catalog.regprocedure AS fn FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace
                AND p.proname IN ('store_read', 'store_meta', 'store_list', 'store_item_get', 'store_items_search',
                                  'store_write', 'store_item_put', '_store_put') LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', r.fn);
    END LOOP;
END;
$$;
