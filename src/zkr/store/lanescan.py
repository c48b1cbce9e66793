"""The dense lane's warm search without numpy, for one-shot processes (every CLI call).

``import numpy`` alone costs a fresh process 135-180 ms; a warm hybrid search needs none of it
when the lane's side files (:mod:`zkr.store.sidepaths`) are trusted. This module answers
:func:`zkr.store.dense.scored` from those files with the same candidates, order and float32
scores, or returns ``None`` and leaves the search to :mod:`zkr.store.dense` (numpy), whose
cache then also (re)writes what was missing. It answers only when:

* the file is SQLite with the change log, the lane's state file (``.lane``) is of the log's
  generation, not ahead of it, and behind it by fewer than :data:`~zkr.store.sidepaths.STATE_LAG`
  entries, its vector file (``.bin``, and ``.add`` when it names one) carries the tokens it
  names, and nothing logged since its position touches the lane
  (:func:`zkr.store.changes.lane_untouched`, the rule :mod:`zkr.store.dense.cache` trusts) —
  or only rows of the lane were written that :mod:`zkr.store.lanedelta` can read from the
  file and apply over the state (a few one-row ``embed`` calls: scored exactly, as the
  overlay's columns are);
* the lane's distance is cosine and its index (``.fast``, written by
  :mod:`zkr.store.dense.prefilter` for exactly that lane state) says every surviving row has a
  finite norm within :data:`NORM_SPREAD` of 1 (any ``l2`` lane; else numpy scores, or raises
  §5.3's errors), and the vector file's row-major copy (``.rows``) carries its token;
* ``simsimd`` (a small SIMD kernel library, no numpy needed) imports.

**Exact results from a fast scan.** ``simsimd.cdist`` scores every vector of ``.rows`` against
the unit query (float32 products and sums in its own order): each fast score is within
:func:`bound` of the exact float32 cosine of §5.3 (summation orders: 6·n·2⁻²⁴, 1.4·10⁻⁴ at
384 dimensions; a norm's distance from 1: ≤ 2⁻¹⁰). The overlay's few columns are scored
exactly at once. Walking columns of surviving rows best first, the one where the first
``count`` distinct targets are reached gives ``t``; every column whose exact score can reach
``t − bound`` (fast score ≥ ``t − 2·bound``) is re-scored exactly — sequential float32 products
and sums (:func:`exact_dots`), ``dot / (‖q‖ × ‖s‖)`` rounded as float32 — and targets keep
their best row (§5.4-5.5). No other row can change the first ``count`` targets. An exact score
further than the bound from its fast one (which the bound rules out) sends the search to numpy.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Collection, Iterable, Sequence
from operator import itemgetter

from zkr.errors import InvalidInput
from zkr.model import TARGET_RANK, Distance, QueryEmbedding, Target, TargetKind
from zkr.store import changes, lanedelta, sidepaths
from zkr.store.driver import is_postgres
from zkr.store.eligibility import one_per_capture
from zkr.store.embeddings import lane as stored_lane
from zkr.store.laneread import (
    Index,
    LaneView,
    Vectors,
    read_index,
    read_lane,
    read_rows,
    read_vectors,
)
from zkr.store.vectors import Vector, validate_query
from zkr.typelite import Any

ZERO_MAGNITUDE = "cosine embeddings must have non-zero magnitude"
NOT_FINITE = "embedding similarity is not finite"
DIMENSION = "query embedding dimension {query} does not match stored dimension {stored}"

NORM_SPREAD = 2.0**-10
"""Rows' norms must lie within this of 1 for the fast scan (module docstring)."""


def bound(dimension: int) -> float:
    """Largest difference between a fast score and the exact cosine at ``dimension``: a norm's
    distance from 1 (:data:`NORM_SPREAD`, widened by 1%), plus 6·n·2⁻²⁴ for the float32
    roundings of both sums (any order: n·2⁻²⁴ relative each; the exact cosine's sum, two norms
    and two roundings: 4 of them; the fast sum: 1), plus 2⁻²⁰ for the unit query's rounding.
    1.13·10⁻³ at 384 dimensions."""
    return NORM_SPREAD * 1.01 + 6 * dimension * 2.0**-24 + 2.0**-20


MAX_RESCORED = 4096
"""More rows than this within reach of the first targets: numpy scores them instead."""
SCALE_LIMIT = 1e15
"""A query norm outside [1/SCALE_LIMIT, SCALE_LIMIT]: numpy scores the lane (inside, with rows
of norm ≈ 1, no float32 sum, product or quotient of §5.3 can overflow or reach zero)."""

FORCE = False
"""Tests: take this path even in a process that already imported numpy."""
MISSED: set[str] = set()
"""Vector files of lanes this path could not answer: the numpy search of this process that
follows writes the files it reads for the lane state it leaves (:mod:`zkr.store.dense.prefilter`),
so that the next process answers without numpy."""

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


# --------------------------------------------------------------------------- float32 arithmetic


def f32(value: float) -> float:
    """``value`` rounded to float32 (round to nearest even). A double holds any float32
    product exactly and rounds sums, quotients and square roots of float32 values such that
    rounding again to float32 gives the correctly rounded float32 result."""
    try:
        result: float = _F32.unpack(_F32.pack(value))[0]
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")
    return result


def order_key(score: float) -> int:
    """The uint32 key of a float32 score in the float total order (−0.0 below +0.0), as
    :func:`zkr.store.dense.kernels.order_keys`."""
    bits: int = _U32.unpack(_F32.pack(score))[0]
    return (~bits & 0xFFFF_FFFF) if bits >> 31 else bits | 0x8000_0000


def sequential_dot(a: Sequence[float], b: Sequence[float]) -> float:
    """The §5.3 sum of a × b in float32, left to right, no fused multiply-add."""
    acc = f32(a[0] * b[0])
    for x, y in zip(a[1:], b[1:], strict=True):
        acc = f32(acc + f32(x * y))
    return acc


def query_norm(query: Sequence[float]) -> float:
    """‖q‖ as :func:`zkr.store.dense.kernels.query_norm` computes it (float32)."""
    squares = array("f", [x * x for x in query])  # float32 products: exact doubles, rounded
    total = squares[0]
    for square in squares[1:]:
        total = f32(total + square)
    return f32(total**0.5)


def exact_dots(
    simsimd: Any, rows: Callable[[int], Sequence[float]], query: Sequence[float], count: int
) -> list[float]:
    """§5.3 dot products of ``count`` vectors with ``query``, vectorised over the vectors:
    ``rows(i)`` gives component ``i`` of each. ``simsimd.wsum`` with one weight 0 is an exact
    float32 product and with both weights 1 an exact float32 sum, so every vector's sum is the
    sequential one, except that a product −0.0 may come out +0.0, which only changes a sum that
    ends at zero: those are summed again one by one."""
    wsum = simsimd.wsum
    acc: Any = None
    for i, q in enumerate(query):
        column = rows(i)
        if not (isinstance(column, array) and column.typecode == "f"):
            column = array("f", column)  # float32, as simsimd must read it
        product = wsum(column, column, alpha=q, beta=0.0)
        acc = product if acc is None else wsum(acc, product, alpha=1.0, beta=1.0)
    dots: list[float] = list(memoryview(acc).cast("B").cast("f").tolist())
    for j, dot in enumerate(dots):
        if dot == 0:
            dots[j] = sequential_dot([rows(i)[j] for i in range(len(query))], query)
    return dots


# --------------------------------------------------------------------------- the search


def _simsimd() -> Any:
    try:
        import simsimd
    except ImportError:
        return None
    return simsimd


def scored(
    conn: Any,
    tenant_id: str,
    person_id: str,
    query: QueryEmbedding,
    count: int,
    lexical: Sequence[Target] = (),
) -> list[tuple[Target, float]] | None:
    """:func:`zkr.store.dense.scored` from the lane's side files without numpy, or ``None``
    when this path does not apply (module docstring): the caller then asks numpy. Raises what
    :func:`zkr.store.dense.scored` raises, in the same order (§5.1 validation, dimension)."""
    if (
        ("numpy" in sys.modules and not FORCE)
        or sys.byteorder != "little"  # the side files are little-endian, read natively here
        or is_postgres(conn)
        or count <= 0
    ):
        return None
    vec = validate_query(query)
    scope = (tenant_id, person_id, query.model, query.version)
    expected = stored_lane(conn, *scope)
    if expected is None:
        return []  # no current row: an empty list, whatever the dimension (§5.2)
    check_dimension(len(vec), expected.dimension)
    path = sidepaths.lane_file(conn, scope)
    mark = changes.mark(conn)
    if path is None or mark is None:
        return None
    MISSED.add(path)  # unless answered here: the numpy search brings these files up to date
    found = _trusted(conn, scope, path, mark, vec, count, lexical)
    if found is not None:
        MISSED.discard(path)
    return found


def _trusted(
    conn: Any,
    scope: tuple[str, str, str, str],
    path: str,
    mark: changes.Mark,
    vec: Sequence[float],
    count: int,
    lexical: Sequence[Target],
) -> list[tuple[Target, float]] | None:
    # the lane state is trusted as zkr.store.dense.cache trusts it (sidefiles.load_state,
    # then cache._untouched): of the log's generation, not ahead of it, its vector file and
    # overlay those it names, nothing logged since touching the lane
    lane = read_lane(sidepaths.companion(path, sidepaths.STATE), scope)
    if (
        lane is None
        or not changes.same_log(lane.generation, mark.generation)
        or lane.seq > mark.seq
        or mark.seq - lane.seq >= sidepaths.STATE_LAG
    ):
        return None
    config = lane.config
    if config is None or config.distance is not Distance.COSINE:
        return None
    block = read_vectors(path, scope, config)
    if block is None or block.token != lane.token:
        return None
    extra = None
    if lane.extra:
        extra = read_vectors(sidepaths.companion(path, sidepaths.OVERLAY), scope, config)
        if extra is None or extra.token != lane.extra or extra.configs != [config]:
            return None
    known = changes.Mark(lane.generation, lane.seq)
    untouched, items, written = changes.lane_untouched(conn, scope, known, mark, lane.touches)
    delta = None
    if not untouched:
        # rows of the lane written since (a few one-row CLI embeds): applied over the state
        # when they cannot change what another row stands for (zkr.store.lanedelta)
        if items is None or not written or not len(lane.columns):
            return None
        delta = lanedelta.read(conn, scope, lane, items, written)
        if delta is None:
            return None
    if not len(lane.columns):
        return []
    check_dimension(len(vec), config.dimension)
    simsimd = _simsimd()
    if simsimd is None:
        return None
    index = read_index(sidepaths.companion(path, sidepaths.INDEX), scope, lane)
    rows = read_rows(sidepaths.companion(path, sidepaths.ROWS), scope, lane.token, config)
    if index is None or not index.usable or rows is None:
        return None
    q_norm = query_norm(vec)
    if q_norm == 0:
        raise InvalidInput(ZERO_MAGNITUDE)
    if not 1 / SCALE_LIMIT <= q_norm <= SCALE_LIMIT:
        return None
    try:
        return _search(simsimd, lane, index, block, rows, extra, delta, vec, q_norm, count, lexical)
    except (TypeError, ValueError, RuntimeError, OverflowError, IndexError):
        return None  # a kernel that refused its input, a file shorter than it says: numpy


def check_dimension(query: int, stored: int) -> None:
    """§5.2 step 6."""
    if query != stored:
        raise InvalidInput(DIMENSION.format(query=query, stored=stored))


def _search(
    simsimd: Any,
    lane: LaneView,
    index: Index,
    block: Vectors,
    rows: memoryview[float],
    extra: Vectors | None,
    delta: lanedelta.Delta | None,
    vec: Sequence[float],
    q_norm: float,
    count: int,
    lexical: Sequence[Target],
) -> list[tuple[Target, float]] | None:
    dimension = len(vec)
    length = sum(x * x for x in vec) ** 0.5
    unit = array("f", [x / length for x in vec])
    fast = simsimd.cdist(
        memoryview(unit).cast("B").cast("f", [1, dimension]),
        rows.cast("B").cast("f", [block.columns, dimension]),
        metric="dot",
    )
    scores = memoryview(fast).cast("B").cast("d")
    # the overlay's few columns are scored exactly from the start, and so are the rows
    # written since the lane state (a rewritten row keeps its column, a new row gets one past
    # the overlay's): their targets come from ``targets_of``
    exact: dict[int, float] = {}
    replaced = {} if delta is None else delta.replaced
    if extra is not None:
        live = [
            c
            for c in range(extra.columns)
            if index.position_of[block.columns + c] >= 0 and block.columns + c not in replaced
        ]
        found = _cosines(simsimd, extra, live, vec, q_norm)
        if found is None:
            return None
        exact = {block.columns + c: score for c, score in zip(live, found, strict=True)}
    targets_of, order_of, source_of = _with_delta(lane, index, delta)
    if delta is not None:
        written = [
            *replaced,
            *range(len(index.position_of), len(index.position_of) + len(delta.added)),
        ]
        found = _cosines_of(
            simsimd, [*replaced.values(), *(v for v, _ in delta.added)], vec, q_norm
        )
        if found is None:
            return None
        exact.update(zip(written, found, strict=True))
    limit = bound(dimension)
    columns = _within_reach(simsimd, scores, exact, index, replaced, targets_of, count, limit)
    if columns is None:
        return None
    todo = [c for c in columns if c not in exact]
    found = _rescore(simsimd, block, rows, todo, vec, q_norm)
    if found is None:
        return None
    for column, score in zip(todo, found, strict=True):
        if not abs(score - scores[column]) <= limit:
            return None  # the bound failed (or a fast score is NaN): let numpy answer
        exact[column] = score
    best: dict[int | Target, tuple[int, float]] = {}
    for column in columns:
        score = exact[column]
        key = order_key(score)
        for number in targets_of(column):
            held = best.get(number)
            if held is None or key > held[0]:
                best[number] = (key, score)
    ranked = sorted(best, key=lambda number: (-best[number][0], order_of(number)))[:count]
    merged = one_per_capture(
        (Target(TargetKind.EVIDENCE, e) for e in source_of), source_of, lexical
    )
    out = []
    for number in ranked:
        target = number if isinstance(number, Target) else lane.target(number)
        out.append((merged.get(target, target), best[number][1]))
    return out


def _with_delta(
    lane: LaneView, index: Index, delta: lanedelta.Delta | None
) -> tuple[
    Callable[[int], Sequence[int | Target]],
    Callable[[int | Target], tuple[int, int, bytes]],
    dict[str, str],
]:
    """What each column stands for (a state target by its number; a target only rows written
    since stand for, as itself), the target order of those (a target new to the lane between
    the numbered ones: :meth:`~zkr.store.laneread.LaneView.place`) and the Evidence targets'
    sources."""
    if delta is None or not delta.added:
        source_of = lane.source_of if delta is None else {**lane.source_of, **delta.source_of}
        return index.targets_of, _numbered, source_of
    first = len(index.position_of)
    places: dict[Target, tuple[int, int, bytes]] = {}
    added: list[list[int | Target]] = []
    for _, mapped in delta.added:
        these: list[int | Target] = []
        for target in mapped:
            number, known = lane.place(target)
            if known:
                these.append(number)
            else:
                places[target] = (number, -1, _target_key(target))
                these.append(target)
        added.append(these)

    def targets_of(column: int) -> Sequence[int | Target]:
        return added[column - first] if column >= first else index.targets_of(column)

    def order_of(target: int | Target) -> tuple[int, int, bytes]:
        return places[target] if isinstance(target, Target) else (target, 0, b"")

    return targets_of, order_of, {**lane.source_of, **delta.source_of}


def _target_key(target: Target) -> bytes:
    """Target order (§1) among targets at one place: kind rank, then UTF-8 id."""
    return bytes((TARGET_RANK[target.kind],)) + target.id.encode("utf-8", "surrogatepass")


def _numbered(number: int | Target) -> tuple[int, int, bytes]:
    assert isinstance(number, int)
    return (number, 0, b"")


def _within_reach(
    simsimd: Any,
    scores: memoryview[float],
    exact: dict[int, float],
    index: Index,
    replaced: Collection[int],
    targets_of: Callable[[int], Sequence[int | Target]],
    count: int,
    limit: float,
) -> list[int] | None:
    """Columns whose exact score can reach the first ``count`` targets' (module docstring):
    ``scores`` are the vector file's fast scores (of no use for its ``replaced`` columns),
    ``exact`` the exact ones of the overlay and of the rows written since the lane state."""
    position_of = index.position_of
    sample: list[float] = sorted(scores[::16].tolist(), reverse=True)
    wanted = count * 2 + 64  # past the first targets and the rows within reach of them
    lowest = float("-inf")
    floor, reach = lowest, lowest
    while True:
        place = wanted // 16
        floor = float(sample[place]) if place < len(sample) else lowest
        above = _live(_at_least(simsimd, scores, floor), position_of, replaced)
        ordered = sorted(
            [(scores[c], c) for c in above] + [(s, c) for c, s in exact.items() if s >= floor],
            reverse=True,
        )
        seen: set[int | Target] = set()
        found = False
        for score, column in ordered:
            seen.update(targets_of(column))
            if len(seen) >= count:
                reach, found = score - 2 * limit, True
                break
        if found or floor == lowest:
            break
        wanted *= 4
    if reach < floor:
        above = _live(_at_least(simsimd, scores, reach), position_of, replaced)
    else:
        above = [c for c in above if scores[c] >= reach]
    if len(above) > MAX_RESCORED:
        return None
    return above + [c for c, s in exact.items() if s >= reach]


_AT_LEAST = bytes([1] * 128 + [0] * 128)  # a double's top byte: sign bit clear -> 1


def _at_least(simsimd: Any, scores: memoryview[float], floor: float) -> Iterable[int]:
    """The places of ``scores`` (doubles) that are ``>= floor``: the sign bits of
    ``scores - floor`` (one rounding of the exact difference: negative exactly when below;
    equal gives +0.0), read a byte at a time."""
    if floor == float("-inf"):
        return range(len(scores))
    ones = array("d", [1.0]) * len(scores)
    difference = simsimd.wsum(scores, ones, alpha=1.0, beta=-floor)
    flags = memoryview(difference).cast("B")[7::8].tobytes().translate(_AT_LEAST)
    out = []
    place = flags.find(1)
    while place >= 0:
        out.append(place)
        place = flags.find(1, place + 1)
    return out


def _live(
    columns: Iterable[int], position_of: memoryview[int], replaced: Collection[int]
) -> list[int]:
    """The ``columns`` that hold a surviving row (not ``replaced`` by a newer vector)."""
    if replaced:
        return [c for c in columns if position_of[c] >= 0 and c not in replaced]
    return [c for c in columns if position_of[c] >= 0]


def _rescore(
    simsimd: Any,
    block: Vectors,
    rows: memoryview[float],
    columns: list[int],
    vec: Sequence[float],
    q_norm: float,
) -> list[float] | None:
    """Exact §5.3 cosines of the vector file's ``columns``, read from its transposed copy."""
    if not columns:
        return []
    dimension = len(vec)
    width = 4 * dimension
    raw = rows.cast("B")
    # the columns' vectors one after the other (float32, row-major), component i of each at
    # i, i + dimension, …: one strided copy in C per component (no Python float per value)
    flat = array("f")
    flat.frombytes(b"".join([raw[c * width : (c + 1) * width] for c in columns]))

    def component(i: int) -> array[float]:
        return flat[i::dimension]

    dots = exact_dots(simsimd, component, vec, len(columns))
    return _finish(dots, [block.norms[c] for c in columns], q_norm)


def _cosines(
    simsimd: Any, block: Vectors, columns: list[int], vec: Sequence[float], q_norm: float
) -> list[float] | None:
    """Exact §5.3 cosines of ``block``'s ``columns``, read from its own (column) layout."""
    if not columns:
        return []
    size, matrix = block.columns, block.matrix
    if len(columns) == 1:
        (only,) = columns

        def component(i: int) -> Sequence[float]:
            return (matrix[i * size + only],)

    else:
        take = itemgetter(*columns)

        def component(i: int) -> Sequence[float]:
            picked: Sequence[float] = take(matrix[i * size : (i + 1) * size])
            return picked

    dots = exact_dots(simsimd, component, vec, len(columns))
    return _finish(dots, [block.norms[c] for c in columns], q_norm)


def _cosines_of(
    simsimd: Any, vectors: list[Vector], vec: Sequence[float], q_norm: float
) -> list[float] | None:
    """Exact §5.3 cosines of a few ``vectors`` (float32 arrays), their norms as the vector
    file's (:func:`zkr.store.dense.kernels.sequential_norms`: sequential float32 squares)."""
    if not vectors:
        return []

    def component(i: int) -> Sequence[float]:
        return array("f", [v[i] for v in vectors])

    dots = exact_dots(simsimd, component, vec, len(vectors))
    # the norms: float32 squares (a double holds each product exactly; array("f") rounds it),
    # summed in order as float32 across all vectors at once (simsimd.wsum, weights 1: exact
    # float32 sums of non-negative values), the square root rounded to float32
    sums: Any = None
    for i in range(len(vec)):
        squares = array("f", [v[i] * v[i] for v in vectors])
        sums = squares if sums is None else simsimd.wsum(sums, squares, alpha=1.0, beta=1.0)
    totals: list[float] = list(memoryview(sums).cast("B").cast("f").tolist())
    return _finish(dots, [f32(total**0.5) for total in totals], q_norm)


def _finish(dots: list[float], norms: list[float], q_norm: float) -> list[float] | None:
    """``dot / (‖q‖ × ‖s‖)`` in float32; ``None`` if one is not finite (numpy then raises the
    error of the first failing row)."""
    out = []
    for dot, norm in zip(dots, norms, strict=True):
        if not 0 < norm < float("inf"):
            return None
        score = f32(dot / f32(q_norm * norm))
        if score != score or score in (float("inf"), float("-inf")):
            return None
        out.append(score)
    return out
