"""The reliability suite's machinery: hostile requests and files, workers, whole-file invariants.

Issue 18: zkr must be hard to break, and shown so on every change. This module is shared by
``tests/test_reliability.py`` (small sizes, every CI run) and ``benchmarks/soak.py`` (large
sizes, prints the figures of the README). Everything is seeded, so a failure reproduces from
its seed; nothing is mocked: real SQLite files, the real CLI (in-process through
:func:`zkr.cli.run`, and as real processes), real ``kill -9``.

* :func:`hostile_cases` — a bounded, seeded generator of requests for every command: wrong
  types, missing/extra/duplicate fields, number edges, NaN/Infinity, deep nesting, invalid
  UTF-8, lone surrogates, NUL, 1 MiB boundaries, truncation and byte flips.
* :class:`Fuzzer` — runs cases against one seeded file and checks the contract after each:
  exit status 0 or 1, one JSON line on the right stream, ``{"error": str}`` only, never
  ``internal error``, and a failed request leaves every row as it was.
* :func:`bad_targets`, :func:`corrupted_copies` — ``--db`` paths that are not zkr files.
* :func:`worker_main` — one process of the concurrency soak / crash test: mixed operations,
  each acknowledged on stdout only after it returned.
* :func:`invariants` — what must hold of any file, whatever happened to the process.
"""

from __future__ import annotations

import copy
import io
import json
import os
import random
import shutil
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zkr import MemoryDb, ZkrError
from zkr.cli import COMMANDS, REQUEST_LIMIT, run
from zkr.model import (
    ClaimInput,
    ClaimKind,
    CorrectRequest,
    DeleteRequest,
    ExportRequest,
    GetRequest,
    LimitRequest,
    ProfileRequest,
    RememberRequest,
    ReviewRequest,
    SearchRequest,
    SourceKind,
    Target,
)

T, P = "t1", "p1"
RAW = "\ue000RAW{}\ue000"  # placeholder for raw (non-JSON-encodable) text in a request

HOSTILE_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63),
    -(2**63) - 1,
    10**400,
    1.5,
    -0.0,
    1e308,
    "",
    " \t\n",
    "\x00",
    "a\x00b",
    "\u2028\u200b\ufeff",
    "😀" * 50,
    "x" * 5000,
    [],
    {},
    [1, "a", None],
    {"kind": "claim", "id": "x"},
    {"kind": "source", "id": ""},
)
RAW_TOKENS: tuple[str, ...] = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-0",
    "1.0",
    "1e1",
    "01",
    '"\\ud800"',
    '"x\\udc00y"',
    '"\\u0000"',
    '"\\ud83d\\ude00"',
    "[" * 5000 + "]" * 5000,
    "[" * 200_000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    "tru",
    '"unterminated',
)


@dataclass
class Case:
    """One CLI invocation: argv after the program name, and the bytes on stdin."""

    command: str
    stdin: bytes
    kind: str
    argv: list[str] | None = None


# --------------------------------------------------------------------------- the seeded file


def seed_database(path: str | Path) -> dict[str, dict[str, Any]]:
    """Fill ``path`` with a little of everything; return one valid request per command."""
    with MemoryDb.open(path) as db:
        first = db.remember(
            RememberRequest(
                T,
                P,
                SourceKind.CONVERSATION,
                "Sam moved to Lisbon in May and works at Acme",
                10,
                10,
                "seed-1",
                ClaimInput("Sam", "city", "Lisbon", ClaimKind.PROFILE_FACT, 10),
            )
        )
        second = db.remember(
            RememberRequest(
                T,
                P,
                SourceKind.DOCUMENT,
                "Sam prefers short plans",
                11,
                11,
                "seed-2",
                ClaimInput("Sam", "prefers", "short plans", ClaimKind.PREFERENCE, 11),
            )
        )
        third = db.remember(RememberRequest(T, P, SourceKind.AUDIO, "a raw note", 12, 12))
        assert first.claim_id is not None and second.claim_id is not None
        db.profile(
            ProfileRequest.from_json(
                _scoped(stability="current", claim_id=first.claim_id, recorded_at=13)
            )
        )
        db.review(ReviewRequest(T, P, "2024-05-01", "moved", [first.evidence_id], 14))
        page = db.export(ExportRequest(T, P, export_format=1, limit=100)).to_json()
    scope = _scoped()
    return {
        "remember": _scoped(
            kind="conversation",
            text="hello from the fuzzer",
            captured_at=20,
            recorded_at=20,
            ingestion_key="fuzz",
            claim={
                "subject": "a",
                "predicate": "b",
                "value": "c",
                "kind": "fact",
                "valid_from": 20,
            },
            locator={
                "device_id": "d",
                "provider": "p",
                "stream_id": "s",
                "segment_id": "g",
                "start_ms": 0,
                "end_ms": 10,
            },
        ),
        "locator": _scoped(evidence_id=first.evidence_id),
        "search": _scoped(query="Sam Lisbon", limit=5, as_of=None),
        "get": _scoped(target={"kind": "claim", "id": second.claim_id}),
        "correct": _scoped(
            claim_id=second.claim_id,
            text="Sam prefers long plans",
            value="long plans",
            valid_at=30,
            recorded_at=30,
        ),
        "promote": _scoped(claim_id=second.claim_id, recorded_at=31),
        "archive": _scoped(claim_id=second.claim_id, recorded_at=32),
        "link": _scoped(
            claim_id=first.claim_id,
            evidence_id=third.evidence_id,
            relation="supports",
            confidence_basis_points=5000,
        ),
        "delete": _scoped(source_id=third.source_id, deleted_at=40),
        "repair": _scoped(limit=3),
        "profile": _scoped(stability="stable", claim_id=first.claim_id, recorded_at=33),
        "profiles": _scoped(limit=3),
        "review": _scoped(
            day="2024-05-02",
            summary="s",
            evidence_ids=[first.evidence_id],
            recorded_at=34,
        ),
        "reviews": _scoped(),
        "projections": _scoped(model="m", version="1"),
        "embed": _scoped(
            target={"kind": "source", "id": first.source_id},
            embedding={
                "vector": [0.1, 0.2, 0.3],
                "model": "m",
                "version": "1",
                "input_hash": "h",
                "normalization": "l2",
                "distance": "cosine",
            },
        ),
        "export": _scoped(export_format=1, limit=2),
        "apply": {
            "tenant_id": "t2",
            "person_id": "p2",
            "export_format": 1,
            "database_schema_version": 10,
            "commits": _rescoped(page["commits"][:2]),
        },
        "": scope,
    }


def _scoped(**fields: Any) -> dict[str, Any]:
    return {"tenant_id": T, "person_id": P, **fields}


def _rescoped(value: Any) -> Any:
    """Another scope's copy of exported commits (ids taken: apply refuses it, as it must)."""
    if isinstance(value, dict):
        return {k: ("t2" if v == T else "p2" if v == P else _rescoped(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_rescoped(item) for item in value]
    return value


# --------------------------------------------------------------------------- requests


def _encode(value: Any, raws: list[str]) -> bytes:
    text = json.dumps(value, ensure_ascii=False)
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(RAW.format(index), ensure_ascii=False), raw, 1)
    return text.encode("utf-8", "surrogatepass")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path into dicts and lists (the leaves and the containers)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index))


def _set(value: Any, path: tuple[Any, ...], new: Any) -> None:
    for step in path[:-1]:
        value = value[step]
    value[path[-1]] = new


def _drop(value: Any, path: tuple[Any, ...]) -> None:
    for step in path[:-1]:
        value = value[step]
    del value[path[-1]]


def _hostile(rng: random.Random) -> Any:
    """A fresh copy of one hostile value (never shared: requests are mutated in place)."""
    return copy.deepcopy(rng.choice(HOSTILE_VALUES))


def mutate(rng: random.Random, base: dict[str, Any]) -> tuple[str, bytes]:
    """One hostile request derived from ``base``: (kind of mutation, stdin bytes)."""
    request = json.loads(json.dumps(base))
    paths = list(_paths(request)) or [("tenant_id",)]
    path = rng.choice(paths)
    raws: list[str] = []
    kind = rng.choice(
        (
            "drop",
            "extra",
            "retype",
            "raw",
            "duplicate",
            "string",
            "whole",
            "bytes",
            "size",
            "valid",
            "several",
        )
    )
    if kind == "drop":
        _drop(request, path)
    elif kind == "extra":
        target = request
        for step in path[:-1]:
            target = target[step]
        if isinstance(target, dict):
            target[rng.choice(("zz_extra", "tenant", "id", "kind"))] = _hostile(rng)
    elif kind == "retype":
        _set(request, path, _hostile(rng))
    elif kind == "raw":
        raws.append(rng.choice(RAW_TOKENS))
        _set(request, path, RAW.format(0))
    elif kind == "string":
        _set(
            request,
            path,
            rng.choice(
                (
                    "",
                    " ",
                    "\x00",
                    "x" * rng.choice((201, 10_000)),
                    "\u202e\u0301",
                    "'; DROP TABLE sources; --",
                    '"*" OR NEAR(a b)',
                    "\\",
                    "%_",
                )
            ),
        )
    elif kind == "whole":
        return kind, rng.choice(
            (
                b"null",
                b"[]",
                b'"x"',
                b"1",
                b"{}",
                b"",
                b"   ",
                b"\xef\xbb\xbf{}",
                b"[{}]",
                b'{"tenant_id":"t1","tenant_id":"t1"}',
            )
        )
    elif kind == "several":
        for _ in range(rng.randint(2, 4)):
            mutated = list(_paths(request))
            if not mutated:
                break
            _set(request, rng.choice(mutated), _hostile(rng))
    data = _encode(request, raws)
    if kind == "duplicate" and data.startswith(b"{") and len(data) > 2:
        first_key = next(iter(request), "tenant_id")
        entry = json.dumps({first_key: _hostile(rng)})[1:-1].encode()
        data = b"{" + entry + b"," + data[1:]
    elif kind == "bytes" and data:
        position = rng.randrange(len(data))
        choice = rng.randrange(5)
        if choice == 0:
            data = data[:position]  # truncated
        elif choice == 1:
            data = data[:position] + bytes([rng.randrange(256)]) + data[position + 1 :]
        elif choice == 2:
            data = data[:position] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"))
            data += _encode(request, raws)[position:]
        elif choice == 3:
            data = data + rng.choice((b"x", b"{}", b"\x00", b" \n"))
        else:
            data = b"\xef\xbb\xbf" + data
    elif kind == "size":
        target = rng.choice((REQUEST_LIMIT - 1, REQUEST_LIMIT, REQUEST_LIMIT + 1))
        data = data + b" " * max(0, target - len(data))
    return kind, data


def hostile_cases(seed: int, count: int, bases: dict[str, dict[str, Any]]) -> Iterator[Case]:
    """``count`` seeded cases spread over every command of :data:`zkr.cli.COMMANDS`."""
    rng = random.Random(seed)
    commands = sorted(COMMANDS)
    for index in range(count):
        command = commands[index % len(commands)]
        if rng.random() < 0.02:
            name = rng.choice(("", "Remember", "x" * 300, "se\udcffarch", "--help", "help!"))
            yield Case(name, b"{}", "unknown-command", ["--db", "{db}", name])
            continue
        kind, data = mutate(rng, bases.get(command, bases[""]))
        yield Case(command, data, kind)


# --------------------------------------------------------------------------- checking


def dump(path: str | Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (FTS content included), for before/after comparisons; FTS
    shadow tables and zkr's rebuildable ``zkr_*`` projections (the search index a search brings
    up to date) are not stored data and are left out. Opened read-only, so dumping never
    changes the file (no WAL recovery or checkpoint); the tests import it as
    ``tests.conftest.dump``. A missing file has no tables (and is not created)."""
    if not Path(path).exists():
        return {}
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'source_fts_%' AND name NOT LIKE 'zkr\\_%' ESCAPE '\\'"
                " ORDER BY name"
            )
        ]
        return {
            table: sorted(
                (tuple(row) for row in conn.execute(f'SELECT * FROM "{table}"')),
                key=repr,
            )
            for table in tables
        }
    finally:
        conn.close()


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_in_process(argv: list[str], stdin: bytes) -> Outcome:
    """:func:`zkr.cli.run` on in-memory streams; an escaping exception is a test failure."""
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, io.BytesIO(stdin), out, err)
    return Outcome(code, out.getvalue(), err.getvalue())


def contract_problem(outcome: Outcome) -> str | None:
    """What, if anything, breaks the CLI's output contract (spec/cli.md §6-7)."""
    if outcome.code not in (0, 1):
        return f"exit status {outcome.code}"
    if "Traceback" in outcome.stderr:
        return "traceback"
    if outcome.code == 0:
        if outcome.stderr or not outcome.stdout.endswith("\n") or outcome.stdout.count("\n") != 1:
            return "success output is not one JSON line"
        try:
            json.loads(outcome.stdout)
        except ValueError:
            return "success output is not JSON"
        return None
    if outcome.stdout:
        return "output on stdout for a failure"
    if not outcome.stderr.endswith("\n") or outcome.stderr.count("\n") != 1:
        return "error is not one line"
    try:
        envelope = json.loads(outcome.stderr)
    except ValueError:
        return "error is not JSON"
    if not isinstance(envelope, dict) or list(envelope) != ["error"]:
        return "error is not an envelope"
    message = envelope["error"]
    if not isinstance(message, str) or not message:
        return "error message is not a string"
    if message.startswith("internal error"):
        return f"internal error: {message}"
    if len(message) > 450:
        return "error message is not bounded"
    return None


@dataclass
class Tally:
    """Counts of a fuzzing run (the figures ``benchmarks/soak.py`` prints)."""

    requests: int = 0
    succeeded: int = 0
    failed: int = 0
    tracebacks: int = 0
    non_envelope: int = 0
    internal_errors: int = 0
    changed_by_failure: int = 0
    problems: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)

    def record(
        self, case: Case, outcome: Outcome, changed: bool, problem: str | None = "check"
    ) -> None:
        """Count one answer; ``problem`` is the contract check's finding (default: the CLI's)."""
        self.requests += 1
        self.kinds[case.kind] += 1
        if outcome.code == 0:
            self.succeeded += 1
        else:
            self.failed += 1
        if problem == "check":
            problem = contract_problem(outcome)
        if problem is not None:
            if problem == "traceback":
                self.tracebacks += 1
            elif problem.startswith("internal error"):
                self.internal_errors += 1
            else:
                self.non_envelope += 1
        if changed:
            self.changed_by_failure += 1
            problem = (problem or "") + " data changed by a failed request"
        if problem is not None and len(self.problems) < 20:
            detail = f"{case.command!r} {case.kind} {case.stdin[:120]!r}: {problem}"
            self.problems.append(f"{detail} / {outcome.stderr[:200]!r}")

    def merge(self, other: Tally) -> None:
        for name in (
            "requests",
            "succeeded",
            "failed",
            "tracebacks",
            "non_envelope",
            "internal_errors",
            "changed_by_failure",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems.extend(other.problems[: max(0, 20 - len(self.problems))])
        self.kinds.update(other.kinds)


Executor = Callable[[list[str], bytes], "Outcome"]
"""Runs one CLI invocation (argv after the program name, stdin bytes)."""


def fuzz(path: str | Path, cases: Iterator[Case], execute: Executor | None = None) -> Tally:
    """Run ``cases`` against the file at ``path``; compare its rows after every failure."""
    execute = execute or run_in_process
    tally = Tally()
    before = dump(path)
    for case in cases:
        argv = [a.replace("{db}", str(path)) for a in case.argv or ["--db", "{db}", case.command]]
        try:
            outcome = execute(argv, case.stdin)
        except BaseException as exc:
            outcome = Outcome(-1, "", f"Traceback: {type(exc).__name__}: {exc}")
        after = dump(path)
        tally.record(case, outcome, changed=outcome.code != 0 and after != before)
        before = after
    return tally


def run_process(argv: list[str], stdin: bytes) -> Outcome:
    """The real CLI as a child process (``python -m zkr``)."""
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "zkr", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return Outcome(
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def serve_problem(line: bytes, request_id: int) -> tuple[bool, str | None]:
    """(failed, what breaks the contract of one ``zkr serve`` response line, if anything)."""
    if not line.endswith(b"\n") or line.count(b"\n") != 1:
        return True, "response is not one line"
    try:
        response = json.loads(line)
    except ValueError:
        return True, "response is not JSON"
    if not isinstance(response, dict):
        return True, "response is not an object"
    if set(response) == {"id", "ok"}:
        return False, None if response["id"] == request_id else "wrong id"
    if set(response) != {"error", "id"} or response["id"] not in (request_id, None):
        return True, "response is not an envelope"
    message = response["error"]
    if not isinstance(message, str) or not message:
        return True, "error message is not a string"
    if message.startswith("internal error"):
        return True, f"internal error: {message}"
    return True, None if len(message) <= 450 else "error message is not bounded"


def fuzz_serve(path: str | Path, cases: Iterator[Case]) -> Tally:
    """The same cases through one ``zkr serve`` process, one request line at a time."""
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, "-m", "zkr", "serve", "--db", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    tally = Tally()
    before = dump(path)
    try:
        for number, case in enumerate(cases):
            body = case.stdin.replace(b"\n", b" ").replace(b"\r", b" ")
            command = json.dumps(case.command).encode("utf-8", "surrogatepass")
            line = b'{"id":%d,"command":%s,"request":%s}\n' % (
                number,
                command,
                body or b"",
            )
            proc.stdin.write(line)
            proc.stdin.flush()
            answer = proc.stdout.readline()
            failed, problem = serve_problem(answer, number)
            outcome = Outcome(
                int(failed),
                "" if failed else answer.decode("utf-8", "replace"),
                answer.decode("utf-8", "replace") if failed else "",
            )
            after = dump(path)
            changed = failed and after != before
            before = after
            tally.record(case, outcome, changed, problem)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    if proc.returncode != 0:
        tally.tracebacks += 1
        tally.problems.append(f"serve exited {proc.returncode}: {proc.stderr.read()[-300:]!r}")
    return tally


# --------------------------------------------------------------------------- hostile files


def bad_targets(directory: Path, seeded: Path) -> list[tuple[str, Path | str]]:
    """``--db`` targets that are not (healthy) zkr files, each created fresh in ``directory``."""
    targets: list[tuple[str, Path | str]] = []
    folder = directory / "a-directory"
    folder.mkdir()
    targets.append(("directory", folder))
    targets.append(("missing parent", directory / "no" / "such" / "x.db"))
    text = directory / "notes.txt"
    text.write_text("not a database\n" * 200)
    targets.append(("text file", text))
    app = directory / "other-app.db"
    conn = sqlite3.connect(app)
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO accounts (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    targets.append(("another application's database", app))
    newer = directory / "newer.db"
    shutil.copyfile(seeded, newer)
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version = 11")
    conn.commit()
    conn.close()
    targets.append(("newer schema", newer))
    truncated = directory / "truncated.db"
    truncated.write_bytes(seeded.read_bytes()[:4096])
    targets.append(("truncated copy", truncated))
    header = directory / "header-only.db"
    header.write_bytes(seeded.read_bytes()[:100])
    targets.append(("header only", header))
    targets.append(("read-only URI of a missing file", f"file:{directory / 'nope.db'}?mode=ro"))
    return targets


def corrupted_copies(seeded: Path, directory: Path, seed: int, count: int) -> Iterator[Path]:
    """``count`` copies of ``seeded`` with a few bytes overwritten each (mostly early pages:
    the header and the schema, where damage shows at open)."""
    rng = random.Random(seed)
    data = seeded.read_bytes()
    for index in range(count):
        copy = bytearray(data)
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.6:
                at = rng.randrange(min(len(copy), 16_384))
            else:
                at = rng.randrange(len(copy))
            copy[at] = rng.randrange(256)
        target = directory / f"corrupt-{index}.db"
        target.write_bytes(bytes(copy))
        yield target


def readable_dump(path: Path) -> dict[str, list[tuple[Any, ...]]] | str:
    """:func:`dump`, or SQLite's complaint when the (corrupted) file cannot be read whole."""
    try:
        return dump(path)
    except sqlite3.Error as exc:
        return f"unreadable: {exc}"
    except UnicodeDecodeError:
        return "unreadable: undecodable message"


def unchanged(path: Path, before: bytes, before_dump: dict[str, Any] | str) -> bool:
    """Whether a failed call left ``path`` as it was: the same bytes, or the same rows (a
    search may have brought zkr's rebuildable index up to date before failing)."""
    return path.read_bytes() == before or readable_dump(path) == before_dump


# --------------------------------------------------------------------------- invariants


def invariants(path: str | Path) -> list[str]:
    """What must hold of a zkr file whatever happened to its writers (empty list: all hold).

    SQLite's own integrity and foreign-key checks; schema version 10; every commit holds its
    events 0..n-1 (a commit and its records are written in one transaction); every live
    source has exactly one full-text row and no deleted or missing source has one; every scope's
    feed exports completely through the strict record parser.
    """
    problems: list[str] = []
    MemoryDb.open(path).close()  # recovers a killed writer's journal, as any next opener does
    conn = sqlite3.connect(path)
    try:
        integrity = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if integrity != ["ok"]:
            problems.append(f"integrity_check: {integrity[:3]}")
        if conn.execute("PRAGMA foreign_key_check").fetchall():
            problems.append("foreign_key_check reports orphans")
        if conn.execute("PRAGMA user_version").fetchone()[0] != 10:
            problems.append("user_version is not 10")
        broken = conn.execute(
            "SELECT c.sequence FROM memory_commits AS c LEFT JOIN memory_export_events AS e"
            " ON e.commit_sequence = c.sequence GROUP BY c.sequence"
            " HAVING COUNT(e.event_index) = 0 OR MAX(e.event_index) <> COUNT(e.event_index) - 1"
        ).fetchall()
        if broken:
            problems.append(f"commits without their events: {broken[:5]}")
        fts = conn.execute(
            "SELECT COUNT(*) FROM sources AS s WHERE s.deleted_at IS NULL AND (SELECT COUNT(*)"
            " FROM source_fts AS f WHERE f.source_id = s.id) <> 1"
        ).fetchone()[0]
        stray = conn.execute(
            "SELECT COUNT(*) FROM source_fts AS f WHERE NOT EXISTS (SELECT 1 FROM sources AS s"
            " WHERE s.id = f.source_id AND s.deleted_at IS NULL)"
        ).fetchone()[0]
        if fts or stray:
            problems.append(f"full-text rows out of step: {fts} live sources, {stray} strays")
        scopes = conn.execute("SELECT DISTINCT tenant_id, person_id FROM memory_commits").fetchall()
    finally:
        conn.close()
    with MemoryDb.open(path) as db:
        for tenant, person in scopes:
            try:
                _export_all(db, tenant, person)
            except ZkrError as exc:
                problems.append(f"export of {tenant}/{person} fails: {exc}")
    return problems


def _export_all(db: MemoryDb, tenant: str, person: str) -> int:
    page = db.export(ExportRequest(tenant, person, export_format=1, limit=100)).to_json()
    records = sum(len(c["records"]) for c in page["commits"])
    mark = page["high_water_mark"]
    while not page["complete"]:
        page = db.export(
            ExportRequest(
                tenant,
                person,
                export_format=1,
                after_commit=page["next_after_commit"],
                after_event_index=page["next_after_event_index"],
                high_water_mark=mark,
                limit=100,
            )
        ).to_json()
        records += sum(len(c["records"]) for c in page["commits"])
    return records


# --------------------------------------------------------------------------- workers


def worker_main() -> None:
    """``python -c 'from tests.hostile import worker_main; worker_main()' PATH NAME OPS SEED``.

    Mixed operations on one shared file. Each write is acknowledged on stdout as one JSON line
    *after* the call returned (so the line means committed): ``["remember", source_id, text]``,
    ``["delete", source_id]``, ``["correct", claim_id, new_claim_id]``. Failures are counted
    and printed at the end as ``["done", {message: count}]``; a non-``ZkrError`` is printed as
    ``["crash", repr]`` and ends the worker.
    """
    path, name, ops, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    errors: Counter[str] = Counter()
    mine: list[tuple[str, str, str | None]] = []  # (source_id, evidence_id, claim_id)
    out = sys.stdout

    def ack(*item: Any) -> None:
        out.write(json.dumps(item) + "\n")
        out.flush()

    tenant, person = rng.choice((("t1", "p1"), ("t1", "p2"), ("t2", "p1")))
    try:
        with MemoryDb.open(path) as db:
            for i in range(ops):
                op = rng.random()
                try:
                    if op < 0.55 or not mine:
                        text = f"{name} note {i} about {rng.choice(('plans', 'Lisbon', 'tea'))}"
                        claim = None
                        if rng.random() < 0.4:
                            claim = ClaimInput(name, f"p{i}", f"v{i}", ClaimKind.FACT, i + 1)
                        result = db.remember(
                            RememberRequest(
                                tenant,
                                person,
                                SourceKind.CONVERSATION,
                                text,
                                i + 1,
                                i + 1,
                                f"{name}-{i}",
                                claim,
                            )
                        )
                        mine.append((result.source_id, result.evidence_id, result.claim_id))
                        ack("remember", result.source_id, text, tenant, person)
                    elif op < 0.70:
                        db.search(SearchRequest(tenant, person, rng.choice(("plans", name))))
                    elif op < 0.78:
                        source_id, _, _ = mine.pop(rng.randrange(len(mine)))
                        db.delete(DeleteRequest(tenant, person, source_id, 10_000 + i))
                        ack("delete", source_id, tenant, person)
                    elif op < 0.86:
                        claimed = [m for m in mine if m[2] is not None]
                        if claimed:
                            source_id, evidence_id, claim_id = rng.choice(claimed)
                            assert claim_id is not None
                            fixed = db.correct(
                                CorrectRequest(
                                    tenant,
                                    person,
                                    claim_id,
                                    f"{name} fix {i}",
                                    f"w{i}",
                                    20_000 + i,
                                    20_000 + i,
                                )
                            )
                            mine.remove((source_id, evidence_id, claim_id))
                            ack("correct", claim_id, fixed.claim_id, tenant, person)
                    elif op < 0.92:
                        _, evidence_id, _ = rng.choice(mine)
                        db.review(
                            ReviewRequest(
                                tenant,
                                person,
                                f"2024-01-{i % 28 + 1:02d}",
                                f"{name} {i}",
                                [evidence_id],
                                30_000 + i,
                            )
                        )
                    elif op < 0.96:
                        db.export(ExportRequest(tenant, person, export_format=1, limit=5))
                        db.reviews(LimitRequest(tenant, person))
                    else:
                        source_id, _, _ = rng.choice(mine)
                        db.get(
                            GetRequest(
                                tenant,
                                person,
                                Target.from_json({"kind": "source", "id": source_id}),
                            )
                        )
                except ZkrError as exc:
                    errors[exc.message] += 1
    except BaseException as exc:
        ack("crash", f"{type(exc).__name__}: {exc}")
        raise SystemExit(1) from None
    ack("done", dict(errors))


@dataclass
class Acknowledged:
    """What workers acknowledged: sources remembered (and deleted), claims corrected."""

    remembered: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    corrected: dict[str, str] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    done: int = 0

    def read(self, lines: str) -> None:
        for line in lines.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue  # a line cut by kill -9 was never acknowledged
            if item[0] == "remember":
                self.remembered[item[1]] = (item[2], item[3], item[4])
            elif item[0] == "delete":
                self.deleted.add(item[1])
            elif item[0] == "correct":
                self.corrected[item[1]] = item[2]
            elif item[0] == "done":
                self.done += 1
                self.errors.update(item[1])
            elif item[0] == "crash":
                self.crashes.append(item[1])

    def lost(self, path: str | Path) -> list[str]:
        """Acknowledged writes the file does not hold (empty when none was lost)."""
        missing: list[str] = []
        conn = sqlite3.connect(path)
        try:
            for source_id, (text, tenant, person) in self.remembered.items():
                row = conn.execute(
                    "SELECT content, tenant_id, person_id, deleted_at FROM sources WHERE id = ?",
                    (source_id,),
                ).fetchone()
                if row is None or tuple(row[:3]) != (text, tenant, person):
                    missing.append(f"remember {source_id}")
                elif source_id in self.deleted and row[3] is None:
                    missing.append(f"delete {source_id}")
            for old, new in self.corrected.items():
                row = conn.execute("SELECT status FROM claims WHERE id = ?", (old,)).fetchone()
                fresh = conn.execute("SELECT 1 FROM claims WHERE id = ?", (new,)).fetchone()
                if row is None or row[0] == "accepted" or fresh is None:
                    missing.append(f"correct {old}")
        finally:
            conn.close()
        return missing


def worker_command(path: str | Path, name: str, ops: int, seed: int) -> list[str]:
    """The argv of one worker process (run with the repository root as working directory)."""
    code = "from tests.hostile import worker_main; worker_main()"
    return [sys.executable, "-c", code, str(path), name, str(ops), str(seed)]


REPO = Path(__file__).resolve().parent.parent
WORKER_ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
}


def soak(path: str | Path, processes: int, ops: int, seed: int) -> Acknowledged:
    """``processes`` workers × ``ops`` mixed operations on one file; what they acknowledged."""
    import subprocess

    MemoryDb.open(path).close()
    procs = [
        subprocess.Popen(
            worker_command(path, f"w{index}", ops, seed * 1000 + index),
            cwd=REPO,
            env=WORKER_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for index in range(processes)
    ]
    acknowledged = Acknowledged()
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        acknowledged.read(out.decode())
        if proc.returncode != 0:
            acknowledged.crashes.append(f"exit {proc.returncode}: {err.decode()[-300:]}")
    return acknowledged


def crash_trial(path: str | Path, seed: int, kill_after: float) -> Acknowledged:
    """One writer killed with SIGKILL after ``kill_after`` seconds of work; its acknowledgements."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(
        worker_command(path, f"k{seed}", 1_000_000, seed),
        cwd=REPO,
        env=WORKER_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(kill_after)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    acknowledged = Acknowledged()
    acknowledged.read(out.decode("utf-8", "replace"))
    return acknowledged
