"""The SQL the package ships, and the named queries the Python layer sends.

``sql/`` is a top-level folder of the repository; the wheel carries it as ``pymem/sql``
(see pyproject.toml). `sql_root` finds it either way. Every statement Python sends
is a named query in ``sql/queries.sql``; `Q` maps names to their text.
"""

from __future__ import annotations

import keyword
import re
import textwrap
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


_PLACEHOLDER = re.compile(r"%\((\w+)\)[sbt]")


def placeholders(statement: str) -> list[str]:
    """The named placeholders of a statement, in order of first use (as psycopg reads them:
    comments included)."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(statement)))


# SQL types to the Python values psycopg adapts to them. A placeholder whose type is not here
# (jsonb, vector, bytea, a row type, ...) stays Any: psycopg wrappers (Jsonb, Vector) and plain
# values both fit there.
_PYTHON_TYPES = {"text": "str", "integer": "int", "bigint": "int", "smallint": "int", "int": "int", "int4": "int",
                 "int8": "int", "double precision": "float", "float8": "float", "real": "float", "boolean": "bool",
                 "bool": "bool", "timestamptz": "datetime", "timestamp with time zone": "datetime", "interval": "timedelta",
                 "text[]": "Sequence[str]", "bigint[]": "Sequence[int]", "integer[]": "Sequence[int]",
                 "double precision[]": "Sequence[float]", "float8[]": "Sequence[float]", "boolean[]": "Sequence[bool]"}
_SIGNATURE = re.compile(r"^CREATE OR REPLACE FUNCTION pymem\.(\w+)\((.*?)\)\s*RETURNS", re.M | re.S)
_CAST = r"%\({name}\)[sbt]::([a-z0-9_]+(?: precision)?(?:\[\])?)"


def _split_top(text: str) -> list[str]:
    """``text`` split at its commas outside parentheses and brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def sql_signatures(api_text: str) -> dict[str, list[tuple[str, str]]]:
    """{function: [(parameter, SQL type), ...]} of every pymem function an API text creates."""
    out: dict[str, list[tuple[str, str]]] = {}
    for m in _SIGNATURE.finditer(api_text):
        params = []
        for part in _split_top(re.sub(r"--[^\n]*", "", m.group(2))):
            words = re.split(r"\s+DEFAULT\s+", part.strip(), maxsplit=1, flags=re.I)[0].split(None, 1)
            if len(words) == 2:
                params.append((words[0], words[1].strip().lower()))
        out[m.group(1)] = params
    return out


def _enclosing_call(statement: str, at: int) -> tuple[str, str] | None:
    """The pymem function whose argument list holds position ``at``, and the argument there
    (its text), or None when ``at`` is not an argument of a pymem function."""
    depth = 0
    for i in range(at, -1, -1):
        ch = statement[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            if depth == 0:
                m = re.search(r"pymem\.(\w+)\s*$", statement[:i])
                if not m:
                    return None
                close, d = i + 1, 0
                while close < len(statement) and not (statement[close] == ")" and d == 0):
                    d += {"(": 1, ")": -1}.get(statement[close], 0)
                    close += 1
                args, offset = _split_top(statement[i + 1:close]), i + 1
                for n, arg in enumerate(args):
                    if offset <= at < offset + len(arg) + 1:
                        return m.group(1), f"{n}:{arg}"
                    offset += len(arg) + 1
                return None
            depth -= 1
    return None


def placeholder_types(statement: str, signatures: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """The Python type of each placeholder of a statement: from its cast (``%(k)s::integer``),
    else from the parameter of the pymem function it is passed to (by name or by position), else
    Any. Every one also takes None (NULL)."""
    out: dict[str, str] = {}
    for name in placeholders(statement):
        py = "Any"
        cast = re.search(_CAST.format(name=name), statement)
        if cast:
            py = _PYTHON_TYPES.get(cast.group(1), "Any")
        else:
            for m in re.finditer(r"%\(" + name + r"\)[sbt]", statement):
                call = _enclosing_call(statement, m.start())
                if call is None:
                    continue
                fn, arg = call
                index, text = arg.split(":", 1)
                params = signatures.get(fn, [])
                named = re.match(r"\s*(\w+)\s*=>", text)
                sql_type = (dict(params).get(named.group(1)) if named
                            else params[int(index)][1] if int(index) < len(params) else None)
                if sql_type:
                    py = _PYTHON_TYPES.get(sql_type, "Any")
                    break
        out[name] = py if py == "Any" else f"{py} | None"
    return out


def render_calls(text: str, api_text: str) -> str:
    """The text of pymem/calls.py for a queries file: one keyword-only function per named query,
    its parameters the query's placeholders, typed from their casts or from the signatures of the
    pymem functions they are passed to (``api_text``: the API files), returning the
    `pymem.types.Query` an operation yields."""
    signatures = sql_signatures(api_text)
    out = [
        '"""GENERATED by ``python -m pymem.migrations`` from sql/queries.sql; do not edit (a test fails',
        "when this file is stale). One function per named query: keyword-only parameters, the query's",
        "placeholders, and the `pymem.types.Query` that an operation yields to send it. A",
        "placeholder renamed in sql/queries.sql renames the parameter here, so a caller that still passes",
        "the old name fails at the call (TypeError), and go-to-definition leads from a call to its query.",
        "Each parameter's type comes from its cast in the query, or from the SQL type of the pymem",
        "function's parameter it is passed to (mypy checks the callers); jsonb, vectors and row types are Any.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Sequence",
        "from datetime import datetime, timedelta",
        "from typing import Any",
        "",
        "from .types import Query",
    ]
    for name, statement in parse_queries(text).items():
        params = placeholders(statement)
        types = placeholder_types(statement, signatures)
        bad = [p for p in params if keyword.iskeyword(p)]
        if bad:
            raise ValueError(f"query {name!r}: placeholder {bad[0]!r} is a Python keyword")
        doc = []
        for line in statement.splitlines():
            if not line.startswith("--"):
                break
            doc.append(line[2:].strip())
        summary = " ".join(doc).replace("\\", "\\\\").replace('"', "'") or f"The named query {name}."
        out += ["", ""]
        if params:
            head = f"def {name}(*, {', '.join(f'{p}: {types[p]}' for p in params)}) -> Query:"
            if len(head) > 100:  # one parameter a line
                head = "\n".join([f"def {name}(", "    *,", *(f"    {p}: {types[p]}," for p in params), ") -> Query:"])
            out.append(head)
        else:
            out.append(f"def {name}() -> Query:")
        out += textwrap.wrap(f'"""{summary}"""', 100, initial_indent="    ", subsequent_indent="    ")
        out.append(f'    return Query("{name}", {{{", ".join(f"{chr(34)}{p}{chr(34)}: {p}" for p in params)}}})')
    return "\n".join(out) + "\n"
