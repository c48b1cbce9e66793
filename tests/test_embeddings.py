"""``projections`` and ``embed``: inputs, stored rows, lanes, validation, encoding
(spec/retrieval.md §9-12, spec/storage.md §2.3).

Helpers here (``embed``, ``issues``, ``stored``…) are reused by tests/test_dense.py and
tests/test_repair.py.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from tests.conftest import SHARED, P, T, cli, dump, remember, sam_acme
from zkr import InvalidInput, MemoryDb, NotFound, RequestError
from zkr.codec import canonical, sha256_tagged
from zkr.model import (
    ApplyRequest,
    ClaimTierRequest,
    CorrectRequest,
    DeleteRequest,
    Distance,
    EmbeddingInput,
    EmbedRequest,
    ExportRequest,
    Normalization,
    ProcessingState,
    ProjectionsRequest,
    QueryEmbedding,
    SearchRequest,
    Target,
    TargetKind,
    Tier,
    encode,
)
from zkr.store import embeddings as emb, vectors
from zkr.store.vectors import LaneConfig, decode_vector, encode_vector, to_float32

M, V = "m", "1"


# --------------------------------------------------------------------------- helpers


def target(kind: str, target_id: str) -> Target:
    return Target(TargetKind(kind), target_id)


def current_hash(db: MemoryDb, kind: str, target_id: str, t: str = T, p: str = P) -> str:
    found = emb.projection_input(db.conn, t, p, target(kind, target_id))
    assert found is not None, (kind, target_id)
    return found.input_hash


def embed(
    db: MemoryDb,
    kind: str,
    target_id: str,
    vector: list[float],
    *,
    t: str = T,
    p: str = P,
    model: str = M,
    version: str = V,
    norm: str = "l2",
    dist: str = "cosine",
    input_hash: str | None = None,
) -> dict[str, Any]:
    """Embed ``vector`` for a target, binding it to the target's current input hash."""
    if input_hash is None:
        input_hash = current_hash(db, kind, target_id, t, p)
    return db.embed(
        EmbedRequest(
            t,
            p,
            target(kind, target_id),
            EmbeddingInput(
                list(vector), model, version, input_hash, Normalization(norm), Distance(dist)
            ),
        )
    ).to_json()


def issues(
    db: MemoryDb, *, model: str = M, version: str = V, limit: int = 100, t: str = T, p: str = P
) -> list[dict[str, Any]]:
    return encode(db.projections(ProjectionsRequest(t, p, model, version, limit)))


def states(db: MemoryDb, **kwargs: Any) -> dict[tuple[str, str], str]:
    """{(kind, id): state} of the projections page."""
    return {
        (i["input"]["target"]["kind"], i["input"]["target"]["id"]): i["state"]
        for i in issues(db, **kwargs)
    }


def stored(
    db: MemoryDb, kind: str, target_id: str, model: str = M, version: str = V
) -> dict[str, Any] | None:
    cur = db.conn.execute(
        "SELECT * FROM embeddings WHERE target_kind = ? AND target_id = ? AND model = ?"
        " AND version = ?",
        (kind, target_id, model, version),
    )
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row, strict=True))


def edit(path: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    """A hand edit "directly in storage", through a separate connection."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()


def f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def claim_memory(db: MemoryDb, text: str = "Sam works at Acme", at: int = 10, **kw: Any) -> Any:
    return remember(db, text, at=at, claim=("Sam", "employer", "Acme"), **kw)


# --------------------------------------------------------------------------- projections


def test_projection_inputs_of_each_kind(db: MemoryDb) -> None:
    """§9.1 texts, revisions and hashes; §10.2 order claim < evidence < source."""
    r = remember(db, "Sam works at Acme", at=10, recorded_at=12, claim=("Sam", "employer", "Acme"))
    page = issues(db)
    assert [(i["input"]["target"]["kind"], i["input"]["target"]["id"]) for i in page] == [
        ("claim", r.claim_id),
        ("evidence", r.evidence_id),
        ("source", r.source_id),
    ]
    claim, evidence, source = page
    assert claim["input"] == {
        "target": {"kind": "claim", "id": r.claim_id},
        "text": "Sam employer Acme",
        "target_revision": 12,
        "input_hash": sha256_tagged("Sam employer Acme"),
    }
    assert evidence["input"]["text"] == source["input"]["text"] == "Sam works at Acme"
    assert evidence["input"]["target_revision"] == source["input"]["target_revision"] == 1
    assert source["input"]["input_hash"] == (
        "sha256:a6ebab40573fa4b3ca742c5e19242e5117532a0880fb6fd19a3973c98708fe66"
    )
    for issue in page:
        assert issue["state"] == "missing"
        assert issue["stored_target_revision"] is None
        assert issue["stored_input_hash"] is None
        assert issue["stored_created_at"] is None
    assert list(claim) == [
        "state",
        "input",
        "stored_target_revision",
        "stored_input_hash",
        "stored_created_at",
    ]


def test_projections_order_and_limits(db: MemoryDb) -> None:
    ids = [remember(db, f"note number {i}") for i in range(60)]
    page = issues(db, limit=0)  # 0 -> 10
    assert len(page) == 10
    expected = sorted(("evidence", r.evidence_id) for r in ids) + sorted(
        ("source", r.source_id) for r in ids
    )
    assert [
        (i["input"]["target"]["kind"], i["input"]["target"]["id"]) for i in issues(db, limit=500)
    ] == expected[:100]  # above 100 -> 100
    assert len(issues(db, limit=3)) == 3
    # no cursor: the same earliest issues come back
    assert issues(db, limit=5) == issues(db, limit=5)


def test_projections_scope_and_liveness(db: MemoryDb) -> None:
    mine = remember(db, "kept note")
    gone = remember(db, "deleted note")
    remember(db, "other tenant note", t="b")
    remember(db, "other person note", p="q")
    pending = remember(
        db,
        "pending note",
        claim=("Sam", "habit", "running"),
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.PENDING,
    )
    db.delete(DeleteRequest(T, P, gone.source_id, 20))
    assert set(states(db)) == {
        ("evidence", mine.evidence_id),
        ("source", mine.source_id),
        ("evidence", pending.evidence_id),
        ("source", pending.source_id),
    }
    assert issues(db, t="nobody") == []


def test_projections_validation(db: MemoryDb) -> None:
    for t, p, model, version, message in [
        (" ", P, M, V, "tenant_id must not be empty"),
        (T, "\u3000", M, V, "person_id must not be empty"),
        (T, P, "", V, "embedding model must not be empty"),
        (T, P, M, "  ", "embedding version must not be empty"),
        (T, P, "\u2003", "", "embedding model must not be empty"),
    ]:
        with pytest.raises(InvalidInput) as err:
            db.projections(ProjectionsRequest(t, p, model, version))
        assert str(err.value) == message


def test_embedded_target_leaves_projections_per_model_version(db: MemoryDb) -> None:
    r = claim_memory(db)
    embed(db, "claim", r.claim_id, [0.6, 0.8])
    assert ("claim", r.claim_id) not in states(db)
    assert states(db, version="2")[("claim", r.claim_id)] == "missing"
    assert states(db, model="other")[("claim", r.claim_id)] == "missing"
    embed(db, "evidence", r.evidence_id, [1.0, 0.0])
    embed(db, "source", r.source_id, [0.0, 1.0])
    assert issues(db) == []


def test_s10_corrupted_vector_is_stale(db: MemoryDb, db_path: str) -> None:
    """retrieval.md §12 item 10; stale issues echo the stored revision, hash and created_at."""
    r = remember(db, "Quiet desk near a window")
    embed(db, "evidence", r.evidence_id, [1.0, 0.0])
    row = embed(db, "source", r.source_id, [1.0, 0.0])
    edit(db_path, "UPDATE embeddings SET vector = '[0.1, 0.2]' WHERE target_kind = 'source'")
    page = issues(db)
    assert len(page) == 1
    assert page[0]["state"] == "stale"
    assert page[0]["input"]["target"] == {"kind": "source", "id": r.source_id}
    assert page[0]["stored_target_revision"] == 1
    assert page[0]["stored_input_hash"] == row["input_hash"]
    assert page[0]["stored_created_at"] == row["created_at"]


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("vector", "[1.0, 0.0"),
        ("vector", "[1.0, NaN]"),
        ("vector", "[1.0, true]"),
        ("vector", '[1.0, "0"]'),
        ("vector", "[1e39, 0]"),
        ("vector", "[]"),
        ("vector", "[1.0]"),
        ("dimension", 3),
        ("normalization", "l2"),
        ("normalization", '"L2"'),
        ("distance", '"manhattan"'),
        ("target_revision", 2),
        ("input_hash", "sha256:0"),
    ],
)
def test_malformed_or_mismatched_rows_are_stale(
    db: MemoryDb, db_path: str, column: str, value: object
) -> None:
    """§9.2 well-formedness and §10.1 revision/hash checks."""
    r = remember(db, "Quiet desk near a window")
    embed(db, "evidence", r.evidence_id, [1.0, 0.0])
    embed(db, "source", r.source_id, [1.0, 0.0])
    edit(db_path, f"UPDATE embeddings SET {column} = ? WHERE target_kind = 'source'", (value,))
    assert states(db) == {("source", r.source_id): "stale"}


def test_equivalent_json_spellings_are_well_formed(db: MemoryDb, db_path: str) -> None:
    """Stored cells are decoded as JSON, so whitespace and escapes do not make a row stale."""
    r = remember(db, "Quiet desk near a window")
    embed(db, "evidence", r.evidence_id, [1.0, 0.0])
    embed(db, "source", r.source_id, [1.0, 0.0])
    edit(
        db_path,
        "UPDATE embeddings SET vector = ' [ 1 , 0.0e0 ] ', normalization = ' \"\\u006c2\" '"
        " WHERE target_kind = 'source'",
    )
    assert issues(db) == []


def test_s11_lane_mixing(db: MemoryDb, db_path: str) -> None:
    """retrieval.md §12 item 11 (the dense half is in tests/test_dense.py)."""
    one, two = remember(db, "first note"), remember(db, "second note")
    embed(db, "source", one.source_id, [1.0], norm="none")
    with pytest.raises(InvalidInput) as err:
        embed(db, "source", two.source_id, [0.6, 0.8], norm="none")
    assert (
        str(err.value) == "embedding configuration conflicts with the existing model/version lane"
    )
    assert stored(db, "source", two.source_id) is None
    embed(db, "source", two.source_id, [3.0], norm="none")
    edit(
        db_path,
        "UPDATE embeddings SET dimension = 2, distance = '\"invalid\"' WHERE target_id = ?",
        (one.source_id,),
    )
    assert states(db)[("source", one.source_id)] == "stale"
    assert ("source", two.source_id) not in states(db)


def test_s12_legacy_mixed_lane(db: MemoryDb, db_path: str) -> None:
    """retrieval.md §12 item 12: re-embedding into the lane clears the legacy row's issue."""
    one, two = remember(db, "first note"), remember(db, "second note")
    embed(db, "source", one.source_id, [1.0], norm="none")
    edit(
        db_path,
        "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
        " dimension, input_hash, normalization, distance, vector, target_revision, created_at)"
        " VALUES (?, ?, 'source', ?, ?, ?, 2, ?, '\"none\"', '\"cosine\"', '[1.0,2.0]', 1, 5)",
        (T, P, two.source_id, M, V, current_hash(db, "source", two.source_id)),
    )
    assert states(db)[("source", two.source_id)] == "stale"  # outside the lane (dimension 1)
    embed(db, "source", two.source_id, [2.0], norm="none")
    assert ("source", two.source_id) not in states(db)


def test_s13_embed_scope(db: MemoryDb) -> None:
    """retrieval.md §12 item 13."""
    r = remember(db, "Quiet desk near a window")
    out = embed(db, "evidence", r.evidence_id, [0.4472136, 0.8944272])
    assert out["dimension"] == 2
    with pytest.raises(NotFound):
        embed(
            db,
            "evidence",
            r.evidence_id,
            [0.4472136, 0.8944272],
            t="b",
            input_hash=out["input_hash"],
        )


def test_s09_l2_vector_must_be_unit(db: MemoryDb) -> None:
    """retrieval.md §12 item 9 and the §11.2 tolerance (on the magnitude, not its square)."""
    r = remember(db, "note")
    with pytest.raises(InvalidInput) as err:
        embed(db, "source", r.source_id, [0.1, 0.2])
    assert str(err.value) == "l2-normalized embedding vector must have unit magnitude"
    with pytest.raises(InvalidInput):
        embed(db, "source", r.source_id, [0.6002, 0.8])
    embed(db, "source", r.source_id, [0.6001, 0.8])
    # the same vectors are fine without normalization
    embed(db, "source", r.source_id, [0.1, 0.2], norm="none")


def test_s16_projection_page_budget(db: MemoryDb) -> None:
    """retrieval.md §12 item 16."""
    remember(db, "x" * 600_000)
    remember(db, "y" * 600_000)
    page = issues(db)
    assert len(page) == 1
    assert len(canonical(page).encode()) <= 1_000_000


def test_s17_oversized_projection_issue(db: MemoryDb) -> None:
    """retrieval.md §12 item 17."""
    remember(db, "x" * 1_000_000)
    with pytest.raises(InvalidInput) as err:
        issues(db)
    assert str(err.value) == "projection issue exceeds the 1000000-byte page limit"


def test_oversized_issue_fails_even_after_collected_issues(db: MemoryDb) -> None:
    """§10.3 step 1 and surprise #23 (kept): earlier issues do not rescue the page."""
    r = claim_memory(db)  # the claim sorts first and is small
    db.conn.execute("UPDATE sources SET content = ? WHERE id = ?", ("z" * 1_000_000, r.source_id))
    db.conn.execute("UPDATE evidence SET quote = ? WHERE id = ?", ("z" * 1_000_000, r.evidence_id))
    with pytest.raises(InvalidInput, match="page limit"):
        issues(db)
    assert len(issues(db, limit=1)) == 1


def test_page_size_counts_utf8_bytes(db: MemoryDb) -> None:
    """A 333,000-character text of 3-byte characters is ~1 MB: one issue per page."""
    remember(db, "€" * 300_000)
    page = issues(db)
    assert len(page) == 1
    assert len(canonical(page).encode()) <= 1_000_000


def test_s18_hash_mismatch(db: MemoryDb) -> None:
    """retrieval.md §12 item 18: the message names the current hash."""
    r = remember(db, "Current text")
    with pytest.raises(InvalidInput) as err:
        embed(db, "source", r.source_id, [1.0], input_hash=sha256_tagged("different text"))
    assert str(err.value) == (
        "embedding input_hash does not match current target input; expected "
        + sha256_tagged("Current text")
    )


def test_s20_unrelated_delete_keeps_retracted_claims_embedding(db: MemoryDb) -> None:
    """retrieval.md §12 item 20: only repair removes embeddings."""
    c = claim_memory(db)
    embed(db, "claim", c.claim_id, [1.0, 0.0])
    db.conn.execute(
        "UPDATE claims SET status = 'retracted', recorded_until = 11 WHERE id = ?", (c.claim_id,)
    )
    other = remember(db, "unrelated raw note", at=12)
    db.delete(DeleteRequest(T, P, other.source_id, 20))
    assert stored(db, "claim", c.claim_id) is not None


def test_s21_embed_writes_no_commit(db: MemoryDb) -> None:
    """retrieval.md §12 item 21: embed neither advances the export high-water mark nor
    enqueues repair work."""
    r = claim_memory(db)
    before = db.export(ExportRequest(T, P, 1, limit=100))
    outbox = db.conn.execute("SELECT COUNT(*) FROM memory_repair_outbox").fetchone()
    embed(db, "claim", r.claim_id, [1.0, 0.0])
    after = db.export(ExportRequest(T, P, 1, limit=100))
    assert after.high_water_mark == before.high_water_mark
    assert after == before
    assert db.conn.execute("SELECT COUNT(*) FROM memory_repair_outbox").fetchone() == outbox


def test_s22_replica_projections_are_missing(db: MemoryDb, tmp_path: Path) -> None:
    """retrieval.md §12 item 22: embeddings are never exported."""
    r = remember(db, "Sam works at Globex", claim=("Sam", "employer", "Globex"))
    embed(db, "claim", r.claim_id, [1.0, 0.0])
    embed(db, "source", r.source_id, [1.0, 0.0])
    page = db.export(ExportRequest(T, P, 1, limit=100))
    with MemoryDb.open(str(tmp_path / "replica.db")) as replica:
        replica.apply(ApplyRequest(T, P, 1, page.database_schema_version, page.commits))
        pack = replica.search(SearchRequest(T, P, "Globex"))
        assert pack.items and all(item.evidence_ids for item in pack.items)
        page_states = states(replica)
        assert page_states and set(page_states.values()) == {"missing"}
        assert replica.conn.execute("SELECT COUNT(*) FROM embeddings").fetchone() == (0,)


@pytest.mark.shared
def test_s23_migrated_v1_embeddings_are_stale(tmp_path: Path) -> None:
    """retrieval.md §12 item 23: legacy rows get target_revision 0 and created_at 0."""
    path = tmp_path / "v1.db"
    shutil.copy(SHARED / "fixtures/migrations/db/v1_original_shape.db", path)
    with MemoryDb.open(str(path)) as db:
        rows = db.conn.execute(
            "SELECT DISTINCT target_revision, created_at FROM embeddings"
        ).fetchall()
        assert rows == [(0, 0)]
        model = "openai/text-embedding-3-small"
        page = issues(db, model=model, t="acme", p="sam")
        stale = [i for i in page if i["state"] == "stale"]
        assert stale and all(i["stored_target_revision"] == 0 for i in stale)
        assert all(i["stored_created_at"] == 0 for i in stale)
        fresh = remember(db, "a brand new note", t="acme", p="sam")
        assert states(db, model=model, t="acme", p="sam")[("source", fresh.source_id)] == (
            "missing"
        )
        embed(db, "source", fresh.source_id, [0.5, 0.5, 0.5, 0.5], t="acme", p="sam", model=model)


def test_s24_cli_projections_and_embed(db_path: str) -> None:
    """retrieval.md §12 item 24 (projections half) and the CLI shape of embed."""
    r = cli(
        db_path,
        "remember",
        sam_acme(),
    ).json()
    page = cli(
        db_path,
        "projections",
        {"tenant_id": T, "person_id": P, "model": M, "version": V, "limit": 1},
    ).json()
    assert len(page) == 1 and page[0]["state"] == "missing"
    assert page[0]["input"]["input_hash"].startswith("sha256:")
    out = cli(
        db_path,
        "embed",
        {
            "tenant_id": T,
            "person_id": P,
            "target": page[0]["input"]["target"],
            "embedding": {
                "vector": [0.6, 0.8],
                "model": M,
                "version": V,
                "input_hash": page[0]["input"]["input_hash"],
                "normalization": "l2",
                "distance": "cosine",
            },
        },
    ).json()
    assert sorted(out) == ["created_at", "dimension", "input_hash", "target", "target_revision"]
    assert out["target"] == {"id": r["claim_id"], "kind": "claim"}
    assert out["dimension"] == 2 and out["target_revision"] == 10
    bad = cli(
        db_path,
        "embed",
        {
            "tenant_id": T,
            "person_id": P,
            "target": page[0]["input"]["target"],
            "embedding": {
                "vector": [1e39],
                "model": M,
                "version": V,
                "input_hash": "x",
                "normalization": "none",
                "distance": "dot",
            },
        },
    )
    assert bad.error() == "embedding vector must contain finite values"


# --------------------------------------------------------------------------- embed


def test_embed_validation_order(db: MemoryDb, db_path: str) -> None:
    """§11.1: each check in order, nothing written on failure."""
    r = remember(db, "Current text")
    good = current_hash(db, "source", r.source_id)
    src = Target(TargetKind.SOURCE, r.source_id)
    cases: list[tuple[str, str, Target, EmbeddingInput, str]] = [
        (
            " ",
            " ",
            src,
            EmbeddingInput([], " ", " ", " ", Normalization.L2, Distance.DOT),
            "tenant_id must not be empty",
        ),
        (
            T,
            "\n",
            src,
            EmbeddingInput([], " ", " ", " ", Normalization.L2, Distance.DOT),
            "person_id must not be empty",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([], " \t", "", "", Normalization.L2, Distance.DOT),
            "embedding model must not be empty",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([], M, "\u00a0", "", Normalization.L2, Distance.DOT),
            "embedding version must not be empty",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([], M, V, "  ", Normalization.L2, Distance.DOT),
            "embedding input_hash must not be empty",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([], M, V, "x", Normalization.L2, Distance.DOT),
            "embedding vector must contain finite values",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([1.0, math.inf], M, V, "x", Normalization.NONE, Distance.DOT),
            "embedding vector must contain finite values",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([math.nan], M, V, "x", Normalization.NONE, Distance.DOT),
            "embedding vector must contain finite values",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([3.5e38], M, V, "x", Normalization.NONE, Distance.DOT),
            "embedding vector must contain finite values",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([0.5], M, V, "x", Normalization.L2, Distance.DOT),
            "l2-normalized embedding vector must have unit magnitude",
        ),
        (
            T,
            P,
            Target(TargetKind.SOURCE, "0" * 32),
            EmbeddingInput([1.0], M, V, "x", Normalization.L2, Distance.DOT),
            "record not found",
        ),
        (
            T,
            P,
            Target(TargetKind.CLAIM, r.source_id),
            EmbeddingInput([1.0], M, V, "x", Normalization.L2, Distance.DOT),
            "record not found",
        ),
        (
            T,
            P,
            src,
            EmbeddingInput([1.0], M, V, "x", Normalization.L2, Distance.DOT),
            f"embedding input_hash does not match current target input; expected {good}",
        ),
    ]
    before = dump(db_path)
    for t, p, tgt, emb_input, message in cases:
        with pytest.raises((InvalidInput, NotFound)) as err:
            db.embed(EmbedRequest(t, p, tgt, emb_input))
        assert str(err.value) == message, emb_input
    assert dump(db_path) == before


def test_embed_rejects_non_live_targets(db: MemoryDb) -> None:
    """Archived, superseded, retracted, pending claims and deleted sources/evidence."""
    archived = claim_memory(db, "Sam works at Acme", at=10)
    db.archive(ClaimTierRequest(T, P, archived.claim_id, 12))
    old = remember(db, "Sam lives in Oslo", at=10, claim=("Sam", "city", "Oslo"))
    db.correct(CorrectRequest(T, P, old.claim_id, "Sam moved to Rome", "Rome", 20, 20))
    pending = remember(
        db,
        "Sam may like tea",
        claim=("Sam", "likes", "tea"),
        tier=Tier.SHORT_TERM,
        processing_state=ProcessingState.PENDING,
    )
    gone = remember(db, "to be deleted", at=10)
    db.delete(DeleteRequest(T, P, gone.source_id, 30))
    for kind, target_id in [
        ("claim", archived.claim_id),
        ("claim", old.claim_id),
        ("claim", pending.claim_id),
        ("source", gone.source_id),
        ("evidence", gone.evidence_id),
    ]:
        with pytest.raises(NotFound):
            embed(db, kind, target_id, [1.0], input_hash="sha256:whatever")
    # the evidence of a superseded claim's source is still embeddable
    embed(db, "evidence", old.evidence_id, [1.0])


def test_embed_evidence_of_tombstoned_source(db: MemoryDb) -> None:
    """Surprise #27 (kept): §9.1 does not check the evidence's source, so such a vector is
    accepted (reachable only through apply) but never used by search."""
    r = remember(db, "orphaned evidence")
    db.conn.execute("UPDATE sources SET deleted_at = 20 WHERE id = ?", (r.source_id,))
    embed(db, "evidence", r.evidence_id, [1.0, 0.0])
    from zkr.model import QueryEmbedding

    pack = db.search(SearchRequest(T, P, "zzz", query_embedding=QueryEmbedding([1.0, 0.0], M, V)))
    assert pack.items == []


def test_stored_encoding(db: MemoryDb) -> None:
    """§11.3: plain kind, verbatim model/version, JSON-quoted enums, float32-exact vector,
    created_at from the database clock; a second embed replaces every column."""
    r = remember(db, "Quiet desk near a window")
    before = int(time.time())
    out = embed(
        db,
        "evidence",
        r.evidence_id,
        [0.1, 0.2, 0.3],
        model=" m ",
        version="v 1",
        norm="none",
        dist="euclidean",
    )
    after = int(time.time())
    row = stored(db, "evidence", r.evidence_id, " m ", "v 1")
    assert row is not None
    assert row["tenant_id"] == T and row["person_id"] == P
    assert row["target_kind"] == "evidence"
    assert row["dimension"] == 3
    assert row["input_hash"] == sha256_tagged("Quiet desk near a window") == out["input_hash"]
    assert row["normalization"] == '"none"'
    assert row["distance"] == '"euclidean"'
    assert row["vector"] == "[0.1,0.2,0.3]"
    assert json.loads(row["vector"]) == [0.1, 0.2, 0.3]
    assert [f32(x) for x in json.loads(row["vector"])] == [f32(0.1), f32(0.2), f32(0.3)]
    assert row["target_revision"] == 1
    assert before - 1 <= row["created_at"] <= after + 1
    assert out["created_at"] == row["created_at"]
    # lone row: may be replaced with a new configuration; every column is rewritten
    embed(
        db, "evidence", r.evidence_id, [1.0, 0.0], model=" m ", version="v 1", norm="l2", dist="dot"
    )
    row = stored(db, "evidence", r.evidence_id, " m ", "v 1")
    assert row is not None
    assert (row["dimension"], row["normalization"], row["distance"], row["vector"]) == (
        2,
        '"l2"',
        '"dot"',
        "[1.0,0.0]",
    )
    assert db.conn.execute("SELECT COUNT(*) FROM embeddings").fetchone() == (1,)


def test_cosine_without_normalization_accepts_zero_vector(db: MemoryDb) -> None:
    r = remember(db, "note")
    assert embed(db, "source", r.source_id, [0.0, 0.0], norm="none")["dimension"] == 2


def test_embed_cost_does_not_grow_with_the_lane(db: MemoryDb) -> None:
    """The reference re-validates every stored vector per embed (quadratic backfill); here the
    lane comes from index seeks and the newest current row, so the statement count and the
    number of vectors decoded stay flat."""
    notes = [remember(db, f"note {i}") for i in range(121)]

    def cost(i: int) -> tuple[int, int]:
        statements: list[str] = []
        decoded = 0
        original = emb.decode_vector

        def counting(*args: Any) -> Any:
            nonlocal decoded
            decoded += 1
            return original(*args)

        db.conn.set_trace_callback(statements.append)
        emb.decode_vector = counting  # type: ignore[assignment]
        try:
            embed(db, "source", notes[i].source_id, [0.6, 0.8])
        finally:
            emb.decode_vector = original  # type: ignore[assignment]
            db.conn.set_trace_callback(None)
        return len(statements), decoded

    for i in range(0, 20):
        cost(i)
    small = cost(20)
    for i in range(21, 120):
        cost(i)
    large = cost(120)
    assert small == large
    assert large[1] <= 2


def test_lane_order_and_replacement(db: MemoryDb, db_path: str) -> None:
    """§9.3: the smallest configuration of current rows (dimension numerically, none < l2,
    cosine < dot < euclidean); a lone target's own row sets no lane for itself."""
    notes = [remember(db, f"note {i}") for i in range(4)]
    hashes = [current_hash(db, "source", n.source_id) for n in notes]

    def put(i: int, dim: int, norm: str, dist: str) -> None:
        vector = "[" + ",".join(["1.0"] + ["0.0"] * (dim - 1)) + "]"
        edit(
            db_path,
            "INSERT OR REPLACE INTO embeddings (tenant_id, person_id, target_kind, target_id,"
            " model, version, dimension, input_hash, normalization, distance, vector,"
            " target_revision, created_at) VALUES (?, ?, 'source', ?, ?, ?, ?, ?, ?, ?, ?, 1, 1)",
            (T, P, notes[i].source_id, M, V, dim, hashes[i], f'"{norm}"', f'"{dist}"', vector),
        )

    def lane(replacement: int | None = None) -> LaneConfig | None:
        tgt = None if replacement is None else target("source", notes[replacement].source_id)
        return emb.lane(db.conn, T, P, M, V, replacement=tgt)

    assert lane() is None
    put(0, 10, "l2", "euclidean")
    assert lane() == LaneConfig(10, Normalization.L2, Distance.EUCLIDEAN)
    assert lane(0) is None
    assert lane(1) == LaneConfig(10, Normalization.L2, Distance.EUCLIDEAN)
    put(1, 9, "l2", "euclidean")  # 9 < 10 numerically (not as text)
    assert lane() == LaneConfig(9, Normalization.L2, Distance.EUCLIDEAN)
    assert lane(1) == LaneConfig(9, Normalization.L2, Distance.EUCLIDEAN)  # surprise #22
    put(2, 9, "none", "euclidean")
    assert lane() == LaneConfig(9, Normalization.NONE, Distance.EUCLIDEAN)
    put(3, 9, "none", "dot")
    assert lane() == LaneConfig(9, Normalization.NONE, Distance.DOT)
    put(0, 9, "none", "cosine")
    assert lane() == LaneConfig(9, Normalization.NONE, Distance.COSINE)
    # a stale smallest row does not count
    db.conn.execute(
        "UPDATE embeddings SET input_hash = 'x' WHERE target_id = ?", (notes[0].source_id,)
    )
    assert lane() == LaneConfig(9, Normalization.NONE, Distance.DOT)


# --------------------------------------------------------------------------- encoding


finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@given(st.lists(finite_f32, min_size=1, max_size=24))
@settings(max_examples=300, deadline=None)
def test_vector_text_round_trips_float32(values: list[float]) -> None:
    """The stored text reads back (decimal -> double -> float32) to the same bits."""
    vec = to_float32(values)
    assert vec is not None
    text = encode_vector(vec)
    assert json.loads(text) is not None
    back = decode_vector(text, len(values), Normalization.NONE)
    assert back is not None
    assert back.tobytes() == vec.tobytes()
    for piece, value in zip(text[1:-1].split(","), values, strict=True):
        if abs(value) < 1.1754944e-38:
            continue  # subnormals may have shorter spellings than the 6-digit first try
        digits = piece.split("e")[0].lstrip("-").replace(".", "").lstrip("0").rstrip("0")
        if len(digits) > 1:  # shortest: one significant digit fewer does not read back
            assert f32(float(f"{value:.{len(digits) - 1}g}")) != value


@pytest.mark.parametrize(
    ("text", "dimension", "ok"),
    [
        ("[1,2]", 2, True),
        (" [ 1 , 2.5e0 ]\n", 2, True),
        ("[-0.0, 1E-45]", 2, True),
        ("[3.4028235e38]", 1, True),
        ("[3.4028236e38]", 1, False),  # rounds to infinity in float32
        ("[1e39]", 1, False),
        ("[1" + "0" * 400 + "]", 1, False),  # integer beyond the double range
        ("[NaN]", 1, False),
        ("[Infinity]", 1, False),
        ("[true]", 1, False),
        ('["1"]', 1, False),
        ("[[1]]", 1, False),
        ("[null]", 1, False),
        ("[]", 0, False),
        ("1", 1, False),
        ("[1,2", 2, False),
        ("[1] x", 1, False),
        ("[01]", 1, False),
        ("[1.]", 1, False),
        ("[1,2]", 3, False),
        ("[1,2]", "2", False),
    ],
)
def test_decode_vector(text: str, dimension: object, ok: bool) -> None:
    assert (decode_vector(text, dimension, Normalization.NONE) is not None) is ok


def test_decode_vector_rejects_non_text() -> None:
    assert decode_vector(b"[1]", 1, Normalization.NONE) is None
    assert decode_vector(None, 1, Normalization.NONE) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('"l2"', Normalization.L2),
        ('"none"', Normalization.NONE),
        (' "l2"\n', Normalization.L2),
        ('"\\u006c2"', Normalization.L2),
        ("l2", None),
        ('"L2"', None),
        ('"l2', None),
        ('["l2"]', None),
        (2, None),
    ],
)
def test_decode_normalization(text: object, value: Normalization | None) -> None:
    assert vectors.decode_normalization(text) is value


def test_to_float32_rounds_via_double() -> None:
    vec = to_float32([0.1, 1e-46, -0.0, 16777217.0])
    assert vec is not None
    assert list(vec) == [f32(0.1), 0.0, -0.0, 16777216.0]
    assert math.copysign(1.0, vec[2]) == -1.0
    assert to_float32([]) is None
    assert to_float32([3.5e38]) is None


# --------------------------------------------------------------------------- numpy vectors


def test_embed_and_search_take_numpy_arrays_and_other_real_sequences(db: MemoryDb) -> None:
    """Library callers pass numpy arrays (float32, float64), tuples, lists of numpy scalars:
    each is stored as the same float32 vector a list gives; a 2-d array, a non-number, NaN or
    infinity and a wrong dimension get clear errors and store nothing."""
    import numpy as np

    me = db.scope(T, P)
    base = [0.6, 0.8, 0.0]
    notes = [remember(db, f"note {i}") for i in range(6)]
    forms: list[Any] = [
        base,
        np.asarray(base, dtype=np.float32),
        np.asarray(base, dtype=np.float64),
        tuple(base),
        list(np.asarray(base, dtype=np.float32)),
        np.asarray(base, dtype=np.float32)[::-1][::-1],  # a strided view
    ]
    for note, vector in zip(notes, forms, strict=True):
        h = current_hash(db, "source", note.source_id)
        me.embed(
            "source", note.source_id, vector, model_name=M, version=V, input_hash=h,
            normalization="l2", distance="cosine",
        )  # fmt: skip
    stored = {
        row[0] for row in db.conn.execute("SELECT vector FROM embeddings WHERE model = ?", (M,))
    }
    assert stored == {"[0.6,0.8,0.0]"}
    # MemoryDb.embed itself, and a numpy query vector for search
    h = current_hash(db, "source", notes[0].source_id)
    db.embed(
        EmbedRequest(
            T, P, target("source", notes[0].source_id),
            EmbeddingInput(np.asarray(base), M, V, h, Normalization.L2, Distance.COSINE),  # type: ignore[arg-type]
        )
    )  # fmt: skip
    query = QueryEmbedding(np.asarray([0.6, 0.8, 0.0], dtype=np.float32), M, V)  # type: ignore[arg-type]
    pack = me.search("note", query_embedding=query)
    assert pack == me.search("note", query_embedding=QueryEmbedding(base, M, V))
    # refused, nothing stored
    bad: list[tuple[Any, type[Exception], str]] = [
        (np.ones((1, 3)), RequestError, "field `embedding.vector`: expected a 1-d sequence"),
        (np.ones((3, 1)), RequestError, "got a 2-d array"),
        ([[0.6], [0.8], [0.0]], RequestError, "invalid type: a sequence, expected f32"),
        (["0.6", 0.8, 0.0], RequestError, "invalid type: str, expected f32"),
        ([True, 0.8, 0.0], RequestError, "invalid type: bool, expected f32"),
        (np.asarray([0.6, 0.8, 0.0], dtype=np.complex64), RequestError, "invalid type: complex"),
        (np.asarray([np.nan, 0.8, 0.0]), InvalidInput, "must contain finite values"),
        (np.asarray([np.inf, 0.8, 0.0]), InvalidInput, "must contain finite values"),
        (np.asarray([0.6, 0.8]), InvalidInput, "conflicts with the existing model/version lane"),
        ("0.6,0.8,0.0", RequestError, "field `embedding.vector`"),
    ]
    fresh = remember(db, "not embedded")
    h = current_hash(db, "source", fresh.source_id)
    for vector, error, message in bad:
        with pytest.raises(error, match=re.escape(message)):
            me.embed(
                "source", fresh.source_id, vector, model_name=M, version=V, input_hash=h,
                normalization="l2", distance="cosine",
            )  # fmt: skip
    assert db.conn.execute(
        "SELECT count(*) FROM embeddings WHERE target_id = ?", (fresh.source_id,)
    ).fetchone() == (0,)
    with pytest.raises(RequestError, match=r"query_embedding\.vector"):
        me.search("note", query_embedding=QueryEmbedding(np.ones((2, 3)), M, V))  # type: ignore[arg-type]
