-- conversations_recall_turns.sql: recall's parameters (_recall_check, _names_time) and what recall
-- adds around _recall's ranking (issue 32): a time the question names and the two turns after
-- each recalled turn (_recall_turns, which messages_recall and context_read call;
-- conversations_recall.sql has the ranking itself). Re-applied on every migrate.
--
-- Errors: 22023 invalid argument.

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
    -- fast path on the local shard (as a join with the candidates it planned it in full: 1.1 ms
    -- of a worker's context_read against 0.2 for the shard's read, bench/reports/
    -- 2026-12-04-citus-context-profile)
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
