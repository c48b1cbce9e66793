"""The dense lane: exact float32 scoring of stored vectors (spec/retrieval.md §5).

Only imported when a search carries a ``query_embedding`` (it imports numpy; lexical searches
never load it). Split by responsibility: :mod:`.kernels` (exact float32 arithmetic),
:mod:`.registry` (the per-connection lane caches), :mod:`.cache` (which way a lane is brought up
to date, and the full refresh), :mod:`.bulk` (the first full refresh in bulk), :mod:`.patching`
(a few written rows patched in), :mod:`.rows` (the rows' SQL), :mod:`.blocks` (decoded
vectors), :mod:`.decode` (stored JSON vectors decoded in bulk), :mod:`.mapping` (which rows
survive and what each stands for, by :mod:`zkr.store.eligibility`'s rules), :mod:`.sidefiles`
and :mod:`.prefilter` (the side files); this module ranks and answers fusion.

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

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from zkr.model import TARGET_RANK, QueryEmbedding, Target, TargetKind
from zkr.store import lanescan
from zkr.store.dense import prefilter
from zkr.store.dense.cache import clear_cache, peek_lane, state
from zkr.store.dense.kernels import order_keys, score_segments
from zkr.store.dense.mapping import Derived
from zkr.store.eligibility import one_per_capture
from zkr.store.lanescan import check_dimension
from zkr.store.vectors import validate_query

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

__all__ = ["Candidate", "clear_cache", "in_context", "ranking", "scored"]


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
    check_dimension(len(vec), expected.dimension)
    cache, derived = state(conn, *scope)
    if cache.file is not None and str(cache.file) in lanescan.MISSED:
        # the numpy-free search could not answer: leave it what it needs for this state
        lanescan.MISSED.discard(str(cache.file))
        prefilter.write(cache.file, scope)
    lane = derived.lane
    if lane is None or len(derived.columns) == 0:
        return None
    check_dimension(len(vec), lane.dimension)
    scores = score_segments(
        cache.segments(lane), np.frombuffer(vec, dtype=np.float32), lane.distance, derived.columns
    )
    if not len(derived):
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
    return _first(ranked, count, lexical)


def _first(ranked: _Ranking, count: int, lexical: Sequence[Target]) -> list[tuple[Target, float]]:
    derived = ranked.derived
    merged = one_per_capture(
        (Target(TargetKind.EVIDENCE, e) for e in derived.source_of), derived.source_of, lexical
    )
    numbers = ranked.numbers(min(count, len(ranked.composite)))
    scores = _decode(ranked.best[np.asarray(numbers, dtype=np.int64)])
    out = []
    for number, score in zip(numbers, scores, strict=True):
        target = derived.target(number)
        out.append((merged.get(target, target), float(score)))
    return out


def _decode(keys: U32) -> list[float]:
    """Order keys back to their float32 scores."""
    # order_keys inverted: a set top bit marks a non-negative float, else all bits were flipped
    bits = np.where(keys & np.uint32(0x8000_0000), keys & np.uint32(0x7FFF_FFFF), ~keys)
    scores: list[float] = bits.astype(np.uint32).view(np.float32).tolist()
    return scores


# --------------------------------------------------------------------------- context


@dataclass(frozen=True)
class Candidate:
    """A dense target in its conversation (:func:`in_context`): its score, the best score of
    the captures recorded just before and just after its own (``None``: neither has a
    vector in the lane), and the first :data:`LABEL_CHARS` characters of its capture's
    source text (where a speaker label such as ``Caroline:`` stands; empty for claims)."""

    target: Target
    score: float
    neighbour: float | None
    head: str


LABEL_CHARS = 120
"""Characters of a capture's source text read for its label (terms.py: up to three words)."""

# Each listed source of the scope with the head of its text and the ids of the sources recorded
# just before and just after it (a capture's conversation neighbours for the dense lane, by
# zkr_sources_recorded's order: recorded_at, then id); live or not — a neighbour only counts
# through a vector the lane holds for it, which only an eligible source has (§5.2).
_CONTEXT_SQL = f"""
SELECT s.id, substr(s.content, 1, {LABEL_CHARS}),
  (SELECT b.id FROM sources b WHERE b.tenant_id = :t AND b.person_id = :p
     AND (b.recorded_at, b.id) < (s.recorded_at, s.id)
   ORDER BY b.recorded_at DESC, b.id DESC LIMIT 1),
  (SELECT a.id FROM sources a WHERE a.tenant_id = :t AND a.person_id = :p
     AND (a.recorded_at, a.id) > (s.recorded_at, s.id)
   ORDER BY a.recorded_at, a.id LIMIT 1)
FROM json_each(:ids) AS h
CROSS JOIN sources s ON s.id = h.value AND s.tenant_id = :t AND s.person_id = :p
"""


def in_context(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: QueryEmbedding,
    count: int,
    lexical: Sequence[Target] = (),
) -> list[Candidate]:
    """:func:`scored`'s first ``count`` targets as :class:`Candidate` s: with their captures'
    neighbour scores and text heads, for :func:`zkr.store.fusion.dense_order`. A Source or
    Evidence target's capture is its source; a claim has none (no neighbours, empty head), and
    neither has a capture whose neighbours hold no vector: such targets get no lift.
    One statement reads every capture's neighbours and head."""
    ranked = _ranked(conn, tenant_id, person_id, query)
    if ranked is None:
        return []
    first = _first(ranked, count, lexical)
    derived = ranked.derived

    def capture(target: Target) -> str | None:
        if target.kind is TargetKind.SOURCE:
            return target.id
        if target.kind is TargetKind.EVIDENCE:
            found = derived.source_of.get(target.id)
            return found or _evidence_source(conn, tenant_id, person_id, target.id)
        return None

    captures = {target: capture(target) for target, _ in first}
    wanted = sorted({c for c in captures.values() if c is not None})
    context: dict[str, tuple[str, float | None]] = {}
    if wanted:
        params = {"t": tenant_id, "p": person_id, "ids": json.dumps(wanted)}
        rows = conn.execute(_CONTEXT_SQL, params).fetchall()
        near = sorted({n for row in rows for n in row[2:] if n is not None})
        score_of = _source_scores(ranked, near)
        for source_id, head, before, after in rows:
            found = [score_of[n] for n in (before, after) if n in score_of]
            context[source_id] = (head or "", max(found) if found else None)
    out = []
    for target, score in first:
        source_id = captures[target]
        head, neighbour = context.get(source_id, ("", None)) if source_id else ("", None)
        out.append(Candidate(target, score, neighbour, head))
    return out


def _evidence_source(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, evidence_id: str
) -> str | None:
    row = conn.execute(
        "SELECT source_id FROM evidence WHERE tenant_id = ? AND person_id = ? AND id = ?",
        (tenant_id, person_id, evidence_id),
    ).fetchone()
    return None if row is None else str(row[0])


def _source_scores(ranked: _Ranking, source_ids: Sequence[str]) -> dict[str, float]:
    """The lane's score of each listed Source target that it holds (targets are numbered in
    target order: kind rank, then id, so a binary search finds each)."""
    derived = ranked.derived
    rank = TARGET_RANK[TargetKind.SOURCE]
    lo = int(np.searchsorted(derived.kinds, rank, side="left"))
    hi = int(np.searchsorted(derived.kinds, rank, side="right"))
    block = derived.ids[lo:hi]
    keys = [i.encode("utf-8", "surrogatepass") for i in source_ids]
    if not keys or not len(block):
        return {}
    at = np.searchsorted(block, np.asarray(keys, dtype=block.dtype)).tolist()
    found = {
        source_id: lo + place
        for source_id, key, place in zip(source_ids, keys, at, strict=True)
        if place < len(block) and bytes(block[place]) == key
    }
    if not found:
        return {}
    numbers = np.asarray(list(found.values()), dtype=np.int64)
    return dict(zip(found, _decode(ranked.best[numbers]), strict=True))
