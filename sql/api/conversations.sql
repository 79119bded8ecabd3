-- conversations.sql: the SQL API for conversation memory (tables in
-- migrations/0003_conversations.sql): messages, the window, taking back a thread's newest
-- message, forgetting a conversation. The rest
-- of the capability is beside it: conversations_turns.sql (turn_record),
-- conversations_summaries.sql (running summaries), conversations_embeddings.sql (vectors and
-- lexemes of messages). Recall of past messages is a family of its own (recall.sql, which calls
-- this file, never the other way). Re-applied on every migrate. Called by
-- pymem/conversations.py and by any SQL client (docs/sql.md "Conversations").
--
-- Namespacing: every call names (project_id, user_id[, thread_id]); nothing reads across
-- users. user_id '' or '*' is refused on writes; reads with '' return nothing.
--
-- Locking: a write locks its thread row (UPDATE ... RETURNING last_seq), so concurrent turns
-- of one thread get consecutive numbers and the window stays ordered and complete. A summary
-- is folded under a lease on the thread row (claim_token, claim_until): turn_record or
-- summary_claim hands the due span to exactly one caller; summary_commit only accepts that
-- caller's token, so two app servers never fold the same span twice, and a summarizer that
-- fails leaves the old summary in place (the lease expires, or summary_release ends it).
--
-- Errors: 22023 invalid argument. (A summary_commit whose claim is no longer held returns
-- false and writes nothing.)

-- _conv_check: validates (project_id, user_id, thread_id). purpose 'exact': the call names one real
-- user (writes, and reads that need one); an empty user id is refused. purpose 'match': the call
-- selects what matches (reads); an empty user id matches nothing (returns false). purpose
-- 'delete' (conversation_forget): an empty user id is refused, as for a write.
CREATE OR REPLACE FUNCTION pymem._conv_check(project_id text, user_id text, thread_id text, purpose text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM pymem._project_check(project_id);
    IF user_id IS NULL OR user_id = '*' OR pg_catalog.length(user_id) > 256 THEN
        RAISE EXCEPTION 'pymem: user_id must be a user''s id (at most 256 characters, not ''*'')'
            USING ERRCODE = '22023';
    END IF;
    IF thread_id IS NOT NULL AND (thread_id IN ('', '*') OR pg_catalog.length(thread_id) > 256) THEN
        RAISE EXCEPTION 'pymem: thread_id must be a non-empty string of at most 256 characters other than ''*'''
            USING ERRCODE = '22023';
    END IF;
    IF user_id = '' THEN
        IF purpose = 'exact' THEN
            RAISE EXCEPTION 'pymem: a message needs a user id; the empty id names no one'
                USING ERRCODE = '22023';
        END IF;
        IF purpose = 'delete' THEN
            RAISE EXCEPTION 'pymem: deleting a conversation needs a user id; the empty id names no one'
                USING ERRCODE = '22023';
        END IF;
        RETURN false;
    END IF;
    RETURN true;
END;
$$;

-- _message_role(role): the one list of a message's roles (the CHECK messages_role_check of
-- migrations/0003_conversations.sql says it for the table); NULL is none of them. No SET clause,
-- so that it inlines into messages_add_many's check of every element.
CREATE OR REPLACE FUNCTION pymem._message_role(role text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT role IS NOT NULL AND (role OPERATOR(pg_catalog.=) 'user' OR role OPERATOR(pg_catalog.=) 'assistant'
                                   OR role OPERATOR(pg_catalog.=) 'system' OR role OPERATOR(pg_catalog.=) 'tool') $$;

-- _message_check: validates one message's role, content, importance and metadata (NULL: '{}').
CREATE OR REPLACE FUNCTION pymem._message_check(role text, content text, importance double precision,
                                                metadata jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF NOT pymem._message_role(role) THEN
        RAISE EXCEPTION 'pymem: role must be user, assistant, system or tool, not %', coalesce(pg_catalog.quote_literal(role), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF content IS NULL OR pymem._fact_trim(content) = '' THEN
        RAISE EXCEPTION 'pymem: a % message must not be empty', role USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.length(content) > 262144 THEN
        RAISE EXCEPTION 'pymem: a message is % characters; the limit is 262144', pg_catalog.length(content)
            USING ERRCODE = '22023';
    END IF;
    IF importance IS NULL OR importance = 'NaN'::float8 OR importance < 0 OR importance > 1 THEN
        RAISE EXCEPTION 'pymem: importance must be between 0 and 1, not %', importance USING ERRCODE = '22023';
    END IF;
    IF metadata IS NOT NULL AND pg_catalog.jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'pymem: a message''s metadata must be a JSON object, not %', pg_catalog.jsonb_typeof(metadata)
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _message_insert: appends one message to a thread (creating the thread), returns its seq; with
-- reply_content, also the answer to it (role 'assistant', the next seq) in the same statement, as
-- turn_record's two messages (one row of the thread updated and one insert, so the messages'
-- statement trigger runs once: on a Citus worker each of those statements is routed).
-- created_at NULL: now. A given created_at (importing a history with its real times) must be
-- finite, at most 5 minutes ahead of the server's clock (clock skew between an app server and the
-- database), and not earlier than the thread's newest message: a thread's messages stay in time
-- order, so the window (by seq) and everything ordered by time (recall's recency, its ties, the
-- catch-up) agree. It is compared under the thread row's lock, so concurrent writers cannot
-- interleave out of order.
CREATE OR REPLACE FUNCTION pymem._message_insert(
    project_id text, user_id text, thread_id text, role text, content text,
    importance double precision, metadata jsonb, embedded_by text, created_at timestamptz,
    reply_content text DEFAULT NULL, reply_importance double precision DEFAULT NULL,
    reply_metadata jsonb DEFAULT NULL, reply_embedded_by text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_seq bigint;
    v_previous timestamptz;
    v_at timestamptz;
    v_n integer := CASE WHEN reply_content IS NULL THEN 1 ELSE 2 END;
BEGIN
    IF thread_id IS NULL THEN
        RAISE EXCEPTION 'pymem: a message needs a thread_id' USING ERRCODE = '22023';
    END IF;
    IF _message_insert.created_at IS NOT NULL AND (NOT pg_catalog.isfinite(_message_insert.created_at)
       OR _message_insert.created_at > pg_catalog.clock_timestamp() + pg_catalog.make_interval(mins => 5)) THEN
        RAISE EXCEPTION 'pymem: created_at % is in the future', _message_insert.created_at
            USING ERRCODE = '22023',
                  HINT = 'created_at is the time a message was written: at most 5 minutes ahead of the database''s clock. Leave it NULL for now.';
    END IF;
    INSERT INTO pymem.threads AS t (project_id, user_id, thread_id, last_seq)
    VALUES (_message_insert.project_id, _message_insert.user_id, _message_insert.thread_id, v_n)
    ON CONFLICT (project_id, user_id, thread_id)
    DO UPDATE SET last_seq = t.last_seq + v_n, updated_at = pg_catalog.clock_timestamp()
    RETURNING t.last_seq - v_n + 1 INTO v_seq;
    IF _message_insert.created_at IS NOT NULL AND v_seq > 1 THEN
        SELECT m.created_at INTO v_previous FROM pymem.messages AS m
         WHERE m.project_id = _message_insert.project_id AND m.user_id = _message_insert.user_id
           AND m.thread_id = _message_insert.thread_id AND m.seq = v_seq - 1;
        IF v_previous > _message_insert.created_at THEN
            RAISE EXCEPTION 'pymem: created_at % is earlier than the newest message of thread % (%)',
                    _message_insert.created_at, pg_catalog.quote_literal(_message_insert.thread_id), v_previous
                USING ERRCODE = '22023',
                      HINT = 'A thread''s messages are kept in time order: import a history oldest first, into a thread of its own.';
        END IF;
    END IF;
    IF v_n = 1 THEN
        INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata, embedded_by,
                                    created_at)
        VALUES (_message_insert.project_id, _message_insert.user_id, _message_insert.thread_id, v_seq,
                _message_insert.role, _message_insert.content, _message_insert.importance,
                coalesce(_message_insert.metadata, '{}'::jsonb), _message_insert.embedded_by,
                coalesce(_message_insert.created_at, pg_catalog.clock_timestamp()));
    ELSE
        v_at := coalesce(_message_insert.created_at, pg_catalog.clock_timestamp());
        INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata, embedded_by,
                                    created_at)
        VALUES (_message_insert.project_id, _message_insert.user_id, _message_insert.thread_id, v_seq,
                _message_insert.role, _message_insert.content, _message_insert.importance,
                coalesce(_message_insert.metadata, '{}'::jsonb), _message_insert.embedded_by, v_at),
               (_message_insert.project_id, _message_insert.user_id, _message_insert.thread_id, v_seq + 1,
                'assistant', _message_insert.reply_content, _message_insert.reply_importance,
                coalesce(_message_insert.reply_metadata, '{}'::jsonb), _message_insert.reply_embedded_by,
                CASE WHEN _message_insert.created_at IS NULL THEN pg_catalog.clock_timestamp() ELSE v_at END);
    END IF;
    RETURN v_seq;
END;
$$;

-- message_add: appends one message (e.g. from another service, without a vector); returns
-- its number in the thread. Recall embeds it later, in a batch. metadata (a JSON object) comes
-- back with the message from window_read, messages_recall and context_read. created_at (default:
-- now) imports a message with its real time: see _message_insert for what is accepted.
--   SELECT pymem.message_add(user_id => 'alice', role => 'user', content => 'I moved to Oslo');
CREATE OR REPLACE FUNCTION pymem.message_add(
    user_id text,
    content text,
    role text DEFAULT 'user',
    thread_id text DEFAULT 'default',
    project_id text DEFAULT '',
    importance double precision DEFAULT 1.0,
    metadata jsonb DEFAULT '{}'::jsonb,
    created_at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM pymem._tenant_enter(message_add.project_id);
    PERFORM pymem._conv_check(message_add.project_id, message_add.user_id, message_add.thread_id, 'exact');
    PERFORM pymem._message_check(message_add.role, message_add.content, message_add.importance, message_add.metadata);
    RETURN pymem._message_insert(message_add.project_id, message_add.user_id, message_add.thread_id,
                                 message_add.role, message_add.content, message_add.importance, message_add.metadata,
                                 NULL, message_add.created_at);
END;
$$;

-- messages_add_many: bulk ingest: appends many messages to one thread in one call, oldest
-- first (importing a history): element i of roles and contents (and of importances, metadata,
-- created_ats, embeddings when given; a NULL array means message_add's default for every element)
-- is one message_add, numbered after the thread's newest message in the order given. Same checks
-- as message_add, all or nothing: the first invalid element refuses the call (22023, naming its
-- position) and nothing is written. Times must not go backwards, within the batch or from the
-- thread's newest message (an element without a time is now). With embeddings (one embedder, one
-- vector per message) the vectors are stored too, so recall needs no catch-up for them. Returns one
-- row per element, in order: (ord, seq).
--   SELECT * FROM pymem.messages_add_many('alice', 'import', ARRAY['user', 'assistant'],
--                                         ARRAY['I moved to Oslo', 'Noted'], created_ats => ARRAY[...]);
CREATE OR REPLACE FUNCTION pymem.messages_add_many(
    user_id text,
    thread_id text,
    roles text[],
    contents text[],
    project_id text DEFAULT '',
    importances double precision[] DEFAULT NULL,
    metadata jsonb[] DEFAULT NULL,
    created_ats timestamptz[] DEFAULT NULL,
    embeddings vector[] DEFAULT NULL,
    embedder text DEFAULT NULL)
RETURNS TABLE (ord integer, seq bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_n integer := pg_catalog.cardinality(messages_add_many.contents);
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_bad integer;
    v_message text;
    v_last bigint;
    v_previous timestamptz;
BEGIN
    PERFORM pymem._tenant_enter(messages_add_many.project_id);
    PERFORM pymem._conv_check(messages_add_many.project_id, messages_add_many.user_id, messages_add_many.thread_id, 'exact');
    IF messages_add_many.contents IS NULL OR messages_add_many.roles IS NULL
       OR pg_catalog.cardinality(messages_add_many.roles) <> v_n
       OR (messages_add_many.importances IS NOT NULL AND pg_catalog.cardinality(messages_add_many.importances) <> v_n)
       OR (messages_add_many.metadata IS NOT NULL AND pg_catalog.cardinality(messages_add_many.metadata) <> v_n)
       OR (messages_add_many.created_ats IS NOT NULL AND pg_catalog.cardinality(messages_add_many.created_ats) <> v_n)
       OR (messages_add_many.embeddings IS NOT NULL AND pg_catalog.cardinality(messages_add_many.embeddings) <> v_n) THEN
        RAISE EXCEPTION 'pymem: messages_add_many needs roles and contents, and every array it is given, of one length'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._check_batch('messages_add_many', 'messages', v_n, 100000);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- every element checked as message_add checks it; the first failure names its element
    SELECT pg_catalog.min(u.i) INTO v_bad
      FROM (SELECT r.role, r.c, pymem._fact_trim(r.c) AS t, r.imp, r.meta, r.at, r.i,  -- OFFSET 0: one trim per element
                   pg_catalog.lag(coalesce(r.at, v_now)) OVER (ORDER BY r.i) AS before
              FROM ROWS FROM (pg_catalog.unnest(messages_add_many.roles), pg_catalog.unnest(messages_add_many.contents),
                              pg_catalog.unnest(messages_add_many.importances), pg_catalog.unnest(messages_add_many.metadata),
                              pg_catalog.unnest(messages_add_many.created_ats)) WITH ORDINALITY AS r(role, c, imp, meta, at, i)
            OFFSET 0) AS u
     WHERE NOT pymem._message_role(u.role)
        OR u.t IS NULL OR u.t = '' OR pg_catalog.length(u.c) > 262144
        OR (messages_add_many.importances IS NOT NULL AND (u.imp IS NULL OR u.imp = 'NaN'::float8 OR u.imp < 0 OR u.imp > 1))
        OR (messages_add_many.metadata IS NOT NULL AND u.meta IS NOT NULL AND pg_catalog.jsonb_typeof(u.meta) <> 'object')
        OR (u.at IS NOT NULL AND (NOT pg_catalog.isfinite(u.at)
                                  OR u.at > pg_catalog.clock_timestamp() + pg_catalog.make_interval(mins => 5)))
        OR coalesce(u.at, v_now) < u.before;
    IF v_bad IS NOT NULL THEN
        BEGIN  -- message_add's own checks on that element say what is wrong with it
            PERFORM pymem._message_check(messages_add_many.roles[v_bad], messages_add_many.contents[v_bad],
                                         coalesce(messages_add_many.importances[v_bad], 1.0), messages_add_many.metadata[v_bad]);
            IF messages_add_many.created_ats[v_bad] IS NOT NULL AND (NOT pg_catalog.isfinite(messages_add_many.created_ats[v_bad])
               OR messages_add_many.created_ats[v_bad] > pg_catalog.clock_timestamp() + pg_catalog.make_interval(mins => 5)) THEN
                RAISE EXCEPTION 'pymem: created_at % is in the future', messages_add_many.created_ats[v_bad] USING ERRCODE = '22023';
            END IF;
            RAISE EXCEPTION 'pymem: created_at % is earlier than the message before it; a thread''s messages are kept in time order (import oldest first)',
                    coalesce(messages_add_many.created_ats[v_bad], v_now)
                USING ERRCODE = '22023';
        EXCEPTION WHEN invalid_parameter_value THEN
            GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT;
            RAISE EXCEPTION 'pymem: messages_add_many element % (of %): %', v_bad, v_n, pg_catalog.regexp_replace(v_message, '^pymem: ', '')
                USING ERRCODE = '22023';
        END;
    END IF;
    IF messages_add_many.embeddings IS NOT NULL THEN  -- every vector checked first (naming its element), then the embedder registered
        PERFORM pymem._embeddings_validate(messages_add_many.project_id, messages_add_many.embedder, messages_add_many.embeddings);
        PERFORM pymem._embedding_register(messages_add_many.project_id, messages_add_many.embedder, messages_add_many.embeddings[1]);
    END IF;
    -- the thread's numbers for the batch, under the thread row's lock (as message_add takes them)
    INSERT INTO pymem.threads AS t (project_id, user_id, thread_id, last_seq)
    VALUES (messages_add_many.project_id, messages_add_many.user_id, messages_add_many.thread_id, v_n)
    ON CONFLICT (project_id, user_id, thread_id)
    DO UPDATE SET last_seq = t.last_seq + v_n, updated_at = v_now
    RETURNING t.last_seq INTO v_last;
    -- a batch without times is written at the time this call holds the thread row: a concurrent
    -- append that took the row first wrote later than this call began, and this batch follows it
    -- (taken at the start, the time was refused as out of order: issue 56)
    IF messages_add_many.created_ats IS NULL
       OR NOT EXISTS (SELECT FROM pg_catalog.unnest(messages_add_many.created_ats) AS a(at) WHERE a.at IS NOT NULL) THEN
        v_now := pg_catalog.clock_timestamp();
    END IF;
    IF v_last > v_n THEN
        SELECT m.created_at INTO v_previous FROM pymem.messages AS m
         WHERE m.project_id = messages_add_many.project_id AND m.user_id = messages_add_many.user_id
           AND m.thread_id = messages_add_many.thread_id AND m.seq = v_last - v_n;
        IF v_previous > coalesce(messages_add_many.created_ats[1], v_now) THEN
            RAISE EXCEPTION 'pymem: created_at % is earlier than the newest message of thread % (%)',
                    coalesce(messages_add_many.created_ats[1], v_now), pg_catalog.quote_literal(messages_add_many.thread_id), v_previous
                USING ERRCODE = '22023',
                      HINT = 'A thread''s messages are kept in time order: import a history oldest first, into a thread of its own.';
        END IF;
    END IF;
    INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata, embedded_by, created_at)
    SELECT messages_add_many.project_id, messages_add_many.user_id, messages_add_many.thread_id, v_last - v_n + u.i,
           u.role, u.c, coalesce(u.imp, 1.0), coalesce(u.meta, '{}'::jsonb),
           CASE WHEN messages_add_many.embeddings IS NOT NULL THEN messages_add_many.embedder END, coalesce(u.at, v_now)
      FROM ROWS FROM (pg_catalog.unnest(messages_add_many.roles), pg_catalog.unnest(messages_add_many.contents),
                      pg_catalog.unnest(messages_add_many.importances), pg_catalog.unnest(messages_add_many.metadata),
                      pg_catalog.unnest(messages_add_many.created_ats)) WITH ORDINALITY AS u(role, c, imp, meta, at, i)
     ORDER BY u.i;
    IF messages_add_many.embeddings IS NOT NULL THEN
        -- with the lexemes the messages' trigger just stored, beside each vector (0006_v0_2_0_memory)
        INSERT INTO pymem.message_embeddings
            (project_id, user_id, embedder, thread_id, seq, chars, importance, created_at, embedding, lexemes, tokens)
        SELECT l.project_id, l.user_id, messages_add_many.embedder, l.thread_id, l.seq, l.chars, l.importance, l.created_at,
               u.v, l.lexemes, l.tokens
          FROM pg_catalog.unnest(messages_add_many.embeddings) WITH ORDINALITY AS u(v, i)
          JOIN pymem.message_lexemes AS l
            ON l.project_id = messages_add_many.project_id AND l.user_id = messages_add_many.user_id
           AND l.thread_id = messages_add_many.thread_id AND l.seq = v_last - v_n + u.i
           -- the batch's range as an index condition: without it the generic plan read every
           -- lexeme row of the thread and matched seq as a join filter
           AND l.seq > v_last - v_n AND l.seq <= v_last;
    END IF;
    RETURN QUERY SELECT g.i::integer, v_last - v_n + g.i FROM pg_catalog.generate_series(1, v_n) AS g(i);
END;
$$;

-- _window: the query behind window_read, without its checks (context_read calls it too).
CREATE OR REPLACE FUNCTION pymem._window(p_project_id text, p_user_id text, p_thread_id text, p_max integer)
RETURNS TABLE (seq bigint, role text, content text, importance double precision, created_at timestamptz,
               metadata jsonb)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT w.seq, w.role, w.content, w.importance, w.created_at, w.metadata FROM (
        SELECT m.seq, m.role, m.content, m.importance, m.created_at, m.metadata FROM pymem.messages AS m
         WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.thread_id = p_thread_id
         ORDER BY m.seq DESC
         LIMIT p_max) AS w
     ORDER BY w.seq;
$$;

-- _window_after(project_id, user_id, thread_id, window_size): the seq after which a thread's
-- messages are its current window (its newest window_size), which recall leaves out: a message of
-- that thread with a greater seq is in the window (no thread yet: 0 - window_size). PL/pgSQL, not
-- SQL: Citus cannot plan a parameterised SQL function's read of a distributed table generically;
-- and a plain read, not a sub-select in an expression, which Citus plans in full where it takes
-- the plain read by its fast path (four calls per context_read; docs/performance.md).
CREATE OR REPLACE FUNCTION pymem._window_after(p_project_id text, p_user_id text, p_thread_id text, p_window_size integer)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_last bigint;
BEGIN
    SELECT ts.last_seq INTO v_last FROM pymem.threads AS ts
     WHERE ts.project_id = p_project_id AND ts.user_id = p_user_id AND ts.thread_id = p_thread_id;
    RETURN coalesce(v_last, 0) - p_window_size;
END;
$$;

-- window_read: the last max_messages messages of a thread, oldest first, with their metadata.
--   SELECT seq, role, content FROM pymem.window_read(user_id => 'alice', max_messages => 20);
CREATE OR REPLACE FUNCTION pymem.window_read(
    user_id text, thread_id text DEFAULT 'default', project_id text DEFAULT '', max_messages integer DEFAULT 20)
RETURNS TABLE (seq bigint, role text, content text, importance double precision, created_at timestamptz,
               metadata jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(window_read.project_id);
    PERFORM pymem._check_limit('max_messages', window_read.max_messages);
    IF NOT pymem._conv_check(window_read.project_id, window_read.user_id, window_read.thread_id, 'match') THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT w.seq, w.role, w.content, w.importance, w.created_at, w.metadata
      FROM pymem._window(window_read.project_id, window_read.user_id, window_read.thread_id,
                         window_read.max_messages) AS w;
END;
$$;

-- message_pop: deletes a thread's newest message and returns it (no row: the thread has no
-- message), a session's undo (the OpenAI Agents SDK's pop_item: pymem.integrations.openai_agents).
-- The thread's counter steps back to the message before it, so the next message takes its number;
-- a summary, or a summary claim, that reached it now ends before it (the summary keeps what it
-- folded in). Its vector and lexemes go with it; the change feed records the delete. Locks the
-- thread row first, as message_add does, so it waits for a concurrent append and then takes the
-- append's message.
--   SELECT seq, role, content FROM pymem.message_pop(user_id => 'alice', thread_id => 'default');
CREATE OR REPLACE FUNCTION pymem.message_pop(user_id text, thread_id text DEFAULT 'default', project_id text DEFAULT '')
RETURNS TABLE (seq bigint, role text, content text, importance double precision, created_at timestamptz,
               metadata jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_seq bigint;
BEGIN
    PERFORM pymem._tenant_enter(message_pop.project_id);
    PERFORM pymem._conv_check(message_pop.project_id, message_pop.user_id, message_pop.thread_id, 'exact');
    PERFORM 1 FROM pymem.threads AS t
     WHERE t.project_id = message_pop.project_id AND t.user_id = message_pop.user_id
       AND t.thread_id = message_pop.thread_id
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT m.seq INTO v_seq FROM pymem.messages AS m
     WHERE m.project_id = message_pop.project_id AND m.user_id = message_pop.user_id
       AND m.thread_id = message_pop.thread_id
     ORDER BY m.seq DESC
     LIMIT 1;
    IF v_seq IS NULL THEN
        RETURN;
    END IF;
    UPDATE pymem.threads AS t
       SET last_seq = v_seq - 1,
           summary_through = LEAST(t.summary_through, v_seq - 1),
           claim_through = CASE WHEN t.claim_through IS NOT NULL THEN LEAST(t.claim_through, v_seq - 1) END
     WHERE t.project_id = message_pop.project_id AND t.user_id = message_pop.user_id
       AND t.thread_id = message_pop.thread_id;
    RETURN QUERY
    DELETE FROM pymem.messages AS m
     WHERE m.project_id = message_pop.project_id AND m.user_id = message_pop.user_id
       AND m.thread_id = message_pop.thread_id AND m.seq = v_seq
    RETURNING m.seq, m.role, m.content, m.importance, m.created_at, m.metadata;
END;
$$;

-- conversation_forget: deletes a user's threads (one, or '*' for all) with their messages,
-- vectors and summaries; returns the number of messages deleted. '' deletes nothing.
--   SELECT pymem.conversation_forget(user_id => 'alice', thread_id => '*');
CREATE OR REPLACE FUNCTION pymem.conversation_forget(user_id text, thread_id text DEFAULT '*', project_id text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count bigint;
BEGIN
    PERFORM pymem._tenant_enter(conversation_forget.project_id);
    IF NOT pymem._conv_check(conversation_forget.project_id, conversation_forget.user_id,
                             NULLIF(conversation_forget.thread_id, '*'), 'delete') THEN
        RETURN 0;
    END IF;
    IF conversation_forget.thread_id = '*' THEN
        WITH gone AS (
            DELETE FROM pymem.threads AS t
             WHERE t.project_id = conversation_forget.project_id AND t.user_id = conversation_forget.user_id
            RETURNING t.last_seq)
        SELECT pg_catalog.sum(g.last_seq) INTO v_count FROM gone AS g;
    ELSE
        WITH gone AS (
            DELETE FROM pymem.threads AS t
             WHERE t.project_id = conversation_forget.project_id AND t.user_id = conversation_forget.user_id
               AND t.thread_id = conversation_forget.thread_id
            RETURNING t.last_seq)
        SELECT pg_catalog.sum(g.last_seq) INTO v_count FROM gone AS g;
    END IF;
    RETURN coalesce(v_count, 0);
END;
$$;

-- message_delete: deletes one message of a user's thread (by its seq) with its vectors, lexemes
-- and recall postings (ON DELETE CASCADE); returns 1, or 0 when the thread has no such message.
-- The thread keeps its numbering (a later message is never renumbered; the next turn gets the next
-- seq) and its running summary, which may still say what the message said: forget_conversation
-- removes a thread with its summary. The user and thread must be ids (22023, as for a write);
-- seq a positive number (22023). One user's own rows only: the key names the user.
--   SELECT pymem.message_delete(user_id => 'alice', thread_id => 'default', seq => 3);
CREATE OR REPLACE FUNCTION pymem.message_delete(user_id text, thread_id text, seq bigint, project_id text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
BEGIN
    PERFORM pymem._tenant_enter(message_delete.project_id);
    PERFORM pymem._conv_check(message_delete.project_id, message_delete.user_id,
                              coalesce(message_delete.thread_id, ''), 'delete');
    IF message_delete.seq IS NULL OR message_delete.seq < 1 THEN
        RAISE EXCEPTION 'pymem: seq must be a message number (1, 2, ...), not %', coalesce(message_delete.seq::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM pymem.messages AS m
     WHERE m.project_id = message_delete.project_id AND m.user_id = message_delete.user_id
       AND m.thread_id = message_delete.thread_id AND m.seq = message_delete.seq;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;
