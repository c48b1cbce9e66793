"""What ``relevance_basis_points`` means: how much of the query an item matches (0-10,000).

An absolute signal, comparable across queries and stores, so a host can keep items above a
fixed floor (the plugins' ``minScore``); it is not the item's rank in the pack.

For a query with content terms ``Q`` (:func:`zkr.store.terms.query_terms`; stop words have
no term) searched in a scope of ``N`` indexed documents of average length ``avgdl`` terms::

    w(t)    = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))          (BM25's IDF, always > 0)
    f(t, d) = min(1, tf · (k1 + 1) / (tf + k1 · (1 - b + b · max(1, |d| / (2 · avgdl)))))
    relevance(d) = floor(10000 · Σ_{t∈Q} w(t) · f(t, d) / Σ_{t∈Q} w(t))

with ``k1 = 1.2``, ``b = 0.75`` (bm25's usual constants), ``df(t)`` the number of the scope's
documents holding ``t`` and ``tf`` its count in the matched document ``d``. So: the share of
the query's information (rare words weigh more than common ones; a query word nothing in memory
holds still counts in the denominator) that the item contains, where a word counts fully when
it occurs once in a document up to twice the average length, and less in longer documents where
it is a small part (bm25's length normalisation applied to the excess only); ``f`` is 0 when
``tf`` is 0. A claim or source matched through several documents takes its best one.

A dense (vector) score can be put on the same scale later as the share of a calibrated
similarity (e.g. ``10000 · clamp((cos - c0) / (c1 - c0), 0, 1)`` with ``c0``/``c1`` the
similarities of unrelated and paraphrase pairs for that model), combined with this one by
taking the larger.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from zkr.typelite import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

FULL = 10_000
K1 = 1.2
B = 0.75


def idf(docs: int, df: int) -> float:
    """BM25's IDF with the +1 that keeps it positive (weight of a query term)."""
    return math.log(1.0 + (docs - df + 0.5) / (df + 0.5))


def basis_points(
    weights: Sequence[tuple[str, float]],
    counts: Mapping[str, int],
    length: int,
    avg_length: float,
) -> int:
    """The formula of the module docstring: ``weights`` are ``(term, w)`` for every query
    term, ``counts`` the term counts of the document, ``length`` its number of terms."""
    total = sum(w for _, w in weights)
    if total <= 0:
        return 0
    ratio = max(1.0, length / (2 * avg_length)) if avg_length > 0 else 1.0
    norm = K1 * (1 - B + B * ratio)
    got = 0.0
    for term, w in weights:
        tf = counts.get(term, 0)
        if tf:
            got += w * min(1.0, tf * (K1 + 1) / (tf + norm))
    return min(FULL, math.floor(FULL * got / total + 1e-9))


def basis_points_of(
    weights: Sequence[tuple[str, float]],
    counts: Sequence[npt.NDArray[np.float64]],
    lengths: npt.NDArray[np.float64],
    avg_length: float,
) -> list[int]:
    """:func:`basis_points` of many documents at once (numpy; long-lived processes only):
    ``counts[i]`` holds the count of ``weights[i]``'s term in each document, ``lengths`` each
    document's number of terms. The same double operations in the same order, element by
    element, so the same integers as :func:`basis_points` document by document."""
    import numpy as np

    total = sum(w for _, w in weights)
    if total <= 0:
        return [0] * len(lengths)
    ratio = np.maximum(1.0, lengths / (2 * avg_length)) if avg_length > 0 else np.ones(len(lengths))
    norm = K1 * (1 - B + B * ratio)
    tf = np.array(counts, dtype=np.float64).reshape(len(weights), len(lengths))  # term x doc
    # each term's share w · min(1, tf (k1 + 1) / (tf + norm)), all terms at once (a count of 0
    # gives w · 0.0 = 0.0: adding it is skipping it), summed term by term in order
    shares = np.array([w for _, w in weights])[:, None] * np.minimum(
        1.0, tf * (K1 + 1) / (tf + norm)
    )
    got = np.zeros(len(lengths))
    for share in shares:
        got += share
    points: list[int] = np.minimum(FULL, np.floor(FULL * got / total + 1e-9)).astype(int).tolist()
    return points
