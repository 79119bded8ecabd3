-- facts_bulk.sql: facts in bulk: facts_add_many (many facts of one scope in one call, all or
-- nothing, with fact_add's checks) and the vectors of facts (facts_unembedded, the catch-up list;
-- fact_embeddings_put). Part of durable facts (facts.sql; tables in migrations/0002_facts.sql).
-- Re-applied on every migrate; called by pymem/facts.py and by any SQL client (docs/sql.md
-- "Facts").
--
-- Errors: 22023 invalid argument (the first invalid element named by its position).

-- _facts_insert_many: facts_add_many's one statement, after its checks and locks: each element's
-- fact where it is active already (one index read), the others inserted (the first occurrence of
-- each subject and content in the batch); ids[i] and created[i] for element i, ids[i] NULL where
-- a concurrent writer got in between (facts_add_many adds those one at a time). On Citus,
-- citus.sql replaces it with one that leaves every element to that loop (its planner refuses this
-- statement's lateral outer join over distributed tables).
CREATE OR REPLACE FUNCTION pymem._facts_insert_many(
    p_project_id text, p_scope text, p_scope_ids text[], p_contents text[], p_confidences double precision[],
    p_sources text[], p_metadata jsonb[], p_created_ats timestamptz[], p_expires_at timestamptz,
    p_valid_from timestamptz, p_valid_to timestamptz, OUT ids bigint[], OUT created boolean[])
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    -- one statement: each element's fact where it is there already (one index read), the others
    -- inserted (the first occurrence of each subject and content in the batch)
    WITH input AS MATERIALIZED (
        SELECT t.i, t.scope_id, t.content, t.key, t.confidence, t.source, t.metadata, t.created_at, f.id AS known
          FROM (SELECT u.i::integer AS i, u.s AS scope_id, u.content, pymem.fact_key(u.content) AS key,
                       coalesce(u.conf, 1.0) AS confidence, coalesce(u.src, 'manual') AS source,
                       coalesce(u.meta, '{}'::jsonb) AS metadata, u.at AS created_at
                  FROM (SELECT r.*, pymem._fact_trim(r.c) AS content
                          FROM ROWS FROM (pg_catalog.unnest(p_scope_ids), pg_catalog.unnest(p_contents),
                                          pg_catalog.unnest(p_confidences), pg_catalog.unnest(p_sources),
                                          pg_catalog.unnest(p_metadata), pg_catalog.unnest(p_created_ats))
                               WITH ORDINALITY AS r(s, c, conf, src, meta, at, i)
                        OFFSET 0) AS u  -- OFFSET 0: one trim and one key per element
                OFFSET 0) AS t
          -- each element's fact by key (facts_subject_content_key, 0006_v0_2_0_memory); a plain join could be
          -- planned as a scan of its subjects' facts
          LEFT JOIN LATERAL (SELECT f.id FROM pymem.facts AS f
                              WHERE f.project_id = p_project_id AND f.scope = p_scope COLLATE "C"
                                AND f.scope_id = t.scope_id AND f.content_key = t.key
                                AND pymem._fact_live(f.superseded_by, f.expires_at, pg_catalog.now())  -- an expired one: left to fact_add, which frees its key
                              LIMIT 1) AS f ON true),
    firsts AS MATERIALIZED (
        SELECT DISTINCT ON (x.scope_id, x.key) x.* FROM input AS x WHERE x.known IS NULL ORDER BY x.scope_id, x.key, x.i),
    ins AS (
        INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, metadata, created_at,
                                      expires_at, valid_from, valid_to)
        SELECT p_project_id, p_scope, x.scope_id, x.content, x.key, x.confidence, x.source,
               x.metadata, coalesce(x.created_at, pg_catalog.clock_timestamp()), p_expires_at, p_valid_from, p_valid_to
          FROM firsts AS x
         ORDER BY x.i
        ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING
        RETURNING f.id, f.scope_id, f.content_key)
    SELECT pg_catalog.array_agg(coalesce(x.known, n.id) ORDER BY x.i),
           pg_catalog.array_agg(n.id IS NOT NULL AND x.i = fx.i ORDER BY x.i)
      INTO ids, created
      FROM input AS x
      LEFT JOIN firsts AS fx ON fx.scope_id = x.scope_id AND fx.key = x.key
      LEFT JOIN ins AS n ON n.scope_id = x.scope_id AND n.content_key = x.key;
END;
$$;

-- facts_add_many: bulk ingest: many facts of one scope in one call, element i of each array
-- being one fact_add (scope_ids[i], contents[i], and, when given, confidences[i], sources[i],
-- metadata[i], created_ats[i], embeddings[i]; a NULL array means fact_add's default for every
-- element). Same checks as fact_add, all or nothing: the first invalid element refuses the whole
-- call (22023, naming its position) and nothing is written. Idempotent like fact_add: a fact
-- already active for its subject, or given twice in the batch, is one row (created is false for
-- it, and for every repeat after the first). Learned facts are refused here: their per-subject
-- cap needs fact_add's lock and trim. One row per element, in order: (ord, id, created).
-- One statement per step, whatever the number of elements or subjects: the checks, the
-- subjects' locks, the facts (found or inserted), the vectors. expires_at or ttl (as in fact_add)
-- is the expiry of every fact of the batch, the new ones and those there already. valid_from /
-- valid_to (as in fact_add) are the valid time of every fact of the batch: a fact there already
-- with another one is restated (a new version; created is true for it).
--   SELECT * FROM pymem.facts_add_many('user', ARRAY['erin', 'frank'], ARRAY['Prefers email', 'Likes tea']);
CREATE OR REPLACE FUNCTION pymem.facts_add_many(
    scope text,
    scope_ids text[],
    contents text[],
    project_id text DEFAULT '',
    confidences double precision[] DEFAULT NULL,
    sources text[] DEFAULT NULL,
    metadata jsonb[] DEFAULT NULL,
    embeddings vector[] DEFAULT NULL,
    embedder text DEFAULT NULL,
    created_ats timestamptz[] DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    ttl interval DEFAULT NULL,
    valid_from timestamptz DEFAULT NULL,
    valid_to timestamptz DEFAULT NULL)
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
       OR pg_catalog.cardinality(coalesce(facts_add_many.confidences, pg_catalog.array_fill(1.0::float8, ARRAY[v_n]))) <> v_n
       OR pg_catalog.cardinality(coalesce(facts_add_many.sources, pg_catalog.array_fill('manual'::text, ARRAY[v_n]))) <> v_n
       OR pg_catalog.cardinality(coalesce(facts_add_many.metadata, pg_catalog.array_fill('{}'::jsonb, ARRAY[v_n]))) <> v_n
       OR pg_catalog.cardinality(coalesce(facts_add_many.created_ats, pg_catalog.array_fill(NULL::timestamptz, ARRAY[v_n]))) <> v_n
       OR (facts_add_many.embeddings IS NOT NULL AND pg_catalog.cardinality(facts_add_many.embeddings) <> v_n) THEN
        RAISE EXCEPTION 'pymem: facts_add_many needs scope_ids and contents, and every array it is given, of one length'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._check_batch('facts_add_many', 'facts', v_n, 100000);
    IF facts_add_many.expires_at IS NOT NULL OR facts_add_many.ttl IS NOT NULL THEN
        v_expires := pymem._expiry(facts_add_many.expires_at, facts_add_many.ttl);
    END IF;
    IF facts_add_many.valid_from IS NOT NULL OR facts_add_many.valid_to IS NOT NULL THEN
        PERFORM pymem._valid_time(facts_add_many.valid_from, facts_add_many.valid_to);
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- every element checked as fact_add checks it, in one pass: the first element whose subject is
    -- invalid (element 1 for an invalid scope or project), else the first whose values are; then
    -- fact_add's own check of that element says what is wrong with it
    SELECT pg_catalog.min(u.i) FILTER (WHERE u.s IS NULL OR pg_catalog.length(u.s) > 256 OR u.s = '*'
                                             OR (u.s = '' AND facts_add_many.scope <> 'agent')),
           pg_catalog.min(u.i) FILTER (WHERE u.t IS NULL OR u.t = '' OR pg_catalog.length(u.t) > 65536
        OR (facts_add_many.confidences IS NOT NULL AND (u.conf IS NULL OR u.conf = 'NaN'::float8 OR u.conf < 0 OR u.conf > 1))
        OR (facts_add_many.sources IS NOT NULL AND (u.src IS NULL OR u.src NOT IN ('manual', 'trace')))
        OR (facts_add_many.metadata IS NOT NULL AND (u.meta IS NULL OR pg_catalog.jsonb_typeof(u.meta) <> 'object'))
        OR (u.at IS NOT NULL AND (NOT pg_catalog.isfinite(u.at)
                                  OR u.at > pg_catalog.clock_timestamp() + pg_catalog.make_interval(mins => 5))))
      INTO v_bad_subject, v_bad
      FROM (SELECT r.s, pymem._fact_trim(r.c) AS t, r.conf, r.src, r.meta, r.at, r.i  -- OFFSET 0: one trim per element
              FROM ROWS FROM (pg_catalog.unnest(facts_add_many.scope_ids), pg_catalog.unnest(facts_add_many.contents),
                              pg_catalog.unnest(facts_add_many.confidences), pg_catalog.unnest(facts_add_many.sources),
                              pg_catalog.unnest(facts_add_many.metadata), pg_catalog.unnest(facts_add_many.created_ats))
                   WITH ORDINALITY AS r(s, c, conf, src, meta, at, i)
            OFFSET 0) AS u;
    IF facts_add_many.scope IS NULL OR facts_add_many.scope NOT IN ('agent', 'user', 'project')
       OR facts_add_many.project_id IS NULL OR facts_add_many.project_id = '*' OR pg_catalog.length(facts_add_many.project_id) > 256 THEN
        v_bad_subject := 1;
    END IF;
    IF v_bad_subject IS NOT NULL OR v_bad IS NOT NULL THEN
        v_bad := coalesce(v_bad_subject, v_bad);
        BEGIN
            v_ok := pymem._fact_check_subject(facts_add_many.scope, facts_add_many.scope_ids[v_bad], facts_add_many.project_id, 'exact');
            IF facts_add_many.sources[v_bad] = 'learned' THEN
                RAISE EXCEPTION 'pymem: learned facts are added one at a time (fact_add), under their subject''s cap'
                    USING ERRCODE = '22023';
            END IF;
            v_message := pymem._fact_check_values(facts_add_many.contents[v_bad], coalesce(facts_add_many.confidences[v_bad], 1.0),
                                                  coalesce(facts_add_many.sources[v_bad], 'manual'), NULL,
                                                  coalesce(facts_add_many.metadata[v_bad], '{}'::jsonb));
            PERFORM pymem._fact_check_time(facts_add_many.created_ats[v_bad]);
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
                                    facts_add_many.contents, facts_add_many.confidences, facts_add_many.sources,
                                    facts_add_many.metadata, facts_add_many.created_ats, v_expires,
                                    facts_add_many.valid_from, facts_add_many.valid_to) AS m;
    -- a fact another transaction committed (or superseded) while this one ran: one at a time
    FOR v_i IN SELECT u.i FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS u(id, i) WHERE u.id IS NULL LOOP
        SELECT a.id, a.created INTO v_one, v_one_created
          FROM pymem.fact_add(facts_add_many.scope, facts_add_many.scope_ids[v_i], facts_add_many.contents[v_i],
                              facts_add_many.project_id, coalesce(facts_add_many.confidences[v_i], 1.0),
                              coalesce(facts_add_many.sources[v_i], 'manual'), NULL,
                              coalesce(facts_add_many.metadata[v_i], '{}'::jsonb), NULL, NULL, NULL,
                              facts_add_many.created_ats[v_i], expires_at => v_expires,
                              valid_from => facts_add_many.valid_from, valid_to => facts_add_many.valid_to) AS a;
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
    IF facts_add_many.valid_from IS NOT NULL OR facts_add_many.valid_to IS NOT NULL THEN
        -- the facts that were there already with another valid time are restated, as fact_add's
        -- re-adds are (one at a time: a rare path; a repeat within the batch finds the first's)
        FOR v_i IN 1 .. v_n LOOP
            CONTINUE WHEN v_created[v_i];
            SELECT r.id, r.created INTO v_one, v_one_created
              FROM pymem._fact_restate(facts_add_many.project_id, facts_add_many.scope, facts_add_many.scope_ids[v_i],
                                       pymem.fact_key(pymem._fact_trim(facts_add_many.contents[v_i])),
                                       facts_add_many.valid_from, facts_add_many.valid_to,
                                       facts_add_many.created_ats[v_i]) AS r;
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
