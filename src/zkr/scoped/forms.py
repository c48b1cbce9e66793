"""The forms a scoped call accepts beside the typed records (see :mod:`zkr.scoped`): plain-string
enum values, nested records as mappings (their JSON form), ``as_of`` as a pair, and the optional
fields' defaults read from the request types (one place)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, TypeVar, cast

from zkr import model
from zkr.errors import RequestError

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

BROWSE_FILTERS = ("records", "kind", "tier", "status", "processing_state")
# The optional fields' defaults are the request types' own, so a default lives in one place.
CONTEXT_DEFAULTS = model.ContextRequest._field_defaults
EXPORT_DEFAULTS = model.ExportRequest._field_defaults
PROJECTIONS_DEFAULTS = model.ProjectionsRequest._field_defaults


def check_mapping(
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


def as_record(value: object, cls: type[R], field: str) -> R:
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
    check_mapping(value, field, fields, fields)
    return cls(**cast(Mapping[str, Any], value))


def optional_record(value: object, cls: type[R], field: str) -> R | None:
    return None if value is None else as_record(value, cls, field)
