"""Lifecycle benchmark (issue 3): ``delete`` of a source supporting N claims. Prints numbers.

    python benchmarks/bench_lifecycle.py [--claims 10 100 1000] [--runs 3] [--background 10000]

For each N, a fresh database gets a base source whose evidence is the *only* support of N
accepted ``profile_fact`` claims (each remembered with its own source, linked to the base
evidence, then its own source deleted), a profile entry for each claim and ten daily reviews
citing the base evidence, plus ``--background`` unrelated memories. Deleting the base source
then retracts all N claims, sweeps N profile entries and removes the ten reviews: the worst
case of spec/lifecycle.md §3.7. Reported per N (median of ``--runs`` fresh databases):

* wall time of ``MemoryDb.delete`` (synchronous=FULL, WAL, as in production);
* ``py stmts``: statements the Python code issued (``execute`` calls plus ``executemany``
  calls) — constant in N when the cascade is set-based;
* ``event rows``: executions of the one prepared ``memory_export_events`` INSERT (one per feed
  record: the feed layout stores one row per record, so this grows with N by design);
* ``sqlite traces``: every statement start SQLite reports to ``set_trace_callback`` (each
  executemany row and each trigger program run counts once).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterable
from typing import Any

from zkr import MemoryDb
from zkr.model import (
    ClaimInput,
    ClaimKind,
    DeleteRequest,
    LinkRequest,
    ProfileRequest,
    Relation,
    RememberRequest,
    ReviewRequest,
    SourceKind,
    Stability,
)
from zkr.store import lifecycle

T, P = "bench", "me"


class CountingConnection:
    """Forwards to a real connection, counting the statements Python issues."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.executes = 0
        self.executemanys = 0
        self.executemany_rows = 0

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self.executes += 1
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Any]) -> sqlite3.Cursor:
        batch = list(rows)
        self.executemanys += 1
        self.executemany_rows += len(batch)
        return self._conn.executemany(sql, batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def build(path: str, claims: int, background: int) -> str:
    """The worst-case fixture described in the module docstring; returns the base source id."""
    with MemoryDb.open(path) as db:
        db.conn.execute("PRAGMA synchronous = OFF")  # setup speed only
        for i in range(background):
            db.remember(
                RememberRequest(T, P, SourceKind.CONVERSATION, f"background note {i}", 1, 1)
            )
        base = db.remember(RememberRequest(T, P, SourceKind.CONVERSATION, "base source", 10, 10))
        for i in range(claims):
            own = db.remember(
                RememberRequest(
                    T,
                    P,
                    SourceKind.CONVERSATION,
                    f"claim source {i}",
                    11,
                    11,
                    claim=ClaimInput("Sam", f"key{i}", f"value {i}", ClaimKind.PROFILE_FACT, 11),
                )
            )
            assert own.claim_id is not None
            db.link(LinkRequest(T, P, own.claim_id, base.evidence_id, Relation.SUPPORTS, 9000))
            db.delete(DeleteRequest(T, P, own.source_id, 12))
            db.profile(ProfileRequest(T, P, Stability.CURRENT, own.claim_id, 13))
        for day in range(10):
            db.review(ReviewRequest(T, P, f"2026-07-{day + 10}", "s", [base.evidence_id], 14))
        return base.source_id


def measure(claims: int, background: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        source_id = build(path, claims, background)
        with MemoryDb.open(path) as db:
            traces: list[str] = []
            db.conn.set_trace_callback(traces.append)
            counting = CountingConnection(db.conn)
            start = time.perf_counter()
            result = lifecycle.delete(counting, DeleteRequest(T, P, source_id, 20))  # type: ignore[arg-type]
            elapsed = time.perf_counter() - start
            db.conn.set_trace_callback(None)
            assert (result.evidence_count, result.claim_count) == (1, claims), result
            (events,) = db.conn.execute(
                "SELECT COUNT(*) FROM memory_export_events WHERE commit_sequence ="
                " (SELECT MAX(sequence) FROM memory_commits)"
            ).fetchone()
            assert events == 4 + 2 * claims + 10, events
        return {
            "ms": elapsed * 1000,
            "py_stmts": counting.executes + counting.executemanys,
            "event_rows": counting.executemany_rows,
            "traces": len(traces),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--background", type=int, default=10_000)
    args = parser.parse_args()
    print(
        f"delete of a source that alone supports N claims (+N profile entries, 10 reviews,"
        f" {args.background} background memories); median of {args.runs} runs"
    )
    print(f"{'N':>6} {'ms':>9} {'py stmts':>9} {'event rows':>11} {'sqlite traces':>14}")
    for n in args.claims:
        runs = [measure(n, args.background) for _ in range(args.runs)]
        row = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(
            f"{n:>6} {row['ms']:>9.1f} {row['py_stmts']:>9.0f} {row['event_rows']:>11.0f}"
            f" {row['traces']:>14.0f}"
        )


if __name__ == "__main__":
    main()
