"""The few names of :mod:`typing` that zkr needs at run time, without importing :mod:`typing`.

Importing :mod:`typing` and building ``typing.NamedTuple`` classes costs a one-shot CLI call
about 28M instructions (issue 14: ``zkr --db PATH search`` must answer in < 150 ms). Modules on
the CLI's ``search`` and ``remember`` paths therefore take these names from here, and
``tests/test_imports.py`` checks that such a call never loads :mod:`typing`:

- :data:`TYPE_CHECKING` is ``False`` (mypy and ruff treat ``if TYPE_CHECKING:`` by its name);
  names used only in annotations are imported under it (with ``from __future__ import
  annotations``);
- type checkers see the real :mod:`typing` objects: ``Any``, ``NamedTuple``, ``Protocol``,
  ``cast``, ``overload`` below are re-exported from :mod:`typing` under ``TYPE_CHECKING``;
- at run time ``Any`` and ``Protocol`` are ``object`` (an ``Any`` annotation evaluated at run
  time is ``object``: :func:`zkr.model.validate` checks nothing for it), ``cast`` returns its
  value, ``overload`` returns its function, and ``NamedTuple`` builds classes as below.

ruff knows these names as typing's (``typing-modules`` in ``pyproject.toml``).

A ``NamedTuple`` class built here behaves as ``typing.NamedTuple``'s (fields from the class
annotations, trailing defaults, ``_make``, ``_replace``, ``_asdict``, ``_fields``,
``_field_defaults``, ``__match_args__``, the same ``repr``, pickling), with one more base class
in its MRO (:class:`_NamedTupleBase`: those methods, empty ``__slots__``); its metaclass is
``type``, so a subclass of it is an ordinary class, as with ``typing.NamedTuple``. Its
``__annotations__`` are kept as written (strings under ``from __future__ import annotations``;
nothing evaluates them: a ``typing.NamedTuple`` compiles each string annotation, and the first
``compile()`` of a process costs about 2 ms). Its ``__new__`` is one of the hand-written
constructors below with its arguments renamed to the fields (``code.replace``), so nothing is
compiled either: ``collections.namedtuple`` compiles (``eval``) a constructor per class; it is
used only for a class of more than :data:`_MAX_TEMPLATE` fields.
"""

from __future__ import annotations

from collections import _tuplegetter, namedtuple  # type: ignore[attr-defined]
from types import FunctionType

TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import (
        Any as Any,
        NamedTuple as NamedTuple,
        Protocol as Protocol,
        cast as cast,
        overload as overload,
    )

_tuple_new = tuple.__new__


# One constructor per number of fields: ``code.replace`` renames the arguments, the tuple is
# built exactly as collections.namedtuple's ``__new__`` builds it.
def _new0(_cls: type) -> object:
    return _tuple_new(_cls, ())


def _new1(_cls: type, a: object) -> object:
    return _tuple_new(_cls, (a,))


def _new2(_cls: type, a: object, b: object) -> object:
    return _tuple_new(_cls, (a, b))


def _new3(_cls: type, a: object, b: object, c: object) -> object:
    return _tuple_new(_cls, (a, b, c))


def _new4(_cls: type, a: object, b: object, c: object, d: object) -> object:
    return _tuple_new(_cls, (a, b, c, d))


def _new5(_cls: type, a: object, b: object, c: object, d: object, e: object) -> object:
    return _tuple_new(_cls, (a, b, c, d, e))


def _new6(_cls: type, a: object, b: object, c: object, d: object, e: object, f: object) -> object:
    return _tuple_new(_cls, (a, b, c, d, e, f))


def _new7(
    _cls: type, a: object, b: object, c: object, d: object, e: object, f: object, g: object
) -> object:
    return _tuple_new(_cls, (a, b, c, d, e, f, g))


def _new8(
    _cls: type,
    a: object,
    b: object,
    c: object,
    d: object,
    e: object,
    f: object,
    g: object,
    h: object,
) -> object:
    return _tuple_new(_cls, (a, b, c, d, e, f, g, h))


def _new9(
    _cls: type,
    a: object,
    b: object,
    c: object,
    d: object,
    e: object,
    f: object,
    g: object,
    h: object,
    i: object,
) -> object:
    return _tuple_new(_cls, (a, b, c, d, e, f, g, h, i))


def _new10(
    _cls: type,
    a: object,
    b: object,
    c: object,
    d: object,
    e: object,
    f: object,
    g: object,
    h: object,
    i: object,
    j: object,
) -> object:
    return _tuple_new(_cls, (a, b, c, d, e, f, g, h, i, j))


def _new11(
    _cls: type,
    a: object,
    b: object,
    c: object,
    d: object,
    e: object,
    f: object,
    g: object,
    h: object,
    i: object,
    j: object,
    k: object,
) -> object:
    return _tuple_new(_cls, (a, b, c, d, e, f, g, h, i, j, k))


def _new12(
    _cls: type,
    a: object,
    b: object,
    c: object,
    d: object,
    e: object,
    f: object,
    g: object,
    h: object,
    i: object,
    j: object,
    k: object,
    m: object,
) -> object:
    return _tuple_new(_cls, (a, b, c, d, e, f, g, h, i, j, k, m))


_TEMPLATES: tuple[Callable[..., object], ...] = (_new0, _new1, _new2, _new3, _new4, _new5)
_TEMPLATES += (_new6, _new7, _new8, _new9, _new10, _new11, _new12)
_MAX_TEMPLATE = len(_TEMPLATES) - 1
# names a class body may not define (typing.NamedTuple refuses them too)
_PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields"})
_PROHIBITED |= {"_field_defaults", "_make", "_replace", "_asdict", "_source"}


def _constructor(
    name: str, qualname: str, fields: tuple[str, ...], defaults: tuple[object, ...]
) -> object:
    """The ``__new__`` of a class ``name`` with ``fields``, ``defaults`` for the last ones."""
    if len(fields) > _MAX_TEMPLATE:
        new = namedtuple(name, fields).__new__  # compiles its constructor: see above
    else:
        template = _TEMPLATES[len(fields)]
        code = template.__code__.replace(co_varnames=("_cls", *fields), co_name="__new__")
        new = FunctionType(code, template.__globals__, "__new__")
    new.__defaults__ = defaults or None
    new.__qualname__ = f"{qualname}.__new__"
    new.__doc__ = f"Create new instance of {name}({', '.join(fields)})"
    return new


class _NamedTupleBase(tuple):  # type: ignore[type-arg]
    """The base of every run-time ``NamedTuple`` class: the methods of
    ``collections.namedtuple``'s classes, read from the class's ``_fields``."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    @classmethod
    def _make(cls, iterable: Iterable[object]) -> _NamedTupleBase:
        result = _tuple_new(cls, iterable)
        if len(result) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
        return result

    def _replace(self, /, **kwds: object) -> _NamedTupleBase:
        result = self._make(map(kwds.pop, self._fields, self))
        if kwds:
            raise ValueError(f"Got unexpected field names: {list(kwds)!r}")
        return result

    def _asdict(self) -> dict[str, object]:
        return dict(zip(self._fields, self, strict=True))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self, strict=True))
        return f"{self.__class__.__name__}({inner})"

    def __getnewargs__(self) -> tuple[object, ...]:
        return tuple(self)


class _NamedTupleMeta(type):
    """Makes ``class C(NamedTuple): ...`` a subclass of :class:`_NamedTupleBase` (a plain
    class: its own subclasses are ordinary classes, as with ``typing.NamedTuple``)."""

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, object]) -> type:
        annotations = ns.get("__annotations__", {})
        assert isinstance(annotations, dict)
        fields = tuple(annotations)
        defaults: list[object] = []
        for field in fields:
            if field in ns:
                defaults.append(ns[field])
            elif defaults:
                raise TypeError(f"Non-default namedtuple field {field} cannot follow default")
        for key in ns:
            if key in _PROHIBITED:
                raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
        body = {key: value for key, value in ns.items() if key not in annotations}
        qualname = str(ns.get("__qualname__", name))
        body["__new__"] = _constructor(name, qualname, fields, tuple(defaults))
        body["__slots__"] = ()
        body["_fields"] = fields
        body["__match_args__"] = fields
        body["_field_defaults"] = dict(
            zip(fields[len(fields) - len(defaults) :], defaults, strict=True)
        )
        body.setdefault("__doc__", f"{name}({', '.join(fields)})")
        for index, field in enumerate(fields):
            body[field] = _tuplegetter(index, f"Alias for field number {index}")
        return type(name, (_NamedTupleBase,), body)


if not TYPE_CHECKING:
    Any = object
    Protocol = object
    NamedTuple = type.__new__(_NamedTupleMeta, "NamedTuple", (), {"__module__": __name__})

    def cast(typ, val):
        """Return ``val`` (``typing.cast`` at run time)."""
        return val

    def overload(func):
        """Return ``func`` (the implementation after the overloads replaces it)."""
        return func
