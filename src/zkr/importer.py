"""``zkr import``: bring chat history in (a ChatGPT or Claude export, or a JSONL of turns).

    zkr import --db PATH --tenant T --person P [--format auto|chatgpt|claude|jsonl] FILE

Every turn becomes one ``remember`` (kind ``conversation``, text ``ROLE: TEXT``) with an
ingestion key derived from the export's own ids, and ``captured_at = recorded_at`` = the turn's
time (else its conversation's; a turn with neither is skipped and counted as undated), so a
second import of the same file replays every key and changes nothing: the database is the same.
Turns are stored in batches through ``remember_many(outcomes=True)``: a turn whose memory was
deleted since is skipped and counted (``deleted``), never re-ingested; a bad turn fails alone
(``failed``, with the first few messages). On a terminal a progress bar (tqdm) runs on stderr.
The summary is one JSON object on stdout; a bad command line or unreadable file is one
``{"error"}`` line on stderr and exit status 1, as for any CLI call.

Formats (``auto`` looks at the file):

* ``chatgpt`` — ``conversations.json`` of a ChatGPT data export: a list of conversations with a
  ``mapping`` of message nodes; the thread ending at ``current_node`` is imported (edited-away
  branches are not), user and assistant text parts only. Key ``chatgpt:CONV:MESSAGE``.
* ``claude`` — ``conversations.json`` of a Claude export: a list of conversations with
  ``chat_messages`` (``sender`` human/assistant, ``text`` or text ``content`` blocks, ISO 8601
  ``created_at``). Key ``claude:CONV:MESSAGE``.
* ``jsonl`` — one JSON object per line: ``text`` (or ``content``), optional ``role``,
  ``conversation_id``, ``id``, and a time as ``created_at``/``timestamp`` (Unix seconds or ISO
  8601). Key ``jsonl:CONV:ID``, or ``jsonl:sha256(...)`` of the line's fields when it has no id.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, NamedTuple, TextIO

from zkr.codec import cli_dumps
from zkr.errors import RequestError, ZkrError

FORMATS = ("auto", "chatgpt", "claude", "jsonl")
BATCH = 500
MAX_REPORTED_ERRORS = 10
USAGE = "usage: zkr import --db PATH --tenant T --person P [--format FORMAT] FILE"


class Turn(NamedTuple):
    """One chat turn ready to store: ingestion key, role, text, Unix seconds (or ``None``)."""

    key: str
    role: str
    text: str
    at: int | None


def _seconds(value: Any) -> int | None:
    """A Unix time (int or float seconds) or an ISO 8601 string as integer seconds."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip():
        try:
            return int(datetime.fromisoformat(value.strip().replace("Z", "+00:00")).timestamp())
        except ValueError:
            return None
    return None


# --------------------------------------------------------------------------- formats


def chatgpt_turns(data: Any) -> Iterator[Turn]:
    """Turns of a ChatGPT ``conversations.json`` (the thread ending at ``current_node``)."""
    for conversation in _conversations(data):
        conv_id = str(conversation.get("conversation_id") or conversation.get("id") or "")
        mapping = conversation.get("mapping")
        if not isinstance(mapping, dict):
            continue
        conv_time = _seconds(conversation.get("create_time"))
        node_id = conversation.get("current_node")
        thread: list[dict[str, Any]] = []
        seen: set[str] = set()
        while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
            seen.add(node_id)
            node = mapping[node_id]
            if not isinstance(node, dict):
                break
            thread.append(node)
            node_id = node.get("parent")
        for node in reversed(thread):
            message = node.get("message")
            if not isinstance(message, dict):
                continue
            author = message.get("author")
            role = author.get("role") if isinstance(author, dict) else None
            if role not in ("user", "assistant"):
                continue
            content = message.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            if not isinstance(parts, list):
                continue
            text = "\n".join(p for p in parts if isinstance(p, str)).strip()
            message_id = str(message.get("id") or node.get("id") or "")
            at = _seconds(message.get("create_time")) or conv_time
            yield Turn(f"chatgpt:{conv_id}:{message_id}", role, text, at)


def claude_turns(data: Any) -> Iterator[Turn]:
    """Turns of a Claude ``conversations.json``."""
    for conversation in _conversations(data):
        conv_id = str(conversation.get("uuid") or "")
        conv_time = _seconds(conversation.get("created_at"))
        messages = conversation.get("chat_messages")
        if not isinstance(messages, list):
            continue
        for message in messages:
            if not isinstance(message, dict):
                continue
            sender = message.get("sender")
            role = {"human": "user", "assistant": "assistant"}.get(str(sender))
            if role is None:
                continue
            text = message.get("text")
            if not isinstance(text, str) or not text.strip():
                blocks = message.get("content")
                text = "\n".join(
                    block["text"]
                    for block in (blocks if isinstance(blocks, list) else [])
                    if isinstance(block, dict)
                    and block.get("type") == "text"
                    and isinstance(block.get("text"), str)
                )
            at = _seconds(message.get("created_at")) or conv_time
            yield Turn(f"claude:{conv_id}:{message.get('uuid', '')}", role, text.strip(), at)


def jsonl_turns(lines: Iterable[str]) -> Iterator[Turn]:
    """Turns of a JSONL file (one object per line; blank lines ignored)."""
    import hashlib

    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RequestError(f"line {number}: {exc.msg}") from None
        if not isinstance(item, dict):
            raise RequestError(f"line {number}: expected a JSON object")
        text = item.get("text", item.get("content"))
        if not isinstance(text, str):
            raise RequestError(f"line {number}: missing string field `text`")
        role = str(item.get("role") or "user")
        at = _seconds(item.get("created_at", item.get("timestamp")))
        conv = item.get("conversation_id")
        if item.get("id") is not None:
            key = f"jsonl:{conv or ''}:{item['id']}"
        else:
            digest = hashlib.sha256(
                json.dumps([conv, role, text, at], ensure_ascii=False).encode()
            ).hexdigest()
            key = f"jsonl:{digest[:32]}"
        yield Turn(key, role, text.strip(), at)


def _conversations(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, dict):  # a single conversation
        data = [data]
    if not isinstance(data, list):
        raise RequestError("expected a JSON array of conversations")
    return [c for c in data if isinstance(c, dict)]


def detect(path: str) -> str:
    """Guess the format of ``path`` from its first bytes and first conversation."""
    with open(path, encoding="utf-8") as handle:
        head = handle.read(65536).lstrip()
    if not head.startswith("["):
        return "jsonl"
    if '"mapping"' in head:
        return "chatgpt"
    if '"chat_messages"' in head:
        return "claude"
    raise RequestError("cannot tell the file's format; pass --format chatgpt, claude or jsonl")


def read_turns(path: str, fmt: str) -> list[Turn]:
    """Every turn of the file, in file order."""
    if fmt == "auto":
        fmt = detect(path)
    try:
        with open(path, encoding="utf-8") as handle:
            if fmt == "jsonl":
                return list(jsonl_turns(handle))
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        raise RequestError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RequestError(f"cannot read {path}: {exc}") from None
    return list(chatgpt_turns(data) if fmt == "chatgpt" else claude_turns(data))


# --------------------------------------------------------------------------- storing


def import_turns(
    db: Any, tenant_id: str, person_id: str, turns: list[Turn], progress: Any = None
) -> dict[str, Any]:
    """Store ``turns`` into the (tenant, person) scope of ``db``; returns the summary counts.

    ``progress``, when given, is called with the number of turns just handled.
    """
    from zkr.model import RememberRequest, SourceKind

    counts = {"stored": 0, "replayed": 0, "deleted": 0, "failed": 0, "empty": 0, "undated": 0}
    errors: list[dict[str, str]] = []
    batch: list[tuple[Turn, RememberRequest]] = []

    def flush() -> None:
        outcomes = db.remember_many([req for _, req in batch], outcomes=True)
        for (turn, _), outcome in zip(batch, outcomes, strict=True):
            counts[outcome.status] += 1
            if outcome.status == "failed" and len(errors) < MAX_REPORTED_ERRORS:
                errors.append({"key": turn.key, "error": outcome.error or ""})
        if progress is not None:
            progress(len(batch))
        batch.clear()

    for turn in turns:
        if not turn.text or turn.at is None:
            counts["empty" if not turn.text else "undated"] += 1
            if progress is not None:
                progress(1)
            continue
        request = RememberRequest(
            tenant_id,
            person_id,
            SourceKind.CONVERSATION,
            f"{turn.role}: {turn.text}",
            turn.at,
            turn.at,
            turn.key,
        )
        batch.append((turn, request))
        if len(batch) >= BATCH:
            flush()
    if batch:
        flush()
    return {"turns": len(turns), **counts, "errors": errors}


def _parse_args(argv: list[str]) -> tuple[str, str, str, str, str]:
    options: dict[str, str] = {"--format": "auto"}
    files: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("--db", "--tenant", "--person", "--format"):
            if not rest:
                raise RequestError(USAGE)
            options[arg] = rest.pop(0)
        elif arg.startswith("--"):
            raise RequestError(USAGE)
        else:
            files.append(arg)
    if len(files) != 1 or not all(k in options for k in ("--db", "--tenant", "--person")):
        raise RequestError(USAGE)
    if options["--format"] not in FORMATS:
        raise RequestError(f"--format must be one of {', '.join(FORMATS)}")
    return options["--db"], options["--tenant"], options["--person"], options["--format"], files[0]


def main(argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``zkr import ...`` (see the module doc); returns the exit status."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    if argv in (["--help"], ["-h"], ["help"]):
        out.write(__doc__ or "")
        return 0
    from zkr.memory import MemoryDb
    from zkr.text import require_scope

    try:
        path, tenant, person, fmt, file = _parse_args(argv)
        require_scope(tenant, person)
        turns = read_turns(file, fmt)
        with MemoryDb.open(path) as db:
            bar = None
            if err.isatty():
                from tqdm import tqdm

                bar = tqdm(total=len(turns), unit="turn", file=err, dynamic_ncols=True)
            try:
                summary = import_turns(
                    db, tenant, person, turns, None if bar is None else bar.update
                )
            finally:
                if bar is not None:
                    bar.close()
    except ZkrError as exc:
        err.write(cli_dumps({"error": exc.message}) + "\n")
        return 1
    out.write(cli_dumps({"format": detect(file) if fmt == "auto" else fmt, **summary}) + "\n")
    return 0
