-- facts_add.sql: adding one fact: fact_add (a new fact, or the active one with the same content;
-- a new valid time restates it, facts_time.sql; a shorter expiry reaches its history,
-- facts_versions.sql; a learned fact keeps its subject under the cap, facts_learned.sql) and
-- fact_lookup (what fact_add would return, without writing). What a write carries, its checks and
-- the row it becomes are in facts_write.sql; the content key and the subject lock in facts.sql;
-- many facts in one call: facts_bulk.sql. Part of durable facts (facts.sql: subjects, equality,
-- locking). Re-applied on every migrate; called by pymem/facts.py and by any SQL client
-- (docs/sql.md "Facts").
--
-- Errors: 22023 invalid argument; 40001 the fact to restate went meanwhile (retry).

-- fact_add: adds a fact, or returns the active fact of the subject with the same content.
--   SELECT * FROM pymem.fact_add(scope => 'user', scope_id => 'alice', content => 'Prefers email');
-- created is false when the fact already existed. write (pymem.fact_write(...), facts_write.sql)
-- is what the fact carries beside its content: confidence, source, trace_id, metadata, created_at,
-- its expiry and its valid time. A learned fact (source 'learned') trims the subject's active
-- learned facts to the newest max_learned (NULL: no cap) in this transaction; manual and trace
-- facts are never touched by the cap. embedding/embedder, when given, are stored with the fact (or
-- added to an existing one that lacks them). The write's expires_at, or ttl (an interval from now),
-- makes the fact expire (NULL: never): once expired it is invisible to every read and the same
-- content can be added again (the expired fact, with its history, is deleted by that add;
-- pymem.purge deletes the others). A re-add that passes an expiry gives it to the fact (a sliding
-- TTL); one that passes none keeps it.
--   SELECT * FROM pymem.fact_add('user', 'alice', 'Is in Lisbon this week', write => pymem.fact_write(ttl => '7 days'));
-- The write's valid_from / valid_to (NULL: open on that side) say when the fact holds in the world
-- (migrations/0006_v0_2_0_memory.sql): reads show a fact only while it holds (facts_at reads
-- another time). A re-add that gives a valid time the fact does not have restates it: a new version
-- with the valid time given (a side not given is kept), the old version in its history (created is
-- true: a row was added); one that gives none keeps it.
--   SELECT * FROM pymem.fact_add('user', 'alice', 'Lives in Oslo',
--                                write => pymem.fact_write(valid_from => '2019-08-01', valid_to => '2024-05-01'));
CREATE OR REPLACE FUNCTION pymem.fact_add(
    scope text,
    scope_id text,
    content text,
    project_id text DEFAULT '',
    write pymem.fact_write DEFAULT pymem.fact_write(),
    max_learned integer DEFAULT 200,
    embedding vector DEFAULT NULL,
    embedder text DEFAULT NULL)
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
    v_have integer;  -- the dimension of the fact's vector from embedder, if it has one
    v_expires timestamptz;  -- the expiry asked for (NULL: none)
    v_was timestamptz;  -- the existing fact's expiry
    v_kept boolean;  -- the existing fact is kept (pymem._fact_kept: not gone for reads)
    v_valid boolean;  -- a valid time given
BEGIN
    v_content := pymem._fact_trim(fact_add.content);
    -- checked, its expiry resolved (facts_write.sql)
    write := pymem._fact_add_checks(fact_add.scope, fact_add.scope_id, v_content, fact_add.project_id, fact_add.write,
                                    fact_add.max_learned);
    v_key := pymem.fact_key(v_content);
    v_expires := write.expires_at;
    v_valid := write.valid_from IS NOT NULL OR write.valid_to IS NOT NULL;
    IF fact_add.embedding IS NOT NULL AND NOT (write.source = 'learned' AND fact_add.max_learned IS NOT NULL) THEN
        -- the checks of _embedding_register that need no read, as one expression (it raises
        -- the precise error)
        IF NOT coalesce(fact_add.embedder <> '' AND pg_catalog.length(fact_add.embedder) <= 200
                        AND pymem._vector_norm(fact_add.embedding) <> 0, false) THEN
            PERFORM pymem._embedding_register(fact_add.project_id, fact_add.embedder, fact_add.embedding);
        END IF;
        -- the fact and the dimension of its vector from embedder, in one read: a re-add of a fact
        -- that has its vector (the idempotent call) then ends here, without the registry read and
        -- the insert attempt of the vector (docs/performance.md, "Measured in the SQL"). Every
        -- stored vector was checked against the registry, whose rows are never changed or
        -- deleted: its dimension is the registered one. (scope compared in "C", as facts_subject_content_key holds it: only that
        -- index serves the lookup, see 0006_v0_2_0_memory)
        SELECT f.id, pymem._vector_dims(e.embedding), f.expires_at, pymem._fact_kept(f, pg_catalog.now())
          INTO v_id, v_have, v_was, v_kept
          FROM pymem.facts AS f
          LEFT JOIN pymem.fact_embeddings AS e
            ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id AND e.fact_id = f.id
           AND e.embedder = fact_add.embedder
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C"
           AND f.scope_id = fact_add.scope_id AND f.content_key = v_key AND pymem._fact_head(f.superseded_by);
        IF v_have = pymem._vector_dims(fact_add.embedding) AND v_expires IS NULL AND NOT v_valid
           AND v_kept THEN
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
        IF write.source = 'learned' AND fact_add.max_learned IS NOT NULL THEN
            -- one learned writer per subject at a time, so the cap holds under concurrency
            -- (registered first, as always: a first registration waits for nobody's subject lock)
            PERFORM pymem._subject_lock(fact_add.project_id, fact_add.scope, fact_add.scope_id);
        END IF;
        -- an idempotent re-add (the fact is there) is one index read: no insert attempt, so no
        -- statement trigger either
        SELECT f.id, f.expires_at, pymem._fact_kept(f, pg_catalog.now()) INTO v_id, v_was, v_kept FROM pymem.facts AS f
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C" AND f.scope_id = fact_add.scope_id
           AND f.content_key = v_key AND pymem._fact_head(f.superseded_by);
    END IF;
    v_created := false;
    IF v_id IS NOT NULL AND NOT v_kept THEN
        PERFORM pymem._fact_expired_free(fact_add.project_id, fact_add.scope, fact_add.scope_id, v_id);
        v_id := NULL;
    END IF;
    WHILE v_id IS NULL LOOP
        v_id := pymem._fact_insert(fact_add.project_id, fact_add.scope, fact_add.scope_id, v_content, v_key, write);
        v_created := v_id IS NOT NULL;
        EXIT WHEN v_created;
        -- a concurrent writer just committed the same fact: return its id
        SELECT f.id, f.expires_at, pymem._fact_kept(f, pg_catalog.now()) INTO v_id, v_was, v_kept FROM pymem.facts AS f
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C" AND f.scope_id = fact_add.scope_id
           AND f.content_key = v_key AND pymem._fact_head(f.superseded_by);
        -- not found: it was superseded or forgotten in between, try the insert again; expired:
        -- it goes, and the insert is tried again
        IF v_id IS NOT NULL AND NOT v_kept THEN
            PERFORM pymem._fact_expired_free(fact_add.project_id, fact_add.scope, fact_add.scope_id, v_id);
            v_id := NULL;
        END IF;
    END LOOP;
    -- a re-add that passes an expiry gives it to the fact (and to its history where that would
    -- outlive it: _fact_history_expire)
    IF NOT v_created AND v_expires IS NOT NULL AND v_was IS DISTINCT FROM v_expires THEN
        UPDATE pymem.facts AS f SET expires_at = v_expires
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope AND f.scope_id = fact_add.scope_id
           AND f.id = v_id;
        IF v_was IS NULL OR v_was > v_expires THEN
            PERFORM pymem._fact_history_expire(fact_add.project_id, fact_add.scope, fact_add.scope_id, v_id, v_expires);
        END IF;
    END IF;
    -- a re-add that gives another valid time restates the fact: a new version with that valid
    -- time (what it does not give, it keeps), the old one in its history (_fact_restate)
    IF NOT v_created AND v_valid THEN
        SELECT r.id, r.created INTO v_id, v_created
          FROM pymem._fact_restate(fact_add.project_id, fact_add.scope, fact_add.scope_id, v_key,
                                   write.valid_from, write.valid_to, write.created_at) AS r;
    END IF;
    IF fact_add.embedding IS NOT NULL THEN
        INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
        VALUES (fact_add.project_id, fact_add.scope, fact_add.scope_id, v_id, fact_add.embedder, fact_add.embedding)
        ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
    END IF;
    IF v_created AND write.source = 'learned' AND fact_add.max_learned IS NOT NULL THEN
        PERFORM pymem._learned_cap(fact_add.project_id, fact_add.scope, fact_add.scope_id, fact_add.max_learned);
    END IF;
    id := v_id;
    created := v_created;
    RETURN NEXT;
END;
$$;

-- fact_lookup: what fact_add would return for a fact that is there already, without writing:
-- the active fact of the subject with this content (fact_add's equality) and whether it has a
-- vector from embedder; no row when there is none (or it has expired). The same arguments and checks as fact_add
-- (22023 for what fact_add refuses), so a caller that computes vectors (pymem.Memory.persist)
-- asks first and calls its embedder, and fact_add, only for a new fact or one without a vector:
-- an idempotent re-add costs one read and no model call.
--   SELECT * FROM pymem.fact_lookup(scope => 'user', scope_id => 'alice', content => 'Prefers email', embedder => 'hash-384-v1');
CREATE OR REPLACE FUNCTION pymem.fact_lookup(
    scope text,
    scope_id text,
    content text,
    project_id text DEFAULT '',
    write pymem.fact_write DEFAULT pymem.fact_write(),
    max_learned integer DEFAULT 200,
    embedder text DEFAULT NULL)
RETURNS TABLE (id bigint, embedded boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_content text;
    v_id bigint;
    v_embedded boolean;
BEGIN
    v_content := pymem._fact_trim(fact_lookup.content);
    PERFORM pymem._fact_add_checks(fact_lookup.scope, fact_lookup.scope_id, v_content, fact_lookup.project_id,
                                   fact_lookup.write, fact_lookup.max_learned);
    IF fact_lookup.embedder = '' OR pg_catalog.length(fact_lookup.embedder) > 200 THEN
        RAISE EXCEPTION 'pymem: an embedder is named by 1..200 characters' USING ERRCODE = '22023';
    END IF;
    -- fact_add's lookup (scope in "C": only facts_subject_content_key serves it) and the vector's,
    -- in one statement (two cost more: docs/performance.md, "Measured in the SQL")
    SELECT f.id, e.fact_id IS NOT NULL INTO v_id, v_embedded
      FROM pymem.facts AS f
      LEFT JOIN pymem.fact_embeddings AS e
        ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id AND e.fact_id = f.id
       AND e.embedder = fact_lookup.embedder
     WHERE f.project_id = fact_lookup.project_id AND f.scope = fact_lookup.scope COLLATE "C"
       AND f.scope_id = fact_lookup.scope_id AND f.content_key = pymem.fact_key(v_content)
       AND pymem._fact_live(f, pg_catalog.now());  -- expired: fact_add replaces it
    IF FOUND THEN
        id := v_id;
        embedded := v_embedded;
        RETURN NEXT;
    END IF;
END;
$$;
