-- 0018_learned_changes: turn_record takes the fact changes a reconciling learner decided
-- (fact_changes: add, update, delete of the user's facts) and reports what each one did
-- (result column changes), so that a turn's messages and every change to the user's facts land
-- in one transaction (api/conversations.sql, turn_record). Applied once under the migration lock.
--
-- A new parameter with a default would be a second overload beside the old signature (every
-- named call then ambiguous), and the result type changes: the old function is dropped here (by
-- name: it has one signature; nothing stored depends on it) and the API refresh of the same
-- migrate creates the new one.
DROP FUNCTION IF EXISTS pymem.turn_record;
