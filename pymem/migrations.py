"""Versioned SQL: bring a database to the current pymem schema.

Layout of ``sql/`` (shipped in the wheel as ``pymem/sql``):

* ``bootstrap.sql`` - schema ``pymem`` and the ``schema_migrations`` table; run first.
* ``migrations/NNNN_name.sql`` - forward-only, applied once each, in order, each in its own
  transaction, recorded with its sha256. Never edited after release: a changed applied
  migration stops ``migrate`` (SQLSTATE PM002) and fails ``migrate --check``.
* ``api/*.sql`` - ``CREATE OR REPLACE`` functions, re-applied in one transaction on every
  migrate (each file after the files whose functions it calls: ``api_order``), with ``grants.sql`` (roles, ownership, privileges) and the checksum of what was
  applied (``check`` compares it, and the grants, with the catalog). Each pins ``search_path = pg_catalog, pymem, pg_temp``; pgvector is reached only
  through the wrappers ``migration_vector_functions()`` renders with its schema written out.

Search paths (docs/security.md "Function safety"): the whole migrate runs under the pinned path
``pg_catalog, pymem, pg_temp``. pgvector's schema is added only while statements whose text
names its type unqualified create objects (the API files' signatures and the frozen
migrations in ``TYPES_PATH_MIGRATIONS``); what those store is then checked by
``migration_check_dependencies()`` (PM011) before the transaction commits.
* ``migrate.sql`` - the same procedure for plain ``psql``; generated from this module by
  ``python -m pymem.migrations`` and checked by a test so the two never drift.

Everything runs under one session-level advisory lock, so two migrations started at the same
moment run one after the other; the second finds nothing left to do.
"""

from __future__ import annotations

import ast
import hashlib
import heapq
import re
import sys
from pathlib import Path
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable

import psycopg

from . import __version__
from .connection import connect, errors, one_value
from .errors import MigrationError
from .queries import Q, render_calls, sql_root
from .reference import render_python_reference, render_sql_reference


# Released migrations whose frozen text names pgvector's ``vector`` type unqualified. Every later
# migration runs under the pinned path and names pgvector objects through dynamic SQL.
TYPES_PATH_MIGRATIONS = frozenset({"0002_facts", "0003_conversations"})


# The API refresh is one transaction: pinned path and bootstrap.sql again; the pgvector
# wrappers; the types path (bodies unchecked) for the CREATE FUNCTION statements of api/*.sql
# (no API file runs a query or a DO block); pinned path; drop every function this transaction
# did not create (old signatures); grants.sql; then API_AFTER: check every body, and refuse
# anything stored that depends on code outside pg_catalog, pymem and extensions; last, record
# the checksum of the files applied (migration_api_applied), which ``check`` compares.
API_BEFORE = ("migration_vector_functions", "migration_types_path")
API_AFTER = ("migration_validate_functions", "migration_check_dependencies")


# 0.2.0's development builds applied 34 migrations numbered 0006 to 0049, squashed before the
# release into these two (same schema). bootstrap.sql records a database that applied all 34 as
# having applied the two, and stops any other with PM013 (CHANGELOG.md, 0.2.0).
SQUASHED = ("0006_v0_2_0_memory", "0007_v0_2_0_operations")


def _retired(name: str) -> bool:
    return "0006" <= name[:4] <= "0049" and name not in SQUASHED


def _path_query(name: str) -> str:
    return "migration_types_path" if name in TYPES_PATH_MIGRATIONS else "migration_search_path"


@dataclass(frozen=True)
class Migration:
    name: str  # file name without .sql, e.g. "0001_foundation"
    sql: str
    checksum: str  # sha256 of the file's bytes


@dataclass(frozen=True)
class SqlFiles:
    """The files of ``sql/`` a migrate applies, read once."""

    bootstrap: str
    migrations: list[Migration]
    api: list[tuple[str, str]]  # (file name, text), applied in this order
    grants: str  # roles, ownership and privileges, applied after the API files
    citus: str = ""  # the distribution, applied before grants.sql only on a Citus database

    @property
    def api_checksum(self) -> str:
        """sha256 of what an API refresh applies (bootstrap.sql, api/*.sql, grants.sql), which
        it records in pymem.config (migration_api_applied) and ``check`` compares."""
        h = hashlib.sha256()
        for name, text in [("bootstrap.sql", self.bootstrap), *((f"api/{n}", t) for n, t in self.api),
                           ("grants.sql", self.grants), ("citus.sql", self.citus)]:
            h.update(name.encode() + b"\0" + text.encode() + b"\0")
        return h.hexdigest()


@dataclass
class Result:
    applied: list[str] = field(default_factory=list)
    api_files: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # stale function signatures the API refresh dropped


def _files(folder: Traversable) -> list[Traversable]:
    return sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)


_FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION pymem\.(\w+)\(")
# a call or a DEFAULT naming pymem.f(...): not a definition, COMMENT ON FUNCTION or INSERT INTO a table
_CALL = re.compile(r"(?<!FUNCTION )(?<!INTO )pymem\.(\w+)\s*\(")
_NOISE = re.compile(r"--[^\n]*|'(?:[^']|'')*'")  # comments and string literals, in the order they come


def api_calls(api: list[tuple[str, str]]) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """The calls between the API files: (caller's file, callee's file) -> {(function, function
    it calls)}, for every function of one file that calls (or names in a DEFAULT) a function
    defined in another. Read from the text: comments and string literals do not count, nor does
    dynamic SQL (which no API function uses to call another)."""
    home: dict[str, str] = {}
    uses: list[tuple[str, str, set[str]]] = []
    for file, text in api:
        code = _NOISE.sub(lambda m: "''" if m.group().startswith("'") else "", text)
        starts = [(m.start(), m.group(1)) for m in _FUNCTION.finditer(code)]
        for i, (at, name) in enumerate(starts):
            home.setdefault(name, file)
            end = starts[i + 1][0] if i + 1 < len(starts) else len(code)
            uses.append((file, name, set(_CALL.findall(code, at + len("CREATE OR REPLACE FUNCTION "), end))))
    edges: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for file, name, called in uses:
        for callee in called:
            if (other := home.get(callee, file)) != file:
                edges.setdefault((file, other), set()).add((name, callee))
    return edges


def api_order(api: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The API files in the order a migrate applies them: every file after the files it calls
    (a DEFAULT that names a function needs it created first; bodies are checked at the end), and
    by name where the calls leave a choice. The file graph is acyclic (tests/sql/test_sql_files.py);
    were it not, a cycle's files would follow by how few others each waits for."""
    edges = api_calls(api)
    waits = {file: {b for (a, b) in edges if a == file} for file, _ in api}
    ready = [file for file, callees in waits.items() if not callees]
    heapq.heapify(ready)
    order: list[str] = []
    while ready or len(order) < len(waits):
        if not ready:  # a cycle: the remaining file that waits for the fewest others, then by name
            ready = [min((len(c), f) for f, c in waits.items() if f not in order)[1]]
        file = heapq.heappop(ready)
        if file in order:
            continue
        order.append(file)
        for other, callees in waits.items():
            if file in callees:
                callees.discard(file)
                if not callees and other not in order:
                    heapq.heappush(ready, other)
    text = dict(api)
    return [(file, text[file]) for file in order]


def load_sql_files(root: Traversable | None = None) -> SqlFiles:
    """Read ``root`` (default: the shipped ``sql/``); MigrationError when two migrations share a number."""
    root = root or sql_root()
    migrations = []
    for f in _files(root / "migrations"):
        data = f.read_bytes()
        migrations.append(Migration(f.name[:-4], data.decode("utf-8"), hashlib.sha256(data).hexdigest()))
    names = [m.name for m in migrations]
    if len(set(n.split("_", 1)[0] for n in names)) != len(names):
        raise MigrationError(f"two migrations share a number: {names}")
    api = api_order([(f.name, f.read_text(encoding="utf-8")) for f in _files(root / "api")])
    citus = root / "citus.sql"
    return SqlFiles((root / "bootstrap.sql").read_text(encoding="utf-8"), migrations, api,
                    (root / "grants.sql").read_text(encoding="utf-8"),
                    citus.read_text(encoding="utf-8") if citus.is_file() else "")


def _lock(conn: psycopg.Connection, lock_timeout: float) -> None:
    """Take the migration lock, waiting at most ``lock_timeout`` seconds. Any role that can
    connect may hold an advisory lock, so a migrate that cannot get it names who holds it."""
    conn.execute(Q["migration_lock_wait"], {"timeout": f"{max(int(lock_timeout * 1000), 1)}ms"}, prepare=False)
    try:
        conn.execute(Q["migration_lock"], prepare=False)
    except psycopg.errors.LockNotAvailable:
        holders = conn.execute(Q["migration_lock_holders"], prepare=False).fetchall()
        who = "; ".join(f"pid {pid} (role {role}, application {app or '-'}, {state})"
                        for pid, role, app, state, _ in holders) or "a session that has since ended"
        pids = ", ".join(str(h[0]) for h in holders) or "<pid>"
        raise MigrationError(
            f"another session holds pymem's migration lock and kept it for {lock_timeout:g} s: {who}. "
            f"If it is not a migrate, an administrator can end it: SELECT pg_terminate_backend({pids});",
            sqlstate="55P03",
        ) from None
    conn.execute(Q["migration_lock_wait"], {"timeout": "0"}, prepare=False)


def migrate(conninfo: str, *, root: Traversable | None = None, roles: dict[str, str | None] | None = None,
            lock_timeout: float = 60.0) -> Result:
    """Apply pending migrations, re-apply the API files and the grants. Safe to run
    concurrently and twice. ``roles`` may name the owner_role / app_role / reader_role (see
    sql/grants.sql); None keeps what the database recorded (or the defaults). Waits at most
    ``lock_timeout`` seconds for another migrate (or whoever holds its advisory lock)."""
    if not lock_timeout > 0:
        raise MigrationError(f"lock_timeout must be a positive number of seconds, not {lock_timeout!r}")
    files = load_sql_files(root)
    result = Result()
    with connect(conninfo) as conn, errors(conninfo):
        conn.execute(Q["migration_session_path"], prepare=False)
        for key, name in (roles or {}).items():
            if name:
                conn.execute(Q["migration_role_setting"], {"key": f"pymem.{key}", "name": name}, prepare=False)
        _lock(conn, lock_timeout)
        try:
            conn.execute(files.bootstrap, prepare=False)
            for m in files.migrations:
                args = {"name": m.name, "checksum": m.checksum, "version": __version__}
                if not one_value(conn.execute(Q["migration_pending"], args, prepare=False).fetchone()):
                    continue
                with conn.transaction():
                    conn.execute(Q[_path_query(m.name)], prepare=False)
                    conn.execute(m.sql, prepare=False)
                    conn.execute(Q["migration_search_path"], prepare=False)
                    conn.execute(Q["migration_check_dependencies"], prepare=False)
                    conn.execute(Q["migration_applied"], args, prepare=False)
                result.applied.append(m.name)
            if not files.api:
                # no api/ files: nothing to refresh (and never "every function is stale")
                return result
            citus = bool(files.citus) and bool(one_value(conn.execute(Q["migration_citus"], prepare=False).fetchone()))
            if citus:  # outside the refresh's transaction: the probe reads the shards on their nodes
                conn.execute(Q["migration_citus_probe"], prepare=False)
            with conn.transaction():
                conn.execute(Q["migration_search_path"], prepare=False)
                conn.execute(files.bootstrap, prepare=False)  # its functions count as current too
                for step in API_BEFORE:
                    conn.execute(Q[step], prepare=False)
                for name, text in files.api:
                    conn.execute(text, prepare=False)
                    result.api_files.append(name)
                conn.execute(Q["migration_search_path"], prepare=False)
                # before grants.sql, whose GRANTs rewrite every function's catalog row
                result.dropped = one_value(conn.execute(Q["migration_drop_stale_functions"], prepare=False).fetchone())
                if files.citus and one_value(conn.execute(Q["migration_citus"], prepare=False).fetchone()):
                    conn.execute(files.citus, prepare=False)  # docs/scaling-out.md
                if files.grants.strip():
                    conn.execute(files.grants, prepare=False)
                for step in API_AFTER:
                    conn.execute(Q[step], prepare=False)
                conn.execute(Q["migration_api_applied"], {"checksum": files.api_checksum}, prepare=False)
            if citus:  # a fresh cluster: probe the shards the refresh placed (docs/scaling-out.md)
                conn.execute(Q["migration_citus_plan_cache_after"], prepare=False)
        finally:
            if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                conn.execute(Q["migration_unlock"], prepare=False)
    return result


def check(conninfo: str, *, root: Traversable | None = None) -> list[str]:
    """Problems that keep the database from being current; empty when it is. Beyond the
    migrations: the last API refresh must have completed with these files (its checksum), and
    the roles, ownership and privileges must be what grants.sql keeps (a migrate whose grants
    step failed, or a grant revoked or an owner changed by hand, is not current)."""
    files = load_sql_files(root)
    with connect(conninfo) as conn, errors(conninfo):
        if not one_value(conn.execute(Q["schema_exists"]).fetchone()):
            return ["schema pymem is not installed: every migration is pending (run: pymem migrate)"]
        applied = {row[0]: row[1] for row in conn.execute(Q["applied_migrations"])}
        problems = []
        known = {m.name for m in files.migrations}
        retired = sorted(n for n in set(applied) - known if _retired(n))
        if retired:
            problems.append(f"retired: {len(retired)} migrations of a 0.2.0 development build are applied "
                            f"({retired[0]} to {retired[-1]}), which this pymem ({__version__}) ships squashed as "
                            f"{' and '.join(SQUASHED)} (run: pymem migrate; it records all 34 as those two, and "
                            f"stops with PM013 on a database that has only some: CHANGELOG.md)")
        for m in files.migrations:
            if retired and m.name in SQUASHED:
                continue  # said above
            if m.name not in applied:
                problems.append(f"pending: migrations/{m.name}.sql has not been applied (run: pymem migrate)")
            elif applied[m.name] != m.checksum:
                problems.append(
                    f"changed: migrations/{m.name}.sql differs from the file applied "
                    f"(applied sha256 {applied[m.name]}, file sha256 {m.checksum})"
                )
        for name in sorted(set(applied) - known - set(retired)):
            problems.append(f"unknown: migration {name} is applied but this pymem ({__version__}) does not ship it")
        if problems or not files.api:
            return problems  # the API refresh and grants run after the migrations: nothing to compare yet
        recorded = one_value(conn.execute(Q["migration_api_recorded"]).fetchone())
        if recorded is None:
            problems.append("api: no migrate has completed the API refresh (functions, roles, ownership and "
                            "grants): the last one failed or was interrupted (run: pymem migrate)")
        elif recorded != files.api_checksum:
            problems.append(f"api: the API functions and grants were last applied from other files than this "
                            f"pymem's ({__version__}): a migrate by another version, or one that failed "
                            f"(run: pymem migrate)")
        else:  # the installed check is this version's
            problems += [row[0] for row in conn.execute(Q["migration_check_grants"])]
            problems += [row[0] for row in conn.execute(Q["migration_check_shared"])]
            problems += [row[0] for row in conn.execute(Q["migration_check_citus"])]
    return problems


def hazards(conninfo: str) -> list[str]:
    """What is current but unsafe, one line each: today, an owner role that can log in without a
    password (``pymem.migration_owner_login()``; what the connected role cannot see is said, not
    guessed). Call it on a current schema (``check`` found nothing): ``pymem migrate --check`` and
    ``pymem migrate`` print these on stderr, and they change no exit code."""
    with connect(conninfo) as conn, errors(conninfo):
        return [row[0] for row in conn.execute(Q["migration_owner_login"])]


def render_psql(root: Traversable | None = None) -> str:
    """The text of sql/migrate.sql for these files (psql glue around the same files and queries)."""
    files = load_sql_files(root)
    def q(query: str, **literals: str) -> str:
        # A named query as one psql step; \gset swallows its result row (and sends it once:
        # the trailing semicolon is dropped, or psql would send the query a second time).
        text = Q[query].rstrip().rstrip(";")
        for param, value in literals.items():
            text = text.replace(f"%({param})s", f"'{value}'")
        return text + "\n" + r"\gset pymem_"

    out = [
        "-- migrate.sql: bring this database to the current pymem schema with plain psql:",
        '--   psql -v ON_ERROR_STOP=1 -d "$DSN" -f sql/migrate.sql',
        "-- Safe to run twice and concurrently (an advisory lock serialises runs).",
        "-- GENERATED by `python -m pymem.migrations` from bootstrap.sql, migrations/, api/ and",
        "-- queries.sql; do not edit (a test fails when this file is stale).",
        r"\set ON_ERROR_STOP 1",
        r"\set QUIET 1",
        "SET client_min_messages = warning;",
        q("migration_session_path"),
        q("migration_lock"),
        r"\ir bootstrap.sql",
    ]
    for m in files.migrations:
        lit = {"name": m.name, "checksum": m.checksum}
        out += [
            "",
            f"-- {m.name}",
            q("migration_pending", **lit),
            r"\if :pymem_pending",
            "BEGIN;",
            q(_path_query(m.name)),
            rf"\ir migrations/{m.name}.sql",
            q("migration_search_path"),
            q("migration_check_dependencies"),
            q("migration_applied", **lit, version=__version__),
            "COMMIT;",
            r"\echo pymem: applied " + m.name,
            r"\endif",
        ]
    if files.api:
        if files.citus:  # outside the refresh's transaction: the probe reads the shards on their nodes
            out += ["", q("migration_citus"), r"\if :pymem_citus", q("migration_citus_probe"), r"\endif"]
        out += ["", "-- API functions (re-applied every run)", "BEGIN;", q("migration_search_path"), r"\ir bootstrap.sql"]
        out += [q(step) for step in API_BEFORE]
        out += [rf"\ir api/{name}" for name, _ in files.api]
        out += [q("migration_search_path"), q("migration_drop_stale_functions")]
        if files.citus:
            out += [q("migration_citus"), r"\if :pymem_citus", r"\ir citus.sql", r"\endif"]
        out += [r"\ir grants.sql"]
        out += [q(step) for step in API_AFTER]
        out += [q("migration_api_applied", checksum=files.api_checksum), "COMMIT;"]
        if files.citus:
            out += [q("migration_citus"), r"\if :pymem_citus", q("migration_citus_plan_cache_after"), r"\endif"]
    out += [q("migration_unlock"), ""]
    return "\n".join(out)


def public_names() -> list[str]:
    """``pymem.__all__``, read from pymem/__init__.py without importing the package."""
    tree = ast.parse(Path(__file__).with_name("__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise ValueError("pymem/__init__.py has no __all__")


def calls_text(root: Path) -> str:
    """pymem/calls.py as sql/queries.sql and the API files' signatures (``root``: sql/) make it."""
    api = "\n".join(f.read_text(encoding="utf-8") for f in sorted((root / "api").glob("*.sql")))
    return render_calls((root / "queries.sql").read_text(encoding="utf-8"), api)


def generated_files(root: Path) -> list[tuple[Path, str]]:
    """What ``python -m pymem.migrations`` writes in a source checkout (``root``: its sql/), and
    the text of each: sql/migrate.sql, pymem/calls.py and the reference pages of docs/."""
    docs = root.parent / "docs" / "reference"
    return [(root / "migrate.sql", render_psql(root)),
            (Path(__file__).with_name("calls.py"), calls_text(root)),
            (docs / "sql-functions.md", render_sql_reference(root / "api")),
            (docs / "python.md", render_python_reference(public_names()))]


def main() -> None:
    """Regenerate sql/migrate.sql, pymem/calls.py and docs/reference/ in a source checkout."""
    root = Path(str(sql_root()))
    if not (root.parent / "docs").is_dir():
        raise SystemExit(f"{root} is not the sql/ folder of a source checkout (no docs/ beside it)")
    for target, text in generated_files(root):
        target.parent.mkdir(exist_ok=True)
        with open(str(target), "w", encoding="utf-8") as f:  # type: ignore[arg-type]
            f.write(text)
        print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
