"""Driver failures reach callers as ``StorageError`` with SQLite's own words (issue 18, faults 1-2).

A full disk is real: the CLI or a Python child runs with ``RLIMIT_FSIZE`` (what ``ulimit -f``
sets), so SQLite's writes past the limit fail with ``EFBIG``. A corrupted file is a copy whose
bytes were overwritten. Nothing is mocked.
"""

from __future__ import annotations

import json
import resource
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import cli, dump, remember
from zkr import MemoryDb, StorageError
from zkr.model import DeleteRequest, SearchRequest

REQUEST = {
    "tenant_id": "t1",
    "person_id": "p1",
    "kind": "conversation",
    "captured_at": 10,
    "recorded_at": 10,
}
LIMIT_BYTES = 400 * 1024
# SQLite reports EFBIG as a full disk, or as an I/O error when it hits a journal or WAL write.
FULL_DISK = {"database or disk is full", "disk I/O error"}


def _limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _seeded(tmp_path: Path) -> str:
    path = str(tmp_path / "memory.db")
    assert cli(path, "remember", {**REQUEST, "text": "a small first memory"}).code == 0
    return path


def test_a_full_disk_is_reported_in_sqlites_words_and_changes_nothing(tmp_path: Path) -> None:
    path = _seeded(tmp_path)
    before = dump(path)
    request = json.dumps({**REQUEST, "text": "x" * 400_000}).encode()
    proc = subprocess.run(
        [sys.executable, "-m", "zkr", "--db", path, "remember"],
        input=request,
        capture_output=True,
        preexec_fn=lambda: _limited(LIMIT_BYTES),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and proc.stdout == b""
    assert json.loads(proc.stderr)["error"] in FULL_DISK
    assert dump(path) == before
    # The same write succeeds once there is room: the file was left sound.
    assert cli(path, "remember", {**REQUEST, "text": "x" * 400_000}).code == 0


def test_the_library_raises_storage_error_on_a_full_disk(tmp_path: Path) -> None:
    path = _seeded(tmp_path)
    script = textwrap.dedent(
        f"""
        import resource
        from zkr import MemoryDb
        from zkr.model import RememberRequest, SourceKind
        db = MemoryDb.open({path!r})
        resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT_BYTES}, {LIMIT_BYTES}))
        request = RememberRequest("t1", "p1", SourceKind.CONVERSATION, "y" * 400_000, 10, 10)
        try:
            db.remember(request)
        except BaseException as exc:
            print(type(exc).__name__, exc)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=120, check=False
    )
    assert proc.stderr == b""
    name, _, message = proc.stdout.decode().rstrip("\n").partition(" ")
    assert name == "StorageError" and message in FULL_DISK


def _corrupt_schema(source: str, target: Path) -> None:
    """Overwrite two bytes of one index's CREATE statement with invalid UTF-8."""
    data = bytearray(Path(source).read_bytes())
    at = data.find(b"reviews_scope ON daily_reviews")
    assert at > 0
    data[at + 14 : at + 16] = b"\xff\xfe"
    target.write_bytes(bytes(data))


def test_a_malformed_schema_message_is_not_an_internal_error(tmp_path: Path) -> None:
    path = _seeded(tmp_path)
    broken = tmp_path / "broken.db"
    _corrupt_schema(path, broken)
    before = broken.read_bytes()
    message = cli(str(broken), "reviews", {"tenant_id": "t1", "person_id": "p1"}).error()
    near = '"\ufffd\ufffd"'
    assert message == f"malformed database schema (reviews_scope) - near {near}: syntax error"
    assert broken.read_bytes() == before
    with pytest.raises(StorageError, match="malformed database schema"):
        MemoryDb.open(broken)


def test_a_value_of_the_wrong_type_in_the_file_is_a_storage_error(tmp_path: Path) -> None:
    """SQLite columns take any type: a damaged file can hold a BLOB where zkr wrote an integer
    (found by benchmarks/soak.py on a corrupted copy: ``delete`` raised a bare ``TypeError``)."""
    path = _seeded(tmp_path)
    with sqlite3.connect(path) as conn:
        (source_id,) = conn.execute("SELECT id FROM sources").fetchone()
        conn.execute("UPDATE sources SET recorded_at = x'0102' WHERE id = ?", (source_id,))
    before = dump(path)
    request = {"tenant_id": "t1", "person_id": "p1", "source_id": source_id, "deleted_at": 20}
    message = cli(path, "delete", request).error()
    assert message.startswith("database content is not what zkr expects: TypeError: ")
    assert dump(path) == before
    with MemoryDb.open(path) as db, pytest.raises(StorageError, match="not what zkr expects"):
        db.delete(DeleteRequest("t1", "p1", source_id, 20))


def test_a_search_answers_on_a_full_disk_with_index_updates_pending(tmp_path: Path) -> None:
    """The search index's queue cannot be drained past the file size limit (EFBIG): the search
    still answers, exactly, and the queue waits in the file (newcomer finding: it failed with
    ``disk I/O error`` while export and browse worked)."""
    path = str(tmp_path / "memory.db")
    words = [f"w{i}" for i in range(3000)]
    with MemoryDb.open(path) as db:
        remember(db, "the first memory")
        db.search(SearchRequest("t1", "p1", "first"))  # the index exists; the rest is queued
        for i in range(40):
            remember(
                db, f"memory {i} " + " ".join(words[(i * 97 + j * 31) % 3000] for j in range(300))
            )
    before = dump(path)
    request = {"tenant_id": "t1", "person_id": "p1", "query": "memory 7", "limit": 1}
    proc = subprocess.run(
        [sys.executable, "-m", "zkr", "--db", path, "search"],
        input=json.dumps(request).encode(),
        capture_output=True,
        preexec_fn=lambda: _limited(64 * 1024),
        timeout=120,
        check=False,
    )
    assert proc.stderr == b"" and proc.returncode == 0
    assert json.loads(proc.stdout)["items"][0]["excerpt"].startswith("memory 7 ")
    assert dump(path) == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM zkr_search_queue").fetchone()[0] == 40


def test_a_wal_file_in_a_directory_that_takes_no_new_file_says_why(tmp_path: Path) -> None:
    """A WAL-mode file can only be read where SQLite may create ``PATH-shm`` beside it. A
    search there failed with SQLite's bare ``unable to open database file`` (root) or ``attempt
    to write a readonly database`` (another user), which said nothing of the directory. The
    directory is made immutable (``chattr +i``: even root cannot create a file in it)."""
    folder = tmp_path / "sealed"
    folder.mkdir()
    path = str(folder / "memory.db")
    remember_request = {**REQUEST, "text": "Sam works at Acme"}
    assert cli(path, "remember", remember_request).code == 0  # zkr switched it to WAL
    Path(path + "-shm").unlink(missing_ok=True)
    Path(path + "-wal").unlink(missing_ok=True)
    sealed = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    if sealed.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {sealed.stderr.decode().strip()}")
    try:
        result = cli(path, "search", {"tenant_id": "t1", "person_id": "p1", "query": "Acme"})
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert result.code == 1
    assert result.error().endswith(
        f" ({path} is in WAL mode: SQLite must create {path}-shm beside it even to read it, "
        "so its directory must be writable)"
    )


def test_a_device_fifo_or_socket_is_refused_before_sqlite_writes_beside_it(
    tmp_path: Path,
) -> None:
    """``--db /dev/null`` (or ``/dev/zero``) was read by SQLite as an empty database: zkr wrote
    the schema into it, failed with a bare ``disk I/O error`` and left a hot ``/dev/null-journal``
    in ``/dev`` (newcomer finding). A FIFO failed the same way."""
    import os
    import socket

    fifo = tmp_path / "pipe.db"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.db"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    targets = [str(fifo), str(sock_path), f"file:{fifo}?mode=rw", "/dev/null"]
    stray = "/dev/null-journal"
    had_stray = os.path.exists(stray)
    try:
        for target in targets:
            request = {**REQUEST, "text": "x"}
            message = cli(target, "remember", request).error()
            assert message == f"unable to open database file: {target} is not a regular file"
            with pytest.raises(StorageError, match="is not a regular file"):
                MemoryDb.open(target)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.db", "sock.db"]
        assert os.path.exists(stray) == had_stray
    finally:
        sock.close()
        if not had_stray and os.path.exists(stray):
            os.remove(stray)  # left by the code before the fix
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "real.db")  # a dangling link to a regular file still works
    assert cli(str(link), "remember", {**REQUEST, "text": "x"}).code == 0
