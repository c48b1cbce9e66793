"""Core write-path and CLI start-up benchmark (issue 2). Prints numbers; asserts nothing.

    python benchmarks/bench_core.py [--sources 10000] [--cli-runs 15]

* in-process ``remember`` throughput on a generated corpus (an accepted claim on every third
  source), target >= 3,000/s at 10k sources, and ``remember_many`` (100 per transaction) on it;
* wall time of one CLI call of ``remember`` and of ``search`` on that database (median of
  ``--cli-runs``), target <= 40 ms, through the installed ``zkr`` script and ``python -m zkr``,
  with the bare interpreter's start-up for scale;
* the top of ``python -X importtime -m zkr`` for a lexical search (numpy must not appear).

Lexical search latency at 10k/100k sources is measured by ``benchmarks/bench_search.py``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zkr import MemoryDb
from zkr.model import ClaimInput, ClaimKind, RememberRequest, SourceKind

WORDS = """
the a to and of in is it you that he was for on are with as I his they be at one have this
from or had by word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no
most people my over know water than call first who may down side been now find library
coffee meeting robotics passport Lisbon sister peanuts plan garden piano budget flight
doctor dentist invoice project deadline recipe marathon yoga camera bicycle
""".split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def build(path: str, count: int, seed: int = 7, batch: int = 1) -> float:
    """Remember ``count`` sources (claim on every third); returns sources per second.

    ``batch`` > 1 stores them with ``remember_many``, that many per transaction."""
    rng = random.Random(seed)
    requests = []
    for i in range(count):
        claim = None
        if i % 3 == 0:
            claim = ClaimInput("user", rng.choice(WORDS), sentence(rng, 3), ClaimKind.FACT, i)
        requests.append(
            RememberRequest(
                "bench", "me", SourceKind.CONVERSATION, sentence(rng, 18), i, i, f"turn-{i}", claim
            )
        )
    with MemoryDb.open(path) as db:
        start = time.perf_counter()
        if batch == 1:
            for request in requests:
                db.remember(request)
        else:
            for first in range(0, count, batch):
                db.remember_many(requests[first : first + batch])
        elapsed = time.perf_counter() - start
    return count / elapsed


def cli_env() -> dict[str, str]:
    """The CLI as installed: bytecode compiled, even if this shell disables writing it
    (PYTHONDONTWRITEBYTECODE would otherwise make every call compile zkr from source)."""
    import zkr

    compileall.compile_dir(os.path.dirname(zkr.__file__), quiet=1)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cli_prefix(kind: str) -> list[str]:
    """``script``: the installed ``zkr`` console script (what agents and plugins run);
    ``module``: ``python -m zkr`` (adds runpy's imports, about 2 ms)."""
    script = Path(sys.executable).with_name("zkr")
    if kind == "script" and script.exists():
        return [str(script)]
    return [sys.executable, "-m", "zkr"]


def cli_ms(db: str, command: str, request: dict[str, object], runs: int, kind: str) -> float:
    payload = json.dumps(request).encode()
    env = cli_env()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(
            [*cli_prefix(kind), "--db", db, command],
            input=payload,
            capture_output=True,
            check=False,
            env=env,
        )
        times.append((time.perf_counter() - start) * 1000)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr.decode())
    return statistics.median(times)


def python_floor_ms(runs: int) -> float:
    """Interpreter start plus the standard-library modules any zkr call needs."""
    env = cli_env()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import sqlite3, json, typing"], env=env, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def importtime_top(db: str, top: int) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "zkr", "--db", db, "search"],
        input=b'{"tenant_id":"bench","person_id":"me","query":"library coffee"}',
        capture_output=True,
        check=True,
        env=cli_env(),
    )
    rows = []
    for line in proc.stderr.decode().splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line.split("|", 2)
        rows.append((int(cumulative), name.rstrip()))
    rows.sort(reverse=True)
    return [f"{cum / 1000:8.1f} ms  {name}" for cum, name in rows[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=10_000)
    parser.add_argument("--cli-runs", type=int, default=15)
    parser.add_argument("--import-top", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bench.db")
        rate = build(path, args.sources)
        print(
            f"remember (in-process, {args.sources} sources, claim on every 3rd): "
            f"{rate:,.0f} sources/s"
        )
        batched = build(str(Path(tmp) / "batched.db"), args.sources, batch=100)
        print(f"remember_many, 100 per transaction, same corpus: {batched:,.0f} sources/s")
        remember = {
            "tenant_id": "bench",
            "person_id": "me",
            "kind": "conversation",
            "text": "CLI timing note about the library",
            "captured_at": 1,
            "recorded_at": 1,
        }
        search = {"tenant_id": "bench", "person_id": "me", "query": "where is the coffee meeting"}
        for kind, label in (("script", "zkr console script"), ("module", "python -m zkr")):
            remember_ms = cli_ms(path, "remember", remember, args.cli_runs, kind)
            search_ms = cli_ms(path, "search", search, args.cli_runs, kind)
            print(
                f"CLI wall time ({label}), median of {args.cli_runs}: "
                f"remember {remember_ms:.1f} ms, search {search_ms:.1f} ms"
            )
        floor_ms = python_floor_ms(args.cli_runs)
        print(f"  for scale, a bare `python -c 'import sqlite3, json, typing'`: {floor_ms:.1f} ms")
        print("python -X importtime, top cumulative imports for a lexical CLI search:")
        for line in importtime_top(path, args.import_top):
            print("  " + line)


if __name__ == "__main__":
    main()
