"""``zkr serve --db PATH``: one long-lived process answering CLI commands line by line.

A host that calls zkr often keeps one child and pays the interpreter's start-up once. The
commands, their request and response JSON and their error messages are exactly the CLI's (the
same dispatch table, :data:`zkr.cli.COMMANDS`); only the framing differs.

**Framing** (JSON Lines, UTF-8, both directions):

* request, one per line on stdin:
  ``{"id": <string or integer>, "command": "<name>", "request": {...}}``;
* response, one per line on stdout, in request order, compact with sorted keys, ``\\n``-terminated
  and flushed per line: ``{"id": <echoed>, "ok": <what the CLI prints>}`` or
  ``{"error": "<what the CLI prints>", "id": <echoed, or null when the line has no usable id>}``.

**Bounds.** The ``request`` value is limited to 1 MiB (:data:`zkr.cli.REQUEST_LIMIT`, counted in
its compact form) like a CLI request; a whole line to :data:`LINE_LIMIT` (1 MiB + 64 KiB, room
for the envelope). A longer line is skipped without being buffered and answered with an error;
so is a line that is not JSON, not an object or lacks a field. Blank lines are ignored. After
every error line the server reads on.

**Stopping.** At end of input, SIGTERM or SIGINT the server finishes the request it is running,
writes its response and exits 0; lines not yet started get no response (they did nothing). Each
mutation is one SQLite transaction, so nothing is ever half-written, even on SIGKILL.

**Concurrency.** Requests run one at a time on one connection. Other processes (the CLI, a sync
job, another server) may write the same file meanwhile: every read runs on a fresh SQLite
snapshot and the decoded-vector cache is keyed on the file's change counter
(:func:`zkr.store.dense.registry.signature`), so their writes are seen by the next request.

**Ids.** ``id`` is a string (any, ``""`` included) or an integer from -2^63 to 2^63-1; the
response carries the same JSON value back. Any other id (``null``, a boolean, a float such as
``1.0`` or ``-0``, an array, an integer out of range) is refused with ``field `id`: ...`` and the
error line's id is ``null``, as for a line that is not JSON or has no ``id``; responses keep the
request order, so even those lines can be matched by position.

**Checkpoints.** SQLite copies the write-ahead log back into the file (a checkpoint: two
``fdatasync``, 3-10 ms) once the log holds 1000 frames, inside the commit that crosses it, so
one write in about 35 ``remember`` paid it. The server's connection moves that work between
requests (:class:`IdleCheckpoint`): after answering a request that wrote, it checkpoints once
the log holds :data:`IDLE_CHECKPOINT_FRAMES` frames, while the host reads the answer; SQLite's own
checkpoint stays as a backstop at :data:`BACKSTOP_FRAMES`, for one request that writes more.

**The file under the server.** SQLite keeps writing to the file it opened, even when that file
was deleted or replaced (``rm``, ``mv``, a restored backup): the writes would go to an unlinked
inode and be lost. Before and after each request the server compares the device and inode at
``PATH`` with the ones it opened (:class:`FileWatch`, one ``stat`` each); when they differ it
answers that request with an error instead of its result (a write it ran is never acknowledged),
writes the same error on stderr and exits with status 1, so a host restarts it on the current
file.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import sqlite3
import stat
import sys
from collections.abc import Iterator
from contextlib import suppress
from types import FrameType
from typing import Any, BinaryIO

from zkr.cli import REQUEST_LIMIT, dispatch
from zkr.codec import I64_MAX, I64_MIN, Fields, _describe, canonical, cli_dumps, parse_json
from zkr.dbpath import refuse_throwaway
from zkr.errors import RequestError, ZkrError, bounded
from zkr.memory import MemoryDb
from zkr.output import respond, write_all

LINE_LIMIT = REQUEST_LIMIT + 65_536
"""Longest accepted request line in bytes, without its newline (1 MiB request + envelope)."""

READ_CHUNK = 65_536
USAGE = "usage: zkr serve --db PATH"
HELP = f"""{USAGE}

One process answers zkr's commands (the CLI's requests, answers and errors) as
JSON lines, in order:
  stdin   {{"id": STRING|INTEGER, "command": NAME, "request": {{...}}}}
  stdout  {{"id": ID, "ok": ANSWER}}  or  {{"error": MESSAGE, "id": ID|null}}
A request is at most {REQUEST_LIMIT} bytes, a line at most {LINE_LIMIT}; a bad line
gets an error line and the server reads on. End of input, SIGTERM or SIGINT:
the request in flight finishes and is answered, then exit status 0.
"""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class OversizedLine:
    """A line longer than :data:`LINE_LIMIT`; its bytes were skipped."""


def parse_envelope(line: bytes) -> tuple[str | int | None, str, Any]:
    """Decode one request line into ``(id, command, request)``.

    Raises :class:`_LineError` carrying the id when it could be read (so the error line echoes
    it) and the CLI-style message (``missing field `command```, JSON syntax errors, ...).
    """
    try:
        value = parse_json(line)
    except RequestError as exc:
        raise _LineError(None, exc.message) from None
    if not isinstance(value, dict):
        raise _LineError(None, f"invalid type: {_describe(value)}, expected struct ServeRequest")
    fields = Fields(value, "struct ServeRequest")
    request_id: str | int | None = None
    try:
        request_id = _request_id(fields.required("id"))
        command = fields.string("command")
        request = fields.required("request")
    except RequestError as exc:
        raise _LineError(request_id, exc.message) from None
    if len(line) > REQUEST_LIMIT and len(canonical(request).encode("utf-8")) > REQUEST_LIMIT:
        raise _LineError(request_id, f"request exceeds {REQUEST_LIMIT} bytes")
    return request_id, command, request


def _request_id(raw: Any) -> str | int:
    """The envelope's ``id`` as given, or :class:`RequestError` naming the field (module
    docstring: a string, or an integer that fits in an i64)."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, int) and not isinstance(raw, bool):
        if I64_MIN <= raw <= I64_MAX:
            return raw
        raise RequestError(
            f"field `id`: invalid value: integer `{raw}`, expected a string or an integer"
            f" from {I64_MIN} to {I64_MAX}"
        )
    raise RequestError(f"field `id`: invalid type: {_describe(raw)}, expected a string or integer")


class _LineError(Exception):
    def __init__(self, request_id: str | int | None, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.message = message


def run_command(database: MemoryDb, command: str, request: Any) -> Any:
    """Run one CLI command on an open database; returns the JSON value the CLI would print.

    Raises :class:`ZkrError` with the CLI's message (``unknown command "x"`` included).
    """
    try:
        return dispatch(database, command, request)
    except RecursionError:
        raise RequestError("request nesting is too deep") from None


SIDE_FILES = {"-wal": "write-ahead log", "-shm": "shared-memory index"}  # SQLite's, WAL mode


class FileWatch:
    """The database file a server opened, by device and inode, checked around each request.

    ``path`` is stat-ed once at construction (right after the database was opened); a path
    that is not a regular file (a PostgreSQL DSN, say) is not watched. :meth:`problem` costs
    three ``os.stat`` (the file, its write-ahead log and its shared-memory index); once it has
    found one gone or replaced, :attr:`lost` keeps its message.

    ``PATH-wal`` and ``PATH-shm`` are watched the same way from the first check that finds them:
    the server's connection keeps them open, so SQLite never removes them under a running
    server. ``rm PATH-wal`` would leave the server committing to the unlinked log (acknowledged
    writes that no other process sees, gone when the server dies); after ``rm PATH-shm`` the
    server and a new process keep two indexes of one log and overwrite each other's commits.
    """

    def __init__(self, path: str, server: str = "zkr serve") -> None:
        self.path = os.path.abspath(path)
        self.server = server  # named in the message: what to restart
        self.lost: str | None = None
        self.identity: tuple[int, int] | None = None
        self.side_identity: dict[str, tuple[int, int]] = {}  # PATH-wal, PATH-shm once seen
        try:
            info = os.stat(self.path)
        except (OSError, ValueError):
            return
        if stat.S_ISREG(info.st_mode):
            self.identity = (info.st_dev, info.st_ino)
            for suffix in SIDE_FILES:
                self._side_problem(suffix)

    def problem(self) -> str | None:
        """``None`` while ``path`` is still the opened file; else the error message."""
        if self.lost is not None or self.identity is None:
            return self.lost
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
        return self.lost

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

    The frame counts are the wal-index header's ``mxFrame`` and the checkpoint record's
    ``nBackfill`` (https://www.sqlite.org/walformat.html §2.1-2.2: native byte order at byte
    offsets 16 and 96 of ``PATH-shm``), read through a descriptor opened once. It is closed
    only by :meth:`close` after the connection (POSIX: closing any descriptor of a file drops
    every lock the process holds on it, SQLite's included). Not used for a file that is not in
    WAL mode, a PostgreSQL store, or once the file was lost (:class:`FileWatch`).
    """

    def __init__(self, conn: sqlite3.Connection, shm_fd: int) -> None:
        self.conn = conn
        self.shm_fd = shm_fd
        self.changes = conn.total_changes

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
        return cls(conn, shm_fd)

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

    def after_request(self, watch: FileWatch | None) -> None:
        """Checkpoint when the request just answered wrote and the log reached the threshold.

        A failure (another connection holding the checkpoint lock, a full disk) is left to the
        next attempt or to SQLite's own checkpoint: nothing of a commit depends on it."""
        changes = self.conn.total_changes
        if changes == self.changes:
            return
        self.changes = changes
        if watch is not None and watch.lost is not None:
            return
        if self.pending_frames() < IDLE_CHECKPOINT_FRAMES:
            return
        with suppress(sqlite3.Error):  # (one request at a time: the connection is free)
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        """Close the index descriptor (after the connection was closed)."""
        os.close(self.shm_fd)


def answer(database: MemoryDb, line: bytes, watch: FileWatch | None = None) -> str:
    """The response line (without newline) for one request line. Never raises for bad input.

    With ``watch``, a request is not run when the file is already gone or replaced, and its
    result is replaced by that error when the file went during the request (the answer a
    write would have had is never sent; the server then stops, see :func:`serve`).
    """
    request_id: str | int | None = None
    try:
        request_id, command, request = parse_envelope(line)
        if watch is not None and (lost := watch.problem()) is not None:
            return cli_dumps({"error": lost, "id": request_id})
        result = run_command(database, command, request)
    except _LineError as exc:
        return cli_dumps({"error": exc.message, "id": exc.request_id})
    except ZkrError as exc:
        return cli_dumps({"error": exc.message, "id": request_id})
    except Exception as exc:  # last resort, as in the CLI: the server must go on
        message = bounded(f"internal error: {type(exc).__name__}: {exc}")
        return cli_dumps({"error": message, "id": request_id})
    if watch is not None and (lost := watch.problem()) is not None:
        return cli_dumps({"error": lost, "id": request_id})
    return cli_dumps({"id": request_id, "ok": result})


class _Stop:
    """Set by SIGTERM/SIGINT; the loop checks it between requests."""

    requested = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        cls.requested = True


def read_lines(stream: BinaryIO, wake_fd: int | None = None) -> Iterator[bytes | OversizedLine]:
    """Yield complete lines of ``stream`` (without ``\\n``) as they arrive, a final unterminated
    line at end of input, and an :class:`OversizedLine` marker for each over-long line.

    Stops early once :attr:`_Stop.requested` is set; ``wake_fd`` (a signal wake-up pipe) makes a
    signal interrupt a wait for input.
    """
    fd = stream.fileno()
    buffer = b""
    skipping = False
    while not _Stop.requested:
        if wake_fd is not None:
            ready, _, _ = select.select([fd, wake_fd], [], [])
            if wake_fd in ready:
                _drain(wake_fd)
                if fd not in ready:
                    continue
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            if buffer and not skipping:
                yield buffer
            return
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line, buffer = buffer[:end], buffer[end + 1 :]
            if skipping:
                skipping = False  # the tail of an over-long line, already answered
            elif len(line) > LINE_LIMIT:
                yield OversizedLine()
            else:
                yield line
            if _Stop.requested:
                return
        if not skipping and len(buffer) > LINE_LIMIT:
            skipping = True
            buffer = b""
            yield OversizedLine()
        elif skipping:
            buffer = b""


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def serve(
    database: MemoryDb,
    stdin: BinaryIO,
    stdout: Any,
    wake_fd: int | None = None,
    watch: FileWatch | None = None,
    checkpoints: IdleCheckpoint | None = None,
) -> int:
    """Answer every request line of ``stdin`` on ``stdout`` until end of input or a stop signal.

    Returns 0; 1 when stdout can no longer be written (the reader went away) or when ``watch``
    found the database file deleted or replaced (after answering that request with the error,
    which also goes to stderr). With ``checkpoints``, the log is checkpointed after a response
    rather than inside a commit (:class:`IdleCheckpoint`).
    """
    for line in read_lines(stdin, wake_fd):
        if isinstance(line, OversizedLine):
            response = cli_dumps({"error": f"request line exceeds {LINE_LIMIT} bytes", "id": None})
        elif not line.strip(b" \t\r"):
            continue
        else:
            response = answer(database, line, watch)
        try:
            write_all(stdout, response + "\n")
        except OSError as exc:
            message = f"cannot write the response to stdout: {exc.strerror or exc}"
            sys.stderr.write(cli_dumps({"error": message}) + "\n")
            return 1
        if watch is not None and watch.lost is not None:
            sys.stderr.write(cli_dumps({"error": watch.lost}) + "\n")
            return 1
        if checkpoints is not None:
            checkpoints.after_request(watch)
    return 0


def long_lived() -> None:
    """Set up a long-lived process (``zkr serve``, ``zkr mcp``) once it has its database.

    The cyclic collector (off for one-shot CLI calls, see :mod:`zkr.entry`) comes back; numpy
    is imported now, with the in-memory lexical index that needs it from a connection's second
    search on (:mod:`zkr.store.memindex`), instead of by that request (0.2–0.4 s once on the
    shared VM); then what start-up built is moved out of the collector's sight."""
    gc.enable()
    import zkr.store.memindex  # noqa: F401  (numpy with it)

    gc.freeze()


def _parse_args(argv: list[str]) -> str:
    if len(argv) == 2 and argv[0] == "--db":
        return argv[1]
    if len(argv) == 1 and argv[0].startswith("--db="):
        return argv[0][len("--db=") :]
    raise RequestError(USAGE)


def main(argv: list[str]) -> int:
    """``zkr serve --db PATH``: open PATH (creating/migrating it) and serve stdin until EOF or
    SIGTERM. A bad command line or an unopenable file is one ``{"error"}`` line on stderr and
    exit status 1, as for any CLI call."""
    if argv in (["--help"], ["-h"], ["help"]):
        return respond(sys.stdout, sys.stderr, HELP)
    try:
        path = _parse_args(argv)
        refuse_throwaway(path)
        database = MemoryDb.open(path)
        watch = FileWatch(path)
    except ZkrError as exc:
        sys.stderr.write(cli_dumps({"error": exc.message}) + "\n")
        return 1
    long_lived()
    checkpoints = IdleCheckpoint.start(database, watch)
    _Stop.requested = False
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    previous_wake = signal.set_wakeup_fd(wake_w)
    previous = {signum: signal.signal(signum, _Stop.handler) for signum in STOP_SIGNALS}
    try:
        status = serve(database, sys.stdin.buffer, sys.stdout, wake_r, watch, checkpoints)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(previous_wake)
        os.close(wake_r)
        os.close(wake_w)
        watch.close(database)
        if checkpoints is not None and watch.lost is None:
            checkpoints.close()  # after the connection: it would drop SQLite's locks on PATH-shm
    watch.exit_if_lost(status)
    return status
