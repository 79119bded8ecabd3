"""Memory and AsyncMemory (and their turns) come from one declaration (issue 55, item 5): the
operations of the capability modules, named in pymem.memory.OPERATIONS, which pymem.twins turns
into both twins' methods (checked in, like pymem/calls.py) and their spans."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pymem
from pymem import memory, twins, tracing

PACKAGE = Path(pymem.__file__).parent


def test_the_generated_twins_are_up_to_date():
    """``python -m pymem.twins`` would change nothing."""
    assert twins.render(memory.OPERATIONS, memory.MemoryDriver, memory.AsyncMemoryDriver) == \
        twins.generated(PACKAGE / "memory.py"), "run: python -m pymem.twins"


def test_memory_py_is_short_and_no_module_reaches_into_another_by_an_ignored_attribute():
    text = (PACKAGE / "memory.py").read_text(encoding="utf-8")
    generated = twins.generated(PACKAGE / "memory.py")
    assert text.count("\n") - generated.count("\n") <= 400
    ignored = [f"{p.name}:{i}" for p in PACKAGE.rglob("*.py")
               for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "ignore[attr-defined]" in line]
    assert ignored == []


def test_each_method_is_its_operation_with_conn():
    """Each method takes its operation's parameters (but the options, and the owner, which is the
    Memory), with their annotations and defaults, and conn=; its docstring is the operation's."""
    for op in memory.OPERATIONS:
        params = list(inspect.signature(op.operation).parameters.values())[1:]
        params = [p for p in params if p.name != "owner"]
        assert op.operation.__module__.startswith("pymem.") and op.operation.__module__ != "pymem.memory"
        for cls, conn in ((pymem.Memory, "psycopg.Connection | None"), (pymem.AsyncMemory, "psycopg.AsyncConnection | None")):
            method = inspect.unwrap(getattr(cls, op.name))
            got = list(inspect.signature(method).parameters.values())[1:]
            if op.conn:
                assert got[-1].name == "conn" and got[-1].annotation == conn and got[-1].default is None, op.name
                got = got[:-1]
            assert got == params, op.name
            assert inspect.getdoc(method) == inspect.getdoc(op.operation), op.name
            returned = inspect.signature(op.operation).return_annotation
            assert f"Operation[{inspect.signature(method).return_annotation}]" == returned, op.name
            assert inspect.iscoroutinefunction(method) is (cls is pymem.AsyncMemory)


def test_the_span_list_is_the_operations():
    assert memory.SPANS == {op.name: (f"memory.{op.name}", op.describe) for op in memory.OPERATIONS}
    assert not hasattr(tracing, "MEMORY_SPANS")
    public = {n for n, v in inspect.getmembers(pymem.Memory) if not n.startswith("_") and callable(v)}
    assert public == set(memory.SPANS) | (memory.UNTRACED - {"aclose"})


def test_the_operations_are_functions_of_their_modules_and_compose():
    """No capability is a class mixed into Memory: each operation is a module function over the
    options, and the learning worker takes a runner and options, not a Memory."""
    for name in ("facts", "conversations", "context", "learning"):
        source = (PACKAGE / f"{name}.py").read_text(encoding="utf-8")
        assert not re.search(r"^class _\w+:", source, re.M), name
        assert "self._" not in source, name
    assert list(inspect.signature(pymem.learning.work).parameters)[:2] == ["run", "options"]
    assert [c.__name__ for c in pymem.Memory.__mro__] == ["Memory", "MemoryDriver", "MemoryBase", "object"]
