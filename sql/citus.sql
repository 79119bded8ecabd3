-- citus.sql: pymem on a Citus coordinator (docs/scaling-out.md). Every migrate runs it in the API
-- refresh's transaction, after the API files and before grants.sql, only with the citus extension.
-- Idempotent. In order: the pymem roles on every worker, the owner's may log in (Citus connects as
-- it); the overrides below; policies without the sub-select; the tables and functions placed
-- (colocated by user, subject or store key: a delegated call runs whole on the worker of its key);
-- the node's own copies of the reference tables read by name; step 7, per-call planning if needed.
--
-- Overrides: every function whose Citus form differs from its plain one in sql/api (a row: one or more sharing how
-- and why; tests/sql/test_citus_overrides.py checks this table against the statements below, both ways). How: body
-- = a second body written here (with the plain function's signature, read from the catalog); derived = the plain
-- body as the catalog holds it, with the edits listed below (an edit that no longer matches stops the migrate);
-- set = ALTER FUNCTION of the plain one; copy = the plain body over the shared_* reference tables, as
-- _shared_<name>; own = a function only Citus has. Figures: docs/scaling-out.md "What the Citus layer replaces".
-- | function | how | what Citus refuses or needs | why not the plain body (measured) |
-- | --- | --- | --- | --- |
-- | current_tenant | body, set | a per-user call not delegated reaches a worker without the tenant: RLS answers no rows | raises 0A000 there; the plain body must stay SQL that inlines into the policies |
-- | tenant_allowed | set, derived | the policies call it on shards: a nested read of a reference table; a read through Citus is planned per execution | reads the node's own shard of tenant_roles: 0.003 vs 0.025 ms a read, 50-60 reads a call |
-- | _tenant_allowed_bound | derived | as tenant_allowed | as tenant_allowed |
-- | _text_search_config | set, derived | as tenant_allowed, for text_search | two reads a turn_record, two a fact_add |
-- | _embedder_dimension | derived | as tenant_allowed, for embedders | four reads a turn_record |
-- | _tenant_enter | set, derived | set_config stays on its node; SET LOCAL is sent after the BEGIN of every worker transaction | needed for RLS on the workers |
-- | context_read | set | its force_generic_plan reaches _recall_ranked, which Citus refuses to plan generically | needed to run at all |
-- | facts_newest | derived | a view takes Citus's full router planner, a one-table read its fast path | 0.19 ms a call on the worker |
-- | _window | derived | refuses the parameterised sub-select with ORDER BY ... LIMIT ("could not create distributed plan") | needed to run at all |
-- | _recall_rows | body | the plain body, inlined into the ranking statement, makes Citus plan that in full per call | ~3.5 ms of a 13.4 ms context_read on the worker |
-- | _fact_candidates | body | the join of facts, vectors and lexemes takes the full router planner | ~0.8 ms a context_read on the worker |
-- | _local_shard | body | the colocated shard of a triggering shard is a plain table on the node | ~0.1 ms a statement against one Citus routes |
-- | _fact_lexemes_add | body, set | a query joining the transition table ("unrecognized RTE kind: 7") | INSERT ... SELECT took the coordinator path: 0.56 ms of a 1.7 ms fact_add |
-- | _message_lexemes_add | body, set | as _fact_lexemes_add | INSERT ... SELECT of postings: 1.8 ms of a 5.0 ms turn; the registry's = ANY 0.25 ms a turn |
-- | _shared_facts_sync | own | agent and project facts are read from every worker: copies in reference tables | plain: no copies, nothing calls it |
-- | fact_add, facts_add_many, fact_embeddings_put, fact_supersede, fact_forget, facts_forget, _fact_restate, _fact_history_expire, _fact_expired_free, _learned_cap, purge, text_search_configure | derived | as _shared_facts_sync: each write of agent or project facts copies what it changed | plain: no copies |
-- | _message_insert, _store_put, store_messages_append, _store_protections_set, summary_claim, summary_commit, text_search_configure, _fact_expired_free, _learned_cap | derived | clock_timestamp() in ON CONFLICT DO UPDATE or UPDATE, now() beside a column in a DELETE | needed to run at all; plain: the calls, no variable |
-- | _facts_insert_many | body | a lateral outer join on distributed tables | facts_add_many falls back to fact_add per element |
-- | _facts_for_context | body, copy | agent and project facts live on another worker | 'user' facts: the plain body (_user_facts_for_context); others: the copies |
-- | _facts_newest, _facts_at, _scope_fact_candidates, _fact_candidates, _facts_ranked | copy | as _facts_for_context | read by _shared_facts_for_context (_fact_candidates copied before its body replaces it) |
-- | _changes_log | body, set | the feed's triggers fire on the shards, far from pymem.changes and its counter | keys to the colocated change_outbox shard, published by changes_since; a notification sent to the coordinator |
-- | change_feed_configure | set | enabling a trigger of a distributed table (citus.enable_unsafe_triggers) | needed to run at all |
SET LOCAL citus.enable_unsafe_triggers = on;  -- the lexeme statement triggers: see below
SET LOCAL citus.multi_shard_modify_mode = 'sequential';  -- DDL after DDL in one transaction

DO $$
DECLARE
    v_roles text[] := ARRAY(SELECT coalesce(NULLIF(pg_catalog.current_setting('pymem.' || k, true), ''),
                                            (SELECT c.value FROM pymem.config AS c WHERE c.key = k), 'pymem_' || pg_catalog.split_part(k, '_', 1))
                              FROM pg_catalog.unnest(ARRAY['owner_role', 'app_role', 'reader_role']) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
    v_failed text;
BEGIN
    -- a role here already (a plain database on this server made it: nothing propagated) is made
    -- where a worker lacks it, with its attributes here (issue 57); a new one Citus propagates
    SELECT pg_catalog.string_agg(w.nodename || ':' || w.nodeport || ' ' || w.result, '; ') INTO v_failed
      FROM pg_catalog.pg_roles AS r CROSS JOIN LATERAL pg_catalog.run_command_on_workers(pg_catalog.format(
           'DO $r$ BEGIN PERFORM pg_catalog.set_config(''citus.enable_create_role_propagation'', ''off'', true); '
           'IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %L) THEN CREATE ROLE %I %s CONNECTION LIMIT %s; END IF; '
           'EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $r$', r.rolname, r.rolname,
           pg_catalog.array_to_string(ARRAY(SELECT CASE WHEN a.v THEN '' ELSE 'NO' END || a.n FROM unnest(
               ARRAY[r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin, r.rolreplication, r.rolbypassrls],
               ARRAY['SUPERUSER', 'INHERIT', 'CREATEROLE', 'CREATEDB', 'LOGIN', 'REPLICATION', 'BYPASSRLS']) AS a(v, n)), ' '), r.rolconnlimit)) AS w
     WHERE r.rolname = ANY (v_roles) AND NOT w.success;
    IF v_failed IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: the pymem roles could not be created on every worker: %', v_failed;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = v_roles[1]) THEN
        EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_roles[1]);  -- as grants.sql would, just after
    END IF;
    -- every time: Citus propagates it to every worker (one made NOLOGIN by another database's too)
    EXECUTE pg_catalog.format('ALTER ROLE %I LOGIN', v_roles[1]);
END;
$$;

-- The copies (how = copy): context_read's reads of facts with the tables and calls renamed; the
-- plain _facts_for_context stays as _user_facts_for_context (its Citus body dispatches below).
SELECT pymem.migration_types_path();  -- the functions below name pgvector's type

DO $$
DECLARE
    v_fn regproc;
    v_src text;
BEGIN
    FOREACH v_fn IN ARRAY ARRAY['pymem._facts_newest'::pg_catalog.regproc, 'pymem._facts_at'::pg_catalog.regproc,
                                'pymem._scope_fact_candidates'::pg_catalog.regproc, 'pymem._fact_candidates'::pg_catalog.regproc,
                                'pymem._facts_ranked'::pg_catalog.regproc, 'pymem._facts_for_context'::pg_catalog.regproc] LOOP
        v_src := pg_catalog.pg_get_functiondef(v_fn);
        IF v_fn = 'pymem._facts_for_context'::pg_catalog.regproc THEN
            EXECUTE pg_catalog.regexp_replace(v_src, '\mpymem\._facts_for_context\(', 'pymem._user_facts_for_context(');
        END IF;
        v_src := pg_catalog.regexp_replace(v_src, '\mpymem\.(facts|fact_embeddings|fact_lexemes|active_facts)\M',
                                           'pymem.shared_\1', 'g');
        EXECUTE pg_catalog.regexp_replace(v_src, '\mpymem\.(_facts_newest|_facts_at|_scope_fact_candidates|_fact_candidates|_facts_ranked|_facts_for_context)\(',
                                          'pymem._shared\1(', 'g');
    END LOOP;
END;
$$;

-- _shared_facts_sync(project_id, scope, scope_id, ids) (how = own): the copies of a subject's agent or project
-- facts made again ('*': every subject, or scope; ids: only those facts). Their writers call it (derived bodies
-- below), not triggers on the shards: a reference table written from a shard crashed a Citus 14.0.1 worker.
CREATE OR REPLACE FUNCTION pymem._shared_facts_sync(p_project_id text, p_scope text, p_scope_id text, p_ids bigint[] DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pymem, pg_temp
AS $b$
DECLARE
    v_table text;
    v_where text := pg_catalog.format('t.project_id = %L AND t.scope <> %L', p_project_id, 'user')
        || CASE WHEN p_scope <> '*' THEN pg_catalog.format(' AND t.scope = %L', p_scope) ELSE '' END
        || CASE WHEN p_scope_id <> '*' THEN pg_catalog.format(' AND t.scope_id = %L', p_scope_id) ELSE '' END;
    v_ids text := CASE WHEN p_ids IS NOT NULL THEN pg_catalog.format(' = ANY (%L::bigint[])', p_ids) END;
    v_rows text;
BEGIN
    IF pg_catalog.cardinality(p_ids) = 0 THEN RETURN; END IF;
    FOREACH v_table IN ARRAY ARRAY['fact_embeddings', 'fact_lexemes', 'facts'] LOOP
        EXECUTE pg_catalog.format('DELETE FROM pymem.%I AS t WHERE %s', 'shared_' || v_table,
                                  v_where || coalesce(CASE v_table WHEN 'facts' THEN ' AND t.id' ELSE ' AND t.fact_id' END || v_ids, ''));
    END LOOP;
    FOREACH v_table IN ARRAY ARRAY['facts', 'fact_embeddings', 'fact_lexemes'] LOOP
        -- INSERT ... VALUES of row literals: INSERT ... SELECT into a reference table is a COPY, which RLS refuses
        EXECUTE pg_catalog.format('SELECT pg_catalog.string_agg(pg_catalog.format(%L, t::text), %L) FROM pymem.%I AS t WHERE %s',
                                  '((%L::pymem.shared_' || v_table || ').*)', ',', v_table,
                                  v_where || coalesce(CASE v_table WHEN 'facts' THEN ' AND t.id' ELSE ' AND t.fact_id' END || v_ids, ''))
           INTO v_rows;
        IF v_rows IS NOT NULL THEN
            EXECUTE pg_catalog.format('INSERT INTO pymem.%I VALUES %s ON CONFLICT DO NOTHING', 'shared_' || v_table, v_rows);
        END IF;
    END LOOP;
END;
$b$;

-- The derived bodies (table above): each plain body with these regular-expression edits ({p}: 'name.' or 'p_'). A write
-- of agent or project facts copies what it changed before it returns (anchored on its end); v_citus_now and
-- v_citus_clock_timestamp: the value at the call's start, where Citus refuses the call itself.
DO $do$
DECLARE
    r record;
    v_def text;
    v_new text;
    v_sync text := 'IF %s{p}scope <> ''user'' THEN PERFORM pymem._shared_facts_sync({p}project_id, {p}scope, {p}scope_id%s); END IF; \1';
    v_end text := '(RETURN v_count;\s*END;\s*\$function\$)';
    v_time text := 'pg_catalog\.(now|clock_timestamp)\(\)';
    v_upd text := '(updated_at = )pg_catalog\.(clock_timestamp)\(\)';
BEGIN
    FOR r IN SELECT * FROM (VALUES
        ('pymem.fact_add'::pg_catalog.regproc, ARRAY['(RETURN NEXT;\s*END;\s*\$function\$)'],
         ARRAY[pg_catalog.format(v_sync, '(v_created OR {p}embedding IS NOT NULL OR v_expires IS NOT NULL) AND ', ', ARRAY[v_id]')]),
        ('pymem.facts_add_many'::pg_catalog.regproc, ARRAY['(RETURN QUERY [^;]*;\s*END;\s*\$function\$)'], ARRAY['IF {p}scope <> ''user'' THEN '
         'PERFORM pymem._shared_facts_sync({p}project_id, {p}scope, s.id, s.ids) FROM (SELECT u.s AS id, pg_catalog.array_agg(DISTINCT u.id) '
         'AS ids FROM ROWS FROM (pg_catalog.unnest({p}scope_ids), pg_catalog.unnest(v_ids)) AS u(s, id) GROUP BY u.s) AS s; END IF; \1']),
        ('pymem.fact_embeddings_put'::pg_catalog.regproc, ARRAY[v_end], ARRAY[pg_catalog.format(v_sync, 'v_count > 0 AND ', ', {p}ids')]),
        ('pymem.fact_supersede'::pg_catalog.regproc, ARRAY['(RETURN ROW\(v_new, v_created\)::pymem\.fact_successor;)'],
         ARRAY[pg_catalog.format(v_sync, '', ', ARRAY[v_old.id, v_new]')]),
        ('pymem.fact_forget'::pg_catalog.regproc, ARRAY[v_end], ARRAY[pg_catalog.format(v_sync, '', '')]), ('pymem.facts_forget'::pg_catalog.regproc, ARRAY[v_end], ARRAY[pg_catalog.format(v_sync, '', '')]),
        ('pymem._fact_restate'::pg_catalog.regproc, ARRAY['(RETURN NEXT;\s*END;\s*\$function\$)'], ARRAY[pg_catalog.format(v_sync, '', ', ARRAY[v_old.id, v_new]')]),
        ('pymem._fact_history_expire'::pg_catalog.regproc, ARRAY['(END;\s*\$function\$)'], ARRAY[pg_catalog.format(v_sync, 'v_ids IS NOT NULL AND ', ', v_ids')]),
        ('pymem._fact_expired_free'::pg_catalog.regproc, ARRAY['(RETURN FOUND;)', v_time], ARRAY[pg_catalog.format(v_sync, 'FOUND AND ', ', ARRAY[p_id]'), 'v_citus_\1']),
        ('pymem._learned_cap'::pg_catalog.regproc, ARRAY['(RETURN FOUND;)', v_time], ARRAY[pg_catalog.format(v_sync, 'FOUND AND ', ''), 'v_citus_\1']),
        ('pymem.purge'::pg_catalog.regproc, ARRAY['(DELETE FROM pymem\.facts AS f[^;]*;\s*GET DIAGNOSTICS v_count = ROW_COUNT;)'],
         ARRAY['\1 PERFORM pymem._shared_facts_sync({p}project_id, s.scope, s.scope_id) FROM (SELECT DISTINCT c.scope, c.scope_id '
               'FROM pymem.shared_facts AS c WHERE c.project_id = {p}project_id AND c.id = ANY (v_ids)) AS s;']),
        ('pymem.text_search_configure'::pg_catalog.regproc, ARRAY['(RETURN v_messages [^;]*;)', v_upd],
         ARRAY['PERFORM pymem._shared_facts_sync({p}project_id, ''*'', ''*''); \1', '\1v_citus_\2']),
        ('pymem._message_insert'::pg_catalog.regproc, ARRAY[v_upd], ARRAY['\1v_citus_\2']), ('pymem._store_put'::pg_catalog.regproc, ARRAY[v_upd], ARRAY['\1v_citus_\2']),
        ('pymem.store_messages_append'::pg_catalog.regproc, ARRAY[v_upd], ARRAY['\1v_citus_\2']), ('pymem._store_protections_set'::pg_catalog.regproc, ARRAY[v_upd], ARRAY['\1v_citus_\2']),
        ('pymem.summary_claim'::pg_catalog.regproc, ARRAY[v_time], ARRAY['v_citus_\1']), ('pymem.summary_commit'::pg_catalog.regproc, ARRAY[v_time], ARRAY['v_citus_\1']),
        ('pymem._tenant_enter'::pg_catalog.regproc,
         ARRAY['v_current := pg_catalog\.set_config\(''pymem\.tenant'', (''p:'' \|\| project_id), true\);'],
         ARRAY['EXECUTE pg_catalog.format(''SET LOCAL pymem.tenant = %L'', \1);']),
        ('pymem.facts_newest'::pg_catalog.regproc,  -- the view's predicates on its table
         ARRAY['FROM pymem\.active_facts AS f\s+WHERE'],
         ARRAY['FROM pymem.facts AS f WHERE pymem._fact_live(f, pg_catalog.now()) '
               'AND pymem._fact_valid(f.valid_from, f.valid_to, pg_catalog.now()) AND']),
        ('pymem._window'::pg_catalog.regproc,  -- the same query with the values written in
         ARRAY[' LANGUAGE sql', 'AS \$function\$', '(= |LIMIT )p_\w+', ';\s*\$function\$'],
         ARRAY[' LANGUAGE plpgsql', 'AS $function$ BEGIN RETURN QUERY EXECUTE pg_catalog.format($q$', '\1%L',
               '$q$, p_project_id, p_user_id, p_thread_id, p_max); END; $function$'])) AS d(fn, patterns, edits) LOOP
        v_def := pg_catalog.pg_get_functiondef(r.fn);
        FOR i IN 1 .. pg_catalog.cardinality(r.patterns) LOOP
            v_new := pg_catalog.regexp_replace(v_def, r.patterns[i], pg_catalog.replace(r.edits[i], '{p}', CASE WHEN v_def ~ '^[^\n]*\(p_'
                                               THEN 'p_' ELSE pg_catalog.regexp_replace(r.fn::text, '^.*\.', '') || '.' END), 'g');
            IF v_new = v_def THEN
                RAISE EXCEPTION 'citus.sql: the plain body of % no longer matches %', r.fn, r.patterns[i];
            END IF;
            v_def := v_new;
        END LOOP;
        IF v_def ~ 'v_citus_' THEN  -- (PL/pgSQL takes a DECLARE in front of another)
            v_def := pg_catalog.regexp_replace(v_def, '(AS \$function\$\s*(#variable_conflict \w+\s*)?)', E'\\1DECLARE v_citus_now timestamptz := pg_catalog.now(); v_citus_clock_timestamp timestamptz := pg_catalog.clock_timestamp();\n');
        END IF;
        EXECUTE v_def;
    END LOOP;
END;
$do$;

-- The second bodies (how = body): each replaces its plain body, in the language given, and keeps its signature,
-- volatility, security and settings (read from the catalog). Settings on top: the ALTER FUNCTION lines after.
DO $do$
DECLARE
    r record;
    v_def text;
BEGIN
    FOR r IN SELECT * FROM (VALUES
    -- current_tenant: an undelegated call's reads reach the worker without the tenant (no transaction block,
    -- so no SET LOCAL): on Citus's internal connection that raises 0A000 instead of answering no rows.
    ('pymem.current_tenant'::pg_catalog.regproc, 'plpgsql', $b$
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
$b$),
    -- _recall_rows: the rows _recall_ranked ranks, read by single-table statements (Citus's fast path on the local
    -- shard) into arrays, so that the ranking statement names no Citus table. Vectors stored before 0006 (rare)
    -- take their lexemes in a join; a metadata filter reads the keys of the user's messages that pass it.
    ('pymem._recall_rows'::pg_catalog.regproc, 'plpgsql', $b$
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
$b$),
    -- _local_shard(table, key): the table's shard for a key when that shard is on this node, else the
    -- table. The lexeme triggers fire on a shard of facts or messages, whose colocated shards are on
    -- the same node, moved and locked with it: they write them as plain tables (with the same RLS).
    ('pymem._local_shard'::pg_catalog.regproc, 'plpgsql', $b$
DECLARE
    v_name text := pg_catalog.shard_name(p_table, pg_catalog.get_shard_id_for_distribution_column(p_table, p_key));
BEGIN
    IF pg_catalog.to_regclass(v_name) IS NOT NULL THEN
        RETURN v_name;
    END IF;
    RETURN p_table::text;
END;
$b$),
    -- The lexeme statement triggers: Citus cannot plan a query that joins the transition table
    -- ("unrecognized RTE kind: 7"). Read it alone into arrays, the project's configuration in its
    -- own statement, then insert from the arrays into the colocated shard (_local_shard).
    ('pymem._fact_lexemes_add'::pg_catalog.regproc, 'plpgsql', $b$
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
    -- the rows as literal VALUES (an INSERT ... SELECT took Citus's coordinator path); the
    -- trigger's rows are of one shard, so v_i[1] names their colocated shard
    EXECUTE 'INSERT INTO ' || pymem._local_shard('pymem.fact_lexemes', v_i[1])
         || ' (project_id, scope, scope_id, fact_id, lexemes, tokens) VALUES '
         || (SELECT pg_catalog.string_agg(pg_catalog.format('(%L, %L, %L, %s, %L::tsvector, %s)', u.p, u.s, u.i, u.id,
                                                           v.lexemes, pymem._lexeme_tokens(v.lexemes)), ', ')
               FROM unnest(v_p, v_s, v_i, v_id, v_content) AS u(p, s, i, id, content)
              CROSS JOIN LATERAL (SELECT pymem._lexemes(v_config, u.content) AS lexemes OFFSET 0) AS v);
    RETURN NULL;
END;
$b$),
    ('pymem._message_lexemes_add'::pg_catalog.regproc, 'plpgsql', $b$
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
    -- colocated shard when the statement wrote one user's messages (all but a multi-user import)
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
$b$),
    -- _facts_insert_many: finds nothing (Citus cannot plan the plain lateral outer join), and facts_add_many adds
    -- every element with fact_add in the same transaction: the same checks, results and all-or-nothing.
    ('pymem._facts_insert_many'::pg_catalog.regproc, 'sql', $b$
    SELECT pg_catalog.array_fill(NULL::bigint, ARRAY[pg_catalog.cardinality(p_contents)]),
           pg_catalog.array_fill(false, ARRAY[pg_catalog.cardinality(p_contents)]);
$b$),
    ('pymem._facts_for_context'::pg_catalog.regproc, 'plpgsql', $b$
BEGIN
    IF p_scope = 'user' THEN
        RETURN QUERY SELECT * FROM pymem._user_facts_for_context(p_project_id, p_scope, p_scope_id, p_max, p_query,
                                                                p_embedder, p_text, p_lw, p_valid_at, p_as_of);
    ELSE
        RETURN QUERY SELECT * FROM pymem._shared_facts_for_context(p_project_id, p_scope, p_scope_id, p_max, p_query,
                                                                  p_embedder, p_text, p_lw, p_valid_at, p_as_of);
    END IF;
END;
$b$),
    -- _fact_candidates (facts_search's and context_read's user facts): the subject's active facts
    -- (active_facts' predicates on the table, as facts_newest), vectors and lexemes as three
    -- single-table reads into arrays, joined by hash in a statement that names no Citus table.
    -- After the copies above, which derive from the plain body.
    ('pymem._fact_candidates'::pg_catalog.regproc, 'plpgsql', $b$
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
       AND pymem._fact_live(f, pg_catalog.now()) AND pymem._fact_valid(f.valid_from, f.valid_to, pg_catalog.now());
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
$b$),
    -- _changes_log (docs/scaling-out.md "The change feed on a cluster"): on a worker's shard, the statement's
    -- changes (keys, never content) go to the colocated shard of change_outbox, which changes_since publishes
    -- on the coordinator (_changes_claim); the project's channel (change_channels) is notified on the coordinator,
    -- once per transaction, kind and channel, before the commit. erasures logs only on the coordinator.
    ('pymem._changes_log'::pg_catalog.regproc, 'plpgsql', $b$
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
$b$)) AS d(fn, lang, body) LOOP
        v_def := pg_catalog.regexp_replace(pg_catalog.pg_get_functiondef(r.fn), ' LANGUAGE \w+', ' LANGUAGE ' || r.lang);
        EXECUTE pg_catalog.left(v_def, pg_catalog.strpos(v_def, 'AS $function$') + 12) || r.body || '$function$';
    END LOOP;
END;
$do$;

-- Settings Citus needs on top of the bodies above (how = set).
ALTER FUNCTION pymem.current_tenant SET search_path = pg_catalog, pymem, pg_temp;  -- PL/pgSQL: it no longer inlines
ALTER FUNCTION pymem.tenant_allowed SET citus.allow_nested_distributed_execution = on;
ALTER FUNCTION pymem._text_search_config SET citus.allow_nested_distributed_execution = on;
ALTER FUNCTION pymem._fact_lexemes_add SET citus.allow_nested_distributed_execution = on;
ALTER FUNCTION pymem._message_lexemes_add SET citus.allow_nested_distributed_execution = on;
ALTER FUNCTION pymem._tenant_enter SET citus.propagate_set_commands = 'local';
ALTER FUNCTION pymem.context_read RESET plan_cache_mode;
ALTER FUNCTION pymem._changes_log SET citus.allow_nested_distributed_execution = on;
ALTER FUNCTION pymem.change_feed_configure SET citus.enable_unsafe_triggers = on;  -- it enables the feed's triggers
SELECT pymem.migration_search_path();

-- The copies of agent and project facts (_shared_facts_sync above): the first distribution fills them
-- with what is there (as a superuser: row-level security hides every row from a role without the
-- tenant). Policies: project_id = current_tenant() without the sub-select (Citus: "Subqueries are
-- not supported in policies on distributed tables"; on a shard the planner still evaluates it once
-- per statement, a One-Time Filter). Then tables and functions: only what is not yet placed.
DO $$
DECLARE
    r record;
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['facts', 'fact_embeddings', 'fact_lexemes'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS p WHERE p.logicalrelid = pg_catalog.to_regclass('pymem.shared_' || v_table));
        EXECUTE pg_catalog.format('INSERT INTO pymem.%I SELECT * FROM pymem.%I AS f WHERE f.scope <> %L AND NOT EXISTS (SELECT 1 FROM pymem.%I)',
                                  'shared_' || v_table, v_table, 'user', 'shared_' || v_table);
    END LOOP;
    FOR r IN SELECT p.tablename FROM pg_catalog.pg_policies AS p
              WHERE p.schemaname = 'pymem' AND p.policyname = 'tenant' AND p.qual LIKE '%SELECT%' LOOP
        EXECUTE pg_catalog.format('DROP POLICY tenant ON pymem.%I', r.tablename);
        EXECUTE pg_catalog.format('CREATE POLICY tenant ON pymem.%I USING (project_id = pymem.current_tenant()) '
                                  'WITH CHECK (project_id = pymem.current_tenant())', r.tablename);
    END LOOP;
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
    -- every other pymem function on every node too (delegated calls run them on the workers; functions
    -- created in the transaction of the first distribution are not propagated by themselves)
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

-- The node's own copies of the reference tables read by their shard's name (a read through Citus
-- is deparsed, parsed and planned per execution; the shard's, once per session), and through
-- Citus where the node has no copy (a coordinator not in the metadata).
DO $do$
DECLARE
    r record;
    v_def text;
    v_inner text;
BEGIN
    FOR r IN SELECT d.fn, d.t, pg_catalog.shard_name(s.logicalrelid, s.shardid) AS shard
               FROM (VALUES ('pymem.tenant_allowed'::pg_catalog.regproc, 'tenant_roles'),
                            ('pymem._tenant_allowed_bound'::pg_catalog.regproc, 'tenant_roles'),
                            ('pymem._text_search_config'::pg_catalog.regproc, 'text_search'),
                            ('pymem._embedder_dimension'::pg_catalog.regproc, 'embedders')) AS d(fn, t)
               JOIN pg_catalog.pg_dist_shard AS s ON s.logicalrelid = ('pymem.' || d.t)::pg_catalog.regclass LOOP
        v_def := pg_catalog.pg_get_functiondef(r.fn);
        IF v_def ~ ' LANGUAGE sql\M' THEN  -- as PL/pgSQL returning the SQL body's value
            v_def := pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.replace(
                         v_def, ' LANGUAGE sql', ' LANGUAGE plpgsql'), 'AS \$function\$', 'AS $function$ BEGIN RETURN ('),
                         ';\s*\$function\$', E'\n); END; $function$');
        END IF;
        v_inner := pg_catalog.substring(v_def, '\$function\$\s*BEGIN(.*)END;\s*\$function\$');
        EXECUTE pg_catalog.replace(v_def, v_inner, pg_catalog.format(
            E' IF pg_catalog.to_regclass(%L) IS NOT NULL THEN%s END IF;\n%s', r.shard,
            pg_catalog.regexp_replace(v_inner, '\mpymem\.' || r.t || '\M', r.shard, 'g'), v_inner));
    END LOOP;
END;
$do$;

-- 7. Citus's local plan cache grows without bound before 13.5 / 14.3 (citusdata/citus#8783): there pymem's PL/pgSQL
--    functions plan each call (bootstrap.sql decides which Citus leaks: docs/scaling-out.md "Which Citus").
SELECT pymem.migration_citus_plan_cache_apply();
