-- facts_write.sql: a fact write (pymem.fact_write, migrations/0051_fact_write.sql), the value
-- fact_add, fact_supersede, facts_add_many and fact_lookup take as `write`: fact_write(), its
-- builder, which holds its only SQL defaults (Python's pymem.FactWrite mirrors it field by field,
-- tests/python/test_options.py); _fact_write_check and _fact_add_checks, its checks; _fact_insert
-- and _facts_insert_many, the two statements that store a write as fact rows (one fact, a batch),
-- and _fact_write_of, a stored fact's write: the one place that maps its fields to the columns of
-- pymem.facts. A new attribute of a write is
-- a field of the type, a parameter of the builder, a check and a column here. Part of durable facts
-- (facts.sql, whose checks it calls; facts_add.sql, facts_versions.sql and facts_bulk.sql call
-- it). Re-applied on every migrate (before the files whose signatures name fact_write() in a
-- DEFAULT: api_order in pymem/migrations.py); the locks are the writers' (facts.sql).
--
-- Errors: 22023 invalid argument.

-- fact_write: a fact write, the value fact_add, fact_supersede, facts_add_many and fact_lookup take
-- as `write` (their DEFAULT is fact_write()); every parameter is optional, and these defaults are
-- the only ones. confidence 0..1; source manual, learned or trace; trace_id (at most 256
-- characters); metadata a JSON object (fact_supersede: NULL keeps the old version's); created_at
-- when the fact was learned (NULL: now; finite, at most 5 minutes ahead); expires_at, or ttl (an
-- interval from now), when it expires (NULL: never; one of the two); valid_from / valid_to when it
-- holds in the world (NULL: open on that side). Unchecked here: the functions that take it check it
-- (22023). No SET clause, so that it inlines into the call.
--   SELECT * FROM pymem.fact_add('user', 'alice', 'Is in Lisbon', write => pymem.fact_write(ttl => '7 days'));
CREATE OR REPLACE FUNCTION pymem.fact_write(
    confidence double precision DEFAULT 1.0, source text DEFAULT 'manual', trace_id text DEFAULT NULL,
    metadata jsonb DEFAULT '{}'::jsonb, created_at timestamptz DEFAULT NULL, expires_at timestamptz DEFAULT NULL,
    ttl interval DEFAULT NULL, valid_from timestamptz DEFAULT NULL, valid_to timestamptz DEFAULT NULL)
RETURNS pymem.fact_write
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY INVOKER
AS $$
    SELECT ROW(confidence, source, trace_id, metadata, created_at, expires_at, ttl, valid_from, valid_to)::pymem.fact_write
$$;

-- _fact_write_check(write): a fact write checked, and resolved as it is stored: its expiry the
-- time asked for (expires_at, or now() + ttl: pymem._expiry; ttl then NULL). 22023 for a NULL
-- write, a confidence outside 0..1, an unknown source, a trace_id over 256 characters, metadata
-- that is not an object, a created_at in the future (pymem._fact_check_time), an expiry
-- pymem._expiry refuses, a valid time pymem._valid_time refuses.
CREATE OR REPLACE FUNCTION pymem._fact_write_check(p_write pymem.fact_write)
RETURNS pymem.fact_write
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_write pymem.fact_write := p_write;
BEGIN
    IF p_write IS NULL THEN  -- NULL, or a row of NULLs
        RAISE EXCEPTION 'pymem: write must be a fact write (pymem.fact_write(...)), not NULL' USING ERRCODE = '22023';
    END IF;
    IF p_write.confidence IS NULL OR p_write.confidence = 'NaN'::float8 OR p_write.confidence < 0 OR p_write.confidence > 1 THEN
        RAISE EXCEPTION 'pymem: confidence must be between 0 and 1, not %', p_write.confidence USING ERRCODE = '22023';
    END IF;
    IF p_write.source IS NULL OR p_write.source NOT IN ('manual', 'learned', 'trace') THEN
        RAISE EXCEPTION 'pymem: source must be manual, learned or trace, not %',
                coalesce(pg_catalog.quote_literal(p_write.source), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.length(p_write.trace_id) > 256 THEN
        RAISE EXCEPTION 'pymem: trace_id is longer than 256 characters' USING ERRCODE = '22023';
    END IF;
    IF p_write.metadata IS NULL OR pg_catalog.jsonb_typeof(p_write.metadata) <> 'object' THEN
        RAISE EXCEPTION 'pymem: metadata must be a JSON object' USING ERRCODE = '22023';
    END IF;
    IF p_write.created_at IS NOT NULL THEN
        PERFORM pymem._fact_check_time(p_write.created_at);
    END IF;
    IF p_write.expires_at IS NOT NULL OR p_write.ttl IS NOT NULL THEN
        v_write.expires_at := pymem._expiry(p_write.expires_at, p_write.ttl);
        v_write.ttl := NULL;
    END IF;
    IF p_write.valid_from IS NOT NULL OR p_write.valid_to IS NOT NULL THEN
        PERFORM pymem._valid_time(p_write.valid_from, p_write.valid_to);
    END IF;
    RETURN v_write;
END;
$$;

-- _fact_add_checks: what fact_add checks before anything else (fact_lookup too, so that a
-- re-add it answers is refused exactly where fact_add would refuse it; fact_supersede for the new
-- version, with no cap): the tenant entered, the subject, the content (trimmed by the caller:
-- pymem._fact_trim), the write (_fact_write_check), the cap. Returns the write resolved as
-- _fact_write_check resolves it.
-- Valid arguments (every call but a refused one) are one expression, the conjunction of what the
-- checks accept, and a write with a time is then resolved (_fact_write_check); any other (a NULL
-- in it included) goes through the checks one by one, which raise the precise error in their order. PL/pgSQL
-- re-initialises every expression of a function in each new transaction, and a nested call with a
-- SET clause pushes a GUC level: the nested checkers and their ~25 expressions cost a re-add server
-- CPU (docs/performance.md).
CREATE OR REPLACE FUNCTION pymem._fact_add_checks(
    p_scope text, p_scope_id text, p_content text, p_project_id text, p_write pymem.fact_write, p_max_learned integer)
RETURNS pymem.fact_write
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM pymem._tenant_enter(p_project_id);
    IF coalesce(p_scope IN ('agent', 'user', 'project') AND p_project_id <> '*' AND pg_catalog.length(p_project_id) <= 256
                AND p_scope_id <> '*' AND pg_catalog.length(p_scope_id) <= 256 AND (p_scope_id <> '' OR p_scope = 'agent')
                AND p_content <> '' AND pg_catalog.length(p_content) <= 65536
                AND p_write.confidence >= 0 AND p_write.confidence <= 1 AND p_write.source IN ('manual', 'learned', 'trace')
                AND (p_write.trace_id IS NULL OR pg_catalog.length(p_write.trace_id) <= 256)
                AND pg_catalog.jsonb_typeof(p_write.metadata) = 'object'
                AND (p_max_learned IS NULL OR p_max_learned >= 1), false) THEN
        IF p_write.created_at IS NULL AND p_write.expires_at IS NULL AND p_write.ttl IS NULL
           AND p_write.valid_from IS NULL AND p_write.valid_to IS NULL THEN
            RETURN p_write;  -- nothing to resolve
        END IF;
        RETURN pymem._fact_write_check(p_write);  -- its times
    END IF;
    PERFORM pymem._fact_check_subject(p_scope, p_scope_id, p_project_id, 'exact');
    IF NOT p_write IS NULL THEN  -- the content first (a NULL write: _fact_write_check says so)
        PERFORM pymem._fact_check_values(p_content, p_write.confidence, p_write.source, p_write.trace_id, p_write.metadata);
    END IF;
    IF p_max_learned < 1 THEN
        RAISE EXCEPTION 'pymem: max_learned must be >= 1, or NULL for no cap' USING ERRCODE = '22023';
    END IF;
    RETURN pymem._fact_write_check(p_write);
END;
$$;

-- _fact_insert: a new active fact of the subject with this content (trimmed) and key, written as
-- `write` (checked and resolved: _fact_add_checks) says; its id, or NULL when an active fact of the
-- subject has that key already (ON CONFLICT on facts_subject_content_key: the caller looks it up).
-- created_at NULL is now (the clock, not the transaction's start). fact_add and fact_supersede
-- write through it, and _fact_restate (facts_time.sql) with p_superseded_by: a row written as
-- superseded by that one at the write's created_at (given), which it then makes the active one;
-- _facts_insert_many below is its batch twin.
CREATE OR REPLACE FUNCTION pymem._fact_insert(
    p_project_id text, p_scope text, p_scope_id text, p_content text, p_key bytea, p_write pymem.fact_write,
    p_superseded_by bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, trace_id, metadata,
                                  created_at, expires_at, valid_from, valid_to, superseded_by, superseded_at)
    VALUES (p_project_id, p_scope, p_scope_id, p_content, p_key, p_write.confidence, p_write.source, p_write.trace_id,
            p_write.metadata, coalesce(p_write.created_at, pg_catalog.clock_timestamp()), p_write.expires_at,
            p_write.valid_from, p_write.valid_to, p_superseded_by,
            CASE WHEN p_superseded_by IS NOT NULL THEN p_write.created_at END)
    ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING
    RETURNING f.id INTO v_id;
    RETURN v_id;
END;
$$;

-- _fact_write_of(fact): the write a stored fact was written with, as _fact_insert would write it
-- again (ttl NULL: its expiry is expires_at); _fact_restate copies a version through it.
CREATE OR REPLACE FUNCTION pymem._fact_write_of(p_fact pymem.facts)
RETURNS pymem.fact_write
LANGUAGE sql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT ROW(p_fact.confidence, p_fact.source, p_fact.trace_id, p_fact.metadata, p_fact.created_at, p_fact.expires_at,
               NULL, p_fact.valid_from, p_fact.valid_to)::pymem.fact_write
$$;

-- _facts_insert_many: facts_add_many's one statement, after its checks and locks, each element
-- written as `write` (checked and resolved) says: each element's fact where it is active already
-- (one index read), the others inserted (the first occurrence of each subject and content in the
-- batch); ids[i] and created[i] for element i, ids[i] NULL where a concurrent writer got in
-- between (facts_add_many adds those one at a time). On Citus, citus.sql replaces it with one that
-- leaves every element to that loop (its planner refuses this statement's lateral outer join over
-- distributed tables).
CREATE OR REPLACE FUNCTION pymem._facts_insert_many(
    p_project_id text, p_scope text, p_scope_ids text[], p_contents text[], p_write pymem.fact_write,
    OUT ids bigint[], OUT created boolean[])
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    -- one statement: each element's fact where it is there already (one index read), the others
    -- inserted (the first occurrence of each subject and content in the batch)
    WITH input AS MATERIALIZED (
        SELECT t.i, t.scope_id, t.content, t.key, f.id AS known
          FROM (SELECT u.i::integer AS i, u.s AS scope_id, u.content, pymem.fact_key(u.content) AS key
                  FROM (SELECT r.*, pymem._fact_trim(r.c) AS content
                          FROM ROWS FROM (pg_catalog.unnest(p_scope_ids), pg_catalog.unnest(p_contents))
                               WITH ORDINALITY AS r(s, c, i)
                        OFFSET 0) AS u  -- OFFSET 0: one trim and one key per element
                OFFSET 0) AS t
          -- each element's fact by key (facts_subject_content_key, 0006_v0_2_0_memory); a plain join could be
          -- planned as a scan of its subjects' facts
          LEFT JOIN LATERAL (SELECT f.id FROM pymem.facts AS f
                              WHERE f.project_id = p_project_id AND f.scope = p_scope COLLATE "C"
                                AND f.scope_id = t.scope_id AND f.content_key = t.key
                                AND pymem._fact_live(f, pg_catalog.now())  -- an expired one: left to fact_add, which frees its key
                              LIMIT 1) AS f ON true),
    firsts AS MATERIALIZED (
        SELECT DISTINCT ON (x.scope_id, x.key) x.* FROM input AS x WHERE x.known IS NULL ORDER BY x.scope_id, x.key, x.i),
    ins AS (
        INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, trace_id,
                                      metadata, created_at, expires_at, valid_from, valid_to)
        SELECT p_project_id, p_scope, x.scope_id, x.content, x.key, p_write.confidence, p_write.source, p_write.trace_id,
               p_write.metadata, coalesce(p_write.created_at, pg_catalog.clock_timestamp()), p_write.expires_at,
               p_write.valid_from, p_write.valid_to
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
