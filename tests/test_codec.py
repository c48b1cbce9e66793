"""Strict request decoding and the two JSON encodings (spec/cli.md §4-6, spec/sync.md §1.4)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from zkr.codec import Fields, canonical, cli_dumps, parse_json, sha256_hex, sha256_tagged
from zkr.errors import RequestError
from zkr.model import (
    ClaimTierRequest,
    LinkRequest,
    ProfileRequest,
    RememberRequest,
    SearchRequest,
    Tier,
)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"   ",
        b"\xef\xbb\xbf{}",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": -Infinity}',
        b'{"a": 1} x',
        b'{"a": 1}{"b": 2}',
        b'{"a": "\xff"}',
        b'{"a": "line\nbreak"}',
        b'{"a": "\\ud800"}',
        b'{"a": "\\udc00x"}',
        b'{"\\ud800": 1}',
        b'{"a": 1, "a": 2}',
        b'{"a": {"b": 1, "b": 1}}',
        b"{bad json",
    ],
)
def test_parse_rejects_what_serde_rejects(raw: bytes) -> None:
    with pytest.raises(RequestError):
        parse_json(raw)


def test_parse_accepts_whitespace_and_valid_surrogate_pairs() -> None:
    assert parse_json(b' \n{"a": "\\ud83d\\ude00"}\t ') == {"a": "😀"}


@pytest.mark.parametrize("literal", [b"1e400", b"-1e400", b"1" + b"0" * 5000, b"1.5e999999999"])
def test_numbers_beyond_range_are_out_of_range_whatever_the_spelling(literal: bytes) -> None:
    with pytest.raises(RequestError, match=r"^number out of range$"):
        parse_json(b'{"vector": [0.5, ' + literal + b"]}")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "EOF while parsing a value at line 1 column 0"),
        (b'{"a":', "EOF while parsing a value at line 1 column 5"),
        (b'{"a":1', "EOF while parsing an object at line 1 column 6"),
        (b'{"a":[1,2', "EOF while parsing a list at line 1 column 9"),
        (b'{"a":"x', "EOF while parsing a string at line 1 column 7"),
        (b"{a:1}", "key must be a string at line 1 column 2"),
        (b'{"a" 1}', "expected `:` at line 1 column 6"),
        (b'{"a":1 "b":2}', "expected `,` or `}` at line 1 column 8"),
        (b'{"a":[1 2]}', "expected `,` or `]` at line 1 column 9"),
        (b'{"a":1,}', "trailing comma at line 1 column 8"),
        (b'{"a":01}', "invalid number at line 1 column 7"),
        (b'{"a":-}', "invalid number at line 1 column 6"),
        (b'{"a":tru}', "expected ident at line 1 column 6"),
        (b'{"a":"\\q"}', "invalid escape at line 1 column 7"),
        (
            b'{"a":"x\x01y"}',
            "control character (\\u0000-\\u001F) found while parsing a string at line 1 column 8",
        ),
        (b'{"a":1} x', "trailing characters at line 1 column 9"),
    ],
)
def test_syntax_errors_use_serde_wording(raw: bytes, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_json(raw)
    assert str(caught.value) == message


def test_tiny_floats_underflow_to_zero_like_serde() -> None:
    assert parse_json(b'{"a": 1e-400}') == {"a": 0.0}


def test_floats_and_minus_zero_stay_floats() -> None:
    value = parse_json(b'{"a": 1.0, "b": 1e1, "c": -0, "d": 0, "e": -7}')
    assert isinstance(value["a"], float)
    assert isinstance(value["b"], float)
    assert isinstance(value["c"], float)
    assert value["d"] == 0 and isinstance(value["d"], int)
    assert value["e"] == -7


def _remember(**override: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tenant_id": "t",
        "person_id": "p",
        "kind": "conversation",
        "text": "x",
        "captured_at": 1,
        "recorded_at": 1,
    }
    base.update(override)
    return base


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ({"captured_at": 1.0}, "invalid type"),
        ({"captured_at": True}, "invalid type"),
        ({"captured_at": "1"}, "invalid type"),
        ({"captured_at": -0.0}, "invalid type"),
        ({"captured_at": 2**63}, "invalid value"),
        ({"tenant_id": 1}, "invalid type"),
        ({"kind": "diary"}, "unknown variant `diary`"),
        ({"kind": None}, "invalid type: null"),
        ({"claim": {"subject": "s"}}, "missing field `predicate`"),
        (
            {
                "locator": {
                    "device_id": "d",
                    "provider": "p",
                    "stream_id": "s",
                    "segment_id": "g",
                    "start_ms": -1,
                    "end_ms": 2,
                }
            },
            "expected u64",
        ),
    ],
)
def test_remember_decoding_errors(override: dict[str, Any], fragment: str) -> None:
    with pytest.raises(RequestError, match=fragment):
        RememberRequest.from_json(_remember(**override))


def test_missing_field_names_the_field() -> None:
    raw = _remember()
    del raw["text"]
    with pytest.raises(RequestError, match="missing field `text`"):
        RememberRequest.from_json(raw)


def test_null_is_absent_only_for_optional_fields() -> None:
    req = RememberRequest.from_json(_remember(claim=None, locator=None, ingestion_key=None))
    assert req.claim is None and req.locator is None and req.ingestion_key is None
    with pytest.raises(RequestError, match="invalid type: null"):
        SearchRequest.from_json({"tenant_id": "t", "person_id": "p", "query": "q", "limit": None})
    claim = {"subject": "s", "predicate": "p", "value": "v", "kind": "fact", "valid_from": 1}
    with pytest.raises(RequestError, match="invalid type: null"):
        RememberRequest.from_json(_remember(claim={**claim, "tier": None}))
    assert RememberRequest.from_json(_remember(claim=claim)).claim.tier is Tier.LONG_TERM  # type: ignore[union-attr]


def test_unsigned_ranges() -> None:
    base = {"tenant_id": "t", "person_id": "p", "query": "q"}
    with pytest.raises(RequestError, match="expected u32"):
        SearchRequest.from_json({**base, "limit": -1})
    with pytest.raises(RequestError, match="expected u32"):
        SearchRequest.from_json({**base, "limit": 2**32})
    assert SearchRequest.from_json({**base, "limit": 2**32 - 1}).limit == 2**32 - 1
    link = {
        "tenant_id": "t",
        "person_id": "p",
        "claim_id": "c",
        "evidence_id": "e",
        "relation": "supports",
    }
    with pytest.raises(RequestError, match="expected u16"):
        LinkRequest.from_json({**link, "confidence_basis_points": 70000})


def test_unknown_fields_ignored_except_profile() -> None:
    ClaimTierRequest.from_json(
        {"tenant_id": "t", "person_id": "p", "claim_id": "c", "recorded_at": 1, "extra": 1}
    )
    with pytest.raises(RequestError, match="unknown field `key`, expected one of `tenant_id`"):
        ProfileRequest.from_json(
            {
                "tenant_id": "t",
                "person_id": "p",
                "stability": "current",
                "claim_id": "c",
                "recorded_at": 1,
                "key": "k",
            }
        )


def test_top_level_must_be_an_object() -> None:
    for value in (None, "x", 1, []):
        with pytest.raises(RequestError, match="invalid type"):
            SearchRequest.from_json(value)


def test_cli_dumps_is_sorted_compact_raw_utf8() -> None:
    assert cli_dumps({"b": 1, "a": {"d": "é", "c": "\u2028\x01"}}) == (
        '{"a":{"c":"\u2028\\u0001","d":"é"},"b":1}'
    )


def test_canonical_keeps_field_order() -> None:
    assert canonical({"b": 1, "a": [1, "x"]}) == '{"b":1,"a":[1,"x"]}'


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_parse_roundtrips_json_values(value: Any) -> None:
    assert parse_json(json.dumps(value).encode()) == value
    assert parse_json(canonical(value).encode()) == value


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_the_reused_encoders_write_what_json_dumps_writes(value: Any) -> None:
    # canonical/cli_dumps reuse one C encoder instead of building one per call: the bytes
    # (payload hashes, CLI output) must stay json.dumps's own
    assert canonical(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert cli_dumps(value) == json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), sort_keys=True
    )


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "\\ud800"}',  # an escape, in bytes
        b'{"a": ["x", {"\\udfff": 1}]}',  # in a nested key
        '{"a": "\\ud800"}',  # an escape, in a str
        '{"a": "\ud800"}',  # a raw lone surrogate in a str argument (no escape in the text)
        '{"\udc00": 1}',  # ... in a key
    ],
)
def test_lone_surrogates_are_refused_with_or_without_an_escape(raw: bytes | str) -> None:
    with pytest.raises(RequestError, match="lone leading or trailing surrogate"):
        parse_json(raw)


def test_fields_reports_expected_struct() -> None:
    with pytest.raises(RequestError, match="expected struct Thing"):
        Fields([1, 2], "struct Thing")


JSONISH = st.text(alphabet='{}[],:"\\ 019-.eEtrufalsnNI\n\tx\x01', max_size=40)


@settings(max_examples=400)
@given(JSONISH)
def test_any_text_parses_or_fails_with_one_request_error(text: str) -> None:
    """Arbitrary near-JSON input: a value, or a RequestError with a serde-style position."""
    try:
        parse_json(text.encode("utf-8"))
    except RequestError as exc:
        message = str(exc)
        assert message and "Expecting" not in message and "Unterminated" not in message
        positionless = ("number out of range", "duplicate field", "invalid number `", "lone ")
        assert message.startswith(positionless) or (
            " at line " in message and " column " in message
        )


@given(st.binary(max_size=300))
def test_sha256_hex_is_hashlibs_digest(data: bytes) -> None:
    """The interpreter's own SHA-256 module (no OpenSSL on the CLI path) gives hashlib's digest."""
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
    text = data.decode("latin-1")
    assert sha256_tagged(text) == "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
