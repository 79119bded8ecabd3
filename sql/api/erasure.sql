-- erasure.sql: the erasure of a user with its receipt: user_forget (the user's facts with their
-- history, conversations and the stores named, and the user's name as the actor of other
-- stores' rows, in one transaction), erasures (the receipts, migrations/0007_v0_2_0_operations.sql) and
-- the receipt's helpers (_erasure_subject, _erasure_digest). Calls the facts, conversations and
-- stores files' checks and locks, never the other way. Re-applied on every migrate. Called by
-- `pymem forget-user` / `pymem export --erasures` (pymem/erasure.py), Memory.forget_user and any
-- SQL client.

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
    -- the user's learning jobs (0007_v0_2_0_operations: by key, no content) and learning usage
    DELETE FROM pymem.learning_jobs AS j WHERE j.project_id = v_project AND j.user_id = v_user;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('learning_jobs', v_n);
    DELETE FROM pymem.learning_usage AS u WHERE u.project_id = v_project AND u.user_id = v_user;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_counts := v_counts || pg_catalog.jsonb_build_object('learning_usage', v_n);
    -- the user's MCP bearer tokens (0007_v0_2_0_operations): each names the user, and a live one would let a client
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

    -- the user's rows of the change feed (0007_v0_2_0_operations) and those of the user's stores, the ones the
    -- deletes above just wrote included: the feed keeps the receipt's id (its own row), never the user's.
    -- The project's position row first, as a publisher of a development build's rows without a position takes it before
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

-- _erasure_subject(salt, project_id, user_id): how a receipt names its user (0007_v0_2_0_operations.sql).
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
