-- recall_indexes.sql: recall's index paths for heavy users. Their per-user recall indexes:
-- recall_index_plan, the statements that create, rebuild or drop them (pymem.recall_indexes,
-- migrations/0006_v0_2_0_memory.sql, records the plan), and _recall_time_index, the time index
-- beside each. Their words (pymem.recall_terms, migrations/0006_v0_2_0_memory.sql): filling a
-- registered user's postings (recall_terms_fill, the fill step of recall_index_plan;
-- text_search_configure refills them after a re-index), their counts (_recall_term_counts) and
-- the lexical candidates of a heavy user's hybrid recall (_recall_lexical). New messages of a
-- registered user get their postings from the lexeme trigger (_message_lexemes_add,
-- conversations_embeddings.sql). _recall (recall.sql) reads these paths. Part of the recall
-- family (recall.sql); calls only 00_common.sql. Re-applied on every migrate; called by
-- pymem/recall.py (`pymem recall-indexes`, which also runs recall_terms_fill as
-- recall_index_plan returns it) and by any SQL client (docs/recall-indexes.md).
--
-- Errors: 22023 invalid argument; 55P03 when the plan's lock is held too long.

-- _recall_time_index: the name of the time index beside a heavy user's recall index p_index: a
-- partial btree on created_at over the same rows, through which _recall finds the messages of a
-- narrow time (since / until, a named time) instead of an IVFFlat scan that would run through
-- the whole index looking for them. Its predicate also says created_at > '-infinity', which only
-- _recall's statements say: no other plan reads the user's rows through it (with stale
-- statistics a planner took it for a small table and scanned it once per looked-up message).
CREATE OR REPLACE FUNCTION pymem._recall_time_index(p_index text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pymem, pg_temp
RETURN p_index || '_time';

-- recall_index_plan: the statements that bring a project's per-user recall indexes up to date
-- (heavy users; docs/recall-indexes.md), in the order to run them, after recording the plan in
-- pymem.recall_indexes. A user with at least min_messages vectors from one embedder (of at most
-- 2,000 dimensions, IVFFlat's limit) gets a partial IVFFlat index over them, with lists =
-- round(sqrt(vectors)) (at most what this session's maintenance_work_mem lets the build sample); it is rebuilt (DROP, then CREATE) once the user has twice the vectors it
-- was planned for, or when a build left it invalid or missing; a recorded user below min_messages
-- loses it, and so does an erased user (user_forget removes the registration; the plan drops an
-- index of the project that nothing registers, with user_id and embedder NULL). Beside it, a
-- registered user gets its time index (_recall_time_index: a partial btree on created_at, created
-- once, dropped with the user, built again when missing or invalid). A registered
-- user whose words (pymem.recall_terms, the lexical candidates of the user's hybrid recall) were
-- never filled gets a step of its own, action 'fill' (embedder NULL): SELECT
-- pymem.recall_terms_fill(...); a user left with no index loses them in the plan's transaction.
-- The other statements are CREATE INDEX CONCURRENTLY or DROP INDEX CONCURRENTLY, which no
-- function and no transaction block can run and which only the owner of pymem's tables may run:
-- `pymem recall-indexes` runs them, or psql:
--   SELECT statement FROM pymem.recall_index_plan(project_id => 'acme') \gexec
-- Until an index is built and valid, its user's recall takes the exact scan. Counting reads every
-- vector of the project (the primary key). For administrators (not granted to the app role).
-- Locking: one plan at a time per project, under a transaction-level advisory lock whose key any
-- role could compute and hold; the wait for it is bounded by the caller's lock_timeout, or 60 s
-- when that is 0 (none; the caller's setting is put back once the lock is held), and a plan that
-- waited it out fails with 55P03 naming the sessions that hold the key.
CREATE OR REPLACE FUNCTION pymem.recall_index_plan(project_id text DEFAULT '', min_messages integer DEFAULT 50000)
RETURNS TABLE (user_id text, embedder text, vectors bigint, action text, statement text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_ext text;
    v_type oid;
    v_wait text := pg_catalog.current_setting('lock_timeout');
    v_holders text;
    v_registered text[];
    v_dropped text[] := '{}';  -- the indexes the plan above drops already
    v_unregistered text[] := '{}';  -- the users whose registration the plan deletes
    v_filled boolean;
    v_valid boolean;           -- a time index's state: valid, invalid, NULL when missing
    v_user text;
    r record;
BEGIN
    PERFORM pymem._tenant_enter(recall_index_plan.project_id);
    IF recall_index_plan.min_messages IS NULL OR recall_index_plan.min_messages < 1 THEN
        RAISE EXCEPTION 'pymem: min_messages must be a positive number of vectors (got %)',
                        coalesce(recall_index_plan.min_messages::text, 'NULL')
            USING ERRCODE = '22023', HINT = 'Pass min_messages => 50000 (the default) or another positive count.';
    END IF;
    SELECT pg_catalog.quote_ident(n.nspname::text) INTO v_ext
      FROM pg_catalog.pg_extension AS e JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    SELECT a.atttypid INTO v_type FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid = 'pymem.message_embeddings'::pg_catalog.regclass AND a.attname = 'embedding';
    -- one plan at a time per project (two would record and build the same index twice)
    IF v_wait = '0' THEN
        PERFORM pg_catalog.set_config('lock_timeout', '60s', true);
    END IF;
    BEGIN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pymem.recall_index_plan'),
                                                 pg_catalog.hashtext(recall_index_plan.project_id));
    EXCEPTION WHEN lock_not_available THEN
        SELECT pg_catalog.string_agg(pg_catalog.format('pid %s (role %s, application %L, %s)', a.pid,
                   coalesce(a.usename::text, '?'), a.application_name, coalesce(a.state, '?')), ', ' ORDER BY a.pid)
          INTO v_holders
          FROM pg_catalog.pg_locks AS l JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
           AND l.classid = pg_catalog.hashtext('pymem.recall_index_plan')::oid
           AND l.objid = pg_catalog.hashtext(recall_index_plan.project_id)::oid;
        RAISE EXCEPTION 'pymem: waited % for the recall-index lock of project %, which another session holds',
                        pg_catalog.current_setting('lock_timeout'), pg_catalog.quote_literal(recall_index_plan.project_id)
            USING ERRCODE = '55P03',
                  DETAIL = 'Held by ' || coalesce(v_holders, 'a session that has since let it go') || '.',
                  HINT = 'Wait for that plan to finish, or end the session holding the lock (pg_terminate_backend).';
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_wait, true);
    FOR r IN
        WITH heavy AS (
            SELECT e.user_id, e.embedder, pg_catalog.count(*) AS vectors
              FROM pymem.message_embeddings AS e
             WHERE e.project_id = recall_index_plan.project_id
             GROUP BY e.user_id, e.embedder
            HAVING pg_catalog.count(*) >= recall_index_plan.min_messages),
        wanted AS (
            SELECT h.user_id, h.embedder, h.vectors, d.dimension AS dims,
                   -- IVFFlat's k-means samples 50 vectors per list and must fit maintenance_work_mem
                   LEAST(GREATEST(pg_catalog.round(pg_catalog.sqrt(h.vectors)), 1), 32768,
                         GREATEST(pg_catalog.pg_size_bytes(pg_catalog.current_setting('maintenance_work_mem')) * 0.8
                                  / (50 * (8 + 4 * d.dimension)), 1))::integer AS lists,
                   'message_embeddings_recall_' || pg_catalog.left(pg_catalog.md5(pg_catalog.format('%L %L %L',
                       recall_index_plan.project_id, h.user_id, h.embedder)), 20) AS index_name
              FROM heavy AS h
              JOIN pymem.embedders AS d ON d.project_id = recall_index_plan.project_id AND d.name = h.embedder
             WHERE d.dimension <= 2000)
        SELECT coalesce(w.user_id, x.user_id) AS user_id, coalesce(w.embedder, x.embedder) AS embedder,
               coalesce(w.vectors, 0) AS vectors, w.dims, w.lists, w.index_name, x.index_name AS old_name,
               CASE WHEN w.user_id IS NULL THEN 'drop'
                    WHEN x.user_id IS NULL THEN 'create'
                    WHEN NOT coalesce((SELECT i.indisvalid FROM pg_catalog.pg_index AS i
                                        WHERE i.indexrelid = pg_catalog.to_regclass('pymem.' || pg_catalog.quote_ident(x.index_name))),
                                      false)
                         OR w.vectors >= 2 * x.vectors OR w.dims <> x.dims THEN 'rebuild'
               END AS action
          FROM wanted AS w
          FULL JOIN (SELECT * FROM pymem.recall_indexes AS ri WHERE ri.project_id = recall_index_plan.project_id) AS x
            ON x.user_id = w.user_id AND x.embedder = w.embedder
         ORDER BY 1, 2
    LOOP
        CONTINUE WHEN r.action IS NULL;
        v_filled := false;
        IF r.action IN ('drop', 'rebuild') THEN
            DELETE FROM pymem.recall_indexes AS ri
             WHERE ri.project_id = recall_index_plan.project_id AND ri.user_id = r.user_id AND ri.embedder = r.embedder
            RETURNING ri.terms_filled INTO v_filled;
            IF r.action = 'drop' THEN
                v_unregistered := v_unregistered || r.user_id;
            END IF;
            user_id := r.user_id; embedder := r.embedder; vectors := r.vectors; action := 'drop';
            statement := pg_catalog.format('DROP INDEX CONCURRENTLY IF EXISTS pymem.%I', r.old_name);
            v_dropped := v_dropped || r.old_name;
            RETURN NEXT;
            IF r.action = 'drop' THEN  -- and its time index (a rebuild keeps it: a btree needs none)
                statement := pg_catalog.format('DROP INDEX CONCURRENTLY IF EXISTS pymem.%I',
                                               pymem._recall_time_index(r.old_name));
                v_dropped := v_dropped || pymem._recall_time_index(r.old_name);
                RETURN NEXT;
            END IF;
        END IF;
        IF r.action IN ('create', 'rebuild') THEN
            -- the user's words are there already (a rebuild, or another embedder's index); a
            -- statement of its own: Citus takes no sub-select in an INSERT ... VALUES
            v_filled := coalesce(v_filled, false) OR EXISTS (
                SELECT 1 FROM pymem.recall_indexes AS ri
                 WHERE ri.project_id = recall_index_plan.project_id AND ri.user_id = r.user_id AND ri.terms_filled);
            INSERT INTO pymem.recall_indexes (project_id, user_id, embedder, index_name, dims, lists, vectors, terms_filled)
            VALUES (recall_index_plan.project_id, r.user_id, r.embedder, r.index_name, r.dims, r.lists, r.vectors, v_filled);
            user_id := r.user_id; embedder := r.embedder; vectors := r.vectors; action := 'create';
            statement := pg_catalog.format(
                'CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON pymem.message_embeddings USING ivfflat '
                '((embedding::%s) %s.vector_cosine_ops) WITH (lists = %s) '
                'WHERE project_id = %L AND user_id = %L AND embedder = %L',
                r.index_name, pg_catalog.format_type(v_type, r.dims), v_ext, r.lists,
                recall_index_plan.project_id, r.user_id, r.embedder);
            RETURN NEXT;
        END IF;
    END LOOP;
    -- each registered user's time index (_recall_time_index), when missing or left invalid by a
    -- build that failed (its state in a statement of its own: Citus joins no catalog with a
    -- distributed table)
    FOR r IN
        SELECT ri.user_id, ri.embedder, ri.vectors, pymem._recall_time_index(ri.index_name) AS time_index
          FROM pymem.recall_indexes AS ri
         WHERE ri.project_id = recall_index_plan.project_id
         ORDER BY 1, 2
    LOOP
        v_valid := (SELECT i.indisvalid FROM pg_catalog.pg_index AS i
                     WHERE i.indexrelid = pg_catalog.to_regclass('pymem.' || pg_catalog.quote_ident(r.time_index)));
        CONTINUE WHEN v_valid;
        user_id := r.user_id; embedder := r.embedder; vectors := r.vectors;
        IF v_valid IS NOT NULL THEN
            action := 'drop';
            statement := pg_catalog.format('DROP INDEX CONCURRENTLY IF EXISTS pymem.%I', r.time_index);
            RETURN NEXT;
        END IF;
        action := 'create';
        statement := pg_catalog.format(
            'CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON pymem.message_embeddings (created_at) '
            'WHERE project_id = %L AND user_id = %L AND embedder = %L AND created_at > ''-infinity''',
            r.time_index, recall_index_plan.project_id, r.user_id, r.embedder);
        RETURN NEXT;
    END LOOP;
    -- the words of the heavy users (pymem.recall_terms, 0006_v0_2_0_memory): a registered user
    -- whose words were never filled gets a 'fill' step (recall_terms_fill: a long statement of
    -- its own); a user with no registration left loses them here
    FOR r IN
        SELECT ri.user_id, pg_catalog.max(ri.vectors) AS vectors FROM pymem.recall_indexes AS ri
         WHERE ri.project_id = recall_index_plan.project_id
         GROUP BY ri.user_id HAVING NOT pg_catalog.bool_and(ri.terms_filled)
         ORDER BY 1
    LOOP
        user_id := r.user_id; embedder := NULL; vectors := r.vectors; action := 'fill';
        statement := pg_catalog.format('SELECT pymem.recall_terms_fill(user_id => %L, project_id => %L)',
                                       r.user_id, recall_index_plan.project_id);
        RETURN NEXT;
    END LOOP;
    FOREACH v_user IN ARRAY v_unregistered LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pymem.recall_indexes AS ri
                               WHERE ri.project_id = recall_index_plan.project_id AND ri.user_id = v_user);
        DELETE FROM pymem.recall_terms AS t WHERE t.project_id = recall_index_plan.project_id AND t.user_id = v_user;
    END LOOP;
    -- an index of this project that nothing registers any more: its user was erased (user_forget
    -- deletes the registration; only a statement outside a transaction may drop the index).
    -- Registered names first, in a statement of their own: Citus joins no catalog with a
    -- distributed table.
    SELECT coalesce(pg_catalog.array_agg(ri.index_name) || pg_catalog.array_agg(pymem._recall_time_index(ri.index_name)), '{}')
      INTO v_registered
      FROM pymem.recall_indexes AS ri WHERE ri.project_id = recall_index_plan.project_id;
    FOR r IN
        SELECT c.relname::text AS old_name
          FROM pg_catalog.pg_index AS i
          JOIN pg_catalog.pg_class AS c ON c.oid = i.indexrelid
         WHERE i.indrelid = 'pymem.message_embeddings'::pg_catalog.regclass
           AND c.relname::text LIKE 'message\_embeddings\_recall\_%'
           AND pg_catalog.starts_with(pg_catalog.pg_get_expr(i.indpred, i.indrelid),
                                      pg_catalog.format('((project_id = %L::text) AND ', recall_index_plan.project_id))
           AND c.relname::text <> ALL (v_registered)
         ORDER BY 1
    LOOP
        CONTINUE WHEN r.old_name = ANY (v_dropped);
        user_id := NULL; embedder := NULL; vectors := 0; action := 'drop';
        statement := pg_catalog.format('DROP INDEX CONCURRENTLY IF EXISTS pymem.%I', r.old_name);
        RETURN NEXT;
    END LOOP;
END;
$$;

-- _recall_terms_fill(project_id, user_id): a user's postings, one row per (message, distinct
-- lexeme) of the user's message_lexemes, those already there kept; records them filled on the
-- user's rows of pymem.recall_indexes. Returns how many postings it added. One statement: about
-- 10 postings per message (a read of the user's lexemes, a write per posting and its two index
-- entries).
CREATE OR REPLACE FUNCTION pymem._recall_terms_fill(p_project_id text, p_user_id text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    INSERT INTO pymem.recall_terms AS t (project_id, user_id, lexeme, thread_id, seq)
    SELECT l.project_id, l.user_id, w.lexeme, l.thread_id, l.seq
      FROM pymem.message_lexemes AS l
     CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.tsvector_to_array(l.lexemes)) AS w(lexeme)
     WHERE l.project_id = p_project_id AND l.user_id = p_user_id
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    UPDATE pymem.recall_indexes AS r SET terms_filled = true
     WHERE r.project_id = p_project_id AND r.user_id = p_user_id AND NOT r.terms_filled;
    RETURN v_count;
END;
$$;

-- recall_terms_fill(user_id, project_id): a registered heavy user's words (pymem.recall_terms),
-- filled from the stored lexemes: the 'fill' step of recall_index_plan, which returns
--   SELECT pymem.recall_terms_fill(user_id => ..., project_id => ...)
-- for each registered user whose words were never filled (a statement, not a step of the plan's
-- own transaction: about 10 rows per message, for a heavy user longer than a pool's statement
-- timeout (docs/performance.md), and a dry run must not pay it). Returns how many rows it added;
-- 0 for a user with no recall index (only registered users' words are kept up to date).
-- Idempotent. For administrators (not granted to the app role), like recall_index_plan.
CREATE OR REPLACE FUNCTION pymem.recall_terms_fill(user_id text, project_id text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(recall_terms_fill.project_id);
    IF NOT EXISTS (SELECT 1 FROM pymem.recall_indexes AS r
                    WHERE r.project_id = recall_terms_fill.project_id AND r.user_id = recall_terms_fill.user_id) THEN
        RETURN 0;
    END IF;
    RETURN pymem._recall_terms_fill(recall_terms_fill.project_id, recall_terms_fill.user_id);
END;
$$;

-- _recall_term_counts(project_id, user_id, lexemes): how many of the user's messages hold each
-- lexeme (in order), from its words, counted up to 10,000 (an index-only range of the primary key,
-- docs/performance.md; beyond 10,000 the count says 10,000, an idf a little too high for
-- the commonest words). BM25's document frequencies of a heavy user's hybrid recall (_recall).
CREATE OR REPLACE FUNCTION pymem._recall_term_counts(p_project_id text, p_user_id text, p_lexemes text[])
RETURNS double precision[]
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN ARRAY(SELECT (SELECT pg_catalog.count(*) FROM (
                             SELECT 1 FROM pymem.recall_terms AS t
                              WHERE t.project_id = p_project_id AND t.user_id = p_user_id AND t.lexeme = w.w
                              LIMIT 10000) AS x)::float8
                   FROM pg_catalog.unnest(p_lexemes) WITH ORDINALITY AS w(w, i)
                  ORDER BY w.i);
END;
$$;

-- _recall_lexical: the lexical candidates of a heavy user's hybrid recall (_recall): the user's
-- messages holding one of the query's lexemes (p_lexemes), read through recall_terms' primary key
-- (one index range per term), each with its vector of p_embedder by primary key, and every
-- eligibility condition of _recall_ranked (as_of, min_content_chars, since / until, the current
-- thread's window, the metadata filter), leaving out the rows already among the vector
-- candidates (p_threads, p_seqs). A term held by more than 400 of the user's messages gives
-- none: a common word has a small idf, its holders rank by their vector (the index's
-- candidates), and each holder costs a read of its vector by key (docs/performance.md, "Measured in the
-- SQL").
-- _recall passes the rarest terms first within 400 postings in all. Returns what _recall keeps of a candidate: the
-- cosine with the query, the length in tokens and the lexemes (vectors stored before 0006_v0_2_0_memory: their
-- message's, by primary key).
CREATE OR REPLACE FUNCTION pymem._recall_lexical(
    p_project_id text, p_user_id text, p_thread_id text, p_query vector, p_embedder text, p_lexemes text[],
    p_spec pymem.recall_spec, p_window_after bigint, p_threads text[], p_seqs bigint[])
RETURNS TABLE (thread_id text, seq bigint, created_at timestamptz, similarity double precision, tokens integer,
               lexemes tsvector)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_as_of timestamptz := p_spec.as_of;
    v_since timestamptz := p_spec.since;
    v_until timestamptz := p_spec.until;
    v_min_chars integer := p_spec.min_content_chars;
    v_filter jsonb := p_spec.metadata;
BEGIN
    -- LATERAL both ways: each term's postings by the primary key, then each message's vector by
    -- primary key; a plain join of the postings with message_embeddings was planned once as a
    -- scan of the user's 160,000 vectors, filtered (docs/performance.md)
    RETURN QUERY
    SELECT x.thread_id, x.seq, x.created_at, x.similarity, x.tokens, x.lexemes
      FROM (SELECT DISTINCT h.thread_id, h.seq
              FROM pg_catalog.unnest(p_lexemes) AS q(lexeme)
             CROSS JOIN LATERAL (
                   SELECT pg_catalog.array_agg(t.thread_id) AS threads, pg_catalog.array_agg(t.seq) AS seqs
                     FROM (SELECT t.thread_id, t.seq FROM pymem.recall_terms AS t
                            WHERE t.project_id = p_project_id AND t.user_id = p_user_id AND t.lexeme = q.lexeme
                            LIMIT 401) AS t) AS a
             CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(a.threads), pg_catalog.unnest(a.seqs)) AS h(thread_id, seq)
             WHERE pg_catalog.cardinality(a.threads) <= 400
               AND NOT EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest(p_threads), pg_catalog.unnest(p_seqs)) AS c(t, s)
                                WHERE c.t = h.thread_id AND c.s = h.seq)) AS p
     CROSS JOIN LATERAL (
           SELECT e.thread_id, e.seq, e.created_at, 1 - pymem._cosine_distance(e.embedding, p_query) AS similarity,
                  coalesce(e.tokens, CASE WHEN e.lexemes IS NULL THEN (
                      SELECT l.tokens FROM pymem.message_lexemes AS l
                       WHERE l.project_id = p_project_id AND l.user_id = p_user_id AND l.thread_id = e.thread_id
                         AND l.seq = e.seq) END) AS tokens,
                  coalesce(e.lexemes, (
                      SELECT l.lexemes FROM pymem.message_lexemes AS l
                       WHERE l.project_id = p_project_id AND l.user_id = p_user_id AND l.thread_id = e.thread_id
                         AND l.seq = e.seq)) AS lexemes
             FROM pymem.message_embeddings AS e
            WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
              AND e.thread_id = p.thread_id AND e.seq = p.seq
              AND (v_as_of IS NULL OR e.created_at <= v_as_of) AND e.chars >= v_min_chars
              AND (v_since IS NULL OR e.created_at >= v_since) AND (v_until IS NULL OR e.created_at < v_until)
              AND NOT (e.thread_id = p_thread_id AND e.seq > p_window_after)
              AND (v_filter IS NULL OR EXISTS (
                      SELECT 1 FROM pymem.messages AS m
                       WHERE m.project_id = p_project_id AND m.user_id = p_user_id
                         AND m.thread_id = e.thread_id AND m.seq = e.seq AND m.metadata @> v_filter))
           OFFSET 0) AS x;  -- a fence: not flattened into a join the planner may turn around
END;
$$;
