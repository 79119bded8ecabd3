-- 0048_feed_and_bounds: issue 58 (security and faults round 4). Applied once under the migration
-- lock.
--
-- 1. Bounded JSON: every JSON document pymem stores nests at most 64 levels and, for metadata and
--    transcript messages, is at most 1 MiB as text (a store's json documents: 8 MiB, checked by
--    _store_put). A CHECK constraint on each stored JSON column calls pymem._json_bounded
--    (api/00_common.sql), which raises 22023 naming what was refused: every write path (the API
--    functions, bulk writes, imports, a direct INSERT) meets the same bound, and the statement
--    that carried the document writes nothing. NOT VALID: rows stored before this migration are
--    not scanned (a deep one would stop the upgrade); they are checked again only when updated.
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

-- 2. The change feed gives positions at commit (api/changes.sql, _changes_position). Until now
--    changes_since published only the rows of transactions older than the oldest transaction
--    still running on the whole server (pg_snapshot_xmin): any session of any role that held a
--    transaction id open (BEGIN; SELECT pg_current_xact_id();) stalled every project's feed. Now
--    a deferred constraint trigger on pymem.changes runs at the writing transaction's commit and
--    gives its rows the project's next positions under the lock of the project's row of
--    change_positions, held until the commit is visible: positions follow the commit order of
--    the project's writers, so nothing else can hold them back, and no later commit can take a
--    position below one a reader has seen. Rows written before this migration and not yet
--    published are published by changes_since as before (the trigger's lock on pymem.changes
--    waits for their writers to end; every row written after it has its position at commit).
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


-- 3. Each project's notification channel is a random name kept here, handed out by
--    pymem.change_channel (api/changes.sql) to the roles that may serve the project: the channel
--    was 'pymem_changes_' || md5(project_id), which any login could compute and LISTEN on
--    (LISTEN checks no privilege) to learn when, how often and what kind of writes a project
--    makes. A project gets its channel the first time one of its roles asks for it; writes
--    notify only a project that has one (no listener has asked before: nobody to wake).
CREATE TABLE pymem.change_channels (
    project_id text        NOT NULL,
    channel    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT change_channels_pkey PRIMARY KEY (project_id),
    CONSTRAINT change_channels_channel_key UNIQUE (channel),
    CONSTRAINT change_channels_channel_check CHECK (channel ~ '^pymem_changes_[0-9a-f]{32}$')
);

COMMENT ON TABLE pymem.change_channels IS 'Per project: the random name of its change feed''s notification channel';

ALTER TABLE pymem.change_channels ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.change_channels FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.change_channels
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
