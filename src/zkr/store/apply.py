"""``apply``: materialise commits authored elsewhere (spec/sync.md §4).

The inverse of :func:`zkr.store.feed.export`. A request carries complete commits taken from
export pages; each record keeps the id its authority minted (apply mints none except outbox and
operation ids).

Order of work:

1. **Parse** every commit and record strictly (:mod:`zkr.store.records`, spec/sync.md §1.3)
   and compute each record's canonical payload hash and ledger identity. The reference parses
   records while it deserialises the request, so a parse error wins over every check below.
2. **Validate** without touching the database (§4.2): scope, ``export_format``, schema version,
   then per commit: strictly ascending sequences, ``first_event_index`` 0, ``event_count`` equal
   to the records carried, every record in the request scope.
3. **Write** in one ``BEGIN IMMEDIATE`` transaction for the whole batch (§4.3; see
   docs/decisions-sync.md: all commits of a call land together or none does). ``applied_at`` is
   read once from SQLite's ``unixepoch()``. Each commit runs the dependency passes of §4.4; a
   record already in the ledger ``(scope, kind, id, payload_hash)`` is skipped, any other is
   applied by its kind's rules (§4.5), ledgered and appended, in event order, to one new *local*
   commit stamped with the origin commit's ``recorded_at``. A commit with nothing accepted
   writes no commit. Finally one ``apply``/``success`` operation row is logged.

Errors: :class:`~zkr.errors.RequestError` for parse failures, :class:`~zkr.errors.InvalidInput`
with the exact messages of §4.2/§4.5 (and one message for a record whose id another scope
holds, docs/decisions-sync.md), :class:`~zkr.errors.StorageError` for raw SQLite failures.
Any error rolls the whole batch back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zkr.codec import U64_MAX, Fields, expect_int
from zkr.errors import InvalidInput, RequestError
from zkr.model import (
    ApplyRequest,
    ApplyResult,
    Locator,
    ProcessingState,
    Status,
    Tier,
    is_legal_state,
    quoted,
)
from zkr.store import feed
from zkr.store.db import write_tx
from zkr.store.derived import APPLY_SYNC, add_fts, drop_fts, enqueue_repair, log_operation
from zkr.store.eligibility import live_evidence
from zkr.store.feed import EXPORT_FORMAT, SCHEMA_VERSION, Record
from zkr.store.records import canonical_payload, hash_payload, parse_record, record_identity
from zkr.store.write import validate_locator
from zkr.text import require_scope, require_text

I64_MAX = 2**63 - 1
MAX_CONFIDENCE = 10_000
ORIGINS = "origins"
PASSES = (
    "source",
    "evidence",
    "claim",
    ORIGINS,
    "claim_evidence",
    "profile",
    "daily_review",
    "correction",
    "deletion",
)
"""Dependency passes of spec/sync.md §4.4, in order; within a pass, records keep event order."""


# --------------------------------------------------------------------------- parsed request


@dataclass(frozen=True, slots=True)
class Event:
    """One parsed record of a commit with its ledger key."""

    index: int
    record: Record
    kind: str
    record_id: str
    payload: str
    payload_hash: str


@dataclass(frozen=True, slots=True)
class Commit:
    """One parsed commit of an apply request (the shape of an export page's commit)."""

    sequence: int
    recorded_at: int
    event_count: int
    first_event_index: int
    events: tuple[Event, ...]


def parse_commit(value: Any) -> Commit:
    """Parse one commit object strictly; all five keys are required (spec/sync.md §4.1)."""
    f = Fields(value, "struct ExportCommit")
    sequence = f.i64("sequence")
    recorded_at = f.i64("recorded_at")
    event_count = f.u64("event_count")
    first_event_index = expect_int(f.required("first_event_index"), 0, U64_MAX, "u64")
    raw = f.required("records")
    if not isinstance(raw, list):
        raise RequestError("invalid type: records must be a sequence of export records")
    events = []
    for index, item in enumerate(raw):
        record = parse_record(item)
        kind, record_id = record_identity(record)
        payload = canonical_payload(record)
        events.append(Event(index, record, kind, record_id, payload, hash_payload(payload)))
    return Commit(sequence, recorded_at, event_count, first_event_index, tuple(events))


def _validate(req: ApplyRequest, commits: Sequence[Commit]) -> None:
    """spec/sync.md §4.2, in order; nothing here reads the database."""
    require_scope(req.tenant_id, req.person_id)
    if req.export_format != EXPORT_FORMAT:
        raise InvalidInput(
            f"unsupported export_format {req.export_format}; expected {EXPORT_FORMAT}"
        )
    version = req.database_schema_version
    if version is not None and version > SCHEMA_VERSION:
        raise InvalidInput(
            f"applied records use a schema newer than supported version {SCHEMA_VERSION}"
        )
    scope = (req.tenant_id, req.person_id)
    previous = 0
    for commit in commits:
        if commit.sequence <= previous:
            raise InvalidInput("applied commits must use strictly ascending sequences")
        previous = commit.sequence
        if commit.first_event_index != 0:
            raise InvalidInput(f"commit {commit.sequence} is partial; apply requires event index 0")
        if commit.event_count != len(commit.events):
            raise InvalidInput(
                f"commit {commit.sequence} declares {commit.event_count} events"
                f" but carries {len(commit.events)}"
            )
        for event in commit.events:
            if feed.record_scope(event.record) != scope:
                raise InvalidInput("export record scope does not match its commit")


# --------------------------------------------------------------------------- entry point


def apply(conn: sqlite3.Connection, req: ApplyRequest) -> ApplyResult:
    """Apply complete commits in one transaction; returns the four counters of §4.6.

    ``records_skipped`` counts ledger hits only; ``records_applied`` counts every other record,
    no-ops included; a commit counts as applied when at least one of its records was accepted.
    """
    commits = [parse_commit(value) for value in req.commits]
    _validate(req, commits)
    counts = {
        "commits_applied": 0,
        "commits_skipped": 0,
        "records_applied": 0,
        "records_skipped": 0,
    }
    # store.db gives every connection a 64 MiB page cache, which bulk batches rely on.
    with write_tx(conn):
        (applied_at,) = conn.execute("SELECT unixepoch()").fetchone()
        applier = _Applier(conn, req.tenant_id, req.person_id, applied_at)
        applier.load_ledger(commits)
        for commit in commits:
            accepted = applier.apply_commit(commit)
            counts["records_applied"] += len(accepted)
            counts["records_skipped"] += len(commit.events) - len(accepted)
            if accepted:
                # A fresh local sequence with the origin's recorded_at; the accepted records in
                # their original event order (§4.3 step 5). Scopes were checked in _validate.
                feed.append_payloads(
                    conn,
                    req.tenant_id,
                    req.person_id,
                    commit.recorded_at,
                    [event.payload for event in sorted(accepted, key=lambda e: e.index)],
                )
                counts["commits_applied"] += 1
            else:
                counts["commits_skipped"] += 1
        applier.write_ledger()
        # spec/sync.md §4.3: one operation row per call, even for an empty batch.
        log_operation(conn, req.tenant_id, req.person_id, "apply", applied_at)
    return ApplyResult(**counts)


# --------------------------------------------------------------------------- per-kind rules

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

LedgerKey = tuple[str, str, str]
"""(record_kind, record_id, payload_hash) within the request scope."""


def _storable(value: int, what: str) -> int:
    """u64 fields must fit SQLite's signed 64-bit INTEGER before they are written."""
    if value > I64_MAX:
        raise InvalidInput(f"{what} {value} exceeds the storage range")
    return value


def _bad_interval(start: int, until: int | None) -> bool:
    """A closed half-open interval must end after it starts (spec/lifecycle.md §2.4)."""
    return until is not None and until <= start


class _Applier:
    """Applies the records of one batch inside the caller's write transaction.

    Two in-memory views keep the statement count per record low; both are exact because this
    transaction is the only writer and is not interleaved with anything else:

    * ``ledger`` holds the scope's ledger keys for every record id of the batch (read once by
      :meth:`load_ledger`) plus the keys this call adds, so a record repeated later in the
      batch is skipped as §4.3 requires; the new ledger rows are written once, in key order,
      by :meth:`write_ledger` before the transaction commits.
    * ``present`` remembers (kind, id) of sources, evidence and claims known to exist in scope.
      Those rows are never deleted, so a hit stays true for the rest of the transaction.
    * ``absent`` holds the batch's source/evidence/claim ids that no row has (any scope) until
      this call inserts them; their handlers skip the read of the stored row.
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
        self.foreign: dict[str, set[str]] = {kind: set() for kind in _TABLES}
        self.handlers = {
            "source": self.source,
            "evidence": self.evidence,
            "claim": self.claim,
            "claim_evidence": self.claim_evidence,
            "profile": self.profile,
            "daily_review": self.daily_review,
            "correction": self.correction,
            "deletion": self.deletion,
        }

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
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                sql = (
                    f"SELECT id, tenant_id = ? AND person_id = ? FROM {table}"
                    f" WHERE id IN ({', '.join('?' * len(chunk))})"
                )
                for record_id, in_scope in self.conn.execute(sql, (*self.scope, *chunk)):
                    missing.discard(record_id)
                    if not in_scope:
                        self.foreign[kind].add(record_id)
            self.absent[kind] = missing

    def apply_commit(self, commit: Commit) -> list[Event]:
        """Run the passes over one commit; returns the accepted events (pass order)."""
        by_kind: dict[str, list[Event]] = {}
        for event in commit.events:
            by_kind.setdefault(event.kind, []).append(event)
        accepted: list[Event] = []
        accepted_sources: list[Event] = []
        for kind in PASSES:
            if kind == ORIGINS:
                # Pass 3: only sources accepted in this commit by this call; no ledger, no count.
                for event in accepted_sources:
                    self.origins(event.record["record"])
                continue
            handler = self.handlers[kind]
            for event in by_kind.get(kind, ()):
                key = (event.kind, event.record_id, event.payload_hash)
                if key in self.ledger:
                    continue
                handler(event.record["record"])
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

    # -- shared helpers

    def _exists(self, kind: str, record_id: str) -> bool:
        if (kind, record_id) in self.present:
            return True
        if record_id in self.absent[kind]:
            return False
        if self.conn.execute(_EXISTS[kind], (record_id, *self.scope)).fetchone() is None:
            return False
        self.present.add((kind, record_id))
        return True

    def _stored(self, kind: str, record_id: str, sql: str) -> Any:
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

    def _require(self, kind: str, record_id: str) -> None:
        """Existence in scope only: tombstoned or retracted targets qualify (§4.5)."""
        if not self._exists(kind, record_id):
            raise InvalidInput(f"applied record references unknown {kind} {record_id}")

    def _refuse_taken(self, kind: str, record_id: str) -> None:
        """Refuse a new row whose id another scope's row holds (docs/decisions-sync.md).

        Ids are global primary keys in the SQLite layout, so the record cannot be stored under
        its authority's id. Every such refusal has the same message, whatever the kind or the
        row behind it, and comes only where a fresh id would have been inserted: everything the
        record is checked against first is checked the same way for a fresh id.
        """
        raise InvalidInput(
            f"applied {kind} {record_id} is refused: its id is already taken in this database"
        )

    def _taken(self, table: str, record_id: str) -> bool:
        """Whether a row of another scope holds ``record_id`` (profile entries, reviews)."""
        row = self.conn.execute(
            f"SELECT 1 FROM {table} WHERE id = ? AND NOT (tenant_id = ? AND person_id = ?)",
            (record_id, *self.scope),
        ).fetchone()
        return row is not None

    def _enqueue_repair(self, target_kind: str, target_id: str) -> None:
        """A projection-repair outbox row, reason ``apply_sync``, created at ``applied_at``."""
        enqueue_repair(self.conn, *self.scope, target_kind, target_id, APPLY_SYNC, self.applied_at)

    def _drop_fts(self, source_id: str) -> None:
        drop_fts(self.conn, *self.scope, source_id)

    # -- source (pass 0) and origins (pass 3)

    def source(self, body: Record) -> None:
        s = body["source"]
        sid: str = s["id"]
        revision = _storable(s["revision"], f"applied source {sid} revision")
        deleted_at: int | None = s["deleted_at"]
        kind = quoted(s["kind"])  # sources.kind is JSON-quoted (spec/storage.md §2.3)
        row = self._stored(
            "source",
            sid,
            "SELECT ingestion_key, kind, content, captured_at, recorded_at, revision, deleted_at"
            " FROM sources WHERE id = ? AND tenant_id = ? AND person_id = ?",
        )
        if row is None:
            if sid in self.foreign["source"]:
                self._refuse_taken("source", sid)
            # Origins stay NULL until pass 3 (the source_origin_scope trigger needs them stored).
            self.conn.execute(
                "INSERT INTO sources (id, tenant_id, person_id, revision, kind, content,"
                " captured_at, recorded_at, deleted_at, ingestion_key)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    *self.scope,
                    revision,
                    kind,
                    s["content"],
                    s["captured_at"],
                    s["recorded_at"],
                    deleted_at,
                    body["ingestion_key"],
                ),
            )
            if deleted_at is None:
                add_fts(self.conn, *self.scope, sid, s["content"])
            return
        stored_key, stored_kind, content, captured_at, recorded_at, stored_rev, stored_del = row
        if (stored_key, stored_kind, content, captured_at, recorded_at) != (
            body["ingestion_key"],
            kind,
            s["content"],
            s["captured_at"],
            s["recorded_at"],
        ):
            raise InvalidInput(f"applied source {sid} conflicts with the stored source payload")
        if revision < stored_rev:
            return  # a stale revision changes nothing but still counts as applied (§7)
        if revision == stored_rev and deleted_at != stored_del:
            raise InvalidInput(f"applied source {sid} conflicts with the stored deletion state")
        if stored_del is not None and deleted_at is None:
            raise InvalidInput(f"applied source {sid} cannot revive a tombstoned source")
        if (revision, deleted_at) != (stored_rev, stored_del):
            self.conn.execute(
                "UPDATE sources SET revision = ?, deleted_at = ?"
                " WHERE id = ? AND tenant_id = ? AND person_id = ?",
                (revision, deleted_at, sid, *self.scope),
            )
        if stored_del is None and deleted_at is not None:
            self._drop_fts(sid)
            self._enqueue_repair("source", sid)

    def origins(self, body: Record) -> None:
        evidence_id: str | None = body["origin_evidence_id"]
        claim_id: str | None = body["origin_claim_id"]
        if evidence_id is None and claim_id is None:
            return  # never clears stored origins (§7)
        if evidence_id is not None:
            self._require("evidence", evidence_id)
        if claim_id is not None:
            self._require("claim", claim_id)
        self.conn.execute(
            "UPDATE sources SET origin_evidence_id = ?, origin_claim_id = ?"
            " WHERE id = ? AND tenant_id = ? AND person_id = ?",
            (evidence_id, claim_id, body["source"]["id"], *self.scope),
        )

    # -- evidence (pass 1)

    def evidence(self, body: Record) -> None:
        e = body["evidence"]
        eid: str = e["id"]
        if e["byte_range"] is not None:
            raise InvalidInput(f"applied evidence {eid} carries an unsupported byte_range")
        loc = body["locator"]
        locator = None if loc is None else Locator(**loc)
        if locator is not None:
            validate_locator(locator)
        source_id: str = e["source_id"]
        if not self._exists("source", source_id):
            raise InvalidInput(f"applied evidence {eid} references unknown source {source_id}")
        deleted_at: int | None = body["deleted_at"]
        row = self._stored(
            "evidence",
            eid,
            "SELECT source_id, source_revision, quote, recorded_at, deleted_at FROM evidence"
            " WHERE id = ? AND tenant_id = ? AND person_id = ?",
        )
        if row is None:
            if eid in self.foreign["evidence"]:
                self._refuse_taken("evidence", eid)
            self.conn.execute(
                "INSERT INTO evidence (id, tenant_id, person_id, source_id, source_revision,"
                " quote, recorded_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    eid,
                    *self.scope,
                    source_id,
                    _storable(e["source_revision"], f"applied evidence {eid} source_revision"),
                    e["quote"],
                    e["recorded_at"],
                    deleted_at,
                ),
            )
            if locator is not None:
                # Stored verbatim, never re-derived (spec/sync.md §4.5).
                self.conn.execute(
                    "INSERT INTO evidence_locators (tenant_id, person_id, evidence_id, device_id,"
                    " provider, stream_id, segment_id, start_ms, end_ms)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *self.scope,
                        eid,
                        locator.device_id,
                        locator.provider,
                        locator.stream_id,
                        locator.segment_id,
                        locator.start_ms,
                        locator.end_ms,
                    ),
                )
            return
        if tuple(row[:4]) != (source_id, e["source_revision"], e["quote"], e["recorded_at"]):
            raise InvalidInput(f"applied evidence {eid} conflicts with the stored evidence payload")
        if feed.read_locator(self.conn, self.tenant, self.person, eid) != locator:
            raise InvalidInput(
                f"applied evidence {eid} conflicts with the stored transcript locator"
            )
        stored_del = row[4]
        if stored_del is not None and deleted_at is None:
            raise InvalidInput(f"applied evidence {eid} cannot revive tombstoned evidence")
        if stored_del is None and deleted_at is not None:
            self.conn.execute(
                "UPDATE evidence SET deleted_at = ?"
                " WHERE id = ? AND tenant_id = ? AND person_id = ?",
                (deleted_at, eid, *self.scope),
            )
            self._enqueue_repair("evidence", eid)
        # both tombstoned: the stored time is kept (§7)

    # -- claim (pass 2)

    def claim(self, body: Record) -> None:
        cid: str = body["id"]
        tier, status, state = body["tier"], body["status"], body["processing_state"]
        if not is_legal_state(Tier(tier), Status(status), ProcessingState(state)):
            raise InvalidInput(
                f"illegal memory state combination: tier={tier}, status={status},"
                f" processing_state={state}"
            )
        valid_from: int = body["valid_time"]["from"]
        valid_until: int | None = body["valid_time"]["until"]
        recorded_from: int = body["recorded_time"]["from"]
        recorded_until: int | None = body["recorded_time"]["until"]
        invalid = _bad_interval(valid_from, valid_until) or _bad_interval(
            recorded_from, recorded_until
        )
        row = self._stored(
            "claim",
            cid,
            "SELECT subject, predicate, value, kind, valid_from, recorded_from,"
            " valid_until, recorded_until, status, tier, processing_state"
            " FROM claims WHERE id = ? AND tenant_id = ? AND person_id = ?",
        )
        if row is None:
            if invalid:
                raise InvalidInput("applied claim carries an invalid time interval")
            if cid in self.foreign["claim"]:
                self._refuse_taken("claim", cid)
            self.conn.execute(
                "INSERT INTO claims (id, tenant_id, person_id, subject, predicate, value,"
                " valid_from, valid_until, recorded_from, recorded_until, status, tier,"
                " processing_state, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    cid,
                    *self.scope,
                    body["subject"],
                    body["predicate"],
                    body["value"],
                    valid_from,
                    valid_until,
                    recorded_from,
                    recorded_until,
                    status,
                    tier,
                    state,
                    body["kind"],
                ),
            )
            return
        immutable = (
            body["subject"],
            body["predicate"],
            body["value"],
            body["kind"],
            valid_from,
            recorded_from,
        )
        if tuple(row[:6]) != immutable:
            raise InvalidInput(f"applied claim {cid} conflicts with the stored claim payload")
        mutable = (valid_until, recorded_until, status, tier, state)
        if tuple(row[6:]) == mutable:
            return
        if invalid:
            raise InvalidInput("applied claim carries an invalid time interval")
        # No revival or regression guard (§7): the origin's order is the authority.
        self.conn.execute(
            "UPDATE claims SET valid_until = ?, recorded_until = ?, status = ?, tier = ?,"
            " processing_state = ? WHERE id = ? AND tenant_id = ? AND person_id = ?",
            (*mutable, cid, *self.scope),
        )
        self._enqueue_repair("claim", cid)

    # -- claim_evidence (pass 4)

    def claim_evidence(self, body: Record) -> None:
        claim_id: str = body["claim_id"]
        evidence_id: str = body["evidence_id"]
        require_text(body["tenant_id"], "tenant id")
        require_text(body["person_id"], "person id")
        require_text(claim_id, "claim id")
        require_text(evidence_id, "evidence id")
        confidence: int = body["confidence_basis_points"]
        if confidence > MAX_CONFIDENCE:
            raise InvalidInput(
                f"confidence {confidence} must be at most {MAX_CONFIDENCE} basis points"
            )
        self._require("claim", claim_id)
        self._require("evidence", evidence_id)
        relation = quoted(body["relation"])  # claim_evidence.relation is JSON-quoted
        row = self.conn.execute(
            "SELECT relation, confidence_basis_points FROM claim_evidence"
            " WHERE tenant_id = ? AND person_id = ? AND claim_id = ? AND evidence_id = ?",
            (*self.scope, claim_id, evidence_id),
        ).fetchone()
        if row is not None:
            if tuple(row) != (relation, confidence):
                raise InvalidInput(
                    f"applied claim evidence {claim_id}/{evidence_id}"
                    " conflicts with the stored link"
                )
            return
        self.conn.execute(
            "INSERT INTO claim_evidence (tenant_id, person_id, claim_id, evidence_id, relation,"
            " confidence_basis_points) VALUES (?, ?, ?, ?, ?, ?)",
            (*self.scope, claim_id, evidence_id, relation, confidence),
        )

    # -- profile (pass 5)

    def profile(self, body: Record) -> None:
        pid: str = body["id"]
        claim_id: str = body["claim_id"]
        backing = self.conn.execute(
            "SELECT kind, predicate, value FROM claims"
            " WHERE id = ? AND tenant_id = ? AND person_id = ?",
            (claim_id, *self.scope),
        ).fetchone()
        if backing is None:
            raise InvalidInput(f"applied record references unknown claim {claim_id}")
        mismatch = InvalidInput(f"applied profile entry {pid} does not match its backing claim")
        if tuple(backing) != ("profile_fact", body["key"], body["value"]):
            raise mismatch
        if self._taken("profile_entries", pid):
            self._refuse_taken("profile", pid)
        # Last writer wins (§7): the key's other entry goes, this one is upserted by id.
        self.conn.execute(
            "DELETE FROM profile_entries WHERE tenant_id = ? AND person_id = ? AND key = ?"
            " AND id <> ?",
            (*self.scope, body["key"], pid),
        )
        try:
            self.conn.execute(
                "INSERT INTO profile_entries (id, tenant_id, person_id, key, value, stability,"
                " claim_id, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET key = excluded.key, value = excluded.value,"
                " stability = excluded.stability, claim_id = excluded.claim_id,"
                " recorded_at = excluded.recorded_at",
                (
                    pid,
                    *self.scope,
                    body["key"],
                    body["value"],
                    quoted(body["stability"]),
                    claim_id,
                    body["recorded_at"],
                ),
            )
        except sqlite3.IntegrityError as exc:
            # An id held by another scope's entry trips the scope trigger (storage.md §3).
            if "profile entry claim scope mismatch" in str(exc):
                raise mismatch from None
            raise

    # -- daily_review (pass 6)

    def daily_review(self, body: Record) -> None:
        rid: str = body["id"]
        evidence_ids: list[str] = body["evidence_ids"]
        for evidence_id in evidence_ids:
            self._require("evidence", evidence_id)
        encoded = feed.encode_id_list(evidence_ids)  # compared byte for byte (storage.md §2.3)
        wanted = (body["day"], body["summary"], encoded, body["recorded_at"])
        row = self.conn.execute(
            "SELECT day, summary, evidence_ids, recorded_at FROM daily_reviews"
            " WHERE id = ? AND tenant_id = ? AND person_id = ?",
            (rid, *self.scope),
        ).fetchone()
        if row is not None:
            if tuple(row) != wanted:
                raise InvalidInput(f"applied daily review {rid} conflicts with the stored review")
            return
        if self._taken("daily_reviews", rid):
            self._refuse_taken("daily_review", rid)
        self.conn.execute(
            "INSERT INTO daily_reviews (id, tenant_id, person_id, day, summary, evidence_ids,"
            " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (rid, *self.scope, *wanted),
        )

    # -- correction (pass 7)

    def correction(self, body: Record) -> None:
        superseded: str = body["superseded_claim_id"]
        claim_id: str = body["claim_id"]
        source_id: str = body["source_id"]
        evidence_id: str = body["evidence_id"]
        self._require("claim", superseded)
        self._require("claim", claim_id)
        self._require("evidence", evidence_id)
        wanted = (source_id, evidence_id, body["valid_at"], body["recorded_at"])
        row = self.conn.execute(
            "SELECT source_id, evidence_id, valid_at, recorded_at FROM corrections"
            " WHERE tenant_id = ? AND person_id = ? AND superseded_claim_id = ? AND claim_id = ?",
            (*self.scope, superseded, claim_id),
        ).fetchone()
        if row is not None:
            if tuple(row) != wanted:
                raise InvalidInput(
                    f"applied correction {superseded}/{claim_id} conflicts with the stored"
                    " correction"
                )
            return
        # Lineage (the correction_scope trigger's rule, checked first for its own message).
        lineage = self.conn.execute(
            "SELECT 1 FROM sources AS s JOIN evidence AS e"
            " ON e.id = ? AND e.source_id = s.id"
            " AND e.tenant_id = s.tenant_id AND e.person_id = s.person_id"
            " WHERE s.id = ? AND s.tenant_id = ? AND s.person_id = ?"
            " AND s.origin_claim_id = ? AND s.origin_evidence_id = ?",
            (evidence_id, source_id, *self.scope, claim_id, evidence_id),
        ).fetchone()
        if lineage is None:
            raise InvalidInput(
                f"applied correction {superseded}/{claim_id} does not match its source lineage"
            )
        self.conn.execute(
            "INSERT INTO corrections (tenant_id, person_id, superseded_claim_id, claim_id,"
            " source_id, evidence_id, valid_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*self.scope, superseded, claim_id, *wanted),
        )

    # -- deletion (pass 8): never cascades; the origin commit lists every effect

    def deletion(self, body: Record) -> None:
        kind: str = body["target"]["kind"]
        target: str = body["target"]["id"]
        deleted_at: int = body["deleted_at"]
        args = (target, *self.scope)
        if kind == "source":
            row = self.conn.execute(
                "SELECT deleted_at FROM sources WHERE id = ? AND tenant_id = ? AND person_id = ?",
                args,
            ).fetchone()
            if row is None:
                raise InvalidInput(f"applied deletion references unknown target source:{target}")
            if row[0] is None:
                # The revision is not bumped here (§7); the commit's source record carries it.
                self.conn.execute(
                    "UPDATE sources SET deleted_at = ?"
                    " WHERE id = ? AND tenant_id = ? AND person_id = ?",
                    (deleted_at, *args),
                )
            self._drop_fts(target)
            self._enqueue_repair("source", target)
        elif kind == "evidence":
            changed = self.conn.execute(
                "UPDATE evidence SET deleted_at = ? WHERE id = ? AND tenant_id = ?"
                f" AND person_id = ? AND {live_evidence('')}",
                (deleted_at, *args),
            ).rowcount
            if not changed:
                self._require("evidence", target)
            self._enqueue_repair("evidence", target)
        elif kind == "claim":
            row = self.conn.execute(
                "SELECT status, recorded_from FROM claims"
                " WHERE id = ? AND tenant_id = ? AND person_id = ?",
                args,
            ).fetchone()
            if row is None:
                raise InvalidInput(f"applied record references unknown claim {target}")
            if row[0] == Status.ACCEPTED.value:
                if _bad_interval(row[1], deleted_at):
                    raise InvalidInput("applied claim carries an invalid time interval")
                self.conn.execute(
                    "UPDATE claims SET status = 'retracted', recorded_until = ?"
                    " WHERE id = ? AND tenant_id = ? AND person_id = ?",
                    (deleted_at, *args),
                )
            self._enqueue_repair("claim", target)
        elif kind == "profile_entry":
            self.conn.execute(
                "DELETE FROM profile_entries WHERE id = ? AND tenant_id = ? AND person_id = ?",
                args,
            )
        else:  # daily_review
            self.conn.execute(
                "DELETE FROM daily_reviews WHERE id = ? AND tenant_id = ? AND person_id = ?",
                args,
            )


__all__ = ["PASSES", "Commit", "Event", "apply", "parse_commit"]
