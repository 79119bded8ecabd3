-- 0010_fact_merges: a supersede onto content that is already an active fact of the subject
-- retires the old fact into that fact (api/facts.sql, fact_supersede). History becomes a tree
-- merging into its newest version: a fact still has at most one successor, but may now have
-- several predecessors. Applied once under the migration lock.

-- facts_predecessor was unique (a chain was a straight line); it stays, not unique, for the
-- walks from a fact to its predecessors (fact_chain, fact_forget) and the foreign key's cascade.
DROP INDEX pymem.facts_predecessor;
CREATE INDEX facts_predecessor ON pymem.facts (project_id, scope, scope_id, superseded_by)
    WHERE superseded_by IS NOT NULL;

-- fact_supersede returns the fact now active and whether it was created (false: a merge).
CREATE TYPE pymem.fact_successor AS (
    id      bigint,
    created boolean
);

COMMENT ON TYPE pymem.fact_successor IS 'The result of pymem.fact_supersede';

-- fact_chain returns a fact's tree: the facts columns and each row's distance to the newest version.
CREATE TYPE pymem.fact_version AS (
    project_id    text,
    scope         text,
    scope_id      text,
    id            bigint,
    content       text,
    content_key   bytea,
    confidence    double precision,
    source        text,
    trace_id      text,
    metadata      jsonb,
    created_at    timestamptz,
    superseded_by bigint,
    superseded_at timestamptz,
    depth         integer
);

COMMENT ON TYPE pymem.fact_version IS 'A row of pymem.fact_chain';

-- their result types change: dropped here (each has one signature), created again by the API
-- refresh of the same migrate
DROP FUNCTION IF EXISTS pymem.fact_supersede;
DROP FUNCTION IF EXISTS pymem.fact_chain;
