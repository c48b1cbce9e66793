"""Bulk decoding of stored ``vector`` cells (spec/retrieval.md §9.2, §11.3) for the dense
lane's cache.

The rule is :func:`zkr.store.vectors.decode_vector` (strict JSON, numbers only, length equal
to the stored dimension, finite in float32 after rounding through a double, unit magnitude
for ``l2``); this module applies it to many cells at once and gives, for every cell, exactly
what that function gives. Cells that match the common shape (``[`` … ``]`` with no nested
bracket, no string, no literal) are parsed together with one ``json.loads`` of the joined
text and checked with numpy; every other cell, and every cell of a batch that does not parse
as a whole, goes through :func:`~zkr.store.vectors.decode_vector` itself.

Why the joined parse is the same as parsing each cell: every cell taken begins with ``[`` and
ends with ``]`` and the batch holds exactly one ``[`` and one ``]`` per cell, so no cell
contains another bracket; without ``"`` and ``{`` no string or object can appear, without
``u`` and ``a`` no ``true``/``false``/``null``, and ``NaN``/``Infinity`` are refused by
``parse_constant``. The joined text ``[c1,c2,…]`` then parses into one list per cell iff
every cell parses alone into a list of numbers, each the same numbers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from zkr.model import Normalization
from zkr.store.vectors import L2_TOLERANCE, LaneConfig, decode_vector, vector_bytes

F32 = npt.NDArray[np.float32]
Bool = npt.NDArray[np.bool_]


def _refuse(name: str) -> object:
    raise ValueError(name)


def decode_texts(texts: Sequence[object], config: LaneConfig) -> tuple[F32, Bool]:
    """Decode ``texts`` (stored ``vector`` cells of rows with ``config``): a (len, dimension)
    float32 matrix and a mask of the well-formed cells (other rows of the matrix are
    undefined). Equal, cell by cell, to :func:`zkr.store.vectors.decode_vector`."""
    n, dimension = len(texts), config.dimension
    out = np.zeros((n, dimension), dtype=np.float32)
    ok = np.zeros(n, dtype=np.bool_)
    fast = [
        i
        for i, text in enumerate(texts)
        if type(text) is str and text[:1] == "[" and text[-1:] == "]"
    ]
    slow = _bulk(texts, fast, config, out, ok) if fast else []
    taken = set(fast) - set(slow)
    for i in range(n):
        if i in taken:
            continue
        vec = decode_vector(texts[i], dimension, config.normalization)
        if vec is not None:
            out[i] = np.frombuffer(vector_bytes(vec), dtype="<f4")
            ok[i] = True
    return out, ok


def _bulk(
    texts: Sequence[object], fast: list[int], config: LaneConfig, out: F32, ok: Bool
) -> list[int]:
    """Decode cells ``fast`` together into ``out``/``ok``; returns the cells left to decode
    one by one (all of them when the batch is not of the common shape)."""
    joined = ",".join(texts[i] for i in fast)  # type: ignore[misc]
    count = len(fast)
    if (
        joined.count("[") != count
        or joined.count("]") != count
        or any(mark in joined for mark in ('"', "{", "u", "a"))
    ):
        return fast
    try:
        values = json.loads("[" + joined + "]", parse_constant=_refuse)
    except (ValueError, RecursionError):
        return fast
    if not isinstance(values, list) or len(values) != count:
        return fast
    dimension = config.dimension
    right = [i for i, value in zip(fast, values, strict=True) if len(value) == dimension]
    if not right:
        return []  # every cell is a list of the wrong length: none is well-formed
    try:
        wide = np.array([v for v in values if len(v) == dimension], dtype=np.float64)
    except (OverflowError, ValueError, TypeError):  # an integer beyond the double range
        return fast
    with np.errstate(all="ignore"):
        narrow = wide.astype(np.float32)  # decimal -> double -> float32, as decode_vector
        good = np.isfinite(narrow).all(axis=1)
        if config.normalization is Normalization.L2:
            good &= _unit_magnitude(narrow)
    rows = np.asarray(right, dtype=np.int64)
    out[rows] = narrow
    ok[rows] = good
    return []


def _unit_magnitude(narrow: F32) -> Bool:
    """§11.2 per row, as :func:`zkr.store.vectors.has_unit_magnitude`: float64 squares summed
    left to right, square root, ``|m - 1| <= 1e-4``."""
    columns = np.ascontiguousarray(narrow.T, dtype=np.float64)
    total = columns[0] * columns[0]
    square = np.empty_like(total)
    for i in range(1, columns.shape[0]):
        np.multiply(columns[i], columns[i], out=square)
        np.add(total, square, out=total)
    magnitude = np.sqrt(total)
    result: Bool = np.isfinite(magnitude) & (np.abs(magnitude - 1.0) <= L2_TOLERANCE)
    return result
