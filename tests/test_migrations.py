"""Schema migrations v0..v10 (spec/storage.md §1, §3, §4, §5) on real SQLite files.

Legacy files are either built here with plain SQL (shapes written from spec/storage.md §4.2,
independently of ``zkr.store.schema``) or copied from the golden fixture set in
``../shared/fixtures/migrations`` together with the reference's recorded outcome.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import SHARED
from zkr import MemoryDb
from zkr.codec import canonical
from zkr.errors import InvalidInput, SchemaTooNew, StorageError
from zkr.model import (
    ClaimInput,
    ClaimKind,
    ExportRequest,
    Locator,
    LocatorRequest,
    RememberRequest,
    RememberResult,
    SourceKind,
)
from zkr.store import db as zdb, feed
from zkr.store.migrations import migrate

GOLDEN = SHARED / "fixtures" / "migrations"
A = ("acme", "sam")
B = ("acme", "ana")
LIMIT_MESSAGE = "legacy authoritative record exceeds the 1048576-byte export compatibility limit"
INTERVAL_MESSAGE = "legacy claim has an invalid half-open time interval"


def legacy_message(name: str) -> str:
    return f"legacy {name} is inconsistent with schema invariants"


# --------------------------------------------------------------------------- helpers


def raw(path: Path) -> sqlite3.Connection:
    """A plain autocommit connection with foreign keys on, as ``db.connect`` makes it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def migrated(path: Path) -> sqlite3.Connection:
    conn = raw(path)
    migrate(conn)
    return conn


def version_of(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def names(conn: sqlite3.Connection, kind: str) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))
    return {row[0] for row in rows}


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def run(conn: sqlite3.Connection, *statements: str) -> None:
    for statement in statements:
        conn.execute(statement)


def q(word: str) -> str:
    """JSON-quoted enum encoding (spec/storage.md §2.3)."""
    return json.dumps(word)


# Legacy layouts (spec/storage.md §4.2), written out here rather than taken from zkr.store.schema.
V1_ORIGINAL = (
    "CREATE TABLE sources (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, person_id TEXT NOT NULL,"
    " revision INTEGER NOT NULL, kind TEXT NOT NULL, content TEXT NOT NULL,"
    " captured_at INTEGER NOT NULL, recorded_at INTEGER NOT NULL, deleted_at INTEGER)",
    "CREATE VIRTUAL TABLE source_fts USING fts5(source_id UNINDEXED, tenant_id UNINDEXED,"
    " person_id UNINDEXED, content)",
    "CREATE TABLE evidence (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, person_id TEXT NOT NULL,"
    " source_id TEXT NOT NULL REFERENCES sources (id), source_revision INTEGER NOT NULL,"
    " quote TEXT NOT NULL, recorded_at INTEGER NOT NULL, deleted_at INTEGER)",
    "CREATE TABLE claims (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, person_id TEXT NOT NULL,"
    " subject TEXT NOT NULL, predicate TEXT NOT NULL, value TEXT NOT NULL,"
    " valid_from INTEGER NOT NULL, valid_until INTEGER, recorded_from INTEGER NOT NULL,"
    " recorded_until INTEGER, status TEXT NOT NULL)",
    "CREATE TABLE claim_evidence (tenant_id TEXT NOT NULL, person_id TEXT NOT NULL,"
    " claim_id TEXT NOT NULL REFERENCES claims (id), evidence_id TEXT NOT NULL"
    " REFERENCES evidence (id), relation TEXT NOT NULL, confidence_basis_points INTEGER NOT NULL,"
    " PRIMARY KEY (tenant_id, person_id, claim_id, evidence_id))",
    "CREATE TABLE daily_reviews (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,"
    " person_id TEXT NOT NULL, day TEXT NOT NULL, summary TEXT NOT NULL,"
    " evidence_ids TEXT NOT NULL, recorded_at INTEGER NOT NULL)",
    "CREATE TABLE embeddings (tenant_id TEXT NOT NULL, person_id TEXT NOT NULL,"
    " target_kind TEXT NOT NULL, target_id TEXT NOT NULL, model TEXT NOT NULL,"
    " version TEXT NOT NULL, dimension INTEGER NOT NULL, input_hash TEXT NOT NULL,"
    " normalization TEXT NOT NULL, distance TEXT NOT NULL, vector TEXT NOT NULL,"
    " PRIMARY KEY (tenant_id, person_id, target_kind, target_id, model, version))",
)
REPAIRED_V1 = (  # what the v1 repair of later releases appended
    "ALTER TABLE sources ADD COLUMN ingestion_key TEXT",
    "ALTER TABLE claims ADD COLUMN tier TEXT NOT NULL DEFAULT 'long_term'",
    "ALTER TABLE claims ADD COLUMN processing_state TEXT NOT NULL DEFAULT 'processed'",
    "ALTER TABLE embeddings ADD COLUMN target_revision INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE embeddings ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0",
)
V2_LOCATORS = (
    "CREATE TABLE evidence_locators (tenant_id TEXT NOT NULL, person_id TEXT NOT NULL,"
    " evidence_id TEXT NOT NULL REFERENCES evidence (id), device_id TEXT NOT NULL,"
    " provider TEXT NOT NULL, stream_id TEXT NOT NULL, segment_id TEXT NOT NULL,"
    " start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL,"
    " PRIMARY KEY (tenant_id, person_id, evidence_id))",
)
V5_PROFILES = (
    "ALTER TABLE claims ADD COLUMN kind TEXT NOT NULL DEFAULT 'fact'",
    "CREATE TABLE profile_entries (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,"
    " person_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, stability TEXT NOT NULL,"
    " claim_id TEXT NOT NULL REFERENCES claims (id), recorded_at INTEGER NOT NULL)",
)
V6_ORIGINS = (
    "ALTER TABLE sources ADD COLUMN origin_evidence_id TEXT",
    "ALTER TABLE sources ADD COLUMN origin_claim_id TEXT",
)


def put(conn: sqlite3.Connection, table: str, **row: Any) -> None:
    marks = ", ".join("?" for _ in row)
    conn.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", list(row.values()))


def legacy_file(path: Path, version: int, *, repaired: bool = True) -> sqlite3.Connection:
    """An empty legacy layout of schema ``version`` (0..6), left open for rows."""
    conn = sqlite3.connect(path, isolation_level=None)
    run(conn, *V1_ORIGINAL)
    if repaired:
        run(conn, *REPAIRED_V1)
    if version >= 2:
        run(conn, *V2_LOCATORS)
    if version >= 5:
        run(conn, *V5_PROFILES)
    if version >= 6:
        run(conn, *V6_ORIGINS)
    conn.execute(f"PRAGMA user_version = {version}")
    return conn


def add_source(
    conn: sqlite3.Connection,
    scope: tuple[str, str],
    sid: str,
    eid: str | None,
    at: int,
    text: str = "Sam works at Acme",
    **extra: Any,
) -> None:
    t, p = scope
    put(conn, "sources", id=sid, tenant_id=t, person_id=p, revision=1, kind=q("conversation"),
        content=text, captured_at=at, recorded_at=at, deleted_at=None, **extra)  # fmt: skip
    if eid is not None:
        put(conn, "evidence", id=eid, tenant_id=t, person_id=p, source_id=sid, source_revision=1,
            quote=text, recorded_at=at, deleted_at=None)  # fmt: skip


def add_claim(
    conn: sqlite3.Connection,
    scope: tuple[str, str],
    cid: str,
    at: int,
    predicate: str = "employer",
    value: str = "Acme",
    **extra: Any,
) -> None:
    t, p = scope
    row: dict[str, Any] = {"valid_until": None, "recorded_until": None, "status": "accepted"}
    row.update(extra)
    put(conn, "claims", id=cid, tenant_id=t, person_id=p, subject="Sam", predicate=predicate,
        value=value, valid_from=at, recorded_from=at, **row)  # fmt: skip


def add_link(
    conn: sqlite3.Connection, scope: tuple[str, str], cid: str, eid: str, relation: str = "supports"
) -> None:
    put(conn, "claim_evidence", tenant_id=scope[0], person_id=scope[1], claim_id=cid,
        evidence_id=eid, relation=q(relation), confidence_basis_points=10_000)  # fmt: skip


def remember(
    database: MemoryDb,
    text: str,
    *,
    t: str = "t1",
    p: str = "p1",
    at: int = 10,
    claim: tuple[str, str, str] | None = None,
    claim_kind: ClaimKind = ClaimKind.FACT,
) -> RememberResult:
    """``remember`` through the library, optionally with a (subject, predicate, value) claim."""
    typed = None if claim is None else ClaimInput(*claim, claim_kind, at)
    return database.remember(
        RememberRequest(t, p, SourceKind.CONVERSATION, text, at, at, claim=typed)
    )


def fresh(path: Path) -> sqlite3.Connection:
    """A brand-new file migrated to v10."""
    return migrated(path)


# --------------------------------------------------------------------------- golden fixtures


@functools.cache
def _load_checker() -> ModuleType:
    """The fixture set's own ``check`` script, loaded on first use (it lives in ../shared)."""
    loader = importlib.machinery.SourceFileLoader("migration_check", str(GOLDEN / "check"))
    spec = importlib.util.spec_from_loader("migration_check", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


GOLDEN_NAMES = sorted(p.stem for p in (GOLDEN / "db").glob("*.db"))


@pytest.mark.shared
def test_golden_fixture_set_is_present() -> None:
    assert len(GOLDEN_NAMES) >= 40


@pytest.mark.shared
@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_fixture(name: str, tmp_path: Path) -> None:
    """Tables, columns, rows (feed events included) and refusals equal the reference's.

    The export pages are compared by the fixture set's own ``check`` script through the CLI.
    """
    expected = json.loads((GOLDEN / "expected" / f"{name}.json").read_text(encoding="utf-8"))
    fixture = GOLDEN / "db" / f"{name}.db"
    assert digest(fixture) == expected["fixture_sha256"]
    path = tmp_path / fixture.name
    shutil.copyfile(fixture, path)
    before = digest(path)
    try:
        zdb.connect(str(path)).close()
    except (InvalidInput, SchemaTooNew, StorageError) as exc:
        assert expected["outcome"] == "refused", str(exc)
        message = str(exc)
        if expected["error_kind"] == "invalid":
            assert message == expected["error"]
        elif expected["error_kind"] == "sqlite":
            assert expected["error"] in message
        assert digest(path) == before
        assert version_of(path) == expected["user_version"]
        return
    assert expected["outcome"] == "upgraded"
    known = set(
        _load_checker().ID.findall(
            json.dumps(_load_checker().dump(fixture, readonly=True), ensure_ascii=False)
        )
    )
    actual = _load_checker().normalise(
        {"outcome": "upgraded", **_load_checker().dump(path), "exports": []}, known, {}
    )
    for table in actual["tables"].values():
        table["rows"].sort(key=_load_checker().order)
    assert _load_checker().compare({**expected, "exports": []}, actual) == []


# --------------------------------------------------------------------------- §1 versioning


@pytest.mark.parametrize("version", [11, 12345, -1])
def test_out_of_range_version_is_refused_untouched(tmp_path: Path, version: int) -> None:
    path = tmp_path / "future.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE keep (x)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    before = digest(path)
    with pytest.raises(SchemaTooNew) as err:
        zdb.connect(str(path))
    assert str(err.value) == (
        f"database schema version {version} is newer than supported version 10"
    )
    assert digest(path) == before
    assert not (tmp_path / "future.db-journal").exists()
    assert not (tmp_path / "future.db-wal").exists()
    assert version_of(path) == version


def test_current_file_reopens_without_any_write(tmp_path: Path) -> None:
    """§5.7: at version 10 migrate returns at once: total_changes and the bytes stay put."""
    path = tmp_path / "current.db"
    conn = fresh(path)
    put(conn, "sources", id="s1", tenant_id="t", person_id="p", revision=1,
        kind=q("conversation"), content="x", captured_at=1, recorded_at=1)  # fmt: skip
    conn.close()
    before = digest(path)
    conn = raw(path)
    changes = conn.total_changes
    migrate(conn)
    migrate(conn)
    assert conn.total_changes == changes
    assert not conn.in_transaction
    conn.close()
    assert digest(path) == before


def test_current_file_reopened_through_connect_keeps_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "current.db"
    with MemoryDb.open(str(path)) as database:
        remember(database, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    before = digest(path)
    with MemoryDb.open(str(path)) as database:
        assert database.conn.total_changes == 0
    assert digest(path) == before


def test_current_file_is_not_repaired(tmp_path: Path) -> None:
    """The version is trusted: a v10 file without its triggers stays without them."""
    path = tmp_path / "current.db"
    conn = fresh(path)
    run(conn, "DROP TRIGGER evidence_scope_insert", "DROP INDEX sources_scope")
    conn.close()
    conn = migrated(path)
    assert "evidence_scope_insert" not in names(conn, "trigger")
    assert "sources_scope" not in names(conn, "index")


# --------------------------------------------------------------------------- §2 fresh layout


@pytest.mark.shared
def test_empty_file_gets_the_whole_v10_layout(tmp_path: Path) -> None:
    """§5.2: a brand-new file is version 0 and ends at 10 with the §2 layout."""
    path = tmp_path / "new.db"
    conn = fresh(path)
    assert version_of(path) == 10
    expected = json.loads((GOLDEN / "expected" / "v0_empty_file.json").read_text("utf-8"))
    assert (
        sorted(
            [row[0], row[1], row[2]]
            for row in conn.execute("SELECT type, name, tbl_name FROM sqlite_master")
            if not str(row[1]).startswith("source_fts_")
        )
        == expected["schema"]
    )
    for table, shape in expected["tables"].items():
        info = [list(row[1:]) for row in conn.execute(f'PRAGMA table_info("{table}")')]
        assert info == shape["columns"], table
    # The bootstrap's empty INSERT … SELECT still creates the AUTOINCREMENT counter row.
    assert conn.execute("SELECT name, seq FROM sqlite_sequence").fetchall() == [
        ("memory_commits", 0)
    ]
    assert conn.execute("SELECT count(*) FROM memory_commits").fetchone() == (0,)


def test_point_locator_is_accepted_on_a_new_file(tmp_path: Path) -> None:
    """§5.2: a transcript locator with start_ms = end_ms is accepted and read back."""
    with MemoryDb.open(str(tmp_path / "new.db")) as database:
        locator = Locator("omi-1", "deepgram", "kitchen", "seg-1", 1200, 1200)
        result = database.remember(
            RememberRequest("t", "p", SourceKind.AUDIO, "buy basil", 5, 5, locator=locator)
        )
        assert database.locator(LocatorRequest("t", "p", result.evidence_id)) == locator


# --------------------------------------------------------------------------- §5 scenarios 1-4


def test_v1_original_shape_upgrade(tmp_path: Path) -> None:
    """§5.1: legacy embeddings get revision 0 / created_at 0; remember works afterwards."""
    path = tmp_path / "v1.db"
    conn = legacy_file(path, 1, repaired=False)
    add_source(conn, A, "s1", None, 10)
    put(conn, "source_fts", source_id="s1", tenant_id=A[0], person_id=A[1], content="Sam")
    put(conn, "embeddings", tenant_id=A[0], person_id=A[1], target_kind="source",
        target_id="s1", model="m", version="1", dimension=2, input_hash="sha256:00",
        normalization=q("l2"), distance=q("cosine"), vector="[1.0,0.0]")  # fmt: skip
    conn.close()
    conn = migrated(path)
    assert version_of(path) == 10
    assert conn.execute(
        "SELECT target_revision, created_at FROM embeddings WHERE target_id = 's1'"
    ).fetchone() == (0, 0)
    assert columns(conn, "sources")[-3:] == [
        "ingestion_key",
        "origin_evidence_id",
        "origin_claim_id",
    ]
    assert columns(conn, "embeddings")[-2:] == ["target_revision", "created_at"]
    # The legacy source had no evidence, so no origin was backfilled.
    assert conn.execute(
        "SELECT origin_evidence_id, origin_claim_id FROM sources WHERE id = 's1'"
    ).fetchone() == (None, None)
    conn.close()
    with MemoryDb.open(str(path)) as database:
        result = remember(database, "Sam likes tea", t=A[0], p=A[1], at=20,
                          claim=("Sam", "drink", "tea"))  # fmt: skip
        row = database.conn.execute(
            "SELECT origin_evidence_id, origin_claim_id FROM sources WHERE id = ?",
            (result.source_id,),
        ).fetchone()
        assert row == (result.evidence_id, result.claim_id)


def test_legacy_claims_only_file(tmp_path: Path) -> None:
    """§5.3: valid_until stays NULL on a superseded claim; the rest of the schema is created."""
    path = tmp_path / "claims.db"
    conn = sqlite3.connect(path, isolation_level=None)
    run(conn, V1_ORIGINAL[3])
    add_claim(conn, A, "c1", 10, status="superseded", recorded_until=20)
    conn.close()
    conn = migrated(path)
    assert version_of(path) == 10
    assert conn.execute(
        "SELECT valid_until, recorded_until, tier, processing_state, kind FROM claims"
    ).fetchone() == (None, 20, "long_term", "processed", "fact")
    assert {"sources", "evidence", "memory_applied_records", "profile_entries"} <= names(
        conn, "table"
    )
    events = conn.execute("SELECT payload FROM memory_export_events").fetchall()
    assert [json.loads(row[0])["kind"] for row in events] == ["claim"]


def _shaped_file(path: Path, version: int) -> None:
    """§5.4: one scoped memory in the layout of ``version``, with what that version had."""
    conn = legacy_file(path, version)
    t, p = A
    add_source(conn, A, "s1", "e1", 10, ingestion_key="k1")
    put(conn, "source_fts", source_id="s1", tenant_id=t, person_id=p, content="Sam works at Acme")
    claim_kind = {"kind": "profile_fact"} if version >= 5 else {}
    add_claim(conn, A, "c1", 10, **claim_kind)
    add_link(conn, A, "c1", "e1")
    put(conn, "daily_reviews", id="r1", tenant_id=t, person_id=p, day="2026-01-01",
        summary="work", evidence_ids='["e1"]', recorded_at=11)  # fmt: skip
    put(conn, "embeddings", tenant_id=t, person_id=p, target_kind="claim", target_id="c1",
        model="m", version="1", dimension=2, input_hash="sha256:00", normalization=q("l2"),
        distance=q("cosine"), vector="[1.0,0.0]", target_revision=10, created_at=12)  # fmt: skip
    if version >= 2:
        put(conn, "evidence_locators", tenant_id=t, person_id=p, evidence_id="e1",
            device_id="d", provider="pr", stream_id="st", segment_id="sg", start_ms=0,
            end_ms=10)  # fmt: skip
    if version >= 5:  # stale at v5; a v6 file has had its entries rebuilt already
        key, value = ("company", "ACME Corp") if version == 5 else ("employer", "Acme")
        put(conn, "profile_entries", id="pe1", tenant_id=t, person_id=p, key=key, value=value,
            stability=q("stable"), claim_id="c1", recorded_at=12)  # fmt: skip
    if version >= 6:
        conn.execute("UPDATE sources SET origin_evidence_id = 'e1', origin_claim_id = 'c1'")
    conn.close()


@pytest.mark.parametrize("version", range(7))
def test_every_early_version_upgrades(tmp_path: Path, version: int) -> None:
    """§5.4: twice migrated = 10; origins present; kind; the stale profile entry rebuilt."""
    path = tmp_path / f"v{version}.db"
    _shaped_file(path, version)
    migrated(path).close()
    conn = migrated(path)
    assert version_of(path) == 10
    assert conn.execute(
        "SELECT origin_evidence_id, origin_claim_id, ingestion_key FROM sources"
    ).fetchone() == ("e1", "c1", "k1")
    assert conn.execute("SELECT kind FROM claims").fetchone() == (
        ("profile_fact",) if version >= 5 else ("fact",)
    )
    if version >= 5:
        assert conn.execute(
            "SELECT id, key, value, stability, recorded_at FROM profile_entries"
        ).fetchall() == [("pe1", "employer", "Acme", q("stable"), 12)]
    events = conn.execute(
        "SELECT event_index, payload FROM memory_export_events ORDER BY event_index"
    ).fetchall()
    kinds = ["source", "evidence", "claim", "claim_evidence"]
    kinds += ["profile"] if version >= 5 else []
    assert [json.loads(payload)["kind"] for _, payload in events] == [*kinds, "daily_review"]
    commit = conn.execute("SELECT sequence, tenant_id, person_id, recorded_at FROM memory_commits")
    assert commit.fetchall() == [(1, "acme", "sam", 12 if version >= 5 else 11)]
    if version >= 2:
        evidence = json.loads(events[1][1])["record"]
        assert evidence["locator"] == {
            "device_id": "d",
            "provider": "pr",
            "stream_id": "st",
            "segment_id": "sg",
            "start_ms": 0,
            "end_ms": 10,
        }


# --------------------------------------------------------------------------- §5 scenarios 5-8


@pytest.mark.parametrize("column", ["valid_until", "recorded_until"])
def test_v7_refuses_an_invalid_interval(tmp_path: Path, column: str) -> None:
    """§5.5: no automatic repair; the version stays 6 and the value stays 5."""
    path = tmp_path / "interval.db"
    conn = fresh(path)
    add_claim(conn, A, "c1", 10)
    run(
        conn,
        "DROP TRIGGER claim_time_interval_insert",
        "DROP TRIGGER claim_time_interval_update",
        f"UPDATE claims SET {column} = 5",
        "PRAGMA user_version = 6",
    )
    conn.close()
    before = digest(path)
    conn = raw(path)
    with pytest.raises(InvalidInput) as err:
        migrate(conn)
    assert str(err.value) == INTERVAL_MESSAGE
    assert not conn.in_transaction
    conn.close()
    assert version_of(path) == 6
    assert digest(path) == before
    check = sqlite3.connect(path)
    assert check.execute(f"SELECT {column} FROM claims").fetchone() == (5,)
    check.close()


def test_interval_upgrade_accepts_edges(tmp_path: Path) -> None:
    path = tmp_path / "edges.db"
    conn = legacy_file(path, 6)
    add_claim(conn, A, "c1", 10, valid_until=11, recorded_until=11)
    add_claim(conn, A, "c2", -(2**63), valid_until=2**63 - 1)
    conn.close()
    migrated(path).close()
    assert version_of(path) == 10


def test_interval_triggers(tmp_path: Path) -> None:
    """§5.6: inserts or updates making an empty interval are rejected."""
    conn = fresh(tmp_path / "x.db")
    for column in ("valid_until", "recorded_until"):
        with pytest.raises(sqlite3.IntegrityError, match="invalid claim half-open time interval"):
            empty: dict[str, Any] = {column: 10}
            add_claim(conn, A, "bad", 10, **empty)
    add_claim(conn, A, "c1", 10)
    for column in ("valid_until", "recorded_until"):
        with pytest.raises(sqlite3.IntegrityError, match="invalid claim half-open time interval"):
            conn.execute(f"UPDATE claims SET {column} = 10 WHERE id = 'c1'")
    conn.execute("UPDATE claims SET valid_until = 11, recorded_until = 11 WHERE id = 'c1'")


def _two_scopes(conn: sqlite3.Connection) -> None:
    """Scope A and scope B, each with a source, evidence, claim and link."""
    for scope, suffix in ((A, "a"), (B, "b")):
        add_source(conn, scope, f"s{suffix}", f"e{suffix}", 10)
        add_claim(conn, scope, f"c{suffix}", 10)
        add_link(conn, scope, f"c{suffix}", f"e{suffix}")


CROSS_SCOPE_INSERTS = {
    "evidence": (
        "INSERT INTO evidence (id, tenant_id, person_id, source_id, source_revision, quote,"
        " recorded_at) VALUES ('ex', 'acme', 'ana', 'sa', 1, 'q', 10)",
        "evidence source scope mismatch",
    ),
    "evidence_locators": (
        "INSERT INTO evidence_locators (tenant_id, person_id, evidence_id, device_id, provider,"
        " stream_id, segment_id, start_ms, end_ms) VALUES ('acme', 'ana', 'ea', 'd', 'p', 's',"
        " 'g', 0, 0)",
        "evidence locator scope mismatch",
    ),
    "claim_evidence": (
        "INSERT INTO claim_evidence (tenant_id, person_id, claim_id, evidence_id, relation,"
        """ confidence_basis_points) VALUES ('acme', 'ana', 'cb', 'ea', '"supports"', 1)""",
        "claim evidence scope mismatch",
    ),
    "embeddings": (
        "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
        " dimension, input_hash, normalization, distance, vector) VALUES ('acme', 'ana',"
        """ 'source', 'sa', 'm', '1', 1, 'h', '"l2"', '"dot"', '[1]')""",
        "embedding target scope mismatch",
    ),
    "daily_reviews": (
        "INSERT INTO daily_reviews (id, tenant_id, person_id, day, summary, evidence_ids,"
        """ recorded_at) VALUES ('r', 'acme', 'ana', 'd', 's', '["eb","ea"]', 1)""",
        "daily review evidence scope mismatch",
    ),
}


@pytest.mark.parametrize("table", sorted(CROSS_SCOPE_INSERTS))
def test_cross_scope_inserts_are_rejected(tmp_path: Path, table: str) -> None:
    """§5.8."""
    conn = fresh(tmp_path / "x.db")
    _two_scopes(conn)
    sql, message = CROSS_SCOPE_INSERTS[table]
    with pytest.raises(sqlite3.IntegrityError) as err:
        conn.execute(sql)
    assert str(err.value) == message


# --------------------------------------------------------------------------- §3 triggers


def _trigger_base(path: Path) -> sqlite3.Connection:
    conn = fresh(path)
    _two_scopes(conn)
    conn.execute(
        "UPDATE sources SET origin_evidence_id = 'ea', origin_claim_id = 'ca' WHERE id = 'sa'"
    )
    run(
        conn,
        "UPDATE claims SET kind = 'profile_fact' WHERE id = 'ca'",
        "INSERT INTO profile_entries (id, tenant_id, person_id, key, value, stability, claim_id,"
        """ recorded_at) VALUES ('pa', 'acme', 'sam', 'employer', 'Acme', '"stable"', 'ca', 1)""",
        "INSERT INTO daily_reviews (id, tenant_id, person_id, day, summary, evidence_ids,"
        """ recorded_at) VALUES ('ra', 'acme', 'sam', 'd', 's', '["ea"]', 1)""",
        "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
        " dimension, input_hash, normalization, distance, vector) VALUES ('acme', 'sam',"
        """ 'claim', 'ca', 'm', '1', 1, 'h', '"l2"', '"dot"', '[1]')""",
    )
    return conn


TRIGGER_CASES = [
    ("UPDATE evidence SET source_id = 'sb' WHERE id = 'ea'", "evidence source scope mismatch"),
    (
        "UPDATE evidence SET tenant_id = 'other' WHERE id = 'ea'",
        "evidence source scope mismatch",
    ),
    (
        "INSERT INTO evidence_locators (tenant_id, person_id, evidence_id, device_id, provider,"
        " stream_id, segment_id, start_ms, end_ms) VALUES ('acme', 'sam', 'nope', 'd', 'p', 's',"
        " 'g', 0, 0)",
        "evidence locator scope mismatch",
    ),
    (
        "UPDATE claim_evidence SET claim_id = 'cb' WHERE claim_id = 'ca'",
        "claim evidence scope mismatch",
    ),
    (
        "UPDATE embeddings SET target_kind = 'profile_entry' WHERE target_id = 'ca'",
        "embedding target scope mismatch",
    ),
    ("UPDATE embeddings SET target_id = 'cb'", "embedding target scope mismatch"),
    (
        "UPDATE daily_reviews SET evidence_ids = 'not json' WHERE id = 'ra'",
        "daily review evidence scope mismatch",
    ),
    (
        "UPDATE daily_reviews SET evidence_ids = '[\"eb\"]' WHERE id = 'ra'",
        "daily review evidence scope mismatch",
    ),
    (
        "UPDATE profile_entries SET value = 'Globex' WHERE id = 'pa'",
        "profile entry claim scope mismatch",
    ),
    (
        "INSERT INTO profile_entries (id, tenant_id, person_id, key, value, stability, claim_id,"
        """ recorded_at) VALUES ('pb', 'acme', 'ana', 'employer', 'Acme', '"stable"', 'cb', 1)""",
        "profile entry claim scope mismatch",
    ),
    (
        "UPDATE sources SET origin_evidence_id = 'eb' WHERE id = 'sa'",
        "source origin scope mismatch",
    ),
    ("UPDATE sources SET origin_claim_id = 'cb' WHERE id = 'sa'", "source origin scope mismatch"),
    (
        "UPDATE claims SET tier = 'archive', status = 'superseded' WHERE id = 'ca'",
        "illegal memory state combination",
    ),
    (
        "UPDATE claims SET processing_state = 'pending' WHERE id = 'ca'",
        "illegal memory state combination",
    ),
    (
        "INSERT INTO corrections (tenant_id, person_id, superseded_claim_id, claim_id, source_id,"
        " evidence_id, valid_at, recorded_at) VALUES ('acme', 'sam', 'ca', 'cb', 'sa', 'ea', 1, 1)",
        "correction scope mismatch",
    ),
]


@pytest.mark.parametrize(("sql", "message"), TRIGGER_CASES)
def test_trigger_messages(tmp_path: Path, sql: str, message: str) -> None:
    """Every §3 trigger aborts with its exact message."""
    conn = _trigger_base(tmp_path / "x.db")
    with pytest.raises(sqlite3.IntegrityError) as err:
        conn.execute(sql)
    assert str(err.value) == message


def test_triggers_accept_consistent_writes(tmp_path: Path) -> None:
    conn = _trigger_base(tmp_path / "x.db")
    run(
        conn,
        "UPDATE daily_reviews SET evidence_ids = '[]' WHERE id = 'ra'",
        "UPDATE claims SET tier = 'short_term', processing_state = 'pending' WHERE id = 'cb'",
        "UPDATE evidence SET quote = 'edited' WHERE id = 'ea'",
        "INSERT INTO evidence_locators (tenant_id, person_id, evidence_id, device_id, provider,"
        " stream_id, segment_id, start_ms, end_ms) VALUES ('acme', 'sam', 'ea', 'd', 'p', 's',"
        " 'g', 5, 5)",
    )


def test_event_payload_must_be_json(tmp_path: Path) -> None:
    conn = fresh(tmp_path / "x.db")
    conn.execute(
        "INSERT INTO memory_commits (tenant_id, person_id, recorded_at) VALUES ('t', 'p', 1)"
    )
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        conn.execute(
            "INSERT INTO memory_export_events (commit_sequence, event_index, payload)"
            " VALUES (1, 0, '{not json')"
        )
    conn.execute(
        "INSERT INTO memory_export_events (commit_sequence, event_index, payload)"
        " VALUES (1, 0, '{}')"
    )
    conn.execute("DELETE FROM memory_commits")
    assert conn.execute("SELECT count(*) FROM memory_export_events").fetchone() == (0,)


def _correction_rows(conn: sqlite3.Connection) -> None:
    """A correction in scope A: c_old superseded by c_new, cited by source s2 / evidence e2."""
    _two_scopes(conn)
    add_claim(conn, A, "cnew", 20)
    add_source(conn, A, "s2", "e2", 20)
    add_link(conn, A, "cnew", "e2")
    conn.execute(
        "UPDATE sources SET origin_evidence_id = 'e2', origin_claim_id = 'cnew' WHERE id = 's2'"
    )
    add_claim(conn, B, "cnewb", 20)
    add_source(conn, B, "s2b", "e2b", 20)
    conn.execute(
        "UPDATE sources SET origin_evidence_id = 'e2b', origin_claim_id = 'cnewb' WHERE id = 's2b'"
    )
    conn.execute(
        "INSERT INTO corrections (tenant_id, person_id, superseded_claim_id, claim_id, source_id,"
        " evidence_id, valid_at, recorded_at) VALUES ('acme', 'sam', 'ca', 'cnew', 's2', 'e2',"
        " 20, 20)"
    )


def test_corrections_stay_in_scope(tmp_path: Path) -> None:
    """§5.13: a correction's new claim, source and evidence must be in its scope."""
    conn = fresh(tmp_path / "x.db")
    _correction_rows(conn)
    with pytest.raises(sqlite3.IntegrityError) as err:
        conn.execute(
            "INSERT INTO corrections (tenant_id, person_id, superseded_claim_id, claim_id,"
            " source_id, evidence_id, valid_at, recorded_at) VALUES ('acme', 'sam', 'ca',"
            " 'cnewb', 's2b', 'e2b', 20, 20)"
        )
    assert str(err.value) == "correction scope mismatch"
    with pytest.raises(sqlite3.IntegrityError) as err:
        conn.execute("UPDATE corrections SET claim_id = 'cb'")
    assert str(err.value) == "correction scope mismatch"


# --------------------------------------------------------------------------- §4.3 validations


def test_cross_scope_evidence_is_refused(tmp_path: Path) -> None:
    """§5.9: evidence in scope B quoting a source of scope A."""
    path = tmp_path / "x.db"
    conn = legacy_file(path, 0)
    add_source(conn, A, "sa", None, 10)
    put(conn, "evidence", id="eb", tenant_id=B[0], person_id=B[1], source_id="sa",
        source_revision=1, quote="q", recorded_at=10)  # fmt: skip
    conn.close()
    before = digest(path)
    with pytest.raises(InvalidInput) as err:
        migrated(path)
    assert str(err.value) == legacy_message("evidence")
    assert digest(path) == before


def test_cross_scope_embedding_is_refused(tmp_path: Path) -> None:
    """§5.10: an embedding in scope B targeting a source of scope A."""
    path = tmp_path / "x.db"
    conn = legacy_file(path, 0)
    add_source(conn, A, "sa", "ea", 10)
    put(conn, "embeddings", tenant_id=B[0], person_id=B[1], target_kind="source",
        target_id="sa", model="m", version="1", dimension=1, input_hash="h",
        normalization=q("l2"), distance=q("dot"), vector="[1]")  # fmt: skip
    conn.close()
    before = digest(path)
    with pytest.raises(InvalidInput) as err:
        migrated(path)
    assert str(err.value) == legacy_message("embedding")
    assert digest(path) == before
    assert version_of(path) == 0


def test_validation_order_names_the_first_failing_check(tmp_path: Path) -> None:
    """Both a bad locator and a bad link: the locator check comes first (§4.3 order)."""
    path = tmp_path / "x.db"
    conn = legacy_file(path, 3)
    add_source(conn, A, "sa", "ea", 10)
    add_claim(conn, B, "cb", 10)
    add_link(conn, B, "cb", "ea")
    put(conn, "evidence_locators", tenant_id=B[0], person_id=B[1], evidence_id="ea",
        device_id="d", provider="p", stream_id="s", segment_id="g", start_ms=0,
        end_ms=1)  # fmt: skip
    conn.close()
    with pytest.raises(InvalidInput) as err:
        migrated(path)
    assert str(err.value) == legacy_message("evidence locator")


@pytest.mark.parametrize("evidence_ids", ["not json", '["ex"]', "[]", " [ ] "])
def test_review_citing_unknown_evidence_is_refused(tmp_path: Path, evidence_ids: str) -> None:
    """§4.3 as corrected: `[]` fails the legacy check too (the trigger lets it pass)."""
    path = tmp_path / "x.db"
    conn = legacy_file(path, 3)
    add_source(conn, A, "sa", "ea", 10)
    put(conn, "daily_reviews", id="r", tenant_id=A[0], person_id=A[1], day="d", summary="s",
        evidence_ids=evidence_ids, recorded_at=1)  # fmt: skip
    conn.close()
    before = digest(path)
    with pytest.raises(InvalidInput) as err:
        migrated(path)
    assert str(err.value) == legacy_message("daily review")
    assert digest(path) == before


def test_review_citing_live_evidence_passes_the_legacy_check(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = legacy_file(path, 3)
    add_source(conn, A, "sa", "ea", 10)
    put(conn, "daily_reviews", id="r", tenant_id=A[0], person_id=A[1], day="d", summary="s",
        evidence_ids='["ea","ea"]', recorded_at=1)  # fmt: skip
    conn.close()
    migrated(path).close()
    assert version_of(path) == 10


def test_duplicate_ingestion_keys_fail_with_sqlite_text(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = legacy_file(path, 0)
    add_source(conn, A, "s1", "e1", 10, ingestion_key="k")
    add_source(conn, A, "s2", "e2", 11, ingestion_key="k")
    add_source(conn, B, "s3", "e3", 11, ingestion_key="k")
    conn.close()
    before = digest(path)
    with pytest.raises(StorageError) as err:
        zdb.connect(str(path))
    assert "UNIQUE constraint failed" in str(err.value)
    assert digest(path) == before


# --------------------------------------------------------------------------- §4.2 v6


def test_v6_origin_backfill_rules(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = legacy_file(path, 5)
    add_source(conn, A, "one", "e1", 10)  # one evidence, one supports link -> both origins
    add_claim(conn, A, "c1", 10)
    add_link(conn, A, "c1", "e1")
    add_source(conn, A, "two", "e2a", 10)  # two evidence rows -> untouched
    put(conn, "evidence", id="e2b", tenant_id=A[0], person_id=A[1], source_id="two",
        source_revision=1, quote="q", recorded_at=10, deleted_at=11)  # fmt: skip
    add_source(conn, A, "contra", "e3", 10)  # only a contradicts link -> evidence only
    add_link(conn, A, "c1", "e3", "contradicts")
    add_source(conn, A, "tomb", "e4", 10)  # tombstoned evidence counts
    conn.execute("UPDATE evidence SET deleted_at = 12 WHERE id = 'e4'")
    add_source(conn, A, "both", "e5", 10)  # two supports links -> evidence only
    add_claim(conn, A, "c5", 10, status="superseded", recorded_until=20)
    add_link(conn, A, "c1", "e5")
    add_link(conn, A, "c5", "e5")
    add_source(conn, A, "none", None, 10)  # no evidence
    conn.close()
    conn = migrated(path)
    origins = dict(
        (row[0], (row[1], row[2]))
        for row in conn.execute("SELECT id, origin_evidence_id, origin_claim_id FROM sources")
    )
    assert origins == {
        "one": ("e1", "c1"),
        "two": (None, None),
        "contra": ("e3", None),
        "tomb": ("e4", None),
        "both": ("e5", None),
        "none": (None, None),
    }


def test_v6_profile_rebuild_and_dedupe(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = legacy_file(path, 5)
    add_claim(conn, A, "c1", 10, kind="profile_fact")
    add_claim(conn, A, "c2", 11, kind="profile_fact", value="Globex", status="superseded",
              recorded_until=30)  # fmt: skip
    add_claim(conn, A, "c3", 12, kind="profile_fact", predicate="city", value="Berlin")
    add_claim(conn, B, "c4", 12, kind="profile_fact", predicate="city", value="Lisbon")
    entries = [
        ("p1", A, "company", "ACME Corp", "c1", 20),  # stale key/value, rebuilt to employer/Acme
        ("p2", A, "employer", "Globex", "c2", 25),  # newest for employer: survives (superseded)
        ("p3", A, "city", "Berlin", "c3", 5),  # tie on recorded_at: greater id wins
        ("p4", A, "town", "Berlin", "c3", 5),
        ("p5", B, "city", "Lisbon", "c4", 1),  # another scope: kept
    ]
    for pid, scope, key, value, cid, at in entries:
        put(conn, "profile_entries", id=pid, tenant_id=scope[0], person_id=scope[1], key=key,
            value=value, stability=q("current"), claim_id=cid, recorded_at=at)  # fmt: skip
    conn.close()
    conn = migrated(path)
    rows = conn.execute(
        "SELECT id, key, value, claim_id, recorded_at FROM profile_entries ORDER BY id"
    ).fetchall()
    assert rows == [
        ("p2", "employer", "Globex", "c2", 25),
        ("p4", "city", "Berlin", "c3", 5),
        ("p5", "city", "Lisbon", "c4", 1),
    ]
    assert "profile_entries_current" in names(conn, "index")
    assert {"profile_entry_scope_insert", "source_origin_scope_update"} <= names(conn, "trigger")


@pytest.mark.parametrize(
    ("claim_scope", "kind"), [(A, "fact"), (B, "profile_fact")], ids=["plain-fact", "other-scope"]
)
def test_v6_refuses_profile_without_profile_fact(
    tmp_path: Path, claim_scope: tuple[str, str], kind: str
) -> None:
    path = tmp_path / "x.db"
    conn = legacy_file(path, 5)
    add_claim(conn, claim_scope, "c1", 10, kind=kind)
    put(conn, "profile_entries", id="p1", tenant_id=A[0], person_id=A[1], key="employer",
        value="Acme", stability=q("stable"), claim_id="c1", recorded_at=1)  # fmt: skip
    conn.close()
    before = digest(path)
    with pytest.raises(InvalidInput) as err:
        migrated(path)
    assert str(err.value) == legacy_message("profile entry")
    assert digest(path) == before
    assert version_of(path) == 5


def test_v6_refuses_origin_in_another_scope(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = legacy_file(path, 6)
    conn.execute("PRAGMA user_version = 5")  # a v5 file that already has origin columns
    add_source(conn, A, "sa", "ea", 10)
    add_source(conn, B, "sb", "eb", 10)
    conn.execute("UPDATE sources SET origin_evidence_id = 'eb' WHERE id = 'sa'")
    conn.close()
    with pytest.raises(InvalidInput) as err:
        migrated(path)
    assert str(err.value) == legacy_message("source origin")


# --------------------------------------------------------------------------- §4.4 bootstrap


def _remembered_v7(path: Path, text: str = "Sam works at Acme") -> None:
    """§5.11: a current file with one remembered claim, commits deleted, version set to 7."""
    with MemoryDb.open(str(path)) as database:
        remember(database, text, t=A[0], p=A[1], at=10, claim=("Sam", "employer", "Acme"))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("DELETE FROM memory_commits")
    assert conn.execute("SELECT count(*) FROM memory_export_events").fetchone() == (0,)
    conn.execute("PRAGMA user_version = 7")
    conn.close()


def test_bootstrap_of_one_remembered_claim(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    _remembered_v7(path)
    with MemoryDb.open(str(path)) as database:
        conn = database.conn
        assert conn.execute(
            "SELECT sequence, tenant_id, person_id, recorded_at FROM memory_commits"
        ).fetchall() == [
            (2, "acme", "sam", 10)  # numbering continues from sqlite_sequence
        ]
        payloads = [
            row[0]
            for row in conn.execute(
                "SELECT payload FROM memory_export_events WHERE commit_sequence = 2"
                " ORDER BY event_index"
            )
        ]
    assert [json.loads(p)["kind"] for p in payloads] == [
        "source",
        "evidence",
        "claim",
        "claim_evidence",
    ]
    assert all(
        p == json.dumps(json.loads(p), ensure_ascii=False, separators=(",", ":")) for p in payloads
    )


def test_bootstrapped_feed_exports_in_two_pages(tmp_path: Path) -> None:
    """§5.11: the bootstrapped commit (4 events) pages out as 2 + 2."""
    path = tmp_path / "x.db"
    _remembered_v7(path)
    with MemoryDb.open(str(path)) as database:
        first = database.export(ExportRequest(A[0], A[1], 1, limit=2))
        assert first.complete is False
        assert [c["event_count"] for c in first.commits] == [4]
        assert len(first.commits[0]["records"]) == 2
        second = database.export(
            ExportRequest(
                A[0],
                A[1],
                1,
                after_commit=first.next_after_commit,
                after_event_index=first.next_after_event_index,
                high_water_mark=first.high_water_mark,
                limit=2,
            )
        )
        assert second.complete is True
        assert second.commits[0]["first_event_index"] == 2
        assert len(second.commits[0]["records"]) == 2


def test_bootstrap_refuses_an_oversized_record(tmp_path: Path) -> None:
    """§5.12: a 1 MiB source content makes its record exceed the limit; nothing changes."""
    path = tmp_path / "x.db"
    _remembered_v7(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE sources SET content = ?", ("x" * 1_048_576,))
    conn.close()
    before = digest(path)
    with pytest.raises(InvalidInput) as err:
        zdb.connect(str(path))
    assert str(err.value) == LIMIT_MESSAGE
    assert "export compatibility limit" in str(err.value)
    assert digest(path) == before
    assert version_of(path) == 7
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM memory_commits").fetchone() == (0,)
    conn.close()


def test_bootstrap_accepts_a_record_of_exactly_the_limit(tmp_path: Path) -> None:
    """The limit is strict: a source record of exactly 1,048,576 bytes is written."""
    path = tmp_path / "x.db"
    _remembered_v7(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE sources SET content = ''")
    (source_id,) = conn.execute("SELECT id FROM sources").fetchone()
    overhead = len(canonical(feed.source_record(conn, source_id)).encode())
    conn.execute("UPDATE sources SET content = ?", ("y" * (1_048_576 - overhead),))
    conn.close()
    with MemoryDb.open(str(path)) as database:
        sizes = [
            len(row[0].encode())
            for row in database.conn.execute(
                "SELECT payload FROM memory_export_events ORDER BY event_index"
            )
        ]
    assert sizes[0] == 1_048_576


def test_bootstrap_of_two_scopes(tmp_path: Path) -> None:
    """Sequence order, recorded_at as a maximum, record order, tombstones included."""
    path = tmp_path / "x.db"
    conn = legacy_file(path, 6)
    z, a = ("zeta", "p"), ("acme", "sam")
    add_source(conn, z, "sz", "ez", 50)
    add_source(conn, a, "s2", "e2", 10)
    add_source(conn, a, "s1", "e1", 12)
    conn.execute("UPDATE sources SET deleted_at = 99, revision = 2 WHERE id = 's1'")
    conn.execute("UPDATE evidence SET deleted_at = 99 WHERE id = 'e1'")
    add_claim(conn, a, "cb", 15, kind="profile_fact")
    add_claim(conn, a, "ca", 14, status="retracted", recorded_until=99)
    add_link(conn, a, "cb", "e2")
    add_link(conn, a, "ca", "e2")
    add_link(conn, a, "ca", "e1", "contradicts")
    put(conn, "profile_entries", id="pe", tenant_id=a[0], person_id=a[1], key="employer",
        value="Acme", stability=q("stable"), claim_id="cb", recorded_at=30)  # fmt: skip
    put(conn, "daily_reviews", id="rv", tenant_id=a[0], person_id=a[1], day="d", summary="s",
        evidence_ids='["e2","e1"]', recorded_at=20)  # fmt: skip
    put(conn, "daily_reviews", id="rz", tenant_id=z[0], person_id=z[1], day="d", summary="s",
        evidence_ids="[]", recorded_at=70)  # fmt: skip
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    conn = migrated(path)
    assert conn.execute(
        "SELECT sequence, tenant_id, person_id, recorded_at FROM memory_commits"
    ).fetchall() == [
        (1, "acme", "sam", 30),
        (2, "zeta", "p", 70),
    ]

    def ids(sequence: int) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for (payload,) in conn.execute(
            "SELECT payload FROM memory_export_events WHERE commit_sequence = ?"
            " ORDER BY event_index",
            (sequence,),
        ):
            record = json.loads(payload)
            body = record["record"]
            kind = record["kind"]
            if kind in ("source", "evidence"):
                out.append((kind, body[kind]["id"]))
            elif kind == "claim_evidence":
                out.append((kind, (body["claim_id"], body["evidence_id"])))
            else:
                out.append((kind, body["id"]))
        return out

    assert ids(1) == [
        ("source", "s1"),
        ("source", "s2"),
        ("evidence", "e1"),
        ("evidence", "e2"),
        ("claim", "ca"),
        ("claim", "cb"),
        ("claim_evidence", ("ca", "e1")),
        ("claim_evidence", ("ca", "e2")),
        ("claim_evidence", ("cb", "e2")),
        ("profile", "pe"),
        ("daily_review", "rv"),
    ]
    assert ids(2) == [("source", "sz"), ("evidence", "ez"), ("daily_review", "rz")]
    tombstone = json.loads(
        conn.execute(
            "SELECT payload FROM memory_export_events WHERE commit_sequence = 1 AND event_index = 0"
        ).fetchone()[0]
    )
    assert tombstone["record"]["source"]["deleted_at"] == 99
    assert tombstone["record"]["source"]["revision"] == 2


def test_bootstrap_is_skipped_when_a_commit_exists(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    _remembered_v7(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "INSERT INTO memory_commits (tenant_id, person_id, recorded_at) VALUES ('o', 'o', 1)"
    )
    conn.close()
    conn = migrated(path)
    assert conn.execute("SELECT tenant_id FROM memory_commits").fetchall() == [("o",)]
    assert conn.execute("SELECT count(*) FROM memory_export_events").fetchone() == (0,)


def test_bootstrap_refuses_non_canonical_encodings(tmp_path: Path) -> None:
    """§4.4 step 5: a bare source kind cannot be decoded; the whole upgrade rolls back."""
    path = tmp_path / "x.db"
    _remembered_v7(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE sources SET kind = 'conversation'")
    conn.close()
    before = digest(path)
    with pytest.raises(StorageError):
        zdb.connect(str(path))
    assert digest(path) == before
    assert version_of(path) == 7


# --------------------------------------------------------------------------- §4.1 driver


def test_missing_table_fails_with_sqlite_text(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = legacy_file(path, 3)
    run(conn, "DROP TABLE claim_evidence", "DROP TABLE claims")
    conn.close()
    before = digest(path)
    with pytest.raises(StorageError) as err:
        zdb.connect(str(path))
    assert str(err.value) == "no such table: claims"
    assert digest(path) == before


def test_a_locked_file_fails_without_changes(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    legacy_file(path, 3).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    conn = sqlite3.connect(path, isolation_level=None, timeout=0.1)
    with pytest.raises(StorageError, match="locked"):
        migrate(conn)
    holder.execute("ROLLBACK")
    migrate(conn)
    assert version_of(path) == 10


def test_upgrade_is_not_repeated_after_a_concurrent_upgrade(tmp_path: Path) -> None:
    """The version is re-read under the write lock: an upgrade that won the race is not redone."""
    path = tmp_path / "x.db"
    legacy_file(path, 5).close()
    winner = sqlite3.connect(path, isolation_level=None)
    winner.execute("BEGIN IMMEDIATE")
    loser = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    errors: list[BaseException] = []

    def upgrade() -> None:
        try:
            migrate(loser)  # reads version 5, then waits for the write lock
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=upgrade)
    thread.start()
    time.sleep(0.5)
    winner.execute("PRAGMA user_version = 10")  # stands for a finished upgrade
    winner.execute("COMMIT")
    thread.join(timeout=30)
    assert not thread.is_alive() and errors == []
    assert version_of(path) == 10
    assert "memory_commits" not in names(loser, "table")  # no step ran a second time


CHILD = textwrap.dedent(
    """
    import os, sqlite3, sys
    from zkr.store import migrations

    original = migrations._bootstrap_feed

    def crash(conn):
        original(conn)  # every step up to v8 has written by now
        os._exit(17)

    migrations._bootstrap_feed = crash
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA cache_size = 10")  # spill dirty pages into the file mid-transaction
    migrations.migrate(conn)
    """
)


@pytest.mark.shared
def test_crash_mid_upgrade_leaves_the_old_file(tmp_path: Path) -> None:
    """A process killed inside the upgrade transaction leaves the file at its old version."""
    path = tmp_path / "crash.db"
    shutil.copyfile(GOLDEN / "db" / "v7_bootstrap_feed.db", path)
    before = _load_checker().dump(path)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, timeout=120, check=False
    )
    assert proc.returncode == 17, proc.stderr.decode()
    journal = tmp_path / "crash.db-journal"
    assert journal.exists() and journal.stat().st_size > 0  # a hot journal was left behind
    conn = sqlite3.connect(path)  # the first reader rolls the hot journal back
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    assert _load_checker().dump(path) == before
    assert before["user_version"] == 7
    zdb.connect(str(path)).close()
    assert version_of(path) == 10


def test_remembered_profile_fact_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with MemoryDb.open(str(path)) as database:
        remember(database, "Sam works at Acme", claim=("Sam", "employer", "Acme"),
                 claim_kind=ClaimKind.PROFILE_FACT)  # fmt: skip
    with MemoryDb.open(str(path)) as database:
        assert database.conn.execute("SELECT kind FROM claims").fetchone() == ("profile_fact",)
