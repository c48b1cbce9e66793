"""The rules of ``apply`` per record kind, one function each (spec/sync.md §4.5, §7).

Each takes the :class:`~zkr.store.apply_batch.Batch` and one record body, and inserts, updates
or checks stored rows in the batch's scope, raising :class:`~zkr.errors.InvalidInput` with the
exact message of §4.5 on a conflict. :data:`PASSES` lists them in dependency order (§4.4).
"""

from __future__ import annotations

import sqlite3

from zkr.errors import InvalidInput
from zkr.model import Locator, ProcessingState, Status, Tier, is_legal_state, quoted
from zkr.store import feed
from zkr.store.apply_batch import ORIGINS, Batch, Handler
from zkr.store.derived import add_fts
from zkr.store.eligibility import live_evidence
from zkr.store.feed import Record
from zkr.store.write import validate_locator
from zkr.text import require_text

I64_MAX = 2**63 - 1
MAX_CONFIDENCE = 10_000


def _storable(value: int, what: str) -> int:
    """u64 fields must fit SQLite's signed 64-bit INTEGER before they are written."""
    if value > I64_MAX:
        raise InvalidInput(f"{what} {value} exceeds the storage range")
    return value


def _bad_interval(start: int, until: int | None) -> bool:
    """A closed half-open interval must end after it starts (spec/lifecycle.md §2.4)."""
    return until is not None and until <= start


# -- source (pass 0) and origins (pass 3)


def source(b: Batch, body: Record) -> None:
    """A source record (pass 0): insert it, or check it against the stored one and move its
    revision and tombstone forward (§4.5 "source")."""
    s = body["source"]
    sid: str = s["id"]
    revision = _storable(s["revision"], f"applied source {sid} revision")
    deleted_at: int | None = s["deleted_at"]
    kind = quoted(s["kind"])  # sources.kind is JSON-quoted (spec/storage.md §2.3)
    row = b.stored(
        "source",
        sid,
        "SELECT ingestion_key, kind, content, captured_at, recorded_at, revision, deleted_at"
        " FROM sources WHERE id = ? AND tenant_id = ? AND person_id = ?",
    )
    if row is None:
        if sid in b.foreign["source"]:
            b.refuse_taken("source", sid)
        # Origins stay NULL until pass 3 (the source_origin_scope trigger needs them stored).
        b.conn.execute(
            "INSERT INTO sources (id, tenant_id, person_id, revision, kind, content,"
            " captured_at, recorded_at, deleted_at, ingestion_key)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                sid,
                *b.scope,
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
            add_fts(b.conn, *b.scope, sid, s["content"])
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
        b.conn.execute(
            "UPDATE sources SET revision = ?, deleted_at = ?"
            " WHERE id = ? AND tenant_id = ? AND person_id = ?",
            (revision, deleted_at, sid, *b.scope),
        )
    if stored_del is None and deleted_at is not None:
        b.drop_fts(sid)
        b.enqueue_repair("source", sid)


def origins(b: Batch, body: Record) -> None:
    """Pass 3: set the origin evidence/claim ids of a source accepted in this commit (never
    clears them, §7)."""
    evidence_id: str | None = body["origin_evidence_id"]
    claim_id: str | None = body["origin_claim_id"]
    if evidence_id is None and claim_id is None:
        return  # never clears stored origins (§7)
    if evidence_id is not None:
        b.require("evidence", evidence_id)
    if claim_id is not None:
        b.require("claim", claim_id)
    b.conn.execute(
        "UPDATE sources SET origin_evidence_id = ?, origin_claim_id = ?"
        " WHERE id = ? AND tenant_id = ? AND person_id = ?",
        (evidence_id, claim_id, body["source"]["id"], *b.scope),
    )


# -- evidence (pass 1)


def evidence(b: Batch, body: Record) -> None:
    """An evidence record (pass 1) with its optional locator: insert, or check and tombstone
    (§4.5 "evidence")."""
    e = body["evidence"]
    eid: str = e["id"]
    if e["byte_range"] is not None:
        raise InvalidInput(f"applied evidence {eid} carries an unsupported byte_range")
    loc = body["locator"]
    locator = None if loc is None else Locator(**loc)
    if locator is not None:
        validate_locator(locator)
    source_id: str = e["source_id"]
    if not b.exists("source", source_id):
        raise InvalidInput(f"applied evidence {eid} references unknown source {source_id}")
    deleted_at: int | None = body["deleted_at"]
    row = b.stored(
        "evidence",
        eid,
        "SELECT source_id, source_revision, quote, recorded_at, deleted_at FROM evidence"
        " WHERE id = ? AND tenant_id = ? AND person_id = ?",
    )
    if row is None:
        if eid in b.foreign["evidence"]:
            b.refuse_taken("evidence", eid)
        b.conn.execute(
            "INSERT INTO evidence (id, tenant_id, person_id, source_id, source_revision,"
            " quote, recorded_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                eid,
                *b.scope,
                source_id,
                _storable(e["source_revision"], f"applied evidence {eid} source_revision"),
                e["quote"],
                e["recorded_at"],
                deleted_at,
            ),
        )
        if locator is not None:
            # Stored verbatim, never re-derived (spec/sync.md §4.5).
            b.conn.execute(
                "INSERT INTO evidence_locators (tenant_id, person_id, evidence_id, device_id,"
                " provider, stream_id, segment_id, start_ms, end_ms)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *b.scope,
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
    if feed.read_locator(b.conn, b.tenant, b.person, eid) != locator:
        raise InvalidInput(f"applied evidence {eid} conflicts with the stored transcript locator")
    stored_del = row[4]
    if stored_del is not None and deleted_at is None:
        raise InvalidInput(f"applied evidence {eid} cannot revive tombstoned evidence")
    if stored_del is None and deleted_at is not None:
        b.conn.execute(
            "UPDATE evidence SET deleted_at = ? WHERE id = ? AND tenant_id = ? AND person_id = ?",
            (deleted_at, eid, *b.scope),
        )
        b.enqueue_repair("evidence", eid)
    # both tombstoned: the stored time is kept (§7)


# -- claim (pass 2)


def claim(b: Batch, body: Record) -> None:
    """A claim record (pass 2): insert, or check the immutable fields and apply the newer
    state (§4.5 "claim")."""
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
    invalid = _bad_interval(valid_from, valid_until) or _bad_interval(recorded_from, recorded_until)
    row = b.stored(
        "claim",
        cid,
        "SELECT subject, predicate, value, kind, valid_from, recorded_from,"
        " valid_until, recorded_until, status, tier, processing_state"
        " FROM claims WHERE id = ? AND tenant_id = ? AND person_id = ?",
    )
    if row is None:
        if invalid:
            raise InvalidInput("applied claim carries an invalid time interval")
        if cid in b.foreign["claim"]:
            b.refuse_taken("claim", cid)
        b.conn.execute(
            "INSERT INTO claims (id, tenant_id, person_id, subject, predicate, value,"
            " valid_from, valid_until, recorded_from, recorded_until, status, tier,"
            " processing_state, kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                cid,
                *b.scope,
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
    b.conn.execute(
        "UPDATE claims SET valid_until = ?, recorded_until = ?, status = ?, tier = ?,"
        " processing_state = ? WHERE id = ? AND tenant_id = ? AND person_id = ?",
        (*mutable, cid, *b.scope),
    )
    b.enqueue_repair("claim", cid)


# -- claim_evidence (pass 4)


def claim_evidence(b: Batch, body: Record) -> None:
    """A claim–evidence link (pass 4): insert, or check it is the same link (§4.5
    "claim_evidence")."""
    claim_id: str = body["claim_id"]
    evidence_id: str = body["evidence_id"]
    require_text(body["tenant_id"], "tenant id")
    require_text(body["person_id"], "person id")
    require_text(claim_id, "claim id")
    require_text(evidence_id, "evidence id")
    confidence: int = body["confidence_basis_points"]
    if confidence > MAX_CONFIDENCE:
        raise InvalidInput(f"confidence {confidence} must be at most {MAX_CONFIDENCE} basis points")
    b.require("claim", claim_id)
    b.require("evidence", evidence_id)
    relation = quoted(body["relation"])  # claim_evidence.relation is JSON-quoted
    stored = b.stored_link(claim_id, evidence_id)
    if stored is not None:
        if stored != (relation, confidence):
            raise InvalidInput(
                f"applied claim evidence {claim_id}/{evidence_id} conflicts with the stored link"
            )
        return
    b.conn.execute(
        "INSERT INTO claim_evidence (tenant_id, person_id, claim_id, evidence_id, relation,"
        " confidence_basis_points) VALUES (?, ?, ?, ?, ?, ?)",
        (*b.scope, claim_id, evidence_id, relation, confidence),
    )
    b.links[(claim_id, evidence_id)] = (relation, confidence)


# -- profile (pass 5)


def profile(b: Batch, body: Record) -> None:
    """A profile entry (pass 5): last writer wins per key, backed by a profile_fact claim
    (§4.5 "profile")."""
    pid: str = body["id"]
    claim_id: str = body["claim_id"]
    backing = b.conn.execute(
        "SELECT kind, predicate, value FROM claims"
        " WHERE id = ? AND tenant_id = ? AND person_id = ?",
        (claim_id, *b.scope),
    ).fetchone()
    if backing is None:
        raise InvalidInput(f"applied record references unknown claim {claim_id}")
    mismatch = InvalidInput(f"applied profile entry {pid} does not match its backing claim")
    if tuple(backing) != ("profile_fact", body["key"], body["value"]):
        raise mismatch
    if b.taken("profile_entries", pid):
        b.refuse_taken("profile", pid)
    # Last writer wins (§7): the key's other entry goes, this one is upserted by id.
    b.conn.execute(
        "DELETE FROM profile_entries WHERE tenant_id = ? AND person_id = ? AND key = ? AND id <> ?",
        (*b.scope, body["key"], pid),
    )
    try:
        b.conn.execute(
            "INSERT INTO profile_entries (id, tenant_id, person_id, key, value, stability,"
            " claim_id, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET key = excluded.key, value = excluded.value,"
            " stability = excluded.stability, claim_id = excluded.claim_id,"
            " recorded_at = excluded.recorded_at",
            (
                pid,
                *b.scope,
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


def daily_review(b: Batch, body: Record) -> None:
    """A daily review (pass 6): insert, or check it is the same review (§4.5
    "daily_review")."""
    rid: str = body["id"]
    evidence_ids: list[str] = body["evidence_ids"]
    for evidence_id in evidence_ids:
        b.require("evidence", evidence_id)
    encoded = feed.encode_id_list(evidence_ids)  # compared byte for byte (storage.md §2.3)
    wanted = (body["day"], body["summary"], encoded, body["recorded_at"])
    row = b.conn.execute(
        "SELECT day, summary, evidence_ids, recorded_at FROM daily_reviews"
        " WHERE id = ? AND tenant_id = ? AND person_id = ?",
        (rid, *b.scope),
    ).fetchone()
    if row is not None:
        if tuple(row) != wanted:
            raise InvalidInput(f"applied daily review {rid} conflicts with the stored review")
        return
    if b.taken("daily_reviews", rid):
        b.refuse_taken("daily_review", rid)
    b.conn.execute(
        "INSERT INTO daily_reviews (id, tenant_id, person_id, day, summary, evidence_ids,"
        " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (rid, *b.scope, *wanted),
    )


# -- correction (pass 7)


def correction(b: Batch, body: Record) -> None:
    """A correction (pass 7): the supersession lineage between two claims (§4.5
    "correction")."""
    superseded: str = body["superseded_claim_id"]
    claim_id: str = body["claim_id"]
    source_id: str = body["source_id"]
    evidence_id: str = body["evidence_id"]
    b.require("claim", superseded)
    b.require("claim", claim_id)
    b.require("evidence", evidence_id)
    wanted = (source_id, evidence_id, body["valid_at"], body["recorded_at"])
    row = b.conn.execute(
        "SELECT source_id, evidence_id, valid_at, recorded_at FROM corrections"
        " WHERE tenant_id = ? AND person_id = ? AND superseded_claim_id = ? AND claim_id = ?",
        (*b.scope, superseded, claim_id),
    ).fetchone()
    if row is not None:
        if tuple(row) != wanted:
            raise InvalidInput(
                f"applied correction {superseded}/{claim_id} conflicts with the stored correction"
            )
        return
    # Lineage (the correction_scope trigger's rule, checked first for its own message).
    lineage = b.conn.execute(
        "SELECT 1 FROM sources AS s JOIN evidence AS e"
        " ON e.id = ? AND e.source_id = s.id"
        " AND e.tenant_id = s.tenant_id AND e.person_id = s.person_id"
        " WHERE s.id = ? AND s.tenant_id = ? AND s.person_id = ?"
        " AND s.origin_claim_id = ? AND s.origin_evidence_id = ?",
        (evidence_id, source_id, *b.scope, claim_id, evidence_id),
    ).fetchone()
    if lineage is None:
        raise InvalidInput(
            f"applied correction {superseded}/{claim_id} does not match its source lineage"
        )
    b.conn.execute(
        "INSERT INTO corrections (tenant_id, person_id, superseded_claim_id, claim_id,"
        " source_id, evidence_id, valid_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (*b.scope, superseded, claim_id, *wanted),
    )


# -- deletion (pass 8): never cascades; the origin commit lists every effect


def deletion(b: Batch, body: Record) -> None:
    """A deletion (pass 8): tombstone or retract its target; never cascades, the origin
    commit lists every effect (§4.5 "deletion")."""
    kind: str = body["target"]["kind"]
    target: str = body["target"]["id"]
    deleted_at: int = body["deleted_at"]
    args = (target, *b.scope)
    if kind == "source":
        row = b.conn.execute(
            "SELECT deleted_at FROM sources WHERE id = ? AND tenant_id = ? AND person_id = ?",
            args,
        ).fetchone()
        if row is None:
            raise InvalidInput(f"applied deletion references unknown target source:{target}")
        if row[0] is None:
            # The revision is not bumped here (§7); the commit's source record carries it.
            b.conn.execute(
                "UPDATE sources SET deleted_at = ?"
                " WHERE id = ? AND tenant_id = ? AND person_id = ?",
                (deleted_at, *args),
            )
        b.drop_fts(target)
        b.enqueue_repair("source", target)
    elif kind == "evidence":
        changed = b.conn.execute(
            "UPDATE evidence SET deleted_at = ? WHERE id = ? AND tenant_id = ?"
            f" AND person_id = ? AND {live_evidence('')}",
            (deleted_at, *args),
        ).rowcount
        if not changed:
            b.require("evidence", target)
        b.enqueue_repair("evidence", target)
    elif kind == "claim":
        row = b.conn.execute(
            "SELECT status, recorded_from FROM claims"
            " WHERE id = ? AND tenant_id = ? AND person_id = ?",
            args,
        ).fetchone()
        if row is None:
            raise InvalidInput(f"applied record references unknown claim {target}")
        if row[0] == Status.ACCEPTED.value:
            if _bad_interval(row[1], deleted_at):
                raise InvalidInput("applied claim carries an invalid time interval")
            b.conn.execute(
                "UPDATE claims SET status = 'retracted', recorded_until = ?"
                " WHERE id = ? AND tenant_id = ? AND person_id = ?",
                (deleted_at, *args),
            )
        b.enqueue_repair("claim", target)
    elif kind == "profile_entry":
        b.conn.execute(
            "DELETE FROM profile_entries WHERE id = ? AND tenant_id = ? AND person_id = ?",
            args,
        )
    else:  # daily_review
        b.conn.execute(
            "DELETE FROM daily_reviews WHERE id = ? AND tenant_id = ? AND person_id = ?",
            args,
        )


PASSES: tuple[tuple[str, Handler], ...] = (
    ("source", source),
    ("evidence", evidence),
    ("claim", claim),
    (ORIGINS, origins),
    ("claim_evidence", claim_evidence),
    ("profile", profile),
    ("daily_review", daily_review),
    ("correction", correction),
    ("deletion", deletion),
)
"""Dependency passes of spec/sync.md §4.4, in order; within a pass, records keep event order."""
