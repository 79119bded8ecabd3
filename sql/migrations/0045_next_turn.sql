-- 0045_next_turn (renumbered when merged): recall can bring the turn after each recalled turn
-- (issue 32, item 4: in a conversation the answer often sits one message after the question that
-- matches). recall_spec gains the weight of that turn, next_turn_weight, and messages_recall,
-- context_read and _recall_spec gain the parameter of that name; a parameter cannot be added in
-- place, so their old signatures are dropped here (by name: each has one) and the API refresh of
-- the same migrate creates the new ones. Applied once under the migration lock; between this
-- migration and the API refresh (a few hundred milliseconds) a call of these fails with 42883.
DROP FUNCTION IF EXISTS pymem.messages_recall;
DROP FUNCTION IF EXISTS pymem.context_read;
DROP FUNCTION IF EXISTS pymem._recall_spec;

ALTER TYPE pymem.recall_spec ADD ATTRIBUTE next_turn_weight double precision;  -- 0: no next turns
