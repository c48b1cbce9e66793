"""Sync end to end: reference pages applied here and ours hashed alike, the CLI's export/apply,
and the host example (spec/sync.md §5-6, scenarios 21-24, 27, 28).

Scenario numbers refer to spec/sync.md §6. Fixture P (tests/sync_support.py) is built through
the library API in two scopes (a/sam exported, b/sam written last); replicas are fresh files
in ``tmp_path``."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO, SHARED, cli, sam_acme
from tests.sync_support import (
    A,
    B,
    Commit,
    FixtureP,
    export_all,
    kinds,
    remember,
    scope_state,
    staged,
)
from zkr import MemoryDb
from zkr.model import (
    ApplyRequest,
    SearchRequest,
)
from zkr.store.records import parse_record, payload_hash, record_identity

# --------------------------------------------------------------------------- §6 27: cross-checks

SYNC_FIXTURES = SHARED / "fixtures" / "sync"


def _fixture_feed() -> ModuleType:
    """The fixtures' own canonical form and hash (an independent implementation of §1.4-1.5)."""
    spec = importlib.util.spec_from_file_location("sync_fixture_feed", SYNC_FIXTURES / "feed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sync_fixture_feed", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.shared
@pytest.mark.parametrize("name", ["corrections", "deletions"])
def test_scenario_27_reference_pages_apply_here(name: str, replica: tuple[str, MemoryDb]) -> None:
    path, db = replica
    pages = json.loads((SYNC_FIXTURES / name / "pages.json").read_text())
    expected = json.loads((SYNC_FIXTURES / name / "expected.json").read_text())
    scope = (expected["scope"]["tenant_id"], expected["scope"]["person_id"])
    # Hash every reference record the reference's way: our hash must match its ledger.
    records = [r for p in pages for c in p["commits"] for r in c["records"]]
    ours = {(*record_identity(parse_record(r)), payload_hash(parse_record(r))) for r in records}
    assert ours == {tuple(row) for row in expected["ledger"]}
    # Stage and batch them the host's way (the fixtures' own staging), then apply each request.
    requests = _fixture_feed().batches(pages, scope)
    responses = [db.apply(ApplyRequest.from_json(request)).to_json() for request in requests]
    assert responses == [step.get("response", step) for step in expected["apply"]]
    conn = sqlite3.connect(path)
    try:
        stored = [
            row[0]
            for row in conn.execute(
                "SELECT payload FROM memory_export_events ORDER BY commit_sequence, event_index"
            )
        ]
        ledger = set(
            conn.execute("SELECT record_kind, record_id, payload_hash FROM memory_applied_records")
        )
    finally:
        conn.close()
    assert ["sha256:" + hashlib.sha256(s.encode()).hexdigest() for s in stored] == expected[
        "stored_payloads"
    ]
    assert ledger == {tuple(row) for row in expected["ledger"]}


@pytest.mark.shared
def test_scenario_27_our_pages_hash_identically(fixture_p: FixtureP) -> None:
    reference_feed = _fixture_feed()
    conn = sqlite3.connect(fixture_p.path)
    stored = [
        row[0]
        for row in conn.execute(
            "SELECT payload FROM memory_export_events ORDER BY commit_sequence, event_index"
        )
    ]
    conn.close()
    with MemoryDb.open(fixture_p.path) as db:
        printed = json.loads(json.dumps(export_all(db, scope=A, limit=7), sort_keys=True))
        printed += json.loads(json.dumps(export_all(db, scope=B, limit=7), sort_keys=True))
    records = [r for p in printed for c in p["commits"] for r in c["records"]]
    assert len(records) == len(stored)
    by_identity = {}
    for text in stored:
        envelope = json.loads(text)
        assert reference_feed.canonical(envelope).decode() == text  # stored canonically
        by_identity[reference_feed.identity(envelope)] = reference_feed.payload_hash(envelope)
    for record in records:
        parsed = parse_record(record)
        assert payload_hash(parsed) == reference_feed.payload_hash(record)
        assert record_identity(parsed) == reference_feed.identity(record)


# --------------------------------------------------------------------------- §6 21-24, 28: CLI


def test_scenario_21_cli_export(db_path: str) -> None:
    cli(
        db_path,
        "remember",
        sam_acme("a", "sam"),
    ).json()
    result = cli(
        db_path, "export", {"tenant_id": "a", "person_id": "sam", "export_format": 1, "limit": 10}
    )
    out = result.json()
    assert out["complete"] and out["export_format"] == 1
    assert out["high_water_mark"] == out["next_after_commit"]
    assert [kinds(c) for c in out["commits"]] == [["source", "evidence", "claim", "claim_evidence"]]
    # Scenario 28: sorted keys at every level, compact, one trailing newline.
    assert (
        result.stdout
        == json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    )


def test_scenario_22_cli_export_error(db_path: str) -> None:
    result = cli(
        db_path,
        "export",
        {"tenant_id": "a", "person_id": "sam", "export_format": 1, "after_commit": -1},
    )
    assert result.error() == "after_commit must not be negative"


def test_scenario_23_cli_staging_with_a_frozen_mark(db_path: str) -> None:
    made = cli(
        db_path,
        "remember",
        sam_acme("a", "sam"),
    ).json()
    cli(
        db_path,
        "correct",
        {
            "tenant_id": "a",
            "person_id": "sam",
            "claim_id": made["claim_id"],
            "text": "Sam works at Globex",
            "value": "Globex",
            "valid_at": 20,
            "recorded_at": 21,
        },
    ).json()
    host = load_host()
    stager = host.Stager()
    cursor: tuple[int, int] = (0, -1)
    applied: list[tuple[int, int]] = []
    last_commit: Commit | None = None
    mark = None
    while True:
        out = cli(
            db_path,
            "export",
            {
                "tenant_id": "a",
                "person_id": "sam",
                "export_format": 1,
                "after_commit": cursor[0],
                "after_event_index": cursor[1],
                "high_water_mark": mark,
                "limit": 1,
            },
        ).json()
        mark = out["high_water_mark"] if mark is None else mark
        assert out["high_water_mark"] == mark
        for commit in stager.add(out):
            assert len(commit["records"]) == commit["event_count"]
            applied.append((commit["sequence"], commit["event_count"] - 1))
            last_commit = commit
        if out["complete"]:
            break
        cursor = (out["next_after_commit"], out["next_after_event_index"])
    assert applied == [(1, 3), (2, 5)]  # only whole commits move the applied cursor
    assert last_commit is not None and "correction" in kinds(last_commit)


def test_scenario_24_cli_round_trip(tmp_path: Path) -> None:
    origin, copy_path = str(tmp_path / "o.db"), str(tmp_path / "r.db")
    cli(
        origin,
        "remember",
        sam_acme("a", "sam"),
    ).json()
    exported = cli(
        origin, "export", {"tenant_id": "a", "person_id": "sam", "export_format": 1}
    ).json()
    request = {
        "tenant_id": "a",
        "person_id": "sam",
        "export_format": 1,
        "database_schema_version": exported["database_schema_version"],
        "commits": exported["commits"],
    }
    assert cli(copy_path, "apply", request).json() == {
        "commits_applied": 1,
        "commits_skipped": 0,
        "records_applied": 4,
        "records_skipped": 0,
    }
    assert cli(copy_path, "apply", request).json() == {
        "commits_applied": 0,
        "commits_skipped": 1,
        "records_applied": 0,
        "records_skipped": 4,
    }
    again = cli(
        copy_path, "export", {"tenant_id": "a", "person_id": "sam", "export_format": 1}
    ).json()
    assert again["commits"] == exported["commits"]
    found = cli(copy_path, "search", {"tenant_id": "a", "person_id": "sam", "query": "Acme"}).json()
    assert found["items"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"tenant_id":"a","person_id":"sam","export_format":1,"commits":[{"sequence":1,"recorded_at":1,"event_count":1,"first_event_index":0,"records":[{"kind":"claim","kind":"claim","record":{}}]}]}',
        b'{"tenant_id":"a","person_id":"sam","export_format":1,"commits":[{"sequence":1,"recorded_at":1.0,"event_count":0,"first_event_index":0,"records":[]}]}',
        b'{"tenant_id":"a","person_id":"sam","export_format":1,"commits":[{"sequence":true,"recorded_at":1,"event_count":0,"first_event_index":0,"records":[]}]}',
        b'{"tenant_id":"a","person_id":"sam","export_format":1,"commits":[{"sequence":1,"recorded_at":1,"event_count":1,"first_event_index":0,"records":[{"kind":"source","record":{"source":{"id":"\\udc00"}}}]}]}',
    ],
    ids=["duplicate", "float", "bool", "surrogate"],
)
def test_scenario_28_cli_parse_errors_are_one_line(db_path: str, body: bytes) -> None:
    message = cli(db_path, "apply", stdin=body).error()
    assert message and "\n" not in message
    assert not Path(db_path).exists()  # nothing is opened for a request that fails to decode


# --------------------------------------------------------------------------- the host example


def load_host() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_host", REPO / "examples" / "sync_host.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sync_host"] = module
    spec.loader.exec_module(module)
    return module


def test_host_syncs_both_ways_without_echo(fixture_p: FixtureP, tmp_path: Path) -> None:
    host = load_host()
    state = host.SyncState(str(tmp_path / "state.db"))
    other = str(tmp_path / "b.db")
    try:
        with MemoryDb.open(fixture_p.path) as a, MemoryDb.open(other) as b:
            forward = host.sync(a, b, state, *A, page_limit=3)
            back = host.sync(b, a, state, *A, page_limit=3)
            assert forward.counters["commits_applied"] == len(staged(export_all(a)))
            assert back.requests == 0 and back.echo_records_dropped > 0  # nothing bounced
            assert scope_state(other) == scope_state(fixture_p.path)
            # New writes on B flow to A; A's re-export of them does not flow back.
            remember(b, "Written on the replica", at=40)
            assert host.sync(a, b, state, *A).requests == 0
            assert host.sync(b, a, state, *A).counters["records_applied"] == 2
            assert host.sync(a, b, state, *A).counters["records_applied"] == 0
            assert host.sync(b, a, state, *A).requests == 0
            assert scope_state(other) == scope_state(fixture_p.path)
            assert a.search(SearchRequest(*A, "replica")).items
    finally:
        state.close()


def test_host_refuses_a_missing_source_instead_of_syncing_an_empty_one(tmp_path: Path) -> None:
    """A mistyped source path was created empty and "synced": 0 commits, exit status 0."""
    missing = tmp_path / "phnoe.db"
    proc = subprocess.run(
        [
            *(sys.executable, str(REPO / "examples" / "sync_host.py")),
            *("--state", str(tmp_path / "state.db"), "--tenant", "a", "--person", "sam"),
            *(str(missing), str(tmp_path / "cloud.db")),
        ],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stdout == b""
    assert json.loads(proc.stderr) == {"error": f"source database {missing} does not exist"}
    assert not missing.exists() and not (tmp_path / "cloud.db").exists()


def test_host_resumes_from_the_applied_cursor(tmp_path: Path) -> None:
    host = load_host()
    state = host.SyncState(str(tmp_path / "state.db"))
    try:
        with MemoryDb.open(str(tmp_path / "a.db")) as a, MemoryDb.open(str(tmp_path / "b.db")) as b:
            remember(a, "x" * 300_000)  # two ~300 kB records: pages split the commit
            remember(a, "small", at=11)
            first = host.sync(a, b, state, *A, page_limit=1)
            assert first.counters["commits_applied"] == 2
            keys = (os.path.realpath(a.path), os.path.realpath(b.path))
            assert state.cursor(*keys, A) == (2, 1)
            remember(a, "later", at=12)
            second = host.sync(a, b, state, *A, page_limit=1)
            assert second.counters == {
                "commits_applied": 1,
                "commits_skipped": 0,
                "records_applied": 2,
                "records_skipped": 0,
            }
    finally:
        state.close()


def test_host_sends_an_oversized_commit_alone(tmp_path: Path) -> None:
    host = load_host()
    state = host.SyncState(str(tmp_path / "state.db"))
    try:
        with MemoryDb.open(str(tmp_path / "a.db")) as a, MemoryDb.open(str(tmp_path / "b.db")) as b:
            remember(a, "z" * 600_000)  # one commit of ~1.2 MB: the CLI could never apply it
            remember(a, "after it", at=11)
            report = host.sync(a, b, state, *A)
            assert report.oversized_requests == 1 and report.requests == 2
            assert report.counters["records_applied"] == 4
    finally:
        state.close()


def test_host_apply_request_has_no_size_limit(tmp_path: Path) -> None:
    origin = str(tmp_path / "a.db")
    with MemoryDb.open(origin) as a:
        remember(a, "w" * 600_000)
        commits = staged(export_all(a))
    body = json.dumps(
        {"tenant_id": "a", "person_id": "sam", "export_format": 1, "commits": commits}
    ).encode()
    assert len(body) > 1_048_576
    target = str(tmp_path / "b.db")
    assert "request exceeds 1048576 bytes" in cli(target, "apply", stdin=body).error()
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "sync_host.py"), "apply-request", "--db", target],
        input=body,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "commits_applied": 1,
        "commits_skipped": 0,
        "records_applied": 2,
        "records_skipped": 0,
    }
