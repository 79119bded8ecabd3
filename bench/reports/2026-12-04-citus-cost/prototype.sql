-- A prototype, not pymem code (issue 35): facts_newest reading the local shard of pymem.facts
-- through a prepared statement of the session, on the cluster's database (as the superuser, run
-- on the coordinator). Measured by prototype.py beside pymem.facts_newest. Not safe as it stands:
-- a prepared statement of that name made by someone else in the session would be trusted.
CREATE SCHEMA IF NOT EXISTS proto;
-- PREPARE and EXECUTE are refused in a STABLE function (pymem.facts_newest is one): this one is
-- VOLATILE, and so would every reader be that reads its shard this way
CREATE OR REPLACE FUNCTION proto._prepare(statement text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE statement;
END;
$$;
CREATE OR REPLACE FUNCTION proto.facts_newest(scope text, scope_id text, project_id text DEFAULT '',
                                              max_facts integer DEFAULT 50)
RETURNS SETOF pymem.facts
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_max integer;
    v_shard text;
    v_name text;
BEGIN
    PERFORM pymem._tenant_enter(facts_newest.project_id);
    v_max := pymem._check_limit('max_facts', facts_newest.max_facts);
    IF NOT pymem._fact_check_subject(facts_newest.scope, facts_newest.scope_id, facts_newest.project_id, 'match') THEN
        RETURN;
    END IF;
    v_shard := pg_catalog.shard_name('pymem.facts'::pg_catalog.regclass,
                                     pg_catalog.get_shard_id_for_distribution_column('pymem.facts', facts_newest.scope_id));
    IF pg_catalog.to_regclass(v_shard) IS NOT NULL THEN  -- the shard is on this node
        v_name := 'proto_newest_' || pg_catalog.md5(v_shard);
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_statements AS p WHERE p.name = v_name) THEN
            PERFORM proto._prepare(pg_catalog.format(
                'PREPARE %I(text, text, text, integer) AS SELECT f.* FROM %s AS f '
                'WHERE f.project_id = $1 AND f.scope = $2 AND f.scope_id = $3 AND f.superseded_by IS NULL '
                'AND (f.expires_at IS NULL OR f.expires_at > pg_catalog.now()) '
                'ORDER BY f.created_at DESC, f.id DESC LIMIT $4', v_name, v_shard));
        END IF;
        RETURN QUERY EXECUTE pg_catalog.format('EXECUTE %I(%L, %L, %L, %s)', v_name, facts_newest.project_id,
                                               facts_newest.scope, facts_newest.scope_id, v_max);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT f.* FROM pymem.active_facts AS f
     WHERE f.project_id = facts_newest.project_id AND f.scope = facts_newest.scope
       AND f.scope_id = facts_newest.scope_id
     ORDER BY f.created_at DESC, f.id DESC
     LIMIT v_max;
END;
$$;
SELECT create_distributed_function('proto.facts_newest(text,text,text,integer)', 'scope_id',
                                   colocate_with => 'pymem.threads');
