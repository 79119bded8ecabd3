"""The SQL the package ships, and the named queries the Python layer sends.

``sql/`` is a top-level folder of the repository; the wheel carries it as ``pymem/sql``
(see pyproject.toml). :func:`sql_root` finds it either way. Every statement Python sends
is a named query in ``sql/queries.sql``; :data:`Q` maps names to their text.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import LiteralString, cast

_HEADER = re.compile(r"^-- name: (?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def sql_root() -> Traversable:
    """The folder holding migrate.sql, bootstrap.sql, migrations/, api/ and queries.sql."""
    packaged = resources.files("pymem") / "sql"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "sql"  # running from a source tree
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError("pymem's SQL files are missing: reinstall the package (pip install pymem-pg)")


def parse_queries(text: str) -> dict[str, str]:
    """Split a queries file into {name: statement}. Comments after a header are kept."""
    matches = list(_HEADER.finditer(text))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[m.end() : end].strip()
        name = m.group("name")
        if name in out:
            raise ValueError(f"query {name!r} is defined twice")
        if not body:
            raise ValueError(f"query {name!r} is empty")
        out[name] = body
    return out


def load_queries() -> dict[str, LiteralString]:
    text = (sql_root() / "queries.sql").read_text(encoding="utf-8")
    return cast(dict[str, LiteralString], parse_queries(text))


class _Queries(dict):
    def __missing__(self, name: str) -> str:
        raise KeyError(f"no query named {name!r} in sql/queries.sql")


#: name -> SQL text of every named query in sql/queries.sql
Q: dict[str, LiteralString] = _Queries(load_queries())
