"""``MemoryDb.scope(tenant, person)``: the library API for one person, with defaults.

Every :class:`zkr.MemoryDb` method takes a full request: scope, every timestamp, enum members.
:class:`ScopedMemory` fills those in, so agent code reads as what it means::

    with MemoryDb.open("memory.db") as db:
        sam = db.scope("acme", "sam")
        sam.remember("Sam works at Acme",
                     claim={"subject": "Sam", "predicate": "employer", "value": "Acme"})
        hit = sam.search("where does Sam work").items[0]
        sam.correct(hit.memory.id, "Globex", text="Sam moved to Globex")
        prompt_block = sam.context("where does Sam work", max_bytes=2000).text

Each method is the :class:`~zkr.MemoryDb` method of the same name with the scope filled in
(``NOT_ON_THE_HANDLE`` in ``tests/test_ergonomics.py`` lists the few that stay on ``MemoryDb``,
with why).

Defaults:

* Timestamps (integer Unix seconds) default to now. Within one handle they never go back, and
  the operations that must *advance* past earlier records (``correct``, ``delete``,
  ``profile``: a profile entry replaces the key's current one only with a later
  ``recorded_at``) step one second past the handle's previous timestamp when called in the
  same second, so "store, then correct" or "profile, then profile the new value" right away
  works. Explicit timestamps are used as given; one in the future does
  not move the handle's clock.
* ``captured_at`` defaults to ``recorded_at``, a claim's ``valid_from`` to ``captured_at``.
* Enum values may be given as plain strings (``kind="screen"``, ``tier="short_term"``); an
  unknown value is a :class:`~zkr.errors.RequestError` naming the field.
* A claim may be a :class:`~zkr.model.ClaimInput` or a mapping with ``subject``, ``predicate``,
  ``value`` and optionally ``kind`` (default ``fact``), ``valid_from``, ``tier``,
  ``processing_state``. A locator may be a :class:`~zkr.model.Locator` or a mapping with its
  six fields; ``as_of`` an :class:`~zkr.model.AsOf`, a ``(valid_at, recorded_at)`` pair or a
  mapping with those two keys (the CLI's JSON); ``query_embedding`` a
  :class:`~zkr.model.QueryEmbedding` or a mapping with ``vector``, ``model``, ``version``;
  ``browse``'s ``before`` a :class:`~zkr.model.BrowseCursor` or the JSON form of a page's
  ``next``. Anything else is a :class:`~zkr.errors.RequestError` naming the field.

Results are the same typed values :class:`~zkr.MemoryDb` returns; errors the same exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar, cast

from zkr import model
from zkr.errors import RequestError

if TYPE_CHECKING:
    from zkr.memory import MemoryDb

E = TypeVar("E", bound=StrEnum)


def as_enum(cls: type[E], value: E | str, field: str) -> E:
    """``value`` as a member of ``cls``; a plain string is looked up by its stored text."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        expected = ", ".join(f"`{member.value}`" for member in cls)
        raise RequestError(
            f"field `{field}`: unknown variant `{value}`, expected one of {expected}"
        ) from None


ClaimLike = model.ClaimInput | Mapping[str, Any]
LocatorLike = model.Locator | Mapping[str, Any]
AsOfLike = model.AsOf | tuple[int, int] | Mapping[str, Any]
QueryEmbeddingLike = model.QueryEmbedding | Mapping[str, Any]
CursorLike = model.BrowseCursor | Mapping[str, Any]
R = TypeVar("R", model.Locator, model.AsOf, model.QueryEmbedding, model.BrowseCursor)

_BROWSE_FILTERS = ("records", "kind", "tier", "status", "processing_state")
# The optional fields' defaults are the request types' own, so a default lives in one place.
_CONTEXT = model.ContextRequest._field_defaults
_EXPORT = model.ExportRequest._field_defaults
_PROJECTIONS = model.ProjectionsRequest._field_defaults


def _check_mapping(
    value: object, field: str, allowed: Iterable[str], required: Iterable[str]
) -> None:
    """Raise ``RequestError`` naming ``field`` unless ``value`` is a mapping whose keys are all
    in ``allowed`` and which holds every name of ``required`` (the values' types are checked
    by :class:`~zkr.MemoryDb` as for any request)."""
    if not isinstance(value, Mapping):
        raise RequestError(
            f"field `{field}`: invalid type: {type(value).__name__}, expected a mapping"
        )
    unknown = sorted(str(key) for key in value if key not in set(allowed))
    if unknown:
        raise RequestError(f"field `{field}`: unknown field `{unknown[0]}`")
    for name in required:
        if name not in value:
            raise RequestError(f"field `{field}`: missing field `{name}`")


def _record(value: object, cls: type[R], field: str) -> R:
    """``value`` as a ``cls`` (one of the request's nested records): itself, or a mapping with
    exactly the record's fields (its JSON form); anything else is a ``RequestError`` naming
    ``field`` (a ``dict`` spread into a pair, or an ``int``, failed with a bare ``TypeError``)."""
    if isinstance(value, cls):
        return value
    if cls is model.AsOf and isinstance(value, tuple | list):  # the documented pair
        if len(value) != 2:
            raise RequestError(
                f"field `{field}`: expected (valid_at, recorded_at), got {len(value)} values"
            )
        return cls(*value)
    if cls is model.AsOf and not isinstance(value, Mapping):
        raise RequestError(
            f"field `{field}`: invalid type: {type(value).__name__}, expected (valid_at,"
            " recorded_at) or a mapping"
        )
    fields = cls._fields
    _check_mapping(value, field, fields, fields)
    return cls(**cast(Mapping[str, Any], value))


def _optional_record(value: object, cls: type[R], field: str) -> R | None:
    return None if value is None else _record(value, cls, field)


class ScopedMemory:
    """One (tenant, person) scope of an open :class:`~zkr.MemoryDb` (see the module doc)."""

    def __init__(self, db: MemoryDb, tenant_id: str, person_id: str) -> None:
        self.db = db
        self.tenant_id = tenant_id
        self.person_id = person_id
        self._last = 0

    # -- clock
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

    # -- requests
    def _claim(self, claim: ClaimLike, captured_at: int) -> model.ClaimInput:
        if isinstance(claim, model.ClaimInput):
            return claim
        _check_mapping(claim, "claim", model.ClaimInput._fields, ("subject", "predicate", "value"))
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
        loc = _optional_record(locator, model.Locator, "locator")
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

    # -- write path
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

    # -- retrieval
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
                _optional_record(query_embedding, model.QueryEmbedding, "query_embedding"),
                _optional_record(as_of, model.AsOf, "as_of"),
            )
        )

    def context(
        self,
        query: str,
        *,
        max_bytes: int = _CONTEXT["max_bytes"],
        limit: int = _CONTEXT["limit"],
        profile_limit: int = _CONTEXT["profile_limit"],
        review_limit: int = _CONTEXT["review_limit"],
        min_relevance_basis_points: int = _CONTEXT["min_relevance_basis_points"],
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

    # -- lifecycle
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

    def repair(self, limit: int = 100) -> model.RepairResult:
        """Drain a bounded batch of the projection-repair outbox; returns the count handled."""
        return self.db.repair(model.LimitRequest(self.tenant_id, self.person_id, limit))

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

    # -- profiles and reviews
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

    def profiles(self, limit: int = 10) -> list[model.ProfileEntry]:
        """Live profile entries, newest first."""
        return self.db.profiles(model.LimitRequest(self.tenant_id, self.person_id, limit))

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

    def reviews(self, limit: int = 10) -> list[model.DailyReview]:
        """Daily reviews, newest day first."""
        return self.db.reviews(model.LimitRequest(self.tenant_id, self.person_id, limit))

    # -- seeing and steering
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
                _optional_record(as_of, model.AsOf, "as_of"),
            )
        )

    def browse(
        self, limit: int = 20, before: CursorLike | None = None, **filters: str
    ) -> model.BrowsePage:
        """One timeline page; ``filters`` are ``records``, ``kind``, ``tier``, ``status``,
        ``processing_state`` (see :class:`~zkr.model.BrowseRequest`); another name is a
        ``RequestError``."""
        _check_mapping(filters, "filters", _BROWSE_FILTERS, ())
        return self.db.browse(
            model.BrowseRequest(
                self.tenant_id,
                self.person_id,
                limit,
                before=_optional_record(before, model.BrowseCursor, "before"),
                **filters,
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

    # -- caller-computed embeddings (spec/retrieval.md §10-11)
    def projections(
        self, model_name: str, version: str, limit: int = _PROJECTIONS["limit"]
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

    # -- sync (spec/sync.md)
    def export(
        self,
        *,
        after_commit: int = _EXPORT["after_commit"],
        after_event_index: int = _EXPORT["after_event_index"],
        high_water_mark: int | None = _EXPORT["high_water_mark"],
        limit: int = _EXPORT["limit"],
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
