"""Stored vectors: the lane configuration, the codecs of the ``embeddings`` cells, and query
validation (spec/retrieval.md §5.1, §9.2, §11.2-11.3).

A leaf module without numpy: ``embed``, ``projections``, ``repair`` (through
:mod:`zkr.store.embeddings`), the dense lane (:mod:`zkr.store.dense`) and its side file
(:mod:`zkr.store.vectorfile`) all decode and encode vectors here.
"""

import json
import math
import struct
import sys
from array import array
from collections.abc import Sequence
from functools import lru_cache

from zkr.errors import InvalidInput
from zkr.model import Distance, Normalization, QueryEmbedding
from zkr.text import require_text
from zkr.typelite import TYPE_CHECKING, Any, NamedTuple

L2_TOLERANCE = 1e-4
"""Allowed |magnitude - 1| of an ``l2`` vector, magnitude computed in float64 (§11.2)."""

_NORMALIZATION_RANK = {Normalization.NONE: 0, Normalization.L2: 1}
_DISTANCE_RANK = {Distance.COSINE: 0, Distance.DOT: 1, Distance.EUCLIDEAN: 2}

if TYPE_CHECKING:
    from typing import TypeAlias

    Vector: TypeAlias = array[float]  # array('f'): float32 components, read as Python floats
else:
    Vector = array  # array is subscriptable only from Python 3.12


# --------------------------------------------------------------------------- lanes


class LaneConfig(NamedTuple):
    """(dimension, normalization, distance) of a stored row or a lane (§9.3)."""

    dimension: int
    normalization: Normalization
    distance: Distance

    def order_key(self) -> tuple[int, int, int]:
        """The lane order: dimension, then none < l2, then cosine < dot < euclidean."""
        return (
            self.dimension,
            _NORMALIZATION_RANK[self.normalization],
            _DISTANCE_RANK[self.distance],
        )

    def to_json(self) -> list[int | str]:
        """The form side-file headers hold: ``[dimension, normalization, distance]``."""
        return [self.dimension, self.normalization.value, self.distance.value]

    @classmethod
    def from_json(cls, value: Sequence[Any]) -> "LaneConfig":
        """The inverse of :meth:`to_json` (its first three items). Raises ``ValueError``,
        ``TypeError`` or ``IndexError`` for a header that does not hold one."""
        return cls(int(value[0]), Normalization(value[1]), Distance(value[2]))


@lru_cache(maxsize=256)
def decode_normalization(text: object) -> Normalization | None:
    """A stored ``normalization`` cell: the JSON string ``"none"`` or ``"l2"`` (§9.2)."""
    value = _json_string(text)
    return Normalization(value) if value in ("none", "l2") else None


@lru_cache(maxsize=256)
def decode_distance(text: object) -> Distance | None:
    """A stored ``distance`` cell: the JSON string ``"cosine"``, ``"dot"`` or ``"euclidean"``."""
    value = _json_string(text)
    return Distance(value) if value in ("cosine", "dot", "euclidean") else None


def _json_string(text: object) -> str | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def decode_config(dimension: object, normalization: object, distance: object) -> LaneConfig | None:
    """The decoded configuration of a stored row, or ``None`` when it cannot be well-formed."""
    norm = decode_normalization(normalization)
    dist = decode_distance(distance)
    if norm is None or dist is None or type(dimension) is not int or dimension <= 0:
        return None
    return LaneConfig(dimension, norm, dist)


# --------------------------------------------------------------------------- vectors


def to_float32(values: Sequence[float]) -> Vector | None:
    """Round each component to float32 (via the double it already is, as the reference's
    decoder does); ``None`` when empty or any component is not finite in float32.

    Values beyond the float32 range (``1e39``) become infinite and are rejected (§5.1, §11.1).
    """
    if not values:
        return None
    try:
        vec = array("f", values)
    except (OverflowError, TypeError):
        return None
    # A double sum of float32 values cannot overflow, so it is finite iff every component is.
    if not math.isfinite(sum(vec)):
        return None
    return vec


def has_unit_magnitude(vec: Vector) -> bool:
    """§11.2: widen to float64, sum the squares left to right, square root, |m - 1| <= 1e-4."""
    total = 0.0
    for x in vec:  # explicit loop: sum() of floats is compensated on Python >= 3.12
        total += x * x
    magnitude = math.sqrt(total)
    return math.isfinite(magnitude) and abs(magnitude - 1.0) <= L2_TOLERANCE


def decode_vector(text: object, dimension: object, normalization: Normalization) -> Vector | None:
    """Parse a stored ``vector`` cell; ``None`` unless it is well-formed for ``dimension``.

    Strict JSON (``NaN``/``Infinity`` literals decode to non-finite values and fail), numbers
    only (``true`` is not a number), length equal to ``dimension``, finite in float32, unit
    magnitude for ``l2`` (§9.2).
    """
    if not isinstance(text, str):
        return None
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(values, list) or len(values) != dimension:
        return None
    for value in values:
        if type(value) is not float and type(value) is not int:
            return None
    try:
        floats = [float(value) for value in values]
    except OverflowError:  # an integer literal beyond the double range
        return None
    vec = to_float32(floats)
    if vec is None:
        return None
    if normalization is Normalization.L2 and not has_unit_magnitude(vec):
        return None
    return vec


_F32 = struct.Struct("<f")


def _f32(value: float) -> float:
    return float(_F32.unpack(_F32.pack(value))[0])


def _component_text(value: float) -> str:
    """The shortest decimal that reads back (decimal -> double -> float32) as ``value``."""
    for digits in (6, 7, 8, 9):
        text = f"{value:.{digits}g}"
        if _f32(float(text)) == value:
            break
    else:  # unreachable: 9 significant digits identify every float32
        text = repr(value)
    if "." not in text and "e" not in text:
        text += ".0"  # 1 -> 1.0, as the reference writes it
    return text


def vector_bytes(vec: Vector) -> bytes:
    """The float32 components as little-endian bytes (zkr's copy of a stored vector,
    :func:`zkr.store.changes.keep_copy`)."""
    if sys.byteorder == "little":
        return vec.tobytes()
    swapped = array("f", vec)
    swapped.byteswap()
    return swapped.tobytes()


def encode_vector(vec: Vector) -> str:
    """The stored ``vector`` text: a compact JSON array of float32-exact numbers (§11.3)."""
    return "[" + ",".join(_component_text(x) for x in vec) + "]"


def validate_query(query: QueryEmbedding) -> Vector:
    """§5.1, in order: blank model, blank version, empty or non-finite (float32) vector."""
    require_text(query.model, "query embedding model")
    require_text(query.version, "query embedding version")
    vec = to_float32(query.vector)
    if vec is None:
        raise InvalidInput("query embedding vector must contain finite values")
    return vec
