"""Driver failures reach callers as ``StorageError`` with SQLite's own words (issue 18, faults 1-2).

A full disk is real: the CLI or a Python child runs with ``RLIMIT_FSIZE`` (what ``ulimit -f``
sets), so SQLite's writes past the limit fail with ``EFBIG``. A corrupted file is a copy whose
bytes were overwritten. Nothing is mocked.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import cli, dump
from zkr import MemoryDb, StorageError

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
