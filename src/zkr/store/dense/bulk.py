"""A lane's first full refresh in bulk: the rows read as a few folded values per target kind,
the vectors streamed into one preallocated block, the mapping derived from arrays and the
vector file written from them (docs/decisions-retrieval-dense.md, "The first call in bulk").

It computes exactly what the row-by-row refresh (:func:`zkr.store.dense.cache._refresh_rows`)
computes — currentness (§9.1: live target, stored revision, SHA-256 of the target text equal to
``input_hash``), decoding (§9.2: zkr's float32 copies where the change log allows, else the
JSON text), the lane and the mapping (§5.2-5.4) — without a Python object per row: a first
call at 100k rows is SQLite's time plus a few array operations, and its memory the float32
block plus a few bytes per row. It takes only the common case and answers ``False`` (nothing
changed; the caller refreshes row by row) otherwise: PostgreSQL, a cache that already holds
rows to reuse, a lane without a vector file to write (under
:data:`zkr.store.vectorfile.MIN_ROWS` rows, an in-memory database, ``ZKR_VECTOR_CACHE=0``), more
than one configuration cell in the lane's rows, a cell of an unusual type (a real, a BLOB: hand
edits), a row written in the current second (never trusted by a vector file), a current row
whose vector is not well-formed, rows not in §5.2 order, or any SQLite error.

Its vectors end in the vector file (memory-mapped, as after any refresh) and it keeps no
per-row bookkeeping (``cache.entries``): a later full refresh in the same process reads the
rows' small columns back from that file first (:func:`zkr.store.dense.sidefiles.load_file`).
"""

from __future__ import annotations

import json
import sqlite3
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from zkr.codec import sha256_tagged
from zkr.store import changes, vectorfile
from zkr.store.dense.blocks import DECODE_BATCH, F32, I64, Block, config_of
from zkr.store.dense.decode import decode_texts
from zkr.store.dense.kernels import sequential_norms
from zkr.store.dense.mapping import derive_columns, id_array
from zkr.store.dense.registry import LaneCache
from zkr.store.dense.rows import (
    BULK_CONFIGS_SQL,
    BULK_COPIES_SQL,
    BULK_META_SQL,
    BULK_SQL,
    schema_version,
)
from zkr.store.dense.sidefiles import adopt_blocks
from zkr.store.driver import is_postgres
from zkr.store.eligibility import SCOPE_LINKS_SQL
from zkr.store.vectors import LaneConfig

Bool = npt.NDArray[np.bool_]

NORM_CHUNK = 4096
"""Columns whose norms are computed together."""

TRANSPOSE = 256
"""Vectors transposed into the block together."""

META_BATCH = 8192
"""Rows whose small columns are rendered as JSON together."""

TEXT_BATCH = 512
"""Rows whose JSON vectors are decoded together (a batch's texts and parsed lists are ~12 kB
per 384-d row, next to the filling block)."""

VECTOR_READ_CACHE_KIB = 2048
"""SQLite's page cache while the vectors are read (each page once; the refresh's larger cache
is for the rows' seeks, :data:`zkr.store.dense.blocks.READ_CACHE_KIB`)."""


def _input_hash_ok(text: object, input_hash: object) -> int:
    """``zkr_input_hash_ok(text, input_hash)``: 1 when ``text`` is text whose tagged SHA-256
    (:func:`zkr.codec.sha256_tagged`) is ``input_hash`` (the §9.1 test the row-by-row refresh
    makes)."""
    return int(type(text) is str and sha256_tagged(text) == input_hash)


def release_free_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Python objects and numpy temporaries freed by a bulk step otherwise stay
    resident as free heap next to the lane's block: ~70 MB at 100k rows."""
    try:
        import ctypes  # only a first call pays for it

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


class _Unhandled(Exception):
    """The lane is not of the common case: the row-by-row refresh takes it."""


def refresh(conn: sqlite3.Connection, cache: LaneCache) -> bool:
    """Bring an empty cache (a first call) up to date in bulk and write its vector file;
    ``False``, with the cache untouched, when the lane is not of the common case (see the
    module docstring)."""
    if is_postgres(conn) or cache.file is None or cache.entries:
        return False  # (with no entries, no decoded vector can be reused)
    try:
        return _refresh(conn, cache)
    except (_Unhandled, sqlite3.Error, ValueError, UnicodeError):
        return False


class _Rows:
    """The lane's rows of every kind, in §5.2 order, column by column."""

    def __init__(self) -> None:
        self.rowids: list[I64] = []
        self.kinds: list[str] = []
        self.ids: list[str] = []
        self.current: list[Bool] = []
        self.mappable: list[Bool] = []
        self.captures: list[str | None] = []

    def add(self, kind: str, row: tuple[object, ...]) -> None:
        count, rowids, ids, current, mappable, captures, unusual = row
        if unusual or not isinstance(count, int):
            raise _Unhandled
        if not count:
            return
        assert isinstance(rowids, str) and isinstance(ids, str)
        assert isinstance(current, str) and isinstance(mappable, str)
        assert isinstance(captures, str)
        listed: list[str] = json.loads(ids)
        # §5.2 order (the subquery's ORDER BY): strictly increasing ids, else not handled
        if len(listed) != count or any(a >= b for a, b in pairwise(listed)):
            raise _Unhandled
        if len(current) != count or len(mappable) != count:
            raise _Unhandled  # each flag one digit per row
        self.rowids.append(np.asarray(json.loads(rowids), dtype=np.int64))
        self.kinds.extend([kind] * count)
        self.ids.extend(listed)
        self.current.append(np.frombuffer(current.encode(), dtype=np.uint8) == ord("1"))
        self.mappable.append(np.frombuffer(mappable.encode(), dtype=np.uint8) == ord("1"))
        self.captures.extend(json.loads(captures))


def _meta_json(conn: sqlite3.Connection, params: dict[str, str], rowids: I64) -> list[bytes]:
    """Every row's small columns as one JSON array (the vector file's ``meta``), in the order
    of ``rowids``, as UTF-8 pieces :data:`META_BATCH` rows long (no whole copy of it)."""
    parts: list[bytes] = []
    listed: list[int] = []
    for _kind, sql in BULK_META_SQL:
        after = ""
        while True:
            count, last, ids, metas = conn.execute(
                sql, {**params, "after": after, "n": META_BATCH}
            ).fetchone()
            if not count:
                break
            listed.extend(json.loads(ids))
            parts.append((b"," if parts else b"[") + metas[1:-1])
            if count < META_BATCH:
                break
            after = last
    if listed != rowids.tolist():
        raise _Unhandled  # the rows moved between the two reads (cannot in one transaction)
    return [*parts, b"]"] if parts else [b"[]"]


def _refresh(conn: sqlite3.Connection, cache: LaneCache) -> bool:
    t, p, m, v = cache.scope
    params = {"t": t, "p": p, "m": m, "v": v}
    configs = conn.execute(BULK_CONFIGS_SQL, params).fetchall()
    if len(configs) != 1:
        return False
    dimension, t_dim, normalization, t_norm, distance, t_dist = configs[0]
    if (t_dim, t_norm, t_dist) != ("integer", "text", "text"):
        return False
    lane = config_of(dimension, normalization, distance)
    if lane is None:
        return False
    now = conn.execute("SELECT unixepoch()").fetchone()[0]
    conn.create_function("zkr_input_hash_ok", 2, _input_hash_ok, deterministic=True)
    rows = _Rows()
    for kind, sql in BULK_SQL:
        rows.add(kind, conn.execute(sql, {**params, "now": now}).fetchone())
    total = len(rows.ids)
    if total < vectorfile.MIN_ROWS:
        return False  # no vector file for such a lane: the row-by-row refresh keeps entries
    rowids = np.concatenate(rows.rowids)
    current = np.concatenate(rows.current)
    mappable = np.concatenate(rows.mappable)
    positions = np.flatnonzero(current)  # current rows in §5.2 order
    links = list(conn.execute(SCOPE_LINKS_SQL, params))
    chosen = positions.tolist()
    # mapped before the vectors are read, as if all were well-formed (a malformed vector, only
    # written by hand or by another writer, sends the lane to the row-by-row refresh), so
    # that the rows' Python objects are gone before the block fills
    derived = derive_columns(
        lane,
        rowids[positions],
        np.arange(len(positions), dtype=np.int64),
        [rows.kinds[i] for i in chosen],
        [rows.ids[i] for i in chosen],
        mappable[positions].tolist(),
        [rows.captures[i] for i in chosen],
        links,
    )
    derived.row_ids = id_array(sorted(set(rows.ids)))
    del rows, links, chosen
    # the rows' seeks are done: a small page cache for the copies' sequential read, and the
    # memory the rows and the mapping used goes back before the block fills
    conn.execute(f"PRAGMA cache_size = -{VECTOR_READ_CACHE_KIB}")
    release_free_memory()
    block = Block.empty(lane.dimension, len(positions))
    good, from_text = _read_vectors(conn, cache.scope, lane, rowids[positions], block)
    if not good.all():
        raise _Unhandled
    # the rows' small columns let a later refresh reuse these vectors row by row: worth their
    # cost (~0.3 s at 100k) only when some came from JSON text (else zkr's copies are as quick
    # to read again); without them the file serves the lane state only (vectorfile.read)
    meta = _meta_json(conn, params, rowids) if from_text else [b"null"]
    block.size = len(positions)
    _norms(block)
    # the vector file: every row (all settled), current rows parsed and in the lane, column i
    # for the i-th of them
    config = np.full(total, -1, dtype=np.int32)
    column = np.full(total, -1, dtype=np.int64)
    config[positions] = 0
    column[positions] = np.arange(len(positions), dtype=np.int64)
    parsed = current.astype(np.uint8)
    assert cache.file is not None
    # the overlay goes first (as in sidefiles.save_file): a reader finds the old vector file
    # with its state, or the new file alone
    token = (
        vectorfile.write_columns(
            cache.file,
            cache.scope,
            meta,
            rowids,
            config,
            column,
            parsed,
            [lane] if block.size else [],
            [block.matrix[:, : block.size]] if block.size else [],
            [block.norms[: block.size]] if block.size else [],
        )
        if vectorfile.drop_overlay(cache.file)
        else None
    )
    del meta
    snap = None if token is None else vectorfile.read(cache.file, cache.scope, rows=False)
    cache.derived = derived
    cache.stale = set()
    cache.unsaved = 0
    cache.schema = schema_version(conn)
    if snap is not None and snap.token == token:
        adopt_blocks(cache, snap)  # the block's memory goes; the file's pages serve
        cache.token = token
        cache.entries = {}
        cache.entries_loaded = False  # a later full refresh reads the rows from the file
    else:
        # no file (read-only directory, full disk): the block serves this process; a later
        # full refresh re-reads every row (there is no per-row bookkeeping to reuse)
        cache.blocks = {lane: block} if block.size else {}
        cache.token = None
        cache.entries = {}
        cache.entries_loaded = True
    return True


def _read_vectors(
    conn: sqlite3.Connection,
    scope: tuple[str, str, str, str],
    lane: LaneConfig,
    rowids: I64,
    block: Block,
) -> tuple[Bool, bool]:
    """Read the vectors of ``rowids`` into columns 0..n-1 of ``block`` (column i: rowids[i]):
    zkr's float32 copies under a complete change log, else the JSON text decoded in bulk
    (:func:`zkr.store.dense.decode.decode_texts`). Returns which rows got a well-formed
    vector, and whether any row's JSON text was read."""
    count = len(rowids)
    filled = np.zeros(count, dtype=np.bool_)
    if not count:
        return filled, False
    order = np.argsort(rowids, kind="stable")
    by_rowid = rowids[order]

    def columns_of(found: list[int]) -> tuple[I64, Bool]:
        ask = np.asarray(found, dtype=np.int64)
        at = np.minimum(np.searchsorted(by_rowid, ask), count - 1)
        hit: Bool = by_rowid[at] == ask
        return order[at], hit

    if changes.copies_trusted(conn):
        t, p, m, v = scope
        lane_key = "\x1f".join(scope)
        cursor = conn.execute(
            BULK_COPIES_SQL,
            {"t": t, "p": p, "m": m, "v": v, "lane": lane_key, "bytes": 4 * lane.dimension},
        )
        while batch := cursor.fetchmany(DECODE_BATCH):
            cols, hit = columns_of([r[0] for r in batch])
            if not hit.all():  # copies of rows that are not current: not read (as row by row)
                keep = np.flatnonzero(hit).tolist()
                batch = [batch[i] for i in keep]
                cols = cols[hit]
            if not batch:
                continue
            data = np.frombuffer(b"".join([r[1] for r in batch]), dtype="<f4")
            _put(block, cols, data.reshape(len(batch), lane.dimension))
            filled[cols] = True
    todo = rowids[~filled].tolist()
    for offset in range(0, len(todo), TEXT_BATCH):
        part = todo[offset : offset + TEXT_BATCH]
        marks = ",".join("?" * len(part))
        texts = conn.execute(
            f"SELECT rowid, vector FROM embeddings WHERE rowid IN ({marks})", part
        ).fetchall()
        if not texts:
            continue
        matrix, ok = decode_texts([r[1] for r in texts], lane)
        cols, hit = columns_of([r[0] for r in texts])
        good = np.flatnonzero(ok & hit)
        if len(good):
            _put(block, cols[good], matrix[good])
            filled[cols[good]] = True
    return filled, bool(todo)


def _put(block: Block, cols: I64, vectors: F32) -> None:
    """Columns ``cols`` of ``block`` := the rows of ``vectors``, transposed in place
    :data:`TRANSPOSE` rows at a time (a whole batch at once strides through the cache: ~8×
    slower)."""
    vectors = vectors.astype("=f4", copy=False)
    matrix = block.matrix
    lo = int(cols[0])
    contiguous = bool((cols == np.arange(lo, lo + len(cols))).all())
    for start in range(0, len(cols), TRANSPOSE):
        part = vectors[start : start + TRANSPOSE].T
        if contiguous:
            matrix[:, lo + start : lo + start + part.shape[1]] = part
        else:
            matrix[:, cols[start : start + TRANSPOSE]] = part


def _norms(block: Block) -> None:
    """The cosine norms of the block's columns (the row-by-row refresh's own function)."""
    for lo in range(0, block.size, NORM_CHUNK):
        hi = min(block.size, lo + NORM_CHUNK)
        with np.errstate(all="ignore"):  # huge components: an infinite norm is legitimate
            block.norms[lo:hi] = sequential_norms(block.matrix[:, lo:hi])
