-- 0021_integrations: what the framework adapters (pymem.integrations) need from the schema.
-- Applied once under the migration lock.
--
-- 1. pymem.store_vectors: vectors of keyed-store entries, for search by meaning over a store's
-- JSON items (pymem.store_items_search; LangGraph's store, pymem.integrations.langgraph).
--
-- One row per (entry, embedder, field): an entry may have a vector for each field of its JSON
-- value that was embedded ('$' for the whole value, 'text', 'tags.0', ...). Each row carries the
-- sha of the content it was computed from: a search uses only the vectors whose sha is the
-- entry's current sha, so a later write by any other path (store_write, store_restore) leaves
-- the old vectors unused instead of wrong; store_item_put replaces them. Deleting the entry (or
-- the store) deletes them. No vector index: a search reads one store's vectors under a path
-- prefix, an exact scan (README "Keyed stores").
--
-- The table names pgvector's type through dynamic SQL with its schema written out: this
-- migration runs under the pinned search_path, which does not hold pgvector's schema.
DO $$
DECLARE
    v_schema text;
BEGIN
    SELECT pg_catalog.quote_ident(n.nspname::text) INTO v_schema
      FROM pg_catalog.pg_extension AS e
      JOIN pg_catalog.pg_namespace AS n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    EXECUTE pg_catalog.format($t$
        CREATE TABLE pymem.store_vectors (
            project_id text        NOT NULL,
            store_key  text        NOT NULL,
            path       text        NOT NULL,
            embedder   text        NOT NULL,
            field      text        NOT NULL,
            sha        text        NOT NULL,
            embedding  %1$s.vector NOT NULL,
            created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
            CONSTRAINT store_vectors_pkey PRIMARY KEY (project_id, store_key, path, embedder, field),
            CONSTRAINT store_vectors_entry_fkey FOREIGN KEY (project_id, store_key, path)
                REFERENCES pymem.store_entries (project_id, store_key, path) ON DELETE CASCADE,
            CONSTRAINT store_vectors_field_check CHECK (field <> '' AND pg_catalog.length(field) <= 1024)
        )$t$, v_schema);
END;
$$;

COMMENT ON TABLE pymem.store_vectors IS 'Vectors of keyed-store entries, one per (entry, embedder, field), valid while sha is the entry''s';

ALTER TABLE pymem.store_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.store_vectors FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.store_vectors
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

-- 2. facts by id within a project (pymem.fact_get; the FactStore protocol of fastaiagent,
-- pymem.integrations.fastaiagent, names a fact by its id alone). The primary key leads with the
-- subject, so without this index a lookup by id would read every fact of the project.
CREATE INDEX facts_project_id_id ON pymem.facts (project_id, id);
