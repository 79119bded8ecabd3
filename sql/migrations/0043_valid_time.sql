-- 0043_valid_time: facts are bi-temporal. A fact version already knows when it was believed
-- (record time: created_at to superseded_at); it now also says when it holds in the world (valid
-- time): valid_from (NULL: since always, or not known) to valid_to (NULL: still holds), a
-- half-open range [valid_from, valid_to). Set by fact_add, facts_add_many, fact_supersede (the new
-- version says from when it holds) and learned facts; read by facts_at (api/facts_versions.sql):
-- "what was true at T" (valid_at), "what did we believe at T" (as_of), or both. The default read
-- asks "what do we believe now about now": pymem.active_facts, redefined here, keeps a fact only
-- while its valid time holds now (pymem._fact_valid, api/00_common.sql, is the one definition; the
-- view says it in its own words for the roles that read it without EXECUTE, as 0037 did for
-- expiry). The view stays a simple view over the newest-first partial indexes: the two columns
-- are tested on the rows those indexes return (tests/facts/test_fact_valid_time.py).
--
-- ADD COLUMN without a default changes only the catalog. No CHECK on them, as for expires_at
-- (0037): validating one would scan the table under this migration's exclusive lock, and a NOT
-- VALID one leaves the table with a constraint nobody validated; the writes check the values
-- (22023: pymem._valid_time, valid_from before valid_to, finite times). shared_facts (the copies a Citus cluster keeps, written
-- with SELECT *) gains the same columns in the same order. Applied once under the migration lock.
ALTER TABLE pymem.facts ADD COLUMN valid_from timestamptz, ADD COLUMN valid_to timestamptz;
COMMENT ON COLUMN pymem.facts.valid_from IS
    'When the fact starts to hold in the world (valid time); NULL: since always, or not known';
COMMENT ON COLUMN pymem.facts.valid_to IS
    'When the fact stops holding in the world (exclusive); NULL: it still holds';
ALTER TABLE pymem.shared_facts ADD COLUMN valid_from timestamptz, ADD COLUMN valid_to timestamptz;
-- fact_chain's rows carry them too, after expires_at (a new attribute goes last)
ALTER TYPE pymem.fact_version ADD ATTRIBUTE valid_from timestamptz, ADD ATTRIBUTE valid_to timestamptz;

CREATE OR REPLACE VIEW pymem.active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.facts AS f
     WHERE f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
       AND (f.valid_from IS NULL OR f.valid_from OPERATOR(pg_catalog.<=) pg_catalog.now())
       AND (f.valid_to IS NULL OR f.valid_to OPERATOR(pg_catalog.>) pg_catalog.now());
CREATE OR REPLACE VIEW pymem.shared_active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.shared_facts AS f
     WHERE f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
       AND (f.valid_from IS NULL OR f.valid_from OPERATOR(pg_catalog.<=) pg_catalog.now())
       AND (f.valid_to IS NULL OR f.valid_to OPERATOR(pg_catalog.>) pg_catalog.now());
COMMENT ON VIEW pymem.active_facts IS
    'The active facts (not superseded, not expired, holding now): what every read of active facts reads';
