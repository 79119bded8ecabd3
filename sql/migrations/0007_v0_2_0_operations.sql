-- 0007_v0_2_0_operations: the second half of what the schema of 0.2.0 adds to 0.1.0's (the first:
-- 0006_v0_2_0_memory, whose head says how the development migrations 0006-0049 became these two).
-- Applied once under the migration lock (search_path pg_catalog, pymem, pg_temp): lifecycle
-- (expiry of store entries, erasure receipts, retention), deferred learning, the change feed,
-- MCP tokens, bounded JSON, and the row-level security of every table the two create.
-- 1. Lifecycle: keyed-store entries expire (expires_at; ttl, the ttl an entry was written with,
--     by which store_items_refresh moves its expiry on), erasure receipts, message retention.
ALTER TABLE pymem.store_entries ADD COLUMN expires_at timestamptz;
COMMENT ON COLUMN pymem.store_entries.expires_at IS
    'When the entry stops being visible; NULL: never. pymem.purge deletes it after';
ALTER TABLE pymem.store_entries ADD COLUMN ttl interval;
COMMENT ON COLUMN pymem.store_entries.ttl IS
    'The ttl the entry was written with (NULL: none), by which store_items_refresh moves expires_at on';
CREATE INDEX store_entries_expiring ON pymem.store_entries (project_id, expires_at) WHERE expires_at IS NOT NULL;

-- the receipt of a user erasure (pymem.user_forget, api/erasure.sql): when, by which login
-- role, how many rows of each kind, and a digest of what was deleted; no content, no user id (the
-- user is named by sha256(salt || [project_id, user_id]) with a random salt of its own). Readable
-- by the owner role only.
CREATE TABLE pymem.erasures (
    project_id text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    subject    text        NOT NULL,
    salt       text        NOT NULL,
    erased_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    erased_by  text        NOT NULL,
    counts     jsonb       NOT NULL,
    digest     text        NOT NULL,
    CONSTRAINT erasures_pkey PRIMARY KEY (project_id, id),
    CONSTRAINT erasures_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT erasures_subject_check CHECK (subject ~ '^[0-9a-f]{64}$'),
    CONSTRAINT erasures_digest_check CHECK (digest ~ '^[0-9a-f]{64}$'),
    CONSTRAINT erasures_counts_check CHECK (pg_catalog.jsonb_typeof(counts) = 'object')
);
COMMENT ON TABLE pymem.erasures IS
    'Receipts of user erasures (user_forget): when, by whom, counts per kind, a digest; no content, no user id';

-- a project's retention policy, applied by pymem.purge. The age policy reads a project's messages
-- oldest first through messages_created (project_id, created_at), which is not built here: only
-- a project that sets an age pays for it (retention_configure refuses an age without it, 55000;
-- `pymem retention --max-age` builds it CONCURRENTLY). threads.retained_from: no message of the
-- thread has a lower seq (purge moves it on).
CREATE TABLE pymem.retention (
    project_id              text        NOT NULL,
    messages_max_age        interval,
    messages_max_per_thread integer,
    updated_at              timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT retention_pkey PRIMARY KEY (project_id),
    CONSTRAINT retention_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT retention_max_age_check CHECK (messages_max_age > interval '0'),
    CONSTRAINT retention_max_per_thread_check CHECK (messages_max_per_thread > 0)
);
COMMENT ON TABLE pymem.retention IS 'Per project: how long messages are kept (purge deletes the rest)';
ALTER TABLE pymem.threads ADD COLUMN retained_from bigint NOT NULL DEFAULT 1;
COMMENT ON COLUMN pymem.threads.retained_from IS 'No message of the thread has a lower seq (purge moves it on)';

-- 2. Deferred learning (api/learning.sql, docs/learning.md): a job per turn still to learn from,
--     by key (never content), deleted when done; state pending / running (leased) / dead / skipped
--     (a cost cap); per user only the oldest open job is claimable. Usage per project, UTC day and
--     user; a project's daily caps. threads.learning_backfilled_through: the thread's messages up
--     to this seq were looked at by pymem.learning_backfill and are never queued by one again.
CREATE TABLE pymem.learning_jobs (
    project_id   text        NOT NULL,
    user_id      text        NOT NULL,
    id           bigint      GENERATED ALWAYS AS IDENTITY,
    thread_id    text        NOT NULL,
    seq          bigint      NOT NULL,
    state        text        NOT NULL DEFAULT 'pending',
    attempts     integer     NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    leased_until timestamptz,
    lease_token  uuid,
    error_kind   text,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT learning_jobs_pkey PRIMARY KEY (project_id, user_id, id),
    CONSTRAINT learning_jobs_thread_fkey FOREIGN KEY (project_id, user_id, thread_id)
        REFERENCES pymem.threads (project_id, user_id, thread_id) ON DELETE CASCADE,
    CONSTRAINT learning_jobs_state_check CHECK (state IN ('pending', 'running', 'dead', 'skipped')),
    CONSTRAINT learning_jobs_lease_check CHECK ((state = 'running') = (lease_token IS NOT NULL)
                                                AND (lease_token IS NULL) = (leased_until IS NULL)),
    CONSTRAINT learning_jobs_attempts_check CHECK (attempts >= 0),
    CONSTRAINT learning_jobs_error_check CHECK (pg_catalog.length(error) <= 1000 AND pg_catalog.length(error_kind) <= 100)
);
COMMENT ON TABLE pymem.learning_jobs IS
    'Deferred learning: one row per recorded turn still to learn from (by key, no content); deleted when done';
-- the claim reads open jobs only, which a drained queue has none of; the thread's, for the cascade
CREATE INDEX learning_jobs_open ON pymem.learning_jobs (project_id, id) WHERE state IN ('pending', 'running');
CREATE INDEX learning_jobs_user_open ON pymem.learning_jobs (project_id, user_id, id)
    WHERE state IN ('pending', 'running');
CREATE INDEX learning_jobs_thread ON pymem.learning_jobs (project_id, user_id, thread_id);

CREATE TABLE pymem.learning_usage (
    project_id text    NOT NULL,
    day        date    NOT NULL,
    user_id    text    NOT NULL,
    calls      bigint  NOT NULL DEFAULT 0,
    tokens     bigint  NOT NULL DEFAULT 0,
    skipped    bigint  NOT NULL DEFAULT 0,
    CONSTRAINT learning_usage_pkey PRIMARY KEY (project_id, day, user_id),
    CONSTRAINT learning_usage_counts_check CHECK (calls >= 0 AND tokens >= 0 AND skipped >= 0)
);
COMMENT ON TABLE pymem.learning_usage IS 'Model calls and tokens spent by learning, per project, UTC day and user';

CREATE TABLE pymem.learning_limits (
    project_id             text        NOT NULL,
    user_calls_per_day     integer,
    project_calls_per_day  integer,
    user_tokens_per_day    bigint,
    project_tokens_per_day bigint,
    updated_at             timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT learning_limits_pkey PRIMARY KEY (project_id),
    CONSTRAINT learning_limits_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT learning_limits_check CHECK (user_calls_per_day >= 0 AND project_calls_per_day >= 0
                                            AND user_tokens_per_day >= 0 AND project_tokens_per_day >= 0)
);
COMMENT ON TABLE pymem.learning_limits IS 'Per project: the most model calls and tokens learning may spend per UTC day';
ALTER TABLE pymem.threads ADD COLUMN learning_backfilled_through bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN pymem.threads.learning_backfilled_through IS
    'The thread''s messages up to this seq were looked at by a learning backfill (pymem.learning_backfill): never queued by one again';

-- 3. The change feed (api/changes.sql, pymem/changes.py). Every write to facts, messages, a
--    thread's summary, store entries and erasure receipts appends to pymem.changes in the writing
--    transaction (statement triggers: one row per statement and subject), naming what changed by
--    key, never by content. A row's position is given at its transaction's commit, by the
--    deferred constraint trigger changes_position under the lock of the project's row of
--    change_positions, so positions follow the commit order of a project's writers: a reader that
--    catches up from the last position it saw loses nothing and repeats nothing. The feed is off
--    until an administrator turns it on (pymem.change_feed_configure): its triggers are created
--    disabled, since every write pays for them. Each project's notification channel is a random
--    name (change_channels), handed out by pymem.change_channel to the roles that may serve the
--    project, so no other login can LISTEN to it.
CREATE TABLE pymem.changes (
    project_id text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    xid        xid8        NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
    position   bigint,
    kind       text        NOT NULL,
    op         text        NOT NULL,
    subject    text        NOT NULL,
    keys       jsonb       NOT NULL,
    rows       integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT changes_pkey PRIMARY KEY (project_id, id),
    CONSTRAINT changes_kind_check CHECK (kind IN ('fact', 'message', 'summary', 'store_entry', 'erasure')),
    CONSTRAINT changes_op_check CHECK (op IN ('add', 'update', 'delete'))
);
COMMENT ON TABLE pymem.changes IS 'The change feed: what each write changed, by key (no content); position set when published';
-- readers: by position; the rows not published yet, oldest transaction first; an erasure's
CREATE UNIQUE INDEX changes_position ON pymem.changes (project_id, position) WHERE position IS NOT NULL;
CREATE INDEX changes_unpublished ON pymem.changes (project_id, xid, id) WHERE position IS NULL;
CREATE INDEX changes_subject ON pymem.changes (project_id, subject);

CREATE TABLE pymem.change_positions (
    project_id text   NOT NULL,
    position   bigint NOT NULL DEFAULT 0,
    CONSTRAINT change_positions_pkey PRIMARY KEY (project_id)
);
COMMENT ON TABLE pymem.change_positions IS 'Per project: the last position published in the change feed';

CREATE TABLE pymem.change_channels (
    project_id text        NOT NULL,
    channel    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT change_channels_pkey PRIMARY KEY (project_id),
    CONSTRAINT change_channels_channel_key UNIQUE (channel),
    CONSTRAINT change_channels_channel_check CHECK (channel ~ '^pymem_changes_[0-9a-f]{32}$')
);
COMMENT ON TABLE pymem.change_channels IS 'Per project: the random name of its change feed''s notification channel';

-- the triggers' functions, created here for them; api/changes.sql holds their bodies
CREATE FUNCTION pymem._changes_log()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN NULL;
END;
$$;

CREATE FUNCTION pymem._changes_position()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER changes_position AFTER INSERT ON pymem.changes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION pymem._changes_position();

CREATE TRIGGER facts_changes_add AFTER INSERT ON pymem.facts
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
CREATE TRIGGER facts_changes_update AFTER UPDATE ON pymem.facts
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
CREATE TRIGGER facts_changes_delete AFTER DELETE ON pymem.facts
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
CREATE TRIGGER messages_changes_add AFTER INSERT ON pymem.messages
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
CREATE TRIGGER messages_changes_delete AFTER DELETE ON pymem.messages
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
CREATE TRIGGER store_entries_changes_add AFTER INSERT ON pymem.store_entries
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
CREATE TRIGGER store_entries_changes_update AFTER UPDATE ON pymem.store_entries
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
CREATE TRIGGER store_entries_changes_delete AFTER DELETE ON pymem.store_entries
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
CREATE TRIGGER erasures_changes_add AFTER INSERT ON pymem.erasures
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log();
-- a summary written: a row trigger (a trigger with a column list cannot have a transition table)
CREATE TRIGGER threads_changes_summary AFTER UPDATE OF summary ON pymem.threads
    FOR EACH ROW WHEN (OLD.summary IS DISTINCT FROM NEW.summary) EXECUTE FUNCTION pymem._changes_log();

ALTER TABLE pymem.facts DISABLE TRIGGER facts_changes_add;
ALTER TABLE pymem.facts DISABLE TRIGGER facts_changes_update;
ALTER TABLE pymem.facts DISABLE TRIGGER facts_changes_delete;
ALTER TABLE pymem.messages DISABLE TRIGGER messages_changes_add;
ALTER TABLE pymem.messages DISABLE TRIGGER messages_changes_delete;
ALTER TABLE pymem.store_entries DISABLE TRIGGER store_entries_changes_add;
ALTER TABLE pymem.store_entries DISABLE TRIGGER store_entries_changes_update;
ALTER TABLE pymem.store_entries DISABLE TRIGGER store_entries_changes_delete;
ALTER TABLE pymem.erasures DISABLE TRIGGER erasures_changes_add;
ALTER TABLE pymem.threads DISABLE TRIGGER threads_changes_summary;

-- 4. The bearer tokens of `pymem mcp --http` (pymem/mcp.py, api/mcp.sql): one user of one project
--    (and optionally one agent) each, only its sha256 stored; revoked_at refuses it at once.
--    Beside the tenant policy, token_lookup shows a row to the statement whose transaction set
--    pymem.mcp_token to its hash: how pymem.mcp_token_lookup finds a token's project before it
--    knows the tenant. Only the owner role may read the table at all.
CREATE TABLE pymem.mcp_tokens (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    project_id  text        NOT NULL,
    user_id     text        NOT NULL,
    agent_id    text,
    token_hash  bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    revoked_at  timestamptz,
    CONSTRAINT mcp_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT mcp_tokens_hash_key UNIQUE (token_hash),
    CONSTRAINT mcp_tokens_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT mcp_tokens_user_id_check CHECK (user_id <> '*' AND user_id <> '' AND pg_catalog.length(user_id) <= 256),
    CONSTRAINT mcp_tokens_agent_id_check CHECK (agent_id <> '*' AND agent_id <> '' AND pg_catalog.length(agent_id) <= 256),
    CONSTRAINT mcp_tokens_hash_check CHECK (pg_catalog.length(token_hash) = 32)
);
COMMENT ON TABLE pymem.mcp_tokens IS 'Bearer tokens of the MCP server (pymem mcp --http): sha256 only, per project and user';
CREATE INDEX mcp_tokens_project ON pymem.mcp_tokens (project_id, id);
CREATE POLICY token_lookup ON pymem.mcp_tokens FOR SELECT
    USING (token_hash = pg_catalog.decode(pg_catalog.current_setting('pymem.mcp_token', true), 'hex'));

-- 5. Bounded JSON: every JSON document pymem stores nests at most 64 levels and, for metadata and
--    transcript messages, is at most 1 MiB as text. A CHECK on each stored JSON column calls
--    pymem._json_bounded (api/00_common.sql holds its body), which raises 22023 naming what was
--    refused, so every write path meets the same bound. NOT VALID: rows stored by 0.1.0 are not
--    scanned (a deep one would stop the upgrade); they are checked again only when updated.
CREATE FUNCTION pymem._json_bounded(doc jsonb, what text, max_bytes integer DEFAULT 1048576)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF doc IS NULL THEN
        RETURN true;
    END IF;
    IF pg_catalog.jsonb_typeof(doc) IN ('object', 'array')
       AND pg_catalog.jsonb_path_exists(doc, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION 'pymem: % nests objects and arrays more than 64 deep', what
            USING ERRCODE = '22023', HINT = 'A stored JSON document nests at most 64 levels (docs/errors.md).';
    END IF;
    IF pg_catalog.octet_length(doc::text) > max_bytes THEN
        RAISE EXCEPTION 'pymem: % is % bytes as JSON text; the limit is %', what, pg_catalog.octet_length(doc::text), max_bytes
            USING ERRCODE = '22023';
    END IF;
    RETURN true;
END;
$$;

ALTER TABLE pymem.facts ADD CONSTRAINT facts_metadata_bounded
    CHECK (pymem._json_bounded(metadata, 'a fact''s metadata')) NOT VALID;
ALTER TABLE pymem.messages ADD CONSTRAINT messages_metadata_bounded
    CHECK (pymem._json_bounded(metadata, 'a message''s metadata')) NOT VALID;
ALTER TABLE pymem.store_messages ADD CONSTRAINT store_messages_message_bounded
    CHECK (pymem._json_bounded(message, 'a transcript message')) NOT VALID;

-- 6. Row-level security, forced, with the tenant policy of every pymem table.
DO $$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['erasures', 'retention', 'learning_jobs', 'learning_usage', 'learning_limits', 'changes',
                                   'change_positions', 'change_channels', 'mcp_tokens'] LOOP
        EXECUTE pg_catalog.format('ALTER TABLE pymem.%I ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE pg_catalog.format('ALTER TABLE pymem.%I FORCE ROW LEVEL SECURITY', v_table);
        EXECUTE pg_catalog.format('CREATE POLICY tenant ON pymem.%I USING (project_id = (SELECT pymem.current_tenant())) '
                                  'WITH CHECK (project_id = (SELECT pymem.current_tenant()))', v_table);
    END LOOP;
END;
$$;
