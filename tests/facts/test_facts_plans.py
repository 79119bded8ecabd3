"""Plans, not timers: on a table of 100k+ facts, the reads inside the SQL API are index scans
on the partial newest-first indexes, with no sort of a whole subject or scope. The plans are
the ones PostgreSQL really runs inside the PL/pgSQL functions (auto_explain, nested
statements, sent to this session as notices), custom and generic plans alike."""

from __future__ import annotations

import time

import psycopg
import pytest
from conftest import PlanLog, plan_nodes


@pytest.fixture(scope="module")
def big(pg_server, template_db):
    from conftest import _janitor, dsn_for

    janitor = _janitor(pg_server, "pymem_big_facts", template_dbname=template_db)
    janitor.drop()
    janitor.init()
    dsn = dsn_for(pg_server, "pymem_big_facts")
    with psycopg.connect(dsn, autocommit=True) as c:
        # the plans below must not depend on when autovacuum wakes up: ANALYZE runs by hand here
        c.execute("ALTER TABLE pymem.facts SET (autovacuum_enabled = false)")
        c.execute(
            """INSERT INTO pymem.facts (project_id, scope, scope_id, content, content_key, source, created_at)
               SELECT 'p' || (g % 3), 'user', 'u' || (g % 2000), 'fact ' || g, pymem.fact_key('fact ' || g),
                      CASE WHEN g % 5 = 0 THEN 'learned' ELSE 'manual' END,
                      now() - g * interval '1 second'
               FROM generate_series(1, 100000) AS g"""
        )
        c.execute(
            """INSERT INTO pymem.facts (project_id, scope, scope_id, content, content_key, source, created_at)
               SELECT '', 'user', 'heavy', 'heavy fact ' || g, pymem.fact_key('heavy fact ' || g),
                      CASE WHEN g % 2 = 0 THEN 'learned' ELSE 'manual' END, now() - g * interval '1 second'
               FROM generate_series(1, 5000) AS g"""
        )
        # a long superseded history for the heavy user, through the API
        c.execute(
            """DO $$ BEGIN
                 FOR i IN 1..500 LOOP
                   PERFORM pymem.fact_supersede('user', 'heavy', 'heavy fact ' || i || ' v2', old_content => 'heavy fact ' || i);
                 END LOOP;
               END $$"""
        )
        c.execute("ANALYZE pymem.facts")
        assert c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0] >= 105_000
    yield dsn
    janitor.drop()


def plans_of(dsn: str, calls: list[str], repeat: int = 8) -> list[dict]:
    """Every statement plan auto_explain reports while running `calls` `repeat` times."""
    with psycopg.connect(dsn, autocommit=True) as c:
        log = PlanLog(c)
        for _ in range(repeat):  # plpgsql switches to a generic plan after five runs
            for call in calls:
                c.execute(call).fetchall()
    return log.plans


def vacuum_when_alone(c: psycopg.Connection) -> None:
    """VACUUM that removes every dead row of pymem.facts: it waits (up to 60 s) until no other
    session of this database holds a snapshot (an autovacuum ANALYZE that began before the
    delete keeps the rows visible to it, and VACUUM must keep them), and it cleans the indexes
    even when few pages hold dead rows (INDEX_CLEANUP ON: the default skips index vacuuming
    below 2% of the pages, which leaves dead entries that a bitmap scan still reads)."""
    for _ in range(600):
        others = c.execute(
            """SELECT count(*) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()
                 AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)"""
        ).fetchone()[0]
        if not others:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("another session of the test database held a snapshot for 60 s")
    c.execute("VACUUM (INDEX_CLEANUP ON, ANALYZE) pymem.facts")


def facts_scans(plans: list[dict]) -> list[list[dict]]:
    """Node lists of the plans that read pymem.facts."""
    out = []
    for p in plans:
        ns = list(plan_nodes(p["Plan"]))
        if any(n.get("Relation Name") == "facts" for n in ns):
            out.append(ns)
    return out


@pytest.mark.parametrize(
    ("call", "index"),
    [
        ("SELECT * FROM pymem.facts_newest('user', 'heavy', max_facts => 50)", "facts_subject_active_newest"),
        ("SELECT * FROM pymem.facts_newest('user', 'u7', 'p1', max_facts => 10)", "facts_subject_active_newest"),
        ("SELECT * FROM pymem.facts_newest('user', '*', 'p2', max_facts => 50)", "facts_scope_active_newest"),
        ("SELECT * FROM pymem.facts_list('user', 'heavy', max_facts => 50)", "facts_subject_active_newest"),
        ("SELECT * FROM pymem.facts_list('user', '*', 'p2', max_facts => 50)", "facts_scope_active_newest"),
    ],
)
def test_newest_reads_are_index_scans_without_sort(big, call, index):
    scans = facts_scans(plans_of(big, [call]))
    assert len(scans) == 8
    for ns in scans:
        types = [n["Node Type"] for n in ns]
        assert "Seq Scan" not in types and "Sort" not in types and "Incremental Sort" not in types, types
        used = [n.get("Index Name") for n in ns if n["Node Type"] in ("Index Scan", "Index Only Scan")]
        assert used == [index], (types, used)
        # the scan stops after what the call returns: cost is what is read, not what is stored
        scan = next(n for n in ns if n.get("Index Name") == index)
        assert scan["Actual Rows"] <= 50


def test_a_listing_page_after_a_fact_starts_at_it_in_the_index(big):
    """facts_list's keyset: the row comparison (created_at, id) < (...) is an index condition of
    the newest-first index, so a deep page reads its own rows, not every row before it."""
    with psycopg.connect(big, autocommit=True) as c:
        deep = c.execute("SELECT id FROM pymem.facts_list('user', 'heavy', max_facts => 4000) OFFSET 3999").fetchone()[0]
        scope_deep = c.execute(
            "SELECT id FROM pymem.facts_list('user', '*', 'p2', max_facts => 3000) OFFSET 2999").fetchone()[0]
    calls = [f"SELECT * FROM pymem.facts_list('user', 'heavy', max_facts => 20, after => {deep})",
             f"SELECT * FROM pymem.facts_list('user', '*', 'p2', max_facts => 20, after => {scope_deep})"]
    scans = facts_scans(plans_of(big, calls))
    assert scans
    # a metadata filter: the planner may read the subject's rows from the fact on and sort them
    # (it cannot know how many match), never the table
    for ns in facts_scans(plans_of(big, [f"SELECT * FROM pymem.facts_list('user', 'heavy', "
                                         f"metadata => '{{\"a\": 1}}', max_facts => 20, after => {deep})"])):
        assert "Seq Scan" not in [n["Node Type"] for n in ns]
    for ns in scans:
        types = [n["Node Type"] for n in ns]
        assert "Seq Scan" not in types and "Sort" not in types and "Incremental Sort" not in types, types
        for n in ns:
            if n["Node Type"] in ("Index Scan", "Index Only Scan"):
                assert n["Actual Rows"] <= 20, (n.get("Index Name"), n["Actual Rows"])
                if n.get("Index Name", "").endswith("active_newest"):
                    assert "ROW(" in n.get("Index Cond", "") or "created_at" in n.get("Index Cond", ""), n


def test_users_list_reads_a_page_of_users_not_the_table(big):
    calls = ["SELECT * FROM pymem.users_list('p1', max_rows => 10)",
             "SELECT * FROM pymem.users_list('p1', max_rows => 10, after => 'u500')"]
    scans = facts_scans(plans_of(big, calls))
    assert scans
    for ns in scans:
        types = [n["Node Type"] for n in ns]
        assert "Seq Scan" not in types, types
        for n in ns:
            if n["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"):
                assert n["Actual Rows"] * n.get("Actual Loops", 1) <= 2000, (n.get("Index Name"), n["Actual Rows"])


def test_learned_cap_reads_at_most_cap_plus_one_rows(big):
    call = "SELECT * FROM pymem.fact_add('user', 'heavy', 'new learned ' || clock_timestamp(), write => pymem.fact_write(source => 'learned'), max_learned => 200)"
    with psycopg.connect(big, autocommit=True) as c:  # the first add trims ~2,300 rows at once
        c.execute(call)
        vacuum_when_alone(c)  # what autovacuum does after a mass delete
    # from then on, each learned add reads at most cap + 1 learned rows of the subject,
    # however many facts the subject and the table hold
    scans = facts_scans(plans_of(big, [call], repeat=6))
    assert scans
    for ns in scans:
        types = [n["Node Type"] for n in ns]
        assert "Seq Scan" not in types, types
        for n in ns:
            if n["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Index Scan", "Bitmap Heap Scan"):
                # cap + 1 live entries, plus at most one dead entry per add since the vacuum
                assert n["Actual Rows"] <= 201 + 6, (n["Node Type"], n.get("Index Name"), n["Actual Rows"])
    with psycopg.connect(big) as c:
        n = c.execute(
            "SELECT count(*) FROM pymem.facts WHERE scope_id = 'heavy' AND source = 'learned' AND superseded_by IS NULL"
        ).fetchone()[0]
    assert n == 200


def test_add_and_supersede_touch_the_subject_only(big):
    calls = [
        "SELECT * FROM pymem.fact_add('user', 'u9', 'fact 9', 'p0')",  # exists: idempotent path
        "SELECT pymem.fact_forget('user', 'heavy', content => 'heavy fact 4000')",
        "SELECT * FROM pymem.fact_history('user', 'u11', 'p2', max_facts => 20)",
        "SELECT pymem.facts_forget('user', 'u13', 'p1')",
    ]
    for ns in facts_scans(plans_of(big, calls, repeat=6)):
        types = [n["Node Type"] for n in ns]
        assert "Seq Scan" not in types, types


def test_reads_at_a_point_in_time_read_one_subject_through_an_index(big):
    """facts_at (valid time, record time) reads the subject's versions, history included, through
    an index on the subject, and each successor by its key: never a scan of the table; and
    valid time keeps the default read on the partial newest-first index (the test above) even
    when the subject's rows carry one."""
    with psycopg.connect(big, autocommit=True) as c:
        c.execute("UPDATE pymem.facts SET valid_from = '2020-01-01' WHERE scope_id = 'u5' AND project_id = 'p2'")
    calls = ["SELECT * FROM pymem.facts_at('user', 'heavy', valid_at => now() - interval '1 day')",
             "SELECT * FROM pymem.facts_at('user', 'heavy', as_of => now() - interval '1 hour')",
             "SELECT * FROM pymem.facts_newest('user', 'u5', 'p2', max_facts => 10)"]
    scans = facts_scans(plans_of(big, calls))
    assert len(scans) == 8 * 3
    for ns in scans:
        types = [n["Node Type"] for n in ns]
        assert "Seq Scan" not in types, types
        # every read of facts is an index scan (or a bitmap of one) on the subject, or on a
        # successor's key
        reads = [n for n in ns if n.get("Relation Name") == "facts" or n["Node Type"] == "Bitmap Index Scan"]
        conds = [n.get("Index Cond", "") for n in reads if n["Node Type"] != "Bitmap Heap Scan"]
        assert any("scope_id" in c for c in conds), conds
        assert all("scope_id" in c or "superseded_by" in c for c in conds), conds


def test_lookups_by_content_key_read_one_entry(big):
    """A fact is found by (subject, content key) through facts_subject_content_key, in generic
    plans too: the newest-first index, which a generic plan once preferred, read every active
    fact of the subject (4,500 here) to find one, or none (0006_v0_2_0_memory)."""
    calls = [
        "SELECT * FROM pymem.fact_add('user', 'heavy', 'new heavy fact ' || clock_timestamp())",  # not there yet
        "SELECT * FROM pymem.fact_add('user', 'heavy', 'heavy fact 4999')",  # there: idempotent re-add
        "SELECT pymem.fact_forget('user', 'heavy', content => 'no such fact')",
        """SELECT * FROM pymem.fact_supersede('user', 'heavy', 'reworded ' || clock_timestamp(), old_content => (
               SELECT f.content FROM pymem.facts AS f WHERE f.project_id = '' AND f.scope = 'user'
                  AND f.scope_id = 'heavy' AND f.superseded_by IS NULL ORDER BY f.created_at DESC, f.id DESC LIMIT 1))""",
    ]
    lookups = [n for ns in facts_scans(plans_of(big, calls)) for n in ns
               if "content_key" in n.get("Index Cond", "") + n.get("Filter", "") and n.get("Relation Name") == "facts"]
    assert len(lookups) >= 8 * 4, len(lookups)
    for n in lookups:
        assert n.get("Index Name") == "facts_subject_content_key", (n["Node Type"], n.get("Index Name"), n.get("Filter"))
        assert n["Actual Rows"] * n["Actual Loops"] <= 1, (n.get("Index Name"), n["Actual Rows"])


@pytest.fixture(scope="module")
def unanalyzed(pg_server, template_db):
    """20,000 facts of 2,000 users in a database whose facts were never analyzed (autovacuum off
    for them): the planner has no statistics, as right after a first load."""
    from conftest import _janitor, dsn_for

    janitor = _janitor(pg_server, "pymem_unanalyzed_facts", template_dbname=template_db)
    janitor.drop()
    janitor.init()
    dsn = dsn_for(pg_server, "pymem_unanalyzed_facts")
    with psycopg.connect(dsn, autocommit=True) as c:
        for table in ("facts", "fact_embeddings", "fact_lexemes"):
            c.execute(f"ALTER TABLE pymem.{table} SET (autovacuum_enabled = false)")
        c.execute(
            """INSERT INTO pymem.facts (project_id, scope, scope_id, content, content_key, created_at)
               SELECT '', 'user', 'u' || (g % 2000), 'fact ' || g || ' about tea', pymem.fact_key('fact ' || g || ' about tea'),
                      now() - g * interval '1 second'
               FROM generate_series(1, 20000) AS g"""
        )
        # and 40 messages for each of those users, in one thread each (recall and the window read them)
        for table in ("threads", "messages", "message_embeddings"):
            c.execute(f"ALTER TABLE pymem.{table} SET (autovacuum_enabled = false)")
        c.execute("""INSERT INTO pymem.threads (project_id, user_id, thread_id, last_seq)
                     SELECT '', 'u' || g, 'default', 40 FROM generate_series(0, 1999) AS g""")
        c.execute("""INSERT INTO pymem.messages (project_id, user_id, thread_id, seq, role, content)
                     SELECT '', 'u' || (g % 2000), 'default', g / 2000 + 1, 'user', 'we talked about tea number ' || g
                     FROM generate_series(0, 79999) AS g""")
        never = c.execute("""SELECT bool_and(reltuples < 0 OR relpages = 0) FROM pg_class
                             WHERE oid IN ('pymem.facts'::regclass, 'pymem.messages'::regclass)""").fetchone()[0]
        assert never, "pymem.facts or pymem.messages has statistics already: the test needs tables never analyzed"
    yield dsn
    janitor.drop()


@pytest.mark.parametrize(
    "call",
    [
        "SELECT * FROM pymem.facts_newest('user', 'u7', max_facts => 50)",
        "SELECT * FROM pymem.fact_history('user', 'u7', max_facts => 50)",
        "SELECT * FROM pymem.facts_search('user', 'u7', k => 5, query_text => 'tea')",
        "SELECT * FROM pymem.context_read('u7', 'bot', query_text => 'tea')",
        "SELECT * FROM pymem.messages_recall('u7', query_text => 'tea number')",
        "SELECT * FROM pymem.window_read('u7')",
    ],
)
def test_one_subject_reads_take_its_index_before_the_first_analyze(unanalyzed, call):
    """Issue 28: with no statistics, a read of one subject must not walk the scope-wide index
    (facts_scope_active_newest, every subject's active facts) or a whole table."""
    tables = {"facts", "messages", "message_embeddings", "threads"}
    plans = [list(plan_nodes(p["Plan"])) for p in plans_of(unanalyzed, [call])]
    reads = [n for ns in plans for n in ns if n.get("Relation Name") in tables]
    assert reads, [[n["Node Type"] for n in ns] for ns in plans]
    for n in reads:
        assert n["Node Type"] != "Seq Scan", (n["Relation Name"], [(m["Node Type"], m.get("Index Name")) for m in reads])
        assert n.get("Index Name") != "facts_scope_active_newest", [m.get("Index Name") for m in reads]
