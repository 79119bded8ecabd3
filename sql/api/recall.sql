-- recall.sql: recall's API: semantic, lexical and hybrid recall of a user's past messages
-- (messages_recall), ranked by relevance, recency and importance. _recall runs the ranking
-- (recall_ranking.sql) over all of the user's rows, or over a heavy user's candidates from the
-- index paths (recall_indexes.sql); _recall_turns adds what the question names (a time) and the
-- two turns after each recalled one (issue 32). context_read calls _recall_turns too. The recall
-- family, one way: this file (the API) calls recall_spec.sql (the spec and its checks),
-- recall_ranking.sql (the scores) and recall_indexes.sql (heavy users' index paths); of those,
-- only recall_ranking.sql calls another (the spec). Besides, they call 00_common.sql and
-- conversations.sql (the thread's window, _window_after). Re-applied on every migrate; called by
-- pymem/conversations.py and by any SQL client.
--
-- Errors: 22023 invalid argument.

-- _recall: the ranking messages_recall and context_read use: _recall_ranked's (the exact scan),
-- or, for a user with a valid per-user recall index (pymem.recall_indexes, recall_index_plan), the
-- same ranking from candidates instead of all of the user's rows. The exact scan when the user has
-- no index, when p_query is NULL or of other dimensions than the index, with a recency or
-- importance weight (such a ranking reaches rows far from the query vector, which the candidates
-- miss: bench/README.md, "Heavy users"), and whenever the candidates leave fewer than k rows
-- (filters, min_score), so that k rows come back whenever k are eligible. A named time's k best
-- (see _recall_ranked) are ranked with the others, with candidates of their own (the nearest
-- among those created in it). The candidates are the user's eligible rows nearest the query
-- vector by the index (IVFFlat, ivfflat.probes = max(min(lists, 10), lists / 40) for this
-- statement, iterative scan on so that the eligibility filters still leave enough), or, for a
-- since / until or named time holding at most 5,000 of the user's vectors, by exact distance
-- among those (read through the user's time index, _recall_time_index): 2 * k of them for a
-- vector alone (the index orders by its own float4 arithmetic, so rows within ~1e-7 of the k-th
-- distance come out in either order; the exact distance picks among twice as many), max(k, 200)
-- with query terms, and then also the eligible rows holding a query term that at most 400 of the
-- user's messages hold, the rarest terms first while their postings come to at most 400 in all
-- (_recall_lexical: the user's postings in pymem.recall_terms), however far from the query
-- vector. Every eligibility condition of _recall_ranked applies to them exactly; they are scored
-- as _recall_ranked scores, except that BM25's statistics are approximate: the average length
-- is the candidates'; the document count is the user's vectors when its index was planned, and
-- each term's document frequency its count in the user's words (at most 10,000,
-- _recall_term_counts), once those are filled (before: both the candidates'). Approximate: a row
-- the index does not reach, or for hybrid ranking a match by common words alone outside the
-- candidates, is missed (bench/README.md, "Heavy users"; bench/reports/2026-12-04-heavy-lexical).
-- Dynamic SQL: a partial index's predicate matches only literal values of the user, and
-- ivfflat's ORDER BY needs the vector with its dimensions (the type of the column, with typmod).
CREATE OR REPLACE FUNCTION pymem._recall(
    p_project_id text, p_user_id text, p_thread_id text, p_query vector, p_embedder text, p_text text,
    p_spec pymem.recall_spec)
RETURNS TABLE (thread_id text, seq bigint, similarity double precision, score double precision)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_index text;
    v_docs double precision;   -- the user's vectors when planned, when its words are filled
    v_words text[];
    v_rare text[];             -- the terms whose holders join the candidates
    v_df double precision[];   -- each query term's messages, from the user's words (at most 10,000)
    v_dims integer;
    v_lists integer;
    v_type text;
    v_window_after bigint;
    v_terms tsquery[];
    v_any tsquery;
    v_probes text;
    v_iterative text;
    v_threads text[];
    v_seqs bigint[];
    v_created timestamptz[];
    v_similarities double precision[];
    v_tokens integer[];
    v_lexemes tsvector[];
    v_scores double precision[];
    v_floor_reached boolean;   -- a candidate has no positive cosine (so none farther has)
    v_span boolean := pymem._names_time(p_spec);  -- a named time: two lists
    v_since timestamptz := GREATEST(p_spec.since, p_spec.time_from);  -- the named time within since / until
    v_until timestamptz := LEAST(p_spec.until, p_spec.time_to);
    v_floor_in boolean;        -- the same, for the candidates created in the named time
    v_pass integer;
    v_floor boolean;
    v_n integer;               -- how many of the k best the candidates give, and of a named time's
    v_n_in integer;
    v_time_index text;         -- the user's time index (_recall_time_index), valid
    v_lo timestamptz;          -- a pass's since / until
    v_hi timestamptz;
    v_exact boolean;           -- a pass through the time index, by exact distance
    v_before integer;          -- the candidates before a pass
    v_limit integer;           -- and how many a pass asks for
BEGIN
  <<candidates>>
  BEGIN
    -- recency and importance weights: the exact scan (a recent or important message far from
    -- the query vector is not among the candidates: recall@5 0.56 for a recency weight of 0.2)
    IF p_query IS NULL OR p_spec.k < 1 OR p_spec.recency_weight <> 0 OR p_spec.importance_weight <> 0 THEN
        EXIT candidates;
    END IF;
    SELECT r.index_name, r.dims, r.lists, CASE WHEN r.terms_filled THEN r.vectors END INTO v_index, v_dims, v_lists, v_docs
      FROM pymem.recall_indexes AS r
     WHERE r.project_id = p_project_id AND r.user_id = p_user_id AND r.embedder = p_embedder;
    IF v_index IS NULL OR pymem._vector_dims(p_query) <> v_dims OR NOT EXISTS (
           SELECT 1 FROM pg_catalog.pg_index AS i
            WHERE i.indexrelid = pg_catalog.to_regclass('pymem.' || pg_catalog.quote_ident(v_index))
              AND i.indisvalid AND i.indisready) THEN
        EXIT candidates;
    END IF;
    SELECT pg_catalog.format_type(a.atttypid, v_dims) INTO v_type
      FROM pg_catalog.pg_attribute AS a
     WHERE a.attrelid = 'pymem.message_embeddings'::pg_catalog.regclass AND a.attname = 'embedding';
    v_window_after := pymem._window_after(p_project_id, p_user_id, p_thread_id, p_spec.window_size);
    IF p_text IS NOT NULL AND p_spec.lexical_weight > 0 THEN  -- the query's terms, as _recall_ranked's (none at lw 0)
        v_terms := pymem._query_terms(p_project_id, p_text);
        IF pg_catalog.cardinality(v_terms) > 0 THEN
            v_any := pg_catalog.array_to_string(v_terms, ' | ')::tsquery;
        END IF;
    END IF;
    v_probes := pg_catalog.current_setting('ivfflat.probes', true);
    v_iterative := pg_catalog.current_setting('ivfflat.iterative_scan', true);
    PERFORM pg_catalog.set_config('ivfflat.probes', GREATEST(LEAST(v_lists, 10), v_lists / 40)::text, true);
    PERFORM pg_catalog.set_config('ivfflat.iterative_scan', 'relaxed_order', true);
    v_span := v_span AND v_since < v_until;  -- a named time outside since / until has no k best
    IF v_span OR p_spec.since IS NOT NULL OR p_spec.until IS NOT NULL THEN
        SELECT pymem._recall_time_index(v_index) INTO v_time_index
          FROM pg_catalog.pg_index AS i
         WHERE i.indexrelid = pg_catalog.to_regclass('pymem.' || pg_catalog.quote_ident(pymem._recall_time_index(v_index)))
           AND i.indisvalid AND i.indisready;
    END IF;
    FOR v_pass IN 1 .. CASE WHEN v_span THEN 2 ELSE 1 END LOOP  -- the nearest, then the nearest in the named time
    v_lo := CASE WHEN v_pass = 1 THEN p_spec.since ELSE v_since END;
    v_hi := CASE WHEN v_pass = 1 THEN p_spec.until ELSE v_until END;
    v_before := coalesce(pg_catalog.cardinality(v_threads), 0);
    v_limit := CASE WHEN v_any IS NULL THEN 2 * p_spec.k ELSE GREATEST(p_spec.k, 200) END;
    v_exact := false;
    -- a time holding at most 5,000 of the user's vectors: those by the time index, by exact
    -- distance (an IVFFlat scan for the nearest among few rows runs through the whole index)
    IF v_time_index IS NOT NULL AND (v_lo IS NOT NULL OR v_hi IS NOT NULL) THEN
        EXECUTE pg_catalog.format($q$SELECT pg_catalog.count(*) <= 5000 FROM (
                SELECT FROM pymem.message_embeddings AS e
                 WHERE e.project_id = %1$L AND e.user_id = %2$L AND e.embedder = %3$L AND e.created_at > '-infinity'
                   AND ($1::timestamptz IS NULL OR e.created_at >= $1) AND ($2::timestamptz IS NULL OR e.created_at < $2)
                 LIMIT 5001) AS s$q$, p_project_id, p_user_id, p_embedder) INTO v_exact USING v_lo, v_hi;
    END IF;
    EXECUTE pg_catalog.format($q$
        SELECT $11 || pg_catalog.array_agg(c.thread_id), $12 || pg_catalog.array_agg(c.seq),
               $13 || pg_catalog.array_agg(c.created_at), $14 || pg_catalog.array_agg(c.similarity),
               coalesce(pg_catalog.bool_or(NOT pymem._vector_match(c.similarity)), false),
               -- vectors stored before 0006_v0_2_0_memory: their message's lexemes (with terms only)
               $15 || pg_catalog.array_agg(coalesce(c.tokens, CASE WHEN c.lexemes IS NULL AND $10 THEN (
                   SELECT l.tokens FROM pymem.message_lexemes AS l
                    WHERE l.project_id = %2$L AND l.user_id = %3$L AND l.thread_id = c.thread_id AND l.seq = c.seq) END)),
               $16 || pg_catalog.array_agg(coalesce(c.lexemes, CASE WHEN c.lexemes IS NULL AND $10 THEN (
                   SELECT l.lexemes FROM pymem.message_lexemes AS l
                    WHERE l.project_id = %2$L AND l.user_id = %3$L AND l.thread_id = c.thread_id AND l.seq = c.seq) END))
          FROM (SELECT e.thread_id, e.seq, e.created_at, e.tokens, e.lexemes,
                       1 - pymem._cosine_distance(e.embedding::%1$s, $1::%1$s) AS similarity
                  FROM pymem.message_embeddings AS e
                 WHERE e.project_id = %2$L AND e.user_id = %3$L AND e.embedder = %4$L%6$s
                   AND ($2::timestamptz IS NULL OR e.created_at <= $2) AND e.chars >= $3
                   AND ($4::timestamptz IS NULL OR e.created_at >= $4) AND ($5::timestamptz IS NULL OR e.created_at < $5)
                   AND NOT (e.thread_id = $6 AND e.seq > $7)
                   AND ($8::jsonb IS NULL OR EXISTS (
                           SELECT 1 FROM pymem.messages AS m
                            WHERE m.project_id = %2$L AND m.user_id = %3$L
                              AND m.thread_id = e.thread_id AND m.seq = e.seq AND m.metadata @> $8))
                 ORDER BY pymem._cosine_distance(e.embedding::%1$s, $1::%1$s)%5$s
                 LIMIT $9) AS c$q$,
        v_type, p_project_id, p_user_id, p_embedder,
        CASE WHEN v_exact THEN ' + 0' END,  -- + 0: an order the IVFFlat index cannot give
        CASE WHEN v_exact THEN ' AND e.created_at > ''-infinity''' END)  -- the time index's predicate
      INTO v_threads, v_seqs, v_created, v_similarities, v_floor, v_tokens, v_lexemes
      USING p_query, p_spec.as_of, p_spec.min_content_chars, v_lo, v_hi, p_thread_id, v_window_after, p_spec.metadata,
            v_limit, v_any IS NOT NULL, v_threads, v_seqs, v_created, v_similarities, v_tokens, v_lexemes;
    -- an exact pass that found fewer than it asked for holds every eligible row of its time
    v_floor := v_floor OR (v_exact AND coalesce(pg_catalog.cardinality(v_threads), 0) - v_before < v_limit);
    v_floor_reached := CASE WHEN v_pass = 1 THEN v_floor ELSE v_floor_reached END;
    v_floor_in := CASE WHEN v_pass = 2 THEN v_floor END;
    END LOOP;
    PERFORM pg_catalog.set_config('ivfflat.probes', coalesce(v_probes, '1'), true);
    PERFORM pg_catalog.set_config('ivfflat.iterative_scan', coalesce(v_iterative, 'off'), true);
    IF v_any IS NOT NULL THEN  -- and the eligible rows holding a rare query term, wherever they lie
        v_words := pg_catalog.tsvector_to_array(pymem._lexemes(pymem._text_search_config(p_project_id), p_text));
        v_rare := v_words;
        IF v_docs IS NOT NULL THEN
            v_df := pymem._recall_term_counts(p_project_id, p_user_id, v_words);
            -- the rarest terms first, while their postings come to at most 400 in all (each
            -- posting is a vector read by key): the highest idf within a bounded cost
            v_rare := ARRAY(SELECT r.w FROM (
                                SELECT t.w, pg_catalog.sum(t.df) OVER (ORDER BY t.df, t.w) AS running
                                  FROM ROWS FROM (pg_catalog.unnest(v_words), pg_catalog.unnest(v_df)) AS t(w, df)
                                 WHERE t.df > 0) AS r
                             WHERE r.running <= 400);
        END IF;
        SELECT v_threads || pg_catalog.array_agg(x.thread_id), v_seqs || pg_catalog.array_agg(x.seq),
               v_created || pg_catalog.array_agg(x.created_at), v_similarities || pg_catalog.array_agg(x.similarity),
               v_tokens || pg_catalog.array_agg(x.tokens), v_lexemes || pg_catalog.array_agg(x.lexemes)
          INTO v_threads, v_seqs, v_created, v_similarities, v_tokens, v_lexemes
          FROM pymem._recall_lexical(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, v_rare,
                                     p_spec, v_window_after, v_threads, v_seqs) AS x;
    END IF;
    WITH c AS MATERIALIZED (  -- each candidate once (the two passes can find the same)
        SELECT DISTINCT ON (c.thread_id, c.seq) c.thread_id, c.seq, c.created_at, c.similarity, c.tokens,
               CASE WHEN c.lexemes @@ v_any THEN c.lexemes END AS lexemes
          FROM ROWS FROM (pg_catalog.unnest(v_threads), pg_catalog.unnest(v_seqs), pg_catalog.unnest(v_created),
                          pg_catalog.unnest(v_similarities), pg_catalog.unnest(v_tokens), pg_catalog.unnest(v_lexemes))
               AS c(thread_id, seq, created_at, similarity, tokens, lexemes)),
    st AS (  -- BM25's statistics: the candidates' length; the user's counts where its words tell
        SELECT GREATEST(coalesce(pg_catalog.avg(c.tokens), 1), 1)::float8 AS avgdl,
               ARRAY(SELECT pymem._bm25_idf(GREATEST(n.docs, coalesce(v_docs, 0)), GREATEST(d.df, coalesce(v_df[t.i], 0)))
                       FROM pg_catalog.generate_subscripts(v_terms, 1) AS t(i)
                      CROSS JOIN LATERAL (SELECT pg_catalog.count(*)::float8 AS df FROM c AS h
                                           WHERE h.lexemes @@ v_terms[t.i]) AS d
                      ORDER BY t.i) AS idf
          FROM c CROSS JOIN (SELECT pg_catalog.count(*)::float8 AS docs FROM c) AS n
         GROUP BY n.docs),
    lex AS (
        SELECT c.thread_id, c.seq,
               pymem._bm25((SELECT pg_catalog.sum(s.idf[t.i]) FROM pg_catalog.generate_subscripts(v_terms, 1) AS t(i)
                             WHERE c.lexemes @@ v_terms[t.i]), 1, c.tokens, s.avgdl, 0.3) AS bm25
          FROM c CROSS JOIN st AS s
         WHERE c.lexemes IS NOT NULL),
    scored AS (
        SELECT c.thread_id, c.seq, c.created_at, c.similarity,
               CASE WHEN v_any IS NULL THEN 1 ELSE 1 - p_spec.lexical_weight END * c.similarity
               + CASE WHEN v_any IS NULL THEN 0 ELSE p_spec.lexical_weight END
                 * coalesce(x.bm25 / NULLIF((SELECT pg_catalog.max(l.bm25) FROM lex AS l), 0), 0) AS score
          FROM c LEFT JOIN lex AS x ON x.thread_id = c.thread_id AND x.seq = c.seq
         WHERE pymem._vector_match(c.similarity) OR x.bm25 IS NOT NULL)  -- the floor: a vector match or a term in common
    SELECT pg_catalog.array_agg(r.thread_id ORDER BY r.o), pg_catalog.array_agg(r.seq ORDER BY r.o),
           pg_catalog.array_agg(r.similarity ORDER BY r.o), pg_catalog.array_agg(r.score ORDER BY r.o),
           pg_catalog.count(*) FILTER (WHERE r.o <= p_spec.k), pg_catalog.count(*) FILTER (WHERE r.i <= p_spec.k)
      INTO v_threads, v_seqs, v_similarities, v_scores, v_n, v_n_in
      FROM (SELECT r.*, CASE WHEN r.inside THEN pg_catalog.row_number() OVER (PARTITION BY r.inside ORDER BY r.o) END AS i
              FROM (SELECT r.thread_id, r.seq, r.similarity, r.score,  -- the k best, and a named time's k best
                           v_span AND r.created_at >= p_spec.time_from AND r.created_at < p_spec.time_to AS inside,
                           pg_catalog.row_number() OVER (ORDER BY r.score DESC, r.created_at DESC, r.thread_id, r.seq DESC) AS o
                      FROM scored AS r
                     WHERE p_spec.min_score IS NULL OR r.score >= p_spec.min_score) AS r) AS r
     WHERE r.o <= p_spec.k OR r.i <= p_spec.k;
    -- enough rows; or fewer because the floor left candidates out, and the nearest of those
    -- missing had no positive cosine: no row farther from the query has one either (the exact
    -- scan would find only lexical matches outside the candidates, which are approximate here);
    -- the same for the named time's
    IF (v_n >= p_spec.k OR (p_spec.min_score IS NULL AND v_floor_reached))
       AND (NOT v_span OR v_n_in >= p_spec.k OR (p_spec.min_score IS NULL AND v_floor_in)) THEN
        RETURN QUERY SELECT u.t, u.s, u.sim, u.sc
                       FROM ROWS FROM (pg_catalog.unnest(v_threads), pg_catalog.unnest(v_seqs),
                                       pg_catalog.unnest(v_similarities), pg_catalog.unnest(v_scores)) AS u(t, s, sim, sc);
        RETURN;
    END IF;
  END candidates;
    -- the exact scan (a statement of its own: a Citus worker cannot run a query on a shard that
    -- also calls _recall_ranked, which reads other tables)
    RETURN QUERY
    SELECT r.thread_id, r.seq, r.similarity, r.score
      FROM pymem._recall_ranked(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, p_text, p_spec) AS r;
END;
$$;

-- _recall_turns: _recall's ranking with a time the question names and the two turns after each
-- recalled turn (issue 32, items 3 and 4). With tw = the spec's time_weight when it names a time
-- (time_from and time_to; else 0) and w = its next_turn_weight, a message's own score is
--   own = _recall's score + tw when it was created in [time_from, time_to)
-- (min_score applies to _recall's score, before the bonus), and its score is
--   max(own (when eligible and matching, as _recall ranks it),
--       w * the own score of a message one or two before it in its thread (seq - 1 or seq - 2),
--           when that one is among the top k by own score)
-- and the top k by that score come back (scores equal to 9 decimals tie; in a tie a message by
-- its own score first, then the turn right after a recalled one before the turn two after it,
-- then as _recall's ties: newer first, then thread and seq). A
-- message brought as a next turn must be eligible as _recall's are (min_content_chars, outside
-- the current thread's window, as of as_of, in [since, until), containing the metadata filter,
-- w * that score at least min_score) but need not match the query nor have a vector: its
-- similarity is its own cosine when it was ranked itself, else NULL; it is always the same
-- user's in the same project (the lookup names both).
-- How: the top k by own score are among _recall's top k and _recall's top k within the named time
-- (one call: _recall returns both lists for a spec naming a time): a message outside the named time in the top k has fewer than
-- k messages above it by own score, so fewer above it by _recall's score; one inside, fewer inside
-- above it. Only the top k by own score are needed for the next turns: a message outside them
-- scores at most the k-th own score, and w times its predecessor's less, so the rows it could
-- displace from the k best are never ones the definition keeps. Each candidate and the two
-- messages after it are read in one statement on the messages table. tw = 0 and w = 0 (or k = 0): _recall's
-- ranking unchanged, no second statement. Measured on the development data (LoCoMo, three
-- conversations; bench/reports/2026-12-04-recall4): w 0.8 for the turn after raised evidence
-- recall@5 from 0.61 to 0.65 (the turn before, or both neighbours, measured worse: multi-hop
-- questions lost the distinct turns they need); tw 0.2 with the times Memory reads in questions,
-- to 0.67. The second turn after (bench/reports/2026-12-04-recall5): recall@5 / @10 0.665 / 0.747
-- to 0.680 / 0.772 (a third turn after measured worse).
CREATE OR REPLACE FUNCTION pymem._recall_turns(
    p_project_id text, p_user_id text, p_thread_id text, p_query vector, p_embedder text, p_text text,
    p_spec pymem.recall_spec)
RETURNS TABLE (thread_id text, seq bigint, similarity double precision, score double precision)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_threads text[];
    v_seqs bigint[];
    v_similarities double precision[];
    v_scores double precision[];
    v_w double precision := coalesce(p_spec.next_turn_weight, 0);
    v_tw double precision := CASE WHEN pymem._names_time(p_spec) THEN p_spec.time_weight ELSE 0 END;
    v_window_after bigint;
    v_m_threads text[];         -- the candidates' messages and the two after each
    v_m_seqs bigint[];
    v_m_created timestamptz[];
    v_m_ok boolean[];
    v_wanted bigint[];          -- every candidate's seq to seq + 2
BEGIN
    IF (v_w = 0 AND v_tw = 0) OR p_spec.k < 1 THEN
        RETURN QUERY SELECT r.thread_id, r.seq, r.similarity, r.score
                       FROM pymem._recall(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, p_text, p_spec) AS r;
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(r.thread_id ORDER BY r.ordinality), pg_catalog.array_agg(r.seq ORDER BY r.ordinality),
           pg_catalog.array_agg(r.similarity ORDER BY r.ordinality), pg_catalog.array_agg(r.score ORDER BY r.ordinality)
      INTO v_threads, v_seqs, v_similarities, v_scores
      FROM pymem._recall(p_project_id, p_user_id, p_thread_id, p_query, p_embedder, p_text, p_spec) WITH ORDINALITY AS r;
    IF v_threads IS NULL THEN
        RETURN;
    END IF;
    v_window_after := pymem._window_after(p_project_id, p_user_id, p_thread_id, p_spec.window_size);
    -- each candidate's message and the two after it, in one read of the user's messages by key
    -- (their threads and every candidate's seq to seq + 2: a superset, matched below), each with
    -- whether it may come back as a turn after: a statement on one table, which Citus runs by its
    -- fast path on the local shard (as a join with the candidates it planned it in full;
    -- docs/performance.md, "Measured in the SQL")
    v_wanted := ARRAY(SELECT s.s + d.d FROM pg_catalog.unnest(v_seqs) AS s(s) CROSS JOIN pg_catalog.generate_series(0, 2) AS d(d));
    SELECT pg_catalog.array_agg(m.thread_id), pg_catalog.array_agg(m.seq), pg_catalog.array_agg(m.created_at),
           pg_catalog.array_agg(pg_catalog.length(m.content) >= p_spec.min_content_chars
                                AND (p_spec.as_of IS NULL OR m.created_at <= p_spec.as_of)
                                AND (p_spec.since IS NULL OR m.created_at >= p_spec.since)
                                AND (p_spec.until IS NULL OR m.created_at < p_spec.until)
                                AND NOT (m.thread_id = p_thread_id AND m.seq > v_window_after)
                                AND (p_spec.metadata IS NULL OR m.metadata @> p_spec.metadata))
      INTO v_m_threads, v_m_seqs, v_m_created, v_m_ok
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.thread_id = ANY (v_threads)
       AND m.seq = ANY (v_wanted);
    RETURN QUERY
    WITH c AS MATERIALIZED (  -- each candidate (from_seq) and the two messages after it
        SELECT r.thread_id, r.seq AS from_seq, r.similarity, r.score, m.seq, m.created_at, m.ok
          FROM ROWS FROM (pg_catalog.unnest(v_threads), pg_catalog.unnest(v_seqs),
                          pg_catalog.unnest(v_similarities), pg_catalog.unnest(v_scores))
               AS r(thread_id, seq, similarity, score)
          JOIN ROWS FROM (pg_catalog.unnest(v_m_threads), pg_catalog.unnest(v_m_seqs), pg_catalog.unnest(v_m_created),
                          pg_catalog.unnest(v_m_ok)) AS m(thread_id, seq, created_at, ok)
            ON m.thread_id = r.thread_id AND m.seq >= r.seq AND m.seq <= r.seq + 2),
    own AS MATERIALIZED (  -- the top k by own score (a candidate of both lists once)
        SELECT o.thread_id, o.seq, o.similarity, o.score, o.created_at
          FROM (SELECT c.thread_id, c.seq, pg_catalog.max(c.similarity) AS similarity, pg_catalog.max(c.created_at) AS created_at,
                       pg_catalog.max(c.score) + CASE WHEN pg_catalog.max(c.created_at) >= p_spec.time_from
                                                       AND pg_catalog.max(c.created_at) < p_spec.time_to
                                                      THEN v_tw ELSE 0 END AS score
                  FROM c WHERE c.seq = c.from_seq
                 GROUP BY c.thread_id, c.seq) AS o
         ORDER BY o.score DESC, o.created_at DESC, o.thread_id, o.seq DESC
         LIMIT p_spec.k),
    nxt AS (  -- the two turns after each of them, eligible as _recall's rows are
        SELECT c.thread_id, c.seq, NULL::float8 AS similarity, v_w * o.score AS score, c.created_at,
               c.seq - o.seq AS hop
          FROM own AS o
          JOIN c ON c.thread_id = o.thread_id AND c.from_seq = o.seq AND c.seq > o.seq
         WHERE v_w > 0 AND c.ok
           AND (p_spec.min_score IS NULL OR v_w * o.score >= p_spec.min_score))
    SELECT g.thread_id, g.seq, g.similarity, g.score
      FROM (SELECT a.thread_id, a.seq, pg_catalog.max(a.similarity) AS similarity, pg_catalog.max(a.score) AS score,
                   pg_catalog.max(a.created_at) AS created_at,
                   (pg_catalog.array_agg(a.hop ORDER BY a.score DESC, a.hop))[1] AS hop  -- that of its best score
              FROM (SELECT o.thread_id, o.seq, o.similarity, o.score, o.created_at, 0::bigint AS hop FROM own AS o
                    UNION ALL
                    SELECT n.thread_id, n.seq, n.similarity, n.score, n.created_at, n.hop FROM nxt AS n) AS a
             GROUP BY a.thread_id, a.seq) AS g
     -- scores equal to 9 decimals tie (below that: the rounding of float4 vectors and of sums added
     -- in another order); in a tie the nearer turn first, then as _recall's ties
     ORDER BY pg_catalog.round(g.score::numeric, 9) DESC, g.hop, g.created_at DESC, g.thread_id, g.seq DESC
     LIMIT p_spec.k;
END;
$$;

-- messages_recall: a user's past messages most relevant to a query: its vector (`query_vector`, from
-- `embedder`), its text (`query_text`), or both (the default of Memory.recall: hybrid ranking),
-- ranked as `recall` says (a recall spec, pymem.recall(...): k, the weights, min_score, the filters;
-- see recall and _recall_ranked): scored by relevance, recency and importance, the top k of those
-- scoring at least min_score (NULL: no threshold), with their metadata. The spec's as_of (default
-- now) recalls as of a past time: nothing newer is eligible and recency is measured from it; since /
-- until keep the messages created in [since, until); metadata keeps those whose metadata contains it
-- (jsonb @>). A spec out of range: 22023.
--   SELECT role, content, round(score::numeric, 3) FROM pymem.messages_recall(
--       user_id => 'alice', query_text => 'Where do I live?', recall => pymem.recall(k => 5));
CREATE OR REPLACE FUNCTION pymem.messages_recall(
    user_id text,
    query_vector vector DEFAULT NULL,
    embedder text DEFAULT NULL,
    project_id text DEFAULT '',
    thread_id text DEFAULT 'default',
    query_text text DEFAULT NULL,
    recall pymem.recall_spec DEFAULT pymem.recall())
RETURNS SETOF pymem.recalled_message
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_threads text[];
    v_seqs bigint[];
    v_similarities double precision[];
    v_scores double precision[];
    v_i integer;
    v_spec pymem.recall_spec;
BEGIN
    PERFORM pymem._tenant_enter(messages_recall.project_id);
    v_spec := pymem._recall_check(messages_recall.recall);
    IF messages_recall.query_vector IS NULL AND messages_recall.query_text IS NULL THEN
        RAISE EXCEPTION 'pymem: recall needs a query: its vector (query_vector), its text (query_text) or both'
            USING ERRCODE = '22023';
    END IF;
    IF NOT pymem._conv_check(messages_recall.project_id, messages_recall.user_id, messages_recall.thread_id, 'match') THEN
        RETURN;
    END IF;
    IF messages_recall.query_vector IS NOT NULL THEN
        PERFORM pymem._query_check(messages_recall.project_id, messages_recall.embedder, messages_recall.query_vector);
    END IF;
    -- two statements: the ranking alone (_recall_turns: _recall's, a recall index's candidates or
    -- the exact scan, with the turns after the recalled ones),
    -- then each winner by primary key (a Citus worker cannot run a query on a shard that also
    -- calls _recall_ranked, which reads other tables)
    SELECT pg_catalog.array_agg(r.thread_id ORDER BY r.ordinality), pg_catalog.array_agg(r.seq ORDER BY r.ordinality),
           pg_catalog.array_agg(r.similarity ORDER BY r.ordinality), pg_catalog.array_agg(r.score ORDER BY r.ordinality)
      INTO v_threads, v_seqs, v_similarities, v_scores
      FROM pymem._recall_turns(messages_recall.project_id, messages_recall.user_id, messages_recall.thread_id,
                         messages_recall.query_vector, messages_recall.embedder, messages_recall.query_text,
                         v_spec) WITH ORDINALITY AS r;
    FOR v_i IN 1 .. coalesce(pg_catalog.cardinality(v_threads), 0) LOOP
        RETURN QUERY
        SELECT m.thread_id, m.seq, m.role, m.content, m.created_at, m.importance, v_similarities[v_i], v_scores[v_i],
               m.metadata
          FROM pymem.messages AS m
         WHERE m.project_id = messages_recall.project_id AND m.user_id = messages_recall.user_id
           AND m.thread_id = v_threads[v_i] AND m.seq = v_seqs[v_i];
    END LOOP;
END;
$$;
