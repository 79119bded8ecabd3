-- 0041_learning_queue: deferred learning (api/learning.sql, pymem/learning.py). A turn recorded
-- with defer_learning (pymem.turn_record) stores its two messages and one learning job in the
-- same transaction; a worker claims jobs (learning_claim: FOR UPDATE SKIP LOCKED, leased),
-- runs the learner outside the database, and commits what it learned together with the job's
-- end (learning_complete), so a job's changes apply once. Tables:
--
-- learning_jobs: one row per turn still to learn from, deleted when done. A job names its turn
--   by key (thread_id, seq of the user's message), never by content. state: 'pending' (claimable
--   from available_at: a retry waits out its backoff), 'running' (leased to one worker until
--   leased_until, under lease_token; an expired lease makes it claimable again), 'dead' (failed
--   max_attempts times: error_kind and error keep the last failure) or 'skipped' (a cost cap was
--   reached: error_kind 'cost_cap', error the limit). Dead and skipped jobs stay for an operator
--   (learning_jobs, learning_requeue). Per user, only the oldest open job (pending or running)
--   may be claimed, so the changes of a user's turn 5 never apply before those of turn 4; a
--   dead or skipped job no longer holds the user's later jobs back. The jobs of a thread go
--   with it (forget_conversation, user_forget).
-- learning_usage: model calls and tokens spent by learning, per project, UTC day and user (the
--   project's total is the sum of its users' rows, so concurrent workers never share a row).
-- learning_limits: a project's cost caps per UTC day (NULL: no cap), set by administrators
--   (learning_limits_configure); a job whose user or project is past a cap is skipped when it
--   would be claimed.
-- Every table carries project_id and (but learning_limits) user_id, the tenant and the key a
-- cluster distributes them by (sql/citus.sql). Applied once under the migration lock.
CREATE TABLE pymem.learning_jobs (
    project_id   text        NOT NULL,
    user_id      text        NOT NULL,
    id           bigint      GENERATED ALWAYS AS IDENTITY,
    thread_id    text        NOT NULL,
    seq          bigint      NOT NULL,
    state        text        NOT NULL DEFAULT 'pending',
    attempts     integer     NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    leased_until timestamptz,
    lease_token  uuid,
    error_kind   text,
    error        text,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT learning_jobs_pkey PRIMARY KEY (project_id, user_id, id),
    CONSTRAINT learning_jobs_thread_fkey FOREIGN KEY (project_id, user_id, thread_id)
        REFERENCES pymem.threads (project_id, user_id, thread_id) ON DELETE CASCADE,
    CONSTRAINT learning_jobs_state_check CHECK (state IN ('pending', 'running', 'dead', 'skipped')),
    CONSTRAINT learning_jobs_lease_check CHECK ((state = 'running') = (lease_token IS NOT NULL)
                                                AND (lease_token IS NULL) = (leased_until IS NULL)),
    CONSTRAINT learning_jobs_attempts_check CHECK (attempts >= 0),
    CONSTRAINT learning_jobs_error_check CHECK (pg_catalog.length(error) <= 1000 AND pg_catalog.length(error_kind) <= 100)
);

COMMENT ON TABLE pymem.learning_jobs IS
    'Deferred learning: one row per recorded turn still to learn from (by key, no content); deleted when done';

-- the claim reads the open jobs of a project oldest first, and asks of each whether an older
-- open job of its user exists: both only over open jobs, which a drained queue has none of
CREATE INDEX learning_jobs_open ON pymem.learning_jobs (project_id, id) WHERE state IN ('pending', 'running');
CREATE INDEX learning_jobs_user_open ON pymem.learning_jobs (project_id, user_id, id)
    WHERE state IN ('pending', 'running');
-- the jobs of a thread, for the cascade of a deleted thread
CREATE INDEX learning_jobs_thread ON pymem.learning_jobs (project_id, user_id, thread_id);

CREATE TABLE pymem.learning_usage (
    project_id text    NOT NULL,
    day        date    NOT NULL,
    user_id    text    NOT NULL,
    calls      bigint  NOT NULL DEFAULT 0,
    tokens     bigint  NOT NULL DEFAULT 0,
    skipped    bigint  NOT NULL DEFAULT 0,
    CONSTRAINT learning_usage_pkey PRIMARY KEY (project_id, day, user_id),
    CONSTRAINT learning_usage_counts_check CHECK (calls >= 0 AND tokens >= 0 AND skipped >= 0)
);

COMMENT ON TABLE pymem.learning_usage IS 'Model calls and tokens spent by learning, per project, UTC day and user';

CREATE TABLE pymem.learning_limits (
    project_id             text        NOT NULL,
    user_calls_per_day     integer,
    project_calls_per_day  integer,
    user_tokens_per_day    bigint,
    project_tokens_per_day bigint,
    updated_at             timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT learning_limits_pkey PRIMARY KEY (project_id),
    CONSTRAINT learning_limits_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT learning_limits_check CHECK (user_calls_per_day >= 0 AND project_calls_per_day >= 0
                                            AND user_tokens_per_day >= 0 AND project_tokens_per_day >= 0)
);

COMMENT ON TABLE pymem.learning_limits IS 'Per project: the most model calls and tokens learning may spend per UTC day';

ALTER TABLE pymem.learning_jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.learning_jobs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.learning_jobs
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
ALTER TABLE pymem.learning_usage ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.learning_usage FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.learning_usage
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
ALTER TABLE pymem.learning_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.learning_limits FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.learning_limits
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
