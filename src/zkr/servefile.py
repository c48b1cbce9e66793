"""The database file under a long-lived server (``zkr serve``, ``zkr mcp``): whether it is still
the file the server opened, and when its write-ahead log is checkpointed.

**The file under the server.** SQLite keeps writing to the file it opened, even when that file
was deleted or replaced (``rm``, ``mv``, a restored backup): the writes would go to an unlinked
inode and be lost. Before and after each request the server compares the device and inode at
``PATH`` with the ones it opened (:class:`FileWatch`); when they differ it answers that request
with an error instead of its result (a write it ran is never acknowledged), writes the same
error on stderr and exits with status 1, so a host restarts it on the current file. While the
directory holding ``PATH`` has not changed since a full check, one ``stat`` of that directory
stands for the three of the file and its two side files (:meth:`FileWatch.problem`).

**Checkpoints.** SQLite copies the write-ahead log back into the file (a checkpoint: two
``fdatasync``, 3-10 ms) once the log holds 1000 frames, inside the commit that crosses it, so
one write in about 35 ``remember`` paid it. The server's connection moves that work between
requests (:class:`IdleCheckpoint`): after answering a request that wrote, it checkpoints once
the log holds :data:`IDLE_CHECKPOINT_FRAMES` frames, while the host reads the answer; SQLite's own
checkpoint stays as a backstop at :data:`BACKSTOP_FRAMES`, for one request that writes more.
``zkr mcp``, whose answers the SDK sends after the tool returns, runs that checkpoint in a
thread of its own instead (:meth:`IdleCheckpoint.after_call_in_background`).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import time
from contextlib import suppress
from typing import TYPE_CHECKING

from zkr.errors import ZkrError

if TYPE_CHECKING:
    from zkr.memory import MemoryDb

SIDE_FILES = {"-wal": "write-ahead log", "-shm": "shared-memory index"}  # SQLite's, WAL mode
SETTLED_NS = 50_000_000
"""How much older than a check the directory's change time must be for :class:`FileWatch` to
keep its stamp, on a file system with fine timestamps: several ticks of the kernel's coarse
clock (1-10 ms), which stamps changes. Coarse timestamps need more (:func:`settle_time`)."""


def settle_time(change_ns: int) -> int:
    """How old (ns) a directory change time must be before :class:`FileWatch` trusts it:
    :data:`SETTLED_NS`, or three of the file system's timestamp unit when that is coarser.

    The unit is read off the time itself: the largest power of ten up to 1 s that divides it
    (a file system with 1 s or 2 s timestamps gives whole seconds: 3 s). A fine time divisible
    by more only by chance errs on the safe side (a longer wait)."""
    unit = 1
    while unit < 1_000_000_000 and change_ns % (unit * 10) == 0:
        unit *= 10
    return max(SETTLED_NS, 3 * unit)


class FileWatch:
    """The database file a server opened, by device and inode, checked around each request.

    ``path`` is stat-ed once at construction (right after the database was opened); a path
    that is not a regular file (a PostgreSQL DSN, say) is not watched. A full check costs
    three ``os.stat`` (the file, its write-ahead log and its shared-memory index); once it has
    found one gone or replaced, :attr:`lost` keeps its message.

    **The directory's stamp.** Deleting, renaming, replacing or creating a name in a directory
    sets the directory's change time (POSIX: ``unlink``, ``rename``, ``link``, ``open`` with
    ``O_CREAT``), so while the directory holding ``path`` has the device, inode, modification
    and change times a full check found, every name in it still names the inode it named then:
    :meth:`problem` is one ``stat`` of the directory (taken through the path, so a renamed or
    re-pointed ancestor is a changed stamp too), and a full check only when the stamp moved. A
    stamp is kept only when the directory's change time is older than the check by
    :func:`settle_time` (50 ms; 3 s on a file system with 1 s or 2 s timestamps): a change
    landing in the same clock tick or timestamp unit as the previous one could leave the time
    unchanged. A ``path`` that is itself a symbolic link is always checked in full (its
    target's directory may change without its own).

    ``PATH-wal`` and ``PATH-shm`` are watched the same way from the first check that finds them:
    the server's connection keeps them open, so SQLite never removes them under a running
    server. ``rm PATH-wal`` would leave the server committing to the unlinked log (acknowledged
    writes that no other process sees, gone when the server dies); after ``rm PATH-shm`` the
    server and a new process keep two indexes of one log and overwrite each other's commits.
    """

    stampable = False

    def __init__(self, path: str, server: str = "zkr serve") -> None:
        self.path = os.path.abspath(path)
        self.server = server  # named in the message: what to restart
        self.lost: str | None = None
        self.identity: tuple[int, int] | None = None
        self.side_identity: dict[str, tuple[int, int]] = {}  # PATH-wal, PATH-shm once seen
        self.directory = os.path.dirname(self.path)
        self.stamp: tuple[int, int, int, int] | None = None  # the directory, when settled
        self.full_checks = 0
        try:
            info = os.stat(self.path)
            linked = os.path.islink(self.path)
        except (OSError, ValueError):
            return
        if stat.S_ISREG(info.st_mode):
            self.identity = (info.st_dev, info.st_ino)
            self.stampable = not linked
            for suffix in SIDE_FILES:
                self._side_problem(suffix)

    def problem(self) -> str | None:
        """``None`` while ``path`` is still the opened file; else the error message."""
        if self.lost is not None or self.identity is None:
            return self.lost
        if self.stamp is not None and self._directory_stamp() == self.stamp:
            return None
        self.full_checks += 1
        now = time.time_ns()
        stamp = self._directory_stamp() if self.stampable else None
        self.stamp = None
        try:
            info = os.stat(self.path)
            what = None if (info.st_dev, info.st_ino) == self.identity else "replaced"
        except FileNotFoundError:
            what = "deleted"
        except OSError as exc:
            what = f"made unreadable ({exc.strerror or exc})"
        name = f"database file {self.path}"
        for suffix, kind in SIDE_FILES.items():
            if what is None and (what := self._side_problem(suffix)) is not None:
                name = f"{kind} {self.path}{suffix}"
        if what is not None:
            self.lost = (
                f"{name} was {what} while {self.server} had it open;"
                f" nothing more is read or written through the old file: restart {self.server}"
            )
        elif stamp is not None and stamp[3] < now - settle_time(stamp[3]):
            self.stamp = stamp  # taken before the three checks: a later change moves it
        return self.lost

    def _directory_stamp(self) -> tuple[int, int, int, int] | None:
        """Device, inode, modification and change time (ns) of the directory holding ``path``,
        or ``None`` when it cannot be read."""
        try:
            info = os.stat(self.directory)
        except OSError:
            return None
        return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)

    def close(self, database: MemoryDb) -> None:
        """Close ``database`` at the end of a server, unless its file was lost.

        A lost file's connection must not be closed, here or at interpreter exit: closing
        takes the last connection's checkpoint through the old log and index, then deletes
        ``PATH-wal`` by name, which would overwrite another process's commits (after ``rm
        PATH-shm``) or delete the log of the file now at PATH (after a ``mv`` over it). The
        server then ends with :meth:`exit_if_lost`.
        """
        if self.lost is None:
            database.close()

    def exit_if_lost(self, status: int) -> None:
        """When the file was lost, end the process now with ``status`` (output flushed, the
        connection left unclosed: :meth:`close`); else return."""
        if self.lost is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)

    def _side_problem(self, suffix: str) -> str | None:
        """``None`` while ``PATH + suffix`` is absent and was never seen, or is the file first
        seen; else how it went (``deleted``, ``replaced``)."""
        known = self.side_identity.get(suffix)
        try:
            info = os.stat(self.path + suffix)
        except FileNotFoundError:
            return None if known is None else "deleted"
        except OSError as exc:
            return f"made unreadable ({exc.strerror or exc})"
        if known is None:
            self.side_identity[suffix] = (info.st_dev, info.st_ino)
            return None
        return None if (info.st_dev, info.st_ino) == known else "replaced"


IDLE_CHECKPOINT_FRAMES = 1000
"""Log frames not yet copied into the file at which the server checkpoints after a response
(SQLite's own default threshold, so the log stays the size it was: about 4 MB of 4 KiB pages)."""
BACKSTOP_FRAMES = 2000
"""The server connection's ``wal_autocheckpoint``: SQLite checkpoints inside a commit only when
one request took the log past this (a large ``apply``, say)."""


class IdleCheckpoint:
    """The server's checkpoints, taken between requests instead of inside a commit.

    After each answered request that wrote through the server's connection (its
    ``total_changes`` moved), :meth:`after_request` reads how many frames of the write-ahead
    log are not yet in the database file and, from :data:`IDLE_CHECKPOINT_FRAMES` on, runs a
    ``PASSIVE`` checkpoint: what SQLite's automatic checkpoint does, at the same log size, but
    after the answer was written, so the request that crossed the threshold is not held up by
    it (a host that sends its next request at once waits for the rest of it, as a concurrent
    writer always waited). Durability is unchanged: every commit was in the log before its answer.
    ``zkr mcp`` runs the same checkpoint in a thread after a tool call
    (:meth:`after_call_in_background`).

    The frame counts are the wal-index header's ``mxFrame`` and the checkpoint record's
    ``nBackfill`` (https://www.sqlite.org/walformat.html §2.1-2.2: native byte order at byte
    offsets 16 and 96 of ``PATH-shm``), read through a descriptor opened once. It is closed
    only by :meth:`close` after the connection (POSIX: closing any descriptor of a file drops
    every lock the process holds on it, SQLite's included). Not used for a file that is not in
    WAL mode, a PostgreSQL store, or once the file was lost (:class:`FileWatch`).
    """

    def __init__(self, database: MemoryDb, shm_fd: int) -> None:
        self.database = database
        self.conn = database.conn
        self.shm_fd = shm_fd
        self.changes = self.conn.total_changes

    @classmethod
    def start(cls, database: MemoryDb, watch: FileWatch) -> IdleCheckpoint | None:
        """Set up on a just-opened database watched by ``watch``; ``None`` when not applicable
        (no regular file, not WAL, no ``PATH-shm``)."""
        if watch.identity is None or watch.lost is not None:
            return None
        conn = database.conn
        try:
            row = conn.execute("PRAGMA journal_mode").fetchone()
            if row is None or str(row[0]).lower() != "wal":
                return None
            shm_fd = os.open(watch.path + "-shm", os.O_RDONLY)
        except (sqlite3.Error, OSError):
            return None
        try:
            conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_FRAMES}")
        except sqlite3.Error:
            os.close(shm_fd)
            return None
        return cls(database, shm_fd)

    def pending_frames(self) -> int:
        """Frames of the log not yet copied into the file (0 when the index is unreadable)."""
        try:
            header = os.pread(self.shm_fd, 100, 0)
        except OSError:
            return 0
        if len(header) < 100 or header[12] != 1:  # isInit: the index is not built yet
            return 0
        frames = int.from_bytes(header[16:20], sys.byteorder)
        backfilled = int.from_bytes(header[96:100], sys.byteorder)
        return max(0, frames - backfilled)

    def due(self, watch: FileWatch | None) -> bool:
        """Whether the request just answered wrote and the log reached the threshold (and the
        file was not lost): reads ``total_changes`` and, after a write, the index header."""
        changes = self.conn.total_changes
        if changes == self.changes:
            return False
        self.changes = changes
        if watch is not None and watch.lost is not None:
            return False
        return self.pending_frames() >= IDLE_CHECKPOINT_FRAMES

    def checkpoint(self, watch: FileWatch | None = None) -> None:
        """The checkpoint (:meth:`MemoryDb.checkpoint`); with ``watch``, only when a check
        taken once no call runs finds the file still there (never through an old ``-shm``).
        A failure (another connection holding the checkpoint lock, a full disk, the handle
        closed meanwhile) is left to the next attempt or to SQLite's own checkpoint: nothing
        of a commit depends on it."""
        when = None if watch is None else (lambda: watch.problem() is None)
        with suppress(ZkrError, sqlite3.Error):
            self.database.checkpoint(when)

    def after_request(self, watch: FileWatch | None) -> None:
        """Checkpoint now when :meth:`due` (``zkr serve``: one request at a time, so the
        connection is free once the response is written)."""
        if self.due(watch):
            self.checkpoint()  # (right after the request's own check of the file)

    def after_call_in_background(self, watch: FileWatch | None) -> None:
        """``zkr mcp``: when :meth:`due`, checkpoint in a thread of its own, so the tool call
        that filled the log returns (and its answer is sent) at once. The thread waits for
        the database's call lock, so it never runs inside another call, and checks the file
        again before it checkpoints (calls may have run in between)."""
        if self.due(watch):
            import threading  # (not at import: the one-shot CLI never starts a thread)

            threading.Thread(
                target=self.checkpoint, args=(watch,), name="zkr-checkpoint", daemon=True
            ).start()

    def close(self) -> None:
        """Close the index descriptor (after the connection was closed)."""
        os.close(self.shm_fd)
