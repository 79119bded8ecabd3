-- 0015_message_lexical: a lexical index per message, for the hybrid (lexical + vector) ranking of
-- messages_recall and context_read (api/conversations.sql, api/context.sql), and recall's time and
-- metadata filters. Applied once under the migration lock.
--
-- pymem.message_lexemes holds one row per message: its content as a tsvector
-- (pymem._message_lexemes, text search configuration english), its length in tokens (BM25's
-- document length), and, copied from the immutable message like message_embeddings does, its time,
-- importance and length in characters, so that ranking reads this table and the vectors only. A
-- statement trigger on pymem.messages fills it on every insert, whoever writes (message_add,
-- turn_record, user_import, a plain INSERT); messages never change in place, and a deleted message
-- takes its row with it (foreign key). A separate table, so pymem.messages' row type (what
-- user_export writes) stays as it was.
--
-- Index: the primary key, (project_id, user_id, thread_id, seq), is the only one. Recall reads one
-- user's rows through its (project_id, user_id) prefix, the same way it reads the user's vectors,
-- and computes BM25's statistics (document count, average length, document frequency of each query
-- term) from them at query time: never another user's rows, and nothing to keep up to date on
-- write. A GIN index over the lexemes would find a term's messages of every user at once and filter
-- the user afterwards (the subject key cannot be a GIN key without the btree_gin extension), so it
-- is not built: README "Recall" has the measurements.
--
-- Big tables: the messages stored before this migration are indexed here in one
-- INSERT ... SELECT that streams (no table rewrite, no long lock on the messages themselves:
-- readers go on; message writes wait for the trigger's lock until the migration commits, about
-- about 230 s per million messages measured on 2 busy shared cores). It needs a role that row-level security does not bind
-- (a superuser, or BYPASSRLS); a deploy user that it binds skips the step (a NOTICE says so) and
-- its old messages rank by their vectors alone until pymem.message_lexemes_backfill() (README)
-- indexes them, in batches of short transactions.

-- the lexemes of a message's content: one function, so the index and the queries agree
CREATE FUNCTION pymem._message_lexemes(content text)
RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT pg_catalog.to_tsvector('pg_catalog.english'::pg_catalog.regconfig, content);
$$;

-- a tsvector's length in tokens (every position of every lexeme)
CREATE FUNCTION pymem._message_tokens(lexemes tsvector)
RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT coalesce(pg_catalog.sum(coalesce(pg_catalog.cardinality(u.positions), 1)), 0)::integer
      FROM pg_catalog.unnest(lexemes) AS u;
$$;

CREATE TABLE pymem.message_lexemes (
    project_id text             NOT NULL,
    user_id    text             NOT NULL,
    thread_id  text             NOT NULL,
    seq        bigint           NOT NULL,
    chars      integer          NOT NULL,
    importance double precision NOT NULL,
    created_at timestamptz      NOT NULL,
    tokens     integer          NOT NULL,
    lexemes    tsvector         NOT NULL,
    CONSTRAINT message_lexemes_pkey PRIMARY KEY (project_id, user_id, thread_id, seq),
    CONSTRAINT message_lexemes_message_fkey FOREIGN KEY (project_id, user_id, thread_id, seq)
        REFERENCES pymem.messages (project_id, user_id, thread_id, seq) ON DELETE CASCADE
);

COMMENT ON TABLE pymem.message_lexemes IS 'Message contents as tsvectors, for lexical recall (messages_recall, context_read)';

ALTER TABLE pymem.message_lexemes ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.message_lexemes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.message_lexemes
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

-- Created here for the trigger below; api/conversations.sql redefines it on every migrate.
CREATE FUNCTION pymem._message_lexemes_add()
RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    INSERT INTO pymem.message_lexemes AS l
        (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
    SELECT n.project_id, n.user_id, n.thread_id, n.seq, pg_catalog.length(n.content), n.importance, n.created_at,
           pymem._message_tokens(v.lexemes), v.lexemes
      FROM new_messages AS n CROSS JOIN LATERAL (SELECT pymem._message_lexemes(n.content) AS lexemes) AS v;
    RETURN NULL;
END;
$$;

CREATE TRIGGER messages_lexemes AFTER INSERT ON pymem.messages
    REFERENCING NEW TABLE AS new_messages
    FOR EACH STATEMENT EXECUTE FUNCTION pymem._message_lexemes_add();

DO $$
BEGIN
    IF (SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user) THEN
        INSERT INTO pymem.message_lexemes AS l
            (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
        SELECT m.project_id, m.user_id, m.thread_id, m.seq, pg_catalog.length(m.content), m.importance, m.created_at,
               pymem._message_tokens(v.lexemes), v.lexemes
          FROM pymem.messages AS m CROSS JOIN LATERAL (SELECT pymem._message_lexemes(m.content) AS lexemes) AS v;
    ELSE
        RAISE NOTICE 'pymem: messages stored before this migration are not indexed for lexical recall (row-level security hides them from %); run SELECT pymem.message_lexemes_backfill() per project',
            current_user;
    END IF;
END;
$$;

-- messages_recall and context_read take the query text, the lexical weight, as_of, a time range
-- and a metadata filter, and their vector becomes optional: the old signatures are dropped here
-- (by name: each has one), the API refresh of the same migrate creates the new ones.
DROP FUNCTION IF EXISTS pymem.messages_recall;
DROP FUNCTION IF EXISTS pymem.context_read;
DROP FUNCTION IF EXISTS pymem._recall_check;
DROP FUNCTION IF EXISTS pymem._recall_ranked;
