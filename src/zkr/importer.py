"""``zkr import``: bring chat history in (a ChatGPT or Claude export, or a JSONL of turns).

    zkr import --db PATH --tenant T --person P [--format auto|chatgpt|claude|jsonl] FILE

FILE ``-`` reads standard input.

Every turn becomes one ``remember`` (kind ``conversation``, text ``ROLE: TEXT``) with an
ingestion key derived from the export's own ids, and ``captured_at = recorded_at`` = the turn's
time (else its conversation's; a turn with neither is skipped and counted as undated), so a
second import of the same file replays every key and changes nothing: the database is the same.
Turns are stored in batches through ``remember_many(outcomes=True)``: a turn whose memory was
deleted since is skipped and counted (``deleted``), never re-ingested; a bad turn (in JSONL, a
bad line) fails alone (``failed``, with the first ten messages in ``errors``, each with the
turn's ``key`` and, in JSONL, its ``line``). On a terminal a progress bar (tqdm) runs on stderr.
The summary is one JSON object on stdout; a bad command line, a missing, unreadable or non-UTF-8
file, or a file without the shape of the chosen format is one ``{"error"}`` line on stderr and
exit status 1, as for any CLI call, and nothing is stored.

Formats (``auto``, the default, looks at the file: a JSON array with ``mapping`` is chatgpt, with
``chat_messages`` claude, anything not starting with ``[`` (or whose first line is a whole JSON
value with more lines after it) jsonl):

* ``chatgpt`` — ``conversations.json`` of a ChatGPT data export: a list of conversations with a
  ``mapping`` of message nodes; the thread ending at ``current_node`` is imported (edited-away
  branches are not), user and assistant text parts only. Key ``chatgpt:CONV:MESSAGE``. Times are
  float Unix seconds (``create_time``), truncated to whole seconds.
* ``claude`` — ``conversations.json`` of a Claude export: a list of conversations with
  ``chat_messages`` (``sender`` human/assistant, ``text`` or text ``content`` blocks, ISO 8601
  ``created_at``, fractions of a second truncated). Key ``claude:CONV:MESSAGE``.
* ``jsonl`` — one JSON object per line: ``text`` (or ``content``, a string), optional ``role``
  (a string), ``conversation_id``, ``id``, and a time as ``created_at``/``timestamp`` (whole
  Unix seconds or an ISO 8601 string, UTC when it has no offset; ``1.7`` or an unreadable time
  fails that line, no time counts it ``undated``). Key ``jsonl:CONV:ID``, or
  ``jsonl:sha256(...)`` of the line's fields when it has no id. A line that is not such an
  object fails alone; a file with no JSON object line at all is refused.

A chatgpt or claude file must be a JSON array of conversations (or one conversation) of which at
least one has the format's ``mapping`` / ``chat_messages``; otherwise (say ``--format claude`` on
a ChatGPT export) the import is refused, naming the format expected.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple, TextIO

from zkr.codec import I64_MAX, I64_MIN, cli_dumps, parse_json, require_utf8
from zkr.dbpath import refuse_throwaway
from zkr.errors import RequestError, ZkrError
from zkr.output import respond

FORMATS = ("auto", "chatgpt", "claude", "jsonl")
BATCH = 500
MAX_REPORTED_ERRORS = 10
USAGE = "usage: zkr import --db PATH --tenant T --person P [--format FORMAT] FILE"


class Turn(NamedTuple):
    """One chat turn ready to store: ingestion key, role, text, Unix seconds (or ``None``).

    ``line`` is the 1-based JSONL line (``None`` for chat exports); ``error`` set means the line
    could not be read as a turn (it is counted ``failed``, never stored).
    """

    key: str
    role: str
    text: str
    at: int | None
    line: int | None = None
    error: str | None = None


def _iso_seconds(value: str) -> int | None:
    """An ISO 8601 string as integer Unix seconds (fraction truncated), ``None`` if unreadable.

    A time without an offset (``2026-05-01T10:00:00``) is UTC, never the machine's local zone:
    the same file must give the same times (and ingestion payloads) wherever it is imported.
    """
    try:
        at = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        return int(at.timestamp())
    except (ValueError, OverflowError, OSError):
        return None


def _seconds(value: Any) -> int | None:
    """A chat export's time: Unix seconds (int or float, truncated to whole seconds) or an ISO
    8601 string as integer seconds; ``None`` for a missing, non-finite or unreadable time."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str) and value.strip():
        return _iso_seconds(value)
    return None


def _jsonl_seconds(name: str, value: Any) -> int | None:
    """A JSONL line's time: whole Unix seconds or an ISO 8601 string; ``None`` when absent.

    Raises ``ValueError`` (the line's message) for anything else: ``1.7``, ``true``, ``"soon"``,
    a number outside the signed 64-bit range.
    """
    if value is None:
        return None
    at: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        at = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        at = int(value)
    elif isinstance(value, str) and value.strip():
        at = _iso_seconds(value)
    # beyond i64 the message would name remember's `captured_at`, not this line's field
    if at is not None and I64_MIN <= at <= I64_MAX:
        return at
    raise ValueError(
        f"field `{name}` must be whole Unix seconds or an ISO 8601 string,"
        f" got {json.dumps(value, ensure_ascii=False)[:40]}"
    )


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
    """Turns of a JSONL file (one object per line; blank lines ignored).

    A line that is not a turn yields a ``Turn`` with ``error`` set (it fails alone).
    """
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield _jsonl_turn(number, line)
        except ValueError as exc:
            yield Turn("", "", "", None, number, str(exc))


def _jsonl_turn(number: int, line: str) -> Turn:
    """One JSONL line as a turn; raises ``ValueError`` with the reason it is not one."""
    try:  # the CLI's JSON rules: no NaN, no duplicate field, no number past a double
        item = parse_json(line, lone_surrogates=True)
    except RequestError as exc:
        raise ValueError(f"not valid JSON: {exc.message}") from None
    if not isinstance(item, dict):
        raise ValueError("expected a JSON object")
    field = "text" if "text" in item else "content"
    text = item.get(field)
    if text is None:
        raise ValueError("missing field `text`")
    if not isinstance(text, str):
        raise ValueError(f"field `{field}` must be a string")
    role = item.get("role")
    if role is None:
        role = "user"
    elif not isinstance(role, str):
        raise ValueError("field `role` must be a string")
    role = role or "user"
    name = "created_at" if item.get("created_at") is not None else "timestamp"
    at = _jsonl_seconds(name, item.get(name))
    conv = item.get("conversation_id")
    if item.get("id") is not None:
        key = f"jsonl:{conv or ''}:{item['id']}"
    else:
        # surrogatepass: a lone surrogate still gets a key (and then fails alone in remember)
        digest = hashlib.sha256(
            json.dumps([conv, role, text, at], ensure_ascii=False).encode("utf-8", "surrogatepass")
        ).hexdigest()
        key = f"jsonl:{digest[:32]}"
    return Turn(key, role, text.strip(), at, number)


def _conversations(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, dict):  # a single conversation
        data = [data]
    if not isinstance(data, list):
        raise RequestError("expected a JSON array of conversations")
    return [c for c in data if isinstance(c, dict)]


SHAPES = {
    "chatgpt": ("mapping", "a ChatGPT export: a JSON array of conversations with a `mapping`"),
    "claude": (
        "chat_messages",
        "a Claude export: a JSON array of conversations with `chat_messages`",
    ),
}


def _check_shape(fmt: str, data: Any) -> None:
    """Refuse a chatgpt/claude file none of whose conversations has that format's shape."""
    field, expected = SHAPES[fmt]
    conversations = [data] if isinstance(data, dict) else data
    if isinstance(conversations, list) and (
        not conversations or any(isinstance(c, dict) and field in c for c in conversations)
    ):
        return
    raise RequestError(f"not a {fmt} file: expected {expected} (or pass the right --format)")


def detect_text(text: str) -> str:
    """Guess the format of a file's text from its first 64 KiB (see the module doc)."""
    head = text[:65536].lstrip()
    if not head.startswith("["):
        return "jsonl"
    if '"mapping"' in head:
        return "chatgpt"
    if '"chat_messages"' in head:
        return "claude"
    first, _, rest = head.partition("\n")
    if rest.strip():  # a complete JSON first line with more lines after it: JSONL
        try:
            json.loads(first)
            return "jsonl"
        except (ValueError, RecursionError):  # (JSONDecodeError, or past the digit limit)
            pass
    raise RequestError("cannot tell the file's format; pass --format chatgpt, claude or jsonl")


def read_text(file: str) -> str:
    """The whole of ``file`` (``-``: standard input) as text; ``RequestError`` when it cannot be
    read or is not UTF-8 (a leading byte order mark is dropped)."""
    name = "standard input" if file == "-" else file
    try:
        if file == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(file, "rb") as handle:
                raw = handle.read()
    except OSError as exc:
        raise RequestError(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise RequestError(f"{name} is not UTF-8 text (bad byte at offset {exc.start})") from None


def read_turns(file: str, fmt: str) -> tuple[str, list[Turn]]:
    """The format (``auto`` resolved) and every turn of ``file``, in file order.

    Raises ``RequestError`` for an unreadable file or one without the shape of the format.
    """
    text = read_text(file)
    if fmt == "auto":
        fmt = detect_text(text)
    if fmt == "jsonl":
        turns = list(jsonl_turns(text.split("\n")))  # not splitlines: U+2028 is JSON text
        if turns and all(t.error for t in turns):
            raise RequestError(
                "not a jsonl file: expected one JSON object per line with a `text`"
                f" (line {turns[0].line}: {turns[0].error}; or pass the right --format)"
            )
        return fmt, turns
    name = "standard input" if file == "-" else file
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(
            f"{name} is not valid JSON: {exc.msg} at line {exc.lineno} (expected {SHAPES[fmt][1]})"
        ) from None
    except RecursionError:
        raise RequestError(f"{name} is not valid JSON: nested too deeply") from None
    except ValueError:  # an integer literal longer than Python's digit limit
        raise RequestError(f"{name} is not valid JSON: number out of range") from None
    _check_shape(fmt, data)
    return fmt, list(chatgpt_turns(data) if fmt == "chatgpt" else claude_turns(data))


# --------------------------------------------------------------------------- storing


def import_turns(
    db: Any, tenant_id: str, person_id: str, turns: list[Turn], progress: Any = None
) -> dict[str, Any]:
    """Store ``turns`` into the (tenant, person) scope of ``db``; returns the summary counts.

    ``progress``, when given, is called with the number of turns just handled.
    """
    from zkr.model import RememberRequest, SourceKind

    counts = {"stored": 0, "replayed": 0, "deleted": 0, "failed": 0, "empty": 0, "undated": 0}
    errors: list[dict[str, Any]] = []
    batch: list[tuple[Turn, RememberRequest]] = []

    def fail(turn: Turn, message: str) -> None:
        counts["failed"] += 1
        error: dict[str, Any] = {"error": message}
        if turn.key:
            error["key"] = turn.key
        if turn.line is not None:
            error["line"] = turn.line
        errors.append(error)

    def flush() -> None:
        outcomes = db.remember_many([req for _, req in batch], outcomes=True)
        for (turn, _), outcome in zip(batch, outcomes, strict=True):
            if outcome.status == "failed":
                fail(turn, outcome.error or "")
            else:
                counts[outcome.status] += 1
        if progress is not None:
            progress(len(batch))
        batch.clear()

    for turn in turns:
        if turn.error is not None:
            fail(turn, turn.error)
            if progress is not None:
                progress(1)
            continue
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
    errors.sort(key=lambda e: int(e.get("line", 0)))  # file order (stable for chat exports)
    return {"turns": len(turns), **counts, "errors": errors[:MAX_REPORTED_ERRORS]}


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
        from zkr.clihelp import plain_text

        return respond(out, err, plain_text(__doc__ or ""))  # the text of `zkr help import`
    from zkr.memory import MemoryDb
    from zkr.text import require_scope

    try:
        path, tenant, person, fmt, file = _parse_args(argv)
        refuse_throwaway(path)
        require_scope(tenant, person)
        require_utf8(tenant, "--tenant")
        require_utf8(person, "--person")
        fmt, turns = read_turns(file, fmt)
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
    # the turns are stored: a stdout that fails is reported as such (zkr.output), and importing
    # the file again replays them
    return respond(out, err, cli_dumps({"format": fmt, **summary}) + "\n")
