"""The module graph of ``zkr`` has no import cycles, deferred imports included.

Imports inside functions (kept off the CLI start-up path) still make a dependency: a cycle
hidden that way is as hard to read and to split as a top-level one. The graph is read with
:mod:`ast` from ``src/zkr`` (no module is imported); ``TYPE_CHECKING`` blocks are skipped, they
exist for type checkers only. ``from zkr.store import feed`` is an import of ``zkr.store.feed``;
importing a submodule runs its parent packages first, which is not counted as a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "zkr"

# Cycles known to remain, each with the issue that removes it. Empty is the goal; a test below
# fails when an entry is no longer a cycle, so whoever removes one deletes its line here.
KNOWN_CYCLES: set[frozenset[str]] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """zkr modules imported anywhere in ``tree`` (top level or inside functions)."""
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # ``from zkr.store import feed`` depends on the submodule; a name defined in
                # the package itself (``from zkr import MemoryDb``) on the package.
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in modules else target)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "import_module":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        name = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = _imported(tree, name, path.name == "__init__.py", modules)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert "zkr.store.db" in graph["zkr.store.lifecycle"]
    assert "zkr.store.write" in graph["zkr.memory"]  # a deferred import counts
    assert "zkr.cli" in graph["zkr.entry"]


def test_there_are_no_import_cycles() -> None:
    found = set(cycles(import_graph()))
    unexpected = sorted(sorted(c) for c in found - KNOWN_CYCLES)
    assert not unexpected, f"import cycles inside zkr: {unexpected}"


@pytest.mark.parametrize("known", sorted(sorted(c) for c in KNOWN_CYCLES) or [None])
def test_known_cycles_are_still_cycles(known: list[str] | None) -> None:
    """A removed cycle must leave KNOWN_CYCLES too, so the list never hides a new one."""
    if known is None:
        return
    assert frozenset(known) in set(cycles(import_graph()))
