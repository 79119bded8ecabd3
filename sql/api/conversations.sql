-- conversations.sql: the SQL API for conversation memory (tables in
-- migrations/0003_conversations.sql): recording turns, windows, running summaries, recall.
-- Re-applied on every migrate. Called by pymem/conversations.py and by any SQL client
-- (README "SQL API / Conversations").
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

-- _message_check: validates one message's role, content, importance and metadata (NULL: '{}').
CREATE OR REPLACE FUNCTION pymem._message_check(role text, content text, importance double precision,
                                                metadata jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF role IS NULL OR role NOT IN ('user', 'assistant', 'system', 'tool') THEN
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

-- _message_insert: appends one message to a thread (creating the thread), returns its seq.
-- created_at NULL: now. A given created_at (importing a history with its real times) must be
-- finite, at most 5 minutes ahead of the server's clock (clock skew between an app server and the
-- database), and not earlier than the thread's newest message: a thread's messages stay in time
-- order, so the window (by seq) and everything ordered by time (recall's recency, its ties, the
-- catch-up) agree. It is compared under the thread row's lock, so concurrent writers cannot
-- interleave out of order.
CREATE OR REPLACE FUNCTION pymem._message_insert(
    project_id text, user_id text, thread_id text, role text, content text,
    importance double precision, metadata jsonb, embedded_by text, created_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_seq bigint;
    v_previous timestamptz;
    v_now timestamptz := pg_catalog.clock_timestamp();
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
    VALUES (_message_insert.project_id, _message_insert.user_id, _message_insert.thread_id, 1)
    ON CONFLICT (project_id, user_id, thread_id)
    DO UPDATE SET last_seq = t.last_seq + 1, updated_at = v_now  -- a variable: Citus refuses volatile calls here
    RETURNING t.last_seq INTO v_seq;
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
    INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata, embedded_by,
                                created_at)
    VALUES (_message_insert.project_id, _message_insert.user_id, _message_insert.thread_id, v_seq,
            _message_insert.role, _message_insert.content, _message_insert.importance,
            coalesce(_message_insert.metadata, '{}'::jsonb), _message_insert.embedded_by,
            coalesce(_message_insert.created_at, pg_catalog.clock_timestamp()));
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
     WHERE u.role IS NULL OR u.role NOT IN ('user', 'assistant', 'system', 'tool')
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
        -- with the lexemes the messages' trigger just stored, beside each vector (0017)
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

-- summary_claim: when at least summarize_every messages older than the newest keep_last are
-- not yet in the summary, and nobody holds a live lease, hands that span to this caller.
-- Returns no row when nothing is due (or someone else is folding it).
--   SELECT * FROM pymem.summary_claim(user_id => 'alice', keep_last => 10, summarize_every => 10);
CREATE OR REPLACE FUNCTION pymem.summary_claim(
    user_id text,
    thread_id text DEFAULT 'default',
    project_id text DEFAULT '',
    keep_last integer DEFAULT 10,
    summarize_every integer DEFAULT 10,
    lease_seconds double precision DEFAULT 300)
RETURNS TABLE (claim_token uuid, through_seq bigint, previous_summary text, messages jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();  -- a value: Citus refuses clock_timestamp() in UPDATE/ON CONFLICT on its tables
    v_token uuid := pg_catalog.gen_random_uuid();
    v_from bigint;
    v_through bigint;
    v_prev text;
BEGIN
    PERFORM pymem._tenant_enter(summary_claim.project_id);
    IF NOT pymem._conv_check(summary_claim.project_id, summary_claim.user_id, summary_claim.thread_id, 'match') THEN
        RETURN;
    END IF;
    PERFORM pymem._check_limit('keep_last', summary_claim.keep_last);
    IF summary_claim.summarize_every IS NULL OR summary_claim.summarize_every < 1 OR summary_claim.summarize_every > 10000 THEN
        RAISE EXCEPTION 'pymem: summarize_every must be between 1 and 10000' USING ERRCODE = '22023';
    END IF;
    IF summary_claim.lease_seconds IS NULL OR NOT (summary_claim.lease_seconds > 0 AND summary_claim.lease_seconds <= 86400) THEN
        RAISE EXCEPTION 'pymem: lease_seconds must be in (0, 86400]' USING ERRCODE = '22023';
    END IF;
    UPDATE pymem.threads AS t
       SET claim_token = v_token,
           claim_until = v_now + pg_catalog.make_interval(secs => summary_claim.lease_seconds),
           claim_through = t.last_seq - summary_claim.keep_last
     WHERE t.project_id = summary_claim.project_id AND t.user_id = summary_claim.user_id
       AND t.thread_id = summary_claim.thread_id
       AND t.last_seq - summary_claim.keep_last - t.summary_through >= summary_claim.summarize_every
       AND (t.claim_until IS NULL OR t.claim_until < v_now)
    RETURNING t.summary_through, t.claim_through, t.summary INTO v_from, v_through, v_prev;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    claim_token := v_token;
    through_seq := v_through;
    previous_summary := v_prev;
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'seq', m.seq, 'role', m.role, 'content', m.content, 'created_at', m.created_at) ORDER BY m.seq), '[]')
      INTO messages
      FROM pymem.messages AS m
     WHERE m.project_id = summary_claim.project_id AND m.user_id = summary_claim.user_id
       AND m.thread_id = summary_claim.thread_id AND m.seq > v_from AND m.seq <= v_through;
    RETURN NEXT;
END;
$$;

-- summary_commit: stores the new running summary (cut to max_chars) for the span a claim
-- covered. False (nothing written) when the claim is no longer held: its lease expired and
-- another caller took the span.
CREATE OR REPLACE FUNCTION pymem.summary_commit(
    user_id text,
    claim_token uuid,
    summary text,
    thread_id text DEFAULT 'default',
    project_id text DEFAULT '',
    max_chars integer DEFAULT 2000)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();  -- a value: Citus refuses clock_timestamp() in UPDATE/ON CONFLICT on its tables
BEGIN
    PERFORM pymem._tenant_enter(summary_commit.project_id);
    PERFORM pymem._conv_check(summary_commit.project_id, summary_commit.user_id, summary_commit.thread_id, 'exact');
    IF summary_commit.max_chars IS NULL OR summary_commit.max_chars < 1 OR summary_commit.max_chars > 100000 THEN
        RAISE EXCEPTION 'pymem: max_chars must be between 1 and 100000' USING ERRCODE = '22023';
    END IF;
    IF summary_commit.summary IS NULL OR pymem._fact_trim(summary_commit.summary) = '' THEN
        RAISE EXCEPTION 'pymem: a summary must not be empty' USING ERRCODE = '22023';
    END IF;
    UPDATE pymem.threads AS t
       SET summary = pg_catalog.left(pymem._fact_trim(summary_commit.summary), summary_commit.max_chars),
           summary_through = t.claim_through,
           summary_at = v_now,
           claim_token = NULL, claim_until = NULL, claim_through = NULL
     WHERE t.project_id = summary_commit.project_id AND t.user_id = summary_commit.user_id
       AND t.thread_id = summary_commit.thread_id AND t.claim_token = summary_commit.claim_token;
    RETURN FOUND;
END;
$$;

-- summary_release: gives a claim back without writing a summary (the summarizer failed).
CREATE OR REPLACE FUNCTION pymem.summary_release(
    user_id text, claim_token uuid, thread_id text DEFAULT 'default', project_id text DEFAULT '')
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(summary_release.project_id);
    PERFORM pymem._conv_check(summary_release.project_id, summary_release.user_id, summary_release.thread_id, 'exact');
    UPDATE pymem.threads AS t
       SET claim_token = NULL, claim_until = NULL, claim_through = NULL
     WHERE t.project_id = summary_release.project_id AND t.user_id = summary_release.user_id
       AND t.thread_id = summary_release.thread_id AND t.claim_token = summary_release.claim_token;
    RETURN FOUND;
END;
$$;

-- _fact_changes_check: the shape of turn_record's fact_changes (see there), checked before the
-- turn writes anything: NULL or a JSON array of at most 100 objects, each with op 'add',
-- 'update' or 'delete', content a string, fact_id an integer for update and delete (none for
-- add), and no other key. 22023 names the first element that is wrong.
CREATE OR REPLACE FUNCTION pymem._fact_changes_check(changes jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
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
                          WHERE k NOT IN ('op', 'fact_id', 'content')) THEN 'has a key other than op, fact_id, content'
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
    fact_changes jsonb DEFAULT NULL)
RETURNS TABLE (user_seq bigint, assistant_seq bigint, learned_ids bigint[],
               claim_token uuid, through_seq bigint, previous_summary text, messages jsonb, changes jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
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
    v_cut_at timestamptz;
    v_cut_id bigint;
    v_n_learned integer;         -- how many of v_contents came from `learned` (the adds follow)
    v_ids bigint[] := '{}';      -- the fact id of each of v_contents
    v_change jsonb;
    v_add_at integer[] := '{}';  -- per change: its add's index in v_contents (NULL: none)
    v_reason text[] := '{}';     -- per change: why it was skipped (NULL: it was not)
    v_succ pymem.fact_successor;
    v_i integer;
    v_turn jsonb;                -- {"thread_id", "seq"}: the turn, named in its facts' metadata
BEGIN
    PERFORM pymem._tenant_enter(turn_record.project_id);
    PERFORM pymem._conv_check(turn_record.project_id, turn_record.user_id, turn_record.thread_id, 'exact');
    IF pg_catalog.cardinality(turn_record.learned) > 100 THEN
        RAISE EXCEPTION 'pymem: a turn may carry at most 100 learned facts, not %', pg_catalog.cardinality(turn_record.learned)
            USING ERRCODE = '22023', HINT = 'Keep the extractor''s best 100 facts of the message.';
    END IF;
    IF turn_record.max_learned < 1 THEN
        RAISE EXCEPTION 'pymem: max_learned must be >= 1, or NULL for no cap' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._fact_changes_check(turn_record.fact_changes);
    PERFORM pymem._message_check('user', turn_record.user_content, turn_record.user_importance,
                                 turn_record.user_metadata);
    PERFORM pymem._message_check('assistant', turn_record.assistant_content, turn_record.assistant_importance,
                                 turn_record.assistant_metadata);
    PERFORM pymem._embedding_register(turn_record.project_id, turn_record.embedder, turn_record.user_embedding);
    PERFORM pymem._embedding_register(turn_record.project_id, turn_record.embedder, turn_record.assistant_embedding);
    user_seq := pymem._message_insert(turn_record.project_id, turn_record.user_id, turn_record.thread_id, 'user',
                                      turn_record.user_content, turn_record.user_importance, turn_record.user_metadata,
                                      CASE WHEN turn_record.user_embedding IS NOT NULL THEN turn_record.embedder END,
                                      turn_record.created_at);
    assistant_seq := pymem._message_insert(turn_record.project_id, turn_record.user_id, turn_record.thread_id,
                                           'assistant', turn_record.assistant_content,
                                           turn_record.assistant_importance, turn_record.assistant_metadata,
                                           CASE WHEN turn_record.assistant_embedding IS NOT NULL THEN turn_record.embedder END,
                                           turn_record.created_at);
    v_turn := pg_catalog.jsonb_build_object('thread_id', turn_record.thread_id, 'seq', user_seq);
    INSERT INTO pymem.message_embeddings
        (project_id, user_id, embedder, thread_id, seq, chars, importance, created_at, embedding, lexemes, tokens)
    -- each new message and its lexemes (which the messages' trigger just stored; 0017: kept
    -- beside the vector for recall) by primary key, one lookup per seq: as `seq = ANY (...)`, or
    -- as a join, generic plans read every message or lexeme row of the thread and matched the
    -- seqs as a filter (14 ms for a 7,300-message thread)
    SELECT m.project_id, m.user_id, turn_record.embedder, m.thread_id, m.seq, pg_catalog.length(m.content),
           m.importance, m.created_at, s.embedding, l.lexemes, l.tokens
      FROM (VALUES (user_seq, turn_record.user_embedding), (assistant_seq, turn_record.assistant_embedding))
           AS s(seq, embedding)
     CROSS JOIN LATERAL (SELECT m.* FROM pymem.messages AS m
                          WHERE m.project_id = turn_record.project_id AND m.user_id = turn_record.user_id
                            AND m.thread_id = turn_record.thread_id AND m.seq = s.seq
                          LIMIT 1) AS m
      LEFT JOIN LATERAL (SELECT l.lexemes, l.tokens FROM pymem.message_lexemes AS l
                          WHERE l.project_id = turn_record.project_id AND l.user_id = turn_record.user_id
                            AND l.thread_id = turn_record.thread_id AND l.seq = s.seq
                          LIMIT 1) AS l ON true
     WHERE s.embedding IS NOT NULL;
    -- learned facts: the checks of fact_add, one fact at a time (an invalid one is skipped) ...
    FOREACH v_fact IN ARRAY coalesce(turn_record.learned, '{}') LOOP
        BEGIN
            v_contents := v_contents || pymem._fact_check_values(v_fact, 0.6, 'learned', NULL, '{}');
        EXCEPTION WHEN invalid_parameter_value OR null_value_not_allowed THEN
            RAISE WARNING 'pymem: skipped a learned fact: %', SQLERRM;
        END;
    END LOOP;
    v_n_learned := pg_catalog.cardinality(v_contents);
    -- the adds of fact_changes join them, checked the same way
    FOR v_i IN 1 .. coalesce(pg_catalog.jsonb_array_length(turn_record.fact_changes), 0) LOOP
        v_change := turn_record.fact_changes -> (v_i - 1);
        v_add_at := v_add_at || NULL::integer;
        v_reason := v_reason || NULL::text;
        CONTINUE WHEN v_change ->> 'op' <> 'add';
        BEGIN
            v_contents := v_contents || pymem._fact_check_values(v_change ->> 'content', 0.6, 'learned', NULL, '{}');
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
        IF turn_record.max_learned IS NOT NULL THEN
            -- one learned writer per subject at a time, so the cap holds under concurrency
            PERFORM pymem._subject_lock(turn_record.project_id, 'user', turn_record.user_id);
        END IF;
        -- ... then each distinct fact once, in the order of its first mention; a fact already
        -- active (or committed meanwhile by a writer of another source, which takes no lock)
        -- keeps its id. As in fact_add, a key that is neither inserted nor found was
        -- superseded or forgotten in between: try again.
        LOOP
            WITH todo AS (
                SELECT DISTINCT ON (u.k) u.k, u.c, u.n
                  FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_contents)) WITH ORDINALITY AS u(k, c, n)
                 WHERE u.k <> ALL (v_got_keys)
                 ORDER BY u.k, u.n
            ), ins AS (
                INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source,
                                              metadata)
                SELECT turn_record.project_id, 'user', turn_record.user_id, t.c, t.k, 0.6, 'learned',
                       pg_catalog.jsonb_build_object('turn', v_turn)
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
            -- each key looked up on its own (facts_subject_content_key, 0026): as one `= ANY`, or
            -- as a plain join, the generic plan read all of the subject's active facts
            SELECT v_got_keys || coalesce(pg_catalog.array_agg(f.content_key), '{}'),
                   v_got_ids || coalesce(pg_catalog.array_agg(f.id), '{}')
              INTO v_got_keys, v_got_ids
              FROM (SELECT DISTINCT u.k FROM pg_catalog.unnest(v_keys) AS u(k) WHERE u.k <> ALL (v_got_keys)) AS k
             CROSS JOIN LATERAL (
                   SELECT f.content_key, f.id FROM pymem.facts AS f
                    WHERE f.project_id = turn_record.project_id AND f.scope = 'user' COLLATE "C"
                      AND f.scope_id = turn_record.user_id AND f.content_key = k.k AND f.superseded_by IS NULL
                    LIMIT 1) AS f;  -- one active fact per key; the LIMIT keeps the lookup per key
            EXIT WHEN pg_catalog.cardinality(v_got_keys) = v_want;
        END LOOP;
        v_ids := ARRAY(SELECT g.id FROM pg_catalog.unnest(v_keys) WITH ORDINALITY AS u(k, n)
                         JOIN ROWS FROM (pg_catalog.unnest(v_got_keys), pg_catalog.unnest(v_got_ids)) AS g(k, id)
                           ON g.k = u.k
                        ORDER BY u.n);
        learned_ids := v_ids[1:v_n_learned];
        IF v_created AND turn_record.max_learned IS NOT NULL THEN
            -- the cap, once for the whole turn (as in fact_add: the newest learned fact beyond
            -- it, read from facts_subject_learned_newest; it and everything older goes)
            SELECT o.created_at, o.id INTO v_cut_at, v_cut_id FROM pymem.facts AS o
             WHERE o.project_id = turn_record.project_id AND o.scope = 'user' AND o.scope_id = turn_record.user_id
               AND o.superseded_by IS NULL AND o.source = 'learned'
             ORDER BY o.created_at DESC, o.id DESC
            OFFSET turn_record.max_learned LIMIT 1;
            IF FOUND THEN
                DELETE FROM pymem.facts AS f
                 WHERE f.project_id = turn_record.project_id AND f.scope = 'user' AND f.scope_id = turn_record.user_id
                   AND f.superseded_by IS NULL AND f.source = 'learned'
                   AND (f.created_at, f.id) <= (v_cut_at, v_cut_id);
            END IF;
        END IF;
    END IF;
    -- the updates and deletes of fact_changes, in order, each in a subtransaction of its own
    -- (fact_supersede takes the subject lock and checks the fact is this user's and active)
    changes := '[]';
    FOR v_i IN 1 .. coalesce(pg_catalog.jsonb_array_length(turn_record.fact_changes), 0) LOOP
        v_change := turn_record.fact_changes -> (v_i - 1);
        IF v_change ->> 'op' = 'add' THEN
            changes := changes || pg_catalog.jsonb_build_array(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
                'op', 'add', 'id', v_ids[v_add_at[v_i]], 'applied', v_add_at[v_i] IS NOT NULL,
                'reason', v_reason[v_i])));
            CONTINUE;
        END IF;
        BEGIN
            v_succ := pymem.fact_supersede(scope => 'user', scope_id => turn_record.user_id,
                                           new_content => v_change ->> 'content',
                                           id => (v_change ->> 'fact_id')::bigint,
                                           project_id => turn_record.project_id, confidence => 0.6,
                                           source => 'learned', created_at => turn_record.created_at,
                                           metadata => pg_catalog.jsonb_build_object('turn', v_turn
                                               || pg_catalog.jsonb_build_object('op', v_change ->> 'op')));
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

-- summary_read: a thread's running summary and the last message it covers (NULL, 0 if none).
CREATE OR REPLACE FUNCTION pymem.summary_read(user_id text, thread_id text DEFAULT 'default', project_id text DEFAULT '')
RETURNS TABLE (summary text, through_seq bigint, summarized_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(summary_read.project_id);
    IF NOT pymem._conv_check(summary_read.project_id, summary_read.user_id, summary_read.thread_id, 'match') THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT t.summary, t.summary_through, t.summary_at FROM pymem.threads AS t
     WHERE t.project_id = summary_read.project_id AND t.user_id = summary_read.user_id
       AND t.thread_id = summary_read.thread_id;
END;
$$;

-- _messages_unembedded: the catch-up query: three index ranges (NULL, through messages_unembedded;
-- below and above the current embedder's name, through messages_embedded_by), one branch each, so
-- that every plan, generic ones included, reads only those ranges: all empty when nothing is
-- missing. Both indexes are partial so that the foreign-key check of a stored vector cannot use
-- them (0028_embedded_by_partial).
CREATE OR REPLACE FUNCTION pymem._messages_unembedded(
    p_project_id text, p_user_id text, p_embedder text, p_min_chars integer, p_limit integer)
RETURNS TABLE (thread_id text, seq bigint, content text)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT c.thread_id, c.seq, c.content FROM (
        SELECT m.thread_id, m.seq, m.content, m.created_at FROM pymem.messages AS m
         WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by IS NULL
        UNION ALL
        SELECT m.thread_id, m.seq, m.content, m.created_at FROM pymem.messages AS m
         WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by < p_embedder
        UNION ALL
        SELECT m.thread_id, m.seq, m.content, m.created_at FROM pymem.messages AS m
         WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by > p_embedder) AS c
     WHERE pg_catalog.length(c.content) >= p_min_chars
       -- a message last embedded by another embedder may have this one's vector already
       AND NOT EXISTS (SELECT 1 FROM pymem.message_embeddings AS e
                        WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
                          AND e.thread_id = c.thread_id AND e.seq = c.seq)
     ORDER BY c.created_at DESC, c.thread_id, c.seq DESC
     LIMIT p_limit;
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
             LEFT JOIN pymem.message_lexemes AS l  -- its lexemes, kept beside the vector for recall (0017)
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

-- _message_lexemes_add: the statement trigger messages_lexemes (migrations/0015_message_lexical.sql):
-- indexes the messages one statement inserted, in one INSERT.
CREATE OR REPLACE FUNCTION pymem._message_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    INSERT INTO pymem.message_lexemes AS l
        (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
    SELECT n.project_id, n.user_id, n.thread_id, n.seq, pg_catalog.length(n.content), n.importance, n.created_at,
           pymem._lexeme_tokens(v.lexemes), v.lexemes
      FROM new_messages AS n
      LEFT JOIN pymem.text_search AS c ON c.project_id = n.project_id  -- the project's configuration, one read per statement
     CROSS JOIN LATERAL (SELECT pymem._lexemes(c.config::pg_catalog.regconfig, n.content) AS lexemes OFFSET 0) AS v;
    RETURN NULL;
END;
$$;

-- message_lexemes_backfill: indexes up to max_messages of a project's messages that have no
-- lexemes yet (stored before 0015_message_lexical by a deploy user that row-level security binds),
-- then copies the lexemes of up to max_messages messages beside their vectors where they are
-- missing (vectors stored before 0017_lexemes_beside_vectors: recall reads those lexemes by
-- primary key until then); returns how many rows it wrote. Call it until it returns 0: each call
-- is one short transaction.
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

-- _recall_check: validates recall parameters. min_score NULL: no threshold; else in -1..1, the
-- range of a score. lexical_weight in 0..1. as_of, since and until: finite when given.
CREATE OR REPLACE FUNCTION pymem._recall_check(
    k integer, min_content_chars integer, recency_weight double precision,
    importance_weight double precision, half_life_seconds double precision, min_score double precision,
    lexical_weight double precision, as_of timestamptz, since timestamptz, until timestamptz)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM pymem._check_limit('k', k);
    PERFORM pymem._check_limit('min_content_chars', min_content_chars);
    IF recency_weight IS NULL OR importance_weight IS NULL
       OR NOT (recency_weight >= 0 AND recency_weight <= 1) OR NOT (importance_weight >= 0 AND importance_weight <= 1)
       OR recency_weight + importance_weight > 1 THEN
        RAISE EXCEPTION 'pymem: recency_weight and importance_weight must each be in 0..1 and sum to at most 1 (got % and %)',
                recency_weight, importance_weight
            USING ERRCODE = '22023';
    END IF;
    IF half_life_seconds IS NULL OR NOT (half_life_seconds > 0 AND half_life_seconds < 'Infinity'::float8) THEN
        RAISE EXCEPTION 'pymem: half_life_seconds must be a positive number' USING ERRCODE = '22023';
    END IF;
    IF min_score IS NOT NULL AND NOT (min_score >= -1 AND min_score <= 1) THEN
        RAISE EXCEPTION 'pymem: min_score must be between -1 and 1, or NULL for no threshold (got %)', min_score
            USING ERRCODE = '22023';
    END IF;
    IF lexical_weight IS NULL OR NOT (lexical_weight >= 0 AND lexical_weight <= 1) THEN
        RAISE EXCEPTION 'pymem: lexical_weight must be between 0 and 1 (got %)', lexical_weight USING ERRCODE = '22023';
    END IF;
    IF NOT pg_catalog.isfinite(coalesce(as_of, '2000-01-01')) OR NOT pg_catalog.isfinite(coalesce(since, '2000-01-01'))
       OR NOT pg_catalog.isfinite(coalesce(until, '2000-01-01')) THEN
        RAISE EXCEPTION 'pymem: as_of, since and until must be finite times (or NULL)' USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _vector_match: recall's floor for a cosine: a message matches the query vector when its cosine
-- is above 1e-5, not merely above 0 (a pair with nothing in common, e.g. HashEmbedder's vectors of
-- texts sharing no n-gram, comes out of float4 arithmetic a few 1e-7 either side of 0). No SET
-- clause, so that it inlines into recall's queries: the operator is named with its schema.
CREATE OR REPLACE FUNCTION pymem._vector_match(similarity double precision)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT similarity OPERATOR(pg_catalog.>) 1e-5::pg_catalog.float8 $$;

-- _recall_ranked: a user's recall candidates ranked by
--   score = (1 - rw - iw) * relevance + rw * 0.5 ^ (age / half_life) + iw * importance
-- (age measured from p_as_of, default now; ties: newer first, then thread and seq), where
--   relevance = (1 - lw) * cosine + lw * lexical   with a query vector and query terms,
--             = cosine                             with a vector and no terms (no text, or only stop words),
--             = lexical                            with terms and no vector;
--   lexical   = BM25 (k1 1.2, b 0.75) of the query text's lexemes in each message, divided by the
--               best eligible message's (the best lexical match has 1, a message sharing no term 0).
-- BM25's statistics (document count, average length in tokens, each term's document frequency)
-- are those of the rows ranked: with a vector, the user's messages with a vector of p_embedder as of
-- p_as_of; without, the user's messages as of p_as_of.
-- Eligible: with a vector, every message with a vector of p_embedder that matches the query at
-- all (a cosine above 1e-5, _vector_match, or a term in common with the text); without one, every message sharing
-- a term with the text (the floor: a message that matches neither way is never recalled, however
-- recent or important, so a short or unrelated history gives fewer than k rows, not padding); in
-- both cases of at least p_min_chars characters, outside the
-- newest `window` messages of the current thread, created at or before p_as_of, at or after
-- p_since and before p_until, whose metadata contains p_filter, and, when p_min_score is not NULL,
-- scoring at least that. An exact scan of the user's rows: exactly `limit_rows` rows come back
-- whenever that many are eligible.
--
-- How: one read of the user's rows (with a vector, each vector row carries its message's lexemes
-- and length, 0017_lexemes_beside_vectors; a vector stored before that has NULL there and its
-- message's lexemes are read by primary key; without a vector, the user's rows of message_lexemes),
-- kept in memory with each row's similarity, length and eligibility, and the lexemes of the rows
-- sharing a term only. The score splits into a part every row has and a lexical bonus (>= 0) that
-- only the rows sharing a term have:
--   base  = (1 - rw - iw) * (1 - lw') * cosine + rw * recency + iw * importance
--   bonus = (1 - rw - iw) * lw' * lexical        (lw' = lw with a vector and terms, 0 with a vector
--                                                 and no terms, 1 without a vector)
-- so the top k are among the k best rows by base with a positive cosine and the rows sharing a
-- term (the floor keeps the rest out): a row with no term
-- that belongs in the top k has at most k - 1 rows above it by base (a row above it by base
-- scores at least as much). Only those few rows are scored in full; the rest are read once and
-- sorted once. Without a term (vector recall alone) the rows are not kept: the best are picked while
-- they are read (the CTE top). No join of the user's rows with each other: planned
-- generically (statistics saying "a row or two"), such a join ran as a nested loop, 17 ms for
-- 1,000 messages. The document count and total length kept per user on write would spare keeping
-- the rows (the k best by base in one streamed pass, the rows sharing a term in a second), but
-- that second read costs nearly as much: measured and not adopted (bench/README.md, "Heavy users").
CREATE OR REPLACE FUNCTION pymem._recall_ranked(
    p_project_id text, p_user_id text, p_thread_id text, p_query vector, p_embedder text, p_text text,
    p_limit integer, p_min_chars integer, p_window integer, p_rw double precision, p_iw double precision,
    p_lw double precision, p_half_life double precision, p_min_score double precision,
    p_as_of timestamptz, p_since timestamptz, p_until timestamptz, p_filter jsonb)
RETURNS TABLE (thread_id text, seq bigint, similarity double precision, score double precision)
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
-- No SET enable_nestloop = off here: before PostgreSQL 18 a disabled join method still costs
-- 1e10 where the planner has no alternative, which swamped every other estimate of this query
-- (1.7 s instead of 9 ms per call on PostgreSQL 15 for a 500-message user).
AS $$
    WITH q AS MATERIALIZED (  -- the query's terms, one tsquery per term, one matching any of them,
                              -- the weights of the cosine and of the lexical score
        SELECT t.each_term, t.any_term,
               (1 - p_rw - p_iw) * CASE WHEN p_query IS NULL THEN 0 WHEN t.any_term IS NULL THEN 1 ELSE 1 - p_lw END AS wv,
               (1 - p_rw - p_iw) * CASE WHEN p_query IS NULL THEN 1 WHEN t.any_term IS NULL THEN 0 ELSE p_lw END AS wl,
               coalesce((SELECT ts.last_seq FROM pymem.threads AS ts
                          WHERE ts.project_id = p_project_id AND ts.user_id = p_user_id
                            AND ts.thread_id = p_thread_id), 0) - p_window AS window_after
          FROM (SELECT u.each_term,
                       CASE WHEN pg_catalog.cardinality(u.each_term) > 0
                            THEN pg_catalog.array_to_string(u.each_term, ' | ')::tsquery END AS any_term
                  FROM (SELECT CASE WHEN p_text IS NOT NULL THEN ARRAY(
                               SELECT ('''' || pg_catalog.replace(pg_catalog.replace(x.x, '\', '\\'), '''', '''''') || '''')::tsquery
                                 FROM pg_catalog.unnest(pg_catalog.tsvector_to_array(pymem._lexemes(pymem._text_search_config(p_project_id), p_text))) AS x(x))
                               END AS each_term
                        OFFSET 0) AS u) AS t),  -- OFFSET 0: the terms computed once, not once per use
    base AS MATERIALIZED (  -- the user's rows as of p_as_of, read once
        SELECT r.thread_id, r.seq, r.created_at, r.similarity, r.tokens, r.lexemes, r.stale,
               -- eligible (as of p_as_of is the read's condition)
               r.chars >= p_min_chars
               AND (p_since IS NULL OR r.created_at >= p_since)
               AND (p_until IS NULL OR r.created_at < p_until)
               AND NOT (r.thread_id = p_thread_id AND r.seq > (SELECT q.window_after FROM q))
               AND (p_filter IS NULL OR EXISTS (
                       SELECT 1 FROM pymem.messages AS m
                        WHERE m.project_id = p_project_id AND m.user_id = p_user_id
                          AND m.thread_id = r.thread_id AND m.seq = r.seq AND m.metadata @> p_filter)) AS ok,
               (SELECT q.wv FROM q) * coalesce(r.similarity, 0)
               -- the exponent is capped so that very old messages score 0.5^1000, not an underflow
               + CASE WHEN p_rw = 0 THEN 0 ELSE p_rw * pg_catalog.power(0.5::float8, LEAST(GREATEST(
                     pg_catalog.date_part('epoch', coalesce(p_as_of, pg_catalog.now()) - r.created_at), 0)
                     / p_half_life, 1000)) END
               + p_iw * r.importance AS base
          FROM (-- with a vector: every vector of the user's from p_embedder
                SELECT e.thread_id, e.seq, e.chars, e.importance, e.created_at,
                       1 - pymem._cosine_distance(e.embedding, p_query) AS similarity, e.tokens,
                       CASE WHEN e.lexemes @@ (SELECT q.any_term FROM q) THEN e.lexemes END AS lexemes,
                       e.lexemes IS NULL AS stale
                  FROM pymem.message_embeddings AS e
                 WHERE p_query IS NOT NULL AND (SELECT q.any_term FROM q) IS NOT NULL
                   AND e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
                   AND (p_as_of IS NULL OR e.created_at <= p_as_of)
                UNION ALL
                -- without: every message of the user's (none when the text has no term)
                SELECT l.thread_id, l.seq, l.chars, l.importance, l.created_at, NULL::float8, l.tokens,
                       CASE WHEN l.lexemes @@ (SELECT q.any_term FROM q) THEN l.lexemes END, false
                  FROM pymem.message_lexemes AS l
                 WHERE p_query IS NULL AND (SELECT q.any_term FROM q) IS NOT NULL
                   AND l.project_id = p_project_id AND l.user_id = p_user_id
                   AND (p_as_of IS NULL OR l.created_at <= p_as_of)) AS r),
    top AS (  -- with a vector and no term: the p_limit best eligible rows, read and sorted in one pass,
              -- with no row kept in memory but the best (1.4 ms instead of 2.6 for 1,000 messages)
        SELECT s.thread_id, s.seq, s.created_at, s.similarity,
               (SELECT q.wv FROM q) * s.similarity
               + CASE WHEN p_rw = 0 THEN 0 ELSE p_rw * pg_catalog.power(0.5::float8, LEAST(GREATEST(
                     pg_catalog.date_part('epoch', coalesce(p_as_of, pg_catalog.now()) - s.created_at), 0)
                     / p_half_life, 1000)) END
               + p_iw * s.importance AS base
          FROM (SELECT e.thread_id, e.seq, e.created_at, e.importance, 1 - pymem._cosine_distance(e.embedding, p_query) AS similarity
                  FROM pymem.message_embeddings AS e
                 WHERE p_query IS NOT NULL AND (SELECT q.any_term FROM q) IS NULL
                   AND e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
                   AND (p_as_of IS NULL OR e.created_at <= p_as_of)
                   AND e.chars >= p_min_chars
                   AND (p_since IS NULL OR e.created_at >= p_since)
                   AND (p_until IS NULL OR e.created_at < p_until)
                   AND NOT (e.thread_id = p_thread_id AND e.seq > (SELECT q.window_after FROM q))
                   AND (p_filter IS NULL OR EXISTS (
                           SELECT 1 FROM pymem.messages AS m
                            WHERE m.project_id = p_project_id AND m.user_id = p_user_id
                              AND m.thread_id = e.thread_id AND m.seq = e.seq AND m.metadata @> p_filter))
                OFFSET 0) AS s
         WHERE pymem._vector_match(s.similarity)  -- the floor: no term to share, so a vector match or nothing
         ORDER BY base DESC, s.created_at DESC, s.thread_id, s.seq DESC
         LIMIT p_limit),
    stale AS MATERIALIZED (  -- vectors stored before 0017: their messages' lexemes by primary key (with terms only)
        SELECT b.thread_id, b.seq, b.created_at, b.similarity, b.ok, b.base, l.tokens,
               CASE WHEN l.lexemes @@ (SELECT q.any_term FROM q) THEN l.lexemes END AS lexemes
          FROM base AS b
          JOIN pymem.message_lexemes AS l
            ON l.project_id = p_project_id AND l.user_id = p_user_id AND l.thread_id = b.thread_id AND l.seq = b.seq
         WHERE b.stale AND (SELECT q.any_term FROM q) IS NOT NULL),
    hits AS MATERIALIZED (  -- the rows sharing a term with the text
        SELECT b.thread_id, b.seq, b.created_at, b.similarity, b.ok, b.base, b.tokens, b.lexemes
          FROM base AS b WHERE b.lexemes IS NOT NULL
        UNION ALL
        SELECT s.thread_id, s.seq, s.created_at, s.similarity, s.ok, s.base, s.tokens, s.lexemes
          FROM stale AS s WHERE s.lexemes IS NOT NULL),
    qs AS MATERIALIZED (  -- BM25's statistics over the rows read: average length, each term's idf (with terms only)
        SELECT q.each_term, GREATEST(coalesce((n.tokens + o.tokens) / NULLIF(n.known + o.known, 0), 1), 1) AS avgdl,
               ARRAY(SELECT pg_catalog.ln(1 + (n.docs - coalesce(d.df, 0) + 0.5) / (coalesce(d.df, 0) + 0.5))
                       FROM pg_catalog.generate_subscripts(q.each_term, 1) AS t(i)
                       LEFT JOIN (SELECT t2.i, pg_catalog.count(*)::float8 AS df
                                    FROM hits AS h CROSS JOIN pg_catalog.generate_subscripts(q.each_term, 1) AS t2(i)
                                   WHERE h.lexemes @@ q.each_term[t2.i]
                                   GROUP BY t2.i) AS d ON d.i = t.i
                      ORDER BY t.i) AS idf
          FROM q
         CROSS JOIN (SELECT pg_catalog.count(*)::float8 AS docs, coalesce(pg_catalog.sum(b.tokens), 0)::float8 AS tokens,
                            pg_catalog.count(b.tokens)::float8 AS known FROM base AS b) AS n
         CROSS JOIN (SELECT coalesce(pg_catalog.sum(s.tokens), 0)::float8 AS tokens, pg_catalog.count(s.tokens)::float8 AS known
                       FROM stale AS s) AS o
         WHERE q.any_term IS NOT NULL),
    lex AS MATERIALIZED (  -- the eligible rows sharing a term, with BM25 (k1 1.2, b 0.75, a term counted once per message)
        SELECT h.thread_id, h.seq, h.created_at, h.similarity, h.base,
               (SELECT pg_catalog.sum(s.idf[t.i]) FROM pg_catalog.generate_subscripts(s.each_term, 1) AS t(i)
                 WHERE h.lexemes @@ s.each_term[t.i])
               * 2.2 / (1 + 1.2 * (0.25 + 0.75 * h.tokens / s.avgdl)) AS bm25
          FROM hits AS h CROSS JOIN qs AS s
         WHERE h.ok),
    cand AS (  -- the k best eligible rows by base, and the eligible rows sharing a term
        (SELECT b.thread_id, b.seq, b.created_at, b.similarity, b.base, NULL::float8 AS bm25
           FROM base AS b
          WHERE b.ok AND p_query IS NOT NULL AND pymem._vector_match(b.similarity)  -- the floor (rows sharing a term follow)
          ORDER BY b.base DESC, b.created_at DESC, b.thread_id, b.seq DESC
          LIMIT p_limit)
        UNION ALL
        SELECT l.thread_id, l.seq, l.created_at, l.similarity, l.base, l.bm25 FROM lex AS l
        UNION ALL
        SELECT t.thread_id, t.seq, t.created_at, t.similarity, t.base, NULL FROM top AS t),
    scored AS (  -- a row in both sets once, with its bonus
        SELECT c.thread_id, c.seq, pg_catalog.max(c.created_at) AS created_at, pg_catalog.max(c.similarity) AS similarity,
               pg_catalog.max(c.base) + (SELECT q.wl FROM q)
                   * coalesce(pg_catalog.max(c.bm25) / NULLIF((SELECT pg_catalog.max(l.bm25) FROM lex AS l), 0), 0) AS score
          FROM cand AS c
         GROUP BY c.thread_id, c.seq)
    SELECT r.thread_id, r.seq, r.similarity, r.score FROM scored AS r
     WHERE p_min_score IS NULL OR r.score >= p_min_score
     ORDER BY r.score DESC, r.created_at DESC, r.thread_id, r.seq DESC
     LIMIT p_limit;
$$;

-- _recall: the ranking messages_recall and context_read use: _recall_ranked's (the exact scan),
-- or, for a user with a valid per-user recall index (pymem.recall_indexes, recall_index_plan), the
-- same ranking from candidates instead of all of the user's rows. The exact scan when the user has
-- no index, when p_query is NULL or of other dimensions than the index, with a recency or
-- importance weight (such a ranking reaches rows far from the query vector, which the candidates
-- miss: bench/README.md, "Heavy users"), and whenever the candidates leave fewer than p_limit
-- rows (filters, min_score), so that p_limit rows come back whenever p_limit are eligible. The
-- candidates are the user's
-- eligible rows nearest the query vector by the index (IVFFlat, ivfflat.probes =
-- max(min(lists, 10), lists / 40) for this statement, iterative scan on so that the eligibility
-- filters still leave enough): 2 * p_limit of them for a vector alone (the index orders by its
-- own float4 arithmetic on normalized vectors, so rows within ~1e-7 of the k-th distance, common
-- among repeated texts, come out in either order; the exact distance picks among twice as many),
-- max(p_limit, 200) with query terms. Every eligibility condition of _recall_ranked applies to
-- them exactly; they are scored as _recall_ranked scores, except that BM25's statistics (document
-- count, average length, each term's document frequency) are the candidates' and not all of the
-- user's rows'. Approximate: a row the index does not reach, or for hybrid ranking a lexical
-- match outside the candidates, is missed (bench/README.md, "Heavy users", has its recall against
-- the exact ranking).
-- Dynamic SQL: the partial index's predicate matches only literal values of the user, and
-- ivfflat's ORDER BY needs the vector with its dimensions (the type of the column, with typmod).
CREATE OR REPLACE FUNCTION pymem._recall(
    p_project_id text, p_user_id text, p_thread_id text, p_query vector, p_embedder text, p_text text,
    p_limit integer, p_min_chars integer, p_window integer, p_rw double precision, p_iw double precision,
    p_lw double precision, p_half_life double precision, p_min_score double precision,
    p_as_of timestamptz, p_since timestamptz, p_until timestamptz, p_filter jsonb)
RETURNS TABLE (thread_id text, seq bigint, similarity double precision, score double precision)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_index text;
    v_dims integer;
    v_lists integer;
    v_type text;
    v_window_after bigint;
    v_terms tsquery[];
    v_any tsquery;
    v_probes text;
    v_iterative text;
    v_threads text[];
    v_seqs bigint[];
    v_created timestamptz[];
    v_similarities double precision[];
    v_tokens integer[];
    v_lexemes tsvector[];
    v_scores double precision[];
    v_floor_reached boolean;   -- a candidate has no positive cosine (so none farther has)
BEGIN
  <<candidates>>
  BEGIN
    -- recency and importance weights: the exact scan (a recent or important message far from
    -- the query vector is not among the candidates: recall@5 0.56 for a recency weight of 0.2)
    IF p_query IS NULL OR p_limit < 1 OR p_rw <> 0 OR p_iw <> 0 THEN
        EXIT candidates;
    END IF;
    SELECT r.index_name, r.dims, r.lists INTO v_index, v_dims, v_lists
      FROM pymem.recall_indexes AS r
     WHERE r.project_id = p_project_id AND r.user_id = p_user_id AND r.embedder = p_embedder;
    IF v_index IS NULL OR pymem._vector_dims(p_query) <> v_dims OR NOT EXISTS (
           SELECT 1 FROM pg_catalog.pg_index AS i
            WHERE i.indexrelid = pg_catalog.to_regclass('pymem.' || pg_catalog.quote_ident(v_index))
              AND i.indisvalid AND i.indisready) THEN
        EXIT candidates;
    END IF;
    SELECT pg_catalog.format_type(a.atttypid, v_dims) INTO v_type
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid = 'pymem.message_embeddings'::pg_catalog.regclass AND a.attname = 'embedding';
    v_window_after := coalesce((SELECT ts.last_seq FROM pymem.threads AS ts
                                 WHERE ts.project_id = p_project_id AND ts.user_id = p_user_id
                                   AND ts.thread_id = p_thread_id), 0) - p_window;
    IF p_text IS NOT NULL THEN  -- the query's terms, as _recall_ranked computes them
        v_terms := ARRAY(SELECT ('''' || pg_catalog.replace(pg_catalog.replace(x.x, '\', '\\'), '''', '''''') || '''')::tsquery
                           FROM pg_catalog.unnest(pg_catalog.tsvector_to_array(
                                    pymem._lexemes(pymem._text_search_config(p_project_id), p_text))) AS x(x));
        IF pg_catalog.cardinality(v_terms) > 0 THEN
            v_any := pg_catalog.array_to_string(v_terms, ' | ')::tsquery;
        END IF;
    END IF;
    v_probes := pg_catalog.current_setting('ivfflat.probes', true);
    v_iterative := pg_catalog.current_setting('ivfflat.iterative_scan', true);
    PERFORM pg_catalog.set_config('ivfflat.probes', GREATEST(LEAST(v_lists, 10), v_lists / 40)::text, true);
    PERFORM pg_catalog.set_config('ivfflat.iterative_scan', 'relaxed_order', true);
    EXECUTE pg_catalog.format($q$
        SELECT pg_catalog.array_agg(c.thread_id), pg_catalog.array_agg(c.seq), pg_catalog.array_agg(c.created_at),
               pg_catalog.array_agg(c.similarity),
               -- vectors stored before 0017: their message's lexemes (with terms only)
               pg_catalog.array_agg(coalesce(c.tokens, CASE WHEN c.lexemes IS NULL AND $10 THEN (
                   SELECT l.tokens FROM pymem.message_lexemes AS l
                    WHERE l.project_id = %2$L AND l.user_id = %3$L AND l.thread_id = c.thread_id AND l.seq = c.seq) END)),
               pg_catalog.array_agg(coalesce(c.lexemes, CASE WHEN c.lexemes IS NULL AND $10 THEN (
                   SELECT l.lexemes FROM pymem.message_lexemes AS l
                    WHERE l.project_id = %2$L AND l.user_id = %3$L AND l.thread_id = c.thread_id AND l.seq = c.seq) END))
          FROM (SELECT e.thread_id, e.seq, e.created_at, e.tokens, e.lexemes,
                       1 - pymem._cosine_distance(e.embedding::%1$s, $1::%1$s) AS similarity
                  FROM pymem.message_embeddings AS e
                 WHERE e.project_id = %2$L AND e.user_id = %3$L AND e.embedder = %4$L
                   AND ($2::timestamptz IS NULL OR e.created_at <= $2) AND e.chars >= $3
                   AND ($4::timestamptz IS NULL OR e.created_at >= $4) AND ($5::timestamptz IS NULL OR e.created_at < $5)
                   AND NOT (e.thread_id = $6 AND e.seq > $7)
                   AND ($8::jsonb IS NULL OR EXISTS (
                           SELECT 1 FROM pymem.messages AS m
                            WHERE m.project_id = %2$L AND m.user_id = %3$L
                              AND m.thread_id = e.thread_id AND m.seq = e.seq AND m.metadata @> $8))
                 ORDER BY pymem._cosine_distance(e.embedding::%1$s, $1::%1$s)
                 LIMIT $9) AS c$q$,
        v_type, p_project_id, p_user_id, p_embedder)
      INTO v_threads, v_seqs, v_created, v_similarities, v_tokens, v_lexemes
      USING p_query, p_as_of, p_min_chars, p_since, p_until, p_thread_id, v_window_after, p_filter,
            CASE WHEN v_any IS NULL THEN 2 * p_limit ELSE GREATEST(p_limit, 200) END,
            v_any IS NOT NULL;
    v_floor_reached := EXISTS (SELECT 1 FROM pg_catalog.unnest(v_similarities) AS s(s) WHERE NOT pymem._vector_match(s.s));
    PERFORM pg_catalog.set_config('ivfflat.probes', coalesce(v_probes, '1'), true);
    PERFORM pg_catalog.set_config('ivfflat.iterative_scan', coalesce(v_iterative, 'off'), true);
    WITH c AS MATERIALIZED (
        SELECT c.thread_id, c.seq, c.created_at, c.similarity, c.tokens,
               CASE WHEN c.lexemes @@ v_any THEN c.lexemes END AS lexemes
          FROM ROWS FROM (pg_catalog.unnest(v_threads), pg_catalog.unnest(v_seqs), pg_catalog.unnest(v_created),
                          pg_catalog.unnest(v_similarities), pg_catalog.unnest(v_tokens), pg_catalog.unnest(v_lexemes))
               AS c(thread_id, seq, created_at, similarity, tokens, lexemes)),
    st AS (  -- BM25's statistics over the candidates
        SELECT GREATEST(coalesce(pg_catalog.avg(c.tokens), 1), 1)::float8 AS avgdl,
               ARRAY(SELECT pg_catalog.ln(1 + (n.docs - d.df + 0.5) / (d.df + 0.5))
                       FROM pg_catalog.generate_subscripts(v_terms, 1) AS t(i)
                      CROSS JOIN LATERAL (SELECT pg_catalog.count(*)::float8 AS df FROM c AS h
                                           WHERE h.lexemes @@ v_terms[t.i]) AS d
                      ORDER BY t.i) AS idf
          FROM c CROSS JOIN (SELECT pg_catalog.count(*)::float8 AS docs FROM c) AS n
         GROUP BY n.docs),
    lex AS (
        SELECT c.thread_id, c.seq,
               (SELECT pg_catalog.sum(s.idf[t.i]) FROM pg_catalog.generate_subscripts(v_terms, 1) AS t(i)
                 WHERE c.lexemes @@ v_terms[t.i])
               * 2.2 / (1 + 1.2 * (0.25 + 0.75 * c.tokens / s.avgdl)) AS bm25
          FROM c CROSS JOIN st AS s
         WHERE c.lexemes IS NOT NULL),
    scored AS (
        SELECT c.thread_id, c.seq, c.created_at, c.similarity,
               CASE WHEN v_any IS NULL THEN 1 ELSE 1 - p_lw END * c.similarity
               + CASE WHEN v_any IS NULL THEN 0 ELSE p_lw END
                 * coalesce(x.bm25 / NULLIF((SELECT pg_catalog.max(l.bm25) FROM lex AS l), 0), 0) AS score
          FROM c LEFT JOIN lex AS x ON x.thread_id = c.thread_id AND x.seq = c.seq
         WHERE pymem._vector_match(c.similarity) OR x.bm25 IS NOT NULL)  -- the floor: a vector match or a term in common
    SELECT pg_catalog.array_agg(r.thread_id ORDER BY r.o), pg_catalog.array_agg(r.seq ORDER BY r.o),
           pg_catalog.array_agg(r.similarity ORDER BY r.o), pg_catalog.array_agg(r.score ORDER BY r.o)
      INTO v_threads, v_seqs, v_similarities, v_scores
      FROM (SELECT r.thread_id, r.seq, r.similarity, r.score,
                   pg_catalog.row_number() OVER (ORDER BY r.score DESC, r.created_at DESC, r.thread_id, r.seq DESC) AS o
              FROM scored AS r
             WHERE p_min_score IS NULL OR r.score >= p_min_score) AS r
     WHERE r.o <= p_limit;
    -- enough rows; or fewer because the floor left candidates out, and the nearest of those
    -- missing had no positive cosine: no row farther from the query has one either (the exact
    -- scan would find only lexical matches outside the candidates, which are approximate here)
    IF coalesce(pg_catalog.cardinality(v_threads), 0) >= p_limit
       OR (p_min_score IS NULL AND v_floor_reached) THEN
        RETURN QUERY SELECT u.t, u.s, u.sim, u.sc
                       FROM ROWS FROM (pg_catalog.unnest(v_threads), pg_catalog.unnest(v_seqs),
                                       pg_catalog.unnest(v_similarities), pg_catalog.unnest(v_scores)) AS u(t, s, sim, sc);
        RETURN;
    END IF;
  END candidates;
    -- the exact scan (a statement of its own: a Citus worker cannot run a query on a shard that
    -- also calls _recall_ranked, which reads other tables)
    RETURN QUERY
    SELECT r.thread_id, r.seq, r.similarity, r.score
      FROM pymem._recall_ranked(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, p_text, p_limit, p_min_chars,
                                p_window, p_rw, p_iw, p_lw, p_half_life, p_min_score, p_as_of, p_since, p_until,
                                p_filter) AS r;
END;
$$;

-- recall_index_plan: the statements that bring a project's per-user recall indexes up to date
-- (heavy users; README "Heavy users"), in the order to run them, after recording the plan in
-- pymem.recall_indexes. A user with at least min_messages vectors from one embedder (of at most
-- 2,000 dimensions, IVFFlat's limit) gets a partial IVFFlat index over them, with lists =
-- round(sqrt(vectors)) (at most what this session's maintenance_work_mem lets the build sample); it is rebuilt (DROP, then CREATE) once the user has twice the vectors it
-- was planned for, or when a build left it invalid or missing; a recorded user below min_messages
-- loses it. Each statement is CREATE INDEX CONCURRENTLY or DROP INDEX CONCURRENTLY, which no
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
        IF r.action IN ('drop', 'rebuild') THEN
            DELETE FROM pymem.recall_indexes AS ri
             WHERE ri.project_id = recall_index_plan.project_id AND ri.user_id = r.user_id AND ri.embedder = r.embedder;
            user_id := r.user_id; embedder := r.embedder; vectors := r.vectors; action := 'drop';
            statement := pg_catalog.format('DROP INDEX CONCURRENTLY IF EXISTS pymem.%I', r.old_name);
            RETURN NEXT;
        END IF;
        IF r.action IN ('create', 'rebuild') THEN
            INSERT INTO pymem.recall_indexes (project_id, user_id, embedder, index_name, dims, lists, vectors)
            VALUES (recall_index_plan.project_id, r.user_id, r.embedder, r.index_name, r.dims, r.lists, r.vectors);
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
END;
$$;

-- messages_recall: a user's past messages most relevant to a query: its vector (`query`, from
-- `embedder`), its text (`query_text`), or both (the default of Memory.recall: hybrid ranking);
-- scored by relevance, recency and importance (see _recall_ranked); the top k of those scoring at
-- least min_score (NULL: no threshold), with their metadata. as_of (default now) recalls as of a
-- past time: nothing newer is eligible and recency is measured from it; since / until keep the
-- messages created in [since, until); metadata keeps those whose metadata contains it (jsonb @>).
--   SELECT role, content, round(score::numeric, 3) FROM pymem.messages_recall(
--       user_id => 'alice', query_text => 'Where do I live?', k => 5);
CREATE OR REPLACE FUNCTION pymem.messages_recall(
    user_id text,
    query vector DEFAULT NULL,
    embedder text DEFAULT NULL,
    project_id text DEFAULT '',
    thread_id text DEFAULT 'default',
    k integer DEFAULT 5,
    min_content_chars integer DEFAULT 10,
    window_size integer DEFAULT 20,
    recency_weight double precision DEFAULT 0,
    importance_weight double precision DEFAULT 0,
    half_life_seconds double precision DEFAULT 3600,
    min_score double precision DEFAULT NULL,
    query_text text DEFAULT NULL,
    lexical_weight double precision DEFAULT 0.4,
    as_of timestamptz DEFAULT NULL,
    since timestamptz DEFAULT NULL,
    until timestamptz DEFAULT NULL,
    metadata jsonb DEFAULT NULL)
RETURNS SETOF pymem.recalled_message
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_threads text[];
    v_seqs bigint[];
    v_similarities double precision[];
    v_scores double precision[];
    v_i integer;
BEGIN
    PERFORM pymem._tenant_enter(messages_recall.project_id);
    PERFORM pymem._recall_check(messages_recall.k, messages_recall.min_content_chars, messages_recall.recency_weight,
                                messages_recall.importance_weight, messages_recall.half_life_seconds,
                                messages_recall.min_score, messages_recall.lexical_weight, messages_recall.as_of,
                                messages_recall.since, messages_recall.until);
    PERFORM pymem._check_limit('window_size', messages_recall.window_size);
    IF messages_recall.metadata IS NOT NULL AND pg_catalog.jsonb_typeof(messages_recall.metadata) <> 'object' THEN
        RAISE EXCEPTION 'pymem: a metadata filter must be a JSON object, not %', pg_catalog.jsonb_typeof(messages_recall.metadata)
            USING ERRCODE = '22023';
    END IF;
    IF messages_recall.query IS NULL AND messages_recall.query_text IS NULL THEN
        RAISE EXCEPTION 'pymem: recall needs a query: its vector (query), its text (query_text) or both'
            USING ERRCODE = '22023';
    END IF;
    IF NOT pymem._conv_check(messages_recall.project_id, messages_recall.user_id, messages_recall.thread_id, 'match') THEN
        RETURN;
    END IF;
    IF messages_recall.query IS NOT NULL THEN
        PERFORM pymem._query_check(messages_recall.project_id, messages_recall.embedder, messages_recall.query);
    END IF;
    -- two statements: the ranking alone (_recall: a recall index's candidates or the exact scan),
    -- then each winner by primary key (a Citus worker cannot run a query on a shard that also
    -- calls _recall_ranked, which reads other tables)
    SELECT pg_catalog.array_agg(r.thread_id ORDER BY r.ordinality), pg_catalog.array_agg(r.seq ORDER BY r.ordinality),
           pg_catalog.array_agg(r.similarity ORDER BY r.ordinality), pg_catalog.array_agg(r.score ORDER BY r.ordinality)
      INTO v_threads, v_seqs, v_similarities, v_scores
      FROM pymem._recall(messages_recall.project_id, messages_recall.user_id, messages_recall.thread_id,
                         messages_recall.query, messages_recall.embedder, messages_recall.query_text,
                         messages_recall.k, messages_recall.min_content_chars, messages_recall.window_size,
                         messages_recall.recency_weight, messages_recall.importance_weight,
                         messages_recall.lexical_weight, messages_recall.half_life_seconds,
                         messages_recall.min_score, messages_recall.as_of, messages_recall.since,
                         messages_recall.until, messages_recall.metadata) WITH ORDINALITY AS r;
    FOR v_i IN 1 .. coalesce(pg_catalog.cardinality(v_threads), 0) LOOP
        RETURN QUERY
        SELECT m.thread_id, m.seq, m.role, m.content, m.created_at, m.importance, v_similarities[v_i], v_scores[v_i],
               m.metadata
          FROM pymem.messages AS m
         WHERE m.project_id = messages_recall.project_id AND m.user_id = messages_recall.user_id
           AND m.thread_id = v_threads[v_i] AND m.seq = v_seqs[v_i];
    END LOOP;
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
