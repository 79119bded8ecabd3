-- 0034_shared_facts: the copies of agent and project facts that a Citus cluster keeps in
-- reference tables (shared_facts, shared_fact_embeddings, shared_fact_lexemes; sql/citus.sql,
-- _shared_facts_sync) are created by the migrations, on every database: empty off Citus (nothing
-- writes them there), filled when citus.sql first distributes the database. Before, citus.sql
-- created them with LIKE outside the migrations, so a migration that changed pymem.facts left
-- them behind on an existing cluster, and only the cluster tests could notice. Now a migration
-- that changes facts, fact_embeddings or fact_lexemes changes its shared_ twin the same way, and
-- `pymem migrate --check` reports a twin whose columns differ (migration_shared_problems).
-- Applied once under the migration lock. On a cluster that already has them (created by
-- citus.sql) nothing changes.
CREATE TABLE IF NOT EXISTS pymem.shared_facts
    (LIKE pymem.facts INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE IF NOT EXISTS pymem.shared_fact_embeddings
    (LIKE pymem.fact_embeddings INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
CREATE TABLE IF NOT EXISTS pymem.shared_fact_lexemes
    (LIKE pymem.fact_lexemes INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);

COMMENT ON TABLE pymem.shared_facts IS 'Agent and project facts copied for every Citus worker (empty off Citus)';
COMMENT ON TABLE pymem.shared_fact_embeddings IS 'Vectors of pymem.shared_facts (empty off Citus)';
COMMENT ON TABLE pymem.shared_fact_lexemes IS 'Lexemes of pymem.shared_facts (empty off Citus)';

ALTER TABLE pymem.shared_facts ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.shared_facts FORCE ROW LEVEL SECURITY;
ALTER TABLE pymem.shared_fact_embeddings ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.shared_fact_embeddings FORCE ROW LEVEL SECURITY;
ALTER TABLE pymem.shared_fact_lexemes ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.shared_fact_lexemes FORCE ROW LEVEL SECURITY;

-- the tenant policy of every pymem table (sql/citus.sql rewrites it without the sub-select there)
DO $$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['shared_facts', 'shared_fact_embeddings', 'shared_fact_lexemes'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_policies AS p
                        WHERE p.schemaname = 'pymem' AND p.tablename = v_table AND p.policyname = 'tenant') THEN
            EXECUTE pg_catalog.format('CREATE POLICY tenant ON pymem.%I USING (project_id = (SELECT pymem.current_tenant())) '
                                      'WITH CHECK (project_id = (SELECT pymem.current_tenant()))', v_table);
        END IF;
    END LOOP;
END;
$$;
