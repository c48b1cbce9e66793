"""Several processes share one file: WAL plus a busy timeout, no "database is locked"."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from zkr import MemoryDb, StorageError
from zkr.model import SearchRequest

WRITER = textwrap.dedent(
    """
    import sys
    from zkr import MemoryDb
    from zkr.model import RememberRequest, SearchRequest, SourceKind

    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with MemoryDb.open(path) as db:
        for i in range(count):
            db.remember(RememberRequest("t", "p", SourceKind.CONVERSATION,
                                        f"{name} wrote note {i}", i, i, f"{name}-{i}"))
            if i % 10 == 0:
                db.search(SearchRequest("t", "p", f"{name} note"))
    print("done")
    """
)


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    MemoryDb.open(path).close()  # create once so both writers race on writes, not creation
    count = 150
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, path, name, str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in ("alpha", "beta")
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == "done"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 2 * count
    assert conn.execute("SELECT COUNT(*) FROM memory_commits").fetchone()[0] == 2 * count
    sequences = [row[0] for row in conn.execute("SELECT sequence FROM memory_commits")]
    assert len(set(sequences)) == 2 * count
    with MemoryDb.open(path) as db:
        pack = db.search(SearchRequest("t", "p", "beta wrote note 149"))
        assert pack.items[0].excerpt == "beta wrote note 149"


def test_creating_the_same_new_file_from_two_processes(tmp_path: Path) -> None:
    """Both openers race to migrate a brand-new file; the loser waits, then sees version 10."""
    path = str(tmp_path / "fresh.db")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, path, name, "5"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in ("one", "two")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 10
    assert conn.execute("SELECT COUNT(*) FROM sources").fetchone()[0] == 10


def test_switch_to_wal_waits_for_a_writer_in_rollback_mode(tmp_path: Path) -> None:
    """Changing the journal mode needs an exclusive lock, and SQLite does not wait for it.

    Regression: CI once saw ``database is locked`` from ``PRAGMA journal_mode = WAL`` when two
    openers raced on a new file (one still writing it in rollback mode): SQLite answers at
    once, rather than risk a deadlock, when a writer wants to upgrade past another's RESERVED
    lock. Here a writer holds a rollback-mode file for 0.5 s; the opener must wait, then
    switch it to WAL.
    """
    path = str(tmp_path / "rollback.db")
    MemoryDb.open(path).close()
    writer = sqlite3.connect(path, isolation_level=None)
    assert writer.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    writer.execute("BEGIN IMMEDIATE")  # holds the RESERVED lock, as a migrating opener does
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom zkr import MemoryDb\nMemoryDb.open(sys.argv[1])"
            ".close()\nprint('ok')\n",
            path,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1].decode()  # still waiting, not failed
    writer.execute("COMMIT")
    writer.close()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "ok"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_threads_sharing_one_memorydb(tmp_path: Path) -> None:
    """A MemoryDb shared by threads serializes their calls (one connection, one lock)."""
    from concurrent.futures import ThreadPoolExecutor

    from zkr.model import RememberRequest, SourceKind

    with MemoryDb.open(tmp_path / "threads.db") as db:  # a pathlib.Path is accepted

        def work(i: int) -> str:
            stored = db.remember(
                RememberRequest("t", "p", SourceKind.CONVERSATION, f"thread note {i}", i, i)
            )
            db.search(SearchRequest("t", "p", f"note {i}"))
            return stored.source_id

        with ThreadPoolExecutor(max_workers=10) as pool:
            ids = list(pool.map(work, range(200)))
        assert len(set(ids)) == 200
        assert db.conn.execute("SELECT COUNT(*) FROM memory_commits").fetchone()[0] == 200


def test_a_read_only_file_is_read_in_its_own_journal_mode(tmp_path: Path) -> None:
    """A file zkr may not write (here a ``mode=ro`` URI) is searched, not switched to WAL;
    writes fail with SQLite's message and change nothing. Its missing extra indexes are
    skipped too (they only speed queries up)."""
    from tests.conftest import dump, remember

    path = tmp_path / "ro.db"
    with MemoryDb.open(path) as db:
        remember(db, "hello from a read-only archive", t="t", p="p")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    conn.execute("DROP INDEX zkr_claim_evidence_by_evidence")
    conn.close()
    before = dump(str(path))
    with MemoryDb.open(f"file:{path}?mode=ro") as db:
        pack = db.search(SearchRequest("t", "p", "archive"))
        assert pack.items[0].excerpt == "hello from a read-only archive"
        with pytest.raises(StorageError, match="attempt to write a readonly database"):
            remember(db, "new note", t="t", p="p")
    assert dump(str(path)) == before
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
