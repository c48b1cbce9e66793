"""One ``apply`` batch: the ledger, the presence caches and the commit loop (spec/sync.md §4.3-4.4).

:func:`zkr.store.apply.apply` makes one :class:`Batch` per call, inside its write transaction,
and runs every commit through :meth:`Batch.apply_commit` with the dependency passes of
:data:`zkr.store.apply_kinds.PASSES` (one function per record kind, each taking the batch).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from zkr.errors import InvalidInput
from zkr.store.derived import APPLY_SYNC, drop_fts, enqueue_repair
from zkr.store.erase import restore_text
from zkr.store.feed import Record
from zkr.store.records import Commit, Event

ORIGINS = "origins"
"""The pass that sets a source's origin ids after its evidence and claims exist (§4.4)."""

Handler = Callable[["Batch", Record], None]
"""The rule of one record kind: apply ``record["record"]`` to the batch's database or raise."""

_LEDGER_SELECT = (
    "SELECT record_id, payload_hash FROM memory_applied_records"
    " WHERE tenant_id = ? AND person_id = ? AND record_kind = ? AND record_id IN ({marks})"
)
_LEDGER_INSERT = (
    "INSERT INTO memory_applied_records (tenant_id, person_id, record_kind, record_id,"
    " payload_hash, applied_at) VALUES (?, ?, ?, ?, ?, ?)"
)
_EXISTS = {
    "source": "SELECT 1 FROM sources WHERE id = ? AND tenant_id = ? AND person_id = ?",
    "evidence": "SELECT 1 FROM evidence WHERE id = ? AND tenant_id = ? AND person_id = ?",
    "claim": "SELECT 1 FROM claims WHERE id = ? AND tenant_id = ? AND person_id = ?",
}
_CHUNK = 500  # ids per IN (...) list, well under SQLite's variable limit
_TABLES = {"source": "sources", "evidence": "evidence", "claim": "claims"}


def _chunks(ids: list[str]) -> list[list[str]]:
    return [ids[start : start + _CHUNK] for start in range(0, len(ids), _CHUNK)]


LedgerKey = tuple[str, str, str]
"""(record_kind, record_id, payload_hash) within the request scope."""


class Batch:
    """The state of one ``apply`` batch inside the caller's write transaction: the ledger, the
    presence caches and the commit loop; :mod:`zkr.store.apply_kinds` holds the per-kind rules.

    Two in-memory views keep the statement count per record low; both are exact because this
    transaction is the only writer and is not interleaved with anything else:

    * ``ledger`` holds the scope's ledger keys for every record id of the batch (read once by
      :meth:`load_ledger`) plus the keys this call adds, so a record repeated later in the
      batch is skipped as §4.3 requires; the new ledger rows are written once, in key order,
      by :meth:`write_ledger` before the transaction commits.
    * ``present`` remembers (kind, id) of sources, evidence and claims known to exist in scope.
      Those rows are never deleted, so a hit stays true for the rest of the transaction.
    * ``absent`` holds the batch's source/evidence/claim ids that no row has (any scope) until
      this call inserts them; their handlers skip the read of the stored row. ``new`` keeps
      them for the whole call, and ``links`` the claim–evidence links this call inserted: a
      link to a claim or evidence row that did not exist before the call is one of those, or
      none (:meth:`stored_link` reads nothing for it).
    """

    def __init__(self, conn: sqlite3.Connection, tenant: str, person: str, applied_at: int):
        self.conn = conn
        self.tenant = tenant
        self.person = person
        self.scope = (tenant, person)
        self.applied_at = applied_at
        self.ledger: set[LedgerKey] = set()
        self.loaded: frozenset[LedgerKey] = frozenset()
        self.present: set[tuple[str, str]] = set()
        self.absent: dict[str, set[str]] = {kind: set() for kind in _TABLES}
        self.new: dict[str, frozenset[str]] = {kind: frozenset() for kind in _TABLES}
        self.links: dict[tuple[str, str], tuple[str, int]] = {}
        self.foreign: dict[str, set[str]] = {kind: set() for kind in _TABLES}
        # (sequence, event index) of blank-shaped records (docs/erase.md "Replicas"): their
        # kind rules see the stored text put back (zkr.store.erase.restore_text).
        self.blank: set[tuple[int, int]] = set()

    # -- driver (spec/sync.md §4.3-4.4)

    def load_ledger(self, commits: Sequence[Commit]) -> None:
        """Read the ledger rows of every (kind, id) in the batch (index: scope, kind, id)."""
        ids: dict[str, set[str]] = {}
        for commit in commits:
            for event in commit.events:
                ids.setdefault(event.kind, set()).add(event.record_id)
        for kind, kind_ids in ids.items():
            ordered = sorted(kind_ids)
            for start in range(0, len(ordered), _CHUNK):
                chunk = ordered[start : start + _CHUNK]
                sql = _LEDGER_SELECT.format(marks=", ".join("?" * len(chunk)))
                for record_id, digest in self.conn.execute(sql, (*self.scope, kind, *chunk)):
                    self.ledger.add((kind, record_id, digest))
        self.loaded = frozenset(self.ledger)
        # Ids of the batch's sources, evidence and claims that exist nowhere yet (ids are global
        # primary keys): their handlers insert without reading first. Ids held by another
        # scope's row are remembered too: such a record is refused when it would be inserted.
        for kind, table in _TABLES.items():
            wanted = sorted(ids.get(kind, ()))
            missing = set(wanted)
            # in scope: the scope's own rows (one person's shard on a distributed store)
            for chunk in _chunks(wanted):
                sql = (
                    f"SELECT id FROM {table} WHERE tenant_id = ? AND person_id = ?"
                    f" AND id IN ({', '.join('?' * len(chunk))})"
                )
                missing.difference_update(
                    row[0] for row in self.conn.execute(sql, (*self.scope, *chunk))
                )
            # elsewhere: the one cross-person statement of apply (docs/postgres.md), for ids not
            # in scope only: an id another scope holds is refused (docs/decisions-sync.md)
            for chunk in _chunks(sorted(missing)):
                sql = f"SELECT id FROM {table} WHERE id IN ({', '.join('?' * len(chunk))})"
                for (record_id,) in self.conn.execute(sql, chunk):
                    missing.discard(record_id)
                    self.foreign[kind].add(record_id)
            self.absent[kind] = missing
            self.new[kind] = frozenset(missing)

    def apply_commit(self, commit: Commit, passes: Sequence[tuple[str, Handler]]) -> list[Event]:
        """Run the dependency ``passes`` (spec/sync.md §4.4) over one commit; returns the
        accepted events (pass order). A record already in the ledger is skipped."""
        by_kind: dict[str, list[Event]] = {}
        for event in commit.events:
            by_kind.setdefault(event.kind, []).append(event)
        accepted: list[Event] = []
        accepted_sources: list[Event] = []
        for kind, handler in passes:
            if kind == ORIGINS:
                # Pass 3: only sources accepted in this commit by this call; no ledger, no count.
                for event in accepted_sources:
                    handler(self, event.record["record"])
                continue
            for event in by_kind.get(kind, ()):
                key = (event.kind, event.record_id, event.payload_hash)
                if key in self.ledger:
                    continue
                record = event.record
                if (commit.sequence, event.index) in self.blank:
                    record = restore_text(self.conn, *self.scope, record)
                handler(self, record["record"])
                self.ledger.add(key)
                accepted.append(event)
                if kind == "source":
                    accepted_sources.append(event)
        return accepted

    def write_ledger(self) -> None:
        """Insert the ledger rows of every accepted record, once, at the end of the batch.

        Nothing reads them through SQL inside this transaction (``self.ledger`` answers), and
        inserting them in key order keeps the two ledger B-trees' page writes sequential.
        """
        rows = sorted(self.ledger - self.loaded)
        self.conn.executemany(
            _LEDGER_INSERT,
            [
                (*self.scope, kind, record_id, digest, self.applied_at)
                for kind, record_id, digest in rows
            ],
        )

    # -- what the per-kind rules share

    def exists(self, kind: str, record_id: str) -> bool:
        """Whether a source/evidence/claim with this id exists in scope (any state)."""
        if (kind, record_id) in self.present:
            return True
        if record_id in self.absent[kind]:
            return False
        if self.conn.execute(_EXISTS[kind], (record_id, *self.scope)).fetchone() is None:
            return False
        self.present.add((kind, record_id))
        return True

    def stored(self, kind: str, record_id: str, sql: str) -> Any:
        """The stored row of a source/evidence/claim in scope, or None; the calling handler
        then makes the row exist (or fails the batch), so it is remembered as present."""
        absent = self.absent[kind]
        if record_id in absent:
            absent.discard(record_id)
            row = None
        else:
            row = self.conn.execute(sql, (record_id, *self.scope)).fetchone()
        self.present.add((kind, record_id))
        return row

    def stored_link(self, claim_id: str, evidence_id: str) -> tuple[str, int] | None:
        """The stored (relation, confidence) of a claim–evidence link in scope, or None."""
        link = (claim_id, evidence_id)
        if link in self.links:
            return self.links[link]
        if claim_id in self.new["claim"] or evidence_id in self.new["evidence"]:
            return None  # its claim or evidence came with this call, and so would the link
        row = self.conn.execute(
            "SELECT relation, confidence_basis_points FROM claim_evidence"
            " WHERE tenant_id = ? AND person_id = ? AND claim_id = ? AND evidence_id = ?",
            (*self.scope, claim_id, evidence_id),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def require(self, kind: str, record_id: str) -> None:
        """Existence in scope only: tombstoned or retracted targets qualify (§4.5)."""
        if not self.exists(kind, record_id):
            raise InvalidInput(f"applied record references unknown {kind} {record_id}")

    def refuse_taken(self, kind: str, record_id: str) -> None:
        """Refuse a new row whose id another scope's row holds (docs/decisions-sync.md).

        Ids are global primary keys in the SQLite layout, so the record cannot be stored under
        its authority's id. Every such refusal has the same message, whatever the kind or the
        row behind it, and comes only where a fresh id would have been inserted: everything the
        record is checked against first is checked the same way for a fresh id.
        """
        raise InvalidInput(
            f"applied {kind} {record_id} is refused: its id is already taken in this database"
        )

    def taken(self, table: str, record_id: str) -> bool:
        """Whether a row of another scope holds ``record_id`` (profile entries, reviews)."""
        row = self.conn.execute(
            f"SELECT 1 FROM {table} WHERE id = ? AND NOT (tenant_id = ? AND person_id = ?)",
            (record_id, *self.scope),
        ).fetchone()
        return row is not None

    def enqueue_repair(self, target_kind: str, target_id: str) -> None:
        """A projection-repair outbox row, reason ``apply_sync``, created at ``applied_at``."""
        enqueue_repair(self.conn, *self.scope, target_kind, target_id, APPLY_SYNC, self.applied_at)

    def drop_fts(self, source_id: str) -> None:
        """Drop a tombstoned source's full-text row (:mod:`zkr.store.derived`)."""
        drop_fts(self.conn, *self.scope, source_id)
