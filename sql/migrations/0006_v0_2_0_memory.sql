-- 0006_v0_2_0_memory: what the schema of 0.2.0 adds to 0.1.0's (0001-0005) for facts, messages,
-- stores and recall; 0007_v0_2_0_operations adds the rest. Applied once under the migration lock
-- (search_path pg_catalog, pymem, pg_temp). During development these changes were 34 migrations,
-- 0006_subject_locks to 0049_learning_backfill; 0.2.0 ships them as these two. A database that
-- applied all 34 (a development build's) is recorded as having applied these two instead
-- (bootstrap.sql, CHANGELOG.md); the numbers 0008 to 0049 are never used again. What was measured
-- before each part was chosen: docs/performance.md, "Schema choices". Functions created here for
-- a trigger are re-created by the API refresh of the same migrate (api/*.sql, their real bodies).

-- 1. 0.1.0's functions whose parameters or result type change: CREATE OR REPLACE cannot change
--    those in place, so they are dropped here (every signature of each name; the vector type is
--    pgvector's, whose schema a migration does not assume) and the API refresh of the same
--    migrate creates the new ones. Between this migration and the API refresh (a few hundred
--    milliseconds) a call of these fails with 42883.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.oid::pg_catalog.regprocedure AS fn FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace = 'pymem'::pg_catalog.regnamespace
                AND p.proname IN ('message_add', 'turn_record', 'window_read', 'messages_recall', 'context_read',
                                  'facts_search', 'fact_add', 'fact_supersede', 'fact_chain', '_message_check',
                                  '_message_insert', '_window', '_recall_check', '_recall_ranked', 'store_read',
                                  'store_meta', 'store_list', 'store_write', '_store_put') LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', r.fn);
    END LOOP;
END;
$$;

-- 2. Learned-fact writers serialise on a row of subject_locks (SELECT ... FOR UPDATE in
--    pymem._subject_lock), not on an advisory lock: an advisory lock's key is computable by anyone
--    and needs no privilege, so a role confined to one tenant could stall another tenant's writes;
--    locking a row needs UPDATE on the table (the owner only) and row-level security shows each
--    tenant only its own rows. A subject's row goes with its facts (facts_forget).
CREATE TABLE pymem.subject_locks (
    project_id text NOT NULL,
    scope      text NOT NULL,
    scope_id   text NOT NULL,
    CONSTRAINT subject_locks_pkey PRIMARY KEY (project_id, scope, scope_id)
);
COMMENT ON TABLE pymem.subject_locks IS 'One row per subject whose learned-fact writers serialise on it (row lock)';

-- 3. Keyed stores: protection changes are audited (op 'protect' / 'unprotect' on path ''), and
--    paths are Unicode NFC (api/stores.sql normalises every path and prefix where it enters).
--    Paths and read-only prefixes stored by 0.1.0 in another form are rewritten to NFC here, in
--    entries, versions and audit records alike. A name stored under two spellings cannot be
--    merged without choosing between two contents: such spellings are left as they are and named
--    in a WARNING, for an administrator to resolve (read both, delete one with its exact spelling
--    as the owner, or move it). Row-level security is forced, so even the owner sees no row
--    without a tenant; the rewrite spans every tenant, so it lifts FORCE for its own statements
--    and restores it before the transaction ends (ALTER TABLE holds an ACCESS EXCLUSIVE lock
--    meanwhile: no other session ever sees the tables unforced).
ALTER TABLE pymem.store_audit DROP CONSTRAINT store_audit_op_check;
ALTER TABLE pymem.store_audit ADD CONSTRAINT store_audit_op_check
    CHECK (op IN ('write', 'delete', 'restore', 'protect', 'unprotect'));

ALTER TABLE pymem.stores NO FORCE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_entries NO FORCE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_versions NO FORCE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_audit NO FORCE ROW LEVEL SECURITY;

DO $$
DECLARE
    r record;
    v_rewritten bigint;
BEGIN
    FOR r IN
        SELECT p.project_id, p.store_key, pg_catalog.array_agg(p.path ORDER BY p.path COLLATE "C") AS spellings
          FROM (SELECT e.project_id, e.store_key, e.path FROM pymem.store_entries AS e
                UNION
                SELECT v.project_id, v.store_key, v.path FROM pymem.store_versions AS v) AS p
         GROUP BY p.project_id, p.store_key, pg_catalog.normalize(p.path, 'NFC')
        HAVING pg_catalog.count(*) > 1
    LOOP
        RAISE WARNING 'pymem: store % of project % holds one name under several Unicode spellings %: left as they are',
            pg_catalog.quote_literal(r.store_key), pg_catalog.quote_literal(r.project_id), r.spellings::text;
    END LOOP;

    -- one statement, one snapshot: every UPDATE sees the spellings as they were
    WITH spelled AS (
        SELECT e.project_id, e.store_key, e.path FROM pymem.store_entries AS e
        UNION
        SELECT v.project_id, v.store_key, v.path FROM pymem.store_versions AS v
    ), clash AS (
        SELECT s.project_id, s.store_key, pg_catalog.normalize(s.path, 'NFC') AS nfc
          FROM spelled AS s
         GROUP BY s.project_id, s.store_key, pg_catalog.normalize(s.path, 'NFC')
        HAVING pg_catalog.count(*) > 1
    ), entries AS (
        UPDATE pymem.store_entries AS e SET path = pg_catalog.normalize(e.path, 'NFC')
         WHERE pg_catalog.normalize(e.path, 'NFC') <> e.path
           AND NOT EXISTS (SELECT 1 FROM clash AS c WHERE c.project_id = e.project_id AND c.store_key = e.store_key
                              AND c.nfc = pg_catalog.normalize(e.path, 'NFC'))
        RETURNING 1
    ), versions AS (
        UPDATE pymem.store_versions AS v SET path = pg_catalog.normalize(v.path, 'NFC')
         WHERE pg_catalog.normalize(v.path, 'NFC') <> v.path
           AND NOT EXISTS (SELECT 1 FROM clash AS c WHERE c.project_id = v.project_id AND c.store_key = v.store_key
                              AND c.nfc = pg_catalog.normalize(v.path, 'NFC'))
        RETURNING 1
    ), audit AS (
        UPDATE pymem.store_audit AS a SET path = pg_catalog.normalize(a.path, 'NFC')
         WHERE pg_catalog.normalize(a.path, 'NFC') <> a.path
           AND NOT EXISTS (SELECT 1 FROM clash AS c WHERE c.project_id = a.project_id AND c.store_key = a.store_key
                              AND c.nfc = pg_catalog.normalize(a.path, 'NFC'))
        RETURNING 1
    ), prefixes AS (
        UPDATE pymem.stores AS s
           SET read_only_prefixes = ARRAY(SELECT pg_catalog.normalize(x.p, 'NFC')
                                            FROM pg_catalog.unnest(s.read_only_prefixes) WITH ORDINALITY AS x(p, n)
                                           ORDER BY x.n)
         WHERE EXISTS (SELECT 1 FROM pg_catalog.unnest(s.read_only_prefixes) AS x(p)
                        WHERE pg_catalog.normalize(x.p, 'NFC') <> x.p)
        RETURNING 1
    )
    SELECT (SELECT pg_catalog.count(*) FROM entries) + (SELECT pg_catalog.count(*) FROM versions)
         + (SELECT pg_catalog.count(*) FROM audit) + (SELECT pg_catalog.count(*) FROM prefixes)
      INTO v_rewritten;
    IF v_rewritten > 0 THEN
        RAISE NOTICE 'pymem: % store paths, audit records and prefix lists rewritten to NFC', v_rewritten;
    END IF;
END;
$$;

ALTER TABLE pymem.stores FORCE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_entries FORCE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_versions FORCE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_audit FORCE ROW LEVEL SECURITY;

-- 4. Row types of the API's results, whose fields carry the names every function uses (an output
--    column cannot be named like an input parameter), and recall's knobs as one checked value
--    (built by pymem.recall(...), checked by pymem._recall_check, taken by _recall).
CREATE TYPE pymem.recalled_message AS (
    thread_id  text,
    seq        bigint,
    role       text,
    content    text,
    created_at timestamptz,
    importance double precision,
    similarity double precision,
    score      double precision,
    metadata   jsonb
);
COMMENT ON TYPE pymem.recalled_message IS 'A row of pymem.messages_recall';

CREATE TYPE pymem.fact_match AS (
    id         bigint,
    scope_id   text,
    content    text,
    confidence double precision,
    source     text,
    metadata   jsonb,
    created_at timestamptz,
    similarity double precision,
    score      double precision
);
COMMENT ON TYPE pymem.fact_match IS 'A row of pymem.facts_search';

-- fact_supersede onto content that is already an active fact of the subject retires the old fact
-- into that one: history is a tree merging into its newest version (a fact has at most one
-- successor, but may have several predecessors). fact_supersede returns the fact now active and
-- whether it was created (false: a merge); fact_chain a fact's tree, with each row's distance to
-- the newest version.
CREATE TYPE pymem.fact_successor AS (
    id      bigint,
    created boolean
);
COMMENT ON TYPE pymem.fact_successor IS 'The result of pymem.fact_supersede';

CREATE TYPE pymem.fact_version AS (
    project_id    text,
    scope         text,
    scope_id      text,
    id            bigint,
    content       text,
    content_key   bytea,
    confidence    double precision,
    source        text,
    trace_id      text,
    metadata      jsonb,
    created_at    timestamptz,
    superseded_by bigint,
    superseded_at timestamptz,
    depth         integer,
    expires_at    timestamptz,
    valid_from    timestamptz,
    valid_to      timestamptz
);
COMMENT ON TYPE pymem.fact_version IS 'A row of pymem.fact_chain';

CREATE TYPE pymem.recall_spec AS (
    k                 integer,           -- rows to rank and return
    min_content_chars integer,           -- shorter messages are not recalled
    window_size       integer,           -- the thread's last window_size messages are not recalled
    recency_weight    double precision,  -- weights of the score: recency, importance, the rest relevance
    importance_weight double precision,
    lexical_weight    double precision,  -- the lexical share of relevance (with a vector and terms)
    half_life_seconds double precision,  -- recency halves every half_life_seconds
    min_score         double precision,  -- NULL: no threshold
    as_of             timestamptz,       -- NULL: now; else the messages that existed then
    since             timestamptz,       -- messages created in [since, until) (NULL: unbounded)
    until             timestamptz,
    metadata          jsonb,             -- NULL, or an object the message's metadata must contain
    next_turn_weight  double precision,  -- the turn after each recalled turn (0: none)
    time_from         timestamptz,       -- a time the question names: [time_from, time_to), NULL: none
    time_to           timestamptz,
    time_weight       double precision   -- the named time's bonus
);
COMMENT ON TYPE pymem.recall_spec IS
    'How recall ranks: built by pymem.recall(...), taken by messages_recall and context_read as recall';

-- 5. pymem.config also records the sha256 of the SQL the last completed API refresh applied
--    (pymem.migration_api_applied), so that `pymem migrate --check` tells a refresh that never
--    completed, or another pymem's, from a current one.
ALTER TABLE pymem.config
    DROP CONSTRAINT config_key_check,
    DROP CONSTRAINT config_value_check,
    ADD CONSTRAINT config_key_check CHECK (key IN ('owner_role', 'app_role', 'reader_role', 'api_sha256')),
    ADD CONSTRAINT config_value_check CHECK (CASE WHEN key = 'api_sha256' THEN value ~ '^[0-9a-f]{64}$'
                                                  ELSE value <> '' AND pg_catalog.length(value) <= 63 END);
COMMENT ON TABLE pymem.config IS 'pymem installation settings (role names) and the checksum of the last API refresh';

-- 6. Lexical indexes, for the hybrid (lexical + vector) ranking of recall and facts_search: one
--    row per message (message_lexemes) and per fact (fact_lexemes) with its content as a tsvector
--    and its length in tokens (BM25's document length); message_lexemes also copies the immutable
--    message's time, importance and length. A statement trigger fills each on every insert,
--    whoever writes; messages and fact contents never change in place, and a deleted row takes
--    its lexemes with it (foreign key). Separate tables, so the row types of messages and facts
--    stay as they were. The primary key is the only index: a read takes one user's (one
--    subject's) rows through its prefix and computes BM25's statistics from them at query time;
--    a GIN index would find a term's rows of every user and filter the user afterwards (the
--    subject key cannot be a GIN key without btree_gin).
--    Rows stored by 0.1.0 are indexed here in one INSERT ... SELECT that streams (no rewrite;
--    readers go on, writers wait for the commit) when row-level security does not bind the
--    migrating role (a superuser, or BYPASSRLS); otherwise a NOTICE says so, old messages rank by
--    their vectors until pymem.message_lexemes_backfill() (README), and facts_search computes an
--    old fact's lexemes when it ranks it. The triggers' bodies here are those of 0.1.0's english
--    lexemes; the API refresh replaces them (pymem._lexemes(project_id, content), the project's
--    configuration) and drops _english_lexemes.
CREATE FUNCTION pymem._english_lexemes(content text)
RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.to_tsvector('pg_catalog.english'::pg_catalog.regconfig, content);
$$;

CREATE FUNCTION pymem._lexeme_tokens(lexemes tsvector)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT coalesce(pg_catalog.sum(coalesce(pg_catalog.cardinality(u.positions), 1)), 0)::integer
      FROM pg_catalog.unnest(lexemes) AS u;
$$;

CREATE TABLE pymem.message_lexemes (
    project_id text             NOT NULL,
    user_id    text             NOT NULL,
    thread_id  text             NOT NULL,
    seq        bigint           NOT NULL,
    chars      integer          NOT NULL,
    importance double precision NOT NULL,
    created_at timestamptz      NOT NULL,
    tokens     integer          NOT NULL,
    lexemes    tsvector         NOT NULL,
    CONSTRAINT message_lexemes_pkey PRIMARY KEY (project_id, user_id, thread_id, seq),
    CONSTRAINT message_lexemes_message_fkey FOREIGN KEY (project_id, user_id, thread_id, seq)
        REFERENCES pymem.messages (project_id, user_id, thread_id, seq) ON DELETE CASCADE
);
COMMENT ON TABLE pymem.message_lexemes IS 'Message contents as tsvectors, for lexical recall (messages_recall, context_read)';

CREATE FUNCTION pymem._message_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    INSERT INTO pymem.message_lexemes AS l
        (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
    SELECT n.project_id, n.user_id, n.thread_id, n.seq, pg_catalog.length(n.content), n.importance, n.created_at,
           pymem._lexeme_tokens(v.lexemes), v.lexemes
      FROM new_messages AS n CROSS JOIN LATERAL (SELECT pymem._english_lexemes(n.content) AS lexemes) AS v;
    RETURN NULL;
END;
$$;

CREATE TRIGGER messages_lexemes AFTER INSERT ON pymem.messages
    REFERENCING NEW TABLE AS new_messages
    FOR EACH STATEMENT EXECUTE FUNCTION pymem._message_lexemes_add();

CREATE TABLE pymem.fact_lexemes (
    project_id text     NOT NULL,
    scope      text     NOT NULL,
    scope_id   text     NOT NULL,
    fact_id    bigint   NOT NULL,
    lexemes    tsvector NOT NULL,
    tokens     integer  NOT NULL,
    CONSTRAINT fact_lexemes_pkey PRIMARY KEY (project_id, scope, scope_id, fact_id),
    CONSTRAINT fact_lexemes_fact_fkey FOREIGN KEY (project_id, scope, scope_id, fact_id)
        REFERENCES pymem.facts (project_id, scope, scope_id, id) ON DELETE CASCADE
);
COMMENT ON TABLE pymem.fact_lexemes IS 'Fact contents as tsvectors, for lexical ranking (facts_search)';

CREATE FUNCTION pymem._fact_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    INSERT INTO pymem.fact_lexemes AS l (project_id, scope, scope_id, fact_id, lexemes, tokens)
    SELECT n.project_id, n.scope, n.scope_id, n.id, v.lexemes, pymem._lexeme_tokens(v.lexemes)
      FROM new_facts AS n CROSS JOIN LATERAL (SELECT pymem._english_lexemes(n.content) AS lexemes) AS v;
    RETURN NULL;
END;
$$;

CREATE TRIGGER facts_lexemes AFTER INSERT ON pymem.facts
    REFERENCING NEW TABLE AS new_facts
    FOR EACH STATEMENT EXECUTE FUNCTION pymem._fact_lexemes_add();

DO $$
BEGIN
    IF (SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user) THEN
        INSERT INTO pymem.message_lexemes AS l
            (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
        SELECT m.project_id, m.user_id, m.thread_id, m.seq, pg_catalog.length(m.content), m.importance, m.created_at,
               pymem._lexeme_tokens(v.lexemes), v.lexemes
          FROM pymem.messages AS m CROSS JOIN LATERAL (SELECT pymem._english_lexemes(m.content) AS lexemes) AS v;
        INSERT INTO pymem.fact_lexemes AS l (project_id, scope, scope_id, fact_id, lexemes, tokens)
        SELECT f.project_id, f.scope, f.scope_id, f.id, v.lexemes, pymem._lexeme_tokens(v.lexemes)
          FROM pymem.facts AS f CROSS JOIN LATERAL (SELECT pymem._english_lexemes(f.content) AS lexemes) AS v
         WHERE f.superseded_by IS NULL;
    ELSE
        RAISE NOTICE 'pymem: messages and facts stored before this migration are not indexed for lexical recall (row-level security hides them from %); run SELECT pymem.message_lexemes_backfill() per project (facts_search computes old facts'' lexemes when it ranks them)',
            current_user;
    END IF;
END;
$$;

-- each message vector carries its message's lexemes and length, so that hybrid recall reads a
-- user's rows once (message_lexemes stays: recall by text alone reads it). NULL for the vectors
-- stored by 0.1.0: recall takes their lexemes from message_lexemes by primary key, and
-- pymem.message_lexemes_backfill() fills them in batches of short transactions; the partial
-- index holds those rows only and shrinks as they are filled.
ALTER TABLE pymem.message_embeddings ADD COLUMN lexemes tsvector, ADD COLUMN tokens integer;
CREATE INDEX message_embeddings_without_lexemes ON pymem.message_embeddings (project_id) WHERE lexemes IS NULL;
COMMENT ON COLUMN pymem.message_embeddings.lexemes IS 'the message''s lexemes (pymem._lexemes of its content); NULL: stored before 0017, see message_lexemes';

-- each project chooses the text search configuration of its lexemes (english when it has no row
-- here); pymem.text_search_configure re-indexes the project's lexemes. config is the
-- configuration's name as text: a regconfig column would make the database refuse pg_upgrade,
-- and a dropped configuration fails with a clear error where it is read (42704).
CREATE TABLE pymem.text_search (
    project_id text        NOT NULL,
    config     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT text_search_pkey PRIMARY KEY (project_id),
    CONSTRAINT text_search_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256)
);
COMMENT ON TABLE pymem.text_search IS 'Text search configuration of each project''s lexemes (default english)';

-- 7. Indexes of pymem.facts and pymem.messages that generic plans (PL/pgSQL's own, from a
--    function's sixth call, where a subject looks like a row or two) chose wrongly, and facts by id.
-- facts_predecessor, unique while a history was a straight line, stays (not unique) for the walks
-- to a fact's predecessors and the foreign key's cascade.
DROP INDEX pymem.facts_predecessor;
CREATE INDEX facts_predecessor ON pymem.facts (project_id, scope, scope_id, superseded_by)
    WHERE superseded_by IS NOT NULL;
-- facts by id within a project (pymem.fact_get; fastaiagent's FactStore names a fact by its id)
CREATE INDEX facts_project_id_id ON pymem.facts (project_id, id);
-- the lookups by content key (idempotent add, supersede by old_content, forget by content,
-- learned facts, facts_add_many) compare `scope ... COLLATE "C"`, which only this index serves,
-- so the newest-first index no longer wins them; ON CONFLICT ... WHERE superseded_by IS NULL
-- names no collation and infers it as it did the old one
CREATE UNIQUE INDEX facts_subject_content_key
    ON pymem.facts (project_id, scope COLLATE "C", scope_id, content_key) WHERE superseded_by IS NULL;
DROP INDEX pymem.facts_active_content_key;
COMMENT ON INDEX pymem.facts_subject_content_key IS
    'One active fact per subject and content key (idempotent add); scope in "C" so that only lookups by key use it';
-- the scope-wide newest-first index is partial on "superseded_at IS NULL", which the scope-wide
-- reads state and a subject's reads (which say "superseded_by IS NULL") do not, so that no read of
-- one subject takes it before the table's first ANALYZE (both hold for the same rows:
-- CHECK facts_superseded_pair)
DROP INDEX pymem.facts_scope_active_newest;
CREATE INDEX facts_scope_active_newest ON pymem.facts (project_id, scope, created_at DESC, id DESC)
    WHERE superseded_at IS NULL;
COMMENT ON INDEX pymem.facts_scope_active_newest IS
    'Newest-first reads across a scope (scope_id ''*''); partial on superseded_at so that no read of one subject takes it';
-- the catch-up index split in two partial indexes that the foreign-key check of
-- message_embeddings -> messages cannot use (its conditions imply neither predicate), so that
-- check has only the primary key left (bench/README.md, "Plans", 4)
CREATE INDEX messages_unembedded ON pymem.messages (project_id, user_id) WHERE embedded_by IS NULL;
DROP INDEX pymem.messages_embedded_by;
CREATE INDEX messages_embedded_by ON pymem.messages (project_id, user_id, embedded_by) WHERE embedded_by IS NOT NULL;
COMMENT ON INDEX pymem.messages_unembedded IS 'The catch-up: a user''s messages with no vector yet';
COMMENT ON INDEX pymem.messages_embedded_by IS 'The catch-up: a user''s messages last embedded by another embedder';

-- 8. Vectors of keyed-store entries, for search by meaning over a store's JSON items
--    (pymem.store_items_search; LangGraph's store). One row per (entry, embedder, field): '$' for
--    the whole value, 'text', 'tags.0', ... Each row carries the sha of the content it was computed
--    from: a search uses only the vectors whose sha is the entry's current one, so a write by
--    another path leaves old vectors unused instead of wrong. No vector index: a search reads one
--    store's vectors under a path prefix, an exact scan. pgvector's type is named through dynamic
--    SQL with its schema written out (the pinned search_path does not hold it).
DO $$
DECLARE
    v_schema text;
BEGIN
    SELECT pg_catalog.quote_ident(n.nspname::text) INTO v_schema
      FROM pg_catalog.pg_extension AS e
      JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    EXECUTE pg_catalog.format($t$
        CREATE TABLE pymem.store_vectors (
            project_id text        NOT NULL,
            store_key  text        NOT NULL,
            path       text        NOT NULL,
            embedder   text        NOT NULL,
            field      text        NOT NULL,
            sha        text        NOT NULL,
            embedding  %1$s.vector NOT NULL,
            created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
            CONSTRAINT store_vectors_pkey PRIMARY KEY (project_id, store_key, path, embedder, field),
            CONSTRAINT store_vectors_entry_fkey FOREIGN KEY (project_id, store_key, path)
                REFERENCES pymem.store_entries (project_id, store_key, path) ON DELETE CASCADE,
            CONSTRAINT store_vectors_field_check CHECK (field <> '' AND pg_catalog.length(field) <= 1024)
        )$t$, v_schema);
END;
$$;
COMMENT ON TABLE pymem.store_vectors IS 'Vectors of keyed-store entries, one per (entry, embedder, field), valid while sha is the entry''s';

-- 9. Per-user recall indexes (heavy users: docs/recall-indexes.md). recall_index_plan records a
--    user here and returns the CREATE INDEX CONCURRENTLY statement (which no function can run)
--    that `pymem recall-indexes` runs; recall uses a recorded index once PostgreSQL marks it
--    valid. terms_filled: the user's postings in recall_terms (below) were filled; false means the
--    next plan has a fill step for them.
CREATE TABLE pymem.recall_indexes (
    project_id text        NOT NULL,
    user_id    text        NOT NULL,
    embedder   text        NOT NULL,
    index_name text        NOT NULL,
    dims       integer     NOT NULL CHECK (dims BETWEEN 1 AND 2000),
    lists      integer     NOT NULL CHECK (lists BETWEEN 1 AND 32768),
    vectors    bigint      NOT NULL,
    planned_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    terms_filled boolean   NOT NULL DEFAULT false,
    CONSTRAINT recall_indexes_pkey PRIMARY KEY (project_id, user_id, embedder)
);
COMMENT ON TABLE pymem.recall_indexes IS 'Per-user IVFFlat indexes of heavy users'' message vectors (recall_index_plan)';

-- the words of heavy users' messages, one row per (message, distinct lexeme), so that a heavy
-- user's hybrid recall (candidates from the IVFFlat index: the nearest by vector) also finds the
-- messages that share a rare word with the query. A btree and text equality, not a GIN index:
-- under forced row-level security the planner cannot use a GIN index for tsvector @@ tsquery
-- (ts_match_vq is not leakproof), while texteq is. Only registered users' messages are added
-- (_message_lexemes_add); a message's postings go with it (foreign key).
CREATE TABLE pymem.recall_terms (
    project_id text   NOT NULL,
    user_id    text   NOT NULL,
    lexeme     text   COLLATE "C" NOT NULL,
    thread_id  text   NOT NULL,
    seq        bigint NOT NULL,
    CONSTRAINT recall_terms_pkey PRIMARY KEY (project_id, user_id, lexeme, thread_id, seq),
    CONSTRAINT recall_terms_message_fkey FOREIGN KEY (project_id, user_id, thread_id, seq)
        REFERENCES pymem.message_lexemes (project_id, user_id, thread_id, seq) ON DELETE CASCADE
);
-- by message, for the cascade; (thread_id, seq) lead, not the user: with (project_id, user_id)
-- first, a planner without statistics read a term's postings through it instead of the key
CREATE INDEX recall_terms_message ON pymem.recall_terms (thread_id, seq, user_id, project_id);
COMMENT ON TABLE pymem.recall_terms IS 'Heavy users'' message words, one row per (message, lexeme): the lexical candidates of recall through a recall index';

-- 10. The copies of agent and project facts that a Citus cluster keeps in reference tables
--     (sql/citus.sql, _shared_facts_sync), on every database: empty off Citus. A change to facts,
--     fact_embeddings or fact_lexemes changes its shared_ twin the same way, in the same order of
--     columns (the copies are written with SELECT *), and `pymem migrate --check` reports a twin
--     whose columns differ. Created here, from the tables as they are at this point.
CREATE TABLE pymem.shared_facts
    (LIKE pymem.facts INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE pymem.shared_fact_embeddings
    (LIKE pymem.fact_embeddings INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE pymem.shared_fact_lexemes
    (LIKE pymem.fact_lexemes INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
COMMENT ON TABLE pymem.shared_facts IS 'Agent and project facts copied for every Citus worker (empty off Citus)';
COMMENT ON TABLE pymem.shared_fact_embeddings IS 'Vectors of pymem.shared_facts (empty off Citus)';
COMMENT ON TABLE pymem.shared_fact_lexemes IS 'Lexemes of pymem.shared_facts (empty off Citus)';

-- 11. Facts expire and have valid time. expires_at (NULL: never) is set by the writes that take
--     an expiry; every version of a history carries its newest version's, so a history expires as
--     one; pymem.purge deletes expired facts in bounded batches (facts_expiring). valid_from /
--     valid_to: when the fact holds in the world, [valid_from, valid_to), NULL: unbounded; read by
--     facts_at. ADD COLUMN without a default changes only the catalog; no CHECK (validating one
--     would scan the table under this migration's lock): the writes check the values
--     (pymem._expiry, pymem._valid_time). shared_facts gains the same columns in the same order.
ALTER TABLE pymem.facts ADD COLUMN expires_at timestamptz;
COMMENT ON COLUMN pymem.facts.expires_at IS
    'When the fact (with its history) stops being visible; NULL: never. pymem.purge deletes it after';
ALTER TABLE pymem.shared_facts ADD COLUMN expires_at timestamptz;
CREATE INDEX facts_expiring ON pymem.facts (project_id, expires_at) WHERE expires_at IS NOT NULL;
ALTER TABLE pymem.facts ADD COLUMN valid_from timestamptz, ADD COLUMN valid_to timestamptz;
COMMENT ON COLUMN pymem.facts.valid_from IS
    'When the fact starts to hold in the world (valid time); NULL: since always, or not known';
COMMENT ON COLUMN pymem.facts.valid_to IS
    'When the fact stops holding in the world (exclusive); NULL: it still holds';
ALTER TABLE pymem.shared_facts ADD COLUMN valid_from timestamptz, ADD COLUMN valid_to timestamptz;

-- "an active fact" has one name: not superseded, not expired, holding now. Every read of active
-- facts reads pymem.active_facts; it says so in its own words, not through pymem._fact_live /
-- _fact_valid (api/00_common.sql, which tests compare with it), for the roles that read it with
-- their own rights and no EXECUTE on internal functions. security_invoker: the tables' forced
-- row-level security binds it; granted to no one, like the tables. A simple view: the planner
-- inlines it and every partial index of pymem.facts serves it (tests/facts/test_facts_plans.py).
-- shared_active_facts is its twin over the copies (sql/citus.sql renames one into the other).
CREATE VIEW pymem.active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.facts AS f
     WHERE f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
       AND (f.valid_from IS NULL OR f.valid_from OPERATOR(pg_catalog.<=) pg_catalog.now())
       AND (f.valid_to IS NULL OR f.valid_to OPERATOR(pg_catalog.>) pg_catalog.now());
CREATE VIEW pymem.shared_active_facts WITH (security_invoker = true) AS
    SELECT f.* FROM pymem.shared_facts AS f
     WHERE f.superseded_by IS NULL AND (f.expires_at IS NULL OR f.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
       AND (f.valid_from IS NULL OR f.valid_from OPERATOR(pg_catalog.<=) pg_catalog.now())
       AND (f.valid_to IS NULL OR f.valid_to OPERATOR(pg_catalog.>) pg_catalog.now());
COMMENT ON VIEW pymem.active_facts IS
    'The active facts (not superseded, not expired, holding now): what every read of active facts reads';
COMMENT ON VIEW pymem.shared_active_facts IS 'The active facts of pymem.shared_facts (empty off Citus)';


-- 12. Row-level security, forced (it binds the owner, so the SECURITY DEFINER API too), with the
--     tenant policy of every pymem table (sql/citus.sql rewrites it without the sub-select there).
DO $$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['subject_locks', 'message_lexemes', 'fact_lexemes', 'text_search', 'store_vectors',
                                   'recall_indexes', 'recall_terms', 'shared_facts', 'shared_fact_embeddings',
                                   'shared_fact_lexemes'] LOOP
        EXECUTE pg_catalog.format('ALTER TABLE pymem.%I ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE pg_catalog.format('ALTER TABLE pymem.%I FORCE ROW LEVEL SECURITY', v_table);
        EXECUTE pg_catalog.format('CREATE POLICY tenant ON pymem.%I USING (project_id = (SELECT pymem.current_tenant())) '
                                  'WITH CHECK (project_id = (SELECT pymem.current_tenant()))', v_table);
    END LOOP;
END;
$$;
