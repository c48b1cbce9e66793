"""Records, enums and the typed request/response values of every command.

Values are immutable ``NamedTuple`` classes: they cost a fraction of dataclasses at import
time, which matters for a CLI that starts a fresh process per call.

Each request type has a ``from_json`` constructor that applies the CLI decoding rules of
spec/cli.md §5 (required fields, integer widths, ``null`` only where the field is optional,
unknown fields ignored except for ``profile``). The library API (:class:`zkr.MemoryDb`) takes
these values directly, so the CLI is only framing.

Timestamps are signed 64-bit integers (conventionally Unix seconds); confidence is in basis
points (0..10000); relevance in basis points (0..10000).
"""

import types
import typing
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, NamedTuple

from zkr.codec import (
    I64_MAX,
    I64_MIN,
    U16_MAX,
    U32_MAX,
    U64_MAX,
    Fields,
    expect_int,
    expect_str,
    has_lone_surrogate,
)
from zkr.errors import RequestError


class SourceKind(StrEnum):
    """Source kind; stored JSON-quoted in ``sources.kind`` (spec/storage.md §2.3)."""

    CONVERSATION = "conversation"
    SCREEN = "screen"
    AUDIO = "audio"
    DOCUMENT = "document"
    INTEGRATION = "integration"
    USER_CORRECTION = "user_correction"


class ClaimKind(StrEnum):
    """Claim kind; stored bare in ``claims.kind``."""

    FACT = "fact"
    PROFILE_FACT = "profile_fact"
    PREFERENCE = "preference"
    TASK = "task"
    SKILL = "skill"
    RECOMMENDATION = "recommendation"


class Tier(StrEnum):
    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"
    ARCHIVE = "archive"


class Status(StrEnum):
    ACCEPTED = "accepted"
    SUPERSEDED = "superseded"
    RETRACTED = "retracted"


class ProcessingState(StrEnum):
    PENDING = "pending"
    PROCESSED = "processed"
    BLOCKED = "blocked"


class Relation(StrEnum):
    """Claim-evidence relation; stored JSON-quoted in ``claim_evidence.relation``."""

    SUPPORTS = "supports"
    CONTRADICTS = "contradicts"


class Stability(StrEnum):
    """Profile stability; stored JSON-quoted in ``profile_entries.stability``."""

    STABLE = "stable"
    CURRENT = "current"


class Normalization(StrEnum):
    NONE = "none"
    L2 = "l2"


class Distance(StrEnum):
    COSINE = "cosine"
    DOT = "dot"
    EUCLIDEAN = "euclidean"


class TargetKind(StrEnum):
    """Retrieval targets; the order source < evidence < claim is search's tie-break order."""

    SOURCE = "source"
    EVIDENCE = "evidence"
    CLAIM = "claim"


TARGET_RANK = {TargetKind.SOURCE: 0, TargetKind.EVIDENCE: 1, TargetKind.CLAIM: 2}


def quoted(value: str) -> str:
    """The JSON-string-literal encoding some enum columns use (``"supports"`` with quotes)."""
    return f'"{value}"'


def is_legal_state(tier: Tier, status: Status, state: ProcessingState) -> bool:
    """The legal-state matrix (spec/lifecycle.md §2.1): 14 legal of 27 combinations."""
    if tier is Tier.ARCHIVE and status is Status.SUPERSEDED:
        return False
    return not (tier is not Tier.SHORT_TERM and state is not ProcessingState.PROCESSED)


class Target(NamedTuple):
    """A retrieval/projection target ``{"kind": ..., "id": ...}``."""

    kind: TargetKind
    id: str

    @classmethod
    def from_json(cls, value: Any) -> "Target":
        f = Fields(value, "struct TargetRef")
        return cls(kind=f.enum("kind", TargetKind), id=f.string("id"))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "id": self.id}

    def sort_key(self) -> tuple[int, str]:
        """Search's target order: kind rank, then id by code point."""
        return (TARGET_RANK[self.kind], self.id)


class Scope(NamedTuple):
    tenant_id: str
    person_id: str


def _scope(f: Fields) -> tuple[str, str]:
    return f.string("tenant_id"), f.string("person_id")


# --------------------------------------------------------------------------- remember


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
        tenant, person = _scope(f)
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


class LocatorRequest(NamedTuple):
    tenant_id: str
    person_id: str
    evidence_id: str

    @classmethod
    def from_json(cls, value: Any) -> "LocatorRequest":
        f = Fields(value, "struct LocatorRequest")
        tenant, person = _scope(f)
        return cls(tenant, person, f.string("evidence_id"))


# --------------------------------------------------------------------------- retrieval


class QueryEmbedding(NamedTuple):
    vector: list[float]
    model: str
    version: str

    @classmethod
    def from_json(cls, f: Fields) -> "QueryEmbedding":
        return cls(
            vector=f.number_list("vector"), model=f.string("model"), version=f.string("version")
        )


class AsOf(NamedTuple):
    valid_at: int
    recorded_at: int

    @classmethod
    def from_json(cls, f: Fields) -> "AsOf":
        return cls(valid_at=f.i64("valid_at"), recorded_at=f.i64("recorded_at"))


class SearchRequest(NamedTuple):
    tenant_id: str
    person_id: str
    query: str
    limit: int = 10
    query_embedding: QueryEmbedding | None = None
    as_of: AsOf | None = None

    @classmethod
    def from_json(cls, value: Any) -> "SearchRequest":
        f = Fields(value, "struct SearchRequest")
        tenant, person = _scope(f)
        emb = f.opt_obj("query_embedding", "struct QueryEmbedding")
        as_of = f.opt_obj("as_of", "struct AsOf")
        return cls(
            tenant_id=tenant,
            person_id=person,
            query=f.string("query"),
            limit=f.u32_default("limit", 10),
            query_embedding=None if emb is None else QueryEmbedding.from_json(emb),
            as_of=None if as_of is None else AsOf.from_json(as_of),
        )


class RetrievalItem(NamedTuple):
    """One cited item of a retrieval pack (spec/retrieval.md §7)."""

    memory: Target
    excerpt: str
    relevance_basis_points: int
    evidence_ids: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "memory": {"id": self.memory.id, "kind": self.memory.kind.value},
            "excerpt": self.excerpt,
            "relevance_basis_points": self.relevance_basis_points,
            "evidence_ids": list(self.evidence_ids),
        }


NO_MATCH_GAP = "no cited memory matched"


class RetrievalPack(NamedTuple):
    query: str
    items: list[RetrievalItem]
    gaps: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "items": [item.to_json() for item in self.items],
            "gaps": list(self.gaps),
        }


class GetRequest(NamedTuple):
    tenant_id: str
    person_id: str
    target: Target

    @classmethod
    def from_json(cls, value: Any) -> "GetRequest":
        f = Fields(value, "struct GetRequest")
        tenant, person = _scope(f)
        return cls(tenant, person, Target.from_json(f.required("target")))


# --------------------------------------------------------------------------- lifecycle


class CorrectRequest(NamedTuple):
    tenant_id: str
    person_id: str
    claim_id: str
    text: str
    value: str
    valid_at: int
    recorded_at: int

    @classmethod
    def from_json(cls, value: Any) -> "CorrectRequest":
        f = Fields(value, "struct CorrectRequest")
        tenant, person = _scope(f)
        return cls(
            tenant,
            person,
            claim_id=f.string("claim_id"),
            text=f.string("text"),
            value=f.string("value"),
            valid_at=f.i64("valid_at"),
            recorded_at=f.i64("recorded_at"),
        )


class CorrectResult(NamedTuple):
    source_id: str
    evidence_id: str
    claim_id: str
    superseded_claim_id: str

    def to_json(self) -> dict[str, Any]:
        return {
            "source_id": self.source_id,
            "evidence_id": self.evidence_id,
            "claim_id": self.claim_id,
            "superseded_claim_id": self.superseded_claim_id,
        }


class ClaimTierRequest(NamedTuple):
    """Request of ``promote`` and ``archive``."""

    tenant_id: str
    person_id: str
    claim_id: str
    recorded_at: int

    @classmethod
    def from_json(cls, value: Any) -> "ClaimTierRequest":
        f = Fields(value, "struct ClaimTierRequest")
        tenant, person = _scope(f)
        return cls(tenant, person, f.string("claim_id"), f.i64("recorded_at"))


class LinkRequest(NamedTuple):
    tenant_id: str
    person_id: str
    claim_id: str
    evidence_id: str
    relation: Relation
    confidence_basis_points: int

    @classmethod
    def from_json(cls, value: Any) -> "LinkRequest":
        f = Fields(value, "struct LinkRequest")
        tenant, person = _scope(f)
        return cls(
            tenant,
            person,
            claim_id=f.string("claim_id"),
            evidence_id=f.string("evidence_id"),
            relation=f.enum("relation", Relation),
            confidence_basis_points=f.u16("confidence_basis_points"),
        )


class DeleteRequest(NamedTuple):
    tenant_id: str
    person_id: str
    source_id: str
    deleted_at: int

    @classmethod
    def from_json(cls, value: Any) -> "DeleteRequest":
        f = Fields(value, "struct DeleteRequest")
        tenant, person = _scope(f)
        return cls(tenant, person, f.string("source_id"), f.i64("deleted_at"))


class DeleteResult(NamedTuple):
    source_id: str
    evidence_count: int
    claim_count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "source_id": self.source_id,
            "evidence_count": self.evidence_count,
            "claim_count": self.claim_count,
        }


class LimitRequest(NamedTuple):
    """Requests that carry only scope and ``limit``: repair, profiles, reviews."""

    tenant_id: str
    person_id: str
    limit: int = 10

    @classmethod
    def from_json(cls, value: Any) -> "LimitRequest":
        f = Fields(value, "struct LimitRequest")
        tenant, person = _scope(f)
        return cls(tenant, person, f.u32_default("limit", 10))


PROFILE_FIELDS = ("tenant_id", "person_id", "stability", "claim_id", "recorded_at")


class ProfileRequest(NamedTuple):
    tenant_id: str
    person_id: str
    stability: Stability
    claim_id: str
    recorded_at: int

    @classmethod
    def from_json(cls, value: Any) -> "ProfileRequest":
        f = Fields(value, "struct ProfileRequest")
        f.deny_unknown(PROFILE_FIELDS)
        tenant, person = _scope(f)
        return cls(
            tenant,
            person,
            stability=f.enum("stability", Stability),
            claim_id=f.string("claim_id"),
            recorded_at=f.i64("recorded_at"),
        )


class ProfileEntry(NamedTuple):
    id: str
    tenant_id: str
    person_id: str
    key: str
    value: str
    stability: Stability
    claim_id: str
    recorded_at: int

    def to_json(self) -> dict[str, Any]:
        """Field order of the feed's profile record (spec/sync.md §1.2)."""
        return {
            "id": self.id,
            "tenant_id": self.tenant_id,
            "person_id": self.person_id,
            "key": self.key,
            "value": self.value,
            "stability": self.stability.value,
            "claim_id": self.claim_id,
            "recorded_at": self.recorded_at,
        }


class ReviewRequest(NamedTuple):
    tenant_id: str
    person_id: str
    day: str
    summary: str
    evidence_ids: list[str]
    recorded_at: int

    @classmethod
    def from_json(cls, value: Any) -> "ReviewRequest":
        f = Fields(value, "struct ReviewRequest")
        tenant, person = _scope(f)
        return cls(
            tenant,
            person,
            day=f.string("day"),
            summary=f.string("summary"),
            evidence_ids=f.str_list("evidence_ids"),
            recorded_at=f.i64("recorded_at"),
        )


class DailyReview(NamedTuple):
    id: str
    day: str
    summary: str
    evidence_ids: list[str]
    recorded_at: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "day": self.day,
            "summary": self.summary,
            "evidence_ids": list(self.evidence_ids),
            "recorded_at": self.recorded_at,
        }


# --------------------------------------------------------------------------- embeddings


class ProjectionsRequest(NamedTuple):
    tenant_id: str
    person_id: str
    model: str
    version: str
    limit: int = 10

    @classmethod
    def from_json(cls, value: Any) -> "ProjectionsRequest":
        f = Fields(value, "struct ProjectionsRequest")
        tenant, person = _scope(f)
        return cls(
            tenant,
            person,
            model=f.string("model"),
            version=f.string("version"),
            limit=f.u32_default("limit", 10),
        )


class EmbeddingInput(NamedTuple):
    vector: list[float]
    model: str
    version: str
    input_hash: str
    normalization: Normalization
    distance: Distance

    @classmethod
    def from_json(cls, f: Fields) -> "EmbeddingInput":
        return cls(
            vector=f.number_list("vector"),
            model=f.string("model"),
            version=f.string("version"),
            input_hash=f.string("input_hash"),
            normalization=f.enum("normalization", Normalization),
            distance=f.enum("distance", Distance),
        )


class EmbedRequest(NamedTuple):
    tenant_id: str
    person_id: str
    target: Target
    embedding: EmbeddingInput

    @classmethod
    def from_json(cls, value: Any) -> "EmbedRequest":
        f = Fields(value, "struct EmbedRequest")
        tenant, person = _scope(f)
        return cls(
            tenant,
            person,
            target=Target.from_json(f.required("target")),
            embedding=EmbeddingInput.from_json(f.obj("embedding", "struct EmbeddingInput")),
        )


# --------------------------------------------------------------------------- sync


class ExportRequest(NamedTuple):
    tenant_id: str
    person_id: str
    export_format: int
    after_commit: int = 0
    after_event_index: int = -1
    high_water_mark: int | None = None
    limit: int = 10

    @classmethod
    def from_json(cls, value: Any) -> "ExportRequest":
        f = Fields(value, "struct ExportRequest")
        tenant, person = _scope(f)
        return cls(
            tenant,
            person,
            export_format=f.u32("export_format"),
            after_commit=f.i64_default("after_commit", 0),
            after_event_index=f.i64_default("after_event_index", -1),
            high_water_mark=f.opt_i64("high_water_mark"),
            limit=f.u32_default("limit", 10),
        )


class ApplyRequest(NamedTuple):
    """``commits`` stays raw JSON here; :mod:`zkr.store.apply` parses each record strictly."""

    tenant_id: str
    person_id: str
    export_format: int
    database_schema_version: int | None = None
    commits: Sequence[Any] = ()

    @classmethod
    def from_json(cls, value: Any) -> "ApplyRequest":
        f = Fields(value, "struct ApplyRequest")
        tenant, person = _scope(f)
        return cls(
            tenant,
            person,
            export_format=f.u32("export_format"),
            database_schema_version=f.opt_i64("database_schema_version"),
            commits=f.list_default("commits"),
        )


# --------------------------------------------------------------------------- library checks

# Integer fields that are not signed 64-bit (spec/cli.md §5).
_INT_RANGES: dict[str, tuple[int, int, str]] = {
    "limit": (0, U32_MAX, "u32"),
    "export_format": (0, U32_MAX, "u32"),
    "confidence_basis_points": (0, U16_MAX, "u16"),
    "start_ms": (0, U64_MAX, "u64"),
    "end_ms": (0, U64_MAX, "u64"),
}


_FIELDS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = tuple(typing.get_type_hints(cls).items())
    return fields


def validate(value: Any) -> None:
    """Check a request built in Python against the rules the CLI decoder enforces.

    Library callers construct requests directly, so a ``float`` timestamp (``time.time()``),
    a ``bool``, a negative ``limit``, a plain string where an enum member belongs or a string
    with a lone surrogate must fail here, as :class:`~zkr.errors.RequestError` naming the
    field, before anything is written. :class:`zkr.MemoryDb` calls this on every request.
    """
    for name, annotation in _fields(type(value)):
        _check(getattr(value, name), annotation, name)


def _check(item: Any, annotation: Any, name: str) -> None:
    if annotation is Any:
        return
    origin = typing.get_origin(annotation)
    try:
        if origin in (types.UnionType, typing.Union):
            args = typing.get_args(annotation)
            if item is None and type(None) in args:
                return
            inner = [arg for arg in args if arg is not type(None)]
            _check(item, inner[0], name)
        elif annotation is int:
            low, high, type_name = _INT_RANGES.get(name, (I64_MIN, I64_MAX, "i64"))
            expect_int(item, low, high, type_name)
        elif annotation is str:
            if has_lone_surrogate(expect_str(item)):
                raise RequestError("lone surrogate in string")
        elif annotation is float:
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise RequestError(f"invalid type: {type(item).__name__}, expected f32")
        elif origin in (list, Sequence):
            if not isinstance(item, list | tuple):
                raise RequestError(f"invalid type: {type(item).__name__}, expected a sequence")
            (element,) = typing.get_args(annotation)
            for entry in item:
                _check(entry, element, name)
        elif isinstance(annotation, type) and issubclass(annotation, StrEnum):
            if not isinstance(item, annotation):
                raise RequestError(f"expected a {annotation.__name__} member, got {item!r}")
        elif isinstance(annotation, type) and issubclass(annotation, tuple):
            if not isinstance(item, annotation):
                raise RequestError(f"expected {annotation.__name__}, got {type(item).__name__}")
            validate(item)
    except RequestError as exc:
        if exc.message.startswith("field `"):
            raise
        raise RequestError(f"field `{name}`: {exc.message}") from None
