-- learning.sql: deferred learning, the queue of turns to learn from (tables in
-- migrations/0007_v0_2_0_operations.sql). A turn recorded with turn_record(defer_learning => true)
-- leaves one job; a worker takes jobs with learning_claim, runs its learner (extract, reconcile,
-- summarize: model calls, outside any transaction) and ends each job with learning_complete
-- (the learned facts and fact changes and the job's end in one transaction: applied once),
-- learning_fail (retried after a backoff, dead after max_attempts) or learning_release (given
-- back untouched, e.g. on shutdown). learning_status counts the queue (no content, no ids: the
-- reader role may call it); learning_jobs lists jobs with their last error, learning_requeue
-- gives dead or skipped jobs another chance; learning_limits_configure (administrators) and
-- learning_limits set and read the project's cost caps. Re-applied on every migrate; called by
-- pymem/learning.py (Memory.learn_pending, `pymem worker`) and by any SQL client (docs/sql.md
-- "Deferred learning").
--
-- Errors: 22023 invalid argument; 42501 a project the caller may not serve.

-- _learning_check(max_jobs, lease_seconds, max_attempts): the worker's settings, 22023 when out
-- of range (1..1000 jobs per claim, a lease of 1 s .. 1 day, 1..100 attempts).
CREATE OR REPLACE FUNCTION pymem._learning_check(max_jobs integer, lease_seconds double precision, max_attempts integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF max_jobs IS NULL OR max_jobs < 1 OR max_jobs > 1000 THEN
        RAISE EXCEPTION 'pymem: max_jobs must be between 1 and 1000, not %', coalesce(max_jobs::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF lease_seconds IS NULL OR NOT (lease_seconds >= 1 AND lease_seconds <= 86400) THEN
        RAISE EXCEPTION 'pymem: lease_seconds must be between 1 and 86400, not %', coalesce(lease_seconds::text, 'NULL')
            USING ERRCODE = '22023', HINT = 'A lease outlives the longest job: the learner''s model calls, with their timeouts.';
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 100 THEN
        RAISE EXCEPTION 'pymem: max_attempts must be between 1 and 100, not %', coalesce(max_attempts::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _learning_spent_check(calls, tokens): a job's model calls and tokens are counts; 22023 if not.
CREATE OR REPLACE FUNCTION pymem._learning_spent_check(calls integer, tokens bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF calls IS NULL OR calls < 0 OR tokens IS NULL OR tokens < 0 THEN
        RAISE EXCEPTION 'pymem: calls and tokens must be counts (>= 0), not % and %',
                        coalesce(calls::text, 'NULL'), coalesce(tokens::text, 'NULL') USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _learning_spent_lost(project_id, user_id, job_id, calls, tokens): the usage of a worker that
-- no longer held its job's lease. Counted for the user while the job still exists (another
-- worker took it after the lease expired, or it was requeued; locked here, so an erasure of the
-- user waits and then deletes this usage too); not counted once the job is gone (the user was
-- erased, or the worker that took the job over completed it): no usage row names an erased user.
CREATE OR REPLACE FUNCTION pymem._learning_spent_lost(project_id text, user_id text, job_id bigint, calls integer,
                                                      tokens bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM pymem.learning_jobs AS j
     WHERE j.project_id = _learning_spent_lost.project_id AND j.user_id = _learning_spent_lost.user_id
       AND j.id = _learning_spent_lost.job_id
       FOR KEY SHARE;
    IF FOUND THEN
        PERFORM pymem._learning_spent(_learning_spent_lost.project_id, _learning_spent_lost.user_id,
                                      _learning_spent_lost.calls, _learning_spent_lost.tokens);
    END IF;
END;
$$;

-- _learning_spent(project_id, user_id, calls, tokens): adds a job's model calls and tokens to
-- today's (UTC) usage of the user, in the caller's transaction. Negative counts: 22023.
CREATE OR REPLACE FUNCTION pymem._learning_spent(project_id text, user_id text, calls integer, tokens bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._learning_spent_check(calls, tokens);
    IF calls = 0 AND tokens = 0 THEN
        RETURN;
    END IF;
    INSERT INTO pymem.learning_usage AS u (project_id, day, user_id, calls, tokens)
    VALUES (_learning_spent.project_id, (pg_catalog.now() AT TIME ZONE 'UTC')::date, _learning_spent.user_id,
            _learning_spent.calls, _learning_spent.tokens)
    ON CONFLICT (project_id, day, user_id)
    DO UPDATE SET calls = u.calls + excluded.calls, tokens = u.tokens + excluded.tokens;
END;
$$;

-- learning_claim: leases up to max_jobs jobs of the project to the caller for lease_seconds, the
-- oldest first, at most one per user: a user's oldest open job (pending or running), once it is
-- claimable (a pending job past its backoff, or a running one whose lease expired: its worker
-- died or ran out of time). Rows locked by another claim are skipped (FOR UPDATE SKIP LOCKED),
-- so workers never wait on one another and never get the same job. Each row returned is one of:
--   state 'running': leased to the caller under lease_token until leased_until (attempts counts
--     this claim); content is the turn's user message (NULL when it was deleted meanwhile:
--     nothing to learn, complete it);
--   state 'skipped': the user or the project is past a cost cap of learning_limits today
--     (reason names it); the job stays, skipped, for learning_requeue;
-- Under a cap of the project's calls, each job leased and not ended yet (by this claim or
-- another worker's) counts as one call: a claim leases no more jobs than the calls left, and
-- leaves the others pending; the project's claims take turns on its row of learning_limits.
--   state 'dead': its lease expired with max_attempts claims spent (reason says so).
-- Run it in a transaction of its own, committed at once: the lease starts then.
--   SELECT * FROM pymem.learning_claim(project_id => '', max_jobs => 10, lease_seconds => 300);
CREATE OR REPLACE FUNCTION pymem.learning_claim(
    project_id text DEFAULT '',
    max_jobs integer DEFAULT 10,
    lease_seconds double precision DEFAULT 300,
    max_attempts integer DEFAULT 5)
RETURNS TABLE (job_id bigint, user_id text, thread_id text, seq bigint, state text, attempts integer,
               lease_token uuid, leased_until timestamptz, content text, reason text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project text := learning_claim.project_id;
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_day date := (pg_catalog.now() AT TIME ZONE 'UTC')::date;
    v_limits pymem.learning_limits;
    v_project_calls bigint := 0;
    v_project_tokens bigint := 0;
    v_user_calls bigint;
    v_user_tokens bigint;
    v_reserved bigint := 0;  -- jobs leased and not ended yet: at least one model call each
    v_taken integer := 0;
    j record;
    r record;
BEGIN
    PERFORM pymem._tenant_enter(v_project);
    PERFORM pymem._project_check(v_project);
    PERFORM pymem._learning_check(learning_claim.max_jobs, learning_claim.lease_seconds, learning_claim.max_attempts);
    SELECT * INTO v_limits FROM pymem.learning_limits AS l WHERE l.project_id = v_project;
    IF v_limits.project_calls_per_day IS NOT NULL THEN
        -- the claims of a project with a cap of calls take turns (each is a short transaction of
        -- its own): the next one counts the jobs this one leases
        PERFORM 1 FROM pymem.learning_limits AS l WHERE l.project_id = v_project FOR NO KEY UPDATE;
    END IF;
    IF v_limits.project_calls_per_day IS NOT NULL OR v_limits.project_tokens_per_day IS NOT NULL THEN
        SELECT coalesce(pg_catalog.sum(u.calls), 0), coalesce(pg_catalog.sum(u.tokens), 0)
          INTO v_project_calls, v_project_tokens
          FROM pymem.learning_usage AS u WHERE u.project_id = v_project AND u.day = v_day;
        -- the jobs other workers hold: each will make at least one model call, not counted yet
        SELECT pg_catalog.count(*) INTO v_reserved FROM pymem.learning_jobs AS c
         WHERE c.project_id = v_project AND c.state = 'running' AND c.leased_until > v_now;
    END IF;
    -- the candidates: each user's oldest open job, once claimable, oldest first (read without
    -- locks, a few more than asked: another claim may take some) ...
    FOR j IN
        SELECT c.user_id, c.id
          FROM pymem.learning_jobs AS c
         WHERE c.project_id = v_project AND c.state IN ('pending', 'running')
           AND CASE WHEN c.state = 'pending' THEN c.available_at ELSE c.leased_until END <= v_now
           AND NOT EXISTS (SELECT 1 FROM pymem.learning_jobs AS e
                            WHERE e.project_id = v_project AND e.user_id = c.user_id
                              AND e.state IN ('pending', 'running') AND e.id < c.id)
         ORDER BY c.id
         LIMIT learning_claim.max_jobs * 2 + 8
    LOOP
        EXIT WHEN v_taken >= learning_claim.max_jobs;
        -- ... then each locked by its key, skipped when another claim holds it, and checked again
        -- as locked: still open, claimable and its user's oldest (a claim that committed meanwhile
        -- leased it; a job that ended meanwhile lets the next one wait for the next claim). By key,
        -- so that on a cluster each is one routed statement (Citus locks rows of one shard only).
        SELECT c.user_id, c.id, c.state, c.attempts, c.thread_id, c.seq INTO r
          FROM pymem.learning_jobs AS c
         WHERE c.project_id = v_project AND c.user_id = j.user_id AND c.id = j.id
           AND c.state IN ('pending', 'running')
           AND CASE WHEN c.state = 'pending' THEN c.available_at ELSE c.leased_until END <= v_now
           AND NOT EXISTS (SELECT 1 FROM pymem.learning_jobs AS e
                            WHERE e.project_id = v_project AND e.user_id = j.user_id
                              AND e.state IN ('pending', 'running') AND e.id < j.id)
           FOR UPDATE OF c SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        v_taken := v_taken + 1;
        job_id := r.id;
        user_id := r.user_id;
        thread_id := r.thread_id;
        seq := r.seq;
        content := NULL;
        lease_token := NULL;
        leased_until := NULL;
        reason := NULL;
        attempts := r.attempts;
        IF r.state = 'running' AND r.attempts >= learning_claim.max_attempts THEN
            reason := pg_catalog.format('its lease expired after %s of %s attempts (a worker died, or ran past '
                                        'lease_seconds)', r.attempts, learning_claim.max_attempts);
            state := 'dead';
            UPDATE pymem.learning_jobs AS u
               SET state = 'dead', lease_token = NULL, leased_until = NULL, error_kind = 'lease_expired',
                   error = reason, updated_at = v_now
             WHERE u.project_id = v_project AND u.user_id = r.user_id AND u.id = r.id;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_limits.project_id IS NOT NULL THEN
            SELECT u.calls, u.tokens INTO v_user_calls, v_user_tokens FROM pymem.learning_usage AS u
             WHERE u.project_id = v_project AND u.day = v_day AND u.user_id = r.user_id;
            reason := CASE
                WHEN v_project_calls >= v_limits.project_calls_per_day
                    THEN pg_catalog.format('the project''s model calls today reached project_calls_per_day (%s)',
                                           v_limits.project_calls_per_day)
                WHEN v_project_tokens >= v_limits.project_tokens_per_day
                    THEN pg_catalog.format('the project''s tokens today reached project_tokens_per_day (%s)',
                                           v_limits.project_tokens_per_day)
                WHEN coalesce(v_user_calls, 0) >= v_limits.user_calls_per_day
                    THEN pg_catalog.format('the user''s model calls today reached user_calls_per_day (%s)',
                                           v_limits.user_calls_per_day)
                WHEN coalesce(v_user_tokens, 0) >= v_limits.user_tokens_per_day
                    THEN pg_catalog.format('the user''s tokens today reached user_tokens_per_day (%s)',
                                           v_limits.user_tokens_per_day)
            END;
        END IF;
        IF reason IS NULL AND v_project_calls + v_reserved >= v_limits.project_calls_per_day THEN
            -- under the project's cap of calls only with the jobs in hand counted: this job stays
            -- pending for a later claim, which sees what those jobs spent (one claim never
            -- leases more jobs than the calls left)
            EXIT;
        END IF;
        IF reason IS NOT NULL THEN
            state := 'skipped';
            UPDATE pymem.learning_jobs AS u
               SET state = 'skipped', lease_token = NULL, leased_until = NULL, error_kind = 'cost_cap',
                   error = reason, updated_at = v_now
             WHERE u.project_id = v_project AND u.user_id = r.user_id AND u.id = r.id;
            INSERT INTO pymem.learning_usage AS u (project_id, day, user_id, skipped)
            VALUES (v_project, v_day, r.user_id, 1)
            ON CONFLICT (project_id, day, user_id) DO UPDATE SET skipped = u.skipped + 1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        state := 'running';
        v_reserved := v_reserved + 1;
        attempts := r.attempts + 1;
        lease_token := pg_catalog.gen_random_uuid();
        leased_until := v_now + pg_catalog.make_interval(secs => learning_claim.lease_seconds);
        UPDATE pymem.learning_jobs AS u
           SET state = 'running', attempts = u.attempts + 1, lease_token = learning_claim.lease_token,
               leased_until = learning_claim.leased_until, updated_at = v_now
         WHERE u.project_id = v_project AND u.user_id = r.user_id AND u.id = r.id;
        SELECT m.content INTO content FROM pymem.messages AS m
         WHERE m.project_id = v_project AND m.user_id = r.user_id AND m.thread_id = r.thread_id AND m.seq = r.seq;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- _learning_lease(project_id, user_id, job_id, lease_token): locks the job and tells whether the
-- caller still holds its lease (the job is running under that token). An expired lease that no
-- other worker took yet still counts: the job is the caller's until someone claims it.
CREATE OR REPLACE FUNCTION pymem._learning_lease(project_id text, user_id text, job_id bigint, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._conv_check(_learning_lease.project_id, _learning_lease.user_id, NULL, 'exact');
    IF job_id IS NULL OR lease_token IS NULL THEN
        RAISE EXCEPTION 'pymem: job_id and lease_token are required (learning_claim gave them)' USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM pymem.learning_jobs AS j
     WHERE j.project_id = _learning_lease.project_id AND j.user_id = _learning_lease.user_id
       AND j.id = _learning_lease.job_id AND j.state = 'running' AND j.lease_token = _learning_lease.lease_token
       FOR UPDATE;
    RETURN FOUND;
END;
$$;

-- learning_complete: ends a claimed job with what its learner found, in one transaction: the
-- learned facts and the fact changes are applied as turn_record applies them (the turn's user,
-- facts naming the turn in their metadata; see there), the job is deleted, and calls and tokens
-- (the model calls the job spent) are added to today's usage. completed false: the caller no
-- longer holds the lease (another worker took the job after the lease expired, or it was
-- requeued): nothing is applied, the usage is still counted while the job exists (not once it is
-- gone: its user was erased, or the worker that took it over completed it). A summary that is due is the
-- worker's to fold with summary_claim and summary_commit, as for any turn.
--   SELECT completed FROM pymem.learning_complete(user_id => 'alice', job_id => 1,
--       lease_token => '...', fact_changes => '[{"op": "add", "content": "Lives in Oslo"}]');
CREATE OR REPLACE FUNCTION pymem.learning_complete(
    user_id text,
    job_id bigint,
    lease_token uuid,
    project_id text DEFAULT '',
    learned text[] DEFAULT NULL,
    fact_changes jsonb DEFAULT NULL,
    max_learned integer DEFAULT 200,
    calls integer DEFAULT 0,
    tokens bigint DEFAULT 0)
RETURNS TABLE (completed boolean, learned_ids bigint[], changes jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job pymem.learning_jobs;
BEGIN
    PERFORM pymem._tenant_enter(learning_complete.project_id);
    PERFORM pymem._turn_learn_check(learning_complete.learned, learning_complete.max_learned,
                                    learning_complete.fact_changes);
    PERFORM pymem._conv_check(learning_complete.project_id, learning_complete.user_id, NULL, 'exact');
    PERFORM pymem._learning_spent_check(learning_complete.calls, learning_complete.tokens);
    -- the lease before the usage: a user erased meanwhile (user_forget deleted the job) gets no
    -- usage row back
    completed := pymem._learning_lease(learning_complete.project_id, learning_complete.user_id,
                                       learning_complete.job_id, learning_complete.lease_token);
    IF NOT completed THEN
        PERFORM pymem._learning_spent_lost(learning_complete.project_id, learning_complete.user_id,
                                           learning_complete.job_id, learning_complete.calls, learning_complete.tokens);
        RETURN NEXT;
        RETURN;
    END IF;
    PERFORM pymem._learning_spent(learning_complete.project_id, learning_complete.user_id,
                                  learning_complete.calls, learning_complete.tokens);
    DELETE FROM pymem.learning_jobs AS j
     WHERE j.project_id = learning_complete.project_id AND j.user_id = learning_complete.user_id
       AND j.id = learning_complete.job_id
    RETURNING j.* INTO v_job;
    SELECT l.learned_ids, l.changes INTO learned_ids, changes
      FROM pymem._turn_learn(learning_complete.project_id, learning_complete.user_id,
                             pg_catalog.jsonb_build_object('thread_id', v_job.thread_id, 'seq', v_job.seq),
                             learning_complete.learned, learning_complete.fact_changes,
                             learning_complete.max_learned, NULL) AS l;
    RETURN NEXT;
END;
$$;

-- learning_fail: ends a claimed attempt that failed (the model timed out, answered junk, the
-- write was refused). error_kind (e.g. the exception's class) and error (cut to 500 characters)
-- are kept on the job, so write no message content into them. The job is pending again after a
-- backoff of backoff_seconds * 2^(attempts - 1) (at most an hour), or 'dead' once it has been
-- attempted max_attempts times; calls and tokens are added to today's usage. Returns the job's
-- state now: 'pending', 'dead', or 'lost' (the caller no longer held the lease: nothing changed).
--   SELECT pymem.learning_fail(user_id => 'alice', job_id => 1, lease_token => '...',
--                              error_kind => 'TimeoutError', error => 'the model did not answer in 20 s');
CREATE OR REPLACE FUNCTION pymem.learning_fail(
    user_id text,
    job_id bigint,
    lease_token uuid,
    error_kind text,
    error text,
    project_id text DEFAULT '',
    max_attempts integer DEFAULT 5,
    backoff_seconds double precision DEFAULT 10,
    calls integer DEFAULT 0,
    tokens bigint DEFAULT 0)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_state text;
    v_now timestamptz := pg_catalog.clock_timestamp();  -- a value: Citus refuses volatile functions in an UPDATE
BEGIN
    PERFORM pymem._tenant_enter(learning_fail.project_id);
    PERFORM pymem._learning_check(1, 1, learning_fail.max_attempts);
    IF learning_fail.error_kind IS NULL OR learning_fail.error_kind = '' OR pg_catalog.length(learning_fail.error_kind) > 100 THEN
        RAISE EXCEPTION 'pymem: error_kind must be a short name of the failure (1 to 100 characters)' USING ERRCODE = '22023';
    END IF;
    IF learning_fail.backoff_seconds IS NULL OR NOT (learning_fail.backoff_seconds >= 0 AND learning_fail.backoff_seconds <= 3600) THEN
        RAISE EXCEPTION 'pymem: backoff_seconds must be between 0 and 3600' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._conv_check(learning_fail.project_id, learning_fail.user_id, NULL, 'exact');
    PERFORM pymem._learning_spent_check(learning_fail.calls, learning_fail.tokens);
    IF NOT pymem._learning_lease(learning_fail.project_id, learning_fail.user_id, learning_fail.job_id,
                                 learning_fail.lease_token) THEN  -- the lease first, as learning_complete
        PERFORM pymem._learning_spent_lost(learning_fail.project_id, learning_fail.user_id, learning_fail.job_id,
                                           learning_fail.calls, learning_fail.tokens);
        RETURN 'lost';
    END IF;
    PERFORM pymem._learning_spent(learning_fail.project_id, learning_fail.user_id, learning_fail.calls, learning_fail.tokens);
    UPDATE pymem.learning_jobs AS j
       SET state = CASE WHEN j.attempts >= learning_fail.max_attempts THEN 'dead' ELSE 'pending' END,
           available_at = v_now + pg_catalog.make_interval(secs => LEAST(
               3600, learning_fail.backoff_seconds * 2 ^ LEAST(j.attempts - 1, 30))),
           lease_token = NULL, leased_until = NULL, error_kind = learning_fail.error_kind,
           error = pg_catalog.left(coalesce(learning_fail.error, ''), 500), updated_at = v_now
     WHERE j.project_id = learning_fail.project_id AND j.user_id = learning_fail.user_id AND j.id = learning_fail.job_id
    RETURNING j.state INTO v_state;
    RETURN v_state;
END;
$$;

-- learning_release: gives a claimed job back untouched (a worker shutting down before it ran
-- the job): pending at once, the claim's attempt not counted. false: the caller no longer held
-- the lease (nothing changed).
--   SELECT pymem.learning_release(user_id => 'alice', job_id => 1, lease_token => '...');
CREATE OR REPLACE FUNCTION pymem.learning_release(user_id text, job_id bigint, lease_token uuid, project_id text DEFAULT '')
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pymem._tenant_enter(learning_release.project_id);
    IF NOT pymem._learning_lease(learning_release.project_id, learning_release.user_id, learning_release.job_id,
                                 learning_release.lease_token) THEN
        RETURN false;
    END IF;
    UPDATE pymem.learning_jobs AS j
       SET state = 'pending', attempts = GREATEST(j.attempts - 1, 0), available_at = v_now,
           lease_token = NULL, leased_until = NULL, updated_at = v_now
     WHERE j.project_id = learning_release.project_id AND j.user_id = learning_release.user_id
       AND j.id = learning_release.job_id;
    RETURN true;
END;
$$;

-- learning_status: the project's queue at a glance, without content or user ids (the reader
-- role may call it): jobs pending (ready: claimable now, the rest wait out a backoff), running,
-- dead and skipped; the age of the oldest pending job; failures, the pending jobs that failed
-- before and the dead ones, counted by error_kind; today's (UTC) model calls, tokens and jobs
-- skipped by a cost cap.
--   SELECT * FROM pymem.learning_status(project_id => '');
CREATE OR REPLACE FUNCTION pymem.learning_status(project_id text DEFAULT '')
RETURNS TABLE (pending bigint, ready bigint, running bigint, dead bigint, skipped bigint,
               oldest_pending_seconds double precision, failures jsonb, calls_today bigint, tokens_today bigint,
               skipped_today bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pymem._tenant_enter(learning_status.project_id);
    PERFORM pymem._project_check(learning_status.project_id);
    SELECT pg_catalog.count(*) FILTER (WHERE j.state = 'pending'),
           pg_catalog.count(*) FILTER (WHERE j.state = 'pending' AND j.available_at <= v_now),
           pg_catalog.count(*) FILTER (WHERE j.state = 'running'),
           pg_catalog.count(*) FILTER (WHERE j.state = 'dead'),
           pg_catalog.count(*) FILTER (WHERE j.state = 'skipped'),
           pg_catalog.date_part('epoch', v_now - pg_catalog.min(j.created_at) FILTER (WHERE j.state = 'pending'))
      INTO pending, ready, running, dead, skipped, oldest_pending_seconds
      FROM pymem.learning_jobs AS j WHERE j.project_id = learning_status.project_id;
    SELECT coalesce(pg_catalog.jsonb_object_agg(f.kind, f.n), '{}') INTO failures
      FROM (SELECT j.error_kind AS kind, pg_catalog.count(*) AS n FROM pymem.learning_jobs AS j
             WHERE j.project_id = learning_status.project_id AND j.error_kind IS NOT NULL AND j.state <> 'skipped'
             GROUP BY j.error_kind) AS f;
    SELECT coalesce(pg_catalog.sum(u.calls), 0), coalesce(pg_catalog.sum(u.tokens), 0),
           coalesce(pg_catalog.sum(u.skipped), 0)
      INTO calls_today, tokens_today, skipped_today
      FROM pymem.learning_usage AS u
     WHERE u.project_id = learning_status.project_id AND u.day = (pg_catalog.now() AT TIME ZONE 'UTC')::date;
    RETURN NEXT;
END;
$$;

-- learning_jobs: the project's jobs in job_state ('pending', 'running', 'dead', 'skipped'; NULL:
-- every one), oldest first, at most max_jobs, with their last error (error_kind, error): what an
-- operator reads before learning_requeue. Not for the reader role (error texts).
--   SELECT id, user_id, state, attempts, error_kind, error FROM pymem.learning_jobs(job_state => 'dead');
CREATE OR REPLACE FUNCTION pymem.learning_jobs(project_id text DEFAULT '', job_state text DEFAULT NULL,
                                               max_jobs integer DEFAULT 100)
RETURNS TABLE (id bigint, user_id text, thread_id text, seq bigint, state text, attempts integer,
               available_at timestamptz, leased_until timestamptz, error_kind text, error text,
               created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(learning_jobs.project_id);
    PERFORM pymem._project_check(learning_jobs.project_id);
    PERFORM pymem._check_limit('max_jobs', learning_jobs.max_jobs);
    IF learning_jobs.job_state NOT IN ('pending', 'running', 'dead', 'skipped') THEN
        RAISE EXCEPTION 'pymem: job_state must be pending, running, dead or skipped (NULL: every job), not %',
                        pg_catalog.quote_literal(learning_jobs.job_state) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT j.id, j.user_id, j.thread_id, j.seq, j.state, j.attempts, j.available_at, j.leased_until, j.error_kind,
           j.error, j.created_at, j.updated_at
      FROM pymem.learning_jobs AS j
     WHERE j.project_id = learning_jobs.project_id
       AND (learning_jobs.job_state IS NULL OR j.state = learning_jobs.job_state)
     ORDER BY j.id
     LIMIT learning_jobs.max_jobs;
END;
$$;

-- learning_requeue: the project's dead (or, with state => 'skipped', skipped) jobs are pending
-- again, from their first attempt, keeping their place in each user's order: after the model
-- or the cap was fixed. Returns how many.
--   SELECT pymem.learning_requeue(project_id => '', state => 'dead');
CREATE OR REPLACE FUNCTION pymem.learning_requeue(project_id text DEFAULT '', state text DEFAULT 'dead')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_n integer;
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pymem._tenant_enter(learning_requeue.project_id);
    PERFORM pymem._project_check(learning_requeue.project_id);
    IF learning_requeue.state IS NULL OR learning_requeue.state NOT IN ('dead', 'skipped') THEN
        RAISE EXCEPTION 'pymem: state must be dead or skipped, not %', coalesce(pg_catalog.quote_literal(learning_requeue.state), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    UPDATE pymem.learning_jobs AS j
       SET state = 'pending', attempts = 0, available_at = v_now, error_kind = NULL, error = NULL, updated_at = v_now
     WHERE j.project_id = learning_requeue.project_id AND j.state = learning_requeue.state;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

-- learning_limits_configure: sets the project's cost caps per UTC day (NULL: no such cap; every
-- one NULL removes them): model calls and tokens (as the model's endpoint reports them) of one
-- user, and of the whole project. A job whose user or project is past a cap when it would be
-- claimed is skipped (learning_claim), its turn kept. For administrators (no grant to the app or
-- reader role). Returns the caps in force.
--   SELECT * FROM pymem.learning_limits_configure(project_id => '', user_calls_per_day => 200);
CREATE OR REPLACE FUNCTION pymem.learning_limits_configure(
    project_id text DEFAULT '',
    user_calls_per_day integer DEFAULT NULL,
    project_calls_per_day integer DEFAULT NULL,
    user_tokens_per_day bigint DEFAULT NULL,
    project_tokens_per_day bigint DEFAULT NULL)
RETURNS SETOF pymem.learning_limits
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pymem._tenant_enter(learning_limits_configure.project_id);
    PERFORM pymem._project_check(learning_limits_configure.project_id);
    IF learning_limits_configure.user_calls_per_day < 0 OR learning_limits_configure.project_calls_per_day < 0
       OR learning_limits_configure.user_tokens_per_day < 0 OR learning_limits_configure.project_tokens_per_day < 0 THEN
        RAISE EXCEPTION 'pymem: a cap is a count (>= 0), or NULL for none' USING ERRCODE = '22023';
    END IF;
    IF learning_limits_configure.user_calls_per_day IS NULL AND learning_limits_configure.project_calls_per_day IS NULL
       AND learning_limits_configure.user_tokens_per_day IS NULL AND learning_limits_configure.project_tokens_per_day IS NULL THEN
        DELETE FROM pymem.learning_limits AS l WHERE l.project_id = learning_limits_configure.project_id;
        RETURN QUERY SELECT learning_limits_configure.project_id, NULL::integer, NULL::integer, NULL::bigint,
                            NULL::bigint, pg_catalog.clock_timestamp();
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO pymem.learning_limits AS l (project_id, user_calls_per_day, project_calls_per_day, user_tokens_per_day,
                                            project_tokens_per_day, updated_at)
    VALUES (learning_limits_configure.project_id, learning_limits_configure.user_calls_per_day,
            learning_limits_configure.project_calls_per_day, learning_limits_configure.user_tokens_per_day,
            learning_limits_configure.project_tokens_per_day, v_now)
    ON CONFLICT (project_id) DO UPDATE
       SET user_calls_per_day = excluded.user_calls_per_day, project_calls_per_day = excluded.project_calls_per_day,
           user_tokens_per_day = excluded.user_tokens_per_day, project_tokens_per_day = excluded.project_tokens_per_day,
           updated_at = v_now  -- a value: Citus refuses a volatile function in DO UPDATE SET
    RETURNING l.*;
END;
$$;

-- learning_limits: the project's cost caps (every cap NULL: none).
--   SELECT * FROM pymem.learning_limits(project_id => '');
CREATE OR REPLACE FUNCTION pymem.learning_limits(project_id text DEFAULT '')
RETURNS SETOF pymem.learning_limits
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(learning_limits.project_id);
    PERFORM pymem._project_check(learning_limits.project_id);
    RETURN QUERY
    SELECT l.* FROM pymem.learning_limits AS l WHERE l.project_id = learning_limits.project_id
    UNION ALL
    SELECT learning_limits.project_id, NULL::integer, NULL::integer, NULL::bigint, NULL::bigint, NULL::timestamptz
     WHERE NOT EXISTS (SELECT 1 FROM pymem.learning_limits AS l WHERE l.project_id = learning_limits.project_id);
END;
$$;
