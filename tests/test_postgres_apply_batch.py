"""``apply`` on PostgreSQL sends its writes in batches (zkr.store.pg.adapter, "deferred writes");
it must store exactly what SQLite stores, answer with the same errors, and leave nothing
half-written when a batch fails part-way (issue 16).

The same sequence of ``apply`` calls runs against a SQLite file and a PostgreSQL store: spec/sync.md
§6 fixture P for one person, re-minted copies for others (a store of several persons), a copy
whose ids another person holds (refused), batches that fail after many accepted commits (a
conflict found by a read, an invalid interval found without one), and a replay. The answers
(counters or error texts) must be identical, and so must every person's stored rows, feed
records and ledger, after every call.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg_server import with_schema
from tests.sync_support import A, export_all, staged
from zkr import MemoryDb
from zkr.cli import dispatch
from zkr.errors import InvalidInput, StorageError, ZkrError
from zkr.store.db import write_tx
from zkr.store.driver import deferred_writes

Scope = tuple[str, str]
Commit = dict[str, Any]

PERSONS: list[Scope] = [A, ("a", "kim"), ("b", "lee"), ("a", "max")]

# The authoritative rows of a scope, in a column order both layouts share (no rowids, no
# minted outbox ids or local timestamps).
TABLES = {
    "sources": "id, revision, kind, content, captured_at, recorded_at, deleted_at,"
    " ingestion_key, origin_evidence_id, origin_claim_id",
    "evidence": "id, source_id, source_revision, quote, recorded_at, deleted_at",
    "evidence_locators": "evidence_id, device_id, provider, stream_id, segment_id, start_ms,"
    " end_ms",
    "claims": "id, subject, predicate, value, valid_from, valid_until, recorded_from,"
    " recorded_until, status, tier, processing_state, kind",
    "claim_evidence": "claim_id, evidence_id, relation, confidence_basis_points",
    "corrections": "superseded_claim_id, claim_id, source_id, evidence_id, valid_at, recorded_at",
    "profile_entries": "id, key, value, stability, claim_id, recorded_at",
    "daily_reviews": "id, day, summary, evidence_ids, recorded_at",
    "source_fts": "source_id, content",
    "memory_repair_outbox": "target_kind, target_id, reason, processed_at",
    "memory_applied_records": "record_kind, record_id, payload_hash",
    "memory_commits": "recorded_at",
    "memory_operations": "operation_type, status, target_kind, target_id",
}


def table_rows(target: str, table: str, columns: str, scope: Scope) -> list[tuple[Any, ...]]:
    sql = f"SELECT {columns} FROM {table} WHERE tenant_id = ? AND person_id = ?"
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target) as conn:
            found = conn.execute(sql.replace("?", "%s"), scope).fetchall()
    else:
        with sqlite3.connect(target) as conn:
            found = conn.execute(sql, scope).fetchall()
    return sorted((tuple(row) for row in found), key=repr)


def state(target: str, db: MemoryDb) -> dict[str, Any]:
    """Every person's rows and exported feed (records without local sequences)."""
    out: dict[str, Any] = {}
    for scope in PERSONS:
        for table, columns in TABLES.items():
            out[f"{scope}:{table}"] = table_rows(target, table, columns, scope)
        feed = staged(export_all(db, scope, limit=50))
        out[f"{scope}:feed"] = [(c["recorded_at"], c["records"]) for c in feed]
    return out


def rescope(commits: list[Commit], scope: Scope) -> list[Commit]:
    """The commits as records of ``scope`` (same ids)."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: walk(v) for k, v in value.items()}
            if "tenant_id" in out:
                out["tenant_id"], out["person_id"] = scope
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return [walk(copy.deepcopy(c)) for c in commits]


def remint(commits: list[Commit], salt: str) -> list[Commit]:
    """The commits with every id replaced by a fresh one derived from ``salt``."""
    text = json.dumps(commits)
    ids = set(re.findall(r'"([0-9a-f]{32})"', text))
    for old in ids:
        text = text.replace(old, hashlib.sha256(f"{salt}{old}".encode()).hexdigest()[:32])
    return list(json.loads(text))


def call(db: MemoryDb, scope: Scope, commits: list[Commit]) -> tuple[str, Any]:
    request = {
        "tenant_id": scope[0],
        "person_id": scope[1],
        "export_format": 1,
        "database_schema_version": 10,
        "commits": commits,
    }
    try:
        return "ok", dispatch(db, "apply", json.loads(json.dumps(request)))
    except ZkrError as exc:
        return "error", f"{type(exc).__name__}: {exc}"


def script(p: list[Commit]) -> list[tuple[str, Scope, list[Commit]]]:
    """The apply calls, in order: (label, scope, commits)."""
    kim, lee, max_ = PERSONS[1], PERSONS[2], PERSONS[3]
    fresh = rescope(remint(p, "kim-2"), kim)
    conflicting = copy.deepcopy(rescope(remint(p, "kim"), kim)[0])
    conflicting["records"][0]["record"]["source"]["content"] += " (changed)"
    bad_claim = copy.deepcopy(rescope(remint(p, "max-bad"), max_))
    for commit in bad_claim:
        for record in commit["records"]:
            if record["kind"] == "claim":
                record["record"]["valid_time"]["until"] = record["record"]["valid_time"]["from"]
    invalid_last = [*rescope(remint(p, "max"), max_), bad_claim[0]]
    # sequences must ascend within a request
    for seq, commit in enumerate(invalid_last, 1):
        commit["sequence"] = seq
    return [
        ("fixture P", A, p),
        ("a re-minted copy for kim", kim, rescope(remint(p, "kim"), kim)),
        ("a re-minted copy for lee (another tenant)", lee, rescope(remint(p, "lee"), lee)),
        ("ids another person holds: refused", max_, rescope(p, max_)),
        (
            "fresh commits, then a conflict found by a read: nothing written",
            kim,
            [*fresh, {**conflicting, "sequence": 10_000}],
        ),
        ("fresh commits, then an invalid interval: nothing written", max_, invalid_last),
        ("the valid part alone", max_, invalid_last[:-1]),
        ("replay", A, p),
        ("replay of kim's part", kim, rescope(remint(p, "kim"), kim)[2:]),
    ]


@pytest.fixture
def targets(tmp_path: Path, pg_dsn: str) -> Iterator[dict[str, str]]:
    yield {"sqlite": str(tmp_path / "batch.db"), "postgres": with_schema(pg_dsn, "batch")}


def test_batched_apply_stores_what_sqlite_stores(
    targets: dict[str, str], p_commits: list[Commit]
) -> None:
    assert len(p_commits) > 5
    transcripts: dict[str, list[Any]] = {}
    states: dict[str, list[dict[str, Any]]] = {}
    for backend, target in targets.items():
        with MemoryDb.open(target) as db:
            before = state(target, db)
            transcripts[backend], states[backend] = [], []
            for label, scope, commits in script(p_commits):
                answer = call(db, scope, commits)
                after = state(target, db)
                transcripts[backend].append((label, answer))
                states[backend].append(after)
                if answer[0] == "error":
                    assert after == before, f"{backend}: {label} left rows behind"
                before = after

    assert transcripts["postgres"] == transcripts["sqlite"]
    for at, (label, _, _) in enumerate(script(p_commits)):
        assert states["postgres"][at] == states["sqlite"][at], label
    answers = dict(transcripts["sqlite"])
    assert answers["fixture P"][0] == "ok"
    assert answers["fixture P"][1]["records_applied"] > 10
    assert "is refused: its id is already taken" in answers["ids another person holds: refused"][1]
    conflict = answers["fresh commits, then a conflict found by a read: nothing written"][1]
    assert "conflicts with the stored source payload" in conflict
    invalid = answers["fresh commits, then an invalid interval: nothing written"][1]
    assert "invalid time interval" in invalid
    assert answers["replay"][1]["records_skipped"] == answers["fixture P"][1]["records_applied"]


def test_a_queued_write_fails_before_what_follows_it(tmp_path: Path, pg_dsn: str) -> None:
    """A write queued on PostgreSQL that the server refuses is the error the command reports,
    as on SQLite, where it failed at once, even when the code after it fails too; a queued
    write's rowcount is its own."""
    errors = {}
    for backend, target in {
        "sqlite": str(tmp_path / "q.db"),
        "postgres": with_schema(pg_dsn, "queued"),
    }.items():
        with MemoryDb.open(target) as db:
            conn = db.conn
            with (
                pytest.raises(StorageError) as caught,
                write_tx(conn, A),
                deferred_writes(conn),
            ):
                conn.execute(
                    "INSERT INTO claims (id, tenant_id, person_id, subject, predicate, value,"
                    " valid_from, recorded_from, status, tier, processing_state, kind)"
                    " VALUES ('c1', 'a', 'sam', 's', 'p', 'v', 1, 1, 'accepted',"
                    " 'long_term', 'pending', 'fact')"
                )
                raise InvalidInput("raised after the refused write")
            errors[backend] = str(caught.value)
            with write_tx(conn, A), deferred_writes(conn):
                for n in range(3):
                    conn.execute(
                        "INSERT INTO memory_operations (id, tenant_id, person_id, operation_type,"
                        " status, recorded_at) VALUES (?, 'a', 'sam', 'apply', 'success', ?)",
                        (f"op{n}", n),
                    )
                changed = conn.execute(
                    "UPDATE memory_operations SET recorded_at = recorded_at + 10"
                    " WHERE tenant_id = 'a' AND person_id = 'sam' AND recorded_at >= ?",
                    (1,),
                ).rowcount
                assert changed == 2
                assert conn.execute(
                    "SELECT count(*) FROM memory_operations WHERE recorded_at > 10"
                ).fetchone() == (2,)
            assert conn.execute("SELECT count(*) FROM claims").fetchone() == (0,)
    assert errors["postgres"] == errors["sqlite"]
    assert "illegal memory state combination" in errors["sqlite"]
