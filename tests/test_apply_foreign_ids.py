"""``apply`` and ids held by another scope (issue 18, fault 3; docs/decisions-sync.md).

Ids are global primary keys in the SQLite layout. A record whose id another scope's row holds
is refused with one message whatever its kind and whatever the row behind it, after every check
a fresh id would also go through, and the whole batch rolls back: no raw SQLite text, no
hint of the other scope, never a silent skip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import dump
from zkr import InvalidInput, MemoryDb
from zkr.model import (
    ApplyRequest,
    ExportRequest,
    ProfileRequest,
    RememberRequest,
    ReviewRequest,
)

OWNER = ("acme", "sam")
OTHER = ("acme", "ana")


def _authored(path: Path) -> tuple[dict[str, str], list[Any]]:
    """One scope's history in its own file: ids of each kind and the exported commits."""
    with MemoryDb.open(path) as db:
        first = db.remember(
            RememberRequest.from_json(
                {
                    "tenant_id": OWNER[0],
                    "person_id": OWNER[1],
                    "kind": "conversation",
                    "text": "Sam moved to Lisbon",
                    "captured_at": 10,
                    "recorded_at": 10,
                    "claim": {
                        "subject": "Sam",
                        "predicate": "city",
                        "value": "Lisbon",
                        "kind": "profile_fact",
                        "valid_from": 10,
                    },
                }
            )
        )
        assert first.claim_id is not None
        profile = db.profile(
            ProfileRequest.from_json(
                {
                    "tenant_id": OWNER[0],
                    "person_id": OWNER[1],
                    "stability": "current",
                    "claim_id": first.claim_id,
                    "recorded_at": 11,
                }
            )
        )
        review = db.review(
            ReviewRequest.from_json(
                {
                    "tenant_id": OWNER[0],
                    "person_id": OWNER[1],
                    "day": "2024-01-01",
                    "summary": "moved",
                    "evidence_ids": [first.evidence_id],
                    "recorded_at": 12,
                }
            )
        )
        page = db.export(ExportRequest(*OWNER, export_format=1, limit=100))
    assert page.complete
    ids = {
        "source": first.source_id,
        "evidence": first.evidence_id,
        "claim": first.claim_id,
        "profile": profile.id,
        "daily_review": review.id,
    }
    return ids, page.commits


def _rewritten(value: Any, mapping: dict[str, str]) -> Any:
    """``value`` with every string found in ``mapping`` replaced (ids, tenant and person)."""
    if isinstance(value, dict):
        return {key: _rewritten(item, mapping) for key, item in value.items()}
    if isinstance(value, list):
        return [_rewritten(item, mapping) for item in value]
    if isinstance(value, str):
        return mapping.get(value, value)
    return value


def _apply(db: MemoryDb, scope: tuple[str, str], commits: list[Any]) -> dict[str, int]:
    return db.apply(
        ApplyRequest.from_json(
            {
                "tenant_id": scope[0],
                "person_id": scope[1],
                "export_format": 1,
                "database_schema_version": 10,
                "commits": commits,
            }
        )
    ).to_json()


def _into_other_scope(commits: list[Any], ids: dict[str, str], keep: str) -> list[Any]:
    """The owner's commits moved to OTHER, every id fresh except the one of kind ``keep``."""
    mapping = {OWNER[1]: OTHER[1]}
    for index, (kind, record_id) in enumerate(ids.items()):
        if kind != keep:
            mapping[record_id] = f"{index:02d}" + "f" * 30
    return [_rewritten(commit, mapping) for commit in commits]


@pytest.fixture
def authored(tmp_path: Path) -> tuple[dict[str, str], list[Any]]:
    return _authored(tmp_path / "origin.db")


@pytest.mark.parametrize("kind", ["source", "evidence", "claim", "profile", "daily_review"])
def test_an_id_held_by_another_scope_is_refused_with_one_message(
    tmp_path: Path, authored: tuple[dict[str, str], list[Any]], kind: str
) -> None:
    ids, commits = authored
    path = tmp_path / "replica.db"
    with MemoryDb.open(path) as db:
        assert _apply(db, OWNER, commits)["records_skipped"] == 0
        before = dump(str(path))
        with pytest.raises(InvalidInput) as refused:
            _apply(db, OTHER, _into_other_scope(commits, ids, keep=kind))
        assert str(refused.value) == (
            f"applied {kind} {ids[kind]} is refused: its id is already taken in this database"
        )
        assert dump(str(path)) == before
        # With that id fresh too, the same records are accepted: only the id was in the way.
        fresh = _into_other_scope(commits, {**ids, "spare": "x"}, keep="spare")
        assert _apply(db, OTHER, fresh)["commits_applied"] == len(commits)


def test_the_refusal_comes_after_every_check_a_fresh_id_gets(
    tmp_path: Path, authored: tuple[dict[str, str], list[Any]]
) -> None:
    """A record that fails for its own reason fails the same way whether its id is taken or
    not, so the answer says nothing about other scopes beyond what a valid record must."""
    ids, commits = authored
    path = tmp_path / "replica.db"
    with MemoryDb.open(path) as db:
        _apply(db, OWNER, commits)
        messages = []
        for keep in ("claim", "spare"):
            moved = _into_other_scope(commits, {**ids, "spare": "x"}, keep=keep)
            for record in moved[0]["records"]:
                if record["kind"] == "claim":
                    record["record"]["valid_time"]["until"] = record["record"]["valid_time"]["from"]
            with pytest.raises(InvalidInput) as refused:
                _apply(db, OTHER, moved)
            messages.append(str(refused.value))
        assert messages == ["applied claim carries an invalid time interval"] * 2


def test_an_occupied_id_blocks_the_owners_sync_loudly_never_silently(
    tmp_path: Path, authored: tuple[dict[str, str], list[Any]]
) -> None:
    ids, commits = authored
    path = tmp_path / "replica.db"
    with MemoryDb.open(path) as db:
        squatted = [_rewritten(commit, {OWNER[1]: OTHER[1]}) for commit in commits]
        assert _apply(db, OTHER, squatted)["commits_applied"] == len(commits)
        before = dump(str(path))
        with pytest.raises(InvalidInput) as refused:
            _apply(db, OWNER, commits)
        assert str(refused.value) == (
            f"applied source {ids['source']} is refused: its id is already taken in this database"
        )
        assert dump(str(path)) == before
