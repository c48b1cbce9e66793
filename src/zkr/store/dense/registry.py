"""The dense lane's caches per (connection, scope, model, version): what each holds
(:class:`LaneCache`), the process-wide registry (least recently used first out), the signature
that moves on every commit, and the lane's configuration without reading a vector
(:func:`peek_lane`)."""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from zkr.store import changes
from zkr.store.dense.blocks import F32, Block, Entry
from zkr.store.dense.mapping import Derived
from zkr.store.dense.rows import PG_MARK_SQL
from zkr.store.driver import change_mark, is_postgres
from zkr.store.embeddings import lane as stored_lane
from zkr.store.vectors import LaneConfig

MAX_CACHED_LANES = 8
"""Lane caches kept per process (least recently used first out)."""


@dataclass
class LaneCache:
    conn: sqlite3.Connection  # held so that id(conn) cannot be reused while cached
    scope: tuple[str, str, str, str]
    signature: tuple[int, int] | None = None
    entries: dict[int, Entry] = field(default_factory=dict)
    blocks: dict[LaneConfig, Block] = field(default_factory=dict)
    derived: Derived = field(default_factory=Derived)
    file: Path | None = None  # the lane's vector file (zkr.store.vectorfile)
    file_checked: bool = False
    unsaved: int = 0  # vectors decoded since the file was last written
    mark: changes.Mark | None = None  # the change-log position ``derived`` is valid for
    token: str | None = None  # the vector file whose columns ``blocks`` are (None: diverged)
    saved_mark: changes.Mark | None = None  # the position of the lane state file on disk
    entries_loaded: bool = True  # False: entries are still in the vector file (fast start)
    dirty: set[int] = field(default_factory=set)  # rowids the change log says were written
    items: list[str] | None = None  # what the log holds since ``mark`` (when it was read)
    extra: Block | None = None  # the overlay: lane vectors written since the vector file
    extra_token: str = ""  # the overlay file holding ``extra`` ("" : none written)
    stale: set[int] = field(default_factory=set)  # rowids written since the vector file
    schema: int = -1  # PRAGMA schema_version when the rowids of ``derived`` were read

    def segments(self, lane: LaneConfig) -> list[tuple[F32, F32]]:
        """The lane's (matrix, norms) in column order: the vector file's block, then the
        overlay, whose column numbers follow the block's."""
        block = self.blocks[lane]
        out = [(block.matrix[:, : block.size], block.norms[: block.size])]
        if self.extra is not None and self.extra.size:
            extra = self.extra
            out.append((extra.matrix[:, : extra.size], extra.norms[: extra.size]))
        return out


CACHES: OrderedDict[tuple[int, str, str, str, str], LaneCache] = OrderedDict()
CACHES_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every cached lane (needed only after a hand-written SQL ``UPDATE`` that changes
    ``embeddings.vector`` and nothing else in a row, in a file without the change log)."""
    with CACHES_LOCK:
        CACHES.clear()


def _is_closed(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018 - raises once the connection is closed
    except sqlite3.ProgrammingError:
        return True
    return False


def lane_cache(conn: sqlite3.Connection, scope: tuple[str, str, str, str]) -> LaneCache:
    key = (id(conn), *scope)
    with CACHES_LOCK:  # MemoryDb objects of other threads share the registry
        cache = CACHES.get(key)
        if cache is not None and cache.conn is conn:
            CACHES.move_to_end(key)
            return cache
        for stale in [k for k, c in CACHES.items() if _is_closed(c.conn)]:
            del CACHES[stale]
        cache = LaneCache(conn, scope)
        CACHES[key] = cache
        while len(CACHES) > MAX_CACHED_LANES:
            CACHES.popitem(last=False)
        return cache


def signature(conn: sqlite3.Connection) -> tuple[int, int]:
    """Moves whenever any connection, this one included, commits a change to the file
    (:func:`zkr.store.driver.change_mark`)."""
    return change_mark(conn)


def pg_signature(conn: sqlite3.Connection, tenant_id: str, person_id: str) -> tuple[int, int]:
    """PostgreSQL: the person's lane mark (``zkr_lane_marks``, :mod:`zkr.store.pg.schema`) as a
    cache signature, ``(-1, -1)`` before any write. A new mark is drawn by every transaction
    writing a row the lane depends on, and it is read before those rows: under one snapshot
    they agree; outside one, rows read after the mark can only be newer than it, which costs
    one more refresh, never a stale lane."""
    row = conn.execute(PG_MARK_SQL, (tenant_id, person_id)).fetchone()
    return (-1, -1 if row is None else int(row[0]))


def backend_signature(
    conn: sqlite3.Connection, scope: tuple[str, str, str, str]
) -> tuple[int, int]:
    """The signature a lane cache of ``scope`` is valid for: on PostgreSQL the person's lane
    mark (:func:`pg_signature`), on SQLite the file's change mark (:func:`signature`)."""
    if is_postgres(conn):
        return pg_signature(conn, scope[0], scope[1])
    return signature(conn)


def peek_lane(conn: sqlite3.Connection, scope: tuple[str, str, str, str]) -> LaneConfig | None:
    """The lane's configuration (§9.3) without reading any vector: from the cache when it is
    current (its signature is the backend's, :func:`backend_signature`), else from a few index
    seeks (:func:`zkr.store.embeddings.lane`)."""
    with CACHES_LOCK:
        cache = CACHES.get((id(conn), *scope))
    if (
        cache is not None
        and cache.conn is conn
        and cache.signature is not None
        and cache.signature == backend_signature(conn, scope)
    ):
        return cache.derived.lane
    return stored_lane(conn, *scope)
