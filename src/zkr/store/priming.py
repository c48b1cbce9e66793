"""Priming: a zkr writer of many embedding rows leaves their lane ready for the next search.

A first hybrid search of a lane without side files builds them (:mod:`zkr.store.dense.bulk`:
about 3 s at 100k rows on the idle VM, most of it SQLite reading the rows and the vectors). A
writer that has just stored hundreds of a lane's rows — an ``embed-pending`` drain, a
:class:`zkr.MemoryDb` through which ``embed`` stored them, when it is closed — paid far more
for them than one such build, so it builds or patches the side files itself (:func:`prime`)
and every later process, each CLI call, starts from them (the warm path). A writer of a few
rows (a CLI ``embed``: one row per process) leaves them as they are: the next one-shot
search reads those rows from the database over the side files, still without numpy
(:mod:`zkr.store.lanedelta`), or patches them in when it cannot; rows written by any other
writer are found through the change log as ever.

Nothing here imports numpy until :func:`prime` has a lane to refresh.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext, suppress

from zkr.store.db import read_tx
from zkr.store.driver import is_postgres

PRIME_AFTER = 256
"""A zkr writer that stored at least this many rows of one lane — an ``embed-pending`` drain,
or ``embed`` calls through one :class:`zkr.MemoryDb` before it is closed — brings that lane's
search cache and side files up to date itself (:func:`prime`)."""

Lane = tuple[str, str, str, str]
"""(tenant, person, model, version)."""


def prime(
    conn: sqlite3.Connection,
    lanes: Iterable[Lane],
    written_at: int,
    lock: AbstractContextManager[object] | None = None,
) -> None:
    """Refresh the dense lane of each of ``lanes`` now (:func:`zkr.store.dense.cache.state`:
    its side files included), from the float32 copies zkr's writer just kept, so that the next
    search — in this process or a fresh one, every CLI call — starts from the side files
    instead of reading the whole lane (the numpy-free search's ``.rows``/``.fast`` too:
    :mod:`zkr.store.dense.prefilter`), and finds the lexical index current (a writer that
    stored hundreds of rows paid far more for them than one refresh; a few rows are left to
    the next search, which patches them in). ``lock`` (the connection's) is held around each
    database step.

    ``written_at`` is the latest ``created_at`` (Unix seconds) written: rows of the current
    second are never trusted from a side file (a rewrite within it would keep ``created_at``),
    so the clock is let past it first (at most a second). Nothing to do, and numpy never
    loaded, on PostgreSQL (no side files), for an in-memory file or with
    ``ZKR_VECTOR_CACHE=0``. Raises what a search's refresh raises (``sqlite3.Error``,
    ``OSError``)."""
    todo = list(lanes)
    if not todo or is_postgres(conn):
        return
    from zkr.store import vectorfile  # numpy: only a writer of hundreds of rows gets here

    if vectorfile.lane_path(conn, todo[0]) is None:
        return
    from zkr.store.dense import cache, prefilter
    from zkr.store.search_index import ensure_current

    guard = lock if lock is not None else nullcontext()
    # what a search does first: the lexical index is brought up to date (built, on a first
    # search, which changes the schema version a lane state records: its patches then stand);
    # when another writer holds the file, the search will do it
    with guard, suppress(sqlite3.Error):
        ensure_current(conn)
    time.sleep(max(0.0, written_at + 1.01 - time.time()))
    for scope in todo:
        with guard, read_tx(conn):
            lane, _ = cache.state(conn, *scope)
        if lane.file is not None:
            # and what a one-shot process's numpy-free search reads for this state (.rows,
            # .fast), so that the next CLI call neither imports numpy nor writes them
            prefilter.write(lane.file, scope)
