-- 0026_fact_key_lookup: the unique index on a subject's active content keys, rebuilt so that the
-- lookups by key (fact_add's idempotent re-add, fact_supersede by old_content, fact_forget by
-- content, turn_record's learned facts, facts_add_many) can use no other index.
-- Applied once under the migration lock.
--
-- Under a generic plan (PL/pgSQL's own, from a function's sixth call on) the planner takes a
-- subject to hold a row or two. Both facts_active_content_key and facts_subject_active_newest
-- then cost the same for a lookup by (project_id, scope, scope_id, content_key), and the
-- newest-first index, whose entries are smaller, won: every lookup read all of the subject's
-- active facts and compared their keys one by one. Adding a new fact to an agent with ~470
-- active facts took 0.99 ms of server CPU instead of 0.61 (bench/conversations.py data,
-- /tmp/s24/add.py in the session note); the cost grew with the subject.
--
-- The new index holds `scope` in the "C" collation (equality is the same for text), and the
-- lookups compare `scope ... COLLATE "C"`: an index on the default collation cannot serve that
-- condition, so the newest-first index could use only project_id and loses by far. Reads of a
-- subject (scope compared in the default collation) keep using facts_subject_active_newest.
-- ON CONFLICT (project_id, scope, scope_id, content_key) WHERE superseded_by IS NULL names no
-- collation, so it infers this index as it did the old one. CREATE INDEX blocks writes to
-- pymem.facts while it reads the table once (reads go on).
CREATE UNIQUE INDEX facts_subject_content_key
    ON pymem.facts (project_id, scope COLLATE "C", scope_id, content_key) WHERE superseded_by IS NULL;
DROP INDEX pymem.facts_active_content_key;
COMMENT ON INDEX pymem.facts_subject_content_key IS
    'One active fact per subject and content key (idempotent add); scope in "C" so that only lookups by key use it';
