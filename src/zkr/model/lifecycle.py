"""Requests and results of ``correct``, ``promote``/``archive``, ``link``, ``delete``, ``repair``
and the limit-only request of ``repair``, ``profiles`` and ``reviews``.

spec/lifecycle.md §3.3-3.7, §3.9, §3.11, §3.12.
"""

from zkr.codec import Fields
from zkr.model.base import scope_fields
from zkr.model.kinds import Relation
from zkr.typelite import Any, NamedTuple


class CorrectRequest(NamedTuple):
    """``profile_follows`` (zkr's own, default false as in the reference): a profile entry the
    old claim backed is recreated for the new claim in a second commit (docs/inspect.md)."""

    tenant_id: str
    person_id: str
    claim_id: str
    text: str
    value: str
    valid_at: int
    recorded_at: int
    profile_follows: bool = False

    @classmethod
    def from_json(cls, value: Any) -> "CorrectRequest":
        f = Fields(value, "struct CorrectRequest")
        tenant, person = scope_fields(f)
        return cls(
            tenant,
            person,
            claim_id=f.string("claim_id"),
            text=f.string("text"),
            value=f.string("value"),
            valid_at=f.i64("valid_at"),
            recorded_at=f.i64("recorded_at"),
            profile_follows=f.bool_default("profile_follows", False),
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
        tenant, person = scope_fields(f)
        return cls(tenant, person, f.string("claim_id"), f.i64("recorded_at"))


class ClaimTierResult(NamedTuple):
    """Result of ``promote`` and ``archive``: the claim id (spec/lifecycle.md §3.5-3.6)."""

    claim_id: str

    def to_json(self) -> dict[str, Any]:
        return {"claim_id": self.claim_id}


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
        tenant, person = scope_fields(f)
        return cls(
            tenant,
            person,
            claim_id=f.string("claim_id"),
            evidence_id=f.string("evidence_id"),
            relation=f.enum("relation", Relation),
            confidence_basis_points=f.u16("confidence_basis_points"),
        )


class LinkResult(NamedTuple):
    """Result of ``link``: always ``{"ok": true}``; failures raise (spec/lifecycle.md §3.4)."""

    ok: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok}


class DeleteRequest(NamedTuple):
    tenant_id: str
    person_id: str
    source_id: str
    deleted_at: int

    @classmethod
    def from_json(cls, value: Any) -> "DeleteRequest":
        f = Fields(value, "struct DeleteRequest")
        tenant, person = scope_fields(f)
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
        tenant, person = scope_fields(f)
        return cls(tenant, person, f.u32_default("limit", 10))


class RepairResult(NamedTuple):
    """Result of ``repair``: outbox rows drained in this call (spec/lifecycle.md §3.12)."""

    processed: int

    def to_json(self) -> dict[str, Any]:
        return {"processed": self.processed}
