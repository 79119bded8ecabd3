-- stores_protections.sql: a keyed store's protections (audit, keep_versions, read-only
-- prefixes) and their one place of change: store_protect (tighten), store_configure (set, weakening
-- allowed, with a reason) and _store_protections_set behind both, which reads what a change
-- would do with _store_options_change (stores.sql, where store_open uses it too). Part of keyed stores
-- (stores.sql; tables in migrations/0004_stores.sql, 0006_v0_2_0_memory.sql). Re-applied on
-- every migrate; called by pymem/stores.py and by any SQL client.
--
-- Errors: 22023 invalid argument; P0002 no such store; 42501 store_protect asked to weaken a
-- protection.

-- _store_protections_set: the one place a store's protections change (store_protect,
-- store_configure). Locks the store row (writers in flight finish first; later ones see the new
-- settings), refuses (42501) a weakening unless p_weaken, and logs the change to the audit log
-- (op 'unprotect' when it weakens anything, else 'protect'; path '' = the store itself) before
-- it applies it, whatever the store's audit setting. No change: no audit row, changed false.
CREATE OR REPLACE FUNCTION pymem._store_protections_set(
    p_store_key text, p_project_id text, p_audit boolean, p_keep_versions boolean, p_prefixes text[],
    p_actor text, p_reason text, p_weaken boolean)
RETURNS TABLE (audit_on boolean, versions_on boolean, read_only text[], changed boolean)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_store pymem.stores;
    v_prefixes text[];
    v_changes text[];
    v_weakens boolean;
BEGIN
    PERFORM pymem._tenant_enter(p_project_id);
    PERFORM pymem._store_key_check(p_store_key, p_project_id);
    IF pg_catalog.length(p_actor) > 256 OR pg_catalog.length(p_reason) > 1024 THEN
        RAISE EXCEPTION 'pymem: actor is at most 256 and reason at most 1024 characters' USING ERRCODE = '22023';
    END IF;
    v_prefixes := pymem._store_prefixes(p_prefixes);
    SELECT s.* INTO v_store FROM pymem.stores AS s
     WHERE s.project_id = p_project_id AND s.store_key = p_store_key
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pymem: no store % in project %', pg_catalog.quote_literal(p_store_key),
                pg_catalog.quote_literal(p_project_id)
            USING ERRCODE = 'P0002';
    END IF;
    SELECT c.changes, c.weakens INTO v_changes, v_weakens
      FROM pymem._store_options_change(v_store, p_audit, p_keep_versions, v_prefixes) AS c;
    IF v_weakens AND NOT p_weaken THEN
        RAISE EXCEPTION 'pymem: store_protect only tightens a store''s protections; this would weaken them (%)',
                pg_catalog.array_to_string(v_changes, '; ')
            USING ERRCODE = '42501',
                  HINT = 'The owner role (an administrator) may weaken them with pymem.store_configure.';
    END IF;
    IF pg_catalog.cardinality(v_changes) > 0 THEN
        INSERT INTO pymem.store_audit (project_id, store_key, path, op, old_sha, new_sha, actor, reason)
        VALUES (v_store.project_id, v_store.store_key, '', CASE WHEN v_weakens THEN 'unprotect' ELSE 'protect' END,
                NULL, NULL, p_actor, coalesce(p_reason || ': ', '') || pg_catalog.array_to_string(v_changes, '; '));
        UPDATE pymem.stores AS s
           SET audit = coalesce(p_audit, s.audit),
               keep_versions = coalesce(p_keep_versions, s.keep_versions),
               read_only_prefixes = coalesce(v_prefixes, s.read_only_prefixes),
               updated_at = pg_catalog.clock_timestamp()
         WHERE s.project_id = v_store.project_id AND s.store_key = v_store.store_key;
    END IF;
    RETURN QUERY
    SELECT s.audit, s.keep_versions, s.read_only_prefixes, pg_catalog.cardinality(v_changes) > 0
      FROM pymem.stores AS s
     WHERE s.project_id = v_store.project_id AND s.store_key = v_store.store_key;
END;
$$;

-- store_protect: tightens an existing store's protections: turns audit or keep_versions on,
-- or sets read_only_prefixes to a list covering every current prefix (NULL keeps a setting).
-- Anything that would weaken them is refused (42501) and changes nothing. Logged to the audit
-- log as op 'protect'. Granted to the app role.
--   SELECT * FROM pymem.store_protect(store_key => 'research-assistant',
--                                     read_only_prefixes => ARRAY['memory/', 'policies/'], actor => 'ops');
CREATE OR REPLACE FUNCTION pymem.store_protect(
    store_key text, audit boolean DEFAULT NULL, keep_versions boolean DEFAULT NULL,
    read_only_prefixes text[] DEFAULT NULL, actor text DEFAULT NULL, reason text DEFAULT NULL,
    project_id text DEFAULT '')
RETURNS TABLE (audit_on boolean, versions_on boolean, read_only text[], changed boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN QUERY  -- _store_protections_set enters the tenant and checks everything
    SELECT * FROM pymem._store_protections_set(store_protect.store_key, store_protect.project_id, store_protect.audit,
                                               store_protect.keep_versions, store_protect.read_only_prefixes,
                                               store_protect.actor, store_protect.reason, false);
END;
$$;

-- store_configure: sets an existing store's protections to the values given, weakening them
-- too (NULL keeps a setting; read_only_prefixes => '{}' removes every prefix). Logged to the
-- audit log first (op 'unprotect' when it weakens anything, else 'protect'), even when it turns
-- the audit log off. Not granted to the app or reader role: the owner role, its members and
-- superusers (administrators) call it.
--   SELECT * FROM pymem.store_configure(store_key => 'research-assistant', read_only_prefixes => '{}',
--                                       actor => 'dba', reason => 'memory/ is rewritten by the importer');
CREATE OR REPLACE FUNCTION pymem.store_configure(
    store_key text, audit boolean DEFAULT NULL, keep_versions boolean DEFAULT NULL,
    read_only_prefixes text[] DEFAULT NULL, actor text DEFAULT NULL, reason text DEFAULT NULL,
    project_id text DEFAULT '')
RETURNS TABLE (audit_on boolean, versions_on boolean, read_only text[], changed boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN QUERY  -- _store_protections_set enters the tenant and checks everything
    SELECT * FROM pymem._store_protections_set(store_configure.store_key, store_configure.project_id,
                                               store_configure.audit, store_configure.keep_versions,
                                               store_configure.read_only_prefixes, store_configure.actor,
                                               store_configure.reason, true);
END;
$$;
