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

Replicas: no feed record kind can say "erased" (the reference would reject a new kind), so erase
does not travel. It is deterministic on tombstones, which do travel: running ``erase`` on each
replica once the deletions have been applied erases the same text there. A replica that has not
erased and re-reads rewritten pages from the start sees a changed source payload and fails with
the usual ``conflicts with the stored source payload``: erase the replica first.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from zkr.codec import canonical
from zkr.errors import InvalidInput
from zkr.model import EraseReport, EraseRequest
from zkr.store import search_index
from zkr.store.db import read_tx, write_tx
from zkr.store.derived import drop_fts_of, optimize_fts
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
        "  WHERE id IN (SELECT value FROM json_each(:sources))), 0)"
        " + COALESCE((SELECT SUM(length(CAST(quote AS BLOB))) FROM evidence"
        "  WHERE id IN (SELECT value FROM json_each(:evidence))), 0)"
        " + COALESCE((SELECT SUM(length(CAST(subject || predicate || value AS BLOB)))"
        "  FROM claims WHERE id IN (SELECT value FROM json_each(:claims))), 0)",
        params,
    ).fetchone()
    events = _affected_events(conn, params)
    return {
        "sources": sources,
        "evidence": evidence,
        "claims": claims,
        "events": events,
        "text_bytes": text_bytes,
    }


def _affected_events(conn: sqlite3.Connection, params: dict[str, Any]) -> list[tuple[int, int]]:
    """(commit_sequence, event_index) of every stored payload holding erased text."""
    sql = """
    SELECT ev.commit_sequence, ev.event_index
    FROM memory_export_events ev JOIN memory_commits mc ON mc.sequence = ev.commit_sequence
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
    return [(row[0], row[1]) for row in conn.execute(sql, params)]


def _blank(payload: str) -> str:
    """The canonical payload with its text fields blanked (field order kept)."""
    envelope = json.loads(payload)
    record = envelope["record"]
    kind = envelope["kind"]
    if kind == "source":
        record["source"]["content"] = ""
    elif kind == "evidence":
        record["evidence"]["quote"] = ""
    elif kind == "claim":
        record.update(subject="", predicate="", value="")
    elif kind == "profile":
        record.update(key="", value="")
    elif kind == "daily_review":
        record["summary"] = ""
    return canonical(envelope)


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


def erase(conn: sqlite3.Connection, req: EraseRequest) -> EraseReport:
    """Erase (or with ``dry_run`` report) the text of tombstoned sources; see the module doc.

    Returns an :class:`~zkr.model.EraseReport` (``dry_run``, ``source_ids``, counts) and, when
    erasing, ``wal_truncated`` (false when another connection kept the WAL in use: run again or
    checkpoint later to drop the old copies from it). Raises ``InvalidInput`` when a named
    source is not in scope or not deleted.
    """
    require_scope(req.tenant_id, req.person_id)
    if req.dry_run:
        with read_tx(conn):
            return _report(_collect(conn, req), True)
    (previous,) = conn.execute("PRAGMA secure_delete").fetchone()
    conn.execute("PRAGMA secure_delete = ON")
    try:
        with write_tx(conn):
            found = _collect(conn, req)
            params = {
                "t": req.tenant_id,
                "p": req.person_id,
                "sources": _ids(found["sources"]),
                "evidence": _ids(found["evidence"]),
                "claims": _ids(found["claims"]),
            }
            conn.execute(
                "UPDATE sources SET content = ''"
                " WHERE id IN (SELECT value FROM json_each(:sources))",
                params,
            )
            conn.execute(
                "UPDATE evidence SET quote = ''"
                " WHERE id IN (SELECT value FROM json_each(:evidence))",
                params,
            )
            conn.execute(
                "UPDATE claims SET subject = '', predicate = '', value = ''"
                " WHERE id IN (SELECT value FROM json_each(:claims))",
                params,
            )
            conn.execute(
                "DELETE FROM profile_entries WHERE tenant_id = :t AND person_id = :p"
                " AND claim_id IN (SELECT value FROM json_each(:claims))",
                params,
            )
            drop_fts_of(conn, found["sources"])
            conn.execute(
                "DELETE FROM embeddings WHERE tenant_id = :t AND person_id = :p AND ("
                " (target_kind = 'source' AND target_id IN (SELECT value FROM json_each(:sources)))"
                " OR (target_kind = 'evidence'"
                "  AND target_id IN (SELECT value FROM json_each(:evidence)))"
                " OR (target_kind = 'claim'"
                "  AND target_id IN (SELECT value FROM json_each(:claims))))",
                params,
            )
            for sequence, index in found["events"]:
                (payload,) = conn.execute(
                    "SELECT payload FROM memory_export_events"
                    " WHERE commit_sequence = ? AND event_index = ?",
                    (sequence, index),
                ).fetchone()
                conn.execute(
                    "UPDATE memory_export_events SET payload = ?"
                    " WHERE commit_sequence = ? AND event_index = ?",
                    (_blank(payload), sequence, index),
                )
            if found["sources"]:
                # Merge FTS segments so no index page keeps the erased terms; zkr's own
                # search index is rebuildable, so it is dropped and rebuilt on the next search.
                optimize_fts(conn)
                search_index.drop(conn)
    finally:
        conn.execute(f"PRAGMA secure_delete = {int(previous)}")
    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return _report(found, False, busy == 0)
