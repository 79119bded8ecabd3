-- conversations_turns.sql: turn_record, one turn of a conversation in one call, and its jobs
-- one function each: the check of the fact changes a learner proposed (_fact_changes_check), the
-- two messages and their vectors (_turn_messages), what the turn teaches: learned facts and fact
-- changes (_turn_learn); the summary lease when one is due is summary_claim's. Part of conversation memory (conversations.sql; tables in
-- migrations/0003_conversations.sql). Re-applied on every migrate; called by
-- pymem/conversations.py and by any SQL client (docs/sql.md "Conversations").
--
-- Errors: 22023 invalid argument.

-- _fact_changes_check: the shape of turn_record's fact_changes (see there), checked before the
-- turn writes anything: NULL or a JSON array of at most 100 objects, each with op 'add',
-- 'update' or 'delete', content a string, fact_id an integer for update and delete (none for
-- add), optionally valid_from and valid_to (when the fact holds: each a time as a string, or
-- null; valid_from before valid_to), and no other key. 22023 names the first element that is wrong.
CREATE OR REPLACE FUNCTION pymem._fact_changes_check(changes jsonb)
RETURNS void
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_change jsonb;
    v_n integer := 0;
    v_problem text;
BEGIN
    IF changes IS NULL THEN
        RETURN;
    END IF;
    IF pg_catalog.jsonb_typeof(changes) <> 'array' THEN
        RAISE EXCEPTION 'pymem: fact_changes must be a JSON array, not %', pg_catalog.jsonb_typeof(changes)
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.jsonb_array_length(changes) > 100 THEN
        RAISE EXCEPTION 'pymem: a turn may carry at most 100 fact changes, not %', pg_catalog.jsonb_array_length(changes)
            USING ERRCODE = '22023';
    END IF;
    FOR v_change IN SELECT e FROM pg_catalog.jsonb_array_elements(changes) AS e LOOP
        v_n := v_n + 1;
        v_problem := CASE
            WHEN pg_catalog.jsonb_typeof(v_change) <> 'object' THEN 'is not a JSON object'
            WHEN NOT (v_change ? 'op') OR v_change ->> 'op' NOT IN ('add', 'update', 'delete')
                THEN 'needs op "add", "update" or "delete"'
            WHEN EXISTS (SELECT 1 FROM pg_catalog.jsonb_object_keys(v_change) AS k
                          WHERE k NOT IN ('op', 'fact_id', 'content', 'valid_from', 'valid_to'))
                THEN 'has a key other than op, fact_id, content, valid_from, valid_to'
            WHEN pg_catalog.jsonb_typeof(v_change -> 'valid_from') NOT IN ('string', 'null')
              OR pg_catalog.jsonb_typeof(v_change -> 'valid_to') NOT IN ('string', 'null')
                THEN 'has a valid_from or valid_to that is not a time as a string'
            WHEN (v_change ? 'valid_from' OR v_change ? 'valid_to')
                 AND NOT pymem._valid_time_text(v_change ->> 'valid_from', v_change ->> 'valid_to')
                THEN 'has a valid_from or valid_to that is not a finite time, or valid_from not before valid_to'
            WHEN pg_catalog.jsonb_typeof(v_change -> 'content') IS DISTINCT FROM 'string' THEN 'needs content, a string'
            WHEN v_change ->> 'op' = 'add' AND v_change ? 'fact_id' AND v_change -> 'fact_id' <> 'null'
                THEN 'is an add: it names no fact_id'
            WHEN v_change ->> 'op' <> 'add' AND (pg_catalog.jsonb_typeof(v_change -> 'fact_id') IS DISTINCT FROM 'number'
                 OR (v_change ->> 'fact_id') !~ '^[0-9]{1,18}$') THEN 'needs fact_id, a positive integer'
        END;
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'pymem: fact change % %', v_n, v_problem
                USING ERRCODE = '22023',
                      HINT = 'Each change is {"op": "add", "content": ...} or {"op": "update"|"delete", "fact_id": ..., "content": ...}.';
        END IF;
    END LOOP;
END;
$$;

-- _valid_time_text: whether two texts (NULL: open) are a valid time pymem._valid_time accepts.
CREATE OR REPLACE FUNCTION pymem._valid_time_text(p_from text, p_to text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM pymem._valid_time(p_from::timestamptz, p_to::timestamptz);
    RETURN true;
EXCEPTION WHEN invalid_parameter_value OR invalid_datetime_format OR datetime_field_overflow THEN
    RETURN false;
END;
$$;

-- _turn_messages: turn_record's second job: the user's message and the answer, one after the
-- other (consecutive seqs, one insert), each with its vector from embedder when given (registered first).
-- Its arguments are checked by turn_record.
CREATE OR REPLACE FUNCTION pymem._turn_messages(
    project_id text, user_id text, thread_id text, user_content text, assistant_content text,
    user_importance double precision, assistant_importance double precision, user_metadata jsonb,
    assistant_metadata jsonb, embedder text, user_embedding vector, assistant_embedding vector,
    created_at timestamptz, OUT user_seq bigint, OUT assistant_seq bigint)
RETURNS record
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_chars integer[];
    v_importances double precision[];
    v_created timestamptz[];
    v_tokens integer[];
    v_lexemes tsvector[];
    v_i integer;
BEGIN
    PERFORM pymem._embedding_register(_turn_messages.project_id, _turn_messages.embedder, _turn_messages.user_embedding);
    PERFORM pymem._embedding_register(_turn_messages.project_id, _turn_messages.embedder, _turn_messages.assistant_embedding);
    user_seq := pymem._message_insert(_turn_messages.project_id, _turn_messages.user_id, _turn_messages.thread_id, 'user',
                                      _turn_messages.user_content, _turn_messages.user_importance, _turn_messages.user_metadata,
                                      CASE WHEN _turn_messages.user_embedding IS NOT NULL THEN _turn_messages.embedder END,
                                      _turn_messages.created_at,
                                      reply_content => _turn_messages.assistant_content,
                                      reply_importance => _turn_messages.assistant_importance,
                                      reply_metadata => _turn_messages.assistant_metadata,
                                      reply_embedded_by => CASE WHEN _turn_messages.assistant_embedding IS NOT NULL
                                                                THEN _turn_messages.embedder END);
    assistant_seq := user_seq + 1;
    IF _turn_messages.user_embedding IS NULL AND _turn_messages.assistant_embedding IS NULL THEN
        RETURN;
    END IF;
    -- the vectors beside what the messages' trigger just stored of each message (0006_v0_2_0_memory: its
    -- lexemes kept beside the vector for recall): one read of the two rows by primary key, then
    -- an insert of values. One INSERT ... SELECT joining them cost a full plan on every call on a
    -- Citus worker (docs/performance.md, "Measured in the SQL")
    SELECT pg_catalog.array_agg(l.chars ORDER BY l.seq), pg_catalog.array_agg(l.importance ORDER BY l.seq),
           pg_catalog.array_agg(l.created_at ORDER BY l.seq), pg_catalog.array_agg(l.tokens ORDER BY l.seq),
           pg_catalog.array_agg(l.lexemes ORDER BY l.seq)
      INTO v_chars, v_importances, v_created, v_tokens, v_lexemes
      FROM pymem.message_lexemes AS l
     WHERE l.project_id = _turn_messages.project_id AND l.user_id = _turn_messages.user_id
       AND l.thread_id = _turn_messages.thread_id AND l.seq >= user_seq AND l.seq <= assistant_seq;
    IF _turn_messages.user_embedding IS NOT NULL AND _turn_messages.assistant_embedding IS NOT NULL THEN
        INSERT INTO pymem.message_embeddings
            (project_id, user_id, embedder, thread_id, seq, chars, importance, created_at, embedding, lexemes, tokens)
        VALUES (_turn_messages.project_id, _turn_messages.user_id, _turn_messages.embedder, _turn_messages.thread_id,
                user_seq, v_chars[1], v_importances[1], v_created[1], _turn_messages.user_embedding, v_lexemes[1], v_tokens[1]),
               (_turn_messages.project_id, _turn_messages.user_id, _turn_messages.embedder, _turn_messages.thread_id,
                assistant_seq, v_chars[2], v_importances[2], v_created[2], _turn_messages.assistant_embedding, v_lexemes[2],
                v_tokens[2]);
    ELSE
        v_i := CASE WHEN _turn_messages.user_embedding IS NOT NULL THEN 1 ELSE 2 END;
        INSERT INTO pymem.message_embeddings
            (project_id, user_id, embedder, thread_id, seq, chars, importance, created_at, embedding, lexemes, tokens)
        VALUES (_turn_messages.project_id, _turn_messages.user_id, _turn_messages.embedder, _turn_messages.thread_id,
                user_seq + v_i - 1, v_chars[v_i], v_importances[v_i], v_created[v_i],
                coalesce(_turn_messages.user_embedding, _turn_messages.assistant_embedding), v_lexemes[v_i], v_tokens[v_i]);
    END IF;
END;
$$;

-- _turn_learn_check: the arguments of _turn_learn that its callers take from theirs (turn_record,
-- and learning_complete for a deferred turn), checked before anything is written: at most 100
-- learned facts (22023, nothing written: an extractor finds a handful in one message), max_learned
-- >= 1 or NULL, and the shape of fact_changes (_fact_changes_check).
CREATE OR REPLACE FUNCTION pymem._turn_learn_check(learned text[], max_learned integer, fact_changes jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF pg_catalog.cardinality(learned) > 100 THEN
        RAISE EXCEPTION 'pymem: a turn may carry at most 100 learned facts, not %', pg_catalog.cardinality(learned)
            USING ERRCODE = '22023', HINT = 'Keep the extractor''s best 100 facts of the message.';
    END IF;
    IF max_learned < 1 THEN
        RAISE EXCEPTION 'pymem: max_learned must be >= 1, or NULL for no cap' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._fact_changes_check(fact_changes);
END;
$$;

-- _turn_learn: what a turn teaches about its user, turn_record's third job (after its checks
-- and _turn_messages): the learned facts and the adds of fact_changes in one statement under
-- the subject's cap lock, the cap once, then the updates and deletes of fact_changes, each in a
-- subtransaction of its own (see turn_record for the rules). turn is {"thread_id", "seq"}, named
-- in the metadata of every fact it writes. Returns learned_ids (one per valid learned fact, in
-- order) and changes (one report per change). Its arguments are checked by turn_record.
CREATE OR REPLACE FUNCTION pymem._turn_learn(
    project_id text, user_id text, turn jsonb, learned text[], fact_changes jsonb, max_learned integer,
    created_at timestamptz, OUT learned_ids bigint[], OUT changes jsonb)
RETURNS record
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_fact text;
    v_contents text[] := '{}';   -- the valid learned facts as stored (trimmed), in the order given
    v_keys bytea[];              -- their fact_key, element by element
    v_got_keys bytea[] := '{}';  -- keys resolved to an active fact of the subject ...
    v_got_ids bigint[] := '{}';  -- ... and that fact's id
    v_want integer;              -- distinct keys to resolve
    v_inserted bigint;
    v_created boolean := false;
    v_n_learned integer;         -- how many of v_contents came from `learned` (the adds follow)
    v_ids bigint[] := '{}';      -- the fact id of each of v_contents
    v_change jsonb;
    v_add_at integer[] := '{}';  -- per change: its add's index in v_contents (NULL: none)
    v_reason text[] := '{}';     -- per change: why it was skipped (NULL: it was not)
    v_succ pymem.fact_successor;
    v_i integer;
    v_turn jsonb := _turn_learn.turn;
    v_expired bigint[];          -- expired facts found holding a key
    v_restated bigint;           -- the version an add's valid time gave its fact
    v_froms timestamptz[] := '{}';  -- each of v_contents' valid time (an add's; NULL for a learned fact)
    v_tos timestamptz[] := '{}';
BEGIN
    -- learned facts: the checks of fact_add, one fact at a time (an invalid one is skipped) ...
    FOREACH v_fact IN ARRAY coalesce(_turn_learn.learned, '{}') LOOP
        BEGIN
            v_contents := v_contents || pymem._fact_check_values(v_fact, 0.6, 'learned', NULL, '{}');
            v_froms := v_froms || NULL::timestamptz;
            v_tos := v_tos || NULL::timestamptz;
        EXCEPTION WHEN invalid_parameter_value OR null_value_not_allowed THEN
            RAISE WARNING 'pymem: skipped a learned fact: %', SQLERRM;
        END;
    END LOOP;
    v_n_learned := pg_catalog.cardinality(v_contents);
    -- the adds of fact_changes join them, checked the same way
    FOR v_i IN 1 .. coalesce(pg_catalog.jsonb_array_length(_turn_learn.fact_changes), 0) LOOP
        v_change := _turn_learn.fact_changes -> (v_i - 1);
        v_add_at := v_add_at || NULL::integer;
        v_reason := v_reason || NULL::text;
        CONTINUE WHEN v_change ->> 'op' <> 'add';
        BEGIN
            v_contents := v_contents || pymem._fact_check_values(v_change ->> 'content', 0.6, 'learned', NULL, '{}');
            v_froms := v_froms || (v_change ->> 'valid_from')::timestamptz;
            v_tos := v_tos || (v_change ->> 'valid_to')::timestamptz;
            v_add_at[v_i] := pg_catalog.cardinality(v_contents);
        EXCEPTION WHEN invalid_parameter_value OR null_value_not_allowed THEN
            RAISE WARNING 'pymem: skipped a learned fact: %', SQLERRM;
            v_reason[v_i] := SQLERRM;
        END;
    END LOOP;
    learned_ids := '{}';
    IF pg_catalog.cardinality(v_contents) > 0 THEN
        v_keys := ARRAY(SELECT pymem.fact_key(u.c) FROM pg_catalog.unnest(v_contents) WITH ORDINALITY AS u(c, n)
                         ORDER BY u.n);
        SELECT pg_catalog.count(DISTINCT u.k) INTO v_want FROM pg_catalog.unnest(v_keys) AS u(k);
        IF _turn_learn.max_learned IS NOT NULL THEN
            -- one learned writer per subject at a time, so the cap holds under concurrency
            PERFORM pymem._subject_lock(_turn_learn.project_id, 'user', _turn_learn.user_id);
        END IF;
        -- ... then each distinct fact once, in the order of its first mention; a fact already
        -- active (or committed meanwhile by a writer of another source, which takes no lock)
        -- keeps its id. As in fact_add, a key that is neither inserted nor found was
        -- superseded or forgotten in between: try again.
        LOOP
            WITH todo AS (
                SELECT DISTINCT ON (u.k) u.k, u.c, u.n, u.vf, u.vt
                  FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_contents), pg_catalog.unnest(v_froms),
                                  pg_catalog.unnest(v_tos)) WITH ORDINALITY AS u(k, c, vf, vt, n)
                 WHERE u.k <> ALL (v_got_keys)
                 ORDER BY u.k, u.n
            ), ins AS (
                INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source,
                                              metadata, valid_from, valid_to)
                SELECT _turn_learn.project_id, 'user', _turn_learn.user_id, t.c, t.k, 0.6, 'learned',
                       pg_catalog.jsonb_build_object('turn', v_turn), t.vf, t.vt
                  FROM todo AS t ORDER BY t.n
                ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING
                RETURNING f.content_key, f.id
            )
            SELECT v_got_keys || coalesce(pg_catalog.array_agg(i.content_key), '{}'),
                   v_got_ids || coalesce(pg_catalog.array_agg(i.id), '{}'), pg_catalog.count(*)
              INTO v_got_keys, v_got_ids, v_inserted
              FROM ins AS i;
            v_created := v_created OR v_inserted > 0;
            EXIT WHEN pg_catalog.cardinality(v_got_keys) = v_want;
            -- each key looked up on its own (facts_subject_content_key, 0006_v0_2_0_memory): as one `= ANY`, or
            -- as a plain join, the generic plan read all of the subject's active facts
            SELECT v_got_keys || coalesce(pg_catalog.array_agg(f.content_key) FILTER (WHERE f.live), '{}'),
                   v_got_ids || coalesce(pg_catalog.array_agg(f.id) FILTER (WHERE f.live), '{}'),
                   pg_catalog.array_agg(f.id) FILTER (WHERE NOT f.live)
              INTO v_got_keys, v_got_ids, v_expired
              FROM (SELECT DISTINCT u.k FROM pg_catalog.unnest(v_keys) AS u(k) WHERE u.k <> ALL (v_got_keys)) AS k
             CROSS JOIN LATERAL (
                   SELECT f.content_key, f.id, pymem._fact_kept(f, pg_catalog.now()) AS live FROM pymem.facts AS f
                    WHERE f.project_id = _turn_learn.project_id AND f.scope = 'user' COLLATE "C"
                      AND f.scope_id = _turn_learn.user_id AND f.content_key = k.k AND pymem._fact_head(f.superseded_by)
                    LIMIT 1) AS f;  -- one active fact per key; the LIMIT keeps the lookup per key
            EXIT WHEN pg_catalog.cardinality(v_got_keys) = v_want;
            -- an expired fact holding a key goes (with its history), and the loop inserts the key again
            PERFORM pymem._fact_expired_free(_turn_learn.project_id, 'user', _turn_learn.user_id, e.id)
               FROM pg_catalog.unnest(v_expired) AS e(id);
        END LOOP;
        v_ids := ARRAY(SELECT g.id FROM pg_catalog.unnest(v_keys) WITH ORDINALITY AS u(k, n)
                         JOIN ROWS FROM (pg_catalog.unnest(v_got_keys), pg_catalog.unnest(v_got_ids)) AS g(k, id)
                           ON g.k = u.k
                        ORDER BY u.n);
        learned_ids := v_ids[1:v_n_learned];
        IF v_created AND _turn_learn.max_learned IS NOT NULL THEN  -- the cap, once for the whole turn
            PERFORM pymem._learned_cap(_turn_learn.project_id, 'user', _turn_learn.user_id, _turn_learn.max_learned);
        END IF;
    END IF;
    -- the adds that say when their fact holds: a new fact was inserted with it (by its first
    -- mention); a fact there already, or mentioned again with another, may hold another, which
    -- _fact_restate gives it (a new version where it differs, as fact_add's re-add does; nothing
    -- where it is the same)
    FOR v_i IN 1 .. coalesce(pg_catalog.jsonb_array_length(_turn_learn.fact_changes), 0) LOOP
        v_change := _turn_learn.fact_changes -> (v_i - 1);
        CONTINUE WHEN v_add_at[v_i] IS NULL OR (v_change ->> 'valid_from' IS NULL AND v_change ->> 'valid_to' IS NULL);
        SELECT r.id INTO v_restated
          FROM pymem._fact_restate(_turn_learn.project_id, 'user', _turn_learn.user_id, v_keys[v_add_at[v_i]],
                                   (v_change ->> 'valid_from')::timestamptz, (v_change ->> 'valid_to')::timestamptz,
                                   _turn_learn.created_at) AS r;
        -- every element naming that fact now names its new version
        v_ids := ARRAY(SELECT CASE WHEN u.id = v_ids[v_add_at[v_i]] THEN v_restated ELSE u.id END
                         FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS u(id, n) ORDER BY u.n);
    END LOOP;
    learned_ids := v_ids[1:v_n_learned];
    -- the updates and deletes of fact_changes, in order, each in a subtransaction of its own
    -- (fact_supersede takes the subject lock and checks the fact is this user's and active)
    changes := '[]';
    FOR v_i IN 1 .. coalesce(pg_catalog.jsonb_array_length(_turn_learn.fact_changes), 0) LOOP
        v_change := _turn_learn.fact_changes -> (v_i - 1);
        IF v_change ->> 'op' = 'add' THEN
            changes := changes || pg_catalog.jsonb_build_array(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
                'op', 'add', 'id', v_ids[v_add_at[v_i]], 'applied', v_add_at[v_i] IS NOT NULL,
                'reason', v_reason[v_i])));
            CONTINUE;
        END IF;
        BEGIN
            v_succ := pymem.fact_supersede(scope => 'user', scope_id => _turn_learn.user_id,
                                           new_content => v_change ->> 'content',
                                           id => (v_change ->> 'fact_id')::bigint,
                                           project_id => _turn_learn.project_id, write => pymem.fact_write(
                                               confidence => 0.6, source => 'learned', created_at => _turn_learn.created_at,
                                               valid_from => (v_change ->> 'valid_from')::timestamptz,
                                               valid_to => (v_change ->> 'valid_to')::timestamptz,
                                               metadata => pg_catalog.jsonb_build_object('turn', v_turn
                                                   || pg_catalog.jsonb_build_object('op', v_change ->> 'op'))));
            changes := changes || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                'op', v_change ->> 'op', 'fact_id', (v_change ->> 'fact_id')::bigint, 'id', v_succ.id,
                'applied', true));
        EXCEPTION WHEN no_data_found OR invalid_parameter_value OR null_value_not_allowed
                    OR SQLSTATE 'PM201' THEN
            RAISE WARNING 'pymem: skipped a learned % of fact %: %', v_change ->> 'op', v_change ->> 'fact_id', SQLERRM;
            changes := changes || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
                'op', v_change ->> 'op', 'fact_id', (v_change ->> 'fact_id')::bigint, 'applied', false,
                'reason', SQLERRM));
        END;
    END LOOP;
END;
$$;

-- turn_record: one successful turn in one transaction: the user's message and the answer
-- (with their vectors when given), the facts an extractor learned from the user's message
-- (source 'learned', confidence 0.6, capped by max_learned; an invalid one is skipped with a
-- WARNING, never failing the turn), and, when a summary is due, a claim on the span to fold.
-- At most 100 learned facts per turn (more: 22023 and nothing of the turn is written): an
-- extractor finds a handful in one message, and 100 stays below the default cap of 200, so one
-- turn never pushes out more than half of a user's learned facts. learned_ids has one id per
-- valid learned fact, in the order given (an already-active fact, or a repeat within the
-- turn, gives the existing id). The learned facts are added in one statement under the
-- subject's cap lock (pymem._subject_lock, as fact_add takes it) and the cap is applied once,
-- after all of them: a turn costs the same per fact whatever its size. user_metadata and
-- assistant_metadata (JSON objects) are stored with the two messages; created_at (default: now)
-- is the time of both, for importing a history (checked as for message_add).
-- fact_changes (a JSON array, at most 100) are the changes a reconciling learner decided for
-- the user's facts, applied after the learned facts, in the order given:
--   {"op": "add", "content": c}              a learned fact, exactly as an entry of `learned`;
--   {"op": "update", "fact_id": n, "content": c}   supersede the user's active fact n by c
--                                            (pymem.fact_supersede, source 'learned', confidence
--                                            0.6; c already active: a merge into it);
--   {"op": "delete", "fact_id": n, "content": c}   retire fact n into c, the statement that says
--                                            it is no longer true. Retired, not forgotten: the
--                                            fact leaves every context but stays in its history
--                                            (fact_chain), so a model's mistake can be undone
--                                            and the user can see why; hard deletion stays an
--                                            explicit fact_forget.
-- Any change may also say when its fact holds in the world: "valid_from" and "valid_to" (times as
-- strings, or null; migrations/0006_v0_2_0_memory.sql), so a learner that hears "since May" says so:
-- an add's fact gets that valid time (one there already is restated), an update's or a delete's
-- new version gets it (a valid_from on an update: the old version held until then).
-- Each fact the turn writes names it in its metadata: {"turn": {"thread_id", "seq"}}, the
-- thread and the user message's seq (a learned fact, an add, and the successor an update or
-- delete creates, which also carries the change's "op": {"turn": {..., "op": "delete"}}), so
-- a reader (the memory page) can link a fact to the turn that taught it and tell an updated
-- fact from a retired one. A fact already active keeps the metadata it had (a merge, or a
-- fact learned again): the turn that first taught it.
-- The document's shape is checked before anything is written (not an array, more than 100,
-- an element that is not an object, an unknown op or key, a missing or non-integer fact_id,
-- content not a string: 22023, nothing of the turn is written). A well-formed change that
-- cannot apply is skipped with a WARNING and the turn is stored: its content is invalid (as
-- for learned facts), fact n is not an active fact of this user (P0002: another user's, or
-- forgotten), it was superseded meanwhile (PM201: e.g. a concurrent turn reconciled it
-- first), or c equals its content (22023). changes reports each change in order:
-- {"op", "fact_id", "id" (the fact now active, or added), "applied", "reason" (when skipped)}.
-- defer_learning: the turn also leaves a learning job (pymem.learning_jobs, api/learning.sql),
-- committed with its messages, for a worker to learn from later (learning_claim); learning_job
-- is its id (NULL without). A caller that defers passes no summarize_every: the worker folds
-- the summary when it completes the job.
--   SELECT * FROM pymem.turn_record(user_id => 'alice', user_content => 'I moved to Oslo',
--                                   assistant_content => 'Noted: Oslo.');
CREATE OR REPLACE FUNCTION pymem.turn_record(
    user_id text,
    user_content text,
    assistant_content text,
    thread_id text DEFAULT 'default',
    project_id text DEFAULT '',
    user_importance double precision DEFAULT 1.0,
    assistant_importance double precision DEFAULT 1.0,
    embedder text DEFAULT NULL,
    user_embedding vector DEFAULT NULL,
    assistant_embedding vector DEFAULT NULL,
    learned text[] DEFAULT NULL,
    max_learned integer DEFAULT 200,
    keep_last integer DEFAULT 10,
    summarize_every integer DEFAULT NULL,
    lease_seconds double precision DEFAULT 300,
    user_metadata jsonb DEFAULT '{}'::jsonb,
    assistant_metadata jsonb DEFAULT '{}'::jsonb,
    created_at timestamptz DEFAULT NULL,
    fact_changes jsonb DEFAULT NULL,
    defer_learning boolean DEFAULT false)
RETURNS TABLE (user_seq bigint, assistant_seq bigint, learned_ids bigint[],
               claim_token uuid, through_seq bigint, previous_summary text, messages jsonb, changes jsonb,
               learning_job bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_turn jsonb;                -- {"thread_id", "seq"}: the turn, named in its facts' metadata
BEGIN
    PERFORM pymem._tenant_enter(turn_record.project_id);
    PERFORM pymem._conv_check(turn_record.project_id, turn_record.user_id, turn_record.thread_id, 'exact');
    PERFORM pymem._turn_learn_check(turn_record.learned, turn_record.max_learned, turn_record.fact_changes);
    IF turn_record.defer_learning IS NULL THEN
        RAISE EXCEPTION 'pymem: defer_learning must be true or false' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._message_check('user', turn_record.user_content, turn_record.user_importance,
                                 turn_record.user_metadata);
    PERFORM pymem._message_check('assistant', turn_record.assistant_content, turn_record.assistant_importance,
                                 turn_record.assistant_metadata);
    -- the two messages and their vectors: _turn_messages
    SELECT m.user_seq, m.assistant_seq INTO user_seq, assistant_seq
      FROM pymem._turn_messages(turn_record.project_id, turn_record.user_id, turn_record.thread_id,
                                turn_record.user_content, turn_record.assistant_content,
                                turn_record.user_importance, turn_record.assistant_importance,
                                turn_record.user_metadata, turn_record.assistant_metadata, turn_record.embedder,
                                turn_record.user_embedding, turn_record.assistant_embedding,
                                turn_record.created_at) AS m;
    v_turn := pg_catalog.jsonb_build_object('thread_id', turn_record.thread_id, 'seq', user_seq);
    -- what the turn teaches (learned facts, fact_changes): _turn_learn
    SELECT l.learned_ids, l.changes INTO learned_ids, changes
      FROM pymem._turn_learn(turn_record.project_id, turn_record.user_id, v_turn, turn_record.learned,
                             turn_record.fact_changes, turn_record.max_learned, turn_record.created_at) AS l;
    IF turn_record.defer_learning THEN  -- the turn's learning job (api/learning.sql), committed with it
        INSERT INTO pymem.learning_jobs AS j (project_id, user_id, thread_id, seq)
        VALUES (turn_record.project_id, turn_record.user_id, turn_record.thread_id, user_seq)
        RETURNING j.id INTO learning_job;
    END IF;
    IF turn_record.summarize_every IS NOT NULL THEN
        SELECT c.claim_token, c.through_seq, c.previous_summary, c.messages
          INTO claim_token, through_seq, previous_summary, messages
          FROM pymem.summary_claim(turn_record.user_id, turn_record.thread_id, turn_record.project_id,
                                   turn_record.keep_last, turn_record.summarize_every,
                                   turn_record.lease_seconds) AS c;
    END IF;
    RETURN NEXT;
END;
$$;
