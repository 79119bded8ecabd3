-- 0040_message_retention: a project's retention policy for messages, which pymem.purge
-- (api/lifecycle.sql) applies in bounded batches: messages older than messages_max_age, and
-- the messages of a thread beyond its newest messages_max_per_thread. Set by
-- pymem.retention_configure (administrators), read by pymem.retention_policy. No row: every
-- message is kept, as before. A message out of retention stays readable until a purge deletes
-- it (retention bounds what is stored; run purge every minute).
--
-- threads.retained_from: no message of the thread has a lower seq (1 until a purge deletes the
-- thread's oldest ones; a constant default changes only the catalog). The purge finds the
-- threads over their cap by last_seq - retained_from + 1 without reading their messages.
-- The age policy reads the messages of a project oldest first, through an index this migration
-- does not build: messages_created (project_id, created_at) costs every message write an index
-- entry (turn_record without vectors: 1.05-1.08x, bench/retention.py), so only a project that
-- sets an age gets it: retention_configure refuses an age without it (55000), and
-- pymem.lifecycle.configure_retention / `pymem retention --max-age` build it first with CREATE
-- INDEX CONCURRENTLY (writes go on meanwhile). Applied once under the migration lock.
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

ALTER TABLE pymem.retention ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.retention FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.retention
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.threads ADD COLUMN retained_from bigint NOT NULL DEFAULT 1;
COMMENT ON COLUMN pymem.threads.retained_from IS 'No message of the thread has a lower seq (purge moves it on)';
