"""``apply`` per record kind: every §4.5 message, rollback of every error, revision and
deletion rules, ids held by another scope, bulk batches (spec/sync.md §4.5, §7; scenario 29;
:mod:`zkr.store.apply_kinds`)."""

from __future__ import annotations

import copy
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import dump
from tests.sync_support import (
    A,
    B,
    Commit,
    apply,
    count,
    scope_state,
)
from zkr import InvalidInput, MemoryDb, ZkrError
from zkr.model import (
    ApplyRequest,
    Locator,
    SearchRequest,
)
from zkr.store import feed

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


_SCOPE = {"tenant_id": "a", "person_id": "sam"}


def _profile(**changes: Any) -> feed.Record:
    base = {"id": "pe", **_SCOPE, "key": "city", "value": "v", "stability": "current"}
    return feed.profile_body(**{**base, "claim_id": "pc", "recorded_at": 1, **changes})


def _review(**changes: Any) -> feed.Record:
    base = {"id": "r1", **_SCOPE, "day": "d", "summary": "s", "evidence_ids": ["e1"]}
    return feed.review_body(**{**base, "recorded_at": 1, **changes})


def _correction(superseded: str, claim: str, source: str, evidence: str, at: int) -> feed.Record:
    return feed.correction_body("a", "sam", superseded, claim, source, evidence, at, 2)


def _byte_range() -> feed.Record:
    record = _ev("e9", "s1")
    record["record"]["evidence"]["byte_range"] = {"start": 0, "end": 1}
    return record


# (name, the one record of the failing commit 11, the exact message): spec/sync.md §4.5.
_ONE_RECORD: list[tuple[str, feed.Record, str]] = [
    (
        "source payload",
        _src("s1", content="other", origin_e="e1", origin_c="c1"),
        "applied source s1 conflicts with the stored source payload",
    ),
    (
        "deletion state",
        _src("s3", revision=2, deleted_at=9),
        "applied source s3 conflicts with the stored deletion state",
    ),
    (
        "source revival",
        _src("s3", revision=3),
        "applied source s3 cannot revive a tombstoned source",
    ),
    (
        "origin evidence",
        _src("s9", origin_e="nope"),
        "applied record references unknown evidence nope",
    ),
    ("origin claim", _src("s9", origin_c="nope"), "applied record references unknown claim nope"),
    ("byte_range", _byte_range(), "applied evidence e9 carries an unsupported byte_range"),
    *[
        (f"locator {name}", _ev("e9", "s1", locator=Locator(*fields)), message)
        for name, fields, message in [
            ("blank", (" ", "p", "s", "g", 1, 2), "locator.device_id must not be empty"),
            ("provider", ("d", "", "s", "g", 1, 2), "locator.provider must not be empty"),
            ("stream", ("d", "p", "", "g", 1, 2), "locator.stream_id must not be empty"),
            ("segment", ("d", "p", "s", "", 1, 2), "locator.segment_id must not be empty"),
            ("order", ("d", "p", "s", "g", 3, 2), "locator end_ms must not precede start_ms"),
            ("range", ("d", "p", "s", "g", 1, 2**63), "locator end_ms exceeds the storage range"),
        ]
    ],
    (
        "unknown source",
        _ev("e9", "nope"),
        "applied evidence e9 references unknown source nope",
    ),
    (
        "evidence payload",
        _ev("e2", "s2", quote="other"),
        "applied evidence e2 conflicts with the stored evidence payload",
    ),
    (
        "locator conflict",
        _ev("e1", "s1"),
        "applied evidence e1 conflicts with the stored transcript locator",
    ),
    ("evidence revival", _ev("e3", "s3"), "applied evidence e3 cannot revive tombstoned evidence"),
    (
        "legal state",
        _claim("c9", tier="archive", status="superseded", valid=(1, 2), recorded=(1, 2)),
        "illegal memory state combination: tier=archive, status=superseded,"
        " processing_state=processed",
    ),
    (
        "claim payload",
        _claim("c1", value="other"),
        "applied claim c1 conflicts with the stored claim payload",
    ),
    (
        "interval insert",
        _claim("c9", valid=(5, 5)),
        "applied claim carries an invalid time interval",
    ),
    (
        "interval update",
        _claim("c1", recorded=(1, 0), status="superseded"),
        "applied claim carries an invalid time interval",
    ),
    ("claim id blank", _link(" ", "e1"), "claim id must not be empty"),
    ("evidence id blank", _link("c1", ""), "evidence id must not be empty"),
    (
        "confidence",
        _link("c1", "e2", confidence=10001),
        "confidence 10001 must be at most 10000 basis points",
    ),
    ("link claim", _link("nope", "e1"), "applied record references unknown claim nope"),
    ("link evidence", _link("c1", "nope"), "applied record references unknown evidence nope"),
    (
        "link conflict",
        _link("c1", "e1", "contradicts"),
        "applied claim evidence c1/e1 conflicts with the stored link",
    ),
    ("profile claim", _profile(claim_id="nope"), "applied record references unknown claim nope"),
    (
        "profile mismatch",
        _profile(value="Paris"),
        "applied profile entry pe does not match its backing claim",
    ),
    (
        "review evidence",
        _review(id="r9", evidence_ids=["e1", "nope"]),
        "applied record references unknown evidence nope",
    ),
    (
        "review conflict",
        _review(summary="other"),
        "applied daily review r1 conflicts with the stored review",
    ),
    (
        "correction claim",
        _correction("nope", "c4", "s4", "e4", 2),
        "applied record references unknown claim nope",
    ),
    (
        "correction evidence",
        _correction("c1", "c4", "s4", "nope", 2),
        "applied record references unknown evidence nope",
    ),
    (
        "correction conflict",
        _correction("c1", "c4", "s4", "e4", 3),
        "applied correction c1/c4 conflicts with the stored correction",
    ),
    (
        "correction lineage",
        feed.correction_body("a", "sam", "c4", "c1", "s1", "e2", 3, 3),
        "applied correction c4/c1 does not match its source lineage",
    ),
    (
        "delete source",
        _del("source", "nope"),
        "applied deletion references unknown target source:nope",
    ),
    (
        "delete evidence",
        _del("evidence", "nope"),
        "applied record references unknown evidence nope",
    ),
    ("delete claim", _del("claim", "nope"), "applied record references unknown claim nope"),
    (
        "delete claim interval",
        _del("claim", "c4", at=2),
        "applied claim carries an invalid time interval",
    ),
    ("u64 revision", _src("s9", revision=2**63), "exceeds the storage range"),
]

ERRORS: list[tuple[str, list[Commit], str]] = [
    (name, [_commit(11, record)], message) for name, record, message in _ONE_RECORD
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
