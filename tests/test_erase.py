"""``erase`` (issue 15 item 6): no byte of the erased text anywhere in the file or its WAL, and
replicas stay consistent."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, sam_acme
from tests.test_sync import export_all, load_host, staged
from zkr import MemoryDb
from zkr.errors import InvalidInput
from zkr.model import ApplyRequest, EmbedRequest, ProjectionsRequest

T, P = "acme", "alex"
SECRET = "Xylophonequartz"  # a word that appears nowhere else
SECRET_CITY = "Zanzibarovia"


def on_disk(path: str, shm: bool = True) -> bytes:
    """The database file and its WAL (and shared-memory index) files, as bytes."""
    data = b""
    for suffix in ("", "-wal", "-shm") if shm else ("", "-wal"):
        file = Path(path + suffix)
        if file.exists():
            data += file.read_bytes()
    return data


def build(db: MemoryDb) -> dict[str, Any]:
    """A secret memory with a claim, profile entry, review and embedding, corrected once,
    beside live memories that must survive; then the secret's sources are deleted."""
    me = db.scope(T, P)
    keep = me.remember("Alex likes green tea", recorded_at=5)
    secret = me.remember(
        f"I live at {SECRET} street in {SECRET_CITY}",
        recorded_at=10,
        claim={
            "subject": "Alex",
            "predicate": "home",
            "value": f"{SECRET} street, {SECRET_CITY}",
            "kind": "profile_fact",
        },
    )
    me.profile(secret.claim_id, recorded_at=11, stability="current")
    me.review("2026-01-01", f"talked about {SECRET}", [secret.evidence_id], recorded_at=12)
    (issue,) = [
        i.to_json()
        for i in db.projections(ProjectionsRequest(T, P, "m", "1", 100))
        if i.to_json()["input"]["target"]["id"] == secret.source_id
    ]
    db.embed(
        EmbedRequest.from_json(
            {
                "tenant_id": T,
                "person_id": P,
                "target": {"kind": "source", "id": secret.source_id},
                "embedding": {
                    "vector": [0.6, 0.8],
                    "model": "m",
                    "version": "1",
                    "input_hash": issue["input"]["input_hash"],
                    "normalization": "l2",
                    "distance": "cosine",
                },
            }
        )
    )
    fixed = me.correct(
        secret.claim_id,
        f"{SECRET} street, {SECRET_CITY} north",
        text=f"actually {SECRET} street north",
        recorded_at=20,
        profile_follows=False,
    )
    assert me.search(SECRET).items  # searchable before the delete
    me.delete(secret.source_id, deleted_at=30)
    me.delete(fixed.source_id, deleted_at=31)
    return {"keep": keep, "secret": secret, "fixed": fixed}


def test_dry_run_reports_and_writes_nothing(db: MemoryDb) -> None:
    build(db)
    before = on_disk(db.path, shm=False)
    report = db.scope(T, P).erase()
    assert report.dry_run is True
    assert len(report.source_ids) == 2 and report.evidence == 2 and report.claims == 2
    assert report.feed_records > 0 and report.text_bytes > 2 * len(SECRET)
    assert "wal_truncated" not in report
    assert SECRET.encode() in before and on_disk(db.path, shm=False) == before


def test_erase_leaves_no_byte_of_the_text_in_the_file_or_wal(db: MemoryDb) -> None:
    ids = build(db)
    me = db.scope(T, P)
    assert SECRET.encode() in on_disk(db.path)
    report = me.erase(dry_run=False)
    assert report.dry_run is False and report.wal_truncated is True
    data = on_disk(db.path)
    for word in (SECRET, SECRET_CITY, SECRET.lower(), SECRET_CITY.lower()):
        assert word.encode() not in data, word
    # what was not deleted is untouched and still found; the search index was rebuilt
    assert [i.memory.id for i in me.search("green tea").items] == [ids["keep"].source_id]
    assert me.search(SECRET).items == []
    traced = me.trace("claim", ids["secret"].claim_id)
    assert {c["value"] for c in traced.claims} == {""}
    # a second erase finds the same sources but nothing more to blank
    again = me.erase(dry_run=False)
    assert again.text_bytes == 0
    # the feed is still a valid feed: every page exports, a fresh replica applies it
    commits = staged(export_all(db, (T, P)))
    with MemoryDb.open(Path(db.path).parent / "fresh.db") as fresh:
        result = fresh.apply(ApplyRequest(T, P, 1, 10, commits))
        # the propagation commit repeats the blanked tombstones: ledger hits
        assert result.commits_applied == len(commits) - 1 and result.commits_skipped == 1
        assert [i.memory.id for i in fresh.scope(T, P).search("green tea").items] == [
            ids["keep"].source_id
        ]
    assert SECRET.encode() not in on_disk(str(Path(db.path).parent / "fresh.db"))


def tables(path: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            name: sorted(conn.execute(sql).fetchall())
            for name, sql in {
                "sources": "SELECT id, content, revision, deleted_at FROM sources",
                "evidence": "SELECT id, quote, deleted_at FROM evidence",
                "claims": "SELECT id, subject, predicate, value, status FROM claims",
                "profiles": "SELECT key, value FROM profile_entries",
                "reviews": "SELECT id, summary FROM daily_reviews",
            }.items()
        }
    finally:
        conn.close()


def test_a_replica_that_erases_too_stays_consistent(db: MemoryDb, tmp_path: Path) -> None:
    build(db)
    replica_path = str(tmp_path / "replica.db")
    commits = staged(export_all(db, (T, P)))
    with MemoryDb.open(replica_path) as replica:
        replica.apply(ApplyRequest(T, P, 1, 10, commits))
        assert SECRET.encode() in on_disk(replica_path)
        db.scope(T, P).erase(dry_run=False)
        replica.scope(T, P).erase(dry_run=False)
        assert SECRET.encode() not in on_disk(replica_path)
        assert tables(replica_path) == tables(db.path)
        # later commits keep flowing: a new memory on the origin reaches the replica
        db.scope(T, P).remember("Alex bought a bike", recorded_at=40)
        pages = export_all(db, (T, P))
        newest = staged(pages)[-1]
        replica.apply(ApplyRequest(T, P, 1, 10, [newest]))
        assert len(replica.scope(T, P).search("bike").items) == 1


def test_erase_named_sources_and_errors(db: MemoryDb) -> None:
    ids = build(db)
    me = db.scope(T, P)
    with pytest.raises(InvalidInput, match="is not deleted"):
        me.erase([ids["keep"].source_id], dry_run=False)
    with pytest.raises(InvalidInput, match="is not in scope"):
        db.scope(T, "other").erase([ids["secret"].source_id])
    report = me.erase([ids["secret"].source_id], dry_run=False)
    assert report.source_ids == [ids["secret"].source_id]
    assert SECRET_CITY.encode() in on_disk(db.path)  # the correction source is not erased yet


def test_erase_cli(db_path: str) -> None:
    stored = cli(db_path, "remember", sam_acme(T, P)).json()
    scope = {"tenant_id": T, "person_id": P}
    cli(db_path, "delete", {**scope, "source_id": stored["source_id"], "deleted_at": 20}).json()
    report = cli(db_path, "erase", scope).json()
    assert report["dry_run"] is True and report["source_ids"] == [stored["source_id"]]
    done = cli(db_path, "erase", {**scope, "dry_run": False, "propagate": False}).json()
    assert done["wal_truncated"] is True
    assert b"Sam works at Acme" not in on_disk(db_path)
    page = cli(db_path, "export", {**scope, "export_format": 1}).json()
    assert len(page["commits"]) == 2  # remember, delete: no propagation commit


# --------------------------------------------------------------------------- erase across replicas


def synced(device: MemoryDb, replica: MemoryDb, state: Any, host: Any) -> None:
    """One host run each way (the echo guard of examples/sync_host.py on)."""
    host.sync(device, replica, state, T, P, page_limit=7)
    host.sync(replica, device, state, T, P, page_limit=7)


def erased_everywhere(*paths: str) -> None:
    for path in paths:
        data = on_disk(path)
        for word in (SECRET, SECRET_CITY, SECRET.lower(), SECRET_CITY.lower()):
            assert word.encode() not in data, (path, word)


@pytest.mark.parametrize("first", ["device", "replica"])
def test_an_erase_reaches_the_other_file_through_the_host(
    db: MemoryDb, tmp_path: Path, first: str
) -> None:
    """Two files kept in sync by the host protocol (applied cursors, echo guard): whichever
    erases, the next exchange carries the erasure to the other and nothing conflicts."""
    host = load_host()
    state = host.SyncState(str(tmp_path / "state.db"))
    ids = build(db)
    try:
        with MemoryDb.open(str(tmp_path / "replica.db")) as replica:
            synced(db, replica, state, host)
            assert SECRET.encode() in on_disk(replica.path)
            eraser = db if first == "device" else replica
            report = eraser.scope(T, P).erase(dry_run=False)
            assert report.text_bytes > 0
            if first == "device":
                synced(db, replica, state, host)
            else:
                host.sync(replica, db, state, T, P, page_limit=7)
                host.sync(db, replica, state, T, P, page_limit=7)
            erased_everywhere(db.path, replica.path)
            assert tables(replica.path) == tables(db.path)
            # quiet afterwards, and new memories still flow both ways
            assert host.sync(db, replica, state, T, P).counters["records_applied"] == 0
            assert host.sync(replica, db, state, T, P).counters["records_applied"] == 0
            db.scope(T, P).remember("Alex bought a bike", recorded_at=40)
            replica.scope(T, P).remember("Alex sold the car", recorded_at=41)
            synced(db, replica, state, host)
            for side in (db, replica):
                me = side.scope(T, P)
                assert me.search("bike").items and me.search("car").items
                assert [i.memory.id for i in me.search("green tea").items] == [
                    ids["keep"].source_id
                ]
                assert me.search(SECRET).items == []
            assert tables(replica.path) == tables(db.path)
    finally:
        state.close()


def test_an_unerased_replica_rereads_the_rewritten_feed_from_the_start(
    db: MemoryDb, tmp_path: Path
) -> None:
    """No host state: the replica applies the device's whole (rewritten) feed again, then the
    device the replica's; blanked copies are erased or ledger hits, never conflicts."""
    build(db)
    with MemoryDb.open(str(tmp_path / "replica.db")) as replica:
        replica.apply(ApplyRequest(T, P, 1, 10, staged(export_all(db, (T, P)))))
        db.scope(T, P).erase(dry_run=False)
        again = replica.apply(ApplyRequest(T, P, 1, 10, staged(export_all(db, (T, P)))))
        assert again.records_applied == 0  # every copy is a ledger hit once erased here
        erased_everywhere(replica.path)
        assert tables(replica.path) == tables(db.path)
        # replayed, and the other way round: echoes of the device's own records; the erased
        # ones are ledger hits there (an unerased echo of a deletion would fail: the reference's
        # rule), the others are applied once more as the reference does (decisions-sync.md)
        replay = replica.apply(ApplyRequest(T, P, 1, 10, staged(export_all(db, (T, P)))))
        assert replay.records_applied == 0
        back = db.apply(ApplyRequest(T, P, 1, 10, staged(export_all(replica, (T, P)))))
        assert back.records_skipped > 0
        erased_everywhere(db.path, replica.path)
        assert tables(replica.path) == tables(db.path)


@pytest.mark.parametrize("from_start", [False, True])
def test_a_replica_behind_the_deletion_gets_it_blanked(
    db: MemoryDb, tmp_path: Path, from_start: bool
) -> None:
    """The replica had not applied the deletions when the device erased: the deletion commits
    arrive blanked, tombstone the sources (their stored text put back for the checks) and the
    replica erases at the end of the same batch."""
    with MemoryDb.open(str(tmp_path / "replica.db")) as replica:
        me = db.scope(T, P)
        me.remember("Alex likes green tea", recorded_at=5)
        secret = me.remember(f"I live at {SECRET} street in {SECRET_CITY}", recorded_at=10)
        before = staged(export_all(db, (T, P)))
        replica.apply(ApplyRequest(T, P, 1, 10, before))
        me.delete(secret.source_id, deleted_at=30)
        me.erase(dry_run=False)
        commits = staged(export_all(db, (T, P)))
        if not from_start:
            commits = commits[len(before) :]
        result = replica.apply(ApplyRequest(T, P, 1, 10, commits))
        assert result.commits_applied >= 1
        erased_everywhere(db.path, replica.path)
        assert tables(replica.path) == tables(db.path)


def test_a_blanked_copy_of_a_live_source_leaves_its_text(db: MemoryDb, tmp_path: Path) -> None:
    """Only deleted text is erased: a blanked copy of a source the replica holds live (no
    deletion anywhere) is applied with the stored text put back, and the text stays."""
    stored = db.scope(T, P).remember(f"Alex lives in {SECRET_CITY}", recorded_at=10)
    commits = staged(export_all(db, (T, P)))
    with MemoryDb.open(str(tmp_path / "replica.db")) as replica:
        replica.apply(ApplyRequest(T, P, 1, 10, commits))
        for record in commits[0]["records"]:
            if record["kind"] == "source":
                record["record"]["source"]["content"] = ""
            elif record["kind"] == "evidence":
                record["record"]["evidence"]["quote"] = ""
        result = replica.apply(ApplyRequest(T, P, 1, 10, commits))
        assert result.records_applied == 2
        assert [i.memory.id for i in replica.scope(T, P).search(SECRET_CITY).items] == [
            stored.source_id
        ]


def test_erase_without_propagate_appends_nothing(db: MemoryDb) -> None:
    build(db)
    before = staged(export_all(db, (T, P)))
    db.scope(T, P).erase(dry_run=False, propagate=False)
    assert [c["sequence"] for c in staged(export_all(db, (T, P)))] == [
        c["sequence"] for c in before
    ]
    db.scope(T, P).erase(dry_run=False)  # nothing left to erase: no commit either
    assert len(staged(export_all(db, (T, P)))) == len(before)
