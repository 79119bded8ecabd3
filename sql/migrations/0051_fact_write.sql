-- 0051_fact_write: what a fact write carries beside its subject and content, as one value
-- (issue 55, item 1): pymem.fact_write, built by pymem.fact_write(...) (api/facts_write.sql, which
-- holds its only SQL defaults and its checks) and taken as `write` by fact_add, fact_supersede,
-- facts_add_many and fact_lookup instead of their flat parameters (confidence, source, trace_id,
-- metadata, created_at, expires_at, ttl, valid_from, valid_to; facts_add_many's confidences,
-- sources, metadata and created_ats arrays). Their old signatures are dropped here (every
-- signature of each name: the vector type is pgvector's, whose schema a migration does not
-- assume); the API refresh of the same migrate creates the new ones. Between this migration and
-- the API refresh (a few hundred milliseconds) a call of these fails with 42883. Applied once
-- under the migration lock (search_path pg_catalog, pymem, pg_temp).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.oid::pg_catalog.regprocedure AS fn FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace
                AND p.proname IN ('fact_add', 'fact_supersede', 'facts_add_many', 'fact_lookup') LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', r.fn);
    END LOOP;
END;
$$;

-- The fields a fact write stores (the columns of pymem.facts of the same names), but ttl, which
-- resolves to expires_at (now() + ttl) before the row is written. Python's pymem.FactWrite mirrors
-- it field by field (tests/python/test_options.py).
CREATE TYPE pymem.fact_write AS (
    confidence double precision,  -- how sure, 0..1
    source     text,              -- manual, learned or trace
    trace_id   text,              -- the trace the fact came from (NULL: none)
    metadata   jsonb,             -- an object (fact_supersede: NULL keeps the old version's)
    created_at timestamptz,       -- when it was learned (NULL: now)
    expires_at timestamptz,       -- when it expires (NULL: never) ...
    ttl        interval,          -- ... or this long from now (one of the two)
    valid_from timestamptz,       -- when it holds in the world: [valid_from, valid_to), NULL: open
    valid_to   timestamptz
);
COMMENT ON TYPE pymem.fact_write IS
    'What a fact write carries: built by pymem.fact_write(...), taken by fact_add, fact_supersede, facts_add_many and fact_lookup as write';
