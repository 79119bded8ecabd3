-- 0022_text_search: each project chooses the text search configuration of its lexemes (the
-- lexical half of hybrid recall, issue 14): english by default, e.g. german, french, simple (no
-- stemming, no stop words: any language, or identifiers), or one a DBA created. Applied once
-- under the migration lock.
--
-- A project's words are turned into lexemes by one function, pymem._lexemes(project_id, content)
-- (api/00_common.sql), on write (messages, facts) and on every query, so that both agree; it
-- reads the project's row here, english when there is none. Changing it re-indexes the project's
-- stored lexemes (pymem.text_search_configure, same transaction). A row per project that chose
-- one: a small table, read by primary key, with the tenant's row-level security like every table
-- that names a project.

-- config is the configuration's name (schema-qualified unless in pg_catalog), as text: a regconfig
-- column would make the database refuse pg_upgrade (reg* types in user tables), and a name whose
-- configuration was dropped fails with a clear error where it is read (42704), not a cache lookup.
CREATE TABLE pymem.text_search (
    project_id text        NOT NULL,
    config     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT text_search_pkey PRIMARY KEY (project_id),
    CONSTRAINT text_search_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256)
);

COMMENT ON TABLE pymem.text_search IS 'Text search configuration of each project''s lexemes (default english)';

ALTER TABLE pymem.text_search ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.text_search FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.text_search
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
