"""One-shot CLI latency per command (issue 14, point 5). Prints numbers; asserts nothing.

Each command is run ``--runs`` times as one ``zkr`` process per call, the way a host without
``zkr serve`` calls it, on a store of ``--sources`` sources (a claim on every third: facts and
profile facts) built in-process first. Every call gets a different, valid request (a new text
to remember, another source to delete, the next export page, …), so no call repeats the
previous one's work. It prints p50 / p95 / min wall time per command, measured from spawning
the process to its exit with the whole answer read, and the p50 CPU time of the process (user
+ system: less sensitive to other jobs than wall time), plus the bare interpreter for scale and
the machine's load (``os.getloadavg``).

Run it with the interpreter of the install you want to measure; the CLI is that
interpreter's ``zkr`` console script (a regular, non-editable install ships bytecode, so
``PYTHONDONTWRITEBYTECODE=1`` costs nothing)::

    python3 -m venv /tmp/cli-venv && /tmp/cli-venv/bin/pip install .
    PYTHONDONTWRITEBYTECODE=1 /tmp/cli-venv/bin/python benchmarks/bench_cli.py --runs 30

Commands: ``get`` (a source), ``remember`` (a claim on every third call), lexical ``search``,
``correct`` (an accepted fact), ``delete`` (a source), ``export`` (a page of 50 events),
``apply`` (50 records: 25 commits of a source and its evidence, into a second file) and
``profile`` (a profile fact).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from zkr import MemoryDb, model

T, P = "bench", "me"
WORDS = """
the a to and of in is it you that he was for on are with as I his they be at one have this
from or had by word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so
coffee meeting robotics passport Lisbon sister peanuts plan garden piano budget flight
doctor dentist invoice project deadline recipe marathon yoga camera bicycle
""".split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


class Store:
    """The ids the calls work on, collected while the store is built."""

    def __init__(self) -> None:
        self.sources: list[str] = []
        self.facts: list[str] = []
        self.profile_facts: list[str] = []


def build(path: str, count: int, rng: random.Random) -> Store:
    """``count`` sources; every third has an accepted claim, alternately fact/profile_fact."""
    store = Store()
    with MemoryDb.open(path) as db:
        for i in range(count):
            claim = None
            if i % 3 == 0:
                kind = model.ClaimKind.FACT if i % 6 == 0 else model.ClaimKind.PROFILE_FACT
                claim = model.ClaimInput("user", f"p{i}", sentence(rng, 3), kind, i)
            result = db.remember(
                model.RememberRequest(
                    T, P, model.SourceKind.CONVERSATION, sentence(rng, 18), i, i, None, claim
                )
            )
            if claim is None:
                store.sources.append(result.source_id)
            elif claim.kind is model.ClaimKind.FACT:
                store.facts.append(str(result.claim_id))
            else:
                store.profile_facts.append(str(result.claim_id))
    return store


def apply_batches(path: str, batches: int, rng: random.Random) -> list[dict[str, Any]]:
    """Apply requests of 50 records each: 25 complete commits of a source and its evidence,
    exported (in feed order) from a store built at ``path``."""
    with MemoryDb.open(path) as db:
        for i in range(25 * batches):
            db.remember(
                model.RememberRequest(
                    T, P, model.SourceKind.CONVERSATION, sentence(rng, 18), i, i, None, None
                )
            )
        commits: list[dict[str, Any]] = []
        after_commit, after_event = 0, -1
        while True:
            page = model.encode(
                db.export(model.ExportRequest(T, P, 1, after_commit, after_event, None, 100))
            )
            for commit in page["commits"]:
                if commits and commits[-1]["sequence"] == commit["sequence"]:
                    commits[-1]["records"].extend(commit["records"])
                else:
                    commits.append(commit)
            if page["complete"]:
                break
            after_commit, after_event = page["next_after_commit"], page["next_after_event_index"]
    requests = []
    for first in range(0, len(commits), 25):
        chunk = commits[first : first + 25]
        for commit in chunk:
            commit["first_event_index"] = 0
        requests.append(
            {
                "tenant_id": T,
                "person_id": P,
                "export_format": 1,
                "database_schema_version": 10,
                "commits": chunk,
            }
        )
    assert all(sum(len(c["records"]) for c in r["commits"]) == 50 for r in requests)
    return requests


def call_ms(zkr: list[str], db: str, command: str, request: dict[str, Any]) -> tuple[float, float]:
    """Wall and CPU (user + system of the child) milliseconds of one call."""
    payload = json.dumps(request).encode()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([*zkr, "--db", db, command], input=payload, capture_output=True)
    elapsed = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed: {proc.stderr.decode()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return elapsed, cpu * 1000


def row(label: str, calls: list[tuple[float, float]]) -> str:
    ordered = sorted(wall for wall, _ in calls)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    cpu = statistics.median(c for _, c in calls)
    return (
        f"{label:<24}p50 {statistics.median(ordered):6.1f} ms  p95 {p95:6.1f} ms"
        f"  min {ordered[0]:6.1f} ms  CPU p50 {cpu:6.1f} ms  (n={len(ordered)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=30, help="calls per command")
    parser.add_argument("--zkr", help="the zkr executable (default: next to this interpreter)")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    script = Path(sys.executable).with_name("zkr")
    zkr = [args.zkr] if args.zkr else [str(script)] if script.exists() else []
    if not zkr:
        zkr = [sys.executable, "-m", "zkr"]
    rng = random.Random(args.seed)
    runs = args.runs
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db")
        store = build(db, max(args.sources, 6 * runs), rng)
        applied = str(Path(tmp) / "applied.db")
        MemoryDb.open(applied).close()
        batches = apply_batches(str(Path(tmp) / "feed.db"), runs, rng)
        n = len(store.sources)
        hwm = model.encode(MemoryDb.open(db).export(model.ExportRequest(T, P, 1, 0, -1, None, 1)))[
            "high_water_mark"
        ]
        scope = {"tenant_id": T, "person_id": P}
        now = 10**9
        deleted = store.sources[n // 2 : n // 2 + runs]
        plan: list[tuple[str, str, list[dict[str, Any]]]] = [
            (
                "get (source)",
                "get",
                [
                    {**scope, "target": {"kind": "source", "id": rng.choice(store.sources)}}
                    for _ in range(runs)
                ],
            ),
            (
                "remember",
                "remember",
                [
                    {
                        **scope,
                        "kind": "conversation",
                        "text": sentence(rng, 18),
                        "captured_at": now + i,
                        "recorded_at": now + i,
                        "claim": (
                            {
                                "subject": "user",
                                "predicate": f"cli{i}",
                                "value": sentence(rng, 2),
                                "kind": "fact",
                                "valid_from": now + i,
                            }
                            if i % 3 == 0
                            else None
                        ),
                    }
                    for i in range(runs)
                ],
            ),
            (
                "search (lexical)",
                "search",
                [{**scope, "query": sentence(rng, 5)} for _ in range(runs)],
            ),
            (
                "correct",
                "correct",
                [
                    {
                        **scope,
                        "claim_id": claim,
                        "text": "Actually it changed.",
                        "value": sentence(rng, 2),
                        "valid_at": now + i,
                        "recorded_at": now + i,
                    }
                    for i, claim in enumerate(store.facts[:runs])
                ],
            ),
            (
                "delete",
                "delete",
                [
                    {**scope, "source_id": source, "deleted_at": now + i}
                    for i, source in enumerate(deleted)
                ],
            ),
            (
                "export (50 events)",
                "export",
                [
                    {
                        **scope,
                        "export_format": 1,
                        "after_commit": rng.randrange(hwm // 2),
                        "high_water_mark": hwm,
                        "limit": 50,
                    }
                    for _ in range(runs)
                ],
            ),
            ("apply (50 records)", "apply", batches),
            (
                "profile",
                "profile",
                [
                    {**scope, "stability": "current", "claim_id": claim, "recorded_at": now + i}
                    for i, claim in enumerate(store.profile_facts[:runs])
                ],
            ),
        ]
        floor = []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            floor.append(((time.perf_counter() - start) * 1000, cpu * 1000))
        results = []
        for label, command, requests in plan:
            target = applied if command == "apply" else db
            results.append((label, [call_ms(zkr, target, command, r) for r in requests]))
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"one-shot CLI ({' '.join(zkr)}), {max(args.sources, 6 * runs)} sources, {runs} calls"
            f" each; Python {platform.python_version()}, {os.cpu_count()} CPUs,"
            f" PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')},"
            f" load average after the run: {load}"
        )
        print(row("python -c pass (floor)", floor))
        for label, times in results:
            print(row(label, times))


if __name__ == "__main__":
    main()
