"""The context block (zkr.context): cited, sectioned, within its byte budget, read-only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import P, T, cli, dump, remember
from zkr import MemoryDb, RequestError
from zkr.context import MIN_LINE_BYTES, build_context
from zkr.model import (
    ClaimKind,
    CorrectRequest,
    LimitRequest,
    ProfileRequest,
    ReviewRequest,
    Stability,
)
from zkr.store.inspect import CAPTURE_TIMES_SQL, capture_times


def _seed(db: MemoryDb) -> dict[str, str]:
    job = remember(
        db,
        "I work at Acme as a welder",
        claim=("user", "employer", "Acme"),
        claim_kind=ClaimKind.PROFILE_FACT,
        at=10,
    )
    db.profile(ProfileRequest(T, P, Stability.CURRENT, job.claim_id, 11))
    long = remember(db, "welder notes " + "très long " * 400, at=12)
    review = db.review(
        ReviewRequest(T, P, "2026-11-30", "Talked about welding.", [job.evidence_id], 13)
    )
    return {"claim": job.claim_id, "long": long.source_id, "review": review.id}


def test_sections_citations_and_order(db: MemoryDb, db_path: str) -> None:
    ids = _seed(db)
    before = dump(db_path)
    context = build_context(db, T, P, "welder")
    lines = context.text.splitlines()
    assert lines[0] == "Memories matching 'welder' (zkr, cited):"
    assert lines[1].startswith(
        "- user employer Acme [1970-01-01 00:00 UTC; claim " + ids["claim"] + "; evidence "
    )
    assert lines[2].endswith(
        f"; source {ids['long']}; evidence {context.items[1].evidence_ids[0]}]"
    )
    # cut, then lengthened by what the other lines left of the 4000 bytes (not a quarter only)
    assert "…" in lines[2] and len(lines[2].encode()) > 1000
    assert 4000 - 4 <= len(context.text.encode()) <= 4000
    assert lines[3] == "Profile (current):"
    assert lines[4] == f"- employer: Acme [current; claim {ids['claim']}]"
    assert lines[5] == "Latest daily reviews:"
    assert lines[6] == f"- 2026-11-30: Talked about welding. [review {ids['review']}]"
    assert context.to_json()["bytes"] == len(context.text.encode())
    assert dump(db_path) == before  # it only reads


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(min_value=0, max_value=3000))
def test_the_budget_always_holds(db: MemoryDb, budget: int) -> None:
    if not db.profiles(LimitRequest(T, P)):
        _seed(db)
    context = build_context(db, T, P, "welder Acme", max_bytes=budget)
    assert len(context.text.encode()) <= budget
    if budget >= 3 * MIN_LINE_BYTES:  # room for the best memory line at least
        assert context.items
    for line in context.text.splitlines():  # every taken line keeps its citation whole
        assert not line.startswith("- ") or line.endswith("]")


def test_no_match_blank_query_and_floor(db: MemoryDb) -> None:
    _seed(db)
    none = build_context(db, T, P, "zeppelin")
    assert none.text.startswith("No cited memory matched the query.\nProfile (current):\n")
    assert none.items == []
    blank = build_context(db, T, P, "  ")
    assert blank.text.startswith("Profile (current):")
    floored = build_context(db, T, P, "welder", min_relevance_basis_points=10_000)
    assert len(floored.items) == 1
    assert build_context(db, T, P, "welder", review_limit=0).reviews == []
    # as with reviews, a profile limit of 0 leaves the section out (it meant 10 before)
    no_profile = build_context(db, T, P, "welder", profile_limit=0)
    assert no_profile.profiles == [] and "Profile (current):" not in no_profile.text
    assert no_profile.to_json()["left_out"]["profiles"] == 0
    try:
        build_context(db, T, P, "welder", max_bytes=-1)
    except RequestError as exc:
        assert exc.message == "max_bytes must not be negative"
    else:
        raise AssertionError("a negative budget must fail")


def test_the_context_command_over_the_cli_and_serve(db: MemoryDb, db_path: str) -> None:
    """``context`` is a command like any other: the CLI and ``zkr serve`` give the library's
    block, and a bad request is the usual error envelope."""
    _seed(db)
    request = {"tenant_id": T, "person_id": P, "query": "welder", "max_bytes": 600}
    expected = build_context(db, T, P, "welder", max_bytes=600).to_json()
    assert cli(db_path, "context", request).json() == expected
    assert expected["bytes"] <= 600 and expected["items"]
    line = json.dumps({"id": "c", "command": "context", "request": request}).encode()
    served = subprocess.run(
        [sys.executable, "-m", "zkr", "serve", "--db", db_path],
        input=line + b"\n",
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert json.loads(served.stdout) == {"id": "c", "ok": expected}
    bad = cli(db_path, "context", {"tenant_id": T, "person_id": P, "query": "x", "limit": -1})
    assert bad.error() == "invalid value: integer `-1`, expected u32"
    assert cli(db_path, "context", {"tenant_id": T, "person_id": P}).error() == (
        "missing field `query`"
    )


def test_unused_section_budget_flows_to_the_pack_and_a_cut_line_beats_nothing(
    db: MemoryDb,
) -> None:
    text = "Sam said the welding shop moved to the old harbour warehouse " * 3
    stored = remember(db, text.strip(), at=10)
    full = build_context(db, T, P, "welding")
    line = full.text.splitlines()[1]
    assert "…" not in line and 250 < len(line.encode()) < 400 - 50
    assert line.endswith(f" UTC; source {stored.source_id}; evidence {stored.evidence_id}]")
    # no profile or review: their share goes to the one memory line, which is shown whole
    assert build_context(db, T, P, "welding", max_bytes=400).text == full.text
    for budget in (200, 160):  # too small for the quarter cap: the line is cut, not dropped
        small = build_context(db, T, P, "welding", max_bytes=budget)
        cut = small.text.splitlines()[1]
        assert len(small.text.encode()) <= budget and len(small.items) == 1
        assert "…" in cut and cut.endswith(
            f" UTC; source {stored.source_id}; evidence {stored.evidence_id}]"
        )
    # too small for the header and the whole citation: the short header and the memory's own
    # id (enough for `get`/`trace`) still carry the top item; smaller still: nothing, no
    # broken line
    tiny = build_context(db, T, P, "welding", max_bytes=120)
    assert tiny.text.splitlines()[0] == "Memories (zkr, cited):"
    assert tiny.text.splitlines()[1].endswith(f"… [source {stored.source_id}]")
    assert (
        len(tiny.text.encode()) <= 120
        and tiny.items
        and tiny.to_json()["left_out"]
        == {
            "items": 0,
            "profiles": 0,
            "reviews": 0,
        }
    )
    smallest = 23 + 2 + 16 + 1 + len(f"[source {stored.source_id}]") + 1  # header, line
    assert build_context(db, T, P, "welding", max_bytes=smallest).items
    empty = build_context(db, T, P, "welding", max_bytes=smallest - 1)
    assert empty.text == "" and empty.to_json()["left_out"]["items"] == 1


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(min_value=0, max_value=700))
def test_a_small_budget_carries_the_top_memory_and_says_what_it_left_out(
    db: MemoryDb, budget: int
) -> None:
    """The best memory comes first even when a shorter profile or review line would fit
    where it does not; ``left_out`` counts the lines found but not shown."""
    if not db.profiles(LimitRequest(T, P)):
        _seed(db)
    full = build_context(db, T, P, "welder Acme", max_bytes=100_000)
    block = build_context(db, T, P, "welder Acme", max_bytes=budget)
    counts = block.to_json()["left_out"]
    assert counts == {
        "items": len(full.items) - len(block.items),
        "profiles": len(full.profiles) - len(block.profiles),
        "reviews": len(full.reviews) - len(block.reviews),
    }
    top = full.items[0]
    smallest = 23 + 2 + 16 + 1 + len(f"[{top.memory.kind.value} {top.memory.id}]") + 1
    if budget >= smallest:
        assert block.items and block.items[0] == top
        assert f"{top.memory.kind.value} {top.memory.id}" in block.text.splitlines()[1]
    else:
        assert block.text == ""
    assert len(block.text.encode()) <= budget


def test_lengthening_a_cut_line_keeps_its_citation_whole(db: MemoryDb) -> None:
    """Budgets just above the compact top line: the budget left over lengthens the line's
    text, never by cutting into its citation (at 92 bytes it read ``[cla…``, at 126 the claim
    id lost its last character; newcomer finding)."""
    job = remember(
        db, "family 👨‍👩‍👧‍👦 emoji", claim=("Sam", "p3", "👨‍👩‍👧‍👦 family emoji ZWJ sequence")
    )
    item = build_context(db, T, P, "family", max_bytes=4000).items[0]
    whole = f" UTC; claim {job.claim_id}; evidence {job.evidence_id}]"
    short = f"[claim {job.claim_id}]"
    assert item.memory.id == job.claim_id
    for budget in range(300):
        block = build_context(db, T, P, "family", max_bytes=budget)
        assert len(block.text.encode()) <= budget
        for line in block.text.splitlines():
            if line.startswith("- "):
                assert line.endswith((whole, short)), (budget, line)


_CLUSTERS = [
    "👨\u200d👩\u200d👧\u200d👦",  # a family: four emoji joined by zero-width joiners
    "🏳\ufe0f\u200d🌈",  # a flag sequence with a variation selector
    "👍🏽",  # a skin tone modifier
    "🇵🇹",  # a regional-indicator pair
    "e\u0301\u0327",  # a letter and two combining marks
    "\u1100\u1161\u11a8",  # Hangul jamo making one syllable
    "\r\n",
]


@settings(max_examples=300)
@given(
    text=st.lists(st.sampled_from(_CLUSTERS) | st.text(max_size=3), max_size=30).map("".join),
    cap=st.integers(min_value=3, max_value=200),
)
def test_a_cut_never_splits_a_grapheme_cluster(text: str, cap: int) -> None:
    """A cut keeps whole grapheme clusters, as many as fit (it cut an emoji sequence after a
    zero-width joiner; newcomer finding)."""
    import regex

    from zkr.context import ELLIPSIS, _clip

    clipped = _clip(text, cap)
    assert len(clipped.encode()) <= cap
    if len(text.encode()) <= cap:
        assert clipped == text
        return
    assert clipped.endswith(ELLIPSIS)
    kept = clipped[: -len(ELLIPSIS)]
    clusters = regex.findall(r"\X", text)
    taken = regex.findall(r"\X", kept)
    assert taken == clusters[: len(taken)]
    room = cap - len(ELLIPSIS.encode())
    assert len(kept.encode()) + len(clusters[len(taken)].encode()) > room  # the most that fit


def test_context_lines_cut_between_emoji_sequences(db: MemoryDb) -> None:
    family = _CLUSTERS[0]
    remember(db, "family " + family * 80)
    for budget in range(60, 400, 7):
        for line in build_context(db, T, P, "family", max_bytes=budget).text.splitlines():
            if "…" in line and line.startswith("- family "):
                cut = line[len("- family ") : line.index("…")]
                assert cut == family * (len(cut) // len(family)), (budget, line)


def test_build_context_checks_its_arguments_like_the_command(db: MemoryDb) -> None:
    """``build_context(db, t, p, None)`` raised ``AttributeError`` (found hunting the newcomer
    findings' class): its arguments are checked as a ``ContextRequest`` first."""
    with pytest.raises(RequestError, match=r"^field `query`: invalid type: null"):
        build_context(db, T, P, None)  # type: ignore[arg-type]
    with pytest.raises(RequestError, match=r"^field `tenant_id`: invalid type: integer"):
        build_context(db, 5, P, "x")  # type: ignore[arg-type]
    with pytest.raises(RequestError, match=r"^field `limit`: invalid type: string"):
        build_context(db, T, P, "x", limit="5")  # type: ignore[arg-type]
    assert build_context(db, T, P, "\u3000").items == []  # blank by the one rule: no search


def test_memory_lines_are_dated_so_a_later_change_of_plan_shows_as_later(db: MemoryDb) -> None:
    """Plain turns (an import, an auto-captured chat: no claim to ``correct``): the old decision
    matches the question best and comes first, and nothing in the block said that the turn
    after it changed the plan. Each memory line's citation now starts with its capture time."""
    decided = remember(
        db, "User: OK I decided: the trip is to Lisbon, March 12 to 19.", at=1_795_667_700
    )
    changed = remember(
        db,
        "User: Change of plan: the trip is to Porto instead of Lisbon, same dates.",
        at=1_796_035_200,
    )
    block = build_context(db, T, P, "what did I decide about the trip?")
    lines = block.text.splitlines()
    by_id = {item.memory.id: i for i, item in enumerate(block.items, start=1)}
    assert lines[by_id[decided.source_id]] == (
        "- User: OK I decided: the trip is to Lisbon, March 12 to 19."
        f" [2026-11-26 04:35 UTC; source {decided.source_id}; evidence {decided.evidence_id}]"
    )
    assert lines[by_id[changed.source_id]] == (
        "- User: Change of plan: the trip is to Porto instead of Lisbon, same dates."
        f" [2026-11-30 10:40 UTC; source {changed.source_id}; evidence {changed.evidence_id}]"
    )
    # a claim is dated by the capture of the evidence it cites (a correction: the correction's)
    job = remember(db, "I work at Acme", claim=("user", "employer", "Acme"), at=1_795_478_400)
    moved = db.correct(
        CorrectRequest(
            T, P, job.claim_id or "", "Now at Globex", "Globex", 1_796_000_000, 1_796_000_000
        )
    )
    (line,) = [
        x for x in build_context(db, T, P, "employer").text.splitlines() if moved.claim_id in x
    ]
    assert line == (
        f"- user employer Globex [2026-11-30 00:53 UTC; claim {moved.claim_id};"
        f" evidence {moved.evidence_id}]"
    )


def test_a_time_past_year_9999_leaves_the_line_undated(db: MemoryDb) -> None:
    """A millisecond timestamp sent as seconds (year 58,865) is no calendar date: the line keeps
    its plain excerpt rather than failing the whole block."""
    stored = remember(db, "milliseconds by mistake", at=1_795_478_400_000)
    (line,) = build_context(db, T, P, "milliseconds").text.splitlines()[1:]
    assert (
        line
        == f"- milliseconds by mistake [source {stored.source_id}; evidence {stored.evidence_id}]"
    )


def test_capture_times_looks_each_cited_evidence_up_by_id(tmp_path: Path) -> None:
    """The dates of a context block's lines are one primary-key lookup per cited evidence, not
    a walk of the scope (61 ms a block at 100k sources when the planner took the scope index):
    checked with EXPLAIN QUERY PLAN on the statement with bound ids, not timing."""
    db = MemoryDb.open(str(tmp_path / "m.db"))
    sam = db.scope("acme", "sam")
    cited = [sam.remember(f"note {i} about the trip").evidence_id for i in range(40)]
    for ids in (cited[:1], cited[:10]):
        sql = CAPTURE_TIMES_SQL.format(marks=", ".join("?" for _ in ids))
        rows = db.conn.execute(f"EXPLAIN QUERY PLAN {sql}", ids).fetchall()
        plan = " | ".join(str(row[3]) for row in rows)
        assert "SEARCH e USING INDEX sqlite_autoindex_evidence_1 (id=?)" in plan, plan
        assert "zkr_evidence_by_source_live" not in plan, plan
    times = capture_times(db.conn, "acme", "sam", cited[:3])
    assert set(times) == set(cited[:3])
    ana = db.scope("acme", "ana")
    assert capture_times(db.conn, "acme", "ana", cited[:3]) == {}  # another scope's evidence
    assert ana.remember("x").source_id
    db.close()
