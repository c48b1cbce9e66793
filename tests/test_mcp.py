"""``zkr mcp``: the official SDK's own client talks to a real ``zkr mcp`` subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.conftest import LogWatch, cli
from zkr import MemoryDb
from zkr.model import LimitRequest, SearchRequest

mcp = pytest.importorskip("mcp", reason="the MCP SDK is the optional extra zkr[mcp]")

TOOLS = {
    "remember",
    "search",
    "get",
    "correct",
    "delete",
    "profile",
    "profiles",
    "reviews",
    "context",
}


def _params(db_path: str, *flags: str) -> Any:
    return mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "zkr", "mcp", "--db", db_path, *flags]
    )


def _ok(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def _text(result: Any) -> str:
    assert not result.is_error, result.content
    (block,) = result.content
    return str(block.text)


def test_every_tool_over_stdio(db_path: str) -> None:
    """List the tools, then answer each one, on the configured scope only."""

    async def session() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with mcp.Client(_params(db_path, "--tenant", "t1", "--person", "p1")) as client:
            listed = (await client.list_tools()).tools
            seen["tools"] = {tool.name: tool for tool in listed}
            stored = _ok(
                await client.call_tool(
                    "remember",
                    {
                        "text": "I work at Acme as a welder",
                        "claim": {
                            "subject": "user",
                            "predicate": "employer",
                            "value": "Acme",
                            "kind": "profile_fact",
                        },
                        "ingestion_key": "session-1/turn-1",
                        "tenant_id": "intruder",  # not a parameter: the scope is the server's
                    },
                )
            )
            seen["stored"] = stored
            again = _ok(
                await client.call_tool(
                    "remember",
                    {
                        "text": "I work at Acme as a welder",
                        "ingestion_key": "session-1/turn-1",
                        "claim": {
                            "subject": "user",
                            "predicate": "employer",
                            "value": "Acme",
                            "kind": "profile_fact",
                        },
                    },
                )
            )
            seen["replayed"] = again
            seen["search"] = _ok(await client.call_tool("search", {"query": "welder", "limit": 5}))
            seen["get"] = _ok(
                await client.call_tool("get", {"kind": "claim", "id": stored["claim_id"]})
            )
            seen["profile"] = _ok(
                await client.call_tool("profile", {"claim_id": stored["claim_id"]})
            )
            seen["profiles"] = _ok(await client.call_tool("profiles", {}))
            # a daily review written meanwhile by another process (the CLI)
            review = {
                "tenant_id": "t1",
                "person_id": "p1",
                "day": "2026-11-30",
                "summary": "Talked about work at Acme.",
                "evidence_ids": [stored["evidence_id"]],
                "recorded_at": int(time.time()),
            }
            cli(db_path, "review", review).json()
            seen["reviews"] = _ok(await client.call_tool("reviews", {"limit": 5}))
            seen["context"] = _text(await client.call_tool("context", {"query": "where do I work"}))
            seen["small"] = _text(
                await client.call_tool("context", {"query": "where do I work", "max_bytes": 200})
            )
            corrected = _ok(
                await client.call_tool(
                    "correct",
                    {
                        "claim_id": stored["claim_id"],
                        "text": "I moved to Globex",
                        "value": "Globex",
                    },
                )
            )
            seen["corrected"] = corrected
            seen["after"] = _ok(await client.call_tool("search", {"query": "Globex"}))
            other = _ok(await client.call_tool("remember", {"text": "Lunch was ramen"}))
            seen["deleted"] = _ok(
                await client.call_tool("delete", {"source_id": other["source_id"]})
            )
            seen["missing"] = await client.call_tool("get", {"kind": "source", "id": "nope"})
            seen["bad"] = await client.call_tool("search", {"query": "x", "limit": 101})
            seen["zero"] = _ok(await client.call_tool("search", {"query": "Globex", "limit": 0}))
            seen["no_query"] = await client.call_tool("search", {"limit": "many"})
        return seen

    seen = asyncio.run(session())
    tools = seen["tools"]
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40, tool.name
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert not {"tenant_id", "person_id"} & set(schema.get("properties", {})), tool.name
    assert set(tools["remember"].input_schema["required"]) == {"text"}
    assert tools["search"].annotations.read_only_hint is True
    assert tools["delete"].annotations.destructive_hint is True

    stored = seen["stored"]
    assert seen["replayed"] == stored
    assert [i["memory"] for i in seen["search"]["items"]] == [
        {"id": stored["claim_id"], "kind": "claim"}
    ]
    assert seen["get"]["excerpt"] == "user employer Acme"
    assert seen["profile"]["key"] == "employer" and seen["profile"]["value"] == "Acme"
    assert seen["profile"]["tenant_id"] == "t1"
    assert [e["claim_id"] for e in seen["profiles"]["profiles"]] == [stored["claim_id"]]
    assert [r["summary"] for r in seen["reviews"]["reviews"]] == ["Talked about work at Acme."]
    context = seen["context"]
    assert f"claim {stored['claim_id']}" in context
    assert "- employer: Acme [current;" in context
    assert "- 2026-11-30: Talked about work at Acme. [review " in context
    assert len(seen["small"].encode()) <= 200
    assert seen["corrected"]["superseded_claim_id"] == stored["claim_id"]
    assert seen["after"]["items"][0]["memory"]["id"] == seen["corrected"]["claim_id"]
    assert seen["deleted"]["evidence_count"] == 1
    assert seen["missing"].is_error and "record not found" in seen["missing"].content[0].text
    # Argument errors are short and link-free, worded like the CLI's; limit 0 is the default.
    assert seen["bad"].is_error
    assert seen["bad"].content[0].text == (
        "Error executing tool search: invalid value for `limit`: "
        "input should be less than or equal to 100"
    )
    assert seen["no_query"].is_error
    message = seen["no_query"].content[0].text
    assert message.startswith("Error executing tool search: ") and "http" not in message
    assert (
        "missing field `query`" in message
        and "invalid type for `limit`: a string, expected an integer" in message
    )
    assert seen["zero"]["items"][0]["memory"]["id"] == seen["corrected"]["claim_id"]

    with MemoryDb.open(db_path) as db:  # everything landed in the configured scope only
        assert db.profiles(LimitRequest("intruder", "p1")) == []
        assert db.search(SearchRequest("t1", "p1", "ramen")).items == []
        # the superseded turn's words find the correcting claim, never the superseded one
        found = [i.memory.id for i in db.search(SearchRequest("t1", "p1", "welder")).items]
        assert found == [seen["corrected"]["claim_id"]]
        assert db.search(SearchRequest("t1", "p1", "Globex")).items
        # the correction moved the profile entry to the new value (it used to vanish)
        assert [(e.key, e.value) for e in db.profiles(LimitRequest("t1", "p1"))] == [
            ("employer", "Globex")
        ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_streamable_http_on_loopback(db_path: str) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zkr", "mcp", "--db", db_path, "--http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    async def session() -> tuple[set[str], str]:
        deadline = time.monotonic() + 60
        while True:
            try:
                async with mcp.Client(f"http://127.0.0.1:{port}/mcp") as client:
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    await client.call_tool("remember", {"text": "The garage code is 4711"})
                    text = _text(await client.call_tool("context", {"query": "garage code"}))
                    return names, text
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                await asyncio.sleep(0.3)

    try:
        names, text = asyncio.run(session())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
    assert names == TOOLS
    assert "The garage code is 4711 [" in text and " UTC; source " in text
    # SIGTERM (terminate): uvicorn's shutdown, then the file closed and status 0 (it died of
    # the signal uvicorn re-raised, -15, its file unclosed)
    assert proc.returncode == 0
    assert not os.path.exists(db_path + "-wal")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--host", "0.0.0.0"], "--host must be a loopback address"),
        (["--tenant", " "], "--tenant must not be blank"),
        (["--tenant", "\u3000"], "--tenant must not be blank"),
        (["--person", "me\udcff"], "--person must be UTF-8 text"),  # the byte 0xff in argv
        (["--port", "70000"], "--port out of range: 70000"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--port", "8765"], "--port needs --http (without it zkr mcp speaks stdio)"),
        (["--host", "::1"], "--host needs --http (without it zkr mcp speaks stdio)"),
    ],
)
def test_bad_options_are_one_error(db_path: str, flags: list[str], message: str) -> None:
    result = cli(None, argv=["mcp", "--db", db_path, *flags])
    assert message in result.error()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "ZKR_TENANT",
            "",
            "ZKR_TENANT must not be blank (the environment variable gives --tenant's default;"
            " unset it for 'local')",
        ),
        (
            "ZKR_PERSON",
            " \u3000",
            "ZKR_PERSON must not be blank (the environment variable gives --person's default;"
            " unset it for 'me')",
        ),
        ("ZKR_PERSON", "me\udcff", "ZKR_PERSON must be UTF-8 text"),  # the byte 0xff
    ],
)
def test_a_bad_scope_from_the_environment_names_the_variable(
    db_path: str, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    """``ZKR_TENANT=""`` said "--tenant must not be blank", naming a flag nobody passed. The
    flag still wins over the variable; without either the built-in default is used."""
    from pathlib import Path

    from zkr.mcp_server import parse_options

    monkeypatch.setenv(variable, value)
    assert cli(None, argv=["mcp", "--db", db_path]).error() == message
    assert not Path(db_path).exists()
    flag = "--tenant" if variable == "ZKR_TENANT" else "--person"
    assert getattr(parse_options(["--db", db_path, flag, "pat"]), flag[2:]) == "pat"
    monkeypatch.delenv(variable)
    assert parse_options(["--db", db_path])[1:3] == ("local", "me")


SCRIPT = """
import io, json, sys
from zkr.cli import run
request = io.BytesIO(b'{"tenant_id": "t", "person_id": "p"}')
run(["--db", sys.argv[1], "profiles"], request, io.StringIO(), io.StringIO())
heavy = ("mcp", "pydantic", "anyio", "starlette", "uvicorn")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy or "mcp" in m)))
"""


def test_the_cli_never_imports_the_sdk(db_path: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, db_path], capture_output=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) == []


def test_a_port_in_use_is_one_error(db_path: str) -> None:
    """``--http`` on a port another process listens on: one envelope, exit 1 (the HTTP server
    would log a plain-text line and exit 3)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(None, argv=["mcp", "--db", db_path, "--http", "--port", str(port)])
        message = result.error()
    assert message == f"cannot listen on 127.0.0.1:{port}: Address already in use"


def test_a_deleted_file_is_a_tool_error(db_path: str) -> None:
    """As for ``zkr serve``: once the file is deleted under the server, no write is
    acknowledged (SQLite would write to the unlinked file); every call is a tool error."""
    from pathlib import Path

    async def session() -> tuple[Any, Any]:
        async with mcp.Client(_params(db_path)) as client:
            _ok(await client.call_tool("remember", {"text": "Sam works at Acme"}))
            for suffix in ("", "-wal", "-shm"):
                Path(db_path + suffix).unlink(missing_ok=True)
            lost = await client.call_tool("remember", {"text": "Sam moved to Lisbon"})
            read = await client.call_tool("search", {"query": "Sam"})
            return lost, read

    lost, read = asyncio.run(session())
    for result in (lost, read):
        assert result.is_error
        (block,) = result.content
        assert "was deleted while zkr mcp had it open; nothing more" in block.text
    assert not Path(db_path).exists()


def test_a_shared_memory_index_deleted_under_the_server_loses_no_other_write(
    db_path: str,
) -> None:
    """As for ``zkr serve``: after ``rm PATH-shm`` a new process builds a second index of the
    same log; the server refuses its next call and, when its client goes, exits without closing
    the connection (a close would checkpoint through the old index over the other process's
    commit). Both the server's earlier write and the other process's write stand."""
    from pathlib import Path

    scope = {"tenant_id": "t1", "person_id": "p1"}

    async def session() -> Any:
        async with mcp.Client(_params(db_path, "--tenant", "t1", "--person", "p1")) as client:
            _ok(await client.call_tool("remember", {"text": "Sam works at Acme"}))
            Path(db_path + "-shm").unlink()
            other = {
                **scope,
                "kind": "conversation",
                "text": "Kim lives in Porto",
                "captured_at": 20,
                "recorded_at": 20,
            }
            assert cli(db_path, "remember", other).json()["source_id"]
            return await client.call_tool("remember", {"text": "Sam moved to Lisbon"})

    lost = asyncio.run(session())
    assert lost.is_error
    (block,) = lost.content
    assert "shared-memory index" in block.text and "zkr mcp" in block.text
    for query, found in (("Porto", 1), ("Acme", 1), ("Lisbon", 0)):
        pack = cli(db_path, "search", {**scope, "query": query}).json()
        assert len(pack["items"]) == found, query


def test_arguments_of_the_wrong_json_type_are_refused_not_coerced(db_path: str) -> None:
    """The SDK's lenient validation took ``"limit": "5"`` as 5 (newcomer finding): every tool
    refuses a value of the wrong JSON type with a message naming the field, stores nothing."""
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("search", {"query": "x", "limit": "5"}, "invalid type for `limit`: a string"),
        ("search", {"query": "x", "limit": 5.0}, "invalid type for `limit`: a number"),
        ("search", {"query": "x", "limit": True}, "invalid type for `limit`: a boolean"),
        ("search", {"query": "x", "valid_at": "10"}, "invalid type for `valid_at`: a string"),
        ("search", {"query": 5}, "invalid type for `query`: an integer"),
        ("profiles", {"limit": "5"}, "invalid type for `limit`: a string"),
        ("reviews", {"limit": 2.5}, "invalid type for `limit`: a number"),
        ("context", {"query": "x", "max_bytes": "300"}, "invalid type for `max_bytes`: a string"),
        ("get", {"kind": "source", "id": 7}, "invalid type for `id`: an integer"),
        ("remember", {"text": "a", "captured_at": "10"}, "invalid type for `captured_at`"),
        ("remember", {"text": ["a"]}, "invalid type for `text`: an array"),
        (
            "remember",
            {"text": "a", "claim": {"subject": "u", "predicate": "p", "value": 3}},
            "invalid type for `claim.value`: an integer",
        ),
        (
            "remember",
            {
                "text": "a",
                "claim": {"subject": "u", "predicate": "p", "value": "v", "valid_from": "1"},
            },
            "invalid type for `claim.valid_from`: a string",
        ),
        ("delete", {"source_id": "a" * 32, "deleted_at": 1.5}, "invalid type for `deleted_at`"),
        # out of the CLI's range: named by the field too, not only "expected i64"
        ("search", {"query": "x", "valid_at": 2**63}, "invalid value for `valid_at`: "),
        ("remember", {"text": "a", "captured_at": 10**30}, "invalid value for `captured_at`: "),
        ("context", {"query": "x", "max_bytes": 2**32}, "invalid value for `max_bytes`: "),
    ]

    async def session() -> list[Any]:
        async with mcp.Client(_params(db_path, "--tenant", "t1", "--person", "p1")) as client:
            return [await client.call_tool(tool, arguments) for tool, arguments, _ in calls]

    results = asyncio.run(session())
    for (tool, arguments, expected), result in zip(calls, results, strict=True):
        assert result.is_error, (tool, arguments)
        message = result.content[0].text
        assert message.startswith(f"Error executing tool {tool}: {expected}"), message
    with MemoryDb.open(db_path) as db:
        assert db.search(SearchRequest("t1", "p1", "a")).items == []


def test_left_out_times_correct_a_future_claim_and_delete_what_a_fast_clock_recorded(
    db_path: str,
) -> None:
    """Newcomer finding: the model leaves times out, and "now" was refused for a claim valid
    from a future date (``correction timestamps must advance …``) and for a turn a phone whose
    clock runs ahead recorded (``deleted_at cannot predate source recording``, ``profile entry
    cannot predate its backing claim``). A left-out
    time is now or the earliest the record admits; given times are still checked."""
    now = int(time.time())
    ahead = now + 600  # the phone's clock, synced to this replica

    async def session() -> list[Any]:
        async with mcp.Client(_params(db_path)) as client:
            trip = _ok(
                await client.call_tool(
                    "remember",
                    {
                        "text": "The trip starts June 20.",
                        "claim": {
                            "subject": "trip",
                            "predicate": "start",
                            "value": "June 20",
                            "valid_from": now + 30 * 86400,
                        },
                    },
                )
            )
            hotel = _ok(
                await client.call_tool(
                    "remember",
                    {
                        "text": "The hotel is Casa Alfama.",
                        "claim": {"subject": "trip", "predicate": "hotel", "value": "Casa Alfama"},
                        "captured_at": ahead,
                        "recorded_at": ahead,
                    },
                )
            )
            home = {"subject": "me", "predicate": "home", "value": "Berlin", "kind": "profile_fact"}
            lives = _ok(
                await client.call_tool(
                    "remember",
                    {"text": "I live in Berlin.", "claim": home, "recorded_at": ahead},
                )
            )
            entry = _ok(await client.call_tool("profile", {"claim_id": lives["claim_id"]}))
            assert entry["recorded_at"] == ahead
            given = await client.call_tool(
                "correct",
                {"claim_id": trip["claim_id"], "text": "22", "value": "22", "valid_at": now},
            )
            return [
                given,
                _ok(
                    await client.call_tool(
                        "correct",
                        {"claim_id": trip["claim_id"], "text": "No, June 22.", "value": "June 22"},
                    )
                ),
                _ok(
                    await client.call_tool(
                        "correct",
                        {"claim_id": hotel["claim_id"], "text": "Porto Bay.", "value": "Porto Bay"},
                    )
                ),
                _ok(await client.call_tool("delete", {"source_id": hotel["source_id"]})),
                _ok(await client.call_tool("search", {"query": "trip"})),
            ]

    given, trip, hotel, deleted, pack = asyncio.run(session())
    assert given.is_error and "correction timestamps must advance" in given.content[0].text
    assert trip["superseded_claim_id"] and hotel["superseded_claim_id"]
    assert deleted["evidence_count"] == 1
    excerpts = sorted(item["excerpt"] for item in pack["items"])
    assert excerpts == ["trip hotel Porto Bay", "trip start June 22"]
    target = {"kind": "claim", "id": trip["claim_id"]}
    claims = cli(db_path, "trace", {"tenant_id": "local", "person_id": "me", "target": target})
    valid_from = {c["id"]: c["valid_time"]["from"] for c in claims.json()["claims"]}
    assert valid_from[trip["claim_id"]] == now + 30 * 86400 + 1


def test_a_left_out_deleted_at_passes_the_claims_the_delete_retracts(db_path: str) -> None:
    """The default ``deleted_at`` also clears the recording of each claim the deletion
    retracts (``deleted_at must advance affected claims' recorded intervals``): a claim a
    fast clock recorded, linked to an older turn, goes with that turn."""
    now = int(time.time())
    ahead = now + 600
    scope = {"tenant_id": "local", "person_id": "me"}

    def remember(text: str, at: int, claim: dict[str, Any] | None = None) -> Any:
        request = {**scope, "kind": "conversation", "text": text, "captured_at": at}
        if claim is not None:
            request["claim"] = {**claim, "kind": "fact", "valid_from": at}
        return cli(db_path, "remember", {**request, "recorded_at": at}).json()

    turn = remember("We land in Porto at noon.", now - 60)
    lands = {"subject": "trip", "predicate": "lands", "value": "noon"}
    noted = remember("Landing noon.", ahead, lands)
    link = {"claim_id": noted["claim_id"], "evidence_id": turn["evidence_id"]}
    cli(db_path, "link", {**scope, **link, "relation": "supports", "confidence_basis_points": 9000})
    cli(db_path, "delete", {**scope, "source_id": noted["source_id"], "deleted_at": ahead})

    async def session() -> Any:
        async with mcp.Client(_params(db_path)) as client:
            return _ok(await client.call_tool("delete", {"source_id": turn["source_id"]}))

    assert asyncio.run(session())["claim_count"] == 1
    assert cli(db_path, "search", {**scope, "query": "noon"}).json()["items"] == []


def test_left_out_times_past_the_largest_storable_second_are_the_rule_s_error(
    db_path: str,
) -> None:
    """Newcomer finding: a record stored at the largest time (``2**63 - 1``) made the default
    of a left-out time one second past it, and the tool answered ``invalid value: integer
    `9223372036854775808`, expected i64`` for a value the model never gave. The default stops
    at the largest time, so the store refuses it with its rule's message; nothing is written."""
    last = 2**63 - 1
    scope = {"tenant_id": "local", "person_id": "me"}

    def remember(text: str, at: int, predicate: str) -> Any:
        claim = {"subject": "x", "predicate": predicate, "value": text, "kind": "profile_fact"}
        request = {**scope, "kind": "conversation", "text": text, "captured_at": at}
        return cli(
            db_path,
            "remember",
            {**request, "recorded_at": at, "claim": {**claim, "valid_from": at}},
        ).json()

    far = remember("far", last, "far")
    first = remember("first", 5, "home")
    entry = {**scope, "claim_id": first["claim_id"], "stability": "current", "recorded_at": last}
    assert cli(db_path, "profile", entry).json()["recorded_at"] == last
    second = remember("second", 6, "home")

    async def session() -> list[Any]:
        async with mcp.Client(_params(db_path)) as client:
            return [
                await client.call_tool(name, arguments)
                for name, arguments in [
                    ("correct", {"claim_id": far["claim_id"], "text": "t", "value": "v"}),
                    ("delete", {"source_id": far["source_id"]}),
                    ("profile", {"claim_id": second["claim_id"]}),
                ]
            ]

    corrected, deleted, profiled = asyncio.run(session())
    expected = [
        (
            corrected,
            "correct",
            "correction timestamps must advance the original valid and recorded intervals",
        ),
        (deleted, "delete", "deleted_at must advance affected claims' recorded intervals"),
        (profiled, "profile", "profile replacement must advance recorded_at"),
    ]
    for result, tool, message in expected:
        assert result.is_error, result.content
        assert result.content[0].text == f"Error executing tool {tool}: {message}"
    for kind in ("claim", "source"):  # neither corrected nor deleted
        target = {"kind": kind, "id": far[f"{kind}_id"]}
        assert cli(db_path, "get", {**scope, "target": target}).json()["excerpt"]
    lookup = cli(db_path, "lookup", {**scope, "subject": "x", "predicate": "far"}).json()
    assert [(claim["value"], claim["status"]) for claim in lookup] == [("far", "accepted")]
    (current,) = cli(db_path, "profiles", {**scope, "limit": 10}).json()
    assert current["claim_id"] == first["claim_id"]


class _RawStdio:
    """A ``zkr mcp`` subprocess spoken to line by line (no SDK client): what a client that
    sends a line the SDK cannot decode sees."""

    def __init__(self, db_path: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zkr", "mcp", "--db", db_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 30) -> Any:
        """The next reply line as JSON, or ``None`` when none came within ``timeout``."""
        import select

        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return json.loads(self.proc.stdout.readline()) if ready else None

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        self.proc.stdout.close()
        return code


def _call(request_id: int, name: str, arguments: str) -> bytes:
    """A ``tools/call`` line with ``arguments`` as written (raw JSON text)."""
    head = f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
    return f'{head}"params":{{"name":"{name}","arguments":{arguments}}}}}'.encode()


def test_a_lone_surrogate_escape_is_answered_and_the_server_goes_on(db_path: str) -> None:
    """Newcomer finding: a request holding ``"\\ud800"`` (JSON syntax, but no Unicode text)
    got no reply at all: the SDK's stdio transport drops a line its JSON parser refuses, and
    the client waited for ever. zkr answers it (its id, the CLI's message), answers a line that
    is not JSON with a parse error, stores nothing, and serves the next request."""
    server = _RawStdio(db_path)
    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        hello["clientInfo"] = {"name": "raw", "version": "1"}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        server.send(json.dumps(init).encode())
        assert server.read()["id"] == 1
        server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        message = "lone leading or trailing surrogate in string escape"
        server.send(_call(2, "remember", '{"text":"a\\ud800b"}'))
        assert server.read() == {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {"code": -32600, "message": message},
        }
        server.send(_call(3, "search", '{"query":"x","limit":1,"x":"\\udc00"}'))
        assert server.read()["id"] == 3
        server.send(b"not json")
        assert server.read() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "expected ident at line 1 column 1"},
        }
        server.send(_call(4, "remember", '{"text":"a pair \\ud83d\\ude00 is one character"}'))
        stored = server.read()
        assert stored["id"] == 4 and not stored["result"]["isError"]
        server.send(_call(5, "search", '{"query":"pair"}'))
        found = server.read()["result"]["structuredContent"]["items"]
        assert [item["excerpt"] for item in found] == ["a pair \U0001f600 is one character"]
    finally:
        assert server.close() == 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stdio_server_stops_on_sigint_and_sigterm(db_path: str, signum: int) -> None:
    """Ctrl-C (or SIGTERM) with the client still connected ends the stdio server at once with
    status 0, its file closed; it used to wait for another stdin line (SIGINT: the SDK reads
    stdin in a thread no cancellation reaches) or die unclosed by the signal (SIGTERM)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "zkr", "mcp", "--db", db_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        }
        proc.stdin.write((json.dumps(hello) + "\n").encode())
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1  # the server loop is up
        proc.send_signal(signum)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    assert code == 0
    # closed cleanly: the last connection's checkpoint removed the write-ahead log
    assert not os.path.exists(db_path + "-wal")


def test_the_server_checkpoints_between_tool_calls(db_path: str) -> None:
    """As ``zkr serve`` does: SQLite's own checkpoint would run inside the commit that takes
    the log past its backstop (2000 frames on the server's connection); the server takes it
    in a thread of its own once a call has filled the log to 1000 frames, after that call
    returned, so the log is copied back long before the backstop and every write is in the
    file afterwards."""
    from zkr.servefile import BACKSTOP_FRAMES, IDLE_CHECKPOINT_FRAMES

    async def session() -> tuple[int, int, int]:
        written = 0
        async with mcp.Client(_params(db_path)) as client:
            _ok(await client.call_tool("remember", {"text": "Sam works at Acme"}))
            written += 1
            log = LogWatch(db_path)
            try:
                while log.checkpoints < 2:
                    assert written < 1000, "the log was never checkpointed"
                    text = f"Sam met Kim on day {written}"
                    _ok(await client.call_tool("remember", {"text": text}))
                    written += 1
                    log.see()
            finally:
                log.close()
        return written, log.largest, log.checkpoints

    written, largest, checkpoints = asyncio.run(session())
    assert checkpoints == 2
    # a few calls may land between the call that filled the log and its checkpoint thread
    assert 0 < largest < (IDLE_CHECKPOINT_FRAMES + BACKSTOP_FRAMES) // 2
    with MemoryDb.open(db_path) as database:
        count = database.conn.execute("SELECT count(*) FROM sources").fetchone()
    assert count == (written,)
