"""Dense/hybrid retrieval benchmark (issue 4).

For each store size (default 10,000 and 100,000 stored 384-dimension vectors) it prints:

* in-process hybrid ``search`` latency: the first (cold) call, then p50/p95 of warm calls, and
  lexical-only search for comparison;
* ``embed`` cost as the lane grows (p50 per call at each size; it must stay flat);
* CLI wall time of one hybrid ``search`` (a fresh process each time: without the vector file,
  then with it) — what the plugins pay per call;
* peak RSS of the in-process run and of each CLI call.

Usage::

    .venv/bin/python benchmarks/bench_dense.py                 # 10k and 100k, ~3-5 minutes
    .venv/bin/python benchmarks/bench_dense.py --sizes 10000 --queries 20
    .venv/bin/python benchmarks/bench_dense.py --workdir /tmp/zkr-bench --rebuild
    # before/after in one run: another checkout's src/ first, then this one, same stores
    .venv/bin/python benchmarks/bench_dense.py --compare /path/to/other/checkout/src

Stores are built once per size in ``--workdir`` (default ``/tmp/zkr-bench-dense``) and reused.
The bulk of each store is inserted directly with SQL in the exact stored encoding ``embed``
writes (vectors as JSON arrays of float32-exact numbers, ``"l2"``/``"cosine"`` JSON-quoted,
real input hashes), 10% of memories carry a claim whose vector is stored instead of the
source's; ``embed`` itself is timed through the API on top of that.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from zkr import MemoryDb
from zkr.model import (
    Distance,
    EmbeddingInput,
    EmbedRequest,
    Normalization,
    QueryEmbedding,
    RememberRequest,
    SearchRequest,
    SourceKind,
    Target,
    TargetKind,
)
from zkr.text import new_id

T, P, MODEL, VERSION = "bench", "me", "bench/minilm", "1"
COMMON = (
    "library quiet desk window coffee meeting roadmap project deadline budget music concert "
    "jazz venue garden walk morning evening train office focus study reading writing notes "
    "friend family dinner recipe travel flight hotel doctor gym running swim bike weekend"
).split()
# plus a long tail of rarer words, so that a term matches hundreds of memories, not half of them
RARE = [
    f"{a}{b}{c}"
    for a in "bdfgklmnprstvz"
    for b in ("a", "e", "i", "o", "u", "ai", "ou")
    for c in (
        "ben",
        "dor",
        "fel",
        "gan",
        "lis",
        "mar",
        "nop",
        "rik",
        "sul",
        "tam",
        "vex",
        "zor",
        "kin",
        "pol",
        "rud",
        "wen",
        "jax",
        "lom",
        "qui",
        "xen",
    )
]


def note_text(rng: random.Random, i: int) -> str:
    words = [rng.choice(RARE) for _ in range(rng.randint(4, 14))]
    words += [rng.choice(COMMON) for _ in range(rng.randint(2, 6))]
    rng.shuffle(words)
    return " ".join(words) + f" #{i}"


def query_text(rng: random.Random) -> str:
    return f"{rng.choice(COMMON)} {rng.choice(RARE)}"


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float32)


def vector_text(row: np.ndarray) -> str:
    # 9 significant digits read back to the same float32 (embed writes the shortest form;
    # this is ~10% longer and much faster to produce in bulk)
    return "[" + ",".join(f"{x:.9g}" for x in row.tolist()) + "]"


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def build(path: Path, n: int, dim: int, seed: int) -> None:
    """Insert ``n`` memories, each with one stored vector, in one transaction."""
    rng = random.Random(seed)
    vectors = unit_vectors(np.random.default_rng(seed), n, dim)
    with MemoryDb.open(str(path)) as db:
        conn = db.conn
        conn.execute("BEGIN IMMEDIATE")
        sources, fts, evidence, claims, links, embeddings = [], [], [], [], [], []
        for i in range(n):
            sid, eid = new_id(), new_id()
            text = note_text(rng, i)
            at = 1_700_000_000 + i
            sources.append((sid, T, P, '"conversation"', text, at, at, eid))
            fts.append((sid, T, P, text))
            evidence.append((eid, T, P, sid, text, at))
            if i % 10 == 0:
                cid = new_id()
                value = f"{rng.choice(COMMON)} {i}"
                claims.append((cid, T, P, "Sam", "likes", value, at, at))
                links.append((T, P, cid, eid))
                kind, tid, ttext, rev = "claim", cid, f"Sam likes {value}", at
            else:
                kind, tid, ttext, rev = "source", sid, text, 1
            embeddings.append(
                (T, P, kind, tid, MODEL, VERSION, dim, sha(ttext), vector_text(vectors[i]), rev)
            )
        conn.executemany(
            "INSERT INTO sources (id, tenant_id, person_id, revision, kind, content, captured_at,"
            " recorded_at, deleted_at, ingestion_key, origin_evidence_id)"
            " VALUES (?, ?, ?, 1, ?, ?, ?, ?, NULL, NULL, NULL)",
            [s[:7] for s in sources],
        )
        conn.executemany(
            "INSERT INTO source_fts (source_id, tenant_id, person_id, content) VALUES (?,?,?,?)",
            fts,
        )
        conn.executemany(
            "INSERT INTO evidence (id, tenant_id, person_id, source_id, source_revision, quote,"
            " recorded_at, deleted_at) VALUES (?, ?, ?, ?, 1, ?, ?, NULL)",
            evidence,
        )
        conn.executemany(
            "INSERT INTO claims (id, tenant_id, person_id, subject, predicate, value, valid_from,"
            " valid_until, recorded_from, recorded_until, status, tier, processing_state, kind)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, NULL, 'accepted', 'long_term', 'processed',"
            " 'fact')",
            claims,
        )
        conn.executemany(
            "INSERT INTO claim_evidence (tenant_id, person_id, claim_id, evidence_id, relation,"
            " confidence_basis_points) VALUES (?, ?, ?, ?, '\"supports\"', 10000)",
            links,
        )
        conn.executemany(
            "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
            " dimension, input_hash, normalization, distance, vector, target_revision,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, '\"l2\"', '\"cosine\"', ?, ?,"
            " unixepoch() - 3600)",
            embeddings,
        )
        conn.execute("COMMIT")


def set_copies(path: Path, dim: int, keep: bool, prime: bool = False) -> None:
    """Give every stored vector zkr's float32 copy, exactly as ``embed``/``embed-pending``
    keep it (``keep``), or drop every copy (a lane another writer filled, e.g. the
    reference). ``prime``: then end as zkr's writer of that many rows ends (an
    ``embed-pending`` drain, a handle that ``embed`` ed them closing): the lane's side files
    brought up to date (:func:`zkr.store.priming.prime`), timed on stdout."""
    from zkr.store import changes
    from zkr.store.dense.decode import decode_texts
    from zkr.store.vectors import LaneConfig

    config = LaneConfig(dim, Normalization.L2, Distance.COSINE)
    with MemoryDb.open(str(path)) as db:
        conn = db.conn
        changes.ensure(conn)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM zkr_vectors")
        if keep:
            rows = conn.execute(
                "SELECT rowid, target_kind, target_id, created_at, vector FROM embeddings"
                " WHERE tenant_id = ? AND person_id = ? AND model = ? AND version = ?",
                (T, P, MODEL, VERSION),
            ).fetchall()
            for lo in range(0, len(rows), 2048):
                part = rows[lo : lo + 2048]
                matrix, ok = decode_texts([r[4] for r in part], config)
                for row, vec, good in zip(part, matrix, ok, strict=True):
                    if good:
                        changes.keep_copy(
                            conn,
                            row[0],
                            (T, P, MODEL, VERSION),
                            row[1],
                            row[2],
                            row[3],
                            vec.astype("<f4").tobytes(),
                        )
        conn.execute("COMMIT")
        if keep and prime:
            from zkr.store.priming import prime as prime_lanes

            written_at = conn.execute("SELECT max(created_at) FROM embeddings").fetchone()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            prime_lanes(conn, [(T, P, MODEL, VERSION)], int(written_at))
            print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}))


def search_request(
    rng: random.Random, nprng: np.random.Generator, dim: int, dense: bool, limit: int = 10
) -> SearchRequest:
    query = query_text(rng)
    emb = None
    if dense:
        emb = QueryEmbedding(unit_vectors(nprng, 1, dim)[0].tolist(), MODEL, VERSION)
    return SearchRequest(T, P, query, limit, emb)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def peak_rss_mib() -> float:
    """This process's own peak RSS (VmHWM; ru_maxrss would include a forking parent's)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# `python -m zkr ARGS`, plus the process's own peak RSS on stderr when it exits.
CLI_WRAPPER = """
import atexit, sys
def _report():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                sys.stderr.write("VmHWM " + line.split()[1] + "\\n")
atexit.register(_report)
from zkr.cli import main
sys.exit(main(sys.argv[1:]))
"""


def child_inprocess(path: str, dim: int, queries: int) -> dict[str, Any]:
    """Runs in a fresh process: cold + warm hybrid searches, lexical searches, embeds."""
    rng, nprng = random.Random(7), np.random.default_rng(7)
    out: dict[str, Any] = {}
    with MemoryDb.open(path) as db:
        t0 = time.perf_counter()
        db.search(search_request(rng, nprng, dim, True))
        out["cold_s"] = time.perf_counter() - t0
        warm, lexical, cpu = [], [], []
        for _ in range(queries):
            req = search_request(rng, nprng, dim, True)
            t0, c0 = time.perf_counter(), time.process_time()
            db.search(req)
            warm.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        for _ in range(queries):
            req = search_request(rng, nprng, dim, False)
            t0 = time.perf_counter()
            db.search(req)
            lexical.append(time.perf_counter() - t0)
        out["warm_ms"] = [x * 1e3 for x in warm]
        out["warm_cpu_ms"] = [x * 1e3 for x in cpu]
        out["lexical_ms"] = [x * 1e3 for x in lexical]
        # embed on top of the full lane (new targets), through the API
        times = []
        for i in range(25):
            text = f"benchmark embed note {i} {rng.choice(COMMON)}"
            r = db.remember(RememberRequest(T, P, SourceKind.CONVERSATION, text, 5, 5))
            vec = unit_vectors(nprng, 1, dim)[0].tolist()
            req = EmbedRequest(
                T,
                P,
                Target(TargetKind.SOURCE, r.source_id),
                EmbeddingInput(vec, MODEL, VERSION, sha(text), Normalization.L2, Distance.COSINE),
            )
            t0 = time.perf_counter()
            db.embed(req)
            times.append(time.perf_counter() - t0)
        out["embed_ms"] = [x * 1e3 for x in times]
        # a search right after those writes (the cache refreshes once)
        t0 = time.perf_counter()
        db.search(search_request(rng, nprng, dim, True))
        out["after_write_s"] = time.perf_counter() - t0
        # a remember (no embed) before each search, as a long-lived host does
        after = []
        for i in range(20):
            text = f"benchmark capture {i} {rng.choice(COMMON)}"
            db.remember(RememberRequest(T, P, SourceKind.CONVERSATION, text, 5, 5))
            req = search_request(rng, nprng, dim, True)
            t0 = time.perf_counter()
            db.search(req)
            after.append(time.perf_counter() - t0)
        out["after_remember_ms"] = [x * 1e3 for x in after]
        # matrix-vector product with BLAS on the same data: the memory-bandwidth floor
        try:
            from zkr.store.dense.registry import CACHES as lanes
        except ImportError:  # --compare with a checkout from before the cache was split
            try:
                from zkr.store.dense.cache import _CACHES as lanes  # type: ignore[attr-defined]
            except ImportError:  # before the dense package
                from zkr.store.dense import _CACHES as lanes  # type: ignore[attr-defined]

        block = next(iter(next(iter(lanes.values())).blocks.values()))
        matrix, q = block.matrix[:, : block.size], nprng.standard_normal(dim).astype(np.float32)
        blas = []
        for _ in range(12):
            t0 = time.perf_counter()
            q @ matrix
            blas.append(time.perf_counter() - t0)
        out["blas_ms"] = statistics.median(blas[2:]) * 1e3
    out["rss_mb"] = peak_rss_mib()
    return out


def embed_rows(path: str, dim: int, count: int, seed: int) -> None:
    """Remember and embed ``count`` new memories through the API, in one process."""
    from zkr import MemoryDb
    from zkr.model import (
        Distance,
        EmbeddingInput,
        EmbedRequest,
        Normalization,
        RememberRequest,
        SourceKind,
        Target,
        TargetKind,
    )

    nprng = np.random.default_rng(seed)
    with MemoryDb.open(path) as db:
        for i in range(count):
            text = f"a batch {seed} memory {i} about lunch"
            r = db.remember(RememberRequest(T, P, SourceKind.CONVERSATION, text, 5, 5))
            vec = unit_vectors(nprng, 1, dim)[0].tolist()
            db.embed(
                EmbedRequest(
                    T,
                    P,
                    Target(TargetKind.SOURCE, r.source_id),
                    EmbeddingInput(
                        vec, MODEL, VERSION, sha(text), Normalization.L2, Distance.COSINE
                    ),
                )
            )


def run_child(
    args: list[str], env: dict[str, str] | None = None, stdin: bytes | None = None
) -> tuple[float, float, bytes]:
    """Run a subprocess; returns (wall seconds, its peak RSS in MiB if reported, stdout)."""
    t0 = time.perf_counter()
    proc = subprocess.run(args, input=stdin or b"", capture_output=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode())
    rss = 0.0
    for line in proc.stderr.decode().splitlines():
        if line.startswith("VmHWM "):
            rss = int(line.split()[1]) / 1024
    return wall, rss, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--workdir", default="/tmp/zkr-bench-dense")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument(
        "--compare",
        metavar="SRC",
        help="also measure the zkr package found in SRC (e.g. an older checkout's src/), first",
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("PATH", "DIM", "QUERIES"), help=argparse.SUPPRESS
    )
    parser.add_argument("--build", nargs=3, metavar=("PATH", "N", "DIM"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--copies", nargs=3, metavar=("PATH", "DIM", "KEEP"), help=argparse.SUPPRESS
    )
    parser.add_argument("--prime", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--embed-rows", nargs=4, metavar=("PATH", "DIM", "COUNT", "SEED"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.embed_rows:
        path, dim, count, seed = args.embed_rows
        embed_rows(path, int(dim), int(count), int(seed))
        return
    if args.copies:
        set_copies(Path(args.copies[0]), int(args.copies[1]), args.copies[2] == "1", args.prime)
        return
    if args.build:
        build(Path(args.build[0]), int(args.build[1]), int(args.build[2]), int(args.build[1]))
        return
    if args.child:
        print(json.dumps(child_inprocess(args.child[0], int(args.child[1]), int(args.child[2]))))
        return
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"zkr dense benchmark: {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}, numpy {np.__version__}, Python {sys.version.split()[0]}"
    )
    for n in args.sizes:
        path = work / f"store-v2-{n}-{args.dim}.db"
        cache_dir = Path(str(path) + ".zkr-vectors")
        if args.rebuild or not path.exists():
            for stale in (path, Path(str(path) + "-wal"), Path(str(path) + "-shm")):
                stale.unlink(missing_ok=True)
            shutil.rmtree(cache_dir, ignore_errors=True)
            wall, _, _ = run_child(
                [sys.executable, __file__, "--build", str(path), str(n), str(args.dim)]
            )
            print(f"\n[{n:,} vectors] built in {wall:.1f} s ({path})")
        else:
            print(f"\n[{n:,} vectors] reusing {path}")
        variants: list[tuple[str, str | None]] = [("this checkout", None)]
        if args.compare:
            variants.insert(0, (f"compare: {args.compare}", args.compare))
        for label, src in variants:
            print(f"  -- {label} (load average {os.getloadavg()[0]:.1f})")
            measure(path, n, cache_dir, args, src)


def measure(path: Path, n: int, cache_dir: Path, args: argparse.Namespace, src: str | None) -> None:
    """Every figure for one store, with the zkr package of ``src`` (default: this one)."""
    base = dict(os.environ)
    if src is not None:
        base["PYTHONPATH"] = src
    # CLI figures are for an installed zkr, whose modules are compiled once (the project's
    # machines set PYTHONDONTWRITEBYTECODE, which would recompile zkr on every call)
    package = subprocess.run(
        [sys.executable, "-c", "import zkr, os; print(os.path.dirname(zkr.__file__))"],
        capture_output=True,
        text=True,
        env=base,
        check=True,
    ).stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=False)
    shutil.rmtree(cache_dir, ignore_errors=True)
    env = {**base, "ZKR_VECTOR_CACHE": "0"}
    _, _, raw = run_child(
        [sys.executable, __file__, "--child", str(path), str(args.dim), str(args.queries)],
        env=env,
    )
    res = json.loads(raw)
    warm, lex, emb = res["warm_ms"], res["lexical_ms"], res["embed_ms"]
    print(
        f"  in-process hybrid search: first call {res['cold_s']:.2f} s (decodes every"
        f" vector), then p50 {pct(warm, 0.5):.1f} ms, p95 {pct(warm, 0.95):.1f} ms"
        f" ({len(warm)} queries)"
    )
    print(f"  in-process lexical search: p50 {pct(lex, 0.5):.1f} ms, p95 {pct(lex, 0.95):.1f} ms")
    print(
        f"  BLAS float32 matrix-vector product over the same lane: "
        f"{res['blas_ms']:.1f} ms (memory-bandwidth floor of any exact scan)"
    )
    print(
        f"  embed on a lane of {n:,}: p50 {pct(emb, 0.5):.2f} ms,"
        f" p95 {pct(emb, 0.95):.2f} ms ({len(emb)} calls)"
    )
    print(f"  first hybrid search after those embeds (cache refresh): {res['after_write_s']:.2f} s")
    print(f"  in-process peak RSS: {res['rss_mb']:.0f} MiB")
    request = json.dumps(
        {
            "tenant_id": T,
            "person_id": P,
            "query": "quiet library desk",
            "limit": 10,
            "query_embedding": {
                "vector": unit_vectors(np.random.default_rng(1), 1, args.dim)[0].tolist(),
                "model": MODEL,
                "version": VERSION,
            },
        }
    ).encode()
    cli = [sys.executable, "-c", CLI_WRAPPER, "--db", str(path), "search"]
    shutil.rmtree(cache_dir, ignore_errors=True)
    wall, rss, _ = run_child(cli, env=env, stdin=request)
    print(
        f"  CLI hybrid search, no vector file (ZKR_VECTOR_CACHE=0): {wall:.2f} s,"
        f" peak RSS {rss:.0f} MiB"
    )
    copies = [sys.executable, __file__, "--copies", str(path), str(args.dim)]
    # zkr's float32 copies (zkr.store.changes.keep_copy) exist from 79bbaec on
    keeps = src is None or "def keep_copy" in (Path(src) / "zkr/store/changes.py").read_text()
    if keeps:
        run_child([*copies, "0"], env=base)
        shutil.rmtree(cache_dir, ignore_errors=True)
    wall, rss, _ = run_child(cli, env=base, stdin=request)
    print(
        f"  CLI hybrid search, first call, lane written by another writer (decodes every JSON"
        f" vector, writes the vector file): {wall:.2f} s, peak RSS {rss:.0f} MiB"
    )
    if keeps:
        run_child([*copies, "1"], env=base)
        shutil.rmtree(cache_dir, ignore_errors=True)
        wall, rss, _ = run_child(cli, env=base, stdin=request)
        print(
            f"  CLI hybrid search, first call, lane of zkr's copies without side files (its"
            f" writer did not prime it, e.g. single-row CLI embeds; bulk build): {wall:.2f} s,"
            f" peak RSS {rss:.0f} MiB"
        )
    # zkr.store.priming.prime exists from branch firstcall on
    primes = src is None or (Path(src) / "zkr/store/priming.py").exists()
    if keeps and primes:
        shutil.rmtree(cache_dir, ignore_errors=True)
        _, _, out = run_child([*copies, "1", "--prime"], env=base)
        primed = json.loads(out)
        print(
            f"  zkr's writer ending (embed-pending drain, or a handle that embedded them"
            f" closing) brings the side files up to date: {primed['wall']:.2f} s wall,"
            f" {primed['cpu']:.2f} s CPU"
        )
        wall, rss, _ = run_child(cli, env=base, stdin=request)
        print(
            f"  CLI hybrid search, first call, lane written by zkr's embed (its writer primed"
            f" the side files): {wall:.2f} s, peak RSS {rss:.0f} MiB"
        )
    walls = []
    for _ in range(3):
        wall, rss, _ = run_child(cli, env=base, stdin=request)
        walls.append(wall)
    print(
        f"  CLI hybrid search with the vector file: median {statistics.median(walls):.2f} s"
        f" of 3, peak RSS {rss:.0f} MiB"
    )
    lexreq = json.dumps({"tenant_id": T, "person_id": P, "query": "quiet library desk"})
    wall, rss, _ = run_child(cli, env=base, stdin=lexreq.encode())
    print(f"  CLI lexical search (for comparison): {wall:.2f} s, peak RSS {rss:.0f} MiB")

    remember = json.dumps(
        {
            "tenant_id": T,
            "person_id": P,
            "kind": "conversation",
            "text": "an unrelated new memory about lunch",
            "captured_at": 5,
            "recorded_at": 5,
            "claim": {
                "subject": "Sam",
                "predicate": "ate",
                "value": "lunch",
                "kind": "fact",
                "valid_from": 5,
            },
        }
    ).encode()
    remember_cli = [sys.executable, "-c", CLI_WRAPPER, "--db", str(path), "remember"]
    walls = []
    for _ in range(3):
        run_child(remember_cli, env=base, stdin=remember)
        wall, rss, _ = run_child(cli, env=base, stdin=request)
        walls.append(wall)
    print(
        f"  CLI hybrid search right after a CLI remember (no embed): median"
        f" {statistics.median(walls):.2f} s of 3, peak RSS {rss:.0f} MiB"
    )
    # one CLI embed of a new memory, then a CLI search (a fresh process after a lane write)
    walls = []
    nprng = np.random.default_rng(5)
    for i in range(3):
        text = f"an embedded new memory {i} about lunch"
        written = json.loads(
            run_child(
                [sys.executable, "-c", CLI_WRAPPER, "--db", str(path), "remember"],
                env=base,
                stdin=json.dumps(
                    {"tenant_id": T, "person_id": P, "kind": "conversation", "text": text}
                    | {"captured_at": 5, "recorded_at": 5}
                ).encode(),
            )[2]
        )
        embed_request = {
            "tenant_id": T,
            "person_id": P,
            "target": {"kind": "source", "id": written["source_id"]},
            "embedding": {
                "vector": unit_vectors(nprng, 1, args.dim)[0].tolist(),
                "model": MODEL,
                "version": VERSION,
                "input_hash": sha(text),
                "normalization": "l2",
                "distance": "cosine",
            },
        }
        run_child(
            [sys.executable, "-c", CLI_WRAPPER, "--db", str(path), "embed"],
            env=base,
            stdin=json.dumps(embed_request).encode(),
        )
        wall, rss, _ = run_child(cli, env=base, stdin=request)
        walls.append(wall)
    print(
        f"  CLI hybrid search right after a CLI embed of one new memory: median"
        f" {statistics.median(walls):.2f} s of 3, peak RSS {rss:.0f} MiB"
    )
    # ten new memories remembered and embedded (one process), then a CLI search
    walls = []
    for i in range(3):
        run_child(
            [sys.executable, __file__, "--embed-rows", str(path), str(args.dim), "10", str(50 + i)],
            env=base,
        )
        wall, rss, _ = run_child(cli, env=base, stdin=request)
        walls.append(wall)
    print(
        f"  CLI hybrid search right after embedding 10 new memories: median"
        f" {statistics.median(walls):.2f} s of 3, peak RSS {rss:.0f} MiB"
    )
    after = res.get("after_remember_ms")
    if after:
        print(
            f"  in-process hybrid search right after each remember (the serve pattern):"
            f" p50 {pct(after, 0.5):.1f} ms, p95 {pct(after, 0.95):.1f} ms"
        )


if __name__ == "__main__":
    main()
