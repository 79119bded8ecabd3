-- conversations_embeddings.sql: what recall ranks by, kept beside the messages: the vectors
-- (catch-up list of messages without one, the bulk put) and the lexemes of lexical recall (the
-- trigger that indexes a new message, the backfill of older ones). Part of conversation memory
-- (conversations.sql; tables in migrations/0003_conversations.sql, 0006_v0_2_0_memory.sql).
-- Re-applied on every migrate; called by pymem/conversations.py and by any SQL client.
--
-- Errors: 22023 invalid argument.

-- _messages_unembedded: the catch-up query: the keys of the messages in three index ranges (NULL,
-- through messages_unembedded; below and above the current embedder's name, through
-- messages_embedded_by), one single-table read each, all empty when nothing is missing; only when
-- one is not, the user's vectors of the embedder among them, the order and the limit over the keys
-- (a backlog may be long), then the contents of those kept. Both indexes are partial so that the
-- foreign-key check of a stored vector cannot use them (0006_v0_2_0_memory). Single-table
-- reads: the shape a Citus worker plans by its fast path (a UNION ALL took its full router planner:
-- docs/performance.md, "Measured in the SQL"), and on one server the same index ranges.
CREATE OR REPLACE FUNCTION pymem._messages_unembedded(
    p_project_id text, p_user_id text, p_embedder text, p_min_chars integer, p_limit integer)
RETURNS TABLE (thread_id text, seq bigint, content text)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_thread text[]; v_seq bigint[]; v_at timestamptz[];  -- the keys only: a backlog may be long
    v_h_thread text[]; v_h_seq bigint[];  -- those with a vector of p_embedder already; then the messages read
    v_content text[];
BEGIN
    SELECT pg_catalog.array_agg(m.thread_id), pg_catalog.array_agg(m.seq), pg_catalog.array_agg(m.created_at)
      INTO v_thread, v_seq, v_at
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by IS NULL
       AND pg_catalog.length(m.content) >= p_min_chars;
    SELECT v_thread || pg_catalog.array_agg(m.thread_id), v_seq || pg_catalog.array_agg(m.seq),
           v_at || pg_catalog.array_agg(m.created_at)
      INTO v_thread, v_seq, v_at
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by < p_embedder
       AND pg_catalog.length(m.content) >= p_min_chars;
    SELECT v_thread || pg_catalog.array_agg(m.thread_id), v_seq || pg_catalog.array_agg(m.seq),
           v_at || pg_catalog.array_agg(m.created_at)
      INTO v_thread, v_seq, v_at
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by > p_embedder
       AND pg_catalog.length(m.content) >= p_min_chars;
    IF v_thread IS NULL THEN
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(e.thread_id), pg_catalog.array_agg(e.seq) INTO v_h_thread, v_h_seq
      FROM pymem.message_embeddings AS e
     WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder AND e.seq = ANY (v_seq);
    -- the first p_limit of those without one, newest first; then their contents
    SELECT pg_catalog.array_agg(c.thread_id ORDER BY c.o), pg_catalog.array_agg(c.seq ORDER BY c.o)
      INTO v_thread, v_seq
      FROM (SELECT u.thread_id, u.seq,
                   pg_catalog.row_number() OVER (ORDER BY u.created_at DESC, u.thread_id, u.seq DESC) AS o
              FROM ROWS FROM (pg_catalog.unnest(v_thread), pg_catalog.unnest(v_seq), pg_catalog.unnest(v_at))
                   AS u(thread_id, seq, created_at)
             WHERE NOT EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest(v_h_thread), pg_catalog.unnest(v_h_seq)) AS h(thread_id, seq)
                                WHERE h.thread_id = u.thread_id AND h.seq = u.seq)
             ORDER BY o
             LIMIT p_limit) AS c;
    IF v_thread IS NULL THEN  -- every one had a vector already
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(m.thread_id), pg_catalog.array_agg(m.seq), pg_catalog.array_agg(m.content)
      INTO v_h_thread, v_h_seq, v_content
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.seq = ANY (v_seq);
    RETURN QUERY
    SELECT k.thread_id, k.seq, m.content
      FROM ROWS FROM (pg_catalog.unnest(v_thread), pg_catalog.unnest(v_seq)) WITH ORDINALITY AS k(thread_id, seq, o)
      JOIN ROWS FROM (pg_catalog.unnest(v_h_thread), pg_catalog.unnest(v_h_seq), pg_catalog.unnest(v_content))
           AS m(thread_id, seq, content) ON m.thread_id = k.thread_id AND m.seq = k.seq
     ORDER BY k.o;
END;
$$;

-- messages_unembedded: a user's messages (of at least min_chars characters) with no vector
-- from `embedder`, newest first: the batch to embed before recall.
CREATE OR REPLACE FUNCTION pymem.messages_unembedded(
    user_id text, embedder text, project_id text DEFAULT '', min_chars integer DEFAULT 10,
    max_messages integer DEFAULT 1000)
RETURNS TABLE (thread_id text, seq bigint, content text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(messages_unembedded.project_id);
    PERFORM pymem._check_limit('max_messages', messages_unembedded.max_messages);
    PERFORM pymem._check_limit('min_chars', messages_unembedded.min_chars);
    IF NOT pymem._conv_check(messages_unembedded.project_id, messages_unembedded.user_id, NULL, 'match') THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT u.thread_id, u.seq, u.content
      FROM pymem._messages_unembedded(messages_unembedded.project_id, messages_unembedded.user_id,
                                      messages_unembedded.embedder, messages_unembedded.min_chars,
                                      messages_unembedded.max_messages) AS u;
END;
$$;

-- message_embeddings_put: stores vectors for a user's messages (parallel arrays), at most 10000
-- per call (what messages_unembedded lists at most; more is 22023). Messages that no longer exist
-- are skipped; an existing vector of the embedder is kept. The embedder's dimension is registered
-- for the project only when at least one vector is stored.
CREATE OR REPLACE FUNCTION pymem.message_embeddings_put(
    user_id text, embedder text, thread_ids text[], seqs bigint[], embeddings vector[], project_id text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
    v_thread text;
    v_seq bigint;
BEGIN
    PERFORM pymem._tenant_enter(message_embeddings_put.project_id);
    PERFORM pymem._conv_check(message_embeddings_put.project_id, message_embeddings_put.user_id, NULL, 'exact');
    IF pg_catalog.cardinality(thread_ids) IS DISTINCT FROM pg_catalog.cardinality(embeddings)
       OR pg_catalog.cardinality(seqs) IS DISTINCT FROM pg_catalog.cardinality(embeddings) THEN
        RAISE EXCEPTION 'pymem: thread_ids, seqs and embeddings must have the same length' USING ERRCODE = '22023';
    END IF;
    -- the cap bounds what one call makes the server hold and do (10000 vectors: ~0.6 s on a small VM)
    PERFORM pymem._check_batch('message_embeddings_put', 'vectors',
                               pg_catalog.cardinality(message_embeddings_put.embeddings), 10000);
    PERFORM pymem._embeddings_validate(message_embeddings_put.project_id, message_embeddings_put.embedder,
                                       message_embeddings_put.embeddings);
    -- Each message found by its primary key, whatever the plan: the lateral subquery (OFFSET 0
    -- keeps it one) is an index probe per element. Joined freely instead (or with `= ANY`
    -- conditions, which PostgreSQL 15 leaves as filters), generic plans read all of the user's
    -- messages to find a few (7,310 rows for a 2-message put). Before issue 36 this was a loop of
    -- two statements per element: 3.1 s for 10,000 vectors, 26.9 s for 100,000 (now 0.6 s, 7.3 s).
    INSERT INTO pymem.message_embeddings
        (project_id, user_id, embedder, thread_id, seq, chars, importance, created_at, embedding, lexemes, tokens)
    SELECT k.project_id, k.user_id, message_embeddings_put.embedder, k.thread_id, k.seq, k.chars, k.importance,
           k.created_at, u.v, k.lexemes, k.tokens
      FROM ROWS FROM (pg_catalog.unnest(message_embeddings_put.thread_ids), pg_catalog.unnest(message_embeddings_put.seqs),
                      pg_catalog.unnest(message_embeddings_put.embeddings)) AS u(t, s, v)
     CROSS JOIN LATERAL (
           SELECT m.project_id, m.user_id, m.thread_id, m.seq, pg_catalog.length(m.content) AS chars, m.importance,
                  m.created_at, l.lexemes, l.tokens
             FROM pymem.messages AS m
             LEFT JOIN pymem.message_lexemes AS l  -- its lexemes, kept beside the vector for recall (0006_v0_2_0_memory)
               ON l.project_id = m.project_id AND l.user_id = m.user_id AND l.thread_id = m.thread_id AND l.seq = m.seq
            WHERE m.project_id = message_embeddings_put.project_id AND m.user_id = message_embeddings_put.user_id
              AND m.thread_id = u.t AND m.seq = u.s
           OFFSET 0) AS k
    ON CONFLICT (project_id, user_id, embedder, thread_id, seq) DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    -- the messages marked, one statement per message, each by its primary key: a set-based UPDATE
    -- (joined, or with seq = ANY per thread) is planned by cost, and PostgreSQL 15's generic plan
    -- then reads the thread's rows and filters them (598 rows for a 2-message put)
    FOR v_thread, v_seq IN
        SELECT u.t, u.s FROM ROWS FROM (pg_catalog.unnest(message_embeddings_put.thread_ids),
                                        pg_catalog.unnest(message_embeddings_put.seqs)) AS u(t, s)
    LOOP
        UPDATE pymem.messages AS m SET embedded_by = message_embeddings_put.embedder
         WHERE m.project_id = message_embeddings_put.project_id AND m.user_id = message_embeddings_put.user_id
           AND m.thread_id = v_thread AND m.seq = v_seq
           AND m.embedded_by IS DISTINCT FROM message_embeddings_put.embedder;
    END LOOP;
    IF v_count > 0 THEN  -- register the embedder only now that it has a vector stored
        PERFORM pymem._embedding_register(message_embeddings_put.project_id, message_embeddings_put.embedder,
                                       message_embeddings_put.embeddings[1]);
    END IF;
    RETURN v_count;
END;
$$;

-- _message_lexemes_add: the statement trigger messages_lexemes (migrations/0006_v0_2_0_memory.sql):
-- indexes the messages one statement inserted, in one INSERT; then, when one of their users is a
-- heavy user (registered in pymem.recall_indexes: one lookup per statement, nothing more for
-- ordinary users), adds those users' messages' words to pymem.recall_terms (0006_v0_2_0_memory).
CREATE OR REPLACE FUNCTION pymem._message_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_heavy boolean;
BEGIN
    INSERT INTO pymem.message_lexemes AS l
        (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
    SELECT n.project_id, n.user_id, n.thread_id, n.seq, pg_catalog.length(n.content), n.importance, n.created_at,
           pymem._lexeme_tokens(v.lexemes), v.lexemes
      FROM new_messages AS n
      LEFT JOIN pymem.text_search AS c ON c.project_id = n.project_id  -- the project's configuration, one read per statement
     CROSS JOIN LATERAL (SELECT pymem._lexemes(c.config::pg_catalog.regconfig, n.content) AS lexemes OFFSET 0) AS v;
    SELECT true INTO v_heavy  -- a registry probe per new message (one, for a turn's user)
      FROM new_messages AS n
      JOIN pymem.recall_indexes AS r ON r.project_id = n.project_id AND r.user_id = n.user_id
     LIMIT 1;
    IF v_heavy THEN  -- their postings, from the lexemes just stored
        INSERT INTO pymem.recall_terms AS t (project_id, user_id, lexeme, thread_id, seq)
        SELECT l.project_id, l.user_id, w.lexeme, l.thread_id, l.seq
          FROM new_messages AS n
          JOIN pymem.message_lexemes AS l
            ON l.project_id = n.project_id AND l.user_id = n.user_id AND l.thread_id = n.thread_id AND l.seq = n.seq
         CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.tsvector_to_array(l.lexemes)) AS w(lexeme)
         WHERE EXISTS (SELECT 1 FROM pymem.recall_indexes AS r WHERE r.project_id = n.project_id AND r.user_id = n.user_id)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END;
$$;

-- message_lexemes_backfill: indexes up to max_messages of a project's messages that have no
-- lexemes yet (stored before 0006_v0_2_0_memory by a deploy user that row-level security binds),
-- then copies the lexemes of up to max_messages messages beside their vectors where they are
-- missing (vectors stored before 0006_v0_2_0_memory: recall reads those lexemes by
-- primary key until then); returns how many rows it wrote. Call it until it returns 0: each call
-- is one short transaction. Heavy users' words miss the messages it indexes until the next
-- recall_index_plan, whose fill step adds them (it marks the project's registered users unfilled).
--   SELECT pymem.message_lexemes_backfill(project_id => '', max_messages => 10000);
CREATE OR REPLACE FUNCTION pymem.message_lexemes_backfill(project_id text DEFAULT '', max_messages integer DEFAULT 10000)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
    v_filled integer;
BEGIN
    PERFORM pymem._tenant_enter(message_lexemes_backfill.project_id);
    PERFORM pymem._check_limit('max_messages', message_lexemes_backfill.max_messages);
    INSERT INTO pymem.message_lexemes AS l
        (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
    SELECT m.project_id, m.user_id, m.thread_id, m.seq, pg_catalog.length(m.content), m.importance, m.created_at,
           pymem._lexeme_tokens(v.lexemes), v.lexemes
      FROM (SELECT m.* FROM pymem.messages AS m
             WHERE m.project_id = message_lexemes_backfill.project_id
               AND NOT EXISTS (SELECT 1 FROM pymem.message_lexemes AS x
                                WHERE x.project_id = m.project_id AND x.user_id = m.user_id
                                  AND x.thread_id = m.thread_id AND x.seq = m.seq)
             LIMIT message_lexemes_backfill.max_messages) AS m
     CROSS JOIN LATERAL (SELECT pymem._lexemes(pymem._text_search_config(message_lexemes_backfill.project_id), m.content) AS lexemes OFFSET 0) AS v
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN  -- heavy users' words (recall_terms) lack these: the next plan fills them again
        UPDATE pymem.recall_indexes AS r SET terms_filled = false
         WHERE r.project_id = message_lexemes_backfill.project_id AND r.terms_filled;
    END IF;
    IF v_count < message_lexemes_backfill.max_messages THEN
        UPDATE pymem.message_embeddings AS e
           SET lexemes = l.lexemes, tokens = l.tokens
          FROM (SELECT e2.project_id, e2.user_id, e2.thread_id, e2.seq, e2.embedder FROM pymem.message_embeddings AS e2
                 WHERE e2.project_id = message_lexemes_backfill.project_id AND e2.lexemes IS NULL
                   AND EXISTS (SELECT 1 FROM pymem.message_lexemes AS x
                                WHERE x.project_id = e2.project_id AND x.user_id = e2.user_id
                                  AND x.thread_id = e2.thread_id AND x.seq = e2.seq)
                 LIMIT message_lexemes_backfill.max_messages - v_count) AS todo
          JOIN pymem.message_lexemes AS l
            ON l.project_id = todo.project_id AND l.user_id = todo.user_id AND l.thread_id = todo.thread_id
           AND l.seq = todo.seq
         WHERE e.project_id = todo.project_id AND e.user_id = todo.user_id AND e.embedder = todo.embedder
           AND e.thread_id = todo.thread_id AND e.seq = todo.seq;
        GET DIAGNOSTICS v_filled = ROW_COUNT;
        v_count := v_count + v_filled;
    END IF;
    RETURN v_count;
END;
$$;
