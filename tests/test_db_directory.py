"""The directory of ``--db`` (zkr.dbpath.prepare_own): zkr's own commands (``serve``, ``mcp``,
``import``) create it when it is missing, as they create the file; the one-shot CLI commands keep
the reference's ``unable to open database file: PATH`` (tests/test_cli.py)."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli

REQUEST = {"tenant_id": "t", "person_id": "p", "kind": "conversation", "text": "Tea at noon"}
SERVE_LINE = {
    "id": 1,
    "command": "remember",
    "request": {**REQUEST, "captured_at": 5, "recorded_at": 5},
}


def _schema_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_serve_creates_the_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "home" / ".zkr" / "memory.db"
    line = json.dumps(SERVE_LINE).encode() + b"\n"
    result = cli(None, argv=["serve", "--db", str(path)], stdin=line)
    assert result.code == 0, result.stderr
    assert "source_id" in json.loads(result.stdout)["ok"]
    assert _schema_version(path) == 10
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700  # private: it holds memories
    assert (tmp_path / "home").is_dir()


def test_import_creates_the_missing_directory_once_the_file_was_read(tmp_path: Path) -> None:
    turns = tmp_path / "turns.jsonl"
    turns.write_text(json.dumps({"text": "I like tea", "created_at": 5}) + "\n", "utf-8")
    path = tmp_path / "data" / "memory.db"
    argv = ["import", "--db", str(path), "--tenant", "t", "--person", "p"]
    refused = cli(None, argv=[*argv, str(tmp_path / "missing.jsonl")])
    assert refused.code == 1 and not (tmp_path / "data").exists()  # a bad file makes nothing
    result = cli(None, argv=[*argv, str(turns)])
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["stored"] == 1
    assert _schema_version(path) == 10


def test_mcp_creates_the_missing_directory(tmp_path: Path) -> None:
    """Claude Desktop's configuration in the README: ``zkr mcp --db ~/.zkr/memory.db``."""
    pytest.importorskip("mcp", reason="the MCP SDK is the optional extra zkr[mcp]")
    path = tmp_path / ".zkr" / "memory.db"
    proc = subprocess.run(
        [sys.executable, "-m", "zkr", "mcp", "--db", str(path), "--tenant", "t", "--person", "p"],
        input=b"",  # the client hangs up at once: the server opened the file and ends
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert _schema_version(path) == 10


def test_a_directory_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "notes"
    blocker.write_text("a file where the directory would go")
    path = blocker / "memory.db"
    result = cli(None, argv=["serve", "--db", str(path)])
    assert (
        result.error() == f"cannot open {path}: cannot create its directory {blocker} (File exists)"
    )
    deeper = blocker / "sub" / "memory.db"
    result = cli(None, argv=["serve", "--db", str(deeper)])
    assert result.error() == (
        f"cannot open {deeper}: cannot create its directory {deeper.parent} (Not a directory)"
    )


def test_uris_that_may_not_create_the_file_create_no_directory(tmp_path: Path) -> None:
    missing = tmp_path / "archive"
    for uri in (f"file:{missing}/m.db?mode=ro", f"file:{missing}/m.db?mode=rw"):
        result = cli(None, argv=["serve", "--db", uri])
        assert result.error().startswith("unable to open database file")
        assert not missing.exists()
    result = cli(None, argv=["serve", "--db", f"file:{missing}/m.db?mode=rwc"], stdin=b"")
    assert result.code == 0 and (missing / "m.db").is_file()


def test_one_shot_commands_keep_the_reference_error(tmp_path: Path) -> None:
    path = tmp_path / "absent" / "memory.db"
    message = cli(str(path), "remember", {**REQUEST, "captured_at": 5, "recorded_at": 5}).error()
    assert message == f"unable to open database file: {path}"
    assert not path.parent.exists()


def test_an_unexpanded_tilde_is_no_directory_to_make(tmp_path: Path) -> None:
    """A host's JSON config passes ``~/.zkr/memory.db`` as it is (no shell): a directory
    literally named ``~`` in the working directory is never what was meant."""
    proc = subprocess.run(
        [sys.executable, "-m", "zkr", "serve", "--db", "~/.zkr-test-nowhere/memory.db"],
        input=b"",
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    home = Path("~/.zkr-test-nowhere/memory.db").expanduser()
    assert proc.returncode == 1
    assert json.loads(proc.stderr) == {
        "error": "cannot open ~/.zkr-test-nowhere/memory.db: its directory ~/.zkr-test-nowhere"
        f" does not exist and ~ is not expanded here (no shell read it); give the full path: {home}"
    }
    assert list(tmp_path.iterdir()) == [] and not home.parent.exists()
