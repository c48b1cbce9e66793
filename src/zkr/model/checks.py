"""Library request checks: the CLI decoder's rules applied to values built in Python.

:class:`zkr.MemoryDb` calls :func:`validate` on every request (spec/cli.md §5 integer widths,
enum members, no lone surrogates), so a library caller gets the CLI's error before any write.
"""

import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum

from zkr.codec import (
    I64_MAX,
    I64_MIN,
    U16_MAX,
    U32_MAX,
    U64_MAX,
    expect_bool,
    expect_int,
    expect_str,
    has_lone_surrogate,
)
from zkr.errors import RequestError
from zkr.typelite import Any

# Integer fields that are not signed 64-bit (spec/cli.md §5).
_INT_RANGES: dict[str, tuple[int, int, str]] = {
    "limit": (0, U32_MAX, "u32"),
    "export_format": (0, U32_MAX, "u32"),
    "confidence_basis_points": (0, U16_MAX, "u16"),
    "start_ms": (0, U64_MAX, "u64"),
    "end_ms": (0, U64_MAX, "u64"),
}


Checker = Callable[[Any], None]

# request class -> ((field name, checker), ...), built once per class from its annotations
_CHECKERS: dict[type, tuple[tuple[str, Checker], ...]] = {}


def validate(value: Any, expected: type | None = None) -> None:
    """Check a request built in Python against the rules the CLI decoder enforces.

    Library callers construct requests directly, so a ``float`` timestamp (``time.time()``),
    a ``bool``, a negative ``limit``, a plain string where an enum member belongs or a string
    with a lone surrogate must fail here, as :class:`~zkr.errors.RequestError` naming the
    field, before anything is written. :class:`zkr.MemoryDb` calls this on every request.
    A value that is not a :mod:`zkr.model` type at all (a ``dict``, ``None``) is a
    ``RequestError`` too, and so, when ``expected`` names the method's request class, is
    another command's request (``db.search(RememberRequest(...))``).
    """
    cls = type(value)
    checkers = _CHECKERS.get(cls)
    if checkers is None and not (issubclass(cls, tuple) and cls.__module__.startswith("zkr.model")):
        # a dict or None has no fields to check: it would fail inside the store, where any
        # error is blamed on the file ("database content is not what zkr expects")
        raise RequestError(f"invalid type: {cls.__name__}, expected a zkr.model request")
    if expected is not None and not isinstance(value, expected):
        # the same: a field the store reads is missing and the file would take the blame
        raise RequestError(f"invalid type: {cls.__name__}, expected {expected.__name__}")
    if checkers is None:
        checkers = _CHECKERS[cls] = tuple(
            (name, _checker(annotation, name)) for name, annotation in _annotations(cls).items()
        )
    for name, check in checkers:
        try:
            check(getattr(value, name))
        except RequestError as exc:
            if exc.message.startswith("field `"):
                raise
            raise RequestError(f"field `{name}`: {exc.message}") from None


def real_vector(value: Any, field: str) -> Any:
    """A library caller's vector as the list of Python floats a request holds: any 1-d
    sequence (or other iterable) of real numbers — a list or tuple of ints and floats, a numpy
    float array (read with its ``tolist``), a list of numpy scalars — comes back as a ``list``
    (a list of floats and ints as it is); any other value (a string, a mapping, a number)
    comes back unchanged, for :func:`validate` to refuse. Raises
    :class:`~zkr.errors.RequestError` naming ``field`` for an array of more than one
    dimension and for an element that is not a real number (a bool, a string, a complex
    number, a nested sequence). Non-finite values pass: the store refuses them with its own
    message. Imports no numpy (an array is known by its ``ndim`` and ``tolist``)."""
    if type(value) is list and all(type(x) is float or type(x) is int for x in value):
        return value  # the common case (the CLI's decoder gives these)
    ndim = getattr(value, "ndim", None)
    if ndim is not None and ndim != 1:
        raise RequestError(
            f"field `{field}`: expected a 1-d sequence of numbers, got a {ndim}-d array"
        )
    if ndim is not None and callable(getattr(value, "tolist", None)):
        value = value.tolist()  # a numpy array: its elements as Python numbers, in C
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        return value
    import numbers  # (numpy registers its scalar types with these ABCs)

    out: list[float] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, numbers.Real):
            kind = "a sequence" if isinstance(item, list | tuple) else type(item).__name__
            raise RequestError(f"field `{field}`: invalid type: {kind}, expected f32")
        try:
            out.append(float(item))
        except OverflowError:  # an int beyond the double range: not finite, as the CLI's
            out.append(float("-inf") if item < 0 else float("inf"))
    return out


def _annotations(cls: type) -> dict[str, Any]:
    """The field annotations of a request class, base classes first (``typing.get_type_hints``
    without :mod:`typing`: :mod:`zkr.model` evaluates its annotations, there is no string to
    resolve, and the CLI does not import :mod:`typing`, see :mod:`zkr.typelite`)."""
    hints: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        hints.update(vars(base).get("__annotations__", {}))
    hints = {name: hints[name] for name in cls._fields if name in hints}  # type: ignore[attr-defined]
    if any(isinstance(annotation, str) for annotation in hints.values()):
        import typing  # a string annotation (a request class defined outside zkr.model)

        return typing.get_type_hints(cls)
    return hints


def _no_check(item: Any) -> None:
    return None


def _check_str(item: Any) -> None:
    if type(item) is str and item.isascii():  # the common case: nothing more to look at
        return
    if has_lone_surrogate(expect_str(item)):
        raise RequestError("lone surrogate in string")


def _check_bool(item: Any) -> None:
    expect_bool(item)


def _check_float(item: Any) -> None:
    if isinstance(item, bool) or not isinstance(item, int | float):
        raise RequestError(f"invalid type: {type(item).__name__}, expected f32")


def _checker(annotation: Any, name: str) -> Checker:
    """The check for one annotated field (``name`` selects the integer width)."""
    if annotation is Any:
        return _no_check
    origin = getattr(annotation, "__origin__", None)  # list[int] -> list (a types.GenericAlias)
    if isinstance(annotation, types.UnionType):  # X | None
        inner = [arg for arg in annotation.__args__ if arg is not type(None)]
        check_inner = _checker(inner[0], name)

        def check_optional(item: Any) -> None:
            if item is not None:
                check_inner(item)

        return check_optional
    if annotation is int:
        low, high, type_name = _INT_RANGES.get(name, (I64_MIN, I64_MAX, "i64"))

        def check_int(item: Any) -> None:
            expect_int(item, low, high, type_name)

        return check_int
    if annotation is bool:  # `dry_run=0` must not erase: no truthiness (spec/cli.md §5)
        return _check_bool
    if annotation is str:
        return _check_str
    if annotation is float:
        return _check_float
    if origin in (list, Sequence):
        (element,) = annotation.__args__
        check_element = _checker(element, name)

        def check_sequence(item: Any) -> None:
            if not isinstance(item, list | tuple):
                raise RequestError(f"invalid type: {type(item).__name__}, expected a sequence")
            for entry in item:
                check_element(entry)

        return check_sequence
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        enum_type = annotation

        def check_enum(item: Any) -> None:
            if not isinstance(item, enum_type):
                raise RequestError(f"expected a {enum_type.__name__} member, got {item!r}")

        return check_enum
    if isinstance(annotation, type) and issubclass(annotation, tuple):
        record_type = annotation

        def check_record(item: Any) -> None:
            if not isinstance(item, record_type):
                raise RequestError(f"expected {record_type.__name__}, got {type(item).__name__}")
            try:
                validate(item)
            except RequestError as exc:  # name the nested field by its path: `claim.kind`
                raise RequestError(exc.message.replace("field `", f"field `{name}.", 1)) from None

        return check_record
    return _no_check
