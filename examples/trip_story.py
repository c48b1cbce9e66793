"""The product story end to end, played the way a user meets zkr (needs ``zkr[mcp]``).

    python examples/trip_story.py [DIR] [--zkr PATH]

An agent host (Claude Desktop) runs ``zkr mcp`` over stdio, as the README's config block says,
and for a week stores every conversation turn, with a typed claim where the user states one: a
trip is planned, decided (Lisbon), and more turns follow. Then, each step checked:

1. *"What did I decide about the trip?"* through the MCP ``search`` and ``context`` tools: the
   decision claim comes first and cites the exact turn it was taken in.
2. The user changes the plan: ``correct`` (times left to the server, as a model would). The new
   claim answers and cites the correcting turn; the old one is gone from ``get``; ``search`` as
   of the day before still answers Lisbon, citing the original turn.
3. The user deletes the hotel turn: it, its evidence and the claim it alone supported are gone
   from ``search``, ``context`` and ``get``.
4. The laptop's feed is exported and applied to a second file (the phone) with the plain CLI;
   the phone stores a turn of its own, which goes back to the laptop (its own commits only,
   never the laptop's echoed back). Both files answer the question with the same JSON.
5. The same questions through ``zkr serve`` (JSON lines) and the CLI give the same answers as
   MCP's structured results.

Prints each step and, last, one JSON line ``{"failures": [...], "ok": bool, "timings_ms":
{...}}`` (per-call medians of each way to run); exits 1 when a check failed. ``--zkr`` is the
``zkr`` executable (default: the one next to this Python, else ``zkr`` on PATH). Without DIR
the files live in a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TENANT, PERSON = "local", "me"
SCOPE = {"tenant_id": TENANT, "person_id": PERSON}
QUESTION = "what did I decide about the trip?"
START = int(dt.datetime(2026, 11, 24, tzinfo=dt.UTC).timestamp())  # a Tuesday
DECISION, HOTEL = 10, 15  # indexes of the deciding turn and of the hotel turn in WEEK

# (day, "hh:mm", speaker, what was said, the claim the agent extracts or None)
WEEK: list[tuple[int, str, str, str, dict[str, str] | None]] = [
    (0, "08:12", "User", "Remind me to send the quarterly report to Priya before Friday.", None),
    (
        0,
        "08:13",
        "Assistant",
        "Noted: the quarterly report goes to Priya before Friday.",
        {
            "subject": "user",
            "predicate": "task",
            "value": "send the quarterly report to Priya",
            "kind": "task",
        },
    ),
    (
        0,
        "19:40",
        "User",
        "Ana and I want to take a trip in March, somewhere warm in Europe. Lisbon or Porto maybe?",
        None,
    ),
    (
        0,
        "19:41",
        "Assistant",
        "Both are lovely in March. Lisbon is a bit warmer; Porto is quieter and cheaper.",
        None,
    ),
    (
        1,
        "07:55",
        "User",
        "My dentist appointment moved to Thursday at 3pm.",
        {
            "subject": "user",
            "predicate": "dentist appointment",
            "value": "Thursday 3pm",
            "kind": "task",
        },
    ),
    (
        1,
        "21:05",
        "User",
        "I looked at flights for the trip: TAP to Lisbon is 180 euros return, Porto is 210.",
        None,
    ),
    (1, "21:06", "Assistant", "So Lisbon is cheaper by 30 euros per person.", None),
    (1, "21:10", "User", "Ana prefers the beach, I prefer museums. Lisbon has both, right?", None),
    (
        1,
        "21:11",
        "Assistant",
        "Yes: Cascais beaches are 40 minutes by train, and the Gulbenkian is in town.",
        None,
    ),
    (
        2,
        "12:30",
        "User",
        "Lunch with Marco was great, he recommends the pasteis de nata at Manteigaria.",
        {
            "subject": "Marco",
            "predicate": "recommends",
            "value": "pasteis de nata at Manteigaria",
            "kind": "recommendation",
        },
    ),
    (
        2,
        "20:15",
        "User",
        "OK I decided: the trip is to Lisbon, March 12 to 19, just Ana and me.",
        {
            "subject": "trip",
            "predicate": "destination",
            "value": "Lisbon, March 12-19",
            "kind": "fact",
        },
    ),
    (
        2,
        "20:16",
        "Assistant",
        "Great choice. Lisbon, March 12 to 19, for two. Want me to look at hotels?",
        None,
    ),
    (
        2,
        "20:20",
        "User",
        "Yes, something in Alfama with a view, under 150 euros a night.",
        {
            "subject": "user",
            "predicate": "hotel budget",
            "value": "under 150 euros a night",
            "kind": "preference",
        },
    ),
    (3, "09:02", "User", "Send the report reminder again tomorrow please.", None),
    (3, "15:45", "User", "At the dentist now, running late.", None),
    (
        3,
        "22:10",
        "User",
        "Found a hotel: Memmo Alfama, 140 euros a night, rooftop pool. Booked it for the trip.",
        {"subject": "trip", "predicate": "hotel", "value": "Memmo Alfama", "kind": "fact"},
    ),
    (4, "08:30", "User", "Report sent to Priya, done.", None),
    (
        4,
        "18:00",
        "User",
        "Ana's sister says the trams are packed in March, we should buy a Viva Viagem card.",
        None,
    ),
    (
        4,
        "21:30",
        "User",
        "I'm allergic to shellfish, keep that in mind for restaurant picks.",
        {"subject": "user", "predicate": "allergy", "value": "shellfish", "kind": "profile_fact"},
    ),
    (5, "10:00", "User", "Weekend plan: run 10k on Saturday morning, groceries after.", None),
    (5, "16:20", "User", "Ana asked whether we should rent a car for a day trip to Sintra.", None),
    (
        5,
        "16:21",
        "Assistant",
        "The train to Sintra takes 40 minutes from Rossio; a car is not needed.",
        None,
    ),
    (
        5,
        "16:25",
        "User",
        "Then no car, we take the train to Sintra.",
        {
            "subject": "trip",
            "predicate": "sintra transport",
            "value": "train from Rossio",
            "kind": "fact",
        },
    ),
    (6, "09:15", "User", "Can you list what's left to organize for March?", None),
    (
        6,
        "09:16",
        "Assistant",
        "Left: restaurant bookings, travel insurance and the Viva Viagem cards.",
        None,
    ),
    (6, "11:40", "User", "Booked travel insurance with Allianz, 38 euros for both of us.", None),
    (
        6,
        "19:05",
        "User",
        "Mum's birthday is on December 14, I need a gift idea.",
        {"subject": "mum", "predicate": "birthday", "value": "December 14", "kind": "fact"},
    ),
    (
        6,
        "19:10",
        "User",
        "Good idea, add a Portuguese cookbook for mum to my list.",
        {
            "subject": "user",
            "predicate": "task",
            "value": "buy a Portuguese cookbook for mum",
            "kind": "task",
        },
    ),
]
CHANGE = (
    "User: Change of plan: Ana has a conference in Porto that week, so the trip is to "
    "Porto instead of Lisbon, same dates."
)
PHONE_TURN = "User: (on the phone) We booked a table at Cantinho do Avillez in Porto for March 13."


def at(day: int, hhmm: str) -> int:
    """Unix seconds of ``hh:mm`` UTC on the story's ``day`` (0 = the Tuesday it starts)."""
    hours, minutes = (int(part) for part in hhmm.split(":"))
    return START + day * 86_400 + hours * 3_600 + minutes * 60


class Story:
    """The checks, the step log and the timings of one run."""

    def __init__(self, zkr: str, folder: Path) -> None:
        self.zkr = zkr
        self.laptop = str(folder / "laptop.db")
        self.phone = str(folder / "phone.db")
        self.failures: list[str] = []
        self.timings: dict[str, list[float]] = {}

    def check(self, condition: bool, what: str, detail: Any = None) -> None:
        print(f"  {'ok  ' if condition else 'FAIL'} {what}")
        if not condition:
            self.failures.append(what if detail is None else f"{what}: {detail}")

    def timed(self, way: str, started: float) -> None:
        self.timings.setdefault(way, []).append((time.perf_counter() - started) * 1000)

    def cli(self, db: str, command: str, request: dict[str, Any]) -> Any:
        """One CLI call; the answer, or ``{"error": …}`` as the CLI printed it."""
        started = time.perf_counter()
        run = subprocess.run(
            [self.zkr, "--db", db, command],
            input=json.dumps({**SCOPE, **request}),
            capture_output=True,
            text=True,
            check=False,
        )
        self.timed(f"cli {command}", started)
        return json.loads(run.stdout if run.returncode == 0 else run.stderr)


def top(pack: dict[str, Any]) -> dict[str, Any]:
    items: list[dict[str, Any]] = pack["items"]
    return items[0] if items else {"memory": {"id": None, "kind": None}, "evidence_ids": []}


def ids_in(pack: dict[str, Any]) -> set[str]:
    return {item["memory"]["id"] for item in pack["items"]} | {
        evidence for item in pack["items"] for evidence in item["evidence_ids"]
    }


async def over_mcp(story: Story) -> dict[str, Any]:
    """Steps 1-3 through ``zkr mcp`` over stdio with the official SDK, as Claude Desktop runs
    it (the README's config block: ``zkr mcp --db PATH --tenant local --person me``)."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = StdioServerParameters(
        command=story.zkr,
        args=["mcp", "--db", story.laptop, "--tenant", TENANT, "--person", PERSON],
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def call(tool: str, **arguments: Any) -> Any:
            started = time.perf_counter()
            result = await session.call_tool(tool, arguments)
            story.timed(f"mcp {tool}", started)
            text = "".join(getattr(block, "text", "") for block in result.content)
            if result.is_error:
                return {"error": text}
            if result.structured_content is not None:
                return result.structured_content
            return text  # the context tool answers the block itself

        print("1. a week of turns through zkr mcp, then the question")
        turns = []
        for index, (day, hhmm, speaker, said, claim) in enumerate(WEEK):
            when = at(day, hhmm)
            arguments: dict[str, Any] = {
                "text": f"{speaker}: {said}",
                "captured_at": when,
                "recorded_at": when + 2,
                "ingestion_key": f"trip-week/{index}",
            }
            if claim is not None:
                arguments["claim"] = {**claim, "valid_from": when}
            turns.append(await call("remember", **arguments))
        decided = turns[DECISION]
        pack = await call("search", query=QUESTION)
        story.check(
            top(pack)["memory"] == {"id": decided["claim_id"], "kind": "claim"}
            and top(pack)["evidence_ids"] == [decided["evidence_id"]],
            "search: the decision (Lisbon) comes first and cites the deciding turn",
            top(pack),
        )
        block = await call("context", query=QUESTION)
        first_line = block.splitlines()[1] if isinstance(block, str) else ""
        print(f"     context: {first_line}")
        story.check(
            "Lisbon" in first_line and decided["evidence_id"] in first_line,
            "context: its first memory line is the decision, citing the deciding turn",
            block,
        )
        for _ in range(20):
            await call("search", query=QUESTION)

        print("2. change of plan: correct, ask again, ask as of the day before")
        corrected = await call(
            "correct", claim_id=decided["claim_id"], text=CHANGE, value="Porto, March 12-19"
        )
        pack = await call("search", query=QUESTION)
        story.check(
            top(pack)["memory"]["id"] == corrected["claim_id"]
            and top(pack)["evidence_ids"] == [corrected["evidence_id"]],
            "search: the Porto claim comes first and cites the correcting turn",
            top(pack),
        )
        story.check(decided["claim_id"] not in ids_in(pack), "search: Lisbon is not live")
        gone = await call("get", kind="claim", id=decided["claim_id"])
        story.check("error" in gone, "get: the superseded claim is not found", gone)
        block = await call("context", query=QUESTION)
        story.check(
            corrected["evidence_id"] in block and decided["claim_id"] not in block,
            "context: Porto, and no Lisbon claim",
            block,
        )
        before = at(6, "23:00")
        then = await call("search", query=QUESTION, valid_at=before, as_known_at=before)
        story.check(
            top(then)["memory"]["id"] == decided["claim_id"]
            and top(then)["evidence_ids"] == [decided["evidence_id"]],
            "search as of the day before: Lisbon, citing the deciding turn",
            top(then),
        )

        print("3. delete the hotel turn")
        hotel = turns[HOTEL]
        deleted = await call("delete", source_id=hotel["source_id"])
        story.check(
            deleted.get("claim_count") == 1 and deleted.get("evidence_count") == 1,
            "delete: one evidence and the one claim it alone supported",
            deleted,
        )
        hotel_ids = {hotel["source_id"], hotel["evidence_id"], hotel["claim_id"]}
        pack = await call("search", query="which hotel did we book", limit=100)
        story.check(not hotel_ids & ids_in(pack), "search: nothing of the hotel turn", pack)
        block = await call("context", query="which hotel did we book")
        story.check(not any(i in block for i in hotel_ids), "context: nothing of it", block)
        for kind in ("source", "evidence", "claim"):
            found = await call("get", kind=kind, id=hotel[f"{kind}_id"])
            story.check("error" in found, f"get {kind}: not found", found)
        answers = {
            "search": await call("search", query=QUESTION),
            "as_of": await call("search", query=QUESTION, valid_at=before, as_known_at=before),
            "context": await call("context", query=QUESTION),
        }
        seen = {"turns": turns, "corrected": corrected, "answers": answers, "before": before}
        same_through_serve_and_cli(story, seen)
        return seen


def same_through_serve_and_cli(story: Story, seen: dict[str, Any]) -> None:
    """Step 4: the questions MCP answered, asked of the same file through ``zkr serve`` (JSON
    lines) and the CLI, while the MCP server still holds it open."""
    print("4. the same questions through zkr serve and the CLI")
    serve = subprocess.Popen(
        [story.zkr, "serve", "--db", story.laptop],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert serve.stdin is not None and serve.stdout is not None
    requests, answers = serve.stdin, serve.stdout

    def ask(command: str, request: dict[str, Any]) -> Any:
        started = time.perf_counter()
        line = {"id": command, "command": command, "request": {**SCOPE, **request}}
        requests.write(json.dumps(line) + "\n")
        requests.flush()
        answer = json.loads(answers.readline())
        story.timed(f"serve {command}", started)
        return answer.get("ok", answer)

    try:
        as_of = {"valid_at": seen["before"], "recorded_at": seen["before"]}
        for _ in range(50):
            ask("search", {"query": QUESTION})
        for request, mcp_answer in (
            ({"query": QUESTION}, seen["answers"]["search"]),
            ({"query": QUESTION, "as_of": as_of}, seen["answers"]["as_of"]),
        ):
            served = ask("search", request)
            story.check(
                served == mcp_answer == story.cli(story.laptop, "search", request),
                f"serve == MCP (structured) == CLI: search {json.dumps(request)}",
                {"serve": served, "mcp": mcp_answer},
            )
        context = ask("context", {"query": QUESTION})
        story.check(
            context["text"]
            == seen["answers"]["context"]
            == story.cli(story.laptop, "context", {"query": QUESTION})["text"],
            "serve context text == MCP context == CLI context text",
        )
    finally:
        requests.close()
        serve.wait(timeout=30)


def feed(
    story: Story, db: str, cursor: tuple[int, int] = (0, -1)
) -> tuple[list[dict[str, Any]], tuple[int, int]]:
    """Every commit of ``db``'s feed after ``cursor`` (the last event already read: ``(N,
    -1)`` starts at commit N), whole (pages stitched, as docs/sync.md's host protocol says),
    and the cursor to resume from."""
    commits: dict[int, dict[str, Any]] = {}
    mark = None
    while True:
        request: dict[str, Any] = {
            "export_format": 1,
            "after_commit": cursor[0],
            "after_event_index": cursor[1],
            "limit": 100,
        }
        if mark is not None:
            request["high_water_mark"] = mark
        page = story.cli(db, "export", request)
        mark = page["high_water_mark"]
        for commit in page["commits"]:
            whole = commits.setdefault(commit["sequence"], {**commit, "records": []})
            whole["records"].extend(commit["records"])
            whole["first_event_index"] = 0
        cursor = (page["next_after_commit"], page["next_after_event_index"])
        if page["complete"]:
            return [commits[sequence] for sequence in sorted(commits)], cursor


def apply(story: Story, db: str, commits: list[dict[str, Any]]) -> Any:
    request = {"export_format": 1, "database_schema_version": 10, "commits": commits}
    return story.cli(db, "apply", request)


def sync_and_compare(story: Story, seen: dict[str, Any]) -> None:
    """Step 5: sync both ways with the CLI's ``export``/``apply``, then ask both files."""
    print("5. laptop -> phone, a phone turn, phone -> laptop (plain CLI export/apply)")
    commits, _ = feed(story, story.laptop)
    applied = apply(story, story.phone, commits)
    story.check(applied.get("commits_applied") == len(commits), "apply to the phone", applied)
    _, received = feed(story, story.phone)  # the phone's feed now ends with what it received
    when = at(7, "13:00")
    story.cli(
        story.phone,
        "remember",
        {
            "kind": "conversation",
            "text": PHONE_TURN,
            "captured_at": when,
            "recorded_at": when,
            "ingestion_key": "phone/1",
        },
    )
    own, _ = feed(story, story.phone, received)  # the phone's own commits only
    back = apply(story, story.laptop, own)
    story.check(back.get("commits_applied") == 1, "apply the phone's turn to the laptop", back)
    for request in (
        {"query": QUESTION},
        {"query": QUESTION, "as_of": {"valid_at": seen["before"], "recorded_at": seen["before"]}},
        {"query": "restaurant table in Porto"},
    ):
        laptop = story.cli(story.laptop, "search", request)
        phone = story.cli(story.phone, "search", request)
        story.check(laptop == phone, f"laptop and phone answer alike: {json.dumps(request)}")
    laptop = story.cli(story.laptop, "context", {"query": QUESTION})
    phone = story.cli(story.phone, "context", {"query": QUESTION})
    story.check(laptop == phone, "laptop and phone give the same context block")


def run(story: Story) -> int:
    seen = asyncio.run(over_mcp(story))
    sync_and_compare(story, seen)
    timings = {
        way: round(statistics.median(values), 2)
        for way, values in sorted(story.timings.items())
        if way.split()[1] in ("search", "context", "remember")
    }
    print(
        json.dumps(
            {"failures": story.failures, "ok": not story.failures, "timings_ms": timings},
            sort_keys=True,
        )
    )
    return 1 if story.failures else 0


def default_zkr() -> str:
    beside = Path(sys.executable).with_name("zkr")
    return str(beside) if beside.exists() else shutil.which("zkr") or "zkr"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("dir", nargs="?", help="where laptop.db and phone.db go (kept)")
    parser.add_argument("--zkr", default=default_zkr(), help="the zkr executable")
    options = parser.parse_args(argv)
    if shutil.which(options.zkr) is None:
        parser.error(f"--zkr {options.zkr}: no such executable")
    if options.dir:
        folder = Path(options.dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            parser.error(f"cannot use {folder} as the story's directory: {exc.strerror or exc}")
        for name in ("laptop.db", "phone.db"):
            if (folder / name).exists():
                parser.error(f"{folder / name} exists: the story starts from empty files")
        return run(Story(options.zkr, folder))
    with tempfile.TemporaryDirectory(prefix="zkr-trip-") as tmp:
        return run(Story(options.zkr, Path(tmp)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
