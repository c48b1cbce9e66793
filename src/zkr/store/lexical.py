"""The lexical lane: which sources and claims match a query, what they stand for, in what order.

Matching is ours (spec/README.md: which items a query matches is quality); eligibility is the
reference's (spec/retrieval.md §3.3 live, §4 ``as_of``). docs/decisions-retrieval.md gives the
reasons, docs/retrieval-experiments.md the measurements.

1. **Terms** (:func:`zkr.store.terms.query_terms`): the query is folded (NFKC, case, accents),
   stop words are dropped, spaced words are Snowball-stemmed, unspaced scripts become
   character bigrams; at most 32 distinct terms. No term: nothing matches.
2. **Informative terms.** A term held by at least :data:`COMMON_SHARE` (90 %) of the scope's
   documents (once the scope has :data:`COMMON_MIN_DOCS` of them) says nothing about which one
   is meant. Such terms (a speaker label such as ``User:`` that starts every turn)
   never make a match on their own; they count only when the query has no other term.
3. **Documents** (:mod:`zkr.store.search_index`): every source that is not deleted and every
   claim (``subject predicate value``; a claim that corrects others also holds their words and
   their live sources' text, ``search_index._CHAIN_TEXT``) of the scope. A document matches
   when it holds an informative term. Matches are scored by FTS5 ``bm25()``; for speed
   whatever the store size, at most :data:`WINDOW_ROWS` newest source documents and as many
   claim documents are scored per round, plus every older match of a term with at most
   :data:`RARE_DOCS` of them.
4. **Eligibility.** A source document stands for the live claims its live evidence supports,
   else for itself when none of its live evidence supports any claim (§3.3); a claim document
   stands for its claim when that is live and citable (``as_of``: visible and citable at
   those times, §4). Anything else stands for nothing.
5. **Labels.** A source document whose leading label (``Caroline: …``; item 4 of
   :mod:`zkr.store.terms`) a query word names scores :data:`LABEL_BOOST` times as much: a
   question about someone is best answered by what they said themselves. The boost never
   makes a match, and it is not passed on to neighbours (step 6).
6. **Conversation neighbours.** Each of the :data:`LIFTERS` best eligible source documents
   (among the first :data:`LIFT_SCAN` matches checked)
   lifts the matched source documents written just before and after it in the same scope
   (:data:`NEIGHBOURS` on each side within :data:`SPAN` rows) by :data:`LIFT` × its own score
   (without its label boost).
7. **Recency.** Among the eligible matches of each kind (sources, claims), a match's lifted
   score is raised by its place in write order among the scored matches of its kind (not only
   those checked for eligibility, whose number depends on ``cut``), in :data:`RECENCY_STEPS`
   (10) steps of tenths up to :data:`RECENCY` (20 %): the i-th oldest of n gets × (1 + RECENCY ·
   ⌊10 · i / n⌋ / 9). A later turn on the same topic (a changed plan, a moved meeting) then
   outranks an earlier one that matches about as well, while a clearly better older match
   keeps its place; matches in the same tenth that tie still tie.
8. **Revisions.** A later source document revises one of the :data:`REVISED` best eligible
   source matches when it holds one of the revision words
   (:data:`zkr.store.terms.REVISION_WORDS`: "instead", "switch", "cancel", …) and at least
   :data:`REVISION_TERMS` of that match's topic terms (its terms that another document holds
   and at most :data:`REVISION_SHARE` of the scope's documents do, or
   :data:`REVISION_MIN_DOCS` in a small scope; a match of more than
   :data:`REVISION_MAX_TERMS` distinct terms is a document, not a turn, and has none). An
   eligible revision ranks just above the match it revises (× (1 + :data:`REVISION_ABOVE`),
   when that is more than its own score), matched by the query or not, and its relevance is
   at least that match's (also when its own score put it above): "Book Da Enzo instead"
   answers what "Book Trattoria Sole for the birthday dinner" answered.
9. **Order**: final score descending, then newest first, then sources before claims and id;
   de-duplicated into targets; at most ``cut``. Each target carries its relevance
   (:mod:`zkr.store.relevance`) computed from the best document that matched it.

Scores are SQLite doubles and every order has a total tie-break, so a search is deterministic
for a given database state. The index is read through FTS5 (:class:`SqliteIndex`) or, from a
connection's :data:`MEMORY_AFTER`-th search on (a long-lived process: ``zkr serve``, ``zkr
mcp``, the library), from the copy of the scope that :mod:`zkr.store.memindex` keeps in memory
and brings up to date from the index's change log: the same reads, bit for bit, without FTS5's
per-statement pass over every match of every term. What a search learns about a document
that depends on that state only (its text, the targets it stands for, its neighbours) is kept
on the connection until the file changes (:class:`_Cache`), so later searches skip those
reads; the ranking is the same. A search's scored matches (:class:`Candidates`) are a dict
(:class:`Scores`) or, on the in-memory index, its arrays up to the best-first order
(:class:`zkr.store.memindex.Candidates`): only the documents the ranking looks at become
Python objects.
"""

import bisect
import json
import sqlite3
from collections.abc import Collection, Iterable, Sequence

from zkr.model import AsOf, Target, TargetKind
from zkr.store import relevance
from zkr.store.driver import Connection, change_mark, is_postgres
from zkr.store.eligibility import (
    CLAIM_CITATION,
    CLAIM_CITATION_AS_OF,
    LIVE_CLAIM,
    SOURCE_LINKS_AS_OF_SQL,
    SOURCE_LINKS_SQL,
    VISIBLE_CLAIM,
    Support,
    stands_for,
)
from zkr.store.search_index import CLAIM_BASE, scope_tag
from zkr.store.terms import LABEL_MARK, label_terms, query_terms, revision_terms
from zkr.typelite import Any, NamedTuple, Protocol

WINDOW_ROWS = 1000
RARE_DOCS = 200
LIFTERS = 20
LIFT_SCAN = 100
SPAN = 32
NEIGHBOURS = 2
LIFT = 0.5
COMMON_MIN_DOCS = 16
COMMON_SHARE = 0.9
LABEL_BOOST = 1.5
RECENCY = 0.2
RECENCY_STEPS = 10
REVISED = 3
REVISION_SHARE = 0.25
REVISION_MIN_DOCS = 5
REVISION_TERMS = 4
REVISION_ABOVE = 1e-9
REVISION_MAX_TERMS = 256
MEMORY_AFTER = 2

CACHE_DOCS = 50_000
_SOURCE_END = CLAIM_BASE - 1
_CLAIM_END = 2 * CLAIM_BASE - 1


class Ranked(NamedTuple):
    """One lexical result: the target and its relevance in basis points."""

    target: Target
    relevance: int


class QueryPlan(NamedTuple):
    """What one query searches for in one scope.

    ``weights``: every query term with its IDF weight (the relevance denominator);
    ``match``: the tagged terms a document must hold one of (informative ones, see module
    docstring); ``docs``/``avg_length``: the scope's document count and mean length;
    ``labels``: the marked (label) forms of the query terms that some document holds.
    """

    weights: tuple[tuple[str, float], ...]
    match: tuple[str, ...]
    docs: int
    avg_length: float
    labels: tuple[str, ...] = ()

    def expression(self, terms: Sequence[str] | None = None) -> str:
        """The FTS5 expression matching any of ``terms`` (default: all of ``match``)."""
        return " OR ".join(_quote(t) for t in (self.match if terms is None else terms))


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def plan_query(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: str,
    index: "Index | None" = None,
) -> QueryPlan:
    """Terms, their weights and the informative ones, from the scope's statistics."""
    terms, _ = query_terms(query)
    tag = scope_tag(tenant_id, person_id)
    if index is None:
        index = open_index(conn, tenant_id, person_id)
    docs, total = index.stats(tag)
    tagged = [tag + term for term in terms]
    marked = [tag + term for term in label_terms(terms)]
    df = index.doc_freqs(tagged + marked)

    def common(term: str) -> bool:
        return docs >= COMMON_MIN_DOCS and df.get(term, 0) >= COMMON_SHARE * docs

    rare = [term for term in tagged if not common(term)]
    match = [term for term in rare if df.get(term, 0) > 0] if rare else tagged
    weights = tuple((term, relevance.idf(docs, df.get(term, 0))) for term in tagged)
    labels = tuple(term for term in marked if df.get(term, 0) > 0)
    return QueryPlan(weights, tuple(match), docs, total / docs if docs else 0.0, labels)


# --------------------------------------------------------------------------- SQL

# One round of scored matches in a rowid range (sources or claims), newest first, with their
# score (minus bm25: higher is better). Only rowid and bm25 are read (both come from the
# index); terms are scope-tagged, so every match is in the request's scope.
_SCORED_SQL = """
SELECT rowid, -bm25(zkr_fts) FROM zkr_fts
WHERE zkr_fts MATCH :expr AND rowid BETWEEN :lo AND :hi
ORDER BY rowid DESC LIMIT :n
"""
# How many matches of one term lie below :hi (stops counting at :n).
_OLDER_SQL = """
SELECT count(*) FROM (SELECT 1 FROM zkr_fts
                      WHERE zkr_fts MATCH :expr AND rowid BETWEEN :lo AND :hi LIMIT :n)
"""
_ALL_SQL = """
SELECT rowid, -bm25(zkr_fts) FROM zkr_fts WHERE zkr_fts MATCH :expr AND rowid BETWEEN :lo AND :hi
"""
# The documents in a rowid range holding a label term and a matched term (:expr is
# "(labels) AND (terms)").
_LABELLED_SQL = """
SELECT rowid FROM zkr_fts WHERE zkr_fts MATCH :expr AND rowid BETWEEN :lo AND :hi
"""
# Documents -> (kind, target id, terms), read from the index's content table (c0 body, c1
# kind, c2 target, c3 scope; zkr.store.search_index) by rowid, not through FTS5's cursor.
_RESOLVE_SQL = """
SELECT h.value, f.c1, f.c2, f.c0
FROM json_each(:rowids) AS h CROSS JOIN zkr_fts_content AS f ON f.id = h.value
"""

# A claim found by its own words stands for itself when it is live and citable (spec/retrieval.md
# §1, §7), or, historically, visible at (:v, :r) and citable with evidence eligible then (§4).
_LIVE_CLAIMS_SQL = f"""
SELECT c.id FROM json_each(:ids) AS h
CROSS JOIN claims c ON c.id = h.value AND c.tenant_id = :t AND c.person_id = :p
WHERE {LIVE_CLAIM} AND {CLAIM_CITATION} IS NOT NULL
"""
_AS_OF_CLAIMS_SQL = f"""
SELECT c.id FROM json_each(:ids) AS h
CROSS JOIN claims c ON c.id = h.value AND c.tenant_id = :t AND c.person_id = :p
WHERE {VISIBLE_CLAIM} AND {CLAIM_CITATION_AS_OF} IS NOT NULL
"""

# The NEIGHBOURS source documents of the scope on each side of each given one, looked for
# within SPAN rowids: the memories written just before and after it (conversation turns).
_NEIGHBOURS_SQL = """
SELECT h.value,
  (SELECT json_group_array(id) FROM (
     SELECT f.id FROM zkr_fts_content AS f
     WHERE f.id < h.value AND f.id >= h.value - :span AND f.c3 = :tag
     ORDER BY f.id DESC LIMIT :w)),
  (SELECT json_group_array(id) FROM (
     SELECT f.id FROM zkr_fts_content AS f
     WHERE f.id > h.value AND f.id <= h.value + :span AND f.id < :claims AND f.c3 = :tag
     ORDER BY f.id LIMIT :w))
FROM json_each(:rowids) AS h
"""


# --------------------------------------------------------------------------- the index


class Index(Protocol):
    """What the lane reads from zkr's index of one scope: :class:`SqliteIndex` (FTS5) here,
    :class:`zkr.store.pg.search.PgIndex` (``tsvector``/GIN) on PostgreSQL. ``scored`` returns
    (document, score) pairs, the score being minus FTS5's bm25 (higher is better);
    :class:`zkr.store.memindex.MemIndex` is the same reads from memory."""

    def stats(self, tag: str) -> tuple[int, int]: ...
    def doc_freqs(self, tagged: Sequence[str]) -> dict[str, int]: ...
    def scored(
        self, terms: Sequence[str], lo: int, hi: int, n: int | None
    ) -> list[tuple[int, float]]: ...
    def older(self, term: str, lo: int, hi: int, n: int) -> int: ...
    def labelled(
        self, labels: Sequence[str], terms: Sequence[str], lo: int, hi: int
    ) -> list[int]: ...
    def resolve(self, docs: Sequence[int]) -> list[tuple[int, str, str, str]]: ...
    def neighbours(
        self, docs: Sequence[int], width: int, span: int
    ) -> list[tuple[int, list[int]]]: ...


class Candidates(Protocol):
    """One search's scored matches (rowid → score) as the lane gathers and ranks them:
    :class:`Scores` (a dict, any index) or, when the index offers ``candidates()``, its own
    (:class:`zkr.store.memindex.Candidates`: arrays). Both give the same answers."""

    def add(self, terms: Sequence[str], lo: int, hi: int, n: int) -> tuple[int, int]: ...
    def rescue(self, terms: Sequence[str], lo: int, hi: int) -> int: ...
    def best_first(self, boosted: Collection[int], boost: float) -> list[int]: ...
    def lookup(self, rowids: Sequence[int]) -> dict[int, float]: ...
    def places(self, rowids: Sequence[int], split: int) -> list[tuple[int, int]]: ...


class Scores:
    """:class:`Candidates` in a dict, from :meth:`Index.scored`."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.scores: dict[int, float] = {}

    def add(self, terms: Sequence[str], lo: int, hi: int, n: int) -> tuple[int, int]:
        """Score (overwriting) the newest ``n`` matches of ``terms`` in ``[lo, hi]``; returns
        how many, and the oldest one's rowid (0 when none)."""
        rows = self.index.scored(terms, lo, hi, n)
        self.scores.update(rows)
        return len(rows), rows[-1][0] if rows else 0  # (newest first)

    def rescue(self, terms: Sequence[str], lo: int, hi: int) -> int:
        """Score every match of ``terms`` in ``[lo, hi]``, keeping the scores documents have;
        returns the oldest one's rowid (``hi + 1`` when none)."""
        rows = self.index.scored(terms, lo, hi, None)
        for rowid, score in rows:
            self.scores.setdefault(rowid, score)
        return min((rowid for rowid, _ in rows), default=hi + 1)

    def best_first(self, boosted: Collection[int], boost: float) -> list[int]:
        """Documents by score (times ``boost`` for those of ``boosted``) descending, then
        rowid descending."""
        scores = self.scores
        if boosted:  # (a score times 1.0 is the score: only boosted ones change)
            scores = dict(scores)
            for rowid in self.scores.keys() & boosted:
                scores[rowid] = scores[rowid] * boost
        return _best_first(scores)

    def lookup(self, rowids: Sequence[int]) -> dict[int, float]:
        """The score of each of ``rowids`` that was scored (the others are left out)."""
        scores = self.scores
        return {rowid: scores[rowid] for rowid in rowids if rowid in scores}

    def places(self, rowids: Sequence[int], split: int) -> list[tuple[int, int]]:
        """``(i, n)`` of each of ``rowids`` (scored documents): ``n`` scored documents lie on
        its side of ``split`` (rowids below it, or from it on), ``i`` of them older than it."""
        ordered = sorted(self.scores)
        sources = bisect.bisect_left(ordered, split)
        out = []
        for rowid in rowids:
            i = bisect.bisect_left(ordered, rowid)
            out.append((i, sources) if rowid < split else (i - sources, len(ordered) - sources))
        return out


class SqliteIndex:
    """The lane's reads from the FTS5 index of :mod:`zkr.store.search_index` for one scope."""

    def __init__(self, conn: sqlite3.Connection, tenant_id: str, person_id: str) -> None:
        self.conn = conn
        self.tag = scope_tag(tenant_id, person_id)

    def stats(self, tag: str) -> tuple[int, int]:
        row = self.conn.execute(
            "SELECT docs, terms FROM zkr_search_scopes WHERE scope = ?", (tag,)
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def doc_freqs(self, tagged: Sequence[str]) -> dict[str, int]:
        return dict(
            self.conn.execute(
                "SELECT term, docs FROM zkr_search_terms WHERE term IN"
                " (SELECT value FROM json_each(?))",
                (json.dumps(list(tagged)),),
            ).fetchall()
        )

    def scored(
        self, terms: Sequence[str], lo: int, hi: int, n: int | None
    ) -> list[tuple[int, float]]:
        expr = " OR ".join(_quote(t) for t in terms)
        if n is None:
            rows = self.conn.execute(_ALL_SQL, {"expr": expr, "lo": lo, "hi": hi}).fetchall()
        else:
            params = {"expr": expr, "lo": lo, "hi": hi, "n": n}
            rows = self.conn.execute(_SCORED_SQL, params).fetchall()
        return rows  # (rowid, -bm25) tuples as they come

    def older(self, term: str, lo: int, hi: int, n: int) -> int:
        params = {"expr": _quote(term), "lo": lo, "hi": hi, "n": n}
        return int(self.conn.execute(_OLDER_SQL, params).fetchone()[0])

    def labelled(self, labels: Sequence[str], terms: Sequence[str], lo: int, hi: int) -> list[int]:
        """Documents in ``[lo, hi]`` holding one of ``labels`` and one of ``terms``."""
        expr = "(" + " OR ".join(map(_quote, labels)) + ") AND ("
        expr += " OR ".join(map(_quote, terms)) + ")"
        return [row[0] for row in self.conn.execute(_LABELLED_SQL, (expr, lo, hi))]

    def resolve(self, docs: Sequence[int]) -> list[tuple[int, str, str, str]]:
        return self.conn.execute(_RESOLVE_SQL, {"rowids": json.dumps(list(docs))}).fetchall()

    def neighbours(self, docs: Sequence[int], width: int, span: int) -> list[tuple[int, list[int]]]:
        params = {
            "rowids": json.dumps(list(docs)),
            "w": width,
            "span": span,
            "tag": self.tag,
            "claims": CLAIM_BASE,
        }
        return [
            (rowid, json.loads(before) + json.loads(after))
            for rowid, before, after in self.conn.execute(_NEIGHBOURS_SQL, params)
        ]


def open_index(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    memory: bool = False,
    mark: tuple[int, int] | None = None,
) -> Index:
    """The scope's index on this connection's backend; with ``memory``, the connection's
    in-memory copy (:mod:`zkr.store.memindex`, same answers) when it can keep one. Inside a
    read transaction; ``mark``: the file's change mark read in it, if the caller has it."""
    if is_postgres(conn):
        from zkr.store.pg.search import PgIndex

        if memory and mark is not None:  # (mark: the scope's marks, zkr.store.pg.memsearch)
            from zkr.store.pg import memsearch  # numpy: long-lived processes only

            pg = memsearch.for_scope(conn, tenant_id, person_id, mark[0])  # type: ignore[arg-type]
            if pg is not None:
                return pg
        return PgIndex(conn, tenant_id, person_id)  # type: ignore[arg-type]
    if memory:
        from zkr.store import memindex  # numpy: long-lived processes only

        kept = memindex.for_scope(conn, scope_tag(tenant_id, person_id), mark)
        if kept is not None:
            return kept
    return SqliteIndex(conn, tenant_id, person_id)


def _keeps(conn: object) -> bool:
    """Whether ``conn`` is one of zkr's own connections (SQLite's
    :class:`zkr.store.driver.Connection`, a PostgreSQL store's
    :class:`zkr.store.pg.adapter.PgConnection`; not a stand-in that opens one on use), on
    which a search may keep what it learnt."""
    return isinstance(conn, Connection) or is_postgres(type(conn))


def _long_lived(conn: sqlite3.Connection) -> bool:
    """Whether this connection's searches use the in-memory index: from its
    :data:`MEMORY_AFTER`-th search on (a one-shot CLI call never builds it), zkr's connections
    only."""
    if not _keeps(conn):
        return False
    count: int = getattr(conn, "lexical_searches", 0) + 1
    conn.lexical_searches = count  # type: ignore[attr-defined]
    return count >= MEMORY_AFTER


# --------------------------------------------------------------------------- the cache


class _Cache:
    """What a search learnt about documents that holds until the file changes: each
    document's (kind, target id, body), its terms, the targets it stands for and its neighbours.

    All four are functions of the database state, the scope and the time mode only, so they
    are kept on zkr's connection (:class:`zkr.store.driver.Connection`) under ``key`` =
    (:func:`zkr.store.driver.change_mark` read inside the search's read transaction, tenant,
    person, ``as_of``): any commit by anyone moves the mark and the next search starts afresh.
    At most :data:`CACHE_DOCS` documents are kept (then it starts afresh too).
    """

    def __init__(self, key: tuple[object, ...]) -> None:
        self.key = key
        self.docs: dict[int, tuple[str, str, str]] = {}
        self.targets: dict[int, list[Target]] = {}
        self.near: dict[int, list[int]] = {}
        self.tokens: dict[int, list[str]] = {}


def _cache(conn: sqlite3.Connection, key: tuple[object, ...]) -> _Cache:
    """The connection's cache for ``key`` (a fresh one, not kept, on other connections)."""
    if not _keeps(conn):
        return _Cache(key)
    cache: _Cache | None = getattr(conn, "lexical_cache", None)
    if cache is None or cache.key != key or len(cache.docs) > CACHE_DOCS:
        cache = _Cache(key)
        conn.lexical_cache = cache  # type: ignore[attr-defined]
    return cache


# --------------------------------------------------------------------------- the lane


class _Lane:
    """One lexical search: scope, time mode, and what has been resolved and checked so far.

    Matches are keyed by document rowid: ``docs`` maps a resolved rowid to (kind, target id,
    body); ``targets`` maps a checked rowid to the targets it stands for (empty: none).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        tenant_id: str,
        person_id: str,
        as_of: AsOf | None,
        index: Index,
        mark: tuple[int, int] | None = None,
    ) -> None:
        self.conn = conn
        self.index = index
        self.tag = scope_tag(tenant_id, person_id)
        self.params: dict[str, object] = {"t": tenant_id, "p": person_id}
        if as_of is not None:
            self.params["v"] = as_of.valid_at
            self.params["r"] = as_of.recorded_at
        self.as_of = as_of
        if not is_postgres(conn):
            key = (change_mark(conn) if mark is None else mark, tenant_id, person_id, as_of)
            self.cache = _cache(conn, key)
        elif mark is not None:  # the scope's index and lane marks (zkr.store.pg.memsearch)
            self.cache = _cache(conn, ("pg", mark, tenant_id, person_id, as_of))
        else:
            self.cache = _Cache(())  # (PostgreSQL without the marks: one search only)
        self.docs = self.cache.docs
        self.targets = self.cache.targets
        self.final: dict[int, float] = {}
        self.labelled: set[int] = set()
        self.seen: set[int] = set()  # documents the ranking has looked at (see _rank)
        self.plan: QueryPlan | None = None
        self._points: dict[int, int] = {}
        self._shapes: dict[tuple[int, ...], int] = {}
        self._terms: list[str] = []
        self.revises: dict[int, int] = {}  # a revision -> the document it revises (step 8)

    def points(self, rowid: int) -> int:
        """The relevance of one resolved document (:mod:`zkr.store.relevance`)."""
        got = self._points.get(rowid)
        return self.points_of((rowid,))[0] if got is None else got

    def points_of(self, rowids: Iterable[int]) -> list[int]:
        """:meth:`points` of each of ``rowids``, in order."""
        assert self.plan is not None
        known = self._points
        tokens = self.cache.tokens
        shapes = self._shapes
        terms = self._terms
        out = []
        for rowid in rowids:
            got = known.get(rowid)
            if got is None:
                body = tokens.get(rowid)
                if body is None:
                    body = tokens[rowid] = self.docs[rowid][2].split()
                # a function of the query terms' counts and the length only: computed once each
                shape = (len(body), *map(body.count, terms))
                got = shapes.get(shape)
                if got is None:
                    counts = dict(zip(terms, shape[1:], strict=True))
                    got = relevance.basis_points(
                        self.plan.weights, counts, len(body), self.plan.avg_length
                    )
                    shapes[shape] = got
                revised = self.revises.get(rowid)
                if revised is not None:  # (step 8: at least the relevance of what it revises)
                    got = max(got, self.points(revised))
                known[rowid] = got
            out.append(got)
        return out

    def count(self, rowids: Sequence[int]) -> None:
        """:meth:`points` of all of ``rowids`` at once where the index can count the query's
        terms itself (:meth:`zkr.store.memindex.MemIndex.points`: the same numbers from its
        postings, without a pass over each document's text)."""
        assert self.plan is not None
        counted = getattr(self.index, "points", None)  # (the in-memory index only)
        if counted is not None and rowids:
            points = counted(rowids, self.plan.weights, self.plan.avg_length)
            self._points.update(zip(rowids, points, strict=True))
            for rowid, revised in self.revises.items():  # (step 8, as in points_of)
                if rowid in self._points:
                    self._points[rowid] = max(self._points[rowid], self.points(revised))

    def _query(self, sql: str, **params: object) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, {**self.params, **params}).fetchall()

    def resolve(self, rowids: Iterable[int]) -> None:
        todo = [rowid for rowid in rowids if rowid not in self.docs]
        if todo:
            for rowid, kind, target, body in self.index.resolve(todo):
                self.docs[rowid] = (kind, target, body)

    def check(self, rowids: Sequence[int]) -> None:
        """Record the targets each document stands for (spec/retrieval.md §3.3, §4)."""
        todo = [rowid for rowid in rowids if rowid not in self.targets]
        if not todo:
            return
        self.resolve(todo)
        sources = sorted({self.docs[r][1] for r in todo if r in self.docs and r < CLAIM_BASE})
        claims = sorted({self.docs[r][1] for r in todo if r in self.docs and r >= CLAIM_BASE})
        support = Support()
        if sources:
            sql = SOURCE_LINKS_SQL if self.as_of is None else SOURCE_LINKS_AS_OF_SQL
            support.add_rows(self._query(sql, ids=json.dumps(sources)))
        hide_linked = self.as_of is None  # live mode: any supporting link hides the source
        citable: set[str] = set()
        if claims:
            sql = _LIVE_CLAIMS_SQL if self.as_of is None else _AS_OF_CLAIMS_SQL
            citable = {row[0] for row in self._query(sql, ids=json.dumps(claims))}
        for rowid in todo:
            doc = self.docs.get(rowid)
            if doc is None:
                self.targets[rowid] = []
            elif rowid >= CLAIM_BASE:
                citable_claim = doc[1] in citable
                kind = TargetKind.CLAIM
                self.targets[rowid] = (
                    stands_for(kind, doc[1], (), False, hide_linked) if citable_claim else []
                )
            elif doc[1] not in support.claims:
                self.targets[rowid] = []  # not live / not yet, or no live evidence
            else:
                self.targets[rowid] = support.targets(TargetKind.SOURCE, doc[1], hide_linked)

    def neighbours(self, rowids: Sequence[int]) -> dict[int, list[int]]:
        """The scope's source documents written just before and after each of ``rowids``."""
        near = self.cache.near
        todo = [rowid for rowid in rowids if rowid not in near]
        if todo:
            near.update(self.index.neighbours(todo, NEIGHBOURS, SPAN))
        return {rowid: near[rowid] for rowid in rowids}

    # ------------------------------------------------------------------ scored matches

    def scored(self, plan: QueryPlan, cut: int) -> list[int]:
        """Eligible matched documents in ranked order, enough for ``cut`` targets."""
        make = getattr(self.index, "candidates", None)  # (the in-memory index: arrays)
        found: Candidates = Scores(self.index) if make is None else make()
        # (claims first: the scores then come newest first, as _best_first's first sort wants)
        ranges = [(CLAIM_BASE, _CLAIM_END), (1, _SOURCE_END)]
        window = WINDOW_ROWS
        oldest: dict[int, int] = {}  # per range (its lo): the oldest document scored in it
        while True:
            exhausted = True
            next_ranges = []
            for lo, hi in ranges:
                count, last = found.add(plan.match, lo, hi, window)  # (last: the oldest)
                if count:
                    oldest[lo] = min(oldest.get(lo, last), last)
                if count == window:
                    exhausted = False
                    if window == WINDOW_ROWS:
                        rescued = self._rescue_rare(plan, lo, last - 1, found)
                        oldest[lo] = min(oldest[lo], rescued)
                    next_ranges.append((lo, last - 1))
                if plan.labels and count and lo < CLAIM_BASE:
                    labelled = self.index.labelled(plan.labels, plan.match, oldest[lo], hi)
                    self.labelled.update(labelled)
            order = self._rank(found, cut)
            if exhausted or sum(len(self.targets[r]) for r in order) >= cut:
                return self.revise(order)
            ranges = next_ranges
            window *= 2  # few eligible documents: widen geometrically

    def _rescue_rare(self, plan: QueryPlan, lo: int, hi: int, found: Candidates) -> int:
        """Score every match below ``hi`` of the terms with at most RARE_DOCS such matches;
        returns the oldest one (``hi + 1`` when none)."""
        rare = [
            term
            for term in plan.match
            if self.index.older(term, lo, hi, RARE_DOCS + 1) <= RARE_DOCS
        ]
        if not rare:
            return hi + 1
        return found.rescue(rare, lo, hi)

    def _rank(self, found: Candidates, cut: int) -> list[int]:
        order = found.best_first(self.labelled, LABEL_BOOST)
        # Check best-first until the checked documents give `cut` targets and LIFTERS
        # eligible sources: a document left unchecked scores no more than every checked one.
        checked = 0
        found_targets: set[Target] = set()
        eligible: list[int] = []
        lifters: list[int] = []
        batch = cut + cut // 4 + 8
        targets = self.targets
        while checked < len(order) and (
            len(found_targets) < cut or (len(lifters) < LIFTERS and checked < LIFT_SCAN)
        ):
            chunk = order[checked : checked + batch]
            self.check(chunk)
            checked += len(chunk)
            self.seen.update(chunk)
            for rowid in chunk:
                stands = targets[rowid]
                if stands:
                    eligible.append(rowid)
                    found_targets.update(stands)
                    if rowid < CLAIM_BASE:
                        lifters.append(rowid)
        nearby = self.neighbours(lifters[:LIFTERS])
        # the scores the rest needs: the eligible documents', the lifters' and their neighbours'
        wanted = eligible + [rowid for near in nearby.values() for rowid in near]
        scores = found.lookup(wanted)
        lift: dict[int, float] = {}
        for lifter, near in nearby.items():
            score = scores[lifter]
            for rowid in near:
                if rowid in scores and score > lift.get(rowid, 0.0):
                    lift[rowid] = score
        seen = self.seen
        lifted = [rowid for rowid in lift if rowid not in seen]
        seen.update(lifted)
        self.check(lifted)
        eligible.extend(rowid for rowid in lifted if targets[rowid])
        # (score + LIFT · lift) · boost, where a missing lift (+ 0.0) and boost (· 1.0) leave
        # the score as it is: the same doubles computed only where they change it
        final = self.final = {rowid: scores[rowid] for rowid in eligible}
        for rowid, by in lift.items():
            if rowid in final:
                final[rowid] = scores[rowid] + LIFT * by
        for rowid in self.labelled.intersection(final):
            final[rowid] = final[rowid] * LABEL_BOOST
        _prefer_recent(final, found)
        return _ordered(eligible, final)

    def revise(self, order: list[int]) -> list[int]:
        """``order`` (:meth:`scored`'s) with the revisions of its :data:`REVISED` best source
        documents placed just above them (module docstring, step 8); records each revision's
        revised document in ``revises`` (for its relevance, :meth:`points_of`)."""
        assert self.plan is not None
        final = self.final
        limit = max(REVISION_SHARE * self.plan.docs, REVISION_MIN_DOCS)
        cue_docs = self.index.doc_freqs([self.tag + term for term in revision_terms()])
        cues = [term for term, docs in cue_docs.items() if docs]
        if not cues:  # no document of the scope says "instead", "cancel", …: nothing revises
            return order
        label = self.tag + LABEL_MARK
        found: dict[int, int] = {}  # revision -> the best-ranked document it revises
        for rowid in [rowid for rowid in order if rowid < CLAIM_BASE][:REVISED]:
            terms = sorted({t for t in self.docs[rowid][2].split() if not t.startswith(label)})
            if len(terms) > REVISION_MAX_TERMS:  # (a pasted document: no lookups of its terms)
                continue
            df = self.index.doc_freqs(terms)
            topic = [term for term in terms if 2 <= df.get(term, 0) <= limit]
            if len(topic) < REVISION_TERMS:
                continue
            later = self.index.labelled(cues, topic, rowid + 1, _SOURCE_END)
            self.resolve(later)
            for other in later:
                doc = self.docs.get(other)
                if doc is None or other in found:
                    continue
                held = set(doc[2].split())
                if sum(term in held for term in topic) >= REVISION_TERMS:
                    found[other] = rowid
        if not found:
            return order
        self.check(list(found))
        changed = False
        for other, rowid in found.items():
            if not self.targets[other]:
                continue
            self.revises[other] = rowid  # (its relevance, even when it already ranks above)
            above = final[rowid] * (1 + REVISION_ABOVE)
            if other not in final:
                order.append(other)
            elif final[other] >= above:
                continue
            final[other] = above
            changed = True
        return _ordered(order, final) if changed else order

    def best(self, order: list[int], cut: int) -> dict[Target, int]:
        """At most ``cut`` distinct targets of the eligible documents ``order`` (as
        :meth:`scored` returns them), each with the best relevance of the documents that stand
        for it, in rank order.

        The rank order: final score (lifted, boosted, steps 7-8) descending; documents
        of equal final score go to the one matching more of the query, common words
        included (:meth:`points`), then to the newest, then sources before claims. That is
        ``sorted(order, key=lambda r: (-final[r], -points(r) if tied else 0, -(r % CLAIM_BASE),
        r))``; a tied group's points are computed only when the group still decides which
        targets are taken (after ``cut`` targets, order no longer matters: the rest can only
        raise a taken target's relevance, a maximum).
        """
        final = self.final
        best: dict[Target, int] = {}
        targets = self.targets
        known = self._points
        values = [final[rowid] for rowid in order]
        start, end = 0, len(order)
        while start < end and len(best) < cut:
            score = values[start]
            stop = start + 1
            while stop < end and values[stop] == score:
                stop += 1
            group = order[start:stop]
            if len(group) > 1:
                points = self.points_of(group)  # (a stable sort: equal points keep their order)
                ranks = sorted(range(len(group)), key=points.__getitem__, reverse=True)
                group = [group[i] for i in ranks]
            for rowid in group:
                stands = targets[rowid]
                if len(best) >= cut:
                    for target in stands:
                        if target in best:
                            break
                    else:
                        continue  # it can neither add a target nor raise one's relevance
                got = known.get(rowid)
                if got is None:
                    got = self.points_of((rowid,))[0]
                for target in stands:
                    if target in best:
                        if got > best[target]:
                            best[target] = got
                    elif len(best) < cut:
                        best[target] = got
            start = stop
        for rowid in order[start:]:  # (``cut`` taken: the rest can only raise a relevance)
            for target in targets[rowid]:
                if target in best:
                    got = known.get(rowid)
                    if got is None:
                        got = self.points_of((rowid,))[0]
                    if got > best[target]:
                        best[target] = got
        return best


def _prefer_recent(final: dict[int, float], found: Candidates) -> None:
    """Raise each score of ``final`` (eligible document → score) by its place in write order
    among the scored matches of its kind (module docstring, step 7): the i-th oldest of n
    scores × (1 + RECENCY · s / (RECENCY_STEPS - 1)), s = ⌊RECENCY_STEPS · i / n⌋; those of
    the oldest step (and a lone document) keep their score exactly. The places are taken among
    all the scored matches (:meth:`Candidates.places`), not only those checked for
    eligibility: how many are checked depends on the search's ``limit``, and a search for 1
    item must rank as the first of a search for 10 does."""
    rows = list(final)
    for rowid, (i, n) in zip(rows, found.places(rows, CLAIM_BASE), strict=True):
        step = RECENCY_STEPS * i // n
        if step:
            final[rowid] = final[rowid] * (1 + RECENCY * step / (RECENCY_STEPS - 1))


def _ordered(eligible: list[int], final: dict[int, float]) -> list[int]:
    """``eligible`` by final score, then newest first, then sources before claims (module
    docstring, step 9): ``key=lambda r: (final[r], r % CLAIM_BASE, -r), reverse=True`` as
    three stable sorts on plain keys; ties in score are broken further by
    :meth:`_Lane.best` (points), only where the answer depends on it."""
    eligible.sort()
    eligible.sort(key=CLAIM_BASE.__rmod__, reverse=True)
    eligible.sort(key=final.__getitem__, reverse=True)
    return eligible


def _best_first(scores: dict[int, float]) -> list[int]:
    """Documents by score descending, then rowid descending (newest first): the order of
    ``sorted(scores, key=lambda r: (-scores[r], -r))``, as two stable sorts on plain keys."""
    order = sorted(scores, reverse=True)
    order.sort(key=scores.__getitem__, reverse=True)
    return order


def lexical_search(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: str,
    cut: int,
    as_of: AsOf | None = None,
    mark: tuple[int, int] | None = None,
) -> list[Ranked]:
    """At most ``cut`` distinct eligible targets, best first, each with its relevance (the
    best of the documents that stand for it). Live mode, or historical mode with ``as_of``.

    Runs inside the caller's (read) transaction; the index must be current: call
    :func:`zkr.store.search_index.ensure_current` before opening it. ``mark``: the file's
    :func:`~zkr.store.driver.change_mark` as the caller read it in that transaction, if it has
    (SQLite; read here otherwise: it stands until the transaction ends).
    """
    if cut <= 0:
        return []
    memory = _long_lived(conn)
    if not is_postgres(conn):
        if mark is None:
            mark = change_mark(conn)
    elif memory:  # a long-lived PostgreSQL connection keeps the scope (zkr.store.pg.memsearch)
        from zkr.store.pg import memsearch

        mark = memsearch.marks(conn, tenant_id, person_id)  # type: ignore[arg-type]
    index = open_index(conn, tenant_id, person_id, memory, mark)
    plan = plan_query(conn, tenant_id, person_id, query, index)
    if not plan.match:
        return []
    lane = _Lane(conn, tenant_id, person_id, as_of, index, mark)
    lane.plan = plan
    lane._terms = [term for term, _ in plan.weights]
    order = lane.scored(plan, cut)
    lane.count(order)
    best = lane.best(order, cut)
    return [Ranked(target, points) for target, points in best.items()]


def lexical_ranking(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: str,
    cut: int,
    as_of: AsOf | None = None,
) -> list[Target]:
    """The targets of :func:`lexical_search`, in order (same preconditions)."""
    return [r.target for r in lexical_search(conn, tenant_id, person_id, query, cut, as_of)]
