"""The commit feed: record hashing, ``export`` paging and ``apply`` (spec/sync.md).

Scenario numbers refer to spec/sync.md §6. Fixture P is built through the library API in two
scopes (a/sam exported, b/sam written last); replicas are fresh files in ``tmp_path``.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO, SHARED, cli, dump, sam_acme
from zkr import InvalidInput, MemoryDb, RequestError, StorageError, ZkrError
from zkr.codec import canonical, parse_json
from zkr.model import (
    ApplyRequest,
    ClaimInput,
    ClaimKind,
    ClaimTierRequest,
    CorrectRequest,
    DeleteRequest,
    ExportRequest,
    LinkRequest,
    Locator,
    ProfileRequest,
    ProjectionsRequest,
    Relation,
    RememberRequest,
    ReviewRequest,
    SearchRequest,
    SourceKind,
    Stability,
    Tier,
)
from zkr.store import export, feed, migrations
from zkr.store.apply import parse_commit
from zkr.store.db import write_tx
from zkr.store.records import parse_record, payload_hash, record_identity

A = ("a", "sam")
B = ("b", "sam")
Commit = dict[str, Any]


# --------------------------------------------------------------------------- helpers


def remember(
    db: MemoryDb,
    text: str,
    *,
    scope: tuple[str, str] = A,
    at: int = 10,
    claim: tuple[str, str, str] | None = None,
    claim_kind: ClaimKind = ClaimKind.FACT,
    tier: Tier = Tier.LONG_TERM,
    locator: Locator | None = None,
    key: str | None = None,
) -> Any:
    return db.remember(
        RememberRequest(
            *scope,
            kind=SourceKind.CONVERSATION,
            text=text,
            captured_at=at,
            recorded_at=at,
            ingestion_key=key,
            claim=None
            if claim is None
            else ClaimInput(*claim, kind=claim_kind, valid_from=at, tier=tier),
            locator=locator,
        )
    )


def page(db: MemoryDb, scope: tuple[str, str] = A, **kw: Any) -> dict[str, Any]:
    return db.export(
        ExportRequest(*scope, export_format=kw.pop("export_format", 1), **kw)
    ).to_json()


def export_all(db: MemoryDb, scope: tuple[str, str] = A, limit: int = 100) -> list[dict[str, Any]]:
    """Every page from (0, -1), the first page's mark frozen (the host protocol)."""
    pages = [page(db, scope, limit=limit)]
    while not pages[-1]["complete"]:
        last = pages[-1]
        pages.append(
            page(
                db,
                scope,
                after_commit=last["next_after_commit"],
                after_event_index=last["next_after_event_index"],
                high_water_mark=pages[0]["high_water_mark"],
                limit=limit,
            )
        )
    return pages


def staged(pages: list[dict[str, Any]]) -> list[Commit]:
    """Complete commits from pages (spec/sync.md §5 step 3, checked strictly)."""
    commits: dict[int, Commit] = {}
    for p in pages:
        for c in p["commits"]:
            entry = commits.setdefault(
                c["sequence"],
                {
                    "sequence": c["sequence"],
                    "recorded_at": c["recorded_at"],
                    "event_count": c["event_count"],
                    "first_event_index": 0,
                    "records": [None] * c["event_count"],
                },
            )
            assert entry["event_count"] == c["event_count"]
            for offset, record in enumerate(c["records"]):
                index = c["first_event_index"] + offset
                assert entry["records"][index] is None
                entry["records"][index] = record
    out = [commits[s] for s in sorted(commits)]
    assert all(None not in c["records"] for c in out)
    return out


def apply(
    db: MemoryDb,
    commits: list[Commit],
    scope: tuple[str, str] = A,
    *,
    export_format: int = 1,
    version: int | None = 10,
) -> dict[str, int]:
    return db.apply(ApplyRequest(*scope, export_format, version, commits)).to_json()


AUTHORITATIVE = {
    "sources": "SELECT * FROM sources",
    "evidence": "SELECT * FROM evidence",
    "evidence_locators": "SELECT * FROM evidence_locators",
    "claims": "SELECT * FROM claims",
    "claim_evidence": "SELECT * FROM claim_evidence",
    "corrections": "SELECT * FROM corrections",
    "profile_entries": "SELECT * FROM profile_entries",
    "daily_reviews": "SELECT * FROM daily_reviews",
    "source_fts": "SELECT source_id, tenant_id, person_id, content FROM source_fts",
}


def scope_state(path: str, scope: tuple[str, str] = A) -> dict[str, list[tuple[Any, ...]]]:
    """Every authoritative row of one scope (and its full-text rows), sorted."""
    conn = sqlite3.connect(path)
    try:
        return {
            table: sorted(
                (
                    tuple(row)
                    for row in conn.execute(
                        f"SELECT * FROM ({sql}) WHERE tenant_id = ? AND person_id = ?", scope
                    )
                ),
                key=repr,
            )
            for table, sql in AUTHORITATIVE.items()
        }
    finally:
        conn.close()


def count(path: str, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def kinds(commit: Commit) -> list[str]:
    return [r["kind"] for r in commit["records"]]


def implemented(module: str, name: str) -> bool:
    """Lifecycle/embedding modules land separately; their placeholders raise on access."""
    try:
        getattr(importlib.import_module(f"zkr.store.{module}"), name)
    except (NotImplementedError, AttributeError):
        return False
    return True


needs_embeddings = pytest.mark.skipif(
    not implemented("embeddings", "projections"), reason="embeddings not implemented yet"
)


# --------------------------------------------------------------------------- fixture P


@dataclass
class FixtureP:
    path: str
    employer: Any
    city: Any
    language: Any
    habit: Any
    correction: Any
    locator: Locator


def build_p(path: str) -> FixtureP:
    """spec/sync.md §6, "Fixture P"."""
    loc = Locator("omi-1", "deepgram", "stream-1", "segment-4", 10, 20)
    with MemoryDb.open(path) as db:
        employer = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"), locator=loc)
        city = remember(
            db,
            "Sam lives in Berlin",
            claim=("Sam", "city", "Berlin"),
            claim_kind=ClaimKind.PROFILE_FACT,
        )
        db.profile(ProfileRequest(*A, Stability.CURRENT, city.claim_id, 12))
        db.review(ReviewRequest(*A, "2026-07-21", "Sam works at Acme", [employer.evidence_id], 13))
        language = remember(
            db,
            "Sam speaks Portuguese",
            claim=("Sam", "language", "Portuguese"),
            claim_kind=ClaimKind.PROFILE_FACT,
        )
        db.profile(ProfileRequest(*A, Stability.STABLE, language.claim_id, 12))
        habit = remember(
            db, "Sam started running", claim=("Sam", "habit", "running"), tier=Tier.SHORT_TERM
        )
        db.promote(ClaimTierRequest(*A, habit.claim_id, 14))
        db.link(LinkRequest(*A, employer.claim_id, city.evidence_id, Relation.CONTRADICTS, 5000))
        correction = db.correct(
            CorrectRequest(*A, employer.claim_id, "Sam works at Globex", "Globex", 20, 20)
        )
        db.delete(DeleteRequest(*A, city.source_id, 30))
        remember(db, "Another tenant entirely", scope=B)
    return FixtureP(path, employer, city, language, habit, correction, loc)


@pytest.fixture
def fixture_p(tmp_path: Path) -> FixtureP:
    return build_p(str(tmp_path / "origin.db"))


@pytest.fixture
def p_commits(fixture_p: FixtureP) -> list[Commit]:
    with MemoryDb.open(fixture_p.path) as db:
        return staged(export_all(db, limit=3))


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[tuple[str, MemoryDb]]:
    path = str(tmp_path / "replica.db")
    with MemoryDb.open(path) as db:
        yield path, db


# --------------------------------------------------------------------------- §1.6 golden vectors

GOLDEN = [
    (
        '{"kind":"source","record":{"source":{"id":"s1","tenant_id":"t","person_id":"p","revision":1,"kind":"conversation","content":"Sam works at Acme","captured_at":10,"recorded_at":10,"deleted_at":null},"ingestion_key":null,"origin_evidence_id":"e1","origin_claim_id":"c1"}}',  # noqa: E501
        "sha256:a9b41e717fc6f82ef905ab1490a43ab4c57ca2584b053c4d90a6ecf3e30dfe91",
        ("source", "s1"),
    ),
    (
        '{"kind":"evidence","record":{"evidence":{"id":"e1","tenant_id":"t","person_id":"p","source_id":"s1","source_revision":1,"quote":"Sam works at Acme","byte_range":null,"recorded_at":10},"locator":{"device_id":"device","provider":"provider","stream_id":"stream","segment_id":"segment","start_ms":10,"end_ms":20},"deleted_at":null}}',  # noqa: E501
        "sha256:51e605d18ea1fd414129fcc9e8e2c3321eab7d260359ad3a9c01f94a959ab799",
        ("evidence", "e1"),
    ),
    (
        '{"kind":"claim","record":{"id":"c1","tenant_id":"t","person_id":"p","subject":"Sam","predicate":"employer","value":"Acme","kind":"fact","valid_time":{"from":10,"until":null},"recorded_time":{"from":10,"until":null},"status":"accepted","tier":"long_term","processing_state":"processed"}}',
        "sha256:a7362bab9bb0bf950a396bc0c0bef1142c53446d2fce372ca1c48cc1926a06db",
        ("claim", "c1"),
    ),
    (
        '{"kind":"claim_evidence","record":{"tenant_id":"t","person_id":"p","claim_id":"c1","evidence_id":"e1","relation":"supports","confidence_basis_points":10000}}',
        "sha256:e17c742fcc8e6135ff1274e6fbf76172030ebf8fcde4bfbb79eaea18a9d2b840",
        ("claim_evidence", "c1/e1"),
    ),
    (
        '{"kind":"correction","record":{"tenant_id":"t","person_id":"p","superseded_claim_id":"c1","claim_id":"c2","source_id":"s2","evidence_id":"e2","valid_at":20,"recorded_at":21}}',
        "sha256:e1204d99dbfa36b4028a675639c34a5db209348da4df42fa836fedd1ed53cadb",
        ("correction", "c1/c2"),
    ),
    (
        '{"kind":"deletion","record":{"tenant_id":"t","person_id":"p","target":{"kind":"profile_entry","id":"pe1"},"deleted_at":30}}',
        "sha256:e35343d13c5d29ef5c9ab94f616ce06ab15b406bff73af67b1ef8e5e02c69551",
        ("deletion", "profile_entry:pe1"),
    ),
    (
        '{"kind":"profile","record":{"id":"pe1","tenant_id":"t","person_id":"p","key":"city","value":"Berlin","stability":"current","claim_id":"c3","recorded_at":12}}',
        "sha256:1d6036d5c998b3f4e64097d9a87843657b530605afb56e7754de7a769b7d1e79",
        ("profile", "pe1"),
    ),
    (
        '{"kind":"daily_review","record":{"id":"r1","tenant_id":"t","person_id":"p","day":"2026-07-21","summary":"Sam works at Acme","evidence_ids":["e1","e2"],"recorded_at":13}}',  # noqa: E501
        "sha256:495ab77dda67a0531548ecce0c6a2fe3db02b62b11969062f709dd0ef2c0bf36",
        ("daily_review", "r1"),
    ),
]


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


def claim_record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(GOLDEN[2][0])
    record["record"].update(changes)
    return record


def link_record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(GOLDEN[3][0])
    record["record"].update(changes)
    return record


def source_record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(GOLDEN[0][0])
    record["record"]["source"].update(changes)
    return record


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


# --------------------------------------------------------------------------- §3 export


def test_export_empty_scope(db: MemoryDb) -> None:
    assert page(db) == {
        "export_format": 1,
        "database_schema_version": 10,
        "high_water_mark": 0,
        "next_after_commit": 0,
        "next_after_event_index": -1,
        "complete": True,
        "commits": [],
    }
    assert export.SCHEMA_VERSION == migrations.CURRENT_VERSION


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"tenant_id": " \u3000"}, "tenant_id must not be empty"),
        ({"person_id": ""}, "person_id must not be empty"),
        ({"tenant_id": "", "export_format": 2}, "tenant_id must not be empty"),
        ({"export_format": 2}, "unsupported export_format 2; expected 1"),
        ({"export_format": 2, "after_commit": -1}, "unsupported export_format 2; expected 1"),
        ({"after_commit": -1}, "after_commit must not be negative"),
        ({"after_commit": -1, "after_event_index": -5}, "after_commit must not be negative"),
        ({"after_commit": 1, "after_event_index": -2}, "after_event_index must be at least -1"),
        ({"after_event_index": 0}, "the initial cursor must use after_event_index -1"),
        (
            {"after_commit": 1, "high_water_mark": 0},
            "high_water_mark must not precede after_commit",
        ),
        ({"high_water_mark": -1}, "high_water_mark must not precede after_commit"),
        ({"high_water_mark": 3}, "high_water_mark exceeds the current scoped maximum"),
        ({"after_commit": 2}, "after_commit is not in scope"),  # scope b's commit
        ({"after_commit": 99}, "after_commit is not in scope"),
        (
            {"after_commit": 1, "after_event_index": 4},
            "after_event_index exceeds the commit event count",
        ),
    ],
)
def test_export_validation_order(
    db: MemoryDb, request_fields: dict[str, Any], message: str
) -> None:
    remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))  # sequence 1, 4 events
    remember(db, "Other tenant", scope=B)  # sequence 2
    fields: dict[str, Any] = {"tenant_id": "a", "person_id": "sam", "export_format": 1}
    fields.update(request_fields)
    with pytest.raises(InvalidInput) as err:
        db.export(ExportRequest(**fields))
    assert str(err.value) == message


def test_export_cursor_forms(db: MemoryDb) -> None:
    remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    last = page(db, after_commit=1, after_event_index=3)
    assert (
        last["commits"],
        last["complete"],
        last["next_after_commit"],
        last["next_after_event_index"],
    ) == (
        [],
        True,
        1,
        3,
    )
    middle = page(db, after_commit=1, after_event_index=1)
    assert [(c["first_event_index"], kinds(c)) for c in middle["commits"]] == [
        (2, ["claim", "claim_evidence"])
    ]
    assert (middle["next_after_commit"], middle["next_after_event_index"]) == (1, 3)
    # (N, -1) re-reads commit N from its start.
    again = page(db, after_commit=1, after_event_index=-1)
    assert again["commits"] == page(db)["commits"]


def test_export_limit_is_bounded(db: MemoryDb) -> None:
    for i in range(30):
        remember(db, f"note {i}", claim=("Sam", f"n{i}", str(i)), at=10 + i)  # 4 events each
    assert sum(len(c["records"]) for c in page(db, limit=0)["commits"]) == 10
    big = page(db, limit=1000)
    assert sum(len(c["records"]) for c in big["commits"]) == 100
    assert not big["complete"]
    assert (big["next_after_commit"], big["next_after_event_index"]) == (25, 3)
    rest = page(db, after_commit=25, after_event_index=3, high_water_mark=30, limit=100)
    assert rest["complete"] and len(rest["commits"]) == 5


def test_scenario_1_frozen_mark_and_scope_filtering(db: MemoryDb) -> None:
    remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    remember(db, "B's note", scope=B, claim=("B", "x", "y"))
    first = page(db, limit=2)
    assert [len(c["records"]) for c in first["commits"]] == [2]
    assert first["commits"][0]["event_count"] == 4 and not first["complete"]
    remember(db, "Written while paging", at=11)
    second = page(
        db,
        after_commit=first["next_after_commit"],
        after_event_index=first["next_after_event_index"],
        high_water_mark=first["high_water_mark"],
        limit=2,
    )
    assert second["complete"] and second["high_water_mark"] == first["high_water_mark"] == 1
    assert [(c["sequence"], c["first_event_index"], kinds(c)) for c in second["commits"]] == [
        (1, 2, ["claim", "claim_evidence"])
    ]
    for p in (first, second):
        for c in p["commits"]:
            assert {feed.record_scope(r) for r in c["records"]} == {A}


def test_scenario_2_empty_database_rejections(db: MemoryDb) -> None:
    with pytest.raises(InvalidInput, match="high_water_mark exceeds"):
        page(db, high_water_mark=1)
    with pytest.raises(InvalidInput, match="unsupported export_format 99; expected 1"):
        page(db, export_format=99)


def test_scenario_3_noop_mutations_leave_the_mark(db: MemoryDb) -> None:
    remember(db, "keyed", key="k")
    mark = page(db)["high_water_mark"]
    remember(db, "keyed", key="k")
    with pytest.raises(ZkrError):
        db.delete(DeleteRequest(*A, "0" * 32, 20))
    assert page(db)["high_water_mark"] == mark


def test_scenario_4_paging_a_correction_and_deletion(db: MemoryDb) -> None:
    first = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    fix = db.correct(CorrectRequest(*A, first.claim_id, "Sam works at Globex", "Globex", 20, 20))
    db.delete(DeleteRequest(*A, fix.source_id, 30))
    pages = export_all(db, limit=2)
    assert all(sum(len(c["records"]) for c in p["commits"]) <= 2 for p in pages)
    records = [r for c in staged(pages) for r in c["records"]]
    assert any(r["kind"] == "correction" for r in records)
    assert {"kind": "source", "id": fix.source_id} in [
        r["record"]["target"] for r in records if r["kind"] == "deletion"
    ]


def test_scenario_5_correction_lineage_triggers(db: MemoryDb, db_path: str) -> None:
    a = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    fix = db.correct(CorrectRequest(*A, a.claim_id, "Sam works at Globex", "Globex", 20, 20))
    other = remember(db, "b claim", scope=B, claim=("B", "x", "y"))
    conn = sqlite3.connect(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="correction scope mismatch"):
            conn.execute(
                "INSERT INTO corrections (tenant_id, person_id, superseded_claim_id, claim_id,"
                " source_id, evidence_id, valid_at, recorded_at) VALUES (?, ?, ?, ?, ?, ?, 1, 1)",
                (*A, other.claim_id, fix.claim_id, fix.source_id, fix.evidence_id),
            )
        with pytest.raises(sqlite3.IntegrityError, match="correction scope mismatch"):
            conn.execute(
                "UPDATE corrections SET superseded_claim_id = ? WHERE claim_id = ?",
                (other.claim_id, fix.claim_id),
            )
    finally:
        conn.close()


def _downgrade_to_v7(path: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM memory_export_events")
    conn.execute("DELETE FROM memory_commits")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()


def test_scenario_6_bootstrap_pages(db_path: str) -> None:
    with MemoryDb.open(db_path) as db:
        remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    _downgrade_to_v7(db_path)
    with MemoryDb.open(db_path) as db:
        first = page(db, limit=2)
        assert [(c["event_count"], len(c["records"])) for c in first["commits"]] == [(4, 2)]
        assert not first["complete"]
        second = page(
            db,
            after_commit=first["next_after_commit"],
            after_event_index=first["next_after_event_index"],
            high_water_mark=first["high_water_mark"],
            limit=2,
        )
        assert second["complete"] and second["commits"][0]["first_event_index"] == 2


def test_scenario_7_bootstrap_refuses_oversized_legacy_record(db_path: str) -> None:
    with MemoryDb.open(db_path) as db:
        made = remember(db, "small")
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE sources SET content = ? WHERE id = ?", ("x" * 1_048_576, made.source_id))
    conn.commit()
    conn.close()
    _downgrade_to_v7(db_path)
    with pytest.raises(ZkrError, match="export compatibility limit"):
        MemoryDb.open(db_path)
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
        assert conn.execute("SELECT COUNT(*) FROM memory_commits").fetchone()[0] == 0
    finally:
        conn.close()


def test_scenario_8_forged_stored_scope(db: MemoryDb, db_path: str) -> None:
    remember(db, "Sam works at Acme")
    conn = sqlite3.connect(db_path)
    conn.execute(
        'UPDATE memory_export_events SET payload = replace(payload, \'"tenant_id":"a"\','
        ' \'"tenant_id":"x"\') WHERE event_index = 0'
    )
    conn.commit()
    conn.close()
    with pytest.raises(ZkrError, match="scope"):
        page(db)


def test_scenario_9_foreign_record_in_a_commit(db: MemoryDb, db_path: str) -> None:
    foreign = feed.profile_body(
        id="pe",
        tenant_id="b",
        person_id="sam",
        key="k",
        value="v",
        stability="current",
        claim_id="c",
        recorded_at=1,
    )
    with pytest.raises(StorageError, match="scope"), write_tx(db.conn):
        feed.append_commit(db.conn, *A, 1, [foreign])
    assert count(db_path, "memory_commits") == 0


def test_scenario_10_oversized_record_rolls_back(db: MemoryDb, db_path: str) -> None:
    with pytest.raises(StorageError, match="export record exceeds 1048576 bytes"):
        remember(db, "x" * 1_048_576)
    for table in ("sources", "evidence", "memory_commits", "memory_export_events", "source_fts"):
        assert count(db_path, table) == 0


def test_scenario_11_byte_budget_splits_a_commit(db: MemoryDb) -> None:
    remember(db, "y" * (600 * 1024))
    first = page(db)
    assert [(c["event_count"], len(c["records"])) for c in first["commits"]] == [(2, 1)]
    assert not first["complete"]
    second = page(
        db,
        after_commit=first["next_after_commit"],
        after_event_index=first["next_after_event_index"],
        high_water_mark=first["high_water_mark"],
    )
    assert [(c["first_event_index"], len(c["records"])) for c in second["commits"]] == [(1, 1)]
    assert second["complete"]


def test_scenario_12_deletion_records(db: MemoryDb) -> None:
    fact = remember(
        db,
        "Sam lives in Berlin",
        claim=("Sam", "city", "Berlin"),
        claim_kind=ClaimKind.PROFILE_FACT,
    )
    other = remember(db, "Berlin again", at=11)
    db.link(LinkRequest(*A, fact.claim_id, other.evidence_id, Relation.SUPPORTS, 9000))
    entry = db.profile(ProfileRequest(*A, Stability.CURRENT, fact.claim_id, 11))
    review = db.review(ReviewRequest(*A, "2026-07-21", "Berlin", [fact.evidence_id], 12)).id
    if implemented("embeddings", "embed"):
        mark = page(db)["high_water_mark"]
        issue = db.projections(ProjectionsRequest(*A, "m", "1", 1))[0].to_json()
        from zkr.model import Distance, EmbeddingInput, EmbedRequest, Normalization, Target

        db.embed(
            EmbedRequest(
                *A,
                Target.from_json(issue["input"]["target"]),
                EmbeddingInput(
                    [1.0], "m", "1", issue["input"]["input_hash"], Normalization.L2, Distance.COSINE
                ),
            )
        )
        assert page(db)["high_water_mark"] == mark
    db.delete(DeleteRequest(*A, fact.source_id, 20))
    db.delete(DeleteRequest(*A, other.source_id, 21))
    records = [r for c in staged(export_all(db)) for r in c["records"]]
    assert any(
        r["kind"] == "claim_evidence" and r["record"]["confidence_basis_points"] == 9000
        for r in records
    )
    assert any(r["kind"] == "profile" for r in records)
    assert any(r["kind"] == "daily_review" for r in records)
    targets = [r["record"]["target"] for r in records if r["kind"] == "deletion"]
    assert {"kind": "profile_entry", "id": entry.id} in targets
    assert {"kind": "daily_review", "id": review} in targets


# --------------------------------------------------------------------------- §4 apply


def test_scenario_13_round_trip(
    fixture_p: FixtureP, p_commits: list[Commit], replica: tuple[str, MemoryDb]
) -> None:
    path, db = replica
    total = sum(len(c["records"]) for c in p_commits)
    assert apply(db, p_commits) == {
        "commits_applied": len(p_commits),
        "commits_skipped": 0,
        "records_applied": total,
        "records_skipped": 0,
    }
    origin_state = scope_state(fixture_p.path)
    assert all(origin_state.values()), {k: len(v) for k, v in origin_state.items()}
    assert scope_state(path) == origin_state
    with MemoryDb.open(fixture_p.path) as origin:
        assert export_all(db, limit=3) == export_all(origin, limit=3)  # sequences included
        evidence = fixture_p.employer.evidence_id
        from zkr.model import LocatorRequest

        assert db.locator(LocatorRequest(*A, evidence)) == origin.locator(
            LocatorRequest(*A, evidence)
        )
    assert scope_state(path, B) == {table: [] for table in AUTHORITATIVE}
    # Side effects: one ledger row per record, one operation row, no scope-b rows anywhere.
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT COUNT(*) FROM memory_applied_records").fetchone()[0] == total
        assert conn.execute(
            "SELECT operation_type, status, target_kind, target_id FROM memory_operations"
        ).fetchall() == [("apply", "success", None, None)]
        reasons = {r[0] for r in conn.execute("SELECT reason FROM memory_repair_outbox")}
        assert reasons <= {"apply_sync"}
    finally:
        conn.close()


def test_scenario_14_replays_and_overlaps(
    fixture_p: FixtureP, p_commits: list[Commit], tmp_path: Path
) -> None:
    expected = scope_state(fixture_p.path)
    total = sum(len(c["records"]) for c in p_commits)
    path = str(tmp_path / "r1.db")
    with MemoryDb.open(path) as db:
        apply(db, p_commits)
        before = export_all(db)
        assert apply(db, p_commits) == {
            "commits_applied": 0,
            "commits_skipped": len(p_commits),
            "records_applied": 0,
            "records_skipped": total,
        }
        assert scope_state(path) == expected and export_all(db) == before
    path2 = str(tmp_path / "r2.db")
    half = len(p_commits) // 2
    with MemoryDb.open(path2) as db:
        apply(db, p_commits[:half])
        second = apply(db, p_commits)
        assert second["commits_skipped"] == half
        assert second["commits_applied"] == len(p_commits) - half
        assert apply(db, p_commits[half:])["records_applied"] == 0
        assert scope_state(path2) == expected


def test_scenario_15_record_order_inside_commits(
    fixture_p: FixtureP, p_commits: list[Commit], replica: tuple[str, MemoryDb]
) -> None:
    path, db = replica
    reversed_commits = [{**c, "records": c["records"][::-1]} for c in p_commits]
    apply(db, reversed_commits)
    assert scope_state(path) == scope_state(fixture_p.path)


def test_scenario_16_locator_conflict(
    fixture_p: FixtureP, p_commits: list[Commit], replica: tuple[str, MemoryDb]
) -> None:
    path, db = replica
    apply(db, p_commits)
    assert (
        scope_state(path)["evidence_locators"] == scope_state(fixture_p.path)["evidence_locators"]
    )
    first = copy.deepcopy(p_commits[0])
    evidence = next(r for r in first["records"] if r["kind"] == "evidence")
    evidence["record"]["locator"]["start_ms"] = 11
    before = dump(path)
    with pytest.raises(InvalidInput, match="conflicts with the stored transcript locator"):
        apply(db, [first])
    assert dump(path) == before


def test_scenario_17_unknown_references_leave_nothing(
    p_commits: list[Commit], replica: tuple[str, MemoryDb]
) -> None:
    path, db = replica
    links = [c for c in p_commits if set(kinds(c)) == {"claim_evidence"}]
    assert links
    with pytest.raises(InvalidInput, match="unknown"):
        apply(db, links)
    for table in [
        *AUTHORITATIVE,
        "memory_commits",
        "memory_export_events",
        "memory_applied_records",
    ]:
        assert count(path, table) == 0, table


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda cs, r: cs[0].update(first_event_index=1), "partial"),
        (lambda cs, r: cs[0].update(event_count=cs[0]["event_count"] + 1), "declares"),
        (lambda cs, r: cs.reverse(), "ascending"),
        (lambda cs, r: r.update(scope=B), "scope"),
        (lambda cs, r: r.update(export_format=2), "export_format"),
        (lambda cs, r: r.update(version=11), "schema"),
    ],
    ids=["partial", "declares", "ascending", "scope", "format", "schema"],
)
def test_scenario_18_rejected_batches(
    p_commits: list[Commit],
    replica: tuple[str, MemoryDb],
    mutate: Callable[[list[Commit], dict[str, Any]], None],
    message: str,
) -> None:
    path, db = replica
    commits = copy.deepcopy(p_commits)
    options: dict[str, Any] = {"scope": A, "export_format": 1, "version": 10}
    mutate(commits, options)
    before = dump(path)
    with pytest.raises(InvalidInput, match=message):
        apply(
            db,
            commits,
            options["scope"],
            export_format=options["export_format"],
            version=options["version"],
        )
    assert dump(path) == before


def test_scenario_19_conflicting_sources(
    p_commits: list[Commit], replica: tuple[str, MemoryDb]
) -> None:
    path, db = replica
    apply(db, p_commits)
    edited = copy.deepcopy(p_commits)
    for commit in edited:
        for record in commit["records"]:
            if record["kind"] == "source":
                record["record"]["source"]["content"] += " (edited)"
    before = dump(path)
    with pytest.raises(InvalidInput, match="conflicts"):
        apply(db, edited)
    assert dump(path) == before


def test_scenario_20_applied_records_are_searchable(
    p_commits: list[Commit], replica: tuple[str, MemoryDb]
) -> None:
    _, db = replica
    apply(db, p_commits)
    pack = db.search(SearchRequest(*A, "Globex"))
    assert pack.items and all(item.evidence_ids for item in pack.items)


@needs_embeddings
def test_scenario_20_applied_records_have_missing_projections(
    p_commits: list[Commit], replica: tuple[str, MemoryDb]
) -> None:
    _, db = replica
    apply(db, p_commits)
    issues = db.projections(ProjectionsRequest(*A, "unknown/model", "1", 100))
    assert issues and all(issue.state == "missing" for issue in issues)


def test_reference_echo_behaviour_scenario_30(tmp_path: Path) -> None:
    """The library keeps the reference's echo behaviour; the host example avoids it."""
    origin_path, replica_path = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    with MemoryDb.open(origin_path) as a, MemoryDb.open(replica_path) as b:
        first = remember(a, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
        a.correct(CorrectRequest(*A, first.claim_id, "Sam works at Globex", "Globex", 20, 20))
        ours = staged(export_all(a))
        total = sum(len(c["records"]) for c in ours)
        apply(b, ours)
        echo = staged(export_all(b))
        bounced = apply(a, echo)
        assert bounced == {
            "commits_applied": len(echo),
            "commits_skipped": 0,
            "records_applied": total,
            "records_skipped": 0,
        }
        grown = staged(export_all(a))
        assert len(grown) == 2 * len(ours)
        second = apply(b, grown[len(ours) :])
        assert second["records_applied"] == 0 and second["commits_skipped"] == len(ours)


def test_echo_with_a_deletion_fails_every_time(
    fixture_p: FixtureP, p_commits: list[Commit], replica: tuple[str, MemoryDb]
) -> None:
    _, db = replica
    apply(db, p_commits)
    echo = staged(export_all(db))
    before = dump(fixture_p.path)
    with MemoryDb.open(fixture_p.path) as origin:
        for _ in range(2):
            with pytest.raises(InvalidInput, match="cannot revive tombstoned evidence"):
                apply(origin, echo)
    assert dump(fixture_p.path) == before


def test_batch_internals(replica: tuple[str, MemoryDb]) -> None:
    """A record repeated identically later in the batch is a ledger hit; empty batches log."""
    path, db = replica
    src = parse_record(source_record(id="s1", tenant_id="a", person_id="sam"))
    src["record"]["origin_evidence_id"] = src["record"]["origin_claim_id"] = None
    commits = [
        {
            "sequence": 5,
            "recorded_at": 7,
            "event_count": 1,
            "first_event_index": 0,
            "records": [src],
        },
        {
            "sequence": 9,
            "recorded_at": 8,
            "event_count": 2,
            "first_event_index": 0,
            "records": [src, src],
        },
    ]
    assert apply(db, commits) == {
        "commits_applied": 1,
        "commits_skipped": 1,
        "records_applied": 1,
        "records_skipped": 2,
    }
    assert apply(db, []) == dict.fromkeys(
        ("commits_applied", "commits_skipped", "records_applied", "records_skipped"), 0
    )
    assert count(path, "memory_operations") == 2
    (only,) = export_all(db)[0]["commits"]
    assert (only["sequence"], only["recorded_at"], only["event_count"]) == (1, 7, 1)


# --------------------------------------------------------------------------- §4.5 every message


def _src(
    sid: str,
    *,
    revision: int = 1,
    deleted_at: int | None = None,
    content: str = "text",
    origin_e: str | None = None,
    origin_c: str | None = None,
) -> feed.Record:
    return feed.source_body(
        id=sid,
        tenant_id="a",
        person_id="sam",
        revision=revision,
        kind="conversation",
        content=content,
        captured_at=1,
        recorded_at=1,
        deleted_at=deleted_at,
        ingestion_key=None,
        origin_evidence_id=origin_e,
        origin_claim_id=origin_c,
    )


def _ev(
    eid: str,
    sid: str,
    *,
    deleted_at: int | None = None,
    locator: Locator | None = None,
    quote: str = "text",
) -> feed.Record:
    return feed.evidence_body(
        id=eid,
        tenant_id="a",
        person_id="sam",
        source_id=sid,
        source_revision=1,
        quote=quote,
        recorded_at=1,
        locator=locator,
        deleted_at=deleted_at,
    )


def _claim(
    cid: str,
    *,
    value: str = "v",
    kind: str = "fact",
    predicate: str = "p",
    status: str = "accepted",
    tier: str = "long_term",
    state: str = "processed",
    valid: tuple[int, int | None] = (1, None),
    recorded: tuple[int, int | None] = (1, None),
) -> feed.Record:
    return feed.claim_body(
        id=cid,
        tenant_id="a",
        person_id="sam",
        subject="Sam",
        predicate=predicate,
        value=value,
        kind=kind,
        valid_from=valid[0],
        valid_until=valid[1],
        recorded_from=recorded[0],
        recorded_until=recorded[1],
        status=status,
        tier=tier,
        processing_state=state,
    )


def _link(cid: str, eid: str, relation: str = "supports", confidence: int = 10000) -> feed.Record:
    return feed.claim_evidence_body("a", "sam", cid, eid, relation, confidence)


def _del(kind: str, target: str, at: int = 5) -> feed.Record:
    return feed.deletion_body("a", "sam", kind, target, at)


def _commit(sequence: int, *records: feed.Record) -> Commit:
    return {
        "sequence": sequence,
        "recorded_at": 1,
        "event_count": len(records),
        "first_event_index": 0,
        "records": list(records),
    }


LOC = Locator("d", "p", "s", "g", 1, 2)

BASE = [
    _commit(
        1,
        _src("s1", origin_e="e1", origin_c="c1"),
        _ev("e1", "s1", locator=LOC),
        _claim("c1"),
        _link("c1", "e1"),
    ),
    _commit(2, _src("s2"), _ev("e2", "s2"), _claim("pc", kind="profile_fact", predicate="city")),
    _commit(3, _src("s3", revision=2, deleted_at=4), _ev("e3", "s3", deleted_at=4)),
    _commit(
        4,
        feed.review_body(
            id="r1",
            tenant_id="a",
            person_id="sam",
            day="d",
            summary="s",
            evidence_ids=["e1"],
            recorded_at=1,
        ),
        _src("s4", origin_e="e4", origin_c="c4"),
        _ev("e4", "s4"),
        _claim("c4", valid=(2, None), recorded=(2, None)),
        feed.correction_body("a", "sam", "c1", "c4", "s4", "e4", 2, 2),
    ),
]

FRESH = _commit(10, _src("new"))  # a valid commit ahead of each failing one: it must roll back

ERRORS: list[tuple[str, list[Commit], str]] = [
    (
        "source payload",
        [_commit(11, _src("s1", content="other", origin_e="e1", origin_c="c1"))],
        "applied source s1 conflicts with the stored source payload",
    ),
    (
        "deletion state",
        [_commit(11, _src("s3", revision=2, deleted_at=9))],
        "applied source s3 conflicts with the stored deletion state",
    ),
    (
        "source revival",
        [_commit(11, _src("s3", revision=3))],
        "applied source s3 cannot revive a tombstoned source",
    ),
    (
        "origin evidence",
        [_commit(11, _src("s9", origin_e="nope"))],
        "applied record references unknown evidence nope",
    ),
    (
        "origin claim",
        [_commit(11, _src("s9", origin_c="nope"))],
        "applied record references unknown claim nope",
    ),
    (
        "byte_range",
        [
            _commit(
                11,
                {
                    **_ev("e9", "s1"),
                    "record": {
                        **_ev("e9", "s1")["record"],
                        "evidence": {
                            **_ev("e9", "s1")["record"]["evidence"],
                            "byte_range": {"start": 0, "end": 1},
                        },
                    },
                },
            )
        ],
        "applied evidence e9 carries an unsupported byte_range",
    ),
    (
        "locator blank",
        [_commit(11, _ev("e9", "s1", locator=Locator(" ", "p", "s", "g", 1, 2)))],
        "locator.device_id must not be empty",
    ),
    (
        "locator provider",
        [_commit(11, _ev("e9", "s1", locator=Locator("d", "", "s", "g", 1, 2)))],
        "locator.provider must not be empty",
    ),
    (
        "locator stream",
        [_commit(11, _ev("e9", "s1", locator=Locator("d", "p", "", "g", 1, 2)))],
        "locator.stream_id must not be empty",
    ),
    (
        "locator segment",
        [_commit(11, _ev("e9", "s1", locator=Locator("d", "p", "s", "", 1, 2)))],
        "locator.segment_id must not be empty",
    ),
    (
        "locator order",
        [_commit(11, _ev("e9", "s1", locator=Locator("d", "p", "s", "g", 3, 2)))],
        "locator end_ms must not precede start_ms",
    ),
    (
        "locator range",
        [_commit(11, _ev("e9", "s1", locator=Locator("d", "p", "s", "g", 1, 2**63)))],
        "locator end_ms exceeds the storage range",
    ),
    (
        "unknown source",
        [_commit(11, _ev("e9", "nope"))],
        "applied evidence e9 references unknown source nope",
    ),
    (
        "evidence payload",
        [_commit(11, _ev("e2", "s2", quote="other"))],
        "applied evidence e2 conflicts with the stored evidence payload",
    ),
    (
        "locator conflict",
        [_commit(11, _ev("e1", "s1"))],
        "applied evidence e1 conflicts with the stored transcript locator",
    ),
    (
        "evidence revival",
        [_commit(11, _ev("e3", "s3"))],
        "applied evidence e3 cannot revive tombstoned evidence",
    ),
    (
        "legal state",
        [
            _commit(
                11, _claim("c9", tier="archive", status="superseded", valid=(1, 2), recorded=(1, 2))
            )
        ],
        "illegal memory state combination: tier=archive, status=superseded,"
        " processing_state=processed",
    ),
    (
        "claim payload",
        [_commit(11, _claim("c1", value="other"))],
        "applied claim c1 conflicts with the stored claim payload",
    ),
    (
        "interval insert",
        [_commit(11, _claim("c9", valid=(5, 5)))],
        "applied claim carries an invalid time interval",
    ),
    (
        "interval update",
        [_commit(11, _claim("c1", recorded=(1, 0), status="superseded"))],
        "applied claim carries an invalid time interval",
    ),
    ("claim id blank", [_commit(11, _link(" ", "e1"))], "claim id must not be empty"),
    ("evidence id blank", [_commit(11, _link("c1", ""))], "evidence id must not be empty"),
    (
        "confidence",
        [_commit(11, _link("c1", "e2", confidence=10001))],
        "confidence 10001 must be at most 10000 basis points",
    ),
    (
        "link claim",
        [_commit(11, _link("nope", "e1"))],
        "applied record references unknown claim nope",
    ),
    (
        "link evidence",
        [_commit(11, _link("c1", "nope"))],
        "applied record references unknown evidence nope",
    ),
    (
        "link conflict",
        [_commit(11, _link("c1", "e1", "contradicts"))],
        "applied claim evidence c1/e1 conflicts with the stored link",
    ),
    (
        "profile claim",
        [
            _commit(
                11,
                feed.profile_body(
                    id="pe",
                    tenant_id="a",
                    person_id="sam",
                    key="city",
                    value="v",
                    stability="current",
                    claim_id="nope",
                    recorded_at=1,
                ),
            )
        ],
        "applied record references unknown claim nope",
    ),
    (
        "profile mismatch",
        [
            _commit(
                11,
                feed.profile_body(
                    id="pe",
                    tenant_id="a",
                    person_id="sam",
                    key="city",
                    value="Paris",
                    stability="current",
                    claim_id="pc",
                    recorded_at=1,
                ),
            )
        ],
        "applied profile entry pe does not match its backing claim",
    ),
    (
        "review evidence",
        [
            _commit(
                11,
                feed.review_body(
                    id="r9",
                    tenant_id="a",
                    person_id="sam",
                    day="d",
                    summary="s",
                    evidence_ids=["e1", "nope"],
                    recorded_at=1,
                ),
            )
        ],
        "applied record references unknown evidence nope",
    ),
    (
        "review conflict",
        [
            _commit(
                11,
                feed.review_body(
                    id="r1",
                    tenant_id="a",
                    person_id="sam",
                    day="d",
                    summary="other",
                    evidence_ids=["e1"],
                    recorded_at=1,
                ),
            )
        ],
        "applied daily review r1 conflicts with the stored review",
    ),
    (
        "correction claim",
        [_commit(11, feed.correction_body("a", "sam", "nope", "c4", "s4", "e4", 2, 2))],
        "applied record references unknown claim nope",
    ),
    (
        "correction evidence",
        [_commit(11, feed.correction_body("a", "sam", "c1", "c4", "s4", "nope", 2, 2))],
        "applied record references unknown evidence nope",
    ),
    (
        "correction conflict",
        [_commit(11, feed.correction_body("a", "sam", "c1", "c4", "s4", "e4", 3, 2))],
        "applied correction c1/c4 conflicts with the stored correction",
    ),
    (
        "correction lineage",
        [_commit(11, feed.correction_body("a", "sam", "c4", "c1", "s1", "e2", 3, 3))],
        "applied correction c4/c1 does not match its source lineage",
    ),
    (
        "delete source",
        [_commit(11, _del("source", "nope"))],
        "applied deletion references unknown target source:nope",
    ),
    (
        "delete evidence",
        [_commit(11, _del("evidence", "nope"))],
        "applied record references unknown evidence nope",
    ),
    (
        "delete claim",
        [_commit(11, _del("claim", "nope"))],
        "applied record references unknown claim nope",
    ),
    (
        "delete claim interval",
        [_commit(11, _del("claim", "c4", at=2))],
        "applied claim carries an invalid time interval",
    ),
    ("u64 revision", [_commit(11, _src("s9", revision=2**63))], "exceeds the storage range"),
]


@pytest.fixture
def base_replica(replica: tuple[str, MemoryDb]) -> tuple[str, MemoryDb]:
    path, db = replica
    assert apply(db, copy.deepcopy(BASE))["commits_applied"] == len(BASE)
    return path, db


def test_base_state_is_consistent(base_replica: tuple[str, MemoryDb]) -> None:
    _, db = base_replica
    assert apply(db, copy.deepcopy(BASE))["records_applied"] == 0
    assert db.search(SearchRequest(*A, "text")).items


@pytest.mark.parametrize(("name", "commits", "message"), ERRORS, ids=[e[0] for e in ERRORS])
def test_scenario_29_every_apply_error_rolls_back(
    base_replica: tuple[str, MemoryDb], name: str, commits: list[Commit], message: str
) -> None:
    path, db = base_replica
    before = dump(path)
    with pytest.raises(ZkrError) as err:
        apply(db, [copy.deepcopy(FRESH), *copy.deepcopy(commits)])
    assert message in str(err.value)
    assert dump(path) == before


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.update(tenant=" "), "tenant_id must not be empty"),
        (lambda r: r.update(person=""), "person_id must not be empty"),
        (lambda r: r.update(format=0), "unsupported export_format 0; expected 1"),
        (
            lambda r: r.update(version=11),
            "applied records use a schema newer than supported version 10",
        ),
        (
            lambda r: r["commits"][0].update(sequence=0),
            "applied commits must use strictly ascending sequences",
        ),
        (
            lambda r: r["commits"][0].update(first_event_index=2),
            "commit 10 is partial; apply requires event index 0",
        ),
        (
            lambda r: r["commits"][0].update(event_count=3),
            "commit 10 declares 3 events but carries 1",
        ),
        (lambda r: r.update(tenant="b"), "export record scope does not match its commit"),
    ],
)
def test_apply_validation_messages(
    replica: tuple[str, MemoryDb], mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    path, db = replica
    request: dict[str, Any] = {
        "tenant": "a",
        "person": "sam",
        "format": 1,
        "version": 10,
        "commits": [copy.deepcopy(FRESH)],
    }
    mutate(request)
    with pytest.raises(InvalidInput) as err:
        db.apply(
            ApplyRequest(
                request["tenant"],
                request["person"],
                request["format"],
                request["version"],
                request["commits"],
            )
        )
    assert str(err.value) == message
    assert count(path, "memory_operations") == 0


def test_source_revision_rules(base_replica: tuple[str, MemoryDb]) -> None:
    path, db = base_replica
    # A stale revision is accepted and counted, and changes nothing (§7).
    before = scope_state(path)
    assert apply(db, [_commit(20, _src("s3", revision=1))])["records_applied"] == 1
    assert scope_state(path) == before
    # A higher revision tombstones a live source: FTS row gone, repair enqueued.
    apply(db, [_commit(21, _src("s2", revision=2, deleted_at=9))])
    conn = sqlite3.connect(path)
    try:
        assert conn.execute(
            "SELECT revision, deleted_at FROM sources WHERE id = 's2'"
        ).fetchone() == (2, 9)
        assert (
            conn.execute("SELECT COUNT(*) FROM source_fts WHERE source_id = 's2'").fetchone()[0]
            == 0
        )
        assert ("source", "s2", "apply_sync") in conn.execute(
            "SELECT target_kind, target_id, reason FROM memory_repair_outbox"
        ).fetchall()
    finally:
        conn.close()


def test_deletions_apply_without_cascade(base_replica: tuple[str, MemoryDb]) -> None:
    path, db = base_replica
    apply(
        db,
        [
            _commit(
                20,
                _del("source", "s1", at=7),
                _del("claim", "c1", at=7),
                _del("evidence", "e2", at=7),
                _del("daily_review", "r1", at=7),
                _del("profile_entry", "missing", at=7),
            )
        ],
    )
    conn = sqlite3.connect(path)
    try:
        assert conn.execute(
            "SELECT revision, deleted_at FROM sources WHERE id = 's1'"
        ).fetchone() == (1, 7)
        assert conn.execute("SELECT deleted_at FROM evidence WHERE id = 'e1'").fetchone() == (None,)
        assert conn.execute("SELECT deleted_at FROM evidence WHERE id = 'e2'").fetchone() == (7,)
        assert conn.execute(
            "SELECT status, recorded_until FROM claims WHERE id = 'c1'"
        ).fetchone() == ("retracted", 7)
        assert conn.execute("SELECT COUNT(*) FROM daily_reviews").fetchone()[0] == 0
    finally:
        conn.close()


def test_profile_last_writer_wins(base_replica: tuple[str, MemoryDb]) -> None:
    path, db = base_replica
    entry = feed.profile_body(
        id="pe1",
        tenant_id="a",
        person_id="sam",
        key="city",
        value="v",
        stability="current",
        claim_id="pc",
        recorded_at=5,
    )
    other = {**entry, "record": {**entry["record"], "id": "pe2", "recorded_at": 1}}
    apply(db, [_commit(20, entry), _commit(21, other)])
    conn = sqlite3.connect(path)
    try:
        assert conn.execute(
            "SELECT id, stability, recorded_at FROM profile_entries"
        ).fetchall() == [("pe2", '"current"', 1)]
    finally:
        conn.close()


# --------------------------------------------------------------------------- §6 27: cross-checks

SYNC_FIXTURES = SHARED / "fixtures" / "sync"


def _fixture_feed() -> ModuleType:
    """The fixtures' own canonical form and hash (an independent implementation of §1.4-1.5)."""
    spec = importlib.util.spec_from_file_location("sync_fixture_feed", SYNC_FIXTURES / "feed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sync_fixture_feed", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.shared
@pytest.mark.parametrize("name", ["corrections", "deletions"])
def test_scenario_27_reference_pages_apply_here(name: str, replica: tuple[str, MemoryDb]) -> None:
    path, db = replica
    pages = json.loads((SYNC_FIXTURES / name / "pages.json").read_text())
    expected = json.loads((SYNC_FIXTURES / name / "expected.json").read_text())
    scope = (expected["scope"]["tenant_id"], expected["scope"]["person_id"])
    # Hash every reference record the reference's way: our hash must match its ledger.
    records = [r for p in pages for c in p["commits"] for r in c["records"]]
    ours = {(*record_identity(parse_record(r)), payload_hash(parse_record(r))) for r in records}
    assert ours == {tuple(row) for row in expected["ledger"]}
    # Stage and batch them the host's way (the fixtures' own staging), then apply each request.
    requests = _fixture_feed().batches(pages, scope)
    responses = [db.apply(ApplyRequest.from_json(request)).to_json() for request in requests]
    assert responses == [step.get("response", step) for step in expected["apply"]]
    conn = sqlite3.connect(path)
    try:
        stored = [
            row[0]
            for row in conn.execute(
                "SELECT payload FROM memory_export_events ORDER BY commit_sequence, event_index"
            )
        ]
        ledger = set(
            conn.execute("SELECT record_kind, record_id, payload_hash FROM memory_applied_records")
        )
    finally:
        conn.close()
    assert ["sha256:" + hashlib.sha256(s.encode()).hexdigest() for s in stored] == expected[
        "stored_payloads"
    ]
    assert ledger == {tuple(row) for row in expected["ledger"]}


@pytest.mark.shared
def test_scenario_27_our_pages_hash_identically(fixture_p: FixtureP) -> None:
    reference_feed = _fixture_feed()
    conn = sqlite3.connect(fixture_p.path)
    stored = [
        row[0]
        for row in conn.execute(
            "SELECT payload FROM memory_export_events ORDER BY commit_sequence, event_index"
        )
    ]
    conn.close()
    with MemoryDb.open(fixture_p.path) as db:
        printed = json.loads(json.dumps(export_all(db, scope=A, limit=7), sort_keys=True))
        printed += json.loads(json.dumps(export_all(db, scope=B, limit=7), sort_keys=True))
    records = [r for p in printed for c in p["commits"] for r in c["records"]]
    assert len(records) == len(stored)
    by_identity = {}
    for text in stored:
        envelope = json.loads(text)
        assert reference_feed.canonical(envelope).decode() == text  # stored canonically
        by_identity[reference_feed.identity(envelope)] = reference_feed.payload_hash(envelope)
    for record in records:
        parsed = parse_record(record)
        assert payload_hash(parsed) == reference_feed.payload_hash(record)
        assert record_identity(parsed) == reference_feed.identity(record)


# --------------------------------------------------------------------------- §6 21-24, 28: CLI


def test_scenario_21_cli_export(db_path: str) -> None:
    cli(
        db_path,
        "remember",
        sam_acme("a", "sam"),
    ).json()
    result = cli(
        db_path, "export", {"tenant_id": "a", "person_id": "sam", "export_format": 1, "limit": 10}
    )
    out = result.json()
    assert out["complete"] and out["export_format"] == 1
    assert out["high_water_mark"] == out["next_after_commit"]
    assert [kinds(c) for c in out["commits"]] == [["source", "evidence", "claim", "claim_evidence"]]
    # Scenario 28: sorted keys at every level, compact, one trailing newline.
    assert (
        result.stdout
        == json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    )


def test_scenario_22_cli_export_error(db_path: str) -> None:
    result = cli(
        db_path,
        "export",
        {"tenant_id": "a", "person_id": "sam", "export_format": 1, "after_commit": -1},
    )
    assert result.error() == "after_commit must not be negative"


def test_scenario_23_cli_staging_with_a_frozen_mark(db_path: str) -> None:
    made = cli(
        db_path,
        "remember",
        sam_acme("a", "sam"),
    ).json()
    cli(
        db_path,
        "correct",
        {
            "tenant_id": "a",
            "person_id": "sam",
            "claim_id": made["claim_id"],
            "text": "Sam works at Globex",
            "value": "Globex",
            "valid_at": 20,
            "recorded_at": 21,
        },
    ).json()
    host = load_host()
    stager = host.Stager()
    cursor: tuple[int, int] = (0, -1)
    applied: list[tuple[int, int]] = []
    last_commit: Commit | None = None
    mark = None
    while True:
        out = cli(
            db_path,
            "export",
            {
                "tenant_id": "a",
                "person_id": "sam",
                "export_format": 1,
                "after_commit": cursor[0],
                "after_event_index": cursor[1],
                "high_water_mark": mark,
                "limit": 1,
            },
        ).json()
        mark = out["high_water_mark"] if mark is None else mark
        assert out["high_water_mark"] == mark
        for commit in stager.add(out):
            assert len(commit["records"]) == commit["event_count"]
            applied.append((commit["sequence"], commit["event_count"] - 1))
            last_commit = commit
        if out["complete"]:
            break
        cursor = (out["next_after_commit"], out["next_after_event_index"])
    assert applied == [(1, 3), (2, 5)]  # only whole commits move the applied cursor
    assert last_commit is not None and "correction" in kinds(last_commit)


def test_scenario_24_cli_round_trip(tmp_path: Path) -> None:
    origin, copy_path = str(tmp_path / "o.db"), str(tmp_path / "r.db")
    cli(
        origin,
        "remember",
        sam_acme("a", "sam"),
    ).json()
    exported = cli(
        origin, "export", {"tenant_id": "a", "person_id": "sam", "export_format": 1}
    ).json()
    request = {
        "tenant_id": "a",
        "person_id": "sam",
        "export_format": 1,
        "database_schema_version": exported["database_schema_version"],
        "commits": exported["commits"],
    }
    assert cli(copy_path, "apply", request).json() == {
        "commits_applied": 1,
        "commits_skipped": 0,
        "records_applied": 4,
        "records_skipped": 0,
    }
    assert cli(copy_path, "apply", request).json() == {
        "commits_applied": 0,
        "commits_skipped": 1,
        "records_applied": 0,
        "records_skipped": 4,
    }
    again = cli(
        copy_path, "export", {"tenant_id": "a", "person_id": "sam", "export_format": 1}
    ).json()
    assert again["commits"] == exported["commits"]
    found = cli(copy_path, "search", {"tenant_id": "a", "person_id": "sam", "query": "Acme"}).json()
    assert found["items"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"tenant_id":"a","person_id":"sam","export_format":1,"commits":[{"sequence":1,"recorded_at":1,"event_count":1,"first_event_index":0,"records":[{"kind":"claim","kind":"claim","record":{}}]}]}',
        b'{"tenant_id":"a","person_id":"sam","export_format":1,"commits":[{"sequence":1,"recorded_at":1.0,"event_count":0,"first_event_index":0,"records":[]}]}',
        b'{"tenant_id":"a","person_id":"sam","export_format":1,"commits":[{"sequence":true,"recorded_at":1,"event_count":0,"first_event_index":0,"records":[]}]}',
        b'{"tenant_id":"a","person_id":"sam","export_format":1,"commits":[{"sequence":1,"recorded_at":1,"event_count":1,"first_event_index":0,"records":[{"kind":"source","record":{"source":{"id":"\\udc00"}}}]}]}',
    ],
    ids=["duplicate", "float", "bool", "surrogate"],
)
def test_scenario_28_cli_parse_errors_are_one_line(db_path: str, body: bytes) -> None:
    message = cli(db_path, "apply", stdin=body).error()
    assert message and "\n" not in message
    assert not Path(db_path).exists()  # nothing is opened for a request that fails to decode


# --------------------------------------------------------------------------- the host example


def load_host() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_host", REPO / "examples" / "sync_host.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sync_host"] = module
    spec.loader.exec_module(module)
    return module


def test_host_syncs_both_ways_without_echo(fixture_p: FixtureP, tmp_path: Path) -> None:
    host = load_host()
    state = host.SyncState(str(tmp_path / "state.db"))
    other = str(tmp_path / "b.db")
    try:
        with MemoryDb.open(fixture_p.path) as a, MemoryDb.open(other) as b:
            forward = host.sync(a, b, state, *A, page_limit=3)
            back = host.sync(b, a, state, *A, page_limit=3)
            assert forward.counters["commits_applied"] == len(staged(export_all(a)))
            assert back.requests == 0 and back.echo_records_dropped > 0  # nothing bounced
            assert scope_state(other) == scope_state(fixture_p.path)
            # New writes on B flow to A; A's re-export of them does not flow back.
            remember(b, "Written on the replica", at=40)
            assert host.sync(a, b, state, *A).requests == 0
            assert host.sync(b, a, state, *A).counters["records_applied"] == 2
            assert host.sync(a, b, state, *A).counters["records_applied"] == 0
            assert host.sync(b, a, state, *A).requests == 0
            assert scope_state(other) == scope_state(fixture_p.path)
            assert a.search(SearchRequest(*A, "replica")).items
    finally:
        state.close()


def test_host_resumes_from_the_applied_cursor(tmp_path: Path) -> None:
    host = load_host()
    state = host.SyncState(str(tmp_path / "state.db"))
    try:
        with MemoryDb.open(str(tmp_path / "a.db")) as a, MemoryDb.open(str(tmp_path / "b.db")) as b:
            remember(a, "x" * 300_000)  # two ~300 kB records: pages split the commit
            remember(a, "small", at=11)
            first = host.sync(a, b, state, *A, page_limit=1)
            assert first.counters["commits_applied"] == 2
            keys = (os.path.realpath(a.path), os.path.realpath(b.path))
            assert state.cursor(*keys, A) == (2, 1)
            remember(a, "later", at=12)
            second = host.sync(a, b, state, *A, page_limit=1)
            assert second.counters == {
                "commits_applied": 1,
                "commits_skipped": 0,
                "records_applied": 2,
                "records_skipped": 0,
            }
    finally:
        state.close()


def test_host_sends_an_oversized_commit_alone(tmp_path: Path) -> None:
    host = load_host()
    state = host.SyncState(str(tmp_path / "state.db"))
    try:
        with MemoryDb.open(str(tmp_path / "a.db")) as a, MemoryDb.open(str(tmp_path / "b.db")) as b:
            remember(a, "z" * 600_000)  # one commit of ~1.2 MB: the CLI could never apply it
            remember(a, "after it", at=11)
            report = host.sync(a, b, state, *A)
            assert report.oversized_requests == 1 and report.requests == 2
            assert report.counters["records_applied"] == 4
    finally:
        state.close()


def test_host_apply_request_has_no_size_limit(tmp_path: Path) -> None:
    import subprocess

    origin = str(tmp_path / "a.db")
    with MemoryDb.open(origin) as a:
        remember(a, "w" * 600_000)
        commits = staged(export_all(a))
    body = json.dumps(
        {"tenant_id": "a", "person_id": "sam", "export_format": 1, "commits": commits}
    ).encode()
    assert len(body) > 1_048_576
    target = str(tmp_path / "b.db")
    assert "request exceeds 1048576 bytes" in cli(target, "apply", stdin=body).error()
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "sync_host.py"), "apply-request", "--db", target],
        input=body,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "commits_applied": 1,
        "commits_skipped": 0,
        "records_applied": 2,
        "records_skipped": 0,
    }


# --------------------------------------------------------------------------- ids and bulk batches


def test_ids_colliding_with_another_scope_fail(base_replica: tuple[str, MemoryDb]) -> None:
    path, db = base_replica
    before = dump(path)
    taken = feed.source_body(
        id="s1",
        tenant_id="b",
        person_id="sam",
        revision=1,
        kind="conversation",
        content="x",
        captured_at=1,
        recorded_at=1,
        deleted_at=None,
        ingestion_key=None,
        origin_evidence_id=None,
        origin_claim_id=None,
    )
    taken_message = "is refused: its id is already taken in this database"
    with pytest.raises(InvalidInput, match=f"^applied source s1 {taken_message}$"):
        apply(db, [_commit(30, taken)], B)
    assert dump(path) == before
    # A profile id held by scope a: the same refusal (issue 18, fault 3).
    claim = feed.claim_body(
        id="bc",
        tenant_id="b",
        person_id="sam",
        subject="Sam",
        predicate="city",
        value="v",
        kind="profile_fact",
        valid_from=1,
        valid_until=None,
        recorded_from=1,
        recorded_until=None,
        status="accepted",
        tier="long_term",
        processing_state="processed",
    )
    apply(
        db,
        [
            _commit(
                31,
                feed.profile_body(
                    id="pe",
                    tenant_id="a",
                    person_id="sam",
                    key="city",
                    value="v",
                    stability="current",
                    claim_id="pc",
                    recorded_at=1,
                ),
            )
        ],
    )
    entry = feed.profile_body(
        id="pe",
        tenant_id="b",
        person_id="sam",
        key="city",
        value="v",
        stability="current",
        claim_id="bc",
        recorded_at=1,
    )
    before = dump(path)
    with pytest.raises(InvalidInput, match=f"^applied profile pe {taken_message}$"):
        apply(db, [_commit(32, claim, entry)], B)
    assert dump(path) == before


def test_bulk_batch_restores_the_page_cache_setting(replica: tuple[str, MemoryDb]) -> None:
    path, db = replica
    db.conn.execute("PRAGMA cache_size = -3000")
    commits = [_commit(i + 1, _src(f"bulk{i}"), _ev(f"bulk-e{i}", f"bulk{i}")) for i in range(600)]
    assert apply(db, commits)["records_applied"] == 1200
    assert db.conn.execute("PRAGMA cache_size").fetchone()[0] == -3000
    assert count(path, "source_fts") == 600
    # A failing bulk batch restores it too, and leaves nothing behind.
    failing = [
        *[_commit(1000 + i, _src(f"more{i}")) for i in range(1000)],
        _commit(5000, _ev("x", "nope")),
    ]
    with pytest.raises(InvalidInput, match="unknown source nope"):
        apply(db, failing)
    assert db.conn.execute("PRAGMA cache_size").fetchone()[0] == -3000
    assert count(path, "sources") == 600
