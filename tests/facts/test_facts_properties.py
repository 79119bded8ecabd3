"""Property tests (hypothesis, stateful): random interleavings of adds, supersedes, forgets and
reads over several projects and users, checked against a plain Python model of the contract.
No read ever returns another subject's fact, and every read equals the model."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import pymem
from pymem import Memory

PROJECTS = ["", "acme", "globex"]
USERS = ["alice", "bob", "carol"]
CONTENTS = st.sampled_from(["likes tea", "likes  tea ", " prefers email", "prefers email", "vegan", "lives in Oslo"])


def norm(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
def test_random_interleavings_match_the_model(dsn):
    db = pymem.Database(pymem.Settings(dsn=dsn, pool_max_size=2))
    mems = {p: Memory(agent_id="bot", project_id=p, db=db) for p in PROJECTS}

    class Facts(RuleBasedStateMachine):
        @initialize()
        def reset(self):
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("TRUNCATE pymem.facts CASCADE")
            # (project, user) -> {normalised content: id} of active facts
            self.active: dict[tuple[str, str], dict[str, int]] = {}
            self.history: dict[tuple[str, str], int] = {}  # row counts incl. superseded

        def subject(self, p, u):
            return self.active.setdefault((p, u), {})

        @rule(p=st.sampled_from(PROJECTS), u=st.sampled_from(USERS), content=CONTENTS)
        def add(self, p, u, content):
            fid = mems[p].persist(content, id=u)
            facts = self.subject(p, u)
            key = norm(content)
            if key in facts:
                assert fid == facts[key], "idempotent add returned another id"
            else:
                assert fid not in {i for s in self.active.values() for i in s.values()}
                facts[key] = fid
                self.history[(p, u)] = self.history.get((p, u), 0) + 1

        @rule(p=st.sampled_from(PROJECTS), u=st.sampled_from(USERS), content=CONTENTS, pick=st.integers(0, 5))
        def supersede(self, p, u, content, pick):
            facts = self.subject(p, u)
            if not facts:
                with pytest.raises(pymem.NotFoundError):
                    mems[p].update(content, fact_id=10**12, id=u)
                return
            old_key = sorted(facts)[pick % len(facts)]
            new_key = norm(content)
            if new_key == old_key:
                with pytest.raises(pymem.ValidationError):
                    mems[p].update(content, fact_id=facts[old_key], id=u)
            elif new_key in facts:  # a merge: the old fact is retired into the active one, no row added
                merged = mems[p].update(content, fact_id=facts[old_key], id=u)
                assert merged == facts[new_key] and not merged.created
                del facts[old_key]
            else:
                new = mems[p].update(content, old=old_key, id=u)
                del facts[old_key]
                facts[new_key] = new
                self.history[(p, u)] += 1

        @rule(p=st.sampled_from(PROJECTS), u=st.sampled_from(USERS))
        def forget_subject(self, p, u):
            assert mems[p].forget(id=u) == self.history.get((p, u), 0)
            self.active[(p, u)] = {}
            self.history[(p, u)] = 0

        @rule(p=st.sampled_from(PROJECTS), u=st.sampled_from(USERS), pick=st.integers(0, 5))
        def forget_one(self, p, u, pick):
            facts = self.subject(p, u)
            if not facts:
                assert mems[p].forget(id=u, content="nothing like this") == 0
                return
            key = sorted(facts)[pick % len(facts)]
            chain = mems[p].history(id=u, fact_id=facts[key])
            assert mems[p].forget(id=u, fact_id=facts[key]) == len(chain)
            del facts[key]
            self.history[(p, u)] -= len(chain)

        @invariant()
        def reads_match_the_model_and_never_leak(self):
            if not hasattr(self, "active"):
                return
            for p in PROJECTS:
                everyone = mems[p].retrieve(id="*", limit=1000)
                assert all(f.project_id == p and f.scope == "user" for f in everyone)
                for u in USERS:
                    got = mems[p].retrieve(id=u, limit=1000)
                    assert all((f.project_id, f.scope_id) == (p, u) for f in got), "a read leaked another subject"
                    assert {norm(f.content): f.id for f in got} == self.subject(p, u)
                    assert [f.created_at for f in got] == sorted((f.created_at for f in got), reverse=True)
                    hist = mems[p].history(id=u)
                    assert all((f.project_id, f.scope_id) == (p, u) for f in hist)
                    assert len(hist) == self.history.get((p, u), 0)
                assert {f.id for f in everyone} == {i for (pp, _), s in self.active.items() if pp == p for i in s.values()}

    try:
        run_state_machine_as_test(
            Facts,
            settings=settings(
                max_examples=20,
                stateful_step_count=25,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            ),
        )
    finally:
        db.close()
