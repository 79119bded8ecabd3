"""The cost of citus.sql step 7 (force_custom_plan on pymem's PL/pgSQL functions) on a Citus
whose local plan cache leaks: per-call median wall time of four calls with the functions as the
API files declare them ("original", RESET) and with step 7 ("custom"), alternating rounds.

    python plan_cache_ab.py <coordinator port> [rounds]

Needs a cluster migrated by pymem as the superuser postgres on 127.0.0.1 (.ci/citus start DIR,
then pymem.migrate), a user 'probe' with facts and turns in project p1. Leaves the functions as
"custom" or "original" after the last round: run `pymem migrate` again afterwards."""
import psycopg, sys, time, statistics, pymem
coord = f"postgresql://postgres@127.0.0.1:{sys.argv[1]}/postgres"
CUSTOM = """DO $$ DECLARE f regprocedure; BEGIN FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = 'pymem'::regnamespace
  AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql') LOOP
  EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = force_custom_plan', f); END LOOP; END $$"""
calls = {
 "context_read": ("SELECT pymem.context_read(%s, %s, %s, query_text => %s)", ("probe", "bot", "p1", "hello number")),
 "facts_newest": ("SELECT * FROM pymem.facts_newest(%s, %s, %s, 50)", ("user", "probe", "p1")),
 "turn_record": ("SELECT * FROM pymem.turn_record(%s, %s, 'ok', project_id => %s, thread_id => 'ab')", ("probe", "x y z", "p1")),
 "fact_add": ("SELECT pymem.fact_add('user', %s, %s, %s)", ("probe", "a fact", "p1")),
}
res = {(m, k): [] for m in ("original", "custom") for k in calls}
for r in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    for mode in ("original", "custom"):
        with psycopg.connect(coord, autocommit=True) as c:
            c.execute(CUSTOM if mode == "custom" else CUSTOM.replace("SET plan_cache_mode = force_custom_plan", "RESET plan_cache_mode"))
        with psycopg.connect(coord, autocommit=True) as c:
            for name, (q, p) in calls.items():
                for i in range(20):
                    c.execute(q, p).fetchall()
                t = []
                for i in range(150):
                    t0 = time.perf_counter(); c.execute(q, p).fetchall(); t.append(time.perf_counter() - t0)
                res[(mode, name)].append(statistics.median(t) * 1000)
for name in calls:
    o = statistics.median(res[("original", name)]); cu = statistics.median(res[("custom", name)])
    print(f"{name:14s} original {o:7.3f} ms  custom {cu:7.3f} ms  custom/original {cu/o:5.2f}x   rounds {[round(x,2) for x in res[('original', name)]]} {[round(x,2) for x in res[('custom', name)]]}")
