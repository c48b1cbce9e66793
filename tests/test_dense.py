"""The dense lane and hybrid search (spec/retrieval.md §5-6, §12), checked against a slow,
literal reference scorer written from the spec, plus the cache's invalidation.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from tests.conftest import P, T, remember
from tests.test_embeddings import M, V, claim_memory, edit, embed, f32, issues, states
from zkr import InvalidInput, MemoryDb, ZkrError
from zkr.model import (
    ApplyRequest,
    AsOf,
    ClaimTierRequest,
    CorrectRequest,
    DeleteRequest,
    Distance,
    ExportRequest,
    LimitRequest,
    LinkRequest,
    Normalization,
    ProcessingState,
    QueryEmbedding,
    Relation,
    SearchRequest,
    Target,
    TargetKind,
    Tier,
)
from zkr.store import dense, fusion
from zkr.store.db import read_tx
from zkr.store.dense import (
    blocks as dense_blocks,
    bulk as dense_bulk,
    kernels,
    patching as dense_patching,
    ranking as dense_ranking,
    registry as dense_registry,
)
from zkr.store.embeddings import projection_input
from zkr.store.lexical import lexical_search
from zkr.store.retrieval import materialize

# --------------------------------------------------------------------------- helpers


def hybrid(
    db: MemoryDb,
    query: str,
    vector: list[float],
    *,
    limit: int = 10,
    model: str = M,
    version: str = V,
    t: str = T,
    p: str = P,
    as_of: AsOf | None = None,
) -> list[tuple[str, str, int, list[str]]]:
    pack = db.search(
        SearchRequest(t, p, query, limit, QueryEmbedding(list(vector), model, version), as_of)
    )
    assert pack.gaps == ([] if pack.items else ["no cited memory matched"])
    return [
        (i.memory.kind.value, i.memory.id, i.relevance_basis_points, i.evidence_ids)
        for i in pack.items
    ]


def ids(items: list[tuple[str, str, int, list[str]]]) -> list[tuple[str, str]]:
    return [(kind, target_id) for kind, target_id, *_ in items]


def ranking(db: MemoryDb, vector: list[float], model: str = M, t: str = T) -> list[Target]:
    """The complete dense list (§5.5), read in one snapshot."""
    with read_tx(db.conn):
        return dense_ranking(db.conn, t, P, QueryEmbedding(list(vector), model, V))


# --------------------------------------------------------------------------- reference scorer

LIVE = (
    "status = 'accepted' AND valid_until IS NULL AND recorded_until IS NULL"
    " AND tier IN ('short_term', 'long_term') AND processing_state = 'processed'"
)


def _key(x: np.float32) -> int:
    """Total order of float32 (−0.0 < +0.0)."""
    bits = struct.unpack("<I", struct.pack("<f", float(x)))[0]
    return (~bits & 0xFFFF_FFFF) if bits >> 31 else bits | 0x8000_0000


def _ref_input(conn: sqlite3.Connection, t: str, p: str, kind: str, tid: str) -> Any:
    if kind == "source":
        row = conn.execute(
            "SELECT content, revision FROM sources WHERE id=? AND tenant_id=? AND person_id=?"
            " AND deleted_at IS NULL",
            (tid, t, p),
        ).fetchone()
    elif kind == "evidence":
        row = conn.execute(
            "SELECT quote, source_revision FROM evidence WHERE id=? AND tenant_id=?"
            " AND person_id=? AND deleted_at IS NULL",
            (tid, t, p),
        ).fetchone()
    else:
        row = conn.execute(
            f"SELECT subject || ' ' || predicate || ' ' || value, recorded_from FROM claims"
            f" WHERE id=? AND tenant_id=? AND person_id=? AND {LIVE}",
            (tid, t, p),
        ).fetchone()
    if row is None:
        return None
    import hashlib

    return row[1], "sha256:" + hashlib.sha256(row[0].encode()).hexdigest()


def _ref_well_formed(row: tuple[Any, ...]) -> tuple[tuple[int, int, int], list[np.float32]] | None:
    dimension, norm_text, dist_text, vector = row
    try:
        norm, dist = json.loads(norm_text), json.loads(dist_text)
        values = json.loads(vector)
    except (ValueError, TypeError):
        return None
    if norm not in ("none", "l2") or dist not in ("cosine", "dot", "euclidean"):
        return None
    if not isinstance(values, list) or not values or len(values) != dimension:
        return None
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
        return None
    with np.errstate(over="ignore"):
        try:
            vec = [np.float32(float(v)) for v in values]
        except OverflowError:
            return None
    if not all(np.isfinite(x) for x in vec):
        return None
    if norm == "l2":
        total = 0.0
        for x in vec:
            total += float(x) * float(x)
        if abs(math.sqrt(total) - 1.0) > 1e-4:
            return None
    order = (dimension, ["none", "l2"].index(norm), ["cosine", "dot", "euclidean"].index(dist))
    return order, vec


def _ref_map(conn: sqlite3.Connection, t: str, p: str, kind: str, tid: str) -> list[Target]:
    def live_claims(evidence_ids: list[str]) -> list[str]:
        out: set[str] = set()
        for ev in evidence_ids:
            for (claim_id,) in conn.execute(
                "SELECT ce.claim_id FROM claim_evidence ce JOIN claims c ON c.id = ce.claim_id"
                f" WHERE ce.evidence_id=? AND ce.tenant_id=? AND ce.person_id=?"
                f" AND ce.relation='\"supports\"' AND c.tenant_id=? AND c.person_id=?"
                f" AND c.{LIVE.replace(' AND ', ' AND c.')}",
                (ev, t, p, t, p),
            ):
                out.add(claim_id)
        return sorted(out)

    def linked(evidence_ids: list[str]) -> bool:
        return any(
            conn.execute(
                "SELECT 1 FROM claim_evidence WHERE evidence_id=? AND tenant_id=? AND person_id=?"
                " AND relation='\"supports\"'",
                (ev, t, p),
            ).fetchone()
            for ev in evidence_ids
        )

    if kind == "claim":  # surprise #19 fixed: only a citable claim
        citable = conn.execute(
            "SELECT 1 FROM claim_evidence ce JOIN evidence e ON e.id = ce.evidence_id"
            " AND e.deleted_at IS NULL JOIN sources s ON s.id = e.source_id"
            " AND s.deleted_at IS NULL WHERE ce.claim_id = ? AND ce.tenant_id = ?"
            " AND ce.person_id = ? AND ce.relation = '\"supports\"'",
            (tid, t, p),
        ).fetchone()
        return [] if citable is None else [Target(TargetKind.CLAIM, tid)]
    if kind == "evidence":
        row = conn.execute(
            "SELECT 1 FROM evidence e JOIN sources s ON s.id = e.source_id AND s.tenant_id=?"
            " AND s.person_id=? AND s.deleted_at IS NULL WHERE e.id=? AND e.tenant_id=?"
            " AND e.person_id=? AND e.deleted_at IS NULL",
            (t, p, tid, t, p),
        ).fetchone()
        if row is None:
            return []
        claims = live_claims([tid])
        if not claims and linked([tid]):
            return []  # decision 16: a superseded/retracted/archived value stays hidden
        return [Target(TargetKind.CLAIM, c) for c in claims] or [Target(TargetKind.EVIDENCE, tid)]
    if (
        conn.execute(
            "SELECT 1 FROM sources WHERE id=? AND tenant_id=? AND person_id=?"
            " AND deleted_at IS NULL",
            (tid, t, p),
        ).fetchone()
        is None
    ):
        return []
    evidence = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM evidence WHERE source_id=? AND tenant_id=? AND person_id=?"
            " AND deleted_at IS NULL",
            (tid, t, p),
        )
    ]
    if not evidence:
        return []
    claims = live_claims(evidence)
    if not claims and linked(evidence):
        return []
    return [Target(TargetKind.CLAIM, c) for c in claims] or [Target(TargetKind.SOURCE, tid)]


def reference_dense(
    conn: sqlite3.Connection, t: str, p: str, model: str, version: str, query: list[float]
) -> list[Target]:
    """spec/retrieval.md §5, row by row, in float32 scalars."""
    return [target for target, _ in reference_dense_scored(conn, t, p, model, version, query)]


def reference_dense_scored(
    conn: sqlite3.Connection, t: str, p: str, model: str, version: str, query: list[float]
) -> list[tuple[Target, float]]:
    """:func:`reference_dense` with each target's best score."""
    q = [np.float32(x) for x in query]
    rows = conn.execute(
        "SELECT target_kind, target_id, target_revision, input_hash, dimension, normalization,"
        " distance, vector FROM embeddings WHERE tenant_id=? AND person_id=? AND model=?"
        " AND version=? ORDER BY target_kind, target_id",
        (t, p, model, version),
    ).fetchall()
    checked = []
    for kind, tid, rev, h, *rest in rows:
        if kind not in ("source", "evidence", "claim"):
            continue
        current = _ref_input(conn, t, p, kind, tid)
        formed = _ref_well_formed(tuple(rest))
        if current is None or current != (rev, h) or formed is None:
            continue
        checked.append((kind, tid, formed[0], formed[1], json.loads(rest[2])))
    if not checked:
        return []
    lane = min(c[2] for c in checked)
    best: dict[Target, np.float32] = {}
    with np.errstate(all="ignore"):
        for kind, tid, order, vec, dist in checked:
            if order != lane:
                continue
            if len(vec) != len(q):
                raise InvalidInput(
                    f"query embedding dimension {len(q)} does not match stored dimension {len(vec)}"
                )
            acc = np.float32(-0.0)
            if dist == "euclidean":
                for a, b in zip(q, vec, strict=True):
                    d = np.float32(a - b)
                    acc = np.float32(acc + np.float32(d * d))
                score = np.float32(-np.sqrt(acc))
            else:
                for a, b in zip(q, vec, strict=True):
                    acc = np.float32(acc + np.float32(a * b))
                score = acc
                if dist == "cosine":
                    nq, ns = np.float32(-0.0), np.float32(-0.0)
                    for a in q:
                        nq = np.float32(nq + np.float32(a * a))
                    for b in vec:
                        ns = np.float32(ns + np.float32(b * b))
                    nq, ns = np.float32(np.sqrt(nq)), np.float32(np.sqrt(ns))
                    if nq == 0 or ns == 0:
                        raise InvalidInput("cosine embeddings must have non-zero magnitude")
                    score = np.float32(acc / np.float32(nq * ns))
            if not np.isfinite(score):
                raise InvalidInput("embedding similarity is not finite")
            for target in _ref_map(conn, t, p, kind, tid):
                if target not in best or _key(score) > _key(best[target]):
                    best[target] = score
    # one place per capture: raw evidence folds into its source when the source is a target
    # too, or when several evidence of one source are
    source_of = {
        tg: conn.execute("SELECT source_id FROM evidence WHERE id=?", (tg.id,)).fetchone()[0]
        for tg in best
        if tg.kind is TargetKind.EVIDENCE
    }
    for evidence, source_id in source_of.items():
        source = Target(TargetKind.SOURCE, source_id)
        if source in best or list(source_of.values()).count(source_id) > 1:
            score = best.pop(evidence)
            if source not in best or _key(score) > _key(best[source]):
                best[source] = score
    ranked = sorted(best, key=lambda tg: (-_key(best[tg]), tg.sort_key()))
    return [(target, float(best[target])) for target in ranked]


def reference_pack(db: MemoryDb, req: SearchRequest) -> dict[str, Any]:
    """search() with the reference dense list (every target scored row by row) fused by
    :func:`zkr.store.fusion.fuse` (zkr's fusion: fixed pools, absolute relevance)."""
    limit = 10 if req.limit == 0 else min(req.limit, 100)
    conn = db.conn
    if req.query_embedding is None or req.as_of is not None:
        ranked = lexical_search(conn, req.tenant_id, req.person_id, req.query, limit, req.as_of)
        fused = [(r.target, r.relevance) for r in ranked]
    else:
        qe = req.query_embedding
        ranked = lexical_search(conn, req.tenant_id, req.person_id, req.query, max(100, limit))
        scored = reference_dense_scored(
            conn, req.tenant_id, req.person_id, qe.model, qe.version, qe.vector
        )
        # a raw evidence whose source the lexical lane found is that capture: one place
        lexical_sources = {r.target.id for r in ranked if r.target.kind is TargetKind.SOURCE}
        for i, (tg, score) in enumerate(scored):
            if tg.kind is TargetKind.EVIDENCE:
                (source_id,) = conn.execute(
                    "SELECT source_id FROM evidence WHERE id=?", (tg.id,)
                ).fetchone()
                if source_id in lexical_sources:
                    scored[i] = (Target(TargetKind.SOURCE, source_id), score)
        lexical = [(r.target, r.relevance) for r in ranked]
        fused = fusion.fuse(lexical, scored, limit, None)
    items = [
        materialize(conn, req.tenant_id, req.person_id, target, points, req.as_of).to_json()
        for target, points in fused
    ]
    return {
        "query": req.query,
        "items": items,
        "gaps": [] if items else ["no cited memory matched"],
    }


def outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except ZkrError as exc:
        return ("error", str(exc))


def check_against_reference(db: MemoryDb, req: SearchRequest) -> Any:
    got = outcome(lambda: db.search(req).to_json())
    want = outcome(lambda: reference_pack(db, req))
    assert got == want
    return got


# --------------------------------------------------------------------------- §12 scenarios


def test_s06_claim_replaces_embedded_source(db: MemoryDb) -> None:
    r = claim_memory(db)
    embed(db, "source", r.source_id, [1.0, 0.0])
    assert ids(hybrid(db, "Acme", [1.0, 0.0])) == [("claim", r.claim_id)]
    assert hybrid(db, "Acme", [1.0, 0.0])[0][3] == [r.evidence_id]


def test_s07_dense_raw_evidence_then_delete(db: MemoryDb) -> None:
    r = remember(db, "Quiet desk near a window")
    embed(db, "evidence", r.evidence_id, [1.0, 0.0])
    assert hybrid(db, "unmatched lexical phrase", [1.0, 0.0]) == [
        ("evidence", r.evidence_id, 10000, [r.evidence_id])
    ]
    db.delete(DeleteRequest(T, P, r.source_id, 20))
    assert hybrid(db, "unmatched lexical phrase", [1.0, 0.0]) == []


def test_s08_expired_claim_is_not_retrieved(db: MemoryDb, db_path: str) -> None:
    r = claim_memory(db)
    embed(db, "claim", r.claim_id, [1.0, 0.0])
    assert ids(hybrid(db, "Acme", [1.0, 0.0])) == [("claim", r.claim_id)]
    edit(
        db_path,
        "UPDATE claims SET valid_until = 20, recorded_until = 20 WHERE id = ?",
        (r.claim_id,),
    )
    assert hybrid(db, "Acme", [1.0, 0.0]) == []


def test_s11_dense_search_survives_a_corrupt_row(db: MemoryDb, db_path: str) -> None:
    one, two = remember(db, "first note"), remember(db, "second note")
    embed(db, "source", one.source_id, [1.0], norm="none")
    embed(db, "source", two.source_id, [3.0], norm="none")
    edit(
        db_path,
        "UPDATE embeddings SET dimension = 2, distance = '\"invalid\"' WHERE target_id = ?",
        (one.source_id,),
    )
    assert ids(hybrid(db, "zzz", [1.0])) == [("source", two.source_id)]


def test_s14_fusion_worked_example(db: MemoryDb) -> None:
    """§6's scenario: J (lexical 1st, dense 2nd) before V (dense 1st only), as in the
    reference; relevance is absolute (zkr.store.fusion): J fully matches the query's words,
    V's cosine is 1 (a caller vector of unknown calibration counts as its raw cosine)."""
    j = remember(db, "Sam loves the Jazz Club", claim=("Sam", "likes", "Jazz Club"))
    v = remember(db, "Sam visits the Music Venue", at=11, claim=("Sam", "visits", "Music Venue"))
    embed(db, "claim", j.claim_id, [0.9938837, 0.11043153])
    embed(db, "claim", v.claim_id, [1.0, 0.0])
    assert hybrid(db, "Jazz Club", [1.0, 0.0], limit=2) == [
        ("claim", j.claim_id, 10000, [j.evidence_id]),
        ("claim", v.claim_id, 10000, [v.evidence_id]),
    ]


def test_the_lexical_lane_keeps_its_first_places() -> None:
    """zkr.store.fusion: the lexical lane's first LEXICAL_LEAD targets open a hybrid pack in
    lexical order even when the dense lane ranks other targets first; below them, weighted
    RRF lets a target both lanes hold overtake a lexical-only one; relevance stays each
    target's own absolute signal, not its place."""
    lex = [Target(TargetKind.SOURCE, f"l{i}") for i in range(5)]
    only_dense = [Target(TargetKind.SOURCE, f"d{i}") for i in range(3)]
    lexical = [(t, 9000 - 1000 * i) for i, t in enumerate(lex)]
    scored = [(t, 0.9) for t in only_dense] + [(lex[4], 0.8)]
    fused = fusion.fuse(lexical, scored, 6, None)
    lead = fusion.LEXICAL_LEAD
    assert [t for t, _ in fused[:lead]] == lex[:lead]
    assert fused[lead] == (lex[4], 8000)  # in both lanes: ahead of lex[3] and the dense-only
    assert fused[lead + 1 :] == [(lex[3], 6000), (only_dense[0], 9000)]  # raw cosine 0.9
    assert fused[:lead] == lexical[:lead]


def test_s15_staleness(db: MemoryDb, db_path: str) -> None:
    """retrieval.md §12 item 15: hand edits of the inputs make the rows stale for search and
    projections, only in their own scope."""
    raw = remember(db, "Quiet desk near a window")
    ev = remember(db, "A lamp on the desk")
    claim = claim_memory(db, "Sam works at Acme", at=12)
    embed(db, "source", raw.source_id, [1.0, 0.0])
    embed(db, "evidence", ev.evidence_id, [1.0, 0.0])
    embed(db, "claim", claim.claim_id, [1.0, 0.0])
    other = remember(db, "Quiet desk near a window", t="b")
    embed(db, "source", other.source_id, [1.0, 0.0], t="b")
    assert len(hybrid(db, "nothing lexical", [1.0, 0.0])) == 3
    edit(
        db_path,
        "UPDATE sources SET content = 'Loud desk', revision = revision + 1 WHERE id = ?",
        (raw.source_id,),
    )
    edit(db_path, "UPDATE evidence SET quote = 'A lamp' WHERE id = ?", (ev.evidence_id,))
    edit(db_path, "UPDATE claims SET value = 'Beta' WHERE id = ?", (claim.claim_id,))
    assert hybrid(db, "nothing lexical", [1.0, 0.0]) == []
    stale = {key for key, state in states(db).items() if state == "stale"}
    assert stale == {
        ("source", raw.source_id),
        ("evidence", ev.evidence_id),
        ("claim", claim.claim_id),
    }
    assert len(issues(db, limit=2)) == 2
    assert states(db, t="b") == {("evidence", other.evidence_id): "missing"}


def test_s19_lifecycle_with_vectors(db: MemoryDb) -> None:
    """§12 item 19 with a vector on the claim: correction and deletion remove it from the
    dense lane; as_of stays lexical."""
    c = remember(db, "Sam works at Acme", at=10, claim=("Sam", "employer", "Acme"))
    embed(db, "claim", c.claim_id, [1.0, 0.0])
    assert ids(hybrid(db, "Acme", [1.0, 0.0])) == [("claim", c.claim_id)]
    fix = db.correct(CorrectRequest(T, P, c.claim_id, "Sam moved to Beta", "Beta", 15, 20))
    assert hybrid(db, "zzz", [1.0, 0.0]) == []  # the superseded claim's vector is gone
    # (lexically, "Acme" finds the correction by what it corrects, never the old claim)
    assert ids(hybrid(db, "Acme", [1.0, 0.0])) == [("claim", fix.claim_id)]
    old = hybrid(db, "Acme", [0.0, 1.0], as_of=AsOf(14, 15))
    assert ids(old) == [("claim", c.claim_id)]
    embed(db, "claim", fix.claim_id, [0.0, 1.0])
    assert ids(hybrid(db, "zzz", [0.0, 1.0])) == [("claim", fix.claim_id)]
    db.delete(DeleteRequest(T, P, fix.source_id, 30))
    assert hybrid(db, "Beta", [0.0, 1.0]) == []


# --------------------------------------------------------------------------- extras


def test_query_validation_order(db: MemoryDb) -> None:
    """§5.1: after the query check, only when the lane runs."""
    r = remember(db, "note")
    embed(db, "source", r.source_id, [1.0, 0.0])

    def err(query: str, qe: QueryEmbedding, as_of: AsOf | None = None) -> str:
        with pytest.raises(InvalidInput) as exc:
            db.search(SearchRequest(T, P, query, 10, qe, as_of))
        return str(exc.value)

    assert err(" ", QueryEmbedding([], " ", " ")) == "query must not be empty"
    assert err("q", QueryEmbedding([], "\t", " ")) == "query embedding model must not be empty"
    assert err("q", QueryEmbedding([], M, "")) == "query embedding version must not be empty"
    assert err("q", QueryEmbedding([], M, V)) == "query embedding vector must contain finite values"
    assert err("q", QueryEmbedding([1e39, 0], M, V)) == (
        "query embedding vector must contain finite values"
    )
    assert err("q", QueryEmbedding([1.0, 0.0, 0.0], M, V)) == (
        "query embedding dimension 3 does not match stored dimension 2"
    )
    # as_of: the embedding is ignored entirely, even when invalid
    pack = db.search(SearchRequest(T, P, "note", 10, QueryEmbedding([], "", ""), AsOf(99, 99)))
    assert [i.memory.id for i in pack.items] == [r.source_id]


def test_wrong_dimension_is_silent_without_current_rows(db: MemoryDb) -> None:
    """Surprise #21 (kept): the dimension error needs a surviving row."""
    r = remember(db, "note")
    assert hybrid(db, "zzz", [1.0, 2.0, 3.0]) == []
    embed(db, "source", r.source_id, [1.0, 0.0])
    assert hybrid(db, "zzz", [1.0, 0.0], model="other") == []
    db.delete(DeleteRequest(T, P, r.source_id, 20))
    assert hybrid(db, "zzz", [1.0, 2.0, 3.0]) == []


def test_zero_vectors_in_a_cosine_lane_fail(db: MemoryDb) -> None:
    """Surprise #20 (kept): one zero vector, or a zero query, fails every dense search."""
    a, b = remember(db, "first"), remember(db, "second")
    embed(db, "source", a.source_id, [1.0, 0.0], norm="none")
    with pytest.raises(InvalidInput) as exc:
        hybrid(db, "first", [0.0, 0.0])
    assert str(exc.value) == "cosine embeddings must have non-zero magnitude"
    embed(db, "source", b.source_id, [0.0, 0.0], norm="none")
    with pytest.raises(InvalidInput, match="non-zero magnitude"):
        hybrid(db, "first", [1.0, 0.0])
    db.delete(DeleteRequest(T, P, b.source_id, 20))
    assert ids(hybrid(db, "zzz", [1.0, 0.0])) == [("source", a.source_id)]


def test_overflowing_similarity_fails(db: MemoryDb) -> None:
    r = remember(db, "huge")
    embed(db, "source", r.source_id, [1e20, 1e20], norm="none", dist="dot")
    with pytest.raises(InvalidInput) as exc:
        hybrid(db, "zzz", [1e20, 1e20])
    assert str(exc.value) == "embedding similarity is not finite"
    assert ids(hybrid(db, "zzz", [1e-20, 1e-20])) == [("source", r.source_id)]


def test_first_failing_row_decides_the_message(db: MemoryDb) -> None:
    """Rows are scored in (kind, id) order; the first failure is reported."""
    claim = claim_memory(db)
    raw = remember(db, "raw")
    embed(db, "claim", claim.claim_id, [1e30, 1e30], norm="none")  # dot overflows -> not finite
    embed(db, "source", raw.source_id, [0.0, 0.0], norm="none")  # zero magnitude
    with pytest.raises(InvalidInput) as exc:
        hybrid(db, "zzz", [1e30, 1e30])
    assert str(exc.value) == "embedding similarity is not finite"  # the claim row comes first


def test_basis_point_tie_is_broken_by_target_order(db: MemoryDb) -> None:
    """Equal dense scores: target order (source < evidence < claim, then id) decides."""
    notes = [remember(db, f"note {i}") for i in range(3)]
    for n in notes:
        embed(db, "source", n.source_id, [0.6, 0.8])
    got = hybrid(db, "zzz", [0.6, 0.8])
    assert ids(got) == sorted(("source", n.source_id) for n in notes)
    assert [points for _, _, points, _ in got] == [10000, 10000, 10000]  # cosine 1: full


def test_negative_zero_ranks_below_positive_zero(db: MemoryDb) -> None:
    """§5.5 total order: a −0.0 score ranks below +0.0 whatever the ids."""
    a, b = remember(db, "first"), remember(db, "second")
    embed(db, "source", a.source_id, [-0.0, 1.0], norm="none", dist="dot")
    embed(db, "source", b.source_id, [0.0, 1.0], norm="none", dist="dot")
    # q = [1, -0.0]: a = (-0.0 * 1) + (1 * -0.0) = -0.0; b = (0.0 * 1) + (1 * -0.0) = +0.0
    assert ranking(db, [1.0, -0.0]) == [
        Target(TargetKind.SOURCE, b.source_id),
        Target(TargetKind.SOURCE, a.source_id),
    ]


def test_mapping_of_source_and_evidence_rows(db: MemoryDb) -> None:
    """§5.4: evidence/source vectors become the live claims they support (ascending id); when
    those claims are all non-live they map to nothing, as in the lexical lane (surprise #16
    fixed, decision 16): a superseded or archived value never comes back as raw text."""
    r = claim_memory(db)
    extra = remember(db, "Sam is a drummer", at=11, claim=("Sam", "hobby", "drums"))
    db.link(LinkRequest(T, P, extra.claim_id, r.evidence_id, Relation.SUPPORTS, 9000))
    embed(db, "evidence", r.evidence_id, [1.0, 0.0])
    expected = sorted(
        [Target(TargetKind.CLAIM, r.claim_id), Target(TargetKind.CLAIM, extra.claim_id)]
    )
    assert ranking(db, [1.0, 0.0]) == expected
    db.archive(ClaimTierRequest(T, P, r.claim_id, 12))
    assert ranking(db, [1.0, 0.0]) == [Target(TargetKind.CLAIM, extra.claim_id)]
    db.archive(ClaimTierRequest(T, P, extra.claim_id, 12))
    assert ranking(db, [1.0, 0.0]) == []
    # both lanes hide the archived claims' source
    assert ids(hybrid(db, "Acme", [1.0, 0.0])) == []


def test_uncitable_live_claim_is_skipped(db: MemoryDb, db_path: str) -> None:
    """Retrieval surprise #19, fixed: a live claim whose supporting evidence is gone (reachable
    on replicas through applied evidence deletions) is not a dense target, instead of failing
    every hybrid search with ``record not found``."""
    c = claim_memory(db)
    other = remember(db, "Quiet desk near a window", at=11)
    embed(db, "claim", c.claim_id, [1.0, 0.0])
    embed(db, "source", other.source_id, [0.6, 0.8])
    edit(db_path, "UPDATE evidence SET deleted_at = 20 WHERE id = ?", (c.evidence_id,))
    assert ids(hybrid(db, "zzz", [1.0, 0.0])) == [("source", other.source_id)]


def test_pending_claim_hides_its_source_in_both_lanes(db: MemoryDb) -> None:
    """Live search, both lanes: a capture whose only supported claim is pending is hidden
    (the lexical rule of spec/retrieval.md §3.3 step 4, shared through
    zkr.store.eligibility.stands_for; decision 16), and comes back raw ``as_of``."""
    r = remember(
        db,
        "Sam may like tea",
        claim=("Sam", "likes", "tea"),
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.PENDING,
    )
    embed(db, "source", r.source_id, [1.0, 0.0])
    assert ids(hybrid(db, "tea", [1.0, 0.0])) == []
    assert ids(hybrid(db, "zzz", [1.0, 0.0])) == []
    pack = db.search(SearchRequest(T, P, "tea", 10, None, AsOf(20, 20)))
    assert [(i.memory.kind.value, i.memory.id) for i in pack.items] == [("source", r.source_id)]


def test_contradicting_evidence_is_not_the_claim(db: MemoryDb) -> None:
    c = claim_memory(db)
    contra = remember(db, "Sam never worked at Acme", at=11)
    db.link(LinkRequest(T, P, c.claim_id, contra.evidence_id, Relation.CONTRADICTS, 9000))
    embed(db, "evidence", contra.evidence_id, [1.0, 0.0])
    assert ranking(db, [1.0, 0.0]) == [Target(TargetKind.EVIDENCE, contra.evidence_id)]


def test_target_keeps_its_best_row(db: MemoryDb) -> None:
    r = claim_memory(db)
    other = remember(db, "unrelated")
    embed(db, "claim", r.claim_id, [0.0, 1.0])
    embed(db, "source", r.source_id, [1.0, 0.0])  # maps to the same claim, better score
    embed(db, "source", other.source_id, [0.8, 0.6])
    assert ranking(db, [1.0, 0.0]) == [
        Target(TargetKind.CLAIM, r.claim_id),
        Target(TargetKind.SOURCE, other.source_id),
    ]


def test_distances(db: MemoryDb) -> None:
    notes = [remember(db, f"note {i}") for i in range(3)]
    for n, vec in zip(notes, ([3.0, 4.0], [1.0, 0.0], [10.0, 10.0]), strict=True):
        embed(db, "source", n.source_id, vec, norm="none", dist="euclidean", model="e")
        embed(db, "source", n.source_id, vec, norm="none", dist="dot", model="d")
    order = [n.source_id for n in notes]
    assert [t.id for t in ranking(db, [1.0, 0.0], model="e")] == [order[1], order[0], order[2]]
    assert [t.id for t in ranking(db, [1.0, 0.0], model="d")] == [order[2], order[0], order[1]]


def test_other_models_versions_scopes_are_ignored(db: MemoryDb) -> None:
    a = remember(db, "mine")
    b = remember(db, "theirs", t="b")
    embed(db, "source", a.source_id, [1.0, 0.0], version="2")
    embed(db, "source", b.source_id, [1.0, 0.0], t="b")
    assert hybrid(db, "zzz", [1.0, 0.0]) == []
    assert ids(hybrid(db, "zzz", [1.0, 0.0], version="2")) == [("source", a.source_id)]


# --------------------------------------------------------------------------- exactness


def _per_row_cumsum(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.array([np.cumsum(row * q, dtype=np.float32)[-1] for row in matrix], dtype=np.float32)


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_accumulation_is_bit_identical(seed: int) -> None:
    """acc = acc + M[i] * q[i] over components equals each row's sequential float32 sum
    (np.cumsum), including mixed magnitudes where summation order changes the result."""
    rng = np.random.default_rng(seed)
    n, d = 300, 64
    scale = 10.0 ** rng.integers(-20, 20, size=(n, d))
    rows = (rng.standard_normal((n, d)) * scale).astype(np.float32)
    q = (rng.standard_normal(d) * 10.0 ** rng.integers(-5, 5, size=d)).astype(np.float32)
    columns = np.ascontiguousarray(rows.T)
    with np.errstate(all="ignore"):
        want = _per_row_cumsum(rows, q)
        got = kernels.sequential_dot(columns, q)
        assert got.tobytes() == want.tobytes()
        assert (rows @ q != want).any()  # BLAS/pairwise order really differs
        sq = kernels.sequential_square_distance(columns, q)
        diffs = q[None, :] - rows
        want_sq = np.array(
            [np.cumsum(r * r, dtype=np.float32)[-1] for r in diffs], dtype=np.float32
        )
        assert sq.tobytes() == want_sq.tobytes()
        norms = kernels.sequential_norms(columns)
        want_norms = np.sqrt(
            np.array([np.cumsum(r * r, dtype=np.float32)[-1] for r in rows], dtype=np.float32)
        )
        assert norms.tobytes() == want_norms.tobytes()


def test_threaded_scoring_is_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large lanes are scored by column ranges in threads; each column's sum is unchanged."""
    rng = np.random.default_rng(11)
    columns = np.ascontiguousarray(rng.standard_normal((48, 5003)).astype(np.float32))
    q = rng.standard_normal(48).astype(np.float32)
    single_dot = kernels._dot_kernel(columns, q)
    single_sq = kernels._square_distance_kernel(columns, q)
    monkeypatch.setattr(kernels, "PARALLEL_COLUMNS", 10)
    monkeypatch.setattr(kernels.os, "cpu_count", lambda: 4)
    assert kernels.sequential_dot(columns, q).tobytes() == single_dot.tobytes()
    assert kernels.sequential_square_distance(columns, q).tobytes() == single_sq.tobytes()


def test_order_keys_total_order() -> None:
    values = np.array([-np.inf, -3.0, -1e-45, -0.0, 0.0, 1e-45, 2.0, np.inf], dtype=np.float32)
    keys = kernels.order_keys(values)
    assert list(keys) == sorted(keys) and len(set(keys.tolist())) == len(values)


@pytest.mark.parametrize("seed", range(4))
def test_truncated_dense_lane_gives_the_full_fusion(tmp_path: Path, seed: int) -> None:
    """Hundreds of dense targets (more than the fusion pool for small limits), lexical hits
    deep in the dense list: the pack equals the reference's."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "omega"]
    with MemoryDb.open(str(tmp_path / "w.db")) as db:
        notes = []
        for i in range(260):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) + f" n{i}"
            if i % 7 == 0:
                r = remember(db, text, claim=("Sam", "note", f"v{i}"))
            else:
                r = remember(db, text)
            notes.append(r)
            vec = [float(rng.randint(-3, 3)) for _ in range(4)]
            if not any(vec):
                vec[0] = 1.0
            kind = rng.choice(["source", "evidence", "claim" if r.claim_id else "source"])
            tid = {"source": r.source_id, "evidence": r.evidence_id, "claim": r.claim_id}[kind]
            embed(db, kind, tid, vec, norm="none", dist=["cosine", "dot", "euclidean"][seed % 3])
        for limit in (1, 2, 3, 10):
            for _ in range(3):
                query = " ".join(rng.choice(words) for _ in range(2))
                qv = [float(rng.randint(-3, 3)) for _ in range(4)]
                qv[1] = 1.0
                req = SearchRequest(T, P, query, limit, QueryEmbedding(qv, M, V))
                check_against_reference(db, req)


# --------------------------------------------------------------------------- cache


def test_cache_follows_every_write_path(db: MemoryDb, db_path: str, tmp_path: Path) -> None:
    """Each write (this connection or another) is visible to the next dense search, and the
    cached results always equal the reference computed from the stored rows."""
    q = QueryEmbedding([1.0, 0.0], M, V)

    def check() -> list[str]:
        result = check_against_reference(db, SearchRequest(T, P, "Acme", 10, q))
        return [] if result[0] == "error" else [i["memory"]["id"] for i in result[1]["items"]]

    a = claim_memory(db)
    b = remember(db, "Quiet desk near a window", at=11)
    assert check() == [a.claim_id]
    embed(db, "source", b.source_id, [1.0, 0.0])  # embed
    assert b.source_id in check()
    embed(db, "claim", a.claim_id, [0.0, 1.0])
    assert a.claim_id in check()
    embed(db, "claim", a.claim_id, [1.0, 0.0])  # re-embed the same target, same second
    first = check()
    assert first[0] in (a.claim_id, b.source_id)
    fix = db.correct(CorrectRequest(T, P, a.claim_id, "Sam moved to Beta", "Beta", 20, 20))
    assert a.claim_id not in check()  # correct
    embed(db, "claim", fix.claim_id, [0.6, 0.8])
    assert fix.claim_id in check()
    c = remember(db, "Sam runs", at=21, claim=("Sam", "habit", "running"), tier=Tier.SHORT_TERM)
    embed(db, "claim", c.claim_id, [0.8, 0.6])
    assert c.claim_id in check()
    db.promote(ClaimTierRequest(T, P, c.claim_id, 22))  # promote
    assert c.claim_id in check()
    db.archive(ClaimTierRequest(T, P, c.claim_id, 23))  # archive
    assert c.claim_id not in check()
    db.delete(DeleteRequest(T, P, b.source_id, 30))  # delete
    assert b.source_id not in check()
    db.repair(LimitRequest(T, P, 100))  # repair
    check()
    # another connection: a hand edit and an embed through a second MemoryDb
    edit(db_path, "UPDATE claims SET recorded_until = 40 WHERE id = ?", (fix.claim_id,))
    assert fix.claim_id not in check()
    d = remember(db, "Another desk", at=41)
    with MemoryDb.open(db_path) as other:
        embed(other, "source", d.source_id, [1.0, 0.0])
    assert d.source_id in check()
    # apply: a replica that searches, then receives more commits
    page = db.export(ExportRequest(T, P, 1, limit=100))
    with MemoryDb.open(str(tmp_path / "replica.db")) as replica:
        replica.apply(ApplyRequest(T, P, 1, page.database_schema_version, page.commits[:1]))
        embed(replica, "claim", a.claim_id, [1.0, 0.0])
        got = replica.search(SearchRequest(T, P, "zzz", 10, q))
        assert [i.memory.id for i in got.items] == [a.claim_id]
        replica.apply(ApplyRequest(T, P, 1, page.database_schema_version, page.commits))
        check_against_reference(replica, SearchRequest(T, P, "zzz", 10, q))
        assert a.claim_id not in [
            i.memory.id for i in replica.search(SearchRequest(T, P, "zzz", 10, q)).items
        ]


def test_vector_only_hand_edit_needs_clear_cache(db: MemoryDb, db_path: str) -> None:
    """The documented limit: rewriting ``vector`` alone (created_at untouched) in place is not
    seen by a warm cache once the row's second has passed; clear_cache() drops it."""
    a, b = remember(db, "first"), remember(db, "second")
    embed(db, "source", a.source_id, [1.0, 0.0])
    embed(db, "source", b.source_id, [0.0, 1.0])
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 10")
    assert ranking(db, [1.0, 0.0])[0].id == a.source_id  # cached, settled
    edit(db_path, "UPDATE embeddings SET vector = '[0.0,1.0]' WHERE target_id = ?", (a.source_id,))
    edit(db_path, "UPDATE embeddings SET vector = '[1.0,0.0]' WHERE target_id = ?", (b.source_id,))
    dense.clear_cache()
    assert ranking(db, [1.0, 0.0])[0].id == b.source_id


@pytest.fixture
def vector_file(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Write lane files for any lane size, and count the rows whose vector is read (its
    text decoded or zkr's float32 copy of it taken)."""
    from zkr.store import vectorfile

    monkeypatch.setattr(vectorfile, "MIN_ROWS", 1)
    monkeypatch.setattr(vectorfile, "SAVE_AFTER", 1)
    monkeypatch.delenv("ZKR_VECTOR_CACHE", raising=False)
    decoded: list[object] = []
    original = dense_blocks.decode_rows

    def counting(conn: Any, scope: Any, entries: Any, blocks: Any, todo: list[int]) -> None:
        decoded.extend(todo)
        original(conn, scope, entries, blocks, todo)

    monkeypatch.setattr(dense_blocks, "decode_rows", counting)
    # a first call's bulk refresh reads its vectors itself
    bulk_read = dense_bulk._read_vectors

    def counting_bulk(conn: Any, scope: Any, lane: Any, rowids: Any, block: Any) -> Any:
        decoded.extend(rowids.tolist())
        return bulk_read(conn, scope, lane, rowids, block)

    monkeypatch.setattr(dense_bulk, "_read_vectors", counting_bulk)
    return decoded


def test_vector_file_serves_a_fresh_connection(
    db: MemoryDb, db_path: str, vector_file: list[object]
) -> None:
    notes = [remember(db, f"note {i}") for i in range(6)]
    for i, n in enumerate(notes):
        embed(db, "source", n.source_id, [math.cos(i), math.sin(i)])
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 100")  # settled rows
    req = SearchRequest(T, P, "zzz", 3, QueryEmbedding([1.0, 0.0], M, V))
    first = check_against_reference(db, req)
    assert len(vector_file) == 6
    files = list(Path(db_path + ".zkr-vectors").glob("*.bin"))
    assert len(files) == 1
    with MemoryDb.open(db_path) as fresh:
        vector_file.clear()
        assert check_against_reference(fresh, req) == first
        assert vector_file == []  # nothing re-decoded
        # a re-embedded row has a new created_at: only that row is decoded again
        embed(fresh, "source", notes[5].source_id, [1.0, 0.0])
        edit(
            db_path,
            "UPDATE embeddings SET created_at = created_at - 50 WHERE target_id = ?",
            (notes[5].source_id,),
        )
    with MemoryDb.open(db_path) as again:
        vector_file.clear()
        result = check_against_reference(again, req)
        assert len(vector_file) == 1
        assert result[1]["items"][0]["memory"]["id"] in (notes[0].source_id, notes[5].source_id)


def test_vector_file_does_not_trust_rows_of_the_current_second(
    db: MemoryDb, db_path: str, vector_file: list[object]
) -> None:
    a, b = remember(db, "first"), remember(db, "second")
    embed(db, "source", a.source_id, [1.0, 0.0])
    embed(db, "source", b.source_id, [0.0, 1.0])
    req = SearchRequest(T, P, "zzz", 3, QueryEmbedding([1.0, 0.0], M, V))
    check_against_reference(db, req)
    # same second (created_at unchanged), another process rewrites both vectors
    with MemoryDb.open(db_path) as other:
        embed(other, "source", a.source_id, [0.0, 1.0])
        embed(other, "source", b.source_id, [1.0, 0.0])
    edit(db_path, "UPDATE embeddings SET created_at = (SELECT MIN(created_at) FROM embeddings)")
    with MemoryDb.open(db_path) as fresh:
        result = check_against_reference(fresh, req)
        assert result[1]["items"][0]["memory"]["id"] == b.source_id


def test_a_handle_that_embedded_a_lane_leaves_it_ready_when_it_closes(
    db_path: str, vector_file: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing a handle through which ``embed`` stored at least PRIME_AFTER rows of a lane
    refreshes that lane's side files: a fresh process (every CLI call) then searches without
    reading a vector of the lane; a row another writer rewrites afterwards is still found."""
    from zkr.store import priming

    monkeypatch.setattr(priming, "PRIME_AFTER", 4)
    side = Path(db_path + ".zkr-vectors")
    with MemoryDb.open(db_path) as db:
        notes = [remember(db, f"note {i}") for i in range(5)]
        for i, n in enumerate(notes[:2]):
            embed(db, "source", n.source_id, [math.cos(i), math.sin(i)])
    assert not side.exists()  # 2 rows: left to the next search
    with MemoryDb.open(db_path) as db:
        for i, n in enumerate(notes[2:], start=2):
            embed(db, "source", n.source_id, [math.cos(i), math.sin(i)])
        embed(db, "source", notes[0].source_id, [0.0, 1.0])
        assert vector_file == []
    assert len(vector_file) == 5  # read once, by close, from the copies
    assert len(list(side.glob("*.bin"))) == 1 and len(list(side.glob("*.lane"))) == 1
    req = SearchRequest(T, P, "zzz", 5, QueryEmbedding([1.0, 0.0], M, V))
    dense.clear_cache()
    vector_file.clear()
    with MemoryDb.open(db_path) as fresh:
        first = check_against_reference(fresh, req)
    assert vector_file == []  # no bulk build, no row read
    assert [i["memory"]["id"] for i in first[1]["items"]][:2] == [
        notes[1].source_id,
        notes[0].source_id,
    ]
    # another writer (the reference, a hand edit) rewrites a row: found and patched
    edit(
        db_path,
        "UPDATE embeddings SET vector = '[1.0,0.0]', created_at = unixepoch() - 5"
        " WHERE target_id = ?",
        (notes[2].source_id,),
    )
    dense.clear_cache()
    with MemoryDb.open(db_path) as fresh:
        result = check_against_reference(fresh, req)
    assert len(vector_file) == 1
    assert result[1]["items"][0]["memory"]["id"] == notes[2].source_id


def test_vector_file_is_optional(
    db: MemoryDb, db_path: str, vector_file: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    r = remember(db, "note")
    embed(db, "source", r.source_id, [1.0, 0.0])
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 100")
    req = SearchRequest(T, P, "zzz", 3, QueryEmbedding([1.0, 0.0], M, V))
    monkeypatch.setenv("ZKR_VECTOR_CACHE", "0")
    check_against_reference(db, req)
    assert not Path(db_path + ".zkr-vectors").exists()
    monkeypatch.delenv("ZKR_VECTOR_CACHE")
    with MemoryDb.open(db_path) as fresh:
        check_against_reference(fresh, req)
    (lane_file,) = Path(db_path + ".zkr-vectors").glob("*.bin")
    lane_file.write_bytes(b"ZKRVEC02garbage")  # a damaged file is ignored
    with MemoryDb.open(db_path) as fresh:
        assert check_against_reference(fresh, req)[0] == "ok"
    with MemoryDb.open(":memory:") as memory:
        memory.search(req)  # no file for an in-memory database


@pytest.mark.parametrize("off", ["OFF", " False ", "No"])
def test_vector_cache_switch_reads_zkr_embeds_words_in_any_case(
    db: MemoryDb,
    db_path: str,
    off: str,
    vector_file: list[object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ZKR_VECTOR_CACHE`` takes ``ZKR_EMBED``'s words in any case (zkr.text.env_switch): an
    upper-case ``OFF`` writes no side file (it used to mean on); an unknown value leaves the
    cache on (a cache: the answer is the same either way)."""
    r = remember(db, "note")
    embed(db, "source", r.source_id, [1.0, 0.0])
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 100")
    req = SearchRequest(T, P, "zzz", 3, QueryEmbedding([1.0, 0.0], M, V))
    monkeypatch.setenv("ZKR_VECTOR_CACHE", off)
    check_against_reference(db, req)
    assert not Path(db_path + ".zkr-vectors").exists()
    monkeypatch.setenv("ZKR_VECTOR_CACHE", "of")
    with MemoryDb.open(db_path) as fresh:
        check_against_reference(fresh, req)
    assert list(Path(db_path + ".zkr-vectors").glob("*.bin"))


def test_cache_is_per_connection_and_bounded(tmp_path: Path) -> None:
    dbs = [
        MemoryDb.open(str(tmp_path / f"{i}.db")) for i in range(dense_registry.MAX_CACHED_LANES + 3)
    ]
    try:
        for i, d in enumerate(dbs):
            r = remember(d, f"note {i}")
            embed(d, "source", r.source_id, [1.0, 0.0])
            assert ids(hybrid(d, "zzz", [1.0, 0.0])) == [("source", r.source_id)]
        assert len(dense_registry.CACHES) <= dense_registry.MAX_CACHED_LANES
    finally:
        for d in dbs:
            d.close()


def test_lexical_search_does_not_import_numpy(db_path: str) -> None:
    with MemoryDb.open(db_path) as db:
        r = remember(db, "note about numpy")
        embed(db, "source", r.source_id, [1.0, 0.0])

    def imports(request: dict[str, Any]) -> str:
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "zkr", "--db", db_path, "search"],
            input=json.dumps(request).encode(),
            capture_output=True,
            check=True,
        )
        return proc.stderr.decode()

    base = {"tenant_id": T, "person_id": P, "query": "note"}
    assert "numpy" not in imports(base)
    assert "numpy" in imports(
        {**base, "query_embedding": {"vector": [1.0, 0.0], "model": M, "version": V}}
    )


# --------------------------------------------------------------------------- properties

SCOPES = [(T, P), (T, "q"), ("b", P)]
WORDS = ["desk", "window", "Acme", "lamp", "tea"]

remember_op = st.tuples(
    st.just("remember"), st.sampled_from([0, 0, 0, 1, 2]), st.integers(0, 4), st.integers(0, 3)
)
vector3 = st.lists(st.integers(-2, 2), min_size=3, max_size=3)
embed_op = st.tuples(st.just("embed"), st.integers(0, 40), st.integers(0, 9), vector3)
op = st.one_of(
    remember_op,
    embed_op,
    embed_op,
    st.tuples(st.just("delete"), st.integers(0, 40)),
    st.tuples(st.just("correct"), st.integers(0, 40)),
    st.tuples(st.just("archive"), st.integers(0, 40)),
    st.tuples(st.just("promote"), st.integers(0, 40)),
    st.tuples(st.just("link"), st.integers(0, 40), st.integers(0, 40), st.booleans()),
    st.tuples(st.just("repair"), st.integers(0, 5)),
    st.tuples(st.just("corrupt"), st.integers(0, 40), st.integers(0, 3)),
    st.tuples(
        st.just("search"),
        vector3,
        st.integers(0, 4),
        st.integers(1, 4),
        st.sampled_from([True, True, True, False]),
    ),
)


@given(
    st.lists(remember_op, min_size=3, max_size=8),
    st.lists(st.tuples(st.integers(0, 9), vector3), min_size=3, max_size=8),
    st.lists(op, min_size=5, max_size=35),
)
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_hybrid_search_properties(
    memories: list[tuple[Any, ...]],
    vectors: list[tuple[int, list[int]]],
    ops: list[tuple[Any, ...]],
) -> None:
    """Random memories, vectors and lifecycle operations; after each search: no deleted,
    superseded, archived, out-of-scope or other-lane item, and the cached search equals the
    reference computed from the stored rows."""
    setup = memories + [("embed", i, choice, vec) for i, (choice, vec) in enumerate(vectors)]
    searches = [("search", vec, i % len(WORDS), 3, True) for i, (_, vec) in enumerate(vectors)]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "p.db")
        with MemoryDb.open(path) as db:
            _run_ops(db, path, setup + searches[:1] + ops + searches)


def _run_ops(db: MemoryDb, path: str, ops: list[tuple[Any, ...]]) -> None:
    memories: list[tuple[str, str, Any]] = []  # (tenant, person, remember result)
    clock = [10]

    def tick() -> int:
        clock[0] += 1
        return clock[0]

    def pick(i: int) -> tuple[str, str, Any] | None:
        return memories[i % len(memories)] if memories else None

    for item in ops:
        kind = item[0]
        try:
            if kind == "remember":
                t, p = SCOPES[item[1]]
                text = f"{WORDS[item[2]]} note {len(memories)}"
                claim = None if item[3] == 0 else ("Sam", WORDS[item[2]], f"v{len(memories)}")
                options: dict[str, Any] = {}
                if item[3] == 2:
                    options = {"tier": Tier.SHORT_TERM}
                elif item[3] == 3:
                    options = {"tier": Tier.SHORT_TERM, "processing_state": ProcessingState.PENDING}
                memories.append(
                    (t, p, remember(db, text, t=t, p=p, at=tick(), claim=claim, **options))
                )
            elif kind == "embed" and (m := pick(item[1])):
                t, p, r = m
                choices = [("source", r.source_id), ("evidence", r.evidence_id)]
                if r.claim_id:
                    choices.append(("claim", r.claim_id))
                tk, tid = choices[item[2] % len(choices)]
                model = "other" if item[2] == 9 else M
                vec = [float(x) for x in item[3]]
                if item[2] == 8:
                    vec = vec[:2]  # another dimension: a lane conflict unless alone
                dist = "dot" if item[2] == 7 else "cosine"
                found = projection_input(db.conn, t, p, Target(TargetKind(tk), tid))
                embed(
                    db,
                    tk,
                    tid,
                    vec,
                    t=t,
                    p=p,
                    model=model,
                    norm="none",
                    dist=dist,
                    input_hash="sha256:gone" if found is None else found.input_hash,
                )
            elif kind == "delete" and (m := pick(item[1])):
                db.delete(DeleteRequest(m[0], m[1], m[2].source_id, tick()))
            elif kind == "correct" and (m := pick(item[1])) and m[2].claim_id:
                at = tick()
                db.correct(
                    CorrectRequest(m[0], m[1], m[2].claim_id, f"fixed {at}", f"x{at}", at, at)
                )
            elif kind == "archive" and (m := pick(item[1])) and m[2].claim_id:
                db.archive(ClaimTierRequest(m[0], m[1], m[2].claim_id, tick()))
            elif kind == "promote" and (m := pick(item[1])) and m[2].claim_id:
                db.promote(ClaimTierRequest(m[0], m[1], m[2].claim_id, tick()))
            elif (
                kind == "link"
                and (m := pick(item[1]))
                and (c := pick(item[2]))
                and (c[2].claim_id and c[:2] == m[:2])
            ):
                relation = Relation.SUPPORTS if item[3] else Relation.CONTRADICTS
                db.link(LinkRequest(m[0], m[1], c[2].claim_id, m[2].evidence_id, relation, 5000))
            elif kind == "repair":
                t, p = SCOPES[item[1] % len(SCOPES)]
                before = outcome(
                    lambda t=t, p=p: db.search(
                        SearchRequest(t, p, "desk", 10, QueryEmbedding([1.0, 0.0, 0.0], M, V))
                    ).to_json()
                )
                db.repair(LimitRequest(t, p, 100))
                after = outcome(
                    lambda t=t, p=p: db.search(
                        SearchRequest(t, p, "desk", 10, QueryEmbedding([1.0, 0.0, 0.0], M, V))
                    ).to_json()
                )
                assert before == after  # repair only removes rows search already ignores
            elif kind == "corrupt" and (m := pick(item[1])):
                sql = [
                    "UPDATE embeddings SET normalization = '\"bogus\"' WHERE target_id = ?",
                    "UPDATE embeddings SET input_hash = 'sha256:x' WHERE target_id = ?",
                    "UPDATE embeddings SET dimension = 2, vector = '[1.0,0.0]',"
                    " created_at = created_at + 1 WHERE target_id = ?",
                    "UPDATE claims SET valid_until = valid_from + 1 WHERE id = ?",
                ][item[2]]
                tid = m[2].claim_id if item[2] == 3 else m[2].source_id
                if tid:
                    edit(path, sql, (tid,))
            elif kind == "search":
                t, p = SCOPES[0] if item[4] else SCOPES[1]
                req = SearchRequest(
                    t, p, WORDS[item[2]], item[3], QueryEmbedding([float(x) for x in item[1]], M, V)
                )
                result = check_against_reference(db, req)
                event(
                    f"search {result[0]}"
                    + (
                        f" {min(len(result[1]['items']), 3)}+ items"
                        if result[0] == "ok"
                        else f" {result[1]}"
                    )
                )
                if result[0] == "ok":
                    _check_invariants(db, t, p, result[1])
        except ZkrError:
            pass


def _check_invariants(db: MemoryDb, t: str, p: str, pack: dict[str, Any]) -> None:
    conn = db.conn
    for item in pack["items"]:
        kind, tid = item["memory"]["kind"], item["memory"]["id"]
        if kind == "claim":
            row = conn.execute(
                f"SELECT 1 FROM claims WHERE id=? AND tenant_id=? AND person_id=? AND {LIVE}",
                (tid, t, p),
            ).fetchone()
        elif kind == "evidence":
            row = conn.execute(
                "SELECT 1 FROM evidence e JOIN sources s ON s.id = e.source_id"
                " AND s.deleted_at IS NULL WHERE e.id=? AND e.tenant_id=? AND e.person_id=?"
                " AND e.deleted_at IS NULL",
                (tid, t, p),
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT 1 FROM sources WHERE id=? AND tenant_id=? AND person_id=?"
                " AND deleted_at IS NULL",
                (tid, t, p),
            ).fetchone()
        assert row is not None, item  # live and in scope: never deleted/superseded/archived
        (ev,) = item["evidence_ids"]
        assert (
            conn.execute(
                "SELECT 1 FROM evidence e JOIN sources s ON s.id = e.source_id AND s.deleted_at IS"
                " NULL WHERE e.id=? AND e.tenant_id=? AND e.person_id=? AND e.deleted_at IS NULL",
                (ev, t, p),
            ).fetchone()
            is not None
        )


# --------------------------------------------------------------------------- one eligibility rule


def test_superseded_value_never_resurfaces_through_vectors(db: MemoryDb) -> None:
    """Issue 12 item 6 / decision 16: after ``correct``, the old capture's source and evidence
    vectors (both the raw text "port 6001") map to nothing, exactly as lexical search hides
    the source; the new claim stands in for the correction."""
    old = remember(db, "The dev server listens on port 6001", claim=("dev server", "port", "6001"))
    embed(db, "source", old.source_id, [1.0, 0.0])
    embed(db, "evidence", old.evidence_id, [0.0, 1.0])
    assert ids(hybrid(db, "port", [1.0, 0.0])) == [("claim", old.claim_id)]
    fix = db.correct(CorrectRequest(T, P, old.claim_id, "The port is now 6002", "6002", 15, 20))
    for vector in ([1.0, 0.0], [0.0, 1.0], [0.7, 0.7]):
        for query in ("port 6001", "zzz"):
            items = db.search(SearchRequest(T, P, query, 10, QueryEmbedding(vector, M, V))).items
            assert all("6001" not in item.excerpt for item in items), items
            assert {i.memory for i in items} <= {Target(TargetKind.CLAIM, fix.claim_id)}
    assert ranking(db, [1.0, 0.0]) == []
    # historically the old claim is still there (as_of is lexical, §4)
    past = db.search(SearchRequest(T, P, "port", 10, None, AsOf(12, 12)))
    assert [i.memory for i in past.items] == [Target(TargetKind.CLAIM, old.claim_id)]


def test_a_capture_appears_once_per_pack(db: MemoryDb) -> None:
    """Issue 12 item 6 (spec §14 #12 fixed): a raw capture embedded both as its source and as
    its evidence is one Source item, whichever vector is nearer; an evidence vector whose
    source the lexical lane found is that Source too; an evidence vector alone stays an
    Evidence item (spec §12 item 7)."""
    both = remember(db, "Quiet desk near a window")
    embed(db, "source", both.source_id, [1.0, 0.0])
    embed(db, "evidence", both.evidence_id, [0.0, 1.0])
    for vector in ([1.0, 0.0], [0.0, 1.0]):
        assert ids(hybrid(db, "zzz", vector)) == [("source", both.source_id)]
        assert ids(hybrid(db, "desk", vector)) == [("source", both.source_id)]
    only = remember(db, "Roadmap review on Thursday", at=11)
    embed(db, "evidence", only.evidence_id, [0.6, 0.8])
    got = ids(hybrid(db, "Thursday", [0.6, 0.8]))
    assert got.count(("source", only.source_id)) == 1
    assert ("evidence", only.evidence_id) not in got
    assert ("evidence", only.evidence_id) in ids(hybrid(db, "zzz", [0.6, 0.8]))
    for query, vector in (("desk Thursday", [0.6, 0.8]), ("zzz", [1.0, 0.0])):
        pack = db.search(SearchRequest(T, P, query, 10, QueryEmbedding(vector, M, V)))
        captures = [
            i.memory.id if i.memory.kind is TargetKind.SOURCE else i.evidence_ids[0]
            for i in pack.items
        ]
        sources = {
            both.source_id: both.evidence_id,
            only.source_id: only.evidence_id,
        }
        cited = [sources.get(c, c) for c in captures]
        assert len(cited) == len(set(cited)), pack


def test_query_dimension_is_checked_before_any_vector_is_read(
    db: MemoryDb, db_path: str, vector_file: list[object]
) -> None:
    """Issue 18 fault 6: a wrong-dimension query fails from the lane's configuration (a few
    index seeks) before the lane's vectors are read or decoded, in a fresh process as in a
    warm one; with no current row it is an empty pack, as §5.2 says."""
    notes = [remember(db, f"note {i}") for i in range(5)]
    for i, n in enumerate(notes):
        embed(db, "source", n.source_id, [math.cos(i), math.sin(i)])
    dense.clear_cache()
    vector_file.clear()
    wrong = SearchRequest(T, P, "zzz", 3, QueryEmbedding([1.0] * 90_000, M, V))
    with pytest.raises(InvalidInput, match="dimension 90000 does not match stored dimension 2"):
        db.search(wrong)
    assert vector_file == []  # nothing decoded
    assert not dense_registry.CACHES  # nothing loaded
    db.search(SearchRequest(T, P, "zzz", 3, QueryEmbedding([1.0, 0.0], M, V)))
    vector_file.clear()
    with pytest.raises(InvalidInput, match="dimension 90000"):
        db.search(wrong)
    assert vector_file == []
    other = SearchRequest(T, P, "zzz", 3, QueryEmbedding([1.0] * 7, "other-model", V))
    assert db.search(other).items == []


# --------------------------------------------------------------------------- change log


def _lane_rows_read(db: MemoryDb, req: SearchRequest) -> tuple[Any, bool]:
    """Search; report whether the lane's rows were read (a full refresh)."""
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    try:
        pack = db.search(req).to_json()
    finally:
        db.conn.set_trace_callback(None)
    return pack, any("FROM embeddings em" in sql for sql in statements)


def test_a_fresh_process_trusts_its_lane_through_the_change_log(
    db: MemoryDb, db_path: str, vector_file: list[object]
) -> None:
    """Issue 14 item 5: a fresh connection (a CLI call) searches from the lane state file
    without reading the lane's rows or decoding a vector while the change log shows nothing
    that touches the lane; writes that do touch it (by this zkr, or by plain SQL as another
    writer would) are seen, and every pack equals the row-by-row oracle's."""
    notes = [remember(db, f"note {i}", claim=("n", "is", f"v{i}")) for i in range(4)]
    notes += [remember(db, f"raw {i}") for i in range(4)]
    for i, n in enumerate(notes):
        embed(db, "source", n.source_id, [math.cos(i), math.sin(i)])
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 100")
    req = SearchRequest(T, P, "zzz", 5, QueryEmbedding([1.0, 0.0], M, V))
    check_against_reference(db, req)  # first search: writes both files
    assert list(Path(db_path + ".zkr-vectors").glob("*.lane"))

    def fresh(expect_read: bool) -> None:
        with MemoryDb.open(db_path) as other:
            dense.clear_cache()
            vector_file.clear()
            pack, read = _lane_rows_read(other, req)
            assert read is expect_read
            assert ("ok", pack) == check_against_reference(other, req)
            if not expect_read:
                assert vector_file == []

    fresh(expect_read=False)
    remember(db, "an unrelated capture", claim=("x", "y", "z"))  # touches no lane target
    fresh(expect_read=False)
    db.correct(CorrectRequest(T, P, notes[0].claim_id, "now w0", "w0", 30, 30))
    fresh(expect_read=True)  # the lane's capture changed meaning
    fresh(expect_read=False)  # ...and the next process trusts the new state
    edit(db_path, "UPDATE sources SET deleted_at = 40 WHERE id = ?", (notes[5].source_id,))
    fresh(expect_read=True)  # a plain SQL write fires the triggers too
    edit(
        db_path,
        "UPDATE embeddings SET vector = '[0.0,1.0]' WHERE target_id = ?",
        (notes[6].source_id,),
    )
    fresh(expect_read=True)  # even a hand edit of a vector alone


def test_a_missing_trigger_means_a_new_log_generation(db: MemoryDb, db_path: str) -> None:
    from zkr.store import changes

    r = remember(db, "a capture")
    embed(db, "source", r.source_id, [1.0, 0.0])
    db.search(SearchRequest(T, P, "zzz", 5, QueryEmbedding([1.0, 0.0], M, V)))
    first = changes.mark(db.conn)
    assert first is not None
    edit(db_path, "DROP TRIGGER zkr_changes_sources_update")
    assert changes.mark(db.conn) is None  # incomplete: not trusted
    db.search(SearchRequest(T, P, "zzz", 5, QueryEmbedding([1.0, 0.0], M, V)))
    second = changes.mark(db.conn)
    assert second is not None and second.generation != first.generation


# --------------------------------------------------------------------------- zkr's vector copies


def _copies(path: str) -> dict[str, tuple[float, ...]]:
    """target id -> zkr's float32 copy of its row's vector, read with plain sqlite3."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT em.target_id, v.vector FROM zkr_vectors v"
            " JOIN embeddings em ON em.rowid = v.row"
        ).fetchall()
    finally:
        conn.close()
    return {tid: struct.unpack(f"<{len(blob) // 4}f", blob) for tid, blob in rows}


def _text_values(path: str, target_id: str) -> tuple[float, ...]:
    conn = sqlite3.connect(path)
    try:
        (text,) = conn.execute(
            "SELECT vector FROM embeddings WHERE target_id = ?", (target_id,)
        ).fetchone()
    finally:
        conn.close()
    return tuple(struct.unpack("<f", struct.pack("<f", x))[0] for x in json.loads(text))


def test_copies_follow_every_write_to_their_rows(
    db: MemoryDb, db_path: str, vector_file: list[object]
) -> None:
    """``embed`` keeps a float32 copy equal to the stored text; any other write to the row (a
    hand edit, a delete, a re-embed) drops or replaces it, and every search, in this process
    or a fresh one, equals the row-by-row reference scorer."""
    notes = [remember(db, f"note {i}") for i in range(5)]
    for i, n in enumerate(notes):
        embed(db, "source", n.source_id, [math.cos(i), math.sin(i)])
    req = SearchRequest(T, P, "zzz", 5, QueryEmbedding([1.0, 0.0], M, V))
    copies = _copies(db_path)
    assert set(copies) == {n.source_id for n in notes}
    for n in notes:
        assert copies[n.source_id] == _text_values(db_path, n.source_id)
    check_against_reference(db, req)
    # a hand edit of the vector alone (another writer): the trigger drops the copy
    edit(
        db_path,
        "UPDATE embeddings SET vector = '[0.6,0.8]' WHERE target_id = ?",
        (notes[0].source_id,),
    )
    assert notes[0].source_id not in _copies(db_path)
    check_against_reference(db, req)
    # a delete of the target's memory: its row stays (stale), the search hides it
    db.delete(DeleteRequest(T, P, notes[1].source_id, 20))
    check_against_reference(db, req)
    # an embeddings row deleted by hand takes its copy with it
    edit(db_path, "DELETE FROM embeddings WHERE target_id = ?", (notes[2].source_id,))
    assert notes[2].source_id not in _copies(db_path)
    # a re-embed writes a new copy of the new vector
    embed(db, "source", notes[0].source_id, [0.0, 1.0])
    assert _copies(db_path)[notes[0].source_id] == (0.0, 1.0)
    first = check_against_reference(db, req)
    dense.clear_cache()
    shutil.rmtree(db_path + ".zkr-vectors", ignore_errors=True)
    with MemoryDb.open(db_path) as fresh:
        vector_file.clear()
        assert check_against_reference(fresh, req) == first


def test_a_copy_serves_only_the_row_it_was_written_for(
    db: MemoryDb, db_path: str, vector_file: list[object]
) -> None:
    """A VACUUM may renumber rowids without firing a trigger: a copy whose row now holds
    another target is not used (its text is decoded instead)."""
    a, b = remember(db, "first"), remember(db, "second")
    embed(db, "source", a.source_id, [1.0, 0.0])
    embed(db, "source", b.source_id, [0.0, 1.0])
    conn = sqlite3.connect(db_path)
    (ra,), (rb,) = (
        conn.execute("SELECT rowid FROM embeddings WHERE target_id = ?", (x,)).fetchone()
        for x in (a.source_id, b.source_id)
    )
    # swap the two copies' rows, as a renumbering would leave them
    conn.execute("UPDATE zkr_vectors SET row = -1 WHERE row = ?", (ra,))
    conn.execute("UPDATE zkr_vectors SET row = ? WHERE row = ?", (ra, rb))
    conn.execute("UPDATE zkr_vectors SET row = ? WHERE row = -1", (rb,))
    conn.commit()
    conn.close()
    dense.clear_cache()
    shutil.rmtree(db_path + ".zkr-vectors", ignore_errors=True)
    with MemoryDb.open(db_path) as fresh:
        assert ranking(fresh, [1.0, 0.0])[0].id == a.source_id
        assert ranking(fresh, [0.0, 1.0])[0].id == b.source_id


def test_copies_are_dropped_with_a_missing_trigger(
    db: MemoryDb, db_path: str, vector_file: list[object]
) -> None:
    """A writer that ran while a trigger was missing may have left a copy stale: the next
    search recreates the log, and every copy with it."""
    a, b = remember(db, "first"), remember(db, "second")
    embed(db, "source", a.source_id, [1.0, 0.0])
    embed(db, "source", b.source_id, [0.0, 1.0])
    edit(db_path, "DROP TRIGGER zkr_changes_embeddings_update")
    edit(db_path, "UPDATE embeddings SET vector = '[0.0,1.0]' WHERE target_id = ?", (a.source_id,))
    edit(db_path, "UPDATE embeddings SET vector = '[1.0,0.0]' WHERE target_id = ?", (b.source_id,))
    assert len(_copies(db_path)) == 2  # stale: no trigger dropped them
    dense.clear_cache()
    shutil.rmtree(db_path + ".zkr-vectors", ignore_errors=True)
    with MemoryDb.open(db_path) as fresh:
        req = SearchRequest(T, P, "zzz", 2, QueryEmbedding([1.0, 0.0], M, V))
        got = check_against_reference(fresh, req)
        assert got[1]["items"][0]["memory"]["id"] == b.source_id
    assert _copies(db_path) == {}


DECODE_CASES = [
    "[1,2]",
    " [ 1 , 2.5e0 ]\n",
    "[-0.0, 1E-45]",
    "[3.4028235e38,1]",
    "[3.4028236e38,1]",
    "[1e39,1]",
    "[1" + "0" * 400 + ",1]",
    "[NaN,1]",
    "[Infinity,1]",
    "[-Infinity,1]",
    "[true,1]",
    "[false,1]",
    "[null,1]",
    '["1",1]',
    "[[1],1]",
    "[{},1]",
    "[]",
    "[1]",
    "[1,2,3]",
    "1,2",
    "[1,2",
    "[1,2] x",
    "[01,1]",
    "[1.,1]",
    "[.5,1]",
    "[+1,1]",
    "[1,,2]",
    "[1,2,]",
    "]1,2[",
    "[0.6,0.8]",
    "[0.6,0.80001]",
    "[0.6,0.81]",
    "[1e-46,1]",
    "[-1.5e+3,2]",
]


@pytest.mark.parametrize("normalization", [Normalization.NONE, Normalization.L2])
def test_bulk_decoding_equals_decoding_each_cell(normalization: Normalization) -> None:
    """zkr.store.dense.decode gives, cell by cell, what vectors.decode_vector gives, also
    when bad cells share a batch with good ones (and for non-text cells)."""
    from zkr.store.dense.decode import decode_texts
    from zkr.store.vectors import LaneConfig, decode_vector

    config = LaneConfig(2, normalization, Distance.COSINE)
    cells: list[object] = [*DECODE_CASES, b"[1,2]", None, 3]
    batches = [cells, [c for c in cells if c in ("[1,2]", "[0.6,0.8]")], cells[::-1]]
    batches += [[c] for c in cells]
    for batch in batches:
        matrix, ok = decode_texts(batch, config)
        for cell, row, good in zip(batch, matrix, ok, strict=True):
            want = decode_vector(cell, 2, normalization)
            assert bool(good) is (want is not None), cell
            if want is not None:
                assert row.tobytes() == np.asarray(want, dtype=np.float32).tobytes(), cell


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.floats(allow_nan=False, allow_infinity=False, width=32)
            | st.integers(-(10**40), 10**40),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([Normalization.NONE, Normalization.L2]),
)
def test_bulk_decoding_of_random_vectors(
    vectors: list[list[float]], normalization: Normalization
) -> None:
    from zkr.store.dense.decode import decode_texts
    from zkr.store.vectors import LaneConfig, decode_vector

    config = LaneConfig(3, normalization, Distance.DOT)
    cells: list[object] = [json.dumps(v) for v in vectors]
    matrix, ok = decode_texts(cells, config)
    for cell, row, good in zip(cells, matrix, ok, strict=True):
        want = decode_vector(cell, 3, normalization)
        assert bool(good) is (want is not None)
        if want is not None:
            assert row.tobytes() == np.asarray(want, dtype=np.float32).tobytes()


def test_side_file_of_a_lane_with_a_blob_cell(
    db: MemoryDb, db_path: str, vector_file: list[object]
) -> None:
    """A cell that is not a JSON value (a BLOB written by hand) is stored in the side file as a
    row without metadata; searches from the file still equal the reference."""
    notes = [remember(db, f"note {i}") for i in range(3)]
    for i, n in enumerate(notes):
        embed(db, "source", n.source_id, [math.cos(i), math.sin(i)])
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 100")
    edit(
        db_path,
        "UPDATE embeddings SET input_hash = X'00' WHERE target_id = ?",
        (notes[1].source_id,),
    )
    req = SearchRequest(T, P, "zzz", 3, QueryEmbedding([1.0, 0.0], M, V))
    first = check_against_reference(db, req)
    assert list(Path(db_path + ".zkr-vectors").glob("*.bin"))
    dense.clear_cache()
    with MemoryDb.open(db_path) as fresh:
        assert check_against_reference(fresh, req) == first


def test_patched_side_files_equal_a_rebuild(
    db: MemoryDb, db_path: str, tmp_path: Path, vector_file: list[object], monkeypatch: Any
) -> None:
    """After a few writes, a fresh process patches the side files (new vectors in an overlay,
    the mapping re-derived for the affected targets only) instead of re-reading the lane;
    after embeds, re-embeds, deletes, corrections, hand edits and apply, its results equal a
    from-scratch rebuild of a copy of the file and the row-by-row reference, and a later full
    refresh (the overlay compacted) still agrees."""
    from zkr.store import vectorfile

    patched: list[bool] = []
    original = dense_patching.patch

    def counting(conn: Any, cache: Any) -> bool:
        done = original(conn, cache)
        patched.append(done)
        return done

    monkeypatch.setattr(dense_patching, "patch", counting)
    rng = random.Random(7)

    def vec() -> list[float]:
        return [f32(rng.uniform(-1, 1)) for _ in range(4)]

    def put(target: MemoryDb, kind: str, target_id: str) -> None:
        embed(target, kind, target_id, vec(), norm="none")

    queries = [vec() for _ in range(3)]

    def scored(path: str) -> list[Any]:
        dense.clear_cache()
        with MemoryDb.open(path) as fresh:
            for q in queries:
                req = SearchRequest(T, P, "desk", 10, QueryEmbedding(q, M, V))
                check_against_reference(fresh, req)
            with read_tx(fresh.conn):
                return [
                    dense.scored(fresh.conn, T, P, QueryEmbedding(q, M, V), 1000) for q in queries
                ]

    def agrees(path: str, patch: bool | None = True) -> None:
        """A fresh process on ``path`` (through its side files) equals one on a copy without
        them; ``patch``: it got there by patching (or not; ``None``: either)."""
        del patched[:]
        got = scored(path)
        if patch is not None:
            assert (patched == [True]) is patch
        scratch = tmp_path / "scratch.db"
        scratch.unlink(missing_ok=True)
        shutil.rmtree(str(scratch) + ".zkr-vectors", ignore_errors=True)
        source, copy = sqlite3.connect(path), sqlite3.connect(scratch)
        source.backup(copy)
        source.close()
        copy.close()
        assert got == scored(str(scratch))
        assert any(got)

    notes = [remember(db, f"desk note {i}", at=10 + i) for i in range(12)]
    claims = [
        remember(db, f"Sam works at Acme{i}", at=30 + i, claim=("Sam", f"job{i}", f"Acme{i}"))
        for i in range(4)
    ]
    for n in notes:
        put(db, "source", n.source_id)
    for n in notes[:4]:
        put(db, "evidence", n.evidence_id)
    for c in claims:
        put(db, "claim", c.claim_id)
        put(db, "source", c.source_id)
        put(db, "evidence", c.evidence_id)
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 100")
    agrees(db_path, patch=False)  # the first search writes the side files
    side = Path(db_path + ".zkr-vectors")
    late = remember(db, "a late desk note", at=60)  # embed a new memory
    put(db, "source", late.source_id)
    agrees(db_path)
    assert list(side.glob("*.add"))  # its vector went to the overlay
    put(db, "source", notes[2].source_id)  # re-embed
    put(db, "evidence", notes[2].evidence_id)
    agrees(db_path)
    db.delete(DeleteRequest(T, P, notes[0].source_id, 70))  # delete
    agrees(db_path)
    # one evidence of a capture, deleted by hand
    edit(db_path, "UPDATE evidence SET deleted_at = 71 WHERE id = ?", (notes[1].evidence_id,))
    agrees(db_path)
    fix = db.correct(CorrectRequest(T, P, claims[0].claim_id, "Sam moved to Beta", "Beta", 72, 72))
    agrees(db_path)  # correct: the superseded claim's rows map to nothing
    put(db, "claim", fix.claim_id)
    agrees(db_path)
    edit(  # a hand edit of a vector alone (the log names the row)
        db_path,
        "UPDATE embeddings SET vector = ? WHERE target_id = ?",
        (json.dumps(vec()), notes[5].source_id),
    )
    agrees(db_path)
    edit(db_path, "UPDATE sources SET content = 'edited' WHERE id = ?", (notes[6].source_id,))
    agrees(db_path)  # a hand edit of a target's text: its row is no longer current
    edit(db_path, "DELETE FROM embeddings WHERE target_id = ?", (claims[1].claim_id,))
    agrees(db_path)
    # a missing trigger: a new log generation, a full rebuild; its rows settled (a rebuild
    # saves no state while a row is of the current second, which a vector file never trusts)
    edit(db_path, "DROP TRIGGER zkr_changes_sources_update")
    put(db, "source", notes[7].source_id)
    settles = itertools.count(1)

    def settle() -> None:
        """Every row's ``created_at`` to a past second no earlier settle used: shifting by a
        constant would give a row rewritten within the second of its previous write (a fast,
        idle machine) the very meta it had, which no real writer can (embed restamps it)."""
        edit(db_path, "UPDATE embeddings SET created_at = ?", (1_000_000 - next(settles),))

    settle()
    agrees(db_path, patch=False)
    assert not list(side.glob("*.add"))  # the rebuild compacted the overlay
    put(db, "source", notes[8].source_id)
    agrees(db_path)
    # a VACUUM may renumber rowids without firing a trigger: the next write rebuilds
    edit(db_path, "VACUUM")
    agrees(db_path, patch=None)  # nothing logged: the state stands
    edit(db_path, "DELETE FROM embeddings WHERE target_id = ?", (notes[3].source_id,))
    settle()
    agrees(db_path, patch=False)
    put(db, "source", notes[4].source_id)
    agrees(db_path)
    # losing the lane state while an overlay exists: the vector file is not trusted
    settle()
    for lane_file in side.glob("*.lane"):
        lane_file.unlink()
    agrees(db_path, patch=False)
    put(db, "source", notes[9].source_id)
    agrees(db_path)
    # the overlay grown past its share: a full refresh rewrites the vector file
    monkeypatch.setattr(dense_patching, "PATCH_OVERLAY", 0)
    monkeypatch.setattr(dense_patching, "PATCH_SHARE", 0.0)
    put(db, "source", notes[10].source_id)
    del patched[:]
    got = scored(db_path)
    assert patched == [False] and not list(side.glob("*.add"))
    assert got == scored(db_path)
    monkeypatch.setattr(dense_patching, "PATCH_OVERLAY", 1024)
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 100")
    # apply: a replica that searches, then receives the rest of the history
    page = db.export(ExportRequest(T, P, 1, limit=100))
    replica_path = str(tmp_path / "replica.db")
    with MemoryDb.open(replica_path) as replica:
        replica.apply(ApplyRequest(T, P, 1, page.database_schema_version, page.commits[:10]))
        for kind, target_id in states(replica):
            put(replica, kind, target_id)
    edit(replica_path, "UPDATE embeddings SET created_at = created_at - 100")
    agrees(replica_path, patch=False)
    with MemoryDb.open(replica_path) as replica:
        replica.apply(ApplyRequest(T, P, 1, page.database_schema_version, page.commits))
    agrees(replica_path)
    assert vectorfile.MIN_ROWS == 1


def test_a_first_call_in_bulk_equals_the_row_by_row_refresh(
    db: MemoryDb, db_path: str, vector_file: list[object], monkeypatch: Any
) -> None:
    """A first call's bulk refresh (:mod:`zkr.store.dense.bulk`) derives exactly what the
    row-by-row refresh derives — currentness (stale revision, wrong hash, deleted target),
    claims, linked evidence folded into its source, zkr's float32 copies and hand-written JSON
    vectors — and the side files it writes serve later processes (with the lane state, and
    without it: again in bulk from the copies, or row by row reusing the decoded JSON
    vectors)."""
    import time

    from zkr.store import vectorfile

    used: list[bool] = []
    original = dense_bulk.refresh

    def counting(conn: Any, cache: Any) -> bool:
        done = original(conn, cache)
        used.append(done)
        return done

    monkeypatch.setattr(dense_bulk, "refresh", counting)
    monkeypatch.setattr(dense_bulk, "META_BATCH", 2)  # the file's rows rendered in pieces
    rng = random.Random(11)

    def vec() -> list[float]:
        return [f32(rng.uniform(-1, 1)) for _ in range(4)]

    notes = [remember(db, f"desk note {i}", at=10 + i) for i in range(10)]
    claims = [
        remember(db, f"Sam works at Acme{i}", at=30 + i, claim=("Sam", f"job{i}", f"Acme{i}"))
        for i in range(4)
    ]
    for n in notes:
        embed(db, "source", n.source_id, vec(), norm="none")
    for i, c in enumerate(claims):
        embed(db, "claim", c.claim_id, vec(), norm="none")
        embed(db, "evidence", c.evidence_id, vec(), norm="none")
        if i % 2:
            embed(db, "source", c.source_id, vec(), norm="none")
    # not current: a stale revision, a wrong hash, a deleted target; a vector written by hand
    # (its copy dropped: read from its JSON text)
    edit(
        db_path,
        "UPDATE embeddings SET target_revision = 99 WHERE target_id = ?",
        (notes[0].source_id,),
    )
    edit(
        db_path,
        "UPDATE embeddings SET input_hash = 'sha256:00' WHERE target_id = ?",
        (notes[1].source_id,),
    )
    db.delete(DeleteRequest(T, P, notes[2].source_id, 50))
    edit(
        db_path,
        "UPDATE embeddings SET vector = '[0.5,0.25,0.125,1]' WHERE target_id = ?",
        (notes[3].source_id,),
    )
    time.sleep(1.1)  # every row settled (a row of the current second sends a lane row by row)
    queries = [vec() for _ in range(3)]
    side = Path(db_path + ".zkr-vectors")

    def fresh(bulk: bool, keep: bool = False) -> tuple[list[Any], Any]:
        dense.clear_cache()
        if not keep:
            shutil.rmtree(side, ignore_errors=True)
        del used[:]
        bulk_refresh = dense_bulk._refresh
        if not bulk:
            monkeypatch.setattr(dense_bulk, "_refresh", lambda conn, cache: False)
        try:
            with MemoryDb.open(db_path) as other:
                for q in queries:
                    check_against_reference(
                        other, SearchRequest(T, P, "desk", 10, QueryEmbedding(q, M, V))
                    )
                with read_tx(other.conn):
                    got = [
                        dense.scored(other.conn, T, P, QueryEmbedding(q, M, V), 1000)
                        for q in queries
                    ]
                cache = next(iter(dense_registry.CACHES.values()))
                derived = cache.derived
                vectors = np.asarray(cache.segments(derived.lane)[0][0])[:, derived.columns]
                return got, (derived, vectors)
        finally:
            monkeypatch.setattr(dense_bulk, "_refresh", bulk_refresh)

    got, (derived, vectors) = fresh(True)
    assert used == [True] and any(got)
    assert vector_file == [] or len(vector_file) == len(derived.columns)
    want, (expected, expected_vectors) = fresh(False)
    assert used == [False]
    assert got == want
    for name in ("kinds", "ids", "pair_rows", "pair_starts", "row_ids", "pos_rowids", "pos_keys"):
        assert np.array_equal(getattr(derived, name), getattr(expected, name)), name
    assert derived.source_of == expected.source_of and derived.lane == expected.lane
    assert np.array_equal(vectors, expected_vectors)
    # the bulk file serves a fresh process through the lane state, reading no vector
    fresh(True)
    vector_file.clear()
    again, _ = fresh(True, keep=True)
    assert again == want and vector_file == [] and used == []
    # without the lane state: the JSON rows' small columns are in the file (one vector was
    # read from its text), so the row-by-row refresh reuses every decoded vector
    for state_file in side.glob("*.lane"):
        state_file.unlink()
    again, _ = fresh(True, keep=True)
    assert again == want and vector_file == [] and used == [False]
    # a lane all from zkr's copies: its file keeps no rows (re-read in bulk instead)
    embed(db, "source", notes[3].source_id, vec(), norm="none")
    time.sleep(1.1)
    want, _ = fresh(False)
    got, _ = fresh(True)
    assert got == want and used == [True]
    snap = vectorfile.read(next(side.glob("*.bin")), (T, P, M, V))
    assert snap is None  # no rows' small columns
    for state_file in side.glob("*.lane"):
        state_file.unlink()
    again, _ = fresh(True, keep=True)
    assert again == want and used == [True]


def test_rows_written_since_are_looked_up_by_rowid(db: MemoryDb) -> None:
    """The lane's rows named by the change log (a patch's targets, the numpy-free search's
    rows written since) are found by rowid, not by walking the lane's index (22 ms at 100k
    rows): checked with EXPLAIN QUERY PLAN, not timing."""
    from zkr.store.lanesql import WRITTEN_ROWS_SQL, WRITTEN_TARGETS_SQL

    made = [remember(db, f"note {i}") for i in range(30)]
    for r in made:
        embed(db, "source", r.source_id, [1.0, 0.0])
    rowids = [row[0] for row in db.conn.execute("SELECT rowid FROM embeddings LIMIT 5")]
    params = {"t": T, "p": P, "m": M, "v": V, "rows": json.dumps(rowids)}
    for sql in (WRITTEN_ROWS_SQL, WRITTEN_TARGETS_SQL):
        rows = db.conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
        plan = " | ".join(str(row[3]) for row in rows)
        assert "SEARCH em USING INTEGER PRIMARY KEY (rowid=?)" in plan, plan
        assert len(db.conn.execute(sql, params).fetchall()) == 5
