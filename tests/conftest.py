"""Shared test fixtures: real SQLite files in tmp_path, the library API and the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.hostile import dump  # noqa: F401  (re-exported: the one home is tests/hostile.py)
from zkr import MemoryDb
from zkr.model import ClaimInput, ClaimKind, RememberRequest, SourceKind

# No hypothesis deadline anywhere: examples run on real files on a shared 2-core machine, where
# one slow example is load, not a failure (speed is measured by benchmarks, never by tests).
# (The plugin hosts' venvs run these tests without hypothesis.)
try:
    from hypothesis import settings
except ImportError:
    pass
else:
    settings.register_profile("zkr", deadline=None)
    settings.load_profile("zkr")

if TYPE_CHECKING:
    from tests.pg_server import PgServer
    from tests.sync_support import FixtureP

REPO = Path(__file__).resolve().parent.parent
# The shared spec material (conformance suite, fixtures) lives beside the checkout; ZKR_SHARED
# points elsewhere (and lets a test run see what a clone without it sees).
SHARED = Path(os.environ.get("ZKR_SHARED") or REPO.parent / "shared")
SHARED_PRESENT = (SHARED / "conformance" / "run").exists()
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
SHARED_MISSING = (
    f"needs the shared conformance suite and fixtures at {SHARED} (conformance/, fixtures/, "
    "spec/), which a public clone does not have; they always run in CI"
)

T, P = "t1", "p1"


def pytest_configure(config: pytest.Config) -> None:
    """Tests marked ``shared`` read ../shared. Without it they are skipped with a clear reason,
    except in CI (``CI`` set), where a missing ../shared fails the run before any test."""
    config.addinivalue_line("markers", "shared: needs the shared suites and fixtures (../shared)")
    config.addinivalue_line(
        "markers",
        "postgres: needs a PostgreSQL server (ZKR_PG_DSN or the machine's server binaries; "
        "tests/pg_server.py); every test using the pg_server or pg_dsn fixture gets it",
    )
    if not SHARED_PRESENT and IN_CI:
        raise pytest.UsageError(f"CI run without ../shared: zkr's test suite {SHARED_MISSING}")
    # The tests start hundreds of zkr processes from this checkout (an editable install). Where
    # Python may not write bytecode (PYTHONDONTWRITEBYTECODE=1), each of them would recompile
    # every zkr module it imports: compile what changed once, as the README's install does.
    import compileall

    compileall.compile_dir(REPO / "src" / "zkr", quiet=2)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    if not SHARED_PRESENT:
        lines.append(f"zkr: tests marked 'shared' are SKIPPED: each {SHARED_MISSING}")
    from tests.pg_server import ENV_DSN, find_bindir

    if os.environ.get(ENV_DSN):
        lines.append(f"zkr: tests marked 'postgres' use {ENV_DSN}")
    elif (bindir := find_bindir()) is not None:
        lines.append(f"zkr: tests marked 'postgres' start a throwaway server from {bindir}")
    else:
        verdict = "FAIL (CI)" if IN_CI else "are SKIPPED"
        lines.append(f"zkr: tests marked 'postgres' {verdict}: no {ENV_DSN} and no server binaries")
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Repeat the skipped-suite lines of :func:`pytest_report_header` at the end: the
    ``-q`` of ``addopts`` hides the header, and a run in a clone without ../shared otherwise
    ends "N skipped" with no reason (newcomer finding)."""
    config = terminalreporter.config
    for line in pytest_report_header(config):
        if "SKIPPED" in line:
            terminalreporter.write_line(line, yellow=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if {"pg_server", "pg_dsn"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)
    if SHARED_PRESENT:
        return
    skip = pytest.mark.skip(reason=f"../shared is missing: this test {SHARED_MISSING}")
    for item in items:
        if item.get_closest_marker("shared") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The PostgreSQL server of this test session (tests/pg_server.py): ``ZKR_PG_DSN``'s, or a
    throwaway one started on first use and stopped at the end. Without one the test is skipped
    with the reason, except in CI (``CI`` set), where it fails."""
    from tests.pg_server import NoServer, acquire

    try:
        server = acquire()
    except NoServer as exc:
        if IN_CI:
            pytest.fail(f"CI run without PostgreSQL: {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL test SKIPPED: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_dsn(pg_server: PgServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A ``postgresql://`` DSN naming a fresh, empty database of its own (dropped afterwards)."""
    from tests.pg_server import fresh_name

    name = fresh_name(request.node.name.split("[")[0].removeprefix("test_"))
    dsn = pg_server.create_database(name)
    try:
        yield dsn
    finally:
        pg_server.drop_database(name)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "memory.db")


@pytest.fixture
def db(db_path: str) -> Iterator[MemoryDb]:
    with MemoryDb.open(db_path) as database:
        yield database


def remember(
    db: MemoryDb,
    text: str,
    *,
    t: str = T,
    p: str = P,
    at: int = 10,
    recorded_at: int | None = None,
    claim: tuple[str, str, str] | None = None,
    claim_kind: ClaimKind = ClaimKind.FACT,
    kind: SourceKind = SourceKind.CONVERSATION,
    key: str | None = None,
    **claim_options: Any,
) -> Any:
    """Remember ``text`` (optionally with a (subject, predicate, value) claim)."""
    return db.remember(
        RememberRequest(
            tenant_id=t,
            person_id=p,
            kind=kind,
            text=text,
            captured_at=at,
            recorded_at=at if recorded_at is None else recorded_at,
            ingestion_key=key,
            claim=None
            if claim is None
            else ClaimInput(claim[0], claim[1], claim[2], claim_kind, at, **claim_options),
        )
    )


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.code == 0, self.stderr
        assert self.stdout.endswith("\n") and self.stdout.count("\n") == 1, self.stdout
        return json.loads(self.stdout)

    def error(self) -> str:
        assert self.code == 1, (self.code, self.stdout)
        assert self.stdout == ""
        assert self.stderr.endswith("\n") and self.stderr.count("\n") == 1, self.stderr
        envelope = json.loads(self.stderr)
        assert list(envelope) == ["error"]
        message = envelope["error"]
        assert isinstance(message, str)
        return message


class LogWatch:
    """The write-ahead log of a database seen from outside, through its ``PATH-shm`` (no SQLite
    connection in this process): after each :meth:`see`, the largest count of frames not yet
    checkpointed so far and how many checkpoints happened (the count went down). The counts
    are the wal-index header's ``mxFrame`` and ``nBackfill`` (https://www.sqlite.org/
    walformat.html §2.1-2.2: bytes 16 and 96, native byte order)."""

    def __init__(self, db_path: str) -> None:
        self.fd = os.open(db_path + "-shm", os.O_RDONLY)
        self.largest = self.checkpoints = self.previous = 0

    def see(self) -> None:
        header = os.pread(self.fd, 100, 0)
        frames = int.from_bytes(header[16:20], sys.byteorder)
        pending = frames - int.from_bytes(header[96:100], sys.byteorder)
        self.largest = max(self.largest, pending)
        self.checkpoints += pending < self.previous
        self.previous = pending

    def close(self) -> None:
        os.close(self.fd)


def cli(
    db_path: str | None,
    command: str | None = None,
    request: Any = None,
    *,
    stdin: bytes | None = None,
    argv: list[str] | None = None,
) -> CliResult:
    """Run ``python -m zkr --db PATH COMMAND`` with ``request`` as compact JSON on stdin."""
    if argv is None:
        assert db_path is not None and command is not None
        argv = ["--db", db_path, command]
    if stdin is None:
        stdin = b"" if request is None else json.dumps(request, ensure_ascii=False).encode()
    proc = subprocess.run(
        [sys.executable, "-m", "zkr", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return CliResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def sam_acme(tenant: str = T, person: str = P, claim_kind: str = "fact") -> dict[str, Any]:
    """The CLI ``remember`` request many scenarios start from: Sam's employer is Acme."""
    return {
        "tenant_id": tenant,
        "person_id": person,
        "kind": "conversation",
        "text": "Sam works at Acme",
        "captured_at": 10,
        "recorded_at": 10,
        "claim": {
            "subject": "Sam",
            "predicate": "employer",
            "value": "Acme",
            "kind": claim_kind,
            "valid_from": 10,
        },
    }


# --------------------------------------------------------------------------- sync fixtures


@pytest.fixture
def fixture_p(tmp_path: Path) -> FixtureP:
    """spec/sync.md §6 fixture P, built in a fresh file."""
    from tests.sync_support import build_p  # sync_support imports this module

    return build_p(str(tmp_path / "origin.db"))


@pytest.fixture
def p_commits(fixture_p: FixtureP) -> list[dict[str, Any]]:
    """Fixture P's feed staged into complete commits (pages of 3 events)."""
    from tests.sync_support import export_all, staged

    with MemoryDb.open(fixture_p.path) as db:
        return staged(export_all(db, limit=3))


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[tuple[str, MemoryDb]]:
    """An empty database to apply into: (path, open MemoryDb)."""
    path = str(tmp_path / "replica.db")
    with MemoryDb.open(path) as db:
        yield path, db
