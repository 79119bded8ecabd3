-- 0002_facts: durable facts and their embeddings.
-- Applied once under the migration lock. Functions over these tables live in api/facts.sql.
--
-- A fact belongs to a subject (project_id, scope, scope_id). Every key and hot index starts
-- with that subject, so the tables can move to hash partitions or Citus (distributed by
-- project_id, or by (project_id, scope_id)) without a rewrite.

CREATE TABLE pymem.facts (
    project_id    text        NOT NULL DEFAULT '',
    scope         text        NOT NULL,
    scope_id      text        NOT NULL,
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    content       text        NOT NULL,
    -- sha256 of the normalised content (see api/facts.sql, fact_key): the equality of
    -- idempotent add; a btree over raw text breaks past ~2.7 kB, a 32-byte key never does.
    content_key   bytea       NOT NULL,
    confidence    double precision NOT NULL DEFAULT 1.0,
    source        text        NOT NULL DEFAULT 'manual',
    trace_id      text,
    metadata      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    superseded_by bigint,
    superseded_at timestamptz,
    CONSTRAINT facts_pkey PRIMARY KEY (project_id, scope, scope_id, id),
    CONSTRAINT facts_scope_check CHECK (scope IN ('agent', 'user', 'project')),
    -- '' is a valid agent id only to file a fact no agent will read; '*' is the read wildcard
    CONSTRAINT facts_scope_id_check CHECK (
        scope_id <> '*' AND pg_catalog.length(scope_id) <= 256 AND (scope_id <> '' OR scope = 'agent')),
    CONSTRAINT facts_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT facts_content_check CHECK (content <> '' AND pg_catalog.length(content) <= 65536),
    CONSTRAINT facts_content_key_check CHECK (pg_catalog.length(content_key) = 32),
    CONSTRAINT facts_confidence_check CHECK (confidence >= 0 AND confidence <= 1),
    CONSTRAINT facts_source_check CHECK (source IN ('manual', 'learned', 'trace')),
    CONSTRAINT facts_metadata_check CHECK (pg_catalog.jsonb_typeof(metadata) = 'object'),
    CONSTRAINT facts_trace_id_check CHECK (pg_catalog.length(trace_id) <= 256),
    -- supersede chains: a row never points at itself ...
    CONSTRAINT facts_not_self_superseded CHECK (superseded_by <> id),
    CONSTRAINT facts_superseded_pair CHECK ((superseded_by IS NULL) = (superseded_at IS NULL)),
    -- ... only at a row of the same subject, and never at a row that is gone: deleting a fact
    -- deletes the versions it replaced (its history) with it.
    CONSTRAINT facts_superseded_by_fkey FOREIGN KEY (project_id, scope, scope_id, superseded_by)
        REFERENCES pymem.facts (project_id, scope, scope_id, id) ON DELETE CASCADE
);

COMMENT ON TABLE pymem.facts IS 'Durable facts per subject (project_id, scope, scope_id), versioned by supersede chains';

-- Idempotent add: one active row per subject and normalised content.
CREATE UNIQUE INDEX facts_active_content_key ON pymem.facts (project_id, scope, scope_id, content_key)
    WHERE superseded_by IS NULL;
-- A chain is a straight line: no row has two predecessors. Also serves the FK's cascade.
CREATE UNIQUE INDEX facts_predecessor ON pymem.facts (project_id, scope, scope_id, superseded_by)
    WHERE superseded_by IS NOT NULL;
-- Newest-first reads of one subject's active facts.
CREATE INDEX facts_subject_active_newest ON pymem.facts (project_id, scope, scope_id, created_at DESC, id DESC)
    WHERE superseded_by IS NULL;
-- Newest-first reads across a scope (scope_id '*').
CREATE INDEX facts_scope_active_newest ON pymem.facts (project_id, scope, created_at DESC, id DESC)
    WHERE superseded_by IS NULL;
-- Per-subject cap on learned facts: the subject's active learned rows, oldest last.
CREATE INDEX facts_subject_learned_newest ON pymem.facts (project_id, scope, scope_id, created_at DESC, id DESC)
    WHERE superseded_by IS NULL AND source = 'learned';

-- One vector per fact and embedder: vectors of two models never mix, and switching models
-- only means the new model's vectors are computed (the old ones stay until the fact goes).
CREATE TABLE pymem.fact_embeddings (
    project_id text        NOT NULL,
    scope      text        NOT NULL,
    scope_id   text        NOT NULL,
    fact_id    bigint      NOT NULL,
    embedder   text        NOT NULL,
    embedding  vector      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT fact_embeddings_pkey PRIMARY KEY (project_id, scope, scope_id, fact_id, embedder),
    CONSTRAINT fact_embeddings_fact_fkey FOREIGN KEY (project_id, scope, scope_id, fact_id)
        REFERENCES pymem.facts (project_id, scope, scope_id, id) ON DELETE CASCADE
);

COMMENT ON TABLE pymem.fact_embeddings IS 'Fact vectors, one per (fact, embedder)';

-- The dimension each embedder name produces, per project (one tenant's names never constrain
-- another's); a vector of another size is refused.
CREATE TABLE pymem.embedders (
    project_id text        NOT NULL DEFAULT '',
    name       text        NOT NULL CHECK (name <> '' AND pg_catalog.length(name) <= 200),
    dimension  integer     NOT NULL CHECK (dimension BETWEEN 1 AND 16000),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT embedders_pkey PRIMARY KEY (project_id, name)
);

COMMENT ON TABLE pymem.embedders IS 'Embedder names and the dimension of their vectors';
