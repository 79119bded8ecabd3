"""_recall_ranked (this stop's, with _recall_rows) against _recall_ranked_old (the body before
it, created in the same database under that name from `git show a4cd75f:sql/api/conversations_recall.sql`),
ms per call in a PL/pgSQL loop, alternating rounds. The database: bench/conversations.py's data
(project acme, user probe, embedder hash-384-v1).

    python ab_rank.py <dsn> [calls] [rounds] [text as SQL: 'words' or NULL ...]
"""
import sys, statistics, psycopg
dsn = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
R = int(sys.argv[3]) if len(sys.argv) > 3 else 8
texts = sys.argv[4:] or ["'which hotel did I book in Kyoto'"]
res = {"old": [], "new": []}
with psycopg.connect(dsn, autocommit=True) as c:
    c.execute("SET ROLE pymem_owner"); c.execute("SELECT set_config('pymem.tenant', 'p:acme', false)")
    notes = []
    c.add_notice_handler(lambda d: notes.append(float(d.message_primary)))
    for r in range(R):
        for name, fn in (("old", "_recall_ranked_old"), ("new", "_recall_ranked")) if r % 2 == 0 else (("new", "_recall_ranked"), ("old", "_recall_ranked_old")):
            for t in texts:
                notes.clear()
                c.execute(f"""DO $$ DECLARE v vector; t0 timestamptz; BEGIN
                  v := (SELECT embedding FROM pymem.message_embeddings WHERE user_id='probe' AND project_id='acme' AND thread_id='trips' AND seq=17);
                  FOR i IN 1..20 LOOP PERFORM count(*) FROM pymem.{fn}('acme','probe','default', v, 'hash-384-v1', {t}, pymem._recall_spec(10, 10, 20, 0, 0, 0.4, 30, NULL, NULL, NULL, NULL, NULL)); END LOOP;
                  t0 := clock_timestamp();
                  FOR i IN 1..{N} LOOP PERFORM count(*) FROM pymem.{fn}('acme','probe','default', v, 'hash-384-v1', {t}, pymem._recall_spec(10, 10, 20, 0, 0, 0.4, 30, NULL, NULL, NULL, NULL, NULL)); END LOOP;
                  RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - t0) * 1000 / {N};
                END $$""")
                res[name].append(notes[0])
for k, v in res.items():
    print(k, "median %.3f min %.3f" % (statistics.median(v), min(v)))
print("new/old median %.3f" % (statistics.median(res["new"]) / statistics.median(res["old"])))
