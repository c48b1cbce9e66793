"""trace, lookup, browse, settle, and correct's error for a superseded claim (issue 15 items
1-4) on real files, through the library and the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, dump, sam_acme
from tests.sync_support import export_all, staged
from zkr import MemoryDb
from zkr.errors import InvalidInput, NotFound, RequestError
from zkr.model import ApplyRequest

T, P = "acme", "sam"


def chain(db: MemoryDb) -> tuple[Any, Any, Any]:
    """Sam's employer Acme (10), corrected to Globex (20), then to Initech (30)."""
    sam = db.scope(T, P)
    first = sam.remember(
        "Sam works at Acme",
        recorded_at=10,
        claim={"subject": "Sam", "predicate": "employer", "value": "Acme"},
    )
    second = sam.correct(first.claim_id, "Globex", text="Sam moved to Globex", recorded_at=20)
    third = sam.correct(second.claim_id, "Initech", text="now at Initech", recorded_at=30)
    return first, second, third


# --------------------------------------------------------------------------- trace


def test_trace_of_a_claim_corrected_twice_shows_the_whole_chain(db: MemoryDb) -> None:
    first, second, third = chain(db)
    ids = [first.claim_id, second.claim_id, third.claim_id]
    for start in ids:  # from any link of the chain
        traced = db.scope(T, P).trace("claim", start)
        claims = {c["id"]: c for c in traced.claims}
        assert set(claims) == set(ids)
        assert [claims[i]["status"] for i in ids] == ["superseded", "superseded", "accepted"]
        assert [claims[i]["live"] for i in ids] == [False, False, True]
        assert claims[first.claim_id]["valid_time"] == {"from": 10, "until": 20}
        assert claims[first.claim_id]["recorded_time"] == {"from": 10, "until": 20}
        assert [(c["superseded_claim_id"], c["claim_id"]) for c in traced.corrections] == [
            (first.claim_id, second.claim_id),
            (second.claim_id, third.claim_id),
        ]
        assert {s["content"] for s in traced.sources} == {
            "Sam works at Acme",
            "Sam moved to Globex",
            "now at Initech",
        }
        assert {(link["claim_id"], link["relation"]) for link in traced.links} == {
            (i, "supports") for i in ids
        }
        assert traced.target.id == start


def test_trace_of_a_source_shows_its_claims_profile_and_reviews(db: MemoryDb) -> None:
    sam = db.scope(T, P)
    stored = sam.remember(
        "I live in Berlin",
        recorded_at=10,
        claim={"subject": "Sam", "predicate": "city", "value": "Berlin", "kind": "profile_fact"},
        locator={
            "device_id": "d",
            "provider": "p",
            "stream_id": "s",
            "segment_id": "g",
            "start_ms": 1,
            "end_ms": 2,
        },
    )
    entry = sam.profile(stored.claim_id, recorded_at=11)
    review = sam.review("2026-01-01", "moved", [stored.evidence_id], recorded_at=12).id
    traced = sam.trace("source", stored.source_id)
    assert [c["id"] for c in traced.claims] == [stored.claim_id]
    assert [e["id"] for e in traced.profile_entries] == [entry.id]
    assert [r["id"] for r in traced.reviews] == [review]
    assert traced.evidence[0]["locator"]["start_ms"] == 1
    same = sam.trace("evidence", stored.evidence_id)
    assert same.claims == traced.claims and same.sources == traced.sources


def test_trace_after_delete_shows_tombstones_without_the_text(db: MemoryDb) -> None:
    sam = db.scope(T, P)
    stored = sam.remember(
        "I live in Berlin",
        recorded_at=10,
        claim={"subject": "Sam", "predicate": "city", "value": "Berlin"},
    )
    sam.delete(stored.source_id, deleted_at=20)
    traced = sam.trace("claim", stored.claim_id)
    (source,) = traced.sources
    assert source["content"] is None and source["deleted_at"] == 20 and not source["live"]
    assert source["revision"] == 2
    assert traced.evidence[0]["quote"] is None and traced.evidence[0]["deleted_at"] == 20
    assert traced.claims[0]["status"] == "retracted"
    assert traced.claims[0]["recorded_time"] == {"from": 10, "until": 20}
    assert "Berlin" not in repr(traced.sources) + repr(traced.evidence)


def test_trace_is_scoped(db: MemoryDb) -> None:
    first, _, _ = chain(db)
    with pytest.raises(NotFound):
        db.scope(T, "ana").trace("claim", first.claim_id)
    with pytest.raises(NotFound):
        db.scope(T, P).trace("source", "nope")


def test_trace_cli(db_path: str) -> None:
    stored = cli(db_path, "remember", sam_acme(T, P)).json()
    target = {"kind": "claim", "id": stored["claim_id"]}
    out = cli(db_path, "trace", {"tenant_id": T, "person_id": P, "target": target}).json()
    assert sorted(out) == [
        "claims",
        "corrections",
        "evidence",
        "links",
        "profile_entries",
        "reviews",
        "sources",
        "target",
    ]
    assert out["claims"][0]["value"] == "Acme" and out["target"] == target
    missing = {"tenant_id": T, "person_id": P, "target": {"kind": "claim", "id": "x"}}
    assert cli(db_path, "trace", missing).error() == "record not found"
    assert (
        "missing field `target`" in cli(db_path, "trace", {"tenant_id": T, "person_id": P}).error()
    )


# --------------------------------------------------------------------------- lookup, correct


def test_lookup_live_and_as_of(db: MemoryDb) -> None:
    _first, _second, third = chain(db)
    sam = db.scope(T, P)
    (now,) = sam.lookup("sam", "EMPLOYER")
    assert now.claim["id"] == third.claim_id and now.claim["value"] == "Initech"
    assert now.evidence_ids == [third.evidence_id]
    assert now.to_json() == {**now.claim, "evidence_ids": [third.evidence_id]}
    assert [c.claim["value"] for c in sam.lookup("Sam", "employer", as_of=(15, 15))] == ["Acme"]
    assert [c.claim["value"] for c in sam.lookup("Sam", "employer", as_of=(25, 25))] == ["Globex"]
    assert sam.lookup("Sam", "employer", as_of=(5, 5)) == []
    assert sam.lookup("Sam", "city") == []


def test_lookup_shows_two_coexisting_values(db: MemoryDb) -> None:
    sam = db.scope(T, P)
    sam.remember(
        "in Berlin",
        recorded_at=10,
        claim={"subject": "alex", "predicate": "lives_in", "value": "Berlin"},
    )
    sam.remember(
        "in Lisbon",
        recorded_at=12,
        captured_at=12,
        claim={"subject": "alex", "predicate": "lives_in", "value": "Lisbon"},
    )
    assert [c.claim["value"] for c in sam.lookup("alex", "lives_in")] == ["Lisbon", "Berlin"]


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("ÉLODIE", "élodie"),
        ("élodie", "Elodie"),
        ("Straße", "STRASSE"),
        ("strasse", "STRAßE"),
        ("Ｓａｍ", "sam"),  # full-width letters (NFKC)
        ("ΟΔΥΣΣΕΑΣ", "οδυσσέας"),  # final sigma and tonos
    ],
)
def test_lookup_folds_beyond_ascii(db: MemoryDb, stored: str, asked: str) -> None:
    """Subject and predicate are compared after search's folding (store/terms.py), both ways."""
    me = db.scope(T, P)
    kept = me.remember(
        f"{stored} lives in Lyon",
        recorded_at=10,
        claim={"subject": stored, "predicate": f"wohnort_{stored}", "value": "Lyon"},
    )
    other = {"subject": "x" + stored, "predicate": f"wohnort_{stored}", "value": "v"}
    me.remember("someone else", recorded_at=11, claim=other)
    for subject, predicate in ((asked, f"WOHNORT_{asked}"), (stored, f"wohnort_{stored}")):
        assert [c.claim["id"] for c in me.lookup(subject, predicate)] == [kept.claim_id]
    assert me.lookup(asked + "s", f"wohnort_{asked}") == []
    assert me.lookup(asked, "wohnort") == []


def test_lookup_cli_and_validation(db_path: str) -> None:
    cli(db_path, "remember", sam_acme(T, P)).json()
    request = {"tenant_id": T, "person_id": P, "subject": "Sam", "predicate": "employer"}
    (claim,) = cli(db_path, "lookup", request).json()
    assert claim["value"] == "Acme" and len(claim["evidence_ids"]) == 1
    blank = {**request, "predicate": " "}
    assert cli(db_path, "lookup", blank).error() == "predicate must not be empty"


def test_correcting_a_superseded_claim_names_the_superseding_claim(db: MemoryDb) -> None:
    first, second, third = chain(db)
    sam = db.scope(T, P)
    with pytest.raises(InvalidInput) as err:
        sam.correct(first.claim_id, "Hooli", recorded_at=40)
    assert str(err.value) == (
        f"claim {first.claim_id} was superseded by claim {second.claim_id}; "
        f"the current claim is {third.claim_id} (correct the current claim)"
    )
    with pytest.raises(
        InvalidInput,
        match=f"by claim {third.claim_id}; the current claim is {third.claim_id} \\(correct",
    ):
        sam.correct(second.claim_id, "Hooli", recorded_at=40)
    with pytest.raises(NotFound):
        sam.correct("unknown", "Hooli", recorded_at=40)


def test_correcting_a_superseded_claim_whose_successor_was_retracted(db: MemoryDb) -> None:
    first, second, _ = chain(db)
    db.scope(T, P).delete(second.source_id, deleted_at=40)
    # second is superseded (by third), third still accepted: the chain's current claim
    with pytest.raises(InvalidInput, match="was superseded by"):
        db.scope(T, P).correct(first.claim_id, "x", recorded_at=50)


# --------------------------------------------------------------------------- browse


def test_browse_pages_through_everything_newest_first(db: MemoryDb) -> None:
    sam = db.scope(T, P)
    for i in range(7):
        sam.remember(f"note {i}", recorded_at=10 + i)
    sam.remember("fact", recorded_at=20, claim={"subject": "a", "predicate": "b", "value": "c"})
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    while True:
        page = sam.browse(limit=3, before=cursor)
        pages += 1
        seen += [(item["type"], item["recorded_at"]) for item in page.items]
        if page.next is None:
            break
        cursor = page.next
    assert pages == 3
    assert seen == [("source", 20), ("claim", 20), *[("source", 16 - i) for i in range(7)]]


def browse_all(sam: Any, limit: int, **filters: Any) -> list[tuple[int, str, str]]:
    seen: list[tuple[int, str, str]] = []
    cursor = None
    while True:
        page = sam.browse(limit=limit, before=cursor, **filters)
        seen += [(item["recorded_at"], item["type"], item["id"]) for item in page.items]
        if page.next is None:
            return seen
        cursor = page.next


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 100])
def test_browse_pages_equal_the_whole_order_with_ties(db: MemoryDb, limit: int) -> None:
    """Many sources and claims share recorded times: every page size yields the one order
    (recorded time, then source before claim, then id, all descending), each item once."""
    sam = db.scope(T, P)
    for i in range(12):
        claim = {"subject": "a", "predicate": f"p{i}", "value": "v"} if i % 3 else None
        sam.remember(f"note {i}", recorded_at=10 + i % 4, claim=claim)
    everything = browse_all(sam, 100)
    assert len(everything) == 12 + 8
    assert everything == sorted(everything, reverse=True)
    assert browse_all(sam, limit) == everything
    claims = browse_all(sam, limit, records="claims")
    assert claims == [row for row in everything if row[1] == "claim"]


def test_browse_reads_along_the_recorded_time_indexes(db: MemoryDb) -> None:
    """Each statement browse runs is one range of a zkr recorded-time index (store/indexes.py),
    with no sort of the scope: checked with EXPLAIN QUERY PLAN, not timing."""
    sam = db.scope(T, P)
    for i in range(5):
        claim = {"subject": "a", "predicate": "b", "value": f"{i}"}
        sam.remember(f"note {i}", recorded_at=10 + i, claim=claim)
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    try:
        first = sam.browse(limit=2)
        assert first.next is not None
        sam.browse(limit=2, before=first.next)
        sam.browse(limit=2, before=first.next, kind="fact")
        sam.browse(limit=2, records="sources")
    finally:
        db.conn.set_trace_callback(None)
    listed = [sql for sql in statements if "ORDER BY" in sql]
    assert len(listed) == 2 + 2 + 1 + 1
    for sql in listed:
        plan = " | ".join(row[3] for row in db.conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        index = "zkr_sources_recorded" if "FROM sources" in sql else "zkr_claims_recorded"
        assert f"SEARCH {'sources' if 'FROM sources' in sql else 'claims'} USING" in plan, plan
        assert index in plan and "TEMP B-TREE" not in plan, plan


def test_browse_filters(db: MemoryDb) -> None:
    sam = db.scope(T, P)
    sam.remember("screen text", kind="screen", recorded_at=10)
    pending = sam.remember(
        "maybe",
        recorded_at=11,
        claim={
            "subject": "a",
            "predicate": "b",
            "value": "c",
            "tier": "short_term",
            "processing_state": "pending",
        },
    )
    items = sam.browse(kind="screen").items
    assert [i["text"] for i in items] == ["screen text"]
    items = sam.browse(processing_state="pending").items
    assert [i["id"] for i in items] == [pending.claim_id]
    assert sam.browse(records="claims", status="retracted").items == []
    with pytest.raises(InvalidInput, match="tier must be one of"):
        sam.browse(tier="forever")
    with pytest.raises(InvalidInput, match="records must be one of"):
        sam.browse(records="everything")
    with pytest.raises(RequestError, match=r"^field `filters`: unknown field `color`$"):
        sam.browse(color="red")  # was a bare TypeError from BrowseRequest


def test_browse_refuses_a_cursor_of_an_unknown_type(db_path: str) -> None:
    """A ``before`` cursor whose ``type`` is neither ``source`` nor ``claim`` was accepted and
    bounded both lists as the other type, a page that silently skipped or repeated items."""
    cli(db_path, "remember", sam_acme(T, P)).json()
    first = cli(db_path, "browse", {"tenant_id": T, "person_id": P, "limit": 1}).json()
    cursor = {**first["next"], "type": "Claim"}
    request = {"tenant_id": T, "person_id": P, "limit": 1, "before": cursor}
    assert cli(db_path, "browse", request).error() == "before.type must be one of source, claim"


def test_browse_cli_shows_deleted_sources_without_text(db_path: str) -> None:
    stored = cli(db_path, "remember", sam_acme(T, P)).json()
    delete = {"tenant_id": T, "person_id": P, "source_id": stored["source_id"], "deleted_at": 20}
    cli(db_path, "delete", delete).json()
    page = cli(db_path, "browse", {"tenant_id": T, "person_id": P}).json()
    source = next(i for i in page["items"] if i["type"] == "source")
    assert source["text"] is None and source["deleted_at"] == 20
    claim = next(i for i in page["items"] if i["type"] == "claim")
    assert claim["status"] == "retracted" and page["next"] is None


# --------------------------------------------------------------------------- settle


def pending_claim(db: MemoryDb) -> Any:
    return db.scope(T, P).remember(
        "Sam might move to Lisbon",
        recorded_at=10,
        claim={
            "subject": "Sam",
            "predicate": "plans",
            "value": "Lisbon",
            "tier": "short_term",
            "processing_state": "pending",
        },
    )


def test_settle_makes_a_pending_claim_searchable(db: MemoryDb) -> None:
    stored = pending_claim(db)
    sam = db.scope(T, P)
    assert sam.search("Lisbon").items == []
    assert sam.settle(stored.claim_id, recorded_at=11).to_json() == {
        "claim_id": stored.claim_id,
        "processing_state": "processed",
    }
    assert [i.memory.id for i in sam.search("Lisbon").items] == [stored.claim_id]
    assert db.conn.execute(
        "SELECT operation_type, target_id, recorded_at FROM memory_operations"
    ).fetchall() == [("settle", stored.claim_id, 11)]
    # promote now works (it needs processed)
    sam.promote(stored.claim_id, recorded_at=12)


def test_settle_transitions_and_errors(db: MemoryDb) -> None:
    stored = pending_claim(db)
    sam = db.scope(T, P)
    with pytest.raises(InvalidInput, match="must not predate claim"):
        sam.settle(stored.claim_id, recorded_at=9)
    assert sam.settle(stored.claim_id, "blocked", recorded_at=11).processing_state == "blocked"
    assert sam.search("Lisbon").items == []
    before = dump(db.path)
    # same state: no-op, no commit
    assert sam.settle(stored.claim_id, "blocked", recorded_at=12).processing_state == "blocked"
    assert dump(db.path) == before
    with pytest.raises(InvalidInput, match="pending may become"):
        sam.settle(stored.claim_id, "pending", recorded_at=12)
    sam.settle(stored.claim_id, recorded_at=12)
    with pytest.raises(InvalidInput, match="cannot settle a processed claim to blocked"):
        sam.settle(stored.claim_id, "blocked", recorded_at=13)
    with pytest.raises(NotFound):
        db.scope(T, "ana").settle(stored.claim_id, recorded_at=13)
    fixed = sam.correct(stored.claim_id, "Porto", recorded_at=14)
    with pytest.raises(InvalidInput, match="settle requires an active claim"):
        sam.settle(stored.claim_id, recorded_at=15)
    assert fixed.superseded_claim_id == stored.claim_id


def test_settle_round_trips_through_export_and_apply(db: MemoryDb, tmp_path: Path) -> None:
    """settle -> export -> apply into an empty replica -> the replica's search shows it."""
    stored = pending_claim(db)
    db.scope(T, P).settle(stored.claim_id, recorded_at=11)
    pages = export_all(db, (T, P))
    commits = staged(pages)
    assert [r["kind"] for r in commits[-1]["records"]] == ["claim"]
    assert commits[-1]["records"][0]["record"]["processing_state"] == "processed"
    with MemoryDb.open(tmp_path / "replica.db") as replica:
        assert replica.scope(T, P).search("Lisbon").items == []
        result = replica.apply(ApplyRequest(T, P, 1, pages[0]["database_schema_version"], commits))
        assert result.commits_applied == 2
        hits = replica.scope(T, P).search("Lisbon").items
        assert [i.memory.id for i in hits] == [stored.claim_id]
    # also one commit at a time (the first applied alone leaves it pending)
    with MemoryDb.open(tmp_path / "replica2.db") as replica:
        replica.apply(ApplyRequest(T, P, 1, 10, commits[:1]))
        assert replica.scope(T, P).search("Lisbon").items == []
        replica.apply(ApplyRequest(T, P, 1, 10, commits[1:]))
        assert len(replica.scope(T, P).search("Lisbon").items) == 1


def test_settle_cli(db_path: str) -> None:
    request = sam_acme(T, P)
    request["claim"].update(tier="short_term", processing_state="pending")
    stored = cli(db_path, "remember", request).json()
    settle = {
        "tenant_id": T,
        "person_id": P,
        "claim_id": stored["claim_id"],
        "processing_state": "processed",
        "recorded_at": 11,
    }
    assert cli(db_path, "settle", settle).json() == {
        "claim_id": stored["claim_id"],
        "processing_state": "processed",
    }
    bad = {**settle, "processing_state": "done"}
    assert "unknown variant `done`" in cli(db_path, "settle", bad).error()
    search = {"tenant_id": T, "person_id": P, "query": "Acme"}
    assert cli(db_path, "search", search).json()["items"][0]["memory"]["kind"] == "claim"


# --------------------------------------------------------------------------- profile follows


def test_profile_follows_a_correction_and_replicas_agree(db: MemoryDb, tmp_path: Path) -> None:
    sam = db.scope(T, P)
    stored = sam.remember(
        "Sam lives in Berlin",
        recorded_at=10,
        claim={"subject": "Sam", "predicate": "city", "value": "Berlin", "kind": "profile_fact"},
    )
    old = sam.profile(stored.claim_id, "stable", recorded_at=11)
    fixed = sam.correct(stored.claim_id, "Paris", text="Sam moved to Paris", recorded_at=20)
    (entry,) = sam.profiles()
    assert (entry.key, entry.value, entry.claim_id) == ("city", "Paris", fixed.claim_id)
    assert entry.stability.value == "stable" and entry.recorded_at == 20 and entry.id != old.id
    commits = staged(export_all(db, (T, P)))
    assert [r["kind"] for r in commits[-2]["records"]][-1] == "deletion"
    assert [r["kind"] for r in commits[-1]["records"]] == ["profile"]
    with MemoryDb.open(tmp_path / "replica.db") as replica:
        replica.apply(ApplyRequest(T, P, 1, 10, commits))
        assert replica.scope(T, P).profiles() == [entry]


def test_profile_follows_is_off_by_default_in_the_cli(db_path: str) -> None:
    stored = cli(db_path, "remember", sam_acme(T, P, claim_kind="profile_fact")).json()
    scope = {"tenant_id": T, "person_id": P}
    profile = {**scope, "stability": "current", "claim_id": stored["claim_id"], "recorded_at": 11}
    cli(db_path, "profile", profile).json()
    correct = {
        **scope,
        "claim_id": stored["claim_id"],
        "text": "Sam moved to Globex",
        "value": "Globex",
        "valid_at": 20,
        "recorded_at": 20,
    }
    fixed = cli(db_path, "correct", correct).json()
    assert cli(db_path, "profiles", scope).json() == []
    again = {**correct, "claim_id": fixed["claim_id"], "value": "Initech", "recorded_at": 30}
    cli(db_path, "profile", {**profile, "claim_id": fixed["claim_id"], "recorded_at": 21}).json()
    cli(db_path, "correct", {**again, "valid_at": 30, "profile_follows": True}).json()
    (entry,) = cli(db_path, "profiles", scope).json()
    assert (entry["value"], entry["recorded_at"]) == ("Initech", 30)
    bad = {**again, "claim_id": "x", "profile_follows": "yes"}
    assert "expected a boolean" in cli(db_path, "correct", bad).error()
