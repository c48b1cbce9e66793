"""Records, enums and the typed request/response values of every command.

Values are immutable ``NamedTuple`` classes: they cost a fraction of dataclasses at import
time, which matters for a CLI that starts a fresh process per call. For the same reason the
classes live in one submodule per command family and ``zkr.model`` loads a submodule only when
one of its names is first used (PEP 562): a ``search`` call never builds the sync or embedding
types. ``from zkr.model import SearchRequest`` and ``model.SearchRequest`` both work as usual.

=====================  ========================================================================
``zkr.model.kinds``    enums stored in the database, the legal-state matrix
``.base``              ``Target`` / ``TargetKind``, ``Scope``, :func:`encode` (result → JSON)
``.remember``          ``remember`` / ``locator``
``.retrieval``         ``search`` / ``get`` and the retrieval pack
``.lifecycle``         ``correct``, ``promote``/``archive``, ``link``, ``delete``, ``repair``
``.profiles``          ``profile``/``profiles``, ``review``/``reviews``
``.embeddings``        ``projections`` / ``embed``
``.sync``              ``export`` / ``apply``
``.inspect``           ``trace``, ``lookup``, ``browse``, ``settle`` (zkr's own commands)
``.checks``            :func:`validate`, the library-side request checks
=====================  ========================================================================

Every command has one request type and one result type (a ``NamedTuple``, a list of them, or
``Locator | None``) in the submodule of its family; results have ``to_json()`` giving the CLI's
JSON shape. Each request type has a ``from_json`` constructor that applies the CLI decoding rules of
spec/cli.md §5 (required fields, integer widths, ``null`` only where the field is optional,
unknown fields ignored except for ``profile``). The library API (:class:`zkr.MemoryDb`) takes
these values directly, so the CLI is only framing.

Timestamps are signed 64-bit integers (conventionally Unix seconds); confidence is in basis
points (0..10000); relevance in basis points (0..10000).
"""

from importlib import import_module

from zkr.typelite import TYPE_CHECKING, Any

# name -> submodule that defines it
_HOME: dict[str, str] = {
    "SourceKind": "kinds",
    "ClaimKind": "kinds",
    "Tier": "kinds",
    "Status": "kinds",
    "ProcessingState": "kinds",
    "Relation": "kinds",
    "Stability": "kinds",
    "Normalization": "kinds",
    "Distance": "kinds",
    "TargetKind": "base",
    "TARGET_RANK": "base",
    "quoted": "kinds",
    "is_legal_state": "kinds",
    "Target": "base",
    "Scope": "base",
    "scope_fields": "base",
    "encode": "base",
    "ClaimInput": "remember",
    "Locator": "remember",
    "RememberRequest": "remember",
    "RememberResult": "remember",
    "RememberOutcome": "remember",
    "LocatorRequest": "remember",
    "QueryEmbedding": "retrieval",
    "AsOf": "retrieval",
    "SearchRequest": "retrieval",
    "RetrievalItem": "retrieval",
    "NO_MATCH_GAP": "retrieval",
    "RetrievalPack": "retrieval",
    "GetRequest": "retrieval",
    "ContextRequest": "retrieval",
    "ContextBlock": "retrieval",
    "CorrectRequest": "lifecycle",
    "CorrectResult": "lifecycle",
    "ClaimTierRequest": "lifecycle",
    "LinkRequest": "lifecycle",
    "DeleteRequest": "lifecycle",
    "DeleteResult": "lifecycle",
    "ClaimTierResult": "lifecycle",
    "LinkResult": "lifecycle",
    "RepairResult": "lifecycle",
    "LimitRequest": "lifecycle",
    "PROFILE_FIELDS": "profiles",
    "ProfileRequest": "profiles",
    "ProfileEntry": "profiles",
    "ReviewRequest": "profiles",
    "DailyReview": "profiles",
    "ReviewResult": "profiles",
    "ProjectionsRequest": "embeddings",
    "EmbeddingInput": "embeddings",
    "EmbedRequest": "embeddings",
    "ProjectionInput": "embeddings",
    "ProjectionIssue": "embeddings",
    "EmbedResult": "embeddings",
    "EmbedPendingRequest": "embeddings",
    "EmbedPendingResult": "embeddings",
    "ExportRequest": "sync",
    "ApplyRequest": "sync",
    "ExportPage": "sync",
    "ApplyResult": "sync",
    "TraceRequest": "inspect",
    "Trace": "inspect",
    "LookupRequest": "inspect",
    "BrowseCursor": "inspect",
    "BrowseRequest": "inspect",
    "SettleRequest": "inspect",
    "EraseRequest": "inspect",
    "EraseReport": "inspect",
    "LookupClaim": "inspect",
    "BrowsePage": "inspect",
    "SettleResult": "inspect",
    "validate": "checks",
    "real_vector": "checks",
}

__all__ = sorted(_HOME)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from zkr.model.base import (
        TARGET_RANK as TARGET_RANK,
        Scope as Scope,
        Target as Target,
        TargetKind as TargetKind,
        encode as encode,
        scope_fields as scope_fields,
    )
    from zkr.model.checks import (
        real_vector as real_vector,
        validate as validate,
    )
    from zkr.model.embeddings import (
        EmbeddingInput as EmbeddingInput,
        EmbedPendingRequest as EmbedPendingRequest,
        EmbedPendingResult as EmbedPendingResult,
        EmbedRequest as EmbedRequest,
        EmbedResult as EmbedResult,
        ProjectionInput as ProjectionInput,
        ProjectionIssue as ProjectionIssue,
        ProjectionsRequest as ProjectionsRequest,
    )
    from zkr.model.inspect import (
        BrowseCursor as BrowseCursor,
        BrowsePage as BrowsePage,
        BrowseRequest as BrowseRequest,
        EraseReport as EraseReport,
        EraseRequest as EraseRequest,
        LookupClaim as LookupClaim,
        LookupRequest as LookupRequest,
        SettleRequest as SettleRequest,
        SettleResult as SettleResult,
        Trace as Trace,
        TraceRequest as TraceRequest,
    )
    from zkr.model.kinds import (
        ClaimKind as ClaimKind,
        Distance as Distance,
        Normalization as Normalization,
        ProcessingState as ProcessingState,
        Relation as Relation,
        SourceKind as SourceKind,
        Stability as Stability,
        Status as Status,
        Tier as Tier,
        is_legal_state as is_legal_state,
        quoted as quoted,
    )
    from zkr.model.lifecycle import (
        ClaimTierRequest as ClaimTierRequest,
        ClaimTierResult as ClaimTierResult,
        CorrectRequest as CorrectRequest,
        CorrectResult as CorrectResult,
        DeleteRequest as DeleteRequest,
        DeleteResult as DeleteResult,
        LimitRequest as LimitRequest,
        LinkRequest as LinkRequest,
        LinkResult as LinkResult,
        RepairResult as RepairResult,
    )
    from zkr.model.profiles import (
        PROFILE_FIELDS as PROFILE_FIELDS,
        DailyReview as DailyReview,
        ProfileEntry as ProfileEntry,
        ProfileRequest as ProfileRequest,
        ReviewRequest as ReviewRequest,
        ReviewResult as ReviewResult,
    )
    from zkr.model.remember import (
        ClaimInput as ClaimInput,
        Locator as Locator,
        LocatorRequest as LocatorRequest,
        RememberOutcome as RememberOutcome,
        RememberRequest as RememberRequest,
        RememberResult as RememberResult,
    )
    from zkr.model.retrieval import (
        NO_MATCH_GAP as NO_MATCH_GAP,
        AsOf as AsOf,
        ContextBlock as ContextBlock,
        ContextRequest as ContextRequest,
        GetRequest as GetRequest,
        QueryEmbedding as QueryEmbedding,
        RetrievalItem as RetrievalItem,
        RetrievalPack as RetrievalPack,
        SearchRequest as SearchRequest,
    )
    from zkr.model.sync import (
        ApplyRequest as ApplyRequest,
        ApplyResult as ApplyResult,
        ExportPage as ExportPage,
        ExportRequest as ExportRequest,
    )


def __getattr__(name: str) -> Any:
    """Load the submodule defining ``name`` on first use and cache the name here."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'zkr.model' has no attribute {name!r}")
    value = getattr(import_module(f"zkr.model.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
