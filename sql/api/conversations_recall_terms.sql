-- conversations_recall_terms.sql: heavy users' words (pymem.recall_terms, migrations/
-- 0006_v0_2_0_memory.sql): filling a registered user's postings (recall_terms_fill, the fill step
-- of recall_index_plan; text_search_configure refills them after a re-index) and reading the
-- lexical candidates of a heavy user's hybrid recall (_recall_lexical, for _recall in
-- conversations_recall.sql). New messages of a registered user get their postings from the
-- lexeme trigger (_message_lexemes_add, conversations_embeddings.sql).
-- Part of conversation memory (conversations.sql). Re-applied on every migrate; recall_terms_fill
-- is run by `pymem recall-indexes` (or psql, as recall_index_plan returns it); the rest is internal.
--
-- Errors: none of its own.

-- _recall_terms_fill(project_id, user_id): a user's postings, one row per (message, distinct
-- lexeme) of the user's message_lexemes, those already there kept; records them filled on the
-- user's rows of pymem.recall_indexes. Returns how many postings it added. One statement: about
-- 10 postings per message (a read of the user's lexemes, a write per posting and its two index
-- entries).
CREATE OR REPLACE FUNCTION pymem._recall_terms_fill(p_project_id text, p_user_id text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    INSERT INTO pymem.recall_terms AS t (project_id, user_id, lexeme, thread_id, seq)
    SELECT l.project_id, l.user_id, w.lexeme, l.thread_id, l.seq
      FROM pymem.message_lexemes AS l
     CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.tsvector_to_array(l.lexemes)) AS w(lexeme)
     WHERE l.project_id = p_project_id AND l.user_id = p_user_id
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    UPDATE pymem.recall_indexes AS r SET terms_filled = true
     WHERE r.project_id = p_project_id AND r.user_id = p_user_id AND NOT r.terms_filled;
    RETURN v_count;
END;
$$;

-- recall_terms_fill(user_id, project_id): a registered heavy user's words (pymem.recall_terms),
-- filled from the stored lexemes: the 'fill' step of recall_index_plan, which returns
--   SELECT pymem.recall_terms_fill(user_id => ..., project_id => ...)
-- for each registered user whose words were never filled (a statement, not a step of the plan's
-- own transaction: about 10 rows per message, ~40 s for 160,000 messages on 2 busy cores, longer
-- than a pool's statement timeout, and a dry run must not pay it). Returns how many rows it added;
-- 0 for a user with no recall index (only registered users' words are kept up to date).
-- Idempotent. For administrators (not granted to the app role), like recall_index_plan.
CREATE OR REPLACE FUNCTION pymem.recall_terms_fill(user_id text, project_id text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(recall_terms_fill.project_id);
    IF NOT EXISTS (SELECT 1 FROM pymem.recall_indexes AS r
                    WHERE r.project_id = recall_terms_fill.project_id AND r.user_id = recall_terms_fill.user_id) THEN
        RETURN 0;
    END IF;
    RETURN pymem._recall_terms_fill(recall_terms_fill.project_id, recall_terms_fill.user_id);
END;
$$;

-- _recall_term_counts(project_id, user_id, lexemes): how many of the user's messages hold each
-- lexeme (in order), from its words, counted up to 10,000 (an index-only range of the primary key:
-- ~0.1 ms per 1,000 postings; beyond 10,000 the count says 10,000, an idf a little too high for
-- the commonest words). BM25's document frequencies of a heavy user's hybrid recall (_recall).
CREATE OR REPLACE FUNCTION pymem._recall_term_counts(p_project_id text, p_user_id text, p_lexemes text[])
RETURNS double precision[]
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN ARRAY(SELECT (SELECT pg_catalog.count(*) FROM (
                             SELECT 1 FROM pymem.recall_terms AS t
                              WHERE t.project_id = p_project_id AND t.user_id = p_user_id AND t.lexeme = w.w
                              LIMIT 10000) AS x)::float8
                   FROM pg_catalog.unnest(p_lexemes) WITH ORDINALITY AS w(w, i)
                  ORDER BY w.i);
END;
$$;

-- _recall_lexical: the lexical candidates of a heavy user's hybrid recall (_recall): the user's
-- messages holding one of the query's lexemes (p_lexemes), read through recall_terms' primary key
-- (one index range per term), each with its vector of p_embedder by primary key, and every
-- eligibility condition of _recall_ranked (as_of, min_content_chars, since / until, the current
-- thread's window, the metadata filter), leaving out the rows already among the vector
-- candidates (p_threads, p_seqs). A term held by more than 400 of the user's messages gives
-- none: a common word has a small idf, its holders rank by their vector (the index's
-- candidates), and each holder costs a read of its vector by key (~12 us: a term held by 1,000
-- messages added ~8 ms to a 7 ms recall, bench/reports/2026-12-04-heavy-lexical, "The cap").
-- _recall passes the rarest terms first within 400 postings in all. Returns what _recall keeps of a candidate: the
-- cosine with the query, the length in tokens and the lexemes (vectors stored before 0006_v0_2_0_memory: their
-- message's, by primary key).
CREATE OR REPLACE FUNCTION pymem._recall_lexical(
    p_project_id text, p_user_id text, p_thread_id text, p_query vector, p_embedder text, p_lexemes text[],
    p_spec pymem.recall_spec, p_window_after bigint, p_threads text[], p_seqs bigint[])
RETURNS TABLE (thread_id text, seq bigint, created_at timestamptz, similarity double precision, tokens integer,
               lexemes tsvector)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_as_of timestamptz := p_spec.as_of;
    v_since timestamptz := p_spec.since;
    v_until timestamptz := p_spec.until;
    v_min_chars integer := p_spec.min_content_chars;
    v_filter jsonb := p_spec.metadata;
BEGIN
    -- LATERAL both ways: each term's postings by the primary key, then each message's vector by
    -- primary key; a plain join of the postings with message_embeddings was planned once as a
    -- scan of the user's 160,000 vectors, filtered (0.9 s: bench/reports/2026-12-04-heavy-lexical)
    RETURN QUERY
    SELECT x.thread_id, x.seq, x.created_at, x.similarity, x.tokens, x.lexemes
      FROM (SELECT DISTINCT h.thread_id, h.seq
              FROM pg_catalog.unnest(p_lexemes) AS q(lexeme)
             CROSS JOIN LATERAL (
                   SELECT pg_catalog.array_agg(t.thread_id) AS threads, pg_catalog.array_agg(t.seq) AS seqs
                     FROM (SELECT t.thread_id, t.seq FROM pymem.recall_terms AS t
                            WHERE t.project_id = p_project_id AND t.user_id = p_user_id AND t.lexeme = q.lexeme
                            LIMIT 401) AS t) AS a
             CROSS JOIN LATERAL ROWS FROM (pg_catalog.unnest(a.threads), pg_catalog.unnest(a.seqs)) AS h(thread_id, seq)
             WHERE pg_catalog.cardinality(a.threads) <= 400
               AND NOT EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest(p_threads), pg_catalog.unnest(p_seqs)) AS c(t, s)
                                WHERE c.t = h.thread_id AND c.s = h.seq)) AS p
     CROSS JOIN LATERAL (
           SELECT e.thread_id, e.seq, e.created_at, 1 - pymem._cosine_distance(e.embedding, p_query) AS similarity,
                  coalesce(e.tokens, CASE WHEN e.lexemes IS NULL THEN (
                      SELECT l.tokens FROM pymem.message_lexemes AS l
                       WHERE l.project_id = p_project_id AND l.user_id = p_user_id AND l.thread_id = e.thread_id
                         AND l.seq = e.seq) END) AS tokens,
                  coalesce(e.lexemes, (
                      SELECT l.lexemes FROM pymem.message_lexemes AS l
                       WHERE l.project_id = p_project_id AND l.user_id = p_user_id AND l.thread_id = e.thread_id
                         AND l.seq = e.seq)) AS lexemes
             FROM pymem.message_embeddings AS e
            WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
              AND e.thread_id = p.thread_id AND e.seq = p.seq
              AND (v_as_of IS NULL OR e.created_at <= v_as_of) AND e.chars >= v_min_chars
              AND (v_since IS NULL OR e.created_at >= v_since) AND (v_until IS NULL OR e.created_at < v_until)
              AND NOT (e.thread_id = p_thread_id AND e.seq > p_window_after)
              AND (v_filter IS NULL OR EXISTS (
                      SELECT 1 FROM pymem.messages AS m
                       WHERE m.project_id = p_project_id AND m.user_id = p_user_id
                         AND m.thread_id = e.thread_id AND m.seq = e.seq AND m.metadata @> v_filter))
           OFFSET 0) AS x;  -- a fence: not flattened into a join the planner may turn around
END;
$$;
