"""One scope of zkr's lexical index kept in memory by a long-lived process (issue 14).

A process that searches more than once (``zkr serve``, ``zkr mcp``, a library user; not a
one-shot CLI call) answers the lexical lane's reads (:class:`zkr.store.lexical.Index`) from
memory instead of FTS5: the scope's documents (rowid → kind, target, body) and, per tagged
term, numpy arrays of the rowids holding it, the term's count in each and each one's length.
FTS5's ``bm25()`` costs most of a search on a large scope because every statement first counts
every match of every term (its IDF pass); here those counts are the postings' lengths.

**The same answers as FTS5.** Every read returns what :class:`zkr.store.lexical.SqliteIndex`
returns on the same file state, so the ranking does not depend on which one served it:
``scored`` computes FTS5's bm25 (``fts5_aux.c``: ``k1 = 1.2``, ``b = 0.75``, IDF
``ln((N - n + 0.5) / (n + 0.5))`` floored at ``1e-6``, ``N`` and the average length over the
whole table, terms summed in the expression's order) with the same double operations in the
same order, over the same window (the newest ``n`` matches in the rowid range). A term that
FTS5's tokenizer would cut in two (a letter of category ``So`` that folding keeps) is one term
here; such text ranks by these statistics rather than FTS5's. It also gives the ranked documents'
relevance (:meth:`MemIndex.points`) from the postings' counts and the documents' lengths: the
numbers :mod:`zkr.store.relevance` gives from their text.

**Kept current, never rebuilt for a write.** The index is keyed by the file's change mark
(:func:`zkr.store.driver.change_mark`): while nothing was committed, a search reads no SQL for
it. Otherwise it reads the index's epoch and change log (:mod:`zkr.store.search_index`:
``zkr_search_log``, the rowids every drain removed or inserted, by any process) and re-reads
only those documents; a new epoch (the index was rebuilt, or erased), a log cut past what it
saw, or more changes than :data:`REBUILD_SHARE` of the scope rebuild it. An index without an
epoch (a read-only file indexed before the log existed) is not kept: the caller uses FTS5.

Runs inside the caller's read transaction (one snapshot). At most :data:`MAX_SCOPES` scopes and
:data:`MAX_DOCS` documents a scope are kept per connection.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from collections.abc import Collection, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from zkr.store import relevance
from zkr.store.driver import change_mark
from zkr.store.search_index import CLAIM_BASE

K1 = 1.2  # FTS5's bm25 constants (sqlite3 ext/fts5/fts5_aux.c)
B = 0.75
MIN_IDF = 1e-6
MAX_SCOPES = 4
MAX_DOCS = 500_000
REBUILD_SHARE = 0.25

_Ints = npt.NDArray[np.int64]
_Floats = npt.NDArray[np.float64]
_EMPTY_INTS: _Ints = np.zeros(0, dtype=np.int64)
_EMPTY_FLOATS: _Floats = np.zeros(0, dtype=np.float64)


class Unavailable(Exception):
    """The index cannot be kept in memory (no epoch or log, too large): use FTS5."""


class TooLarge(Unavailable):
    """The scope holds more than :data:`MAX_DOCS` documents (FTS5 for the connection's life)."""


class _Postings:
    """One term's documents: rowids ascending, the term's count in each, each one's length."""

    __slots__ = ("avgdl", "dl", "ids", "saturated", "split", "tf")

    def __init__(self, ids: _Ints, tf: _Floats, dl: _Floats) -> None:
        self.ids = ids
        self.tf = tf
        self.dl = dl
        self.avgdl: float | None = None  # the mean length `saturated` was computed for
        self.saturated: _Floats = tf
        # (first rowid, last rowid, where the claims start, count): see span
        self.split: tuple[int, int, int, int] | None = None

    def saturation(self, avgdl: float) -> _Floats:
        """bm25's term-frequency factor of each posting, ``tf · (k1 + 1) / (tf + k1 · (1 - b +
        b · dl / avgdl))``, the same double operations as FTS5; kept until ``avgdl`` moves."""
        if self.avgdl != avgdl:
            tf = self.tf
            self.saturated = (tf * (K1 + 1.0)) / (tf + K1 * (1 - B + B * self.dl / avgdl))
            self.avgdl = avgdl
        return self.saturated

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """The slice of the postings with rowids in ``[lo, hi]``."""
        split = self.split
        if split is None:  # the lexical lane's two whole ranges, found once per postings
            ids = self.ids
            split = (int(ids[0]), int(ids[-1]), int(ids.searchsorted(CLAIM_BASE)), len(ids))
            self.split = split
        first, last, claims, count = split
        if lo <= first or lo == CLAIM_BASE:
            a = 0 if lo <= first else claims
            if hi == CLAIM_BASE - 1:
                return a, claims
            if hi >= last:
                return a, count
        # (rowids are integers: the first one above `hi` is the first one at or above hi + 1)
        a, b = self.ids.searchsorted((lo, hi + 1)).tolist()
        return a, b


def _postings(ids: list[int], tf: list[int], dl: list[int]) -> _Postings:
    """Postings from parallel lists (rowids ascending)."""
    return _Postings(
        np.array(ids, dtype=np.int64),
        np.array(tf, dtype=np.float64),
        np.array(dl, dtype=np.float64),
    )


def _merged(old: _Postings | None, drop: _Ints, new: _Postings | None) -> _Postings | None:
    """``old`` without the rowids ``drop``, plus ``new``, by rowid (``None``: empty)."""
    parts = []
    if old is not None:
        if len(drop):
            # (both ascending: each dropped rowid's place, where it is there; np.isin costs
            # ~100 us a call, once per term of a deleted document)
            at = _present(old, drop)
            if len(at) == len(old.ids) and new is None:
                return None
            if len(at):
                old = _Postings(
                    np.delete(old.ids, at), np.delete(old.tf, at), np.delete(old.dl, at)
                )
        parts.append(old)
    if new is not None:
        parts.append(new)
    if len(parts) == 1:
        merged = parts[0]
    else:
        order = np.argsort(np.concatenate([p.ids for p in parts]), kind="stable")
        merged = _Postings(
            np.concatenate([p.ids for p in parts])[order],
            np.concatenate([p.tf for p in parts])[order],
            np.concatenate([p.dl for p in parts])[order],
        )
    return merged if len(merged.ids) else None


def _present(old: _Postings, drop: _Ints) -> _Ints:
    """Positions in ``old.ids`` of the rowids of ``drop`` that it holds."""
    at: _Ints = old.ids.searchsorted(drop)
    inside = at < len(old.ids)
    at, drop = at[inside], drop[inside]
    found: _Ints = at[old.ids[at] == drop]
    return found


_CONTENT_SQL = "SELECT id, c1, c2, c0 FROM zkr_fts_content WHERE c3 = ? ORDER BY id"
_SOME_CONTENT_SQL = """
SELECT f.id, f.c1, f.c2, f.c0, f.c3
FROM json_each(:ids) AS h CROSS JOIN zkr_fts_content AS f ON f.id = h.value
"""
_TOTALS_SQL = "SELECT total(docs), total(terms) FROM zkr_search_scopes"
_EPOCH_SQL = "SELECT value FROM zkr_search_meta WHERE key = 'epoch'"


class MemIndex:
    """The lexical index of one scope (tag ``tag``) in memory, at change mark ``mark``.

    Implements :class:`zkr.store.lexical.Index`. Build with :meth:`build`, bring up to date
    with :meth:`refresh` (both inside a read transaction).
    """

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.mark: tuple[int, int] | None = None
        self.epoch: str | None = None
        self.seq = 0
        self.docs: dict[int, tuple[str, str, str]] = {}
        self.terms: dict[str, _Postings] = {}
        self.ids: _Ints = _EMPTY_INTS  # every document of the scope, ascending
        self.lengths: _Floats = np.zeros(0)  # each one's number of terms (as ``ids``)
        self.length = 0  # the scope's total terms
        self.rows = 0  # FTS5's row count and token total over the whole table (bm25)
        self.tokens = 0
        self.builds = 0  # how many times it was read afresh (tests, diagnostics)

    # ------------------------------------------------------------------ keeping current

    def build(self, conn: sqlite3.Connection) -> None:
        """Read the scope's documents afresh. Raises :class:`Unavailable`."""
        self.builds += 1
        self.epoch = _epoch(conn)
        self.seq = int(
            conn.execute("SELECT coalesce(max(seq), 0) FROM zkr_search_log").fetchone()[0]
        )
        row = conn.execute("SELECT docs FROM zkr_search_scopes WHERE scope = ?", (self.tag,))
        count = row.fetchone()
        if count is not None and int(count[0]) > MAX_DOCS:
            raise TooLarge("scope too large to keep in memory")
        self.docs = {}
        found: dict[str, tuple[list[int], list[int], list[int]]] = {}
        self.length = 0
        for rowid, kind, target, body in conn.execute(_CONTENT_SQL, (self.tag,)):
            if len(self.docs) >= MAX_DOCS:
                raise TooLarge("scope too large to keep in memory")
            self._add(rowid, kind, target, body, found)
        self.terms = {term: _postings(*lists) for term, lists in found.items()}
        self.ids = np.array(sorted(self.docs), dtype=np.int64)
        self.lengths = self._lengths(self.ids.tolist())
        self._totals(conn)
        self.mark = change_mark(conn)

    def refresh(self, conn: sqlite3.Connection, mark: tuple[int, int]) -> None:
        """Bring the index to the file's state at ``mark`` (read inside the same transaction).
        Raises :class:`Unavailable`."""
        if mark == self.mark:
            return
        epoch = _epoch(conn)
        rows = conn.execute(
            "SELECT seq, doc FROM zkr_search_log WHERE seq > ? ORDER BY seq", (self.seq,)
        ).fetchall()
        first = conn.execute("SELECT min(seq) FROM zkr_search_log").fetchone()[0]
        changed = list(dict.fromkeys(doc for _, doc in rows))
        cut = first is not None and first > self.seq + 1 and rows  # entries we never saw
        if epoch != self.epoch or cut or len(changed) > REBUILD_SHARE * max(len(self.docs), 64):
            self.build(conn)
            return
        if changed:
            self._apply(conn, changed)
            self.seq = int(rows[-1][0])
        self._totals(conn)
        self.mark = mark

    def _totals(self, conn: sqlite3.Connection) -> None:
        rows, tokens = conn.execute(_TOTALS_SQL).fetchone()
        self.rows, self.tokens = int(rows), int(tokens)

    def _add(
        self,
        rowid: int,
        kind: str,
        target: str,
        body: str,
        found: dict[str, tuple[list[int], list[int], list[int]]],
    ) -> None:
        """Record one document; its postings go to ``found`` (rowids must come ascending)."""
        self.docs[rowid] = (kind, target, body)
        tokens = body.split()
        length = len(tokens)
        self.length += length
        for term, count in Counter(tokens).items():
            lists = found.get(term)
            if lists is None:
                lists = found[term] = ([], [], [])
            lists[0].append(rowid)
            lists[1].append(count)
            lists[2].append(length)

    def _apply(self, conn: sqlite3.Connection, changed: list[int]) -> None:
        """Re-read the documents ``changed``: drop what they were, add what they are."""
        current = conn.execute(_SOME_CONTENT_SQL, {"ids": json.dumps(sorted(changed))}).fetchall()
        self._patch(changed, [row[:4] for row in current if row[4] == self.tag])

    def _patch(self, changed: list[int], current: list[tuple[int, str, str, str]]) -> None:
        """Drop what the documents ``changed`` were; add ``current``, what those of them the
        scope still holds are now (``(rowid, kind, target, body)``, any order)."""
        gone: dict[str, set[int]] = {}
        for rowid in changed:
            old = self.docs.pop(rowid, None)
            if old is not None:
                tokens = old[2].split()
                self.length -= len(tokens)
                for term in set(tokens):
                    gone.setdefault(term, set()).add(rowid)
        added: dict[str, tuple[list[int], list[int], list[int]]] = {}
        for rowid, kind, target, body in sorted(current):
            self._add(rowid, kind, target, body, added)
        for term in gone.keys() | added.keys():
            drop = np.array(sorted(gone.get(term, ())), dtype=np.int64)
            new = _postings(*added[term]) if term in added else None
            merged = _merged(self.terms.get(term), drop, new)
            if merged is None:
                self.terms.pop(term, None)
            else:
                self.terms[term] = merged
        keep = ~np.isin(self.ids, np.array(changed, dtype=np.int64))
        ids, lengths = self.ids[keep], self.lengths[keep]
        added_ids = sorted(r for r in changed if r in self.docs)
        now = np.array(added_ids, dtype=np.int64)
        at = ids.searchsorted(now)
        self.ids = np.insert(ids, at, now)  # (none of `now` is in `ids`)
        self.lengths = np.insert(lengths, at, self._lengths(added_ids))

    def _lengths(self, rowids: list[int]) -> _Floats:
        """The number of terms of each of ``rowids`` (held documents)."""
        docs = self.docs
        return np.array([len(docs[rowid][2].split()) for rowid in rowids], dtype=np.float64)

    # ------------------------------------------------------------------ the lane's reads

    def stats(self, tag: str) -> tuple[int, int]:
        """The scope's document count and total terms (``zkr_search_scopes``)."""
        return (len(self.docs), self.length) if self.docs else (0, 0)

    def doc_freqs(self, tagged: Sequence[str]) -> dict[str, int]:
        """How many of the scope's documents hold each term (held by some only)."""
        terms = self.terms
        return {term: len(terms[term].ids) for term in tagged if term in terms}

    def scored(
        self, terms: Sequence[str], lo: int, hi: int, n: int | None
    ) -> list[tuple[int, float]]:
        """(rowid, score) of the newest ``n`` (all: ``None``) documents in ``[lo, hi]`` holding
        one of ``terms``, newest first; the score is minus FTS5's ``bm25()`` of the expression
        ``t1 OR t2 …``."""
        return _newest_first(*self.window(terms, lo, hi, n))

    def window(
        self, terms: Sequence[str], lo: int, hi: int, n: int | None
    ) -> tuple[_Ints, _Floats]:
        """:meth:`scored` as two arrays: the rowids ascending (oldest first) and their scores."""
        slices = []
        for term in terms:
            postings = self.terms.get(term)
            if postings is not None:
                a, b = postings.span(lo, hi)
                if a < b:
                    slices.append((term, postings, a, b))
        if not slices:
            return _EMPTY_INTS, _EMPTY_FLOATS
        rows = self.rows
        avgdl = float(self.tokens) / float(rows) if rows else 0.0
        if len(slices) == 1:  # one term: the window is its newest postings, scored alone
            _, postings, start, end = slices[0]
            if n is not None and end - start > n:
                start = end - n
            # (0.0 + part is part: the same doubles as the sum below)
            part = _idf(rows, len(postings.ids)) * postings.saturation(avgdl)[start:end]
            return postings.ids[start:end], part
        window = _distinct(np.concatenate([p.ids[a:b] for _, p, a, b in slices]))
        cut = n is not None and len(window) > n
        if cut:
            window = window[-n:]  # type: ignore[operator]
        oldest = int(window[0])
        score = np.zeros(len(window))
        for _, postings, start, end in slices:  # in the expression's order, as FTS5 sums
            idf = _idf(rows, len(postings.ids))
            if cut:  # (else every slice starts at or after the oldest one: nothing to skip)
                start = max(start, int(postings.ids.searchsorted(oldest, "left")))
                if start >= end:
                    continue
            # (element by element: the same doubles whether computed on a slice or the whole)
            part = idf * postings.saturation(avgdl)[start:end]
            where = window.searchsorted(postings.ids[start:end])
            score[where] += part
        # FTS5 returns -1.0 * score; the lane's score is minus that: the sum itself
        return window, score

    def candidates(self) -> Candidates:
        """An empty set of one search's scored matches, scored by this index."""
        return Candidates(self)

    def points(
        self, docs: Sequence[int], weights: Sequence[tuple[str, float]], avg_length: float
    ) -> list[int]:
        """The relevance (:func:`zkr.store.relevance.basis_points`) of each of ``docs`` (held
        documents) for a query of ``weights`` (``(tagged term, weight)``): from the postings'
        counts and the documents' lengths, not their text."""
        at = np.array(docs, dtype=np.int64)
        counts = []
        for term, _ in weights:
            postings = self.terms.get(term)
            if postings is None:
                counts.append(np.zeros(len(at)))
                continue
            found = postings.ids.searchsorted(at)
            held = postings.ids.take(found, mode="clip") == at
            counts.append(np.where(held, postings.tf.take(found, mode="clip"), 0.0))
        lengths = self.lengths[self.ids.searchsorted(at)]  # (every one of docs is held)
        return relevance.basis_points_of(weights, counts, lengths, avg_length)

    def older(self, term: str, lo: int, hi: int, n: int) -> int:
        """How many documents in ``[lo, hi]`` hold ``term``, counted up to ``n``."""
        postings = self.terms.get(term)
        if postings is None:
            return 0
        a, b = postings.span(lo, hi)
        return min(n, b - a)

    def labelled(self, labels: Sequence[str], terms: Sequence[str], lo: int, hi: int) -> list[int]:
        """Documents in ``[lo, hi]`` holding one of ``labels`` and one of ``terms``."""
        marked = self._union(labels, lo, hi)
        if not len(marked):
            return []
        matched = self._union(terms, lo, hi)
        both: list[int] = np.intersect1d(marked, matched, assume_unique=True).tolist()
        return both

    def _union(self, terms: Iterable[str], lo: int, hi: int) -> _Ints:
        parts = []
        for term in terms:
            postings = self.terms.get(term)
            if postings is not None:
                a, b = postings.span(lo, hi)
                parts.append(postings.ids[a:b])
        return _distinct(np.concatenate(parts)) if parts else _EMPTY_INTS

    def resolve(self, docs: Sequence[int]) -> list[tuple[int, str, str, str]]:
        """(rowid, kind, target, body) of those of ``docs`` the scope holds."""
        known = self.docs
        return [(rowid, *known[rowid]) for rowid in docs if rowid in known]

    def neighbours(self, docs: Sequence[int], width: int, span: int) -> list[tuple[int, list[int]]]:
        """For each rowid, the scope's ``width`` documents just before it (within ``span``
        rowids, nearest first) and its ``width`` source documents just after it."""
        ids = self.ids
        at = np.array(docs, dtype=np.int64)
        first = ids.searchsorted(at - span, "left").tolist()
        start = ids.searchsorted(at, "left").tolist()
        end = ids.searchsorted(at, "right").tolist()
        last = ids.searchsorted(np.minimum(at + span, CLAIM_BASE - 1), "right").tolist()
        out = []
        for i, rowid in enumerate(docs):
            a, b, c, d = first[i], start[i], end[i], last[i]
            before = ids[max(a, b - width) : b][::-1].tolist()
            after = ids[c : min(d, c + width)].tolist()
            out.append((rowid, before + after))
        return out


class Candidates:
    """One lexical search's scored matches (:class:`zkr.store.lexical.Candidates`) as arrays.

    The matches stay in numpy from :meth:`MemIndex.window` to the best-first order; only the
    rowids (a list) and the scores the ranking asks for (:meth:`lookup`) become Python objects.
    ``add`` overwrites a document's score (``dict.update``), ``rescue`` keeps the one it has
    (``dict.setdefault``): the latest ``add`` holding a document gives its score, else the
    first ``rescue``.
    """

    __slots__ = ("_ids", "_scores", "defaults", "index", "updates")

    def __init__(self, index: MemIndex) -> None:
        self.index = index
        self.updates: list[tuple[_Ints, _Floats]] = []  # latest first
        self.defaults: list[tuple[_Ints, _Floats]] = []  # first first
        self._ids: _Ints | None = _EMPTY_INTS
        self._scores: _Floats = _EMPTY_FLOATS

    def add(self, terms: Sequence[str], lo: int, hi: int, n: int) -> tuple[int, int]:
        """Score the newest ``n`` matches of ``terms`` in ``[lo, hi]`` (:meth:`MemIndex.scored`);
        returns how many, and the oldest one's rowid (0 when none)."""
        ids, scores = self.index.window(terms, lo, hi, n)
        if not len(ids):
            return 0, 0
        self.updates.insert(0, (ids, scores))
        self._ids = None
        return len(ids), int(ids[0])

    def rescue(self, terms: Sequence[str], lo: int, hi: int) -> int:
        """Score every match of ``terms`` in ``[lo, hi]``, keeping the scores documents have;
        returns the oldest one's rowid (``hi + 1`` when none)."""
        ids, scores = self.index.window(terms, lo, hi, None)
        if not len(ids):
            return hi + 1
        self.defaults.append((ids, scores))
        self._ids = None
        return int(ids[0])

    def _merged(self) -> tuple[_Ints, _Floats]:
        """Every scored document, rowids ascending, with its score."""
        if self._ids is None:
            parts = self.updates + self.defaults  # (by precedence)
            if len(parts) == 1:
                self._ids, self._scores = parts[0]
            elif not self.defaults:  # windows: apart, each over rowids no other one spans
                parts.sort(key=lambda part: int(part[0][0]))
                self._ids = np.concatenate([ids for ids, _ in parts])
                self._scores = np.concatenate([scores for _, scores in parts])
            else:
                ids, first = np.unique(
                    np.concatenate([ids for ids, _ in parts]), return_index=True
                )  # (the first occurrence of each rowid: the one that counts)
                self._ids = ids
                self._scores = np.concatenate([scores for _, scores in parts])[first]
        return self._ids, self._scores

    def best_first(self, boosted: Collection[int], boost: float) -> list[int]:
        """The documents by score descending (times ``boost`` for those of ``boosted``), then
        rowid descending: ``sorted(scores, key=lambda r: (-boosted_score(r), -r))``."""
        ids, scores = self._merged()
        key = scores
        if boosted:
            marked = np.fromiter(boosted, dtype=np.int64, count=len(boosted))
            hit = np.isin(ids, marked)
            if hit.any():  # (the same double product as score * boost in Python)
                key = np.where(hit, scores * boost, scores)
        # ascending (score, rowid) reversed: rowids are distinct, so no tie is left
        order: list[int] = ids[np.lexsort((ids, key))[::-1]].tolist()
        return order

    def lookup(self, rowids: Sequence[int]) -> dict[int, float]:
        """The score of each of ``rowids`` that was scored (the others are left out)."""
        ids, scores = self._merged()
        if not len(ids) or not rowids:
            return {}
        at = np.array(rowids, dtype=np.int64)
        where = ids.searchsorted(at)
        held = ids.take(where, mode="clip") == at
        return dict(zip(at[held].tolist(), scores[where[held]].tolist(), strict=True))

    def places(self, rowids: Sequence[int], split: int) -> list[tuple[int, int]]:
        """``(i, n)`` of each of ``rowids`` (scored documents): ``n`` scored documents lie on
        its side of ``split``, ``i`` of them older than it (as
        :meth:`zkr.store.lexical.Scores.places`)."""
        ids, _ = self._merged()
        if not rowids:
            return []
        sources = int(ids.searchsorted(split))
        total = len(ids)
        older: list[int] = ids.searchsorted(np.array(rowids, dtype=np.int64)).tolist()
        return [
            (i, sources) if rowid < split else (i - sources, total - sources)
            for rowid, i in zip(rowids, older, strict=True)
        ]


def _newest_first(ids: _Ints, scores: _Floats) -> list[tuple[int, float]]:
    """(rowid, score) pairs of ascending ``ids``, newest (largest rowid) first."""
    rowids, values = ids.tolist(), scores.tolist()
    rowids.reverse()
    values.reverse()
    return list(zip(rowids, values, strict=True))


def _idf(rows: int, hit: int) -> float:
    """FTS5's IDF of a term with ``hit`` matches in the whole table (its tag keeps them in
    scope: FTS5's nHit) of ``rows`` rows, floored at :data:`MIN_IDF`."""
    idf = math.log((rows - hit + 0.5) / (hit + 0.5))
    return MIN_IDF if idf <= 0.0 else idf


def _distinct(ids: _Ints) -> _Ints:
    """The distinct values of ``ids``, ascending (a sort: numpy's hashing ``unique`` is
    slower on these sizes)."""
    ids = np.sort(ids)
    if len(ids) > 1:
        keep = np.empty(len(ids), dtype=bool)
        keep[0] = True
        np.not_equal(ids[1:], ids[:-1], out=keep[1:])
        ids = ids[keep]
    return ids


def _epoch(conn: sqlite3.Connection) -> str:
    try:
        row = conn.execute(_EPOCH_SQL).fetchone()
        conn.execute("SELECT 1 FROM zkr_search_log LIMIT 0")
    except sqlite3.OperationalError as exc:
        raise Unavailable(str(exc)) from None
    if row is None:
        raise Unavailable("the index has no epoch")
    return str(row[0])


def for_scope(
    conn: sqlite3.Connection, tag: str, mark: tuple[int, int] | None = None
) -> MemIndex | None:
    """The connection's in-memory index of scope ``tag``, current at the file's change mark
    (``mark``: as the caller read it inside the same read transaction; default: read here),
    or ``None`` when it cannot be kept (the caller reads FTS5)."""
    indexes: dict[str, MemIndex] | None = getattr(conn, "lexical_memory", None)
    if indexes is None:
        indexes = {}
        conn.lexical_memory = indexes  # type: ignore[attr-defined]
        conn.lexical_memory_off = set()  # type: ignore[attr-defined]
    off: set[str] = conn.lexical_memory_off  # type: ignore[attr-defined]
    if tag in off:
        return None
    index = indexes.pop(tag, None)
    if mark is None:
        mark = change_mark(conn)
    try:
        if index is None:
            index = MemIndex(tag)
            index.build(conn)
        else:
            index.refresh(conn, mark)
    except Unavailable as exc:
        if isinstance(exc, TooLarge):
            off.add(tag)  # not tried again on this connection
        return None
    indexes[tag] = index  # most recently used last
    while len(indexes) > MAX_SCOPES:
        del indexes[next(iter(indexes))]
    return index
