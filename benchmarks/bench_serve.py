"""``zkr serve`` against one process per call (issue 14). Prints numbers; asserts nothing.

For each store size (default 10,000 and 100,000 sources, each with a stored 384-dimension
vector, built once in ``--workdir``) it prints per-request p50 / p95 wall time, measured by the
client from writing the request to reading the whole answer. The default corpus is
``bench_search.py``'s (conversational notes, a claim on every third, questions as queries) with
a vector lane added; ``--corpus dense`` uses ``bench_dense.py``'s store and queries instead.

* over one ``zkr serve`` child (JSON lines on its stdin/stdout): ``remember`` (a claim on every
  third), lexical ``search`` and hybrid ``search`` (query text plus a 384-d query vector);
* the same lines handled in this process (:func:`zkr.serve.answer`, no pipe): the transport's
  share is the difference;
* MCP tool calls (``remember``, ``search``, ``context``) through the SDK's own client over
  stdio to a ``zkr mcp`` child, when the ``zkr[mcp]`` extra is installed;
* the server's CPU time per ``remember`` (mean, from ``/proc``), which a loaded machine inflates
  far less than the wall times;
* the same operations as one CLI process per call (the installed ``zkr`` script, the way the
  plugins called it before ``serve``), in the same run on the same file.

The lexical queries are drawn from the same vocabulary as the remembered notes, so after the
``remember`` requests they match and rank real documents (``bench_search.py``'s questions share
few frequent words with its corpus and are cheaper: compare the in-process CPU line).

The first hybrid request of a fresh server loads the lane (reported separately as "cold"); the
rest run warm. Targets: serve p50 <= 1 ms for remember and lexical search at 10k, hybrid p50
<= 40 ms at 100k.

Usage::

    .venv/bin/python benchmarks/bench_serve.py                     # 10k and 100k, ~3-6 minutes
    .venv/bin/python benchmarks/bench_serve.py --sizes 10000 --requests 100 --cli-runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_dense  # the corpora and store builders of the dense and lexical benchmarks
import bench_search
from zkr import MemoryDb
from zkr.serve import answer

T, P, MODEL, VERSION = bench_dense.T, bench_dense.P, bench_dense.MODEL, bench_dense.VERSION


def build_store(corpus: str, workdir: Path, path: Path, size: int, dim: int, seed: int) -> None:
    """``dense``: bench_dense.py's store. ``search``: bench_search.py's corpus (questions over
    conversational notes, a claim on every third; cached in ``workdir``) plus one stored unit
    vector per source, inserted in the exact encoding ``embed`` writes."""
    if corpus == "dense":
        bench_dense.build(path, size, dim, seed)
        return
    shutil.copyfile(bench_search.corpus(workdir, size, rebuild=False), path)
    vectors = bench_dense.unit_vectors(np.random.default_rng(seed), size, dim)
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT id, content, revision FROM sources WHERE tenant_id = ? AND person_id = ?"
        " ORDER BY rowid",
        (T, P),
    ).fetchall()
    with conn:
        conn.executemany(
            "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
            " dimension, input_hash, normalization, distance, vector, target_revision,"
            " created_at) VALUES (?, ?, 'source', ?, ?, ?, ?, ?, '\"l2\"', '\"cosine\"', ?, ?,"
            " unixepoch() - 3600)",
            [
                (
                    T,
                    P,
                    sid,
                    MODEL,
                    VERSION,
                    dim,
                    bench_dense.sha(text),
                    bench_dense.vector_text(vectors[i]),
                    revision,
                )
                for i, (sid, text, revision) in enumerate(rows)
            ],
        )
    conn.close()


class Serve:
    """One ``zkr serve`` child; :meth:`call` times one request round trip."""

    def __init__(self, zkr: list[str], db: Path) -> None:
        self.proc = subprocess.Popen(
            [*zkr, "serve", "--db", str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.next_id = 0

    def call(self, command: str, request: dict[str, Any]) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        line = json.dumps({"id": self.next_id, "command": command, "request": request}).encode()
        started = time.perf_counter()
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        elapsed = time.perf_counter() - started
        response = json.loads(answer)
        if "ok" not in response or response["id"] != self.next_id:
            raise SystemExit(f"serve failed: {answer!r}")
        return elapsed

    def cpu_seconds(self) -> float | None:
        """The server process's CPU time so far (user + system, from ``/proc``; ``None``
        where there is no ``/proc``): unlike wall time, little inflated by a loaded machine."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class InProcess:
    """The serve loop's own handling of a line (:func:`zkr.serve.answer`), called directly."""

    def __init__(self, db: MemoryDb) -> None:
        self.db = db
        self.cpu: list[float] = []  # this thread's CPU seconds per call (load does not inflate)

    def call(self, command: str, request: dict[str, Any]) -> float:
        line = json.dumps({"id": 1, "command": command, "request": request}).encode()
        started, started_cpu = time.perf_counter(), time.thread_time()
        answer(self.db, line)
        self.cpu.append(time.thread_time() - started_cpu)
        return time.perf_counter() - started


def mcp_times(zkr: list[str], db: Path, gen: Requests, runs: int) -> dict[str, list[float]] | None:
    """Round trips of MCP tool calls through the SDK's client over stdio (needs ``zkr[mcp]``)."""
    try:
        import anyio
        from mcp import Client, StdioServerParameters
    except ImportError:
        return None
    params = StdioServerParameters(
        command=zkr[0], args=[*zkr[1:], "mcp", "--db", str(db), "--tenant", T, "--person", P]
    )

    async def session() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {"remember": [], "search": [], "context": []}
        async with Client(params) as client:
            for _ in range(5):
                await client.call_tool("search", {"query": gen.lexical()["query"]})
            for name in times:
                for _ in range(runs):
                    if name == "remember":
                        arguments: dict[str, Any] = {"text": gen.remember()["text"]}
                    else:
                        arguments = {"query": gen.lexical()["query"]}
                    started = time.perf_counter()
                    result = await client.call_tool(name, arguments)
                    times[name].append(time.perf_counter() - started)
                    if result.is_error:
                        raise SystemExit(f"MCP {name} failed: {result.content}")
        return times

    return anyio.run(session)


def cli_call(zkr: list[str], db: Path, command: str, request: dict[str, Any]) -> float:
    data = json.dumps(request).encode()
    started = time.perf_counter()
    proc = subprocess.run([*zkr, "--db", str(db), command], input=data, capture_output=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"CLI {command} failed: {proc.stderr.decode()}")
    return elapsed


class Requests:
    """Request generators over either corpus (see :func:`build_store`)."""

    def __init__(self, corpus: str, seed: int, dim: int) -> None:
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.vocab = bench_search.Vocabulary(seed=seed) if corpus == "search" else None
        self.dim = dim
        self.count = 0

    def _text(self, i: int) -> str:
        if self.vocab is not None:
            return self.vocab.sentence()
        return bench_dense.note_text(self.rng, 10_000_000 + i)

    def _query(self) -> str:
        if self.vocab is not None:
            return self.vocab.question()
        return bench_dense.query_text(self.rng)

    def remember(self) -> dict[str, Any]:
        self.count += 1
        i = self.count
        at = 1_800_000_000 + i
        request: dict[str, Any] = {
            "tenant_id": T,
            "person_id": P,
            "kind": "conversation",
            "text": self._text(i),
            "captured_at": at,
            "recorded_at": at,
        }
        if i % 3 == 0:
            request["claim"] = {
                "subject": "Sam",
                "predicate": "likes",
                "value": f"{self.rng.choice(bench_dense.COMMON)} {i}",
                "kind": "fact",
                "valid_from": at,
            }
        return request

    def lexical(self) -> dict[str, Any]:
        query = self._query()
        return {"tenant_id": T, "person_id": P, "query": query, "limit": 10}

    def hybrid(self) -> dict[str, Any]:
        request = self.lexical()
        vector = bench_dense.unit_vectors(self.nprng, 1, self.dim)[0]
        request["query_embedding"] = {
            "vector": [float(x) for x in vector.tolist()],
            "model": MODEL,
            "version": VERSION,
        }
        return request


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(label: str, values: list[float]) -> str:
    if not values:
        return f"{label:<34}{'-':>10}"
    p50, p95 = pct(values, 0.5) * 1000, pct(values, 0.95) * 1000
    return f"{label:<34}{p50:>9.2f} ms {p95:>9.2f} ms   (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--requests", type=int, default=300, help="serve requests per operation")
    parser.add_argument("--cli-runs", type=int, default=15, help="CLI calls per operation")
    parser.add_argument(
        "--cli-hybrid-runs", type=int, default=5, help="CLI hybrid calls (slow at 100k)"
    )
    parser.add_argument("--workdir", default="/tmp/zkr-bench-serve")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--corpus",
        choices=("search", "dense"),
        default="search",
        help="search: bench_search.py's notes and questions; dense: bench_dense.py's",
    )
    args = parser.parse_args()

    script = Path(sys.executable).with_name("zkr")
    zkr = [str(script)] if script.exists() else [sys.executable, "-m", "zkr"]
    load = os.getloadavg()
    print(f"zkr: {' '.join(zkr)}   load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    for size in (int(s) for s in args.sizes.split(",")):
        base = workdir / f"base-{args.corpus}-{size}-{args.dim}.db"
        if not base.exists():
            started = time.perf_counter()
            build_store(args.corpus, workdir, base, size, args.dim, args.seed)
            print(
                f"built {size} sources with {args.dim}-d vectors in "
                f"{time.perf_counter() - started:.1f} s"
            )
        db = workdir / f"run-{args.corpus}-{size}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(f"{db}.zkr-vectors", ignore_errors=True)
        shutil.copyfile(base, db)
        gen = Requests(args.corpus, args.seed + size, args.dim)

        server = Serve(zkr, db)
        for _ in range(5):  # the first requests import the command modules
            server.call("search", gen.lexical())
        cold = server.call("search", gen.hybrid())
        cpu_before = server.cpu_seconds()
        serve_remember = [server.call("remember", gen.remember()) for _ in range(args.requests)]
        cpu_after = server.cpu_seconds()
        serve_lexical = [server.call("search", gen.lexical()) for _ in range(args.requests)]
        server.call("search", gen.hybrid())  # the remembers changed the file: reload once
        runs = max(20, args.requests // 5)
        serve_hybrid = [server.call("search", gen.hybrid()) for _ in range(runs)]
        after_write = []
        for _ in range(10):  # a write moves the file's change counter: the lane is re-checked
            server.call("remember", gen.remember())
            after_write.append(server.call("search", gen.hybrid()))
        server.close()

        # the same handling in this process (no pipe, no second process): the transport's share
        with MemoryDb.open(str(db)) as local:
            inproc = InProcess(local)
            for _ in range(5):
                inproc.call("search", gen.hybrid())
            in_remember = [inproc.call("remember", gen.remember()) for _ in range(args.requests)]
            in_lexical = [inproc.call("search", gen.lexical()) for _ in range(args.requests)]
            lexical_cpu = inproc.cpu[-args.requests :]
            inproc.call("search", gen.hybrid())
            runs = max(20, args.requests // 5)
            in_hybrid = [inproc.call("search", gen.hybrid()) for _ in range(runs)]

        mcp = mcp_times(zkr, db, gen, max(20, args.requests // 5))

        cli_remember = [cli_call(zkr, db, "remember", gen.remember()) for _ in range(args.cli_runs)]
        cli_lexical = [cli_call(zkr, db, "search", gen.lexical()) for _ in range(args.cli_runs)]
        cli_call(zkr, db, "search", gen.hybrid())  # writes the vector side file once
        runs = args.cli_hybrid_runs
        cli_hybrid = [cli_call(zkr, db, "search", gen.hybrid()) for _ in range(runs)]

        print(f"\n== {size:,} sources ({args.corpus} corpus), {args.dim}-d lane   p50          p95")
        print(row("serve  remember", serve_remember))
        if cpu_before is not None and cpu_after is not None:
            mean = (cpu_after - cpu_before) / args.requests * 1000
            print(f"{'serve  remember, server CPU (mean)':<34}{mean:>9.2f} ms")
        print(row("serve  lexical search", serve_lexical))
        print(row("serve  hybrid search", serve_hybrid))
        print(row("serve  hybrid search after a write", after_write))
        print(f"{'serve  hybrid search, first (cold)':<34}{cold * 1000:>9.2f} ms")
        print(row("in-process remember", in_remember))
        print(row("in-process lexical search", in_lexical))
        print(row("in-process lexical search, CPU", lexical_cpu))
        print(row("in-process hybrid search", in_hybrid))
        if mcp is not None:
            print(row("MCP    remember (tool call)", mcp["remember"]))
            print(row("MCP    search (tool call)", mcp["search"]))
            print(row("MCP    context (tool call)", mcp["context"]))
        print(row("CLI    remember", cli_remember))
        print(row("CLI    lexical search", cli_lexical))
        print(row("CLI    hybrid search", cli_hybrid))
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
