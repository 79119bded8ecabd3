"""Heavy users (issue 15, target 4): per-user recall indexes. recall_index_plan records a heavy
user and returns the CREATE INDEX CONCURRENTLY statement; recall (messages_recall, context_read)
then takes that user's candidates from the IVFFlat index and falls back to the exact scan when
fewer than it needs come back. The users here are small enough (<= 100 vectors: lists <= 10, so
probes = lists) that the index path must return exactly what the exact scan returns."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import psycopg
import pytest
from pgvector import Vector
from pgvector.psycopg import register_vector

import pymem
from conftest import PlanLog, plan_nodes
from pymem import HashEmbedder
from pymem.recall import recall_indexes
from pymem.options import RecallOptions

EMB = HashEmbedder()
WORDS = ("garden tomato berlin paris coffee bicycle piano invoice holiday dentist meeting recipe "
         "football weather train sister birthday laptop python mortgage").split()
QUERIES = ("where is my garden", "coffee in paris", "dentist meeting", "birthday of my sister", "the laptop invoice")
RECALL = ("SELECT r.thread_id, r.seq, r.score FROM pymem.messages_recall(user_id => %(u)s, project_id => %(p)s, "
          "query_vector => %(v)s, embedder => %(e)s, query_text => %(t)s, recall => pymem.recall(k => %(k)s, "
          "window_size => %(w)s, min_content_chars => 0, metadata => %(m)s, next_turn_weight => 0)) AS r")  # the index path alone
EXACT = ("SELECT r.thread_id, r.seq, r.score FROM pymem._recall_ranked(%(p)s, %(u)s, 'default', %(v)s, %(e)s, %(t)s, "
         "pymem.recall(k => %(k)s, min_content_chars => 0, window_size => %(w)s, "
         f"lexical_weight => {RecallOptions().lexical_weight}, since => NULL, until => NULL, metadata => %(m)s, "
         "next_turn_weight => 0, time_weight => 0)) AS r")


def _add(c: psycopg.Connection, user: str, n: int, project: str = "", seed: int = 1) -> None:
    """n messages with distinct texts (so distinct vectors) in three threads, every other one with
    metadata {"tag": "x"}, and their vectors."""
    rng = random.Random(seed)
    for t in range(3):
        idx = list(range(t, n, 3))
        texts = [f"note {i}: {' '.join(rng.sample(WORDS, 3))}" for i in idx]
        c.execute("SELECT count(*) FROM pymem.messages_add_many(user_id => %s, thread_id => %s, roles => %s, "
                  "contents => %s, project_id => %s, metadata => %s::jsonb[], embeddings => %s, embedder => %s)",
                  (user, "default" if t == 0 else f"t{t}", ["user"] * len(idx), texts, project,
                   [json.dumps({"tag": "x"} if i % 2 == 0 else {}) for i in idx],
                   [Vector(v) for v in EMB.embed(texts)], EMB.name))


@pytest.fixture
def db(dsn):
    with pymem.connect(dsn) as c:
        # no auto-analyze in the middle of a test: at 90 vectors the analyzed planner rightly
        # prefers the exact scan, so a plan check must not depend on when autovacuum wakes up
        # (the heavy users' cost at scale is bench/heavy.py's)
        for table in ("messages", "message_embeddings", "message_lexemes"):
            c.execute(f"ALTER TABLE pymem.{table} SET (autovacuum_enabled = false)")
        register_vector(c)
        _add(c, "heavy", 90)
        _add(c, "light", 30, seed=2)
        _add(c, "heavy", 90, project="other", seed=3)  # the same user id in another project
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as d:
        yield d


def _build(db, project: str = "", min_messages: int = 60) -> list[dict]:
    return recall_indexes(db, project, min_messages)


def _params(q: str, *, user: str = "heavy", project: str = "", k: int = 5, hybrid: bool = False,
            window: int = 20, metadata: str | None = None) -> dict:
    return {"u": user, "p": project, "v": Vector(EMB.embed([q])[0]), "e": EMB.name, "t": q if hybrid else None,
            "k": k, "w": window, "m": metadata}


def _exact_scan_ran(log: PlanLog) -> bool:
    """Whether the recall fell back to the exact scan (_recall_ranked)."""
    return any("_recall_ranked" in x.get("Query Text", "") for x in log.plans)


def _same_ranking(got: list, want: list) -> None:
    """The same rows in the same order, the same scores (to 9 decimals)."""
    assert [(t, s) for t, s, _ in got] == [(t, s) for t, s, _ in want]
    assert [round(x, 9) for _, _, x in got] == [round(x, 9) for _, _, x in want]


def _written_at(dsn: str, when: str, where: str) -> None:
    """Give the heavy user's messages matching `where` (and their vectors and lexemes) the time `when`."""
    with psycopg.connect(dsn, autocommit=True) as c:
        for table in ("messages", "message_embeddings", "message_lexemes"):
            c.execute(f"UPDATE pymem.{table} SET created_at = {when} "
                      f"WHERE project_id = '' AND user_id = 'heavy' AND {where}")


def _index_scans(log: PlanLog, time: bool = False) -> list[str]:
    """The user's IVFFlat index scans; time: its time index's (pymem._recall_time_index)."""
    return [n["Index Name"] for p in log.plans for n in plan_nodes(p["Plan"])
            if n.get("Index Name", "").startswith("message_embeddings_recall_")
            and n["Index Name"].endswith("_time") == time]


def test_plan_records_and_builds_the_heavy_users_index_only(db, dsn):
    plan = _build(db)
    # the IVFFlat index, its time index, and the user's words
    assert [(s["user_id"], s["action"]) for s in plan] == [("heavy", "create"), ("heavy", "create"), ("heavy", "fill")]
    assert plan[0]["vectors"] == 90
    assert "CREATE INDEX CONCURRENTLY" in plan[0]["statement"] and "lists = 9" in plan[0]["statement"]
    assert plan[1]["statement"].startswith("CREATE INDEX CONCURRENTLY IF NOT EXISTS message_embeddings_recall_")
    assert "_time ON pymem.message_embeddings (created_at) WHERE project_id = '' AND user_id = 'heavy'" in plan[1]["statement"]
    with psycopg.connect(dsn) as c:
        rows = c.execute("SELECT r.project_id, r.user_id, r.lists, r.vectors, i.indisvalid, t.indisvalid "
                         "FROM pymem.recall_indexes AS r "
                         "JOIN pg_index AS i ON i.indexrelid = ('pymem.' || r.index_name)::regclass "
                         "JOIN pg_index AS t ON t.indexrelid = ('pymem.' || r.index_name || '_time')::regclass").fetchall()
    assert rows == [("", "heavy", 9, 90, True, True)]  # superuser: RLS does not hide the other projects
    assert _build(db) == []  # up to date: nothing to run
    drop = _build(db, min_messages=91)  # below the threshold now: dropped and forgotten
    assert [(s["user_id"], s["action"]) for s in drop] == [("heavy", "drop"), ("heavy", "drop")]
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.recall_indexes").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'message_embeddings_recall_%'").fetchone()[0] == 0


def test_an_invalid_or_missing_index_is_rebuilt_and_not_used_meanwhile(db, dsn):
    _build(db)
    with psycopg.connect(dsn, autocommit=True) as c:
        name = c.execute("SELECT index_name FROM pymem.recall_indexes").fetchone()[0]
        c.execute(f"DROP INDEX pymem.{name}")
        register_vector(c)
        log = PlanLog(c, analyze=False)
        c.execute(RECALL, _params("coffee in paris")).fetchall()
        assert _index_scans(log) == []  # recorded, but no valid index: the exact scan
    assert [s["action"] for s in _build(db)] == ["drop", "create"]  # the time index is still there
    with psycopg.connect(dsn, autocommit=True) as c:  # a time index a failed build left invalid
        c.execute(f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'pymem.{name}_time'::regclass")
        register_vector(c)
        log = PlanLog(c, analyze=False)
        since = RECALL.replace("metadata =>", "since => now() - interval '1 hour', metadata =>")
        assert len(c.execute(since, _params("coffee in paris")).fetchall()) == 5
        assert _index_scans(log, time=True) == []  # not used meanwhile
    plan = _build(db)
    assert [(s["action"], s["statement"]) for s in plan] == [
        ("drop", f"DROP INDEX CONCURRENTLY IF EXISTS pymem.{name}_time"),
        ("create", f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name}_time ON pymem.message_embeddings (created_at) "
                   "WHERE project_id = '' AND user_id = 'heavy' AND embedder = 'hash-384-v1' AND created_at > '-infinity'")]
    assert _build(db) == []


@pytest.mark.parametrize("hybrid", [False, True])
def test_recall_through_the_index_returns_the_exact_ranking(db, dsn, hybrid):
    _build(db)
    with pymem.connect(dsn) as c:
        register_vector(c)
        for q in QUERIES:
            # window 0: every row eligible, so the hybrid's candidates (up to 200) are all of the
            # user's rows and BM25's statistics are the exact ones
            p = _params(q, hybrid=hybrid, window=0)
            log = PlanLog(c)
            got = c.execute(RECALL, p).fetchall()
            assert _index_scans(log), "the recall did not read the user's index"
            assert not _exact_scan_ran(log), "the exact scan ran"
            _same_ranking(got, c.execute(EXACT, p).fetchall())


@pytest.mark.parametrize("time_index", [True, False])
@pytest.mark.parametrize("hybrid", [False, True])
def test_a_named_time_through_the_index_returns_the_exact_ranking(db, dsn, hybrid, time_index):
    """A named time (time_from / time_to, issue 32): the k best and the named time's k best come
    from one ranking of the index's candidates, with the candidates created in the named time
    added, and equal the exact scan's: the same rows, the same scores (the time bonus on top).
    Those of the named time are all of its rows by the time index (at most 5,000 here), or, without
    the time index, the nearest by a second IVFFlat pass."""
    _written_at(dsn, "'2024-05-10'", "thread_id = 't1'")  # thread t1 was written in May 2024
    _build(db)
    if not time_index:
        with psycopg.connect(dsn, autocommit=True) as c:
            name = c.execute("SELECT pymem._recall_time_index(index_name) FROM pymem.recall_indexes").fetchone()[0]
            c.execute(f"DROP INDEX pymem.{name}")
    timed = RECALL.replace("next_turn_weight => 0", "next_turn_weight => 0, time_from => '2024-05-01', "
                           "time_to => '2024-06-01'")
    got = {}
    with pymem.connect(dsn) as c:
        register_vector(c)
        for q in QUERIES:
            for k in (3, 8):
                log = PlanLog(c)
                got[q, k] = c.execute(timed, _params(q, hybrid=hybrid, window=0, k=k)).fetchall()
                assert _index_scans(log), "the recall did not read the user's index"
                assert bool(_index_scans(log, time=True)) == time_index
                assert not _exact_scan_ran(log), "the exact scan ran"
                assert any(t == "t1" for t, _, _ in got[q, k]) and len(got[q, k]) == k
        c.execute("DELETE FROM pymem.recall_indexes")  # unregistered: the exact scan
        for (q, k), rows in got.items():
            _same_ranking(rows, c.execute(timed, _params(q, hybrid=hybrid, window=0, k=k)).fetchall())


@pytest.mark.parametrize("hybrid", [False, True])
def test_a_narrow_time_is_read_through_the_time_index(db, dsn, hybrid):
    """since / until holding few of a heavy user's messages: those rows by the user's time index,
    by exact distance, and no exact scan of all of the user's rows. Before the time index, the
    IVFFlat scan ran through the whole index looking for them and, finding fewer than k, fell back
    to the exact scan (0.6 s for a day holding 20 of 160,000 messages: bench/reports/
    2026-12-04-recall-time-index)."""
    _written_at(dsn, "now() - interval '7 days'", "thread_id = 't2' AND seq <= 3")  # three of t2, last week
    _build(db)
    span = ("since => now() - interval '8 days', until => now() - interval '6 days'")
    recall = RECALL.replace("metadata =>", f"{span}, metadata =>")
    exact = EXACT.replace("since => NULL, until => NULL", span)
    with pymem.connect(dsn) as c:
        register_vector(c)
        for q in QUERIES:
            p = _params(q, hybrid=hybrid, window=0)
            log = PlanLog(c)
            got = c.execute(recall, p).fetchall()
            assert _index_scans(log, time=True), "the recall did not read the user's time index"
            assert not _exact_scan_ran(log), "the exact scan ran"
            assert 0 < len(got) <= 3 and {t for t, _, _ in got} == {"t2"}
            _same_ranking(got, c.execute(exact, p).fetchall())


def test_filters_still_apply_and_k_rows_come_back(db, dsn):
    _build(db)
    with pymem.connect(dsn) as c:
        register_vector(c)
        for q in QUERIES:
            # the window excludes the newest 20 of thread 'default'; the metadata filter half
            p = _params(q, k=10, metadata=json.dumps({"tag": "x"}))
            log = PlanLog(c)
            got = c.execute(RECALL, p).fetchall()
            assert _index_scans(log)
            assert not _exact_scan_ran(log), "the exact scan ran"
            assert len(got) == 10
            assert got == c.execute(EXACT, p).fetchall()
        # fewer eligible rows than k (45 'x' rows, 15 of them in thread 'default', all in the
        # window: 30), and the floor (no word, no positive cosine) leaves some of those out too:
        # the candidates reached rows without a positive cosine, so no row farther from the query
        # has one and the exact scan is not needed; the result is the exact scan's
        p = _params("coffee in paris", k=40, window=30, metadata=json.dumps({"tag": "x"}))
        log = PlanLog(c, analyze=False)
        got = c.execute(RECALL, p).fetchall()
        assert _index_scans(log)
        assert not _exact_scan_ran(log), "the exact scan ran"
        exact = c.execute(EXACT, p).fetchall()
        assert 0 < len(got) == len(exact) < 30
        assert got == exact
        # with a min_score the candidates cannot tell: fewer than k, the exact scan runs
        log = PlanLog(c, analyze=False)
        scored = c.execute(RECALL.replace("metadata =>", "min_score => -1, metadata =>"), p).fetchall()
        assert _exact_scan_ran(log), "no exact fallback"
        assert scored == exact


def test_context_read_uses_the_index(db, dsn):
    _build(db)
    with pymem.connect(dsn) as c:
        register_vector(c)
        log = PlanLog(c, analyze=False)
        ctx = c.execute("SELECT pymem.context_read(user_id => 'heavy', query_vector => %s, embedder => %s, "
                        "query_text => 'coffee in paris', recall => pymem.recall(k => 5, min_content_chars => 0))",
                        (Vector(EMB.embed(["coffee in paris"])[0]), EMB.name)).fetchone()[0]
        assert _index_scans(log)
        assert len(ctx["recalled"]) == 5


def test_recency_or_importance_weights_take_the_exact_scan(db, dsn):
    _build(db)
    with pymem.connect(dsn) as c:
        register_vector(c)
        for weights in ("recency_weight => 0.2", "importance_weight => 0.1"):
            log = PlanLog(c, analyze=False)
            got = c.execute(RECALL.replace("k => %(k)s", f"k => %(k)s, {weights}"), _params("coffee in paris")).fetchall()
            assert len(got) == 5
            assert _index_scans(log) == []
            assert _exact_scan_ran(log)


def test_light_users_and_other_projects_keep_the_exact_scan(db, dsn):
    _build(db)
    with pymem.connect(dsn) as c:
        register_vector(c)
        for user, project in (("light", ""), ("heavy", "other")):
            log = PlanLog(c, analyze=False)
            got = c.execute(RECALL, _params("coffee in paris", user=user, project=project)).fetchall()
            assert len(got) == 5
            assert _index_scans(log) == []
            assert not [p for p in log.plans if "message_embeddings AS e" in p.get("Query Text", "")
                        and "LIMIT $9" in p.get("Query Text", "")], "the candidate statement ran"


def test_bad_min_messages_is_refused(db, dsn):
    for bad in (0, -5, None):
        with pytest.raises(pymem.ValidationError, match="min_messages") as err:
            recall_indexes(db, "", bad)
        assert err.value.hint == "Pass min_messages=50000 (the default) or another positive count."
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.recall_indexes").fetchone()[0] == 0
    out = subprocess.run([sys.executable, "-m", "pymem.cli", "recall-indexes", "--min-messages", "0"],
                         env={**os.environ, "PYMEM_DSN": dsn}, capture_output=True, text=True)
    assert out.returncode == 1 and "min_messages must be a positive number" in out.stderr and "22023" in out.stderr
    assert "--min-messages 50000" in out.stderr


def test_cli_dry_run_records_nothing_and_the_run_builds(db, dsn):
    env = {**os.environ, "PYMEM_DSN": dsn}
    cmd = [sys.executable, "-m", "pymem.cli", "recall-indexes", "--min-messages", "60"]
    out = subprocess.run([*cmd, "--dry-run"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("CREATE INDEX CONCURRENTLY") and "dry run" in out.stderr
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.recall_indexes").fetchone()[0] == 0
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT count(*) FROM pymem.recall_indexes").fetchone()[0] == 1


def test_tenants_cannot_read_or_plan_indexes(db, dsn, as_role, admin):
    _build(db)
    app = as_role("recall_app")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO recall_app")
        c.execute("SELECT pymem.tenant_bind('recall_app', 'other')")
    with psycopg.connect(app, autocommit=True) as c:
        for stmt in ("SELECT * FROM pymem.recall_indexes",
                     "SELECT * FROM pymem.recall_index_plan(project_id => 'other', min_messages => 1)",
                     "SELECT * FROM pymem.recall_index_plan(project_id => '', min_messages => 1)",
                     "INSERT INTO pymem.recall_indexes VALUES ('other', 'heavy', 'e', 'x', 3, 1, 1)"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(stmt)
    with psycopg.connect(dsn, autocommit=True) as c:  # forced RLS: the owner sees the tenant's rows only
        c.execute("SET ROLE pymem_owner")
        for project, rows in (("other", 0), ("", 1)):
            with c.transaction():
                c.execute("SELECT pymem.set_tenant(%s)", (project,))
                assert c.execute("SELECT count(*) FROM pymem.recall_indexes").fetchone()[0] == rows


def test_a_held_plan_lock_times_out_naming_its_holder(db, dsn, as_role):
    """Issue 36, item 8: the plan's advisory lock key is computable by any role, which could hold
    it and stall `pymem recall-indexes` (until the statement timeout, with a message saying only
    that). The wait is bounded (lock_timeout; the SQL's own 60 s when the caller set none) and
    fails with 55P03 naming who holds the key."""
    anyone = as_role("recall_lock_holder")  # no pymem role at all
    with psycopg.connect(anyone, autocommit=True) as holder:
        holder.execute("SET application_name = 'lock-squatter'")
        pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
        holder.execute("SELECT pg_advisory_lock(hashtext('pymem.recall_index_plan'), hashtext(''))")
        started = time.monotonic()
        with pytest.raises(pymem.TimeoutError, match="recall-index lock of project ''") as err:
            recall_indexes(db, "", 60, lock_timeout=1)
        assert time.monotonic() - started < 8
        assert err.value.sqlstate == "55P03" and f"pid {pid} (role recall_lock_holder" in str(err.value)
        assert "lock-squatter" in str(err.value)
        out = subprocess.run([sys.executable, "-m", "pymem.cli", "recall-indexes", "--min-messages", "60",
                              "--lock-timeout", "1"], env={**os.environ, "PYMEM_DSN": dsn}, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 1 and "TimeoutError" in out.stderr and f"pid {pid}" in out.stderr, out.stderr
        assert "--lock-timeout" in out.stderr and "[SQLSTATE 55P03]" in out.stderr
        with psycopg.connect(dsn, autocommit=True) as c:  # psql: the caller's lock_timeout bounds it too
            c.execute("SET lock_timeout = '500ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable, match="recall-index lock"):
                c.execute("SELECT * FROM pymem.recall_index_plan(min_messages => 60)")
    with psycopg.connect(dsn) as c:  # nothing was recorded; and once the lock is free, the plan runs
        assert c.execute("SELECT count(*) FROM pymem.recall_indexes").fetchone()[0] == 0
        c.execute("SET lock_timeout = 0")
        assert len(c.execute("SELECT * FROM pymem.recall_index_plan(min_messages => 60)").fetchall()) == 3  # create x 2, fill
        assert c.execute("SHOW lock_timeout").fetchone()[0] == "0"  # the SQL's 60 s was for the lock only
        c.rollback()
    assert [s["action"] for s in recall_indexes(db, "", 60)] == ["create", "create", "fill"]


def test_the_index_ddl_runs_under_the_pinned_search_path(db, dsn, admin):
    """Issue 36, item 8: `pymem recall-indexes` ran its CREATE INDEX under the caller's search
    path, so an operator planted in a schema listed before pg_catalog became part of the owner's
    index (and ran as the owner on every insert). It runs under migrate's pinned path, and the
    connection's own path is back afterwards."""
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE SCHEMA plant")
        c.execute("CREATE FUNCTION plant.text_eq(a text, b text) RETURNS boolean IMMUTABLE LANGUAGE sql "
                  "AS 'SELECT a OPERATOR(pg_catalog.=) b'")
        c.execute("CREATE OPERATOR plant.= (LEFTARG = text, RIGHTARG = text, FUNCTION = plant.text_eq)")
    caller = psycopg.conninfo.make_conninfo(dsn, options="-c search_path=plant,pg_catalog,public")
    with pymem.Database(pymem.Settings(dsn=caller, pool_min_size=1, pool_max_size=1)) as planted:
        assert [s["action"] for s in recall_indexes(planted, "", 60)] == ["create", "create", "fill"]
        with planted.connection() as conn:
            assert conn.execute("SHOW search_path").fetchone()[0] == "plant,pg_catalog,public"
    with psycopg.connect(dsn) as c:
        uses = c.execute("SELECT count(*) FROM pg_depend AS d JOIN pg_class AS i ON i.oid = d.objid "
                         "WHERE d.refclassid = 'pg_operator'::regclass "
                         "AND d.refobjid = 'plant.=(text,text)'::regoperator").fetchone()[0]
        assert uses == 0, f"an index of {dbname} uses the planted operator"
        assert c.execute("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'message_embeddings_recall_%'"
                         ).fetchone()[0] == 2  # the IVFFlat index and its time index
