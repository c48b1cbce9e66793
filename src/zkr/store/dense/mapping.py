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
from zkr.store.vectors import LaneConfig

I64 = npt.NDArray[np.int64]


class Row(NamedTuple):
    """One current stored row in §5.2 order: its column in its configuration's block, its
    configuration (``None``: not well-formed), target kind and id, whether the target can be
    mapped at all (evidence: source live; source: has live evidence), and for evidence rows
    the source id."""

    column: int
    config: LaneConfig | None
    kind: str
    target_id: str
    mappable: object
    capture: str | None


_KIND_BY_RANK = {rank: kind for kind, rank in TARGET_RANK.items()}
_NO_IDS = np.empty(0, dtype="S1")


def id_array(ids: list[str]) -> npt.NDArray[np.bytes_]:
    """Ids as a fixed-width bytes array (UTF-8; bytewise order is code point order)."""
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
    by_source, by_evidence = Support(), Support()
    citable: set[str] = set()  # live claims with live supporting evidence of a live source
    for source_id, evidence_id, claim_id, live, source_live in links:
        by_source.add(source_id, claim_id, live)
        by_evidence.add(evidence_id, claim_id, live)
        if live and source_live:
            citable.add(claim_id)
    current = [row for row in rows if row.config is not None]
    if not current:
        return Derived()
    lane = min((row.config for row in current if row.config is not None), key=LaneConfig.order_key)
    columns: list[int] = []
    mapped_rows: list[tuple[int, list[Target]]] = []
    source_of: dict[str, str] = {}
    for row in current:
        if row.config != lane:
            continue
        position = len(columns)
        columns.append(row.column)
        target_id, kind = row.target_id, row.kind
        if kind == "claim":
            mapped = [Target(TargetKind.CLAIM, target_id)] if target_id in citable else []
        elif not row.mappable:
            mapped = []  # evidence whose source is not live; source without live evidence
        elif kind == "source":
            mapped = by_source.targets(TargetKind.SOURCE, target_id, hide_linked=True)
        else:
            mapped = by_evidence.targets(TargetKind.EVIDENCE, target_id, hide_linked=True)
            if row.capture is not None:
                source_of[target_id] = row.capture
        if mapped:
            mapped_rows.append((position, mapped))
    merged = one_per_capture((t for _, mapped in mapped_rows for t in mapped), source_of)
    targets: list[Target] = []
    index: dict[Target, int] = {}
    pair_rows: list[int] = []
    pair_targets: list[int] = []
    for position, mapped in mapped_rows:
        for target in mapped:
            target = merged.get(target, target)
            number = index.get(target)
            if number is None:
                number = index[target] = len(targets)
                targets.append(target)
            pair_rows.append(position)
            pair_targets.append(number)
    # Number targets in target order (§1), so that ties in score sort by number.
    keys = [(TARGET_RANK[t.kind], t.id) for t in targets]
    ordered = sorted(range(len(targets)), key=keys.__getitem__)
    renumber = np.empty(len(targets), dtype=np.int64)
    renumber[np.asarray(ordered, dtype=np.int64)] = np.arange(len(targets), dtype=np.int64)
    rows_arr = np.asarray(pair_rows, dtype=np.int64)
    targets_arr = renumber[np.asarray(pair_targets, dtype=np.int64)]
    by_target = np.argsort(targets_arr, kind="stable")
    starts = np.flatnonzero(np.diff(targets_arr[by_target], prepend=-1)).astype(np.int64)
    targets = [targets[i] for i in ordered]
    return Derived(
        lane=lane,
        columns=np.asarray(columns, dtype=np.int64),
        source_of={t.id: source_of[t.id] for t in targets if t.kind is TargetKind.EVIDENCE},
        kinds=np.asarray([TARGET_RANK[t.kind] for t in targets], dtype=np.uint8),
        ids=id_array([t.id for t in targets]),
        pair_rows=rows_arr[by_target],
        pair_starts=starts,
    )
