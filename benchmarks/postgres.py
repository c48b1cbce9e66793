"""PostgreSQL next to SQLite on this machine (issue 16): apply throughput, search latency in a
large store, concurrent writers.

    python benchmarks/postgres.py [--scale 1.0] [--dsn postgresql://…] [--only apply,search,writers]

Run from the repository root. PostgreSQL is ``--dsn`` / ``$ZKR_PG_DSN`` (a fresh database is
created there and dropped afterwards), else a throwaway server from the machine's binaries
(tests/pg_server.py) **with PostgreSQL's default durability** (fsync, synchronous commit), so
both backends pay for every commit. SQLite is a file in a temporary directory (WAL, zkr's own
settings). Everything runs in process through ``zkr.MemoryDb`` (no CLI start-up in the
figures). Prints numbers; asserts only that nothing failed.

1. **apply**: ``--scale`` × 1,000 persons × 1,000 feed records (1M at scale 1), written as a
   device would export them: remembers of a few dozen words, every second one with an accepted
   claim (source, evidence, claim, claim_evidence; else source, evidence), one commit each,
   applied per person in requests of at most 1 MiB (the CLI's limit), one process. The records
   are made just before each person's calls, and one search of theirs follows them (indexing
   their documents), neither timed: records/s over the apply calls. ``--background-sources N``
   makes the persons' feeds source-heavy instead (N sources in all, remembers without claims:
   a source and its evidence each), so the search below runs inside tables of N sources.
2. **search**: one more person with ``--search-sources`` (10,000) sources, applied into the
   same stores, each source with a 384-dimensional embedding (``projections`` + ``embed``);
   then ``--queries`` two-word queries, lexical and hybrid (the query's own vector), p50/p95 of
   warm in-process calls (the first hybrid call is reported separately: SQLite builds its
   vector cache there).

Kept stores (``--sqlite-dir DIR``, ``--pg-database NAME`` with ``--dsn``) are re-used: a person
already applied is not applied again, and ``--only search`` measures a filled store. For the
issue's "10k sources inside tables holding 1M sources" on a 2-core machine, fill the stores
source-heavy, PostgreSQL from several processes, then measure::

    B="--dsn … --pg-database NAME --sqlite-dir DIR --background-sources 1000000"
    python benchmarks/postgres.py $B --only search --queries 0      # the searcher, embedded
    python benchmarks/postgres.py $B --only apply --backends SQLite
    python benchmarks/postgres.py $B --only apply --backends PostgreSQL --persons 0:500 &
    python benchmarks/postgres.py $B --only apply --backends PostgreSQL --persons 500:1000
    python benchmarks/postgres.py $B --only search --queries 100
3. **writers**: 8 processes, each ``remember``-ing (with a claim) for a person of its own for
   ``--seconds`` (10, after its own start-up), against one store: ops/s (the remembers of all
   writers over that window) and errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.pg_server

from zkr import MemoryDb
from zkr.cli import dispatch

TENANT = "bench"
T0 = 1_700_000_000
MODEL, VERSION, DIM = "bench/minilm", "1", 384
COMMON = (
    "library quiet desk window coffee meeting roadmap project deadline budget music concert "
    "jazz venue garden walk morning evening train office focus study reading writing notes "
    "friend family dinner recipe travel flight hotel doctor gym running swim bike weekend"
).split()
RARE = [f"{a}{b}{c}" for a in "bdfgklmnprstvz" for b in "aeiou" for c in ("ben", "dor", "lis")]
BUDGET = 1_048_576


# --------------------------------------------------------------------------- made-up feeds


def text_of(rng: random.Random, i: int) -> str:
    words = [rng.choice(RARE) for _ in range(rng.randint(4, 14))]
    words += [rng.choice(COMMON) for _ in range(rng.randint(2, 6))]
    rng.shuffle(words)
    return " ".join(words) + f" #{i}"


def remember_commit(
    person: str, i: int, text: str, with_claim: bool, ids: random.Random
) -> dict[str, Any]:
    """One device commit of a remember (spec/sync.md §1: records in the order remember emits).

    Ids come from ``ids`` (seeded by the person): the same person's feed has the same ids every
    time it is made, so applying it again (a kept store, two fill processes) is a replay."""

    def new_id() -> str:
        return f"{ids.getrandbits(128):032x}"

    sid, eid, cid = new_id(), new_id(), new_id() if with_claim else None
    at = T0 + i
    scope = {"tenant_id": TENANT, "person_id": person}
    records: list[dict[str, Any]] = [
        {
            "kind": "source",
            "record": {
                "source": {
                    "id": sid,
                    **scope,
                    "revision": 1,
                    "kind": "conversation",
                    "content": text,
                    "captured_at": at,
                    "recorded_at": at,
                    "deleted_at": None,
                },
                "ingestion_key": None,
                "origin_evidence_id": eid,
                "origin_claim_id": cid,
            },
        },
        {
            "kind": "evidence",
            "record": {
                "evidence": {
                    "id": eid,
                    **scope,
                    "source_id": sid,
                    "source_revision": 1,
                    "quote": text,
                    "byte_range": None,
                    "recorded_at": at,
                },
                "locator": None,
                "deleted_at": None,
            },
        },
    ]
    if cid is not None:
        records.append(
            {
                "kind": "claim",
                "record": {
                    "id": cid,
                    **scope,
                    "subject": "Sam",
                    "predicate": f"note{i % 97}",
                    "value": text[:40],
                    "kind": "fact",
                    "valid_time": {"from": at, "until": None},
                    "recorded_time": {"from": at, "until": None},
                    "status": "accepted",
                    "tier": "long_term",
                    "processing_state": "processed",
                },
            }
        )
        records.append(
            {
                "kind": "claim_evidence",
                "record": {
                    **scope,
                    "claim_id": cid,
                    "evidence_id": eid,
                    "relation": "supports",
                    "confidence_basis_points": 10000,
                },
            }
        )
    return {"recorded_at": at, "event_count": len(records), "records": records}


def person_feed(
    person: str, records: int, seed: int, claims: bool = True
) -> list[list[dict[str, Any]]]:
    """``records`` feed records of one person as apply requests' commit lists (<= 1 MiB each).

    With ``claims`` every second remember carries an accepted claim (4 records, else 2);
    without, every remember is a source and its evidence (2 records: one source per 2 records).
    """
    rng = random.Random(seed)
    ids = random.Random(f"ids {person}")
    commits, made, i = [], 0, 0
    while made < records:
        with_claim = claims and i % 2 == 0
        commit = remember_commit(person, i, text_of(rng, i), with_claim, ids)
        commit["sequence"] = i + 1
        commit["first_event_index"] = 0
        commits.append(commit)
        made += commit["event_count"]
        i += 1
    groups: list[list[dict[str, Any]]] = [[]]
    used = 300
    for commit in commits:
        size = len(json.dumps(commit, ensure_ascii=False, separators=(",", ":")).encode()) + 1
        if groups[-1] and used + size > BUDGET:
            groups.append([])
            used = 300
        groups[-1].append(commit)
        used += size
    return groups


def apply_person(db: MemoryDb, person: str, groups: list[list[dict[str, Any]]]) -> int:
    applied = 0
    for commits in groups:
        request = {
            "tenant_id": TENANT,
            "person_id": person,
            "export_format": 1,
            "database_schema_version": 10,
            "commits": commits,
        }
        applied += int(dispatch(db, "apply", request)["records_applied"])
    return applied


# --------------------------------------------------------------------------- phases


def phase_apply(
    target: str, persons: range, per_person: int, claims: bool = True
) -> tuple[int, float]:
    """Apply every person's feed; returns (records applied, wall seconds of the apply calls)."""
    total, took = 0, 0.0
    with MemoryDb.open(target) as db:
        for n in persons:
            groups = person_feed(f"p{n:05d}", per_person, n, claims)  # made before the clock
            started = time.perf_counter()
            total += apply_person(db, f"p{n:05d}", groups)
            took += time.perf_counter() - started
            # not timed: one search of theirs indexes the person's documents (PostgreSQL
            # drains one scope's queue per search, SQLite the file's), so zkr's lexical index
            # holds every person's documents, as on a replica whose persons search
            request = {"tenant_id": TENANT, "person_id": f"p{n:05d}", "query": "jazz"}
            dispatch(db, "search", request)
            if (n + 1) % max(1, len(persons) // 10) == 0:  # progress on stderr (not a figure)
                print(
                    f"  ... {n + 1:,} persons, {total:,} records, {took:.0f} s,"
                    f" {total / took:,.0f} records/s",
                    file=sys.stderr,
                    flush=True,
                )
    return total, took


def unit_vector(rng: random.Random) -> list[float]:
    v = [rng.gauss(0.0, 1.0) for _ in range(DIM)]
    norm = sum(x * x for x in v) ** 0.5
    return [round(x / norm, 6) for x in v]


def serve_search(target: str, requests: list[dict[str, Any]]) -> list[float]:
    """Each request's wall time as a lexical ``search`` line to one ``zkr serve --db target``
    child (written to read back, as a client sees it); the first two warm the process (the
    kept index is built from its second search on) and are not counted."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "zkr", "serve", "--db", target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    took = []
    for n, request in enumerate(requests[:2] + requests):
        line = json.dumps({"id": n, "command": "search", "request": request}).encode()
        started = time.perf_counter()
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        took.append(time.perf_counter() - started)
        assert answer.get("id") == n and answer["ok"]["items"], answer
    proc.stdin.close()
    proc.wait(timeout=60)
    return took[2:]


def phase_search(
    target: str,
    sources: int,
    queries: int,
    embed: bool = True,
    serve: bool = False,
    after_writes: int = 0,
) -> dict[str, Any]:
    """The search person: apply, embed every projection (unless not ``embed``: a kept store's
    vectors as they are), then timed lexical/hybrid searches; with ``serve`` the same lexical
    queries through ``zkr serve`` (:func:`serve_search`); with ``after_writes`` that many
    lexical searches each right after a ``remember`` of the person (the write not timed)."""
    person = "searcher"
    groups = person_feed(person, sources * 2 + sources // 2 * 2, 99)
    rng = random.Random(7)
    scope = {"tenant_id": TENANT, "person_id": person}
    out: dict[str, Any] = {}
    with MemoryDb.open(target) as db:
        started = time.perf_counter()
        held = dispatch(db, "export", {**scope, "export_format": 1, "limit": 1})["commits"]
        # a kept store whose searcher an older run applied (other ids) keeps it as it is
        out["applied"] = 0 if held else apply_person(db, person, groups[:1])
        if out["applied"]:  # else a kept store (--sqlite-dir, --pg-database) already holds it
            # (the feed's ids are the person's every time, so a kept store's first group replays)
            out["applied"] += apply_person(db, person, groups[1:])
        else:
            out["applied"] = sum(c["event_count"] for g in groups for c in g)
        out["apply_s"] = time.perf_counter() - started
        started, embedded = time.perf_counter(), 0
        while embed:
            issues = dispatch(
                db, "projections", {**scope, "model": MODEL, "version": VERSION, "limit": 100}
            )
            if not issues:
                break
            for issue in issues:
                embedding = {
                    "vector": unit_vector(rng),
                    "model": MODEL,
                    "version": VERSION,
                    "input_hash": issue["input"]["input_hash"],
                    "normalization": "none",
                    "distance": "cosine",
                }
                dispatch(
                    db,
                    "embed",
                    {**scope, "target": issue["input"]["target"], "embedding": embedding},
                )
                embedded += 1
        out["embedded"], out["embed_s"] = embedded, time.perf_counter() - started

        def ask(hybrid: bool) -> float:
            request: dict[str, Any] = {
                **scope,
                "query": f"{rng.choice(COMMON)} {rng.choice(RARE)}",
                "limit": 10,
            }
            if hybrid:
                request["query_embedding"] = {
                    "vector": unit_vector(rng),
                    "model": MODEL,
                    "version": VERSION,
                }
            started = time.perf_counter()
            pack = dispatch(db, "search", request)
            took = time.perf_counter() - started
            assert pack["items"], request
            return took

        out["sources"] = db.conn.execute("SELECT count(*) FROM sources").fetchone()[0]
        out["own_sources"] = db.conn.execute(
            "SELECT count(*) FROM sources WHERE tenant_id = ? AND person_id = ?", (TENANT, person)
        ).fetchone()[0]
        out["vectors"] = db.conn.execute(
            "SELECT count(*) FROM embeddings WHERE tenant_id = ? AND person_id = ?",
            (TENANT, person),
        ).fetchone()[0]
        ask(False)  # the first search brings zkr's lexical index up to date (not counted)
        state = rng.getstate()
        out["lexical"] = [ask(False) for _ in range(queries)]
        after = rng.getstate()
        if serve:  # the same queries, through one zkr serve child
            rng.setstate(state)
            requests = [
                {**scope, "query": f"{rng.choice(COMMON)} {rng.choice(RARE)}", "limit": 10}
                for _ in range(queries)
            ]
            out["serve"] = serve_search(target, requests)
            rng.setstate(after)
        out["after_write"] = []
        for n in range(after_writes):
            note = {**scope, "kind": "conversation", "text": text_of(rng, 900_000 + n)}
            at = 1_900_000_000 + n
            dispatch(db, "remember", {**note, "captured_at": at, "recorded_at": at})
            out["after_write"].append(ask(False))
        out["hybrid_first_s"] = ask(True)
        out["hybrid"] = [ask(True) for _ in range(queries)]
    return out


def writer(target: str, person: str, seconds: float, queue: Any) -> None:
    ok = errors = 0
    first_error = ""
    rng = random.Random(person)
    with MemoryDb.open(target) as db:
        deadline = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < deadline:
            text = text_of(rng, i)
            request = {
                "tenant_id": TENANT,
                "person_id": person,
                "kind": "conversation",
                "text": text,
                "captured_at": T0 + i,
                "recorded_at": T0 + i,
                "claim": {
                    "subject": "Sam",
                    "predicate": f"note{i % 97}",
                    "value": text[:40],
                    "kind": "fact",
                    "valid_from": T0 + i,
                },
            }
            try:
                dispatch(db, "remember", request)
                ok += 1
            except Exception as exc:  # counted, not fatal: errors are a figure here
                errors += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}"
            i += 1
    queue.put((ok, errors, first_error))


def phase_writers(target: str, count: int, seconds: float) -> tuple[int, int, float, str]:
    with MemoryDb.open(target):  # create the store before the writers race to it
        pass
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=writer, args=(target, f"w{n}", seconds, queue)) for n in range(count)
    ]
    started = time.perf_counter()
    for proc in procs:
        proc.start()
    results = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
    took = time.perf_counter() - started
    ok = sum(r[0] for r in results)
    errors = sum(r[1] for r in results)
    first = next((r[2] for r in results if r[2]), "")
    return ok, errors, took, first


# --------------------------------------------------------------------------- driver


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


@contextlib.contextmanager
def postgres_database(
    dsn: str | None, keep: bool, database: str | None = None
) -> Iterator[tuple[str, str]]:
    """(database DSN, where it runs) for the run; dropped afterwards unless ``keep``.

    ``database`` (with ``dsn``): use that database, creating it when missing, and keep it.
    """
    from tests.pg_server import PgServer, acquire, fresh_name, with_database

    server = PgServer(dsn, "--dsn") if dsn else acquire(durable=True)
    if database and not server.throwaway:
        if not server.execute(f"SELECT 1 FROM pg_database WHERE datname = '{database}'"):
            server.create_database(database)
        yield with_database(server.dsn, database), server.origin
        print(f"kept PostgreSQL database {database}")
        return
    name = fresh_name("bench")
    try:
        yield server.create_database(name), server.origin
    finally:
        if keep and not server.throwaway:
            print(f"kept PostgreSQL database {name}")
        elif not server.throwaway:
            server.drop_database(name)
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="x 1,000 persons x 1,000 records")
    parser.add_argument("--dsn", default=os.environ.get("ZKR_PG_DSN") or None)
    parser.add_argument("--only", default="apply,search,writers")
    parser.add_argument("--search-sources", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--keep", action="store_true", help="keep the --dsn database")
    parser.add_argument(
        "--background-sources",
        type=int,
        default=0,
        help="fill the persons' feeds with this many sources in all (remembers without claims,"
        " 2 records a source) instead of 1,000 records each (1,000 x 1,000 mixed: 343k sources)",
    )
    parser.add_argument(
        "--sqlite-dir", default=None, help="keep the SQLite stores in this directory (re-used)"
    )
    parser.add_argument(
        "--pg-database", default=None, help="with --dsn: use (create, keep) this database"
    )
    parser.add_argument("--backends", default="SQLite,PostgreSQL")
    parser.add_argument(
        "--no-embed",
        action="store_true",
        help="search: embed nothing more (a kept store's searcher vectors as they are)",
    )
    parser.add_argument(
        "--serve", action="store_true", help="search: the lexical queries through zkr serve too"
    )
    parser.add_argument(
        "--after-writes",
        type=int,
        default=0,
        help="search: this many lexical searches each right after a remember of the person"
        " (adds that many sources to a kept store)",
    )
    parser.add_argument(
        "--persons",
        default="",
        help="FIRST:END: apply only these of the persons (to fill one store from several"
        " processes, PostgreSQL; default all)",
    )
    args = parser.parse_args()
    phases = set(args.only.split(","))
    backends = set(args.backends.split(","))
    persons = max(1, round(1000 * args.scale))
    if args.background_sources:
        per_person, claims = 2 * max(1, args.background_sources // persons), False
    else:
        per_person, claims = 1000, True

    print(f"$ python benchmarks/postgres.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"load before: {load()}")
    with (
        tempfile.TemporaryDirectory() as tmp,
        contextlib.ExitStack() as stack,
    ):
        from tests.pg_server import with_schema

        pg_dsn = ""
        if "PostgreSQL" in backends:
            pg_dsn, origin = stack.enter_context(
                postgres_database(args.dsn, args.keep, args.pg_database)
            )
            print(f"PostgreSQL: {origin}")
        sqlite_dir = Path(args.sqlite_dir or tmp)
        sqlite_dir.mkdir(parents=True, exist_ok=True)
        stores = {
            "SQLite": lambda name: str(sqlite_dir / f"{name}.db"),
            "PostgreSQL": lambda name: with_schema(pg_dsn, name),
        }
        stores = {backend: store for backend, store in stores.items() if backend in backends}
        if "apply" in phases or "search" in phases:
            for backend, store in stores.items():
                target = store("big")
                if "apply" in phases:
                    first, _, end = args.persons.partition(":")
                    chosen = range(int(first or 0), int(end or persons))
                    records, took = phase_apply(target, chosen, per_person, claims)
                    print(
                        f"apply   {backend:10} {records:,} records, {len(chosen):,} persons:"
                        f" {took:.1f} s, {records / took:,.0f} records/s"
                    )
                if "search" in phases:
                    res = phase_search(
                        target,
                        args.search_sources,
                        args.queries,
                        not args.no_embed,
                        args.serve,
                        args.after_writes,
                    )
                    lex, hyb = res["lexical"], res["hybrid"]
                    if not args.queries:
                        continue
                    print(
                        f"search  {backend:10} 1 person, {res['applied']:,} records"
                        f" ({res['own_sources']:,} sources, {res['vectors']:,} embeddings,"
                        f" {res['embedded']:,} made in {res['embed_s']:.0f} s)"
                        f" among {persons:,} other persons,"
                        f" {res['sources']:,} sources in all:"
                        f" lexical p50 {1000 * statistics.median(lex):.1f} ms"
                        f" p95 {1000 * pct(lex, 0.95):.1f} ms;"
                        f" hybrid first {1000 * res['hybrid_first_s']:.0f} ms,"
                        f" p50 {1000 * statistics.median(hyb):.1f} ms"
                        f" p95 {1000 * pct(hyb, 0.95):.1f} ms"
                    )
                    if res.get("serve"):
                        took = res["serve"]
                        print(
                            f"        zkr serve, the same lexical queries: p50"
                            f" {1000 * statistics.median(took):.1f} ms p95"
                            f" {1000 * pct(took, 0.95):.1f} ms"
                        )
                    if res["after_write"]:
                        took = res["after_write"]
                        print(
                            f"        lexical right after a remember of the person:"
                            f" p50 {1000 * statistics.median(took):.1f} ms"
                            f" p95 {1000 * pct(took, 0.95):.1f} ms ({len(took)} writes)"
                        )
                print(f"        load: {load()}", flush=True)
        if "writers" in phases:
            for backend, store in stores.items():
                ok, errors, took, first = phase_writers(
                    store("writers"), args.writers, args.seconds
                )
                print(
                    f"writers {backend:10} {args.writers} processes x 1 person each,"
                    f" {args.seconds:.0f} s each ({took:.1f} s with start-up): {ok:,} remembers,"
                    f" {ok / args.seconds:,.0f} ops/s,"
                    f" errors {errors}{' (' + first + ')' if first else ''}"
                )
                print(f"        load: {load()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
