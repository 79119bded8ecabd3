-- 0052_fact_states: the states of a fact take its row (issue 55, item 3). pymem._fact_live took the
-- columns it reads (superseded_by, expires_at), so a new condition of "live" changed every call
-- site; api/00_common.sql now defines _fact_kept(f, at) and _fact_live(f, at) over the fact's row
-- (anyelement, so that a Citus shard's row type is accepted too). The old signature is dropped
-- here; the API refresh of the same migrate creates the new ones (between the two, a few hundred
-- milliseconds, an API call that reads live facts fails with 42883). Internal: no caller of the
-- documented API acts on it. Applied once under the migration lock (search_path pg_catalog,
-- pymem, pg_temp).
DROP FUNCTION IF EXISTS pymem._fact_live(bigint, timestamptz, timestamptz);
