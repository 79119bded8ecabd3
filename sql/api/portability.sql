-- portability.sql: a user's whole memory as one JSON document, and back (the erasure of a user
-- is erasure.sql). Re-applied on every migrate. Called by `pymem export` / `pymem import`
-- (pymem/portability.py) and any SQL client.
-- The document holds the user's facts with their supersede history, every thread with its
-- messages and running summary. Vectors are not exported: the importing side embeds again
-- (recall and semantic retrieval catch up in one batch on first use).
-- user_import runs in one transaction: it writes everything or nothing.

-- user_export: the document for (project_id, user_id); format "pymem.user/1". A user with no
-- facts and no threads in that project is refused (P0002), not exported as an empty document:
-- a mistyped id or a forgotten project_id would otherwise look like a user with no memory.
--   SELECT pymem.user_export(user_id => 'alice');
CREATE OR REPLACE FUNCTION pymem.user_export(user_id text, project_id text DEFAULT '')
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(user_export.project_id);
    PERFORM pymem._fact_check_subject('user', user_export.user_id, user_export.project_id, 'exact');
    -- every history ends in an active fact, so looking at active ones (indexed) is enough
    IF NOT EXISTS (SELECT 1 FROM pymem.active_facts AS f
                    WHERE f.project_id = user_export.project_id AND f.scope = 'user' AND f.scope_id = user_export.user_id)
       AND NOT EXISTS (SELECT 1 FROM pymem.threads AS t
                        WHERE t.project_id = user_export.project_id AND t.user_id = user_export.user_id) THEN
        RAISE EXCEPTION 'pymem: no user % in project %: it has no facts and no conversations there',
                pg_catalog.quote_literal(user_export.user_id), pg_catalog.quote_literal(user_export.project_id)
            USING ERRCODE = 'P0002', HINT = 'Each project is separate: check user_id and project_id.';
    END IF;
    RETURN pg_catalog.jsonb_build_object(
        'format', 'pymem.user/1',
        'project_id', user_export.project_id,
        'user_id', user_export.user_id,
        'facts', (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(f) OPERATOR(pg_catalog.-)
                                                       '{project_id,scope,scope_id,content_key}'::text[] ORDER BY f.id), '[]')
                    FROM pymem.facts AS f
                   WHERE f.project_id = user_export.project_id AND f.scope = 'user' AND f.scope_id = user_export.user_id
                     AND pymem._fact_kept(f, pg_catalog.now())),
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
-- threads there, unless replace => true (which first forgets them). Returns counts. A project
-- the caller may not serve is refused (42501) before the document is looked at.
--   SELECT pymem.user_import(document => pg_read_file(...)::jsonb, user_id => 'alice2');
-- Set-based, so its time is linear in the document's size: every check is one statement over
-- the whole document, the facts are inserted in one statement with ids drawn from the facts'
-- identity sequence beforehand (so a fact names its successor's new id as it is inserted, in
-- any order; the foreign key is checked at the end of that statement), and the messages of
-- every thread in one more. Refused with 22023: a fact without a numeric id, an id given
-- twice, a superseded_by naming no fact of the document, a supersede cycle (or a fact whose
-- successors lead into one), a thread without a thread_id or given twice, a message without a positive
-- numeric seq, and every check of fact_add and message_add.
CREATE OR REPLACE FUNCTION pymem.user_import(
    document jsonb, project_id text DEFAULT NULL, user_id text DEFAULT NULL, replace boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
-- every join below is between whole sets drawn from the document, which the planner estimates
-- at 100 rows each: a nested loop over them would make the import quadratic again
SET enable_nestloop = off
AS $$
#variable_conflict use_column
DECLARE
    v_project text := coalesce(user_import.project_id, document ->> 'project_id', '');
    v_user text := coalesce(user_import.user_id, document ->> 'user_id');
    v_facts jsonb := coalesce(document -> 'facts', '[]');
    v_threads jsonb := coalesce(document -> 'threads', '[]');
    v_count integer;
    v_bad text;
    v_next integer[];   -- per fact, by position in id order: the position of its successor (0: none)
    v_walk integer[];   -- per fact: the walk that reached it first (0: none yet)
    v_looped boolean[]; -- per walk (named by its first fact): it ended in a cycle
    v_pos integer;
    v_len integer;
    v_cyclic integer := 0;
    v_messages bigint;
    v_seq regclass := pg_catalog.pg_get_serial_sequence('pymem.facts', 'id')::regclass;
BEGIN
    -- the tenant first, as in every API function: a role bound to another project is refused
    -- (42501) whatever the document holds, before any check could tell it something about it
    PERFORM pymem._tenant_enter(v_project);
    IF document IS NULL OR pg_catalog.jsonb_typeof(document) <> 'object' OR document ->> 'format' IS DISTINCT FROM 'pymem.user/1' THEN
        RAISE EXCEPTION 'pymem: not a pymem user document (expected "format": "pymem.user/1")' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._fact_check_subject('user', v_user, v_project, 'exact');
    PERFORM pymem._conv_check(v_project, v_user, NULL, 'exact');
    IF pg_catalog.jsonb_typeof(v_facts) <> 'array' OR pg_catalog.jsonb_typeof(v_threads) <> 'array' THEN
        RAISE EXCEPTION 'pymem: "facts" and "threads" of the document must be arrays' USING ERRCODE = '22023';
    END IF;
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

    -- facts: the shape of each, then the supersede pointers as a whole
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_facts) AS e
                WHERE pg_catalog.jsonb_typeof(e.value) IS DISTINCT FROM 'object'
                   OR pg_catalog.jsonb_typeof(e.value -> 'id') IS DISTINCT FROM 'number') THEN
        RAISE EXCEPTION 'pymem: every fact of the document needs a numeric "id"' USING ERRCODE = '22023';
    END IF;
    SELECT d.id::text INTO v_bad
      FROM (SELECT (e.value ->> 'id')::bigint AS id FROM pg_catalog.jsonb_array_elements(v_facts) AS e) AS d
     GROUP BY d.id HAVING pg_catalog.count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pymem: fact id % appears more than once in the document', v_bad USING ERRCODE = '22023';
    END IF;
    -- a fact that expired since the export is not imported (its history expired with it: no
    -- version outlives its successor, so no fact kept points at one left out)
    v_facts := coalesce((SELECT pg_catalog.jsonb_agg(e.value ORDER BY e.i)
                           FROM pg_catalog.jsonb_array_elements(v_facts) WITH ORDINALITY AS e(value, i)
                          WHERE pymem._unexpired((e.value ->> 'expires_at')::timestamptz, pg_catalog.now())), '[]');
    SELECT pg_catalog.count(*) INTO v_count
      FROM (SELECT (e.value ->> 'superseded_by')::bigint AS next FROM pg_catalog.jsonb_array_elements(v_facts) AS e) AS d
     WHERE d.next IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_facts) AS x WHERE (x.value ->> 'id')::bigint = d.next);
    IF v_count > 0 THEN
        RAISE EXCEPTION 'pymem: % fact(s) of the document point at facts it does not hold', v_count USING ERRCODE = '22023';
    END IF;
    -- Ids are unique and each fact has at most one successor; several facts may share one (a
    -- merge), so history is a set of trees, each ending in a fact without successor, unless
    -- some successors run in a cycle. Walk forward from each fact not yet reached, marking what
    -- the walk reaches, until a fact without successor, or a fact reached before: by an earlier
    -- walk (which ended well or in a cycle), or by this one (a cycle). Each fact is walked once.
    WITH d AS (
        SELECT x.id, x.next, pg_catalog.row_number() OVER (ORDER BY x.id)::integer AS pos
          FROM (SELECT (e.value ->> 'id')::bigint AS id, (e.value ->> 'superseded_by')::bigint AS next
                  FROM pg_catalog.jsonb_array_elements(v_facts) AS e) AS x
    )
    SELECT coalesce(pg_catalog.array_agg(coalesce(s.pos, 0) ORDER BY d.pos), '{}')
      INTO v_next
      FROM d LEFT JOIN d AS s ON s.id = d.next;
    v_walk := pg_catalog.array_fill(0, ARRAY[pg_catalog.cardinality(v_next)]);
    v_looped := pg_catalog.array_fill(false, ARRAY[pg_catalog.cardinality(v_next)]);
    FOR v_start IN 1 .. pg_catalog.cardinality(v_next) LOOP
        CONTINUE WHEN v_walk[v_start] <> 0;
        v_pos := v_start;
        v_len := 0;
        WHILE v_pos <> 0 AND v_walk[v_pos] = 0 LOOP
            v_walk[v_pos] := v_start;
            v_len := v_len + 1;
            v_pos := v_next[v_pos];
        END LOOP;
        IF v_pos <> 0 AND (v_walk[v_pos] = v_start OR v_looped[v_walk[v_pos]]) THEN
            v_looped[v_start] := true;
            v_cyclic := v_cyclic + v_len;
        END IF;
    END LOOP;
    IF v_cyclic > 0 THEN
        RAISE EXCEPTION 'pymem: % fact(s) of the document form or lead into a supersede cycle', v_cyclic
            USING ERRCODE = '22023';
    END IF;
    -- each fact's valid time (22023 where it is not a range)
    PERFORM pymem._valid_time((e.value ->> 'valid_from')::timestamptz, (e.value ->> 'valid_to')::timestamptz)
       FROM pg_catalog.jsonb_array_elements(v_facts) AS e;
    -- New ids in the order of the old ones (ties of created_at keep their order), drawn first
    -- so that each row carries its successor's new id.
    WITH doc AS (
        SELECT e.value AS fact, (e.value ->> 'id')::bigint AS id, (e.value ->> 'superseded_by')::bigint AS next
          FROM pg_catalog.jsonb_array_elements(v_facts) AS e
    ), ids AS MATERIALIZED (
        SELECT o.id, pg_catalog.nextval(v_seq) AS new_id
          FROM (SELECT d.id FROM doc AS d ORDER BY d.id) AS o
    )
    -- A fact of the document is a row of pymem.facts by its columns' names (user_export writes every
    -- column but the owner and the key): the import sets the owner, the new ids, the key and the
    -- fields with rules (checked, defaulted); every other column comes as the document has it,
    -- through its type's input (the key as bytea's hex input, whatever bytea_output says).
    INSERT INTO pymem.facts OVERRIDING SYSTEM VALUE
    SELECT x.*
      FROM (SELECT i.new_id, s.new_id AS next_id, v.confidence, v.source, v.trace_id, v.metadata, d.fact,
                   pymem._fact_check_values(d.fact ->> 'content', v.confidence, v.source, v.trace_id, v.metadata) AS content,
                   coalesce((d.fact ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp()) AS created_at,
                   CASE WHEN d.next IS NOT NULL
                        THEN coalesce((d.fact ->> 'superseded_at')::timestamptz, pg_catalog.clock_timestamp()) END
                       AS superseded_at
              FROM doc AS d
              JOIN ids AS i ON i.id = d.id
              LEFT JOIN ids AS s ON s.id = d.next
             CROSS JOIN LATERAL (SELECT coalesce((d.fact ->> 'confidence')::float8, 1.0) AS confidence,
                                        coalesce(d.fact ->> 'source', 'manual') AS source, d.fact ->> 'trace_id' AS trace_id,
                                        coalesce(d.fact -> 'metadata', '{}') AS metadata) AS v
             ORDER BY i.new_id
            OFFSET 0) AS r  -- OFFSET 0: each row's checks run once
     CROSS JOIN LATERAL pg_catalog.jsonb_populate_record(NULL::pymem.facts, r.fact || pg_catalog.jsonb_build_object(
               'id', r.new_id, 'project_id', v_project, 'scope', 'user', 'scope_id', v_user, 'content', r.content,
               'content_key', E'\\x' || pg_catalog.encode(pymem.fact_key(r.content), 'hex'), 'confidence', r.confidence, 'source', r.source,
               'trace_id', r.trace_id, 'metadata', r.metadata, 'created_at', r.created_at, 'superseded_by', r.next_id,
               'superseded_at', r.superseded_at)) AS x
     ORDER BY x.id;

    -- threads and their messages
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_threads) AS t WHERE t.value ->> 'thread_id' IS NULL) THEN
        RAISE EXCEPTION 'pymem: every thread of the document needs a "thread_id"' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._conv_check(v_project, v_user, t.value ->> 'thread_id', 'exact')
       FROM pg_catalog.jsonb_array_elements(v_threads) AS t;
    SELECT t.value ->> 'thread_id' INTO v_bad FROM pg_catalog.jsonb_array_elements(v_threads) AS t
     GROUP BY t.value ->> 'thread_id' HAVING pg_catalog.count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pymem: thread % appears more than once in the document', pg_catalog.quote_literal(v_bad)
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(v_threads) AS t,
                             pg_catalog.jsonb_array_elements(coalesce(t.value -> 'messages', '[]')) AS m
                WHERE pg_catalog.jsonb_typeof(m.value -> 'seq') IS DISTINCT FROM 'number'
                   OR (m.value ->> 'seq')::numeric <= 0) THEN
        RAISE EXCEPTION 'pymem: every message of the document needs a positive numeric "seq"' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._message_check(m.value ->> 'role', m.value ->> 'content', coalesce((m.value ->> 'importance')::float8, 1.0))
       FROM pg_catalog.jsonb_array_elements(v_threads) AS t,
            pg_catalog.jsonb_array_elements(coalesce(t.value -> 'messages', '[]')) AS m;
    INSERT INTO pymem.threads (project_id, user_id, thread_id, last_seq, summary, summary_through, summary_at, created_at)
    SELECT v_project, v_user, t.value ->> 'thread_id', l.last_seq, t.value ->> 'summary',
           LEAST(coalesce((t.value ->> 'summary_through')::bigint, 0), l.last_seq),
           (t.value ->> 'summary_at')::timestamptz,
           coalesce((t.value ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp())
      FROM pg_catalog.jsonb_array_elements(v_threads) AS t
     CROSS JOIN LATERAL (SELECT coalesce(pg_catalog.max((m.value ->> 'seq')::bigint), 0) AS last_seq
                           FROM pg_catalog.jsonb_array_elements(coalesce(t.value -> 'messages', '[]')) AS m) AS l;
    INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata, created_at)
    SELECT v_project, v_user, t.value ->> 'thread_id', (m.value ->> 'seq')::bigint, m.value ->> 'role',
           m.value ->> 'content', coalesce((m.value ->> 'importance')::float8, 1.0),
           coalesce(m.value -> 'metadata', '{}'),
           coalesce((m.value ->> 'created_at')::timestamptz, pg_catalog.clock_timestamp())
      FROM pg_catalog.jsonb_array_elements(v_threads) AS t,
           pg_catalog.jsonb_array_elements(coalesce(t.value -> 'messages', '[]')) AS m;
    GET DIAGNOSTICS v_messages = ROW_COUNT;
    RETURN pg_catalog.jsonb_build_object('project_id', v_project, 'user_id', v_user,
                                         'facts', pg_catalog.jsonb_array_length(v_facts),
                                         'threads', pg_catalog.jsonb_array_length(v_threads), 'messages', v_messages);
END;
$$;
