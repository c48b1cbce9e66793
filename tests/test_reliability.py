"""The reliability suite at CI sizes (issue 18): fuzzed requests, hostile files, concurrency,
``kill -9``. ``benchmarks/soak.py`` runs the same machinery (:mod:`tests.hostile`) at large sizes
and prints the figures quoted in the README.

Every case is seeded, so a failure names what to replay; the assertions print the first
offending requests.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests import hostile
from zkr import MemoryDb


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[Path, dict[str, dict[str, object]]]:
    path = tmp_path / "seeded.db"
    return path, hostile.seed_database(path)


def _clean(tally: hostile.Tally) -> None:
    assert tally.tracebacks == 0, tally.problems
    assert tally.non_envelope == 0, tally.problems
    assert tally.internal_errors == 0, tally.problems
    assert tally.changed_by_failure == 0, tally.problems


def test_fuzzed_requests_keep_the_contract_and_the_data(
    seeded: tuple[Path, dict[str, dict[str, object]]],
) -> None:
    """Every command, in process: exit 0/1, one envelope, no failed request changes a row."""
    path, bases = seeded
    tally = hostile.fuzz(path, hostile.hostile_cases(18, 1_500, bases))
    _clean(tally)
    assert tally.succeeded > 50 and tally.failed > 1_000  # both paths were exercised
    assert set(tally.kinds) >= {
        "drop",
        "extra",
        "retype",
        "raw",
        "duplicate",
        "bytes",
        "size",
    }
    assert hostile.invariants(path) == []


def test_fuzzed_requests_through_real_processes(
    seeded: tuple[Path, dict[str, dict[str, object]]],
) -> None:
    """The same contract across a real process boundary (stdin bytes, exit status, streams)."""
    path, bases = seeded
    tally = hostile.fuzz(path, hostile.hostile_cases(1818, 40, bases), hostile.run_process)
    _clean(tally)
    assert tally.requests == 40


def test_fuzzed_request_lines_through_zkr_serve(
    seeded: tuple[Path, dict[str, dict[str, object]]],
) -> None:
    """The same cases as JSON lines to one ``zkr serve`` process: one envelope per line."""
    path, bases = seeded
    tally = hostile.fuzz_serve(path, hostile.hostile_cases(1819, 300, bases))
    _clean(tally)
    assert tally.requests == 300 and tally.succeeded > 10


def test_bad_db_targets_fail_cleanly_and_stay_untouched(tmp_path: Path) -> None:
    clean = tmp_path / "clean.db"
    bases = hostile.seed_database(clean)
    targets = tmp_path / "targets"
    targets.mkdir()
    for name, target in hostile.bad_targets(targets, clean):
        is_file = not str(target).startswith("file:") and Path(target).is_file()
        before = Path(target).read_bytes() if is_file else None
        for command in ("search", "remember", "export", "apply", "nope"):
            request = json.dumps(bases.get(command, bases[""])).encode()
            outcome = hostile.run_in_process(["--db", str(target), command], request)
            assert outcome.code == 1, (name, command, outcome)
            assert hostile.contract_problem(outcome) is None, (name, command, outcome)
            if before is not None:
                assert Path(target).read_bytes() == before, (name, command)
    assert not (targets / "no").exists()
    assert not (targets / "nope.db").exists()


def test_corrupted_copies_never_give_an_internal_error(tmp_path: Path) -> None:
    clean = tmp_path / "clean.db"
    bases = hostile.seed_database(clean)
    copies = tmp_path / "copies"
    copies.mkdir()
    tried = failed = 0
    for copy in hostile.corrupted_copies(clean, copies, seed=18, count=60):
        for command in ("search", "remember", "reviews", "export", "get", "delete"):
            before, before_dump = copy.read_bytes(), hostile.readable_dump(copy)
            outcome = hostile.run_in_process(
                ["--db", str(copy), command], json.dumps(bases[command]).encode()
            )
            tried += 1
            assert hostile.contract_problem(outcome) is None, (
                copy.name,
                command,
                outcome,
            )
            if outcome.code:
                failed += 1
                assert hostile.unchanged(copy, before, before_dump), (copy.name, command)
    assert tried == 360 and failed > 0


def test_a_malformed_schema_copy_is_a_storage_error_in_process(tmp_path: Path) -> None:
    """The damage the hunt of issue 18 found most: SQLite's message about the schema."""
    clean = tmp_path / "clean.db"
    hostile.seed_database(clean)
    data = bytearray(clean.read_bytes())
    at = data.find(b"CREATE INDEX")
    data[at + 3 : at + 5] = b"\xfe\xff"
    broken = tmp_path / "broken.db"
    broken.write_bytes(bytes(data))
    outcome = hostile.run_in_process(
        ["--db", str(broken), "reviews"], b'{"tenant_id":"t1","person_id":"p1"}'
    )
    assert hostile.contract_problem(outcome) is None, outcome
    assert "malformed database schema" in json.loads(outcome.stderr)["error"]


def test_concurrent_processes_lose_no_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    acknowledged = hostile.soak(path, processes=3, ops=80, seed=18)
    assert acknowledged.crashes == []
    assert acknowledged.done == 3
    assert not [m for m in acknowledged.errors if "locked" in m or "busy" in m]
    assert len(acknowledged.remembered) > 60
    assert acknowledged.lost(path) == []
    assert hostile.invariants(path) == []


@pytest.mark.parametrize("trial", range(3))
def test_kill_9_loses_no_acknowledged_write(tmp_path: Path, trial: int) -> None:
    """A writer killed at a random moment (opening, mid-transaction, between calls)."""
    path = tmp_path / "crash.db"
    if trial:  # trial 0 kills a writer that may still be creating the file
        MemoryDb.open(path).close()
    kill_after = random.Random(trial).uniform(0.05, 0.8) if trial else 0.15
    acknowledged = hostile.crash_trial(path, seed=trial, kill_after=kill_after)
    assert acknowledged.crashes == []
    if not path.exists():
        assert acknowledged.remembered == {}
        return
    assert acknowledged.lost(path) == []
    assert hostile.invariants(path) == []
    # And the file takes new writes after recovery.
    follow_up = hostile.soak(path, processes=1, ops=5, seed=100 + trial)
    assert follow_up.crashes == [] and follow_up.lost(path) == []
