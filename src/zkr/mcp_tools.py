"""The MCP tools of ``zkr mcp``, on the official ``mcp`` SDK (imported only here: ``zkr[mcp]``).

Every tool builds the CLI request of its command, adds the server's configured scope (the model
never chooses the tenant or person) and the current time for any time the model leaves out,
and runs it through the CLI's dispatch table (:func:`zkr.serve.run_command`). A failure comes
back as a tool error carrying the CLI's message; arguments that do not fit a tool's schema come
back as a short message naming the field (:func:`argument_error`), not pydantic's text with its
links; a value of the wrong JSON type is refused, as the CLI refuses it, rather than coerced
(every integer is ``strict``: ``"5"``, ``5.0`` and ``true`` are not 5). ``limit`` takes 0 like
the CLI (the default, 10). Results are the CLI's JSON values; the lists of ``profiles`` and
``reviews`` are wrapped in an object (MCP structured output is one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal, NotRequired

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    ToolAnnotations,
)
from pydantic import Field, ValidationError
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

from zkr import __version__
from zkr.codec import I64_MAX, I64_MIN, U32_MAX, has_lone_surrogate, parse_json
from zkr.context import DEFAULT_MAX_BYTES
from zkr.errors import RequestError, ZkrError
from zkr.memory import MemoryDb
from zkr.serve import run_command
from zkr.servefile import FileWatch, IdleCheckpoint

SourceKind = Literal[
    "conversation", "screen", "audio", "document", "integration", "user_correction"
]
ClaimKind = Literal["fact", "profile_fact", "preference", "task", "skill", "recommendation"]
UnixTime = Annotated[
    int | None,
    Field(description="Integer Unix seconds; leave it out for now.", ge=0, le=I64_MAX, strict=True),
]
Limit = Annotated[
    int,
    Field(
        description="How many to return (1-100; 0 means the default, 10).",
        ge=0,
        le=100,
        strict=True,
    ),
]
Id = Annotated[str, Field(description="A 32-hex-digit zkr id, as returned or cited by zkr.")]

INSTRUCTIONS = """\
zkr is the user's long-term memory: what they said or showed (sources), what was concluded from
it (claims), each cited by evidence ids. Call `context` with the user's message before answering
to recall what is relevant, `remember` to keep something worth remembering (with a `claim` when
it states a fact, preference, task or profile fact about someone), `correct` when the user fixes
a remembered fact, and `delete` when they ask to forget a source. Cite the ids you rely on."""


class Claim(TypedDict):
    """A typed claim extracted from the remembered text."""

    subject: Annotated[str, Field(description="Who or what it is about, e.g. 'user' or 'Sam'.")]
    predicate: Annotated[str, Field(description="The relation, e.g. 'employer', 'prefers'.")]
    value: Annotated[str, Field(description="The value, e.g. 'Acme', 'short plans'.")]
    kind: NotRequired[
        Annotated[
            ClaimKind,
            Field(
                description="fact (default); profile_fact for a stable trait of the person "
                "(can become a profile entry); preference; task; skill; recommendation."
            ),
        ]
    ]
    valid_from: NotRequired[
        Annotated[
            int,
            Field(
                description="Unix seconds it became true; default: captured_at.",
                ge=I64_MIN,
                le=I64_MAX,
                strict=True,
            ),
        ]
    ]


# pydantic's error types of a value of the wrong JSON type, and what the field takes instead
_TYPE_ERRORS = {
    "int_type": "an integer",
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
}
_JSON_TYPES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    dict: "an object",
    list: "an array",
    type(None): "null",
}


def argument_error(tool: str, error: ValidationError) -> str:
    """The message for arguments that fail ``tool``'s input schema: one clause per problem,
    worded like the CLI's (``missing field `query```), with pydantic's own text for the rest
    and never its documentation links. ``error`` is the SDK's argument-validation failure."""
    parts = []
    for problem in error.errors(include_url=False):
        field = ".".join(str(part) for part in problem["loc"]) or "arguments"
        if problem["type"] == "missing":
            parts.append(f"missing field `{field}`")
        elif problem["type"] == "extra_forbidden":
            parts.append(f"unknown field `{field}`")
        elif problem["type"] in _TYPE_ERRORS:
            got = _JSON_TYPES.get(type(problem["input"]), "a value of another type")
            parts.append(
                f"invalid type for `{field}`: {got}, expected {_TYPE_ERRORS[problem['type']]}"
            )
        else:
            message = str(problem["msg"])
            parts.append(f"invalid value for `{field}`: {message[:1].lower()}{message[1:]}")
    return f"Error executing tool {tool}: {'; '.join(parts)}"


def undecodable_reply(item: Exception) -> JSONRPCError | None:
    """The JSON-RPC error answering a stdio line the SDK could not decode, or ``None`` when
    ``item`` (what the SDK's stdio transport passes on for such a line: pydantic's
    ``json_invalid`` error holding the line) is anything else, or the line is blank.

    The SDK drops such lines without a reply, so a client waits for ever on a request holding a
    lone surrogate escape (``"\\ud800"``, valid JSON syntax but no Unicode text, refused by
    the SDK's JSON parser). A line that is JSON apart from lone surrogates is an invalid request
    (-32600) answered with its ``id`` when it is a request (it has a ``method``), with the
    CLI's message (``lone leading or trailing surrogate in string escape``,
    :func:`zkr.codec.parse_json`); any other undecodable line is a parse error (-32700) with a
    null id, as JSON-RPC 2.0 §5.1 asks."""
    if not isinstance(item, ValidationError):
        return None
    problems = item.errors(include_url=False)
    if len(problems) != 1 or problems[0]["type"] != "json_invalid":
        return None
    line = problems[0]["input"]
    if not isinstance(line, str) or not line.strip():
        return None
    try:
        parse_json(line)
    except RequestError as exc:
        message = exc.message
    else:
        return None  # JSON that zkr reads: the SDK's own reasons stand
    try:
        value = parse_json(line, lone_surrogates=True)
    except RequestError:
        return JSONRPCError(
            jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message=message)
        )
    request_id = value.get("id") if isinstance(value, dict) and "method" in value else None
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        request_id = None  # (JSON-RPC ids are strings or integers)
    elif isinstance(request_id, str) and has_lone_surrogate(request_id):
        request_id = None  # an id that cannot be written back
    return JSONRPCError(
        jsonrpc="2.0", id=request_id, error=ErrorData(code=INVALID_REQUEST, message=message)
    )


class _AnsweringStream:
    """The SDK's stdio read stream (items: ``SessionMessage`` or the ``Exception`` of a line it
    could not decode), answering on ``write`` the lines :func:`undecodable_reply` answers and
    passing everything else on, the sender's context included (``last_context``)."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if isinstance(item, Exception) and (reply := undecodable_reply(item)) is not None:
                await self._write.send(SessionMessage(reply))
                continue
            return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _AnsweringStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _AnsweringStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Server(MCPServer[Any]):
    """The SDK's server, with short argument errors (:func:`argument_error`), an answer to
    every stdio line it cannot decode (:func:`undecodable_reply`) and the
    :class:`~zkr.servefile.FileWatch` of its database (``watch``: set by :func:`build_server`)
    and its :class:`~zkr.servefile.IdleCheckpoint` (``checkpoints``, ``None`` when not
    applicable)."""

    watch: FileWatch | None = None
    checkpoints: IdleCheckpoint | None = None

    async def run_stdio_async(self) -> None:
        """The SDK's stdio transport, its read stream wrapped in :class:`_AnsweringStream`."""
        async with stdio_server() as (read_stream, write_stream):
            await self._lowlevel_server.run(
                _AnsweringStream(read_stream, write_stream),
                write_stream,
                self._lowlevel_server.create_initialization_options(),
            )

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(argument_error(name, cause)) from cause
            raise


def default_time(now: int, floor: int | None) -> int:
    """A left-out time: ``now`` (Unix seconds), or ``floor`` (the earliest the record admits,
    from ``MemoryDb.*_floor``) when that is later, never past ``I64_MAX``. A floor one second
    past a record stored at ``I64_MAX`` leaves no time the store accepts: the default is then
    ``I64_MAX`` and the store refuses it with its rule's message (``correction timestamps must
    advance …``), as it refuses that value given, instead of an out-of-range integer."""
    return now if floor is None else min(max(now, floor), I64_MAX)


class DefaultClock:
    """Integer Unix seconds for times a call leaves out: now, but always after the previous
    default, so that ``remember`` then ``correct`` or ``delete`` in the same second still
    orders correctly (a correction must be recorded after what it corrects)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self._last = max(int(self._clock()), self._last + 1)
            return self._last


def build_server(
    db: MemoryDb, tenant_id: str, person_id: str, clock: Callable[[], int] | None = None
) -> _Server:
    """An MCP server whose tools act on ``db`` within one (tenant, person) scope."""
    now = clock or DefaultClock()
    scope = {"tenant_id": tenant_id, "person_id": person_id}
    server = _Server(
        "zkr",
        title="zkr memory",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True)

    watch = FileWatch(db.path, "zkr mcp")  # the file deleted or replaced under the server: refuse
    server.watch = watch  # (zkr.mcp_server: a server that lost its file must not close it)
    checkpoints = IdleCheckpoint.start(db, watch)  # the log copied back between calls
    server.checkpoints = checkpoints  # (zkr.mcp_server closes it after the connection)

    def call(command: str, request: dict[str, Any]) -> Any:
        if (lost := watch.problem()) is not None:
            raise ToolError(lost)
        try:
            result = run_command(db, command, {**request, **scope})
        except ZkrError as exc:
            raise ToolError(exc.message) from None
        if (lost := watch.problem()) is not None:  # never acknowledge a write that went nowhere
            raise ToolError(lost)
        if checkpoints is not None:
            checkpoints.after_call_in_background(watch)
        return result

    @server.tool(
        description="Store something the user said, showed or did (a source and its evidence), "
        "optionally with a typed claim extracted from it. Returns the new ids. Sending the "
        "same ingestion_key again (e.g. a retried turn) returns the original ids instead of "
        "storing twice; times left out are then the stored ones."
    )
    def remember(
        text: Annotated[str, Field(description="The text to remember, as said or seen.")],
        kind: Annotated[SourceKind, Field(description="Where it came from.")] = "conversation",
        claim: Annotated[Claim | None, Field(description="Optional claim it states.")] = None,
        captured_at: UnixTime = None,
        recorded_at: UnixTime = None,
        ingestion_key: Annotated[
            str | None, Field(description="Optional idempotency key, e.g. 'session-7/turn-3'.")
        ] = None,
    ) -> dict[str, Any]:
        at = now()
        if ingestion_key is not None and (captured_at is None or recorded_at is None):
            # a retry of a stored key replays it with the stored times, not a later "now"
            stored = db.ingested_times(tenant_id, person_id, ingestion_key)
            if stored is not None:
                captured_at = stored[0] if captured_at is None else captured_at
                recorded_at = stored[1] if recorded_at is None else recorded_at
        captured = at if captured_at is None else captured_at
        request: dict[str, Any] = {
            "kind": kind,
            "text": text,
            "captured_at": captured,
            "recorded_at": at if recorded_at is None else recorded_at,
        }
        if ingestion_key is not None:
            request["ingestion_key"] = ingestion_key
        if claim is not None:
            request["claim"] = {"kind": "fact", "valid_from": captured, **claim}
        result: dict[str, Any] = call("remember", request)
        return result

    @server.tool(
        description="Search the memory: a bounded, ranked pack of cited items (claims, evidence, "
        "sources) matching the query's words. Optionally as of a past moment (valid_at: what "
        "was true then; as_known_at: what memory had recorded by then).",
        annotations=read_only,
    )
    def search(
        query: Annotated[str, Field(description="What to look for, in plain words.")],
        limit: Limit = 10,
        valid_at: UnixTime = None,
        as_known_at: UnixTime = None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {"query": query, "limit": limit}
        if valid_at is not None or as_known_at is not None:
            at = now()
            request["as_of"] = {
                "valid_at": at if valid_at is None else valid_at,
                "recorded_at": at if as_known_at is None else as_known_at,
            }
        result: dict[str, Any] = call("search", request)
        return result

    @server.tool(
        description="Read one live memory by its id: a source, an evidence or a claim, with "
        "its text and evidence ids.",
        annotations=read_only,
    )
    def get(
        kind: Annotated[Literal["source", "evidence", "claim"], Field(description="Its kind.")],
        id: Id,
    ) -> dict[str, Any]:
        result: dict[str, Any] = call("get", {"target": {"kind": kind, "id": id}})
        return result

    @server.tool(
        description="Correct a remembered claim: stores the user's correction as new evidence "
        "and a new claim with the new value that supersedes the old one (history is kept); "
        "a profile entry the old claim backed moves to the new value."
    )
    def correct(
        claim_id: Id,
        text: Annotated[str, Field(description="The correction as the user put it.")],
        value: Annotated[str, Field(description="The claim's new value.")],
        valid_at: UnixTime = None,
        recorded_at: UnixTime = None,
    ) -> dict[str, Any]:
        at = now()
        # a left-out time is now, or the earliest the claim admits when that is later (a claim
        # valid from a future date, or recorded by a device whose clock runs ahead)
        floor = db.correction_floor(tenant_id, person_id, claim_id) or (at, at)
        request = {
            "claim_id": claim_id,
            "text": text,
            "value": value,
            "valid_at": default_time(at, floor[0]) if valid_at is None else valid_at,
            "recorded_at": default_time(at, floor[1]) if recorded_at is None else recorded_at,
            "profile_follows": True,  # the profile keeps the key (docs/inspect.md), as in Python
        }
        result: dict[str, Any] = call("correct", request)
        return result

    @server.tool(
        description="Forget a source: it, its evidence and the claims it alone supported "
        "disappear from every read. Returns how many evidence items and claims went with it.",
        annotations=ToolAnnotations(destructive_hint=True),
    )
    def delete(source_id: Id, deleted_at: UnixTime = None) -> dict[str, Any]:
        if deleted_at is None:  # now, or the source's recording when a clock ran ahead of ours
            deleted_at = default_time(now(), db.deletion_floor(tenant_id, person_id, source_id))
        request = {"source_id": source_id, "deleted_at": deleted_at}
        result: dict[str, Any] = call("delete", request)
        return result

    @server.tool(
        description="Put a profile_fact claim into the person's profile (one current entry "
        "per key). Returns the profile entry."
    )
    def profile(
        claim_id: Id,
        stability: Annotated[
            Literal["current", "stable"],
            Field(description="current (may change, e.g. employer) or stable (e.g. birthday)."),
        ] = "current",
        recorded_at: UnixTime = None,
    ) -> dict[str, Any]:
        request = {
            "claim_id": claim_id,
            "stability": stability,
            "recorded_at": recorded_at,
        }
        if recorded_at is None:  # now, or past the claim / current entry a clock ahead recorded
            floor = db.profile_floor(tenant_id, person_id, claim_id)
            request["recorded_at"] = default_time(now(), floor)
        result: dict[str, Any] = call("profile", request)
        return result

    @server.tool(
        description="List the person's live profile entries, newest first.",
        annotations=read_only,
    )
    def profiles(limit: Limit = 10) -> dict[str, Any]:
        return {"profiles": call("profiles", {"limit": limit})}

    @server.tool(
        description="List the latest cited daily reviews, newest day first.",
        annotations=read_only,
    )
    def reviews(limit: Limit = 10) -> dict[str, Any]:
        return {"reviews": call("reviews", {"limit": limit})}

    @server.tool(
        description="The memory block to read before answering: the best cited memories for "
        "the query, the person's current profile and the latest daily reviews, as plain text "
        "within max_bytes. Every line cites ids usable with `get`.",
        annotations=read_only,
        structured_output=False,
    )
    def context(
        query: Annotated[str, Field(description="The user's message or topic.")],
        max_bytes: Annotated[
            int,
            Field(
                description="Size budget of the block in UTF-8 bytes.",
                ge=0,
                le=U32_MAX,
                strict=True,
            ),
        ] = DEFAULT_MAX_BYTES,
        limit: Limit = 10,
    ) -> str:
        block = call("context", {"query": query, "max_bytes": max_bytes, "limit": limit})
        text: str = block["text"]
        return text

    return server
