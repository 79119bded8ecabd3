-- 0045_recall_terms: the words of heavy users' messages, one row per (message, distinct lexeme),
-- so that a heavy user's hybrid recall finds the messages that share a rare word with the query
-- however far they lie from it in vector space (issue 32). Applied once under the migration lock.
--
-- A heavy user (a row in pymem.recall_indexes, 0029_recall_indexes) takes recall's candidates
-- from a per-user IVFFlat index: the 200 nearest by vector, so a message that matches the query
-- by a word alone was never among them. pymem.recall_terms is a postings list of those users
-- only: _recall (api/conversations_recall.sql) reads the postings of each query term through the
-- primary key, whose prefix (project_id, user_id, lexeme) makes one term of one user one index
-- range, and adds those messages to the candidates. A btree and equality on text, not a GIN index
-- over the tsvectors: under row-level security (every table here has it, forced) the planner
-- cannot use a GIN index for tsvector @@ tsquery (ts_match_vq is not leakproof), while text
-- equality (texteq) is, so the btree serves the read.
--
-- Only heavy users: ordinary users' writes add nothing here (the statement trigger that fills
-- message_lexemes, _message_lexemes_add, looks the registry up once per statement and adds
-- postings only for registered users' messages). recall_index_plan returns a fill step for a
-- newly registered user (recall_terms_fill: its postings from message_lexemes) and deletes them
-- when the user's last index is dropped;
-- text_search_configure rebuilds them with the lexemes. A message's postings go with it (foreign
-- key to message_lexemes, which goes with the message): erasure, forgetting and retention need
-- nothing more.
--
-- recall_indexes.terms_filled records that the user's postings were filled (by the fill step, or
-- here for the users already registered): false means the next plan has a fill step for them.
CREATE TABLE pymem.recall_terms (
    project_id text   NOT NULL,
    user_id    text   NOT NULL,
    lexeme     text   COLLATE "C" NOT NULL,
    thread_id  text   NOT NULL,
    seq        bigint NOT NULL,
    CONSTRAINT recall_terms_pkey PRIMARY KEY (project_id, user_id, lexeme, thread_id, seq),
    CONSTRAINT recall_terms_message_fkey FOREIGN KEY (project_id, user_id, thread_id, seq)
        REFERENCES pymem.message_lexemes (project_id, user_id, thread_id, seq) ON DELETE CASCADE
);

-- by message, for the cascade; its leading columns are the message's (thread_id, seq), not the
-- user's: with (project_id, user_id) first, a planner without statistics read a term's postings
-- through it (the user's whole range, filtered by lexeme) instead of the primary key
CREATE INDEX recall_terms_message ON pymem.recall_terms (thread_id, seq, user_id, project_id);

COMMENT ON TABLE pymem.recall_terms IS 'Heavy users'' message words, one row per (message, lexeme): the lexical candidates of recall through a recall index';

ALTER TABLE pymem.recall_terms ENABLE ROW LEVEL SECURITY;
ALTER TABLE pymem.recall_terms FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant ON pymem.recall_terms
    USING (project_id = (SELECT pymem.current_tenant())) WITH CHECK (project_id = (SELECT pymem.current_tenant()));

ALTER TABLE pymem.recall_indexes ADD COLUMN terms_filled boolean NOT NULL DEFAULT false;

-- The users registered already: their postings now, when row-level security does not bind the
-- migrating role; otherwise the next recall_index_plan of each project fills them (terms_filled
-- stays false), and until then their recall is what it was.
DO $$
BEGIN
    IF (SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user) THEN
        INSERT INTO pymem.recall_terms AS t (project_id, user_id, lexeme, thread_id, seq)
        SELECT l.project_id, l.user_id, w.lexeme, l.thread_id, l.seq
          FROM (SELECT DISTINCT ri.project_id, ri.user_id FROM pymem.recall_indexes AS ri) AS u
          JOIN pymem.message_lexemes AS l ON l.project_id = u.project_id AND l.user_id = u.user_id
         CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.tsvector_to_array(l.lexemes)) AS w(lexeme)
        ON CONFLICT DO NOTHING;
        UPDATE pymem.recall_indexes SET terms_filled = true;
    ELSE
        RAISE NOTICE 'pymem: heavy users'' words are not indexed yet (row-level security binds %); run pymem recall-indexes per project',
            current_user;
    END IF;
END;
$$;
