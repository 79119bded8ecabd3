-- 0037_fact_expiry: a fact can expire. facts.expires_at (NULL: never) is set by the writes that
-- take an expiry (fact_add, facts_add_many, fact_supersede, learned facts: `expires_at`, or a
-- `ttl` from which it is computed); every version of a history carries its newest version's
-- expiry, so a history expires as one. A fact is active when it is not superseded and not
-- expired: the view pymem.active_facts, redefined here, is what every read of active facts reads,
-- so an expired fact is invisible at once, without a purge; the reads of history (fact_history,
-- fact_chain, fact_get, browse_subjects, user_export) skip expired rows too (pymem._fact_live,
-- api/00_common.sql).
-- pymem.purge deletes expired facts in bounded batches, through facts_expiring (below).
--
-- ADD COLUMN without a default changes only the catalog (no rewrite of the table, no scan). No
-- CHECK on it: validating one would scan the table under the migration's exclusive lock, and
-- the writes that set it check it (pymem._expiry: finite, in the future, within 100 years).
-- shared_facts (the copies a Citus cluster keeps) changes the same way, in the same order of
-- columns (the copies are written with SELECT *). Applied once under the migration lock.
ALTER TABLE pymem.facts ADD COLUMN expires_at timestamptz;
COMMENT ON COLUMN pymem.facts.expires_at IS
    'When the fact (with its history) stops being visible; NULL: never. pymem.purge deletes it after';
ALTER TABLE pymem.shared_facts ADD COLUMN expires_at timestamptz;
-- fact_chain's rows (a fact's history) carry it too, after depth (a new attribute goes last)
ALTER TYPE pymem.fact_version ADD ATTRIBUTE expires_at timestamptz;

-- what a purge reads: the expiring facts of a project, soonest first (partial: empty while no
-- fact has an expiry)
CREATE INDEX facts_expiring ON pymem.facts (project_id, expires_at) WHERE expires_at IS NOT NULL;

-- The view says "not expired" in the words of pymem._fact_live (api/00_common.sql), the reads of
-- history's one definition of it, and not through it: a role given SELECT on the tables (an
-- analyst) reads the view with its own rights, and no internal function is executable by it.
-- tests/facts/test_fact_expiry.py checks that the two say the same.
CREATE OR REPLACE VIEW pymem.active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.facts AS f
     WHERE f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at OPERATOR(pg_catalog.>) pg_catalog.now());
CREATE OR REPLACE VIEW pymem.shared_active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.shared_facts AS f
     WHERE f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at OPERATOR(pg_catalog.>) pg_catalog.now());
COMMENT ON VIEW pymem.active_facts IS 'The active facts (not superseded, not expired): what every read of active facts reads';
