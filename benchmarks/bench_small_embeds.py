"""CLI hybrid search right after a few one-row CLI ``embed`` calls (an agent that embeds each
turn as it goes): is the fresh process still on the numpy-free warm path?

For each count k of ``--counts`` (in order) it runs k agent turns — a CLI ``remember`` of a
new memory, then a CLI ``embed`` of its source (one row) — and then times three CLI hybrid
searches (fresh processes) and checks the answer against a reference search that reads no
side file (``ZKR_VECTOR_CACHE=0``: every vector from the database). It prints the ``embed``
wall time (median), the searches' wall times and whether each imported numpy. With
``--compare OTHER/src`` it then times one search of that zkr (before/after under the same
load; a zkr that patches the side files in that search brings them up to date, so the next
count starts from current side files) and three more of this one (the warm path with nothing
written since, for reference).

Usage (the store is modified: run it on a copy)::

    cp -r /tmp/zkr-bench-dense/store-v2-100000-384.db* /tmp/copy/
    .venv/bin/python benchmarks/bench_small_embeds.py /tmp/copy/store-v2-100000-384.db
    .venv/bin/python benchmarks/bench_small_embeds.py STORE --counts 1 5 50 --compare OLD/src

The store is one built by ``benchmarks/bench_dense.py`` (tenant ``bench``, person ``me``, lane
``bench/minilm`` version ``1``, 384-dimension cosine vectors), with its side files current.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time

T, P, MODEL, VERSION = "bench", "me", "bench/minilm", "1"

# the CLI, reporting on stderr whether numpy was imported
CLI = """
import atexit, sys
atexit.register(lambda: sys.stderr.write("numpy=%d\\n" % ("numpy" in sys.modules)))
from zkr.cli import main
sys.exit(main(sys.argv[1:]))
"""


def unit(rng: random.Random, dim: int) -> list[float]:
    v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


def run(db: str, command: str, request: object, env: dict[str, str]) -> tuple[float, str, str]:
    """One CLI call: (wall seconds, stdout, stderr)."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CLI, "--db", db, command],
        input=json.dumps(request).encode(),
        capture_output=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed: {proc.stderr.decode()}")
    return wall, proc.stdout.decode(), proc.stderr.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 5, 50])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--src", help="the zkr to measure: a checkout's src/ (default: this)")
    parser.add_argument("--compare", help="another checkout's src/ (before/after)")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = args.src
    other_env = {**env, "PYTHONPATH": args.compare} if args.compare else None
    reference_env = {**env, "ZKR_VECTOR_CACHE": "0"}
    rng = random.Random(7)
    query = unit(rng, args.dim)
    request = {
        "tenant_id": T,
        "person_id": P,
        "query": "quiet library desk",
        "limit": 10,
        "query_embedding": {"vector": query, "model": MODEL, "version": VERSION},
    }
    print(f"load average {os.getloadavg()[0]:.2f}; store {args.db}")
    turn = 0
    for count in args.counts:
        embeds = []
        for _ in range(count):
            turn += 1
            text = f"an agent turn {turn} about the quiet library desk"
            _, out, _ = run(
                args.db,
                "remember",
                {"tenant_id": T, "person_id": P, "kind": "conversation", "text": text}
                | {"captured_at": 5, "recorded_at": 5},
                env,
            )
            source = json.loads(out)["source_id"]
            # half the turns close to the query, so that new rows reach the first results
            vector = query if turn % 2 else unit(rng, args.dim)
            embed = {
                "tenant_id": T,
                "person_id": P,
                "target": {"kind": "source", "id": source},
                "embedding": {
                    "vector": vector,
                    "model": MODEL,
                    "version": VERSION,
                    "input_hash": "sha256:" + hashlib.sha256(text.encode()).hexdigest(),
                    "normalization": "l2",
                    "distance": "cosine",
                },
            }
            wall, _, _ = run(args.db, "embed", embed, env)
            embeds.append(wall)
        walls, answers, numpy = [], [], []
        for _ in range(3):
            wall, out, err = run(args.db, "search", request, env)
            walls.append(wall)
            answers.append(out)
            numpy.append("numpy=1" in err)
        _, reference, _ = run(args.db, "search", request, reference_env)
        same = all(answer == reference for answer in answers)
        print(
            f"after {count} more turn(s) ({turn} in all, load {os.getloadavg()[0]:.2f}): CLI"
            f" embed median {statistics.median(embeds) * 1000:.0f} ms; CLI hybrid search"
            f" {', '.join(f'{w:.3f}' for w in walls)} s (numpy imported: {numpy});"
            f" same answer as ZKR_VECTOR_CACHE=0: {same}"
        )
        if other_env is not None:
            wall, out, err = run(args.db, "search", request, other_env)
            after = [run(args.db, "search", request, env)[0] for _ in range(3)]
            print(
                f"  --compare zkr: {wall:.3f} s (numpy imported: {'numpy=1' in err}, same"
                f" answer: {out == reference}); then this zkr, nothing written since:"
                f" {', '.join(f'{w:.3f}' for w in after)} s"
            )


if __name__ == "__main__":
    main()
