"""Requests and records of ``profile``/``profiles`` and ``review``/``reviews``.

spec/lifecycle.md §3.8-3.11.
"""

from zkr.codec import Fields
from zkr.model.base import scope_fields
from zkr.model.kinds import Stability
from zkr.typelite import Any, NamedTuple

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
        tenant, person = scope_fields(f)
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
        tenant, person = scope_fields(f)
        return cls(
            tenant,
            person,
            day=f.string("day"),
            summary=f.string("summary"),
            evidence_ids=f.str_list("evidence_ids"),
            recorded_at=f.i64("recorded_at"),
        )


class ReviewResult(NamedTuple):
    """Result of ``review``: the new review's id (spec/lifecycle.md §3.10)."""

    id: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id}


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
