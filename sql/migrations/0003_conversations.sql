-- 0003_conversations: per-user conversation threads, their messages, running summaries and
-- message vectors for recall. Applied once under the migration lock; functions live in
-- api/conversations.sql and api/context.sql.
--
-- Every key starts with (project_id, user_id): the distribution key if these tables move to
-- hash partitions or Citus.

-- One row per (project, user, thread): the next message number, and the running summary with
-- what it covers (messages seq <= summary_through) and who is folding the next span (a lease).
CREATE TABLE pymem.threads (
    project_id      text        NOT NULL DEFAULT '',
    user_id         text        NOT NULL,
    thread_id       text        NOT NULL DEFAULT 'default',
    last_seq        bigint      NOT NULL DEFAULT 0,
    summary         text,
    summary_through bigint      NOT NULL DEFAULT 0,
    summary_at      timestamptz,
    claim_token     uuid,
    claim_until     timestamptz,
    claim_through   bigint,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT threads_pkey PRIMARY KEY (project_id, user_id, thread_id),
    CONSTRAINT threads_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT threads_user_id_check CHECK (user_id NOT IN ('', '*') AND pg_catalog.length(user_id) <= 256),
    CONSTRAINT threads_thread_id_check CHECK (thread_id NOT IN ('', '*') AND pg_catalog.length(thread_id) <= 256),
    CONSTRAINT threads_summary_check CHECK (summary_through >= 0 AND summary_through <= last_seq),
    CONSTRAINT threads_claim_check CHECK ((claim_token IS NULL) = (claim_until IS NULL)
                                          AND (claim_token IS NULL) = (claim_through IS NULL))
);

COMMENT ON TABLE pymem.threads IS 'Conversation threads per user: message counter and running summary';

-- Messages, append-only, numbered 1, 2, 3, ... within a thread.
CREATE TABLE pymem.messages (
    project_id text             NOT NULL,
    user_id    text             NOT NULL,
    thread_id  text             NOT NULL,
    seq        bigint           NOT NULL,
    role       text             NOT NULL,
    content    text             NOT NULL,
    importance double precision NOT NULL DEFAULT 1.0,
    metadata   jsonb            NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz      NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    -- the embedder whose vector this message last received (NULL: none yet, e.g. written by SQL)
    embedded_by text,
    CONSTRAINT messages_pkey PRIMARY KEY (project_id, user_id, thread_id, seq),
    CONSTRAINT messages_thread_fkey FOREIGN KEY (project_id, user_id, thread_id)
        REFERENCES pymem.threads (project_id, user_id, thread_id) ON DELETE CASCADE,
    CONSTRAINT messages_seq_check CHECK (seq > 0),
    CONSTRAINT messages_role_check CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    CONSTRAINT messages_content_check CHECK (content <> '' AND pg_catalog.length(content) <= 262144),
    CONSTRAINT messages_importance_check CHECK (importance >= 0 AND importance <= 1),
    CONSTRAINT messages_metadata_check CHECK (pg_catalog.jsonb_typeof(metadata) = 'object')
);

-- Catch-up before recall: a user's messages with no vector from the current embedder. In the
-- common case (every message embedded by it) both ranges around it are empty.
CREATE INDEX messages_embedded_by ON pymem.messages (project_id, user_id, embedded_by);

COMMENT ON TABLE pymem.messages IS 'Conversation messages, append-only, per (project, user, thread)';

-- Message vectors for recall, one per message and embedder. Ranking reads only this table
-- (created_at, importance and the content length are copied from the immutable message), so a
-- recall scans one user's vectors through the primary key and joins only the winners.
CREATE TABLE pymem.message_embeddings (
    project_id text             NOT NULL,
    user_id    text             NOT NULL,
    embedder   text             NOT NULL,
    thread_id  text             NOT NULL,
    seq        bigint           NOT NULL,
    chars      integer          NOT NULL,
    importance double precision NOT NULL,
    created_at timestamptz      NOT NULL,
    embedding  vector           NOT NULL,
    CONSTRAINT message_embeddings_pkey PRIMARY KEY (project_id, user_id, embedder, thread_id, seq),
    CONSTRAINT message_embeddings_message_fkey FOREIGN KEY (project_id, user_id, thread_id, seq)
        REFERENCES pymem.messages (project_id, user_id, thread_id, seq) ON DELETE CASCADE
);

-- The FK's cascade (forgetting a thread) finds a message's vectors through this index.
CREATE INDEX message_embeddings_message ON pymem.message_embeddings (project_id, user_id, thread_id, seq);

COMMENT ON TABLE pymem.message_embeddings IS 'Message vectors for recall, one per (message, embedder)';
