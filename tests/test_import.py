"""``zkr import`` (issue 15 item 7): ChatGPT, Claude and JSONL exports written here in their
real shapes, imported through the real CLI, twice, into real files."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, dump
from zkr import MemoryDb
from zkr.importer import chatgpt_turns, claude_turns, jsonl_turns

T, P = "me", "alex"


def chatgpt_export() -> list[dict[str, Any]]:
    """Two conversations as ``conversations.json`` of a ChatGPT data export: a system root, a
    user/assistant thread, one edited-away branch, a tool message and a non-text part."""

    def node(
        node_id: str,
        parent: str | None,
        children: list[str],
        role: str | None,
        parts: list[Any] | None,
        at: float | None,
    ) -> dict[str, Any]:
        message = (
            None
            if role is None
            else {
                "id": node_id,
                "author": {"role": role, "name": None, "metadata": {}},
                "create_time": at,
                "update_time": None,
                "content": {"content_type": "text", "parts": parts},
                "status": "finished_successfully",
                "end_turn": True,
                "weight": 1.0,
                "metadata": {},
                "recipient": "all",
            }
        )
        return {"id": node_id, "message": message, "parent": parent, "children": children}

    first = {
        "title": "Moving plans",
        "create_time": 1714000000.123,
        "update_time": 1714000500.5,
        "mapping": {
            "root": node("root", None, ["sys"], None, None, None),
            "sys": node("sys", "root", ["u1"], "system", [""], None),
            "u1": node(
                "u1", "sys", ["a1"], "user", ["I live in Berlin, moving soon."], 1714000001.5
            ),
            "a1": node("a1", "u1", ["u2", "u2-old"], "assistant", ["Where to?"], 1714000002.25),
            "u2-old": node("u2-old", "a1", [], "user", ["Maybe Paris"], 1714000003.0),
            "u2": node(
                "u2", "a1", ["t1"], "user", ["To Lisbon in May.", {"asset": "img"}], 1714000004.0
            ),
            "t1": node("t1", "u2", ["a2"], "tool", ["search results"], 1714000005.0),
            "a2": node("a2", "t1", [], "assistant", ["Lisbon is lovely in May."], 1714000006.0),
        },
        "moderation_results": [],
        "current_node": "a2",
        "plugin_ids": None,
        "conversation_id": "c-1",
        "id": "c-1",
    }
    second = {
        "title": "Tea",
        "create_time": 1714100000.0,
        "update_time": 1714100001.0,
        "mapping": {
            "r": node("r", None, ["x1"], None, None, None),
            "x1": node("x1", "r", [], "user", ["I prefer green tea."], None),
        },
        "current_node": "x1",
        "conversation_id": "c-2",
        "id": "c-2",
    }
    return [first, second]


def claude_export() -> list[dict[str, Any]]:
    """``conversations.json`` of a Claude export (one conversation, content blocks)."""
    return [
        {
            "uuid": "8d3c0f0e-0000-4000-8000-000000000001",
            "name": "Running",
            "created_at": "2024-05-01T09:00:00.000000Z",
            "updated_at": "2024-05-01T09:05:00.000000Z",
            "account": {"uuid": "acc"},
            "chat_messages": [
                {
                    "uuid": "m-1",
                    "text": "I run 5 km every morning.",
                    "content": [{"type": "text", "text": "I run 5 km every morning."}],
                    "sender": "human",
                    "created_at": "2024-05-01T09:00:01.000000Z",
                    "updated_at": "2024-05-01T09:00:01.000000Z",
                    "attachments": [],
                    "files": [],
                },
                {
                    "uuid": "m-2",
                    "text": "",
                    "content": [
                        {"type": "text", "text": "That is a great habit."},
                        {"type": "tool_use", "name": "x", "input": {}},
                    ],
                    "sender": "assistant",
                    "created_at": "2024-05-01T09:00:05+00:00",
                    "updated_at": "2024-05-01T09:00:05+00:00",
                    "attachments": [],
                    "files": [],
                },
            ],
        }
    ]


def jsonl_export() -> str:
    rows = [
        {
            "conversation_id": "s1",
            "id": 1,
            "role": "user",
            "text": "Call mum on Sunday",
            "created_at": 1714200000,
        },
        {
            "conversation_id": "s1",
            "id": 2,
            "role": "assistant",
            "content": "Noted.",
            "timestamp": "2024-04-27T06:40:01Z",
        },
        {"role": "user", "text": "no id here", "created_at": 1714200005},
        {"role": "user", "text": "   ", "created_at": 1714200006},
        {"role": "user", "text": "no time at all"},
    ]
    return "\n".join(json.dumps(r) for r in rows) + "\n\n"


def write(tmp_path: Path) -> dict[str, Path]:
    files = {
        "chatgpt": tmp_path / "chatgpt" / "conversations.json",
        "claude": tmp_path / "claude" / "conversations.json",
        "jsonl": tmp_path / "turns.jsonl",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    files["chatgpt"].write_text(json.dumps(chatgpt_export()), encoding="utf-8")
    files["claude"].write_text(json.dumps(claude_export()), encoding="utf-8")
    files["jsonl"].write_text(jsonl_export(), encoding="utf-8")
    return files


def run_import(db_path: str, file: Path, *extra: str) -> Any:
    argv = ["import", "--db", db_path, "--tenant", T, "--person", P, *extra, str(file)]
    return cli(None, argv=argv)


# --------------------------------------------------------------------------- parsing


def test_chatgpt_thread_follows_current_node() -> None:
    turns = list(chatgpt_turns(chatgpt_export()))
    assert [(t.role, t.text) for t in turns] == [
        ("user", "I live in Berlin, moving soon."),
        ("assistant", "Where to?"),
        ("user", "To Lisbon in May."),
        ("assistant", "Lisbon is lovely in May."),
        ("user", "I prefer green tea."),
    ]
    assert turns[0].key == "chatgpt:c-1:u1" and turns[0].at == 1714000001
    assert turns[-1].at == 1714100000  # no message time: the conversation's


def test_claude_turns_use_text_or_content_blocks() -> None:
    turns = list(claude_turns(claude_export()))
    assert [(t.role, t.text) for t in turns] == [
        ("user", "I run 5 km every morning."),
        ("assistant", "That is a great habit."),
    ]
    assert turns[0].at == 1714554001 and turns[1].at == 1714554005


def test_jsonl_keys_are_stable() -> None:
    first = list(jsonl_turns(jsonl_export().splitlines()))
    again = list(jsonl_turns(jsonl_export().splitlines()))
    assert first == again
    # an integer id is not spelled like the string "1" (the first releases' key is the alias)
    assert (first[0].key, first[0].alias) == ('jsonl["s1",1]', "jsonl:s1:1")
    assert first[1].at == 1714200001
    assert first[2].key.startswith("jsonl:") and len(first[2].key) == 6 + 32


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("fmt", ["chatgpt", "claude", "jsonl"])
def test_import_twice_gives_the_same_database(fmt: str, tmp_path: Path) -> None:
    files = write(tmp_path)
    db_path = str(tmp_path / "memory.db")
    first = run_import(db_path, files[fmt]).json()
    expected = {"chatgpt": 5, "claude": 2, "jsonl": 3}[fmt]
    assert first["format"] == fmt and first["stored"] == expected and first["failed"] == 0
    before = dump(db_path)
    second = run_import(db_path, files[fmt], "--format", fmt).json()
    assert second["stored"] == 0 and second["replayed"] == expected
    assert dump(db_path) == before
    if fmt == "jsonl":
        assert (first["empty"], first["undated"], first["turns"]) == (1, 1, 5)


def test_imported_turns_are_searchable_with_their_times(tmp_path: Path) -> None:
    files = write(tmp_path)
    db_path = str(tmp_path / "memory.db")
    run_import(db_path, files["chatgpt"]).json()
    with MemoryDb.open(db_path) as db:
        hits = db.scope(T, P).search("Lisbon").items
        assert {h.excerpt for h in hits} >= {"user: To Lisbon in May."}
        row = db.conn.execute(
            "SELECT captured_at, recorded_at, ingestion_key FROM sources WHERE content = ?",
            ("user: I live in Berlin, moving soon.",),
        ).fetchone()
        assert row == (1714000001, 1714000001, "chatgpt:c-1:u1")


def test_deleted_turns_are_skipped_and_counted(tmp_path: Path) -> None:
    files = write(tmp_path)
    db_path = str(tmp_path / "memory.db")
    run_import(db_path, files["claude"]).json()
    with MemoryDb.open(db_path) as db:
        sam = db.scope(T, P)
        (hit,) = sam.search("5 km").items
        sam.delete(hit.memory.id, deleted_at=1714554100)
    again = run_import(db_path, files["claude"]).json()
    assert (again["stored"], again["replayed"], again["deleted"]) == (0, 1, 1)
    with MemoryDb.open(db_path) as db:
        assert db.scope(T, P).search("5 km").items == []


def test_import_errors_are_envelopes(tmp_path: Path) -> None:
    db_path = str(tmp_path / "memory.db")
    assert "usage: zkr import" in cli(None, argv=["import", "--db", db_path]).error()
    missing = run_import(db_path, tmp_path / "nope.json", "--format", "claude").error()
    assert missing.startswith("cannot read")
    bad = tmp_path / "bad.json"
    bad.write_text("[{", encoding="utf-8")
    assert "is not valid JSON" in run_import(db_path, bad, "--format", "chatgpt").error()
    odd = tmp_path / "odd.json"
    odd.write_text('[{"x": 1}]', encoding="utf-8")
    assert "cannot tell the file's format" in run_import(db_path, odd).error()
    blank = ["import", "--db", db_path, "--tenant", " ", "--person", P, str(odd)]
    assert cli(None, argv=blank).error() == "tenant_id must not be empty"
    fmt = run_import(db_path, odd, "--format", "csv").error()
    assert fmt == "--format must be one of auto, chatgpt, claude, openai, jsonl"


def test_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    files = write(tmp_path)
    db_path = str(tmp_path / "memory.db")
    argv = [sys.executable, "-m", "zkr", "import", "--db", db_path, "--tenant", T]
    argv += ["--person", P, str(files["chatgpt"])]
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        proc = subprocess.run(argv, stderr=child, stdout=subprocess.PIPE, timeout=120, check=False)
        os.close(child)
        child = -1
        shown = b""
        while True:
            try:
                chunk = os.read(parent, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(parent)
        if child >= 0:
            os.close(child)
    assert proc.returncode == 0
    assert b"5/5" in shown and b"turn" in shown
    assert json.loads(proc.stdout)["stored"] == 5
    # not a terminal: nothing on stderr
    assert run_import(db_path, files["chatgpt"]).stderr == ""


def test_help_lists_import() -> None:
    assert "zkr import --db PATH" in cli(None, argv=["--help"]).stdout
    assert "conversations.json" in cli(None, argv=["import", "--help"]).stdout
    assert "conversations.json" in cli(None, argv=["help", "import"]).stdout
    assert "serve" in cli(None, argv=["help", "serve"]).stdout


# --------------------------------------------------------------------------- bad input


def contents(db_path: str) -> list[tuple[str, int, str]]:
    """Every stored source as (content, captured_at, ingestion_key), in key order."""
    with MemoryDb.open(db_path) as db:
        rows = db.conn.execute(
            "SELECT content, captured_at, ingestion_key FROM sources ORDER BY ingestion_key"
        ).fetchall()
    return [tuple(row) for row in rows]


@pytest.mark.parametrize("case", ["missing", "directory", "binary", "latin-1"])
def test_unreadable_files_are_clear_errors(case: str, tmp_path: Path) -> None:
    db_path = str(tmp_path / "memory.db")
    file = tmp_path / "input"
    if case == "directory":
        file.mkdir()
    elif case == "binary":
        file.write_bytes(bytes(range(256)) * 4)
    elif case == "latin-1":
        file.write_bytes('{"text": "café", "created_at": 5}\n'.encode("latin-1"))
    message = run_import(db_path, file).error()
    expected = {
        "missing": f"cannot read {file}: No such file or directory",
        "directory": f"cannot read {file}: Is a directory",
        "binary": f"{file} is not UTF-8 text (bad byte at offset 128)",
        "latin-1": f"{file} is not UTF-8 text (bad byte at offset 13)",
    }[case]
    assert message == expected
    assert not Path(db_path).exists()  # refused before the database is touched


def test_dash_reads_standard_input(tmp_path: Path) -> None:
    db_path = str(tmp_path / "memory.db")
    argv = ["import", "--db", db_path, "--tenant", T, "--person", P, "-"]
    first = cli(None, argv=argv, stdin=jsonl_export().encode()).json()
    assert (first["format"], first["stored"]) == ("jsonl", 3)
    files = write(tmp_path)
    stdin = files["chatgpt"].read_bytes()
    assert cli(None, argv=argv, stdin=stdin).json()["stored"] == 5
    assert cli(None, argv=argv, stdin=stdin).json()["replayed"] == 5
    empty = cli(None, argv=argv, stdin=b"").json()
    assert (empty["turns"], empty["stored"]) == (0, 0)
    assert cli(None, argv=argv, stdin=b"\xff\xfe").error() == (
        "standard input is not UTF-8 text (bad byte at offset 0)"
    )


def test_bad_jsonl_lines_fail_alone_with_their_line_numbers(tmp_path: Path) -> None:
    db_path = str(tmp_path / "memory.db")
    file = tmp_path / "turns.jsonl"
    lines = [
        "[1,2]",
        '{"text":123,"created_at":5}',
        '{"text":"lone \\ud800","created_at":6}',
        '{"text":"kept one","created_at":7}',
        "not json",
        '{"created_at":8}',
        '{"text":"point seven","created_at":1.7}',
        '{"text":"soon","timestamp":"soon"}',
        '{"text":"role","role":3,"created_at":9}',
        '{"text":"lone \\udc00 with id","id":"x","created_at":10}',
        '{"text":"whole float","created_at":11.0}',
        '{"text":"iso","created_at":"2024-05-01T10:00:00.9Z"}',
    ]
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = run_import(db_path, file).json()
    assert summary["format"] == "jsonl"
    assert (summary["turns"], summary["stored"], summary["failed"]) == (12, 3, 9)
    errors = [(e["line"], e["error"]) for e in summary["errors"]]
    assert errors == [
        (1, "expected a JSON object"),
        (2, "field `text` must be a string"),
        (3, "field `text`: lone surrogate in string"),
        (5, "not valid JSON: expected ident at line 1 column 1"),
        (6, "missing field `text`"),
        (7, "field `created_at` must be whole Unix seconds or an ISO 8601 string, got 1.7"),
        (8, 'field `timestamp` must be whole Unix seconds or an ISO 8601 string, got "soon"'),
        (9, "field `role` must be a string"),
        (10, "field `text`: lone surrogate in string"),
    ]
    assert "key" not in summary["errors"][0] and summary["errors"][8]["key"] == "jsonl::x"
    stored = {(text, at) for text, at, _ in contents(db_path)}
    assert stored == {("user: kept one", 7), ("user: whole float", 11), ("user: iso", 1714557600)}
    before = dump(db_path)
    again = run_import(db_path, file, "--format", "jsonl").json()
    assert (again["replayed"], again["failed"]) == (3, 9)
    assert dump(db_path) == before


def test_a_jsonl_time_beyond_64_bits_names_the_lines_field(tmp_path: Path) -> None:
    """``created_at`` 1e20 was refused as ``field `captured_at`: … expected i64``, naming a
    field the file does not have."""
    db_path = str(tmp_path / "memory.db")
    file = tmp_path / "turns.jsonl"
    big = 2**63
    lines = [
        f'{{"text":"too late","created_at":{big}}}',
        '{"text":"float","timestamp":1e20}',
        f'{{"text":"too early","created_at":{-big - 1}}}',
        f'{{"text":"last second","created_at":{big - 1}}}',
    ]
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = run_import(db_path, file).json()
    assert (summary["stored"], summary["failed"]) == (1, 3)
    message = "field `{}` must be whole Unix seconds or an ISO 8601 string, got {}"
    assert [(e["line"], e["error"]) for e in summary["errors"]] == [
        (1, message.format("created_at", big)),
        (2, message.format("timestamp", "1e+20")),
        (3, message.format("created_at", -big - 1)),
    ]


@pytest.mark.parametrize(
    ("have", "chosen", "expected"),
    [
        ("jsonl", "claude", "is not valid JSON: Extra data at line 2 (expected a Claude export"),
        ("jsonl", "chatgpt", "is not valid JSON: Extra data at line 2 (expected a ChatGPT export"),
        ("claude", "chatgpt", "not a chatgpt file: expected a ChatGPT export"),
        ("chatgpt", "claude", "not a claude file: expected a Claude export"),
        ("chatgpt", "jsonl", "not a jsonl file: expected one JSON object per line"),
        ("claude", "jsonl", "not a jsonl file: expected one JSON object per line"),
    ],
)
def test_a_file_of_another_format_is_refused(
    have: str, chosen: str, expected: str, tmp_path: Path
) -> None:
    files = write(tmp_path)
    db_path = str(tmp_path / "memory.db")
    assert expected in run_import(db_path, files[have], "--format", chosen).error()
    assert not Path(db_path).exists()
    assert run_import(db_path, files[have]).json()["format"] == have  # auto gets it right


def test_one_line_jsonl_object_is_not_a_chat_export(tmp_path: Path) -> None:
    db_path = str(tmp_path / "memory.db")
    file = tmp_path / "one.jsonl"
    file.write_text('{"text": "hello", "created_at": 5}\n', encoding="utf-8")
    message = run_import(db_path, file, "--format", "chatgpt").error()
    assert message.startswith("not a chatgpt file: expected a ChatGPT export")
    assert not Path(db_path).exists()
    assert run_import(db_path, file).json()["stored"] == 1


def test_chat_exports_keep_float_seconds_truncated(tmp_path: Path) -> None:
    export = chatgpt_export()
    mapping = export[0]["mapping"]
    mapping["u1"]["message"]["create_time"] = 1714000001.9
    mapping["a1"]["message"]["create_time"] = float("inf")  # unreadable: that turn fails
    file = tmp_path / "conversations.json"
    file.write_text(json.dumps(export), encoding="utf-8")  # Infinity: Python's JSON reads it
    db_path = str(tmp_path / "memory.db")
    summary = run_import(db_path, file).json()
    assert (summary["stored"], summary["failed"]) == (4, 1)
    assert summary["errors"] == [
        {
            "error": "field `create_time` must be Unix seconds or an ISO 8601 string, got Infinity",
            "key": "chatgpt:c-1:a1",
        }
    ]
    times = {text: at for text, at, _ in contents(db_path)}
    assert times["user: I live in Berlin, moving soon."] == 1714000001
    assert "assistant: Where to?" not in times


def test_deeply_nested_json_is_an_error_not_a_crash(tmp_path: Path) -> None:
    db_path = str(tmp_path / "memory.db")
    deep = "[" * 100_000 + "]" * 100_000
    file = tmp_path / "deep.json"
    file.write_text(deep, encoding="utf-8")
    message = run_import(db_path, file, "--format", "chatgpt").error()
    assert message == f"{file} is not valid JSON: nested too deeply"
    lines = tmp_path / "deep.jsonl"
    sep = "\u2028"  # a raw LINE SEPARATOR inside a JSON string does not split the line
    lines.write_text(f'{{"text":"a{sep}b","created_at":1}}\n{deep}\n', encoding="utf-8")
    summary = run_import(db_path, lines).json()
    assert (summary["stored"], summary["failed"]) == (1, 1)
    assert summary["errors"] == [{"error": "not valid JSON: recursion limit exceeded", "line": 2}]
    assert [text for text, _, _ in contents(db_path)] == [f"user: a{sep}b"]


def test_iso_times_without_offset_are_utc_wherever_imported(tmp_path: Path) -> None:
    """A naive ISO 8601 time is UTC, not the importing machine's zone: the same file gives the
    same times on every machine, and importing it again elsewhere replays instead of failing
    every turn with an ingestion-key conflict."""
    file = tmp_path / "turns.jsonl"
    row: dict[str, Any] = {
        "conversation_id": "s",
        "id": 1,
        "text": "Booked Porto",
        "created_at": "2026-05-01T10:00",
    }
    file.write_text(json.dumps(row) + "\n", encoding="utf-8")
    db_path = str(tmp_path / "memory.db")
    argv = ["import", "--db", db_path, "--tenant", T, "--person", P, str(file)]
    summaries = []
    for zone in ("America/New_York", "Asia/Tokyo"):
        proc = subprocess.run(
            [sys.executable, "-m", "zkr", *argv],
            capture_output=True,
            timeout=120,
            check=True,
            env={**os.environ, "TZ": zone},
        )
        summaries.append(json.loads(proc.stdout))
    assert [(s["stored"], s["replayed"], s["failed"]) for s in summaries] == [(1, 0, 0), (0, 1, 0)]
    assert contents(db_path) == [("user: Booked Porto", 1777629600, 'jsonl["s",1]')]


def test_a_null_created_at_falls_back_to_timestamp(tmp_path: Path) -> None:
    """``created_at``/``timestamp``: a line whose ``created_at`` is null uses its ``timestamp``
    instead of being skipped as undated."""
    file = tmp_path / "turns.jsonl"
    rows = [
        {"id": "a", "text": "Dentist on Friday", "created_at": None, "timestamp": 1714200000},
        {"id": "b", "text": "no time", "created_at": None},
    ]
    file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    db_path = str(tmp_path / "memory.db")
    summary = run_import(db_path, file).json()
    assert (summary["stored"], summary["undated"], summary["failed"]) == (1, 1, 0)
    assert contents(db_path) == [("user: Dentist on Friday", 1714200000, "jsonl::a")]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_summary_that_cannot_be_written_says_so_and_the_turns_stand(tmp_path: Path) -> None:
    """The summary is written after the turns are stored: a full disk on stdout is the CLI's
    ``cannot write the response`` error (not an internal error), and the import stands."""
    files = write(tmp_path)
    db_path = str(tmp_path / "memory.db")
    argv = ["import", "--db", db_path, "--tenant", T, "--person", P, str(files["jsonl"])]
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "zkr", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 1
    assert proc.stderr.decode().splitlines() == [
        '{"error":"cannot write the response to stdout: No space left on device"}'
    ]
    assert len(contents(db_path)) == 3
    assert run_import(db_path, files["jsonl"]).json()["replayed"] == 3


def test_jsonl_lines_follow_the_clis_json_rules(tmp_path: Path) -> None:
    """A JSONL line with a duplicate field stored whichever came last, and ``NaN`` made a key
    (``jsonl::nan``); such lines now fail alone, as the CLI refuses such a request."""
    db_path = str(tmp_path / "memory.db")
    file = tmp_path / "turns.jsonl"
    lines = [
        '{"text": "I love cats", "text": "I hate cats", "created_at": 5}',
        '{"text": "a", "id": NaN, "created_at": 5}',
        '{"text": "b", "created_at": 1e999}',
        '{"text": "c", "id": ' + "9" * 5000 + ', "created_at": 5}',
        '{"text": "kept", "created_at": 5}',
    ]
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = run_import(db_path, file).json()
    assert [(e["line"], e["error"]) for e in summary["errors"]] == [
        (1, "not valid JSON: duplicate field `text`"),
        (2, "not valid JSON: invalid number `NaN`: NaN and Infinity are not JSON"),
        (3, "not valid JSON: number out of range"),
        (4, "not valid JSON: number out of range"),
    ]
    assert [text for text, _, _ in contents(db_path)] == ["user: kept"]


def test_a_chat_export_with_an_overlong_number_is_one_error(tmp_path: Path) -> None:
    """It was ``internal error: ValueError: Exceeds the limit (4300 digits)…``."""
    db_path = str(tmp_path / "memory.db")
    file = tmp_path / "conversations.json"
    file.write_text('[{"mapping": {}, "create_time": ' + "9" * 5000 + "}]", encoding="utf-8")
    message = run_import(db_path, file).error()
    assert message == f"{file} is not valid JSON: number out of range"
    assert not Path(db_path).exists()
    file.write_text("[" + "9" * 5000 + ']\n{"text": "a"}\n', encoding="utf-8")  # auto-detection
    message = run_import(db_path, file).error()
    expected = "cannot tell the file's format; pass --format chatgpt, claude, openai or jsonl"
    assert message == expected
    assert not Path(db_path).exists()


@pytest.mark.parametrize("path", [" ", ":memory:", ""])
def test_a_blank_or_vanishing_db_is_refused_before_reading(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``zkr import`` asks the same ``--db`` rule as every other entry point
    (:func:`zkr.dbpath.refuse_throwaway`): a blank path would create a file named by invisible
    characters, ``:memory:`` would count imported turns that were never kept."""
    files = write(tmp_path / "in")
    monkeypatch.chdir(tmp_path)
    error = run_import(path, files["jsonl"]).error()
    assert error.startswith(f"--db {json.dumps(path)} is ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


# --------------------------------------------------------------------------- keys and times


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_distinct_jsonl_turns_never_share_a_key(tmp_path: Path) -> None:
    """``jsonl:{conv or ''}:{id}`` gave one key to conv "a:b" id "c" and conv "a" id "b:c", to
    id 1 and id "1", to a conversation ``""``, ``0`` and none: all but the first failed with
    an ingestion key conflict (or, with the same text and time, were taken for a replay)."""
    rows: list[dict[str, Any]] = [
        {"conversation_id": "a:b", "id": "c", "text": "one"},
        {"conversation_id": "a", "id": "b:c", "text": "two"},
        {"conversation_id": "s", "id": 1, "text": "integer id"},
        {"conversation_id": "s", "id": "1", "text": "string id"},
        {"conversation_id": "s", "id": 1.0, "text": "float id"},
        {"id": "x", "text": "no conversation"},
        {"conversation_id": "", "id": "x", "text": "empty conversation"},
        {"conversation_id": 0, "id": "x", "text": "conversation zero"},
        {"conversation_id": None, "id": "x", "text": "no conversation"},  # the same turn
    ]
    file = write_jsonl(tmp_path / "turns.jsonl", [{**r, "created_at": 5} for r in rows])
    db_path = str(tmp_path / "memory.db")
    first = run_import(db_path, file).json()
    assert (first["stored"], first["replayed"], first["failed"]) == (8, 1, 0)
    assert contents(db_path) == sorted(
        [
            ("user: one", 5, 'jsonl["a:b","c"]'),
            ("user: two", 5, "jsonl:a:b:c"),
            ("user: integer id", 5, 'jsonl["s",1]'),
            ("user: string id", 5, "jsonl:s:1"),
            ("user: float id", 5, 'jsonl["s",1.0]'),
            ("user: no conversation", 5, "jsonl::x"),
            ("user: empty conversation", 5, 'jsonl["","x"]'),
            ("user: conversation zero", 5, 'jsonl[0,"x"]'),
        ],
        key=lambda row: row[2],
    )
    before = dump(db_path)
    again = run_import(db_path, file).json()
    assert (again["stored"], again["replayed"], again["failed"]) == (0, 9, 0)
    assert dump(db_path) == before


def test_identical_jsonl_lines_without_id_are_two_turns(tmp_path: Path) -> None:
    """Two identical id-less lines had one digest key: the second was counted ``replayed`` on
    the first import, and never stored."""
    row = {"conversation_id": "s", "role": "user", "text": "ok", "created_at": 5}
    file = write_jsonl(tmp_path / "turns.jsonl", [row, {**row, "text": "fine"}, row])
    db_path = str(tmp_path / "memory.db")
    first = run_import(db_path, file).json()
    assert (first["stored"], first["replayed"]) == (3, 0)
    keys = [key for _, _, key in contents(db_path)]
    assert len(set(keys)) == 3 and all(k.startswith("jsonl:") and len(k) == 38 for k in keys)
    before = dump(db_path)
    assert run_import(db_path, file).json()["replayed"] == 3
    assert dump(db_path) == before


def claude_conversation(messages: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    conversation = {"uuid": "c-1", "name": "t", "created_at": "2024-05-01T09:00:00Z"}
    return [{**conversation, **fields, "chat_messages": messages}]


def gpt_conversation(
    conv_id: str, messages: list[tuple[str | None, str, str]], create_time: Any = 1714000000.5
) -> dict[str, Any]:
    """A ChatGPT conversation of one thread: (message id or ``None``, role, text) each, no
    message time (the conversation's); a message without an id has one only as its mapping key."""
    mapping: dict[str, Any] = {"root": {"id": "root", "message": None, "parent": None}}
    parent = "root"
    for index, (message_id, role, text) in enumerate(messages):
        node_id = f"n{index}"
        message: dict[str, Any] = {
            "author": {"role": role},
            "create_time": None,
            "content": {"content_type": "text", "parts": [text]},
        }
        if message_id is not None:
            message["id"] = message_id
        mapping[node_id] = {"message": message, "parent": parent, "children": []}
        mapping[parent]["children"] = [node_id]
        parent = node_id
    return {
        "conversation_id": conv_id,
        "create_time": create_time,
        "mapping": mapping,
        "current_node": parent,
    }


def test_chat_messages_without_ids_each_get_a_stable_key(tmp_path: Path) -> None:
    """Every Claude message without a ``uuid`` had the key ``claude:CONV:`` (and a ``null``
    one ``claude:CONV:None``): all but the first of a conversation failed or were replayed
    away. The same for ChatGPT messages without ids, and for conversations whose ids hold
    ``:``."""
    messages = [
        {"sender": "human", "text": "ok"},
        {"sender": "assistant", "text": "Sure."},
        {"sender": "human", "text": "ok"},  # the same text and time again: still a turn
        {"sender": "human", "text": "Thanks", "uuid": None},
        {"sender": "human", "text": "Bye", "uuid": None},
    ]
    claude = tmp_path / "claude.json"
    claude.write_text(json.dumps(claude_conversation(messages)), encoding="utf-8")
    chatgpt = [
        gpt_conversation(
            "c-1", [(None, "user", "ok"), (None, "assistant", "Sure."), (None, "user", "ok")]
        ),
        gpt_conversation("a:b", [("c", "user", "one")]),
        gpt_conversation("a", [("b:c", "user", "two")]),
    ]
    gpt = tmp_path / "conversations.json"
    gpt.write_text(json.dumps(chatgpt), encoding="utf-8")
    for file, expected in ((claude, 5), (gpt, 5)):
        db_path = str(tmp_path / f"{file.stem}.db")
        first = run_import(db_path, file).json()
        assert (first["stored"], first["failed"], first["replayed"]) == (expected, 0, 0)
        assert len({key for _, _, key in contents(db_path)}) == expected
        before = dump(db_path)
        again = run_import(db_path, file).json()
        assert (again["stored"], again["replayed"]) == (0, expected)
        assert dump(db_path) == before


def remember_as_before(db_path: str, stored: list[tuple[str, str, int]]) -> None:
    """What an import made before keys were unambiguous left: (key, content, time) each."""
    from zkr.model import RememberRequest, SourceKind

    with MemoryDb.open(db_path) as db:
        for key, text, at in stored:
            db.remember(RememberRequest(T, P, SourceKind.CONVERSATION, text, at, at, key))


def test_turns_stored_under_the_old_keys_replay(tmp_path: Path) -> None:
    """A turn whose key changed (integer id, ``:`` in its conversation, ``""`` conversation, no
    message id) replays under the key an earlier import stored it with instead of being
    stored twice; the turns that import lost to a shared key are stored now, under their own."""
    rows: list[dict[str, Any]] = [
        {"conversation_id": "slack:C1", "id": 1, "text": "int id, ':' conv"},
        {"conversation_id": "", "id": "x", "text": "empty conversation"},
        {"conversation_id": "a:b", "id": "c", "text": "first of a shared key"},
        {"conversation_id": "a", "id": "b:c", "text": "lost to the shared key"},
    ]
    file = write_jsonl(tmp_path / "turns.jsonl", [{**r, "created_at": 5} for r in rows])
    messages = [
        {"sender": "human", "text": "no id, stored before"},
        {"sender": "assistant", "text": "no id, lost before"},
        {"sender": "human", "text": "uuid null", "uuid": None},
    ]
    claude = tmp_path / "claude.json"
    claude.write_text(json.dumps(claude_conversation(messages)), encoding="utf-8")
    db_path = str(tmp_path / "memory.db")
    remember_as_before(
        db_path,
        [
            ("jsonl:slack:C1:1", "user: int id, ':' conv", 5),
            ("jsonl::x", "user: empty conversation", 5),
            ("jsonl:a:b:c", "user: first of a shared key", 5),
            ("claude:c-1:", "user: no id, stored before", 1714554000),
            ("claude:c-1:None", "user: uuid null", 1714554000),
        ],
    )
    summary = run_import(db_path, file).json()
    assert (summary["stored"], summary["replayed"], summary["failed"]) == (1, 3, 0)
    summary = run_import(db_path, claude).json()
    assert (summary["stored"], summary["replayed"], summary["failed"]) == (1, 2, 0)
    texts = [text for text, _, _ in contents(db_path)]
    assert len(texts) == 7 and len(set(texts)) == 7
    stored = {text: key for text, _, key in contents(db_path)}
    assert stored["user: lost to the shared key"] == 'jsonl["a","b:c"]'
    assert stored["assistant: no id, lost before"].startswith('claude["c-1",null,')
    before = dump(db_path)
    assert run_import(db_path, file).json()["replayed"] == 4
    assert run_import(db_path, claude).json()["replayed"] == 3
    assert dump(db_path) == before


def test_an_old_key_holding_another_turn_is_not_reused(tmp_path: Path) -> None:
    """The old key ``claude:c-1:`` holds another text at the same second (an earlier version
    of the export): the turn gets its own key, not failed as a conflict. A deleted memory under
    the old key stays deleted, and is the first message's (the one the old import stored): the
    second, lost to that key back then, is stored now."""
    claude = tmp_path / "claude.json"
    messages = [{"sender": "human", "text": "edited since"}]
    claude.write_text(json.dumps(claude_conversation(messages)), encoding="utf-8")
    db_path = str(tmp_path / "memory.db")
    remember_as_before(db_path, [("claude:c-1:", "user: as it was", 1714554000)])
    summary = run_import(db_path, claude).json()
    assert (summary["stored"], summary["replayed"], summary["failed"]) == (1, 0, 0)
    assert len(contents(db_path)) == 2
    gone = tmp_path / "gone.db"
    remember_as_before(str(gone), [("claude:c-1:", "user: edited since", 1714554000)])
    with MemoryDb.open(str(gone)) as db:
        (hit,) = db.scope(T, P).search("edited").items
        db.scope(T, P).delete(hit.memory.id, deleted_at=1714554100)
    messages.append({"sender": "assistant", "text": "lost to the old key"})
    claude.write_text(json.dumps(claude_conversation(messages)), encoding="utf-8")
    for _ in range(2):
        summary = run_import(str(gone), claude).json()
        assert (summary["stored"], summary["deleted"]) in [(1, 1), (0, 1)]
    assert summary["replayed"] == 1
    assert [text for text, _, _ in contents(str(gone))] == [
        "user: edited since",  # deleted, its text kept (delete is not erase)
        "assistant: lost to the old key",
    ]


def test_chat_message_times_are_read_or_fail_never_replaced(tmp_path: Path) -> None:
    """A message time that was there but unreadable took the conversation's time, and a time
    of 0 did too (``or``). Now an unreadable one fails that turn (with its key), 0 is 0, and
    only a missing or null message time takes the conversation's."""
    messages = [
        {"uuid": "m1", "sender": "human", "text": "bad time", "created_at": "soon"},
        {"uuid": "m2", "sender": "human", "text": "epoch", "created_at": 0},
        {"uuid": "m3", "sender": "human", "text": "no time"},
        {"uuid": "m4", "sender": "human", "text": "null time", "created_at": None},
        {"uuid": "m5", "sender": "human", "text": "empty time", "created_at": ""},
        {"uuid": "m6", "sender": "human", "text": "own time", "created_at": "2024-05-01T09:00:07Z"},
    ]
    claude = tmp_path / "claude.json"
    claude.write_text(json.dumps(claude_conversation(messages)), encoding="utf-8")
    db_path = str(tmp_path / "claude.db")
    summary = run_import(db_path, claude).json()
    assert (summary["stored"], summary["failed"], summary["undated"]) == (4, 2, 0)
    message = "field `created_at` must be Unix seconds or an ISO 8601 string, got {}"
    assert summary["errors"] == [
        {"error": message.format('"soon"'), "key": "claude:c-1:m1"},
        {"error": message.format('""'), "key": "claude:c-1:m5"},
    ]
    assert {text: at for text, at, _ in contents(db_path)} == {
        "user: epoch": 0,
        "user: no time": 1714554000,
        "user: null time": 1714554000,
        "user: own time": 1714554007,
    }
    # an unreadable conversation time fails only the messages that would use it
    bad = claude_conversation(messages[1:4], created_at=True)
    claude.write_text(json.dumps(bad + claude_conversation([], uuid="c-2")), encoding="utf-8")
    db_path = str(tmp_path / "bad.db")
    summary = run_import(db_path, claude).json()
    assert (summary["stored"], summary["failed"]) == (1, 2)
    conv = "conversation field `created_at` must be Unix seconds or an ISO 8601 string, got true"
    assert [(e["key"], e["error"]) for e in summary["errors"]] == [
        ("claude:c-1:m3", conv),
        ("claude:c-1:m4", conv),
    ]
    # ChatGPT: 0 and a time past 64 bits; neither time at all is undated
    chatgpt = [gpt_conversation("g", [("u", "user", "zero"), ("v", "user", "far")])]
    chatgpt[0]["mapping"]["n0"]["message"]["create_time"] = 0.0
    chatgpt[0]["mapping"]["n1"]["message"]["create_time"] = 1e20
    chatgpt.append(gpt_conversation("h", [("w", "user", "undated")], create_time=None))
    gpt = tmp_path / "conversations.json"
    gpt.write_text(json.dumps(chatgpt), encoding="utf-8")
    db_path = str(tmp_path / "gpt.db")
    summary = run_import(db_path, gpt).json()
    assert (summary["stored"], summary["failed"], summary["undated"]) == (1, 1, 1)
    assert summary["errors"] == [
        {
            "error": "field `create_time` must be Unix seconds or an ISO 8601 string, got 1e+20",
            "key": "chatgpt:g:v",
        }
    ]
    assert contents(db_path) == [("user: zero", 0, "chatgpt:g:u")]


def test_a_chatgpt_conversation_without_current_node_follows_its_latest_branch(
    tmp_path: Path,
) -> None:
    """Without a ``current_node`` (or one not in the mapping) the conversation was silently
    left out; it now follows the last child from the root, as the app shows the last edit."""
    export = chatgpt_export()
    del export[0]["current_node"]
    export[1]["current_node"] = "gone"
    file = tmp_path / "conversations.json"
    file.write_text(json.dumps(export), encoding="utf-8")
    db_path = str(tmp_path / "memory.db")
    summary = run_import(db_path, file).json()
    assert (summary["turns"], summary["stored"]) == (5, 5)
    texts = {text for text, _, _ in contents(db_path)}
    assert "user: To Lisbon in May." in texts and "user: Maybe Paris" not in texts
    assert "user: I prefer green tea." in texts


def test_chatgpt_voice_messages_keep_their_transcripts(tmp_path: Path) -> None:
    """A voice-mode message has its words in an ``audio_transcription`` part, not a string part:
    it was counted ``empty`` and its words were lost."""
    export = [gpt_conversation("v", [("u", "user", "x"), ("a", "assistant", "y")])]
    mapping = export[0]["mapping"]
    for node_id, words, direction in (("n0", "Book a table", "in"), ("n1", "Done.", "out")):
        mapping[node_id]["message"]["content"] = {
            "content_type": "multimodal_text",
            "parts": [
                {"content_type": "audio_transcription", "text": words, "direction": direction},
                {"content_type": "audio_asset_pointer", "asset_pointer": "sediment://file_1"},
            ],
        }
    file = tmp_path / "conversations.json"
    file.write_text(json.dumps(export), encoding="utf-8")
    db_path = str(tmp_path / "memory.db")
    summary = run_import(db_path, file).json()
    assert (summary["stored"], summary["empty"]) == (2, 0)
    assert {text for text, _, _ in contents(db_path)} == {"user: Book a table", "assistant: Done."}


def test_a_lone_surrogate_in_an_id_is_kept_as_its_escape(tmp_path: Path) -> None:
    """A line whose id holds a lone surrogate made the summary unwritable (an internal error
    after the other turns were stored), and asking the database for such a line's old key was
    a storage error that refused the whole import; its key now holds the escape."""
    file = tmp_path / "turns.jsonl"
    lines = [
        '{"text": "x", "id": "\\ud800", "conversation_id": "a:b", "created_at": 5}',
        '{"text": "kept", "id": 2, "conversation_id": "a", "created_at": 5}',
        '{"text": "y", "id": "\\udc01", "created_at": 6}',
    ]
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db_path = str(tmp_path / "memory.db")
    summary = run_import(db_path, file).json()
    assert (summary["stored"], summary["failed"], summary["errors"]) == (3, 0, [])
    # the surrogate is kept as its escape: the turn is stored, and a second import replays it
    assert sorted(contents(db_path)) == [
        ("user: kept", 5, 'jsonl["a",2]'),
        ("user: x", 5, 'jsonl["a:b","\\ud800"]'),
        ("user: y", 6, "jsonl::\\udc01"),
    ]
    before = dump(db_path)
    again = run_import(db_path, file).json()
    assert (again["stored"], again["replayed"], again["failed"]) == (0, 3, 0)
    assert dump(db_path) == before


def test_a_chat_exports_errors_are_in_file_order(tmp_path: Path) -> None:
    """Errors were sorted by JSONL line, so a chat export's came in the order they were found:
    a turn refused by ``remember`` (at the end of its batch) after a later turn's bad time."""
    messages = [
        {"uuid": "m1", "sender": "human", "text": "lone \ud800"},
        {"uuid": "m2", "sender": "human", "text": "bad time", "created_at": "soon"},
    ]
    file = tmp_path / "claude.json"
    file.write_text(json.dumps(claude_conversation(messages)), encoding="utf-8")
    summary = run_import(str(tmp_path / "memory.db"), file).json()
    assert [e["key"] for e in summary["errors"]] == ["claude:c-1:m1", "claude:c-1:m2"]


def test_old_keys_replay_on_postgresql_too(pg_dsn: str, tmp_path: Path) -> None:
    """The old-key look-up (``MemoryDb.replay_statuses``) on a PostgreSQL store, through the
    CLI: the turn stored under the shared key replays, the one it cost is stored, once."""
    rows = [
        {"conversation_id": "a:b", "id": "c", "text": "first of a shared key"},
        {"conversation_id": "a", "id": "b:c", "text": "lost to the shared key"},
        {"conversation_id": "s", "id": 1, "text": "integer id"},
    ]
    file = write_jsonl(tmp_path / "turns.jsonl", [{**r, "created_at": 5} for r in rows])
    remember_as_before(pg_dsn, [("jsonl:a:b:c", "user: first of a shared key", 5)])
    summaries = [run_import(pg_dsn, file).json() for _ in range(2)]
    assert [(s["stored"], s["replayed"], s["failed"]) for s in summaries] == [(2, 1, 0), (0, 3, 0)]
    assert set(contents(pg_dsn)) == {  # (the server's collation orders them its own way)
        ("user: lost to the shared key", 5, 'jsonl["a","b:c"]'),
        ("user: integer id", 5, 'jsonl["s",1]'),
        ("user: first of a shared key", 5, "jsonl:a:b:c"),
    }


# --------------------------------------------------------------------------- files as handed out


def test_lone_surrogates_in_ids_and_messages_keep_the_summary(tmp_path: Path) -> None:
    """A JavaScript exporter that cut a string inside a surrogate pair writes ``\\ud83d`` alone.
    In an id it made the ingestion key unstorable, and in a failed line's message (a time
    such as ``"\\udc00"``) the summary could not be encoded: ``zkr import`` answered ``internal
    error: UnicodeEncodeError`` with exit 1 although its other turns were stored. Now an id's
    lone surrogate is written as its ``\\uXXXX`` escape in the key (the turn is stored, and a
    second import replays it) and a message shows it escaped."""
    db_path = str(tmp_path / "memory.db")
    jsonl = tmp_path / "turns.jsonl"
    lines = [
        '{"text":"kept","id":"1","created_at":1}',
        '{"text":"cut id","id":"x\\ud83d","conversation_id":"c\\udc00","created_at":2}',
        '{"text":"cut time","created_at":"\\udc00"}',
    ]
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_import(db_path, jsonl)
    assert result.code == 0, result.stderr
    summary = result.json()
    assert (summary["stored"], summary["failed"]) == (2, 1)
    assert summary["errors"] == [
        {
            "error": "field `created_at` must be whole Unix seconds or an ISO 8601 string,"
            ' got "\\udc00"',
            "line": 3,
        }
    ]
    keys = {row[2] for row in contents(db_path)}
    assert "jsonl:c\\udc00:x\\ud83d" in keys
    again = run_import(db_path, jsonl).json()
    assert (again["stored"], again["replayed"], again["failed"]) == (0, 2, 1)
    claude = tmp_path / "conversations.json"
    claude.write_text(
        '[{"uuid":"c\\udc00","chat_messages":[{"uuid":"m\\ud800","sender":"human",'
        '"text":"cut uuid","created_at":"2024-05-01T10:00:00Z"}]}]',
        encoding="utf-8",
    )
    result = run_import(db_path, claude)
    assert result.code == 0, result.stderr
    assert (result.json()["stored"], result.json()["failed"]) == (1, 0)
    assert "claude:c\\udc00:m\\ud800" in {row[2] for row in contents(db_path)}


def test_chat_turns_without_a_message_id_get_keys_of_their_own(tmp_path: Path) -> None:
    """A Claude message without a ``uuid`` (a hand-made or converted file) was keyed
    ``claude:CONV:`` (or ``claude:CONV:None`` for ``null``), so the second such turn of a
    conversation failed as ``ingestion_key conflicts with different memory payload`` and was
    never stored; a ChatGPT message without an ``id`` likewise, though its node's key in
    ``mapping`` names it. Now each such turn has a key of its own, the same on every import
    (:class:`zkr.importkeys.Unnamed`)."""
    db_path = str(tmp_path / "memory.db")
    claude = tmp_path / "claude.json"
    messages = [
        {"sender": "human", "text": "first", "created_at": "2024-05-01T10:00:00Z"},
        {"sender": "assistant", "text": "second", "created_at": "2024-05-01T10:00:01Z"},
        {"uuid": None, "sender": "human", "text": "third", "created_at": "2024-05-01T10:00:02Z"},
        {"uuid": None, "sender": "human", "text": "fourth", "created_at": "2024-05-01T10:00:03Z"},
    ]
    claude.write_text(json.dumps([{"uuid": "c1", "chat_messages": messages}]), encoding="utf-8")
    summary = run_import(db_path, claude).json()
    assert (summary["stored"], summary["failed"]) == (4, 0), summary["errors"]
    again = run_import(db_path, claude).json()
    assert (again["stored"], again["replayed"], again["failed"]) == (0, 4, 0)
    chatgpt = tmp_path / "chatgpt.json"
    mapping = {
        f"n{i}": {
            "parent": f"n{i - 1}" if i else None,
            "message": {
                "author": {"role": "user"},
                "create_time": 1700000000 + i,
                "content": {"parts": [f"turn {i}"]},
            },
        }
        for i in range(3)
    }
    conversation = {"id": "g1", "current_node": "n2", "mapping": mapping}
    chatgpt.write_text(json.dumps([conversation]), encoding="utf-8")
    summary = run_import(db_path, chatgpt).json()
    assert (summary["stored"], summary["failed"]) == (3, 0), summary["errors"]
    keys = [row[2] for row in contents(db_path)]
    assert len(set(keys)) == len(keys) == 7
    assert all(":None" not in key and not key.endswith(":") for key in keys)
    again = run_import(db_path, chatgpt).json()
    assert (again["stored"], again["replayed"], again["failed"]) == (0, 3, 0)


def _import_with_memory_cap(argv: list[str], stdin: Any) -> subprocess.CompletedProcess[bytes]:
    """``python -m zkr import …`` with its address space capped at 1 GiB, so a run that reads
    without end fails fast instead of taking the machine's memory."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(
        [sys.executable, "-m", "zkr", "import", *argv],
        stdin=stdin,
        capture_output=True,
        timeout=120,
        check=False,
        preexec_fn=cap,
    )


def test_a_device_is_refused_and_running_out_of_memory_is_an_envelope(tmp_path: Path) -> None:
    """``zkr import … /dev/zero`` read without end (until the kernel killed it or, under a
    memory limit, ``internal error: MemoryError``); so did ``- < /dev/zero``. A device is now
    refused before anything is read, like a ``--db`` naming one, and a file or pipe too large
    for memory is one envelope that says so. Nothing is stored either way."""
    db_path = str(tmp_path / "memory.db")
    scope = ["--db", db_path, "--tenant", T, "--person", P]
    for file, stdin in (("/dev/zero", os.devnull), ("-", "/dev/zero")):
        with open(stdin, "rb") as handle:
            proc = _import_with_memory_cap([*scope, file], handle)
        assert proc.returncode == 1 and proc.stdout == b""
        name = "standard input" if file == "-" else file
        assert json.loads(proc.stderr) == {
            "error": f"cannot read {name}: a device, not a file or a pipe"
        }
    feeder = subprocess.Popen(["cat", "/dev/zero"], stdout=subprocess.PIPE)
    try:
        proc = _import_with_memory_cap([*scope, "-"], feeder.stdout)
    finally:
        feeder.kill()
        feeder.wait()
        assert feeder.stdout is not None
        feeder.stdout.close()
    assert proc.returncode == 1 and proc.stdout == b""
    assert json.loads(proc.stderr) == {
        "error": "out of memory: standard input is too large to import at once"
        " (split it; turns already stored stay, and a second import replays them)"
    }
    assert not Path(db_path).exists()


def test_the_export_zip_itself_imports(tmp_path: Path) -> None:
    """ChatGPT and Claude hand out their exports as ZIP archives; ``zkr import export.zip``
    said ``export.zip is not UTF-8 text (bad byte at offset 10)``. The archive's one
    ``conversations.json`` is now read from it (and a gzip-compressed file is decompressed);
    an archive without one, or a damaged one, is an error that says so."""
    import gzip
    import zipfile

    files = write(tmp_path)
    db_path = str(tmp_path / "memory.db")
    expected = run_import(str(tmp_path / "plain.db"), files["chatgpt"]).json()
    archive = tmp_path / "chatgpt-export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("chat.html", "<html></html>")
        out.write(files["chatgpt"], "export/conversations.json")
    assert run_import(db_path, archive).json() == expected
    piped = cli(
        None,
        argv=["import", "--db", db_path, "--tenant", T, "--person", P, "-"],
        stdin=archive.read_bytes(),
    ).json()
    assert (piped["replayed"], piped["stored"]) == (expected["stored"], 0)
    packed = tmp_path / "turns.jsonl.gz"
    packed.write_bytes(gzip.compress(files["jsonl"].read_bytes()))
    expected_jsonl = run_import(str(tmp_path / "plain2.db"), files["jsonl"]).json()
    assert run_import(db_path, packed).json() == expected_jsonl
    empty = tmp_path / "other.zip"
    with zipfile.ZipFile(empty, "w") as out:
        out.writestr("notes.txt", "hello")
    assert run_import(db_path, empty).error() == (
        f"{empty} is a ZIP archive without a conversations.json (unzip it and import the"
        " conversations file)"
    )
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(archive.read_bytes()[:200])
    assert run_import(db_path, damaged).error().startswith(f"{damaged} is a damaged ZIP archive")
    broken_gz = tmp_path / "broken.jsonl.gz"
    broken_gz.write_bytes(packed.read_bytes()[:20])
    assert run_import(db_path, broken_gz).error().startswith(f"{broken_gz} is a damaged gzip file")


def test_jsonl_reads_a_lower_case_z_and_content_beside_a_null_text(tmp_path: Path) -> None:
    """RFC 3339 allows ``z`` for UTC (``2024-05-01T10:00:00z``): the line failed as an
    unreadable time (a chat export's turn fell back to its conversation's time). A line with
    ``"text": null`` and a string ``content`` failed as ``missing field `text```; ``content``
    is read when ``text`` is absent or null."""
    db_path = str(tmp_path / "memory.db")
    jsonl = tmp_path / "turns.jsonl"
    lines = [
        '{"text":"lower z","created_at":"2024-05-01T10:00:00z"}',
        '{"text":null,"content":"from content","created_at":5}',
    ]
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = run_import(db_path, jsonl).json()
    assert (summary["stored"], summary["failed"]) == (2, 0), summary["errors"]
    stored = {(text, at) for text, at, _ in contents(db_path)}
    assert stored == {("user: lower z", 1714557600), ("user: from content", 5)}


def test_a_chatgpt_conversation_without_current_node_imports_its_newest_thread(
    tmp_path: Path,
) -> None:
    """A conversation whose ``current_node`` is missing (or names no node: a converted or
    trimmed export) imported nothing and said nothing (``turns`` 0). It now imports the
    thread ending at its newest leaf, as ChatGPT shows the newest branch."""
    mapping: dict[str, Any] = {
        "root": {"parent": None, "children": ["q"], "message": None},
        "q": {"parent": "root", "children": ["old", "new"]},
        "old": {"parent": "q", "children": []},
        "new": {"parent": "q", "children": []},
    }
    for node, (role, text, at) in {
        "q": ("user", "which city?", 100),
        "old": ("assistant", "Lisbon (edited away)", 101),
        "new": ("assistant", "Porto", 105),
    }.items():
        mapping[node]["message"] = {
            "id": node,
            "author": {"role": role},
            "create_time": at,
            "content": {"parts": [text]},
        }
    file = tmp_path / "conversations.json"
    for current in ({}, {"current_node": "gone"}):
        file.write_text(json.dumps([{"id": "c", "mapping": mapping, **current}]), "utf-8")
        turns = [(t.role, t.text) for t in chatgpt_turns(json.loads(file.read_text("utf-8")))]
        assert turns == [("user", "which city?"), ("assistant", "Porto")]
    summary = run_import(str(tmp_path / "memory.db"), file).json()
    assert (summary["turns"], summary["stored"]) == (2, 2)


def test_chatgpt_voice_turns_keep_their_transcripts(tmp_path: Path) -> None:
    """ChatGPT's voice mode stores a turn's words as ``audio_transcription`` parts (beside an
    ``audio_asset_pointer``), not as strings: such turns were counted ``empty`` and never
    stored. Their transcripts are the turn's text now."""

    def voice(text: str, direction: str) -> list[dict[str, Any]]:
        return [
            {"content_type": "audio_transcription", "text": text, "direction": direction},
            {"content_type": "audio_asset_pointer", "asset_pointer": "file-service://x"},
        ]

    mapping: dict[str, Any] = {}
    parent = None
    for node, role, parts in (
        ("a", "user", voice("I moved to Porto last week.", "in")),
        ("b", "assistant", voice("Congratulations on the move!", "out")),
        ("c", "user", [{"content_type": "image_asset_pointer"}, "What is in this photo?"]),
        # an image between two strings adds no line: the text stays what it was before
        ("d", "user", ["first", {"content_type": "image_asset_pointer"}, "second"]),
    ):
        mapping[node] = {
            "parent": parent,
            "children": [],
            "message": {
                "id": node,
                "author": {"role": role},
                "create_time": 1700000000,
                "content": {"content_type": "multimodal_text", "parts": parts},
            },
        }
        parent = node
    conversation = {"id": "v", "current_node": "d", "mapping": mapping}
    assert [(t.role, t.text) for t in chatgpt_turns([conversation])] == [
        ("user", "I moved to Porto last week."),
        ("assistant", "Congratulations on the move!"),
        ("user", "What is in this photo?"),
        ("user", "first\nsecond"),
    ]
    file = tmp_path / "conversations.json"
    file.write_text(json.dumps([conversation]), encoding="utf-8")
    summary = run_import(str(tmp_path / "memory.db"), file).json()
    assert (summary["stored"], summary["empty"]) == (4, 0)


def test_a_turn_deleted_under_its_own_key_is_not_stored_again(tmp_path: Path) -> None:
    """Turn B (``"id": "1"``) has the plain key ``jsonl:s:1``, which is also the old key of
    turn A (``"id": 1``, stored under ``jsonl["s",1]`` by this release). Deleting B and
    importing again took ``jsonl:s:1`` for A as "its old key, deleted" and stored B anew under a
    spare key: the deleted turn came back. A turn already stored under its own key keeps it."""
    rows: list[dict[str, Any]] = [
        {"conversation_id": "s", "id": 1, "text": "integer id about the dentist"},
        {"conversation_id": "s", "id": "1", "text": "string id about the dentist"},
    ]
    file = write_jsonl(tmp_path / "turns.jsonl", [{**r, "created_at": 5} for r in rows])
    db_path = str(tmp_path / "memory.db")
    assert run_import(db_path, file).json()["stored"] == 2
    with MemoryDb.open(db_path) as db:
        me = db.scope(T, P)
        (hit,) = me.search("string id dentist", limit=1).items
        assert hit.excerpt == "user: string id about the dentist"
        me.delete(hit.memory.id, deleted_at=100)
    before = dump(db_path)
    for _ in range(2):
        summary = run_import(db_path, file).json()
        assert (summary["stored"], summary["replayed"], summary["deleted"]) == (0, 1, 1)
        assert dump(db_path) == before
    with MemoryDb.open(db_path) as db:
        texts = [item.excerpt for item in db.scope(T, P).search("dentist").items]
    assert texts == ["user: integer id about the dentist"]
