-- lifecycle.sql: what ends memory on its own: purge, which deletes what has expired (facts and
-- keyed-store entries whose expires_at has passed: migrations/0006_v0_2_0_memory.sql,
-- 0007_v0_2_0_operations.sql) and the messages a project's retention policy no longer keeps
-- (retention_configure, retention_policy: 0007_v0_2_0_operations.sql) in bounded batches.
-- Expiry itself needs no purge to be correct: an
-- expired fact or entry is invisible to every read at once (pymem.active_facts,
-- pymem._fact_live, pymem._entry_live); a purge gives the space back. Re-applied on every
-- migrate; called by pymem/lifecycle.py (`pymem purge`) and by any SQL client (docs/sql.md
-- "Expire and purge").
--
-- Errors: 22023 invalid argument; 42501 a project the caller may not serve.

-- purge: deletes up to max_rows expired facts of the project, soonest expired first, with their
-- vectors and lexemes (and the history under them, which expires no later: see fact_supersede),
-- and up to max_rows expired keyed-store entries (items too) with their vectors, and up to
-- max_rows messages out of the project's retention (retention_configure; _messages_purge), and
-- returns one row per kind: ('facts', n), ('store_entries', n), ('messages', n), then ('changes', n): the
-- change feed's published rows older than the retention policy's messages_max_age, and
-- ('learning_usage', n): learning's daily usage rows of days that ended longer ago than that. A purged entry is not logged to its
-- store's audit log (an expiry is part of the write that set it: api/stores.sql); its kept
-- versions stay, as after a delete. A call holds its row locks only
-- for its own short transaction and skips nothing it cannot lock: safe to run every minute under
-- load; call it again while it returns max_rows.
--   SELECT kind, purged FROM pymem.purge(project_id => '', max_rows => 1000);
-- A fact or an entry whose expiry a writer moves on meanwhile (a re-add or a write with a ttl, a
-- refresh) is kept: the expiry is tested again as each row is deleted.
CREATE OR REPLACE FUNCTION pymem.purge(project_id text DEFAULT '', max_rows integer DEFAULT 1000)
RETURNS TABLE (kind text, purged integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
    v_count integer := 0;
    v_n integer;
    r record;
    v_now timestamptz := pg_catalog.now();  -- a value: Citus refuses now() beside a column in a DELETE
BEGIN
    PERFORM pymem._tenant_enter(purge.project_id);
    PERFORM pymem._project_check(purge.project_id);
    PERFORM pymem._check_limit('max_rows', purge.max_rows);
    -- the expired facts, soonest first (facts_expiring: the expiring facts only). The values are
    -- written into the statement, so it is planned with them whatever plan_cache_mode says (a
    -- generic plan cannot know how few rows have expired: to it, "expires_at <= $1" is a third
    -- of the table); not SET plan_cache_mode on the function, which also re-plans the foreign
    -- keys' checks for every row a purge deletes (docs/performance.md)
    EXECUTE pg_catalog.format(
        'SELECT pg_catalog.array_agg(e.id) '
        '  FROM (SELECT f.id FROM pymem.facts AS f '
        '         WHERE f.project_id = %L AND f.expires_at IS NOT NULL AND f.expires_at <= %L::timestamptz '
        '         ORDER BY f.expires_at LIMIT %s) AS e', purge.project_id, v_now, purge.max_rows)
       INTO v_ids;
    IF v_ids IS NOT NULL THEN
        -- by id within the project (facts_project_id_id); the expiry tested again on each row
        DELETE FROM pymem.facts AS f
         WHERE f.project_id = purge.project_id AND f.id = ANY (v_ids) AND NOT pymem._fact_kept(f, v_now);
        GET DIAGNOSTICS v_count = ROW_COUNT;
    END IF;
    kind := 'facts';
    purged := v_count;
    RETURN NEXT;
    -- the expired store entries, soonest first (store_entries_expiring), deleted store by store
    -- by their keys (on Citus, where the table is distributed by store_key, one shard each);
    -- their vectors go with them (ON DELETE CASCADE)
    v_count := 0;
    FOR r IN EXECUTE pg_catalog.format(  -- planned with this call's values, as above
                 'SELECT x.store_key, pg_catalog.array_agg(x.path) AS paths '
                 '  FROM (SELECT e.store_key, e.path FROM pymem.store_entries AS e '
                 '         WHERE e.project_id = %L AND e.expires_at IS NOT NULL AND e.expires_at <= %L::timestamptz '
                 '         ORDER BY e.expires_at LIMIT %s) AS x '
                 ' GROUP BY x.store_key', purge.project_id, v_now, purge.max_rows) LOOP
        DELETE FROM pymem.store_entries AS e
         WHERE e.project_id = purge.project_id AND e.store_key = r.store_key AND e.path = ANY (r.paths)
           AND NOT pymem._entry_live(e.expires_at, v_now);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_count := v_count + v_n;
    END LOOP;
    kind := 'store_entries';
    purged := v_count;
    RETURN NEXT;
    kind := 'messages';
    purged := pymem._messages_purge(purge.project_id, purge.max_rows, v_now);
    RETURN NEXT;
    kind := 'changes';
    purged := pymem._changes_purge(purge.project_id, purge.max_rows, v_now);
    RETURN NEXT;
    kind := 'learning_usage';
    purged := pymem._learning_usage_purge(purge.project_id, purge.max_rows, v_now);
    RETURN NEXT;
END;
$$;

-- _learning_usage_purge(project_id, max_rows, now): learning's daily usage (0007_v0_2_0_operations)
-- follows the project's retention policy for messages too: deletes up to max_rows rows of days
-- that ended more than messages_max_age ago (today's, which the cost caps read, stays), oldest
-- first, and returns how many. No age: 0.
CREATE OR REPLACE FUNCTION pymem._learning_usage_purge(p_project_id text, p_max_rows integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_age interval;
    v_n integer;
BEGIN
    SELECT r.messages_max_age INTO v_age FROM pymem.retention AS r WHERE r.project_id = p_project_id;
    IF v_age IS NULL THEN
        RETURN 0;
    END IF;
    -- the oldest max_rows rows joined by their keys (a row-valued IN is refused on Citus, where the
    -- table is distributed by user_id: 'subquery has too many columns')
    WITH o AS (SELECT x.day, x.user_id FROM pymem.learning_usage AS x
                WHERE x.project_id = p_project_id
                  AND x.day + 1 < ((p_now - v_age) AT TIME ZONE 'UTC')::date
                ORDER BY x.day LIMIT p_max_rows)
    DELETE FROM pymem.learning_usage AS u USING o
     WHERE u.project_id = p_project_id AND u.user_id = o.user_id AND u.day = o.day;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

-- _changes_purge(project_id, max_rows, now): the change feed (0007_v0_2_0_operations) follows the
-- project's retention policy for messages: deletes up to max_rows published changes older than
-- messages_max_age, oldest first, and returns how many. The oldest max_rows positions are read
-- (changes_position) and the age is tested on each, so a purge never scans the feed. No age: 0.
CREATE OR REPLACE FUNCTION pymem._changes_purge(p_project_id text, p_max_rows integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_age interval;
    v_n integer;
BEGIN
    SELECT r.messages_max_age INTO v_age FROM pymem.retention AS r WHERE r.project_id = p_project_id;
    IF v_age IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM pymem.changes AS c
     WHERE c.project_id = p_project_id
       AND c.id IN (SELECT o.id FROM (SELECT x.id, x.created_at FROM pymem.changes AS x
                                       WHERE x.project_id = p_project_id AND x.position IS NOT NULL
                                       ORDER BY x.position LIMIT p_max_rows) AS o
                     WHERE o.created_at < p_now - v_age);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

-- _messages_purge(project_id, max_rows, now): deletes up to max_rows messages that the project's
-- retention policy (pymem.retention: retention_configure) no longer keeps, with their vectors
-- and lexemes (ON DELETE CASCADE), and returns how many: first those older than
-- messages_max_age, oldest first (messages_created); then, with what is left of max_rows, those
-- of threads over messages_max_per_thread, the oldest of each (by seq), moving the thread's
-- retained_from past them. Deleted by key (the age policy's in one statement); the age is
-- tested again on each row, and a thread's cap from its last_seq as locked. Called by purge.
CREATE OR REPLACE FUNCTION pymem._messages_purge(p_project_id text, p_max_rows integer, p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_age interval;
    v_cap integer;
    v_count integer := 0;
    v_n integer;
    v_through bigint;
    v_users text[];
    v_threads text[];
    v_seqs bigint[];
    v_first bigint;
    v_last bigint;
    r record;
BEGIN
    SELECT p.messages_max_age, p.messages_max_per_thread INTO v_age, v_cap
      FROM pymem.retention AS p WHERE p.project_id = p_project_id;
    IF v_age IS NOT NULL THEN
        SELECT pg_catalog.array_agg(x.user_id), pg_catalog.array_agg(x.thread_id), pg_catalog.array_agg(x.seq)
          INTO v_users, v_threads, v_seqs
          FROM (SELECT m.user_id, m.thread_id, m.seq FROM pymem.messages AS m
                 WHERE m.project_id = p_project_id AND m.created_at < p_now - v_age
                 ORDER BY m.created_at
                 LIMIT p_max_rows) AS x;
        IF v_users IS NOT NULL THEN
            -- one statement, by key (messages_pkey)
            DELETE FROM pymem.messages AS m
             USING ROWS FROM (pg_catalog.unnest(v_users), pg_catalog.unnest(v_threads), pg_catalog.unnest(v_seqs))
                   AS d(user_id, thread_id, seq)
             WHERE m.project_id = p_project_id AND m.user_id = d.user_id AND m.thread_id = d.thread_id
               AND m.seq = d.seq AND m.created_at < p_now - v_age;
            GET DIAGNOSTICS v_count = ROW_COUNT;
        END IF;
    END IF;
    IF v_cap IS NOT NULL AND v_count < p_max_rows THEN
        -- the threads over their cap (every thread of the project is looked at: threads has a row
        -- per conversation, not per message)
        FOR r IN SELECT t.user_id, t.thread_id FROM pymem.threads AS t
                  WHERE t.project_id = p_project_id AND t.last_seq - t.retained_from + 1 > v_cap
                  ORDER BY t.user_id, t.thread_id LOOP
            EXIT WHEN v_count >= p_max_rows;
            -- the thread row locked: a turn in flight moves last_seq on first
            SELECT t.last_seq INTO v_last FROM pymem.threads AS t
             WHERE t.project_id = p_project_id AND t.user_id = r.user_id AND t.thread_id = r.thread_id
               FOR UPDATE;
            CONTINUE WHEN v_last IS NULL;
            LOOP
                -- from the thread's oldest message (the primary key's first entry: retained_from
                -- may be behind it, after the age policy's deletes), at most what max_rows leaves
                SELECT pg_catalog.min(m.seq) INTO v_first FROM pymem.messages AS m
                 WHERE m.project_id = p_project_id AND m.user_id = r.user_id AND m.thread_id = r.thread_id;
                v_first := coalesce(v_first, v_last + 1);
                v_through := LEAST(v_last - v_cap, v_first + (p_max_rows - v_count) - 1);
                EXIT WHEN v_through < v_first;
                DELETE FROM pymem.messages AS m
                 WHERE m.project_id = p_project_id AND m.user_id = r.user_id AND m.thread_id = r.thread_id
                   AND m.seq <= v_through;
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_count := v_count + v_n;
                v_first := v_through + 1;
                EXIT WHEN v_count >= p_max_rows;
            END LOOP;
            UPDATE pymem.threads AS t SET retained_from = GREATEST(t.retained_from, v_first)
             WHERE t.project_id = p_project_id AND t.user_id = r.user_id AND t.thread_id = r.thread_id;
        END LOOP;
    END IF;
    RETURN v_count;
END;
$$;

-- retention_configure: a project's retention policy for messages, which purge applies:
-- messages_max_age (an interval: a message older than that is purged) and
-- messages_max_per_thread (a thread keeps its newest that many messages); NULL for either: no
-- such limit; both NULL: the project keeps every message (the policy is removed). Returns the
-- policy now in force (a row of pymem.retention). Refused with 22023: a max_age that is not positive or over 100 years, a
-- max_per_thread below 1; 55000 an age without the index the age policy reads
-- (messages_created: built only for the projects that need it, migrations/0007_v0_2_0_operations). A message out
-- of retention stays readable until a purge deletes it. Administrators only (the owner role and
-- its members), like text_search_configure.
--   SELECT * FROM pymem.retention_configure(project_id => 'acme', messages_max_age => '90 days');
CREATE OR REPLACE FUNCTION pymem.retention_configure(project_id text DEFAULT '', messages_max_age interval DEFAULT NULL,
                                                     messages_max_per_thread integer DEFAULT NULL)
RETURNS SETOF pymem.retention
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();  -- a value: Citus refuses clock_timestamp() in ON CONFLICT
BEGIN
    PERFORM pymem._tenant_enter(retention_configure.project_id);
    PERFORM pymem._project_check(retention_configure.project_id);
    IF retention_configure.messages_max_age IS NOT NULL
       AND (pg_catalog.isfinite(v_now + retention_configure.messages_max_age) IS NOT TRUE
            OR v_now - retention_configure.messages_max_age >= v_now
            OR v_now - retention_configure.messages_max_age < v_now - interval '100 years') THEN
        RAISE EXCEPTION 'pymem: messages_max_age must be a positive interval of at most 100 years, not %',
                        retention_configure.messages_max_age
            USING ERRCODE = '22023', HINT = 'e.g. messages_max_age => ''90 days''; NULL keeps messages of any age.';
    END IF;
    IF retention_configure.messages_max_age IS NOT NULL
       AND NOT coalesce((SELECT i.indisvalid FROM pg_catalog.pg_index AS i
                          WHERE i.indexrelid = pg_catalog.to_regclass('pymem.messages_created')), false) THEN
        RAISE EXCEPTION 'pymem: an age policy reads messages through the index pymem.messages_created, which is missing or invalid'
            USING ERRCODE = '55000',
                  HINT = 'Build it first, as the owner role (writes go on meanwhile): DROP INDEX CONCURRENTLY IF EXISTS '
                         'pymem.messages_created; CREATE INDEX CONCURRENTLY messages_created ON pymem.messages '
                         '(project_id, created_at); pymem retention --max-age does both.';
    END IF;
    IF retention_configure.messages_max_per_thread < 1 THEN
        RAISE EXCEPTION 'pymem: messages_max_per_thread must be at least 1, not %', retention_configure.messages_max_per_thread
            USING ERRCODE = '22023', HINT = 'NULL keeps every message of a thread.';
    END IF;
    IF retention_configure.messages_max_age IS NULL AND retention_configure.messages_max_per_thread IS NULL THEN
        DELETE FROM pymem.retention AS r WHERE r.project_id = retention_configure.project_id;
        RETURN NEXT ROW(retention_configure.project_id, NULL, NULL, v_now)::pymem.retention;
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO pymem.retention AS r (project_id, messages_max_age, messages_max_per_thread, updated_at)
    VALUES (retention_configure.project_id, retention_configure.messages_max_age,
            retention_configure.messages_max_per_thread, v_now)
    ON CONFLICT (project_id) DO UPDATE
       SET messages_max_age = excluded.messages_max_age, messages_max_per_thread = excluded.messages_max_per_thread,
           updated_at = excluded.updated_at
    RETURNING r.*;
END;
$$;

-- retention_policy: the project's retention policy for messages (retention_configure), one row of
-- pymem.retention: NULLs when it keeps every message.
--   SELECT * FROM pymem.retention_policy(project_id => 'acme');
CREATE OR REPLACE FUNCTION pymem.retention_policy(project_id text DEFAULT '')
RETURNS SETOF pymem.retention
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(retention_policy.project_id);
    PERFORM pymem._project_check(retention_policy.project_id);
    RETURN QUERY
    SELECT retention_policy.project_id, r.messages_max_age, r.messages_max_per_thread, r.updated_at
      FROM (SELECT 1) AS one
      LEFT JOIN pymem.retention AS r ON r.project_id = retention_policy.project_id;
END;
$$;
