"""``pymem demo``: connect (the embedded server unless PYMEM_DSN is set), migrate, and show
durable facts at work: tiers, idempotent add, supersede with history, retrieval by meaning,
project isolation and guarded forget. Safe to run repeatedly (it uses project "pymem-demo"
and clears it first)."""

from __future__ import annotations

from . import migrations, server
from .db import Database, resolve_conninfo
from .embedders import HashEmbedder
from .errors import ValidationError
from .memory import Memory
from .settings import Settings

PROJECT = "pymem-demo"


def run(settings: Settings) -> int:
    if settings.dsn:
        print("pymem demo: using PYMEM_DSN")
    else:
        info = server.start(settings.data_dir)
        print(f"pymem demo: embedded PostgreSQL in {info.pgdata}")
        print(f"  connect with: psql '{info.uri}'")
    conninfo = resolve_conninfo(settings)
    result = migrations.migrate(conninfo)
    applied = ", ".join(result.applied) or "none pending"
    print(f"migrations applied: {applied}; API files refreshed: {len(result.api_files)}")
    with Database(settings, migrate=False) as db:
        about = db.about()
        print(
            f"schema pymem at {about['last_migration']} ({about['migrations']} migrations); "
            f"PostgreSQL {about['server_version']}, pgvector {about['vector_version']} in schema {about['vector_schema']}"
        )
        facts_demo(db)
    print("pymem demo: done" + ("" if settings.dsn else " (the server keeps running; `pymem server stop` stops it)"))
    return 0


def facts_demo(db: Database) -> None:
    mem = Memory(agent_id="support-bot", project_id=PROJECT, db=db, embedder=HashEmbedder())
    for tier, who in (("user", "*"), ("global", "*")):
        mem.forget(tier=tier, id=who)
    print("\n-- durable facts (project 'pymem-demo', agent 'support-bot') --")
    mem.persist("Return policy is 30 days", tier="global")
    first = mem.persist("Prefers email", id="alice")
    again = mem.persist("  Prefers   email ", id="alice")
    print(f"persist 'Prefers email' twice (whitespace differs): ids {first} and {again} -> one fact")
    mem.persist("Is allergic to peanuts", id="alice")
    mem.persist("Works nights in the Berlin office", id="alice")
    mem.persist("Prefers phone calls", id="bob")
    new = mem.update("Prefers Slack", old="Prefers email", id="alice")
    chain = mem.history(id="alice", fact_id=new)
    print("alice changed her mind: " + " -> ".join(f"#{f.id} {f.content!r}" for f in chain))
    print("alice's active facts, newest first:")
    for f in mem.retrieve(id="alice"):
        print(f"  #{f.id} {f.content}")
    best = mem.retrieve("what food should the kitchen avoid? peanuts?", id="alice", k=1)[0]
    print(f"by meaning, 'what food should the kitchen avoid? peanuts?' -> {best.content!r} ({best.similarity:.2f})")
    print(f"bob sees only his own: {[f.content for f in mem.retrieve(id='bob')]}")
    print(f"global facts for support-bot: {[f.content for f in mem.retrieve(tier='global')]}")
    other = Memory(agent_id="support-bot", project_id=PROJECT + "-other", db=db)
    print(f"another project sees nothing of alice: {other.retrieve(id='alice')}")
    print(f"forget with an empty user id deletes {mem.forget(id='')} rows")
    try:
        Memory(agent_id="", db=db)
    except ValidationError as exc:
        print(f"Memory(agent_id='') is refused: {exc}")
    print(f"forget alice: {mem.forget(id='alice')} rows (history included)")
