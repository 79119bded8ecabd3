-- changes.sql: the change feed (tables in migrations/0007_v0_2_0_operations.sql): what every write
-- changed, by key, in the order readers see it. _changes_log is the triggers' function (one row
-- per statement and subject, and a notification); _changes_position gives a transaction's rows
-- their positions at its commit; changes_since returns the rows after a position (and publishes
-- the rows a 0.2.0 development build wrote before positions came at commit, which had none);
-- change_position is the last one
-- published;
-- change_feed_configure turns the feed on or off for the database (off by default: every write
-- pays for it), change_feed_enabled says whether it is on.
-- Re-applied on every migrate; called by pymem/changes.py (pymem.changes.watch, `pymem watch`)
-- and by any SQL client (docs/sql.md "Change feed").
--
-- Errors: 22023 invalid argument; 25001 changes_since inside a transaction that has written;
-- 42501 a project the caller may not serve; 0A000 change_feed_configure where the feed's triggers
-- are missing. On a Citus cluster the triggers write pymem.change_outbox on the workers and
-- changes_since publishes it (_changes_claim; sql/citus.sql, docs/scaling-out.md).

-- _changes_log: the statement triggers of facts, messages, store_entries and erasures (their
-- transition table is `changed`) and the row trigger of a thread's summary. Appends one row per
-- project and subject of the statement: facts by 'scope:scope_id' with their ids; messages by
-- user with the thread and the first and last seq; store entries by store key with their paths;
-- an erasure receipt by its id (the erased user's id never enters the feed: user_forget deletes
-- the user's rows of it); a summary by user with its thread and how far it reaches. Then
-- notifies the project's channel (a random name: change_channel; a project that has none yet has
-- had no listener: nothing is sent) with {"kind": ...}: no id, no content (PostgreSQL delivers it
-- at commit, once per transaction for the same payload).
CREATE OR REPLACE FUNCTION pymem._changes_log()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_op text := CASE TG_OP WHEN 'INSERT' THEN 'add' WHEN 'UPDATE' THEN 'update' ELSE 'delete' END;
    v_kind text;
    v_project text;
    v_channel text;
BEGIN
    IF TG_TABLE_NAME = 'threads' THEN  -- the row trigger: a summary written
        INSERT INTO pymem.changes (project_id, kind, op, subject, keys, rows)
        VALUES (NEW.project_id, 'summary', 'update', NEW.user_id,
                pg_catalog.jsonb_build_object('thread_id', NEW.thread_id, 'through_seq', NEW.summary_through), 1);
        SELECT ch.channel INTO v_channel FROM pymem.change_channels AS ch WHERE ch.project_id = NEW.project_id;
        IF v_channel IS NOT NULL THEN
            PERFORM pg_catalog.pg_notify(v_channel, '{"kind": "summary"}');
        END IF;
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME = 'facts' THEN
        v_kind := 'fact';
        INSERT INTO pymem.changes (project_id, kind, op, subject, keys, rows)
        SELECT c.project_id, v_kind, v_op, c.scope || ':' || c.scope_id,
               pg_catalog.jsonb_build_object('ids', pg_catalog.jsonb_agg(c.id ORDER BY c.id)), pg_catalog.count(*)
          FROM changed AS c GROUP BY c.project_id, c.scope, c.scope_id;
    ELSIF TG_TABLE_NAME = 'messages' THEN
        v_kind := 'message';
        INSERT INTO pymem.changes (project_id, kind, op, subject, keys, rows)
        SELECT c.project_id, v_kind, v_op, c.user_id,
               pg_catalog.jsonb_build_object('thread_id', c.thread_id, 'from_seq', pg_catalog.min(c.seq),
                                             'to_seq', pg_catalog.max(c.seq)), pg_catalog.count(*)
          FROM changed AS c GROUP BY c.project_id, c.user_id, c.thread_id;
    ELSIF TG_TABLE_NAME = 'store_entries' THEN
        v_kind := 'store_entry';
        INSERT INTO pymem.changes (project_id, kind, op, subject, keys, rows)
        SELECT c.project_id, v_kind, v_op, c.store_key,
               pg_catalog.jsonb_build_object('paths', pg_catalog.jsonb_agg(c.path ORDER BY c.path)), pg_catalog.count(*)
          FROM changed AS c GROUP BY c.project_id, c.store_key;
    ELSIF TG_TABLE_NAME = 'erasures' THEN
        v_kind := 'erasure';
        INSERT INTO pymem.changes (project_id, kind, op, subject, keys, rows)
        SELECT c.project_id, v_kind, v_op, '', pg_catalog.jsonb_build_object('ids', pg_catalog.jsonb_agg(c.id ORDER BY c.id)),
               pg_catalog.count(*)
          FROM changed AS c GROUP BY c.project_id;
    ELSE
        RETURN NULL;
    END IF;
    FOR v_channel IN SELECT ch.channel FROM pymem.change_channels AS ch
                      WHERE ch.project_id IN (SELECT DISTINCT c.project_id FROM changed AS c) LOOP
        PERFORM pg_catalog.pg_notify(v_channel, pg_catalog.jsonb_build_object('kind', v_kind)::text);
    END LOOP;
    RETURN NULL;
END;
$$;

-- _changes_position: the deferred constraint trigger of pymem.changes (0007_v0_2_0_operations): it
-- runs at the writing transaction's commit, after its last write, and gives the transaction's
-- rows of the project the project's next positions, in the order they were written, under the
-- lock of the project's row of change_positions. That lock is held until the commit is visible,
-- so the project's next committer waits for it: positions follow the order in which the
-- project's writers commit, only the project's own writers (each for the moment of its commit)
-- wait for one another, and no position below one a reader has seen can still appear. The first
-- of a transaction's row events does the work; the others find nothing left. SECURITY DEFINER: a
-- deferred trigger runs at commit as the session's role, outside the API function that wrote.
-- It names the row's project as the tenant for its own statements (one transaction serves one
-- project) and puts back what was set.
CREATE OR REPLACE FUNCTION pymem._changes_position()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_tenant text := pg_catalog.current_setting('pymem.tenant', true);
    v_set text;
BEGIN
    v_set := pg_catalog.set_config('pymem.tenant', 'p:' || NEW.project_id, true);  -- an assignment: no query
    -- one statement (it was five, ~1/3 of what the feed cost a write: bench/write_costs.py): the
    -- transaction's rows without a position; the counter moved past them by an upsert, which
    -- locks the project's row until the commit is visible (a concurrent committer of the project
    -- waits, then adds to the value it committed); the rows numbered from where it stood. The
    -- rows are this transaction's own, which nobody else can delete before it commits, so their
    -- count is the highest position given (the counter never falls behind one: changes_since).
    -- No row left (a later row event of the transaction): no upsert, no lock.
    WITH todo AS MATERIALIZED (
        SELECT c.id, pg_catalog.row_number() OVER (ORDER BY c.id) AS n
          FROM pymem.changes AS c
         WHERE c.project_id = NEW.project_id AND c.position IS NULL AND c.xid = pg_catalog.pg_current_xact_id()
    ), counter AS (
        INSERT INTO pymem.change_positions AS p (project_id, position)
        SELECT NEW.project_id, pg_catalog.count(*) FROM todo HAVING pg_catalog.count(*) > 0
        ON CONFLICT (project_id) DO UPDATE SET position = p.position + excluded.position
        RETURNING p.position AS high
    )
    UPDATE pymem.changes AS c SET position = k.high - (SELECT pg_catalog.count(*) FROM todo) + t.n
      FROM todo AS t, counter AS k
     WHERE c.project_id = NEW.project_id AND c.id = t.id;
    v_set := pg_catalog.set_config('pymem.tenant', coalesce(v_tenant, ''), true);
    RETURN NULL;
END;
$$;

-- _changes_claim(project_id): publishes the project's rows of pymem.change_outbox
-- (0050_change_outbox), which only the feed's triggers on a Citus cluster's workers write
-- (sql/citus.sql): under the lock of the project's row of change_positions (taken first, as
-- _changes_position and user_forget take it), a DELETE claims the committed rows (a row that a
-- concurrent claimer's commit is still deleting is waited for, then skipped: none is moved
-- twice), and they enter pymem.changes with the project's next positions, in the order they were
-- written (per worker). A position is given only to a committed row, under the lock, so none can
-- appear below one a reader has seen. Off Citus the outbox is empty: one index probe. On Citus
-- the probe is skipped (a read of the shards outside a transaction block would reach the workers
-- without the tenant), and the DELETE opens one on each worker.
CREATE OR REPLACE FUNCTION pymem._changes_claim(p_project_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_last bigint;
    v_max bigint;
    r record;
    v_key text[] := '{}'; v_id bigint[] := '{}'; v_kind text[] := '{}'; v_op text[] := '{}'; v_subject text[] := '{}';
    v_keys jsonb[] := '{}'; v_rows integer[] := '{}'; v_at timestamptz[] := '{}';
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL
       AND NOT EXISTS (SELECT 1 FROM pymem.change_outbox AS o WHERE o.project_id = p_project_id) THEN
        RETURN;
    END IF;
    INSERT INTO pymem.change_positions AS p (project_id) VALUES (p_project_id) ON CONFLICT (project_id) DO NOTHING;
    SELECT p.position INTO v_last FROM pymem.change_positions AS p WHERE p.project_id = p_project_id FOR UPDATE;
    FOR r IN DELETE FROM pymem.change_outbox AS o WHERE o.project_id = p_project_id
             RETURNING o.shard_key, o.id, o.kind, o.op, o.subject, o.keys, o.rows, o.created_at LOOP
        v_key := v_key || r.shard_key; v_id := v_id || r.id; v_kind := v_kind || r.kind; v_op := v_op || r.op;
        v_subject := v_subject || r.subject; v_keys := v_keys || r.keys; v_rows := v_rows || r.rows;
        v_at := v_at || r.created_at;
    END LOOP;
    WITH given AS (
        INSERT INTO pymem.changes AS c (project_id, position, kind, op, subject, keys, rows, created_at)
        SELECT p_project_id, v_last + pg_catalog.row_number() OVER (ORDER BY m.at, m.key, m.id), m.kind, m.op, m.subject,
               m.keys, m.rows, m.at
          FROM ROWS FROM (pg_catalog.unnest(v_key), pg_catalog.unnest(v_id), pg_catalog.unnest(v_kind),
                          pg_catalog.unnest(v_op), pg_catalog.unnest(v_subject), pg_catalog.unnest(v_keys),
                          pg_catalog.unnest(v_rows), pg_catalog.unnest(v_at)) AS m(key, id, kind, op, subject, keys, rows, at)
        RETURNING c.position
    )
    SELECT pg_catalog.max(g.position) INTO v_max FROM given AS g;
    IF v_max IS NOT NULL THEN
        UPDATE pymem.change_positions AS p SET position = v_max WHERE p.project_id = p_project_id;
    END IF;
END;
$$;

-- changes_since: the project's changes after position `after`, in order, at most max_changes:
-- (position, kind, op, subject, keys, rows, created_at). kind is 'fact', 'message', 'summary',
-- 'store_entry' or 'erasure'; op 'add', 'update' or 'delete'; subject the user id (messages,
-- summaries), 'scope:scope_id' (facts), the store key, or '' (erasures); keys what changed by key
-- ({"ids"}, {"thread_id", "from_seq", "to_seq"}, {"thread_id", "through_seq"}, {"paths"}); rows
-- how many rows the statement changed. A change is given its position when its transaction
-- commits (in the order the project's writers commit), so it is readable as soon as the commit
-- is, whatever other transactions, of this project or any other, stay open; no position is ever
-- given below one already read. Pass the last position you saw to catch up: nothing is lost or
-- repeated. (Rows a 0.2.0 development build wrote before positions came at commit had no position:
-- this call publishes them once
-- every transaction older than them has ended.) Run it in a transaction of its own (25001 when
-- the transaction has written).
--   SELECT position, kind, op, subject, keys FROM pymem.changes_since(project_id => '', after => 0);
CREATE OR REPLACE FUNCTION pymem.changes_since(project_id text DEFAULT '', after bigint DEFAULT 0,
                                               max_changes integer DEFAULT 1000)
RETURNS TABLE ("position" bigint, kind text, op text, subject text, keys jsonb, rows integer, created_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project text := changes_since.project_id;
    v_xmin xid8;
    v_last bigint;
    v_max bigint;
BEGIN
    IF pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: changes_since must run in a transaction that has not written yet'
            USING ERRCODE = '25001',
                  HINT = 'It publishes changes by the age of their transactions: call it in a transaction of its own.';
    END IF;
    -- rows of a development build from before positions came at commit only (every later row has
    -- its position from its commit): the
    -- oldest writer still running, before this transaction writes (and gets an id of its own)
    v_xmin := pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
    PERFORM pymem._tenant_enter(v_project);
    PERFORM pymem._project_check(v_project);
    PERFORM pymem._check_limit('max_changes', changes_since.max_changes);
    IF changes_since.after IS NULL OR changes_since.after < 0 THEN
        RAISE EXCEPTION 'pymem: after must be a position (0: from the start), not %', coalesce(changes_since.after::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._changes_claim(v_project);  -- rows written on Citus workers (none on one server)
    IF EXISTS (SELECT 1 FROM pymem.changes AS c
                WHERE c.project_id = v_project AND c.position IS NULL AND c.xid < v_xmin) THEN
        INSERT INTO pymem.change_positions AS p (project_id) VALUES (v_project) ON CONFLICT (project_id) DO NOTHING;
        SELECT p.position INTO v_last FROM pymem.change_positions AS p WHERE p.project_id = v_project FOR UPDATE;
        -- (another publisher may have published them while this one waited for the lock)
        WITH todo AS (
            SELECT c.id, pg_catalog.row_number() OVER (ORDER BY c.xid, c.id) AS n
              FROM pymem.changes AS c
             WHERE c.project_id = v_project AND c.position IS NULL AND c.xid < v_xmin
             ORDER BY c.xid, c.id
             LIMIT 10000
        )
        , given AS (
            UPDATE pymem.changes AS c SET position = v_last + t.n
              FROM todo AS t WHERE c.project_id = v_project AND c.id = t.id
            RETURNING c.position
        )
        SELECT pg_catalog.max(g.position) INTO v_max FROM given AS g;
        -- the counter follows the highest position given, not the rows updated: a row of todo that
        -- an erasure deleted meanwhile (user_forget takes no position lock) is skipped by the
        -- UPDATE and leaves a gap, where a count put the counter behind a position given and the
        -- next publication collided with it (23505) for good (found by bench/soak.py)
        IF v_max IS NOT NULL THEN
            UPDATE pymem.change_positions AS p SET position = v_max WHERE p.project_id = v_project;
        END IF;
    END IF;
    RETURN QUERY
    SELECT c.position, c.kind, c.op, c.subject, c.keys, c.rows, c.created_at
      FROM pymem.changes AS c
     WHERE c.project_id = v_project AND c.position > changes_since.after
     ORDER BY c.position
     LIMIT changes_since.max_changes;
END;
$$;

-- change_position: the last position published in the project's change feed (0: none yet), to
-- start following the feed from now: changes_since(after => change_position(...)).
--   SELECT pymem.change_position(project_id => '');
CREATE OR REPLACE FUNCTION pymem.change_position(project_id text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(change_position.project_id);
    PERFORM pymem._project_check(change_position.project_id);
    RETURN coalesce((SELECT p.position FROM pymem.change_positions AS p WHERE p.project_id = change_position.project_id), 0);
END;
$$;

-- change_channel: the name of the project's notification channel, to LISTEN on: every
-- transaction that writes to the project's feed notifies it at commit with {"kind": ...} (no id,
-- no content). A random name ('pymem_changes_' and 32 hex digits), made the first time one of
-- the project's roles asks and kept in pymem.change_channels: only a role that may serve the
-- project (42501 for one bound to another project; the reader role and roles without pymem's may
-- not call it) learns it, so no other login can listen to the project's writes. Call it before
-- LISTEN, in a transaction of its own (the first call writes the name).
--   SELECT pymem.change_channel(project_id => '');
CREATE OR REPLACE FUNCTION pymem.change_channel(project_id text DEFAULT '')
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_channel text;
BEGIN
    PERFORM pymem._tenant_enter(change_channel.project_id);
    PERFORM pymem._project_check(change_channel.project_id);
    SELECT ch.channel INTO v_channel FROM pymem.change_channels AS ch WHERE ch.project_id = change_channel.project_id;
    IF v_channel IS NULL THEN
        INSERT INTO pymem.change_channels AS ch (project_id, channel)
        VALUES (change_channel.project_id, 'pymem_changes_' || pg_catalog.md5(pg_catalog.gen_random_uuid()::text
                                                                              || pg_catalog.gen_random_uuid()::text))
            ON CONFLICT (project_id) DO NOTHING;
        SELECT ch.channel INTO v_channel FROM pymem.change_channels AS ch WHERE ch.project_id = change_channel.project_id;
    END IF;
    RETURN v_channel;
END;
$$;

-- _change_feed_triggers(): the feed's triggers (table, trigger), as 0007_v0_2_0_operations.sql creates them.
CREATE OR REPLACE FUNCTION pymem._change_feed_triggers()
RETURNS TABLE (t text, trigger_name text)
LANGUAGE sql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT * FROM (VALUES ('facts', 'facts_changes_add'), ('facts', 'facts_changes_update'),
                          ('facts', 'facts_changes_delete'), ('messages', 'messages_changes_add'),
                          ('messages', 'messages_changes_delete'), ('store_entries', 'store_entries_changes_add'),
                          ('store_entries', 'store_entries_changes_update'),
                          ('store_entries', 'store_entries_changes_delete'), ('erasures', 'erasures_changes_add'),
                          ('threads', 'threads_changes_summary')) AS v(t, trigger_name);
$$;

-- change_feed_enabled: whether writes append to the change feed (change_feed_configure).
--   SELECT pymem.change_feed_enabled();
CREATE OR REPLACE FUNCTION pymem.change_feed_enabled()
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT coalesce(pg_catalog.bool_and(g.tgenabled <> 'D'), false)
      FROM pymem._change_feed_triggers() AS f
      JOIN pg_catalog.pg_trigger AS g ON g.tgname = f.trigger_name
       AND g.tgrelid = pg_catalog.to_regclass('pymem.' || f.t);
$$;

-- change_feed_configure: turns the change feed on (every write of every project appends to it
-- from the next transaction on) or off (writes stop appending; what was appended stays
-- readable). For the whole database, so for administrators only. Off by default: every write
-- pays for it (bench/changes.py). Returns whether it is on. 0A000 where the feed's triggers do
-- not exist.
--   SELECT pymem.change_feed_configure(enabled => true);
CREATE OR REPLACE FUNCTION pymem.change_feed_configure(enabled boolean)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    IF enabled IS NULL THEN
        RAISE EXCEPTION 'pymem: enabled must be true or false' USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS g WHERE g.tgname = 'facts_changes_add'
                      AND g.tgrelid = 'pymem.facts'::pg_catalog.regclass) THEN
        RAISE EXCEPTION 'pymem: the change feed is not available here (its triggers are not installed)'
            USING ERRCODE = '0A000', HINT = 'Run pymem migrate (0007_v0_2_0_operations creates them, 0050_change_outbox again on a cluster).';
    END IF;
    FOR r IN SELECT f.t, f.trigger_name FROM pymem._change_feed_triggers() AS f LOOP
        EXECUTE pg_catalog.format('ALTER TABLE pymem.%I %s TRIGGER %I', r.t,
                                  CASE WHEN enabled THEN 'ENABLE' ELSE 'DISABLE' END, r.trigger_name);
    END LOOP;
    RETURN pymem.change_feed_enabled();
END;
$$;
