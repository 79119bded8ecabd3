-- 0029_recall_indexes: the registry of per-user recall indexes (heavy users). Applied once under
-- the migration lock.
--
-- A user with many vectors from one embedder (pymem.recall_index_plan's min_messages, default
-- 50,000) gets a partial IVFFlat index over those vectors only (WHERE project_id = ... AND
-- user_id = ... AND embedder = ...). Such an index is built with CREATE INDEX CONCURRENTLY, which
-- no function can run: recall_index_plan records the user here and returns the statement, which
-- `pymem recall-indexes` (or psql's \gexec) runs. Recall (messages_recall, context_read) uses the
-- index of a user recorded here once PostgreSQL has marked it valid; until then, or without a
-- row here, the exact scan. index_name is derived from the key (recall_index_plan); lists and
-- dims are the index's; vectors is the user's count when it was planned (a rebuild is planned
-- when the user has twice as many).
CREATE TABLE pymem.recall_indexes (
    project_id text        NOT NULL,
    user_id    text        NOT NULL,
    embedder   text        NOT NULL,
    index_name text        NOT NULL,
    dims       integer     NOT NULL CHECK (dims BETWEEN 1 AND 2000),
    lists      integer     NOT NULL CHECK (lists BETWEEN 1 AND 32768),
    vectors    bigint      NOT NULL,
    planned_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT recall_indexes_pkey PRIMARY KEY (project_id, user_id, embedder)
);

COMMENT ON TABLE pymem.recall_indexes IS 'Per-user IVFFlat indexes of heavy users'' message vectors (recall_index_plan)';

ALTER TABLE pymem.recall_indexes ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.recall_indexes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.recall_indexes
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
