"""correct, link, promote, archive and delete on real files (spec/lifecycle.md §2-3, §4).

Scenario numbers refer to spec/lifecycle.md §4. Profile and review scenarios live in
tests/test_profiles.py; random operation sequences in tests/test_lifecycle_properties.py.
The helpers at the top are shared by those two modules.
"""

from __future__ import annotations

import functools
import itertools
import json
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import P, T, cli, dump, remember
from zkr import InvalidInput, MemoryDb, NotFound, StorageError
from zkr.errors import ZkrError
from zkr.model import (
    AsOf,
    ClaimKind,
    ClaimTierRequest,
    CorrectRequest,
    DeleteRequest,
    ExportRequest,
    GetRequest,
    LimitRequest,
    LinkRequest,
    Locator,
    ProcessingState,
    ProfileRequest,
    Relation,
    RememberRequest,
    ReviewRequest,
    SearchRequest,
    SourceKind,
    Stability,
    Status,
    Target,
    TargetKind,
    Tier,
    is_legal_state,
)

# --------------------------------------------------------------------------- helpers


def correct_req(
    claim_id: str,
    *,
    text: str = "Sam moved to Beta",
    value: str = "Beta",
    valid_at: int = 20,
    recorded_at: int = 20,
    t: str = T,
    p: str = P,
) -> CorrectRequest:
    return CorrectRequest(t, p, claim_id, text, value, valid_at, recorded_at)


def delete_req(source_id: str, deleted_at: int, *, t: str = T, p: str = P) -> DeleteRequest:
    return DeleteRequest(t, p, source_id, deleted_at)


def tier_req(claim_id: str, recorded_at: int, *, t: str = T, p: str = P) -> ClaimTierRequest:
    return ClaimTierRequest(t, p, claim_id, recorded_at)


def link_req(
    claim_id: str,
    evidence_id: str,
    relation: Relation = Relation.SUPPORTS,
    points: int = 10_000,
    *,
    t: str = T,
    p: str = P,
) -> LinkRequest:
    return LinkRequest(t, p, claim_id, evidence_id, relation, points)


def profile_req(
    claim_id: str,
    recorded_at: int,
    stability: Stability = Stability.CURRENT,
    *,
    t: str = T,
    p: str = P,
) -> ProfileRequest:
    return ProfileRequest(t, p, stability, claim_id, recorded_at)


def review_req(
    evidence_ids: list[str],
    recorded_at: int,
    *,
    day: str = "2026-07-21",
    summary: str = "A day",
    t: str = T,
    p: str = P,
) -> ReviewRequest:
    return ReviewRequest(t, p, day, summary, evidence_ids, recorded_at)


def limit_req(limit: int = 10, *, t: str = T, p: str = P) -> LimitRequest:
    return LimitRequest(t, p, limit)


def search(
    db: MemoryDb, query: str, as_of: tuple[int, int] | None = None, *, t: str = T, p: str = P
) -> list[dict[str, Any]]:
    pack = db.search(SearchRequest(t, p, query, 10, None, None if as_of is None else AsOf(*as_of)))
    return [item.to_json() for item in pack.items]


def get(db: MemoryDb, kind: TargetKind, target_id: str, *, t: str = T, p: str = P) -> Any:
    return db.get(GetRequest(t, p, Target(kind, target_id))).to_json()


def claim_row(db: MemoryDb, claim_id: str) -> dict[str, Any]:
    cursor = db.conn.execute(
        "SELECT status, tier, processing_state, kind, subject, predicate, value, valid_from,"
        " valid_until, recorded_from, recorded_until FROM claims WHERE id = ?",
        (claim_id,),
    )
    row = cursor.fetchone()
    assert row is not None, claim_id
    return dict(zip([d[0] for d in cursor.description], row, strict=True))


def commits(db: MemoryDb, *, t: str = T, p: str = P) -> list[dict[str, Any]]:
    """The scope's commit feed straight from the tables: sequence, recorded_at, records."""
    out: dict[int, dict[str, Any]] = {}
    for sequence, recorded_at, payload in db.conn.execute(
        "SELECT c.sequence, c.recorded_at, e.payload FROM memory_commits c"
        " JOIN memory_export_events e ON e.commit_sequence = c.sequence"
        " WHERE c.tenant_id = ? AND c.person_id = ? ORDER BY c.sequence, e.event_index",
        (t, p),
    ):
        commit = out.setdefault(
            sequence, {"sequence": sequence, "recorded_at": recorded_at, "records": []}
        )
        commit["records"].append(json.loads(payload))
    return list(out.values())


def kinds(commit: dict[str, Any]) -> list[str]:
    """Record kinds of a commit, deletions written as ``deletion:<target kind>``."""
    return [
        f"deletion:{r['record']['target']['kind']}" if r["kind"] == "deletion" else r["kind"]
        for r in commit["records"]
    ]


def outbox(db: MemoryDb) -> list[tuple[Any, ...]]:
    return db.conn.execute(
        "SELECT target_kind, target_id, reason, created_at, processed_at"
        " FROM memory_repair_outbox ORDER BY rowid"
    ).fetchall()


def operations(db: MemoryDb) -> list[tuple[Any, ...]]:
    return db.conn.execute(
        "SELECT operation_type, status, target_kind, target_id, recorded_at"
        " FROM memory_operations ORDER BY rowid"
    ).fetchall()


def expect_error(
    db: MemoryDb,
    call: Callable[[], object],
    message: str,
    error: type[BaseException] = ZkrError,
) -> None:
    """``call`` fails with exactly ``message`` and leaves every table unchanged."""
    before = dump(db.path)
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message
    assert dump(db.path) == before


def claimed(db: MemoryDb, text: str, spv: tuple[str, str, str], **options: Any) -> Any:
    return remember(db, text, claim=spv, **options)


# --------------------------------------------------------------------------- §4 scenarios 1-4


def test_s01_ingestion_key_replay_is_scoped(db: MemoryDb) -> None:
    first = remember(db, "Sam works at Acme", key="turn-1")
    again = remember(db, "Sam works at Acme", key="turn-1")
    other = remember(db, "Sam works at Acme", key="turn-1", t="b")
    assert (again.source_id, again.evidence_id) == (first.source_id, first.evidence_id)
    assert other.source_id != first.source_id
    rows = db.conn.execute("SELECT COUNT(*) FROM sources WHERE tenant_id = ?", (T,)).fetchone()
    assert rows == (1,)


def test_s02_raw_replay_returns_null_claim_after_link(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"))
    raw = remember(db, "Sam still works at Acme", key="raw-turn", at=11)
    db.link(link_req(c.claim_id, raw.evidence_id, points=8000))
    replay = remember(db, "Sam still works at Acme", key="raw-turn", at=11)
    assert (replay.source_id, replay.evidence_id, replay.claim_id) == (
        raw.source_id,
        raw.evidence_id,
        None,
    )


def test_s03_replay_conflicts(db: MemoryDb) -> None:
    conflict = "ingestion_key conflicts with different memory payload"
    remember(db, "Sam works at Acme", key="turn-1")
    for change in (
        {"text": "Sam works at Beta"},
        {"kind": SourceKind.SCREEN},
        {"at": 11},
        {"claim": ("Sam", "employer", "Acme")},
    ):
        args: dict[str, Any] = {"text": "Sam works at Acme", "key": "turn-1", **change}
        text = args.pop("text")
        expect_error(db, functools.partial(remember, db, text, **args), conflict)
    first = claimed(db, "Sam likes tea", ("Sam", "drink", "tea"), key="claimed")
    same = claimed(db, "Sam likes tea", ("Sam", "drink", "tea"), key="claimed")
    assert same.claim_id == first.claim_id
    expect_error(
        db,
        lambda: claimed(db, "Sam likes tea", ("Sam", "drink", "coffee"), key="claimed"),
        conflict,
    )


def test_s04_replay_after_delete_is_not_found(db: MemoryDb) -> None:
    r = remember(db, "Sam works at Acme", key="turn-1")
    db.delete(delete_req(r.source_id, 20))
    expect_error(db, lambda: remember(db, "Sam works at Acme", key="turn-1"), "record not found")


# --------------------------------------------------------------------------- §4 scenarios 5-9


def test_s05_correct_then_as_of_then_delete_correction(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=0, recorded_at=10)
    remember(db, "Other tenant works at Acme", t="b")
    hits = search(db, "Acme")
    assert [(h["memory"]["kind"], h["evidence_ids"]) for h in hits] == [("claim", [c.evidence_id])]
    fix = db.correct(correct_req(c.claim_id, valid_at=5, recorded_at=20))
    old = claim_row(db, c.claim_id)
    assert (old["status"], old["valid_until"], old["recorded_until"]) == ("superseded", 5, 20)
    # the superseded claim is never live; 'Acme' finds the claim that corrected it
    hits = search(db, "Acme")
    assert [(h["memory"]["id"], h["evidence_ids"]) for h in hits] == [
        (fix.claim_id, [fix.evidence_id])
    ]
    as_of = search(db, "Acme", (4, 15))
    assert [h["excerpt"] for h in as_of] == ["Sam employer Acme"]
    assert search(db, "Beta")[0]["memory"] == {"id": fix.claim_id, "kind": "claim"}
    result = db.delete(delete_req(fix.source_id, 30))
    assert (result.evidence_count, result.claim_count) == (1, 1)
    assert search(db, "Beta") == [] and search(db, "Acme") == []
    assert claim_row(db, c.claim_id)["status"] == "superseded"
    assert claim_row(db, fix.claim_id)["status"] == "retracted"


def test_s06_delete_must_advance_claim_interval(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=10)
    expect_error(
        db,
        lambda: db.delete(delete_req(c.source_id, 10)),
        "deleted_at must advance affected claims' recorded intervals",
        InvalidInput,
    )
    row = claim_row(db, c.claim_id)
    assert (row["status"], row["recorded_until"]) == ("accepted", None)
    assert db.conn.execute("SELECT deleted_at FROM sources").fetchall() == [(None,)]


def _older_support(db: MemoryDb) -> tuple[Any, Any]:
    """Raw memory at 10, claim memory at 20 linked to the older evidence, newer source deleted."""
    raw = remember(db, "Sam said he works at Acme", at=10)
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=20)
    db.link(link_req(c.claim_id, raw.evidence_id))
    assert db.delete(delete_req(c.source_id, 21)).claim_count == 0
    return raw, c


def test_s07_delete_older_source_before_claim_recording_fails(db: MemoryDb) -> None:
    raw, c = _older_support(db)
    expect_error(
        db,
        lambda: db.delete(delete_req(raw.source_id, 15)),
        "deleted_at must advance affected claims' recorded intervals",
    )
    row = claim_row(db, c.claim_id)
    assert (row["status"], row["recorded_from"], row["recorded_until"]) == ("accepted", 20, None)


def test_s08_delete_older_source_retracts(db: MemoryDb) -> None:
    raw, c = _older_support(db)
    result = db.delete(delete_req(raw.source_id, 30))
    assert (result.evidence_count, result.claim_count) == (1, 1)
    row = claim_row(db, c.claim_id)
    assert (row["status"], row["recorded_from"], row["recorded_until"]) == ("retracted", 20, 30)
    assert row["valid_until"] is None  # §5 item 17: only the recorded interval closes
    assert (row["tier"], row["processing_state"]) == ("long_term", "processed")


def _insert_embedding(db: MemoryDb, kind: str, target_id: str, revision: int) -> None:
    db.conn.execute(
        "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
        " dimension, input_hash, normalization, distance, vector, target_revision, created_at)"
        " VALUES (?, ?, ?, ?, 'm', 'v', 2, 'sha256:00', '\"none\"', '\"cosine\"', '[1.0,0.0]',"
        " ?, 0)",
        (T, P, kind, target_id, revision),
    )


def test_s09_delete_leaves_unrelated_embeddings(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"))
    _insert_embedding(db, "claim", c.claim_id, 10)
    db.conn.execute(
        "UPDATE claims SET status = 'retracted', recorded_until = 15 WHERE id = ?", (c.claim_id,)
    )
    raw = remember(db, "Unrelated note", at=16)
    db.delete(delete_req(raw.source_id, 17))
    assert db.conn.execute("SELECT target_id FROM embeddings").fetchall() == [(c.claim_id,)]
    assert [row[:2] for row in outbox(db)] == [
        ("source", raw.source_id),
        ("evidence", raw.evidence_id),
    ]


# --------------------------------------------------------------------------- §4 scenarios 13-20


def _export_mark(db: MemoryDb) -> int:
    return db.export(ExportRequest(T, P, 1, limit=100)).high_water_mark


def test_s13_noops_and_failures_keep_the_high_water_mark(db: MemoryDb) -> None:
    remember(db, "Sam works at Acme", key="turn-1")
    mark = _export_mark(db)
    remember(db, "Sam works at Acme", key="turn-1")
    expect_error(db, lambda: db.delete(delete_req("0" * 32, 20)), "record not found", NotFound)
    assert _export_mark(db) == mark


def test_s14_oversized_record_rolls_back(db: MemoryDb) -> None:
    with pytest.raises(StorageError, match="export record"):
        remember(db, "x" * 1_048_576)
    for table in ("sources", "evidence", "memory_commits", "memory_export_events"):
        assert db.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone() == (0,)


def test_s15_feed_of_correct_then_delete(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"))
    fix = db.correct(correct_req(c.claim_id))
    db.delete(delete_req(fix.source_id, 30))
    feed = commits(db)
    assert [kinds(commit) for commit in feed[1:]] == [
        ["source", "evidence", "claim", "claim", "claim_evidence", "correction"],
        ["source", "deletion:source", "evidence", "deletion:evidence", "claim"],
    ]
    correction = feed[1]["records"][5]["record"]
    assert correction == {
        "tenant_id": T,
        "person_id": P,
        "superseded_claim_id": c.claim_id,
        "claim_id": fix.claim_id,
        "source_id": fix.source_id,
        "evidence_id": fix.evidence_id,
        "valid_at": 20,
        "recorded_at": 20,
    }
    deletion = feed[2]["records"][1]["record"]
    assert deletion == {
        "tenant_id": T,
        "person_id": P,
        "target": {"kind": "source", "id": fix.source_id},
        "deleted_at": 30,
    }
    assert feed[2]["recorded_at"] == 30


def test_s17_event_counts(db: MemoryDb) -> None:
    claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"))
    remember(db, "y" * 600_000, at=11)
    assert [len(commit["records"]) for commit in commits(db)] == [4, 2]


def test_s18_point_locator(db: MemoryDb) -> None:
    from zkr.model import LocatorRequest

    loc = Locator("omi-1", "deepgram", "s", "g", 1000, 1000)
    r = db.remember(RememberRequest(T, P, SourceKind.AUDIO, "hello", 1, 1, locator=loc))
    assert db.locator(LocatorRequest(T, P, r.evidence_id)) == loc


def test_s19_promote_after_recording(db: MemoryDb) -> None:
    c = claimed(db, "Sam started running", ("Sam", "habit", "running"), tier=Tier.SHORT_TERM)
    assert db.promote(tier_req(c.claim_id, 14)).claim_id == c.claim_id
    assert claim_row(db, c.claim_id)["tier"] == "long_term"
    assert outbox(db) == [("claim", c.claim_id, "tier_changed", 14, None)]
    assert operations(db) == [("promote", "success", "claim", c.claim_id, 14)]
    last = commits(db)[-1]
    assert (last["recorded_at"], kinds(last)) == (14, ["claim"])
    assert last["records"][0]["record"]["tier"] == "long_term"


def test_s20_cli_request_over_one_mib(db_path: str) -> None:
    result = cli(db_path, "remember", stdin=b" " * 1_048_577)
    assert result.code != 0 and "request exceeds 1048576 bytes" in result.stderr


# --------------------------------------------------------------------------- §4 scenarios 22-24

REMEMBER_KEYED = {
    "tenant_id": T,
    "person_id": P,
    "kind": "conversation",
    "text": "Sam works at Acme",
    "captured_at": 10,
    "recorded_at": 10,
    "ingestion_key": "turn-1",
}


def test_s22_cli_ingestion_key_lifecycle(db_path: str) -> None:
    first = cli(db_path, "remember", REMEMBER_KEYED)
    second = cli(db_path, "remember", REMEMBER_KEYED)
    assert first.stdout == second.stdout and first.code == 0
    changed = cli(db_path, "remember", {**REMEMBER_KEYED, "text": "Sam works at Beta"})
    assert "ingestion_key conflicts" in changed.error()
    deleted = cli(
        db_path,
        "delete",
        {"tenant_id": T, "person_id": P, "source_id": first.json()["source_id"], "deleted_at": 20},
    )
    assert deleted.json() == {
        "claim_count": 0,
        "evidence_count": 1,
        "source_id": first.json()["source_id"],
    }
    assert cli(db_path, "remember", REMEMBER_KEYED).error() == "record not found"


def test_s23_cli_audio_locator(db_path: str) -> None:
    request = {
        **REMEMBER_KEYED,
        "kind": "audio",
        "locator": {
            "device_id": "omi-1",
            "provider": "deepgram",
            "stream_id": "st",
            "segment_id": "sg",
            "start_ms": 1200,
            "end_ms": 2900,
        },
    }
    first = cli(db_path, "remember", request)
    assert cli(db_path, "remember", request).stdout == first.stdout
    loc = cli(
        db_path,
        "locator",
        {"tenant_id": T, "person_id": P, "evidence_id": first.json()["evidence_id"]},
    ).json()
    assert (loc["device_id"], loc["provider"], loc["start_ms"], loc["end_ms"]) == (
        "omi-1",
        "deepgram",
        1200,
        2900,
    )


def test_s24_cli_export_pages_a_correction_commit_completely(db_path: str) -> None:
    request = {**REMEMBER_KEYED, "recorded_at": 11}
    del request["ingestion_key"]
    request["claim"] = {
        "subject": "Sam",
        "predicate": "employer",
        "value": "Acme",
        "kind": "fact",
        "valid_from": 10,
    }
    c = cli(db_path, "remember", request).json()
    cli(
        db_path,
        "correct",
        {
            "tenant_id": T,
            "person_id": P,
            "claim_id": c["claim_id"],
            "text": "Sam works at Beta",
            "value": "Beta",
            "valid_at": 20,
            "recorded_at": 21,
        },
    ).json()
    cursor = (0, -1)
    staged: dict[int, dict[int, Any]] = {}
    acknowledged: list[int] = []
    while True:
        page = cli(
            db_path,
            "export",
            {
                "tenant_id": T,
                "person_id": P,
                "export_format": 1,
                "after_commit": cursor[0],
                "after_event_index": cursor[1],
                "limit": 1,
            },
        ).json()
        for commit in page["commits"]:
            indexes = staged.setdefault(commit["sequence"], {})
            for offset, record in enumerate(commit["records"]):
                indexes[commit["first_event_index"] + offset] = record
            if len(indexes) == commit["event_count"]:
                acknowledged.append(commit["sequence"])
                assert sorted(indexes) == list(range(commit["event_count"]))
        cursor = (page["next_after_commit"], page["next_after_event_index"])
        if page["complete"]:
            break
    correction_commit = [
        s for s, ev in staged.items() if "correction" in {r["kind"] for r in ev.values()}
    ]
    assert len(correction_commit) == 1 and correction_commit[0] in acknowledged
    assert len(staged[correction_commit[0]]) == 6


# --------------------------------------------------------------------------- §4 scenario 25


def test_s25_repair_drains_lifecycle_outbox(db: MemoryDb) -> None:
    """Repair is another module's; this checks it consumes what lifecycle enqueues."""
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"))
    _insert_embedding(db, "claim", c.claim_id, 10)
    db.correct(correct_req(c.claim_id))
    try:
        processed = db.repair(limit_req(0)).processed
    except NotImplementedError:
        pytest.skip("repair is not implemented yet")
    assert processed == 1
    assert db.conn.execute("SELECT COUNT(*) FROM embeddings").fetchone() == (0,)
    assert db.conn.execute(
        "SELECT COUNT(*) FROM memory_repair_outbox WHERE processed_at IS NULL"
    ).fetchone() == (0,)
    assert db.repair(limit_req()).processed == 0
    assert [op[0] for op in operations(db)] == ["repair", "repair"]


# --------------------------------------------------------------------------- §4 scenarios 26-29


def test_s26_archive_rules(db: MemoryDb) -> None:
    c = claimed(db, "Sam reads daily", ("Sam", "habit", "reading"), at=10)
    expect_error(
        db,
        lambda: db.archive(tier_req(c.claim_id, 9)),
        "archive recorded_at must not predate claim",
    )
    assert db.archive(tier_req(c.claim_id, 11)).claim_id == c.claim_id
    assert claim_row(db, c.claim_id)["tier"] == "archive"
    assert outbox(db) == [("claim", c.claim_id, "tier_changed", 11, None)]
    assert operations(db) == [("archive", "success", "claim", c.claim_id, 11)]
    # Already archived: a silent no-op, even with an early recorded_at (§5 item 3).
    before = dump(db.path)
    assert db.archive(tier_req(c.claim_id, 5)).claim_id == c.claim_id
    assert dump(db.path) == before
    with pytest.raises(NotFound):
        get(db, TargetKind.CLAIM, c.claim_id)
    # Superseded → error; retracted → allowed (§5 item 4).
    s = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=12)
    db.correct(correct_req(s.claim_id))
    expect_error(db, lambda: db.archive(tier_req(s.claim_id, 30)), "archive cannot be superseded")
    r = claimed(db, "Sam owns a bike", ("Sam", "vehicle", "bike"), at=12)
    assert db.delete(delete_req(r.source_id, 13)).claim_count == 1
    assert db.archive(tier_req(r.claim_id, 14)).claim_id == r.claim_id
    row = claim_row(db, r.claim_id)
    assert (row["status"], row["tier"]) == ("retracted", "archive")
    pending = claimed(
        db,
        "Sam might swim",
        ("Sam", "habit", "swim"),
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.PENDING,
    )
    expect_error(
        db,
        lambda: db.archive(tier_req(pending.claim_id, 20)),
        "archive requires processing_state=processed",
    )
    expect_error(
        db, lambda: db.archive(tier_req("0" * 32, 20)), "Query returned no rows", StorageError
    )
    expect_error(db, lambda: db.archive(tier_req(c.claim_id, 20, t="t2")), "Query returned no rows")


def test_s27_promote_error_order(db: MemoryDb) -> None:
    # A retracted pending long-term-illegal claim cannot exist; use combinations that isolate
    # each rule while also failing the later ones where the matrix allows it.
    retracted = claimed(
        db,
        "Sam might swim",
        ("Sam", "habit", "swim"),
        at=10,
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.PENDING,
    )
    db.conn.execute("UPDATE claims SET status = 'retracted' WHERE id = ?", (retracted.claim_id,))
    expect_error(
        db,
        lambda: db.promote(tier_req(retracted.claim_id, 5)),
        "promotion requires an active claim",
    )
    blocked = claimed(
        db,
        "Sam tried yoga",
        ("Sam", "habit", "yoga"),
        at=10,
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.BLOCKED,
    )
    expect_error(
        db,
        lambda: db.promote(tier_req(blocked.claim_id, 5)),
        "promotion requires processing_state=processed",
    )
    long_term = claimed(db, "Sam reads", ("Sam", "habit", "reading"), at=10)
    expect_error(
        db,
        lambda: db.promote(tier_req(long_term.claim_id, 5)),
        "promotion requires tier=short_term",
    )
    short = claimed(db, "Sam runs", ("Sam", "habit", "running"), at=10, tier=Tier.SHORT_TERM)
    expect_error(
        db,
        lambda: db.promote(tier_req(short.claim_id, 9)),
        "promotion recorded_at must not predate claim",
    )
    expect_error(
        db, lambda: db.promote(tier_req("0" * 32, 9)), "Query returned no rows", StorageError
    )
    expect_error(
        db, lambda: db.promote(tier_req(short.claim_id, 9, p="p2")), "Query returned no rows"
    )
    assert db.promote(tier_req(short.claim_id, 10)).claim_id == short.claim_id  # equal is allowed
    expect_error(
        db,
        lambda: db.promote(tier_req(short.claim_id, 11)),
        "promotion requires tier=short_term",
    )


TIERS = list(Tier)
STATES = list(ProcessingState)


@pytest.mark.parametrize(("tier", "state"), list(itertools.product(TIERS, STATES)))
def test_s28_remember_tier_state_pairs(db: MemoryDb, tier: Tier, state: ProcessingState) -> None:
    def call() -> Any:
        return claimed(
            db, "Sam runs", ("Sam", "habit", "running"), tier=tier, processing_state=state
        )

    if is_legal_state(tier, Status.ACCEPTED, state):
        assert claim_row(db, call().claim_id)["tier"] == tier.value
    else:
        expect_error(
            db,
            call,
            f"illegal memory state combination: tier={tier.value}, status=accepted,"
            f" processing_state={state.value}",
            InvalidInput,
        )


def test_s28_pending_without_tier_is_illegal(db_path: str) -> None:
    request = {
        **REMEMBER_KEYED,
        "claim": {
            "subject": "Sam",
            "predicate": "habit",
            "value": "swim",
            "kind": "fact",
            "valid_from": 10,
            "processing_state": "pending",
        },
    }
    assert cli(db_path, "remember", request).error() == (
        "illegal memory state combination: tier=long_term, status=accepted,"
        " processing_state=pending"
    )


def test_s29_correcting_an_archived_claim_trips_the_trigger(db: MemoryDb) -> None:
    c = claimed(db, "Sam reads daily", ("Sam", "habit", "reading"))
    db.archive(tier_req(c.claim_id, 11))
    expect_error(
        db, lambda: db.correct(correct_req(c.claim_id)), "illegal memory state combination"
    )


# --------------------------------------------------------------------------- §4 scenario 31


def test_s31_link_conflict_and_derived_recorded_at(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=10, recorded_at=15)
    raw = remember(db, "Sam left Acme", at=12)
    db.link(link_req(c.claim_id, raw.evidence_id, Relation.CONTRADICTS, 9000))
    last = commits(db)[-1]
    assert last["recorded_at"] == 15  # max(claim.recorded_from 15, evidence.recorded_at 12)
    assert last["records"] == [
        {
            "kind": "claim_evidence",
            "record": {
                "tenant_id": T,
                "person_id": P,
                "claim_id": c.claim_id,
                "evidence_id": raw.evidence_id,
                "relation": "contradicts",
                "confidence_basis_points": 9000,
            },
        }
    ]
    stored = db.conn.execute(
        "SELECT relation, confidence_basis_points FROM claim_evidence WHERE evidence_id = ?",
        (raw.evidence_id,),
    ).fetchone()
    assert stored == ('"contradicts"', 9000)
    before = dump(db.path)
    db.link(link_req(c.claim_id, raw.evidence_id, Relation.CONTRADICTS, 9000))  # identical: no-op
    assert dump(db.path) == before
    conflict = "claim evidence link conflicts with existing payload"
    expect_error(
        db,
        lambda: db.link(link_req(c.claim_id, raw.evidence_id, Relation.SUPPORTS, 9000)),
        conflict,
    )
    expect_error(
        db,
        lambda: db.link(link_req(c.claim_id, raw.evidence_id, Relation.CONTRADICTS, 9001)),
        conflict,
    )
    # A contradicting link neither hides nor retracts the claim.
    assert get(db, TargetKind.CLAIM, c.claim_id)["evidence_ids"] == [c.evidence_id]
    later = remember(db, "Sam joined Beta", at=40)
    db.link(link_req(c.claim_id, later.evidence_id))
    assert commits(db)[-1]["recorded_at"] == 40


# --------------------------------------------------------------------------- correct in detail


def test_correct_writes_and_feed(db: MemoryDb) -> None:
    c = claimed(
        db,
        "Sam runs",
        ("Sam", "habit", "running"),
        at=10,
        claim_kind=ClaimKind.PREFERENCE,
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.BLOCKED,
    )
    fix = db.correct(correct_req(c.claim_id, text="Sam swims", value="swimming", valid_at=15))
    old = claim_row(db, c.claim_id)
    # Old claim: intervals closed, tier and processing_state kept.
    assert (old["status"], old["tier"], old["processing_state"]) == (
        "superseded",
        "short_term",
        "blocked",
    )
    assert (old["valid_until"], old["recorded_until"]) == (15, 20)
    new = claim_row(db, fix.claim_id)
    assert new == {
        "status": "accepted",
        "tier": "long_term",
        "processing_state": "processed",
        "kind": "preference",
        "subject": "Sam",
        "predicate": "habit",
        "value": "swimming",
        "valid_from": 15,
        "valid_until": None,
        "recorded_from": 20,
        "recorded_until": None,
    }
    source = db.conn.execute(
        "SELECT kind, content, captured_at, recorded_at, revision, ingestion_key,"
        " origin_evidence_id, origin_claim_id FROM sources WHERE id = ?",
        (fix.source_id,),
    ).fetchone()
    assert source == (
        '"user_correction"',
        "Sam swims",
        15,
        20,
        1,
        None,
        fix.evidence_id,
        fix.claim_id,
    )
    assert db.conn.execute(
        "SELECT content FROM source_fts WHERE source_id = ?", (fix.source_id,)
    ).fetchall() == [("Sam swims",)]
    assert db.conn.execute(
        "SELECT claim_id, relation, confidence_basis_points FROM claim_evidence"
        " WHERE evidence_id = ?",
        (fix.evidence_id,),
    ).fetchall() == [(fix.claim_id, '"supports"', 10000)]
    assert db.conn.execute(
        "SELECT superseded_claim_id, claim_id, source_id, evidence_id, valid_at, recorded_at"
        " FROM corrections"
    ).fetchall() == [(c.claim_id, fix.claim_id, fix.source_id, fix.evidence_id, 15, 20)]
    assert outbox(db) == [("claim", c.claim_id, "superseded_sync", 20, None)]
    assert operations(db) == []
    last = commits(db)[-1]
    assert last["recorded_at"] == 20
    assert kinds(last) == ["source", "evidence", "claim", "claim", "claim_evidence", "correction"]
    assert last["records"][2]["record"]["status"] == "superseded"
    assert last["records"][2]["record"]["valid_time"] == {"from": 10, "until": 15}
    assert last["records"][3]["record"]["id"] == fix.claim_id
    assert last["records"][0]["record"]["source"]["kind"] == "user_correction"
    # Not idempotent: the old claim is no longer accepted (zkr names its successor).
    expect_error(
        db,
        lambda: db.correct(correct_req(c.claim_id)),
        f"claim {c.claim_id} was superseded by claim {fix.claim_id}; "
        f"the current claim is {fix.claim_id} (correct the current claim)",
        InvalidInput,
    )


def test_correct_keeps_other_links_on_the_old_claim(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"))
    raw = remember(db, "Acme badge photo", at=11)
    db.link(link_req(c.claim_id, raw.evidence_id, points=7000))
    fix = db.correct(correct_req(c.claim_id))
    links = db.conn.execute(
        "SELECT claim_id, evidence_id FROM claim_evidence ORDER BY claim_id = ?", (fix.claim_id,)
    ).fetchall()
    assert (fix.claim_id, raw.evidence_id) not in links  # §5 item 33
    assert len(links) == 3


@pytest.mark.parametrize(("valid_at", "recorded_at"), [(10, 20), (9, 20), (20, 10), (20, 9)])
def test_correct_timestamps_must_advance(db: MemoryDb, valid_at: int, recorded_at: int) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=10)
    expect_error(
        db,
        lambda: db.correct(correct_req(c.claim_id, valid_at=valid_at, recorded_at=recorded_at)),
        "correction timestamps must advance the original valid and recorded intervals",
        InvalidInput,
    )


def test_correct_with_invalid_stored_kind(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"))
    db.conn.execute("UPDATE claims SET kind = 'opinion' WHERE id = ?", (c.claim_id,))
    expect_error(db, lambda: db.correct(correct_req(c.claim_id)), "stored claim kind is invalid")


def test_correct_pending_short_term_claim(db: MemoryDb) -> None:
    c = claimed(
        db,
        "Sam might swim",
        ("Sam", "habit", "swim"),
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.PENDING,
    )
    fix = db.correct(correct_req(c.claim_id, value="run"))
    assert claim_row(db, fix.claim_id)["tier"] == "long_term"


# --------------------------------------------------------------------------- link in detail


def test_link_targets(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"))
    raw = remember(db, "Sam left Acme", at=12)
    foreign = remember(db, "Other tenant", t="t2")
    nf = "record not found"
    for request in (
        link_req("0" * 32, raw.evidence_id),
        link_req(c.claim_id, "0" * 32),
        link_req(c.claim_id, foreign.evidence_id),
        link_req(c.claim_id, raw.evidence_id, t="t2"),
    ):
        expect_error(db, functools.partial(db.link, request), nf, NotFound)
    db.delete(delete_req(raw.source_id, 20))
    expect_error(db, lambda: db.link(link_req(c.claim_id, raw.evidence_id)), nf)
    db.correct(correct_req(c.claim_id, valid_at=21, recorded_at=21))
    other = remember(db, "Sam joined Beta", at=21)
    expect_error(db, lambda: db.link(link_req(c.claim_id, other.evidence_id)), nf)


def test_link_to_archived_and_pending_claims(db: MemoryDb) -> None:
    c = claimed(db, "Sam reads", ("Sam", "habit", "reading"))
    db.archive(tier_req(c.claim_id, 11))
    raw = remember(db, "Book receipt", at=12)
    db.link(link_req(c.claim_id, raw.evidence_id, points=0))
    assert commits(db)[-1]["records"][0]["record"]["confidence_basis_points"] == 0


def test_link_support_keeps_claim_alive_after_delete(db: MemoryDb) -> None:
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=10)
    raw = remember(db, "Acme payslip", at=11)
    db.link(link_req(c.claim_id, raw.evidence_id, points=5000))
    result = db.delete(delete_req(c.source_id, 12))
    assert (result.evidence_count, result.claim_count) == (1, 0)
    assert get(db, TargetKind.CLAIM, c.claim_id)["evidence_ids"] == [raw.evidence_id]
    assert kinds(commits(db)[-1]) == ["source", "deletion:source", "evidence", "deletion:evidence"]


# --------------------------------------------------------------------------- delete in detail


def test_delete_raw_source_rows_and_feed(db: MemoryDb) -> None:
    r = remember(db, "The launch code is marigold", at=10)
    result = db.delete(delete_req(r.source_id, 10))  # equal to recorded_at is allowed
    assert result.to_json() == {"source_id": r.source_id, "evidence_count": 1, "claim_count": 0}
    assert db.conn.execute(
        "SELECT revision, deleted_at, content FROM sources WHERE id = ?", (r.source_id,)
    ).fetchone() == (2, 10, "The launch code is marigold")
    assert db.conn.execute("SELECT COUNT(*) FROM source_fts").fetchone() == (0,)
    assert db.conn.execute("SELECT deleted_at, quote FROM evidence").fetchall() == [
        (10, "The launch code is marigold")
    ]
    assert outbox(db) == [
        ("source", r.source_id, "delete_sync", 10, None),
        ("evidence", r.evidence_id, "delete_sync", 10, None),
    ]
    last = commits(db)[-1]
    assert last["recorded_at"] == 10
    assert kinds(last) == ["source", "deletion:source", "evidence", "deletion:evidence"]
    assert last["records"][0]["record"]["source"]["revision"] == 2
    assert last["records"][0]["record"]["source"]["deleted_at"] == 10
    assert last["records"][2]["record"]["deleted_at"] == 10
    assert search(db, "marigold") == []
    for kind, target in ((TargetKind.SOURCE, r.source_id), (TargetKind.EVIDENCE, r.evidence_id)):
        with pytest.raises(NotFound):
            get(db, kind, target)
    expect_error(db, lambda: db.delete(delete_req(r.source_id, 30)), "record not found")


def test_delete_validation(db: MemoryDb) -> None:
    r = remember(db, "hello", at=10)
    foreign = remember(db, "hello", t="t2")
    expect_error(
        db,
        lambda: db.delete(delete_req(r.source_id, 9)),
        "deleted_at cannot predate source recording",
        InvalidInput,
    )
    expect_error(db, lambda: db.delete(delete_req(foreign.source_id, 20)), "record not found")
    expect_error(db, lambda: db.delete(delete_req("", 20)), "record not found")


def test_delete_cascade_many_claims_with_locator(db: MemoryDb) -> None:
    loc = Locator("omi-1", "deepgram", "s", "g", 5, 9)
    base = db.remember(RememberRequest(T, P, SourceKind.AUDIO, "Sam notes", 10, 10, locator=loc))
    keep = remember(db, "independent support", at=10)
    claims = [
        claimed(db, f"fact {i}", ("Sam", f"p{i}", "v"), at=11, claim_kind=ClaimKind.PROFILE_FACT)
        for i in range(5)
    ]
    for i, c in enumerate(claims):
        db.link(link_req(c.claim_id, base.evidence_id, Relation.SUPPORTS, 100 + i))
        db.delete(delete_req(c.source_id, 12))  # base now supports them alone
    db.link(link_req(claims[0].claim_id, keep.evidence_id))
    for c in claims[:3]:
        db.profile(profile_req(c.claim_id, 13))
    db.review(review_req([keep.evidence_id, base.evidence_id], 14))
    survivor = db.review(review_req([keep.evidence_id], 15, day="2026-07-20")).id
    result = db.delete(delete_req(base.source_id, 20))
    assert (result.evidence_count, result.claim_count) == (1, 4)
    assert claim_row(db, claims[0].claim_id)["status"] == "accepted"
    retracted = sorted(c.claim_id for c in claims[1:])
    for claim_id in retracted:
        assert (claim_row(db, claim_id)["status"], claim_row(db, claim_id)["recorded_until"]) == (
            "retracted",
            20,
        )
    last = commits(db)[-1]
    profile_ids = sorted(
        r["record"]["target"]["id"]
        for r in last["records"]
        if r["kind"] == "deletion" and r["record"]["target"]["kind"] == "profile_entry"
    )
    assert kinds(last) == [
        "source",
        "deletion:source",
        "evidence",
        "deletion:evidence",
        *["claim"] * 4,
        "deletion:profile_entry",
        "deletion:profile_entry",
        "deletion:daily_review",
    ]
    assert [r["record"]["id"] for r in last["records"][4:8]] == retracted
    assert last["records"][2]["record"]["locator"] == loc.to_json()
    assert len(profile_ids) == 2
    assert [e.id for e in db.profiles(limit_req())] == [
        db.conn.execute(
            "SELECT id FROM profile_entries WHERE claim_id = ?", (claims[0].claim_id,)
        ).fetchone()[0]
    ]
    assert [r.id for r in db.reviews(limit_req())] == [survivor]
    box = outbox(db)[-6:]
    assert [row[:2] for row in box] == [
        ("source", base.source_id),
        ("evidence", base.evidence_id),
        *[("claim", claim_id) for claim_id in retracted],
    ]
    assert {row[2:] for row in box} == {("delete_sync", 20, None)}
    ids = [r[0] for r in db.conn.execute("SELECT id FROM memory_repair_outbox")]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 and i == i.lower() for i in ids)


def test_delete_contradiction_only_claim(db: MemoryDb) -> None:
    """§5 item 14: a claim linked only by contradiction and without live support retracts."""
    c = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=10)
    raw = remember(db, "Sam left Acme", at=11)
    db.link(link_req(c.claim_id, raw.evidence_id, Relation.CONTRADICTS, 9000))
    db.conn.execute("UPDATE evidence SET deleted_at = 12 WHERE id = ?", (c.evidence_id,))
    assert db.delete(delete_req(raw.source_id, 13)).claim_count == 1


def test_delete_reemits_already_tombstoned_evidence(db: MemoryDb) -> None:
    """§5 item 13 (kept): evidence tombstoned earlier is re-emitted and re-enqueued."""
    r = remember(db, "hello", at=10)
    db.conn.execute("UPDATE evidence SET deleted_at = 11 WHERE id = ?", (r.evidence_id,))
    result = db.delete(delete_req(r.source_id, 15))
    assert result.evidence_count == 0
    last = commits(db)[-1]
    assert kinds(last) == ["source", "deletion:source", "evidence", "deletion:evidence"]
    assert last["records"][2]["record"]["deleted_at"] == 11
    assert last["records"][3]["record"]["deleted_at"] == 15
    assert [row[0] for row in outbox(db)] == ["source", "evidence"]


def test_delete_sweeps_every_retracted_claims_profile_with_records(db: MemoryDb) -> None:
    """§5 item 12 (fixed): every swept entry gets a deletion record, not only this source's."""
    stale = claimed(
        db,
        "Sam lives in Berlin",
        ("Sam", "city", "Berlin"),
        at=10,
        claim_kind=ClaimKind.PROFILE_FACT,
    )
    entry = db.profile(profile_req(stale.claim_id, 11))
    # As after applying a foreign retraction: the claim is retracted, its entry survives.
    db.conn.execute(
        "UPDATE claims SET status = 'retracted', recorded_until = 12 WHERE id = ?",
        (stale.claim_id,),
    )
    raw = remember(db, "unrelated", at=13)
    db.delete(delete_req(raw.source_id, 14))
    assert db.conn.execute("SELECT COUNT(*) FROM profile_entries").fetchone() == (0,)
    last = commits(db)[-1]
    assert last["records"][-1]["record"]["target"] == {"kind": "profile_entry", "id": entry.id}


# --------------------------------------------------------------------------- the 27 states

ALL_STATES = list(itertools.product(list(Tier), list(Status), list(ProcessingState)))


def _claim_in_state(
    db: MemoryDb, tier: Tier, status: Status, state: ProcessingState, n: int
) -> Any:
    """A profile_fact claim put into (tier, status, state), open intervals, via SQL."""
    c = claimed(
        db,
        f"Sam fact {n}",
        ("Sam", f"key{n}", "value"),
        at=10,
        claim_kind=ClaimKind.PROFILE_FACT,
        tier=Tier.SHORT_TERM,
    )
    db.conn.execute(
        "UPDATE claims SET tier = ?, status = ?, processing_state = ? WHERE id = ?",
        (tier.value, status.value, state.value, c.claim_id),
    )
    return c


@pytest.mark.parametrize(("tier", "status", "state"), ALL_STATES)
def test_state_matrix(db: MemoryDb, tier: Tier, status: Status, state: ProcessingState) -> None:
    """All 27 combinations: the trigger, remember's check, and every operation's reaction."""
    legal = is_legal_state(tier, status, state)
    expected_legal = not (
        (tier is Tier.ARCHIVE and status is Status.SUPERSEDED)
        or (tier is not Tier.SHORT_TERM and state is not ProcessingState.PROCESSED)
    )
    assert legal == expected_legal
    if status is Status.ACCEPTED:
        try:
            r = claimed(db, "Sam runs", ("Sam", "habit", "run"), tier=tier, processing_state=state)
        except InvalidInput as exc:
            assert not legal
            assert str(exc) == (
                f"illegal memory state combination: tier={tier.value}, status=accepted,"
                f" processing_state={state.value}"
            )
        else:
            assert legal and claim_row(db, r.claim_id)["status"] == "accepted"
    # The trigger, on insert and on update.
    base = claimed(db, "base", ("Sam", "base", "v"), tier=Tier.SHORT_TERM)
    if not legal:
        expect_error(
            db,
            lambda: db.conn.execute(
                "UPDATE claims SET tier = ?, status = ?, processing_state = ? WHERE id = ?",
                (tier.value, status.value, state.value, base.claim_id),
            ),
            "illegal memory state combination",
            sqlite3.IntegrityError,
        )
        with pytest.raises(sqlite3.IntegrityError, match="illegal memory state combination"):
            db.conn.execute(
                "INSERT INTO claims (id, tenant_id, person_id, subject, predicate, value,"
                " valid_from, recorded_from, status, tier, processing_state, kind)"
                " VALUES ('x', ?, ?, 's', 'p', 'v', 1, 1, ?, ?, ?, 'fact')",
                (T, P, status.value, tier.value, state.value),
            )
        return
    # Each operation on its own claim in this state (spec §3.3-3.8, §2.2 liveness).
    ops: list[tuple[str, Callable[[str, str], object], str | None]] = []
    accepted = status is Status.ACCEPTED
    processed = state is ProcessingState.PROCESSED
    promote_error = (
        "promotion requires an active claim"
        if not accepted
        else "promotion requires processing_state=processed"
        if not processed
        else "promotion requires tier=short_term"
        if tier is not Tier.SHORT_TERM
        else None
    )
    archive_error = (
        None
        if tier is Tier.ARCHIVE
        else "archive cannot be superseded"
        if status is Status.SUPERSEDED
        else "archive requires processing_state=processed"
        if not processed
        else None
    )
    correct_error = (
        "record not found"
        if not accepted
        else "illegal memory state combination"
        if tier is Tier.ARCHIVE
        else None
    )
    not_found = None if accepted else "record not found"
    raw = remember(db, "extra evidence", at=11)
    ops = [
        ("promote", lambda cid, _: db.promote(tier_req(cid, 20)), promote_error),
        ("archive", lambda cid, _: db.archive(tier_req(cid, 20)), archive_error),
        ("correct", lambda cid, _: db.correct(correct_req(cid)), correct_error),
        ("link", lambda cid, _: db.link(link_req(cid, raw.evidence_id)), not_found),
        ("profile", lambda cid, _: db.profile(profile_req(cid, 20)), not_found),
        ("get", lambda cid, _: get(db, TargetKind.CLAIM, cid), None),
        ("delete", lambda _, sid: db.delete(delete_req(sid, 20)), None),
    ]
    for n, (name, op, error) in enumerate(ops):
        c = _claim_in_state(db, tier, status, state, n)
        if name == "get":
            live = accepted and processed and tier is not Tier.ARCHIVE
            error = None if live else "record not found"
        if error is None:
            op(c.claim_id, c.source_id)
        else:
            expect_error(db, functools.partial(op, c.claim_id, c.source_id), error)
        row = claim_row(db, c.claim_id)
        if name == "delete":
            assert row["status"] == ("retracted" if accepted else status.value)
            assert (row["tier"], row["processing_state"]) == (tier.value, state.value)
        if name == "archive" and error is None:
            assert row["tier"] == "archive"


# --------------------------------------------------------------------------- validation


def _world(db: MemoryDb) -> dict[str, str]:
    """A scope holding one claim of each interesting kind, plus a foreign scope."""
    a = claimed(
        db,
        "Sam lives in Berlin",
        ("Sam", "city", "Berlin"),
        at=10,
        claim_kind=ClaimKind.PROFILE_FACT,
    )
    raw = remember(db, "Sam visited the museum", at=12)
    short = claimed(db, "Sam runs", ("Sam", "habit", "running"), at=10, tier=Tier.SHORT_TERM)
    sup = claimed(db, "Sam works at Acme", ("Sam", "employer", "Acme"), at=10)
    fix = db.correct(correct_req(sup.claim_id))
    gone = remember(db, "secret", at=10)
    db.delete(delete_req(gone.source_id, 11))
    db.profile(profile_req(a.claim_id, 11))
    foreign = claimed(db, "Other", ("O", "p", "v"), t="t2", claim_kind=ClaimKind.PROFILE_FACT)
    return {
        "claim": a.claim_id,
        "evidence": a.evidence_id,
        "source": a.source_id,
        "raw_evidence": raw.evidence_id,
        "short": short.claim_id,
        "superseded": sup.claim_id,
        "fixed": fix.claim_id,
        "gone_source": gone.source_id,
        "gone_evidence": gone.evidence_id,
        "foreign_claim": foreign.claim_id,
        "foreign_evidence": foreign.evidence_id,
        "foreign_source": foreign.source_id,
    }


Case = tuple[str, Callable[[MemoryDb, dict[str, str]], object], str]
BLANK = " \t\u3000"

# Each case: (command, call on (db, world ids), exact message; "{name}" = a world id).
# fmt: off
VALIDATION_CASES: list[Case] = [
    # correct (§3.3)
    ("correct", lambda d, w: d.correct(correct_req(w["claim"], t=BLANK)),
     "tenant_id must not be empty"),
    ("correct", lambda d, w: d.correct(correct_req(w["claim"], p="")),
     "person_id must not be empty"),
    ("correct", lambda d, w: d.correct(correct_req(w["claim"], text=" ")),
     "correction text must not be empty"),
    ("correct", lambda d, w: d.correct(correct_req(w["claim"], value="\n")),
     "value must not be empty"),
    # zkr names the claim that superseded it (the reference: "record not found"; docs/inspect.md)
    ("correct", lambda d, w: d.correct(correct_req(w["superseded"])),
     "claim {superseded} was superseded by claim {fixed}; the current claim is {fixed}"
     " (correct the current claim)"),
    ("correct", lambda d, w: d.correct(correct_req("nope")), "record not found"),
    ("correct", lambda d, w: d.correct(correct_req(w["foreign_claim"])), "record not found"),
    ("correct", lambda d, w: d.correct(correct_req(w["claim"], valid_at=10)),
     "correction timestamps must advance the original valid and recorded intervals"),
    ("correct", lambda d, w: d.correct(correct_req(w["claim"], recorded_at=10)),
     "correction timestamps must advance the original valid and recorded intervals"),
    # link (§3.4)
    ("link", lambda d, w: d.link(link_req(w["claim"], w["raw_evidence"], t=" ")),
     "tenant id must not be empty"),
    ("link", lambda d, w: d.link(link_req(w["claim"], w["raw_evidence"], p=" ")),
     "person id must not be empty"),
    ("link", lambda d, w: d.link(link_req(" ", w["raw_evidence"])),
     "claim id must not be empty"),
    ("link", lambda d, w: d.link(link_req(w["claim"], "")),
     "evidence id must not be empty"),
    ("link", lambda d, w: d.link(link_req(w["claim"], w["raw_evidence"], points=10001)),
     "confidence 10001 must be at most 10000 basis points"),
    ("link", lambda d, w: d.link(link_req(w["claim"], w["gone_evidence"])), "record not found"),
    ("link", lambda d, w: d.link(link_req(w["superseded"], w["raw_evidence"])),
     "record not found"),
    ("link", lambda d, w: d.link(link_req(w["claim"], w["evidence"], Relation.CONTRADICTS)),
     "claim evidence link conflicts with existing payload"),
    # promote / archive (§3.5-3.6)
    ("promote", lambda d, w: d.promote(tier_req(w["short"], 20, t="")),
     "tenant_id must not be empty"),
    ("promote", lambda d, w: d.promote(tier_req(w["short"], 20, p="")),
     "person_id must not be empty"),
    ("promote", lambda d, w: d.promote(tier_req(w["foreign_claim"], 20)),
     "Query returned no rows"),
    ("promote", lambda d, w: d.promote(tier_req(w["superseded"], 20)),
     "promotion requires an active claim"),
    ("promote", lambda d, w: d.promote(tier_req(w["claim"], 20)),
     "promotion requires tier=short_term"),
    ("promote", lambda d, w: d.promote(tier_req(w["short"], 9)),
     "promotion recorded_at must not predate claim"),
    ("archive", lambda d, w: d.archive(tier_req(w["short"], 20, t="")),
     "tenant_id must not be empty"),
    ("archive", lambda d, w: d.archive(tier_req(w["short"], 20, p="")),
     "person_id must not be empty"),
    ("archive", lambda d, w: d.archive(tier_req("nope", 20)), "Query returned no rows"),
    ("archive", lambda d, w: d.archive(tier_req(w["superseded"], 20)),
     "archive cannot be superseded"),
    ("archive", lambda d, w: d.archive(tier_req(w["short"], 9)),
     "archive recorded_at must not predate claim"),
    # delete (§3.7)
    ("delete", lambda d, w: d.delete(delete_req(w["source"], 20, t="")),
     "tenant_id must not be empty"),
    ("delete", lambda d, w: d.delete(delete_req(w["source"], 20, p="")),
     "person_id must not be empty"),
    ("delete", lambda d, w: d.delete(delete_req(w["gone_source"], 20)), "record not found"),
    ("delete", lambda d, w: d.delete(delete_req(w["foreign_source"], 20)), "record not found"),
    ("delete", lambda d, w: d.delete(delete_req(w["source"], 9)),
     "deleted_at cannot predate source recording"),
    ("delete", lambda d, w: d.delete(delete_req(w["source"], 10)),
     "deleted_at must advance affected claims' recorded intervals"),
    # profile / profiles (§3.8-3.9)
    ("profile", lambda d, w: d.profile(profile_req(w["claim"], 20, t="")),
     "tenant_id must not be empty"),
    ("profile", lambda d, w: d.profile(profile_req(w["claim"], 20, p="")),
     "person_id must not be empty"),
    ("profile", lambda d, w: d.profile(profile_req(w["short"], 20)), "record not found"),
    ("profile", lambda d, w: d.profile(profile_req(w["superseded"], 20)), "record not found"),
    ("profile", lambda d, w: d.profile(profile_req(w["foreign_claim"], 20)), "record not found"),
    ("profile", lambda d, w: d.profile(profile_req(w["claim"], 9)),
     "profile entry cannot predate its backing claim"),
    ("profile", lambda d, w: d.profile(profile_req(w["claim"], 11, Stability.STABLE)),
     "profile replacement must advance recorded_at"),
    ("profiles", lambda d, w: d.profiles(limit_req(t="")), "tenant_id must not be empty"),
    ("profiles", lambda d, w: d.profiles(limit_req(p="")), "person_id must not be empty"),
    # review / reviews (§3.10-3.11)
    ("review", lambda d, w: d.review(review_req([w["evidence"]], 20, t="")),
     "tenant_id must not be empty"),
    ("review", lambda d, w: d.review(review_req([w["evidence"]], 20, p="")),
     "person_id must not be empty"),
    ("review", lambda d, w: d.review(review_req([w["evidence"]], 20, day=" ")),
     "day must not be empty"),
    ("review", lambda d, w: d.review(review_req([w["evidence"]], 20, summary="")),
     "summary must not be empty"),
    ("review", lambda d, w: d.review(review_req([], 20)), "review needs evidence_ids"),
    ("review", lambda d, w: d.review(review_req([w["evidence"], w["gone_evidence"], "x"], 20)),
     "evidence {gone_evidence} is unavailable"),
    ("review", lambda d, w: d.review(review_req([w["foreign_evidence"]], 20)),
     "evidence {foreign_evidence} is unavailable"),
    ("reviews", lambda d, w: d.reviews(limit_req(t="")), "tenant_id must not be empty"),
    ("reviews", lambda d, w: d.reviews(limit_req(p="")), "person_id must not be empty"),
]
# fmt: on


@pytest.mark.parametrize(
    ("command", "call", "message"),
    VALIDATION_CASES,
    ids=[f"{i:02d}-{case[0]}" for i, case in enumerate(VALIDATION_CASES)],
)
def test_validation_message_and_no_change(
    db: MemoryDb, command: str, call: Callable[[MemoryDb, dict[str, str]], object], message: str
) -> None:
    world = _world(db)
    expect_error(db, lambda: call(db, world), message.format(**world))


@pytest.mark.parametrize(
    ("command", "request_json", "fragment"),
    [
        (
            "link",
            {
                "claim_id": "c",
                "evidence_id": "e",
                "relation": "supports",
                "confidence_basis_points": 70000,
            },
            "invalid value: integer `70000`, expected u16",
        ),
        (
            "link",
            {
                "claim_id": "c",
                "evidence_id": "e",
                "relation": "refutes",
                "confidence_basis_points": 1,
            },
            "unknown variant `refutes`",
        ),
        (
            "link",
            {"claim_id": "c", "evidence_id": "e", "relation": "supports"},
            "missing field `confidence_basis_points`",
        ),
        (
            "correct",
            {"claim_id": "c", "text": "t", "value": "v", "valid_at": 1.0, "recorded_at": 1},
            "invalid type",
        ),
        ("delete", {"source_id": "s", "deleted_at": "20"}, "invalid type"),
        ("promote", {"claim_id": "c"}, "missing field `recorded_at`"),
        (
            "profile",
            {"claim_id": "c", "stability": "current", "recorded_at": 1, "key": "k"},
            "unknown field `key`",
        ),
        ("profiles", {"limit": None}, "invalid type: null"),
        (
            "review",
            {"day": "d", "summary": "s", "evidence_ids": "e", "recorded_at": 1},
            "invalid type",
        ),
    ],
)
def test_cli_parse_errors(
    db_path: str, command: str, request_json: dict[str, Any], fragment: str
) -> None:
    result = cli(db_path, command, {"tenant_id": T, "person_id": P, **request_json})
    assert fragment in result.error()
    stored = {table: rows for table, rows in dump(db_path).items() if table != "sqlite_sequence"}
    assert sum(len(rows) for rows in stored.values()) == 0


def test_cli_lifecycle_roundtrip(db_path: str) -> None:
    """Output shapes of every lifecycle command through the real CLI (sorted keys)."""
    scope = {"tenant_id": T, "person_id": P}
    c = cli(
        db_path,
        "remember",
        {
            **REMEMBER_KEYED,
            "claim": {
                "subject": "Sam",
                "predicate": "habit",
                "value": "run",
                "kind": "fact",
                "valid_from": 10,
                "tier": "short_term",
            },
        },
    ).json()
    assert (
        cli(db_path, "promote", {**scope, "claim_id": c["claim_id"], "recorded_at": 11}).stdout
        == f'{{"claim_id":"{c["claim_id"]}"}}\n'
    )
    assert cli(
        db_path, "archive", {**scope, "claim_id": c["claim_id"], "recorded_at": 12}
    ).json() == {"claim_id": c["claim_id"]}
    raw = cli(db_path, "remember", {**REMEMBER_KEYED, "ingestion_key": None, "text": "x"}).json()
    linked = cli(
        db_path,
        "link",
        {
            **scope,
            "claim_id": c["claim_id"],
            "evidence_id": raw["evidence_id"],
            "relation": "contradicts",
            "confidence_basis_points": 10000,
            "extra": 1,
        },
    )
    assert linked.stdout == '{"ok":true}\n'
    fixed = cli(
        db_path,
        "correct",
        {
            **scope,
            "claim_id": c["claim_id"],
            "text": "t",
            "value": "v",
            "valid_at": 20,
            "recorded_at": 20,
        },
    )
    assert fixed.error() == "illegal memory state combination"
    deleted = cli(db_path, "delete", {**scope, "source_id": raw["source_id"], "deleted_at": 30})
    assert deleted.stdout == (
        f'{{"claim_count":0,"evidence_count":1,"source_id":"{raw["source_id"]}"}}\n'
    )
