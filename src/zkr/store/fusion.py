"""Hybrid fusion of the lexical and dense lanes (zkr's own ranking; spec/retrieval.md §6 is
the reference's).

Both lanes contribute a fixed candidate pool, whatever the pack's ``limit`` (the reference
takes ``4 × limit`` lexical rows and every vector, so a larger limit reorders the top):

* lexical: its first :data:`POOL` targets, with their relevance in basis points;
* dense: its first :data:`POOL` targets by similarity; when the lane's model is calibrated (the
  local embedder, :mod:`zkr.embedding.local`), only those above the model's ``floor``, so a
  pack is not padded with vectors that merely exist.

Order: the lexical lane's first :data:`LEXICAL_LEAD` targets first, in lexical order (the
dense lane adds candidates but does not push the lexical lane's best matches down); then the
rest by weighted reciprocal rank, ``1 / (K + 1 + lexical rank) + W / (K + 1 + dense rank)``
(0-based ranks, a lane the target is absent from adds nothing), with ``K`` =
:data:`RRF_K` and ``W`` = :data:`DENSE_WEIGHT`, all chosen on LoCoMo (docs/embedding.md); ties
by relevance, then target order.

With the local embedder's calibrated lane (not for caller-supplied vectors, whose scale is
unknown), the dense pool is first put in conversation order (:func:`dense_order`): its first
:data:`CONTEXT_POOL` targets above the floor, re-ordered by
``(cos + NEIGHBOUR_LIFT · best neighbour cos) / (1 + NEIGHBOUR_LIFT) + LABEL_BONUS · named``,
where the neighbours are the captures recorded just before and after the target's own
(:func:`zkr.store.dense.in_context`; turns of a conversation answer each other) and ``named``
is 1 when the query names the speaker label of the target's capture (``Caroline: …``, the
label rule of :mod:`zkr.store.terms` that the lexical lane boosts by). Both chosen on LoCoMo
(docs/embedding.md, "Context and labels").

Relevance stays an absolute signal: the larger of the item's lexical relevance and its dense
relevance, ``10000 · clamp((cos − floor) / (full − floor), 0, 1)`` with the model's calibration
(the raw cosine, ``floor = 0``, ``full = 1``, for caller-supplied vectors of unknown models;
0 for non-cosine lanes). It is not the item's rank, so a pack is not necessarily sorted by it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from zkr.model import Target
from zkr.store.terms import LABEL_MARK, document_terms, label_terms, query_terms
from zkr.typelite import TYPE_CHECKING

if TYPE_CHECKING:
    from zkr.store.dense import Candidate

POOL = 100
"""Candidates taken from each lane, independent of ``limit`` (``limit`` is at most 100)."""

RRF_K = 10
DENSE_WEIGHT = 0.7
LEXICAL_LEAD = 3
"""The lexical lane's first targets that keep the top places of a hybrid pack."""
FULL = 10_000
CONTEXT_POOL = 200
"""Dense targets re-ordered in context (:func:`dense_order`) before the first POOL are taken."""
NEIGHBOUR_LIFT = 0.5
"""Share of the best neighbouring capture's similarity a dense target's order takes."""
LABEL_BONUS = 0.1
"""Cosine added to the order of a dense target whose speaker label the query names."""


def dense_relevance(score: float, floor: float, full: float) -> int:
    """A dense similarity on the calibrated 0-10,000 scale."""
    share = (score - floor) / (full - floor)
    if not math.isfinite(share):
        return 0
    return max(0, min(FULL, math.floor(FULL * share)))


def dense_order(
    candidates: Sequence[Candidate], query: str, floor: float
) -> list[tuple[Target, float]]:
    """The calibrated dense pool in conversation order (module docstring): ``(target,
    similarity)`` for the candidates above ``floor``, re-ordered by their context score (ties
    keep the lane's order); the similarity itself (relevance) is unchanged."""
    named = set(label_terms(query_terms(query)[0]))
    keyed = []
    for candidate in candidates:
        if candidate.score <= floor:
            break  # best first: nothing further is above the floor
        near = candidate.neighbour if candidate.neighbour is not None else 0.0
        key = (candidate.score + NEIGHBOUR_LIFT * near) / (1 + NEIGHBOUR_LIFT)
        if named and _labelled(candidate.head, named):
            key += LABEL_BONUS
        keyed.append((key, candidate))
    keyed.sort(key=lambda pair: -pair[0])  # stable: ties keep the lane's order
    return [(c.target, c.score) for _, c in keyed]


def _labelled(head: str, named: set[str]) -> bool:
    """Whether the text's leading label (``Caroline: …``) holds one of the marked terms."""
    return any(term in named for term in document_terms(head) if term.startswith(LABEL_MARK))


def fuse(
    lexical: Sequence[tuple[Target, int]],
    dense: Sequence[tuple[Target, float]],
    limit: int,
    calibration: tuple[float, float] | None,
) -> list[tuple[Target, int]]:
    """At most ``limit`` ``(target, relevance)`` pairs, best first (see the module docstring).

    ``lexical``: ``(target, basis points)`` best first; ``dense``: ``(target, similarity)``
    best first; ``calibration``: the dense model's ``(floor, full)`` or ``None`` (unknown
    model: no floor, raw cosine as relevance).
    """
    floor, full = calibration if calibration is not None else (-math.inf, 1.0)
    low = floor if calibration is not None else 0.0
    score: dict[Target, float] = {}
    relevance: dict[Target, int] = {}
    for rank, (target, points) in enumerate(lexical[:POOL]):
        score[target] = 1.0 / (RRF_K + 1 + rank)
        relevance[target] = max(relevance.get(target, 0), points)
    for rank, (target, similarity) in enumerate(dense[:POOL]):
        if similarity <= floor:
            break  # best first: nothing further is above the floor
        score[target] = score.get(target, 0.0) + DENSE_WEIGHT / (RRF_K + 1 + rank)
        points = dense_relevance(similarity, low, full)
        relevance[target] = max(relevance.get(target, 0), points)
    lead = list(dict.fromkeys(target for target, _ in lexical[:LEXICAL_LEAD]))
    rest = sorted(
        (t for t in score if t not in lead), key=lambda t: (-score[t], -relevance[t], t.sort_key())
    )
    ranked = lead + rest
    return [(target, relevance[target]) for target in ranked[:limit]]
