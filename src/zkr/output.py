"""Writing a command's answer to stdout: the one rule every front end asks (CLI, ``zkr import``,
``zkr serve``, the help texts).

The command has already taken effect when its answer is written, so a stdout that fails (a full
disk, a reader that went away) is reported as ``cannot write the response to stdout: …`` (one
``{"error"}`` line on stderr, exit status 1), never as an internal error: the caller then knows
the write stands and retries with an ``ingestion_key`` to stay idempotent.
"""

from __future__ import annotations

import os

from zkr.codec import cli_dumps
from zkr.typelite import Any


def respond(stdout: Any, stderr: Any, text: str) -> int:
    """Write the whole of ``text`` to ``stdout`` and return 0, or report why not and return 1.

    A full disk or a reader that went away becomes one error envelope on ``stderr``; ``stdout``
    is then pointed at ``/dev/null`` so the interpreter's final flush stays quiet.
    """
    try:
        write_all(stdout, text)
    except OSError as exc:
        stderr.write(
            cli_dumps({"error": f"cannot write the response to stdout: {exc.strerror or exc}"})
            + "\n"
        )
        _discard_output(stdout)
        return 1
    return 0


def write_all(stream: Any, text: str) -> None:
    """Write every byte of ``text`` (UTF-8) to ``stream``; raises ``OSError`` when it cannot.

    A stream with a file descriptor is written with ``os.write`` until every byte is out,
    because an unbuffered text stream (``PYTHONUNBUFFERED=1``) would drop the rest of a short
    write without an error; an in-memory stream is written and flushed as text.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
        stream.write(text)
        stream.flush()
        return
    stream.flush()
    view = memoryview(text.encode("utf-8"))
    while view:
        view = view[os.write(fd, view) :]


def _discard_output(stream: Any) -> None:
    """Point a failed stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
