-- facts_search.sql: facts by meaning: facts_search (lexical and vector candidates of one
-- subject or a whole scope, fused into one ranking) and _facts_for_context (the same ranking for
-- context_read). Part of durable facts (facts.sql; tables in migrations/0002_facts.sql,
-- 0006_v0_2_0_memory.sql). Re-applied on every migrate; called by pymem/facts.py and by any SQL
-- client (docs/sql.md "Facts").
--
-- Errors: 22023 invalid argument.

-- _scope_fact_candidates: _fact_candidates (below) for every subject of a scope (scope_id '*'),
-- with the same joins, by hash for the same reason.
CREATE OR REPLACE FUNCTION pymem._scope_fact_candidates(
    p_project_id text, p_scope text, p_query vector, p_embedder text, p_metadata jsonb)
RETURNS TABLE (id bigint, scope_id text, content text, confidence double precision, source text, metadata jsonb,
               created_at timestamptz, eligible boolean, dist double precision, lexemes tsvector, tokens integer)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
SET enable_nestloop = off
AS $$
BEGIN
    RETURN QUERY
    SELECT f.id, f.scope_id, f.content, f.confidence, f.source, f.metadata, f.created_at,
           p_metadata IS NULL OR f.metadata @> p_metadata,
           pymem._cosine_distance(e.embedding, p_query),
           coalesce(l.lexemes, pymem._lexemes(pymem._text_search_config(p_project_id), f.content)),
           coalesce(l.tokens, pymem._lexeme_tokens(pymem._lexemes(pymem._text_search_config(p_project_id), f.content)))
      FROM pymem.active_facts AS f
      LEFT JOIN pymem.fact_embeddings AS e
        ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id
       AND e.fact_id = f.id AND e.embedder = coalesce(p_embedder, '')
      LEFT JOIN pymem.fact_lexemes AS l
        ON l.project_id = f.project_id AND l.scope = f.scope AND l.scope_id = f.scope_id AND l.fact_id = f.id
     WHERE f.project_id = p_project_id AND f.scope = p_scope;
END;
$$;

-- _fact_candidates: what facts_search ranks: a subject's active facts (every subject's of the
-- scope with '*', from _scope_fact_candidates), each with whether its metadata contains `metadata` (NULL: every fact does), its
-- cosine distance to `query_vector` (NULL: no query vector, or no vector from `embedder` yet), and its
-- lexemes and length (computed here for a fact stored before 0006_v0_2_0_memory by a role that
-- row-level security binds, which has no row in fact_lexemes). coalesce(p_embedder, ''): no embedder (a query without a vector)
-- joins no vector; Citus cannot plan the join once a NULL folds the condition to false.
CREATE OR REPLACE FUNCTION pymem._fact_candidates(
    p_project_id text, p_scope text, p_scope_id text, p_query vector, p_embedder text, p_metadata jsonb)
RETURNS TABLE (id bigint, scope_id text, content text, confidence double precision, source text, metadata jsonb,
               created_at timestamptz, eligible boolean, dist double precision, lexemes tsvector, tokens integer)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
-- A subject's facts, vectors and lexemes are joined by hash. Left to choose, a plan made while the
-- statistics say a subject has a row or two (a table filled since its last ANALYZE; a generic plan)
-- joins them by nested loops that rescan the subject's rows for every fact (docs/performance.md,
-- "Measured in the SQL").
SET enable_nestloop = off
AS $$
BEGIN
    IF p_scope_id = '*' THEN
        RETURN QUERY SELECT * FROM pymem._scope_fact_candidates(p_project_id, p_scope, p_query, p_embedder, p_metadata);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT f.id, f.scope_id, f.content, f.confidence, f.source, f.metadata, f.created_at,
           p_metadata IS NULL OR f.metadata @> p_metadata,
           pymem._cosine_distance(e.embedding, p_query),
           coalesce(l.lexemes, pymem._lexemes(pymem._text_search_config(p_project_id), f.content)),
           coalesce(l.tokens, pymem._lexeme_tokens(pymem._lexemes(pymem._text_search_config(p_project_id), f.content)))
      FROM pymem.active_facts AS f
      LEFT JOIN pymem.fact_embeddings AS e
        ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id
       AND e.fact_id = f.id AND e.embedder = coalesce(p_embedder, '')
      LEFT JOIN pymem.fact_lexemes AS l
        ON l.project_id = f.project_id AND l.scope = f.scope AND l.scope_id = f.scope_id AND l.fact_id = f.id
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id;
END;
$$;

-- _facts_ranked: the ranking of facts_search (below), without its checks: the eligible facts (a
-- subject's active facts; with p_metadata, those whose metadata contains it) by
-- score = (1 - p_lw) * cosine + p_lw * lexical with a query vector, lexical alone without one,
-- best first, ties to the higher id; top p_k. p_everyone false (facts_search): with a vector, the
-- facts that have none from p_embedder come first, unranked (similarity and score NULL), and the
-- facts that have one are ranked (the unranked newest first); without a vector, the facts sharing a
-- word with the text.
-- p_everyone true (a context read): every eligible fact is ranked, a missing score counting 0.
CREATE OR REPLACE FUNCTION pymem._facts_ranked(
    p_project_id text, p_scope text, p_scope_id text, p_query vector, p_embedder text, p_text text,
    p_metadata jsonb, p_lw double precision, p_k integer, p_everyone boolean)
RETURNS SETOF pymem.fact_match
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_terms text[];
    v_match tsquery;
    v_vector boolean := p_query IS NOT NULL;
BEGIN
    -- the query's distinct lexemes, and a tsquery that matches a fact having any of them; none with
    -- a vector and lexical weight 0, where the text changes no score (the vector's cost alone)
    v_terms := CASE WHEN v_vector AND p_lw = 0 THEN '{}'
                    ELSE coalesce(pg_catalog.tsvector_to_array(pymem._lexemes(pymem._text_search_config(p_project_id), p_text)), '{}') END;
    IF pg_catalog.cardinality(v_terms) > 0 THEN
        SELECT pg_catalog.string_agg(pymem._term_quoted(t.term), ' | ')::tsquery
          INTO v_match FROM pg_catalog.unnest(v_terms) AS t(term);
    END IF;
    RETURN QUERY
    WITH c AS MATERIALIZED (
        SELECT * FROM pymem._fact_candidates(p_project_id, p_scope, p_scope_id, p_query, p_embedder, p_metadata)
    ), n AS (
        SELECT pg_catalog.count(*)::float8 AS docs, pg_catalog.avg(c.tokens)::float8 AS avgdl FROM c
    ), h AS (  -- (fact, query term) pairs: the term's frequency in the fact, the fact's length
        SELECT c.id, u.lexeme, coalesce(pg_catalog.cardinality(u.positions), 1)::float8 AS tf, c.tokens::float8 AS dl
          FROM c CROSS JOIN LATERAL pg_catalog.unnest(  -- the fact's query terms only (weight A marks them)
                   pg_catalog.ts_filter(pg_catalog.setweight(c.lexemes, 'A', v_terms), '{a}')) AS u
         WHERE c.lexemes @@ v_match
    ), d AS (
        SELECT h.lexeme, pg_catalog.count(*)::float8 AS df FROM h GROUP BY h.lexeme
    ), b AS (
        SELECT h.id, pg_catalog.sum(pymem._bm25(pymem._bm25_idf(n.docs, d.df), h.tf, h.dl, n.avgdl, 0.75)) AS bm25
          FROM h JOIN d ON d.lexeme = h.lexeme CROSS JOIN n
         GROUP BY h.id
    ), r AS (
        SELECT c.id, c.scope_id, c.content, c.confidence, c.source, c.metadata, c.created_at, c.dist,
               b.bm25 / pg_catalog.max(b.bm25) OVER () AS lex
          FROM c LEFT JOIN b ON b.id = c.id
         WHERE c.eligible
    )
    (SELECT r.id, r.scope_id, r.content, r.confidence, r.source, r.metadata, r.created_at, NULL::float8, NULL::float8
       FROM r WHERE v_vector AND NOT p_everyone AND r.dist IS NULL
      ORDER BY r.created_at DESC, r.id DESC  -- newest first, whatever order the candidates came in
      LIMIT 1000)
    UNION ALL
    (SELECT s.id, s.scope_id, s.content, s.confidence, s.source, s.metadata, s.created_at, s.similarity, s.score
       FROM (SELECT r.id, r.scope_id, r.content, r.confidence, r.source, r.metadata, r.created_at,
                    1 - r.dist AS similarity,
                    CASE WHEN v_vector
                         THEN (1 - p_lw) * coalesce(1 - r.dist, 0) + p_lw * coalesce(r.lex, 0)
                         ELSE coalesce(r.lex, 0) END AS score
               FROM r
              WHERE p_everyone OR (v_vector AND r.dist IS NOT NULL) OR (NOT v_vector AND r.lex IS NOT NULL)) AS s
      ORDER BY s.score DESC, s.id DESC
      LIMIT p_k);
END;
$$;

-- _facts_for_context: the facts of a subject one turn reads (context_read): its newest p_max
-- active facts, newest first, as facts_newest; when it has more than p_max and the turn has a query
-- (its vector, its text or both), the p_max that rank best for it (_facts_ranked, every fact
-- ranked), still newest first: a subject with many facts gets the relevant ones, not the latest.
-- At a point in time (p_valid_at or p_as_of given: _facts_at) the newest p_max facts then.
-- The caller has checked the query vector (context_read, once per call).
CREATE OR REPLACE FUNCTION pymem._facts_for_context(
    p_project_id text, p_scope text, p_scope_id text, p_max integer, p_query vector, p_embedder text,
    p_text text, p_lw double precision, p_valid_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id bigint, content text, confidence double precision, created_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF p_valid_at IS NOT NULL OR p_as_of IS NOT NULL THEN  -- a point in time: the newest p_max facts then
        RETURN QUERY SELECT f.id, f.content, f.confidence, f.created_at
                       FROM pymem._facts_at(p_project_id, p_scope, p_scope_id, p_valid_at, p_as_of, p_max) AS f;
        RETURN;
    END IF;
    -- more than p_max facts? (asked only with a query: a read without one never needs it). One
    -- query on one table, which a Citus worker plans with parameters too (not a sub-select).
    IF p_query IS NOT NULL OR p_text IS NOT NULL THEN
        PERFORM FROM pymem.active_facts AS f
          WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
         OFFSET p_max LIMIT 1;
        IF FOUND THEN
            -- the ranked rows carry what a context shows: no second read of the facts
            RETURN QUERY
            SELECT r.id, r.content, r.confidence, r.created_at
              FROM pymem._facts_ranked(p_project_id, p_scope, p_scope_id, p_query, p_embedder, p_text, NULL,
                                       p_lw, p_max, true) AS r
             ORDER BY r.created_at DESC, r.id DESC;
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT f.id, f.content, f.confidence, f.created_at
                   FROM pymem._facts_newest(p_project_id, p_scope, p_scope_id, p_max) AS f;
END;
$$;

-- facts_search: a subject's active facts ranked for a query given as its vector (`query_vector`, from
-- `embedder`), its text (`query_text`), or both; top k.
--   SELECT id, content, similarity, score FROM pymem.facts_search('user', 'alice', $1, 'hash-384-v1',
--       query_text => 'where does alice live', k => 3);
-- Eligible: the subject's active facts; with `metadata` (a JSON object), only those whose metadata
-- contains it (jsonb @>). The ranking fuses two scores:
--   lexical: BM25 (k1 1.2, b 0.75) of the query text's lexemes in each fact (the project's text
--     search configuration, english by default), with the document count, average length in tokens and document frequencies
--     of the subject's active facts, divided by the best eligible fact's (the best lexical match
--     has 1, a fact sharing no term with the text 0);
--   vector: the cosine similarity to `query_vector`.
-- score = (1 - lexical_weight) * similarity + lexical_weight * lexical. With a query vector, every
-- eligible fact with a vector from `embedder` is ranked; active facts that have none yet come
-- first, with similarity and score NULL (at most 1000 of them): embed them, store them with
-- fact_embeddings_put and search again (pymem.Memory does). Without a vector (query NULL) the
-- ranking is lexical alone (score = lexical, similarity NULL) over the facts sharing a term with
-- the text; without text it is the cosine similarity alone. Exactly k rows come back whenever k
-- facts are eligible; ties go to the higher id. An exact scan over the subject's facts: exact,
-- and fast for the hundreds-to-thousands of facts one subject holds.
CREATE OR REPLACE FUNCTION pymem.facts_search(
    scope text,
    scope_id text,
    query_vector vector DEFAULT NULL,
    embedder text DEFAULT NULL,
    project_id text DEFAULT '',
    k integer DEFAULT 5,
    query_text text DEFAULT NULL,
    metadata jsonb DEFAULT NULL,
    lexical_weight double precision DEFAULT 0.4)
RETURNS SETOF pymem.fact_match
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(facts_search.project_id);
    PERFORM pymem._check_limit('k', facts_search.k);
    IF NOT pymem._fact_check_subject(facts_search.scope, facts_search.scope_id, facts_search.project_id, 'match') THEN
        RETURN;
    END IF;
    IF facts_search.query_vector IS NULL AND facts_search.query_text IS NULL THEN
        RAISE EXCEPTION 'pymem: facts_search needs a query: its vector (query_vector), its text (query_text), or both'
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.length(facts_search.query_text) > 65536 THEN
        RAISE EXCEPTION 'pymem: query_text is % characters; the limit is 65536', pg_catalog.length(facts_search.query_text)
            USING ERRCODE = '22023';
    END IF;
    IF facts_search.metadata IS NOT NULL AND pg_catalog.jsonb_typeof(facts_search.metadata) <> 'object' THEN
        RAISE EXCEPTION 'pymem: the metadata filter must be a JSON object, not %', pg_catalog.jsonb_typeof(facts_search.metadata)
            USING ERRCODE = '22023';
    END IF;
    IF facts_search.lexical_weight IS NULL OR facts_search.lexical_weight = 'NaN'::float8
       OR facts_search.lexical_weight < 0 OR facts_search.lexical_weight > 1 THEN
        RAISE EXCEPTION 'pymem: lexical_weight must be between 0 and 1, not %', facts_search.lexical_weight
            USING ERRCODE = '22023';
    END IF;
    IF facts_search.query_vector IS NOT NULL THEN
        PERFORM pymem._query_check(facts_search.project_id, facts_search.embedder, facts_search.query_vector);
    END IF;
    RETURN QUERY
    SELECT * FROM pymem._facts_ranked(facts_search.project_id, facts_search.scope, facts_search.scope_id,
                                      facts_search.query_vector, facts_search.embedder, facts_search.query_text,
                                      facts_search.metadata, facts_search.lexical_weight, facts_search.k, false);
END;
$$;
