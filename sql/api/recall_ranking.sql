-- recall_ranking.sql: recall's scores. The ranking's formulas (BM25 and its idf, the cosine
-- floor, recency), written once for facts_search, messages_recall and context_read; and the
-- ranking statement of a user's messages (_recall_ranked, over the rows _recall_rows reads), which
-- _recall (recall.sql) runs where no recall index serves. Part of the recall family: recall.sql
-- (the API), recall_spec.sql (the spec it ranks by), recall_indexes.sql (heavy users' index
-- paths); it calls recall_spec.sql, 00_common.sql and conversations.sql (_window_after), nothing
-- else. Re-applied (CREATE OR REPLACE) on every migrate; reads only, no locks.

-- The ranking's formulas, written once for facts_search, messages_recall and context_read. No SET
-- clause, so that they inline into the queries that call them (a SET clause stops that); every
-- function and operator in them is named with its schema, and they run as their caller, under
-- the caller's pinned path (docs/security.md "Function safety"). Each keeps the order of operations the
-- three queries had, so the scores are the same to the last bit. OPERATOR(...) takes the
-- precedence of "any other operator", whatever the operator: every sub-expression is in
-- parentheses.

-- _bm25_idf(docs, df): BM25's inverse document frequency of a term that df of docs documents hold.
CREATE OR REPLACE FUNCTION pymem._bm25_idf(docs double precision, df double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT pg_catalog.ln(1::pg_catalog.float8 OPERATOR(pg_catalog.+)
                         (((docs OPERATOR(pg_catalog.-) df) OPERATOR(pg_catalog.+) 0.5::pg_catalog.float8)
                          OPERATOR(pg_catalog./) (df OPERATOR(pg_catalog.+) 0.5::pg_catalog.float8)))
$$;

-- _bm25(weight, tf, dl, avgdl, b): BM25 (k1 1.2, length normalisation b) of a term weighed
-- `weight` (its idf, or the sum of the idfs of the terms a message holds, each counted once: tf 1)
-- that occurs tf times in a document of dl tokens, documents averaging avgdl. Facts are scored
-- with b 0.75; recall of messages with b 0.3: a conversation's turns are short and of very
-- different lengths, and with b 0.75 a short reply holding one query word ("Yes, the concert!")
-- outscored the long turn that answers; b 0.3 raised evidence recall on the development data
-- (bench/reports/2026-12-04-recall4) and anything between 0.2 and 0.4 gave nearly the same.
CREATE OR REPLACE FUNCTION pymem._bm25(weight double precision, tf double precision, dl double precision,
                                       avgdl double precision, b double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT ((weight OPERATOR(pg_catalog.*) tf) OPERATOR(pg_catalog.*) 2.2::pg_catalog.float8)
           OPERATOR(pg_catalog./)
           (tf OPERATOR(pg_catalog.+) (1.2::pg_catalog.float8 OPERATOR(pg_catalog.*)
               ((1::pg_catalog.float8 OPERATOR(pg_catalog.-) b) OPERATOR(pg_catalog.+)
                ((b OPERATOR(pg_catalog.*) dl) OPERATOR(pg_catalog./) avgdl))))
$$;

-- _vector_match: recall's floor for a cosine: a message matches the query vector when its cosine
-- is above 1e-5, not merely above 0 (a pair with nothing in common, e.g. HashEmbedder's vectors of
-- texts sharing no n-gram, comes out of float4 arithmetic a few 1e-7 either side of 0). No SET
-- clause, so that it inlines into recall's queries: the operator is named with its schema.
CREATE OR REPLACE FUNCTION pymem._vector_match(similarity double precision)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT similarity OPERATOR(pg_catalog.>) 1e-5::pg_catalog.float8 $$;

-- _recency(age_seconds, half_life): recall's recency of a message age_seconds old, halving every
-- half_life seconds: 1 now, 0.5 one half-life ago; a message from the future counts as now, and
-- the exponent is capped at 1000 (very old messages score 0.5^1000, not an underflow).
CREATE OR REPLACE FUNCTION pymem._recency(age_seconds double precision, half_life double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT pg_catalog.power(0.5::pg_catalog.float8,
                            LEAST(GREATEST(age_seconds, 0::pg_catalog.float8) OPERATOR(pg_catalog./) half_life,
                                  1000::pg_catalog.float8))
$$;
