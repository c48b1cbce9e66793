"""Embedding lanes and sync through a scoped handle: embed-pending, projections, embed, export,
apply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from zkr import model
from zkr.scoped.base import ScopedBase
from zkr.scoped.forms import EXPORT_DEFAULTS, PROJECTIONS_DEFAULTS, as_enum


class ScopedLanes(ScopedBase):
    """Embedding and sync of :class:`zkr.scoped.ScopedMemory` (:mod:`zkr.memory.lanes`)."""

    def embed_pending(
        self,
        model_setting: str | None = None,
        batch: int = 64,
        limit: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> model.EmbedPendingResult:
        """Embed this scope's missing or stale projection inputs with the local model
        (``zkr[embed]``; :meth:`zkr.MemoryDb.embed_pending` restricted to this tenant/person).
        ``model_setting``: built-in name or model directory (default ``$ZKR_EMBED_MODEL``,
        else the built-in model)."""
        request = model.EmbedPendingRequest(
            self.tenant_id, self.person_id, model_setting, batch, limit
        )
        return self.db.embed_pending(request, progress)

    def projections(
        self, model_name: str, version: str, limit: int = PROJECTIONS_DEFAULTS["limit"]
    ) -> list[model.ProjectionIssue]:
        """This scope's embedding inputs that have no vector of ``model_name``/``version`` yet
        (``state`` ``"missing"``) or whose text changed since (``"stale"``), at most ``limit``
        (default 10) and 1,000,000 bytes (:meth:`MemoryDb.projections`). Each issue's
        ``input`` carries the ``target``, ``text`` to embed and ``input_hash`` that
        :meth:`embed` binds the vector to. Read-only."""
        return self.db.projections(
            model.ProjectionsRequest(self.tenant_id, self.person_id, model_name, version, limit)
        )

    def embed(
        self,
        kind: model.TargetKind | str,
        id: str,
        vector: Iterable[float],
        *,
        model_name: str,
        version: str,
        input_hash: str,
        normalization: model.Normalization | str,
        distance: model.Distance | str,
    ) -> model.EmbedResult:
        """Store a vector you computed for a live record (``kind`` source, evidence or claim)
        of this scope (:meth:`MemoryDb.embed`). ``input_hash`` is the one :meth:`projections`
        gave with the text (``sha256:`` + hex); ``normalization`` is ``"none"`` or ``"l2"``
        (then the vector must have unit length), ``distance`` ``"cosine"``, ``"dot"`` or
        ``"euclidean"``. Raises :class:`~zkr.errors.InvalidInput` for a stale hash, a
        non-finite vector or a lane conflict and :class:`~zkr.errors.NotFound` for a record
        that is not live. ``vector`` is any 1-d sequence of real numbers (a list, a tuple, a
        numpy float array); a 2-d array or an element that is not a real number is a
        :class:`~zkr.errors.RequestError`."""
        target = model.Target(as_enum(model.TargetKind, kind, "target.kind"), id)
        embedding = model.EmbeddingInput(
            model.real_vector(vector, "embedding.vector"),
            model_name,
            version,
            input_hash,
            as_enum(model.Normalization, normalization, "embedding.normalization"),
            as_enum(model.Distance, distance, "embedding.distance"),
        )
        return self.db.embed(model.EmbedRequest(self.tenant_id, self.person_id, target, embedding))

    def export(
        self,
        *,
        after_commit: int = EXPORT_DEFAULTS["after_commit"],
        after_event_index: int = EXPORT_DEFAULTS["after_event_index"],
        high_water_mark: int | None = EXPORT_DEFAULTS["high_water_mark"],
        limit: int = EXPORT_DEFAULTS["limit"],
        export_format: int | None = None,
    ) -> model.ExportPage:
        """One page of this scope's commit feed (:meth:`MemoryDb.export`): at most ``limit``
        events (default 10) and about 1 MiB, from the start by default; pass the previous
        page's ``next_after_commit`` and ``next_after_event_index`` and the first page's
        ``high_water_mark`` for the next one, until ``complete``. A page may end inside a
        commit (see :meth:`apply`). ``export_format`` defaults to the one this zkr writes.
        Read-only."""
        if export_format is None:
            from zkr.store.export import EXPORT_FORMAT

            export_format = EXPORT_FORMAT
        return self.db.export(
            model.ExportRequest(
                self.tenant_id,
                self.person_id,
                export_format,
                after_commit,
                after_event_index,
                high_water_mark,
                limit,
            )
        )

    def apply(
        self,
        commits: Sequence[Any],
        *,
        database_schema_version: int | None = None,
        export_format: int | None = None,
    ) -> model.ApplyResult:
        """Materialise, all or nothing, complete commits another database exported for this
        scope (:meth:`MemoryDb.apply`). ``commits`` are JSON objects as :meth:`export` pages
        carry them, each with all of its events: a page may end inside a commit, so a host
        stages events across pages before applying (README, "Sync"; ``examples/sync_host.py``).
        ``database_schema_version`` is the exporter's (optional); ``export_format`` defaults
        to the one this zkr reads. Returns the four counters of
        :class:`~zkr.model.ApplyResult`. Raises :class:`~zkr.errors.RequestError` for a
        record that does not parse and :class:`~zkr.errors.InvalidInput` for one that breaks
        the sync rules (a partial commit, a record of another scope)."""
        if export_format is None:
            from zkr.store.export import EXPORT_FORMAT

            export_format = EXPORT_FORMAT
        return self.db.apply(
            model.ApplyRequest(
                self.tenant_id, self.person_id, export_format, database_schema_version, commits
            )
        )
