-- 01_recall_spec.sql: recall(), the builder of the recall spec (pymem.recall_spec, the value
-- messages_recall and context_read take as `recall`), holding recall's only SQL defaults; Python's
-- pymem.RecallOptions mirrors it field by field (tests/python/test_options.py). Named 01_ so that it
-- is created before context.sql and conversations_recall.sql, whose signatures name it in a
-- DEFAULT. Re-applied (CREATE OR REPLACE) on every migrate; no locks, no data.

-- recall: a recall spec, the value messages_recall and context_read take as `recall` (their
-- DEFAULT is recall()); every parameter is optional, and these defaults are recall's only ones (the
-- fields: migrations/0036_recall_spec.sql and 0044). k rows; messages shorter than
-- min_content_chars and the thread's last window_size are not recalled (context_read's window is
-- those window_size); score = (1 - recency_weight - importance_weight) * relevance + recency_weight *
-- 0.5 ^ (age / half_life_seconds) + importance_weight * importance, relevance's lexical share
-- lexical_weight; min_score (NULL: none) a threshold; as_of a past point (facts too, in
-- context_read), [since, until) and metadata (jsonb @>) filters; next_turn_weight the turns after a
-- recalled one, time_weight the bonus of [time_from, time_to). Unchecked here: the functions that
-- take it check it (22023). No SET clause, so that it inlines into the call.
--   SELECT pymem.recall(k => 3, lexical_weight => 0.5);
CREATE OR REPLACE FUNCTION pymem.recall(
    k integer DEFAULT 5, min_content_chars integer DEFAULT 10, window_size integer DEFAULT 20,
    recency_weight double precision DEFAULT 0, importance_weight double precision DEFAULT 0,
    lexical_weight double precision DEFAULT 0.33, half_life_seconds double precision DEFAULT 3600,
    min_score double precision DEFAULT NULL, as_of timestamptz DEFAULT NULL, since timestamptz DEFAULT NULL,
    until timestamptz DEFAULT NULL, metadata jsonb DEFAULT NULL, next_turn_weight double precision DEFAULT 0.8,
    time_from timestamptz DEFAULT NULL, time_to timestamptz DEFAULT NULL, time_weight double precision DEFAULT 0.2)
RETURNS pymem.recall_spec
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT ROW(k, min_content_chars, window_size, recency_weight, importance_weight, lexical_weight,
               half_life_seconds, min_score, as_of, since, until, metadata, next_turn_weight, time_from, time_to,
               time_weight)::pymem.recall_spec
$$;
