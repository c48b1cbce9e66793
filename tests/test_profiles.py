"""profile, profiles, review and reviews on real files (spec/lifecycle.md §1.6, §3.8-3.11, §4)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import P, T, cli, dump, remember, sam_acme
from tests.test_lifecycle import (
    claim_row,
    claimed,
    commits,
    correct_req,
    delete_req,
    expect_error,
    kinds,
    limit_req,
    link_req,
    outbox,
    profile_req,
    review_req,
    tier_req,
)
from zkr import InvalidInput, MemoryDb
from zkr.codec import canonical
from zkr.model import ClaimKind, ProcessingState, ProfileEntry, Relation, Stability, Tier
from zkr.store.profiles import PAGE_LIMIT, check_page


def fact(db: MemoryDb, key: str, value: str, *, at: int = 10, **options: Any) -> Any:
    return claimed(
        db,
        f"Sam {key} is {value}",
        ("Sam", key, value),
        at=at,
        claim_kind=ClaimKind.PROFILE_FACT,
        **options,
    )


# --------------------------------------------------------------------------- §4 scenario 10


def test_s10_profile_lifecycle(db: MemoryDb, db_path: str) -> None:
    acme = fact(db, "employer", "Acme")
    expect_error(
        db,
        lambda: db.profile(profile_req(acme.claim_id, 9)),
        "profile entry cannot predate its backing claim",
        InvalidInput,
    )
    entry = db.profile(profile_req(acme.claim_id, 11))
    assert entry == ProfileEntry(
        entry.id, T, P, "employer", "Acme", Stability.CURRENT, acme.claim_id, 11
    )
    assert len(entry.id) == 32
    assert db.profiles(limit_req()) == [entry]
    before = dump(db_path)
    assert db.profile(profile_req(acme.claim_id, 11)) == entry  # identical replay: no write
    assert dump(db_path) == before
    beta = fact(db, "employer", "Beta", at=11)
    expect_error(
        db,
        lambda: db.profile(profile_req(beta.claim_id, 11)),
        "profile replacement must advance recorded_at",
    )
    replaced = db.profile(profile_req(beta.claim_id, 12))
    assert (replaced.id, replaced.key, replaced.value) == (entry.id, "employer", "Beta")
    assert db.profiles(limit_req()) == [replaced]
    assert claim_row(db, acme.claim_id)["status"] == "accepted"  # old backing claim untouched
    raw = remember(db, "Sam quit Beta", at=13)
    db.link(link_req(beta.claim_id, raw.evidence_id, Relation.CONTRADICTS, 9000))
    expect_error(
        db,
        lambda: db.link(
            link_req(beta.claim_id, raw.evidence_id, Relation.CONTRADICTS, 9000, t="b")
        ),
        "record not found",
    )
    db.delete(delete_req(beta.source_id, 20))
    assert db.profiles(limit_req()) == []
    result = cli(
        db_path,
        "profile",
        {
            "tenant_id": T,
            "person_id": P,
            "stability": "current",
            "claim_id": acme.claim_id,
            "recorded_at": 30,
            "key": "employer",
            "value": "Acme",
        },
    )
    assert "unknown field `key`" in result.error()


# --------------------------------------------------------------------------- §4 scenarios 11-12


def test_s11_page_limit_is_an_error(db: MemoryDb) -> None:
    for i, key in enumerate(("a", "b")):
        c = fact(db, key, "v" * 600_000, at=10 + i)
        db.profile(profile_req(c.claim_id, 20))
    expect_error(
        db,
        lambda: db.profiles(limit_req(100)),
        "read page exceeds the 1000000-byte page limit",
        InvalidInput,
    )
    assert len(db.profiles(limit_req(1))) == 1
    evidence = remember(db, "day", at=10).evidence_id
    for day in ("2026-07-20", "2026-07-21"):
        db.review(review_req([evidence], 30, day=day, summary="s" * 600_000))
    expect_error(
        db, lambda: db.reviews(limit_req(100)), "read page exceeds the 1000000-byte page limit"
    )
    assert [r.day for r in db.reviews(limit_req(1))] == ["2026-07-21"]


def test_s12_reviews_disappear_with_their_evidence(db: MemoryDb) -> None:
    r = remember(db, "Sam visited the museum", at=10)
    review_id = db.review(review_req([r.evidence_id], 12)).id
    assert [x.id for x in db.reviews(limit_req(1))] == [review_id]
    db.delete(delete_req(r.source_id, 30))
    assert db.reviews(limit_req()) == []
    last = commits(db)[-1]
    assert last["records"][-1]["record"]["target"] == {"kind": "daily_review", "id": review_id}


# ------------------------------------------------------------------ §4 scenarios 16, 21, 30


def test_s16_feed_of_profile_review_and_their_deletions(db: MemoryDb) -> None:
    main = fact(db, "city", "Berlin")
    extra = remember(db, "Sam mentioned Berlin", at=10)
    db.link(link_req(main.claim_id, extra.evidence_id, Relation.SUPPORTS, 9000))
    entry = db.profile(profile_req(main.claim_id, 11))
    review_id = db.review(review_req([main.evidence_id], 12)).id
    db.conn.execute(
        "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
        " dimension, input_hash, normalization, distance, vector, target_revision, created_at)"
        " VALUES (?, ?, 'claim', ?, 'm', 'v', 1, 'sha256:0', '\"none\"', '\"dot\"', '[1.0]', 10,"
        " 0)",
        (T, P, main.claim_id),
    )
    count = len(commits(db))
    assert db.delete(delete_req(extra.source_id, 19)).claim_count == 0
    assert db.delete(delete_req(main.source_id, 20)).claim_count == 1
    feed = commits(db)
    assert len(feed) == count + 2  # the embedding added no commit
    records = [r for commit in feed for r in commit["records"]]
    assert {
        "kind": "claim_evidence",
        "record": {
            "tenant_id": T,
            "person_id": P,
            "claim_id": main.claim_id,
            "evidence_id": extra.evidence_id,
            "relation": "supports",
            "confidence_basis_points": 9000,
        },
    } in records
    assert {"kind": "profile", "record": entry.to_json()} in records
    assert {
        "kind": "daily_review",
        "record": {
            "id": review_id,
            "tenant_id": T,
            "person_id": P,
            "day": "2026-07-21",
            "summary": "A day",
            "evidence_ids": [main.evidence_id],
            "recorded_at": 12,
        },
    } in records
    assert kinds(feed[-1]) == [
        "source",
        "deletion:source",
        "evidence",
        "deletion:evidence",
        "claim",
        "deletion:profile_entry",
        "deletion:daily_review",
    ]
    assert [r["record"]["target"]["id"] for r in feed[-1]["records"][-2:]] == [entry.id, review_id]
    assert {r["record"]["deleted_at"] for r in feed[-1]["records"] if r["kind"] == "deletion"} == {
        20
    }


def test_s21_cli_profile_with_contradiction(db_path: str) -> None:
    scope = {"tenant_id": T, "person_id": P}
    c = cli(
        db_path,
        "remember",
        sam_acme(claim_kind="profile_fact"),
    ).json()
    entry = cli(
        db_path,
        "profile",
        {**scope, "stability": "stable", "claim_id": c["claim_id"], "recorded_at": 11},
    )
    assert list(entry.json()) == sorted(entry.json())
    assert entry.json()["key"] == "employer" and entry.json()["stability"] == "stable"
    raw = cli(
        db_path,
        "remember",
        {**scope, "kind": "conversation", "text": "Sam left", "captured_at": 12, "recorded_at": 12},
    ).json()
    linked = cli(
        db_path,
        "link",
        {
            **scope,
            "claim_id": c["claim_id"],
            "evidence_id": raw["evidence_id"],
            "relation": "contradicts",
            "confidence_basis_points": 9000,
        },
    )
    assert linked.json() == {"ok": True}
    listed = cli(db_path, "profiles", scope).json()
    assert listed == [entry.json()]


def test_s30_correcting_a_profile_claim_removes_its_entry(db: MemoryDb) -> None:
    c = fact(db, "city", "Berlin")
    entry = db.profile(profile_req(c.claim_id, 11))
    fix = db.correct(correct_req(c.claim_id, text="Sam moved to Lisbon", value="Lisbon"))
    assert db.profiles(limit_req()) == []
    last = commits(db)[-1]
    assert kinds(last)[-1] == "deletion:profile_entry"
    assert last["records"][-1]["record"] == {
        "tenant_id": T,
        "person_id": P,
        "target": {"kind": "profile_entry", "id": entry.id},
        "deleted_at": 20,
    }
    # No entry is recreated for the replacement; the caller profiles it again (§5 item 33).
    again = db.profile(profile_req(fix.claim_id, 21))
    assert (again.value, again.id == entry.id) == ("Lisbon", False)


# --------------------------------------------------------------------------- profile in detail


def test_profile_rows_feed_and_stability(db: MemoryDb) -> None:
    c = fact(db, "language", "Portuguese")
    entry = db.profile(profile_req(c.claim_id, 12, Stability.STABLE))
    assert db.conn.execute(
        "SELECT id, tenant_id, person_id, key, value, stability, claim_id, recorded_at"
        " FROM profile_entries"
    ).fetchall() == [(entry.id, T, P, "language", "Portuguese", '"stable"', c.claim_id, 12)]
    last = commits(db)[-1]
    assert last["recorded_at"] == 12
    assert last["records"] == [{"kind": "profile", "record": entry.to_json()}]
    assert list(last["records"][0]["record"]) == [
        "id",
        "tenant_id",
        "person_id",
        "key",
        "value",
        "stability",
        "claim_id",
        "recorded_at",
    ]
    # Same claim, new stability: a replacement (needs a later recorded_at), same id.
    expect_error(
        db,
        lambda: db.profile(profile_req(c.claim_id, 12)),
        "profile replacement must advance recorded_at",
    )
    current = db.profile(profile_req(c.claim_id, 13))
    assert (current.id, current.stability) == (entry.id, Stability.CURRENT)
    # The identical payload at a later recorded_at rewrites and commits (§5 item 21).
    count = len(commits(db))
    db.profile(profile_req(c.claim_id, 14))
    assert len(commits(db)) == count + 1
    assert outbox(db) == []


def test_profile_liveness_ignores_tier_and_processing(db: MemoryDb) -> None:
    archived = fact(db, "city", "Berlin")
    db.archive(tier_req(archived.claim_id, 11))
    pending = fact(db, "pet", "cat", tier=Tier.SHORT_TERM, processing_state=ProcessingState.PENDING)
    plain = claimed(db, "Sam likes tea", ("Sam", "drink", "tea"))
    a = db.profile(profile_req(archived.claim_id, 12))
    b = db.profile(profile_req(pending.claim_id, 12))
    expect_error(db, lambda: db.profile(profile_req(plain.claim_id, 12)), "record not found")
    assert {e.id for e in db.profiles(limit_req())} == {a.id, b.id}
    # A retracted claim whose entry survived (as after apply) is hidden by the read path.
    db.conn.execute(
        "UPDATE claims SET status = 'retracted', recorded_until = 15 WHERE id = ?",
        (pending.claim_id,),
    )
    assert [e.id for e in db.profiles(limit_req())] == [a.id]
    expect_error(db, lambda: db.profile(profile_req(pending.claim_id, 20)), "record not found")


def test_profiles_order_and_limit(db: MemoryDb) -> None:
    entries = []
    for i in range(12):
        c = fact(db, f"k{i}", "v")
        entries.append(db.profile(profile_req(c.claim_id, 20 + i % 3)))
    expected = sorted(entries, key=lambda e: (-e.recorded_at, e.id))
    assert db.profiles(limit_req(0)) == expected[:10]
    assert db.profiles(limit_req(5)) == expected[:5]
    assert db.profiles(limit_req(2**32 - 1)) == expected
    assert db.profiles(limit_req(t="t2")) == []


# --------------------------------------------------------------------------- review in detail


def test_review_rows_feed_and_duplicates(db: MemoryDb) -> None:
    a = remember(db, "first", at=10)
    b = remember(db, "second", at=11)
    ids = [b.evidence_id, a.evidence_id, b.evidence_id]
    first = db.review(review_req(ids, 12, day="not a date")).id
    second = db.review(review_req(ids, 12, day="not a date")).id  # not idempotent
    assert first != second and len(first) == 32
    stored = db.conn.execute(
        "SELECT day, summary, evidence_ids, recorded_at FROM daily_reviews WHERE id = ?", (first,)
    ).fetchone()
    assert stored == ("not a date", "A day", json.dumps(ids, separators=(",", ":")), 12)
    last = commits(db)[-1]
    assert last["recorded_at"] == 12
    assert last["records"][0]["record"]["evidence_ids"] == ids
    listed = db.reviews(limit_req())
    assert [r.to_json() for r in listed] == [
        {"id": rid, "day": "not a date", "summary": "A day", "evidence_ids": ids, "recorded_at": 12}
        for rid in sorted((first, second))
    ]
    assert outbox(db) == []


def test_review_of_deleted_evidence_is_unavailable(db: MemoryDb) -> None:
    r = remember(db, "first", at=10)
    db.delete(delete_req(r.source_id, 11))
    expect_error(
        db,
        lambda: db.review(review_req([r.evidence_id], 12)),
        f"evidence {r.evidence_id} is unavailable",
    )


def test_reviews_order_and_limit(db: MemoryDb) -> None:
    evidence = remember(db, "note", at=10).evidence_id
    made = []
    for i in range(101):
        day = f"2026-07-{10 + i % 5:02d}"
        recorded = 100 + i % 2
        made.append((day, recorded, db.review(review_req([evidence], recorded, day=day)).id))
    expected = [rid for _, _, rid in sorted(made, key=lambda m: (m[0], m[1], _neg(m[2])))][::-1]
    assert [r.id for r in db.reviews(limit_req(0))] == expected[:10]
    assert [r.id for r in db.reviews(limit_req(101))] == expected[:100]
    assert [r.id for r in db.reviews(limit_req(3))] == expected[:3]


def _neg(text: str) -> tuple[int, ...]:
    """Sort key that reverses the order of equal-length lowercase hex ids."""
    return tuple(-ord(ch) for ch in text)


def test_cli_reviews_shape(db_path: str) -> None:
    scope = {"tenant_id": T, "person_id": P}
    r = cli(
        db_path,
        "remember",
        {**scope, "kind": "document", "text": "doc", "captured_at": 1, "recorded_at": 1},
    ).json()
    made = cli(
        db_path,
        "review",
        {**scope, "day": "d", "summary": "s", "evidence_ids": [r["evidence_id"]], "recorded_at": 2},
    ).json()
    listed = cli(db_path, "reviews", {**scope, "limit": 1}).stdout
    assert listed == (
        f'[{{"day":"d","evidence_ids":["{r["evidence_id"]}"],"id":"{made["id"]}",'
        '"recorded_at":2,"summary":"s"}]\n'
    )


# --------------------------------------------------------------------------- page cap (§1.6)


def _item(size: int) -> dict[str, Any]:
    """A JSON object whose compact form is exactly ``size`` bytes."""
    base = len(canonical({"v": ""}))
    return {"v": "é" * ((size - base) // 2) + "x" * ((size - base) % 2)}


def test_check_page_boundaries() -> None:
    assert len(canonical(_item(999_998)).encode()) == 999_998
    check_page([_item(999_998)])  # 2 + 999,998 = 1,000,000
    with pytest.raises(InvalidInput, match=r"^read record exceeds the 1000000-byte page limit$"):
        check_page([_item(999_999)])
    # Two items: 2 + a + 1 + b.
    check_page([_item(500_000), _item(499_997)])
    with pytest.raises(InvalidInput, match=r"^read page exceeds the 1000000-byte page limit$"):
        check_page([_item(500_000), _item(499_998)])
    # A later oversized item is a record error, even though the page is also too big.
    with pytest.raises(InvalidInput, match="read record exceeds"):
        check_page([_item(10), _item(999_999)])
    check_page([])
    assert PAGE_LIMIT == 1_000_000


def test_single_oversized_profile_is_a_record_error(db: MemoryDb) -> None:
    c = fact(db, "bio", "b" * 1_000_000)
    db.profile(profile_req(c.claim_id, 11))
    expect_error(
        db, lambda: db.profiles(limit_req()), "read record exceeds the 1000000-byte page limit"
    )
