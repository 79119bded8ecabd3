-- conversations_generate.sql: set-based generation of large pymem.threads / pymem.messages /
-- pymem.message_embeddings tables (bench/conversations.py). Sections are named like
-- sql/queries.sql (`-- name: NAME`); parameters use psycopg's %(name)s style, so this file is
-- run by bench/conversations.py, not by psql. pg_temp.bench_u(x, seed, salt) (a uniform float
-- in [0, 1) from a 64-bit hash) comes from bench/facts_generate.sql, section `uniform`.
--
-- Messages are numbered g = 0 .. n-1 in time order (created_at grows with g, `step` apart,
-- ending at t0) and everything about a message is a pure function of (g, seed), except its
-- number in the thread (seq): a hash of g picks the user (u^3 over `users` ids: a few heavy
-- users, many light ones), the user's project (u^2 over the projects, fixed per user), one of
-- the user's 1..4 threads, the role, the content and whether it has a vector.
--
-- seq: each chunk [lo, hi) counts its messages per thread, adds that count to threads.last_seq
-- (an upsert, RETURNING the new last_seq) and numbers the chunk's messages of each thread
-- last_seq - count + 1 .. last_seq in the order of g. So last_seq = max(seq) = the number of
-- messages of the thread after every chunk, and a chunk's rows are inserted in time order:
-- every user's messages are interleaved on disk with everyone else's.
--
-- Contents and vectors of other users: a message is 2 or 3 sentences of a pool
-- (pg_temp.bench_pool: real HashEmbedder vectors of generated sentences, on the same topics as
-- the probe's) and its vector is the sum of theirs, which is close to the HashEmbedder vector
-- of the concatenation (feature hashing adds up; cosine ignores the norm). 8% of messages are
-- one short sentence of the pool's short range ("ok", "thanks!", ...). A fraction
-- (`unembedded`) has no vector, as if written by SQL (message_add) and not embedded yet.
--
-- The probe user (probe_project, probe_id) gets every `stride`-th message (g = 0, stride,
-- 2*stride, ...) until it has probe_n: its thread, role, content, importance and real
-- HashEmbedder vector come from pg_temp.bench_probe (row g / stride).

-- name: pool_table
DROP TABLE IF EXISTS pg_temp.bench_pool;
CREATE TEMP TABLE bench_pool (i integer PRIMARY KEY, content text NOT NULL, embedding vector NOT NULL);

-- name: probe_table
DROP TABLE IF EXISTS pg_temp.bench_probe;
CREATE TEMP TABLE bench_probe (
    i integer PRIMARY KEY, thread_id text NOT NULL, seq bigint NOT NULL, role text NOT NULL, content text NOT NULL,
    importance double precision NOT NULL, embedding vector NOT NULL);

-- name: pool_insert
INSERT INTO pg_temp.bench_pool (i, content, embedding) VALUES (%(i)s, %(content)s, %(embedding)s);

-- name: probe_insert
INSERT INTO pg_temp.bench_probe (i, thread_id, seq, role, content, importance, embedding)
VALUES (%(i)s, %(thread_id)s, %(seq)s, %(role)s, %(content)s, %(importance)s, %(embedding)s);

-- name: chunk
-- Inserts messages lo .. hi-1 of a load of n (threads upserted, vectors stored); returns the
-- number of messages, vectors and threads touched.
WITH base AS (
    SELECT s.g,
           pg_catalog.mod(s.g, %(stride)s::bigint) = 0 AND s.g / %(stride)s::bigint < %(probe_n)s::bigint AS is_probe,
           (s.g / %(stride)s::bigint)::integer AS probe_i,
           %(t0)s::timestamptz - (%(n)s::bigint - 1 - s.g) * %(step)s::interval AS created_at,
           floor(%(users)s::integer * pg_temp.bench_u(s.g, %(seed)s, 101) ^ 3)::integer AS ui,
           pg_temp.bench_u(s.g, %(seed)s, 102) AS u_thread,
           pg_temp.bench_u(s.g, %(seed)s, 103) AS u_role,
           pg_temp.bench_u(s.g, %(seed)s, 104) AS u_short,
           pg_temp.bench_u(s.g, %(seed)s, 105) AS u_a,
           pg_temp.bench_u(s.g, %(seed)s, 106) AS u_b,
           pg_temp.bench_u(s.g, %(seed)s, 107) AS u_three,
           pg_temp.bench_u(s.g, %(seed)s, 108) AS u_c,
           pg_temp.bench_u(s.g, %(seed)s, 109) AS u_imp,
           pg_temp.bench_u(s.g, %(seed)s, 110) AS u_emb,
           pg_temp.bench_u(s.g, %(seed)s, 111) AS u_meta
      FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS s(g)
), shaped AS (
    SELECT b.*,
           b.u_short < 0.08 AS short,
           (%(projects)s::text[])[1 + floor(pg_catalog.cardinality(%(projects)s::text[])
                                             * pg_temp.bench_u(b.ui, %(seed)s, 120) ^ 2)::integer] AS user_project,
           floor((1 + floor(4 * pg_temp.bench_u(b.ui, %(seed)s, 121) ^ 2)) * b.u_thread)::integer AS thread_k
      FROM base AS b
), slots AS (
    SELECT s.g, s.created_at,
           CASE WHEN s.is_probe THEN %(probe_project)s::text ELSE s.user_project END AS project_id,
           CASE WHEN s.is_probe THEN %(probe_id)s::text ELSE 'u' || pg_catalog.lpad(s.ui::text, 7, '0') END AS user_id,
           CASE WHEN s.is_probe THEN pr.thread_id
                WHEN s.thread_k = 0 THEN 'default' ELSE 'thread-' || s.thread_k::text END AS thread_id,
           CASE WHEN s.is_probe THEN pr.role
                WHEN s.u_role < 0.48 THEN 'user' WHEN s.u_role < 0.96 THEN 'assistant'
                WHEN s.u_role < 0.98 THEN 'tool' ELSE 'system' END AS role,
           CASE WHEN s.is_probe THEN pr.content
                WHEN s.short THEN pa.content
                ELSE pa.content || ' ' || pb.content || coalesce(' ' || pc.content, '') END AS content,
           CASE WHEN s.is_probe THEN pr.importance
                WHEN s.u_imp < 0.7 THEN 1.0::float8
                ELSE round(((s.u_imp - 0.7) / 0.3)::numeric, 2)::float8 END AS importance,
           CASE WHEN NOT s.is_probe AND s.u_meta < 0.1 THEN '{"channel": "web"}'::jsonb ELSE '{}'::jsonb END AS metadata,
           CASE WHEN s.is_probe THEN pr.embedding
                WHEN s.u_emb < %(unembedded)s::float8 THEN NULL
                WHEN s.short THEN pa.embedding
                WHEN pc.i IS NULL THEN pa.embedding + pb.embedding
                ELSE pa.embedding + pb.embedding + pc.embedding END AS embedding
      FROM shaped AS s
      LEFT JOIN pg_temp.bench_probe AS pr ON s.is_probe AND pr.i = s.probe_i
      JOIN pg_temp.bench_pool AS pa
        ON pa.i = CASE WHEN s.short THEN %(pool_n)s::integer + floor(%(short_n)s::integer * s.u_a)::integer
                       ELSE floor(%(pool_n)s::integer * s.u_a)::integer END
      LEFT JOIN pg_temp.bench_pool AS pb ON NOT s.short AND pb.i = floor(%(pool_n)s::integer * s.u_b)::integer
      LEFT JOIN pg_temp.bench_pool AS pc
        ON NOT s.short AND s.u_three < 0.3 AND pc.i = floor(%(pool_n)s::integer * s.u_c)::integer
), counts AS (
    SELECT c.project_id, c.user_id, c.thread_id, count(*) AS n, min(c.created_at) AS first_at,
           max(c.created_at) AS last_at
      FROM slots AS c
     GROUP BY c.project_id, c.user_id, c.thread_id
), up AS (
    INSERT INTO pymem.threads AS t (project_id, user_id, thread_id, last_seq, created_at, updated_at)
    SELECT c.project_id, c.user_id, c.thread_id, c.n, c.first_at, c.last_at FROM counts AS c
    ON CONFLICT (project_id, user_id, thread_id)
    DO UPDATE SET last_seq = t.last_seq + excluded.last_seq, updated_at = excluded.updated_at
    RETURNING t.project_id, t.user_id, t.thread_id, t.last_seq
), numbered AS MATERIALIZED (
    SELECT s.*,
           u.last_seq - c.n + pg_catalog.row_number() OVER (
               PARTITION BY s.project_id, s.user_id, s.thread_id ORDER BY s.g) AS seq
      FROM slots AS s
      JOIN counts AS c ON c.project_id = s.project_id AND c.user_id = s.user_id AND c.thread_id = s.thread_id
      JOIN up AS u ON u.project_id = s.project_id AND u.user_id = s.user_id AND u.thread_id = s.thread_id
), msgs AS (
    INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content, importance, metadata,
                                created_at, embedded_by)
    SELECT m.project_id, m.user_id, m.thread_id, m.seq, m.role, m.content, m.importance, m.metadata, m.created_at,
           CASE WHEN m.embedding IS NOT NULL THEN %(embedder)s::text END
      FROM numbered AS m
     ORDER BY m.g
    RETURNING 1
), embs AS (
    INSERT INTO pymem.message_embeddings (project_id, user_id, embedder, thread_id, seq, chars, importance,
                                          created_at, embedding, lexemes, tokens)
    SELECT m.project_id, m.user_id, %(embedder)s::text, m.thread_id, m.seq, pg_catalog.length(m.content),
           m.importance, m.created_at, m.embedding, v.lexemes, pymem._lexeme_tokens(v.lexemes)
      FROM numbered AS m
     CROSS JOIN LATERAL (SELECT pymem._lexemes(pymem._text_search_config(m.project_id), m.content) AS lexemes OFFSET 0) AS v  -- as the API's writers store them (0017)
     WHERE m.embedding IS NOT NULL
     ORDER BY m.g
    RETURNING 1
)
SELECT (SELECT count(*) FROM msgs) AS messages, (SELECT count(*) FROM embs) AS embeddings,
       (SELECT count(*) FROM up) AS threads;

-- name: summaries
-- A running summary for every thread of other users with at least 30 messages (the probe's
-- threads get theirs from bench/conversations.py): summary_through = last_seq - 10.
UPDATE pymem.threads AS t
   SET summary = 'Summary of the earlier conversation in ' || t.thread_id || ': the user asked about '
                 || (ARRAY['travel plans', 'a database migration', 'training for a race', 'cooking',
                           'a job interview', 'the budget', 'a new laptop', 'learning Spanish'])[
                        1 + pg_catalog.mod(pg_catalog.abs(pg_catalog.hashtext(t.user_id || t.thread_id)), 8)]
                 || ' and the assistant answered with suggestions; ' || (t.last_seq - 10)::text
                 || ' messages are folded into this summary.',
       summary_through = t.last_seq - 10,
       summary_at = t.updated_at
 WHERE t.last_seq >= 30
   AND NOT (t.project_id = %(probe_project)s AND t.user_id = %(probe_id)s);

-- name: lexemes
-- The lexical index of every message the load wrote: the trigger that maintains it on writes does
-- not fire while session_replication_role is replica (the load's foreign-key checks off).
INSERT INTO pymem.message_lexemes AS l
    (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
SELECT m.project_id, m.user_id, m.thread_id, m.seq, pg_catalog.length(m.content), m.importance, m.created_at,
       pymem._lexeme_tokens(v.lexemes), v.lexemes
  FROM pymem.messages AS m CROSS JOIN LATERAL (SELECT pymem._lexemes(pymem._text_search_config(m.project_id), m.content) AS lexemes OFFSET 0) AS v
ON CONFLICT DO NOTHING;

-- name: lexemes_citus
-- The same on a Citus coordinator, one project at a time with its text search configuration given
-- (read once on the coordinator): Citus cannot push the lateral subquery above down to the shards.
-- Colocated tables (both by user_id), so each worker fills its own shards.
INSERT INTO pymem.message_lexemes AS l
    (project_id, user_id, thread_id, seq, chars, importance, created_at, tokens, lexemes)
SELECT m.project_id, m.user_id, m.thread_id, m.seq, pg_catalog.length(m.content), m.importance, m.created_at,
       pymem._lexeme_tokens(pymem._lexemes(%(config)s::regconfig, m.content)),
       pymem._lexemes(%(config)s::regconfig, m.content)
  FROM pymem.messages AS m
 WHERE m.project_id = %(project_id)s
ON CONFLICT DO NOTHING;

-- name: probe_summary
UPDATE pymem.threads AS t
   SET summary = %(summary)s, summary_through = greatest(t.last_seq - 10, 0), summary_at = t.updated_at
 WHERE t.project_id = %(probe_project)s AND t.user_id = %(probe_id)s AND t.thread_id = %(thread_id)s;

-- name: register_embedder
-- The embedder's dimension in every project the load writes to (as pymem._embedding_register does
-- on first use).
INSERT INTO pymem.embedders (project_id, name, dimension)
SELECT p.project_id, %(embedder)s, %(dim)s FROM pg_catalog.unnest(%(projects)s::text[]) AS p(project_id)
ON CONFLICT (project_id, name) DO NOTHING;
