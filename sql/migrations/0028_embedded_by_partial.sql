-- 0028_embedded_by_partial: the catch-up index on pymem.messages split into two partial indexes
-- that the foreign-key check of message_embeddings -> messages cannot use.
-- Applied once under the migration lock.
--
-- That check (PostgreSQL's own: SELECT 1 FROM ONLY messages x WHERE project_id = $1 AND
-- user_id = $2 AND thread_id = $3 AND seq = $4 FOR KEY SHARE) runs for every vector stored. When
-- statistics make a user look like a row or two (a young table, many light users; generic plans
-- always), it was planned on messages_embedded_by (project_id, user_id, embedded_by), the smaller
-- index, with thread_id and seq as a filter: every vector stored read all of its user's messages
-- (bench/README.md, "Plans", 4). The catch-up (_messages_unembedded) reads three ranges: the
-- messages with no vector (embedded_by IS NULL), and those embedded by another embedder (below
-- and above the current one's name). Each partial index serves its ranges, and neither predicate
-- follows from the check's conditions, so the check has only the primary key left.
CREATE INDEX messages_unembedded ON pymem.messages (project_id, user_id) WHERE embedded_by IS NULL;
DROP INDEX pymem.messages_embedded_by;
CREATE INDEX messages_embedded_by ON pymem.messages (project_id, user_id, embedded_by) WHERE embedded_by IS NOT NULL;
COMMENT ON INDEX pymem.messages_unembedded IS 'The catch-up: a user''s messages with no vector yet';
COMMENT ON INDEX pymem.messages_embedded_by IS 'The catch-up: a user''s messages last embedded by another embedder';
