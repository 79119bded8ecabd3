-- 0013_message_times: messages imported with their real times, their metadata read back, and a
-- recall threshold. message_add and turn_record take created_at (turn_record also the two
-- messages' metadata); window_read and messages_recall return each message's metadata (the row
-- type recalled_message gains it); messages_recall and context_read take min_score. A function
-- whose parameters or result type change cannot be replaced in place, so the old signatures are
-- dropped here (by name: each has one) and the API refresh of the same migrate creates the new
-- ones. Applied once under the migration lock.
DROP FUNCTION IF EXISTS pymem.message_add;
DROP FUNCTION IF EXISTS pymem.turn_record;
DROP FUNCTION IF EXISTS pymem.window_read;
DROP FUNCTION IF EXISTS pymem.messages_recall;
DROP FUNCTION IF EXISTS pymem.context_read;
DROP FUNCTION IF EXISTS pymem._message_check;
DROP FUNCTION IF EXISTS pymem._message_insert;
DROP FUNCTION IF EXISTS pymem._window;
DROP FUNCTION IF EXISTS pymem._recall_check;
DROP FUNCTION IF EXISTS pymem._recall_ranked;

ALTER TYPE pymem.recalled_message ADD ATTRIBUTE metadata jsonb;
