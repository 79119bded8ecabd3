-- 0046_recall_builder: recall's knobs at the surface as one value (issue 55, item 1).
-- messages_recall and context_read take `recall pymem.recall_spec DEFAULT pymem.recall()` instead
-- of their flat knobs; pymem.recall(...) (api/00_common.sql) builds the spec and holds recall's only
-- defaults; pymem._recall_check(spec) replaces _recall_spec(...) (whose own defaults had drifted).
-- The parameters shrink, which cannot be done in place, so the old signatures are dropped here (by
-- name: each has one) and the API refresh of the same migrate creates the new ones. Applied once
-- under the migration lock; between this migration and the API refresh (a few hundred
-- milliseconds) a call of these fails with 42883.
DROP FUNCTION IF EXISTS pymem.messages_recall;
DROP FUNCTION IF EXISTS pymem.context_read;
DROP FUNCTION IF EXISTS pymem._recall_spec;

COMMENT ON TYPE pymem.recall_spec IS
    'How recall ranks: built by pymem.recall(...), taken by messages_recall and context_read as recall';
