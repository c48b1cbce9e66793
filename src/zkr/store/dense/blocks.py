"""Decoded vectors of the dense lane's cache (spec/retrieval.md §9.2, §11.3): per
configuration a (dimension × columns) float32 block with its norms, the per-row bookkeeping
(:class:`Entry`: the row's small columns as last read, whether and where its vector was
decoded), and the reading of stored vectors into blocks (:func:`decode_rows`: zkr's float32
copies where the change log allows, else the JSON text decoded in bulk).

Every vector a cache takes from the database goes through :func:`decode_rows` (the refresh and
the patch alike), read as :func:`lean_reads` says.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from zkr.store import changes
from zkr.store.dense.decode import decode_texts
from zkr.store.dense.kernels import sequential_norms
from zkr.store.dense.rows import fetch_all
from zkr.store.vectors import LaneConfig, decode_config

config_of = lru_cache(maxsize=256)(decode_config)
"""A stored row's configuration from its (dimension, normalization, distance) cells (a lane
has a handful of distinct triples; decoding each once per process)."""

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


@dataclass
class Block:
    """Decoded vectors of one configuration: column j of ``matrix`` is one stored row."""

    dimension: int
    matrix: F32
    norms: F32
    size: int = 0

    @classmethod
    def empty(cls, dimension: int, capacity: int) -> Block:
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
            lo = start + offset
            cols = self.matrix[:, lo : lo + len(part)]
            cols[...] = part.T  # transposed in place: no intermediate copy
            with np.errstate(all="ignore"):  # huge components: an infinite norm is legitimate
                self.norms[lo : lo + len(part)] = sequential_norms(cols)
        self.size = start + count
        return start

    def compacted(self, columns: I64) -> Block:
        """A new block holding only ``columns``, in that order."""
        block = Block.empty(self.dimension, len(columns))
        block.matrix[:, : len(columns)] = self.matrix[:, columns]
        block.norms[: len(columns)] = self.norms[columns]
        block.size = len(columns)
        return block


Meta = tuple[object, ...]
"""(target_kind, target_id, dimension, normalization, distance, target_revision, input_hash,
created_at) of a stored row: every column but ``vector``."""


@dataclass(slots=True)
class Entry:
    """One stored row as last read."""

    meta: Meta | None  # None: read from a vector file whose cells were not JSON values
    settled: bool  # created_at was already in the past when read: a rewrite would restamp it
    parsed: bool = False  # the vector was decoded (config/column are then final)
    config: LaneConfig | None = None  # None when parsed and not well-formed
    column: int = -1
    text_key: int | None = None  # hash((target revision, text)) of ``hashed``
    hashed: bool = False  # sha256_tagged(that text) equals the row's input_hash (meta[6])
    version: str | None = None  # PostgreSQL: the row's tuple version when read (see state)


@contextmanager
def lean_reads(conn: sqlite3.Connection) -> Iterator[None]:
    """Read through neither SQLite's memory map nor a large page cache: a refresh reads each
    page of the lane once, and through those they would stay resident (up to 256 + 64 MiB
    next to the lane's own float32 copy)."""
    saved = [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in _READ_PRAGMAS]
    conn.execute("PRAGMA mmap_size = 0")
    conn.execute(f"PRAGMA cache_size = -{READ_CACHE_KIB}")
    try:
        yield
    finally:
        for name, value in zip(_READ_PRAGMAS, saved, strict=True):
            conn.execute(f"PRAGMA {name} = {int(value)}")


_READ_PRAGMAS = ("mmap_size", "cache_size")
READ_CACHE_KIB = 16384
"""SQLite's page cache while a refresh reads (the lane's index seeks into ``sources`` and
``evidence`` revisit their interior pages; 2 MiB made the refresh's main query ~1.7× slower)."""


def decode_rows(
    conn: sqlite3.Connection,
    scope: tuple[str, str, str, str],
    entries: dict[int, Entry],
    blocks: dict[LaneConfig, Block],
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
            config = None if meta is None else config_of(meta[2], meta[3], meta[4])
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
            for rowid, text in fetch_all(
                conn, f"SELECT rowid, vector FROM embeddings WHERE rowid IN ({marks})", read
            ):
                meta = entries[rowid].meta
                assert meta is not None
                config = config_of(meta[2], meta[3], meta[4])
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
