"""Run the zkr CLI as a child process: argument vector only, bounded in time and output.

Every memory operation is one ``BIN --db PATH COMMAND`` process fed one JSON request on
stdin. The runner never uses a shell, never echoes the child's output in its own error
messages, kills the whole child process group on timeout or when stdout+stderr exceed the
output cap, and turns every failure into a :class:`ZkrError` whose ``str()`` is the fixed
text ``zkr command failed``. What went wrong is kept in attributes (``reason`` and, for a
rejected request, the message of zkr's ``{"error": ...}`` envelope) so callers can decide
what, if anything, is safe to show.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

REDACTED_MESSAGE = "zkr command failed"
REQUEST_CAP_BYTES = 1_048_576
OUTPUT_CAP_BYTES = 1_048_576
DEFAULT_TIMEOUT_SECONDS = 30.0
_READ_CHUNK = 65_536
_REAP_SECONDS = 5.0


class ZkrError(RuntimeError):
    """A failed zkr call. ``str(error)`` never contains child output, paths or requests."""

    reason = "failed"

    def __init__(self, zkr_message: str | None = None) -> None:
        super().__init__(REDACTED_MESSAGE)
        #: The message of zkr's stderr error envelope, when it printed one. Private:
        #: callers must not show it unless it is one of zkr's fixed messages.
        self.zkr_message = zkr_message


class ZkrUnavailable(ZkrError):
    """The binary is missing, not executable, or could not be started."""

    reason = "unavailable"


class ZkrTimeout(ZkrError):
    """The child did not finish in time and was killed."""

    reason = "timeout"


class ZkrOutputTooLarge(ZkrError):
    """stdout and stderr together exceeded the output cap; the child was killed."""

    reason = "output_too_large"


class ZkrRequestTooLarge(ZkrError):
    """The encoded request exceeds what the CLI accepts on stdin (1 MiB)."""

    reason = "request_too_large"


class ZkrRejected(ZkrError):
    """zkr ran and exited non-zero (usually a validation or store error)."""

    reason = "rejected"


class ZkrBadOutput(ZkrError):
    """zkr exited 0 but stdout was not the expected JSON."""

    reason = "bad_output"


def resolve_binary(binary: str) -> str | None:
    """Resolve ``binary`` (a path, or a bare name looked up on PATH) to an executable path.

    The value is one executable, never a command line: it is not split on spaces and no
    shell ever sees it. A path may use ``~``.
    """
    candidate = binary.strip()
    if not candidate:
        return None
    if any(sep and sep in candidate for sep in (os.sep, os.altsep)):
        path = os.path.abspath(os.path.expanduser(candidate))
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        return None
    return shutil.which(candidate)


def encode_request(payload: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, the way the CLI expects it (no NaN/Infinity)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8"
    )


def checked_request(payload: Mapping[str, Any]) -> bytes:
    """:func:`encode_request`, refused as the CLI would refuse it before any call is made.

    Raises :class:`ZkrRejected` for a payload JSON cannot encode (NaN, a non-string key, a
    value of no JSON type) and :class:`ZkrRequestTooLarge` above the CLI's 1 MiB stdin limit.
    """
    try:
        request = encode_request(payload)
    except (TypeError, ValueError):
        raise ZkrRejected() from None
    if len(request) > REQUEST_CAP_BYTES:
        raise ZkrRequestTooLarge()
    return request


def _parse_error_envelope(stderr: bytes) -> str | None:
    try:
        value = json.loads(stderr.decode("utf-8").strip() or "null")
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(value, dict):
        message = value.get("error")
        if isinstance(message, str):
            return message
    return None


class _OutputCollector:
    """Reads stdout and stderr on two threads, counting their bytes together."""

    def __init__(self, cap: int, on_overflow: Any) -> None:
        self._cap = cap
        self._on_overflow = on_overflow
        self._lock = threading.Lock()
        self._total = 0
        self.overflowed = False
        self.stdout: list[bytes] = []
        self.stderr: list[bytes] = []

    def pump(self, stream: IO[bytes], sink: list[bytes]) -> None:
        try:
            while True:
                chunk = stream.read(_READ_CHUNK)  # unbuffered pipe: returns what is there
                if not chunk:
                    return
                with self._lock:
                    if self.overflowed:
                        continue  # keep draining so the child is never blocked on a pipe
                    self._total += len(chunk)
                    if self._total > self._cap:
                        self.overflowed = True
                        sink.clear()
                    else:
                        sink.append(chunk)
                        continue
                self._on_overflow()
        except (OSError, ValueError):
            return
        finally:
            with contextlib.suppress(OSError):
                stream.close()


class ZkrRunner:
    """Runs ``[binary, "--db", db_path, command]`` with one JSON request on stdin."""

    transport = "cli"

    def __init__(
        self,
        binary: str,
        db_path: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        output_cap: int = OUTPUT_CAP_BYTES,
    ) -> None:
        self.binary = binary
        self.db_path = db_path
        self.timeout = timeout
        self.output_cap = output_cap

    def is_available(self) -> bool:
        return resolve_binary(self.binary) is not None

    def close(self) -> None:
        """Nothing is held open between calls."""

    def run(self, command: str, payload: Mapping[str, Any], *, timeout: float | None = None) -> Any:
        """Run one command; return the parsed stdout JSON value or raise :class:`ZkrError`."""
        request = checked_request(payload)
        executable = resolve_binary(self.binary)
        if executable is None:
            raise ZkrUnavailable()
        argv = [executable, "--db", self.db_path, command]
        limit = self.timeout if timeout is None else timeout

        popen_kwargs: dict[str, Any] = {
            "stdin": subprocess.PIPE,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE,
            "shell": False,
            "close_fds": True,
            "bufsize": 0,
        }
        if sys.platform == "win32":
            popen_kwargs["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
        else:
            # Own process group, so a timeout or an output flood kills wrappers' children too.
            popen_kwargs["start_new_session"] = True
        try:
            proc = subprocess.Popen(argv, **popen_kwargs)
        except (OSError, ValueError):
            raise ZkrUnavailable() from None

        killed = threading.Event()

        def kill() -> None:
            if killed.is_set():
                return
            killed.set()
            _kill_tree(proc)

        collector = _OutputCollector(self.output_cap, kill)
        assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
        readers = [
            threading.Thread(
                target=collector.pump, args=(proc.stdout, collector.stdout), daemon=True
            ),
            threading.Thread(
                target=collector.pump, args=(proc.stderr, collector.stderr), daemon=True
            ),
        ]
        writer = threading.Thread(target=_feed, args=(proc.stdin, request), daemon=True)
        for thread in (*readers, writer):
            thread.start()

        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_REAP_SECONDS)
        deadline = time.monotonic() + _REAP_SECONDS
        for thread in (*readers, writer):
            thread.join(max(0.0, deadline - time.monotonic()))

        if timed_out:
            raise ZkrTimeout()
        if collector.overflowed:
            raise ZkrOutputTooLarge()
        if any(thread.is_alive() for thread in readers):
            # A grandchild kept the pipes open after zkr exited; do not wait for it.
            kill()
            raise ZkrBadOutput()
        stdout = b"".join(collector.stdout)
        stderr = b"".join(collector.stderr)
        if proc.returncode != 0:
            raise ZkrRejected(_parse_error_envelope(stderr))
        try:
            return json.loads(stdout.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ZkrBadOutput() from None

    def run_object(
        self, command: str, payload: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Like :meth:`run`, but the result must be a JSON object."""
        value = self.run(command, payload, timeout=timeout)
        if not isinstance(value, dict):
            raise ZkrBadOutput()
        return value


def _feed(stdin: IO[bytes], request: bytes) -> None:
    # A child that exits (or fails) before reading everything closes the pipe: ignore it,
    # the exit status tells what happened.
    view = memoryview(request)
    try:
        while view:
            written = stdin.write(view)
            if written is None:  # non-blocking pipe that is full: cannot happen here
                continue
            view = view[written:]
    except (OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            stdin.close()


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    if sys.platform != "win32":
        try:
            os.killpg(proc.pid, signal.SIGKILL)
            return
        except (OSError, AttributeError):
            pass
    with contextlib.suppress(OSError):
        proc.kill()
