"""Our own retrieval test set: a personal-memory corpus and the packs an agent must get.

Each case names the memories a query must return (exactly: nothing else may pad the pack)
or says it must find nothing (empty pack, the gap). It covers morphology (Snowball stems),
claim words, corrections, deletions, unspaced scripts, Unicode forms (NFKC, folding, Hangul
NFD/NFC), stop-word-only queries and a speaker label that starts every turn. The corpus is
written through the library like an agent would (claims extracted from some captures).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import remember
from zkr import MemoryDb
from zkr.model import CorrectRequest, DeleteRequest, SearchRequest

T, P = "me", "alex"
HERMES = "hermes"

# key: (text, claim or None)
CORPUS: dict[str, tuple[str, tuple[str, str, str] | None]] = {
    "berries": ("I love blueberries with yoghurt for breakfast", None),
    "breakfast_pref": (
        "For breakfast I prefer porridge on weekdays",
        ("alex", "prefers for breakfast", "porridge"),
    ),
    "dentist": ("Dentist appointment on Tuesday at 9:30 with Dr. Okafor", None),
    "job": ("I started working at Zalando in March", ("alex", "employer", "Zalando")),
    "team": ("My team has four engineers and one designer", None),
    "city": ("I live in Berlin, near Tempelhof", ("alex", "city", "Berlin")),
    "sister": ("My sister Maya is a nurse in Lisbon", ("Maya", "occupation", "nurse")),
    "cat": ("Our cat Pixel hates the vacuum cleaner", None),
    "allergy": ("I'm allergic to peanuts, carry an EpiPen", ("alex", "allergy", "peanuts")),
    "marathon": ("Running the Berlin marathon in September, training 4 days a week", None),
    "guitar": ("Took my first guitar lessons; the teacher is called Jonas", None),
    "flight": ("Flight LH1234 to Lisbon departs Friday 07:15", None),
    "birthday": ("Maya's birthday is on 14 June; she likes orchids", None),
    "car": ("The car needs new winter tyres before November", None),
    "db": ("今天用OpenClaw部署了向量数据库", None),
    "tokyo": ("東京で会議があります、来週の水曜日", None),
    "thai": ("ไปเที่ยวเชียงใหม่เดือนหน้า", None),
    "korean": (unicodedata.normalize("NFD", "서울에서 친구를 만났어요"), None),
    "cafe": ("Coffee at Café Müller was excellent", None),
    "fullwidth": ("Password hint: ＺＥＰＨＹＲ", None),
    "german": ("Die Straße vor dem Büro wird gesperrt", None),
    "port": ("The staging server listens on port 6001", ("staging server", "port", "6001")),
    "deleted": ("Old locker code is 4471", None),
    "cheese_none": ("Pick up the dry cleaning tomorrow", None),
}


class Corpus:
    def __init__(self, db: MemoryDb) -> None:
        self.db = db
        self.ids: dict[str, tuple[str, str]] = {}  # key -> (kind, id) the search returns
        for at, (key, (text, claim)) in enumerate(CORPUS.items(), start=10):
            r = remember(self.db, text, t=T, p=P, at=at, claim=claim)
            self.ids[key] = ("claim", r.claim_id) if claim else ("source", r.source_id)
        # the user corrects two facts and deletes one note
        moved = self.db.correct(
            CorrectRequest(
                T, P, self.ids["city"][1], "Alex moved to Munich in May", "Munich", 90, 90
            )
        )
        self.ids["city_new"] = ("claim", moved.claim_id)
        ported = self.db.correct(
            CorrectRequest(
                T, P, self.ids["port"][1], "Staging moved to port 7002 today", "7002", 91, 91
            )
        )
        self.ids["port_new"] = ("claim", ported.claim_id)
        source = self.db.conn.execute(
            "SELECT id FROM sources WHERE content = ?", (CORPUS["deleted"][0],)
        ).fetchone()[0]
        self.db.delete(DeleteRequest(T, P, source, 92))
        # a Hermes-style transcript: every turn starts with the speaker label
        for i, line in enumerate(
            [
                "User: can you book a table for two on Friday?",
                "User: remind me to water the plants",
                "User: what's the weather like in Porto",
                "User: I bought a new kettle",
                "User: my favourite cheese is comté",
                "User: please summarise the meeting notes",
                "User: the printer is out of toner again",
                "User: plan a weekend trip to the coast",
                "User: order more coffee beans",
                "User: find the invoice from the plumber",
                "User: set an alarm for 6am",
                "User: I finished reading Dune",
                "User: call mum on Sunday",
                "User: the bike tyre is flat",
                "User: book the dentist for a cleaning",
                "User: what time is the train to Hamburg",
                "User: cancel the gym membership",
                "User: send the slides to Priya",
            ]
        ):
            r = remember(self.db, line, t=T, p=HERMES, at=100 + i)
            self.ids[f"hermes{i}"] = ("source", r.source_id)

    def search(self, query: str, person: str = P) -> list[tuple[str, str]]:
        pack = self.db.search(SearchRequest(T, person, query, 20))
        assert (pack.gaps == []) == bool(pack.items), pack
        for item in pack.items:
            assert 0 < item.relevance_basis_points <= 10_000
            assert len(item.evidence_ids) == 1
        return [(item.memory.kind.value, item.memory.id) for item in pack.items]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    path = Path(tmp_path_factory.mktemp("retrieval-set")) / "memory.db"
    with MemoryDb.open(str(path)) as db:
        yield Corpus(db)


# the live claims about alex: a query naming alex matches them all (a shared content word);
# the one the rest of the query names ranks first (test_best_match_first)
ALEX = {"job", "breakfast_pref", "allergy", "city_new"}

# (query, keys the pack holds exactly; empty = nothing may match)
FOUND: list[tuple[str, set[str]]] = [
    # morphology
    ("blueberry", {"berries"}),
    ("blueberries", {"berries"}),
    ("appointments", {"dentist"}),
    ("working", {"job"}),
    ("work", {"job"}),
    ("engineer", {"team"}),
    ("engineers", {"team"}),
    ("lessons", {"guitar"}),
    ("lesson", {"guitar"}),
    ("runs", {"marathon"}),
    ("hated", {"cat"}),
    ("allergies", {"allergy"}),
    ("allergic", {"allergy"}),
    ("tyre", {"car"}),
    ("orchid", {"birthday"}),
    # claim words, and captures standing for their claims
    ("employer", {"job"}),
    ("who is alex's employer", {"job", *ALEX}),
    ("Zalando", {"job"}),
    ("occupation", {"sister"}),
    ("nurse", {"sister"}),
    ("what does alex prefer for breakfast?", {"breakfast_pref", "berries", *ALEX}),
    ("porridge", {"breakfast_pref"}),
    ("peanut allergy", {"allergy"}),
    # corrections: the new value, never the superseded one; a superseded value's words find
    # the claim that corrected it (a correction is found by what it corrects)
    ("where does alex live", {"city_new", *ALEX}),
    ("city", {"city_new"}),
    ("Munich", {"city_new"}),
    ("Tempelhof", {"city_new"}),
    ("staging port", {"port_new"}),
    ("6001", {"port_new"}),
    ("7002", {"port_new"}),
    # deletions
    ("locker code", set()),
    ("4471", set()),
    # names, numbers, mixed
    ("Maya", {"sister", "birthday"}),
    ("Okafor", {"dentist"}),
    ("LH1234", {"flight"}),
    ("Lisbon flight", {"flight", "sister"}),
    ("Berlin", {"marathon", "city_new"}),
    ("September marathon", {"marathon"}),
    # unspaced scripts, Unicode forms
    ("OpenClaw", {"db"}),
    ("openclaw", {"db"}),
    ("数据库", {"db"}),
    ("向量", {"db"}),
    ("東京", {"tokyo"}),
    ("会議", {"tokyo"}),
    ("เชียงใหม่", {"thai"}),
    ("서울", {"korean"}),
    (unicodedata.normalize("NFC", "친구를"), {"korean"}),
    ("cafe muller", {"cafe"}),
    ("CAFÉ", {"cafe"}),
    ("zephyr", {"fullwidth"}),
    ("strasse", {"german"}),
    ("buro", {"german"}),
    # nothing really matches: empty pack, no padding
    ("what is his job", set()),
    ("what is it", set()),
    ("who are you", set()),
    ("how was it?", set()),
    ("?!", set()),
    ("the", set()),
    ("大阪", set()),
    ("helicopter", set()),
    ("what did we do on the weekend", set()),
]

HERMES_CASES: list[tuple[str, set[str]]] = [
    # 'user' is in every turn: it says nothing about which turn is meant
    ("does the user eat cheese", {"hermes4"}),
    ("does the user drink tea", set()),
    ("user", {f"hermes{i}" for i in range(18)}),
    ("User: dentist", {"hermes14"}),
    ("did the user mention coffee", {"hermes8"}),
    ("tyres", {"hermes13"}),
]


@pytest.mark.parametrize(("query", "expected"), FOUND)
def test_found_exactly(corpus: Corpus, query: str, expected: set[str]) -> None:
    got = corpus.search(query)
    assert len(got) == len(set(got))
    assert set(got) == {corpus.ids[key] for key in expected}, query


@pytest.mark.parametrize(("query", "expected"), HERMES_CASES)
def test_speaker_label_never_makes_a_match(corpus: Corpus, query: str, expected: set[str]) -> None:
    assert set(corpus.search(query, HERMES)) == {corpus.ids[key] for key in expected}, query


@pytest.mark.parametrize(
    ("query", "best"),
    [
        ("who is alex's employer", "job"),
        ("what does alex prefer for breakfast?", "breakfast_pref"),
        ("where does alex live", "city_new"),
        ("does the user eat cheese", "hermes4"),
    ],
)
def test_best_match_first(corpus: Corpus, query: str, best: str) -> None:
    person = HERMES if best.startswith("hermes") else P
    got = corpus.search(query, person)
    assert got[0] == corpus.ids[best]
    points = corpus.db.search(SearchRequest(T, person, query, 20)).items
    assert points[0].relevance_basis_points == max(i.relevance_basis_points for i in points)


def test_relevance_is_absolute(corpus: Corpus) -> None:
    """A full match scores the same whatever else the query or store holds; a partial match
    scores by the share of the query it holds."""
    full = corpus.db.search(SearchRequest(T, P, "blueberries", 5)).items[0]
    assert full.relevance_basis_points == 10_000
    partial = corpus.db.search(SearchRequest(T, P, "blueberries helicopter", 5)).items
    assert [i.memory.id for i in partial] == [corpus.ids["berries"][1]]
    assert 3_000 < partial[0].relevance_basis_points < 7_000
    rare_vs_common = corpus.db.search(SearchRequest(T, P, "Maya orchids", 5)).items
    assert rare_vs_common[0].memory.id == corpus.ids["birthday"][1]
    assert rare_vs_common[0].relevance_basis_points > rare_vs_common[1].relevance_basis_points


def test_the_set_is_large_enough() -> None:
    assert len(FOUND) + len(HERMES_CASES) >= 60


def test_superseded_value_never_resurfaces_through_vectors(tmp_path: Path) -> None:
    import hashlib

    from zkr.model import (
        Distance,
        EmbeddingInput,
        EmbedRequest,
        Normalization,
        QueryEmbedding,
        Target,
        TargetKind,
    )

    with MemoryDb.open(str(tmp_path / "dense.db")) as db:
        text = "The staging server listens on port 6001"
        old = remember(db, text, t=T, p=P, claim=("staging server", "port", "6001"))
        digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        vector = EmbeddingInput([1.0, 0.0], "m", "1", digest, Normalization.L2, Distance.COSINE)
        db.embed(EmbedRequest(T, P, Target(TargetKind.SOURCE, old.source_id), vector))
        db.correct(CorrectRequest(T, P, old.claim_id, "Staging moved to port 7002", "7002", 20, 20))
        query = QueryEmbedding([1.0, 0.0], "m", "1")
        pack = db.search(SearchRequest(T, P, "staging port", 10, query))
        assert "6001" not in " ".join(item.excerpt for item in pack.items)
