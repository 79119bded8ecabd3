-- 0038_erasures: the receipts of user erasures (pymem.user_forget, api/portability.sql). An
-- erasure deletes every row of one user of one project in one transaction and leaves one row
-- here, which survives it: when, by which login role, how many rows of each kind, and a digest
-- of what was deleted. Neither the receipt nor its digest holds content or the user's id: the
-- user is named by subject = sha256(salt || the JSON array [project_id, user_id]) with a random
-- salt of its own, so whoever knows the id can find the receipt (pymem.erasures(user_id => ...))
-- and the table alone gives no list of ids; the digest is sha256 over one line per deleted row
-- (its key and the sha256 of its content), in a fixed order, so a backup taken before the
-- erasure can be checked against it.
-- Readable by the owner role only (no grant to the app or reader role: pymem.erasures is an
-- administrators' function); written only by user_forget (SECURITY DEFINER). Row-level security
-- as every table: a receipt belongs to its project. Applied once under the migration lock.
CREATE TABLE pymem.erasures (
    project_id text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    subject    text        NOT NULL,
    salt       text        NOT NULL,
    erased_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    erased_by  text        NOT NULL,
    counts     jsonb       NOT NULL,
    digest     text        NOT NULL,
    CONSTRAINT erasures_pkey PRIMARY KEY (project_id, id),
    CONSTRAINT erasures_project_id_check CHECK (project_id <> '*' AND pg_catalog.length(project_id) <= 256),
    CONSTRAINT erasures_subject_check CHECK (subject ~ '^[0-9a-f]{64}$'),
    CONSTRAINT erasures_digest_check CHECK (digest ~ '^[0-9a-f]{64}$'),
    CONSTRAINT erasures_counts_check CHECK (pg_catalog.jsonb_typeof(counts) = 'object')
);

COMMENT ON TABLE pymem.erasures IS
    'Receipts of user erasures (user_forget): when, by whom, counts per kind, a digest; no content, no user id';

ALTER TABLE pymem.erasures ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.erasures FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.erasures
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));
