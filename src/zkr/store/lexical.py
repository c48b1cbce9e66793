"""The lexical lane: which sources match a query, which targets they stand for, in what order.

Matching and eligibility are exactly the reference's (spec/retrieval.md §3.2-3.3, §4): a source
matches when it contains one of the query's first 32 distinct words (or, for a query of one
word repeated, that phrase); a matched source that no claim was extracted from is returned as
itself, a live claim supported by its live evidence replaces it, and a source whose supported
claims are all non-live disappears (live mode); ``as_of`` applies the visibility rules of §4.
With a limit that does not cut, search therefore returns the reference's eligible set.

The order is our own, measured on LoCoMo (docs/retrieval-experiments.md) as spec/README.md
("Ranking") allows:

1. **Terms** (:func:`plan_query`). English stop words (:data:`STOP_WORDS`) are set aside; each
   other word is *required* (exact, as the reference matches it) and *ranked* on its stem: an
   ASCII word that loses an English ending and keeps four letters becomes a prefix query on
   that stem (``painting`` → ``"paint" *``), another purely alphabetic word of four or more
   letters a prefix query on itself, anything else stays exact (:func:`match_stem`).
2. **Scores.** Sources matching ``(required…) AND (ranked…)`` are scored by FTS5 ``bm25()`` on
   the reference's own ``source_fts`` (nothing extra is stored or maintained, so files written
   or edited by the reference rank the same way). For speed whatever the store size, at most
   :data:`WINDOW_ROWS` matches are scored per round, newest first (FTS rowid order); when more
   match, each ranked phrase with at most :data:`RARE_DOCS` older matches has all of them
   scored too (on the rare phrases alone), so a rare word still finds old memories. Stores
   whose matches fit one window are ranked exactly.
3. **Conversation neighbours.** Each of the :data:`LIFTERS` best eligible sources lifts the
   matched sources written just before and after it in the same scope (:data:`NEIGHBOURS` on
   each side, FTS rowid order, looked for within :data:`SPAN` rows) by :data:`LIFT` × its own
   score; a source keeps its largest lift. The answer to a question is often the turn next to
   the one that repeats the question's words.
4. **Order.** Rows ``(source, claim | None)`` by lifted score descending, then newest first,
   then sources before claims and claim id; de-duplicated into targets; at most ``cut``.
5. **Completion.** When fewer than ``cut`` targets result, sources matching only the query's
   stop words follow, newest first. A query of stop words only is ranked on them directly.

Scores are SQLite doubles and every order has a total tie-break, so a search is deterministic
for a given database state.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from zkr.model import AsOf, Target, TargetKind
from zkr.store.eligibility import SOURCE_LINKS_AS_OF_SQL, SOURCE_LINKS_SQL, Support

MAX_TERMS = 32
WINDOW_ROWS = 1000
RARE_DOCS = 200
LIFTERS = 20
SPAN = 32
NEIGHBOURS = 2
LIFT = 0.5
PREFIX_MIN = 4
STEM_MIN = 4

# Rust's char::is_alphanumeric is Unicode Alphabetic or Nd/Nl/No; for ASCII that is exactly
# [A-Za-z0-9], so the `regex` module (about 8 ms to import) is loaded only for other queries.
_ASCII_TERM = re.compile(r"[A-Za-z0-9]+")
_ASCII_WORD = re.compile(r"[a-z]+")


@functools.cache
def _unicode_patterns() -> tuple[Any, Any]:
    import regex  # lazy: only non-ASCII queries need Unicode properties

    return regex.compile(r"[\p{Alphabetic}\p{N}]+"), regex.compile(r"\p{Alphabetic}+")


def _find_terms(query: str) -> list[str]:
    """Maximal runs of alphanumeric characters (Unicode Alphabetic or N*)."""
    if query.isascii():
        return _ASCII_TERM.findall(query)
    pieces: list[str] = _unicode_patterns()[0].findall(query)
    return pieces


def _is_alphabetic(text: str) -> bool:
    if text.isascii():
        return text.isalpha()
    return _unicode_patterns()[1].fullmatch(text) is not None


_NO_ROWID = 2**63 - 1

# English function words and question words: they carry little meaning in a memory query
# ("when did we ..."), and matching them makes nearly every source a candidate.
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t d ll m re ve don didn doesn isn aren wasn weren hasn haven hadn wouldn
    couldn shouldn
    """.split()
)

# English inflectional/derivational endings stripped before a prefix match, longest first.
_SUFFIXES = tuple(
    sorted(
        (
            "ations ation ings ing edly ed ies ied iest ier es s ly ers er est ness ments ment "
            "ful y e"
        ).split(),
        key=len,
        reverse=True,
    )
)

# --------------------------------------------------------------------------- query → phrases


def phrase_expression(query: str) -> str:
    """The reference's phrase expression: the raw query as one FTS5 phrase, inner ``"``
    doubled (spec/retrieval.md §3.2). Kept for reference and tests; our lane does not
    rank phrase hits first (they contain every term and score highest anyway)."""
    return '"' + query.replace('"', '""') + '"'


def query_terms(query: str, limit: int = MAX_TERMS) -> list[str]:
    """Distinct alphanumeric pieces of the query, case-insensitively, first spelling wins,
    at most ``limit`` (the reference's term list, spec/retrieval.md §3.2)."""
    seen: set[str] = set()
    terms: list[str] = []
    for piece in _find_terms(query):
        key = piece.lower()
        if key in seen:
            continue
        seen.add(key)
        terms.append(piece)
        if len(terms) == limit:
            break
    return terms


def token_expression(query: str) -> str | None:
    """The reference's token expression ``"a" OR "b" OR …`` over the first 32 terms, or
    ``None`` with fewer than two terms (spec/retrieval.md §3.2)."""
    terms = query_terms(query)
    if len(terms) < 2:
        return None
    return " OR ".join(_quote(term) for term in terms)


def match_stem(term: str) -> str | None:
    """The prefix a (non-stop) term is ranked on, or ``None`` when it is ranked exactly.

    An ASCII word loses its longest English ending if at least four letters remain
    (``painting`` → ``paint``, ``studies`` → ``stud``); otherwise a purely alphabetic term of
    at least four letters is its own prefix (``Lisbon`` → ``lisbon``, ranking ``Lisbon's``
    too). Numbers, mixed terms and short words are ranked exactly.
    """
    lower = term.lower()
    if _ASCII_WORD.fullmatch(lower):
        for suffix in _SUFFIXES:
            if lower.endswith(suffix) and len(lower) - len(suffix) >= STEM_MIN:
                return lower[: -len(suffix)]
    if len(lower) >= PREFIX_MIN and _is_alphabetic(lower):
        return lower
    return None


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


class QueryPlan(NamedTuple):
    """The FTS5 phrases one query is searched with.

    ``required``: a scored source must match one of these exact phrases (the query's
    informative terms among its first 32 distinct terms: the reference's own matching, so
    stems never add a match). ``ranking``: the stem/prefix phrase of each of those terms; the
    source is scored by bm25 over both groups, so an exact occurrence counts twice and an
    inflection once. ``fallback``: exact phrases of the stop words among the first 32 terms,
    matched only to complete a short result.
    """

    required: tuple[str, ...]
    ranking: tuple[str, ...]
    fallback: tuple[str, ...]

    def expression(self, ranking: Sequence[str] | None = None) -> str:
        """The scored FTS5 expression, optionally over a subset of the ranking phrases."""
        chosen = self.ranking if ranking is None else ranking
        if not chosen:
            return _any_of(self.required)
        return f"({_any_of(self.required)}) AND ({_any_of(chosen)})"


def _any_of(phrases: Iterable[str]) -> str:
    return " OR ".join(phrases)


def plan_query(query: str) -> QueryPlan:
    """Split ``query`` into required, ranking and stop-word phrases (module docstring)."""
    pieces = _find_terms(query)
    if len(pieces) > 1 and len({piece.lower() for piece in pieces}) == 1:
        # One word repeated ("alice alice"): the reference has no token expression and
        # matches the phrase only, i.e. sources repeating the word (conformance records it).
        return QueryPlan((phrase_expression(query),), (), ())
    required: list[str] = []
    ranking: list[str] = []
    stop: list[str] = []
    for term in query_terms(query):
        if term.lower() in STOP_WORDS:
            stop.append(_quote(term))
            continue
        required.append(_quote(term))
        stem = match_stem(term)
        phrase = _quote(term) if stem is None else _quote(stem) + " *"
        if phrase.lower() not in {known.lower() for known in ranking}:
            ranking.append(phrase)
    if not required:
        return QueryPlan(tuple(stop), (), ())
    return QueryPlan(tuple(required), tuple(ranking), tuple(stop))


# --------------------------------------------------------------------------- SQL

# One round of scored matches, newest FTS rows first. Only rowid and bm25 are read here (both
# come from the index); the source id and scope live in the FTS content row and are read for
# the few rows that can reach the result (_RESOLVE_SQL). bm25 statistics span the whole table,
# all scopes, as in the reference (spec/retrieval.md §3.4).
_SCORED_SQL = """
SELECT rowid, bm25(source_fts) FROM source_fts
WHERE source_fts MATCH :expr AND rowid < :before
ORDER BY rowid DESC LIMIT :n
"""
# Later rounds (the first one did not give enough eligible rows, so this scope may hold few of
# the matches) read the scope with each row instead, so that rows of other scopes do not fill
# the round.
_SCORED_IN_SCOPE_SQL = """
SELECT rowid, bm25(source_fts), source_id FROM source_fts
WHERE source_fts MATCH :expr AND rowid < :before AND tenant_id = :t AND person_id = :p
ORDER BY rowid DESC LIMIT :n
"""
# Unscored in-scope matches (the stop-word completion), newest first.
_UNSCORED_SQL = """
SELECT rowid, source_id FROM source_fts
WHERE source_fts MATCH :expr AND rowid < :before AND tenant_id = :t AND person_id = :p
ORDER BY rowid DESC LIMIT :n
"""
# How many matches of one phrase are older than the scored window (stops counting at :n).
_OLDER_SQL = """
SELECT count(*) FROM (SELECT 1 FROM source_fts
                      WHERE source_fts MATCH :expr AND rowid < :before LIMIT :n)
"""
# Every match of the rare phrases older than the window.
_RARE_SQL = """
SELECT rowid, bm25(source_fts) FROM source_fts
WHERE source_fts MATCH :expr AND rowid < :before
"""
# FTS rows -> source ids, keeping the rows of the request's scope (spec/retrieval.md §3.3 1).
_RESOLVE_SQL = """
SELECT h.value, f.source_id
FROM json_each(:rowids) AS h
CROSS JOIN source_fts AS f ON f.rowid = h.value
WHERE f.tenant_id = :t AND f.person_id = :p
"""

# The NEIGHBOURS in-scope FTS rows on each side of each given row, looked for within SPAN
# rowids. FTS rowids follow insertion order, so these are the memories written just before
# and after it in the same scope: the surrounding turns of a conversation.
_NEIGHBOURS_SQL = """
SELECT h.value,
  (SELECT json_group_array(rowid) FROM (
     SELECT f.rowid FROM source_fts AS f
     WHERE f.rowid < h.value AND f.rowid >= h.value - :span
       AND f.tenant_id = :t AND f.person_id = :p
     ORDER BY f.rowid DESC LIMIT :w)),
  (SELECT json_group_array(rowid) FROM (
     SELECT f.rowid FROM source_fts AS f
     WHERE f.rowid > h.value AND f.rowid <= h.value + :span
       AND f.tenant_id = :t AND f.person_id = :p
     ORDER BY f.rowid LIMIT :w))
FROM json_each(:rowids) AS h
"""


# --------------------------------------------------------------------------- the lane


class _Lane:
    """One lexical search: scope, time mode, and what has been resolved and checked so far.

    Matches are keyed by FTS rowid. ``source`` maps a resolved rowid to its source id (``None``
    when the row belongs to another scope); ``targets`` maps a checked rowid to the targets its
    source stands for (empty: not eligible).
    """

    def __init__(
        self, conn: sqlite3.Connection, tenant_id: str, person_id: str, as_of: AsOf | None
    ) -> None:
        self.conn = conn
        self.params: dict[str, object] = {"t": tenant_id, "p": person_id}
        if as_of is not None:
            self.params["v"] = as_of.valid_at
            self.params["r"] = as_of.recorded_at
        self.as_of = as_of
        self.source: dict[int, str | None] = {}
        self.targets: dict[int, list[Target]] = {}

    def _query(self, sql: str, **params: object) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, {**self.params, **params}).fetchall()

    def resolve(self, rowids: Iterable[int]) -> None:
        """Read the source id of each unresolved rowid (``None`` outside the scope)."""
        todo = [rowid for rowid in rowids if rowid not in self.source]
        if not todo:
            return
        for rowid in todo:
            self.source[rowid] = None
        for rowid, source_id in self._query(_RESOLVE_SQL, rowids=json.dumps(todo)):
            self.source[rowid] = source_id

    def check(self, rowids: Sequence[int]) -> None:
        """Record the targets each rowid's source stands for (spec/retrieval.md §3.3, §4)."""
        self.resolve(rowids)
        todo = [rowid for rowid in rowids if rowid not in self.targets]
        ids = sorted({sid for rowid in todo if (sid := self.source[rowid]) is not None})
        support = Support()
        if ids:
            sql = SOURCE_LINKS_SQL if self.as_of is None else SOURCE_LINKS_AS_OF_SQL
            support.add_rows(self._query(sql, ids=json.dumps(ids)))
        hide_linked = self.as_of is None  # live mode: any supporting link hides the source
        for rowid in todo:
            sid = self.source[rowid]
            if sid is None or sid not in support.claims:
                self.targets[rowid] = []  # other scope, not live / not yet, no live evidence
            else:
                self.targets[rowid] = support.targets(TargetKind.SOURCE, sid, hide_linked)

    def neighbours(self, rowids: Sequence[int]) -> dict[int, list[int]]:
        """The in-scope FTS rows written just before and after each of ``rowids``."""
        found: dict[int, list[int]] = {}
        for rowid, before, after in self._query(
            _NEIGHBOURS_SQL, rowids=json.dumps(list(rowids)), w=NEIGHBOURS, span=SPAN
        ):
            found[rowid] = json.loads(before) + json.loads(after)
        return found

    # ------------------------------------------------------------------ scored matches

    def scored(self, plan: QueryPlan, cut: int) -> tuple[list[Target], set[int]]:
        """Targets of the scored matches in ranked order (at most ``cut``), and the
        rowids already accounted for."""
        expr = plan.expression()
        scores: dict[int, float] = {}
        before = _NO_ROWID
        window = WINDOW_ROWS
        while True:
            if before == _NO_ROWID:
                rows = self._query(_SCORED_SQL, expr=expr, before=before, n=window)
            else:
                rows = self._query(_SCORED_IN_SCOPE_SQL, expr=expr, before=before, n=window)
                self.source.update((row[0], row[2]) for row in rows)
            for rowid, bm25, *_ in rows:
                scores[rowid] = -bm25
            exhausted = len(rows) < window
            if not exhausted:
                if before == _NO_ROWID:
                    self._rescue_rare(plan, rows[-1][0], scores)
                before = rows[-1][0]
            ranked = self._rank(scores, cut)
            if exhausted or len(ranked) >= cut:
                return ranked, set(scores)
            window *= 2  # few eligible rows in this scope: widen geometrically

    def _rescue_rare(self, plan: QueryPlan, before: int, scores: dict[int, float]) -> None:
        """Score every match older than the window of the ranking phrases (or, without any,
        the required ones) that have at most RARE_DOCS such matches, on those alone."""
        phrases = plan.ranking or plan.required
        rare = [
            phrase
            for phrase in phrases
            if self._query(_OLDER_SQL, expr=phrase, before=before, n=RARE_DOCS + 1)[0][0]
            <= RARE_DOCS
        ]
        if not rare:
            return
        expr = plan.expression(rare) if plan.ranking else _any_of(rare)
        for rowid, bm25 in self._query(_RARE_SQL, expr=expr, before=before):
            scores.setdefault(rowid, -bm25)

    def _rank(self, scores: dict[int, float], cut: int) -> list[Target]:
        order = sorted(scores, key=lambda rowid: (-scores[rowid], -rowid))
        # Check best-first until the checked rows give `cut` targets and LIFTERS eligible
        # sources: a row left unchecked scores no more than every checked one.
        checked = 0
        found: set[Target] = set()
        eligible: list[int] = []
        batch = cut + cut // 4 + 8
        while checked < len(order) and (len(found) < cut or len(eligible) < LIFTERS):
            chunk = order[checked : checked + batch]
            checked += len(chunk)
            self.check(chunk)
            for rowid in chunk:
                if self.targets[rowid]:
                    eligible.append(rowid)
                    found.update(self.targets[rowid])
        lift: dict[int, float] = {}
        for lifter, near in self.neighbours(eligible[:LIFTERS]).items():
            for rowid in near:
                if rowid in scores and scores[lifter] > lift.get(rowid, 0.0):
                    lift[rowid] = scores[lifter]
        lifted = [rowid for rowid in lift if rowid not in self.targets]
        self.check(lifted)
        eligible.extend(rowid for rowid in lifted if self.targets[rowid])

        def final(rowid: int) -> float:
            return scores[rowid] + LIFT * lift.get(rowid, 0.0)

        rows = [
            (-final(rowid), -rowid, t.kind is TargetKind.CLAIM, t.id, t)
            for rowid in eligible
            for t in self.targets[rowid]
        ]
        rows.sort(key=lambda row: row[:4])
        return _distinct((row[4] for row in rows), cut, set())

    # ------------------------------------------------------------------ completion

    def completion(
        self, plan: QueryPlan, ranked: list[Target], matched: set[int], cut: int
    ) -> list[Target]:
        """Append targets of sources matching only stop words, newest first, up to ``cut``."""
        expr = _any_of(plan.fallback)
        seen = set(ranked)
        before = _NO_ROWID
        # most sources stand for one target: read a little more than the shortfall, then
        # widen geometrically when this scope holds few of the matches
        window = 2 * (cut - len(ranked)) + 16
        while len(ranked) < cut:
            rows = self._query(_UNSCORED_SQL, expr=expr, before=before, n=window)
            self.source.update(rows)
            fresh = [rowid for rowid, _ in rows if rowid not in matched]
            self.check(fresh)
            for rowid in fresh:
                matched.add(rowid)
                ranked.extend(_distinct(self.targets[rowid], cut - len(ranked), seen))
                if len(ranked) >= cut:
                    break
            if len(rows) < window:
                break
            before = rows[-1][0]
            window *= 2
        return ranked


def _distinct(targets: Iterable[Target], room: int, seen: set[Target]) -> list[Target]:
    """The first ``room`` targets not in ``seen`` (``seen`` is updated)."""
    out: list[Target] = []
    if room <= 0:
        return out
    for target in targets:
        if target in seen:
            continue
        seen.add(target)
        out.append(target)
        if len(out) == room:
            break
    return out


def lexical_ranking(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: str,
    cut: int,
    as_of: AsOf | None = None,
) -> list[Target]:
    """The lexical list: at most ``cut`` distinct eligible targets, best first (a target's
    lexical rank is its index). Live mode, or historical mode when ``as_of`` is given."""
    plan = plan_query(query)
    if not plan.required or cut <= 0:
        return []
    lane = _Lane(conn, tenant_id, person_id, as_of)
    ranked, matched = lane.scored(plan, cut)
    if len(ranked) < cut and plan.fallback:
        ranked = lane.completion(plan, ranked, matched, cut)
    return ranked
