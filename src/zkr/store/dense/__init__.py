"""The dense lane: exact float32 scoring of stored vectors (spec/retrieval.md §5).

Only imported when a search carries a ``query_embedding`` (it imports numpy; lexical searches
never load it). Split by responsibility: :mod:`.kernels` (exact float32 arithmetic),
:mod:`.cache` (decoded vectors and derived state per lane, the side file), :mod:`.decode`
(stored JSON vectors decoded in bulk), :mod:`.mapping` (which rows survive and what each stands
for, by :mod:`zkr.store.eligibility`'s rules); this module ranks and answers fusion.

**Validation first.** The query vector is checked (§5.1) and its dimension compared with the
lane's before any bulk vector data is read: the lane comes from the warm cache, or from a few
index seeks (:func:`zkr.store.embeddings.lane`) when the cache must be refreshed.

**Ranking.** Each surviving row's score becomes a uint32 key in the float total order; a target
keeps its best row's key (``maximum.reduceat`` over rows grouped by target); targets are
numbered in target order at refresh, so one sort of ``(inverted key << 32) | number`` yields
§5.5's order, ties included.

**Fusion** (:mod:`zkr.store.fusion`) takes the first :data:`zkr.store.fusion.POOL` dense
targets with their scores (:func:`scored`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from zkr.errors import InvalidInput
from zkr.model import QueryEmbedding, Target, TargetKind
from zkr.store.dense.cache import clear_cache, peek_lane, state
from zkr.store.dense.kernels import order_keys, score_segments
from zkr.store.dense.mapping import Derived
from zkr.store.eligibility import one_per_capture
from zkr.store.vectors import validate_query

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

__all__ = ["clear_cache", "ranking", "scored"]


# --------------------------------------------------------------------------- ranking


@dataclass
class _Ranking:
    """Dense targets best first. ``composite`` holds, ascending, one uint64 per target:
    (inverted score key << 32) | target number; target numbers follow target order, so equal
    scores are already in §5.5 order."""

    derived: Derived
    composite: U64
    best: U32  # per target number: its best row's order key

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
    scope = (tenant_id, person_id, query.model, query.version)
    # the whole request is checked before any vector is read (issue 18, fault 6)
    expected = peek_lane(conn, scope)
    if expected is None:
        return None  # no current row: an empty list, whatever the dimension (§5.2)
    _check_dimension(len(vec), expected.dimension)
    cache, derived = state(conn, *scope)
    lane = derived.lane
    if lane is None or len(derived.columns) == 0:
        return None
    _check_dimension(len(vec), lane.dimension)
    scores = score_segments(
        cache.segments(lane), np.frombuffer(vec, dtype=np.float32), lane.distance, derived.columns
    )
    if not len(derived):
        return _Ranking(derived, np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint32))
    keys = order_keys(scores)
    best = np.maximum.reduceat(keys[derived.pair_rows], derived.pair_starts)
    numbers = np.arange(len(best), dtype=np.int64)
    return _Ranking(derived, np.sort(_composite(best, numbers)), best)


def _check_dimension(query: int, stored: int) -> None:
    if query != stored:
        raise InvalidInput(
            f"query embedding dimension {query} does not match stored dimension {stored}"
        )


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
    derived = ranked.derived
    return [derived.target(i) for i in ranked.numbers(len(ranked.composite))]


def scored(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: QueryEmbedding,
    count: int,
    lexical: Sequence[Target] = (),
) -> list[tuple[Target, float]]:
    """The first ``count`` dense targets (§5.5 order) with their scores (float32 values as
    Python floats: cosine, dot or negated euclidean distance, higher is better).

    A raw Evidence target whose Source is among ``lexical`` (the other lane's targets) is
    reported as that Source, so that the capture takes one place in the pack (§14 #12 fixed,
    :func:`zkr.store.eligibility.one_per_capture`).
    """
    ranked = _ranked(conn, tenant_id, person_id, query)
    if ranked is None:
        return []
    derived = ranked.derived
    merged = one_per_capture(
        (Target(TargetKind.EVIDENCE, e) for e in derived.source_of), derived.source_of, lexical
    )
    numbers = ranked.numbers(min(count, len(ranked.composite)))
    keys = ranked.best[np.asarray(numbers, dtype=np.int64)]
    # order_keys inverted: a set top bit marks a non-negative float, else all bits were flipped
    bits = np.where(keys & np.uint32(0x8000_0000), keys & np.uint32(0x7FFF_FFFF), ~keys)
    scores = bits.astype(np.uint32).view(np.float32).tolist()
    out = []
    for number, score in zip(numbers, scores, strict=True):
        target = derived.target(number)
        out.append((merged.get(target, target), float(score)))
    return out
