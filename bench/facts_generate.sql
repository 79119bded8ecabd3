-- facts_generate.sql: set-based generation of a large pymem.facts table (bench/facts.py).
-- Sections are named like sql/queries.sql (`-- name: NAME`); parameters use psycopg's
-- %(name)s style, so this file is run by bench/facts.py, not by psql.
--
-- Rows are numbered g = 0 .. n-1 and everything about a row is a pure function of (g, seed):
-- a hash of g (or of its group) picks the subject, the source, the words of the content, so a
-- chunk [lo, hi) can be generated on its own and the same seed gives the same table.
--
-- Shape (see bench/README.md):
--   * groups of 4 consecutive rows; most groups are 4 unrelated rows, 20% start with a supersede
--     chain of 2 versions and 10% with a chain of 3 (about 10% of all rows are superseded).
--     A chain's rows share the subject of its first row and each version points at the next
--     one (id + 1), which is newer: the FK, facts_predecessor (one predecessor per row) and
--     facts_subject_content_key (contents are unique: they carry the row's id) all hold.
--   * subjects: 85% user, 10% agent, 5% project scope; 8 projects, skewed (u^2); users skewed
--     as u^3 over `users` ids (many light users, a few heavy ones), agents and teams as u^2.
--   * sources: 20% learned, 5% trace (with a trace_id), the rest manual.
--   * the probe user (probe_project, 'user', probe_id) gets the first row of probe_active
--     groups spread evenly over the whole range (every `stride`-th group), so its facts are
--     interleaved in time and on disk with everyone else's; the first probe_history of those
--     groups are chains of 2: probe_active active facts plus probe_history superseded ones.
--   * created_at grows with g, `step` apart, ending at t0; ids are base + g + 1 (given with
--     OVERRIDING SYSTEM VALUE so a chain can name its successor; the caller moves the identity
--     sequence past them first).
-- Chunks must start at a multiple of 4 so that no group (and no chain) straddles two chunks.

-- name: uniform
-- pg_temp.bench_u(x, seed, salt): a uniform float8 in [0, 1) from a 64-bit hash.
CREATE OR REPLACE FUNCTION pg_temp.bench_u(x bigint, seed integer, salt integer)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (pg_catalog.hashint8extended(x, seed::bigint * 1000 + salt) & 9007199254740991)::float8
           / 9007199254740992.0::float8;
$$;

-- name: id_base
-- The highest id in use (table or identity sequence): generated ids start after it.
SELECT greatest(
    (SELECT coalesce(max(f.id), 0) FROM pymem.facts AS f),
    coalesce(pg_catalog.pg_sequence_last_value(pg_catalog.pg_get_serial_sequence('pymem.facts', 'id')::regclass), 0)
) AS base;

-- name: reserve_ids
-- Moves the identity sequence past the ids this load gives explicitly.
SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence('pymem.facts', 'id'), %(last)s::bigint) AS last;

-- name: chunk
-- Inserts rows lo .. hi-1 of a load of n rows.
INSERT INTO pymem.facts (id, project_id, scope, scope_id, content, content_key, confidence, source, trace_id,
                         metadata, created_at, superseded_by, superseded_at)
OVERRIDING SYSTEM VALUE
SELECT r.id, r.project_id, r.scope, r.scope_id, r.content, pymem.fact_key(r.content), r.confidence, r.source,
       CASE WHEN r.source = 'trace' THEN 'trace-' || r.id::text END,
       CASE WHEN r.u_meta < 0.3 THEN jsonb_build_object('topic', r.topic, 'origin', 'bench') ELSE '{}'::jsonb END,
       r.created_at,
       CASE WHEN r.superseded THEN r.id + 1 END,
       CASE WHEN r.superseded THEN r.created_at + %(step)s::interval END
FROM (
    SELECT q.*,
           CASE WHEN q.source = 'learned' THEN 'Inferred: ' ELSE '' END
           || CASE q.scope WHEN 'user' THEN 'The user ' WHEN 'agent' THEN 'The agent ' ELSE 'The team ' END
           || q.verb || ' ' || q.topic || ' ' || q.qualifier || ' (note ' || q.id::text || ').'
           || CASE WHEN q.u_long < 0.05
                   THEN ' Details: ' || repeat('more context about ' || q.topic || '; ', 1 + floor(q.u_long * 800)::int)
                   ELSE '' END AS content,
           CASE q.source WHEN 'learned' THEN round((0.5 + 0.45 * q.u_conf)::numeric, 2)::float8
                         WHEN 'trace' THEN 0.8::float8 ELSE 1.0::float8 END AS confidence
    FROM (
        SELECT %(base)s::bigint + s.g + 1 AS id,
               %(t0)s::timestamptz - (%(n)s::bigint - s.g) * %(step)s::interval AS created_at,
               d.superseded,
               CASE WHEN d.probe_row THEN %(probe_project)s::text
                    ELSE (%(projects)s::text[])[1 + floor(cardinality(%(projects)s::text[]) * h.u_project ^ 2)::int]
               END AS project_id,
               CASE WHEN d.probe_row OR h.u_scope < 0.85 THEN 'user'
                    WHEN h.u_scope < 0.95 THEN 'agent' ELSE 'project' END AS scope,
               CASE WHEN d.probe_row THEN %(probe_id)s::text
                    WHEN h.u_scope < 0.85 THEN 'u' || lpad(floor(%(users)s::int * h.u_id ^ 3)::bigint::text, 7, '0')
                    WHEN h.u_scope < 0.95 THEN 'agent-' || floor(%(agents)s::int * h.u_id ^ 2)::int::text
                    ELSE 'team-' || floor(%(teams)s::int * h.u_id ^ 2)::int::text END AS scope_id,
               CASE WHEN h.u_source < 0.20 THEN 'learned' WHEN h.u_source < 0.25 THEN 'trace' ELSE 'manual' END AS source,
               (ARRAY['prefers', 'dislikes', 'often asks about', 'is working on', 'is learning', 'uses',
                      'avoids', 'recently mentioned', 'wants updates on', 'is an expert in'])[1 + floor(10 * h.u_verb)::int] AS verb,
               (ARRAY['email', 'Slack', 'dark mode', 'Python', 'PostgreSQL', 'Rust', 'invoices', 'refunds',
                      'the mobile app', 'weekly reports', 'vegetarian food', 'early meetings', 'Kubernetes',
                      'travel to Japan', 'jazz', 'cycling', 'the Berlin office', 'TypeScript', 'budget planning',
                      'customer onboarding', 'data privacy', 'machine learning', 'short answers',
                      'detailed explanations'])[1 + floor(24 * h.u_topic)::int] AS topic,
               (ARRAY['at work', 'on weekends', 'since last year', 'for the new project', 'when traveling',
                      'in the morning', 'with the team', 'for personal use'])[1 + floor(8 * h.u_qual)::int] AS qualifier,
               h.u_meta, h.u_long, h.u_conf
        FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS s(g)
        CROSS JOIN LATERAL (SELECT s.g / 4 AS m, s.g - (s.g / 4) * 4 AS k) AS a
        CROSS JOIN LATERAL (
            SELECT mod(a.m, %(stride)s::bigint) = 0 AND a.m / %(stride)s::bigint < %(probe_active)s::int AS probe_group,
                   a.m / %(stride)s::bigint < %(probe_history)s::int AS probe_chain,
                   pg_temp.bench_u(a.m, %(seed)s::int, 1) AS u_chain
        ) AS p
        CROSS JOIN LATERAL (
            SELECT CASE WHEN p.probe_group THEN CASE WHEN p.probe_chain THEN 2 ELSE 1 END
                        WHEN p.u_chain < 0.10 THEN 3
                        WHEN p.u_chain < 0.30 THEN 2
                        ELSE 1 END AS chain_len
        ) AS c
        CROSS JOIN LATERAL (
            SELECT p.probe_group AND a.k < c.chain_len AS probe_row,
                   a.k < c.chain_len - 1 AND s.g + 1 < %(n)s::bigint AS superseded,
                   -- a chain's rows take the subject of its first row
                   CASE WHEN a.k < c.chain_len THEN a.m * 4 ELSE s.g END AS skey
        ) AS d
        CROSS JOIN LATERAL (
            SELECT pg_temp.bench_u(d.skey, %(seed)s::int, 2) AS u_scope,
                   pg_temp.bench_u(d.skey, %(seed)s::int, 3) AS u_project,
                   pg_temp.bench_u(d.skey, %(seed)s::int, 4) AS u_id,
                   pg_temp.bench_u(s.g, %(seed)s::int, 5) AS u_source,
                   pg_temp.bench_u(s.g, %(seed)s::int, 6) AS u_verb,
                   pg_temp.bench_u(s.g, %(seed)s::int, 7) AS u_topic,
                   pg_temp.bench_u(s.g, %(seed)s::int, 8) AS u_qual,
                   pg_temp.bench_u(s.g, %(seed)s::int, 9) AS u_meta,
                   pg_temp.bench_u(s.g, %(seed)s::int, 10) AS u_long,
                   pg_temp.bench_u(s.g, %(seed)s::int, 11) AS u_conf
        ) AS h
    ) AS q
) AS r;

-- name: other_embeddings
-- Random 384-d vectors, under the probe's embedder name, for the newest `count` active facts of
-- other subjects (rows lo .. hi-1 of that list): only so that pymem.fact_embeddings has a
-- realistic size when the plans of facts_search / facts_unembedded are looked at. They carry
-- no meaning; the probe's own vectors are real HashEmbedder vectors.
INSERT INTO pymem.fact_embeddings (project_id, scope, scope_id, fact_id, embedder, embedding)
SELECT f.project_id, f.scope, f.scope_id, f.id, %(embedder)s,
       (SELECT array_agg((random() - 0.5)::real) FROM generate_series(1, %(dim)s::int) WHERE f.id IS NOT NULL)::vector
FROM (
    SELECT o.project_id, o.scope, o.scope_id, o.id FROM pymem.facts AS o
     WHERE o.superseded_by IS NULL
       AND NOT (o.project_id = %(probe_project)s AND o.scope = 'user' AND o.scope_id = %(probe_id)s)
     ORDER BY o.id DESC
     OFFSET %(lo)s LIMIT %(hi)s::bigint - %(lo)s::bigint
) AS f
ON CONFLICT (project_id, scope, scope_id, fact_id, embedder) DO NOTHING;
