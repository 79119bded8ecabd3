-- lifecycle.sql: what ends memory on its own: purge, which deletes what has expired (facts and
-- keyed-store entries whose expires_at has passed: migrations/0037_fact_expiry.sql,
-- 0039_store_expiry.sql) in bounded batches. Expiry itself needs no purge to be correct: an
-- expired fact or entry is invisible to every read at once (pymem.active_facts,
-- pymem._fact_live); a purge gives the space back. Re-applied on every
-- migrate; called by pymem/lifecycle.py (`pymem purge`) and by any SQL client (docs/sql.md
-- "Expire and purge").
--
-- Errors: 22023 invalid argument; 42501 a project the caller may not serve.

-- purge: deletes up to max_rows expired facts of the project, soonest expired first, with their
-- vectors and lexemes (and the history under them, which expires no later: see fact_supersede),
-- and up to max_rows expired keyed-store entries (items too) with their vectors, and returns one
-- row per kind: ('facts', n), then ('store_entries', n). A purged entry is not logged to its
-- store's audit log (an expiry is part of the write that set it: api/stores.sql); its kept
-- versions stay, as after a delete. A call holds its row locks only
-- for its own short transaction and skips nothing it cannot lock: safe to run every minute under
-- load; call it again while it returns max_rows.
--   SELECT kind, purged FROM pymem.purge(project_id => '', max_rows => 1000);
-- A fact or an entry whose expiry a writer moves on meanwhile (a re-add or a write with a ttl, a
-- refresh) is kept: the expiry is tested again as each row is deleted.
CREATE OR REPLACE FUNCTION pymem.purge(project_id text DEFAULT '', max_rows integer DEFAULT 1000)
RETURNS TABLE (kind text, purged integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
-- Its statements are planned with each call's values: a generic plan cannot know how few rows
-- have expired (to it, "expires_at <= $1" is a third of the table) and may read a whole table
-- where the partial indexes of what expires hold a handful; a call a minute plans cheaply.
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
    v_shared text[];  -- the agent and project subjects a purge touched (scope || ':' || scope_id)
    v_count integer := 0;
    v_n integer;
    v_subject text;
    r record;
    v_now timestamptz := pg_catalog.now();  -- a value: Citus refuses now() beside a column in a DELETE
BEGIN
    PERFORM pymem._tenant_enter(purge.project_id);
    PERFORM pymem._project_check(purge.project_id);
    PERFORM pymem._check_limit('max_rows', purge.max_rows);
    -- the expired facts, soonest first (facts_expiring: the expiring facts only)
    SELECT pg_catalog.array_agg(e.id), pg_catalog.array_agg(DISTINCT e.scope || ':' || e.scope_id)
                                           FILTER (WHERE e.scope <> 'user')
      INTO v_ids, v_shared
      FROM (SELECT f.id, f.scope, f.scope_id FROM pymem.facts AS f
             WHERE f.project_id = purge.project_id AND f.expires_at IS NOT NULL AND f.expires_at <= v_now
             ORDER BY f.expires_at
             LIMIT purge.max_rows) AS e;
    IF v_ids IS NOT NULL THEN
        -- by id within the project (facts_project_id_id); the expiry tested again on each row
        DELETE FROM pymem.facts AS f
         WHERE f.project_id = purge.project_id AND f.id = ANY (v_ids) AND NOT pymem._fact_live(f.expires_at, v_now);
        GET DIAGNOSTICS v_count = ROW_COUNT;
        FOREACH v_subject IN ARRAY coalesce(v_shared, '{}') LOOP  -- the copies a Citus cluster keeps
            PERFORM pymem._shared_facts_sync(purge.project_id, pg_catalog.split_part(v_subject, ':', 1),
                                             pg_catalog.substr(v_subject, pg_catalog.strpos(v_subject, ':') + 1));
        END LOOP;
    END IF;
    kind := 'facts';
    purged := v_count;
    RETURN NEXT;
    -- the expired store entries, soonest first (store_entries_expiring), deleted store by store
    -- by their keys (on Citus, where the table is distributed by store_key, one shard each);
    -- their vectors go with them (ON DELETE CASCADE)
    v_count := 0;
    FOR r IN SELECT x.store_key, pg_catalog.array_agg(x.path) AS paths
               FROM (SELECT e.store_key, e.path FROM pymem.store_entries AS e
                      WHERE e.project_id = purge.project_id AND e.expires_at IS NOT NULL AND e.expires_at <= v_now
                      ORDER BY e.expires_at
                      LIMIT purge.max_rows) AS x
              GROUP BY x.store_key LOOP
        DELETE FROM pymem.store_entries AS e
         WHERE e.project_id = purge.project_id AND e.store_key = r.store_key AND e.path = ANY (r.paths)
           AND NOT pymem._fact_live(e.expires_at, v_now);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_count := v_count + v_n;
    END LOOP;
    kind := 'store_entries';
    purged := v_count;
    RETURN NEXT;
END;
$$;
