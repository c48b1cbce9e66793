"""``remember`` and ``locator`` on real files (spec/lifecycle.md §3.1-3.2, §4)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from tests.conftest import P, T, dump, remember
from zkr import InvalidInput, MemoryDb, NotFound, StorageError
from zkr.codec import canonical
from zkr.model import (
    ClaimInput,
    ClaimKind,
    Locator,
    LocatorRequest,
    ProcessingState,
    RememberRequest,
    SourceKind,
    Tier,
)

LOC = Locator("omi-1", "deepgram", "stream", "seg", 1200, 2900)


def events(path: str) -> list[list[dict[str, Any]]]:
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT commit_sequence, payload FROM memory_export_events"
        " ORDER BY commit_sequence, event_index"
    ).fetchall()
    commits: dict[int, list[dict[str, Any]]] = {}
    for sequence, payload in rows:
        commits.setdefault(sequence, []).append(json.loads(payload))
    return list(commits.values())


def test_remember_writes_rows_with_reference_encodings(db: MemoryDb, db_path: str) -> None:
    result = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"), at=10)
    conn = sqlite3.connect(db_path)
    source = conn.execute(
        "SELECT revision, kind, content, captured_at, recorded_at, deleted_at, ingestion_key,"
        " origin_evidence_id, origin_claim_id FROM sources WHERE id = ?",
        (result.source_id,),
    ).fetchone()
    assert source == (
        1,
        '"conversation"',
        "Sam works at Acme",
        10,
        10,
        None,
        None,
        result.evidence_id,
        result.claim_id,
    )
    assert conn.execute("SELECT source_id, content FROM source_fts").fetchall() == [
        (result.source_id, "Sam works at Acme")
    ]
    assert conn.execute(
        "SELECT source_id, source_revision, quote, recorded_at, deleted_at FROM evidence"
    ).fetchall() == [(result.source_id, 1, "Sam works at Acme", 10, None)]
    assert conn.execute(
        "SELECT status, tier, processing_state, kind, valid_from, valid_until, recorded_from,"
        " recorded_until FROM claims"
    ).fetchall() == [("accepted", "long_term", "processed", "fact", 10, None, 10, None)]
    assert conn.execute(
        "SELECT claim_id, evidence_id, relation, confidence_basis_points FROM claim_evidence"
    ).fetchall() == [(result.claim_id, result.evidence_id, '"supports"', 10000)]


def test_feed_records_in_order_and_canonical(db: MemoryDb, db_path: str) -> None:
    """lifecycle.md §4 item 17: event_count 4 with a claim, 2 without."""
    with_claim = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    remember(db, "raw capture " + "x" * 600_000)
    feed = events(db_path)
    assert [[r["kind"] for r in commit] for commit in feed] == [
        ["source", "evidence", "claim", "claim_evidence"],
        ["source", "evidence"],
    ]
    source = feed[0][0]["record"]
    assert source["origin_evidence_id"] == with_claim.evidence_id
    assert source["origin_claim_id"] == with_claim.claim_id
    conn = sqlite3.connect(db_path)
    for (payload,) in conn.execute("SELECT payload FROM memory_export_events"):
        assert canonical(json.loads(payload)) == payload
    commit = conn.execute(
        "SELECT tenant_id, person_id, recorded_at FROM memory_commits ORDER BY sequence"
    ).fetchall()
    assert commit == [(T, P, 10), (T, P, 10)]


def test_ingestion_key_replay_scoped_per_tenant_person(db: MemoryDb, db_path: str) -> None:
    """lifecycle.md §4 item 1."""
    first = remember(db, "Remember once", key="turn-1")
    again = remember(db, "Remember once", key="turn-1")
    assert again == first
    other = remember(db, "Remember once", key="turn-1", t="b")
    assert other.source_id != first.source_id
    assert len(dump(db_path)["sources"]) == 2
    assert len(events(db_path)) == 2


def test_replay_conflicts(db: MemoryDb) -> None:
    """lifecycle.md §4 item 3."""
    remember(db, "Sam works at Acme", key="turn-1")
    conflict = "ingestion_key conflicts with different memory payload"
    with pytest.raises(InvalidInput, match=conflict):
        remember(db, "changed", key="turn-1")
    with pytest.raises(InvalidInput, match=conflict):
        remember(db, "Sam works at Acme", key="turn-1", kind=SourceKind.SCREEN)
    with pytest.raises(InvalidInput, match=conflict):
        remember(db, "Sam works at Acme", key="turn-1", at=11, recorded_at=10)
    with pytest.raises(InvalidInput, match=conflict):
        remember(db, "Sam works at Acme", key="turn-1", claim=("Sam", "employer", "Acme"))
    claimed = remember(db, "Claimed", key="turn-2", claim=("Sam", "employer", "Acme"))
    assert remember(db, "Claimed", key="turn-2", claim=("Sam", "employer", "Acme")) == claimed
    with pytest.raises(InvalidInput, match=conflict):
        remember(db, "Claimed", key="turn-2", claim=("Sam", "employer", "Beta"))
    with pytest.raises(InvalidInput, match=conflict):
        remember(db, "Claimed", key="turn-2")
    # tier and processing_state are not compared (spec/lifecycle.md §5 item 9)
    replay = remember(
        db,
        "Claimed",
        key="turn-2",
        claim=("Sam", "employer", "Acme"),
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.PENDING,
    )
    assert replay == claimed


def test_replay_compares_locator(db: MemoryDb) -> None:
    def req(loc: Locator | None) -> RememberRequest:
        return RememberRequest(T, P, SourceKind.AUDIO, "voice", 10, 10, "k", None, loc)

    first = db.remember(req(LOC))
    assert db.remember(req(LOC)) == first
    with pytest.raises(InvalidInput, match="conflicts"):
        db.remember(req(None))
    with pytest.raises(InvalidInput, match="conflicts"):
        db.remember(req(Locator("omi-1", "deepgram", "stream", "seg", 1200, 2901)))


def test_replay_of_source_without_origin_evidence_is_not_found(db: MemoryDb, db_path: str) -> None:
    remember(db, "legacy", key="k")
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("UPDATE sources SET origin_evidence_id = NULL, origin_claim_id = NULL")
    conn.close()
    with pytest.raises(NotFound):
        remember(db, "legacy", key="k")


@pytest.mark.parametrize(
    ("request_args", "message"),
    [
        ({"text": "  \n"}, "text must not be empty"),
        ({"tenant_id": ""}, "tenant_id must not be empty"),
        ({"person_id": "\u2003"}, "person_id must not be empty"),
        ({"ingestion_key": " "}, "ingestion_key must not be empty"),
        ({"locator": Locator(" ", "p", "s", "g", 1, 2)}, "locator.device_id must not be empty"),
        ({"locator": Locator("d", "", "s", "g", 1, 2)}, "locator.provider must not be empty"),
        ({"locator": Locator("d", "p", "", "g", 1, 2)}, "locator.stream_id must not be empty"),
        ({"locator": Locator("d", "p", "s", "", 1, 2)}, "locator.segment_id must not be empty"),
        (
            {"locator": Locator("d", "p", "s", "g", 3, 2)},
            "locator end_ms must not precede start_ms",
        ),
        (
            {"locator": Locator("d", "p", "s", "g", 1, 2**63)},
            "locator end_ms exceeds the storage range",
        ),
        (
            {"claim": ClaimInput(" ", "p", "v", ClaimKind.FACT, 1)},
            "claim subject must not be empty",
        ),
        (
            {"claim": ClaimInput("s", "", "v", ClaimKind.FACT, 1)},
            "claim predicate must not be empty",
        ),
        ({"claim": ClaimInput("s", "p", "\t", ClaimKind.FACT, 1)}, "claim value must not be empty"),
        (
            {
                "claim": ClaimInput(
                    "s", "p", "v", ClaimKind.FACT, 1, Tier.LONG_TERM, ProcessingState.PENDING
                )
            },
            "illegal memory state combination: tier=long_term, status=accepted, "
            "processing_state=pending",
        ),
        (
            {
                "claim": ClaimInput(
                    "s", "p", "v", ClaimKind.FACT, 1, Tier.ARCHIVE, ProcessingState.BLOCKED
                )
            },
            "illegal memory state combination: tier=archive, status=accepted, "
            "processing_state=blocked",
        ),
    ],
)
def test_validation_errors_leave_the_database_unchanged(
    db: MemoryDb, db_path: str, request_args: dict[str, Any], message: str
) -> None:
    remember(db, "existing memory", claim=("Sam", "employer", "Acme"))
    before = dump(db_path)
    base: dict[str, Any] = {
        "tenant_id": T,
        "person_id": P,
        "kind": SourceKind.CONVERSATION,
        "text": "hello",
        "captured_at": 10,
        "recorded_at": 10,
    }
    base.update(request_args)
    with pytest.raises(InvalidInput) as caught:
        db.remember(RememberRequest(**base))
    assert str(caught.value) == message
    assert dump(db_path) == before


def test_oversized_record_rolls_back_everything(db: MemoryDb, db_path: str) -> None:
    """lifecycle.md §4 item 14: nothing survives a failed remember (no FTS row either)."""
    with pytest.raises(StorageError, match="export record exceeds 1048576 bytes"):
        remember(db, "x" * 1_048_576)
    tables = dump(db_path)
    for table in (
        "sources",
        "evidence",
        "claims",
        "memory_commits",
        "memory_export_events",
        "source_fts",
        "evidence_locators",
        "claim_evidence",
    ):
        assert tables[table] == [], table
    # the escaped JSON form counts: 400k "a\n" pairs become 1.2 MB of "a\\n"
    with pytest.raises(StorageError, match="export record exceeds"):
        remember(db, "a\n" * 400_000)
    assert dump(db_path)["sources"] == []


def test_point_locator_roundtrip_and_tombstone_hides_it(db: MemoryDb) -> None:
    """lifecycle.md §4 item 18; locator never fails with not found."""
    point = Locator("d", "p", "s", "g", 1000, 1000)
    result = db.remember(RememberRequest(T, P, SourceKind.AUDIO, "tick", 1, 1, None, None, point))
    assert db.locator(LocatorRequest(T, P, result.evidence_id)) == point
    assert db.locator(LocatorRequest("other", P, result.evidence_id)) is None
    assert db.locator(LocatorRequest(T, P, "missing")) is None
    plain = remember(db, "no locator")
    assert db.locator(LocatorRequest(T, P, plain.evidence_id)) is None


def test_locator_json_is_in_field_order_in_the_feed(db: MemoryDb, db_path: str) -> None:
    db.remember(RememberRequest(T, P, SourceKind.AUDIO, "voice", 1, 1, None, None, LOC))
    payload = (
        sqlite3.connect(db_path)
        .execute("SELECT payload FROM memory_export_events WHERE event_index = 1")
        .fetchone()[0]
    )
    assert (
        '"locator":{"device_id":"omi-1","provider":"deepgram","stream_id":"stream",'
        '"segment_id":"seg","start_ms":1200,"end_ms":2900}' in payload
    )


def test_claim_in_archive_tier_directly(db: MemoryDb) -> None:
    """remember may create an archived claim (spec/lifecycle.md §5 item 31: kept)."""
    result = remember(db, "old news", claim=("x", "y", "z"), tier=Tier.ARCHIVE)
    assert result.claim_id is not None


def test_short_term_pending_claim_is_legal(db: MemoryDb) -> None:
    result = remember(
        db,
        "maybe",
        claim=("x", "y", "z"),
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.BLOCKED,
    )
    assert result.claim_id is not None
