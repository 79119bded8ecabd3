"""Consolidation of near-duplicate facts (issue 34, item 3): pymem.fact_duplicates finds the pairs
of one subject's active facts that say nearly the same thing (vector similarity, or the share of
the shorter fact's words the other has), and Memory.consolidate merges each through a supersede
(history kept, one active fact), in a dry run or for real, optionally asking a learner first.
Precision is measured on a labelled set of pairs shipped here (LABELLED)."""

from __future__ import annotations

import psycopg
import pytest

import pymem
from pymem import HashEmbedder, Memory
from pymem.llm import FactChange

# (a, b, whether they are one fact in two wordings): built for this test, not taken from anywhere
LABELLED = [
    ("Prefers tea over coffee", "Prefers tea", True),
    ("Lives in Oslo, Norway", "Lives in Oslo", True),
    ("Has a dog named Rex", "Has a dog called Rex", True),
    ("Works as a nurse at the city hospital", "Works as a nurse", True),
    ("Allergic to peanuts", "Is allergic to peanuts", True),
    ("Favourite colour is blue", "Favorite color is blue", True),
    ("Speaks German and French", "Speaks French", True),
    ("Likes tea", "Prefers tea", True),
    ("Is vegetarian", "Vegetarian", True),
    ("Birthday is on March 3", "Birthday: March 3", True),
    ("Drives a Tesla Model 3", "Drives a Tesla", True),
    ("Plays the guitar", "Plays guitar", True),
    ("Plays tennis on Sundays", "Plays tennis", True),
    ("Enjoys hiking in the mountains", "Enjoys mountain hiking", True),
    ("Has two cats", "Owns two cats", True),
    ("Lives in Oslo", "Lives in Bergen", False),
    ("Likes dogs", "Does not like dogs", False),
    ("Prefers tea over coffee", "Prefers coffee over tea", False),
    ("Has a sister", "Has a brother", False),
    ("Works at Google", "Worked at Google until 2020", False),
    ("Speaks French", "Is learning French", False),
    ("Born in 1990", "Born in 1991", False),
    ("Lives in New York", "Lives in York", False),
    ("Has two children", "Has three children", False),
    ("Is allergic to peanuts", "Is allergic to shellfish", False),
    ("Moved to Berlin in 2021", "Lives in Berlin", False),
    ("Eats meat", "Never eats meat", False),
    ("Works night shifts", "No longer works night shifts", False),
    ("Has a cat named Tom", "Has a dog named Tom", False),
    ("Runs marathons", "Runs a bakery", False),
]


@pytest.fixture
def db(dsn):
    with pymem.Database(pymem.Settings(dsn=dsn)) as d:
        yield d


def found(mem: Memory, user: str, a: str, b: str) -> bool:
    mem.persist(a, user=user)
    mem.persist(b, user=user)
    return bool(mem.consolidate(user=user, dry_run=True))


@pytest.mark.parametrize("embedder", [None, HashEmbedder()], ids=["words", "hash-vectors"])
def test_precision_on_the_labelled_pairs(db, embedder):
    """Each labelled pair, alone in a subject of its own, with the default thresholds. The figures
    go in the issue's note: words alone (and HashEmbedder's vectors, which are words too) find 12 of
    the 15 duplicates and wrongly pair 3 of the 15 others (a reordering, a qualifier that changes
    the fact: "until 2020", "New York"): precision 0.80, recall 0.80. That is why
    the command line only lists pairs until --apply, and --with-model lets a chat model decide."""
    mem = Memory(db=db, agent_id="bot", project_id="consolidate", embedder=embedder)
    tp = fp = fn = 0
    wrong = []
    for i, (a, b, same) in enumerate(LABELLED):
        hit = found(mem, f"pair-{i}", a, b)
        tp += hit and same
        fp += hit and not same
        fn += same and not hit
        if hit and not same:
            wrong.append((a, b))
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    print(f"consolidation on {len(LABELLED)} labelled pairs ({'words' if embedder is None else embedder.name}): "
          f"precision {precision:.2f}, recall {recall:.2f}; paired wrongly: {wrong}")
    assert precision >= 0.75 and recall >= 0.5, (precision, recall, wrong)
    # the negations are never paired, whatever the words share
    assert ("Likes dogs", "Does not like dogs") not in wrong and ("Eats meat", "Never eats meat") not in wrong


def test_a_dry_run_lists_and_changes_nothing_then_consolidate_merges_with_history(db):
    mem = Memory(db=db, agent_id="bot", project_id="consolidate", embedder=HashEmbedder())
    for fact in ("Prefers tea", "Prefers tea over coffee", "Lives in Oslo", "Lives in Bergen", "Likes dogs",
                 "Does not like dogs"):
        mem.persist(fact, user="ann")
    before = sorted(f.content for f in mem.retrieve(user="ann"))
    listed = mem.consolidate(user="ann", dry_run=True)
    assert [(m.kept, m.merged, m.applied, m.decision) for m in listed] == [
        ("Prefers tea over coffee", "Prefers tea", False, "threshold")]
    assert listed[0].overlap == 1.0 and 0.5 < listed[0].similarity <= 1.0
    assert sorted(f.content for f in mem.retrieve(user="ann")) == before
    merged = mem.consolidate(user="ann")
    assert [(m.kept, m.merged, m.applied) for m in merged] == [("Prefers tea over coffee", "Prefers tea", True)]
    assert sorted(f.content for f in mem.retrieve(user="ann")) == sorted(set(before) - {"Prefers tea"})
    kept = next(f for f in mem.retrieve(user="ann") if f.content == "Prefers tea over coffee")
    chain = mem.history(user="ann", fact_id=kept.id)
    assert [f.content for f in chain] == ["Prefers tea", "Prefers tea over coffee"]  # the merged one kept as history
    assert mem.consolidate(user="ann") == []  # nothing left to merge


def test_three_wordings_become_one_and_learned_facts_without_vectors_are_embedded_first(db, dsn):
    with psycopg.connect(dsn, autocommit=True) as c:  # learned by SQL: no vectors
        for fact in ("Speaks French", "Speaks German and French", "Speaks fluent German and French"):
            c.execute("SELECT pymem.fact_add('user', 'bea', %s, 'consolidate', write => pymem.fact_write(source => 'learned'))", (fact,))
    mem = Memory(db=db, agent_id="bot", project_id="consolidate", embedder=HashEmbedder())
    first = mem.consolidate(user="bea")
    second = mem.consolidate(user="bea")
    assert sum(m.applied for m in first + second) == 2
    assert [f.content for f in mem.retrieve(user="bea")] == ["Speaks fluent German and French"]


class Judge:
    """A stand-in for a chat model's reconcile: says which pairs are the same."""

    def __init__(self, answers: dict[frozenset, list[FactChange]]):
        self.answers = answers
        self.asked: list[tuple[list[str], list[dict]]] = []

    def reconcile(self, candidates, stored):
        self.asked.append((candidates, stored))
        changes = self.answers[frozenset((candidates[0], stored[0]["content"]))]
        return [FactChange(c.op, c.content, stored[0]["id"] if c.op != "add" else None) for c in changes]


def test_a_model_decides_keeps_apart_or_rewords(db):
    mem = Memory(db=db, agent_id="bot", project_id="consolidate")
    for fact in ("Prefers tea over coffee", "Prefers coffee over tea", "Plays guitar", "Plays the guitar well",
                 "Works at Google", "Worked at Google until 2020"):
        mem.persist(fact, user="cid")
    judge = Judge({frozenset(("Prefers tea over coffee", "Prefers coffee over tea")): [FactChange("delete", "x")],
                   frozenset(("Plays guitar", "Plays the guitar well")): [
                       FactChange("update", "Plays the guitar well (for 10 years)")],
                   frozenset(("Works at Google", "Worked at Google until 2020")): [FactChange("add", "x")]})
    merges = {frozenset((m.kept, m.merged)): m for m in mem.consolidate(user="cid", decide=judge)}
    assert {k: (m.decision, m.applied) for k, m in merges.items()} == {
        frozenset(("Prefers tea over coffee", "Prefers coffee over tea")): ("different", False),
        frozenset(("Plays guitar", "Plays the guitar well")): ("reworded", True),
        frozenset(("Works at Google", "Worked at Google until 2020")): ("different", False)}
    assert sorted(f.content for f in mem.retrieve(user="cid")) == sorted([
        "Prefers tea over coffee", "Prefers coffee over tea", "Plays the guitar well (for 10 years)",
        "Works at Google", "Worked at Google until 2020"])
    assert len(judge.asked) == 3 and judge.asked[0][1][0].keys() == {"id", "content"}


def test_invalid_calls_are_refused_with_22023(db, dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        for call in ("SELECT * FROM pymem.fact_duplicates('user', 'ann', 'consolidate', max_facts => 1)",
                     "SELECT * FROM pymem.fact_duplicates('user', 'ann', 'consolidate', min_overlap => 2)",
                     "SELECT * FROM pymem.fact_duplicates('user', 'ann', 'consolidate', min_similarity => -3)",
                     "SELECT * FROM pymem.fact_duplicates('user', '*', 'consolidate')",
                     "SELECT * FROM pymem.fact_duplicates('nope', 'ann', 'consolidate')"):
            with pytest.raises(psycopg.Error) as e:
                c.execute(call)
            assert e.value.sqlstate == "22023", call
        assert c.execute("SELECT count(*) FROM pymem.fact_duplicates('user', '', 'consolidate')").fetchone()[0] == 0
    mem = Memory(db=db, agent_id="bot", project_id="consolidate")
    with pytest.raises(pymem.ValidationError):
        mem.consolidate(user="ann", dry_run="yes")
    with pytest.raises(pymem.ValidationError):
        mem.consolidate(user="ann", decide=object())


def test_the_command_lists_then_merges_with_apply(db, dsn, capsys, monkeypatch):
    from pymem.cli import main

    mem = Memory(db=db, agent_id="bot", project_id="cli")
    for fact in ("Prefers tea", "Prefers tea over coffee"):
        mem.persist(fact, user="dan")
    monkeypatch.setenv("PYMEM_DSN", dsn)
    assert main(["consolidate", "--id", "dan", "--project", "cli"]) == 0
    out = capsys.readouterr()
    assert '"kept": "Prefers tea over coffee"' in out.out and '"applied": false' in out.out and "a dry run" in out.err
    assert len(mem.retrieve(user="dan")) == 2
    assert main(["consolidate", "--id", "dan", "--project", "cli", "--apply"]) == 0
    assert '"applied": true' in capsys.readouterr().out
    assert [f.content for f in mem.retrieve(user="dan")] == ["Prefers tea over coffee"]


def test_a_dry_run_writes_nothing_not_even_vectors_and_the_reader_role_may_run_it(db, dsn, as_role, capsys,
                                                                                 monkeypatch):
    """Issue 58, finding 6: Memory.consolidate(dry_run=True) and `pymem consolidate` without
    --apply stored the vectors of facts that had none and registered the embedder (and failed for
    the reader role with a PermissionError)."""
    from pymem.cli import main

    with psycopg.connect(dsn, autocommit=True) as c:  # learned by SQL: no vectors
        for fact in ("Prefers tea", "Prefers tea over coffee"):
            c.execute("SELECT pymem.fact_add('user', 'eli', %s, 'dry', write => pymem.fact_write(source => 'learned'))", (fact,))
    reader = as_role("pymem_dry_reader")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("GRANT pymem_reader TO pymem_dry_reader")

    def stored(c) -> tuple[int, int]:
        return (c.execute("SELECT count(*) FROM pymem.fact_embeddings").fetchone()[0],
                c.execute("SELECT count(*) FROM pymem.embedders").fetchone()[0])

    with psycopg.connect(dsn, autocommit=True) as c:
        assert stored(c) == (0, 0)
        listed = Memory(db=db, agent_id="bot", project_id="dry", embedder=HashEmbedder()).consolidate(
            user="eli", dry_run=True)
        assert [(m.kept, m.merged, m.applied) for m in listed] == [("Prefers tea over coffee", "Prefers tea", False)]
        assert stored(c) == (0, 0)
        with pymem.Database(pymem.Settings(dsn=reader)) as rdb:  # the reader role lists them too
            listed = Memory(db=rdb, agent_id="bot", project_id="dry", embedder=HashEmbedder()).consolidate(
                user="eli", dry_run=True)
            assert [m.merged for m in listed] == ["Prefers tea"]
        monkeypatch.setenv("PYMEM_DSN", reader)
        assert main(["consolidate", "--id", "eli", "--project", "dry", "--hash-vectors"]) == 0
        assert '"applied": false' in capsys.readouterr().out
        assert stored(c) == (0, 0)
        assert c.execute("SELECT count(*) FROM pymem.facts WHERE project_id = 'dry' AND superseded_at IS NULL"
                         ).fetchone()[0] == 2
