"""Changing what is live through a scoped handle: correct, link, promote, archive, delete,
profile, review, settle, erase, repair (times default to now, advancing where the rule needs).
"""

from __future__ import annotations

from zkr import model
from zkr.scoped.base import ScopedBase
from zkr.scoped.forms import as_enum


class ScopedLifecycle(ScopedBase):
    """The lifecycle commands of :class:`zkr.scoped.ScopedMemory` (:mod:`zkr.memory.lifecycle`)."""

    def correct(
        self,
        claim_id: str,
        value: str,
        *,
        text: str | None = None,
        valid_at: int | None = None,
        recorded_at: int | None = None,
        profile_follows: bool = True,
    ) -> model.CorrectResult:
        """Supersede a claim with ``value``; ``text`` (the correction as said) defaults to
        ``value``; both times default to one shared "now" that advances past earlier calls.
        A profile entry the claim backed moves to the new value (``profile_follows``, on by
        default here; the reference, the CLI and :meth:`MemoryDb.correct` default to off)."""
        recorded = self._at(recorded_at, advancing=True)
        return self.db.correct(
            model.CorrectRequest(
                self.tenant_id,
                self.person_id,
                claim_id,
                value if text is None else text,
                value,
                recorded if valid_at is None else valid_at,
                recorded,
                profile_follows,
            )
        )

    def link(
        self,
        claim_id: str,
        evidence_id: str,
        relation: model.Relation | str = "supports",
        confidence_basis_points: int = 10_000,
    ) -> model.LinkResult:
        """Attach supporting (default) or contradicting evidence to a claim."""
        return self.db.link(
            model.LinkRequest(
                self.tenant_id,
                self.person_id,
                claim_id,
                evidence_id,
                as_enum(model.Relation, relation, "relation"),
                confidence_basis_points,
            )
        )

    def promote(self, claim_id: str, recorded_at: int | None = None) -> model.ClaimTierResult:
        """Move a processed short_term claim to long_term."""
        request = model.ClaimTierRequest(
            self.tenant_id, self.person_id, claim_id, self._at(recorded_at)
        )
        return self.db.promote(request)

    def archive(self, claim_id: str, recorded_at: int | None = None) -> model.ClaimTierResult:
        """Move a processed claim to the archive tier."""
        request = model.ClaimTierRequest(
            self.tenant_id, self.person_id, claim_id, self._at(recorded_at)
        )
        return self.db.archive(request)

    def delete(self, source_id: str, deleted_at: int | None = None) -> model.DeleteResult:
        """Tombstone a source and retract what it alone supported."""
        request = model.DeleteRequest(
            self.tenant_id, self.person_id, source_id, self._at(deleted_at, advancing=True)
        )
        return self.db.delete(request)

    def profile(
        self,
        claim_id: str,
        stability: model.Stability | str = "current",
        recorded_at: int | None = None,
    ) -> model.ProfileEntry:
        """Project a live profile_fact claim into the profile; ``recorded_at`` defaults to a
        second past the handle's previous timestamp when called in the same second, so a second
        ``profile`` of the same key right away replaces the first (the rule wants a later time)."""
        return self.db.profile(
            model.ProfileRequest(
                self.tenant_id,
                self.person_id,
                as_enum(model.Stability, stability, "stability"),
                claim_id,
                self._at(recorded_at, advancing=True),
            )
        )

    def review(
        self,
        day: str,
        summary: str,
        evidence_ids: list[str],
        recorded_at: int | None = None,
    ) -> model.ReviewResult:
        """Store a cited daily review; returns its id."""
        return self.db.review(
            model.ReviewRequest(
                self.tenant_id, self.person_id, day, summary, evidence_ids, self._at(recorded_at)
            )
        )

    def settle(
        self,
        claim_id: str,
        processing_state: model.ProcessingState | str = "processed",
        recorded_at: int | None = None,
    ) -> model.SettleResult:
        """Move a pending or blocked claim to processed (default) or blocked."""
        return self.db.settle(
            model.SettleRequest(
                self.tenant_id,
                self.person_id,
                claim_id,
                as_enum(model.ProcessingState, processing_state, "processing_state"),
                self._at(recorded_at),
            )
        )

    def erase(
        self, source_ids: list[str] | None = None, dry_run: bool = True, propagate: bool = True
    ) -> model.EraseReport:
        """Report (``dry_run``, the default) or erase the text of deleted sources; with
        ``propagate`` a commit of the blanked source records tells replicas to erase too."""
        return self.db.erase(
            model.EraseRequest(self.tenant_id, self.person_id, source_ids, dry_run, propagate)
        )

    def repair(self, limit: int = 100) -> model.RepairResult:
        """Drain a bounded batch of the projection-repair outbox; returns the count handled."""
        return self.db.repair(model.LimitRequest(self.tenant_id, self.person_id, limit))
