"""``search`` and ``get``: bounded, cited retrieval packs (spec/retrieval.md §2, §6-8).

A search runs the lexical lane (live or ``as_of``), then — only with a query embedding (the
caller's ``query_embedding``, or the local model's when the database records one,
:mod:`zkr.store.embedconfig`) and no ``as_of`` — the dense lane, fuses both
(:mod:`zkr.store.fusion`: fixed pools, weighted reciprocal rank, absolute relevance) and
materialises at most ``limit`` cited items. Every item cites exactly one live
evidence id; ``gaps`` is ``["no cited memory matched"]`` exactly when there are no items.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from zkr.errors import NotFound, StorageError
from zkr.model import (
    NO_MATCH_GAP,
    AsOf,
    GetRequest,
    RetrievalItem,
    RetrievalPack,
    SearchRequest,
    Target,
    TargetKind,
)
from zkr.store.db import read_tx
from zkr.store.driver import Connection, change_mark, is_postgres
from zkr.store.eligibility import (
    CLAIM_CITATION,
    CLAIM_CITATION_AS_OF,
    LIVE_CLAIM,
    LIVE_EVIDENCE,
    LIVE_SOURCE,
    SOURCE_CITATION,
    VISIBLE_CLAIM,
)
from zkr.text import bounded_limit, cap_excerpt, require_scope, require_text

FULL_RELEVANCE = 10_000
RRF_SCALE = 1_000_000
RRF_OFFSET = 61  # k = 60 with 1-based ranks; ranks here are 0-based


def search(conn: sqlite3.Connection, req: SearchRequest) -> RetrievalPack:
    """Run one search (read-only). Raises ``InvalidInput`` for blank scope/query or a bad
    query embedding, ``NotFound`` if a ranked target cannot be materialised."""
    # the lexical lane (terms, stems, zkr's index) is imported here: ``get`` does not need it
    from zkr.store.lexical import lexical_search
    from zkr.store.search_index import ensure_current

    require_scope(req.tenant_id, req.person_id)
    require_text(req.query, "query")
    limit = bounded_limit(req.limit)
    # (skipped by a connection that never found the index current: a one-shot CLI call, PostgreSQL)
    if req.query_embedding is None and getattr(conn, "search_ready", None) is not None:
        pack = _warm_lexical(conn, req, limit)
        if pack is not None:
            return pack
    query_embedding = req.query_embedding
    if query_embedding is None and req.as_of is None:
        from zkr.store.embedconfig import query_embedding as local_query_embedding

        # a database filled by embed-pending: embed the query with the recorded local model
        query_embedding = local_query_embedding(conn, req.query)
    hybrid = query_embedding is not None and req.as_of is None
    # fusion takes a fixed pool from each lane (zkr.store.fusion), whatever the limit
    cut = max(100, limit) if hybrid else limit
    if query_embedding is not None and req.as_of is None:
        from zkr.store import changes
        from zkr.store.vectors import validate_query

        # §5.1 checks need no data, so they come before anything is read or written (the
        # lexical lane cannot fail on a valid scope and query, so the order is unobservable)
        validate_query(query_embedding)
    try:
        if is_postgres(conn):  # its index is kept per scope (zkr.store.pg.search)
            from zkr.store.pg import search as pg_search

            pg_search.ensure_current(conn, req.tenant_id, req.person_id)  # type: ignore[arg-type]
        else:
            ensure_current(conn)  # the search index reflects every committed write
            if hybrid:
                changes.ensure(conn)  # the change log the dense lane's caches are trusted by
    except sqlite3.Error as exc:
        raise StorageError(str(exc)) from None
    with read_tx(conn):
        mark = None if is_postgres(conn) else change_mark(conn)  # (stands until the tx ends)
        ranked = lexical_search(conn, req.tenant_id, req.person_id, req.query, cut, req.as_of, mark)
        if query_embedding is None or req.as_of is not None:
            return _cited(conn, req, ranked[:limit], mark)
        from zkr.store import embedconfig, fusion, lanescan

        lexical = [r.target for r in ranked]
        # calibrated only for the query this request embedded with the local model: a caller's
        # vector is a caller's vector, whether or not this process loaded the model before
        # (the answer must not depend on what the process did earlier: CLI = serve)
        calibration = (
            embedconfig.calibration(conn, query_embedding) if req.query_embedding is None else None
        )
        if calibration is None:  # a caller's model: its scores as they are
            # a one-shot process's warm lane without numpy (zkr.store.lanescan), else numpy
            found = lanescan.scored(
                conn, req.tenant_id, req.person_id, query_embedding, fusion.POOL, lexical
            )
            if found is None:
                from zkr.store import dense  # numpy

                found = dense.scored(
                    conn, req.tenant_id, req.person_id, query_embedding, fusion.POOL, lexical
                )
            scored = found
        else:  # the local model's calibrated lane: in conversation order (fusion.dense_order)
            from zkr.store import dense  # numpy

            candidates = dense.in_context(
                conn, req.tenant_id, req.person_id, query_embedding, fusion.CONTEXT_POOL, lexical
            )
            scored = fusion.dense_order(candidates, req.query, calibration[0])
        fused = fusion.fuse([(r.target, r.relevance) for r in ranked], scored, limit, calibration)
        return _cited(conn, req, fused, mark)


def _warm_lexical(conn: sqlite3.Connection, req: SearchRequest, limit: int) -> RetrievalPack | None:
    """A lexical search as one read transaction (``BEGIN``, one ``PRAGMA``, ``COMMIT``) when
    this connection already knows the answers of the checks :func:`search` makes before it,
    at the change mark read inside that transaction: the search index is current
    (:func:`zkr.store.search_index.current_at`) and, live, no local model is recorded
    (:func:`zkr.store.embedconfig.none_at`). The same pack :func:`search` gives, or ``None``
    (nothing was done) when they are not known: the caller takes the full path."""
    from zkr.store.embedconfig import none_at
    from zkr.store.lexical import lexical_search
    from zkr.store.search_index import current_at

    with read_tx(conn):
        mark = change_mark(conn)  # (stands until the tx ends)
        if not current_at(conn, mark) or (req.as_of is None and not none_at(conn, mark)):
            return None
        ranked = lexical_search(
            conn, req.tenant_id, req.person_id, req.query, limit, req.as_of, mark
        )
        return _cited(conn, req, ranked, mark)


def _cited(
    conn: sqlite3.Connection,
    req: SearchRequest,
    ranked: Sequence[tuple[Target, int]],
    mark: tuple[int, int] | None,
) -> RetrievalPack:
    """The pack of ``ranked`` (targets best first, each with its relevance in basis points):
    each materialised with its excerpt and citation (§7, :func:`materialize_all`, through the
    connection's record of known targets at change mark ``mark``, read in the same
    transaction), and the no-match gap when none is left (spec/retrieval.md §2)."""
    known = _known(conn, req.tenant_id, req.person_id, req.as_of, mark)
    items = materialize_all(conn, req.tenant_id, req.person_id, ranked, req.as_of, known)
    return RetrievalPack(req.query, items, [] if items else [NO_MATCH_GAP])


def fuse(lanes: list[list[Target]], limit: int) -> list[tuple[Target, int]]:
    """Reciprocal-rank fusion (spec/retrieval.md §6).

    ``fused = Σ floor(1e6 / (61 + rank))`` over the lanes holding the target; relevance is
    ``floor(fused * 10000 / max fused)``; ordered by relevance descending, then target order;
    at most ``limit`` targets.
    """
    return fuse_ranked([list(enumerate(lane)) for lane in lanes], limit)


def fuse_ranked(lanes: list[list[tuple[int, Target]]], limit: int) -> list[tuple[Target, int]]:
    """:func:`fuse` over lanes given as ``(0-based rank, target)`` pairs."""
    scores: dict[Target, int] = {}
    for lane in lanes:
        for rank, target in lane:
            scores[target] = scores.get(target, 0) + RRF_SCALE // (RRF_OFFSET + rank)
    if not scores:
        return []
    best = max(scores.values())
    ranked = [(target, fused * FULL_RELEVANCE // best) for target, fused in scores.items()]
    ranked.sort(key=lambda pair: (-pair[1], pair[0].sort_key()))
    return ranked[:limit]


def get(conn: sqlite3.Connection, req: GetRequest) -> RetrievalItem:
    """One live cited memory by target, relevance 10000 (spec/retrieval.md §8).

    Raises ``NotFound`` for unknown, other-scope or non-live targets.
    """
    require_scope(req.tenant_id, req.person_id)
    with read_tx(conn):
        return materialize(conn, req.tenant_id, req.person_id, req.target, FULL_RELEVANCE, None)


# Materialisation (spec/retrieval.md §7): excerpt text and the smallest qualifying evidence id
# of the targets of one kind listed by {ids}: a one-column ``h.value`` relation (_LISTS).
_CLAIM_LIVE_SQL = f"""
SELECT c.id, c.subject, c.predicate, c.value, {CLAIM_CITATION}
FROM {{ids}} CROSS JOIN claims c ON c.id = h.value AND c.tenant_id = :t AND c.person_id = :p
WHERE {LIVE_CLAIM}
"""
# Historical claim targets (§4): visible at (:v, :r), citing evidence eligible then.
_CLAIM_AS_OF_SQL = f"""
SELECT c.id, c.subject, c.predicate, c.value, {CLAIM_CITATION_AS_OF}
FROM {{ids}} CROSS JOIN claims c ON c.id = h.value AND c.tenant_id = :t AND c.person_id = :p
WHERE {VISIBLE_CLAIM}
"""
# Source targets use the live rules in both modes (§4 last sentence).
_SOURCE_SQL = f"""
SELECT s.id, s.content, {SOURCE_CITATION}
FROM {{ids}} CROSS JOIN sources s ON s.id = h.value AND s.tenant_id = :t AND s.person_id = :p
WHERE {LIVE_SOURCE}
"""
# Evidence targets: the evidence live, its source live; it cites itself.
_EVIDENCE_SQL = f"""
SELECT e.id, e.quote, e.id
FROM {{ids}} CROSS JOIN evidence e ON e.id = h.value AND e.tenant_id = :t AND e.person_id = :p
JOIN sources s ON s.id = e.source_id AND s.tenant_id = :t AND s.person_id = :p AND {LIVE_SOURCE}
WHERE {LIVE_EVIDENCE}
"""
# One id as given (``get``), or a JSON array of ids (a pack); CROSS JOIN keeps each lookup on
# the table's primary key.
_LISTS = {False: "(SELECT :ids AS value) AS h", True: "json_each(:ids) AS h"}
_SQL = {
    (name, many): sql.format(ids=_LISTS[many])
    for name, sql in (
        ("claim", _CLAIM_LIVE_SQL),
        ("claim_as_of", _CLAIM_AS_OF_SQL),
        ("source", _SOURCE_SQL),
        ("evidence", _EVIDENCE_SQL),
    )
    for many in (False, True)
}


def materialize(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    target: Target,
    relevance: int,
    as_of: AsOf | None,
) -> RetrievalItem:
    """Turn a ranked target into a cited item, or raise ``NotFound``."""
    return materialize_all(conn, tenant_id, person_id, [(target, relevance)], as_of)[0]


KNOWN_TARGETS = 20_000


def _known(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    as_of: AsOf | None,
    mark: tuple[int, int] | None = None,
) -> dict[Target, tuple[str, str]] | None:
    """The connection's record of materialised targets (excerpt text, citation) for this
    scope and time mode, valid while the file's change mark stands (like the lexical lane's
    cache: :func:`zkr.store.driver.change_mark`, read inside the caller's read transaction);
    ``None`` on connections zkr did not open. At most :data:`KNOWN_TARGETS` are kept.
    ``mark``: the change mark as the caller read it in the same transaction, if it has."""
    if not isinstance(conn, Connection):
        return None
    key = (change_mark(conn) if mark is None else mark, tenant_id, person_id, as_of)
    kept: tuple[object, dict[Target, tuple[str, str]]] | None = getattr(conn, "known_targets", None)
    if kept is None or kept[0] != key or len(kept[1]) > KNOWN_TARGETS:
        kept = (key, {})
        conn.known_targets = kept  # type: ignore[attr-defined]
    return kept[1]


def materialize_all(
    conn: sqlite3.Connection,
    tenant_id: str,
    person_id: str,
    ranked: Sequence[tuple[Target, int]],
    as_of: AsOf | None,
    known: dict[Target, tuple[str, str]] | None = None,
) -> list[RetrievalItem]:
    """:func:`materialize` of each ``(target, relevance)`` (distinct targets), in order, with
    one statement per target kind. Raises ``NotFound`` when any one cannot be. ``known``:
    targets materialised before on the same file state, scope and time mode (:func:`_known`);
    read from it and added to."""
    found: dict[Target, tuple[str, str]] = {} if known is None else known
    wanted: dict[TargetKind, list[str]] = {}
    for target, _ in ranked:
        if target not in found:
            wanted.setdefault(target.kind, []).append(target.id)
    for kind, ids in wanted.items():
        params: dict[str, object] = {"t": tenant_id, "p": person_id}
        name = kind.value
        if kind is TargetKind.CLAIM and as_of is not None:
            name = "claim_as_of"
            params["v"] = as_of.valid_at
            params["r"] = as_of.recorded_at
        many = len(ids) > 1
        params["ids"] = json.dumps(ids) if many else ids[0]
        for row in conn.execute(_SQL[name, many], params):
            if row[-1] is None:
                continue
            text = f"{row[1]} {row[2]} {row[3]}" if kind is TargetKind.CLAIM else row[1]
            found.setdefault(Target(kind, row[0]), (text, row[-1]))
    items = []
    for target, relevance in ranked:
        hit = found.get(target)
        if hit is None:
            raise NotFound()
        items.append(RetrievalItem(target, cap_excerpt(hit[0]), relevance, [hit[1]]))
    return items
