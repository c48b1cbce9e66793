"""Patching a lane's derived state after a few writes (docs/decisions-retrieval-dense.md, "A
few written rows are patched"): only the rows whose mapping can have changed are re-read, their
new vectors go to an overlay saved beside the vector file, and the mapping of those rows only
is re-derived (:func:`zkr.store.dense.mapping.patch`)."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import numpy.typing as npt

from zkr.codec import sha256_tagged
from zkr.store import changes, vectorfile
from zkr.store.dense import blocks, mapping
from zkr.store.dense.blocks import Block, Entry, Meta, config_of, lean_reads
from zkr.store.dense.mapping import Row, id_array, split_keys
from zkr.store.dense.registry import LaneCache
from zkr.store.dense.rows import CAPTURES_SQL, PATCH_SQL, schema_version
from zkr.store.eligibility import SCOPE_LINKS_OF_SQL
from zkr.store.lanesql import WRITTEN_TARGETS_SQL
from zkr.store.vectors import LaneConfig

PATCH_TARGETS = 2048
"""Targets whose rows a patch may re-read; beyond, a full refresh."""

PATCH_OVERLAY = 1024
"""Overlay columns always allowed before a full refresh rewrites the vector file (compacts
the overlay into it); more are allowed up to :data:`PATCH_SHARE` of the file's columns."""

PATCH_SHARE = 0.1


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


def patch(conn: sqlite3.Connection, cache: LaneCache) -> bool:
    """:func:`_patch_rows` read as a refresh reads (:func:`lean_reads`)."""
    with lean_reads(conn):
        return _patch_rows(conn, cache)


def _patch_rows(conn: sqlite3.Connection, cache: LaneCache) -> bool:
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
    if cache.schema < 0 or schema_version(conn) != cache.schema:
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
        written = conn.execute(WRITTEN_TARGETS_SQL, {**scope, "rows": json.dumps(sorted(dirty))})
        affected.update(r[0] for r in written if isinstance(r[0], str))
    if len(affected) > PATCH_TARGETS:
        return False
    if affected:
        hit = np.isin(pos_ids, id_array(sorted(affected)))
        affected |= _ids(derived.pos_caps[hit]) - {""}
        captures = conn.execute(CAPTURES_SQL, {"ids": json.dumps(sorted(affected)), "t": t, "p": p})
        affected.update(r[0] for r in captures if isinstance(r[0], str))
    wanted = id_array(sorted(affected)) if affected else None
    removed = np.isin(derived.pos_rowids, dirty_rows)
    if wanted is not None:
        removed |= np.isin(pos_ids, wanted) | np.isin(derived.pos_caps, wanted)
        affected |= _ids(pos_ids[removed])
    if len(affected) > PATCH_TARGETS:
        return False
    # the rows of the affected targets as they are now (currentness as in a full refresh,
    # zkr.store.dense.cache._refresh_rows)
    now = conn.execute("SELECT unixepoch()").fetchone()[0]
    params = {**scope, "ids": json.dumps(sorted(affected))}
    old_columns = dict(
        zip(derived.pos_rowids[removed].tolist(), derived.columns[removed].tolist(), strict=True)
    )
    candidates: list[tuple[int, Meta, str, object, str | None]] = []
    for kind, sql in PATCH_SQL if affected else ():
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
        rowid: Entry(meta, type(meta[7]) is int and meta[7] < now) for rowid, meta, *_ in todo
    }
    counts: dict[LaneConfig, int] = {}
    for _rowid, meta, *_ in todo:
        config = config_of(meta[2], meta[3], meta[4])
        if config is not None:
            counts[config] = counts.get(config, 0) + 1
    extra = cache.extra
    overlay = Block.empty(
        lane.dimension, (0 if extra is None else extra.size) + counts.get(lane, 0)
    )
    if extra is not None and extra.size:
        overlay.matrix[:, : extra.size] = extra.matrix[:, : extra.size]
        overlay.norms[: extra.size] = extra.norms[: extra.size]
        overlay.size = extra.size
    if overlay.size + counts.get(lane, 0) > max(PATCH_OVERLAY, int(base.size * PATCH_SHARE)):
        return False
    into = {c: overlay if c == lane else Block.empty(c.dimension, n) for c, n in counts.items()}
    blocks.decode_rows(conn, cache.scope, entries, into, [rowid for rowid, *_ in todo])
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
    patched = mapping.patch(derived, removed, rows, links)
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
