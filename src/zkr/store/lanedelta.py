"""The rows written to a dense lane since its lane state, read from the database for the
numpy-free search (:mod:`zkr.store.lanescan`), so that a one-shot process after a few
one-row ``embed`` calls (one CLI call each: no writer of a few rows primes the side files,
:mod:`zkr.store.priming`) still answers without numpy and without rewriting a side file.

The lane state stands for every row the change log does not name since its position; the
rows it names are read as they are now, in the search's own read transaction (whoever wrote
them: zkr, the reference, a hand edit), and are applied over the state only when that
cannot change what any other row stands for. :func:`read` returns ``None`` — the search goes
to numpy, which patches the state (:mod:`zkr.store.dense.patching`) and rewrites the side
files — unless all of these hold:

* nothing else logged since touches the state (:func:`zkr.store.changes.others_touch`, the
  half of the one trust rule :func:`~zkr.store.changes.lane_untouched` about other rows), the
  file's schema version is the state's (a VACUUM may renumber rowids) and at most
  :data:`MAX_ROWS` of the lane's rows were written;
* every written row still in the lane is of the lane's configuration; one that survived in
  the state is still current and well-formed with the same target and capture (its vector
  is replaced, what it stands for is unchanged: that depends on the target and its links,
  never on the vector); one that did not is new to its capture (§14 #12 folding: no other
  row of its source, in the state or among the written rows) — a row that stops surviving
  sends the search to numpy;
* a written row that did not survive and is current stands for what :func:`_stands_for`
  finds, by :mod:`zkr.store.eligibility`'s rules (as :func:`zkr.store.dense.mapping.derive`
  applies them to a capture of one row: no folding).
"""

from __future__ import annotations

import json
import sqlite3
from array import array

from zkr.codec import sha256_tagged
from zkr.model import Target, TargetKind
from zkr.store import changes
from zkr.store.eligibility import SCOPE_LINKS_OF_SQL, Support
from zkr.store.laneread import LaneView
from zkr.store.lanesql import CAPTURE_ROWS_SQL, PATCH_SQL, ROW_ORDER, WRITTEN_ROWS_SQL
from zkr.store.vectors import LaneConfig, Vector, decode_config, decode_vector
from zkr.typelite import Any

MAX_ROWS = 256
"""Written rows of a lane applied over its state at most; more: numpy patches the state."""


class Delta:
    """The lane's rows written since its state: ``replaced`` (a surviving row's column in the
    vector file or overlay -> its new vector; it stands for the same targets), ``added``
    (a new surviving row's vector and the targets it stands for, in order) and ``source_of``
    (the added Evidence targets' sources)."""

    __slots__ = ("added", "replaced", "source_of")

    def __init__(self) -> None:
        self.replaced: dict[int, Vector] = {}
        self.added: list[tuple[Vector, list[Target]]] = []
        self.source_of: dict[str, str] = {}


def read(
    conn: sqlite3.Connection,
    scope: tuple[str, str, str, str],
    lane: LaneView,
    items: list[str],
    written: set[int],
) -> Delta | None:
    """The rows ``written`` (rowids of the lane logged since the state's position, among the
    logged ``items``) over ``lane``'s state, or ``None`` when numpy must patch it instead
    (module docstring). Call inside the search's read transaction."""
    config = lane.config
    if (
        config is None
        or len(written) > MAX_ROWS
        or int(conn.execute("PRAGMA schema_version").fetchone()[0]) != lane.schema
        or changes.others_touch(conn, scope, items, lane.touches)
    ):
        return None
    t, p, m, v = scope
    params = {"t": t, "p": p, "m": m, "v": v}
    vectors: dict[int, object] = {}
    targets: dict[str, set[str]] = {}
    for rowid, kind, target_id, text in conn.execute(
        WRITTEN_ROWS_SQL, {**params, "rows": json.dumps(sorted(written))}
    ):
        vectors[rowid] = text
        if isinstance(kind, str) and isinstance(target_id, str):
            targets.setdefault(kind, set()).add(target_id)
    positions = lane.positions
    if any(positions.of_rowid(r) >= 0 for r in written - vectors.keys()):
        return None  # a surviving row was deleted or left the lane
    # zkr's float32 copies of the rows' vectors (the log is complete: they are trusted)
    copies = changes.copies(conn, scope, sorted(vectors))
    delta = Delta()
    new: list[tuple[str, str, object, str | None, Vector]] = []
    captures: set[str] = set()
    seen: set[int] = set()
    for kind, sql in PATCH_SQL:
        ids = targets.get(kind)
        if not ids:
            continue
        for row in conn.execute(sql, {**params, "ids": json.dumps(sorted(ids))}):
            rowid = row[0]
            if rowid not in vectors:
                continue  # a row of those targets not written since: the state has it
            seen.add(rowid)
            position = positions.of_rowid(rowid)
            if decode_config(row[3], row[4], row[5]) != config:
                return None  # another configuration (the lane may change)
            revision, text, mappable, capture = row[9], row[10], row[11], row[12]
            current = (
                revision is not None
                and row[6] == revision
                and isinstance(text, str)
                and sha256_tagged(text) == row[7]
            )
            vec = _vector(copies.get(rowid), row, vectors[rowid], config)
            if position >= 0:
                same = positions.key(position) == _order_key(kind, row[2])
                if not current or vec is None or not same or positions.cap(position) != capture:
                    return None  # it stops surviving or stands for something else
                delta.replaced[lane.columns[position]] = vec
                continue
            if not current or vec is None:
                continue  # not current: it does not survive, as before
            group = row[2] if kind == "source" else capture
            if group is not None:
                if group in captures:
                    return None  # two rows of one capture written: folding may change
                captures.add(group)
            new.append((kind, row[2], mappable, capture, vec))
    if any(positions.of_rowid(r) >= 0 for r in vectors.keys() - seen):
        return None  # a surviving row became one of no target kind
    if captures:
        # any other row of those captures, in the state (it is still in the file: a deleted
        # surviving row was refused above) or not: folding may change
        others = conn.execute(CAPTURE_ROWS_SQL, {**params, "caps": json.dumps(sorted(captures))})
        if any(rowid not in vectors for (rowid,) in others):
            return None
    if new:
        _stands_for(conn, t, p, new, delta)
    return delta


def _vector(
    copy: tuple[str, str, int, bytes] | None, row: Any, text: object, config: LaneConfig
) -> Vector | None:
    """A row's vector: zkr's float32 copy when it was kept for exactly this row (the same
    kind, target id and ``created_at``, as :func:`zkr.store.dense.blocks.decode_rows` takes
    it), else its JSON text decoded (``None``: not well-formed)."""
    if (
        copy is not None
        and copy[:3] == (row[1], row[2], row[8])
        and len(copy[3]) == 4 * config.dimension
    ):
        vec = array("f")
        vec.frombytes(copy[3])  # little-endian: the numpy-free search runs only there
        return vec
    return decode_vector(text, config.dimension, config.normalization)


def _order_key(kind: str, target_id: str) -> bytes:
    return bytes((ROW_ORDER[kind],)) + target_id.encode("utf-8", "surrogatepass")


def _stands_for(
    conn: sqlite3.Connection,
    t: str,
    p: str,
    rows: list[tuple[str, str, object, str | None, Vector]],
    delta: Delta,
) -> None:
    """What each new surviving row (kind, target id, mappable, capture, vector), alone in its
    capture, stands for (spec/retrieval.md §5.4 with the live-search rule ``hide_linked``, as
    :meth:`zkr.store.dense.mapping._Part.of_columns` applies it): a claim row its claim when
    the claim can be cited, a mappable source or evidence row its target or the claims its
    links say (:meth:`zkr.store.eligibility.Support.targets`)."""
    ids = json.dumps(sorted({target_id for _, target_id, *_ in rows}))
    by_source, by_evidence = Support(), Support()
    citable: set[str] = set()
    for source_id, evidence_id, claim_id, live, source_live in conn.execute(
        SCOPE_LINKS_OF_SQL, {"t": t, "p": p, "ids": ids}
    ):
        by_source.add(source_id, claim_id, live)
        by_evidence.add(evidence_id, claim_id, live)
        if live and source_live:
            citable.add(claim_id)
    for kind, target_id, mappable, capture, vec in rows:
        mapped: list[Target] = []
        if kind == "claim":
            if target_id in citable:
                mapped = [Target(TargetKind.CLAIM, target_id)]
        elif mappable:
            support = by_source if kind == "source" else by_evidence
            target_kind = TargetKind(kind)
            if target_id in support.claims:
                mapped = support.targets(target_kind, target_id, hide_linked=True)
            else:
                mapped = [Target(target_kind, target_id)]
            own = Target(TargetKind.EVIDENCE, target_id)
            if kind == "evidence" and capture is not None and own in mapped:
                delta.source_of[target_id] = capture
        if mapped:
            delta.added.append((vec, mapped))
