"""``zkr import``: bring chat history in (a ChatGPT or Claude export, OpenAI-style chat
messages, or a JSONL of turns).

    zkr import --db PATH --tenant T --person P [--format auto|chatgpt|claude|openai|jsonl]
               [--time WHEN] FILE

FILE ``-`` reads standard input. The export's ZIP archive, as ChatGPT and Claude hand it out,
may be given as it is: its one ``conversations.json`` is read; a gzip file is decompressed.

Every turn becomes one ``remember`` (kind ``conversation``, text ``ROLE: TEXT``) with an
ingestion key derived from the export's own ids (see Keys), and ``captured_at = recorded_at`` =
the turn's time, so a second import of the same file replays every key and changes nothing: the
database is the same. Turns are stored in batches through ``remember_many(outcomes=True)``: a
turn whose memory was deleted since is skipped and counted (``deleted``), never re-ingested; a
bad turn (in JSONL, a bad line) fails alone (``failed``, with the first ten messages, in file
order, in ``errors``, each with the turn's ``key`` when it has one and, in JSONL, its
``line``). On a terminal a progress bar (tqdm) runs on stderr. The summary is one JSON
object on stdout; a bad command line, a missing, unreadable or non-UTF-8 file, a device
(``/dev/zero``; a terminal on ``-`` is read), or a file without the shape of the chosen format
is one ``{"error"}`` line on stderr and exit status 1, as for any CLI call, and nothing is
stored (a file too large for memory: ``out of memory: FILE is too large ...``). A missing
directory of the database is created (``mkdir -p``, mode 0700) once FILE was read.

Times: a message's own time is used when it has one (``0`` included); a message without one
(missing or ``null``) takes its conversation's (chat exports only); a turn with neither is
skipped and counted ``undated``, unless ``--time WHEN`` is given (whole Unix seconds or ISO 8601,
UTC without an offset): then it is stored at WHEN. A file none of whose turns has a time is
refused without ``--time`` (``no turn of FILE has a time: pass --time WHEN ...``; OpenAI-style
messages usually carry none). WHEN is no part of any key: pass the same WHEN on a re-import
(another one fails those turns as conflicts). The file's modification time is never used (a copy
changes it, and a re-import must send the same time). A time that is there but unreadable
(``"soon"``, ``""``, ``true``, ``Infinity``, past 64 bits) fails that turn alone, never falls
back; in a chat export an unreadable conversation time fails only the messages without a time
of their own.

Formats (``auto``, the default, looks at the file: a JSON array with ``mapping`` is chatgpt, with
``chat_messages`` claude, with ``role`` openai; an object whose first line (or whole text) holds
``messages`` and no ``text``/``content`` openai; anything else not starting with ``[`` (or whose
first line is a whole JSON value with more lines after it) jsonl):

* ``chatgpt`` — ``conversations.json`` of a ChatGPT data export: a list of conversations with a
  ``mapping`` of message nodes; the thread ending at ``current_node`` is imported (edited-away
  branches are not; without a ``current_node`` in the mapping, the thread ending at the newest
  leaf), user and assistant text parts and voice transcripts only. Times are float Unix seconds
  (``create_time``), truncated to whole seconds.
* ``claude`` — ``conversations.json`` of a Claude export: a list of conversations with
  ``chat_messages`` (``sender`` human/assistant, ``text`` or text ``content`` blocks, ISO 8601
  ``created_at``, fractions of a second truncated).
* ``openai`` — OpenAI-style chat messages: a JSON array of ``{"role", "content"}`` objects, an
  object with ``messages`` (optional ``id``/``conversation_id``), an array of such objects, or
  one per line (a fine-tuning file; a line that is no such object fails alone). User and
  assistant messages only (system, developer, tool and function messages are left out);
  ``content`` a string or a list of ``text``/``input_text``/``output_text`` parts (joined by
  newlines; images and other parts add no line), ``null`` empty; optional ``id`` and a time as
  ``created_at``/``timestamp`` on the message or its conversation (Unix seconds or ISO 8601).
* ``jsonl`` — one JSON object per line: ``text`` (or ``content``, a string), optional ``role``
  (a string), ``conversation_id``, ``id``, and a time as ``created_at``/``timestamp`` (whole
  Unix seconds or an ISO 8601 string, UTC when it has no offset; ``1.7`` fails that line). A
  line that is not such an object fails alone; a file with no JSON object line at all is
  refused.

A chatgpt or claude file must be a JSON array of conversations (or one conversation) of which at
least one has the format's ``mapping`` / ``chat_messages``; otherwise (say ``--format claude`` on
a ChatGPT export) the import is refused, naming the format expected.

Keys (FMT is chatgpt, claude, openai or jsonl; CONV the conversation's id, ID the message's:
ChatGPT's ``conversation_id``/``id`` and message ``id``, Claude's ``uuid``s, OpenAI-style and
JSONL's ``conversation_id``/``id``; a ``null`` or missing one is none, as is ``""`` in a chat
export):

* ``FMT:CONV:ID`` when CONV is none or a string without ``:`` and ID is a string (no CONV:
  ``FMT::ID``) — the common case, and the key of every release;
* else ``FMT`` + the compact JSON array ``[CONV, ID]``, so no two distinct turns share a key:
  ``jsonl["a:b","c"]`` is not ``jsonl:a:b:c`` (conversation ``a``, id ``b:c``), ``jsonl["s",1]``
  (an integer id) is not ``jsonl:s:1``, ``jsonl["","x"]`` (conversation ``""``) is not
  ``jsonl::x``;
* a chat message without an id: ``FMT[CONV,null,DIGEST,N]``, DIGEST of its role, text and time,
  N the number of such messages of the conversation with the same DIGEST before it (two
  identical messages are two turns; openai: of every conversation without an id, counted
  together, CONV ``null``);
* a JSONL line without an ``id``: ``jsonl:`` + 32 hex digits of the SHA-256 of its
  conversation, role, text and time (and, for the second and later of identical lines, its
  count: each line is a turn).

A lone surrogate in an id (``\\ud83d``: a string cut inside a surrogate pair) is written in the
key as that escape, so the turn is stored and replays; in a turn's text it fails that turn alone.

Imports before these keys gave the turns of the second and third cases ``FMT:CONV:ID``
(``FMT:CONV:`` without an id), shared by distinct turns. Such a turn is sent under that old key
when the database holds its very text and time there and no other turn of the file owns it,
or holds a deleted memory there and the turn is the file's first with that key (it stays
deleted), so files imported before replay instead of being stored twice; the turns those
imports lost to a shared key are stored now, under their own keys.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO

from zkr.codec import (
    I64_MAX,
    I64_MIN,
    cli_dumps,
    escape_surrogates,
    parse_json,
    require_utf8,
)
from zkr.dbpath import prepare_own, refuse_throwaway
from zkr.errors import RequestError, ZkrError
from zkr.importfile import display_name, read_text
from zkr.importkeys import Unnamed, canonical, choose_keys, digest, id_key
from zkr.output import respond

if TYPE_CHECKING:
    from zkr.model import RememberRequest

FORMATS = ("auto", "chatgpt", "claude", "openai", "jsonl")
BATCH = 500
MAX_REPORTED_ERRORS = 10
USAGE = "usage: zkr import --db PATH --tenant T --person P [--format FORMAT] [--time WHEN] FILE"


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


def _iso_seconds(value: str) -> int | None:
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


def _read_time(name: str, value: Any, *, whole: bool) -> int | None:
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
        at = _iso_seconds(value)
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
    ``ValueError`` for anything else (see :func:`_read_time`)."""
    return _read_time(f"field `{name}`", value, whole=True)


class _ChatTime(NamedTuple):
    """A conversation's time (the fallback of its messages without one) or why it is unreadable."""

    at: int | None
    error: str | None

    @classmethod
    def read(cls, conversation: dict[str, Any], name: str) -> _ChatTime:
        try:
            return cls(
                _read_time(f"conversation field `{name}`", conversation.get(name), whole=False),
                None,
            )
        except ValueError as exc:
            return cls(None, str(exc))

    def message_time(self, message: dict[str, Any], name: str) -> int | None:
        """The message's own time, else (absent or ``null``) the conversation's; ``None``
        when neither is there (the turn is counted ``undated``). Raises ``ValueError`` for an
        unreadable message time, or an unreadable conversation time the message would use."""
        at = _read_time(f"field `{name}`", message.get(name), whole=False)
        if at is not None:
            return at
        if self.error is not None:
            raise ValueError(self.error)
        return self.at


# --------------------------------------------------------------------------- formats


def _id(value: Any) -> Any:
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
                at = _read_time("", value, whole=False)
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
    for conversation in _conversations(data):
        conv = _id(conversation.get("conversation_id") or conversation.get("id"))
        mapping = conversation.get("mapping")
        if not isinstance(mapping, dict):
            continue
        conv_time = _ChatTime.read(conversation, "create_time")
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
                _id(message.get("id") or node.get("id")),
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
    for conversation in _conversations(data):
        conv = _id(conversation.get("uuid"))
        conv_time = _ChatTime.read(conversation, "created_at")
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
                _id(message.get("uuid")),
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
    conv_time: _ChatTime,
    message: dict[str, Any],
    field: str,
) -> Turn:
    """One chat export message as a turn: its key (:func:`id_key`, or :class:`Unnamed` without
    an id) and time (:meth:`_ChatTime.message_time`; an unreadable one fails the turn alone)."""
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


OPENAI_ROLES = ("user", "assistant")
"""The OpenAI message roles imported (``system``, ``developer``, ``tool`` and ``function``
messages are instructions and tool traffic, not the person's conversation)."""

OPENAI_PARTS = ("text", "input_text", "output_text")
"""Content part types whose ``text`` is a turn's text (Chat Completions' ``text``, the
Responses API's ``input_text``/``output_text``); images, audio and refusals add no line."""

OPENAI_SHAPE = (
    "OpenAI-style chat messages: a JSON array of {role, content} objects, an object with"
    " `messages`, an array of such objects or one per line"
)


def _openai_text(content: Any) -> str:
    """The text of an OpenAI message's ``content``: a string, or the ``text`` of its text parts
    (:data:`OPENAI_PARTS`; a bare string part too) joined by newlines; ``null`` is empty.
    Raises ``ValueError`` for any other type (the turn fails alone)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") in OPENAI_PARTS:
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts).strip()
    raise ValueError("field `content` must be a string or a list of content parts")


def _time_field(item: dict[str, Any]) -> str:
    """Which of ``created_at``/``timestamp`` holds ``item``'s time (as in JSONL)."""
    return "created_at" if item.get("created_at") is not None else "timestamp"


def openai_conversation_turns(
    conversation: dict[str, Any], unnamed: dict[Any, Unnamed], line: int | None = None
) -> Iterator[Turn]:
    """Turns of one OpenAI-style conversation (``{"messages": [...]}``, optional ``id`` or
    ``conversation_id`` and time), user and assistant messages only, in order.

    Keys: ``openai:CONV:ID`` for a message with an ``id`` (:func:`id_key`; no release had this
    format, so no alias); without one, :class:`Unnamed`'s content-and-count key, one counter
    per conversation id, shared by every conversation without one (``unnamed``), so two
    id-less conversations opening with the same ``hi`` are two turns and appending
    conversations or messages to the file keeps every earlier key. The key digests the
    message's own time (or its conversation's), never ``--time``'s default.
    """
    conv = _id(conversation.get("conversation_id") or conversation.get("id"))
    conv_time = _ChatTime.read(conversation, _time_field(conversation))
    messages = conversation.get("messages")
    keys = unnamed.setdefault(canonical(conv), Unnamed("openai", conv))
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("role") not in OPENAI_ROLES:
            continue
        role = str(message["role"])
        error: str | None = None
        try:
            text = _openai_text(message.get("content"))
            at = conv_time.message_time(message, _time_field(message))
        except ValueError as exc:
            text, at, error = "", None, str(exc)
        ident = _id(message.get("id"))
        if ident is None:
            key = keys.key(role, text, at)
        else:
            key = id_key("openai", conv, ident, f"openai:{conv or ''}:{ident}")[0]
        yield Turn(key, role, text, at, line, error)


def _openai_conversations(data: Any) -> list[dict[str, Any]] | None:
    """The conversations of a parsed OpenAI-style file, ``None`` when it has not that shape
    (no message with a ``role`` anywhere; an empty array passes)."""
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return None
    if any(isinstance(c, dict) and isinstance(c.get("messages"), list) for c in data):
        conversations = [
            c for c in data if isinstance(c, dict) and isinstance(c.get("messages"), list)
        ]
    else:
        conversations = [{"messages": data}]
    if not data or any(
        isinstance(m, dict) and "role" in m for c in conversations for m in c["messages"]
    ):
        return conversations
    return None


def openai_turns(text: str, name: str) -> list[Turn]:
    """Every turn of an OpenAI-style file (see :data:`OPENAI_SHAPE`), in file order.

    One object per line (a fine-tuning file: ``{"messages": [...]}`` per line) is read line by
    line: a line that is no such object fails alone, with its number. Raises ``RequestError``
    for a file without the shape (or whose every line fails)."""
    unnamed: dict[Any, Unnamed] = {}
    stripped = text.lstrip()
    first, _, rest = stripped.partition("\n")
    if stripped.startswith("{") and rest.strip() and _whole_json(first):
        turns: list[Turn] = []
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                item = None
            conversations = _openai_conversations(item) if isinstance(item, dict) else None
            if conversations is None:
                problem = "expected a JSON object with `messages`"
                turns.append(Turn("", "", "", None, number, problem))
                continue
            turns.extend(openai_conversation_turns(conversations[0], unnamed, number))
        if turns and all(t.error for t in turns):
            raise RequestError(
                f"not an openai file: expected {OPENAI_SHAPE}"
                f" (line {turns[0].line}: {turns[0].error}; or pass the right --format)"
            )
        return turns
    conversations = _openai_conversations(_load_json(text, name, OPENAI_SHAPE))
    if conversations is None:
        raise RequestError(
            f"not an openai file: expected {OPENAI_SHAPE} (or pass the right --format)"
        )
    return [t for c in conversations for t in openai_conversation_turns(c, unnamed)]


def _whole_json(text: str) -> bool:
    """Whether ``text`` is one complete JSON value."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # (JSONDecodeError, or past the digit limit)
        return False
    return True


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
    """Guess the format of a file's text from its first 64 KiB (see the module doc); an object
    split over several lines is parsed whole to see whether it holds ``messages``."""
    head = text[:65536].lstrip()
    first, _, rest = head.partition("\n")
    if head.startswith("{"):
        try:
            item = json.loads(first if _whole_json(first) else text)
        except (ValueError, RecursionError):
            return "jsonl"  # (its lines fail alone, as before)
        is_conversation = isinstance(item, dict) and isinstance(item.get("messages"), list)
        if is_conversation and item.get("text") is None and item.get("content") is None:
            return "openai"
        return "jsonl"
    if not head.startswith("["):
        return "jsonl"
    if '"mapping"' in head:
        return "chatgpt"
    if '"chat_messages"' in head:
        return "claude"
    if rest.strip() and _whole_json(first):  # a JSON first line with more lines: JSONL
        return "jsonl"
    if '"role"' in head:
        return "openai"
    raise RequestError(
        "cannot tell the file's format; pass --format chatgpt, claude, openai or jsonl"
    )


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
    name = display_name(file)
    if fmt == "openai":
        return fmt, openai_turns(text, name)
    data = _load_json(text, name, SHAPES[fmt][1])
    _check_shape(fmt, data)
    return fmt, list(chatgpt_turns(data) if fmt == "chatgpt" else claude_turns(data))


def _load_json(text: str, name: str, expected: str) -> Any:
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


# --------------------------------------------------------------------------- storing


def import_turns(
    db: Any,
    tenant_id: str,
    person_id: str,
    turns: list[Turn],
    progress: Any = None,
    default_at: int | None = None,
) -> dict[str, Any]:
    """Store ``turns`` into the (tenant, person) scope of ``db``; returns the summary counts.

    ``progress``, when given, is called with the number of turns just handled. The key of each
    turn: :func:`choose_keys`. ``default_at`` (``--time``, Unix seconds) is the time of a turn
    without one; it is not part of any key.
    """
    from zkr.model import RememberRequest, SourceKind

    counts = {"stored": 0, "replayed": 0, "deleted": 0, "failed": 0, "empty": 0, "undated": 0}
    errors: list[tuple[int, dict[str, Any]]] = []  # (turn index, error)
    requests: dict[int, RememberRequest] = {}  # the turns sent to remember, by index
    for index, turn in enumerate(turns):
        at = turn.at if turn.at is not None else default_at
        if turn.error is None and turn.text and at is not None:
            text = f"{turn.role}: {turn.text}"
            requests[index] = RememberRequest(
                tenant_id, person_id, SourceKind.CONVERSATION, text, at, at, turn.key
            )
    # an id cut inside a surrogate pair (a JavaScript exporter) still gives a storable, stable
    # key: the surrogate as its \uXXXX escape (no release stored such a key: no alias needed)
    named = {i: (escape_surrogates(turns[i].key), turns[i].alias) for i in requests}
    keys = choose_keys(db, requests, named)
    batch: list[tuple[int, RememberRequest]] = []

    def fail(index: int, message: str, key: str) -> None:
        counts["failed"] += 1
        # a lone surrogate from the file (a time, an id) must not make the summary unprintable
        error: dict[str, Any] = {"error": escape_surrogates(message)}
        if key:
            error["key"] = escape_surrogates(key)
        line = turns[index].line
        if line is not None:
            error["line"] = line
        errors.append((index, error))

    def flush() -> None:
        outcomes = db.remember_many([req for _, req in batch], outcomes=True)
        for (index, req), outcome in zip(batch, outcomes, strict=True):
            if outcome.status == "failed":
                fail(index, outcome.error or "", req.ingestion_key or "")
            else:
                counts[outcome.status] += 1
        if progress is not None:
            progress(len(batch))
        batch.clear()

    for index, turn in enumerate(turns):
        if index in requests:
            batch.append((index, requests[index]._replace(ingestion_key=keys[index])))
            if len(batch) >= BATCH:
                flush()
            continue
        if turn.error is not None:
            fail(index, turn.error, turn.key)
        else:
            counts["empty" if not turn.text else "undated"] += 1
        if progress is not None:
            progress(1)
    if batch:
        flush()
    errors.sort(key=lambda e: e[0])  # file order: a batch's failures come after later turns'
    return {
        "turns": len(turns),
        **counts,
        "errors": [error for _, error in errors[:MAX_REPORTED_ERRORS]],
    }


class Args(NamedTuple):
    """``zkr import``'s command line: ``--time`` (``default_at``) as Unix seconds or ``None``."""

    db: str
    tenant: str
    person: str
    fmt: str
    file: str
    default_at: int | None


def _parse_args(argv: list[str]) -> Args:
    options: dict[str, str] = {"--format": "auto"}
    files: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("--db", "--tenant", "--person", "--format", "--time"):
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
    default_at = None if "--time" not in options else _cli_time(options["--time"])
    return Args(
        options["--db"],
        options["--tenant"],
        options["--person"],
        options["--format"],
        files[0],
        default_at,
    )


def _cli_time(value: str) -> int:
    """``--time WHEN``: whole Unix seconds (digits, optional sign) or an ISO 8601 time (UTC
    without an offset); ``RequestError`` for anything else."""
    text = value.strip()
    number = text.lstrip("+-")
    try:
        at = _read_time(
            "--time", int(text) if number.isascii() and number.isdigit() else value, whole=True
        )
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    if at is None:  # (never: a string is no null)
        raise RequestError("--time must not be empty")
    return at


def require_a_time(turns: list[Turn], default_at: int | None, file: str) -> None:
    """Refuse, before anything is stored, a file none of whose turns has a time when ``--time``
    is not given (OpenAI-style messages usually carry none): every turn would be skipped as
    ``undated``. A file with some dated turns imports those and counts the others."""
    if default_at is not None:
        return
    candidates = [t for t in turns if t.error is None and t.text]
    if candidates and all(t.at is None for t in candidates):
        raise RequestError(
            f"no turn of {display_name(file)} has a time: pass --time WHEN (Unix seconds or"
            " ISO 8601), the time to store them at (the same WHEN again on a re-import)"
        )


def main(argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """``zkr import ...`` (see the module doc); returns the exit status."""
    out = sys.stdout if stdout is None else stdout
    err = sys.stderr if stderr is None else stderr
    if argv in (["--help"], ["-h"], ["help"]):
        from zkr.clihelp import plain_text

        return respond(out, err, plain_text(__doc__ or ""))  # the text of `zkr help import`
    from zkr.memory import MemoryDb
    from zkr.text import require_scope

    file = ""
    try:
        path, tenant, person, fmt, file, default_at = _parse_args(argv)
        refuse_throwaway(path)
        require_scope(tenant, person)
        require_utf8(tenant, "--tenant")
        require_utf8(person, "--person")
        fmt, turns = read_turns(file, fmt)
        require_a_time(turns, default_at, file)
        prepare_own(path)  # its directory is made only once the file was read
        with MemoryDb.open(path) as db:
            bar = None
            if err.isatty():
                from tqdm import tqdm

                bar = tqdm(total=len(turns), unit="turn", file=err, dynamic_ncols=True)
            try:
                summary = import_turns(
                    db, tenant, person, turns, None if bar is None else bar.update, default_at
                )
            finally:
                if bar is not None:
                    bar.close()
    except ZkrError as exc:
        err.write(cli_dumps({"error": exc.message}) + "\n")
        return 1
    except MemoryError:  # a file (or pipe) larger than memory: say so, not `internal error`
        message = (
            f"out of memory: {display_name(file)} is too large to import at once"
            " (split it; turns already stored stay, and a second import replays them)"
        )
        err.write(cli_dumps({"error": message}) + "\n")
        return 1
    # the turns are stored: a stdout that fails is reported as such (zkr.output), and importing
    # the file again replays them
    return respond(out, err, cli_dumps({"format": fmt, **summary}) + "\n")
