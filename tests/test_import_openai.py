"""``zkr import`` of OpenAI-style chat messages (``{"role", "content"}`` arrays, ``{"messages"}``
objects, fine-tuning JSONL) and ``--time``: real files through the real CLI into real
databases. Such files were refused with ``cannot tell the file's format``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import cli, dump
from zkr import MemoryDb
from zkr.model import SearchRequest

T, P = "me", "alex"
MAY_1 = 1777629600  # 2026-05-01T10:00:00Z

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "I moved to Lisbon in May."},
    {"role": "assistant", "content": [{"type": "text", "text": "Lisbon is lovely in May."}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{}"},
    {"role": "assistant", "content": None, "tool_calls": []},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
    {"role": "user", "content": "thanks"},
    {"role": "user", "content": "thanks"},
]


def run_import(db_path: str, file: Path, *extra: str) -> Any:
    return cli(
        None, argv=["import", "--db", db_path, "--tenant", T, "--person", P, *extra, str(file)]
    )


def test_messages_become_turns_with_stable_distinct_keys() -> None:
    from zkr.importer import openai_turns  # (inside: the CLI tests run on any release)

    turns = openai_turns(json.dumps(CHAT), "chat.json")
    assert [(t.role, t.text) for t in turns] == [
        ("user", "I moved to Lisbon in May."),
        ("assistant", "Lisbon is lovely in May."),
        ("assistant", ""),  # a tool call: empty
        ("user", ""),  # an image only: empty
        ("user", "thanks"),
        ("user", "thanks"),
    ]
    keys = [t.key for t in turns]
    assert len(set(keys)) == len(keys)  # two identical messages are two turns
    assert all(k.startswith("openai[null,null,") for k in keys)
    assert keys == [t.key for t in openai_turns(json.dumps(CHAT), "chat.json")]
    assert all(t.at is None and t.error is None for t in turns)


def test_conversations_ids_times_and_bad_content() -> None:
    from zkr.importer import openai_turns

    data = [
        {
            "id": "conv-1",
            "created_at": "2026-05-01T10:00:00Z",
            "messages": [
                {"role": "user", "content": "hi", "id": "m1"},
                {"role": "user", "content": "hi", "timestamp": 5},
                {"role": "user", "content": 7},
            ],
        },
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "hi"}]},
    ]
    turns = openai_turns(json.dumps(data), "f")
    assert turns[0].key == "openai:conv-1:m1" and turns[0].at == MAY_1
    assert turns[1].at == 5 and turns[1].key.startswith('openai["conv-1",null,')
    assert turns[2].error == "field `content` must be a string or a list of content parts"
    # id-less conversations share one counter: their identical messages are two turns
    assert turns[3].key != turns[4].key
    assert turns[3].key.endswith(",0]") and turns[4].key.endswith(",1]")


def test_auto_detects_openai_and_needs_a_time(tmp_path: Path) -> None:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(CHAT, indent=2), encoding="utf-8")
    db_path = str(tmp_path / "memory.db")
    refused = run_import(db_path, chat).error()
    assert refused == (
        f"no turn of {chat} has a time: pass --time WHEN (Unix seconds or ISO 8601), the time to"
        " store them at (the same WHEN again on a re-import)"
    )
    assert not Path(db_path).exists()
    first = run_import(db_path, chat, "--time", "2026-05-01T10:00:00").json()
    assert first == {
        "deleted": 0,
        "empty": 2,
        "errors": [],
        "failed": 0,
        "format": "openai",
        "replayed": 0,
        "stored": 4,
        "turns": 6,
        "undated": 0,
    }
    before = dump(db_path)
    again = run_import(db_path, chat, "--format", "openai", "--time", str(MAY_1)).json()
    assert (again["stored"], again["replayed"]) == (0, 4)
    assert dump(db_path) == before
    # another WHEN is no new key: the turns fail as conflicts instead of being stored twice
    other = run_import(db_path, chat, "--time", str(MAY_1 + 1)).json()
    assert (other["stored"], other["failed"]) == (0, 4)
    assert dump(db_path) == before
    with MemoryDb.open(db_path) as db:
        pack = db.search(SearchRequest(T, P, "Lisbon"))
    assert {item.excerpt for item in pack.items} == {
        "user: I moved to Lisbon in May.",
        "assistant: Lisbon is lovely in May.",
    }


def test_a_messages_object_and_a_fine_tuning_file(tmp_path: Path) -> None:
    db_path = str(tmp_path / "memory.db")
    single = tmp_path / "one.json"
    single.write_text(
        json.dumps(
            {"messages": [{"role": "user", "content": "I like tea", "created_at": 9}]}, indent=2
        ),
        encoding="utf-8",
    )
    summary = run_import(db_path, single).json()
    assert (summary["format"], summary["stored"]) == ("openai", 1)
    lines = tmp_path / "train.jsonl"
    lines.write_text(
        json.dumps({"messages": [{"role": "user", "content": "I run at dawn"}]})
        + "\nnot json\n"
        + json.dumps({"messages": [{"role": "assistant", "content": "Nice."}]})
        + "\n",
        encoding="utf-8",
    )
    summary = run_import(db_path, lines, "--time", "100").json()
    assert (summary["format"], summary["stored"], summary["failed"]) == ("openai", 2, 1)
    assert summary["errors"] == [{"error": "expected a JSON object with `messages`", "line": 2}]


def test_time_fills_undated_jsonl_lines_and_a_bad_time_is_an_error(tmp_path: Path) -> None:
    turns = tmp_path / "turns.jsonl"
    turns.write_text('{"text": "dated", "created_at": 5}\n{"text": "undated"}\n', "utf-8")
    db_path = str(tmp_path / "memory.db")
    summary = run_import(db_path, turns).json()  # some turns have a time: as before
    assert (summary["stored"], summary["undated"]) == (1, 1)
    summary = run_import(db_path, turns, "--time", "2026-05-01T10:00:00Z").json()
    assert (summary["stored"], summary["replayed"], summary["undated"]) == (1, 1, 0)
    with MemoryDb.open(db_path) as db:
        pack = db.search(SearchRequest(T, P, "undated"))
    assert pack.items[0].excerpt == "user: undated"
    bad = run_import(db_path, turns, "--time", "soon").error()
    assert bad == '--time must be whole Unix seconds or an ISO 8601 string, got "soon"'
