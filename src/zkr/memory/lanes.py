"""The embedding and sync commands of :class:`zkr.MemoryDb`: projections, embed, embed-pending
(spec/retrieval.md §9-11, docs/embedding.md), export and apply (spec/sync.md).
"""

from __future__ import annotations

from collections.abc import Callable

from zkr import model
from zkr.memory.handle import Handle


class LaneCommands(Handle):
    """The embedding lanes and the commit feed: ``projections``, ``embed``, ``embed_pending``,
    ``export``, ``apply``."""

    def projections(self, req: model.ProjectionsRequest) -> list[model.ProjectionIssue]:
        """Missing and stale embedding inputs of one model/version, at most ``limit`` and
        1,000,000 bytes (spec/retrieval.md §10). Read-only. Raises ``InvalidInput`` for blank
        scope/model/version or one issue larger than the page."""
        model.validate(req, model.ProjectionsRequest)
        from zkr.store import embeddings

        with self._lock:
            return embeddings.projections(self.conn, req)

    def embed(self, req: model.EmbedRequest) -> model.EmbedResult:
        """Store a caller-computed vector for a live target, bound to its current input hash
        (spec/retrieval.md §11). Raises ``InvalidInput`` (non-finite vector, l2 magnitude,
        hash mismatch, lane conflict) and ``NotFound`` for a target that is not live.
        ``req.embedding.vector`` may be any 1-d sequence of real numbers, a numpy array
        included (:func:`zkr.model.checks.real_vector`; ``RequestError`` otherwise)."""
        if isinstance(req, model.EmbedRequest) and isinstance(req.embedding, model.EmbeddingInput):
            vector = model.real_vector(req.embedding.vector, "embedding.vector")
            if vector is not req.embedding.vector:
                req = req._replace(embedding=req.embedding._replace(vector=vector))
        model.validate(req, model.EmbedRequest)
        from zkr.store import embeddings

        with self._lock:
            result = embeddings.embed(self.conn, req)
            lane = (req.tenant_id, req.person_id, req.embedding.model, req.embedding.version)
            self._embedded[lane] = self._embedded.get(lane, 0) + 1
            self._embedded_at = max(self._embedded_at, result.created_at)
            return result

    def embed_pending(
        self,
        req: model.EmbedPendingRequest,
        progress: Callable[[int, int], None] | None = None,
    ) -> model.EmbedPendingResult:
        """Embed every missing or stale projection input with the local model (``zkr[embed]``)
        and record that model as this database's semantic lane, so plain ``search`` calls embed
        their query (docs/embedding.md; the rows are spec/retrieval.md §11.3 rows). Pass
        ``model.EmbedPendingRequest()`` for every scope with the default model.

        ``progress(done, total)`` is called after each batch. Raises ``EmbedderUnavailable``
        (runtime or model missing; the message names ``ZKR_EMBED_MODEL``), ``InvalidInput``
        (scope given half, a blank ``model``, batch outside 1..10000, a conflicting lane),
        ``RequestError`` (a field of the wrong type).
        """
        from zkr.errors import InvalidInput
        from zkr.text import require_scope, require_text

        model.validate(req, model.EmbedPendingRequest)
        if req.model is not None:  # blank is not "the default": a typo must not pick a model
            require_text(req.model, "model")
        scope: tuple[str, str] | None = None
        if req.tenant_id is not None or req.person_id is not None:
            require_scope(req.tenant_id or "", req.person_id or "")
            scope = (req.tenant_id or "", req.person_id or "")
        if not 1 <= req.batch <= 10_000:
            raise InvalidInput("batch must be between 1 and 10000")
        from zkr.embedding.local import load
        from zkr.store import embedpending

        embedder = load(req.model)
        return embedpending.embed_pending(
            self.conn, embedder, scope, req.batch, req.limit, progress, guard=self._lock
        )

    def export(self, req: model.ExportRequest) -> model.ExportPage:
        """One page of the scope's commit feed (spec/sync.md §3). Read-only, one snapshot.
        Raises ``InvalidInput`` for the cursor and format rules of §3.2."""
        model.validate(req, model.ExportRequest)
        from zkr.store import export

        with self._lock:
            return export.export(self.conn, req)

    def apply(self, req: model.ApplyRequest) -> model.ApplyResult:
        """Materialise complete commits exported by another database, all in one transaction
        (spec/sync.md §4). Raises ``RequestError`` for a record that does not parse,
        ``InvalidInput`` for the rules of §4.2/§4.5 and for a record whose id another scope
        holds (one message, docs/decisions-sync.md); any error writes nothing."""
        model.validate(req, model.ApplyRequest)
        from zkr.store import apply

        with self._lock:
            return apply.apply(self.conn, req)
