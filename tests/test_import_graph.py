"""The vector leaves stay leaves (issue 17 item 3: no ``embeddings ⇄ dense``, no ``vectorfile
→ embeddings``), counting imports deferred into functions; tests/test_imports.py checks that
the whole package has no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# the modules of the eligibility / vector / dense area, and what each may import of zkr.store
AREA = (
    "zkr.store.eligibility",
    "zkr.store.vectors",
    "zkr.store.embeddings",
    "zkr.store.vectorfile",
    "zkr.store.changes",
    "zkr.store.dense",
    "zkr.store.dense.kernels",
    "zkr.store.dense.mapping",
    "zkr.store.dense.cache",
    "zkr.store.dense.blocks",
    "zkr.store.dense.registry",
    "zkr.store.dense.rows",
    "zkr.store.dense.sidefiles",
    "zkr.store.dense.patching",
)


def _module_file(name: str) -> Path:
    base = SRC / Path(*name.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _imports(name: str) -> set[str]:
    """Every zkr module ``name`` imports, at module level or inside functions."""
    tree = ast.parse(_module_file(name).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("zkr"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("zkr"):
            found.add(node.module)
            for alias in node.names:  # `from zkr.store import dense` imports a module
                sub = f"{node.module}.{alias.name}"
                if _module_file(sub).exists():
                    found.add(sub)
    return found


def test_leaves_are_leaves() -> None:
    """eligibility and vectors import nothing from zkr.store; vectorfile not embeddings."""
    for leaf in ("zkr.store.eligibility", "zkr.store.vectors"):
        assert not {m for m in _imports(leaf) if m.startswith("zkr.store")}, leaf
    assert "zkr.store.embeddings" not in _imports("zkr.store.vectorfile")
    assert not {m for m in _imports("zkr.store.embeddings") if m.startswith("zkr.store.dense")}
