-- context.sql: everything one turn reads, in one call: the agent's facts, the user's facts,
-- the thread's running summary, recalled messages (deduplicated against the blocks above) and
-- the window. Re-applied on every migrate. Called by pymem/context.py (Memory.context) and by
-- any service that builds prompts with SQL alone. Read-only; takes no locks.

-- _norm: lower-cased, whitespace-folded text for the dedupe test. Two replacements that
-- match only what changes (a whitespace character other than a space, then a run of spaces)
-- instead of one that matches every space (faster: docs/performance.md, "Measured in the SQL").
CREATE OR REPLACE FUNCTION pymem._norm(content text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.btrim(pg_catalog.lower(pg_catalog.regexp_replace(
        pg_catalog.regexp_replace(content, '[\t\n\r\f\v\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]', ' ', 'g'), '  +', ' ', 'g')));
$$;

-- context_read: the prompt context for one turn as one jsonb object:
--   {"agent_facts": [{id, content, confidence, created_at}], "user_facts": [...],
--    "summary": text or null, "summary_through": n,
--    "recalled": [{thread_id, seq, role, content, metadata, created_at, similarity, score}],
--    "deduped": n, "window": [{seq, role, content, metadata, created_at}],
--    "unembedded": [{thread_id, seq, content}]}
-- user_id NULL (an unresolved caller) reads agent facts only. agent_id NULL reads no agent
-- facts ('' is refused: it would mean every agent). Each block of facts is the subject's newest
-- max_facts; a subject with more, when the turn has a query, gets the max_facts that rank best for
-- it instead (facts_search's fusion with the spec's lexical_weight; facts_search.sql,
-- _facts_for_context). `recall` is a recall spec (pymem.recall(...), as messages_recall takes it):
-- recall ranks as messages_recall does, by the query's vector (query_vector, from embedder), its
-- text (query_text) or both (hybrid); with neither, or k 0, it is skipped. The window is the
-- thread's last window_size messages (the spec's: the ones recall leaves out). A recalled message
-- whose normalised content already appears in a fact or the summary is dropped when dedupe is on
-- (counted in "deduped"). With a query vector, "unembedded" lists up to max_unembedded of the user's
-- messages with no vector from `embedder` (written by SQL): embed them, store them with
-- message_embeddings_put, and call again for a complete recall.
-- A point in time: the spec's as_of (record time) reads the facts as they were believed then (and
-- recalls the messages written by then); valid_at (valid time) reads the facts that hold then (as
-- believed as of as_of, default now). Either one gives each block of facts the newest max_facts of
-- facts_at (migrations/0006_v0_2_0_memory.sql), unranked; the summary and the window are the thread's now.
--   SELECT pymem.context_read(user_id => 'alice', agent_id => 'support-bot',
--                             recall => pymem.recall(k => 3, window_size => 10));
CREATE OR REPLACE FUNCTION pymem.context_read(
    user_id text,
    agent_id text DEFAULT NULL,
    project_id text DEFAULT '',
    thread_id text DEFAULT 'default',
    query_vector vector DEFAULT NULL,
    embedder text DEFAULT NULL,
    query_text text DEFAULT NULL,
    recall pymem.recall_spec DEFAULT pymem.recall(),
    max_facts integer DEFAULT 50,
    dedupe boolean DEFAULT true,
    max_unembedded integer DEFAULT 100,
    valid_at timestamptz DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
-- Every statement inside has a good generic plan (each reads one user's rows through a
-- btree). Left to choose, the plan cache re-plans some of them on every call once the tables
-- are large (its cost estimate of the generic plan is higher), which is slower (docs/performance.md,
-- "Measured in the SQL").
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_agent jsonb := '[]';
    v_user jsonb := '[]';
    v_summary text;
    v_through bigint := 0;
    v_upstream text;
    v_recalled jsonb := '[]';
    v_deduped integer := 0;
    v_window jsonb := '[]';
    v_unembedded jsonb := '[]';
    v_has_user boolean;
    v_kept integer := 0;
    v_threads text[];
    v_seqs bigint[];
    v_similarities double precision[];
    v_scores double precision[];
    v_i integer;
    v_spec pymem.recall_spec;
    v_recall pymem.recall_spec;
    v_pass integer;
    v_seen_threads text[];
    v_seen_seqs bigint[];
    v_keys text[];  -- the candidates' messages, read at once
    v_roles text[];
    v_contents text[];
    v_metadatas jsonb[];
    v_created timestamptz[];
    v_at integer;
BEGIN
    PERFORM pymem._tenant_enter(context_read.project_id);
    PERFORM pymem._check_limit('max_facts', context_read.max_facts);
    PERFORM pymem._check_limit('max_unembedded', context_read.max_unembedded);
    v_spec := pymem._recall_check(context_read.recall);
    IF NOT pg_catalog.isfinite(coalesce(context_read.valid_at, '2000-01-01')) THEN
        RAISE EXCEPTION 'pymem: valid_at must be a finite time (or NULL: now)' USING ERRCODE = '22023';
    END IF;
    IF context_read.query_vector IS NOT NULL THEN  -- once, for the facts' ranking and for recall
        PERFORM pymem._query_check(context_read.project_id, context_read.embedder, context_read.query_vector);
    END IF;
    IF context_read.agent_id IS NOT NULL
       AND pymem._fact_check_subject('agent', context_read.agent_id, context_read.project_id, 'match') THEN
        SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                   'id', f.id, 'content', f.content, 'confidence', f.confidence, 'created_at', f.created_at)), '[]')
          INTO v_agent
          FROM pymem._facts_for_context(context_read.project_id, 'agent', context_read.agent_id, context_read.max_facts,
                                        context_read.query_vector, context_read.embedder, context_read.query_text,
                                        v_spec.lexical_weight, context_read.valid_at, v_spec.as_of) AS f;
    END IF;
    v_has_user := context_read.user_id IS NOT NULL
        AND pymem._conv_check(context_read.project_id, context_read.user_id, context_read.thread_id, 'match');
    IF v_has_user THEN
        SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                   'id', f.id, 'content', f.content, 'confidence', f.confidence, 'created_at', f.created_at)), '[]')
          INTO v_user
          FROM pymem._facts_for_context(context_read.project_id, 'user', context_read.user_id, context_read.max_facts,
                                        context_read.query_vector, context_read.embedder, context_read.query_text,
                                        v_spec.lexical_weight, context_read.valid_at, v_spec.as_of) AS f;
        SELECT t.summary, t.summary_through INTO v_summary, v_through FROM pymem.threads AS t
         WHERE t.project_id = context_read.project_id AND t.user_id = context_read.user_id
           AND t.thread_id = context_read.thread_id;
        v_through := coalesce(v_through, 0);
        SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                   'seq', w.seq, 'role', w.role, 'content', w.content, 'metadata', w.metadata,
                   'created_at', w.created_at) ORDER BY w.seq), '[]')
          INTO v_window
          FROM pymem._window(context_read.project_id, context_read.user_id, context_read.thread_id,
                             v_spec.window_size) AS w;
        IF (context_read.query_vector IS NOT NULL OR context_read.query_text IS NOT NULL) AND v_spec.k > 0 THEN
            v_upstream := CASE WHEN context_read.dedupe THEN pymem._norm(pg_catalog.concat_ws(' ',
                (SELECT pg_catalog.string_agg(a.value ->> 'content', ' ') FROM pg_catalog.jsonb_array_elements(v_agent) AS a),
                (SELECT pg_catalog.string_agg(u.value ->> 'content', ' ') FROM pg_catalog.jsonb_array_elements(v_user) AS u),
                v_summary)) END;
            -- candidates best first (the ranking alone, _recall_turns: a recall index's candidates or
            -- the exact scan, with the turns after them; a Citus worker cannot run a query on a
            -- shard that also calls _recall_ranked), then each one's message by primary key until k
            -- are kept. First messages_recall's k; only when the dedupe dropped some of them and
            -- there may be more (k came back), k + 20, skipping those already seen (the ranking is
            -- a total order, so the first k of k + 20 are the same rows). Asking
            -- for k + 20 every time ranked and expanded 25 candidates to keep 5 (its cost:
            -- docs/performance.md, "Measured in the SQL").
            v_recall := v_spec;
            FOR v_pass IN 1 .. 2 LOOP
                IF v_pass = 2 THEN
                    EXIT WHEN v_kept >= v_spec.k OR coalesce(pg_catalog.cardinality(v_threads), 0) < v_recall.k;
                    v_seen_threads := v_threads;
                    v_seen_seqs := v_seqs;
                    v_recall.k := v_spec.k + 20;
                END IF;
                SELECT pg_catalog.array_agg(r.thread_id ORDER BY r.ordinality), pg_catalog.array_agg(r.seq ORDER BY r.ordinality),
                       pg_catalog.array_agg(r.similarity ORDER BY r.ordinality), pg_catalog.array_agg(r.score ORDER BY r.ordinality)
                  INTO v_threads, v_seqs, v_similarities, v_scores
                  FROM pymem._recall_turns(context_read.project_id, context_read.user_id, context_read.thread_id,
                                           context_read.query_vector, context_read.embedder, context_read.query_text,
                                           v_recall) WITH ORDINALITY AS r;
                -- the candidates' messages in one read of the user's rows (one routed statement
                -- on Citus, instead of one per candidate), by key: thread, a unit
                -- separator and seq (seq has no separator, so equal keys are equal pairs)
                SELECT pg_catalog.array_agg(m.thread_id || E'\x1f' || m.seq), pg_catalog.array_agg(m.role),
                       pg_catalog.array_agg(m.content), pg_catalog.array_agg(m.metadata), pg_catalog.array_agg(m.created_at)
                  INTO v_keys, v_roles, v_contents, v_metadatas, v_created
                  FROM pymem.messages AS m
                 WHERE m.project_id = context_read.project_id AND m.user_id = context_read.user_id
                   AND m.thread_id = ANY (v_threads) AND m.seq = ANY (v_seqs);
                FOR v_i IN 1 .. coalesce(pg_catalog.cardinality(v_threads), 0) LOOP
                    CONTINUE WHEN v_pass = 2 AND EXISTS (
                        SELECT 1 FROM ROWS FROM (pg_catalog.unnest(v_seen_threads), pg_catalog.unnest(v_seen_seqs)) AS x(t, s)
                         WHERE x.t = v_threads[v_i] AND x.s = v_seqs[v_i]);
                    v_at := pg_catalog.array_position(v_keys, v_threads[v_i] || E'\x1f' || v_seqs[v_i]);
                    CONTINUE WHEN v_at IS NULL;  -- the vector's FK makes the message exist in this snapshot
                    IF context_read.dedupe AND pg_catalog.strpos(v_upstream, pymem._norm(v_contents[v_at])) > 0 THEN
                        v_deduped := v_deduped + 1;
                        CONTINUE;
                    END IF;
                    v_recalled := v_recalled || pg_catalog.jsonb_build_object(
                        'thread_id', v_threads[v_i], 'seq', v_seqs[v_i], 'role', v_roles[v_at], 'content', v_contents[v_at],
                        'metadata', v_metadatas[v_at], 'created_at', v_created[v_at], 'similarity', v_similarities[v_i],
                        'score', v_scores[v_i]);
                    v_kept := v_kept + 1;
                    EXIT WHEN v_kept >= v_spec.k;
                END LOOP;
            END LOOP;
            IF context_read.query_vector IS NOT NULL THEN
                SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                           'thread_id', u.thread_id, 'seq', u.seq, 'content', u.content)), '[]')
                  INTO v_unembedded
                  FROM pymem._messages_unembedded(context_read.project_id, context_read.user_id, context_read.embedder,
                                                  v_spec.min_content_chars, context_read.max_unembedded) AS u;
            END IF;
        END IF;
    END IF;
    RETURN pg_catalog.jsonb_build_object(
        'agent_facts', v_agent, 'user_facts', v_user, 'summary', v_summary, 'summary_through', v_through,
        'recalled', v_recalled, 'deduped', v_deduped, 'window', v_window, 'unembedded', v_unembedded);
END;
$$;
