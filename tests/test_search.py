"""Lexical ``search`` and ``get`` (spec/retrieval.md §2-4, §7-8, §12)."""

from __future__ import annotations

import sqlite3

import pytest

from tests.conftest import P, T, remember
from zkr import InvalidInput, MemoryDb, NotFound
from zkr.model import (
    AsOf,
    GetRequest,
    ProcessingState,
    SearchRequest,
    Target,
    TargetKind,
    Tier,
)
from zkr.store.retrieval import fuse


def search(
    db: MemoryDb, query: str, limit: int = 10, t: str = T, p: str = P, as_of: AsOf | None = None
) -> list[tuple[str, str, str, list[str]]]:
    pack = db.search(SearchRequest(t, p, query, limit, None, as_of))
    assert pack.query == query
    assert pack.gaps == ([] if pack.items else ["no cited memory matched"])
    return [(i.memory.kind.value, i.memory.id, i.excerpt, i.evidence_ids) for i in pack.items]


def test_raw_source_scoped_to_tenant(db: MemoryDb) -> None:
    """retrieval.md §12 item 1 (the delete half is in the lifecycle tests)."""
    mine = remember(db, "The launch code is marigold")
    remember(db, "Marigold belongs elsewhere", t="b")
    assert search(db, "marigold") == [
        ("source", mine.source_id, "The launch code is marigold", [mine.evidence_id])
    ]


def test_phrase_hits_then_token_hits(db: MemoryDb) -> None:
    """retrieval.md §12 item 2."""
    corp = remember(db, "Alice works at Acme Corporation")
    campus = remember(db, "Alice moved near the Acme campus")
    remember(db, "Where does Alice work at another tenant?", t="b")
    first = search(db, "Alice works at Acme")
    assert first[0][1] == corp.source_id
    both = search(db, "Where does Alice work at Acme?")
    assert {row[1] for row in both} == {corp.source_id, campus.source_id}
    assert search(db, "Where does Alice work at Acme?") == both


def test_punctuation_is_not_fts_syntax(db: MemoryDb) -> None:
    """retrieval.md §12 item 3, plus FTS operators typed by a user."""
    for i in range(8):
        remember(db, f"Alice's project number {i}")
    assert len(search(db, "What's Alice's project?", limit=3)) == 3
    for query in ['"', "NEAR(a b)", "a OR", "*", "col:umn ^x", "?!", "AND", '"quoted" "x']:
        search(db, query)


def test_only_first_32_terms_are_used(db: MemoryDb) -> None:
    """retrieval.md §12 item 4."""
    remember(db, "term0 relevant memory")
    remember(db, "term40 other memory")
    query = " ".join(f"term{i}" for i in range(1000))
    assert [row[2] for row in search(db, query, limit=3)] == ["term0 relevant memory"]


def test_excerpt_cap_on_character_boundary(db: MemoryDb) -> None:
    """retrieval.md §12 item 5."""
    stored = remember(db, "needle " + "é" * 4096)
    item = db.get(GetRequest(T, P, Target(TargetKind.SOURCE, stored.source_id)))
    raw = item.excerpt.encode()
    assert len(raw) <= 4096 and len(raw) >= 4095
    assert item.excerpt.startswith("needle ")
    assert item.relevance_basis_points == 10000


def test_claim_replaces_its_source(db: MemoryDb) -> None:
    claimed = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    assert search(db, "Acme") == [
        ("claim", claimed.claim_id, "Sam employer Acme", [claimed.evidence_id])
    ]
    # get has no replacement: the source is still readable as a source
    item = db.get(GetRequest(T, P, Target(TargetKind.SOURCE, claimed.source_id)))
    assert item.excerpt == "Sam works at Acme"
    evidence = db.get(GetRequest(T, P, Target(TargetKind.EVIDENCE, claimed.evidence_id)))
    assert evidence.evidence_ids == [claimed.evidence_id]


@pytest.mark.parametrize(
    ("tier", "state"),
    [
        (Tier.SHORT_TERM, ProcessingState.PENDING),
        (Tier.SHORT_TERM, ProcessingState.BLOCKED),
        (Tier.ARCHIVE, ProcessingState.PROCESSED),
    ],
)
def test_non_live_claim_hides_source_live_but_not_as_of(
    db: MemoryDb, tier: Tier, state: ProcessingState
) -> None:
    """Kept reference behaviour (retrieval.md §14 item 15, conformance
    claims_visibility_by_state): a pending/blocked claim hides its source from live search."""
    stored = remember(
        db,
        "Renew the passport",
        claim=("me", "todo", "passport"),
        tier=tier,
        processing_state=state,
    )
    assert search(db, "passport") == []
    with pytest.raises(NotFound):
        db.get(GetRequest(T, P, Target(TargetKind.CLAIM, stored.claim_id)))
    history = search(db, "passport", as_of=AsOf(100, 100))
    if state is ProcessingState.PROCESSED:  # archived claims are visible historically
        assert history == [("claim", stored.claim_id, "me todo passport", [stored.evidence_id])]
    else:
        assert history == [("source", stored.source_id, "Renew the passport", [stored.evidence_id])]


def test_as_of_time_filters(db: MemoryDb) -> None:
    early = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"), at=10)
    late = remember(db, "Acme hired Lee", at=50)
    assert search(db, "Acme", as_of=AsOf(9, 100)) == []
    at_10 = search(db, "Acme", as_of=AsOf(10, 10))
    assert [row[1] for row in at_10] == [early.claim_id]
    everything = {row[1] for row in search(db, "Acme", as_of=AsOf(60, 60))}
    assert everything == {early.claim_id, late.source_id}


def test_isolation_by_person(db: MemoryDb) -> None:
    remember(db, "shared words here", p="other")
    assert search(db, "shared words") == []
    with pytest.raises(NotFound):
        db.get(GetRequest(T, P, Target(TargetKind.SOURCE, "0" * 32)))


def test_blank_query_and_limits(db: MemoryDb) -> None:
    with pytest.raises(InvalidInput, match="query must not be empty"):
        search(db, " \u00a0")
    for i in range(120):
        remember(db, f"widget {i} " + "pad " * (i % 7))
    assert len(search(db, "widget", limit=0)) == 10
    assert len(search(db, "widget", limit=1000)) == 100
    assert len(search(db, "widget", limit=7)) == 7


def test_gap_when_nothing_matches(db: MemoryDb) -> None:
    pack = db.search(SearchRequest(T, P, "  untouched  "))
    assert pack.items == [] and pack.gaps == ["no cited memory matched"]
    assert pack.query == "  untouched  "


def test_unicode_folding_and_combining_marks(db: MemoryDb) -> None:
    cafe = remember(db, "Le café de Flore")
    assert [row[1] for row in search(db, "CAFE")] == [cafe.source_id]
    hindi = remember(db, "किताब पढ़ना पसंद है")
    assert hindi.source_id in {row[1] for row in search(db, "पढ़ना पसंद")}


def test_multiple_supporting_evidence_cites_smallest_live(db: MemoryDb, db_path: str) -> None:
    stored = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    extra = remember(db, "Acme badge photo")
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute(
        "INSERT INTO claim_evidence (tenant_id, person_id, claim_id, evidence_id, relation,"
        " confidence_basis_points) VALUES (?, ?, ?, ?, '\"supports\"', 9000)",
        (T, P, stored.claim_id, extra.evidence_id),
    )
    conn.close()
    item = db.get(GetRequest(T, P, Target(TargetKind.CLAIM, stored.claim_id)))
    assert item.evidence_ids == [min(stored.evidence_id, extra.evidence_id)]
    # both sources now map to the claim; it appears once
    assert [row[1] for row in search(db, "Acme")] == [stored.claim_id]


def test_fusion_worked_example() -> None:
    """retrieval.md §6: J in both lanes, V only dense."""
    j, v = Target(TargetKind.CLAIM, "j"), Target(TargetKind.CLAIM, "v")
    assert fuse([[j], [v, j]], 2) == [(j, 10000), (v, 5040)]
    assert fuse([], 5) == []
    a, b = Target(TargetKind.SOURCE, "b"), Target(TargetKind.CLAIM, "a")
    # equal fused scores: target order (source before claim) breaks the tie
    assert [t for t, _ in fuse([[b], [a]], 2)] == [a, b]
