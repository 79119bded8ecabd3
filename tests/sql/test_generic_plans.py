"""Plans, not timers: a call that writes or reads a few rows reads a few rows, in the generic plans
PL/pgSQL runs from a function's sixth call on (and in the plans of the foreign-key checks its
writes fire), however many rows its user, thread, subject or store holds.

Generic plans are planned without the values: the planner takes a user or subject to hold a row
or two, and an index that serves only part of the conditions can look as cheap as the right
one. Four such plans were found on benchmark data (a turn's lexeme lookup, the content-key
lookups, the vector foreign-key check, message_embeddings_put's update): each read all of a
heavy user's or subject's rows to find one. Here every call below runs under
plan_cache_mode = force_generic_plan with auto_explain, against a fixture with one heavy user,
thread, subject and store among light ones, and no scan of a pymem table may read more than a
call's own rows."""

from __future__ import annotations


import psycopg
import pytest
from conftest import PlanLog, plan_nodes
from pgvector import Vector

from pymem import HashEmbedder

HEAVY = 600  # rows of the heavy user's thread, subject and store: what a bad plan would read
LIMIT = 40  # what a call below may read from one scan


@pytest.fixture(scope="module")
def heavy(pg_server, template_db):
    from conftest import _janitor, dsn_for

    janitor = _janitor(pg_server, "pymem_generic_plans", template_dbname=template_db)
    janitor.drop()
    janitor.init()
    dsn = dsn_for(pg_server, "pymem_generic_plans")
    emb = HashEmbedder()
    vec = Vector(emb.embed(["a garden in the city"])[0])
    with psycopg.connect(dsn, autocommit=True) as c:
        from pgvector.psycopg import register_vector

        register_vector(c)
        # one long thread with vectors, and many light users
        for lo in range(0, HEAVY, 200):
            c.execute("SELECT count(*) FROM pymem.messages_add_many('heavy', 'long', %s, %s, embeddings => %s, "
                      "embedder => %s)", (["user", "assistant"] * 100, [f"message {lo + i} about gardens"
                                                                        for i in range(200)], [vec] * 200, emb.name))
        c.execute("""SELECT count(*) FROM generate_series(1, 300) AS u,
                            LATERAL pymem.messages_add_many('light' || u, 'default', ARRAY['user', 'assistant'],
                                                            ARRAY['hello there', 'hi, how can I help'],
                                                            embeddings => ARRAY[%s, %s]::vector[],
                                                            embedder => %s) AS m""", (vec, vec, emb.name))
        # a heavy subject (and agent) among light ones
        for scope, subject in (("user", "heavy"), ("agent", "bot")):
            c.execute("SELECT count(*) FROM pymem.facts_add_many(%s, %s, %s)",
                      (scope, [subject] * HEAVY, [f"{subject} fact {i}" for i in range(HEAVY)]))
        c.execute("SELECT count(*) FROM pymem.facts_add_many('user', %s, %s)",
                  ([f"light{i % 300}" for i in range(600)], [f"light fact {i}" for i in range(600)]))
        # a big store, one path with many versions
        c.execute("SELECT * FROM pymem.store_open('big', keep_versions => true)")
        c.execute("SELECT count(pymem.store_write('big', 'notes/' || i, 'note ' || i)) FROM generate_series(1, %s) i",
                  (HEAVY,))
        c.execute("SELECT count(pymem.store_write('big', 'hot.md', 'version ' || i)) FROM generate_series(1, 60) i")
        c.execute("SELECT count(*) FROM generate_series(1, 100) AS s, LATERAL pymem.store_open('small' || s) AS o")
        c.execute("SELECT count(pymem.store_write('small' || s, 'notes/' || i, 'note')) "
                  "FROM generate_series(1, 100) AS s, generate_series(1, 3) AS i")
        c.execute("ANALYZE")
        # a table of a few pages is read whole, by design: the planner's right choice there
        small = {r[0] for r in c.execute("SELECT relname FROM pg_class WHERE relnamespace = 'pymem'::regnamespace "
                                         "AND relkind = 'r' AND relpages <= 8")}
    yield dsn, small
    janitor.drop()


def plans_of(dsn: str, call: str, params: tuple = (), repeat: int = 7) -> list[dict]:
    """Every plan auto_explain reports while running `call` (its {i} numbered) `repeat` times,
    with generic plans only."""
    with psycopg.connect(dsn) as c:
        from pgvector.psycopg import register_vector

        register_vector(c)
        c.execute("SET plan_cache_mode = force_generic_plan")
        log = PlanLog(c)
        for i in range(repeat):
            c.execute(call.replace("{i}", str(i)), params).fetchall()
        c.rollback()  # the fixture stays as it is for the next call
    return log.plans


VEC = Vector(HashEmbedder().embed(["a garden in the city"])[0])
NAME = HashEmbedder().name

CALLS = [
    # facts of the heavy subject and agent
    ("SELECT * FROM pymem.fact_add('user', 'heavy', 'new heavy fact {i}')", ()),
    ("SELECT * FROM pymem.fact_add('user', 'heavy', 'heavy fact 7')", ()),
    ("SELECT * FROM pymem.fact_add('agent', 'bot', 'new bot fact {i}', embedding => %s, embedder => %s)", (VEC, NAME)),
    ("SELECT * FROM pymem.fact_add('user', 'heavy', 'learned {i}', write => pymem.fact_write(source => 'learned'), max_learned => 20)", ()),
    ("SELECT * FROM pymem.fact_supersede('user', 'heavy', 'heavy fact {i} v2', old_content => 'heavy fact {i}')", ()),
    ("SELECT pymem.fact_forget('user', 'heavy', content => 'heavy fact 3{i}')", ()),
    ("SELECT * FROM pymem.facts_newest('user', 'heavy', max_facts => 10)", ()),
    ("SELECT * FROM pymem.facts_add_many('user', ARRAY['heavy', 'heavy'], ARRAY['batch {i} a', 'heavy fact 9'])", ()),
    # the heavy user's long thread
    ("SELECT * FROM pymem.turn_record(user_id => 'heavy', user_content => 'turn {i}', assistant_content => 'ok', "
     "thread_id => 'long', embedder => %s, user_embedding => %s, assistant_embedding => %s, "
     "learned => ARRAY['heavy fact 11', 'turn fact {i}'], max_learned => 20)", (NAME, VEC, VEC)),
    ("SELECT pymem.message_add('heavy', 'plain {i}', thread_id => 'long')", ()),
    ("SELECT * FROM pymem.messages_add_many('heavy', 'long', ARRAY['user', 'assistant'], ARRAY['a {i}', 'b {i}'], "
     "embeddings => ARRAY[%s, %s]::vector[], embedder => %s)", (VEC, VEC, NAME)),
    ("SELECT pymem.message_embeddings_put('heavy', 'other-384', ARRAY['long', 'long'], ARRAY[2 * {i} + 1, 2 * {i} + 2]"
     "::bigint[], ARRAY[%s, %s]::vector[])", (VEC, VEC)),
    ("SELECT * FROM pymem.window_read('heavy', thread_id => 'long', max_messages => 10)", ()),
    ("SELECT * FROM pymem.message_pop('heavy', thread_id => 'long')", ()),
    ("SELECT * FROM pymem.summary_read('heavy', thread_id => 'long')", ()),
    ("SELECT * FROM pymem.messages_unembedded('heavy', %s, max_messages => 10)", (NAME,)),
    # a light user's reads, beside the heavy user, thread and agent
    ("SELECT pymem.context_read('light7', agent_id => 'bot', max_facts => 20, recall => pymem.recall(window_size => 10))",
     ()),
    ("SELECT pymem.context_read('light7', agent_id => 'nobody', query_vector => %s, embedder => %s, "
     "query_text => 'gardens in the city')", (VEC, NAME)),
    ("SELECT * FROM pymem.messages_recall('light7', %s, %s, query_text => 'gardens')", (VEC, NAME)),
    ("SELECT * FROM pymem.facts_search('user', 'light7', query_text => 'light fact', k => 5)", ()),
    # the big store
    ("SELECT pymem.store_write('big', 'new/{i}.md', 'text')", ()),
    ("SELECT pymem.store_write('big', 'hot.md', 'again {i}')", ()),
    ("SELECT * FROM pymem.store_read('big', 'notes/1{i}')", ()),
    ("SELECT pymem.store_delete('big', 'notes/2{i}')", ()),
    ("SELECT * FROM pymem.store_open('big')", ()),
    ("SELECT pymem.store_item_put('big', ARRAY['ns'], 'k{i}', '{\"v\": 1}')", ()),
    ("SELECT * FROM pymem.store_versions('big', 'notes/3{i}')", ()),
    ("SELECT * FROM pymem.store_list('small1')", ()),
    ("SELECT pymem.store_write('big', 'ttl/{i}.md', 'text', ttl => '1 hour')", ()),
    ("SELECT pymem.store_items_refresh('big', '[{\"namespace\": [\"ns\"], \"key\": \"k{i}\"}]')", ()),
    ("SELECT * FROM pymem.store_item_get('big', ARRAY['ns'], 'k{i}')", ()),
    ("SELECT * FROM pymem.purge()", ()),  # nothing expired: the partial indexes of what expires
]


@pytest.mark.parametrize(("call", "params"), CALLS,
                         ids=[f"{n}-{c[0].split('pymem.')[1].split('(')[0]}" for n, c in enumerate(CALLS)])
def test_a_small_call_reads_few_rows_in_generic_plans(heavy, call, params):
    dsn, small = heavy
    plans = plans_of(dsn, call, params)
    assert plans, "auto_explain reported nothing"
    for plan in plans:
        for scan in (n for n in plan_nodes(plan["Plan"]) if "Relation Name" in n):
            if scan["Node Type"] == "Seq Scan" and scan["Relation Name"] in small:
                continue
            read = scan.get("Actual Rows", 0) * scan.get("Actual Loops", 1)
            removed = scan.get("Rows Removed by Filter", 0) + scan.get("Rows Removed by Join Filter", 0)
            assert read <= LIMIT and removed <= LIMIT, (
                f"{plan.get('Query Text', '')[:300]}\n{scan['Node Type']} on {scan['Relation Name']} "
                f"({scan.get('Index Name')}): read {read:.0f}, removed {removed}; "
                f"cond {scan.get('Index Cond')}, filter {scan.get('Filter')}")
