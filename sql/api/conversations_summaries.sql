-- conversations_summaries.sql: running summaries of a thread (part of conversation memory,
-- conversations.sql; tables in migrations/0003_conversations.sql). A summary is folded under a
-- lease on the thread row: summary_claim (or turn_record) hands the due span to one caller,
-- summary_commit accepts only that caller's token, summary_release gives the lease back;
-- summary_read returns the summary. Re-applied on every migrate; called by
-- pymem/conversations.py and by any SQL client (docs/sql.md "Conversations").
--
-- Errors: 22023 invalid argument. (A summary_commit whose claim is no longer held returns
-- false and writes nothing.)

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
           claim_until = pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => summary_claim.lease_seconds),
           claim_through = t.last_seq - summary_claim.keep_last
     WHERE t.project_id = summary_claim.project_id AND t.user_id = summary_claim.user_id
       AND t.thread_id = summary_claim.thread_id
       AND t.last_seq - summary_claim.keep_last - t.summary_through >= summary_claim.summarize_every
       AND (t.claim_until IS NULL OR t.claim_until < pg_catalog.clock_timestamp())
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
           summary_at = pg_catalog.clock_timestamp(),
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
