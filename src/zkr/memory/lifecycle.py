"""The lifecycle commands of :class:`zkr.MemoryDb` (spec/lifecycle.md §3.3-3.12, docs/inspect.md):
correct, link, promote, archive, delete, profile, review, settle, erase, repair.
"""

from __future__ import annotations

from zkr import model
from zkr.memory.handle import Handle


class LifecycleCommands(Handle):
    """Commands that change what is live, each in one ``BEGIN IMMEDIATE`` transaction."""

    def correct(self, req: model.CorrectRequest) -> model.CorrectResult:
        """Supersede an accepted claim with a corrected value backed by new correction
        evidence (spec/lifecycle.md §3.3). Raises ``NotFound`` for an unknown claim and
        ``InvalidInput`` when the claim is not accepted or the times run backwards."""
        model.validate(req, model.CorrectRequest)
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.correct(self.conn, req)

    def link(self, req: model.LinkRequest) -> model.LinkResult:
        """Attach supporting or contradicting live evidence to an accepted claim
        (spec/lifecycle.md §3.4); an identical link is a no-op. Raises ``NotFound`` for a claim
        that is not accepted or evidence that is not live, ``InvalidInput`` for a confidence
        above 10000 basis points or a conflicting existing link."""
        model.validate(req, model.LinkRequest)
        from zkr.store import lifecycle

        with self._lock:
            lifecycle.link(self.conn, req)
        return model.LinkResult()

    def promote(self, req: model.ClaimTierRequest) -> model.ClaimTierResult:
        """Move a processed ``short_term`` claim to ``long_term`` (spec/lifecycle.md §3.5).
        Raises ``StorageError('Query returned no rows')`` for an unknown claim and
        ``InvalidInput`` for a claim in another tier or state."""
        model.validate(req, model.ClaimTierRequest)
        from zkr.store import lifecycle

        with self._lock:
            return model.ClaimTierResult(lifecycle.promote(self.conn, req))

    def archive(self, req: model.ClaimTierRequest) -> model.ClaimTierResult:
        """Move a processed, non-superseded claim to the archive tier, out of live retrieval
        (spec/lifecycle.md §3.6); already archived is a no-op. Raises as :meth:`promote`."""
        model.validate(req, model.ClaimTierRequest)
        from zkr.store import lifecycle

        with self._lock:
            return model.ClaimTierResult(lifecycle.archive(self.conn, req))

    def delete(self, req: model.DeleteRequest) -> model.DeleteResult:
        """Tombstone a source and its evidence and retract the claims only it supported
        (spec/lifecycle.md §3.7). Raises ``NotFound`` for an unknown or deleted source and
        ``InvalidInput`` when ``deleted_at`` predates what it affects."""
        model.validate(req, model.DeleteRequest)
        from zkr.store import lifecycle

        with self._lock:
            return lifecycle.delete(self.conn, req)

    def profile(self, req: model.ProfileRequest) -> model.ProfileEntry:
        """Project a live ``profile_fact`` claim into the current profile (spec/lifecycle.md
        §3.8); an identical entry is returned without a write. Raises ``NotFound`` for a claim
        that is not live, ``InvalidInput`` for a claim of another kind."""
        model.validate(req, model.ProfileRequest)
        from zkr.store import profiles

        with self._lock:
            return profiles.profile(self.conn, req)

    def review(self, req: model.ReviewRequest) -> model.ReviewResult:
        """Store a daily review citing live evidence (spec/lifecycle.md §3.10); every call
        stores a new review. Raises ``InvalidInput`` for blank fields, no evidence or a cited
        id that is not live evidence in scope."""
        model.validate(req, model.ReviewRequest)
        from zkr.store import profiles

        with self._lock:
            return model.ReviewResult(profiles.review(self.conn, req))

    def settle(self, req: model.SettleRequest) -> model.SettleResult:
        """Move a pending or blocked claim to processed (or pending to blocked), with a feed
        commit replicas apply (:func:`zkr.store.settle.settle`, docs/inspect.md)."""
        model.validate(req, model.SettleRequest)
        from zkr.store import settle

        with self._lock:
            return settle.settle(self.conn, req)

    def erase(self, req: model.EraseRequest) -> model.EraseReport:
        """Blank the text of tombstoned sources everywhere in the file, feed included, or with
        ``dry_run`` (the default) report what would be erased (docs/erase.md,
        :func:`zkr.store.erase.erase`)."""
        model.validate(req, model.EraseRequest)
        from zkr.store import erase

        with self._lock:
            return erase.erase(self.conn, req)

    def repair(self, req: model.LimitRequest) -> model.RepairResult:
        """Drain at most ``limit`` rows of the projection-repair outbox, dropping stale
        projections of the targets they name (spec/lifecycle.md §3.12). Raises
        ``InvalidInput`` for a blank scope."""
        model.validate(req, model.LimitRequest)
        from zkr.store import repair

        with self._lock:
            return model.RepairResult(repair.repair(self.conn, req))
