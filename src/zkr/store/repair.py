"""``repair``: drain one bounded batch of the projection-repair outbox (spec/lifecycle.md §3.12).

``correct``, ``delete``, ``promote``, ``archive`` and ``apply`` enqueue the targets whose
projections may be out of date; ``repair`` brings the derived rows of each target back in line
with its current state, inside one ``BEGIN IMMEDIATE`` transaction:

* a target that is missing or not live loses every embedding row in scope (all models and
  versions) and, for a source, its full-text row;
* a live target keeps an embedding row only if it is still current: same revision and input
  hash, well-formed, and in the lane its (model, version) expects (spec/retrieval.md §9.3,
  with this target as the replacement: its own row alone sets no expectation).

Repair never creates embeddings and never rebuilds full-text rows. Every selected outbox row is
stamped with one ``unixepoch()`` value read once per call; rows with a target kind other than
source/evidence/claim are stamped but not counted. One ``repair`` operation row is written even
when nothing was pending. No commit-feed record. A crash before COMMIT leaves every row
unstamped, so the batch is simply redone.

Deliberate deviation (docs/decisions-retrieval-dense.md, lifecycle surprise #28): a stored row
whose ``normalization`` or ``distance`` cell cannot be decoded is deleted as invalid, where the
reference aborts the whole call with a JSON error.
"""

from __future__ import annotations

import sqlite3

from zkr.model import LimitRequest, Target, TargetKind
from zkr.store.db import write_tx
from zkr.store.derived import drop_fts, log_operation
from zkr.store.embeddings import lane, projection_input, stored_row
from zkr.text import bounded_limit, require_scope

_KINDS = {kind.value: kind for kind in TargetKind}

# §3.12 step 1: the scope's pending rows, oldest first, ties by id.
_PENDING_SQL = """
SELECT rowid, target_kind, target_id FROM memory_repair_outbox
WHERE tenant_id = ? AND person_id = ? AND processed_at IS NULL
ORDER BY created_at, id
LIMIT ?
"""


def repair(conn: sqlite3.Connection, req: LimitRequest) -> int:
    """Process at most ``limit`` (bounded: 0 → 10, > 100 → 100) pending outbox rows of the
    scope; returns how many had a valid target kind."""
    require_scope(req.tenant_id, req.person_id)
    limit = bounded_limit(req.limit)
    t, p = req.tenant_id, req.person_id
    with write_tx(conn, (t, p)):
        processed_at = conn.execute("SELECT unixepoch()").fetchone()[0]
        processed = 0
        for rowid, kind_text, target_id in conn.execute(_PENDING_SQL, (t, p, limit)).fetchall():
            kind = _KINDS.get(kind_text) if isinstance(kind_text, str) else None
            if kind is not None:
                _repair_target(conn, t, p, kind, target_id)
                processed += 1
            conn.execute(
                "UPDATE memory_repair_outbox SET processed_at = ?"
                " WHERE tenant_id = ? AND person_id = ? AND rowid = ?",
                (processed_at, t, p, rowid),
            )
        # §3.12 step 5: one operation row per call, even when nothing was processed.
        log_operation(conn, t, p, "repair", processed_at)
    return processed


_TARGET_ROWS_SQL = """
SELECT rowid, model, version, target_kind, target_id, target_revision, input_hash, dimension,
       normalization, distance, vector, created_at
FROM embeddings
WHERE tenant_id = ? AND person_id = ? AND target_kind = ? AND target_id = ?
ORDER BY model, version
"""


def _repair_target(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, kind: TargetKind, target_id: object
) -> None:
    target = Target(kind, target_id) if isinstance(target_id, str) else None
    current = None if target is None else projection_input(conn, tenant_id, person_id, target)
    if target is None or current is None:
        # §3.12 step 3.3: not live (or missing): drop every projection of the target.
        conn.execute(
            "DELETE FROM embeddings WHERE tenant_id = ? AND person_id = ? AND target_kind = ?"
            " AND target_id = ?",
            (tenant_id, person_id, kind.value, target_id),
        )
        if kind is TargetKind.SOURCE:
            drop_fts(conn, tenant_id, person_id, target_id)
        return
    # §3.12 step 3.4: live: keep only current, well-formed rows in their expected lane.
    rows = conn.execute(_TARGET_ROWS_SQL, (tenant_id, person_id, kind.value, target_id))
    for rowid, model, version, *cells in rows.fetchall():
        row = stored_row(cells)
        config = row.well_formed_config()
        keep = config is not None and row.matches(current)
        if keep and isinstance(model, str) and isinstance(version, str):
            expected = lane(conn, tenant_id, person_id, model, version, replacement=target)
            keep = expected is None or expected == config
        if not keep:
            conn.execute(
                "DELETE FROM embeddings WHERE tenant_id = ? AND person_id = ? AND rowid = ?",
                (tenant_id, person_id, rowid),
            )
