"""``apply``: materialise commits authored elsewhere (spec/sync.md §4).

The inverse of :func:`zkr.store.export.export`. A request carries complete commits taken from
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

Erased text (zkr's own, docs/erase.md "Replicas"): the batch's blank-shaped records (copies a
peer's ``erase`` blanked) whose stored rows still hold the text make this replica erase the
tombstoned sources behind them (:func:`zkr.store.erase.erase_blanked`) before the passes, and
again after them for sources the batch itself tombstoned; in between, their kind rules see the
stored text put back (:func:`zkr.store.erase.restore_text`), so a copy passes or fails as the
record it was blanked from. The WAL is truncated after the transaction. A batch without
blank-shaped records is applied exactly as above.

Layout: this module parses (:func:`zkr.store.records.parse_commit`), validates and drives one
:class:`~zkr.store.apply_batch.Batch` (the ledger, the presence caches, the commit loop) over
the passes of :mod:`zkr.store.apply_kinds` (one function per record kind).

Errors: :class:`~zkr.errors.RequestError` for parse failures, :class:`~zkr.errors.InvalidInput`
with the exact messages of §4.2/§4.5 (and one message for a record whose id another scope
holds, docs/decisions-sync.md), :class:`~zkr.errors.StorageError` for raw SQLite failures.
Any error rolls the whole batch back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

from zkr.errors import InvalidInput
from zkr.model import ApplyRequest, ApplyResult
from zkr.store import feed
from zkr.store.apply_batch import Batch
from zkr.store.apply_kinds import PASSES
from zkr.store.db import write_tx
from zkr.store.derived import log_operation
from zkr.store.driver import deferred_writes
from zkr.store.erase import erase_blanked, secure_delete, truncate_wal
from zkr.store.export import EXPORT_FORMAT, SCHEMA_VERSION
from zkr.store.records import Commit, blank_shaped, parse_commit
from zkr.text import require_scope

__all__ = ["apply", "parse_commit"]


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
    blanked = [(c, e) for c in commits for e in c.events if blank_shaped(e.record)]
    erased = False
    secure: AbstractContextManager[None] = secure_delete(conn) if blanked else nullcontext()
    # store.db gives every connection a 64 MiB page cache, which bulk batches rely on.
    with secure, write_tx(conn, (req.tenant_id, req.person_id)), deferred_writes(conn):
        (applied_at,) = conn.execute("SELECT unixepoch()").fetchone()
        blank_records = [event.record for _, event in blanked]
        if blanked:
            # Tombstoned before the batch: erase first, so the copies are ledger hits or match.
            erased = erase_blanked(conn, req.tenant_id, req.person_id, blank_records)
        batch = Batch(conn, req.tenant_id, req.person_id, applied_at)
        batch.blank = {(commit.sequence, event.index) for commit, event in blanked}
        batch.load_ledger(commits)
        for commit in commits:
            accepted = batch.apply_commit(commit, PASSES)
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
        batch.write_ledger()
        if blanked:
            # Tombstoned by the batch itself (a replica that had not applied the deletion).
            erased = erase_blanked(conn, req.tenant_id, req.person_id, blank_records) or erased
        # spec/sync.md §4.3: one operation row per call, even for an empty batch.
        log_operation(conn, req.tenant_id, req.person_id, "apply", applied_at)
    if erased:
        truncate_wal(conn)
    return ApplyResult(**counts)
