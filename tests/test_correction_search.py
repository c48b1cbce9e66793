"""A correction stays findable by what it corrects (store/search_index.py, _CHAIN_TEXT): the
brief's flagship question, "what did I decide about the trip?", still answers with the current
claim and the turn it rests on after "Porto instead of Lisbon", through the library, the CLI
and a long-lived connection's in-memory index; ``as_of`` before the correction is unchanged and
retracting the correction resurrects nothing."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.conftest import P, T, cli, remember
from tests.test_memindex import kept, same_reads
from zkr import MemoryDb
from zkr.model import AsOf, CorrectRequest, DeleteRequest, SearchRequest
from zkr.store.search_index import CHAIN_DEPTH, scope_tag

QUESTION = "what did I decide about the trip?"
DECISION = "I decided: the trip is to Lisbon"
CHANGE = "Change of plan: Porto instead of Lisbon."
CHATTER = (
    "The trip will need new luggage",
    "Did you book the hotel for the trip yet?",
    "My sister loves every trip to the coast",
    "A trip to the dentist on Monday",
    "The weather for the trip looks fine",
    "We talked about the trip budget",
    "Pack sunscreen for the trip",
)


def _items(
    db: MemoryDb, query: str, as_of: AsOf | None = None, t: str = T
) -> list[tuple[str, str, Any]]:
    pack = db.search(SearchRequest(t, P, query, 10, None, as_of))
    return [(i.memory.kind.value, i.memory.id, i.evidence_ids) for i in pack.items]


def _story(db: MemoryDb) -> Any:
    """Eight turns, the decision among them with its claim; returns the decision's result."""
    decided = remember(db, DECISION, at=10, claim=("trip", "destination", "Lisbon"))
    for n, text in enumerate(CHATTER):
        remember(db, text, at=11 + n)
    return decided


def test_the_current_claim_answers_the_decision_question_after_a_correction(
    db: MemoryDb,
) -> None:
    _decision_question(db)


@pytest.mark.postgres
def test_postgres_answers_the_decision_question_after_a_correction(pg_dsn: str) -> None:
    with MemoryDb.open(pg_dsn) as db:
        _decision_question(db)
        _deleted_corrected_turn(db, "t2")
        _deleted_supporting_turn(db, "t3")
        _long_chain(db, "t4")


def _decision_question(db: MemoryDb) -> None:
    decided = _story(db)
    before = _items(db, QUESTION)
    assert before[0] == ("claim", decided.claim_id, [decided.evidence_id])
    fixed = db.correct(CorrectRequest(T, P, decided.claim_id, CHANGE, "Porto", 30, 30))
    after = db.search(SearchRequest(T, P, QUESTION, 10))
    top = after.items[0]
    assert (top.memory.kind.value, top.memory.id) == ("claim", fixed.claim_id)
    assert top.evidence_ids == [fixed.evidence_id]  # the correction's turn is cited
    assert top.relevance_basis_points >= 9000  # (it was 1718 without the chain text)
    found = {i.memory.id for i in after.items}
    assert decided.claim_id not in found  # superseded: never live
    # as_of before the correction: exactly what it was
    assert _items(db, QUESTION, AsOf(20, 20)) == before
    # retracting the correction (deleting its source) brings nothing of the old chain back
    db.delete(DeleteRequest(T, P, fixed.source_id, 40))
    gone = {i[1] for i in _items(db, QUESTION)}
    assert fixed.claim_id not in gone and decided.claim_id not in gone
    assert decided.source_id not in gone and fixed.source_id not in gone
    assert _items(db, QUESTION, AsOf(20, 20)) == before


def test_a_deleted_corrected_turn_leaves_the_corrections_document(db: MemoryDb) -> None:
    """The chain text holds live sources only: deleting the decision's turn takes "decided"
    out of the correction's document too (re-indexed with the source)."""
    _deleted_corrected_turn(db, T)


def _deleted_corrected_turn(db: MemoryDb, t: str) -> None:
    decided = remember(db, DECISION, t=t, at=10, claim=("trip", "destination", "Lisbon"))
    fixed = db.correct(CorrectRequest(t, P, decided.claim_id, CHANGE, "Porto", 30, 30))
    assert _items(db, "decided", t=t)[0][1] == fixed.claim_id
    db.delete(DeleteRequest(t, P, decided.source_id, 40))
    assert _items(db, "decided", t=t) == []
    assert _items(db, "Porto", t=t)[0][1] == fixed.claim_id


def test_a_correction_by_another_connection_reaches_the_in_memory_index(
    db: MemoryDb, db_path: str
) -> None:
    decided = _story(db)
    for _ in range(3):  # from the second search on, the scope is kept in memory
        assert _items(db, QUESTION)[0][1] == decided.claim_id
    with MemoryDb.open(db_path) as other:
        fixed = other.correct(CorrectRequest(T, P, decided.claim_id, CHANGE, "Porto", 30, 30))
    assert _items(db, QUESTION)[0] == ("claim", fixed.claim_id, [fixed.evidence_id])
    conn = db._connect()
    same_reads(conn, kept(db), [QUESTION, "Lisbon", "Porto", "decided"])


def test_the_cli_answers_the_decision_question_after_a_correction(db_path: str) -> None:
    scope = {"tenant_id": T, "person_id": P}
    claim = {"subject": "trip", "predicate": "destination", "value": "Lisbon"}
    decided = cli(
        db_path,
        "remember",
        {
            **scope,
            "kind": "conversation",
            "text": DECISION,
            "captured_at": 10,
            "recorded_at": 10,
            "claim": {**claim, "kind": "fact", "valid_from": 10},
        },
    ).json()
    for n, text in enumerate(CHATTER):
        turn = {"kind": "conversation", "text": text, "captured_at": 11 + n, "recorded_at": 11 + n}
        cli(db_path, "remember", {**scope, **turn}).json()
    fixed = cli(
        db_path,
        "correct",
        {
            **scope,
            "claim_id": decided["claim_id"],
            "text": CHANGE,
            "value": "Porto",
            "valid_at": 30,
            "recorded_at": 30,
        },
    ).json()
    pack = cli(db_path, "search", {**scope, "query": QUESTION}).json()
    top = pack["items"][0]
    assert top["memory"] == {"kind": "claim", "id": fixed["claim_id"]}
    assert top["evidence_ids"] == [fixed["evidence_id"]]
    assert top["relevance_basis_points"] >= 9000


def test_a_deleted_turn_takes_its_claims_words_out_of_the_correction(db: MemoryDb) -> None:
    """The superseded claim's own words (subject, predicate, value) are carried only while a
    live turn supports it: once the user deletes that turn, searching its value finds nothing,
    not the correction."""
    _deleted_supporting_turn(db, T)


def _deleted_supporting_turn(db: MemoryDb, t: str) -> None:
    old = remember(db, "Sam works at Acme", t=t, at=10, claim=("Sam", "employer", "Acme"))
    fixed = db.correct(CorrectRequest(t, P, old.claim_id, "Sam moved on", "Globex", 30, 30))
    assert _items(db, "Acme", t=t)[0][1] == fixed.claim_id
    db.delete(DeleteRequest(t, P, old.source_id, 40))
    assert _items(db, "Acme", t=t) == []
    assert _items(db, "Globex", t=t)[0][1] == fixed.claim_id


def test_a_long_chain_holds_only_the_last_corrections_words(db: MemoryDb, db_path: str) -> None:
    """A claim corrected again and again (a daily "where am I") would make each correction's
    document hold every earlier turn: quadratic in the chain (400 corrections: a 44 MB file, a
    13 s search after deleting the first turn). Each holds the words of CHAIN_DEPTH corrections
    back; a delete still takes its words out of every document that holds them."""
    _long_chain(db, T)
    index = sqlite3.connect(db_path)
    (docs,) = index.execute(
        "SELECT count(*) FROM zkr_fts WHERE zkr_fts MATCH ?", (f'"{scope_tag(T, P)}orig"',)
    ).fetchone()
    assert docs == 1  # after the delete: the first claim's own document (it stands for nothing)
    (docs,) = index.execute(
        "SELECT count(*) FROM zkr_fts WHERE zkr_fts MATCH ?", (f'"{scope_tag(T, P)}step0"',)
    ).fetchone()
    assert docs == 1 + CHAIN_DEPTH  # its own turn's document and CHAIN_DEPTH corrections'


def _long_chain(db: MemoryDb, t: str) -> None:
    first = remember(db, "origami class on Fridays", t=t, at=10, claim=("hobby", "is", "orig"))
    claim, turns = first.claim_id, []
    for n in range(CHAIN_DEPTH + 3):
        fixed = db.correct(CorrectRequest(t, P, claim, f"step{n} instead", f"v{n}", 20 + n, 20 + n))
        claim = fixed.claim_id
        turns.append(fixed)
        db.search(SearchRequest(t, P, "origami", 10))
    assert _items(db, "origami", t=t) == []  # more than CHAIN_DEPTH corrections back
    # the turn CHAIN_DEPTH back from the head still leads to it, until it is deleted
    deep = turns[-1 - CHAIN_DEPTH]
    word = f"step{len(turns) - 1 - CHAIN_DEPTH}"
    assert _items(db, word, t=t)[0][1] == claim
    db.delete(DeleteRequest(t, P, deep.source_id, 100))
    assert _items(db, word, t=t) == []
    db.delete(DeleteRequest(t, P, first.source_id, 101))
    assert _items(db, "orig", t=t) == []
