"""Reliability soak (issue 18): the suite of ``tests/test_reliability.py`` at large sizes.

    python benchmarks/soak.py [--requests 20000] [--cli-requests 2000] [--serve-requests 5000]
                              [--corrupted 3000]
                              [--processes 8] [--ops 1000] [--kills 200] [--seed 18]

Prints, and asserts nothing (a non-zero figure in the last block is a bug to file):

* requests fuzzed in process (:func:`zkr.cli.run`), through real ``python -m zkr``
  processes and as request lines to one ``zkr serve`` process, over every command, with the
  tracebacks, non-envelope errors, ``internal error`` answers and failed requests that
  changed data;
* ``--db`` targets that are not zkr files, and corrupted copies of a seeded file, with the
  ``internal error`` count;
* ``--processes`` × ``--ops`` mixed operations on one file: acknowledged writes lost and
  ``database is locked`` answers;
* ``--kills`` writers killed with SIGKILL at a random moment: acknowledged writes lost and
  files breaking an invariant (:func:`tests.hostile.invariants`).

Run from the repository root (the workers import :mod:`tests.hostile`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import hostile

from zkr import MemoryDb


def _fuzz(
    directory: Path, seed: int, count: int, execute: hostile.Executor, label: str
) -> hostile.Tally:
    total = hostile.Tally()
    started = time.perf_counter()
    chunk = 2_000  # a fresh seeded file every chunk keeps the per-request dump small
    for part, start in enumerate(range(0, count, chunk)):
        path = directory / f"{label}-{part}.db"
        bases = hostile.seed_database(path)
        size = min(chunk, count - start)
        total.merge(hostile.fuzz(path, hostile.hostile_cases(seed + part, size, bases), execute))
        problems = hostile.invariants(path)
        if problems:
            total.problems.extend(problems)
    elapsed = time.perf_counter() - started
    print(
        f"  {label}: {total.requests} requests ({total.succeeded} ok, {total.failed} errors)"
        f" in {elapsed:.1f} s"
    )
    return total


def _files(directory: Path, seed: int, corrupted: int) -> tuple[int, int, int, int]:
    """(targets tried, corrupted calls tried, internal errors, files changed by a failure)."""
    clean = directory / "clean.db"
    bases = hostile.seed_database(clean)
    targets = directory / "targets"
    targets.mkdir()
    tried = internal = changed = 0
    for _, target in hostile.bad_targets(targets, clean):
        for command in sorted(hostile.COMMANDS):
            request = json.dumps(bases.get(command, bases[""])).encode()
            outcome = hostile.run_in_process(["--db", str(target), command], request)
            tried += 1
            problem = hostile.contract_problem(outcome)
            internal += problem is not None
    calls = 0
    copies = directory / "copies"
    copies.mkdir()
    for copy in hostile.corrupted_copies(clean, copies, seed, corrupted):
        for command in ("search", "remember", "reviews", "export", "get", "delete"):
            before, before_dump = copy.read_bytes(), hostile.readable_dump(copy)
            outcome = hostile.run_in_process(
                ["--db", str(copy), command], json.dumps(bases[command]).encode()
            )
            calls += 1
            problem = hostile.contract_problem(outcome)
            if problem is not None:
                internal += 1
                print(f"    {copy.name} {command}: {problem}")
            if outcome.code and not hostile.unchanged(copy, before, before_dump):
                changed += 1
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    return tried, calls, internal, changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--cli-requests", type=int, default=2_000)
    parser.add_argument("--serve-requests", type=int, default=5_000)
    parser.add_argument("--corrupted", type=int, default=3_000)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--ops", type=int, default=1_000)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    print(f"zkr reliability soak, seed {args.seed}, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="zkr-soak-") as tmp:
        directory = Path(tmp)
        print("fuzzing")
        fuzzed = _fuzz(directory, args.seed, args.requests, hostile.run_in_process, "in-process")
        cli = _fuzz(directory, args.seed + 10_000, args.cli_requests, hostile.run_process, "cli")
        fuzzed.merge(cli)
        started = time.perf_counter()
        serve_path = directory / "serve.db"
        served = hostile.fuzz_serve(
            serve_path,
            hostile.hostile_cases(
                args.seed + 20_000,
                args.serve_requests,
                hostile.seed_database(serve_path),
            ),
        )
        print(
            f"  zkr serve: {served.requests} request lines ({served.succeeded} ok,"
            f" {served.failed} errors) in {time.perf_counter() - started:.1f} s"
        )
        fuzzed.merge(served)
        print("hostile files")
        files = directory / "files"
        files.mkdir()
        started = time.perf_counter()
        targets, corrupted_calls, file_internal, file_changed = _files(
            files, args.seed, args.corrupted
        )
        print(
            f"  {targets} calls on bad --db targets, {args.corrupted} corrupted copies"
            f" ({corrupted_calls} calls) in {time.perf_counter() - started:.1f} s"
        )
        print("concurrency")
        started = time.perf_counter()
        soak_path = directory / "soak.db"
        soaked = hostile.soak(soak_path, args.processes, args.ops, args.seed)
        soak_lost = soaked.lost(soak_path)
        soak_broken = hostile.invariants(soak_path)
        locked = sum(n for m, n in soaked.errors.items() if "locked" in m or "busy" in m)
        print(
            f"  {args.processes} processes x {args.ops} ops: {len(soaked.remembered)}"
            f" remembers, {len(soaked.deleted)} deletes, {len(soaked.corrected)} corrections"
            f" acknowledged in {time.perf_counter() - started:.1f} s;"
            f" other errors {dict(soaked.errors)}"
        )
        print("kill -9")
        started = time.perf_counter()
        rng = random.Random(args.seed)
        acked = kill_lost = kill_broken = crashed = 0
        for trial in range(args.kills):
            path = directory / f"kill-{trial}.db"
            if trial % 10:  # every tenth trial kills a writer that may still create the file
                MemoryDb.open(path).close()
            result = hostile.crash_trial(path, args.seed + trial, rng.uniform(0.05, 1.5))
            crashed += len(result.crashes)
            acked += len(result.remembered) + len(result.deleted) + len(result.corrected)
            if path.exists():
                kill_lost += len(result.lost(path))
                kill_broken += bool(hostile.invariants(path))
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        print(
            f"  {args.kills} trials, {acked} acknowledged operations"
            f" in {time.perf_counter() - started:.1f} s"
        )
    print("figures")
    figures = {
        "requests fuzzed (in process, CLI processes, zkr serve)": fuzzed.requests,
        "tracebacks": fuzzed.tracebacks,
        "non-envelope errors": fuzzed.non_envelope,
        "internal errors on requests": fuzzed.internal_errors,
        "data changed by a failed request": fuzzed.changed_by_failure,
        "corrupted files tried": args.corrupted,
        "calls on corrupted files and bad --db targets": corrupted_calls + targets,
        "contract breaks (internal errors) on hostile files": file_internal,
        "hostile files changed by a failed call": file_changed,
        "acknowledged writes lost under concurrency": len(soak_lost),
        '"database is locked" answers': locked,
        "worker crashes": len(soaked.crashes) + crashed,
        "kill -9 trials": args.kills,
        "acknowledged operations before kill -9": acked,
        "acknowledged writes lost under kill -9": kill_lost,
        "files breaking an invariant (soak + kill -9)": kill_broken + bool(soak_broken),
    }
    for name, value in figures.items():
        print(f"  {name:<56} {value}")
    for problem in [*fuzzed.problems[:10], *soak_lost[:5], *soak_broken[:5]]:
        print(f"  problem: {problem}")


if __name__ == "__main__":
    main()
