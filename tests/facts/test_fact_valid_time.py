"""Facts with valid time (issue 34, item 1; migrations/0006_v0_2_0_memory.sql, pymem.facts_at in
sql/api/facts_versions.sql): when a fact holds in the world, on every write path; the default
read shows what we believe now about now; facts_at answers "what held at T" (valid time), "what
did we believe at T" (record time) and both; a supersede that says when the world changed keeps
the old version true for the time before; the same content with another valid time is a new
version, never an overwrite; bad times are refused and write nothing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory

UTC = timezone.utc
VEC = "[" + ",".join(["0.5"] * 8) + "]"


def at(c: psycopg.Connection, subject: str = "alice", **kw) -> list[str]:
    """The contents facts_at returns for ``subject`` (user scope), newest first."""
    names = ", ".join(f"{k} => %({k})s::timestamptz" for k in kw)
    sql = f"SELECT content FROM pymem.facts_at('user', %(s)s{', ' + names if names else ''})"
    return [r[0] for r in c.execute(sql, {"s": subject, **kw}).fetchall()]


def default_reads(c: psycopg.Connection, subject: str = "alice") -> dict[str, list[str]]:
    """What the reads that answer "now" show of ``subject``."""
    return {
        "newest": [r[0] for r in c.execute("SELECT content FROM pymem.facts_newest('user', %s)", (subject,))],
        "scope": [r[0] for r in c.execute("SELECT content FROM pymem.facts_newest('user', '*')")],
        "search": [r[0] for r in c.execute(
            "SELECT content FROM pymem.facts_search('user', %s, query_text => 'lives oslo berlin lisbon')", (subject,))],
        "vector": [r[0] for r in c.execute("SELECT content FROM pymem.facts_search('user', %s, %s::vector, 'e8', k => 50)",
                                           (subject, VEC))],
        "context": [f["content"] for f in c.execute(
            "SELECT pymem.context_read(%s, NULL, query_text => 'lives')", (subject,)).fetchone()[0]["user_facts"]],
    }


def test_the_default_read_shows_only_what_holds_now(dsn):
    now = datetime.now(UTC)
    with psycopg.connect(dsn, autocommit=True) as c:
        for content, start, end in [("Lives in Oslo", "2019-08-01", "2024-05-01"),  # ended
                                    ("Lives in Berlin", "2024-05-01", None),         # holds
                                    ("Will live in Lisbon", now + timedelta(days=90), None),  # planned
                                    ("Likes tea", None, None)]:                      # always
            (i,) = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', %s, write => pymem.fact_write(valid_from => %s, valid_to => %s))",
                             (content, start, end)).fetchone()
            c.execute("SELECT pymem.fact_embeddings_put('user', 'alice', 'e8', ARRAY[%s]::bigint[], ARRAY[%s]::vector[])",
                      (i, VEC))
        shown = default_reads(c)
        for name, rows in shown.items():
            assert "Lives in Oslo" not in rows and "Will live in Lisbon" not in rows, (name, rows)
        assert set(shown["newest"]) == set(shown["vector"]) == {"Lives in Berlin", "Likes tea"}
        assert "Lives in Berlin" in shown["search"] and "Lives in Berlin" in shown["context"]
        # history, the export and facts_at still have every fact, with its valid time
        history = c.execute("SELECT content, valid_from, valid_to FROM pymem.fact_history('user', 'alice')").fetchall()
        assert {h[0] for h in history} == {"Lives in Oslo", "Lives in Berlin", "Will live in Lisbon", "Likes tea"}
        oslo = next(h for h in history if h[0] == "Lives in Oslo")
        assert (oslo[1], oslo[2]) == (datetime(2019, 8, 1, tzinfo=UTC), datetime(2024, 5, 1, tzinfo=UTC))
        exported = c.execute("SELECT pymem.user_export('alice')").fetchone()[0]["facts"]
        assert {f["content"] for f in exported} >= {"Lives in Oslo", "Will live in Lisbon"}
        assert set(at(c, valid_at="2020-01-01")) == {"Lives in Oslo", "Likes tea"}
        assert set(at(c, valid_at=now + timedelta(days=100))) == {"Lives in Berlin", "Will live in Lisbon", "Likes tea"}
        assert set(at(c)) == {"Lives in Berlin", "Likes tea"}  # neither time: the default read


def test_valid_time_record_time_and_both(dsn):
    """Oslo from 2019, learned in 2019; in January 2025 we learn the user moved to Berlin in May
    2024. Today we believe Oslo held until May 2024; in December 2024 we believed it still held."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('user', 'alice', 'Lives in Oslo', write => pymem.fact_write(valid_from => '2019-08-01', created_at => '2019-08-02') "
                  ")")
        c.execute("SELECT pymem.fact_add('user', 'alice', 'Likes tea', write => pymem.fact_write(created_at => '2019-08-02'))")
        succ = c.execute("SELECT id, created FROM pymem.fact_supersede('user', 'alice', 'Lives in Berlin', "
                         "old_content => 'Lives in Oslo', write => pymem.fact_write(valid_from => '2024-05-01', created_at => '2025-01-10'))").fetchone()
        assert succ[1] is True
        # a correction (no valid_from): tea was never true
        c.execute("SELECT pymem.fact_supersede('user', 'alice', 'Likes coffee', old_content => 'Likes tea', "
                  "write => pymem.fact_write(created_at => '2025-02-01'))")
        # what we believe now about now, and about other times
        assert set(at(c)) == {"Lives in Berlin", "Likes coffee"}
        assert set(at(c, valid_at="2020-06-01")) == {"Lives in Oslo", "Likes coffee"}
        assert set(at(c, valid_at="2024-08-01")) == {"Lives in Berlin", "Likes coffee"}
        # what we believed in December 2024 (about then, and about August 2024): Oslo, and tea
        assert set(at(c, as_of="2024-12-01")) == {"Lives in Oslo", "Likes tea"}
        assert set(at(c, as_of="2024-12-01", valid_at="2024-08-01")) == {"Lives in Oslo", "Likes tea"}
        # before anything was recorded, nothing was believed
        assert at(c, as_of="2019-01-01", valid_at="2020-01-01") == []
        # in January 2025, after the move was recorded but before the correction
        assert set(at(c, as_of="2025-01-15", valid_at="2020-01-01")) == {"Lives in Oslo", "Likes tea"}
        # a context for a point in time reads the same facts
        ctx = c.execute("SELECT pymem.context_read('alice', NULL, valid_at => '2020-06-01')").fetchone()[0]
        assert {f["content"] for f in ctx["user_facts"]} == {"Lives in Oslo", "Likes coffee"}
        ctx = c.execute("SELECT pymem.context_read('alice', NULL, recall => pymem.recall(as_of => '2024-12-01'))").fetchone()[0]
        assert {f["content"] for f in ctx["user_facts"]} == {"Lives in Oslo", "Likes tea"}
        ctx = c.execute("SELECT pymem.context_read('alice', NULL)").fetchone()[0]
        assert {f["content"] for f in ctx["user_facts"]} == {"Lives in Berlin", "Likes coffee"}


def test_another_valid_time_for_the_same_content_is_a_new_version(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        (first, created) = c.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Lives in Oslo', "
                                     "write => pymem.fact_write(valid_from => '2019-08-01'))").fetchone()
        assert created
        c.execute("SELECT pymem.fact_embeddings_put('user', 'alice', 'e8', ARRAY[%s]::bigint[], ARRAY[%s]::vector[])",
                  (first, VEC))
        # the same valid time again: idempotent; none given: kept
        assert c.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Lives in Oslo', "
                         "write => pymem.fact_write(valid_from => '2019-08-01'))").fetchone() == (first, False)
        assert c.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', ' Lives in Oslo ')").fetchone() == (first, False)
        # an end given: a new version that keeps the start, the old one in the history
        (second, created) = c.execute("SELECT id, created FROM pymem.fact_add('user', 'alice', 'Lives in Oslo', "
                                      "write => pymem.fact_write(valid_to => '2024-05-01'))").fetchone()
        assert created and second != first
        rows = c.execute("SELECT id, valid_from, valid_to, superseded_by FROM pymem.fact_history('user', 'alice') "
                         "ORDER BY id").fetchall()
        assert rows == [(first, datetime(2019, 8, 1, tzinfo=UTC), None, second),
                        (second, datetime(2019, 8, 1, tzinfo=UTC), datetime(2024, 5, 1, tzinfo=UTC), None)]
        # the vector came along, and a restatement is not a change in the world: the old version
        # is withdrawn, so Oslo is not believed to hold now
        assert c.execute("SELECT count(*) FROM pymem.fact_embeddings WHERE fact_id = %s", (second,)).fetchone()[0] == 1
        assert at(c) == [] and at(c, valid_at="2020-01-01") == ["Lives in Oslo"]
        assert [r[0] for r in c.execute("SELECT id FROM pymem.fact_chain('user', 'alice', %s)", (second,))] == [first, second]
        # fact_supersede with the same content restates too; without a valid time it is refused
        (third,) = c.execute("SELECT id FROM pymem.fact_supersede('user', 'alice', 'Lives in Oslo', id => %s, "
                             "write => pymem.fact_write(valid_from => '2019-09-01'))", (second,)).fetchone()
        assert c.execute("SELECT valid_from, valid_to FROM pymem.fact_get(%s)", (third,)).fetchone() == (
            datetime(2019, 9, 1, tzinfo=UTC), datetime(2024, 5, 1, tzinfo=UTC))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="cannot supersede itself"):
            c.execute("SELECT pymem.fact_supersede('user', 'alice', 'Lives in Oslo', id => %s)", (third,))
        # a batch: new facts take the valid time, one there already with another is restated
        rows = c.execute("SELECT ord, id, created FROM pymem.facts_add_many('user', ARRAY['alice', 'alice'], "
                         "ARRAY['Lives in Oslo', 'Speaks Norwegian'], write => pymem.fact_write(valid_from => '2019-10-01'))").fetchall()
        assert [r[2] for r in rows] == [True, True]
        got = dict(c.execute("SELECT content, valid_from FROM pymem.facts_newest('user', 'alice')").fetchall())
        assert got == {"Speaks Norwegian": datetime(2019, 10, 1, tzinfo=UTC)}  # Oslo ended in 2024
        assert c.execute("SELECT valid_from, valid_to FROM pymem.fact_get(%s)", (rows[0][1],)).fetchone() == (
            datetime(2019, 10, 1, tzinfo=UTC), datetime(2024, 5, 1, tzinfo=UTC))


def test_learned_changes_carry_a_valid_time(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        (oslo,) = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Lives in Oslo', "
                            "write => pymem.fact_write(created_at => now() - interval '2 years'))").fetchone()
        c.execute("SELECT pymem.fact_add('user', 'alice', 'Plays chess', write => pymem.fact_write(source => 'learned'))")
        changes = [{"op": "update", "fact_id": oslo, "content": "Lives in Berlin", "valid_from": "2025-05-01T00:00:00Z"},
                   {"op": "add", "content": "Works at a bakery", "valid_from": "2025-06-01", "valid_to": None},
                   {"op": "add", "content": "Plays chess", "valid_from": "2010-01-01"}]
        row = c.execute("SELECT changes FROM pymem.turn_record(user_id => 'alice', user_content => 'I moved to Berlin "
                        "last May and work at a bakery', assistant_content => 'Noted.', fact_changes => %s)",
                        (json.dumps(changes),)).fetchone()
        assert [ch["applied"] for ch in row[0]] == [True, True, True], row
        got = {r[0]: r[1] for r in c.execute("SELECT content, valid_from FROM pymem.facts_newest('user', 'alice')")}
        assert got == {"Lives in Berlin": datetime(2025, 5, 1, tzinfo=UTC),
                       "Works at a bakery": datetime(2025, 6, 1, tzinfo=UTC),
                       "Plays chess": datetime(2010, 1, 1, tzinfo=UTC)}
        assert row[0][2]["id"] != row[0][1]["id"] and row[0][2]["id"] in (
            r[0] for r in c.execute("SELECT id FROM pymem.facts_newest('user', 'alice')"))
        assert set(at(c, valid_at="2025-01-01")) == {"Lives in Oslo", "Plays chess"}
        # a new fact is written with its valid time: one version, not a version restated at once
        assert [r[0] for r in c.execute("SELECT content FROM pymem.fact_history('user', 'alice')")].count(
            "Works at a bakery") == 1


@pytest.mark.parametrize(
    ("call", "match"),
    [
        ("SELECT pymem.fact_add('user', 'bob', 'x', write => pymem.fact_write(valid_from => '2024-01-01', valid_to => '2023-01-01'))",
         "must be before valid_to"),
        ("SELECT pymem.fact_add('user', 'bob', 'x', write => pymem.fact_write(valid_from => '2024-01-01', valid_to => '2024-01-01'))",
         "must be before valid_to"),
        ("SELECT pymem.fact_add('user', 'bob', 'x', write => pymem.fact_write(valid_to => 'infinity'))", "finite"),
        ("SELECT pymem.facts_add_many('user', ARRAY['bob'], ARRAY['x'], write => pymem.fact_write(valid_from => '-infinity'))", "finite"),
        ("SELECT pymem.fact_supersede('user', 'bob', 'y', old_content => 'Seed', write => pymem.fact_write(valid_from => now() + interval '1 day'))",
         "later than the new version is recorded"),
        ("SELECT pymem.fact_supersede('user', 'bob', 'y', old_content => 'Seed', write => pymem.fact_write(valid_from => '2025-01-01', valid_to => '2024-01-01') "
         ")", "must be before valid_to"),
        ("SELECT pymem.facts_at('user', 'bob', valid_at => 'infinity')", "finite"),
        ("SELECT pymem.facts_at('user', '*', valid_at => '2020-01-01')", "one subject"),
        ("SELECT pymem.context_read('bob', NULL, valid_at => 'infinity')", "finite"),
        ("""SELECT pymem.turn_record(user_id => 'bob', user_content => 'hi', assistant_content => 'hello',
               fact_changes => '[{"op": "add", "content": "z", "valid_from": "soon"}]')""", "fact change 1 has a valid_from"),
        ("""SELECT pymem.turn_record(user_id => 'bob', user_content => 'hi', assistant_content => 'hello',
               fact_changes => '[{"op": "add", "content": "z", "valid_from": 2024}]')""", "fact change 1 has a valid_from"),
        ("""SELECT pymem.turn_record(user_id => 'bob', user_content => 'hi', assistant_content => 'hello',
               fact_changes => '[{"op": "add", "content": "z", "valid_from": "2025-01-01", "valid_to": "2024-01-01"}]')""",
         "fact change 1 has a valid_from"),
    ],
)
def test_bad_valid_times_are_refused_and_write_nothing(dsn, call, match):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('user', 'bob', 'Seed')")
        before = c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0], \
            c.execute("SELECT count(*) FROM pymem.messages").fetchone()[0]
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
            c.execute(call)
        after = c.execute("SELECT count(*) FROM pymem.facts").fetchone()[0], \
            c.execute("SELECT count(*) FROM pymem.messages").fetchone()[0]
        assert after == before


def test_the_view_and_facts_at_say_holds_the_same_way(dsn):
    """pymem.active_facts spells "holds now" out (a role with SELECT on the tables reads it with
    its own rights); facts_at calls pymem._fact_valid. Both must say the same."""
    with psycopg.connect(dsn) as c:
        valid = c.execute("SELECT prosrc FROM pg_proc WHERE oid = 'pymem._fact_valid'::regproc").fetchone()[0]
        view = c.execute("SELECT pg_get_viewdef('pymem.active_facts'::regclass)").fetchone()[0].replace("f.", "")
    assert "(valid_from IS NULL OR valid_from OPERATOR(pg_catalog.<=) at)" in valid
    assert "(valid_to IS NULL OR valid_to OPERATOR(pg_catalog.>) at)" in valid
    assert "((valid_from IS NULL) OR (valid_from <= now()))" in view, view
    assert "((valid_to IS NULL) OR (valid_to > now()))" in view, view


def test_a_bound_role_reads_only_its_tenant_at_any_time(dsn, as_role):
    bound = as_role("pymem_vt_service")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pymem.fact_add('user', 'alice', 'Lives in Oslo', project_id => 'a', write => pymem.fact_write(valid_to => '2024-01-01'))")
        c.execute("SELECT pymem.fact_add('user', 'alice', 'Lives in Rome', project_id => 'b', write => pymem.fact_write(valid_to => '2024-01-01'))")
        c.execute("GRANT pymem_app TO pymem_vt_service")
        c.execute("SELECT pymem.tenant_bind('pymem_vt_service', 'a')")
    try:
        with psycopg.connect(bound, autocommit=True) as c:
            rows = c.execute("SELECT content FROM pymem.facts_at('user', 'alice', valid_at => '2020-01-01', "
                             "project_id => 'a')").fetchall()
            assert rows == [("Lives in Oslo",)]
            for project in ("b", ""):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    c.execute("SELECT pymem.facts_at('user', 'alice', valid_at => '2020-01-01', project_id => %s)",
                              (project,))
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT pymem.tenant_unbind('pymem_vt_service')")


@pytest.fixture
def mem(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2)) as db:
        yield Memory(db=db, user_id="alice", embedder=HashEmbedder())


def test_memory_writes_and_reads_valid_time(mem):
    may = datetime(2024, 5, 1, tzinfo=UTC)
    oslo = mem.persist("Lives in Oslo", valid_from=datetime(2019, 8, 1, tzinfo=UTC), created_at=datetime(2019, 8, 2, tzinfo=UTC))
    assert oslo.created
    berlin = mem.update("Lives in Berlin", fact_id=oslo, valid_from=may)
    mem.persist_many(["Speaks German", "Rides a bike"], valid_from=may)
    now = mem.retrieve()
    assert {f.content for f in now} == {"Lives in Berlin", "Speaks German", "Rides a bike"}
    assert next(f for f in now if f.id == berlin).valid_from == may
    then = mem.retrieve(valid_at=datetime(2020, 1, 1, tzinfo=UTC))
    # issue 59, item 3: the version update(valid_from=may) closed says it held until May
    assert [f.content for f in then] == ["Lives in Oslo"] and then[0].valid_to == may
    # as believed before the update was recorded, it had no end
    [before] = mem.retrieve(as_of=datetime(2020, 1, 1, tzinfo=UTC))
    assert before.content == "Lives in Oslo" and before.valid_to is None
    # the same fact with an end: a new version; retrieval by meaning still reads "now"
    assert mem.persist("Speaks German", valid_to=datetime(2030, 1, 1, tzinfo=UTC)).created
    assert "Speaks German" in [f.content for f in mem.retrieve("german", k=3)]
    text = "\n".join(m["content"] for m in mem.context("where do I live?", valid_at=datetime(2020, 1, 1, tzinfo=UTC)))
    assert "Lives in Oslo" in text and "Lives in Berlin" not in text
    text = "\n".join(m["content"] for m in mem.context("where do I live?"))
    assert "Lives in Berlin" in text and "Lives in Oslo" not in text


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: m.persist("x", valid_from=datetime(2024, 1, 1)), "timezone-aware"),
        (lambda m: m.persist("x", valid_from=datetime(2024, 1, 1, tzinfo=UTC), valid_to=datetime(2023, 1, 1, tzinfo=UTC)),
         "must be before"),
        (lambda m: m.persist_many(["x"], valid_to="2024"), "must be a datetime"),
        (lambda m: m.retrieve("tea", valid_at=datetime(2024, 1, 1, tzinfo=UTC)), "no query"),
        (lambda m: m.read("q", valid_at=datetime(2024, 1, 1)), "timezone-aware"),
    ],
)
def test_memory_refuses_bad_valid_times_and_writes_nothing(mem, call, match):
    with pytest.raises(pymem.ValidationError, match=match):
        call(mem)
    assert mem.retrieve() == []
