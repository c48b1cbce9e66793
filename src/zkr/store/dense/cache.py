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

**Patches.** When the log names a few writes that do touch the lane, :func:`_patch` re-reads
only the rows whose mapping can have changed (whole captures of the related targets), puts
their new vectors in an overlay (a second matrix whose columns follow the vector file's,
saved as its own side file) and re-derives the mapping of those rows only
(:func:`zkr.store.dense.mapping.patch`); a full refresh folds the overlay back into the
vector file once it outgrows its share of the lane (docs/decisions-retrieval-dense.md).

**PostgreSQL** (no side files, no change log): the signature is the person's lane mark
(``zkr_lane_marks``, :mod:`zkr.store.pg.schema`), which every transaction writing a row of
:data:`zkr.store.changes.LANE_TABLES` for that person moves; while it stands the derived state
does too, and when it moved a full refresh re-derives it, decoding again only the vectors of
rows whose tuple version (``xmin``) changed.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from zkr.codec import sha256_tagged
from zkr.store import changes, vectorfile
from zkr.store.dense.decode import decode_texts
from zkr.store.dense.kernels import sequential_norms
from zkr.store.dense.mapping import Derived, Row, derive, id_array, patch, split_keys
from zkr.store.driver import is_postgres
from zkr.store.eligibility import (
    LIVE_CLAIM,
    LIVE_EVIDENCE,
    LIVE_SOURCE,
    SCOPE_LINKS_OF_SQL,
    SCOPE_LINKS_SQL,
)
from zkr.store.embeddings import lane as stored_lane
from zkr.store.vectors import LaneConfig, decode_config

_config_of = lru_cache(maxsize=256)(decode_config)
"""A stored row's configuration from its (dimension, normalization, distance) cells (a lane
has a handful of distinct triples; decoding each once per process)."""

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

MAX_CACHED_LANES = 8
"""Lane caches kept per process (least recently used first out)."""


@dataclass
class _Block:
    """Decoded vectors of one configuration: column j of ``matrix`` is one stored row."""

    dimension: int
    matrix: F32
    norms: F32
    size: int = 0

    @classmethod
    def empty(cls, dimension: int, capacity: int) -> _Block:
        capacity = max(capacity, 16)
        return cls(
            dimension,
            np.empty((dimension, capacity), dtype=np.float32),
            np.empty(capacity, dtype=np.float32),
        )

    def reserve(self, count: int) -> None:
        """Make room for ``count`` more columns (one copy, of the used part only)."""
        if self.size + count <= self.matrix.shape[1] and self.matrix.flags.writeable:
            return
        capacity = self.size + count
        grown = np.empty((self.dimension, capacity), dtype=np.float32)
        grown[:, : self.size] = self.matrix[:, : self.size]
        norms = np.empty(capacity, dtype=np.float32)
        norms[: self.size] = self.norms[: self.size]
        self.matrix, self.norms = grown, norms

    def append(self, vectors: F32) -> int:
        """Append the rows of ``vectors`` (count × dimension float32) as new columns; returns
        the first new column."""
        start = self.size
        count = len(vectors)
        if start + count > self.matrix.shape[1]:
            capacity = max(start + count, self.matrix.shape[1] * 3 // 2)
            grown = np.empty((self.dimension, capacity), dtype=np.float32)
            grown[:, :start] = self.matrix[:, :start]
            norms = np.empty(capacity, dtype=np.float32)
            norms[:start] = self.norms[:start]
            self.matrix, self.norms = grown, norms
        chunk = 4096
        for offset in range(0, count, chunk):
            part = vectors[offset : offset + chunk]
            cols = np.ascontiguousarray(part.T)
            lo = start + offset
            self.matrix[:, lo : lo + len(part)] = cols
            with np.errstate(all="ignore"):  # huge components: an infinite norm is legitimate
                self.norms[lo : lo + len(part)] = sequential_norms(cols)
        self.size = start + count
        return start

    def compacted(self, columns: I64) -> _Block:
        """A new block holding only ``columns``, in that order."""
        block = _Block.empty(self.dimension, len(columns))
        block.matrix[:, : len(columns)] = self.matrix[:, columns]
        block.norms[: len(columns)] = self.norms[columns]
        block.size = len(columns)
        return block


Meta = tuple[object, ...]
"""(target_kind, target_id, dimension, normalization, distance, target_revision, input_hash,
created_at) of a stored row: every column but ``vector``."""


@dataclass(slots=True)
class _Entry:
    """One stored row as last read."""

    meta: Meta | None  # None: read from a vector file whose cells were not JSON values
    settled: bool  # created_at was already in the past when read: a rewrite would restamp it
    parsed: bool = False  # the vector was decoded (config/column are then final)
    config: LaneConfig | None = None  # None when parsed and not well-formed
    column: int = -1
    text_key: tuple[object, int] | None = None  # (target revision, hash(text)) of ``sha``
    sha: str = ""
    version: str | None = None  # PostgreSQL: the row's tuple version when read (see state)


@dataclass
class _LaneCache:
    conn: sqlite3.Connection  # held so that id(conn) cannot be reused while cached
    scope: tuple[str, str, str, str]
    signature: tuple[int, int] | None = None
    entries: dict[int, _Entry] = field(default_factory=dict)
    blocks: dict[LaneConfig, _Block] = field(default_factory=dict)
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
    extra: _Block | None = None  # the overlay: lane vectors written since the vector file
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


_CACHES: OrderedDict[tuple[int, str, str, str, str], _LaneCache] = OrderedDict()
_CACHES_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every cached lane (needed only after a hand-written SQL ``UPDATE`` that changes
    ``embeddings.vector`` and nothing else in a row, in a file without the change log)."""
    with _CACHES_LOCK:
        _CACHES.clear()


def _is_closed(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018 - raises once the connection is closed
    except sqlite3.ProgrammingError:
        return True
    return False


def _lane_cache(conn: sqlite3.Connection, scope: tuple[str, str, str, str]) -> _LaneCache:
    key = (id(conn), *scope)
    with _CACHES_LOCK:  # MemoryDb objects of other threads share the registry
        cache = _CACHES.get(key)
        if cache is not None and cache.conn is conn:
            _CACHES.move_to_end(key)
            return cache
        for stale in [k for k, c in _CACHES.items() if _is_closed(c.conn)]:
            del _CACHES[stale]
        cache = _LaneCache(conn, scope)
        _CACHES[key] = cache
        while len(_CACHES) > MAX_CACHED_LANES:
            _CACHES.popitem(last=False)
        return cache


def signature(conn: sqlite3.Connection) -> tuple[int, int]:
    """Moves whenever any connection, this one included, commits a change to the file."""
    row = conn.execute("PRAGMA data_version").fetchone()
    return (int(row[0]), conn.total_changes)


def state(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, model: str, version: str
) -> tuple[_LaneCache, Derived]:
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
        cache = _lane_cache(conn, (tenant_id, person_id, model, version))
        sig = _pg_signature(conn, tenant_id, person_id)  # read before the rows (see _pg_mark)
        if cache.signature == sig:
            return cache, cache.derived
        cache.signature = None
        versions = dict(_many(conn, _PG_VERSIONS_SQL, (tenant_id, person_id, model, version)))
        cache.dirty = {r for r, e in cache.entries.items() if e.version != versions.get(r)}
        _refresh(conn, cache)
        for rowid, entry in cache.entries.items():
            entry.version = versions.get(rowid)
        cache.signature = sig
        return cache, cache.derived
    cache = _lane_cache(conn, (tenant_id, person_id, model, version))
    sig = signature(conn)
    if cache.signature == sig:
        return cache, cache.derived
    cache.signature = None
    mark = changes.mark(conn)
    if not cache.file_checked:
        cache.file_checked = True
        cache.file = vectorfile.lane_path(conn, cache.scope)
        if cache.file is not None and not (mark is not None and _load_state(cache, mark)):
            _load_file(cache, cache.file)
    cache.dirty = set()
    cache.items = None
    if mark is not None and cache.mark is not None and _untouched(conn, cache, mark):
        cache.mark = mark
        # the state on disk stays valid (a fresh process checks the log since its position
        # itself): rewrite it only when that log has grown long
        if cache.saved_mark is None or mark.seq - cache.saved_mark.seq >= STATE_LAG:
            _save_state(cache)
    elif mark is not None and cache.items is not None and _patch(conn, cache):
        cache.mark = mark
        _save_state(cache)
    else:
        if not cache.entries_loaded and cache.file is not None:
            _load_file(cache, cache.file)
        _refresh(conn, cache)
        cache.mark = mark
        _save_state(cache)
    cache.signature = sig
    return cache, cache.derived


def _many(conn: sqlite3.Connection, sql: str, params: Any) -> list[tuple[Any, ...]]:
    """The rows of a query reading the whole lane: on PostgreSQL packed into one JSON value
    (:meth:`zkr.store.pg.adapter.PgConnection.execute_packed`; psycopg would load thousands
    of values one at a time), on SQLite as they come."""
    if is_postgres(conn):
        rows: list[tuple[Any, ...]] = conn.execute_packed(sql, params).fetchall()  # type: ignore[attr-defined]
        return rows
    return conn.execute(sql, params).fetchall()


def _pg_signature(conn: sqlite3.Connection, tenant_id: str, person_id: str) -> tuple[int, int]:
    """PostgreSQL: the person's lane mark (``zkr_lane_marks``, :mod:`zkr.store.pg.schema`) as a
    cache signature, ``(-1, -1)`` before any write. A new mark is drawn by every transaction
    writing a row the lane depends on, and it is read before those rows: under one snapshot
    they agree; outside one, rows read after the mark can only be newer than it, which costs
    one more refresh, never a stale lane."""
    row = conn.execute(_PG_MARK_SQL, (tenant_id, person_id)).fetchone()
    return (-1, -1 if row is None else int(row[0]))


_PG_MARK_SQL = "SELECT mark FROM zkr_lane_marks WHERE tenant_id = ? AND person_id = ?"

_PG_VERSIONS_SQL = """
SELECT rowid, CAST(xmin AS TEXT) FROM embeddings
WHERE tenant_id = ? AND person_id = ? AND model = ? AND version = ?"""
"""PostgreSQL only: each lane row's tuple version."""


def _untouched(conn: sqlite3.Connection, cache: _LaneCache, mark: changes.Mark) -> bool:
    """Whether nothing logged since ``cache.mark`` can change this lane's derived state: no
    write to its ``embeddings`` rows, and no written source, evidence, claim or link related
    (:data:`zkr.store.changes.RELATED_SQL`) to the target of any of its stored rows."""
    known = cache.mark
    if known is None or known.generation != mark.generation or mark.seq < known.seq:
        return False
    if mark.seq == known.seq:
        return True
    items = changes.since(conn, known.seq, UNTOUCHED_CHECK_LIMIT)
    if items is None:
        return False
    cache.items = items
    cache.dirty = changes.lane_rowids(items, cache.scope)
    if cache.dirty:
        return False
    ids = [item for item in items if not item.startswith(changes.LANE_PREFIX)]
    if not ids:
        return True
    t, p = cache.scope[:2]
    related = conn.execute(changes.RELATED_SQL, {"ids": json.dumps(ids), "t": t, "p": p}).fetchall()
    return not cache.derived.touches([r[0] for r in related if isinstance(r[0], str)])


PATCH_TARGETS = 2048
"""Targets whose rows a patch may re-read; beyond, a full refresh."""

PATCH_OVERLAY = 1024
"""Overlay columns always allowed before a full refresh rewrites the vector file (compacts
the overlay into it); more are allowed up to :data:`PATCH_SHARE` of the file's columns."""

PATCH_SHARE = 0.1


def _schema(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA schema_version").fetchone()[0])


def _with_ids(sorted_ids: npt.NDArray[np.bytes_], ids: set[str]) -> npt.NDArray[np.bytes_]:
    """``sorted_ids`` with ``ids`` inserted in order (those missing only; no re-sort)."""
    if not ids:
        return sorted_ids
    new = id_array(sorted(ids))
    width = max(sorted_ids.dtype.itemsize, new.dtype.itemsize)
    base = sorted_ids.astype(f"S{width}", copy=False)
    new = new.astype(f"S{width}")
    at = np.searchsorted(base, new)
    found = base[np.minimum(at, len(base) - 1)] == new if len(base) else np.zeros(len(new), bool)
    missing = ~found
    return np.insert(base, at[missing], new[missing]) if missing.any() else base


def _ids(keys: npt.NDArray[np.bytes_]) -> set[str]:
    return {bytes(k).decode("utf-8", "surrogatepass") for k in keys.tolist()}


# A patch re-reads whole captures (spec/retrieval.md §14 #12 folding looks at every Evidence
# target of a source and at the Source target): the given ids, the sources of those that are
# evidence of the scope, and every evidence of the scope of all those sources.
_CAPTURES_SQL = """
WITH ids(id) AS (SELECT value FROM json_each(:ids)),
caps(id) AS (
  SELECT id FROM ids
  UNION SELECT e.source_id FROM ids CROSS JOIN evidence e
    ON e.id = ids.id AND e.tenant_id = :t AND e.person_id = :p
)
SELECT id FROM caps
UNION SELECT e.id FROM caps CROSS JOIN evidence e
  ON e.tenant_id = :t AND e.person_id = :p AND e.source_id = caps.id
"""

# The lane's rows that a patch names: written rows (by rowid) to learn their targets.
_WRITTEN_SQL = (
    "SELECT em.target_id FROM embeddings em WHERE em.rowid IN (SELECT value FROM json_each(:rows))"
    " AND em.tenant_id = :t AND em.person_id = :p AND em.model = :m AND em.version = :v"
)


def _patch(conn: sqlite3.Connection, cache: _LaneCache) -> bool:
    """:func:`_patch_rows` read as a refresh reads (:func:`_lean_reads`)."""
    with _lean_reads(conn):
        return _patch_rows(conn, cache)


def _patch_rows(conn: sqlite3.Connection, cache: _LaneCache) -> bool:
    """Bring the derived state up to date from what the log holds since ``cache.mark``
    (``cache.items``, ``cache.dirty``) by re-reading only the rows whose mapping can have
    changed: the lane's written rows and every row whose target is related to a written id
    (:data:`zkr.store.changes.RELATED_SQL`), widened to whole captures. Their new vectors go
    to the overlay (``cache.extra``, written to the overlay file); the vector file is left
    as it is, its written rows listed in ``cache.stale``. ``False`` (nothing changed) when a
    full refresh is needed instead: the lane may change, too much was written, the overlay
    has grown past its share of the lane."""
    derived = cache.derived
    lane = derived.lane
    items = cache.items
    if lane is None or items is None or lane not in cache.blocks:
        return False
    if cache.schema < 0 or _schema(conn) != cache.schema:
        return False  # a VACUUM may have renumbered the rowids the state knows rows by
    base = cache.blocks[lane]
    t, p, m, v = cache.scope
    scope = {"t": t, "p": p, "m": m, "v": v}
    dirty = cache.dirty
    affected: set[str] = set()
    ids = [item for item in items if not item.startswith(changes.LANE_PREFIX)]
    if ids:
        related = conn.execute(changes.RELATED_SQL, {"ids": json.dumps(ids), "t": t, "p": p})
        affected.update(r[0] for r in related if isinstance(r[0], str))
    _, pos_ids = split_keys(derived.pos_keys)
    dirty_rows = np.asarray(sorted(dirty), dtype=np.int64)
    if dirty:
        affected |= _ids(pos_ids[np.isin(derived.pos_rowids, dirty_rows)])
        written = conn.execute(_WRITTEN_SQL, {**scope, "rows": json.dumps(sorted(dirty))})
        affected.update(r[0] for r in written if isinstance(r[0], str))
    if len(affected) > PATCH_TARGETS:
        return False
    if affected:
        hit = np.isin(pos_ids, id_array(sorted(affected)))
        affected |= _ids(derived.pos_caps[hit]) - {""}
        captures = conn.execute(
            _CAPTURES_SQL, {"ids": json.dumps(sorted(affected)), "t": t, "p": p}
        )
        affected.update(r[0] for r in captures if isinstance(r[0], str))
    wanted = id_array(sorted(affected)) if affected else None
    removed = np.isin(derived.pos_rowids, dirty_rows)
    if wanted is not None:
        removed |= np.isin(pos_ids, wanted) | np.isin(derived.pos_caps, wanted)
        affected |= _ids(pos_ids[removed])
    if len(affected) > PATCH_TARGETS:
        return False
    # the rows of the affected targets as they are now (currentness as in _refresh_rows)
    now = conn.execute("SELECT unixepoch()").fetchone()[0]
    params = {**scope, "ids": json.dumps(sorted(affected))}
    old_columns = dict(
        zip(derived.pos_rowids[removed].tolist(), derived.columns[removed].tolist(), strict=True)
    )
    candidates: list[tuple[int, Meta, str, object, str | None]] = []
    for kind, sql in _PATCH_SQL if affected else ():
        for row in conn.execute(sql, params):
            rowid, meta = row[0], row[1:9]
            revision, text = row[9], row[10]
            if revision is None or meta[5] != revision or not isinstance(text, str):
                continue
            if meta[6] == sha256_tagged(text):
                candidates.append((rowid, meta, kind, row[11], row[12]))
    # vectors: a surviving row not written keeps its column; the others are read into the
    # overlay (a row of another configuration only tells whether the lane changes)
    todo = [c for c in candidates if c[0] in dirty or c[0] not in old_columns]
    entries = {
        rowid: _Entry(meta, type(meta[7]) is int and meta[7] < now) for rowid, meta, *_ in todo
    }
    counts: dict[LaneConfig, int] = {}
    for _rowid, meta, *_ in todo:
        config = _config_of(meta[2], meta[3], meta[4])
        if config is not None:
            counts[config] = counts.get(config, 0) + 1
    extra = cache.extra
    overlay = _Block.empty(
        lane.dimension, (0 if extra is None else extra.size) + counts.get(lane, 0)
    )
    if extra is not None and extra.size:
        overlay.matrix[:, : extra.size] = extra.matrix[:, : extra.size]
        overlay.norms[: extra.size] = extra.norms[: extra.size]
        overlay.size = extra.size
    if overlay.size + counts.get(lane, 0) > max(PATCH_OVERLAY, int(base.size * PATCH_SHARE)):
        return False
    blocks = {c: overlay if c == lane else _Block.empty(c.dimension, n) for c, n in counts.items()}
    _decode_rows(conn, cache.scope, entries, blocks, [rowid for rowid, *_ in todo])
    rows: list[Row] = []
    for rowid, meta, kind, mappable, capture in candidates:
        entry = entries.get(rowid)
        if entry is None:
            column = old_columns[rowid]
        elif entry.config is None:
            continue  # not well-formed
        elif entry.config != lane:
            if LaneConfig.order_key(entry.config) < LaneConfig.order_key(lane):
                return False  # the lane changes
            continue
        else:
            column = base.size + entry.column
        rows.append(Row(rowid, column, lane, kind, str(meta[1]), mappable, capture))
    if len(derived.columns) - int(removed.sum()) + len(rows) == 0:
        return False  # the lane may change
    link_params = {"t": t, "p": p, "ids": params["ids"]}
    links = conn.execute(SCOPE_LINKS_OF_SQL, link_params).fetchall() if affected else []
    patched = patch(derived, removed, rows, links)
    # every stored row's target id stays listed, written rows' included (current or not); an
    # id listed without a row only costs a check
    patched.row_ids = _with_ids(derived.row_ids, affected)
    cache.derived = patched
    for rowid in dirty:
        cache.entries.pop(rowid, None)
    cache.stale |= dirty
    if overlay.size != (0 if extra is None else extra.size) or extra is None:
        cache.extra = overlay
        cache.extra_token = ""
        if cache.file is not None and cache.token is not None and overlay.size:
            cache.extra_token = (
                vectorfile.write(
                    vectorfile.overlay_path(cache.file),
                    cache.scope,
                    [],
                    [lane],
                    [overlay.matrix[:, : overlay.size]],
                    [overlay.norms[: overlay.size]],
                )
                or ""
            )
        if not overlay.size:
            cache.extra = None
    return True


STATE_LAG = 1024
"""Log entries that may pile up past the lane state file's position before a process whose
lane they do not touch rewrites that file."""

UNTOUCHED_CHECK_LIMIT = 5000
"""More logged changes than this since a cache's position: refresh instead of checking."""


def _load_state(cache: _LaneCache, mark: changes.Mark) -> bool:
    """Adopt the lane state file and the vector file it indexes, without reading their rows;
    ``False`` when they are missing, of another log generation or do not belong together."""
    assert cache.file is not None
    lane = vectorfile.read_state(vectorfile.state_path(cache.file), cache.scope)
    if lane is None or lane.generation != mark.generation or lane.seq > mark.seq:
        return False
    snap = vectorfile.read(cache.file, cache.scope, rows=False)
    if snap is None or snap.token != lane.token:
        return False
    extra = None
    if lane.extra:
        over = vectorfile.read(vectorfile.overlay_path(cache.file), cache.scope, rows=False)
        if (
            over is None
            or over.token != lane.extra
            or over.configs != [lane.config]
            or lane.config not in snap.configs
        ):
            return False
        extra = _Block(
            over.configs[0].dimension,
            over.matrices[0].view(np.ndarray),
            over.norms[0].view(np.ndarray),
            over.matrices[0].shape[1],
        )
    _adopt_blocks(cache, snap)
    cache.token = snap.token
    cache.extra, cache.extra_token = extra, lane.extra
    cache.stale = set(lane.stale.tolist())
    cache.schema = lane.schema
    cache.derived = Derived(
        lane=lane.config,
        columns=lane.columns,
        source_of=lane.source_of,
        kinds=lane.kinds,
        ids=lane.ids,
        pair_rows=lane.pair_rows,
        pair_starts=lane.pair_starts,
        row_ids=lane.row_ids,
        pos_rowids=lane.pos_rowids,
        pos_keys=lane.pos_keys,
        pos_caps=lane.pos_caps,
    )
    cache.mark = cache.saved_mark = changes.Mark(lane.generation, lane.seq)
    cache.entries_loaded = False
    return True


def _save_state(cache: _LaneCache) -> None:
    """Write the lane state file when the derived state moved past the one on disk and the
    blocks are the vector file's own columns (so the state's columns index that file)."""
    if (
        cache.file is None
        or cache.mark is None
        or cache.token is None
        or cache.saved_mark == cache.mark
        or (cache.extra is not None and not cache.extra_token)  # the overlay is not on disk
    ):
        return
    derived = cache.derived
    vectorfile.write_state(
        vectorfile.state_path(cache.file),
        cache.scope,
        vectorfile.LaneState(
            token=cache.token,
            generation=cache.mark.generation,
            seq=cache.mark.seq,
            config=derived.lane,
            columns=derived.columns,
            kinds=derived.kinds,
            ids=derived.ids,
            pair_rows=derived.pair_rows,
            pair_starts=derived.pair_starts,
            source_of=derived.source_of,
            row_ids=derived.row_ids,
            pos_rowids=derived.pos_rowids,
            pos_keys=derived.pos_keys,
            pos_caps=derived.pos_caps,
            stale=np.asarray(sorted(cache.stale), dtype=np.int64),
            extra=cache.extra_token if cache.extra is not None else "",
            schema=cache.schema,
        ),
    )
    cache.saved_mark = cache.mark


def peek_lane(conn: sqlite3.Connection, scope: tuple[str, str, str, str]) -> LaneConfig | None:
    """The lane's configuration (§9.3) without reading any vector: from the cache when it is
    current, else from a few index seeks (:func:`zkr.store.embeddings.lane`)."""
    if is_postgres(conn):
        with _CACHES_LOCK:
            cache = _CACHES.get((id(conn), *scope))
        if (
            cache is not None
            and cache.conn is conn
            and cache.signature is not None
            and cache.signature == _pg_signature(conn, *scope[:2])
        ):
            return cache.derived.lane
        return stored_lane(conn, *scope)
    with _CACHES_LOCK:
        cache = _CACHES.get((id(conn), *scope))
    if cache is not None and cache.conn is conn and cache.signature == signature(conn):
        return cache.derived.lane
    return stored_lane(conn, *scope)


# One query per target kind, in §5.2 row order (target_kind, then target_id; the
# zkr_embeddings_rows index serves each part in order, reading no row's vector). Each row
# carries: its small columns; the target's §9.1 revision and text (NULL when the target is
# not live); for §5.4, whether the target can be mapped at all (evidence: source live; source:
# has live evidence; claims: see eligibility.LIVE_LINKS_SQL).
_ROW_COLUMNS = (
    "em.rowid, em.target_kind, em.target_id, em.dimension, em.normalization, em.distance,"
    " em.target_revision, em.input_hash, em.created_at"
)
_LANE = "em.tenant_id = :t AND em.person_id = :p AND em.model = :m AND em.version = :v"


def _rows_sql(kind: str, target: str, revision: str, text: str, mappable: str, capture: str) -> str:
    """The lane's rows of one target ``kind`` with their ``target`` (a LEFT JOIN: NULL columns
    when it is not live); ``{only}`` is where a patch restricts them to some target ids."""
    return f"""
SELECT {_ROW_COLUMNS}, {revision}, {text}, {mappable}, {capture}
FROM embeddings em
LEFT JOIN {target}
WHERE {_LANE} AND em.target_kind = '{kind}'{{only}}
ORDER BY em.target_id"""


_ROWS_TEMPLATES = (
    (
        "claim",
        _rows_sql(
            "claim",
            f"claims c ON c.id = em.target_id AND c.tenant_id = :t AND c.person_id = :p"
            f" AND {LIVE_CLAIM}",
            "c.recorded_from",
            "c.subject || ' ' || c.predicate || ' ' || c.value",
            "1",
            "NULL",
        ),
    ),
    (
        "evidence",
        _rows_sql(
            "evidence",
            f"evidence e ON e.id = em.target_id AND e.tenant_id = :t AND e.person_id = :p"
            f" AND {LIVE_EVIDENCE}",
            "e.source_revision",
            "e.quote",
            "EXISTS (SELECT 1 FROM sources s WHERE s.id = e.source_id AND s.tenant_id = :t"
            f" AND s.person_id = :p AND {LIVE_SOURCE})",
            "e.source_id",
        ),
    ),
    (
        "source",
        _rows_sql(
            "source",
            f"sources s ON s.id = em.target_id AND s.tenant_id = :t AND s.person_id = :p"
            f" AND {LIVE_SOURCE}",
            "s.revision",
            "s.content",
            "EXISTS (SELECT 1 FROM evidence e WHERE e.source_id = s.id AND e.tenant_id = :t"
            f" AND e.person_id = :p AND {LIVE_EVIDENCE})",
            "NULL",
        ),
    ),
)


_PATCH_SQL = tuple(
    (kind, sql.replace("{only}", " AND em.target_id IN (SELECT value FROM json_each(:ids))"))
    for kind, sql in _ROWS_TEMPLATES
)
_ROWS_SQL = tuple((kind, sql.replace("{only}", "")) for kind, sql in _ROWS_TEMPLATES)


def _refresh(conn: sqlite3.Connection, cache: _LaneCache) -> None:
    """Re-read the lane (small columns only), decode the vectors of new or changed rows that
    could be current, and re-derive currentness, the lane and the §5.4 mapping."""
    cache.extra, cache.extra_token = None, ""  # rows patched since are re-read (``stale``)
    cache.schema = -1 if is_postgres(conn) else _schema(conn)  # (no patches there)
    with _lean_reads(conn):
        _refresh_rows(conn, cache)


def _refresh_rows(conn: sqlite3.Connection, cache: _LaneCache) -> None:
    t, p, m, v = cache.scope
    params = {"t": t, "p": p, "m": m, "v": v}
    now = conn.execute("SELECT unixepoch()").fetchone()[0]
    old = cache.entries
    entries: dict[int, _Entry] = {}
    # rows whose target is live with the stored revision and hash, in §5.2 order, with the
    # §5.4 data: (rowid, kind, mappable)
    candidates: list[tuple[int, str, object, str | None]] = []
    for kind, sql in _ROWS_SQL:
        for row in _many(conn, sql, params):
            rowid, meta = row[0], row[1:9]
            entry = old.get(rowid)
            if entry is None or not entry.settled or entry.meta != meta or rowid in cache.dirty:
                created_at = meta[7]
                entry = _Entry(meta, type(created_at) is int and created_at < now)
            entries[rowid] = entry
            revision, text = row[9], row[10]
            if revision is None or meta[5] != revision or not isinstance(text, str):
                continue
            text_key = (revision, hash(text))
            if entry.text_key != text_key:
                entry.text_key, entry.sha = text_key, sha256_tagged(text)
            if meta[6] == entry.sha:
                candidates.append((rowid, kind, row[11], row[12]))
    cache.entries = entries
    cache.unsaved += _decode_pending(conn, cache, [rowid for rowid, *_ in candidates])
    _compact(cache)
    links = _many(conn, SCOPE_LINKS_SQL, params)
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
        _save_file(cache, cache.file)
        cache.unsaved = 0


def _adopt_blocks(cache: _LaneCache, snap: vectorfile.Snapshot) -> None:
    """Use the vector file's matrices (memory-mapped) as the cache's blocks."""
    cache.blocks = {}
    for config, matrix, norms in zip(snap.configs, snap.matrices, snap.norms, strict=True):
        # plain views of the mapped file (a memmap subclass costs a Python call per slice)
        cache.blocks[config] = _Block(
            config.dimension, matrix.view(np.ndarray), norms.view(np.ndarray), matrix.shape[1]
        )


def _load_file(cache: _LaneCache, path: Path) -> None:
    """Seed the cache with the vectors another process decoded (zkr.store.vectorfile)."""
    cache.entries_loaded = True
    snap = vectorfile.read(path, cache.scope)
    stale: set[int] = set()
    if snap is not None:
        # rows written since the file was saved (patched into an overlay): their small
        # columns in the file are not to be trusted; without the state naming them, when an
        # overlay exists, nothing in the file is
        lane = vectorfile.read_state(vectorfile.state_path(path), cache.scope)
        if lane is not None and lane.token == snap.token:
            stale = set(lane.stale.tolist())
            if snap.token == cache.token:
                stale |= cache.stale
        elif vectorfile.overlay_path(path).exists():
            snap = None
    if snap is None:
        cache.token = None
        return
    cache.stale = stale
    _adopt_blocks(cache, snap)
    cache.token = snap.token
    cache.entries = {}
    for rowid, meta, index, column, parsed in zip(
        snap.rowids, snap.metas, snap.config, snap.column, snap.parsed, strict=True
    ):
        if meta is None or rowid in stale:
            continue
        if index >= 0:
            cache.entries[rowid] = _Entry(meta, True, parsed, snap.configs[index], column)
        else:
            cache.entries[rowid] = _Entry(meta, True, parsed)


def _save_file(cache: _LaneCache, path: Path) -> None:
    """Write the settled rows of the lane (columns compacted per configuration)."""
    counts: dict[LaneConfig, int] = {}
    for entry in cache.entries.values():
        if entry.settled and entry.config is not None:
            counts[entry.config] = counts.get(entry.config, 0) + 1
    configs = [config for config in cache.blocks if counts.get(config)]
    position = {config: i for i, config in enumerate(configs)}
    columns: list[list[int]] = [[] for _ in configs]
    rows: list[tuple[int, Meta | None, int, int, bool]] = []
    for rowid, entry in cache.entries.items():
        if not entry.settled:
            continue
        if entry.config is None:
            rows.append((rowid, entry.meta, -1, -1, entry.parsed))
            continue
        index = position[entry.config]
        rows.append((rowid, entry.meta, index, len(columns[index]), True))
        columns[index].append(entry.column)
    matrices: list[_Picked] = []
    norms = []
    picks = []
    for config, cols in zip(configs, columns, strict=True):
        block = cache.blocks[config]
        picked = np.asarray(cols, dtype=np.int64)
        picks.append(picked)
        matrices.append(_Picked(block.matrix, picked))
        norms.append(block.norms[picked])
    # the overlay goes first: a reader then finds either the old file with the state naming
    # its stale rows, or the new file, whose rows are all current
    vectorfile.overlay_path(path).unlink(missing_ok=True)
    token = vectorfile.write(path, cache.scope, rows, configs, matrices, norms)
    if token is not None:
        cache.stale = set()
    if token is None or any(e.config is not None and not e.settled for e in cache.entries.values()):
        return
    snap = vectorfile.read(path, cache.scope, rows=False)
    if snap is None or snap.token != token:
        return
    # Adopt the file just written: its memory-mapped columns replace the in-memory blocks
    # (their memory is freed), and every column number moves to the file's.
    remaps: dict[LaneConfig, I64] = {}
    for config, picked in zip(configs, picks, strict=True):
        remap = np.full(cache.blocks[config].size, -1, dtype=np.int64)
        remap[picked] = np.arange(len(picked), dtype=np.int64)
        remaps[config] = remap
    for entry in cache.entries.values():
        if entry.config is not None:
            entry.column = int(remaps[entry.config][entry.column])
    derived = cache.derived
    if derived.lane is not None and len(derived.columns):
        derived.columns = remaps[derived.lane][derived.columns]
    _adopt_blocks(cache, snap)
    cache.token = token


class _Picked:
    """Columns ``picked`` of ``matrix``, handed to the file writer one row at a time."""

    def __init__(self, matrix: F32, picked: I64) -> None:
        self.matrix, self.picked = matrix, picked
        self.shape = (matrix.shape[0], len(picked))

    def __getitem__(self, row: int) -> F32:
        out: F32 = self.matrix[row, self.picked]
        return out


def _decode_pending(conn: sqlite3.Connection, cache: _LaneCache, rowids: list[int]) -> int:
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
        config = None if meta is None else _config_of(meta[2], meta[3], meta[4])
        if config is not None:
            wanted[config] = wanted.get(config, 0) + 1
    for config, count in wanted.items():
        block = cache.blocks.get(config)
        if block is None:
            cache.blocks[config] = _Block.empty(config.dimension, count)
        else:
            block.reserve(count)
    _decode_rows(conn, cache.scope, entries, cache.blocks, todo)
    return len(todo)


@contextmanager
def _lean_reads(conn: sqlite3.Connection) -> Iterator[None]:
    """Read through neither SQLite's memory map nor a large page cache: a refresh reads each
    page of the lane once, and through those they would stay resident (up to 256 + 64 MiB
    next to the lane's own float32 copy)."""
    saved = [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in _READ_PRAGMAS]
    conn.execute("PRAGMA mmap_size = 0")
    conn.execute("PRAGMA cache_size = -2048")
    try:
        yield
    finally:
        for name, value in zip(_READ_PRAGMAS, saved, strict=True):
            conn.execute(f"PRAGMA {name} = {int(value)}")


_READ_PRAGMAS = ("mmap_size", "cache_size")


def _decode_rows(
    conn: sqlite3.Connection,
    scope: tuple[str, str, str, str],
    entries: dict[int, _Entry],
    blocks: dict[LaneConfig, _Block],
    todo: list[int],
) -> None:
    """Read the vectors of rows ``todo`` of ``entries`` into ``blocks`` (one per
    configuration, with room): zkr's float32 copy of a row when one is kept for exactly that
    row (:func:`zkr.store.changes.copies`, when :func:`~zkr.store.changes.copies_trusted`), else
    its JSON text, decoded in bulk (:func:`zkr.store.dense.decode.decode_texts`)."""
    trusted = changes.copies_trusted(conn)
    for offset in range(0, len(todo), DECODE_BATCH):
        part = todo[offset : offset + DECODE_BATCH]
        kept = changes.copies(conn, scope, part) if trusted else {}
        # per configuration: rowids and their float32 rows, from copies or decoded text
        found: dict[LaneConfig, tuple[list[int], list[F32]]] = {}
        texts: dict[LaneConfig, tuple[list[int], list[object]]] = {}
        copied: dict[LaneConfig, tuple[list[int], list[bytes]]] = {}
        read: list[int] = []
        for rowid in part:
            entry = entries[rowid]
            entry.parsed = True
            meta = entry.meta
            config = None if meta is None else _config_of(meta[2], meta[3], meta[4])
            if config is None or meta is None:
                continue
            copy = kept.get(rowid)
            if (
                copy is not None
                and copy[:3] == (meta[0], meta[1], meta[7])
                and len(copy[3]) == 4 * config.dimension
            ):
                ids, blobs = copied.setdefault(config, ([], []))
                ids.append(rowid)
                blobs.append(copy[3])
            else:
                read.append(rowid)
        if read:
            marks = ",".join("?" * len(read))
            for rowid, text in _many(
                conn, f"SELECT rowid, vector FROM embeddings WHERE rowid IN ({marks})", read
            ):
                meta = entries[rowid].meta
                assert meta is not None
                config = _config_of(meta[2], meta[3], meta[4])
                assert config is not None
                ids, cells = texts.setdefault(config, ([], []))
                ids.append(rowid)
                cells.append(text)
        for config, (ids, blobs) in copied.items():
            matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), -1)
            found[config] = (ids, [matrix])
        for config, (ids, cells) in texts.items():
            matrix, ok = decode_texts(cells, config)
            good = np.flatnonzero(ok)
            if len(good):
                into, rows = found.setdefault(config, ([], []))
                into.extend(ids[i] for i in good.tolist())
                rows.append(matrix[good])
        for config, (ids, rows) in found.items():
            start = blocks[config].append(np.concatenate(rows).astype("=f4", copy=False))
            for position, rowid in enumerate(ids):
                entries[rowid].config = config
                entries[rowid].column = start + position


DECODE_BATCH = 2048
"""Rows whose vectors are read (and decoded) together."""


def _compact(cache: _LaneCache) -> None:
    """Drop blocks no row uses any more and squeeze blocks that are mostly dead columns."""
    used: dict[LaneConfig, list[_Entry]] = {}
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
