"""pymem's exceptions, and the one place that turns database errors into them.

Every exception is a `pymem.Error` and carries ``sqlstate`` (the SQLSTATE the
server raised, or ``None`` for errors found before a query was sent). SQL functions in
schema ``pymem`` raise documented SQLSTATEs (docs/errors.md); `translate` maps
them, and PostgreSQL's own classes, to the hierarchy below. `redact` is the one place
a connection string's password is taken out of a message (docs/security.md).
"""

from __future__ import annotations

import re
import urllib.parse

import psycopg


class Error(Exception):
    """Base class of every error pymem raises. ``str()`` is the message followed by
    ``(hint: ...)`` when there is a hint."""

    sqlstate: str | None = None
    #: the constraint a class-23 error names, when the server says
    constraint: str | None = None
    #: how to fix it, in the caller's words (`PYTHON_HINTS`; the CLI rewords a few)
    hint: str | None = None
    #: the hint as the server sent it, in SQL's words (None when the error is not the server's)
    server_hint: str | None = None

    def __init__(self, message: str, *, sqlstate: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate
        self.hint = hint

    def __str__(self) -> str:
        message = super().__str__()
        return f"{message} (hint: {self.hint})" if self.hint else message


class ConfigError(Error, ValueError):
    """Settings that cannot work (bad DSN, pool sizes, ...). A ValueError too, as pydantic's
    errors about a setting were before `pymem.Settings` raised this instead."""


class ServerError(Error):
    """The embedded server could not be started, found or stopped."""


class ConnectionError(Error):  # noqa: A001 - pymem.ConnectionError reads naturally
    """The database could not be reached, or the connection broke mid-call."""


class MigrationError(Error):
    """The schema is missing, behind, changed after it was applied, or cannot be installed."""


class ExtensionError(MigrationError):
    """pgvector is missing, too old, or this role may not create it (SQLSTATE PM001)."""


class ValidationError(Error, ValueError):
    """Input the API refuses: bad ids, scopes, content, limits, vectors (SQLSTATE class 22)."""


class InTransactionError(ValidationError):
    """A call that would make a model call (the embedder's, unless it is ``cheap``; the learner's or
    the extractor's) while the transaction of the caller's own connection is open
    (`pymem.Memory.bound`, ``conn=``): refused before the model is called, so that no
    transaction holds its locks and its snapshot while a model answers. Pass the vectors
    (``embedding=``, ``embeddings=``), make the call outside the transaction, or allow it with
    ``mem.bound(conn, allow_model_calls=True)``. No SQLSTATE."""


class NotFoundError(Error, LookupError):
    """The row a call names does not exist (SQLSTATE P0002)."""


class ConflictError(Error):
    """The call lost a race or would break a rule another row holds (class 23, 40001)."""


class ConcurrencyError(ConflictError):
    """A write's expected_sha is no longer the path's current sha (SQLSTATE PM401)."""


class PermissionError(Error):  # noqa: A001
    """The connected role may not do this (SQLSTATE 42501)."""


class TimeoutError(Error):  # noqa: A001
    """The statement ran past the configured statement timeout (SQLSTATE 57014), or waited past
    the lock timeout for a lock another session holds (55P03)."""


class QueryError(Error):
    """Any other database error; ``sqlstate`` says which."""


# The server's hints that name a SQL parameter or function (``replace => true``,
# ``store_open(...)``), in Python's words: translate() shows these instead. The CLI rewords the
# ones its commands can meet (pymem.cli.CLI_HINTS). tests/cli_web/test_cli_hints.py checks that every
# such hint in sql/api/ has an entry here.
PYTHON_HINTS: dict[str, str] = {
    # sql/api/facts.sql, _fact_check_subject: a user or project fact with an empty id
    "Pass the user's id as scope_id, or scope => 'agent' for a fact every user of the agent shares.":
        'Name the user (user=... or Memory(user_id=...)), or tier="global" for a fact every user of the agent shares.',
    "Pass the project's id as scope_id.":
        'Pass id=..., or give the Memory a project_id (tier="project" then files the fact under it).',
    # sql/api/facts_versions.sql, fact_supersede: a change in the world after it is recorded
    "Supersede when the change has happened; a planned fact is added with fact_add(write => pymem.fact_write(valid_from => ...)).":
        "Update the fact when the change has happened; add a planned fact with persist(..., valid_from=...).",
    # sql/api/portability.sql, user_import: the user already has memory there
    "Import under another user_id, or pass replace => true.": "Import under another user_id=..., or pass replace=True.",
    # sql/api/recall_indexes.sql, recall_index_plan
    "Pass min_messages => 50000 (the default) or another positive count.":
        "Pass min_messages=50000 (the default) or another positive count.",
    # sql/api/stores.sql
    "Create it with store_open(..., create => true).": "Create it with MemoryStore.get_or_create(key).",
    "store_open never changes an existing store's options: open it without them, or change them with "
    "pymem.store_protect (tighten) or pymem.store_configure (owner role).":
        "get_or_create never changes an existing store's options: call it without them, or change them with "
        "store.protect() (tighten) or store.configure() (owner role).",
    "The owner role (an administrator) may weaken them with pymem.store_configure.":
        "The owner role (an administrator) may weaken them with store.configure().",
    # sql/api/lifecycle.sql, retention_configure
    "e.g. messages_max_age => '90 days'; NULL keeps messages of any age.":
        "e.g. messages_max_age=timedelta(days=90); None keeps messages of any age.",
    "Build it first, as the owner role (writes go on meanwhile): DROP INDEX CONCURRENTLY IF EXISTS "
    "pymem.messages_created; CREATE INDEX CONCURRENTLY messages_created ON pymem.messages "
    "(project_id, created_at); pymem retention --max-age does both.":
        "pymem.lifecycle.configure_retention(db, ..., messages_max_age=...) builds it, as the owner role; one "
        "that a failed build left invalid must be dropped first: DROP INDEX CONCURRENTLY pymem.messages_created.",
}

# SQLSTATE -> class, most specific first. pymem's own codes are in class PM.
_BY_SQLSTATE: dict[str, type[Error]] = {
    "PM001": ExtensionError,
    "PM002": MigrationError,
    "PM010": MigrationError,  # the migrating role lacks a privilege the migrate needs (the hint names the GRANT)
    "PM011": MigrationError,  # something stored in schema pymem would call a planted look-alike
    "PM012": MigrationError,  # an old function signature that something depends on would stay beside the new one
    "PM013": MigrationError,  # a 0.2.0 development build's migrations 0006-0049 applied in part (CHANGELOG.md)
    "57014": TimeoutError,
    "55P03": TimeoutError,  # lock_not_available: a lock wait ran past lock_timeout (recall_index_plan names the holder)
    "PM201": ConflictError,  # fact already superseded
    "PM401": ConcurrencyError,  # store entry changed since it was read
    "PM402": PermissionError,  # store path under a read-only prefix
    "PM403": ValidationError,  # reserved store path
    "PM404": ConflictError,  # store_open's options differ from the existing store's
    "P0002": NotFoundError,
    "42501": PermissionError,
    "40001": ConflictError,
    "40P01": ConflictError,
    "3F000": MigrationError,  # invalid_schema_name: schema pymem is missing
    "42883": MigrationError,  # undefined_function: API function missing, not migrated
    "42P01": MigrationError,  # undefined_table
}

#: what a pymem call that finds no pymem schema (or no pgvector) tells the caller
MIGRATE_HINT = "run `pymem migrate` on this database (or psql -f sql/migrate.sql)"
# psycopg refuses to send a pgvector value when pgvector's types were not found on the
# connection: pgvector is not installed, so the database was never migrated.
_UNSENDABLE_VECTOR = ("cannot adapt type 'Vector'", "cannot adapt type 'PackedVector'", "cannot adapt type 'HalfVector'")

_BY_CLASS: dict[str, type[Error]] = {
    "22": ValidationError,
    "23": ConflictError,
    "08": ConnectionError,
    "57": ConnectionError,  # operator intervention: admin shutdown, terminated backend
}


def translate(exc: psycopg.Error) -> Error:
    """Return the pymem exception for a psycopg error (chain it with ``raise ... from exc``)."""
    sqlstate = getattr(exc, "sqlstate", None)
    diag = getattr(exc, "diag", None)
    message = (diag.message_primary if diag is not None else None) or str(exc).strip()
    if diag is not None and diag.message_detail:
        message = f"{message} (detail: {diag.message_detail})"
    server_hint = diag.message_hint if diag is not None else None
    hint = PYTHON_HINTS.get(server_hint, server_hint) if server_hint else None
    if sqlstate is None:
        from psycopg_pool import PoolTimeout

        if isinstance(exc, PoolTimeout):  # the server is fine; every pooled connection is busy
            return TimeoutError(f"no free connection in the pool: {message} (raise PYMEM_POOL_MAX_SIZE?)")
        if isinstance(exc, psycopg.OperationalError):
            return ConnectionError(message)
        if isinstance(exc, psycopg.ProgrammingError) and message.startswith(_UNSENDABLE_VECTOR):
            # psycopg's own words (it cannot adapt a Vector: pgvector's types were not found) say
            # nothing to the user; the hint says the one thing to do, once
            missing = MigrationError("schema pymem is not installed in this database (nor pgvector, which it needs)")
            missing.hint = MIGRATE_HINT
            return missing
        return QueryError(message)
    cls = _BY_SQLSTATE.get(sqlstate) or _BY_CLASS.get(sqlstate[:2], QueryError)
    err = cls(message, sqlstate=sqlstate, hint=hint)
    err.server_hint = server_hint
    err.constraint = diag.constraint_name if diag is not None else None
    return err


#: what stands where a password was
REDACTED = "***"
_URI = re.compile(r"^\s*postgres(?:ql)?://", re.I)
_KEY_VALUE_PASSWORD = re.compile(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)((?:\s+(?![A-Za-z_]+\s*=)\S+)*)")
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'")


def _passwords(conninfo: str) -> set[str]:
    """Every string that may be the password of ``conninfo``, read without libpq (which refuses
    the very strings whose errors must not show it): a URI's userinfo up to the first ``@`` (libpq's
    reading) and up to the last one before the path (the writer's, when a ``@`` was not encoded),
    a ``password`` query parameter, a ``password=`` key/value, quoted or not (and what follows an
    unquoted one up to the next ``key=``, which the writer may have meant as part of it)."""
    found: set[str] = set()
    if _URI.match(conninfo):
        rest = conninfo.split("://", 1)[1]
        head, _, query = rest.partition("?")
        authority = head.split("/", 1)[0]
        for userinfo in (authority.partition("@")[0] if "@" in authority else "",
                         head.rpartition("@")[0]):
            if ":" in userinfo:
                found.add(userinfo.split(":", 1)[1])
        for pair in query.split("&"):
            key, _, value = pair.partition("=")
            if urllib.parse.unquote(key).strip() == "password":
                found.add(pair.split("=", 1)[1] if "=" in pair else "")
    else:
        for match in _KEY_VALUE_PASSWORD.finditer(conninfo):
            value, more = match.group(1), match.group(2)
            if value.startswith("'"):
                inner = value[1:-1] if len(value) > 1 and value.endswith("'") else value[1:]
                found |= {inner, re.sub(r"\\(.)", r"\1", inner)}
            else:
                found |= {value, value + more, re.sub(r"\\(.)", r"\1", value)}
    spelled: set[str] = set()
    for secret in found:
        decoded = urllib.parse.unquote(secret)
        spelled |= {secret, decoded, urllib.parse.quote(decoded, safe=""), repr(decoded)[1:-1],
                    decoded.replace("\\", "\\\\").replace("'", "\\'")}
    return {s for s in spelled if s}


def redact(text: str, conninfo: str | None) -> str:
    """``text`` without the password of ``conninfo`` (a libpq URI or key/value string, parsed
    or not) in any spelling: as written, percent-decoded, percent-encoded, escaped. A quoted word
    of ``text`` (libpq and psycopg quote what they refuse) that is part of a password, or holds a
    piece of one (a password with an unencoded ``@`` or ``/`` that libpq read as a host or port),
    becomes ``***`` whole. The one place pymem removes passwords: every message built from a
    connection string or from libpq's errors about one goes through it."""
    if not conninfo or not text:
        return text
    secrets = _passwords(conninfo)
    if not secrets:
        return text
    pieces = {p for s in secrets for p in re.split(r"[@:/\s]+", s) if len(p) >= 2}

    def quoted(match: re.Match[str]) -> str:
        word = match.group(1) if match.group(1) is not None else match.group(2)
        if word and (any(word in s for s in secrets) or any(p in word for p in pieces)):
            q = match.group(0)[0]
            return f"{q}{REDACTED}{q}"
        return match.group(0)

    text = _QUOTED.sub(quoted, text)
    for secret in sorted(secrets, key=len, reverse=True):  # a short one only as a word of its own
        text = text.replace(secret, REDACTED) if len(secret) >= 4 else re.sub(
            rf"(?<!\S){re.escape(secret)}(?!\S)", REDACTED, text)
    return text


def redacted(err: Error, conninfo: str | None) -> Error:
    """``err`` with `redact` applied to its message and hints (in place; returned)."""
    if conninfo and err.args and isinstance(err.args[0], str):
        err.args = (redact(err.args[0], conninfo), *err.args[1:])
        err.hint = redact(err.hint, conninfo) if err.hint else err.hint
        err.server_hint = redact(err.server_hint, conninfo) if err.server_hint else err.server_hint
    return err
