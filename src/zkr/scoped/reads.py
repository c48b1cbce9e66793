"""Reading through a scoped handle: retrieval, profiles and reviews, trace/lookup/browse."""

from __future__ import annotations

from zkr import model
from zkr.scoped.base import ScopedBase
from zkr.scoped.forms import (
    BROWSE_FILTERS,
    CONTEXT_DEFAULTS,
    AsOfLike,
    CursorLike,
    QueryEmbeddingLike,
    as_enum,
    check_mapping,
    optional_record,
)


class ScopedReads(ScopedBase):
    """The reads of :class:`zkr.scoped.ScopedMemory` (:mod:`zkr.memory.reads`)."""

    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        as_of: AsOfLike | None = None,
        query_embedding: QueryEmbeddingLike | None = None,
    ) -> model.RetrievalPack:
        """A cited retrieval pack; ``as_of`` is ``(valid_at, recorded_at)`` (or an
        :class:`~zkr.model.AsOf`, or a mapping with those keys)."""
        return self.db.search(
            model.SearchRequest(
                self.tenant_id,
                self.person_id,
                query,
                limit,
                optional_record(query_embedding, model.QueryEmbedding, "query_embedding"),
                optional_record(as_of, model.AsOf, "as_of"),
            )
        )

    def context(
        self,
        query: str,
        *,
        max_bytes: int = CONTEXT_DEFAULTS["max_bytes"],
        limit: int = CONTEXT_DEFAULTS["limit"],
        profile_limit: int = CONTEXT_DEFAULTS["profile_limit"],
        review_limit: int = CONTEXT_DEFAULTS["review_limit"],
        min_relevance_basis_points: int = CONTEXT_DEFAULTS["min_relevance_basis_points"],
    ) -> model.ContextBlock:
        """The cited block a host pastes into a prompt before the model answers
        (:meth:`MemoryDb.context`, built by :func:`zkr.context.build_context`): the best
        memories for ``query`` (a blank one skips the search), this person's current profile
        entries and latest daily reviews, in at most ``max_bytes`` UTF-8 bytes (default 4000).

        ``limit``, ``profile_limit`` and ``review_limit`` bound each list (defaults 10, 10, 3;
        0 means 10 and above 100 means 100, except that ``review_limit=0`` leaves reviews
        out); memories whose ``relevance_basis_points`` (0..10000, the share of the query a
        lexical match holds) is below ``min_relevance_basis_points`` (default 0) are left out.

        Returns a :class:`~zkr.model.ContextBlock`: ``text`` (the block, newline-terminated
        lines, each citing the ids ``get`` and ``trace`` take), ``items``,
        ``profiles`` and ``reviews`` (what made it into ``text``) and ``left_out``
        (memories, profile entries, reviews found but cut for the budget). Read-only. Raises
        :class:`~zkr.errors.RequestError` for a negative bound or a value of the wrong type
        and :class:`~zkr.errors.InvalidInput` for a blank scope."""
        return self.db.context(
            model.ContextRequest(
                self.tenant_id,
                self.person_id,
                query,
                max_bytes,
                limit,
                profile_limit,
                review_limit,
                min_relevance_basis_points,
            )
        )

    def get(self, kind: model.TargetKind | str, id: str) -> model.RetrievalItem:
        """One live record as a cited item (``kind`` is source, evidence or claim)."""
        target = model.Target(as_enum(model.TargetKind, kind, "target.kind"), id)
        return self.db.get(model.GetRequest(self.tenant_id, self.person_id, target))

    def profiles(self, limit: int = 10) -> list[model.ProfileEntry]:
        """Live profile entries, newest first."""
        return self.db.profiles(model.LimitRequest(self.tenant_id, self.person_id, limit))

    def reviews(self, limit: int = 10) -> list[model.DailyReview]:
        """Daily reviews, newest day first."""
        return self.db.reviews(model.LimitRequest(self.tenant_id, self.person_id, limit))

    def trace(self, kind: model.TargetKind | str, id: str) -> model.Trace:
        """A record and its neighbourhood (:meth:`MemoryDb.trace`)."""
        target = model.Target(as_enum(model.TargetKind, kind, "target.kind"), id)
        return self.db.trace(model.TraceRequest(self.tenant_id, self.person_id, target))

    def lookup(
        self, subject: str, predicate: str, as_of: AsOfLike | None = None
    ) -> list[model.LookupClaim]:
        """The current (or ``as_of``) claims for a subject and predicate."""
        return self.db.lookup(
            model.LookupRequest(
                self.tenant_id,
                self.person_id,
                subject,
                predicate,
                optional_record(as_of, model.AsOf, "as_of"),
            )
        )

    def browse(
        self, limit: int = 20, before: CursorLike | None = None, **filters: str
    ) -> model.BrowsePage:
        """One timeline page; ``filters`` are ``records``, ``kind``, ``tier``, ``status``,
        ``processing_state`` (see :class:`~zkr.model.BrowseRequest`); another name is a
        ``RequestError``."""
        check_mapping(filters, "filters", BROWSE_FILTERS, ())
        return self.db.browse(
            model.BrowseRequest(
                self.tenant_id,
                self.person_id,
                limit,
                before=optional_record(before, model.BrowseCursor, "before"),
                **filters,
            )
        )
