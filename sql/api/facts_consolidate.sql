-- facts_consolidate.sql: near-duplicate facts of one subject, the candidates of a consolidation.
-- Learning accumulates wordings of one fact ("Prefers tea", "Likes tea", "Prefers tea over
-- coffee"); fact_duplicates finds the pairs, and a consolidation merges each through
-- fact_supersede (facts_versions.sql: superseding a fact by the content of another active fact
-- of its subject merges it into that fact, its history kept). Part of durable facts (facts.sql;
-- tables in migrations/0002_facts.sql, 0006_v0_2_0_memory.sql). Re-applied on every migrate;
-- called by pymem/facts.py (Memory.consolidate, `pymem consolidate`) and by any SQL client
-- (docs/sql.md "Consolidate near-duplicate facts").
--
-- Errors: 22023 invalid argument; 42501 a project the caller may not serve.

-- fact_duplicates: pairs of the subject's active facts that say nearly the same thing, most
-- alike first: similarity, the cosine of their vectors from embedder (NULL without one, or when
-- either has none), and overlap, the share of the shorter fact's words (lexemes) that the other
-- has too (1: every word of one is in the other). A pair is returned when similarity >=
-- min_similarity or overlap >= min_overlap (either threshold NULL: that test is off), unless
-- exactly one of the two negates ("not", "no", "never", "n't", "without": "Likes dogs" and "Does
-- not like dogs" share every word that counts). In each pair, keep is the fact to keep: the one
-- with more words (the more specific wording), or the newer; merge is the one to merge into it.
-- The newest max_facts active facts of the subject are compared (each pair once: quadratic in
-- them), and at most max_pairs pairs are returned. Reads only: a consolidation applies the pairs
-- it accepts with fact_supersede(id => merge_id, new_content => keep_content).
--   SELECT keep_content, merge_content, similarity, overlap
--     FROM pymem.fact_duplicates('user', 'alice', project_id => '', min_overlap => 0.8);
CREATE OR REPLACE FUNCTION pymem.fact_duplicates(
    scope text,
    scope_id text,
    project_id text DEFAULT '',
    embedder text DEFAULT NULL,
    min_similarity double precision DEFAULT 0.9,
    min_overlap double precision DEFAULT 0.8,
    max_facts integer DEFAULT 500,
    max_pairs integer DEFAULT 100)
RETURNS TABLE (keep_id bigint, keep_content text, merge_id bigint, merge_content text,
               similarity double precision, overlap double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(fact_duplicates.project_id);
    IF NOT pymem._fact_check_subject(fact_duplicates.scope, fact_duplicates.scope_id, fact_duplicates.project_id,
                                     'match') THEN
        RETURN;
    END IF;
    IF fact_duplicates.scope_id = '*' THEN
        RAISE EXCEPTION 'pymem: fact_duplicates compares the facts of one subject, not ''*''' USING ERRCODE = '22023';
    END IF;
    IF NOT (fact_duplicates.min_similarity BETWEEN -1 AND 1) AND fact_duplicates.min_similarity IS NOT NULL
       OR NOT (fact_duplicates.min_overlap BETWEEN 0 AND 1) AND fact_duplicates.min_overlap IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: min_similarity must be in -1..1 and min_overlap in 0..1 (NULL: that test is off)'
            USING ERRCODE = '22023';
    END IF;
    IF fact_duplicates.max_facts IS NULL OR fact_duplicates.max_facts NOT BETWEEN 2 AND 2000 THEN
        RAISE EXCEPTION 'pymem: max_facts must be between 2 and 2000, not %', coalesce(fact_duplicates.max_facts::text, 'NULL')
            USING ERRCODE = '22023', HINT = 'Every pair of them is compared: the cost grows with its square.';
    END IF;
    PERFORM pymem._check_limit('max_pairs', fact_duplicates.max_pairs);
    RETURN QUERY
    WITH f AS (
        SELECT a.id, a.content, a.created_at,
               coalesce(pg_catalog.tsvector_to_array(l.lexemes), '{}') AS words,
               a.content ~* '(\m(not|no|never|without|none|nor|neither)\M|n''t\M)' AS negates,
               e.embedding
          FROM (SELECT x.id, x.content, x.created_at FROM pymem.active_facts AS x
                 WHERE x.project_id = fact_duplicates.project_id AND x.scope = fact_duplicates.scope
                   AND x.scope_id = fact_duplicates.scope_id
                 ORDER BY x.created_at DESC, x.id DESC
                 LIMIT fact_duplicates.max_facts) AS a
          LEFT JOIN pymem.fact_lexemes AS l
            ON l.project_id = fact_duplicates.project_id AND l.scope = fact_duplicates.scope
           AND l.scope_id = fact_duplicates.scope_id AND l.fact_id = a.id
          LEFT JOIN pymem.fact_embeddings AS e
            ON e.project_id = fact_duplicates.project_id AND e.scope = fact_duplicates.scope
           AND e.scope_id = fact_duplicates.scope_id AND e.fact_id = a.id AND e.embedder = fact_duplicates.embedder
    ), pairs AS (
        SELECT a.id AS a_id, a.content AS a_content, a.created_at AS a_at, pg_catalog.cardinality(a.words) AS a_n,
               b.id AS b_id, b.content AS b_content, b.created_at AS b_at, pg_catalog.cardinality(b.words) AS b_n,
               CASE WHEN a.embedding IS NOT NULL AND b.embedding IS NOT NULL
                    THEN 1 - pymem._cosine_distance(a.embedding, b.embedding) END AS similarity,
               CASE WHEN pg_catalog.cardinality(a.words) = 0 OR pg_catalog.cardinality(b.words) = 0 THEN 0::float8
                    ELSE (SELECT pg_catalog.count(*) FROM (SELECT pg_catalog.unnest(a.words)
                                                           INTERSECT SELECT pg_catalog.unnest(b.words)) AS i)::float8
                         / LEAST(pg_catalog.cardinality(a.words), pg_catalog.cardinality(b.words))
               END AS overlap
          FROM f AS a JOIN f AS b ON a.id < b.id AND a.negates = b.negates
    )
    SELECT CASE WHEN k.keep_a THEN p.a_id ELSE p.b_id END, CASE WHEN k.keep_a THEN p.a_content ELSE p.b_content END,
           CASE WHEN k.keep_a THEN p.b_id ELSE p.a_id END, CASE WHEN k.keep_a THEN p.b_content ELSE p.a_content END,
           p.similarity, p.overlap
      FROM pairs AS p
     CROSS JOIN LATERAL (SELECT (p.a_n, p.a_at, p.a_id) > (p.b_n, p.b_at, p.b_id) AS keep_a) AS k
     WHERE p.similarity >= fact_duplicates.min_similarity OR p.overlap >= fact_duplicates.min_overlap
     ORDER BY GREATEST(coalesce(p.similarity, 0), p.overlap) DESC, p.a_id, p.b_id
     LIMIT fact_duplicates.max_pairs;
END;
$$;
