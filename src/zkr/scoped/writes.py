"""Storing through a scoped handle: ``remember``, ``remember_many``, ``locator``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zkr import model
from zkr.errors import RequestError
from zkr.scoped.base import ScopedBase
from zkr.scoped.forms import ClaimLike, LocatorLike


class ScopedWrites(ScopedBase):
    """The write path of :class:`zkr.scoped.ScopedMemory` (:mod:`zkr.memory.writes`)."""

    def remember(
        self,
        text: str,
        *,
        kind: model.SourceKind | str = "conversation",
        captured_at: int | None = None,
        recorded_at: int | None = None,
        ingestion_key: str | None = None,
        claim: ClaimLike | None = None,
        locator: LocatorLike | None = None,
    ) -> model.RememberResult:
        """Store ``text`` (and optionally a claim it supports); see :meth:`MemoryDb.remember`."""
        return self.db.remember(
            self.remember_request(
                text,
                kind=kind,
                captured_at=captured_at,
                recorded_at=recorded_at,
                ingestion_key=ingestion_key,
                claim=claim,
                locator=locator,
            )
        )

    def remember_many(
        self, requests: Iterable[model.RememberRequest], *, outcomes: bool = False
    ) -> list[Any]:
        """:meth:`MemoryDb.remember_many` for requests built with :meth:`remember_request`.

        A request of another scope (built by another handle, or by hand) is refused like a bad
        request: a :class:`~zkr.errors.RequestError` prefixed with its index, or with
        ``outcomes`` a ``failed`` outcome while the rest are stored. (It was stored in its own
        scope: a handle wrote outside the one scope it stands for.)"""
        try:
            batch = list(requests)
        except TypeError:  # MemoryDb's own error for a value that is no iterable
            return self.db.remember_many(requests, outcomes=outcomes)
        scope = (self.tenant_id, self.person_id)
        foreign = {
            index: f"requests[{index}]: scope ({req.tenant_id}, {req.person_id}) is not this"
            f" handle's ({self.tenant_id}, {self.person_id})"
            for index, req in enumerate(batch)
            if isinstance(req, model.RememberRequest) and (req.tenant_id, req.person_id) != scope
        }
        if not foreign:
            return self.db.remember_many(batch, outcomes=outcomes)
        if not outcomes:
            raise RequestError(foreign[min(foreign)])
        done = iter(
            self.db.remember_many(
                [req for index, req in enumerate(batch) if index not in foreign], outcomes=True
            )
        )
        return [
            model.RememberOutcome("failed", None, foreign[index].partition(": ")[2])
            if index in foreign
            else next(done)
            for index in range(len(batch))
        ]

    def locator(self, evidence_id: str) -> model.Locator | None:
        """The transcript locator of live evidence, or ``None``."""
        return self.db.locator(model.LocatorRequest(self.tenant_id, self.person_id, evidence_id))
