"""pymem on a Citus cluster (issue 18), first steps: the test cluster of .ci/citus works with
pgvector, a per-user query on a distributed table with a vector column is routed to one worker,
and `pymem migrate` on the coordinator distributes pymem (sql/citus.sql, docs/scaling-out.md).

These tests are marked ``citus`` and are skipped (with the reason) unless PYMEM_TEST_CITUS=1 is
set and the prerequisites of .ci/citus are present (the Citus source archive in the shared
vendor folder, gcc, make; tests/conftest.py citus_unavailable()). .ci/run sets it for its first
pass, so CI runs them.

    PYMEM_TEST_CITUS=1 pytest tests/sql/test_citus.py
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pymem
import pymem.browse
import pymem.lifecycle
import pymem.portability

pytestmark = pytest.mark.citus
_counter = itertools.count()


@pytest.fixture
def coordinator(citus_cluster):
    with psycopg.connect(citus_cluster.dsn, autocommit=True) as c:
        yield c


@pytest.fixture
def fresh_db(citus_cluster):
    """A new database with Citus and its workers: Citus keeps its metadata per database and
    needs the extension in a database of the same name on every node, so the database is
    created on each node and the workers are registered in it."""
    name = f"citus_t{next(_counter)}"
    nodes = [citus_cluster.dsn] + list(citus_cluster.worker_dsns)
    for node in nodes:
        with psycopg.connect(node, autocommit=True) as c:
            c.execute("SET citus.enable_create_database_propagation = off")
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        with psycopg.connect(make_conninfo(node, dbname=name), autocommit=True) as c:
            c.execute("CREATE EXTENSION citus")
    dsn = make_conninfo(citus_cluster.dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (citus_cluster.port,))
        for port in citus_cluster.worker_ports:
            c.execute("SELECT citus_add_node('127.0.0.1', %s)", (port,))
    try:
        yield dsn
    finally:
        for node in nodes:
            with psycopg.connect(node, autocommit=True) as c:
                c.execute("SET citus.enable_create_database_propagation = off")
                c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_cluster_has_two_workers_and_pgvector(coordinator):
    workers = coordinator.execute(
        "SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND isactive AND groupid <> 0").fetchone()[0]
    assert workers == 2
    coordinator.execute("CREATE EXTENSION IF NOT EXISTS vector")
    # CREATE EXTENSION propagates: every worker has pgvector, the same version
    versions = coordinator.execute(
        "SELECT result FROM run_command_on_workers("
        "$$SELECT extversion FROM pg_extension WHERE extname = 'vector'$$)").fetchall()
    local = coordinator.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
    assert [v for (v,) in versions] == [local, local]


def _citus_job(c: psycopg.Connection, query: str, params=()) -> dict:
    """The distributed job of ``query``'s plan (the Citus Adaptive custom scan, wherever it sits)."""
    def find(node: dict) -> dict | None:
        if node.get("Custom Plan Provider") == "Citus Adaptive":
            return node["Distributed Query"]["Job"]
        return next((j for j in map(find, node.get("Plans", [])) if j), None)

    job = find(c.execute("EXPLAIN (FORMAT JSON, COSTS OFF) " + query, params).fetchone()[0][0]["Plan"])
    assert job is not None, f"no Citus plan for {query}"
    return job


def test_per_user_vector_query_is_one_task_on_one_worker(coordinator):
    c = coordinator
    c.execute("CREATE EXTENSION IF NOT EXISTS vector")
    c.execute("DROP TABLE IF EXISTS citus_probe")
    c.execute("""CREATE TABLE citus_probe (
                     user_id text NOT NULL, id bigint NOT NULL, embedding vector(3) NOT NULL,
                     PRIMARY KEY (user_id, id))""")
    c.execute("SELECT create_distributed_table('citus_probe', 'user_id')")
    c.execute("""INSERT INTO citus_probe
                 SELECT 'u' || (i % 20), i, ARRAY[i % 7, i % 5, 1]::real[]::vector
                 FROM generate_series(1, 400) AS i""")
    # the shards are spread over both workers
    nodes, shards = c.execute("""SELECT count(DISTINCT nodeport), count(*) FROM citus_shards
                                 WHERE table_name = 'citus_probe'::regclass""").fetchone()
    assert nodes == 2

    def placement_port(c, user):  # the worker that holds the user's shard
        return c.execute("""SELECT nodeport FROM citus_shards
                            WHERE shardid = get_shard_id_for_distribution_column('citus_probe', %s::text)""",
                         (user,)).fetchone()[0]

    query = """SELECT id FROM citus_probe WHERE user_id = %s
               ORDER BY embedding <=> '[1,1,1]', id LIMIT 3"""
    job = _citus_job(c, query, ("u3",))
    assert job["Task Count"] == 1  # a router plan: one shard, one worker
    (task,) = job["Tasks"]
    assert f"port={placement_port(c, 'u3')} " in task["Node"] + " "
    # the same query for all users fans out to every shard: the checks above can fail
    fan_out = _citus_job(c, "SELECT id FROM citus_probe ORDER BY embedding <=> '[1,1,1]', id LIMIT 3")
    assert fan_out["Task Count"] == shards > 1

    got = [r[0] for r in c.execute(query, ("u3",)).fetchall()]
    # the answer equals the one computed on the coordinator from all rows
    want = [r[0] for r in c.execute(
        """SELECT id FROM (SELECT * FROM citus_probe OFFSET 0) AS p WHERE user_id = 'u3'
           ORDER BY embedding <=> '[1,1,1]', id LIMIT 3""").fetchall()]
    assert got == want and len(got) == 3
    c.execute("DROP TABLE citus_probe")


@pytest.fixture
def pymem_cluster(fresh_db):
    """fresh_db migrated by pymem (distributed), with a login role ``app`` granted pymem_app."""
    pymem.migrate(fresh_db)
    role = f"citus_app{next(_counter)}"
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))  # Citus creates it on the workers
        c.execute(sql.SQL("GRANT pymem_app TO {}").format(sql.Identifier(role)))
    try:
        yield fresh_db, make_conninfo(fresh_db, user=role), role
    finally:
        with psycopg.connect(fresh_db, autocommit=True) as c:
            c.execute("DELETE FROM pymem.tenant_roles")
            c.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(sql.Identifier(role), sql.Identifier(role)))


def _worker_of(c: psycopg.Connection, table: str, key: str) -> int:
    return c.execute("""SELECT nodeport FROM citus_shards
                        WHERE shardid = get_shard_id_for_distribution_column(%s, %s::text)""",
                     (table, key)).fetchone()[0]


def _users_on_both_workers(c: psycopg.Connection) -> list[str]:
    """Two user ids whose shards are on different workers (the tests must cross workers)."""
    seen: dict[int, str] = {}
    for i in range(50):
        seen.setdefault(_worker_of(c, "pymem.threads", f"user{i}"), f"user{i}")
        if len(seen) == 2:
            return list(seen.values())
    raise AssertionError("every user landed on one worker")


def test_migrate_distributes_pymem_idempotently_and_check_knows(fresh_db):
    # Citus present, nothing migrated: --check says so
    assert pymem.migrations.check(fresh_db)
    pymem.migrate(fresh_db)
    with psycopg.connect(fresh_db, autocommit=True) as c:
        placed = dict(c.execute("""SELECT logicalrelid::text, CASE partmethod WHEN 'n' THEN 'reference'
                                          ELSE column_to_column_name(logicalrelid, partkey) END
                                   FROM pg_dist_partition WHERE logicalrelid::text LIKE 'pymem.%'""").fetchall())
        assert placed["pymem.tenant_roles"] == placed["pymem.embedders"] == placed["pymem.config"] == "reference"
        assert placed["pymem.text_search"] == "reference"
        # agent and project facts are copied into reference tables for every worker's context reads
        assert {placed[t] for t in ("pymem.shared_facts", "pymem.shared_fact_embeddings",
                                    "pymem.shared_fact_lexemes")} == {"reference"}
        assert {placed[t] for t in ("pymem.threads", "pymem.messages", "pymem.message_embeddings",
                                    "pymem.message_lexemes")} == {"user_id"}
        assert {placed[t] for t in ("pymem.facts", "pymem.fact_embeddings", "pymem.fact_lexemes",
                                    "pymem.subject_locks")} == {"scope_id"}
        assert {placed[t] for t in ("pymem.stores", "pymem.store_entries", "pymem.store_vectors")} == {"store_key"}
        # one colocation group for every distributed table: a user's thread and facts share a worker
        groups = c.execute("""SELECT count(DISTINCT colocationid) FROM pg_dist_partition
                              WHERE logicalrelid::text LIKE 'pymem.%' AND partmethod = 'h'""").fetchone()[0]
        assert groups == 1
        delegated = dict(c.execute("""SELECT objid::regprocedure::text, distribution_argument_index
                                      FROM pg_dist_object WHERE distribution_argument_index IS NOT NULL""").fetchall())
        ctx = next(k for k in delegated if k.startswith("pymem.context_read("))
        assert delegated[ctx] == 0  # by user_id
        fact_add = next(k for k in delegated if k.startswith("pymem.fact_add("))
        assert delegated[fact_add] == 1  # by scope_id
        assert delegated["pymem.store_read(text,text,text)"] == 0
        # policies without the sub-select Citus refuses
        assert c.execute("SELECT count(*) FROM pg_policies WHERE schemaname = 'pymem' AND qual LIKE '%SELECT%'").fetchone()[0] == 0
    assert pymem.migrations.check(fresh_db) == []
    # current, but the owner role logs in without a password (citus.sql), and the cluster trusts it
    hazards = pymem.migrations.hazards(fresh_db)
    assert any("can log in (LOGIN) without a password" in h for h in hazards), hazards
    assert any("pg_hba.conf trusts the owner role" in h for h in hazards), hazards
    again = pymem.migrate(fresh_db)  # idempotent: nothing to apply, placement unchanged
    assert again.applied == [] and pymem.migrations.check(fresh_db) == []
    # a function whose delegation was lost is a problem --check names
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute("SELECT create_distributed_function('pymem.store_read(text,text,text)')")  # no argument
    assert any("store_read" in p for p in pymem.migrations.check(fresh_db))
    pymem.migrate(fresh_db)
    assert pymem.migrations.check(fresh_db) == []


def test_roles_made_by_a_plain_database_on_the_coordinators_server_reach_the_workers(citus_cluster, fresh_db):
    """Issue 57: a plain pymem database migrated first on the coordinator's server creates the
    pymem roles there only (no Citus in that database, nothing propagated); the Citus database's
    migrate then finds them on the coordinator and must still create them on every worker, with
    the coordinator's attributes, or a worker refuses the first statement that names them."""
    n = next(_counter)
    roles = {k: f"citus57_{k.split('_')[0]}{n}" for k in ("owner_role", "app_role", "reader_role")}
    plain = f"plain57_{n}"
    nodes = [citus_cluster.dsn, *citus_cluster.worker_dsns]
    with psycopg.connect(citus_cluster.dsn, autocommit=True) as c:
        c.execute("SET citus.enable_create_database_propagation = off")
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(plain)))
    try:
        pymem.migrate(make_conninfo(citus_cluster.dsn, dbname=plain), roles=roles)  # no citus extension there
        with psycopg.connect(citus_cluster.dsn, autocommit=True) as c:
            c.execute("ALTER ROLE {} CONNECTION LIMIT 7".format(roles["reader_role"]))  # an attribute to copy
        for w in citus_cluster.worker_dsns:  # the fault's precondition: on the coordinator only
            with psycopg.connect(w, autocommit=True) as c:
                assert c.execute("SELECT count(*) FROM pg_roles WHERE rolname = ANY(%s)",
                                 (list(roles.values()),)).fetchone()[0] == 0
        pymem.migrate(fresh_db, roles=roles)
        assert pymem.migrations.check(fresh_db) == []
        pymem.migrate(fresh_db, roles=roles)  # idempotent
        attrs = "SELECT rolname, rolcanlogin, rolinherit, rolcreatedb, rolcreaterole, rolconnlimit FROM pg_roles " \
                "WHERE rolname = ANY(%s) ORDER BY 1"
        with psycopg.connect(citus_cluster.dsn) as c:
            want = c.execute(attrs, (list(roles.values()),)).fetchall()
        assert len(want) == 3 and (roles["reader_role"], False, True, False, False, 7) in want
        for w in citus_cluster.worker_dsns:
            with psycopg.connect(w) as c:
                assert c.execute(attrs, (list(roles.values()),)).fetchall() == want
        with psycopg.connect(fresh_db, autocommit=True) as c:  # a call delegated to a worker
            c.execute("SELECT pymem.fact_add('user', 'u57', 'likes tea', 'p57')")
            assert c.execute("SELECT content FROM pymem.facts_newest('user', 'u57', 'p57', 5)").fetchall() == [("likes tea",)]
    finally:  # the databases the roles own objects in (fresh_db's teardown finds it gone), then the roles
        for node in nodes:
            with psycopg.connect(node, autocommit=True) as c:
                c.execute("SET citus.enable_create_database_propagation = off")
                for db in (plain, psycopg.conninfo.conninfo_to_dict(fresh_db)["dbname"]):
                    c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
        for node in nodes:
            with psycopg.connect(node, autocommit=True) as c:
                c.execute("SET citus.enable_create_role_propagation = off")
                for role in roles.values():
                    c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_facts_conversations_context_and_stores_on_two_workers(pymem_cluster):
    """A representative subset of the facts, conversation, context and store behaviour, as an
    application role, for users whose shards are on different workers."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
    with psycopg.connect(app, autocommit=True) as c:
        for u in users:
            c.execute("SELECT pymem.fact_add('user', %s, %s, 'p1')", (u, f"{u} lives in Bergen"))
            c.execute("SELECT pymem.fact_add('user', %s, %s, 'p1')", (u, f"{u} likes tea"))
            c.execute("SELECT pymem.message_add(user_id => %s, role => 'user', content => 'I moved to Bergen', project_id => 'p1')", (u,))
            c.execute("SELECT pymem.message_add(user_id => %s, role => 'assistant', content => 'Noted.', project_id => 'p1')", (u,))
            c.execute("SELECT pymem.store_open(%s, 'p1', true)", (f"notes-{u}",))
            c.execute("SELECT pymem.store_write(%s, 'todo', %s, project_id => 'p1')", (f"notes-{u}", f"call {u}"))
        for u in users:
            facts = [r[0] for r in c.execute("SELECT content FROM pymem.facts_newest('user', %s, 'p1', 10)", (u,))]
            assert sorted(facts) == sorted([f"{u} lives in Bergen", f"{u} likes tea"])
            window = c.execute("SELECT seq, role, content FROM pymem.window_read(user_id => %s, project_id => 'p1')",
                               (u,)).fetchall()
            assert window == [(1, "user", "I moved to Bergen"), (2, "assistant", "Noted.")]
            ctx = c.execute("SELECT pymem.context_read(%s, NULL, 'p1')", (u,)).fetchone()[0]
            assert [m["content"] for m in ctx["window"]] == ["I moved to Bergen", "Noted."]
            assert sorted(f["content"] for f in ctx["user_facts"]) == sorted(facts)
            assert c.execute("SELECT content, version FROM pymem.store_read(%s, 'todo', 'p1')",
                             (f"notes-{u}",)).fetchone() == (f"call {u}", 1)
        # the same reads from another project: nothing
        assert c.execute("SELECT count(*) FROM pymem.facts_newest('user', %s, 'p2', 10)", (users[0],)).fetchone()[0] == 0
    with pymem.Database(pymem.Settings(dsn=app)) as db:  # the Python layer: a turn and the user's facts
        mem = pymem.Memory(db=db, agent_id="bot", user_id=users[1], embedder=pymem.HashEmbedder(64), project_id="p1")
        mem.persist("Prefers email")
        mem.record("What do you know?", "Some things.")
        assert "Prefers email" in [f.content for f in mem.retrieve()]
        assert [m.content for m in mem.window()][-2:] == ["What do you know?", "Some things."]


def test_one_users_context_read_is_one_task_on_the_users_worker(pymem_cluster):
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
        ports = {u: _worker_of(c, "pymem.threads", u) for u in users}
    with psycopg.connect(app, autocommit=True) as c:
        for u in users:
            c.execute("SELECT pymem.message_add(user_id => %s, role => 'user', content => 'hi', project_id => 'p1')", (u,))
            job = _citus_job(c, "SELECT pymem.context_read(%s, NULL, 'p1')", (u,))
            assert job["Task Count"] == 1
            (task,) = job["Tasks"]
            assert f"port={ports[u]} " in task["Node"] + " "
        assert len(set(ports.values())) == 2  # the two calls went to different workers


def test_a_bound_role_sees_nothing_of_another_project_on_the_cluster(pymem_cluster):
    admin, app, role = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
        c.execute("SELECT pymem.tenant_bind(%s, 'pa')", (role,))
        for u in users:  # project B's data, written by the administrator
            c.execute("SELECT pymem.fact_add('user', %s, 'secret of B', 'pb')", (u,))
            c.execute("SELECT pymem.message_add(user_id => %s, role => 'user', content => 'secret of B', project_id => 'pb')", (u,))
    with psycopg.connect(app, autocommit=True) as c:
        for u in users:
            c.execute("SELECT pymem.fact_add('user', %s, 'fact of A', 'pa')", (u,))
            assert [r[0] for r in c.execute("SELECT content FROM pymem.facts_newest('user', %s, 'pa', 10)", (u,))] == ["fact of A"]
            for call in ("SELECT * FROM pymem.facts_newest('user', %s, 'pb', 10)",
                         "SELECT pymem.context_read(%s, 'bot', 'pb')",
                         "SELECT * FROM pymem.window_read(user_id => %s, project_id => 'pb')"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="may not serve project 'pb'"):
                    c.execute(call, (u,))
        # no table privileges at all, even naming project B as the tenant
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SELECT count(*) FROM pymem.facts")


def test_psql_migrate_sql_distributes_the_same(fresh_db, citus_cluster):
    """`psql -f sql/migrate.sql` on a Citus database places and delegates like `pymem migrate`."""
    import subprocess
    from pathlib import Path

    env_file = dict(line.split("=", 1) for line in (citus_cluster.dir / "cluster.env").read_text().splitlines())
    sql_dir = Path(__file__).resolve().parents[2] / "sql"
    out = subprocess.run([str(Path(env_file["BINDIR"]) / "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", fresh_db,
                          "-f", "migrate.sql"], cwd=sql_dir, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert pymem.migrations.check(fresh_db) == []
    with psycopg.connect(fresh_db, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'pymem.%'").fetchone()[0] == 31
        assert c.execute("SELECT count(*) FROM pg_dist_object WHERE distribution_argument_index IS NOT NULL").fetchone()[0] > 40


def test_undelegated_reads_raise_rather_than_answer_nothing(pymem_cluster):
    """A per-user read Citus does not delegate (an expression around the call) reaches the user's
    worker without the tenant: it raises 0A000 instead of returning no rows (docs/scaling-out.md,
    not supported)."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
    with psycopg.connect(app, autocommit=True) as c:
        for u in users:
            c.execute("SELECT pymem.fact_add('user', %s, 'likes tea', 'p1')", (u,))
            assert c.execute("SELECT pymem.context_read(%s, NULL, 'p1')", (u,)).fetchone()[0]["user_facts"][0]["content"] \
                == "likes tea"
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="without its tenant"):
                c.execute("SELECT pymem.context_read(%s, NULL, 'p1') -> 'user_facts'", (u,))


def test_the_scaling_out_pages_transaction_example_runs_on_the_cluster(pymem_cluster):
    """docs/scaling-out.md's SQL block (a project-wide call inside a transaction) on the cluster,
    as the app role: it answers with the project's users, where the same call in autocommit
    raises 0A000."""
    from conftest import blocks

    (block,) = [b for b in blocks("sql", "Scaling out: pymem on a Citus cluster") if b.lstrip().startswith("BEGIN")]
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
    with psycopg.connect(app, autocommit=True) as c:
        for u in users:
            c.execute("SELECT pymem.fact_add('user', %s, 'likes tea', 'acme')", (u,))
            c.execute("SELECT pymem.message_add(user_id => %s, content => 'hello there', role => 'user', project_id => 'acme')", (u,))
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="without its tenant"):
            c.execute("SELECT * FROM pymem.browse_users(project_id => 'acme')").fetchall()
        statements = [x.strip() for x in block.split(";") if x.strip()]
        assert statements[0] == "BEGIN" and statements[-1] == "COMMIT"
        rows = []
        for statement in statements:
            cur = c.execute(statement)
            if cur.description:
                rows = cur.fetchall()
        assert {r[0] for r in rows} >= set(users), rows
        for u in users:
            c.execute("SELECT pymem.facts_forget('user', %s, 'acme')", (u,))
            c.execute("SELECT pymem.conversation_forget(%s, '*', 'acme')", (u,))


def _agent_and_users(c: psycopg.Connection) -> tuple[str, str, str]:
    """The agent 'bot', a user on its worker and a user on the other one."""
    users = _users_on_both_workers(c)
    agent_port = _worker_of(c, "pymem.facts", "bot")
    near, far = sorted(users, key=lambda u: _worker_of(c, "pymem.threads", u) != agent_port)
    return "bot", near, far


def test_agent_and_project_facts_reach_users_on_every_worker(pymem_cluster):
    """Agent and project facts live on the agent's (project's) worker; every user's context read
    gets them from their copies in reference tables, on the user's own worker: kept in step by
    every fact writer (add, vectors, supersede, forget), ranked for a query like a user's facts."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        agent, near, far = _agent_and_users(c)
    with psycopg.connect(app, autocommit=True) as c:
        def agent_facts(user, **kw):
            args = "".join(f", {k} => %({k})s" for k in kw)
            return [f["content"] for f in c.execute(f"SELECT pymem.context_read(%(u)s, %(a)s, 'p1'{args})",
                                                    {"u": user, "a": agent, **kw}).fetchone()[0]["agent_facts"]]

        c.execute("SELECT pymem.fact_add('agent', %s, 'Support hours are 9 to 5 CET', 'p1')", (agent,))
        c.execute("SELECT pymem.fact_add('agent', %s, 'Closed on Sundays', 'p1')", (agent,))
        for u in (near, far):
            c.execute("SELECT pymem.fact_add('user', %s, 'likes tea', 'p1')", (u,))
            assert sorted(agent_facts(u)) == ["Closed on Sundays", "Support hours are 9 to 5 CET"]
        c.execute("SELECT * FROM pymem.fact_supersede('agent', %s, 'Support hours are 8 to 4 CET', "
                  "old_content => 'Support hours are 9 to 5 CET', project_id => 'p1')", (agent,))
        c.execute("SELECT pymem.fact_forget('agent', %s, content => 'Closed on Sundays', project_id => 'p1')", (agent,))
        for u in (near, far):
            assert agent_facts(u) == ["Support hours are 8 to 4 CET"]
        # more facts than max_facts and a query: the ones that rank best for it, on both workers
        for i in range(4):
            c.execute("SELECT pymem.fact_add('agent', %s, %s, 'p1')", (agent, f"Rule {i}: be polite"))
        for u in (near, far):
            assert agent_facts(u, max_facts=1, query_text="support hours") == ["Support hours are 8 to 4 CET"]
            assert len(agent_facts(u)) == 5
        c.execute("SELECT pymem.facts_forget('agent', %s, 'p1')", (agent,))
        assert agent_facts(far) == []
        # project facts: the same copies
        c.execute("SELECT pymem.fact_add('project', 'p1', 'Acme sells anvils', 'p1')")
        assert [f[0] for f in c.execute("SELECT content FROM pymem.facts_newest('project', 'p1', 'p1')")] == ["Acme sells anvils"]
    with psycopg.connect(admin, autocommit=True) as c:  # the copies hold exactly the originals
        c.execute("SET pymem.tenant = 'p:p1'")
        assert c.execute("SELECT scope, scope_id, content FROM pymem.shared_facts WHERE superseded_by IS NULL").fetchall() \
            == [("project", "p1", "Acme sells anvils")]


COPIES = {"pymem.tenant_allowed(text)", "pymem._tenant_allowed_bound(text)", "pymem._text_search_config(text)",
          "pymem._embedder_dimension(text,text)", "pymem._fact_lexemes_add()", "pymem._message_lexemes_add()"}
PROBE_NODE = "pymem.migration_citus_probe_node(text,integer)"  # forces its own generic plans


def _plan_cache_modes(dsn: str) -> dict[str, str]:
    """Each PL/pgSQL function of pymem on the node of ``dsn``: its plan_cache_mode setting ('' if none)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        return dict(c.execute("""
            SELECT p.oid::regprocedure::text,
                   coalesce((SELECT x FROM unnest(p.proconfig) AS x WHERE x LIKE 'plan_cache_mode=%%'), '')
              FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
             WHERE p.pronamespace = 'pymem'::regnamespace AND l.lanname = 'plpgsql' AND p.prokind = 'f'""").fetchall())


def _assert_plans_every_call(modes: dict[str, str]) -> None:
    """citus.sql step 7 applied: every function plans per call, but the readers of the node's own
    reference-table copies and the lexeme triggers (auto) and the probe (its own generic plans)."""
    assert {f for f, m in modes.items() if m == "plan_cache_mode=auto"} == COPIES, modes
    assert {m for f, m in modes.items() if f not in COPIES | {PROBE_NODE}} == {"plan_cache_mode=force_custom_plan"}, modes


def _assert_plain(modes: dict[str, str]) -> None:
    """citus.sql step 7 skipped: the functions as the API files declare them."""
    assert {m for f, m in modes.items() if f != PROBE_NODE} == {""}, modes


def test_the_ci_build_is_probed_as_fixed_and_step_7_is_skipped(citus_cluster, pymem_cluster):
    """.ci/citus builds 14.0.1 with the fix of its local plan cache (citusdata/citus#8824), and it
    still reports 14.0.1: pymem tells it by the cache's behaviour (bootstrap.sql
    migration_citus_probe: on each node that holds a shard, a static single-shard read planned
    generically 40 times; its CachedPlan memory does not grow). pymem_cluster migrated a fresh
    cluster once: the probe before the API refresh had nothing to probe (planned every call to be
    safe), the one after it found the fix, and step 7 was undone, on the coordinator and on the
    workers."""
    admin, _, _ = pymem_cluster
    dbname = psycopg.conninfo.conninfo_to_dict(admin)["dbname"]
    with psycopg.connect(admin, autocommit=True) as c:
        version = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'").fetchone()[0]
        assert version.startswith("14.0")  # the version alone would say: leaks
        probe = c.execute("SELECT pymem.migration_citus_probe()").fetchone()[0]
        assert probe.startswith("fixed: no growth over 35 generic executions on "), probe
        assert probe.count("127.0.0.1:") == 2, probe  # both workers probed
        decided, reason = c.execute("SELECT * FROM pymem.migration_citus_plan_every_call()").fetchone()
        assert decided is False and "probed: fixed" in reason, reason
        # each worker, with a key whose shard it holds: no growth
        ports = c.execute("""SELECT nodeport, min(k) FROM generate_series(1, 60) AS i(n),
                                    LATERAL (SELECT 'k' || i.n AS k) AS x
                               JOIN citus_shards AS s ON s.shardid = get_shard_id_for_distribution_column('pymem.threads', x.k)
                              GROUP BY nodeport""").fetchall()
        assert len(ports) == 2
    for port, key in ports:
        with psycopg.connect(make_conninfo(admin, port=str(port)), autocommit=True) as w:
            assert w.execute("SELECT pymem.migration_citus_probe_node(%s, 200)", (key,)).fetchone()[0] == 0
    _assert_plain(_plan_cache_modes(admin))
    for w in citus_cluster.worker_dsns:
        _assert_plain(_plan_cache_modes(make_conninfo(w, dbname=dbname)))
    # a second migrate probes before its refresh and keeps it so
    pymem.migrate(admin)
    _assert_plain(_plan_cache_modes(admin))


def test_the_operator_setting_plans_every_call_or_not(citus_cluster, fresh_db):
    """pymem.citus_plan_every_call (a connection option of migrate, PGOPTIONS, or ALTER DATABASE ...
    SET) overrides the probe: on applies step 7 on the fixed build CI has (the leak branch stays
    tested), off and auto undo it; anything else is refused."""
    dbname = psycopg.conninfo.conninfo_to_dict(fresh_db)["dbname"]
    worker = make_conninfo(citus_cluster.worker_dsns[0], dbname=dbname)
    pymem.migrate(make_conninfo(fresh_db, options="-c pymem.citus_plan_every_call=on"))
    _assert_plans_every_call(_plan_cache_modes(fresh_db))
    _assert_plans_every_call(_plan_cache_modes(worker))  # ALTER FUNCTION reached the workers
    assert pymem.migrations.check(fresh_db) == []
    pymem.migrate(make_conninfo(fresh_db, options="-c pymem.citus_plan_every_call=auto"))  # the probe: fixed
    _assert_plain(_plan_cache_modes(fresh_db))
    _assert_plain(_plan_cache_modes(worker))
    with psycopg.connect(fresh_db, autocommit=True) as c:
        c.execute(sql.SQL("ALTER DATABASE {} SET pymem.citus_plan_every_call = 'on'").format(sql.Identifier(dbname)))
    try:
        pymem.migrate(fresh_db)
        _assert_plans_every_call(_plan_cache_modes(fresh_db))
        with psycopg.connect(fresh_db, autocommit=True) as c:
            decided, reason = c.execute("SELECT * FROM pymem.migration_citus_plan_every_call()").fetchone()
            assert decided is True and "operator" in reason
        pymem.migrate(make_conninfo(fresh_db, options="-c pymem.citus_plan_every_call=off"))  # the session's wins
        _assert_plain(_plan_cache_modes(fresh_db))
        with pytest.raises(pymem.ValidationError, match="must be on, off or auto"):
            pymem.migrate(make_conninfo(fresh_db, options="-c pymem.citus_plan_every_call=maybe"))
    finally:
        with psycopg.connect(fresh_db, autocommit=True) as c:
            c.execute(sql.SQL("ALTER DATABASE {} RESET pymem.citus_plan_every_call").format(sql.Identifier(dbname)))
    _assert_plain(_plan_cache_modes(fresh_db))  # the refused migrate changed nothing


def _private_kb(pid: int) -> int:
    """A backend's private memory (RssAnon: not the shared buffers it touched), in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError(f"no RssAnon for {pid}")


def test_a_worker_does_not_grow_with_calls(citus_cluster, pymem_cluster):
    """Citus before 13.5 / 14.3, unpatched (the vendored 14.0.1 as released), adds a local plan to
    its cache on every execution of a generic plan whose shard is on the node, and never frees it
    (citusdata/citus#8824): a worker backend grew by ~300 kB per context_read, 913 MB after 3,000.
    On such a build citus.sql step 7 makes pymem's PL/pgSQL functions plan per call; the build CI
    runs carries the fix, and there pymem keeps its generic plans (the probe says fixed,
    test above). Either way: 2,000 calls (1,000 turn_record and 1,000 context_read) through one
    coordinator connection leave the worker backends that served them within a few MB (the
    leak would add ~300 MB)."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        version = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'citus'").fetchone()[0]
        c.execute("SELECT pymem.migration_citus_probe()")
        every_call = c.execute("SELECT plan_every_call FROM pymem.migration_citus_plan_every_call()").fetchone()[0]
    modes = _plan_cache_modes(admin)
    if every_call:
        _assert_plans_every_call(modes)
    else:  # a fixed Citus: the functions as the API files declare them
        _assert_plain(modes)
    dbname = psycopg.conninfo.conninfo_to_dict(admin)["dbname"]
    workers = [make_conninfo(w, dbname=dbname) for w in citus_cluster.worker_dsns]

    def backends() -> dict[int, int]:
        out = {}
        for w in workers:
            with psycopg.connect(w, autocommit=True) as c:
                for (pid,) in c.execute("""SELECT pid FROM pg_stat_activity WHERE datname = current_database()
                                              AND backend_type = 'client backend' AND pid <> pg_backend_pid()"""):
                    out[pid] = _private_kb(pid)
        return out

    with psycopg.connect(app, autocommit=True) as c:
        def calls(n: int) -> None:
            for i in range(n):
                c.execute("SELECT * FROM pymem.turn_record(%s, %s, 'noted', project_id => 'p1')", ("grow", f"turn {i} about gardens"))
                c.execute("SELECT pymem.context_read(%s, 'bot', 'p1', query_text => 'gardens')", ("grow",))

        calls(30)  # connections opened, catalogs and plans cached
        before = backends()
        calls(1000)
        after = backends()
    kept = set(before) & set(after)
    assert kept, (before, after)  # the coordinator kept its connection to the user's worker
    growth_mb = max(after[p] - before[p] for p in kept) / 1024
    print(f"citus {version}, plan every call: {every_call}: worker backend growth over 2,000 calls: {growth_mb:.1f} MB")
    assert growth_mb < 25, (version, every_call, growth_mb, before, after)


def test_facts_at_a_point_in_time_on_the_cluster(pymem_cluster):
    """Valid time (0006_v0_2_0_memory) on the cluster: a user's and the agent's facts (the agent's
    from the copies on the user's worker) as they held in 2020 and as they hold now, one
    delegated call each, for users on both workers; a restatement and a supersede with valid_from
    keep their history there too."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        agent, near, far = _agent_and_users(c)
    with psycopg.connect(app, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('agent', %s, 'Open on Sundays', 'p1', write => pymem.fact_write(valid_to => '2022-01-01'))", (agent,))
        c.execute("SELECT pymem.fact_add('agent', %s, 'Open every day', 'p1', write => pymem.fact_write(valid_to => '2030-01-01'))", (agent,))
        c.execute("SELECT pymem.fact_add('agent', %s, 'Open every day', 'p1', write => pymem.fact_write(valid_from => '2022-01-01'))", (agent,))
        for u in (near, far):
            c.execute("SELECT pymem.fact_add('user', %s, 'Lives in Oslo', 'p1', write => pymem.fact_write(valid_from => '2019-08-01', created_at => '2019-08-02') "
                      ")", (u,))
            c.execute("SELECT pymem.fact_supersede('user', %s, 'Lives in Berlin', old_content => 'Lives in Oslo', "
                      "project_id => 'p1', write => pymem.fact_write(valid_from => '2024-05-01'))", (u,))
            then = c.execute("SELECT pymem.context_read(%s, %s, 'p1', valid_at => '2020-06-01')", (u, agent)).fetchone()[0]
            now = c.execute("SELECT pymem.context_read(%s, %s, 'p1')", (u, agent)).fetchone()[0]
            assert [f["content"] for f in then["user_facts"]] == ["Lives in Oslo"]
            assert [f["content"] for f in then["agent_facts"]] == ["Open on Sundays"]
            assert [f["content"] for f in now["user_facts"]] == ["Lives in Berlin"]
            assert [f["content"] for f in now["agent_facts"]] == ["Open every day"]
            assert [r[0] for r in c.execute("SELECT content FROM pymem.facts_at('user', %s, valid_at => '2020-06-01', "
                                            "project_id => 'p1')", (u,))] == ["Lives in Oslo"]
        history = c.execute("SELECT id, content, valid_from FROM pymem.fact_history('agent', %s, 'p1')", (agent,)).fetchall()
        assert [r[2] for r in sorted(history) if r[1] == "Open every day"] == [None, datetime(2022, 1, 1, tzinfo=timezone.utc)]


def test_agent_fact_writes_copy_only_the_facts_they_change(pymem_cluster):
    """Each write of an agent's facts refreshes only the copies of the facts it changed (the old
    sync re-made every copy of the agent's facts: a write cost grew with the agent), a re-add
    touches none; after each step the copies equal the originals, vectors and lexemes included."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as a, psycopg.connect(app, autocommit=True) as c:
        def copies() -> dict[int, str]:  # fact id -> the transaction that wrote its copy
            return dict(a.execute("SELECT id, xmin::text FROM pymem.shared_facts WHERE scope_id = 'faq-bot'").fetchall())

        def same_as_originals() -> None:
            for table, key in (("facts", "id"), ("fact_embeddings", "fact_id"), ("fact_lexemes", "fact_id")):
                original = a.execute(f"SELECT t::text FROM pymem.{table} AS t WHERE scope_id = 'faq-bot' ORDER BY {key}").fetchall()
                copy = a.execute(f"SELECT t::text FROM pymem.shared_{table} AS t WHERE scope_id = 'faq-bot' ORDER BY {key}").fetchall()
                assert copy == original, table

        c.execute("""SELECT pymem.facts_add_many('agent', array_fill('faq-bot'::text, ARRAY[30]),
                                                 ARRAY(SELECT 'Answer ' || i FROM generate_series(1, 30) AS i), 'p1')""")
        same_as_originals()
        before = copies()
        assert len(before) == 30
        new = c.execute("SELECT id FROM pymem.fact_add('agent', 'faq-bot', 'Answer 31', 'p1')").fetchone()[0]
        after = copies()
        assert {k: v for k, v in after.items() if k != new} == before and new in after
        c.execute("SELECT pymem.fact_add('agent', 'faq-bot', 'Answer 31', 'p1')")  # a re-add: no copy written
        assert copies() == after
        old = next(r[0] for r in c.execute("SELECT id, content FROM pymem.facts_newest('agent', 'faq-bot', 'p1')")
                   if r[1] == "Answer 5")
        succ = c.execute("SELECT id FROM pymem.fact_supersede('agent', 'faq-bot', 'Answer 5, revised', id => %s, "
                         "project_id => 'p1')", (old,)).fetchone()[0]
        changed = copies()
        assert {k for k in changed if changed[k] != after.get(k)} == {old, succ}
        same_as_originals()
        c.execute("SELECT pymem.fact_embeddings_put('agent', 'faq-bot', 'e', ARRAY[%s, %s]::bigint[], "
                  "ARRAY['[1,0,0]', '[0,1,0]']::vector[], 'p1')", (succ, new))
        embedded = copies()
        assert {k for k in embedded if embedded[k] != changed[k]} == {succ, new}
        same_as_originals()
        c.execute("SELECT pymem.fact_forget('agent', 'faq-bot', id => %s, project_id => 'p1')", (succ,))
        same_as_originals()
        assert old not in copies() and succ not in copies()
        # a batch for users on both workers (each element one routed fact_add on Citus)
        near, far = _users_on_both_workers(a)
        rows = c.execute("SELECT * FROM pymem.facts_add_many('user', ARRAY[%s, %s, %s], "
                         "ARRAY['likes tea', 'likes tea', 'likes tea'], 'p1')", (near, far, near)).fetchall()
        assert [r[2] for r in rows] == [True, True, False] and rows[0][1] == rows[2][1]
        for u in (near, far):
            assert [r[0] for r in c.execute("SELECT content FROM pymem.facts_newest('user', %s, 'p1')", (u,))] == ["likes tea"]


def test_every_write_path_of_agent_facts_keeps_the_copies_equal_to_the_originals(pymem_cluster):
    """Issue 55, item 3: the copies follow the writes through citus.sql's derived bodies, also
    where a write changes other facts than the one it returns: a re-add that frees an expired
    fact (_fact_expired_free), a restatement (_fact_restate), a supersede whose shorter expiry
    reaches the history (_fact_history_expire), the learned cap (_learned_cap), a re-index."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as a, psycopg.connect(app, autocommit=True) as c:
        def same_as_originals(step: str) -> None:
            for table, key in (("facts", "id"), ("fact_embeddings", "fact_id"), ("fact_lexemes", "fact_id")):
                original = a.execute(f"SELECT t::text FROM pymem.{table} AS t WHERE scope_id = 'paths-bot' ORDER BY {key}").fetchall()
                copy = a.execute(f"SELECT t::text FROM pymem.shared_{table} AS t WHERE scope_id = 'paths-bot' ORDER BY {key}").fetchall()
                assert copy == original and (original or table != "facts"), (step, table)

        old = c.execute("SELECT id FROM pymem.fact_add('agent', 'paths-bot', 'Sale ends Friday', 'p1', write => pymem.fact_write(ttl => '1 day'))").fetchone()[0]
        a.execute("UPDATE pymem.facts SET expires_at = now() - interval '1 second' WHERE id = %s", (old,))
        a.execute("UPDATE pymem.shared_facts SET expires_at = now() - interval '1 second' WHERE id = %s", (old,))
        new = c.execute("SELECT id FROM pymem.fact_add('agent', 'paths-bot', 'Sale ends Friday', 'p1')").fetchone()[0]
        assert new != old
        same_as_originals("an expired fact freed")
        c.execute("SELECT pymem.fact_add('agent', 'paths-bot', 'Sale ends Friday', 'p1', write => pymem.fact_write(valid_from => '2026-01-01'))")
        same_as_originals("a restatement")
        head = c.execute("SELECT id FROM pymem.facts_newest('agent', 'paths-bot', 'p1')").fetchone()[0]
        c.execute("SELECT pymem.fact_supersede('agent', 'paths-bot', 'Sale ends Saturday', id => %s, project_id => 'p1', "
                  "write => pymem.fact_write(ttl => '1 hour'))", (head,))
        assert a.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'paths-bot' AND expires_at IS NOT NULL").fetchone()[0] >= 3
        same_as_originals("a supersede that gives the history an expiry")
        for i in range(3):
            c.execute("SELECT pymem.fact_add('agent', 'paths-bot', %s, 'p1', write => pymem.fact_write(source => 'learned'), max_learned => 2)", (f"Learned {i}",))
        assert a.execute("SELECT count(*) FROM pymem.facts WHERE scope_id = 'paths-bot' AND source = 'learned'").fetchone()[0] == 2
        same_as_originals("the learned cap")
        a.execute("SELECT pymem.text_search_configure('simple', 'p1')")
        same_as_originals("a re-index")


def test_one_user_context_with_a_query_runs_on_the_users_worker_only(pymem_cluster):
    """context_read with a query (facts ranked, messages recalled, agent facts) as one task on the
    user's worker. Every statement in it reads that worker's shards or its copies of reference
    tables: a read sent to another worker would arrive without the tenant and raise 0A000
    (test_undelegated_reads_raise_rather_than_answer_nothing), so a right answer for the user on
    the other worker than the agent's shows that no statement left the user's worker."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        agent, near, far = _agent_and_users(c)
        ports = {u: _worker_of(c, "pymem.threads", u) for u in (near, far)}
    assert ports[near] != ports[far]
    with psycopg.connect(app, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('agent', %s, 'Support hours are 9 to 5 CET', 'p1')", (agent,))
        for u in (near, far):
            for i in range(3):
                c.execute("SELECT pymem.fact_add('user', %s, %s, 'p1')", (u, f"fact {i} about {u}"))
            c.execute("SELECT pymem.fact_add('user', %s, 'lives in Bergen', 'p1')", (u,))
            for text in ("I moved to Bergen last year", "I like hiking", "The weather is fine", "Tea or coffee?"):
                c.execute("SELECT pymem.message_add(user_id => %s, role => 'user', content => %s, project_id => 'p1')",
                          (u, text))
            query = ("SELECT pymem.context_read(%s, %s, 'p1', query_text => 'Bergen', max_facts => 2, "
                     "recall => pymem.recall(window_size => 1))")
            job = _citus_job(c, query, (u, agent))
            assert job["Task Count"] == 1 and f"port={ports[u]} " in job["Tasks"][0]["Node"] + " "
            for _ in range(7):  # past the plan cache's five custom plans
                ctx = c.execute(query, (u, agent)).fetchone()[0]
                # the match, and the two turns after it (next_turn_weight's default): all from this worker
                assert [m["content"] for m in ctx["recalled"]] == ["I moved to Bergen last year", "I like hiking",
                                                                   "The weather is fine"]
                assert [f["content"] for f in ctx["user_facts"]][0] == "lives in Bergen"
                assert [f["content"] for f in ctx["agent_facts"]] == ["Support hours are 9 to 5 CET"]
            recalled = c.execute("SELECT content FROM pymem.messages_recall(%s, project_id => 'p1', "
                                 "query_text => 'Bergen hiking', recall => pymem.recall(window_size => 0, next_turn_weight => 0))",
                                 (u,)).fetchall()
            assert sorted(r[0] for r in recalled) == ["I like hiking", "I moved to Bergen last year"]
            # a named time (issue 32): both lists from one ranking, still one task on this worker
            timed = query.replace("window_size => 1", "window_size => 1, time_from => now() - interval '1 hour', "
                                  "time_to => now() + interval '1 hour'")
            job = _citus_job(c, timed, (u, agent))
            assert job["Task Count"] == 1 and f"port={ports[u]} " in job["Tasks"][0]["Node"] + " "
            assert [m["content"] for m in c.execute(timed, (u, agent)).fetchone()[0]["recalled"]] == [
                "I moved to Bergen last year", "I like hiking", "The weather is fine"]


@pytest.mark.parametrize("statement_timeout_ms", [0, 30_000])
def test_memory_on_the_cluster_for_users_on_both_workers(pymem_cluster, statement_timeout_ms):
    """Python's Memory against the coordinator: turns with vectors (message_embeddings_put), recall
    and context with the agent's fact, for a user on each worker. Every call is delegated to one
    worker (Citus says "pushing down the function call" at DEBUG1), with or without a statement
    timeout: on Citus the timeout is the pooled connection's session setting, not a set_config in
    front of each call (the two would be a transaction, in which Citus delegates nothing)."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        agent, near, far = _agent_and_users(c)
    debug = make_conninfo(app, options="-c client_min_messages=debug1")
    settings = pymem.Settings(dsn=debug, statement_timeout_ms=statement_timeout_ms, pool_min_size=1, pool_max_size=1)
    notices: list[str] = []
    with pymem.Database(settings) as db:
        with db.connection() as conn:  # the pool's only connection
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            assert conn.execute("SHOW statement_timeout").fetchone()[0] == ("30s" if statement_timeout_ms else "0")

        def delegated(call):
            notices.clear()
            result = call()
            assert any(n == "pushing down the function call" for n in notices), notices
            return result

        for u in (near, far):
            mem = pymem.Memory(db=db, agent_id=agent, user_id=u, embedder=pymem.HashEmbedder(64), project_id="p1",
                               window=2)
            delegated(lambda: mem.persist("Support hours are 9 to 5 CET", tier="agent", id=agent))
            delegated(lambda: mem.persist("Lives in Bergen"))
            delegated(lambda: mem.add_message("I like hiking in the mountains"))  # no vector: recall embeds it
            delegated(lambda: mem.record("I moved to Bergen last year", "Noted."))
            delegated(lambda: mem.record("What is the weather?", "Sunny."))
            assert [m.content for m in delegated(lambda: mem.recall("hiking mountains"))][0] \
                == "I like hiking in the mountains"
            text = "\n".join(m["content"] for m in delegated(lambda: mem.context("hiking in the mountains")))
            assert "Support hours are 9 to 5 CET" in text and "Lives in Bergen" in text
            assert "I like hiking in the mountains" in text
            assert [f.content for f in delegated(lambda: mem.retrieve("support hours", tier="agent", id=agent))] \
                == ["Support hours are 9 to 5 CET"]
            store = pymem.MemoryStore.get_or_create(f"transcript-{u}", project_id="p1", db=db)
            assert delegated(lambda: store.append_run([{"role": "user", "content": "hi"},
                                                       {"role": "assistant", "content": "hello"}])) == 2


def test_async_memory_on_the_cluster_gets_the_session_timeout(pymem_cluster):
    """AsyncDatabase on a Citus coordinator: the statement timeout is the session's, a call is
    delegated (the asyncio twin of the test above)."""
    _, app, _ = pymem_cluster
    debug = make_conninfo(app, options="-c client_min_messages=debug1")

    async def run() -> None:
        notices: list[str] = []
        settings = pymem.Settings(dsn=debug, statement_timeout_ms=15_000, pool_min_size=1, pool_max_size=1)
        async with await pymem.AsyncDatabase.open(settings) as db:
            async with db.connection() as conn:
                conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
                assert (await (await conn.execute("SHOW statement_timeout")).fetchone())[0] == "15s"
            mem = pymem.AsyncMemory(db=db, user_id="async-user", project_id="p1")
            await mem.add_message("hello from asyncio")
            assert "pushing down the function call" in notices
            assert "hello from asyncio" in "\n".join(m["content"] for m in await mem.context("hello"))

    asyncio.run(run())


def test_project_wide_calls_on_the_cluster(pymem_cluster):
    """Calls that name no single user (browse_*, '*' reads, a fact by id) run on the coordinator
    and read every worker. Those reads carry the tenant only inside a transaction: in SQL they
    are refused in autocommit (0A000, never a silent empty answer) and answer inside BEGIN ...
    COMMIT; from Python (which sends calls alone on Citus, for delegation) they are sent again in
    a transaction and answer with the rows of both workers."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        agent, near, far = _agent_and_users(c)
    with psycopg.connect(app, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('agent', %s, 'Support hours are 9 to 5 CET', 'p1')", (agent,))
        for u in (near, far):
            c.execute("SELECT pymem.fact_add('user', %s, %s, 'p1')", (u, f"{u} likes tea"))
            c.execute("SELECT pymem.message_add(user_id => %s, role => 'user', content => 'hello', project_id => 'p1')", (u,))
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="without its tenant"):
            c.execute("SELECT * FROM pymem.browse_users('p1')")
        with c.transaction():
            assert sorted(r[0] for r in c.execute("SELECT user_id FROM pymem.browse_users('p1')")) == sorted([near, far])
    settings = pymem.Settings(dsn=app)
    with pymem.Database(settings) as db:
        assert sorted(r["user_id"] for r in pymem.browse.users(db, "p1")) == sorted([near, far])
        assert {(r["scope"], r["scope_id"]) for r in pymem.browse.subjects(db, "p1")} \
            == {("agent", agent), ("user", near), ("user", far)}
        assert [r["thread_id"] for r in pymem.browse.threads(db, far, "p1")] == ["default"]
        everyone = pymem.Memory(db=db, project_id="p1")
        assert sorted(f.content for f in everyone.retrieve(tier="user", id="*")) \
            == sorted([f"{near} likes tea", f"{far} likes tea"])
        # per-user calls on the same Database are still delegated alone
        assert [f.content for f in pymem.Memory(db=db, project_id="p1", user_id=far).retrieve()] == [f"{far} likes tea"]


def test_a_heavy_users_recall_index_on_the_cluster(pymem_cluster):
    """Recall indexes (docs/recall-indexes.md) on Citus: recall_index_plan runs on the coordinator,
    its CREATE INDEX CONCURRENTLY puts the partial index on every shard, and the user's delegated
    recall reads it on the user's worker, with the ranking the exact scan gives."""
    from pgvector import Vector
    from pgvector.psycopg import register_vector

    from pymem.conversations import recall_indexes

    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as a:
        # no auto-analyze in the middle of the test: at 90 vectors the analyzed planner rightly
        # prefers the exact scan (as in tests/recall/test_recall_indexes.py); Citus sets it on the shards
        a.execute("ALTER TABLE pymem.message_embeddings SET (autovacuum_enabled = false)")
        assert all("autovacuum_enabled=false" in (r[0] or "") for r in a.execute(
            "SELECT result FROM run_command_on_workers($$SELECT string_agg(array_to_string(reloptions, ','), ';')"
            " FROM pg_class WHERE relname LIKE 'message\\_embeddings\\_1%' AND relkind = 'r'$$)"))
    emb = pymem.HashEmbedder()
    words = "garden tomato berlin paris coffee bicycle piano invoice holiday dentist meeting recipe".split()
    texts = [f"note {i}: {words[i % 12]} {words[(i * 5) % 12]} {words[(i * 7 + 3) % 12]}" for i in range(90)]
    with psycopg.connect(app, autocommit=True) as c:
        register_vector(c)
        c.execute("SELECT count(*) FROM pymem.messages_add_many(user_id => 'heavy', thread_id => 'default', "
                  "roles => %s, contents => %s, project_id => 'p1', embeddings => %s, embedder => %s)",
                  (["user"] * 90, texts, [Vector(v) for v in emb.embed(texts)], emb.name))
    with pymem.Database(pymem.Settings(dsn=admin)) as db:
        assert [s["action"] for s in recall_indexes(db, "p1", 60)] == ["create", "create", "fill"]

    def scans(c: psycopg.Connection) -> int:
        return sum(int(r[0] or 0) for r in c.execute(
            "SELECT result FROM run_command_on_workers($$SELECT sum(idx_scan) FROM pg_stat_user_indexes "
            "WHERE indexrelname LIKE 'message_embeddings_recall_%'$$)"))

    recall = ("SELECT thread_id, seq, score FROM pymem.messages_recall(user_id => 'heavy', project_id => 'p1', "
              "query_vector => %s, embedder => %s, recall => pymem.recall(k => 5, window_size => 0, min_content_chars => 0))")
    query = Vector(emb.embed(["coffee in paris"])[0])
    with psycopg.connect(admin, autocommit=True) as a, psycopg.connect(app, autocommit=True) as c:
        register_vector(c)
        before = scans(a)
        indexed = c.execute(recall, (query, emb.name)).fetchall()
        for _ in range(10):  # a backend flushes its index statistics at a transaction end >= 1 s after the last flush
            time.sleep(1.1)
            assert c.execute(recall, (query, emb.name)).fetchall() == indexed
            if scans(a) > before:
                break
        assert scans(a) > before, "the recall did not read the user's index"
        # the user's words (recall_terms, colocated by user_id): filled by the plan's fill step, a
        # new message's added by the lexeme trigger on the worker, read by the hybrid recall there
        c.execute("SELECT count(*) FROM pymem.messages_add_many(user_id => 'heavy', thread_id => 'default', "
                  "roles => ARRAY['user'], contents => ARRAY['the zanzibar ferry is late'], project_id => 'p1', "
                  "embeddings => %s, embedder => %s)", ([Vector(emb.embed(["qqq vvv www"])[0])], emb.name))
        words = a.execute("SELECT (SELECT count(*) FROM pymem.recall_terms WHERE project_id = 'p1' AND user_id = 'heavy'), "
                          "(SELECT sum(cardinality(tsvector_to_array(lexemes))) FROM pymem.message_lexemes "
                          "WHERE project_id = 'p1' AND user_id = 'heavy')").fetchone()
        assert words[0] == words[1] > 90
        text = "query_text => 'zanzibar ferry', recall => pymem.recall("  # the text beside the spec
        hybrid = c.execute(recall.replace("recall => pymem.recall(", text),
                           (Vector(emb.embed(["zanzibar ferry"])[0]), emb.name)).fetchall()
        assert len(hybrid) == 5 and hybrid[0][1] == 91  # the far message sharing the rare word, first
        # a named time holding every message: the same ranking, each score time_weight (0.2) more
        timed = c.execute(recall.replace("recall => pymem.recall(", text).replace("k => 5", "k => 5, next_turn_weight => 0, "
                                         "time_from => now() - interval '1 day', time_to => now() + interval '1 day'"),
                          (Vector(emb.embed(["zanzibar ferry"])[0]), emb.name)).fetchall()
        plain = c.execute(recall.replace("recall => pymem.recall(", text).replace("k => 5", "k => 5, next_turn_weight => 0"),
                          (Vector(emb.embed(["zanzibar ferry"])[0]), emb.name)).fetchall()
        assert [(t, s) for t, s, _ in timed] == [(t, s) for t, s, _ in plain]
        assert [x for *_, x in timed] == pytest.approx([x + 0.2 for *_, x in plain])
        a.execute("DELETE FROM pymem.recall_indexes")  # unregistered: the exact scan
        exact = c.execute(recall, (query, emb.name)).fetchall()
        assert [(t, s) for t, s, _ in indexed] == [(t, s) for t, s, _ in exact] and len(exact) == 5


def test_a_shard_move_keeps_a_users_calls_on_the_users_new_worker(pymem_cluster):
    admin, app, _ = pymem_cluster
    with psycopg.connect(app, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('user', 'mover', 'lives in Oslo', 'p1')")
        c.execute("SELECT pymem.message_add(user_id => 'mover', role => 'user', content => 'hello', project_id => 'p1')")
    with psycopg.connect(admin, autocommit=True) as c:
        shard, old = c.execute("""SELECT shardid, nodeport FROM citus_shards
                                  WHERE shardid = get_shard_id_for_distribution_column('pymem.threads', 'mover'::text)""").fetchone()
        new = c.execute("SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 AND nodeport <> %s", (old,)).fetchone()[0]
        # the whole colocation group moves: the user's messages, facts and stores shards together
        c.execute("SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s, shard_transfer_mode => 'block_writes')",
                  (shard, old, new))
        assert _worker_of(c, "pymem.facts", "mover") == new
    with psycopg.connect(app, autocommit=True) as c:
        job = _citus_job(c, "SELECT pymem.context_read('mover', NULL, 'p1')")
        assert job["Task Count"] == 1 and f"port={new} " in job["Tasks"][0]["Node"] + " "
        ctx = c.execute("SELECT pymem.context_read('mover', NULL, 'p1')").fetchone()[0]
        assert [f["content"] for f in ctx["user_facts"]] == ["lives in Oslo"]
        assert [m["content"] for m in ctx["window"]] == ["hello"]
        c.execute("SELECT pymem.fact_add('user', 'mover', 'moved shards', 'p1')")
        assert len(c.execute("SELECT * FROM pymem.facts_newest('user', 'mover', 'p1', 10)").fetchall()) == 2


def test_overwrites_batches_summaries_and_configuration_on_the_cluster(pymem_cluster):
    """Writes that update a row on a worker: Citus refuses a volatile function (clock_timestamp())
    in an UPDATE or ON CONFLICT DO UPDATE on its tables, so these take the time as a value."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
        c.execute("SELECT pymem.text_search_configure('simple', 'p1')")  # ON CONFLICT DO UPDATE of a reference table
        c.execute("SELECT pymem.text_search_configure('english', 'p1')")
    with psycopg.connect(app, autocommit=True) as c:
        for u in users:
            store = f"s-{u}"
            c.execute("SELECT pymem.store_open(%s, 'p1', true, true)", (store,))
            c.execute("SELECT pymem.store_write(%s, 'a.md', 'one', project_id => 'p1')", (store,))
            c.execute("SELECT pymem.store_write(%s, 'a.md', 'two', project_id => 'p1')", (store,))  # an overwrite
            assert c.execute("SELECT pymem.store_messages_append(%s, '[{\"role\": \"user\", \"content\": \"hi\"}]', 'p1')",
                             (store,)).fetchone()[0] == 1
            assert sorted(r[0] for r in c.execute("SELECT version FROM pymem.store_versions(%s, 'a.md', 'p1')", (store,))) == [1, 2]
            c.execute("SELECT * FROM pymem.store_protect(%s, read_only_prefixes => ARRAY['locked/'], project_id => 'p1')",
                      (store,))
            for batch in (["hello", "hi"], ["hello again", "hi again"]):  # the second updates the thread row
                c.execute("SELECT count(*) FROM pymem.messages_add_many(%s, 'default', ARRAY['user', 'assistant'], %s, 'p1')",
                          (u, batch))
            token, through = c.execute("SELECT claim_token, through_seq FROM pymem.summary_claim(%s, project_id => 'p1', "
                                       "keep_last => 0, summarize_every => 1)", (u,)).fetchone()
            assert through == 4
            assert c.execute("SELECT pymem.summary_commit(%s, %s, 'They said hello twice.', project_id => 'p1')",
                             (u, token)).fetchone()[0] is True
            assert c.execute("SELECT summary FROM pymem.summary_read(%s, project_id => 'p1')",
                             (u,)).fetchone()[0] == "They said hello twice."


def test_facts_expire_and_purge_on_the_cluster(pymem_cluster):
    """An expiring agent fact and user facts on both workers: invisible once expired (in the
    copies every worker's context_read reads too), its content free again, and purge (a
    project-wide call: Python sends it in a transaction on Citus) deletes them on every worker."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        agent, near, far = _agent_and_users(c)
    with psycopg.connect(app, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('agent', %s, 'Sale ends Friday', 'p1', write => pymem.fact_write(ttl => '1 day'))", (agent,))
        for u in (near, far):
            c.execute("SELECT pymem.fact_add('user', %s, 'Is in Lisbon', 'p1', write => pymem.fact_write(ttl => '1 day'))", (u,))
            c.execute("SELECT pymem.fact_add('user', %s, 'Likes tea', 'p1')", (u,))
        context = c.execute("SELECT pymem.context_read(%s, %s, 'p1')", (far, agent)).fetchone()[0]
        assert [f["content"] for f in context["agent_facts"]] == ["Sale ends Friday"]
    with psycopg.connect(admin, autocommit=True) as c:  # time passes, on the shards and in the copies
        c.execute("UPDATE pymem.facts SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL")
        c.execute("UPDATE pymem.shared_facts SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL")
    with psycopg.connect(app, autocommit=True) as c:
        for u in (near, far):
            context = c.execute("SELECT pymem.context_read(%s, %s, 'p1')", (u, agent)).fetchone()[0]
            assert context["agent_facts"] == [] and [f["content"] for f in context["user_facts"]] == ["Likes tea"]
        assert c.execute("SELECT created FROM pymem.fact_add('user', %s, 'Is in Lisbon', 'p1')", (near,)).fetchone()[0]
    with pymem.Database(pymem.Settings(dsn=app)) as db:
        assert pymem.lifecycle.purge(db, "p1") == {"facts": 2, "store_entries": 0, "messages": 0, "changes": 0, "learning_usage": 0}  # the agent's and far's; near's was replaced
    with psycopg.connect(admin, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE expires_at IS NOT NULL").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.shared_facts WHERE scope_id = %s", (agent,)).fetchone()[0] == 0


def test_a_user_is_exported_and_imported_on_the_cluster(pymem_cluster):
    """user_export reads each fact as its row (to_jsonb(f), pymem._fact_kept(f, at)), which Citus
    sends to a shard whose row type is the shard's: the export and the import round-trip a user,
    valid time and history included, between users on both workers."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        _, near, far = _agent_and_users(c)
    with psycopg.connect(app, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('user', %s, 'Works at Acme', 'p1', write => pymem.fact_write("
                  "valid_from => '2025-01-01', valid_to => '2025-06-01'))", (near,))
        c.execute("SELECT pymem.fact_supersede('user', %s, 'Works at Initech', old_content => 'Works at Acme', project_id => 'p1')", (near,))
        c.execute("SELECT pymem.fact_add('user', %s, 'Gone soon', 'p1', write => pymem.fact_write(ttl => '1 day'))", (near,))
        doc = c.execute("SELECT pymem.user_export(%s, 'p1')", (near,)).fetchone()[0]
        assert sorted(f["content"] for f in doc["facts"]) == ["Gone soon", "Works at Acme", "Works at Initech"]
        c.execute("SELECT pymem.facts_forget('user', %s, 'p1')", (far,))
        c.execute("SELECT pymem.user_import(%s, 'p1', %s, replace => true)", (psycopg.types.json.Jsonb(doc), far))
        copy = c.execute("SELECT pymem.user_export(%s, 'p1')", (far,)).fetchone()[0]
    keep = ("content", "valid_from", "valid_to", "expires_at", "created_at", "confidence", "source")
    assert sorted(tuple(f[k] for k in keep) for f in copy["facts"]) == sorted(tuple(f[k] for k in keep) for f in doc["facts"])
    assert [f["valid_to"] for f in copy["facts"] if f["content"] == "Works at Acme"] != [None]


def test_a_user_is_erased_on_the_cluster_with_a_receipt(pymem_cluster):
    """user_forget on Citus (issue 33, item 2): not delegated, since it writes rows of other keys
    (the user's stores, other stores' actors, the receipt in the reference table erasures): it
    runs on the coordinator, each statement routed by its key, all in one distributed
    transaction. The other worker's user keeps everything."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
    with psycopg.connect(app, autocommit=True) as c:
        c.execute("SELECT pymem.store_open('shared', project_id => 'p1')")
        for u in users:
            c.execute("SELECT pymem.fact_add('user', %s, 'Likes tea', 'p1')", (u,))
            c.execute("SELECT * FROM pymem.turn_record(%s, 'hi', 'hello', project_id => 'p1')", (u,))
            c.execute("SELECT pymem.store_open(%s, project_id => 'p1')", (f"{u}-notes",))
            c.execute("SELECT pymem.store_write(%s, 'a.txt', 'x', actor => %s, project_id => 'p1')", (f"{u}-notes", u))
            c.execute("SELECT pymem.store_write('shared', %s, 'y', actor => %s, project_id => 'p1')", (f"{len(u)}{u[-1]}.txt", u))
    gone, kept = users
    with pymem.Database(pymem.Settings(dsn=app)) as db:
        receipt = pymem.Memory(db=db, agent_id="bot", project_id="p1").forget_user(user=gone, stores=[f"{gone}-notes"])
    assert {k: v for k, v in receipt.counts.items() if v} == {
        "facts": 1, "fact_lexemes": 1, "threads": 1, "messages": 2, "message_lexemes": 2, "stores": 1,
        "store_entries": 1, "store_audit": 1, "store_actors": 2}
    with psycopg.connect(admin, autocommit=True) as c:
        for table, column in (("facts", "scope_id"), ("threads", "user_id"), ("messages", "user_id"),
                              ("message_lexemes", "user_id"), ("store_entries", "actor"), ("store_audit", "actor")):
            rows = dict(c.execute(sql.SQL("SELECT {c}, count(*) FROM pymem.{t} WHERE project_id = 'p1' GROUP BY 1")
                                  .format(c=sql.Identifier(column), t=sql.Identifier(table))).fetchall())
            assert gone not in rows and rows.get(kept), (table, rows)
        assert c.execute("SELECT count(*) FROM pymem.stores WHERE store_key = %s", (f"{gone}-notes",)).fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pymem.erasures").fetchone()[0] == 1
    with pymem.Database(pymem.Settings(dsn=admin)) as db:
        assert [e.id for e in pymem.portability.erasures(db, "p1", user_id=gone)] == [receipt.id]
        assert pymem.portability.erasures(db, "p1", user_id=kept) == []


def test_store_entries_expire_and_purge_on_the_cluster(pymem_cluster):
    """Expiring entries and items in stores on both workers (store tables are distributed by
    store_key): invisible once expired, the path free again, a refresh (an UPDATE on a worker:
    the time as a value), and purge (multi-shard: the soonest first, then router deletes store by
    store) deletes the rest on every worker."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        seen: dict[int, str] = {}
        for i in range(50):
            seen.setdefault(_worker_of(c, "pymem.store_entries", f"exp-{i}"), f"exp-{i}")
            if len(seen) == 2:
                break
        stores = list(seen.values())
        assert len(stores) == 2
    with psycopg.connect(app, autocommit=True) as c:
        for store in stores:
            c.execute("SELECT pymem.store_open(%s, 'p1')", (store,))
            c.execute("SELECT pymem.store_write(%s, 'a.md', 'soon', project_id => 'p1', ttl => '1 day')", (store,))
            c.execute("SELECT pymem.store_write(%s, 'b.md', 'soon', project_id => 'p1', ttl => '1 day')", (store,))
            c.execute("SELECT pymem.store_item_put(%s, '{n}', 'k', '{}', project_id => 'p1', ttl => '1 day')", (store,))
            assert c.execute("SELECT pymem.store_items_refresh(%s, '[{\"namespace\": [\"n\"], \"key\": \"k\"}]', 'p1')",
                             (store,)).fetchone()[0] == 1
    with psycopg.connect(admin, autocommit=True) as c:  # time passes, on every shard
        c.execute("UPDATE pymem.store_entries SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL")
    with psycopg.connect(app, autocommit=True) as c:
        for store in stores:
            assert c.execute("SELECT count(*) FROM pymem.store_list(%s, project_id => 'p1')", (store,)).fetchone()[0] == 0
            assert c.execute("SELECT count(*) FROM pymem.store_item_get(%s, '{n}', 'k', 'p1')", (store,)).fetchone()[0] == 0
            c.execute("SELECT pymem.store_write(%s, 'a.md', 'again', expected_sha => '', project_id => 'p1')", (store,))
    with pymem.Database(pymem.Settings(dsn=app)) as db:
        assert pymem.lifecycle.purge(db, "p1", max_rows=3, until_done=True) == {"facts": 0, "store_entries": 4, "messages": 0, "changes": 0, "learning_usage": 0}
    with psycopg.connect(admin, autocommit=True) as c:
        assert sorted(c.execute("SELECT store_key, path FROM pymem.store_entries").fetchall()) == \
            sorted((store, "a.md") for store in stores)
        assert c.execute("SELECT count(*) FROM pymem.store_entries WHERE expires_at IS NOT NULL").fetchone()[0] == 0


def test_message_retention_on_the_cluster(pymem_cluster):
    """The retention policy (a reference table) applied by purge on the coordinator: old messages
    and threads over their cap trimmed on both workers, the thread's retained_from moved on."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
        c.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_created ON pymem.messages (project_id, created_at)")
        c.execute("SELECT * FROM pymem.retention_configure(project_id => 'p1', messages_max_per_thread => 2, "
                  "messages_max_age => '30 days')")
    with psycopg.connect(app, autocommit=True) as c:
        for u in users:
            c.execute("SELECT count(*) FROM pymem.messages_add_many(%s, 'old', ARRAY['user'], ARRAY['long ago'], 'p1', "
                      "created_ats => ARRAY[now() - interval '40 days'])", (u,))
            for i in range(3):
                c.execute("SELECT * FROM pymem.turn_record(%s, %s, 'ok', project_id => 'p1')", (u, f"q{i}"))
        assert c.execute("SELECT messages_max_per_thread FROM pymem.retention_policy('p1')").fetchone()[0] == 2
    with pymem.Database(pymem.Settings(dsn=app)) as db:
        assert pymem.lifecycle.purge(db, "p1", max_rows=3, until_done=True) == {
            "facts": 0, "store_entries": 0, "messages": 2 * (1 + 4), "changes": 0, "learning_usage": 0}
    with psycopg.connect(admin, autocommit=True) as c:
        for u in users:
            assert c.execute("SELECT thread_id, array_agg(seq ORDER BY seq) FROM pymem.messages WHERE user_id = %s "
                             "GROUP BY 1", (u,)).fetchall() == [("default", [5, 6])]
            assert c.execute("SELECT retained_from FROM pymem.threads WHERE user_id = %s AND thread_id = 'default'",
                             (u,)).fetchone()[0] == 5


def test_deferred_learning_on_the_cluster(pymem_cluster):
    """The learning queue on Citus (issue 37): jobs distributed by user_id beside the user's
    messages; turn_record (delegated) queues them on the user's worker; learning_claim runs on the
    coordinator, reading the candidates of every shard and locking each job by its key (a routed
    statement); learning_complete is delegated and applies the job's facts on the user's worker;
    cost caps live in a reference table."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
        c.execute("SELECT * FROM pymem.learning_limits_configure(project_id => 'p1', project_calls_per_day => 1000)")
    with pymem.Database(pymem.Settings(dsn=app)) as db:
        queue = pymem.Memory(db=db, agent_id="bot", project_id="p1", deferred_learning=True)
        for n in range(2):
            for u in users:
                assert queue.record(f"{u} says {n}", "ok", user=u).learning_pending

        class Rules:
            def extract(self, message):
                return [message]

            def reconcile(self, candidates, stored):
                return [pymem.llm.FactChange("add", c) for c in candidates]

        worker = pymem.Memory(db=db, agent_id="bot", project_id="p1", learner=Rules())
        report = worker.learn_pending()
        assert (report.claimed, report.done, report.lost) == (4, 4, 0)
        for u in users:
            assert sorted(f.content for f in worker.retrieve(user=u)) == [f"{u} says 0", f"{u} says 1"]
        status = worker.learning_status()
        assert (status.pending, status.running, status.calls_today) == (0, 0, 6)


class _OrderedLearner:
    """The user's message is the fact; keeps, in order, every message it was asked about
    (thread-safe), waiting a little on each (tests/conversations/test_learning_queue.py)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.seen: list[str] = []
        self.delay = delay
        self.lock = threading.Lock()

    def extract(self, message: str) -> list[str]:
        with self.lock:
            self.seen.append(message)
        if self.delay:
            time.sleep(self.delay)
        return [message]

    def reconcile(self, candidates, stored):
        return [pymem.llm.FactChange("add", c) for c in candidates]


def _four_users_on_two_workers(c: psycopg.Connection) -> list[str]:
    by_port: dict[int, list[str]] = {}
    for i in range(200):
        by_port.setdefault(_worker_of(c, "pymem.threads", f"learner{i}"), []).append(f"learner{i}")
    assert len(by_port) == 2 and all(len(v) >= 2 for v in by_port.values()), by_port
    return [u for users in by_port.values() for u in users[:2]]


def test_two_concurrent_learning_workers_on_the_cluster_apply_each_job_once(pymem_cluster):
    """Issue 57, item 5: two workers (threads, each its own pool) drain 24 deferred turns of four
    users on both workers at once: each job claimed and applied once (FOR UPDATE SKIP LOCKED
    on the coordinator, the lease checked by the delegated learning_complete on the user's
    worker), each user's turns learned in order."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _four_users_on_two_workers(c)
        c.execute("SELECT * FROM pymem.learning_limits_configure(project_id => 'p1', project_calls_per_day => 1000)")
    with pymem.Database(pymem.Settings(dsn=app, pool_max_size=6)) as db:
        app_mem = pymem.Memory(db=db, agent_id="bot", project_id="p1", deferred_learning=True)
        for n in range(6):
            for u in users:
                assert app_mem.record(f"{u} turn {n}", "ok", user=u).learning_pending
        assert app_mem.learning_status().pending == 24
        learner = _OrderedLearner(delay=0.01)
        reports: list[pymem.LearningReport] = []
        errors: list[BaseException] = []

        def work() -> None:
            try:
                with pymem.Database(pymem.Settings(dsn=app, pool_max_size=3)) as own:
                    mem = pymem.Memory(db=own, agent_id="bot", project_id="p1", learner=learner)
                    reports.append(mem.learn_pending(batch=3))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors
        assert len(reports) == 2
        assert sum(r.claimed for r in reports) == sum(r.done for r in reports) == 24, reports
        assert all(r.retried == r.dead == r.lost == 0 for r in reports), reports
        assert sorted(learner.seen) == sorted(f"{u} turn {n}" for u in users for n in range(6))  # each once
        for u in users:
            mine = [m for m in learner.seen if m.startswith(u + " ")]
            assert mine == [f"{u} turn {n}" for n in range(6)], mine
            facts = sorted(app_mem.retrieve(user=u), key=lambda f: f.id)
            assert [f.content for f in facts] == [f"{u} turn {n}" for n in range(6)]
        status = app_mem.learning_status()
        assert (status.pending, status.running, status.dead) == (0, 0, 0)


_STUCK_LEARNER = '''
import time
from pymem.llm import FactChange

class Stuck:
    """Answers after an hour: the worker is killed before."""
    def extract(self, message):
        print("extracting", flush=True)
        time.sleep(3600)
        return [message]
    def reconcile(self, candidates, stored):
        return [FactChange("add", c) for c in candidates]

stuck = Stuck()
'''


def test_a_learning_worker_killed_mid_job_on_the_cluster_leaves_it_to_be_applied_once(pymem_cluster, tmp_path):
    """Issue 57, item 5: `pymem worker` claims a job of a user on the cluster (a 2 s lease) and is
    killed (SIGKILL) while its model works: nothing is applied; once the lease runs out another
    worker takes the job over and applies it, once; the dead worker's lease can no longer
    complete it."""
    import os
    import signal
    import subprocess
    import sys

    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        user = _users_on_both_workers(c)[1]
        c.execute("SELECT * FROM pymem.learning_limits_configure(project_id => 'p1', project_calls_per_day => 1000)")
    (tmp_path / "stuck_learner.py").write_text(_STUCK_LEARNER)
    with pymem.Database(pymem.Settings(dsn=app)) as db:
        app_mem = pymem.Memory(db=db, agent_id="bot", project_id="p1", deferred_learning=True)
        app_mem.record("I play chess", "ok", user=user)
        env = {**os.environ, "PYMEM_DSN": app, "PYMEM_PROJECT_ID": "p1"}
        proc = subprocess.Popen([sys.executable, "-m", "pymem.cli", "worker", "--learner", "stuck_learner:stuck",
                                 "--lease", "2", "--poll", "0.2"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "extracting", proc.stderr.read() if proc.poll() is not None else ""
            status = app_mem.learning_status()
            assert (status.pending, status.running) == (0, 1), status  # pending counts the jobs not running
            with psycopg.connect(admin, autocommit=True) as c:  # the dead worker's claim, for later
                job_id, token = c.execute("SELECT id, lease_token FROM pymem.learning_jobs WHERE user_id = %s",
                                          (user,)).fetchone()
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
            proc.stderr.close()
        assert app_mem.retrieve(user=user) == []  # nothing applied by the killed worker
        time.sleep(2.2)  # its lease runs out
        worker = pymem.Memory(db=db, agent_id="bot", project_id="p1", learner=_OrderedLearner())
        report = worker.learn_pending()
        assert (report.claimed, report.done, report.lost) == (1, 1, 0), report
        assert [f.content for f in app_mem.retrieve(user=user)] == ["I play chess"]
        assert worker.learn_pending().claimed == 0
        # the killed worker's lease, were it to come back, applies nothing
        with psycopg.connect(app, autocommit=True) as c:
            late = c.execute("SELECT completed, learned_ids FROM pymem.learning_complete(user_id => %s, job_id => %s, "
                             "lease_token => %s, project_id => 'p1', learned => ARRAY['played late'])",
                             (user, job_id, token)).fetchone()
        assert late == (False, None)
        assert [f.content for f in app_mem.retrieve(user=user)] == ["I play chess"]
        status = worker.learning_status()
        assert (status.pending, status.running, status.dead) == (0, 0, 0)


def test_eight_concurrent_writers_on_the_cluster_lose_nothing_and_keep_the_guarantees(pymem_cluster):
    """Issue 35, item 2: 8 writers at once across users on both workers and the agent's facts
    (copied into reference tables by _shared_facts_sync): every turn and fact is there, no
    deadlock; concurrent identical adds of one user's fact, and of one agent fact, each give
    one row and one id; two concurrent supersedes of one fact: one wins, the other gets PM201."""
    admin, app, _ = pymem_cluster
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
    n = 8
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []
    ids: dict[str, list[int]] = {"user": [], "agent": []}

    def writer(w: int) -> None:
        user = users[w % 2]
        try:
            with psycopg.connect(app, autocommit=True) as c:
                barrier.wait()
                for i in range(5):
                    c.execute("SELECT * FROM pymem.turn_record(%s, %s, 'ok', thread_id => %s, project_id => 'p1')",
                              (user, f"turn {i} of writer {w}", f"t{w}"))
                    c.execute("SELECT pymem.fact_add('user', %s, %s, 'p1')", (user, f"fact {i} of writer {w}"))
                    c.execute("SELECT pymem.fact_add('agent', 'bot', %s, 'p1')", (f"agent fact {i} of writer {w}",))
                ids["user"].append(c.execute("SELECT id FROM pymem.fact_add('user', %s, 'shared by all', 'p1')",
                                             (users[0],)).fetchone()[0])
                ids["agent"].append(c.execute("SELECT id FROM pymem.fact_add('agent', 'bot', 'said by all', 'p1')"
                                              ).fetchone()[0])
        except BaseException as exc:  # noqa: BLE001  (the assertion below names it)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert errors == [], errors
    assert len(set(ids["user"])) == 1 and len(ids["user"]) == n
    assert len(set(ids["agent"])) == 1 and len(ids["agent"]) == n
    with psycopg.connect(app, autocommit=True) as c:
        for w in range(n):
            user = users[w % 2]
            assert c.execute("SELECT count(*) FROM pymem.window_read(%s, %s, 'p1', 100)",
                             (user, f"t{w}")).fetchone()[0] == 10
        facts = sum(c.execute("SELECT count(*) FROM pymem.facts_newest('user', %s, 'p1', max_facts => 1000)",
                              (u,)).fetchone()[0] for u in users)
        assert facts == n * 5 + 1
        agent = c.execute("SELECT count(*) FROM pymem.facts_newest('agent', 'bot', 'p1', max_facts => 1000)").fetchone()[0]
        assert agent == n * 5 + 1
        # every worker's copy of the agent's facts has them all (what context_read reads there)
        for u in users:
            ctx = c.execute("SELECT pymem.context_read(%s, agent_id => 'bot', project_id => 'p1', max_facts => 1000)",
                            (u,)).fetchone()[0]
            assert len(ctx["agent_facts"]) == n * 5 + 1
        target = c.execute("SELECT id FROM pymem.fact_add('user', %s, 'to supersede', 'p1')", (users[1],)).fetchone()[0]
    outcomes: list[str] = []
    barrier2 = threading.Barrier(2)

    def supersede(k: int) -> None:
        with psycopg.connect(app, autocommit=True) as c:
            barrier2.wait()
            try:
                c.execute("SELECT pymem.fact_supersede('user', %s, %s, id => %s, project_id => 'p1')",
                          (users[1], f"superseded by {k}", target))
                outcomes.append("ok")
            except psycopg.Error as exc:
                outcomes.append(exc.sqlstate or "?")

    pair = [threading.Thread(target=supersede, args=(k,)) for k in range(2)]
    for t in pair:
        t.start()
    for t in pair:
        t.join(60)
    assert sorted(outcomes) == ["PM201", "ok"]


@pytest.fixture
def third_worker_db(citus_cluster, citus_third_worker):
    """The third worker server, for one test's database: ``add(dbname)`` creates the database
    there with Citus (the test then runs citus_add_node on the coordinator); dropped at the end,
    after pymem_cluster's teardown (this fixture is requested first, so it is torn down last)."""
    worker = make_conninfo(citus_cluster.dsn, port=str(citus_third_worker))
    names: list[str] = []

    def add(name: str) -> str:
        with psycopg.connect(worker, autocommit=True) as c:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        names.append(name)
        with psycopg.connect(make_conninfo(worker, dbname=name), autocommit=True) as c:
            c.execute("CREATE EXTENSION citus")
        return make_conninfo(worker, dbname=name)

    yield citus_third_worker, add
    for name in names:
        with psycopg.connect(worker, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_adding_a_worker_and_rebalancing_under_writes_loses_nothing_and_keeps_one_hop(third_worker_db, pymem_cluster):
    """Issue 35, item 3: a third worker joins and Citus's rebalancer (rebalance_table_shards)
    moves shard groups to it, with the reference tables, while four writers record turns and add
    facts for 24 users and an agent, each call sent as pymem's Python sends it on Citus. Every
    acknowledged write is there afterwards, once (a turn or fact written twice would show), no
    call failed, and every per-user call is one task on the worker that now holds the user, the
    new one included, with the agent's facts there too.

    A call that reaches a worker while its shard group switches nodes may run there without
    being delegated, and its statements reach the new node without the tenant: pymem refuses it
    with 0A000 ("without its tenant", nothing done) and Python sends it again inside a
    transaction (seen in some runs of this test on a busy 2-core machine).

    shard_transfer_mode => 'block_writes': each move holds the writes to the moving shard group
    until it is done (they wait, then run). The default mode ('auto': logical replication, writes
    go on) cannot move pymem's tables: the subscription applies changes as the table owner, and
    PostgreSQL refuses that under FORCE ROW LEVEL SECURITY ("user pymem_owner cannot replicate
    into relation with row-level security enabled"); the move retries forever
    (docs/scaling-out.md, Rebalancing). The statement timeout turns such a hang into a failure."""
    admin, app, app_role = pymem_cluster
    new_port, add_db = third_worker_db
    node = add_db(psycopg.conninfo.conninfo_to_dict(admin)["dbname"])
    # docs/scaling-out.md, Rebalancing: the roles that connect to nodes exist on the new node
    # before citus_add_node. Citus creates them there in the same transaction, but that
    # transaction commits node by node (two-phase commit): a call that reaches a worker which
    # already sees the new node may connect to it before its roles are committed there (seen
    # once in CI: 'role "pymem_owner" does not exist' from a fact_add's reference-table write).
    with psycopg.connect(admin, autocommit=True) as c:
        roles = c.execute("""SELECT rolname, rolcanlogin FROM pg_roles
                             WHERE rolname IN ('pymem_owner', 'pymem_app', %s)""", (app_role,)).fetchall()
    assert len(roles) == 3, roles
    with psycopg.connect(node, autocommit=True) as c:
        for name, login in roles:
            if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                c.execute(sql.SQL("CREATE ROLE {} " + ("LOGIN" if login else "NOLOGIN")).format(sql.Identifier(name)))
    users = [f"rb{i}" for i in range(24)]
    with psycopg.connect(app, autocommit=True) as c:  # every user exists before the move
        for u in users:
            c.execute("SELECT * FROM pymem.turn_record(%s, 'first', 'ok', project_id => 'p1')", (u,))
        c.execute("SELECT pymem.fact_add('agent', 'bot', 'agent fact before', 'p1')")
    stop = threading.Event()
    acked: dict[str, list[str]] = {u: [] for u in users}
    agent_acked: list[str] = []
    ack_times: list[float] = []
    errors: list[BaseException] = []

    refused: list[str] = []

    deadlocks: list[str] = []

    def send(c: psycopg.Connection, query: str, params: tuple) -> None:
        """As pymem's Python sends a call on Citus (pymem.connection.execute): alone, and once
        more inside a transaction when refused with 0A000 "without its tenant" (nothing done)."""
        try:
            c.execute(query, params)
        except psycopg.errors.FeatureNotSupported as exc:
            if "without its tenant" not in str(exc):
                raise
            refused.append(query)
            with c.transaction():
                c.execute(query, params)

    def call(c: psycopg.Connection, query: str, params: tuple) -> None:
        """send, and again when Citus's distributed deadlock detection cancelled the call (40P01,
        pymem.ConflictError in Python: the transaction rolled back, nothing written), as
        docs/errors.md asks of any caller: an agent fact's write to the reference copies can wait
        on the rebalancer's copy of those tables while holding its subject's lock."""
        for attempt in range(5):
            try:
                send(c, query, params)
                return
            except psycopg.errors.DeadlockDetected:
                if attempt == 4:
                    raise
                deadlocks.append(query)

    def writer(w: int) -> None:
        mine = users[w::4]
        try:
            with psycopg.connect(app, autocommit=True) as c:
                for i in itertools.count():
                    if stop.is_set():
                        return
                    u = mine[i % len(mine)]
                    call(c, "SELECT * FROM pymem.turn_record(%s, %s, 'ok', project_id => 'p1')", (u, f"turn {i} of {w}"))
                    call(c, "SELECT pymem.fact_add('user', %s, %s, 'p1')", (u, f"fact {i} of {w}"))
                    acked[u].append(f"{i} of {w}")
                    ack_times.append(time.monotonic())
                    if w == 0 and i % 5 == 0:
                        call(c, "SELECT pymem.fact_add('agent', 'bot', %s, 'p1')", (f"agent fact {i}",))
                        agent_acked.append(f"agent fact {i}")
        except BaseException as exc:  # noqa: BLE001  (the assertion below names it)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    try:
        with psycopg.connect(admin, autocommit=True) as c:
            before = {u: _worker_of(c, "pymem.threads", u) for u in users}
            c.execute("SELECT citus_add_node('127.0.0.1', %s)", (new_port,))
            time.sleep(0.5)  # writes under way before the first move
            c.execute("SET statement_timeout = '300s'")
            started = time.monotonic()
            for attempt in range(3):  # as an operator would: a move that deadlock detection
                try:                  # cancelled is rolled back, the moves before it stay done
                    c.execute("SELECT rebalance_table_shards(shard_transfer_mode => 'block_writes')")
                    break
                except psycopg.errors.DeadlockDetected:
                    if attempt == 2:
                        raise
                    deadlocks.append("rebalance_table_shards")
            ended = time.monotonic()
            after = {u: _worker_of(c, "pymem.threads", u) for u in users}
            moved = c.execute("""SELECT count(*) FROM citus_shards
                                 WHERE table_name = 'pymem.threads'::regclass AND nodeport = %s""", (new_port,)).fetchone()[0]
        time.sleep(0.5)  # and after the last
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert errors == [], errors
    assert moved >= 8  # about a third of the 32 shard groups
    assert new_port in after.values() and new_port not in before.values()
    during = sum(started < t < ended for t in list(ack_times))
    assert during >= 10, (during, len(ack_times), ended - started)  # the writers wrote during the moves
    with psycopg.connect(app, autocommit=True) as c:
        for u in users:
            for call in ("SELECT pymem.context_read(%s, 'bot', 'p1')",
                         "SELECT * FROM pymem.turn_record(%s, 'q', 'a', project_id => 'p1')",
                         "SELECT pymem.fact_add('user', %s, 'x', 'p1')",
                         "SELECT * FROM pymem.facts_newest('user', %s, 'p1', 50)"):
                job = _citus_job(c, call, (u,))
                assert job["Task Count"] == 1, (u, call)
                assert f"port={after[u]} " in job["Tasks"][0]["Node"] + " ", (u, call, after[u])
            window = [r[0] for r in c.execute("SELECT content FROM pymem.window_read(%s, project_id => 'p1', max_messages => 10000)",
                                              (u,)).fetchall()]
            facts = {r[0] for r in c.execute("SELECT content FROM pymem.facts_newest('user', %s, 'p1', max_facts => 10000)",
                                             (u,)).fetchall()}
            assert [m for m in window if m.startswith("turn ")] == [f"turn {k}" for k in acked[u]], u
            assert facts == {f"fact {k}" for k in acked[u]}, u
            ctx = c.execute("SELECT pymem.context_read(%s, 'bot', 'p1', max_facts => 1000)", (u,)).fetchone()[0]
            assert {f["content"] for f in ctx["agent_facts"]} >= {"agent fact before", *agent_acked}, u


def test_the_cluster_ranks_as_one_server_does(pymem_cluster, citus_cluster):
    """On Citus, recall's rows (_recall_rows) and a subject's fact candidates (_fact_candidates)
    have bodies of their own (sql/citus.sql: single-table reads into arrays, so that the ranking
    statements name no Citus table). The same data on the cluster and on a plain database (no
    Citus) ranks the same: hybrid, vector-only and lexical-only recall, with a metadata filter,
    as of a past time, with vectors stored before 0017 (no lexemes beside them), for users on
    both workers; facts_search and the user facts of context_read; the messages an embedder has
    not embedded yet (_messages_unembedded: single-table reads, its one body on every server)."""
    from pgvector import Vector
    from pgvector.psycopg import register_vector

    admin, app, _ = pymem_cluster
    name = f"plain_t{next(_counter)}"
    with psycopg.connect(citus_cluster.dsn, autocommit=True) as c:
        c.execute("SET citus.enable_create_database_propagation = off")
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    plain = make_conninfo(citus_cluster.dsn, dbname=name)
    try:
        pymem.migrate(plain)
        emb = pymem.HashEmbedder()
        words = "garden tomato bergen paris coffee bicycle piano invoice holiday dentist meeting recipe".split()
        texts = [f"note {i}: {words[i % 12]} {words[(i * 5) % 12]} and {words[(i * 7 + 3) % 12]}" for i in range(40)]
        at = [datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=12 * i) for i in range(40)]  # 20 days
        meta = [psycopg.types.json.Jsonb({"topic": "travel" if i % 3 == 0 else "home"}) for i in range(40)]
        facts = [f"{words[i % 12]} matters, and so does {words[(i * 7) % 12]}" for i in range(12)]
        with psycopg.connect(admin, autocommit=True) as a:
            users = _users_on_both_workers(a)
        calls = []
        for u in users:
            common = "user_id => %s, project_id => 'p1'"
            spec = "recall => pymem.recall(k => 6, window_size => 0, min_content_chars => 0{})"
            calls += [
                (f"SELECT content, round(score::numeric, 9) FROM pymem.messages_recall({common}, query_vector => %s, "
                 "embedder => %s, query_text => 'coffee in paris', " + spec.format("") + ")", "q"),
                (f"SELECT content, round(score::numeric, 9) FROM pymem.messages_recall({common}, query_vector => %s, "
                 "embedder => %s, query_text => 'bergen piano', "
                 + spec.format(", metadata => '{\"topic\": \"travel\"}', as_of => '2026-01-12'") + ")", "q"),
                (f"SELECT content, round(score::numeric, 9) FROM pymem.messages_recall({common}, query_vector => %s, "
                 "embedder => %s, " + spec.format(", next_turn_weight => 0") + ")", "q"),
                (f"SELECT content, round(score::numeric, 9) FROM pymem.messages_recall({common}, "
                 "query_text => 'holiday dentist', " + spec.format("") + ")", ""),
                ("SELECT content, round(score::numeric, 9) FROM pymem.facts_search('user', %s, %s, %s, 'p1', k => 5, "
                 "query_text => 'coffee garden')", "q"),
                ("SELECT pymem.context_read(%s, 'bot', 'p1', query_vector => %s, embedder => %s, "
                 "query_text => 'coffee garden', max_facts => 4, recall => pymem.recall(window_size => 2))", "q"),
                ("SELECT thread_id, content FROM pymem.messages_unembedded(%s, %s, 'p1', max_messages => 3)", "e"),
            ]
        query = Vector(emb.embed(["coffee in paris, piano"])[0])

        def load_and_ask(dsn: str) -> list:
            with psycopg.connect(dsn, autocommit=True) as c:
                register_vector(c)
                for u in users:
                    c.execute("SELECT count(*) FROM pymem.messages_add_many(%s, 'default', %s, %s, 'p1', metadata => %s, "
                              "created_ats => %s, embeddings => %s, embedder => %s)",
                              (u, ["user", "assistant"] * 20, texts, meta, at, [Vector(v) for v in emb.embed(texts)], emb.name))
                    for i, f in enumerate(facts):
                        if i % 4 == 3:  # a fact without a vector
                            c.execute("SELECT pymem.fact_add('user', %s, %s, 'p1')", (u, f))
                        else:
                            c.execute("SELECT pymem.fact_add('user', %s, %s, 'p1', embedding => %s, embedder => %s)",
                                      (u, f, Vector(emb.embed([f])[0]), emb.name))
                    # messages the embedder has not embedded: none embedded them, or another one did
                    for i, other in enumerate(["", "", "aa-other", "zz-other", "aa-other"]):
                        text = f"later note {i} about coffee"
                        if other:
                            c.execute("SELECT count(*) FROM pymem.messages_add_many(%s, 'default', ARRAY['user'], ARRAY[%s], "
                                      "'p1', embeddings => ARRAY[%s], embedder => %s)", (u, text, Vector([1.0, 0.5, i]), other))
                        else:
                            c.execute("SELECT pymem.message_add(user_id => %s, role => 'user', content => %s, "
                                      "project_id => 'p1')", (u, text))
                    # embedded by this embedder, then last by another: not in the list
                    c.execute("SELECT pymem.message_embeddings_put(%s, 'zz-other', ARRAY['default'], ARRAY[3::bigint], "
                              "ARRAY[%s], 'p1')", (u, Vector([0.5, 0.5, 0.5])))
            with psycopg.connect(admin if dsn == app else dsn, autocommit=True) as a:  # vectors stored before 0017
                a.execute("UPDATE pymem.message_embeddings SET lexemes = NULL, tokens = NULL WHERE seq % 3 = 0")
            out = []
            with psycopg.connect(dsn, autocommit=True) as c:
                register_vector(c)
                for u in users:
                    for statement, with_vector in calls[:len(calls) // len(users)]:
                        args = {"q": (u, query, emb.name), "e": (u, emb.name), "": (u,)}[with_vector]
                        rows = c.execute(statement, args).fetchall()
                        if "context_read" in statement:  # a call alone (delegated); its facts and recalled messages
                            rows = [[f["content"] for f in rows[0][0]["user_facts"]],
                                    [m["content"] for m in rows[0][0]["recalled"]],
                                    [m["content"] for m in rows[0][0]["unembedded"]]]
                        out.append(rows)
            return out

        on_cluster, on_one_server = load_and_ask(app), load_and_ask(plain)
        assert all(on_one_server) and len(on_one_server) == 14
        assert [len(x) for x in on_one_server[5]] == [4, 5, 5]  # context_read: its facts, recalled, unembedded
        assert on_cluster == on_one_server
    finally:
        with psycopg.connect(citus_cluster.dsn, autocommit=True) as c:
            c.execute("SET citus.enable_create_database_propagation = off")
            c.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_the_change_feed_on_the_cluster_once_each_without_content_per_project(pymem_cluster):
    """Issue 57, item 4: the change feed on the cluster. Writes of users on both workers (facts,
    messages, a store entry) reach changes_since on the coordinator; a reader that resumes from
    the last position it saw, on a new connection each time, while writers on both workers go on,
    sees every change exactly once, in consecutive positions; rows and notifications carry keys,
    never content; the notification reaches a listener on the coordinator on the project's own
    channel; a role of project B never sees project A's changes; user_forget takes the user's
    rows out of the feed, the outbox's included, and leaves its receipt (docs/scaling-out.md)."""
    import json
    import re

    admin, app, role = pymem_cluster
    other = f"{role}_b"
    with psycopg.connect(admin, autocommit=True) as c:
        users = _users_on_both_workers(c)
        assert c.execute("SELECT pymem.change_feed_configure(enabled => true)").fetchone()[0] is True
        assert c.execute("SELECT pymem.change_feed_enabled()").fetchone()[0] is True
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(other)))
        c.execute(sql.SQL("GRANT pymem_app TO {}").format(sql.Identifier(other)))
        c.execute("SELECT pymem.tenant_bind(%s, 'fa')", (role,))
        c.execute("SELECT pymem.tenant_bind(%s, 'fb')", (other,))
    app_b = make_conninfo(admin, user=other)
    try:
        with psycopg.connect(app, autocommit=True) as a, psycopg.connect(app, autocommit=True) as listener, \
                psycopg.connect(app_b, autocommit=True) as b:
            chan_a = a.execute("SELECT pymem.change_channel('fa')").fetchone()[0]
            chan_b = b.execute("SELECT pymem.change_channel('fb')").fetchone()[0]
            assert chan_a != chan_b and all(re.fullmatch(r"pymem_changes_[0-9a-f]{32}", ch) for ch in (chan_a, chan_b))
            for call in ("SELECT pymem.change_channel('fa')", "SELECT * FROM pymem.changes_since('fa')"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    b.execute(call)
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(chan_a)))

            def write(conn: psycopg.Connection, project: str, u: str, i: int) -> None:
                conn.execute("SELECT pymem.fact_add('user', %s, %s, %s)", (u, f"Secret fact {i}", project))
                conn.execute("SELECT pymem.message_add(user_id => %s, role => 'user', content => %s, project_id => %s)",
                             (u, f"Secret message {i}", project))

            for u in users:
                write(a, "fa", u, 0)
                write(b, "fb", u, 0)
            a.execute("SELECT pymem.store_open('notes-fa', 'fa', true)")
            a.execute("SELECT pymem.store_write('notes-fa', 'todo.md', 'Secret text', project_id => 'fa')")
            # the writes ran on the workers; the notifications reach the listener on the coordinator,
            # on A's channel only (B's writes notify B's), by kind, no content
            notes = list(listener.notifies(timeout=5, stop_after=5))
            assert {n.channel for n in notes} == {chan_a}
            assert sorted(json.loads(n.payload)["kind"] for n in notes) == ["fact", "fact", "message", "message", "store_entry"]

            first = a.execute("SELECT position, kind, subject, keys FROM pymem.changes_since('fa', 0, 2)").fetchall()
            assert [r[0] for r in first] == [1, 2]
            # writers on both workers go on while a reader resumes from its last position, on a new
            # connection each time
            seen = [r[0] for r in first]
            rows = list(first)
            stop = threading.Event()

            def writer(u: str) -> None:
                with psycopg.connect(app, autocommit=True) as w:
                    for i in range(1, 11):
                        write(w, "fa", u, i)

            def reader() -> None:
                while True:
                    done = stop.is_set()
                    with psycopg.connect(app, autocommit=True) as r:
                        got = r.execute("SELECT position, kind, subject, keys FROM pymem.changes_since('fa', %s, 7)",
                                        (seen[-1],)).fetchall()
                    seen.extend(x[0] for x in got)
                    rows.extend(got)
                    if done and not got:
                        return

            threads = [threading.Thread(target=writer, args=(u,)) for u in users]
            read = threading.Thread(target=reader)
            for t in [*threads, read]:
                t.start()
            for t in threads:
                t.join()
            stop.set()
            read.join()
            total = len(users) * 2 * 11 + 1  # a fact and a message per user and round, and the store entry
            assert seen == list(range(1, total + 1))  # each change once, none lost, in order
            assert a.execute("SELECT count(*) FROM pymem.changes_since('fa', 0, 1000)").fetchone()[0] == total
            got = {(k, s) for _, k, s, _ in rows}
            assert got == {("fact", f"user:{u}") for u in users} | {("message", u) for u in users} \
                | {("store_entry", "notes-fa")}
            assert "Secret" not in json.dumps([r[3] for r in rows])
            # per user and kind, the changes come in the order they were written
            for u in users:
                ids = [r[3]["ids"][0] for r in rows if r[2] == f"user:{u}"]
                seqs = [r[3]["from_seq"] for r in rows if r[2] == u]
                assert ids == sorted(ids) and seqs == sorted(seqs) and len(ids) == len(seqs) == 11
            # project B: its own changes only, positions of its own
            mine = b.execute("SELECT position, subject FROM pymem.changes_since('fb')").fetchall()
            assert [p for p, _ in mine] == [1, 2, 3, 4] and {s for _, s in mine} == set(users) | {f"user:{u}" for u in users}
            # user_forget: the user's rows leave the feed (published or not), the receipt enters it
            a.execute("SELECT pymem.fact_add('user', %s, 'Secret late', 'fa')", (users[0],))  # still in the outbox
            receipt = a.execute("SELECT pymem.user_forget(%s, 'fa')", (users[0],)).fetchone()[0]
            assert receipt["counts"]["changes"] >= 2 * 11 + 1  # its facts and messages, and the late fact
            after = a.execute("SELECT kind, subject, keys FROM pymem.changes_since('fa', %s)", (total,)).fetchall()
            assert after == [("erasure", "", {"ids": [receipt["id"]]})]
            with psycopg.connect(admin, autocommit=True) as c:  # a superuser: every row, published or not
                for table in ("pymem.changes", "pymem.change_outbox"):
                    assert c.execute(sql.SQL("SELECT count(*) FROM {} WHERE project_id = 'fa' AND subject IN (%s, %s)").format(
                        sql.SQL(table)), (users[0], f"user:{users[0]}")).fetchone()[0] == 0, table
                assert c.execute("SELECT count(*) FROM pymem.change_outbox").fetchone()[0] == 0
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute("DELETE FROM pymem.tenant_roles WHERE role_name = %s", (other,))
            c.execute(sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(sql.Identifier(other), sql.Identifier(other)))
