"""Where the *current* decision ranks when a host stores only conversation turns (no claims).

    .venv/bin/python benchmarks/decisions.py [--style capture|import|both] [--limit N] [--verbose]

The product story (README): a user decides something, later changes it, then asks about it;
the answer must be the current decision, first. ``examples/trip_story.py`` plays it with typed
claims. Hosts that store only turns (the OpenClaw plugin's auto-capture, ``zkr import`` of chat
history) give zkr no claim, and without an embedder search is lexical only; this script
measures that case.

Each scenario is a week (or so) of turns with a decision, a change of it, and distractors
that share the question's words. Two storage styles (``--style``):

* ``capture``: one ``conversation`` source per exchange, ``"User: …\\nAssistant: …"`` (the
  OpenClaw plugin's auto-capture);
* ``import``: one ``conversation`` source per message, ``"User: …"`` / ``"Assistant: …"``
  (``zkr import`` of a chat export).

``captured_at`` = ``recorded_at`` = the message time (integer Unix seconds). For each
question it prints the rank (1-based, ``-`` when not in the first ``--limit``) of the source
holding the current decision and of the one holding the superseded one, and, last, one JSON
line ``{"first": k, "questions": n, "mrr": …}`` over all questions and styles.
``ZKR_EMBED`` is removed from the environment: lexical only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from zkr import MemoryDb
from zkr.model import RememberRequest, SearchRequest, SourceKind

TENANT, PERSON = "local", "me"
START = int(dt.datetime(2026, 11, 23, tzinfo=dt.UTC).timestamp())  # a Monday


@dataclass(frozen=True)
class Turn:
    """One exchange: day (0-based), ``"hh:mm"``, what the user said, the assistant's reply
    (or ``""``), and a mark: ``"now"`` for the current decision, ``"old"`` for the superseded
    one, ``""`` otherwise."""

    day: int
    time: str
    user: str
    assistant: str = ""
    mark: str = ""


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: tuple[Turn, ...]
    questions: tuple[str, ...]


T = Turn
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "trip",
        (
            T(
                0,
                "08:12",
                "Remind me to send the quarterly report to Priya before Friday.",
                "Noted: the quarterly report goes to Priya before Friday.",
            ),
            T(
                0,
                "19:40",
                "Ana and I want to take a trip in March, somewhere warm in Europe. "
                "Lisbon or Porto maybe?",
                "Both are lovely in March. Lisbon is a bit warmer; Porto is quieter and cheaper.",
            ),
            T(
                1,
                "07:55",
                "My dentist appointment moved to Thursday at 3pm.",
                "Got it, dentist on Thursday at 3pm.",
            ),
            T(
                1,
                "21:05",
                "I looked at flights for the trip: TAP to Lisbon is 180 euros return, "
                "Porto is 210.",
                "So Lisbon is cheaper by 30 euros per person.",
            ),
            T(
                1,
                "21:10",
                "Ana prefers the beach, I prefer museums. Lisbon has both, right?",
                "Yes: Cascais beaches are 40 minutes by train, and the Gulbenkian is in town.",
            ),
            T(
                2,
                "12:30",
                "Lunch with Marco was great, he recommends the pasteis de nata at Manteigaria.",
                "Noted, Manteigaria for pasteis de nata.",
            ),
            T(
                2,
                "20:15",
                "OK I decided: the trip is to Lisbon, March 12 to 19, just Ana and me.",
                "Great choice. Lisbon, March 12 to 19, for two. Want me to look at hotels?",
                mark="old",
            ),
            T(
                2,
                "20:20",
                "Yes, something in Alfama with a view, under 150 euros a night.",
                "I'll look for Alfama hotels under 150 euros.",
            ),
            T(
                3,
                "09:02",
                "I'm going to cook from the new cookbook tonight, I decided on the "
                "mushroom risotto.",
                "Sounds delicious, enjoy the risotto.",
            ),
            T(3, "15:45", "At the dentist now, running late.", ""),
            T(4, "08:30", "Report sent to Priya, done.", "Great, I'll drop the reminder."),
            T(
                4,
                "18:00",
                "Ana's sister says Lisbon is packed in March, lots of tourists.",
                "March is busier than February but still manageable.",
            ),
            T(
                4,
                "21:30",
                "Actually, change of plan: we're going to Porto instead, same dates. "
                "Ana wants the quieter city.",
                "Got it: Porto, March 12 to 19, instead of Lisbon.",
                mark="now",
            ),
            T(
                5,
                "10:00",
                "Weekend plan: run 10k on Saturday morning, groceries after.",
                "Good luck with the run!",
            ),
            T(
                5,
                "16:20",
                "What's a good book for the flight?",
                "Try 'The Book of Disquiet' by Pessoa, it fits the trip.",
            ),
            T(
                6,
                "09:15",
                "Are we going to the cinema with Marco on Sunday?",
                "You said you'd decide with Marco on Saturday.",
            ),
        ),
        (
            "what did I decide about the trip?",
            "where are we going in March?",
            "where is the trip now?",
            "which city did we pick for the March trip?",
        ),
    ),
    Scenario(
        "restaurant",
        (
            T(
                0,
                "10:00",
                "It's Ana's birthday on Saturday, I want to book a dinner somewhere nice.",
                "Happy early birthday to Ana! Any cuisine in mind?",
            ),
            T(
                0,
                "10:05",
                "She loves Italian. Maybe Trattoria Sole or Da Enzo?",
                "Both have good reviews; Da Enzo is cosier.",
            ),
            T(
                1,
                "19:00",
                "Let's book Trattoria Sole for the birthday dinner, 8pm, table for four.",
                "Booked: Trattoria Sole, Saturday 8pm, four people.",
                mark="old",
            ),
            T(
                1,
                "19:30",
                "The restaurant near the office had terrible service again today.",
                "Sorry to hear that. Want me to note it?",
            ),
            T(
                2,
                "12:00",
                "Going to the gym after lunch, decided to try the spinning class.",
                "Have fun at the spinning class.",
            ),
            T(
                3,
                "09:00",
                "Trattoria Sole called, they double-booked the table. Book Da Enzo "
                "instead, same time.",
                "Done: Da Enzo, Saturday 8pm, four people.",
                mark="now",
            ),
            T(3, "18:00", "Remind me to buy candles for the cake.", "I'll remind you tomorrow."),
            T(
                4,
                "08:00",
                "Which restaurant reviews site do you trust most?",
                "I usually check several; local food blogs are often better.",
            ),
        ),
        (
            "which restaurant did we book for Ana's birthday?",
            "where is the birthday dinner?",
            "what did we decide for the birthday dinner?",
        ),
    ),
    Scenario(
        "meeting",
        (
            T(
                0,
                "09:00",
                "Schedule the budget review with Tom for Wednesday at 10am.",
                "Scheduled: budget review with Tom, Wednesday 10am.",
                mark="old",
            ),
            T(
                0,
                "11:00",
                "The team meeting notes are in the shared drive.",
                "Thanks, I'll reference them.",
            ),
            T(1, "14:00", "I'm meeting my sister for coffee now, back in an hour.", "Enjoy!"),
            T(
                1,
                "16:30",
                "Tom can't make Wednesday. Move the budget review to Friday at 2pm.",
                "Moved: budget review with Tom, Friday 2pm.",
                mark="now",
            ),
            T(2, "08:45", "When is the dentist again?", "Thursday at 3pm."),
            T(
                2,
                "10:15",
                "Meeting with the landlord went fine, the rent stays the same.",
                "Good news.",
            ),
            T(
                3,
                "17:00",
                "The all-hands meeting is now every second Monday.",
                "Noted: all-hands every second Monday.",
            ),
        ),
        (
            "when is the budget review with Tom now?",
            "when is the meeting with Tom?",
            "when is the budget review?",
        ),
    ),
    Scenario(
        "preference",
        (
            T(0, "08:00", "I drink my coffee black, no sugar.", "Noted: black coffee, no sugar."),
            T(
                0,
                "20:00",
                "For my reading list I prefer paper books over ebooks.",
                "Noted: paper books.",
                mark="old",
            ),
            T(2, "13:00", "I prefer window seats when I fly.", "Noted: window seats."),
            T(
                3,
                "21:00",
                "I finished the cookbook Ana gave me, great recipes.",
                "Glad you liked it!",
            ),
            T(
                5,
                "22:00",
                "I changed my mind about books: ebooks now, the Kindle is so much "
                "lighter to carry.",
                "Got it: you prefer ebooks now.",
                mark="now",
            ),
            T(6, "09:00", "What should I read next?", "How about a mystery novel?"),
        ),
        (
            "do I prefer paper books or ebooks?",
            "what kind of books do I prefer?",
        ),
    ),
)


def _at(day: int, time: str) -> int:
    hours, minutes = time.split(":")
    return START + day * 86400 + int(hours) * 3600 + int(minutes) * 60


def build(
    db: MemoryDb, scenario: Scenario, style: str, tenant: str = TENANT, person: str = PERSON
) -> dict[str, str]:
    """Store the scenario's turns in ``style`` in the scope (``tenant``, ``person``); returns
    source id -> mark (``now``/``old``)."""
    marks: dict[str, str] = {}

    def store(text: str, at: int, mark: str) -> None:
        request = RememberRequest(
            tenant_id=tenant,
            person_id=person,
            kind=SourceKind.CONVERSATION,
            text=text,
            captured_at=at,
            recorded_at=at,
        )
        got = db.remember(request)
        if mark:
            marks[got.source_id] = mark

    for turn in scenario.turns:
        at = _at(turn.day, turn.time)
        if style == "capture":
            text = f"User: {turn.user}"
            if turn.assistant:
                text += f"\nAssistant: {turn.assistant}"
            store(text, at, turn.mark)
        else:
            store(f"User: {turn.user}", at, turn.mark)
            if turn.assistant:
                store(f"Assistant: {turn.assistant}", at + 30, turn.mark)
    return marks


def rank_of(ids: list[str], marks: dict[str, str], mark: str) -> int | None:
    """The 1-based rank of the first item marked ``mark`` (``None``: not in ``ids``)."""
    for rank, got in enumerate(ids, 1):
        if marks.get(got) == mark:
            return rank
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--style", choices=["capture", "import", "both"], default="both")
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    os.environ.pop("ZKR_EMBED", None)
    styles = ["capture", "import"] if args.style == "both" else [args.style]
    first = total = 0
    reciprocal = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for style in styles:
            for scenario in SCENARIOS:
                path = Path(tmp) / f"{scenario.name}-{style}.db"
                with MemoryDb.open(str(path)) as db:
                    marks = build(db, scenario, style)
                    for question in scenario.questions:
                        pack = db.search(SearchRequest(TENANT, PERSON, question, args.limit))
                        ids = [item.memory.id for item in pack.items]
                        now, old = rank_of(ids, marks, "now"), rank_of(ids, marks, "old")
                        total += 1
                        first += now == 1
                        reciprocal += 1 / now if now else 0.0
                        print(
                            f"{style:8} {scenario.name:11} now={now or '-'!s:2} "
                            f"old={old or '-'!s:2} {question}"
                        )
                        if args.verbose:
                            for item in pack.items:
                                mark = marks.get(item.memory.id, "")
                                text = item.excerpt.replace("\n", " | ")[:110]
                                print(f"    {item.relevance_basis_points:5} {mark:3} {text}")
    print(json.dumps({"first": first, "questions": total, "mrr": round(reciprocal / total, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
