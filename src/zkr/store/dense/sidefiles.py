"""The dense lane's side files (:mod:`zkr.store.vectorfile`) seen from its cache: the vector
file adopted as the cache's blocks (memory-mapped), written from them, and the lane state file
(the derived state with its change-log position) read and written."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from zkr.store import changes, vectorfile
from zkr.store.dense.blocks import F32, I64, Block, Entry, Meta
from zkr.store.dense.mapping import Derived
from zkr.store.dense.registry import LaneCache
from zkr.store.vectors import LaneConfig


def load_state(cache: LaneCache, mark: changes.Mark) -> bool:
    """Adopt the lane state file and the vector file it indexes, without reading their rows;
    ``False`` when they are missing, of another log generation or do not belong together."""
    assert cache.file is not None
    lane = vectorfile.read_state(vectorfile.state_path(cache.file), cache.scope)
    if (
        lane is None
        or not changes.same_log(lane.generation, mark.generation)
        or lane.seq > mark.seq
    ):
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
        extra = Block(
            over.configs[0].dimension,
            over.matrices[0].view(np.ndarray),
            over.norms[0].view(np.ndarray),
            over.matrices[0].shape[1],
        )
    adopt_blocks(cache, snap)
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


def save_state(cache: LaneCache) -> None:
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


def adopt_blocks(cache: LaneCache, snap: vectorfile.Snapshot) -> None:
    """Use the vector file's matrices (memory-mapped) as the cache's blocks."""
    cache.blocks = {}
    for config, matrix, norms in zip(snap.configs, snap.matrices, snap.norms, strict=True):
        # plain views of the mapped file (a memmap subclass costs a Python call per slice)
        cache.blocks[config] = Block(
            config.dimension, matrix.view(np.ndarray), norms.view(np.ndarray), matrix.shape[1]
        )


def load_file(cache: LaneCache, path: Path) -> None:
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
    adopt_blocks(cache, snap)
    cache.token = snap.token
    cache.entries = {}
    for rowid, meta, index, column, parsed in zip(
        snap.rowids, snap.metas, snap.config, snap.column, snap.parsed, strict=True
    ):
        if meta is None or rowid in stale:
            continue
        if index >= 0:
            cache.entries[rowid] = Entry(meta, True, parsed, snap.configs[index], column)
        else:
            cache.entries[rowid] = Entry(meta, True, parsed)


def save_file(cache: LaneCache, path: Path) -> None:
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
    matrices: list[_Picked | F32] = []
    norms = []
    picks = []
    for config, cols in zip(configs, columns, strict=True):
        block = cache.blocks[config]
        picked = np.asarray(cols, dtype=np.int64)
        picks.append(picked)
        if len(picked) == block.size and bool((picked == np.arange(block.size)).all()):
            # every column in place (a first refresh): written straight from the block
            matrices.append(block.matrix[:, : block.size])
            norms.append(block.norms[: block.size])
            continue
        matrices.append(_Picked(block.matrix, picked))
        norms.append(block.norms[picked])
    # the overlay goes first: a reader then finds either the old file with the state naming
    # its stale rows, or the new file, whose rows are all current
    dropped = vectorfile.drop_overlay(path)
    token = vectorfile.write(path, cache.scope, rows, configs, matrices, norms) if dropped else None
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
    adopt_blocks(cache, snap)
    cache.token = token


class _Picked:
    """Columns ``picked`` of ``matrix``, handed to the file writer one row at a time."""

    def __init__(self, matrix: F32, picked: I64) -> None:
        self.matrix, self.picked = matrix, picked
        self.shape = (matrix.shape[0], len(picked))

    def __getitem__(self, row: int) -> F32:
        out: F32 = self.matrix[row, self.picked]
        return out
