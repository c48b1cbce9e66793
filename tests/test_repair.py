"""``repair``: draining the projection-repair outbox (spec/lifecycle.md §3.12, §4 item 25)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import P, T, dump, remember
from tests.test_embeddings import M, claim_memory, edit, embed, stored
from zkr import InvalidInput, MemoryDb
from zkr.model import (
    ClaimTierRequest,
    CorrectRequest,
    DeleteRequest,
    ExportRequest,
    LimitRequest,
    ProcessingState,
    Tier,
)
from zkr.text import new_id


def repair(db: MemoryDb, limit: int = 10, t: str = T, p: str = P) -> int:
    return db.repair(LimitRequest(t, p, limit)).processed


def enqueue(
    db: MemoryDb,
    kind: str,
    target_id: str,
    created_at: int = 1,
    t: str = T,
    p: str = P,
    reason: str = "apply_sync",
) -> None:
    db.conn.execute(
        "INSERT INTO memory_repair_outbox (id, tenant_id, person_id, target_kind, target_id,"
        " reason, created_at, processed_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
        (new_id(), t, p, kind, target_id, reason, created_at),
    )


def pending(db: MemoryDb, t: str = T) -> int:
    return int(
        db.conn.execute(
            "SELECT COUNT(*) FROM memory_repair_outbox"
            " WHERE processed_at IS NULL AND tenant_id = ?",
            (t,),
        ).fetchone()[0]
    )


def operations(db: MemoryDb) -> list[tuple[Any, ...]]:
    return db.conn.execute(
        "SELECT operation_type, status, target_kind, target_id, recorded_at, tenant_id,"
        " person_id FROM memory_operations ORDER BY rowid"
    ).fetchall()


def fts_rows(db: MemoryDb, source_id: str) -> int:
    return int(
        db.conn.execute(
            "SELECT COUNT(*) FROM source_fts WHERE source_id = ?", (source_id,)
        ).fetchone()[0]
    )


def test_repair_counts_like_the_reference(db: MemoryDb) -> None:
    """conformance repair_counts: correct 1, promote+archive+delete 5 (4 + 1), then 0."""
    assert repair(db) == 0
    a = claim_memory(db)
    assert repair(db) == 0
    fix = db.correct(CorrectRequest(T, P, a.claim_id, "Sam moved to Beta", "Beta", 20, 20))
    assert repair(db) == 1
    assert repair(db) == 0
    st = remember(
        db, "Sam started running", at=21, claim=("Sam", "habit", "running"), tier=Tier.SHORT_TERM
    )
    db.promote(ClaimTierRequest(T, P, st.claim_id, 22))
    db.archive(ClaimTierRequest(T, P, st.claim_id, 23))
    db.delete(DeleteRequest(T, P, fix.source_id, 30))
    assert repair(db, 4) == 4
    assert repair(db, 4) == 1
    assert repair(db) == 0


def test_not_live_targets_lose_every_projection(db: MemoryDb, db_path: str) -> None:
    """A deleted source loses its vectors (all models/versions) and its FTS row; its evidence
    and retracted claim lose theirs; other targets are untouched."""
    keep = remember(db, "kept note")
    gone = claim_memory(db)
    for kind, tid in [
        ("source", gone.source_id),
        ("evidence", gone.evidence_id),
        ("claim", gone.claim_id),
        ("source", keep.source_id),
    ]:
        embed(db, kind, tid, [1.0, 0.0])
        embed(db, kind, tid, [1.0], model="other", norm="none")
    # an FTS row left behind (as after a crash between tombstone and cleanup)
    db.delete(DeleteRequest(T, P, gone.source_id, 20))
    db.conn.execute(
        "INSERT INTO source_fts (source_id, tenant_id, person_id, content)"
        " VALUES (?, ?, ?, 'Sam works at Acme')",
        (gone.source_id, T, P),
    )
    assert repair(db, 100) == 3  # source, evidence, claim
    left = db.conn.execute("SELECT target_id, model FROM embeddings ORDER BY model").fetchall()
    assert left == [(keep.source_id, M), (keep.source_id, "other")]
    assert fts_rows(db, gone.source_id) == 0
    assert fts_rows(db, keep.source_id) == 1  # repair never touches a live source's FTS


@pytest.mark.parametrize("kind", ["source", "evidence", "claim"])
def test_live_targets_keep_current_rows_and_lose_stale_ones(db: MemoryDb, kind: str) -> None:
    r = claim_memory(db)
    tid = {"source": r.source_id, "evidence": r.evidence_id, "claim": r.claim_id}[kind]
    embed(db, kind, tid, [1.0, 0.0])  # current
    embed(db, kind, tid, [1.0, 0.0], version="hash")
    embed(db, kind, tid, [1.0, 0.0], version="revision")
    embed(db, kind, tid, [1.0, 0.0], version="vector")
    embed(db, kind, tid, [1.0, 0.0], version="norm")
    db.conn.execute("UPDATE embeddings SET input_hash = 'sha256:old' WHERE version = 'hash'")
    db.conn.execute("UPDATE embeddings SET target_revision = 0 WHERE version = 'revision'")
    db.conn.execute("UPDATE embeddings SET vector = '[0.1,0.2]' WHERE version = 'vector'")
    # lifecycle surprise #28, fixed: an undecodable normalization is an invalid row
    db.conn.execute("UPDATE embeddings SET normalization = 'l2' WHERE version = 'norm'")
    enqueue(db, kind, tid)
    assert repair(db) == 1
    assert [row[0] for row in db.conn.execute("SELECT version FROM embeddings")] == ["1"]


def test_expected_lane(db: MemoryDb, db_path: str) -> None:
    """A live target's row outside the lane its model/version expects is dropped; a target
    whose own row is the only current one sets no expectation (lifecycle.md §3.12)."""
    a, b, c = remember(db, "first"), remember(db, "second"), remember(db, "third")
    embed(db, "source", a.source_id, [1.0, 0.0])
    embed(db, "source", b.source_id, [1.0, 0.0])
    # legacy mixed lane: c at dimension 3
    edit(
        db_path,
        "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model,"
        " version, dimension, input_hash, normalization, distance, vector, target_revision,"
        " created_at) SELECT tenant_id, person_id, 'source', ?, model, version, 3, ?,"
        " normalization, distance, '[1.0,0.0,0.0]', 1, 7 FROM embeddings WHERE target_id = ?",
        (c.source_id, stored_hash(db, c.source_id), a.source_id),
    )
    for r in (a, b, c):
        enqueue(db, "source", r.source_id)
    assert repair(db) == 3
    assert {row[0] for row in db.conn.execute("SELECT target_id FROM embeddings")} == {
        a.source_id,
        b.source_id,
    }
    # a lone row keeps its configuration
    solo = remember(db, "solo", t="solo")
    embed(db, "source", solo.source_id, [1.0, 0.0, 0.0], t="solo", norm="none", dist="dot")
    enqueue(db, "source", solo.source_id, t="solo")
    assert repair(db, t="solo") == 1
    assert stored(db, "source", solo.source_id) is not None


def stored_hash(db: MemoryDb, source_id: str) -> str:
    from tests.test_embeddings import current_hash

    return current_hash(db, "source", source_id)


def test_limit_bounds_and_order(db: MemoryDb) -> None:
    for i in range(150):
        enqueue(db, "source", f"missing-{i:03}", created_at=1000 - i)
    assert repair(db, 0) == 10  # 0 -> 10
    # the oldest (created_at ascending) went first
    done = [
        r[0]
        for r in db.conn.execute(
            "SELECT target_id FROM memory_repair_outbox WHERE processed_at IS NOT NULL"
        )
    ]
    assert sorted(done) == [f"missing-{i:03}" for i in range(140, 150)]
    assert repair(db, 1000) == 100  # > 100 -> 100
    assert repair(db, 1) == 1
    assert repair(db, 100) == 39
    assert repair(db) == 0


def test_ties_on_created_at_follow_id(db: MemoryDb) -> None:
    ids = sorted(new_id() for _ in range(5))
    for oid in reversed(ids):
        db.conn.execute(
            "INSERT INTO memory_repair_outbox (id, tenant_id, person_id, target_kind, target_id,"
            " reason, created_at, processed_at) VALUES (?, ?, ?, 'source', ?, 'x', 5, NULL)",
            (oid, T, P, oid),
        )
    assert repair(db, 2) == 2
    done = {
        r[0]
        for r in db.conn.execute(
            "SELECT id FROM memory_repair_outbox WHERE processed_at IS NOT NULL"
        )
    }
    assert done == set(ids[:2])


def test_processed_at_and_operation_rows(db: MemoryDb) -> None:
    """One unixepoch() value per call, shared by the stamped rows and the operation row; an
    operation row even when nothing was pending; other scopes untouched."""
    before = int(time.time())
    assert repair(db) == 0
    for i in range(3):
        enqueue(db, "source", f"gone-{i}")
    enqueue(db, "source", "other-scope", t="b")
    assert repair(db) == 3
    after = int(time.time())
    stamps = {
        r[0]
        for r in db.conn.execute(
            "SELECT processed_at FROM memory_repair_outbox WHERE tenant_id = ?", (T,)
        )
    }
    assert len(stamps) == 1
    (stamp,) = stamps
    assert before - 1 <= stamp <= after + 1
    assert pending(db, "b") == 1
    ops = operations(db)
    assert [op[:4] for op in ops] == [("repair", "success", None, None)] * 2
    assert ops[1][4] == stamp
    assert {op[5:] for op in ops} == {(T, P)}


def test_invalid_target_kinds_are_consumed_not_counted(db: MemoryDb) -> None:
    """Lifecycle surprise #26 (kept)."""
    enqueue(db, "profile_entry", "x")
    enqueue(db, "Source", "y")
    enqueue(db, "claim", "z")
    assert repair(db) == 1
    assert pending(db) == 0
    assert repair(db) == 0


def test_repair_is_idempotent_and_writes_no_feed(db: MemoryDb) -> None:
    r = claim_memory(db)
    embed(db, "claim", r.claim_id, [1.0, 0.0])
    db.archive(ClaimTierRequest(T, P, r.claim_id, 12))
    mark = db.export(ExportRequest(T, P, 1, limit=100)).high_water_mark
    assert repair(db) == 1
    assert stored(db, "claim", r.claim_id) is None
    state = dump_without_bookkeeping(db)
    enqueue(db, "claim", r.claim_id)
    assert repair(db) == 1
    assert dump_without_bookkeeping(db) == state
    assert db.export(ExportRequest(T, P, 1, limit=100)).high_water_mark == mark


def dump_without_bookkeeping(db: MemoryDb) -> dict[str, Any]:
    tables = dump(db.path)
    tables.pop("memory_repair_outbox")
    tables.pop("memory_operations")
    return tables


def test_pending_claims_sources_keep_their_vectors(db: MemoryDb) -> None:
    """A pending claim is not live: its own rows go, its source's rows stay."""
    r = remember(
        db,
        "Sam may like tea",
        claim=("Sam", "likes", "tea"),
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.PENDING,
    )
    embed(db, "source", r.source_id, [1.0, 0.0])
    db.conn.execute(
        "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
        " dimension, input_hash, normalization, distance, vector, target_revision, created_at)"
        " VALUES (?, ?, 'claim', ?, ?, '1', 2, 'sha256:x', '\"l2\"', '\"cosine\"', '[1.0,0.0]',"
        " 10, 1)",
        (T, P, r.claim_id, M),
    )
    enqueue(db, "claim", r.claim_id)
    enqueue(db, "source", r.source_id)
    assert repair(db) == 2
    assert stored(db, "claim", r.claim_id) is None
    assert stored(db, "source", r.source_id) is not None


def test_scope_check(db: MemoryDb) -> None:
    with pytest.raises(InvalidInput) as err:
        db.repair(LimitRequest(" ", P))
    assert str(err.value) == "tenant_id must not be empty"
    with pytest.raises(InvalidInput) as err:
        db.repair(LimitRequest(T, ""))
    assert str(err.value) == "person_id must not be empty"
    assert operations(db) == []
