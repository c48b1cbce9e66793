"""The numpy-free warm search (zkr.store.lanescan) against the numpy lane (zkr.store.dense) on
real stores: same targets, order and float32 scores, and the same trust in the side files."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import P, T, remember
from tests.test_embeddings import M, V, claim_memory, current_hash, edit, embed
from zkr import InvalidInput, MemoryDb, ZkrError
from zkr.model import DeleteRequest, QueryEmbedding, SearchRequest, Target, TargetKind
from zkr.store import changes, dense, lanescan, sidepaths, vectorfile
from zkr.store.db import read_tx

Answer = list[tuple[Target, float]] | None


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Side files for any lane size, and the numpy-free path in this (numpy) process."""
    monkeypatch.setattr(vectorfile, "MIN_ROWS", 1)
    monkeypatch.setattr(vectorfile, "SAVE_AFTER", 1)
    monkeypatch.setattr(lanescan, "FORCE", True)
    monkeypatch.delenv("ZKR_VECTOR_CACHE", raising=False)
    lanescan.MISSED.clear()


def numpy_answer(db_path: str, vector: Sequence[float], count: int, lexical: Any = ()) -> Answer:
    """What the numpy lane answers in a fresh connection (it also writes the side files the
    numpy-free path asked for)."""
    dense.clear_cache()
    with MemoryDb.open(db_path) as fresh, read_tx(fresh.conn):
        return dense.scored(fresh.conn, T, P, QueryEmbedding(list(vector), M, V), count, lexical)


def fast_answer(db_path: str, vector: Sequence[float], count: int, lexical: Any = ()) -> Answer:
    with MemoryDb.open(db_path) as fresh, read_tx(fresh.conn):
        query = QueryEmbedding(list(vector), M, V)
        return lanescan.scored(fresh.conn, T, P, query, count, lexical)


def unit(rng: random.Random, dimension: int) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dimension)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


def settle(db_path: str) -> None:
    """Rows written in the current second are not trusted by side files: age them."""
    edit(db_path, "UPDATE embeddings SET created_at = created_at - 100")


def build_lane(db: MemoryDb, db_path: str, seed: int, size: int, dimension: int = 8) -> list[Any]:
    """``size`` memories, every fifth with a claim whose vector is stored instead, some with
    the evidence's vector too, and duplicated vectors (ties in score)."""
    rng = random.Random(seed)
    made = []
    vectors: list[list[float]] = []
    for i in range(size):
        r = claim_memory(db, f"note {i}", at=10 + i) if i % 5 == 0 else remember(db, f"n {i}")
        # now and then a tie with another target
        tie = vectors and rng.random() < 0.1
        vector = rng.choice(vectors) if tie else unit(rng, dimension)
        vectors.append(vector)
        if i % 5 == 0:
            embed(db, "claim", r.claim_id, vector)
        else:
            embed(db, "source", r.source_id, vector)
        if i % 7 == 0:
            embed(db, "evidence", r.evidence_id, unit(rng, dimension))
        made.append(r)
    settle(db_path)
    return made


def warm(db_path: str, vector: Sequence[float], count: int) -> Answer:
    """Bring the side files up to date (the numpy-free path's too: it asks for them when it
    finds the lane state trusted); returns numpy's answer."""
    numpy_answer(db_path, vector, count)
    fast_answer(db_path, vector, count)
    return numpy_answer(db_path, vector, count)


def test_same_answer_as_numpy_on_a_seeded_lane(db: MemoryDb, db_path: str, fast: None) -> None:
    made = build_lane(db, db_path, seed=3, size=300)
    rng = random.Random(11)
    first = unit(rng, 8)
    warm(db_path, first, 100)
    for count in (1, 5, 37, 100, 400):
        for _ in range(8):
            query = [x * rng.uniform(0.5, 3) for x in unit(rng, 8)]  # not normalised
            want = numpy_answer(db_path, query, count)
            got = fast_answer(db_path, query, count)
            assert got is not None, "the numpy-free path did not answer"
            assert got == want
    # the other lane's targets fold raw evidence into its source as numpy does
    lexical = [Target(TargetKind.SOURCE, r.source_id) for r in made[::3]]
    want = numpy_answer(db_path, first, 100, lexical)
    assert fast_answer(db_path, first, 100, lexical) == want


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    vectors=st.lists(
        st.lists(st.integers(-3, 3), min_size=3, max_size=3).filter(any), min_size=3, max_size=40
    ),
    query=st.lists(st.integers(-4, 4), min_size=3, max_size=3).filter(any),
    count=st.integers(1, 50),
)
def test_same_answer_as_numpy_for_any_small_lane(
    tmp_path_factory: pytest.TempPathFactory,
    fast: None,
    vectors: list[list[int]],
    query: list[int],
    count: int,
) -> None:
    """Small integer components: many exact ties, scores at ±0.0, rows of one target."""
    db_path = str(tmp_path_factory.mktemp("lane") / "memory.db")
    with MemoryDb.open(db_path) as db:
        for i, raw in enumerate(vectors):
            norm = float(np.linalg.norm(np.asarray(raw, dtype=np.float64)))
            vector = [x / norm for x in raw]
            r = claim_memory(db, f"note {i}") if i % 4 == 0 else remember(db, f"n {i}")
            embed(db, "claim" if i % 4 == 0 else "source", r.claim_id or r.source_id, vector)
            if i % 3 == 0:
                embed(db, "evidence", r.evidence_id, vector[::-1])
    settle(db_path)
    q = [float(x) for x in query]
    want = warm(db_path, q, count)
    got = fast_answer(db_path, q, count)
    assert got is not None
    assert got == want


def test_every_write_that_touches_the_lane_is_seen(db: MemoryDb, db_path: str, fast: None) -> None:
    made = build_lane(db, db_path, seed=5, size=60)
    rng = random.Random(2)
    query = unit(rng, 8)
    warm(db_path, query, 10)
    assert fast_answer(db_path, query, 10) == numpy_answer(db_path, query, 10)

    def seen(served: bool) -> None:
        """The numpy-free answer (the lane's rows written since its state read from the
        file: ``served``), else none; numpy's then equal, and the side files rewritten."""
        got = fast_answer(db_path, query, 10)
        want = numpy_answer(db_path, query, 10)  # refreshes, rewrites the side files
        assert got == (want if served else None)
        assert warm(db_path, query, 10) == want
        assert fast_answer(db_path, query, 10) == want

    # a new vector (embed), another writer's hand edit of one vector: read from the file
    r = remember(db, "a new memory")
    embed(db, "source", r.source_id, query)
    settle(db_path)  # (a row of the current second is not saved in side files)
    seen(served=True)
    edit(
        db_path,
        "UPDATE embeddings SET vector = '[1,0,0,0,0,0,0,0]' WHERE target_id = ?",
        (made[1].source_id,),
    )
    seen(served=True)
    # a deleted source, a row of the lane moved out of it by hand, a row made stale by hand
    db.delete(DeleteRequest(T, P, made[2].source_id, 20))
    seen(served=False)
    edit(db_path, "UPDATE embeddings SET model = 'other' WHERE target_id = ?", (r.source_id,))
    seen(served=False)
    edit(
        db_path,
        "UPDATE embeddings SET target_revision = 99 WHERE target_id = ?",
        (made[3].source_id,),
    )
    seen(served=False)
    # a write unrelated to the lane leaves it trusted
    remember(db, "unrelated")
    assert fast_answer(db_path, query, 10) == numpy_answer(db_path, query, 10)


def test_side_files_of_another_state_are_not_used(db: MemoryDb, db_path: str, fast: None) -> None:
    build_lane(db, db_path, seed=7, size=40)
    query = unit(random.Random(4), 8)
    warm(db_path, query, 10)
    assert fast_answer(db_path, query, 10) is not None
    path = next(Path(db_path + ".zkr-vectors").glob("*.bin"))
    index, rows = sidepaths.prefilter_path(path), sidepaths.rows_path(path)
    old_index, old_rows = index.read_bytes(), rows.read_bytes()
    r = remember(db, "another")
    embed(db, "source", r.source_id, query)
    settle(db_path)
    # the rows written since read from the file (zkr.store.lanedelta), then a new lane state
    assert fast_answer(db_path, query, 10) == numpy_answer(db_path, query, 10)
    # the index of the old state: not used, the search goes to numpy
    index.write_bytes(old_index)
    assert fast_answer(db_path, query, 10) is None
    numpy_answer(db_path, query, 10)
    assert fast_answer(db_path, query, 10) is not None
    # a row copy of another vector file
    header = json.loads(old_rows[16 : 16 + int.from_bytes(old_rows[8:16], "little")])
    header["token"] = "0" * 32
    encoded = json.dumps(header).encode()
    rows.write_bytes(old_rows[:8] + len(encoded).to_bytes(8, "little") + encoded)
    assert fast_answer(db_path, query, 10) is None


def test_errors_and_refusals_are_numpys(db: MemoryDb, db_path: str, fast: None) -> None:
    build_lane(db, db_path, seed=9, size=30)
    query = unit(random.Random(5), 8)
    warm(db_path, query, 10)
    for bad, message in (
        ([0.0] * 8, "cosine embeddings must have non-zero magnitude"),
        ([1.0] * 5, "query embedding dimension 5 does not match stored dimension 8"),
    ):
        for answer in (numpy_answer, fast_answer):
            with pytest.raises(InvalidInput, match=message):
                answer(db_path, bad, 10)


def test_lanes_it_does_not_serve(db: MemoryDb, db_path: str, fast: None) -> None:
    """Unnormalised cosine lanes (norms far from 1), with a zero vector among them (numpy
    raises), and dot lanes: numpy answers."""
    rng = random.Random(8)
    query = unit(rng, 4)
    notes = [remember(db, f"n {i}") for i in range(12)]
    for i, n in enumerate(notes):
        embed(db, "source", n.source_id, [x * (1 + i) for x in unit(rng, 4)], norm="none")
    settle(db_path)
    want = warm(db_path, query, 5)
    assert want and fast_answer(db_path, query, 5) is None
    embed(db, "source", notes[0].source_id, [0.0] * 4, norm="none")
    settle(db_path)
    with pytest.raises(InvalidInput, match="non-zero magnitude"):
        warm(db_path, query, 5)
    assert fast_answer(db_path, query, 5) is None
    for n in notes:
        embed(db, "source", n.source_id, unit(rng, 4), model="d", dist="dot")
    settle(db_path)
    with MemoryDb.open(db_path) as fresh, read_tx(fresh.conn):
        dot = QueryEmbedding(query, "d", V)
        dense.scored(fresh.conn, T, P, dot, 5)
        assert lanescan.scored(fresh.conn, T, P, dot, 5) is None


def cli_search(db_path: str, query: list[float], text: str, limit: int) -> tuple[Any, set[str]]:
    """A hybrid ``search`` through a fresh CLI process: its pack, and which of numpy and the
    local embedder's module (onnxruntime with it) and hashlib (OpenSSL) that process imported,
    and the sources it compiled (collections.namedtuple's constructors aside)."""
    request = json.dumps(
        {"tenant_id": T, "person_id": P, "query": text, "limit": limit}
        | {"query_embedding": {"vector": query, "model": M, "version": V}}
    )
    child = (
        "import json, sys\ncompiled = []\n"
        "sys.addaudithook(lambda e, a: compiled.append(str(a[0])) if e == 'compile' else None)\n"
        "from zkr.cli import main\ncode = main(sys.argv[1:])\n"
        "sys.stderr.write(json.dumps([m for m in ('numpy', 'zkr.embedding.local', 'hashlib')"
        " if m in sys.modules] + [s for s in compiled if 'lambda _cls' not in s]))\n"
        "sys.exit(code)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(lanescan.__file__).parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", child, "--db", db_path, "search"],
        input=request.encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout), set(json.loads(out.stderr))


def test_a_fresh_cli_process_searches_without_numpy(db: MemoryDb, db_path: str, fast: None) -> None:
    build_lane(db, db_path, seed=13, size=50)
    query = unit(random.Random(6), 8)
    warm(db_path, query, 100)
    pack_json, loaded = cli_search(db_path, query, "note", 10)
    assert "numpy" not in loaded
    # the lane's digests come from the interpreter's own SHA-256; no string annotation of a
    # NamedTuple is compiled (the first compile() of a process costs ~2 ms: docs/DEVELOPING.md)
    assert loaded == set(), loaded
    # the same pack as the numpy lane gives in this process
    lanescan.FORCE = False
    shutil.rmtree(db_path + ".zkr-vectors")
    pack = db.search(SearchRequest(T, P, "note", 10, QueryEmbedding(query, M, V)))
    assert pack_json == pack.to_json()


def test_a_primed_lane_is_searched_without_numpy_on_the_first_cli_call(
    db_path: str, fast: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle through which ``embed`` stored PRIME_AFTER rows leaves, when it closes, what the
    numpy-free search reads (``.rows``, ``.fast``) next to the side files it refreshes: the very
    first CLI search of the lane answers without importing numpy or writing them."""
    from zkr.store import priming

    monkeypatch.setattr(priming, "PRIME_AFTER", 4)
    rng = random.Random(21)
    with MemoryDb.open(db_path) as db:
        notes = [remember(db, f"note {i}") for i in range(6)]
        for n in notes:
            embed(db, "source", n.source_id, unit(rng, 8))
    side = Path(db_path + ".zkr-vectors")
    assert list(side.glob("*.rows")) and list(side.glob("*.fast"))
    query = unit(rng, 8)
    pack_json, loaded = cli_search(db_path, query, "zzz", 3)
    assert "numpy" not in loaded
    assert len(pack_json["items"]) == 3


def test_a_side_path_that_cannot_hold_files_leaves_searches_to_the_lane(
    db: MemoryDb, db_path: str, fast: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the side files cannot be written (here ``PATH.zkr-vectors`` is a regular file, so
    removing the overlay before a rewrite fails with ENOTDIR, as it fails with EACCES in a
    read-only directory), the search answers from the lane as ``ZKR_VECTOR_CACHE=0`` does
    instead of failing."""
    build_lane(db, db_path, seed=17, size=40)
    Path(db_path + ".zkr-vectors").write_text("not a directory")
    query = unit(random.Random(2), 8)
    got = numpy_answer(db_path, query, 10)
    monkeypatch.setenv("ZKR_VECTOR_CACHE", "0")
    assert got and got == numpy_answer(db_path, query, 10)
    assert fast_answer(db_path, query, 10) is None


def test_a_hand_edit_that_renames_an_id_is_seen(
    db: MemoryDb, db_path: str, fast: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change log records an update's old values for every table: a source whose id is
    renamed by hand leaves the lane (its rows now name no source), as without side files; and
    a log trigger that is not this zkr's (an older one that logged only new ids) is not trusted
    (the log is recreated under a new generation)."""

    made = build_lane(db, db_path, seed=23, size=30)
    query = unit(random.Random(4), 8)
    top = warm(db_path, query, 30)
    assert top is not None
    renamed = next(t.id for t, _ in top if t.kind is TargetKind.SOURCE)
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("UPDATE sources SET id = 'renamed' WHERE id = ?", (renamed,))
    conn.commit()
    conn.close()
    got = numpy_answer(db_path, query, 30)
    assert got is not None and renamed not in {t.id for t, _ in got}
    monkeypatch.setenv("ZKR_VECTOR_CACHE", "0")
    assert got == numpy_answer(db_path, query, 30)
    # an older zkr's trigger: same name, fewer values logged
    first = changes.mark(db.conn)
    assert first is not None and made
    edit(db_path, "DROP TRIGGER zkr_changes_sources_update")
    edit(
        db_path,
        "CREATE TRIGGER zkr_changes_sources_update AFTER UPDATE ON sources BEGIN"
        " INSERT INTO zkr_changes (item) VALUES (NEW.id); END",
    )
    assert changes.mark(db.conn) is None
    assert changes.ensure(db.conn)
    second = changes.mark(db.conn)
    assert second is not None and second.generation != first.generation


def test_a_query_embedding_in_the_local_models_lane_loads_no_model_runtime(
    db: MemoryDb, db_path: str, fast: None
) -> None:
    """A CLI search that brings its own ``query_embedding`` for the lane ``embed-pending``
    filled (the one ``zkr_embedder`` records) neither imports the local embedder's module
    (onnxruntime and numpy, 0.2 s) nor leaves the numpy-free path: no model is loaded in that
    process, so there is no calibration to look up."""
    from zkr.store import embedconfig

    build_lane(db, db_path, seed=29, size=40)
    with db.conn:
        embedconfig.record(db.conn, embedconfig.EmbedderConfig(M, V, 8, "test"))
    query = unit(random.Random(9), 8)
    warm(db_path, query, 10)
    pack_json, loaded = cli_search(db_path, query, "note", 5)
    assert loaded == set()
    assert len(pack_json["items"]) == 5


def test_a_restored_backup_written_again_trusts_no_side_file_of_the_lost_writes(
    db_path: str, fast: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backup restored over the file (its log behind the side files) and then written by
    other writes until its log reaches the side files' position: the side files describe
    writes the file no longer holds, and neither search trusts them (each log row's nonce)."""
    rng = random.Random(31)
    query = unit(rng, 8)
    with MemoryDb.open(db_path) as db:
        made = build_lane(db, db_path, seed=31, size=40)
    warm(db_path, query, 10)
    backup = db_path + ".backup"
    with sqlite3.connect(db_path) as src, sqlite3.connect(backup) as dst:
        src.backup(dst)
    with MemoryDb.open(db_path) as db:  # the writes the restore will lose
        for r in made[1:4]:
            if r.claim_id is None:
                embed(db, "source", r.source_id, query)
    settle(db_path)
    warm(db_path, query, 10)
    with MemoryDb.open(db_path) as db:
        lost = changes.mark(db.conn)
    with sqlite3.connect(backup) as src, sqlite3.connect(db_path) as dst:
        src.backup(dst)  # sqlite3's .restore
    with MemoryDb.open(db_path) as db:  # other writes, as many log rows as the lost ones
        while (now := changes.mark(db.conn)) is not None and lost is not None:
            if now.seq >= lost.seq:
                break
            remember(db, f"after the restore {now.seq}")
    got = numpy_answer(db_path, query, 10)
    fast_got = fast_answer(db_path, query, 10)
    monkeypatch.setenv("ZKR_VECTOR_CACHE", "0")
    want = numpy_answer(db_path, query, 10)
    assert got == want
    assert fast_got in (None, want)


def reference_answer(
    db_path: str, vector: Sequence[float], count: int, lexical: Any = ()
) -> Answer:
    """The numpy lane without any side file (``ZKR_VECTOR_CACHE=0``): every row read from the
    file, and no side file rewritten."""
    os.environ["ZKR_VECTOR_CACHE"] = "0"
    try:
        return numpy_answer(db_path, vector, count, lexical)
    finally:
        del os.environ["ZKR_VECTOR_CACHE"]


def test_rows_written_since_the_lane_state_are_read_from_the_file(
    db: MemoryDb, db_path: str, fast: None
) -> None:
    """One-row embeds after the side files were written (each a CLI call: nobody primes them)
    are read from the file by the numpy-free search, which answers as numpy does without
    rewriting a side file: new sources, evidence standing for itself or for its claim, claims,
    a rewritten vector of a surviving row; a second row of one capture (§14 #12 folding may
    change), a row that stops surviving, a hand edit touching the lane's targets go to numpy."""
    made = build_lane(db, db_path, seed=41, size=80)
    rng = random.Random(42)
    query = unit(rng, 8)
    warm(db_path, query, 20)
    side = Path(db_path + ".zkr-vectors")
    files = {f.name: f.stat().st_mtime_ns for f in side.iterdir()}

    def near() -> list[float]:
        v = [q + rng.gauss(0, 0.05) for q in query]
        norm = sum(x * x for x in v) ** 0.5
        return [x / norm for x in v]

    def same(served: bool = True) -> None:
        for count in (1, 5, 20):
            for lexical in ((), [Target(TargetKind.SOURCE, r.source_id) for r in made[::4]]):
                want = reference_answer(db_path, query, count, lexical)
                got = fast_answer(db_path, query, count, lexical)
                assert got == (want if served else None), (count, lexical)

    a = remember(db, "a new turn")
    embed(db, "source", a.source_id, near())
    same()
    b = remember(db, "another new turn")
    embed(db, "evidence", b.evidence_id, near())  # stands for itself
    c = claim_memory(db, "Sam moved to Oslo", at=500)
    embed(db, "evidence", c.evidence_id, near())  # stands for its claim
    d = claim_memory(db, "Sam likes tea", at=501)
    embed(db, "claim", d.claim_id, near())
    same()
    # a surviving row rewritten (same target, same mapping), a claim row again
    embed(db, "source", made[1].source_id, near())
    embed(db, "claim", made[0].claim_id, near())
    embed(db, "source", a.source_id, unit(rng, 8))
    same()
    assert {f.name: f.stat().st_mtime_ns for f in side.iterdir()} == files
    # a row written by another writer, its vector text as the reference writes it
    e = remember(db, "written by hand")
    vector = json.dumps(near())
    cells = db.conn.execute(
        "SELECT normalization, distance FROM embeddings WHERE target_id = ?", (a.source_id,)
    ).fetchone()
    edit(
        db_path,
        "INSERT INTO embeddings (tenant_id, person_id, target_kind, target_id, model, version,"
        " dimension, input_hash, normalization, distance, vector, target_revision, created_at)"
        " VALUES (?, ?, 'source', ?, ?, ?, 8, ?, ?, ?, ?, 1, unixepoch())",
        (T, P, e.source_id, M, V, current_hash(db, "source", e.source_id), *cells, vector),
    )
    same()
    assert e.source_id in {t.id for t, _ in reference_answer(db_path, query, 200) or []}
    # a second row of a capture written since: numpy
    embed(db, "evidence", a.evidence_id, near())
    same(served=False)
    assert warm(db_path, query, 20) == reference_answer(db_path, query, 20)
    same()
    # a capture of the state gets a second row: numpy
    embed(db, "evidence", made[6].evidence_id, near())
    same(served=False)
    warm(db_path, query, 20)
    # a written row that stops surviving (its source deleted after its embed)
    f = remember(db, "soon deleted")
    embed(db, "source", f.source_id, near())
    same()
    db.delete(DeleteRequest(T, P, f.source_id, 20))
    same()  # a row new since the state that does not survive: still read from the file
    embed(db, "source", made[11].source_id, near())
    db.delete(DeleteRequest(T, P, made[11].source_id, 20))
    same(served=False)


def cli(db_path: str, command: str, request: dict[str, Any]) -> Any:
    """One ``zkr`` CLI call in a fresh process (no numpy unless the call imports it)."""
    env = {**os.environ, "PYTHONPATH": str(Path(lanescan.__file__).parents[2])}
    out = subprocess.run(
        [sys.executable, "-m", "zkr", "--db", db_path, command],
        input=json.dumps(request).encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout)


def test_cli_searches_after_cli_embeds_stay_without_numpy(
    db: MemoryDb, db_path: str, fast: None
) -> None:
    """An agent that remembers and embeds one turn at a time through the CLI, searching in
    between: every search a fresh process without numpy (side files untouched), with the pack
    the lane gives without side files; another process's write to a target of the lane sends
    the next one to numpy (never a stale answer)."""
    made = build_lane(db, db_path, seed=43, size=60)
    rng = random.Random(44)
    query = unit(rng, 8)
    db.search(SearchRequest(T, P, "turn", 8))  # the lexical index built (a schema change)
    warm(db_path, query, 20)
    side = Path(db_path + ".zkr-vectors")
    files = {f.name: f.stat().st_mtime_ns for f in side.iterdir()}

    def reference_pack() -> Any:
        os.environ["ZKR_VECTOR_CACHE"] = "0"
        lanescan.FORCE = False
        try:
            dense.clear_cache()
            with MemoryDb.open(db_path) as fresh:
                pack = fresh.search(SearchRequest(T, P, "turn", 8, QueryEmbedding(query, M, V)))
            return pack.to_json()
        finally:
            del os.environ["ZKR_VECTOR_CACHE"]
            lanescan.FORCE = True

    for turn in range(4):
        text = f"turn {turn} of the agent"
        written = cli(
            db_path,
            "remember",
            {"tenant_id": T, "person_id": P, "kind": "conversation", "text": text}
            | {"captured_at": 50 + turn, "recorded_at": 50 + turn},
        )
        vector = [q + rng.gauss(0, 0.1) for q in query]
        vector = [x / sum(y * y for y in vector) ** 0.5 for x in vector]
        cli(
            db_path,
            "embed",
            {
                "tenant_id": T,
                "person_id": P,
                "target": {"kind": "source", "id": written["source_id"]},
                "embedding": {
                    "vector": vector,
                    "model": M,
                    "version": V,
                    "input_hash": current_hash(db, "source", written["source_id"]),
                    "normalization": "l2",
                    "distance": "cosine",
                },
            },
        )
        pack, loaded = cli_search(db_path, query, "turn", 8)
        assert "numpy" not in loaded
        assert pack == reference_pack()
    assert {f.name: f.stat().st_mtime_ns for f in side.iterdir()} == files
    # another process changes the text of a turn written since: its row is read, no longer
    # current; then that of a memory the lane state holds: numpy, never a stale answer
    for source_id, state in ((written["source_id"], False), (made[1].source_id, True)):
        edit(db_path, "UPDATE sources SET content = 'changed' WHERE id = ?", (source_id,))
        pack, loaded = cli_search(db_path, query, "turn", 8)
        assert ("numpy" in loaded) == state
        assert pack == reference_pack()


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from("sekrdcx"), st.integers(0, 10**6), st.integers(-3, 3)),
        min_size=1,
        max_size=12,
    ),
    count=st.integers(1, 30),
)
def test_rows_written_since_any_writes_answer_as_numpy_or_not_at_all(
    tmp_path_factory: pytest.TempPathFactory,
    fast: None,
    ops: list[tuple[str, int, int]],
    count: int,
) -> None:
    """Any mix of writes after the side files: new memories embedded as source, evidence or
    claim, re-embeds, deletes, hand edits of a vector: the numpy-free search with the rows
    written since either answers exactly as numpy without side files, or not at all."""
    db_path = str(tmp_path_factory.mktemp("delta") / "memory.db")
    rng = random.Random(len(ops) * 7 + count)
    query = unit(rng, 8)
    gone: set[str] = set()
    with MemoryDb.open(db_path) as db:
        made = build_lane(db, db_path, seed=count, size=30)
        warm(db_path, query, count)
        for op, pick, tilt in ops:
            vector = unit(rng, 8) if tilt else query
            old = made[pick % len(made)]
            if op in "rd" and old.source_id in gone:
                continue
            with contextlib.suppress(ZkrError):  # (a deleted memory: refused, as it should)
                if op == "s":
                    made.append(r := remember(db, f"new {pick}"))
                    embed(db, "source", r.source_id, vector)
                elif op == "e":
                    made.append(
                        r := claim_memory(db, f"claim {pick}", at=100)
                        if tilt > 0
                        else remember(db, f"new evidence {pick}")
                    )
                    embed(db, "evidence", r.evidence_id, vector)
                elif op == "k":
                    made.append(r := claim_memory(db, f"claimed {pick}", at=100))
                    embed(db, "claim", r.claim_id, vector)
                elif op == "r":  # re-embed the row a memory has
                    if old.claim_id:
                        embed(db, "claim", old.claim_id, vector)
                    else:
                        embed(db, "source", old.source_id, vector)
                elif op == "d":
                    gone.add(old.source_id)
                    db.delete(DeleteRequest(T, P, old.source_id, 200))
                elif op == "c":  # a hand edit of one stored vector
                    edit(
                        db_path,
                        "UPDATE embeddings SET vector = ? WHERE target_id IN (?, ?)",
                        (json.dumps(vector), old.source_id, old.claim_id or ""),
                    )
                else:  # a memory that nobody embeds
                    remember(db, f"plain {pick}")
            got = fast_answer(db_path, query, count)
            want = reference_answer(db_path, query, count)
            assert got is None or got == want, op
