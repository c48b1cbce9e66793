"""The dense lane: exact float32 scoring of stored vectors (spec/retrieval.md §5).

Only imported when a search carries a ``query_embedding`` (it imports numpy; lexical searches
never load it).

**Exactness.** Scores are IEEE float32 with sequential left-to-right accumulation and no fused
multiply-add, as the reference computes them. They are vectorised over rows instead of over
components: the lane's vectors are kept as a (dimension × rows) float32 matrix, and the
accumulator of every row advances one component at a time (``acc = acc + M[i] * q[i]``), which
is exactly the per-row sequential sum, computed for all rows at once. (Starting the sum at the
first product rather than at the reference's −0.0 is the same: −0.0 + x == x bit for bit.)

**Cache.** Decoding JSON vectors is the expensive part, so each connection keeps, per
(scope, model, version), the decoded vectors of every well-formed row and the derived state
of the last refresh (current rows, the lane, the row → target mapping of §5.4). The cache is
valid while the connection's ``(PRAGMA data_version, total_changes)`` pair is unchanged: that
pair moves on every commit by any connection, this one included, so every write path (embed,
repair, delete, correct, promote, archive, apply, another process, a hand edit through SQL)
forces a refresh before the next dense search. A refresh re-reads the small columns of every
row and re-derives currentness and mapping with a few set-based queries; it re-decodes only
vectors whose row changed. A row counts as unchanged when its rowid and every column except
``vector`` are unchanged and its ``created_at`` second had already passed when it was last
read: zkr's and the reference's ``embed`` both restamp ``created_at = unixepoch()`` on every
write, so a rewritten vector always shows up as a changed row. (A hand-written SQL ``UPDATE``
of ``vector`` alone is not seen by a warm cache; see :func:`clear_cache`.) Lanes of at least
2,000 rows also keep their decoded vectors in a file next to the database
(:mod:`zkr.store.vectorfile`), trusted row by row under the same rule, so that a fresh process
— every CLI call — does not re-parse them.

**Ranking.** Each surviving row's score becomes a uint32 key in the float total order; a target
keeps its best row's key (``maximum.reduceat`` over rows grouped by target); targets are
numbered in target order at refresh, so one sort of ``(inverted key << 32) | number`` yields
§5.5's order, ties included.

**Ranks for fusion.** Fusion only ever keeps ``limit`` items, so :func:`fusion_ranks` returns
the first ``10 * limit + 100`` dense ranks plus the exact ranks of the lexical targets; no
excluded target can reach the pack (proof in :func:`fusion_ranks`), so the pack is identical to
fusing the complete list.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from zkr.codec import sha256_tagged
from zkr.errors import InvalidInput
from zkr.model import TARGET_RANK, Distance, QueryEmbedding, Target, TargetKind
from zkr.store import vectorfile
from zkr.store.eligibility import (
    LIVE_CLAIM,
    LIVE_EVIDENCE,
    LIVE_LINKS_SQL,
    LIVE_SOURCE,
    stands_for,
)
from zkr.store.embeddings import (
    LaneConfig,
    Vector,
    decode_config,
    decode_vector,
    validate_query,
)

F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

MAX_CACHED_LANES = 8
"""Lane caches kept per process (least recently used first out)."""


# --------------------------------------------------------------------------- exact scoring


PARALLEL_COLUMNS = 32_768
"""Lanes with at least this many rows are scored by several threads, each taking a range of
columns (numpy releases the GIL in its loops; each column's sum is unchanged)."""
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1))
    return _POOL


def _by_columns(kernel: Callable[[F32, F32], F32], matrix: F32, query: F32) -> F32:
    columns = matrix.shape[1]
    workers = min(4, os.cpu_count() or 1)
    if columns < PARALLEL_COLUMNS or workers < 2:
        return kernel(matrix, query)
    step = -(-columns // workers)
    parts = _pool().map(
        lambda lo: kernel(matrix[:, lo : lo + step], query), range(0, columns, step)
    )
    return np.concatenate(list(parts))


def _dot_kernel(matrix: F32, query: F32) -> F32:
    acc: F32 = matrix[0] * query[0]
    tmp = np.empty_like(acc)
    for i in range(1, matrix.shape[0]):
        np.multiply(matrix[i], query[i], out=tmp)
        np.add(acc, tmp, out=acc)
    return acc


def _square_distance_kernel(matrix: F32, query: F32) -> F32:
    acc: F32 = matrix[0] - query[0]
    np.multiply(acc, acc, out=acc)
    tmp = np.empty_like(acc)
    for i in range(1, matrix.shape[0]):
        np.subtract(matrix[i], query[i], out=tmp)
        np.multiply(tmp, tmp, out=tmp)
        np.add(acc, tmp, out=acc)
    return acc


def sequential_dot(matrix: F32, query: F32) -> F32:
    """Per column j: ((m[0,j]*q[0] + m[1,j]*q[1]) + …) in float32, left to right, no FMA."""
    return _by_columns(_dot_kernel, matrix, query)


def sequential_square_distance(matrix: F32, query: F32) -> F32:
    """Per column j: sequential float32 sum of (q[i] - m[i,j])² (the sign of a float
    difference is symmetric, so (m - q)² is the same value)."""
    return _by_columns(_square_distance_kernel, matrix, query)


def sequential_norms(matrix: F32) -> F32:
    """Per column: sqrt of the sequential float32 sum of squares."""
    norms: F32 = np.sqrt(sequential_dot_self(matrix))
    return norms


def sequential_dot_self(matrix: F32) -> F32:
    acc: F32 = matrix[0] * matrix[0]
    tmp = np.empty_like(acc)
    for i in range(1, matrix.shape[0]):
        np.multiply(matrix[i], matrix[i], out=tmp)
        np.add(acc, tmp, out=acc)
    return acc


def query_norm(query: F32) -> np.float32:
    total = np.add.accumulate(query * query, dtype=np.float32)[-1]
    return np.float32(np.sqrt(total))


def order_keys(scores: F32) -> U32:
    """uint32 keys in the float total order (−0.0 below +0.0), higher score = higher key."""
    bits = scores.view(np.uint32)
    negative = (bits >> np.uint32(31)).astype(bool)
    return np.where(negative, ~bits, bits | np.uint32(0x8000_0000)).astype(np.uint32)


ZERO_MAGNITUDE = "cosine embeddings must have non-zero magnitude"
NOT_FINITE = "embedding similarity is not finite"


def score_columns(matrix: F32, norms: F32, query: F32, distance: Distance, columns: I64) -> F32:
    """Scores of ``columns`` of ``matrix`` (rows in §5.2 order) for ``query``.

    Raises the error of the first row, in ``columns`` order, that fails (§5.3): zero magnitude
    (cosine, either side), then a non-finite score.
    """
    with np.errstate(all="ignore"):
        if distance is Distance.DOT:
            scores = sequential_dot(matrix, query)[columns]
            zero = None
        elif distance is Distance.COSINE:
            q_norm = query_norm(query)
            if q_norm == 0:
                raise InvalidInput(ZERO_MAGNITUDE)
            row_norms = norms[columns]
            zero = row_norms == 0
            scores = sequential_dot(matrix, query)[columns] / (q_norm * row_norms)
        else:
            scores = -np.sqrt(sequential_square_distance(matrix, query))[columns]
            zero = None
    bad = ~np.isfinite(scores)
    if zero is not None:
        bad |= zero
    if bad.any():
        first = int(np.argmax(bad))
        raise InvalidInput(ZERO_MAGNITUDE if zero is not None and zero[first] else NOT_FINITE)
    return scores.astype(np.float32, copy=False)


# --------------------------------------------------------------------------- the cache


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

    def append(self, vectors: list[Vector]) -> int:
        """Append vectors as new columns; returns the first new column."""
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
            rows = np.frombuffer(b"".join(v.tobytes() for v in part), dtype=np.float32)
            cols = np.ascontiguousarray(rows.reshape(len(part), self.dimension).T)
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


@dataclass
class _Derived:
    """What a search needs, valid for one connection signature."""

    lane: LaneConfig | None = None
    columns: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    targets: list[Target] = field(default_factory=list)
    target_index: dict[Target, int] = field(default_factory=dict)
    pair_rows: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pair_starts: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))


@dataclass
class _LaneCache:
    conn: sqlite3.Connection  # held so that id(conn) cannot be reused while cached
    scope: tuple[str, str, str, str]
    signature: tuple[int, int] | None = None
    entries: dict[int, _Entry] = field(default_factory=dict)
    blocks: dict[LaneConfig, _Block] = field(default_factory=dict)
    derived: _Derived = field(default_factory=_Derived)
    file: Path | None = None  # the lane's vector file (zkr.store.vectorfile)
    file_checked: bool = False
    unsaved: int = 0  # vectors decoded since the file was last written


_CACHES: OrderedDict[tuple[int, str, str, str, str], _LaneCache] = OrderedDict()
_CACHES_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every cached lane (needed only after a hand-written SQL ``UPDATE`` that changes
    ``embeddings.vector`` and nothing else in a row)."""
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


def _state(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, model: str, version: str
) -> tuple[_LaneCache, _Derived]:
    cache = _lane_cache(conn, (tenant_id, person_id, model, version))
    sig = signature(conn)
    if cache.signature != sig:
        cache.signature = None
        _refresh(conn, cache)
        cache.signature = sig
    return cache, cache.derived


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
_ROWS_SQL = (
    (
        "claim",
        f"""
SELECT {_ROW_COLUMNS}, c.recorded_from, c.subject || ' ' || c.predicate || ' ' || c.value,
       1
FROM embeddings em
LEFT JOIN claims c ON c.id = em.target_id AND c.tenant_id = :t AND c.person_id = :p
     AND {LIVE_CLAIM}
WHERE {_LANE} AND em.target_kind = 'claim'
ORDER BY em.target_id""",
    ),
    (
        "evidence",
        f"""
SELECT {_ROW_COLUMNS}, e.source_revision, e.quote,
       EXISTS (SELECT 1 FROM sources s WHERE s.id = e.source_id AND s.tenant_id = :t
               AND s.person_id = :p AND {LIVE_SOURCE})
FROM embeddings em
LEFT JOIN evidence e ON e.id = em.target_id AND e.tenant_id = :t AND e.person_id = :p
     AND {LIVE_EVIDENCE}
WHERE {_LANE} AND em.target_kind = 'evidence'
ORDER BY em.target_id""",
    ),
    (
        "source",
        f"""
SELECT {_ROW_COLUMNS}, s.revision, s.content,
       EXISTS (SELECT 1 FROM evidence e WHERE e.source_id = s.id AND e.tenant_id = :t
               AND e.person_id = :p AND {LIVE_EVIDENCE})
FROM embeddings em
LEFT JOIN sources s ON s.id = em.target_id AND s.tenant_id = :t AND s.person_id = :p
     AND {LIVE_SOURCE}
WHERE {_LANE} AND em.target_kind = 'source'
ORDER BY em.target_id""",
    ),
)


_KINDS = {kind.value: kind for kind in TargetKind}


def _refresh(conn: sqlite3.Connection, cache: _LaneCache) -> None:
    """Re-read the lane (small columns only), decode the vectors of new or changed rows that
    could be current, and re-derive currentness, the lane and the §5.4 mapping."""
    t, p, m, v = cache.scope
    params = {"t": t, "p": p, "m": m, "v": v}
    now = conn.execute("SELECT unixepoch()").fetchone()[0]
    if not cache.file_checked:
        cache.file_checked = True
        cache.file = vectorfile.lane_path(conn, cache.scope)
        if cache.file is not None:
            _load_file(cache, cache.file)
    old = cache.entries
    entries: dict[int, _Entry] = {}
    # rows whose target is live with the stored revision and hash, in §5.2 order, with the
    # §5.4 data: (rowid, kind, mappable)
    candidates: list[tuple[int, str, object]] = []
    for kind, sql in _ROWS_SQL:
        for row in conn.execute(sql, params):
            rowid, meta = row[0], row[1:9]
            entry = old.get(rowid)
            if entry is None or not entry.settled or entry.meta != meta:
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
                candidates.append((rowid, kind, row[11]))
    cache.entries = entries
    cache.unsaved += _decode_pending(conn, cache, [rowid for rowid, *_ in candidates])
    _compact(cache)
    links = conn.execute(LIVE_LINKS_SQL, params).fetchall()
    cache.derived = _derive(cache, candidates, links)
    if (
        cache.file is not None
        and len(entries) >= vectorfile.MIN_ROWS
        and cache.unsaved >= max(vectorfile.SAVE_AFTER, len(entries) // 50)
    ):
        _save_file(cache, cache.file)
        cache.unsaved = 0


def _load_file(cache: _LaneCache, path: Path) -> None:
    """Seed the cache with the vectors another process decoded (zkr.store.vectorfile)."""
    snap = vectorfile.read(path, cache.scope)
    if snap is None:
        return
    for config, matrix, norms in zip(snap.configs, snap.matrices, snap.norms, strict=True):
        # plain views of the mapped file (a memmap subclass costs a Python call per slice)
        cache.blocks[config] = _Block(
            config.dimension, matrix.view(np.ndarray), norms.view(np.ndarray), matrix.shape[1]
        )
    for rowid, meta, index, column, parsed in zip(
        snap.rowids, snap.metas, snap.config, snap.column, snap.parsed, strict=True
    ):
        if meta is None:
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
    matrices = []
    norms = []
    for config, cols in zip(configs, columns, strict=True):
        block = cache.blocks[config]
        picked = np.asarray(cols, dtype=np.int64)
        matrices.append(block.matrix[:, picked])
        norms.append(block.norms[picked])
    vectorfile.write(path, cache.scope, rows, configs, matrices, norms)


def _decode_pending(conn: sqlite3.Connection, cache: _LaneCache, rowids: list[int]) -> int:
    """Decode the vectors of rows not decoded yet (or changed since), appending them to their
    configuration's block batch by batch; returns how many rows were read."""
    entries = cache.entries
    todo = [r for r in rowids if not entries[r].parsed]
    for offset in range(0, len(todo), 512):
        part = todo[offset : offset + 512]
        marks = ",".join("?" * len(part))
        pending: dict[LaneConfig, tuple[list[int], list[Vector]]] = {}
        for rowid, text in conn.execute(
            f"SELECT rowid, vector FROM embeddings WHERE rowid IN ({marks})", part
        ):
            entry = entries[rowid]
            entry.parsed = True
            meta = entry.meta
            config = None if meta is None else decode_config(meta[2], meta[3], meta[4])
            if config is None:
                continue
            vec = decode_vector(text, config.dimension, config.normalization)
            if vec is None:
                continue
            ids, vectors = pending.setdefault(config, ([], []))
            ids.append(rowid)
            vectors.append(vec)
        for config, (ids, vectors) in pending.items():
            block = cache.blocks.get(config)
            if block is None:
                block = cache.blocks[config] = _Block.empty(
                    config.dimension, len(todo) + len(todo) // 8
                )
            start = block.append(vectors)
            for position, rowid in enumerate(ids):
                entries[rowid].config = config
                entries[rowid].column = start + position
    return len(todo)


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
            columns = np.fromiter((e.column for e in live), dtype=np.int64, count=len(live))
            cache.blocks[config] = block.compacted(columns)
            for position, entry in enumerate(live):
                entry.column = position


def _derive(
    cache: _LaneCache,
    candidates: list[tuple[int, str, object]],
    links: list[tuple[str, str, str, int]],
) -> _Derived:
    """The lane (§9.3), the surviving rows in §5.2 order and their §5.4 targets."""
    entries = cache.entries
    by_evidence: dict[str, set[str]] = {}
    by_source: dict[str, set[str]] = {}
    citable: set[str] = set()  # live claims with live supporting evidence of a live source
    for source_id, evidence_id, claim_id, source_live in links:
        by_evidence.setdefault(evidence_id, set()).add(claim_id)
        by_source.setdefault(source_id, set()).add(claim_id)
        if source_live:
            citable.add(claim_id)
    current = [c for c in candidates if entries[c[0]].config is not None]
    if not current:
        return _Derived()
    lane = min(
        (config for c in current if (config := entries[c[0]].config) is not None),
        key=LaneConfig.order_key,
    )
    columns: list[int] = []
    targets: list[Target] = []
    index: dict[Target, int] = {}
    pair_rows: list[int] = []
    pair_targets: list[int] = []
    for rowid, kind, mappable in current:
        entry = entries[rowid]
        if entry.config != lane:
            continue
        position = len(columns)
        columns.append(entry.column)
        target_id = "" if entry.meta is None else str(entry.meta[1])
        if kind == "claim":
            mappable = target_id in citable
        supported = by_source if kind == "source" else by_evidence
        # §5.4 (eligibility.stands_for): a claim row maps only when the claim can be cited
        # (surprise #19 fixed: the reference returns it anyway and the search then fails
        # with `record not found`); source/evidence rows fall back to raw (hide_linked off).
        mapped = (
            stands_for(_KINDS[kind], target_id, supported.get(target_id, ()), False, False)
            if mappable
            else []
        )
        for target in mapped:
            number = index.get(target)
            if number is None:
                number = index[target] = len(targets)
                targets.append(target)
            pair_rows.append(position)
            pair_targets.append(number)
    # Number targets in target order (§1), so that ties in score sort by number.
    keys = [(TARGET_RANK[t.kind], t.id) for t in targets]
    ordered = sorted(range(len(targets)), key=keys.__getitem__)
    renumber = np.empty(len(targets), dtype=np.int64)
    renumber[np.asarray(ordered, dtype=np.int64)] = np.arange(len(targets), dtype=np.int64)
    rows_arr = np.asarray(pair_rows, dtype=np.int64)
    targets_arr = renumber[np.asarray(pair_targets, dtype=np.int64)]
    by_target = np.argsort(targets_arr, kind="stable")
    starts = np.flatnonzero(np.diff(targets_arr[by_target], prepend=-1)).astype(np.int64)
    targets = [targets[i] for i in ordered]
    return _Derived(
        lane=lane,
        columns=np.asarray(columns, dtype=np.int64),
        targets=targets,
        target_index={target: number for number, target in enumerate(targets)},
        pair_rows=rows_arr[by_target],
        pair_starts=starts,
    )


# --------------------------------------------------------------------------- ranking


@dataclass
class _Ranking:
    """Dense targets best first. ``composite`` holds, ascending, one uint64 per target:
    (inverted score key << 32) | target number; target numbers follow target order, so equal
    scores are already in §5.5 order."""

    derived: _Derived
    composite: U64
    best: U32  # per target number: its best row's order key

    def rank_of(self, number: int) -> int:
        value = _composite(self.best[number : number + 1], np.asarray([number], dtype=np.int64))
        return int(np.searchsorted(self.composite, value[0]))

    def numbers(self, count: int) -> list[int]:
        numbers: list[int] = (
            (self.composite[:count] & np.uint64(0xFFFF_FFFF)).astype(np.int64).tolist()
        )
        return numbers


def _ranked(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, query: QueryEmbedding
) -> _Ranking | None:
    """Validate (§5.1), score (§5.2-5.3) and rank (§5.5); ``None`` when no row survives."""
    vec = validate_query(query)
    cache, derived = _state(conn, tenant_id, person_id, query.model, query.version)
    lane = derived.lane
    if lane is None or len(derived.columns) == 0:
        return None
    if len(vec) != lane.dimension:
        raise InvalidInput(
            f"query embedding dimension {len(vec)} does not match stored dimension {lane.dimension}"
        )
    block = cache.blocks[lane]
    scores = score_columns(
        block.matrix[:, : block.size],
        block.norms[: block.size],
        np.frombuffer(vec, dtype=np.float32),
        lane.distance,
        derived.columns,
    )
    if not derived.targets:
        return _Ranking(derived, np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint32))
    keys = order_keys(scores)
    best = np.maximum.reduceat(keys[derived.pair_rows], derived.pair_starts)
    numbers = np.arange(len(best), dtype=np.int64)
    return _Ranking(derived, np.sort(_composite(best, numbers)), best)


def _composite(best: U32, numbers: I64) -> U64:
    inverted = (np.uint32(0xFFFF_FFFF) - best).astype(np.uint64)
    composite: U64 = (inverted << np.uint64(32)) | numbers.astype(np.uint64)
    return composite


def ranking(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, query: QueryEmbedding
) -> list[Target]:
    """Every dense target, best first (§5.5): score descending, −0.0 below +0.0, ties by
    target order."""
    ranked = _ranked(conn, tenant_id, person_id, query)
    if ranked is None:
        return []
    targets = ranked.derived.targets
    return [targets[i] for i in ranked.numbers(len(ranked.composite))]


def fusion_window(limit: int, lexical: int | None = None) -> int:
    """How many leading dense ranks fusion can need for a pack of ``limit`` items next to a
    lexical list of ``lexical`` targets (at most ``4 * limit`` in search)."""
    lexical = 4 * limit if lexical is None else lexical
    return max(10 * limit + 100, 2 * (lexical + limit) + 100)


def fusion_ranks(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: QueryEmbedding,
    lexical: Sequence[Target],
    limit: int,
) -> list[tuple[int, Target]]:
    """``(rank, target)`` for the first ``K`` dense ranks (:func:`fusion_window`: ``10·L + 100``
    when the lexical list holds ``4L`` targets), plus the exact dense rank of every lexical
    target ranked lower.

    Why fusing these gives the same pack as fusing the whole list (``L = limit``, ``X`` lexical
    targets, ``f(r) = 1_000_000 // (61 + r)``): an omitted target is dense-only with rank
    ``r ≥ K``, so its fused score is ``f(r) ≤ f(K)``. At least ``L`` of the first ``X + L``
    dense ranks are dense-only, each fused ``≥ f(X + L − 1)``; with ``K ≥ 2(X + L) + 60``,
    ``f(X + L − 1) − f(K) ≥ 4``, and the largest fused score ``M`` is at most 2·16393, so
    ``4 · 10000 / M > 1``: those ``L`` targets have strictly more basis points than any
    omitted one, which therefore never makes the pack; and ``M`` itself (≥ 16393 > f(K)) is
    never omitted, so every kept target's basis points are unchanged.
    """
    ranked = _ranked(conn, tenant_id, person_id, query)
    if ranked is None:
        return []
    targets = ranked.derived.targets
    window = min(fusion_window(limit, len(lexical)), len(ranked.composite))
    out = [(rank, targets[number]) for rank, number in enumerate(ranked.numbers(window))]
    if len(ranked.composite) > window:
        index = ranked.derived.target_index
        for target in lexical:
            number = index.get(target)
            if number is None:
                continue
            rank = ranked.rank_of(number)
            if rank >= window:
                out.append((rank, target))
    return out


def scored(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: QueryEmbedding,
    count: int,
) -> list[tuple[Target, float]]:
    """The first ``count`` dense targets (§5.5 order) with their scores (float32 values as
    Python floats: cosine, dot or negated euclidean distance, higher is better)."""
    ranked = _ranked(conn, tenant_id, person_id, query)
    if ranked is None:
        return []
    targets = ranked.derived.targets
    numbers = ranked.numbers(min(count, len(ranked.composite)))
    keys = ranked.best[np.asarray(numbers, dtype=np.int64)]
    # order_keys inverted: a set top bit marks a non-negative float, else all bits were flipped
    bits = np.where(keys & np.uint32(0x8000_0000), keys & np.uint32(0x7FFF_FFFF), ~keys)
    scores = bits.astype(np.uint32).view(np.float32).tolist()
    return [(targets[n], float(s)) for n, s in zip(numbers, scores, strict=True)]
