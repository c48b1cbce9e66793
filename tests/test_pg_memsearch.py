"""A long-lived PostgreSQL connection's lexical index kept in memory (zkr.store.pg.memsearch):
the same packs as the statements' path (zkr.store.pg.search.PgIndex), and every write to the
scope, by another session or by hand, seen by the next warm search."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.test_pg_backend import CORPUS, QUERIES, call, remember
from zkr import MemoryDb
from zkr.cli import dispatch

SCOPE = {"tenant_id": "t", "person_id": "p"}


def ask(db: MemoryDb, query: str, kept: bool = True) -> list[tuple[str, int]]:
    """One search's (excerpt, relevance) pairs; ``kept``: from the connection's kept index
    (its third search on), else through the statements (a one-shot call's path)."""
    db.conn.lexical_searches = 5 if kept else -1  # type: ignore[attr-defined]
    pack: dict[str, Any] = dispatch(db, "search", {**SCOPE, "query": query, "limit": 10})
    return [(i["excerpt"], i["relevance_basis_points"]) for i in pack["items"]]


def kept_builds(db: MemoryDb) -> int:
    (index,) = db.conn.lexical_memory.values()  # type: ignore[attr-defined]
    builds: int = index.builds
    return builds


def test_the_kept_index_answers_as_the_statements(pg_dsn: str) -> None:
    for at, text in enumerate(CORPUS * 3, start=10):
        remember(pg_dsn, text, at)
    long_word = "x" * 3000  # no lexeme (PostgreSQL's limit): counted, never matched
    remember(pg_dsn, f"Sam wrote {long_word} on the fence", 100)
    with MemoryDb.open(pg_dsn) as db:
        for query in [*QUERIES, "fence", f"fence {long_word}", long_word, "the a of"]:
            assert ask(db, query, kept=True) == ask(db, query, kept=False), query
        assert kept_builds(db) == 1  # read once, then warm


def test_a_write_by_another_session_is_seen_by_the_next_warm_search(pg_dsn: str) -> None:
    for at, text in enumerate(CORPUS, start=10):
        remember(pg_dsn, text, at)
    with MemoryDb.open(pg_dsn) as db:
        for _ in range(3):
            assert ask(db, "marigold") == ask(db, "marigold", kept=False)
        assert ask(db, "tangerine") == []
        ids = remember(pg_dsn, "The new launch code is tangerine", 50)  # another session
        assert [e for e, _ in ask(db, "tangerine")] == ["The new launch code is tangerine"]
        assert ask(db, "marigold launch") == ask(db, "marigold launch", kept=False)
        forget = {**SCOPE, "source_id": ids["source_id"], "deleted_at": 60}
        code, out = call(pg_dsn, "delete", forget)  # a document goes
        assert code == 0, out
        assert ask(db, "tangerine") == []
        (index,) = db.conn.lexical_memory.values()  # type: ignore[attr-defined]
        assert ids["source_id"] not in {target for _, target, _ in index.docs.values()}
        assert ask(db, "launch code") == ask(db, "launch code", kept=False)
        assert kept_builds(db) == 1  # patched, not read afresh


def test_a_hand_edit_is_seen_by_the_next_warm_search(pg_dsn: str) -> None:
    for at, text in enumerate(CORPUS, start=10):
        remember(pg_dsn, text, at)
    with MemoryDb.open(pg_dsn) as db:
        assert next(e for e, _ in ask(db, "marigold")) == "The launch code is marigold"
        ask(db, "marigold")
        with psycopg.connect(pg_dsn, autocommit=True) as raw:  # no zkr code involved
            raw.execute(
                "UPDATE sources SET content = 'The launch code is quince'"
                " WHERE content = 'The launch code is marigold'"
            )
        assert [e for e, _ in ask(db, "quince")] == ["The launch code is quince"]
        assert "The launch code is quince" not in [e for e, _ in ask(db, "marigold")]
        with psycopg.connect(pg_dsn, autocommit=True) as raw:  # the index itself, by hand
            raw.execute("TRUNCATE zkr_fts")
        assert ask(db, "quince") == ask(db, "quince", kept=False) == []
