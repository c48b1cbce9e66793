"""Library request checks: the CLI decoder's rules applied to values built in Python.

:class:`zkr.MemoryDb` calls :func:`validate` on every request (spec/cli.md §5 integer widths,
enum members, no lone surrogates), so a library caller gets the CLI's error before any write.
"""

import types
import typing
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from zkr.codec import (
    I64_MAX,
    I64_MIN,
    U16_MAX,
    U32_MAX,
    U64_MAX,
    expect_int,
    expect_str,
    has_lone_surrogate,
)
from zkr.errors import RequestError

# Integer fields that are not signed 64-bit (spec/cli.md §5).
_INT_RANGES: dict[str, tuple[int, int, str]] = {
    "limit": (0, U32_MAX, "u32"),
    "export_format": (0, U32_MAX, "u32"),
    "confidence_basis_points": (0, U16_MAX, "u16"),
    "start_ms": (0, U64_MAX, "u64"),
    "end_ms": (0, U64_MAX, "u64"),
}


_FIELDS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = tuple(typing.get_type_hints(cls).items())
    return fields


def validate(value: Any) -> None:
    """Check a request built in Python against the rules the CLI decoder enforces.

    Library callers construct requests directly, so a ``float`` timestamp (``time.time()``),
    a ``bool``, a negative ``limit``, a plain string where an enum member belongs or a string
    with a lone surrogate must fail here, as :class:`~zkr.errors.RequestError` naming the
    field, before anything is written. :class:`zkr.MemoryDb` calls this on every request.
    """
    for name, annotation in _fields(type(value)):
        _check(getattr(value, name), annotation, name)


def _check(item: Any, annotation: Any, name: str) -> None:
    if annotation is Any:
        return
    origin = typing.get_origin(annotation)
    try:
        if origin in (types.UnionType, typing.Union):
            args = typing.get_args(annotation)
            if item is None and type(None) in args:
                return
            inner = [arg for arg in args if arg is not type(None)]
            _check(item, inner[0], name)
        elif annotation is int:
            low, high, type_name = _INT_RANGES.get(name, (I64_MIN, I64_MAX, "i64"))
            expect_int(item, low, high, type_name)
        elif annotation is str:
            if has_lone_surrogate(expect_str(item)):
                raise RequestError("lone surrogate in string")
        elif annotation is float:
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise RequestError(f"invalid type: {type(item).__name__}, expected f32")
        elif origin in (list, Sequence):
            if not isinstance(item, list | tuple):
                raise RequestError(f"invalid type: {type(item).__name__}, expected a sequence")
            (element,) = typing.get_args(annotation)
            for entry in item:
                _check(entry, element, name)
        elif isinstance(annotation, type) and issubclass(annotation, StrEnum):
            if not isinstance(item, annotation):
                raise RequestError(f"expected a {annotation.__name__} member, got {item!r}")
        elif isinstance(annotation, type) and issubclass(annotation, tuple):
            if not isinstance(item, annotation):
                raise RequestError(f"expected {annotation.__name__}, got {type(item).__name__}")
            validate(item)
    except RequestError as exc:
        if exc.message.startswith("field `"):
            raise
        raise RequestError(f"field `{name}`: {exc.message}") from None
