"""What each waived shared-suite step was guarding, asserted on our own terms.

tests/conformance-waivers.json and tests/sync-waivers.json waive search steps whose item set
differs only because zkr matches more or drops meaningless matches. Each waiver names one test
here; the test re-creates the step's situation and asserts the invariant the recording
protected (eligibility, citations, replacement of a source by its claim, scope, history).
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import P, T, remember
from zkr import MemoryDb
from zkr.model import AsOf, CorrectRequest, DeleteRequest, SearchRequest, TargetKind

HERE = Path(__file__).parent
WAIVERS = {
    "conformance/run": HERE / "conformance-waivers.json",
    "fixtures/sync/check": HERE / "sync-waivers.json",
}


def pack(db: MemoryDb, query: str, t: str = T, as_of: AsOf | None = None) -> list[tuple[str, str]]:
    result = db.search(SearchRequest(t, P, query, 20, None, as_of))
    assert (result.gaps == []) == bool(result.items)
    return [(item.memory.kind.value, item.memory.id) for item in result.items]


def test_claim_found_by_its_own_words_replaces_its_source(db: MemoryDb) -> None:
    """search_claim_found_via_source_text step 4: 'employer' is only in the claim."""
    r = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    for query in ("employer", "Acme", "works", "Sam employer Acme"):
        assert pack(db, query) == [("claim", r.claim_id)], query
    item = db.search(SearchRequest(T, P, "employer")).items[0]
    assert item.excerpt == "Sam employer Acme" and item.evidence_ids == [r.evidence_id]
    # superseded: the old claim is no longer found by its own words, the new one is
    fixed = db.correct(CorrectRequest(T, P, r.claim_id, "Sam moved to Globex", "Globex", 20, 20))
    assert pack(db, "employer") == [("claim", fixed.claim_id)]
    # (the correction carries the words of what it corrects, never the superseded claim)
    assert pack(db, "Acme") == [("claim", fixed.claim_id)]
    # deleted: its claim disappears from every query
    db.delete(DeleteRequest(T, P, fixed.source_id, 30))
    assert pack(db, "employer") == [] and pack(db, "Globex") == []


def test_stop_word_query_is_an_empty_pack_and_fts_syntax_is_text(db: MemoryDb) -> None:
    """search_fts_special_characters step 17: "it's" is stop words only."""
    text = "Price: $5 * 3 = 15; see (note) [ref] {x} a:b ^top -minus +plus it's C++ 100%"
    r = remember(db, text)
    assert pack(db, "it's") == []
    for query in ("$5", "(note)", "[ref]", "a:b", "^top", "-minus", "+plus", "C++", "100%"):
        assert pack(db, query) == [("source", r.source_id)], query


def test_repeated_word_finds_the_word_in_scope_only(db: MemoryDb) -> None:
    """search_phrase_then_tokens step 7: a repeated word is that word (not a phrase)."""
    a = remember(db, "Alice works at Acme Corporation").source_id
    b = remember(db, "Alice moved near the Acme campus").source_id
    remember(db, "Where does Alice work at another tenant?", t="t2")
    assert set(pack(db, "alice alice ALICE")) == {("source", a), ("source", b)}
    assert set(pack(db, "alice alice ALICE", t="t2")) != set(pack(db, "alice alice ALICE"))


def test_unicode_forms_find_each_other(db: MemoryDb) -> None:
    """search_unicode steps 12, 17, 22: bigrams, full case folding, NFKC."""
    tokyo = remember(db, "東京で会議があります").source_id
    strasse = remember(db, "Straße in München").source_id
    wide = remember(db, "ＦＵＬＬＷＩＤＴＨ letters").source_id
    hangul = remember(db, unicodedata.normalize("NFD", "서울에서 일해요")).source_id
    assert pack(db, "東京") == [("source", tokyo)]
    assert pack(db, "会議") == [("source", tokyo)]
    assert pack(db, "strasse") == [("source", strasse)]
    assert pack(db, "munchen") == [("source", strasse)]
    assert pack(db, "fullwidth") == [("source", wide)]
    assert pack(db, unicodedata.normalize("NFC", "서울")) == [("source", hangul)]
    assert pack(db, "大阪") == []
    # stored text stays byte-exact
    excerpts = [i.excerpt for i in db.search(SearchRequest(T, P, "서울")).items]
    assert excerpts == [unicodedata.normalize("NFD", "서울에서 일해요")]


def test_as_of_stem_match_keeps_historical_rules(db: MemoryDb) -> None:
    """sync corrections read 10: an as_of stem match still obeys spec/retrieval.md §4."""
    old = remember(db, "I live in Berlin.", at=10, claim=("Sam", "city", "Berlin"))
    new = db.correct(
        CorrectRequest(T, P, old.claim_id, "Correction: Sam lives in Lisbon now.", "Lisbon", 40, 41)
    )
    gone = remember(db, "Sam lived in Rome once", at=12).source_id
    db.delete(DeleteRequest(T, P, gone, 13))
    # before the correction: the Berlin claim stands for its source
    assert pack(db, "lives", as_of=AsOf(20, 20)) == [("claim", old.claim_id)]
    # after it: the Lisbon claim, and the Berlin source raw (its claim is not visible then)
    got = set(pack(db, "lives", as_of=AsOf(50, 50)))
    assert got == {("claim", new.claim_id), ("source", old.source_id)}
    # live: only the current claim; the superseded one and the deleted source never come back
    assert pack(db, "lives") == [("claim", new.claim_id)]
    everything = pack(db, "lives lived live Rome", as_of=AsOf(50, 50))
    assert ("source", gone) not in everything
    assert all(kind != TargetKind.EVIDENCE.value for kind, _ in everything)


@pytest.mark.parametrize("name", sorted(WAIVERS))
def test_every_waiver_has_a_reason_and_a_guarding_test(name: str) -> None:
    entries = json.loads(WAIVERS[name].read_text(encoding="utf-8"))["waivers"]
    guards = Path(__file__).read_text(encoding="utf-8")
    for entry in entries:
        reason = entry["reason"]
        test = reason.rsplit("tests/test_waivers.py::", 1)[-1]
        assert "tests/test_waivers.py::" in reason and f"def {test}(" in guards, entry


def test_a_correction_is_found_by_the_words_of_what_it_corrects(db: MemoryDb) -> None:
    """correct_basic step 7, search_as_of_corrections step 3, search_contradicting_evidence
    steps 6 and 10: 'Acme' finds the claim that corrected 'Sam employer Acme' (its document
    carries the chain's words, tests/test_correction_search.py), never the superseded claim or
    its source; ``as_of`` before the correction still finds the old claim; retracting the
    correction brings nothing back."""
    a = remember(db, "Sam works at Acme", claim=("Sam", "employer", "Acme"))
    x = remember(db, "Sam left Acme last month", at=12)
    fix = db.correct(CorrectRequest(T, P, a.claim_id, "Sam moved to Beta", "Beta", 20, 21))
    assert pack(db, "Acme") == [("claim", fix.claim_id), ("source", x.source_id)]
    item = db.search(SearchRequest(T, P, "Acme")).items[0]
    assert item.excerpt == "Sam employer Beta" and item.evidence_ids == [fix.evidence_id]
    assert pack(db, "Acme", as_of=AsOf(11, 11)) == [("claim", a.claim_id)]
    db.delete(DeleteRequest(T, P, x.source_id, 30))
    assert pack(db, "Acme") == [("claim", fix.claim_id)]
    db.delete(DeleteRequest(T, P, fix.source_id, 31))
    assert pack(db, "Acme") == [] and pack(db, "Beta") == []
