"""``correct``, ``link``, ``promote``, ``archive`` and ``delete`` (spec/lifecycle.md §3.3-3.7).

Each mutation validates what needs no database first, then runs inside one
``BEGIN IMMEDIATE`` transaction (:func:`~zkr.store.db.write_tx`) that writes the rows, the
projection-repair outbox rows and operation rows of spec/lifecycle.md §1.5, and appends exactly
one commit (§1.4) — or, for a no-op (identical ``link``, ``archive`` of an archived claim),
nothing at all. Any error rolls everything back.

``delete`` is set-based: the whole cascade is a fixed number of statements however many claims
the source supports (retraction, outbox rows and sweeps are single statements over JSON id
arrays and ``RETURNING`` clauses); only the commit's event rows grow with the record count.
Deliberate deviations from the reference are listed in docs/decisions-lifecycle.md.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from zkr.errors import InvalidInput, NotFound, StorageError
from zkr.model import (
    ClaimInput,
    ClaimKind,
    ClaimTierRequest,
    CorrectRequest,
    CorrectResult,
    DeleteRequest,
    DeleteResult,
    LinkRequest,
    Locator,
    ProcessingState,
    SourceKind,
    Status,
    Tier,
    quoted,
)
from zkr.store import feed
from zkr.store.db import write_tx
from zkr.store.derived import (
    DELETE_SYNC,
    SUPERSEDED_SYNC,
    TIER_CHANGED,
    drop_fts,
    enqueue_repair,
    enqueue_repairs,
    log_operation,
)
from zkr.store.eligibility import LIVE_EVIDENCE, SUPPORTS, live_evidence, live_source
from zkr.store.write import Capture, insert_capture, insert_supported_claim, set_origins
from zkr.text import new_id, require_scope, require_text

MAX_CONFIDENCE = 10_000
INTERVAL_TRIGGER = "invalid claim half-open time interval"


def _active_claim(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, claim_id: str, columns: str
) -> tuple[Any, ...] | None:
    """``columns`` of the claim in scope while it is *active* (status ``accepted``, whatever
    its tier or processing state), else ``None``: the claims ``correct`` and ``link`` act on
    (spec/lifecycle.md §2.2 "active", §3.3 step 4, §3.4 step 4)."""
    row: tuple[Any, ...] | None = conn.execute(
        f"SELECT {columns} FROM claims"
        " WHERE id = ? AND tenant_id = ? AND person_id = ? AND status = 'accepted'",
        (claim_id, tenant_id, person_id),
    ).fetchone()
    return row


# --------------------------------------------------------------------------- correct


def correction_floor(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, claim_id: str
) -> tuple[int, int] | None:
    """The earliest ``(valid_at, recorded_at)`` :func:`correct` accepts for ``claim_id``: one
    second past the accepted claim's ``valid_from`` and ``recorded_from`` (the §3.3 check
    below), or ``None`` when no accepted claim has that id in scope. For callers that default
    times to "now" (``zkr mcp``): a claim valid from a future date, or recorded by a device
    whose clock runs ahead, is still corrected instead of refused."""
    row = _active_claim(conn, tenant_id, person_id, claim_id, "valid_from, recorded_from")
    return None if row is None else (int(row[0]) + 1, int(row[1]) + 1)


def correct(conn: sqlite3.Connection, req: CorrectRequest) -> CorrectResult:
    """Supersede an accepted claim with a ``user_correction`` source (spec/lifecycle.md §3.3).

    Raises ``InvalidInput`` (blank text/value, timestamps that do not advance the old
    intervals), ``NotFound`` (no accepted claim in scope) and ``StorageError`` (the legal-state
    trigger for an archived claim, ``stored claim kind is invalid``, oversized records).
    """
    require_scope(req.tenant_id, req.person_id)
    require_text(req.text, "correction text")
    require_text(req.value, "value")
    t, p = req.tenant_id, req.person_id
    with write_tx(conn, (req.tenant_id, req.person_id)):
        # §3.3 step 4: archived, short_term and pending claims all qualify; only status counts.
        old = _active_claim(
            conn, t, p, req.claim_id, "subject, predicate, kind, valid_from, recorded_from"
        )
        if old is None:
            raise superseded_error(conn, t, p, req.claim_id) or NotFound()
        subject, predicate, stored_kind, valid_from, recorded_from = old
        if req.valid_at <= valid_from or req.recorded_at <= recorded_from:
            raise InvalidInput(
                "correction timestamps must advance the original valid and recorded intervals"
            )
        claim_id = new_id()
        # Writes 2-3: the correction source (captured_at = valid_at, §5 item 8) and its evidence.
        capture = Capture(
            new_id(),
            new_id(),
            t,
            p,
            SourceKind.USER_CORRECTION,
            req.text,
            req.valid_at,
            req.recorded_at,
        )
        insert_capture(conn, capture)
        # Write 4: close both intervals; tier/state kept, so an archived claim trips the
        # legal-state trigger ("illegal memory state combination", §3.3 step 6).
        conn.execute(
            "UPDATE claims SET status = 'superseded', valid_until = ?, recorded_until = ?"
            " WHERE tenant_id = ? AND person_id = ? AND id = ?",
            (req.valid_at, req.recorded_at, t, p, req.claim_id),
        )
        enqueue_repair(conn, t, p, "claim", req.claim_id, SUPERSEDED_SYNC, req.recorded_at)
        # Writes 1 + 6: the profile entries the old claim backed (deletion records in id order).
        removed = sorted(
            conn.execute(
                "DELETE FROM profile_entries WHERE tenant_id = ? AND person_id = ? AND claim_id = ?"
                " RETURNING id, stability",
                (t, p, req.claim_id),
            ).fetchall()
        )
        removed_profiles = [row[0] for row in removed]
        # Write 7: the replacement is always long_term/processed (§5 item 7).
        if stored_kind not in feed.CLAIM_KINDS:
            raise StorageError("stored claim kind is invalid")
        replacement = ClaimInput(
            subject,
            predicate,
            req.value,
            ClaimKind(stored_kind),
            req.valid_at,
            Tier.LONG_TERM,
            ProcessingState.PROCESSED,
        )
        claim_records = insert_supported_claim(conn, capture, claim_id, replacement)
        # Writes 8-9: origins, then the correction row (its trigger checks that lineage).
        capture_records = set_origins(conn, capture, claim_id)
        conn.execute(
            "INSERT INTO corrections (tenant_id, person_id, superseded_claim_id, claim_id,"
            " source_id, evidence_id, valid_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                t,
                p,
                req.claim_id,
                claim_id,
                capture.source_id,
                capture.evidence_id,
                req.valid_at,
                req.recorded_at,
            ),
        )
        # Feed (§3.3): source, evidence, old claim, new claim, link, correction, deletions.
        records = [
            *capture_records,
            feed.claim_record(conn, req.claim_id, (t, p)),
            *claim_records,
            feed.correction_body(
                t,
                p,
                req.claim_id,
                claim_id,
                capture.source_id,
                capture.evidence_id,
                req.valid_at,
                req.recorded_at,
            ),
        ]
        records.extend(
            feed.deletion_body(t, p, "profile_entry", entry_id, req.recorded_at)
            for entry_id in removed_profiles
        )
        feed.append_commit(conn, t, p, req.recorded_at, records)
        if req.profile_follows and removed:
            _profile_follows(conn, t, p, predicate, req, claim_id, removed[0][1])
    return CorrectResult(capture.source_id, capture.evidence_id, claim_id, req.claim_id)


def _profile_follows(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    key: str,
    req: CorrectRequest,
    claim_id: str,
    stability: str,
) -> None:
    """``correct`` with ``profile_follows``: the profile entry the old claim backed (removed
    above, with its deletion record, exactly as the reference does) is recreated for the new
    claim — same key and stability, the new value, recorded at the correction — and appended as
    a second commit holding one ``profile`` record, inside the same transaction.

    A peer applying our feed sees two ordinary commits, the reference's correction and then the
    same record a later ``profile`` call would write (spec/sync.md §4.5 "Profile": the entry is
    upserted by id after its backing claim, applied in the commit before, exists), so every
    replica ends with the same entry. There is at most one entry per key, so at most one here.
    """
    entry_id = new_id()
    conn.execute(
        "INSERT INTO profile_entries (id, tenant_id, person_id, key, value, stability, claim_id,"
        " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (entry_id, tenant_id, person_id, key, req.value, stability, claim_id, req.recorded_at),
    )
    record = feed.profile_record(conn, entry_id, (tenant_id, person_id))
    feed.append_commit(conn, tenant_id, person_id, req.recorded_at, [record])


def superseded_error(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, claim_id: str
) -> InvalidInput | None:
    """The error for correcting a claim that a correction already superseded, naming the claim
    that replaced it and the current end of the chain (the same claim after one correction).

    The reference says ``record not found`` here (spec/lifecycle.md §3.3 "Not idempotent");
    error texts are not part of the contract and this one says what to do instead. ``None``
    when the claim is not a superseded claim in scope (then ``record not found`` stands).
    """
    row = conn.execute(
        """
        WITH RECURSIVE chain(id, depth) AS (
          SELECT claim_id, 1 FROM corrections
          WHERE superseded_claim_id = :id AND tenant_id = :t AND person_id = :p
          UNION
          SELECT k.claim_id, chain.depth + 1 FROM chain JOIN corrections k
            ON k.superseded_claim_id = chain.id AND k.tenant_id = :t AND k.person_id = :p
        )
        SELECT (SELECT id FROM chain WHERE depth = 1 ORDER BY id LIMIT 1),
               (SELECT chain.id FROM chain JOIN claims c ON c.id = chain.id
                 WHERE c.status = 'accepted' ORDER BY chain.depth DESC, chain.id LIMIT 1)
        """,
        {"id": claim_id, "t": tenant_id, "p": person_id},
    ).fetchone()
    if row is None or row[0] is None:
        return None
    direct, current = row
    message = f"claim {claim_id} was superseded by claim {direct}"
    if current is not None:
        message += f"; the current claim is {current}"
    else:
        message += "; no claim of that chain is current"
    return InvalidInput(message + " (correct the current claim)")


# --------------------------------------------------------------------------- link


def link(conn: sqlite3.Connection, req: LinkRequest) -> None:
    """Attach supporting or contradicting evidence to an accepted claim (spec/lifecycle.md §3.4).

    An identical existing link is a silent no-op (no commit). Raises ``InvalidInput`` for the
    blank-id messages (``tenant id must not be empty`` …, with a space), the confidence bound
    and a conflicting existing link; ``NotFound`` for a non-accepted claim or non-live evidence.
    """
    # §3.4 step 1: link's own blank checks run first and use spaces; the reference's later
    # underscore scope check can never fire, so it is omitted (docs/decisions-lifecycle.md).
    require_text(req.tenant_id, "tenant id")
    require_text(req.person_id, "person id")
    require_text(req.claim_id, "claim id")
    require_text(req.evidence_id, "evidence id")
    if req.confidence_basis_points > MAX_CONFIDENCE:
        points = req.confidence_basis_points
        raise InvalidInput(f"confidence {points} must be at most {MAX_CONFIDENCE} basis points")
    t, p = req.tenant_id, req.person_id
    relation = quoted(req.relation.value)
    with write_tx(conn, (req.tenant_id, req.person_id)):
        claim = _active_claim(conn, t, p, req.claim_id, "recorded_from")
        evidence = conn.execute(
            "SELECT recorded_at FROM evidence"
            f" WHERE id = ? AND tenant_id = ? AND person_id = ? AND {live_evidence('')}",
            (req.evidence_id, t, p),
        ).fetchone()
        if claim is None or evidence is None:
            raise NotFound()
        existing = conn.execute(
            "SELECT relation, confidence_basis_points FROM claim_evidence"
            " WHERE tenant_id = ? AND person_id = ? AND claim_id = ? AND evidence_id = ?",
            (t, p, req.claim_id, req.evidence_id),
        ).fetchone()
        if existing is not None:
            if tuple(existing) == (relation, req.confidence_basis_points):
                return
            raise InvalidInput("claim evidence link conflicts with existing payload")
        conn.execute(
            "INSERT INTO claim_evidence (tenant_id, person_id, claim_id, evidence_id, relation,"
            " confidence_basis_points) VALUES (?, ?, ?, ?, ?, ?)",
            (t, p, req.claim_id, req.evidence_id, relation, req.confidence_basis_points),
        )
        # The commit's recorded_at is derived, not supplied (§3.4 "Feed", §5 item 19).
        recorded_at = max(claim[0], evidence[0])
        record = feed.claim_evidence_body(
            t, p, req.claim_id, req.evidence_id, req.relation.value, req.confidence_basis_points
        )
        feed.append_commit(conn, t, p, recorded_at, [record])


# --------------------------------------------------------------------------- promote / archive


def _tier_row(conn: sqlite3.Connection, req: ClaimTierRequest) -> tuple[str, str, str, int]:
    """(status, processing_state, tier, recorded_from) of a scoped claim.

    An unknown claim is the raw driver error ``Query returned no rows`` in the reference (§5
    item 1); that text is kept because the CLI shows it.
    """
    row = conn.execute(
        "SELECT status, processing_state, tier, recorded_from FROM claims"
        " WHERE id = ? AND tenant_id = ? AND person_id = ?",
        (req.claim_id, req.tenant_id, req.person_id),
    ).fetchone()
    if row is None:
        raise StorageError("Query returned no rows")
    return row[0], row[1], row[2], row[3]


def _change_tier(
    conn: sqlite3.Connection, req: ClaimTierRequest, tier: Tier, operation: str
) -> None:
    """The shared writes of promote/archive: tier, outbox, operation row, one claim record."""
    t, p = req.tenant_id, req.person_id
    conn.execute(
        "UPDATE claims SET tier = ? WHERE tenant_id = ? AND person_id = ? AND id = ?",
        (tier.value, t, p, req.claim_id),
    )
    enqueue_repair(conn, t, p, "claim", req.claim_id, TIER_CHANGED, req.recorded_at)
    log_operation(conn, t, p, operation, req.recorded_at, req.claim_id)
    feed.append_commit(conn, t, p, req.recorded_at, [feed.claim_record(conn, req.claim_id, (t, p))])


def promote(conn: sqlite3.Connection, req: ClaimTierRequest) -> str:
    """Move an accepted, processed short_term claim to long_term (spec/lifecycle.md §3.5).

    Returns the claim id. Raises ``StorageError('Query returned no rows')`` for an unknown
    claim and ``InvalidInput`` for the promotion rules, in the spec's order.
    """
    require_scope(req.tenant_id, req.person_id)
    with write_tx(conn, (req.tenant_id, req.person_id)):
        status, state, tier, recorded_from = _tier_row(conn, req)
        if status != Status.ACCEPTED.value:
            raise InvalidInput("promotion requires an active claim")
        if state != ProcessingState.PROCESSED.value:
            raise InvalidInput("promotion requires processing_state=processed")
        if tier != Tier.SHORT_TERM.value:
            raise InvalidInput("promotion requires tier=short_term")
        if req.recorded_at < recorded_from:
            raise InvalidInput("promotion recorded_at must not predate claim")
        _change_tier(conn, req, Tier.LONG_TERM, "promote")
    return req.claim_id


def archive(conn: sqlite3.Connection, req: ClaimTierRequest) -> str:
    """Move a processed, non-superseded claim to the archive tier (spec/lifecycle.md §3.6).

    Returns the claim id. An already archived claim is an immediate no-op success, before any
    other check (§5 item 3); retracted claims may be archived (§5 item 4).
    """
    require_scope(req.tenant_id, req.person_id)
    with write_tx(conn, (req.tenant_id, req.person_id)):
        status, state, tier, recorded_from = _tier_row(conn, req)
        if tier == Tier.ARCHIVE.value:
            return req.claim_id
        if status == Status.SUPERSEDED.value:
            raise InvalidInput("archive cannot be superseded")
        if state != ProcessingState.PROCESSED.value:
            raise InvalidInput("archive requires processing_state=processed")
        if req.recorded_at < recorded_from:
            raise InvalidInput("archive recorded_at must not predate claim")
        _change_tier(conn, req, Tier.ARCHIVE, "archive")
    return req.claim_id


# --------------------------------------------------------------------------- delete


# §2.3 retraction: accepted claims linked (either relation) to evidence of the source that —
# the evidence being tombstoned — have no `supports` link to other live evidence. One rule,
# two statements: the retraction itself (after the tombstones) and the deletion-time floor
# (before them: the source's own evidence is left out by hand).
def _retracted_by_source(claim: str, before_tombstones: bool) -> str:
    """The WHERE conditions selecting the claims (alias ``claim``) a deletion of ``:source``
    retracts (§2.3), in scope ``:t``/``:p``."""
    other = " AND e.source_id <> :source" if before_tombstones else ""
    return f"""+{claim}.tenant_id = :t AND +{claim}.person_id = :p AND +{claim}.status = 'accepted'
  AND {claim}.id IN (
    -- The unary `+`s keep the planner on the primary key of claims and on
    -- zkr_claim_evidence_by_evidence, instead of scanning the scope's claims or links.
    SELECT ce.claim_id FROM evidence e
    JOIN claim_evidence ce ON ce.evidence_id = e.id AND +ce.tenant_id = :t AND +ce.person_id = :p
    WHERE e.tenant_id = :t AND e.person_id = :p AND e.source_id = :source)
  AND NOT EXISTS (
    SELECT 1 FROM claim_evidence ce
    JOIN evidence e ON e.id = ce.evidence_id AND e.tenant_id = :t AND e.person_id = :p
         AND {LIVE_EVIDENCE}
    WHERE ce.tenant_id = :t AND ce.person_id = :p AND ce.claim_id = {claim}.id
      AND {SUPPORTS}{other})"""


# The retraction as one statement; returns the post-state of every retracted claim for the feed.
_RETRACT_SQL = f"""
UPDATE claims SET status = 'retracted', recorded_until = :deleted_at
WHERE {_retracted_by_source("claims", before_tombstones=False)}
RETURNING id, subject, predicate, value, kind, valid_from, valid_until, recorded_from,
  recorded_until, status, tier, processing_state
"""

# §3.7 write 6: the scope-wide sweep of entries backed by retracted claims (§5 item 12).
_SWEEP_PROFILES_SQL = """
DELETE FROM profile_entries
WHERE tenant_id = :t AND person_id = :p
  AND EXISTS (SELECT 1 FROM claims c
              WHERE c.id = profile_entries.claim_id AND c.tenant_id = :t AND c.person_id = :p
                AND c.status = 'retracted')
RETURNING id
"""

# §3.7 write 7: reviews citing any evidence of the source, even alongside live evidence.
_DELETE_REVIEWS_SQL = """
DELETE FROM daily_reviews
WHERE tenant_id = :t AND person_id = :p
  AND EXISTS (SELECT 1 FROM json_each(daily_reviews.evidence_ids) j
              JOIN evidence e ON e.id = j.value AND e.tenant_id = :t AND e.person_id = :p
              WHERE e.source_id = :source)
RETURNING id
"""

_EVIDENCE_ROWS_SQL = """
SELECT e.id, e.source_revision, e.quote, e.recorded_at, e.deleted_at,
  l.evidence_id, l.device_id, l.provider, l.stream_id, l.segment_id, l.start_ms, l.end_ms
FROM evidence e
LEFT JOIN evidence_locators l ON l.evidence_id = e.id AND l.tenant_id = :t AND l.person_id = :p
WHERE e.tenant_id = :t AND e.person_id = :p AND e.source_id = :source
ORDER BY e.id
"""


# The claims a deletion retracts, read before the tombstones: their recorded_from bounds
# deleted_at from below (the interval trigger, spec/lifecycle.md §3.7 write 4).
_RETRACTED_RECORDED_SQL = f"""
SELECT max(c.recorded_from) FROM claims c
WHERE {_retracted_by_source("c", before_tombstones=True)}
"""


def deletion_floor(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, source_id: str
) -> int | None:
    """The earliest ``deleted_at`` :func:`delete` accepts for ``source_id``: the source's
    ``recorded_at``, and one second past the ``recorded_from`` of every claim the deletion
    retracts; ``None`` when no live source has that id in scope. For callers that default
    times to "now" (``zkr mcp``), so a source recorded by a device whose clock runs ahead can
    still be deleted."""
    params = {"t": tenant_id, "p": person_id, "source": source_id}
    source = conn.execute(
        "SELECT recorded_at FROM sources"
        f" WHERE id = :source AND tenant_id = :t AND person_id = :p AND {live_source('')}",
        params,
    ).fetchone()
    if source is None:
        return None
    claims = conn.execute(_RETRACTED_RECORDED_SQL, params).fetchone()
    floor = int(source[0])
    return floor if claims is None or claims[0] is None else max(floor, int(claims[0]) + 1)


def delete(conn: sqlite3.Connection, req: DeleteRequest) -> DeleteResult:
    """Tombstone a source and cascade (spec/lifecycle.md §3.7).

    Raises ``NotFound`` (unknown or already tombstoned source) and ``InvalidInput``
    (``deleted_at cannot predate source recording``, ``deleted_at must advance affected
    claims' recorded intervals``).
    """
    require_scope(req.tenant_id, req.person_id)
    t, p, at = req.tenant_id, req.person_id, req.deleted_at
    params = {"t": t, "p": p, "source": req.source_id, "deleted_at": at}
    with write_tx(conn, (req.tenant_id, req.person_id)):
        source = conn.execute(
            "SELECT recorded_at FROM sources"
            f" WHERE id = ? AND tenant_id = ? AND person_id = ? AND {live_source('')}",
            (req.source_id, t, p),
        ).fetchone()
        if source is None:
            raise NotFound()
        if at < source[0]:
            raise InvalidInput("deleted_at cannot predate source recording")
        # Writes 1-3: tombstone (content kept, §5 item 16), drop FTS, tombstone live evidence.
        conn.execute(
            "UPDATE sources SET deleted_at = ?, revision = revision + 1"
            " WHERE tenant_id = ? AND person_id = ? AND id = ?",
            (at, t, p, req.source_id),
        )
        drop_fts(conn, t, p, req.source_id)
        evidence_count = conn.execute(
            "UPDATE evidence SET deleted_at = :deleted_at WHERE tenant_id = :t AND person_id = :p"
            f" AND source_id = :source AND {live_evidence('')}",
            params,
        ).rowcount
        # Write 4: retraction; the interval trigger means deleted_at <= some recorded_from.
        try:
            retracted = sorted(conn.execute(_RETRACT_SQL, params).fetchall())
        except sqlite3.IntegrityError as exc:
            if str(exc) == INTERVAL_TRIGGER:
                raise InvalidInput(
                    "deleted_at must advance affected claims' recorded intervals"
                ) from None
            raise
        # Pre-collection (a) is read after the writes: tombstoning changes no id or ordering.
        evidence_rows = conn.execute(_EVIDENCE_ROWS_SQL, params).fetchall()
        # Write 5: outbox rows for the source, each evidence of (a), then each retracted claim.
        targets = [("source", req.source_id)]
        targets += [("evidence", row[0]) for row in evidence_rows]
        targets += [("claim", row[0]) for row in retracted]
        enqueue_repairs(conn, t, p, targets, DELETE_SYNC, at)
        # Writes 6-7: profile sweep and review removal, ids back in id order for the feed.
        profiles = sorted(row[0] for row in conn.execute(_SWEEP_PROFILES_SQL, params))
        reviews = sorted(row[0] for row in conn.execute(_DELETE_REVIEWS_SQL, params))
        # Feed (§3.7): source, its deletion, evidence + deletion pairs, retracted claims,
        # profile_entry deletions, daily_review deletions; every deletion at deleted_at.
        records = [
            feed.source_record(conn, req.source_id, (t, p)),
            feed.deletion_body(t, p, "source", req.source_id, at),
        ]
        for row in evidence_rows:
            records.append(_evidence_row_record(t, p, req.source_id, row))
            records.append(feed.deletion_body(t, p, "evidence", row[0], at))
        records.extend(_claim_row_record(t, p, row) for row in retracted)
        records.extend(feed.deletion_body(t, p, "profile_entry", i, at) for i in profiles)
        records.extend(feed.deletion_body(t, p, "daily_review", i, at) for i in reviews)
        feed.append_commit(conn, t, p, at, records)
    return DeleteResult(req.source_id, evidence_count, len(retracted))


def _evidence_row_record(
    tenant_id: str, person_id: str, source_id: str, row: tuple[object, ...]
) -> feed.Record:
    """An ``evidence`` record from one row of :data:`_EVIDENCE_ROWS_SQL` (post-state)."""
    eid, revision, quote, recorded_at, deleted_at = row[:5]
    locator = None
    if row[5] is not None:
        locator = Locator(
            str(row[6]),
            str(row[7]),
            str(row[8]),
            str(row[9]),
            feed.decode_unsigned(row[10], "start_ms"),
            feed.decode_unsigned(row[11], "end_ms"),
        )
    return feed.evidence_body(
        id=str(eid),
        tenant_id=tenant_id,
        person_id=person_id,
        source_id=source_id,
        source_revision=feed.decode_unsigned(revision, "source_revision"),
        quote=str(quote),
        recorded_at=_int(recorded_at),
        locator=locator,
        deleted_at=None if deleted_at is None else _int(deleted_at),
    )


def _claim_row_record(tenant_id: str, person_id: str, row: tuple[object, ...]) -> feed.Record:
    """A ``claim`` record from one ``RETURNING`` row of :data:`_RETRACT_SQL` (post-state)."""
    return feed.claim_body(
        id=str(row[0]),
        tenant_id=tenant_id,
        person_id=person_id,
        subject=str(row[1]),
        predicate=str(row[2]),
        value=str(row[3]),
        kind=feed.decode_bare(row[4], feed.CLAIM_KINDS, "kind"),
        valid_from=_int(row[5]),
        valid_until=None if row[6] is None else _int(row[6]),
        recorded_from=_int(row[7]),
        recorded_until=None if row[8] is None else _int(row[8]),
        status=feed.decode_bare(row[9], feed.STATUSES, "status"),
        tier=feed.decode_bare(row[10], feed.TIERS, "tier"),
        processing_state=feed.decode_bare(row[11], feed.STATES, "processing_state"),
    )


def _int(value: object) -> int:
    if isinstance(value, int):
        return value
    raise StorageError(f"Conversion error: {value!r} is not an integer")


__all__ = ["archive", "correct", "delete", "link", "promote"]
