-- facts_versions.sql: a fact's versions and its end: fact_history and fact_chain (superseded
-- versions kept as history), fact_supersede (a new version that links the old one, never an
-- overwrite), fact_forget and facts_forget (guarded deletes). Part of durable facts
-- (facts.sql; tables in migrations/0002_facts.sql). Re-applied on every migrate; called by
-- pymem/facts.py and by any SQL client (docs/sql.md "Facts").
--
-- Errors: 22023 invalid argument; 40001 when the fact to supersede changed meanwhile (see
-- fact_supersede).

-- _fact_history_expire: keeps the rule that no version outlives its successor (an expiry at
-- most its successor's; NULL: never), so that a visible version never points at an expired one
-- and a history expires with its newest version: every version that fact p_id replaced, directly
-- or not, whose expiry is later than p_expires_at (or never) gets p_expires_at. Called when a
-- fact's expiry becomes earlier than its history's (a supersede with a shorter expiry, a re-add
-- with one). A walk of the chain, one key lookup per step, as in fact_forget.
CREATE OR REPLACE FUNCTION pymem._fact_history_expire(
    p_project_id text, p_scope text, p_scope_id text, p_id bigint, p_expires_at timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_expires_at IS NULL THEN
        RETURN;  -- never: no version can outlive it
    END IF;
    WITH RECURSIVE chain AS (
        SELECT p.id FROM pymem.facts AS p
         WHERE p.project_id = p_project_id AND p.scope = p_scope AND p.scope_id = p_scope_id AND p.superseded_by = p_id
        UNION ALL
        SELECT p.id FROM chain AS c
         CROSS JOIN LATERAL (SELECT p.id FROM pymem.facts AS p
                              WHERE p.project_id = p_project_id AND p.scope = p_scope
                                AND p.scope_id = p_scope_id AND p.superseded_by = c.id) AS p
    )
    SELECT pg_catalog.array_agg(c.id) INTO v_ids FROM chain AS c;
    IF v_ids IS NOT NULL THEN
        UPDATE pymem.facts AS f SET expires_at = p_expires_at
         WHERE f.project_id = p_project_id AND f.scope = p_scope AND f.scope_id = p_scope_id
           AND f.id = ANY (v_ids) AND (f.expires_at IS NULL OR f.expires_at > p_expires_at);
    END IF;
END;
$$;

-- _scope_fact_history: fact_history for every subject of a scope (scope_id '*'), newest first.
CREATE OR REPLACE FUNCTION pymem._scope_fact_history(p_project_id text, p_scope text, p_max integer)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql STABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT f.* FROM pymem.facts AS f
     WHERE f.project_id = p_project_id AND f.scope = p_scope AND pymem._fact_kept(f, pg_catalog.now())
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT p_max;
END;
$$;

-- fact_history: a subject's facts including superseded versions, newest first (by created_at);
-- expired versions are not shown (a version never outlives its successor: _fact_history_expire).
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
    IF fact_history.scope_id = '*' THEN
        RETURN QUERY SELECT * FROM pymem._scope_fact_history(fact_history.project_id, fact_history.scope,
                                                             fact_history.max_facts);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT f.* FROM pymem.facts AS f
     WHERE f.project_id = fact_history.project_id AND f.scope = fact_history.scope
       AND f.scope_id = fact_history.scope_id AND pymem._fact_kept(f, pg_catalog.now())
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT fact_history.max_facts;
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
           AND f.scope_id = fact_chain.scope_id AND f.id = fact_chain.id AND pymem._fact_kept(f, pg_catalog.now())
        UNION ALL
        SELECT n.id, n.superseded_by FROM fwd AS w JOIN pymem.facts AS n
          ON n.project_id = fact_chain.project_id AND n.scope = fact_chain.scope
         AND n.scope_id = fact_chain.scope_id AND n.id = w.superseded_by
    )
    SELECT w.id INTO v_head FROM fwd AS w WHERE pymem._fact_head(w.superseded_by);
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
           (t.fact).created_at, (t.fact).superseded_by, (t.fact).superseded_at, t.depth, (t.fact).expires_at,
           (t.fact).valid_from, (t.fact).valid_to
      FROM tree AS t
     WHERE pymem._fact_kept(t.fact, pg_catalog.now())  -- (a live version's successors are live: _fact_history_expire)
     ORDER BY t.depth DESC, (t.fact).created_at, (t.fact).id;
END;
$$;

-- fact_supersede: retires an active fact (named by id, or by its current content) in favour of
-- new content, in one transaction, and returns the fact now active in its place:
--   SELECT * FROM pymem.fact_supersede('user', 'alice', new_content => 'Prefers Slack', old_content => 'Prefers email');
-- When no active fact of the subject has the new content, it is inserted (created = true) as
-- write (pymem.fact_write(...), facts_write.sql) says, with the embedding given (the write's
-- metadata NULL: the old version's, as the expiry is kept; the default '{}' gives it none):
--   SELECT * FROM pymem.fact_supersede('user', 'alice', 'Prefers Slack', old_content => 'Prefers email',
--                                      write => pymem.fact_write(confidence => 0.9, metadata => NULL)); When one has it (the user
-- said both, then corrected themselves), the old fact is retired into that fact, a merge
-- (created = false): the old row points at it, and it stays as it was, no row is added (an
-- embedding from an embedder it has no vector of is stored with it, as fact_add does).
-- Either way a fact gets at most one successor, and that successor is active when it is
-- linked, so history is a tree that merges into its newest version and never a cycle.
-- Supersedes of one subject take its subject lock (pymem._subject_lock) before anything else,
-- so they run one after the other: a merge target cannot be retired under a concurrent
-- supersede, and two opposite merges (a into b, b into a) cannot deadlock.
-- Expiry: the write's expires_at or ttl (as in fact_add) is the new version's expiry; without them a new
-- version keeps the old one's, and a merge target its own. No version outlives its successor,
-- so the history takes a shorter expiry with it (_fact_history_expire). An expired fact cannot be
-- superseded (P0002, as a fact that is not there); an expired fact holding the new content is
-- deleted and the new version inserted.
-- Valid time (migrations/0006_v0_2_0_memory.sql): the write's valid_from / valid_to are the new version's.
-- A valid_from says the world changed then: the old version still holds before it (facts_at);
-- it cannot be later than the new version is recorded (a planned change is a fact of its own,
-- added with a future valid_from). Without one the supersede is a correction: the old version is
-- withdrawn. The same content with another valid time restates the fact (_fact_restate). A merge
-- keeps its target as it is, valid time included.
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
    write pymem.fact_write DEFAULT pymem.fact_write(),
    embedding vector DEFAULT NULL,
    embedder text DEFAULT NULL)
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
    v_expires timestamptz;  -- the expiry asked for (NULL: none)
    v_head timestamptz;  -- the expiry of the newest version after this call
    v_was timestamptz;
    v_kept boolean;  -- the version read is kept (pymem._fact_kept: not gone for reads)
    v_keep boolean := NOT write IS NULL AND write.metadata IS NULL;  -- metadata NULL: the old version's
BEGIN
    -- fact_add's checks of the tenant, the subject, the new version's content and write (no cap);
    -- the write's expiry resolved (facts_write.sql)
    v_content := pymem._fact_trim(fact_supersede.new_content);
    IF v_keep THEN
        write.metadata := '{}';  -- (checked as the default; the old version's is set below)
    END IF;
    write := pymem._fact_add_checks(fact_supersede.scope, fact_supersede.scope_id, v_content, fact_supersede.project_id,
                                    write, NULL);
    IF (fact_supersede.id IS NULL) = (fact_supersede.old_content IS NULL) THEN
        RAISE EXCEPTION 'pymem: name the fact to supersede by id or by old_content (exactly one)' USING ERRCODE = '22023';
    END IF;
    v_expires := write.expires_at;
    IF fact_supersede.embedding IS NOT NULL THEN  -- no vector: nothing to check or register
        PERFORM pymem._embedding_register(fact_supersede.project_id, fact_supersede.embedder, fact_supersede.embedding);
    END IF;
    -- one supersede of this subject at a time (see above). (The lock row and the old row in one
    -- statement, FOR UPDATE OF s, f, saved nothing beyond the noise: docs/performance.md)
    PERFORM pymem._subject_lock(fact_supersede.project_id, fact_supersede.scope, fact_supersede.scope_id);
    IF fact_supersede.id IS NOT NULL THEN
        SELECT f.project_id, f.scope, f.scope_id, f.id, f.content_key, f.created_at, f.superseded_by, f.expires_at,
               f.metadata, pymem._fact_kept(f, pg_catalog.now()) AS kept
          INTO v_old FROM pymem.facts AS f
         WHERE f.project_id = fact_supersede.project_id AND f.scope = fact_supersede.scope
           AND f.scope_id = fact_supersede.scope_id AND f.id = fact_supersede.id
           FOR UPDATE;
        IF NOT FOUND OR NOT v_old.kept THEN  -- an expired fact is gone
            RAISE EXCEPTION 'pymem: no fact % for % %', fact_supersede.id, fact_supersede.scope,
                    pg_catalog.quote_literal(fact_supersede.scope_id)
                USING ERRCODE = 'P0002';
        END IF;
    ELSE
        SELECT f.project_id, f.scope, f.scope_id, f.id, f.content_key, f.created_at, f.superseded_by, f.expires_at,
               f.metadata, pymem._fact_kept(f, pg_catalog.now()) AS kept
          INTO v_old FROM pymem.facts AS f
         WHERE f.project_id = fact_supersede.project_id AND f.scope = fact_supersede.scope COLLATE "C"
           AND f.scope_id = fact_supersede.scope_id AND pymem._fact_head(f.superseded_by)
           AND f.content_key = pymem.fact_key(fact_supersede.old_content)
           FOR UPDATE;
        IF FOUND AND NOT v_old.kept THEN
            RAISE EXCEPTION 'pymem: no active % fact for % with that content (it has expired)', fact_supersede.scope,
                    pg_catalog.quote_literal(fact_supersede.scope_id)
                USING ERRCODE = 'P0002', HINT = 'Add the fact again with fact_add.';
        END IF;
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
    IF write.created_at < v_old.created_at THEN
        RAISE EXCEPTION 'pymem: created_at % is earlier than fact % (%), which it supersedes',
                write.created_at, v_old.id, v_old.created_at
            USING ERRCODE = '22023',
                  HINT = 'A new version is learned after the version it replaces: pass a later created_at, or NULL for now.';
    END IF;
    v_key := pymem.fact_key(v_content);
    IF v_key = v_old.content_key THEN
        IF write.valid_from IS NOT NULL OR write.valid_to IS NOT NULL THEN
            -- the same content with another valid time: a restatement (_fact_restate)
            SELECT r.id, r.created INTO v_new, v_created
              FROM pymem._fact_restate(v_old.project_id, v_old.scope, v_old.scope_id, v_key, write.valid_from,
                                       write.valid_to, write.created_at) AS r;
            IF v_created THEN
                RETURN (v_new, true)::pymem.fact_successor;
            END IF;
        END IF;
        RAISE EXCEPTION 'pymem: the new content equals fact %''s content; a fact cannot supersede itself', v_old.id
            USING ERRCODE = '22023',
                  HINT = 'To change only when it holds, pass a valid_from or valid_to it does not have.';
    END IF;
    -- a change in the world is recorded when it has happened: the old version holds until then
    -- (facts_at), so the new one cannot start after it is recorded
    IF write.valid_from > coalesce(write.created_at, pg_catalog.now()) THEN
        RAISE EXCEPTION 'pymem: valid_from % is later than the new version is recorded (%)', write.valid_from,
                coalesce(write.created_at, pg_catalog.now())
            USING ERRCODE = '22023',
                  HINT = 'Supersede when the change has happened; a planned fact is added with fact_add(write => pymem.fact_write(valid_from => ...)).';
    END IF;
    -- one time for the successor's created_at and the old row's superseded_at (a value, not
    -- clock_timestamp() in the statements: Citus refuses volatile functions in an UPDATE)
    v_at := coalesce(write.created_at, pg_catalog.clock_timestamp());
    -- the new version's expiry: the one asked for, else the old version's (the same fact, one
    -- version on); its metadata: the one given, else the old version's
    v_head := coalesce(v_expires, v_old.expires_at);
    write.created_at := v_at;
    write.expires_at := v_head;
    IF v_keep THEN
        write.metadata := v_old.metadata;
    END IF;
    LOOP
        v_new := pymem._fact_insert(v_old.project_id, v_old.scope, v_old.scope_id, v_content, v_key, write);
        v_created := v_new IS NOT NULL;
        EXIT WHEN v_created;
        -- the new content is already an active fact (or a concurrent fact_add just committed
        -- it): merge into it; the key-share lock keeps it from being deleted until we commit
        SELECT f.id, f.expires_at, pymem._fact_kept(f, pg_catalog.now()) INTO v_new, v_was, v_kept FROM pymem.facts AS f
         WHERE f.project_id = v_old.project_id AND f.scope = v_old.scope COLLATE "C" AND f.scope_id = v_old.scope_id
           AND f.content_key = v_key AND pymem._fact_head(f.superseded_by)
           FOR KEY SHARE;
        IF FOUND AND NOT v_kept THEN
            -- an expired fact holds the new content's key: it goes, and the insert is tried again
            PERFORM pymem._fact_expired_free(v_old.project_id, v_old.scope, v_old.scope_id, v_new);
            v_new := NULL;
            CONTINUE;
        END IF;
        EXIT WHEN FOUND;
        -- it was forgotten in between: try the insert again
    END LOOP;
    IF NOT v_created THEN
        -- merged into an active fact: it keeps its expiry, or takes the one asked for
        v_head := coalesce(v_expires, v_was);
        IF v_expires IS NOT NULL AND v_was IS DISTINCT FROM v_expires THEN
            UPDATE pymem.facts AS f SET expires_at = v_expires
             WHERE f.project_id = v_old.project_id AND f.scope = v_old.scope AND f.scope_id = v_old.scope_id
               AND f.id = v_new;
        END IF;
    END IF;
    -- (the successor and this UPDATE as one statement, a WITH of the two, cost more: its join's
    -- start-up; v_at is a value, not clock_timestamp() in the SET, which Citus refuses)
    UPDATE pymem.facts AS f
       SET superseded_by = v_new, superseded_at = v_at
     WHERE f.project_id = v_old.project_id AND f.scope = v_old.scope AND f.scope_id = v_old.scope_id
       AND f.id = v_old.id;
    -- no version outlives its successor: the history now under v_new takes its expiry where
    -- that is earlier (nothing to do when nothing expires: the usual case)
    IF v_head IS NOT NULL THEN
        PERFORM pymem._fact_history_expire(v_old.project_id, v_old.scope, v_old.scope_id, v_new, v_head);
    END IF;
    IF fact_supersede.embedding IS NOT NULL THEN
        INSERT INTO pymem.fact_embeddings AS e (project_id, scope, scope_id, fact_id, embedder, embedding)
        VALUES (v_old.project_id, v_old.scope, v_old.scope_id, v_new, fact_supersede.embedder, fact_supersede.embedding)
        ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
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
           AND f.content_key = pymem.fact_key(fact_forget.content) AND pymem._fact_head(f.superseded_by)
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
    RETURN v_count;
END;
$$;

-- _scope_facts_forget: facts_forget for every subject of a scope (scope_id '*'): deletes the
-- scope's facts and subject locks in the project, and returns how many facts it deleted.
CREATE OR REPLACE FUNCTION pymem._scope_facts_forget(p_project_id text, p_scope text)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    DELETE FROM pymem.facts AS f WHERE f.project_id = p_project_id AND f.scope = p_scope;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    DELETE FROM pymem.subject_locks AS s WHERE s.project_id = p_project_id AND s.scope = p_scope;
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
        v_count := pymem._scope_facts_forget(facts_forget.project_id, facts_forget.scope);
    ELSE
        DELETE FROM pymem.facts AS f
         WHERE f.project_id = facts_forget.project_id AND f.scope = facts_forget.scope
           AND f.scope_id = facts_forget.scope_id;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        DELETE FROM pymem.subject_locks AS s
         WHERE s.project_id = facts_forget.project_id AND s.scope = facts_forget.scope
           AND s.scope_id = facts_forget.scope_id;
    END IF;
    RETURN v_count;
END;
$$;
