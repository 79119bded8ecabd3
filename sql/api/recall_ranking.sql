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

-- _recall_rows: the user's rows that recall with terms ranks (_recall_ranked), as of p_as_of: with
-- a vector (p_query), every vector of the user's from p_embedder with its cosine; without, every
-- message of the user's (similarity NULL). Each with its length in tokens and, when they share a
-- term with p_any, its lexemes (else NULL); a vector stored before 0006_v0_2_0_memory (no lexemes beside it:
-- stale) takes both from its message's row of message_lexemes, by primary key. metadata_ok: the
-- message's metadata contains p_metadata (NULL: no filter). One home for the read, apart from the
-- ranking: on plain PostgreSQL this SQL function is inlined into _recall_ranked's statement (no
-- SET clause, so the planner may: UNPINNED in tests/sql/test_sql_files.py; every name is
-- schema-qualified), which plans exactly as the read written in place; on Citus, sql/citus.sql
-- gives it a PL/pgSQL body of single-table reads, so that the ranking statement names no Citus
-- table and Citus does not plan it in full on every call.
CREATE OR REPLACE FUNCTION pymem._recall_rows(
    p_project_id text, p_user_id text, p_embedder text, p_query vector, p_any tsquery, p_as_of timestamptz,
    p_metadata jsonb)
RETURNS TABLE (thread_id text, seq bigint, chars integer, importance double precision, created_at timestamptz,
               similarity double precision, tokens integer, lexemes tsvector, metadata_ok boolean)
LANGUAGE sql STABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT r.thread_id, r.seq, r.chars, r.importance, r.created_at, r.similarity,
           CASE WHEN r.stale THEN (SELECT l.tokens FROM pymem.message_lexemes AS l
                                    WHERE l.project_id OPERATOR(pg_catalog.=) p_project_id
                                      AND l.user_id OPERATOR(pg_catalog.=) p_user_id
                                      AND l.thread_id OPERATOR(pg_catalog.=) r.thread_id AND l.seq OPERATOR(pg_catalog.=) r.seq)
                ELSE r.tokens END,
           CASE WHEN r.stale THEN (SELECT l.lexemes FROM pymem.message_lexemes AS l
                                    WHERE l.project_id OPERATOR(pg_catalog.=) p_project_id
                                      AND l.user_id OPERATOR(pg_catalog.=) p_user_id
                                      AND l.thread_id OPERATOR(pg_catalog.=) r.thread_id AND l.seq OPERATOR(pg_catalog.=) r.seq
                                      AND l.lexemes OPERATOR(pg_catalog.@@) p_any)
                ELSE r.lexemes END,
           p_metadata IS NULL OR EXISTS (
               SELECT 1 FROM pymem.messages AS m
                WHERE m.project_id OPERATOR(pg_catalog.=) p_project_id AND m.user_id OPERATOR(pg_catalog.=) p_user_id
                  AND m.thread_id OPERATOR(pg_catalog.=) r.thread_id AND m.seq OPERATOR(pg_catalog.=) r.seq
                  AND m.metadata OPERATOR(pg_catalog.@>) p_metadata)
      FROM (SELECT e.thread_id, e.seq, e.chars, e.importance, e.created_at,
                   1::pg_catalog.float8 OPERATOR(pg_catalog.-) pymem._cosine_distance(e.embedding, p_query) AS similarity,
                   e.tokens, CASE WHEN e.lexemes OPERATOR(pg_catalog.@@) p_any THEN e.lexemes END AS lexemes,
                   e.lexemes IS NULL AS stale
              FROM pymem.message_embeddings AS e
             WHERE p_query IS NOT NULL
               AND e.project_id OPERATOR(pg_catalog.=) p_project_id AND e.user_id OPERATOR(pg_catalog.=) p_user_id
               AND e.embedder OPERATOR(pg_catalog.=) p_embedder
               AND (p_as_of IS NULL OR e.created_at OPERATOR(pg_catalog.<=) p_as_of)
            UNION ALL
            SELECT l.thread_id, l.seq, l.chars, l.importance, l.created_at, NULL::pg_catalog.float8, l.tokens,
                   CASE WHEN l.lexemes OPERATOR(pg_catalog.@@) p_any THEN l.lexemes END, false
              FROM pymem.message_lexemes AS l
             WHERE p_query IS NULL
               AND l.project_id OPERATOR(pg_catalog.=) p_project_id AND l.user_id OPERATOR(pg_catalog.=) p_user_id
               AND (p_as_of IS NULL OR l.created_at OPERATOR(pg_catalog.<=) p_as_of)) AS r
$$;

-- _recall_ranked: a user's recall candidates ranked by
--   score = (1 - rw - iw) * relevance + rw * 0.5 ^ (age / half_life) + iw * importance
-- (age measured from the spec's as_of, default now; ties: newer first, then thread and seq), where
--   relevance = (1 - lw) * cosine + lw * lexical   with a query vector and query terms,
--             = cosine                             with a vector and no terms (no text, only stop words, or
--                                                  lw 0: the text is then not read, and the call costs what
--                                                  the vector alone costs),
--             = lexical                            with terms and no vector;
--   lexical   = BM25 (k1 1.2, b 0.3: _bm25) of the query text's lexemes in each message, divided by the
--               best eligible message's (the best lexical match has 1, a message sharing no term 0).
-- BM25's statistics (document count, average length in tokens, each term's document frequency)
-- are those of the rows ranked: with a vector, the user's messages with a vector of p_embedder as of
-- the spec's as_of; without, the user's messages as of as_of.
-- Eligible: with a vector, every message with a vector of p_embedder that matches the query at
-- all (a cosine above 1e-5, _vector_match, or a term in common with the text); without one, every message sharing
-- a term with the text (the floor: a message that matches neither way is never recalled, however
-- recent or important, so a short or unrelated history gives fewer than k rows, not padding); in
-- both cases (the fields of p_spec, a checked pymem.recall_spec from _recall_check) of at least
-- min_content_chars characters, outside the newest window_size messages of the current thread,
-- created at or before as_of, at or after since and before until, whose metadata contains the
-- spec's metadata, and, when min_score is not NULL, scoring at least that. An exact scan of the
-- user's rows: exactly k rows come back whenever that many are eligible. When the spec names a
-- time (time_from and time_to, time_weight > 0: _recall_turns' bonus), the k best of the eligible
-- messages created in it come back too, after the k best (the same scores; a row can be in both).
--
-- How: the terms, the window's bound and the weights first (plain variables), then one statement.
-- Without terms (a vector alone): the k best eligible rows, read and sorted in one pass with no
-- row kept but the best (a second pass for a named time). With terms: one read of the user's rows
-- (_recall_rows; with a vector, each vector row
-- carries its message's lexemes and length, 0006_v0_2_0_memory; a vector stored before
-- that has NULL there and its message's lexemes are read by primary key; without a vector, the
-- user's rows of message_lexemes), kept in memory with each row's similarity, length and
-- eligibility, and the lexemes of the rows sharing a term only. The score splits into a part
-- every row has and a lexical bonus (>= 0) that only the rows sharing a term have:
--   base  = (1 - rw - iw) * (1 - lw') * cosine + rw * recency + iw * importance
--   bonus = (1 - rw - iw) * lw' * lexical        (lw' = lw with a vector and terms, 0 with a vector
--                                                 and no terms, 1 without a vector)
-- so the top k are among the rows sharing a term (each scored in full) and the k best by base of
-- the others with a positive cosine (the floor keeps the rest out; two disjoint sets, so no row is
-- counted twice and nothing is grouped); for a named time, also the k best others created in it
-- (one read for both lists: a named time costs what a call without it costs, where two rankings
-- cost more, docs/performance.md). Each (row, term) pair that matches is found once and
-- gives both each term's document frequency and each row's BM25 weight. No join of the user's
-- rows with each other: planned generically (statistics saying "a row or two"), such a join ran
-- as a nested loop (docs/performance.md). Counts kept per user on write would spare keeping
-- the rows, but the second read they need costs nearly as much (bench/README.md, "Heavy users").
CREATE OR REPLACE FUNCTION pymem._recall_ranked(
    p_project_id text, p_user_id text, p_thread_id text, p_query vector, p_embedder text, p_text text,
    p_spec pymem.recall_spec)
RETURNS TABLE (thread_id text, seq bigint, similarity double precision, score double precision)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
-- No SET enable_nestloop = off here: before PostgreSQL 18 a disabled join method still costs
-- 1e10 where the planner has no alternative, which swamped every other estimate of this query
-- (on PostgreSQL 15: docs/performance.md, "Measured in the SQL").
AS $$
#variable_conflict use_column
DECLARE  -- the spec's fields as plain variables: a field of a composite parameter would be read
         -- out of it again for every row a condition tests (docs/performance.md)
    v_k integer := p_spec.k;
    v_min_chars integer := p_spec.min_content_chars;
    v_rw double precision := p_spec.recency_weight;
    v_iw double precision := p_spec.importance_weight;
    v_lw double precision := p_spec.lexical_weight;
    v_half_life double precision := p_spec.half_life_seconds;
    v_min_score double precision := p_spec.min_score;
    v_as_of timestamptz := p_spec.as_of;
    v_since timestamptz := p_spec.since;
    v_until timestamptz := p_spec.until;
    v_filter jsonb := p_spec.metadata;
    v_terms tsquery[];
    v_any tsquery;
    v_window_after bigint;
    v_wv double precision;
    v_wl double precision;
    v_pass integer;
    v_span boolean := pymem._names_time(p_spec);  -- a named time: two lists
    v_from timestamptz := p_spec.time_from;
    v_to timestamptz := p_spec.time_to;
BEGIN
    IF p_text IS NOT NULL AND (p_query IS NULL OR v_lw > 0) THEN  -- the query's terms, and one tsquery matching any of them
        v_terms := pymem._query_terms(p_project_id, p_text);
        IF pg_catalog.cardinality(v_terms) > 0 THEN
            v_any := pg_catalog.array_to_string(v_terms, ' | ')::tsquery;
        END IF;
    END IF;
    IF p_query IS NULL AND v_any IS NULL THEN
        RETURN;
    END IF;
    v_window_after := pymem._window_after(p_project_id, p_user_id, p_thread_id, p_spec.window_size);
    v_wv := (1 - v_rw - v_iw) * CASE WHEN p_query IS NULL THEN 0 WHEN v_any IS NULL THEN 1 ELSE 1 - v_lw END;
    v_wl := (1 - v_rw - v_iw) * CASE WHEN p_query IS NULL THEN 1 WHEN v_any IS NULL THEN 0 ELSE v_lw END;
    IF v_any IS NULL THEN  -- a vector alone: the k best eligible rows in one pass (faster than
                           -- keeping the rows: docs/performance.md); with a named time, a
                           -- second pass for the k best of those created in it
      FOR v_pass IN 1 .. CASE WHEN v_span THEN 2 ELSE 1 END LOOP
        RETURN QUERY
        SELECT s.thread_id, s.seq, s.similarity, s.base
          FROM (SELECT c.thread_id, c.seq, c.created_at, c.similarity,
                       v_wv * c.similarity
                       + CASE WHEN v_rw = 0 THEN 0 ELSE v_rw * pymem._recency(
                             pg_catalog.date_part('epoch', coalesce(v_as_of, pg_catalog.now()) - c.created_at), v_half_life) END
                       + v_iw * c.importance AS base
                  FROM (SELECT e.thread_id, e.seq, e.created_at, e.importance,
                               1 - pymem._cosine_distance(e.embedding, p_query) AS similarity
                          FROM pymem.message_embeddings AS e
                         WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
                           AND (v_as_of IS NULL OR e.created_at <= v_as_of)
                           AND e.chars >= v_min_chars
                           AND (v_since IS NULL OR e.created_at >= v_since)
                           AND (v_until IS NULL OR e.created_at < v_until)
                           AND NOT (e.thread_id = p_thread_id AND e.seq > v_window_after)
                           AND (v_filter IS NULL OR EXISTS (
                                   SELECT 1 FROM pymem.messages AS m
                                    WHERE m.project_id = p_project_id AND m.user_id = p_user_id
                                      AND m.thread_id = e.thread_id AND m.seq = e.seq AND m.metadata @> v_filter))
                           AND (v_pass = 1 OR (e.created_at >= v_from AND e.created_at < v_to))
                        OFFSET 0) AS c) AS s
         WHERE pymem._vector_match(s.similarity)  -- the floor: no term to share, so a vector match or nothing
           AND (v_min_score IS NULL OR s.base >= v_min_score)
         ORDER BY s.base DESC, s.created_at DESC, s.thread_id, s.seq DESC
         LIMIT v_k;
      END LOOP;
        RETURN;
    END IF;
    RETURN QUERY
        WITH base AS MATERIALIZED (  -- the user's rows as of v_as_of, read once (_recall_rows)
            SELECT r.thread_id, r.seq, r.created_at, r.similarity, r.tokens, r.lexemes,
                   r.chars >= v_min_chars
                   AND (v_since IS NULL OR r.created_at >= v_since)
                   AND (v_until IS NULL OR r.created_at < v_until)
                   AND NOT (r.thread_id = p_thread_id AND r.seq > v_window_after)
                   AND r.metadata_ok AS ok,
                   v_wv * coalesce(r.similarity, 0)
                   + CASE WHEN v_rw = 0 THEN 0 ELSE v_rw * pymem._recency(
                         pg_catalog.date_part('epoch', coalesce(v_as_of, pg_catalog.now()) - r.created_at), v_half_life) END
                   + v_iw * r.importance AS base
              FROM pymem._recall_rows(p_project_id, p_user_id, p_embedder, p_query, v_any, v_as_of, v_filter) AS r),
        hits AS MATERIALIZED (  -- the rows sharing a term with the text
            SELECT b.thread_id, b.seq, b.created_at, b.similarity, b.ok, b.base, b.tokens, b.lexemes
              FROM base AS b WHERE b.lexemes IS NOT NULL),
        matches AS MATERIALIZED (  -- (hit, term) for each query term a hit holds
            SELECT h.thread_id, h.seq, t.i
              FROM hits AS h CROSS JOIN pg_catalog.generate_subscripts(v_terms, 1) AS t(i)
             WHERE h.lexemes @@ v_terms[t.i]),
        st AS MATERIALIZED (  -- BM25's statistics over the rows read: average length, each term's idf
            SELECT GREATEST(coalesce(n.tokens / NULLIF(n.known, 0), 1), 1) AS avgdl,
                   ARRAY(SELECT pymem._bm25_idf(n.docs, coalesce(d.df, 0))
                           FROM pg_catalog.generate_subscripts(v_terms, 1) AS t(i)
                           LEFT JOIN (SELECT m.i, pg_catalog.count(*)::float8 AS df FROM matches AS m GROUP BY m.i) AS d ON d.i = t.i
                          ORDER BY t.i) AS idf
              FROM (SELECT pg_catalog.count(*)::float8 AS docs, coalesce(pg_catalog.sum(b.tokens), 0)::float8 AS tokens,
                           pg_catalog.count(b.tokens)::float8 AS known FROM base AS b) AS n),
        lex AS MATERIALIZED (  -- the eligible rows sharing a term, with BM25 (k1 1.2, b 0.3, a term counted once per message)
            SELECT h.thread_id, h.seq, h.created_at, h.similarity, h.base,
                   pymem._bm25(w.weight, 1, h.tokens, s.avgdl, 0.3) AS bm25
              FROM hits AS h
              JOIN (SELECT m.thread_id, m.seq, pg_catalog.sum(s2.idf[m.i]) AS weight
                      FROM matches AS m CROSS JOIN st AS s2 GROUP BY m.thread_id, m.seq) AS w
                ON w.thread_id = h.thread_id AND w.seq = h.seq
             CROSS JOIN st AS s
             WHERE h.ok),
        other AS NOT MATERIALIZED (  -- the eligible rows sharing no term (a cosine above the floor)
            SELECT b.thread_id, b.seq, b.created_at, b.similarity, b.base AS score
              FROM base AS b
             WHERE b.ok AND p_query IS NOT NULL AND pymem._vector_match(b.similarity)
               AND b.lexemes IS NULL),
        cand AS (  -- the k best of those (and the k best created in a named time), and the eligible rows sharing a term
            (SELECT o.* FROM other AS o ORDER BY o.score DESC, o.created_at DESC, o.thread_id, o.seq DESC LIMIT v_k)
            UNION
            (SELECT o.* FROM other AS o WHERE v_span AND o.created_at >= v_from AND o.created_at < v_to
              ORDER BY o.score DESC, o.created_at DESC, o.thread_id, o.seq DESC LIMIT v_k)
            UNION ALL
            SELECT l.thread_id, l.seq, l.created_at, l.similarity,
                   l.base + v_wl * coalesce(l.bm25 / NULLIF((SELECT pg_catalog.max(x.bm25) FROM lex AS x), 0), 0)
              FROM lex AS l)
        (SELECT c.thread_id, c.seq, c.similarity, c.score FROM cand AS c
          WHERE v_min_score IS NULL OR c.score >= v_min_score
          ORDER BY c.score DESC, c.created_at DESC, c.thread_id, c.seq DESC
          LIMIT v_k)
        UNION ALL  -- with a named time: the k best of those created in it too
        (SELECT c.thread_id, c.seq, c.similarity, c.score FROM cand AS c
          WHERE v_span AND c.created_at >= v_from AND c.created_at < v_to AND (v_min_score IS NULL OR c.score >= v_min_score)
          ORDER BY c.score DESC, c.created_at DESC, c.thread_id, c.seq DESC
          LIMIT v_k);
END;
$$;
