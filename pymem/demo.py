"""``pymem demo``: a scripted two-user conversation (both sides scripted, no model needed)
that prints, turn by turn, the context pymem would send to a chat model: facts learned and
superseded, the window sliding, a summary forming, a long-ago message recalled, and the two
users never mixing. Runs on the embedded server unless PYMEM_DSN is set; safe to repeat (it
uses project "pymem-demo" and clears it first). It says so, and ends with the commands that show
what it stored (``pymem export --project pymem-demo --user ...``, psql)."""

from __future__ import annotations

import re
import textwrap

from . import migrations, server
from .connection import resolve_conninfo
from .database import Database
from .embedders import HashEmbedder
from .memory import Memory
from .settings import Settings

PROJECT = "pymem-demo"

SCRIPT = [  # (user, what the user says, the scripted answer)
    ("alice@example.com", "Hi! My name is Alice and I am allergic to peanuts.", "Nice to meet you, Alice. Noted: no peanuts."),
    ("bob@example.com", "Hello, I am Bob. I prefer phone calls over email.", "Hi Bob, phone calls it is."),
    ("alice@example.com", "I live in Oslo and I work night shifts.", "Oslo, night shifts. Got it."),
    ("alice@example.com", "Can you recommend a quiet cafe for the morning?", "Try Fuglen; it is calm before noon."),
    ("bob@example.com", "I live in Lisbon.", "Lisbon, lovely."),
    ("alice@example.com", "Actually, I moved: I live in Bergen now.", "Updated: Bergen."),
    ("alice@example.com", "What is a good hiking trail near me?", "Stoltzekleiven is a classic in Bergen."),
    ("alice@example.com", "Thanks, and a snack to bring along?", "Trail mix without nuts, given your allergy."),
    ("alice@example.com", "Remind me: what am I allergic to?", "Peanuts."),
]


def extractor(message: str) -> list[str]:
    """A toy fact extractor: sentences about the speaker ("I ...", "My ...")."""
    sentences = re.split(r"(?<=[.!?])\s+", message)
    return [s.strip() for s in sentences if re.match(r"^(I|My)\b", s.strip()) and not s.strip().endswith("?")]


def summarizer(previous: str | None, messages: list[dict], max_chars: int) -> str:
    """A toy summarizer: keeps the user's lines, shortened."""
    said = [m["content"].split(".")[0] for m in messages if m["role"] == "user"]
    return "; ".join(filter(None, [previous, *said]))[-max_chars:]


def show(turn: int, user: str, messages: list[dict[str, str]]) -> None:
    print(f"\n=== turn {turn}: context for {user} ({len(messages)} messages) ===")
    for m in messages:
        body = textwrap.shorten(m["content"].replace("\n", " | "), 150)
        print(f"  [{m['role']}] {body}")


def run(settings: Settings) -> int:
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
    result = migrations.migrate(conninfo, roles=settings.roles())
    print(f"migrations applied: {', '.join(result.applied) or 'none pending'}; "
          f"API files refreshed: {len(result.api_files)}")
    with Database(settings, migrate=False) as db:
        about = db.about()
        print(f"schema pymem at {about['last_migration']}; PostgreSQL {about['server_version']}, "
              f"pgvector {about['vector_version']} in schema {about['vector_schema']}")
        conversation(db)
    user = SCRIPT[0][0]
    print("\npymem demo: done" + ("" if settings.dsn else " (the server keeps running; `pymem server stop` stops it)"))
    print(f"what it stored is in project {PROJECT!r}; see it with")
    print(f"  pymem export --project {PROJECT} --user {user}")
    query = f"SELECT pymem.user_export(user_id => '{user}', project_id => '{PROJECT}')"
    print(f'  {psql} -c "{query}"')
    return 0


def conversation(db: Database) -> None:
    mem = Memory(
        db=db, agent_id="concierge", project_id=PROJECT, embedder=HashEmbedder(),
        system_prompt="You are a concise travel concierge.", window=4, recall_k=2,
        summarizer=summarizer, summarize_every=4, keep_last=4, extractor=extractor, max_learned_facts=20,
    )
    for who in ("alice@example.com", "bob@example.com"):
        mem.forget(id=who)
        mem.forget_conversation(user=who)
    mem.forget(tier="global")
    mem.persist("Breakfast is served from 7 to 10.", tier="global")
    print("\nglobal fact for agent 'concierge': Breakfast is served from 7 to 10.")
    for i, (user, said, answer) in enumerate(SCRIPT, 1):
        if "moved" in said:  # the app corrects a durable fact: supersede, keep history
            old = next(f for f in mem.retrieve(id=user) if f.content.startswith("I live in"))
            new = mem.update("I live in Bergen now.", fact_id=old.id, id=user)
            chain = " -> ".join(repr(f.content) for f in mem.history(id=user, fact_id=new))
            print(f"\n(superseded alice's fact: {chain})")
        with mem.turn(said, user=user) as t:
            show(i, user.split("@")[0], t.messages)
            t.answer = answer
        res = t.result
        learned = f", learned {len(res.learned_fact_ids)} fact(s)" if res.learned_fact_ids else ""
        folded = ", summary updated" if res.summarized else ""
        print(f"  -> recorded messages {res.user_seq}-{res.assistant_seq}{learned}{folded}")
    ctx = mem.read("Remind me: what am I allergic to?", user="alice@example.com")
    print("\nrecalled for alice's last question (beyond her 4-message window):")
    for m in ctx.recalled:
        print(f"  - {m.content!r} (score {m.score:.2f})")
    bob = mem.read("where do I live?", user="bob@example.com")
    leaked = [m for m in bob.messages if "Alice" in m["content"] or "Bergen" in m["content"]]
    print(f"bob's context mentions Alice or Bergen: {bool(leaked)} (users never mix)")
    print("no message sent to the model contains a user id: "
          f"{all('@example.com' not in m['content'] for m in ctx.messages + bob.messages)}")
