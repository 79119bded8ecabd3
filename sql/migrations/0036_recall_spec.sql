-- 0036_recall_spec: recall's knobs travel as one checked value. messages_recall and context_read
-- take them as named parameters (their SQL API is unchanged); pymem._recall_spec checks them once
-- and returns a pymem.recall_spec, which is what _recall and _recall_ranked take, instead of twelve
-- positional parameters (four double precision side by side) that a reordering would silently
-- swap. The fields carry the names of the API's parameters. Applied once under the migration lock.
CREATE TYPE pymem.recall_spec AS (
    k                 integer,           -- rows to rank and return
    min_content_chars integer,           -- shorter messages are not recalled
    window_size       integer,           -- the thread's last window_size messages are not recalled
    recency_weight    double precision,  -- weights of the score: recency, importance, the rest relevance
    importance_weight double precision,
    lexical_weight    double precision,  -- the lexical share of relevance (with a vector and terms)
    half_life_seconds double precision,  -- recency halves every half_life_seconds
    min_score         double precision,  -- NULL: no threshold
    as_of             timestamptz,       -- NULL: now; else the messages that existed then
    since             timestamptz,       -- messages created in [since, until) (NULL: unbounded)
    until             timestamptz,
    metadata          jsonb              -- NULL, or an object the message's metadata must contain
);

COMMENT ON TYPE pymem.recall_spec IS 'Recall''s checked parameters (pymem._recall_spec), as _recall takes them';
