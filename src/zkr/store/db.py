"""Opening a zkr SQLite file and running transactions on it.

Opening (spec/cli.md §3, spec/storage.md §1): the path goes to SQLite as given; foreign keys
are switched on outside any transaction; FTS5 must be available; the file is migrated to schema
version 10 in one ``BEGIN IMMEDIATE`` transaction (a refused or failed upgrade leaves it
byte-for-byte untouched). Only after that does zkr switch the file to WAL so an agent, its
plugin's queue worker and a sync job can share it (the reference opens WAL files normally).
Every connection waits up to 5 s for a lock.

Side files: SQLite gives a ``PATH-shm``/``PATH-wal`` it creates the database file's mode, so a
read while the file was read-only (``chmod 444``) left them read-only and every later write
failed with ``attempt to write a readonly database`` until the user found and deleted
``PATH-shm``. :func:`connect` gives the side files it may change (its user's, or any as root)
back their owner's write permission before opening and after its first read; a write that still
fails because of one (another user's) names it (:func:`readonly_hint`).

Driver failures: every error the ``sqlite3`` module raises, including the
``UnicodeDecodeError`` it raises when SQLite's own message is not UTF-8 (a corrupted file's
``malformed database schema (…)`` names raw bytes), becomes a :class:`StorageError` carrying
SQLite's words (:func:`zkr.store.driver.storage_error`). A rollback is issued only while a
transaction is open: after ``database or disk is full`` or ``disk I/O error`` SQLite has usually
rolled back already.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager

from zkr.errors import StorageError, ZkrError
from zkr.store.driver import DRIVER_ERRORS, Connection, is_postgres, rollback, storage_error
from zkr.typelite import cast

__all__ = ["DRIVER_ERRORS", "connect", "read_tx", "rollback", "storage_error", "write_tx"]

BUSY_TIMEOUT_S = 5.0
CURRENT_VERSION = 10
CACHE_KIB = 65_536
MMAP_BYTES = 268_435_456


def _check_fts5(conn: sqlite3.Connection) -> None:
    """Fail clearly when this SQLite build lacks FTS5 (spec/storage.md §1 required features)."""
    row = conn.execute("SELECT sqlite_compileoption_used('ENABLE_FTS5')").fetchone()
    if row and row[0]:
        return
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.zkr_fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.zkr_fts5_probe")
    except sqlite3.Error:
        raise StorageError(
            f"this SQLite build ({sqlite3.sqlite_version}) lacks the FTS5 extension that zkr "
            "needs for search; install a Python whose sqlite3 module has FTS5"
        ) from None


def connect(path: str) -> sqlite3.Connection:
    """Open ``path`` (created if missing), migrate it to v10 and enable WAL.

    A ``postgresql://`` (or ``postgres://``) DSN opens a PostgreSQL store instead
    (:func:`zkr.store.pg.connect`): a connection adapter the store uses like this one.

    Raises :class:`~zkr.errors.ZkrError` subclasses: ``unable to open database file: PATH``,
    ``file is not a database``, ``database schema version N is newer than supported version
    10``, migration failures (spec/storage.md §4.5).
    """
    if path.startswith(("postgresql://", "postgres://")):
        from zkr.store import pg  # psycopg: only for a PostgreSQL store (zkr[postgres])

        return cast(sqlite3.Connection, pg.connect(path))
    from zkr.store.indexes import ensure_extra_indexes

    _refuse_special_file(path)
    _writable_side_files(path)
    try:
        conn = sqlite3.connect(
            path,
            timeout=BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,
            uri=path.startswith("file:"),
            factory=Connection,
        )
    except DRIVER_ERRORS as exc:
        raise StorageError(f"{storage_error(exc)}: {path}") from None
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        _check_fts5(conn)
        row = conn.execute("PRAGMA user_version").fetchone()
        _writable_side_files(path)  # the read made any missing: writable for the next opener
        if row is None or row[0] != CURRENT_VERSION:
            from zkr.store import migrations  # only files that need an upgrade pay the import

            migrations.migrate(conn)
        _enable_wal(conn)
        ensure_extra_indexes(conn)
    except ZkrError as exc:
        conn.close()
        if isinstance(exc, StorageError) and exc.message == READONLY:  # a migration's write
            raise StorageError(exc.message + readonly_hint(path)) from None
        raise
    except DRIVER_ERRORS as exc:
        conn.close()
        message = storage_error(exc).message
        if message == "unable to open database file":
            message = f"{message}: {path}"
        if message.startswith(("unable to open database file", READONLY)):
            message += _wal_hint(path) or readonly_hint(path)
        raise StorageError(message) from None
    return conn


READONLY = "attempt to write a readonly database"
"""SQLite's message (``SQLITE_READONLY``) for a write the file, or one of its side files,
refuses; the reference prints it as it is."""

SIDE_SUFFIXES = ("-shm", "-wal")
"""The WAL side files SQLite keeps beside a database file (https://sqlite.org/wal.html)."""


def _side_files(path: str) -> list[str]:
    """The side files of a plain path or ``file:`` URI; ``[]`` for a nameless database."""
    from zkr.dbpath import THROWAWAY_PATHS, uri_file_name

    name = uri_file_name(path)
    if name in THROWAWAY_PATHS:
        return []
    return [name + suffix for suffix in SIDE_SUFFIXES]


def _writable_side_files(path: str) -> None:
    """Give ``PATH-shm`` and ``PATH-wal`` their owner's write permission back when they lack it.

    SQLite creates them with the database file's mode (https://sqlite.org/tempfiles.html), so a
    read of a ``chmod 444`` file leaves them ``r--r--r--``; once the file is writable again
    SQLite still opens ``-shm`` read-only and refuses every write (``attempt to write a
    readonly database``). Readers write to ``-shm`` too (their read marks): both files must be
    writable by whoever opens the database, which is what SQLite gives them beside a writable
    file. Only the owner (or root) may change a mode; any other file is left as it is (a write
    then names it, :func:`readonly_hint`). Two ``stat`` calls when nothing needs doing."""
    for side in _side_files(path):
        try:
            mode = os.stat(side).st_mode
            if stat.S_ISREG(mode) and not mode & stat.S_IWUSR:
                os.chmod(side, stat.S_IMODE(mode) | stat.S_IWUSR)
        except (OSError, ValueError):  # missing, or not ours to change
            pass


def readonly_hint(path: str) -> str:
    """What to append to :data:`READONLY` when a side file, not the database file, refuses the
    write: ``" (PATH-shm is not writable by this user ...)"``; ``""`` when the database file
    itself is not writable (the reference's text, same cause) or no side file is in the way.
    ``PATH-wal`` may hold commits: only ``-shm`` may be deleted, and only while no process has
    the file open (SQLite rebuilds it)."""
    from zkr.dbpath import uri_file_name, uri_modes

    name = uri_file_name(path)
    if not name or "ro" in uri_modes(path) or not os.access(name, os.W_OK):
        return ""
    for side in _side_files(path):
        if os.path.exists(side) and not os.access(side, os.W_OK):
            fix = f"make it writable as its owner (chmod u+w {side})"
            if side.endswith("-shm"):
                fix += f" or, while no process has {name} open, delete it"
            return f" ({side} is not writable by this user: {fix})"
    return ""


def _write_error(conn: sqlite3.Connection, exc: Exception) -> StorageError:
    """:func:`storage_error` of a failed write, with :func:`readonly_hint` when SQLite refused
    it as ``attempt to write a readonly database`` on a SQLite file."""
    error = storage_error(exc)
    if error.message != READONLY or is_postgres(conn):
        return error
    try:
        row = conn.execute("SELECT file FROM pragma_database_list WHERE name = 'main'").fetchone()
    except DRIVER_ERRORS:
        return error
    hint = readonly_hint(str(row[0])) if row and row[0] else ""
    return StorageError(error.message + hint) if hint else error


def _refuse_special_file(path: str) -> None:
    """Raise ``StorageError`` (``unable to open database file: PATH is not a regular file``)
    when ``path`` names an existing device, FIFO or socket. SQLite reads ``/dev/null`` or
    ``/dev/zero`` as an empty database: zkr then wrote the schema into it, failed with a bare
    ``disk I/O error`` and left a hot ``/dev/null-journal`` behind. A missing file (created),
    a directory (SQLite's own refusal) and a symlink to a regular file pass."""
    from zkr.dbpath import uri_file_name

    try:
        mode = os.stat(uri_file_name(path)).st_mode
    except (OSError, ValueError):  # missing (SQLite creates it or says why it cannot)
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise StorageError(f"unable to open database file: {path} is not a regular file")


def _wal_hint(path: str) -> str:
    """Why a WAL-mode file may fail to open even for a read (README, Storage): SQLite must
    create ``PATH-shm`` beside it, so its directory must be writable. ``""`` unless ``path``
    is a plain path to a WAL-mode file (header bytes 18-19 = 2) whose ``-shm`` is missing."""
    if path.startswith("file:"):
        return ""
    try:
        with open(path, "rb") as file:
            header = file.read(20)
        if os.path.exists(path + "-shm"):
            return ""
    except OSError:
        return ""
    if len(header) < 20 or not header.startswith(b"SQLite format 3\x00") or header[18] != 2:
        return ""
    return (
        f" ({path} is in WAL mode: SQLite must create {path}-shm beside it even to read it, "
        "so its directory must be writable)"
    )


def _enable_wal(conn: sqlite3.Connection) -> None:
    """WAL for concurrent readers and writers, with ``synchronous = NORMAL``.

    NORMAL is SQLite's recommended pairing for WAL: the file can never be corrupted, and an
    application crash loses nothing; only a power loss or OS crash can roll back the last
    commits. It makes each commit several times cheaper (no fsync per transaction). Both are
    per-connection settings except the journal mode, which the reference opens normally.
    """
    mode = _switch_to_wal(conn)
    if mode == "wal":
        conn.execute("PRAGMA synchronous = NORMAL")
    # A larger page cache and memory-mapped reads: pages are only allocated/mapped as they are
    # touched, so a short CLI call pays nothing, while bulk apply and big searches stop
    # re-reading the same index pages (per-connection settings; nothing is stored).
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")


def _switch_to_wal(conn: sqlite3.Connection) -> str:
    """Switch the file to WAL (once per file) and return the journal mode now in force.

    Changing the journal mode needs an exclusive lock, and SQLite reports ``database is
    locked`` at once, without consulting the busy handler (to avoid a deadlock), while another
    process holds the RESERVED lock of a file still in rollback mode (two agents creating one
    file together). So the switch is retried for up to :data:`BUSY_TIMEOUT_S`, re-reading the
    mode each time: usually the other opener has already switched it. A file zkr may not write
    (read-only file, directory or ``mode=ro`` URI) keeps its journal mode, as the reference
    would leave it, so reads work; writes then fail with SQLite's ``attempt to write a readonly
    database``.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.002
    while True:
        row = conn.execute("PRAGMA journal_mode").fetchone()
        mode = str(row[0]).lower() if row else ""
        if mode in ("wal", "memory"):
            return mode
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return str(row[0]).lower() if row else ""
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc):
                return mode  # a read-only file stays as it is and can still be read
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


@contextmanager
def write_tx(conn: sqlite3.Connection, *scopes: tuple[str, str]) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any error.

    ``scopes`` ((tenant, person) pairs) name the scopes the transaction writes. SQLite's
    ``BEGIN IMMEDIATE`` already serialises every writer of the file; on PostgreSQL the
    transaction first takes those scopes' locks in one order
    (:meth:`zkr.store.pg.adapter.PgConnection.lock_scope`), so writes to one scope are
    serialised (and its feed sequences ascend in commit order) while other scopes write at
    once.

    Driver errors become :class:`StorageError` carrying SQLite's own message (trigger
    ``RAISE(ABORT, …)`` texts such as ``illegal memory state combination``, ``database or disk
    is full``).
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except DRIVER_ERRORS as exc:
        raise _write_error(conn, exc) from None
    try:
        if scopes and is_postgres(conn):
            for scope in sorted(set(scopes)):
                conn.lock_scope(*scope)  # type: ignore[attr-defined]
        yield conn
    except BaseException as exc:
        rollback(conn)
        if isinstance(exc, DRIVER_ERRORS):
            raise _write_error(conn, exc) from None
        raise
    else:
        try:
            conn.execute("COMMIT")
        except DRIVER_ERRORS as exc:
            rollback(conn)
            raise _write_error(conn, exc) from None


@contextmanager
def read_tx(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A deferred read transaction, so multi-query reads see one snapshot."""
    try:
        conn.execute("BEGIN")
    except DRIVER_ERRORS as exc:
        raise storage_error(exc) from None
    try:
        yield conn
    except BaseException as exc:
        rollback(conn)
        if isinstance(exc, DRIVER_ERRORS):
            raise storage_error(exc) from None
        raise
    else:
        try:
            conn.execute("COMMIT")
        except DRIVER_ERRORS as exc:
            rollback(conn)
            raise storage_error(exc) from None
