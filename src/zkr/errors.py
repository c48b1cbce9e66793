"""Error types shared by the library and the CLI.

Every failure a caller can see is a :class:`ZkrError` whose ``str()`` is the exact message the
CLI prints inside its ``{"error": MESSAGE}`` envelope (spec/cli.md §7). The subclasses only
classify the failure; the message text is the contract.
"""

from __future__ import annotations


class ZkrError(Exception):
    """Base class: ``str(err)`` is the message printed by the CLI error envelope."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class RequestError(ZkrError):
    """The request could not be decoded (JSON syntax, missing field, wrong type, range)."""


class InvalidInput(ZkrError):
    """A validation rule rejected the request (spec messages such as ``text must not be empty``)."""


class NotFound(ZkrError):
    """A scoped target does not exist or is not live: always ``record not found``."""

    def __init__(self, message: str = "record not found") -> None:
        super().__init__(message)


class StorageError(ZkrError):
    """SQLite refused a statement (trigger ``RAISE(ABORT, …)`` texts, constraint failures)."""


class SchemaTooNew(ZkrError):
    """The file's ``user_version`` is outside 0..10 (spec/storage.md §1)."""
