"""OpenAI-style chat messages for ``zkr import --format openai`` (:mod:`zkr.importer`, Formats):
a JSON array of ``{role, content}`` messages, an object with ``messages`` (or an array of them),
or one such object per line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from zkr.errors import RequestError
from zkr.importkeys import Unnamed, canonical, id_key
from zkr.importturns import ChatTime, Turn, json_id, load_json, whole_json

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
    conv = json_id(conversation.get("conversation_id") or conversation.get("id"))
    conv_time = ChatTime.read(conversation, _time_field(conversation))
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
        ident = json_id(message.get("id"))
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
    if stripped.startswith("{") and rest.strip() and whole_json(first):
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
    conversations = _openai_conversations(load_json(text, name, OPENAI_SHAPE))
    if conversations is None:
        raise RequestError(
            f"not an openai file: expected {OPENAI_SHAPE} (or pass the right --format)"
        )
    return [t for c in conversations for t in openai_conversation_turns(c, unnamed)]
