-- 0009_result_types: one column name per concept across the SQL API. messages_recall returned
-- `thread` and facts_search `subject_id`, because PostgreSQL forbids an output column named like
-- an input parameter (both take thread_id / scope_id). They now return these row types, whose
-- fields carry the names every other function uses. A function's result type cannot change in
-- place, so the old ones are dropped here (by name: each has one signature) and the API refresh
-- of the same migrate creates the new ones. Applied once under the migration lock.
CREATE TYPE pymem.recalled_message AS (
    thread_id  text,
    seq        bigint,
    role       text,
    content    text,
    created_at timestamptz,
    importance double precision,
    similarity double precision,
    score      double precision
);

COMMENT ON TYPE pymem.recalled_message IS 'A row of pymem.messages_recall';

CREATE TYPE pymem.fact_match AS (
    id         bigint,
    scope_id   text,
    content    text,
    confidence double precision,
    source     text,
    metadata   jsonb,
    created_at timestamptz,
    similarity double precision
);

COMMENT ON TYPE pymem.fact_match IS 'A row of pymem.facts_search';

DROP FUNCTION IF EXISTS pymem.messages_recall;
DROP FUNCTION IF EXISTS pymem.facts_search;
