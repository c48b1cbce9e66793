"""Feed records: golden payload hashes and strict parsing of received records and commits
(spec/sync.md §1.3-1.6; :mod:`zkr.store.records`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.sync_support import (
    GOLDEN,
    claim_record,
    link_record,
    source_record,
)
from zkr import RequestError
from zkr.codec import canonical, parse_json
from zkr.store import feed
from zkr.store.apply import parse_commit
from zkr.store.records import parse_record, payload_hash, record_identity

# --------------------------------------------------------------------------- §1.6 golden vectors


def reorder(value: Any) -> Any:
    """The same JSON value with every object's keys reversed (what a sorted printer does)."""
    if isinstance(value, dict):
        return {k: reorder(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(v) for v in value]
    return value


@pytest.mark.parametrize(("text", "digest", "identity"), GOLDEN, ids=[g[2][0] for g in GOLDEN])
def test_golden_vectors(text: str, digest: str, identity: tuple[str, str]) -> None:
    record = parse_record(json.loads(text))
    assert canonical(record) == text
    assert payload_hash(record) == digest
    assert record_identity(record) == identity
    # Any key order (a sorted CLI print, reversed objects) parses to the same canonical form.
    assert (
        payload_hash(parse_record(json.loads(json.dumps(json.loads(text), sort_keys=True))))
        == digest
    )
    assert payload_hash(parse_record(reorder(json.loads(text)))) == digest


def test_golden_source_with_reordered_omitted_and_unknown_keys() -> None:
    value = {
        "record": {
            "origin_claim_id": "c1",
            "extra": {"anything": [1.5, True]},
            "source": {
                "recorded_at": 10,
                "content": "Sam works at Acme",
                "id": "s1",
                "kind": "conversation",
                "person_id": "p",
                "tenant_id": "t",
                "revision": 1,
                "captured_at": 10,
                "unknown": None,
            },
            "origin_evidence_id": "e1",
        },
        "kind": "source",
        "version": 3,
    }
    assert payload_hash(parse_record(value)) == GOLDEN[0][1]


def test_golden_claim_with_defaults_omitted() -> None:
    value = json.loads(GOLDEN[2][0])
    body = value["record"]
    del body["valid_time"]["until"], body["recorded_time"]["until"]
    del body["tier"], body["processing_state"]
    assert payload_hash(parse_record(value)) == GOLDEN[2][1]


def test_golden_escaping_vector() -> None:
    content = json.loads(r'''"q\"b\\s/ \b\f\n\r\t \u0000\u001f\u007f é 😀 \u2028 <>&'"''')
    record = feed.source_body(
        id="s9",
        tenant_id="t",
        person_id="p",
        revision=2,
        kind="user_correction",
        content=content,
        captured_at=-1,
        recorded_at=9223372036854775807,
        deleted_at=0,
        ingestion_key="k",
        origin_evidence_id=None,
        origin_claim_id=None,
    )
    text = canonical(parse_record(record))
    assert payload_hash(parse_record(record)) == (
        "sha256:4521ce446dd3b7b378f81f2a8af54de23b383216fe848a9cb366760037492374"
    )
    assert "\x7f" in text and "\u2028" in text and "é" in text and "😀" in text
    assert "\\u0000" in text and "\\u001f" in text and "\\b\\f\\n\\r\\t" in text
    assert '\\"b\\\\s/' in text


# --------------------------------------------------------------------------- §1.3 parse rejections


@pytest.mark.parametrize(
    "value",
    [
        source_record(captured_at=10.0),  # a float, even integral
        source_record(captured_at=1e1),
        source_record(revision=True),  # bool is not an integer
        source_record(captured_at=False),
        source_record(revision=-1),  # negative u64
        source_record(revision=2**64),  # above u64
        source_record(captured_at=2**63),  # above i64
        source_record(captured_at=-(2**63) - 1),
        source_record(captured_at="10"),  # never coerced
        source_record(kind="email"),  # unknown enum variant
        source_record(id=None),  # null for a required string
        link_record(confidence_basis_points=65536),  # u16 overflow
        link_record(confidence_basis_points=-1),
        claim_record(tier=None),  # defaulted only when absent, null is a type error
        claim_record(processing_state="done"),
        {"kind": "embedding", "record": {}},  # unknown kind
        {"kind": "claim"},  # no record
        {"record": json.loads(GOLDEN[2][0])["record"]},  # no kind
        ["claim", {}],
        None,
    ],
    ids=lambda v: json.dumps(v)[:60],
)
def test_parse_rejections(value: Any) -> None:
    with pytest.raises(RequestError):
        parse_record(value)


@pytest.mark.parametrize(
    "drop", ["status", "subject", "kind", "valid_time", "id", "tenant_id"], ids=str
)
def test_parse_missing_required_key(drop: str) -> None:
    record = claim_record()
    del record["record"][drop]
    with pytest.raises(RequestError, match=drop if drop != "kind" else "kind"):
        parse_record(record)


def test_parse_rejects_lone_surrogate_from_library_callers() -> None:
    record = parse_record(source_record(content="bad \ud800 text"))
    with pytest.raises(RequestError, match="surrogate"):
        payload_hash(record)


@pytest.mark.parametrize(
    "text",
    [
        '{"kind":"claim","kind":"claim","record":{}}',  # duplicate key
        '{"kind":"source","record":{"source":{"content":"\\ud800"}}}',  # lone surrogate escape
        '{"kind":"source","record":{"source":{"revision":NaN}}}',
    ],
)
def test_request_decoding_rejects_duplicates_surrogates_nan(text: str) -> None:
    with pytest.raises(RequestError):
        parse_json(text.encode())


def test_parse_keeps_byte_range_for_the_hash() -> None:
    value = json.loads(GOLDEN[1][0])
    value["record"]["evidence"]["byte_range"] = {"end": 4, "start": 0}
    record = parse_record(value)
    assert record["record"]["evidence"]["byte_range"] == {"start": 0, "end": 4}
    assert list(record["record"]["evidence"]["byte_range"]) == ["start", "end"]
    assert payload_hash(record) != GOLDEN[1][1]


@pytest.mark.parametrize(
    "missing", ["sequence", "recorded_at", "event_count", "first_event_index", "records"]
)
def test_commit_requires_all_five_keys(missing: str) -> None:
    commit = {
        "sequence": 1,
        "recorded_at": 1,
        "event_count": 0,
        "first_event_index": 0,
        "records": [],
    }
    del commit[missing]
    with pytest.raises(RequestError, match=missing):
        parse_commit(commit)
