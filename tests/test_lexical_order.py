"""The lexical lane's rank order (store/lexical.py, module docstring step 7) against the plain
full sort it replaces: ``_Lane.best`` computes a document's points only where a tie in lifted
score still decides which targets are taken; the answer (targets, order, relevance) must be
exactly that of sorting every eligible document by (lifted score, points where tied, newest,
sources first) and taking targets in that order.

The stores are built for ties: a word held by over 90 % of the documents (it never makes a
match but counts in the points), the matched word once in turns of a few equal lengths (equal
bm25), half of them with a speaker label, a few claims."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import P, T, remember
from zkr import MemoryDb
from zkr.model import Target
from zkr.store import lexical
from zkr.store.db import connect, read_tx
from zkr.store.search_index import CLAIM_BASE, ensure_current

FILLER = ["apple", "river", "stone", "cloud", "lamp", "garden", "violin", "harbour"]
QUERIES = [
    "note zebra",
    "zebra",
    "note zebra apple",
    "user note zebra",
    "apple note river",
    "what did the user note about a zebra in the garden",
    "sam zebra",
]


def _build(path: str, seed: int) -> None:
    rng = random.Random(seed)
    with MemoryDb.open(path) as db:
        for i in range(300):
            words = [rng.choice(FILLER) for _ in range(rng.choice([2, 3, 3, 4]))]
            if rng.random() < 0.45:
                words.insert(rng.randrange(len(words) + 1), "zebra")
            if rng.random() < 0.94:  # "note": in over 90 % of the documents (never a match)
                words.insert(rng.randrange(len(words) + 1), "note")
            else:
                words.append(rng.choice(FILLER))  # (the same length without it)
            text = " ".join(words)
            if rng.random() < 0.5:
                text = "User: " + text
            claim = None
            if rng.random() < 0.02:
                claim = ("Sam", "likes", f"{rng.choice(['zebra', 'apple'])} {i}")
            remember(db, text, at=1_000 + i, claim=claim)


def _full_sort(conn: sqlite3.Connection, query: str, cut: int, memory: bool) -> list[object]:
    """The lane's answer through the plain full sort (independent of ``_Lane.best``)."""
    index = lexical.open_index(conn, T, P, memory)
    plan = lexical.plan_query(conn, T, P, query, index)
    if not plan.match:
        return []
    lane = lexical._Lane(conn, T, P, None, index)
    lane.plan = plan
    lane._terms = [term for term, _ in plan.weights]
    order = lane.scored(plan, cut)
    final = lane.final
    tied = {score for score, n in Counter(final.values()).items() if n > 1}
    order = sorted(
        order,
        key=lambda r: (
            -final[r],
            -lane.points(r) if final[r] in tied else 0,
            -(r % CLAIM_BASE),
            r,
        ),
    )
    best: dict[Target, int] = {}
    for rowid in order:
        for target in lane.targets[rowid]:
            points = lane.points(rowid)
            if target in best:
                best[target] = max(best[target], points)
            elif len(best) < cut:
                best[target] = points
    return [lexical.Ranked(target, points) for target, points in best.items()]


@pytest.mark.parametrize("seed", [1, 2])
def test_rank_order_equals_the_full_sort(tmp_path: Path, seed: int) -> None:
    path = str(tmp_path / "ties.db")
    _build(path, seed)
    tied_groups = 0
    for memory in (False, True):
        conn = connect(path)
        ensure_current(conn)
        ours_conn = connect(path)
        ensure_current(ours_conn)
        if memory:  # from the connection's MEMORY_AFTER-th search on: the in-memory index
            with read_tx(ours_conn):
                for _ in range(lexical.MEMORY_AFTER):
                    lexical.lexical_search(ours_conn, T, P, "zebra", 1)
        for query in QUERIES:
            for cut in (1, 2, 3, 5, 8, 13, 40, 200):
                with read_tx(conn):
                    expected = _full_sort(conn, query, cut, memory)
                with read_tx(ours_conn):
                    got = lexical.lexical_search(ours_conn, T, P, query, cut)
                assert got == expected, (memory, query, cut)
        with read_tx(conn):  # the store really is full of ties the points break
            index = lexical.open_index(conn, T, P, memory)
            plan = lexical.plan_query(conn, T, P, "note zebra", index)
            lane = lexical._Lane(conn, T, P, None, index)
            lane.plan = plan
            lane._terms = [term for term, _ in plan.weights]
            lane.scored(plan, 200)
            groups: dict[float, set[int]] = {}
            for rowid, score in lane.final.items():
                groups.setdefault(score, set()).add(lane.points(rowid))
            tied_groups += sum(len(points) > 1 for points in groups.values())
        conn.close()
        ours_conn.close()
    assert tied_groups > 0
