"""``pymem demo``: connect (the embedded server unless PYMEM_DSN is set), migrate, and show
what the database now holds. Later issues grow it into a scripted conversation."""

from __future__ import annotations

from . import migrations, server
from .db import Database, resolve_conninfo
from .settings import Settings


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
        f"schema pymem at {about['last_migration']} ({about['migrations']} migration(s)); "
        f"PostgreSQL {about['server_version']}, pgvector {about['vector_version']} in schema {about['vector_schema']}"
    )
    print("pymem demo: done (the server keeps running; `pymem server stop` stops it)" if not settings.dsn else "pymem demo: done")
    return 0
