"""``export`` paging (spec/sync.md §3, scenarios 1-12 of §6; :mod:`zkr.store.export`)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.sync_support import (
    A,
    B,
    count,
    export_all,
    implemented,
    kinds,
    page,
    remember,
    staged,
)
from zkr import InvalidInput, MemoryDb, StorageError, ZkrError
from zkr.model import (
    ClaimKind,
    CorrectRequest,
    DeleteRequest,
    ExportRequest,
    LinkRequest,
    ProfileRequest,
    ProjectionsRequest,
    Relation,
    ReviewRequest,
    Stability,
)
from zkr.store import export, feed, migrations
from zkr.store.db import write_tx

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
