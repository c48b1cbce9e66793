"""zkr's search index (store/search_index.py): kept current by every writer, rebuilt when
missing, private when the file is read-only, never part of the feed."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import P, T, remember
from zkr import MemoryDb, StorageError
from zkr.model import (
    DeleteRequest,
    EraseRequest,
    ExportRequest,
    LimitRequest,
    SearchRequest,
    SourceKind,
)
from zkr.store.terms import MAX_DOCUMENT_TERMS


def found(db: MemoryDb, query: str) -> list[str]:
    return [item.excerpt for item in db.search(SearchRequest(T, P, query)).items]


def zkr_objects(path: str) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'zkr_search%'")
        }
    finally:
        conn.close()


def insert(conn: sqlite3.Connection, table: str, values: dict[str, object]) -> None:
    marks = ", ".join("?" for _ in values)
    conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})", [*values.values()])


def test_writes_by_another_program_are_indexed_through_the_triggers(
    db: MemoryDb, db_path: str
) -> None:
    """A writer that knows nothing of the index (the reference) fires the zkr_ triggers."""
    remember(db, "the first note about kayaks")
    assert found(db, "kayak") == ["the first note about kayaks"]
    other = sqlite3.connect(db_path)
    with other:
        row = other.execute("SELECT * FROM sources LIMIT 1").fetchone()
        columns = [d[0] for d in other.execute("SELECT * FROM sources LIMIT 1").description]
        values = dict(zip(columns, row, strict=True))
        values.update(id="f" * 32, content="a canoe trip written elsewhere")
        insert(other, "sources", values)
        ev = other.execute("SELECT * FROM evidence LIMIT 1").fetchone()
        ecols = [d[0] for d in other.execute("SELECT * FROM evidence LIMIT 1").description]
        evalues = dict(zip(ecols, ev, strict=True))
        evalues.update(id="e" * 32, source_id="f" * 32)
        insert(other, "evidence", evalues)
        queued = other.execute("SELECT kind, target FROM zkr_search_queue").fetchall()
        assert ("source", "f" * 32) in queued
        other.execute("UPDATE sources SET deleted_at = 50 WHERE id = ?", (values["id"],))
    other.close()
    assert found(db, "canoe") == []
    other = sqlite3.connect(db_path)
    with other:
        other.execute("UPDATE sources SET deleted_at = NULL WHERE id = ?", ("f" * 32,))
    other.close()
    assert found(db, "canoe trips") == ["a canoe trip written elsewhere"]


def test_index_is_built_when_missing_and_never_exported(db_path: str) -> None:
    with MemoryDb.open(db_path) as db:
        for i in range(30):
            remember(db, f"note {i}: {'blueberries' if i % 7 == 0 else 'apples'} at breakfast")
        assert len(found(db, "blueberry")) == 5
        page = db.export(ExportRequest(T, P, 1, limit=100))
    assert "zkr_" not in str(page)
    conn = sqlite3.connect(db_path)
    with conn:  # a file written or migrated by the reference has none of it
        for name in sorted(zkr_objects(db_path), reverse=True):
            kind = "TRIGGER" if name.endswith(("insert", "update", "delete")) else "TABLE"
            conn.execute(f"DROP {kind} IF EXISTS {name}")
        conn.execute("DROP TABLE IF EXISTS zkr_fts")
    conn.close()
    assert zkr_objects(db_path) == set()
    with MemoryDb.open(db_path) as db:
        assert len(found(db, "blueberry")) == 5
    assert "zkr_search_source_insert" in zkr_objects(db_path)


def test_outdated_index_version_is_rebuilt(db: MemoryDb, db_path: str) -> None:
    remember(db, "violin lessons on Monday")
    assert found(db, "violins") == ["violin lessons on Monday"]
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("UPDATE zkr_search_meta SET value = '0' WHERE key = 'version'")
        conn.execute("DELETE FROM zkr_fts")
    conn.close()
    assert found(db, "violins") == ["violin lessons on Monday"]


def test_read_only_file_is_searched_with_a_private_index(tmp_path: Path) -> None:
    path = str(tmp_path / "ro.db")
    with MemoryDb.open(path) as db:
        remember(db, "hiking boots are in the garage")
    conn = sqlite3.connect(path)
    with conn:  # as the reference leaves it: no index, or a non-empty queue
        conn.execute("DROP TABLE IF EXISTS zkr_fts")
    conn.close()
    with MemoryDb.open(f"file:{path}?mode=ro") as db:
        assert found(db, "hike boot") == ["hiking boots are in the garage"]
        assert found(db, "garages") == ["hiking boots are in the garage"]
    assert "zkr_fts" not in zkr_objects(path)


def test_a_locked_file_is_searched_with_what_is_indexed(db: MemoryDb, db_path: str) -> None:
    """A search never fails because another writer holds the file: the queued records wait."""
    remember(db, "tulips in the front garden")
    assert found(db, "tulip") == ["tulips in the front garden"]
    remember(db, "tulip bulbs ordered")
    db.conn.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        assert found(db, "tulip") == ["tulips in the front garden"]
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert sorted(found(db, "tulip")) == ["tulip bulbs ordered", "tulips in the front garden"]


def test_the_index_check_is_skipped_only_while_nothing_was_committed(
    db: MemoryDb, db_path: str
) -> None:
    """A long-lived handle (``zkr serve``) checks the index's tables and queue again after any
    commit: its own writes, another connection's (a schema change alone included), ``erase``."""
    first = remember(db, "kayak on the lake at dawn")
    assert found(db, "kayak") == ["kayak on the lake at dawn"]  # drains the queue
    assert found(db, "kayak") == ["kayak on the lake at dawn"]  # sees the index current
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    assert found(db, "kayak") == ["kayak on the lake at dawn"]
    db.conn.set_trace_callback(None)
    assert not [s for s in statements if "sqlite_master" in s or "zkr_search_queue" in s]
    remember(db, "kayak paddles in the shed")  # this connection's own write
    assert len(found(db, "kayak")) == 2
    other = sqlite3.connect(db_path)
    with other:  # another connection changes the schema only: the index is gone
        other.execute("DROP TABLE zkr_fts")
    other.close()
    assert len(found(db, "kayak")) == 2
    db.delete(DeleteRequest(T, P, first.source_id, 20))
    db.erase(EraseRequest(T, P, dry_run=False))  # drops the index on this connection
    assert found(db, "kayak") == ["kayak paddles in the shed"]
    assert "zkr_search_queue" in zkr_objects(db_path)


def test_a_search_answers_when_the_file_has_no_room_for_its_queue(
    db: MemoryDb, db_path: str
) -> None:
    """A full disk (SQLITE_FULL, here ``max_page_count``) does not fail a search that cannot
    write its queued index updates: it answers exactly from a private copy, the queue stays in
    the file, and the first search after a commit (room again) drains it (newcomer finding)."""
    first = remember(db, "kayak on the lake at dawn")
    assert found(db, "kayak") == ["kayak on the lake at dawn"]
    for i in range(40):  # enough queued text that draining it needs new pages
        remember(db, f"kayak trip {i} along the northern shore with {i} friends and paddles")
    db.delete(DeleteRequest(T, P, first.source_id, 20))  # queued too: must not come back
    queued = _queued(db_path)
    assert queued > 40
    (pages,) = db.conn.execute("PRAGMA page_count").fetchone()
    db.conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StorageError, match="database or disk is full"):
        remember(db, "kayak " + " ".join(f"word{i}" for i in range(5000)))
    assert len(found(db, "kayak")) == 10
    assert found(db, "northern shore 17 friends")[0].startswith("kayak trip 17 ")
    assert "kayak on the lake at dawn" not in found(db, "lake dawn")
    assert _queued(db_path) == queued  # nothing drained, nothing lost
    db.conn.execute(f"PRAGMA max_page_count = {pages * 100}")
    remember(db, "a kayak seat cushion")  # a commit: the private copy is stale
    assert found(db, "cushion") == ["a kayak seat cushion"]
    assert _queued(db_path) == 0
    assert "kayak on the lake at dawn" not in found(db, "lake dawn")


def _queued(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM zkr_search_queue").fetchone()[0])
    finally:
        conn.close()


def test_a_read_only_handle_sees_later_writes_by_others(tmp_path: Path) -> None:
    """The private copy was built once per connection: a long-lived read-only handle never found
    what another process remembered later. It is now rebuilt after the next commit."""
    path = str(tmp_path / "ro.db")
    with MemoryDb.open(path) as db:
        remember(db, "hiking boots are in the garage")  # no search yet: no index in the file
        with MemoryDb.open(f"file:{path}?mode=ro") as reader:
            assert found(reader, "boots") == ["hiking boots are in the garage"]
            remember(db, "rain boots by the door")
            assert sorted(found(reader, "boots")) == [
                "hiking boots are in the garage",
                "rain boots by the door",
            ]


def _index_state(path: str) -> tuple[list[tuple[object, ...]], ...]:
    """The index's statistics and documents as stored, and the statistics recounted from the
    documents' bodies (they must agree)."""
    conn = sqlite3.connect(path)
    try:
        terms = conn.execute("SELECT term, docs FROM zkr_search_terms ORDER BY term").fetchall()
        scopes = conn.execute("SELECT * FROM zkr_search_scopes ORDER BY scope").fetchall()
        docs = conn.execute(
            "SELECT m.kind, m.target, f.body FROM zkr_search_map m"
            " JOIN zkr_fts f ON f.rowid = m.doc ORDER BY m.kind, m.target"
        ).fetchall()
        rows = conn.execute("SELECT count(*) FROM zkr_fts").fetchall()
    finally:
        conn.close()
    df: Counter[str] = Counter()
    totals: dict[str, list[int]] = {}
    for _, _, body in docs:
        tagged = body.split()
        df.update(set(tagged))
        scope = totals.setdefault(tagged[0][:10], [0, 0])
        scope[0] += 1
        scope[1] += len(tagged)
    assert terms == sorted(df.items())
    assert scopes == sorted((tag, d, t) for tag, (d, t) in totals.items())
    assert rows == [(len(docs),)]
    return terms, scopes, docs


def test_a_large_cjk_document_is_bounded_found_and_consistent(tmp_path: Path) -> None:
    """A text of random ideographs (each bigram new; 1 MiB holds 349,000) adds at most
    MAX_DOCUMENT_TERMS index terms, is found by a phrase from its middle and from its end, and
    the statistics stay those of its documents, through a delete, a repair and a rebuild.
    (Each search is a one-shot process's: a fresh connection reading FTS5.)"""
    rng = random.Random(5)
    big = "".join(chr(rng.randrange(0x4E00, 0xA000)) for _ in range(150_000))
    natural = "今天早上我们讨论了数据库迁移的计划。Sam booked the flights to Lisbon. " * 2000
    path = str(tmp_path / "big.db")

    def search(query: str) -> list[str]:
        with MemoryDb.open(path) as db:
            return [item.memory.id for item in db.search(SearchRequest(T, P, query)).items]

    with MemoryDb.open(path) as db:
        remember(db, "Sam: 今天的会议改到下午三点", at=1)
        first = remember(db, big, at=2, kind=SourceKind.DOCUMENT).source_id
        second = remember(db, natural, at=3, kind=SourceKind.DOCUMENT).source_id
        dentist = remember(db, "the dentist moved to Friday", at=4).source_id
    for query in (big[75_000:75_016], big[-16:], big[-12:]):
        assert search(query)[:1] == [first]
    assert second in search("数据库") and second in search("Lisbon")
    assert search("dentist") == [dentist]
    _, _, docs = _index_state(path)
    assert all(len(body.split()) <= MAX_DOCUMENT_TERMS + 8 for _, _, body in docs)
    with MemoryDb.open(path) as db:
        db.delete(DeleteRequest(T, P, first, 5))
        db.repair(LimitRequest(T, P, 100))
    assert search(big[-16:]) == []
    after_delete = _index_state(path)
    assert all(target != first for _, target, _ in after_delete[2])
    conn = sqlite3.connect(path)
    with conn:  # an index of an older format is rebuilt: the same documents and statistics
        conn.execute("UPDATE zkr_search_meta SET value = '4' WHERE key = 'version'")
    conn.close()
    assert second in search("迁移")
    assert _index_state(path) == after_delete
