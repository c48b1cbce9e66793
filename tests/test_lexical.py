"""The lexical lane (store/lexical.py): query planning, ranking behaviour, and eligibility
parity with a slow, independent implementation of spec/retrieval.md §3.3 and §4."""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from tests.conftest import P, T, remember
from zkr import MemoryDb, ZkrError
from zkr.model import (
    AsOf,
    ClaimTierRequest,
    CorrectRequest,
    DeleteRequest,
    LinkRequest,
    ProcessingState,
    Relation,
    SearchRequest,
    Target,
    TargetKind,
    Tier,
)
from zkr.store import lexical
from zkr.store.search_index import CHAIN_DEPTH
from zkr.store.terms import document_terms, query_terms


def ids(db: MemoryDb, query: str, limit: int = 10, t: str = T, p: str = P) -> list[str]:
    return [item.memory.id for item in db.search(SearchRequest(t, p, query, limit)).items]


def test_user_fts_syntax_is_plain_text(db: MemoryDb) -> None:
    remember(db, "NEAR the col umn")
    for query in ['"', "NEAR(a b)", "a OR", "*", "col:umn ^x", "AND", '"quoted" "x', "x*"]:
        db.search(SearchRequest(T, P, query))
    assert ids(db, "col:umn") != []


def test_stems_match_inflections(db: MemoryDb) -> None:
    fixed = remember(db, "Sam fixed the garden fence", at=1).source_id
    painted = remember(db, "Sam painted the garden fence", at=2).source_id
    lived = remember(db, "Sam lived in Porto", at=3).source_id
    lives = remember(db, "Sam lives in Lisbon", at=4).source_id
    assert ids(db, "who paints the fence")[:2] == [painted, fixed]
    assert ids(db, "paints") == [painted]
    assert set(ids(db, "lives")) == {lives, lived}
    assert set(ids(db, "where Sam lives")) == {fixed, painted, lived, lives}
    assert set(ids(db, "where Sam lives")[:2]) == {lives, lived}


def test_stop_words_never_make_a_match(db: MemoryDb) -> None:
    for i in range(5):
        remember(db, f"what did you do at the {i} and then the other")
    target = remember(db, "robotics club meets on Friday").source_id
    assert ids(db, "what did you do at the robotics club") == [target]
    pack = db.search(SearchRequest(T, P, "what is it"))
    assert pack.items == [] and pack.gaps == ["no cited memory matched"]


def test_neighbouring_turn_is_lifted(db: MemoryDb) -> None:
    """The turn written right after a strong match outranks an equally weak match elsewhere."""
    remember(db, "Caroline: weather chat", at=1)
    far = remember(db, "Melanie: yes, I loved it", at=2).source_id
    for i in range(6):
        remember(db, f"Caroline: unrelated note {i}", at=3 + i)
    question = remember(db, "Caroline: did you enjoy the pottery workshop?", at=20).source_id
    answer = remember(db, "Melanie: yes, I loved it", at=21).source_id
    got = ids(db, "Did Melanie enjoy the pottery workshop?")
    # the answer may come first: Melanie's own turn (label boost) lifted by the question
    assert set(got[:2]) == {question, answer}
    assert got.index(answer) < got.index(far)


def test_leading_label_yields_marked_terms_only_for_labels() -> None:
    mark = "\ue000"
    assert document_terms("Caroline: I went to the parade") == [
        "carolin",
        "went",
        "parad",
        mark + "carolin",
    ]
    assert document_terms("Dr. Lee: take two pills")[-2:] == [mark + "dr", mark + "lee"]
    assert document_terms("张三：今天开会")[-1] == mark + "张三"  # fullwidth colon, no space
    not_labels = ("http://example.com is down", "10:30 dentist", "the plan we made with Sam: hike")
    for text in not_labels:
        assert not any(term.startswith(mark) for term in document_terms(text)), text
    assert not any(term.startswith(mark) for term in query_terms("Caroline: parade?")[0])


def test_a_turn_by_the_person_asked_about_ranks_first(
    db: MemoryDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of two turns holding the same words, the one the named person said comes first; the
    label only re-ranks (the other speaker's turn still matches)."""
    for i in range(4):
        remember(db, f"Caroline: weather chat {i}", at=i)
        remember(db, f"Melanie: garden chat {i}", at=10 + i)
    # (the person's own turn is the older one: the label, not recency, puts it first)
    own = remember(db, "Melanie: I painted a sunset with my kids at the lake", at=20).source_id
    hearsay = remember(db, "Caroline: Melanie painted a sunset", at=30).source_id
    assert ids(db, "What did Melanie paint?")[:2] == [own, hearsay]
    monkeypatch.setattr(lexical, "LABEL_BOOST", 1.0)  # without it, the shorter turn wins
    assert ids(db, "What did Melanie paint?")[:2] == [hearsay, own]


def test_limit_prefix_stability(db: MemoryDb) -> None:
    for i in range(30):
        remember(db, f"note {i} about the garden and {'roses ' * (i % 4)}", at=i)
    long = ids(db, "garden roses", limit=30)
    for limit in (1, 5, 10, 20):
        assert ids(db, "garden roses", limit=limit) == long[:limit]


def test_windowed_scoring_still_finds_rare_old_words(
    db: MemoryDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lexical, "WINDOW_ROWS", 5)
    monkeypatch.setattr(lexical, "RARE_DOCS", 2)
    old = remember(db, "the marigold launch code", at=1).source_id
    for i in range(40):
        word = "launch" if i % 3 == 0 else "review"
        remember(db, f"{word} checklist item {i} {'spare ' * (i % 3)}", at=2 + i)
    got = ids(db, "marigold launch", limit=3)
    assert got[0] == old
    assert len(got) == 3


# --------------------------------------------------------------------------- parity


VOCAB = ("apple", "berry", "cider", "delta", "ember", "fjord", "the", "and", "of")


@dataclass
class World:
    db: MemoryDb
    path: str


@contextmanager
def world() -> Iterator[World]:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "w.db")
        with MemoryDb.open(path) as db:
            yield World(db, path)


SCOPES = (("t1", "p1"), ("t2", "p1"), ("t1", "p2"))
TIER_STATES = (
    (Tier.LONG_TERM, ProcessingState.PROCESSED),
    (Tier.SHORT_TERM, ProcessingState.PROCESSED),
    (Tier.SHORT_TERM, ProcessingState.PENDING),
    (Tier.SHORT_TERM, ProcessingState.BLOCKED),
    (Tier.ARCHIVE, ProcessingState.PROCESSED),
)

texts = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5).map(" ".join)
scope_index = st.sampled_from((0, 0, 0, 1, 2))
memory = st.tuples(
    scope_index,
    texts,
    st.integers(1, 30),  # captured_at
    st.integers(0, 10),  # recorded_at - captured_at
    st.one_of(st.none(), st.integers(0, len(TIER_STATES) - 1)),  # claim
)
operation = st.tuples(
    st.sampled_from(("delete", "correct", "archive", "promote", "supports", "contradicts")),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(1, 60),
    texts,
)


def _build(
    w: World,
    memories: list[tuple[int, str, int, int, int | None]],
    operations: list[tuple[str, int, int, int, str]],
) -> None:
    made: list[tuple[int, str, str, str | None]] = []  # scope, source, evidence, claim
    for scope, text, at, lag, state_index in memories:
        t, p = SCOPES[scope]
        options: dict[str, Any] = {}
        if state_index is not None:
            tier, state = TIER_STATES[state_index]
            options = {"tier": tier, "processing_state": state}
        r = remember(
            w.db,
            text,
            t=t,
            p=p,
            at=at,
            recorded_at=at + lag,
            claim=None if state_index is None else ("Sam", "likes", text),
            **options,
        )
        made.append((scope, r.source_id, r.evidence_id, r.claim_id))
    for name, i, j, at, text in operations:
        scope, source, _, claim = made[i % len(made)]
        t, p = SCOPES[scope]
        other = made[j % len(made)]
        try:
            if name == "delete":
                w.db.delete(DeleteRequest(t, p, source, at))
            elif claim is None:
                continue
            elif name == "correct":
                fixed = w.db.correct(CorrectRequest(t, p, claim, text, text, at, at))
                made.append((scope, fixed.source_id, fixed.evidence_id, fixed.claim_id))
            elif name == "archive":
                w.db.archive(ClaimTierRequest(t, p, claim, at))
            elif name == "promote":
                w.db.promote(ClaimTierRequest(t, p, claim, at))
            else:
                relation = Relation.SUPPORTS if name == "supports" else Relation.CONTRADICTS
                w.db.link(LinkRequest(t, p, claim, other[2], relation, 5000))
        except ZkrError:
            pass


def _match_terms(docs: list[set[str]], query: str) -> set[str]:
    """The terms a document must hold (lexical.py docstring, step 2), counted in Python."""
    terms, _ = query_terms(query)
    df = {term: sum(term in doc for doc in docs) for term in terms}
    n = sum(1 for doc in docs if doc)

    def common(term: str) -> bool:
        return n >= lexical.COMMON_MIN_DOCS and df[term] >= lexical.COMMON_SHARE * n

    rare = [term for term in terms if not common(term)]
    return {term for term in rare if df[term] > 0} if rare else set(terms)


def _slow_eligible(path: str, t: str, p: str, query: str, as_of: AsOf | None) -> set[Target]:
    """spec/retrieval.md §3.3 (live) and §4 (as_of), row by row in Python."""
    conn = sqlite3.connect(path)
    try:
        sources = conn.execute(
            "SELECT id, content, captured_at, recorded_at, deleted_at FROM sources"
            " WHERE tenant_id = ? AND person_id = ?",
            (t, p),
        ).fetchall()
        claim_texts = conn.execute(
            "SELECT id, subject || ' ' || predicate || ' ' || value FROM claims"
            " WHERE tenant_id = ? AND person_id = ?",
            (t, p),
        ).fetchall()
        evidence = conn.execute(
            "SELECT id, source_id, recorded_at, deleted_at FROM evidence"
            " WHERE tenant_id = ? AND person_id = ?",
            (t, p),
        ).fetchall()
        links = conn.execute(
            "SELECT claim_id, evidence_id, relation FROM claim_evidence"
            " WHERE tenant_id = ? AND person_id = ?",
            (t, p),
        ).fetchall()
        corrections = conn.execute(
            "SELECT superseded_claim_id, claim_id FROM corrections"
            " WHERE tenant_id = ? AND person_id = ?",
            (t, p),
        ).fetchall()
        claims = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT id, status, tier, processing_state, valid_from, valid_until,"
                " recorded_from, recorded_until FROM claims WHERE tenant_id = ? AND person_id = ?",
                (t, p),
            )
        }
    finally:
        conn.close()

    def live_claim(cid: str) -> bool:
        c = claims.get(cid)
        return (
            c is not None
            and c[0] == "accepted"
            and c[4] is None
            and c[6] is None
            and c[1] in ("short_term", "long_term")
            and c[2] == "processed"
        )

    def visible_claim(cid: str, v: int, r: int) -> bool:
        c = claims.get(cid)
        return (
            c is not None
            and c[0] in ("accepted", "superseded")
            and c[2] == "processed"
            and c[3] <= v
            and (c[4] is None or c[4] > v)
            and c[5] <= r
            and (c[6] is None or c[6] > r)
        )

    source_terms = {
        sid: set(document_terms(content)) for sid, content, _, _, deleted in sources if not deleted
    }
    claim_terms = {cid: set(document_terms(text)) for cid, text in claim_texts}
    # a correcting claim also holds the words of the claims it supersedes (at most CHAIN_DEPTH
    # corrections back) and of their live supporting turns, while such a turn stands
    # (zkr.store.search_index._CHAIN_TEXT)
    texts = dict(claim_texts)
    content = {sid: text for sid, text, _, _, deleted in sources if deleted is None}
    live_evidence = {e[0]: e[1] for e in evidence if e[3] is None and e[1] in content}
    turns = {
        cid: {
            content[live_evidence[eid]]
            for c, eid, rel in links
            if c == cid and eid in live_evidence and rel == '"supports"'
        }
        for cid in texts
    }
    own = dict(claim_terms)
    for head in claim_terms:
        front, seen = {head}, set()
        for _ in range(CHAIN_DEPTH):
            front = {old for old, new in corrections if new in front} - seen
            seen |= front
        for old in seen:
            if turns.get(old):
                claim_terms[head] |= own[old]
                for text in turns[old]:
                    claim_terms[head] |= set(document_terms(text))
    wanted = _match_terms([*source_terms.values(), *claim_terms.values()], query)

    def citable(cid: str) -> bool:
        by_id = {s[0]: s for s in sources}
        for claim_id, eid, rel in links:
            if claim_id != cid or rel != '"supports"':
                continue
            for e in evidence:
                src = by_id.get(e[1])
                if e[0] != eid or e[3] is not None or src is None or src[4] is not None:
                    continue
                if as_of is None or (
                    e[2] <= as_of.recorded_at
                    and src[2] <= as_of.valid_at
                    and src[3] <= as_of.recorded_at
                ):
                    return True
        return False

    out: set[Target] = set()
    for cid, terms in claim_terms.items():
        if not terms & wanted or not citable(cid):
            continue
        if as_of is None and live_claim(cid):
            out.add(Target(TargetKind.CLAIM, cid))
        if as_of is not None and visible_claim(cid, as_of.valid_at, as_of.recorded_at):
            out.add(Target(TargetKind.CLAIM, cid))
    for sid, _content, captured, recorded, deleted in sources:
        if deleted is not None or not source_terms[sid] & wanted:
            continue
        if as_of is not None and (captured > as_of.valid_at or recorded > as_of.recorded_at):
            continue
        mine = [
            e
            for e in evidence
            if e[1] == sid and e[3] is None and (as_of is None or e[2] <= as_of.recorded_at)
        ]
        if not mine:
            continue
        supports = [
            cid for cid, eid, rel in links if rel == '"supports"' and any(e[0] == eid for e in mine)
        ]
        if as_of is None:
            found = {cid for cid in supports if live_claim(cid)}
            if supports and not found:
                continue
        else:
            found = {
                cid for cid in supports if visible_claim(cid, as_of.valid_at, as_of.recorded_at)
            }
        if found:
            out.update(Target(TargetKind.CLAIM, cid) for cid in found)
        else:
            out.add(Target(TargetKind.SOURCE, sid))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memories=st.lists(memory, min_size=1, max_size=10),
    operations=st.lists(operation, max_size=8),
    queries=st.lists(
        st.tuples(
            st.lists(st.sampled_from((*VOCAB, "zebra")), min_size=1, max_size=3).map(" ".join),
            scope_index,
            st.one_of(st.none(), st.tuples(st.integers(0, 70), st.integers(0, 70))),
        ),
        min_size=1,
        max_size=4,
    ),
    small_windows=st.booleans(),
)
@example(  # a correction found by the corrected value's words (search_index._CHAIN_TEXT)
    memories=[(0, "apple", 1, 0, 0)],
    operations=[("delete", 0, 0, 1, "apple"), ("correct", 0, 0, 2, "berry")],
    queries=[("apple", 0, None)],
    small_windows=False,
)
def test_eligible_set_matches_slow_implementation(
    memories: list[tuple[int, str, int, int, int | None]],
    operations: list[tuple[str, int, int, int, str]],
    queries: list[tuple[str, int, tuple[int, int] | None]],
    small_windows: bool,
) -> None:
    """With a limit larger than every match set, search returns exactly the eligible targets
    (live and as_of), whatever the scoring windows."""
    saved = (lexical.WINDOW_ROWS, lexical.RARE_DOCS, lexical.SPAN)
    if small_windows:
        lexical.WINDOW_ROWS, lexical.RARE_DOCS, lexical.SPAN = 3, 1, 2
    try:
        with world() as w:
            _build(w, memories, operations)
            for query, scope, when in queries:
                t, p = SCOPES[scope]
                as_of = None if when is None else AsOf(*when)
                pack = w.db.search(SearchRequest(t, p, query, 100, None, as_of))
                got = [item.memory for item in pack.items]
                assert len(got) == len(set(got))
                assert set(got) == _slow_eligible(w.path, t, p, query, as_of), query
                event(f"{'as_of' if as_of else 'live'}: {sorted({m.kind.value for m in got})}")
                assert all(len(item.evidence_ids) == 1 for item in pack.items)
                points = [item.relevance_basis_points for item in pack.items]
                assert all(0 < x <= 10_000 for x in points)
                # deterministic
                again = w.db.search(SearchRequest(t, p, query, 100, None, as_of))
                assert [item.memory for item in again.items] == got
    finally:
        lexical.WINDOW_ROWS, lexical.RARE_DOCS, lexical.SPAN = saved


def test_claim_words_as_of_follow_history(db: MemoryDb) -> None:
    """A claim found by its own words obeys spec/retrieval.md §4: the value visible then."""
    old = remember(db, "Sam works at Acme", at=10, claim=("Sam", "employer", "Acme"))
    new = db.correct(CorrectRequest(T, P, old.claim_id, "Sam joined Globex", "Globex", 20, 20))
    kinds = {
        when: [
            (i.memory.kind.value, i.memory.id)
            for i in db.search(SearchRequest(T, P, "employer", 10, None, AsOf(when, when))).items
        ]
        for when in (5, 15, 25)
    }
    assert kinds[5] == []
    assert kinds[15] == [("claim", old.claim_id)]
    assert kinds[25] == [("claim", new.claim_id)]
    assert ids(db, "employer") == [new.claim_id]
