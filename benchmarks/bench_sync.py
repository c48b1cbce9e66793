"""Sync throughput benchmark (issue 5): ``export`` and ``apply`` in records per second.

    python benchmarks/bench_sync.py [--records 100000] [--limit 100] [--batch-bytes 1048576]

1. Builds an origin database in a temporary directory: remembers with an accepted claim (4
   feed records each: source, evidence, claim, claim_evidence) until ``--records`` records
   exist. The build is not timed.
2. **export**: pages the whole scope in-process through ``MemoryDb.export`` with ``--limit``
   events per page (100 is the maximum), freezing the first page's mark, as a host does.
3. **apply**: stages the pages into complete commits (spec/sync.md §5) and applies them to an
   empty replica through ``MemoryDb.apply`` in batches of at most ``--batch-bytes`` of compact
   JSON (the CLI's request limit; staging and batching are not timed, only the apply calls).
4. **replay**: applies the same batches again (every record is a ledger hit).

Targets (issue 5): >= 10,000 records/s for export and for apply. Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from zkr import MemoryDb
from zkr.model import (
    ApplyRequest,
    ClaimInput,
    ClaimKind,
    ExportRequest,
    RememberRequest,
    SourceKind,
)

T, P = "bench", "sam"
WORDS = (
    "library coffee meeting robotics passport Lisbon sister peanuts plan garden piano budget "
    "flight doctor dentist invoice project deadline recipe marathon yoga camera bicycle the a "
    "to and of in is it you that he was for on are with as his they be at one have this from"
).split()


def build(path: str, records: int, seed: int = 5) -> float:
    """Fill ``path`` with ``records`` feed records (4 per remember); returns seconds taken."""
    rng = random.Random(seed)
    started = time.perf_counter()
    with MemoryDb.open(path) as db:
        db.conn.execute("PRAGMA synchronous = NORMAL")  # setup only: no fsync per remember
        for i in range(records // 4):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
            db.remember(
                RememberRequest(
                    T,
                    P,
                    SourceKind.CONVERSATION,
                    f"Turn {i}: {text}.",
                    1_700_000_000 + i,
                    1_700_000_000 + i,
                    claim=ClaimInput(
                        "Sam", f"note{i % 97}", text[:40], ClaimKind.FACT, 1_700_000_000
                    ),
                )
            )
    return time.perf_counter() - started


class Timer:
    """Wall-clock and process CPU seconds of one phase (CPU is what a loaded machine hides)."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def export_all(db: MemoryDb, limit: int) -> tuple[list[dict[str, Any]], tuple[float, float]]:
    """Every page of the scope from (0, -1) with a frozen mark; returns (pages, (wall, cpu))."""
    pages: list[dict[str, Any]] = []
    timer = Timer()
    after, index, mark = 0, -1, None
    while True:
        page = db.export(ExportRequest(T, P, 1, after, index, mark, limit)).to_json()
        pages.append(page)
        if page["complete"]:
            break
        mark = page["high_water_mark"]
        after, index = page["next_after_commit"], page["next_after_event_index"]
    return pages, timer.stop()


def stage(pages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Complete commits in feed order (pages are contiguous here; spec/sync.md §5 step 3)."""
    staged: dict[int, dict[str, Any]] = {}
    done: list[dict[str, Any]] = []
    for page in pages:
        for commit in page["commits"]:
            entry = staged.setdefault(
                commit["sequence"],
                {
                    **{k: commit[k] for k in ("sequence", "recorded_at", "event_count")},
                    "records": {},
                },
            )
            for offset, record in enumerate(commit["records"]):
                entry["records"][commit["first_event_index"] + offset] = record
            if len(entry["records"]) == entry["event_count"]:
                del staged[commit["sequence"]]
                records = [entry["records"][i] for i in range(entry["event_count"])]
                done.append({**entry, "first_event_index": 0, "records": records})
    assert not staged, "incomplete commits after the last page"
    return done


def batches(commits: list[dict[str, Any]], budget: int) -> list[list[dict[str, Any]]]:
    """Consecutive commits, as many per batch as fit ``budget`` bytes of compact JSON."""
    out: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    used = 200  # the request's fixed part
    for commit in commits:
        size = len(json.dumps(commit, ensure_ascii=False, separators=(",", ":")).encode()) + 1
        if current and used + size > budget:
            out.append(current)
            current, used = [], 200
        current.append(commit)
        used += size
    if current:
        out.append(current)
    return out


def apply_all(
    db: MemoryDb, groups: list[list[dict[str, Any]]]
) -> tuple[dict[str, int], tuple[float, float]]:
    totals = {
        "commits_applied": 0,
        "commits_skipped": 0,
        "records_applied": 0,
        "records_skipped": 0,
    }
    timer = Timer()
    for group in groups:
        result = db.apply(ApplyRequest(T, P, 1, 10, group))
        for key, value in result.to_json().items():
            totals[key] += value
    return totals, timer.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=1_048_576)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        origin, replica = str(Path(tmp) / "origin.db"), str(Path(tmp) / "replica.db")
        print(f"building {args.records} records ...", file=sys.stderr)
        built = build(origin, args.records)
        with MemoryDb.open(origin) as db:
            pages, export_s = export_all(db, args.limit)
        records = sum(len(c["records"]) for page in pages for c in page["commits"])
        commits = stage(pages)
        groups = batches(commits, args.batch_bytes)
        with MemoryDb.open(replica) as db:
            applied, apply_s = apply_all(db, groups)
            replayed, replay_s = apply_all(db, groups)
        print(f"records: {records} in {len(commits)} commits (build {built:.1f} s)")

        def rate(count: int, took: tuple[float, float]) -> str:
            wall, cpu = took
            return (
                f"{wall:.2f} s wall, {count / wall:,.0f} records/s"
                f" ({cpu:.2f} s CPU, {count / cpu:,.0f} records/CPU-s)"
            )

        print(f"export: {len(pages)} pages of <= {args.limit} events: {rate(records, export_s)}")
        print(
            f"apply:  {len(groups)} requests of <= {args.batch_bytes} bytes:"
            f" {rate(applied['records_applied'], apply_s)}"
        )
        print(f"replay: all skipped: {rate(replayed['records_skipped'], replay_s)}")
        assert applied["records_applied"] == records and replayed["records_skipped"] == records
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
