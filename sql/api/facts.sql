-- facts.sql: the SQL API for durable facts (tables in migrations/0002_facts.sql).
-- Re-applied (CREATE OR REPLACE) on every migrate. Called by pymem/facts.py and by any SQL
-- client; README "SQL API / Facts" has a psql example for each function.
--
-- Subjects: (project_id, scope, scope_id). scope is 'agent' (the global tier), 'user' or
-- 'project'. Reads and deletes: an empty user/project id matches nothing; '*' matches every
-- subject of the scope (within the project) on purpose; an empty agent id is refused (it would
-- mean every agent). Writes need a real id ('' is allowed at agent scope only, for a fact that
-- no agent reads).
--
-- '*' branches: facts_newest (_facts_newest), fact_history, facts_search and facts_forget
-- write their statement twice, side by side (IF scope_id = '*' ... ELSE ...), so that each
-- branch keeps its own plan on its own index (one subject, or the whole scope); a single
-- statement with (scope_id = $1 OR $1 = '*') would get one generic plan that serves neither.
-- tests/test_facts.py checks that each '*' branch returns the per-subject branch's rows merged.
-- The scope-wide reads of active facts say "superseded_at IS NULL", the subject's reads
-- "superseded_by IS NULL" (the same rows: CHECK facts_superseded_pair). The scope-wide index
-- facts_scope_active_newest is partial on the first, so a read of one subject can never take it,
-- whatever the statistics say (migrations/0032_scope_index_apart.sql).
--
-- Equality (idempotent add): two contents are the same fact when they are equal after
-- removing leading and trailing whitespace, folding every run of whitespace (ASCII and
-- Unicode spaces such as NBSP) into one space, and Unicode NFC normalisation. Case matters. The key is sha256 of that text (fact_key).
--
-- Locking: fact_add relies on the unique index facts_subject_content_key (concurrent adders of
-- one fact all get the one row); learned adds with a cap lock the subject's row of
-- subject_locks (pymem._subject_lock) so the cap holds under concurrency; fact_supersede takes
-- the same lock, then locks the old row (FOR UPDATE): supersedes of one subject run one after
-- the other, so of two concurrent supersedes of one fact exactly one wins and the other gets
-- PM201, and a merge target stays active until the merge commits.
--
-- History: a supersede points the old row at its successor (superseded_by): a new fact, or an
-- active fact that already had the new content (a merge). A fact has at most one successor,
-- linked while it is active, so a subject's history is a set of trees, each merging into one
-- active fact (fact_chain returns one of them); no cycle can form.
--
-- Errors: 22023 invalid argument; P0002 no such fact; PM201 fact already superseded.

-- _fact_trim(content): content without leading and trailing whitespace. Whitespace is an
-- explicit Unicode list, not the locale's \s (which is ASCII-only under the C locale).
-- PL/pgSQL with one RETURN, like _lexemes: PL/pgSQL evaluates it as a simple
-- expression, where a LANGUAGE sql function with a SET clause (never inlined) starts an
-- executor on every call: ~3 us less per call, per row in the batch functions.
CREATE OR REPLACE FUNCTION pymem._fact_trim(content text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN pg_catalog.regexp_replace(content, '^[ \t\n\r\f\v\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+|[ \t\n\r\f\v\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+$', '', 'g');
END;
$$;

-- fact_key(content): the equality key of a fact's content. Granted to the app and reader
-- roles and SECURITY INVOKER, so it calls nothing they may not execute (the trim of
-- _fact_trim is written out: fold inner runs, then drop the single space left at either end).
-- NFC: most text is normalized already, and the check costs a third of normalize() (the key is
-- the same either way): 8.5 instead of 10.9 us per key.
CREATE OR REPLACE FUNCTION pymem.fact_key(content text)
RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_text text := pg_catalog.btrim(
        pg_catalog.regexp_replace(content, '[ \t\n\r\f\v\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+', ' ', 'g'),
        ' ');
BEGIN
    IF v_text IS NOT NFC NORMALIZED THEN
        v_text := pg_catalog.normalize(v_text, 'NFC');
    END IF;
    RETURN pg_catalog.sha256(pg_catalog.convert_to(v_text, 'UTF8'));
END;
$$;

-- _fact_check_subject: validates a subject; returns false when a read must match nothing (empty
-- user or project id). purpose 'exact': the call names one real subject (writes, fact_chain,
-- user_export): '*' and an empty user/project id are refused. purpose 'match': the call selects
-- what matches (reads): '' matches nothing, '*' every subject of the scope. purpose 'delete'
-- (fact_forget, facts_forget): as 'match', but an empty id is refused: a delete given an unset
-- user id must say so, not report that it deleted nothing.
CREATE OR REPLACE FUNCTION pymem._fact_check_subject(scope text, scope_id text, project_id text, purpose text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF scope IS NULL OR scope NOT IN ('agent', 'user', 'project') THEN
        RAISE EXCEPTION 'pymem: scope must be agent, user or project, not %', coalesce(pg_catalog.quote_literal(scope), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._project_check(project_id);
    IF scope_id IS NULL OR pg_catalog.length(scope_id) > 256 THEN
        RAISE EXCEPTION 'pymem: scope_id must be a string of at most 256 characters'
            USING ERRCODE = '22023';
    END IF;
    IF purpose = 'exact' THEN
        IF scope_id = '*' THEN
            RAISE EXCEPTION 'pymem: ''*'' selects every % when reading or deleting; a fact cannot be written to it', scope
                USING ERRCODE = '22023';
        END IF;
        IF scope_id = '' AND scope = 'user' THEN
            RAISE EXCEPTION 'pymem: a user fact needs a user id; the empty id names no one'
                USING ERRCODE = '22023',
                      HINT = 'Pass the user''s id as scope_id, or scope => ''agent'' for a fact every user of the agent shares.';
        END IF;
        IF scope_id = '' AND scope = 'project' THEN
            RAISE EXCEPTION 'pymem: a project fact needs a project id; the empty id names no one'
                USING ERRCODE = '22023', HINT = 'Pass the project''s id as scope_id.';
        END IF;
        RETURN true;
    END IF;
    IF scope_id = '' AND purpose = 'delete' AND scope <> 'agent' THEN
        RAISE EXCEPTION 'pymem: deleting % facts needs a % id; the empty id names no one', scope, scope
            USING ERRCODE = '22023', HINT = 'Pass the id, or ''*'' to mean every subject of the scope on purpose.';
    END IF;
    IF scope_id = '' THEN
        IF scope = 'agent' THEN
            RAISE EXCEPTION 'pymem: an empty agent id would match every agent'
                USING ERRCODE = '22023',
                      HINT = 'Pass the agent id, or ''*'' to mean every agent on purpose.';
        END IF;
        RETURN false;
    END IF;
    RETURN true;
END;
$$;

-- _fact_check_values: validates what a write stores; returns the content as stored (trimmed).
CREATE OR REPLACE FUNCTION pymem._fact_check_values(
    content text, confidence double precision, source text, trace_id text, metadata jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_content text := pymem._fact_trim(content);
BEGIN
    IF v_content IS NULL OR v_content = '' THEN
        RAISE EXCEPTION 'pymem: fact content must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.length(v_content) > 65536 THEN
        RAISE EXCEPTION 'pymem: fact content is % characters; the limit is 65536', pg_catalog.length(v_content)
            USING ERRCODE = '22023';
    END IF;
    IF confidence IS NULL OR confidence = 'NaN'::float8 OR confidence < 0 OR confidence > 1 THEN
        RAISE EXCEPTION 'pymem: confidence must be between 0 and 1, not %', confidence USING ERRCODE = '22023';
    END IF;
    IF source IS NULL OR source NOT IN ('manual', 'learned', 'trace') THEN
        RAISE EXCEPTION 'pymem: source must be manual, learned or trace, not %', coalesce(pg_catalog.quote_literal(source), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.length(trace_id) > 256 THEN
        RAISE EXCEPTION 'pymem: trace_id is longer than 256 characters' USING ERRCODE = '22023';
    END IF;
    IF metadata IS NULL OR pg_catalog.jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'pymem: metadata must be a JSON object' USING ERRCODE = '22023';
    END IF;
    RETURN v_content;
END;
$$;

-- _fact_check_time: a fact's given created_at (importing facts with their real times) must be
-- finite and at most 5 minutes ahead of the server's clock (clock skew between an app server and
-- the database), as for messages (conversations.sql, _message_insert). NULL: now.
CREATE OR REPLACE FUNCTION pymem._fact_check_time(created_at timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF created_at IS NOT NULL AND (NOT pg_catalog.isfinite(created_at)
       OR created_at > pg_catalog.clock_timestamp() + pg_catalog.make_interval(mins => 5)) THEN
        RAISE EXCEPTION 'pymem: created_at % is in the future', created_at
            USING ERRCODE = '22023',
                  HINT = 'created_at is the time a fact was learned: at most 5 minutes ahead of the database''s clock. Leave it NULL for now.';
    END IF;
END;
$$;

-- _fact_lexemes_add: the statement trigger facts_lexemes (migrations/0016_fact_lexical.sql)
-- indexes the facts a statement inserted, whoever inserts them (fact_add, fact_supersede,
-- turn_record, user_import): one INSERT into pymem.fact_lexemes per statement. The tokens are
-- pymem._lexeme_tokens written out: a sub-select per row costs half the call of that LANGUAGE sql
-- function (which its SET clause keeps from inlining), ~7 us of ~100 per fact in a batch.
CREATE OR REPLACE FUNCTION pymem._fact_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    INSERT INTO pymem.fact_lexemes AS l (project_id, scope, scope_id, fact_id, lexemes, tokens)
    SELECT n.project_id, n.scope, n.scope_id, n.id, v.lexemes,
           (SELECT coalesce(pg_catalog.sum(coalesce(pg_catalog.cardinality(u.positions), 1)), 0)::integer
              FROM pg_catalog.unnest(v.lexemes) AS u)
      FROM new_facts AS n
      LEFT JOIN pymem.text_search AS c ON c.project_id = n.project_id  -- the project's configuration, one read per statement
     CROSS JOIN LATERAL (SELECT pymem._lexemes(c.config::pg_catalog.regconfig, n.content) AS lexemes OFFSET 0) AS v;
    RETURN NULL;
END;
$$;

-- _subject_lock(project_id, scope, scope_id): locks the subject's row of subject_locks
-- (creating it on first use) until the transaction ends; writers of one subject's learned facts
-- and its supersedes wait for each other, and nobody else can hold it (see
-- migrations/0006_subject_locks.sql).
CREATE OR REPLACE FUNCTION pymem._subject_lock(p_project_id text, p_scope text, p_scope_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM pymem.subject_locks AS s
     WHERE s.project_id = p_project_id AND s.scope = p_scope AND s.scope_id = p_scope_id
       FOR UPDATE;
    IF NOT FOUND THEN
        -- a concurrent first writer's uncommitted row makes this INSERT wait for it
        INSERT INTO pymem.subject_locks AS s (project_id, scope, scope_id) VALUES (p_project_id, p_scope, p_scope_id)
        ON CONFLICT ON CONSTRAINT subject_locks_pkey DO NOTHING;
        PERFORM 1 FROM pymem.subject_locks AS s
         WHERE s.project_id = p_project_id AND s.scope = p_scope AND s.scope_id = p_scope_id
           FOR UPDATE;
    END IF;
END;
$$;

-- _facts_insert_many: facts_add_many's one statement, after its checks and locks: each element's
-- fact where it is active already (one index read), the others inserted (the first occurrence of
-- each subject and content in the batch); ids[i] and created[i] for element i, ids[i] NULL where
-- a concurrent writer got in between (facts_add_many adds those one at a time). On Citus,
-- citus.sql replaces it with one that leaves every element to that loop (its planner refuses this
-- statement's lateral outer join over distributed tables).
CREATE OR REPLACE FUNCTION pymem._facts_insert_many(
    p_project_id text, p_scope text, p_scope_ids text[], p_contents text[], p_confidences double precision[],
    p_sources text[], p_metadata jsonb[], p_created_ats timestamptz[], OUT ids bigint[], OUT created boolean[])
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    -- one statement: each element's fact where it is there already (one index read), the others
    -- inserted (the first occurrence of each subject and content in the batch)
    WITH input AS MATERIALIZED (
        SELECT t.i, t.scope_id, t.content, t.key, t.confidence, t.source, t.metadata, t.created_at, f.id AS known
          FROM (SELECT u.i::integer AS i, u.s AS scope_id, u.content, pymem.fact_key(u.content) AS key,
                       coalesce(u.conf, 1.0) AS confidence, coalesce(u.src, 'manual') AS source,
                       coalesce(u.meta, '{}'::jsonb) AS metadata, u.at AS created_at
                  FROM (SELECT r.*, pymem._fact_trim(r.c) AS content
                          FROM ROWS FROM (pg_catalog.unnest(p_scope_ids), pg_catalog.unnest(p_contents),
                                          pg_catalog.unnest(p_confidences), pg_catalog.unnest(p_sources),
                                          pg_catalog.unnest(p_metadata), pg_catalog.unnest(p_created_ats))
                               WITH ORDINALITY AS r(s, c, conf, src, meta, at, i)
                        OFFSET 0) AS u  -- OFFSET 0: one trim and one key per element
                OFFSET 0) AS t
          -- each element's fact by key (facts_subject_content_key, 0026); a plain join could be
          -- planned as a scan of its subjects' facts
          LEFT JOIN LATERAL (SELECT f.id FROM pymem.facts AS f
                              WHERE f.project_id = p_project_id AND f.scope = p_scope COLLATE "C"
                                AND f.scope_id = t.scope_id AND f.content_key = t.key AND f.superseded_by IS NULL
                              LIMIT 1) AS f ON true),
    firsts AS MATERIALIZED (
        SELECT DISTINCT ON (x.scope_id, x.key) x.* FROM input AS x WHERE x.known IS NULL ORDER BY x.scope_id, x.key, x.i),
    ins AS (
        INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, metadata, created_at)
        SELECT p_project_id, p_scope, x.scope_id, x.content, x.key, x.confidence, x.source,
               x.metadata, coalesce(x.created_at, pg_catalog.clock_timestamp())
          FROM firsts AS x
         ORDER BY x.i
        ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING
        RETURNING f.id, f.scope_id, f.content_key)
    SELECT pg_catalog.array_agg(coalesce(x.known, n.id) ORDER BY x.i),
           pg_catalog.array_agg(n.id IS NOT NULL AND x.i = fx.i ORDER BY x.i)
      INTO ids, created
      FROM input AS x
      LEFT JOIN firsts AS fx ON fx.scope_id = x.scope_id AND fx.key = x.key
      LEFT JOIN ins AS n ON n.scope_id = x.scope_id AND n.content_key = x.key;
END;
$$;

-- facts_add_many: bulk ingest: many facts of one scope in one call, element i of each array
-- being one fact_add (scope_ids[i], contents[i], and, when given, confidences[i], sources[i],
-- metadata[i], created_ats[i], embeddings[i]; a NULL array means fact_add's default for every
-- element). Same checks as fact_add, all or nothing: the first invalid element refuses the whole
-- call (22023, naming its position) and nothing is written. Idempotent like fact_add: a fact
-- already active for its subject, or given twice in the batch, is one row (created is false for
-- it, and for every repeat after the first). Learned facts are refused here: their per-subject
-- cap needs fact_add's lock and trim. One row per element, in order: (ord, id, created).
-- One statement per step, whatever the number of elements or subjects: the checks, the
-- subjects' locks, the facts (found or inserted), the vectors.
--   SELECT * FROM pymem.facts_add_many('user', ARRAY['erin', 'frank'], ARRAY['Prefers email', 'Likes tea']);
CREATE OR REPLACE FUNCTION pymem.facts_add_many(
    scope text,
    scope_ids text[],
    contents text[],
    project_id text DEFAULT '',
    confidences double precision[] DEFAULT NULL,
    sources text[] DEFAULT NULL,
    metadata jsonb[] DEFAULT NULL,
    embeddings vector[] DEFAULT NULL,
    embedder text DEFAULT NULL,
    created_ats timestamptz[] DEFAULT NULL)
RETURNS TABLE (ord integer, id bigint, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_n integer := pg_catalog.cardinality(facts_add_many.contents);
    v_bad integer;
    v_bad_subject integer;
    v_ok boolean;
    v_message text;
    v_ids bigint[];
    v_created boolean[];
    v_i integer;
    v_one bigint;
    v_one_created boolean;
BEGIN
    PERFORM pymem._tenant_enter(facts_add_many.project_id);
    IF facts_add_many.contents IS NULL OR facts_add_many.scope_ids IS NULL
       OR pg_catalog.cardinality(facts_add_many.scope_ids) <> v_n
       OR pg_catalog.cardinality(coalesce(facts_add_many.confidences, pg_catalog.array_fill(1.0::float8, ARRAY[v_n]))) <> v_n
       OR pg_catalog.cardinality(coalesce(facts_add_many.sources, pg_catalog.array_fill('manual'::text, ARRAY[v_n]))) <> v_n
       OR pg_catalog.cardinality(coalesce(facts_add_many.metadata, pg_catalog.array_fill('{}'::jsonb, ARRAY[v_n]))) <> v_n
       OR pg_catalog.cardinality(coalesce(facts_add_many.created_ats, pg_catalog.array_fill(NULL::timestamptz, ARRAY[v_n]))) <> v_n
       OR (facts_add_many.embeddings IS NOT NULL AND pg_catalog.cardinality(facts_add_many.embeddings) <> v_n) THEN
        RAISE EXCEPTION 'pymem: facts_add_many needs scope_ids and contents, and every array it is given, of one length'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._check_batch('facts_add_many', 'facts', v_n, 100000);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- every element checked as fact_add checks it, in one pass: the first element whose subject is
    -- invalid (element 1 for an invalid scope or project), else the first whose values are; then
    -- fact_add's own check of that element says what is wrong with it
    SELECT pg_catalog.min(u.i) FILTER (WHERE u.s IS NULL OR pg_catalog.length(u.s) > 256 OR u.s = '*'
                                             OR (u.s = '' AND facts_add_many.scope <> 'agent')),
           pg_catalog.min(u.i) FILTER (WHERE u.t IS NULL OR u.t = '' OR pg_catalog.length(u.t) > 65536
        OR (facts_add_many.confidences IS NOT NULL AND (u.conf IS NULL OR u.conf = 'NaN'::float8 OR u.conf < 0 OR u.conf > 1))
        OR (facts_add_many.sources IS NOT NULL AND (u.src IS NULL OR u.src NOT IN ('manual', 'trace')))
        OR (facts_add_many.metadata IS NOT NULL AND (u.meta IS NULL OR pg_catalog.jsonb_typeof(u.meta) <> 'object'))
        OR (u.at IS NOT NULL AND (NOT pg_catalog.isfinite(u.at)
                                  OR u.at > pg_catalog.clock_timestamp() + pg_catalog.make_interval(mins => 5))))
      INTO v_bad_subject, v_bad
      FROM (SELECT r.s, pymem._fact_trim(r.c) AS t, r.conf, r.src, r.meta, r.at, r.i  -- OFFSET 0: one trim per element
              FROM ROWS FROM (pg_catalog.unnest(facts_add_many.scope_ids), pg_catalog.unnest(facts_add_many.contents),
                              pg_catalog.unnest(facts_add_many.confidences), pg_catalog.unnest(facts_add_many.sources),
                              pg_catalog.unnest(facts_add_many.metadata), pg_catalog.unnest(facts_add_many.created_ats))
                   WITH ORDINALITY AS r(s, c, conf, src, meta, at, i)
            OFFSET 0) AS u;
    IF facts_add_many.scope IS NULL OR facts_add_many.scope NOT IN ('agent', 'user', 'project')
       OR facts_add_many.project_id IS NULL OR facts_add_many.project_id = '*' OR pg_catalog.length(facts_add_many.project_id) > 256 THEN
        v_bad_subject := 1;
    END IF;
    IF v_bad_subject IS NOT NULL OR v_bad IS NOT NULL THEN
        v_bad := coalesce(v_bad_subject, v_bad);
        BEGIN
            v_ok := pymem._fact_check_subject(facts_add_many.scope, facts_add_many.scope_ids[v_bad], facts_add_many.project_id, 'exact');
            IF facts_add_many.sources[v_bad] = 'learned' THEN
                RAISE EXCEPTION 'pymem: learned facts are added one at a time (fact_add), under their subject''s cap'
                    USING ERRCODE = '22023';
            END IF;
            v_message := pymem._fact_check_values(facts_add_many.contents[v_bad], coalesce(facts_add_many.confidences[v_bad], 1.0),
                                                  coalesce(facts_add_many.sources[v_bad], 'manual'), NULL,
                                                  coalesce(facts_add_many.metadata[v_bad], '{}'::jsonb));
            PERFORM pymem._fact_check_time(facts_add_many.created_ats[v_bad]);
            RAISE EXCEPTION 'pymem: invalid fact' USING ERRCODE = '22023';
        EXCEPTION WHEN invalid_parameter_value THEN
            GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT;
            RAISE EXCEPTION 'pymem: facts_add_many element % (of %): %', v_bad, v_n, pg_catalog.regexp_replace(v_message, '^pymem: ', '')
                USING ERRCODE = '22023';
        END;
    END IF;
    IF facts_add_many.embeddings IS NOT NULL THEN  -- every vector checked first (naming its element), then the embedder registered
        PERFORM pymem._embeddings_validate(facts_add_many.project_id, facts_add_many.embedder, facts_add_many.embeddings);
        PERFORM pymem._embedding_register(facts_add_many.project_id, facts_add_many.embedder, facts_add_many.embeddings[1]);
    END IF;
    -- the subjects' locks (pymem._subject_lock's rows), in one statement taken in one order (as
    -- learned writers take them): each subject's row inserted, or, there already, locked (ON
    -- CONFLICT DO UPDATE locks the row even where its WHERE leaves it unchanged). Two batches sharing
    -- subjects (or a batch and a turn's learned facts) queue instead of each waiting for the
    -- other's pending keys, a deadlock when they hold the same facts in different orders.
    INSERT INTO pymem.subject_locks AS s (project_id, scope, scope_id)
    SELECT DISTINCT facts_add_many.project_id, facts_add_many.scope, u.s FROM pg_catalog.unnest(facts_add_many.scope_ids) AS u(s)
     ORDER BY 3
    ON CONFLICT ON CONSTRAINT subject_locks_pkey DO UPDATE SET scope = excluded.scope WHERE false;
    -- each element's fact, found or inserted (NULL: left to the loop below)
    SELECT m.ids, m.created INTO v_ids, v_created
      FROM pymem._facts_insert_many(facts_add_many.project_id, facts_add_many.scope, facts_add_many.scope_ids,
                                    facts_add_many.contents, facts_add_many.confidences, facts_add_many.sources,
                                    facts_add_many.metadata, facts_add_many.created_ats) AS m;
    -- a fact another transaction committed (or superseded) while this one ran: one at a time
    FOR v_i IN SELECT u.i FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS u(id, i) WHERE u.id IS NULL LOOP
        SELECT a.id, a.created INTO v_one, v_one_created
          FROM pymem.fact_add(facts_add_many.scope, facts_add_many.scope_ids[v_i], facts_add_many.contents[v_i],
                              facts_add_many.project_id, coalesce(facts_add_many.confidences[v_i], 1.0),
                              coalesce(facts_add_many.sources[v_i], 'manual'), NULL,
                              coalesce(facts_add_many.metadata[v_i], '{}'::jsonb), NULL, NULL, NULL,
                              facts_add_many.created_ats[v_i]) AS a;
        v_ids[v_i] := v_one;
        v_created[v_i] := v_one_created;
    END LOOP;
    IF facts_add_many.embeddings IS NOT NULL THEN
        INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
        SELECT DISTINCT ON (u.id) facts_add_many.project_id, facts_add_many.scope, u.s, u.id, facts_add_many.embedder, u.v
          FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(facts_add_many.scope_ids), pg_catalog.unnest(facts_add_many.embeddings)) WITH ORDINALITY AS u(id, s, v, i)
         ORDER BY u.id, u.i
        ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
    END IF;
    IF facts_add_many.scope <> 'user' THEN  -- the copies a Citus cluster keeps (_shared_facts_sync)
        PERFORM pymem._shared_facts_sync(facts_add_many.project_id, facts_add_many.scope, s.id, s.ids)
           FROM (SELECT u.s AS id, pg_catalog.array_agg(DISTINCT u.id) AS ids
                   FROM ROWS FROM (pg_catalog.unnest(facts_add_many.scope_ids), pg_catalog.unnest(v_ids)) AS u(s, id)
                  GROUP BY u.s) AS s;
    END IF;
    RETURN QUERY SELECT u.i::integer, u.id, u.c FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_created)) WITH ORDINALITY AS u(id, c, i);
END;
$$;

-- _fact_add_checks: what fact_add checks before anything else (fact_lookup too, so that a
-- re-add it answers is refused exactly where fact_add would refuse it; fact_supersede for the new
-- version, with no cap): the tenant entered, the subject, the values, the time, the cap. Returns
-- the content as stored (trimmed).
-- Valid arguments (every call but a refused one) are one expression, the conjunction of what the
-- checks accept; any other (a NULL in it included) goes through the checks one by one, which
-- raise the precise error in their order. PL/pgSQL re-initialises every expression of a function
-- in each new transaction, and a nested call with a SET clause pushes a GUC level: the two nested
-- checkers and their ~25 expressions cost ~10-13 us of server CPU of a ~100 us re-add
-- (bench/wrappers.py --old-api).
CREATE OR REPLACE FUNCTION pymem._fact_add_checks(
    p_scope text, p_scope_id text, p_content text, p_project_id text, p_confidence double precision,
    p_source text, p_trace_id text, p_metadata jsonb, p_max_learned integer, p_created_at timestamptz)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_content text := pymem._fact_trim(p_content);
BEGIN
    PERFORM pymem._tenant_enter(p_project_id);
    IF coalesce(p_scope IN ('agent', 'user', 'project') AND p_project_id <> '*' AND pg_catalog.length(p_project_id) <= 256
                AND p_scope_id <> '*' AND pg_catalog.length(p_scope_id) <= 256 AND (p_scope_id <> '' OR p_scope = 'agent')
                AND v_content <> '' AND pg_catalog.length(v_content) <= 65536
                AND p_confidence >= 0 AND p_confidence <= 1 AND p_source IN ('manual', 'learned', 'trace')
                AND (p_trace_id IS NULL OR pg_catalog.length(p_trace_id) <= 256)
                AND pg_catalog.jsonb_typeof(p_metadata) = 'object'
                AND p_created_at IS NULL AND (p_max_learned IS NULL OR p_max_learned >= 1), false) THEN
        RETURN v_content;
    END IF;
    PERFORM pymem._fact_check_subject(p_scope, p_scope_id, p_project_id, 'exact');
    v_content := pymem._fact_check_values(p_content, p_confidence, p_source, p_trace_id, p_metadata);
    IF p_created_at IS NOT NULL THEN  -- NULL (now) needs no check: one nested call less
        PERFORM pymem._fact_check_time(p_created_at);
    END IF;
    IF p_max_learned < 1 THEN
        RAISE EXCEPTION 'pymem: max_learned must be >= 1, or NULL for no cap' USING ERRCODE = '22023';
    END IF;
    RETURN v_content;
END;
$$;

-- fact_add: adds a fact, or returns the active fact of the subject with the same content.
--   SELECT * FROM pymem.fact_add(scope => 'user', scope_id => 'alice', content => 'Prefers email');
-- created is false when the fact already existed. A learned fact (source 'learned') trims the
-- subject's active learned facts to the newest max_learned (NULL: no cap) in this transaction;
-- manual and trace facts are never touched by the cap. embedding/embedder, when given, are
-- stored with the fact (or added to an existing one that lacks them).
CREATE OR REPLACE FUNCTION pymem.fact_add(
    scope text,
    scope_id text,
    content text,
    project_id text DEFAULT '',
    confidence double precision DEFAULT 1.0,
    source text DEFAULT 'manual',
    trace_id text DEFAULT NULL,
    metadata jsonb DEFAULT '{}'::jsonb,
    max_learned integer DEFAULT 200,
    embedding vector DEFAULT NULL,
    embedder text DEFAULT NULL,
    created_at timestamptz DEFAULT NULL)
RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_content text;
    v_key bytea;
    v_id bigint;
    v_created boolean;
    v_stored boolean := false;  -- a vector stored for an existing fact
    v_trimmed boolean := false;  -- older learned facts deleted by the cap
    v_cut_at timestamptz;
    v_cut_id bigint;
    v_have integer;  -- the dimension of the fact's vector from embedder, if it has one
BEGIN
    v_content := pymem._fact_add_checks(fact_add.scope, fact_add.scope_id, fact_add.content, fact_add.project_id,
                                        fact_add.confidence, fact_add.source, fact_add.trace_id, fact_add.metadata,
                                        fact_add.max_learned, fact_add.created_at);
    v_key := pymem.fact_key(v_content);
    IF fact_add.embedding IS NOT NULL AND NOT (fact_add.source = 'learned' AND fact_add.max_learned IS NOT NULL) THEN
        -- the checks of _embedding_register that need no read, as one expression (it raises
        -- the precise error)
        IF NOT coalesce(fact_add.embedder <> '' AND pg_catalog.length(fact_add.embedder) <= 200
                        AND pymem._vector_norm(fact_add.embedding) <> 0, false) THEN
            PERFORM pymem._embedding_register(fact_add.project_id, fact_add.embedder, fact_add.embedding);
        END IF;
        -- the fact and the dimension of its vector from embedder, in one read: a re-add of a fact
        -- that has its vector (the idempotent call) then ends here, without the registry read and
        -- the insert attempt of the vector (~25% of its server CPU). Every stored vector was checked
        -- against the registry, whose rows are never changed or deleted: its dimension is the
        -- registered one. (scope compared in "C", as facts_subject_content_key holds it: only that
        -- index serves the lookup, see 0026_fact_key_lookup)
        SELECT f.id, pymem._vector_dims(e.embedding) INTO v_id, v_have
          FROM pymem.facts AS f
          LEFT JOIN pymem.fact_embeddings AS e
            ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id AND e.fact_id = f.id
           AND e.embedder = fact_add.embedder
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C"
           AND f.scope_id = fact_add.scope_id AND f.content_key = v_key AND f.superseded_by IS NULL;
        IF v_have = pymem._vector_dims(fact_add.embedding) THEN
            id := v_id;
            created := false;
            RETURN NEXT;
            RETURN;
        END IF;
        -- a new fact, or one without this vector: the registry read (the first use registers the
        -- embedder; another dimension is refused, 22023)
        PERFORM pymem._embedding_register(fact_add.project_id, fact_add.embedder, fact_add.embedding);
    ELSE
        IF fact_add.embedding IS NOT NULL THEN  -- no vector: nothing to check or register
            PERFORM pymem._embedding_register(fact_add.project_id, fact_add.embedder, fact_add.embedding);
        END IF;
        IF fact_add.source = 'learned' AND fact_add.max_learned IS NOT NULL THEN
            -- one learned writer per subject at a time, so the cap holds under concurrency
            -- (registered first, as always: a first registration waits for nobody's subject lock)
            PERFORM pymem._subject_lock(fact_add.project_id, fact_add.scope, fact_add.scope_id);
        END IF;
        -- an idempotent re-add (the fact is there) is one index read: no insert attempt, so no
        -- statement trigger either
        SELECT f.id INTO v_id FROM pymem.facts AS f
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C" AND f.scope_id = fact_add.scope_id
           AND f.content_key = v_key AND f.superseded_by IS NULL;
    END IF;
    v_created := false;
    WHILE v_id IS NULL LOOP
        INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, trace_id, metadata,
                                      created_at)
        VALUES (fact_add.project_id, fact_add.scope, fact_add.scope_id, v_content, v_key, fact_add.confidence,
                fact_add.source, fact_add.trace_id, fact_add.metadata,
                coalesce(fact_add.created_at, pg_catalog.clock_timestamp()))
        ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING
        RETURNING f.id INTO v_id;
        v_created := FOUND;
        EXIT WHEN v_created;
        -- a concurrent writer just committed the same fact: return its id
        SELECT f.id INTO v_id FROM pymem.facts AS f
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C" AND f.scope_id = fact_add.scope_id
           AND f.content_key = v_key AND f.superseded_by IS NULL;
        -- not found: it was superseded or forgotten in between, try the insert again
    END LOOP;
    IF fact_add.embedding IS NOT NULL THEN
        INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
        VALUES (fact_add.project_id, fact_add.scope, fact_add.scope_id, v_id, fact_add.embedder, fact_add.embedding)
        ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
        v_stored := FOUND;
    END IF;
    IF v_created AND fact_add.source = 'learned' AND fact_add.max_learned IS NOT NULL THEN
        -- the newest learned fact beyond the cap, if any (reads at most max_learned + 1 entries
        -- of facts_subject_learned_newest); it and everything older goes
        SELECT o.created_at, o.id INTO v_cut_at, v_cut_id FROM pymem.facts AS o
         WHERE o.project_id = fact_add.project_id AND o.scope = fact_add.scope AND o.scope_id = fact_add.scope_id
           AND o.superseded_by IS NULL AND o.source = 'learned'
         ORDER BY o.created_at DESC, o.id DESC
        OFFSET fact_add.max_learned LIMIT 1;
        IF FOUND THEN
            DELETE FROM pymem.facts AS f
             WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope AND f.scope_id = fact_add.scope_id
               AND f.superseded_by IS NULL AND f.source = 'learned'
               AND (f.created_at, f.id) <= (v_cut_at, v_cut_id);
            v_trimmed := FOUND;
        END IF;
    END IF;
    -- the copies a Citus cluster keeps (_shared_facts_sync): the new fact, or the one that got a
    -- vector, or all of the subject's after a trim; nothing for a plain re-add
    IF fact_add.scope <> 'user' AND (v_created OR v_stored) THEN
        PERFORM pymem._shared_facts_sync(fact_add.project_id, fact_add.scope, fact_add.scope_id,
                                         CASE WHEN NOT v_trimmed THEN ARRAY[v_id] END);
    END IF;
    id := v_id;
    created := v_created;
    RETURN NEXT;
END;
$$;

-- fact_lookup: what fact_add would return for a fact that is there already, without writing:
-- the active fact of the subject with this content (fact_add's equality) and whether it has a
-- vector from embedder; no row when there is none. The same arguments and checks as fact_add
-- (22023 for what fact_add refuses), so a caller that computes vectors (pymem.Memory.persist)
-- asks first and calls its embedder, and fact_add, only for a new fact or one without a vector:
-- an idempotent re-add costs one read and no model call.
--   SELECT * FROM pymem.fact_lookup(scope => 'user', scope_id => 'alice', content => 'Prefers email', embedder => 'hash-384-v1');
CREATE OR REPLACE FUNCTION pymem.fact_lookup(
    scope text,
    scope_id text,
    content text,
    project_id text DEFAULT '',
    confidence double precision DEFAULT 1.0,
    source text DEFAULT 'manual',
    trace_id text DEFAULT NULL,
    metadata jsonb DEFAULT '{}'::jsonb,
    max_learned integer DEFAULT 200,
    embedder text DEFAULT NULL,
    created_at timestamptz DEFAULT NULL)
RETURNS TABLE (id bigint, embedded boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_content text;
    v_id bigint;
BEGIN
    v_content := pymem._fact_add_checks(fact_lookup.scope, fact_lookup.scope_id, fact_lookup.content,
                                        fact_lookup.project_id, fact_lookup.confidence, fact_lookup.source,
                                        fact_lookup.trace_id, fact_lookup.metadata, fact_lookup.max_learned,
                                        fact_lookup.created_at);
    IF fact_lookup.embedder = '' OR pg_catalog.length(fact_lookup.embedder) > 200 THEN
        RAISE EXCEPTION 'pymem: an embedder is named by 1..200 characters' USING ERRCODE = '22023';
    END IF;
    -- fact_add's lookup (scope in "C": only facts_subject_content_key serves it)
    SELECT f.id INTO v_id FROM pymem.facts AS f
     WHERE f.project_id = fact_lookup.project_id AND f.scope = fact_lookup.scope COLLATE "C"
       AND f.scope_id = fact_lookup.scope_id AND f.content_key = pymem.fact_key(v_content)
       AND f.superseded_by IS NULL;
    IF FOUND THEN
        id := v_id;
        embedded := EXISTS (SELECT 1 FROM pymem.fact_embeddings AS e
                             WHERE e.project_id = fact_lookup.project_id AND e.scope = fact_lookup.scope
                               AND e.scope_id = fact_lookup.scope_id AND e.fact_id = v_id
                               AND e.embedder = fact_lookup.embedder);
        RETURN NEXT;
    END IF;
END;
$$;

-- _facts_newest: the query behind facts_newest, without its checks; context_read calls it too
-- (a nested API call would enter the tenant and check its arguments a second time).
CREATE OR REPLACE FUNCTION pymem._facts_newest(p_project_id text, p_scope text, p_scope_id text, p_max integer)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF p_scope_id = '*' THEN
        RETURN QUERY
        SELECT f.* FROM pymem.facts AS f
         WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.superseded_at IS NULL
         ORDER BY f.created_at DESC, f.id DESC
         LIMIT p_max;
    ELSE
        RETURN QUERY
        SELECT f.* FROM pymem.facts AS f
         WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
           AND f.superseded_by IS NULL
         ORDER BY f.created_at DESC, f.id DESC
         LIMIT p_max;
    END IF;
END;
$$;

-- facts_newest: a subject's active facts, newest first (ties: higher id first).
--   SELECT id, content FROM pymem.facts_newest('user', 'alice', max_facts => 10);
-- scope_id '*' reads every subject of the scope in the project.
CREATE OR REPLACE FUNCTION pymem.facts_newest(
    scope text, scope_id text, project_id text DEFAULT '', max_facts integer DEFAULT 50)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_max integer;
BEGIN
    PERFORM pymem._tenant_enter(facts_newest.project_id);
    v_max := pymem._check_limit('max_facts', facts_newest.max_facts);  -- an assignment: no query, unlike PERFORM
    IF NOT pymem._fact_check_subject(facts_newest.scope, facts_newest.scope_id, facts_newest.project_id, 'match') THEN
        RETURN;
    END IF;
    -- _facts_newest's two queries, written out: through it the rows were gathered twice (its
    -- RETURN QUERY, then this one's), ~60 us of a ~450 us call
    IF facts_newest.scope_id = '*' THEN
        RETURN QUERY
        SELECT f.* FROM pymem.facts AS f
         WHERE f.project_id = facts_newest.project_id AND f.scope = facts_newest.scope AND f.superseded_at IS NULL
         ORDER BY f.created_at DESC, f.id DESC
         LIMIT v_max;
    ELSE
        RETURN QUERY
        SELECT f.* FROM pymem.facts AS f
         WHERE f.project_id = facts_newest.project_id AND f.scope = facts_newest.scope
           AND f.scope_id = facts_newest.scope_id AND f.superseded_by IS NULL
         ORDER BY f.created_at DESC, f.id DESC
         LIMIT v_max;
    END IF;
END;
$$;

-- fact_history: a subject's facts including superseded versions, newest first (by created_at).
--   SELECT id, content, superseded_by FROM pymem.fact_history('user', 'alice');
-- superseded_by links each retired version to its successor; several rows with the same
-- superseded_by are branches merged into one fact. fact_chain returns one fact's tree in order.
CREATE OR REPLACE FUNCTION pymem.fact_history(
    scope text, scope_id text, project_id text DEFAULT '', max_facts integer DEFAULT 1000)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(fact_history.project_id);
    PERFORM pymem._check_limit('max_facts', fact_history.max_facts);
    IF NOT pymem._fact_check_subject(fact_history.scope, fact_history.scope_id, fact_history.project_id, 'match') THEN
        RETURN;
    END IF;
    -- two branches, so that each keeps its plan on its own index (no "'*' OR ..." predicate)
    IF fact_history.scope_id = '*' THEN
        RETURN QUERY
        SELECT f.* FROM pymem.facts AS f
         WHERE f.project_id = fact_history.project_id AND f.scope = fact_history.scope
         ORDER BY f.created_at DESC, f.id DESC
         LIMIT fact_history.max_facts;
    ELSE
        RETURN QUERY
        SELECT f.* FROM pymem.facts AS f
         WHERE f.project_id = fact_history.project_id AND f.scope = fact_history.scope
           AND f.scope_id = fact_history.scope_id
         ORDER BY f.created_at DESC, f.id DESC
         LIMIT fact_history.max_facts;
    END IF;
END;
$$;

-- fact_chain: the history of fact `id`: every version that ended in the same newest version as
-- `id` did, that newest (active) version included, each predecessor before its successor.
--   SELECT id, content, superseded_by, depth FROM pymem.fact_chain('user', 'alice', 42);
-- History is a tree that merges into its newest version: a supersede onto content that is
-- already an active fact retires the old fact into that fact, so a fact has at most one
-- successor but may have several predecessors, one per merged branch. Each row's
-- superseded_by names its successor (rows sharing one are branches that merged there); depth
-- counts the supersede steps from the row to the newest version (0 for it, 1 for the facts it
-- replaced or absorbed directly, ...). Order: depth descending, then created_at and id, so a
-- straight chain reads oldest first.
CREATE OR REPLACE FUNCTION pymem.fact_chain(scope text, scope_id text, id bigint, project_id text DEFAULT '')
RETURNS SETOF pymem.fact_version
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_head bigint;
BEGIN
    PERFORM pymem._tenant_enter(fact_chain.project_id);
    PERFORM pymem._fact_check_subject(fact_chain.scope, fact_chain.scope_id, fact_chain.project_id, 'exact');
    -- forward from `id` to the newest version (one successor per step, on the primary key) ...
    WITH RECURSIVE fwd AS (
        SELECT f.id, f.superseded_by FROM pymem.facts AS f
         WHERE f.project_id = fact_chain.project_id AND f.scope = fact_chain.scope
           AND f.scope_id = fact_chain.scope_id AND f.id = fact_chain.id
        UNION ALL
        SELECT n.id, n.superseded_by FROM fwd AS w JOIN pymem.facts AS n
          ON n.project_id = fact_chain.project_id AND n.scope = fact_chain.scope
         AND n.scope_id = fact_chain.scope_id AND n.id = w.superseded_by
    )
    SELECT w.id INTO v_head FROM fwd AS w WHERE w.superseded_by IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pymem: no fact % for % %', fact_chain.id, fact_chain.scope, pg_catalog.quote_literal(fact_chain.scope_id)
            USING ERRCODE = 'P0002';
    END IF;
    -- ... then back from it through every branch (predecessors on facts_predecessor)
    RETURN QUERY
    WITH RECURSIVE tree AS (
        SELECT f AS fact, 0 AS depth FROM pymem.facts AS f
         WHERE f.project_id = fact_chain.project_id AND f.scope = fact_chain.scope
           AND f.scope_id = fact_chain.scope_id AND f.id = v_head
        UNION ALL
        SELECT p, t.depth + 1 FROM tree AS t JOIN pymem.facts AS p
          ON p.project_id = fact_chain.project_id AND p.scope = fact_chain.scope
         AND p.scope_id = fact_chain.scope_id AND p.superseded_by = (t.fact).id
    )
    SELECT (t.fact).project_id, (t.fact).scope, (t.fact).scope_id, (t.fact).id, (t.fact).content,
           (t.fact).content_key, (t.fact).confidence, (t.fact).source, (t.fact).trace_id, (t.fact).metadata,
           (t.fact).created_at, (t.fact).superseded_by, (t.fact).superseded_at, t.depth
      FROM tree AS t
     ORDER BY t.depth DESC, (t.fact).created_at, (t.fact).id;
END;
$$;

-- fact_supersede: retires an active fact (named by id, or by its current content) in favour of
-- new content, in one transaction, and returns the fact now active in its place:
--   SELECT * FROM pymem.fact_supersede('user', 'alice', new_content => 'Prefers Slack', old_content => 'Prefers email');
-- When no active fact of the subject has the new content, it is inserted (created = true) with
-- the confidence, source, trace_id, metadata and embedding given. When one has it (the user
-- said both, then corrected themselves), the old fact is retired into that fact, a merge
-- (created = false): the old row points at it, and it stays as it was, no row is added (an
-- embedding from an embedder it has no vector of is stored with it, as fact_add does).
-- Either way a fact gets at most one successor, and that successor is active when it is
-- linked, so history is a tree that merges into its newest version and never a cycle.
-- Supersedes of one subject take its subject lock (pymem._subject_lock) before anything else,
-- so they run one after the other: a merge target cannot be retired under a concurrent
-- supersede, and two opposite merges (a into b, b into a) cannot deadlock.
-- Errors: P0002 no such active fact; PM201 it was already superseded (e.g. by a concurrent
-- call: of two concurrent supersedes of one fact exactly one wins); 22023 the new content
-- equals the old (a fact cannot be retired into itself: nothing would change, and the call
-- says the old content is no longer true).
CREATE OR REPLACE FUNCTION pymem.fact_supersede(
    scope text,
    scope_id text,
    new_content text,
    id bigint DEFAULT NULL,
    old_content text DEFAULT NULL,
    project_id text DEFAULT '',
    confidence double precision DEFAULT 1.0,
    source text DEFAULT 'manual',
    trace_id text DEFAULT NULL,
    metadata jsonb DEFAULT '{}'::jsonb,
    embedding vector DEFAULT NULL,
    embedder text DEFAULT NULL,
    created_at timestamptz DEFAULT NULL)
RETURNS pymem.fact_successor
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_old record;  -- the old row's key, content key, created_at and successor (not its content)
    v_content text;
    v_key bytea;
    v_new bigint;
    v_created boolean;
    v_other bigint;
    v_at timestamptz;
BEGIN
    -- fact_add's checks of the tenant, the subject, the new version's values and its time (no cap)
    v_content := pymem._fact_add_checks(fact_supersede.scope, fact_supersede.scope_id, fact_supersede.new_content,
                                        fact_supersede.project_id, fact_supersede.confidence, fact_supersede.source,
                                        fact_supersede.trace_id, fact_supersede.metadata, NULL, fact_supersede.created_at);
    IF (fact_supersede.id IS NULL) = (fact_supersede.old_content IS NULL) THEN
        RAISE EXCEPTION 'pymem: name the fact to supersede by id or by old_content (exactly one)' USING ERRCODE = '22023';
    END IF;
    IF fact_supersede.embedding IS NOT NULL THEN  -- no vector: nothing to check or register
        PERFORM pymem._embedding_register(fact_supersede.project_id, fact_supersede.embedder, fact_supersede.embedding);
    END IF;
    -- one supersede of this subject at a time (see above). (The lock row and the old row in one
    -- statement, FOR UPDATE OF s, f, saved 2% of the call's server CPU, within the noise: not kept)
    PERFORM pymem._subject_lock(fact_supersede.project_id, fact_supersede.scope, fact_supersede.scope_id);
    IF fact_supersede.id IS NOT NULL THEN
        SELECT f.project_id, f.scope, f.scope_id, f.id, f.content_key, f.created_at, f.superseded_by
          INTO v_old FROM pymem.facts AS f
         WHERE f.project_id = fact_supersede.project_id AND f.scope = fact_supersede.scope
           AND f.scope_id = fact_supersede.scope_id AND f.id = fact_supersede.id
           FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'pymem: no fact % for % %', fact_supersede.id, fact_supersede.scope,
                    pg_catalog.quote_literal(fact_supersede.scope_id)
                USING ERRCODE = 'P0002';
        END IF;
    ELSE
        SELECT f.project_id, f.scope, f.scope_id, f.id, f.content_key, f.created_at, f.superseded_by
          INTO v_old FROM pymem.facts AS f
         WHERE f.project_id = fact_supersede.project_id AND f.scope = fact_supersede.scope COLLATE "C"
           AND f.scope_id = fact_supersede.scope_id AND f.superseded_by IS NULL
           AND f.content_key = pymem.fact_key(fact_supersede.old_content)
           FOR UPDATE;
        IF NOT FOUND THEN
            SELECT f.id INTO v_other FROM pymem.facts AS f
             WHERE f.project_id = fact_supersede.project_id AND f.scope = fact_supersede.scope
               AND f.scope_id = fact_supersede.scope_id AND f.content_key = pymem.fact_key(fact_supersede.old_content)
             ORDER BY f.created_at DESC, f.id DESC LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'pymem: fact % with that content was already superseded', v_other
                    USING ERRCODE = 'PM201';
            END IF;
            RAISE EXCEPTION 'pymem: no active % fact for % with that content', fact_supersede.scope,
                    pg_catalog.quote_literal(fact_supersede.scope_id)
                USING ERRCODE = 'P0002';
        END IF;
    END IF;
    IF v_old.superseded_by IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: fact % was already superseded by fact %', v_old.id, v_old.superseded_by
            USING ERRCODE = 'PM201',
                  HINT = 'Supersede the newest version of the chain instead.';
    END IF;
    IF fact_supersede.created_at < v_old.created_at THEN
        RAISE EXCEPTION 'pymem: created_at % is earlier than fact % (%), which it supersedes',
                fact_supersede.created_at, v_old.id, v_old.created_at
            USING ERRCODE = '22023',
                  HINT = 'A new version is learned after the version it replaces: pass a later created_at, or NULL for now.';
    END IF;
    v_key := pymem.fact_key(v_content);
    IF v_key = v_old.content_key THEN
        RAISE EXCEPTION 'pymem: the new content equals fact %''s content; a fact cannot supersede itself', v_old.id
            USING ERRCODE = '22023';
    END IF;
    -- one time for the successor's created_at and the old row's superseded_at (a value, not
    -- clock_timestamp() in the statements: Citus refuses volatile functions in an UPDATE)
    v_at := coalesce(fact_supersede.created_at, pg_catalog.clock_timestamp());
    LOOP
        INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, trace_id, metadata,
                                      created_at)
        VALUES (v_old.project_id, v_old.scope, v_old.scope_id, v_content, v_key, fact_supersede.confidence,
                fact_supersede.source, fact_supersede.trace_id, fact_supersede.metadata, v_at)
        ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING
        RETURNING f.id INTO v_new;
        v_created := FOUND;
        EXIT WHEN v_created;
        -- the new content is already an active fact (or a concurrent fact_add just committed
        -- it): merge into it; the key-share lock keeps it from being deleted until we commit
        SELECT f.id INTO v_new FROM pymem.facts AS f
         WHERE f.project_id = v_old.project_id AND f.scope = v_old.scope COLLATE "C" AND f.scope_id = v_old.scope_id
           AND f.content_key = v_key AND f.superseded_by IS NULL
           FOR KEY SHARE;
        EXIT WHEN FOUND;
        -- it was forgotten in between: try the insert again
    END LOOP;
    -- (the successor and this UPDATE as one statement, a WITH of the two, cost more: its join's
    -- start-up; v_at is a value, not clock_timestamp() in the SET, which Citus refuses)
    UPDATE pymem.facts AS f
       SET superseded_by = v_new, superseded_at = v_at
     WHERE f.project_id = v_old.project_id AND f.scope = v_old.scope AND f.scope_id = v_old.scope_id
       AND f.id = v_old.id;
    IF fact_supersede.embedding IS NOT NULL THEN
        INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
        VALUES (v_old.project_id, v_old.scope, v_old.scope_id, v_new, fact_supersede.embedder, fact_supersede.embedding)
        ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
    END IF;
    IF fact_supersede.scope <> 'user' THEN  -- the copies a Citus cluster keeps (_shared_facts_sync): both rows
        PERFORM pymem._shared_facts_sync(fact_supersede.project_id, fact_supersede.scope, fact_supersede.scope_id,
                                         ARRAY[v_old.id, v_new]);
    END IF;
    RETURN ROW(v_new, v_created)::pymem.fact_successor;
END;
$$;

-- fact_forget: hard-deletes one fact (by id, or the active fact with that content) together
-- with the versions it superseded, every merged branch included (its predecessors, theirs,
-- ...). Returns how many rows were deleted (0 when none matched).
--   SELECT pymem.fact_forget('user', 'alice', content => 'Prefers Slack');
CREATE OR REPLACE FUNCTION pymem.fact_forget(
    scope text, scope_id text, id bigint DEFAULT NULL, content text DEFAULT NULL, project_id text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_target bigint := fact_forget.id;
    v_count integer;
BEGIN
    PERFORM pymem._tenant_enter(fact_forget.project_id);
    IF NOT pymem._fact_check_subject(fact_forget.scope, fact_forget.scope_id, fact_forget.project_id, 'delete') THEN
        RETURN 0;
    END IF;
    IF fact_forget.scope_id = '*' THEN
        RAISE EXCEPTION 'pymem: forgetting one fact needs its subject''s id, not ''*''' USING ERRCODE = '22023';
    END IF;
    IF (fact_forget.id IS NULL) = (fact_forget.content IS NULL) THEN
        RAISE EXCEPTION 'pymem: name the fact to forget by id or by content (exactly one)' USING ERRCODE = '22023';
    END IF;
    -- Lock the fact first: a supersede merging a branch into it (which holds a key-share lock
    -- on it) commits before the walk below, a statement of its own that then sees the branch.
    IF v_target IS NULL THEN
        SELECT f.id INTO v_target FROM pymem.facts AS f
         WHERE f.project_id = fact_forget.project_id AND f.scope = fact_forget.scope COLLATE "C"
           AND f.scope_id = fact_forget.scope_id
           AND f.content_key = pymem.fact_key(fact_forget.content) AND f.superseded_by IS NULL
           FOR UPDATE;
    ELSE
        PERFORM 1 FROM pymem.facts AS f
         WHERE f.project_id = fact_forget.project_id AND f.scope = fact_forget.scope AND f.scope_id = fact_forget.scope_id
           AND f.id = v_target
           FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    -- The fact and every version it replaced, counted by walking the chain one key lookup per
    -- step (the LATERAL); then the fact is deleted by primary key and its history follows through
    -- facts_superseded_by_fkey (ON DELETE CASCADE). Joined as sets, or deleted as `id = ANY`,
    -- generic plans read all of the subject's facts to delete a few.
    WITH RECURSIVE chain AS (
        SELECT f.id FROM pymem.facts AS f
         WHERE f.project_id = fact_forget.project_id AND f.scope = fact_forget.scope
           AND f.scope_id = fact_forget.scope_id AND f.id = v_target
        UNION ALL
        SELECT p.id FROM chain AS c
         CROSS JOIN LATERAL (SELECT p.id FROM pymem.facts AS p
                              WHERE p.project_id = fact_forget.project_id AND p.scope = fact_forget.scope
                                AND p.scope_id = fact_forget.scope_id AND p.superseded_by = c.id) AS p
    )
    SELECT pg_catalog.count(*) INTO v_count FROM chain;
    DELETE FROM pymem.facts AS f
     WHERE f.project_id = fact_forget.project_id AND f.scope = fact_forget.scope
       AND f.scope_id = fact_forget.scope_id AND f.id = v_target;
    IF fact_forget.scope <> 'user' THEN  -- the copies a Citus cluster keeps (_shared_facts_sync)
        PERFORM pymem._shared_facts_sync(fact_forget.project_id, fact_forget.scope, fact_forget.scope_id);
    END IF;
    RETURN v_count;
END;
$$;

-- facts_forget: hard-deletes every fact of a subject, superseded history included, and
-- returns the count. '' at user/project scope deletes nothing; '*' deletes every subject of
-- the scope in the project; '' at agent scope is refused.
--   SELECT pymem.facts_forget('user', 'alice');
CREATE OR REPLACE FUNCTION pymem.facts_forget(scope text, scope_id text, project_id text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
BEGIN
    PERFORM pymem._tenant_enter(facts_forget.project_id);
    IF NOT pymem._fact_check_subject(facts_forget.scope, facts_forget.scope_id, facts_forget.project_id, 'delete') THEN
        RETURN 0;
    END IF;
    IF facts_forget.scope_id = '*' THEN
        DELETE FROM pymem.facts AS f
         WHERE f.project_id = facts_forget.project_id AND f.scope = facts_forget.scope;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        DELETE FROM pymem.subject_locks AS s
         WHERE s.project_id = facts_forget.project_id AND s.scope = facts_forget.scope;
    ELSE
        DELETE FROM pymem.facts AS f
         WHERE f.project_id = facts_forget.project_id AND f.scope = facts_forget.scope
           AND f.scope_id = facts_forget.scope_id;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        DELETE FROM pymem.subject_locks AS s
         WHERE s.project_id = facts_forget.project_id AND s.scope = facts_forget.scope
           AND s.scope_id = facts_forget.scope_id;
    END IF;
    IF facts_forget.scope <> 'user' THEN  -- the copies a Citus cluster keeps (_shared_facts_sync)
        PERFORM pymem._shared_facts_sync(facts_forget.project_id, facts_forget.scope, facts_forget.scope_id);
    END IF;
    RETURN v_count;
END;
$$;

-- facts_unembedded: a subject's active facts that have no vector from `embedder` yet (facts
-- written by SQL, or before a restart). facts_search reports the same rows itself; this is for
-- services that embed ahead of time.
CREATE OR REPLACE FUNCTION pymem.facts_unembedded(
    scope text, scope_id text, embedder text, project_id text DEFAULT '', max_facts integer DEFAULT 1000)
RETURNS TABLE (id bigint, content text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(facts_unembedded.project_id);
    PERFORM pymem._check_limit('max_facts', facts_unembedded.max_facts);
    IF NOT pymem._fact_check_subject(facts_unembedded.scope, facts_unembedded.scope_id, facts_unembedded.project_id, 'match') THEN
        RETURN;
    END IF;
    IF facts_unembedded.scope_id = '*' THEN
        RAISE EXCEPTION 'pymem: facts_unembedded works on one subject, not ''*''' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT f.id, f.content FROM pymem.facts AS f
     WHERE f.project_id = facts_unembedded.project_id AND f.scope = facts_unembedded.scope
       AND f.scope_id = facts_unembedded.scope_id
       AND f.superseded_by IS NULL
       AND NOT EXISTS (
           SELECT 1 FROM pymem.fact_embeddings AS e
            WHERE e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id
              AND e.fact_id = f.id AND e.embedder = facts_unembedded.embedder)
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT facts_unembedded.max_facts;
END;
$$;

-- fact_embeddings_put: stores vectors from `embedder` for facts of one subject (ids and
-- embeddings are parallel arrays, at most 10000 per call: what facts_unembedded lists at most;
-- more is 22023). Facts that no longer exist are skipped; an existing vector
-- of the same embedder is kept. Returns how many vectors were stored. The embedder's dimension
-- is registered for the project only when at least one vector is stored.
CREATE OR REPLACE FUNCTION pymem.fact_embeddings_put(
    scope text, scope_id text, embedder text, ids bigint[], embeddings vector[], project_id text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
BEGIN
    PERFORM pymem._tenant_enter(fact_embeddings_put.project_id);
    PERFORM pymem._fact_check_subject(fact_embeddings_put.scope, fact_embeddings_put.scope_id,
                                      fact_embeddings_put.project_id, 'exact');
    IF pg_catalog.cardinality(ids) IS DISTINCT FROM pg_catalog.cardinality(embeddings) THEN
        RAISE EXCEPTION 'pymem: ids and embeddings must have the same length' USING ERRCODE = '22023';
    END IF;
    -- as many as facts_unembedded lists in one call
    PERFORM pymem._check_batch('fact_embeddings_put', 'vectors', pg_catalog.cardinality(fact_embeddings_put.embeddings), 10000);
    PERFORM pymem._embeddings_validate(fact_embeddings_put.project_id, fact_embeddings_put.embedder,
                                       fact_embeddings_put.embeddings);
    INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
    SELECT f.project_id, f.scope, f.scope_id, f.id, fact_embeddings_put.embedder, u.embedding
      FROM ROWS FROM (pg_catalog.unnest(fact_embeddings_put.ids), pg_catalog.unnest(fact_embeddings_put.embeddings))
           AS u(id, embedding)
      JOIN pymem.facts AS f
        ON f.project_id = fact_embeddings_put.project_id AND f.scope = fact_embeddings_put.scope
       AND f.scope_id = fact_embeddings_put.scope_id AND f.id = u.id
    ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN  -- register the embedder only now that it has a vector stored
        PERFORM pymem._embedding_register(fact_embeddings_put.project_id, fact_embeddings_put.embedder,
                                       fact_embeddings_put.embeddings[1]);
    END IF;
    IF v_count > 0 AND fact_embeddings_put.scope <> 'user' THEN  -- the copies a Citus cluster keeps (_shared_facts_sync)
        PERFORM pymem._shared_facts_sync(fact_embeddings_put.project_id, fact_embeddings_put.scope,
                                         fact_embeddings_put.scope_id, fact_embeddings_put.ids);
    END IF;
    RETURN v_count;
END;
$$;

-- _fact_candidates: what facts_search ranks: a subject's active facts (or every subject's of the
-- scope with '*'), each with whether its metadata contains `metadata` (NULL: every fact does), its
-- cosine distance to `query` (NULL: no query vector, or no vector from `embedder` yet), and its
-- lexemes and length (computed here for a fact stored before 0016_fact_lexical by a role that
-- row-level security binds, which has no row in fact_lexemes). Two branches, so that each keeps
-- its plan on its own index. coalesce(p_embedder, ''): no embedder (a query without a vector)
-- joins no vector; Citus cannot plan the join once a NULL folds the condition to false.
CREATE OR REPLACE FUNCTION pymem._fact_candidates(
    p_project_id text, p_scope text, p_scope_id text, p_query vector, p_embedder text, p_metadata jsonb)
RETURNS TABLE (id bigint, scope_id text, content text, confidence double precision, source text, metadata jsonb,
               created_at timestamptz, eligible boolean, dist double precision, lexemes tsvector, tokens integer)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
-- A subject's facts, vectors and lexemes are joined by hash. Left to choose, a plan made while the
-- statistics say a subject has a row or two (a table filled since its last ANALYZE; a generic plan)
-- joins them by nested loops that rescan the subject's rows for every fact: facts_search(k => 50)
-- over a freshly written 1,000-fact subject took 268 ms that way, 15 ms by hash.
SET enable_nestloop = off
AS $$
BEGIN
    IF p_scope_id = '*' THEN
        RETURN QUERY
        SELECT f.id, f.scope_id, f.content, f.confidence, f.source, f.metadata, f.created_at,
               p_metadata IS NULL OR f.metadata @> p_metadata,
               pymem._cosine_distance(e.embedding, p_query),
               coalesce(l.lexemes, pymem._lexemes(pymem._text_search_config(p_project_id), f.content)),
               coalesce(l.tokens, pymem._lexeme_tokens(pymem._lexemes(pymem._text_search_config(p_project_id), f.content)))
          FROM pymem.facts AS f
          LEFT JOIN pymem.fact_embeddings AS e
            ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id
           AND e.fact_id = f.id AND e.embedder = coalesce(p_embedder, '')
          LEFT JOIN pymem.fact_lexemes AS l
            ON l.project_id = f.project_id AND l.scope = f.scope AND l.scope_id = f.scope_id AND l.fact_id = f.id
         WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.superseded_by IS NULL;
    ELSE
        RETURN QUERY
        SELECT f.id, f.scope_id, f.content, f.confidence, f.source, f.metadata, f.created_at,
               p_metadata IS NULL OR f.metadata @> p_metadata,
               pymem._cosine_distance(e.embedding, p_query),
               coalesce(l.lexemes, pymem._lexemes(pymem._text_search_config(p_project_id), f.content)),
               coalesce(l.tokens, pymem._lexeme_tokens(pymem._lexemes(pymem._text_search_config(p_project_id), f.content)))
          FROM pymem.facts AS f
          LEFT JOIN pymem.fact_embeddings AS e
            ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id
           AND e.fact_id = f.id AND e.embedder = coalesce(p_embedder, '')
          LEFT JOIN pymem.fact_lexemes AS l
            ON l.project_id = f.project_id AND l.scope = f.scope AND l.scope_id = f.scope_id AND l.fact_id = f.id
         WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
           AND f.superseded_by IS NULL;
    END IF;
END;
$$;

-- _facts_ranked: the ranking of facts_search (below), without its checks: the eligible facts (a
-- subject's active facts; with p_metadata, those whose metadata contains it) by
-- score = (1 - p_lw) * cosine + p_lw * lexical with a query vector, lexical alone without one,
-- best first, ties to the higher id; top p_k. p_everyone false (facts_search): with a vector, the
-- facts that have none from p_embedder come first, unranked (similarity and score NULL), and the
-- facts that have one are ranked; without a vector, the facts sharing a word with the text.
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
    -- the query's distinct lexemes, and a tsquery that matches a fact having any of them
    v_terms := coalesce(pg_catalog.tsvector_to_array(pymem._lexemes(pymem._text_search_config(p_project_id), p_text)), '{}');
    IF pg_catalog.cardinality(v_terms) > 0 THEN
        SELECT pg_catalog.string_agg('''' || pg_catalog.replace(pg_catalog.replace(t.term, '\', '\\'), '''', '''''') || '''',
                                     ' | ')::tsquery
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
        SELECT h.id, pg_catalog.sum(pg_catalog.ln(1 + (n.docs - d.df + 0.5) / (d.df + 0.5))
                                    * h.tf * 2.2 / (h.tf + 1.2 * (0.25 + 0.75 * h.dl / n.avgdl))) AS bm25
          FROM h JOIN d ON d.lexeme = h.lexeme CROSS JOIN n
         GROUP BY h.id
    ), r AS (
        SELECT c.id, c.scope_id, c.content, c.confidence, c.source, c.metadata, c.created_at, c.dist,
               b.bm25 / pg_catalog.max(b.bm25) OVER () AS lex
          FROM c LEFT JOIN b ON b.id = c.id
         WHERE c.eligible
    )
    (SELECT r.id, r.scope_id, r.content, r.confidence, r.source, r.metadata, r.created_at, NULL::float8, NULL::float8
       FROM r WHERE v_vector AND NOT p_everyone AND r.dist IS NULL LIMIT 1000)
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
-- The caller has checked the query vector (context_read, once per call).
CREATE OR REPLACE FUNCTION pymem._facts_for_context(
    p_project_id text, p_scope text, p_scope_id text, p_max integer, p_query vector, p_embedder text,
    p_text text, p_lw double precision)
RETURNS TABLE (id bigint, content text, confidence double precision, created_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    -- more than p_max facts? (asked only with a query: a read without one never needs it). One
    -- query on one table, which a Citus worker plans with parameters too (not a sub-select).
    IF p_query IS NOT NULL OR p_text IS NOT NULL THEN
        PERFORM FROM pymem.facts AS f
          WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
            AND f.superseded_by IS NULL
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

-- facts_search: a subject's active facts ranked for a query given as its vector (`query`, from
-- `embedder`), its text (`query_text`), or both; top k.
--   SELECT id, content, similarity, score FROM pymem.facts_search('user', 'alice', $1, 'hash-384-v1',
--       query_text => 'where does alice live', k => 3);
-- Eligible: the subject's active facts; with `metadata` (a JSON object), only those whose metadata
-- contains it (jsonb @>). The ranking fuses two scores:
--   lexical: BM25 (k1 1.2, b 0.75) of the query text's lexemes in each fact (the project's text
--     search configuration, english by default), with the document count, average length in tokens and document frequencies
--     of the subject's active facts, divided by the best eligible fact's (the best lexical match
--     has 1, a fact sharing no term with the text 0);
--   vector: the cosine similarity to `query`.
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
    query vector DEFAULT NULL,
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
    IF facts_search.query IS NULL AND facts_search.query_text IS NULL THEN
        RAISE EXCEPTION 'pymem: facts_search needs a query: its vector (query), its text (query_text), or both'
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
    IF facts_search.query IS NOT NULL THEN
        PERFORM pymem._query_check(facts_search.project_id, facts_search.embedder, facts_search.query);
    END IF;
    RETURN QUERY
    SELECT * FROM pymem._facts_ranked(facts_search.project_id, facts_search.scope, facts_search.scope_id,
                                      facts_search.query, facts_search.embedder, facts_search.query_text,
                                      facts_search.metadata, facts_search.lexical_weight, facts_search.k, false);
END;
$$;

-- fact_get: one fact by id, active or superseded (no row when the project has no such fact).
-- Ids are unique across subjects, so the id alone names the fact within its project.
--   SELECT scope, scope_id, content, superseded_by FROM pymem.fact_get(42);
CREATE OR REPLACE FUNCTION pymem.fact_get(id bigint, project_id text DEFAULT '')
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(fact_get.project_id);
    PERFORM pymem._project_check(fact_get.project_id);
    RETURN QUERY
    SELECT f.* FROM pymem.facts AS f
     WHERE f.project_id = fact_get.project_id AND f.id = fact_get.id;
END;
$$;
