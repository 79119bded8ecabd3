-- 00_common.sql: the tenant model (tenant_allowed, current_tenant: the RLS policies call them) and
-- the helpers every capability file uses: tenant entry and the project check,
-- limit checks, the checks of vectors and query vectors (with the embedder registry), the
-- names of a fact's states (head, live), the text search helpers (lexemes, query terms, a term
-- quoted, a document's length in tokens). This file calls no other file of api/. The ranking's
-- formulas (BM25, the cosine floor, recency) are in recall_ranking.sql, the recall spec's
-- builder, recall(), in recall_spec.sql.
-- Re-applied (CREATE OR REPLACE) on every migrate, like every file of api/; capability files
-- (facts, conversations, context, portability, stores, tenant) depend on this file and on no
-- other file's internals except where one capability reads another's data by design
-- (context_read composes facts and conversations; turn_record writes learned facts; the
-- portability functions export and import both). No SECURITY DEFINER here: these run inside
-- the API functions, as their owner. pgvector is reached through pymem._vector_dims /
-- _vector_norm (bootstrap.sql renders them with pgvector's schema).

-- The states of a fact and of a store entry, each named once (issue 55, item 3). A fact is the
-- "head" of its history while nothing supersedes it; "kept" at time `at` while nothing has made it
-- gone for reads (today: its expiry, NULL: never, is after `at`); "live" when both. Reads pass
-- at = now() (the transaction's start), and so do writes (on Citus, citus.sql puts a value in
-- their place where Citus refuses now() beside a column in a DELETE or UPDATE). A keyed-store
-- entry (migrations/0007_v0_2_0_operations.sql) is "live" while unexpired: _entry_live.
-- pymem.active_facts says head, kept and valid in its own words, for the roles that read it
-- without EXECUTE here (migrations/0006_v0_2_0_memory.sql); partial indexes and ON CONFLICT
-- arbiters spell "head" out, as PostgreSQL needs it there.
-- _fact_kept and _fact_live take the fact's row (anyelement: a row of pymem.facts, of
-- pymem.shared_facts, or of a Citus shard of either, all with the same columns), so that a new
-- condition of "kept" is written here and nowhere else: no call site names the columns it reads.
-- A row typed pymem.facts would not do on Citus, which sends `f.*` to a shard whose row type is
-- another (function _fact_live(pymem.facts_102008, ...) does not exist). No SET clause, so that
-- they inline (before the planner matches a partial index's predicate): `(f).expires_at` of a
-- table's row becomes the column, and the plan is the one of the condition written out
-- (tests/facts/test_facts_plans.py).
CREATE OR REPLACE FUNCTION pymem._fact_head(superseded_by bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT superseded_by IS NULL $$;

CREATE OR REPLACE FUNCTION pymem._unexpired(expires_at timestamptz, at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT expires_at IS NULL OR expires_at OPERATOR(pg_catalog.>) at $$;

CREATE OR REPLACE FUNCTION pymem._fact_kept(f anyelement, at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT pymem._unexpired(f.expires_at, at) $$;

CREATE OR REPLACE FUNCTION pymem._fact_live(f anyelement, at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT pymem._fact_head(f.superseded_by) AND pymem._fact_kept(f, at) $$;

CREATE OR REPLACE FUNCTION pymem._entry_live(expires_at timestamptz, at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT pymem._unexpired(expires_at, at) $$;

-- _local_shard(table, key): on Citus (sql/citus.sql) the name of the table's shard for a
-- distribution key when that shard is on the node, for the lexeme triggers, which fire on a
-- colocated shard; on one server the table itself.
CREATE OR REPLACE FUNCTION pymem._local_shard(p_table regclass, p_key text)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN p_table::text;
END;
$$;

-- _fact_valid(valid_from, valid_to, at): the one definition of "holds at `at`" of a fact's valid
-- time, the half-open range [valid_from, valid_to) with NULL open on its side
-- (migrations/0006_v0_2_0_memory.sql; pymem.active_facts says it in its own words, with at = now()).
-- No SET clause, so that it inlines.
CREATE OR REPLACE FUNCTION pymem._fact_valid(valid_from timestamptz, valid_to timestamptz, at timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$ SELECT (valid_from IS NULL OR valid_from OPERATOR(pg_catalog.<=) at)
         AND (valid_to IS NULL OR valid_to OPERATOR(pg_catalog.>) at) $$;

-- _valid_time(valid_from, valid_to): the checks of the valid time a write gives a fact (22023):
-- finite times, valid_from before valid_to. Either may be NULL (open on that side).
CREATE OR REPLACE FUNCTION pymem._valid_time(valid_from timestamptz, valid_to timestamptz)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF NOT pg_catalog.isfinite(coalesce(valid_from, '2000-01-01')) OR NOT pg_catalog.isfinite(coalesce(valid_to, '2000-01-01')) THEN
        RAISE EXCEPTION 'pymem: valid_from and valid_to must be finite times (or NULL: open on that side)'
            USING ERRCODE = '22023';
    END IF;
    IF valid_from >= valid_to THEN
        RAISE EXCEPTION 'pymem: valid_from % must be before valid_to %', valid_from, valid_to
            USING ERRCODE = '22023', HINT = 'A fact holds from valid_from up to, not including, valid_to.';
    END IF;
END;
$$;

-- _expiry(expires_at, ttl): the expiry a write asks for: expires_at, or now() + ttl, or NULL
-- (never) when both are NULL. Refused (22023): both given, a ttl that is not positive, an
-- expires_at that is not in the future, either beyond 100 years (NULL means never).
CREATE OR REPLACE FUNCTION pymem._expiry(expires_at timestamptz, ttl interval)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    IF expires_at IS NOT NULL AND ttl IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: pass expires_at or ttl, not both' USING ERRCODE = '22023';
    END IF;
    IF ttl IS NOT NULL THEN
        IF NOT ttl > interval '0' THEN
            RAISE EXCEPTION 'pymem: ttl must be a positive interval (got %)', ttl
                USING ERRCODE = '22023', HINT = 'Pass NULL for no expiry.';
        END IF;
        IF ttl > interval '100 years' THEN
            RAISE EXCEPTION 'pymem: ttl must be at most 100 years (got %)', ttl
                USING ERRCODE = '22023', HINT = 'Pass NULL for no expiry.';
        END IF;
        RETURN pg_catalog.now() + ttl;
    END IF;
    IF expires_at IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.isfinite(expires_at) OR expires_at > pg_catalog.now() + interval '100 years' THEN
        RAISE EXCEPTION 'pymem: expires_at must be a finite time within 100 years (got %)', expires_at
            USING ERRCODE = '22023', HINT = 'Pass NULL for no expiry.';
    END IF;
    IF expires_at <= pg_catalog.now() THEN
        RAISE EXCEPTION 'pymem: expires_at % is not in the future (now is %)', expires_at, pg_catalog.now()
            USING ERRCODE = '22023';
    END IF;
    RETURN expires_at;
END;
$$;

-- _role_member(role_name): the one match of the session's login role against a binding of
-- pymem.tenant_roles: session_user is that role or a member of it. to_regrole: NULL (no error)
-- for a dropped role, and pg_has_role of NULL is NULL: not a member.
CREATE OR REPLACE FUNCTION pymem._role_member(role_name text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.pg_has_role(session_user, pg_catalog.to_regrole(pg_catalog.quote_ident(role_name)), 'MEMBER') $$;

-- _tenant_allowed_bound(project_id): tenant_allowed once some role is bound (see below): a
-- superuser, a role bound to nothing, or a role bound to this project may serve it. Runs as
-- tenant_allowed's owner (its only caller).
CREATE OR REPLACE FUNCTION pymem._tenant_allowed_bound(project_id text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- each catalog in a statement of its own: on a Citus cluster (sql/citus.sql) a statement
    -- mixing pg_roles with a Citus table is pushed to a node as the owner, which may not read
    -- pg_authid
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r WHERE r.rolname = session_user) THEN
        RETURN true;
    END IF;
    RETURN NOT EXISTS (SELECT 1 FROM pymem.tenant_roles AS t WHERE pymem._role_member(t.role_name))
        OR EXISTS (SELECT 1 FROM pymem.tenant_roles AS t
                    WHERE t.project_id = _tenant_allowed_bound.project_id AND pymem._role_member(t.role_name));
END;
$$;

-- tenant_allowed(project_id): may the session's login role serve this project? (Created by
-- migrations/0005_security.sql; redefined here.) Superusers may; roles with no binding may
-- serve any project; a bound role (or a member of one) only its projects. Bindings whose role
-- no longer exists are ignored (a DROP ROLE never turns into an error for everyone else):
-- to_regrole gives NULL for them where a name would make pg_has_role raise 42704. Bindings are
-- by name: a role created later under a dropped role's name inherits its bindings
-- (tenant_unbind removes them).
CREATE OR REPLACE FUNCTION pymem.tenant_allowed(project_id text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- the common case, no binding at all (every role may serve every project), is one read of an
    -- empty table; RLS evaluates this once per statement of every call, so the statement stays
    -- small: executor start-up of the bound roles' sub-plans (pg_roles, pg_has_role) took over
    -- half of each call while no role was bound
    SELECT NOT EXISTS (SELECT 1 FROM pymem.tenant_roles AS t) OR pymem._tenant_allowed_bound(tenant_allowed.project_id);
$$;

-- current_tenant(): the project named by pymem.tenant, or NULL when none is set or the
-- session's role may not serve it. (Created by migrations/0005_security.sql, whose RLS policies
-- call it; redefined here like every function.) Every policy compares project_id with
-- (SELECT pymem.current_tenant()): a sub-select, evaluated once per statement (an InitPlan),
-- so it stays an index condition. LANGUAGE sql without a SET clause so that it inlines; every
-- name in it is qualified.
CREATE OR REPLACE FUNCTION pymem.current_tenant()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT CASE WHEN pg_catalog.left(pg_catalog.current_setting('pymem.tenant', true), 2) = 'p:'
                 AND pymem.tenant_allowed(pg_catalog.substr(pg_catalog.current_setting('pymem.tenant', true), 3))
                THEN pg_catalog.substr(pg_catalog.current_setting('pymem.tenant', true), 3) END;
$$;

-- _tenant_enter(project_id): called first by every API function. Names the tenant for this
-- transaction when none is set; refuses (42501) a project_id other than the tenant already
-- named, so one transaction never touches two tenants.
CREATE OR REPLACE FUNCTION pymem._tenant_enter(project_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_current text := pg_catalog.current_setting('pymem.tenant', true);
BEGIN
    IF project_id IS NULL THEN
        RETURN;  -- the caller's own checks refuse NULL with a precise message
    END IF;
    IF NOT pymem.tenant_allowed(project_id) THEN
        RAISE EXCEPTION 'pymem: role % may not serve project %', session_user, pg_catalog.quote_literal(project_id)
            USING ERRCODE = '42501', HINT = 'See pymem.tenant_roles (docs/security.md).';
    END IF;
    IF v_current IS NULL OR v_current = '' THEN  -- an assignment, a simple expression (PERFORM would run a query)
        v_current := pg_catalog.set_config('pymem.tenant', 'p:' || project_id, true);
    ELSIF v_current <> 'p:' || project_id THEN
        RAISE EXCEPTION 'pymem: this transaction belongs to another tenant than project %', pg_catalog.quote_literal(project_id)
            USING ERRCODE = '42501',
                  HINT = 'One transaction serves one project: commit, or call pymem.set_tenant() for the right one.';
    END IF;
END;
$$;

-- _project_check(project_id): a project id is a string of at most 256 characters, not '*'.
CREATE OR REPLACE FUNCTION pymem._project_check(project_id text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF project_id IS NULL OR project_id = '*' OR pg_catalog.length(project_id) > 256 THEN
        RAISE EXCEPTION 'pymem: project_id must be a string of at most 256 characters other than ''*'''
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _check_batch: what one batch call takes at most (caller, what its elements are, how many it
-- was given, its limit): the bound on what one call makes the server hold and do. 22023 past it.
CREATE OR REPLACE FUNCTION pymem._check_batch(caller text, elements text, n integer, max_n integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF n > max_n THEN
        RAISE EXCEPTION 'pymem: % takes at most % % per call, not %', caller, max_n, elements, n
            USING ERRCODE = '22023', HINT = pg_catalog.format('Send them in batches of at most %s.', max_n);
    END IF;
END;
$$;

-- _json_bounded(doc, what, max_bytes): true when the JSON document doc (NULL: true) nests at most
-- 64 objects and arrays deep and its text is at most max_bytes bytes; else 22023 naming `what`.
-- The one bound of every JSON document pymem stores: the CHECK constraints of facts.metadata,
-- messages.metadata and store_messages.message (migrations/0007_v0_2_0_operations.sql) call it, so
-- every write path (API calls, bulk writes, imports) is bounded, and _store_put calls it for a
-- store's json documents. 64 levels: every reader can read back what any writer stored (Python's
-- json reads ~900 levels under its default recursion limit of 1000, with room left for the
-- caller's own recursion); a document one client wrote never breaks another's reads. The depth
-- test reads at most 64 levels of the document, however deep it is.
CREATE OR REPLACE FUNCTION pymem._json_bounded(doc jsonb, what text, max_bytes integer DEFAULT 1048576)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF doc IS NULL THEN
        RETURN true;
    END IF;
    IF pg_catalog.jsonb_typeof(doc) IN ('object', 'array')
       AND pg_catalog.jsonb_path_exists(doc, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION 'pymem: % nests objects and arrays more than 64 deep', what
            USING ERRCODE = '22023', HINT = 'A stored JSON document nests at most 64 levels (docs/errors.md).';
    END IF;
    IF pg_catalog.octet_length(doc::text) > max_bytes THEN
        RAISE EXCEPTION 'pymem: % is % bytes as JSON text; the limit is %', what, pg_catalog.octet_length(doc::text), max_bytes
            USING ERRCODE = '22023';
    END IF;
    RETURN true;
END;
$$;

-- _check_limit: a row limit between 0 and 10000.
CREATE OR REPLACE FUNCTION pymem._check_limit(name text, value integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF value IS NULL OR value < 0 OR value > 10000 THEN
        RAISE EXCEPTION 'pymem: % must be between 0 and 10000, not %', name, coalesce(value::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    RETURN value;
END;
$$;

-- _embedder_dimension(project_id, name): the dimension a project's embedder was registered with
-- (pymem.embedders), NULL when it is not registered. On Citus, citus.sql reads the node's own copy
-- of that reference table instead (one read of a shard, not a statement Citus routes).
CREATE OR REPLACE FUNCTION pymem._embedder_dimension(p_project_id text, p_name text)
RETURNS integer
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN (SELECT e.dimension FROM pymem.embedders AS e WHERE e.project_id = p_project_id AND e.name = p_name);
END;
$$;

-- _embedding_register: registers an embedder's dimension (per project) on first use and refuses
-- a vector of another size, or a zero vector (its cosine distance is NaN). pgvector itself
-- refuses NaN and Infinity (22000). NULL embedding: nothing to check.
CREATE OR REPLACE FUNCTION pymem._embedding_register(project_id text, embedder text, embedding vector)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_dim integer;
BEGIN
    IF embedding IS NULL THEN
        RETURN;
    END IF;
    IF embedder IS NULL OR embedder = '' OR pg_catalog.length(embedder) > 200 THEN
        RAISE EXCEPTION 'pymem: an embedding needs the name of the embedder that made it (1..200 characters)'
            USING ERRCODE = '22023';
    END IF;
    IF pymem._vector_norm(embedding) = 0 THEN
        RAISE EXCEPTION 'pymem: a zero vector has no direction; cosine similarity is undefined for it'
            USING ERRCODE = '22023';
    END IF;
    -- a known embedder (every write but its first) is one read; the first registers it
    v_dim := pymem._embedder_dimension(_embedding_register.project_id, embedder);
    IF v_dim IS NULL THEN
        INSERT INTO pymem.embedders AS e (project_id, name, dimension) VALUES (project_id, embedder, pymem._vector_dims(embedding))
        ON CONFLICT ON CONSTRAINT embedders_pkey DO NOTHING;
        v_dim := pymem._embedder_dimension(_embedding_register.project_id, embedder);
    END IF;
    IF v_dim <> pymem._vector_dims(embedding) THEN
        RAISE EXCEPTION 'pymem: embedder % makes % dimensions; this vector has %', embedder, v_dim, pymem._vector_dims(embedding)
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _embeddings_validate: the checks of _embedding_register for a batch, without registering the
-- embedder: every vector non-NULL, not zero, all of one dimension, and of the registered dimension when
-- the embedder is registered already. The batch writers (fact_embeddings_put,
-- message_embeddings_put, facts_add_many, messages_add_many) call it first and register the embedder with _embedding_register only
-- once a vector was actually stored, so that a call naming no existing row (a typo, another
-- user's ids) cannot fix a model's dimension for the whole project.
CREATE OR REPLACE FUNCTION pymem._embeddings_validate(project_id text, embedder text, embeddings vector[])
RETURNS void
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_dim integer;
    v_first integer;
BEGIN
    IF coalesce(pg_catalog.cardinality(embeddings), 0) = 0 THEN
        RETURN;
    END IF;
    IF embedder IS NULL OR embedder = '' OR pg_catalog.length(embedder) > 200 THEN
        RAISE EXCEPTION 'pymem: an embedding needs the name of the embedder that made it (1..200 characters)'
            USING ERRCODE = '22023';
    END IF;
    v_dim := pymem._embedder_dimension(_embeddings_validate.project_id, embedder);
    -- by index: a DECLAREd variable could not name pgvector's type (it is not on search_path)
    -- each error names the element (the batch writers' arrays run in parallel with it)
    FOR i IN 1 .. pg_catalog.cardinality(embeddings) LOOP
        IF embeddings[i] IS NULL THEN
            RAISE EXCEPTION 'pymem: element % (of %): embeddings must not contain NULL', i, pg_catalog.cardinality(embeddings)
                USING ERRCODE = '22023';
        END IF;
        IF pymem._vector_norm(embeddings[i]) = 0 THEN
            RAISE EXCEPTION 'pymem: element % (of %): a zero vector has no direction; cosine similarity is undefined for it',
                    i, pg_catalog.cardinality(embeddings)
                USING ERRCODE = '22023';
        END IF;
        v_first := coalesce(v_first, pymem._vector_dims(embeddings[i]));
        IF pymem._vector_dims(embeddings[i]) <> coalesce(v_dim, v_first) THEN
            RAISE EXCEPTION 'pymem: element % (of %): embedder % makes % dimensions; this vector has %',
                    i, pg_catalog.cardinality(embeddings), embedder, coalesce(v_dim, v_first), pymem._vector_dims(embeddings[i])
                USING ERRCODE = '22023';
        END IF;
    END LOOP;
END;
$$;

-- _query_check: a query vector must exist, not be zero, and match the embedder's dimension.
CREATE OR REPLACE FUNCTION pymem._query_check(project_id text, embedder text, query vector)
RETURNS void
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_dim integer;
BEGIN
    IF query IS NULL THEN
        RAISE EXCEPTION 'pymem: the query vector must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF pymem._vector_norm(query) = 0 THEN
        RAISE EXCEPTION 'pymem: a zero query vector has no direction' USING ERRCODE = '22023';
    END IF;
    SELECT d.dimension INTO v_dim FROM pymem.embedders AS d
     WHERE d.project_id = _query_check.project_id AND d.name = embedder;
    IF FOUND AND v_dim <> pymem._vector_dims(query) THEN
        RAISE EXCEPTION 'pymem: embedder % makes % dimensions; the query vector has %', embedder, v_dim, pymem._vector_dims(query)
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _lexemes(config, content): a message's or a fact's content as a tsvector in a text search
-- configuration (NULL: english, the default: on the development data it found more of the
-- evidence than 'simple', docs/sql.md "Recall"). Callers pass their project's configuration
-- (pymem.text_search, 0006_v0_2_0_memory), read once per statement: _text_search_config(project_id), or a join
-- with pymem.text_search over many rows. The stored lexemes (message_lexemes, fact_lexemes,
-- message_embeddings.lexemes) and every query's terms come from this one function, so the index
-- and the queries agree.
CREATE OR REPLACE FUNCTION pymem._lexemes(config regconfig, content text)
RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN pg_catalog.to_tsvector(coalesce(config, 'pg_catalog.english'::pg_catalog.regconfig), content);
END;
$$;

-- _text_search_config(project_id): the project's text search configuration, NULL for the default.
CREATE OR REPLACE FUNCTION pymem._text_search_config(project_id text)
RETURNS regconfig
LANGUAGE sql STABLE PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT t.config::pg_catalog.regconfig FROM pymem.text_search AS t WHERE t.project_id = _text_search_config.project_id;
$$;

-- _term_quoted(lexeme): a lexeme as a tsquery term, quoted (one term, whatever it holds).
CREATE OR REPLACE FUNCTION pymem._term_quoted(lexeme text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT '''' OPERATOR(pg_catalog.||) pg_catalog.replace(pg_catalog.replace(lexeme, '\', '\\'), '''', '''''')
           OPERATOR(pg_catalog.||) ''''
$$;

-- _lexeme_tokens(lexemes): a tsvector's length in tokens (every position of every lexeme), the
-- document length of BM25.
CREATE OR REPLACE FUNCTION pymem._lexeme_tokens(lexemes tsvector)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT coalesce(pg_catalog.sum(coalesce(pg_catalog.cardinality(u.positions), 1)), 0)::integer
      FROM pg_catalog.unnest(lexemes) AS u;
$$;

-- _query_terms(project_id, text): a recall query's terms, one tsquery per distinct lexeme of the
-- text in the project's text search configuration (empty for stop words alone).
CREATE OR REPLACE FUNCTION pymem._query_terms(p_project_id text, p_text text)
RETURNS tsquery[]
LANGUAGE sql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT ARRAY(SELECT pymem._term_quoted(x.x)::tsquery
                   FROM pg_catalog.unnest(pg_catalog.tsvector_to_array(
                            pymem._lexemes(pymem._text_search_config(p_project_id), p_text))) AS x(x))
$$;

-- text_search_configure: the text search configuration of a project's lexemes (hybrid recall's
-- words), e.g. 'german', 'simple' or a DBA's own; re-indexes the project's stored messages and
-- facts with it in the same transaction (a long one for a big project: every message and fact is
-- read) and returns how many rows it re-indexed (0 when the configuration was already that one).
-- Heavy users' words (pymem.recall_terms) are rebuilt from the new lexemes too (not counted).
-- Writes to messages, vectors and facts (of every project) wait while it runs. An unknown
-- configuration is refused (22023); a DBA's own is named with its schema ('public.mine').
-- Administrators only (the owner role and its members), like store_configure: a change costs a
-- full re-index.
--   SELECT pymem.text_search_configure('german', project_id => 'acme');
CREATE OR REPLACE FUNCTION pymem.text_search_configure(config text, project_id text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_config regconfig;
    v_old regconfig;
    v_messages bigint;
    v_vectors bigint;
    v_facts bigint;
BEGIN
    PERFORM pymem._tenant_enter(text_search_configure.project_id);
    BEGIN
        v_config := text_search_configure.config::regconfig;
    EXCEPTION WHEN undefined_object OR invalid_name OR invalid_text_representation OR syntax_error THEN
        v_config := NULL;
    END;
    IF v_config IS NULL THEN
        RAISE EXCEPTION 'pymem: % is not a text search configuration of this database', coalesce(pg_catalog.quote_literal(text_search_configure.config), 'NULL')
            USING ERRCODE = '22023', HINT = 'SELECT cfgname FROM pg_ts_config lists them (english, german, simple, ...).';
    END IF;
    -- no message, vector or fact is written meanwhile (whatever the project): a writer that read
    -- the old configuration and commits after this re-index would keep it for good. SHARE mode
    -- waits for the writers in flight and holds new ones until this commits.
    LOCK TABLE pymem.messages, pymem.message_embeddings, pymem.facts IN SHARE MODE;
    SELECT coalesce(pymem._text_search_config(text_search_configure.project_id), 'pg_catalog.english'::regconfig)
      INTO v_old;
    INSERT INTO pymem.text_search AS t (project_id, config) VALUES (text_search_configure.project_id, v_config::text)
    ON CONFLICT (project_id) DO UPDATE SET config = excluded.config, updated_at = pg_catalog.clock_timestamp();
    IF v_old = v_config THEN
        RETURN 0;
    END IF;
    UPDATE pymem.message_lexemes AS l
       SET lexemes = v.lexemes, tokens = pymem._lexeme_tokens(v.lexemes)
      FROM pymem.messages AS m CROSS JOIN LATERAL (SELECT pymem._lexemes(v_config, m.content) AS lexemes OFFSET 0) AS v
     WHERE m.project_id = text_search_configure.project_id AND l.project_id = m.project_id
       AND l.user_id = m.user_id AND l.thread_id = m.thread_id AND l.seq = m.seq;
    GET DIAGNOSTICS v_messages = ROW_COUNT;
    UPDATE pymem.message_embeddings AS e
       SET lexemes = l.lexemes, tokens = l.tokens
      FROM pymem.message_lexemes AS l
     WHERE l.project_id = text_search_configure.project_id AND e.project_id = l.project_id
       AND e.user_id = l.user_id AND e.thread_id = l.thread_id AND e.seq = l.seq;
    GET DIAGNOSTICS v_vectors = ROW_COUNT;
    -- heavy users' words (recall_terms, 0006_v0_2_0_memory) follow the new lexemes
    DELETE FROM pymem.recall_terms AS t WHERE t.project_id = text_search_configure.project_id;
    INSERT INTO pymem.recall_terms AS t (project_id, user_id, lexeme, thread_id, seq)
    SELECT l.project_id, l.user_id, w.lexeme, l.thread_id, l.seq
      FROM pymem.message_lexemes AS l
     CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.tsvector_to_array(l.lexemes)) AS w(lexeme)
     WHERE l.project_id = text_search_configure.project_id
       AND l.user_id IN (SELECT r.user_id FROM pymem.recall_indexes AS r WHERE r.project_id = text_search_configure.project_id);
    UPDATE pymem.recall_indexes AS r SET terms_filled = true
     WHERE r.project_id = text_search_configure.project_id AND NOT r.terms_filled;
    UPDATE pymem.fact_lexemes AS l
       SET lexemes = v.lexemes, tokens = pymem._lexeme_tokens(v.lexemes)
      FROM pymem.facts AS f CROSS JOIN LATERAL (SELECT pymem._lexemes(v_config, f.content) AS lexemes OFFSET 0) AS v
     WHERE f.project_id = text_search_configure.project_id AND l.project_id = f.project_id
       AND l.scope = f.scope AND l.scope_id = f.scope_id AND l.fact_id = f.id;
    GET DIAGNOSTICS v_facts = ROW_COUNT;
    RETURN v_messages + v_vectors + v_facts;
END;
$$;
