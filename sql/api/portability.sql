-- portability.sql: a user's whole memory as one JSON document, and back; and the erasure of a
-- user with its receipt (user_forget, erasures; the receipts' table is
-- migrations/0038_erasures.sql). Re-applied on every migrate. Called by `pymem export` /
-- `pymem import` (pymem/portability.py), Memory.forget_user and any SQL client.
-- The document holds the user's facts with their supersede history, every thread with its
-- messages and running summary. Vectors are not exported: the importing side embeds again
-- (recall and semantic retrieval catch up in one batch on first use).
-- user_import runs in one transaction: it writes everything or nothing.

-- user_export: the document for (project_id, user_id); format "pymem.user/1". A user with no
-- facts and no threads in that project is refused (P0002), not exported as an empty document:
-- a mistyped id or a forgotten project_id would otherwise look like a user with no memory.
--   SELECT pymem.user_export(user_id => 'alice');
CREATE OR REPLACE FUNCTION pymem.user_export(user_id text, project_id text DEFAULT '')
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(user_export.project_id);
    PERFORM pymem._fact_check_subject('user', user_export.user_id, user_export.project_id, 'exact');
    -- every history ends in an active fact, so looking at active ones (indexed) is enough
    IF NOT EXISTS (SELECT 1 FROM pymem.active_facts AS f
                    WHERE f.project_id = user_export.project_id AND f.scope = 'user' AND f.scope_id = user_export.user_id)
       AND NOT EXISTS (SELECT 1 FROM pymem.threads AS t
                        WHERE t.project_id = user_export.project_id AND t.user_id = user_export.user_id) THEN
        RAISE EXCEPTION 'pymem: no user % in project %: it has no facts and no conversations there',
                pg_catalog.quote_literal(user_export.user_id), pg_catalog.quote_literal(user_export.project_id)
            USING ERRCODE = 'P0002', HINT = 'Each project is separate: check user_id and project_id.';
    END IF;
    RETURN pg_catalog.jsonb_build_object(
        'format', 'pymem.user/1',
        'project_id', user_export.project_id,
        'user_id', user_export.user_id,
        'facts', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                      'id', f.id, 'content', f.content, 'confidence', f.confidence, 'source', f.source,
                      'trace_id', f.trace_id, 'metadata', f.metadata, 'created_at', f.created_at,
                      'superseded_by', f.superseded_by, 'superseded_at', f.superseded_at,
                      'expires_at', f.expires_at) ORDER BY f.id), '[]')
                    FROM pymem.facts AS f
                   WHERE f.project_id = user_export.project_id AND f.scope = 'user' AND f.scope_id = user_export.user_id
                     AND pymem._unexpired(f.expires_at, pg_catalog.now())),
        'threads', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                        'thread_id', t.thread_id, 'summary', t.summary, 'summary_through', t.summary_through,
                        'summary_at', t.summary_at, 'created_at', t.created_at,
                        'messages', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                         'seq', m.seq, 'role', m.role, 'content', m.content, 'importance', m.importance,
                                         'metadata', m.metadata, 'created_at', m.created_at) ORDER BY m.seq), '[]')
                                       FROM pymem.messages AS m
                                      WHERE m.project_id = t.project_id AND m.user_id = t.user_id
                                        AND m.thread_id = t.thread_id)) ORDER BY t.thread_id), '[]')
                      FROM pymem.threads AS t
                     WHERE t.project_id = user_export.project_id AND t.user_id = user_export.user_id));
END;
$$;

-- user_import: loads a user_export document, under the document's project and user unless
-- project_id / user_id say otherwise. Refuses (22023) when that user already has facts or
-- threads there, unless replace => true (which first forgets them). Returns counts. A project
-- the caller may not serve is refused (42501) before the document is looked at.
--   SELECT pymem.user_import(document => pg_read_file(...)::jsonb, user_id => 'alice2');
-- Set-based, so its time is linear in the document's size: every check is one statement over
-- the whole document, the facts are inserted in one statement with ids drawn from the facts'
-- identity sequence beforehand (so a fact names its successor's new id as it is inserted, in
-- any order; the foreign key is checked at the end of that statement), and the messages of
-- every thread in one more. Refused with 22023: a fact without a numeric id, an id given
-- twice, a superseded_by naming no fact of the document, a supersede cycle (or a fact whose
-- successors lead into one), a thread without a thread_id or given twice, a message without a positive
-- numeric seq, and every check of fact_add and message_add.
CREATE OR REPLACE FUNCTION pymem.user_import(
    document jsonb, project_id text DEFAULT NULL, user_id text DEFAULT NULL, replace boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
-- every join below is between whole sets drawn from the document, which the planner estimates
-- at 100 rows each: a nested loop over them would make the import quadratic again
SET enable_nestloop = off
AS $$
#variable_conflict use_column
DECLARE
    v_project text := coalesce(user_import.project_id, document ->> 'project_id', '');
    v_user text := coalesce(user_import.user_id, document ->> 'user_id');
    v_facts jsonb := coalesce(document -> 'facts', '[]');
    v_threads jsonb := coalesce(document -> 'threads', '[]');
    v_count integer;
    v_bad text;
    v_next integer[];   -- per fact, by position in id order: the position of its successor (0: none)
    v_walk integer[];   -- per fact: the walk that reached it first (0: none yet)
    v_looped boolean[]; -- per walk (named by its first fact): it ended in a cycle
    v_pos integer;
    v_len integer;
    v_cyclic integer := 0;
    v_messages bigint;
    v_seq regclass := pg_catalog.pg_get_serial_sequence('pymem.facts', 'id')::regclass;
BEGIN
    -- the tenant first, as in every API function: a role bound to another project is refused
    -- (42501) whatever the document holds, before any check could tell it something about it
    PERFORM pymem._tenant_enter(v_project);
    IF document IS NULL OR pg_catalog.jsonb_typeof(document) <> 'object' OR document ->> 'format' IS DISTINCT FROM 'pymem.user/1' THEN
        RAISE EXCEPTION 'pymem: not a pymem user document (expected "format": "pymem.user/1")' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._fact_check_subject('user', v_user, v_project, 'exact');
    PERFORM pymem._conv_check(v_project, v_user, NULL, 'exact');
    IF pg_catalog.jsonb_typeof(v_facts) <> 'array' OR pg_catalog.jsonb_typeof(v_threads) <> 'array' THEN
        RAISE EXCEPTION 'pymem: "facts" and "threads" of the document must be arrays' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pymem.facts AS f WHERE f.project_id = v_project AND f.scope = 'user' AND f.scope_id = v_user)
       OR EXISTS (SELECT 1 FROM pymem.threads AS t WHERE t.project_id = v_project AND t.user_id = v_user) THEN
        IF NOT user_import.replace THEN
            RAISE EXCEPTION 'pymem: user % already has memory in project %', pg_catalog.quote_literal(v_user),
                    pg_catalog.quote_literal(v_project)
                USING ERRCODE = '22023', HINT = 'Import under another user_id, or pass replace => true.';
        END IF;
        PERFORM pymem.facts_forget('user', v_user, v_project);
        PERFORM pymem.conversation_forget(v_user, '*', v_project);
    END IF;

    -- facts: the shape of each, then the supersede pointers as a whole
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_facts) AS e
                WHERE pg_catalog.jsonb_typeof(e.value) IS DISTINCT FROM 'object'
                   OR pg_catalog.jsonb_typeof(e.value -> 'id') IS DISTINCT FROM 'number') THEN
        RAISE EXCEPTION 'pymem: every fact of the document needs a numeric "id"' USING ERRCODE = '22023';
    END IF;
    SELECT d.id::text INTO v_bad
      FROM (SELECT (e.value ->> 'id')::bigint AS id FROM pg_catalog.jsonb_array_elements(v_facts) AS e) AS d
     GROUP BY d.id HAVING pg_catalog.count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pymem: fact id % appears more than once in the document', v_bad USING ERRCODE = '22023';
    END IF;
    -- a fact that expired since the export is not imported (its history expired with it: no
    -- version outlives its successor, so no fact kept points at one left out)
    v_facts := coalesce((SELECT pg_catalog.jsonb_agg(e.value ORDER BY e.i)
                           FROM pg_catalog.jsonb_array_elements(v_facts) WITH ORDINALITY AS e(value, i)
                          WHERE pymem._unexpired((e.value ->> 'expires_at')::timestamptz, pg_catalog.now())), '[]');
    SELECT pg_catalog.count(*) INTO v_count
      FROM (SELECT (e.value ->> 'superseded_by')::bigint AS next FROM pg_catalog.jsonb_array_elements(v_facts) AS e) AS d
     WHERE d.next IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_facts) AS x WHERE (x.value ->> 'id')::bigint = d.next);
    IF v_count > 0 THEN
        RAISE EXCEPTION 'pymem: % fact(s) of the document point at facts it does not hold', v_count USING ERRCODE = '22023';
    END IF;
    -- Ids are unique and each fact has at most one successor; several facts may share one (a
    -- merge), so history is a set of trees, each ending in a fact without successor, unless
    -- some successors run in a cycle. Walk forward from each fact not yet reached, marking what
    -- the walk reaches, until a fact without successor, or a fact reached before: by an earlier
    -- walk (which ended well or in a cycle), or by this one (a cycle). Each fact is walked once.
    WITH d AS (
        SELECT x.id, x.next, pg_catalog.row_number() OVER (ORDER BY x.id)::integer AS pos
          FROM (SELECT (e.value ->> 'id')::bigint AS id, (e.value ->> 'superseded_by')::bigint AS next
                  FROM pg_catalog.jsonb_array_elements(v_facts) AS e) AS x
    )
    SELECT coalesce(pg_catalog.array_agg(coalesce(s.pos, 0) ORDER BY d.pos), '{}')
      INTO v_next
      FROM d LEFT JOIN d AS s ON s.id = d.next;
    v_walk := pg_catalog.array_fill(0, ARRAY[pg_catalog.cardinality(v_next)]);
    v_looped := pg_catalog.array_fill(false, ARRAY[pg_catalog.cardinality(v_next)]);
    FOR v_start IN 1 .. pg_catalog.cardinality(v_next) LOOP
        CONTINUE WHEN v_walk[v_start] <> 0;
        v_pos := v_start;
        v_len := 0;
        WHILE v_pos <> 0 AND v_walk[v_pos] = 0 LOOP
            v_walk[v_pos] := v_start;
            v_len := v_len + 1;
            v_pos := v_next[v_pos];
        END LOOP;
        IF v_pos <> 0 AND (v_walk[v_pos] = v_start OR v_looped[v_walk[v_pos]]) THEN
            v_looped[v_start] := true;
            v_cyclic := v_cyclic + v_len;
        END IF;
    END LOOP;
    IF v_cyclic > 0 THEN
        RAISE EXCEPTION 'pymem: % fact(s) of the document form or lead into a supersede cycle', v_cyclic
            USING ERRCODE = '22023';
    END IF;
    -- New ids in the order of the old ones (ties of created_at keep their order), drawn first
    -- so that each row carries its successor's new id.
    WITH doc AS (
        SELECT e.value AS fact, (e.value ->> 'id')::bigint AS id, (e.value ->> 'superseded_by')::bigint AS next
          FROM pg_catalog.jsonb_array_elements(v_facts) AS e
    ), ids AS MATERIALIZED (
        SELECT o.id, pg_catalog.nextval(v_seq) AS new_id
          FROM (SELECT d.id FROM doc AS d ORDER BY d.id) AS o
    )
    INSERT INTO pymem.facts AS f (id, project_id, scope, scope_id, content, content_key, confidence, source,
                                  trace_id, metadata, created_at, superseded_by, superseded_at, expires_at)
    OVERRIDING SYSTEM VALUE
    SELECT r.new_id, v_project, 'user', v_user, r.content, pymem.fact_key(r.content), r.confidence, r.source,
           r.trace_id, r.metadata, r.created_at, r.next_id, r.superseded_at, (r.fact ->> 'expires_at')::timestamptz
      FROM (SELECT i.new_id, s.new_id AS next_id, v.confidence, v.source, v.trace_id, v.metadata, d.fact,
                   pymem._fact_check_values(d.fact ->> 'content', v.confidence, v.source, v.trace_id, v.metadata) AS content,
                   coalesce((d.fact ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp()) AS created_at,
                   CASE WHEN d.next IS NOT NULL
                        THEN coalesce((d.fact ->> 'superseded_at')::timestamptz, pg_catalog.clock_timestamp()) END
                       AS superseded_at
              FROM doc AS d
              JOIN ids AS i ON i.id = d.id
              LEFT JOIN ids AS s ON s.id = d.next
             CROSS JOIN LATERAL (SELECT coalesce((d.fact ->> 'confidence')::float8, 1.0) AS confidence,
                                        coalesce(d.fact ->> 'source', 'manual') AS source, d.fact ->> 'trace_id' AS trace_id,
                                        coalesce(d.fact -> 'metadata', '{}') AS metadata) AS v
             ORDER BY i.new_id
            OFFSET 0) AS r;  -- OFFSET 0: each row's checks run once

    -- threads and their messages
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_threads) AS t WHERE t.value ->> 'thread_id' IS NULL) THEN
        RAISE EXCEPTION 'pymem: every thread of the document needs a "thread_id"' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._conv_check(v_project, v_user, t.value ->> 'thread_id', 'exact')
       FROM pg_catalog.jsonb_array_elements(v_threads) AS t;
    SELECT t.value ->> 'thread_id' INTO v_bad FROM pg_catalog.jsonb_array_elements(v_threads) AS t
     GROUP BY t.value ->> 'thread_id' HAVING pg_catalog.count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pymem: thread % appears more than once in the document', pg_catalog.quote_literal(v_bad)
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_threads) AS t,
                             pg_catalog.jsonb_array_elements(coalesce(t.value -> 'messages', '[]')) AS m
                WHERE pg_catalog.jsonb_typeof(m.value -> 'seq') IS DISTINCT FROM 'number'
                   OR (m.value ->> 'seq')::numeric <= 0) THEN
        RAISE EXCEPTION 'pymem: every message of the document needs a positive numeric "seq"' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._message_check(m.value ->> 'role', m.value ->> 'content', coalesce((m.value ->> 'importance')::float8, 1.0))
       FROM pg_catalog.jsonb_array_elements(v_threads) AS t,
            pg_catalog.jsonb_array_elements(coalesce(t.value -> 'messages', '[]')) AS m;
    INSERT INTO pymem.threads (project_id, user_id, thread_id, last_seq, summary, summary_through, summary_at, created_at)
    SELECT v_project, v_user, t.value ->> 'thread_id', l.last_seq, t.value ->> 'summary',
           LEAST(coalesce((t.value ->> 'summary_through')::bigint, 0), l.last_seq),
           (t.value ->> 'summary_at')::timestamptz,
           coalesce((t.value ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp())
      FROM pg_catalog.jsonb_array_elements(v_threads) AS t
     CROSS JOIN LATERAL (SELECT coalesce(pg_catalog.max((m.value ->> 'seq')::bigint), 0) AS last_seq
                           FROM pg_catalog.jsonb_array_elements(coalesce(t.value -> 'messages', '[]')) AS m) AS l;
    INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata, created_at)
    SELECT v_project, v_user, t.value ->> 'thread_id', (m.value ->> 'seq')::bigint, m.value ->> 'role',
           m.value ->> 'content', coalesce((m.value ->> 'importance')::float8, 1.0),
           coalesce(m.value -> 'metadata', '{}'),
           coalesce((m.value ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp())
      FROM pg_catalog.jsonb_array_elements(v_threads) AS t,
           pg_catalog.jsonb_array_elements(coalesce(t.value -> 'messages', '[]')) AS m;
    GET DIAGNOSTICS v_messages = ROW_COUNT;
    RETURN pg_catalog.jsonb_build_object('project_id', v_project, 'user_id', v_user,
                                         'facts', pg_catalog.jsonb_array_length(v_facts),
                                         'threads', pg_catalog.jsonb_array_length(v_threads), 'messages', v_messages);
END;
$$;

-- user_forget: erases one user of a project: every row that holds the user, in every table, in
-- one transaction, and returns the receipt, which is also kept in pymem.erasures and survives
-- the erasure. Deleted: the user's facts with their whole history, vectors and lexemes, the
-- subject's lock row; every thread with its messages, their vectors and lexemes and the running
-- summary and learning jobs; the user's learning usage; the user's recall-index registration (the index itself is dropped by the next
-- `pymem recall-indexes`, the receipt's recall_indexes count says one is due); the stores
-- named in store_keys (a store has no owner: the caller names the user's stores, e.g. one
-- store per user), whole, with their transcript, entries, audit log, versions and vectors
-- (a key naming no store is skipped). In every other store of the project, an entry, an audit
-- row or a version whose actor is the user keeps its row with the actor cleared (counted as
-- store_actors). The receipt: {"id", "project_id", "erased_at", "erased_by" (the login role),
-- "counts" (rows per kind), "digest"}. The digest is sha256 over one line per deleted row (its
-- key and the sha256 of its content; pymem._erasure_digest), so it holds no content. An
-- erasure waits for the user's turns in flight (it locks the user's threads, then the subject)
-- and erases them too; a write that starts after it is new memory. Erasing a user with nothing
-- left still writes a receipt (all counts 0).
--   SELECT pymem.user_forget(user_id => 'alice', project_id => 'acme');
CREATE OR REPLACE FUNCTION pymem.user_forget(user_id text, project_id text DEFAULT '', store_keys text[] DEFAULT '{}')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project text := user_forget.project_id;
    v_user text := user_forget.user_id;
    v_stores text[];
    v_key text;
    v_counts jsonb;
    v_n bigint;
    v_digest text;
    v_salt text := pg_catalog.gen_random_uuid()::text;
    v_id bigint;
    v_at timestamptz;
BEGIN
    PERFORM pymem._tenant_enter(v_project);
    PERFORM pymem._fact_check_subject('user', v_user, v_project, 'exact');
    PERFORM pymem._conv_check(v_project, v_user, NULL, 'exact');
    IF user_forget.store_keys IS NULL OR pg_catalog.array_position(user_forget.store_keys, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: store_keys must be an array of store keys (''{}'' for none), without NULLs'
            USING ERRCODE = '22023';
    END IF;
    FOREACH v_key IN ARRAY user_forget.store_keys LOOP
        PERFORM pymem._store_key_check(v_key, v_project);
    END LOOP;
    -- the user's turns in flight first (turn_record holds its thread, then the subject), then the subject
    PERFORM 1 FROM pymem.threads AS t WHERE t.project_id = v_project AND t.user_id = v_user
     ORDER BY t.thread_id FOR UPDATE;
    PERFORM pymem._subject_lock(v_project, 'user', v_user);
    -- the user's stores, each locked by its key (one shard each on Citus)
    v_stores := '{}';
    FOR v_key IN SELECT DISTINCT k.key FROM pg_catalog.unnest(user_forget.store_keys) AS k(key) ORDER BY 1 LOOP
        PERFORM 1 FROM pymem.stores AS s WHERE s.project_id = v_project AND s.store_key = v_key FOR UPDATE;
        IF FOUND THEN
            v_stores := v_stores || v_key;
        END IF;
    END LOOP;
    v_digest := pymem._erasure_digest(v_project, v_user, v_stores);

    -- counted as they go: children before parents, so no cascade runs row by row
    WITH e AS (DELETE FROM pymem.message_embeddings AS m WHERE m.project_id = v_project AND m.user_id = v_user RETURNING 1),
         l AS (DELETE FROM pymem.message_lexemes AS m WHERE m.project_id = v_project AND m.user_id = v_user RETURNING 1)
    SELECT pg_catalog.jsonb_build_object('message_embeddings', (SELECT pg_catalog.count(*) FROM e),
                                         'message_lexemes', (SELECT pg_catalog.count(*) FROM l))
      INTO v_counts;
    -- the user's learning jobs (0041: by key, no content) and learning usage
    DELETE FROM pymem.learning_jobs AS j WHERE j.project_id = v_project AND j.user_id = v_user;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('learning_jobs', v_n);
    DELETE FROM pymem.learning_usage AS u WHERE u.project_id = v_project AND u.user_id = v_user;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('learning_usage', v_n);
    -- the user's MCP bearer tokens (0047): each names the user, and a live one would let a client
    -- write the erased user's memory again
    DELETE FROM pymem.mcp_tokens AS t WHERE t.project_id = v_project AND t.user_id = v_user;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('mcp_tokens', v_n);
    DELETE FROM pymem.messages AS m WHERE m.project_id = v_project AND m.user_id = v_user;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('messages', v_n);
    WITH t AS (DELETE FROM pymem.threads AS t WHERE t.project_id = v_project AND t.user_id = v_user
               RETURNING t.summary IS NOT NULL AS summarised)
    SELECT v_counts || pg_catalog.jsonb_build_object('threads', pg_catalog.count(*),
                                                     'summaries', pg_catalog.count(*) FILTER (WHERE t.summarised))
      INTO v_counts FROM t;
    -- a heavy user's index is dropped by the next plan (recall_index_plan drops an index of the
    -- project that nothing registers)
    DELETE FROM pymem.recall_indexes AS r WHERE r.project_id = v_project AND r.user_id = v_user;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('recall_indexes', v_n);
    WITH e AS (DELETE FROM pymem.fact_embeddings AS x
                WHERE x.project_id = v_project AND x.scope = 'user' AND x.scope_id = v_user RETURNING 1),
         l AS (DELETE FROM pymem.fact_lexemes AS x
                WHERE x.project_id = v_project AND x.scope = 'user' AND x.scope_id = v_user RETURNING 1)
    SELECT v_counts || pg_catalog.jsonb_build_object('fact_embeddings', (SELECT pg_catalog.count(*) FROM e),
                                                     'fact_lexemes', (SELECT pg_catalog.count(*) FROM l))
      INTO v_counts;
    DELETE FROM pymem.facts AS f WHERE f.project_id = v_project AND f.scope = 'user' AND f.scope_id = v_user;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('facts', v_n);
    DELETE FROM pymem.subject_locks AS s WHERE s.project_id = v_project AND s.scope = 'user' AND s.scope_id = v_user;

    -- the user's stores, whole (their rows counted, then deleted with the store)
    SELECT v_counts || pg_catalog.jsonb_build_object(
               'stores', pg_catalog.cardinality(v_stores),
               'store_entries', (SELECT pg_catalog.count(*) FROM pymem.store_entries AS x
                                  WHERE x.project_id = v_project AND x.store_key = ANY (v_stores)),
               'store_messages', (SELECT pg_catalog.count(*) FROM pymem.store_messages AS x
                                   WHERE x.project_id = v_project AND x.store_key = ANY (v_stores)),
               'store_audit', (SELECT pg_catalog.count(*) FROM pymem.store_audit AS x
                                WHERE x.project_id = v_project AND x.store_key = ANY (v_stores)),
               'store_versions', (SELECT pg_catalog.count(*) FROM pymem.store_versions AS x
                                   WHERE x.project_id = v_project AND x.store_key = ANY (v_stores)),
               'store_vectors', (SELECT pg_catalog.count(*) FROM pymem.store_vectors AS x
                                  WHERE x.project_id = v_project AND x.store_key = ANY (v_stores)))
      INTO v_counts;
    DELETE FROM pymem.stores AS s WHERE s.project_id = v_project AND s.store_key = ANY (v_stores);
    -- the user as the actor of other stores' rows: the rows stay (they are the store's), the name goes
    WITH a AS (UPDATE pymem.store_entries AS x SET actor = NULL WHERE x.project_id = v_project AND x.actor = v_user RETURNING 1),
         b AS (UPDATE pymem.store_audit AS x SET actor = NULL WHERE x.project_id = v_project AND x.actor = v_user RETURNING 1),
         c AS (UPDATE pymem.store_versions AS x SET actor = NULL WHERE x.project_id = v_project AND x.actor = v_user RETURNING 1)
    SELECT v_counts || pg_catalog.jsonb_build_object('store_actors',
               (SELECT pg_catalog.count(*) FROM a) + (SELECT pg_catalog.count(*) FROM b) + (SELECT pg_catalog.count(*) FROM c))
      INTO v_counts;

    -- the user's rows of the change feed (0042) and those of the user's stores, the ones the
    -- deletes above just wrote included: the feed keeps the receipt's id (its own row), never the user's.
    -- The project's position row first, as a publisher of rows from before 0048 takes it before
    -- theirs (changes_since): the other order deadlocked the two (this transaction takes it at
    -- its commit anyway, for its receipt's position)
    PERFORM 1 FROM pymem.change_positions AS p WHERE p.project_id = v_project FOR UPDATE;
    DELETE FROM pymem.changes AS x
     WHERE x.project_id = v_project AND (x.subject IN (v_user, 'user:' || v_user) OR x.subject = ANY (v_stores));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('changes', v_n);
    -- and those not yet published from a Citus worker's outbox (0050; empty on one server)
    DELETE FROM pymem.change_outbox AS x
     WHERE x.project_id = v_project AND (x.subject IN (v_user, 'user:' || v_user) OR x.subject = ANY (v_stores));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := pg_catalog.jsonb_set(v_counts, '{changes}', pg_catalog.to_jsonb((v_counts->>'changes')::bigint + v_n));

    INSERT INTO pymem.erasures AS r (project_id, subject, salt, erased_by, counts, digest)
    VALUES (v_project, pymem._erasure_subject(v_salt, v_project, v_user), v_salt, session_user, v_counts, v_digest)
    RETURNING r.id, r.erased_at INTO v_id, v_at;
    RETURN pg_catalog.jsonb_build_object('id', v_id, 'project_id', v_project, 'erased_at', v_at, 'erased_by', session_user,
                                         'counts', v_counts, 'digest', v_digest);
END;
$$;

-- _erasure_subject(salt, project_id, user_id): how a receipt names its user (0038_erasures.sql).
CREATE OR REPLACE FUNCTION pymem._erasure_subject(salt text, project_id text, user_id text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
               salt || pg_catalog.jsonb_build_array(project_id, user_id)::text, 'UTF8')), 'hex');
$$;

-- _erasure_digest(project_id, user_id, store_keys): what user_forget would delete, as one sha256
-- over one line per row, sorted (byte order): 'fact <id> <content_key>', 'message <thread>
-- <seq> <sha256 of content>', 'summary <thread> <sha256 of summary>', 'entry <store> <path>
-- <sha>', 'transcript <store> <seq> <sha256 of message>', where <thread>, <store> and <path>
-- are written as SQL literals. The same rows give the same digest, so a copy of the database
-- taken before an erasure can be checked against its receipt (call it there).
CREATE OR REPLACE FUNCTION pymem._erasure_digest(project_id text, user_id text, store_keys text[])
RETURNS text
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(
               coalesce(pg_catalog.string_agg(l.line, E'\n' ORDER BY l.line COLLATE "C"), ''), 'UTF8')), 'hex')
      FROM (SELECT pg_catalog.format('fact %s %s', f.id, f.content_key) AS line
              FROM pymem.facts AS f
             WHERE f.project_id = _erasure_digest.project_id AND f.scope = 'user' AND f.scope_id = _erasure_digest.user_id
            UNION ALL
            SELECT pg_catalog.format('message %L %s %s', m.thread_id, m.seq,
                                     pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(m.content, 'UTF8')), 'hex'))
              FROM pymem.messages AS m
             WHERE m.project_id = _erasure_digest.project_id AND m.user_id = _erasure_digest.user_id
            UNION ALL
            SELECT pg_catalog.format('summary %L %s', t.thread_id,
                                     pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(t.summary, 'UTF8')), 'hex'))
              FROM pymem.threads AS t
             WHERE t.project_id = _erasure_digest.project_id AND t.user_id = _erasure_digest.user_id AND t.summary IS NOT NULL
            UNION ALL
            SELECT pg_catalog.format('entry %L %L %s', e.store_key, e.path, e.sha)
              FROM pymem.store_entries AS e
             WHERE e.project_id = _erasure_digest.project_id AND e.store_key = ANY (_erasure_digest.store_keys)
            UNION ALL
            SELECT pg_catalog.format('transcript %L %s %s', s.store_key, s.seq,
                                     pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(s.message::text, 'UTF8')), 'hex'))
              FROM pymem.store_messages AS s
             WHERE s.project_id = _erasure_digest.project_id AND s.store_key = ANY (_erasure_digest.store_keys)) AS l;
$$;

-- erasures: the receipts of a project's erasures (user_forget), newest first; with user_id,
-- only those of that user (found through each receipt's salted subject: the table holds no ids).
-- For administrators (the owner role; not granted to the app or reader role).
--   SELECT * FROM pymem.erasures(project_id => 'acme', user_id => 'alice');
CREATE OR REPLACE FUNCTION pymem.erasures(project_id text DEFAULT '', user_id text DEFAULT NULL)
RETURNS TABLE (id bigint, erased_at timestamptz, erased_by text, counts jsonb, digest text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(erasures.project_id);
    PERFORM pymem._project_check(erasures.project_id);
    IF erasures.user_id IS NOT NULL THEN
        PERFORM pymem._fact_check_subject('user', erasures.user_id, erasures.project_id, 'exact');
    END IF;
    RETURN QUERY
        SELECT r.id, r.erased_at, r.erased_by, r.counts, r.digest
          FROM pymem.erasures AS r
         WHERE r.project_id = erasures.project_id
           AND (erasures.user_id IS NULL
                OR r.subject = pymem._erasure_subject(r.salt, erasures.project_id, erasures.user_id))
         ORDER BY r.id DESC;
END;
$$;
