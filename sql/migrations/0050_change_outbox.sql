-- 0050_change_outbox: the change feed on a Citus cluster (issue 57, item 4; docs/scaling-out.md
-- "The change feed on a cluster"). There the writes run on the workers (delegated calls), where
-- the feed's triggers fire on the shards: they cannot reach the coordinator's pymem.changes nor
-- its position counter in the writing transaction. So on a cluster they append to this outbox,
-- distributed by shard_key (the user id, scope id or store key of the shard that was written,
-- colocated with it: the trigger writes the local shard), and pymem.changes_since on the
-- coordinator moves the project's committed rows into pymem.changes, giving them the project's
-- next positions under the lock of its row of change_positions (api/changes.sql, _changes_claim):
-- each row is moved exactly once (a DELETE claims it), and a position is given only once its
-- row is committed, so no later position can appear below one a reader has seen. On plain
-- PostgreSQL the triggers write pymem.changes directly and this table stays empty. The same
-- columns as pymem.changes but position and xid (no content: keys only). Applied once under the
-- migration lock.
CREATE TABLE pymem.change_outbox (
    project_id text        NOT NULL,
    shard_key  text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    kind       text        NOT NULL,
    op         text        NOT NULL,
    subject    text        NOT NULL,
    keys       jsonb       NOT NULL,
    rows       integer     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT change_outbox_pkey PRIMARY KEY (shard_key, project_id, id)
);

COMMENT ON TABLE pymem.change_outbox IS 'The change feed''s rows written on Citus workers, until changes_since publishes them (empty off Citus)';

CREATE INDEX change_outbox_project ON pymem.change_outbox (project_id, id);

ALTER TABLE pymem.change_outbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.change_outbox FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.change_outbox
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

-- A Citus coordinator migrated by a development build of 0.2.0 had the feed's triggers dropped
-- (citus.sql did, before this migration): they come back as 0007_v0_2_0_operations creates them,
-- disabled. Everywhere else they are all there and nothing happens.
DO $$
DECLARE
    r record;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension AS e WHERE e.extname = 'citus') THEN
        PERFORM pg_catalog.set_config('citus.enable_unsafe_triggers', 'on', true);
    END IF;
    FOR r IN SELECT v.t, v.n, v.ev, v.tt FROM (VALUES
                 ('facts', 'facts_changes_add', 'INSERT', 'NEW'), ('facts', 'facts_changes_update', 'UPDATE', 'NEW'),
                 ('facts', 'facts_changes_delete', 'DELETE', 'OLD'), ('messages', 'messages_changes_add', 'INSERT', 'NEW'),
                 ('messages', 'messages_changes_delete', 'DELETE', 'OLD'),
                 ('store_entries', 'store_entries_changes_add', 'INSERT', 'NEW'),
                 ('store_entries', 'store_entries_changes_update', 'UPDATE', 'NEW'),
                 ('store_entries', 'store_entries_changes_delete', 'DELETE', 'OLD'),
                 ('erasures', 'erasures_changes_add', 'INSERT', 'NEW'), ('threads', 'threads_changes_summary', NULL, NULL))
               AS v(t, n, ev, tt)
              WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS g WHERE g.tgname = v.n
                                   AND g.tgrelid = pg_catalog.to_regclass('pymem.' || v.t)) LOOP
        IF r.ev IS NULL THEN
            CREATE TRIGGER threads_changes_summary AFTER UPDATE OF summary ON pymem.threads
                FOR EACH ROW WHEN (OLD.summary IS DISTINCT FROM NEW.summary) EXECUTE FUNCTION pymem._changes_log();
        ELSE
            EXECUTE pg_catalog.format('CREATE TRIGGER %I AFTER %s ON pymem.%I REFERENCING %s TABLE AS changed '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log()', r.n, r.ev, r.t, r.tt);
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE pymem.%I DISABLE TRIGGER %I', r.t, r.n);
    END LOOP;
END;
$$;
