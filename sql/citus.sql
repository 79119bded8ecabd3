-- citus.sql: pymem on a Citus coordinator (docs/scaling-out.md). Every migrate (psql and Python)
-- runs this file in the API refresh's transaction, after the API files and before grants.sql
-- (ownership and privileges stay as on one server), ONLY when the database has the citus
-- extension; on plain PostgreSQL it is never run. Idempotent: it only changes what
-- differs.
--
-- 1. The owner role may log in: Citus opens its connections to the workers as the current
--    user, which inside the SECURITY DEFINER API functions is the owner (it has no password:
--    the cluster's internal connections must authenticate it, docs/scaling-out.md).
-- 2. Citus-shaped bodies of the functions below (the plain bodies live in api/*.sql; the API
--    refresh re-creates them, then this file replaces them again in the same transaction).
--    Only where the shape Citus needs would cost plain PostgreSQL on a hot path (a GUC set per
--    call, dynamic SQL, a PL/pgSQL current_tenant that no longer inlines); _tenant_allowed_bound
--    has the Citus shape everywhere (00_common.sql).
-- 3. Row-level security policies without the sub-select Citus refuses on distributed tables.
-- 4. Copies of the agent and project facts in reference tables, for every worker's context_read.
-- 5. Tables: reference tables (a copy on every node) for the small ones; conversations by
--    user_id, facts by scope_id, stores by store_key, all in one colocation group (a user's
--    thread and the user's facts land on the same worker).
-- 6. The API functions that name one user, subject or store are delegated
--    (create_distributed_function with that argument, colocated with the tables): the whole
--    call runs on the worker that holds the key, where the tenant set by _tenant_enter is
--    local and every statement reads a local shard.
-- 7. On a Citus whose local plan cache leaks (before 13.5 / 14.3, unless a build carries the
--    fix: probed), pymem's PL/pgSQL functions plan each statement per call (see the end of this
--    file).
SET LOCAL citus.enable_unsafe_triggers = on;  -- the lexeme statement triggers: see below
SET LOCAL citus.multi_shard_modify_mode = 'sequential';  -- DDL after DDL in one transaction

DO $$
DECLARE
    v_owner text := coalesce(NULLIF(pg_catalog.current_setting('pymem.owner_role', true), ''),
                             (SELECT c.value FROM pymem.config AS c WHERE c.key = 'owner_role'), 'pymem_owner');
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = v_owner) THEN
        EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_owner);  -- as grants.sql would, just after
    END IF;
    -- every time: Citus propagates it to every worker (one whose role was created NOLOGIN by
    -- another database's propagation included), which a check of the coordinator would miss
    EXECUTE pg_catalog.format('ALTER ROLE %I LOGIN', v_owner);
END;
$$;

-- tenant_allowed: the RLS policy calls it from queries on shards, where reading tenant_roles
-- (a reference table: a copy on every node, so the read is local) is a nested distributed
-- query Citus refuses unless allowed.
CREATE OR REPLACE FUNCTION pymem.tenant_allowed(project_id text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET citus.allow_nested_distributed_execution = on
AS $$
BEGIN
    RETURN NOT EXISTS (SELECT 1 FROM pymem.tenant_roles AS t) OR pymem._tenant_allowed_bound(tenant_allowed.project_id);
END;
$$;

-- _text_search_config: queries on shards call it too (_recall_ranked, _fact_candidates); it reads
-- only text_search, a reference table, so the nested read is a local one, like tenant_allowed's.
ALTER FUNCTION pymem._text_search_config(text) SET citus.allow_nested_distributed_execution = on;

-- current_tenant: as in 00_common.sql, and one more rule. A per-user call that Citus does not
-- delegate (any call shape but a bare `SELECT pymem.f(...)` / `SELECT ... FROM pymem.f(...)` in
-- autocommit, e.g. `SELECT pymem.context_read(...)->'window'`) runs on the coordinator, and
-- its single-shard reads reach the worker over Citus's internal connection without the
-- tenant (no transaction block is opened for a read, so the SET LOCAL is not sent): RLS would
-- answer with no rows, silently. A statement on such a connection without a tenant raises
-- 0A000 instead. (Superusers bypass RLS and never get here; Citus's maintenance calls that run
-- as the owner, e.g. the foreign-key checks of a shard move, keep the plain answer.)
CREATE OR REPLACE FUNCTION pymem.current_tenant()
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_tenant text := pg_catalog.current_setting('pymem.tenant', true);
BEGIN
    IF pg_catalog.left(v_tenant, 2) = 'p:' THEN
        IF pymem.tenant_allowed(pg_catalog.substr(v_tenant, 3)) THEN
            RETURN pg_catalog.substr(v_tenant, 3);
        END IF;
        RETURN NULL;
    END IF;
    IF pg_catalog.current_setting('application_name', true) LIKE 'citus_internal%'
       -- Citus's own maintenance as the table owner (a shard move re-creates and validates the
       -- foreign keys: SELECT worker_apply_inter_shard_ddl_command(...)) sees no rows, as before
       AND pg_catalog.current_query() !~* '^\s*SELECT\s+(pg_catalog\.)?(worker_|citus_)' THEN
        RAISE EXCEPTION 'pymem: a query reached a Citus worker without its tenant: this call was not delegated to the worker of its user'
            USING ERRCODE = '0A000',
                  HINT = 'On a Citus cluster call per-user functions alone, in autocommit: SELECT pymem.f(...) or SELECT ... FROM pymem.f(...); '
                         'call project-wide ones (browse_*, ''*'' ids, fact_get) inside BEGIN ... COMMIT (docs/scaling-out.md).';
    END IF;
    RETURN NULL;
END;
$$;

-- context_read: without the plain body's plan_cache_mode = force_generic_plan, which reaches the
-- functions it calls: Citus cannot plan _recall_ranked's query with its parameters left open
-- ("could not create distributed plan").
ALTER FUNCTION pymem.context_read RESET plan_cache_mode;

-- _tenant_enter: the tenant as SET LOCAL, which Citus sends after the BEGIN of every worker
-- transaction the call opens (set_config stays on the node that ran it).
CREATE OR REPLACE FUNCTION pymem._tenant_enter(project_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
SET citus.propagate_set_commands = 'local'
AS $$
DECLARE
    v_current text := pg_catalog.current_setting('pymem.tenant', true);
BEGIN
    IF project_id IS NULL THEN
        RETURN;
    END IF;
    IF NOT pymem.tenant_allowed(project_id) THEN
        RAISE EXCEPTION 'pymem: role % may not serve project %', session_user, pg_catalog.quote_literal(project_id)
            USING ERRCODE = '42501', HINT = 'See pymem.tenant_roles (docs/security.md).';
    END IF;
    IF v_current IS NULL OR v_current = '' THEN
        EXECUTE pg_catalog.format('SET LOCAL pymem.tenant = %L', 'p:' || project_id);
    ELSIF v_current <> 'p:' || project_id THEN
        RAISE EXCEPTION 'pymem: this transaction belongs to another tenant than project %', pg_catalog.quote_literal(project_id)
            USING ERRCODE = '42501',
                  HINT = 'One transaction serves one project: commit, or call pymem.set_tenant() for the right one.';
    END IF;
END;
$$;

-- facts_newest: the read of the subject's facts from the table with the predicates of
-- pymem.active_facts (its helpers _fact_live and _fact_valid: 00_common.sql), not from the view: Citus plans a
-- one-table query by its fast path, a view by its full router planner (0.19 ms more per call
-- on the worker: bench/reports/2026-12-04-citus-writes).
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
    v_max := pymem._check_limit('max_facts', facts_newest.max_facts);
    IF NOT pymem._fact_check_subject(facts_newest.scope, facts_newest.scope_id, facts_newest.project_id, 'match') THEN
        RETURN;
    END IF;
    IF facts_newest.scope_id = '*' THEN
        RETURN QUERY SELECT * FROM pymem._scope_facts_newest(facts_newest.project_id, facts_newest.scope, v_max);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT f.* FROM pymem.facts AS f
     WHERE f.project_id = facts_newest.project_id AND f.scope = facts_newest.scope
       AND f.scope_id = facts_newest.scope_id
       AND pymem._fact_live(f.superseded_by, f.expires_at, pg_catalog.now()) AND pymem._fact_valid(f.valid_from, f.valid_to, pg_catalog.now())
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT v_max;
END;
$$;

-- _window: Citus cannot plan the parameterised sub-select with ORDER BY ... LIMIT of the plain
-- body ("could not create distributed plan"): the same query with the values written in.
CREATE OR REPLACE FUNCTION pymem._window(p_project_id text, p_user_id text, p_thread_id text, p_max integer)
RETURNS TABLE (seq bigint, role text, content text, importance double precision, created_at timestamptz,
               metadata jsonb)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE pg_catalog.format($q$
    SELECT w.seq, w.role, w.content, w.importance, w.created_at, w.metadata FROM (
        SELECT m.seq, m.role, m.content, m.importance, m.created_at, m.metadata FROM pymem.messages AS m
         WHERE m.project_id = %L AND m.user_id = %L AND m.thread_id = %L
         ORDER BY m.seq DESC
         LIMIT %s) AS w
     ORDER BY w.seq$q$, p_project_id, p_user_id, p_thread_id, p_max);
END;
$$;

-- _recall_rows: the rows _recall_ranked ranks, as the plain SQL body defines them, read by
-- single-table statements (Citus's fast path on the local shard) into arrays and returned from
-- them: the ranking statement then names no Citus table, where the plain body, inlined into it,
-- made Citus plan the whole statement in full on every call (~3 ms of a context_read on the
-- worker). Vectors stored before 0017 (rare) take their lexemes in a join, and a metadata filter
-- reads the keys of the user's messages that pass it.
SELECT pymem.migration_types_path();  -- its signature names pgvector's type
CREATE OR REPLACE FUNCTION pymem._recall_rows(
    p_project_id text, p_user_id text, p_embedder text, p_query vector, p_any tsquery, p_as_of timestamptz,
    p_metadata jsonb)
RETURNS TABLE (thread_id text, seq bigint, chars integer, importance double precision, created_at timestamptz,
               similarity double precision, tokens integer, lexemes tsvector, metadata_ok boolean)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_thread text[]; v_seq bigint[]; v_chars integer[]; v_importance double precision[]; v_at timestamptz[];
    v_sim double precision[]; v_tokens integer[]; v_lexemes tsvector[]; v_stale boolean[];
    v_f_thread text[]; v_f_seq bigint[];
BEGIN
    IF p_query IS NOT NULL THEN
        SELECT pg_catalog.array_agg(e.thread_id), pg_catalog.array_agg(e.seq), pg_catalog.array_agg(e.chars),
               pg_catalog.array_agg(e.importance), pg_catalog.array_agg(e.created_at),
               pg_catalog.array_agg(1 - pymem._cosine_distance(e.embedding, p_query)), pg_catalog.array_agg(e.tokens),
               pg_catalog.array_agg(CASE WHEN e.lexemes @@ p_any THEN e.lexemes END), pg_catalog.array_agg(e.lexemes IS NULL)
          INTO v_thread, v_seq, v_chars, v_importance, v_at, v_sim, v_tokens, v_lexemes, v_stale
          FROM pymem.message_embeddings AS e
         WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder
           AND (p_as_of IS NULL OR e.created_at <= p_as_of);
    ELSE
        SELECT pg_catalog.array_agg(l.thread_id), pg_catalog.array_agg(l.seq), pg_catalog.array_agg(l.chars),
               pg_catalog.array_agg(l.importance), pg_catalog.array_agg(l.created_at), pg_catalog.array_agg(l.tokens),
               pg_catalog.array_agg(CASE WHEN l.lexemes @@ p_any THEN l.lexemes END)
          INTO v_thread, v_seq, v_chars, v_importance, v_at, v_tokens, v_lexemes
          FROM pymem.message_lexemes AS l
         WHERE l.project_id = p_project_id AND l.user_id = p_user_id
           AND (p_as_of IS NULL OR l.created_at <= p_as_of);
    END IF;
    IF v_thread IS NULL THEN
        RETURN;
    END IF;
    IF true = ANY (v_stale) THEN
        SELECT pg_catalog.array_agg(coalesce(x.tokens, r.tokens) ORDER BY r.o),
               pg_catalog.array_agg(CASE WHEN x.lexemes @@ p_any THEN x.lexemes ELSE r.lexemes END ORDER BY r.o)
          INTO v_tokens, v_lexemes
          FROM ROWS FROM (pg_catalog.unnest(v_thread), pg_catalog.unnest(v_seq), pg_catalog.unnest(v_tokens),
                          pg_catalog.unnest(v_lexemes), pg_catalog.unnest(v_stale)) WITH ORDINALITY
               AS r(thread_id, seq, tokens, lexemes, stale, o)
          LEFT JOIN pymem.message_lexemes AS x
            ON r.stale AND x.project_id = p_project_id AND x.user_id = p_user_id AND x.thread_id = r.thread_id AND x.seq = r.seq;
    END IF;
    IF p_metadata IS NOT NULL THEN
        SELECT pg_catalog.array_agg(m.thread_id), pg_catalog.array_agg(m.seq) INTO v_f_thread, v_f_seq
          FROM pymem.messages AS m
         WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.metadata @> p_metadata;
    END IF;
    RETURN QUERY
    SELECT r.thread_id, r.seq, r.chars, r.importance, r.created_at, r.similarity, r.tokens, r.lexemes,
           p_metadata IS NULL OR (r.thread_id, r.seq) IN (
               SELECT f.thread_id, f.seq FROM ROWS FROM (pg_catalog.unnest(v_f_thread), pg_catalog.unnest(v_f_seq)) AS f(thread_id, seq))
      FROM ROWS FROM (pg_catalog.unnest(v_thread), pg_catalog.unnest(v_seq), pg_catalog.unnest(v_chars),
                      pg_catalog.unnest(v_importance), pg_catalog.unnest(v_at), pg_catalog.unnest(v_sim),
                      pg_catalog.unnest(v_tokens), pg_catalog.unnest(v_lexemes))
           AS r(thread_id, seq, chars, importance, created_at, similarity, tokens, lexemes);
END;
$$;
SELECT pymem.migration_search_path();

-- _messages_unembedded (context_read's and messages_unembedded's catch-up list): the plain body's
-- three index ranges as three single-table reads (Citus's fast path; its UNION ALL took the full
-- router planner, twice a context_read), all empty when nothing is missing, of the keys only (a
-- backlog of messages imported without vectors may be long); only when one is not, the user's
-- vectors of the embedder among them, the order and the limit in a statement that names no Citus
-- table, and the contents of those kept.
CREATE OR REPLACE FUNCTION pymem._messages_unembedded(
    p_project_id text, p_user_id text, p_embedder text, p_min_chars integer, p_limit integer)
RETURNS TABLE (thread_id text, seq bigint, content text)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_thread text[]; v_seq bigint[]; v_at timestamptz[];  -- the keys only: a backlog may be long
    v_h_thread text[]; v_h_seq bigint[];  -- those with a vector of p_embedder already; then the messages read
    v_content text[];
BEGIN
    SELECT pg_catalog.array_agg(m.thread_id), pg_catalog.array_agg(m.seq), pg_catalog.array_agg(m.created_at)
      INTO v_thread, v_seq, v_at
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by IS NULL
       AND pg_catalog.length(m.content) >= p_min_chars;
    SELECT v_thread || pg_catalog.array_agg(m.thread_id), v_seq || pg_catalog.array_agg(m.seq),
           v_at || pg_catalog.array_agg(m.created_at)
      INTO v_thread, v_seq, v_at
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by < p_embedder
       AND pg_catalog.length(m.content) >= p_min_chars;
    SELECT v_thread || pg_catalog.array_agg(m.thread_id), v_seq || pg_catalog.array_agg(m.seq),
           v_at || pg_catalog.array_agg(m.created_at)
      INTO v_thread, v_seq, v_at
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.embedded_by > p_embedder
       AND pg_catalog.length(m.content) >= p_min_chars;
    IF v_thread IS NULL THEN
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(e.thread_id), pg_catalog.array_agg(e.seq) INTO v_h_thread, v_h_seq
      FROM pymem.message_embeddings AS e
     WHERE e.project_id = p_project_id AND e.user_id = p_user_id AND e.embedder = p_embedder AND e.seq = ANY (v_seq);
    -- the first p_limit of those without one, newest first; then their contents
    SELECT pg_catalog.array_agg(c.thread_id ORDER BY c.o), pg_catalog.array_agg(c.seq ORDER BY c.o)
      INTO v_thread, v_seq
      FROM (SELECT u.thread_id, u.seq,
                   pg_catalog.row_number() OVER (ORDER BY u.created_at DESC, u.thread_id, u.seq DESC) AS o
              FROM ROWS FROM (pg_catalog.unnest(v_thread), pg_catalog.unnest(v_seq), pg_catalog.unnest(v_at))
                   AS u(thread_id, seq, created_at)
             WHERE NOT EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest(v_h_thread), pg_catalog.unnest(v_h_seq)) AS h(thread_id, seq)
                                WHERE h.thread_id = u.thread_id AND h.seq = u.seq)
             ORDER BY o
             LIMIT p_limit) AS c;
    IF v_thread IS NULL THEN  -- every one had a vector already
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(m.thread_id), pg_catalog.array_agg(m.seq), pg_catalog.array_agg(m.content)
      INTO v_h_thread, v_h_seq, v_content
      FROM pymem.messages AS m
     WHERE m.project_id = p_project_id AND m.user_id = p_user_id AND m.seq = ANY (v_seq);
    RETURN QUERY
    SELECT k.thread_id, k.seq, m.content
      FROM ROWS FROM (pg_catalog.unnest(v_thread), pg_catalog.unnest(v_seq)) WITH ORDINALITY AS k(thread_id, seq, o)
      JOIN ROWS FROM (pg_catalog.unnest(v_h_thread), pg_catalog.unnest(v_h_seq), pg_catalog.unnest(v_content))
           AS m(thread_id, seq, content) ON m.thread_id = k.thread_id AND m.seq = k.seq
     ORDER BY k.o;
END;
$$;

-- _local_shard(table, key): the name of the table's shard for a distribution key when that
-- shard is a table on this node, else the table's. For the lexeme triggers below, which fire on
-- a shard of facts or messages: the colocated shard of fact_lexemes, message_lexemes,
-- recall_indexes or recall_terms (the same hash range) is on the same node, moved with it, and written or read
-- while Citus holds the write to the triggering shard (a shard move blocks both alike), so the
-- trigger uses it as a plain table: ~0.1 ms less a statement than a statement Citus routes
-- (bench/reports/2026-12-04-citus-writes). The shards carry the tables' row-level security.
CREATE OR REPLACE FUNCTION pymem._local_shard(p_table regclass, p_key text)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_name text := pg_catalog.shard_name(p_table, pg_catalog.get_shard_id_for_distribution_column(p_table, p_key));
BEGIN
    IF pg_catalog.to_regclass(v_name) IS NOT NULL THEN
        RETURN v_name;
    END IF;
    RETURN p_table::text;
END;
$$;

-- The lexeme statement triggers: Citus cannot plan a query that joins the transition table
-- ("unrecognized RTE kind: 7"). Read it alone into arrays, the project's configuration in its
-- own statement, then insert from the arrays into the colocated shard (_local_shard).
CREATE OR REPLACE FUNCTION pymem._fact_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
SET citus.allow_nested_distributed_execution = on
AS $$
DECLARE
    v_p text[]; v_s text[]; v_i text[]; v_id bigint[]; v_content text[];
    v_config regconfig;
BEGIN
    SELECT pg_catalog.array_agg(n.project_id), pg_catalog.array_agg(n.scope), pg_catalog.array_agg(n.scope_id),
           pg_catalog.array_agg(n.id), pg_catalog.array_agg(n.content)
      INTO v_p, v_s, v_i, v_id, v_content FROM new_facts AS n;
    IF v_p IS NULL THEN
        RETURN NULL;
    END IF;
    v_config := pymem._text_search_config(v_p[1]);  -- one project per transaction
    -- the rows as literal VALUES (an INSERT ... SELECT from the arrays into the distributed table
    -- took Citus's coordinator path: 0.56 ms of a fact_add's 1.7 on the worker); the trigger's
    -- rows are of one shard, so v_i[1] names their colocated shard
    EXECUTE 'INSERT INTO ' || pymem._local_shard('pymem.fact_lexemes', v_i[1])
         || ' (project_id, scope, scope_id, fact_id, lexemes, tokens) VALUES '
         || (SELECT pg_catalog.string_agg(pg_catalog.format('(%L, %L, %L, %s, %L::tsvector, %s)', u.p, u.s, u.i, u.id,
                                                           v.lexemes, pymem._lexeme_tokens(v.lexemes)), ', ')
               FROM unnest(v_p, v_s, v_i, v_id, v_content) AS u(p, s, i, id, content)
              CROSS JOIN LATERAL (SELECT pymem._lexemes(v_config, u.content) AS lexemes OFFSET 0) AS v);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION pymem._message_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
SET citus.allow_nested_distributed_execution = on
AS $$
DECLARE
    v_p text[]; v_u text[]; v_t text[]; v_seq bigint[]; v_content text[]; v_imp double precision[];
    v_at timestamptz[];
    v_config regconfig;
    v_heavy text[];
BEGIN
    SELECT pg_catalog.array_agg(n.project_id), pg_catalog.array_agg(n.user_id), pg_catalog.array_agg(n.thread_id),
           pg_catalog.array_agg(n.seq), pg_catalog.array_agg(n.content), pg_catalog.array_agg(n.importance),
           pg_catalog.array_agg(n.created_at)
      INTO v_p, v_u, v_t, v_seq, v_content, v_imp, v_at FROM new_messages AS n;
    IF v_p IS NULL THEN
        RETURN NULL;
    END IF;
    v_config := pymem._text_search_config(v_p[1]);
    EXECUTE 'INSERT INTO ' || pymem._local_shard('pymem.message_lexemes', v_u[1])
         || ' (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes) VALUES '
         || (SELECT pg_catalog.string_agg(pg_catalog.format('(%L, %L, %L, %s, %s, %L::float8, %L::timestamptz, %s, %L::tsvector)',
                                                           x.p, x.u, x.t, x.seq, pg_catalog.length(x.content), x.imp, x.at,
                                                           pymem._lexeme_tokens(v.lexemes), v.lexemes), ', ')
               FROM unnest(v_p, v_u, v_t, v_seq, v_content, v_imp, v_at) AS x(p, u, t, seq, content, imp, at)
              CROSS JOIN LATERAL (SELECT pymem._lexemes(v_config, x.content) AS lexemes OFFSET 0) AS v);
    -- heavy users' words (recall_terms), from the arrays too; the registry read in the user's
    -- colocated shard when the statement wrote one user's messages (every call but a multi-user
    -- import; its = ANY through Citus's router planner cost 0.25 ms a turn)
    IF v_u <@ ARRAY[v_u[1]] THEN
        EXECUTE pg_catalog.format('SELECT ARRAY[r.user_id] FROM %s AS r WHERE r.project_id = $1 AND r.user_id = $2 LIMIT 1',
                                  pymem._local_shard('pymem.recall_indexes', v_u[1]))
           INTO v_heavy USING v_p[1], v_u[1];
    ELSE  -- dynamic, like every statement here: none is kept in a plan cache (step 7)
        EXECUTE 'SELECT pg_catalog.array_agg(DISTINCT r.user_id) FROM pymem.recall_indexes AS r '
                'WHERE r.project_id = $1 AND r.user_id = ANY ($2)'
           INTO v_heavy USING v_p[1], v_u;
    END IF;
    IF v_heavy IS NOT NULL THEN  -- into the colocated shard: a plain INSERT ... SELECT there
        EXECUTE pg_catalog.format($i$
        INSERT INTO %s AS t (project_id, user_id, lexeme, thread_id, seq)
        SELECT x.p, x.u, w.lexeme, x.t, x.seq
          FROM unnest($1, $2, $3, $4, $5) AS x(p, u, t, seq, content)
         CROSS JOIN LATERAL (SELECT pymem._lexemes($6, x.content) AS lexemes OFFSET 0) AS v
         CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.tsvector_to_array(v.lexemes)) AS w(lexeme)
         WHERE x.u = ANY ($7)
        ON CONFLICT DO NOTHING$i$, pymem._local_shard('pymem.recall_terms', v_u[1]))
        USING v_p, v_u, v_t, v_seq, v_content, v_config, v_heavy;
    END IF;
    RETURN NULL;
END;
$$;

-- Shared facts: agent and project facts are read by every user's context_read, which runs on
-- the user's worker; a read of the agent's shard from there would reach another worker without
-- the tenant. So on Citus each agent or project fact, its vectors and its lexemes are also kept
-- in reference tables (shared_facts, shared_fact_embeddings, shared_fact_lexemes: a copy on every
-- node, the same row-level security), refreshed by _shared_facts_sync, which the functions that
-- write an agent's or a project's facts call at their end (a rare write: two-phase commit to
-- every node; with the ids of the facts a write changed, only those are copied again, so the
-- cost does not grow with the agent's facts). facts stays the table the facts API reads and
-- writes; only context_read reads the copies. Not triggers on the shards: a write to a reference table from a shard, inside a
-- transaction the coordinator commits in two phases, crashed the worker (Citus 14.0.1).
-- The tables come from migrations/0034_shared_facts.sql (on every database, empty off Citus);
-- the first distribution fills them with what is already there (a database distributed after it
-- held agent facts; read as a superuser: row-level security hides every row from a role without
-- the tenant), before they become reference tables below.
DO $$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['facts', 'fact_embeddings', 'fact_lexemes'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS p
                        WHERE p.logicalrelid = pg_catalog.to_regclass('pymem.shared_' || v_table)) THEN
            EXECUTE pg_catalog.format('INSERT INTO pymem.%I SELECT * FROM pymem.%I AS f WHERE f.scope <> %L '
                                      'AND NOT EXISTS (SELECT 1 FROM pymem.%I)',
                                      'shared_' || v_table, v_table, 'user', 'shared_' || v_table);
        END IF;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION pymem._shared_facts_sync(p_project_id text, p_scope text, p_scope_id text,
                                                    p_ids bigint[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_table text;
    v_where text := pg_catalog.format('t.project_id = %L AND t.scope <> %L', p_project_id, 'user')
        || CASE WHEN p_scope <> '*' THEN pg_catalog.format(' AND t.scope = %L', p_scope) ELSE '' END
        || CASE WHEN p_scope_id <> '*' THEN pg_catalog.format(' AND t.scope_id = %L', p_scope_id) ELSE '' END;
    v_ids text := CASE WHEN p_ids IS NOT NULL THEN pg_catalog.format(' = ANY (%L::bigint[])', p_ids) END;
    v_rows text;
BEGIN
    IF p_ids IS NOT NULL AND pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN;
    END IF;
    -- with p_ids, only those facts' rows (and their vectors and lexemes) are copied again
    FOREACH v_table IN ARRAY ARRAY['fact_embeddings', 'fact_lexemes', 'facts'] LOOP
        EXECUTE pg_catalog.format('DELETE FROM pymem.%I AS t WHERE %s', 'shared_' || v_table,
                                  v_where || coalesce(CASE v_table WHEN 'facts' THEN ' AND t.id' ELSE ' AND t.fact_id' END || v_ids, ''));
    END LOOP;
    FOREACH v_table IN ARRAY ARRAY['facts', 'fact_embeddings', 'fact_lexemes'] LOOP
        -- one INSERT ... VALUES of row literals: an INSERT ... SELECT from a distributed table
        -- into a reference table goes through COPY, which row-level security refuses
        EXECUTE pg_catalog.format('SELECT pg_catalog.string_agg(pg_catalog.format(%L, t::text), %L) FROM pymem.%I AS t WHERE %s',
                                  '((%L::pymem.shared_' || v_table || ').*)', ',', v_table,
                                  v_where || coalesce(CASE v_table WHEN 'facts' THEN ' AND t.id' ELSE ' AND t.fact_id' END || v_ids, ''))
           INTO v_rows;
        IF v_rows IS NOT NULL THEN
            EXECUTE pg_catalog.format('INSERT INTO pymem.%I VALUES %s ON CONFLICT DO NOTHING', 'shared_' || v_table, v_rows);
        END IF;
    END LOOP;
END;
$$;

-- _facts_insert_many: facts_add_many's set-based statement joins its elements to the facts of
-- many subjects (a lateral outer join Citus cannot plan: "cannot perform a lateral outer join
-- when a distributed subquery references complex subqueries, CTEs or local tables"). Here it
-- finds nothing, and facts_add_many adds every element with fact_add, one routed call each, in
-- the same transaction: the same checks, results and all-or-nothing, at a single add's speed.
CREATE OR REPLACE FUNCTION pymem._facts_insert_many(
    p_project_id text, p_scope text, p_scope_ids text[], p_contents text[], p_confidences double precision[],
    p_sources text[], p_metadata jsonb[], p_created_ats timestamptz[], p_expires_at timestamptz,
    p_valid_from timestamptz, p_valid_to timestamptz, OUT ids bigint[], OUT created boolean[])
LANGUAGE sql VOLATILE SECURITY INVOKER  -- as its twin, whatever this body does (tests/sql/test_citus_overrides.py)
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.array_fill(NULL::bigint, ARRAY[pg_catalog.cardinality(p_contents)]),
           pg_catalog.array_fill(false, ARRAY[pg_catalog.cardinality(p_contents)]);
$$;

-- The reads of context_read over the copies: _shared_facts_for_context and the functions it
-- calls are the plain ones (api/facts_search.sql and api/facts.sql, just re-created by this migrate) with the tables
-- and calls renamed, so they never drift from them; _facts_for_context sends 'user' facts to
-- the plain body (kept as _user_facts_for_context) and the others to the copies.
SELECT pymem.migration_types_path();  -- the functions below name pgvector's type
-- signatures the copies had before 0043_valid_time gave _facts_for_context a point in time
DROP FUNCTION IF EXISTS pymem._user_facts_for_context(text, text, text, integer, vector, text, text, double precision);
DROP FUNCTION IF EXISTS pymem._shared_facts_for_context(text, text, text, integer, vector, text, text, double precision);

DO $$
DECLARE
    v_fn text;
    v_src text;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY['_facts_newest', '_facts_at', '_scope_fact_candidates', '_fact_candidates', '_facts_ranked',
                                '_facts_for_context'] LOOP
        v_src := pg_catalog.pg_get_functiondef(
            (SELECT p.oid FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace AND p.proname = v_fn));
        IF v_fn = '_facts_for_context' THEN
            EXECUTE pg_catalog.regexp_replace(v_src, '\mpymem\._facts_for_context\(', 'pymem._user_facts_for_context(');
        END IF;
        v_src := pg_catalog.regexp_replace(v_src, '\mpymem\.(facts|fact_embeddings|fact_lexemes|active_facts)\M',
                                           'pymem.shared_\1', 'g');
        v_src := pg_catalog.regexp_replace(v_src, '\mpymem\.(_facts_newest|_facts_at|_scope_fact_candidates|_fact_candidates|_facts_ranked|_facts_for_context)\(',
                                           'pymem._shared\1(', 'g');
        EXECUTE v_src;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION pymem._facts_for_context(
    p_project_id text, p_scope text, p_scope_id text, p_max integer, p_query vector, p_embedder text,
    p_text text, p_lw double precision, p_valid_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id bigint, content text, confidence double precision, created_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF p_scope = 'user' THEN
        RETURN QUERY SELECT * FROM pymem._user_facts_for_context(p_project_id, p_scope, p_scope_id, p_max, p_query,
                                                                p_embedder, p_text, p_lw, p_valid_at, p_as_of);
    ELSE
        RETURN QUERY SELECT * FROM pymem._shared_facts_for_context(p_project_id, p_scope, p_scope_id, p_max, p_query,
                                                                  p_embedder, p_text, p_lw, p_valid_at, p_as_of);
    END IF;
END;
$$;

-- _fact_candidates (a subject's facts, for _facts_ranked: facts_search and context_read's user
-- facts): the plain body's join of the subject's active facts, vectors and lexemes, as three
-- single-table reads (Citus's fast path on the local shard; the active facts with the predicates
-- of pymem.active_facts, as facts_newest above) into arrays, joined by hash in a statement that
-- names no Citus table; the join took Citus's full router planner on every call. Defined after
-- the copies above, which derive from the plain body.
CREATE OR REPLACE FUNCTION pymem._fact_candidates(
    p_project_id text, p_scope text, p_scope_id text, p_query vector, p_embedder text, p_metadata jsonb)
RETURNS TABLE (id bigint, scope_id text, content text, confidence double precision, source text, metadata jsonb,
               created_at timestamptz, eligible boolean, dist double precision, lexemes tsvector, tokens integer)
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
SET enable_nestloop = off
AS $$
#variable_conflict use_column
DECLARE
    v_id bigint[]; v_content text[]; v_confidence double precision[]; v_source text[]; v_metadata jsonb[];
    v_at timestamptz[];
    v_e_id bigint[]; v_e_dist double precision[];
    v_l_id bigint[]; v_l_lexemes tsvector[]; v_l_tokens integer[];
BEGIN
    IF p_scope_id = '*' THEN
        RETURN QUERY SELECT * FROM pymem._scope_fact_candidates(p_project_id, p_scope, p_query, p_embedder, p_metadata);
        RETURN;
    END IF;
    SELECT pg_catalog.array_agg(f.id), pg_catalog.array_agg(f.content), pg_catalog.array_agg(f.confidence),
           pg_catalog.array_agg(f.source), pg_catalog.array_agg(f.metadata), pg_catalog.array_agg(f.created_at)
      INTO v_id, v_content, v_confidence, v_source, v_metadata, v_at
      FROM pymem.facts AS f
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
       AND pymem._fact_live(f.superseded_by, f.expires_at, pg_catalog.now()) AND pymem._fact_valid(f.valid_from, f.valid_to, pg_catalog.now());
    IF v_id IS NULL THEN
        RETURN;
    END IF;
    IF p_query IS NOT NULL THEN  -- without a vector every distance is NULL
        SELECT pg_catalog.array_agg(e.fact_id), pg_catalog.array_agg(pymem._cosine_distance(e.embedding, p_query))
          INTO v_e_id, v_e_dist
          FROM pymem.fact_embeddings AS e
         WHERE e.project_id = p_project_id AND e.scope = p_scope AND e.scope_id = p_scope_id
           AND e.embedder = coalesce(p_embedder, '');
    END IF;
    SELECT pg_catalog.array_agg(l.fact_id), pg_catalog.array_agg(l.lexemes), pg_catalog.array_agg(l.tokens)
      INTO v_l_id, v_l_lexemes, v_l_tokens
      FROM pymem.fact_lexemes AS l
     WHERE l.project_id = p_project_id AND l.scope = p_scope AND l.scope_id = p_scope_id;
    RETURN QUERY
    SELECT f.id, p_scope_id, f.content, f.confidence, f.source, f.metadata, f.created_at,
           p_metadata IS NULL OR f.metadata @> p_metadata,
           e.dist,
           coalesce(l.lexemes, pymem._lexemes(pymem._text_search_config(p_project_id), f.content)),
           coalesce(l.tokens, pymem._lexeme_tokens(pymem._lexemes(pymem._text_search_config(p_project_id), f.content)))
      FROM ROWS FROM (pg_catalog.unnest(v_id), pg_catalog.unnest(v_content), pg_catalog.unnest(v_confidence),
                      pg_catalog.unnest(v_source), pg_catalog.unnest(v_metadata), pg_catalog.unnest(v_at))
           AS f(id, content, confidence, source, metadata, created_at)
      LEFT JOIN ROWS FROM (pg_catalog.unnest(v_e_id), pg_catalog.unnest(v_e_dist)) AS e(id, dist) ON e.id = f.id
      LEFT JOIN ROWS FROM (pg_catalog.unnest(v_l_id), pg_catalog.unnest(v_l_lexemes), pg_catalog.unnest(v_l_tokens))
           AS l(id, lexemes, tokens) ON l.id = f.id;
END;
$$;

SELECT pymem.migration_search_path();

-- Policies: project_id = current_tenant() without the sub-select (Citus: "Subqueries are not
-- supported in policies on distributed tables"). On a shard the planner still evaluates it
-- once per statement (a One-Time Filter next to the query's own project_id = constant).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.tablename FROM pg_catalog.pg_policies AS p
              WHERE p.schemaname = 'pymem' AND p.policyname = 'tenant' AND p.qual LIKE '%SELECT%' LOOP
        EXECUTE pg_catalog.format('DROP POLICY tenant ON pymem.%I', r.tablename);
        EXECUTE pg_catalog.format('CREATE POLICY tenant ON pymem.%I USING (project_id = pymem.current_tenant()) '
                                  'WITH CHECK (project_id = pymem.current_tenant())', r.tablename);
    END LOOP;
END;
$$;

-- ---- The change feed (0042, 0048, 0050; docs/scaling-out.md "The change feed on a cluster") ----
-- Its triggers fire on the shards, on the workers (citus.enable_unsafe_triggers, set above, copies
-- them there): _changes_log appends the statement's changes to the colocated local shard of
-- pymem.change_outbox (_local_shard), never content, and changes_since on the coordinator
-- publishes them into pymem.changes (_changes_claim, api/changes.sql). The project's channel is
-- read from change_channels (a reference table) and notified on the coordinator, where listeners
-- connect (run_command_on_coordinator: a connection of its own, once per transaction, kind and
-- channel; before the write commits, so a woken reader may find it on its next poll). erasures
-- is a reference table: only the coordinator's copy logs, into pymem.changes there, as on one server.
CREATE OR REPLACE FUNCTION pymem._changes_log()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
SET citus.allow_nested_distributed_execution = on
AS $$
DECLARE
    v_t text := pg_catalog.regexp_replace(TG_TABLE_NAME, '_[0-9]+$', '');  -- a shard: facts_102008
    v_op text := CASE TG_OP WHEN 'INSERT' THEN 'add' WHEN 'UPDATE' THEN 'update' ELSE 'delete' END;
    v_kind text := CASE v_t WHEN 'facts' THEN 'fact' WHEN 'messages' THEN 'message' WHEN 'threads' THEN 'summary'
                            WHEN 'store_entries' THEN 'store_entry' ELSE 'erasure' END;
    v_c jsonb;  -- the changes: [project_id, shard_key, subject, keys, rows] each
    v_channel text;
    v_sent text := coalesce(pg_catalog.current_setting('pymem.feed_notified', true), '');
BEGIN
    IF v_t = 'threads' THEN
        v_op := 'update';
        v_c := pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_array(NEW.project_id, NEW.user_id, NEW.user_id,
                   pg_catalog.jsonb_build_object('thread_id', NEW.thread_id, 'through_seq', NEW.summary_through), 1));
    ELSIF v_t = 'facts' THEN
        SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(g.p, g.k, g.s, g.keys, g.n)) INTO v_c
          FROM (SELECT c.project_id AS p, c.scope_id AS k, c.scope || ':' || c.scope_id AS s, pg_catalog.count(*) AS n,
                       pg_catalog.jsonb_build_object('ids', pg_catalog.jsonb_agg(c.id ORDER BY c.id)) AS keys
                  FROM changed AS c GROUP BY c.project_id, c.scope, c.scope_id) AS g;
    ELSIF v_t = 'messages' THEN
        SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(g.p, g.k, g.k, g.keys, g.n)) INTO v_c
          FROM (SELECT c.project_id AS p, c.user_id AS k, pg_catalog.count(*) AS n,
                       pg_catalog.jsonb_build_object('thread_id', c.thread_id, 'from_seq', pg_catalog.min(c.seq),
                                                     'to_seq', pg_catalog.max(c.seq)) AS keys
                  FROM changed AS c GROUP BY c.project_id, c.user_id, c.thread_id) AS g;
    ELSIF v_t = 'store_entries' THEN
        SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(g.p, g.k, g.k, g.keys, g.n)) INTO v_c
          FROM (SELECT c.project_id AS p, c.store_key AS k, pg_catalog.count(*) AS n,
                       pg_catalog.jsonb_build_object('paths', pg_catalog.jsonb_agg(c.path ORDER BY c.path)) AS keys
                  FROM changed AS c GROUP BY c.project_id, c.store_key) AS g;
    ELSIF v_t = 'erasures' AND pg_catalog.citus_is_coordinator() THEN
        INSERT INTO pymem.changes (project_id, kind, op, subject, keys, rows)
        SELECT c.project_id, v_kind, v_op, '', pg_catalog.jsonb_build_object('ids', pg_catalog.jsonb_agg(c.id ORDER BY c.id)),
               pg_catalog.count(*)
          FROM changed AS c GROUP BY c.project_id;
        SELECT pg_catalog.jsonb_agg(DISTINCT pg_catalog.jsonb_build_array(c.project_id)) INTO v_c FROM changed AS c;
    ELSE
        RETURN NULL;
    END IF;
    IF v_c IS NULL THEN
        RETURN NULL;
    END IF;
    IF v_t <> 'erasures' THEN  -- the statement's rows are of one shard: v_c's first key names the colocated one
        -- (a shard has no identity: the id from the table's sequence, in this node's range)
        EXECUTE 'INSERT INTO ' || pymem._local_shard('pymem.change_outbox', v_c->0->>1)
             || ' (project_id, shard_key, id, kind, op, subject, keys, rows) OVERRIDING SYSTEM VALUE SELECT e->>0, e->>1, '
                'pg_catalog.nextval(pg_catalog.pg_get_serial_sequence(''pymem.change_outbox'', ''id'')), $1, $2, e->>2, e->3, '
                '(e->>4)::integer FROM pg_catalog.jsonb_array_elements($3) AS e' USING v_kind, v_op, v_c;
    END IF;
    FOR v_channel IN SELECT ch.channel FROM pymem.change_channels AS ch
                      WHERE ch.project_id IN (SELECT e->>0 FROM pg_catalog.jsonb_array_elements(v_c) AS e) LOOP
        CONTINUE WHEN pg_catalog.strpos(v_sent, v_kind || ':' || v_channel || ';') > 0;
        v_sent := v_sent || v_kind || ':' || v_channel || ';';
        IF pg_catalog.citus_is_coordinator() THEN
            PERFORM pg_catalog.pg_notify(v_channel, pg_catalog.jsonb_build_object('kind', v_kind)::text);
        ELSE
            PERFORM pg_catalog.run_command_on_coordinator(pg_catalog.format('SELECT pg_catalog.pg_notify(%L, %L)', v_channel,
                                                            pg_catalog.jsonb_build_object('kind', v_kind)::text));
        END IF;
    END LOOP;
    PERFORM pg_catalog.set_config('pymem.feed_notified', v_sent, true);
    RETURN NULL;
END;
$$;

-- the triggers on a cluster that this file dropped before 0050 (created disabled, as 0042 does)
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT v.t, v.n, v.ev, v.tt FROM (VALUES
                 ('facts', 'facts_changes_add', 'INSERT', 'NEW'), ('facts', 'facts_changes_update', 'UPDATE', 'NEW'),
                 ('facts', 'facts_changes_delete', 'DELETE', 'OLD'), ('messages', 'messages_changes_add', 'INSERT', 'NEW'),
                 ('messages', 'messages_changes_delete', 'DELETE', 'OLD'),
                 ('store_entries', 'store_entries_changes_add', 'INSERT', 'NEW'),
                 ('store_entries', 'store_entries_changes_update', 'UPDATE', 'NEW'),
                 ('store_entries', 'store_entries_changes_delete', 'DELETE', 'OLD'),
                 ('erasures', 'erasures_changes_add', 'INSERT', 'NEW'), ('threads', 'threads_changes_summary', NULL, NULL))
               AS v(t, n, ev, tt)
              WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS g WHERE g.tgname = v.n
                                   AND g.tgrelid = pg_catalog.to_regclass('pymem.' || v.t)) LOOP
        IF r.ev IS NULL THEN
            CREATE TRIGGER threads_changes_summary AFTER UPDATE OF summary ON pymem.threads
                FOR EACH ROW WHEN (OLD.summary IS DISTINCT FROM NEW.summary) EXECUTE FUNCTION pymem._changes_log();
        ELSE
            EXECUTE pg_catalog.format('CREATE TRIGGER %I AFTER %s ON pymem.%I REFERENCING %s TABLE AS changed '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION pymem._changes_log()', r.n, r.ev, r.t, r.tt);
        END IF;
        EXECUTE pg_catalog.format('ALTER TABLE pymem.%I DISABLE TRIGGER %I', r.t, r.n);
    END LOOP;
END;
$$;
-- turning the feed on or off alters the triggers of distributed tables
ALTER FUNCTION pymem.change_feed_configure(boolean) SET citus.enable_unsafe_triggers = on;
-- ---- end of the change feed ----

-- Tables, then functions: only what is not yet placed.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT d.t, d.method, d.key FROM pymem._citus_tables() AS d(t, method, key)
              WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS p
                                 WHERE p.logicalrelid = d.t::pg_catalog.regclass) LOOP
        IF r.method = 'reference' THEN
            PERFORM pg_catalog.create_reference_table(r.t::pg_catalog.regclass);
        ELSIF r.t = 'pymem.threads' THEN
            PERFORM pg_catalog.create_distributed_table(r.t::pg_catalog.regclass, r.key);
        ELSE
            PERFORM pg_catalog.create_distributed_table(r.t::pg_catalog.regclass, r.key, colocate_with => 'pymem.threads');
        END IF;
    END LOOP;
    FOR r IN SELECT f.fn, f.arg FROM pymem._citus_functions() AS f(fn, arg, idx)
              WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_object AS o
                                 WHERE o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND o.objid = f.fn
                                   AND o.distribution_argument_index = f.idx) LOOP
        PERFORM pg_catalog.create_distributed_function(r.fn, r.arg, colocate_with => 'pymem.threads');
    END LOOP;
    -- every other pymem function on every node too (the delegated calls run them on the workers;
    -- functions created in the same transaction as the first distribution are not propagated
    -- by themselves)
    FOR r IN SELECT p.oid::pg_catalog.regprocedure AS fn FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                                 WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
                                   AND d.deptype = 'e')
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_object AS o
                                 WHERE o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND o.objid = p.oid) LOOP
        PERFORM pg_catalog.create_distributed_function(r.fn);
    END LOOP;
END;
$$;

-- tenant_allowed and _tenant_allowed_bound read tenant_roles from the node's own placement of it
-- (a reference table: one shard, a copy on every node, written by Citus on all of them in the
-- same transaction), by the shard's name written in here: Citus routes every statement on a
-- Citus table, even a local read inside a delegated call, with a deparse, parse and plan per
-- execution (~0.025 ms on the test cluster, against ~0.003 ms for the same read of the shard,
-- which PostgreSQL plans once per session), and the policies call tenant_allowed 50-60 times
-- per context_read or turn_record (bench/reports/2026-12-04-citus-cost). _text_search_config and
-- _embedder_dimension read text_search and embedders the same way (two and four reads per
-- turn_record, two per fact_add). A node without a placement (a coordinator that is not in the
-- metadata) reads the table through Citus as before.
DO $do$
DECLARE
    v_shard text := (SELECT pg_catalog.shard_name(s.logicalrelid, s.shardid) FROM pg_catalog.pg_dist_shard AS s
                      WHERE s.logicalrelid = 'pymem.tenant_roles'::pg_catalog.regclass);
BEGIN
    IF v_shard IS NULL THEN
        RETURN;
    END IF;
    EXECUTE pg_catalog.format($f$
CREATE OR REPLACE FUNCTION pymem.tenant_allowed(project_id text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET citus.allow_nested_distributed_execution = on
AS $b$
BEGIN
    IF pg_catalog.to_regclass(%1$L) IS NOT NULL THEN
        RETURN NOT EXISTS (SELECT 1 FROM %2$s AS t) OR pymem._tenant_allowed_bound(tenant_allowed.project_id);
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM pymem.tenant_roles AS t) OR pymem._tenant_allowed_bound(tenant_allowed.project_id);
END;
$b$$f$, v_shard, v_shard);
    EXECUTE pg_catalog.format($f$
CREATE OR REPLACE FUNCTION pymem._tenant_allowed_bound(project_id text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $b$
BEGIN
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user) THEN
        RETURN true;
    END IF;
    IF pg_catalog.to_regclass(%1$L) IS NOT NULL THEN
        RETURN NOT EXISTS (SELECT 1 FROM %2$s AS t
                            WHERE pymem._role_member(t.role_name))
            OR EXISTS (SELECT 1 FROM %2$s AS t
                        WHERE t.project_id = _tenant_allowed_bound.project_id
                          AND pymem._role_member(t.role_name));
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM pymem.tenant_roles AS t
                        WHERE pymem._role_member(t.role_name))
        OR EXISTS (SELECT 1 FROM pymem.tenant_roles AS t
                    WHERE t.project_id = _tenant_allowed_bound.project_id
                      AND pymem._role_member(t.role_name));
END;
$b$$f$, v_shard, v_shard);
END;
$do$;

DO $do$
DECLARE
    v_text_search text := (SELECT pg_catalog.shard_name(s.logicalrelid, s.shardid) FROM pg_catalog.pg_dist_shard AS s
                            WHERE s.logicalrelid = 'pymem.text_search'::pg_catalog.regclass);
    v_embedders text := (SELECT pg_catalog.shard_name(s.logicalrelid, s.shardid) FROM pg_catalog.pg_dist_shard AS s
                          WHERE s.logicalrelid = 'pymem.embedders'::pg_catalog.regclass);
BEGIN
    IF v_text_search IS NOT NULL THEN
        EXECUTE pg_catalog.format($f$
CREATE OR REPLACE FUNCTION pymem._text_search_config(project_id text)
RETURNS regconfig
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $b$
BEGIN
    IF pg_catalog.to_regclass(%1$L) IS NOT NULL THEN
        RETURN (SELECT t.config::pg_catalog.regconfig FROM %2$s AS t WHERE t.project_id = _text_search_config.project_id);
    END IF;
    RETURN (SELECT t.config::pg_catalog.regconfig FROM pymem.text_search AS t WHERE t.project_id = _text_search_config.project_id);
END;
$b$$f$, v_text_search, v_text_search);
    END IF;
    IF v_embedders IS NOT NULL THEN
        EXECUTE pg_catalog.format($f$
CREATE OR REPLACE FUNCTION pymem._embedder_dimension(p_project_id text, p_name text)
RETURNS integer
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $b$
BEGIN
    IF pg_catalog.to_regclass(%1$L) IS NOT NULL THEN
        RETURN (SELECT e.dimension FROM %2$s AS e WHERE e.project_id = p_project_id AND e.name = p_name);
    END IF;
    RETURN (SELECT e.dimension FROM pymem.embedders AS e WHERE e.project_id = p_project_id AND e.name = p_name);
END;
$b$$f$, v_embedders, v_embedders);
    END IF;
END;
$do$;

-- 7. Citus's local plan cache grows without bound before 13.5 on 13.x and before 14.3 on 14.x
--    (citusdata/citus#8783, fixed upstream by #8824): a statement planned generically
--    whose shard is on the node (every statement of a delegated call) misses the cache on
--    every execution, is planned again and adds another plan to it. On an unpatched 14.0.1 a
--    worker's backend grew from 50 MB to 913 MB over 3,000 context_read calls (~300 kB a call),
--    never given back while the coordinator keeps its connection. Where it leaks, every PL/pgSQL
--    function of pymem plans its statements for each call (force_custom_plan: no generic plan,
--    so nothing is cached); measured 0.91-1.19x per call on 14.0.1
--    (bench/reports/2026-12-04-citus-cost, "The local plan cache"). A fixed Citus keeps the
--    functions as the API files declare them (the refresh re-created them before this file ran).
--    Which Citus leaks is decided by pymem.migration_citus_plan_every_call() (bootstrap.sql):
--    the operator's pymem.citus_plan_every_call (on / off / auto), else the version (14.3+,
--    13.5+: fixed), else the cache's behaviour on every node that holds a shard, probed by
--    migrate before this transaction (a patched 14.0.1 still reports 14.0.1), else (nothing to
--    probe yet) plan every call; migrate probes again after this transaction commits and
--    applies the answer (docs/scaling-out.md "Which Citus").
DO $do$
BEGIN
    PERFORM pymem.migration_citus_plan_cache_apply();
END;
$do$;
