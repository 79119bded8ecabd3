-- portability.sql: a user's whole memory as one JSON document, and back. Re-applied on every
-- migrate. Called by `pymem export` / `pymem import` (pymem/portability.py) and any SQL client.
-- The document holds the user's facts with their supersede history, every thread with its
-- messages and running summary. Vectors are not exported: the importing side embeds again
-- (recall and semantic retrieval catch up in one batch on first use).
-- user_import runs in one transaction: it writes everything or nothing.

-- user_export: the document for (project_id, user_id); format "pymem.user/1".
--   SELECT pymem.user_export(user_id => 'alice');
CREATE OR REPLACE FUNCTION pymem.user_export(user_id text, project_id text DEFAULT '')
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(user_export.project_id);
    PERFORM pymem._fact_check_subject('user', user_export.user_id, user_export.project_id, 'write');
    RETURN pg_catalog.jsonb_build_object(
        'format', 'pymem.user/1',
        'project_id', user_export.project_id,
        'user_id', user_export.user_id,
        'facts', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                      'id', f.id, 'content', f.content, 'confidence', f.confidence, 'source', f.source,
                      'trace_id', f.trace_id, 'metadata', f.metadata, 'created_at', f.created_at,
                      'superseded_by', f.superseded_by, 'superseded_at', f.superseded_at) ORDER BY f.id), '[]')
                    FROM pymem.facts AS f
                   WHERE f.project_id = user_export.project_id AND f.scope = 'user' AND f.scope_id = user_export.user_id),
        'threads', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                        'thread_id', t.thread_id, 'summary', t.summary, 'summary_through', t.summary_through,
                        'summary_at', t.summary_at, 'created_at', t.created_at,
                        'messages', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                                         'seq', m.seq, 'role', m.role, 'content', m.content, 'importance', m.importance,
                                         'metadata', m.metadata, 'created_at', m.created_at) ORDER BY m.seq), '[]')
                                       FROM pymem.messages AS m
                                      WHERE m.project_id = t.project_id AND m.user_id = t.user_id
                                        AND m.thread_id = t.thread_id)) ORDER BY t.thread_id), '[]')
                      FROM pymem.threads AS t
                     WHERE t.project_id = user_export.project_id AND t.user_id = user_export.user_id));
END;
$$;

-- user_import: loads a user_export document, under the document's project and user unless
-- project_id / user_id say otherwise. Refuses (22023) when that user already has facts or
-- threads there, unless replace => true (which first forgets them). Returns counts.
--   SELECT pymem.user_import(document => pg_read_file(...)::jsonb, user_id => 'alice2');
CREATE OR REPLACE FUNCTION pymem.user_import(
    document jsonb, project_id text DEFAULT NULL, user_id text DEFAULT NULL, replace boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project text := coalesce(user_import.project_id, document ->> 'project_id', '');
    v_user text := coalesce(user_import.user_id, document ->> 'user_id');
    v_fact jsonb;
    v_thread jsonb;
    v_new bigint;
    v_map jsonb := '{}';
    v_content text;
    v_facts integer := 0;
    v_messages integer := 0;
    v_threads integer := 0;
    v_last bigint;
BEGIN
    IF document IS NULL OR pg_catalog.jsonb_typeof(document) <> 'object' OR document ->> 'format' IS DISTINCT FROM 'pymem.user/1' THEN
        RAISE EXCEPTION 'pymem: not a pymem user document (expected "format": "pymem.user/1")' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._fact_check_subject('user', v_user, v_project, 'write');
    PERFORM pymem._conv_check(v_project, v_user, NULL, 'write');
    PERFORM pymem._tenant_enter(v_project);
    IF EXISTS (SELECT 1 FROM pymem.facts AS f WHERE f.project_id = v_project AND f.scope = 'user' AND f.scope_id = v_user)
       OR EXISTS (SELECT 1 FROM pymem.threads AS t WHERE t.project_id = v_project AND t.user_id = v_user) THEN
        IF NOT user_import.replace THEN
            RAISE EXCEPTION 'pymem: user % already has memory in project %', pg_catalog.quote_literal(v_user),
                    pg_catalog.quote_literal(v_project)
                USING ERRCODE = '22023', HINT = 'Import under another user_id, or pass replace => true.';
        END IF;
        PERFORM pymem.facts_forget('user', v_user, v_project);
        PERFORM pymem.conversation_forget(v_user, '*', v_project);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(coalesce(document -> 'facts', '[]')) AS e
                WHERE pg_catalog.jsonb_typeof(e.value) <> 'object' OR pg_catalog.jsonb_typeof(e.value -> 'id') <> 'number') THEN
        RAISE EXCEPTION 'pymem: every fact of the document needs a numeric "id"' USING ERRCODE = '22023';
    END IF;
    -- Chains are inserted head first (a fact's successor exists before the fact points at it):
    -- order by the distance to the head of the chain, following superseded_by in the document.
    -- A fact that reaches no head (a dangling pointer or a cycle) is refused.
    SELECT pg_catalog.count(*) INTO v_facts FROM pg_catalog.jsonb_array_elements(coalesce(document -> 'facts', '[]'));
    FOR v_fact IN
        WITH RECURSIVE doc AS (
            SELECT (e.value ->> 'id')::bigint AS id, (e.value ->> 'superseded_by')::bigint AS next, e.value AS fact
              FROM pg_catalog.jsonb_array_elements(coalesce(document -> 'facts', '[]')) AS e
        ), chain AS (
            SELECT d.id, d.fact, 0 AS depth FROM doc AS d WHERE d.next IS NULL
            UNION ALL
            SELECT d.id, d.fact, c.depth + 1 FROM doc AS d JOIN chain AS c ON d.next = c.id WHERE c.depth < 100000
        )
        SELECT c.fact FROM chain AS c ORDER BY c.depth, c.id
    LOOP
        v_content := pymem._fact_check_values(v_fact ->> 'content', coalesce((v_fact ->> 'confidence')::float8, 1.0),
                                              coalesce(v_fact ->> 'source', 'manual'), v_fact ->> 'trace_id',
                                              coalesce(v_fact -> 'metadata', '{}'));
        INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source,
                                      trace_id, metadata, created_at, superseded_by, superseded_at)
        VALUES (v_project, 'user', v_user, v_content, pymem.fact_key(v_content),
                coalesce((v_fact ->> 'confidence')::float8, 1.0), coalesce(v_fact ->> 'source', 'manual'),
                v_fact ->> 'trace_id', coalesce(v_fact -> 'metadata', '{}'),
                coalesce((v_fact ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp()),
                (v_map ->> (v_fact ->> 'superseded_by'))::bigint,
                CASE WHEN v_fact ->> 'superseded_by' IS NOT NULL
                     THEN coalesce((v_fact ->> 'superseded_at')::timestamptz, pg_catalog.clock_timestamp()) END)
        RETURNING f.id INTO v_new;
        v_map := v_map || pg_catalog.jsonb_build_object(v_fact ->> 'id', v_new);
    END LOOP;
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.jsonb_object_keys(v_map)) <> v_facts THEN
        RAISE EXCEPTION 'pymem: % fact(s) of the document point at facts it does not hold (or form a cycle)',
                v_facts - (SELECT pg_catalog.count(*) FROM pg_catalog.jsonb_object_keys(v_map))
            USING ERRCODE = '22023';
    END IF;
    FOR v_thread IN SELECT e.value FROM pg_catalog.jsonb_array_elements(coalesce(document -> 'threads', '[]')) AS e LOOP
        IF v_thread ->> 'thread_id' IS NULL THEN
            RAISE EXCEPTION 'pymem: every thread of the document needs a "thread_id"' USING ERRCODE = '22023';
        END IF;
        PERFORM pymem._conv_check(v_project, v_user, v_thread ->> 'thread_id', 'write');
        IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(coalesce(v_thread -> 'messages', '[]')) AS m
                    WHERE pg_catalog.jsonb_typeof(m.value -> 'seq') IS DISTINCT FROM 'number'
                       OR (m.value ->> 'seq')::numeric <= 0) THEN
            RAISE EXCEPTION 'pymem: every message of the document needs a positive numeric "seq"' USING ERRCODE = '22023';
        END IF;
        PERFORM pymem._message_check(m.value ->> 'role', m.value ->> 'content',
                                     coalesce((m.value ->> 'importance')::float8, 1.0))
           FROM pg_catalog.jsonb_array_elements(coalesce(v_thread -> 'messages', '[]')) AS m;
        SELECT coalesce(pg_catalog.max((m.value ->> 'seq')::bigint), 0) INTO v_last
          FROM pg_catalog.jsonb_array_elements(coalesce(v_thread -> 'messages', '[]')) AS m;
        INSERT INTO pymem.threads (project_id, user_id, thread_id, last_seq, summary, summary_through, summary_at, created_at)
        VALUES (v_project, v_user, v_thread ->> 'thread_id', v_last, v_thread ->> 'summary',
                LEAST(coalesce((v_thread ->> 'summary_through')::bigint, 0), v_last),
                (v_thread ->> 'summary_at')::timestamptz,
                coalesce((v_thread ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp()));
        INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata, created_at)
        SELECT v_project, v_user, v_thread ->> 'thread_id', (m.value ->> 'seq')::bigint, m.value ->> 'role',
               m.value ->> 'content', coalesce((m.value ->> 'importance')::float8, 1.0),
               coalesce(m.value -> 'metadata', '{}'),
               coalesce((m.value ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp())
          FROM pg_catalog.jsonb_array_elements(coalesce(v_thread -> 'messages', '[]')) AS m;
        v_messages := v_messages + pg_catalog.jsonb_array_length(coalesce(v_thread -> 'messages', '[]'));
        v_threads := v_threads + 1;
    END LOOP;
    RETURN pg_catalog.jsonb_build_object('project_id', v_project, 'user_id', v_user,
                                         'facts', v_facts, 'threads', v_threads, 'messages', v_messages);
END;
$$;
