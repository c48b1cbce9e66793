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
    assert "zkr.store.write" in graph["zkr.memory.writes"]  # a deferred import counts
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


# --------------------------------------------------------------------------- CLI start-up

# One CLI call in a fresh interpreter, through the real entry point, reporting what it loaded
# and every source text it compiled (audit event ``compile``). A ``typing.NamedTuple`` with
# string annotations (``from __future__ import annotations``) compiles each one, and the first
# ``compile()`` of a process builds CPython's AST types: about 2 ms of a CLI call.
_PROBE = """
import io, json, sys
compiled = []
sys.addaudithook(lambda event, args: compiled.append(args[0]) if event == "compile" else None)
path, command, request = sys.argv[1:4]
sys.argv = ["zkr", "--db", path, command]
sys.stdin = io.TextIOWrapper(io.BytesIO(request.encode()))
from zkr.entry import main
status = main()
sources = [s.decode() if isinstance(s, bytes) else str(s) for s in compiled]
print(json.dumps({"status": status, "modules": sorted(sys.modules), "compiled": sources}))
"""

# Modules no one-shot call of these commands needs: dataclasses (it imports inspect, ast, dis,
# tokenize: about 10 ms), the extras, numpy (hybrid search only).
_NEVER = ("dataclasses", "inspect", "ast", "numpy", "mcp", "psycopg", "onnxruntime", "tqdm")
# command -> modules its own path must not load on top of _NEVER
_NOT_FOR = {
    "search": ("hashlib", "zkr.store.dense", "zkr.store.fusion", "zkr.model.sync"),
    "get": ("hashlib", "zkr.store.lexical", "zkr.store.search_index", "Stemmer"),
    "remember": ("zkr.store.lexical", "zkr.store.retrieval", "Stemmer"),
    "export": ("hashlib", "zkr.model.remember", "zkr.store.write", "zkr.store.lexical"),
}


def _cli_call(path: str, command: str, request: dict[str, object]) -> dict[str, object]:
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, path, command, json.dumps(request)],
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["status"] == 0, proc.stderr
    return report


@pytest.mark.parametrize("command", sorted(_NOT_FOR))
def test_a_one_shot_cli_call_loads_only_what_its_command_needs(
    tmp_path: Path, command: str
) -> None:
    from zkr import MemoryDb
    from zkr.model import RememberRequest, SourceKind

    path = str(tmp_path / "m.db")
    with MemoryDb.open(path) as db:  # created and migrated beforehand, as an agent's file is
        stored = db.remember(
            RememberRequest("t", "p", SourceKind.CONVERSATION, "tea with Ana in Lisbon", 1, 1)
        )
    scope = {"tenant_id": "t", "person_id": "p"}
    requests: dict[str, dict[str, object]] = {
        "search": {**scope, "query": "tea in Lisbon"},
        "get": {**scope, "target": {"kind": "source", "id": stored.source_id}},
        "remember": {
            **scope,
            "kind": "conversation",
            "text": "coffee with Bo",
            "captured_at": 2,
            "recorded_at": 2,
        },
        "export": {**scope, "export_format": 1, "limit": 50},
    }
    report = _cli_call(path, command, requests[command])
    modules = set(report["modules"])  # type: ignore[call-overload]
    assert "zkr.store.db" in modules  # the call did reach the store
    loaded = sorted(
        m for m in modules if m.split(".")[0] in _NEVER or m in _NEVER + _NOT_FOR[command]
    )
    assert not loaded, f"zkr --db PATH {command} imported {loaded}"
    # collections.namedtuple compiles its constructor (``lambda _cls, …``); nothing else may be
    compiled = [s for s in report["compiled"] if not s.startswith("lambda _cls")]  # type: ignore[attr-defined]
    assert not compiled, f"zkr --db PATH {command} compiled {compiled}"


def test_a_one_shot_search_or_remember_never_imports_typing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Importing :mod:`typing` and building ``typing.NamedTuple`` classes cost a one-shot call
    about 28M instructions (issue 14): the modules of ``search`` (lexical and hybrid, on a lane
    whose side files are written) and ``remember`` take typing's run-time names from
    :mod:`zkr.typelite` instead, and no standard module on that path imports it either."""
    import random

    from tests.test_embeddings import M, V, embed
    from zkr import MemoryDb
    from zkr.codec import sha256_tagged
    from zkr.model import RememberRequest, SearchRequest, SourceKind
    from zkr.store import priming, vectorfile

    # closing the handle writes the side files, for any lane size (as tests/test_dense_lanescan)
    monkeypatch.setattr(priming, "PRIME_AFTER", 4)
    monkeypatch.setattr(vectorfile, "MIN_ROWS", 1)
    monkeypatch.setattr(vectorfile, "SAVE_AFTER", 1)
    monkeypatch.delenv("ZKR_VECTOR_CACHE", raising=False)
    rng = random.Random(3)

    def unit() -> list[float]:
        v = [rng.gauss(0, 1) for _ in range(8)]
        norm = sum(x * x for x in v) ** 0.5
        return [x / norm for x in v]

    path = str(tmp_path / "m.db")
    with MemoryDb.open(path) as db:
        for i in range(6):
            text = f"tea with Ana in Lisbon, day {i}"
            stored = db.remember(RememberRequest("t", "p", SourceKind.CONVERSATION, text, i, i))
            embed(db, "source", stored.source_id, unit(), t="t", p="p")
    assert list((tmp_path / "m.db.zkr-vectors").glob("*.rows"))
    scope = {"tenant_id": "t", "person_id": "p"}
    hybrid = {"query_embedding": {"vector": unit(), "model": M, "version": V}}
    calls: list[tuple[str, dict[str, object]]] = [
        ("search", {**scope, "query": "tea in Lisbon"}),
        ("search", {**scope, "query": "tea in Lisbon", "limit": 3, **hybrid}),
        (
            "remember",
            {**scope, "kind": "conversation", "text": "coffee", "captured_at": 9, "recorded_at": 9},
        ),
    ]
    for command, request in calls:
        report = _cli_call(path, command, request)
        modules = set(report["modules"])  # type: ignore[call-overload]
        assert "zkr.store.db" in modules  # the call did reach the store
        if "query_embedding" in request:
            assert "zkr.store.lanescan" in modules and "numpy" not in modules  # the lane's path
        loaded = sorted(modules & {"typing", "typing_extensions"})
        assert not loaded, f"zkr --db PATH {command} {sorted(request)} imported {loaded}"
    # a CLI embed of one row (nobody primes the side files), then a hybrid search: the rows
    # written since the lane state are read from the file (zkr.store.lanedelta), still
    # without numpy or typing
    with MemoryDb.open(path) as db:
        source = db.search(SearchRequest("t", "p", "coffee")).items[0].memory.id
    embedding = {"vector": unit(), "model": M, "version": V, "input_hash": sha256_tagged("coffee")}
    embedding |= {"normalization": "l2", "distance": "cosine"}
    target = {"kind": "source", "id": source}
    _cli_call(path, "embed", {**scope, "target": target, "embedding": embedding})
    report = _cli_call(path, "search", {**scope, "query": "coffee", **hybrid})
    modules = set(report["modules"])  # type: ignore[call-overload]
    assert "zkr.store.lanedelta" in modules and "numpy" not in modules
    assert not modules & {"typing", "typing_extensions"}
