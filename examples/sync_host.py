"""A sync host: moves one scope's authoritative commits between zkr databases.

    python examples/sync_host.py --state sync.db --tenant T --person P SOURCE.db DEST.db
    python examples/sync_host.py --state sync.db --tenant T --person P A.db B.db --both-ways
    python examples/sync_host.py apply-request --db DEST.db < request.json

The first form follows the host protocol of the seeds (docs/sync.md, spec/sync.md §5):

1. Export pages from SOURCE starting at the durable *applied* cursor (``(0, -1)`` the first
   time), keeping the first page's ``high_water_mark`` for every later page of the run.
2. Stage events per commit sequence at ``first_event_index + offset``; a commit is released
   only when indexes ``0..event_count-1`` are all there, with the same ``event_count`` and
   ``recorded_at`` on every page. A page's partial commit is never passed to ``apply``.
3. Apply released commits to DEST through the library API (:meth:`zkr.MemoryDb.apply`), in
   ascending order, as many per request as fit 1 MiB of compact JSON (the CLI's request limit,
   so the same requests would also go through ``zkr apply``). A commit that alone needs more is
   sent alone: the library API has no request limit.
4. Only after ``apply`` returned, durably advance the applied cursor to
   ``(sequence, event_count - 1)`` of the last commit of the request.

**Echo guard.** The feed carries no origin, so a database re-exports what it applied; sent back
to its author, such a commit is applied a second time, can regress newer state between batches
and, with a deletion in the history, fails forever (``cannot revive tombstoned evidence``). The
host therefore records the ledger key ``(kind, id, payload_hash)`` of every record it reads
from a database and never delivers that exact record back to it: the author already holds it.
Commits left empty are skipped (their cursor still advances). ``--both-ways`` syncs SOURCE→DEST
then DEST→SOURCE with this guard.

The state file is a small SQLite database: one cursor per (source, destination, scope) and the
keys read from each database. Replays are safe (the destination's ledger skips them), so a crash
between ``apply`` and the cursor update only causes a harmless re-apply.

``apply-request`` applies one JSON ``apply`` request of any size read from stdin: the way to
move a complete commit that exceeds the CLI's 1 MiB request limit without the library in the
host itself (see docs/decisions-sync.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from zkr import MemoryDb, ZkrError
from zkr.codec import cli_dumps, parse_json
from zkr.model import ApplyRequest, ExportRequest
from zkr.store.records import parse_record, payload_hash, record_identity

EXPORT_FORMAT = 1
REQUEST_LIMIT = 1_048_576
"""Bytes of one CLI request; batches are cut to fit it whenever a commit allows."""

PAGE_LIMIT = 100
"""Events per export page (the largest the feed allows)."""

Commit = dict[str, Any]
Key = tuple[str, str, str]


class ProtocolError(Exception):
    """Pages that break the staging rules; the host stops and advances nothing."""


# --------------------------------------------------------------------------- staging


@dataclass
class _Staged:
    event_count: int
    recorded_at: int
    records: dict[int, Any] = field(default_factory=dict)


class Stager:
    """Stages events per sequence and releases each commit once 0..event_count-1 are present."""

    def __init__(self, after: tuple[int, int] = (0, -1)) -> None:
        self.cursor = after  # the last released commit: (sequence, last event index)
        self.staged: dict[int, _Staged] = {}

    def add(self, page: dict[str, Any]) -> list[Commit]:
        """The commits this page completes, ascending, each with ``first_event_index`` 0."""
        released: list[Commit] = []
        for commit in page["commits"]:
            sequence, count = commit["sequence"], commit["event_count"]
            if sequence <= self.cursor[0]:
                raise ProtocolError(f"commit {sequence} arrives after {self.cursor[0]}")
            entry = self.staged.setdefault(sequence, _Staged(count, commit["recorded_at"]))
            if (entry.event_count, entry.recorded_at) != (count, commit["recorded_at"]):
                raise ProtocolError(f"commit {sequence} changes event_count or recorded_at")
            for offset, record in enumerate(commit["records"]):
                index = commit["first_event_index"] + offset
                if not 0 <= index < count or index in entry.records:
                    raise ProtocolError(
                        f"commit {sequence}: event {index} is out of range or repeated"
                    )
                entry.records[index] = record
            if len(entry.records) == count:
                if any(other < sequence for other in self.staged if other != sequence):
                    raise ProtocolError(f"commit {sequence} completes before an earlier commit")
                del self.staged[sequence]
                released.append(
                    {
                        "sequence": sequence,
                        "recorded_at": entry.recorded_at,
                        "event_count": count,
                        "first_event_index": 0,
                        "records": [entry.records[i] for i in range(count)],
                    }
                )
                self.cursor = (sequence, count - 1)
        return released


def request_size(tenant: str, person: str, version: int, commits: list[Commit]) -> int:
    """Bytes of the compact UTF-8 JSON ``apply`` request holding ``commits``."""
    request = {
        "export_format": EXPORT_FORMAT,
        "database_schema_version": version,
        "tenant_id": tenant,
        "person_id": person,
        "commits": commits,
    }
    return len(json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def batches(
    commits: list[Commit], tenant: str, person: str, version: int, limit: int = REQUEST_LIMIT
) -> Iterator[list[Commit]]:
    """Consecutive commits, as many per request as fit ``limit`` bytes (an oversized commit
    goes alone: the library API applies it; the CLI could not)."""
    current: list[Commit] = []
    overhead = request_size(tenant, person, version, [])
    used = overhead
    for commit in commits:
        size = request_size(tenant, person, version, [commit]) - overhead + (1 if current else 0)
        if current and used + size > limit:
            yield current
            current, used = [], overhead
            size -= 1
        current.append(commit)
        used += size
    if current:
        yield current


# --------------------------------------------------------------------------- durable state


class SyncState:
    """Applied cursors and the echo guard, in a small SQLite file (one transaction per step)."""

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS cursors (
                source TEXT NOT NULL, destination TEXT NOT NULL,
                tenant_id TEXT NOT NULL, person_id TEXT NOT NULL,
                sequence INTEGER NOT NULL, event_index INTEGER NOT NULL,
                PRIMARY KEY (source, destination, tenant_id, person_id));
            CREATE TABLE IF NOT EXISTS exported (
                database TEXT NOT NULL, tenant_id TEXT NOT NULL, person_id TEXT NOT NULL,
                record_kind TEXT NOT NULL, record_id TEXT NOT NULL, payload_hash TEXT NOT NULL,
                PRIMARY KEY (database, tenant_id, person_id, record_kind, record_id,
                             payload_hash)) WITHOUT ROWID;
            """
        )

    def close(self) -> None:
        self.conn.close()

    def cursor(self, source: str, destination: str, scope: tuple[str, str]) -> tuple[int, int]:
        row = self.conn.execute(
            "SELECT sequence, event_index FROM cursors WHERE source = ? AND destination = ?"
            " AND tenant_id = ? AND person_id = ?",
            (source, destination, *scope),
        ).fetchone()
        return (0, -1) if row is None else (row[0], row[1])

    def advance(
        self, source: str, destination: str, scope: tuple[str, str], cursor: tuple[int, int]
    ) -> None:
        self.conn.execute(
            "INSERT INTO cursors (source, destination, tenant_id, person_id, sequence,"
            " event_index) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE"
            " SET sequence = excluded.sequence, event_index = excluded.event_index",
            (source, destination, *scope, *cursor),
        )

    def remember_exported(self, database: str, scope: tuple[str, str], keys: Iterable[Key]) -> None:
        """Record keys read from ``database`` (before anything is applied elsewhere)."""
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(
            "INSERT OR IGNORE INTO exported (database, tenant_id, person_id, record_kind,"
            " record_id, payload_hash) VALUES (?, ?, ?, ?, ?, ?)",
            [(database, *scope, *key) for key in keys],
        )
        self.conn.execute("COMMIT")

    def authored_by(self, database: str, scope: tuple[str, str], key: Key) -> bool:
        """True when ``database`` itself exported exactly this record."""
        return (
            self.conn.execute(
                "SELECT 1 FROM exported WHERE database = ? AND tenant_id = ? AND person_id = ?"
                " AND record_kind = ? AND record_id = ? AND payload_hash = ?",
                (database, *scope, *key),
            ).fetchone()
            is not None
        )


def ledger_key(record: Any) -> Key:
    """(kind, id, payload_hash) of a received record, hashed over its canonical form."""
    parsed = parse_record(record)
    kind, record_id = record_identity(parsed)
    return kind, record_id, payload_hash(parsed)


# --------------------------------------------------------------------------- one direction


@dataclass
class SyncReport:
    pages: int = 0
    commits_released: int = 0
    echo_records_dropped: int = 0
    requests: int = 0
    oversized_requests: int = 0
    counters: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("commits_applied", "commits_skipped", "records_applied", "records_skipped"), 0
        )
    )


def sync(
    source: MemoryDb,
    destination: MemoryDb,
    state: SyncState,
    tenant: str,
    person: str,
    *,
    page_limit: int = PAGE_LIMIT,
    request_limit: int = REQUEST_LIMIT,
) -> SyncReport:
    """One run from the applied cursor to a fresh high-water mark of ``source``."""
    scope = (tenant, person)
    src, dst = os.path.realpath(source.path), os.path.realpath(destination.path)
    report = SyncReport()
    after = state.cursor(src, dst, scope)
    stager = Stager(after)
    request_cursor, mark = after, None
    while True:
        page = source.export(
            ExportRequest(tenant, person, EXPORT_FORMAT, *request_cursor, mark, page_limit)
        ).to_json()  # the page as it would travel between hosts
        report.pages += 1
        if mark is None:
            mark = page["high_water_mark"]  # frozen for every later page of this run
        keys = [ledger_key(r) for commit in page["commits"] for r in commit["records"]]
        state.remember_exported(src, scope, keys)
        released = stager.add(page)
        report.commits_released += len(released)
        outgoing: list[tuple[Commit, tuple[int, int]]] = []
        for commit in released:
            done = (commit["sequence"], commit["event_count"] - 1)
            kept = [
                r for r in commit["records"] if not state.authored_by(dst, scope, ledger_key(r))
            ]
            report.echo_records_dropped += commit["event_count"] - len(kept)
            if kept:
                outgoing.append(({**commit, "event_count": len(kept), "records": kept}, done))
            elif not outgoing:
                state.advance(src, dst, scope, done)  # nothing to deliver: handled
            else:
                outgoing[-1] = (outgoing[-1][0], done)  # advance past it with the previous one
        cursor_of = {id(commit): done for commit, done in outgoing}
        version = page["database_schema_version"]
        commits = [commit for commit, _ in outgoing]
        for batch in batches(commits, tenant, person, version, request_limit):
            if request_size(tenant, person, version, batch) > request_limit:
                report.oversized_requests += 1  # only the library (or apply-request) takes it
            result = destination.apply(ApplyRequest(tenant, person, EXPORT_FORMAT, version, batch))
            report.requests += 1
            for name, value in result.to_json().items():
                report.counters[name] += value
            state.advance(src, dst, scope, cursor_of[id(batch[-1])])
        if page["complete"]:
            return report
        request_cursor = (page["next_after_commit"], page["next_after_event_index"])


# --------------------------------------------------------------------------- command line


def _apply_request(db_path: str) -> int:
    """``apply-request``: one apply request of any size from stdin, printed like the CLI."""
    try:
        request = ApplyRequest.from_json(parse_json(sys.stdin.buffer.read()))
        with MemoryDb.open(db_path) as db:
            result = db.apply(request)
    except ZkrError as exc:
        sys.stderr.write(cli_dumps({"error": exc.message}) + "\n")
        return 1
    sys.stdout.write(cli_dumps(result.to_json()) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["apply-request"]:
        sub = argparse.ArgumentParser(prog="sync_host.py apply-request")
        sub.add_argument("--db", required=True)
        return _apply_request(sub.parse_args(args_in[1:]).db)
    parser = argparse.ArgumentParser(description="Sync one scope between zkr databases.")
    parser.add_argument("source")
    parser.add_argument("destination")
    parser.add_argument("--state", required=True, help="SQLite file for cursors and echo guard")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--person", required=True)
    parser.add_argument("--both-ways", action="store_true")
    parser.add_argument("--page-limit", type=int, default=PAGE_LIMIT)
    args = parser.parse_args(args_in)
    if not 1 <= args.page_limit <= 100:
        parser.error("--page-limit must be between 1 and 100")
    if os.path.realpath(args.source) == os.path.realpath(args.destination):
        parser.error("source and destination are the same database")
    if "://" not in args.source and not os.path.exists(args.source):
        # MemoryDb.open would create it: a mistyped path would "sync" an empty store
        message = f"source database {args.source} does not exist"
        print(json.dumps({"error": message}), file=sys.stderr)
        return 1
    try:
        state = SyncState(args.state)
    except sqlite3.Error as exc:
        print(json.dumps({"error": f"cannot open state file {args.state}: {exc}"}), file=sys.stderr)
        return 1
    try:
        with MemoryDb.open(args.source) as a, MemoryDb.open(args.destination) as b:
            directions = [(a, b), (b, a)] if args.both_ways else [(a, b)]
            for src, dst in directions:
                report = sync(src, dst, state, args.tenant, args.person, page_limit=args.page_limit)
                print(
                    json.dumps(
                        {"from": src.path, "to": dst.path, **report.__dict__},
                        sort_keys=True,
                    )
                )
    except (ZkrError, ProtocolError) as exc:
        print(json.dumps({"error": str(exc)}), file=sys.stderr)
        return 1
    finally:
        state.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
