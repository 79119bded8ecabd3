"""The ``pymem`` command: migrate, server status/stop, version, export/import, forget-user, purge, retention,
recall-indexes, learn --backfill, worker, consolidate, watch, demo, serve, mcp, mcp-token.

Exit codes: 0 success, 1 a pymem error (message on stderr), 2 bad usage,
3 ``migrate --check`` found the schema not current, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TextIO
from urllib.parse import quote, urlsplit

from . import __version__, changes, demo, learning, migrations, runner, server, web
from .connection import describe_target, resolve_conninfo
from .recall import recall_indexes
from .lifecycle import RetentionPolicy, configure_retention, purge, retention_policy
from .database import Database
from .embedders import HashEmbedder
from .llm import ChatClient, ChatLearner
from .memory import Memory
from .errors import ConfigError, Error, ValidationError
from .mcp import create_token, list_tokens, revoke_token
from .erasure import erasures, forget_user
from .portability import export_user, import_user
from .settings import Settings, unknown_variables
from .types import Erasure


#: The server's hints a command can meet, in command-line words (Python's are
#: pymem.errors.PYTHON_HINTS; both are keyed by the hint as SQL words it).
CLI_HINTS: dict[str, str] = {
    "Import under another user_id, or pass replace => true.": "Import under another user (--user ID), or pass --replace.",
    "Each project is separate: check user_id and project_id.": "Each project is separate: check --user and --project.",
    "Pass min_messages => 50000 (the default) or another positive count.":
        "Pass --min-messages 50000 (the default) or another positive count.",
    "Wait for that plan to finish, or end the session holding the lock (pg_terminate_backend).":
        "Wait for that plan to finish (or pass a longer --lock-timeout), or end the session holding the lock "
        "(pg_terminate_backend).",
}


def _settings(acting: str | None = None) -> Settings:
    """The settings from the environment; with ``acting`` (what the command does), one line on
    stderr saying which database it does it on (a mistyped PYMEM_DSN would otherwise act on the
    embedded server without a word)."""
    typos = [(var, close) for var, close in unknown_variables() if close is not None]
    if typos:  # a check aimed at production must not pass on the embedded server in silence
        raise ConfigError("; ".join(f"{var} is not a pymem setting (did you mean {close}?)" for var, close in typos)
                          + ": rename or unset it")
    settings = Settings()  # pymem.ConfigError naming a setting it refuses, never its value
    if acting is not None:
        try:
            target = describe_target(settings)
        except Exception:  # a DSN libpq cannot parse: the command itself says why
            target = "the database of PYMEM_DSN"
        print(f"pymem: {acting} {target}", file=sys.stderr, flush=True)
    return settings


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = _settings("checking" if args.check else "migrating")
    conninfo = resolve_conninfo(settings)
    if args.check:
        problems = migrations.check(conninfo)
        for p in problems:
            print(f"pymem: {p}", file=sys.stderr)
        if problems:
            return 3
        print("pymem: schema is current")
        _warn(conninfo)
        return 0
    result = migrations.migrate(conninfo, roles=settings.roles(), lock_timeout=args.lock_timeout)
    for name in result.applied:
        print(f"applied {name}")
    if not result.applied:
        print("no pending migrations")
    print(f"API functions refreshed from {len(result.api_files)} file(s)")
    _warn(conninfo)
    return 0


def _warn(conninfo: str) -> None:
    """What is current but unsafe (an owner role that logs in without a password), on stderr."""
    for line in migrations.hazards(conninfo):
        print(f"pymem: warning: {line}", file=sys.stderr)


def cmd_server(args: argparse.Namespace) -> int:
    settings = _settings()
    if args.action == "status":
        info = server.status(settings.data_dir)
        if info is None:
            print(f"pymem: no embedded server is running on {server.pgdata_of(settings.data_dir)}")
            return 1
        uri = info.uri
        if args.db is not None:  # the same server, another database (e.g. one to install into with psql)
            uri = urlsplit(uri)._replace(path="/" + quote(args.db, safe="")).geturl()
        print(uri)
        print(f"pid {info.pid}, data {info.pgdata}", file=sys.stderr)
        return 0
    if args.action == "start":
        print(server.start(settings.data_dir).uri)
        return 0
    stopped = server.stop(settings.data_dir)
    print("stopped" if stopped else "not running")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    print(f"pymem {__version__}")
    return 0


def _receipt(e: Erasure) -> dict[str, Any]:
    return {"id": e.id, "project_id": e.project_id, "erased_at": e.erased_at.isoformat(), "erased_by": e.erased_by,
            "counts": e.counts, "digest": e.digest, "nothing_stored": e.nothing_stored}


def cmd_export(args: argparse.Namespace) -> int:
    if args.erasures:
        with Database(_settings("exporting from")) as db:
            receipts = erasures(db, args.project, user_id=args.user)
        document: dict[str, Any] = {"format": "pymem.erasures/1", "project_id": args.project,
                                    "erasures": [_receipt(e) for e in receipts]}
    elif args.user is None:
        raise ValidationError("pymem export needs --user ID (a user's memory) or --erasures (the erasure receipts)")
    else:
        with Database(_settings("exporting from")) as db:
            document = export_user(db, args.user, args.project)
    data = json.dumps(document, ensure_ascii=False, indent=1)
    if args.output in (None, "-"):
        print(data)
    else:
        with _private(args.output) as f:
            f.write(data + "\n")
        if args.erasures:
            print(f"wrote {len(document['erasures'])} erasure receipt(s) to {args.output}", file=sys.stderr)
        else:
            facts, threads = len(document["facts"]), len(document["threads"])
            print(f"wrote {facts} fact{'' if facts == 1 else 's'} and {threads} thread{'' if threads == 1 else 's'} "
                  f"to {args.output}", file=sys.stderr)
    return 0


def cmd_forget_user(args: argparse.Namespace) -> int:
    with Database(_settings("erasing from")) as db:
        receipt = forget_user(db, args.user, args.project, stores=args.store)
    print(json.dumps(_receipt(receipt)))
    if receipt.nothing_stored:  # a typo must not read as a done erasure
        print(f"pymem: nothing was stored for that user in project {args.project!r}: nothing was erased "
              "(check --user and --project)", file=sys.stderr)
        return 1
    return 0


def _private(path: str) -> TextIO:
    """``path`` opened for writing, readable by its owner only (mode 0600, whatever the umask): an
    export is a user's whole memory. A file that exists is truncated and made 0600 too, before
    anything is written to it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise ValidationError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through os.open
        return os.fdopen(fd, "w", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def cmd_import(args: argparse.Namespace) -> int:
    try:
        with (sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")) as f:
            document = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValidationError(f"cannot read {args.file}: {exc}") from exc
    with Database(_settings("importing into")) as db:
        done = import_user(db, document, project_id=args.project, user_id=args.user, replace=args.replace)
    print(json.dumps(done))
    return 0


def cmd_recall_indexes(args: argparse.Namespace) -> int:
    settings = _settings("recall indexes of")
    project = settings.project_id if args.project is None else args.project
    with Database(settings) as db:
        plan = recall_indexes(db, project, args.min_messages, dry_run=args.dry_run, lock_timeout=args.lock_timeout,
                              report=lambda s: print(f"{s['statement']};", flush=True))
    done = "planned (dry run, nothing recorded)" if args.dry_run else "done"
    print(f"pymem: {len(plan)} statement(s) {done} for project {project!r}", file=sys.stderr)
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    settings = _settings("purging")
    project = settings.project_id if args.project is None else args.project
    with Database(settings) as db:
        done = purge(db, project, max_rows=args.max_rows, until_done=not args.once)
    print(json.dumps(done))
    return 0


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _age(text: str) -> timedelta:
    """``--max-age``: a number and a unit, s, m, h or d (``90d``, ``12h``); a bare number is seconds."""
    unit = text[-1:].lower() if text[-1:].lower() in _UNITS else "s"
    number = text[:-1] if text[-1:].lower() in _UNITS else text
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if not 0 < value < 36525 * 86400:
        raise argparse.ArgumentTypeError(f"expected an age such as 90d, 12h, 30m or 3600 (seconds), not {text!r}")
    return timedelta(seconds=value * _UNITS[unit])


def _policy_json(p: RetentionPolicy) -> str:
    age = p.messages_max_age
    return json.dumps({"messages_max_age_seconds": None if age is None else age.total_seconds(),
                       "messages_max_per_thread": p.messages_max_per_thread,
                       "updated_at": None if p.updated_at is None else p.updated_at.isoformat()})


def cmd_retention(args: argparse.Namespace) -> int:
    settings = _settings("the retention policy of")
    project = settings.project_id if args.project is None else args.project
    if args.keep_all and (args.max_age is not None or args.max_per_thread is not None):
        raise ValidationError("--keep-all removes the policy: give it alone, or give --max-age / --max-per-thread")
    with Database(settings) as db:
        if args.keep_all or args.max_age is not None or args.max_per_thread is not None:
            policy = configure_retention(db, project, messages_max_age=args.max_age,
                                         messages_max_per_thread=args.max_per_thread)
        else:
            policy = retention_policy(db, project)
    print(_policy_json(policy))
    return 0


def _worker_memory(settings: Settings, spec: str | None, db: Database, cadence: dict[str, int] | None = None) -> Any:
    """The Memory a worker learns with: ``--learner module:attribute`` names a pymem.Memory (used
    as it is: its learner, embedder, summarizer and project), a learner (extract and reconcile;
    its ``summarize``, when it has one, summarizes too), or a callable without arguments that
    returns either; without it, a ChatLearner over the PYMEM_LLM_* settings."""
    if spec is None:
        if not settings.llm_model:
            raise ConfigError("pymem worker needs a learner: set PYMEM_LLM_MODEL (and PYMEM_LLM_BASE_URL) for a chat "
                              "model, or pass --learner module:attribute")
        target: Any = ChatLearner(ChatClient(settings=settings))
    else:
        module, _, attribute = spec.partition(":")
        if not module or not attribute:
            raise ValidationError(f"--learner takes module:attribute (e.g. myapp.memory:learner), not {spec!r}")
        sys.path.insert(0, os.getcwd())  # as python -m does: the caller's own modules
        try:
            target = importlib.import_module(module)
            for part in attribute.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as exc:
            raise ValidationError(f"--learner {spec}: {type(exc).__name__}: {exc}") from None
        finally:
            sys.path.pop(0)
        if isinstance(target, type) or (callable(target) and not isinstance(target, Memory)
                                        and not hasattr(target, "extract")):
            target = target()  # a class or a factory
    if isinstance(target, Memory):
        if cadence:
            raise ValidationError("--summarize-every / --keep-last go with a learner; a --learner that names a "
                                  "pymem.Memory folds summaries with its own summarize_every / keep_last")
        return target
    if not all(callable(getattr(target, m, None)) for m in ("extract", "reconcile")):
        raise ValidationError(f"--learner must name a pymem.Memory or a learner (extract and reconcile), "
                              f"not {type(target).__name__}")
    summarizer = getattr(target, "summarize", None)
    given: dict[str, Any] = dict(cadence or {})  # the options' own defaults unless given
    return Memory(db=db, agent_id=settings.agent_id, project_id=settings.project_id, embedder=HashEmbedder(), learner=target,
                  summarizer=summarizer if callable(summarizer) else None, **given)


def cmd_watch(args: argparse.Namespace) -> int:
    settings = _settings("watching the changes of")
    project = settings.project_id if args.project is None else args.project
    stop = threading.Event()
    with Database(settings) as db:
        if args.once:  # what is there now, then exit
            after = args.since if args.since is not None else 0
            while True:
                found = changes.changes_since(db, project, after, 1000)
                for c in found:
                    print(_change_json(c), flush=True)
                    after = c.position
                if len(found) < 1000:
                    return 0
        for c in changes.watch(db, project, after=args.since, poll_seconds=args.poll, stop=stop):
            print(_change_json(c), flush=True)
    return 0


def _change_json(c: Any) -> str:
    return json.dumps({"position": c.position, "kind": c.kind, "op": c.op, "subject": c.subject, "keys": c.keys,
                       "rows": c.rows, "created_at": c.created_at.isoformat()}, ensure_ascii=False)


def cmd_consolidate(args: argparse.Namespace) -> int:
    settings = _settings("consolidating near-duplicate facts in" if args.apply else "listing near-duplicate facts in")
    project = settings.project_id if args.project is None else args.project
    with Database(settings) as db:
        decide = ChatLearner(ChatClient(settings=settings)) if args.with_model else None
        mem = Memory(db=db, agent_id=args.agent or settings.agent_id, project_id=project,
                     embedder=HashEmbedder() if args.hash_vectors else None)
        merges = mem.consolidate(tier=args.tier, id=args.id, dry_run=not args.apply, min_similarity=args.min_similarity,
                                 min_overlap=args.min_overlap, decide=decide, max_pairs=args.max_pairs)
    for m in merges:
        print(json.dumps({"kept_id": m.kept_id, "kept": m.kept, "merged_id": m.merged_id, "merged": m.merged,
                          "similarity": m.similarity, "overlap": m.overlap, "decision": m.decision,
                          "applied": m.applied}, ensure_ascii=False))
    done = sum(m.applied for m in merges)
    print(f"pymem: {len(merges)} pair(s) found, {done} merged" + ("" if args.apply else " (a dry run: --apply merges)"),
          file=sys.stderr)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    settings = _settings("learning from the queued turns of")
    if args.project is not None:
        settings = settings.model_copy(update={"project_id": args.project})
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        print("pymem worker: stopping after the job in hand (again to interrupt it)", file=sys.stderr, flush=True)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with Database(settings) as db:
            cadence = {k: v for k, v in (("summarize_every", args.summarize_every), ("keep_last", args.keep_last))
                       if v is not None}
            mem = _worker_memory(settings, args.learner, db, cadence)

            def report(r: Any) -> None:
                print(f"pymem worker: {r.line()}", flush=True)
                for line in r.failures:
                    print(f"pymem worker: {line}", file=sys.stderr, flush=True)

            total = learning.work(lambda op: runner.run(op, mem.db, mem.options.embedder), mem.options,
                                  drain=args.drain, poll_seconds=args.poll, batch=args.batch, lease_seconds=args.lease,
                                  max_attempts=args.max_attempts, backoff_seconds=args.backoff, stop=stop, report=report)
            left = learning.status(db, mem.options.project_id)
            print(f"pymem worker: stopped; in all {total.line()}; queue: {left.pending} pending "
                  f"({left.ready} ready), {left.running} running, {left.dead} dead, {left.skipped} skipped", flush=True)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


def _time(value: str) -> datetime:
    """A --since / --until time: ISO 8601 with a zone (2026-05-01T00:00+00:00, or a date: UTC midnight)."""
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r}") from None
    if at.tzinfo is None:
        if "T" in value or " " in value:
            raise argparse.ArgumentTypeError(f"give the time zone too (e.g. {value}+00:00)")
        at = at.replace(tzinfo=timezone.utc)
    return at


def cmd_learn(args: argparse.Namespace) -> int:
    if not args.backfill:
        raise ValidationError("pymem learn needs --backfill (queue the turns already stored for pymem worker)")
    settings = _settings("queuing stored turns for learning in")
    project = settings.project_id if args.project is None else args.project
    with Database(settings) as db:
        queued = learning.backfill(db, project, user_id=args.user, since=args.since, until=args.until)
        left = learning.status(db, project)
    print(f"pymem learn: queued {queued} stored turn(s) for learning; queue: {left.pending} pending. "
          "pymem worker learns them (under the project's cost caps)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    return demo.run(_settings(), lock_timeout=args.lock_timeout)


def cmd_serve(args: argparse.Namespace) -> int:
    return web.main(_settings("serving"), args.host, args.port, args.allow_edit, args.project)


#: what `pymem mcp` needs beyond the core (the [mcp] extra)
_MCP_MODULES = frozenset({"mcp", "mcp_types", "uvicorn", "starlette", "sse_starlette", "httpx", "httpx2", "anyio"})


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        mcp_server = importlib.import_module("pymem.integrations.mcp_server")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in _MCP_MODULES:
            raise
        print("pymem mcp needs the mcp extra: pip install 'pymem-pg[mcp]'", file=sys.stderr)
        return 1
    settings = _settings("serving MCP from")
    return int(mcp_server.main(settings, http=args.http, host=args.host, port=args.port, user=args.user,
                               project=args.project, agent=args.agent, allowed_hosts=args.allowed_host))


def cmd_mcp_token(args: argparse.Namespace) -> int:
    settings = _settings("managing MCP tokens on")
    project = settings.project_id if args.project is None else args.project
    with Database(settings) as db:
        if args.action == "create":
            token, record = create_token(db, user=args.user, project_id=project, agent_id=args.agent)
            print(token)
            print(f"pymem: token {record.id} for user {record.user_id!r} of project {record.project_id!r}"
                  f"{f' (agent {record.agent_id!r})' if record.agent_id else ''}; shown once: only its hash is "
                  "stored", file=sys.stderr)
        elif args.action == "list":
            for t in list_tokens(db, project):
                print(json.dumps({"id": t.id, "project_id": t.project_id, "user_id": t.user_id,
                                  "agent_id": t.agent_id, "created_at": t.created_at.isoformat() if t.created_at else None,
                                  "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None}))
        else:
            done = revoke_token(db, args.token, project)
            print(f"revoked {done if isinstance(done, int) else done.id}")
    return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a positive number of seconds, not {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pymem", description="Memory for AI agents in PostgreSQL.")
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("migrate", help="bring the database to the current schema")
    m.add_argument("--check", action="store_true", help="only report; exit 3 if not current")
    m.add_argument("--lock-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                   help="wait at most this long for the migration lock, then name who holds it (default 60)")
    m.set_defaults(func=cmd_migrate)
    s = sub.add_parser("server", help="the embedded server (used when PYMEM_DSN is unset)")
    s.add_argument("action", choices=["status", "start", "stop"])
    s.add_argument("--db", metavar="NAME", help="status: the URI of database NAME on that server (default: the one "
                                                "pymem uses)")
    s.set_defaults(func=cmd_server)
    v = sub.add_parser("version", help="print pymem's version")
    v.set_defaults(func=cmd_version)
    e = sub.add_parser("export", help="print a user's whole memory (or the erasure receipts) as JSON")
    e.add_argument("--user", help="the user id (with --erasures: only that user's receipts)")
    e.add_argument("--erasures", action="store_true",
                   help="the project's erasure receipts (pymem forget-user) instead of a user's memory; owner role")
    e.add_argument("--project", default="", help="the project (tenant); default ''")
    e.add_argument("-o", "--output", help="write to this file instead of stdout (created or overwritten with mode "
                   "0600: readable by you only)")
    e.set_defaults(func=cmd_export)
    f = sub.add_parser("forget-user", help="erase a user (facts, conversations, their stores) and print the receipt")
    f.add_argument("--user", required=True, help="the user id")
    f.add_argument("--project", default="", help="the project (tenant); default ''")
    f.add_argument("--store", action="append", default=[], metavar="KEY",
                   help="a store of the user's, erased whole (repeatable)")
    f.set_defaults(func=cmd_forget_user)
    i = sub.add_parser("import", help="load a user's memory exported by `pymem export`")
    i.add_argument("file", help="the JSON file ('-' for stdin)")
    i.add_argument("--user", help="import under this user id instead of the document's")
    i.add_argument("--project", help="import into this project instead of the document's")
    i.add_argument("--replace", action="store_true", help="replace the user's existing memory there")
    i.set_defaults(func=cmd_import)
    w = sub.add_parser("serve", help="the memory page: browse (and with --allow-edit correct) facts, threads, stores")
    w.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; no authentication)")
    w.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    w.add_argument("--allow-edit", action="store_true", help="allow forgetting and superseding facts from the page")
    w.add_argument("--project", action="append", default=[], metavar="NAME",
                   help="a project to list on the first page (repeatable; default PYMEM_PROJECT_ID or '')")
    w.set_defaults(func=cmd_serve)
    g = sub.add_parser("purge", help="delete what has expired (facts and store entries past their expires_at) and "
                       "messages out of retention, in short batches")
    g.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    g.add_argument("--max-rows", type=int, default=1000, metavar="N",
                   help="rows per batch, each its own short transaction (0..10000, default 1000)")
    g.add_argument("--once", action="store_true", help="one batch only (default: batches until one is not full)")
    g.set_defaults(func=cmd_purge)
    t = sub.add_parser("retention", help="show or set how long a project keeps messages (pymem purge applies it)")
    t.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    t.add_argument("--max-age", type=_age, metavar="AGE",
                   help="purge messages older than this: 90d, 12h, 30m or seconds (replaces the policy)")
    t.add_argument("--max-per-thread", type=int, metavar="N",
                   help="a thread keeps its newest N messages (replaces the policy)")
    t.add_argument("--keep-all", action="store_true", help="remove the policy: every message is kept")
    t.set_defaults(func=cmd_retention)
    r = sub.add_parser("recall-indexes", help="build or drop the per-user recall indexes of heavy users")
    r.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    r.add_argument("--min-messages", type=int, default=50000, metavar="N",
                   help="index the users with at least N vectors from one embedder (default 50000)")
    r.add_argument("--dry-run", action="store_true", help="print the statements; record and build nothing")
    r.add_argument("--lock-timeout", type=_seconds, default=10.0, metavar="SECONDS",
                   help="wait at most this long for the project's plan lock, then name who holds it (default 10)")
    r.set_defaults(func=cmd_recall_indexes)
    h = sub.add_parser("watch", help="print a project's change feed as JSON lines, catching up, then following it")
    h.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    h.add_argument("--since", type=int, metavar="POSITION",
                   help="start after this position (0: from the start; default: from now)")
    h.add_argument("--once", action="store_true", help="print what is there and exit (default: follow)")
    h.add_argument("--poll", type=_seconds, default=1.0, metavar="SECONDS",
                   help="read the feed at least this often while waiting for notifications (default 1)")
    h.set_defaults(func=cmd_watch)
    c = sub.add_parser("consolidate", help="list (or with --apply merge) a subject's near-duplicate facts")
    c.add_argument("--id", required=True, help="the subject: a user id (or, with --tier, an agent or project id)")
    c.add_argument("--tier", default="user", choices=["user", "global", "project"], help="the subject's tier (default user)")
    c.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    c.add_argument("--agent", help="the agent of --tier global (default PYMEM_AGENT_ID)")
    applying = c.add_mutually_exclusive_group()
    applying.add_argument("--apply", action="store_true", help="merge the pairs (default: only list them)")
    applying.add_argument("--dry-run", action="store_true",
                          help="only list the pairs (the default; as recall-indexes --dry-run)")
    c.add_argument("--min-overlap", type=float, default=0.8, metavar="X",
                   help="pair facts sharing at least this share of the shorter one's words (default 0.8)")
    c.add_argument("--min-similarity", type=float, default=0.9, metavar="X",
                   help="pair facts whose vectors' cosine is at least this (with --hash-vectors; default 0.9)")
    c.add_argument("--hash-vectors", action="store_true", help="compare HashEmbedder vectors too (as pymem demo stores)")
    c.add_argument("--with-model", action="store_true",
                   help="ask the chat model of PYMEM_LLM_* about each pair before merging it")
    c.add_argument("--max-pairs", type=int, default=100, metavar="N", help="at most N pairs per run (default 100)")
    c.set_defaults(func=cmd_consolidate)
    b = sub.add_parser("learn", help="queue the turns already stored for learning (--backfill), for pymem worker")
    b.add_argument("--backfill", action="store_true",
                   help="queue the stored turns not yet queued by a backfill, each user's in order, each once")
    b.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    b.add_argument("--user", help="only this user's turns (default: every user's)")
    b.add_argument("--since", type=_time, metavar="TIME", help="only turns said at or after TIME (ISO 8601)")
    b.add_argument("--until", type=_time, metavar="TIME",
                   help="only turns said before TIME (e.g. when the learner started: later turns were learned live)")
    b.set_defaults(func=cmd_learn)
    k = sub.add_parser("worker", help="learn from the turns queued by Memory(deferred_learning=True)")
    k.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    k.add_argument("--learner", metavar="MODULE:ATTRIBUTE",
                   help="a pymem.Memory or a learner to learn with (default: a chat model from PYMEM_LLM_*)")
    k.add_argument("--drain", action="store_true",
                   help="exit once no job is claimable now (a user's jobs wait behind that user's oldest: "
                        "jobs may remain, e.g. in a retry's backoff; default: wait for more)")
    k.add_argument("--summarize-every", type=int, default=None, metavar="N",
                   help="fold a thread's summary every N messages (default 10; the app Memory's is not used)")
    k.add_argument("--keep-last", type=int, default=None, metavar="N",
                   help="messages left out of the summary, newest (default 10)")
    k.add_argument("--batch", type=int, default=10, metavar="N", help="jobs claimed at a time (1..1000, default 10)")
    k.add_argument("--poll", type=_seconds, default=1.0, metavar="SECONDS",
                   help="wait this long when no job is claimable (default 1)")
    k.add_argument("--lease", type=_seconds, default=300.0, metavar="SECONDS",
                   help="a claimed job is this worker's for this long; then another may take it (default 300)")
    k.add_argument("--max-attempts", type=int, default=5, metavar="N",
                   help="a job that failed N times is dead (1..100, default 5)")
    k.add_argument("--backoff", type=float, default=10.0, metavar="SECONDS",
                   help="wait before a failed job's next attempt, doubled per attempt (default 10)")
    k.set_defaults(func=cmd_worker)
    q = sub.add_parser("mcp", help="an MCP server with the memory tools (stdio; --http: streamable HTTP with tokens)")
    q.add_argument("--http", action="store_true", help="serve streamable HTTP at /mcp (each request as its token's user)")
    q.add_argument("--host", default="127.0.0.1", help="with --http: address to listen on (default 127.0.0.1)")
    q.add_argument("--port", type=int, default=8766, help="with --http: port (default 8766; 0 picks a free one)")
    q.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="with --http: a name clients reach the server by, accepted in Host and Origin besides "
                        "loopback names and the bound address (repeatable)")
    q.add_argument("--user", help="stdio: the user every call serves (required)")
    q.add_argument("--project", help="stdio: the project (tenant); default PYMEM_PROJECT_ID or ''")
    q.add_argument("--agent", help="stdio: the agent; default PYMEM_AGENT_ID")
    q.set_defaults(func=cmd_mcp)
    n = sub.add_parser("mcp-token", help="create, list or revoke the bearer tokens of pymem mcp --http")
    nsub = n.add_subparsers(dest="action", required=True)
    nc = nsub.add_parser("create", help="print a new token (once: only its hash is stored)")
    nc.add_argument("--user", required=True, help="the user its requests serve")
    nc.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    nc.add_argument("--agent", help="the agent (default: none)")
    nl = nsub.add_parser("list", help="a project's tokens as JSON lines (never a token or a hash)")
    nl.add_argument("--project", help="the project (tenant); default PYMEM_PROJECT_ID or ''")
    nr = nsub.add_parser("revoke", help="revoke a token, named by itself or by its id")
    nr.add_argument("token", metavar="TOKEN_OR_ID", help="the token, or its id (with --project)")
    nr.add_argument("--project", help="the project of a token given by id; default PYMEM_PROJECT_ID or ''")
    n.set_defaults(func=cmd_mcp_token)
    d = sub.add_parser("demo", help="connect (embedded by default), migrate, show memory at work")
    d.add_argument("--lock-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                   help="wait at most this long for another migrate (as pymem migrate; default 60)")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except Error as exc:
        exc.hint = CLI_HINTS.get(exc.server_hint or "", exc.hint)
        state = f" [SQLSTATE {exc.sqlstate}]" if exc.sqlstate else ""
        said = str(exc).removeprefix("pymem: ")  # the SQL's own messages start with it: say it once
        print(f"pymem: {type(exc).__name__}: {said}{state}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: psycopg cancels a running statement (rolled back); no traceback
        print("pymem: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
