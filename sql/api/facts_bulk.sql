-- facts_bulk.sql: facts in bulk: facts_add_many (many facts of one scope in one call, all or
-- nothing, with fact_add's checks) and the vectors of facts (facts_unembedded, the catch-up list;
-- fact_embeddings_put). Part of durable facts (facts.sql; tables in migrations/0002_facts.sql).
-- Re-applied on every migrate; called by pymem/facts.py and by any SQL client (docs/sql.md
-- "Facts").
--
-- Errors: 22023 invalid argument (the first invalid element named by its position).

-- facts_add_many: bulk ingest: many facts of one scope in one call, element i of the arrays
-- being one fact_add (scope_ids[i], contents[i], and, when given, embeddings[i]), each written as
-- write (pymem.fact_write(...), facts_write.sql) says: its confidence, source, trace_id, metadata,
-- created_at, expiry and valid time are every element's. Same checks as fact_add, all or nothing:
-- the first invalid element refuses the whole call (22023, naming its position), an invalid write
-- refuses it too, and nothing is written. Idempotent like fact_add: a fact already active for its
-- subject, or given twice in the batch, is one row (created is false for it, and for every repeat
-- after the first). Learned facts are refused here: their per-subject cap needs fact_add's lock
-- and trim. One row per element, in order: (ord, id, created). One statement per step, whatever
-- the number of elements or subjects: the checks, the subjects' locks, the facts (found or
-- inserted), the vectors. The write's expiry is that of every fact of the batch, the new ones and
-- those there already; its valid time that of every fact of the batch: a fact there already with
-- another one is restated (a new version; created is true for it).
--   SELECT * FROM pymem.facts_add_many('user', ARRAY['erin', 'frank'], ARRAY['Prefers email', 'Likes tea']);
CREATE OR REPLACE FUNCTION pymem.facts_add_many(
    scope text,
    scope_ids text[],
    contents text[],
    project_id text DEFAULT '',
    write pymem.fact_write DEFAULT pymem.fact_write(),
    embeddings vector[] DEFAULT NULL,
    embedder text DEFAULT NULL)
RETURNS TABLE (ord integer, id bigint, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_n integer := pg_catalog.cardinality(facts_add_many.contents);
    v_bad integer;
    v_bad_subject integer;
    v_ok boolean;
    v_message text;
    v_ids bigint[];
    v_created boolean[];
    v_i integer;
    v_one bigint;
    v_one_created boolean;
    v_expires timestamptz;
BEGIN
    PERFORM pymem._tenant_enter(facts_add_many.project_id);
    IF facts_add_many.contents IS NULL OR facts_add_many.scope_ids IS NULL
       OR pg_catalog.cardinality(facts_add_many.scope_ids) <> v_n
       OR (facts_add_many.embeddings IS NOT NULL AND pg_catalog.cardinality(facts_add_many.embeddings) <> v_n) THEN
        RAISE EXCEPTION 'pymem: facts_add_many needs scope_ids and contents, and every array it is given, of one length'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._check_batch('facts_add_many', 'facts', v_n, 100000);
    IF write.source = 'learned' THEN
        RAISE EXCEPTION 'pymem: learned facts are added one at a time (fact_add), under their subject''s cap'
            USING ERRCODE = '22023';
    END IF;
    write := pymem._fact_write_check(facts_add_many.write);  -- checked, its expiry resolved (facts_write.sql)
    v_expires := write.expires_at;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- every element checked as fact_add checks it, in one pass: the first element whose subject is
    -- invalid (element 1 for an invalid scope or project), else the first whose content is; then
    -- fact_add's own check of that element says what is wrong with it
    SELECT pg_catalog.min(u.i) FILTER (WHERE u.s IS NULL OR pg_catalog.length(u.s) > 256 OR u.s = '*'
                                             OR (u.s = '' AND facts_add_many.scope <> 'agent')),
           pg_catalog.min(u.i) FILTER (WHERE u.t IS NULL OR u.t = '' OR pg_catalog.length(u.t) > 65536)
      INTO v_bad_subject, v_bad
      FROM (SELECT r.s, pymem._fact_trim(r.c) AS t, r.i  -- OFFSET 0: one trim per element
              FROM ROWS FROM (pg_catalog.unnest(facts_add_many.scope_ids), pg_catalog.unnest(facts_add_many.contents))
                   WITH ORDINALITY AS r(s, c, i)
            OFFSET 0) AS u;
    IF facts_add_many.scope IS NULL OR facts_add_many.scope NOT IN ('agent', 'user', 'project')
       OR facts_add_many.project_id IS NULL OR facts_add_many.project_id = '*' OR pg_catalog.length(facts_add_many.project_id) > 256 THEN
        v_bad_subject := 1;
    END IF;
    IF v_bad_subject IS NOT NULL OR v_bad IS NOT NULL THEN
        v_bad := coalesce(v_bad_subject, v_bad);
        BEGIN
            v_ok := pymem._fact_check_subject(facts_add_many.scope, facts_add_many.scope_ids[v_bad], facts_add_many.project_id, 'exact');
            v_message := pymem._fact_check_values(facts_add_many.contents[v_bad], write.confidence, write.source,
                                                  write.trace_id, write.metadata);
            RAISE EXCEPTION 'pymem: invalid fact' USING ERRCODE = '22023';
        EXCEPTION WHEN invalid_parameter_value THEN
            GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT;
            RAISE EXCEPTION 'pymem: facts_add_many element % (of %): %', v_bad, v_n, pg_catalog.regexp_replace(v_message, '^pymem: ', '')
                USING ERRCODE = '22023';
        END;
    END IF;
    IF facts_add_many.embeddings IS NOT NULL THEN  -- every vector checked first (naming its element), then the embedder registered
        PERFORM pymem._embeddings_validate(facts_add_many.project_id, facts_add_many.embedder, facts_add_many.embeddings);
        PERFORM pymem._embedding_register(facts_add_many.project_id, facts_add_many.embedder, facts_add_many.embeddings[1]);
    END IF;
    -- the subjects' locks (pymem._subject_lock's rows), in one statement taken in one order (as
    -- learned writers take them): each subject's row inserted, or, there already, locked (ON
    -- CONFLICT DO UPDATE locks the row even where its WHERE leaves it unchanged). Two batches sharing
    -- subjects (or a batch and a turn's learned facts) queue instead of each waiting for the
    -- other's pending keys, a deadlock when they hold the same facts in different orders.
    INSERT INTO pymem.subject_locks AS s (project_id, scope, scope_id)
    SELECT DISTINCT facts_add_many.project_id, facts_add_many.scope, u.s FROM pg_catalog.unnest(facts_add_many.scope_ids) AS u(s)
     ORDER BY 3
    ON CONFLICT ON CONSTRAINT subject_locks_pkey DO UPDATE SET scope = excluded.scope WHERE false;
    -- each element's fact, found or inserted (NULL: left to the loop below)
    SELECT m.ids, m.created INTO v_ids, v_created
      FROM pymem._facts_insert_many(facts_add_many.project_id, facts_add_many.scope, facts_add_many.scope_ids,
                                    facts_add_many.contents, write) AS m;
    -- a fact another transaction committed (or superseded) while this one ran: one at a time
    FOR v_i IN SELECT u.i FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS u(id, i) WHERE u.id IS NULL LOOP
        SELECT a.id, a.created INTO v_one, v_one_created
          FROM pymem.fact_add(facts_add_many.scope, facts_add_many.scope_ids[v_i], facts_add_many.contents[v_i],
                              facts_add_many.project_id, write, NULL) AS a;
        v_ids[v_i] := v_one;
        v_created[v_i] := v_one_created;
    END LOOP;
    IF v_expires IS NOT NULL THEN
        -- the facts that were there already take the expiry asked for, as fact_add's re-adds do
        -- (one routed statement per element: a rare path)
        FOR v_i IN 1 .. v_n LOOP
            CONTINUE WHEN v_created[v_i];
            UPDATE pymem.facts AS f SET expires_at = v_expires
             WHERE f.project_id = facts_add_many.project_id AND f.scope = facts_add_many.scope
               AND f.scope_id = facts_add_many.scope_ids[v_i] AND f.id = v_ids[v_i]
               AND f.expires_at IS DISTINCT FROM v_expires;
            IF FOUND THEN
                PERFORM pymem._fact_history_expire(facts_add_many.project_id, facts_add_many.scope,
                                                   facts_add_many.scope_ids[v_i], v_ids[v_i], v_expires);
            END IF;
        END LOOP;
    END IF;
    IF write.valid_from IS NOT NULL OR write.valid_to IS NOT NULL THEN
        -- the facts that were there already with another valid time are restated, as fact_add's
        -- re-adds are (one at a time: a rare path; a repeat within the batch finds the first's)
        FOR v_i IN 1 .. v_n LOOP
            CONTINUE WHEN v_created[v_i];
            SELECT r.id, r.created INTO v_one, v_one_created
              FROM pymem._fact_restate(facts_add_many.project_id, facts_add_many.scope, facts_add_many.scope_ids[v_i],
                                       pymem.fact_key(pymem._fact_trim(facts_add_many.contents[v_i])),
                                       write.valid_from, write.valid_to, write.created_at) AS r;
            v_ids[v_i] := v_one;
            v_created[v_i] := v_one_created;
        END LOOP;
    END IF;
    IF facts_add_many.embeddings IS NOT NULL THEN
        INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
        SELECT DISTINCT ON (u.id) facts_add_many.project_id, facts_add_many.scope, u.s, u.id, facts_add_many.embedder, u.v
          FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(facts_add_many.scope_ids), pg_catalog.unnest(facts_add_many.embeddings)) WITH ORDINALITY AS u(id, s, v, i)
         ORDER BY u.id, u.i
        ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
    END IF;
    RETURN QUERY SELECT u.i::integer, u.id, u.c FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_created)) WITH ORDINALITY AS u(id, c, i);
END;
$$;

-- facts_unembedded: a subject's active facts that have no vector from `embedder` yet (facts
-- written by SQL, or before a restart). facts_search reports the same rows itself; this is for
-- services that embed ahead of time.
CREATE OR REPLACE FUNCTION pymem.facts_unembedded(
    scope text, scope_id text, embedder text, project_id text DEFAULT '', max_facts integer DEFAULT 1000)
RETURNS TABLE (id bigint, content text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(facts_unembedded.project_id);
    PERFORM pymem._check_limit('max_facts', facts_unembedded.max_facts);
    IF NOT pymem._fact_check_subject(facts_unembedded.scope, facts_unembedded.scope_id, facts_unembedded.project_id, 'match') THEN
        RETURN;
    END IF;
    IF facts_unembedded.scope_id = '*' THEN
        RAISE EXCEPTION 'pymem: facts_unembedded works on one subject, not ''*''' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT f.id, f.content FROM pymem.active_facts AS f
     WHERE f.project_id = facts_unembedded.project_id AND f.scope = facts_unembedded.scope
       AND f.scope_id = facts_unembedded.scope_id
       AND NOT EXISTS (
           SELECT 1 FROM pymem.fact_embeddings AS e
            WHERE e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id
              AND e.fact_id = f.id AND e.embedder = facts_unembedded.embedder)
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT facts_unembedded.max_facts;
END;
$$;

-- fact_embeddings_put: stores vectors from `embedder` for facts of one subject (ids and
-- embeddings are parallel arrays, at most 10000 per call: what facts_unembedded lists at most;
-- more is 22023). Facts that no longer exist are skipped; an existing vector
-- of the same embedder is kept. Returns how many vectors were stored. The embedder's dimension
-- is registered for the project only when at least one vector is stored.
CREATE OR REPLACE FUNCTION pymem.fact_embeddings_put(
    scope text, scope_id text, embedder text, ids bigint[], embeddings vector[], project_id text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
BEGIN
    PERFORM pymem._tenant_enter(fact_embeddings_put.project_id);
    PERFORM pymem._fact_check_subject(fact_embeddings_put.scope, fact_embeddings_put.scope_id,
                                      fact_embeddings_put.project_id, 'exact');
    IF pg_catalog.cardinality(ids) IS DISTINCT FROM pg_catalog.cardinality(embeddings) THEN
        RAISE EXCEPTION 'pymem: ids and embeddings must have the same length' USING ERRCODE = '22023';
    END IF;
    -- as many as facts_unembedded lists in one call
    PERFORM pymem._check_batch('fact_embeddings_put', 'vectors', pg_catalog.cardinality(fact_embeddings_put.embeddings), 10000);
    PERFORM pymem._embeddings_validate(fact_embeddings_put.project_id, fact_embeddings_put.embedder,
                                       fact_embeddings_put.embeddings);
    INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
    SELECT f.project_id, f.scope, f.scope_id, f.id, fact_embeddings_put.embedder, u.embedding
      FROM ROWS FROM (pg_catalog.unnest(fact_embeddings_put.ids), pg_catalog.unnest(fact_embeddings_put.embeddings))
           AS u(id, embedding)
      JOIN pymem.facts AS f
        ON f.project_id = fact_embeddings_put.project_id AND f.scope = fact_embeddings_put.scope
       AND f.scope_id = fact_embeddings_put.scope_id AND f.id = u.id
    ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN  -- register the embedder only now that it has a vector stored
        PERFORM pymem._embedding_register(fact_embeddings_put.project_id, fact_embeddings_put.embedder,
                                       fact_embeddings_put.embeddings[1]);
    END IF;
    RETURN v_count;
END;
$$;
