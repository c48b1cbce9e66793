"""Cross-backend sync (issue 16, "Must show"): a person's memory written natively on one backend,
exported, applied into the other backend, exported again and applied into a new store of the
first kind, arrives unchanged: the same feed records, the same payload hashes in the apply
ledger, the same stored payload bytes, and the same answers to the same reads (searches, get,
locator, profiles, reviews). Both directions: SQLite → PostgreSQL → SQLite and PostgreSQL →
SQLite → PostgreSQL.

The data is written through the library API (``zkr.MemoryDb``; CLI-shaped requests decoded by
``zkr.cli.dispatch``, in process): spec/sync.md §6 fixture P, and the public workloads of the
shared sync fixtures (``../shared/fixtures/sync/workloads.py``: two weeks of turns, correction
chains, deletions, 1 MiB documents), run natively against the origin, with the reads each
workload records.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED
from tests.pg_server import with_schema
from tests.sync_support import A, apply, build_p, export_all, staged
from zkr import MemoryDb
from zkr.cli import dispatch
from zkr.errors import ZkrError
from zkr.store.records import parse_record, payload_hash, record_identity

Scope = tuple[str, str]
Reads = list[dict[str, Any]]


class InProcess:
    """The sync workbench's ``zkr`` callable (feed.Zkr's interface) on an open MemoryDb."""

    def __init__(self, db: MemoryDb) -> None:
        self.db = db

    def raw(self, command: str, request: Any) -> tuple[str, str]:
        try:
            result = dispatch(self.db, command, json.loads(json.dumps(request)))
        except ZkrError as exc:
            return "error", str(exc)
        return "ok", json.dumps(result, ensure_ascii=False, sort_keys=True)

    def __call__(self, command: str, request: Any) -> Any:
        status, text = self.raw(command, request)
        if status != "ok":
            raise RuntimeError(f"{command}: {text}")
        return json.loads(text)


def build_fixture_p(target: str) -> tuple[Scope, Reads]:
    """spec/sync.md §6 fixture P, and reads of everything it holds."""
    p = build_p(target)
    ask = {"tenant_id": A[0], "person_id": A[1]}
    reads: Reads = [
        {"command": "search", "request": {**ask, "query": query}}
        for query in ("Acme", "Globex", "Berlin", "Portuguese", "running", "Sam works")
    ]
    reads.append(
        {
            "command": "search",
            "request": {**ask, "query": "Berlin", "as_of": {"valid_at": 25, "recorded_at": 25}},
        }
    )
    reads.append(
        {
            "command": "search",
            "request": {**ask, "query": "Sam", "as_of": {"valid_at": 15, "recorded_at": 15}},
        }
    )
    claims = (p.employer, p.correction, p.language, p.habit)
    for claim in (c.claim_id for c in claims):
        reads.append(
            {"command": "get", "request": {**ask, "target": {"kind": "claim", "id": claim}}}
        )
    reads.append({"command": "locator", "request": {**ask, "evidence_id": p.employer.evidence_id}})
    reads += [{"command": c, "request": {**ask, "limit": 20}} for c in ("profiles", "reviews")]
    return A, reads


def workload(name: str) -> Callable[[str], tuple[Scope, Reads]]:
    """A public sync workload, driven natively through the library into a new store."""

    def build(target: str) -> tuple[Scope, Reads]:
        sys.path.insert(0, str(SHARED / "fixtures" / "sync"))
        try:
            import workbench
            import workloads  # noqa: F401  (registers the workloads)
        finally:
            sys.path.pop(0)
        with MemoryDb.open(target) as db:
            bench = workbench.Bench(InProcess(db))
            workbench.WORKLOADS[name](bench)
        return tuple(bench.scope), list(bench.reads)  # type: ignore[return-value]

    return build


DATASETS = [pytest.param(build_fixture_p, id="fixture_p")] + [
    pytest.param(workload(name), id=name, marks=[pytest.mark.shared])
    for name in ("fortnight", "corrections", "deletions", "large_text")
]


# --------------------------------------------------------------------------- what a store holds


def rows(target: str, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """``sql`` (``?`` placeholders) on a SQLite file or a PostgreSQL store."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), params).fetchall()]
    conn = sqlite3.connect(target)
    try:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def feed(db: MemoryDb, scope: Scope) -> list[tuple[int, int, list[Any]]]:
    """The scope's exported commits without their (local) sequence numbers."""
    return [
        (c["recorded_at"], c["event_count"], c["records"])
        for c in staged(export_all(db, scope, limit=7))
    ]


def ledger(target: str, scope: Scope) -> set[tuple[str, str, str]]:
    found = rows(
        target,
        "SELECT record_kind, record_id, payload_hash FROM memory_applied_records"
        " WHERE tenant_id = ? AND person_id = ?",
        scope,
    )
    return {(str(k), str(i), str(h)) for k, i, h in found}


def stored_payloads(target: str, scope: Scope) -> list[str]:
    """SHA-256 of each stored event payload of the scope, in feed order."""
    found = rows(
        target,
        "SELECT e.payload FROM memory_export_events e JOIN memory_commits c"
        " ON c.sequence = e.commit_sequence WHERE c.tenant_id = ? AND c.person_id = ?"
        " ORDER BY c.sequence, e.event_index",
        scope,
    )
    return [hashlib.sha256(str(r[0]).encode()).hexdigest() for r in found]


def answers(db: MemoryDb, reads: Reads) -> list[tuple[str, Any]]:
    out = []
    for read in reads:
        status, text = InProcess(db).raw(read["command"], read["request"])
        out.append((status, json.loads(text) if status == "ok" else text))
    return out


def as_sets(answer: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Search items as a sorted list without relevance (a store holding other persons ranks
    with other corpus statistics, as SQLite's own replicas do); other answers unchanged."""
    out = []
    for status, value in answer:
        if status == "ok" and isinstance(value, dict) and "items" in value:
            unranked = [{**item, "relevance_basis_points": None} for item in value["items"]]
            items = sorted(unranked, key=repr)
            value = {**value, "items": items}
        out.append((status, value))
    return out


# --------------------------------------------------------------------------- the round trips


@pytest.fixture
def stores(tmp_path: Path, pg_dsn: str) -> Iterator[dict[str, Callable[[str], str]]]:
    """Fresh store targets by backend: a SQLite file or a PostgreSQL schema, named ``name``."""
    yield {
        "sqlite": lambda name: str(tmp_path / f"{name}.db"),
        "postgres": lambda name: with_schema(pg_dsn, name),
    }


@pytest.mark.parametrize("build", DATASETS)
@pytest.mark.parametrize("first", ["sqlite", "postgres"])
def test_round_trip_through_the_other_backend_changes_nothing(
    build: Callable[[str], tuple[Scope, Reads]], first: str, stores: dict[str, Any]
) -> None:
    other = "postgres" if first == "sqlite" else "sqlite"
    origin, middle, final = stores[first]("origin"), stores[other]("middle"), stores[first]("final")
    scope, reads = build(origin)

    with MemoryDb.open(origin) as db:
        origin_feed, origin_answers = feed(db, scope), answers(db, reads)
        commits = staged(export_all(db, scope, limit=7))
    assert origin_feed and any(read["command"] == "search" for read in reads)
    with MemoryDb.open(middle) as db:
        applied = apply(db, commits, scope)
        assert applied["commits_applied"] == len(commits)
        middle_feed, middle_answers = feed(db, scope), answers(db, reads)
        commits_again = staged(export_all(db, scope, limit=7))
    with MemoryDb.open(final) as db:
        assert apply(db, commits_again, scope) == applied
        final_feed, final_answers = feed(db, scope), answers(db, reads)
        assert apply(db, commits_again, scope)["commits_applied"] == 0  # a replay is skipped

    # the same records, commit by commit
    assert middle_feed == origin_feed
    assert final_feed == origin_feed
    # the same payload hashes: each replica's ledger is exactly the records' identities/hashes
    records = [parse_record(r) for _, _, rs in origin_feed for r in rs]
    expected = {(*record_identity(r), payload_hash(r)) for r in records}
    assert ledger(middle, scope) == expected
    assert ledger(final, scope) == expected
    # the same stored payload bytes
    assert stored_payloads(middle, scope) == stored_payloads(origin, scope)
    assert stored_payloads(final, scope) == stored_payloads(origin, scope)
    # the same answers; the two replicas hold the same single person, so even ranks agree
    assert final_answers == middle_answers
    assert any(status == "ok" and answer.get("items") for status, answer in final_answers)
    # the origin answers the same, except reads a workload marks as differing there (another
    # scope, which is never synced)
    same = [i for i, read in enumerate(reads) if "note" not in read]
    assert [as_sets(middle_answers)[i] for i in same] == [as_sets(origin_answers)[i] for i in same]
