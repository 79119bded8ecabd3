-- stores_items.sql: items of a keyed store addressed by namespace and key (the layout
-- LangGraph's BaseStore reads and writes, pymem/integrations/langgraph.py): item put, get,
-- delete, search by JSON filter, and namespace listing, over the store's path-addressed entries.
-- Part of keyed stores (stores.sql; tables in migrations/0004_stores.sql). Re-applied on every
-- migrate; called by pymem/stores.py and by any SQL client.

-- Items: a JSON object under a namespace (a path of labels) and a key, the model of LangGraph's
-- BaseStore (pymem.integrations.langgraph.PymemStore calls these; any SQL client may). An item is
-- the entry at path label/label/.../=key of kind json: each label and the key are written with
-- every character outside [A-Za-z0-9_~:@+,-] percent-encoded (UTF-8, upper-case hex), a label
-- spelling audit, meta or versions with its first letter encoded too, and the key after '=';
-- so a path says which item it holds, labels and keys may hold '/', '.', '%' or anything else,
-- and the path is plain ASCII (NFC normalisation never changes it). The limits of paths apply to
-- the encoded form (255 characters a segment, 1024 a path). Each item may have vectors
-- (pymem.store_vectors), one per embedded field, valid while the entry keeps the sha they
-- were computed for.

-- _store_segment_encode(label): one label or key as a path segment (see above).
CREATE OR REPLACE FUNCTION pymem._store_segment_encode(label text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT CASE WHEN s.seg IN ('audit', 'meta', 'versions')
                THEN '%' || pg_catalog.upper(pg_catalog.encode(pg_catalog.convert_to(pg_catalog.left(s.seg, 1), 'UTF8'), 'hex'))
                     || pg_catalog.substr(s.seg, 2)
                ELSE s.seg END
      FROM (SELECT coalesce(pg_catalog.string_agg(
                     CASE WHEN c.ch ~ '^[A-Za-z0-9_~:@+,-]$' THEN c.ch
                          ELSE pg_catalog.regexp_replace(
                                   pg_catalog.upper(pg_catalog.encode(pg_catalog.convert_to(c.ch, 'UTF8'), 'hex')),
                                   '(..)', '%\1', 'g') END,
                     '' ORDER BY c.n), '') AS seg
              FROM pg_catalog.regexp_split_to_table(label, '') WITH ORDINALITY AS c(ch, n)) AS s;
$$;

-- _store_segment_decode(segment): the label or key a segment encodes (inverse of the above).
CREATE OR REPLACE FUNCTION pymem._store_segment_decode(segment text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT coalesce(pg_catalog.convert_from(pg_catalog.string_agg(
               CASE WHEN pg_catalog.left(t.m[1], 1) = '%' THEN pg_catalog.decode(pg_catalog.substr(t.m[1], 2), 'hex')
                    ELSE pg_catalog.convert_to(t.m[1], 'UTF8') END,
               ''::bytea ORDER BY t.n), 'UTF8'), '')
      FROM pg_catalog.regexp_matches(segment, '%[0-9A-F]{2}|[^%]+', 'g') WITH ORDINALITY AS t(m, n);
$$;

-- _store_item_prefix(namespace): the path prefix of a namespace's items ('' for no label).
-- Labels must be non-empty: an empty one is refused (22023), as LangGraph refuses it.
CREATE OR REPLACE FUNCTION pymem._store_item_prefix(namespace text[])
RETURNS text
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF namespace IS NULL OR pg_catalog.array_position(namespace, NULL) IS NOT NULL
       OR pg_catalog.array_position(namespace, '') IS NOT NULL OR pg_catalog.array_ndims(namespace) > 1 THEN
        RAISE EXCEPTION 'pymem: a namespace is a list of non-empty labels' USING ERRCODE = '22023';
    END IF;
    RETURN coalesce((SELECT pg_catalog.string_agg(pymem._store_segment_encode(l.label), '/' ORDER BY l.n) || '/'
                       FROM pg_catalog.unnest(namespace) WITH ORDINALITY AS l(label, n)), '');
END;
$$;

-- _store_item_path(namespace, key): the path of an item (at least one label; any key).
CREATE OR REPLACE FUNCTION pymem._store_item_path(namespace text[], key text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    IF coalesce(pg_catalog.cardinality(namespace), 0) = 0 OR key IS NULL THEN
        RAISE EXCEPTION 'pymem: an item needs a namespace of at least one label and a key' USING ERRCODE = '22023';
    END IF;
    RETURN pymem._store_item_prefix(namespace) || '=' || pymem._store_segment_encode(key);
END;
$$;

-- _store_item_namespace(path): the namespace of an item's path (every segment but the last).
CREATE OR REPLACE FUNCTION pymem._store_item_namespace(path text)
RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT coalesce(pg_catalog.array_agg(pymem._store_segment_decode(s.seg) ORDER BY s.n)
                        FILTER (WHERE s.n < pg_catalog.cardinality(pg_catalog.string_to_array(path, '/'))),
                    '{}')
      FROM pg_catalog.unnest(pg_catalog.string_to_array(path, '/')) WITH ORDINALITY AS s(seg, n);
$$;

-- _store_json_eq(a, b): a = b as Python compares the decoded values: numbers and booleans by
-- value (1 = 1.0, true = 1), objects by their keys and values, arrays element by element.
CREATE OR REPLACE FUNCTION pymem._store_json_eq(a jsonb, b jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    ta text := pg_catalog.jsonb_typeof(a);
    tb text := pg_catalog.jsonb_typeof(b);
BEGIN
    IF ta IN ('number', 'boolean') AND tb IN ('number', 'boolean') THEN
        RETURN pymem._store_json_number(a) = pymem._store_json_number(b);
    ELSIF ta <> tb THEN
        RETURN false;
    ELSIF ta = 'object' THEN
        RETURN (SELECT pg_catalog.array_agg(k ORDER BY k) FROM pg_catalog.jsonb_object_keys(a) AS k)
               IS NOT DISTINCT FROM (SELECT pg_catalog.array_agg(k ORDER BY k) FROM pg_catalog.jsonb_object_keys(b) AS k)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_each(a) AS e
                            WHERE NOT pymem._store_json_eq(e.value, b -> e.key));
    ELSIF ta = 'array' THEN
        RETURN pg_catalog.jsonb_array_length(a) = pg_catalog.jsonb_array_length(b)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(a) WITH ORDINALITY AS e(value, n)
                            WHERE NOT pymem._store_json_eq(e.value, b -> (e.n::integer - 1)));
    END IF;
    RETURN a = b;
END;
$$;

-- _store_json_number(v): a JSON number or boolean (true 1, false 0) as numeric; NULL otherwise.
CREATE OR REPLACE FUNCTION pymem._store_json_number(v jsonb)
RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT CASE pg_catalog.jsonb_typeof(v)
               WHEN 'number' THEN (v #>> '{}')::numeric
               WHEN 'boolean' THEN CASE WHEN (v #>> '{}')::boolean THEN 1 ELSE 0 END
           END;
$$;

-- _store_filter_match(item, f): does a value (JSON null for a missing field) match a filter
-- value? The rules of LangGraph's InMemoryStore: an object whose keys start with '$' is a set of
-- operators ($eq, $ne, $gt, $gte, $lt, $lte; all must hold); another object matches an object
-- whose fields match its fields (other fields may exist); an array matches an array of the same
-- length element by element; a scalar matches an equal value (_store_json_eq). $gt, $gte, $lt
-- and $lte compare numbers (booleans as 1 and 0): anything else does not match. An unknown
-- operator is refused (22023).
CREATE OR REPLACE FUNCTION pymem._store_filter_match(item jsonb, f jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
DECLARE
    o record;
    v_item numeric;
    v_arg numeric;
    v_holds boolean;
BEGIN
    IF pg_catalog.jsonb_typeof(f) = 'object' THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_object_keys(f) AS k WHERE pg_catalog.left(k, 1) = '$') THEN
            FOR o IN SELECT e.key, e.value FROM pg_catalog.jsonb_each(f) AS e LOOP
                IF o.key = '$eq' THEN
                    CONTINUE WHEN pymem._store_json_eq(item, o.value);
                    RETURN false;
                ELSIF o.key = '$ne' THEN
                    CONTINUE WHEN NOT pymem._store_json_eq(item, o.value);
                    RETURN false;
                ELSIF o.key IN ('$gt', '$gte', '$lt', '$lte') THEN
                    v_item := pymem._store_json_number(item);
                    v_arg := pymem._store_json_number(o.value);
                    -- (a CASE inside the IF's condition would end it at its first THEN)
                    v_holds := CASE o.key WHEN '$gt' THEN v_item > v_arg WHEN '$gte' THEN v_item >= v_arg
                                          WHEN '$lt' THEN v_item < v_arg ELSE v_item <= v_arg END;
                    IF v_holds IS NOT TRUE THEN
                        RETURN false;
                    END IF;
                ELSE
                    RAISE EXCEPTION 'pymem: unsupported filter operator %', pg_catalog.quote_literal(o.key)
                        USING ERRCODE = '22023', HINT = 'Use $eq, $ne, $gt, $gte, $lt or $lte.';
                END IF;
            END LOOP;
            RETURN true;
        END IF;
        IF pg_catalog.jsonb_typeof(item) <> 'object' THEN
            RETURN false;
        END IF;
        RETURN NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_each(f) AS e
                            WHERE NOT pymem._store_filter_match(coalesce(item -> e.key, 'null'::jsonb), e.value));
    ELSIF pg_catalog.jsonb_typeof(f) = 'array' THEN
        RETURN pg_catalog.jsonb_typeof(item) = 'array'
           AND pg_catalog.jsonb_array_length(item) = pg_catalog.jsonb_array_length(f)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(f) WITH ORDINALITY AS e(value, n)
                            WHERE NOT pymem._store_filter_match(item -> (e.n::integer - 1), e.value));
    END IF;
    RETURN pymem._store_json_eq(item, f);
END;
$$;

-- _store_value_matches(item, filter): every field of the filter matches the item's field of
-- that name (a missing field is JSON null); '{}' matches everything.
CREATE OR REPLACE FUNCTION pymem._store_value_matches(item jsonb, filter jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SECURITY INVOKER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
    SELECT NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_each(_store_value_matches.filter) AS e
                        WHERE NOT pymem._store_filter_match(coalesce(_store_value_matches.item -> e.key, 'null'::jsonb), e.value));
$$;

-- store_item_put: writes an item (a JSON object) and replaces its vectors with the ones given,
-- one per field (fields[i] is the field embeddings[i] was computed from), in one transaction;
-- returns the entry's sha. The store must exist (store_open). Writes like store_write (audit,
-- versions, read-only prefixes, expiry: expires_at or ttl, neither for an item that never
-- expires); created_at stays the item's first write (an expired item's path is written anew).
--   SELECT pymem.store_item_put(store_key => 'agent', namespace => '{users,alice}', key => 'prefs',
--                               value => '{"theme": "dark"}');
CREATE OR REPLACE FUNCTION pymem.store_item_put(
    store_key text, namespace text[], key text, value jsonb, embedder text DEFAULT NULL,
    fields text[] DEFAULT '{}', embeddings vector[] DEFAULT '{}', actor text DEFAULT NULL,
    project_id text DEFAULT '', expires_at timestamptz DEFAULT NULL, ttl interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_path text := pymem._store_item_path(store_item_put.namespace, store_item_put.key);
    v_sha text;
BEGIN
    PERFORM pymem._tenant_enter(store_item_put.project_id);
    IF pg_catalog.jsonb_typeof(store_item_put.value) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'pymem: an item''s value must be a JSON object' USING ERRCODE = '22023';
    END IF;
    IF coalesce(pg_catalog.cardinality(store_item_put.fields), 0) <> coalesce(pg_catalog.cardinality(store_item_put.embeddings), 0)
       OR pg_catalog.array_position(store_item_put.fields, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: fields and embeddings must have the same length, one field name per vector'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._embeddings_validate(store_item_put.project_id, store_item_put.embedder, store_item_put.embeddings);
    v_sha := pymem._store_put(pymem._store_get(store_item_put.store_key, store_item_put.project_id), v_path,
                              store_item_put.value::text, 'json', store_item_put.actor, NULL, NULL, 'write',
                              store_item_put.expires_at, store_item_put.ttl);
    DELETE FROM pymem.store_vectors AS v
     WHERE v.project_id = store_item_put.project_id AND v.store_key = store_item_put.store_key AND v.path = v_path;
    IF coalesce(pg_catalog.cardinality(store_item_put.embeddings), 0) > 0 THEN
        PERFORM pymem._embedding_register(store_item_put.project_id, store_item_put.embedder, store_item_put.embeddings[1]);
        INSERT INTO pymem.store_vectors AS v (project_id, store_key, path, embedder, field, sha, embedding)
        SELECT store_item_put.project_id, store_item_put.store_key, v_path, store_item_put.embedder,
               store_item_put.fields[i], v_sha, store_item_put.embeddings[i]
          FROM pg_catalog.generate_subscripts(store_item_put.fields, 1) AS i
        ON CONFLICT ON CONSTRAINT store_vectors_pkey DO UPDATE SET embedding = EXCLUDED.embedding;
    END IF;
    RETURN v_sha;
END;
$$;

-- store_item_get: an item (no row when it does not exist or has expired); expires_at NULL: never.
--   SELECT value FROM pymem.store_item_get(store_key => 'agent', namespace => '{users,alice}', key => 'prefs');
CREATE OR REPLACE FUNCTION pymem.store_item_get(store_key text, namespace text[], key text, project_id text DEFAULT '')
RETURNS TABLE (value jsonb, created_at timestamptz, updated_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_path text := pymem._store_item_path(store_item_get.namespace, store_item_get.key);
BEGIN
    PERFORM pymem._tenant_enter(store_item_get.project_id);
    PERFORM pymem._store_key_check(store_item_get.store_key, store_item_get.project_id);
    RETURN QUERY
    SELECT e.content::jsonb, e.created_at, e.updated_at, e.expires_at
      FROM pymem.store_entries AS e
     WHERE e.project_id = store_item_get.project_id AND e.store_key = store_item_get.store_key
       AND e.path = v_path AND e.kind = 'json' AND pymem._entry_live(e.expires_at, pg_catalog.now());
END;
$$;

-- store_items_refresh: moves on the expiry of items written with a ttl, as LangGraph refreshes
-- an item's ttl when a get or a search returns it: each live item of `items` (a JSON array of
-- {"namespace": [label, ...], "key": key}, at most 10000) whose entry was written with a ttl
-- expires that ttl from now; returns how many did. An item without a ttl, missing or already
-- expired is left as it is (a refresh never revives one). Not a write of the item: no audit
-- record, no version; sha and updated_at stay. 22023 for items that are not such an array.
--   SELECT pymem.store_items_refresh(store_key => 'agent', items => '[{"namespace": ["users", "alice"], "key": "prefs"}]');
CREATE OR REPLACE FUNCTION pymem.store_items_refresh(store_key text, items jsonb, project_id text DEFAULT '')
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_paths text[];
    v_count integer := 0;
    v_at timestamptz;
    v_ttl interval;
    r record;
BEGIN
    PERFORM pymem._tenant_enter(store_items_refresh.project_id);
    PERFORM pymem._store_key_check(store_items_refresh.store_key, store_items_refresh.project_id);
    IF pg_catalog.jsonb_typeof(store_items_refresh.items) IS DISTINCT FROM 'array'
       OR EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(store_items_refresh.items) AS i
                   WHERE pg_catalog.jsonb_typeof(i.value -> 'namespace') IS DISTINCT FROM 'array'
                      OR pg_catalog.jsonb_typeof(i.value -> 'key') IS DISTINCT FROM 'string') THEN
        RAISE EXCEPTION 'pymem: items must be a JSON array of {"namespace": [labels], "key": "..."}'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pymem._check_limit('the number of items', pg_catalog.jsonb_array_length(store_items_refresh.items));
    SELECT pg_catalog.array_agg(pymem._store_item_path(
               ARRAY(SELECT pg_catalog.jsonb_array_elements_text(i.value -> 'namespace')), i.value ->> 'key'))
      INTO v_paths
      FROM pg_catalog.jsonb_array_elements(store_items_refresh.items) AS i;
    -- row by row, each by its key, in path order (two refreshes lock alike), the new expiry
    -- computed here: Citus refuses a STABLE function (timestamptz + interval) of a column in an
    -- UPDATE; one lookup per path keeps a generic plan on the primary key (PostgreSQL 15 read the
    -- whole store for path = ANY (...))
    FOR r IN SELECT d.path FROM (SELECT DISTINCT p.path FROM pg_catalog.unnest(v_paths) AS p(path)) AS d
              ORDER BY d.path COLLATE "C" LOOP  -- r.path keeps the column's collation: the key's
        SELECT e.ttl INTO v_ttl FROM pymem.store_entries AS e
         WHERE e.project_id = store_items_refresh.project_id AND e.store_key = store_items_refresh.store_key
           AND e.path = r.path AND e.kind = 'json' AND e.ttl IS NOT NULL AND pymem._entry_live(e.expires_at, v_now)
           FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        v_at := v_now + v_ttl;
        UPDATE pymem.store_entries AS e SET expires_at = v_at
         WHERE e.project_id = store_items_refresh.project_id AND e.store_key = store_items_refresh.store_key
           AND e.path = r.path;
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END;
$$;

-- store_item_delete: deletes an item and its vectors (true), or does nothing (false).
--   SELECT pymem.store_item_delete(store_key => 'agent', namespace => '{users,alice}', key => 'prefs');
CREATE OR REPLACE FUNCTION pymem.store_item_delete(
    store_key text, namespace text[], key text, actor text DEFAULT NULL, project_id text DEFAULT '')
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
BEGIN
    RETURN pymem.store_delete(store_key => store_item_delete.store_key,
                              path => pymem._store_item_path(store_item_delete.namespace, store_item_delete.key),
                              actor => store_item_delete.actor, project_id => store_item_delete.project_id);
END;
$$;

-- store_items_search: the live items under a namespace prefix ('{}': all) whose value matches
-- filter (_store_value_matches), skip rows skipped and at most max_items returned. Without a
-- query vector: newest write first (updated_at, then path). With one: by score, the best cosine
-- similarity of the query to the item's vectors from `embedder` (1 - cosine distance), highest
-- first; items without such a vector follow, score NULL.
--   SELECT namespace, key, value, score FROM pymem.store_items_search(store_key => 'agent',
--          namespace_prefix => '{users}', filter => '{"theme": "dark"}');
CREATE OR REPLACE FUNCTION pymem.store_items_search(
    store_key text, namespace_prefix text[] DEFAULT '{}', filter jsonb DEFAULT '{}', query_vector vector DEFAULT NULL,
    embedder text DEFAULT NULL, max_items integer DEFAULT 10, skip integer DEFAULT 0, project_id text DEFAULT '')
RETURNS TABLE (namespace text[], key text, value jsonb, created_at timestamptz, updated_at timestamptz,
               score double precision, expires_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_prefix text := pymem._store_item_prefix(store_items_search.namespace_prefix);
BEGIN
    PERFORM pymem._tenant_enter(store_items_search.project_id);
    PERFORM pymem._store_key_check(store_items_search.store_key, store_items_search.project_id);
    PERFORM pymem._check_limit('max_items', store_items_search.max_items);
    IF store_items_search.skip IS NULL OR store_items_search.skip < 0 THEN
        RAISE EXCEPTION 'pymem: skip must be 0 or more' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.jsonb_typeof(store_items_search.filter) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'pymem: filter must be a JSON object' USING ERRCODE = '22023';
    END IF;
    -- the page is chosen first, then only its rows are decoded (an item's namespace and key,
    -- its value as jsonb): decoding every candidate was slower (docs/performance.md)
    IF store_items_search.query_vector IS NULL THEN
        RETURN QUERY
        SELECT pymem._store_item_namespace(t.path), pymem._store_segment_decode(pg_catalog.substr(pg_catalog.regexp_replace(t.path, '^.*/', ''), 2)),
               t.content::jsonb, t.created_at, t.updated_at, NULL::double precision, t.expires_at
          FROM (SELECT e.path, e.content, e.created_at, e.updated_at, e.expires_at
                  FROM pymem.store_entries AS e
                 WHERE e.project_id = store_items_search.project_id AND e.store_key = store_items_search.store_key
                   AND pg_catalog.starts_with(e.path, v_prefix) AND e.kind = 'json' AND e.path ~ '/=[^/]*$'
                   AND pymem._entry_live(e.expires_at, pg_catalog.now())
                   AND (store_items_search.filter = '{}'::jsonb
                        OR pymem._store_value_matches(e.content::jsonb, store_items_search.filter))
                 ORDER BY e.updated_at DESC, e.path COLLATE "C"
                OFFSET store_items_search.skip LIMIT store_items_search.max_items) AS t
         ORDER BY t.updated_at DESC, t.path COLLATE "C";
        RETURN;
    END IF;
    PERFORM pymem._query_check(store_items_search.project_id, store_items_search.embedder, store_items_search.query_vector);
    RETURN QUERY
    SELECT pymem._store_item_namespace(t.path), pymem._store_segment_decode(pg_catalog.substr(pg_catalog.regexp_replace(t.path, '^.*/', ''), 2)),
           t.content::jsonb, t.created_at, t.updated_at, t.score, t.expires_at
      FROM (SELECT e.path, e.content, e.created_at, e.updated_at, s.score, e.expires_at
              FROM pymem.store_entries AS e
              LEFT JOIN LATERAL (
                  SELECT pg_catalog.max(1 - pymem._cosine_distance(v.embedding, store_items_search.query_vector)) AS score
                    FROM pymem.store_vectors AS v
                   WHERE v.project_id = e.project_id AND v.store_key = e.store_key AND v.path = e.path
                     AND v.embedder = store_items_search.embedder AND v.sha = e.sha) AS s ON true
             WHERE e.project_id = store_items_search.project_id AND e.store_key = store_items_search.store_key
               AND pg_catalog.starts_with(e.path, v_prefix) AND e.kind = 'json' AND e.path ~ '/=[^/]*$'
               AND pymem._entry_live(e.expires_at, pg_catalog.now())
               AND (store_items_search.filter = '{}'::jsonb
                    OR pymem._store_value_matches(e.content::jsonb, store_items_search.filter))
             ORDER BY s.score DESC NULLS LAST, e.updated_at DESC, e.path COLLATE "C"
            OFFSET store_items_search.skip LIMIT store_items_search.max_items) AS t
     ORDER BY t.score DESC NULLS LAST, t.updated_at DESC, t.path COLLATE "C";
END;
$$;

-- store_namespaces: the distinct namespaces of a store's live items, sorted (label by label, in
-- code-point order), those that start with `prefix` and end with `suffix` ('*' in either
-- matches any label), each cut to its first max_depth labels when given (then distinct again).
--   SELECT namespace FROM pymem.store_namespaces(store_key => 'agent', prefix => '{users}', max_depth => 2);
CREATE OR REPLACE FUNCTION pymem.store_namespaces(
    store_key text, prefix text[] DEFAULT '{}', suffix text[] DEFAULT '{}', max_depth integer DEFAULT NULL,
    max_items integer DEFAULT 100, skip integer DEFAULT 0, project_id text DEFAULT '')
RETURNS TABLE (namespace text[])
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pymem, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_fixed integer;
    v_path_prefix text;
BEGIN
    PERFORM pymem._tenant_enter(store_namespaces.project_id);
    PERFORM pymem._store_key_check(store_namespaces.store_key, store_namespaces.project_id);
    PERFORM pymem._check_limit('max_items', store_namespaces.max_items);
    IF store_namespaces.skip IS NULL OR store_namespaces.skip < 0 OR store_namespaces.max_depth < 0 THEN
        RAISE EXCEPTION 'pymem: skip and max_depth must be 0 or more' USING ERRCODE = '22023';
    END IF;
    IF store_namespaces.prefix IS NULL OR store_namespaces.suffix IS NULL
       OR pg_catalog.array_position(store_namespaces.prefix, NULL) IS NOT NULL
       OR pg_catalog.array_position(store_namespaces.suffix, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'pymem: prefix and suffix are lists of labels (''*'': any label)' USING ERRCODE = '22023';
    END IF;
    -- the labels before the first '*' of the prefix narrow the scan to their path prefix
    v_fixed := coalesce(pg_catalog.array_position(store_namespaces.prefix, '*') - 1,
                        pg_catalog.cardinality(store_namespaces.prefix));
    v_path_prefix := pymem._store_item_prefix(store_namespaces.prefix[1:v_fixed]);
    RETURN QUERY
    SELECT d.ns FROM (
        SELECT DISTINCT CASE WHEN store_namespaces.max_depth IS NULL THEN n.ns
                             ELSE n.ns[1:store_namespaces.max_depth] END AS ns
          -- each distinct namespace is decoded once, not every item's path (docs/performance.md).
          -- OFFSET 0 keeps the conditions below
          -- from being pushed into the DISTINCT scan, where they would decode every path again.
          FROM (SELECT pymem._store_item_namespace(p.dir || '/=') AS ns
                  FROM (SELECT DISTINCT pg_catalog.regexp_replace(e.path, '/[^/]*$', '') AS dir
                          FROM pymem.store_entries AS e
                         WHERE e.project_id = store_namespaces.project_id AND e.store_key = store_namespaces.store_key
                           AND pg_catalog.starts_with(e.path, v_path_prefix) AND e.kind = 'json'
                           AND e.path ~ '/=[^/]*$' AND pymem._entry_live(e.expires_at, pg_catalog.now())) AS p
                OFFSET 0) AS n
         WHERE pg_catalog.cardinality(n.ns) >= pg_catalog.cardinality(store_namespaces.prefix)
           AND pg_catalog.cardinality(n.ns) >= pg_catalog.cardinality(store_namespaces.suffix)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.generate_subscripts(store_namespaces.prefix, 1) AS i
                            WHERE store_namespaces.prefix[i] <> '*' AND store_namespaces.prefix[i] <> n.ns[i])
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.generate_subscripts(store_namespaces.suffix, 1) AS i
                            WHERE store_namespaces.suffix[i] <> '*'
                              AND store_namespaces.suffix[i] <> n.ns[pg_catalog.cardinality(n.ns)
                                                                      - pg_catalog.cardinality(store_namespaces.suffix) + i])
    ) AS d
    ORDER BY d.ns COLLATE "C"
    OFFSET store_namespaces.skip LIMIT store_namespaces.max_items;
END;
$$;
