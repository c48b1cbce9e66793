"""Write-behind queue for completed turns: a small SQLite file next to the zkr database.

``sync_turn`` only inserts a row (durably: journal mode DELETE, ``synchronous=FULL`` on every
connection) and returns; a background worker delivers rows to ``zkr remember`` in id order.
Each row carries a ``hermes-turn:<uuid4>`` ingestion key, so delivering a row twice (a crash
between zkr's commit and the row's removal, or two processes racing) stores it once.

Rows are labelled with the scope (tenant, person) that queued them. A worker drains only its
own scope's rows plus unlabelled (legacy or foreign-written) rows; a row whose payload scope
differs from the worker's scope is quarantined into ``failed_turns`` and never sent, so a turn
can never be written into another tenant's or person's memory.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .runner import ZkrError, ZkrRejected, ZkrUnavailable

logger = logging.getLogger(__name__)

MAX_PAYLOAD_BYTES = 1_048_576
MAX_ATTEMPTS = 3
WORKER_THREAD_NAME = "zkr-hermes-store"

ERROR_INVALID_PAYLOAD = "invalid queued payload"
ERROR_OUT_OF_SCOPE = "queued payload outside provider scope"
ERROR_COMMAND_FAILED = "zkr command failed"
ERROR_UNAVAILABLE = "zkr unavailable"
ERROR_OVERSIZED = "turn payload exceeds 1048576 bytes"

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS pending_turns (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        payload TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        tenant_id TEXT,
        person_id TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS failed_turns (
        id INTEGER PRIMARY KEY,
        payload TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        last_error TEXT NOT NULL,
        failed_at INTEGER NOT NULL
    )""",
)
# Columns a queue written by an older plugin may lack, added in place (rows are kept).
_PENDING_COLUMNS = (
    ("attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("last_error", "TEXT"),
    ("tenant_id", "TEXT"),
    ("person_id", "TEXT"),
)


@dataclass(frozen=True)
class Scope:
    tenant_id: str
    person_id: str

    def matches(self, payload: Mapping[str, Any]) -> bool:
        return (
            payload.get("tenant_id") == self.tenant_id
            and payload.get("person_id") == self.person_id
        )


@dataclass(frozen=True)
class PendingRow:
    id: int
    payload: str
    attempts: int
    tenant_id: str | None
    person_id: str | None


class TurnQueue:
    """The queue file. Every method opens a connection, runs one transaction and closes it."""

    def __init__(self, path: str) -> None:
        self.path = path

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            # Per-connection pragma: every write is fsynced before sync_turn returns.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def ensure_schema(self) -> None:
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = DELETE")
        finally:
            conn.close()
        with self._transaction() as conn:
            self._create(conn)

    @staticmethod
    def _create(conn: sqlite3.Connection) -> None:
        for statement in _SCHEMA:
            conn.execute(statement)
        present = {row[1] for row in conn.execute("PRAGMA table_info(pending_turns)")}
        for name, ddl in _PENDING_COLUMNS:
            if name not in present:
                conn.execute(f"ALTER TABLE pending_turns ADD COLUMN {name} {ddl}")

    def enqueue(self, payload: str, scope: Scope) -> int:
        with self._transaction() as conn:
            self._create(conn)  # idempotent: survives a queue file removed under us
            cursor = conn.execute(
                "INSERT INTO pending_turns (payload, tenant_id, person_id) VALUES (?, ?, ?)",
                (payload, scope.tenant_id, scope.person_id),
            )
            return int(cursor.lastrowid or 0)

    def record_dropped(self, marker: str, error: str) -> None:
        """Leave a visible trace of a turn that could not be queued (no content kept)."""
        with self._transaction() as conn:
            self._create(conn)
            conn.execute(
                "INSERT INTO failed_turns (payload, attempts, last_error, failed_at)"
                " VALUES (?, 0, ?, ?)",
                (marker, error, int(time.time())),
            )

    def deliverable(self, scope: Scope, after_id: int, limit: int = 50) -> list[PendingRow]:
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT id, payload, attempts, tenant_id, person_id FROM pending_turns"
                " WHERE id > ? AND ((tenant_id = ? AND person_id = ?)"
                " OR tenant_id IS NULL OR person_id IS NULL)"
                " ORDER BY id LIMIT ?",
                (after_id, scope.tenant_id, scope.person_id, limit),
            ).fetchall()
        return [PendingRow(int(r[0]), str(r[1]), int(r[2]), r[3], r[4]) for r in rows]

    def pending_count(self, scope: Scope | None = None) -> int:
        with self._transaction() as conn:
            if scope is None:
                row = conn.execute("SELECT COUNT(*) FROM pending_turns").fetchone()
            else:
                row = conn.execute(
                    "SELECT COUNT(*) FROM pending_turns WHERE (tenant_id = ? AND person_id = ?)"
                    " OR tenant_id IS NULL OR person_id IS NULL",
                    (scope.tenant_id, scope.person_id),
                ).fetchone()
        return int(row[0])

    def delete(self, row_id: int) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM pending_turns WHERE id = ?", (row_id,))

    def note_error(self, row_id: int, error: str) -> None:
        with self._transaction() as conn:
            conn.execute("UPDATE pending_turns SET last_error = ? WHERE id = ?", (error, row_id))

    def record_attempt(self, row: PendingRow, error: str, max_attempts: int) -> int:
        """Count a failed delivery; at ``max_attempts`` the row moves to ``failed_turns``."""
        attempts = row.attempts + 1
        with self._transaction() as conn:
            if attempts >= max_attempts:
                self._move(conn, row, attempts, error)
            else:
                conn.execute(
                    "UPDATE pending_turns SET attempts = ?, last_error = ? WHERE id = ?",
                    (attempts, error, row.id),
                )
        return attempts

    def quarantine(self, row: PendingRow, error: str) -> None:
        with self._transaction() as conn:
            self._move(conn, row, max(row.attempts, 1), error)

    @staticmethod
    def _move(conn: sqlite3.Connection, row: PendingRow, attempts: int, error: str) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO failed_turns (id, payload, attempts, last_error, failed_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (row.id, row.payload, attempts, error, int(time.time())),
        )
        conn.execute("DELETE FROM pending_turns WHERE id = ?", (row.id,))


# -- drain locking -------------------------------------------------------------------------

_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_lock(path: str) -> threading.Lock:
    key = os.path.realpath(path)
    with _PROCESS_LOCKS_GUARD:
        return _PROCESS_LOCKS.setdefault(key, threading.Lock())


@contextlib.contextmanager
def drain_lock(queue_path: str) -> Iterator[bool]:
    """Non-blocking exclusive right to drain one queue file, across threads and processes.

    Yields ``False`` when another worker (in this or another process) is draining. The
    cross-process part is an advisory lock on ``<queue>.lock`` (``flock`` on POSIX,
    ``msvcrt.locking`` on Windows); the OS drops it when a process dies.
    """
    local = _process_lock(queue_path)
    if not local.acquire(blocking=False):
        yield False
        return
    handle = None
    try:
        try:
            handle = open(queue_path + ".lock", "a+b")  # noqa: SIM115 - held for the block
            acquired = _try_lock_file(handle)
        except OSError:
            acquired = False
        try:
            yield acquired
        finally:
            if acquired and handle is not None:
                _unlock_file(handle)
    finally:
        if handle is not None:
            handle.close()
        local.release()


def _try_lock_file(handle: Any) -> bool:
    if sys.platform == "win32":
        import msvcrt

        try:
            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False
    import fcntl

    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _unlock_file(handle: Any) -> None:
    try:
        if sys.platform == "win32":
            import msvcrt

            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    except OSError:
        pass


# -- worker ------------------------------------------------------------------------------


class PassResult(enum.Enum):
    IDLE = "idle"  # nothing deliverable is left
    RETRY = "retry"  # some rows failed and stay pending for a later pass
    UNAVAILABLE = "unavailable"  # zkr could not be started; nothing was counted
    BUSY = "busy"  # another worker is draining this queue


Deliver = Callable[[dict[str, Any]], object]


class QueueWorker:
    """One daemon thread delivering a scope's queued turns through ``deliver``."""

    def __init__(
        self,
        queue: TurnQueue,
        scope: Scope,
        deliver: Deliver,
        *,
        max_attempts: int = MAX_ATTEMPTS,
        retry_interval: float = 1.0,
        max_backoff: float = 60.0,
        idle_poll: float = 5.0,
    ) -> None:
        self.queue = queue
        self.scope = scope
        self._deliver = deliver
        self._max_attempts = max_attempts
        self._retry_interval = retry_interval
        self._max_backoff = max_backoff
        self._idle_poll = idle_poll
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stop_deadline = float("inf")
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    # -- control ---------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        with self._start_lock:
            if self._stopping.is_set() or self.alive:
                return
            self._thread = threading.Thread(target=self._run, name=WORKER_THREAD_NAME, daemon=True)
            self._thread.start()

    def wake(self) -> None:
        self.start()
        self._wake.set()

    def flush(self, timeout: float) -> bool:
        """Ask for a drain and wait until no deliverable row is left (or ``timeout``)."""
        self.wake()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.queue.pending_count(self.scope) == 0:
                    return True
            except sqlite3.Error:
                pass
            if time.monotonic() >= deadline or not self.alive:
                return False
            time.sleep(0.05)

    def stop(self, timeout: float) -> bool:
        """Drain what can be delivered, then stop; ``True`` when the thread has ended."""
        self._stop_deadline = time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    # -- loop ------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = self._retry_interval
        while True:
            self._wake.clear()
            try:
                result = self.drain_once()
            except Exception:
                logger.warning("zkr: turn queue pass failed", exc_info=True)
                result = PassResult.RETRY
            if self._stopping.is_set():
                if result is not PassResult.BUSY or time.monotonic() >= self._stop_deadline:
                    return
                self._wake.wait(0.1)
                continue
            if result is PassResult.IDLE:
                backoff = self._retry_interval
                delay = self._idle_poll
            elif result is PassResult.RETRY:
                backoff = self._retry_interval
                delay = self._retry_interval
            else:  # UNAVAILABLE or BUSY: back off, nothing is lost
                delay = backoff
                backoff = min(backoff * 2, self._max_backoff)
            self._wake.wait(delay)

    def drain_once(self) -> PassResult:
        """One pass over the deliverable rows, in id order, each tried at most once."""
        with drain_lock(self.queue.path) as acquired:
            if not acquired:
                return PassResult.BUSY
            result = PassResult.IDLE
            last_id = 0
            while True:
                rows = self.queue.deliverable(self.scope, last_id)
                if not rows:
                    return result
                for row in rows:
                    if self._stopping.is_set() and time.monotonic() >= self._stop_deadline:
                        return PassResult.RETRY  # out of shutdown time: the rest stays queued
                    last_id = row.id
                    outcome = self._deliver_row(row)
                    if outcome is PassResult.UNAVAILABLE:
                        return outcome
                    if outcome is PassResult.RETRY:
                        result = PassResult.RETRY

    def _deliver_row(self, row: PendingRow) -> PassResult:
        try:
            payload = json.loads(row.payload)
        except ValueError:
            self.queue.quarantine(row, ERROR_INVALID_PAYLOAD)
            return PassResult.IDLE
        labelled_elsewhere = row.tenant_id is not None and (
            row.tenant_id != self.scope.tenant_id or row.person_id != self.scope.person_id
        )
        if not isinstance(payload, dict) or labelled_elsewhere or not self.scope.matches(payload):
            self.queue.quarantine(row, ERROR_OUT_OF_SCOPE)
            logger.warning("zkr: quarantined queued turn %d (outside provider scope)", row.id)
            return PassResult.IDLE
        try:
            self._deliver(payload)
        except ZkrUnavailable:
            self.queue.note_error(row.id, ERROR_UNAVAILABLE)
            return PassResult.UNAVAILABLE
        except ZkrRejected as error:
            if error.zkr_message == "record not found":
                # Only a replay of an already stored turn whose source was deleted since
                # fails like this: the turn was delivered; do not resurrect it.
                self.queue.delete(row.id)
                return PassResult.IDLE
            return self._failed(row)
        except ZkrError:
            return self._failed(row)
        except Exception:
            logger.warning("zkr: delivering queued turn %d raised", row.id, exc_info=True)
            return self._failed(row)
        self.queue.delete(row.id)
        return PassResult.IDLE

    def _failed(self, row: PendingRow) -> PassResult:
        attempts = self.queue.record_attempt(row, ERROR_COMMAND_FAILED, self._max_attempts)
        if attempts >= self._max_attempts:
            logger.warning(
                "zkr: queued turn %d failed %d times; moved to failed_turns", row.id, attempts
            )
            return PassResult.IDLE
        return PassResult.RETRY
