"""pymem: memory for AI agents, kept in PostgreSQL + pgvector.

The logic lives in versioned SQL (schema ``pymem``); this package installs it
(`migrate`), connects to it (`Database`) and wraps its functions.

Modules, in import order (each imports only those before it): ``connection`` (conninfo,
connections, error translation), ``migrations`` (the versioned SQL), ``database`` (the pools,
and migrating the embedded server), ``runner`` (drives operations: named queries, embedding,
user callbacks), ``options`` (MemoryOptions, the user resolution), the capabilities ``facts``,
``recall``, ``conversations``, ``context``, ``stores``, ``erasure``, ``portability`` and ``learning`` (each a module of
operations), and ``memory`` (the Memory classes, generated from its table of operations by
``twins``) on top.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("pymem-pg")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

from .connection import connect  # noqa: E402
from .database import AsyncDatabase, Database  # noqa: E402
from .errors import (  # noqa: E402
    ConcurrencyError,
    ConfigError,
    ConflictError,
    ConnectionError,
    Error,
    ExtensionError,
    InTransactionError,
    MigrationError,
    NotFoundError,
    PermissionError,
    QueryError,
    ServerError,
    TimeoutError,
    ValidationError,
)
from .blocks import Block, BlockOutput, StaticBlock, Upstream  # noqa: E402
from .context import Context  # noqa: E402
from .embedders import Embedder, HashEmbedder  # noqa: E402
from .memory import AsyncMemory, Memory, acontext, arecord, context, default_async_memory, default_memory, record  # noqa: E402
from .runner import bound  # noqa: E402
from .migrations import check as check_migrations  # noqa: E402
from .migrations import migrate  # noqa: E402
from .options import MemoryOptions, RecallOptions  # noqa: E402
from .settings import Settings  # noqa: E402
from .stores import MUST_NOT_EXIST, AsyncMemoryStore, MemoryStore  # noqa: E402
from .types import Erasure, Fact, FactId, LearningReport, LearningStatus, Merge, Message, TurnResult, UserInfo  # noqa: E402

__all__ = [
    "MUST_NOT_EXIST",
    "AsyncDatabase",
    "AsyncMemoryStore",
    "ConcurrencyError",
    "MemoryStore",
    "AsyncMemory",
    "Block",
    "BlockOutput",
    "StaticBlock",
    "Upstream",
    "Context",
    "Embedder",
    "Message",
    "TurnResult",
    "acontext",
    "arecord",
    "context",
    "default_async_memory",
    "default_memory",
    "record",
    "Erasure",
    "UserInfo",
    "LearningReport",
    "LearningStatus",
    "Merge",
    "Fact",
    "FactId",
    "HashEmbedder",
    "Memory",
    "MemoryOptions",
    "RecallOptions",
    "ConfigError",
    "ConflictError",
    "ConnectionError",
    "Database",
    "Error",
    "ExtensionError",
    "InTransactionError",
    "MigrationError",
    "NotFoundError",
    "PermissionError",
    "QueryError",
    "ServerError",
    "Settings",
    "TimeoutError",
    "ValidationError",
    "__version__",
    "bound",
    "check_migrations",
    "connect",
    "migrate",
]
