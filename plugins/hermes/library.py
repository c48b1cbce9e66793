"""Run zkr commands in-process through the zkr library, with the CLI runner's contract.

Hermes is Python, so when the ``zkr`` package is importable in Hermes' own environment the
provider calls it directly instead of starting one ``zkr`` process per operation: one
``zkr.MemoryDb`` per provider (opened on first use, its caches kept warm between calls), the
CLI's own request decoder (``zkr.codec.parse_json``) and dispatcher (``zkr.cli.dispatch``:
decode, call, encode), so requests, results and error messages are exactly those of
``zkr --db PATH COMMAND``.

The guarantees of :class:`~.runner.ZkrRunner` hold here too: requests over 1 MiB are refused,
results over the output cap are refused, every call is bounded in time (an SQLite progress
handler interrupts the statement at the deadline; the interrupted transaction is rolled back
and the connection reopened, so nothing is half-written), and every failure is a
:class:`~.runner.ZkrError` whose ``str()`` is ``zkr command failed``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from .runner import (
    DEFAULT_TIMEOUT_SECONDS,
    OUTPUT_CAP_BYTES,
    ZkrBadOutput,
    ZkrOutputTooLarge,
    ZkrRejected,
    ZkrTimeout,
    ZkrUnavailable,
    checked_request,
)

# SQLite virtual-machine steps between two deadline checks.
_PROGRESS_STEPS = 1_000


def library_available() -> bool:
    """True when the zkr library (with the CLI's dispatcher) imports in this interpreter."""
    try:
        if importlib.util.find_spec("zkr") is None:
            return False
        cli = importlib.import_module("zkr.cli")
    except Exception:
        return False
    return callable(getattr(cli, "dispatch", None)) and hasattr(cli, "MemoryDb")


class LibraryRunner:
    """Runs zkr commands against one database file in this process (thread-safe)."""

    transport = "library"

    def __init__(
        self,
        db_path: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        output_cap: int = OUTPUT_CAP_BYTES,
    ) -> None:
        self.db_path = db_path
        self.timeout = timeout
        self.output_cap = output_cap
        self._lock = threading.Lock()
        self._db: Any = None

    def is_available(self) -> bool:
        return library_available()

    def close(self) -> None:
        """Close the database connection (the next call reopens it)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()

    def run(self, command: str, payload: Mapping[str, Any], *, timeout: float | None = None) -> Any:
        """Run one command; return its JSON value (as the CLI prints it) or raise ``ZkrError``."""
        request = checked_request(payload)
        try:
            cli = importlib.import_module("zkr.cli")
            codec = importlib.import_module("zkr.codec")
            errors = importlib.import_module("zkr.errors")
        except Exception:
            raise ZkrUnavailable() from None
        limit = self.timeout if timeout is None else timeout
        with self._lock:
            deadline = time.monotonic() + limit
            try:
                if self._db is None:
                    self._db = cli.MemoryDb.open(self.db_path)
            except errors.ZkrError as error:
                raise ZkrRejected(error.message) from None
            except Exception:
                raise ZkrRejected() from None
            conn = self._db.conn
            conn.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_STEPS)
            try:
                value = cli.dispatch(self._db, command, codec.parse_json(request))
            except errors.ZkrError as error:
                if time.monotonic() > deadline:
                    self._close()  # closing rolls back whatever the interruption left open
                    raise ZkrTimeout() from None
                raise ZkrRejected(error.message) from None
            except RecursionError:
                raise ZkrRejected("request nesting is too deep") from None
            except Exception:
                timed_out = time.monotonic() > deadline
                self._close()
                raise (ZkrTimeout() if timed_out else ZkrRejected()) from None
            finally:
                if self._db is not None:
                    conn.set_progress_handler(None, 0)
        try:
            text = codec.cli_dumps(value)
        except Exception:
            raise ZkrBadOutput() from None
        if len(text.encode("utf-8")) > self.output_cap:
            raise ZkrOutputTooLarge()
        return json.loads(text)

    def run_object(
        self, command: str, payload: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Like :meth:`run`, but the result must be a JSON object."""
        value = self.run(command, payload, timeout=timeout)
        if not isinstance(value, dict):
            raise ZkrBadOutput()
        return value
