"""The dense lane's cache: decoded vectors and derived state per (connection, scope, model,
version), refreshed when the file changes (spec/retrieval.md §5.2, §9).

**Validity.** The cache is valid while the connection's ``(PRAGMA data_version,
total_changes)`` pair is unchanged: that pair moves on every commit by any connection, this one
included, so every write path (embed, repair, delete, correct, promote, archive, apply, another
process, a hand edit through SQL) forces a refresh before the next dense search. A refresh
re-reads the small columns of every row and re-derives currentness and mapping with a few
set-based queries; it re-decodes only vectors whose row changed. A row counts as unchanged when
its rowid and every column except ``vector`` are unchanged and its ``created_at`` second had
already passed when it was last read: zkr's and the reference's ``embed`` both restamp
``created_at = unixepoch()`` on every write, so a rewritten vector always shows up as a changed
row.

**The change log** (:mod:`zkr.store.changes`, ``zkr_`` triggers in the file, fired by every
writer) makes this cheaper and stricter: after a commit, a cache whose log position is known
first reads what was logged since; when nothing logged touches the lane (no write to its rows,
no written source, evidence, claim or link related to one of its targets) the derived state
stands as it is, and otherwise the rows the log names are re-decoded even if only their
``vector`` changed (a hand-written SQL ``UPDATE``). Without a log (a file zkr may not write),
every commit refreshes, as above.

**Side files.** Lanes of at least 2,000 rows keep their decoded vectors in a file next to the
database (:mod:`zkr.store.vectorfile`), trusted row by row under the same rule, and the
derived state with its log position in a second, small file: a fresh process — every CLI call
— whose log shows nothing touching the lane since then searches from the memory-mapped vectors
without reading a row of the lane. After decoding, the in-memory vectors are written out and
replaced by the file's mapped pages, so a lane costs its float32 size once.

**Patches.** When the log names a few writes that do touch the lane,
:func:`zkr.store.dense.patching.patch` re-reads only the rows whose mapping can have changed
(whole captures of the related targets), puts their new vectors in an overlay (a second
matrix whose columns follow the vector file's, saved as its own side file) and re-derives the
mapping of those rows only (:func:`zkr.store.dense.mapping.patch`); a full refresh folds the
overlay back into the vector file once it outgrows its share of the lane
(docs/decisions-retrieval-dense.md).

**PostgreSQL** (no side files, no change log): the signature is the person's lane mark
(``zkr_lane_marks``, :mod:`zkr.store.pg.schema`), which every transaction writing a row of
:data:`zkr.store.changes.LANE_TABLES` for that person moves; while it stands the derived state
does too, and when it moved a full refresh re-derives it, decoding again only the vectors of
rows whose tuple version (``xmin``) changed.

**Split by responsibility**: this module decides which path a search takes (:func:`state`) and
does the full refresh; :mod:`.registry` holds the caches, :mod:`.blocks` the decoded vectors
and their reading, :mod:`.rows` the SQL of a lane's rows, :mod:`.sidefiles` the side files
seen from a cache, :mod:`.patching` the patch.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from zkr.codec import sha256_tagged
from zkr.store import changes, vectorfile
from zkr.store.dense import blocks, patching
from zkr.store.dense.blocks import Block, Entry, config_of, lean_reads
from zkr.store.dense.mapping import Derived, Row, derive, id_array
from zkr.store.dense.registry import (
    LaneCache,
    backend_signature,
    clear_cache,
    lane_cache,
    peek_lane,
)
from zkr.store.dense.rows import PG_VERSIONS_SQL, ROWS_SQL, fetch_all, schema_version
from zkr.store.dense.sidefiles import load_file, load_state, save_file, save_state
from zkr.store.driver import is_postgres
from zkr.store.eligibility import SCOPE_LINKS_SQL
from zkr.store.sidepaths import STATE_LAG
from zkr.store.vectors import LaneConfig

__all__ = ["clear_cache", "peek_lane", "state"]


def state(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, model: str, version: str
) -> tuple[LaneCache, Derived]:
    """The lane's cache, brought up to date (call inside a read transaction).

    Cheapest first: nothing committed since the last call (same signature); else nothing in
    the change log since ``cache.mark`` touches the lane (:func:`_untouched`): the derived
    state stands, also when it was just read from the lane state file by a fresh process;
    else a full :func:`_refresh`.
    """
    if is_postgres(conn):
        # PostgreSQL: no side file; the derived state stands while the person's lane mark is
        # unchanged (nobody wrote a row it depends on), else an exact re-scan of the lane that
        # decodes again only rows whose tuple version (xmin: every write makes a new one,
        # whichever session wrote) is not the one decoded
        cache = lane_cache(conn, (tenant_id, person_id, model, version))
        sig = backend_signature(conn, cache.scope)  # read before the rows (pg_signature)
        if cache.signature == sig:
            return cache, cache.derived
        cache.signature = None
        versions = dict(fetch_all(conn, PG_VERSIONS_SQL, (tenant_id, person_id, model, version)))
        cache.dirty = {r for r, e in cache.entries.items() if e.version != versions.get(r)}
        _refresh(conn, cache)
        for rowid, entry in cache.entries.items():
            entry.version = versions.get(rowid)
        cache.signature = sig
        return cache, cache.derived
    cache = lane_cache(conn, (tenant_id, person_id, model, version))
    sig = backend_signature(conn, cache.scope)
    if cache.signature == sig:
        return cache, cache.derived
    cache.signature = None
    mark = changes.mark(conn)
    if not cache.file_checked:
        cache.file_checked = True
        cache.file = vectorfile.lane_path(conn, cache.scope)
        if cache.file is not None and not (mark is not None and load_state(cache, mark)):
            load_file(cache, cache.file)
    cache.dirty = set()
    cache.items = None
    if mark is not None and cache.mark is not None and _untouched(conn, cache, mark):
        cache.mark = mark
        # the state on disk stays valid (a fresh process checks the log since its position
        # itself): rewrite it only when that log has grown long
        if cache.saved_mark is None or mark.seq - cache.saved_mark.seq >= STATE_LAG:
            save_state(cache)
    elif mark is not None and cache.items is not None and patching.patch(conn, cache):
        cache.mark = mark
        save_state(cache)
    else:
        if not cache.entries_loaded and cache.file is not None:
            load_file(cache, cache.file)
        _refresh(conn, cache)
        cache.mark = mark
        save_state(cache)
    cache.signature = sig
    return cache, cache.derived


def _untouched(conn: sqlite3.Connection, cache: LaneCache, mark: changes.Mark) -> bool:
    """Whether nothing logged since ``cache.mark`` can change this lane's derived state
    (:func:`zkr.store.changes.lane_untouched`); what the log holds since then is kept for a
    patch."""
    untouched, items, dirty = changes.lane_untouched(
        conn, cache.scope, cache.mark, mark, cache.derived.touches
    )
    if items is not None:
        cache.items, cache.dirty = items, dirty
    return untouched


def _refresh(conn: sqlite3.Connection, cache: LaneCache) -> None:
    """Re-read the lane (small columns only), decode the vectors of new or changed rows that
    could be current, and re-derive currentness, the lane and the §5.4 mapping."""
    cache.extra, cache.extra_token = None, ""  # rows patched since are re-read (``stale``)
    cache.schema = -1 if is_postgres(conn) else schema_version(conn)  # (no patches there)
    from zkr.store.dense import bulk  # first calls only: a warm CLI search never loads it

    with lean_reads(conn):
        if not bulk.refresh(conn, cache):  # a first call: in bulk when it can
            _refresh_rows(conn, cache)


def _refresh_rows(conn: sqlite3.Connection, cache: LaneCache) -> None:
    t, p, m, v = cache.scope
    params = {"t": t, "p": p, "m": m, "v": v}
    now = conn.execute("SELECT unixepoch()").fetchone()[0]
    old = cache.entries
    entries: dict[int, Entry] = {}
    # rows whose target is live with the stored revision and hash, in §5.2 order, with the
    # §5.4 data: (rowid, kind, mappable)
    candidates: list[tuple[int, str, object, str | None]] = []
    dirty, get, append = cache.dirty, old.get, candidates.append
    # one object per distinct kind, dimension, normalization and distance cell (a lane has a
    # handful): ~20 MB less per 100k rows than a copy of each in every row's meta
    same: dict[object, object] = {}
    one = same.setdefault
    for kind, sql in ROWS_SQL:
        for row in fetch_all(conn, sql, params):
            rowid = row[0]
            meta = (
                one(row[1], row[1]),
                row[2],
                one(row[3], row[3]),
                one(row[4], row[4]),
                one(row[5], row[5]),
                row[6],
                row[7],
                row[8],
            )
            entry = get(rowid)
            if entry is None or not entry.settled or entry.meta != meta or rowid in dirty:
                created_at = meta[7]
                entry = Entry(meta, type(created_at) is int and created_at < now)
            entries[rowid] = entry
            revision, text = row[9], row[10]
            if revision is None or meta[5] != revision or type(text) is not str:
                continue
            text_key = hash((revision, text))
            if entry.text_key != text_key:
                entry.text_key, entry.hashed = text_key, sha256_tagged(text) == meta[6]
            if entry.hashed:
                append((rowid, kind, row[11], row[12]))
    cache.entries = entries
    cache.unsaved += _decode_pending(conn, cache, [rowid for rowid, *_ in candidates])
    _compact(cache)
    links = list(fetch_all(conn, SCOPE_LINKS_SQL, params))
    rows = []
    for rowid, kind, mappable, capture in candidates:
        entry = entries[rowid]
        target_id = "" if entry.meta is None else str(entry.meta[1])
        rows.append(Row(rowid, entry.column, entry.config, kind, target_id, mappable, capture))
    cache.derived = derive(rows, links)
    cache.derived.row_ids = id_array(
        sorted({str(e.meta[1]) for e in entries.values() if e.meta is not None})
    )
    if (
        cache.file is not None
        and len(entries) >= vectorfile.MIN_ROWS
        and (
            cache.unsaved >= max(vectorfile.SAVE_AFTER, len(entries) // 50)
            # the blocks diverged from the file: rewrite it, so that the lane state file can
            # index it and the next fresh process starts without reading a row
            or (cache.token is None and cache.unsaved > 0)
        )
    ):
        save_file(cache, cache.file)
        cache.unsaved = 0


def _decode_pending(conn: sqlite3.Connection, cache: LaneCache, rowids: list[int]) -> int:
    """Decode the vectors of rows not decoded yet (or changed since), appending them to their
    configuration's block batch by batch; returns how many rows were read."""
    entries = cache.entries
    todo = [r for r in rowids if not entries[r].parsed]
    if not todo:
        return 0
    cache.token = None  # the blocks no longer are the vector file's columns
    # room for every row of each configuration at once: no block grows (and copies) later
    wanted: dict[LaneConfig, int] = {}
    for rowid in todo:
        meta = entries[rowid].meta
        config = None if meta is None else config_of(meta[2], meta[3], meta[4])
        if config is not None:
            wanted[config] = wanted.get(config, 0) + 1
    for config, count in wanted.items():
        block = cache.blocks.get(config)
        if block is None:
            cache.blocks[config] = Block.empty(config.dimension, count)
        else:
            block.reserve(count)
    blocks.decode_rows(conn, cache.scope, entries, cache.blocks, todo)
    return len(todo)


def _compact(cache: LaneCache) -> None:
    """Drop blocks no row uses any more and squeeze blocks that are mostly dead columns."""
    used: dict[LaneConfig, list[Entry]] = {}
    for entry in cache.entries.values():
        if entry.config is not None:
            used.setdefault(entry.config, []).append(entry)
    for config in list(cache.blocks):
        live = used.get(config)
        if not live:
            del cache.blocks[config]
            continue
        block = cache.blocks[config]
        if block.size > 2 * len(live) + 1024:
            cache.token = None
            columns = np.fromiter((e.column for e in live), dtype=np.int64, count=len(live))
            cache.blocks[config] = block.compacted(columns)
            for position, entry in enumerate(live):
                entry.column = position
