"""Exact float32 scoring of a lane's vectors (spec/retrieval.md §5.3, §5.5).

Scores are IEEE float32 with sequential left-to-right accumulation and no fused multiply-add,
as the reference computes them. They are vectorised over rows instead of over components: the
lane's vectors are a (dimension × rows) float32 matrix, and the accumulator of every row
advances one component at a time (``acc = acc + M[i] * q[i]``), which is exactly the per-row
sequential sum, computed for all rows at once. (Starting the sum at the first product rather
than at the reference's −0.0 is the same: −0.0 + x == x bit for bit.)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from zkr.errors import InvalidInput
from zkr.model import Distance
from zkr.store.lanescan import NOT_FINITE, ZERO_MAGNITUDE

F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]


PARALLEL_COLUMNS = 32_768
"""Lanes with at least this many rows are scored by several threads, each taking a range of
columns (numpy releases the GIL in its loops; each column's sum is unchanged). Plain threads,
started per call (~0.1 ms): ``concurrent.futures`` would cost every CLI search ~8 ms of
imports (it loads ``logging``)."""


def _by_columns(kernel: Callable[[F32, F32], F32], matrix: F32, query: F32) -> F32:
    columns = matrix.shape[1]
    workers = min(4, os.cpu_count() or 1)
    if columns < PARALLEL_COLUMNS or workers < 2:
        return kernel(matrix, query)
    step = -(-columns // workers)
    starts = list(range(0, columns, step))
    parts: list[F32 | None] = [None] * len(starts)
    errors: list[BaseException] = []

    def run(index: int, lo: int) -> None:
        try:
            parts[index] = kernel(matrix[:, lo : lo + step], query)
        except BaseException as error:  # re-raised in the caller's thread
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=(i, lo), daemon=True)
        for i, lo in enumerate(starts[1:], 1)
    ]
    for thread in threads:
        thread.start()
    run(0, 0)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return np.concatenate([p for p in parts if p is not None])


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


def score_columns(matrix: F32, norms: F32, query: F32, distance: Distance, columns: I64) -> F32:
    """Scores of ``columns`` of ``matrix`` (rows in §5.2 order) for ``query``.

    Raises the error of the first row, in ``columns`` order, that fails (§5.3): zero magnitude
    (cosine, either side), then a non-finite score.
    """
    return score_segments([(matrix, norms)], query, distance, columns)


def score_segments(
    segments: list[tuple[F32, F32]], query: F32, distance: Distance, columns: I64
) -> F32:
    """:func:`score_columns` over matrices side by side: (matrix, norms) pairs whose columns
    are numbered one after the other (a lane's vector file, then its overlay)."""

    def each(kernel: Callable[[F32, F32], F32]) -> F32:
        parts = [kernel(matrix, query) for matrix, _ in segments]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    with np.errstate(all="ignore"):
        if distance is Distance.DOT:
            scores = each(sequential_dot)[columns]
            zero = None
        elif distance is Distance.COSINE:
            q_norm = query_norm(query)
            if q_norm == 0:
                raise InvalidInput(ZERO_MAGNITUDE)
            norms = (
                segments[0][1] if len(segments) == 1 else np.concatenate([n for _, n in segments])
            )
            row_norms = norms[columns]
            zero = row_norms == 0
            scores = each(sequential_dot)[columns] / (q_norm * row_norms)
        else:
            scores = -np.sqrt(each(sequential_square_distance))[columns]
            zero = None
    bad = ~np.isfinite(scores)
    if zero is not None:
        bad |= zero
    if bad.any():
        first = int(np.argmax(bad))
        raise InvalidInput(ZERO_MAGNITUDE if zero is not None and zero[first] else NOT_FINITE)
    return scores.astype(np.float32, copy=False)
