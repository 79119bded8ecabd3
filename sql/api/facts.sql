-- facts.sql: the SQL API for durable facts (tables in migrations/0002_facts.sql): the checks,
-- the content key, the subject lock, facts_newest, fact_get. The rest of the capability is beside
-- it, each file calling this one and never the other way: facts_write.sql (what a write carries,
-- its checks, the rows it becomes), facts_add.sql (fact_add, fact_lookup), facts_versions.sql
-- (history, supersede, forget), facts_time.sql (valid time, expiry), facts_search.sql (by
-- meaning), facts_bulk.sql (bulk adds and vectors), facts_learned.sql (the cap on learned facts). Re-applied (CREATE OR
-- REPLACE) on every migrate. Called by pymem/facts.py and by any SQL client; docs/sql.md "Facts"
-- has a psql example for each function.
--
-- Subjects: (project_id, scope, scope_id). scope is 'agent' (the global tier), 'user' or
-- 'project'. Reads and deletes: an empty user/project id matches nothing; '*' matches every
-- subject of the scope (within the project) on purpose; an empty agent id is refused (it would
-- mean every agent). Writes need a real id ('' is allowed at agent scope only, for a fact that
-- no agent reads).
--
-- Every subject of a scope ('*'): the scope-wide reads and deletes are functions of their own,
-- named _scope_* (_scope_facts_newest, _scope_fact_history, _scope_fact_candidates,
-- _scope_facts_forget), which the public function calls for '*'; each public function's own
-- statement is the one-subject one. So each statement keeps its own plan on its own index (one
-- subject, or the whole scope); one statement with (scope_id = $1 OR $1 = '*') would get one
-- generic plan that serves neither. tests/facts/test_facts.py checks that each '*' read returns
-- the one-subject reads' rows merged.
-- Active facts: every read of them reads the view pymem.active_facts (migrations/0006_v0_2_0_memory.sql),
-- the one definition of "active" (head, unexpired, valid now: 00_common.sql). The writes name
-- pymem.facts, and the lookups of the idempotent add (fact_add, fact_lookup) the unique index's
-- condition itself. The scope-wide reads add "superseded_at IS NULL" (the same rows: CHECK
-- facts_superseded_pair): the scope-wide index facts_scope_active_newest is partial on it, so a
-- read of one subject, which does not say it, can never take that index, whatever the statistics
-- say (migrations/0006_v0_2_0_memory.sql).
--
-- Equality (idempotent add): two contents are the same fact when they are equal after
-- removing leading and trailing whitespace, folding every run of whitespace (ASCII and
-- Unicode spaces such as NBSP) into one space, and Unicode NFC normalisation. Case matters. The key is sha256 of that text (fact_key).
--
-- Locking: fact_add relies on the unique index facts_subject_content_key (concurrent adders of
-- one fact all get the one row); learned adds with a cap lock the subject's row of subject_locks
-- (pymem._subject_lock) so the cap (pymem._learned_cap) holds under concurrency; fact_supersede
-- takes the same lock, then locks the old row (FOR UPDATE): supersedes of one subject run one after
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
-- executor on every call, per row in the batch functions (docs/performance.md).
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
-- NFC: most text is normalized already, and the check costs less than normalize() (the key is
-- the same either way; docs/performance.md).
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

-- _fact_lexemes_add: the statement trigger facts_lexemes (migrations/0006_v0_2_0_memory.sql)
-- indexes the facts a statement inserted, whoever inserts them (fact_add, fact_supersede,
-- turn_record, user_import): one INSERT into pymem.fact_lexemes per statement. The tokens are
-- pymem._lexeme_tokens written out: a sub-select per row costs less than a call of that LANGUAGE
-- sql function (which its SET clause keeps from inlining; docs/performance.md).
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
-- migrations/0006_v0_2_0_memory.sql).
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

-- _facts_newest: the query behind facts_newest for one subject, without its checks; context_read
-- calls it too (a nested API call would enter the tenant and check its arguments a second time).
CREATE OR REPLACE FUNCTION pymem._facts_newest(p_project_id text, p_scope text, p_scope_id text, p_max integer)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT f.* FROM pymem.active_facts AS f
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT p_max;
END;
$$;

-- _scope_facts_newest: facts_newest for every subject of a scope (scope_id '*'), newest first,
-- on the scope-wide index (the partial facts_scope_active_newest: hence superseded_at IS NULL).
CREATE OR REPLACE FUNCTION pymem._scope_facts_newest(p_project_id text, p_scope text, p_max integer)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT f.* FROM pymem.active_facts AS f
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.superseded_at IS NULL
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT p_max;
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
    IF facts_newest.scope_id = '*' THEN
        RETURN QUERY SELECT * FROM pymem._scope_facts_newest(facts_newest.project_id, facts_newest.scope, v_max);
        RETURN;
    END IF;
    -- _facts_newest's query, written out: through it the rows were gathered twice (its RETURN
    -- QUERY, then this one's; docs/performance.md)
    RETURN QUERY
    SELECT f.* FROM pymem.active_facts AS f
     WHERE f.project_id = facts_newest.project_id AND f.scope = facts_newest.scope
       AND f.scope_id = facts_newest.scope_id
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT v_max;
END;
$$;

-- fact_get: one fact by id, active or superseded (no row when the project has no such fact, or it
-- has expired).
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
     WHERE f.project_id = fact_get.project_id AND f.id = fact_get.id AND pymem._fact_kept(f, pg_catalog.now());
END;
$$;
