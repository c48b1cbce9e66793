"""``trace``, ``lookup`` and ``browse``: read-only views of what memory holds (docs/inspect.md).

These are zkr's own commands (the reference has none of them); they never write. Liveness is
asked of :mod:`zkr.store.eligibility` (spec/retrieval.md §1, §4), so a record these views call
``live`` is exactly one search may return. Deleted text is never shown: a tombstoned source's
content and its evidence quotes are ``null`` here.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable
from typing import Any

from zkr.errors import InvalidInput, NotFound
from zkr.model import (
    BrowseCursor,
    BrowsePage,
    BrowseRequest,
    ClaimKind,
    LookupClaim,
    LookupRequest,
    ProcessingState,
    SourceKind,
    Status,
    TargetKind,
    Tier,
    Trace,
    TraceRequest,
)
from zkr.store import eligibility
from zkr.store.db import read_tx
from zkr.store.driver import is_postgres
from zkr.store.terms import fold
from zkr.text import bounded_limit, cap_excerpt, require_scope, require_text

# --------------------------------------------------------------------------- record shapes

_SOURCE_COLUMNS = (
    "s.id, s.kind, s.content, s.captured_at, s.recorded_at, s.deleted_at, s.revision,"
    " s.ingestion_key, s.origin_evidence_id, s.origin_claim_id"
)
_CLAIM_COLUMNS = (
    "c.id, c.subject, c.predicate, c.value, c.kind, c.valid_from, c.valid_until,"
    f" c.recorded_from, c.recorded_until, c.status, c.tier, c.processing_state,"
    f" {eligibility.live_claim('c')}"
)


def _unquote(value: str) -> str:
    """A JSON-quoted enum column (``"conversation"``) as its bare value."""
    return value[1:-1] if value.startswith('"') and value.endswith('"') else value


def source_json(row: tuple[Any, ...]) -> dict[str, Any]:
    """A source row (``_SOURCE_COLUMNS``); ``content`` is ``null`` once it is deleted."""
    deleted = row[5] is not None
    return {
        "id": row[0],
        "kind": _unquote(row[1]),
        "content": None if deleted else row[2],
        "captured_at": row[3],
        "recorded_at": row[4],
        "deleted_at": row[5],
        "revision": row[6],
        "ingestion_key": row[7],
        "origin_evidence_id": row[8],
        "origin_claim_id": row[9],
        "live": not deleted,
    }


def claim_json(row: tuple[Any, ...]) -> dict[str, Any]:
    """A claim row (``_CLAIM_COLUMNS``) with its intervals and whether search may return it."""
    return {
        "id": row[0],
        "subject": row[1],
        "predicate": row[2],
        "value": row[3],
        "kind": row[4],
        "valid_time": {"from": row[5], "until": row[6]},
        "recorded_time": {"from": row[7], "until": row[8]},
        "status": row[9],
        "tier": row[10],
        "processing_state": row[11],
        "live": bool(row[12]),
    }


def _ids(values: set[str]) -> str:
    return json.dumps(sorted(values))


def _objects(
    conn: sqlite3.Connection,
    sql: str,
    params: dict[str, Any],
    keys: tuple[str, ...],
    **convert: Callable[[Any], Any],
) -> list[dict[str, Any]]:
    """Each row of ``sql`` as an object with ``keys`` (in column order), the named values
    passed through ``convert`` (stored encodings to their JSON form)."""
    out = []
    for row in conn.execute(sql, params):
        item = dict(zip(keys, row, strict=True))
        for key, function in convert.items():
            item[key] = function(item[key])
        out.append(item)
    return out


# --------------------------------------------------------------------------- trace


def trace(conn: sqlite3.Connection, req: TraceRequest) -> Trace:
    """The record ``req.target`` and its neighbourhood (docs/inspect.md, "trace").

    A source brings its evidence and every claim linked to that evidence; an evidence row
    brings its source (and so the same); a claim brings its correction chain in both directions
    (every claim it superseded and that superseded it, transitively). Then every claim's links,
    the evidence and sources they cite, the corrections between the claims, the profile entries
    they back and the reviews citing the evidence. Raises ``NotFound`` when the target is not
    in scope (superseded, retracted and deleted records are traceable).
    """
    require_scope(req.tenant_id, req.person_id)
    t, p = req.tenant_id, req.person_id
    scope = {"t": t, "p": p}
    with read_tx(conn):
        source_ids: set[str] = set()
        claim_ids: set[str] = set()
        if req.target.kind is TargetKind.CLAIM:
            found = conn.execute(
                "SELECT id FROM claims WHERE id = :id AND tenant_id = :t AND person_id = :p",
                {**scope, "id": req.target.id},
            ).fetchone()
            if found is None:
                raise NotFound()
            claim_ids.add(req.target.id)
        else:
            table = "sources" if req.target.kind is TargetKind.SOURCE else "evidence"
            column = "id" if table == "sources" else "source_id"
            found = conn.execute(
                f"SELECT {column} FROM {table} WHERE id = :id AND tenant_id = :t"
                " AND person_id = :p",
                {**scope, "id": req.target.id},
            ).fetchone()
            if found is None:
                raise NotFound()
            source_ids.add(found[0])
            claim_ids.update(
                row[0]
                for row in conn.execute(
                    "SELECT DISTINCT ce.claim_id FROM evidence e JOIN claim_evidence ce"
                    " ON ce.evidence_id = e.id AND ce.tenant_id = :t AND ce.person_id = :p"
                    " WHERE e.source_id = :s AND e.tenant_id = :t AND e.person_id = :p",
                    {**scope, "s": found[0]},
                )
            )
        claim_ids = _correction_chain(conn, t, p, claim_ids)
        links = _objects(
            conn,
            "SELECT ce.claim_id, ce.evidence_id, ce.relation, ce.confidence_basis_points"
            " FROM json_each(:ids) AS j JOIN claim_evidence ce ON ce.claim_id = j.value"
            " AND ce.tenant_id = :t AND ce.person_id = :p"
            " ORDER BY ce.claim_id, ce.evidence_id",
            {**scope, "ids": _ids(claim_ids)},
            ("claim_id", "evidence_id", "relation", "confidence_basis_points"),
            relation=_unquote,
        )
        corrections = _objects(
            conn,
            "SELECT superseded_claim_id, claim_id, source_id, evidence_id, valid_at,"
            " recorded_at FROM corrections WHERE tenant_id = :t AND person_id = :p"
            " AND claim_id IN (SELECT value FROM json_each(:ids))"
            " ORDER BY recorded_at, valid_at, claim_id",
            {**scope, "ids": _ids(claim_ids)},
            (
                "superseded_claim_id",
                "claim_id",
                "source_id",
                "evidence_id",
                "valid_at",
                "recorded_at",
            ),
        )
        evidence_of_links = {link["evidence_id"] for link in links}
        source_ids.update(c["source_id"] for c in corrections)
        source_ids.update(
            row[0]
            for row in conn.execute(
                "SELECT DISTINCT e.source_id FROM json_each(:ids) AS j JOIN evidence e"
                " ON e.id = j.value AND e.tenant_id = :t AND e.person_id = :p",
                {**scope, "ids": _ids(evidence_of_links)},
            )
        )
        sources = [
            source_json(row)
            for row in conn.execute(
                f"SELECT {_SOURCE_COLUMNS} FROM json_each(:ids) AS j JOIN sources s"
                " ON s.id = j.value AND s.tenant_id = :t AND s.person_id = :p ORDER BY s.id",
                {**scope, "ids": _ids(source_ids)},
            )
        ]
        evidence = _evidence(conn, t, p, source_ids)
        claims = [
            claim_json(row)
            for row in conn.execute(
                f"SELECT {_CLAIM_COLUMNS} FROM json_each(:ids) AS j JOIN claims c"
                " ON c.id = j.value AND c.tenant_id = :t AND c.person_id = :p ORDER BY c.id",
                {**scope, "ids": _ids(claim_ids)},
            )
        ]
        evidence_ids = {row["id"] for row in evidence}
        profile_entries = _objects(
            conn,
            "SELECT id, key, value, stability, claim_id, recorded_at FROM profile_entries"
            " WHERE tenant_id = :t AND person_id = :p"
            " AND claim_id IN (SELECT value FROM json_each(:ids)) ORDER BY id",
            {**scope, "ids": _ids(claim_ids)},
            ("id", "key", "value", "stability", "claim_id", "recorded_at"),
            stability=_unquote,
        )
        reviews = _objects(
            conn,
            "SELECT r.id, r.day, r.summary, r.evidence_ids, r.recorded_at"
            " FROM daily_reviews r WHERE r.tenant_id = :t AND r.person_id = :p"
            " AND EXISTS (SELECT 1 FROM json_each(r.evidence_ids) AS cited"
            "  WHERE cited.value IN (SELECT value FROM json_each(:ids))) ORDER BY r.id",
            {**scope, "ids": _ids(evidence_ids)},
            ("id", "day", "summary", "evidence_ids", "recorded_at"),
            evidence_ids=json.loads,
        )
    return Trace(
        req.target, sources, evidence, claims, links, corrections, profile_entries, reviews
    )


def _correction_chain(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, start: set[str]
) -> set[str]:
    """``start`` and every claim connected to it by corrections, in either direction."""
    rows = conn.execute(
        """
        WITH RECURSIVE chain(id) AS (
          SELECT value FROM json_each(:ids)
          UNION
          SELECT CASE WHEN k.claim_id = chain.id THEN k.superseded_claim_id ELSE k.claim_id END
          FROM chain JOIN corrections k
            ON (k.claim_id = chain.id OR k.superseded_claim_id = chain.id)
           AND k.tenant_id = :t AND k.person_id = :p
        )
        SELECT id FROM chain
        """,
        {"ids": _ids(start), "t": tenant_id, "p": person_id},
    )
    return {row[0] for row in rows}


def _evidence(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, source_ids: set[str]
) -> list[dict[str, Any]]:
    """Every evidence row of the sources, with its locator; deleted quotes are ``null``."""
    out = []
    for row in conn.execute(
        "SELECT e.id, e.source_id, e.source_revision, e.quote, e.recorded_at, e.deleted_at,"
        " s.deleted_at, l.device_id, l.provider, l.stream_id, l.segment_id, l.start_ms,"
        " l.end_ms"
        " FROM json_each(:ids) AS j JOIN evidence e ON e.source_id = j.value"
        "  AND e.tenant_id = :t AND e.person_id = :p"
        " JOIN sources s ON s.id = e.source_id AND s.tenant_id = :t AND s.person_id = :p"
        " LEFT JOIN evidence_locators l ON l.evidence_id = e.id AND l.tenant_id = :t"
        "  AND l.person_id = :p ORDER BY e.id",
        {"ids": _ids(source_ids), "t": tenant_id, "p": person_id},
    ):
        live = row[5] is None and row[6] is None
        out.append(
            {
                "id": row[0],
                "source_id": row[1],
                "source_revision": row[2],
                "quote": row[3] if live else None,
                "recorded_at": row[4],
                "deleted_at": row[5],
                "locator": None
                if row[7] is None
                else dict(
                    zip(
                        ("device_id", "provider", "stream_id", "segment_id", "start_ms", "end_ms"),
                        row[7:13],
                        strict=True,
                    )
                ),
                "live": live,
            }
        )
    return out


# --------------------------------------------------------------------------- lookup


@functools.lru_cache(maxsize=4096)
def _fold(value: object) -> str | None:
    """``zkr_fold(x)``: search's folding (:func:`zkr.store.terms.fold`) of a stored text;
    cached, as one scope repeats few subjects and predicates. A non-text cell of a damaged file
    folds to NULL (it equals nothing)."""
    return fold(value) if isinstance(value, str) else None


_FOLDED = "AND zkr_fold(c.predicate) = :predicate AND zkr_fold(c.subject) = :subject"


def lookup(conn: sqlite3.Connection, req: LookupRequest) -> list[LookupClaim]:
    """The claims for ``(subject, predicate)`` that search could cite: live ones, or with
    ``as_of`` the ones visible at that (valid, recorded) point (spec/retrieval.md §4).

    Subject and predicate match after search's folding (:func:`zkr.store.terms.fold`: NFKC,
    Unicode case folding, combining accents removed: ``ÉLODIE`` = ``élodie`` = ``Elodie``,
    ``STRASSE`` = ``straße``), otherwise exactly. Each claim is returned with
    ``evidence_ids``: its live (or then-visible) supporting evidence, smallest id first; a claim
    with none is not returned, as search would not cite it. Newest ``valid_time.from`` first,
    then newest ``recorded_time.from``, then id. Several results mean several values hold at
    once (nothing superseded the older one).
    """
    require_scope(req.tenant_id, req.person_id)
    require_text(req.subject, "subject")
    require_text(req.predicate, "predicate")
    # PostgreSQL cannot call a Python function: the folding is compared on the scope's live
    # (visible) claims as they are read
    fold_in_python = is_postgres(conn)
    params: dict[str, Any] = {
        "t": req.tenant_id,
        "p": req.person_id,
        "subject": fold(req.subject),
        "predicate": fold(req.predicate),
    }
    if req.as_of is None:
        claim_rule = eligibility.live_claim("c")
        evidence_rule = f"{eligibility.live_evidence('e')} AND {eligibility.live_source('s')}"
    else:
        params["v"], params["r"] = req.as_of.valid_at, req.as_of.recorded_at
        claim_rule = eligibility.visible_claim("c")
        evidence_rule = f"{eligibility.evidence_as_of('e')} AND {eligibility.source_as_of('s')}"
    sql = f"""
    SELECT {_CLAIM_COLUMNS},
      (SELECT json_group_array(id) FROM (
         SELECT e.id FROM claim_evidence ce
         JOIN evidence e ON e.id = ce.evidence_id AND e.tenant_id = :t AND e.person_id = :p
         JOIN sources s ON s.id = e.source_id AND s.tenant_id = :t AND s.person_id = :p
         WHERE ce.claim_id = c.id AND ce.tenant_id = :t AND ce.person_id = :p
           AND {eligibility.supporting("ce")} AND {evidence_rule}
         ORDER BY e.id))
    FROM claims c
    WHERE c.tenant_id = :t AND c.person_id = :p
      AND {claim_rule}
      {"" if fold_in_python else _FOLDED}
    ORDER BY c.valid_from DESC, c.recorded_from DESC, c.id
    """
    out = []
    if not fold_in_python:
        conn.create_function("zkr_fold", 1, _fold, deterministic=True)
    with read_tx(conn):
        for row in conn.execute(sql, params):
            evidence_ids = json.loads(row[13])
            claim = claim_json(row)
            if fold_in_python and (
                _fold(claim["subject"]) != params["subject"]
                or _fold(claim["predicate"]) != params["predicate"]
            ):
                continue
            if evidence_ids:
                out.append(LookupClaim(claim, evidence_ids))
    return out


# --------------------------------------------------------------------------- browse

_RECORDS = ("all", "sources", "claims")
_CLAIM_FILTERS: dict[str, type[Tier] | type[Status] | type[ProcessingState]] = {
    "tier": Tier,
    "status": Status,
    "processing_state": ProcessingState,
}


def _sql_order(value: object) -> tuple[int, Any]:
    """SQLite's order of values of any storage class (NULL, numbers, text, blob), so a damaged
    file's odd cell sorts as SQLite would sort it instead of failing the comparison."""
    if value is None:
        return (0, 0)
    if isinstance(value, int | float):
        return (1, value)
    return (2, value) if isinstance(value, str) else (3, value)


def browse(conn: sqlite3.Connection, req: BrowseRequest) -> BrowsePage:
    """One page of the scope's sources and claims, newest recorded first (docs/inspect.md).

    Items are ordered by recorded time (a claim's ``recorded_time.from``) descending, then
    type (source before claim), then id descending; ``next`` is the cursor to pass as
    ``before`` for the following page, ``null`` on the last page. Filters: ``records``
    (all/sources/claims), ``kind`` (a source kind lists sources, a claim kind claims),
    ``tier``/``status``/``processing_state`` (claims only). Deleted sources are listed with
    ``text: null``; texts are capped at 4096 bytes like excerpts. ``limit`` is bounded as
    elsewhere (0 means 20 here, at most 100).
    """
    require_scope(req.tenant_id, req.person_id)
    if req.records not in _RECORDS:
        raise InvalidInput(f"records must be one of {', '.join(_RECORDS)}")
    if req.before is not None and req.before.type not in ("source", "claim"):
        # any other type would bound both lists as "the other type": a page that skips or
        # repeats items instead of an error
        raise InvalidInput("before.type must be one of source, claim")
    params: dict[str, Any] = {"t": req.tenant_id, "p": req.person_id}
    want_sources = req.records in ("all", "sources")
    want_claims = req.records in ("all", "claims")
    source_where = ["tenant_id = :t", "person_id = :p"]
    claim_where = ["tenant_id = :t", "person_id = :p"]
    if req.kind is not None:
        if req.kind in SourceKind.__members__.values():
            want_claims = False
            source_where.append("kind = :source_kind")
            params["source_kind"] = json.dumps(req.kind)
        elif req.kind in ClaimKind.__members__.values():
            want_sources = False
            claim_where.append("kind = :claim_kind")
            params["claim_kind"] = req.kind
        else:
            raise InvalidInput(f"kind {req.kind} is neither a source kind nor a claim kind")
    for name, enum in _CLAIM_FILTERS.items():
        value = getattr(req, name)
        if value is None:
            continue
        if value not in enum.__members__.values():
            allowed = ", ".join(member.value for member in enum)
            raise InvalidInput(f"{name} must be one of {allowed}")
        want_sources = False
        claim_where.append(f"{name} = :{name}")
        params[name] = value
    limit = 20 if req.limit == 0 else bounded_limit(req.limit)
    params["n"] = limit + 1
    # Each list is read newest first along its zkr recorded-time index (store/indexes.py:
    # zkr_sources_recorded, zkr_claims_recorded), at most limit + 1 rows, then the two are
    # merged here: no sort of the scope. A type is constant within its list, so the cursor
    # (at, type, id) < before becomes (at, id) < (before.at, before.id) for the cursor's own
    # type, and at < before.at (sources, after a claim) or at <= before.at (claims, after a
    # source) for the other: source sorts after claim (type DESC puts sources first).
    arms: list[tuple[str, str]] = []
    if want_sources:
        arms.append(("source", "SELECT recorded_at, id FROM sources"))
    if want_claims:
        arms.append(("claim", "SELECT recorded_from, id FROM claims"))
    page: list[tuple[int, str, str]] = []
    queries = []
    for kind, select in arms:
        column = "recorded_at" if kind == "source" else "recorded_from"
        where = list(source_where if kind == "source" else claim_where)
        if req.before is not None:
            params.update(b_at=req.before.recorded_at, b_id=req.before.id)
            if req.before.type == kind:
                where.append(f"({column}, id) < (:b_at, :b_id)")
            else:
                where.append(f"{column} {'<' if kind == 'source' else '<='} :b_at")
        order = f"ORDER BY {column} DESC, id DESC LIMIT :n"
        queries.append((kind, f"{select} WHERE {' AND '.join(where)} {order}"))
    items: list[dict[str, Any]] = []
    with read_tx(conn):
        for kind, sql in queries:
            page.extend((at, kind, id_) for at, id_ in conn.execute(sql, params))
        page.sort(key=lambda row: (_sql_order(row[0]), row[1], _sql_order(row[2])), reverse=True)
        del page[limit + 1 :]
        for at, kind, id_ in page[:limit]:
            if kind == "source":
                row = conn.execute(
                    f"SELECT {_SOURCE_COLUMNS} FROM sources s"
                    " WHERE s.id = ? AND s.tenant_id = ? AND s.person_id = ?",
                    (id_, req.tenant_id, req.person_id),
                ).fetchone()
                record = source_json(row)
                text = record.pop("content")
                items.append(
                    {
                        "type": "source",
                        "recorded_at": at,
                        **record,
                        "text": None if text is None else cap_excerpt(text),
                    }
                )
            else:
                row = conn.execute(
                    f"SELECT {_CLAIM_COLUMNS} FROM claims c"
                    " WHERE c.id = ? AND c.tenant_id = ? AND c.person_id = ?",
                    (id_, req.tenant_id, req.person_id),
                ).fetchone()
                record = claim_json(row)
                text = f"{record['subject']} {record['predicate']} {record['value']}"
                items.append(
                    {"type": "claim", "recorded_at": at, **record, "text": cap_excerpt(text)}
                )
    more = len(page) > limit
    last = page[limit - 1] if more else None
    return BrowsePage(items, None if last is None else BrowseCursor(last[0], last[1], last[2]))


CAPTURE_TIMES_SQL = (
    "SELECT e.id, s.captured_at, e.tenant_id, e.person_id FROM evidence e"
    " JOIN sources s ON s.id = e.source_id AND s.tenant_id = e.tenant_id"
    " AND s.person_id = e.person_id"
    # by id alone, the scope checked on the rows: with the scope in the WHERE clause and bound
    # ids the planner walked the whole scope through zkr_evidence_by_source_live (61 ms a
    # context block at 100k sources) instead of looking each id up in evidence's primary key
    " WHERE e.id IN ({marks})"
)
"""Capture time of each cited evidence (:func:`capture_times`); ``{marks}`` is one ``?`` per id."""


def capture_times(
    conn: sqlite3.Connection, tenant_id: str, person_id: str, evidence_ids: list[str]
) -> dict[str, int]:
    """When the capture each evidence quotes was made: ``{evidence_id: captured_at}`` (integer
    Unix seconds, the source's ``captured_at``) for the ids given that exist in the scope, live
    or not (the caller asks about evidence a pack just cited). The context block dates its
    memory lines with it (:mod:`zkr.context`), so a model can tell an old turn from a newer
    one that changed it. One indexed read; an empty list reads nothing."""
    require_scope(tenant_id, person_id)
    wanted = sorted(set(evidence_ids))
    if not wanted:
        return {}
    marks = ", ".join("?" for _ in wanted)
    with read_tx(conn):
        rows = conn.execute(CAPTURE_TIMES_SQL.format(marks=marks), wanted).fetchall()
    return {str(row[0]): int(row[1]) for row in rows if (row[2], row[3]) == (tenant_id, person_id)}
