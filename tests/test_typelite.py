"""``zkr.typelite.NamedTuple`` behaves as ``typing.NamedTuple`` for every field count (the
hand-written constructors up to ``_MAX_TEMPLATE`` fields, ``collections.namedtuple`` beyond)."""

from __future__ import annotations

import pickle
import types
import typing
from typing import Any

import pytest
from hypothesis import given, strategies as st

from zkr import typelite


class LitePoint(typelite.NamedTuple):
    """Two fields and a default, as the model's classes are written."""

    x: int
    y: str = "y"

    def norm(self) -> int:
        return self.x * 2


class TypingPoint(typing.NamedTuple):
    x: int
    y: str = "y"

    def norm(self) -> int:
        return self.x * 2


def _pair(n: int, defaults: int) -> tuple[type[Any], type[Any]]:
    """The same class of ``n`` fields (the last ``defaults`` with a default) built both ways."""
    fields = [f"f{i}" for i in range(n)]
    namespace: dict[str, Any] = {"__annotations__": dict.fromkeys(fields, "int")}
    for name in fields[n - defaults :] if defaults else []:
        namespace[name] = -1
    return _build(f"L{n}", typelite.NamedTuple, namespace), _build(
        f"L{n}", typing.NamedTuple, namespace
    )


def _build(name: str, base: Any, namespace: dict[str, Any]) -> type[Any]:
    """``class name(base): ...`` with ``namespace`` as its body."""
    body = {"__module__": __name__, **namespace}
    return types.new_class(name, (base,), exec_body=lambda ns: ns.update(body))


@pytest.mark.parametrize("n", range(typelite._MAX_TEMPLATE + 3))
def test_every_field_count_behaves_as_typing(n: int) -> None:
    for defaults in sorted({0, n // 2, n}):
        lite, real = _pair(n, defaults)
        args = list(range(100, 100 + n))
        a, b = lite(*args), real(*args)
        assert tuple(a) == tuple(b) and a == b and hash(a) == hash(b)
        assert repr(a) == repr(b)
        assert lite._fields == real._fields
        assert lite._field_defaults == real._field_defaults
        assert lite.__match_args__ == real.__match_args__
        assert a._asdict() == b._asdict()
        assert lite._make(args) == a
        if n:
            assert a._replace(f0=7) == b._replace(f0=7)
            assert getattr(a, f"f{n - 1}") == args[-1]
            keywords = {f"f{i}": i for i in range(n)}
            assert tuple(lite(**keywords)) == tuple(real(**keywords))
            with pytest.raises(TypeError):
                lite(*args, 1)  # one argument too many, as typing's
            with pytest.raises(AttributeError):
                a.f0 = 1  # type: ignore[attr-defined]
        if defaults:
            short = args[: n - defaults]
            assert tuple(lite(*short)) == tuple(real(*short))
        elif n:
            with pytest.raises(TypeError):
                lite(*args[:-1])


@given(st.integers(), st.text())
def test_methods_defaults_and_pickling(x: int, y: str) -> None:
    lite, real = LitePoint(x, y), TypingPoint(x, y)
    assert tuple(lite) == tuple(real) and lite.norm() == real.norm()
    assert LitePoint(x) == TypingPoint(x)
    assert repr(lite) == repr(real).replace("TypingPoint", "LitePoint")
    again = pickle.loads(pickle.dumps(lite))
    assert type(again) is LitePoint and again == lite
    assert LitePoint.__doc__ and LitePoint.__annotations__ == {"x": "int", "y": "str"}
    assert not hasattr(lite, "__dict__")  # (empty __slots__ all the way, as typing's)


def test_a_reserved_name_is_refused_as_by_typing() -> None:
    for base in (typelite.NamedTuple, typing.NamedTuple):
        with pytest.raises(AttributeError):
            _build("Bad", base, {"__annotations__": {"a": "int"}, "_make": 1})
