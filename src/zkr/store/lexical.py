"""The lexical lane: FTS5 expressions and candidate rows (spec/retrieval.md §3-4).

Two passes: the whole query as one FTS5 phrase, then (when the query has at least two distinct
terms) an OR of its quoted terms. Each pass yields ``(source_id, claim_id | None)`` rows in bm25
order, cut at ``C`` rows; rows become Claim targets when a live claim is supported by the
source's live evidence, else Source targets. Claims therefore replace the source they were
extracted from, and a source whose supported claims are all non-live disappears (live mode).
"""

from __future__ import annotations

import sqlite3

import regex

from zkr.model import AsOf, Target, TargetKind

MAX_TERMS = 32
_TERM = regex.compile(r"[\p{Alphabetic}\p{N}]+")

# Live claim (spec/retrieval.md §1): accepted, both intervals open, retrievable tier, processed.
LIVE_CLAIM = (
    "c.status = 'accepted' AND c.valid_until IS NULL AND c.recorded_until IS NULL"
    " AND c.tier IN ('short_term', 'long_term') AND c.processing_state = 'processed'"
)
SUPPORTS = "'\"supports\"'"


def phrase_expression(query: str) -> str:
    """The whole raw query as one FTS5 phrase, inner ``"`` doubled (spec/retrieval.md §3.2)."""
    return '"' + query.replace('"', '""') + '"'


def query_terms(query: str) -> list[str]:
    """Distinct alphanumeric pieces of the query (first spelling wins), at most 32."""
    seen: set[str] = set()
    terms: list[str] = []
    for piece in _TERM.findall(query):
        key = piece.lower()
        if key in seen:
            continue
        seen.add(key)
        terms.append(piece)
        if len(terms) == MAX_TERMS:
            break
    return terms


def token_expression(query: str) -> str | None:
    """``"a" OR "b" OR …`` over the query's terms, or ``None`` with fewer than two terms."""
    terms = query_terms(query)
    if len(terms) < 2:
        return None
    return " OR ".join(f'"{term}"' for term in terms)


# Candidate rows for live mode (spec/retrieval.md §3.3): FTS hits in scope, live source, each
# live evidence row, its supporting links to live claims; a (source, NULL) row survives only
# when no live evidence of the source has any supporting link at all.
_LIVE_SQL = f"""
SELECT h.source_id, lc.claim_id
FROM (SELECT source_id, bm25(source_fts) AS score FROM source_fts
      WHERE source_fts MATCH :expr AND tenant_id = :t AND person_id = :p) AS h
JOIN sources s ON s.id = h.source_id AND s.tenant_id = :t AND s.person_id = :p
     AND s.deleted_at IS NULL
JOIN evidence e ON e.source_id = s.id AND e.tenant_id = :t AND e.person_id = :p
     AND e.deleted_at IS NULL
LEFT JOIN (SELECT ce.evidence_id, c.id AS claim_id
           FROM claim_evidence ce
           JOIN claims c ON c.id = ce.claim_id AND c.tenant_id = :t AND c.person_id = :p
           WHERE ce.tenant_id = :t AND ce.person_id = :p AND ce.relation = {SUPPORTS}
             AND {LIVE_CLAIM}) AS lc ON lc.evidence_id = e.id
WHERE lc.claim_id IS NOT NULL OR NOT EXISTS (
      SELECT 1 FROM evidence e2
      JOIN claim_evidence ce2 ON ce2.evidence_id = e2.id AND ce2.tenant_id = :t
           AND ce2.person_id = :p AND ce2.relation = {SUPPORTS}
      WHERE e2.source_id = s.id AND e2.tenant_id = :t AND e2.person_id = :p
        AND e2.deleted_at IS NULL)
ORDER BY h.score, h.source_id, lc.claim_id
LIMIT :cut
"""

# Historical mode (spec/retrieval.md §4): eligibility at valid time :v and recorded time :r.
VISIBLE_CLAIM = (
    "c.status IN ('accepted', 'superseded') AND c.processing_state = 'processed'"
    " AND c.valid_from <= :v AND (c.valid_until IS NULL OR c.valid_until > :v)"
    " AND c.recorded_from <= :r AND (c.recorded_until IS NULL OR c.recorded_until > :r)"
)
_AS_OF_SQL = f"""
SELECT h.source_id, vc.claim_id
FROM (SELECT source_id, bm25(source_fts) AS score FROM source_fts
      WHERE source_fts MATCH :expr AND tenant_id = :t AND person_id = :p) AS h
JOIN sources s ON s.id = h.source_id AND s.tenant_id = :t AND s.person_id = :p
     AND s.deleted_at IS NULL AND s.captured_at <= :v AND s.recorded_at <= :r
JOIN evidence e ON e.source_id = s.id AND e.tenant_id = :t AND e.person_id = :p
     AND e.deleted_at IS NULL AND e.recorded_at <= :r
LEFT JOIN (SELECT ce.evidence_id, c.id AS claim_id
           FROM claim_evidence ce
           JOIN claims c ON c.id = ce.claim_id AND c.tenant_id = :t AND c.person_id = :p
           WHERE ce.tenant_id = :t AND ce.person_id = :p AND ce.relation = {SUPPORTS}
             AND {VISIBLE_CLAIM}) AS vc ON vc.evidence_id = e.id
WHERE vc.claim_id IS NOT NULL OR NOT EXISTS (
      SELECT 1 FROM evidence e2
      JOIN claim_evidence ce2 ON ce2.evidence_id = e2.id AND ce2.tenant_id = :t
           AND ce2.person_id = :p AND ce2.relation = {SUPPORTS}
      JOIN claims c ON c.id = ce2.claim_id AND c.tenant_id = :t AND c.person_id = :p
      WHERE e2.source_id = s.id AND e2.tenant_id = :t AND e2.person_id = :p
        AND e2.deleted_at IS NULL AND e2.recorded_at <= :r AND {VISIBLE_CLAIM})
ORDER BY h.score, h.source_id, vc.claim_id
LIMIT :cut
"""


def _rows(
    conn: sqlite3.Connection,
    expr: str,
    tenant_id: str,
    person_id: str,
    cut: int,
    as_of: AsOf | None,
) -> list[tuple[str, str | None]]:
    params: dict[str, object] = {"expr": expr, "t": tenant_id, "p": person_id, "cut": cut}
    if as_of is None:
        sql = _LIVE_SQL
    else:
        sql = _AS_OF_SQL
        params["v"] = as_of.valid_at
        params["r"] = as_of.recorded_at
    return [(row[0], row[1]) for row in conn.execute(sql, params)]


def lexical_ranking(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    query: str,
    cut: int,
    as_of: AsOf | None = None,
) -> list[Target]:
    """The lexical list ``Lx`` of spec/retrieval.md §3.5: phrase hits, then token-only hits,
    de-duplicated, at most ``cut`` targets; a target's rank is its index."""
    ranked: list[Target] = []
    seen: set[Target] = set()

    def take(rows: list[tuple[str, str | None]]) -> None:
        for source_id, claim_id in rows:
            if len(ranked) >= cut:
                return
            target = (
                Target(TargetKind.CLAIM, claim_id)
                if claim_id is not None
                else Target(TargetKind.SOURCE, source_id)
            )
            if target not in seen:
                seen.add(target)
                ranked.append(target)

    take(_rows(conn, phrase_expression(query), tenant_id, person_id, cut, as_of))
    if len(ranked) < cut:
        tokens = token_expression(query)
        if tokens is not None:
            take(_rows(conn, tokens, tenant_id, person_id, cut, as_of))
    return ranked
