-- learning_backfill.sql: learning from history already stored (turns recorded before a learner
-- existed, or imported with user_import): learning_backfill queues them as learning jobs
-- (migrations/0007_v0_2_0_operations.sql), which the workers of deferred learning learn from
-- (learning.sql: learning_claim, under the project's cost caps). Beside learning.sql (the same
-- capability). Re-applied on every migrate; called by pymem/learning.py (`pymem learn
-- --backfill`) and by any SQL client (docs/sql.md "Deferred learning").
--
-- Once: each thread records how far a backfill looked (threads.learning_backfilled_through,
-- migrations/0007_v0_2_0_operations.sql); a backfill queues only the user messages after it, and
-- moves it on in the same transaction, under the thread rows' locks (FOR UPDATE), so two
-- backfills at once queue each turn once. In order: a user's jobs are claimed oldest id first,
-- and a backfill queues each user's turns in the order they were said (created_at, then seq).
-- Turns that were learned live (inline, or by a deferred job already done) leave no mark: a
-- backfill over them learns them again; bound it with since / until (the time the learner
-- started).
--
-- Errors: 22023 invalid argument; 42501 a project the caller may not serve.

-- learning_backfill: queues the stored user messages of a project's threads (of one user with
-- user_id; NULL: every user) created in [since, until) (NULL: open on that side), at most max_jobs
-- (1..10000) in one call, each user's in the order said, each once (see above), skipping a
-- message that already has an open job; returns how many it queued and whether it looked at
-- every thread it selects (done false: max_jobs was reached; call again for the rest).
--   SELECT queued, done FROM pymem.learning_backfill(project_id => '', user_id => 'alice');
CREATE OR REPLACE FUNCTION pymem.learning_backfill(project_id text DEFAULT '', user_id text DEFAULT NULL,
                                                   since timestamptz DEFAULT NULL, until timestamptz DEFAULT NULL,
                                                   max_jobs integer DEFAULT 1000)
RETURNS TABLE (queued integer, done boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_left integer;
    v_more boolean;
    v_user text;
    v_threads text[];
    v_seqs bigint[];
BEGIN
    PERFORM pymem._tenant_enter(learning_backfill.project_id);
    PERFORM pymem._project_check(learning_backfill.project_id);
    IF learning_backfill.max_jobs IS NULL OR learning_backfill.max_jobs < 1 OR learning_backfill.max_jobs > 10000 THEN
        RAISE EXCEPTION 'pymem: max_jobs must be between 1 and 10000, not %', coalesce(learning_backfill.max_jobs::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF learning_backfill.user_id IN ('', '*') OR pg_catalog.length(learning_backfill.user_id) > 256 THEN
        RAISE EXCEPTION 'pymem: user_id must be a user''s id, or NULL for every user, not %',
                pg_catalog.quote_literal(learning_backfill.user_id)
            USING ERRCODE = '22023';
    END IF;
    IF learning_backfill.since >= learning_backfill.until THEN
        RAISE EXCEPTION 'pymem: since (%) must be before until (%)', learning_backfill.since, learning_backfill.until
            USING ERRCODE = '22023';
    END IF;
    v_left := learning_backfill.max_jobs;
    queued := 0;
    done := true;
    FOR v_user IN SELECT DISTINCT t.user_id FROM pymem.threads AS t
                   WHERE t.project_id = learning_backfill.project_id
                     AND (learning_backfill.user_id IS NULL OR t.user_id = learning_backfill.user_id)
                   ORDER BY t.user_id LOOP
        IF v_left = 0 THEN  -- max_jobs reached at the end of the previous user: the next call goes on
            done := false;
            EXIT;
        END IF;
        -- the user's threads, locked: a turn in flight moves last_seq first, a second backfill waits
        PERFORM 1 FROM pymem.threads AS t
         WHERE t.project_id = learning_backfill.project_id AND t.user_id = v_user
         ORDER BY t.thread_id
           FOR UPDATE;
        -- the user's turns to queue, in the order said, one more than may be queued (is there more?)
        WITH todo AS (
            SELECT m.thread_id, m.seq, m.created_at
              FROM pymem.threads AS t
              JOIN pymem.messages AS m
                ON m.project_id = t.project_id AND m.user_id = t.user_id AND m.thread_id = t.thread_id
               AND m.seq > t.learning_backfilled_through
             WHERE t.project_id = learning_backfill.project_id AND t.user_id = v_user AND m.role = 'user'
               AND (learning_backfill.since IS NULL OR m.created_at >= learning_backfill.since)
               AND (learning_backfill.until IS NULL OR m.created_at < learning_backfill.until)
               AND NOT EXISTS (SELECT 1 FROM pymem.learning_jobs AS j
                                WHERE j.project_id = t.project_id AND j.user_id = t.user_id
                                  AND j.thread_id = m.thread_id AND j.seq = m.seq)
             ORDER BY m.created_at, m.thread_id, m.seq
             LIMIT v_left + 1)
        SELECT pg_catalog.array_agg(d.thread_id ORDER BY d.created_at, d.thread_id, d.seq) FILTER (WHERE d.n <= v_left),
               pg_catalog.array_agg(d.seq ORDER BY d.created_at, d.thread_id, d.seq) FILTER (WHERE d.n <= v_left),
               pg_catalog.count(*) > v_left
          INTO v_threads, v_seqs, v_more
          FROM (SELECT todo.*, pg_catalog.row_number() OVER (ORDER BY todo.created_at, todo.thread_id, todo.seq) AS n
                  FROM todo) AS d;
        -- one job per turn, ids in the order said (WITH ORDINALITY: the order of the arrays)
        INSERT INTO pymem.learning_jobs (project_id, user_id, thread_id, seq)
        SELECT learning_backfill.project_id, v_user, q.thread_id, q.seq
          FROM ROWS FROM (pg_catalog.unnest(v_threads), pg_catalog.unnest(v_seqs)) WITH ORDINALITY AS q(thread_id, seq, n)
         ORDER BY q.n;
        queued := queued + coalesce(pg_catalog.cardinality(v_seqs), 0);
        v_left := v_left - coalesce(pg_catalog.cardinality(v_seqs), 0);
        IF v_more THEN
            -- max_jobs reached inside this user's turns: each thread is marked up to its last queued
            -- message (a thread's seq order is its time order: what was queued of it is a prefix)
            UPDATE pymem.threads AS t
               SET learning_backfilled_through = x.through
              FROM (SELECT q.thread_id, pg_catalog.max(q.seq) AS through
                      FROM ROWS FROM (pg_catalog.unnest(v_threads), pg_catalog.unnest(v_seqs)) AS q(thread_id, seq)
                     GROUP BY q.thread_id) AS x
             WHERE t.project_id = learning_backfill.project_id AND t.user_id = v_user AND t.thread_id = x.thread_id;
            done := false;
            EXIT;
        END IF;
        -- every turn of the user looked at: each thread is marked to its end
        UPDATE pymem.threads AS t SET learning_backfilled_through = t.last_seq
         WHERE t.project_id = learning_backfill.project_id AND t.user_id = v_user
           AND t.learning_backfilled_through < t.last_seq;
    END LOOP;
    RETURN NEXT;
END;
$$;
