"""``apply``: replays, overlaps, order, rejected batches and the batch internals (spec/sync.md
§4, scenarios 13-20 and 30 of §6; :mod:`zkr.store.apply`, :mod:`zkr.store.apply_batch`)."""

from __future__ import annotations

import copy
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import dump
from tests.sync_support import (
    AUTHORITATIVE,
    A,
    B,
    Commit,
    FixtureP,
    apply,
    count,
    export_all,
    kinds,
    needs_embeddings,
    remember,
    scope_state,
    source_record,
    staged,
)
from zkr import InvalidInput, MemoryDb
from zkr.model import (
    CorrectRequest,
    ProjectionsRequest,
    SearchRequest,
)
from zkr.store.records import parse_record

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
