-- 0042_change_feed: the change feed (api/changes.sql, pymem/changes.py). Every write to facts,
-- messages, a thread's summary, store entries and erasure receipts appends to pymem.changes, in
-- the writing transaction (statement triggers: one row per statement and subject, so a bulk write
-- or a forget of 100,000 messages costs one row, not 100,000). A row names what changed by key
-- (ids, seqs, paths), never by content.
--
-- position: the order readers see, assigned when the row is published, not when it is written.
-- An identity or a sequence hands out numbers in the order transactions start writing, not the
-- order they commit: a reader that went past number 11 while the transaction holding number 10
-- was still open would never see 10. So a row is published (given the next position of its
-- project, in pymem.change_positions) only once every transaction that could still commit
-- before it has ended: rows whose writing transaction (xid) is older than the oldest one still
-- running, in (xid, id) order. changes_since publishes, then reads by position: catch-up after a
-- disconnect, from the last position seen, loses nothing and repeats nothing.
--
-- The feed is off until an administrator turns it on (pymem.change_feed_configure): its triggers
-- are created disabled, because every write pays for them (turn_record and fact_add 1.15-1.35x:
-- bench/changes.py), and a database whose services do not read a feed should not.
--
-- Each row carries project_id and subject (a user id, 'scope:scope_id' for facts, or a store key),
-- the tenant and the key it would be distributed by. Applied once under the migration lock.
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

-- readers: by position; the publisher: the rows not published yet, oldest transaction first
CREATE UNIQUE INDEX changes_position ON pymem.changes (project_id, position) WHERE position IS NOT NULL;
CREATE INDEX changes_unpublished ON pymem.changes (project_id, xid, id) WHERE position IS NULL;
-- an erasure deletes the user's rows
CREATE INDEX changes_subject ON pymem.changes (project_id, subject);

CREATE TABLE pymem.change_positions (
    project_id text   NOT NULL,
    position   bigint NOT NULL DEFAULT 0,
    CONSTRAINT change_positions_pkey PRIMARY KEY (project_id)
);

COMMENT ON TABLE pymem.change_positions IS 'Per project: the last position published in the change feed';

ALTER TABLE pymem.changes ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.changes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.changes
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
ALTER TABLE pymem.change_positions ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.change_positions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.change_positions
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

-- Created here for the triggers below; api/changes.sql redefines it on every migrate.
CREATE FUNCTION pymem._changes_log()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN NULL;
END;
$$;

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
-- a summary written (summary_commit sets it; a claim sets other columns): a row trigger, since a
-- trigger with a column list cannot have a transition table, and summaries are rare
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
