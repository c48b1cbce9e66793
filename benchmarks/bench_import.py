"""Import benchmark (issue 15 item 7): ``zkr import`` of a generated ChatGPT export. Prints numbers.

    python benchmarks/bench_import.py [--turns 10000] [--per-conversation 50] [--format jsonl]

Writes a ``conversations.json`` in the ChatGPT export's shape (``--turns`` user/assistant turns,
``--per-conversation`` per conversation, sentences of 8-30 words) or, with ``--format jsonl``,
the same turns as JSONL lines with integer ids (whose keys are not the first releases', so
every turn also asks the database whether an earlier import stored it under the old key: the
cost of that look-up shows here), then runs the real CLI
(``python -m zkr import``, a fresh process, WAL, synchronous FULL) twice on a fresh database:

* first import: turns/s (every turn stored: one source, evidence, FTS row and feed commit each);
* second import of the same file: turns/s (every key replayed, nothing written);
* the database file size (with its WAL) after the first import.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORDS = (
    "the a I you we moved to Lisbon Berlin work job plan trip coffee tea running morning "
    "evening project deadline meeting call mum friend book read write code review garden "
    "weekend holiday train flight hotel dinner lunch recipe doctor appointment gym swim "
    "bike ride walk park museum concert ticket birthday gift budget rent apartment"
).split()


def export(turns: int, per_conversation: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    conversations = []
    made = 0
    at = 1_700_000_000
    while made < turns:
        size = min(per_conversation, turns - made)
        conv_id = f"conv-{len(conversations)}"
        mapping: dict[str, Any] = {"root": {"id": "root", "message": None, "parent": None}}
        parent = "root"
        for i in range(size):
            node_id = f"{conv_id}-m{i}"
            at += rng.randint(5, 120)
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
            mapping[node_id] = {
                "id": node_id,
                "parent": parent,
                "children": [],
                "message": {
                    "id": node_id,
                    "author": {"role": "user" if i % 2 == 0 else "assistant"},
                    "create_time": at + 0.25,
                    "content": {"content_type": "text", "parts": [text.capitalize() + "."]},
                },
            }
            mapping[parent].setdefault("children", []).append(node_id)
            parent = node_id
        conversations.append(
            {
                "title": conv_id,
                "create_time": at,
                "mapping": mapping,
                "current_node": parent,
                "conversation_id": conv_id,
                "id": conv_id,
            }
        )
        made += size
    return conversations


def jsonl(conversations: list[dict[str, Any]]) -> str:
    """The turns of ``export`` as JSONL: conversation id, integer id, role, text, time."""
    lines = []
    for conversation in conversations:
        for number, node in enumerate(n for n in conversation["mapping"].values() if n["message"]):
            message = node["message"]
            row = {
                "conversation_id": conversation["conversation_id"],
                "id": number,
                "role": message["author"]["role"],
                "text": message["content"]["parts"][0],
                "created_at": int(message["create_time"]),
            }
            lines.append(json.dumps(row) + "\n")
    return "".join(lines)


def run_import(db: str, file: str) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "zkr", "import", "--db", db, "--tenant", "bench"]
    argv += ["--person", "me", file]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--per-conversation", type=int, default=50)
    parser.add_argument("--format", choices=("chatgpt", "jsonl"), default="chatgpt")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zkr-bench-import-") as tmp:
        conversations = export(args.turns, args.per_conversation)
        if args.format == "jsonl":
            file = Path(tmp) / "turns.jsonl"
            file.write_text(jsonl(conversations), encoding="utf-8")
        else:
            file = Path(tmp) / "conversations.json"
            file.write_text(json.dumps(conversations), encoding="utf-8")
        db = str(Path(tmp) / "memory.db")
        first, summary = run_import(db, str(file))
        assert summary["stored"] == args.turns, summary
        size = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
        second, again = run_import(db, str(file))
        assert again["replayed"] == args.turns, again
        what = "JSONL file" if args.format == "jsonl" else "ChatGPT export"
        print(f"import of a {args.turns}-turn {what} ({file.stat().st_size} bytes)")
        print(f"  first import : {first:7.2f} s  {args.turns / first:8.0f} turns/s (all stored)")
        print(f"  second import: {second:7.2f} s  {args.turns / second:8.0f} turns/s (replayed)")
        print(f"  database     : {size / 1e6:7.2f} MB with its WAL")


if __name__ == "__main__":
    main()
