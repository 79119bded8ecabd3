-- 0035_active_facts: "an active fact" has one name. pymem.active_facts is the facts that are
-- the newest version of their history (not superseded); every read of active facts reads it
-- instead of spelling the condition out (facts_newest, facts_search, context_read's facts,
-- facts_unembedded, user_export). A later definition of "active" (an expiry, say) changes this
-- view and nothing else of the reads. Writes keep naming pymem.facts: the idempotent add's
-- arbiter is the unique index facts_subject_content_key, partial on the same condition.
--
-- security_invoker: the view reads with the rights of whoever reads it, so the tables' forced
-- row-level security binds it as it binds pymem.facts (the API functions read it as the owner,
-- within the tenant their project_id names). It is granted to no one, like the tables. A simple
-- view: the planner inlines it, so every partial index of pymem.facts serves it as before
-- (tests/facts/test_facts_plans.py). shared_active_facts is its twin over pymem.shared_facts,
-- the copies a Citus cluster reads (sql/citus.sql renames the one into the other in the copied
-- bodies). Applied once under the migration lock.
CREATE VIEW pymem.active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.facts AS f WHERE f.superseded_by IS NULL;
COMMENT ON VIEW pymem.active_facts IS 'The active facts (not superseded): what every read of active facts reads';

CREATE VIEW pymem.shared_active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.shared_facts AS f WHERE f.superseded_by IS NULL;
COMMENT ON VIEW pymem.shared_active_facts IS 'The active facts of pymem.shared_facts (empty off Citus)';
