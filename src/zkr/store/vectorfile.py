"""The dense lane's persistent vector cache: decoded float32 vectors kept next to the database
so that a fresh process (every CLI call) need not re-parse every stored JSON vector.

Layout: ``<database file>.zkr-vectors/<lane digest>.bin``, one file per (scope, model,
version), written atomically (temporary file + rename) and only for lanes of at least
:data:`MIN_ROWS` rows. It is a cache of a rebuildable projection of a rebuildable projection:
deleting the directory is always safe, and nothing in the database refers to it (the
reference ignores it; the file layout of spec/storage.md is untouched).

Trust rule (the same as the in-process cache, see :mod:`zkr.store.dense`): a cached vector is
used for a row only when the row's rowid and every other column but ``vector`` (kind, id,
dimension, normalization, distance, revision, hash, ``created_at``) are unchanged, and the
row's ``created_at`` second had already passed when it was cached. Every writer of a vector
(this zkr's ``embed``, the reference's) restamps ``created_at = unixepoch()``, so a rewritten
vector always shows up as a changed row.

Set ``ZKR_VECTOR_CACHE=0`` to neither read nor write these files (paths:
:mod:`zkr.store.sidepaths`).

File format (little-endian): ``ZKRVEC03``, u64 header length, a JSON header
``{"lane": [...], "token": hex, "rows": n, "configs": [[dimension, normalization, distance,
columns], ...], "meta": bytes}``, the rows' small columns as one JSON array of arrays
(``null`` for a row whose cells are not all JSON values), then ``rowids`` i64[n], ``config``
i32[n] (index into ``configs``; −1: not well-formed or not decoded), ``column`` i64[n],
``parsed`` u8[n], and per configuration its (dimension × columns) float32 matrix and float32
norms, each 64-byte aligned so that they are memory-mapped rather than copied.

Beside it, ``<lane digest>.lane`` (:func:`write_state`) holds what a search needs (the lane,
surviving columns of the ``.bin`` named by its token, targets, row → target pairs) as of one
position of the change log (:mod:`zkr.store.changes`): a fresh process that finds no change
touching the lane since that position searches from these two files without reading a row.
After a few writes it patches them (:mod:`zkr.store.dense.patching`): the vectors written since
the ``.bin`` go to ``<lane digest>.add`` (:func:`overlay_path`, the same format), named by
the lane state together with the rows whose small columns in the ``.bin`` went stale.

For the numpy-free search of a one-shot process (:mod:`zkr.store.lanescan`), numpy also
writes ``<lane digest>.rows`` (the ``.bin``'s vectors one after the other) and
``<lane digest>.fast`` (an index of one lane state): :mod:`zkr.store.dense.prefilter`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from zkr.store.sidepaths import (  # re-exported: the paths and their switch
    enabled as enabled,
    lane_path as lane_path,
    overlay_path as overlay_path,
    prefilter_path as prefilter_path,
    replacing,
    rows_path as rows_path,
    state_path as state_path,
)
from zkr.store.vectors import LaneConfig

MAGIC = b"ZKRVEC03"
ALIGN = 64
MIN_ROWS = 2000
"""Smaller lanes decode in well under a second; they get no file."""
SAVE_AFTER = 256
"""Rewrite a lane's file once this many vectors (or 2% of the lane) were decoded since."""

Meta = tuple[object, ...]


@dataclass
class Snapshot:
    """The decoded contents of one lane file (``token`` names this write of it; row fields
    are empty when read with ``rows=False``)."""

    token: str
    rowids: list[int]
    metas: list[Meta | None]
    config: list[int]
    column: list[int]
    parsed: list[bool]
    configs: list[LaneConfig]
    matrices: list[npt.NDArray[np.float32]]
    norms: list[npt.NDArray[np.float32]]


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def read(path: Path, scope: tuple[str, str, str, str], rows: bool = True) -> Snapshot | None:
    """The lane file, or ``None`` when it is missing, unreadable or for another lane.

    Everything, the mapped matrices included, comes from one open handle: a concurrent
    writer replaces the path, never the file this handle reads.
    """
    try:
        with open(path, "rb") as handle:
            if handle.read(8) != MAGIC:
                return None
            total = os.fstat(handle.fileno()).st_size
            size = int.from_bytes(handle.read(8), "little")
            if size > total:
                return None
            header = json.loads(handle.read(size))
            if header.get("lane") != list(scope) or not 0 <= int(header["meta"]) <= total:
                return None
            n = int(header["rows"])
            token = str(header.get("token", ""))
            metas: list[Meta | None] = []
            rowids: list[int] = []
            config: list[int] = []
            column: list[int] = []
            parsed: list[bool] = []
            if rows:
                raw = json.loads(handle.read(int(header["meta"])))
                if raw is None:
                    return None  # written without its rows' small columns (dense.bulk)
                metas = [None if m is None else tuple(m) for m in raw]
                rowids = np.fromfile(handle, dtype="<i8", count=n).tolist()
                config = np.fromfile(handle, dtype="<i4", count=n).tolist()
                column = np.fromfile(handle, dtype="<i8", count=n).tolist()
                parsed = np.fromfile(handle, dtype=np.uint8, count=n).astype(bool).tolist()
                counts = (len(metas), len(rowids), len(config), len(column), len(parsed))
                if any(count != n for count in counts):
                    return None
                offset = handle.tell()
            else:
                offset = 16 + size + int(header["meta"]) + 21 * n
            configs: list[LaneConfig] = []
            matrices: list[npt.NDArray[np.float32]] = []
            norms: list[npt.NDArray[np.float32]] = []
            for entry in header["configs"]:
                configs.append(LaneConfig.from_json(entry))
                shape = (configs[-1].dimension, int(entry[3]))
                offset = _aligned(offset)
                end = _aligned(offset + 4 * shape[0] * shape[1]) + 4 * shape[1]
                if shape[0] <= 0 or shape[1] <= 0 or end > total:
                    return None
                matrices.append(
                    np.memmap(handle, dtype="<f4", mode="r", offset=offset, shape=shape)
                )
                offset = _aligned(offset + 4 * shape[0] * shape[1])
                norms.append(
                    np.memmap(handle, dtype="<f4", mode="r", offset=offset, shape=(shape[1],))
                )
                offset += 4 * shape[1]
        return Snapshot(token, rowids, metas, config, column, parsed, configs, matrices, norms)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, MemoryError):
        return None


def _json_meta(meta: Meta | None) -> list[object] | None:
    if meta is None or not all(v is None or type(v) in (str, int, float) for v in meta):
        return None
    return list(meta)


def drop_overlay(path: Path) -> bool:
    """Remove the overlay of the vectors file ``path`` before that file is rewritten (a reader
    then finds the old file with the state naming its stale rows, or the new file alone).
    ``False`` when it may still be there (a read-only directory, a side path that is not a
    directory): the caller then writes no new vectors file, as for any other write failure."""
    try:
        overlay_path(path).unlink(missing_ok=True)
    except OSError:
        return False
    return True


def write(
    path: Path,
    scope: tuple[str, str, str, str],
    rows: list[tuple[int, Meta | None, int, int, bool]],
    configs: list[LaneConfig],
    matrices: Sequence[Any],
    norms: list[npt.NDArray[np.float32]],
) -> str | None:
    """Atomically replace the lane file. ``rows`` are (rowid, small columns, config index,
    column, parsed); ``matrices``/``norms`` are written column by column chosen by
    ``picks`` when given (no copy of a whole matrix is made). Returns the new file's token,
    or ``None`` on failure (read-only directory, full disk): it is a cache."""
    try:  # SQLite cells are JSON values but for BLOBs, which only hand edits write
        meta = json.dumps([r[1] for r in rows], separators=(",", ":")).encode()
    except TypeError:
        meta = json.dumps([_json_meta(r[1]) for r in rows], separators=(",", ":")).encode()
    return write_columns(
        path,
        scope,
        [meta],
        np.asarray([r[0] for r in rows], dtype="<i8"),
        np.asarray([r[2] for r in rows], dtype="<i4"),
        np.asarray([r[3] for r in rows], dtype="<i8"),
        np.asarray([r[4] for r in rows], dtype=np.uint8),
        configs,
        matrices,
        norms,
    )


def write_columns(
    path: Path,
    scope: tuple[str, str, str, str],
    meta: list[bytes],
    rowids: npt.NDArray[np.int64],
    config: npt.NDArray[np.int32],
    column: npt.NDArray[np.int64],
    parsed: npt.NDArray[np.uint8],
    configs: list[LaneConfig],
    matrices: Sequence[Any],
    norms: list[npt.NDArray[np.float32]],
) -> str | None:
    """:func:`write` with the rows given column by column: ``meta`` the JSON array of their
    small columns (UTF-8, in pieces written one after the other), then their rowids, config
    indexes, columns and parsed flags."""
    token = os.urandom(16).hex()
    header = json.dumps(
        {
            "lane": list(scope),
            "token": token,
            "rows": len(rowids),
            "configs": [
                [*c.to_json(), int(m.shape[1])] for c, m in zip(configs, matrices, strict=True)
            ],
            "meta": sum(map(len, meta)),
        }
    ).encode()
    try:
        path.parent.mkdir(exist_ok=True)
        with replacing(path, MAGIC, header) as handle:
            for piece in meta:
                handle.write(piece)
            np.ascontiguousarray(rowids, dtype="<i8").tofile(handle)
            np.ascontiguousarray(config, dtype="<i4").tofile(handle)
            np.ascontiguousarray(column, dtype="<i8").tofile(handle)
            np.ascontiguousarray(parsed, dtype=np.uint8).tofile(handle)
            for matrix, norm in zip(matrices, norms, strict=True):
                handle.write(b"\0" * (_aligned(handle.tell()) - handle.tell()))
                for row in range(matrix.shape[0]):  # one row at a time: no full copy
                    np.ascontiguousarray(matrix[row], dtype="<f4").tofile(handle)
                handle.write(b"\0" * (_aligned(handle.tell()) - handle.tell()))
                np.ascontiguousarray(norm, dtype="<f4").tofile(handle)
    except OSError:
        return None
    return token


# --------------------------------------------------------------------------- derived state

LANE_MAGIC = b"ZKRLANE2"


@dataclass
class LaneState:
    """What a search needs from a lane, as of one position of the change log
    (:mod:`zkr.store.changes`): the vectors file it indexes (``token``), the lane, the
    surviving rows' columns, the targets in target order (kinds and UTF-8 ids), the row →
    target pairs, raw Evidence targets' sources, and every stored row's target id (sorted).

    After a patch (:mod:`zkr.store.dense.patching`), ``extra`` names the overlay file
    (:func:`overlay_path`) whose columns follow the vectors file's (a column number past the
    vectors file's size is one of the overlay's), and ``stale`` lists the rowids whose small
    columns in the vectors file are no longer to be trusted (written since it was saved).
    ``pos_*`` are the surviving rows' rowids, order keys and captures (:class:`Derived`),
    valid while the file's ``PRAGMA schema_version`` is ``schema`` (a VACUUM, which may
    renumber rowids without firing a trigger, moves it)."""

    token: str
    generation: str
    seq: int
    config: LaneConfig | None
    columns: npt.NDArray[np.int64]
    kinds: npt.NDArray[np.uint8]
    ids: npt.NDArray[np.bytes_]
    pair_rows: npt.NDArray[np.int64]
    pair_starts: npt.NDArray[np.int64]
    source_of: dict[str, str]
    row_ids: npt.NDArray[np.bytes_]
    pos_rowids: npt.NDArray[np.int64]
    pos_keys: npt.NDArray[np.bytes_]
    pos_caps: npt.NDArray[np.bytes_]
    stale: npt.NDArray[np.int64]
    extra: str = ""
    schema: int = -1  # the file's PRAGMA schema_version the rowids are valid for

    def arrays(self) -> tuple[npt.NDArray[Any], ...]:
        """The state's arrays in the order the lane state file holds them (and the ``.fast``
        index's key counts them: :func:`zkr.store.laneread.state_key`)."""
        return (
            self.columns,
            self.kinds,
            self.ids,
            self.pair_rows,
            self.pair_starts,
            self.row_ids,
            self.pos_rowids,
            self.pos_keys,
            self.pos_caps,
            self.stale,
        )


def write_state(path: Path, scope: tuple[str, str, str, str], lane: LaneState) -> None:
    """Atomically replace the lane state file (failures ignored: it is a cache)."""
    arrays = lane.arrays()
    header = json.dumps(
        {
            "lane": list(scope),
            "token": lane.token,
            "extra": lane.extra,
            "schema": lane.schema,
            "generation": lane.generation,
            "seq": lane.seq,
            "config": None if (c := lane.config) is None else c.to_json(),
            "source_of": lane.source_of,
            "arrays": [[str(a.dtype), len(a)] for a in arrays],
        }
    ).encode()
    try:
        path.parent.mkdir(exist_ok=True)
        with replacing(path, LANE_MAGIC, header) as handle:
            for array in arrays:
                handle.write(np.ascontiguousarray(array).tobytes())
    except OSError:
        return


def read_state(path: Path, scope: tuple[str, str, str, str]) -> LaneState | None:
    """The lane state file, or ``None`` when missing, unreadable or for another lane."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if data[:8] != LANE_MAGIC:
            return None
        size = int.from_bytes(data[8:16], "little")
        header = json.loads(data[16 : 16 + size])
        if header.get("lane") != list(scope):
            return None
        offset = 16 + size
        arrays = []
        for dtype, count in header["arrays"]:
            kind = np.dtype(dtype)
            end = offset + kind.itemsize * int(count)
            if end > len(data):
                return None
            arrays.append(np.frombuffer(data, dtype=kind, count=int(count), offset=offset))
            offset = end
        config = header["config"]
        if len(arrays) != 10:
            return None
        columns, kinds, ids, pair_rows, pair_starts, row_ids = arrays[:6]
        pos_rowids, pos_keys, pos_caps, stale = arrays[6:]
        return LaneState(
            token=str(header["token"]),
            generation=str(header["generation"]),
            seq=int(header["seq"]),
            config=None if config is None else LaneConfig.from_json(config),
            columns=columns,
            kinds=kinds,
            ids=ids,
            pair_rows=pair_rows,
            pair_starts=pair_starts,
            source_of={str(k): str(v) for k, v in header["source_of"].items()},
            row_ids=row_ids,
            pos_rowids=pos_rowids,
            pos_keys=pos_keys,
            pos_caps=pos_caps,
            stale=stale,
            extra=str(header.get("extra", "")),
            schema=int(header.get("schema", -1)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, MemoryError):
        return None
