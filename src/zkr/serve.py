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

**The file under the server** is watched around each request and its write-ahead log is
checkpointed between requests (:mod:`zkr.servefile`).
"""

from __future__ import annotations

import gc
import os
import select
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any, BinaryIO

from zkr.cli import REQUEST_LIMIT, dispatch
from zkr.codec import I64_MAX, I64_MIN, Fields, _describe, canonical, cli_dumps, parse_json
from zkr.dbpath import prepare_own
from zkr.errors import RequestError, ZkrError, bounded
from zkr.memory import MemoryDb
from zkr.output import respond, write_all
from zkr.servefile import FileWatch, IdleCheckpoint

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
PATH is created and migrated as by any CLI call; a missing directory of PATH is
created too (mkdir -p, mode 0700), unlike the one-shot commands.
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
        prepare_own(path)
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
