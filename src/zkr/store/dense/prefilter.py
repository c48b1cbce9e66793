"""The side files the numpy-free search (:mod:`zkr.store.lanescan`) reads, written by numpy:

* ``.rows``: the vector file's block of the lane's configuration transposed — one vector's
  float32 components together, which ``simsimd.cdist`` scans — named by the vector file's
  token (rewritten only with the vector file: a first call, a full refresh);
* ``.fast``: the index of one lane state — each column's surviving row, the targets each row
  stands for — named by that state (:func:`zkr.store.laneread.state_key`), a few MiB for
  100,000 rows, rewritten after every patch.

Both are made from the side files alone (the lane state file, the vector file and the overlay
it names), never from a cache's memory, so they describe exactly the files they are named by.
A lane whose distance is not cosine, or with a surviving row whose norm is not finite and
within :data:`~zkr.store.lanescan.NORM_SPREAD` of 1 (a zero vector, an overflowing one, a
cosine lane of unnormalised vectors), gets an index marked unusable: its searches stay with
numpy, which raises or scores them as §5.3 says.

Written by the numpy search of a process whose numpy-free search could not answer
(:data:`zkr.store.lanescan.MISSED`: one-shot processes only), for the lane state that search
leaves on disk. Like every side file they are caches: atomic replace, failures ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from zkr.model import Distance
from zkr.store import laneread, lanescan, sidepaths, vectorfile

CHUNK = 8192
"""Rows converted at a time (a 384-dimension chunk is 12 MiB of float32)."""


def write(path: Path, scope: tuple[str, str, str, str]) -> None:
    """Write what the numpy-free search lacks for the lane state on disk next to the vector
    file ``path`` (nothing when the side files do not belong together)."""
    state = vectorfile.read_state(sidepaths.state_path(path), scope)
    if state is None or state.config is None:
        return
    view = laneread.read_lane(str(sidepaths.state_path(path)), scope)
    if view is None or view.token != state.token or view.seq != state.seq:
        return  # replaced in between: the next search asks again
    index = laneread.read_index(str(sidepaths.prefilter_path(path)), scope, view)
    if index is None:
        write_index(path, scope, state)
        index = laneread.read_index(str(sidepaths.prefilter_path(path)), scope, view)
    if index is None or not index.usable:
        return
    rows = sidepaths.rows_path(path)
    if laneread.read_rows(str(rows), scope, state.token, state.config) is None:
        write_rows(path, scope, state)


def write_index(path: Path, scope: tuple[str, str, str, str], lane: vectorfile.LaneState) -> bool:
    """Write the ``.fast`` index of ``lane`` (the state file next to ``path``)."""
    config = lane.config
    snap = vectorfile.read(path, scope, rows=False)
    if config is None or snap is None or snap.token != lane.token or config not in snap.configs:
        return False
    norms = [np.asarray(snap.norms[snap.configs.index(config)])]
    if lane.extra:
        over = vectorfile.read(sidepaths.overlay_path(path), scope, rows=False)
        if over is None or over.token != lane.extra or over.configs != [config]:
            return False
        norms.append(np.asarray(over.norms[0]))
    arrays = lane.arrays()
    key = laneread.state_key(
        lane.token, lane.extra, lane.generation, lane.seq, lane.schema, [len(a) for a in arrays]
    )
    columns = lane.columns.astype(np.int64)
    every = np.concatenate(norms)
    if len(columns) and (columns.min() < 0 or columns.max() >= len(every)):
        return False
    used = every[columns].astype(np.float64)
    usable = bool(
        config.distance is Distance.COSINE
        and len(columns)
        and np.all(np.isfinite(used))
        and np.all(np.abs(used - 1) <= lanescan.NORM_SPREAD)
    )
    header: dict[str, object] = {"lane": list(scope), "state": key, "usable": usable}
    arrays_out: list[npt.NDArray[np.int64]] = []
    if usable:
        position_of = np.full(len(every), -1, dtype=np.int64)
        position_of[columns] = np.arange(len(columns), dtype=np.int64)
        target_of = np.repeat(
            np.arange(len(lane.pair_starts), dtype=np.int64),
            np.diff(np.append(lane.pair_starts, len(lane.pair_rows))),
        )
        order = np.argsort(lane.pair_rows, kind="stable")  # a row's targets in target order
        starts = np.searchsorted(
            lane.pair_rows[order], np.arange(len(columns) + 1, dtype=np.int64), side="left"
        ).astype(np.int64)
        targets = target_of[order]
        header |= {"rows": len(columns), "columns": len(every), "pairs": len(targets)}
        arrays_out = [position_of, starts, targets]
    return _replace(
        sidepaths.prefilter_path(path),
        laneread.INDEX_MAGIC,
        header,
        [a.astype("<i8").tobytes() for a in arrays_out],
    )


def write_rows(path: Path, scope: tuple[str, str, str, str], lane: vectorfile.LaneState) -> bool:
    """Write the ``.rows`` copy of the vector file ``path`` (lane configuration only), read a
    chunk of columns at a time with plain reads (no mapped page of it stays in this process's
    resident memory)."""
    config = lane.config
    snap = vectorfile.read(path, scope, rows=False)
    if config is None or snap is None or snap.token != lane.token or config not in snap.configs:
        return False
    matrix = snap.matrices[snap.configs.index(config)]
    header = {
        "lane": list(scope),
        "token": snap.token,
        "config": config.to_json(),
        "columns": int(matrix.shape[1]),
    }
    if not isinstance(matrix, np.memmap):
        return False
    try:
        with open(path, "rb") as handle:
            pieces = _rows(handle, int(matrix.offset), (matrix.shape[0], matrix.shape[1]))
            return _replace(sidepaths.rows_path(path), laneread.ROWS_MAGIC, header, pieces)
    except (OSError, ValueError):
        return False


def _rows(handle: BinaryIO, offset: int, shape: tuple[int, int]) -> Iterator[bytes]:
    """The columns of the (dimension × columns) float32 matrix at ``offset`` of ``handle``,
    one after the other, a chunk at a time."""
    dimension, columns = shape
    for lo in range(0, columns, CHUNK):
        width = min(CHUNK, columns - lo)
        chunk = np.empty((dimension, width), dtype="<f4")
        for i in range(dimension):
            handle.seek(offset + 4 * (i * columns + lo))
            data = handle.read(4 * width)
            if len(data) != 4 * width:
                raise ValueError("short read")
            chunk[i] = np.frombuffer(data, dtype="<f4")
        yield np.ascontiguousarray(chunk.T).tobytes()


def _replace(
    target: Path, magic: bytes, header: dict[str, object], pieces: Iterable[bytes]
) -> bool:
    try:
        with sidepaths.replacing(target, magic, json.dumps(header).encode()) as handle:
            _pad(handle)
            for piece in pieces:
                handle.write(piece)
    except OSError:
        return False
    return True


def _pad(handle: BinaryIO) -> None:
    tell = handle.tell()
    handle.write(b"\0" * (-(-tell // 64) * 64 - tell))
