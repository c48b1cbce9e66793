"""``settle``: move a pending or blocked claim out of pending (docs/inspect.md, "settle").

The reference has no local way to change ``processing_state`` (spec/lifecycle.md §5 item 5):
only ``apply`` does, from a claim record whose mutable fields changed (spec/sync.md §4.5
"Claim"). ``settle`` is that change made locally: it updates the one column, enqueues
projection repair, logs a ``settle`` operation and appends one commit holding the updated claim
record — exactly the record a peer's ``apply`` (ours or the reference's) overwrites the five
mutable fields from, so replicas follow.

Transitions: pending → processed, pending → blocked, blocked → processed. The claim must be
accepted (a superseded or retracted claim is history; settling it would change nothing anyone
can retrieve) and in scope. The legal-state matrix (spec/lifecycle.md §2.1) holds trivially:
only short_term claims can be pending or blocked, and short_term allows every state.
"""

from __future__ import annotations

import sqlite3

from zkr.errors import InvalidInput, NotFound
from zkr.model import ProcessingState, SettleRequest, SettleResult
from zkr.store import feed
from zkr.store.db import write_tx
from zkr.store.derived import STATE_CHANGED, enqueue_repair, log_operation
from zkr.text import require_scope

_ALLOWED = {
    (ProcessingState.PENDING, ProcessingState.PROCESSED),
    (ProcessingState.PENDING, ProcessingState.BLOCKED),
    (ProcessingState.BLOCKED, ProcessingState.PROCESSED),
}


def settle(conn: sqlite3.Connection, req: SettleRequest) -> SettleResult:
    """Set an accepted claim's ``processing_state`` (one transaction, one commit).

    Returns ``{"claim_id", "processing_state"}``. Raises ``NotFound`` for a claim not in
    scope, ``InvalidInput`` for ``settle requires an active claim`` (not accepted), an
    illegal transition (``cannot settle a processed claim`` …) and ``settle recorded_at must
    not predate claim``. Settling a claim to the state it already has is a no-op (no commit).
    """
    require_scope(req.tenant_id, req.person_id)
    t, p = req.tenant_id, req.person_id
    target = req.processing_state
    with write_tx(conn, (t, p)):
        row = conn.execute(
            "SELECT status, processing_state, recorded_from FROM claims"
            " WHERE id = ? AND tenant_id = ? AND person_id = ?",
            (req.claim_id, t, p),
        ).fetchone()
        if row is None:
            raise NotFound()
        status, state, recorded_from = row
        if status != "accepted":
            raise InvalidInput("settle requires an active claim")
        if state == target.value:
            return SettleResult(req.claim_id, state)
        if (ProcessingState(state), target) not in _ALLOWED:
            raise InvalidInput(
                f"cannot settle a {state} claim to {target.value}"
                " (pending may become processed or blocked, blocked may become processed)"
            )
        if req.recorded_at < recorded_from:
            raise InvalidInput("settle recorded_at must not predate claim")
        conn.execute(
            "UPDATE claims SET processing_state = ?"
            " WHERE tenant_id = ? AND person_id = ? AND id = ?",
            (target.value, t, p, req.claim_id),
        )
        enqueue_repair(conn, t, p, "claim", req.claim_id, STATE_CHANGED, req.recorded_at)
        log_operation(conn, t, p, "settle", req.recorded_at, req.claim_id)
        feed.append_commit(
            conn, t, p, req.recorded_at, [feed.claim_record(conn, req.claim_id, (t, p))]
        )
    return SettleResult(req.claim_id, target.value)
