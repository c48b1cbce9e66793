"""Error types shared by the library and the CLI.

Every failure a caller can see is a :class:`ZkrError` whose ``str()`` is the exact message the
CLI prints inside its ``{"error": MESSAGE}`` envelope (spec/cli.md §7). The subclasses only
classify the failure; the message text is the contract.

Messages echo input (ids, names, values), so every message is bounded here, in one place
(:func:`bounded`): a 1,000,000-character id never becomes a 1 MB error line.
"""

from __future__ import annotations

ECHO_LIMIT = 200
"""Characters kept from each end of an overlong message (issue 18, fault 5)."""


def bounded(message: str) -> str:
    """``message`` with its middle cut to ``…`` when longer than ``2 * ECHO_LIMIT + 1``.

    Every fixed text zkr writes is far shorter than :data:`ECHO_LIMIT`, so only echoed input is
    ever cut, and the message's start and end (where the fixed words are) survive: ``applied
    source 0123…cdef conflicts with the stored source payload``. A lone surrogate (a path's
    bytes that are not UTF-8, decoded by Python with ``surrogateescape``) is shown as U+FFFD:
    the message is always UTF-8 text, so writing it cannot fail.
    """
    if len(message) > 2 * ECHO_LIMIT + 1:
        message = f"{message[:ECHO_LIMIT]}…{message[-ECHO_LIMIT:]}"
    if not message.isascii():
        try:
            message.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: a path's non-UTF-8 bytes, say
            message = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in message)
    return message


class ZkrError(Exception):
    """Base class: ``str(err)`` is the message printed by the CLI error envelope (at most
    401 characters, see :func:`bounded`)."""

    def __init__(self, message: str) -> None:
        message = bounded(message)
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


class MissingDependency(ZkrError):
    """A package zkr depends on is not importable (a broken install, not the file's fault)."""


class SchemaTooNew(ZkrError):
    """The file's ``user_version`` is outside 0..10 (spec/storage.md §1)."""
