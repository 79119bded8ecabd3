-- 0049_learning_backfill: how far each thread's stored turns were queued for learning by a
-- backfill (pymem.learning_backfill, api/learning_backfill.sql): the thread's user messages with
-- seq <= learning_backfilled_through were looked at once and are never queued by a backfill
-- again. A column of pymem.threads: it goes with the thread's row (erased, forgotten and, on a
-- Citus cluster, placed with it). ADD COLUMN with a constant default changes only the catalog (no
-- table rewrite). Applied once under the migration lock.
ALTER TABLE pymem.threads ADD COLUMN learning_backfilled_through bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN pymem.threads.learning_backfilled_through IS
    'The thread''s messages up to this seq were looked at by a learning backfill (pymem.learning_backfill): never queued by one again';
