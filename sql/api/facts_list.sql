-- facts_list.sql: listing what a subject holds, with no query (what mem0's get_all(filters=) and
-- LangGraph's search(namespace, filter=) are used for): facts_list (a subject's active facts,
-- newest first, filtered by metadata, paged by keyset) and fact_read (one fact of a subject by id).
-- Beside facts.sql (the same capability; that file is at its size limit). Re-applied (CREATE OR
-- REPLACE) on every migrate. Called by pymem/facts.py (Memory.facts, Memory.get_fact) and by any
-- SQL client; docs/sql.md "Facts" has a psql example of each. Read-only (STABLE): no locks beyond
-- a plain SELECT's.
--
-- Paging: newest first is (created_at DESC, id DESC), the order of facts_newest; a page after a
-- fact is every active fact ordered after it: (created_at, id) < (that fact's created_at, its id),
-- one row comparison, which the partial indexes facts_subject_active_newest (one subject) and
-- facts_scope_active_newest ('*') serve as an index condition (tests/facts/test_facts_list.py
-- reads the plans). The fact paged after may have been superseded since (its row is kept: the page
-- goes on from it); a deleted or another subject's one is refused (22023), never guessed.
--
-- Errors: 22023 invalid argument (as facts_newest), a metadata filter that is not a JSON object,
-- an "after" fact that the subject does not have.

-- _facts_list_after: the (created_at, id) a page after fact p_after starts below; refuses an id
-- the subject (or, for '*', the scope) does not have.
CREATE OR REPLACE FUNCTION pymem._facts_list_after(p_project_id text, p_scope text, p_scope_id text, p_after bigint)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    SELECT f.created_at INTO v_at FROM pymem.facts AS f
     WHERE f.project_id = p_project_id AND f.id = p_after AND f.scope = p_scope
       AND (f.scope_id = p_scope_id OR p_scope_id = '*');
    IF v_at IS NULL THEN
        RAISE EXCEPTION 'pymem: after => % is not a fact of this % (deleted, or another''s)', p_after, p_scope
            USING ERRCODE = '22023',
                  HINT = 'Pass the id of the last fact of the previous page, or start again without after.';
    END IF;
    RETURN v_at;
END;
$$;

-- _scope_facts_list: facts_list for every subject of a scope (scope_id '*'), on the scope-wide
-- index (the partial facts_scope_active_newest: hence superseded_at IS NULL); the caller's
-- plan_cache_mode (force_custom_plan) holds for it too.
CREATE OR REPLACE FUNCTION pymem._scope_facts_list(p_project_id text, p_scope text, p_metadata jsonb, p_max integer,
                                                   p_at timestamptz, p_id bigint)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT f.* FROM pymem.active_facts AS f
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.superseded_at IS NULL
       AND (f.created_at, f.id) < (p_at, p_id)
       AND (p_metadata IS NULL OR f.metadata @> p_metadata)
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT p_max;
END;
$$;

-- facts_list: a subject's active facts, newest first (ties: higher id first), at most max_facts;
-- metadata (a JSON object): only facts whose metadata contains it (@>); after: the id of the last
-- fact of the previous page (NULL: the first page). scope_id '*' lists every subject of the
-- scope in the project; '' (user or project scope) lists nothing, as the other reads.
--   SELECT id, content FROM pymem.facts_list('user', 'alice', metadata => '{"topic": "food"}', max_facts => 20);
--   SELECT id, content FROM pymem.facts_list('user', 'alice', max_facts => 20, after => 41);
CREATE OR REPLACE FUNCTION pymem.facts_list(
    scope text, scope_id text, project_id text DEFAULT '', metadata jsonb DEFAULT NULL,
    max_facts integer DEFAULT 50, after bigint DEFAULT NULL)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
-- planned with each call's values: a generic plan takes the optional filters ("$4 IS NULL OR
-- metadata @> $4", the row comparison) for selective, and sorts a bitmap scan of the whole
-- subject instead of reading the index in order (tests/facts/test_facts_plans.py); a read-only
-- function, so no foreign-key check is re-planned with it
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_max integer;
    v_at timestamptz := 'infinity';
    v_id bigint := 9223372036854775807;
BEGIN
    PERFORM pymem._tenant_enter(facts_list.project_id);
    v_max := pymem._check_limit('max_facts', facts_list.max_facts);
    IF facts_list.metadata IS NOT NULL AND pg_catalog.jsonb_typeof(facts_list.metadata) <> 'object' THEN
        RAISE EXCEPTION 'pymem: metadata must be a JSON object (the facts listed contain it), not %',
            pg_catalog.jsonb_typeof(facts_list.metadata) USING ERRCODE = '22023';
    END IF;
    IF NOT pymem._fact_check_subject(facts_list.scope, facts_list.scope_id, facts_list.project_id, 'match') THEN
        RETURN;
    END IF;
    IF facts_list.after IS NOT NULL THEN
        v_at := pymem._facts_list_after(facts_list.project_id, facts_list.scope, facts_list.scope_id, facts_list.after);
        v_id := facts_list.after;
    END IF;
    IF facts_list.scope_id = '*' THEN
        RETURN QUERY SELECT * FROM pymem._scope_facts_list(facts_list.project_id, facts_list.scope,
                                                           facts_list.metadata, v_max, v_at, v_id);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT f.* FROM pymem.active_facts AS f
     WHERE f.project_id = facts_list.project_id AND f.scope = facts_list.scope
       AND f.scope_id = facts_list.scope_id
       AND (f.created_at, f.id) < (v_at, v_id)
       AND (facts_list.metadata IS NULL OR f.metadata @> facts_list.metadata)
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT v_max;
END;
$$;

-- fact_read: one fact of a subject by id, active or superseded (no row when the subject has no
-- such fact, or it has expired): fact_get for a caller that must not read another subject's
-- facts (a user's own, by the id a listing or a learned turn gave). The subject is one real id
-- ('*' and '' are refused: 22023).
--   SELECT content, superseded_by FROM pymem.fact_read('user', 'alice', 42);
CREATE OR REPLACE FUNCTION pymem.fact_read(scope text, scope_id text, id bigint, project_id text DEFAULT '')
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(fact_read.project_id);
    PERFORM pymem._fact_check_subject(fact_read.scope, fact_read.scope_id, fact_read.project_id, 'exact');
    RETURN QUERY
    SELECT f.* FROM pymem.facts AS f
     WHERE f.project_id = fact_read.project_id AND f.id = fact_read.id AND f.scope = fact_read.scope
       AND f.scope_id = fact_read.scope_id AND pymem._fact_kept(f, pg_catalog.now());
END;
$$;
