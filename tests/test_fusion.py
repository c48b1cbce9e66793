"""zkr.store.fusion's conversation order of the calibrated dense pool, on real databases:
neighbouring captures lift a turn, a speaker label the query names lifts it further, the floor
still cuts, and the similarity (relevance) is left as it was."""

from __future__ import annotations

import math

from tests.conftest import P, T, remember
from tests.test_embeddings import M, V, embed
from zkr import MemoryDb
from zkr.model import QueryEmbedding, Target, TargetKind
from zkr.store import dense, fusion
from zkr.store.db import read_tx
from zkr.store.dense import Candidate


def unit(angle: float) -> list[float]:
    return [math.cos(angle), math.sin(angle)]


def source(source_id: str) -> Target:
    return Target(TargetKind.SOURCE, source_id)


def test_in_context_reads_neighbours_and_labels(db: MemoryDb) -> None:
    """A dense target's capture neighbours are the sources recorded just before and after it
    (whatever their similarity rank), scored by the lane; a neighbour without a vector counts
    as absent; claims have no capture context."""
    turns = [
        ("Caroline: I went to the support group today.", 0.9, 10),
        ("Melanie: That sounds really moving.", 0.3, 11),
        ("Caroline: It was. Everyone was kind.", 1.2, 12),
        ("Melanie: No vector for this one.", None, 13),
    ]
    made = []
    for text, angle, at in turns:
        r = remember(db, text, at=at)
        made.append(r)
        if angle is not None:
            embed(db, "source", r.source_id, unit(angle))
    query = QueryEmbedding(unit(0.0), M, V)
    with read_tx(db.conn):
        got = dense.in_context(db.conn, T, P, query, 10)
    by_target = {c.target: c for c in got}
    first, second, third = (by_target[source(r.source_id)] for r in made[:3])
    assert [c.target for c in got] == [source(made[i].source_id) for i in (1, 0, 2)]
    assert math.isclose(second.score, math.cos(0.3), rel_tol=1e-6)
    # the first turn's only neighbour is the second; the second's best is the first
    assert first.neighbour is not None and math.isclose(first.neighbour, second.score)
    assert second.neighbour is not None and math.isclose(second.neighbour, first.score)
    # the third's neighbours: the second (scored) and the fourth (no vector: ignored)
    assert third.neighbour is not None and math.isclose(third.neighbour, second.score)
    assert first.head.startswith("Caroline:") and second.head.startswith("Melanie:")
    assert dense.scored(db.conn, T, P, query, 10) == [(c.target, c.score) for c in got]


def test_dense_order_lifts_by_neighbours_and_named_labels() -> None:
    """The order key is (cos + NEIGHBOUR_LIFT · neighbour) / (1 + NEIGHBOUR_LIFT), plus
    LABEL_BONUS when the query names the capture's label; the floor still cuts, the
    similarity is unchanged, and equal keys keep the lane's order."""
    a, b, c, d = (source(x) for x in "abcd")
    candidates = [
        Candidate(a, 0.60, None, "Melanie: I went swimming"),
        Candidate(b, 0.58, 0.60, "Melanie: the kids loved it"),
        Candidate(c, 0.56, 0.50, "Caroline: a painting of a sunset"),
        Candidate(d, 0.19, 0.90, "Caroline: below the floor"),
    ]
    plain = fusion.dense_order(candidates, "what did they do", 0.2)
    # a's lone turn has no neighbour: its key is 0.60 / 1.5 = 0.40, below b's and c's
    assert plain == [(b, 0.58), (c, 0.56), (a, 0.60)]
    named = fusion.dense_order(candidates, "What does Caroline paint?", 0.2)
    lift = fusion.NEIGHBOUR_LIFT
    key_c = (0.56 + lift * 0.50) / (1 + lift) + fusion.LABEL_BONUS
    key_b = (0.58 + lift * 0.60) / (1 + lift)
    assert key_c > key_b
    assert named == [(c, 0.56), (b, 0.58), (a, 0.60)]
