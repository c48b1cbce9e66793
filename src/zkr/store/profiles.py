"""``profile``, ``profiles``, ``review`` and ``reviews`` (spec/lifecycle.md §3.8-3.11).

A profile entry projects a profile-live ``profile_fact`` claim (§2.2) into one current
key/value per scope: key = the claim's predicate, value = its value. A daily review is a cited
summary whose evidence must be live when it is written. Both writes append one commit; the
reads are bounded by ``limit`` (§1.6) and by a 1,000,000-byte page that fails rather than
truncates.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from zkr.codec import canonical
from zkr.errors import InvalidInput, NotFound, StorageError
from zkr.model import (
    DailyReview,
    LimitRequest,
    ProfileEntry,
    ProfileRequest,
    ReviewRequest,
    Stability,
    quoted,
)
from zkr.store import feed
from zkr.store.db import read_tx, write_tx
from zkr.store.eligibility import live_evidence
from zkr.text import bounded_limit, new_id, require_scope, require_text

PAGE_LIMIT = 1_000_000
"""Read page cap of ``profiles``/``reviews`` in bytes (decimal, not 1 MiB; §1.6)."""

# §2.2 "profile-live": tier and processing_state are deliberately ignored (§5 item 20).
PROFILE_LIVE_CLAIM = (
    "c.kind = 'profile_fact' AND c.status = 'accepted'"
    " AND c.valid_until IS NULL AND c.recorded_until IS NULL"
)


def check_page(items: Sequence[dict[str, Any]]) -> None:
    """Fail when the compact JSON array of ``items`` would exceed :data:`PAGE_LIMIT` (§1.6).

    Size = 2 bracket bytes + each item's compact JSON + 1 byte per comma. Too large is an
    error for the whole call, never a truncation.
    """
    total = 2
    for index, item in enumerate(items):
        size = len(canonical(item).encode("utf-8"))
        if size + 2 > PAGE_LIMIT:
            raise InvalidInput(f"read record exceeds the {PAGE_LIMIT}-byte page limit")
        added = size + (1 if index else 0)
        if total + added > PAGE_LIMIT:
            raise InvalidInput(f"read page exceeds the {PAGE_LIMIT}-byte page limit")
        total += added


def _int(value: object, column: str) -> int:
    if isinstance(value, int):
        return value
    raise StorageError(f"Conversion error for column {column}: {value!r} is not an integer")


# --------------------------------------------------------------------------- profile(s)


def profile_floor(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, claim_id: str
) -> int | None:
    """The earliest ``recorded_at`` :func:`profile` accepts for ``claim_id``: the claim's
    ``recorded_from``, and one second past the key's current entry (the §3.8 checks below);
    ``None`` unless the claim is profile-live in scope. For callers that default times to
    "now" (``zkr mcp``) when a device whose clock runs ahead recorded the claim or entry."""
    claim = conn.execute(
        "SELECT c.predicate, c.recorded_from FROM claims c"
        f" WHERE c.id = ? AND c.tenant_id = ? AND c.person_id = ? AND {PROFILE_LIVE_CLAIM}",
        (claim_id, tenant_id, person_id),
    ).fetchone()
    if claim is None:
        return None
    stored = conn.execute(
        "SELECT recorded_at FROM profile_entries WHERE tenant_id = ? AND person_id = ? AND key = ?",
        (tenant_id, person_id, claim[0]),
    ).fetchone()
    floor = int(claim[1])
    return floor if stored is None else max(floor, int(stored[0]) + 1)


def profile(conn: sqlite3.Connection, req: ProfileRequest) -> ProfileEntry:
    """Upsert the scope's entry for the claim's predicate (spec/lifecycle.md §3.8).

    An identical entry (value, stability, claim and recorded_at) is returned without a write or
    commit. Raises ``NotFound`` unless the claim is profile-live in scope, and ``InvalidInput``
    for ``profile entry cannot predate its backing claim`` and ``profile replacement must
    advance recorded_at``.
    """
    require_scope(req.tenant_id, req.person_id)
    t, p = req.tenant_id, req.person_id
    stability = quoted(req.stability.value)
    with write_tx(conn, (t, p)):
        claim = conn.execute(
            "SELECT c.predicate, c.value, c.recorded_from FROM claims c"
            f" WHERE c.id = ? AND c.tenant_id = ? AND c.person_id = ? AND {PROFILE_LIVE_CLAIM}",
            (req.claim_id, t, p),
        ).fetchone()
        if claim is None:
            raise NotFound()
        key, value, recorded_from = claim
        if req.recorded_at < recorded_from:
            raise InvalidInput("profile entry cannot predate its backing claim")
        # At most one entry per (scope, key), whatever its stability (profile_entries_current).
        stored = conn.execute(
            "SELECT id, value, stability, claim_id, recorded_at FROM profile_entries"
            " WHERE tenant_id = ? AND person_id = ? AND key = ?",
            (t, p, key),
        ).fetchone()
        if stored is not None:
            if tuple(stored[1:]) == (value, stability, req.claim_id, req.recorded_at):
                return _entry(t, p, key, stored)
            if req.recorded_at <= stored[4]:
                raise InvalidInput("profile replacement must advance recorded_at")
        # Upsert on the unique (scope, key) index: a replaced entry keeps its id.
        (entry_id,) = conn.execute(
            "INSERT INTO profile_entries (id, tenant_id, person_id, key, value, stability,"
            " claim_id, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (tenant_id, person_id, key) DO UPDATE SET value = excluded.value,"
            " stability = excluded.stability, claim_id = excluded.claim_id,"
            " recorded_at = excluded.recorded_at RETURNING id",
            (new_id(), t, p, key, value, stability, req.claim_id, req.recorded_at),
        ).fetchone()
        entry = ProfileEntry(
            id=entry_id,
            tenant_id=t,
            person_id=p,
            key=key,
            value=value,
            stability=req.stability,
            claim_id=req.claim_id,
            recorded_at=req.recorded_at,
        )
        record = feed.profile_body(
            id=entry_id,
            tenant_id=t,
            person_id=p,
            key=key,
            value=value,
            stability=req.stability.value,
            claim_id=req.claim_id,
            recorded_at=req.recorded_at,
        )
        feed.append_commit(conn, t, p, req.recorded_at, [record])
    return entry


def _entry(tenant_id: str, person_id: str, key: str, row: Sequence[Any]) -> ProfileEntry:
    """A stored entry from (id, value, stability, claim_id, recorded_at), decoded strictly."""
    return ProfileEntry(
        id=row[0],
        tenant_id=tenant_id,
        person_id=person_id,
        key=key,
        value=row[1],
        stability=Stability(feed.decode_quoted(row[2], feed.STABILITIES, "stability")),
        claim_id=row[3],
        recorded_at=_int(row[4], "recorded_at"),
    )


def profiles(conn: sqlite3.Connection, req: LimitRequest) -> list[ProfileEntry]:
    """Profile entries backed by profile-live claims, newest first (spec/lifecycle.md §3.9).

    Ordered by recorded_at descending, then id ascending; at most the bounded ``limit``.
    Raises ``InvalidInput`` when the page exceeds 1,000,000 bytes.
    """
    require_scope(req.tenant_id, req.person_id)
    t, p = req.tenant_id, req.person_id
    with read_tx(conn):
        rows = conn.execute(
            "SELECT pe.key, pe.id, pe.value, pe.stability, pe.claim_id, pe.recorded_at"
            " FROM profile_entries pe"
            " JOIN claims c ON c.id = pe.claim_id AND c.tenant_id = pe.tenant_id"
            "  AND c.person_id = pe.person_id"
            f" WHERE pe.tenant_id = ? AND pe.person_id = ? AND {PROFILE_LIVE_CLAIM}"
            " ORDER BY pe.recorded_at DESC, pe.id ASC LIMIT ?",
            (t, p, bounded_limit(req.limit)),
        ).fetchall()
    entries = [_entry(t, p, row[0], row[1:]) for row in rows]
    check_page([entry.to_json() for entry in entries])
    return entries


# --------------------------------------------------------------------------- review(s)


def review(conn: sqlite3.Connection, req: ReviewRequest) -> str:
    """Store a cited daily review; returns its new id (spec/lifecycle.md §3.10).

    Not idempotent: every call stores a new review (§5 item 24). Raises ``InvalidInput`` for
    a blank day or summary, an empty ``evidence_ids`` and the first cited id that is not live
    evidence in scope (``evidence <id> is unavailable``).
    """
    require_scope(req.tenant_id, req.person_id)
    require_text(req.day, "day")
    require_text(req.summary, "summary")
    if not req.evidence_ids:
        raise InvalidInput("review needs evidence_ids")
    t, p = req.tenant_id, req.person_id
    evidence_ids = feed.encode_id_list(req.evidence_ids)
    with write_tx(conn, (t, p)):
        live = {
            row[0]
            for row in conn.execute(
                "SELECT id FROM evidence WHERE tenant_id = ? AND person_id = ?"
                f" AND {live_evidence('')} AND id IN (SELECT value FROM json_each(?))",
                (t, p, evidence_ids),
            )
        }
        for evidence_id in req.evidence_ids:
            if evidence_id not in live:
                raise InvalidInput(f"evidence {evidence_id} is unavailable")
        review_id = new_id()
        conn.execute(
            "INSERT INTO daily_reviews (id, tenant_id, person_id, day, summary, evidence_ids,"
            " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (review_id, t, p, req.day, req.summary, evidence_ids, req.recorded_at),
        )
        record = feed.review_body(
            id=review_id,
            tenant_id=t,
            person_id=p,
            day=req.day,
            summary=req.summary,
            evidence_ids=req.evidence_ids,
            recorded_at=req.recorded_at,
        )
        feed.append_commit(conn, t, p, req.recorded_at, [record])
    return review_id


def reviews(conn: sqlite3.Connection, req: LimitRequest) -> list[DailyReview]:
    """The scope's daily reviews (spec/lifecycle.md §3.11).

    Ordered by day descending (text), recorded_at descending, then id ascending — a
    tiebreaker the reference lacks (§5 item 23). Raises ``InvalidInput`` over the page cap.
    """
    require_scope(req.tenant_id, req.person_id)
    with read_tx(conn):
        rows = conn.execute(
            "SELECT id, day, summary, evidence_ids, recorded_at FROM daily_reviews"
            " WHERE tenant_id = ? AND person_id = ?"
            " ORDER BY day DESC, recorded_at DESC, id ASC LIMIT ?",
            (req.tenant_id, req.person_id, bounded_limit(req.limit)),
        ).fetchall()
    items = [
        DailyReview(
            id=row[0],
            day=row[1],
            summary=row[2],
            evidence_ids=feed.decode_id_list(row[3]),
            recorded_at=_int(row[4], "recorded_at"),
        )
        for row in rows
    ]
    check_page([item.to_json() for item in items])
    return items


__all__ = ["PAGE_LIMIT", "check_page", "profile", "profiles", "review", "reviews"]
