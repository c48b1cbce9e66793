"""The eligibility rules of spec/retrieval.md §1 and §4 (zkr.store.eligibility), on real files."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from hypothesis import given, settings, strategies as st

from tests.conftest import P, T, remember
from zkr import MemoryDb
from zkr.model import DeleteRequest, Target, TargetKind
from zkr.store import eligibility
from zkr.store.eligibility import (
    LIVE_CLAIM,
    VISIBLE_CLAIM,
    Support,
    live_source,
    stands_for,
)

SRC = Path(__file__).resolve().parent.parent / "src" / "zkr"

STATUSES = ("accepted", "superseded", "retracted")
TIERS = ("short_term", "long_term", "archive")
STATES = ("pending", "processed", "blocked")
ENDS = st.one_of(st.none(), st.integers(0, 30))


def _spec_live(status: str, tier: str, state: str, vu: int | None, ru: int | None) -> bool:
    return (
        status == "accepted"
        and vu is None
        and ru is None
        and tier in ("short_term", "long_term")
        and state == "processed"
    )


def _spec_visible(
    row: tuple[str, str, str, int, int | None, int, int | None], v: int, r: int
) -> bool:
    status, _tier, state, vf, vu, rf, ru = row
    return (
        status in ("accepted", "superseded")
        and state == "processed"
        and vf <= v
        and (vu is None or vu > v)
        and rf <= r
        and (ru is None or ru > r)
    )


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(STATUSES),
            st.sampled_from(TIERS),
            st.sampled_from(STATES),
            st.integers(0, 30),
            ENDS,
            st.integers(0, 30),
            ENDS,
        ),
        min_size=1,
        max_size=8,
    ),
    v=st.integers(0, 30),
    r=st.integers(0, 30),
)
def test_claim_fragments_match_the_spec(
    rows: list[tuple[str, str, str, int, int | None, int, int | None]],
    v: int,
    r: int,
) -> None:
    """§1 live claim and §4 visible claim, evaluated by SQLite over claim rows in every state
    (a plain table of the same columns: the real schema's CHECKs forbid some combinations)."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE claims (id TEXT, status TEXT, tier TEXT, processing_state TEXT,"
        " valid_from INTEGER, valid_until INTEGER, recorded_from INTEGER, recorded_until INTEGER)"
    )
    for index, row in enumerate(rows):
        conn.execute("INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (str(index), *row))
    live = {i for (i,) in conn.execute(f"SELECT id FROM claims c WHERE {LIVE_CLAIM}")}
    visible = {
        i
        for (i,) in conn.execute(f"SELECT id FROM claims c WHERE {VISIBLE_CLAIM}", {"v": v, "r": r})
    }
    expect_live = {
        str(i)
        for i, (status, tier, state, _vf, vu, _rf, ru) in enumerate(rows)
        if _spec_live(status, tier, state, vu, ru)
    }
    expect_visible = {str(i) for i, row in enumerate(rows) if _spec_visible(row, v, r)}
    assert live == expect_live
    assert visible == expect_visible


def test_live_source_after_delete(db: MemoryDb) -> None:
    kept = remember(db, "kept capture")
    gone = remember(db, "gone capture")
    db.delete(DeleteRequest(T, P, gone.source_id, 20))
    live = {i for (i,) in db.conn.execute(f"SELECT id FROM sources WHERE {live_source('')}")}
    assert live == {kept.source_id}


def test_stands_for() -> None:
    """§3.3 step 4 / §5.4: claims first, then the capture itself unless hidden by a link."""
    src = TargetKind.SOURCE
    assert stands_for(src, "s", ["b", "a"], True, True) == [
        Target(TargetKind.CLAIM, "a"),
        Target(TargetKind.CLAIM, "b"),
    ]
    assert stands_for(src, "s", [], False, True) == [Target(src, "s")]
    assert stands_for(src, "s", [], True, True) == []
    assert stands_for(src, "s", [], True, False) == [Target(src, "s")]
    assert stands_for(TargetKind.EVIDENCE, "e", [], False, True) == [
        Target(TargetKind.EVIDENCE, "e")
    ]
    assert stands_for(TargetKind.CLAIM, "c", [], False, True) == [Target(TargetKind.CLAIM, "c")]
    support = Support()
    support.add_rows([("s1", None, False), ("s2", "c1", False), ("s3", "c2", True)])
    assert support.targets(src, "s1", True) == [Target(src, "s1")]
    assert support.targets(src, "s2", True) == []
    assert support.targets(src, "s2", False) == [Target(src, "s2")]
    assert support.targets(src, "s3", True) == [Target(TargetKind.CLAIM, "c2")]


def test_rules_live_in_one_module() -> None:
    """No store module spells a liveness rule itself: every path asks zkr.store.eligibility."""
    rules = (
        re.compile(r"deleted_at IS NULL"),
        re.compile(r"""'"supports"'"""),
    )
    # schema.py holds the reference's historical DDL (its triggers), verbatim by design
    exempt = {Path(eligibility.__file__).resolve(), (SRC / "store" / "schema.py").resolve()}
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.resolve() in exempt:
            continue
        code = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        )
        offenders += [f"{path.name}: {rule.pattern}" for rule in rules if rule.search(code)]
    assert offenders == []
