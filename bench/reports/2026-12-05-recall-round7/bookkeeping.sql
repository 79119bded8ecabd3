-- The least BM25 bookkeeping the best-match normalisation needs, alone: for the 1,000-message
-- probe's 140 rows sharing a term with "which hotel did I book in Kyoto" (read once into arrays
-- before the loop), each row's query terms, each term's document frequency and idf, each row's
-- BM25 and the best eligible one, n times in a PL/pgSQL loop. A scratch function:
--   psql "$DSN" -f bookkeeping.sql
--   psql "$DSN" -c '\timing on' -c 'SELECT pymem._bk_test(1000)'      -- ms / 1000 = per call
CREATE OR REPLACE FUNCTION pymem._bk_test(n integer) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
  v_terms tsquery[] := ARRAY['book'::tsquery, 'hotel'::tsquery, 'kyoto'::tsquery];
  v_any tsquery := 'book | hotel | kyoto'::tsquery;
  lx tsvector[]; tk int[]; okk bool[];
  m float8; x float8 := 0; i int;
  v_docs float8 := 1000; v_avgdl float8 := 12;
BEGIN
  SELECT array_agg(e.lexemes), array_agg(e.tokens), array_agg(e.chars >= 10) INTO lx, tk, okk
    FROM pymem.message_embeddings e
   WHERE e.project_id = 'acme' AND e.user_id = 'probe' AND e.embedder = 'hash-384-v1' AND e.lexemes @@ v_any;
  FOR i IN 1..n LOOP
    WITH h AS MATERIALIZED (SELECT u.n, u.tk, u.ok,
                                   ARRAY(SELECT t.t FROM generate_subscripts(v_terms, 1) AS t(t) WHERE u.lx @@ v_terms[t.t]) AS mask
                              FROM unnest(lx, tk, okk) WITH ORDINALITY AS u(lx, tk, ok, n)),
         d AS MATERIALIZED (SELECT array_agg(pymem._bm25_idf(v_docs, c.df) ORDER BY c.t) AS idf
                              FROM (SELECT t.t, (SELECT count(*) FROM h WHERE t.t = ANY (h.mask))::float8 AS df
                                      FROM generate_subscripts(v_terms, 1) AS t(t)) AS c)
    SELECT max(pymem._bm25((SELECT sum(d.idf[b.t]) FROM unnest(h.mask) AS b(t)), 1, h.tk, v_avgdl, 0.3)) FILTER (WHERE h.ok)
      INTO m FROM h CROSS JOIN d;
    x := x + m;
  END LOOP;
  RETURN x;
END $$;
