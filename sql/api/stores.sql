-- stores.sql: the SQL API for keyed memory stores (tables in migrations/0004_stores.sql): open,
-- entries (write, read, meta, list, delete), drop. The rest of the capability is beside it:
-- stores_protections.sql (audit, versions and read-only prefixes: store_protect,
-- store_configure; what an options change would do, _store_options_change, is here, since
-- store_open refuses one), stores_history.sql (audit log, versions, restore, transcript) and
-- stores_items.sql (namespaced items). Re-applied on every migrate. Called by pymem/stores.py (MemoryStore) and
-- any SQL client.
--
-- A store is (project_id, store_key). It holds a transcript (append-only chat messages) and
-- path-addressed entries (text or JSON). Every entry write records sha256, actor, reason and
-- time; stores with audit (the default) log every write, delete and restore; stores with
-- keep_versions keep every written content.
--
-- Paths: relative, '/'-separated, canonical as written: no leading '/', no '' / '.' / '..'
-- segments (so no '//' and no trailing '/'), no backslash, no control characters, at most 1024
-- characters and 255 per segment. Reserved: 'messages.json' and anything under 'audit/',
-- 'meta/' or 'versions/' (the transcript and internal areas of the reference layout); they are
-- refused for writes and never listed. Content: at most 8 MiB (UTF-8 bytes).
-- Every path and prefix is Unicode-normalised to NFC where it enters (writes, reads, meta,
-- deletes, versions, restores, list prefixes, read-only prefixes), so the NFC and NFD spellings
-- of one name are one entry; entries are stored and listed in NFC.
--
-- Protections (audit, keep_versions, read_only_prefixes) are chosen when store_open creates a
-- store and never changed by opening it again: store_open refuses options that differ from the
-- stored ones (PM404). store_protect tightens them (granted to the app role); store_configure
-- changes them either way (owner role only: not granted to the app or reader role). Both log
-- the change to the audit log (op 'protect' or 'unprotect', path ''), whatever the store's
-- audit setting, before it takes effect.
--
-- Expiry (migrations/0007_v0_2_0_operations.sql): a write may give its entry an expiry (expires_at,
-- or ttl: checked by pymem._expiry); a write without one makes the entry non-expiring. An
-- expired entry is invisible to every read at once (pymem._entry_live) and its path counts as
-- not existing: a write replaces it (expected_sha '' succeeds, a sha fails with PM401), a delete
-- finds nothing. pymem.purge (lifecycle.sql) deletes it later. Neither expiry nor purge logs to
-- the audit log, which records what callers did: the expiry is part of the write that set it,
-- and the next write of the path logs old_sha NULL, as after a delete.
--
-- Optimistic concurrency: expected_sha => NULL writes unconditionally; a 64-hex sha writes only
-- if it is still the path's current sha; '' writes only if the path does not exist yet. The
-- check and the write happen under the entry's row lock in one transaction, so it holds between
-- processes and machines: of two writers holding the same sha, exactly one succeeds.
--
-- Errors: 22023 invalid argument or path; P0002 no such store or version; PM401 concurrency
-- conflict (expected sha no longer current); PM402 path under a read-only prefix; PM403
-- reserved path; PM404 store_open's options differ from an existing store's; 42501
-- store_protect asked to weaken a protection.

-- _store_key_check: a store key must name one store.
CREATE OR REPLACE FUNCTION pymem._store_key_check(store_key text, project_id text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM pymem._project_check(project_id);
    IF store_key IS NULL OR store_key IN ('', '*') OR pg_catalog.length(store_key) > 512 THEN
        RAISE EXCEPTION 'pymem: a store key must be 1..512 characters and not ''*'''
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _store_path_check: validates a path (see the header); returns it in NFC, the one spelling
-- under which it is stored and looked up (callers use the returned value, never their argument).
CREATE OR REPLACE FUNCTION pymem._store_path_check(path text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_segment text;
BEGIN
    path := pg_catalog.normalize(path, 'NFC');  -- before the checks: NFC may change the length
    IF path IS NULL OR path = '' THEN
        RAISE EXCEPTION 'pymem: a path must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.length(path) > 1024 THEN
        RAISE EXCEPTION 'pymem: a path is at most 1024 characters (got %)', pg_catalog.length(path) USING ERRCODE = '22023';
    END IF;
    IF path ~ '[\x01-\x1f\x7f\\]' THEN
        RAISE EXCEPTION 'pymem: a path must not contain control characters or backslashes' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.left(path, 1) = '/' THEN
        RAISE EXCEPTION 'pymem: a path is relative: % starts with /', pg_catalog.quote_literal(path) USING ERRCODE = '22023';
    END IF;
    FOREACH v_segment IN ARRAY pg_catalog.string_to_array(path, '/') LOOP
        IF v_segment IN ('', '.', '..') THEN
            RAISE EXCEPTION 'pymem: path % has an empty, . or .. segment', pg_catalog.quote_literal(path)
                USING ERRCODE = '22023';
        END IF;
        IF pg_catalog.length(v_segment) > 255 THEN
            RAISE EXCEPTION 'pymem: a path segment is at most 255 characters' USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF path = 'messages.json' OR pg_catalog.split_part(path, '/', 1) IN ('audit', 'meta', 'versions') THEN
        RAISE EXCEPTION 'pymem: % is reserved (the transcript, audit/, meta/ and versions/ are internal)',
                pg_catalog.quote_literal(path)
            USING ERRCODE = 'PM403';
    END IF;
    RETURN path;
END;
$$;

-- _store_get: the store row, locked FOR SHARE (a concurrent store_drop waits); P0002 if missing.
CREATE OR REPLACE FUNCTION pymem._store_get(p_store_key text, p_project_id text)
RETURNS pymem.stores
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_store pymem.stores;
BEGIN
    PERFORM pymem._store_key_check(p_store_key, p_project_id);
    PERFORM pymem._tenant_enter(p_project_id);  -- callers may reach here from a DECLARE, before their own
    SELECT s.* INTO v_store FROM pymem.stores AS s
     WHERE s.project_id = p_project_id AND s.store_key = p_store_key
       FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pymem: no store % in project %', pg_catalog.quote_literal(p_store_key),
                pg_catalog.quote_literal(p_project_id)
            USING ERRCODE = 'P0002', HINT = 'Create it with store_open(..., create => true).';
    END IF;
    RETURN v_store;
END;
$$;

-- _store_sha: sha256 (hex) of text as UTF-8.
CREATE OR REPLACE FUNCTION pymem._store_sha(content text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(content, 'UTF8')), 'hex');
$$;

-- _store_expected_check: expected_sha is NULL, '' or 64 lower-case hex digits.
CREATE OR REPLACE FUNCTION pymem._store_expected_check(expected_sha text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF expected_sha IS NOT NULL AND expected_sha <> '' AND expected_sha !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'pymem: expected_sha must be NULL, '''' (must not exist) or 64 hex digits'
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- _store_prefixes: read-only prefixes in their stored form: each a valid path (NFC, see
-- _store_path_check) with one trailing '/', duplicates dropped, in the order given. NULL
-- stays NULL ("not given").
CREATE OR REPLACE FUNCTION pymem._store_prefixes(prefixes text[])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_prefix text;
    v_out text[] := '{}';
BEGIN
    IF prefixes IS NULL THEN
        RETURN NULL;
    END IF;
    FOREACH v_prefix IN ARRAY prefixes LOOP
        v_prefix := pymem._store_path_check(pg_catalog.rtrim(v_prefix, '/')) || '/';
        IF NOT v_prefix = ANY (v_out) THEN
            v_out := v_out || v_prefix;
        END IF;
    END LOOP;
    RETURN v_out;
END;
$$;

-- _store_options_change: what setting a store's protections to the given values (NULL: keep;
-- prefixes as _store_prefixes returns them) would change, one readable line per protection
-- ('audit on -> off'), and whether any change weakens them: audit or keep_versions turned
-- off, or a read-only prefix that no new prefix covers (narrowing 'memory/' to 'memory/core/'
-- weakens; widening it to a parent tightens).
CREATE OR REPLACE FUNCTION pymem._store_options_change(
    p_store pymem.stores, p_audit boolean, p_keep_versions boolean, p_prefixes text[],
    OUT changes text[], OUT weakens boolean)
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    changes := '{}';
    weakens := false;
    IF p_audit IS NOT NULL AND p_audit <> p_store.audit THEN
        changes := changes || ('audit ' || CASE WHEN p_store.audit THEN 'on -> off' ELSE 'off -> on' END);
        weakens := weakens OR NOT p_audit;
    END IF;
    IF p_keep_versions IS NOT NULL AND p_keep_versions <> p_store.keep_versions THEN
        changes := changes || ('keep_versions '
                               || CASE WHEN p_store.keep_versions THEN 'on -> off' ELSE 'off -> on' END);
        weakens := weakens OR NOT p_keep_versions;
    END IF;
    IF p_prefixes IS NOT NULL
       AND (SELECT pg_catalog.array_agg(DISTINCT x.p ORDER BY x.p) FROM pg_catalog.unnest(p_prefixes) AS x(p))
           IS DISTINCT FROM
           (SELECT pg_catalog.array_agg(DISTINCT x.p ORDER BY x.p)
              FROM pg_catalog.unnest(p_store.read_only_prefixes) AS x(p)) THEN
        changes := changes || ('read_only_prefixes ' || p_store.read_only_prefixes::text || ' -> ' || p_prefixes::text);
        weakens := weakens OR EXISTS (
            SELECT 1 FROM pg_catalog.unnest(p_store.read_only_prefixes) AS o(p)
             WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(p_prefixes) AS n(p)
                                WHERE pg_catalog.starts_with(o.p, n.p)));
    END IF;
END;
$$;

-- store_open: opens a store, creating it when create is true (the default). A new store gets
-- the options given (NULL: audit on, no versions, no read-only prefixes). An existing store's
-- options are never changed here: an option given that differs from the stored one is refused
-- with PM404 (NULL always matches), so a caller never believes in a protection the store does
-- not have, and no caller can drop one by opening the store. Change them with store_protect
-- or store_configure.
--   SELECT * FROM pymem.store_open(store_key => 'research-assistant');
CREATE OR REPLACE FUNCTION pymem.store_open(
    store_key text,
    project_id text DEFAULT '',
    audit boolean DEFAULT NULL,
    keep_versions boolean DEFAULT NULL,
    read_only_prefixes text[] DEFAULT NULL,
    "create" boolean DEFAULT true)
RETURNS TABLE (audit_on boolean, versions_on boolean, read_only text[], transcript_len bigint,
               created_at timestamptz, created boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_prefixes text[];
    v_created boolean := false;
    v_store pymem.stores;
    v_changes text[];
BEGIN
    PERFORM pymem._tenant_enter(store_open.project_id);
    PERFORM pymem._store_key_check(store_open.store_key, store_open.project_id);
    v_prefixes := pymem._store_prefixes(store_open.read_only_prefixes);
    IF store_open."create" THEN
        INSERT INTO pymem.stores AS s (project_id, store_key, audit, keep_versions, read_only_prefixes)
        VALUES (store_open.project_id, store_open.store_key, coalesce(store_open.audit, true),
                coalesce(store_open.keep_versions, false), coalesce(v_prefixes, '{}'))
        ON CONFLICT (project_id, store_key) DO NOTHING;
        v_created := FOUND;
    END IF;
    IF NOT v_created THEN
        v_store := pymem._store_get(store_open.store_key, store_open.project_id);  -- P0002 when missing
        SELECT c.changes INTO v_changes
          FROM pymem._store_options_change(v_store, store_open.audit, store_open.keep_versions, v_prefixes) AS c;
        IF pg_catalog.cardinality(v_changes) > 0 THEN
            RAISE EXCEPTION 'pymem: store % exists with other options: opening it as asked would change %',
                    pg_catalog.quote_literal(store_open.store_key), pg_catalog.array_to_string(v_changes, '; ')
                USING ERRCODE = 'PM404',
                      HINT = 'store_open never changes an existing store''s options: open it without them, or '
                             'change them with pymem.store_protect (tighten) or pymem.store_configure (owner role).';
        END IF;
    END IF;
    RETURN QUERY
    SELECT s.audit, s.keep_versions, s.read_only_prefixes, s.transcript_len, s.created_at, v_created
      FROM pymem.stores AS s
     WHERE s.project_id = store_open.project_id AND s.store_key = store_open.store_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pymem: no store % in project %', pg_catalog.quote_literal(store_open.store_key),
                pg_catalog.quote_literal(store_open.project_id)
            USING ERRCODE = 'P0002';
    END IF;
END;
$$;

-- _store_writable: a valid path outside the store's read-only prefixes (PM402), for writes,
-- restores and deletes alike. Checks the path's NFC spelling (the one callers store).
CREATE OR REPLACE FUNCTION pymem._store_writable(p_store pymem.stores, p_path text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_prefix text;
BEGIN
    p_path := pymem._store_path_check(p_path);
    FOREACH v_prefix IN ARRAY p_store.read_only_prefixes LOOP
        IF pg_catalog.starts_with(p_path || '/', v_prefix) THEN
            RAISE EXCEPTION 'pymem: % is under the read-only prefix %', pg_catalog.quote_literal(p_path),
                    pg_catalog.quote_literal(v_prefix)
                USING ERRCODE = 'PM402';
        END IF;
    END LOOP;
END;
$$;

-- _store_put: the one write path (write and restore): validates, checks expected_sha under
-- the entry's row lock, writes the entry (with its expiry: p_expires_at or p_ttl, see
-- pymem._expiry), its version and its audit record. An expired entry at the path is deleted
-- first (with its vectors) and the path written as a new one.
CREATE OR REPLACE FUNCTION pymem._store_put(
    p_store pymem.stores, p_path text, p_content text, p_kind text, p_actor text, p_reason text,
    p_expected text, p_op text, p_expires_at timestamptz, p_ttl interval)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    v_sha text;
    v_old text;
    v_version integer;
    v_expiry timestamptz;
    v_old_expiry timestamptz;
BEGIN
    v_expiry := pymem._expiry(p_expires_at, p_ttl);  -- 22023 before anything is written
    PERFORM pymem._store_writable(p_store, p_path);
    p_path := pymem._store_path_check(p_path);  -- its NFC spelling, from here on
    IF p_content IS NULL THEN
        RAISE EXCEPTION 'pymem: content must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF p_kind IS NULL OR p_kind NOT IN ('text', 'json') THEN
        RAISE EXCEPTION 'pymem: kind must be text or json' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.octet_length(p_content) > 8388608 THEN
        RAISE EXCEPTION 'pymem: content is % bytes; the limit is 8 MiB (8388608)', pg_catalog.octet_length(p_content)
            USING ERRCODE = '22023';
    END IF;
    IF p_kind = 'json' THEN
        BEGIN
            PERFORM pymem._json_bounded(p_content::jsonb, 'a json document', 8388608);  -- 64 levels at most
        EXCEPTION WHEN invalid_text_representation THEN
            RAISE EXCEPTION 'pymem: content of kind json is not valid JSON' USING ERRCODE = '22023';
        END;
    END IF;
    IF pg_catalog.length(p_actor) > 256 OR pg_catalog.length(p_reason) > 1024 THEN
        RAISE EXCEPTION 'pymem: actor is at most 256 and reason at most 1024 characters' USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._store_expected_check(p_expected);
    v_sha := pymem._store_sha(p_content);
    LOOP
        SELECT e.sha, e.version, e.expires_at INTO v_old, v_version, v_old_expiry FROM pymem.store_entries AS e
         WHERE e.project_id = p_store.project_id AND e.store_key = p_store.store_key AND e.path = p_path
           FOR UPDATE;
        IF FOUND AND NOT pymem._entry_live(v_old_expiry, pg_catalog.now()) THEN
            -- expired: the path does not exist for any read, nor for this write
            DELETE FROM pymem.store_entries AS e
             WHERE e.project_id = p_store.project_id AND e.store_key = p_store.store_key AND e.path = p_path;
        ELSIF FOUND THEN
            IF p_expected IS NOT NULL AND p_expected <> v_old THEN
                RAISE EXCEPTION 'pymem: % changed: its sha is %, not the expected %', pg_catalog.quote_literal(p_path),
                        v_old, CASE WHEN p_expected = '' THEN '(must not exist)' ELSE p_expected END
                    USING ERRCODE = 'PM401';
            END IF;
            v_version := v_version + 1;
            UPDATE pymem.store_entries AS e
               SET kind = p_kind, content = p_content, sha = v_sha, size = pg_catalog.octet_length(p_content),
                   version = v_version, actor = p_actor, reason = p_reason, updated_at = pg_catalog.clock_timestamp(),
                   expires_at = v_expiry, ttl = p_ttl
             WHERE e.project_id = p_store.project_id AND e.store_key = p_store.store_key AND e.path = p_path;
            EXIT;
        END IF;
        IF p_expected IS NOT NULL AND p_expected <> '' THEN
            RAISE EXCEPTION 'pymem: % does not exist (expected sha %)', pg_catalog.quote_literal(p_path), p_expected
                USING ERRCODE = 'PM401';
        END IF;
        SELECT coalesce(pg_catalog.max(v.version), 0) + 1 INTO v_version FROM pymem.store_versions AS v
         WHERE v.project_id = p_store.project_id AND v.store_key = p_store.store_key AND v.path = p_path;
        INSERT INTO pymem.store_entries AS e (project_id, store_key, path, kind, content, sha, size, version, actor,
                                              reason, expires_at, ttl)
        VALUES (p_store.project_id, p_store.store_key, p_path, p_kind, p_content, v_sha,
                pg_catalog.octet_length(p_content), v_version, p_actor, p_reason, v_expiry, p_ttl)
        ON CONFLICT (project_id, store_key, path) DO NOTHING;
        IF FOUND THEN
            v_old := NULL;
            EXIT;
        END IF;
        -- another writer created the path first
        IF p_expected = '' THEN
            RAISE EXCEPTION 'pymem: % was created by another writer', pg_catalog.quote_literal(p_path)
                USING ERRCODE = 'PM401';
        END IF;
    END LOOP;
    IF p_store.keep_versions THEN
        INSERT INTO pymem.store_versions (project_id, store_key, path, version, kind, content, sha, actor, reason)
        VALUES (p_store.project_id, p_store.store_key, p_path, v_version, p_kind, p_content, v_sha, p_actor, p_reason);
    END IF;
    IF p_store.audit THEN
        INSERT INTO pymem.store_audit (project_id, store_key, path, op, old_sha, new_sha, actor, reason)
        VALUES (p_store.project_id, p_store.store_key, p_path, p_op, v_old, v_sha, p_actor, p_reason);
    END IF;
    RETURN v_sha;
END;
$$;

-- store_write: writes text or JSON at a path; returns the new sha256. expires_at, or ttl (an
-- interval from now): when the entry expires (22023 for both, a ttl not positive, an expires_at
-- not in the future, either beyond 100 years); neither: never (a write replaces the expiry too).
--   SELECT pymem.store_write(store_key => 'research-assistant', path => 'notes/today.md',
--                            content => '- read the paper', actor => 'agent', reason => 'note');
CREATE OR REPLACE FUNCTION pymem.store_write(
    store_key text, path text, content text, kind text DEFAULT 'text', actor text DEFAULT NULL,
    reason text DEFAULT NULL, expected_sha text DEFAULT NULL, project_id text DEFAULT '',
    expires_at timestamptz DEFAULT NULL, ttl interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    PERFORM pymem._tenant_enter(store_write.project_id);
    RETURN pymem._store_put(pymem._store_get(store_write.store_key, store_write.project_id), store_write.path,
                            store_write.content, store_write.kind, store_write.actor, store_write.reason,
                            store_write.expected_sha, 'write', store_write.expires_at, store_write.ttl);
END;
$$;

-- store_read: the entry at a path (no row when it does not exist or has expired); expires_at
-- NULL: it never expires.
--   SELECT content, sha FROM pymem.store_read(store_key => 'research-assistant', path => 'notes/today.md');
CREATE OR REPLACE FUNCTION pymem.store_read(store_key text, path text, project_id text DEFAULT '')
RETURNS TABLE (kind text, content text, sha text, size integer, version integer, actor text, reason text,
               created_at timestamptz, updated_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_path text;
BEGIN
    PERFORM pymem._tenant_enter(store_read.project_id);
    PERFORM pymem._store_key_check(store_read.store_key, store_read.project_id);
    v_path := pymem._store_path_check(store_read.path);
    RETURN QUERY
    SELECT e.kind, e.content, e.sha, e.size, e.version, e.actor, e.reason, e.created_at, e.updated_at, e.expires_at
      FROM pymem.store_entries AS e
     WHERE e.project_id = store_read.project_id AND e.store_key = store_read.store_key
       AND e.path = v_path AND pymem._entry_live(e.expires_at, pg_catalog.now());
END;
$$;

-- store_meta: an entry's metadata without its content (no row when it does not exist or has
-- expired); expires_at NULL: it never expires.
CREATE OR REPLACE FUNCTION pymem.store_meta(store_key text, path text, project_id text DEFAULT '')
RETURNS TABLE (kind text, sha text, size integer, version integer, actor text, reason text,
               created_at timestamptz, updated_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_path text;
BEGIN
    PERFORM pymem._tenant_enter(store_meta.project_id);
    PERFORM pymem._store_key_check(store_meta.store_key, store_meta.project_id);
    v_path := pymem._store_path_check(store_meta.path);
    RETURN QUERY
    SELECT e.kind, e.sha, e.size, e.version, e.actor, e.reason, e.created_at, e.updated_at, e.expires_at
      FROM pymem.store_entries AS e
     WHERE e.project_id = store_meta.project_id AND e.store_key = store_meta.store_key
       AND e.path = v_path AND pymem._entry_live(e.expires_at, pg_catalog.now());
END;
$$;

-- store_list: the paths under a prefix ('' = all; NFC-normalised like paths), sorted, with
-- their metadata; expired entries are left out.
--   SELECT path, sha FROM pymem.store_list(store_key => 'research-assistant', prefix => 'notes/');
CREATE OR REPLACE FUNCTION pymem.store_list(store_key text, prefix text DEFAULT '', project_id text DEFAULT '')
RETURNS TABLE (path text, kind text, sha text, size integer, version integer, actor text, updated_at timestamptz,
               expires_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_prefix text;
BEGIN
    PERFORM pymem._tenant_enter(store_list.project_id);
    PERFORM pymem._store_key_check(store_list.store_key, store_list.project_id);
    v_prefix := pg_catalog.normalize(store_list.prefix, 'NFC');
    IF v_prefix IS NULL OR pg_catalog.length(v_prefix) > 1024 THEN
        RAISE EXCEPTION 'pymem: prefix must be a string of at most 1024 characters' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT e.path, e.kind, e.sha, e.size, e.version, e.actor, e.updated_at, e.expires_at
      FROM pymem.store_entries AS e
     WHERE e.project_id = store_list.project_id AND e.store_key = store_list.store_key
       AND pg_catalog.starts_with(e.path, v_prefix) AND pymem._entry_live(e.expires_at, pg_catalog.now())
     ORDER BY e.path COLLATE "C";
END;
$$;

-- store_delete: deletes a path (true), or does nothing (false) when it does not exist (or has
-- expired: then its row goes, unlogged, as a purge would take it) and no expected_sha was
-- given. expected_sha guards it like a write.
CREATE OR REPLACE FUNCTION pymem.store_delete(
    store_key text, path text, actor text DEFAULT NULL, reason text DEFAULT NULL,
    expected_sha text DEFAULT NULL, project_id text DEFAULT '')
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_store pymem.stores := pymem._store_get(store_delete.store_key, store_delete.project_id);
    v_old text;
    v_old_expiry timestamptz;
    v_exists boolean;
    v_path text;
BEGIN
    PERFORM pymem._tenant_enter(store_delete.project_id);
    PERFORM pymem._store_writable(v_store, store_delete.path);
    v_path := pymem._store_path_check(store_delete.path);
    PERFORM pymem._store_expected_check(store_delete.expected_sha);
    IF store_delete.expected_sha = '' THEN
        RAISE EXCEPTION 'pymem: expected_sha '''' (must not exist) makes no sense for a delete' USING ERRCODE = '22023';
    END IF;
    SELECT e.sha, e.expires_at INTO v_old, v_old_expiry FROM pymem.store_entries AS e
     WHERE e.project_id = v_store.project_id AND e.store_key = v_store.store_key AND e.path = v_path
       FOR UPDATE;
    v_exists := FOUND;
    IF v_exists AND NOT pymem._entry_live(v_old_expiry, pg_catalog.now()) THEN  -- expired: as if not there
        DELETE FROM pymem.store_entries AS e
         WHERE e.project_id = v_store.project_id AND e.store_key = v_store.store_key AND e.path = v_path;
        v_exists := false;
    END IF;
    IF NOT v_exists THEN
        IF store_delete.expected_sha IS NOT NULL THEN
            RAISE EXCEPTION 'pymem: % does not exist (expected sha %)', pg_catalog.quote_literal(v_path),
                    store_delete.expected_sha
                USING ERRCODE = 'PM401';
        END IF;
        RETURN false;
    END IF;
    IF store_delete.expected_sha IS NOT NULL AND store_delete.expected_sha <> v_old THEN
        RAISE EXCEPTION 'pymem: % changed: its sha is %, not the expected %', pg_catalog.quote_literal(v_path),
                v_old, store_delete.expected_sha
            USING ERRCODE = 'PM401';
    END IF;
    DELETE FROM pymem.store_entries AS e
     WHERE e.project_id = v_store.project_id AND e.store_key = v_store.store_key AND e.path = v_path;
    IF v_store.audit THEN
        INSERT INTO pymem.store_audit (project_id, store_key, path, op, old_sha, new_sha, actor, reason)
        VALUES (v_store.project_id, v_store.store_key, v_path, 'delete', v_old, NULL,
                store_delete.actor, store_delete.reason);
    END IF;
    RETURN true;
END;
$$;

-- store_drop: deletes a store with its transcript, entries, audit and versions; returns the
-- number of stores deleted. '' deletes nothing; '*' deletes every store of the project.
--   SELECT pymem.store_drop(store_key => 'research-assistant');
CREATE OR REPLACE FUNCTION pymem.store_drop(store_key text, project_id text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer;
BEGIN
    PERFORM pymem._tenant_enter(store_drop.project_id);
    IF store_drop.store_key <> '*' THEN  -- an empty key is refused there (22023), not "0 dropped"
        PERFORM pymem._store_key_check(store_drop.store_key, store_drop.project_id);
    ELSIF store_drop.project_id IS NULL OR store_drop.project_id = '*' THEN
        RAISE EXCEPTION 'pymem: project_id must name one project' USING ERRCODE = '22023';
    END IF;
    IF store_drop.store_key = '*' THEN
        DELETE FROM pymem.stores AS s WHERE s.project_id = store_drop.project_id;
    ELSE
        DELETE FROM pymem.stores AS s
         WHERE s.project_id = store_drop.project_id AND s.store_key = store_drop.store_key;
    END IF;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;
