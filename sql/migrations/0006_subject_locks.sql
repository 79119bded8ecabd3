-- 0006_subject_locks: the lock that keeps a subject's cap on learned facts true under
-- concurrency. Applied once under the migration lock (search_path pg_catalog, pymem, pg_temp).
--
-- Until 0.1 writers of learned facts took a per-subject advisory lock. Its key was computable
-- by anyone and advisory locks need no privilege, so a role confined to one tenant could hold
-- another tenant's key and stall that tenant's writes. A row of this table is locked instead
-- (SELECT ... FOR UPDATE inside pymem._subject_lock): locking a row needs UPDATE on the table,
-- which only pymem's owner has, and forced row-level security shows each tenant only its own
-- rows. A subject's row goes with its facts (facts_forget).
CREATE TABLE pymem.subject_locks (
    project_id text NOT NULL,
    scope      text NOT NULL,
    scope_id   text NOT NULL,
    CONSTRAINT subject_locks_pkey PRIMARY KEY (project_id, scope, scope_id)
);

COMMENT ON TABLE pymem.subject_locks IS 'One row per subject whose learned-fact writers serialise on it (row lock)';

ALTER TABLE pymem.subject_locks ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.subject_locks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.subject_locks
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
