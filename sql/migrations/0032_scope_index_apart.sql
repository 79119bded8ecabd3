-- 0032_scope_index_apart: the scope-wide newest-first index of active facts can serve only the
-- scope-wide reads (scope_id '*'), never a read of one subject. Applied once under the migration
-- lock.
--
-- Before the first ANALYZE of pymem.facts (a new deployment, a table that grew fast before
-- autovacuum came round), the planner costs a subject's newest-first read the same on
-- facts_subject_active_newest and on facts_scope_active_newest, and took the second: it walked the
-- whole scope's active facts newest first and filtered out every other subject's (5,081 facts:
-- 56,187 rows removed for 14 returned, 18 ms instead of 0.1). The scope-wide index is now partial
-- on "superseded_at IS NULL", which the scope-wide reads state and a subject's reads (which say
-- "superseded_by IS NULL") do not: the planner cannot prove the predicate for them, so the index
-- is not a candidate. The two predicates hold for the same rows (CHECK facts_superseded_pair).
-- CREATE INDEX blocks writes to pymem.facts while it reads the table once (reads go on).
DROP INDEX pymem.facts_scope_active_newest;
CREATE INDEX facts_scope_active_newest ON pymem.facts (project_id, scope, created_at DESC, id DESC)
    WHERE superseded_at IS NULL;
COMMENT ON INDEX pymem.facts_scope_active_newest IS
    'Newest-first reads across a scope (scope_id ''*''); partial on superseded_at so that no read of one subject takes it';
