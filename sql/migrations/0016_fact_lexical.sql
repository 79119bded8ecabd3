-- 0016_fact_lexical: a lexical index per fact, for the hybrid (lexical + vector) ranking of
-- facts_search (api/facts.sql). Applied once under the migration lock.
--
-- pymem.fact_lexemes holds one row per fact: its content as a tsvector (pymem._fact_lexemes,
-- text search configuration english) and its length in tokens (BM25's document length). A
-- trigger on pymem.facts fills it on every insert, whoever writes (fact_add, fact_supersede,
-- turn_record's learned facts, user_import, a plain INSERT): the rows a statement inserted are
-- indexed by one INSERT of the trigger. Content never changes in place (a supersede inserts a new
-- row), so inserts are all there is to follow; a deleted fact takes its row with it (foreign key).
-- A separate table, like fact_embeddings, so the row type of pymem.facts (what facts_newest and
-- fact_history return) stays as it was.
--
-- Big tables: facts stored before this migration have no row here, and facts_search computes
-- their lexemes when it ranks them (same ranking, more work per search), so nothing has to be
-- indexed before the migration commits. When the migrating role may read every tenant's rows
-- (a superuser, or BYPASSRLS), the active facts are indexed here too, in one INSERT ... SELECT
-- that streams (no table rewrite; readers go on, fact writes wait until the migration commits:
-- 66 s for 300,000 facts of 88 characters, measured on 2 cores shared with 7 other processes).
-- A deploy user that row-level security binds skips that step (a NOTICE says so).
--
-- Index: the primary key, (project_id, scope, scope_id, fact_id), is the only one. facts_search
-- reads one subject's rows through its subject prefix, as it reads the subject's vectors, and
-- computes BM25's statistics (document count, average length, document frequency of each query
-- term) from them at query time: never another subject's rows, and nothing to keep up to date on
-- write. A GIN index over the lexemes would find a term's facts of every subject at once and
-- filter the subject afterwards (the subject key cannot be a GIN key without the btree_gin
-- extension), so it is not built (as for messages, 0015_message_lexical).

-- the lexemes of a fact's content: one function, so the index and the queries agree
CREATE FUNCTION pymem._fact_lexemes(content text)
RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.to_tsvector('pg_catalog.english'::pg_catalog.regconfig, content);
$$;

-- a tsvector's length in tokens (every position of every lexeme)
CREATE FUNCTION pymem._lexeme_tokens(lexemes tsvector)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT coalesce(pg_catalog.sum(coalesce(pg_catalog.cardinality(u.positions), 1)), 0)::integer
      FROM pg_catalog.unnest(lexemes) AS u;
$$;

CREATE TABLE pymem.fact_lexemes (
    project_id text     NOT NULL,
    scope      text     NOT NULL,
    scope_id   text     NOT NULL,
    fact_id    bigint   NOT NULL,
    lexemes    tsvector NOT NULL,
    tokens     integer  NOT NULL,
    CONSTRAINT fact_lexemes_pkey PRIMARY KEY (project_id, scope, scope_id, fact_id),
    CONSTRAINT fact_lexemes_fact_fkey FOREIGN KEY (project_id, scope, scope_id, fact_id)
        REFERENCES pymem.facts (project_id, scope, scope_id, id) ON DELETE CASCADE
);

COMMENT ON TABLE pymem.fact_lexemes IS 'Fact contents as tsvectors, for lexical ranking (facts_search)';

ALTER TABLE pymem.fact_lexemes ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.fact_lexemes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.fact_lexemes
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

-- Created here for the trigger below; api/facts.sql redefines it on every migrate.
CREATE FUNCTION pymem._fact_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    INSERT INTO pymem.fact_lexemes AS l (project_id, scope, scope_id, fact_id, lexemes, tokens)
    SELECT n.project_id, n.scope, n.scope_id, n.id, v.lexemes, pymem._lexeme_tokens(v.lexemes)
      FROM new_facts AS n CROSS JOIN LATERAL (SELECT pymem._fact_lexemes(n.content) AS lexemes) AS v;
    RETURN NULL;
END;
$$;

CREATE TRIGGER facts_lexemes AFTER INSERT ON pymem.facts
    REFERENCING NEW TABLE AS new_facts
    FOR EACH STATEMENT EXECUTE FUNCTION pymem._fact_lexemes_add();

DO $$
BEGIN
    IF (SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user) THEN
        INSERT INTO pymem.fact_lexemes AS l (project_id, scope, scope_id, fact_id, lexemes, tokens)
        SELECT f.project_id, f.scope, f.scope_id, f.id, v.lexemes, pymem._lexeme_tokens(v.lexemes)
          FROM pymem.facts AS f CROSS JOIN LATERAL (SELECT pymem._fact_lexemes(f.content) AS lexemes) AS v
         WHERE f.superseded_by IS NULL;
    ELSE
        RAISE NOTICE 'pymem: facts stored before this migration are not indexed for lexical search (row-level security hides them from %); facts_search computes their lexemes when it ranks them',
            current_user;
    END IF;
END;
$$;

-- facts_search takes the query text, a metadata filter and the fusion weight, and returns the
-- fused score; fact_add and fact_supersede take created_at. Their signatures and facts_search's
-- result type change: the old ones are dropped here (by name: each has one), the API refresh of
-- the same migrate creates the new ones.
ALTER TYPE pymem.fact_match ADD ATTRIBUTE score double precision;
DROP FUNCTION IF EXISTS pymem.facts_search;
DROP FUNCTION IF EXISTS pymem.fact_add;
DROP FUNCTION IF EXISTS pymem.fact_supersede;
