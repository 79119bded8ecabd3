-- recall_spec.sql: the recall spec (pymem.recall_spec, migrations/0006_v0_2_0_memory.sql),
-- the value messages_recall and context_read take as `recall`: recall(), its builder, which holds
-- recall's only SQL defaults (Python's pymem.RecallOptions mirrors it field by field,
-- tests/python/test_options.py); _recall_check, its checks; _names_time, whether it names a time.
-- The spec of the recall family: recall.sql (the API), recall_ranking.sql (the scores),
-- recall_indexes.sql (heavy users' index paths) all read it; it calls none of them. Re-applied
-- on every migrate (before the files whose signatures name recall() in a DEFAULT: api_order in
-- pymem/migrations.py); no locks, no data.
--
-- Errors: 22023 invalid argument (_recall_check).

-- recall: a recall spec, the value messages_recall and context_read take as `recall` (their
-- DEFAULT is recall()); every parameter is optional, and these defaults are recall's only ones (the
-- fields: migrations/0006_v0_2_0_memory.sql). k rows; messages shorter than
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

-- _recall_check(spec): a recall spec (pymem.recall(), or any value of pymem.recall_spec) checked, as
-- messages_recall and context_read take it and _recall ranks with it. k, min_content_chars,
-- window_size: 0..the limit of _check_limit. recency_weight and importance_weight in 0..1, summing
-- to at most 1. half_life_seconds positive. min_score NULL (no threshold) or in -1..1, the range of
-- a score. lexical_weight, next_turn_weight and time_weight in 0..1. as_of, since and until: finite
-- when given; time_from and time_to both NULL or both finite, time_from first. metadata NULL or an
-- object. A NULL spec is refused.
CREATE OR REPLACE FUNCTION pymem._recall_check(p_spec pymem.recall_spec)
RETURNS pymem.recall_spec
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF p_spec IS NULL THEN  -- NULL, or a row of NULLs
        RAISE EXCEPTION 'pymem: recall must be a recall spec (pymem.recall(...)), not NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._check_limit('k', p_spec.k);
    PERFORM pymem._check_limit('min_content_chars', p_spec.min_content_chars);
    PERFORM pymem._check_limit('window_size', p_spec.window_size);
    IF p_spec.recency_weight IS NULL OR p_spec.importance_weight IS NULL
       OR NOT (p_spec.recency_weight >= 0 AND p_spec.recency_weight <= 1)
       OR NOT (p_spec.importance_weight >= 0 AND p_spec.importance_weight <= 1)
       OR p_spec.recency_weight + p_spec.importance_weight > 1 THEN
        RAISE EXCEPTION 'pymem: recency_weight and importance_weight must each be in 0..1 and sum to at most 1 (got % and %)',
                p_spec.recency_weight, p_spec.importance_weight
            USING ERRCODE = '22023';
    END IF;
    IF p_spec.half_life_seconds IS NULL
       OR NOT (p_spec.half_life_seconds > 0 AND p_spec.half_life_seconds < 'Infinity'::float8) THEN
        RAISE EXCEPTION 'pymem: half_life_seconds must be a positive number' USING ERRCODE = '22023';
    END IF;
    IF p_spec.min_score IS NOT NULL AND NOT (p_spec.min_score >= -1 AND p_spec.min_score <= 1) THEN
        RAISE EXCEPTION 'pymem: min_score must be between -1 and 1, or NULL for no threshold (got %)', p_spec.min_score
            USING ERRCODE = '22023';
    END IF;
    IF p_spec.lexical_weight IS NULL OR NOT (p_spec.lexical_weight >= 0 AND p_spec.lexical_weight <= 1) THEN
        RAISE EXCEPTION 'pymem: lexical_weight must be between 0 and 1 (got %)', p_spec.lexical_weight
            USING ERRCODE = '22023';
    END IF;
    IF p_spec.next_turn_weight IS NULL OR NOT (p_spec.next_turn_weight >= 0 AND p_spec.next_turn_weight <= 1) THEN
        RAISE EXCEPTION 'pymem: next_turn_weight must be between 0 and 1 (got %)', p_spec.next_turn_weight
            USING ERRCODE = '22023';
    END IF;
    IF p_spec.time_weight IS NULL OR NOT (p_spec.time_weight >= 0 AND p_spec.time_weight <= 1) THEN
        RAISE EXCEPTION 'pymem: time_weight must be between 0 and 1 (got %)', p_spec.time_weight USING ERRCODE = '22023';
    END IF;
    IF (p_spec.time_from IS NULL) <> (p_spec.time_to IS NULL)
       OR NOT pg_catalog.isfinite(coalesce(p_spec.time_from, '2000-01-01'))
       OR NOT pg_catalog.isfinite(coalesce(p_spec.time_to, '2000-01-01')) OR p_spec.time_from >= p_spec.time_to THEN
        RAISE EXCEPTION 'pymem: time_from and time_to name a time together, finite, time_from before time_to (got % and %)',
                p_spec.time_from, p_spec.time_to USING ERRCODE = '22023';
    END IF;
    IF NOT pg_catalog.isfinite(coalesce(p_spec.as_of, '2000-01-01'))
       OR NOT pg_catalog.isfinite(coalesce(p_spec.since, '2000-01-01'))
       OR NOT pg_catalog.isfinite(coalesce(p_spec.until, '2000-01-01')) THEN
        RAISE EXCEPTION 'pymem: as_of, since and until must be finite times (or NULL)' USING ERRCODE = '22023';
    END IF;
    IF p_spec.metadata IS NOT NULL AND pg_catalog.jsonb_typeof(p_spec.metadata) <> 'object' THEN
        RAISE EXCEPTION 'pymem: a metadata filter must be a JSON object, not %', pg_catalog.jsonb_typeof(p_spec.metadata)
            USING ERRCODE = '22023';
    END IF;
    RETURN p_spec;
END;
$$;

-- _names_time(spec): whether a recall spec names a time that counts: time_from and time_to given
-- (_recall_check checks them together) and a time_weight above 0. Then _recall_turns adds the bonus,
-- and _recall / _recall_ranked return the named time's k best beside the k best.
CREATE OR REPLACE FUNCTION pymem._names_time(p_spec pymem.recall_spec)
RETURNS boolean
LANGUAGE sql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$ SELECT p_spec.time_from IS NOT NULL AND coalesce(p_spec.time_weight > 0, false) $$;
