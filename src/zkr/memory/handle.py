"""The handle under :class:`zkr.MemoryDb`: its connection, its lock, opening and closing.

:class:`Handle` owns what every command needs (``conn``, the call guard, the rows ``embed``
stored for :meth:`Handle.close` to prime); the command groups (:mod:`zkr.memory.writes`,
:mod:`~zkr.memory.reads`, :mod:`~zkr.memory.lifecycle`, :mod:`~zkr.memory.lanes`) derive from it
and :class:`zkr.MemoryDb` joins them.
"""

from __future__ import annotations

import os
import sqlite3
from _thread import allocate_lock
from collections.abc import Callable
from contextlib import suppress
from types import TracebackType

from zkr.errors import MissingDependency, RequestError, StorageError, ZkrError
from zkr.store import db
from zkr.store.driver import unexpected_content
from zkr.typelite import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from typing import Self


class CallGuard:
    """Runs the library's calls one at a time, and lets nothing but a ``ZkrError`` out.

    ``with guard:`` holds the lock for one call; a driver failure escaping it (a full disk, an
    I/O error, a corrupted file, even outside a transaction) becomes a
    :class:`~zkr.errors.StorageError` with SQLite's own words (:func:`zkr.store.db.storage_error`).
    The request was validated before the call, so any other exception raised inside comes from
    what the file holds (a BLOB where zkr wrote an integer) and becomes a ``StorageError`` too
    (:func:`zkr.store.driver.unexpected_content`); only ``RecursionError`` and ``MemoryError``
    pass unchanged.
    """

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = allocate_lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()
        if exc is None or isinstance(exc, ZkrError):
            return
        if isinstance(exc, db.DRIVER_ERRORS):
            raise db.storage_error(exc) from None
        if isinstance(exc, ImportError):  # the install is broken, not the file
            raise MissingDependency(
                f"zkr is missing a dependency ({exc}): reinstall zkr with pip"
            ) from None
        if isinstance(exc, Exception) and not isinstance(exc, RecursionError | MemoryError):
            raise unexpected_content(exc) from None


def _file_name(path: object) -> str:
    """``path`` (``str``, ``bytes`` or ``os.PathLike``) as the ``str`` SQLite opens.

    Raises :class:`~zkr.errors.RequestError` naming the argument for anything else, and for a
    name no file system can hold (a NUL, a lone surrogate that does not encode).
    """
    try:
        name = os.fsdecode(path)  # type: ignore[arg-type]
    except TypeError:
        raise RequestError(
            "path must be a file path (str or os.PathLike) or a postgresql:// URL,"
            f" not {type(path).__name__}"
        ) from None
    if "\x00" in name:
        raise RequestError("path must not contain a NUL character")
    try:
        os.fsencode(name)
    except UnicodeEncodeError as exc:
        raise RequestError(f"path is not a valid file name: {exc.reason}") from None
    return name


class _OpenOnUse:
    """The connection of a deferred :class:`MemoryDb` before its file is open."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Handle) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner._connect(), name)


class Handle:
    """One open zkr database file and its call guard (see :class:`zkr.MemoryDb`)."""

    def __init__(self, conn: sqlite3.Connection | None, path: str) -> None:
        self._conn = conn
        self.path = path
        self._lock = CallGuard()
        # rows stored by embed per lane (tenant, person, model, version) and the latest
        # created_at, for close (zkr.store.priming.prime)
        self._embedded: dict[tuple[str, str, str, str], int] = {}
        self._embedded_at = 0
        self._closed = False

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Self:
        """Open ``path``, creating and migrating it to schema version 10 (spec/storage.md §1).

        Raises :class:`~zkr.errors.RequestError` when ``path`` is no file name (``None``, a
        number, a NUL or an unencodable character: :func:`_file_name`),
        :class:`~zkr.errors.SchemaTooNew` for a file whose ``user_version`` is outside
        0..10 (nothing written) and :class:`~zkr.errors.StorageError` when SQLite cannot open
        or migrate the file.
        """
        name = _file_name(path)
        return cls(db.connect(name), name)

    @classmethod
    def deferred(cls, path: str | os.PathLike[str]) -> Self:
        """A handle that opens ``path`` on its first call, once that call's request is checked.

        The CLI uses it so that a request that fails to decode or validate never creates,
        migrates or switches a file (docs/decisions-core.md). Opening errors are then raised
        by that first call.
        """
        return cls(None, _file_name(path))

    @property
    def conn(self) -> sqlite3.Connection:
        """The SQLite connection.

        Until a :meth:`deferred` handle has opened its file this is a stand-in that opens it on
        the first attribute the store touches, so a command's checks that need no database
        (blank scope, empty text, a malformed apply batch) fail before the file is created.
        """
        if self._conn is None:
            return cast(sqlite3.Connection, _OpenOnUse(self))
        return self._conn

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            if self._closed:  # a deferred handle closed before its first call: do not reopen
                raise StorageError("Cannot operate on a closed database.")
            self._conn = db.connect(self.path)
        return self._conn

    def close(self) -> None:
        """Close the connection (waits for a call running in another thread).

        A handle through which :meth:`embed` stored at least
        :data:`zkr.store.priming.PRIME_AFTER` rows of a lane first brings that lane's
        search cache and side files up to date (:func:`zkr.store.priming.prime`: about a
        second or two at 100k rows), so that the next search, every fresh CLI process
        included, starts from them instead of reading the whole lane. That step is a cache:
        when it fails (a read-only directory, a full disk) the file is closed all the same.
        """
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._prime_embedded()
                self._conn.close()

    def checkpoint(self, when: Callable[[], bool] | None = None) -> None:
        """Copy the write-ahead log's committed pages back into the file now, without waiting
        for other connections (SQLite's ``PASSIVE`` checkpoint: what its automatic checkpoint
        does inside the commit that fills the log). Nothing stored changes; the long-lived
        servers call it between requests (:class:`zkr.servefile.IdleCheckpoint`).

        Waits for a call running in another thread; ``when`` (if given) is then asked, with no
        call running, whether to go on (a server's check that its file is still there). Does
        nothing on a closed handle or a PostgreSQL store. Raises
        :class:`~zkr.errors.StorageError` when SQLite cannot do it (a full disk)."""
        with self._lock:
            if self._closed or self._conn is None or getattr(self._conn, "zkr_dialect", None):
                return
            if when is None or when():
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _prime_embedded(self) -> None:
        from zkr.store import priming

        lanes = [lane for lane, n in self._embedded.items() if n >= priming.PRIME_AFTER]
        self._embedded = {}
        if not lanes or self._conn is None:
            return
        # only a cache: when it cannot be written, the next search refreshes the lane
        with suppress(sqlite3.Error, OSError):
            priming.prime(self._conn, lanes, self._embedded_at)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
