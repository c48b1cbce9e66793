"""WAL side files left read-only (zkr.store.db: ``_writable_side_files``, ``readonly_hint``).

SQLite gives ``PATH-shm``/``PATH-wal`` the database file's mode, so a search of a ``chmod 444``
file left them read-only and, once the file was writable again, every write failed with a bare
``attempt to write a readonly database`` until the user deleted ``PATH-shm`` by hand (newcomer
finding). Root ignores permissions: the CLI runs as ``nobody`` (``setpriv``), in a directory
of its own under ``/tmp`` (pytest's are private to root).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
SEARCH = {"tenant_id": "t", "person_id": "p", "query": "plans"}


def _remember(text: str) -> dict[str, object]:
    return {
        "tenant_id": "t",
        "person_id": "p",
        "kind": "conversation",
        "text": text,
        "captured_at": 5,
        "recorded_at": 5,
    }


@pytest.fixture
def folder() -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run zkr as another user")
    path = Path(tempfile.mkdtemp(prefix="zkr-side-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def as_nobody(db: Path, command: str, request: object) -> tuple[int, str, str]:
    """``zkr --db DB COMMAND`` as the user ``nobody``: (status, stdout, stderr)."""
    proc = subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "zkr", "--db", str(db), command],
        input=json.dumps(request).encode(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def _search_while_read_only(db: Path) -> None:
    """As ``nobody``: store a turn, ``chmod 444`` the file, search it, ``chmod 644`` it."""
    assert as_nobody(db, "remember", _remember("I prefer short plans."))[0] == 0
    db.chmod(0o444)
    status, out, _ = as_nobody(db, "search", SEARCH)
    assert status == 0 and json.loads(out)["items"]
    db.chmod(0o644)


def test_a_search_of_a_read_only_file_leaves_writable_side_files(folder: Path) -> None:
    db = folder / "memory.db"
    _search_while_read_only(db)
    for side in ("memory.db-shm", "memory.db-wal"):
        mode = (folder / side).stat().st_mode
        assert mode & stat.S_IWUSR, f"{side} is {stat.filemode(mode)}"
    status, _, err = as_nobody(db, "remember", _remember("I prefer long plans."))
    assert (status, err) == (0, "")


def test_side_files_left_read_only_before_are_made_writable(folder: Path) -> None:
    """As an older zkr (or the sqlite3 shell) left them: the next open repairs them."""
    db = folder / "memory.db"
    _search_while_read_only(db)
    for side in ("memory.db-shm", "memory.db-wal"):
        (folder / side).chmod(0o444)
    status, _, err = as_nobody(db, "remember", _remember("I prefer long plans."))
    assert (status, err) == (0, "")


def test_a_side_file_of_another_user_is_named(folder: Path) -> None:
    db = folder / "memory.db"
    _search_while_read_only(db)
    shm = folder / "memory.db-shm"
    os.chown(shm, 0, 0)  # root's: nobody may not change its mode
    shm.chmod(0o444)
    status, _, err = as_nobody(db, "remember", _remember("I prefer long plans."))
    assert status == 1
    assert json.loads(err) == {
        "error": f"attempt to write a readonly database ({shm} is not writable by this user:"
        f" make it writable as its owner (chmod u+w {shm}) or, while no process has {db}"
        " open, delete it)"
    }
    shm.unlink()  # what the message says: then the write goes through
    assert as_nobody(db, "remember", _remember("I prefer long plans."))[0] == 0


def test_a_read_only_file_keeps_the_reference_text(folder: Path) -> None:
    db = folder / "memory.db"
    _search_while_read_only(db)
    db.chmod(0o444)
    status, _, err = as_nobody(db, "remember", _remember("I prefer long plans."))
    assert status == 1
    assert json.loads(err) == {"error": "attempt to write a readonly database"}
