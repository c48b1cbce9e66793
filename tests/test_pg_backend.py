"""The PostgreSQL backend's own behaviour (zkr.store.pg), against a real server (``pg_dsn``).

Every command's contract is checked by the shared conformance suite run against PostgreSQL;
here: what a DSN opens, the layout's keys (distribution by person), the trigger rules' texts,
per-scope feed order under concurrent writers, the lexical ranking matching SQLite's, and the
SQLite path never importing psycopg.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from zkr import MemoryDb
from zkr.cli import run
from zkr.errors import StorageError

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
]
QUERIES = ["Acme", "Sam Acme", "Berlin winters", "marigold", "alice alps", "東京", "strasse"]


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
        if table in ("zkr_embedder", "zkr_pg_meta"):
            continue  # one row per store: zkr's local-model record, the layout version
        if index == "zkr_fts_terms":
            continue  # GIN over scope-tagged lexemes (zkr.store.pg.search)
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
            "tenant_id": "t",
            "person_id": "p",
            "kind": "conversation",
            "text": "x",
            "captured_at": 10,
            "recorded_at": 10,
            "claim": {
                "subject": "Sam",
                "predicate": "employer",
                "value": "Acme",
                "kind": "fact",
                "valid_from": 10,
                "tier": "archive",
                "processing_state": "pending",
            },
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


def test_a_newer_layout_is_refused(pg_dsn: str) -> None:
    MemoryDb.open(pg_dsn).close()
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as raw:
        raw.execute("UPDATE zkr_pg_meta SET value = '99' WHERE key = 'layout'")
    with pytest.raises(Exception, match="layout 99 is newer"):
        MemoryDb.open(pg_dsn)


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
