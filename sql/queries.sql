-- queries.sql: every statement the Python package sends, each under a `-- name: NAME` header
-- with a one-line description. pymem/queries.py loads this file once; tests parse each query
-- with sqlglot and qualify it against the migrated schema, so a renamed column or function
-- fails a test instead of a user's call. Parameters use psycopg's %(name)s style.

-- name: migration_lock
-- Serialises migrate runs (psql or Python) across sessions; held until migration_unlock.
SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended('pymem.migrate', 0));

-- name: migration_lock_wait
-- How long migration_lock may wait (lock_timeout, e.g. '60s'; '0' after it is held: migrations themselves never time out).
SELECT pg_catalog.set_config('lock_timeout', %(timeout)s, false);

-- name: migration_lock_holders
-- The sessions holding the migration lock (any role that can connect may take an advisory lock), for the error a waiting migrate raises.
SELECT a.pid, a.usename AS role, a.application_name, a.state, a.backend_start
FROM pg_catalog.pg_locks AS l
JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database())
  AND l.classid = pg_catalog.oid((pg_catalog.hashtextextended('pymem.migrate', 0) >> 32) & 4294967295)
  AND l.objid = pg_catalog.oid(pg_catalog.hashtextextended('pymem.migrate', 0) & 4294967295)
  AND l.objsubid = 1;

-- name: migration_unlock
-- Releases the migration lock taken by migration_lock.
SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended('pymem.migrate', 0));

-- name: migration_pending
-- True when the named migration still has to run; raises PM002 if its file changed.
SELECT pymem.migration_pending(%(name)s, %(checksum)s) AS pending;

-- name: migration_applied
-- Records a migration as applied, inside the migration's own transaction.
SELECT pymem.migration_applied(%(name)s, %(checksum)s, %(version)s);

-- name: migration_session_path
-- Pins this migrate session's search_path before anything else runs: nothing a non-owner may write is on it.
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pymem, pg_temp', false);

-- name: migration_search_path
-- Pins the transaction's search_path to pg_catalog, pymem, pg_temp (migrations, grants).
SELECT pymem.migration_search_path();

-- name: migration_types_path
-- Adds pgvector's schema to the transaction's path while statements that name its type unqualified create objects.
SELECT pymem.migration_types_path();

-- name: migration_vector_functions
-- Renders the pgvector wrappers (pymem._cosine_distance, _vector_dims, _vector_norm) with pgvector's schema written out.
SELECT pymem.migration_vector_functions();

-- name: migration_drop_stale_functions
-- Drops every pymem function this API refresh did not (re)create: old signatures never linger beside new ones.
SELECT pymem.migration_drop_stale_functions() AS dropped;

-- name: migration_citus
-- Whether this database has the citus extension (then every migrate also runs citus.sql).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') AS citus;

-- name: migration_citus_probe
-- On a Citus database, before the API refresh: whether its local plan cache leaks, probed on every node that holds a shard (kept for the session; citus.sql step 7 reads it).
SELECT pymem.migration_citus_probe() AS citus_probe;

-- name: migration_citus_plan_cache_after
-- On a Citus database, after the API refresh: probes again when the first probe could not answer (a fresh cluster) and applies step 7's decision.
SELECT pymem.migration_citus_plan_cache_after() AS citus_plan_cache;

-- name: migration_check_citus
-- On a Citus database: what differs from pymem's distribution (citus.sql), one line each.
SELECT problem FROM pymem.migration_citus_problems() AS problem;

-- name: migration_owner_login
-- Warnings about the owner role logging in without a password (LOGIN, no password, pg_hba.conf trust lines), one line each.
SELECT warning FROM pymem.migration_owner_login() AS warning;

-- name: migration_validate_functions
-- Checks every pymem SQL and PL/pgSQL function body under the pinned path.
SELECT pymem.migration_validate_functions() AS validated;

-- name: migration_check_dependencies
-- Refuses (PM011) to commit when something stored in schema pymem depends on code outside pg_catalog, pymem and extensions.
SELECT pymem.migration_check_dependencies();

-- name: migration_api_applied
-- Records, as the API refresh's last step, the sha256 of the bootstrap, API and grants SQL it applied.
SELECT pymem.migration_api_applied(%(checksum)s);

-- name: migration_api_recorded
-- The sha256 the last completed API refresh recorded (NULL: none has completed).
SELECT (SELECT c.value FROM pymem.config AS c WHERE c.key = 'api_sha256') AS checksum;

-- name: migration_check_grants
-- What differs from the roles, ownership and privileges grants.sql keeps, one line each.
SELECT problem FROM pymem.migration_check_grants() AS problem;

-- name: migration_check_shared
-- Each copy of agent and project facts (shared_*) whose columns differ from its table's, one line each.
SELECT problem FROM pymem.migration_shared_problems() AS problem;

-- name: applied_migrations
-- Every applied migration, oldest first (NULL-safe when the schema does not exist yet).
SELECT m.name, m.checksum, m.pymem_version, m.applied_at
FROM pymem.schema_migrations AS m
ORDER BY m.name;

-- name: schema_exists
-- Whether the migrations table exists yet (a database never migrated has none).
SELECT pg_catalog.to_regclass('pymem.schema_migrations') IS NOT NULL AS present;

-- name: vector_schema
-- The schema pgvector is installed in, or NULL when it is not installed.
SELECT n.nspname AS schema
FROM pg_catalog.pg_extension AS e
JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
WHERE e.extname = 'vector';

-- name: statement_timeout
-- PYMEM_STATEMENT_TIMEOUT_MS for the next statement only, where a transaction pooler refused it as a startup option: sent before the statement in one simple-protocol message, one implicit transaction (transaction-local, so nothing stays on a pooled server connection; pymem.connection.per_call_query).
SELECT pg_catalog.set_config('statement_timeout', %(ms)s, true);

-- name: statement_timeout_source
-- Whether this session's statement timeout came from the connection's startup option (a pooler may take the option and not pass it on).
SELECT s.source = 'client' AS arrived FROM pg_catalog.pg_settings AS s WHERE s.name = 'statement_timeout';

-- name: statement_timeout_off
-- No statement timeout for the rest of this session: before CREATE INDEX CONCURRENTLY on a pooled connection (pymem.recall.recall_indexes), which statement_timeout_reset ends.
SELECT pg_catalog.set_config('statement_timeout', '0', false);

-- name: statement_timeout_reset
-- The session's statement timeout back to what the connection opened with (its startup option).
RESET statement_timeout;

-- name: lock_timeout_local
-- How long this transaction's lock waits may take (lock_timeout, e.g. '10000ms'): pymem.recall.recall_indexes, before recall_index_plan's advisory lock.
SELECT pg_catalog.set_config('lock_timeout', %(timeout)s, true);

-- name: search_path_pin
-- Pins this session's search_path as migrate does (nothing a non-owner may write is on it) before recall_indexes runs its DDL; returns the path it replaced, which search_path_restore puts back.
SELECT s.previous, pg_catalog.set_config('search_path', 'pg_catalog, pymem, pg_temp', false) AS pinned
FROM (SELECT pg_catalog.current_setting('search_path') AS previous OFFSET 0) AS s;

-- name: search_path_restore
-- The session's search_path back to what search_path_pin replaced.
SELECT pg_catalog.set_config('search_path', %(path)s, false);

-- name: citus
-- Whether the database has the citus extension (a Citus coordinator).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') AS citus;

-- name: reader_login
-- pymem serve's PYMEM_READER_DSN check: the session's login role, and every role among it and the roles it is a member of that could write (a superuser, BYPASSRLS, or EXECUTE on a pymem function the reader role may not execute), its own name first; none for a login that is only a reader.
SELECT session_user AS login,
       coalesce(pg_catalog.array_agg(r.rolname::text ORDER BY r.rolname <> session_user, r.rolname), '{}') AS may_write
FROM pg_catalog.pg_roles AS r
WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
  AND (r.rolsuper OR r.rolbypassrls OR EXISTS (
        SELECT 1 FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = 'pymem'::regnamespace
          AND pg_catalog.has_function_privilege(r.oid, p.oid, 'EXECUTE')
          AND NOT pg_catalog.has_function_privilege(%(reader_role)s, p.oid, 'EXECUTE')));

-- name: page_reader_login
-- pymem serve on the embedded server: the login role its reads connect as, created when missing and made a member of the reader role (pymem._page_reader_login; run by the server's superuser).
SELECT pymem._page_reader_login(login => %(login)s) AS login;

-- name: about
-- Schema version, pgvector location and server version as one jsonb object.
SELECT pymem.about() AS about;

-- name: fact_add
-- Add a fact (idempotent); returns its id and whether it was created. Vectors go in binary (the
-- b placeholders here and in every query that sends one): a 384-d vector costs the server
-- ~7 us to read instead of ~31 as text, and the client no float formatting (15 ms instead of 160 per 1,000).
-- The write (pymem.fact_write) goes as one value: psycopg sends a tuple (pymem.facts.Values) as a row literal.
SELECT a.id, a.created FROM pymem.fact_add(
    scope => %(scope)s, scope_id => %(scope_id)s, content => %(content)s, project_id => %(project_id)s,
    write => %(write)s::pymem.fact_write, max_learned => %(max_learned)s::integer, embedding => %(embedding)b,
    embedder => %(embedder)s) AS a;

-- name: fact_lookup
-- The active fact with this content, if any, and whether it has a vector from the embedder (fact_add's checks, no write).
SELECT l.id, l.embedded FROM pymem.fact_lookup(
    scope => %(scope)s, scope_id => %(scope_id)s, content => %(content)s, project_id => %(project_id)s,
    write => %(write)s::pymem.fact_write, max_learned => %(max_learned)s::integer, embedder => %(embedder)s) AS l;

-- name: facts_add_many
-- Add many facts of one scope in one call (bulk, all or nothing); one row per element, in order.
SELECT a.ord, a.id, a.created FROM pymem.facts_add_many(
    scope => %(scope)s, scope_ids => %(scope_ids)s::text[], contents => %(contents)s::text[],
    project_id => %(project_id)s, write => %(write)s::pymem.fact_write, embeddings => %(embeddings)b,
    embedder => %(embedder)s) AS a
 ORDER BY a.ord;

-- name: facts_newest
-- A subject's active facts, newest first.
SELECT f.id, f.project_id, f.scope, f.scope_id, f.content, f.confidence, f.source, f.trace_id, f.metadata,
       f.created_at, f.superseded_by, f.superseded_at, f.expires_at, f.valid_from, f.valid_to
FROM pymem.facts_newest(scope => %(scope)s, scope_id => %(scope_id)s, project_id => %(project_id)s,
                        max_facts => %(max_facts)s::integer) AS f;

-- name: facts_at
-- A subject's facts at a point in time (valid_at: what held then; as_of: what was believed then), newest first.
SELECT f.id, f.project_id, f.scope, f.scope_id, f.content, f.confidence, f.source, f.trace_id, f.metadata,
       f.created_at, f.superseded_by, f.superseded_at, f.expires_at, f.valid_from, f.valid_to
FROM pymem.facts_at(scope => %(scope)s, scope_id => %(scope_id)s, valid_at => %(valid_at)s::timestamptz,
                    as_of => %(as_of)s::timestamptz, project_id => %(project_id)s,
                    max_facts => %(max_facts)s::integer) AS f;

-- name: fact_history
-- A subject's facts including superseded versions, newest first.
SELECT f.id, f.project_id, f.scope, f.scope_id, f.content, f.confidence, f.source, f.trace_id, f.metadata,
       f.created_at, f.superseded_by, f.superseded_at, f.expires_at, f.valid_from, f.valid_to
FROM pymem.fact_history(scope => %(scope)s, scope_id => %(scope_id)s, project_id => %(project_id)s,
                        max_facts => %(max_facts)s::integer) AS f;

-- name: facts_list
-- A subject's active facts, newest first, filtered by metadata, paged after a fact id.
SELECT f.id, f.project_id, f.scope, f.scope_id, f.content, f.confidence, f.source, f.trace_id, f.metadata,
       f.created_at, f.superseded_by, f.superseded_at, f.expires_at, f.valid_from, f.valid_to
FROM pymem.facts_list(scope => %(scope)s, scope_id => %(scope_id)s, project_id => %(project_id)s,
                      metadata => %(metadata)s::jsonb, max_facts => %(max_facts)s::integer,
                      after => %(after)s::bigint) AS f;

-- name: fact_read
-- One fact of a subject by id, active or superseded (no row when the subject has none).
SELECT f.id, f.project_id, f.scope, f.scope_id, f.content, f.confidence, f.source, f.trace_id, f.metadata,
       f.created_at, f.superseded_by, f.superseded_at, f.expires_at, f.valid_from, f.valid_to
FROM pymem.fact_read(scope => %(scope)s, scope_id => %(scope_id)s, id => %(id)s::bigint,
                     project_id => %(project_id)s) AS f;

-- name: fact_chain
-- A fact's history tree (every branch merged into its newest version), predecessors first.
SELECT f.id, f.project_id, f.scope, f.scope_id, f.content, f.confidence, f.source, f.trace_id, f.metadata,
       f.created_at, f.superseded_by, f.superseded_at, f.depth, f.expires_at, f.valid_from, f.valid_to
FROM pymem.fact_chain(scope => %(scope)s, scope_id => %(scope_id)s, id => %(id)s::bigint, project_id => %(project_id)s) AS f;

-- name: fact_get
-- One fact of a project by id, active or superseded (no row when there is none).
SELECT f.id, f.project_id, f.scope, f.scope_id, f.content, f.confidence, f.source, f.trace_id, f.metadata,
       f.created_at, f.superseded_by, f.superseded_at, f.expires_at, f.valid_from, f.valid_to
FROM pymem.fact_get(id => %(id)s::bigint, project_id => %(project_id)s) AS f;

-- name: fact_supersede
-- Retire an active fact (by id or old content) in favour of new content; returns the fact now
-- active and whether it was created (false: merged into an active fact with that content).
SELECT s.id, s.created FROM pymem.fact_supersede(
    scope => %(scope)s, scope_id => %(scope_id)s, new_content => %(new_content)s, id => %(id)s::bigint,
    old_content => %(old_content)s, project_id => %(project_id)s, write => %(write)s::pymem.fact_write,
    embedding => %(embedding)b, embedder => %(embedder)s) AS s;

-- name: fact_forget
-- Delete one fact (by id or content) and the versions it superseded; returns the count.
SELECT pymem.fact_forget(scope => %(scope)s, scope_id => %(scope_id)s, id => %(id)s::bigint, content => %(content)s,
                         project_id => %(project_id)s) AS deleted;

-- name: facts_forget
-- Delete every fact of a subject (or of every subject of the scope with '*'); returns the count.
SELECT pymem.facts_forget(scope => %(scope)s, scope_id => %(scope_id)s, project_id => %(project_id)s) AS deleted;

-- name: facts_unembedded
-- Active facts of a subject that lack a vector from this embedder.
SELECT u.id, u.content FROM pymem.facts_unembedded(
    scope => %(scope)s, scope_id => %(scope_id)s, embedder => %(embedder)s, project_id => %(project_id)s,
    max_facts => %(max_facts)s::integer) AS u;

-- name: fact_embeddings_put
-- Store a batch of vectors for a subject's facts.
SELECT pymem.fact_embeddings_put(
    scope => %(scope)s, scope_id => %(scope_id)s, embedder => %(embedder)s, ids => %(ids)s::bigint[],
    embeddings => %(embeddings)b, project_id => %(project_id)s) AS stored;

-- name: fact_duplicates
-- Pairs of a subject's active facts that say nearly the same thing (vector similarity or word overlap), most alike first: the fact to keep and the one to merge into it.
SELECT d.keep_id, d.keep_content, d.merge_id, d.merge_content, d.similarity, d.overlap
FROM pymem.fact_duplicates(scope => %(scope)s, scope_id => %(scope_id)s, project_id => %(project_id)s,
                           embedder => %(embedder)s, min_similarity => %(min_similarity)s::float8,
                           min_overlap => %(min_overlap)s::float8, max_facts => %(max_facts)s::integer,
                           max_pairs => %(max_pairs)s::integer) AS d;

-- name: facts_search
-- A subject's active facts ranked for a query (its vector, its text, or both), top k.
SELECT s.id, s.scope_id, s.content, s.confidence, s.source, s.metadata, s.created_at, s.similarity, s.score
FROM pymem.facts_search(scope => %(scope)s, scope_id => %(scope_id)s, query_vector => %(query_vector)b,
                        embedder => %(embedder)s, project_id => %(project_id)s, k => %(k)s::integer,
                        query_text => %(query_text)s, metadata => %(metadata)s::jsonb,
                        lexical_weight => %(lexical_weight)s::float8) AS s;

-- name: turn_record
-- Record one successful turn (both messages, vectors, learned facts and fact changes); may claim a summary span.
SELECT t.user_seq, t.assistant_seq, t.learned_ids, t.claim_token, t.through_seq, t.previous_summary, t.messages,
       t.changes, t.learning_job
FROM pymem.turn_record(
    user_id => %(user_id)s, user_content => %(user_content)s, assistant_content => %(assistant_content)s,
    thread_id => %(thread_id)s, project_id => %(project_id)s,
    user_importance => %(user_importance)s::float8, assistant_importance => %(assistant_importance)s::float8,
    embedder => %(embedder)s, user_embedding => %(user_embedding)b, assistant_embedding => %(assistant_embedding)b,
    learned => %(learned)s::text[], max_learned => %(max_learned)s::integer, keep_last => %(keep_last)s::integer,
    summarize_every => %(summarize_every)s::integer, lease_seconds => %(lease_seconds)s::float8,
    user_metadata => %(user_metadata)s, assistant_metadata => %(assistant_metadata)s,
    created_at => %(created_at)s::timestamptz, fact_changes => %(fact_changes)s::jsonb,
    defer_learning => %(defer_learning)s::boolean) AS t;

-- name: message_add
-- Append one message to a thread (no vector; optionally with metadata and its real time); returns its number.
SELECT pymem.message_add(user_id => %(user_id)s, content => %(content)s, role => %(role)s,
                         thread_id => %(thread_id)s, project_id => %(project_id)s,
                         importance => %(importance)s::float8, metadata => %(metadata)s,
                         created_at => %(created_at)s::timestamptz) AS seq;

-- name: window_read
-- The last N messages of a thread, oldest first.
SELECT w.seq, w.role, w.content, w.importance, w.created_at, w.metadata
FROM pymem.window_read(user_id => %(user_id)s, thread_id => %(thread_id)s, project_id => %(project_id)s,
                       max_messages => %(max_messages)s::integer) AS w;

-- name: summary_read
-- A thread's running summary and the last message it covers.
SELECT s.summary, s.through_seq, s.summarized_at
FROM pymem.summary_read(user_id => %(user_id)s, thread_id => %(thread_id)s, project_id => %(project_id)s) AS s;

-- name: summary_claim
-- Claim the span of a thread that is due to be folded into its summary (no row: nothing due).
SELECT c.claim_token, c.through_seq, c.previous_summary, c.messages
FROM pymem.summary_claim(user_id => %(user_id)s, thread_id => %(thread_id)s, project_id => %(project_id)s,
                         keep_last => %(keep_last)s::integer, summarize_every => %(summarize_every)s::integer,
                         lease_seconds => %(lease_seconds)s::float8) AS c;

-- name: summary_commit
-- Store a new running summary for a claimed span (false: the claim was lost).
SELECT pymem.summary_commit(user_id => %(user_id)s, claim_token => %(claim_token)s, summary => %(summary)s,
                            thread_id => %(thread_id)s, project_id => %(project_id)s,
                            max_chars => %(max_chars)s::integer) AS committed;

-- name: summary_release
-- Give a summary claim back without writing (the summarizer failed).
SELECT pymem.summary_release(user_id => %(user_id)s, claim_token => %(claim_token)s,
                             thread_id => %(thread_id)s, project_id => %(project_id)s) AS released;

-- name: messages_unembedded
-- A user's messages with no vector from this embedder.
SELECT u.thread_id, u.seq, u.content
FROM pymem.messages_unembedded(user_id => %(user_id)s, embedder => %(embedder)s, project_id => %(project_id)s,
                               min_chars => %(min_chars)s::integer, max_messages => %(max_messages)s::integer) AS u;

-- name: messages_add_many
-- Append many messages to one thread in one call (bulk, all or nothing); one row per element.
SELECT a.ord, a.seq FROM pymem.messages_add_many(
    user_id => %(user_id)s, thread_id => %(thread_id)s, roles => %(roles)s::text[], contents => %(contents)s::text[],
    project_id => %(project_id)s, importances => %(importances)s::float8[], metadata => %(metadata)s::jsonb[],
    created_ats => %(created_ats)s::timestamptz[], embeddings => %(embeddings)b, embedder => %(embedder)s) AS a
 ORDER BY a.ord;

-- name: message_embeddings_put
-- Store a batch of message vectors.
SELECT pymem.message_embeddings_put(user_id => %(user_id)s, embedder => %(embedder)s,
                                    thread_ids => %(thread_ids)s::text[], seqs => %(seqs)s::bigint[],
                                    embeddings => %(embeddings)b, project_id => %(project_id)s) AS stored;

-- name: messages_recall
-- A user's past messages ranked for a query (vector, text or both; those scoring at least min_score).
SELECT r.thread_id, r.seq, r.role, r.content, r.metadata, r.created_at, r.importance, r.similarity, r.score
FROM pymem.messages_recall(
    user_id => %(user_id)s, query_vector => %(query_vector)b, embedder => %(embedder)s, project_id => %(project_id)s,
    thread_id => %(thread_id)s, query_text => %(query_text)s, recall => pymem.recall(
        k => %(k)s::integer, min_content_chars => %(min_content_chars)s::integer,
        window_size => %(window_size)s::integer, recency_weight => %(recency_weight)s::float8,
        importance_weight => %(importance_weight)s::float8, lexical_weight => %(lexical_weight)s::float8,
        half_life_seconds => %(half_life_seconds)s::float8, min_score => %(min_score)s::float8,
        as_of => %(as_of)s::timestamptz, since => %(since)s::timestamptz, until => %(until)s::timestamptz,
        metadata => %(metadata)s::jsonb, next_turn_weight => %(next_turn_weight)s::float8,
        time_from => %(time_from)s::timestamptz, time_to => %(time_to)s::timestamptz,
        time_weight => %(time_weight)s::float8)) AS r;

-- name: retention_configure
-- Set (or with both NULL remove) the project's retention policy for messages; returns the policy in force.
SELECT r.messages_max_age, r.messages_max_per_thread, r.updated_at
  FROM pymem.retention_configure(project_id => %(project_id)s, messages_max_age => %(messages_max_age)s::interval,
                                 messages_max_per_thread => %(messages_max_per_thread)s::integer) AS r;

-- name: messages_created_index
-- Build the index an age policy reads (outside a transaction; writes go on meanwhile); nothing when it is there.
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_created ON pymem.messages (project_id, created_at);

-- name: retention_policy
-- The project's retention policy for messages (NULLs: every message is kept).
SELECT r.messages_max_age, r.messages_max_per_thread, r.updated_at FROM pymem.retention_policy(project_id => %(project_id)s) AS r;

-- name: purge
-- Delete up to max_rows expired facts, expired store entries and messages out of retention of the project (bounded batches); one row per kind with its count.
SELECT p.kind, p.purged FROM pymem.purge(project_id => %(project_id)s, max_rows => %(max_rows)s::integer) AS p;

-- name: learning_claim
-- Lease up to max_jobs learning jobs of the project, oldest first, at most one per user (rows with state 'running'; 'skipped' and 'dead' rows say what else happened).
SELECT c.job_id, c.user_id, c.thread_id, c.seq, c.state, c.attempts, c.lease_token, c.leased_until, c.content, c.reason
FROM pymem.learning_claim(project_id => %(project_id)s, max_jobs => %(max_jobs)s::integer,
                          lease_seconds => %(lease_seconds)s::float8, max_attempts => %(max_attempts)s::integer) AS c;

-- name: learning_complete
-- Apply a claimed job's learned facts and fact changes and end it, in one transaction (false: the lease was lost, nothing applied).
SELECT c.completed, c.learned_ids, c.changes
FROM pymem.learning_complete(user_id => %(user_id)s, job_id => %(job_id)s::bigint, lease_token => %(lease_token)s::uuid,
                             project_id => %(project_id)s, learned => %(learned)s::text[],
                             fact_changes => %(fact_changes)s::jsonb, max_learned => %(max_learned)s::integer,
                             calls => %(calls)s::integer, tokens => %(tokens)s::bigint) AS c;

-- name: learning_fail
-- End a claimed job's failed attempt: pending again after a backoff, or dead after max_attempts; returns the state.
SELECT pymem.learning_fail(user_id => %(user_id)s, job_id => %(job_id)s::bigint, lease_token => %(lease_token)s::uuid,
                           error_kind => %(error_kind)s, error => %(error)s, project_id => %(project_id)s,
                           max_attempts => %(max_attempts)s::integer, backoff_seconds => %(backoff_seconds)s::float8,
                           calls => %(calls)s::integer, tokens => %(tokens)s::bigint) AS state;

-- name: learning_release
-- Give a claimed job back untouched (its attempt not counted); false: the lease was lost.
SELECT pymem.learning_release(user_id => %(user_id)s, job_id => %(job_id)s::bigint, lease_token => %(lease_token)s::uuid,
                              project_id => %(project_id)s) AS released;

-- name: learning_status
-- The project's learning queue: jobs per state, the oldest pending job's age, failures by kind, today's usage.
SELECT s.pending, s.ready, s.running, s.dead, s.skipped, s.oldest_pending_seconds, s.failures, s.calls_today,
       s.tokens_today, s.skipped_today
FROM pymem.learning_status(project_id => %(project_id)s) AS s;

-- name: learning_jobs
-- The project's learning jobs in a state (NULL: all), oldest first, with their last error.
SELECT j.id, j.user_id, j.thread_id, j.seq, j.state, j.attempts, j.available_at, j.leased_until, j.error_kind, j.error,
       j.created_at, j.updated_at
FROM pymem.learning_jobs(project_id => %(project_id)s, job_state => %(job_state)s, max_jobs => %(max_jobs)s::integer) AS j;

-- name: learning_backfill
-- Queue a project's stored turns (of one user; created in [since, until)) for learning, each once, in order.
SELECT b.queued, b.done
FROM pymem.learning_backfill(project_id => %(project_id)s, user_id => %(user_id)s, since => %(since)s::timestamptz,
                             until => %(until)s::timestamptz, max_jobs => %(max_jobs)s::integer) AS b;

-- name: learning_requeue
-- Make the project's dead (or skipped) learning jobs pending again; returns how many.
SELECT pymem.learning_requeue(project_id => %(project_id)s, state => %(state)s) AS requeued;

-- name: learning_limits_configure
-- Set (or with every cap NULL remove) the project's cost caps on learning per UTC day; returns the caps in force.
SELECT l.user_calls_per_day, l.project_calls_per_day, l.user_tokens_per_day, l.project_tokens_per_day, l.updated_at
FROM pymem.learning_limits_configure(project_id => %(project_id)s, user_calls_per_day => %(user_calls_per_day)s::integer,
                                     project_calls_per_day => %(project_calls_per_day)s::integer,
                                     user_tokens_per_day => %(user_tokens_per_day)s::bigint,
                                     project_tokens_per_day => %(project_tokens_per_day)s::bigint) AS l;

-- name: learning_limits
-- The project's cost caps on learning per UTC day (NULLs: none).
SELECT l.user_calls_per_day, l.project_calls_per_day, l.user_tokens_per_day, l.project_tokens_per_day, l.updated_at
FROM pymem.learning_limits(project_id => %(project_id)s) AS l;

-- name: changes_since
-- Publish what has become safe to read, then the project's changes after a position, in order (no content).
SELECT c.position, c.kind, c.op, c.subject, c.keys, c.rows, c.created_at
FROM pymem.changes_since(project_id => %(project_id)s, after => %(after)s::bigint,
                         max_changes => %(max_changes)s::integer) AS c;

-- name: change_position
-- The last position published in the project's change feed (0: none yet).
SELECT pymem.change_position(project_id => %(project_id)s) AS position;

-- name: change_channel
-- The random name of the project's notification channel, to LISTEN on (made on first call).
SELECT pymem.change_channel(project_id => %(project_id)s) AS channel;

-- name: change_feed_enabled
-- Whether writes append to the change feed.
SELECT pymem.change_feed_enabled() AS enabled;

-- name: change_feed_configure
-- Turn the change feed on or off for the whole database (administrators); returns whether it is on.
SELECT pymem.change_feed_configure(enabled => %(enabled)s::boolean) AS enabled;

-- name: recall_index_plan
-- The CREATE/DROP INDEX CONCURRENTLY statements that bring a project's per-user recall indexes up to date.
SELECT p.user_id, p.embedder, p.vectors, p.action, p.statement
FROM pymem.recall_index_plan(project_id => %(project_id)s, min_messages => %(min_messages)s::integer) AS p;

-- name: message_pop
-- Delete a thread's newest message and return it (no row: the thread has none).
SELECT p.seq, p.role, p.content, p.importance, p.created_at, p.metadata
FROM pymem.message_pop(user_id => %(user_id)s, thread_id => %(thread_id)s, project_id => %(project_id)s) AS p;
-- name: message_delete
-- Delete one message of a user's thread by its seq; returns 1, or 0 when there is none.
SELECT pymem.message_delete(user_id => %(user_id)s, thread_id => %(thread_id)s, seq => %(seq)s::bigint,
                            project_id => %(project_id)s) AS deleted;

-- name: conversation_forget
-- Delete a user's thread (or every thread with '*'); returns the number of messages deleted.
SELECT pymem.conversation_forget(user_id => %(user_id)s, thread_id => %(thread_id)s,
                                 project_id => %(project_id)s) AS deleted;

-- name: context_read
-- Everything one turn reads (facts, summary, recall, window) in one call.
SELECT pymem.context_read(
    user_id => %(user_id)s, agent_id => %(agent_id)s, project_id => %(project_id)s, thread_id => %(thread_id)s,
    query_vector => %(query_vector)b, embedder => %(embedder)s, query_text => %(query_text)s,
    recall => pymem.recall(
        k => %(k)s::integer, min_content_chars => %(min_content_chars)s::integer,
        window_size => %(window_size)s::integer, recency_weight => %(recency_weight)s::float8,
        importance_weight => %(importance_weight)s::float8, lexical_weight => %(lexical_weight)s::float8,
        half_life_seconds => %(half_life_seconds)s::float8, min_score => %(min_score)s::float8,
        as_of => %(as_of)s::timestamptz, since => %(since)s::timestamptz, until => %(until)s::timestamptz,
        metadata => %(metadata)s::jsonb, next_turn_weight => %(next_turn_weight)s::float8,
        time_from => %(time_from)s::timestamptz, time_to => %(time_to)s::timestamptz,
        time_weight => %(time_weight)s::float8),
    max_facts => %(max_facts)s::integer, dedupe => %(dedupe)s, max_unembedded => %(max_unembedded)s::integer,
    valid_at => %(valid_at)s::timestamptz) AS context;

-- name: user_export
-- A user's whole memory (facts with history, threads, messages, summaries) as JSON.
SELECT pymem.user_export(user_id => %(user_id)s, project_id => %(project_id)s) AS document;

-- name: user_import
-- Load a user_export document (optionally under another project or user id).
SELECT pymem.user_import(document => %(document)s, project_id => %(project_id)s, user_id => %(user_id)s,
                         replace => %(replace)s) AS imported;

-- name: user_forget
-- Erase a user (facts, conversations, the named stores) in one transaction; returns the receipt.
SELECT pymem.user_forget(user_id => %(user_id)s, project_id => %(project_id)s,
                         store_keys => %(store_keys)s::text[]) AS receipt;

-- name: erasures
-- The receipts of a project's erasures, newest first (one user's, with user_id); owner role only.
SELECT r.id, r.erased_at, r.erased_by, r.counts, r.digest
  FROM pymem.erasures(project_id => %(project_id)s, user_id => %(user_id)s) AS r;

-- name: store_item_put
-- Write an item (a JSON object under a namespace and a key, expiring at expires_at or after ttl) and replace its vectors; returns its sha.
SELECT pymem.store_item_put(store_key => %(store_key)s, namespace => %(namespace)s::text[], key => %(key)s,
                            value => %(value)s::jsonb, embedder => %(embedder)s, fields => %(fields)s::text[],
                            embeddings => %(embeddings)b, actor => %(actor)s, project_id => %(project_id)s,
                            expires_at => %(expires_at)s::timestamptz, ttl => %(ttl)s::interval) AS sha;

-- name: store_item_get
-- An item's value, times and expiry (no row when it does not exist or has expired).
SELECT i.value, i.created_at, i.updated_at, i.expires_at
FROM pymem.store_item_get(store_key => %(store_key)s, namespace => %(namespace)s::text[], key => %(key)s,
                          project_id => %(project_id)s) AS i;

-- name: store_items_get
-- Several items in one statement (a JSON array of {namespace, key}): a row per live item, with its position in the array.
SELECT a.position, i.value, i.created_at, i.updated_at, i.expires_at
FROM (SELECT pg_catalog.jsonb_array_elements(j.items) AS item,
             pg_catalog.generate_series(0, pg_catalog.jsonb_array_length(j.items) - 1) AS position
      FROM (SELECT %(items)s::jsonb AS items) AS j) AS a
CROSS JOIN LATERAL pymem.store_item_get(store_key => %(store_key)s, namespace => ARRAY(SELECT pg_catalog.jsonb_array_elements_text(a.item -> 'namespace')),
                                        key => a.item ->> 'key', project_id => %(project_id)s) AS i
ORDER BY a.position;

-- name: store_items_delete
-- Delete several items and their vectors in one statement (a JSON array of {namespace, key}); returns how many there were.
SELECT pg_catalog.count(NULLIF(d.deleted, false))::integer AS deleted
FROM (SELECT pymem.store_item_delete(store_key => %(store_key)s, namespace => ARRAY(SELECT pg_catalog.jsonb_array_elements_text(a.item -> 'namespace')), key => a.item ->> 'key',
                                     actor => %(actor)s, project_id => %(project_id)s) AS deleted
      FROM (SELECT pg_catalog.jsonb_array_elements(%(items)s::jsonb) AS item) AS a) AS d;

-- name: store_items_put
-- Write several items without vectors in one statement (a JSON array of {namespace, key, value, ttl_seconds}); returns how many.
SELECT pg_catalog.count(w.sha)::integer AS written
FROM (SELECT pymem.store_item_put(store_key => %(store_key)s, namespace => ARRAY(SELECT pg_catalog.jsonb_array_elements_text(a.item -> 'namespace')), key => a.item ->> 'key',
                                  value => a.item -> 'value', embedder => NULL, fields => NULL, embeddings => NULL,
                                  actor => %(actor)s, project_id => %(project_id)s, expires_at => NULL,
                                  ttl => pg_catalog.make_interval(secs => (a.item ->> 'ttl_seconds')::double precision)) AS sha
      FROM (SELECT pg_catalog.jsonb_array_elements(%(items)s::jsonb) AS item) AS a) AS w;

-- name: store_items_refresh
-- Move on the expiry of the live items written with a ttl (a JSON array of {namespace, key}); returns how many.
SELECT pymem.store_items_refresh(store_key => %(store_key)s, items => %(items)s::jsonb,
                                 project_id => %(project_id)s) AS refreshed;

-- name: store_item_delete
-- Delete an item and its vectors; false when there was none.
SELECT pymem.store_item_delete(store_key => %(store_key)s, namespace => %(namespace)s::text[], key => %(key)s,
                               actor => %(actor)s, project_id => %(project_id)s) AS deleted;

-- name: store_items_search
-- Items under a namespace prefix matching a filter: newest first, or by similarity to a query vector.
SELECT i.namespace, i.key, i.value, i.created_at, i.updated_at, i.score, i.expires_at
FROM pymem.store_items_search(store_key => %(store_key)s, namespace_prefix => %(namespace_prefix)s::text[],
                              filter => %(filter)s::jsonb, query_vector => %(query_vector)b, embedder => %(embedder)s,
                              max_items => %(max_items)s::integer, skip => %(skip)s::integer,
                              project_id => %(project_id)s) AS i;

-- name: store_namespaces
-- The distinct namespaces of a store's items matching a prefix and a suffix, sorted, paged.
SELECT n.namespace
FROM pymem.store_namespaces(store_key => %(store_key)s, prefix => %(prefix)s::text[], suffix => %(suffix)s::text[],
                            max_depth => %(max_depth)s::integer, max_items => %(max_items)s::integer,
                            skip => %(skip)s::integer, project_id => %(project_id)s) AS n;

-- name: store_open
-- Open (and by default create) a keyed store; options set a new store's protections and must match an existing one's (PM404).
SELECT o.audit_on, o.versions_on, o.read_only, o.transcript_len, o.created_at, o.created
FROM pymem.store_open(store_key => %(store_key)s, project_id => %(project_id)s, audit => %(audit)s,
                      keep_versions => %(keep_versions)s, read_only_prefixes => %(read_only_prefixes)s::text[],
                      "create" => %(create)s) AS o;

-- name: store_protect
-- Tighten an existing store's protections (42501 if it would weaken them); audited.
SELECT p.audit_on, p.versions_on, p.read_only, p.changed
FROM pymem.store_protect(store_key => %(store_key)s, audit => %(audit)s, keep_versions => %(keep_versions)s,
                         read_only_prefixes => %(read_only_prefixes)s::text[], actor => %(actor)s,
                         reason => %(reason)s, project_id => %(project_id)s) AS p;

-- name: store_configure
-- Set an existing store's protections either way (owner role only); audited.
SELECT p.audit_on, p.versions_on, p.read_only, p.changed
FROM pymem.store_configure(store_key => %(store_key)s, audit => %(audit)s, keep_versions => %(keep_versions)s,
                           read_only_prefixes => %(read_only_prefixes)s::text[], actor => %(actor)s,
                           reason => %(reason)s, project_id => %(project_id)s) AS p;

-- name: store_write
-- Write text or JSON at a path (expected_sha: NULL, '' = must not exist, or the current sha), expiring at expires_at or after ttl.
SELECT pymem.store_write(store_key => %(store_key)s, path => %(path)s, content => %(content)s, kind => %(kind)s,
                         actor => %(actor)s, reason => %(reason)s, expected_sha => %(expected_sha)s,
                         project_id => %(project_id)s, expires_at => %(expires_at)s::timestamptz,
                         ttl => %(ttl)s::interval) AS sha;

-- name: store_read
-- The entry at a path (no row when it does not exist or has expired).
SELECT r.kind, r.content, r.sha, r.size, r.version, r.actor, r.reason, r.created_at, r.updated_at, r.expires_at
FROM pymem.store_read(store_key => %(store_key)s, path => %(path)s, project_id => %(project_id)s) AS r;

-- name: store_meta
-- An entry's metadata without its content.
SELECT m.kind, m.sha, m.size, m.version, m.actor, m.reason, m.created_at, m.updated_at, m.expires_at
FROM pymem.store_meta(store_key => %(store_key)s, path => %(path)s, project_id => %(project_id)s) AS m;

-- name: store_list
-- The paths under a prefix, sorted.
SELECT l.path, l.kind, l.sha, l.size, l.version, l.actor, l.updated_at, l.expires_at
FROM pymem.store_list(store_key => %(store_key)s, prefix => %(prefix)s, project_id => %(project_id)s) AS l;

-- name: store_delete
-- Delete a path (guarded by expected_sha when given).
SELECT pymem.store_delete(store_key => %(store_key)s, path => %(path)s, actor => %(actor)s, reason => %(reason)s,
                          expected_sha => %(expected_sha)s, project_id => %(project_id)s) AS deleted;

-- name: store_audit_tail
-- The last n audit records of a store, oldest first.
SELECT a.id, a.path, a.op, a.old_sha, a.new_sha, a.actor, a.reason, a.at
FROM pymem.store_audit_tail(store_key => %(store_key)s, n => %(n)s::integer, project_id => %(project_id)s) AS a;

-- name: store_versions
-- The kept versions of a path, oldest first.
SELECT v.version, v.kind, v.sha, v.size, v.actor, v.reason, v.at
FROM pymem.store_versions(store_key => %(store_key)s, path => %(path)s, project_id => %(project_id)s) AS v;

-- name: store_version_read
-- One kept version's content.
SELECT v.kind, v.content, v.sha
FROM pymem.store_version_read(store_key => %(store_key)s, path => %(path)s, version => %(version)s::integer,
                              project_id => %(project_id)s) AS v;

-- name: store_restore
-- Write a kept version back as the current content.
SELECT pymem.store_restore(store_key => %(store_key)s, path => %(path)s, version => %(version)s::integer,
                           actor => %(actor)s, reason => %(reason)s, expected_sha => %(expected_sha)s,
                           project_id => %(project_id)s) AS sha;

-- name: store_messages_append
-- Append chat messages to a store's transcript in one transaction.
SELECT pymem.store_messages_append(store_key => %(store_key)s, messages => %(messages)s,
                                   project_id => %(project_id)s) AS length;

-- name: store_messages_read
-- A store's transcript, oldest first.
SELECT m.seq, m.message, m.created_at
FROM pymem.store_messages_read(store_key => %(store_key)s, project_id => %(project_id)s) AS m;

-- name: store_drop
-- Delete a store (or every store of the project with '*') with everything in it.
SELECT pymem.store_drop(store_key => %(store_key)s, project_id => %(project_id)s) AS dropped;

-- name: browse_subjects
-- A project's fact subjects with their active and superseded counts, newest first (pymem serve).
SELECT b.scope, b.scope_id, b.active, b.superseded, b.newest
FROM pymem.browse_subjects(project_id => %(project_id)s, max_rows => %(max_rows)s::integer) AS b;

-- name: browse_users
-- A project's users with conversation threads: thread and message counts, most recent first.
SELECT b.user_id, b.threads, b.messages, b.updated_at
FROM pymem.browse_users(project_id => %(project_id)s, max_rows => %(max_rows)s::integer) AS b;

-- name: users_list
-- A project's users (with facts or threads) by id, with their counts, paged after a user id.
SELECT u.user_id, u.facts, u.threads
FROM pymem.users_list(project_id => %(project_id)s, max_rows => %(max_rows)s::integer, after => %(after)s) AS u;

-- name: browse_threads
-- A user's threads: messages, how many the summary covers, most recent first.
SELECT b.thread_id, b.messages, b.summarized_through, b.created_at, b.updated_at
FROM pymem.browse_threads(user_id => %(user_id)s, project_id => %(project_id)s) AS b;

-- name: browse_messages
-- A thread's messages from a seq on, oldest first (the turn that taught a learned fact).
SELECT b.seq, b.role, b.content, b.created_at, b.metadata
FROM pymem.browse_messages(user_id => %(user_id)s, thread_id => %(thread_id)s, from_seq => %(from_seq)s::bigint,
                           project_id => %(project_id)s, max_rows => %(max_rows)s::integer) AS b;

-- name: browse_stores
-- A project's keyed stores with entry counts and protections, by key.
SELECT b.store_key, b.entries, b.transcript_len, b.audit, b.keep_versions, b.updated_at
FROM pymem.browse_stores(project_id => %(project_id)s, max_rows => %(max_rows)s::integer) AS b;

-- name: browse_embedders
-- The embedders a project has stored vectors from, most recently registered first.
SELECT b.name, b.dimension FROM pymem.browse_embedders(project_id => %(project_id)s) AS b;

-- name: migration_role_setting
-- Name a pymem role for this session's migrate (pymem.owner_role, pymem.app_role, pymem.reader_role).
SELECT pg_catalog.set_config(%(key)s, %(name)s, false);

-- name: mcp_token_create
-- Record a new MCP bearer token (its sha256 only) for one user of a project; returns its id and creation time.
SELECT t.id, t.created_at
FROM pymem.mcp_token_create(project_id => %(project_id)s, user_id => %(user_id)s, agent_id => %(agent_id)s,
                            token_hash => %(token_hash)s::bytea) AS t;

-- name: mcp_token_lookup
-- The id, project, user and agent an MCP bearer token serves, by its sha256 (no row: unknown or revoked).
SELECT t.id, t.project_id, t.user_id, t.agent_id FROM pymem.mcp_token_lookup(token_hash => %(token_hash)s::bytea) AS t;

-- name: mcp_token_list
-- A project's MCP bearer tokens, newest first (never a hash).
SELECT t.id, t.user_id, t.agent_id, t.created_at, t.revoked_at
FROM pymem.mcp_token_list(project_id => %(project_id)s, max_rows => %(max_rows)s::integer) AS t;

-- name: mcp_token_revoke
-- Revoke a project's MCP bearer token by id; the revocation time, or no row when there was none to revoke.
SELECT t.revoked_at FROM pymem.mcp_token_revoke(project_id => %(project_id)s, id => %(id)s::bigint) AS t;
