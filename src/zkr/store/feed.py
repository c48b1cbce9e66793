"""The authoritative commit feed: record shapes and appending commits (export pages them out).

Every successful, non-no-op mutation appends one ``memory_commits`` row and one
``memory_export_events`` row per record (spec/lifecycle.md §1.4, spec/sync.md §2). A record is
the envelope ``{"kind": K, "record": R}`` with R's keys in declared order (spec/sync.md §1.2);
its stored payload is :func:`zkr.codec.canonical` of the envelope, and the payload hash is the
SHA-256 of those bytes.

The ``*_record(conn, …)`` builders read one stored row back and decode its stored encodings
strictly (JSON-quoted enums, bare enums, the evidence-id array), raising
:class:`~zkr.errors.StorageError` on a non-canonical value, as the reference's typed row
decoding does (spec/storage.md §4.4 step 5). The ``*_body`` helpers build the same shapes from
values already in hand, so hot write paths need not read their own rows back.

:mod:`zkr.store.export` pages the feed of one scope out (spec/sync.md §3), :mod:`zkr.store.apply`
is its inverse and :mod:`zkr.store.records` parses and hashes records received from elsewhere;
this module imports none of them (nor :mod:`zkr.store.db`), so the migrations can use it.
"""

from __future__ import annotations

import json
import sqlite3

from zkr import model
from zkr.codec import canonical
from zkr.errors import StorageError
from zkr.model import (
    ClaimKind,
    ProcessingState,
    Relation,
    SourceKind,
    Stability,
    Status,
    Tier,
)
from zkr.store.driver import is_postgres
from zkr.typelite import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the remember family is loaded only when a locator is read (``export``)
    from zkr.model import Locator

RECORD_LIMIT = 1_048_576
"""Largest canonical payload of one record, in UTF-8 bytes (exactly 1 MiB is allowed)."""

Record = dict[str, Any]


# --------------------------------------------------------------------------- strict decoding


def _conversion_error(column: str, value: object) -> StorageError:
    return StorageError(
        f"Conversion error from type Text for column {column}: invalid value {value!r}"
    )


def decode_quoted(value: object, allowed: frozenset[str], column: str) -> str:
    """Decode a JSON-quoted enum column (``"supports"`` with its quotes)."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        inner = value[1:-1]
        if inner in allowed:
            return inner
    raise _conversion_error(column, value)


def decode_bare(value: object, allowed: frozenset[str], column: str) -> str:
    """Decode a bare enum column (``accepted``)."""
    if isinstance(value, str) and value in allowed:
        return value
    raise _conversion_error(column, value)


def decode_unsigned(value: object, column: str) -> int:
    if isinstance(value, int) and value >= 0:
        return value
    raise StorageError(
        f"Conversion error for column {column}: {value!r} is not an unsigned integer"
    )


def decode_id_list(value: object, column: str = "evidence_ids") -> list[str]:
    """``daily_reviews.evidence_ids``: a JSON array of strings, order kept."""
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
        return parsed
    raise _conversion_error(column, value)


def encode_id_list(ids: list[str]) -> str:
    """The compact array form ``["id1","id2"]`` that ``apply`` compares byte for byte."""
    return canonical(list(ids))


SOURCE_KINDS = frozenset(k.value for k in SourceKind)
CLAIM_KINDS = frozenset(k.value for k in ClaimKind)
STATUSES = frozenset(s.value for s in Status)
TIERS = frozenset(t.value for t in Tier)
STATES = frozenset(p.value for p in ProcessingState)
RELATIONS = frozenset(r.value for r in Relation)
STABILITIES = frozenset(s.value for s in Stability)


# --------------------------------------------------------------------------- record bodies


def source_body(
    *,
    id: str,
    tenant_id: str,
    person_id: str,
    revision: int,
    kind: str,
    content: str,
    captured_at: int,
    recorded_at: int,
    deleted_at: int | None,
    ingestion_key: str | None,
    origin_evidence_id: str | None,
    origin_claim_id: str | None,
) -> Record:
    return {
        "kind": "source",
        "record": {
            "source": {
                "id": id,
                "tenant_id": tenant_id,
                "person_id": person_id,
                "revision": revision,
                "kind": kind,
                "content": content,
                "captured_at": captured_at,
                "recorded_at": recorded_at,
                "deleted_at": deleted_at,
            },
            "ingestion_key": ingestion_key,
            "origin_evidence_id": origin_evidence_id,
            "origin_claim_id": origin_claim_id,
        },
    }


def evidence_body(
    *,
    id: str,
    tenant_id: str,
    person_id: str,
    source_id: str,
    source_revision: int,
    quote: str,
    recorded_at: int,
    locator: Locator | None,
    deleted_at: int | None,
) -> Record:
    return {
        "kind": "evidence",
        "record": {
            "evidence": {
                "id": id,
                "tenant_id": tenant_id,
                "person_id": person_id,
                "source_id": source_id,
                "source_revision": source_revision,
                "quote": quote,
                "byte_range": None,
                "recorded_at": recorded_at,
            },
            "locator": None if locator is None else locator.to_json(),
            "deleted_at": deleted_at,
        },
    }


def claim_body(
    *,
    id: str,
    tenant_id: str,
    person_id: str,
    subject: str,
    predicate: str,
    value: str,
    kind: str,
    valid_from: int,
    valid_until: int | None,
    recorded_from: int,
    recorded_until: int | None,
    status: str,
    tier: str,
    processing_state: str,
) -> Record:
    return {
        "kind": "claim",
        "record": {
            "id": id,
            "tenant_id": tenant_id,
            "person_id": person_id,
            "subject": subject,
            "predicate": predicate,
            "value": value,
            "kind": kind,
            "valid_time": {"from": valid_from, "until": valid_until},
            "recorded_time": {"from": recorded_from, "until": recorded_until},
            "status": status,
            "tier": tier,
            "processing_state": processing_state,
        },
    }


def claim_evidence_body(
    tenant_id: str,
    person_id: str,
    claim_id: str,
    evidence_id: str,
    relation: str,
    confidence_basis_points: int,
) -> Record:
    return {
        "kind": "claim_evidence",
        "record": {
            "tenant_id": tenant_id,
            "person_id": person_id,
            "claim_id": claim_id,
            "evidence_id": evidence_id,
            "relation": relation,
            "confidence_basis_points": confidence_basis_points,
        },
    }


def correction_body(
    tenant_id: str,
    person_id: str,
    superseded_claim_id: str,
    claim_id: str,
    source_id: str,
    evidence_id: str,
    valid_at: int,
    recorded_at: int,
) -> Record:
    return {
        "kind": "correction",
        "record": {
            "tenant_id": tenant_id,
            "person_id": person_id,
            "superseded_claim_id": superseded_claim_id,
            "claim_id": claim_id,
            "source_id": source_id,
            "evidence_id": evidence_id,
            "valid_at": valid_at,
            "recorded_at": recorded_at,
        },
    }


def deletion_body(
    tenant_id: str, person_id: str, target_kind: str, target_id: str, deleted_at: int
) -> Record:
    """A deletion record; ``target_kind`` is source, evidence, claim, profile_entry or
    daily_review (spec/sync.md §1.2)."""
    return {
        "kind": "deletion",
        "record": {
            "tenant_id": tenant_id,
            "person_id": person_id,
            "target": {"kind": target_kind, "id": target_id},
            "deleted_at": deleted_at,
        },
    }


def profile_body(
    *,
    id: str,
    tenant_id: str,
    person_id: str,
    key: str,
    value: str,
    stability: str,
    claim_id: str,
    recorded_at: int,
) -> Record:
    return {
        "kind": "profile",
        "record": {
            "id": id,
            "tenant_id": tenant_id,
            "person_id": person_id,
            "key": key,
            "value": value,
            "stability": stability,
            "claim_id": claim_id,
            "recorded_at": recorded_at,
        },
    }


def review_body(
    *,
    id: str,
    tenant_id: str,
    person_id: str,
    day: str,
    summary: str,
    evidence_ids: list[str],
    recorded_at: int,
) -> Record:
    return {
        "kind": "daily_review",
        "record": {
            "id": id,
            "tenant_id": tenant_id,
            "person_id": person_id,
            "day": day,
            "summary": summary,
            "evidence_ids": list(evidence_ids),
            "recorded_at": recorded_at,
        },
    }


# --------------------------------------------------------------------------- reading rows


# A read-back within the scope the caller writes: the scoped key serves it on PostgreSQL.
_SCOPED = ("", " AND tenant_id = ? AND person_id = ?")


def _one(
    conn: sqlite3.Connection, sql: str, args: tuple[object, ...], what: str
) -> tuple[Any, ...]:
    row = conn.execute(sql, args).fetchone()
    if row is None:
        raise StorageError(f"Query returned no rows ({what})")
    return tuple(row)


def source_record(
    conn: sqlite3.Connection, source_id: str, scope: tuple[str, str] | None = None
) -> Record:
    """The ``source`` record of a stored source (post-state, tombstones included)."""
    (sid, tenant, person, revision, kind, content, captured, recorded, deleted, key, oe, oc) = _one(
        conn,
        "SELECT id, tenant_id, person_id, revision, kind, content, captured_at, recorded_at,"
        " deleted_at, ingestion_key, origin_evidence_id, origin_claim_id"
        " FROM sources WHERE id = ?" + _SCOPED[scope is not None],
        (source_id, *(scope or ())),
        "source",
    )
    return source_body(
        id=sid,
        tenant_id=tenant,
        person_id=person,
        revision=decode_unsigned(revision, "revision"),
        kind=decode_quoted(kind, SOURCE_KINDS, "kind"),
        content=content,
        captured_at=captured,
        recorded_at=recorded,
        deleted_at=deleted,
        ingestion_key=key,
        origin_evidence_id=oe,
        origin_claim_id=oc,
    )


def read_locator(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, evidence_id: str
) -> Locator | None:
    """The transcript locator stored for one evidence row, if any."""
    row = conn.execute(
        "SELECT device_id, provider, stream_id, segment_id, start_ms, end_ms"
        " FROM evidence_locators WHERE tenant_id = ? AND person_id = ? AND evidence_id = ?",
        (tenant_id, person_id, evidence_id),
    ).fetchone()
    if row is None:
        return None
    return model.Locator(
        row[0],
        row[1],
        row[2],
        row[3],
        decode_unsigned(row[4], "start_ms"),
        decode_unsigned(row[5], "end_ms"),
    )


def evidence_record(
    conn: sqlite3.Connection, evidence_id: str, scope: tuple[str, str] | None = None
) -> Record:
    """The ``evidence`` record of a stored evidence row with its locator (or null)."""
    (eid, tenant, person, source_id, revision, quote, recorded, deleted) = _one(
        conn,
        "SELECT id, tenant_id, person_id, source_id, source_revision, quote, recorded_at,"
        " deleted_at FROM evidence WHERE id = ?" + _SCOPED[scope is not None],
        (evidence_id, *(scope or ())),
        "evidence",
    )
    return evidence_body(
        id=eid,
        tenant_id=tenant,
        person_id=person,
        source_id=source_id,
        source_revision=decode_unsigned(revision, "source_revision"),
        quote=quote,
        recorded_at=recorded,
        locator=read_locator(conn, tenant, person, eid),
        deleted_at=deleted,
    )


def claim_record(
    conn: sqlite3.Connection, claim_id: str, scope: tuple[str, str] | None = None
) -> Record:
    """The ``claim`` record of a stored claim (enums bare)."""
    row = _one(
        conn,
        "SELECT id, tenant_id, person_id, subject, predicate, value, kind, valid_from,"
        " valid_until, recorded_from, recorded_until, status, tier, processing_state"
        " FROM claims WHERE id = ?" + _SCOPED[scope is not None],
        (claim_id, *(scope or ())),
        "claim",
    )
    return claim_body(
        id=row[0],
        tenant_id=row[1],
        person_id=row[2],
        subject=row[3],
        predicate=row[4],
        value=row[5],
        kind=decode_bare(row[6], CLAIM_KINDS, "kind"),
        valid_from=row[7],
        valid_until=row[8],
        recorded_from=row[9],
        recorded_until=row[10],
        status=decode_bare(row[11], STATUSES, "status"),
        tier=decode_bare(row[12], TIERS, "tier"),
        processing_state=decode_bare(row[13], STATES, "processing_state"),
    )


def claim_evidence_record(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, claim_id: str, evidence_id: str
) -> Record:
    """The ``claim_evidence`` record of one stored link (relation JSON-quoted in storage)."""
    relation, confidence = _one(
        conn,
        "SELECT relation, confidence_basis_points FROM claim_evidence"
        " WHERE tenant_id = ? AND person_id = ? AND claim_id = ? AND evidence_id = ?",
        (tenant_id, person_id, claim_id, evidence_id),
        "claim_evidence",
    )
    if not isinstance(confidence, int) or not 0 <= confidence <= 65535:
        raise StorageError(f"Conversion error for column confidence_basis_points: {confidence!r}")
    return claim_evidence_body(
        tenant_id,
        person_id,
        claim_id,
        evidence_id,
        decode_quoted(relation, RELATIONS, "relation"),
        confidence,
    )


def profile_record(
    conn: sqlite3.Connection, profile_id: str, scope: tuple[str, str] | None = None
) -> Record:
    """The ``profile`` record of a stored profile entry (stability JSON-quoted in storage)."""
    (pid, tenant, person, key, value, stability, claim_id, recorded) = _one(
        conn,
        "SELECT id, tenant_id, person_id, key, value, stability, claim_id, recorded_at"
        " FROM profile_entries WHERE id = ?" + _SCOPED[scope is not None],
        (profile_id, *(scope or ())),
        "profile",
    )
    return profile_body(
        id=pid,
        tenant_id=tenant,
        person_id=person,
        key=key,
        value=value,
        stability=decode_quoted(stability, STABILITIES, "stability"),
        claim_id=claim_id,
        recorded_at=recorded,
    )


def review_record(
    conn: sqlite3.Connection, review_id: str, scope: tuple[str, str] | None = None
) -> Record:
    """The ``daily_review`` record of a stored review (evidence ids decoded from JSON)."""
    (rid, tenant, person, day, summary, ids, recorded) = _one(
        conn,
        "SELECT id, tenant_id, person_id, day, summary, evidence_ids, recorded_at"
        " FROM daily_reviews WHERE id = ?" + _SCOPED[scope is not None],
        (review_id, *(scope or ())),
        "daily_review",
    )
    return review_body(
        id=rid,
        tenant_id=tenant,
        person_id=person,
        day=day,
        summary=summary,
        evidence_ids=decode_id_list(ids),
        recorded_at=recorded,
    )


# --------------------------------------------------------------------------- appending


def record_scope(record: Record) -> tuple[str, str]:
    """A record's scope: inside ``source``/``evidence`` for those kinds, top level otherwise."""
    body = record["record"]
    if record["kind"] == "source":
        body = body["source"]
    elif record["kind"] == "evidence":
        body = body["evidence"]
    return body["tenant_id"], body["person_id"]


def append_commit(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    recorded_at: int,
    records: list[Record],
) -> None:
    """Append one commit holding ``records`` in order (a new global sequence).

    Raises :class:`StorageError` ``export record scope does not match its commit`` or
    ``export record exceeds 1048576 bytes`` (spec/sync.md §2); the caller's transaction then
    rolls back, so no authoritative row survives either.
    """
    payloads: list[str] = []
    for record in records:
        if record_scope(record) != (tenant_id, person_id):
            raise StorageError("export record scope does not match its commit")
        payloads.append(canonical(record))
    append_payloads(conn, tenant_id, person_id, recorded_at, payloads)


def append_payloads(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    recorded_at: int,
    payloads: list[str],
) -> None:
    """:func:`append_commit` for records already serialised canonically and scope-checked.

    ``apply`` computes every record's canonical payload for its ledger hash before it writes,
    so it appends those same strings instead of serialising each record again. The size rule
    of spec/sync.md §2 still applies (``export record exceeds 1048576 bytes``).
    """
    for payload in payloads:
        if len(payload) > RECORD_LIMIT // 4 and len(payload.encode("utf-8")) > RECORD_LIMIT:
            raise StorageError(f"export record exceeds {RECORD_LIMIT} bytes")
    cursor = conn.execute(
        "INSERT INTO memory_commits (tenant_id, person_id, recorded_at) VALUES (?, ?, ?)",
        (tenant_id, person_id, recorded_at),
    )
    if is_postgres(conn):
        # Events carry their commit's scope there (zkr.store.pg.schema), and take the sequence
        # the commit row just drew in this session (currval: nothing else draws from it), so
        # nothing is read back and apply's writes go to the server in batches.
        conn.executemany(
            "INSERT INTO memory_export_events (tenant_id, person_id, commit_sequence,"
            " event_index, payload) VALUES (?, ?, currval('memory_commits_sequence_seq'), ?, ?)",
            [(tenant_id, person_id, i, payload) for i, payload in enumerate(payloads)],
        )
        return
    sequence = cursor.lastrowid
    assert sequence is not None
    conn.executemany(
        "INSERT INTO memory_export_events (commit_sequence, event_index, payload) VALUES (?, ?, ?)",
        [(sequence, index, payload) for index, payload in enumerate(payloads)],
    )


def rewrite_event(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    sequence: int,
    index: int,
    payload: str,
) -> None:
    """Replace the stored payload of one event of a scope's commit (``erase`` blanks the text
    of stored records, docs/erase.md). On PostgreSQL events carry their commit's scope, and
    the statement names it, so it stays on the person's shard."""
    if is_postgres(conn):
        conn.execute(
            "UPDATE memory_export_events SET payload = ? WHERE tenant_id = ? AND person_id = ?"
            " AND commit_sequence = ? AND event_index = ?",
            (payload, tenant_id, person_id, sequence, index),
        )
        return
    conn.execute(
        "UPDATE memory_export_events SET payload = ? WHERE commit_sequence = ? AND event_index = ?",
        (payload, sequence, index),
    )
