"""The PostgreSQL backend's own behaviour (zkr.store.pg), against a real server (``pg_dsn``).

Every command's contract is checked by the shared conformance suite run against PostgreSQL;
here: what a DSN opens, the layout's keys (distribution by person), the trigger rules' texts,
per-scope feed order under concurrent writers, the lexical ranking matching SQLite's, and the
SQLite path never importing psycopg.
"""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import sam_acme
from zkr import MemoryDb
from zkr.cli import dispatch, run
from zkr.errors import StorageError
from zkr.store.pg.schema import ID_INDEXED, LAYOUT, UNSCOPED_TABLES
from zkr.store.terms import MAX_DOCUMENT_TERMS

CORPUS = [
    "Sam works at Acme as a welder",
    "Alice moved to Berlin last spring",
    "The launch code is marigold",
    "Sam likes hiking in the Alps with Alice",
    "Berlin has cold winters and long summer evenings",
    "Acme hired Bob; Bob and Sam share a desk at Acme",
    "Marigold flowers grow in the garden behind the house",
    "東京で会議があります",
    "Straße in Berlin",
    "Alice: Sam painted the fence",
    "Sam: I painted the garden fence green last week",
]
QUERIES = [
    "Acme",
    "Sam Acme",
    "Berlin winters",
    "marigold",
    "alice alps",
    "東京",
    "strasse",
    "what did Sam paint",
]


def call(db: str, command: str, request: dict[str, Any] | None) -> tuple[int, Any]:
    out, err = io.StringIO(), io.StringIO()
    stdin = io.BytesIO(b"" if request is None else json.dumps(request).encode())
    code = run(["--db", db, command], stdin, out, err)
    text = out.getvalue() if code == 0 else err.getvalue()
    return code, json.loads(text)


def in_schema(dsn: str, schema: str) -> str:
    return f"{dsn}?options=-csearch_path%3D{schema}"


def remember(db: str, text: str, at: int, person: str = "p", **extra: Any) -> dict[str, Any]:
    request = {
        "tenant_id": "t",
        "person_id": person,
        "kind": "conversation",
        "text": text,
        "captured_at": at,
        "recorded_at": at,
        **extra,
    }
    code, out = call(db, "remember", request)
    assert code == 0, out
    result: dict[str, Any] = out
    return result


def test_a_dsn_opens_the_store_of_its_first_search_path_schema(pg_dsn: str) -> None:
    alice, bob = in_schema(pg_dsn, "alice"), in_schema(pg_dsn, "bob")
    remember(alice, "Sam works at Acme", 10)
    assert call(alice, "search", {"tenant_id": "t", "person_id": "p", "query": "Acme"})[1]["items"]
    # another schema is another store, created on first use like a new SQLite file
    code, pack = call(bob, "search", {"tenant_id": "t", "person_id": "p", "query": "Acme"})
    assert code == 0 and pack["items"] == [] and pack["gaps"]
    import psycopg

    with psycopg.connect(pg_dsn) as raw:
        schemas = {r[0] for r in raw.execute("SELECT nspname FROM pg_namespace").fetchall()}
    assert {"alice", "bob"} <= schemas


def test_every_key_and_index_leads_with_the_scope(pg_dsn: str) -> None:
    MemoryDb.open(pg_dsn).close()
    import psycopg

    with psycopg.connect(pg_dsn) as raw:
        rows = raw.execute(
            """SELECT t.relname, i.relname, ix.indisunique,
                      (SELECT array_agg(a.attname ORDER BY k.n) FROM unnest(ix.indkey)
                       WITH ORDINALITY AS k(attnum, n)
                       JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum)
               FROM pg_index ix JOIN pg_class t ON t.oid = ix.indrelid
               JOIN pg_class i ON i.oid = ix.indexrelid
               JOIN pg_namespace n ON n.oid = t.relnamespace
               WHERE n.nspname = 'public'"""
        ).fetchall()
    tables = {table for table, *_ in rows}
    assert {"sources", "evidence", "claims", "memory_commits", "memory_export_events"} <= tables
    for table, index, _unique, columns in rows:
        if table in UNSCOPED_TABLES:
            continue  # one row per store: zkr's local-model record, the layout version
        if index == "zkr_fts_terms":
            continue  # GIN over scope-tagged lexemes (zkr.store.pg.search)
        if index in {f"zkr_{name}_id" for name in ID_INDEXED}:
            assert not _unique and columns == ["id"]  # apply's cross-person id check
            continue
        assert list(columns[:2]) == ["tenant_id", "person_id"], (table, index, columns)


def test_trigger_rules_refuse_with_the_sqlite_messages(pg_dsn: str) -> None:
    ids = remember(
        pg_dsn,
        "Sam works at Acme",
        10,
        claim={
            "subject": "Sam",
            "predicate": "employer",
            "value": "Acme",
            "kind": "fact",
            "valid_from": 10,
        },
    )
    db = MemoryDb.open(pg_dsn)
    conn = db.conn
    with pytest.raises(Exception, match=r"^illegal memory state combination$"):
        conn.execute(
            "UPDATE claims SET tier = 'archive', status = 'superseded' WHERE id = ?",
            (ids["claim_id"],),
        )
    with pytest.raises(Exception, match=r"^evidence source scope mismatch$"):
        conn.execute(
            "INSERT INTO evidence (id, tenant_id, person_id, source_id, source_revision, quote,"
            " recorded_at) VALUES ('e1', 't', 'other', ?, 1, 'q', 10)",
            (ids["source_id"],),
        )
    with pytest.raises(Exception, match=r"^invalid claim half-open time interval$"):
        conn.execute("UPDATE claims SET valid_until = 5 WHERE id = ?", (ids["claim_id"],))
    db.close()


def test_a_write_that_fails_leaves_nothing_and_reports_the_rule(pg_dsn: str) -> None:
    db = MemoryDb.open(pg_dsn)
    code, out = call(
        pg_dsn,
        "remember",
        {
            **sam_acme("t", "p"),
            "text": "x",
            "claim": {**sam_acme()["claim"], "tier": "archive", "processing_state": "pending"},
        },
    )
    assert code == 1 and "illegal memory state combination" in out["error"]
    count = db.conn.execute("SELECT count(*) FROM sources").fetchone()
    assert count == (0,)
    db.close()


def test_concurrent_writers_keep_each_scopes_feed_in_commit_order(pg_dsn: str) -> None:
    errors: list[BaseException] = []

    def writer(person: str) -> None:
        try:
            with MemoryDb.open(pg_dsn) as db:
                for i in range(15):
                    remember_in(db, person, i)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def remember_in(db: MemoryDb, person: str, i: int) -> None:
        from zkr import model

        db.remember(
            model.RememberRequest(
                tenant_id="t",
                person_id=person,
                kind=model.SourceKind.CONVERSATION,
                text=f"{person} note {i}",
                captured_at=100 + i,
                recorded_at=100 + i,
            )
        )

    threads = [threading.Thread(target=writer, args=(p,)) for p in ("a", "b", "c", "a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for person, writes in (("a", 30), ("b", 30), ("c", 15)):
        code, page = call(
            pg_dsn,
            "export",
            {"export_format": 1, "tenant_id": "t", "person_id": person, "limit": 1000},
        )
        assert code == 0
        sequences = [c["sequence"] for c in page["commits"]]
        assert len(sequences) == writes and sequences == sorted(set(sequences))
    # sequences name one commit in the whole store, as SQLite's AUTOINCREMENT does
    with MemoryDb.open(pg_dsn) as db:
        total, distinct = db.conn.execute(
            "SELECT count(*), count(DISTINCT sequence) FROM memory_commits"
        ).fetchone()
    assert total == distinct == 75


def test_lexical_ranking_matches_sqlite_for_one_scope(pg_dsn: str, tmp_path: Path) -> None:
    lite = str(tmp_path / "m.db")
    for at, text in enumerate(CORPUS, start=10):
        for db in (lite, pg_dsn):
            remember(db, text, at)
    for query in QUERIES:
        request = {"tenant_id": "t", "person_id": "p", "query": query, "limit": 10}
        got = {}
        for db in (lite, pg_dsn):
            code, pack = call(db, "search", request)
            assert code == 0, pack
            got[db] = [(i["excerpt"], i["relevance_basis_points"]) for i in pack["items"]]
        assert got[pg_dsn] == got[lite], query
        assert got[lite] or query == "strasse", query


def test_deleted_and_erased_text_leaves_the_index(pg_dsn: str) -> None:
    ids = remember(pg_dsn, "The launch code is marigold", 10)
    remember(pg_dsn, "Marigold flowers", 11)
    search = {"tenant_id": "t", "person_id": "p", "query": "marigold"}
    assert len(call(pg_dsn, "search", search)[1]["items"]) == 2
    code, out = call(
        pg_dsn,
        "delete",
        {"tenant_id": "t", "person_id": "p", "source_id": ids["source_id"], "deleted_at": 20},
    )
    assert code == 0, out
    items = call(pg_dsn, "search", search)[1]["items"]
    assert [i["excerpt"] for i in items] == ["Marigold flowers"]
    with MemoryDb.open(pg_dsn) as db:
        (docs,) = db.conn.execute("SELECT count(*) FROM zkr_fts").fetchone()
    assert docs == 1


def embed_all(
    db: str,
    scope: dict[str, str],
    lane: dict[str, str],
    vector: Callable[[str], list[float]],
) -> None:
    """Embed every pending projection of ``lane`` (up to 100) through the ``embed`` command,
    each input's vector ``vector(text)`` (no normalisation, cosine)."""
    code, issues = call(db, "projections", {**scope, **lane, "limit": 100})
    assert code == 0, issues
    for issue in issues:
        embedding = {
            "vector": vector(issue["input"]["text"]),
            "input_hash": issue["input"]["input_hash"],
            "normalization": "none",
            "distance": "cosine",
            **lane,
        }
        request = {**scope, "target": issue["input"]["target"], "embedding": embedding}
        code, out = call(db, "embed", request)
        assert code == 0, out


def test_a_kept_lane_sees_vectors_another_session_rewrites(pg_dsn: str) -> None:
    # the dense lane keeps decoded vectors across searches (zkr.store.dense.cache.state):
    # a row rewritten elsewhere with the same small columns must still be read again
    scope = {"tenant_id": "t", "person_id": "p"}
    lane = {"model": "m", "version": "1"}
    remember(pg_dsn, "the red door", 10)
    remember(pg_dsn, "the blue door", 11)
    vectors = {"the red door": [1.0, 0.0], "the blue door": [0.0, 1.0]}
    embed_all(pg_dsn, scope, lane, vectors.__getitem__)
    ask = {**scope, "query": "window", "query_embedding": {"vector": [1.0, 0.0], **lane}}
    with MemoryDb.open(pg_dsn) as db:
        (copies,) = db.conn.execute("SELECT count(*) FROM zkr_vectors").fetchone()
        assert copies == 4  # embed's float32 copies (2 sources, 2 evidence), not JSON text
        db.conn.execute("UPDATE embeddings SET created_at = created_at - 10")  # settled rows
        (copies,) = db.conn.execute("SELECT count(*) FROM zkr_vectors").fetchone()
        assert copies == 0  # dropped by the write: the rows are no longer as zkr wrote them
        first = dispatch(db, "search", ask)["items"]
        assert first[0]["excerpt"] == "the red door"
        with MemoryDb.open(pg_dsn) as other:  # same meta, swapped vectors, another session
            other.conn.execute(
                "UPDATE embeddings SET vector = CASE WHEN vector = '[1.0,0.0]'"
                " THEN '[0.0,1.0]' ELSE '[1.0,0.0]' END"
            )
        again = dispatch(db, "search", ask)["items"]
    assert again[0]["excerpt"] == "the blue door"


def _dense_session(db: str) -> list[list[tuple[str, str]]]:
    """A warm session's dense rankings of one lane (claims, evidence, sources), before
    and after other sessions write: a ``delete``, a hand edit of a claim, a re-embedded row."""
    import random

    scope = {"tenant_id": "t", "person_id": "p"}
    lane = {"model": "m", "version": "1"}
    sources = {}
    for i, text in enumerate(CORPUS):
        claim = {
            "subject": "Sam",
            "predicate": f"p{i}",
            "value": text[:12],
            "kind": "fact",
            "valid_from": 10 + i,
        }
        done = remember(db, text, 10 + i, **({"claim": claim} if i % 2 == 0 else {}))
        sources[text] = done["source_id"]

    def vector(text: str) -> list[float]:
        rng = random.Random(text)  # ids differ between the stores: no ties ordered by id
        return [rng.uniform(-1.0, 1.0) for _ in range(4)]

    embed_all(db, scope, lane, vector)
    ask = {
        **scope,
        "query": "nothing matches this",
        "limit": 40,
        "query_embedding": {"vector": [0.3, -0.2, 0.9, 0.1], **lane},
    }

    def ranked(session: MemoryDb) -> list[tuple[str, str]]:
        items = dispatch(session, "search", ask)["items"]
        return [(item["memory"]["kind"], item["excerpt"]) for item in items]

    rounds = []
    with MemoryDb.open(db) as warm:
        rounds.append(ranked(warm))
        gone = sources["Berlin has cold winters and long summer evenings"]
        code, out = call(db, "delete", {**scope, "source_id": gone, "deleted_at": 50})
        assert code == 0, out
        rounds.append(ranked(warm))
        with MemoryDb.open(db) as other:  # hand edits from another session
            other.conn.execute("BEGIN IMMEDIATE")
            other.conn.execute("UPDATE claims SET tier = 'archive' WHERE predicate = 'p2'")
            other.conn.execute(
                "UPDATE embeddings SET vector = '[0.3,-0.2,0.9,0.1]' WHERE target_kind = 'source'"
                " AND target_id = (SELECT id FROM sources WHERE content LIKE 'Sam likes%')"
            )
            other.conn.execute("COMMIT")
        rounds.append(ranked(warm))
    return rounds


def test_the_dense_lane_ranks_as_on_sqlite_and_sees_other_sessions_writes(
    pg_dsn: str, tmp_path: Path
) -> None:
    lite = _dense_session(str(tmp_path / "m.db"))
    pg = _dense_session(pg_dsn)
    assert pg == lite
    first, deleted, edited = pg
    assert {kind for kind, _ in first} == {"claim", "source"}  # all through the dense lane
    assert deleted != first and edited != deleted
    assert not any("Berlin has cold" in excerpt for _, excerpt in deleted)
    assert edited[0][1].startswith("Sam likes hiking")


def test_a_newer_layout_is_refused(pg_dsn: str) -> None:
    MemoryDb.open(pg_dsn).close()
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        raw.execute("UPDATE zkr_pg_meta SET value = '99' WHERE key = 'layout'")
    with pytest.raises(Exception, match="layout 99 is newer"):
        MemoryDb.open(pg_dsn)


def test_a_layout_1_store_gets_the_lane_mark(pg_dsn: str) -> None:
    remember(pg_dsn, "the red door", 10)
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as raw:  # as layout 1 left it
        raw.execute("DROP TABLE zkr_lane_marks")
        for table in ("embeddings", "sources", "evidence", "claims", "claim_evidence"):
            raw.execute(f"DROP TRIGGER zkr_lane_mark ON {table}")
        raw.execute("UPDATE zkr_pg_meta SET value = '1' WHERE key = 'layout'")
    remember(pg_dsn, "the blue door", 11)
    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        layout = raw.execute("SELECT value FROM zkr_pg_meta WHERE key = 'layout'").fetchone()
        marks = raw.execute("SELECT person_id FROM zkr_lane_marks").fetchall()
    assert layout == (LAYOUT,) and marks == [("p",)]


def test_a_long_document_is_bounded_as_in_sqlite_and_a_layout_6_store_reindexes_it(
    pg_dsn: str, tmp_path: Path
) -> None:
    """The bound on one document's terms (terms.index_terms) is the same rule on both
    backends; a store indexed at layout 6 (unbounded) re-indexes its long documents."""
    text = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(40_000))
    bodies = []
    for db in (pg_dsn, str(tmp_path / "m.db")):
        source = remember(db, text, 10)["source_id"]
        pack = call(db, "search", {"tenant_id": "t", "person_id": "p", "query": text[-16:]})[1]
        assert [item["memory"]["id"] for item in pack["items"]] == [source]
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        bodies.append(raw.execute("SELECT body FROM zkr_fts").fetchone())
        tag = bodies[0][0][:10]  # an unbounded body, as an index of layout 6 held it
        long_body = " ".join([tag + "x"] * (MAX_DOCUMENT_TERMS + 1))
        raw.execute("UPDATE zkr_fts SET body = %s", [long_body])
        raw.execute("UPDATE zkr_pg_meta SET value = '6' WHERE key = 'layout'")
    lite = sqlite3.connect(tmp_path / "m.db")
    bodies.append(lite.execute("SELECT body FROM zkr_fts").fetchone())
    lite.close()
    assert bodies[0] == bodies[1] and len(bodies[0][0].split()) <= MAX_DOCUMENT_TERMS
    call(pg_dsn, "search", {"tenant_id": "t", "person_id": "p", "query": "x"})
    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        assert raw.execute("SELECT body FROM zkr_fts").fetchone() == bodies[0]


def test_an_unreachable_server_is_a_storage_error() -> None:
    with pytest.raises(StorageError, match="unable to open database"):
        MemoryDb.open("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_the_sqlite_path_never_imports_psycopg(tmp_path: Path) -> None:
    script = (
        "import sys, io, json\n"
        "from zkr.cli import run\n"
        f"db = {str(tmp_path / 'm.db')!r}\n"
        "req = {'tenant_id': 't', 'person_id': 'p', 'kind': 'conversation', 'text': 'hi',"
        " 'captured_at': 1, 'recorded_at': 1}\n"
        "run(['--db', db, 'remember'], io.BytesIO(json.dumps(req).encode()), io.StringIO(),"
        " io.StringIO())\n"
        "req = {'tenant_id': 't', 'person_id': 'p', 'query': 'hi'}\n"
        "run(['--db', db, 'search'], io.BytesIO(json.dumps(req).encode()), io.StringIO(),"
        " io.StringIO())\n"
        "assert not [m for m in sys.modules if m.startswith(('psycopg', 'zkr.store.pg'))]\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


# --------------------------------------------------------------------------- command parity


def _normalise(value: Any, names: dict[str, str]) -> Any:
    """Clock stamps dropped."""
    if isinstance(value, dict):
        return {k: _normalise(v, names) for k, v in value.items() if k not in ("created_at",)}
    if isinstance(value, list):
        return [_normalise(v, names) for v in value]
    return value


def _resolve(value: Any, results: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return {k: _resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, results) for v in value]
    if isinstance(value, str) and value.startswith("$"):
        name, _, field = value[1:].partition(".")
        found: Any = results[name]
        for part in field.split("."):
            found = found[int(part)] if isinstance(found, list) else found[part]
        return found
    return value


def _scope(**fields: Any) -> dict[str, Any]:
    return {"tenant_id": "t", "person_id": "p", **fields}


def _claim(subject: str, predicate: str, value: str, **extra: Any) -> dict[str, Any]:
    return {
        "subject": subject,
        "predicate": predicate,
        "value": value,
        "kind": "fact",
        "valid_from": 10,
        **extra,
    }


def _capture(text: str, at: int, **extra: Any) -> dict[str, Any]:
    return _scope(kind="conversation", text=text, captured_at=at, recorded_at=at, **extra)


_EMBEDDING = {"model": "m", "version": "1", "normalization": "l2", "distance": "cosine"}

_BERLIN = _capture(
    "Sam lives in Berlin",
    11,
    ingestion_key="k-1",
    claim=_claim("Sam", "city", "Berlin", kind="profile_fact"),
)

# (name, command, request): every command, each result compared across backends
SESSION: list[tuple[str, str, dict[str, Any]]] = [
    ("a", "remember", _capture("Sam works at Acme", 10, claim=_claim("Sam", "employer", "Acme"))),
    ("b", "remember", _BERLIN),
    ("b2", "remember", _BERLIN),  # the same ingestion key again: idempotent
    (
        "c",
        "remember",
        _capture(
            "Maybe Sam likes tea",
            12,
            claim=_claim("Sam", "likes", "tea", tier="short_term", processing_state="pending"),
        ),
    ),
    (
        "d",
        "remember",
        _capture(
            "The door code is 4412",
            13,
            locator={
                "device_id": "d",
                "provider": "p",
                "stream_id": "s",
                "segment_id": "g",
                "start_ms": 1,
                "end_ms": 2,
            },
        ),
    ),
    ("s1", "search", _scope(query="Sam")),
    ("g", "get", _scope(target={"kind": "claim", "id": "$a.claim_id"})),
    ("loc", "locator", _scope(evidence_id="$d.evidence_id")),
    ("pr", "profile", _scope(stability="current", claim_id="$b.claim_id", recorded_at=14)),
    ("prs", "profiles", _scope(limit=10)),
    (
        "rv",
        "review",
        _scope(day="2026-07-21", summary="Talk", evidence_ids=["$a.evidence_id"], recorded_at=14),
    ),
    ("rvs", "reviews", _scope(limit=10)),
    (
        "lk",
        "link",
        _scope(
            claim_id="$a.claim_id",
            evidence_id="$d.evidence_id",
            relation="contradicts",
            confidence_basis_points=4000,
        ),
    ),
    ("st", "settle", _scope(claim_id="$c.claim_id", processing_state="processed", recorded_at=15)),
    ("pm", "promote", _scope(claim_id="$c.claim_id", recorded_at=16)),
    (
        "co",
        "correct",
        _scope(
            claim_id="$a.claim_id",
            text="Sam moved to Globex",
            value="Globex",
            valid_at=20,
            recorded_at=20,
        ),
    ),
    ("ar", "archive", _scope(claim_id="$c.claim_id", recorded_at=21)),
    ("s2", "search", _scope(query="Sam Globex Acme tea")),
    ("s3", "search", _scope(query="Sam", as_of={"valid_at": 15, "recorded_at": 15})),
    ("tr", "trace", _scope(target={"kind": "claim", "id": "$co.claim_id"})),
    ("lu", "lookup", _scope(subject="sam", predicate="EMPLOYER")),
    ("br", "browse", _scope(limit=20, records="claims")),
    ("bs", "browse", _scope(limit=20, records="sources")),
    ("cx", "context", _scope(query="where does Sam work", max_bytes=2000)),
    ("pj", "projections", _scope(model="m", version="1", limit=20)),
    (
        "e1",
        "embed",
        _scope(
            target={"kind": "source", "id": "$d.source_id"},
            embedding={**_EMBEDDING, "vector": [0.6, 0.8], "input_hash": "$pj.0.input.input_hash"},
        ),
    ),
    (
        "h",
        "search",
        _scope(query="door", query_embedding={"vector": [0.6, 0.8], "model": "m", "version": "1"}),
    ),
    ("del", "delete", _scope(source_id="$d.source_id", deleted_at=30)),
    ("rp", "repair", _scope(limit=50)),
    ("ed", "erase", _scope(dry_run=True)),
    ("er", "erase", _scope(dry_run=False)),
    ("s4", "search", _scope(query="door code")),
    ("ex", "export", {"export_format": 1, "tenant_id": "t", "person_id": "p", "limit": 100}),
    (
        "bad",
        "correct",
        _scope(claim_id="$a.claim_id", text="x", value="y", valid_at=5, recorded_at=5),
    ),
]


def test_every_command_answers_as_on_sqlite(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same session on both backends, with the same ids minted in the same order, gives
    the same responses and errors, byte for byte (clock stamps aside)."""
    import itertools

    from zkr.store import derived, lifecycle, profiles, write

    lite = str(tmp_path / "m.db")
    outputs: dict[str, list[Any]] = {}
    for db in (lite, pg_dsn):
        counter = itertools.count(1)
        for module in (derived, lifecycle, profiles, write):
            monkeypatch.setattr(module, "new_id", lambda c=counter: f"{next(c):032x}")
        results: dict[str, Any] = {}
        outputs[db] = []
        for name, command, request in SESSION:
            code, out = call(db, command, _resolve(request, results))
            results[name] = out
            outputs[db].append((name, code, _normalise(out, {})))
    for got, want in zip(outputs[pg_dsn], outputs[lite], strict=True):
        assert got == want


@pytest.mark.parametrize("search_path", ["", "%24user"])
def test_a_search_path_that_selects_no_schema_is_one_clear_error(
    pg_dsn: str, search_path: str
) -> None:
    """An empty search_path, or only a "$user" schema that does not exist, names no store: the
    server's "relation zkr_pg_meta does not exist" / "no schema has been selected to create in"
    said nothing of why; the error names the search_path and the way to pick a schema."""
    remember(pg_dsn, "Sam works at Acme", 10)  # a store in public exists: still refused
    code, out = call(
        in_schema(pg_dsn, search_path),
        "search",
        {"tenant_id": "t", "person_id": "p", "query": "Acme"},
    )
    assert code == 1
    assert out["error"].startswith("unable to open database: the session's search_path (")
    assert (
        "selects no schema: name the store's schema with ?options=-csearch_path%3DNAME"
        in (out["error"])
    )
