"""The in-memory lexical index (store/memindex.py): the same reads as FTS5, kept current from
the index's change log by whoever writes, rebuilt when the log cannot say what changed."""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import P, T, cli, remember
from zkr import MemoryDb, ZkrError
from zkr.model import CorrectRequest, DeleteRequest, EraseRequest, SearchRequest
from zkr.store import lexical, memindex, relevance, search_index
from zkr.store.db import read_tx
from zkr.store.search_index import CLAIM_BASE, scope_tag

RANGES = (
    (1, CLAIM_BASE - 1),
    (CLAIM_BASE, 2 * CLAIM_BASE - 1),
    (2, 3),  # (partial ranges: the lane's later rounds)
    (1, CLAIM_BASE + 2),
    (CLAIM_BASE + 1, 2 * CLAIM_BASE - 1),
)


def ids(db: MemoryDb, query: str, t: str = T, p: str = P) -> list[str]:
    return [item.memory.id for item in db.search(SearchRequest(t, p, query, 20)).items]


def kept(db: MemoryDb, t: str = T, p: str = P) -> memindex.MemIndex:
    """The connection's in-memory index of the scope (after a search has used it)."""
    conn = db._connect()
    found: memindex.MemIndex = conn.lexical_memory[scope_tag(t, p)]  # type: ignore[attr-defined]
    return found


def same_reads(conn: sqlite3.Connection, mem: memindex.MemIndex, queries: list[str]) -> None:
    """Every read of the lane gives the same answer from memory as from FTS5, bit for bit."""
    fts = lexical.SqliteIndex(conn, T, P)
    assert mem.stats(fts.tag) == fts.stats(fts.tag)
    for query in queries:
        plan = lexical.plan_query(conn, T, P, query, fts)
        assert lexical.plan_query(conn, T, P, query, mem) == plan
        terms = list(plan.match) or [tag for tag, _ in plan.weights]
        if not terms:
            continue  # (stop words only: nothing is read)
        for lo, hi in RANGES:
            for n in (1, 3, None):
                got, want = mem.scored(terms, lo, hi, n), fts.scored(terms, lo, hi, n)
                if n is None:
                    got, want = sorted(got), sorted(want)
                assert got == want, (query, n)
            for term in terms:
                assert mem.older(term, lo, hi, 3) == fts.older(term, lo, hi, 3)
            if plan.labels:
                assert mem.labelled(plan.labels, terms, lo, hi) == sorted(
                    fts.labelled(plan.labels, terms, lo, hi)
                )
        docs = [rowid for rowid, _ in fts.scored(terms, 1, 2 * CLAIM_BASE, None)]
        same_candidates(mem, fts, terms, docs)
        assert sorted(mem.resolve(docs)) == sorted(fts.resolve(docs))
        assert mem.neighbours(docs, 2, 4) == fts.neighbours(docs, 2, 4)
        # each document's relevance from the postings: the formula over its text, exactly
        words = {rowid: body.split() for rowid, _, _, body in fts.resolve(docs)}
        assert mem.points(docs, plan.weights, plan.avg_length) == [
            relevance.basis_points(
                plan.weights,
                {term: words[rowid].count(term) for term, _ in plan.weights},
                len(words[rowid]),
                plan.avg_length,
            )
            for rowid in docs
        ]


def test_a_cli_write_between_two_searches_is_seen_without_a_rebuild(
    db: MemoryDb, db_path: str
) -> None:
    remember(db, "the kayak trip on the lake", at=1)
    remember(db, "Sam: a kayak paddle", at=2)
    assert len(ids(db, "kayak")) == 2
    assert len(ids(db, "kayak")) == 2  # the second search keeps the index in memory
    mem = kept(db)
    epoch, docs = mem.epoch, dict(mem.docs)
    written = cli(
        db_path,
        "remember",
        {
            "tenant_id": T,
            "person_id": P,
            "kind": "document",
            "text": "a kayak rack",
            "captured_at": 3,
            "recorded_at": 3,
        },
    ).json()
    assert ids(db, "kayak")[0] == written["source_id"]
    assert kept(db) is mem and mem.epoch == epoch and mem.builds == 1  # updated in place
    assert set(mem.docs) - set(docs) and all(mem.docs[r] == docs[r] for r in docs)
    cli(
        db_path,
        "delete",
        {"tenant_id": T, "person_id": P, "source_id": written["source_id"], "deleted_at": 4},
    ).json()
    assert written["source_id"] not in ids(db, "kayak")
    assert mem.docs == docs
    with read_tx(db._connect()):
        same_reads(db._connect(), mem, ["kayak", "sam kayak", "lake paddle"])


def test_a_cut_log_or_a_new_epoch_rebuilds(
    db: MemoryDb, db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(6):
        remember(db, f"note {i} about the garden shed", at=i + 1)
    ids(db, "garden")
    ids(db, "garden")
    mem = kept(db)
    epoch, builds = mem.epoch, mem.builds
    monkeypatch.setattr(search_index, "LOG_KEEP", 1)
    other = MemoryDb.open(db_path)
    for i in range(3):  # another process's writes; its drains cut the log to one entry
        remember(other, f"later garden note {i}", at=20 + i)
        ids(other, "shed")
    other.close()
    assert len(ids(db, "garden")) == 9
    assert kept(db) is mem and mem.epoch == epoch and mem.builds == builds + 1  # log was cut
    extra = remember(db, "one more garden note", at=30).source_id
    assert len(ids(db, "garden")) == 10
    assert mem.builds == builds + 1  # one entry: applied in place
    db.delete(DeleteRequest(T, P, extra, 31))
    db.erase(EraseRequest(T, P, dry_run=False))  # drops the index: a new epoch
    assert len(ids(db, "garden")) == 9
    assert mem.epoch != epoch and mem.builds == builds + 2


def test_an_index_built_before_the_log_gets_one(db: MemoryDb, db_path: str) -> None:
    remember(db, "the red bicycle", at=1)
    ids(db, "bicycle")
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("DROP TABLE zkr_search_log")  # (its triggers stay: they would fail)
        conn.execute("DROP TRIGGER zkr_search_log_insert")
        conn.execute("DROP TRIGGER zkr_search_log_delete")
        conn.execute("DELETE FROM zkr_search_meta WHERE key = 'epoch'")
    conn.close()
    with MemoryDb.open(db_path) as fresh:
        assert len(ids(fresh, "bicycle")) == 1
        remember(fresh, "a blue bicycle", at=2)
        assert len(ids(fresh, "bicycle")) == 2
        assert kept(fresh).epoch is not None
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT count(*) FROM zkr_search_log").fetchone()[0] > 0
    conn.close()


def test_a_read_only_file_is_searched_from_memory_too(tmp_path: Path) -> None:
    path = str(tmp_path / "ro.db")
    with MemoryDb.open(path) as db:
        remember(db, "the lighthouse keeper", at=1)
        remember(db, "a lighthouse lamp", at=2)
    Path(path).chmod(0o444)
    with MemoryDb.open(path) as db:
        first = ids(db, "lighthouse")
        assert ids(db, "lighthouse") == first and len(first) == 2
        assert kept(db).docs


# --------------------------------------------------------------------------- property

WORDS = ("apple", "berry", "cider", "delta", "ember", "fjord", "the", "sam", "garden")
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
step = st.one_of(
    st.tuples(st.just("remember"), text, st.booleans(), st.booleans()),
    st.tuples(st.just("delete"), st.integers(0, 30), st.booleans(), st.booleans()),
    st.tuples(st.just("correct"), st.integers(0, 30), st.booleans(), st.booleans()),
)


def same_candidates(
    mem: memindex.MemIndex, fts: lexical.SqliteIndex, terms: list[str], docs: list[int]
) -> None:
    """The lane's candidates kept as arrays rank and score as the dict of FTS5's rows: the
    same rounds (a newer window, every older match kept as it is, an older window over it)."""
    arrays, rows = mem.candidates(), lexical.Scores(fts)
    for found in (arrays, rows):
        assert found.best_first(set(docs), 1.5) == [] and found.lookup(docs) == {}
    for lo, hi in ((CLAIM_BASE, 2 * CLAIM_BASE - 1), (1, CLAIM_BASE - 1)):
        got = arrays.add(terms, lo, hi, 2)
        assert got == rows.add(terms, lo, hi, 2)
        if got[0] == 2:
            rare = terms[-1:]  # (scored alone: other scores than the window gives)
            assert arrays.rescue(rare, lo, got[1] - 1) == rows.rescue(rare, lo, got[1] - 1)
            assert arrays.add(terms, lo, got[1] - 1, 3) == rows.add(terms, lo, got[1] - 1, 3)
        for boosted in (set(), set(docs[::2]), {*docs[1::3], 0, 2 * CLAIM_BASE}):
            assert arrays.best_first(boosted, 1.5) == rows.best_first(boosted, 1.5)
        wanted = [*docs[::-1], 0, 5, 2 * CLAIM_BASE]
        assert arrays.lookup(wanted) == rows.lookup(wanted)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=1, max_size=14), queries=st.lists(text, min_size=1, max_size=3)
)
def test_kept_current_equals_a_fresh_build_and_fts(
    steps: list[tuple[str, object, bool, bool]], queries: list[str]
) -> None:
    """After any remember/delete/correct sequence (by this connection or another one), with
    searches in between, the index kept in memory reads exactly what a fresh build and FTS5
    read, and a long-lived connection's search results equal a one-shot (FTS5) search's."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "m.db")
        with MemoryDb.open(path) as db, MemoryDb.open(path) as writer:
            sources: list[str] = []
            claims: list[str] = []
            at = 1
            for kind, arg, other, label in steps:
                at += 1
                who = writer if other else db
                if kind == "remember":
                    body = f"Sam: {arg}" if label else str(arg)
                    claim = ("Sam", "likes", str(arg)) if at % 2 else None
                    r = remember(who, body, at=at, claim=claim, t=T if at % 5 else "t2")
                    sources.append(r.source_id)
                    if r.claim_id:
                        claims.append(r.claim_id)
                elif kind == "delete" and sources:
                    sid = sources[int(str(arg)) % len(sources)]
                    with contextlib.suppress(ZkrError):  # another scope, or deleted already
                        who.delete(DeleteRequest(T, P, sid, at))
                elif kind == "correct" and claims:
                    cid = claims[int(str(arg)) % len(claims)]
                    with contextlib.suppress(ZkrError):  # superseded already, or another scope
                        new = who.correct(
                            CorrectRequest(T, P, cid, "Sam likes fjord", "fjord", at, at)
                        )
                        claims.append(new.claim_id)
                if label:
                    ids(db, queries[0])
                    ids(db, queries[0])
            conn = db._connect()
            for query in queries:
                first = ids(db, query)
                assert ids(db, query) == first == one_shot(path, query)
            mem = kept(db)
            search_index.ensure_current(conn)
            with read_tx(conn):
                mem.refresh(conn, memindex.change_mark(conn))
                fresh = memindex.MemIndex(mem.tag)
                fresh.build(conn)
                assert mem.docs == fresh.docs and mem.length == fresh.length
                assert mem.terms.keys() == fresh.terms.keys()
                for term, postings in mem.terms.items():
                    assert postings.ids.tolist() == fresh.terms[term].ids.tolist()
                    assert postings.tf.tolist() == fresh.terms[term].tf.tolist()
                    assert postings.dl.tolist() == fresh.terms[term].dl.tolist()
                same_reads(conn, mem, queries)


def one_shot(path: str, query: str) -> list[str]:
    """The search as a one-shot process runs it: a fresh connection, FTS5."""
    with MemoryDb.open(path) as db:
        return ids(db, query)


def test_another_connections_delete_is_seen_by_a_warm_server(db: MemoryDb, db_path: str) -> None:
    """What a long-lived connection keeps (the index in memory, the documents' targets, the
    materialised items) holds only while the file is unchanged."""
    gone = remember(db, "the kayak on the roof", at=1).source_id
    remember(db, "a kayak paddle", at=2)
    for _ in range(3):
        assert ids(db, "kayak")[1] == gone
    with MemoryDb.open(db_path) as other:
        other.delete(DeleteRequest(T, P, gone, 3))
    assert gone not in ids(db, "kayak")
    assert len(ids(db, "kayak")) == 1


def test_a_scope_too_large_to_keep_is_searched_through_fts(
    db: MemoryDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        remember(db, f"owl sighting {i}", at=i + 1)
    first = ids(db, "owl")
    monkeypatch.setattr(memindex, "MAX_DOCS", 3)
    assert ids(db, "owl") == first and ids(db, "owl sighting") == first
    conn = db._connect()
    assert scope_tag(T, P) not in conn.lexical_memory  # type: ignore[attr-defined]
    assert scope_tag(T, P) in conn.lexical_memory_off  # type: ignore[attr-defined]


def test_a_read_only_file_whose_old_index_has_a_queue_is_searched_exactly(
    tmp_path: Path,
) -> None:
    """An index built before the change log, with records still queued (the reference wrote
    them), in a file this process cannot write: the search answers from a private copy, not
    from the stale index (the queued record is found)."""
    path = str(tmp_path / "ro.db")
    with MemoryDb.open(path) as db:
        remember(db, "the red bicycle", at=1)
        ids(db, "bicycle")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE zkr_search_log")
        conn.execute("DROP TRIGGER zkr_search_log_insert")
        conn.execute("DROP TRIGGER zkr_search_log_delete")
        conn.execute("DELETE FROM zkr_search_meta WHERE key = 'epoch'")
    conn.close()
    with MemoryDb.open(path) as db:  # a write queues the new source (the triggers stay)
        remember(db, "a blue bicycle", at=2)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM zkr_search_queue").fetchone()[0] > 0
    conn.close()
    with MemoryDb.open(f"file:{path}?mode=ro") as reader:
        assert len(ids(reader, "bicycle")) == 2


def test_candidates_kept_as_arrays_answer_as_the_dict(db: MemoryDb) -> None:
    """A window over rescued matches overwrites their scores, a rescue keeps what a window
    gave: the arrays' scores and best-first order (with label boosts) are the dict's."""
    for at, text in enumerate(["kayak", "kayak lake", "lake kayak kayak", "lake", "kayak"] * 2):
        remember(db, text, at=at + 1)
    ids(db, "kayak lake")
    ids(db, "kayak lake")
    conn = db._connect()
    mem = kept(db)
    with read_tx(conn):
        plan = lexical.plan_query(conn, T, P, "kayak lake", mem)
        terms = list(plan.match)
        lo, hi = 1, CLAIM_BASE - 1
        arrays, rows = mem.candidates(), lexical.Scores(lexical.SqliteIndex(conn, T, P))
        for found in (arrays, rows):
            count, oldest = found.add(terms, lo, hi, 3)
            assert count == 3
            assert found.rescue(terms[1:], lo, oldest - 1) < oldest
            rescued = dict(rows.scores) if found is rows else None
            found.add(terms, lo, oldest - 1, 4)
        assert rescued is not None and rescued != rows.scores  # (the precedence matters)
        docs = sorted(rows.scores)
        assert arrays.lookup([*docs, 0]) == rows.lookup(docs)
        for boosted in (set(), set(docs[::2]), {docs[0], 0}):
            assert arrays.best_first(boosted, 1.5) == rows.best_first(boosted, 1.5)
