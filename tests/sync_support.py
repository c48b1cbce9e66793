"""Helpers shared by the sync tests (test_records, test_export, test_apply, test_apply_kinds,
test_sync, test_sync_properties): scopes, the library calls as JSON, staging export pages into
complete commits, fixture P of spec/sync.md §6. Its fixtures are registered in conftest.py."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

import pytest

from zkr import MemoryDb
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
    Relation,
    RememberRequest,
    ReviewRequest,
    SourceKind,
    Stability,
    Tier,
)

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


# --------------------------------------------------------------------------- golden records (§1.6)

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
