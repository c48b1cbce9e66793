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
from collections.abc import Callable

from zkr.model import TARGET_RANK, Target
from zkr.store.vectors import LaneConfig
from zkr.typelite import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser's result type: for type checkers only (no typing at run time)
    from typing import TypeVar

    _T = TypeVar("_T")

_KIND_BY_RANK = {rank: kind for kind, rank in TARGET_RANK.items()}
_ITEMSIZE = {"int64": 8, "uint8": 1, "int32": 4}


def _read(
    path: str,
    magic: bytes,
    scope: tuple[str, str, str, str],
    parse: Callable[[mmap.mmap, dict[str, Any], int], _T | None],
) -> _T | None:
    """The side file ``path`` mapped, its magic, header and lane checked, then ``parse(data,
    header, body)`` (``body``: where the header ends); ``None`` when the file is missing,
    unreadable, of another format or lane, or when ``parse`` finds it malformed (its
    ``ValueError``, ``KeyError``, ``TypeError`` and ``IndexError`` included)."""
    try:
        with open(path, "rb") as handle:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        if data[:8] != magic:
            return None
        size = int.from_bytes(data[8:16], "little")
        if 16 + size > len(data):
            return None
        header = json.loads(data[16 : 16 + size])
        if not isinstance(header, dict) or header.get("lane") != list(scope):
            return None
        return parse(data, header, 16 + size)
    except (ValueError, KeyError, TypeError, IndexError):
        return None


class LaneView:
    """The fields of a lane state file (:class:`zkr.store.vectorfile.LaneState`) a search
    needs, read in place: ``columns`` (int64 per surviving row), ``kinds`` (uint8 per target),
    ``ids`` (``width``-byte UTF-8 per target, NUL-padded), ``row_ids`` (sorted, ``row_width``
    bytes each), ``positions`` (the surviving rows' rowids, order keys and captures)."""

    __slots__ = (
        "columns",
        "config",
        "extra",
        "generation",
        "ids",
        "kinds",
        "positions",
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
        positions: Positions,
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
        self.positions = positions

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

    def place(self, target: Target) -> tuple[int, bool]:
        """Where ``target`` stands among the lane's targets in target order (§1: kind rank,
        then UTF-8 id bytewise, as the numbers go): its number and ``True`` when it is one of
        them, else the number of targets before it and ``False``."""
        rank = TARGET_RANK[target.kind]
        key = target.id.encode("utf-8", "surrogatepass")
        width, kinds, ids = self.width, self.kinds, self.ids

        def at(number: int) -> tuple[int, bytes]:
            return kinds[number], bytes(ids[number * width : (number + 1) * width]).rstrip(b"\0")

        found = bisect.bisect_left(range(len(kinds)), (rank, key), key=at)
        return found, found < len(kinds) and at(found) == (rank, key)


class Positions:
    """A lane state's surviving rows (positions, in §5.2 order), read in place: each one's
    rowid (int64), order key (:data:`zkr.store.lanesql.ROW_ORDER` byte, then the target's
    UTF-8 id; ``key_width`` bytes, NUL-padded) and capture (an evidence row's source id, else
    empty; ``cap_width`` bytes)."""

    __slots__ = ("_found", "_top", "cap_width", "caps", "key_width", "keys", "rowids")

    def __init__(
        self, rowids: memoryview, keys: memoryview, key_width: int, caps: memoryview, cap_width: int
    ) -> None:
        self.rowids = rowids
        self.keys = keys
        self.key_width = key_width
        self.caps = caps
        self.cap_width = cap_width
        self._found: dict[str, bytes] = {}
        self._top: int | None = None

    def of_rowid(self, rowid: int) -> int:
        """The position of the surviving row ``rowid``, or -1 (a row inserted since, the
        common case, is past the largest rowid: nothing to search)."""
        if self._top is None:
            self._top = max(self.rowids.cast("q"), default=-1)
        if rowid > self._top:
            return -1
        found = self._find("rowids", rowid.to_bytes(8, "little", signed=True), 8)
        return -1 if found < 0 else found // 8

    def key(self, position: int) -> bytes:
        """The order key of the row at ``position`` (padding removed)."""
        width = self.key_width
        return bytes(self.keys[position * width : (position + 1) * width]).rstrip(b"\0")

    def cap(self, position: int) -> str | None:
        """The capture of the row at ``position`` (``None`` for a row that is not evidence)."""
        width = self.cap_width
        raw = bytes(self.caps[position * width : (position + 1) * width]).rstrip(b"\0")
        return raw.decode("utf-8", "surrogatepass") or None

    def _find(self, name: str, needle: bytes, step: int) -> int:
        """The first offset of ``needle`` in the array ``name`` that is a multiple of ``step``,
        or -1 (the array copied once, in C, then searched in C)."""
        raw = self._found.get(name)
        if raw is None:
            raw = self._found[name] = getattr(self, name).tobytes()
        found = raw.find(needle)
        while found >= 0 and found % step:
            found = raw.find(needle, found + 1)
        return found


def _itemsize(dtype: str) -> int | None:
    if dtype.lstrip("|").startswith("S"):
        return int(dtype.lstrip("|")[1:])
    return _ITEMSIZE.get(dtype)


def read_lane(path: str, scope: tuple[str, str, str, str]) -> LaneView | None:
    """The lane state file (format: :func:`zkr.store.vectorfile.write_state`), or ``None``."""
    return _read(path, b"ZKRLANE2", scope, _lane)


def _lane(data: mmap.mmap, header: dict[str, Any], offset: int) -> LaneView | None:
    if len(header["arrays"]) != 10:
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
    (pos_rowids, _), (pos_keys, key_width), (pos_caps, cap_width) = arrays[6:9]
    if columns.nbytes % 8 or pos_rowids.nbytes % 8:
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
        positions=Positions(pos_rowids, pos_keys, key_width, pos_caps, cap_width),
    )


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

    def parse(data: mmap.mmap, header: dict[str, Any], start: int) -> Vectors | None:
        total = len(data)
        if not 0 <= int(header["meta"]) <= total:
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

    return _read(path, b"ZKRVEC03", scope, parse)


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

    def parse(data: mmap.mmap, header: dict[str, Any], offset: int) -> memoryview[float] | None:
        if header.get("token") != token or header.get("config") != config.to_json():
            return None
        size = 4 * int(header["columns"]) * config.dimension
        offset = _aligned(offset)
        if offset + size > len(data):
            return None
        return memoryview(data)[offset : offset + size].cast("f")

    return _read(path, ROWS_MAGIC, scope, parse)


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
    key = state_key(lane.token, lane.extra, lane.generation, lane.seq, lane.schema, lane.sizes)

    def parse(data: mmap.mmap, header: dict[str, Any], offset: int) -> Index | None:
        if header.get("state") != key:
            return None
        view = memoryview(data)
        empty = view[:0].cast("q")
        if not header.get("usable"):
            return Index(False, empty, empty, empty)
        rows, columns, pairs = int(header["rows"]), int(header["columns"]), int(header["pairs"])
        arrays = []
        offset = _aligned(offset)
        for size in (columns, rows + 1, pairs):
            arrays.append(view[offset : offset + 8 * size].cast("q"))
            offset += 8 * size
        if offset > len(data) or rows * 8 != lane.columns.nbytes:
            return None
        return Index(True, *arrays)

    return _read(path, INDEX_MAGIC, scope, parse)
