"""The five zkr tools: OpenAI-style schemas and strict argument parsing into CLI requests.

The parsers enforce in code what the schemas promise (required keys, types, enums, ranges),
so a model that ignores the schema gets a precise, locally generated message instead of a
request the CLI would reject. Scope keys are never read from the arguments: the provider adds
the configured ``tenant_id``/``person_id`` afterwards, overwriting anything the model sent.

Time arguments are integer Unix seconds. For convenience the parsers also accept a string of
digits or an ISO-8601 date-time with a UTC offset (``2026-07-21T09:30:00Z``); an explicit
``null`` means "use the default", exactly like leaving the key out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

SOURCE_KINDS = ("conversation", "screen", "audio", "document", "integration", "user_correction")
CLAIM_KINDS = ("fact", "profile_fact", "preference", "task", "skill", "recommendation")
SEARCH_LIMIT_MAX = 50
SEARCH_LIMIT_DEFAULT = 10
EVIDENCE_IDS_MAX = 100
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_DIGITS = re.compile(r"[+-]?\d+")

TOOL_STORE = "zkr_store"
TOOL_SEARCH = "zkr_search"
TOOL_CORRECT = "zkr_correct"
TOOL_DELETE = "zkr_delete"
TOOL_REFLECT = "zkr_reflect"
WRITE_TOOLS = frozenset({TOOL_STORE, TOOL_CORRECT, TOOL_DELETE, TOOL_REFLECT})


class ArgumentError(ValueError):
    """Invalid tool arguments. The message is generated here and safe to show the model."""


@dataclass(frozen=True)
class CliCall:
    command: str
    request: dict[str, Any]


def _time_prop(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def _schema(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


SEARCH_SCHEMA = _schema(
    TOOL_SEARCH,
    "Search zkr memory. Returns cited items (excerpt, memory ref, evidence ids, relevance) "
    "and gaps when nothing matched.",
    {
        "query": {"type": "string", "minLength": 1, "description": "What to look for."},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": SEARCH_LIMIT_MAX,
            "description": f"Maximum items (default {SEARCH_LIMIT_DEFAULT}).",
        },
        "as_of": {
            "type": "object",
            "description": "Optional time travel: what was true at valid_at, as recorded by "
            "recorded_at (both Unix seconds).",
            "properties": {
                "valid_at": _time_prop("World time the facts must hold at."),
                "recorded_at": _time_prop("Only memory recorded up to this time."),
            },
            "required": ["valid_at", "recorded_at"],
            "additionalProperties": False,
        },
    },
    ["query"],
)

STORE_SCHEMA = _schema(
    TOOL_STORE,
    "Store a durable fact, preference, decision or event in zkr memory. Creates a source "
    "holding `content` and a claim (subject, predicate, value) backed by it. Three separate "
    "clocks: captured_at (when the observation was made), valid_from (when the fact became "
    "true; defaults to captured_at) and recorded_at (when memory records it; defaults to now).",
    {
        "content": {
            "type": "string",
            "minLength": 1,
            "description": "The evidence text, in words close to what the user said.",
        },
        "subject": {"type": "string", "minLength": 1, "description": 'Default "user".'},
        "predicate": {"type": "string", "minLength": 1, "description": 'Default "remembers".'},
        "value": {"type": "string", "minLength": 1, "description": "Default: content."},
        "claim_kind": {"type": "string", "enum": list(CLAIM_KINDS), "description": "Default fact."},
        "source_kind": {
            "type": "string",
            "enum": list(SOURCE_KINDS),
            "description": "Default conversation.",
        },
        "captured_at": _time_prop("Unix seconds the observation was captured (default now)."),
        "valid_from": _time_prop("Unix seconds the fact became true (default captured_at)."),
        "recorded_at": _time_prop("Unix seconds memory records it (default now)."),
    },
    ["content"],
)

CORRECT_SCHEMA = _schema(
    TOOL_CORRECT,
    "Correct an accepted claim: supersedes it with a new value backed by new correction "
    "evidence. Use this instead of storing a conflicting fact.",
    {
        "claim_id": {"type": "string", "minLength": 1, "description": "The claim to supersede."},
        "content": {
            "type": "string",
            "minLength": 1,
            "description": "The correction evidence text.",
        },
        "value": {"type": "string", "minLength": 1, "description": "The corrected value."},
        "valid_at": _time_prop("Unix seconds the new value became true (default now)."),
        "recorded_at": _time_prop("Unix seconds memory records it (default now)."),
    },
    ["claim_id", "content", "value"],
)

DELETE_SCHEMA = _schema(
    TOOL_DELETE,
    "Delete a zkr source (tombstone): its evidence, the claims it alone supports and reviews "
    "citing it stop being available.",
    {
        "source_id": {"type": "string", "minLength": 1, "description": "The source to delete."},
        "deleted_at": _time_prop("Unix seconds of the deletion (default now)."),
    },
    ["source_id"],
)

REFLECT_SCHEMA = _schema(
    TOOL_REFLECT,
    "Store a cited daily review (a reflection summarising a day) that cites live evidence ids.",
    {
        "day": {"type": "string", "format": "date", "description": "ISO date, e.g. 2026-07-21."},
        "summary": {"type": "string", "minLength": 1, "description": "The reflection text."},
        "evidence_ids": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "maxItems": EVIDENCE_IDS_MAX,
            "description": "Evidence ids the summary is based on.",
        },
        "recorded_at": _time_prop("Unix seconds memory records it (default now)."),
    },
    ["day", "summary", "evidence_ids"],
)

ALL_SCHEMAS = (STORE_SCHEMA, SEARCH_SCHEMA, CORRECT_SCHEMA, DELETE_SCHEMA, REFLECT_SCHEMA)
TOOL_NAMES = tuple(schema["name"] for schema in ALL_SCHEMAS)


# -- argument helpers -------------------------------------------------------------------


def _present(args: Mapping[str, Any], key: str) -> bool:
    return args.get(key) is not None


def required_text(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if value is None:
        raise ArgumentError(f"{key} is required")
    if not isinstance(value, str):
        raise ArgumentError(f"{key} must be a string")
    if not value.strip():
        raise ArgumentError(f"{key} must not be empty")
    return value


def optional_text(args: Mapping[str, Any], key: str, default: str) -> str:
    return required_text(args, key) if _present(args, key) else default


def optional_enum(args: Mapping[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    if not _present(args, key):
        return default
    value = args[key]
    if not isinstance(value, str) or value not in choices:
        raise ArgumentError(f"{key} must be one of: {', '.join(choices)}")
    return value


def parse_time(value: Any, key: str) -> int:
    """Integer Unix seconds from an int, an integral float, a digit string or ISO-8601."""
    if isinstance(value, bool):
        raise ArgumentError(f"{key} must be integer Unix seconds")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, float) and value.is_integer():
        seconds = int(value)
    elif isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        seconds = int(value.strip())
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ArgumentError(
                f"{key} must be integer Unix seconds or an ISO-8601 date-time"
            ) from None
        if moment.tzinfo is None:
            raise ArgumentError(f"{key} needs a UTC offset (e.g. 2026-07-21T09:30:00Z)")
        seconds = int(moment.timestamp())
    else:
        raise ArgumentError(f"{key} must be integer Unix seconds")
    if not _I64_MIN <= seconds <= _I64_MAX:
        raise ArgumentError(f"{key} is out of range")
    return seconds


def optional_time(args: Mapping[str, Any], key: str, default: int) -> int:
    return parse_time(args[key], key) if _present(args, key) else default


def optional_int(args: Mapping[str, Any], key: str, low: int, high: int, default: int) -> int:
    if not _present(args, key):
        return default
    value = args[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ArgumentError(f"{key} must be an integer from {low} to {high}")
    return value


def text_list(args: Mapping[str, Any], key: str, max_items: int) -> list[str]:
    value = args.get(key)
    if value is None:
        raise ArgumentError(f"{key} is required")
    if not isinstance(value, list) or not value:
        raise ArgumentError(f"{key} must be a non-empty array of strings")
    if len(value) > max_items:
        raise ArgumentError(f"{key} may hold at most {max_items} ids")
    if not all(isinstance(item, str) and item.strip() for item in value):
        raise ArgumentError(f"{key} must hold non-empty strings")
    return list(value)


# -- tool → CLI request -------------------------------------------------------------------


def build_search(args: Mapping[str, Any], now: int) -> CliCall:
    request: dict[str, Any] = {
        "query": required_text(args, "query"),
        "limit": optional_int(args, "limit", 1, SEARCH_LIMIT_MAX, SEARCH_LIMIT_DEFAULT),
    }
    if _present(args, "as_of"):
        as_of = args["as_of"]
        if not isinstance(as_of, Mapping):
            raise ArgumentError("as_of must be an object with valid_at and recorded_at")
        for key in ("valid_at", "recorded_at"):
            if not _present(as_of, key):
                raise ArgumentError(f"as_of.{key} is required")
        request["as_of"] = {
            "valid_at": parse_time(as_of["valid_at"], "as_of.valid_at"),
            "recorded_at": parse_time(as_of["recorded_at"], "as_of.recorded_at"),
        }
    return CliCall("search", request)


def build_store(args: Mapping[str, Any], now: int) -> CliCall:
    content = required_text(args, "content")
    captured_at = optional_time(args, "captured_at", now)
    claim = {
        "subject": optional_text(args, "subject", "user"),
        "predicate": optional_text(args, "predicate", "remembers"),
        "value": optional_text(args, "value", content),
        "kind": optional_enum(args, "claim_kind", CLAIM_KINDS, "fact"),
        # When the fact became true: defaults to when it was observed, never to recorded_at.
        "valid_from": optional_time(args, "valid_from", captured_at),
    }
    return CliCall(
        "remember",
        {
            "kind": optional_enum(args, "source_kind", SOURCE_KINDS, "conversation"),
            "text": content,
            "captured_at": captured_at,
            "recorded_at": optional_time(args, "recorded_at", now),
            "claim": claim,
        },
    )


def build_correct(args: Mapping[str, Any], now: int) -> CliCall:
    return CliCall(
        "correct",
        {
            "claim_id": required_text(args, "claim_id"),
            "text": required_text(args, "content"),
            "value": required_text(args, "value"),
            "valid_at": optional_time(args, "valid_at", now),
            "recorded_at": optional_time(args, "recorded_at", now),
        },
    )


def build_delete(args: Mapping[str, Any], now: int) -> CliCall:
    return CliCall(
        "delete",
        {
            "source_id": required_text(args, "source_id"),
            "deleted_at": optional_time(args, "deleted_at", now),
        },
    )


def build_reflect(args: Mapping[str, Any], now: int) -> CliCall:
    day = required_text(args, "day").strip()
    try:
        date.fromisoformat(day)
    except ValueError:
        raise ArgumentError("day must be an ISO date like 2026-07-21") from None
    if len(day) != 10:
        raise ArgumentError("day must be an ISO date like 2026-07-21")
    return CliCall(
        "review",
        {
            "day": day,
            "summary": required_text(args, "summary"),
            "evidence_ids": text_list(args, "evidence_ids", EVIDENCE_IDS_MAX),
            "recorded_at": optional_time(args, "recorded_at", now),
        },
    )


BUILDERS: dict[str, Callable[[Mapping[str, Any], int], CliCall]] = {
    TOOL_STORE: build_store,
    TOOL_SEARCH: build_search,
    TOOL_CORRECT: build_correct,
    TOOL_DELETE: build_delete,
    TOOL_REFLECT: build_reflect,
}
