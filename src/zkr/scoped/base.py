"""The clock and the request building every scoped call shares (:class:`ScopedBase`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from zkr import model
from zkr.scoped.forms import ClaimLike, LocatorLike, as_enum, check_mapping, optional_record

if TYPE_CHECKING:
    from zkr.memory import MemoryDb


class ScopedBase:
    """One (tenant, person) scope of an open :class:`~zkr.MemoryDb`: its clock (timestamps
    default to now and never go back within a handle) and the requests it builds."""

    def __init__(self, db: MemoryDb, tenant_id: str, person_id: str) -> None:
        self.db = db
        self.tenant_id = tenant_id
        self.person_id = person_id
        self._last = 0

    def now(self) -> int:
        """The current Unix second, never before this handle's previous timestamp."""
        self._last = max(int(time.time()), self._last)
        return self._last

    def _advancing(self) -> int:
        """A timestamp strictly after this handle's previous one (correct, delete, profile)."""
        self._last = max(int(time.time()), self._last + 1)
        return self._last

    def _at(self, value: int | None, advancing: bool = False) -> int:
        if value is None:
            return self._advancing() if advancing else self.now()
        if isinstance(value, int):
            # An explicit time up to now keeps later defaults from going before it; one in the
            # future (a planned item, a typo, 2**63 - 1) must not drag every later "now" along.
            self._last = max(self._last, min(value, int(time.time())))
        return value

    def _claim(self, claim: ClaimLike, captured_at: int) -> model.ClaimInput:
        if isinstance(claim, model.ClaimInput):
            return claim
        check_mapping(claim, "claim", model.ClaimInput._fields, ("subject", "predicate", "value"))
        return model.ClaimInput(
            subject=claim["subject"],
            predicate=claim["predicate"],
            value=claim["value"],
            kind=as_enum(model.ClaimKind, claim.get("kind", "fact"), "claim.kind"),
            valid_from=claim.get("valid_from", captured_at),
            tier=as_enum(model.Tier, claim.get("tier", "long_term"), "claim.tier"),
            processing_state=as_enum(
                model.ProcessingState,
                claim.get("processing_state", "processed"),
                "claim.processing_state",
            ),
        )

    def remember_request(
        self,
        text: str,
        *,
        kind: model.SourceKind | str = "conversation",
        captured_at: int | None = None,
        recorded_at: int | None = None,
        ingestion_key: str | None = None,
        claim: ClaimLike | None = None,
        locator: LocatorLike | None = None,
    ) -> model.RememberRequest:
        """The full :class:`~zkr.model.RememberRequest` :meth:`remember` would send."""
        recorded = self._at(recorded_at)
        captured = recorded if captured_at is None else captured_at
        loc = optional_record(locator, model.Locator, "locator")
        return model.RememberRequest(
            self.tenant_id,
            self.person_id,
            as_enum(model.SourceKind, kind, "kind"),
            text,
            captured,
            recorded,
            ingestion_key,
            None if claim is None else self._claim(claim, captured),
            loc,
        )
