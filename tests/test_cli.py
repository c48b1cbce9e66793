"""The CLI contract: grammar, framing, stdin limit, errors (spec/cli.md §1-9)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import cli

COMMANDS = [
    "remember",
    "locator",
    "search",
    "get",
    "correct",
    "promote",
    "archive",
    "link",
    "delete",
    "repair",
    "profile",
    "profiles",
    "review",
    "reviews",
    "projections",
    "embed",
    "export",
    "apply",
    "help",
]

SEARCH_REQUEST = {"tenant_id": "t", "person_id": "p", "query": "x"}
REMEMBER = {
    "tenant_id": "t1",
    "person_id": "p1",
    "kind": "conversation",
    "text": "Sam works at Acme",
    "captured_at": 10,
    "recorded_at": 10,
    "claim": {
        "subject": "Sam",
        "predicate": "employer",
        "value": "Acme",
        "kind": "fact",
        "valid_from": 10,
    },
}


@pytest.mark.parametrize("argv", [[], ["help"], ["--help"], ["-h"]])
def test_help_forms(argv: list[str]) -> None:
    result = cli(None, argv=argv)
    assert result.code == 0 and result.stderr == ""
    assert result.stdout.startswith("zkr --db PATH COMMAND\n")
    for name in COMMANDS:
        assert f"  {name}" in result.stdout


def test_db_help_does_not_create_the_file(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    result = cli(None, argv=["--db", str(path), "help"])
    assert result.code == 0 and "export" in result.stdout and "get" in result.stdout
    assert not path.exists()


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["serve", "--db", "{path}", "--help"], "usage: zkr serve --db PATH"),
        (["import", "--db", "{path}", "--tenant", "t", "-h"], "zkr import: "),
    ],
)
def test_help_among_a_mode_s_options_prints_its_help(
    tmp_path: Path, argv: list[str], start: str
) -> None:
    path = tmp_path / "never.db"
    result = cli(None, argv=[a.format(path=path) for a in argv])
    assert result.code == 0 and result.stderr == "" and result.stdout.startswith(start)
    assert not path.exists()


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_a_command_s_own_help_flag_prints_its_help(tmp_path: Path, flag: str) -> None:
    path = tmp_path / "never.db"
    expected = cli(None, argv=["help", "search"]).stdout
    assert expected.startswith("zkr --db PATH search:")
    for argv in (["search", flag], ["--db", str(path), "search", flag]):
        result = cli(None, argv=argv)
        assert (result.code, result.stdout, result.stderr) == (0, expected, ""), argv
    assert not path.exists()
    unknown = cli(None, argv=["--db", str(path), "nosuch", flag])
    assert unknown.code == 1 and "unknown command" in unknown.stderr and not path.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["help", "x", "y"],
        ["--help", "extra"],
        ["--db", "x.db"],
        ["remember"],
        ["--db=x", "remember"],
        ["x", "--db", "y"],
        ["--db", "a", "b", "c"],
    ],
)
def test_usage_errors(argv: list[str], tmp_path: Path) -> None:
    result = cli(None, argv=argv)
    assert result.error() == "usage: zkr --db PATH COMMAND (use --help)"


def test_unknown_command_never_touches_the_file(db_path: str) -> None:
    """The command is checked before PATH is opened (issue 18, fault 4; the reference opens
    first, docs/decisions-core.md)."""
    result = cli(None, argv=["--db", db_path, "frobnicate"])
    assert result.error() == 'unknown command "frobnicate"'
    assert not os.path.exists(db_path)
    quoted = cli(None, argv=["--db", db_path, '--he"lp'])
    assert quoted.error() == 'unknown command "--he\\"lp"'
    assert json.loads(quoted.stderr) == {"error": 'unknown command "--he\\"lp"'}


def test_db_path_flags_after_db_are_unknown_commands(db_path: str) -> None:
    assert cli(None, argv=["--db", db_path, "--help"]).error() == 'unknown command "--help"'


VANISHING = ["", ":memory:", "file::memory:", "file:", "file:?cache=shared", "file:x?mode=memory"]


@pytest.mark.parametrize("path", VANISHING)
def test_a_database_that_vanishes_at_exit_is_refused(path: str, tmp_path: Path) -> None:
    """SQLite would accept these (``file:`` URIs too: zkr.store.db opens them as URIs) and drop
    every write when the process ends: remember would print ids for memories never kept. The
    error names the value; nothing is created."""
    result = cli(path, "remember", REMEMBER)
    assert result.code == 1 and result.stdout == ""
    assert result.error() == (
        f"--db {json.dumps(path)} is a database that vanishes when this process ends;"
        " give a file path or a postgresql:// URL"
    )


BLANK = [" ", "\t", " \n ", "file:%20", "file:%20%09?mode=rwc"]


@pytest.mark.parametrize("path", BLANK)
def test_a_blank_db_path_is_refused(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--db ' '`` (only whitespace, or a ``file:`` URI naming only whitespace) is a slip:
    SQLite would create a file named by invisible characters in the working directory. The
    error names the value; nothing is created."""
    monkeypatch.chdir(tmp_path)
    result = cli(path, "remember", REMEMBER)
    assert result.code == 1 and result.stdout == ""
    assert result.error() == (
        f"--db {json.dumps(path)} is blank; give a file path or a postgresql:// URL"
    )
    assert list(tmp_path.iterdir()) == []
    # the command is still checked first: `--db PATH --help` stays an unknown command
    assert cli(path, "--help").error() == 'unknown command "--help"'


def test_a_file_uri_naming_a_file_keeps_what_it_stores(tmp_path: Path) -> None:
    path = tmp_path / "kept.db"
    assert cli(f"file:{path}?mode=rwc", "remember", REMEMBER).json()["source_id"]
    found = cli(str(path), "search", {"tenant_id": "t1", "person_id": "p1", "query": "Acme"})
    assert found.json()["items"]


def test_missing_parent_directory(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "dir.db"
    message = cli(str(path), "search", SEARCH_REQUEST).error()
    assert message == f"unable to open database file: {path}"


def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite at all" * 100)
    assert cli(str(path), "search", SEARCH_REQUEST).error() == "file is not a database"


def test_stdin_limit_boundary(db_path: str) -> None:
    body = json.dumps(REMEMBER).encode()
    exact = body + b" " * (1_048_576 - len(body))
    assert cli(db_path, "remember", stdin=exact).json()["claim_id"]
    over = exact + b" "
    assert cli(db_path, "remember", stdin=over).error() == "request exceeds 1048576 bytes"


def test_oversized_text_fails_before_parsing(db_path: str) -> None:
    request = dict(REMEMBER, text="x" * 1_048_576)
    assert "request exceeds 1048576 bytes" in cli(db_path, "remember", request).error()


@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b"{bad json",
        b'{"a":1} trailing',
        b"\xef\xbb\xbf{}",
        b'{"x": NaN}',
        b"[]",
        b"null",
        b'"string"',
        b"\xff\xfe",
    ],
)
def test_malformed_requests_are_clean_errors(db_path: str, stdin: bytes) -> None:
    message = cli(db_path, "search", stdin=stdin).error()
    assert "Traceback" not in message


def test_output_is_sorted_compact_with_one_newline(db_path: str) -> None:
    result = cli(db_path, "remember", REMEMBER)
    assert result.code == 0 and result.stderr == ""
    assert result.stdout.startswith('{"claim_id":"') and result.stdout.endswith('"}\n')
    search = cli(db_path, "search", {"tenant_id": "t1", "person_id": "p1", "query": "Acme"})
    line = search.stdout
    assert (
        line
        == json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        + "\n"
    )


def test_blank_scope_messages(db_path: str) -> None:
    assert (
        cli(db_path, "search", {"tenant_id": " \t", "person_id": "p", "query": "q"}).error()
        == "tenant_id must not be empty"
    )
    assert (
        cli(db_path, "search", {"tenant_id": "t", "person_id": "\u3000", "query": "q"}).error()
        == "person_id must not be empty"
    )
    # U+001F is not White_Space: the reference treats it as content.
    result = cli(db_path, "search", {"tenant_id": "\x1f", "person_id": "p", "query": "q"})
    assert result.json()["gaps"] == ["no cited memory matched"]


def test_reference_cli_scenarios_2_3_and_5(db_path: str) -> None:
    """spec/cli.md §9 items 2, 3, 5 (item 5's delete is in the lifecycle tests)."""
    stored = cli(db_path, "remember", REMEMBER).json()
    pack = cli(
        db_path, "search", {"tenant_id": "t1", "person_id": "p1", "query": "Acme", "limit": 1}
    ).json()
    assert pack["items"][0]["evidence_ids"] == [stored["evidence_id"]]
    item = cli(
        db_path, "get", {"tenant_id": "t1", "person_id": "p1", "target": pack["items"][0]["memory"]}
    ).json()
    assert item["excerpt"] == "Sam employer Acme" and item["relevance_basis_points"] == 10000
    screen = cli(
        db_path,
        "remember",
        {**REMEMBER, "kind": "screen", "claim": None, "text": "Roadmap review is Thursday"},
    ).json()
    pack = cli(
        db_path, "search", {"tenant_id": "t1", "person_id": "p1", "query": "Thursday"}
    ).json()
    assert pack["items"][0]["memory"] == {"id": screen["source_id"], "kind": "source"}
    assert pack["items"][0]["evidence_ids"] == [screen["evidence_id"]]
    keyed = {**REMEMBER, "ingestion_key": "turn-1"}
    first = cli(db_path, "remember", keyed).stdout
    assert cli(db_path, "remember", keyed).stdout == first
    assert (
        "ingestion_key conflicts" in cli(db_path, "remember", {**keyed, "text": "changed"}).error()
    )


def test_audio_locator_roundtrip(db_path: str) -> None:
    """spec/cli.md §9 item 7."""
    request = {
        **REMEMBER,
        "kind": "audio",
        "claim": None,
        "ingestion_key": "audio-1",
        "locator": {
            "device_id": "omi-1",
            "provider": "deepgram",
            "stream_id": "s",
            "segment_id": "g",
            "start_ms": 1200,
            "end_ms": 2900,
        },
    }
    first = cli(db_path, "remember", request).json()
    assert cli(db_path, "remember", request).json() == first
    loc = cli(
        db_path,
        "locator",
        {"tenant_id": "t1", "person_id": "p1", "evidence_id": first["evidence_id"]},
    ).json()
    assert loc == {
        "device_id": "omi-1",
        "end_ms": 2900,
        "provider": "deepgram",
        "segment_id": "g",
        "start_ms": 1200,
        "stream_id": "s",
    }
    assert (
        cli(
            db_path, "locator", {"tenant_id": "t1", "person_id": "p1", "evidence_id": "nope"}
        ).stdout
        == "null\n"
    )


def test_newer_schema_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE x (y)")
    conn.execute("PRAGMA user_version = 11")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    message = cli(str(path), "search", SEARCH_REQUEST).error()
    assert message == "database schema version 11 is newer than supported version 10"
    assert path.read_bytes() == before
    assert not os.path.exists(str(path) + "-wal")


def test_hostile_inputs_get_contract_errors(db_path: str) -> None:
    huge = b'{"tenant_id":"t","person_id":"p","query":"x","limit":1' + b"0" * 5000 + b"}"
    assert cli(db_path, "search", stdin=huge).error() == "number out of range"
    bad_name = cli(None, argv=["--db", db_path, "se\udcffarch"])
    assert bad_name.error() == 'unknown command "se\\u{dcff}arch"'
    assert "at at" not in cli(db_path, "search", stdin=b'{"a":"x\ty"}').error()


def test_closed_stdin_is_an_empty_request(db_path: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "zkr", "--db", db_path, "search"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 1
    assert json.loads(proc.stderr) == {"error": "EOF while parsing a value at line 1 column 0"}


SEARCH = b'{"tenant_id":"t","person_id":"p","query":"x"}'


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_on_stdout_is_one_clear_error(db_path: str) -> None:
    import subprocess
    import sys

    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "zkr", "--db", db_path, "search"],
            input=SEARCH,
            stdout=full,
            stderr=subprocess.PIPE,
            check=False,
        )
    assert proc.returncode == 1
    assert proc.stderr.decode().splitlines() == [
        '{"error":"cannot write the response to stdout: No space left on device"}'
    ]


def test_a_reader_that_went_away_is_one_clear_error(db_path: str) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "zkr", "--db", db_path, "search"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before zkr answers
    _, err = proc.communicate(SEARCH, timeout=120)
    assert proc.returncode == 1
    assert err.decode().splitlines() == [
        '{"error":"cannot write the response to stdout: Broken pipe"}'
    ]


@pytest.mark.parametrize("unbuffered", ["0", "1"])
def test_a_large_answer_cut_short_by_its_reader_is_an_error(db_path: str, unbuffered: str) -> None:
    """With PYTHONUNBUFFERED=1 a short write would be dropped silently; zkr writes every byte
    or reports the broken pipe."""
    import subprocess
    import sys

    from tests.conftest import remember
    from zkr import MemoryDb

    with MemoryDb.open(db_path) as db:
        for i in range(120):
            remember(db, f"note {i} about the garden " + "x" * 4000, t="t", p="p")
    env = dict(os.environ, PYTHONUNBUFFERED=unbuffered)
    proc = subprocess.Popen(
        [sys.executable, "-m", "zkr", "--db", db_path, "search"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(b'{"tenant_id":"t","person_id":"p","query":"garden","limit":100}')
    proc.stdin.close()
    assert proc.stdout.read(1) == b"{"
    proc.stdout.close()
    assert proc.wait(timeout=120) == 1
    assert proc.stderr.read().decode().splitlines() == [
        '{"error":"cannot write the response to stdout: Broken pipe"}'
    ]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_help_to_a_full_disk_is_one_clear_error() -> None:
    import subprocess
    import sys

    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "zkr", "--help"], stdout=full, stderr=subprocess.PIPE
        )
    assert proc.returncode == 1
    assert proc.stderr.decode().splitlines() == [
        '{"error":"cannot write the response to stdout: No space left on device"}'
    ]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["import", "--help"], ["serve", "--help"]])
def test_mode_help_to_a_full_disk_is_one_clear_error(argv: list[str]) -> None:
    """``zkr import --help`` and ``zkr serve --help`` write through the same rule as every
    answer (zkr.output): no ``internal error``."""
    import subprocess
    import sys

    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "zkr", *argv], stdout=full, stderr=subprocess.PIPE
        )
    assert proc.returncode == 1
    assert proc.stderr.decode().splitlines() == [
        '{"error":"cannot write the response to stdout: No space left on device"}'
    ]
