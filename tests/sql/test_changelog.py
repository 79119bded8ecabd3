"""CHANGELOG.md against the catalog: every public SQL function added, removed or changed since a
release is named in the changelog's sections newer than that release."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from test_migrations import RELEASES, psql, release_sql

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"

# The public SQL API: every function of schema pymem whose name has neither a leading underscore
# nor the prefix migration_ (the rule of _grants_diff() in sql/bootstrap.sql: those are the
# internal helpers and the migrate's own steps, which only the same version's `pymem migrate` or
# migrate.sql calls; the administrators' functions are public, granted to fewer roles), and never
# pgvector's own (it may live in schema pymem).
API_QUERY = """
SELECT p.proname,
       CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END,
       pg_catalog.pg_get_function_arguments(p.oid),
       p.pronargs - p.pronargdefaults,
       pg_catalog.pg_get_function_result(p.oid),
       -- a named composite result: its columns (pg_get_function_result shows only the type's name)
       (SELECT pg_catalog.string_agg(a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod), ', '
                                     ORDER BY a.attnum)
          FROM pg_catalog.pg_type AS t JOIN pg_catalog.pg_attribute AS a ON a.attrelid = t.typrelid
         WHERE t.oid = p.prorettype AND t.typtype = 'c' AND a.attnum > 0 AND NOT a.attisdropped)
  FROM pg_catalog.pg_proc AS p
 WHERE p.pronamespace = 'pymem'::regnamespace AND p.proname !~ '^(_|migration_)'
   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
                    WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
"""


@dataclass(frozen=True, order=True)
class Signature:
    """One public function as a caller sees it: its arguments as ``pg_get_function_arguments``
    writes them (names, types, modes, defaults), how many it requires, and its result (with
    the columns of a named row type)."""

    name: str
    kind: str
    arguments: str
    required: int
    result: str

    def __str__(self) -> str:
        return f"{self.kind} pymem.{self.name}({self.arguments}) -> {self.result}"

    def extends(self, old: Signature) -> bool:
        """Only new parameters after the old ones, each with a DEFAULT, and the same result: every
        call of ``old`` still runs and reads what it read."""
        return (self.kind == old.kind and self.result == old.result and self.required == old.required
                and (self.arguments.startswith(old.arguments + ", ") if old.arguments else bool(self.arguments)))


def public_api(dsn: str) -> dict[str, list[Signature]]:
    """name -> its signatures (one unless overloaded), from pg_catalog."""
    api: dict[str, list[Signature]] = {}
    with psycopg.connect(dsn) as c:
        for name, kind, args, required, result, columns in c.execute(API_QUERY):
            result += f" [columns: {columns}]" if columns else ""
            api.setdefault(name, []).append(Signature(name, kind, args, required, result))
    return {name: sorted(sigs) for name, sigs in api.items()}


def sections_since(text: str, version: str) -> str:
    """The changelog's text above ``## [<version>]`` (Keep a Changelog: newest first): what
    changed after that release."""
    number = version.removeprefix("v")
    heading = re.search(rf"^## \[{re.escape(number)}\]", text, re.MULTILINE)
    assert heading, f"CHANGELOG.md has no section '## [{number}] - <date>' for the release {version}"
    return text[: heading.start()]


def subsections(text: str) -> dict[str, str]:
    """The text of each ``### <kind>`` subsection (Added, Changed, ...), all releases' together."""
    out: dict[str, str] = {}
    kind = None
    for part in re.split(r"^(#{2,3} .*)$", text, flags=re.MULTILINE):
        if part.startswith("### "):
            kind = part[4:].strip()
        elif part.startswith("## "):
            kind = None
        elif kind:
            out[kind] = out.get(kind, "") + part
    return out


def names(text: str, name: str) -> bool:
    """``text`` names the SQL function ``name`` in backticks: `name`, `pymem.name`, `name(...)`."""
    return re.search(rf"`(pymem\.)?{re.escape(name)}[`(]", text) is not None


def difference(was: list[Signature], now: list[Signature], version: str) -> str:
    return ("".join(f"      {version}: {s}\n" for s in was if s not in now)
            + "".join(f"      now: {s}\n" for s in now if s not in was))


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_every_public_sql_function_changed_since_a_release_is_in_the_changelog(version, empty_dsn, dsn, tmp_path):
    """Installs the release's own SQL (its migrate.sql, API files and grants), reads the public
    SQL API of the release and of this tree from pg_catalog, and requires the subsections of
    CHANGELOG.md above ``## [<release>]`` to name, as `name` in backticks, each function that
    differs:

    - changed: under "### Changed" or "### Removed" (a caller must act: a result type or column,
      an argument's name, type or default, a parameter that is gone or became required);
    - extended (only new parameters after the old ones, each with a DEFAULT, same result: old
      calls still run): in any subsection ("### Added" or "### Changed");
    - removed: under "### Removed", saying what to call instead;
    - added: under "### Added". A new function is caller-visible too: a caller reads "Added" to
      learn what it can now call, Keep a Changelog lists additions, and it costs one line; were
      additions exempt, a function added and then changed before the release would be checked by
      nothing at all.

    Once a newer release is in RELEASES its own section starts the count again, and the
    comparison runs from it as well."""
    old = release_sql(version, tmp_path / version)
    out = psql(empty_dsn, "-f", str(old / "migrate.sql"))
    assert out.returncode == 0, out.stderr
    before, now = public_api(empty_dsn), public_api(dsn)
    assert before and now

    kinds = subsections(sections_since(CHANGELOG.read_text(encoding="utf-8"), version))
    anywhere = "".join(kinds.values())
    must_act = kinds.get("Changed", "") + kinds.get("Removed", "")
    missing = []
    for name in sorted(before.keys() | now.keys()):
        was, isnow = before.get(name, []), now.get(name, [])
        if was == isnow:
            continue
        if not was:
            if not names(kinds.get("Added", ""), name):
                missing.append(f"- `{name}` is new: list it under '### Added', as `{name}`\n"
                               + difference(was, isnow, version))
        elif not isnow:
            if not names(kinds.get("Removed", ""), name):
                missing.append(f"- `{name}` is gone: say under '### Removed', naming `{name}`, what to call instead\n"
                               + difference(was, isnow, version))
        elif len(was) == len(isnow) and all(n.extends(w) for w, n in zip(was, isnow)):
            if not names(anywhere, name):
                missing.append(f"- `{name}` takes new parameters: name `{name}` and them under '### Added' or "
                               "'### Changed'\n" + difference(was, isnow, version))
        elif not names(must_act, name):
            missing.append(f"- `{name}` changed: say under '### Changed' (or '### Removed', for what is gone), "
                           f"naming `{name}`, what a caller must do\n" + difference(was, isnow, version))
    assert not missing, (f"public SQL functions that differ from {version} and that CHANGELOG.md does not name "
                         f"above '## [{version.removeprefix('v')}]':\n" + "\n".join(missing))


def test_the_check_tells_an_extension_from_a_change_and_reads_the_sections():
    """The rules above on small cases, without a database."""
    old = Signature("f", "FUNCTION", "a text, b integer DEFAULT 1", 1, "bigint")
    added = "a text, b integer DEFAULT 1, c jsonb DEFAULT NULL::jsonb"
    assert Signature("f", "FUNCTION", added, 1, "bigint").extends(old)
    assert not Signature("f", "FUNCTION", "a text, b integer DEFAULT 1, c jsonb", 2, "bigint").extends(old)  # required
    assert not Signature("f", "FUNCTION", "a text, b integer DEFAULT 2", 1, "bigint").extends(old)  # a default
    assert not Signature("f", "FUNCTION", added, 1, "pymem.row [columns: id bigint]").extends(old)  # the result
    none = Signature("g", "FUNCTION", "", 0, "void")
    assert Signature("g", "FUNCTION", "x text DEFAULT ''::text", 0, "void").extends(none)
    text = ("# Changelog\n\n## [Unreleased]\n\n### Added\n\n- `pymem.new_one(...)`\n\n### Changed\n\n- `old_one` "
            "returns a row\n\n## [0.1.0] - 2026-11-30\n\n### Changed\n\n- `older_one`\n")
    kinds = subsections(sections_since(text, "v0.1.0"))
    assert names(kinds["Added"], "new_one") and names(kinds["Changed"], "old_one")
    assert not names("".join(kinds.values()), "older_one")  # the release's own section is not counted
    assert not names(kinds["Added"], "new")  # a prefix of a name is not the name
