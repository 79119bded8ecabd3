"""The package's modules import one way (connection <- migrations <- database <- runner <-
options <- capabilities <- memory), and no import hides inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pymem

PACKAGE = Path(pymem.__file__).parent
# modules anything may import (they import none of the layered ones)
LEAVES = {"errors", "settings", "server", "queries", "values", "embedders", "tracing", "llm", "http", "types", "calls",
          "reference", "timeref", "twins", "__version__"}
# each may import the leaves and the modules before it
ORDER = ["connection", "migrations", "database", "runner", "blocks", "options", "facts", "recall", "conversations",
         "context", "stores", "erasure", "portability", "lifecycle", "learning", "changes", "browse", "memory", "tools", "mcp", "web", "demo", "cli"]


def _runtime_imports(path: Path) -> tuple[set[str], list[int]]:
    """The pymem modules ``path`` imports at module level (``if TYPE_CHECKING:`` blocks are
    types only), and the lines of imports inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom) and sub.level == 1:
                found |= {sub.module.split(".")[0]} if sub.module else {a.name for a in sub.names}
    local = [sub.lineno for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for sub in ast.walk(fn) if isinstance(sub, ast.ImportFrom) and sub.level >= 1]
    return found, local


def test_modules_import_one_way():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert modules - LEAVES == set(ORDER), "place a new module in ORDER or LEAVES"
    for i, name in enumerate(ORDER):
        imports, _ = _runtime_imports(PACKAGE / f"{name}.py")
        assert imports <= LEAVES | set(ORDER[:i]), (name, sorted(imports - LEAVES - set(ORDER[:i])))
    for name in LEAVES - {"embedders", "__version__"}:
        imports, _ = _runtime_imports(PACKAGE / f"{name}.py")
        assert imports <= LEAVES, (name, imports)


def test_no_import_inside_a_function():
    for path in sorted(PACKAGE.rglob("*.py")):
        _, local = _runtime_imports(path)
        assert not local, f"{path.relative_to(PACKAGE)}: imports inside a function at lines {local}"
