"""One PostgreSQL scope of zkr's lexical index kept in memory by a long-lived connection.

:mod:`zkr.store.memindex` on SQLite follows the file's change log; here the index is
:mod:`zkr.store.pg.search`'s ``zkr_fts`` rows of one scope, and what tells a process whether
they moved is the scope's **index mark** (``zkr_search_marks``,
:data:`zkr.store.pg.search.SEARCH_MARK_DDL`): a new value of one sequence set by every
transaction writing a row of ``zkr_fts`` or ``zkr_search_scopes`` of that scope (row
triggers: a drain of any process, a hand edit; ``TRUNCATE`` moves the mark every reader reads).

**Warm**: the mark is what the kept index was read at: every read of the lane
(:class:`zkr.store.lexical.Index`) is answered from memory, no statement. **Moved**: the
scope's documents whose tuple version (``xmin``) is none the kept index read are read (one
statement, with the scope's document count: when documents went, the ``(doc, xmin)`` pairs
say which) and patched in
(:meth:`zkr.store.memindex.MemIndex._patch`); more than
:data:`zkr.store.memindex.REBUILD_SHARE` of the scope changed: read afresh. Runs inside the
search's read transaction (``REPEATABLE READ``: the mark and the rows are one snapshot).

**The same answers as** :class:`zkr.store.pg.search.PgIndex`: the statistics are the scope's
``zkr_search_scopes`` row; a term longer than PostgreSQL's lexeme limit matches nothing (it is
in no ``tsvector``) but counts in lengths and scores, as there; and bm25 is evaluated as
PgIndex evaluates it (``idf · (tf · (k1 + 1)) / (tf + k1 · (1 - b + b · dl / avgdl))``, left
to right, terms summed in the query's order), so the scores are PgIndex's to the last bit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from zkr.store import memindex
from zkr.store.memindex import MemIndex, TooLarge, Unavailable
from zkr.store.pg.search import K1, SEARCH_MARK_SQL, B, _lexeme, _packed
from zkr.store.search_index import scope_tag

if TYPE_CHECKING:
    from zkr.store.pg.adapter import PgConnection

_STATS_SQL = "SELECT docs, terms FROM zkr_search_scopes WHERE tenant_id = %s AND person_id = %s"
# a document's tuple version: xid as text (xid has no cast to a number)
_VERSIONS_SQL = (
    "SELECT coalesce(json_agg(json_build_array(doc, xmin::text) ORDER BY doc), '[]')::text"
    " FROM zkr_fts WHERE tenant_id = %s AND person_id = %s"
)
_DOCS_SQL = (
    "SELECT coalesce(json_agg(json_build_array(doc, xmin::text, kind, target, body)"
    " ORDER BY doc), '[]')::text FROM zkr_fts WHERE tenant_id = %s AND person_id = %s"
)
# The scope's documents whose tuple version is none of %s (the transactions that wrote the
# versions a kept index read: every row they wrote was visible to it, so a row holding one
# of them is a version it holds, unless since deleted) and how many documents there are now.
_CHANGED_SQL = (
    "SELECT json_build_array(count(*), coalesce(json_agg(json_build_array(f.doc,"
    " f.xmin::text, f.kind, f.target, f.body) ORDER BY f.doc) FILTER (WHERE k.x IS NULL),"
    " '[]'))::text FROM zkr_fts f LEFT JOIN unnest(%s::text[]) AS k(x) ON k.x = f.xmin::text"
    " WHERE f.tenant_id = %s AND f.person_id = %s"
)


_MARKS_SQL = (
    f"SELECT ({SEARCH_MARK_SQL}), (SELECT mark FROM zkr_lane_marks"
    " WHERE tenant_id = %s AND person_id = %s)"
)


def marks(conn: PgConnection, tenant_id: str, person_id: str) -> tuple[int, int]:
    """The scope's index mark (-1 before any write) and its lane mark (``zkr_lane_marks``,
    :mod:`zkr.store.pg.schema`: moved by every write to the rows the lane's eligibility checks
    read; -1 before any), in one statement. Together they key what a search may keep of the
    scope (:mod:`zkr.store.lexical`'s cache of documents, targets and neighbours)."""
    row = conn.execute_native(_MARKS_SQL, [tenant_id, person_id] * 2).fetchone()
    assert row is not None
    return int(row[0]), -1 if row[1] is None else int(row[1])


class PgMemIndex(MemIndex):
    """:class:`zkr.store.memindex.MemIndex` of one PostgreSQL scope, at index mark ``at``."""

    def __init__(self, tenant_id: str, person_id: str) -> None:
        super().__init__(scope_tag(tenant_id, person_id))
        self.scope = [tenant_id, person_id]
        self.at: int | None = None
        self.versions: dict[int, str] = {}  # doc -> xmin

    def load(self, conn: PgConnection, mark: int) -> None:
        """Bring the index to the scope's state at ``mark`` (read in the same transaction).
        Raises :class:`~zkr.store.memindex.TooLarge`."""
        if mark == self.at:
            return
        if self.at is None or not self._patched(conn):
            self._build(conn)
        self._stats(conn)
        self.at = mark

    def _patched(self, conn: PgConnection) -> bool:
        """Patch in the documents written since the index was read; ``False`` when too many
        changed (the caller reads the scope afresh)."""
        versions = self.versions
        known = sorted(set(versions.values()))
        row = conn.execute_native(_CHANGED_SQL, [known, *self.scope]).fetchone()
        assert row is not None
        count, rows = json.loads(row[0])
        limit = memindex.REBUILD_SHARE * max(len(self.docs), 64)
        if len(rows) > limit:
            return False
        changed = [doc for doc, *_ in rows]
        kept = len(versions) - sum(1 for doc in changed if doc in versions)
        if count - len(rows) != kept:  # some documents went: which, from every version
            current = {doc: xmin for doc, xmin in _packed(conn, _VERSIONS_SQL, self.scope)}
            changed += [doc for doc in versions if doc not in current]
            if len(changed) > limit:
                return False
        if changed:
            self._patch(changed, [(row[0], row[2], row[3], row[4]) for row in rows])
            for doc in changed:
                versions.pop(doc, None)
            versions.update({doc: xmin for doc, xmin, *_ in rows})
        return True

    def _build(self, conn: PgConnection) -> None:
        self.builds += 1
        row = conn.execute_native(_STATS_SQL, self.scope).fetchone()
        if row is not None and int(row[0]) > memindex.MAX_DOCS:
            raise TooLarge("scope too large to keep in memory")
        rows = _packed(conn, _DOCS_SQL, self.scope)
        if len(rows) > memindex.MAX_DOCS:
            raise TooLarge("scope too large to keep in memory")
        self.docs = {}
        self.length = 0
        found: dict[str, tuple[list[int], list[int], list[int]]] = {}
        for doc, _, kind, target, body in rows:
            self._add(doc, kind, target, body, found)
        self.terms = {term: memindex._postings(*lists) for term, lists in found.items()}
        self.ids = np.array(sorted(self.docs), dtype=np.int64)
        self.lengths = self._lengths(self.ids.tolist())
        self.versions = {doc: xmin for doc, xmin, *_ in rows}

    def _stats(self, conn: PgConnection) -> None:
        row = conn.execute_native(_STATS_SQL, self.scope).fetchone()
        self.rows, self.tokens = (int(row[0]), int(row[1])) if row else (0, 0)

    def stats(self, tag: str) -> tuple[int, int]:
        """The scope's documents and total terms (``zkr_search_scopes``, as PgIndex)."""
        return self.rows, self.tokens

    def window(
        self, terms: Sequence[str], lo: int, hi: int, n: int | None
    ) -> tuple[memindex._Ints, memindex._Floats]:
        """:meth:`MemIndex.window` as PgIndex answers it: the newest ``n`` documents in
        ``[lo, hi]`` holding a term that is a lexeme, scored by every term of ``terms`` (module
        docstring)."""
        slices = []
        for term in terms:
            postings = self.terms.get(term)
            if postings is not None:
                a, b = postings.span(lo, hi)
                if a < b:
                    slices.append((postings, a, b, _lexeme(term)))
        matching = [p.ids[a:b] for p, a, b, lexeme in slices if lexeme]
        if not matching:
            return memindex._EMPTY_INTS, memindex._EMPTY_FLOATS
        rows = self.rows
        avgdl = self.tokens / rows if rows else 0.0
        if len(slices) == 1:  # one term: the window is its newest postings, scored alone
            postings, start, end, _ = slices[0]
            if n is not None and end - start > n:
                start = end - n
            return postings.ids[start:end], _part(postings, start, end, rows, avgdl)
        window = memindex._distinct(np.concatenate(matching))
        if n is not None and len(window) > n:
            window = window[-n:]
        oldest = int(window[0])
        score = np.zeros(len(window))
        for postings, start, end, _ in slices:  # in the query's order, as PgIndex sums
            start = max(start, int(postings.ids.searchsorted(oldest, "left")))
            if start >= end:
                continue
            ids = postings.ids[start:end]
            where = window.searchsorted(ids)
            held = window.take(where, mode="clip") == ids  # (a long term's other documents)
            score[where[held]] += _part(postings, start, end, rows, avgdl)[held]
        return window, score

    def older(self, term: str, lo: int, hi: int, n: int) -> int:
        """As :meth:`MemIndex.older`; a term that is no lexeme is in no document (PgIndex)."""
        return super().older(term, lo, hi, n) if _lexeme(term) else 0

    def _union(self, terms: Iterable[str], lo: int, hi: int) -> memindex._Ints:
        return super()._union([t for t in terms if _lexeme(t)], lo, hi)


def _part(
    postings: memindex._Postings, start: int, end: int, rows: int, avgdl: float
) -> memindex._Floats:
    """One term's bm25 terms of postings ``[start, end)``, evaluated as PgIndex does."""
    hits = len(postings.ids)
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    idf = 1e-6 if idf <= 0.0 else idf
    tf = postings.tf[start:end]
    dl = postings.dl[start:end]
    part: memindex._Floats = (idf * (tf * (K1 + 1))) / (tf + K1 * (1 - B + B * dl / avgdl))
    return part


def for_scope(conn: PgConnection, tenant_id: str, person_id: str, mark: int) -> MemIndex | None:
    """The connection's in-memory index of the scope, current at index mark ``mark`` (read by
    the caller inside the same read transaction), or ``None`` when it cannot be kept (the
    caller reads :class:`zkr.store.pg.search.PgIndex`)."""
    indexes: dict[tuple[str, str], PgMemIndex] | None = getattr(conn, "lexical_memory", None)
    if indexes is None:
        indexes = {}
        conn.lexical_memory = indexes  # type: ignore[attr-defined]
        conn.lexical_memory_off = set()  # type: ignore[attr-defined]
    off: set[tuple[str, str]] = conn.lexical_memory_off  # type: ignore[attr-defined]
    key = (tenant_id, person_id)
    if key in off:
        return None
    index = indexes.pop(key, None) or PgMemIndex(tenant_id, person_id)
    try:
        index.load(conn, mark)
    except Unavailable as exc:
        if isinstance(exc, TooLarge):
            off.add(key)
        return None
    indexes[key] = index  # most recently used last
    while len(indexes) > memindex.MAX_SCOPES:
        del indexes[next(iter(indexes))]
    return index
