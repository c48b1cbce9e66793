"""Requests and results of ``remember`` and ``locator`` (spec/lifecycle.md §3.1-3.2)."""

from zkr.codec import Fields
from zkr.model.base import scope_fields
from zkr.model.kinds import ClaimKind, ProcessingState, SourceKind, Tier
from zkr.typelite import Any, NamedTuple


class ClaimInput(NamedTuple):
    subject: str
    predicate: str
    value: str
    kind: ClaimKind
    valid_from: int
    tier: Tier = Tier.LONG_TERM
    processing_state: ProcessingState = ProcessingState.PROCESSED

    @classmethod
    def from_json(cls, f: Fields) -> "ClaimInput":
        return cls(
            subject=f.string("subject"),
            predicate=f.string("predicate"),
            value=f.string("value"),
            kind=f.enum("kind", ClaimKind),
            valid_from=f.i64("valid_from"),
            tier=f.enum_default("tier", Tier, Tier.LONG_TERM),
            processing_state=f.enum_default(
                "processing_state", ProcessingState, ProcessingState.PROCESSED
            ),
        )


class Locator(NamedTuple):
    """A transcript locator; ``start_ms``/``end_ms`` are unsigned milliseconds."""

    device_id: str
    provider: str
    stream_id: str
    segment_id: str
    start_ms: int
    end_ms: int

    @classmethod
    def from_json(cls, f: Fields) -> "Locator":
        return cls(
            device_id=f.string("device_id"),
            provider=f.string("provider"),
            stream_id=f.string("stream_id"),
            segment_id=f.string("segment_id"),
            start_ms=f.u64("start_ms"),
            end_ms=f.u64("end_ms"),
        )

    def to_json(self) -> dict[str, Any]:
        """Field order of the feed's locator object (spec/sync.md §1.2)."""
        return {
            "device_id": self.device_id,
            "provider": self.provider,
            "stream_id": self.stream_id,
            "segment_id": self.segment_id,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
        }


class RememberRequest(NamedTuple):
    tenant_id: str
    person_id: str
    kind: SourceKind
    text: str
    captured_at: int
    recorded_at: int
    ingestion_key: str | None = None
    claim: ClaimInput | None = None
    locator: Locator | None = None

    @classmethod
    def from_json(cls, value: Any) -> "RememberRequest":
        f = Fields(value, "struct RememberRequest")
        tenant, person = scope_fields(f)
        claim = f.opt_obj("claim", "struct ClaimInput")
        locator = f.opt_obj("locator", "struct TranscriptLocator")
        return cls(
            tenant_id=tenant,
            person_id=person,
            kind=f.enum("kind", SourceKind),
            text=f.string("text"),
            captured_at=f.i64("captured_at"),
            recorded_at=f.i64("recorded_at"),
            ingestion_key=f.opt_string("ingestion_key"),
            claim=None if claim is None else ClaimInput.from_json(claim),
            locator=None if locator is None else Locator.from_json(locator),
        )


class RememberResult(NamedTuple):
    source_id: str
    evidence_id: str
    claim_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "source_id": self.source_id,
            "evidence_id": self.evidence_id,
            "claim_id": self.claim_id,
        }


class RememberOutcome(NamedTuple):
    """What happened to one request of ``remember_many(..., outcomes=True)``.

    ``status`` is ``stored``, ``replayed`` (same ingestion key and payload as before: the
    original ids), ``deleted`` (the key's memory was deleted: skipped) or ``failed``
    (``error`` holds the message); ``result`` is set for stored and replayed requests.
    """

    status: str
    result: RememberResult | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "result": None if self.result is None else self.result.to_json(),
            "error": self.error,
        }


class LocatorRequest(NamedTuple):
    tenant_id: str
    person_id: str
    evidence_id: str

    @classmethod
    def from_json(cls, value: Any) -> "LocatorRequest":
        f = Fields(value, "struct LocatorRequest")
        tenant, person = scope_fields(f)
        return cls(tenant, person, f.string("evidence_id"))
