"""Feed records received from elsewhere: strict parsing, canonical bytes, ledger identity.

A record arrives as JSON in an ``apply`` request (or is read back from a stored payload by
``export``). :func:`parse_record` validates it with the rules of spec/sync.md §1.3 and rebuilds
it with the :mod:`zkr.store.feed` builders, so the result is the canonical envelope: keys in
declared order, unknown keys dropped, missing nullable keys as ``None``, a claim's missing
``tier``/``processing_state`` defaulted. :func:`payload_hash` hashes *that* form, never the
received bytes (spec/sync.md §1.4-1.5): the CLI prints records with sorted keys, so received
bytes differ from the canonical ones.

:func:`parse_commit` parses one commit of an ``apply`` request the same way, computing each
record's canonical payload and ledger key once (spec/sync.md §4.1).

Everything here raises :class:`~zkr.errors.RequestError` (a parse error: the message is not part
of the contract, spec/sync.md §1.3) and touches no database.
"""

from typing import Any

from zkr import model
from zkr.codec import U64_MAX, Fields, canonical, expect_int, expect_str, sha256_tagged
from zkr.errors import RequestError
from zkr.model import (
    ClaimKind,
    ProcessingState,
    Relation,
    SourceKind,
    Stability,
    Status,
    Tier,
)
from zkr.store import feed
from zkr.store.feed import Record

RECORD_KINDS = (
    "source",
    "evidence",
    "claim",
    "claim_evidence",
    "correction",
    "deletion",
    "profile",
    "daily_review",
)
"""The eight record kinds, in the reference's variant order (used in error messages)."""

DELETION_TARGETS = ("source", "evidence", "claim", "profile_entry", "daily_review")
"""Target kinds a ``deletion`` record may name (spec/sync.md §1.2)."""


def _variant(value: Any, allowed: tuple[str, ...], what: str) -> str:
    """A string that must be one of ``allowed`` (serde's ``unknown variant`` shape)."""
    if not isinstance(value, str):
        raise RequestError(f"invalid type: {_kind_of(value)}, expected {what}")
    if value not in allowed:
        names = ", ".join(f"`{name}`" for name in allowed)
        raise RequestError(f"unknown variant `{value}`, expected one of {names}")
    return value


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "a sequence"
    return "a map" if isinstance(value, dict) else "a value"


# --------------------------------------------------------------------------- per kind


def _source(f: Fields) -> Record:
    s = f.obj("source", "struct Source")
    return feed.source_body(
        id=s.string("id"),
        tenant_id=s.string("tenant_id"),
        person_id=s.string("person_id"),
        revision=s.u64("revision"),
        kind=s.enum("kind", SourceKind).value,
        content=s.string("content"),
        captured_at=s.i64("captured_at"),
        recorded_at=s.i64("recorded_at"),
        deleted_at=s.opt_i64("deleted_at"),
        ingestion_key=f.opt_string("ingestion_key"),
        origin_evidence_id=f.opt_string("origin_evidence_id"),
        origin_claim_id=f.opt_string("origin_claim_id"),
    )


def _evidence(f: Fields) -> Record:
    e = f.obj("evidence", "struct Evidence")
    byte_range = e.opt_obj("byte_range", "struct ByteRange")
    locator = f.opt_obj("locator", "struct TranscriptLocator")
    record = feed.evidence_body(
        id=e.string("id"),
        tenant_id=e.string("tenant_id"),
        person_id=e.string("person_id"),
        source_id=e.string("source_id"),
        source_revision=e.u64("source_revision"),
        quote=e.string("quote"),
        recorded_at=e.i64("recorded_at"),
        locator=None if locator is None else model.Locator.from_json(locator),
        deleted_at=f.opt_i64("deleted_at"),
    )
    if byte_range is not None:
        # Never written by the reference; kept so the hash is right and apply can reject it
        # with its own message (spec/sync.md §4.5, evidence).
        record["record"]["evidence"]["byte_range"] = {
            "start": byte_range.u64("start"),
            "end": byte_range.u64("end"),
        }
    return record


def _interval(f: Fields, name: str) -> tuple[int, int | None]:
    interval = f.obj(name, "struct TimeInterval")
    return interval.i64("from"), interval.opt_i64("until")


def _claim(f: Fields) -> Record:
    valid_from, valid_until = _interval(f, "valid_time")
    recorded_from, recorded_until = _interval(f, "recorded_time")
    return feed.claim_body(
        id=f.string("id"),
        tenant_id=f.string("tenant_id"),
        person_id=f.string("person_id"),
        subject=f.string("subject"),
        predicate=f.string("predicate"),
        value=f.string("value"),
        kind=f.enum("kind", ClaimKind).value,
        valid_from=valid_from,
        valid_until=valid_until,
        recorded_from=recorded_from,
        recorded_until=recorded_until,
        status=f.enum("status", Status).value,
        # spec/sync.md §1.3: only these two default, and only when absent (null is an error).
        tier=f.enum_default("tier", Tier, Tier.LONG_TERM).value,
        processing_state=f.enum_default(
            "processing_state", ProcessingState, ProcessingState.PROCESSED
        ).value,
    )


def _claim_evidence(f: Fields) -> Record:
    return feed.claim_evidence_body(
        f.string("tenant_id"),
        f.string("person_id"),
        f.string("claim_id"),
        f.string("evidence_id"),
        f.enum("relation", Relation).value,
        f.u16("confidence_basis_points"),
    )


def _correction(f: Fields) -> Record:
    return feed.correction_body(
        f.string("tenant_id"),
        f.string("person_id"),
        f.string("superseded_claim_id"),
        f.string("claim_id"),
        f.string("source_id"),
        f.string("evidence_id"),
        f.i64("valid_at"),
        f.i64("recorded_at"),
    )


def _deletion(f: Fields) -> Record:
    target = f.obj("target", "struct MemoryRef")
    return feed.deletion_body(
        f.string("tenant_id"),
        f.string("person_id"),
        _variant(target.required("kind"), DELETION_TARGETS, "enum MemoryKind"),
        target.string("id"),
        f.i64("deleted_at"),
    )


def _profile(f: Fields) -> Record:
    return feed.profile_body(
        id=f.string("id"),
        tenant_id=f.string("tenant_id"),
        person_id=f.string("person_id"),
        key=f.string("key"),
        value=f.string("value"),
        stability=f.enum("stability", Stability).value,
        claim_id=f.string("claim_id"),
        recorded_at=f.i64("recorded_at"),
    )


def _daily_review(f: Fields) -> Record:
    return feed.review_body(
        id=f.string("id"),
        tenant_id=f.string("tenant_id"),
        person_id=f.string("person_id"),
        day=f.string("day"),
        summary=f.string("summary"),
        evidence_ids=f.str_list("evidence_ids"),
        recorded_at=f.i64("recorded_at"),
    )


_PARSERS = {
    "source": (_source, "struct SourceRecord"),
    "evidence": (_evidence, "struct EvidenceRecord"),
    "claim": (_claim, "struct Claim"),
    "claim_evidence": (_claim_evidence, "struct ClaimEvidence"),
    "correction": (_correction, "struct Correction"),
    "deletion": (_deletion, "struct Deletion"),
    "profile": (_profile, "struct ProfileEntry"),
    "daily_review": (_daily_review, "struct DailyReview"),
}


# --------------------------------------------------------------------------- public API


def parse_record(value: Any) -> Record:
    """Parse one ``{"kind": K, "record": R}`` envelope into its canonical form.

    Keys may come in any order and unknown keys are dropped at every level; integers must be
    JSON integers in range (``bool`` and ``float`` are rejected); enums must be known variants.
    Raises :class:`RequestError`. Lone surrogates are caught by :func:`canonical_payload`.
    """
    envelope = Fields(value, "adjacently tagged enum ExportRecord")
    kind = _variant(envelope.required("kind"), RECORD_KINDS, "enum ExportRecord")
    parse, what = _PARSERS[kind]
    return parse(Fields(envelope.required("record"), what))


def canonical_payload(record: Record) -> str:
    """The canonical text of a parsed record (spec/sync.md §1.4).

    Raises :class:`RequestError` when a string holds a lone surrogate, which has no UTF-8 form
    (requests decoded by :func:`zkr.codec.parse_json` never do; library callers might).
    """
    text = canonical(record)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError("lone leading or trailing surrogate in string") from None
    return text


def hash_payload(payload: str) -> str:
    """``sha256:`` + 64 lowercase hex digits of the UTF-8 bytes of a canonical payload."""
    return sha256_tagged(payload)


def payload_hash(record: Record) -> str:
    """The ledger hash of a parsed record: SHA-256 over its canonical bytes (spec/sync.md §1.5)."""
    return hash_payload(canonical_payload(record))


def record_identity(record: Record) -> tuple[str, str]:
    """``(record_kind, record_id)`` of the apply ledger (spec/sync.md §1.5)."""
    kind: str = record["kind"]
    body = record["record"]
    if kind == "source" or kind == "evidence":
        return kind, expect_str(body[kind]["id"])
    if kind == "claim_evidence":
        return kind, f"{body['claim_id']}/{body['evidence_id']}"
    if kind == "correction":
        return kind, f"{body['superseded_claim_id']}/{body['claim_id']}"
    if kind == "deletion":
        target = body["target"]
        return kind, f"{target['kind']}:{target['id']}"
    return kind, expect_str(body["id"])


# The text fields ``erase`` blanks, per record kind (docs/erase.md): paths inside the body.
ERASABLE_TEXT: dict[str, tuple[tuple[str, ...], ...]] = {
    "source": (("source", "content"),),
    "evidence": (("evidence", "quote"),),
    "claim": (("subject",), ("predicate",), ("value",)),
    "profile": (("key",), ("value",)),
    "daily_review": (("summary",),),
}


def text_fields(record: Record) -> list[tuple[dict[str, Any], str]]:
    """(object, key) of each text field ``erase`` blanks in a record, in ERASABLE_TEXT order."""
    out = []
    for path in ERASABLE_TEXT.get(record["kind"], ()):
        body = record["record"]
        for step in path[:-1]:
            body = body[step]
        out.append((body, path[-1]))
    return out


def blank_shaped(record: Record) -> bool:
    """Whether the record has text ``erase`` blanks and all of it is ``""`` (a parsed record,
    or a stored payload's JSON)."""
    paths = ERASABLE_TEXT.get(record["kind"])
    if paths is None:
        return False
    for path in paths:  # apply asks this of every record: no list built
        value = record["record"]
        for step in path:
            value = value[step]
        if value:
            return False
    return True


def blank(record: Record) -> Record:
    """The record with every text field ``erase`` blanks set to ``""``, in place (field order
    kept, so its canonical form is the blanked payload); returns it."""
    for body, name in text_fields(record):
        body[name] = ""
    return record


__all__ = [
    "DELETION_TARGETS",
    "ERASABLE_TEXT",
    "RECORD_KINDS",
    "blank",
    "blank_shaped",
    "canonical_payload",
    "hash_payload",
    "parse_record",
    "payload_hash",
    "record_identity",
    "text_fields",
]


# --------------------------------------------------------------------------- commits of a request


class Event:
    """One parsed record of a commit with its ledger key (``index``: its place in the commit)."""

    __slots__ = ("index", "kind", "payload", "payload_hash", "record", "record_id")

    def __init__(
        self, index: int, record: Record, kind: str, record_id: str, payload: str, hash_: str
    ) -> None:
        self.index = index
        self.record = record
        self.kind = kind
        self.record_id = record_id
        self.payload = payload
        self.payload_hash = hash_


class Commit:
    """One parsed commit of an apply request (the shape of an export page's commit)."""

    __slots__ = ("event_count", "events", "first_event_index", "recorded_at", "sequence")

    def __init__(
        self,
        sequence: int,
        recorded_at: int,
        event_count: int,
        first_event_index: int,
        events: tuple[Event, ...],
    ) -> None:
        self.sequence = sequence
        self.recorded_at = recorded_at
        self.event_count = event_count
        self.first_event_index = first_event_index
        self.events = events


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
