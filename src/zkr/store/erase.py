"""``erase``: remove the text of deleted sources from the file for good (docs/erase.md).

``delete`` tombstones a source but, as in the reference, keeps its text in ``sources.content``,
in its evidence quotes, and in the feed's payloads (spec/lifecycle.md §5 item 16). ``erase``
blanks that text (to ``""``; the columns are NOT NULL) everywhere zkr keeps it:

* ``sources.content`` and the evidence ``quote`` of each chosen tombstoned source;
* the text (subject, predicate, value) of claims that are no longer accepted and whose every
  evidence link points at erased evidence (what was extracted from the erased text);
* the FTS rows of those sources, their embeddings (sources, evidence, claims), the profile
  entries those claims still back, and zkr's rebuildable search index (dropped; the next search
  rebuilds it from what is left);
* the feed: every stored payload that holds that text (source, evidence and claim records,
  ``profile`` records of erased claims, ``daily_review`` records citing erased evidence) is
  re-serialised canonically with the text blanked; ids, times and record counts are kept, so
  sequences, event counts and export paging do not change.

The transaction runs with ``PRAGMA secure_delete`` on (freed bytes are zeroed), the FTS index is
merged (``optimize``) so its segments drop the erased terms, and afterwards the WAL is
checkpointed and truncated, so no byte of the erased text is left in the file or its WAL
(tests/test_erase.py scans both). ``dry_run`` (the default) reports what would be erased and
writes nothing.

Replicas (docs/erase.md "Replicas"): no feed record kind can say "erased" (the reference would
reject a new kind), so erase travels as blanked copies of records peers already hold:

* ``propagate`` (default true) appends **one commit** holding the blanked current ``source``
  record of every source whose text this call removed (``recorded_at``: their latest
  ``deleted_at``), so replicas following the feed by cursor see the erasure;
* :func:`erase_blanked` is ``apply``'s side: before a batch is applied, a blank-shaped record
  (``records.blank_shaped``) whose stored row in scope still holds text, under a tombstoned
  source, makes this replica erase those sources first (same rules, its own propagation
  commit), so the blanked copy then matches the stored row instead of conflicting. ``apply``
  erases nothing where the reference would accept the record, only where it would refuse it
  as a conflict.
* erase ledgers, for every stored payload it blanks, the hash of the original and of the
  blanked form (``memory_applied_records``): a copy of either that comes back later (an echo,
  a re-read of rewritten pages, another replica's propagation commit) is a ledger hit, not a
  conflict or a revived row.

A replica still holding the source *live* cannot erase it (the deletion has not reached it);
a blanked copy then conflicts as before, until the deletion has been applied.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from zkr.codec import canonical
from zkr.errors import InvalidInput
from zkr.model import EraseReport, EraseRequest
from zkr.store import feed, search_index
from zkr.store.db import read_tx, write_tx
from zkr.store.derived import drop_fts_of, optimize_fts
from zkr.store.driver import is_postgres
from zkr.store.feed import Record
from zkr.store.records import blank, hash_payload, record_identity, text_fields
from zkr.text import require_scope


def _ids(values: list[str]) -> str:
    return json.dumps(values)


def _collect(conn: sqlite3.Connection, req: EraseRequest) -> dict[str, Any]:
    """What would be erased: ids, counts and text bytes (read inside the caller's tx)."""
    scope = {"t": req.tenant_id, "p": req.person_id}
    if req.source_ids is None:
        sources = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM sources WHERE tenant_id = :t AND person_id = :p"
                " AND deleted_at IS NOT NULL ORDER BY id",
                scope,
            )
        ]
    else:
        sources = sorted(set(req.source_ids))
        rows = dict(
            conn.execute(
                "SELECT s.id, s.deleted_at FROM json_each(:ids) AS j JOIN sources s"
                " ON s.id = j.value AND s.tenant_id = :t AND s.person_id = :p",
                {**scope, "ids": _ids(sources)},
            ).fetchall()
        )
        for source_id in sources:
            if source_id not in rows:
                raise InvalidInput(f"source {source_id} is not in scope")
            if rows[source_id] is None:
                raise InvalidInput(f"source {source_id} is not deleted (delete it first)")
    params = {**scope, "sources": _ids(sources)}
    evidence = [
        row[0]
        for row in conn.execute(
            "SELECT e.id FROM json_each(:sources) AS j JOIN evidence e ON e.source_id = j.value"
            " AND e.tenant_id = :t AND e.person_id = :p ORDER BY e.id",
            params,
        )
    ]
    params["evidence"] = _ids(evidence)
    # Claims extracted from the erased text: not accepted, at least one link, and every link
    # to erased evidence.
    claims = [
        row[0]
        for row in conn.execute(
            "SELECT c.id FROM claims c WHERE c.tenant_id = :t AND c.person_id = :p"
            " AND c.status <> 'accepted'"
            " AND EXISTS (SELECT 1 FROM claim_evidence ce WHERE ce.claim_id = c.id"
            "  AND ce.tenant_id = :t AND ce.person_id = :p)"
            " AND NOT EXISTS (SELECT 1 FROM claim_evidence ce WHERE ce.claim_id = c.id"
            "  AND ce.tenant_id = :t AND ce.person_id = :p"
            "  AND ce.evidence_id NOT IN (SELECT value FROM json_each(:evidence)))"
            " ORDER BY c.id",
            params,
        )
    ]
    params["claims"] = _ids(claims)
    (text_bytes,) = conn.execute(
        "SELECT COALESCE((SELECT SUM(length(CAST(content AS BLOB))) FROM sources"
        "  WHERE tenant_id = :t AND person_id = :p"
        "  AND id IN (SELECT value FROM json_each(:sources))), 0)"
        " + COALESCE((SELECT SUM(length(CAST(quote AS BLOB))) FROM evidence"
        "  WHERE tenant_id = :t AND person_id = :p"
        "  AND id IN (SELECT value FROM json_each(:evidence))), 0)"
        " + COALESCE((SELECT SUM(length(CAST(subject || predicate || value AS BLOB)))"
        "  FROM claims WHERE tenant_id = :t AND person_id = :p"
        "  AND id IN (SELECT value FROM json_each(:claims))), 0)",
        params,
    ).fetchone()
    # Sources this call takes text from (their content, a quote, or an erasable claim's text):
    # the ones the propagation commit carries. A second erase finds none.
    fresh = [
        row[0]
        for row in conn.execute(
            "SELECT s.id FROM sources s WHERE s.tenant_id = :t AND s.person_id = :p"
            " AND s.id IN (SELECT value FROM json_each(:sources))"
            " AND (s.content <> ''"
            "  OR EXISTS (SELECT 1 FROM evidence e WHERE e.tenant_id = :t AND e.person_id = :p"
            "   AND e.source_id = s.id AND e.quote <> '')"
            "  OR EXISTS (SELECT 1 FROM evidence e"
            "   JOIN claim_evidence ce ON ce.evidence_id = e.id"
            "   AND ce.tenant_id = :t AND ce.person_id = :p"
            "   JOIN claims c ON c.id = ce.claim_id AND c.tenant_id = :t AND c.person_id = :p"
            "   WHERE e.tenant_id = :t AND e.person_id = :p AND e.source_id = s.id"
            "   AND c.id IN (SELECT value FROM json_each(:claims))"
            "   AND (c.subject <> '' OR c.predicate <> '' OR c.value <> '')))"
            " ORDER BY s.id",
            params,
        )
    ]
    events = _affected_events(conn, params)
    return {
        "sources": sources,
        "evidence": evidence,
        "claims": claims,
        "fresh": fresh,
        "events": events,
        "text_bytes": text_bytes,
    }


def _affected_events(
    conn: sqlite3.Connection, params: dict[str, Any]
) -> list[tuple[int, int, str]]:
    """(commit_sequence, event_index, payload) of every stored payload holding erased text
    (the join is the scope's own on PostgreSQL, where events carry their commit's scope)."""
    sql = """
    SELECT ev.commit_sequence, ev.event_index, ev.payload
    FROM memory_export_events ev JOIN memory_commits mc ON ev.commit_sequence = mc.sequence
    WHERE mc.tenant_id = :t AND mc.person_id = :p AND (
      (json_extract(ev.payload, '$.kind') = 'source'
        AND json_extract(ev.payload, '$.record.source.id') IN
            (SELECT value FROM json_each(:sources)))
      OR (json_extract(ev.payload, '$.kind') = 'evidence'
        AND json_extract(ev.payload, '$.record.evidence.id') IN
            (SELECT value FROM json_each(:evidence)))
      OR (json_extract(ev.payload, '$.kind') = 'claim'
        AND json_extract(ev.payload, '$.record.id') IN (SELECT value FROM json_each(:claims)))
      OR (json_extract(ev.payload, '$.kind') = 'profile'
        AND json_extract(ev.payload, '$.record.claim_id') IN
            (SELECT value FROM json_each(:claims)))
      OR (json_extract(ev.payload, '$.kind') = 'daily_review'
        AND EXISTS (SELECT 1 FROM json_each(ev.payload, '$.record.evidence_ids') AS cited
                    WHERE cited.value IN (SELECT value FROM json_each(:evidence)))))
    ORDER BY ev.commit_sequence, ev.event_index
    """
    return [(row[0], row[1], row[2]) for row in conn.execute(sql, params)]


def _blank(payload: str) -> str:
    """The canonical payload with its text fields blanked (field order kept)."""
    return canonical(blank(json.loads(payload)))


def _report(found: dict[str, Any], dry_run: bool, wal_truncated: bool | None = None) -> EraseReport:
    return EraseReport(
        dry_run=dry_run,
        source_ids=found["sources"],
        evidence=len(found["evidence"]),
        claims=len(found["claims"]),
        feed_records=len(found["events"]),
        text_bytes=found["text_bytes"],
        wal_truncated=wal_truncated,
    )


# A hash already in the ledger stays as it is (spec/sync.md §2 layout: one row per payload hash
# in scope). Written as an upsert that both SQLite and PostgreSQL read the same way.
_LEDGER_INSERT = (
    "INSERT INTO memory_applied_records (tenant_id, person_id, record_kind,"
    " record_id, payload_hash, applied_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)


def _ledger(
    conn: sqlite3.Connection, tenant: str, person: str, payloads: Iterable[str], now: int
) -> None:
    """Ledger rows (spec/sync.md §2 layout) for stored payloads, so a copy arriving later is a
    ledger hit (§4.3 step 3) rather than a conflict with the blanked row."""
    rows = []
    for payload in payloads:
        kind, record_id = record_identity(json.loads(payload))
        rows.append((tenant, person, kind, record_id, hash_payload(payload), now))
    conn.executemany(_LEDGER_INSERT, rows)


def _write(
    conn: sqlite3.Connection, tenant: str, person: str, found: dict[str, Any], propagate: bool
) -> None:
    """Blank what ``_collect`` found, inside the caller's write transaction (secure_delete on)."""
    params = {
        "t": tenant,
        "p": person,
        "sources": _ids(found["sources"]),
        "evidence": _ids(found["evidence"]),
        "claims": _ids(found["claims"]),
    }
    (now,) = conn.execute("SELECT unixepoch()").fetchone()
    conn.execute(
        "UPDATE sources SET content = '' WHERE tenant_id = :t AND person_id = :p"
        " AND id IN (SELECT value FROM json_each(:sources))",
        params,
    )
    conn.execute(
        "UPDATE evidence SET quote = '' WHERE tenant_id = :t AND person_id = :p"
        " AND id IN (SELECT value FROM json_each(:evidence))",
        params,
    )
    conn.execute(
        "UPDATE claims SET subject = '', predicate = '', value = ''"
        " WHERE tenant_id = :t AND person_id = :p"
        " AND id IN (SELECT value FROM json_each(:claims))",
        params,
    )
    conn.execute(
        "DELETE FROM profile_entries WHERE tenant_id = :t AND person_id = :p"
        " AND claim_id IN (SELECT value FROM json_each(:claims))",
        params,
    )
    drop_fts_of(conn, tenant, person, found["sources"])
    conn.execute(
        "DELETE FROM embeddings WHERE tenant_id = :t AND person_id = :p AND ("
        " (target_kind = 'source' AND target_id IN (SELECT value FROM json_each(:sources)))"
        " OR (target_kind = 'evidence'"
        "  AND target_id IN (SELECT value FROM json_each(:evidence)))"
        " OR (target_kind = 'claim'"
        "  AND target_id IN (SELECT value FROM json_each(:claims))))",
        params,
    )
    kept: list[str] = []
    for sequence, index, payload in found["events"]:
        blanked = _blank(payload)
        kept += (payload, blanked)
        feed.rewrite_event(conn, tenant, person, sequence, index, blanked)
    _ledger(conn, tenant, person, kept, now)
    if found["fresh"] and propagate:
        records = [
            feed.source_record(conn, source_id, (tenant, person)) for source_id in found["fresh"]
        ]
        recorded_at = max(record["record"]["source"]["deleted_at"] for record in records)
        feed.append_commit(conn, tenant, person, recorded_at, records)
        _ledger(conn, tenant, person, (canonical(record) for record in records), now)
    if found["sources"]:
        # Merge FTS segments so no index page keeps the erased terms; zkr's own
        # search index is rebuildable, so it is dropped and rebuilt on the next search.
        optimize_fts(conn)
        if is_postgres(conn):  # re-index the scope's blanked documents now
            from zkr.store.pg import search as pg_search

            pg_search.drain(conn, tenant, person)  # type: ignore[arg-type]
        else:
            search_index.drop(conn)


@contextmanager
def secure_delete(conn: sqlite3.Connection) -> Iterator[None]:
    """``PRAGMA secure_delete = ON`` for the block (freed cells and pages are zeroed), then the
    connection's previous setting. Allowed inside a transaction."""
    (previous,) = conn.execute("PRAGMA secure_delete").fetchone()
    conn.execute("PRAGMA secure_delete = ON")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA secure_delete = {int(previous)}")


def truncate_wal(conn: sqlite3.Connection) -> bool:
    """Checkpoint and truncate the WAL (it holds the earlier page images); false when another
    connection keeps it in use."""
    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return bool(busy == 0)


def erase(conn: sqlite3.Connection, req: EraseRequest) -> EraseReport:
    """Erase (or with ``dry_run`` report) the text of tombstoned sources; see the module doc.

    Returns an :class:`~zkr.model.EraseReport` (``dry_run``, ``source_ids``, counts) and, when
    erasing, ``wal_truncated`` (false when another connection kept the WAL in use: run again or
    checkpoint later to drop the old copies from it). With ``propagate`` (default) a commit of
    the blanked source records is appended for replicas. Raises ``InvalidInput`` when a named
    source is not in scope or not deleted.
    """
    require_scope(req.tenant_id, req.person_id)
    if req.dry_run:
        with read_tx(conn):
            return _report(_collect(conn, req), True)
    with secure_delete(conn), write_tx(conn, (req.tenant_id, req.person_id)):
        found = _collect(conn, req)
        _write(conn, req.tenant_id, req.person_id, found, req.propagate)
    return _report(found, False, truncate_wal(conn))


# --------------------------------------------------------------------------- apply's side

# The tombstoned sources behind a blank-shaped record whose stored row (in scope) still holds
# the text it blanks: the records the reference's apply would refuse as a conflict
# (spec/sync.md §4.5: source content, evidence quote, claim text, a profile's backing claim,
# a review's summary). :t/:p scope, :id the record's id (for a profile, its claim_id).
_LINKED = (
    "SELECT e.source_id FROM claims c"
    " JOIN claim_evidence ce ON ce.claim_id = c.id AND ce.tenant_id = :t AND ce.person_id = :p"
    " JOIN evidence e ON e.id = ce.evidence_id AND e.tenant_id = :t AND e.person_id = :p"
    " WHERE c.id = :id AND c.tenant_id = :t AND c.person_id = :p"
)
_BEHIND = {
    "source": "SELECT s.id FROM sources s WHERE s.id = :id AND s.tenant_id = :t"
    " AND s.person_id = :p AND s.content <> ''",
    "evidence": "SELECT e.source_id FROM evidence e WHERE e.id = :id AND e.tenant_id = :t"
    " AND e.person_id = :p AND e.quote <> ''",
    "claim": f"{_LINKED} AND (c.subject <> '' OR c.predicate <> '' OR c.value <> '')",
    "profile": f"{_LINKED} AND (c.predicate <> '' OR c.value <> '')",
    "daily_review": "SELECT e.source_id FROM daily_reviews r, json_each(r.evidence_ids) j"
    " JOIN evidence e ON e.id = j.value AND e.tenant_id = :t AND e.person_id = :p"
    " WHERE r.id = :id AND r.tenant_id = :t AND r.person_id = :p AND r.summary <> ''",
}


def _record_id(record: Record) -> str:
    """The row id a blank-shaped record's text lives in (a profile's: its backing claim)."""
    body = record["record"]
    kind = record["kind"]
    if kind == "source" or kind == "evidence":
        return str(body[kind]["id"])
    return str(body["claim_id"] if kind == "profile" else body["id"])


def erase_blanked(
    conn: sqlite3.Connection, tenant: str, person: str, records: list[Record]
) -> bool:
    """``apply``'s side of erase, inside its write transaction before the batch is applied.

    ``records`` are the batch's blank-shaped records (``records.blank_shaped``). The tombstoned
    sources in scope behind those whose stored row still holds text are erased here, with their
    own propagation commit, so the blanked copies match what is stored. Returns whether
    anything was erased (the caller then truncates the WAL).
    """
    sources: set[str] = set()
    for record in records:
        params = {"t": tenant, "p": person, "id": _record_id(record)}
        sources.update(row[0] for row in conn.execute(_BEHIND[record["kind"]], params))
    if not sources:
        return False
    tombstoned = [
        row[0]
        for row in conn.execute(
            "SELECT s.id FROM json_each(?) j JOIN sources s ON s.id = j.value"
            " AND s.tenant_id = ? AND s.person_id = ? AND s.deleted_at IS NOT NULL",
            (_ids(sorted(sources)), tenant, person),
        )
    ]
    if not tombstoned:
        return False
    found = _collect(conn, EraseRequest(tenant, person, sorted(tombstoned), dry_run=False))
    if found["text_bytes"] == 0:
        return False
    _write(conn, tenant, person, found, propagate=True)
    return True


# The text a stored row holds for a record's blanked fields, in ``records.ERASABLE_TEXT``
# order (a profile's text is its backing claim's predicate and value, spec/sync.md §4.5).
_STORED_TEXT = {
    "source": "SELECT content FROM sources WHERE id = :id AND tenant_id = :t AND person_id = :p",
    "evidence": "SELECT quote FROM evidence WHERE id = :id AND tenant_id = :t AND person_id = :p",
    "claim": "SELECT subject, predicate, value FROM claims"
    " WHERE id = :id AND tenant_id = :t AND person_id = :p",
    "profile": "SELECT predicate, value FROM claims"
    " WHERE id = :id AND tenant_id = :t AND person_id = :p",
    "daily_review": "SELECT summary FROM daily_reviews"
    " WHERE id = :id AND tenant_id = :t AND person_id = :p",
}


def restore_text(conn: sqlite3.Connection, tenant: str, person: str, record: Record) -> Record:
    """A blank-shaped record as ``apply``'s kind rules should see it: when the stored row (in
    scope) still holds the text, a copy carrying that text, else ``record`` itself.

    Feed records never change their text (§4.5 compares it), so a blanked copy agrees with the
    record it was blanked from on everything else; applied with the text put back it passes
    or fails exactly as that record would. Its ledger row and feed payload stay the blanked
    ones (``apply`` never appends text it is about to erase).
    """
    params = {"t": tenant, "p": person, "id": _record_id(record)}
    row = conn.execute(_STORED_TEXT[record["kind"]], params).fetchone()
    if row is None or not any(row):
        return record
    restored: Record = json.loads(canonical(record))
    for value, (target, name) in zip(row, text_fields(restored), strict=True):
        target[name] = value
    return restored
