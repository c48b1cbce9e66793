"""zkr: evidence-backed temporal memory for personal agents.

``MemoryDb.open(path)`` is the library entry point; ``zkr --db PATH COMMAND`` the CLI.
``MemoryDb`` is loaded on first use (PEP 562), so the CLI entry point can set up the process
before the storage modules are imported.
"""

from zkr.errors import (
    InvalidInput,
    MissingDependency,
    NotFound,
    RequestError,
    SchemaTooNew,
    StorageError,
    ZkrError,
)
from zkr.typelite import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zkr.memory import MemoryDb as MemoryDb

__version__ = "0.1.0"

__all__ = [
    "InvalidInput",
    "MemoryDb",
    "MissingDependency",
    "NotFound",
    "RequestError",
    "SchemaTooNew",
    "StorageError",
    "ZkrError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "MemoryDb":
        from zkr.memory import MemoryDb

        globals()["MemoryDb"] = MemoryDb
        return MemoryDb
    raise AttributeError(f"module 'zkr' has no attribute {name!r}")
