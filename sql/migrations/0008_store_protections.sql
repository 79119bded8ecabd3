-- 0008_store_protections: store protection changes are audited, and store paths are NFC.
-- Applied once under the migration lock (search_path pg_catalog, pymem, pg_temp); the functions
-- live in api/stores.sql.
--
-- 1. The audit log records protection changes made by store_protect / store_configure: op
--    'protect' (tightened) or 'unprotect' (weakened something), on path '' (the store itself).
-- 2. Paths are stored in Unicode NFC from now on (api/stores.sql normalises every path and
--    prefix where it enters). Paths and read-only prefixes written before in another form are
--    rewritten to NFC here, in entries, versions and audit records alike. A name stored under
--    two spellings (both the NFC and an NFD form were written) cannot be merged without
--    choosing between two contents: such spellings are left as they are and named in a
--    WARNING, for an administrator to resolve (read both, delete one with its exact spelling
--    through SQL as the owner, or move it).
--
-- Row-level security is forced on these tables, so even their owner sees no row without a
-- tenant; the rewrite spans every tenant, so it lifts FORCE for its own statements and restores
-- it before the transaction ends (ALTER TABLE holds an ACCESS EXCLUSIVE lock meanwhile, so no
-- other session ever sees the tables unforced). Superusers, the owner role and its members may
-- do this; they are the roles allowed to migrate.

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
    -- names spelled more than one way among a store's entries and versions: left alone
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
