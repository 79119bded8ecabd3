-- 0031_shared_facts_by_id: _shared_facts_sync takes the ids of the facts a write changed
-- (p_ids bigint[] DEFAULT NULL, in api/00_common.sql and, on Citus, sql/citus.sql).
-- Applied once under the migration lock.
--
-- On a Citus cluster every write of an agent's or a project's facts copied all of that subject's
-- facts into the reference tables again (a two-phase commit to every node whose size grew with
-- the agent's facts), and an idempotent re-add did so too. The writers now pass the ids they
-- changed. A new parameter makes a new overload: the three-argument one goes, and the API
-- refresh that follows creates the four-argument one.
DROP FUNCTION IF EXISTS pymem._shared_facts_sync(text, text, text);
