"""Strict JSON decoding and the two JSON encodings zkr writes.

* :func:`parse_json` turns request bytes into Python values with the reference's strictness
  (spec/cli.md §4): invalid UTF-8, a UTF-8 BOM, ``NaN``/``Infinity``, raw control characters,
  lone surrogate escapes, duplicate keys and trailing data are all rejected. A number written
  with a fraction or an exponent (and the literal ``-0``) stays a ``float`` so integer fields
  can reject it.
* :class:`Fields` reads typed fields out of a decoded object and raises
  :class:`~zkr.errors.RequestError` with serde-shaped messages (``missing field `x```,
  ``invalid type: …``, ``invalid value: integer `-1`, expected u32``, ``unknown variant …``).
* :func:`canonical` is the field-order compact form behind stored feed payloads and payload
  hashes (spec/sync.md §1.4); :func:`cli_dumps` is the sorted-keys form the CLI prints
  (spec/cli.md §6). Never hash the CLI form.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from enum import Enum

from zkr.errors import RequestError
from zkr.typelite import TYPE_CHECKING, Any

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
U16_MAX = 2**16 - 1
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

if TYPE_CHECKING:
    from typing import TypeVar

    E = TypeVar("E", bound=Enum)


# --------------------------------------------------------------------------- decoding


def _reject_constant(name: str) -> Any:
    raise RequestError(f"invalid number `{name}`: NaN and Infinity are not JSON")


def _parse_int(text: str) -> int | float:
    # serde treats `-0` as a float; keep it a float so integer fields reject it.
    if text == "-0":
        return -0.0
    return int(text)


def _parse_float(text: str) -> float:
    # A finite literal too large for a double (1e400) is "number out of range" in serde_json,
    # whatever field it is in, not an infinity for the field's own check to describe.
    value = float(text)
    if value in (math.inf, -math.inf):
        raise RequestError("number out of range")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise RequestError(f"duplicate field `{key}`")
        out[key] = value
    return out


def _check_surrogates(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                raise RequestError("lone leading or trailing surrogate in string escape")
        elif isinstance(item, dict):
            for key, sub in item.items():
                if has_lone_surrogate(key):
                    raise RequestError("lone leading or trailing surrogate in string escape")
                stack.append(sub)
        elif isinstance(item, list):
            stack.extend(item)


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a code point in U+D800..U+DFFF (not encodable as UTF-8)."""
    # json.loads joins valid \uD83D\uDE00 pairs into one code point, so any remaining
    # code point in U+D800..U+DFFF came from a lone escape.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (U+D800..U+DFFF) written as its ``\\uXXXX`` escape, so
    it can be stored and printed as UTF-8; ``text`` itself when it has none. For text zkr builds
    from a file it does not refuse whole (``zkr import``'s keys and messages)."""
    if not has_lone_surrogate(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def require_utf8(text: str, name: str) -> None:
    """Raise ``RequestError('<name> must be UTF-8 text')`` for a command-line value whose bytes
    were not UTF-8 (Python decodes argv with ``surrogateescape``): every request made with it
    would fail on its lone surrogate."""
    if has_lone_surrogate(text):
        raise RequestError(f"{name} must be UTF-8 text")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_constant=_reject_constant,
    parse_int=_parse_int,
    parse_float=_parse_float,
    strict=True,
)


def parse_json(data: bytes | str, *, lone_surrogates: bool = False) -> Any:
    """Decode exactly one JSON value (optionally surrounded by whitespace).

    Raises :class:`RequestError` for anything serde_json would refuse (spec/cli.md §4).
    ``lone_surrogates=True`` lets a ``\\uD800`` escape through, for a caller that reports it
    later with more context (``zkr import``: the line still gets its key, then fails alone).
    """
    if isinstance(data, bytes):
        if data.startswith(b"\xef\xbb\xbf"):
            raise RequestError("expected value at line 1 column 1 (a UTF-8 BOM is not JSON)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"invalid UTF-8 in request at byte {exc.start}") from None
    else:
        text = data
        if text.startswith("\ufeff"):
            raise RequestError("expected value at line 1 column 1 (a BOM is not JSON)")
    stripped_start = len(text) - len(text.lstrip(" \t\n\r"))
    if stripped_start == len(text):
        raise RequestError("EOF while parsing a value at line 1 column 0")
    try:
        value, end = _DECODER.raw_decode(text, stripped_start)
    except json.JSONDecodeError as exc:
        raise RequestError(_serde_syntax_error(text, exc)) from None
    except ValueError:  # an integer literal longer than Python's digit limit
        raise RequestError("number out of range") from None
    except RecursionError:
        raise RequestError("recursion limit exceeded") from None
    rest = text[end:]
    if rest.strip(" \t\n\r"):
        offset = end + (len(rest) - len(rest.lstrip(" \t\n\r")))
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        raise RequestError(f"trailing characters at line {line} column {column}")
    # A lone surrogate can only come from a \u escape when the text was decoded from UTF-8
    # (Python's decoder refuses encoded surrogates); a str argument may hold one raw.
    if not lone_surrogates and (
        "\\u" in text or (not isinstance(data, bytes) and has_lone_surrogate(text))
    ):
        _check_surrogates(value)
    return value


_CONTROL = "control character (\\u0000-\\u001F) found while parsing a string"


def _serde_syntax_error(text: str, exc: json.JSONDecodeError) -> str:
    """Python's JSON syntax error in serde_json's words (spec/cli.md §4-5: messages follow the
    reference's JSON library), with its position: the offending character, or for input that
    ends too early the last character (``EOF while parsing a value at line 1 column 5``)."""
    pos, msg = exc.pos, exc.msg
    container = _innermost_open(text, pos)
    if msg.startswith("Unterminated string") or not text[pos:].strip(" \t\n\r"):
        if msg.startswith("Unterminated string"):
            what = "a string"
        elif msg == "Expecting value" or container is None:
            what = "a value"
        else:
            what = "an object" if container == "{" else "a list"
        line, column = text.count("\n") + 1, len(text) - text.rfind("\n") - 1
        return f"EOF while parsing {what} at line {line} column {column}"
    here = text[pos]
    before = text[:pos].rstrip(" \t\n\r")[-1:]
    if msg == "Expecting value":
        if here in "]}" and before == ",":
            phrase = "trailing comma"
        elif here == "-" or here.isdigit():
            phrase = "invalid number"
        elif here.isalpha():
            phrase = "expected ident"
        else:
            phrase = "expected value"
    elif msg.startswith("Expecting property name"):
        phrase = "trailing comma" if here == "}" and before == "," else "key must be a string"
    elif msg.startswith("Expecting ':'"):
        phrase = "expected `:`"
    elif msg.startswith("Expecting ','"):
        if here.isdigit() and text[pos - 1 : pos].isdigit():  # 01: a leading zero
            phrase = "invalid number"
        else:
            phrase = "expected `,` or `]`" if container == "[" else "expected `,` or `}`"
    elif msg.startswith("Invalid control character"):
        phrase = _CONTROL
    elif msg.startswith("Invalid \\"):  # Invalid \escape, Invalid \uXXXX escape
        phrase = "invalid escape"
    else:
        phrase = msg[:1].lower() + msg[1:]
    return f"{phrase} at line {exc.lineno} column {exc.colno}"


def _innermost_open(text: str, end: int) -> str | None:
    """The innermost ``{`` or ``[`` still open at ``end`` (strings skipped), if any."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text[:end]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else None


def _describe(value: Any) -> str:
    """serde-style description of an unexpected JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list | tuple):
        return "sequence"
    if isinstance(value, dict):
        return "map"
    # only the library can pass these (a JSON decoder never makes them): name the Python type
    return f"Python {type(value).__name__}"


class Fields:
    """Typed access to the fields of one decoded JSON object.

    ``what`` names the expected struct in type errors (``struct RememberRequest``). Unknown keys
    are ignored unless :meth:`deny_unknown` is called (only ``profile`` does, spec/cli.md §5).
    """

    def __init__(self, value: Any, what: str) -> None:
        if not isinstance(value, dict):
            raise RequestError(f"invalid type: {_describe(value)}, expected {what}")
        self.data: dict[str, Any] = value
        self.what = what

    def deny_unknown(self, allowed: Iterable[str]) -> None:
        names = list(allowed)
        for key in self.data:
            if key not in names:
                expected = ", ".join(f"`{n}`" for n in names)
                raise RequestError(f"unknown field `{key}`, expected one of {expected}")

    def required(self, name: str) -> Any:
        """The raw value of a required field; ``missing field `name``` when absent."""
        if name not in self.data:
            raise RequestError(f"missing field `{name}`")
        return self.data[name]

    def has(self, name: str) -> bool:
        return name in self.data

    def bool_default(self, name: str, default: bool) -> bool:
        """An optional boolean (absent: ``default``; ``null`` is a type error, as elsewhere)."""
        if name not in self.data:
            return default
        return expect_bool(self.data[name])

    # -- strings
    def string(self, name: str) -> str:
        return expect_str(self.required(name))

    def opt_string(self, name: str) -> str | None:
        value = self.data.get(name)
        return None if value is None else expect_str(value)

    # -- integers
    def i64(self, name: str) -> int:
        return expect_int(self.required(name), I64_MIN, I64_MAX, "i64")

    def opt_i64(self, name: str) -> int | None:
        value = self.data.get(name)
        return None if value is None else expect_int(value, I64_MIN, I64_MAX, "i64")

    def i64_default(self, name: str, default: int) -> int:
        if name not in self.data:
            return default
        return expect_int(self.data[name], I64_MIN, I64_MAX, "i64")

    def u16(self, name: str) -> int:
        return expect_int(self.required(name), 0, U16_MAX, "u16")

    def u32(self, name: str) -> int:
        return expect_int(self.required(name), 0, U32_MAX, "u32")

    def u32_default(self, name: str, default: int) -> int:
        if name not in self.data:
            return default
        return expect_int(self.data[name], 0, U32_MAX, "u32")

    def u64(self, name: str) -> int:
        return expect_int(self.required(name), 0, U64_MAX, "u64")

    # -- enums, objects, arrays
    def enum(self, name: str, kind: type[E]) -> E:
        return expect_enum(self.required(name), kind)

    def enum_default(self, name: str, kind: type[E], default: E) -> E:
        if name not in self.data:
            return default
        return expect_enum(self.data[name], kind)

    def obj(self, name: str, what: str) -> Fields:
        return Fields(self.required(name), what)

    def opt_obj(self, name: str, what: str) -> Fields | None:
        value = self.data.get(name)
        return None if value is None else Fields(value, what)

    def str_list(self, name: str) -> list[str]:
        value = self.required(name)
        if not isinstance(value, list):
            raise RequestError(f"invalid type: {_describe(value)}, expected a sequence")
        return [expect_str(item) for item in value]

    def list_default(self, name: str) -> list[Any]:
        if name not in self.data:
            return []
        value = self.data[name]
        if not isinstance(value, list):
            raise RequestError(f"invalid type: {_describe(value)}, expected a sequence")
        return value

    def number_list(self, name: str) -> list[float]:
        value = self.required(name)
        if not isinstance(value, list):
            raise RequestError(f"invalid type: {_describe(value)}, expected a sequence")
        out: list[float] = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise RequestError(f"invalid type: {_describe(item)}, expected f32")
            try:
                out.append(float(item))
            except OverflowError:  # an integer literal beyond the double range
                out.append(float("inf") if item > 0 else float("-inf"))
        return out


def expect_str(value: Any) -> str:
    if not isinstance(value, str):
        raise RequestError(f"invalid type: {_describe(value)}, expected a string")
    return value


def expect_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise RequestError(f"invalid type: {_describe(value)}, expected a boolean")
    return value


def expect_int(value: Any, low: int, high: int, type_name: str) -> int:
    """An integer literal in ``low..=high``; floats, booleans and strings are type errors."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"invalid type: {_describe(value)}, expected {type_name}")
    if value < low or value > high:
        raise RequestError(f"invalid value: integer `{value}`, expected {type_name}")
    return value


def expect_enum(value: Any, kind: type[E]) -> E:
    if not isinstance(value, str):
        raise RequestError(f"invalid type: {_describe(value)}, expected enum {kind.__name__}")
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(f"`{m.value}`" for m in kind)
        raise RequestError(f"unknown variant `{value}`, expected one of {names}") from None


def enum_parser(kind: type[E]) -> Callable[[Any], E]:
    return lambda value: expect_enum(value, kind)


# --------------------------------------------------------------------------- encoding


# Built once: json.dumps with non-default options constructs a new encoder on every call.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_CLI = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False)


def _one_shot(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` without its per-call set-up.

    ``JSONEncoder.encode`` builds a new C encoder (and a circular-reference dict and a float
    closure) on every call: about a third of encoding one feed record. The C encoder holds no
    state of its own when it keeps no markers, so one is built here and reused; its output is
    ``encoder.encode``'s, byte for byte (the values zkr encodes are trees it built or decoded,
    never circular). Without the C accelerator the encoder's own ``encode`` stays.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return encoder.encode
    chunks = make(
        None,  # no circular-reference markers
        encoder.default,
        json.encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


_canonical = _one_shot(_CANONICAL)
_cli = _one_shot(_CLI)


def canonical(value: Any) -> str:
    """Field-order compact JSON (spec/sync.md §1.4): the bytes of stored payloads and hashes.

    ``value`` must be built from dicts in declared key order; ``sort_keys`` is never used.
    Equivalent to ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``.
    """
    return _canonical(value)


def cli_dumps(value: Any) -> str:
    """The CLI's stdout form: compact, keys sorted at every level, raw UTF-8 (spec/cli.md §6)."""
    return _cli(value)


def sha256_tagged(text: str) -> str:
    """``sha256:`` + 64 lowercase hex digits of the UTF-8 bytes of ``text``."""
    return "sha256:" + sha256_hex(text.encode("utf-8"))


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data``: 64 lowercase hex digits."""
    global _SHA256
    if _SHA256 is None:
        _SHA256 = _sha256_constructor()
    return str(_SHA256(data).hexdigest())


_SHA256: Callable[[bytes], Any] | None = None


def _sha256_constructor() -> Callable[[bytes], Any]:
    """The interpreter's own SHA-256 (``_sha2`` from Python 3.12, ``_sha256`` before): the
    digest of :mod:`hashlib`, without loading OpenSSL's libcrypto, which costs a one-shot call
    (a hybrid search hashes the lane's current input) about 10 ms; else hashlib's. Looked up
    on first use, off the CLI start-up path."""
    from importlib import import_module

    for name in ("_sha2", "_sha256"):
        try:
            constructor: Callable[[bytes], Any] = import_module(name).sha256
        except (ImportError, AttributeError):
            continue
        return constructor
    import hashlib

    return hashlib.sha256
