-- browse.sql: what one project holds, listed for people looking at it (the memory page of
-- `pymem serve`, pymem/browse.py, or any SQL client): its fact subjects, its users with their
-- threads and a thread's messages from a given seq on (the turn a learned fact names), its
-- keyed stores, each with counts, and the embedders its vectors come from. Re-applied on every migrate. Read-only
-- (STABLE): no locks beyond a plain SELECT's; the reader role may execute them (bootstrap.sql's
-- _grants_diff). Like every API function each enters the project's tenant first, so RLS shows
-- it that project's rows only: there is no function listing the projects themselves (a
-- listing across tenants is what the row-level security forbids). At the end, the one function
-- here that writes: _page_reader_login, the memory page's reader login on the embedded server.

-- browse_subjects: every (scope, scope_id) of the project that has facts, with its active and
-- superseded counts and the time of its newest fact; newest subjects first.
--   SELECT scope, scope_id, active, superseded FROM pymem.browse_subjects(project_id => '');
CREATE OR REPLACE FUNCTION pymem.browse_subjects(project_id text DEFAULT '', max_rows integer DEFAULT 1000)
RETURNS TABLE (scope text, scope_id text, active bigint, superseded bigint, newest timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(browse_subjects.project_id);
    PERFORM pymem._project_check(browse_subjects.project_id);
    PERFORM pymem._check_limit('max_rows', browse_subjects.max_rows);
    RETURN QUERY
    SELECT f.scope, f.scope_id,
           pg_catalog.count(*) FILTER (WHERE pymem._fact_head(f.superseded_by)),
           pg_catalog.count(*) FILTER (WHERE f.superseded_by IS NOT NULL),
           pg_catalog.max(f.created_at)
      FROM pymem.facts AS f
     WHERE f.project_id = browse_subjects.project_id AND pymem._fact_kept(f, pg_catalog.now())
     GROUP BY f.scope, f.scope_id
     ORDER BY pg_catalog.max(f.created_at) DESC, f.scope, f.scope_id
     LIMIT browse_subjects.max_rows;
END;
$$;

-- browse_users: every user of the project with conversation threads: how many threads and
-- messages, and when the newest thread last changed; most recently active first.
--   SELECT user_id, threads, messages FROM pymem.browse_users(project_id => '');
CREATE OR REPLACE FUNCTION pymem.browse_users(project_id text DEFAULT '', max_rows integer DEFAULT 1000)
RETURNS TABLE (user_id text, threads bigint, messages bigint, updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(browse_users.project_id);
    PERFORM pymem._project_check(browse_users.project_id);
    PERFORM pymem._check_limit('max_rows', browse_users.max_rows);
    RETURN QUERY
    SELECT t.user_id, pg_catalog.count(*), pg_catalog.sum(t.last_seq)::bigint, pg_catalog.max(t.updated_at)
      FROM pymem.threads AS t
     WHERE t.project_id = browse_users.project_id
     GROUP BY t.user_id
     ORDER BY pg_catalog.max(t.updated_at) DESC, t.user_id
     LIMIT browse_users.max_rows;
END;
$$;

-- users_list: the project's users, by id, each with how many active facts (tier "user") and
-- conversation threads it has: everyone the project stores something about, facts or messages
-- (browse_users lists the users with threads, most recently active first). At most max_rows;
-- after: the last user id of the previous page (NULL: the first page); ids in the database's
-- order of text (its collation, as the indexes). Each page reads the users' index ranges
-- (facts_subject_active_newest, threads_pkey) from after on, and the counts of its own users.
--   SELECT user_id, facts, threads FROM pymem.users_list(max_rows => 100);
--   SELECT user_id FROM pymem.users_list(max_rows => 100, after => 'alice');
CREATE OR REPLACE FUNCTION pymem.users_list(project_id text DEFAULT '', max_rows integer DEFAULT 100,
                                            after text DEFAULT NULL)
RETURNS TABLE (user_id text, facts bigint, threads bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_after text := coalesce(users_list.after, '');
BEGIN
    PERFORM pymem._tenant_enter(users_list.project_id);
    PERFORM pymem._project_check(users_list.project_id);
    PERFORM pymem._check_limit('max_rows', users_list.max_rows);
    RETURN QUERY
    WITH ids AS (
        SELECT u.id FROM (
            (SELECT DISTINCT f.scope_id AS id FROM pymem.active_facts AS f
              WHERE f.project_id = users_list.project_id AND f.scope = 'user' AND f.scope_id > v_after
              ORDER BY 1 LIMIT users_list.max_rows)
            UNION
            (SELECT DISTINCT t.user_id FROM pymem.threads AS t
              WHERE t.project_id = users_list.project_id AND t.user_id > v_after
              ORDER BY 1 LIMIT users_list.max_rows)) AS u
         ORDER BY u.id LIMIT users_list.max_rows)
    SELECT i.id,
           (SELECT pg_catalog.count(*) FROM pymem.active_facts AS f
             WHERE f.project_id = users_list.project_id AND f.scope = 'user' AND f.scope_id = i.id),
           (SELECT pg_catalog.count(*) FROM pymem.threads AS t
             WHERE t.project_id = users_list.project_id AND t.user_id = i.id)
      FROM ids AS i
     ORDER BY i.id;
END;
$$;

-- browse_threads: a user's threads: messages so far (the thread's last seq), how many of them
-- the running summary covers, when it last changed; most recently active first.
--   SELECT thread_id, messages, summarized_through FROM pymem.browse_threads('alice');
CREATE OR REPLACE FUNCTION pymem.browse_threads(user_id text, project_id text DEFAULT '')
RETURNS TABLE (thread_id text, messages bigint, summarized_through bigint, created_at timestamptz,
               updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(browse_threads.project_id);
    PERFORM pymem._project_check(browse_threads.project_id);
    IF browse_threads.user_id IS NULL OR browse_threads.user_id IN ('', '*') THEN
        RAISE EXCEPTION 'pymem: user_id must be a user id, not %', pg_catalog.quote_nullable(browse_threads.user_id)
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT t.thread_id, t.last_seq, t.summary_through, t.created_at, t.updated_at
      FROM pymem.threads AS t
     WHERE t.project_id = browse_threads.project_id AND t.user_id = browse_threads.user_id
     ORDER BY t.updated_at DESC, t.thread_id;
END;
$$;

-- browse_messages: a thread's messages from seq from_seq on, oldest first, at most max_rows: the
-- memory page reads the turn a learned fact names in its metadata ({"turn": {"thread_id",
-- "seq"}}: turn_record) as from_seq => seq, max_rows => 2 (the user's message and the answer).
-- The user and thread must be ids (not '', '*' or NULL: 22023, as in browse_threads).
--   SELECT seq, role, content FROM pymem.browse_messages('alice', 'default', from_seq => 5, max_rows => 2);
CREATE OR REPLACE FUNCTION pymem.browse_messages(user_id text, thread_id text DEFAULT 'default',
                                                 from_seq bigint DEFAULT 1, project_id text DEFAULT '',
                                                 max_rows integer DEFAULT 20)
RETURNS TABLE (seq bigint, role text, content text, created_at timestamptz, metadata jsonb)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(browse_messages.project_id);
    PERFORM pymem._project_check(browse_messages.project_id);
    PERFORM pymem._check_limit('max_rows', browse_messages.max_rows);
    IF browse_messages.user_id IS NULL OR browse_messages.user_id IN ('', '*') THEN
        RAISE EXCEPTION 'pymem: user_id must be a user id, not %', pg_catalog.quote_nullable(browse_messages.user_id)
            USING ERRCODE = '22023';
    END IF;
    IF browse_messages.thread_id IS NULL OR browse_messages.thread_id IN ('', '*') THEN
        RAISE EXCEPTION 'pymem: thread_id must be a thread id, not %', pg_catalog.quote_nullable(browse_messages.thread_id)
            USING ERRCODE = '22023';
    END IF;
    IF browse_messages.from_seq IS NULL THEN
        RAISE EXCEPTION 'pymem: from_seq must be a message number, not NULL' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT m.seq, m.role, m.content, m.created_at, m.metadata
      FROM pymem.messages AS m
     WHERE m.project_id = browse_messages.project_id AND m.user_id = browse_messages.user_id
       AND m.thread_id = browse_messages.thread_id AND m.seq >= browse_messages.from_seq
     ORDER BY m.seq
     LIMIT browse_messages.max_rows;
END;
$$;

-- browse_stores: the project's keyed stores with their protections, entry count and transcript
-- length; by key.
--   SELECT store_key, entries, audit FROM pymem.browse_stores(project_id => '');
CREATE OR REPLACE FUNCTION pymem.browse_stores(project_id text DEFAULT '', max_rows integer DEFAULT 1000)
RETURNS TABLE (store_key text, entries bigint, transcript_len bigint, audit boolean, keep_versions boolean,
               updated_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(browse_stores.project_id);
    PERFORM pymem._project_check(browse_stores.project_id);
    PERFORM pymem._check_limit('max_rows', browse_stores.max_rows);
    RETURN QUERY
    SELECT s.store_key,
           (SELECT pg_catalog.count(*) FROM pymem.store_entries AS e
             WHERE e.project_id = s.project_id AND e.store_key = s.store_key
               AND pymem._entry_live(e.expires_at, pg_catalog.now())),
           s.transcript_len, s.audit, s.keep_versions, s.updated_at
      FROM pymem.stores AS s
     WHERE s.project_id = browse_stores.project_id
     ORDER BY s.store_key COLLATE "C"
     LIMIT browse_stores.max_rows;
END;
$$;

-- browse_embedders: the embedders the project has stored vectors from (a name is registered, bound
-- to its dimension, when its first vector is stored: _embedding_register), most recently
-- registered first. The memory page embeds its search queries with the first of them it can run.
--   SELECT name, dimension FROM pymem.browse_embedders(project_id => '');
CREATE OR REPLACE FUNCTION pymem.browse_embedders(project_id text DEFAULT '')
RETURNS TABLE (name text, dimension integer, created_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(browse_embedders.project_id);
    PERFORM pymem._project_check(browse_embedders.project_id);
    RETURN QUERY
    SELECT e.name, e.dimension, e.created_at
      FROM pymem.embedders AS e
     WHERE e.project_id = browse_embedders.project_id
     ORDER BY e.created_at DESC, e.name COLLATE "C";
END;
$$;

-- _page_reader_login(login): for `pymem serve` on the embedded server (pymem/web.py
-- open_databases, whose login role there is the server's superuser): the login role the page's
-- reads connect as, created when missing (LOGIN without a password: the embedded server listens
-- on a Unix socket only and trusts it, as it trusts its superuser) and made a member of the
-- reader role recorded in pymem.config. Grants nothing else and revokes nothing: the page then
-- refuses a login that could write (named query reader_login). Granted to no one (a leading
-- _): it takes CREATEROLE (to create the role) and ADMIN on the reader role. A catalog write,
-- no table lock; two pages starting at once both succeed (duplicate_object is ignored).
--   SELECT pymem._page_reader_login('pymem_page');
CREATE OR REPLACE FUNCTION pymem._page_reader_login(login text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_reader text := (SELECT c.value FROM pymem.config AS c WHERE c.key = 'reader_role');
BEGIN
    IF v_reader IS NULL OR login IS NULL OR login = '' THEN
        RAISE EXCEPTION 'pymem: no reader role is recorded (run pymem migrate), or no login name'
            USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r WHERE r.rolname = login) THEN
        BEGIN
            EXECUTE pg_catalog.format('CREATE ROLE %I LOGIN', login);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created at the same moment by another page
        END;
    END IF;
    IF NOT pg_catalog.pg_has_role(login, v_reader, 'USAGE') THEN
        EXECUTE pg_catalog.format('GRANT %I TO %I', v_reader, login);
    END IF;
    RETURN login;
END;
$$;
