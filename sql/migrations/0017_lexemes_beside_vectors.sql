-- 0017_lexemes_beside_vectors: each message vector carries its message's lexemes and length, so
-- that hybrid recall reads a user's rows once. Applied once under the migration lock.
--
-- Hybrid recall (a query vector and a query text: Memory.recall's default) used to read the
-- user's vectors (pymem.message_embeddings) and, separately, the user's lexemes
-- (pymem.message_lexemes). A user's rows of either table lie on as many heap pages as the user
-- has messages (interleaved with every other user's), so the second read cost as much as the
-- first: measured on bench/conversations.py --messages 100000, 2.1 ms to read the 1,000-message
-- probe's lexeme rows against 2.6 ms for its vectors. With the lexemes in the vector row, the
-- vector read is the only one. message_lexemes stays: recall by text alone (no vector) reads it.
--
-- Two columns, NULL for the vectors stored before this migration: recall takes their lexemes
-- from message_lexemes by primary key (same ranking, one index probe per such row), and
-- pymem.message_lexemes_backfill() (api/conversations.sql) fills them in batches of short
-- transactions. Nothing is rewritten here: adding a nullable column without a default touches
-- no row; the one index below reads the table once. The writers of vectors
-- (message_embeddings_put, turn_record) copy the lexemes from the message, like they copy its
-- length, importance and time.
--
-- Size: ~350 bytes per vector row beside ~1,550 for a 384-d vector.

ALTER TABLE pymem.message_embeddings ADD COLUMN lexemes tsvector, ADD COLUMN tokens integer;

-- the vectors still to fill, for message_lexemes_backfill: a partial index that holds the old rows
-- only (a new vector has its lexemes, so writes never touch it) and shrinks as they are filled.
-- Building it reads the table once.
CREATE INDEX message_embeddings_without_lexemes ON pymem.message_embeddings (project_id) WHERE lexemes IS NULL;

COMMENT ON COLUMN pymem.message_embeddings.lexemes IS 'the message''s lexemes (pymem._lexemes of its content); NULL: stored before 0017, see message_lexemes';

-- context_read's facts helper returns the four columns a context shows (it returned whole fact
-- rows, read a second time after ranking): the API refresh of the same migrate recreates it.
DROP FUNCTION IF EXISTS pymem._facts_for_context;
