"""What zkr refuses before it touches a file, and how much of the input it echoes back.

Issue 18, fault 4: a mistyped ``--db`` pointing at another application's SQLite file must leave
it byte-identical, and a request that fails to decode or validate never creates or migrates a
file. Fault 5: a message never echoes more than a bounded part of the input.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import SHARED, cli
from zkr import InvalidInput, MemoryDb, RequestError, StorageError
from zkr.errors import ECHO_LIMIT
from zkr.model import EmbedPendingRequest

SEARCH = {"tenant_id": "t1", "person_id": "p1", "query": "hello"}
REMEMBER = {
    "tenant_id": "t1",
    "person_id": "p1",
    "kind": "conversation",
    "text": "hello",
    "captured_at": 10,
    "recorded_at": 10,
}
CLAIM = {
    "subject": "Sam",
    "predicate": "employer",
    "value": "Acme",
    "kind": "fact",
    "valid_from": 10,
    "processing_state": "pending",  # legal with tier short_term only
    "tier": "short_term",
}


def _other_app(path: Path, *, wal: bool = False) -> bytes:
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, account INTEGER)")
    conn.execute("INSERT INTO accounts (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("wal", [False, True])
def test_another_applications_file_is_refused_and_left_byte_identical(
    tmp_path: Path, wal: bool
) -> None:
    path = tmp_path / "other-app.db"
    before = _other_app(path, wal=wal)
    expected = "not a zkr database: it holds tables zkr never creates (accounts, orders)"
    assert cli(str(path), "search", SEARCH).error() == expected
    assert cli(str(path), "remember", REMEMBER).error() == expected
    assert cli(str(path), "no-such-command", SEARCH).error() == 'unknown command "no-such-command"'
    assert cli(str(path), "search", {"query": "x"}).error() == "missing field `tenant_id`"
    assert path.read_bytes() == before
    assert not os.path.exists(f"{path}-journal")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == ("wal" if wal else "delete")
    with pytest.raises(InvalidInput, match=r"^not a zkr database: "):
        MemoryDb.open(path)
    assert path.read_bytes() == before


@pytest.mark.shared
def test_an_unversioned_zkr_file_with_an_extra_table_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    shutil.copyfile(SHARED / "fixtures/migrations/db/v0_legacy_claims_only.db", path)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    message = cli(str(path), "reviews", {"tenant_id": "t1", "person_id": "p1"}).error()
    assert message == "not a zkr database: it holds tables zkr never creates (notes)"
    assert path.read_bytes() == before


@pytest.mark.shared
def test_real_unversioned_zkr_files_still_upgrade(tmp_path: Path) -> None:
    for name in ("v0_legacy_claims_only", "v0_partial_legacy", "v0_empty_file"):
        path = tmp_path / f"{name}.db"
        shutil.copyfile(SHARED / f"fixtures/migrations/db/{name}.db", path)
        assert cli(str(path), "reviews", {"tenant_id": "t1", "person_id": "p1"}).json() == []
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == 10


@pytest.mark.parametrize(
    ("command", "stdin"),
    [
        ("nope", b"{}"),
        ("search", b"{not json"),
        ("search", b'{"tenant_id": "t1", "person_id": "p1"}'),
        ("search", b'{"tenant_id": " ", "person_id": "p1", "query": "x"}'),
        ("remember", json.dumps({**REMEMBER, "text": "   "}).encode()),
        ("remember", json.dumps({**REMEMBER, "captured_at": 1.5}).encode()),
        ("search", b" " * (1_048_577)),
        # a claim that fails its checks, without an ingestion key (no replay can skip them):
        # the file was created and migrated before the claim was looked at
        ("remember", json.dumps({**REMEMBER, "claim": {**CLAIM, "subject": " "}}).encode()),
        ("remember", json.dumps({**REMEMBER, "claim": {**CLAIM, "tier": "archive"}}).encode()),
    ],
)
def test_a_failing_request_never_creates_the_file(
    tmp_path: Path, command: str, stdin: bytes
) -> None:
    path = tmp_path / "typo.db"
    cli(str(path), command, stdin=stdin).error()
    assert not path.exists()


@pytest.mark.shared
def test_a_failing_request_leaves_an_old_file_unmigrated(tmp_path: Path) -> None:
    path = tmp_path / "v0.db"
    shutil.copyfile(SHARED / "fixtures/migrations/db/v0_legacy_claims_only.db", path)
    before = path.read_bytes()
    cli(str(path), "search", {"tenant_id": "t1"}).error()
    assert path.read_bytes() == before


# --------------------------------------------------------------------------- fault 5


def test_a_huge_echoed_id_gives_a_short_error_line(tmp_path: Path) -> None:
    path = str(tmp_path / "memory.db")
    review = {
        "tenant_id": "t1",
        "person_id": "p1",
        "day": "2024-01-01",
        "summary": "a day",
        "evidence_ids": ["e" * 1_000_000],
        "recorded_at": 10,
    }
    result = cli(path, "review", review)
    message = result.error()
    assert len(result.stderr) < 1_000
    assert len(message) == 2 * ECHO_LIMIT + 1
    assert "e…e" in message and message.startswith("evidence eeee")


@pytest.mark.parametrize(
    ("command", "request_"),
    [
        ("search", {"tenant_id": "t1", "person_id": "p1", "query": "x", "limit": "9" * 900_000}),
        ("remember", {**REMEMBER, "kind": "k" * 900_000}),
        ("get", {"tenant_id": "t1", "person_id": "p1", "target": {"kind": "x" * 900_000}}),
    ],
)
def test_every_echo_is_bounded(tmp_path: Path, command: str, request_: object) -> None:
    result = cli(str(tmp_path / "memory.db"), command, request_)
    assert len(result.error()) <= 2 * ECHO_LIMIT + 1


def test_an_unknown_command_name_is_bounded(tmp_path: Path) -> None:
    message = cli(str(tmp_path / "m.db"), "x" * 100_000, {}).error()
    assert message.startswith('unknown command "xxx') and message.endswith('xxx"')
    assert len(message) == 2 * ECHO_LIMIT + 1


def test_library_messages_are_bounded_too() -> None:
    error = RequestError("unknown variant `" + "v" * 10_000 + "`, expected one of `a`, `b`")
    assert str(error).endswith("vvv`, expected one of `a`, `b`")
    assert len(str(error)) == 2 * ECHO_LIMIT + 1


# --------------------------------------------------------------------------- newcomer findings


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            None,
            "path must be a file path (str or os.PathLike) or a postgresql:// URL, not NoneType",
        ),
        (5, "path must be a file path (str or os.PathLike) or a postgresql:// URL, not int"),
        ("memory\x00.db", "path must not contain a NUL character"),
        ("memory\ud800.db", "path is not a valid file name: surrogates not allowed"),
    ],
)
def test_a_path_that_is_no_file_name_is_a_request_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: object, message: str
) -> None:
    """``MemoryDb.open(None)`` raised a bare ``TypeError`` (newcomer finding)."""
    monkeypatch.chdir(tmp_path)
    for entry in (MemoryDb.open, MemoryDb.deferred):
        with pytest.raises(RequestError) as raised:
            entry(path)  # type: ignore[arg-type]
        assert raised.value.message == message
    assert os.listdir(tmp_path) == []
    with MemoryDb.open(os.fsencode(tmp_path / "bytes.db")) as db:  # type: ignore[arg-type]
        assert db.path == str(tmp_path / "bytes.db")


def test_remember_many_of_no_iterable_is_a_request_error(tmp_path: Path) -> None:
    with MemoryDb.open(tmp_path / "memory.db") as db:
        for outcomes in (False, True):
            with pytest.raises(RequestError, match="expected an iterable of requests"):
                db.remember_many(None, outcomes=outcomes)  # type: ignore[call-overload]


@pytest.mark.parametrize("blank", ["", "  ", "\t\n", "\u3000"])
def test_a_blank_embed_model_is_refused_not_the_default(tmp_path: Path, blank: str) -> None:
    """``embed-pending`` with ``"model": "  "`` silently used the default model (newcomer
    finding): a blank name is a mistake, named by its field, before the file is opened."""
    path = tmp_path / "memory.db"
    assert cli(str(path), "embed-pending", {"model": blank}).error() == "model must not be empty"
    assert not path.exists()
    with MemoryDb.deferred(path) as db, pytest.raises(InvalidInput, match=r"^model must not"):
        db.embed_pending(EmbedPendingRequest(model=blank))
    assert not path.exists()


def test_embed_pending_checks_its_request_like_every_command(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with MemoryDb.deferred(path) as db:
        with pytest.raises(RequestError, match=r"expected a zkr\.model request"):
            db.embed_pending(None)  # type: ignore[arg-type]
        with pytest.raises(RequestError, match=r"^field `batch`: invalid type"):
            db.embed_pending(EmbedPendingRequest(batch="5"))  # type: ignore[arg-type]
        with pytest.raises(RequestError, match=r"^field `model`: invalid type"):
            db.embed_pending(EmbedPendingRequest(model=5))  # type: ignore[arg-type]
    assert not path.exists()


def test_a_path_that_is_not_utf8_is_echoed_not_an_internal_error(tmp_path: Path) -> None:
    """A path's bytes that are not UTF-8 (``\\udcfe`` after Python's ``surrogateescape``) made
    every message echoing it ``internal error: UnicodeEncodeError`` (found hunting the newcomer
    findings' class): they are shown as U+FFFD, and such a path still opens."""
    missing = str(tmp_path / "nowhere" / "memory\udcfe.db")
    shown = missing.replace("\udcfe", "\ufffd")
    message = cli(missing, "reviews", {"tenant_id": "t1", "person_id": "p1"}).error()
    assert message == f"unable to open database file: {shown}"
    blocker = tmp_path / "nowhere"  # serve would create the missing directory
    blocker.write_text("")
    assert cli(None, argv=["serve", "--db", missing]).error() == (
        f"cannot open {shown}: cannot create its directory {blocker} (File exists)"
    )
    blocker.unlink()
    argv = ["import", "--db", missing, "--tenant", "t", "--person", "p", missing]
    assert cli(None, argv=argv).error() == f"cannot read {shown}: No such file or directory"
    with pytest.raises(StorageError) as raised:
        MemoryDb.open(missing)
    assert raised.value.message == message
    odd = str(tmp_path / "memory\udcfe.db")  # a legal file name all the same
    assert cli(odd, "reviews", {"tenant_id": "t1", "person_id": "p1"}).json() == []
    assert os.listdir(tmp_path) == [os.fsdecode(b"memory\xfe.db")]


def test_import_refuses_a_scope_that_is_not_utf8(tmp_path: Path) -> None:
    """``zkr import --person $'\\xff'`` failed every turn alone; now one error, nothing opened."""
    path = tmp_path / "memory.db"
    turns = tmp_path / "turns.jsonl"
    turns.write_text('{"text": "hello", "created_at": 5}\n', encoding="utf-8")
    argv = ["import", "--db", str(path), "--tenant", "t", "--person", "p\udcff", str(turns)]
    assert cli(None, argv=argv).error() == "--person must be UTF-8 text"
    assert not path.exists()
