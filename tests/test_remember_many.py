"""``MemoryDb.remember_many``: several remembers in one transaction, all stored or none."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.conftest import P, T, dump
from zkr import InvalidInput, MemoryDb, RequestError, StorageError
from zkr.model import (
    ClaimInput,
    ClaimKind,
    ExportRequest,
    RememberRequest,
    SearchRequest,
    SourceKind,
)


def turn(i: int, text: str | None = None, **extra: Any) -> RememberRequest:
    return RememberRequest(
        T,
        P,
        SourceKind.CONVERSATION,
        text if text is not None else f"turn {i} about the garden",
        100 + i,
        100 + i,
        **extra,
    )


def feed(db: MemoryDb) -> list[dict[str, Any]]:
    page = db.export(ExportRequest(T, P, 1, limit=1000))
    commits: list[dict[str, Any]] = page.commits
    return commits


def test_batch_equals_one_remember_each(tmp_path: Any) -> None:
    """Same rows and the same feed shape (one commit per request) as separate calls."""
    claim = ClaimInput("user", "grows", "tomatoes", ClaimKind.FACT, 101)
    batch = [turn(0), turn(1, claim=claim), turn(2, ingestion_key="k2")]
    with MemoryDb.open(str(tmp_path / "one.db")) as one:
        singles = [one.remember(req) for req in batch]
        single_feed = feed(one)
    with MemoryDb.open(str(tmp_path / "many.db")) as many:
        results = many.remember_many(batch)
        many_feed = feed(many)
        pack = many.search(SearchRequest(T, P, "garden"))
    assert [r.claim_id is None for r in results] == [s.claim_id is None for s in singles]
    assert len(many_feed) == len(single_feed) == 3
    kinds = [[event["kind"] for event in c["records"]] for c in many_feed]
    assert kinds == [[event["kind"] for event in c["records"]] for c in single_feed]
    assert kinds[1] == ["source", "evidence", "claim", "claim_evidence"]
    assert results[1].claim_id in [item.memory.id for item in pack.items]  # claim replaces source
    conn = sqlite3.connect(str(tmp_path / "many.db"))
    assert conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 3
    assert conn.execute("SELECT COUNT(*) FROM memory_commits").fetchone()[0] == 3


def test_key_repeated_in_batch_replays_the_first(db: MemoryDb) -> None:
    first, again = db.remember_many([turn(0, ingestion_key="k"), turn(0, ingestion_key="k")])
    assert first == again
    assert db.remember(turn(0, ingestion_key="k")) == first


def test_a_late_failure_stores_nothing(db: MemoryDb, db_path: str) -> None:
    db.remember(turn(9, ingestion_key="taken"))
    before = dump(db_path)
    batch = [turn(0), turn(1), turn(2, "different text", ingestion_key="taken")]
    with pytest.raises(InvalidInput) as caught:
        db.remember_many(batch)
    assert str(caught.value).startswith("requests[2]: ")
    assert dump(db_path) == before


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (turn(1, "   "), InvalidInput, "requests[1]: text must not be empty"),
        (turn(1)._replace(captured_at=1.5), RequestError, "requests[1]: field `captured_at`"),  # type: ignore[arg-type]
        (
            turn(1, "x" * 1_100_000),
            StorageError,
            "requests[1]: export record exceeds 1048576 bytes",
        ),
    ],
)
def test_each_request_is_checked_with_its_index(
    db: MemoryDb, db_path: str, bad: RememberRequest, error: type[Exception], message: str
) -> None:
    before = dump(db_path)
    with pytest.raises(error) as caught:
        db.remember_many([turn(0), bad, turn(2)])
    assert str(caught.value).startswith(message)
    assert dump(db_path) == before


def test_empty_batch_writes_nothing(db: MemoryDb, db_path: str) -> None:
    before = dump(db_path)
    assert db.remember_many([]) == []
    assert dump(db_path) == before


def test_a_generator_is_accepted(db: MemoryDb) -> None:
    results = db.remember_many(turn(i) for i in range(3))
    assert len(results) == 3
    assert len(feed(db)) == 3
