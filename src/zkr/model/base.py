"""The values every command shares: retrieval targets and the tenant/person scope.

Kept apart from :mod:`zkr.model.kinds` so a ``search`` builds only the one enum it needs.
"""

from enum import StrEnum

from zkr.codec import Fields
from zkr.typelite import Any, NamedTuple


class TargetKind(StrEnum):
    """Retrieval targets; the order source < evidence < claim is search's tie-break order."""

    SOURCE = "source"
    EVIDENCE = "evidence"
    CLAIM = "claim"


TARGET_RANK = {TargetKind.SOURCE: 0, TargetKind.EVIDENCE: 1, TargetKind.CLAIM: 2}


class Target(NamedTuple):
    """A retrieval/projection target ``{"kind": ..., "id": ...}``."""

    kind: TargetKind
    id: str

    @classmethod
    def from_json(cls, value: Any) -> "Target":
        f = Fields(value, "struct TargetRef")
        return cls(kind=f.enum("kind", TargetKind), id=f.string("id"))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "id": self.id}

    def sort_key(self) -> tuple[int, str]:
        """Search's target order: kind rank, then id by code point."""
        return (TARGET_RANK[self.kind], self.id)


def encode(result: Any) -> Any:
    """The JSON value of a command's typed result: ``result.to_json()``, a list item by item,
    ``None`` as ``null`` (the last step of every CLI command, see :mod:`zkr.cli`)."""
    if result is None:
        return None
    if isinstance(result, list):
        return [encode(item) for item in result]
    return result.to_json()


class Scope(NamedTuple):
    tenant_id: str
    person_id: str


def scope_fields(f: Fields) -> tuple[str, str]:
    return f.string("tenant_id"), f.string("person_id")
