"""zkr: evidence-backed temporal memory for personal agents.

``MemoryDb.open(path)`` is the library entry point; ``zkr --db PATH COMMAND`` the CLI.
"""

from zkr.errors import InvalidInput, NotFound, RequestError, StorageError, ZkrError
from zkr.memory import MemoryDb

__version__ = "0.1.0"

__all__ = [
    "InvalidInput",
    "MemoryDb",
    "NotFound",
    "RequestError",
    "StorageError",
    "ZkrError",
    "__version__",
]
