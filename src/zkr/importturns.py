"""The turns of a chat export or a JSONL file (:mod:`zkr.importer`, whose doc is the rules):
:class:`Turn`, the times a turn may carry (one reader for every format), and the ChatGPT,
Claude and JSONL parsers. A turn that cannot be read carries its ``error`` (it fails alone).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

from zkr.codec import I64_MAX, I64_MIN, parse_json
from zkr.errors import RequestError
from zkr.importkeys import Unnamed, digest, id_key


class Turn(NamedTuple):
    """One chat turn ready to store: ingestion key, role, text, Unix seconds (or ``None``).

    ``line`` is the 1-based JSONL line (``None`` for chat exports); ``error`` set means the line
    or message could not be read as a turn (it is counted ``failed``, never stored). ``alias``
    is the key an import before keys were made unambiguous gave this turn, when ``key`` is not
    that key (see :func:`zkr.importkeys.choose_keys`: the turn replays under it where it was
    stored so).
    """

    key: str
    role: str
    text: str
    at: int | None
    line: int | None = None
    error: str | None = None
    alias: str | None = None


def iso_seconds(value: str) -> int | None:
    """An ISO 8601 string as integer Unix seconds (fraction truncated), ``None`` if unreadable.

    A time without an offset (``2026-05-01T10:00:00``) is UTC, never the machine's local zone:
    the same file must give the same times (and ingestion payloads) wherever it is imported.
    """
    try:
        text = value.strip()
        if text[-1:] in ("Z", "z"):  # UTC (RFC 3339 allows either case)
            text = text[:-1] + "+00:00"
        at = datetime.fromisoformat(text)
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        return int(at.timestamp())
    except (ValueError, OverflowError, OSError):
        return None


def read_time(name: str, value: Any, *, whole: bool) -> int | None:
    """A turn's time as integer Unix seconds; ``None`` only when it is absent (``null``).

    Accepted: an integer, an ISO 8601 string (fraction truncated, UTC without an offset) and,
    unless ``whole`` (JSONL), a finite float (truncated: chat exports write ``1714000001.5``).
    ``0`` is a time like any other. Raises ``ValueError`` naming ``name`` for anything else
    (``1.7`` in JSONL, ``true``, ``""``, ``"soon"``, ``Infinity``, a number outside the signed
    64-bit range): a present but unreadable time fails its turn, it never falls back.
    """
    if value is None:
        return None
    at: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        at = value
    elif isinstance(value, float) and math.isfinite(value) and (value.is_integer() or not whole):
        at = int(value)
    elif isinstance(value, str) and value.strip():
        at = iso_seconds(value)
    # beyond i64 the message would name remember's `captured_at`, not the file's field
    if at is not None and I64_MIN <= at <= I64_MAX:
        return at
    unit = "whole Unix seconds" if whole else "Unix seconds"
    raise ValueError(
        f"{name} must be {unit} or an ISO 8601 string,"
        f" got {json.dumps(value, ensure_ascii=False)[:40]}"
    )


def _jsonl_seconds(name: str, value: Any) -> int | None:
    """A JSONL line's time (whole seconds or ISO 8601), ``None`` when absent; raises
    ``ValueError`` for anything else (see :func:`read_time`)."""
    return read_time(f"field `{name}`", value, whole=True)


class ChatTime(NamedTuple):
    """A conversation's time (the fallback of its messages without one) or why it is unreadable."""

    at: int | None
    error: str | None

    @classmethod
    def read(cls, conversation: dict[str, Any], name: str) -> ChatTime:
        try:
            return cls(
                read_time(f"conversation field `{name}`", conversation.get(name), whole=False),
                None,
            )
        except ValueError as exc:
            return cls(None, str(exc))

    def message_time(self, message: dict[str, Any], name: str) -> int | None:
        """The message's own time, else (absent or ``null``) the conversation's; ``None``
        when neither is there (the turn is counted ``undated``). Raises ``ValueError`` for an
        unreadable message time, or an unreadable conversation time the message would use."""
        at = read_time(f"field `{name}`", message.get(name), whole=False)
        if at is not None:
            return at
        if self.error is not None:
            raise ValueError(self.error)
        return self.at


def json_id(value: Any) -> Any:
    """An export's id, ``None`` when it is missing, ``null`` or ``""`` (as its first releases
    read them: ``value or ...``)."""
    return None if value is None or value == "" or value is False else value


def _thread(mapping: dict[str, Any], current: Any) -> list[dict[str, Any]]:
    """The nodes from the root to ``current`` (the conversation's ``current_node``), in order.

    Without a ``current_node`` found in the mapping (an export of another tool, a hand-written
    file), the thread ends at the newest leaf (the node without children whose message has the
    latest readable ``create_time``; the last in the mapping among equals), the branch the
    conversation was last continued on: the conversation is not silently left out.
    """
    if not (isinstance(current, str) and current in mapping):
        newest: tuple[float, int] | None = None
        for index, (node_id, node) in enumerate(mapping.items()):
            children = node.get("children") if isinstance(node, dict) else None
            if not isinstance(node, dict) or (
                isinstance(children, list)
                and any(isinstance(c, str) and c in mapping for c in children)
            ):
                continue
            message = node.get("message")
            value = message.get("create_time") if isinstance(message, dict) else None
            try:
                at = read_time("", value, whole=False)
            except ValueError:
                at = None
            rank = (-math.inf if at is None else at, index)
            if newest is None or rank > newest:
                newest, current = rank, node_id
    thread: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(current, str) and current in mapping and current not in seen:
        seen.add(current)
        node = mapping[current]
        if not isinstance(node, dict):
            break
        thread.append(node)
        current = node.get("parent")
    thread.reverse()
    return thread


def _part_text(part: Any) -> str | None:
    """The text of one ChatGPT content part: a string, or the transcript of a voice message (an
    object with ``content_type`` ``audio_transcription`` and a ``text``, as voice mode writes
    it: such turns used to count ``empty``); ``None`` for other parts (images, audio), which add
    no line, so a turn's text is what earlier releases stored (and a re-import replays it)."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("content_type") == "audio_transcription":
        text = part.get("text")
        return text if isinstance(text, str) else None
    return None


def chatgpt_turns(data: Any) -> Iterator[Turn]:
    """Turns of a ChatGPT ``conversations.json`` (the thread ending at ``current_node``)."""
    for conversation in chat_conversations(data):
        conv = json_id(conversation.get("conversation_id") or conversation.get("id"))
        mapping = conversation.get("mapping")
        if not isinstance(mapping, dict):
            continue
        conv_time = ChatTime.read(conversation, "create_time")
        unnamed = Unnamed("chatgpt", conv)
        for node in _thread(mapping, conversation.get("current_node")):
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
            text = "\n".join(s for p in parts if (s := _part_text(p)) is not None).strip()
            yield _chat_turn(
                "chatgpt",
                conv,
                json_id(message.get("id") or node.get("id")),
                # the first releases' key, verbatim: an import made by one must keep replaying
                f"chatgpt:{conv or ''}:{message.get('id') or node.get('id') or ''}",
                unnamed,
                role,
                text,
                conv_time,
                message,
                "create_time",
            )


def claude_turns(data: Any) -> Iterator[Turn]:
    """Turns of a Claude ``conversations.json``."""
    for conversation in chat_conversations(data):
        conv = json_id(conversation.get("uuid"))
        conv_time = ChatTime.read(conversation, "created_at")
        messages = conversation.get("chat_messages")
        if not isinstance(messages, list):
            continue
        unnamed = Unnamed("claude", conv)
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
            yield _chat_turn(
                "claude",
                conv,
                json_id(message.get("uuid")),
                # the first releases' key, verbatim: an import made by one must keep replaying
                f"claude:{conv or ''}:{message.get('uuid', '')}",
                unnamed,
                role,
                text.strip(),
                conv_time,
                message,
                "created_at",
            )


def _chat_turn(
    fmt: str,
    conv: Any,
    ident: Any,
    legacy: str,
    unnamed: Unnamed,
    role: str,
    text: str,
    conv_time: ChatTime,
    message: dict[str, Any],
    field: str,
) -> Turn:
    """One chat export message as a turn: its key (:func:`id_key`, or :class:`Unnamed` without
    an id) and time (:meth:`ChatTime.message_time`; an unreadable one fails the turn alone)."""
    error: str | None = None
    try:
        at = conv_time.message_time(message, field)
    except ValueError as exc:
        at, error = None, str(exc)
    if ident is None:
        return Turn(unnamed.key(role, text, at), role, text, at, None, error, legacy)
    key, alias = id_key(fmt, conv, ident, legacy)
    return Turn(key, role, text, at, None, error, alias)


def jsonl_turns(lines: Iterable[str]) -> Iterator[Turn]:
    """Turns of a JSONL file (one object per line; blank lines ignored).

    A line that is not a turn yields a ``Turn`` with ``error`` set (it fails alone).
    """
    repeats: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield _jsonl_turn(number, line, repeats)
        except ValueError as exc:
            yield Turn("", "", "", None, number, str(exc))


def _jsonl_turn(number: int, line: str, repeats: dict[str, int]) -> Turn:
    """One JSONL line as a turn; raises ``ValueError`` with the reason it is not one.

    A line without an ``id`` is keyed by a digest of its conversation, role, text and time;
    ``repeats`` counts such lines per digest, so the second of two identical lines gets a digest
    with its count too (a turn of its own, not a replay of the first).
    """
    try:  # the CLI's JSON rules: no NaN, no duplicate field, no number past a double
        item = parse_json(line, lone_surrogates=True)
    except RequestError as exc:
        raise ValueError(f"not valid JSON: {exc.message}") from None
    if not isinstance(item, dict):
        raise ValueError("expected a JSON object")
    field = "text" if item.get("text") is not None else "content"
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
    alias: str | None = None
    if item.get("id") is not None:
        # the first releases' key, verbatim: an import made by one must keep replaying
        key, alias = id_key("jsonl", conv, item["id"], f"jsonl:{conv or ''}:{item['id']}")
    else:
        fields: list[Any] = [conv, role, text, at]
        first = digest(fields)
        count = repeats.get(first, 0)
        repeats[first] = count + 1
        key = f"jsonl:{digest([*fields, count]) if count else first}"
    return Turn(key, role, text.strip(), at, number, alias=alias)


def chat_conversations(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, dict):  # a single conversation
        data = [data]
    if not isinstance(data, list):
        raise RequestError("expected a JSON array of conversations")
    return [c for c in data if isinstance(c, dict)]


def whole_json(text: str) -> bool:
    """Whether ``text`` is one complete JSON value."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # (JSONDecodeError, or past the digit limit)
        return False
    return True


def load_json(text: str, name: str, expected: str) -> Any:
    """``text`` parsed as one JSON value; ``RequestError`` naming the file (and, for a syntax
    error, the shape ``expected``) when it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(
            f"{name} is not valid JSON: {exc.msg} at line {exc.lineno} (expected {expected})"
        ) from None
    except RecursionError:
        raise RequestError(f"{name} is not valid JSON: nested too deeply") from None
    except ValueError:  # an integer literal longer than Python's digit limit
        raise RequestError(f"{name} is not valid JSON: number out of range") from None
