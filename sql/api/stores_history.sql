-- stores_history.sql: what a keyed store remembers: its audit log (store_audit_tail), the
-- versions of an entry (store_versions, store_version_read, store_restore) and its transcript
-- (store_messages_append, store_messages_read). Part of keyed stores (stores.sql; tables in
-- migrations/0004_stores.sql). Re-applied on every migrate; called by pymem/stores.py and by any
-- SQL client.

-- store_audit_tail: the last n audit records (oldest of them first).
--   SELECT op, path, old_sha, new_sha, actor FROM pymem.store_audit_tail(store_key => 'research-assistant', n => 10);
CREATE OR REPLACE FUNCTION pymem.store_audit_tail(store_key text, n integer DEFAULT 20, project_id text DEFAULT '')
RETURNS TABLE (id bigint, path text, op text, old_sha text, new_sha text, actor text, reason text, at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(store_audit_tail.project_id);
    PERFORM pymem._store_key_check(store_audit_tail.store_key, store_audit_tail.project_id);
    PERFORM pymem._check_limit('n', store_audit_tail.n);
    RETURN QUERY
    SELECT t.id, t.path, t.op, t.old_sha, t.new_sha, t.actor, t.reason, t.at FROM (
        SELECT a.* FROM pymem.store_audit AS a
         WHERE a.project_id = store_audit_tail.project_id AND a.store_key = store_audit_tail.store_key
         ORDER BY a.id DESC
         LIMIT store_audit_tail.n) AS t
     ORDER BY t.id;
END;
$$;

-- store_versions: the kept versions of a path, oldest first (stores with keep_versions).
CREATE OR REPLACE FUNCTION pymem.store_versions(store_key text, path text, project_id text DEFAULT '')
RETURNS TABLE (version integer, kind text, sha text, size integer, actor text, reason text, at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_path text;
BEGIN
    PERFORM pymem._tenant_enter(store_versions.project_id);
    PERFORM pymem._store_key_check(store_versions.store_key, store_versions.project_id);
    v_path := pymem._store_path_check(store_versions.path);
    RETURN QUERY
    SELECT v.version, v.kind, v.sha, pg_catalog.octet_length(v.content), v.actor, v.reason, v.at
      FROM pymem.store_versions AS v
     WHERE v.project_id = store_versions.project_id AND v.store_key = store_versions.store_key
       AND v.path = v_path
     ORDER BY v.version;
END;
$$;

-- store_version_read: one kept version's content (no row when it does not exist).
CREATE OR REPLACE FUNCTION pymem.store_version_read(store_key text, path text, version integer, project_id text DEFAULT '')
RETURNS TABLE (kind text, content text, sha text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_path text;
BEGIN
    PERFORM pymem._tenant_enter(store_version_read.project_id);
    PERFORM pymem._store_key_check(store_version_read.store_key, store_version_read.project_id);
    v_path := pymem._store_path_check(store_version_read.path);
    RETURN QUERY
    SELECT v.kind, v.content, v.sha FROM pymem.store_versions AS v
     WHERE v.project_id = store_version_read.project_id AND v.store_key = store_version_read.store_key
       AND v.path = v_path AND v.version = store_version_read.version;
END;
$$;

-- store_restore: writes a kept version's content back as the path's current content (a new
-- write, audited as 'restore', that never expires); returns the sha. P0002 when the version does
-- not exist.
CREATE OR REPLACE FUNCTION pymem.store_restore(
    store_key text, path text, version integer, actor text DEFAULT NULL, reason text DEFAULT NULL,
    expected_sha text DEFAULT NULL, project_id text DEFAULT '')
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_store pymem.stores := pymem._store_get(store_restore.store_key, store_restore.project_id);
    v_kind text;
    v_content text;
    v_path text;
BEGIN
    PERFORM pymem._tenant_enter(store_restore.project_id);
    v_path := pymem._store_path_check(store_restore.path);
    SELECT v.kind, v.content INTO v_kind, v_content FROM pymem.store_versions AS v
     WHERE v.project_id = v_store.project_id AND v.store_key = v_store.store_key
       AND v.path = v_path AND v.version = store_restore.version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pymem: no version % of %', store_restore.version, pg_catalog.quote_literal(v_path)
            USING ERRCODE = 'P0002';
    END IF;
    RETURN pymem._store_put(v_store, v_path, v_content, v_kind, store_restore.actor,
                            coalesce(store_restore.reason, 'restore version ' || store_restore.version),
                            store_restore.expected_sha, 'restore', NULL, NULL);
END;
$$;

-- store_messages_append: appends chat messages (a JSON array of objects, each with a string
-- "role") to the transcript in one transaction; returns the transcript's new length.
--   SELECT pymem.store_messages_append(store_key => 'research-assistant',
--          messages => '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]');
CREATE OR REPLACE FUNCTION pymem.store_messages_append(store_key text, messages jsonb, project_id text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_len bigint;
    v_n integer;
BEGIN
    PERFORM pymem._tenant_enter(store_messages_append.project_id);
    PERFORM pymem._store_key_check(store_messages_append.store_key, store_messages_append.project_id);
    IF messages IS NULL OR pg_catalog.jsonb_typeof(messages) <> 'array' THEN
        RAISE EXCEPTION 'pymem: messages must be a JSON array' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(messages) AS m
                WHERE pg_catalog.jsonb_typeof(m.value) <> 'object'
                   OR pg_catalog.jsonb_typeof(m.value -> 'role') IS DISTINCT FROM 'string'
                   OR pg_catalog.length(m.value ->> 'role') NOT BETWEEN 1 AND 64) THEN
        RAISE EXCEPTION 'pymem: every message must be a JSON object with a "role" string' USING ERRCODE = '22023';
    END IF;
    v_n := pg_catalog.jsonb_array_length(messages);
    UPDATE pymem.stores AS s
       SET transcript_len = s.transcript_len + v_n, updated_at = pg_catalog.clock_timestamp()
     WHERE s.project_id = store_messages_append.project_id AND s.store_key = store_messages_append.store_key
    RETURNING s.transcript_len INTO v_len;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pymem: no store % in project %', pg_catalog.quote_literal(store_messages_append.store_key),
                pg_catalog.quote_literal(store_messages_append.project_id)
            USING ERRCODE = 'P0002';
    END IF;
    INSERT INTO pymem.store_messages (project_id, store_key, seq, message)
    SELECT store_messages_append.project_id, store_messages_append.store_key, v_len - v_n + m.ordinality, m.value
      FROM pg_catalog.jsonb_array_elements(messages) WITH ORDINALITY AS m;
    RETURN v_len;
END;
$$;

-- store_messages_read: the transcript, oldest first.
CREATE OR REPLACE FUNCTION pymem.store_messages_read(store_key text, project_id text DEFAULT '')
RETURNS TABLE (seq bigint, message jsonb, created_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pymem._tenant_enter(store_messages_read.project_id);
    PERFORM pymem._store_key_check(store_messages_read.store_key, store_messages_read.project_id);
    RETURN QUERY
    SELECT m.seq, m.message, m.created_at FROM pymem.store_messages AS m
     WHERE m.project_id = store_messages_read.project_id AND m.store_key = store_messages_read.store_key
     ORDER BY m.seq;
END;
$$;
