"""Side effects on derived state: the one place that writes them (spec/lifecycle.md §1.5).

Authoritative rows (sources, evidence, claims, …) are written by the command that owns them;
what follows from such a write is written here, for ``remember``, the lifecycle commands,
``settle``, ``apply``, ``repair`` and ``erase`` alike:

* **projection-repair work**: a pending ``memory_repair_outbox`` row naming a target whose
  projections (embeddings, full-text row) may be out of date, drained by
  :mod:`zkr.store.repair`;
* **the operation log**: one ``memory_operations`` row with status ``success``;
* **the full-text row** of a live source in ``source_fts`` (added with the source, dropped when
  it is tombstoned; never rebuilt from anything else, spec/lifecycle.md §3.12).

Outbox reasons and operation types are stored bare (spec/storage.md §2.3). Every function runs
inside the caller's write transaction and commits nothing itself.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from zkr.store.driver import is_postgres
from zkr.text import new_id

# Outbox reasons (spec/storage.md §2.3, bare text).
SUPERSEDED_SYNC = "superseded_sync"
DELETE_SYNC = "delete_sync"
TIER_CHANGED = "tier_changed"
APPLY_SYNC = "apply_sync"
STATE_CHANGED = "state_changed"  # zkr's own ``settle`` (docs/inspect.md), informational


# --------------------------------------------------------------------------- repair outbox

_ENQUEUE_SQL = (
    "INSERT INTO memory_repair_outbox (id, tenant_id, person_id, target_kind, target_id,"
    " reason, created_at, processed_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)"
)

# Several targets in one statement, in the given order (delete's cascade, §3.7 write 5).
_ENQUEUE_MANY_SQL = """
INSERT INTO memory_repair_outbox (id, tenant_id, person_id, target_kind, target_id, reason,
  created_at, processed_at)
SELECT lower(hex(randomblob(16))), :t, :p, json_extract(value, '$[0]'),
  json_extract(value, '$[1]'), :reason, :created_at, NULL
FROM json_each(:targets) ORDER BY key
"""


def enqueue_repair(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    target_kind: str,
    target_id: str,
    reason: str,
    created_at: int,
) -> None:
    """One pending projection-repair outbox row (spec/lifecycle.md §1.5); ``created_at`` in
    Unix seconds (the command's ``recorded_at``, or ``applied_at`` for ``apply``)."""
    conn.execute(
        _ENQUEUE_SQL, (new_id(), tenant_id, person_id, target_kind, target_id, reason, created_at)
    )


def enqueue_repairs(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    targets: Sequence[tuple[str, str]],
    reason: str,
    created_at: int,
) -> None:
    """Pending outbox rows for ``(target_kind, target_id)`` pairs, in order, in one statement
    however many there are (spec/lifecycle.md §1.5, §3.7 write 5)."""
    conn.execute(
        _ENQUEUE_MANY_SQL,
        {
            "t": tenant_id,
            "p": person_id,
            "reason": reason,
            "created_at": created_at,
            "targets": json.dumps([list(target) for target in targets]),
        },
    )


# --------------------------------------------------------------------------- operation log


def log_operation(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    operation_type: str,
    recorded_at: int,
    claim_id: str | None = None,
) -> None:
    """One ``success`` row of ``memory_operations`` (spec/lifecycle.md §1.5): targeting a claim
    (``promote``, ``archive``) or, with ``claim_id=None``, the whole call (``repair``,
    ``apply``, spec/sync.md §4.3)."""
    conn.execute(
        "INSERT INTO memory_operations (id, tenant_id, person_id, operation_type, status,"
        " target_kind, target_id, recorded_at) VALUES (?, ?, ?, ?, 'success', ?, ?, ?)",
        (
            new_id(),
            tenant_id,
            person_id,
            operation_type,
            None if claim_id is None else "claim",
            claim_id,
            recorded_at,
        ),
    )


# --------------------------------------------------------------------------- full-text rows


def add_fts(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, source_id: str, content: str
) -> None:
    """The full-text row of a new live source (spec/storage.md §2.2 ``source_fts``)."""
    conn.execute(
        "INSERT INTO source_fts (source_id, tenant_id, person_id, content) VALUES (?, ?, ?, ?)",
        (source_id, tenant_id, person_id, content),
    )


def drop_fts(conn: sqlite3.Connection, tenant_id: str, person_id: str, source_id: object) -> None:
    """Drop a source's full-text row (tombstoned or repaired away, spec/lifecycle.md §3.7,
    §3.12); no row is fine."""
    conn.execute(
        "DELETE FROM source_fts WHERE source_id = ? AND tenant_id = ? AND person_id = ?",
        (source_id, tenant_id, person_id),
    )


def drop_fts_of(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, source_ids: Sequence[str]
) -> None:
    """Drop the full-text rows of several sources of one scope in one statement (the scope
    keeps a distributed PostgreSQL store's delete on the person's shard)."""
    conn.execute(
        "DELETE FROM source_fts WHERE tenant_id = ? AND person_id = ?"
        " AND source_id IN (SELECT value FROM json_each(?))",
        (tenant_id, person_id, json.dumps(list(source_ids))),
    )


def optimize_fts(conn: sqlite3.Connection) -> None:
    """Merge the full-text index's segments, so no page keeps the terms of dropped rows
    (``erase``; FTS5's ``optimize`` command). On PostgreSQL ``source_fts`` is a plain table
    with nothing to merge (dead rows go at the next VACUUM, docs/postgres.md)."""
    if is_postgres(conn):
        return
    conn.execute("INSERT INTO source_fts (source_fts) VALUES ('optimize')")
