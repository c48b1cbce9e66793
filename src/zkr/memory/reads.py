"""The read-only commands of :class:`zkr.MemoryDb`: retrieval (spec/retrieval.md), profiles and
reviews (spec/lifecycle.md §3.9, §3.11), and seeing what is kept (docs/inspect.md).
"""

from __future__ import annotations

from zkr import model
from zkr.memory.handle import Handle


class ReadCommands(Handle):
    """Commands that read and never write: ``search``, ``context``, ``get``, ``locator``,
    ``profiles``, ``reviews``, ``trace``, ``lookup``, ``browse``."""

    def search(self, req: model.SearchRequest) -> model.RetrievalPack:
        """A bounded, cited retrieval pack for ``req.query`` (spec/retrieval.md §2-8): lexical,
        fused with the dense lane when ``query_embedding`` is given, or historical with
        ``as_of``. Read-only. Raises ``InvalidInput`` for a blank scope or query or a bad query
        embedding (its ``vector`` may be a numpy array, as for :meth:`embed`)."""
        if isinstance(req, model.SearchRequest) and isinstance(
            query := req.query_embedding, model.QueryEmbedding
        ):
            vector = model.real_vector(query.vector, "query_embedding.vector")
            if vector is not query.vector:
                req = req._replace(query_embedding=query._replace(vector=vector))
        model.validate(req, model.SearchRequest)
        from zkr.store import retrieval

        with self._lock:
            return retrieval.search(self.conn, req)

    def context(self, req: model.ContextRequest) -> model.ContextBlock:
        """The cited block a host pastes into a prompt: the best pack (spec/retrieval.md §7)
        for ``req.query``, the current profile entries and the latest daily reviews, within
        ``req.max_bytes`` UTF-8 bytes (:func:`zkr.context.build_context`; zkr's own command).
        Read-only; three reads, each on its own snapshot."""
        model.validate(req, model.ContextRequest)
        from zkr.context import build_context

        return build_context(
            self,
            req.tenant_id,
            req.person_id,
            req.query,
            max_bytes=req.max_bytes,
            limit=req.limit,
            profile_limit=req.profile_limit,
            review_limit=req.review_limit,
            min_relevance_basis_points=req.min_relevance_basis_points,
        )

    def get(self, req: model.GetRequest) -> model.RetrievalItem:
        """One live record as a cited item, relevance 10000 (spec/retrieval.md §8). Read-only.
        Raises ``NotFound`` when the target is missing, out of scope or not live."""
        model.validate(req, model.GetRequest)
        from zkr.store import retrieval

        with self._lock:
            return retrieval.get(self.conn, req)

    def locator(self, req: model.LocatorRequest) -> model.Locator | None:
        """The transcript locator of live evidence in scope, or ``None`` when it has none
        (spec/lifecycle.md §3.2). Raises ``NotFound`` for unknown or tombstoned evidence."""
        model.validate(req, model.LocatorRequest)
        from zkr.store import write

        with self._lock:
            return write.locator(self.conn, req)

    def _capture_times(
        self, tenant_id: str, person_id: str, evidence_ids: list[str]
    ) -> dict[str, int]:
        """``{evidence_id: captured_at}`` of the given evidence in scope (for the context
        block's dated lines: :func:`zkr.store.inspect.capture_times`)."""
        from zkr.store import inspect

        with self._lock:
            return inspect.capture_times(self.conn, tenant_id, person_id, evidence_ids)

    def profiles(self, req: model.LimitRequest) -> list[model.ProfileEntry]:
        """At most ``limit`` live profile entries, newest first (spec/lifecycle.md §3.9).
        Read-only. Raises ``InvalidInput`` for a blank scope or a page over 1,000,000 bytes."""
        model.validate(req, model.LimitRequest)
        from zkr.store import profiles

        with self._lock:
            return profiles.profiles(self.conn, req)

    def reviews(self, req: model.LimitRequest) -> list[model.DailyReview]:
        """At most ``limit`` daily reviews, latest day first (spec/lifecycle.md §3.11).
        Read-only. Raises ``InvalidInput`` for a blank scope or a page over 1,000,000 bytes."""
        model.validate(req, model.LimitRequest)
        from zkr.store import profiles

        with self._lock:
            return profiles.reviews(self.conn, req)

    def trace(self, req: model.TraceRequest) -> model.Trace:
        """A source, evidence or claim in scope and its neighbourhood: evidence, links,
        correction chain, profile entries and reviews (:func:`zkr.store.inspect.trace`,
        docs/inspect.md)."""
        model.validate(req, model.TraceRequest)
        from zkr.store import inspect

        with self._lock:
            return inspect.trace(self.conn, req)

    def lookup(self, req: model.LookupRequest) -> list[model.LookupClaim]:
        """The live (or ``as_of``) claims for a subject and predicate, with their citations
        (:func:`zkr.store.inspect.lookup`, docs/inspect.md)."""
        model.validate(req, model.LookupRequest)
        from zkr.store import inspect

        with self._lock:
            return inspect.lookup(self.conn, req)

    def browse(self, req: model.BrowseRequest) -> model.BrowsePage:
        """One page of the scope's sources and claims, newest recorded first
        (:func:`zkr.store.inspect.browse`, docs/inspect.md)."""
        model.validate(req, model.BrowseRequest)
        from zkr.store import inspect

        with self._lock:
            return inspect.browse(self.conn, req)
