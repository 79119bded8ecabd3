-- facts_add.sql: adding one fact: fact_add (a new fact, or the active one with the same content;
-- a new valid time restates it, facts_time.sql; a shorter expiry reaches its history,
-- facts_versions.sql; a learned fact keeps its subject under the cap, facts_learned.sql). The
-- checks, the content key and the subject lock it uses are in facts.sql; many facts in one call:
-- facts_bulk.sql. Part of durable facts (facts.sql: subjects, equality, locking). Re-applied on
-- every migrate; called by pymem/facts.py and by any SQL client (docs/sql.md "Facts").
--
-- Errors: 22023 invalid argument; 40001 the fact to restate went meanwhile (retry).

-- fact_add: adds a fact, or returns the active fact of the subject with the same content.
--   SELECT * FROM pymem.fact_add(scope => 'user', scope_id => 'alice', content => 'Prefers email');
-- created is false when the fact already existed. A learned fact (source 'learned') trims the
-- subject's active learned facts to the newest max_learned (NULL: no cap) in this transaction;
-- manual and trace facts are never touched by the cap. embedding/embedder, when given, are
-- stored with the fact (or added to an existing one that lacks them). expires_at, or ttl (an
-- interval from now), makes the fact expire (pymem._expiry checks them; NULL: never): once
-- expired it is invisible to every read and the same content can be added again (the expired
-- fact, with its history, is deleted by that add; pymem.purge deletes the others). A re-add
-- that passes an expiry gives it to the fact (a sliding TTL); one that passes none keeps it.
--   SELECT * FROM pymem.fact_add('user', 'alice', 'Is in Lisbon this week', ttl => '7 days');
-- valid_from / valid_to (NULL: open on that side; pymem._valid_time checks them) say when the
-- fact holds in the world (migrations/0006_v0_2_0_memory.sql): reads show a fact only while it holds
-- (facts_at reads another time). A re-add that gives a valid time the fact does not have
-- restates it: a new version with the valid time given (a side not given is kept), the old
-- version in its history (created is true: a row was added); one that gives none keeps it.
--   SELECT * FROM pymem.fact_add('user', 'alice', 'Lives in Oslo', valid_from => '2019-08-01', valid_to => '2024-05-01');
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
    created_at timestamptz DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    ttl interval DEFAULT NULL,
    valid_from timestamptz DEFAULT NULL,
    valid_to timestamptz DEFAULT NULL)
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
    v_valid boolean := fact_add.valid_from IS NOT NULL OR fact_add.valid_to IS NOT NULL;  -- a valid time given
BEGIN
    v_content := pymem._fact_add_checks(fact_add.scope, fact_add.scope_id, fact_add.content, fact_add.project_id,
                                        fact_add.confidence, fact_add.source, fact_add.trace_id, fact_add.metadata,
                                        fact_add.max_learned, fact_add.created_at);
    v_key := pymem.fact_key(v_content);
    IF fact_add.expires_at IS NOT NULL OR fact_add.ttl IS NOT NULL THEN
        v_expires := pymem._expiry(fact_add.expires_at, fact_add.ttl);
    END IF;
    IF v_valid THEN
        PERFORM pymem._valid_time(fact_add.valid_from, fact_add.valid_to);
    END IF;
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
        -- index serves the lookup, see 0006_v0_2_0_memory)
        SELECT f.id, pymem._vector_dims(e.embedding), f.expires_at INTO v_id, v_have, v_was
          FROM pymem.facts AS f
          LEFT JOIN pymem.fact_embeddings AS e
            ON e.project_id = f.project_id AND e.scope = f.scope AND e.scope_id = f.scope_id AND e.fact_id = f.id
           AND e.embedder = fact_add.embedder
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C"
           AND f.scope_id = fact_add.scope_id AND f.content_key = v_key AND pymem._fact_head(f.superseded_by);
        IF v_have = pymem._vector_dims(fact_add.embedding) AND v_expires IS NULL AND NOT v_valid
           AND (v_was IS NULL OR pymem._unexpired(v_was, pg_catalog.now())) THEN
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
        SELECT f.id, f.expires_at INTO v_id, v_was FROM pymem.facts AS f
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C" AND f.scope_id = fact_add.scope_id
           AND f.content_key = v_key AND pymem._fact_head(f.superseded_by);
    END IF;
    v_created := false;
    IF v_was IS NOT NULL AND NOT pymem._unexpired(v_was, pg_catalog.now()) THEN
        PERFORM pymem._fact_expired_free(fact_add.project_id, fact_add.scope, fact_add.scope_id, v_id);
        v_id := NULL;
    END IF;
    WHILE v_id IS NULL LOOP
        INSERT INTO pymem.facts AS f (project_id, scope, scope_id, content, content_key, confidence, source, trace_id, metadata,
                                      created_at, expires_at, valid_from, valid_to)
        VALUES (fact_add.project_id, fact_add.scope, fact_add.scope_id, v_content, v_key, fact_add.confidence,
                fact_add.source, fact_add.trace_id, fact_add.metadata,
                coalesce(fact_add.created_at, pg_catalog.clock_timestamp()), v_expires, fact_add.valid_from, fact_add.valid_to)
        ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL DO NOTHING
        RETURNING f.id INTO v_id;
        v_created := FOUND;
        EXIT WHEN v_created;
        -- a concurrent writer just committed the same fact: return its id
        SELECT f.id, f.expires_at INTO v_id, v_was FROM pymem.facts AS f
         WHERE f.project_id = fact_add.project_id AND f.scope = fact_add.scope COLLATE "C" AND f.scope_id = fact_add.scope_id
           AND f.content_key = v_key AND pymem._fact_head(f.superseded_by);
        -- not found: it was superseded or forgotten in between, try the insert again; expired:
        -- it goes, and the insert is tried again
        IF v_id IS NOT NULL AND NOT pymem._unexpired(v_was, pg_catalog.now()) THEN
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
                                   fact_add.valid_from, fact_add.valid_to, fact_add.created_at) AS r;
    END IF;
    IF fact_add.embedding IS NOT NULL THEN
        INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
        VALUES (fact_add.project_id, fact_add.scope, fact_add.scope_id, v_id, fact_add.embedder, fact_add.embedding)
        ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
    END IF;
    IF v_created AND fact_add.source = 'learned' AND fact_add.max_learned IS NOT NULL THEN
        PERFORM pymem._learned_cap(fact_add.project_id, fact_add.scope, fact_add.scope_id, fact_add.max_learned);
    END IF;
    id := v_id;
    created := v_created;
    RETURN NEXT;
END;
$$;
