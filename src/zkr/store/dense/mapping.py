"""The dense lane's mapping: which stored rows survive and which targets each stands for
(spec/retrieval.md §5.2 steps 5 and 8, §5.4, §9.3), as arrays ready for ranking.

The rules themselves are :mod:`zkr.store.eligibility`'s; this module only applies them to a
whole lane at once and numbers the targets in target order (§1), so that ties in score sort
by number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from zkr.model import TARGET_RANK, Target, TargetKind
from zkr.store.eligibility import Support, one_per_capture
from zkr.store.lanesql import ROW_ORDER
from zkr.store.vectors import LaneConfig

I64 = npt.NDArray[np.int64]


class Row(NamedTuple):
    """One current stored row in §5.2 order: its rowid, its column in its configuration's
    block, its configuration (``None``: not well-formed), target kind and id, whether the
    target can be mapped at all (evidence: source live; source: has live evidence), and for
    evidence rows the source id."""

    rowid: int
    column: int
    config: LaneConfig | None
    kind: str
    target_id: str
    mappable: object
    capture: str | None


_KIND_BY_RANK = {rank: kind for kind, rank in TARGET_RANK.items()}
_NO_IDS = np.empty(0, dtype="S1")


ID_CHUNK = 8192


def id_array(ids: list[str]) -> npt.NDArray[np.bytes_]:
    """Ids as a fixed-width bytes array (UTF-8; bytewise order is code point order)."""
    if len(ids) > 64:
        # ASCII ids (the common case) convert in C, a chunk at a time (a whole unicode
        # array costs 4 bytes per character): UTF-8 is then the same bytes
        width = max(map(len, ids)) or 1
        out = np.empty(len(ids), dtype=f"S{width}")
        try:
            for lo in range(0, len(ids), ID_CHUNK):
                out[lo : lo + ID_CHUNK] = np.asarray(ids[lo : lo + ID_CHUNK], dtype=f"U{width}")
            return out
        except UnicodeEncodeError:
            pass
    encoded = [i.encode("utf-8", "surrogatepass") for i in ids]
    width = max((len(e) for e in encoded), default=1) or 1
    return np.asarray(encoded, dtype=f"S{width}")


@dataclass
class Derived:
    """What a search needs: the lane (§9.3), the surviving rows' columns in §5.2 order, the
    targets numbered in target order (§1: ``kinds`` as kind ranks, ``ids`` as UTF-8 bytes; a
    :class:`~zkr.model.Target` is built only for the ranks a search returns), the row → target
    pairs grouped by target (``pair_rows`` from ``pair_starts``), raw Evidence targets'
    sources, and the target id of every stored row of the lane (sorted; see
    :mod:`zkr.store.changes`)."""

    lane: LaneConfig | None = None
    columns: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    source_of: dict[str, str] = field(default_factory=dict)  # Evidence target id -> source id
    kinds: npt.NDArray[np.uint8] = field(default_factory=lambda: np.empty(0, dtype=np.uint8))
    ids: npt.NDArray[np.bytes_] = field(default_factory=lambda: _NO_IDS)
    pair_rows: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pair_starts: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    row_ids: npt.NDArray[np.bytes_] = field(default_factory=lambda: _NO_IDS)
    # per surviving row (position), for patching (:func:`patch`): its rowid, its §5.2 order
    # key (a byte for the kind's place in that order, then the target id) and, for an
    # evidence row, its source id (else empty)
    pos_rowids: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pos_keys: npt.NDArray[np.bytes_] = field(default_factory=lambda: _NO_IDS)
    pos_caps: npt.NDArray[np.bytes_] = field(default_factory=lambda: _NO_IDS)

    def __len__(self) -> int:
        return len(self.kinds)

    def target(self, number: int) -> Target:
        """The target numbered ``number``."""
        kind = _KIND_BY_RANK[int(self.kinds[number])]
        return Target(kind, bytes(self.ids[number]).decode("utf-8", "surrogatepass"))

    def number(self, target: Target) -> int | None:
        """The number of ``target``, or ``None`` when it is not a dense target."""
        rank = TARGET_RANK[target.kind]
        lo = int(np.searchsorted(self.kinds, rank, "left"))
        hi = int(np.searchsorted(self.kinds, rank, "right"))
        key = target.id.encode("utf-8", "surrogatepass")
        if lo == hi or len(key) > self.ids.dtype.itemsize or key.endswith(b"\0"):
            return None
        at = lo + int(np.searchsorted(self.ids[lo:hi], key))
        return at if at < hi and bytes(self.ids[at]) == key else None

    def touches(self, ids: list[str]) -> bool:
        """Whether any of ``ids`` is the target of a stored row of the lane."""
        if not len(self.row_ids) or not ids:
            return False
        found = np.searchsorted(self.row_ids, id_array(ids).astype(self.row_ids.dtype))
        found = np.minimum(found, len(self.row_ids) - 1)
        keys = {i.encode("utf-8", "surrogatepass") for i in ids}
        return any(bytes(self.row_ids[f]) in keys for f in found.tolist())


def derive(
    rows: list[Row],
    links: list[tuple[str, str, str, object, object]],
) -> Derived:
    """The lane (§9.3), the surviving rows in §5.2 order and the targets each stands for.

    The mapping is :func:`zkr.store.eligibility.stands_for` with the live-search rule
    (``hide_linked``): a source or evidence vector whose supported claims are all non-live maps
    to nothing, as in the lexical lane (decision 16), and a claim vector maps only when the
    claim can be cited (decision 19). Raw Evidence targets that duplicate a capture are folded
    into its Source (:func:`zkr.store.eligibility.one_per_capture`).
    """
    current = [row for row in rows if row.config is not None]
    if not current:
        return Derived()
    lane = min((row.config for row in current if row.config is not None), key=LaneConfig.order_key)
    part = _Part.of([row for row in current if row.config == lane], links)
    return _assemble(lane, [part])


def derive_columns(
    lane: LaneConfig,
    rowids: I64,
    columns: I64,
    kinds: list[str],
    target_ids: list[str],
    mappable: list[bool],
    captures: list[str | None],
    links: list[tuple[str, str, str, object, object]],
) -> Derived:
    """:func:`derive` for rows already known to be the current, well-formed rows of ``lane``
    (§5.2 order), given column by column (:meth:`_Part.of_columns`)."""
    if not len(rowids):
        return Derived()
    part = _Part.of_columns(rowids, columns, kinds, target_ids, mappable, captures, links)
    return _assemble(lane, [part])


@dataclass
class _Part:
    """Surviving rows with their targets (Evidence already folded as its capture says)."""

    columns: I64
    rowids: I64
    keys: npt.NDArray[np.bytes_]
    caps: npt.NDArray[np.bytes_]
    pair_rows: I64  # positions within this part
    pair_keys: npt.NDArray[np.bytes_]  # kind rank byte + UTF-8 id of each pair's target
    source_of: dict[str, str]  # Evidence targets' sources

    @classmethod
    def of(cls, rows: list[Row], links: list[tuple[str, str, str, object, object]]) -> _Part:
        """Map ``rows`` (all of one configuration, in §5.2 order): ``links`` must hold every
        supporting link of their targets. Self-contained for capture folding only when every
        row of each capture (its source's row, its evidence's rows) is among ``rows``."""
        return cls.of_columns(
            np.asarray([row.rowid for row in rows], dtype=np.int64),
            np.asarray([row.column for row in rows], dtype=np.int64),
            [row.kind for row in rows],
            [row.target_id for row in rows],
            [bool(row.mappable) for row in rows],
            [row.capture for row in rows],
            links,
        )

    @classmethod
    def of_columns(
        cls,
        rowids: I64,
        columns: I64,
        row_kinds: list[str],
        target_ids: list[str],
        mappable: list[bool],
        captures: list[str | None],
        links: list[tuple[str, str, str, object, object]],
    ) -> _Part:
        """:meth:`of` with the rows given column by column (rowids, block columns, target
        kinds and ids, mappability, evidence rows' source ids), as a bulk refresh reads
        them."""
        by_source, by_evidence = Support(), Support()
        citable: set[str] = set()  # live claims with live supporting evidence of a live source
        for source_id, evidence_id, claim_id, live, source_live in links:
            by_source.add(source_id, claim_id, live)
            by_evidence.add(evidence_id, claim_id, live)
            if live and source_live:
                citable.add(claim_id)
        # Most rows stand for their own target: a citable claim's row, and a mappable source
        # or evidence row without any supporting link (stands_for: no claims, not linked ->
        # itself). Those are handled as arrays; only linked captures go through the rule
        # (:meth:`Support.targets`) one by one, and only Evidence targets and the Source
        # targets of their captures through one_per_capture (the others cannot change it).
        count = len(target_ids)
        own = np.zeros(count, dtype=np.bool_)  # the row stands for its own target
        linked_rows: list[tuple[int, list[Target]]] = []
        source_of: dict[str, str] = {}
        for position, (kind, target_id, can_map, capture) in enumerate(
            zip(row_kinds, target_ids, mappable, captures, strict=True)
        ):
            if kind == "claim":
                own[position] = target_id in citable
                continue
            if not can_map:
                continue  # evidence whose source is not live; source without live evidence
            if kind == "source":
                support, target_kind = by_source, TargetKind.SOURCE
            else:
                support, target_kind = by_evidence, TargetKind.EVIDENCE
                if capture is not None:
                    source_of[target_id] = capture
            if target_id in support.claims:
                mapped = support.targets(target_kind, target_id, hide_linked=True)
                if mapped:
                    linked_rows.append((position, mapped))
            else:
                own[position] = True
        own_positions = np.flatnonzero(own)
        folding: list[Target] = [t for _, mapped in linked_rows for t in mapped]
        if source_of:
            sources = set(source_of.values())
            for position in own_positions.tolist():
                kind, target_id = row_kinds[position], target_ids[position]
                if kind == "evidence" or (kind == "source" and target_id in sources):
                    folding.append(Target(TargetKind(kind), target_id))
        merged = one_per_capture((t for t in folding if t.kind is not TargetKind.CLAIM), source_of)
        kept: dict[str, str] = {}
        # pairs of rows standing for their own (unfolded) target, as arrays
        ids = id_array(target_ids)
        ranks = np.asarray([_RANK_OF_KIND[kind] for kind in row_kinds], dtype=np.uint8)
        if merged:
            folded = {t.id for t in merged if t.kind is TargetKind.EVIDENCE}
            own_list = own_positions.tolist()
            keep_own = [
                p for p in own_list if row_kinds[p] != "evidence" or target_ids[p] not in folded
            ]
            for p in own_list:
                if row_kinds[p] == "evidence" and target_ids[p] in folded:
                    linked_rows.append((p, [Target(TargetKind.EVIDENCE, target_ids[p])]))
            own_positions = np.asarray(keep_own, dtype=np.int64)
        for position in own_positions.tolist():
            if row_kinds[position] == "evidence":
                kept[target_ids[position]] = source_of[target_ids[position]]
        pair_rows: list[int] = []
        pair_keys: list[bytes] = []
        for position, mapped in linked_rows:
            for target in mapped:
                target = merged.get(target, target)
                if target.kind is TargetKind.EVIDENCE:
                    kept[target.id] = source_of[target.id]
                pair_rows.append(position)
                pair_keys.append(_key(TARGET_RANK[target.kind], target.id))
        own_keys = _join(ranks[own_positions], ids[own_positions]) if len(own_positions) else None
        all_rows = np.concatenate([own_positions.astype(np.int64), np.asarray(pair_rows, np.int64)])
        listed_keys = _bytes(pair_keys) if pair_keys else None
        all_keys = _concat_keys([k for k in (own_keys, listed_keys) if k is not None])
        # pairs in row order (a row's targets in their order), as the rule lists them
        order = np.argsort(all_rows, kind="stable")
        return cls(
            columns=columns,
            rowids=rowids,
            keys=_join(np.asarray([ROW_ORDER[kind] for kind in row_kinds], dtype=np.uint8), ids)
            if count
            else _NO_IDS,
            caps=id_array([capture or "" for capture in captures]),
            pair_rows=all_rows[order],
            pair_keys=all_keys[order] if len(all_keys) else _NO_IDS,
            source_of=kept,
        )


_RANK_OF_KIND = {kind.value: rank for kind, rank in TARGET_RANK.items()}


def _concat_keys(parts: list[npt.NDArray[np.bytes_]]) -> npt.NDArray[np.bytes_]:
    if not parts:
        return _NO_IDS
    width = max(p.dtype.itemsize for p in parts)
    return np.concatenate([p.astype(f"S{width}") for p in parts])


def _key(rank: int, target_id: str) -> bytes:
    return bytes((rank,)) + target_id.encode("utf-8", "surrogatepass")


def _bytes(values: list[bytes]) -> npt.NDArray[np.bytes_]:
    width = max((len(v) for v in values), default=1) or 1
    return np.asarray(values, dtype=f"S{width}")


def split_keys(
    keys: npt.NDArray[np.bytes_],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bytes_]]:
    """Rank bytes and ids of keys made by :func:`_key`."""
    width = keys.dtype.itemsize
    raw = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), width)
    kinds = raw[:, 0].copy()
    if width == 1:
        return kinds, np.zeros(len(keys), dtype="S1")
    ids = np.ascontiguousarray(raw[:, 1:]).view(f"S{width - 1}").reshape(len(keys))
    return kinds, ids


def _join(kinds: npt.NDArray[np.uint8], ids: npt.NDArray[np.bytes_]) -> npt.NDArray[np.bytes_]:
    """Keys (:func:`_key`) of targets given as rank bytes and ids."""
    width = ids.dtype.itemsize
    raw = np.empty((len(ids), width + 1), dtype=np.uint8)
    raw[:, 0] = kinds
    raw[:, 1:] = np.ascontiguousarray(ids).view(np.uint8).reshape(len(ids), width)
    return raw.view(f"S{width + 1}").reshape(len(ids))


def _assemble(lane: LaneConfig, parts: list[_Part]) -> Derived:
    """One :class:`Derived` from parts whose rows and targets do not overlap: rows put in
    §5.2 order (a stable sort by kind and target id; the rows of one target come from one
    part, in its order), targets numbered in target order (§1), so that ties in score sort by
    number."""
    sizes = [len(p.columns) for p in parts]
    offsets = np.cumsum([0, *sizes])[:-1]
    keys = np.concatenate([p.keys for p in parts])
    order = np.argsort(keys, kind="stable")
    place = np.empty(len(order), dtype=np.int64)
    place[order] = np.arange(len(order), dtype=np.int64)
    pair_rows = place[
        np.concatenate([p.pair_rows + o for p, o in zip(parts, offsets, strict=True)])
    ]
    pair_keys = np.concatenate([p.pair_keys for p in parts])
    unique, numbers = np.unique(pair_keys, return_inverse=True)
    numbers = numbers.reshape(-1).astype(np.int64)
    by_target = np.argsort(numbers, kind="stable")
    starts = np.flatnonzero(np.diff(numbers[by_target], prepend=-1)).astype(np.int64)
    kinds, ids = split_keys(unique)
    source_of: dict[str, str] = {}
    for part in parts:
        source_of.update(part.source_of)
    return Derived(
        lane=lane,
        columns=np.concatenate([p.columns for p in parts])[order],
        source_of=source_of,
        kinds=kinds,
        ids=ids if len(ids) else _NO_IDS,
        pair_rows=pair_rows[by_target],
        pair_starts=starts,
        pos_rowids=np.concatenate([p.rowids for p in parts])[order],
        pos_keys=keys[order],
        pos_caps=np.concatenate([p.caps for p in parts])[order],
    )


def patch(
    derived: Derived,
    removed: npt.NDArray[np.bool_],
    rows: list[Row],
    links: list[tuple[str, str, str, object, object]],
) -> Derived:
    """``derived`` with the surviving rows flagged in ``removed`` replaced by ``rows`` (of
    ``derived.lane``'s configuration, §5.2 order), mapped with ``links``. Equal to
    :func:`derive` over the whole lane when every row whose mapping can have changed is
    removed and re-read, and with it every row of the same captures (what
    :mod:`zkr.store.dense.patching` does); the lane must not change (its caller checks)."""
    assert derived.lane is not None
    keep = ~removed
    target_of = np.repeat(
        np.arange(len(derived.pair_starts), dtype=np.int64),
        np.diff(np.append(derived.pair_starts, len(derived.pair_rows))),
    )
    kept_pairs = keep[derived.pair_rows]
    renumber = np.cumsum(keep) - 1
    kept_targets = target_of[kept_pairs]
    old_keys = _join(derived.kinds, derived.ids) if len(derived.kinds) else _NO_IDS
    kept_evidence = {
        bytes(i).decode("utf-8", "surrogatepass")
        for i in derived.ids[np.unique(kept_targets)][
            derived.kinds[np.unique(kept_targets)] == TARGET_RANK[TargetKind.EVIDENCE]
        ].tolist()
    }
    old = _Part(
        columns=derived.columns[keep],
        rowids=derived.pos_rowids[keep],
        keys=derived.pos_keys[keep],
        caps=derived.pos_caps[keep],
        pair_rows=renumber[derived.pair_rows[kept_pairs]],
        pair_keys=old_keys[kept_targets] if len(kept_targets) else _NO_IDS,
        source_of={k: v for k, v in derived.source_of.items() if k in kept_evidence},
    )
    new = _Part.of(rows, links)
    out = _assemble(derived.lane, [old, new])
    out.row_ids = derived.row_ids
    return out
