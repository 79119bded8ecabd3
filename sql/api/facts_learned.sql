-- facts_learned.sql: the cap on a subject's learned facts (source 'learned', max_learned), the one
-- home of that write rule: fact_add (facts.sql) and turn_record's learning (_turn_learn,
-- conversations_turns.sql) call it after they insert, holding the subject's lock
-- (pymem._subject_lock: one learned writer per subject at a time, so the cap holds under
-- concurrency). Part of durable facts (facts.sql; the index facts_subject_learned_newest in
-- migrations/0002_facts.sql). Re-applied on every migrate.

-- _learned_cap(project_id, scope, scope_id, max_learned): the newest live learned fact beyond the
-- cap, if any (a read of at most max_learned + 1 entries of facts_subject_learned_newest); it and
-- every older live learned fact of the subject go. True when any went.
CREATE OR REPLACE FUNCTION pymem._learned_cap(p_project_id text, p_scope text, p_scope_id text, p_max integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_cut_at timestamptz;
    v_cut_id bigint;
BEGIN
    SELECT o.created_at, o.id INTO v_cut_at, v_cut_id FROM pymem.facts AS o
     WHERE o.project_id = p_project_id AND o.scope = p_scope AND o.scope_id = p_scope_id
       AND o.source = 'learned' AND pymem._fact_live(o, pg_catalog.now())
     ORDER BY o.created_at DESC, o.id DESC
    OFFSET p_max LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM pymem.facts AS f
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
       AND f.source = 'learned' AND pymem._fact_live(f, pg_catalog.now())
       AND (f.created_at, f.id) <= (v_cut_at, v_cut_id);
    RETURN FOUND;
END;
$$;
