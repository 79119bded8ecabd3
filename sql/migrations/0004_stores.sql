-- 0004_stores: keyed memory stores: a transcript plus path-addressed entries with
-- sha/actor/time metadata, an audit log and optional version history. Applied once under the
-- migration lock; functions live in api/stores.sql.
--
-- Every key starts with (project_id, store_key): the distribution key for partitions/Citus.

CREATE TABLE pymem.stores (
    project_id         text        NOT NULL DEFAULT '',
    store_key          text        NOT NULL,
    audit              boolean     NOT NULL DEFAULT true,
    keep_versions      boolean     NOT NULL DEFAULT false,
    read_only_prefixes text[]      NOT NULL DEFAULT '{}',
    transcript_len     bigint      NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at         timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT stores_pkey PRIMARY KEY (project_id, store_key),
    CONSTRAINT stores_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT stores_key_check CHECK (store_key NOT IN ('', '*') AND pg_catalog.length(store_key) <= 512)
);

COMMENT ON TABLE pymem.stores IS 'Keyed memory stores and their options';

-- The transcript: chat messages (JSON objects with at least role and content), append-only.
CREATE TABLE pymem.store_messages (
    project_id text        NOT NULL,
    store_key  text        NOT NULL,
    seq        bigint      NOT NULL,
    message    jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT store_messages_pkey PRIMARY KEY (project_id, store_key, seq),
    CONSTRAINT store_messages_store_fkey FOREIGN KEY (project_id, store_key)
        REFERENCES pymem.stores (project_id, store_key) ON DELETE CASCADE,
    CONSTRAINT store_messages_message_check CHECK (pg_catalog.jsonb_typeof(message) = 'object')
);

-- Path-addressed entries: the current content of each path, with its metadata.
CREATE TABLE pymem.store_entries (
    project_id text        NOT NULL,
    store_key  text        NOT NULL,
    path       text        NOT NULL,
    kind       text        NOT NULL,
    content    text        NOT NULL,
    sha        text        NOT NULL,
    size       integer     NOT NULL,
    version    integer     NOT NULL,
    actor      text,
    reason     text,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT store_entries_pkey PRIMARY KEY (project_id, store_key, path),
    CONSTRAINT store_entries_store_fkey FOREIGN KEY (project_id, store_key)
        REFERENCES pymem.stores (project_id, store_key) ON DELETE CASCADE,
    CONSTRAINT store_entries_kind_check CHECK (kind IN ('text', 'json')),
    CONSTRAINT store_entries_sha_check CHECK (sha ~ '^[0-9a-f]{64}$'),
    CONSTRAINT store_entries_size_check CHECK (size >= 0 AND size <= 8388608)
);

-- Audit log: every successful write, delete and restore, in order.
CREATE TABLE pymem.store_audit (
    project_id text        NOT NULL,
    store_key  text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    path       text        NOT NULL,
    op         text        NOT NULL,
    old_sha    text,
    new_sha    text,
    actor      text,
    reason     text,
    at         timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT store_audit_pkey PRIMARY KEY (project_id, store_key, id),
    CONSTRAINT store_audit_store_fkey FOREIGN KEY (project_id, store_key)
        REFERENCES pymem.stores (project_id, store_key) ON DELETE CASCADE,
    CONSTRAINT store_audit_op_check CHECK (op IN ('write', 'delete', 'restore'))
);

-- Version history (stores with keep_versions): every written content of a path, numbered.
CREATE TABLE pymem.store_versions (
    project_id text        NOT NULL,
    store_key  text        NOT NULL,
    path       text        NOT NULL,
    version    integer     NOT NULL,
    kind       text        NOT NULL,
    content    text        NOT NULL,
    sha        text        NOT NULL,
    actor      text,
    reason     text,
    at         timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT store_versions_pkey PRIMARY KEY (project_id, store_key, path, version),
    CONSTRAINT store_versions_store_fkey FOREIGN KEY (project_id, store_key)
        REFERENCES pymem.stores (project_id, store_key) ON DELETE CASCADE
);
