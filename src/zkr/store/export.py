"""``export``: one page of a scope's commit feed (spec/sync.md §3).

Reads the ``memory_commits``/``memory_export_events`` rows that :func:`zkr.store.feed.append_commit`
wrote, strictly re-parsed as a received record would be (:func:`zkr.store.records.parse_record`),
up to ``limit`` events and about 1 MiB of payload. :mod:`zkr.store.apply` is the inverse.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from zkr.errors import InvalidInput, StorageError, ZkrError
from zkr.model import ExportPage, ExportRequest
from zkr.store.db import read_tx
from zkr.store.feed import RECORD_LIMIT, Record, record_scope
from zkr.store.records import parse_record
from zkr.text import bounded_limit, require_scope

EXPORT_FORMAT = 1
"""The only export/apply wire format (spec/sync.md §3.1, §4.2)."""

PAGE_BYTE_BUDGET = RECORD_LIMIT
"""Stored payload bytes after which a page stops (the first event is always included)."""

SCHEMA_VERSION = 10
"""``database_schema_version`` reported by export and the newest one apply accepts."""

# spec/sync.md §3.3: this scope's events strictly after the cursor (a greater sequence, or the
# same sequence with a greater event index) and at or below the frozen mark, in feed order, each
# with its commit's recorded_at and total event count. memory_commits_scope (tenant, person,
# sequence) drives the range and gives the order; the events' primary key (commit_sequence,
# event_index) serves the join, the ordering within a commit and the count.
_PAGE_SQL = """
SELECT c.sequence, c.recorded_at, e.event_index, e.payload,
       (SELECT COUNT(*) FROM memory_export_events AS n WHERE n.commit_sequence = c.sequence)
FROM memory_commits AS c
JOIN memory_export_events AS e ON e.commit_sequence = c.sequence
WHERE c.tenant_id = :tenant AND c.person_id = :person
  AND c.sequence >= :after_commit AND c.sequence <= :mark
  AND (c.sequence > :after_commit OR e.event_index > :after_event_index)
ORDER BY c.sequence, e.event_index
LIMIT :rows
"""


def _stored_record(sequence: int, index: int, payload: str) -> Record:
    """Parse a stored payload the way a received record is parsed (spec/sync.md §1.3)."""
    try:
        return parse_record(json.loads(payload))
    except (ValueError, ZkrError) as exc:
        raise StorageError(
            f"stored export event {sequence}/{index} is not a valid record: {exc}"
        ) from None


def export(conn: sqlite3.Connection, req: ExportRequest) -> ExportPage:
    """One page of the scope's commit feed (spec/sync.md §3).

    Validation runs in the order of §3.2 (the first failure wins, as ``InvalidInput``); the page
    is read in one deferred transaction, so the mark and the events come from one snapshot. The
    page's ``to_json()`` has the keys of §3.4 in canonical order; the CLI prints them sorted.
    """
    require_scope(req.tenant_id, req.person_id)
    if req.export_format != EXPORT_FORMAT:
        raise InvalidInput(
            f"unsupported export_format {req.export_format}; expected {EXPORT_FORMAT}"
        )
    if req.after_commit < 0:
        raise InvalidInput("after_commit must not be negative")
    if req.after_event_index < -1:
        raise InvalidInput("after_event_index must be at least -1")
    if req.after_commit == 0 and req.after_event_index != -1:
        raise InvalidInput("the initial cursor must use after_event_index -1")
    if req.high_water_mark is not None and req.high_water_mark < req.after_commit:
        raise InvalidInput("high_water_mark must not precede after_commit")
    limit = bounded_limit(req.limit)
    scope = (req.tenant_id, req.person_id)
    with read_tx(conn):
        (current,) = conn.execute(
            "SELECT COALESCE(MAX(sequence), 0) FROM memory_commits"
            " WHERE tenant_id = ? AND person_id = ?",
            scope,
        ).fetchone()
        if req.high_water_mark is not None and req.high_water_mark > current:
            raise InvalidInput("high_water_mark exceeds the current scoped maximum")
        mark: int = current if req.high_water_mark is None else req.high_water_mark
        if req.after_commit > 0:
            row = conn.execute(
                "SELECT (SELECT COUNT(*) FROM memory_export_events"
                "        WHERE commit_sequence = c.sequence)"
                " FROM memory_commits AS c"
                " WHERE c.sequence = ? AND c.tenant_id = ? AND c.person_id = ?",
                (req.after_commit, *scope),
            ).fetchone()
            if row is None:
                raise InvalidInput("after_commit is not in scope")
            if req.after_event_index >= row[0]:
                raise InvalidInput("after_event_index exceeds the commit event count")
        rows = conn.execute(
            _PAGE_SQL,
            {
                "tenant": req.tenant_id,
                "person": req.person_id,
                "after_commit": req.after_commit,
                "after_event_index": req.after_event_index,
                "mark": mark,
                "rows": limit + 1,
            },
        ).fetchall()
    commits: list[dict[str, Any]] = []
    used = 0
    truncated = False
    current_commit: dict[str, Any] | None = None
    for sequence, recorded_at, index, payload, event_count in rows[:limit]:
        # Byte budget: ASCII payloads are measured by length, others by their UTF-8 encoding.
        size = len(payload) if payload.isascii() else len(payload.encode("utf-8"))
        if used and used + size > PAGE_BYTE_BUDGET:
            truncated = True
            break
        used += size
        record = _stored_record(sequence, index, payload)
        if record_scope(record) != scope:
            raise StorageError("export record scope does not match its commit")
        if current_commit is None or current_commit["sequence"] != sequence:
            current_commit = {
                "sequence": sequence,
                "recorded_at": recorded_at,
                "event_count": event_count,
                "first_event_index": index,
                "records": [],
            }
            commits.append(current_commit)
        current_commit["records"].append(record)
    if current_commit is None:
        next_commit, next_index = req.after_commit, req.after_event_index
    else:
        next_commit = current_commit["sequence"]
        next_index = current_commit["first_event_index"] + len(current_commit["records"]) - 1
    return ExportPage(
        export_format=EXPORT_FORMAT,
        database_schema_version=SCHEMA_VERSION,
        high_water_mark=mark,
        next_after_commit=next_commit,
        next_after_event_index=next_index,
        complete=len(rows) <= limit and not truncated,
        commits=commits,
    )
