-- facts_time.sql: the time of facts. Valid time (migrations/0006_v0_2_0_memory.sql): facts_at, the
-- bi-temporal read (what held at a time, what was believed at a time, or both), and
-- _fact_restate, the new version that another valid time for the same content makes. Expiry
-- (0006_v0_2_0_memory.sql): _fact_expired_free, the delete of an expired fact whose content a
-- write needs (purge, lifecycle.sql, deletes the others). The writes
-- take valid_from / valid_to in their write (facts_write.sql); "holds at" is pymem._fact_valid (00_common.sql). Part of durable
-- facts (facts.sql). Re-applied on every migrate; called by pymem/facts.py and by any SQL client
-- (docs/sql.md "Valid time").
--
-- Errors: 22023 invalid argument; 40001 the fact to restate went meanwhile (retry).

-- _fact_restate: gives the subject's active fact with content key p_key the valid time
-- [coalesce(p_valid_from, its valid_from), coalesce(p_valid_to, its valid_to)) as a new version
-- (migrations/0006_v0_2_0_memory.sql): the same content, confidence, source, metadata, expiry and
-- vectors, created at p_created_at (NULL: now), the old version superseded by it and kept in the
-- history, as a supersede keeps it; never an overwrite. Returns the active version's id and
-- whether it is new (false: the fact already had that valid time). Under the subject's lock, so
-- that concurrent restatements of one fact come one after the other and the second finds the
-- first's version. The unique index on active content keys admits one active row per content: the
-- new row is written superseded (pointing at the old one), the old one then superseded by it, and
-- the new one made active, in this transaction (nobody sees the steps between).
-- Errors: 22023 the valid time that results is empty, or the new version would be older than the
-- old; 40001 the fact was forgotten meanwhile (the caller retries).
CREATE OR REPLACE FUNCTION pymem._fact_restate(
    p_project_id text, p_scope text, p_scope_id text, p_key bytea, p_valid_from timestamptz,
    p_valid_to timestamptz, p_created_at timestamptz)
RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_old pymem.facts;
    v_write pymem.fact_write;
    v_from timestamptz;
    v_to timestamptz;
    v_at timestamptz;
    v_new bigint;
BEGIN
    PERFORM pymem._subject_lock(p_project_id, p_scope, p_scope_id);
    SELECT f.* INTO v_old FROM pymem.facts AS f
     WHERE f.project_id = p_project_id AND f.scope = p_scope COLLATE "C" AND f.scope_id = p_scope_id
       AND f.content_key = p_key AND pymem._fact_head(f.superseded_by)
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pymem: the % fact of % with that content was superseded or forgotten meanwhile', p_scope,
                pg_catalog.quote_literal(p_scope_id)
            USING ERRCODE = '40001', HINT = 'Retry the call.';
    END IF;
    v_from := coalesce(p_valid_from, v_old.valid_from);
    v_to := coalesce(p_valid_to, v_old.valid_to);
    IF v_from IS NOT DISTINCT FROM v_old.valid_from AND v_to IS NOT DISTINCT FROM v_old.valid_to THEN
        id := v_old.id;
        created := false;
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM pymem._valid_time(v_from, v_to);
    v_at := coalesce(p_created_at, pg_catalog.clock_timestamp());
    IF v_at < v_old.created_at THEN
        RAISE EXCEPTION 'pymem: created_at % is earlier than fact % (%), which it restates', v_at, v_old.id, v_old.created_at
            USING ERRCODE = '22023', HINT = 'Pass a later created_at, or NULL for now.';
    END IF;
    -- the old version's write (facts_write.sql: every column a write sets), at v_at, with the new valid time
    v_write := pymem._fact_write_of(v_old);
    v_write.created_at := v_at;
    v_write.valid_from := v_from;
    v_write.valid_to := v_to;
    v_new := pymem._fact_insert(p_project_id, p_scope, p_scope_id, v_old.content, v_old.content_key, v_write, v_old.id);
    UPDATE pymem.facts AS f SET superseded_by = v_new, superseded_at = v_at
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id AND f.id = v_old.id;
    UPDATE pymem.facts AS f SET superseded_by = NULL, superseded_at = NULL
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id AND f.id = v_new;
    INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
    SELECT o.project_id, o.scope, o.scope_id, v_new, o.embedder, o.embedding FROM pymem.fact_embeddings AS o
     WHERE o.project_id = p_project_id AND o.scope = p_scope AND o.scope_id = p_scope_id AND o.fact_id = v_old.id;
    id := v_new;
    created := true;
    RETURN NEXT;
END;
$$;

-- _facts_at: the facts of a subject as believed at p_as_of (record time; NULL: now) that hold at
-- p_valid_at (valid time; NULL: p_as_of), newest first, p_max of them: the bi-temporal read
-- behind facts_at and a context read for a point in time. Believed at T: created at or before T
-- and not superseded by then, or superseded by a version of other content that says from when it
-- holds (a change in the world, not a correction: the old version still holds before that time,
-- valid_to at most its successor's valid_from). A restatement (same content) or a correction
-- (no valid_from) withdraws the old version. Expired facts are gone, as for every read. Reads the
-- subject's versions through the primary key (their count is the history's, not the table's).
CREATE OR REPLACE FUNCTION pymem._facts_at(
    p_project_id text, p_scope text, p_scope_id text, p_valid_at timestamptz, p_as_of timestamptz, p_max integer)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_as_of timestamptz := coalesce(p_as_of, pg_catalog.now());
    v_valid_at timestamptz := coalesce(p_valid_at, p_as_of, pg_catalog.now());
    v_now timestamptz := pg_catalog.now();
BEGIN
    -- a version closed by a change in the world (its successor's valid_from, as believed at
    -- v_as_of) is returned with that end as its valid_to: the row keeps what was written (a read
    -- as of before the change still sees it open), the read says until when it held
    RETURN QUERY
    SELECT (pg_catalog.jsonb_populate_record(f, pg_catalog.jsonb_build_object('valid_to',
              CASE WHEN f.superseded_at IS NOT NULL AND f.superseded_at <= v_as_of AND n.valid_from IS NOT NULL
                        AND n.content_key <> f.content_key
                   THEN LEAST(f.valid_to, n.valid_from) ELSE f.valid_to END))).*
      FROM pymem.facts AS f
      LEFT JOIN pymem.facts AS n
        ON n.project_id = f.project_id AND n.scope = f.scope AND n.scope_id = f.scope_id AND n.id = f.superseded_by
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
       AND f.created_at <= v_as_of AND pymem._fact_kept(f, v_now)
       AND CASE WHEN f.superseded_at IS NULL OR f.superseded_at > v_as_of
                THEN pymem._fact_valid(f.valid_from, f.valid_to, v_valid_at)
                ELSE n.valid_from IS NOT NULL AND n.content_key <> f.content_key
                     AND pymem._fact_valid(f.valid_from, LEAST(f.valid_to, n.valid_from), v_valid_at) END
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT p_max;
END;
$$;

-- facts_at: a subject's facts at a point in time, newest first (max_facts of them):
--   valid_at => T: what holds at T, as we believe it now ("where did alice live in 2020?");
--   as_of => T: what we believed at T (about T, unless valid_at says another time);
--   both: what we believed at as_of about valid_at.
-- With neither it is the default read (facts_newest: what we believe now about now). A version
-- superseded by one that says from when it holds (fact_supersede with valid_from) still holds
-- before that time; a correction (a supersede without valid_from) withdraws it. See
-- migrations/0006_v0_2_0_memory.sql.
--   SELECT id, content, valid_from, valid_to FROM pymem.facts_at('user', 'alice', valid_at => '2020-06-01');
CREATE OR REPLACE FUNCTION pymem.facts_at(
    scope text, scope_id text, valid_at timestamptz DEFAULT NULL, as_of timestamptz DEFAULT NULL,
    project_id text DEFAULT '', max_facts integer DEFAULT 50)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_max integer;
BEGIN
    PERFORM pymem._tenant_enter(facts_at.project_id);
    v_max := pymem._check_limit('max_facts', facts_at.max_facts);
    IF NOT pg_catalog.isfinite(coalesce(facts_at.valid_at, '2000-01-01')) OR NOT pg_catalog.isfinite(coalesce(facts_at.as_of, '2000-01-01')) THEN
        RAISE EXCEPTION 'pymem: valid_at and as_of must be finite times (or NULL: now)' USING ERRCODE = '22023';
    END IF;
    IF facts_at.scope_id = '*' THEN
        RAISE EXCEPTION 'pymem: facts_at reads one subject; scope_id ''*'' is not supported' USING ERRCODE = '22023';
    END IF;
    IF NOT pymem._fact_check_subject(facts_at.scope, facts_at.scope_id, facts_at.project_id, 'match') THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM pymem._facts_at(facts_at.project_id, facts_at.scope, facts_at.scope_id,
                                               facts_at.valid_at, facts_at.as_of, v_max);
END;
$$;

-- _fact_expired_free: deletes fact p_id if it has expired, with its history, vectors and
-- lexemes (their foreign keys cascade), and says whether it did: a write that needs the content
-- key an expired fact still holds (the unique index facts_subject_content_key sees every
-- version not superseded) frees it this way. The expiry is tested again in the DELETE: a fact
-- whose expiry a concurrent re-add just moved on is kept.
CREATE OR REPLACE FUNCTION pymem._fact_expired_free(p_project_id text, p_scope text, p_scope_id text, p_id bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    DELETE FROM pymem.facts AS f
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id AND f.id = p_id
       AND NOT pymem._fact_kept(f, pg_catalog.now());
    RETURN FOUND;
END;
$$;
