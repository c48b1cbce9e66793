"""The ``sqlite3`` driver's failures as zkr errors, and a rollback that never hides one.

A leaf (it imports only :mod:`zkr.errors`), so :mod:`zkr.store.db` and
:mod:`zkr.store.migrations` share it without importing each other.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager, nullcontext, suppress

from zkr.errors import StorageError
from zkr.typelite import cast

DRIVER_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, UnicodeDecodeError)
"""What the driver raises: its own errors, and a failure to decode SQLite's error message."""


class Connection(sqlite3.Connection):
    """The ``sqlite3`` connection :func:`zkr.store.db.connect` opens: a plain
    ``sqlite3.Connection`` with room for what one connection remembers between calls.

    ``search_ready``: the connection's :func:`change_mark` when zkr's search index was last
    seen current (:func:`zkr.store.search_index.ensure_current`), or ``None``. Store code reads
    it with ``getattr`` so any other connection (a bare ``sqlite3.connect``, PostgreSQL's
    adapter) simply never skips a check.
    """

    search_ready: tuple[int, int] | None = None


def change_mark(conn: sqlite3.Connection) -> tuple[int, int]:
    """``(PRAGMA data_version, total_changes)``: moves whenever any connection, this one
    included, commits a change to the file (other connections' commits move the first, this
    connection's inserts, updates and deletes, trigger programs included, the second)."""
    row = conn.execute("PRAGMA data_version").fetchone()
    return (int(row[0]), conn.total_changes)


def storage_error(exc: Exception) -> StorageError:
    """A driver failure (one of :data:`DRIVER_ERRORS`) as a :class:`StorageError`.

    The message is SQLite's own (``database or disk is full``, ``disk I/O error``,
    ``database disk image is malformed``). When the driver could not decode that message, the
    undecodable bytes are shown as U+FFFD rather than lost.
    """
    if isinstance(exc, UnicodeDecodeError):
        raw = exc.object
        return StorageError(bytes(raw).decode("utf-8", "replace"))
    return StorageError(str(exc))


def unexpected_content(exc: Exception) -> StorageError:
    """A Python failure while reading stored rows, as a :class:`StorageError`.

    SQLite columns take any type, so a damaged or hand-edited file can hand zkr a BLOB where it
    wrote an integer; the store's code then fails with ``TypeError`` and the like. The library
    promises nothing but ``ZkrError`` subclasses (issue 18), so such a failure is reported as
    the file's problem, with Python's words for what did not fit.
    """
    return StorageError(f"database content is not what zkr expects: {type(exc).__name__}: {exc}")


def is_postgres(conn: object) -> bool:
    """Whether ``conn`` is a PostgreSQL store's connection (:mod:`zkr.store.pg.adapter`), for
    the few places where the backends differ by nature (zkr's indexes, SQLite-only upkeep)."""
    return getattr(conn, "zkr_dialect", None) == "postgresql"


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if any; a failing rollback never hides the first error.

    SQLite ends the transaction itself on some errors (a full disk, an I/O error), and a
    second ``ROLLBACK`` would then fail with ``cannot rollback - no transaction is active``.
    """
    if not conn.in_transaction:
        return
    with suppress(*DRIVER_ERRORS):  # the caller reports the original error
        conn.execute("ROLLBACK")


def deferred_writes(conn: sqlite3.Connection) -> AbstractContextManager[None]:
    """A block whose writes the driver may send in batches, inside a write transaction.

    On SQLite (in process, no round trips) a no-op. On PostgreSQL the writes nobody reads a
    result of are queued and sent together at the next read or the block's end
    (:meth:`zkr.store.pg.adapter.PgConnection.deferred_writes`): the same statements in the
    same order, and the error of a failing one is still the error the command reports, ahead
    of anything that fails after it. The rules running inside stay the same code.
    """
    if is_postgres(conn):
        return cast(AbstractContextManager[None], conn.deferred_writes())  # type: ignore[attr-defined]
    return nullcontext()
