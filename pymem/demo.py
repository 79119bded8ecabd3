"""``pymem demo``: a scripted two-user conversation (both sides scripted, no model needed)
that prints, turn by turn, the context pymem would send to a chat model: facts learned and
reconciled (a fact updated, another retired, by what the user says), the window sliding, a
summary forming, a long-ago message recalled, and the two users never mixing. The learner is
the configured chat model (``PYMEM_LLM_MODEL``: `pymem.llm.ChatLearner`) or, without one,
`RuleLearner`, a few fixed rules standing in for it, and the demo says which. Runs on the embedded server unless PYMEM_DSN is set; safe to repeat (it
uses project "pymem-demo" and clears it first). It says so, and ends with the commands that show
what it stored (``pymem export --project pymem-demo --user ...``, psql, and last the memory page:
``pymem serve --project pymem-demo``)."""

from __future__ import annotations

import re
import textwrap

from . import migrations, server
from .connection import resolve_conninfo
from .database import Database
from .embedders import HashEmbedder
from .llm import ChatClient, ChatLearner, FactChange
from .memory import Memory
from .settings import Settings

PROJECT = "pymem-demo"

SCRIPT = [  # (user, what the user says, the scripted answer)
    ("alice@example.com", "Hi! My name is Alice and I am allergic to peanuts.", "Nice to meet you, Alice. Noted: no peanuts."),
    ("bob@example.com", "Hello, I am Bob. I prefer phone calls over email.", "Hi Bob, phone calls it is."),
    ("alice@example.com", "I live in Oslo and I work night shifts.", "Oslo, night shifts. Got it."),
    ("alice@example.com", "Can you recommend a quiet cafe for the morning?", "Try Fuglen; it is calm before noon."),
    ("bob@example.com", "I live in Lisbon.", "Lisbon, lovely."),
    ("alice@example.com", "Actually, I moved. I live in Bergen now.", "Updated: Bergen."),
    ("alice@example.com", "What is a good hiking trail near me?", "Stoltzekleiven is a classic in Bergen."),
    ("alice@example.com", "I no longer work night shifts.", "Good news: mornings are yours."),
    ("alice@example.com", "Thanks, and a snack to bring along?", "Trail mix without nuts, given your allergy."),
    ("alice@example.com", "Remind me: what am I allergic to?", "Peanuts."),
]


class RuleLearner:
    """The demo's stand-in for a chat model: fixed rules, not a language model. ``extract``: the
    clauses of the user's message about the speaker ("I ...", "My ...", split at sentence ends
    and at " and I "), questions left out, told about the user in the third person as a chat
    model's extraction does ("I live in Oslo" -> "Lives in Oslo", "My name is Alice" -> "Name is
    Alice"), so that the facts block never reads as if the assistant said them. ``reconcile``: a
    fact that starts with the same two words as a stored one ("Lives in ...") UPDATEs it; "No
    longer X" against a stored "X" DELETEs (retires) it; a fact already stored is NONE; anything
    else is ADDed."""

    def extract(self, message: str) -> list[str]:
        clauses = [c.strip().rstrip(".!") for c in re.split(r"(?<=[.!?])\s+|,? and (?=I\b)", message)]
        return [self._about_the_user(c) for c in clauses if re.match(r"^(I|My)\b", c) and not c.endswith("?")]

    @staticmethod
    def _about_the_user(clause: str) -> str:
        """A first-person clause in the third person, as a fact about the user."""
        if clause.startswith("My "):
            rest = clause[3:]
            return rest[:1].upper() + rest[1:]
        words = clause.split()[1:]  # after "I"
        if words[:1] == ["am"] and len(words) == 2 and words[1][:1].isupper():
            return f"Name is {words[1]}"  # "I am Bob"
        negated = words[:2] in (["no", "longer"], ["do", "not"], ["don't"]) or words[:1] == ["don't"]
        if negated:
            words = [w for w in words[(1 if words[0] == "don't" else 2):] if w != "anymore"]
        if words:
            words[0] = _third_person(words[0])
        text = " ".join((["no", "longer"] if negated else []) + words)
        return text[:1].upper() + text[1:]

    @staticmethod
    def _key(text: str) -> str:
        return " ".join(text.lower().split()[:2])

    def reconcile(self, candidates: list[str], stored: list[dict]) -> list[FactChange]:
        changes = []
        for c in candidates:
            if c.lower().startswith("no longer "):
                said = c[len("no longer "):].lower()
                old = next((f for f in stored if f["content"].lower().rstrip(".") == said), None)
                changes.append(FactChange("delete", c, old["id"]) if old else FactChange("add", c))
                continue
            if any(f["content"] == c for f in stored):
                continue  # NONE: already known
            old = next((f for f in stored if self._key(f["content"]) == self._key(c)), None)
            changes.append(FactChange("update", c, old["id"]) if old else FactChange("add", c))
        return changes


def _third_person(verb: str) -> str:
    """``verb`` after "he" or "she": live -> lives, am -> is, have -> has, moved -> moved."""
    irregular = {"am": "is", "'m": "is", "have": "has", "do": "does", "go": "goes", "was": "was"}
    if verb in irregular:
        return irregular[verb]
    if verb.endswith("ed") or verb in ("can", "will", "could", "would", "should", "must", "had", "did"):
        return verb
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def summarizer(previous: str | None, messages: list[dict], max_chars: int) -> str:
    """A toy summarizer: keeps the user's lines, shortened."""
    said = [m["content"].split(".")[0] for m in messages if m["role"] == "user"]
    return "; ".join(filter(None, [previous, *said]))[-max_chars:]


def show(turn: int, user: str, messages: list[dict[str, str]]) -> None:
    print(f"\n=== turn {turn}: context for {user} ({len(messages)} messages) ===")
    for m in messages:
        body = textwrap.shorten(m["content"].replace("\n", " | "), 150)
        print(f"  [{m['role']}] {body}")


def run(settings: Settings, *, lock_timeout: float = 60.0) -> int:
    if settings.dsn:
        print("pymem demo: using PYMEM_DSN")
        psql = 'psql "$PYMEM_DSN"'
    else:
        info = server.start(settings.data_dir)
        print(f"pymem demo: embedded PostgreSQL in {info.pgdata}")
        psql = f"psql '{info.uri}'"
        print(f"  connect with: {psql}")
    print(f"pymem demo: writes to project {PROJECT!r} (replacing what an earlier demo left there)")
    conninfo = resolve_conninfo(settings)
    result = migrations.migrate(conninfo, roles=settings.roles(), lock_timeout=lock_timeout)
    print(f"migrations applied: {', '.join(result.applied) or 'none pending'}; "
          f"API files refreshed: {len(result.api_files)}")
    with Database(settings, migrate=False) as db:
        about = db.about()
        print(f"schema pymem at {about['last_migration']}; PostgreSQL {about['server_version']}, "
              f"pgvector {about['vector_version']} in schema {about['vector_schema']}")
        conversation(db, settings)
    user = SCRIPT[0][0]
    print("\npymem demo: done" + ("" if settings.dsn else " (the server keeps running; `pymem server stop` stops it)"))
    print(f"what it stored is in project {PROJECT!r}; see it with")
    print(f"  pymem export --project {PROJECT} --user {user}")
    query = f"SELECT pymem.user_export(user_id => '{user}', project_id => '{PROJECT}')"
    print(f'  {psql} -c "{query}"')
    print("or on the memory page (each learned fact linked to its turn, updated and retired facts told apart):")
    print(f"  pymem serve --project {PROJECT}")
    return 0


def learner(settings: Settings | None) -> tuple[object, str]:
    """The configured chat model's learner, or the rule-based stand-in; and what to call it."""
    if settings is not None and settings.llm_model:
        return ChatLearner(ChatClient(settings=settings)), f"chat model {settings.llm_model!r} at {settings.llm_base_url}"
    return RuleLearner(), "RuleLearner, fixed rules standing in for a chat model (set PYMEM_LLM_MODEL to use one)"


def conversation(db: Database, settings: Settings | None = None) -> None:
    chosen, label = learner(settings)
    print(f"\nlearner: {label}")
    # with a chat model, it writes the summaries too; without one, a toy summarizer does
    summarize = chosen.summarize if isinstance(chosen, ChatLearner) else summarizer
    mem = Memory(
        db=db, agent_id="concierge", project_id=PROJECT, embedder=HashEmbedder(),
        system_prompt="You are a concise travel concierge.", window=4, recall_k=2,
        summarizer=summarize, summarize_every=4, keep_last=4, learner=chosen, max_learned_facts=20,
    )
    for who in ("alice@example.com", "bob@example.com"):
        mem.forget(user=who)
        mem.forget_conversation(user=who)
    mem.forget(tier="global")
    mem.persist("Breakfast is served from 7 to 10.", tier="global")
    print("\nglobal fact for agent 'concierge': Breakfast is served from 7 to 10.")
    for i, (user, said, answer) in enumerate(SCRIPT, 1):
        with mem.turn(said, user=user) as t:
            show(i, user.split("@")[0], t.messages)
            t.answer = answer
        res = t.result
        assert res is not None  # set when the turn's block ends without an error
        folded = ", summary updated" if res.summarized else ""
        print(f"  -> recorded messages {res.user_seq}-{res.assistant_seq}{folded}")
        for change in res.fact_changes:  # written in the same transaction as the two messages
            if not change["applied"]:
                print(f"     learner {change['op']} skipped: {change.get('reason')}")
            elif change["op"] == "add":
                print(f"     learned: {mem.history(user=user, fact_id=change['id'])[-1].content!r}")
            else:
                chain = " -> ".join(repr(f.content) for f in mem.history(user=user, fact_id=change["id"]))
                verb = "updated" if change["op"] == "update" else "retired (no longer true; kept in history)"
                print(f"     {verb}: {chain}")
    ctx = mem.read("Remind me: what am I allergic to?", user="alice@example.com")
    print("\nrecalled for alice's last question (beyond her 4-message window):")
    for m in ctx.recalled:
        print(f"  - {m.content!r} (score {m.score:.2f})")
    alice = mem.read("where do I live?", user="alice@example.com")
    print(f"\nalice's facts now: {alice.user_facts}")
    moves = [repr(f.content) for f in reversed(mem.history(user="alice@example.com")) if f.content.startswith("Lives in")]
    print(f"the stale 'Lives in Oslo' is in no context's facts, only in their history ({' -> '.join(moves)}); "
          "the summary and recalled messages are the conversation as it was said, dated")
    bob = mem.read("where do I live?", user="bob@example.com")
    leaked = [m for m in bob.messages if "Alice" in m["content"] or "Bergen" in m["content"]]
    print(f"bob's context mentions Alice or Bergen: {bool(leaked)} (users never mix)")
    print("no message sent to the model contains a user id: "
          f"{all('@example.com' not in m['content'] for m in ctx.messages + bob.messages)}")
