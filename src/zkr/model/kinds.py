"""The enumerations zkr stores in its tables, and the legal-state matrix of claims.

Enum members are ``StrEnum`` so they compare and serialise as their stored text; how each one is
encoded in its column (bare or JSON-quoted) is in spec/storage.md §2.3 and noted per class.
"""

from enum import StrEnum


class SourceKind(StrEnum):
    """Source kind; stored JSON-quoted in ``sources.kind`` (spec/storage.md §2.3)."""

    CONVERSATION = "conversation"
    SCREEN = "screen"
    AUDIO = "audio"
    DOCUMENT = "document"
    INTEGRATION = "integration"
    USER_CORRECTION = "user_correction"


class ClaimKind(StrEnum):
    """Claim kind; stored bare in ``claims.kind``."""

    FACT = "fact"
    PROFILE_FACT = "profile_fact"
    PREFERENCE = "preference"
    TASK = "task"
    SKILL = "skill"
    RECOMMENDATION = "recommendation"


class Tier(StrEnum):
    SHORT_TERM = "short_term"
    LONG_TERM = "long_term"
    ARCHIVE = "archive"


class Status(StrEnum):
    ACCEPTED = "accepted"
    SUPERSEDED = "superseded"
    RETRACTED = "retracted"


class ProcessingState(StrEnum):
    PENDING = "pending"
    PROCESSED = "processed"
    BLOCKED = "blocked"


class Relation(StrEnum):
    """Claim-evidence relation; stored JSON-quoted in ``claim_evidence.relation``."""

    SUPPORTS = "supports"
    CONTRADICTS = "contradicts"


class Stability(StrEnum):
    """Profile stability; stored JSON-quoted in ``profile_entries.stability``."""

    STABLE = "stable"
    CURRENT = "current"


class Normalization(StrEnum):
    NONE = "none"
    L2 = "l2"


class Distance(StrEnum):
    COSINE = "cosine"
    DOT = "dot"
    EUCLIDEAN = "euclidean"


def quoted(value: str) -> str:
    """The JSON-string-literal encoding some enum columns use (``"supports"`` with quotes)."""
    return f'"{value}"'


def is_legal_state(tier: Tier, status: Status, state: ProcessingState) -> bool:
    """The legal-state matrix (spec/lifecycle.md §2.1): 14 legal of 27 combinations."""
    if tier is Tier.ARCHIVE and status is Status.SUPERSEDED:
        return False
    return not (tier is not Tier.SHORT_TERM and state is not ProcessingState.PROCESSED)
