"""Readers of the side files the numpy-free warm search (:mod:`zkr.store.lanescan`) scans:
the lane state file (``.lane``), the vector file and overlay (``.bin``/``.add``), the vector
file's row-major copy (``.rows``) and the index of one lane state (``.fast``), each mapped and
read in place (no numpy: formats written by :mod:`zkr.store.vectorfile` and
:mod:`zkr.store.dense.prefilter`). Every reader returns ``None`` for a file that is missing,
unreadable, of another lane or of another state; the caller then leaves the search to numpy.
The views are classes with ``__slots__``, not named tuples: a ``NamedTuple`` of string
annotations would compile each one in every one-shot process (docs/DEVELOPING.md).
"""

from __future__ import annotations

import bisect
import json
import mmap

from zkr.model import TARGET_RANK, Target
from zkr.store.vectors import LaneConfig
from zkr.typelite import Any

_KIND_BY_RANK = {rank: kind for kind, rank in TARGET_RANK.items()}
_ITEMSIZE = {"int64": 8, "uint8": 1, "int32": 4}


def _mapped(path: str) -> mmap.mmap | None:
    try:
        with open(path, "rb") as handle:
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


def _header(data: mmap.mmap, magic: bytes) -> tuple[dict[str, Any], int] | None:
    if data[:8] != magic:
        return None
    size = int.from_bytes(data[8:16], "little")
    if 16 + size > len(data):
        return None
    header = json.loads(data[16 : 16 + size])
    return (header, 16 + size) if isinstance(header, dict) else None


class LaneView:
    """The fields of a lane state file (:class:`zkr.store.vectorfile.LaneState`) a search
    needs, read in place: ``columns`` (int64 per surviving row), ``kinds`` (uint8 per target),
    ``ids`` (``width``-byte UTF-8 per target, NUL-padded), ``row_ids`` (sorted, ``row_width``
    bytes each)."""

    __slots__ = (
        "columns",
        "config",
        "extra",
        "generation",
        "ids",
        "kinds",
        "row_ids",
        "row_width",
        "schema",
        "seq",
        "sizes",
        "source_of",
        "token",
        "width",
    )

    def __init__(
        self,
        *,
        token: str,
        extra: str,
        generation: str,
        seq: int,
        schema: int,
        config: LaneConfig | None,
        columns: memoryview,
        kinds: memoryview,
        ids: memoryview,
        width: int,
        row_ids: memoryview,
        row_width: int,
        source_of: dict[str, str],
        sizes: list[int],
    ) -> None:
        self.token = token
        self.extra = extra
        self.generation = generation
        self.seq = seq
        self.schema = schema
        self.config = config
        self.columns = columns
        self.kinds = kinds
        self.ids = ids
        self.width = width
        self.row_ids = row_ids
        self.row_width = row_width
        self.source_of = source_of
        self.sizes = sizes

    def target(self, number: int) -> Target:
        kind = _KIND_BY_RANK[self.kinds[number]]
        raw = bytes(self.ids[number * self.width : (number + 1) * self.width]).rstrip(b"\0")
        return Target(kind, raw.decode("utf-8", "surrogatepass"))

    def touches(self, ids: list[str]) -> bool:
        """:meth:`zkr.store.dense.mapping.Derived.touches` over the file."""
        width, data = self.row_width, self.row_ids
        count = len(data) // width if width else 0
        if not count or not ids:
            return False

        def at(index: int) -> bytes:
            return bytes(data[index * width : (index + 1) * width])

        for target_id in ids:
            key = target_id.encode("utf-8", "surrogatepass")
            if len(key) > width:
                continue
            padded = key + b"\0" * (width - len(key))
            place = bisect.bisect_left(range(count), padded, key=at)
            if place < count and at(place).rstrip(b"\0") == key:
                return True
        return False


def _itemsize(dtype: str) -> int | None:
    if dtype.lstrip("|").startswith("S"):
        return int(dtype.lstrip("|")[1:])
    return _ITEMSIZE.get(dtype)


def read_lane(path: str, scope: tuple[str, str, str, str]) -> LaneView | None:
    """The lane state file (format: :func:`zkr.store.vectorfile.write_state`), or ``None``."""
    data = _mapped(path)
    if data is None:
        return None
    try:
        found = _header(data, b"ZKRLANE2")
        if found is None:
            return None
        header, offset = found
        if header.get("lane") != list(scope) or len(header["arrays"]) != 10:
            return None
        view = memoryview(data)
        arrays: list[tuple[memoryview, int]] = []
        for dtype, count in header["arrays"]:
            size = _itemsize(str(dtype))
            if size is None or offset + size * int(count) > len(data):
                return None
            arrays.append((view[offset : offset + size * int(count)], size))
            offset += size * int(count)
        config = header["config"]
        (columns, _), (kinds, _), (ids, width), _, _, (row_ids, row_width) = arrays[:6]
        if columns.nbytes % 8:
            return None
        return LaneView(
            token=str(header["token"]),
            extra=str(header.get("extra", "")),
            generation=str(header["generation"]),
            seq=int(header["seq"]),
            schema=int(header.get("schema", -1)),
            config=None if config is None else LaneConfig.from_json(config),
            columns=columns.cast("q"),
            kinds=kinds,
            ids=ids,
            width=width,
            row_ids=row_ids,
            row_width=row_width,
            source_of={str(k): str(v) for k, v in header["source_of"].items()},
            sizes=[int(count) for _, count in header["arrays"]],
        )
    except (ValueError, KeyError, TypeError, IndexError):
        return None


class Vectors:
    """One configuration's block of a vector file or overlay (format:
    :func:`zkr.store.vectorfile.write`), mapped: the token naming that write, the file's
    configurations, the (``dimension`` × ``columns``) float32 matrix and the norms."""

    __slots__ = ("columns", "configs", "matrix", "norms", "token")

    def __init__(
        self,
        token: str,
        configs: list[LaneConfig],
        matrix: memoryview[float],
        norms: memoryview[float],
        columns: int,
    ) -> None:
        self.token = token
        self.configs = configs
        self.matrix = matrix
        self.norms = norms
        self.columns = columns


def read_vectors(path: str, scope: tuple[str, str, str, str], config: LaneConfig) -> Vectors | None:
    """``config``'s block of a vector file, or ``None`` when missing, unreadable, of another
    lane or without that configuration (offsets: :func:`zkr.store.vectorfile.read` with
    ``rows=False``)."""
    data = _mapped(path)
    if data is None:
        return None
    try:
        found = _header(data, b"ZKRVEC03")
        if found is None:
            return None
        header, start = found
        total = len(data)
        if header.get("lane") != list(scope) or not 0 <= int(header["meta"]) <= total:
            return None
        offset = start + int(header["meta"]) + 21 * int(header["rows"])
        configs: list[LaneConfig] = []
        chosen = None
        view = memoryview(data)
        for entry in header["configs"]:
            this = LaneConfig.from_json(entry)
            configs.append(this)
            rows, cols = this.dimension, int(entry[3])
            offset = _aligned(offset)
            norms_at = _aligned(offset + 4 * rows * cols)
            if rows <= 0 or cols <= 0 or norms_at + 4 * cols > total:
                return None
            if this == config:
                matrix = view[offset : offset + 4 * rows * cols].cast("f")
                chosen = (matrix, view[norms_at : norms_at + 4 * cols].cast("f"), cols)
            offset = norms_at + 4 * cols
        if chosen is None:
            return None
        return Vectors(str(header.get("token", "")), configs, *chosen)
    except (ValueError, KeyError, TypeError):
        return None


def _aligned(offset: int) -> int:
    return -(-offset // 64) * 64


ROWS_MAGIC = b"ZKRROWS1"
INDEX_MAGIC = b"ZKRFAST2"


def read_rows(
    path: str, scope: tuple[str, str, str, str], token: str, config: LaneConfig
) -> memoryview[float] | None:
    """The ``.rows`` file (:func:`zkr.store.dense.prefilter.write_rows`) of the vector file
    named ``token``: its ``config`` block transposed (``columns`` × ``dimension`` float32,
    one vector's components together), flat; ``None`` when missing or of another file."""
    data = _mapped(path)
    if data is None:
        return None
    try:
        found = _header(data, ROWS_MAGIC)
        if found is None:
            return None
        header, offset = found
        wanted = config.to_json()
        if (
            header.get("lane") != list(scope)
            or header.get("token") != token
            or header.get("config") != wanted
        ):
            return None
        size = 4 * int(header["columns"]) * config.dimension
        offset = _aligned(offset)
        if offset + size > len(data):
            return None
        return memoryview(data)[offset : offset + size].cast("f")
    except (ValueError, KeyError, TypeError):
        return None


def state_key(
    token: str, extra: str, generation: str, seq: int, schema: int, sizes: list[int]
) -> list[object]:
    """What names one lane state: its vector file and overlay tokens, log position, schema
    version and array sizes (an index is valid for exactly that state)."""
    return [token, extra, generation, seq, schema, sizes]


class Index:
    """The ``.fast`` file (:func:`zkr.store.dense.prefilter.write_index`) of one lane state:
    whether the fast scan may serve it (:data:`zkr.store.lanescan.NORM_SPREAD`), each column's row
    (``position_of``, numbered across the vector file then its overlay; −1: no surviving row)
    and the targets each row stands for (``starts[row]`` to ``starts[row + 1]`` in
    ``targets``)."""

    __slots__ = ("position_of", "starts", "targets", "usable")

    def __init__(
        self,
        usable: bool,
        position_of: memoryview[int],
        starts: memoryview[int],
        targets: memoryview[int],
    ) -> None:
        self.usable = usable
        self.position_of = position_of
        self.starts = starts
        self.targets = targets

    def targets_of(self, column: int) -> memoryview[int]:
        row = self.position_of[column]
        return self.targets[self.starts[row] : self.starts[row + 1]]


def read_index(path: str, scope: tuple[str, str, str, str], lane: LaneView) -> Index | None:
    """The index written for exactly ``lane``'s state, or ``None``."""
    data = _mapped(path)
    if data is None:
        return None
    try:
        found = _header(data, INDEX_MAGIC)
        if found is None:
            return None
        header, offset = found
        key = state_key(lane.token, lane.extra, lane.generation, lane.seq, lane.schema, lane.sizes)
        if header.get("lane") != list(scope) or header.get("state") != key:
            return None
        view = memoryview(data)
        empty = view[:0].cast("q")
        if not header.get("usable"):
            return Index(False, empty, empty, empty)
        rows, columns, pairs = int(header["rows"]), int(header["columns"]), int(header["pairs"])
        sizes = (columns, rows + 1, pairs)
        arrays = []
        offset = _aligned(offset)
        for size in sizes:
            arrays.append(view[offset : offset + 8 * size].cast("q"))
            offset += 8 * size
        if offset > len(data) or rows * 8 != lane.columns.nbytes:
            return None
        return Index(True, *arrays)
    except (ValueError, KeyError, TypeError):
        return None
