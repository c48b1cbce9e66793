"""A long-lived connection's warm lexical search (``retrieval._warm_lexical``: one read
transaction when the index and the embedder record are known at the change mark) answers what
a fresh connection answers, while another connection writes, archives claims and searches."""

from __future__ import annotations

import random
from pathlib import Path

from tests.conftest import P, T, remember
from zkr import MemoryDb
from zkr.errors import ZkrError
from zkr.model import AsOf, ClaimTierRequest, SearchRequest

WORDS = "river stone cedar lamp violin harbor tulip comet maple falcon orbit pepper".split()


def _pack(db: MemoryDb, req: SearchRequest) -> object:
    try:
        return db.search(req).to_json()
    except ZkrError as exc:
        return exc.message


def test_warm_searches_follow_other_connections_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "warm.db")
    rng = random.Random(14)
    server, other = MemoryDb.open(path), MemoryDb.open(path)
    claims: list[str] = []
    at = 100
    try:
        for step in range(160):
            roll = rng.random()
            writer = server if rng.random() < 0.3 else other
            at += 1
            if roll < 0.3 or step < 10:
                words = " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))
                claim = (rng.choice(WORDS), "likes", words) if rng.random() < 0.5 else None
                got = remember(writer, f"Sam: {words}", at=at, claim=claim)
                if got.claim_id is not None:
                    claims.append(got.claim_id)
            elif roll < 0.38 and claims:
                claim_id = claims.pop(rng.randrange(len(claims)))
                writer.archive(ClaimTierRequest(T, P, claim_id, at))
            else:
                query = " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))
                as_of = None
                if rng.random() < 0.25:
                    valid = rng.randint(100, at)
                    as_of = AsOf(valid, valid + rng.randint(0, 20))
                req = SearchRequest(T, P, query, rng.choice([1, 3, 10]), as_of=as_of)
                for _ in range(rng.randint(1, 3)):  # repeated: the warm path's second search
                    warm = _pack(server, req)
                with MemoryDb.open(path) as fresh:
                    assert warm == _pack(fresh, req), (step, req)
    finally:
        server.close()
        other.close()
