-- 0044_recall_turns_times: two additions to recall's ranking (issue 32).
-- Item 4: the turn after each recalled turn (in a conversation the answer often sits one message
-- after the turn the question matches), weighted next_turn_weight. Item 3: a time the question
-- names (time_from, time_to: the messages created in [time_from, time_to) score time_weight more).
-- recall_spec gains the four fields, and messages_recall, context_read and _recall_spec the
-- parameters of those names; a parameter cannot be added in place, so their old signatures are
-- dropped here (by name: each has one) and the API refresh of the same migrate creates the new
-- ones. Applied once under the migration lock; between this migration and the API refresh (a few
-- hundred milliseconds) a call of these fails with 42883.
DROP FUNCTION IF EXISTS pymem.messages_recall;
DROP FUNCTION IF EXISTS pymem.context_read;
DROP FUNCTION IF EXISTS pymem._recall_spec;

ALTER TYPE pymem.recall_spec
    ADD ATTRIBUTE next_turn_weight double precision,  -- 0: no next turns
    ADD ATTRIBUTE time_from timestamptz,              -- the named time: [time_from, time_to), NULL: none
    ADD ATTRIBUTE time_to timestamptz,
    ADD ATTRIBUTE time_weight double precision;       -- the named time's bonus
