"""turn_record's fact_changes (issue 16): a reconciling learner's add / update / delete of the
user's facts land with the turn's messages in one transaction; a malformed document refuses the
whole turn, a change that cannot apply is skipped. Raw SQL against the real server."""

from __future__ import annotations

import json

import psycopg
import pytest


def _turn(c, changes, user="alice", **kw):
    args = "".join(f", {k} => %({k})s" for k in kw)
    row = c.execute(
        "SELECT learned_ids, changes FROM pymem.turn_record(%(user)s, 'I moved to Bergen', 'Noted.',"
        f" fact_changes => %(changes)s::jsonb{args})",
        {"user": user, "changes": None if changes is None else json.dumps(changes), **kw}).fetchone()
    return row


def _add(c, content, user="alice", source="manual"):
    return c.execute("SELECT id FROM pymem.fact_add('user', %s, %s, write => pymem.fact_write(source => %s))", (user, content, source)).fetchone()[0]


def _active(c, user="alice"):
    return [r[0] for r in c.execute(
        "SELECT content FROM pymem.facts WHERE scope_id = %s AND superseded_by IS NULL ORDER BY id", (user,))]


def _written(c):
    return c.execute("SELECT (SELECT count(*) FROM pymem.messages), (SELECT count(*) FROM pymem.facts)").fetchone()


def test_add_update_and_delete_land_with_the_turn(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        oslo = _add(c, "Lives in Oslo", source="learned")
        shifts = _add(c, "Works night shifts")
        learned, changes = _turn(c, [
            {"op": "add", "content": "Has a cat"},
            {"op": "update", "fact_id": oslo, "content": "Lives in Bergen"},
            {"op": "delete", "fact_id": shifts, "content": "No longer works night shifts"},
        ], learned=["Likes hiking"])
        cat, bergen, no_shifts, hiking = (c.execute("SELECT id FROM pymem.facts WHERE content = %s", (t,)).fetchone()[0]
                                          for t in ("Has a cat", "Lives in Bergen", "No longer works night shifts",
                                                    "Likes hiking"))
        assert learned == [hiking]  # learned_ids still lists the `learned` facts only
        assert changes == [
            {"op": "add", "id": cat, "applied": True},
            {"op": "update", "fact_id": oslo, "id": bergen, "applied": True},
            {"op": "delete", "fact_id": shifts, "id": no_shifts, "applied": True},
        ]
        assert _active(c) == ["Likes hiking", "Has a cat", "Lives in Bergen", "No longer works night shifts"]
        # retired, not forgotten: both old facts stay in their history, linked to their successors
        assert c.execute("SELECT superseded_by FROM pymem.facts WHERE id = ANY(%s) ORDER BY id",
                         ([oslo, shifts],)).fetchall() == [(bergen,), (no_shifts,)]
        assert c.execute("SELECT source, confidence FROM pymem.facts WHERE id = %s", (bergen,)).fetchone() == (
            "learned", 0.6)
        assert _written(c) == (2, 6)


def test_a_change_that_cannot_apply_is_skipped_and_the_turn_is_stored(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        warnings = []
        c.add_notice_handler(lambda d: warnings.append(d.message_primary))
        bobs = _add(c, "Lives in Lisbon", user="bob")
        mine = _add(c, "Lives in Oslo")
        retired = _add(c, "Drinks coffee")
        c.execute("SELECT pymem.fact_supersede('user', 'alice', 'Drinks tea', id => %s)", (retired,))
        _, changes = _turn(c, [
            {"op": "update", "fact_id": bobs, "content": "Lives in Bergen"},        # another user's fact
            {"op": "delete", "fact_id": retired, "content": "Drinks nothing"},       # already superseded
            {"op": "update", "fact_id": mine, "content": " Lives in  Oslo "},        # equal to the old content
            {"op": "update", "fact_id": 999999, "content": "Lives in Bergen"},       # no such fact
            {"op": "add", "content": "   "},                                         # empty
            {"op": "update", "fact_id": mine, "content": "x" * 70000},               # too long
            {"op": "update", "fact_id": mine, "content": "Lives in Bergen"},         # fine
        ])
        assert [ch["applied"] for ch in changes] == [False] * 6 + [True]
        assert "no fact" in changes[0]["reason"] and "already superseded" in changes[1]["reason"]
        assert "supersede itself" in changes[2]["reason"] and "empty" in changes[4]["reason"]
        assert sum("skipped a learned" in w for w in warnings) == 6
        assert _active(c, "bob") == ["Lives in Lisbon"]  # another user's fact is never touched
        assert _active(c) == ["Drinks tea", "Lives in Bergen"]
        assert _written(c)[0] == 2


@pytest.mark.parametrize("changes, match", [
    ({"op": "add", "content": "x"}, "must be a JSON array"),
    ([{"op": "add", "content": "x"}] * 101, "at most 100 fact changes"),
    (["add"], "change 1 is not a JSON object"),
    ([{"op": "add", "content": "ok"}, {"op": "merge", "content": "x"}], "change 2 needs op"),
    ([{"content": "x"}], "needs op"),
    ([{"op": "add", "content": "x", "user_id": "bob"}], "has a key other than"),
    ([{"op": "add", "content": 5}], "needs content, a string"),
    ([{"op": "delete", "fact_id": 1}], "needs content"),
    ([{"op": "add", "content": "x", "fact_id": 3}], "names no fact_id"),
    ([{"op": "update", "content": "x"}], "needs fact_id"),
    ([{"op": "update", "fact_id": "1", "content": "x"}], "needs fact_id"),
    ([{"op": "update", "fact_id": 1.5, "content": "x"}], "needs fact_id"),
    ([{"op": "update", "fact_id": -1, "content": "x"}], "needs fact_id"),
])
def test_a_malformed_document_refuses_the_whole_turn(dsn, changes, match):
    with psycopg.connect(dsn, autocommit=True) as c:
        oslo = _add(c, "Lives in Oslo")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
            _turn(c, changes, learned=["Likes hiking"])
        assert _written(c) == (0, 1)
        assert _active(c) == ["Lives in Oslo"]
        assert c.execute("SELECT superseded_by FROM pymem.facts WHERE id = %s", (oslo,)).fetchone() == (None,)


def test_a_turn_that_fails_after_its_changes_leaves_nothing(dsn):
    """A failure late in the call (here: the claim of a summary with a bad lease) rolls back the
    messages, the learned facts and every supersede of the same call."""
    with psycopg.connect(dsn, autocommit=True) as c:
        oslo = _add(c, "Lives in Oslo")
        with pytest.raises(psycopg.Error):
            _turn(c, [{"op": "update", "fact_id": oslo, "content": "Lives in Bergen"}, {"op": "add", "content": "Cat"}],
                  summarize_every=1, keep_last=0, lease_seconds=-5)
        assert _written(c) == (0, 1)
        assert _active(c) == ["Lives in Oslo"]


def test_no_changes_reports_an_empty_list(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        assert _turn(c, None) == ([], [])
        assert _turn(c, []) == ([], [])


def test_the_app_role_applies_changes_within_its_project_only(dsn, as_role):
    """As a login role with pymem_app, bound to project 'acme': changes apply to the user's facts
    in that project; a fact id of the same user in another project is not found there."""
    app = as_role("svc_h16")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_app TO svc_h16")
        c.execute("SELECT pymem.tenant_bind('svc_h16', 'acme')")
        other = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Lives in Oslo', project_id => 'zeta')"
                          ).fetchone()[0]
        mine = c.execute("SELECT id FROM pymem.fact_add('user', 'alice', 'Lives in Oslo', project_id => 'acme')"
                         ).fetchone()[0]
    with psycopg.connect(app, autocommit=True) as c:
        _, changes = _turn(c, [{"op": "update", "fact_id": other, "content": "Lives in Bergen"},
                               {"op": "update", "fact_id": mine, "content": "Lives in Bergen"}], project_id="acme")
        assert [ch["applied"] for ch in changes] == [False, True]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _turn(c, [{"op": "update", "fact_id": other, "content": "Lives in Bergen"}], project_id="zeta")
    with psycopg.connect(dsn) as c:
        assert c.execute("SELECT project_id, content FROM pymem.facts WHERE superseded_by IS NULL ORDER BY project_id"
                         ).fetchall() == [("acme", "Lives in Bergen"), ("zeta", "Lives in Oslo")]
